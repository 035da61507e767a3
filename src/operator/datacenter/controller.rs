//! The cluster-scoped controller of `DatacenterCleanup`: gather → decide → apply → status.
//! It executes nothing on a node: it creates CleanupJobs (owned by the resource, labelled
//! for their node) and rack restarts (cass-operator CassandraTasks), and reads back what the
//! node sidecars and cass-operator report.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as FinalizerEvent};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::crd::{DatacenterCleanup, DatacenterCleanupStatus};
pub use super::decide::task_name;
use super::decide::{self, ChildJob, TaskState, World};
use crate::operator::controller::publish_event;
use crate::operator::crd::{CleanupJob, CleanupJobSpec, Ownership};
use crate::operator::metrics::Metrics;
use crate::operator::status::{EventType, Phase};
use crate::reason::Reason;
use crate::split::publish::Publish;

pub const FINALIZER: &str = "cleave.dev/datacenter-cleanup";
/// The label that ties a CleanupJob to the DatacenterCleanup that made it (its uid: a
/// resource name may be longer than a label value may be).
pub const OWNER_LABEL: &str = "cleave.dev/datacenter-cleanup-uid";
pub const NODE_LABEL: &str = "cleave.dev/node";
pub const DC_LABEL: &str = "cassandra.datastax.com/datacenter";
pub const RACK_LABEL: &str = "cassandra.datastax.com/rack";
/// How often a resource in flight is looked at again besides its jobs' changes (pods,
/// the CassandraDatacenter and the restart tasks are not watched).
pub const POLL: Duration = Duration::from_secs(5);
/// A job that refused a changing ring is made again this long after it ended, unless the
/// CassandraDatacenter still says the ring changes.
pub const RING_RETRY: Duration = Duration::from_secs(30);

/// cass-operator's CassandraDatacenter conditions during which ownership moves
/// (`api/v1beta1/cassandradatacenter_types.go`: DatacenterScalingUp, DatacenterScalingDown,
/// DatacenterReplacingNodes).
const RING_CONDITIONS: [&str; 3] = ["ScalingUp", "ScalingDown", "ReplacingNodes"];

pub fn datacenter_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cassandra.datastax.com", "v1beta1", "CassandraDatacenter"),
        "cassandradatacenters",
    )
}

pub fn task_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("control.k8ssandra.io", "v1alpha1", "CassandraTask"),
        "cassandratasks",
    )
}

pub struct ClusterCtx {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub field_manager: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(Box<kube::runtime::finalizer::Error<ClusterError>>),
    #[error("{0}")]
    Serde(#[from] serde_json::Error),
    /// Deletion waits for the node sidecars to withdraw these CleanupJobs (retried).
    #[error("{0} CleanupJobs still withdrawing their recorded cleanups")]
    Withdrawing(usize),
}

/// A child job's name: the resource's, the node's and the keyspace's, with a hash of the
/// pair so that two keyspaces that clean to one name (`a_b`, `a-b`) stay apart.
pub fn job_name(cleanup: &str, node: &str, keyspace: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    };
    // FNV-1a: a stable name across releases (std's hasher is not).
    let h = format!("{node}\0{keyspace}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    let mut base = format!("{}-{}-{}", clean(cleanup), clean(node), clean(keyspace));
    base.truncate(253 - 9);
    format!("{}-{:08x}", base.trim_end_matches('-'), h as u32)
}

/// The racks and nodes, and the ring's state, from the CassandraDatacenter or the selector.
async fn topology(
    ctx: &ClusterCtx,
    ns: &str,
    dcc: &DatacenterCleanup,
) -> Result<Result<(Vec<(String, Vec<String>)>, Option<String>), String>, ClusterError> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(ctx.client.clone(), ns);
    let (selector, order, ring) = match (&dcc.spec.datacenter, &dcc.spec.pod_selector) {
        (Some(dc), None) => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), ns, &datacenter_resource());
            let Some(obj) = api.get_opt(dc).await? else {
                return Ok(Err(format!(
                    "CassandraDatacenter {ns}/{dc} not found (spec.datacenter)"
                )));
            };
            let order: Vec<String> = obj.data["spec"]["racks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["name"].as_str().map(str::to_string))
                .collect();
            let ring = obj.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| {
                    c["status"] == "True" && RING_CONDITIONS.iter().any(|t| c["type"] == *t)
                })
                .map(|c| c["type"].as_str().unwrap_or_default().to_string())
                .collect::<Vec<_>>();
            let ring = (!ring.is_empty())
                .then(|| format!("CassandraDatacenter {dc}: {} is True", ring.join(", ")));
            (format!("{DC_LABEL}={dc}"), order, ring)
        }
        (None, Some(sel)) if sel.is_empty() => {
            return Ok(Err(
                "spec.podSelector names no label: it would select every pod of the namespace"
                    .into(),
            ))
        }
        (None, Some(sel)) => (
            sel.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(","),
            Vec::new(),
            None,
        ),
        _ => {
            return Ok(Err(
                "exactly one of spec.datacenter and spec.podSelector".into()
            ))
        }
    };
    let list = pods.list(&ListParams::default().labels(&selector)).await?;
    let mut racks: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in list.items {
        if p.meta().deletion_timestamp.is_some() {
            continue;
        }
        let rack = p
            .labels()
            .get(RACK_LABEL)
            .cloned()
            .unwrap_or_else(|| "default".into());
        racks.entry(rack).or_default().push(p.name_any());
    }
    if racks.is_empty() {
        return Ok(Err(format!("no pod matches {selector} in namespace {ns}")));
    }
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for r in &order {
        if let Some(mut nodes) = racks.remove(r) {
            nodes.sort();
            out.push((r.clone(), nodes));
        }
    }
    for (r, mut nodes) in racks {
        nodes.sort();
        out.push((r, nodes));
    }
    Ok(Ok((out, ring)))
}

