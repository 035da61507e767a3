//! The reconciler, shared by the Kubernetes controller and the local manifest directory:
//! decide (pure) → act → status. One error enum; its variant labels the error metrics.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::ResourceExt;

use super::crd::{AnticompactionJob, JobStatus, RangeStream, Worker};
use super::decide::{self, Next};
use super::job::{self, Outcome, Step};
use super::metrics::Metrics;

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Where jobs live and their status goes: the Kubernetes API or a directory.
pub trait Store: Send + Sync + 'static {
    fn patch_status(
        &self,
        job: &AnticompactionJob,
        status: &JobStatus,
    ) -> impl Future<Output = Result<(), OperatorError>> + Send;
    fn patch_stream_status(
        &self,
        s: &RangeStream,
        status: &JobStatus,
    ) -> impl Future<Output = Result<(), OperatorError>> + Send;
    fn delete(
        &self,
        job: &AnticompactionJob,
    ) -> impl Future<Output = Result<(), OperatorError>> + Send;
    fn event(
        &self,
        job: &AnticompactionJob,
        t: EventType,
        reason: &str,
        note: &str,
    ) -> impl Future<Output = ()> + Send;
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
    pub phases: std::sync::Mutex<std::collections::HashMap<String, (&'static str, String)>>,
}

fn observe_job<S: Store>(ctx: &Ctx<S>, job: &AnticompactionJob, st: &JobStatus) {
    let key = format!(
        "AnticompactionJob/{}/{}",
        job.namespace().unwrap_or_default(),
        job.name_any()
    );
    observe_phase(ctx, "AnticompactionJob", key, st.phase.clone());
}

/// Records a resource's phase and recomputes the `cleave_jobs{kind,phase}` gauge.
pub fn observe_phase<S: Store>(
    ctx: &Ctx<S>,
    kind: &'static str,
    key: String,
    phase: Option<String>,
) {
    let Ok(mut m) = ctx.phases.lock() else { return };
    match phase {
        Some(p) => {
            m.insert(key, (kind, p));
        }
        None => {
            m.remove(&key);
        }
    }
    ctx.metrics.jobs.reset();
    for (k, p) in m.values() {
        ctx.metrics.jobs.with_label_values(&[*k, p.as_str()]).inc();
    }
}

fn phase_of(s: Option<&JobStatus>) -> String {
    s.and_then(|s| s.phase.clone())
        .unwrap_or_else(|| decide::PHASE_PENDING.to_string())
}

/// Reconciles one AnticompactionJob.
pub async fn reconcile_job<S: Store>(
    job: Arc<AnticompactionJob>,
    ctx: Arc<Ctx<S>>,
) -> Result<Action, OperatorError> {
    let started = Instant::now();
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let next = decide::decide(
        &job.spec,
        job.status.as_ref(),
        &ctx.node,
        &ctx.identity,
        now,
    );
    let key = format!(
        "AnticompactionJob/{}/{}",
        job.namespace().unwrap_or_default(),
        job.name_any()
    );
    if next != Next::Ignore {
        observe_phase(
            &ctx,
            "AnticompactionJob",
            key.clone(),
            Some(phase_of(job.status.as_ref())),
        );
    }
    let deleting = next == Next::Delete;
    let result = act(&job, &ctx, next).await;
    if deleting {
        observe_phase(&ctx, "AnticompactionJob", key, None);
    }
    ctx.metrics
        .reconcile_duration
        .with_label_values(&["AnticompactionJob"])
        .observe(started.elapsed().as_secs_f64());
    if let Err(e) = &result {
        ctx.metrics
            .reconcile_errors
            .with_label_values(&["AnticompactionJob", e.label()])
            .inc();
    }
    result
}

async fn act<S: Store>(
    job: &Arc<AnticompactionJob>,
    ctx: &Arc<Ctx<S>>,
    next: Next,
) -> Result<Action, OperatorError> {
    let generation = job.metadata.generation;
    match next {
        Next::Ignore => Ok(Action::await_change()),
        Next::Wait(d) => Ok(Action::requeue(d)),
        Next::Finished(ttl) => Ok(ttl.map_or_else(Action::await_change, Action::requeue)),
        Next::Delete => {
            ctx.store.delete(job).await?;
            Ok(Action::await_change())
        }
        Next::Fail { reason, message } => {
            let mut st = job.status.clone().unwrap_or_default();
            fail(&mut st, &reason, &message, generation);
            ctx.store.patch_status(job, &st).await?;
            observe_job(ctx, job, &st);
            ctx.store
                .event(job, EventType::Warning, &reason, &message)
                .await;
            Ok(Action::await_change())
        }
        Next::Run => run(job, ctx).await,
    }
}

fn fail(st: &mut JobStatus, reason: &str, message: &str, generation: Option<i64>) {
    st.phase = Some(decide::PHASE_FAILED.into());
    st.reason = Some(reason.into());
    st.message = Some(message.into());
    st.observed_generation = generation;
    st.completion_time = Some(decide::now_rfc3339());
    st.worker = None;
    decide::set_condition(
        &mut st.conditions,
        "Running",
        false,
        reason,
        message,
        generation,
    );
    decide::set_condition(
        &mut st.conditions,
        "Failed",
        true,
        reason,
        message,
        generation,
    );
}

