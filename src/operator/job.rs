//! Executing an AnticompactionJob on this node: find the sstables, split each with the
//! job's ranges, record every result in status as it completes (so a restart resumes
//! after the last recorded one), and stop between sstables when asked to.

use crate::sstable::cassandra::TargetCassandra;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::core::Ended;
use super::crd::{AnticompactionJobSpec, JobStatus, PlannedChild, SSTableResult};
use super::decide;
use crate::io::throttle::TokenBucket;
use crate::reason::Reason;
use crate::split::plan::LayoutRequest;
use crate::split::publish::{self, Publish};
use crate::split::spec::Cut;
use crate::split::{self, Parent, Policy, PublishError, SplitError, SplitReport, Target};
use crate::sstable::statistics::Statistics;
use crate::sstable::{Component, Descriptor};
use crate::sstable::{Partitioner, Token};

pub use crate::split::import_dir::STAGED_DIR;

/// Where a job's staged children go: `<table dir>/cleave-staged/<job>/<keyspace>/<table>`
/// (`split::import_dir`: the last two names are what Cassandra 5.0's import parses).
pub fn staged_dir(table_dir: &Path, job: &str) -> Result<PathBuf, Failure> {
    crate::split::import_dir::staged_dir(table_dir, &[job]).ok_or_else(|| {
        Failure::new(
            Reason::InvalidRequest,
            format!(
                "{} is not a table directory <keyspace>/<table>[-<id>]: no staging directory for nodetool import",
                table_dir.display()
            ),
        )
    })
}

/// Node-wide limits of the sidecar (`cleave run` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLimits {
    /// `--max-concurrent-jobs`: jobs running at once on this node.
    pub max_concurrent_jobs: usize,
    /// `--min-free-percent`: the space pre-flight keeps this much of the filesystem free.
    pub min_free_percent: u8,
    /// `--cassandra-version`: the Cassandra of this node, for jobs without
    /// `spec.targetCassandra` (unknown: the strictest, no dead prefix).
    pub cassandra: TargetCassandra,
}

impl Default for NodeLimits {
    fn default() -> NodeLimits {
        NodeLimits {
            max_concurrent_jobs: 1,
            min_free_percent: crate::split::space::DEFAULT_MIN_FREE_PERCENT,
            cassandra: TargetCassandra::Unknown,
        }
    }
}

pub use crate::reason::Failure;

/// The split's own reason, verbatim (`crate::reason::Reason`): a full disk is
/// `InsufficientSpace`, a bad chunk `CorruptSSTable`, a live Cassandra `CassandraRunning`.
impl From<SplitError> for Failure {
    fn from(e: SplitError) -> Failure {
        Failure::new(e.reason(), e.to_string())
    }
}

/// The table directories of the job (`<data>/<keyspace>/<table>-<id>`).
pub fn table_dirs(data_dir: &Path, spec: &AnticompactionJobSpec) -> Result<Vec<PathBuf>, Failure> {
    table_dirs_of(data_dir, &spec.keyspace, &spec.tables)
}

