//! Splitting one SSTable into children by token range, as one typed pipeline:
//!
//! `Parent::open(path)` → `parent.plan(&Cut, &Policy)` (pure; `--dry-run` stops here) →
//! `plan.write(out)` → `Staged<Unchecked>` → `.check()` → `Staged<Checked>` →
//! `.publish(mode)`.
//!
//! Each step has its own error (`error`), each error a stable `Reason`; `run` is the
//! pipeline end to end, called by the CLI and the operator alike, under a `SplitLock`
//! taken (`lock`) before the parent is opened.

pub mod check;
pub mod child;
pub mod cleanup;
pub mod data;
pub mod error;
pub mod fallback;
pub mod guard;
pub mod head;
pub mod import_dir;
pub mod intent;
pub mod parent;
pub mod plan;
pub mod probe;
pub mod publish;
pub mod ranges;
pub mod regrid;
pub mod report;
pub mod sampled;
pub mod space;
pub mod spec;
pub mod staged;
pub mod survey;
pub mod trie_only;
pub mod write;

use std::path::{Path, PathBuf};

pub use error::{PublishError, SplitError};
pub use fallback::Fallback;
pub use parent::Parent;
pub use plan::{DigestPolicy, Plan, Policy};
pub use report::{ChildReport, SplitReport};
pub use spec::Cut;
pub use write::Progress;

/// Where and how a split's children are published.
#[derive(Debug, Clone)]
pub struct Target {
    pub out_dir: PathBuf,
    pub publish: publish::Publish,
    /// Stop after planning: nothing is written.
    pub dry_run: bool,
}

/// Progress of a whole split.
#[derive(Debug, Clone, Copy)]
pub enum RunProgress {
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

/// The exclusive locks of a split: the parent's table directory and `--out` (one lock when
/// they are the same directory), held from before the parent is opened until its children
/// are published. Without them two splits of one table pick the same generation ids
/// (`Plan::write`) and the later renames overwrite the earlier children; taken before
/// `Parent::open` so that a second cleave is told `Busy` instead of being taken for a live
/// Cassandra (`staged::preflight`) because it holds the parent open. `recover` takes the
/// same lock. Released on drop, or by the kernel when the process dies.
///
/// Within one process the lock is shared: the operator splits `parallelism` sstables of one
/// table at once, and a second `flock` of the same directory from the same process would
/// refuse it (`flock` locks are per open file description). Those splits share one kernel
/// lock (`HELD`, counted by `Arc`), and `publish::next_generations` reserves the ids it hands
/// out in this process, so two of them never pick the same generation.
#[derive(Debug)]
pub struct SplitLock {
    _held: Option<std::sync::Arc<HeldLock>>,
}

#[derive(Debug)]
pub struct HeldLock {
    _dirs: Vec<crate::io::lock::DirLock>,
}

/// A held lock's key: (table directory, --out), canonical.
type LockKey = (PathBuf, PathBuf);

/// The locks this process holds, by key, while any split uses them.
static HELD: std::sync::Mutex<Vec<(LockKey, std::sync::Weak<HeldLock>)>> =
    std::sync::Mutex::new(Vec::new());

/// Locks the table directory of the sstable `parent_path` and `target.out_dir`, without
/// waiting (`PublishError::Busy` when another cleave holds either). A dry run writes
/// nothing and locks nothing; neither does a target that is not a directory (`Plan::write`
/// refuses it).
pub fn lock(parent_path: &Path, target: &Target) -> Result<SplitLock, PublishError> {
    let parent_dir = parent_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    lock_table(parent_dir, target)
}

/// `lock` by table directory: what a cleanup, which works on every sstable of the table,
/// holds from before it opens the first until it published.
pub fn lock_table(parent_dir: &Path, target: &Target) -> Result<SplitLock, PublishError> {
    if target.dry_run || !target.out_dir.is_dir() || !parent_dir.is_dir() {
        return Ok(SplitLock { _held: None });
    }
    let key = (
        std::fs::canonicalize(parent_dir).unwrap_or_else(|_| parent_dir.to_path_buf()),
        std::fs::canonicalize(&target.out_dir).unwrap_or_else(|_| target.out_dir.clone()),
    );
    // The registry stays locked while a fresh lock is taken and stale staging removed, so a
    // split of this process that shares the lock cannot create staging before that removal.
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    held.retain(|(_, w)| w.strong_count() > 0);
    if let Some(shared) = held
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        return Ok(SplitLock {
            _held: Some(shared),
        });
    }
    let fresh = std::sync::Arc::new(HeldLock {
        _dirs: publish::lock_for_split(parent_dir, &target.out_dir)?,
    });
    // Staging left in --out by a killed split: stale, since no split holds the lock.
    publish::remove_staging_dirs(&target.out_dir).map_err(PublishError::Format)?;
    held.push((key, std::sync::Arc::downgrade(&fresh)));
    Ok(SplitLock { _held: Some(fresh) })
}

