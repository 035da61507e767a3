//! `AnticompactionJob` as a kind of the core: its checks, its tables, its work (the split of
//! `job.rs` on a blocking thread, progress and heartbeat through the lease) and the
//! cleanup of its leftovers.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;

use super::core::{lease, now, restart, Ctx, Ended, Kind, Run, Store};
use super::crd::{AnticompactionJob, JobMode, JobStatus, Maintenance, Publish, SSTableResult};
use super::decide::{self, TableClaim};
use super::job::{self, JobCut, Outcome, Step};
use super::metrics::Metrics;
use super::schema::SpecProblem;
use super::status::{self, Event};
use super::window;
use crate::reason::{Failure, Reason};

impl Kind for AnticompactionJob {
    const KIND: &'static str = "AnticompactionJob";
    const NOUN: &'static str = "job";

    crate::kind_status_and_node!(node_name);

    fn checks(&self) -> Vec<SpecProblem> {
        let mut v: Vec<SpecProblem> =
            decide::node_label_check(self.labels(), "spec.nodeName", &self.spec.node_name)
                .into_iter()
                .collect();
        v.extend(decide::job_checks(&self.spec));
        v
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
        let mut lease = run.lease(&*ctx, &*self);
        let mut latest = std::mem::take(&mut run.claimed);
        let data_dir = decide::data_dir(self.spec.data_directory.as_deref(), &ctx.data_dir);
        // Before any window: a target this node's Cassandra would misread stops nothing.
        let target =
            job::target_cassandra(self.spec.target_cassandra.as_deref(), ctx.limits.cassandra);
        if let Err(f) = target {
            lease::finish(&mut lease, &run.key, started, &latest, Ended::Failed(f)).await;
            return;
        }
        // The ring is read while Cassandra runs: before any window (a stopped node answers
        // no ring query).
        let cut = match job_cut(&self.spec, &ctx).await {
            Ok(c) => c,
            Err(f) => {
                lease::finish(&mut lease, &run.key, started, &latest, Ended::Failed(f)).await;
                return;
            }
        };
        let windowed = wants_window(&self.spec);
        if windowed {
            if let Err(f) = window::open(&self, &ctx, &mut lease, &mut latest, &data_dir).await {
                lease::finish(&mut lease, &run.key, started, &latest, Ended::Failed(f)).await;
                return;
            }
        }
        let deadline = windowed
            .then(|| window::deadline_of(ctx.window.as_ref(), &latest))
            .flatten();
        let (mut ended, mut last, hit) = self
            .split(
                &ctx,
                &mut run,
                &mut lease,
                latest,
                (&data_dir, cut),
                deadline,
            )
            .await;
        if self.spec.publish == Publish::OnRestart {
            let dirs = job::table_dirs(&data_dir, &self.spec).unwrap_or_default();
            let uid = restart::job_uid(&*self);
            ended = job::end_on_restart(dirs, uid, &self.spec.node_name, ended, true).await;
        }
        if hit && matches!(ended, Ended::Interrupted) {
            ended = Ended::Failed(window::replace_stopped(
                last.progress.sstables_done,
                last.progress.sstables_total,
            ));
        }
        if windowed {
            ended = window::end(&*self, &ctx, &mut lease, &mut last, ended).await;
        }
        lease::finish(&mut lease, &run.key, started, &last, ended).await;
    }

    /// Removes this job's unpublished leftovers (staging directories, an interrupted
    /// replace, the intents and staged children of an `OnRestart` not yet applied, so that
    /// the next restart does not publish a deleted job) on this node. Children already
    /// published stay: they are Cassandra's data.
    async fn close_window<S: Store>(self: Arc<Self>, ctx: Arc<Ctx<S>>) -> bool {
        window::close_finished(self, ctx).await
    }

    async fn cleanup<S: Store>(self: Arc<Self>, ctx: Arc<Ctx<S>>, _stopped: bool) -> String {
        let data_dir = decide::data_dir(self.spec.data_directory.as_deref(), &ctx.data_dir);
        let name = self.name_any();
        let uid = restart::job_uid(&*self);
        let spec = self.spec.clone();
        let r = tokio::task::spawn_blocking(move || {
            let dirs = job::table_dirs(&data_dir, &spec).unwrap_or_default();
            job::recover_leftovers(&dirs, &name)?;
            job::withdraw_intents(&dirs, &uid)
        })
        .await;
        match r {
            Ok(Ok(())) => "leftovers of this job removed".to_string(),
            Ok(Err(f)) => format!("cleanup incomplete: {f}"),
            Err(e) => format!("cleanup incomplete: its task failed: {e}"),
        }
    }
}

impl window::Windowed for AnticompactionJob {
    fn window_spec(&self) -> window::WindowSpec<'_> {
        window::WindowSpec {
            keyspace: &self.spec.keyspace,
            tables: &self.spec.tables,
            max_downtime_seconds: self.spec.max_downtime_seconds,
        }
    }

    fn window_plan(
        &self,
        data_dir: &Path,
        status: &JobStatus,
    ) -> Result<(Vec<std::path::PathBuf>, Vec<std::path::PathBuf>), Failure> {
        let dirs = job::table_dirs(data_dir, &self.spec)?;
        let todo = job::pending_parents(&dirs, &self.spec, status)?;
        Ok((dirs, todo))
    }
}