/// The directories of `tables` of `keyspace` (empty: every table), for jobs and streams.
pub fn table_dirs_of(
    data_dir: &Path,
    keyspace: &str,
    tables: &[String],
) -> Result<Vec<PathBuf>, Failure> {
    let ks = data_dir.join(keyspace);
    let rd = std::fs::read_dir(&ks)
        .map_err(|e| Failure::new(Reason::KeyspaceNotFound, format!("{}: {e}", ks.display())))?;
    let mut dirs = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().to_string();
        if !e.path().is_dir() {
            continue;
        }
        let table = name.rsplit_once('-').map_or(name.as_str(), |(t, _)| t);
        if tables.is_empty() || tables.iter().any(|t| t == table) {
            dirs.push(e.path());
        }
    }
    dirs.sort();
    for t in tables {
        if !dirs.iter().any(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.rsplit_once('-').map_or(n, |(a, _)| a) == t)
        }) {
            return Err(Failure::new(
                Reason::TableNotFound,
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
        let rd = std::fs::read_dir(d).map_err(|e| Failure::io(d.display(), &e))?;
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
            if desc.require_supported().is_err() {
                continue;
            }
            // Only Statistics.db is read here: the parent itself is opened once, by the split.
            let stats_path = desc.path(&Component::Statistics);
            let statistics = std::fs::read(&stats_path)
                .map_err(|e| crate::sstable::FormatError::io(&stats_path, e))
                .and_then(|b| Statistics::parse(&stats_path, &b, desc.version))
                .map_err(|e| Failure::new(split::error::format_reason(&e), e.to_string()))?;
            let unrepaired = statistics
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
                Reason::SSTableNotFound,
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
        publish::recover(d).map_err(|e| Failure::new(e.reason(), e.to_string()))?;
        let staged = staged_dir(d, job)?;
        if staged.is_dir() {
            // A stage killed mid-publication left a log there: none or all children stay.
            publish::recover(&staged).map_err(|e| Failure::new(e.reason(), e.to_string()))?;
        }
    }
    Ok(())
}

/// `OnRestart`: withdraws the job's intents not yet applied (`split::intent::withdraw`),
/// for a job deleted before the restart that would have published them.
pub fn withdraw_intents(dirs: &[PathBuf], job_uid: &str) -> Result<(), Failure> {
    for d in dirs {
        if split::intent::withdraw(d, job_uid)
            .map_err(|e| Failure::new(e.reason(), e.to_string()))?
        {
            tracing::info!(table = %d.display(), "withdrew this job's intent: its staged children are removed and will not be published");
        }
    }
    Ok(())
}

/// How an `OnRestart` run ends. A run that failed publishes nothing at the next restart:
/// the intents it recorded before the failure (other parents, other tables) are withdrawn,
/// so that a `Failed` job never turns into half a result when the node restarts, and its
/// message says so (or why they could not be). A complete run that `recorded` something
/// awaits the restart (`Staged`, with how to restart `node`); one that recorded nothing has
/// nothing to wait for and stays `Complete`.
pub async fn end_on_restart(
    dirs: Vec<PathBuf>,
    job_uid: String,
    node: &str,
    ended: Ended,
    recorded: bool,
) -> Ended {
    let mut f = match ended {
        Ended::Failed(f) => f,
        Ended::Complete if recorded => {
            return Ended::Staged(super::core::restart::how_to_restart(node))
        }
        other => return other,
    };
    let r = tokio::task::spawn_blocking(move || withdraw_intents(&dirs, &job_uid)).await;
    match r {
        Ok(Ok(())) => f
            .message
            .push_str("; nothing of this job will be published at the restart"),
        Ok(Err(e)) => f.message.push_str(&format!(
            "; what it recorded for the restart could not be withdrawn ({e}): delete the job to withdraw it"
        )),
        Err(e) => f.message.push_str(&format!(
            "; what it recorded for the restart could not be withdrawn (its task failed: {e}): delete the job to withdraw it"
        )),
    }
    Ended::Failed(f)
}

/// `Stage`: removes the children in the job's staging directories that no result in
/// `status` names. A run publishes a parent's children, then records the result; killed in
/// between (or its status write lost), the next run sees the parent as not done and splits
/// it again (Stage never touches parents), so without this its rows would be staged twice.
/// Each sstable goes TOC.txt first (never a complete-looking partial one), then the
/// directory is fsynced. A staged child matches a recorded one by its path below the data
/// directory (`<table dir>/cleave-staged/<job>/<ks>/<table>/<file>`), so a data directory spelt
/// differently in two runs does not count as unrecorded. Returns what it removed.
pub fn remove_unrecorded_children(
    dirs: &[PathBuf],
    job: &str,
    status: &JobStatus,
) -> Result<Vec<PathBuf>, Failure> {
    let recorded: Vec<&str> = status
        .results
        .iter()
        .flat_map(|r| r.children.iter().map(String::as_str))
        .collect();
    let mut removed = Vec::new();
    for d in dirs {
        let staged = staged_dir(d, job)?;
        let Ok(rd) = std::fs::read_dir(&staged) else {
            continue;
        };
        // The path below the data directory: from the keyspace's directory down.
        let below = d
            .parent()
            .and_then(Path::parent)
            .and_then(|data| staged.strip_prefix(data).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let fail = |e: std::io::Error, p: &Path| {
            Failure::new(
                Reason::of_io(&e),
                format!("removing an unrecorded staged child {}: {e}", p.display()),
            )
        };
        for e in rd.filter_map(|e| e.ok()) {
            let p = e.path();
            let Ok((desc, Component::Data)) = Descriptor::from_path(&p) else {
                continue;
            };
            let name = e.file_name().to_string_lossy().to_string();
            let tail = format!("/{below}/{name}");
            if recorded.iter().any(|r| r.ends_with(&tail)) {
                continue;
            }
            let mut files = publish::sstable_files(&staged, &desc)
                .map_err(|e| Failure::new(split::error::format_reason(&e), e.to_string()))?;
            // sstable_files puts TOC.txt last; it goes first here.
            files.rotate_right(1);
            for f in &files {
                std::fs::remove_file(f).map_err(|e| fail(e, f))?;
            }
            tracing::warn!(child = %p.display(), "removed a staged child no result records (published by a run that ended before recording it); its parent is split again");
            removed.push(p);
        }
        if !removed.is_empty() {
            crate::io::fs::sync_dir(&staged).map_err(|e| fail(e, &staged))?;
        }
    }
    Ok(removed)
}

/// What `run` reports after each sstable (the caller writes status and metrics).
pub enum Step<'a> {
    Planned {
        total: u64,
        bytes: u64,
    },
    Done {
        result: &'a SSTableResult,
        report: &'a SplitReport,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Complete,
    Planned,
    Cancelled,
}

// The space pre-flight lives in `split::space`, shared with the CLI; `window` predicts a
// Replace's duration from the same bytes.
pub use crate::split::space::predicted_bytes;

/// `publish: Replace` needs Cassandra stopped: refused unless this sidecar can see every
/// process of the node (or the pod) and none holds the table's files.
pub fn check_replace(dirs: &[PathBuf]) -> Result<(), Failure> {
    let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    crate::split::guard::ensure_no_cassandra(&dirs).map_err(|e| {
        let hint = match e {
            PublishError::CassandraRunning { .. } => "stop Cassandra first (docs/operator.md) or use publish: Stage",
            _ => "or use publish: Stage and import the children with `nodetool import --keep-repaired` into a running Cassandra (docs/operator.md)",
        };
        Failure::new(e.reason(), format!("publish: Replace refused: {e}; {hint}"))
    })
}

/// The Cassandra that reads a resource's children: its `spec.targetCassandra`, else the
/// node's (`--cassandra-version`). A target that keeps a dead prefix (3.0–5.0.4) is refused
/// on a node known to run 5.0.5+, whose compaction would misread those children
/// (`SSTableSimpleScanner`, CASSANDRA-20092); on a node of unknown release it is the
/// operator's explicit choice, and `cleave_survey_dead_prefix_sstables` counts what it left.
pub fn target_cassandra(
    spec: Option<&str>,
    node: TargetCassandra,
) -> Result<TargetCassandra, Failure> {
    let Some(s) = spec else {
        return Ok(node);
    };
    let target = TargetCassandra::parse(s)
        .map_err(|m| Failure::new(Reason::InvalidSpec, format!("spec.targetCassandra: {m}")))?;
    if !target.scans_data_from_zero()
        && node != TargetCassandra::Unknown
        && node.scans_data_from_zero()
    {
        return Err(Failure::new(
            Reason::InvalidSpec,
            format!(
                "spec.targetCassandra {target} keeps a dead prefix in the children, which this node's Cassandra {node} (--cassandra-version) misreads in every compaction (5.0.5 and later scan Data.db from position 0); leave spec.targetCassandra unset"
            ),
        ));
    }
    Ok(target)
}

/// Where a job cuts its parents, settled before the run: the ring comes from the
/// management API (asynchronously), the ranges from the spec.
#[derive(Debug, Clone, PartialEq)]
pub enum JobCut {
    /// `spec.ranges`, labelled by the session (`mode: Anticompaction`), validated against
    /// each parent's partitioner.
    Anticompaction,
    /// Every token of the ring (`mode: PreSplit`, `mgmt::ring::ring_tokens`): children keep
    /// the parent's repair state.
    RingTokens(Vec<Token>),
}

impl JobCut {
    /// The `split` cut of one parent.
    fn of(&self, spec: &AnticompactionJobSpec, partitioner: Partitioner) -> Result<Cut, Failure> {
        Ok(match self {
            JobCut::Anticompaction => Cut::Ranges(decide::validate_ranges(spec, partitioner)?),
            // The ring's tokens are Murmur3 (`decide::pre_split_checks` holds the spec to
            // it); an sstable of another partitioner is refused, not cut at foreign tokens.
            JobCut::RingTokens(_) if partitioner != Partitioner::Murmur3 => {
                return Err(Failure::new(
                    Reason::InvalidSpec,
                    format!("mode: PreSplit cuts at the ring's Murmur3 tokens; this sstable's partitioner is {partitioner:?}"),
                ))
            }
            JobCut::RingTokens(tokens) => Cut::Tokens(tokens.clone()),
        })
    }
}

/// Splits one parent: the one call into the split engine. `OnRestart` stages the children
/// in the table's pending directory under `job_uid` and records them in its intent
/// (`split::intent`); the parent stays live.
fn split_one(
    spec: &AnticompactionJobSpec,
    job_cut: &JobCut,
    job_name: &str,
    job_uid: &str,
    parent: &Path,
    throttle: Option<&Arc<TokenBucket>>,
    node_cassandra: TargetCassandra,
) -> Result<(SSTableResult, SplitReport), Failure> {
    let table_dir = parent.parent().map(Path::to_path_buf).unwrap_or_default();
    let out_dir = match spec.publish {
        _ if spec.dry_run => table_dir.clone(),
        Publish::Replace | Publish::OnRestart => table_dir.clone(),
        Publish::Stage => staged_dir(&table_dir, job_name)?,
    };
    // --out must exist to be locked; a job refused before writing removes what it created.
    let created = !out_dir.exists();
    std::fs::create_dir_all(&out_dir).map_err(|e| Failure::io(out_dir.display(), &e))?;
    let made = created.then(|| out_dir.clone());
    let undo = |f: Failure| {
        if let Some(d) = &made {
            let _ = std::fs::remove_dir(d);
        }
        f
    };
    let policy = Policy {
        layout: spec.layout.layout(),
        allow_padded: spec.layout == LayoutRequest::Padded,
        digest: spec.digest,
        merge_below_chunks: 8,
        throttle: throttle.cloned(),
        target: target_cassandra(spec.target_cassandra.as_deref(), node_cassandra)?,
        bti_keys: Default::default(),
    };
    let target = Target {
        out_dir,
        publish: spec.publish,
        dry_run: spec.dry_run,
    };
    // Locked before the parent is opened, held until its children are published.
    let lock = split::lock(parent, &target).map_err(|e| undo(SplitError::from(e).into()))?;
    let opened = Parent::open(parent).map_err(|e| undo(SplitError::from(e).into()))?;
    decide::check_partitioner(spec.partitioner, opened.table().partitioner)
        .map_err(|m| undo(Failure::new(Reason::InvalidSpec, m)))?;
    let cut = job_cut.of(spec, opened.table().partitioner).map_err(undo)?;
    let report = if spec.publish == Publish::OnRestart && !spec.dry_run {
        split::intent::split_pending(&opened, &cut, &policy, job_uid, &lock)?.split
    } else {
        split::run(&opened, &cut, &policy, &target, &lock, &mut |_| {})?
    };
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
            .find_map(|c| c.fallback.as_ref().map(|f| f.to_string())),
        bytes_shared: report.bytes_shared,
        bytes_copied: report.bytes_copied,
        bytes_reencoded: report.bytes_reencoded,
        partitions: report.parent_partitions,
        verdict: None,
        // A dry run reports its plan (install guide step 5), its bytes the predictions.
        planned: report.plan.iter().map(PlannedChild::of).collect(),
    };
    Ok((result, report))
}

/// The parents of `parents` that `status` has no result for.
fn not_done(parents: &[PathBuf], status: &JobStatus) -> Vec<PathBuf> {
    parents
        .iter()
        .filter(|p| {
            let p = p.to_string_lossy();
            !status.results.iter().any(|r| r.parent == p)
        })
        .cloned()
        .collect()
}

/// The parents a run would still split (none: a resumed job that only has to finish).
pub fn pending_parents(
    dirs: &[PathBuf],
    spec: &AnticompactionJobSpec,
    status: &JobStatus,
) -> Result<Vec<PathBuf>, Failure> {
    Ok(not_done(&find_sstables(dirs, spec)?, status))
}

/// A job's two names on the node: its name (the staging directory of `Stage`) and its uid
/// (the pending directory of `OnRestart`, `core::restart::job_uid`).
#[derive(Debug, Clone, Copy)]
pub struct JobId<'a> {
    pub name: &'a str,
    pub uid: &'a str,
}

