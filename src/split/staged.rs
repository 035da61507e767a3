//! Children written into staging, as a type that says whether they were checked: only a
//! `Staged<Checked>` has `publish`, so no caller can publish children that were not
//! compared with their parent. Dropping a `Staged` of either kind removes staging.

use std::fs;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::PublishError;
use super::parent::Parent;
use super::plan::{ChildPlan, Plan};
use super::publish::{self, CassandraStopped, Durability, Publish};
use super::report::{Check, ChildReport, SplitReport};
use super::spec::Cut;
use crate::io::reflink::ReflinkSupport;
use crate::sstable::fingerprint::Fingerprint;
use crate::sstable::Descriptor;

/// Written, durable in staging, not yet compared with the parent.
#[derive(Debug)]
pub struct Unchecked;
/// Every child re-read and its keys add up to the parent's.
#[derive(Debug)]
pub struct Checked;

/// Removes the staging directory unless the split got as far as publishing.
pub struct StagingGuard(Option<PathBuf>);

impl StagingGuard {
    pub fn new(dir: PathBuf) -> StagingGuard {
        StagingGuard(Some(dir))
    }
    pub(super) fn disarm(&mut self) {
        self.0 = None;
    }
}

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

pub struct Staged<S> {
    pub(super) parent: Parent,
    pub(super) plan: Vec<ChildPlan>,
    pub(super) parent_fp: Fingerprint,
    pub(super) operation: &'static str,
    pub(super) staging: PathBuf,
    pub(super) out_dir: PathBuf,
    pub(super) descs: Vec<Descriptor>,
    pub(super) reports: Vec<ChildReport>,
    pub(super) children_fp: Fingerprint,
    pub(super) support: ReflinkSupport,
    pub(super) guard: StagingGuard,
    pub(super) plan_time: Duration,
    pub(super) plan_source: super::plan::PlanSource,
    pub(super) write_time: Duration,
    pub(super) state: PhantomData<S>,
}

impl<S> Staged<S> {
    pub fn staging_dir(&self) -> &Path {
        &self.staging
    }
    pub fn children(&self) -> &[ChildReport] {
        &self.reports
    }
    /// The children's Data.db in staging.
    pub fn descriptors(&self) -> &[Descriptor] {
        &self.descs
    }
    pub(super) fn into_state<T>(self) -> Staged<T> {
        Staged {
            parent: self.parent,
            plan: self.plan,
            parent_fp: self.parent_fp,
            operation: self.operation,
            staging: self.staging,
            out_dir: self.out_dir,
            descs: self.descs,
            reports: self.reports,
            children_fp: self.children_fp,
            support: self.support,
            guard: self.guard,
            plan_time: self.plan_time,
            plan_source: self.plan_source,
            write_time: self.write_time,
            state: PhantomData,
        }
    }
}

/// What the writer hands over once every child is in staging (`Staged::unchecked`).
pub(super) struct Written {
    pub staging: PathBuf,
    pub out_dir: PathBuf,
    pub descs: Vec<Descriptor>,
    pub reports: Vec<ChildReport>,
    /// What the children must add up to: the parent's keys, or under cleanup the parent's
    /// keys in the owned ranges.
    pub parent_fp: Fingerprint,
    pub children_fp: Fingerprint,
    pub support: ReflinkSupport,
    pub guard: StagingGuard,
    pub write_time: Duration,
}

impl Staged<Unchecked> {
    pub(super) fn unchecked(plan: &Plan, w: Written) -> Staged<Unchecked> {
        let Written {
            staging,
            out_dir,
            descs,
            reports,
            parent_fp,
            children_fp,
            support,
            guard,
            write_time,
        } = w;
        Staged {
            parent: plan.parent.clone(),
            plan: plan.children.clone(),
            parent_fp,
            operation: match plan.cut {
                Cut::Ranges(_) => "anticompaction",
                Cut::Owned(_) => "cleanup",
                _ => "split",
            },
            staging,
            out_dir,
            descs,
            reports,
            children_fp,
            support,
            guard,
            plan_time: plan.index_pass,
            plan_source: plan.source,
            write_time,
            state: PhantomData,
        }
    }
}

