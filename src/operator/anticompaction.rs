//! `AnticompactionJob` as a kind of the core: its checks, its tables, its work (the split of
//! `job.rs` on a blocking thread, progress and heartbeat through the lease) and the
//! cleanup of its leftovers.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;

use super::core::{lease, now, restart, Ctx, Ended, Kind, Run, Store};
use super::crd::{
    AnticompactionJob, JobStatus, Maintenance, Publish, SSTableResult, WindowStatus, WindowStep,
};
use super::decide::{self, TableClaim};
use super::job::{self, Outcome, Step};
use super::metrics::Metrics;
use super::status::{self, Event};
use super::window::{self, Resume};
use crate::reason::{Failure, Reason};

impl Kind for AnticompactionJob {
    const KIND: &'static str = "AnticompactionJob";
    const NOUN: &'static str = "job";

    crate::kind_status_and_node!(node_name);

    fn validate(&self) -> Result<(), Failure> {
        // Unknown fields first: a misspelt `dryRun` must never let a job run for real.
        decide::check_schema_rules_job(&self.spec)
            .map_err(|m| Failure::new(Reason::InvalidSpec, m))?;
        decide::check_node_label(self.labels(), &self.spec.node_name)?;
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
        let mut lease = run.lease(&*ctx, &*self);
        let mut latest = std::mem::take(&mut run.claimed);
        let data_dir = decide::data_dir(self.spec.data_directory.as_deref(), &ctx.data_dir);
        let windowed = wants_window(&self.spec);
        if windowed {
            if let Err(f) = self
                .open_window(&ctx, &mut lease, &mut latest, &data_dir)
                .await
            {
                // A failure before the stop changed nothing; one at or after it leaves a
                // window to close (Cassandra is started again before the job fails).
                let ended = match self.close_window(&ctx, &mut lease, &mut latest).await {
                    Ok(_) => Ended::Failed(f),
                    Err(start) => Ended::Failed(Failure::new(
                        start.reason,
                        format!("{} (the window had failed first: {f})", start.message),
                    )),
                };
                lease::finish(&mut lease, &run.key, started, &latest, ended).await;
                return;
            }
        }
        let deadline = match (&ctx.window, &latest.window) {
            (Some(api), Some(w)) if windowed && w.step >= WindowStep::Stopped => {
                Some(window::replace_deadline(w, &api.timing))
            }
            _ => None,
        };
        let (mut ended, mut last, hit) = self
            .split(&ctx, &mut run, &mut lease, latest, &data_dir, deadline)
            .await;
        if ended == Ended::Complete && self.spec.publish == Publish::OnRestart {
            ended = Ended::Staged(restart::how_to_restart(&self.spec.node_name));
        }
        if let Some(w) = last
            .window
            .as_mut()
            .filter(|w| w.step == WindowStep::Stopped)
        {
            w.step = WindowStep::Replaced;
        }
        if hit && matches!(ended, Ended::Interrupted) {
            ended = Ended::Failed(Failure::new(
                Reason::DowntimeExceeded,
                format!("the Replace was stopped between two sstables to leave Cassandra its start allowance within maxDowntimeSeconds; {} of {} parents are replaced, the others untouched. Run the job again for the rest", last.progress.sstables_done, last.progress.sstables_total),
            ));
        }
        if windowed {
            match self.close_window(&ctx, &mut lease, &mut last).await {
                Ok(true) => {}
                // Shutting down: the next sidecar waits for readiness and resumes.
                Ok(false) => ended = Ended::Interrupted,
                Err(f) => ended = Ended::Failed(f),
            }
        }
        lease::finish(&mut lease, &run.key, started, &last, ended).await;
    }

    /// Removes this job's unpublished leftovers (staging directories, an interrupted
    /// replace, the intents and staged children of an `OnRestart` not yet applied, so that
    /// the next restart does not publish a deleted job) on this node. Children already
    /// published stay: they are Cassandra's data.
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

/// `publish: Replace` with `maintenance: ManagementApi`, for real.
fn wants_window(spec: &crate::operator::crd::AnticompactionJobSpec) -> bool {
    spec.publish == Publish::Replace
        && spec.maintenance == Maintenance::ManagementApi
        && !spec.dry_run
}

impl AnticompactionJob {
    /// Records a window step in status (and its Event, for the stop and the ready).
    async fn record_window<S: Store>(
        &self,
        ctx: &Ctx<S>,
        lease: &mut lease::Lease<'_, S, AnticompactionJob>,
        latest: &mut JobStatus,
        w: WindowStatus,
    ) {
        let t = status::next(
            latest,
            Event::Window {
                identity: &ctx.identity,
                window: &w,
            },
            self.metadata.generation,
            now(),
        );
        *latest = t.status;
        lease.write(latest).await;
        if let Some(note) = &t.note {
            ctx.store.event(self, note).await;
        }
    }

