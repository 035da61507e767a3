//! The Kubernetes controllers: kube-runtime `Controller`s for both kinds. AnticompactionJobs
//! are watched with the server-side label selector `cleave.dev/node=<node>` (the watch does
//! not grow with the cluster) and filtered on `spec.nodeName` again here; the job reconciler
//! is wrapped in the finalizer helper (opt-out with the annotation
//! `cleave.dev/finalizer: disabled`); status by server-side apply; Events; an error policy
//! with per-object exponential backoff; graceful shutdown that checkpoints running jobs.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event as KEvent, EventType as KEventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::{error, info, instrument, warn};

use super::crd::{AnticompactionJob, JobStatus, RangeStream};
use super::decide::NODE_LABEL;
use super::reconcile::{self, Ctx, OperatorError, Store, JOB, STREAM};
use super::status::{EventType, Note};

pub const FINALIZER: &str = "cleave.dev/cleanup";
pub const FINALIZER_OPT_OUT: &str = "cleave.dev/finalizer";

pub struct KubeStore {
    pub client: Client,
    pub recorder: Recorder,
    pub field_manager: String,
    /// Consecutive failures per object, for the error policy's backoff.
    pub failures: Mutex<HashMap<String, u32>>,
}

impl KubeStore {
    pub fn new(client: Client, node: &str) -> KubeStore {
        KubeStore {
            recorder: Recorder::new(client.clone(), reporter(node)),
            client,
            field_manager: format!("cleave-{node}"),
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn jobs(&self, job: &AnticompactionJob) -> Api<AnticompactionJob> {
        Api::namespaced(self.client.clone(), &job.namespace().unwrap_or_default())
    }

    fn streams(&self, s: &RangeStream) -> Api<RangeStream> {
        Api::namespaced(self.client.clone(), &s.namespace().unwrap_or_default())
    }
}

impl Store for KubeStore {
    async fn patch_status(
        &self,
        job: &AnticompactionJob,
        status: &JobStatus,
        expect: Option<&str>,
    ) -> Result<Option<String>, OperatorError> {
        // A resourceVersion in an apply body is a precondition: the apiserver answers 409
        // unless the object is still at that version.
        let mut body = serde_json::json!({
            "apiVersion": "cleave.dev/v1alpha1",
            "kind": "AnticompactionJob",
            "status": status,
        });
        if let Some(rv) = expect {
            body["metadata"] = serde_json::json!({ "resourceVersion": rv });
        }
        let after = self
            .jobs(job)
            .patch_status(
                &job.name_any(),
                &PatchParams::apply(&self.field_manager).force(),
                &Patch::Apply(&body),
            )
            .await?;
        Ok(after.resource_version())
    }

    async fn get(
        &self,
        job: &AnticompactionJob,
    ) -> Result<Option<AnticompactionJob>, OperatorError> {
        Ok(self.jobs(job).get_opt(&job.name_any()).await?)
    }

    async fn patch_stream_status(
        &self,
        s: &RangeStream,
        status: &JobStatus,
        expect: Option<&str>,
    ) -> Result<Option<String>, OperatorError> {
        let mut body = serde_json::json!({"apiVersion": "cleave.dev/v1alpha1", "kind": "RangeStream", "status": status});
        if let Some(rv) = expect {
            body["metadata"] = serde_json::json!({ "resourceVersion": rv });
        }
        let after = self
            .streams(s)
            .patch_status(
                &s.name_any(),
                &PatchParams::apply(&self.field_manager).force(),
                &Patch::Apply(&body),
            )
            .await?;
        Ok(after.resource_version())
    }

    async fn get_stream(&self, s: &RangeStream) -> Result<Option<RangeStream>, OperatorError> {
        Ok(self.streams(s).get_opt(&s.name_any()).await?)
    }

    async fn delete(&self, job: &AnticompactionJob) -> Result<(), OperatorError> {
        self.jobs(job)
            .delete(&job.name_any(), &DeleteParams::background())
            .await?;
        Ok(())
    }

    async fn event<K>(&self, obj: &K, note: &Note)
    where
        K: Resource<DynamicType = ()> + Sync,
    {
        let ev = KEvent {
            type_: match note.type_ {
                EventType::Normal => KEventType::Normal,
                EventType::Warning => KEventType::Warning,
            },
            reason: note.reason.chars().take(128).collect(),
            note: Some(note.message.chars().take(1024).collect()),
            action: K::kind(&()).to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            warn!(reason = %note.reason, error = %e, "publishing an Event failed (RBAC: create on events.events.k8s.io)");
        }
    }
}

fn opted_out<K: Resource>(job: &K) -> bool {
    job.annotations()
        .get(FINALIZER_OPT_OUT)
        .is_some_and(|v| v == "disabled")
}

/// Removes `finalizer` from the job without touching anyone else's: a JSON patch that
/// tests the entry at its index before removing it, so a concurrent change to the list
/// (another controller adding or removing its own) makes the apiserver refuse (422) instead
/// of this write dropping theirs. On a refusal, re-read and try again.
pub async fn remove_finalizer<K>(
    api: &Api<K>,
    job: &K,
    finalizer: &str,
) -> Result<(), OperatorError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = job.name_any();
    let mut current = job.finalizers().to_vec();
    for _ in 0..5 {
        let Some(i) = current.iter().position(|f| f == finalizer) else {
            return Ok(());
        };
        let patch: Patch<()> = Patch::Json(
            serde_json::from_value(serde_json::json!([
                {"op": "test", "path": format!("/metadata/finalizers/{i}"), "value": finalizer},
                {"op": "remove", "path": format!("/metadata/finalizers/{i}")},
            ]))
            .map_err(|e| OperatorError::Finalizer(e.to_string()))?,
        );
        match api.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => {
                info!(finalizer, "finalizer list changed under us; re-reading");
                match api.get_opt(&name).await? {
                    Some(j) => current = j.finalizers().to_vec(),
                    None => return Ok(()),
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Err(OperatorError::Finalizer(format!(
        "{finalizer} not removed from {name}: the finalizer list kept changing"
    )))
}

async fn reconcile_job(
    job: Arc<AnticompactionJob>,
    ctx: Arc<Ctx<KubeStore>>,
) -> Result<Action, OperatorError> {
    // The safety net behind the label selector: other nodes' jobs get nothing, not even a
    // finalizer (a node that is gone must not wedge deletion).
    if job.spec.node_name != ctx.node {
        return Ok(Action::await_change());
    }
    let ns = job.namespace().unwrap_or_default();
    let api: Api<AnticompactionJob> = Api::namespaced(ctx.store.client.clone(), &ns);
    let key = format!("{ns}/{}", job.name_any());
    let result = if opted_out(&*job) {
        if job.meta().deletion_timestamp.is_some() {
            // An earlier version of the job may have had our finalizer.
            remove_finalizer(&api, &job, FINALIZER).await?;
            reconcile::forget_job(&ctx, &job);
            Ok(Action::await_change())
        } else {
            reconcile::reconcile_job(job.clone(), ctx.clone()).await
        }
    } else {
        let c = ctx.clone();
        finalizer(&api, FINALIZER, job.clone(), |event| async move {
            match event {
                FinalizerEvent::Apply(j) => reconcile::reconcile_job(j, c).await,
                FinalizerEvent::Cleanup(j) => cleanup(j, c).await,
            }
        })
        .await
        .map_err(|e| OperatorError::Finalizer(e.to_string()))
    };
    if result.is_ok() {
        if let Ok(mut f) = ctx.store.failures.lock() {
            f.remove(&key);
        }
    }
    result
}

/// Deletion: stop the job if it runs here, then remove its unpublished leftovers (staging
/// directories, an interrupted replace) on this node. Children already published stay:
/// they are Cassandra's data.
#[instrument(skip_all, fields(kind = JOB, namespace = job.metadata.namespace.as_deref().unwrap_or_default(), name = job.metadata.name.as_deref().unwrap_or_default()))]
async fn cleanup(
    job: Arc<AnticompactionJob>,
    ctx: Arc<Ctx<KubeStore>>,
) -> Result<Action, OperatorError> {
    let key = reconcile::key_of(&*job);
    if ctx.runs.cancel(&key) {
        info!("job deleted while running: stopping it after the current sstable");
        if !ctx.runs.wait_stopped(&key, Duration::from_secs(300)).await {
            return Err(OperatorError::Task(
                "the running job did not stop within 300 s".into(),
            ));
        }
    }
    let data_dir = job
        .spec
        .data_directory
        .clone()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| ctx.data_dir.clone());
    let name = job.name_any();
    let spec = job.spec.clone();
    let r = tokio::task::spawn_blocking(move || {
        let dirs = super::job::table_dirs(&data_dir, &spec).unwrap_or_default();
        super::job::recover_leftovers(&dirs, &name)
    })
    .await
    .map_err(|e| OperatorError::Task(e.to_string()))?;
    let message = match r {
        Ok(()) => "leftovers of this job removed".to_string(),
        Err(f) => format!("cleanup incomplete: {}", f.message),
    };
    info!(detail = %message, "cleanup");
    ctx.store
        .event(
            &*job,
            &Note {
                type_: EventType::Normal,
                reason: "Cleanup".into(),
                message,
            },
        )
        .await;
    reconcile::forget_job(&ctx, &job);
    Ok(Action::await_change())
}

fn error_policy(
    job: Arc<AnticompactionJob>,
    err: &OperatorError,
    ctx: Arc<Ctx<KubeStore>>,
) -> Action {
    let key = format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any());
    let n = ctx
        .store
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(key).or_insert(0);
            *n += 1;
            *n
        })
        .unwrap_or(1);
    let backoff = Duration::from_secs((5u64 << n.min(6)).min(300));
    warn!(
        kind = JOB,
        namespace = job.namespace().unwrap_or_default(),
        name = job.name_any(),
        error = %err,
        label = err.label(),
        retry_in = ?backoff,
        "reconcile failed"
    );
    Action::requeue(backoff)
}

