//! Cleanup: drop the partitions a node no longer owns without rewriting a row.
//!
//! Per sstable of a table directory, from its index alone (`classify`, pure): wholly
//! inside the owned ranges → **kept** (the same file, untouched); wholly outside →
//! **dropped**; across a boundary → **split**: replaced by children holding exactly its
//! owned partitions, cut by `Cut::Owned` through the split pipeline (plan → write → check),
//! so they share the parent's chunks, get both ends re-encoded, follow the target rules of
//! `split::head` (no dead prefix for a 5.0.5+ or unknown target) and keep the parent's
//! `repairedAt`, `pendingRepair`, `isTransient`, level and commit-log intervals
//! (`child::child_statistics` with no repair triple clones the parent's Statistics.db).
//!
//! Cassandra's own cleanup (`CompactionManager.performCleanup` → `doCleanupOne`) skips an
//! sstable that `needsCleanup` finds wholly owned, drops one whose `[first, last]` bounds
//! intersect no owned range (only when the table has no secondary index), and rewrites
//! every other one through compaction. cleave makes the same three decisions, exactly, by
//! reading each key's token instead of bounds, and never rewrites a row.
//!
//! `--publish replace` publishes the whole table in **one** transaction log of type
//! `CLEANUP` (`OperationType.CLEANUP`, file name `cleanup`: `<v>_txn_cleanup_<uuid>.log`):
//! ADD for every child, REMOVE for every split and dropped parent, then the renames, then
//! COMMIT (`publish::replace_all`). A crash before COMMIT leaves every parent live
//! (`cleave recover`, or a Cassandra starting, deletes the ADDed children); after it every
//! child (the REMOVEd parents are deleted).

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::error::{PublishError, SplitError};
use super::parent::Parent;
use super::plan::{ChildPlan, PlanSource, PlannedChild, Policy};
use super::publish::{self, Publish, TxnOperation};
use super::report::ChildReport;
use super::spec::{Cut, OwnedRanges};
use super::staged::{self, Checked, Staged};
use super::{intent, Target};
use crate::reason::Reason;
use crate::sstable::{Component, Descriptor, Format, Partitioner, Token, TokenRange};
use std::sync::atomic::Ordering;

/// What cleanup does with one sstable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every key is owned: the sstable stays as it is (same inode).
    Kept,
    /// No key is owned: the sstable is removed.
    Dropped,
    /// Replaced by children holding exactly its owned keys.
    Split,
}

/// The verdict for one sstable from the plan of `Cut::Owned` (its owned runs, as children)
/// and its partition count. Leading empty partitions (`leading_empty`, the fillers of an
/// earlier split) are not keys: an sstable whose every real key is owned is kept even when
/// a filler's token is not.
pub fn classify(children: &[PlannedChild], partitions: u64, leading_empty: u64) -> Verdict {
    let owned = owned_keys(children, leading_empty);
    if owned == 0 {
        Verdict::Dropped
    } else if owned >= partitions.saturating_sub(leading_empty) {
        Verdict::Kept
    } else {
        Verdict::Split
    }
}

/// Keys (not fillers) in the owned runs.
fn owned_keys(children: &[PlannedChild], leading_empty: u64) -> u64 {
    children
        .iter()
        .flat_map(|c| &c.runs)
        .map(|r| (r.last_ordinal + 1).saturating_sub(r.first_ordinal.max(leading_empty)))
        .sum()
}

/// How a cleanup runs.
#[derive(Debug, Clone)]
pub struct CleanupOptions {
    /// Layout, digest, merge threshold, throttle and `--target-cassandra`, as for a split.
    pub policy: Policy,
    /// `Replace`: one transaction swaps the table's split and dropped sstables for the
    /// children (Cassandra stopped). `Stage`: the children go to `out_dir` and the table is
    /// not touched.
    pub publish: Publish,
    /// `Stage`: where the children go (a directory on the table's filesystem, not the table
    /// directory). `Replace`: the table directory, or `None`.
    pub out_dir: Option<PathBuf>,
    /// Classify and plan; write nothing.
    pub dry_run: bool,
    /// Asked once the children are staged and checked, just before publishing: an `Err`
    /// removes them and publishes nothing (the operator re-reads the ring here).
    pub gate: Option<Gate>,
    /// `OnRestart`: the job whose intent records the table's cleanup
    /// (`.cleave-pending/<job uid>/`, `split::intent`); required then.
    pub job_uid: Option<String>,
    /// Split sstables written and checked at the same moment (0 and 1: one at a time). They
    /// share the policy's throttle; publication stays one transaction for the table.
    pub parallelism: usize,
    /// `Some(p)`: the free-space pre-flight (`split::space`) once the sstables are
    /// classified, before anything is written (a dry run too): the children of the split
    /// sstables must fit in the filesystem's available space minus `p`% of its size.
    /// `None`: no pre-flight.
    pub min_free_percent: Option<u8>,
}