    /// Opens the window (probe, flush, drain, stop) unless a resumed one is still open or
    /// nothing remains to replace. Err: the job fails; `latest.window` says whether
    /// Cassandra may be down.
    async fn open_window<S: Store>(
        &self,
        ctx: &Ctx<S>,
        lease: &mut lease::Lease<'_, S, AnticompactionJob>,
        latest: &mut JobStatus,
        data_dir: &Path,
    ) -> Result<(), Failure> {
        let Some(api) = ctx.window.clone() else {
            return Err(Failure::new(
                Reason::InvalidSpec,
                "spec.maintenance: ManagementApi needs the sidecar's --management-api (docs/operator.md \"Maintenance window\"); nothing was done",
            ));
        };
        if window::resume_point(latest.window.as_ref()) == Resume::Close {
            // A window this job opened and did not close: the Replace continues only if
            // Cassandra is still down (the guard would refuse anyway; this says why).
            if !window::is_down(&api).await? {
                return Err(Failure::new(
                    Reason::CassandraRunning,
                    "this job's maintenance window was interrupted and Cassandra runs again (/api/v0/lifecycle/pid names a process): the parents not yet replaced are untouched; create the job again for them",
                ));
            }
            return Ok(());
        }
        let spec = self.spec.clone();
        let st = latest.clone();
        let d = data_dir.to_path_buf();
        let (dirs, todo) = tokio::task::spawn_blocking(move || {
            let dirs = job::table_dirs(&d, &spec)?;
            let todo = job::pending_parents(&dirs, &spec, &st)?;
            Ok::<_, Failure>((dirs, todo))
        })
        .await
        .map_err(|e| Failure::new(Reason::IoError, format!("planning the window: {e}")))??;
        if todo.is_empty() {
            return Ok(());
        }
        let reflink = dirs.first().is_some_and(|d| {
            matches!(
                crate::io::fs::guess_reflink(d),
                crate::io::reflink::ReflinkSupport::Supported { .. }
            )
        });
        window::check_prediction(
            window::budget(&self.spec),
            window::predict_replace(&todo, reflink),
            &api.timing,
        )?;
        let mut at = latest.window.as_ref().map(|w| w.step);
        while let Some(w) = window::open_step(&api, &self.spec, at, now()).await? {
            at = Some(w.step);
            let stopped = w.step == WindowStep::Stopped;
            self.record_window(ctx, lease, latest, w).await;
            if stopped {
                window::stop(&api, &dirs).await?;
                // Crash injection for the resume test: die with Cassandra stopped.
                crate::io::fault::point("window:stopped");
                return Ok(());
            }
        }
        Ok(())
    }

    /// Closes a window that stopped Cassandra: start (unless it already runs), then wait
    /// for readiness. `Ok(false)`: the sidecar shuts down before Cassandra is ready. A
    /// status without an open window is left alone (`Ok(true)`).
    async fn close_window<S: Store>(
        &self,
        ctx: &Ctx<S>,
        lease: &mut lease::Lease<'_, S, AnticompactionJob>,
        latest: &mut JobStatus,
    ) -> Result<bool, Failure> {
        let (Some(api), Some(w)) = (ctx.window.clone(), latest.window.clone()) else {
            return Ok(true);
        };
        if w.step < WindowStep::Stopped || w.step == WindowStep::Ready {
            return Ok(true);
        }
        let mut w = w;
        if w.step < WindowStep::Started {
            window::start(&api).await?;
            w.step = WindowStep::Started;
            self.record_window(ctx, lease, latest, w.clone()).await;
        }
        if !window::wait_ready(&api, &w, now, || ctx.shutdown_requested()).await? {
            return Ok(false);
        }
        w.step = WindowStep::Ready;
        w.ready_at = Some(now());
        self.record_window(ctx, lease, latest, w).await;
        Ok(true)
    }

    /// The split of `job.rs` on a blocking thread, its progress and heartbeat through the
    /// lease. With a window `deadline` (seconds since the epoch), the split stops between
    /// two sstables once it passes (the third value).
    async fn split<S: Store>(
        &self,
        ctx: &Arc<Ctx<S>>,
        run: &mut Run,
        lease: &mut lease::Lease<'_, S, AnticompactionJob>,
        mut latest: JobStatus,
        data_dir: &Path,
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
                &uid,
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
        let mut hit = false;
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
                    if deadline.is_some_and(|d| now() >= d) && !hit {
                        tracing::warn!("the maintenance window's Replace deadline passed: stopping after the current sstable");
                        hit = true;
                        run.cancel.store(true, Ordering::Relaxed);
                    }
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