/// RangeStreams: only the source node's sidecar acts, so only it adds the finalizer
/// (a destination or a third node never wedges a deletion).
async fn reconcile_stream(
    s: Arc<RangeStream>,
    ctx: Arc<Ctx<KubeStore>>,
) -> Result<Action, OperatorError> {
    if s.spec.source_node != ctx.node {
        return Ok(Action::await_change());
    }
    let api: Api<RangeStream> =
        Api::namespaced(ctx.store.client.clone(), &s.namespace().unwrap_or_default());
    let key = format!(
        "{STREAM}/{}/{}",
        s.namespace().unwrap_or_default(),
        s.name_any()
    );
    let result = if opted_out(&*s) {
        if s.meta().deletion_timestamp.is_some() {
            remove_finalizer(&api, &*s, FINALIZER).await?;
            reconcile::forget_stream(&ctx, &s);
            Ok(Action::await_change())
        } else {
            reconcile::reconcile_stream(s.clone(), ctx.clone()).await
        }
    } else {
        let c = ctx.clone();
        finalizer(&api, FINALIZER, s.clone(), |event| async move {
            match event {
                FinalizerEvent::Apply(x) => reconcile::reconcile_stream(x, c).await,
                FinalizerEvent::Cleanup(x) => cleanup_stream(x, c).await,
            }
        })
        .await
        .map_err(|e| OperatorError::Finalizer(e.to_string()))
    };
    if result.is_ok() {
        if let Ok(mut f) = ctx.store.failures.lock() {
            f.remove(&key);
        }
    }
    result
}