/// The last word before publication (see [`CleanupOptions::gate`]).
#[derive(Clone)]
pub struct Gate(pub std::sync::Arc<dyn Fn() -> Result<(), crate::reason::Failure> + Send + Sync>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gate")
    }
}

/// One sstable's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SSTableCleanup {
    /// The sstable's Data.db.
    pub path: PathBuf,
    pub verdict: Verdict,
    /// Its keys (fillers of an earlier split not counted), the owned ones, the dropped ones.
    pub partitions: u64,
    pub owned_partitions: u64,
    pub dropped_partitions: u64,
    /// Apparent bytes of all its files.
    pub file_bytes: u64,
    /// Of its children's Data.db (split only; predicted in a dry run).
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
    /// The Statistics.db facts its children carry over.
    pub level: Option<i32>,
    pub repaired_at: Option<i64>,
    pub pending_repair: Option<String>,
    pub is_transient: Option<bool>,
    /// Split, not a dry run: the published children.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildReport>,
    /// Split, dry run: what each child would be.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<ChildPlan>,
    pub plan_source: Option<PlanSource>,
}

/// What a cleanup of one table did (or, in a dry run, would do).
#[derive(Debug, Clone, serde::Serialize)]
pub struct CleanupReport {
    pub table_dir: PathBuf,
    pub dry_run: bool,
    /// Spelled as the CLI's `--publish` (`replace`, `stage`, `on-restart`), as a split
    /// report spells it (docs/json.md).
    #[serde(serialize_with = "Publish::serialize_name")]
    pub publish: Publish,
    /// Where the children went (the table directory for `replace`).
    pub out_dir: PathBuf,
    /// `on-restart`: the job whose intent records the cleanup; `cleave apply-pending`
    /// publishes it before Cassandra's next start (the children's paths are pending ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_uid: Option<String>,
    pub target_cassandra: String,
    /// The owned ranges, `(start, end]`.
    pub owned_ranges: Vec<super::ranges::RangeSpec>,
    pub sstables: Vec<SSTableCleanup>,
    pub kept: usize,
    pub dropped: usize,
    pub split: usize,
    pub children: usize,
    pub partitions_dropped: u64,
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
    /// Apparent bytes of the removed sstables minus those of their children (`replace`;
    /// 0 for `stage` and `on-restart`). A dry run of `replace` predicts it: the removed
    /// sstables' bytes less the planned children's predicted files (within 1% of what the
    /// run then reclaims, tests/cli_dry_run.rs). With reflink the children's shared extents
    /// stay allocated, so this is also what the filesystem gets back.
    pub bytes_reclaimed: u64,
    /// `/proc/self/io` read_bytes / write_bytes during the cleanup (device-level).
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub seconds: f64,
    /// What publication could not clean up after COMMIT (see `SplitReport::left_behind`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_behind: Vec<String>,
}

/// A cleanup refused before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    /// A secondary index of the table: its entries point at the base table's partitions,
    /// and dropping or moving those without the index's own cleanup leaves it stale.
    #[error("{table_dir} has a secondary index ({what} {path}): its entries would go stale when partitions are dropped or moved; cleave does not clean up indexed tables — use `nodetool cleanup` for this table", table_dir = .table_dir.display(), path = .path.display())]
    SecondaryIndex {
        table_dir: PathBuf,
        path: PathBuf,
        what: &'static str,
    },
    #[error("invalid cleanup request for {path}: {message}", path = .path.display())]
    Invalid { path: PathBuf, message: String },
    /// A transaction log in the table: Cassandra is compacting it, or an operation was
    /// interrupted; which sstables are live is not settled until it finishes.
    #[error("{log} is an unfinished transaction (a running compaction, or an interrupted operation): the live sstables are not settled; wait for it, or with Cassandra stopped run `cleave recover {table_dir}`", log = .log.display(), table_dir = .table_dir.display())]
    Unfinished { table_dir: PathBuf, log: PathBuf },
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The gate refused publication; the staged children were removed.
    #[error("{table_dir}: not published: {failure}", table_dir = .table_dir.display())]
    Gate {
        table_dir: PathBuf,
        failure: crate::reason::Failure,
    },
}

