//! Executing an AnticompactionJob on this node: find the sstables, split each with the
//! job's ranges, record every result in status as it completes (so a restart resumes
//! after the last recorded one), and stop between sstables when asked to.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::crd::{self, AnticompactionJobSpec, JobStatus, SSTableResult};
use super::decide;
use crate::split::execute::{self, DigestPolicy, SplitError, SplitOptions};
use crate::split::plan::Layout;
use crate::split::publish::{self, Publish};
use crate::split::spec::Cut;
use crate::sstable::{Component, Descriptor, Format, SSTable};

/// Where a job's staged children go: a subdirectory of the table directory (same
/// filesystem; not dot-prefixed, which Cassandra would take for a secondary index).
pub const STAGED_DIR: &str = "cleave-staged";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: String,
    pub message: String,
}

impl Failure {
    fn new(reason: &str, message: impl Into<String>) -> Failure {
        Failure {
            reason: reason.into(),
            message: message.into(),
        }
    }
}

impl From<SplitError> for Failure {
    fn from(e: SplitError) -> Failure {
        let reason = match &e {
            SplitError::Format(_) => "CorruptSSTable",
            SplitError::Invalid(_) => "InvalidSplit",
            SplitError::Refused(_) => "Refused",
            SplitError::Check(_) => "CheckFailed",
            SplitError::Publish(p) => p.reason().as_str(),
        };
        Failure::new(reason, e.to_string())
    }
}

/// The table directories of the job (`<data>/<keyspace>/<table>-<id>`).
pub fn table_dirs(data_dir: &Path, spec: &AnticompactionJobSpec) -> Result<Vec<PathBuf>, Failure> {
    let ks = data_dir.join(&spec.keyspace);
    let rd = std::fs::read_dir(&ks)
        .map_err(|e| Failure::new("KeyspaceNotFound", format!("{}: {e}", ks.display())))?;
    let mut dirs = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().to_string();
        if !e.path().is_dir() {
            continue;
        }
        let table = name.rsplit_once('-').map_or(name.as_str(), |(t, _)| t);
        if spec.tables.is_empty() || spec.tables.iter().any(|t| t == table) {
            dirs.push(e.path());
        }
    }
    dirs.sort();
    for t in &spec.tables {
        if !dirs.iter().any(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.rsplit_once('-').map_or(n, |(a, _)| a) == t)
        }) {
            return Err(Failure::new(
                "TableNotFound",
                format!("table {t} has no directory under {}", ks.display()),
            ));
        }
    }
    Ok(dirs)
}

/// The parents: the named sstables, or every unrepaired BIG sstable of the tables.
pub fn find_sstables(
    dirs: &[PathBuf],
    spec: &AnticompactionJobSpec,
) -> Result<Vec<PathBuf>, Failure> {
    let mut out = Vec::new();
    for d in dirs {
        let rd = std::fs::read_dir(d).map_err(|e| {
            Failure::new("DataDirectoryUnreadable", format!("{}: {e}", d.display()))
        })?;
        for e in rd.filter_map(|e| e.ok()) {
            let p = e.path();
            let Ok((desc, Component::Data)) = Descriptor::from_path(&p) else {
                continue;
            };
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            if !spec.sstables.is_empty() {
                if spec.sstables.contains(&name) {
                    out.push(p);
                }
                continue;
            }
            if desc.format != Format::Big || !desc.version.is_supported_big() {
                continue;
            }
            let t = SSTable::open(&p).map_err(|e| Failure::new("CorruptSSTable", e.to_string()))?;
            let unrepaired = t
                .statistics
                .stats
                .as_ref()
                .is_some_and(|s| s.repaired_at == 0 && s.pending_repair.flatten().is_none());
            if unrepaired {
                out.push(p);
            }
        }
    }
    for want in &spec.sstables {
        if !out
            .iter()
            .any(|p| p.file_name().and_then(|n| n.to_str()) == Some(want.as_str()))
        {
            return Err(Failure::new(
                "SSTableNotFound",
                format!("spec.sstables names {want}, which is in none of the tables"),
            ));
        }
    }
    out.sort();
    Ok(out)
}

/// Leftovers of an interrupted run: interrupted replaces are finished or rolled back, and
/// staging directories of unfinished splits removed.
pub fn recover_leftovers(dirs: &[PathBuf], job: &str) -> Result<(), Failure> {
    for d in dirs {
        publish::recover(d).map_err(|e| Failure::new("RecoveryFailed", e.to_string()))?;
        let staged = d.join(STAGED_DIR).join(job);
        if staged.is_dir() {
            // A stage killed mid-publication left a log there: none or all children stay.
            publish::recover(&staged).map_err(|e| Failure::new("RecoveryFailed", e.to_string()))?;
        }
    }
    Ok(())
}

