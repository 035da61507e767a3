//! The maintenance window of `publish: Replace` with `maintenance: ManagementApi`: the
//! sidecar stops its own Cassandra through the management API, replaces the parents, and
//! starts it again, within `maxDowntimeSeconds`.
//!
//! ```text
//!   probe cluster (LOCAL_QUORUM at the keyspace's RF) -- 500 --> Failed ClusterUnavailable
//!   flush the tables                       => Flushed    (Cassandra runs)
//!   drain                                  => Drained    (no more writes)
//!   stop, pid 204, no holder of the table  => Stopped    (the budget counts from here)
//!   Replace every parent (job::run)        => Replaced
//!   start (retried)                        => Started
//!   readiness 200                          => Ready
//! ```
//!
//! Each step is written to `status.window` before the next begins, so a sidecar that
//! restarts in the middle knows where Cassandra stands: from `Stopped` on, whatever
//! happens, the window ends with a start. Why the bounds (cass-operator and management-api
//! behaviour, `../shared/third-party/README.md`): cass-operator never calls
//! `/lifecycle/start` for a pod it did not stop and deletes a pod that has not been ready for
//! 10 minutes (`deleteStuckNodes`), so the budget is at most 540 s and the sidecar itself
//! starts Cassandra; `/lifecycle/stop` takes up to 35 s (7 SIGTERMs 5 s apart, then SIGKILL)
//! and does not drain, so cleave drains first.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::core::{lease::Lease, now, Ctx, Ended, Kind, Store};
use super::crd::{JobStatus, WindowStatus, WindowStep};
use super::status::{self, Event};
use crate::mgmt::{Client, ClusterHealth, Start};
use crate::reason::{Failure, Reason};

/// What a window needs of a resource's spec.
#[derive(Debug, Clone, Copy)]
pub struct WindowSpec<'a> {
    pub keyspace: &'a str,
    /// Flushed before the drain; empty: every table of the keyspace.
    pub tables: &'a [String],
    /// `spec.maxDowntimeSeconds` (unset: [`DEFAULT_MAX_DOWNTIME`]).
    pub max_downtime_seconds: Option<u32>,
}

/// A kind whose `publish: Replace` can run in a window (`AnticompactionJob`, `CleanupJob`):
/// what it brings; the window's steps, their records and resumption are written once here.
pub trait Windowed: Kind {
    fn window_spec(&self) -> WindowSpec<'_>;
    /// The table directories and the sstables the Replace would still rewrite (blocking; for
    /// the prediction, and to know whether a window is needed at all).
    fn window_plan(
        &self,
        data_dir: &Path,
        status: &JobStatus,
    ) -> Result<(Vec<PathBuf>, Vec<PathBuf>), Failure>;
}

/// Default `maxDowntimeSeconds`.
pub const DEFAULT_MAX_DOWNTIME: u32 = 300;
/// The largest accepted `maxDowntimeSeconds`: a minute below cass-operator's 600 s.
pub const MAX_DOWNTIME_LIMIT: u32 = 540;
/// `/lifecycle/stop`'s own worst case (7 × 5 s of SIGTERM, then SIGKILL), plus margin.
pub const STOP_ALLOWANCE: Duration = Duration::from_secs(40);
/// The rate the window's prediction assumes for the bytes a Replace writes (boundary
/// chunks, components; shared extents cost nothing): a slow disk's.
pub const PREDICTED_WRITE_RATE: u64 = 50 << 20;
/// The fixed cost the prediction assumes per parent (open, check, transaction log, fsyncs).
pub const PREDICTED_PER_PARENT: Duration = Duration::from_millis(500);
const START_ATTEMPTS: u32 = 3;
const START_RETRY: Duration = Duration::from_secs(5);
const READY_POLL: Duration = Duration::from_secs(2);

/// How long the window's I/O may take, from the sidecar's flags.
#[derive(Debug, Clone)]
pub struct Timing {
    /// `--management-api-start-seconds`: how long this node's Cassandra takes from
    /// `/lifecycle/start` to ready (commit log replay, gossip); reserved in the budget.
    pub start_allowance: Duration,
    /// Bound of flush and drain each.
    pub drain_timeout: Duration,
    /// Bound of the stop call.
    pub stop_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            start_allowance: Duration::from_secs(120),
            drain_timeout: Duration::from_secs(120),
            stop_timeout: Duration::from_secs(60),
        }
    }
}