fn task_state(obj: &DynamicObject) -> TaskState {
    let conds = obj.data["status"]["conditions"].as_array();
    let cond = |t: &str| {
        conds
            .into_iter()
            .flatten()
            .find(|c| c["type"] == t && c["status"] == "True")
    };
    if let Some(c) = cond("Failed") {
        return TaskState::Failed(c["message"].as_str().unwrap_or("Failed").to_string());
    }
    if cond("Complete").is_some() || obj.data["status"]["completionTime"].is_string() {
        return TaskState::Complete;
    }
    TaskState::Running
}

async fn gather(
    ctx: &ClusterCtx,
    ns: &str,
    dcc: &DatacenterCleanup,
) -> Result<Result<World, String>, ClusterError> {
    let (racks, mut ring) = match topology(ctx, ns, dcc).await? {
        Ok(t) => t,
        Err(why) => return Ok(Err(why)),
    };
    let uid = dcc.uid().unwrap_or_default();
    let jobs_api: Api<CleanupJob> = Api::namespaced(ctx.client.clone(), ns);
    let listed = jobs_api
        .list(&ListParams::default().labels(&format!("{OWNER_LABEL}={uid}")))
        .await?;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let mut jobs = Vec::new();
    for j in listed.items {
        if j.meta().deletion_timestamp.is_some() {
            continue;
        }
        let st = j.status.clone().unwrap_or_default();
        let phase = st.phase.unwrap_or(Phase::Pending);
        let refused =
            phase == Phase::Failed && st.reason.as_deref() == Some(Reason::RingChanging.as_str());
        // A refusal this recent is the ring's state now: wait before making it again.
        if refused && ring.is_none() {
            let ended = st
                .completion_time
                .as_deref()
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map_or(now, |t| t.as_second());
            if now - ended < RING_RETRY.as_secs() as i64 {
                ring = Some(format!(
                    "CleanupJob {} found the ring changing: {}",
                    j.name_any(),
                    st.message.as_deref().unwrap_or("")
                ));
            }
        }
        jobs.push(ChildJob {
            name: j.name_any(),
            node: j.spec.node_name.clone(),
            keyspace: j.spec.keyspace.clone(),
            phase,
            reason: st.reason.clone(),
            message: st.message.clone(),
        });
    }
    let tasks_api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ns, &task_resource());
    let mut tasks = BTreeMap::new();
    if dcc.spec.restart == super::crd::RackRestart::CassandraTask {
        for (rack, _) in &racks {
            if let Some(t) = tasks_api.get_opt(&task_name(&dcc.name_any(), rack)).await? {
                tasks.insert(rack.clone(), task_state(&t));
            }
        }
    }
    Ok(Ok(World {
        racks,
        jobs,
        ring_changing: ring,
        tasks,
    }))
}