impl CleanupError {
    pub fn reason(&self) -> Reason {
        match self {
            CleanupError::SecondaryIndex { .. } => Reason::SecondaryIndexPresent,
            CleanupError::Invalid { .. } => Reason::InvalidRequest,
            CleanupError::Unfinished { .. } => Reason::TableBusy,
            CleanupError::Io { source, .. } => Reason::of_io(source),
            CleanupError::Gate { failure, .. } => failure.reason,
        }
    }
    pub fn path(&self) -> &Path {
        match self {
            CleanupError::SecondaryIndex { path, .. }
            | CleanupError::Invalid { path, .. }
            | CleanupError::Io { path, .. } => path,
            CleanupError::Unfinished { log, .. } => log,
            CleanupError::Gate { table_dir, .. } => table_dir,
        }
    }
}

/// The live sstables of a table directory (their Data.db), by generation.
pub fn list_sstables(table_dir: &Path) -> Result<Vec<PathBuf>, CleanupError> {
    let io = |source| CleanupError::Io {
        path: table_dir.to_path_buf(),
        source,
    };
    let mut v: Vec<(Descriptor, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(table_dir).map_err(io)? {
        let e = e.map_err(io)?;
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let path = e.path();
        if let Ok((d, Component::Data)) = Descriptor::from_path(&path) {
            v.push((d, path));
        }
    }
    v.sort_by_key(|(d, p)| {
        let seq = match d.id {
            crate::sstable::SSTableId::Sequence(s) => s as u64,
            _ => u64::MAX,
        };
        (seq, p.clone())
    });
    Ok(v.into_iter().map(|(_, p)| p).collect())
}

/// A secondary index of the table in `table_dir`, if any: a legacy index's own table
/// directory `.<index name>` inside it (`Directories.SECONDARY_INDEX_NAME_SEPARATOR`; index
/// names are word characters), or a per-sstable index component — SASI `SI_<name>.db`,
/// SAI `SAI+<version>+….db` (5.0) and `SAI_….db` (DSE) — on any sstable (`Component::
/// is_secondary_index`). cleave's own `.cleave-staging-…` directories have a `-`, so they
/// are not index names.
pub fn secondary_index(table_dir: &Path) -> Result<Option<(PathBuf, &'static str)>, CleanupError> {
    let io = |source| CleanupError::Io {
        path: table_dir.to_path_buf(),
        source,
    };
    for e in std::fs::read_dir(table_dir).map_err(io)? {
        let e = e.map_err(io)?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            if let Some(index) = name.strip_prefix('.') {
                if !index.is_empty() && index.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    return Ok(Some((e.path(), "index directory")));
                }
            }
        } else if let Ok((_, c)) = Descriptor::from_path(&e.path()) {
            if c.is_secondary_index() {
                return Ok(Some((e.path(), "index component")));
            }
        }
    }
    Ok(None)
}

/// A transaction log in the table directory (Cassandra's or cleave's).
fn unfinished_log(table_dir: &Path) -> Result<Option<PathBuf>, CleanupError> {
    let io = |source| CleanupError::Io {
        path: table_dir.to_path_buf(),
        source,
    };
    for e in std::fs::read_dir(table_dir).map_err(io)? {
        let e = e.map_err(io)?;
        if e.file_name().to_str().is_some_and(publish::is_log_name) {
            return Ok(Some(e.path()));
        }
    }
    Ok(None)
}

/// The partitioner whose tokens these are (used only when the table has no sstable to say).
fn partitioner_of(ranges: &[TokenRange]) -> Partitioner {
    match ranges.first().map(|r| &r.left) {
        Some(Token::Random(_)) => Partitioner::Random,
        Some(Token::Bytes(_)) => Partitioner::ByteOrdered,
        _ => Partitioner::Murmur3,
    }
}

