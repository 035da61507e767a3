//! Splitting one SSTable into children by token range, as one typed pipeline:
//!
//! `Parent::open(path)` → `parent.plan(&Cut, &Policy)` (pure; `--dry-run` stops here) →
//! `plan.write(out)` → `Staged<Unchecked>` → `.check()` → `Staged<Checked>` →
//! `.publish(mode)`.
//!
//! Each step has its own error (`error`), each error a stable `Reason`; `run` is the
//! pipeline end to end, called by the CLI and the operator alike.

pub mod check;
pub mod child;
pub mod data;
pub mod error;
pub mod fallback;
pub mod parent;
pub mod plan;
pub mod publish;
pub mod ranges;
pub mod report;
pub mod spec;
pub mod staged;
pub mod write;

use std::path::{Path, PathBuf};

pub use error::SplitError;
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

/// The pipeline end to end on an opened parent.
pub fn run(
    parent: &Parent,
    cut: &Cut,
    policy: &Policy,
    target: &Target,
    progress: &mut dyn FnMut(RunProgress),
) -> Result<SplitReport, SplitError> {
    let io_before = crate::io::proc::io_counters().ok();
    if !target.dry_run {
        staged::preflight(parent, &target.out_dir, target.publish)?;
    }
    let plan = parent.plan_with_progress(cut, policy, &mut |bytes, total| {
        progress(RunProgress::Index {
            pass: 1,
            bytes,
            total,
        })
    })?;
    if target.dry_run {
        let mut r = staged::report(
            parent,
            &plan.children,
            plan.fingerprint,
            parent.reflink_guess(),
            target.publish,
            true,
        );
        r.plan_seconds = plan.index_pass.as_secs_f64();
        return Ok(r);
    }
    let staged = plan.write_with_progress(&target.out_dir, &mut |p| {
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
    Ok(report)
}

/// `run` on the sstable at `path`: opens it once.
pub fn run_path(
    path: &Path,
    cut: &Cut,
    policy: &Policy,
    target: &Target,
    progress: &mut dyn FnMut(RunProgress),
) -> Result<SplitReport, SplitError> {
    let parent = Parent::open(path)?;
    run(&parent, cut, policy, target, progress)
}
