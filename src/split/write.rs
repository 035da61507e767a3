//! `Plan::write`: every child into a fresh staging directory on the parent's filesystem,
//! in one pass over the parent's Index.db. A zero-copy child is finished as soon as its last
//! partition is seen, so at most one is open at a time (plus one merged `regrid` child per
//! label). Nothing is durable until the end, where `io::durable::Batch` fsyncs every file
//! concurrently, then writes each TOC.txt, then syncs the directory.
//!
//! Also the same decisions without files, for a stream sender: `Plan::data_layout` (a
//! child's Data.db as segments) and `Plan::components` (its small components in memory).

use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::child::{self, Built, ChildKey, IndexParts, IndexShape, IndexSide, RowIndexRef};
use super::data::{self, DataLayout, DataResult, DataTarget, ParentData, Segment, Sharing};
use super::error::WriteError;
use super::parent::split_support;
use super::plan::{DigestPolicy, Layout, Plan, PlanSource};
use super::publish::{self, Durability};
use super::report::ChildReport;
use super::spec::{Cut, Label, RepairTriple};
use super::staged::{Staged, StagingGuard, Unchecked, Written};
use super::trie_only;
use crate::io::durable::{Batch, BatchError};
use crate::sstable::bti::scan::RowIndex;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::index::{IndexEntryRef, TriePrefix};
use crate::sstable::murmur::KeyHash;
use crate::sstable::scan::{PartitionReader, PartitionSource};
use crate::sstable::token::{Partitioner, Token};
use crate::sstable::{Component, Descriptor, FormatError, SSTableId};

/// Progress of the write pass.
#[derive(Debug, Clone, Copy)]
pub enum Progress {
    /// Index.db bytes of the write pass.
    Index {
        bytes: u64,
        total: u64,
    },
    ChildDone {
        index: usize,
        total: usize,
    },
}

impl From<BatchError> for WriteError {
    fn from(e: BatchError) -> WriteError {
        WriteError::Io {
            path: e.path,
            source: e.source,
        }
    }
}

/// A parent entry read and not yet routed (its end is the next entry's position); its
/// buffers are reused from entry to entry, and its key hashed once (`KeyHash`) for the
/// filter, the token and both fingerprints.
#[derive(Default)]
struct Pending {
    /// Holds an entry still to route.
    live: bool,
    ordinal: u64,
    /// Empty when a trie-only scan did not read it (`prefix` stands for it).
    key: Vec<u8>,
    /// The key's hash, or its `trie_only::identity`'s.
    hash: KeyHash,
    /// A trie-only scan's prefix and hash byte.
    prefix: Vec<u8>,
    prefix_hash: Option<u8>,
    position: u64,
    promoted: Vec<u8>,
    row_index: Option<RowIndex>,
    index_offset: u64,
}

impl Pending {
    fn fill(&mut self, ordinal: u64, e: &IndexEntryRef<'_>) {
        self.live = true;
        self.ordinal = ordinal;
        self.key.clear();
        self.key.extend_from_slice(e.key);
        self.prefix.clear();
        self.prefix_hash = e.prefix.map(|p| p.hash);
        self.hash = match e.prefix {
            Some(p) => {
                self.prefix.extend_from_slice(p.comparable);
                KeyHash::of(&trie_only::identity(e.position, p.hash))
            }
            None => KeyHash::of(e.key),
        };
        self.position = e.position;
        self.promoted.clear();
        self.promoted.extend_from_slice(e.promoted_index);
        self.row_index = e.row_index.cloned();
        self.index_offset = e.index_offset;
    }

    /// The key as the child's index takes it.
    fn child_key(&self) -> ChildKey<'_> {
        match self.prefix_hash {
            Some(hash) => ChildKey::Trie {
                prefix: TriePrefix {
                    comparable: &self.prefix,
                    hash,
                },
                key: &self.key,
            },
            None => ChildKey::Full(&self.key),
        }
    }

    fn token(&self, p: Partitioner, file: &Path) -> Result<Token, FormatError> {
        match self.prefix_hash {
            Some(_) => trie_only::token(&self.entry(), p, file),
            None => Ok(p.token_hashed(&self.key, self.hash)),
        }
    }

    fn entry(&self) -> IndexEntryRef<'_> {
        IndexEntryRef {
            key: &self.key,
            position: self.position,
            promoted_index: &self.promoted,
            index_offset: self.index_offset,
            row_index: self.row_index.as_ref(),
            prefix: self.prefix_hash.map(|hash| TriePrefix {
                comparable: &self.prefix,
                hash,
            }),
        }
    }
}