fn file_bytes(dir: &Path, d: &Descriptor) -> u64 {
    publish::sstable_files(dir, d)
        .unwrap_or_default()
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

/// The apparent bytes of all the files of a planned child, predicted: its Data.db is the
/// plan's shared + copied + re-encoded bytes; its Index.db the parent's entries of its
/// runs; Summary.db and Filter.db (per partition) and CompressionInfo.db and CRC.db (per
/// chunk) the parent's in proportion; Statistics.db and TOC.txt the parent's size (the
/// same fields); Digest.crc32 only when the policy writes one.
fn predicted_file_bytes(parent: &Parent, partitions: u64, c: &ChildPlan, policy: &Policy) -> u64 {
    let t = parent.table();
    let data = c.predicted.bytes_shared + c.predicted.bytes_copied + c.predicted.bytes_reencoded;
    // A BTI run's offsets are Data.db positions (`sstable::scan`): its Partitions.db and
    // Rows.db are counted per partition below.
    let index: u64 = match t.descriptor.format {
        Format::Big => c
            .child
            .runs
            .iter()
            .map(|r| r.index_end - r.index_start)
            .sum(),
        Format::Bti => 0,
    };
    let part = |n: u64, of: u64| -> u64 {
        if of == 0 {
            0
        } else {
            (n as u128 * of as u128 / t.data_file_size.max(1) as u128) as u64
        }
    };
    let keys = partitions.max(1);
    let mut other = 0u64;
    for (comp, n) in &t.files {
        other += match comp {
            Component::Data | Component::Index => 0,
            Component::Summary | Component::Filter | Component::Partitions | Component::Rows => {
                (*n as u128 * c.child.partitions() as u128 / keys as u128) as u64
            }
            Component::CompressionInfo | Component::Crc => part(data, *n),
            Component::Digest if policy.digest == super::plan::DigestPolicy::Off => 0,
            _ => *n,
        };
    }
    data + index + other
}

fn uuid_string(b: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*b).hyphenated().to_string()
}

/// One parent with its plan and verdict.
struct Planned {
    parent: Parent,
    verdict: Verdict,
    plan: super::plan::Plan,
    result: SSTableCleanup,
}

