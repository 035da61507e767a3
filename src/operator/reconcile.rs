//! The reconciler, shared by the Kubernetes controller and the local manifest directory:
//! decide (`decide.rs`, pure) → apply (wait, delete, fail, or start the job on a task of its
//! own) → record (the status and Event that `status::next` returns, metrics). A reconcile
//! never runs a job to the end: it claims the lease and spawns the run, so the reconcile
//! histogram measures reconciles and `cleave_job_duration_seconds` measures jobs.
//!
//! Ownership is a lease in `status.worker`. It is taken with the job's
//! `metadata.resourceVersion` as a precondition, so when two sidecars see the same stale
//! lease the apiserver answers 409 to the second and exactly one runs the job. Every later
//! write of the run carries the resourceVersion of the previous one; a 409 there is resolved
//! by re-reading the job: still ours → retry, someone else's → the run stops (lease lost).

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::{info, instrument, warn, Instrument};

use super::crd::{AnticompactionJob, JobStatus, RangeStream};
use super::decide::{self, Next, TableClaim};
use super::job::{self, NodeLimits, Outcome, Step};
use super::metrics::Metrics;
use super::status::{self, Event, Note, Phase};

pub use super::status::EventType;

pub const JOB: &str = "AnticompactionJob";
pub const STREAM: &str = "RangeStream";

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(String),
    #[error("resource store: {0}")]
    Store(String),
    #[error("worker task: {0}")]
    Task(String),
}

impl OperatorError {
    pub fn label(&self) -> &'static str {
        match self {
            OperatorError::Kube(_) => "kube",
            OperatorError::Finalizer(_) => "finalizer",
            OperatorError::Store(_) => "store",
            OperatorError::Task(_) => "task",
        }
    }

    /// The apiserver refused a write whose resourceVersion precondition no longer holds.
    pub fn is_conflict(&self) -> bool {
        matches!(self, OperatorError::Kube(kube::Error::Api(s)) if s.code == 409)
    }
}

/// Where resources live and their status goes: the Kubernetes API or a directory.
pub trait Store: Send + Sync + 'static {
    /// Writes a job's status. With `expect`, only if the job is still at that
    /// resourceVersion (a 409 conflict otherwise). Returns the new resourceVersion (`None`
    /// where the store has none).
    fn patch_status(
        &self,
        job: &AnticompactionJob,
        status: &JobStatus,
        expect: Option<&str>,
    ) -> impl Future<Output = Result<Option<String>, OperatorError>> + Send;
    /// The job as stored now (`None`: deleted).
    fn get(
        &self,
        job: &AnticompactionJob,
    ) -> impl Future<Output = Result<Option<AnticompactionJob>, OperatorError>> + Send;
    /// A RangeStream's status, with the same resourceVersion precondition as a job's.
    fn patch_stream_status(
        &self,
        s: &RangeStream,
        status: &JobStatus,
        expect: Option<&str>,
    ) -> impl Future<Output = Result<Option<String>, OperatorError>> + Send;
    /// The stream as stored now (`None`: deleted).
    fn get_stream(
        &self,
        s: &RangeStream,
    ) -> impl Future<Output = Result<Option<RangeStream>, OperatorError>> + Send;
    fn delete(
        &self,
        job: &AnticompactionJob,
    ) -> impl Future<Output = Result<(), OperatorError>> + Send;
    /// Publishes an Event about `obj` (failures are logged, never fatal).
    fn event<K>(&self, obj: &K, note: &Note) -> impl Future<Output = ()> + Send
    where
        K: Resource<DynamicType = ()> + Sync;
}

/// A resource whose execution holds the `status.worker` lease: both kinds, so one
/// [`Lease`] writer serves the job runner and the stream sender.
pub trait Owned: Resource<DynamicType = ()> + Send + Sync + 'static {
    /// The `kind` metric label.
    const KIND: &'static str;
    fn status_of(&self) -> Option<&JobStatus>;
    fn write_status<S: Store>(
        &self,
        store: &S,
        st: &JobStatus,
        expect: Option<&str>,
    ) -> impl Future<Output = Result<Option<String>, OperatorError>> + Send;
    fn fetch<S: Store>(
        &self,
        store: &S,
    ) -> impl Future<Output = Result<Option<Self>, OperatorError>> + Send
    where
        Self: Sized;
}