/// Deletion of a RangeStream: stop its send (the run itself asks the receiver to drop the
/// in-flight transfer's staging); when no run is here (a previous worker died), tell the
/// receiver about the transfer status names. Published children stay on the destination.
#[instrument(skip_all, fields(kind = STREAM, namespace = s.metadata.namespace.as_deref().unwrap_or_default(), name = s.metadata.name.as_deref().unwrap_or_default()))]
async fn cleanup_stream(
    s: Arc<RangeStream>,
    ctx: Arc<Ctx<KubeStore>>,
) -> Result<Action, OperatorError> {
    let key = reconcile::key_of(&*s);
    let message = if ctx.runs.cancel(&key) {
        info!("stream deleted while sending: stopping it");
        if !ctx.runs.wait_stopped(&key, Duration::from_secs(120)).await {
            return Err(OperatorError::Task(
                "the running stream did not stop within 120 s".into(),
            ));
        }
        "the send was stopped and the receiver asked to drop its staging".to_string()
    } else {
        let in_flight = s
            .status
            .as_ref()
            .and_then(|st| st.stream.as_ref())
            .and_then(|x| x.current_transfer.clone());
        let ns = s.namespace().unwrap_or_default();
        match (in_flight, ctx.stream.endpoint(&s.spec.destination, &ns)) {
            (Some(id), Ok(ep)) => match super::stream::cancel_on_receiver(&ep, &id).await {
                Ok(()) => format!("the receiver dropped the staging of {id}"),
                Err(e) => format!("cleanup incomplete: the receiver's staging of {id} stays: {e}"),
            },
            _ => "nothing in flight".to_string(),
        }
    };
    info!(detail = %message, "cleanup");
    let note = Note {
        type_: EventType::Normal,
        reason: "Cleanup".into(),
        message,
    };
    ctx.store.event(&*s, &note).await;
    reconcile::forget_stream(&ctx, &s);
    Ok(Action::await_change())
}

fn stream_error_policy(
    s: Arc<RangeStream>,
    err: &OperatorError,
    ctx: Arc<Ctx<KubeStore>>,
) -> Action {
    let key = format!(
        "{STREAM}/{}/{}",
        s.namespace().unwrap_or_default(),
        s.name_any()
    );
    let n = ctx
        .store
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(key).or_insert(0);
            *n += 1;
            *n
        })
        .unwrap_or(1);
    let backoff = Duration::from_secs((5u64 << n.min(6)).min(300));
    warn!(kind = STREAM, namespace = s.namespace().unwrap_or_default(), name = s.name_any(), error = %err, label = err.label(), retry_in = ?backoff, "reconcile failed");
    Action::requeue(backoff)
}