/// Cleans up the table in `table_dir` to the `owned` ranges; see the module comment. Fails
/// with a typed reason and nothing changed on disk — `SecondaryIndexPresent`, `InvalidRequest`
/// (owned ranges empty or overlapping, `--out` wrong), `CassandraRunning` (replace),
/// `TableBusy` (a transaction log in the table), `Busy` (another cleave) — or, from the
/// split pipeline, with its reason; any failure before COMMIT leaves every parent live.
pub fn cleanup(
    table_dir: &Path,
    owned: &[TokenRange],
    opts: &CleanupOptions,
) -> Result<CleanupReport, SplitError> {
    let started = Instant::now();
    let io_before = crate::io::proc::io_counters().ok();
    let invalid = |message: String| CleanupError::Invalid {
        path: table_dir.to_path_buf(),
        message,
    };
    if !table_dir.is_dir() {
        return Err(invalid("not a directory".into()).into());
    }
    let canon = |p: &Path| {
        std::fs::canonicalize(p).map_err(|source| CleanupError::Io {
            path: p.to_path_buf(),
            source,
        })
    };
    let table_canon = canon(table_dir)?;
    if opts.publish == Publish::OnRestart && opts.job_uid.is_none() {
        return Err(invalid(
            "--publish on-restart needs the job uid its intent is recorded under (--job-uid)"
                .into(),
        )
        .into());
    }
    if let Some(uid) = &opts.job_uid {
        intent::check_job_uid(uid)?;
    }
    let out_dir = match (opts.publish, &opts.out_dir) {
        // Replace publishes into the table directory; OnRestart pends in its own pending
        // directory (`split::intent`).
        (Publish::Replace | Publish::OnRestart, None) => table_dir.to_path_buf(),
        (Publish::Replace | Publish::OnRestart, Some(o)) => {
            let o_canon = canon(o)?;
            if o_canon != table_canon {
                return Err(SplitError::Publish(PublishError::NotTableDir {
                    table_dir: table_canon,
                    out: o_canon,
                }));
            }
            table_dir.to_path_buf()
        }
        (Publish::Stage, None) => {
            return Err(invalid(
                "--publish stage needs --out DIR (a directory on the table's filesystem, not the table directory)".into(),
            )
            .into())
        }
        (Publish::Stage, Some(o)) => {
            if !o.is_dir() {
                return Err(invalid(format!("--out {}: not a directory", o.display())).into());
            }
            if canon(o)? == table_canon {
                return Err(invalid(format!(
                    "--publish stage into the table directory {} would make the children live beside their parents (every owned row twice); stage elsewhere, or use --publish replace",
                    table_dir.display()
                ))
                .into());
            }
            o.clone()
        }
    };
    if let Some((path, what)) = secondary_index(table_dir)? {
        return Err(CleanupError::SecondaryIndex {
            table_dir: table_dir.to_path_buf(),
            path,
            what,
        }
        .into());
    }
    let target = Target {
        out_dir: out_dir.clone(),
        publish: opts.publish,
        dry_run: opts.dry_run,
    };
    // The table's lock from before the first sstable is opened until publication (G1).
    let lock = super::lock_table(table_dir, &target)?;
    if let Some(log) = unfinished_log(table_dir)? {
        return Err(CleanupError::Unfinished {
            table_dir: table_dir.to_path_buf(),
            log,
        }
        .into());
    }
    let paths = list_sstables(table_dir)?;
    let mut parents = Vec::with_capacity(paths.len());
    for p in &paths {
        parents.push(Parent::open(p)?);
    }
    // The pages of the parents' Index.db and Data.db that this cleanup reads are dropped at
    // the end; those a live node had cached stay (G9, as `split::run`).
    let _evict = crate::io::residency::EvictAddedOnDrop::new(
        &parents
            .iter()
            .flat_map(|p| {
                let mut read = p.table().index_paths();
                read.push(p.data_path().to_path_buf());
                read
            })
            .collect::<Vec<_>>(),
    );
    let partitioner = parents
        .first()
        .map_or_else(|| partitioner_of(owned), |p| p.table().partitioner);
    if let Some(p) = parents
        .iter()
        .find(|p| p.table().partitioner != partitioner)
    {
        return Err(invalid(format!(
            "{} uses {}, the table's other sstables {}",
            p.data_path().display(),
            p.table().partitioner.class_name(),
            partitioner.class_name()
        ))
        .into());
    }
    let owned = OwnedRanges {
        ranges: owned.to_vec(),
    };
    owned.validate(partitioner).map_err(invalid)?;
    // The Replace guard (`staged::preflight`: the out directory is the table directory and
    // no process holds its files), asked before writing and again before publishing.
    // With the guard's proof the children are written unsynced and made durable by the one
    // syncfs of `publish::replace_all` (`Durability::SyncFs`).
    let mut durability = publish::Durability::PerFile;
    if opts.publish == Publish::Replace && !opts.dry_run {
        if let Some(p) = parents.first() {
            durability = staged::preflight(p, table_dir, Publish::Replace)?;
        }
    }
    let cut = Cut::Owned(owned.clone());
    let mut planned = Vec::with_capacity(parents.len());
    for parent in parents {
        let plan = parent.plan(&cut, &opts.policy)?;
        let lead = parent.leading_empty();
        let children: Vec<PlannedChild> = plan.children.iter().map(|c| c.child.clone()).collect();
        let verdict = classify(&children, plan.partitions, lead);
        let keys = plan.partitions.saturating_sub(lead);
        let owned_n = owned_keys(&children, lead);
        let t = parent.table();
        let st = t.statistics.stats.as_ref();
        let mut result = SSTableCleanup {
            path: parent.data_path().to_path_buf(),
            verdict,
            partitions: keys,
            owned_partitions: owned_n,
            dropped_partitions: keys - owned_n.min(keys),
            file_bytes: file_bytes(parent.dir(), &t.descriptor),
            bytes_shared: 0,
            bytes_copied: 0,
            bytes_reencoded: 0,
            level: st.map(|s| s.sstable_level),
            repaired_at: st.map(|s| s.repaired_at),
            pending_repair: st
                .and_then(|s| s.pending_repair.flatten())
                .map(|u| uuid_string(&u)),
            is_transient: st.and_then(|s| s.is_transient),
            children: Vec::new(),
            plan: Vec::new(),
            plan_source: Some(plan.source),
        };
        if verdict == Verdict::Split && opts.dry_run {
            for c in &plan.children {
                result.bytes_shared += c.predicted.bytes_shared;
                result.bytes_copied += c.predicted.bytes_copied;
                result.bytes_reencoded += c.predicted.bytes_reencoded;
            }
            result.plan = plan.children.clone();
        }
        planned.push(Planned {
            parent,
            verdict,
            plan,
            result,
        });
    }
    let mut report = CleanupReport {
        table_dir: table_dir.to_path_buf(),
        dry_run: opts.dry_run,
        publish: opts.publish,
        out_dir: out_dir.clone(),
        job_uid: opts
            .job_uid
            .clone()
            .filter(|_| opts.publish == Publish::OnRestart),
        target_cassandra: opts.policy.target.to_string(),
        owned_ranges: owned
            .ranges
            .iter()
            .map(|r| super::ranges::RangeSpec {
                start: r.left.to_string(),
                end: r.right.to_string(),
            })
            .collect(),
        sstables: Vec::new(),
        kept: 0,
        dropped: 0,
        split: 0,
        children: 0,
        partitions_dropped: 0,
        bytes_shared: 0,
        bytes_copied: 0,
        bytes_reencoded: 0,
        bytes_reclaimed: 0,
        read_bytes: 0,
        write_bytes: 0,
        seconds: 0.0,
        left_behind: Vec::new(),
    };
    if let Some(pct) = opts.min_free_percent {
        let shares = super::space::shares_data(&out_dir, opts.policy.layout);
        let predicted: u64 = planned
            .iter()
            .filter(|p| p.verdict == Verdict::Split)
            .map(|p| super::space::predicted_bytes(p.parent.data_path(), shares))
            .sum();
        super::space::preflight(&out_dir, predicted, pct)?;
    }
    if opts.dry_run {
        // What the run would reclaim, by the run's own sum (below): the files of the
        // sstables it removes less those of the children it writes, predicted.
        if opts.publish == Publish::Replace {
            let removed: u64 = planned
                .iter()
                .filter(|p| p.verdict != Verdict::Kept)
                .map(|p| p.result.file_bytes)
                .sum();
            let children: u64 = planned
                .iter()
                .filter(|p| p.verdict == Verdict::Split)
                .flat_map(|p| p.plan.children.iter().map(move |c| (p, c)))
                .map(|(p, c)| predicted_file_bytes(&p.parent, p.plan.partitions, c, &opts.policy))
                .sum();
            report.bytes_reclaimed = removed.saturating_sub(children);
        }
        report.sstables = planned.into_iter().map(|p| p.result).collect();
        return Ok(finish(report, started, io_before));
    }

    // Every split sstable written into its own staging directory and checked: its
    // children's keys are exactly its keys in the owned ranges (`write`'s `owned_fp`).
    let staged = write_all(&planned, &out_dir, &durability, opts.parallelism)?;
    if let Some(gate) = &opts.gate {
        // `staged` dropped on return removes every staging directory.
        gate.0().map_err(|failure| CleanupError::Gate {
            table_dir: table_dir.to_path_buf(),
            failure,
        })?;
    }
    let (children_of, left_behind) = match (opts.publish, &opts.job_uid) {
        (Publish::OnRestart, Some(uid)) => (
            pend_all(table_dir, uid, &planned, staged, &lock)?,
            Vec::new(),
        ),
        _ => publish_now(table_dir, &out_dir, opts.publish, &planned, staged)?,
    };
    drop(lock);
    let mut children_of = children_of.into_iter();
    for mut p in planned {
        if p.verdict == Verdict::Split {
            for c in children_of.next().unwrap_or_default() {
                p.result.bytes_shared += c.bytes_shared;
                p.result.bytes_copied += c.bytes_copied;
                p.result.bytes_reencoded += c.bytes_reencoded;
                p.result.children.push(c);
            }
        }
        report.sstables.push(p.result);
    }
    report.left_behind = left_behind;
    if opts.publish == Publish::Replace {
        let removed_bytes: u64 = report
            .sstables
            .iter()
            .filter(|s| s.verdict != Verdict::Kept)
            .map(|s| s.file_bytes)
            .sum();
        let children_bytes: u64 = report
            .sstables
            .iter()
            .flat_map(|s| &s.children)
            .filter_map(|c| Descriptor::from_path(&c.path).ok())
            .map(|(d, _)| file_bytes(&d.dir.clone(), &d))
            .sum();
        report.bytes_reclaimed = removed_bytes.saturating_sub(children_bytes);
    }
    Ok(finish(report, started, io_before))
}

