//! The Kubernetes side of the core: `KubeStore` (status by server-side apply with a
//! resourceVersion precondition, Events), one kube-runtime `Controller` per kind, every
//! resource of the kind watched and filtered on its acting node here; the finalizer
//! wrapper (opt-out with the annotation `cleave.dev/finalizer: disabled`) and the error
//! policy with per-object exponential backoff, written once for every kind; a shutdown
//! that ends within its budget whether or not the apiserver answers.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event as KEvent, EventType as KEventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::{error, info, warn};

use super::core::{self, Ctx, Kind, OperatorError, Store};
use super::crd::{AnticompactionJob, CleanupJob, JobStatus, RangeStream};
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

    fn api<K: Kind>(&self, obj: &K) -> Api<K> {
        Api::namespaced(self.client.clone(), &obj.namespace().unwrap_or_default())
    }
}

impl Store for KubeStore {
    async fn patch_status<K: Kind>(
        &self,
        obj: &K,
        status: &JobStatus,
        expect: Option<&str>,
    ) -> Result<Option<String>, OperatorError> {
        // A resourceVersion in an apply body is a precondition: the apiserver answers 409
        // unless the object is still at that version.
        let mut body = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        });
        if let Some(rv) = expect {
            body["metadata"] = serde_json::json!({ "resourceVersion": rv });
        }
        let after = self
            .api(obj)
            .patch_status(
                &obj.name_any(),
                &PatchParams::apply(&self.field_manager).force(),
                &Patch::Apply(&body),
            )
            .await?;
        Ok(after.resource_version())
    }

    async fn get<K: Kind>(&self, obj: &K) -> Result<Option<K>, OperatorError> {
        Ok(self.api(obj).get_opt(&obj.name_any()).await?)
    }

    async fn delete<K: Kind>(&self, obj: &K) -> Result<(), OperatorError> {
        self.api(obj)
            .delete(&obj.name_any(), &DeleteParams::background())
            .await?;
        Ok(())
    }

    async fn event<K: Kind>(&self, obj: &K, note: &Note) {
        publish_event(
            &self.recorder,
            &obj.object_ref(&()),
            note.type_,
            note.reason.as_str(),
            K::KIND,
            &note.message,
        )
        .await;
    }
}