impl Owned for AnticompactionJob {
    const KIND: &'static str = JOB;
    fn status_of(&self) -> Option<&JobStatus> {
        self.status.as_ref()
    }
    fn write_status<S: Store>(
        &self,
        store: &S,
        st: &JobStatus,
        expect: Option<&str>,
    ) -> impl Future<Output = Result<Option<String>, OperatorError>> + Send {
        store.patch_status(self, st, expect)
    }
    fn fetch<S: Store>(
        &self,
        store: &S,
    ) -> impl Future<Output = Result<Option<Self>, OperatorError>> + Send {
        store.get(self)
    }
}

impl Owned for RangeStream {
    const KIND: &'static str = STREAM;
    fn status_of(&self) -> Option<&JobStatus> {
        self.status.as_ref()
    }
    fn write_status<S: Store>(
        &self,
        store: &S,
        st: &JobStatus,
        expect: Option<&str>,
    ) -> impl Future<Output = Result<Option<String>, OperatorError>> + Send {
        store.patch_stream_status(self, st, expect)
    }
    fn fetch<S: Store>(
        &self,
        store: &S,
    ) -> impl Future<Output = Result<Option<Self>, OperatorError>> + Send {
        store.get_stream(self)
    }
}

/// The jobs running on this sidecar: a cancel flag each and the tables they hold.
#[derive(Default)]
pub struct Runs {
    inner: Mutex<HashMap<String, RunEntry>>,
}

struct RunEntry {
    cancel: Arc<AtomicBool>,
    tables: TableClaim,
}

/// Why a job cannot start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// Another job of this node works on one of its tables.
    TableBusy { other: String, tables: String },
    /// `--max-concurrent-jobs` jobs are running.
    ConcurrencyLimit { max: usize },
}

impl Blocked {
    pub fn reason(&self) -> &'static str {
        match self {
            Blocked::TableBusy { .. } => "TableBusy",
            Blocked::ConcurrencyLimit { .. } => "ConcurrencyLimit",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Blocked::TableBusy { other, tables } => format!(
                "waits for {other}, which works on {tables} on this node: jobs and streams on one table run one at a time"
            ),
            Blocked::ConcurrencyLimit { max } => format!(
                "waits for a slot: {max} jobs already run on this node (--max-concurrent-jobs)"
            ),
        }
    }
}

impl Runs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunEntry>> {
        // A panic while holding the lock leaves at most one stale entry, which its task's
        // end removes; the map itself stays consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_running(&self, key: &str) -> bool {
        self.lock().contains_key(key)
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Registers a run unless a limit holds it back; one lock, so two reconciles cannot
    /// both take the last slot or the same table.
    pub(super) fn try_start(
        &self,
        key: &str,
        tables: TableClaim,
        max: usize,
    ) -> Result<Arc<AtomicBool>, Blocked> {
        let mut m = self.lock();
        if let Some((other, e)) = m.iter().find(|(_, e)| e.tables.conflicts(&tables)) {
            return Err(Blocked::TableBusy {
                other: other
                    .split_once('/')
                    .map_or(other.as_str(), |(_, o)| o)
                    .to_string(),
                tables: e.tables.describe(),
            });
        }
        if m.len() >= max.max(1) {
            return Err(Blocked::ConcurrencyLimit { max: max.max(1) });
        }
        let cancel = Arc::new(AtomicBool::new(false));
        m.insert(
            key.to_string(),
            RunEntry {
                cancel: cancel.clone(),
                tables,
            },
        );
        Ok(cancel)
    }