/// Writes and checks every split sstable, up to `parallelism` at once, each into its own
/// staging directory, in the order of `planned`. The first failure stops the others from
/// starting a new one; every staged result is dropped (its staging removed) on failure.
fn write_all(
    planned: &[Planned],
    out_dir: &Path,
    durability: &publish::Durability,
    parallelism: usize,
) -> Result<Vec<Staged<Checked>>, SplitError> {
    let todo: Vec<&Planned> = planned
        .iter()
        .filter(|p| p.verdict == Verdict::Split)
        .collect();
    let one = |p: &Planned| -> Result<Staged<Checked>, SplitError> {
        Ok(p.plan.write_with(out_dir, durability)?.check()?)
    };
    let workers = parallelism.clamp(1, todo.len().max(1));
    if workers == 1 {
        return todo.into_iter().map(one).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut slots: Vec<Option<Result<Staged<Checked>, SplitError>>> =
        todo.iter().map(|_| None).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(p) = todo.get(i) else { break };
                        let r = one(p);
                        let failed = r.is_err();
                        mine.push((i, r));
                        if failed {
                            next.store(todo.len(), Ordering::Relaxed);
                        }
                    }
                    mine
                })
            })
            .collect();
        for h in handles {
            if let Ok(done) = h.join() {
                for (i, r) in done {
                    if let Some(slot) = slots.get_mut(i) {
                        *slot = Some(r);
                    }
                }
            }
        }
    });
    let mut staged = Vec::with_capacity(slots.len());
    let mut skipped = false;
    for slot in slots {
        match slot {
            Some(Ok(s)) => staged.push(s),
            Some(Err(e)) => return Err(e),
            None => skipped = true,
        }
    }
    if skipped {
        return Err(CleanupError::Io {
            path: out_dir.to_path_buf(),
            source: std::io::Error::other(
                "a cleanup writer thread panicked; nothing was published",
            ),
        }
        .into());
    }
    Ok(staged)
}