/// A child being written during the index pass.
struct Open {
    desc: Descriptor,
    side: IndexSide<BufWriter<fs::File>>,
    /// Zero-copy: the rebase point and the lead chunk; regrid: the child position of each
    /// run's start.
    base: u64,
    lead: u64,
    run_offsets: Vec<u64>,
}

fn uuid_string(b: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*b).hyphenated().to_string()
}

impl Plan {
    fn triple(&self, label: Option<Label>) -> Option<RepairTriple> {
        match (&self.cut, label) {
            (Cut::Ranges(r), Some(l)) => Some(r.triple(l)),
            _ => None,
        }
    }

    fn parent_data(&self) -> Result<ParentData<'_>, WriteError> {
        let p = &self.parent;
        let t = p.table();
        Ok(ParentData {
            path: p.data_path().to_path_buf(),
            file: p.data_file(),
            file_size: t.data_file_size,
            reader: t.data_reader()?,
            compression: t.compression.as_ref(),
            crc: p.crc(),
            throttle: self.policy.throttle.clone(),
        })
    }

    /// Writes every child into a new staging directory under `out_dir` (a directory on the
    /// parent's filesystem). On any error the staging directory is removed.
    /// Every file fsynced (`Durability::PerFile`).
    pub fn write(&self, out_dir: &Path) -> Result<Staged<Unchecked>, WriteError> {
        self.write_with(out_dir, &Durability::PerFile)
    }

    /// With `Durability::SyncFs` nothing is fsynced here: the caller's publication makes
    /// it durable with one `syncfs` (`publish::replace_all`).
    pub fn write_with(
        &self,
        out_dir: &Path,
        durability: &Durability,
    ) -> Result<Staged<Unchecked>, WriteError> {
        self.write_with_progress(out_dir, durability, &mut |_| {})
    }

    pub fn write_with_progress(
        &self,
        out_dir: &Path,
        durability: &Durability,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Staged<Unchecked>, WriteError> {
        let started = Instant::now();
        let parent = &self.parent;
        let t = parent.table();
        if !out_dir.is_dir() {
            return Err(WriteError::Target {
                path: out_dir.to_path_buf(),
                message: "not a directory".into(),
            });
        }
        let dev_out = crate::io::fs::device_of(out_dir).map_err(|e| WriteError::io(out_dir, e))?;
        if dev_out != parent.device() {
            return Err(WriteError::Target {
                path: out_dir.to_path_buf(),
                message: format!("on another filesystem than the parent {}: children share or copy the parent's chunks in place and publish by rename, so they must be written on the parent's filesystem", parent.dir().display()),
            });
        }
        let staging = publish::create_staging(out_dir, durability).map_err(WriteError::Format)?;
        let guard = StagingGuard::new(staging.clone());
        // Probed inside staging: a kill mid-probe leaves nothing that removing staging (the
        // guard, or `recover`) does not remove.
        let support = parent
            .reflink_probe(&staging)
            .map_err(|e| WriteError::io(&staging, e))?;
        let (block, no_share) = split_support(support);
        // Generation ids are chosen here and nowhere else in the pipeline: above every
        // sequence id in --out, staging and the parent's directory. `split::run` holds the
        // lock of the table directory and --out (`split::lock`) from before the parent was
        // opened until publication, so no second cleave picks the same ids.
        let gens =
            publish::next_generations(&[out_dir, &staging, parent.dir()], self.children.len())?;
        let descs: Vec<Descriptor> = gens
            .iter()
            .map(|g| Descriptor {
                dir: staging.clone(),
                version: t.descriptor.version,
                id: SSTableId::Sequence(*g),
                format: t.descriptor.format,
            })
            .collect();
        let shape = self.index_shape()?;

        // Segments of the index: (first ordinal, last ordinal, child, run), in order.
        let mut segments: Vec<(u64, u64, usize, usize)> = Vec::new();
        for (ci, p) in self.children.iter().enumerate() {
            for (ri, r) in p.child.runs.iter().enumerate() {
                segments.push((r.first_ordinal, r.last_ordinal, ci, ri));
            }
        }
        segments.sort();
        let last_segment_of: Vec<usize> = (0..self.children.len())
            .map(|ci| segments.iter().rposition(|s| s.2 == ci).unwrap_or(0))
            .collect();

        let mut pd = self.parent_data()?;
        let mut batch = if durability.is_syncfs() {
            Batch::deferred()
        } else {
            Batch::new()
        };
        let mut open: Vec<Option<Open>> = (0..self.children.len()).map(|_| None).collect();
        let mut done: Vec<Option<ChildReport>> = (0..self.children.len()).map(|_| None).collect();
        let mut children_fp = Fingerprint::default();
        // The parent's keys, read here for the one time in a split when the plan came
        // from Summary.db's samples.
        let mut parent_fp = Fingerprint::default();
        let mut seg = 0usize;
        // Cleanup (`Cut::Owned`): partitions in no segment are dropped. Their keys are
        // counted apart (`dropped_fp`), and the keys the owned ranges hold are counted by
        // their token alone (`owned_fp`), independently of the plan's runs: that is what
        // the children must add up to.
        let owned = match &self.cut {
            Cut::Owned(o) => Some(o),
            _ => None,
        };
        let mut dropped_fp = Fingerprint::default();
        let mut owned_fp = Fingerprint::default();
        // The previous parent entry, flushed when the next one tells where it ends. Two
        // buffers, swapped at each entry: no allocation a partition.
        let mut pending = Pending::default();
        let mut next = Pending::default();
        let src = self.partition_source()?;
        let mut r = src.reader(t)?;
        let index_total = PartitionSource::span(t);
        let index_path = t.path(&t.partition_index());
        let mut ordinal = 0u64;
        let mut last_progress = 0;
        let data_length = t.data_length();
        loop {
            let more = match r.next_entry()? {
                Some(e) => {
                    next.fill(ordinal, &e);
                    true
                }
                None => false,
            };
            let next_pos = more.then_some(next.position);
            if let (Some(o), true) = (owned, pending.live) {
                let p = &pending;
                if p.ordinal >= parent.leading_empty()
                    && o.contains(t.partitioner, &p.token(t.partitioner, &index_path)?)
                {
                    owned_fp.add_hash(p.hash);
                }
                while seg < segments.len() && segments[seg].1 < p.ordinal {
                    seg += 1;
                }
                if segments.get(seg).is_none_or(|s| s.0 > p.ordinal) {
                    if p.ordinal >= parent.leading_empty() {
                        dropped_fp.add_hash(p.hash);
                    }
                    pending.live = false;
                }
            }
            if pending.live {
                let Pending {
                    ordinal: p_ord,
                    ref key,
                    hash,
                    position: pos,
                    ref promoted,
                    ref row_index,
                    index_offset: off,
                    ..
                } = pending;
                let child_key = pending.child_key();
                let end = next_pos.unwrap_or(data_length);
                while seg < segments.len() && segments[seg].1 < p_ord {
                    seg += 1;
                }
                let Some(&(seg_first, seg_last, ci, ri)) = segments.get(seg) else {
                    return Err(FormatError::corrupt(
                        parent.data_path(),
                        None,
                        format!(
                            "{} has more partitions than when planned (entry {p_ord})",
                            t.partition_index().file_name()
                        ),
                    )
                    .into());
                };
                let plan = &self.children[ci];
                // The plan's ordinals (from Summary.db's samples, or the planning pass) must
                // be Index.db's: each run starts at the offset planned for it.
                let index_start = plan.child.runs[ri].index_start;
                if p_ord == seg_first && off != index_start {
                    // A BIG partition is known by its Index.db offset, a BTI one by its
                    // Data.db position (`sstable::scan`): the offset names that file.
                    let (file, what) = match t.descriptor.format {
                        crate::sstable::Format::Big => {
                            (t.path(&Component::Index), "Index.db offset")
                        }
                        crate::sstable::Format::Bti => {
                            (t.path(&Component::Data), "Data.db position")
                        }
                    };
                    return Err(FormatError::corrupt(
                        &file,
                        Some(off),
                        format!("partition {p_ord} starts here, the plan ({:?}) expected it at {what} {index_start}: the planning pass or Summary.db's samples do not match the partition index", self.source),
                    )
                    .into());
                }
                let filler = p_ord < parent.leading_empty();
                if !filler {
                    parent_fp.add_hash(hash);
                }
                let o = match &mut open[ci] {
                    Some(o) => o,
                    slot => {
                        let mut side = IndexSide::create(
                            &descs[ci],
                            t.partitioner,
                            &shape,
                            plan.child.partitions() + plan.head.fillers().len() as u64,
                        )?;
                        side.add_fillers(&plan.head)?;
                        let mut run_offsets = Vec::with_capacity(plan.child.runs.len());
                        let mut acc = 0;
                        for r in &plan.child.runs {
                            run_offsets.push(acc);
                            acc += r.bytes();
                        }
                        slot.insert(Open {
                            desc: descs[ci].clone(),
                            side,
                            base: plan.geometry.map_or(0, |g| g.base),
                            lead: plan.geometry.map_or(0, |g| g.lead),
                            run_offsets,
                        })
                    }
                };
                let child_pos = if plan.layout == Layout::Regrid {
                    o.run_offsets[ri] + (pos - plan.child.runs[ri].first_position)
                } else {
                    pos - o.base + o.lead
                };
                if filler {
                    // An earlier split's filler stays one (it leads the first child).
                    o.side.add_filler(key, child_pos, end - pos)?;
                } else {
                    let row_index = RowIndexRef {
                        promoted,
                        rows: row_index.as_ref(),
                    };
                    let child_key = if p_ord == plan.child.runs[0].first_ordinal {
                        child_key.with_key(&plan.child.runs[0].first_key)
                    } else {
                        child_key
                    };
                    o.side
                        .add(child_key, hash, child_pos, end - pos, row_index)?;
                }
                if p_ord == seg_last && seg == last_segment_of[ci] {
                    if let Some(mut o) = open[ci].take() {
                        set_key_range(&mut o.side, plan);
                        let rep = self.finish_child(
                            ci,
                            o,
                            &mut pd,
                            Sharing { block, no_share },
                            &mut batch,
                            &mut children_fp,
                        )?;
                        done[ci] = Some(rep);
                        // Bound the descriptors held open until the batch commits.
                        if batch.pending() > 256 {
                            batch.sync_pending()?;
                        }
                    }
                    progress(Progress::ChildDone {
                        index: ci,
                        total: self.children.len(),
                    });
                }
            }
            if !more {
                break;
            }
            std::mem::swap(&mut pending, &mut next);
            let off = pending.index_offset;
            ordinal += 1;
            if off - last_progress > (1 << 20) {
                progress(Progress::Index {
                    bytes: off,
                    total: index_total,
                });
                last_progress = off;
            }
        }
        progress(Progress::Index {
            bytes: index_total,
            total: index_total,
        });
        // Every key of the parent: the ones routed to a child and the dropped ones.
        let mut all_fp = parent_fp;
        all_fp.merge(&dropped_fp);
        let parent_fp = all_fp;
        let planned_fp = self.fingerprint.unwrap_or(parent_fp);
        if ordinal != self.partitions || planned_fp != parent_fp {
            return Err(FormatError::corrupt(
                &t.path(&t.partition_index()),
                None,
                format!(
                    "{} has {ordinal} partitions (keys {parent_fp:?}), the plan ({:?}) counted {} ({planned_fp:?}): it changed since planned, or Summary.db does not sample it",
                    t.partition_index().file_name(),
                    self.source, self.partitions
                ),
            )
            .into());
        }
        let reports: Vec<ChildReport> = done
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                c.ok_or_else(|| {
                    WriteError::Format(FormatError::corrupt(
                        parent.data_path(),
                        None,
                        format!(
                            "child {i} was never completed: {} has fewer partitions than when planned",
                            t.partition_index().file_name()
                        ),
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        batch.dir(&staging);
        crate::io::fault::point("split:written");
        batch.commit()?;
        Ok(Staged::unchecked(
            self,
            Written {
                staging,
                out_dir: out_dir.to_path_buf(),
                descs,
                reports,
                parent_fp: if owned.is_some() { owned_fp } else { parent_fp },
                children_fp,
                support,
                guard,
                write_time: started.elapsed(),
            },
        ))
    }

    /// Data.db of a child from its plan; `sharing` is the probed support.
    fn write_data(
        &self,
        ci: usize,
        pd: &mut ParentData,
        sharing: Sharing,
        data_path: &Path,
    ) -> Result<DataResult, WriteError> {
        let p = &self.children[ci];
        let combine = self.policy.digest == DigestPolicy::Combine;
        let compressed = self.parent.table().compression.is_some();
        let target = |want| DataTarget {
            want,
            allow_padded: self.policy.allow_padded,
            sharing,
            combine_digest: combine,
            out_path: data_path,
        };
        Ok(match (p.layout, p.geometry, compressed) {
            (Layout::Regrid, _, _) | (_, None, _) => {
                let runs = p.child.byte_runs();
                data::write_regrid(pd, &runs, combine, data_path)?
            }
            (want, Some(g), true) => data::write_compressed(
                pd,
                &g,
                &p.head,
                p.child.runs[0].end_position,
                &target(want),
            )?,
            (want, Some(g), false) => {
                data::write_uncompressed(pd, &g, &p.head, self.parent.crc_unit(), &target(want))?
            }
        })
    }

    fn finish_child(
        &self,
        ci: usize,
        o: Open,
        pd: &mut ParentData,
        sharing: Sharing,
        batch: &mut Batch,
        children_fp: &mut Fingerprint,
    ) -> Result<ChildReport, WriteError> {
        let t = self.parent.table();
        let p = &self.children[ci];
        let desc = o.desc;
        let (sinks, parts) = o.side.finish()?;
        for (c, w) in sinks {
            let path = desc.path(&c);
            let file = w
                .into_inner()
                .map_err(|e| WriteError::io(&path, e.into_error()))?;
            batch.adopt(&path, file, false);
        }
        children_fp.merge(&parts.fingerprint);
        let data_path = desc.path(&Component::Data);
        let mut result = self.write_data(ci, pd, sharing, &data_path)?;
        if let Some(f) = result.file.take() {
            batch.adopt(&data_path, f, true);
        }
        if let Some(ci_parent) = &t.compression {
            let path = desc.path(&Component::CompressionInfo);
            let f = fs::File::options()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| WriteError::io(&path, e))?;
            let mut w = BufWriter::new(f);
            data::write_compression_info(
                &mut w,
                &path,
                ci_parent,
                result.data_length,
                &result.offsets,
            )?;
            let f = w
                .into_inner()
                .map_err(|e| WriteError::io(&path, e.into_error()))?;
            batch.adopt(&path, f, false);
        }
        let digest = match self.policy.digest {
            DigestPolicy::Off => None,
            DigestPolicy::Combine if result.combined_digest.is_some() => result.combined_digest,
            DigestPolicy::Combine | DigestPolicy::Full => {
                let r = crate::sstable::data::DataReader::open(&data_path, None)?;
                Some(r.file_crc32(|_| {})?)
            }
        };
        let rebuilt = child::rebuilt_components(
            t,
            &parts,
            self.triple(p.label),
            result.data_length,
            result.file_size,
            result.crc.as_ref(),
            digest,
        )?;
        for (c, bytes) in &rebuilt {
            let path = desc.path(c);
            batch.file(&path, bytes)?;
            crate::io::fault::point("write:child-file");
        }
        batch.last(
            &desc.path(&Component::Toc),
            child::toc(t.descriptor.format, t.compression.is_some(), &rebuilt),
        );
        Ok(self.child_report(ci, data_path, &parts, result))
    }

    fn child_report(
        &self,
        ci: usize,
        path: PathBuf,
        parts: &IndexParts,
        result: DataResult,
    ) -> ChildReport {
        let p = &self.children[ci];
        let triple = self.triple(p.label);
        let st = self.parent.table().statistics.stats.as_ref();
        let version = self.parent.table().descriptor.version;
        let (repaired_at, pending_repair, is_transient) = match triple {
            Some(t) => (
                Some(t.repaired_at),
                if version.has_pending_repair() {
                    t.pending_repair.map(|u| uuid_string(&u))
                } else {
                    None
                },
                st.and_then(|s| s.is_transient).map(|_| t.is_transient),
            ),
            None => (
                st.map(|s| s.repaired_at),
                st.and_then(|s| s.pending_repair.flatten())
                    .map(|u| uuid_string(&u)),
                st.and_then(|s| s.is_transient),
            ),
        };
        let runs = &p.child.runs;
        ChildReport {
            path,
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
            dead_prefix: match p.head {
                super::head::Head::Zeros => p.geometry.map_or(0, |g| g.dead_prefix),
                super::head::Head::Filler(_) => 0,
            },
            filler_partitions: parts.fillers,
            filler_bytes: p.head.fillers().iter().map(|f| f.bytes.len() as u64).sum(),
            layout: result.layout.unwrap_or(p.layout),
            bytes_shared: result.bytes_shared,
            bytes_copied: result.bytes_copied,
            bytes_reencoded: result.bytes_reencoded,
            fallback: result.fallback.or_else(|| p.fallback.clone()),
            label: p.label,
            repaired_at,
            pending_repair,
            is_transient,
        }
    }

    /// A zero-copy child's Data.db as segments (parent ranges to share, copy or send, and
    /// bytes cleave encoded), without writing anything. Compressed parents only; `block`
    /// is the receiver's reflink block (0 when it does not matter).
    pub fn data_layout(&self, ci: usize, block: u64) -> Result<DataLayout, WriteError> {
        let p = &self.children[ci];
        if p.layout == Layout::Regrid {
            let bytes = p.child.bytes();
            if bytes > data::MAX_REGRID_IN_MEMORY {
                return Err(WriteError::Target {
                    path: self.parent.data_path().to_path_buf(),
                    message: format!(
                        "child {ci} must be regrid (its dead prefix cannot stay for {} and no filler fits) and holds {bytes} bytes, more than the {} a sender re-encodes in memory: split it locally with `cleave split --target-cassandra` and send the children whole",
                        self.policy.target,
                        data::MAX_REGRID_IN_MEMORY
                    ),
                });
            }
            let runs = p.child.byte_runs();
            let mut pd = self.parent_data()?;
            return Ok(data::regrid_layout(
                &mut pd,
                &runs,
                self.parent.data_path(),
            )?);
        }
        let Some(g) = p.geometry.filter(|_| p.layout != Layout::Regrid) else {
            return Err(WriteError::Target {
                path: self.parent.data_path().to_path_buf(),
                message: format!("child {ci} is a regrid child: it has no parent ranges to carry"),
            });
        };
        let mut pd = self.parent_data()?;
        let no_share = (block == 0).then_some(crate::io::reflink::CloneRefusal::NotSupported);
        Ok(data::compressed_layout(
            &mut pd,
            &g,
            &p.head,
            p.child.runs[0].end_position,
            &DataTarget {
                want: p.layout,
                allow_padded: self.policy.allow_padded,
                sharing: Sharing { block, no_share },
                combine_digest: false,
                out_path: self.parent.data_path(),
            },
        )?)
    }

    /// A child's components but Data.db, in memory, in TOC order: Index, CompressionInfo
    /// (from `layout`), CRC, Summary, Filter, Statistics, Digest (`combine` only), TOC.
    /// Reads only the child's part of the parent's Index.db.
    pub fn components(&self, ci: usize, layout: &DataLayout) -> Result<Vec<Built>, WriteError> {
        let p = &self.children[ci];
        let t = self.parent.table();
        let shape = self.index_shape()?;
        // The parent's names: only errors show them.
        let mut side = IndexSide::new(
            &t.descriptor,
            t.partitioner,
            |_| Ok(Vec::new()),
            &shape,
            p.child.partitions() + p.head.fillers().len() as u64,
        )?;
        let src = self.partition_source()?;
        let index_path = side.index_path.clone();
        side.add_fillers(&p.head)?;
        let base = p.geometry.map_or(0, |g| g.base);
        let lead = p.geometry.map_or(0, |g| g.lead);
        let data_length = t.data_length();
        // A regrid child lays its runs back to back from position 0.
        let regrid = p.layout == Layout::Regrid;
        let mut run_offset = 0u64;
        let mut reader: Option<PartitionReader<'_>> = None;
        for run in &p.child.runs {
            let at = |pos: u64| {
                if regrid {
                    run_offset + (pos - run.first_position)
                } else {
                    pos - base + lead
                }
            };
            let advanced = match reader.as_mut() {
                Some(r) => r.advance_to(run.index_start)?,
                None => false,
            };
            let r = match reader {
                Some(ref mut r) if advanced => r,
                _ => reader.insert(src.reader_at(t, run.index_start)?),
            };
            let mut prev = Pending::default();
            let mut next = Pending::default();
            let mut n = 0;
            loop {
                let more = n < run.partitions()
                    && match r.next_entry()? {
                        Some(e) => {
                            next.fill(run.first_ordinal + n, &e);
                            true
                        }
                        None => false,
                    };
                if prev.live {
                    let pos = prev.position;
                    let end = if more {
                        next.position
                    } else {
                        run.end_position.min(data_length)
                    };
                    if prev.ordinal < self.parent.leading_empty() {
                        side.add_filler(&prev.key, at(pos), end - pos)?;
                    } else {
                        let row_index = RowIndexRef {
                            promoted: &prev.promoted,
                            rows: prev.row_index.as_ref(),
                        };
                        let key = if prev.ordinal == p.child.runs[0].first_ordinal {
                            prev.child_key().with_key(&p.child.runs[0].first_key)
                        } else {
                            prev.child_key()
                        };
                        side.add(key, prev.hash, at(pos), end - pos, row_index)?;
                    }
                }
                if !more {
                    break;
                }
                std::mem::swap(&mut prev, &mut next);
                n += 1;
            }
            // The run's entries end where the plan says (a sampled plan's counts come from
            // Summary.db; this is the check `write`'s pass makes at every run start).
            if n != run.partitions() || r.offset() != run.index_end {
                return Err(FormatError::corrupt(
                    &index_path,
                    Some(r.offset()),
                    format!(
                        "child {ci}: {n} partitions end here, the plan expected {} ending at offset {}",
                        run.partitions(),
                        run.index_end
                    ),
                )
                .into());
            }
            run_offset += run.bytes();
        }
        set_key_range(&mut side, p);
        let (index, parts) = side.finish()?;
        let mut out: Vec<Built> = index;
        if let Some(ci_parent) = &t.compression {
            let mut b = Vec::with_capacity(64 + layout.offsets.len() * 8);
            data::write_compression_info(
                &mut b,
                &t.path(&Component::CompressionInfo),
                ci_parent,
                layout.data_length,
                &layout.offsets,
            )?;
            out.push((Component::CompressionInfo, b));
        }
        let digest = match self.policy.digest {
            DigestPolicy::Off => None,
            _ => Some(layout_crc32(self, layout)?),
        };
        let rebuilt = child::rebuilt_components(
            t,
            &parts,
            self.triple(p.label),
            layout.data_length,
            layout.file_size,
            None,
            digest,
        )?;
        let toc = child::toc(t.descriptor.format, t.compression.is_some(), &rebuilt);
        out.extend(rebuilt);
        out.push((Component::Toc, toc));
        Ok(out)
    }
}

/// A trie-only child's first and last key, which its index side did not read: the plan's
/// (`trie_only::fill_run_keys`). A key-reading side keeps its own.
fn set_key_range<W: std::io::Write>(side: &mut IndexSide<W>, p: &super::plan::ChildPlan) {
    if let (Some(first), Some(last)) = (p.child.runs.first(), p.child.runs.last()) {
        side.set_key_range(&first.first_key, &last.last_key);
    }
}

impl Plan {
    /// The partitions as this plan read them: every key, or the trie's prefixes
    /// (`PlanSource::PartitionsTrie`).
    fn partition_source(&self) -> Result<PartitionSource, FormatError> {
        let t = self.parent.table();
        let keys = match self.source {
            PlanSource::PartitionsTrie => trie_only::key_mode(&self.cut),
            _ => crate::sstable::bti::scan::KeyMode::Every,
        };
        PartitionSource::with_keys(t, keys)
    }

    /// A trie-only plan's children take the parent's Filter.db (`split::trie_only`).
    fn index_shape(&self) -> Result<IndexShape, FormatError> {
        let shape = IndexShape::of(self.parent.table())?;
        Ok(match self.source {
            PlanSource::PartitionsTrie => shape.with_parent_filter(),
            _ => shape,
        })
    }
}

/// CRC32 of a child's Data.db from its segments: encoded bytes hashed, parent ranges read.
fn layout_crc32(plan: &Plan, layout: &DataLayout) -> Result<u32, WriteError> {
    use std::os::unix::fs::FileExt;
    let mut h = crc32fast::Hasher::new();
    let f = plan.parent.data_file();
    let mut buf = vec![0u8; 1 << 20];
    for s in &layout.segments {
        match s {
            Segment::Bytes { bytes, .. } => h.update(bytes),
            Segment::Parent { src, len, .. } => {
                let mut done = 0;
                while done < *len {
                    let n = (*len - done).min(buf.len() as u64) as usize;
                    f.read_exact_at(&mut buf[..n], src + done)
                        .map_err(|e| WriteError::io(plan.parent.data_path(), e))?;
                    h.update(&buf[..n]);
                    done += n as u64;
                }
            }
        }
    }
    Ok(h.finalize())
}