async fn run<S: Store>(
    job: &Arc<AnticompactionJob>,
    ctx: &Arc<Ctx<S>>,
) -> Result<Action, OperatorError> {
    let generation = job.metadata.generation;
    let mut st = job.status.clone().unwrap_or_default();
    let resumed = st.phase.as_deref() == Some(decide::PHASE_RUNNING);
    st.phase = Some(decide::PHASE_RUNNING.into());
    st.observed_generation = generation;
    st.start_time.get_or_insert_with(decide::now_rfc3339);
    st.worker = Some(Worker {
        identity: ctx.identity.clone(),
        heartbeat_time: decide::now_rfc3339(),
    });
    let msg = if resumed {
        "resumed after the previous worker stopped"
    } else {
        "started"
    };
    decide::set_condition(
        &mut st.conditions,
        "Running",
        true,
        if resumed { "Resumed" } else { "Started" },
        msg,
        generation,
    );
    ctx.store.patch_status(job, &st).await?;
    observe_job(ctx, job, &st);
    ctx.store
        .event(
            job,
            EventType::Normal,
            if resumed { "Resumed" } else { "Started" },
            &format!("anticompaction on {} {msg}", ctx.node),
        )
        .await;

    // The split runs on a blocking thread; status goes out through a channel so that the
    // heartbeat and the per-sstable progress share one writer.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<JobStatus>();
    let spec = job.spec.clone();
    let name = job.name_any();
    let ns = job.namespace().unwrap_or_default();
    let data_dir = spec
        .data_directory
        .clone()
        .map(PathBuf::from)
        .unwrap_or_else(|| ctx.data_dir.clone());
    let cancel = ctx.shutdown.clone();
    let metrics = ctx.metrics.clone();
    let mut worker_status = st.clone();
    let task = tokio::task::spawn_blocking(move || {
        let mut on_step = |step: Step<'_>, s: &JobStatus| {
            match step {
                Step::Planned { .. } => {}
                Step::Done { result, report } => {
                    for (what, n) in [
                        ("shared", result.bytes_shared),
                        ("copied", result.bytes_copied),
                        ("reencoded", result.bytes_reencoded),
                        ("read", report.read_bytes),
                        ("written", report.write_bytes),
                    ] {
                        metrics
                            .bytes
                            .with_label_values(&["AnticompactionJob", what])
                            .inc_by(n);
                    }
                    metrics
                        .partitions
                        .with_label_values(&["AnticompactionJob"])
                        .inc_by(result.partitions);
                    metrics
                        .sstables
                        .with_label_values(&["AnticompactionJob", "split"])
                        .inc();
                    for c in &report.children {
                        if let Some(f) = &c.fallback {
                            metrics.fallbacks.with_label_values(&[f.reason()]).inc();
                        }
                    }
                }
            }
            let ratio = if s.progress.sstables_total == 0 {
                1.0
            } else {
                s.progress.sstables_done as f64 / s.progress.sstables_total as f64
            };
            metrics
                .progress
                .with_label_values(&["AnticompactionJob", &ns, &name])
                .set(ratio);
            let _ = tx.send(s.clone());
        };
        let r = job::run(
            &spec,
            &name,
            &data_dir,
            &mut worker_status,
            &cancel,
            &mut on_step,
        );
        (r, worker_status)
    });
    let mut task = std::pin::pin!(task);
    let mut beat = tokio::time::interval(Duration::from_secs(10));
    let mut latest = st.clone();
    let (result, final_status) = loop {
        tokio::select! {
            r = &mut task => break r.map_err(|e| OperatorError::Task(e.to_string()))?,
            Some(s) = rx.recv() => {
                latest = s;
                latest.worker = Some(Worker { identity: ctx.identity.clone(), heartbeat_time: decide::now_rfc3339() });
                ctx.store.patch_status(job, &latest).await?;
                // Crash injection for restart tests: die like a SIGKILL once the first
                // sstable's result is in status.
                if latest.progress.sstables_done >= 1 && std::env::var("CLEAVE_CRASH_AT").is_ok_and(|p| p == "job-after-first") {
                    eprintln!("cleave: CLEAVE_CRASH_AT=job-after-first: aborting");
                    std::process::abort();
                }
            }
            _ = beat.tick() => {
                latest.worker = Some(Worker { identity: ctx.identity.clone(), heartbeat_time: decide::now_rfc3339() });
                ctx.store.patch_status(job, &latest).await?;
            }
        }
    };
    let mut st = final_status;
    match result {
        Ok(Outcome::Complete) | Ok(Outcome::Planned) => {
            let planned = matches!(result, Ok(Outcome::Planned));
            let (phase, cond, reason) = if planned {
                (decide::PHASE_PLANNED, "Planned", "DryRun")
            } else {
                (decide::PHASE_COMPLETE, "Complete", "Completed")
            };
            let message = format!(
                "{} sstables, {} partitions: {} bytes shared, {} copied, {} re-encoded",
                st.progress.sstables_done,
                st.progress.partitions,
                st.progress.bytes_shared,
                st.progress.bytes_copied,
                st.progress.bytes_reencoded
            );
            st.phase = Some(phase.into());
            st.reason = Some(reason.into());
            st.message = Some(message.clone());
            st.completion_time = Some(decide::now_rfc3339());
            st.worker = None;
            decide::set_condition(
                &mut st.conditions,
                "Running",
                false,
                reason,
                &message,
                generation,
            );
            decide::set_condition(&mut st.conditions, cond, true, reason, &message, generation);
            ctx.store.patch_status(job, &st).await?;
            observe_job(ctx, job, &st);
            ctx.store
                .event(job, EventType::Normal, reason, &message)
                .await;
            Ok(Action::await_change())
        }
        Ok(Outcome::Cancelled) => {
            // Checkpoint: results so far are in status; the lease is released so that the
            // next worker resumes at once.
            st.worker = None;
            decide::set_condition(
                &mut st.conditions,
                "Running",
                true,
                "Interrupted",
                "the worker stopped between two sstables; the next one resumes",
                generation,
            );
            ctx.store.patch_status(job, &st).await?;
            ctx.store
                .event(
                    job,
                    EventType::Normal,
                    "Interrupted",
                    "stopped between two sstables for shutdown",
                )
                .await;
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        Err(f) => {
            fail(&mut st, &f.reason, &f.message, generation);
            ctx.store.patch_status(job, &st).await?;
            observe_job(ctx, job, &st);
            ctx.store
                .event(job, EventType::Warning, &f.reason, &f.message)
                .await;
            Ok(Action::await_change())
        }
    }
}