/// `Replace` (one transaction for the table) or `Stage`: the children's reports, one list
/// per split sstable in the order of `planned`, with their published paths.
fn publish_now(
    table_dir: &Path,
    out_dir: &Path,
    mode: Publish,
    planned: &[Planned],
    staged: Vec<Staged<Checked>>,
) -> Result<(Vec<Vec<ChildReport>>, Vec<String>), SplitError> {
    let children: Vec<(PathBuf, Descriptor)> = staged
        .iter()
        .flat_map(|s| s.descs.iter().map(|d| (s.staging.clone(), d.clone())))
        .collect();
    let removed: Vec<Descriptor> = planned
        .iter()
        .filter(|p| p.verdict != Verdict::Kept)
        .map(|p| p.parent.table().descriptor.clone())
        .collect();
    let published = match mode {
        Publish::Replace if removed.is_empty() => publish::Published::default(),
        Publish::Replace => match planned.first() {
            Some(p) => publish::replace_all(
                table_dir,
                &children,
                &removed,
                TxnOperation::Cleanup,
                &staged::replace_guard(&p.parent, table_dir)?,
            )?,
            None => publish::Published::default(),
        },
        Publish::Stage if children.is_empty() => publish::Published::default(),
        Publish::Stage => publish::stage_all(out_dir, &children)?,
        Publish::OnRestart => publish::Published::default(),
    };
    let mut finals = published.data_paths.into_iter();
    let mut reports = Vec::with_capacity(staged.len());
    for mut s in staged {
        s.guard.disarm();
        let mut mine = std::mem::take(&mut s.reports);
        for c in &mut mine {
            if let Some(f) = finals.next() {
                c.path = f;
            }
        }
        reports.push(mine);
    }
    Ok((reports, published.left_behind))
}

/// `OnRestart`: each split sstable's checked children moved into the job's pending
/// directory, then every split and dropped sstable recorded in the job's intent for this
/// table in one write (`split::intent`); apply-pending publishes them in one `CLEANUP`
/// transaction before the next start. A kill before that write leaves children no intent
/// names, which the next apply-pending removes: the table is cleaned up whole or not at
/// all. A failure withdraws the job from this table (we hold its lock).
fn pend_all(
    table_dir: &Path,
    job_uid: &str,
    planned: &[Planned],
    staged: Vec<Staged<Checked>>,
    lock: &super::SplitLock,
) -> Result<Vec<Vec<ChildReport>>, SplitError> {
    let mut staged = staged.into_iter();
    let mut reports = Vec::new();
    let mut pend = || -> Result<(), SplitError> {
        let mut parents = Vec::new();
        for p in planned {
            match p.verdict {
                Verdict::Kept => {}
                Verdict::Dropped => parents.push(intent::dropped(p.parent.data_path())?),
                Verdict::Split => {
                    if let Some(s) = staged.next() {
                        let (parent, r) = s.pend_unrecorded(job_uid)?;
                        parents.push(parent);
                        reports.push(r.split.children);
                    }
                }
            }
        }
        if !parents.is_empty() {
            let table = std::fs::canonicalize(table_dir).map_err(|source| CleanupError::Io {
                path: table_dir.to_path_buf(),
                source,
            })?;
            intent::record(&table, job_uid, TxnOperation::Cleanup.file_name(), parents)?;
        }
        Ok(())
    };
    if let Err(e) = pend() {
        if let Err(w) = intent::withdraw_locked(table_dir, job_uid, lock) {
            tracing::warn!(error = %w, "the half-pended cleanup of this table was not withdrawn");
        }
        return Err(e);
    }
    Ok(reports)
}