/// The sidecar's management API and its timing (`Ctx::window`).
#[derive(Debug, Clone)]
pub struct NodeApi {
    pub client: Client,
    pub timing: Timing,
}

/// The budget of a spec's window.
pub fn budget(spec: &WindowSpec<'_>) -> u32 {
    spec.max_downtime_seconds.unwrap_or(DEFAULT_MAX_DOWNTIME)
}

/// How long the Replace of `parents` is predicted to take: their predicted written bytes
/// at [`PREDICTED_WRITE_RATE`] plus [`PREDICTED_PER_PARENT`] each.
pub fn predict_replace(parents: &[PathBuf], reflink: bool) -> Duration {
    let bytes: u64 = parents
        .iter()
        .map(|p| super::job::predicted_bytes(p, reflink))
        .sum();
    Duration::from_secs_f64(bytes as f64 / PREDICTED_WRITE_RATE as f64)
        + PREDICTED_PER_PARENT * u32::try_from(parents.len()).unwrap_or(u32::MAX)
}

/// Refuses a window whose predicted downtime (stop + Replace + start) exceeds its budget,
/// before anything is asked of Cassandra.
pub fn check_prediction(budget_s: u32, replace: Duration, t: &Timing) -> Result<(), Failure> {
    if budget_s > MAX_DOWNTIME_LIMIT {
        return Err(Failure::new(
            Reason::InvalidSpec,
            format!("spec.maxDowntimeSeconds: {budget_s} is above {MAX_DOWNTIME_LIMIT} (cass-operator deletes a pod that is not ready for 600 s)"),
        ));
    }
    let predicted = STOP_ALLOWANCE + replace + t.start_allowance;
    if predicted > Duration::from_secs(u64::from(budget_s)) {
        return Err(Failure::new(
            Reason::DowntimeExceeded,
            format!(
                "the window is predicted to take {} s (stop {} s + Replace {:.1} s + start {} s, --management-api-start-seconds), above spec.maxDowntimeSeconds {budget_s}: nothing was asked of Cassandra. Raise maxDowntimeSeconds (≤ {MAX_DOWNTIME_LIMIT}), split fewer sstables per job, or use publish: Stage (no downtime)",
                predicted.as_secs(),
                STOP_ALLOWANCE.as_secs(),
                replace.as_secs_f64(),
                t.start_allowance.as_secs()
            ),
        ));
    }
    Ok(())
}

/// Where Cassandra stands, seen from a window's recorded step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// No window yet (or the last one closed): open a new one.
    Open,
    /// A window stopped Cassandra and did not close: continue from the Replace (if
    /// Cassandra is still down and time remains) and close it.
    Close,
}

pub fn resume_point(w: Option<&WindowStatus>) -> Resume {
    match w.map(|w| w.step) {
        None | Some(WindowStep::Ready) => Resume::Open,
        // Before the stop nothing needs undoing; the opening starts again (a drained
        // Cassandra accepts no writes until it restarts, so it will be stopped anyway).
        Some(WindowStep::Flushed | WindowStep::Drained) => Resume::Open,
        Some(WindowStep::Stopped | WindowStep::Replaced | WindowStep::Started) => Resume::Close,
    }
}