fn child_job(dcc: &DatacenterCleanup, node: &str, keyspace: &str) -> CleanupJob {
    let s = &dcc.spec;
    let mut labels = BTreeMap::from([
        (NODE_LABEL.to_string(), node.to_string()),
        (OWNER_LABEL.to_string(), dcc.uid().unwrap_or_default()),
    ]);
    if let Some(dc) = &s.datacenter {
        labels.insert(DC_LABEL.into(), dc.clone());
    }
    let mut job = CleanupJob::new(
        &job_name(&dcc.name_any(), node, keyspace),
        CleanupJobSpec {
            node_name: node.into(),
            data_directory: s.data_directory.clone(),
            keyspace: keyspace.into(),
            tables: s.tables.clone(),
            ownership: Ownership::ManagementApi,
            publish: Publish::OnRestart,
            parallelism: s.parallelism,
            max_bytes_per_second: s.max_bytes_per_second,
            target_cassandra: s.target_cassandra.clone(),
            ..Default::default()
        },
    );
    job.metadata.namespace = dcc.namespace();
    job.metadata.labels = Some(labels);
    job.metadata.owner_references = dcc.controller_owner_ref(&()).map(|r| vec![r]);
    job
}

fn restart_task(dcc: &DatacenterCleanup, dc: &str, rack: &str) -> DynamicObject {
    let mut t = DynamicObject::new(&task_name(&dcc.name_any(), rack), &task_resource())
        .within(&dcc.namespace().unwrap_or_default());
    t.metadata.owner_references = dcc.controller_owner_ref(&()).map(|r| vec![r]);
    t.metadata.labels = Some(BTreeMap::from([(
        OWNER_LABEL.to_string(),
        dcc.uid().unwrap_or_default(),
    )]));
    // cass-operator's `restart` command with `rack` restarts that rack; `fast` restarts
    // its pods at once (control/v1alpha1 JobArguments), the only downtime of the cleanup.
    t.data = serde_json::json!({"spec": {
        "datacenter": {"name": dc, "namespace": dcc.namespace()},
        "jobs": [{"name": format!("restart-{rack}"), "command": "restart",
                  "args": {"rack": rack, "fast": true}}],
    }});
    t
}

async fn event(
    ctx: &ClusterCtx,
    dcc: &DatacenterCleanup,
    warning: bool,
    reason: &str,
    note: String,
) {
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let obj = dcc.object_ref(&());
    publish_event(
        &ctx.recorder,
        &obj,
        type_,
        reason,
        "DatacenterCleanup",
        &note,
    )
    .await;
}

async fn write_status(
    ctx: &ClusterCtx,
    dcc: &DatacenterCleanup,
    status: &DatacenterCleanupStatus,
) -> Result<(), ClusterError> {
    let api: Api<DatacenterCleanup> =
        Api::namespaced(ctx.client.clone(), &dcc.namespace().unwrap_or_default());
    let body = serde_json::json!({
        "apiVersion": DatacenterCleanup::api_version(&()),
        "kind": DatacenterCleanup::kind(&()),
        "status": status,
    });
    api.patch_status(
        &dcc.name_any(),
        &PatchParams::apply(&ctx.field_manager).force(),
        &Patch::Apply(&body),
    )
    .await?;
    let (ns, name) = (dcc.namespace().unwrap_or_default(), dcc.name_any());
    let n = &status.nodes;
    for (state, v) in [
        (
            "Pending",
            n.total - n.running - n.staged - n.published - n.failed,
        ),
        ("Running", n.running),
        ("Staged", n.staged),
        ("Published", n.published),
        ("Failed", n.failed),
    ] {
        ctx.metrics
            .datacenter_nodes
            .with_label_values(&[&ns, &name, state])
            .set(i64::from(v));
    }
    Ok(())
}

/// Ends the resource `Failed` before it ran (a spec the schema refuses, no datacenter).
async fn fail(
    ctx: &ClusterCtx,
    dcc: &DatacenterCleanup,
    mut st: DatacenterCleanupStatus,
    reason: Reason,
    message: String,
    now: &str,
) -> Result<Action, ClusterError> {
    st.phase = Some(Phase::Failed);
    st.observed_generation = dcc.metadata.generation;
    decide::record_failure(
        &mut st,
        reason.as_str(),
        &message,
        dcc.metadata.generation,
        now,
    );
    write_status(ctx, dcc, &st).await?;
    ctx.metrics
        .failures
        .with_label_values(&["DatacenterCleanup", reason.as_str()])
        .inc();
    event(ctx, dcc, true, reason.as_str(), message).await;
    Ok(Action::await_change())
}