    pub(super) fn finish(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Asks a run to stop after its current sstable. False if it is not running here.
    pub fn cancel(&self, key: &str) -> bool {
        self.lock()
            .get(key)
            .map(|e| e.cancel.store(true, Ordering::Relaxed))
            .is_some()
    }

    pub fn cancel_all(&self) {
        for e in self.lock().values() {
            e.cancel.store(true, Ordering::Relaxed);
        }
    }

    /// Waits until no job runs (or `timeout` passes); true if none does.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let t = Instant::now();
        while self.count() > 0 {
            if t.elapsed() > timeout {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    }

    /// Waits until `key` no longer runs (or `timeout` passes).
    pub async fn wait_stopped(&self, key: &str, timeout: Duration) -> bool {
        let t = Instant::now();
        while self.is_running(key) {
            if t.elapsed() > timeout {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    }
}

pub struct Ctx<S: Store> {
    pub store: S,
    pub node: String,
    /// This sidecar process (node/pid/start): a heartbeat from another identity is another worker.
    pub identity: String,
    pub data_dir: PathBuf,
    pub metrics: Arc<Metrics>,
    /// Set on SIGTERM: running jobs stop after their current sstable.
    pub shutdown: Arc<AtomicBool>,
    /// Last seen phase of each of this node's resources (`kind/ns/name`), for `cleave_jobs`.
    pub phases: Mutex<HashMap<String, (&'static str, Phase)>>,
    /// Jobs held back by a limit (`key` → reason), for `cleave_jobs_waiting`.
    pub waiting: Mutex<HashMap<String, (&'static str, &'static str)>>,
    pub runs: Runs,
    pub limits: NodeLimits,
    /// Heartbeat period of a running job (a third of the lease).
    pub heartbeat: Duration,
    /// How this sidecar reaches receivers as a RangeStream's source.
    pub stream: super::stream::StreamClient,
}

impl<S: Store> Ctx<S> {
    pub fn new(store: S, node: &str, data_dir: PathBuf, metrics: Arc<Metrics>) -> Ctx<S> {
        Ctx {
            store,
            node: node.to_string(),
            identity: identity(node),
            data_dir,
            metrics,
            shutdown: Arc::new(AtomicBool::new(false)),
            phases: Default::default(),
            waiting: Default::default(),
            runs: Runs::default(),
            limits: NodeLimits::default(),
            heartbeat: decide::LEASE / 3,
            stream: Default::default(),
        }
    }
}

/// `node/pid/start-second`: unique per process, readable in `status.worker`.
pub fn identity(node: &str) -> String {
    format!(
        "{node}/{}/{}",
        std::process::id(),
        k8s_openapi::jiff::Timestamp::now().as_second()
    )
}

pub fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

pub fn key_of<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

/// Records a resource's phase and recomputes the `cleave_jobs{kind,phase}` gauge.
pub fn observe_phase<S: Store>(ctx: &Ctx<S>, kind: &'static str, key: &str, phase: Option<Phase>) {
    let Ok(mut m) = ctx.phases.lock() else { return };
    match phase {
        Some(p) => {
            m.insert(key.to_string(), (kind, p));
        }
        None => {
            m.remove(key);
        }
    }
    ctx.metrics.jobs.reset();
    for (k, p) in m.values() {
        ctx.metrics.jobs.with_label_values(&[*k, p.as_str()]).inc();
    }
}

fn observe_waiting<S: Store>(
    ctx: &Ctx<S>,
    kind: &'static str,
    key: &str,
    reason: Option<&'static str>,
) {
    let Ok(mut m) = ctx.waiting.lock() else {
        return;
    };
    match reason {
        Some(r) => m.insert(key.to_string(), (kind, r)),
        None => m.remove(key),
    };
    ctx.metrics.waiting.reset();
    for (k, r) in m.values() {
        ctx.metrics.waiting.with_label_values(&[*k, *r]).inc();
    }
}

/// Forgets a deleted job: its phase, wait and per-job series.
pub fn forget_job<S: Store>(ctx: &Ctx<S>, job: &AnticompactionJob) {
    let key = key_of(job);
    observe_phase(ctx, JOB, &key, None);
    observe_waiting(ctx, JOB, &key, None);
    ctx.metrics
        .forget(JOB, &job.namespace().unwrap_or_default(), &job.name_any());
}

/// Reconciles one AnticompactionJob.
#[instrument(skip_all, fields(kind = JOB, namespace = job.metadata.namespace.as_deref().unwrap_or_default(), name = job.metadata.name.as_deref().unwrap_or_default()))]
pub async fn reconcile_job<S: Store>(
    job: Arc<AnticompactionJob>,
    ctx: Arc<Ctx<S>>,
) -> Result<Action, OperatorError> {
    let timer = ctx
        .metrics
        .reconcile_duration
        .with_label_values(&[JOB])
        .start_timer();
    let key = key_of(&*job);
    let next = if ctx.runs.is_running(&key) {
        // Our own run's status writes come back as watch events: nothing to decide.
        Next::Wait(Duration::from_secs(60))
    } else {
        match decide::check_node_label(job.labels(), &job.spec) {
            Err((reason, message)) if !decide::is_finished(job.status.as_ref()) => {
                Next::Fail { reason, message }
            }
            _ => decide::decide(
                &job.spec,
                job.status.as_ref(),
                &ctx.node,
                &ctx.identity,
                now(),
            ),
        }
    };
    if next != Next::Ignore {
        observe_phase(&ctx, JOB, &key, Some(status::phase(job.status.as_ref())));
    }
    let result = apply(&job, &ctx, &key, next).await;
    timer.observe_duration();
    if let Err(e) = &result {
        ctx.metrics
            .reconcile_errors
            .with_label_values(&[JOB, e.label()])
            .inc();
    }
    result
}

async fn apply<S: Store>(
    job: &Arc<AnticompactionJob>,
    ctx: &Arc<Ctx<S>>,
    key: &str,
    next: Next,
) -> Result<Action, OperatorError> {
    match next {
        Next::Ignore => Ok(Action::await_change()),
        Next::Wait(d) => Ok(Action::requeue(d)),
        Next::Finished(ttl) => Ok(ttl.map_or_else(Action::await_change, Action::requeue)),
        Next::Delete => {
            info!("ttlSecondsAfterFinished passed: deleting the job");
            ctx.store.delete(job).await?;
            forget_job(ctx, job);
            Ok(Action::await_change())
        }
        Next::Fail { reason, message } => {
            let t = status::next(
                &job.status.clone().unwrap_or_default(),
                Event::Rejected {
                    reason: &reason,
                    message: &message,
                },
                job.metadata.generation,
                now(),
            );
            warn!(%reason, detail = %message, "job rejected");
            ctx.store.patch_status(job, &t.status, None).await?;
            record(ctx, &**job, key, &t.status, t.note.as_ref()).await;
            Ok(Action::await_change())
        }
        Next::Run => start(job, ctx, key).await,
    }
}

/// Writes what a transition produced to the metrics and publishes its Event.
pub(super) async fn record<S: Store, K: Resource<DynamicType = ()> + Sync>(
    ctx: &Ctx<S>,
    obj: &K,
    key: &str,
    st: &JobStatus,
    note: Option<&Note>,
) {
    let kind = kind_of::<K>();
    observe_phase(ctx, kind, key, st.phase);
    if st.phase == Some(Phase::Failed) {
        let reason = st.reason.as_deref().unwrap_or("Unknown");
        ctx.metrics
            .failures
            .with_label_values(&[kind, reason])
            .inc();
    }
    if let Some(n) = note {
        ctx.store.event(obj, n).await;
    }
}

/// The kind's name as the metrics' `kind` label.
pub fn kind_of<K: Resource<DynamicType = ()>>() -> &'static str {
    if K::kind(&()) == STREAM {
        STREAM
    } else {
        JOB
    }
}

/// Takes the lease (or says why the job waits) and spawns the run.
async fn start<S: Store>(
    job: &Arc<AnticompactionJob>,
    ctx: &Arc<Ctx<S>>,
    key: &str,
) -> Result<Action, OperatorError> {
    let tables = TableClaim::of(&job.spec, &ctx.data_dir);
    let (claimed, rv, cancel) = match claim(&**job, ctx, key, tables).await? {
        Claim::Taken { status, rv, cancel } => (*status, rv, cancel),
        Claim::Later(a) => return Ok(a),
    };
    let span = tracing::Span::current();
    let (job, ctx2, key2) = (job.clone(), ctx.clone(), key.to_string());
    tokio::spawn(
        async move {
            run(&job, &ctx2, &key2, claimed, rv, cancel).await;
            ctx2.runs.finish(&key2);
        }
        .instrument(span),
    );
    Ok(Action::await_change())
}

/// The outcome of [`claim`].
pub(super) enum Claim {
    /// This worker holds the lease: the claimed status, its resourceVersion, the run's
    /// cancel flag (registered in `ctx.runs`; the caller spawns the run).
    Taken {
        status: Box<JobStatus>,
        rv: Option<String>,
        cancel: Arc<AtomicBool>,
    },
    /// Not now: a limit holds it back (status says why) or another worker won the race.
    Later(Action),
}

/// Takes the lease of a job or stream, or says why it waits: the node's limits first
/// (`Runs::try_start`, one lock), then the status write conditional on the object's
/// resourceVersion, so of two sidecars with the same view exactly one gets past the 409.
pub(super) async fn claim<S: Store, K: Owned>(
    obj: &K,
    ctx: &Ctx<S>,
    key: &str,
    tables: TableClaim,
) -> Result<Claim, OperatorError> {
    let generation = obj.meta().generation;
    let current = obj.status_of().cloned().unwrap_or_default();
    let kind = kind_of::<K>();
    let cancel = match ctx
        .runs
        .try_start(key, tables, ctx.limits.max_concurrent_jobs)
    {
        Ok(c) => c,
        Err(blocked) => {
            let message = blocked.message();
            let ev = Event::Waiting {
                reason: blocked.reason(),
                message: &message,
            };
            let t = status::next(&current, ev, generation, now());
            observe_waiting(ctx, kind, key, Some(blocked.reason()));
            if t.note.is_some() {
                info!(reason = blocked.reason(), detail = %message, "{kind} waits");
                obj.write_status(&ctx.store, &t.status, None).await?;
                record(ctx, obj, key, &t.status, t.note.as_ref()).await;
            }
            return Ok(Claim::Later(Action::requeue(Duration::from_secs(3))));
        }
    };
    observe_waiting(ctx, kind, key, None);
    let ev = Event::Claimed {
        identity: &ctx.identity,
    };
    let t = status::next(&current, ev, generation, now());
    let expect = obj.meta().resource_version.clone();
    let rv = match obj
        .write_status(&ctx.store, &t.status, expect.as_deref())
        .await
    {
        Ok(rv) => rv,
        Err(e) => {
            ctx.runs.finish(key);
            if e.is_conflict() {
                info!("lease not taken: the {kind} changed since this view of it (409; another worker may have claimed it)");
                return Ok(Claim::Later(Action::requeue(Duration::from_secs(2))));
            }
            return Err(e);
        }
    };
    info!(identity = %ctx.identity, "lease taken");
    record(ctx, obj, key, &t.status, t.note.as_ref()).await;
    Ok(Claim::Taken {
        status: Box::new(t.status),
        rv,
        cancel,
    })
}

/// Status writes of one run, each conditional on the previous one's resourceVersion.
pub(super) struct Lease<'a, S: Store, K: Owned> {
    pub ctx: &'a Ctx<S>,
    pub job: &'a K,
    pub rv: Option<String>,
    pub lost: bool,
}

impl<S: Store, K: Owned> Lease<'_, S, K> {
    /// One status write. True when it landed, or when the lease is lost (nothing left to
    /// write); false after a transient failure (apiserver or etcd down, network), counted
    /// in `cleave_kube_errors_total{operation="status"}`.
    pub async fn write(&mut self, st: &JobStatus) -> bool {
        if self.lost {
            return true;
        }
        for _ in 0..3 {
            match self
                .job
                .write_status(&self.ctx.store, st, self.rv.as_deref())
                .await
            {
                Ok(rv) => {
                    self.rv = rv;
                    return true;
                }
                // Also the answer to a write that landed but whose response was lost (the
                // apiserver died after committing it): our own write moved the version.
                Err(e) if e.is_conflict() => match self.job.fetch(&self.ctx.store).await {
                    Ok(Some(fresh))
                        if fresh
                            .status_of()
                            .and_then(|s| s.worker.as_ref())
                            .is_some_and(|w| w.identity == self.ctx.identity) =>
                    {
                        // Someone else changed the object (a condition of another field
                        // manager, a label) but the lease is still ours.
                        self.rv = fresh.meta().resource_version.clone();
                    }
                    Ok(_) => {
                        warn!("lease lost: another worker holds the job; stopping after the current sstable");
                        self.lost = true;
                        return true;
                    }
                    Err(e) => {
                        self.failed();
                        warn!(error = %e, "re-reading the job after a conflict failed");
                        return false;
                    }
                },
                Err(e) => {
                    // Transient (apiserver restart, network): each status is a whole
                    // snapshot, so the next write carries what this one had.
                    self.failed();
                    warn!(error = %e, "status write failed; retrying with the next update");
                    return false;
                }
            }
        }
        false
    }

    fn failed(&self) {
        self.ctx
            .metrics
            .kube_errors
            .with_label_values(&[K::KIND, "status"])
            .inc();
    }

    /// The run's last write (its end), retried with backoff until it lands: there is no
    /// next update to carry it. Lost, it would leave the job Running under this lease, and
    /// the next reconcile (this sidecar's or, after the lease, another's) would run it
    /// again and split the parents whose results it lost a second time — in Stage mode
    /// their rows would be staged twice. The job stays in `Runs` meanwhile, so this
    /// sidecar does not start it again. On shutdown it gives up after a few attempts (the
    /// pod is going away; the lease then expires and the next sidecar resumes).
    pub async fn write_final(&mut self, st: &JobStatus) {
        let mut delay = Duration::from_millis(500);
        let mut attempts = 0u32;
        while !self.write(st).await {
            attempts += 1;
            if shutdown_requested(self.ctx) && attempts >= 5 {
                warn!(attempts, "shutting down: the job's final status was not written; the next sidecar resumes it after the lease");
                return;
            }
            warn!(attempts, retry_in = ?delay, "the job's final status is not written yet; retrying");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    }
}

/// One job's execution, on its own task: the split on a blocking thread, its progress and a
/// heartbeat written to status, the end recorded.
async fn run<S: Store>(
    job: &Arc<AnticompactionJob>,
    ctx: &Arc<Ctx<S>>,
    key: &str,
    claimed: JobStatus,
    rv: Option<String>,
    cancel: Arc<AtomicBool>,
) {
    let started = Instant::now();
    let generation = job.metadata.generation;
    let name = job.name_any();
    let ns = job.namespace().unwrap_or_default();
    let mut lease = Lease {
        ctx,
        job: &**job,
        rv,
        lost: false,
    };
    ctx.metrics
        .throttle
        .with_label_values(&[JOB, &ns, &name])
        .set(job.spec.max_bytes_per_second.unwrap_or(0) as f64);
    // The split runs on a blocking thread; its status snapshots come through a channel so
    // that the heartbeat and the per-sstable progress share one writer.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<JobStatus>();
    let spec = job.spec.clone();
    let data_dir = spec
        .data_directory
        .clone()
        .map(PathBuf::from)
        .unwrap_or_else(|| ctx.data_dir.clone());
    let metrics = ctx.metrics.clone();
    let limits = ctx.limits.clone();
    let mut worker_status = claimed.clone();
    let (n2, ns2, c2) = (name.clone(), ns.clone(), cancel.clone());
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
                .with_label_values(&[JOB, &ns2, &n2])
                .set(ratio);
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
        );
        (r, worker_status)
    });
    let mut task = std::pin::pin!(task);
    let mut beat = tokio::time::interval(ctx.heartbeat);
    beat.tick().await;
    let mut latest = claimed;
    let joined = loop {
        tokio::select! {
            r = &mut task => break r,
            Some(s) = rx.recv() => {
                latest = status::next(&latest, Event::Progress { identity: &ctx.identity, progress: &s.progress, results: &s.results }, generation, now()).status;
                lease.write(&latest).await;
                if lease.lost {
                    cancel.store(true, Ordering::Relaxed);
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
                    cancel.store(true, Ordering::Relaxed);
                }
            }
        }
    };
    let (result, final_status) = match joined {
        Ok(x) => x,
        Err(e) => {
            let message = format!("the job's worker thread failed: {e}");
            tracing::error!(%message);
            (
                Err(job::Failure {
                    reason: crate::reason::Reason::IoError.as_str().into(),
                    message,
                }),
                latest.clone(),
            )
        }
    };
    let ev_failed;
    let (ev, result_label) = match &result {
        Ok(Outcome::Complete) => (Event::Finished { planned: false }, "complete"),
        Ok(Outcome::Planned) => (Event::Finished { planned: true }, "planned"),
        Ok(Outcome::Cancelled) => (Event::Interrupted, "interrupted"),
        Err(f) => {
            ev_failed = f.clone();
            (
                Event::Failed {
                    reason: &ev_failed.reason,
                    message: &ev_failed.message,
                },
                "failed",
            )
        }
    };
    ctx.metrics
        .job_duration
        .with_label_values(&[JOB, result_label])
        .observe(started.elapsed().as_secs_f64());
    ctx.metrics
        .throttle
        .remove_label_values(&[JOB, &ns, &name])
        .ok();
    if lease.lost {
        return;
    }
    let t = status::next(&final_status, ev, generation, now());
    match &result {
        Err(f) => warn!(reason = %f.reason, detail = %f.message, "job failed"),
        Ok(o) => info!(outcome = ?o, elapsed = ?started.elapsed(), "job ended"),
    }
    lease.write_final(&t.status).await;
    record(ctx, &**job, key, &t.status, t.note.as_ref()).await;
}

