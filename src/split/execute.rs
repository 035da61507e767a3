//! Running a split: validate → plan (pure) → write children into staging → check the key
//! fingerprint and every child → publish. Nothing outside staging is written until every
//! check passed; any error removes staging.

use std::fs;
use std::path::{Path, PathBuf};

use super::child::{child_statistics, IndexSide};
use super::data::{self, DataResult, ParentData};
use super::plan::{self, ChildPlan, Geometry, Grouper, Layout, PlannedChild, Prediction};
use super::publish::{self, Publish};
use super::spec::{validate_boundaries, Cut, Label, RepairTriple};
use crate::io::reflink::{self, ReflinkSupport};
use crate::sstable::checksum::Digest;
use crate::sstable::compression::{Codec, CompressionInfo};
use crate::sstable::filter::BloomFilter;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::table::CheckLevel;
use crate::sstable::{hex, Component, Descriptor, FormatError, SSTable, SSTableId, Toc};

/// Everything that can stop a split; the variant names the class of failure (they label
/// metrics in the operator).
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The request itself is wrong (boundaries, ranges, options).
    #[error("invalid split request: {0}")]
    Invalid(String),
    /// The environment does not allow it (another filesystem, a live Cassandra, …).
    #[error("refused: {0}")]
    Refused(String),
    /// The children do not add up to the parent: nothing was published.
    #[error("check failed, nothing published: {0}")]
    Check(String),
    /// Locks, the transaction log, staging and the renames (`publish`).
    #[error(transparent)]
    Publish(#[from] publish::PublishError),
}

