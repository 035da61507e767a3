//! The maintenance window of `publish: Replace` with `maintenance: ManagementApi`: the
//! sidecar stops its own Cassandra through the management API, replaces the parents, and
//! starts it again, within `maxDowntimeSeconds`.
//!
//! ```text
//!   probe cluster (LOCAL_QUORUM at the keyspace's RF) -- 500 --> Failed ClusterUnavailable
//!   flush the tables                       => Flushed    (Cassandra runs)
//!   drain                                  => Drained    (the budget counts from here)
//!   stop, pid 204, no holder of the table  => Stopped
//!   Replace every parent (job::run)        => Replaced   (until drain + budget − start allowance)
//!   stop again while a pid remains, start  => Started    (retried until drain + budget)
//!   readiness 200                          => Ready      (by drain + budget)
//! ```
//!
//! Each step is written to `status.window` before the next begins, so a sidecar that
//! restarts in the middle knows where Cassandra stands: from `Stopped` on, whatever
//! happens, the window ends with a start. The budget counts from the drain, not the stop: a
//! drained Cassandra serves no client (`StorageService.drain` stops the native transport and
//! gossip), so for cass-operator and the clients the node is down from there. Why the bounds (cass-operator and management-api
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
/// `/lifecycle/stop`'s own worst case (7 × 5 s of SIGTERM, then SIGKILL), plus margin: the
/// default of [`Timing::stop_timeout`].
pub const STOP_ALLOWANCE: Duration = Duration::from_secs(40);
/// The rate the window's prediction assumes for the bytes a Replace writes (boundary
/// chunks, components; shared extents cost nothing): a slow disk's.
pub const PREDICTED_WRITE_RATE: u64 = 50 << 20;
/// The fixed cost the prediction assumes per parent (open, check, transaction log, fsyncs).
pub const PREDICTED_PER_PARENT: Duration = Duration::from_millis(500);
/// The pause between two start attempts (and two looks at the pid after a stop): the start
/// is retried until the budget ends, so an outage of the agent shorter than what remains
/// of the budget does not leave Cassandra down.
const START_RETRY: Duration = Duration::from_secs(1);
const READY_POLL: Duration = Duration::from_secs(1);