/// What `run` reports after each sstable (the caller writes status and metrics).
pub enum Step<'a> {
    Planned {
        total: u64,
        bytes: u64,
    },
    Done {
        result: &'a SSTableResult,
        report: &'a execute::SplitReport,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Complete,
    Planned,
    Cancelled,
}

/// Runs the job to the end, or until `cancel` is set between two sstables. `status`
/// carries the results of an earlier, interrupted run: those parents are skipped.
pub fn run(
    spec: &AnticompactionJobSpec,
    job_name: &str,
    data_dir: &Path,
    status: &mut JobStatus,
    cancel: &Arc<AtomicBool>,
    on_step: &mut dyn FnMut(Step<'_>, &JobStatus),
) -> Result<Outcome, Failure> {
    let dirs = table_dirs(data_dir, spec)?;
    recover_leftovers(&dirs, job_name)?;
    let parents = find_sstables(&dirs, spec)?;
    let done: Vec<String> = status.results.iter().map(|r| r.parent.clone()).collect();
    let todo: Vec<PathBuf> = parents
        .iter()
        .filter(|p| !done.contains(&p.to_string_lossy().to_string()))
        .cloned()
        .collect();
    let bytes: u64 = parents
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    status.progress.sstables_total = (done.len() + todo.len()) as u64;
    status.progress.sstables_done = done.len() as u64;
    status.progress.bytes_planned = bytes;
    status.progress.summary = format!(
        "{}/{}",
        status.progress.sstables_done, status.progress.sstables_total
    );
    on_step(
        Step::Planned {
            total: status.progress.sstables_total,
            bytes,
        },
        status,
    );
    let layout = match spec.layout {
        crd::Layout::Auto => None,
        crd::Layout::Aligned => Some(Layout::Aligned),
        crd::Layout::Padded => Some(Layout::Padded),
        crd::Layout::Copy => Some(Layout::Copy),
        crd::Layout::Regrid => Some(Layout::Regrid),
    };
    for parent in todo {
        if cancel.load(Ordering::Relaxed) {
            return Ok(Outcome::Cancelled);
        }
        let t =
            SSTable::open(&parent).map_err(|e| Failure::new("CorruptSSTable", e.to_string()))?;
        let ranges =
            decide::validate_ranges(spec, t.partitioner).map_err(|(r, m)| Failure::new(&r, m))?;
        let table_dir = parent.parent().map(Path::to_path_buf).unwrap_or_default();
        let out_dir = match spec.publish {
            _ if spec.dry_run => table_dir.clone(),
            crd::Publish::Replace => table_dir.clone(),
            crd::Publish::Stage => table_dir.join(STAGED_DIR).join(job_name),
        };
        std::fs::create_dir_all(&out_dir)
            .map_err(|e| Failure::new("Refused", format!("{}: {e}", out_dir.display())))?;
        let opts = SplitOptions {
            cut: Cut::Ranges(ranges),
            layout,
            allow_padded: spec.layout == crd::Layout::Padded,
            digest: match spec.digest {
                crd::Digest::Off => DigestPolicy::Off,
                crd::Digest::Combine => DigestPolicy::Combine,
                crd::Digest::Full => DigestPolicy::Full,
            },
            merge_below_chunks: 8,
            out_dir,
            publish: match spec.publish {
                crd::Publish::Stage => Publish::Stage,
                crd::Publish::Replace => Publish::Replace,
            },
            dry_run: spec.dry_run,
            operation: "anticompaction".into(),
        };
        let report = execute::split(&parent, &opts, &mut |_| {})?;
        let result = SSTableResult {
            parent: parent.to_string_lossy().to_string(),
            children: report
                .children
                .iter()
                .map(|c| c.path.to_string_lossy().to_string())
                .collect(),
            layout: report
                .children
                .first()
                .map(|c| format!("{:?}", c.layout).to_lowercase()),
            fallback_reason: report
                .children
                .iter()
                .find_map(|c| c.fallback_reason.clone()),
            bytes_shared: report.bytes_shared,
            bytes_copied: report.bytes_copied,
            bytes_reencoded: report.bytes_reencoded,
            partitions: report.check.parent.count,
        };
        status.progress.sstables_done += 1;
        status.progress.bytes_shared += result.bytes_shared;
        status.progress.bytes_copied += result.bytes_copied;
        status.progress.bytes_reencoded += result.bytes_reencoded;
        status.progress.partitions += result.partitions;
        status.progress.summary = format!(
            "{}/{}",
            status.progress.sstables_done, status.progress.sstables_total
        );
        status.results.push(result.clone());
        on_step(
            Step::Done {
                result: &result,
                report: &report,
            },
            status,
        );
    }
    Ok(if spec.dry_run {
        Outcome::Planned
    } else {
        Outcome::Complete
    })
}