/// What a run does: the spec, and where it cuts each parent.
#[derive(Debug, Clone, Copy)]
pub struct JobWork<'a> {
    pub spec: &'a AnticompactionJobSpec,
    pub cut: &'a JobCut,
}

/// How a run went, beyond its outcome (tests and logs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunStats {
    /// The most sstables split at the same moment (≤ `spec.parallelism`).
    pub max_in_flight: usize,
}

/// Runs the job to the end, or until `cancel` is set between two sstables. `status`
/// carries the results of an earlier, interrupted run: those parents are skipped. Before
/// the first split: the space pre-flight and, for `Replace`, the process-visibility check.
/// Up to `spec.parallelism` parents are split at once, sharing one `maxBytesPerSecond`
/// bucket. With the outcome, how the run went (`RunStats`).
pub fn run(
    work: JobWork<'_>,
    job: JobId<'_>,
    data_dir: &Path,
    status: &mut JobStatus,
    cancel: &Arc<AtomicBool>,
    limits: &NodeLimits,
    on_step: &mut dyn FnMut(Step<'_>, &JobStatus),
) -> Result<(Outcome, RunStats), Failure> {
    let JobWork { spec, cut } = work;
    let JobId {
        name: job_name,
        uid: job_uid,
    } = job;
    let dirs = table_dirs(data_dir, spec)?;
    recover_leftovers(&dirs, job_name)?;
    if spec.publish == Publish::Stage && !spec.dry_run {
        remove_unrecorded_children(&dirs, job_name, status)?;
    }
    let parents = find_sstables(&dirs, spec)?;
    let done: Vec<String> = status.results.iter().map(|r| r.parent.clone()).collect();
    let todo = not_done(&parents, status);
    let bytes: u64 = parents
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    if !spec.dry_run {
        if spec.publish == Publish::Replace {
            check_replace(&dirs)?;
        }
        for d in &dirs {
            let mine: Vec<&PathBuf> = todo.iter().filter(|p| p.parent() == Some(d)).collect();
            if mine.is_empty() {
                continue;
            }
            let reflink = crate::split::space::shares_extents(d);
            let predicted: u64 = mine.iter().map(|p| predicted_bytes(p, reflink)).sum();
            crate::split::space::preflight(d, predicted, limits.min_free_percent)
                .map_err(|e| Failure::new(e.reason(), e.to_string()))?;
        }
    }
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
    let throttle = spec
        .max_bytes_per_second
        .map(|r| Arc::new(TokenBucket::new(r)));
    let parallelism = spec.parallelism.unwrap_or(1).max(1) as usize;
    let queue = Mutex::new(todo.into_iter().collect::<std::collections::VecDeque<_>>());
    let stop = AtomicBool::new(false);
    let in_flight = AtomicUsize::new(0);
    let max_in_flight = AtomicUsize::new(0);
    let mut first_failure: Option<Failure> = None;
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..parallelism {
            let tx = tx.clone();
            let (queue, stop, in_flight, max_in_flight, throttle) =
                (&queue, &stop, &in_flight, &max_in_flight, throttle.as_ref());
            scope.spawn(move || loop {
                if cancel.load(Ordering::Relaxed) || stop.load(Ordering::Relaxed) {
                    return;
                }
                let next = queue.lock().map(|mut q| q.pop_front()).unwrap_or(None);
                let Some(parent) = next else { return };
                let n = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                max_in_flight.fetch_max(n, Ordering::SeqCst);
                let r = split_one(
                    spec,
                    cut,
                    job_name,
                    job_uid,
                    &parent,
                    throttle,
                    limits.cassandra,
                );
                in_flight.fetch_sub(1, Ordering::SeqCst);
                if tx.send(r).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        // Results are recorded on this thread, in the order the splits finish.
        for r in rx {
            match r {
                Ok((result, report)) => {
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
                Err(f) => {
                    stop.store(true, Ordering::Relaxed);
                    first_failure.get_or_insert(f);
                }
            }
        }
    });
    let stats = RunStats {
        max_in_flight: max_in_flight.load(Ordering::SeqCst),
    };
    if let Some(f) = first_failure {
        return Err(f);
    }
    let left = queue.lock().map(|q| q.len()).unwrap_or(0);
    if left > 0 {
        return Ok((Outcome::Cancelled, stats));
    }
    Ok((
        if spec.dry_run {
            Outcome::Planned
        } else {
            Outcome::Complete
        },
        stats,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_target_keeping_a_dead_prefix_is_refused_on_a_node_known_to_scan_from_zero() {
        let v = |s: &str| TargetCassandra::parse(s).unwrap();
        // Unset: the node's.
        assert_eq!(target_cassandra(None, v("5.0.9")).unwrap(), v("5.0.9"));
        // 4.1 children on a 5.0.9 node: refused, naming both.
        let e = target_cassandra(Some("4.1"), v("5.0.9")).unwrap_err();
        assert_eq!(e.reason, Reason::InvalidSpec);
        assert!(
            e.message.contains("4.1") && e.message.contains("5.0.9"),
            "{}",
            e.message
        );
        // On a node that reads them, or of unknown release (an explicit choice): kept.
        assert_eq!(target_cassandra(Some("4.1"), v("5.0.4")).unwrap(), v("4.1"));
        assert_eq!(
            target_cassandra(Some("4.1"), v("unknown")).unwrap(),
            v("4.1")
        );
        assert_eq!(
            target_cassandra(Some("5.0.9"), v("4.1")).unwrap(),
            v("5.0.9")
        );
        assert_eq!(
            target_cassandra(Some("four"), v("4.1")).unwrap_err().reason,
            Reason::InvalidSpec
        );
    }

    #[test]
    fn unrecorded_staged_children_are_removed_recorded_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        // The same data directory spelt two ways: the recorded path has a `./` in it.
        let table = tmp.path().join("ks").join("t-0123");
        let staged = table.join(STAGED_DIR).join("j/ks/t");
        assert_eq!(staged, staged_dir(&table, "j").unwrap());
        std::fs::create_dir_all(&staged).unwrap();
        for g in [3, 4, 5] {
            for c in ["Data.db", "Index.db", "TOC.txt"] {
                std::fs::write(staged.join(format!("nb-{g}-big-{c}")), b"x").unwrap();
            }
        }
        // Another job's staging and the table itself are not touched.
        std::fs::create_dir_all(table.join(STAGED_DIR).join("other")).unwrap();
        std::fs::write(table.join(STAGED_DIR).join("other/nb-9-big-Data.db"), b"x").unwrap();
        std::fs::write(table.join("nb-1-big-Data.db"), b"x").unwrap();
        let recorded = tmp
            .path()
            .join(".")
            .join("ks/t-0123/cleave-staged/j/ks/t/nb-3-big-Data.db");
        let status = JobStatus {
            results: vec![SSTableResult {
                parent: table.join("nb-1-big-Data.db").to_string_lossy().into(),
                children: vec![recorded.to_string_lossy().into()],
                layout: None,
                fallback_reason: None,
                bytes_shared: 0,
                bytes_copied: 0,
                bytes_reencoded: 0,
                partitions: 1,
                verdict: None,
                planned: Vec::new(),
            }],
            ..Default::default()
        };
        let mut removed =
            remove_unrecorded_children(std::slice::from_ref(&table), "j", &status).unwrap();
        removed.sort();
        assert_eq!(
            removed,
            vec![
                staged.join("nb-4-big-Data.db"),
                staged.join("nb-5-big-Data.db")
            ]
        );
        let mut left: Vec<String> = std::fs::read_dir(&staged)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["nb-3-big-Data.db", "nb-3-big-Index.db", "nb-3-big-TOC.txt"]
        );
        assert!(table
            .join(STAGED_DIR)
            .join("other/nb-9-big-Data.db")
            .exists());
        assert!(table.join("nb-1-big-Data.db").exists());
        // Nothing staged at all: nothing to do.
        assert!(
            remove_unrecorded_children(&[tmp.path().join("none")], "j", &status)
                .unwrap()
                .is_empty()
        );
    }
}
