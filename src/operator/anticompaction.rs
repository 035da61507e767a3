//! `AnticompactionJob` as a kind of the core: its checks, its tables, its work (the split of
//! `job.rs` on a blocking thread, progress and heartbeat through the lease) and the
//! cleanup of its leftovers.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;

use super::core::{lease, now, Ctx, Ended, Kind, Run, Store};
use super::crd::{AnticompactionJob, JobStatus, SSTableResult};
use super::decide::{self, TableClaim};
use super::job::{self, Outcome, Step};
use super::metrics::Metrics;
use super::status::{self, Event};
use crate::reason::{Failure, Reason};

impl Kind for AnticompactionJob {
    const KIND: &'static str = "AnticompactionJob";
    const NOUN: &'static str = "job";

    fn status(&self) -> Option<&JobStatus> {
        self.status.as_ref()
    }

    fn set_status(&mut self, status: Option<JobStatus>) {
        self.status = status;
    }

    fn acting_node(&self) -> &str {
        &self.spec.node_name
    }

    fn validate(&self) -> Result<(), Failure> {
        // Unknown fields first: a misspelt `dryRun` must never let a job run for real.
        decide::check_schema_rules_job(&self.spec)
            .map_err(|m| Failure::new(Reason::InvalidSpec, m))?;
        decide::check_node_label(self.labels(), &self.spec)?;
        decide::validate_spec(&self.spec)
    }

    fn ttl_seconds_after_finished(&self) -> Option<i64> {
        self.spec.ttl_seconds_after_finished
    }

    fn rate_limit(&self) -> Option<u64> {
        self.spec.max_bytes_per_second
    }

    fn tables(&self, default_data_dir: &Path) -> TableClaim {
        TableClaim::of(&self.spec, default_data_dir)
    }

    async fn work<S: Store>(self: Arc<Self>, ctx: Arc<Ctx<S>>, mut run: Run) {
        let started = Instant::now();
        let generation = self.metadata.generation;
        let name = self.name_any();
        let ns = self.namespace().unwrap_or_default();
        let mut lease = run.lease(&*ctx, &*self);
        // The split runs on a blocking thread; its status snapshots come through a channel
        // so that the heartbeat and the per-sstable progress share one writer.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<JobStatus>();
        let spec = self.spec.clone();
        let data_dir = spec
            .data_directory
            .clone()
            .map(PathBuf::from)
            .unwrap_or_else(|| ctx.data_dir.clone());
        let metrics = ctx.metrics.clone();
        let limits = ctx.limits.clone();
        let mut worker_status = run.claimed.clone();
        let (n2, ns2, c2) = (name.clone(), ns.clone(), run.cancel.clone());
        let task = tokio::task::spawn_blocking(move || {
            let mut on_step = |step: Step<'_>, s: &JobStatus| {
                if let Step::Done { result, report } = step {
                    count_sstable(&metrics, result, report);
                }
                let ratio = if s.progress.sstables_total == 0 {
                    1.0
                } else {
                    s.progress.sstables_done as f64 / s.progress.sstables_total as f64
                };
                metrics
                    .progress
                    .with_label_values(&[AnticompactionJob::KIND, &ns2, &n2])
                    .set(ratio);
                // The receiver is gone only when the run ended; nothing to report then.
                let _ = tx.send(s.clone());
            };
            let r = job::run(
                &spec,
                &n2,
                &data_dir,
                &mut worker_status,
                &c2,
                &limits,
                &mut on_step,
            )
            .map(|(outcome, _)| outcome);
            (r, worker_status)
        });
        let mut task = std::pin::pin!(task);
        let mut beat = tokio::time::interval(ctx.heartbeat);
        beat.tick().await;
        let mut latest = std::mem::take(&mut run.claimed);
        let joined = loop {
            tokio::select! {
                r = &mut task => break r,
                Some(s) = rx.recv() => {
                    latest = status::next(&latest, Event::Progress { identity: &ctx.identity, progress: &s.progress, results: &s.results }, generation, now()).status;
                    lease.write(&latest).await;
                    if lease.lost {
                        run.cancel.store(true, Ordering::Relaxed);
                    }
                    // Crash injection for restart tests: die like a SIGKILL once the first
                    // sstable's result is in status.
                    if latest.progress.sstables_done >= 1 && std::env::var("CLEAVE_CRASH_AT").is_ok_and(|p| p == "job-after-first") {
                        tracing::error!("CLEAVE_CRASH_AT=job-after-first: aborting");
                        std::process::abort();
                    }
                }
                _ = beat.tick() => {
                    latest = status::next(&latest, Event::Heartbeat { identity: &ctx.identity }, generation, now()).status;
                    lease.write(&latest).await;
                    if lease.lost {
                        run.cancel.store(true, Ordering::Relaxed);
                    }
                }
            }
        };
        let (ended, last) = match joined {
            Ok((Ok(Outcome::Complete), st)) => (Ended::Complete, st),
            Ok((Ok(Outcome::Planned), st)) => (Ended::Planned, st),
            Ok((Ok(Outcome::Cancelled), st)) => (Ended::Interrupted, st),
            Ok((Err(f), st)) => (Ended::Failed(f), st),
            Err(e) => {
                let message = format!("the job's worker thread failed: {e}");
                tracing::error!(%message);
                (
                    Ended::Failed(Failure::new(Reason::IoError, message)),
                    latest,
                )
            }
        };
        lease::finish(&mut lease, &run.key, started, &last, ended).await;
    }

    /// Removes this job's unpublished leftovers (staging directories, an interrupted
    /// replace) on this node. Children already published stay: they are Cassandra's data.
    async fn cleanup<S: Store>(self: Arc<Self>, ctx: Arc<Ctx<S>>, _stopped: bool) -> String {
        let data_dir = self
            .spec
            .data_directory
            .clone()
            .map(PathBuf::from)
            .unwrap_or_else(|| ctx.data_dir.clone());
        let name = self.name_any();
        let spec = self.spec.clone();
        let r = tokio::task::spawn_blocking(move || {
            let dirs = job::table_dirs(&data_dir, &spec).unwrap_or_default();
            job::recover_leftovers(&dirs, &name)
        })
        .await;
        match r {
            Ok(Ok(())) => "leftovers of this job removed".to_string(),
            Ok(Err(f)) => format!("cleanup incomplete: {f}"),
            Err(e) => format!("cleanup incomplete: its task failed: {e}"),
        }
    }
}

fn count_sstable(metrics: &Metrics, result: &SSTableResult, report: &crate::split::SplitReport) {
    const KIND: &str = AnticompactionJob::KIND;
    for (what, n) in [
        ("shared", result.bytes_shared),
        ("copied", result.bytes_copied),
        ("reencoded", result.bytes_reencoded),
        ("read", report.read_bytes),
        ("written", report.write_bytes),
    ] {
        metrics.bytes.with_label_values(&[KIND, what]).inc_by(n);
    }
    metrics
        .partitions
        .with_label_values(&[KIND])
        .inc_by(result.partitions);
    metrics.sstables.with_label_values(&[KIND, "split"]).inc();
    for c in &report.children {
        if let Some(f) = &c.fallback {
            metrics.fallbacks.with_label_values(&[f.reason()]).inc();
        }
    }
}