/// The pipeline end to end on an opened parent; `_lock` (from `lock`, taken before
/// `Parent::open`) is borrowed for the whole run, from generation choice to publication.
pub fn run(
    parent: &Parent,
    cut: &Cut,
    policy: &Policy,
    target: &Target,
    _lock: &SplitLock,
    progress: &mut dyn FnMut(RunProgress),
) -> Result<SplitReport, SplitError> {
    let io_before = crate::io::proc::io_counters().ok();
    // When the split ends, the parent pages it read are dropped, not the ones a live node
    // had cached (io::residency, as the `trySkipCache` callers and `nocache` do).
    let mut read = parent.table().index_paths();
    read.push(parent.data_path().to_path_buf());
    let _evict = crate::io::residency::EvictAddedOnDrop::new(&read);
    let syncs_before = crate::io::durable::counts();
    let durability = if target.dry_run {
        publish::Durability::PerFile
    } else {
        staged::preflight(parent, &target.out_dir, target.publish)?
    };
    let plan = parent.plan_with_progress(cut, policy, &mut |bytes, total| {
        progress(RunProgress::Index {
            pass: 1,
            bytes,
            total,
        })
    })?;
    if target.dry_run {
        // A sampled plan has not read every key: the dry run reports the exact count and
        // no key hashes (docs/split.md "Dry run").
        let fp = plan
            .fingerprint
            .unwrap_or(crate::sstable::fingerprint::Fingerprint {
                count: plan.partitions,
                ..Default::default()
            });
        let mut r = staged::report(
            parent,
            &plan.children,
            fp,
            parent.reflink_guess(),
            target.publish,
            true,
        );
        r.plan_source = Some(plan.source);
        r.plan_seconds = plan.index_pass.as_secs_f64();
        return Ok(r);
    }
    let staged = plan.write_with_progress(&target.out_dir, &durability, &mut |p| {
        progress(match p {
            Progress::Index { bytes, total } => RunProgress::Index {
                pass: 2,
                bytes,
                total,
            },
            Progress::ChildDone { index, total } => RunProgress::ChildDone { index, total },
        })
    })?;
    let checked = staged.check()?;
    let mut report = checked.publish(target.publish)?;
    if let (Some(a), Ok(b)) = (io_before, crate::io::proc::io_counters()) {
        let d = b.since(&a);
        report.read_bytes = d.read_bytes;
        report.write_bytes = d.write_bytes;
    }
    report.durability = Some(report::DurabilityReport {
        mode: if durability.is_syncfs() {
            "syncfs"
        } else {
            "per_file"
        },
        calls: crate::io::durable::counts().since(syncs_before),
    });
    Ok(report)
}

/// `run` on the sstable at `path`: locks, then opens it once.
pub fn run_path(
    path: &Path,
    cut: &Cut,
    policy: &Policy,
    target: &Target,
    progress: &mut dyn FnMut(RunProgress),
) -> Result<SplitReport, SplitError> {
    let lock = lock(path, target)?;
    let parent = Parent::open(path)?;
    run(&parent, cut, policy, target, &lock, progress)
}