/// What `Replace` needs before anything is written: `--out` is the parent's table directory
/// and no process holds files under it, nor could one we cannot see (`split::guard`: a live
/// Cassandra would not see the children and could reuse their generation ids). `publish`
/// asks again. The answer is how the split makes its files durable: with the guard's proof
/// one `syncfs` before publication, otherwise an fsync a file.
pub fn preflight(
    parent: &Parent,
    out_dir: &Path,
    mode: Publish,
) -> Result<Durability, PublishError> {
    if mode != Publish::Replace {
        return Ok(Durability::PerFile);
    }
    Ok(Durability::SyncFs(replace_guard(parent, out_dir)?))
}

/// The `Replace` half of `preflight`: its proof that Cassandra is stopped.
pub fn replace_guard(parent: &Parent, out_dir: &Path) -> Result<CassandraStopped, PublishError> {
    let a = fs::canonicalize(out_dir).map_err(|e| crate::sstable::FormatError::io(out_dir, e))?;
    let b = fs::canonicalize(parent.dir())
        .map_err(|e| crate::sstable::FormatError::io(parent.dir(), e))?;
    if a != b {
        return Err(PublishError::NotTableDir {
            table_dir: b,
            out: a,
        });
    }
    super::guard::cassandra_stopped(&[&b])
}

impl Staged<Checked> {
    /// `Stage`: children renamed into `--out` (TOC last); `Replace`: swapped in for the
    /// parent through a transaction log (`split::publish`).
    pub fn publish(mut self, mode: Publish) -> Result<SplitReport, PublishError> {
        let published = match mode {
            Publish::Stage => publish::stage(&self.staging, &self.out_dir, &self.descs)?,
            Publish::Replace => publish::replace(
                &self.staging,
                &self.out_dir,
                &self.parent.table().descriptor,
                &self.descs,
                self.operation,
                &replace_guard(&self.parent, &self.out_dir)?,
            )?,
            Publish::OnRestart => {
                return Err(PublishError::Pending {
                    path: self.staging.clone(),
                    what: "on-restart publishes through Staged::pend, which needs the job uid"
                        .into(),
                })
            }
        };
        self.guard.disarm();
        let finals = published.data_paths;
        let mut report = report(
            &self.parent,
            &self.plan,
            self.parent_fp,
            self.support,
            mode,
            false,
        );
        report.check = Some(Check {
            parent: self.parent_fp,
            children: self.children_fp,
            ok: true,
            by: super::report::FingerprintBy::of(self.plan_source),
        });
        report.left_behind = published.left_behind;
        report.children = std::mem::take(&mut self.reports)
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
        report.plan_seconds = self.plan_time.as_secs_f64();
        report.plan_source = Some(self.plan_source);
        report.write_seconds = self.write_time.as_secs_f64();
        Ok(report)
    }
}

/// The report of a plan (`--dry-run`) or, filled in by `publish`, of a split.
pub fn report(
    parent: &Parent,
    plan: &[ChildPlan],
    parent_fp: Fingerprint,
    support: ReflinkSupport,
    mode: Publish,
    dry_run: bool,
) -> SplitReport {
    SplitReport {
        parent: parent.data_path().to_path_buf(),
        dry_run,
        publish: mode,
        reflink: match support {
            ReflinkSupport::Supported { block_size } => format!("supported (block {block_size})"),
            ReflinkSupport::Refused(r) => r.to_string(),
        },
        children: Vec::new(),
        plan: plan.to_vec(),
        // Set by `publish`/`pend` once the children are checked; a dry run has none.
        check: None,
        parent_partitions: parent_fp.count,
        bytes_shared: if dry_run {
            predicted(plan, |p| p.bytes_shared)
        } else {
            0
        },
        bytes_copied: if dry_run {
            predicted(plan, |p| p.bytes_copied)
        } else {
            0
        },
        bytes_reencoded: if dry_run {
            predicted(plan, |p| p.bytes_reencoded)
        } else {
            0
        },
        read_bytes: 0,
        write_bytes: 0,
        plan_seconds: 0.0,
        write_seconds: 0.0,
        plan_source: None,
        left_behind: Vec::new(),
        durability: None,
    }
}

/// A plan's predicted bytes of one kind, over its children.
fn predicted(plan: &[ChildPlan], kind: fn(&super::plan::Prediction) -> u64) -> u64 {
    plan.iter().map(|c| kind(&c.predicted)).sum()
}