/// What an admin should do about a watch error: the apiserver's code, said in words.
pub fn explain_watch_error(e: &watcher::Error) -> String {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some((s.code, s.message.clone())),
        watcher::Error::WatchError(s) => Some((s.code, s.message.clone())),
        _ => None,
    };
    match status {
        Some((403, m)) => format!("forbidden: the sidecar's ServiceAccount needs get, list, watch (and patch on the status subresource) on anticompactionjobs.cleave.dev and rangestreams.cleave.dev; see the chart's ClusterRole. apiserver: {m}"),
        Some((404, m)) => format!("not found: the cleave.dev CRDs are not installed (kubectl apply --server-side -f crds/). apiserver: {m}"),
        Some((401, m)) => format!("unauthorized: the sidecar's credentials were rejected (token expired or wrong kubeconfig). apiserver: {m}"),
        _ => format!("{e}; the watch retries with backoff"),
    }
}

fn log_controller_error<K: Resource>(
    metrics: &super::metrics::Metrics,
    kind: &'static str,
    r: Result<
        (kube::runtime::reflector::ObjectRef<K>, Action),
        controller::Error<OperatorError, watcher::Error>,
    >,
) {
    match r {
        Ok(_) => {}
        Err(controller::Error::QueueError(e)) => {
            metrics
                .kube_errors
                .with_label_values(&[kind, "watch"])
                .inc();
            error!(kind, error = %e, "watching {kind}s failed: {}", explain_watch_error(&e));
        }
        // The error policy already logged it.
        Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(controller::Error::ObjectNotFound(o)) => {
            tracing::debug!(kind, object = %o, "reconcile of an object no longer in the cache");
        }
        Err(e) => warn!(kind, error = %e, "controller error"),
    }
}

/// Whether a controller's reflector store has seen its first complete list. Polled with a
/// timeout in a loop: kube-runtime's readiness cell wakes only the last of several waiters
/// (the controller's own runner waits on it too), a later poll still sees it ready.
async fn store_ready<K>(s: &kube::runtime::reflector::Store<K>) -> bool
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        match tokio::time::timeout(Duration::from_millis(250), s.wait_until_ready()).await {
            Ok(r) => return r.is_ok(),
            Err(_) => continue,
        }
    }
}

/// Runs both controllers until `stop` completes; then running jobs stop after their
/// current sstable, checkpoint their status and release their leases before this returns.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    ctx: Arc<Ctx<KubeStore>>,
    concurrency: u16,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let jobs: Api<AnticompactionJob> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let streams: Api<RangeStream> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (tx, rx) = tokio::sync::watch::channel(false);
    let c = ctx.clone();
    tokio::spawn(async move {
        stop.await;
        info!("shutting down: running jobs stop after their current sstable");
        c.shutdown.store(true, Ordering::Relaxed);
        c.runs.cancel_all();
        let _ = tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let cfg = controller::Config::default().concurrency(concurrency);
    let selector = format!("{NODE_LABEL}={}", ctx.node);
    let c1 = Controller::new(jobs, watcher::Config::default().labels(&selector))
        .with_config(cfg.clone());
    // The RangeStream watch is not narrowed: a stream is acted on by its source node only
    // (spec.sourceNode, checked in reconcile_stream); the destination learns of it from
    // the transfers its receiver is sent, so it needs no watch of its own.
    let c2 = Controller::new(streams, watcher::Config::default()).with_config(cfg);
    // Ready once both watches have listed successfully (reflector stores are ready).
    let (s1, s2) = (c1.store(), c2.store());
    let metrics = ctx.metrics.clone();
    tokio::spawn(async move {
        if store_ready(&s1).await && store_ready(&s2).await {
            info!("both CRDs listed: ready");
            metrics.ready.store(true, Ordering::Relaxed);
        }
    });
    let metrics = ctx.metrics.clone();
    let r1 = c1
        .graceful_shutdown_on(stopped(rx.clone()))
        .run(reconcile_job, error_policy, ctx.clone())
        .for_each(|r| {
            log_controller_error(&metrics, JOB, r);
            futures::future::ready(())
        });
    let r2 = c2
        .graceful_shutdown_on(stopped(rx))
        .run(reconcile_stream, stream_error_policy, ctx.clone())
        .for_each(|r| {
            log_controller_error(&metrics, STREAM, r);
            futures::future::ready(())
        });
    futures::join!(r1, r2);
    ctx.metrics.ready.store(false, Ordering::Relaxed);
    if !ctx.runs.wait_idle(Duration::from_secs(3600)).await {
        warn!("jobs still running after an hour of shutdown; exiting");
    }
    Ok(())
}

pub fn reporter(node: &str) -> Reporter {
    Reporter {
        controller: "cleave.dev/cleave".into(),
        instance: Some(node.into()),
    }
}