/// How long the window's I/O may take, from the sidecar's flags.
#[derive(Debug, Clone)]
pub struct Timing {
    /// `--management-api-start-seconds`: how long this node's Cassandra takes from
    /// `/lifecycle/start` to ready (commit log replay, gossip); reserved in the budget.
    pub start_allowance: Duration,
    /// Bound of flush and drain each.
    pub drain_timeout: Duration,
    /// Bound of the stop call (`--management-api-stop-seconds`), reserved in the budget.
    pub stop_timeout: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            start_allowance: Duration::from_secs(120),
            drain_timeout: Duration::from_secs(120),
            stop_timeout: STOP_ALLOWANCE,
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
    let predicted = t.stop_timeout + replace + t.start_allowance;
    if predicted > Duration::from_secs(u64::from(budget_s)) {
        return Err(Failure::new(
            Reason::DowntimeExceeded,
            format!(
                "the window is predicted to take {} s (stop {} s + Replace {:.1} s + start {} s, --management-api-start-seconds), above spec.maxDowntimeSeconds {budget_s}: nothing was asked of Cassandra. Raise maxDowntimeSeconds (≤ {MAX_DOWNTIME_LIMIT}), split fewer sstables per job, or use publish: Stage (no downtime)",
                predicted.as_secs(),
                t.stop_timeout.as_secs(),
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

/// One step of the opening, from the recorded step `at` (`None`: no window yet): the probe
/// and flush, the drain, then the `Stopped` record itself (the caller writes it, then calls
/// [`stop`]); `None` past it.
pub async fn open_step(
    api: &NodeApi,
    spec: &WindowSpec<'_>,
    at: Option<&WindowStatus>,
    now: i64,
) -> Result<Option<WindowStatus>, Failure> {
    let budget = budget(spec);
    let status = |step, drained_at, stopped_at| WindowStatus {
        step,
        stopped_at,
        drained_at,
        ready_at: None,
        max_downtime_seconds: budget,
    };
    let c = &api.client;
    match at.map(|w| w.step) {
        None | Some(WindowStep::Ready) => {
            probe(c, spec.keyspace).await?;
            c.flush(spec.keyspace, spec.tables, api.timing.drain_timeout)
                .await?;
            Ok(Some(status(WindowStep::Flushed, None, None)))
        }
        Some(WindowStep::Flushed) => {
            // The budget counts from the moment the drain is asked: from there the node
            // serves no client. The drain may not take the whole budget.
            let timeout = api
                .timing
                .drain_timeout
                .min(Duration::from_secs(u64::from(budget)));
            c.drain(timeout).await?;
            Ok(Some(status(WindowStep::Drained, Some(now), None)))
        }
        // Recorded before the call ([`stop`]): a sidecar that dies during the call must find
        // a window to close.
        Some(WindowStep::Drained) => Ok(Some(status(
            WindowStep::Stopped,
            at.and_then(|w| w.drained_at).or(Some(now)),
            Some(now),
        ))),
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

/// When the window's budget began: the drain (a window recorded before `drainedAt`
/// existed: the stop).
pub fn began(w: &WindowStatus) -> i64 {
    w.drained_at.or(w.stopped_at).unwrap_or(0)
}

/// When Cassandra must be ready again: the drain plus `maxDowntimeSeconds`.
pub fn window_deadline(w: &WindowStatus) -> i64 {
    began(w) + i64::from(w.max_downtime_seconds)
}

/// When the Replace must stop (between two sstables) to leave the start its allowance.
pub fn replace_deadline(w: &WindowStatus, t: &Timing) -> i64 {
    window_deadline(w) - i64::try_from(t.start_allowance.as_secs()).unwrap_or(i64::MAX)
}

/// The Replace deadline of a resource's run, if it runs in an open window.
pub fn deadline_of(api: Option<&NodeApi>, latest: &JobStatus) -> Option<i64> {
    match (api, &latest.window) {
        (Some(api), Some(w)) if w.step >= WindowStep::Stopped && w.step < WindowStep::Ready => {
            Some(replace_deadline(w, &api.timing))
        }
        _ => None,
    }
}

/// Resolves at `deadline` (seconds since the epoch), at once if it passed; never for `None`.
pub async fn until(deadline: Option<i64>) {
    match deadline {
        Some(d) => {
            let left = u64::try_from(d.saturating_sub(now())).unwrap_or(0);
            tokio::time::sleep(Duration::from_secs(left)).await
        }
        None => std::future::pending().await,
    }
}

/// The failure of a Replace stopped at its deadline, `done` of `total` parents replaced.
pub fn replace_stopped(done: u64, total: u64) -> Failure {
    Failure::new(
        Reason::DowntimeExceeded,
        format!("the Replace was stopped between two sstables at drainedAt + maxDowntimeSeconds − the start allowance, to leave Cassandra its start within the budget; {done} of {total} parents are replaced, the others untouched. Run the job again for the rest"),
    )
}

/// The time left until `deadline`, at least `floor` (one call gets at least that).
fn left(deadline: i64, floor: Duration) -> Duration {
    Duration::from_secs(u64::try_from(deadline.saturating_sub(now())).unwrap_or(0)).max(floor)
}

/// The stop: `/lifecycle/stop`, then the pid endpoint must be 204 and no process may hold
/// the job's tables (the Replace guard). Called after `Stopped` is recorded, so that a
/// sidecar that dies during the call finds a window to close.
pub async fn stop(api: &NodeApi, w: &WindowStatus, dirs: &[PathBuf]) -> Result<(), Failure> {
    let c = &api.client;
    let timeout = api
        .timing
        .stop_timeout
        .min(left(window_deadline(w), Duration::from_secs(1)));
    c.stop(timeout).await?;
    if let Some(pid) = c.pid().await? {
        return Err(Failure::new(
            Reason::CassandraRunning,
            format!("/api/v0/lifecycle/stop answered 200 but /api/v0/lifecycle/pid still names process {pid}: nothing was replaced"),
        ));
    }
    super::job::check_replace(dirs)
}

/// Whether Cassandra is down now (`/lifecycle/pid` 204): a resumed window replaces only
/// then.
pub async fn is_down(api: &NodeApi) -> Result<bool, Failure> {
    Ok(api.client.pid().await?.is_none())
}

/// Brings Cassandra back after the window drained it: while `/lifecycle/pid` names a
/// process, that process is the drained one (a stop that failed, timed out, or has not
/// landed yet; management-api's stop sends SIGTERM up to 7 times 5 s apart), and a drained
/// Cassandra never becomes ready again by itself (`StorageService.drain` is one-way), so it
/// is stopped again and awaited; once none runs, `/lifecycle/start`. Every call is retried
/// until `deadline` (at least one round, for a sidecar that closes a window whose budget
/// has passed). Err says exactly where Cassandra was left.
pub async fn start(api: &NodeApi, deadline: i64) -> Result<(), Failure> {
    let c = &api.client;
    let (mut rounds, mut last) = (0u32, String::new());
    let mut running: Option<String> = None;
    loop {
        rounds += 1;
        match c.pid().await {
            // A Cassandra that answers readiness is not the drained one (a drained node is
            // never ready again): someone started it, or our own start landed unrecorded.
            Ok(Some(_)) if c.ready().await.unwrap_or(false) => return Ok(()),
            Ok(Some(pid)) => {
                tracing::warn!(%pid, "Cassandra still runs drained after the stop: stopping it again");
                let timeout = api
                    .timing
                    .stop_timeout
                    .min(left(deadline, Duration::from_secs(1)));
                if let Err(e) = c.stop(timeout).await {
                    last = format!("stopping it again: {e}");
                }
                running = Some(pid);
            }
            Ok(None) => {
                running = None;
                match c.start(left(deadline, Duration::from_secs(1))).await {
                    Ok(Start::Started) => return Ok(()),
                    // Between the pid and the start a process appeared: look again.
                    Ok(Start::AlreadyRunning(code)) => {
                        last = format!(
                        "/api/v0/lifecycle/start answered {code} (a Cassandra process is there)"
                    )
                    }
                    Ok(Start::Failed(code, m)) => {
                        last = format!("/api/v0/lifecycle/start answered {code}: {m}")
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            Err(e) => last = e.to_string(),
        }
        if now() >= deadline {
            break;
        }
        tracing::warn!(round = rounds, %last, "Cassandra is not started yet; retrying until the budget ends");
        tokio::time::sleep(START_RETRY.min(left(deadline, Duration::ZERO))).await;
    }
    let state = match running {
        Some(pid) => format!("Cassandra is left drained and still running (process {pid}): it serves no client until it restarts, and the stop did not take within maxDowntimeSeconds. Delete the pod (its Cassandra starts undrained)"),
        None => "Cassandra is left stopped (/api/v0/lifecycle/pid 204). Start it with `POST /api/v0/lifecycle/start` on the management API or delete the pod; a sidecar that restarts tries again".to_string(),
    };
    Err(Failure::new(
        Reason::CassandraStartFailed,
        format!("Cassandra was not started again within maxDowntimeSeconds from the drain ({rounds} rounds; last: {last}). {state} (docs/runbook.md). The data is consistent: each parent is either replaced or untouched"),
    ))
}

/// Waits for `/probes/readiness` 200 until `deadline`. `Ok(false)`: `give_up` (the sidecar
/// shuts down) came first; the next sidecar waits again.
pub async fn wait_ready(
    api: &NodeApi,
    deadline: i64,
    give_up: impl Fn() -> bool,
) -> Result<bool, Failure> {
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
                "Cassandra was started (/api/v0/lifecycle/start answered 201) but /api/v0/probes/readiness did not answer 200 within maxDowntimeSeconds from the drain. The data is consistent; see the Cassandra container's log (docs/runbook.md)",
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
    let mut at = latest.window.clone();
    while let Some(w) = open_step(&api, &spec, at.as_ref(), now()).await? {
        at = Some(w.clone());
        let stopped = w.step == WindowStep::Stopped;
        record(&**obj, ctx, lease, latest, w.clone()).await;
        if stopped {
            stop(&api, &w, &dirs).await?;
            // Crash injection for the resume test: die with Cassandra stopped.
            crate::io::fault::point("window:stopped");
            return Ok(());
        }
    }
    Ok(())
}

/// Closes a window that stopped Cassandra: start ([`start`]: a drained Cassandra still
/// running is stopped first), then wait for readiness, both until drain + budget. A sidecar
/// that closes a window whose budget has already passed (it resumed late) gets one round of
/// [`start`] and the start allowance for the readiness. `Ok(false)`: the sidecar shuts down
/// before Cassandra is ready. A status without an open window is left alone (`Ok(true)`).
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
    let deadline = window_deadline(&w);
    if w.step < WindowStep::Started {
        start(&api, deadline).await?;
        w.step = WindowStep::Started;
        record(obj, ctx, lease, latest, w.clone()).await;
    }
    let late = now() + i64::try_from(api.timing.start_allowance.as_secs()).unwrap_or(0);
    let ready_by = if now() >= deadline { late } else { deadline };
    if !wait_ready(&api, ready_by, || ctx.shutdown_requested()).await? {
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
        // Ready, but past the budget (a resumed window): say so rather than Complete.
        Ok(true) if matches!(ended, Ended::Complete) && overran(latest.window.as_ref()) => {
            let w = latest.window.as_ref();
            Ended::Failed(Failure::new(
                Reason::DowntimeExceeded,
                format!(
                    "Cassandra is ready again, {} s after the drain: above maxDowntimeSeconds {}",
                    w.and_then(|w| w.ready_at).unwrap_or(0) - w.map(began).unwrap_or(0),
                    w.map(|w| w.max_downtime_seconds).unwrap_or(0)
                ),
            ))
        }
        Ok(true) => ended,
        // Shutting down: the next sidecar waits for readiness and resumes.
        Ok(false) => Ended::Interrupted,
        Err(f) => Ended::Failed(f),
    }
}

/// [`Kind::close_window`] of a windowed kind: a finished resource whose window is open
/// (from `Stopped` to `Started`: its run failed before Cassandra was ready, or the sidecar
/// died closing it) gets Cassandra started ([`start`], one round if its budget has passed)
/// and readiness awaited for the start allowance, then `Ready` recorded, conditional on the
/// resourceVersion seen (of two sidecars one writes). Its phase and reason stay.
///
/// [`Kind::close_window`]: super::core::Kind::close_window
pub async fn close_finished<K: Windowed, S: Store>(obj: Arc<K>, ctx: Arc<Ctx<S>>) -> bool {
    let (Some(api), Some(mut w)) = (
        ctx.window.clone(),
        obj.status().and_then(|s| s.window.clone()),
    ) else {
        return true;
    };
    if w.step < WindowStep::Stopped || w.step == WindowStep::Ready {
        return true;
    }
    tracing::warn!(step = ?w.step, "a finished {}'s maintenance window is open: starting Cassandra", K::NOUN);
    if w.step < WindowStep::Started {
        if let Err(f) = start(&api, window_deadline(&w)).await {
            tracing::warn!(reason = %f.reason, detail = %f.message, "the open window is not closed yet");
            return false;
        }
        w.step = WindowStep::Started;
    }
    let ready_by = now() + i64::try_from(api.timing.start_allowance.as_secs()).unwrap_or(0);
    match wait_ready(&api, ready_by, || ctx.shutdown_requested()).await {
        Ok(true) => {}
        Ok(false) | Err(_) => return false,
    }
    w.step = WindowStep::Ready;
    w.ready_at = Some(now());
    let current = obj.status().cloned().unwrap_or_default();
    let t = status::next(
        &current,
        Event::Window {
            identity: &ctx.identity,
            window: &w,
        },
        obj.meta().generation,
        now(),
    );
    let expect = obj.meta().resource_version.clone();
    if let Err(e) = ctx
        .store
        .patch_status(&*obj, &t.status, expect.as_deref())
        .await
    {
        tracing::warn!(error = %e, "the closed window was not recorded");
        return false;
    }
    if let Some(note) = &t.note {
        ctx.store.event(&*obj, note).await;
    }
    true
}

/// Whether a closed window lasted longer than its budget.
fn overran(w: Option<&WindowStatus>) -> bool {
    w.and_then(|w| w.ready_at.map(|r| r > window_deadline(w)))
        .unwrap_or(false)
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
            drained_at: None,
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