/// One step of the opening, from the recorded `at`: the probe and flush, the drain, then
/// the `Stopped` record itself (the caller writes it, then calls [`stop`]); `None` past it.
pub async fn open_step(
    api: &NodeApi,
    spec: &WindowSpec<'_>,
    at: Option<WindowStep>,
    now: i64,
) -> Result<Option<WindowStatus>, Failure> {
    let budget = budget(spec);
    let status = |step, stopped_at| WindowStatus {
        step,
        stopped_at,
        ready_at: None,
        max_downtime_seconds: budget,
    };
    let c = &api.client;
    match at {
        None | Some(WindowStep::Ready) => {
            probe(c, spec.keyspace).await?;
            c.flush(spec.keyspace, spec.tables, api.timing.drain_timeout)
                .await?;
            Ok(Some(status(WindowStep::Flushed, None)))
        }
        Some(WindowStep::Flushed) => {
            c.drain(api.timing.drain_timeout).await?;
            Ok(Some(status(WindowStep::Drained, None)))
        }
        // Recorded before the call ([`stop`]): the budget counts from the moment Cassandra
        // may go down, and a sidecar that dies during the call must find a window to close.
        Some(WindowStep::Drained) => Ok(Some(status(WindowStep::Stopped, Some(now)))),
        Some(WindowStep::Stopped | WindowStep::Replaced | WindowStep::Started) => Ok(None),
    }
}

/// The cluster probe at LOCAL_QUORUM for the keyspace's replication factor in this DC
/// (management-api `K8OperatorResources.checkClusterConsistency`).
async fn probe(c: &Client, keyspace: &str) -> Result<(), Failure> {
    let dc = c.local_dc().await?;
    let rf = c.replication_factor(keyspace, &dc).await?.ok_or_else(|| {
        Failure::new(
            Reason::InvalidSpec,
            format!("keyspace {keyspace} has no replicas in this node's data center {dc} (/api/v0/ops/keyspace/replication)"),
        )
    })?;
    match c.cluster_probe("LOCAL_QUORUM", rf).await? {
        ClusterHealth::Healthy => Ok(()),
        ClusterHealth::Unhealthy(ranges) => Err(Failure::new(
            Reason::ClusterUnavailable,
            format!("/api/v0/probes/cluster?consistency_level=LOCAL_QUORUM&rf_per_dc={rf}: 500, so stopping this node would leave ranges below LOCAL_QUORUM: {ranges}. Nothing was asked of Cassandra; run the job when every replica is up"),
        )),
    }
}

/// When the Replace must stop (between two sstables) to leave the start its allowance.
pub fn replace_deadline(w: &WindowStatus, t: &Timing) -> i64 {
    w.stopped_at.unwrap_or(0) + i64::from(w.max_downtime_seconds)
        - i64::try_from(t.start_allowance.as_secs()).unwrap_or(i64::MAX)
}

/// The stop: `/lifecycle/stop`, then the pid endpoint must be 204 and no process may hold
/// the job's tables (the Replace guard). Called after `Stopped` is recorded, so that a
/// sidecar that dies during the call finds a window to close.
pub async fn stop(api: &NodeApi, dirs: &[PathBuf]) -> Result<(), Failure> {
    let c = &api.client;
    c.stop(api.timing.stop_timeout).await?;
    if let Some(pid) = c.pid().await? {
        return Err(Failure::new(
            Reason::CassandraRunning,
            format!("/api/v0/lifecycle/stop answered 200 but /api/v0/lifecycle/pid still names process {pid}"),
        ));
    }
    super::job::check_replace(dirs)
}

/// Whether Cassandra is down now (`/lifecycle/pid` 204): a resumed window replaces only
/// then.
pub async fn is_down(api: &NodeApi) -> Result<bool, Failure> {
    Ok(api.client.pid().await?.is_none())
}

/// Starts Cassandra, retried [`START_ATTEMPTS`] times. Called from `Stopped` on, whatever
/// happened in between.
pub async fn start(api: &NodeApi) -> Result<(), Failure> {
    let mut last = String::new();
    for attempt in 1..=START_ATTEMPTS {
        match api.client.start(Duration::from_secs(60)).await {
            Ok(Start::Started | Start::AlreadyRunning(_)) => return Ok(()),
            Ok(Start::Failed(code, m)) => {
                last = format!("/api/v0/lifecycle/start answered {code}: {m}")
            }
            Err(e) => last = e.to_string(),
        }
        tracing::warn!(attempt, %last, "Cassandra did not start; retrying");
        if attempt < START_ATTEMPTS {
            tokio::time::sleep(START_RETRY).await;
        }
    }
    Err(Failure::new(
        Reason::CassandraStartFailed,
        format!("Cassandra did not start again after the maintenance window ({START_ATTEMPTS} attempts): {last}. The data is consistent (each parent is either replaced or untouched); start it with `POST /api/v0/lifecycle/start` on the management API or delete the pod (docs/runbook.md)"),
    ))
}