/// RangeStream: validated and accepted here; sending comes with the streaming engine.
pub async fn reconcile_stream<S: Store>(
    s: Arc<RangeStream>,
    ctx: Arc<Ctx<S>>,
) -> Result<Action, OperatorError> {
    if s.spec.source_node != ctx.node {
        return Ok(Action::await_change());
    }
    let generation = s.metadata.generation;
    let mut st = s.status.clone().unwrap_or_default();
    if st.observed_generation == generation && st.phase.is_some() {
        return Ok(Action::await_change());
    }
    let problem = validate_stream(&s.spec);
    st.observed_generation = generation;
    match problem {
        Some((reason, message)) => fail(&mut st, &reason, &message, generation),
        None => {
            st.phase = Some(decide::PHASE_PENDING.into());
            st.reason = Some("Accepted".into());
            st.message =
                Some("valid; waiting for the streaming engine of this sidecar version".into());
            decide::set_condition(
                &mut st.conditions,
                "Accepted",
                true,
                "Valid",
                "spec validated",
                generation,
            );
        }
    }
    ctx.store.patch_stream_status(&s, &st).await?;
    observe_phase(
        &ctx,
        "RangeStream",
        format!(
            "RangeStream/{}/{}",
            s.namespace().unwrap_or_default(),
            s.name_any()
        ),
        st.phase.clone(),
    );
    Ok(Action::await_change())
}

fn validate_stream(spec: &super::crd::RangeStreamSpec) -> Option<(String, String)> {
    if spec.source_node.is_empty() || spec.destination.node_name.is_empty() {
        return Some((
            "InvalidSpec".into(),
            "spec.sourceNode and spec.destination.nodeName are required".into(),
        ));
    }
    if spec.source_node == spec.destination.node_name {
        return Some((
            "InvalidSpec".into(),
            "spec.destination.nodeName is the source node".into(),
        ));
    }
    if spec.destination.endpoint.is_none() && spec.destination.service.is_none() {
        return Some((
            "InvalidSpec".into(),
            "spec.destination needs an endpoint or a service".into(),
        ));
    }
    if let Some(e) = &spec.destination.endpoint {
        if e.rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Some((
                "InvalidSpec".into(),
                format!("spec.destination.endpoint {e:?} is not host:port"),
            ));
        }
    }
    if spec.ranges.is_empty() {
        return Some(("InvalidSpec".into(), "spec.ranges is empty".into()));
    }
    if spec.keyspace.is_empty() {
        return Some(("InvalidSpec".into(), "spec.keyspace is empty".into()));
    }
    for (i, r) in spec.ranges.iter().enumerate() {
        // The partitioner is the sstables'; a token must parse for at least one.
        let ok = [
            crate::sstable::Partitioner::Murmur3,
            crate::sstable::Partitioner::Random,
            crate::sstable::Partitioner::ByteOrdered,
        ]
        .iter()
        .any(|p| p.parse_token(&r.start).is_ok() && p.parse_token(&r.end).is_ok());
        if !ok {
            return Some((
                "InvalidRange".into(),
                format!("spec.ranges[{i}]: ({}, {}] are not tokens", r.start, r.end),
            ));
        }
    }
    None
}

pub fn phase_label(s: Option<&JobStatus>) -> String {
    phase_of(s)
}

pub fn shutdown_requested<S: Store>(ctx: &Ctx<S>) -> bool {
    ctx.shutdown.load(Ordering::Relaxed)
}