fn finish(
    mut r: CleanupReport,
    started: Instant,
    io_before: Option<crate::io::proc::IoCounters>,
) -> CleanupReport {
    for s in &r.sstables {
        match s.verdict {
            Verdict::Kept => r.kept += 1,
            Verdict::Dropped => r.dropped += 1,
            Verdict::Split => r.split += 1,
        }
        r.children += s.children.len().max(s.plan.len());
        r.partitions_dropped += s.dropped_partitions;
        r.bytes_shared += s.bytes_shared;
        r.bytes_copied += s.bytes_copied;
        r.bytes_reencoded += s.bytes_reencoded;
    }
    if let (Some(a), Ok(b)) = (io_before, crate::io::proc::io_counters()) {
        let d = b.since(&a);
        r.read_bytes = d.read_bytes;
        r.write_bytes = d.write_bytes;
    }
    r.seconds = started.elapsed().as_secs_f64();
    r
}

#[cfg(test)]
mod tests {
    use super::super::plan::{Grouper, PlannedChild};
    use super::*;

    fn m(v: i64) -> Token {
        Token::Murmur3(v)
    }

    /// Plans tokens at positions 0, 100, 200, … through the streaming grouper.
    fn plan(tokens: &[i64], owned: &[(i64, i64)], merge: u64) -> Vec<PlannedChild> {
        let o = OwnedRanges {
            ranges: owned
                .iter()
                .map(|(l, r)| TokenRange::new(m(*l), m(*r)))
                .collect(),
        };
        let len = tokens.len() as u64 * 100;
        let mut g = Grouper::new(Cut::Owned(o), Partitioner::Murmur3, len, 100, 0);
        for (i, t) in tokens.iter().enumerate() {
            g.push(&[i as u8], &m(*t), i as u64 * 100, i as u64 * 10);
        }
        g.finish(merge, tokens.len() as u64 * 10)
    }

    #[test]
    fn an_sstable_inside_the_owned_ranges_is_kept() {
        let c = plan(&[1, 2, 3, 10], &[(0, 10), (20, 30)], 0);
        assert_eq!(classify(&c, 4, 0), Verdict::Kept);
        assert_eq!(c.len(), 1);
        assert_eq!(
            c[0].label, None,
            "cleanup children keep the parent's metadata"
        );
    }

    #[test]
    fn an_sstable_outside_is_dropped() {
        // (0, 10] excludes 0; 11..=20 lie between the ranges.
        let c = plan(&[0, 11, 15, 20], &[(0, 10), (20, 30)], 0);
        assert!(c.is_empty());
        assert_eq!(classify(&c, 4, 0), Verdict::Dropped);
    }

    #[test]
    fn an_sstable_across_a_bound_is_split_into_its_owned_runs() {
        let c = plan(&[-5, 1, 2, 12, 13, 25, 26, 40], &[(0, 10), (20, 30)], 0);
        assert_eq!(classify(&c, 8, 0), Verdict::Split);
        let runs: Vec<(u64, u64)> = c
            .iter()
            .flat_map(|c| &c.runs)
            .map(|r| (r.first_ordinal, r.last_ordinal))
            .collect();
        assert_eq!(runs, vec![(1, 2), (5, 6)]);
        assert!(c.iter().all(|c| !c.merged));
        // Small runs merge into one regrid child, as anticompaction's do.
        let merged = plan(&[-5, 1, 2, 12, 13, 25, 26, 40], &[(0, 10), (20, 30)], 8);
        assert_eq!(merged.len(), 1);
        assert!(merged[0].merged);
        assert_eq!(merged[0].partitions(), 4);
    }

    #[test]
    fn wrapping_ranges_and_fillers() {
        // (30, 0] wraps: -5 and 40 are owned.
        let c = plan(&[-5, 1, 2, 40], &[(30, 0)], 0);
        assert_eq!(classify(&c, 4, 0), Verdict::Split);
        assert_eq!(c.iter().map(PlannedChild::partitions).sum::<u64>(), 2);
        // A leading filler outside the owned ranges is not a key: still kept.
        let c = plan(&[-5, 1, 2, 3], &[(0, 10)], 0);
        assert_eq!(classify(&c, 4, 1), Verdict::Kept);
        assert_eq!(classify(&c, 4, 0), Verdict::Split);
    }
}