/// Waits for `/probes/readiness` 200 until the budget (from the stop) ends. `Ok(false)`:
/// `give_up` (the sidecar shuts down) came first; the next sidecar waits again.
pub async fn wait_ready(
    api: &NodeApi,
    w: &WindowStatus,
    now: impl Fn() -> i64,
    give_up: impl Fn() -> bool,
) -> Result<bool, Failure> {
    let deadline = w.stopped_at.unwrap_or_else(&now) + i64::from(w.max_downtime_seconds);
    loop {
        match api.client.ready().await {
            Ok(true) => return Ok(true),
            Ok(false) => {}
            Err(e) => tracing::debug!(error = %e, "readiness probe"),
        }
        if give_up() {
            return Ok(false);
        }
        if now() >= deadline {
            return Err(Failure::new(
                Reason::CassandraStartFailed,
                format!("Cassandra was started but /api/v0/probes/readiness did not answer 200 within maxDowntimeSeconds ({} s from the stop). The data is consistent; see the Cassandra container's log (docs/runbook.md)", w.max_downtime_seconds),
            ));
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// Records a window step in status (and its Event, for the stop and the ready).
pub async fn record<K: Windowed, S: Store>(
    obj: &K,
    ctx: &Ctx<S>,
    lease: &mut Lease<'_, S, K>,
    latest: &mut JobStatus,
    w: WindowStatus,
) {
    let t = status::next(
        latest,
        Event::Window {
            identity: &ctx.identity,
            window: &w,
        },
        obj.meta().generation,
        now(),
    );
    *latest = t.status;
    lease.write(latest).await;
    if let Some(note) = &t.note {
        ctx.store.event(obj, note).await;
    }
}

/// Opens the window (probe, flush, drain, stop) unless a resumed one is still open or
/// nothing remains to replace. Err: the resource fails with this failure, and a window that
/// had stopped Cassandra is closed first ([`fail_opening`]).
pub async fn open<K: Windowed, S: Store>(
    obj: &Arc<K>,
    ctx: &Ctx<S>,
    lease: &mut Lease<'_, S, K>,
    latest: &mut JobStatus,
    data_dir: &Path,
) -> Result<(), Failure> {
    match open_steps(obj, ctx, lease, latest, data_dir).await {
        Ok(()) => Ok(()),
        Err(f) => Err(fail_opening(&**obj, ctx, lease, latest, f).await),
    }
}

/// [`open`]'s steps; Err: `latest.window` says whether Cassandra may be down.
async fn open_steps<K: Windowed, S: Store>(
    obj: &Arc<K>,
    ctx: &Ctx<S>,
    lease: &mut Lease<'_, S, K>,
    latest: &mut JobStatus,
    data_dir: &Path,
) -> Result<(), Failure> {
    let Some(api) = ctx.window.clone() else {
        return Err(Failure::new(
            Reason::InvalidSpec,
            "spec.maintenance: ManagementApi needs the sidecar's --management-api (docs/operator.md \"Maintenance window\"); nothing was done",
        ));
    };
    if resume_point(latest.window.as_ref()) == Resume::Close {
        // A window this resource opened and did not close: the Replace continues only if
        // Cassandra is still down (the guard would refuse anyway; this says why).
        if !is_down(&api).await? {
            return Err(Failure::new(
                Reason::CassandraRunning,
                format!("this {}'s maintenance window was interrupted and Cassandra runs again (/api/v0/lifecycle/pid names a process): the sstables not yet replaced are untouched; create it again for them", K::NOUN),
            ));
        }
        return Ok(());
    }
    let (o, st, d) = (obj.clone(), latest.clone(), data_dir.to_path_buf());
    let (dirs, todo) = tokio::task::spawn_blocking(move || o.window_plan(&d, &st))
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
    let spec = obj.window_spec();
    check_prediction(budget(&spec), predict_replace(&todo, reflink), &api.timing)?;
    let mut at = latest.window.as_ref().map(|w| w.step);
    while let Some(w) = open_step(&api, &spec, at, now()).await? {
        at = Some(w.step);
        let stopped = w.step == WindowStep::Stopped;
        record(&**obj, ctx, lease, latest, w).await;
        if stopped {
            stop(&api, &dirs).await?;
            // Crash injection for the resume test: die with Cassandra stopped.
            crate::io::fault::point("window:stopped");
            return Ok(());
        }
    }
    Ok(())
}

/// Closes a window that stopped Cassandra: start (unless it already runs), then wait for
/// readiness. `Ok(false)`: the sidecar shuts down before Cassandra is ready. A status
/// without an open window is left alone (`Ok(true)`).
pub async fn close<K: Windowed, S: Store>(
    obj: &K,
    ctx: &Ctx<S>,
    lease: &mut Lease<'_, S, K>,
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
        start(&api).await?;
        w.step = WindowStep::Started;
        record(obj, ctx, lease, latest, w.clone()).await;
    }
    if !wait_ready(&api, &w, now, || ctx.shutdown_requested()).await? {
        return Ok(false);
    }
    w.step = WindowStep::Ready;
    w.ready_at = Some(now());
    record(obj, ctx, lease, latest, w).await;
    Ok(true)
}

/// After the Replace: records `Replaced` for a window that stopped Cassandra, closes it, and
/// says how the resource ended (`Interrupted` if the sidecar shuts down before Cassandra is
/// ready, `Failed` if the start fails).
pub async fn end<K: Windowed, S: Store>(
    obj: &K,
    ctx: &Ctx<S>,
    lease: &mut Lease<'_, S, K>,
    latest: &mut JobStatus,
    ended: Ended,
) -> Ended {
    if let Some(w) = latest
        .window
        .as_mut()
        .filter(|w| w.step == WindowStep::Stopped)
    {
        w.step = WindowStep::Replaced;
    }
    match close(obj, ctx, lease, latest).await {
        Ok(true) => ended,
        // Shutting down: the next sidecar waits for readiness and resumes.
        Ok(false) => Ended::Interrupted,
        Err(f) => Ended::Failed(f),
    }
}

/// A failure before or while opening: a failure before the stop changed nothing; one at or
/// after it leaves a window to close (Cassandra is started again before the resource fails).
pub async fn fail_opening<K: Windowed, S: Store>(
    obj: &K,
    ctx: &Ctx<S>,
    lease: &mut Lease<'_, S, K>,
    latest: &mut JobStatus,
    f: Failure,
) -> Failure {
    match close(obj, ctx, lease, latest).await {
        Ok(_) => f,
        Err(start) => Failure::new(
            start.reason,
            format!("{} (the window had failed first: {f})", start.message),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prediction_refuses_a_window_above_its_budget() {
        let t = Timing::default();
        assert!(check_prediction(300, Duration::from_secs(10), &t).is_ok());
        let f = check_prediction(300, Duration::from_secs(200), &t).expect_err("over budget");
        assert_eq!(f.reason, Reason::DowntimeExceeded);
        assert!(
            f.message.contains("nothing was asked of Cassandra"),
            "{}",
            f.message
        );
        let f = check_prediction(541, Duration::ZERO, &t).expect_err("above 540");
        assert_eq!(f.reason, Reason::InvalidSpec);
    }

    #[test]
    fn a_window_that_stopped_cassandra_is_closed_on_resume() {
        let w = |step| WindowStatus {
            step,
            stopped_at: Some(100),
            ready_at: None,
            max_downtime_seconds: 300,
        };
        assert_eq!(resume_point(None), Resume::Open);
        assert_eq!(resume_point(Some(&w(WindowStep::Drained))), Resume::Open);
        assert_eq!(resume_point(Some(&w(WindowStep::Ready))), Resume::Open);
        for s in [
            WindowStep::Stopped,
            WindowStep::Replaced,
            WindowStep::Started,
        ] {
            assert_eq!(resume_point(Some(&w(s))), Resume::Close, "{s:?}");
        }
        assert_eq!(
            replace_deadline(&w(WindowStep::Stopped), &Timing::default()),
            280
        );
    }
}
