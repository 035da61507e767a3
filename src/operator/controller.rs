//! The Kubernetes controllers: kube-runtime `Controller`s for both kinds, acting only on this
//! node's resources, the job reconciler wrapped in the finalizer helper (opt-out with the
//! annotation `cleave.dev/finalizer: disabled`), status by server-side apply, Events, an
//! error policy with per-object exponential backoff, bounded concurrency, graceful shutdown.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType as KEventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use super::crd::{AnticompactionJob, JobStatus, RangeStream};
use super::reconcile::{self, Ctx, EventType, OperatorError, Store};

pub const FINALIZER: &str = "cleave.dev/cleanup";
pub const FINALIZER_OPT_OUT: &str = "cleave.dev/finalizer";

pub struct KubeStore {
    pub client: Client,
    pub recorder: Recorder,
    pub field_manager: String,
    /// Consecutive failures per object, for the error policy's backoff.
    pub failures: Mutex<HashMap<String, u32>>,
}

impl Store for KubeStore {
    async fn patch_status(
        &self,
        job: &AnticompactionJob,
        status: &JobStatus,
    ) -> Result<(), OperatorError> {
        let api: Api<AnticompactionJob> =
            Api::namespaced(self.client.clone(), &job.namespace().unwrap_or_default());
        let body = serde_json::json!({"apiVersion": "cleave.dev/v1alpha1", "kind": "AnticompactionJob", "status": status});
        api.patch_status(
            &job.name_any(),
            &PatchParams::apply(&self.field_manager).force(),
            &Patch::Apply(&body),
        )
        .await?;
        Ok(())
    }

    async fn patch_stream_status(
        &self,
        s: &RangeStream,
        status: &JobStatus,
    ) -> Result<(), OperatorError> {
        let api: Api<RangeStream> =
            Api::namespaced(self.client.clone(), &s.namespace().unwrap_or_default());
        let body = serde_json::json!({"apiVersion": "cleave.dev/v1alpha1", "kind": "RangeStream", "status": status});
        api.patch_status(
            &s.name_any(),
            &PatchParams::apply(&self.field_manager).force(),
            &Patch::Apply(&body),
        )
        .await?;
        Ok(())
    }

    async fn delete(&self, job: &AnticompactionJob) -> Result<(), OperatorError> {
        let api: Api<AnticompactionJob> =
            Api::namespaced(self.client.clone(), &job.namespace().unwrap_or_default());
        api.delete(&job.name_any(), &DeleteParams::background())
            .await?;
        Ok(())
    }

    async fn event(&self, job: &AnticompactionJob, t: EventType, reason: &str, note: &str) {
        let ev = Event {
            type_: match t {
                EventType::Normal => KEventType::Normal,
                EventType::Warning => KEventType::Warning,
            },
            reason: reason.chars().take(128).collect(),
            note: Some(note.chars().take(1024).collect()),
            action: "Anticompaction".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &job.object_ref(&())).await {
            eprintln!("cleave: event {reason} for {}: {e}", job.name_any());
        }
    }
}

fn opted_out(job: &AnticompactionJob) -> bool {
    job.annotations()
        .get(FINALIZER_OPT_OUT)
        .is_some_and(|v| v == "disabled")
}

async fn reconcile_job(
    job: Arc<AnticompactionJob>,
    ctx: Arc<Ctx<KubeStore>>,
) -> Result<Action, OperatorError> {
    // Other nodes' jobs: not even a finalizer (a node that is gone must not wedge deletion).
    if job.spec.node_name != ctx.node {
        return Ok(Action::await_change());
    }
    let ns = job.namespace().unwrap_or_default();
    let api: Api<AnticompactionJob> = Api::namespaced(ctx.store.client.clone(), &ns);
    let key = format!("{ns}/{}", job.name_any());
    let result = if opted_out(&job) {
        if job.meta().deletion_timestamp.is_some() {
            // Remove our finalizer if an earlier version of the job had it.
            let fins: Vec<String> = job
                .finalizers()
                .iter()
                .filter(|f| *f != FINALIZER)
                .cloned()
                .collect();
            if fins.len() != job.finalizers().len() {
                let patch = serde_json::json!({"metadata": {"finalizers": fins}});
                api.patch(
                    &job.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
            }
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

/// Deletion: remove the job's unpublished leftovers (staging directories, an interrupted
/// replace) on this node. Children already published stay: they are Cassandra's data.
async fn cleanup(
    job: Arc<AnticompactionJob>,
    ctx: Arc<Ctx<KubeStore>>,
) -> Result<Action, OperatorError> {
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
    let note = match r {
        Ok(()) => "leftovers of this job removed".to_string(),
        Err(f) => format!("cleanup incomplete: {}", f.message),
    };
    ctx.store
        .event(&job, EventType::Normal, "Cleanup", &note)
        .await;
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
    eprintln!(
        "cleave: reconcile of {} failed ({}), retry in {:?}: {err}",
        job.name_any(),
        err.label(),
        backoff
    );
    Action::requeue(backoff)
}

async fn reconcile_stream(
    s: Arc<RangeStream>,
    ctx: Arc<Ctx<KubeStore>>,
) -> Result<Action, OperatorError> {
    reconcile::reconcile_stream(s, ctx).await
}

fn stream_error_policy(
    _s: Arc<RangeStream>,
    err: &OperatorError,
    _ctx: Arc<Ctx<KubeStore>>,
) -> Action {
    eprintln!("cleave: RangeStream reconcile failed: {err}");
    Action::requeue(Duration::from_secs(15))
}

/// Runs both controllers until SIGTERM/SIGINT; a running job stops after its current
/// sstable and checkpoints its status.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    ctx: Arc<Ctx<KubeStore>>,
    concurrency: u16,
) -> anyhow::Result<()> {
    let jobs: Api<AnticompactionJob> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let streams: Api<RangeStream> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let shutdown = ctx.shutdown.clone();
    let signal = async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { if let Some(t) = term.as_mut() { t.recv().await; } else { futures::future::pending::<()>().await } } => {}
        }
        eprintln!("cleave: shutting down: running jobs stop after their current sstable");
        shutdown.store(true, Ordering::Relaxed);
    };
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        signal.await;
        let _ = tx.send(true);
    });
    let stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let cfg = controller::Config::default().concurrency(concurrency);
    let c1 = Controller::new(jobs, watcher::Config::default())
        .with_config(cfg.clone())
        .graceful_shutdown_on(stop(rx.clone()))
        .run(reconcile_job, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let c2 = Controller::new(streams, watcher::Config::default())
        .with_config(cfg)
        .graceful_shutdown_on(stop(rx))
        .run(reconcile_stream, stream_error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    ctx.metrics.ready.store(true, Ordering::Relaxed);
    futures::join!(c1, c2);
    Ok(())
}

pub fn reporter(node: &str) -> Reporter {
    Reporter {
        controller: "cleave.dev/cleave".into(),
        instance: Some(node.into()),
    }
}