impl SplitError {
    pub fn label(&self) -> &'static str {
        match self {
            SplitError::Format(e) => e.kind(),
            SplitError::Invalid(_) => "invalid",
            SplitError::Refused(_) => "refused",
            SplitError::Check(_) => "check",
            SplitError::Publish(e) => match e.reason() {
                crate::reason::Reason::Busy => "busy",
                _ => "publish",
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum DigestPolicy {
    /// No Digest.crc32 (TOC omits it): fastest; `nodetool verify` then takes the extended
    /// path, which rejects a dead prefix.
    Off,
    /// CRC32 of the child file derived from the chunk CRC trailers (reads 4 bytes a chunk).
    Combine,
    /// CRC32 of the child file read back in full.
    Full,
}

#[derive(Debug, Clone)]
pub struct SplitOptions {
    pub cut: Cut,
    /// `None` = auto: `aligned`, falling back per child.
    pub layout: Option<Layout>,
    /// `--target-data-access standard`: readers never mmap Data.db, so `padded` is allowed.
    pub allow_padded: bool,
    pub digest: DigestPolicy,
    /// Anticompaction runs touching fewer chunks than this merge into one `regrid` child per label.
    pub merge_below_chunks: u64,
    pub out_dir: PathBuf,
    pub publish: Publish,
    pub dry_run: bool,
    /// The transaction-log operation name for `Replace`.
    pub operation: String,
}

#[derive(Debug, Clone, Copy)]
pub enum Progress {
    /// Index.db bytes of a pass (plan = 1, write = 2).
    Index {
        pass: u8,
        bytes: u64,
        total: u64,
    },
    ChildDone {
        index: usize,
        total: usize,
    },
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ChildReport {
    pub path: PathBuf,
    pub partitions: u64,
    pub first_token: String,
    pub last_token: String,
    #[serde(serialize_with = "crate::sstable::hex::serialize")]
    pub first_key: Vec<u8>,
    #[serde(serialize_with = "crate::sstable::hex::serialize")]
    pub last_key: Vec<u8>,
    pub data_length: u64,
    pub data_file_bytes: u64,
    pub dead_prefix: u64,
    pub layout: Layout,
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
    pub fallback_reason: Option<String>,
    pub label: Option<Label>,
    pub repaired_at: Option<i64>,
    pub pending_repair: Option<String>,
    pub is_transient: Option<bool>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub parent: Fingerprint,
    pub children: Fingerprint,
    pub ok: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SplitReport {
    pub parent: PathBuf,
    pub dry_run: bool,
    pub publish: Publish,
    pub reflink: String,
    pub children: Vec<ChildReport>,
    pub plan: Vec<ChildPlan>,
    pub check: Check,
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
    /// `/proc/self/io` read_bytes / write_bytes during the split (device-level).
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// What publication could not clean up after the children went live (files of the
    /// parent, the log, staging), each with the obstacle; empty on a clean run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_behind: Vec<String>,
}

/// Removes the staging directory unless the split got as far as publishing.
struct StagingGuard(Option<PathBuf>);

impl Drop for StagingGuard {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = fs::remove_dir_all(&d);
            if let Some(p) = d.parent() {
                let _ = crate::io::fs::sync_dir(p);
            }
        }
    }
}

fn uuid_string(b: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*b).hyphenated().to_string()
}

/// The grid unit: chunk length, or the CRC.db block for uncompressed parents.
fn grid_unit(t: &SSTable, crc_unit: Option<u64>) -> u64 {
    t.compression
        .as_ref()
        .map_or(crc_unit.unwrap_or(64 * 1024), |c| c.chunk_length as u64)
}

/// Checks that do not need the index: supported components and codec, cut sanity, target
/// directory on the parent's filesystem, and for `Replace` the table directory and no live
/// Cassandra.
fn validate(t: &SSTable, opts: &SplitOptions) -> Result<(), SplitError> {
    if let Some((c, _)) = t.files.iter().find(|(c, _)| c.is_secondary_index()) {
        return Err(SplitError::Invalid(format!(
            "{} has secondary-index component {}: per-sstable indexes (SAI/SASI) index the parent's row positions and cannot be carried to children; rebuild them after splitting",
            t.path(&Component::Data).display(),
            c.file_name()
        )));
    }
    if let Some(ci) = &t.compression {
        if matches!(ci.codec(), Codec::Zstd | Codec::Unknown) {
            return Err(SplitError::Invalid(format!(
                "unsupported compressor {} in {}: cleave re-encodes chunks with LZ4, Snappy, Deflate or Noop",
                ci.compressor,
                t.path(&Component::CompressionInfo).display()
            )));
        }
    }
    match &opts.cut {
        Cut::Tokens(b) => validate_boundaries(t.partitioner, b).map_err(SplitError::Invalid)?,
        Cut::Parts(n) if *n < 2 => {
            return Err(SplitError::Invalid(format!(
                "--parts {n}: expected at least 2"
            )))
        }
        Cut::Parts(_) => {}
        Cut::Ranges(r) => r.validate(t.partitioner).map_err(SplitError::Invalid)?,
    }
    if !opts.out_dir.is_dir() {
        return Err(SplitError::Invalid(format!(
            "--out {}: not a directory",
            opts.out_dir.display()
        )));
    }
    let parent_dir = t
        .path(&Component::Data)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let dev_parent =
        crate::io::fs::device_of(&parent_dir).map_err(|e| FormatError::io(&parent_dir, e))?;
    let dev_out =
        crate::io::fs::device_of(&opts.out_dir).map_err(|e| FormatError::io(&opts.out_dir, e))?;
    if dev_parent != dev_out {
        return Err(SplitError::Refused(format!(
            "--out {} is on another filesystem than the parent {}: children share or copy the parent's chunks in place and publish by rename, so they must be written on the parent's filesystem",
            opts.out_dir.display(),
            parent_dir.display()
        )));
    }
    if opts.publish == Publish::Replace && !opts.dry_run {
        let a = fs::canonicalize(&opts.out_dir).map_err(|e| FormatError::io(&opts.out_dir, e))?;
        let b = fs::canonicalize(&parent_dir).map_err(|e| FormatError::io(&parent_dir, e))?;
        if a != b {
            return Err(SplitError::Invalid(format!(
                "--publish replace needs --out to be the parent's table directory {} (got {})",
                b.display(),
                a.display()
            )));
        }
        let holders = publish::processes_holding(&b);
        if let Some((pid, cmd)) = holders.first() {
            return Err(SplitError::Refused(format!(
                "process {pid} ({cmd}) has files under {} open or mapped: replace needs the node's Cassandra stopped (it would not see the children and could reuse their generation ids); use --publish stage and nodetool import instead",
                b.display()
            )));
        }
    }
    Ok(())
}

/// Decides each child's layout and geometry; pure apart from the inputs.
fn resolve(
    t: &SSTable,
    children: &[PlannedChild],
    opts: &SplitOptions,
    block: u64,
    no_share: Option<&str>,
    crc_unit: u64,
) -> Vec<ChildPlan> {
    let unit = grid_unit(t, Some(crc_unit));
    children
        .iter()
        .map(|c| {
            let mut fallback_reason = None;
            let layout = if c.merged {
                Layout::Regrid
            } else {
                let want = opts.layout.unwrap_or(Layout::Aligned);
                if want == Layout::Padded && !opts.allow_padded {
                    fallback_reason = Some("padded needs --target-data-access standard (a head pad breaks mmap'd Data.db reads)".to_string());
                    Layout::Aligned
                } else {
                    want
                }
            };
            let geometry = (layout != Layout::Regrid).then(|| {
                let r = &c.runs[0];
                plan::geometry(r.first_position, r.end_position, unit)
            });
            let predicted = match (&t.compression, geometry) {
                (Some(ci), Some(g)) => plan::predict_compressed(layout, &g, &ci.offsets, t.data_file_size, block),
                (Some(_), None) => Prediction { bytes_reencoded: c.bytes(), ..Default::default() },
                (None, Some(g)) => {
                    let rest = g.data_length.saturating_sub(unit);
                    let shared = if block > 0 && layout != Layout::Copy { rest / block * block } else { 0 };
                    Prediction { bytes_shared: shared, bytes_copied: rest - shared, bytes_reencoded: g.data_length.min(unit) }
                }
                (None, None) => Prediction { bytes_reencoded: c.bytes(), ..Default::default() },
            };
            if block == 0 && matches!(layout, Layout::Aligned | Layout::Padded) && fallback_reason.is_none() {
                fallback_reason = no_share.map(str::to_string);
            }
            ChildPlan { child: c.clone(), layout, geometry, predicted, fallback_reason, label: c.label }
        })
        .collect()
}

/// One child being written during the index pass.
struct Open {
    desc: Descriptor,
    side: IndexSide,
    /// Zero-copy: the rebase point; regrid: the child position of each run's start.
    base: u64,
    run_offsets: Vec<u64>,
}

/// Runs a split of the sstable at `parent_path`.
pub fn split(
    parent_path: &Path,
    opts: &SplitOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<SplitReport, SplitError> {
    let io_before = crate::io::proc::io_counters().ok();
    // From choosing generation ids to publishing, this split owns the parent's directory
    // and --out (publish::lock_for_split), taken before any sstable file is opened so that
    // a second cleave is told Busy rather than mistaken for a live Cassandra; staging left
    // in --out by a killed split is then stale.
    let mut _locks = Vec::new();
    if !opts.dry_run && opts.out_dir.is_dir() {
        let parent_dir = parent_path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if parent_dir.is_dir() {
            _locks = publish::lock_for_split(parent_dir, &opts.out_dir)?;
        }
    }
    let t = SSTable::open(parent_path)?;
    // When the split ends, the parent pages it read are dropped, not the ones a live node
    // had cached (io::residency; it replaces a DONTNEED on the whole Index.db).
    let _evict = crate::io::residency::EvictAddedOnDrop::new(&[
        t.path(&Component::Index),
        t.path(&Component::Data),
    ]);
    validate(&t, opts)?;
    let mut guard = StagingGuard(None);
    let mut staging = PathBuf::new();
    if !opts.dry_run {
        publish::remove_staging_dirs(&opts.out_dir)?;
        staging = publish::create_staging(&opts.out_dir)?;
        guard.0 = Some(staging.clone());
    }
    let crc = t.chunk_checksums()?;
    let crc_unit = crc.as_ref().map_or(64 * 1024, |c| c.chunk_size as u64);
    let unit = grid_unit(&t, Some(crc_unit));
    let index_total = t.size_of(&Component::Index).unwrap_or(0);

    // Can the target share extents? A dry run must not write, so it asks the filesystem
    // type instead of probing.
    let parent_file = fs::File::open(t.path(&Component::Data))
        .map_err(|e| FormatError::io(&t.path(&Component::Data), e))?;
    let support = if opts.dry_run {
        crate::io::fs::guess_reflink(&opts.out_dir)
    } else {
        // Probed inside staging: a kill mid-probe leaves nothing `recover` does not remove.
        reflink::probe(&parent_file, &staging).map_err(|e| FormatError::io(&staging, e))?
    };
    let (block, no_share) = match support {
        ReflinkSupport::Supported { block_size } => (block_size, None),
        ReflinkSupport::Refused(r) => (0, Some(r.to_string())),
    };

    // Pass 1: plan.
    let min_dead = plan::preferred_dead_prefix(if block > 0 { block } else { 4096 });
    let mut grouper = Grouper::new(
        opts.cut.clone(),
        t.partitioner,
        t.data_length(),
        unit,
        min_dead,
    );
    let mut parent_fp = Fingerprint::default();
    {
        let mut r = t.index_reader()?;
        let mut last = 0;
        while let Some(e) = r.next_entry()? {
            let token = t.partitioner.token(e.key);
            grouper.push(e.key, &token, e.position);
            parent_fp.add(e.key);
            if e.index_offset - last > (1 << 20) {
                progress(Progress::Index {
                    pass: 1,
                    bytes: e.index_offset,
                    total: index_total,
                });
                last = e.index_offset;
            }
        }
    }
    progress(Progress::Index {
        pass: 1,
        bytes: index_total,
        total: index_total,
    });
    if parent_fp.count == 0 {
        return Err(SplitError::Invalid(format!(
            "{} has no partitions",
            parent_path.display()
        )));
    }
    let children = grouper.finish(opts.merge_below_chunks);
    let plans = resolve(&t, &children, opts, block, no_share.as_deref(), crc_unit);
    let mut report = SplitReport {
        parent: parent_path.to_path_buf(),
        dry_run: opts.dry_run,
        publish: opts.publish,
        reflink: match support {
            ReflinkSupport::Supported { block_size } => format!("supported (block {block_size})"),
            ReflinkSupport::Refused(r) => r.to_string(),
        },
        children: Vec::new(),
        plan: plans.clone(),
        check: Check {
            parent: parent_fp,
            children: Fingerprint::default(),
            ok: false,
        },
        bytes_shared: 0,
        bytes_copied: 0,
        bytes_reencoded: 0,
        read_bytes: 0,
        write_bytes: 0,
        left_behind: Vec::new(),
    };
    if opts.dry_run {
        return Ok(report);
    }

    // Pass 2: write every child into staging.
    let parent_dir = t
        .path(&Component::Data)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let gens = publish::next_generations(&[&opts.out_dir, &staging, &parent_dir], plans.len())?;
    let descs: Vec<Descriptor> = gens
        .iter()
        .map(|g| Descriptor {
            dir: staging.clone(),
            version: t.descriptor.version,
            id: SSTableId::Sequence(*g),
            format: t.descriptor.format,
        })
        .collect();
    let min_index_interval = t.summary()?.map_or(128, |s| s.min_index_interval);
    let fp_chance = t
        .statistics
        .validation
        .as_ref()
        .map_or(0.01, |v| v.bloom_filter_fp_chance);
    let want_filter = t.size_of(&Component::Filter).unwrap_or(0) > 0;
    let histogram_buckets = t
        .statistics
        .stats
        .as_ref()
        .map_or(155, |s| s.partition_sizes.pairs.len().saturating_sub(1));

    // Segments: (first ordinal, last ordinal, child, run), in ordinal order.
    let mut segments: Vec<(u64, u64, usize, usize)> = Vec::new();
    for (ci, p) in plans.iter().enumerate() {
        for (ri, r) in p.child.runs.iter().enumerate() {
            segments.push((r.first_ordinal, r.last_ordinal, ci, ri));
        }
    }
    segments.sort();
    let last_segment_of: Vec<usize> = (0..plans.len())
        .map(|ci| segments.iter().rposition(|s| s.2 == ci).unwrap_or(0))
        .collect();

    let mut parent_data = ParentData {
        path: t.path(&Component::Data),
        file: parent_file,
        file_size: t.data_file_size,
        reader: t.data_reader()?,
        compression: t.compression.clone(),
        crc,
    };
    let mut open: Vec<Option<Open>> = (0..plans.len()).map(|_| None).collect();
    let mut done: Vec<Option<ChildReport>> = (0..plans.len()).map(|_| None).collect();
    let mut children_fp = Fingerprint::default();
    let mut seg = 0usize;
    // The previous parent entry, flushed when the next one tells where it ends.
    let mut pending: Option<(u64, Vec<u8>, u64, Vec<u8>)> = None;
    let mut r = t.index_reader()?;
    let mut ordinal = 0u64;
    let mut last_progress = 0;
    let data_length = t.data_length();
    let mut ctx = WriteCtx {
        t: &t,
        opts,
        plans: &plans,
        descs: &descs,
        block,
        no_share: no_share.as_deref(),
        crc_unit,
        min_index_interval,
        fp_chance,
        want_filter,
        histogram_buckets,
    };
    loop {
        let next = r.next_entry()?.map(|e| {
            (
                e.position,
                e.key.to_vec(),
                e.promoted_index.to_vec(),
                e.index_offset,
            )
        });
        if let Some((p_ord, key, pos, promoted)) = pending.take() {
            let end = next.as_ref().map_or(data_length, |n| n.0);
            while segments[seg].1 < p_ord {
                seg += 1;
            }
            let (_, seg_last, ci, ri) = segments[seg];
            if open[ci].is_none() {
                open[ci] = Some(ctx.open_child(ci)?);
            }
            let o = open[ci]
                .as_mut()
                .ok_or_else(|| SplitError::Check("child not open".into()))?;
            let child_pos = if plans[ci].layout == Layout::Regrid {
                o.run_offsets[ri] + (pos - plans[ci].child.runs[ri].first_position)
            } else {
                pos - o.base
            };
            o.side.add(&key, child_pos, end - pos, &promoted)?;
            if p_ord == seg_last && seg == last_segment_of[ci] {
                let o = open[ci]
                    .take()
                    .ok_or_else(|| SplitError::Check("child not open".into()))?;
                let rep = ctx.finish_child(ci, o, &mut parent_data, &mut children_fp)?;
                done[ci] = Some(rep);
                progress(Progress::ChildDone {
                    index: ci,
                    total: plans.len(),
                });
            }
        }
        let Some((pos, key, promoted, off)) = next else {
            break;
        };
        pending = Some((ordinal, key, pos, promoted));
        ordinal += 1;
        if off - last_progress > (1 << 20) {
            progress(Progress::Index {
                pass: 2,
                bytes: off,
                total: index_total,
            });
            last_progress = off;
        }
    }
    progress(Progress::Index {
        pass: 2,
        bytes: index_total,
        total: index_total,
    });
    let children_reports: Vec<ChildReport> = done
        .into_iter()
        .enumerate()
        .map(|(i, c)| c.ok_or_else(|| SplitError::Check(format!("child {i} was never completed"))))
        .collect::<Result<_, _>>()?;

    // The children must add up to the parent, and each must pass the index-level check.
    report.check.children = children_fp;
    report.check.ok = children_fp == parent_fp;
    if !report.check.ok {
        return Err(SplitError::Check(format!(
            "children's (count, xor, sum) = ({}, {:016x}, {:016x}) differ from the parent's ({}, {:016x}, {:016x})",
            children_fp.count, children_fp.xor, children_fp.sum, parent_fp.count, parent_fp.xor, parent_fp.sum
        )));
    }
    let mut recheck = Fingerprint::default();
    for d in &descs {
        let child = SSTable::open(&d.path(&Component::Data))
            .map_err(|e| SplitError::Check(format!("child does not open: {e}")))?;
        let rep = child
            .check(CheckLevel::Index, &mut |_| {})
            .map_err(|e| SplitError::Check(format!("child fails its check: {e}")))?;
        boundary_check(&child)
            .map_err(|e| SplitError::Check(format!("child data does not match its index: {e}")))?;
        recheck.merge(&rep.fingerprint);
    }
    if recheck != parent_fp {
        return Err(SplitError::Check(
            "re-reading the children gives a different key fingerprint than the parent's".into(),
        ));
    }
    crate::io::fs::sync_dir(&staging).map_err(|e| FormatError::io(&staging, e))?;

    // Publish.
    let published = match opts.publish {
        Publish::Stage => publish::stage(&staging, &opts.out_dir, &descs)?,
        Publish::Replace => publish::replace(
            &staging,
            &opts.out_dir,
            &t.descriptor,
            &descs,
            &opts.operation,
        )?,
    };
    guard.0 = None;
    report.left_behind = published.left_behind;
    let finals = published.data_paths;
    report.children = children_reports
        .into_iter()
        .zip(finals)
        .map(|(mut c, p)| {
            c.path = p;
            c
        })
        .collect();
    for c in &report.children {
        report.bytes_shared += c.bytes_shared;
        report.bytes_copied += c.bytes_copied;
        report.bytes_reencoded += c.bytes_reencoded;
    }
    if let (Some(a), Ok(b)) = (io_before, crate::io::proc::io_counters()) {
        let d = b.since(&a);
        report.read_bytes = d.read_bytes;
        report.write_bytes = d.write_bytes;
    }
    Ok(report)
}

/// Reads the first and the last partition's key at their positions in the child's Data.db:
/// cheap (one or two chunks) and catches any wrong base, dead prefix or tail.
fn boundary_check(child: &SSTable) -> Result<(), FormatError> {
    let mut r = child.index_reader()?;
    let mut d = child.data_reader()?;
    let mut first: Option<(Vec<u8>, u64)> = None;
    let mut last: Option<(Vec<u8>, u64)> = None;
    while let Some(e) = r.next_entry()? {
        if first.is_none() {
            first = Some((e.key.to_vec(), e.position));
        }
        last = Some((e.key.to_vec(), e.position));
    }
    for (key, pos) in first.iter().chain(last.iter()) {
        let head = d.read_at(*pos, 2 + key.len())?;
        if head[..2] != (key.len() as u16).to_be_bytes() || head[2..] != key[..] {
            return Err(FormatError::corrupt(
                &child.path(&Component::Data),
                Some(*pos),
                format!(
                    "expected partition key {}, found {}",
                    hex::encode(key),
                    hex::encode(&head)
                ),
            ));
        }
    }
    Ok(())
}

struct WriteCtx<'a> {
    t: &'a SSTable,
    opts: &'a SplitOptions,
    plans: &'a [ChildPlan],
    descs: &'a [Descriptor],
    block: u64,
    no_share: Option<&'a str>,
    crc_unit: u64,
    min_index_interval: i32,
    fp_chance: f64,
    want_filter: bool,
    histogram_buckets: usize,
}

impl WriteCtx<'_> {
    fn open_child(&self, ci: usize) -> Result<Open, SplitError> {
        let p = &self.plans[ci];
        let partitions = p.child.partitions();
        let filter = if self.want_filter {
            BloomFilter::with_capacity(partitions, self.fp_chance)
        } else {
            None
        };
        let side = IndexSide::create(
            &self.descs[ci].path(&Component::Index),
            self.min_index_interval,
            filter,
            self.histogram_buckets,
        )?;
        let mut run_offsets = Vec::with_capacity(p.child.runs.len());
        let mut acc = 0;
        for r in &p.child.runs {
            run_offsets.push(acc);
            acc += r.bytes();
        }
        Ok(Open {
            desc: self.descs[ci].clone(),
            side,
            base: p.geometry.map_or(0, |g: Geometry| g.base),
            run_offsets,
        })
    }

    fn triple(&self, label: Option<Label>) -> Option<RepairTriple> {
        match (&self.opts.cut, label) {
            (Cut::Ranges(r), Some(l)) => Some(r.triple(l)),
            _ => None,
        }
    }

    fn finish_child(
        &mut self,
        ci: usize,
        o: Open,
        parent: &mut ParentData,
        children_fp: &mut Fingerprint,
    ) -> Result<ChildReport, SplitError> {
        let t = self.t;
        let p = &self.plans[ci];
        let desc = o.desc;
        let parts = o.side.finish()?;
        children_fp.merge(&parts.fingerprint);
        let data_path = desc.path(&Component::Data);
        let combine = self.opts.digest == DigestPolicy::Combine;
        let result: DataResult = match (p.layout, p.geometry, t.compression.is_some()) {
            (Layout::Regrid, _, _) | (_, None, _) => {
                let runs: Vec<(u64, u64)> = p
                    .child
                    .runs
                    .iter()
                    .map(|r| (r.first_position, r.end_position))
                    .collect();
                data::write_regrid(parent, &runs, combine, &data_path)?
            }
            (want, Some(g), true) => {
                let end = p.child.runs[0].end_position;
                data::write_compressed(
                    parent,
                    &g,
                    end,
                    want,
                    self.opts.allow_padded,
                    self.block,
                    self.no_share,
                    combine,
                    &data_path,
                )?
            }
            (want, Some(g), false) => data::write_uncompressed(
                parent,
                &g,
                self.crc_unit,
                want,
                self.block,
                self.no_share,
                combine,
                &data_path,
            )?,
        };
        let mut toc = vec![Component::Data, Component::Index];
        let write = |c: &Component, bytes: &[u8]| -> Result<(), FormatError> {
            let path = desc.path(c);
            let mut f = fs::File::create(&path).map_err(|e| FormatError::io(&path, e))?;
            std::io::Write::write_all(&mut f, bytes).map_err(|e| FormatError::io(&path, e))?;
            f.sync_all().map_err(|e| FormatError::io(&path, e))?;
            crate::io::fault::point("write:child-file");
            Ok(())
        };
        let compression_ratio = t.compression.as_ref().map(|_| {
            if result.data_length == 0 {
                -1.0
            } else {
                result.file_size as f64 / result.data_length as f64
            }
        });
        if let Some(ci_parent) = &t.compression {
            // The parent's header, the child's length and offsets (not a clone of the
            // parent's offsets: those are 8 bytes a chunk of the whole parent).
            let ci = CompressionInfo {
                compressor: ci_parent.compressor.clone(),
                options: ci_parent.options.clone(),
                chunk_length: ci_parent.chunk_length,
                max_compressed_length: ci_parent.max_compressed_length,
                data_length: result.data_length,
                offsets: result.offsets.clone(),
            };
            write(&Component::CompressionInfo, &ci.serialize())?;
            toc.push(Component::CompressionInfo);
        }
        if let Some(crc) = &result.crc {
            write(&Component::Crc, &crc.serialize())?;
            toc.push(Component::Crc);
        }
        let summary = parts.summary_clone();
        write(&Component::Summary, &summary.serialize())?;
        toc.push(Component::Summary);
        if let Some(f) = &parts.filter {
            write(&Component::Filter, &f.serialize(t.old_filter_layout()))?;
            toc.push(Component::Filter);
        }
        let triple = self.triple(p.label);
        let stats = child_statistics(
            &t.statistics,
            t.descriptor.version,
            &parts,
            triple,
            compression_ratio,
        );
        write(
            &Component::Statistics,
            &stats.serialize(t.descriptor.version),
        )?;
        toc.push(Component::Statistics);
        let digest = match self.opts.digest {
            DigestPolicy::Off => None,
            DigestPolicy::Combine if result.combined_digest.is_some() => result.combined_digest,
            DigestPolicy::Combine | DigestPolicy::Full => {
                let r = crate::sstable::data::DataReader::open(&data_path, None)?;
                Some(r.file_crc32(|_| {})?)
            }
        };
        if let Some(crc32) = digest {
            write(&Component::Digest, &Digest { crc32 }.serialize())?;
            toc.push(Component::Digest);
        }
        toc.push(Component::Toc);
        write(&Component::Toc, &Toc { components: toc }.serialize())?;
        let st = stats.stats.as_ref();
        let runs = &p.child.runs;
        Ok(ChildReport {
            path: data_path,
            partitions: parts.fingerprint.count,
            first_token: runs
                .first()
                .map(|r| r.first_token.clone())
                .unwrap_or_default(),
            last_token: runs
                .last()
                .map(|r| r.last_token.clone())
                .unwrap_or_default(),
            first_key: parts.first_key.clone(),
            last_key: parts.last_key.clone(),
            data_length: result.data_length,
            data_file_bytes: result.file_size,
            dead_prefix: p.geometry.map_or(0, |g| g.dead_prefix),
            layout: result.layout.unwrap_or(p.layout),
            bytes_shared: result.bytes_shared,
            bytes_copied: result.bytes_copied,
            bytes_reencoded: result.bytes_reencoded,
            fallback_reason: result.fallback_reason.or_else(|| p.fallback_reason.clone()),
            label: p.label,
            repaired_at: st.map(|s| s.repaired_at),
            pending_repair: st
                .and_then(|s| s.pending_repair.flatten())
                .map(|u| uuid_string(&u)),
            is_transient: st.and_then(|s| s.is_transient),
        })
    }
}