/// One reconcile: validate → gather → decide → apply → status.
async fn apply(dcc: Arc<DatacenterCleanup>, ctx: Arc<ClusterCtx>) -> Result<Action, ClusterError> {
    let ns = dcc.namespace().unwrap_or_default();
    let prev = dcc.status.clone().unwrap_or_default();
    if matches!(prev.phase, Some(Phase::Complete) | Some(Phase::Failed)) {
        return Ok(Action::await_change());
    }
    let now = crate::operator::decide::now_rfc3339();
    // validate → gather → decide → apply → status.
    let problems = dcc.problems();
    if let Some(f) = crate::operator::schema::failure_of(&problems) {
        return fail(&ctx, &dcc, prev, f.reason, f.message, &now).await;
    }
    let world = match gather(&ctx, &ns, &dcc).await? {
        Ok(w) => w,
        Err(why) => return fail(&ctx, &dcc, prev, Reason::DatacenterNotFound, why, &now).await,
    };
    let name = dcc.name_any();
    let step = decide::step(
        &name,
        &dcc.spec,
        &prev,
        &world,
        dcc.metadata.generation,
        &now,
    );
    let jobs: Api<CleanupJob> = Api::namespaced(ctx.client.clone(), &ns);
    for name in &step.retry {
        info!(job = %name, "a CleanupJob refused a changing ring; the ring is stable: made again");
        match jobs.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for (node, keyspace) in &step.create {
        let job = child_job(&dcc, node, keyspace);
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if !step.create.is_empty() {
        let nodes: Vec<&str> = step.create.iter().map(|(n, _)| n.as_str()).collect();
        event(
            &ctx,
            &dcc,
            false,
            "NodesStarted",
            format!(
                "rack {}: CleanupJobs for {}",
                step.status.current_rack.as_deref().unwrap_or("-"),
                nodes.join(", ")
            ),
        )
        .await;
    }
    if let (Some(rack), Some(dc)) = (&step.restart, &dcc.spec.datacenter) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &ns, &task_resource());
        match api
            .create(&PostParams::default(), &restart_task(&dcc, dc, rack))
            .await
        {
            Ok(_) => {
                event(
                    &ctx,
                    &dcc,
                    false,
                    "RackRestart",
                    format!(
                        "rack {rack} is staged: CassandraTask {} restarts it",
                        task_name(&dcc.name_any(), rack)
                    ),
                )
                .await
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let st = &step.status;
    if st.phase != prev.phase {
        let warning = st.phase == Some(Phase::Failed);
        let note = match (&st.reason, &st.message) {
            (Some(r), Some(m)) if warning => format!("{r}: {m}"),
            _ => st.nodes.summary.clone(),
        };
        let reason = st.phase.map_or("Pending", |p| p.as_str());
        event(&ctx, &dcc, warning, reason, note).await;
        if warning {
            ctx.metrics
                .failures
                .with_label_values(&["DatacenterCleanup", st.reason.as_deref().unwrap_or("")])
                .inc();
        }
    }
    write_status(&ctx, &dcc, st).await?;
    Ok(match st.phase {
        Some(Phase::Complete) | Some(Phase::Failed) => Action::await_change(),
        _ => Action::requeue(POLL),
    })
}

/// Deletion: the CleanupJobs go first (each node's sidecar withdraws what it recorded and
/// did not publish, behind its own finalizer); the finalizer goes once none is left.
async fn withdraw(
    dcc: Arc<DatacenterCleanup>,
    ctx: Arc<ClusterCtx>,
) -> Result<Action, ClusterError> {
    let ns = dcc.namespace().unwrap_or_default();
    let jobs: Api<CleanupJob> = Api::namespaced(ctx.client.clone(), &ns);
    let sel = format!("{OWNER_LABEL}={}", dcc.uid().unwrap_or_default());
    let left = jobs.list(&ListParams::default().labels(&sel)).await?;
    if left.items.is_empty() {
        return Ok(Action::await_change());
    }
    for j in &left.items {
        if j.meta().deletion_timestamp.is_none() {
            jobs.delete(&j.name_any(), &DeleteParams::background())
                .await?;
        }
    }
    info!(name = %dcc.name_any(), jobs = left.items.len(), "waiting for the CleanupJobs' withdrawal");
    Err(ClusterError::Withdrawing(left.items.len()))
}

async fn reconcile(
    dcc: Arc<DatacenterCleanup>,
    ctx: Arc<ClusterCtx>,
) -> Result<Action, ClusterError> {
    let api: Api<DatacenterCleanup> =
        Api::namespaced(ctx.client.clone(), &dcc.namespace().unwrap_or_default());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, dcc, |event| async move {
        match event {
            FinalizerEvent::Apply(d) => apply(d, c).await,
            FinalizerEvent::Cleanup(d) => withdraw(d, c).await,
        }
    })
    .await
    .map_err(|e| ClusterError::Finalizer(Box::new(e)))
}

fn error_policy(_d: Arc<DatacenterCleanup>, err: &ClusterError, _c: Arc<ClusterCtx>) -> Action {
    warn!(error = %err, "datacenter cleanup reconcile failed; again in 2 s");
    Action::requeue(Duration::from_secs(2))
}

/// Runs the controller until `stop` completes.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    metrics: Arc<Metrics>,
    identity: String,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (dccs, jobs): (Api<DatacenterCleanup>, Api<CleanupJob>) = match &namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let ctx = Arc::new(ClusterCtx {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "cleave.dev/cleave-cluster".into(),
                instance: Some(identity.clone()),
            },
        ),
        client,
        metrics: metrics.clone(),
        field_manager: "cleave-cluster".into(),
    });
    let c =
        Controller::new(dccs, watcher::Config::default()).owns(jobs, watcher::Config::default());
    let store = c.store();
    let m = metrics.clone();
    tokio::spawn(async move {
        // Not `store.wait_until_ready()` alone: its cell wakes only the last of its waiters,
        // and the controller's runner waits on it too (the leader never became ready).
        if crate::operator::controller::store_ready(&store).await {
            info!("DatacenterCleanups listed: ready");
            m.ready.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop.await;
        let _ = tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let cleanups = c
        .graceful_shutdown_on(stopped(rx.clone()))
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|r| {
            if let Err(e) = r {
                tracing::debug!(error = %e, "datacenter cleanup controller");
            }
            futures::future::ready(())
        });
    let scale_ups = watch_scale_ups(ctx, namespace, stopped(rx));
    futures::join!(cleanups, scale_ups);
}

/// The CassandraDatacenters that opted in (`scale_up::OPT_IN_LABEL`), if cass-operator's
/// CRD is installed at all (without it, there is nothing to watch: podSelector users).
async fn watch_scale_ups(
    ctx: Arc<ClusterCtx>,
    namespace: Option<String>,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ar = datacenter_resource();
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(ctx.client.clone(), ns, &ar),
        None => Api::all_with(ctx.client.clone(), &ar),
    };
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {
            info!("no CassandraDatacenter CRD: scale-ups are not watched");
            return;
        }
        Err(e) => {
            warn!(error = %e, "listing CassandraDatacenters failed: scale-ups are not watched (RBAC: list cassandradatacenters.cassandra.datastax.com)");
            return;
        }
    }
    let cfg = watcher::Config::default().labels(&format!("{}=true", super::scale_up::OPT_IN_LABEL));
    Controller::new_with(api, cfg, ar)
        .graceful_shutdown_on(stop)
        .run(
            on_datacenter,
            |_, e, _| {
                warn!(error = %e, "scale-up reconcile failed; again in 10 s");
                Action::requeue(Duration::from_secs(10))
            },
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// A datacenter that opted in: its cleanup after a finished scale-up, made once.
async fn on_datacenter(
    dc: Arc<DynamicObject>,
    ctx: Arc<ClusterCtx>,
) -> Result<Action, ClusterError> {
    use super::scale_up::{wanted, Wanted};
    match wanted(&dc) {
        Wanted::Nothing => {}
        Wanted::Refused(why) => {
            warn!(datacenter = %dc.name_any(), "{why}");
            let r = dc.object_ref(&datacenter_resource());
            let (warning, reason) = (EventType::Warning, "CleanupNotCreated");
            publish_event(
                &ctx.recorder,
                &r,
                warning,
                reason,
                "DatacenterCleanup",
                &why,
            )
            .await;
        }
        Wanted::Cleanup(dcc) => {
            let api: Api<DatacenterCleanup> =
                Api::namespaced(ctx.client.clone(), &dc.namespace().unwrap_or_default());
            match api.create(&PostParams::default(), &dcc).await {
                Ok(_) => {
                    info!(datacenter = %dc.name_any(), cleanup = %dcc.name_any(), "scale-up finished: DatacenterCleanup created")
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Action::await_change())
}