/// Publishes an events.k8s.io Event on `obj`. A failure is logged, not returned: an Event
/// is a notice beside the status, which says the same and is what controllers act on.
pub async fn publish_event(
    recorder: &Recorder,
    obj: &ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    let ev = KEvent {
        type_: match type_ {
            EventType::Normal => KEventType::Normal,
            EventType::Warning => KEventType::Warning,
        },
        reason: reason.to_string(),
        // The apiserver refuses an events.k8s.io/v1 note over 1,024 bytes (NoteLengthLimit);
        // this counts chars, so a note of non-ASCII text can still be refused (logged below).
        note: Some(note.chars().take(1024).collect()),
        action: action.to_string(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, obj).await {
        warn!(reason = %reason, error = %e, "publishing an Event failed (RBAC: create on events.events.k8s.io)");
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
            .map_err(|e| OperatorError::Store(format!("finalizer patch: {e}")))?,
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
    Err(OperatorError::FinalizerContended {
        finalizer: finalizer.to_string(),
        name,
    })
}

/// Every kind behind the finalizer: other nodes' resources get nothing, not even a
/// finalizer (a node that is gone must not wedge deletion); ours get the core's reconcile,
/// and on deletion the core's cleanup before the finalizer goes.
async fn reconcile_kube<K: Kind>(
    obj: Arc<K>,
    ctx: Arc<Ctx<KubeStore>>,
) -> Result<Action, OperatorError> {
    if obj.acting_node() != ctx.node {
        return Ok(Action::await_change());
    }
    let api: Api<K> = ctx.store.api(&*obj);
    let key = core::key_of(&*obj);
    let result = if opted_out(&*obj) {
        if obj.meta().deletion_timestamp.is_some() {
            // An earlier version of the resource may have had our finalizer.
            remove_finalizer(&api, &*obj, FINALIZER).await?;
            core::observe::forget(&ctx, &*obj);
            Ok(Action::await_change())
        } else {
            core::reconcile(obj.clone(), ctx.clone()).await
        }
    } else {
        let c = ctx.clone();
        finalizer(&api, FINALIZER, obj.clone(), |event| async move {
            match event {
                FinalizerEvent::Apply(x) => core::reconcile(x, c).await,
                FinalizerEvent::Cleanup(x) => core::reconcile::cleanup(x, c).await,
            }
        })
        .await
        .map_err(|e| OperatorError::Finalizer(Box::new(e)))
    };
    if result.is_ok() {
        if let Ok(mut f) = ctx.store.failures.lock() {
            f.remove(&key);
        }
    }
    result
}

/// Backoff per resource: 10 s doubling to 5 min, reset by a successful reconcile.
fn error_policy<K: Kind>(obj: Arc<K>, err: &OperatorError, ctx: Arc<Ctx<KubeStore>>) -> Action {
    let n = ctx
        .store
        .failures
        .lock()
        .map(|mut f| {
            let n = f.entry(core::key_of(&*obj)).or_insert(0);
            *n += 1;
            *n
        })
        .unwrap_or(1);
    let backoff = Duration::from_secs((5u64 << n.min(6)).min(300));
    warn!(
        kind = K::KIND,
        namespace = obj.namespace().unwrap_or_default(),
        name = obj.name_any(),
        error = %err,
        label = err.label(),
        retry_in = ?backoff,
        "reconcile failed"
    );
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
pub(crate) async fn store_ready<K>(s: &kube::runtime::reflector::Store<K>) -> bool
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

/// After SIGTERM, reconciles still in flight (a finalizer patch against an apiserver that
/// does not answer) are abandoned after this long: they change nothing a restart would
/// not redo.
pub const RECONCILE_GRACE: Duration = Duration::from_secs(5);

/// A controller for one kind. Every resource of the kind is watched (no label selector):
/// a job whose `cleave.dev/node` label is missing or wrong is still seen by its node, which
/// fails it with a reason that says what to fix, instead of nobody seeing it
/// (docs/operator.md, "Routing", has the cost at 1,000 jobs).
fn controller_for<K: Kind>(
    client: &Client,
    namespace: &Option<String>,
    cfg: controller::Config,
) -> Controller<K> {
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    Controller::new(api, watcher::Config::default()).with_config(cfg)
}

async fn drive<K: Kind>(
    c: Controller<K>,
    ctx: Arc<Ctx<KubeStore>>,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let metrics = ctx.metrics.clone();
    c.graceful_shutdown_on(stop)
        .run(reconcile_kube::<K>, error_policy::<K>, ctx)
        .for_each(|r| {
            log_controller_error(&metrics, K::KIND, r);
            futures::future::ready(())
        })
        .await
}

/// Runs the controllers until `stop` completes; then running executions stop after their
/// current sstable and write their last status within the budget of
/// `core::lease::FINAL_ATTEMPTS_ON_SHUTDOWN`, whether or not the apiserver answers.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    ctx: Arc<Ctx<KubeStore>>,
    concurrency: u16,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
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
    let jobs = controller_for::<AnticompactionJob>(&client, &namespace, cfg.clone());
    let streams = controller_for::<RangeStream>(&client, &namespace, cfg.clone());
    let cleanups = controller_for::<CleanupJob>(&client, &namespace, cfg);
    // Ready once every watch has listed successfully (reflector stores are ready).
    let (s1, s2, s3) = (jobs.store(), streams.store(), cleanups.store());
    let metrics = ctx.metrics.clone();
    tokio::spawn(async move {
        if store_ready(&s1).await && store_ready(&s2).await && store_ready(&s3).await {
            info!("every CRD listed: ready");
            metrics.ready.store(true, Ordering::Relaxed);
        }
    });
    let controllers = async {
        futures::join!(
            drive(jobs, ctx.clone(), stopped(rx.clone())),
            drive(streams, ctx.clone(), stopped(rx.clone())),
            drive(cleanups, ctx.clone(), stopped(rx.clone())),
        )
    };
    let grace = async {
        stopped(rx.clone()).await;
        tokio::time::sleep(RECONCILE_GRACE).await;
    };
    tokio::select! {
        _ = controllers => {}
        _ = grace => warn!("reconciles still in flight {} s after the shutdown began (apiserver unreachable?); abandoning them", RECONCILE_GRACE.as_secs()),
    }
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