fn count_sstable(
    metrics: &Metrics,
    result: &super::crd::SSTableResult,
    report: &crate::split::SplitReport,
) {
    for (what, n) in [
        ("shared", result.bytes_shared),
        ("copied", result.bytes_copied),
        ("reencoded", result.bytes_reencoded),
        ("read", report.read_bytes),
        ("written", report.write_bytes),
    ] {
        metrics.bytes.with_label_values(&[JOB, what]).inc_by(n);
    }
    metrics
        .partitions
        .with_label_values(&[JOB])
        .inc_by(result.partitions);
    metrics.sstables.with_label_values(&[JOB, "split"]).inc();
    for c in &report.children {
        if let Some(f) = &c.fallback {
            metrics.fallbacks.with_label_values(&[f.reason()]).inc();
        }
    }
}

/// Reconciles one RangeStream on its source node: decide (validation, the lease) →
/// apply (fail, wait, or claim and spawn the sender, `stream.rs`) → record.
#[instrument(skip_all, fields(kind = STREAM, namespace = s.metadata.namespace.as_deref().unwrap_or_default(), name = s.metadata.name.as_deref().unwrap_or_default()))]
pub async fn reconcile_stream<S: Store>(
    s: Arc<RangeStream>,
    ctx: Arc<Ctx<S>>,
) -> Result<Action, OperatorError> {
    let timer = ctx
        .metrics
        .reconcile_duration
        .with_label_values(&[STREAM])
        .start_timer();
    let key = key_of(&*s);
    let next = if ctx.runs.is_running(&key) {
        Next::Wait(Duration::from_secs(60))
    } else {
        let st = s.status.as_ref();
        decide::decide_stream(&s.spec, st, &ctx.node, &ctx.identity, now())
    };
    if next != Next::Ignore {
        observe_phase(&ctx, STREAM, &key, Some(status::phase(s.status.as_ref())));
    }
    let result = super::stream::apply(&s, &ctx, &key, next).await;
    timer.observe_duration();
    if let Err(e) = &result {
        let labels = [STREAM, e.label()];
        ctx.metrics
            .reconcile_errors
            .with_label_values(&labels)
            .inc();
    }
    result
}

/// Forgets a deleted stream: its phase and per-stream series.
pub fn forget_stream<S: Store>(ctx: &Ctx<S>, s: &RangeStream) {
    observe_phase(ctx, STREAM, &key_of(s), None);
    observe_waiting(ctx, STREAM, &key_of(s), None);
    let ns = s.namespace().unwrap_or_default();
    ctx.metrics.forget(STREAM, &ns, &s.name_any());
}

pub fn shutdown_requested<S: Store>(ctx: &Ctx<S>) -> bool {
    ctx.shutdown.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests;