/// Where the job cuts: the spec's ranges, or for `mode: PreSplit` every token of the
/// keyspace's ring from the node's management API (refused while the ring changes).
async fn job_cut<S: Store>(
    spec: &crate::operator::crd::AnticompactionJobSpec,
    ctx: &Ctx<S>,
) -> Result<JobCut, Failure> {
    if spec.mode != JobMode::PreSplit {
        return Ok(JobCut::Anticompaction);
    }
    let Some(api) = ctx.window.as_ref() else {
        return Err(Failure::new(
            Reason::InvalidSpec,
            "mode: PreSplit reads the ring from the sidecar's --management-api, which is not set; nothing was done",
        ));
    };
    let endpoints = api.client.endpoints().await?;
    let map = api.client.range_to_endpoint(&spec.keyspace).await?;
    let tokens = crate::mgmt::ring::ring_tokens(&endpoints, &map)?;
    if tokens.is_empty() {
        return Err(Failure::new(
            Reason::ManagementApiFailed,
            format!(
                "the ring of keyspace {} has no token: nothing to cut at; nothing was done",
                spec.keyspace
            ),
        ));
    }
    tracing::info!(
        tokens = tokens.len(),
        "pre-split at the ring's tokens of keyspace {}",
        spec.keyspace
    );
    Ok(JobCut::RingTokens(
        tokens
            .into_iter()
            .map(crate::sstable::Token::Murmur3)
            .collect(),
    ))
}

/// `publish: Replace` with `maintenance: ManagementApi`, for real.
fn wants_window(spec: &crate::operator::crd::AnticompactionJobSpec) -> bool {
    spec.publish == Publish::Replace
        && spec.maintenance == Maintenance::ManagementApi
        && !spec.dry_run
}

impl AnticompactionJob {
    /// The split of `job.rs` on a blocking thread, its progress and heartbeat through the
    /// lease. With a window `deadline` (seconds since the epoch), the split stops between
    /// two sstables once it passes (the third value).
    async fn split<S: Store>(
        &self,
        ctx: &Arc<Ctx<S>>,
        run: &mut Run,
        lease: &mut lease::Lease<'_, S, AnticompactionJob>,
        mut latest: JobStatus,
        (data_dir, cut): (&Path, JobCut),
        deadline: Option<i64>,
    ) -> (Ended, JobStatus, bool) {
        let generation = self.metadata.generation;
        let name = self.name_any();
        let ns = self.namespace().unwrap_or_default();
        // The split runs on a blocking thread; its status snapshots come through a channel
        // so that the heartbeat and the per-sstable progress share one writer.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<JobStatus>();
        let spec = self.spec.clone();
        let data_dir = data_dir.to_path_buf();
        let metrics = ctx.metrics.clone();
        let limits = ctx.limits.clone();
        let mut worker_status = latest.clone();
        let (n2, ns2, c2) = (name.clone(), ns.clone(), run.cancel.clone());
        let uid = restart::job_uid(self);
        // Past the deadline already (a sidecar resumed late): not one sstable.
        let mut hit = deadline.is_some_and(|d| now() >= d);
        if hit {
            tracing::warn!(
                "the maintenance window's Replace deadline has passed: replacing nothing"
            );
            run.cancel.store(true, Ordering::Relaxed);
        }
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
                job::JobWork {
                    spec: &spec,
                    cut: &cut,
                },
                job::JobId {
                    name: &n2,
                    uid: &uid,
                },
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
        // The window's Replace deadline, to the second rather than on heartbeat ticks
        // (a sidecar resumed past it replaces nothing: the worker sees `cancel` before its
        // first sstable).
        let mut deadline_passed = std::pin::pin!(window::until(deadline));
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
                _ = &mut deadline_passed, if !hit => {
                    tracing::warn!("the maintenance window's Replace deadline passed: stopping after the current sstable");
                    hit = true;
                    run.cancel.store(true, Ordering::Relaxed);
                }
            }
        };
        let (ended, mut last) = match joined {
            Ok((Ok(Outcome::Complete), st)) => (Ended::Complete, st),
            Ok((Ok(Outcome::Planned), st)) => (Ended::Planned, st),
            Ok((Ok(Outcome::Cancelled), st)) => (Ended::Interrupted, st),
            Ok((Err(f), st)) => (Ended::Failed(f), st),
            Err(e) => {
                let message = format!("the job's worker thread failed: {e}");
                tracing::error!(%message);
                (
                    Ended::Failed(Failure::new(Reason::IoError, message)),
                    latest.clone(),
                )
            }
        };
        // The worker's copy predates the window's steps and the last heartbeat.
        last.window = latest.window.clone();
        last.worker = latest.worker.clone();
        (ended, last, hit)
    }
}

fn count_sstable(metrics: &Metrics, result: &SSTableResult, report: &crate::split::SplitReport) {
    const KIND: &str = AnticompactionJob::KIND;
    // A dry run's bytes are the plan's predictions: none was shared, copied or written.
    let done = |n: u64| if report.dry_run { 0 } else { n };
    for (what, n) in [
        ("shared", done(result.bytes_shared)),
        ("copied", done(result.bytes_copied)),
        ("reencoded", done(result.bytes_reencoded)),
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
