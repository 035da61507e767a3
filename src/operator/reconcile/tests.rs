//! The reconciler in process, through the `Store` trait: a recording fake with
//! resourceVersions (so the lease precondition is exercised) and builder fixtures, as
//! kube-rs/controller-rs tests its reconciler. The real-apiserver side is in
//! tests/operator_kube.rs.

use std::collections::BTreeMap;

use kube::core::Status;

use super::*;
use crate::operator::crd::{AnticompactionJobSpec, TokenRange};

#[derive(Default)]
struct Fake {
    /// The stored job (name → job with its resourceVersion).
    jobs: Mutex<HashMap<String, AnticompactionJob>>,
    writes: Mutex<Vec<JobStatus>>,
    events: Mutex<Vec<Note>>,
}

impl Fake {
    fn put(&self, j: &AnticompactionJob) {
        self.jobs.lock().unwrap().insert(j.name_any(), j.clone());
    }
    fn stored(&self, name: &str) -> AnticompactionJob {
        self.jobs.lock().unwrap()[name].clone()
    }
    fn reasons(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|n| n.reason.clone())
            .collect()
    }
}

fn conflict() -> OperatorError {
    let mut s = Status::failure("the object has been modified", "Conflict");
    s.code = 409;
    OperatorError::Kube(kube::Error::Api(s.boxed()))
}

impl Store for Arc<Fake> {
    async fn patch_status(
        &self,
        job: &AnticompactionJob,
        status: &JobStatus,
        expect: Option<&str>,
    ) -> Result<Option<String>, OperatorError> {
        let mut m = self.jobs.lock().unwrap();
        let j = m
            .get_mut(&job.name_any())
            .ok_or(OperatorError::Store("gone".into()))?;
        if expect.is_some() && expect != j.metadata.resource_version.as_deref() {
            return Err(conflict());
        }
        let rv: u64 = j
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or("0")
            .parse()
            .unwrap();
        j.metadata.resource_version = Some((rv + 1).to_string());
        j.status = Some(status.clone());
        self.writes.lock().unwrap().push(status.clone());
        Ok(j.metadata.resource_version.clone())
    }
    async fn get(
        &self,
        job: &AnticompactionJob,
    ) -> Result<Option<AnticompactionJob>, OperatorError> {
        Ok(self.jobs.lock().unwrap().get(&job.name_any()).cloned())
    }
    async fn patch_stream_status(
        &self,
        _s: &RangeStream,
        _st: &JobStatus,
    ) -> Result<(), OperatorError> {
        Ok(())
    }
    async fn delete(&self, job: &AnticompactionJob) -> Result<(), OperatorError> {
        self.jobs.lock().unwrap().remove(&job.name_any());
        Ok(())
    }
    async fn event<K>(&self, _obj: &K, note: &Note)
    where
        K: Resource<DynamicType = ()> + Sync,
    {
        self.events.lock().unwrap().push(note.clone());
    }
}

/// Builder fixture for jobs.
struct JobBuilder(AnticompactionJob);

impl JobBuilder {
    fn new(name: &str) -> JobBuilder {
        let spec = AnticompactionJobSpec {
            node_name: "n1".into(),
            data_directory: None,
            keyspace: "ks".into(),
            tables: vec![],
            sstables: vec![],
            ranges: vec![TokenRange {
                start: "0".into(),
                end: "100".into(),
            }],
            transient_ranges: vec![],
            repaired_at: Some(1_700_000_000_000),
            pending_repair: None,
            layout: Default::default(),
            digest: Default::default(),
            publish: Default::default(),
            dry_run: false,
            max_bytes_per_second: None,
            parallelism: None,
            ttl_seconds_after_finished: None,
        };
        let mut j = AnticompactionJob::new(name, spec);
        j.metadata.namespace = Some("default".into());
        j.metadata.resource_version = Some("1".into());
        j.metadata.generation = Some(1);
        JobBuilder(j)
    }
    fn node(mut self, n: &str) -> Self {
        self.0.spec.node_name = n.into();
        self
    }
    fn tables(mut self, t: &[&str]) -> Self {
        self.0.spec.tables = t.iter().map(|s| s.to_string()).collect();
        self
    }
    fn keyspace(mut self, k: &str) -> Self {
        self.0.spec.keyspace = k.into();
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }
    fn invalid(mut self) -> Self {
        self.0.spec.pending_repair = Some("6a3f4c2e-1d2b-11ef-9c4e-0242ac120002".into());
        self
    }
    fn rv(mut self, rv: &str) -> Self {
        self.0.metadata.resource_version = Some(rv.into());
        self
    }
    fn build(self) -> AnticompactionJob {
        self.0
    }
}

fn ctx(fake: &Arc<Fake>) -> Arc<Ctx<Arc<Fake>>> {
    let dir = std::env::temp_dir().join(format!(
        "cleave-reconcile-{}",
        uuid::Uuid::new_v4().simple()
    ));
    Arc::new(Ctx::new(fake.clone(), "n1", dir, Metrics::new().unwrap()))
}

async fn wait_phase(fake: &Fake, name: &str, p: Phase) -> JobStatus {
    for _ in 0..100 {
        if let Some(st) = fake.stored(name).status.filter(|s| s.phase == Some(p)) {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name} never reached {p:?}: {:?}", fake.stored(name).status);
}

#[tokio::test]
async fn a_job_is_claimed_with_its_resource_version_run_on_a_task_and_recorded() {
    let fake = Arc::new(Fake::default());
    let ctx = ctx(&fake);
    let j = JobBuilder::new("j").build();
    fake.put(&j);
    let t = Instant::now();
    let action = reconcile_job(Arc::new(j), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the reconcile does not run the job"
    );
    let first = fake.writes.lock().unwrap()[0].clone();
    assert_eq!(first.phase, Some(Phase::Running));
    assert_eq!(first.worker.unwrap().identity, ctx.identity);
    // The data directory does not exist: the run fails with a reason, on its own task.
    let st = wait_phase(&fake, "j", Phase::Failed).await;
    assert_eq!(st.reason.as_deref(), Some("KeyspaceNotFound"));
    assert!(st.worker.is_none());
    assert_eq!(fake.reasons(), ["Started", "KeyspaceNotFound"]);
    assert!(ctx.runs.wait_idle(Duration::from_secs(5)).await);
    let m = ctx.metrics.render();
    assert!(
        m.contains(
            "cleave_job_failures_total{kind=\"AnticompactionJob\",reason=\"KeyspaceNotFound\"} 1"
        ),
        "{m}"
    );
    assert!(
        m.contains(
            "cleave_job_duration_seconds_count{kind=\"AnticompactionJob\",result=\"failed\"} 1"
        ),
        "{m}"
    );
    assert!(m.contains("process_"), "process metrics: {m}");
}

#[tokio::test]
async fn a_stale_view_loses_the_claim_with_409_and_nothing_runs() {
    let fake = Arc::new(Fake::default());
    let ctx = ctx(&fake);
    // The stored job moved on (another worker claimed it) since this view was taken.
    fake.put(&JobBuilder::new("j").rv("7").build());
    let stale = JobBuilder::new("j").rv("6").build();
    let action = reconcile_job(Arc::new(stale), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(2)));
    assert!(fake.writes.lock().unwrap().is_empty());
    assert!(fake.events.lock().unwrap().is_empty());
    assert_eq!(ctx.runs.count(), 0);
}

#[tokio::test]
async fn jobs_on_one_table_wait_with_a_condition_saying_why() {
    let fake = Arc::new(Fake::default());
    let mut c = Ctx::new(
        fake.clone(),
        "n1",
        "/nonexistent".into(),
        Metrics::new().unwrap(),
    );
    c.limits.max_concurrent_jobs = 4;
    let ctx = Arc::new(c);
    let busy = TableClaim {
        data_dir: "/nonexistent".into(),
        keyspace: "ks".into(),
        tables: vec!["t".into()],
    };
    let _cancel = ctx
        .runs
        .try_start("AnticompactionJob/default/first", busy, 4)
        .unwrap();
    let j = JobBuilder::new("second").tables(&["t", "u"]).build();
    fake.put(&j);
    let a = reconcile_job(Arc::new(j), ctx.clone()).await.unwrap();
    assert_eq!(a, Action::requeue(Duration::from_secs(3)));
    let st = fake.stored("second").status.unwrap();
    assert_eq!(st.phase, Some(Phase::Pending));
    let w = st.conditions.iter().find(|c| c.type_ == "Waiting").unwrap();
    assert_eq!(
        (w.status.as_str(), w.reason.as_str()),
        ("True", "TableBusy")
    );
    assert!(
        w.message.contains("default/first") && w.message.contains("ks.t"),
        "{}",
        w.message
    );
    // Again: no second write, no second Event.
    let again = fake.stored("second");
    reconcile_job(Arc::new(again), ctx.clone()).await.unwrap();
    assert_eq!(fake.writes.lock().unwrap().len(), 1);
    assert_eq!(fake.reasons(), ["TableBusy"]);
    assert!(ctx
        .metrics
        .render()
        .contains("cleave_jobs_waiting{kind=\"AnticompactionJob\",reason=\"TableBusy\"} 1"));
    // Another keyspace is not blocked by the table, only by the node's job limit.
    let other = JobBuilder::new("other").keyspace("ks2").build();
    fake.put(&other);
    ctx.runs.finish("AnticompactionJob/default/first");
    for i in 0..4 {
        let limit = TableClaim {
            data_dir: "/x".into(),
            keyspace: format!("k{i}"),
            tables: vec![],
        };
        ctx.runs
            .try_start(&format!("AnticompactionJob/default/f{i}"), limit, 4)
            .unwrap();
    }
    reconcile_job(Arc::new(other), ctx.clone()).await.unwrap();
    let st = fake.stored("other").status.unwrap();
    assert_eq!(st.reason.as_deref(), Some("ConcurrencyLimit"));
}

#[tokio::test]
async fn invalid_mislabelled_and_foreign_jobs() {
    let fake = Arc::new(Fake::default());
    let ctx = ctx(&fake);
    let bad = JobBuilder::new("bad").invalid().build();
    let foreign = JobBuilder::new("foreign").node("n2").build();
    let mislabelled = JobBuilder::new("mis")
        .label("cleave.dev/node", "n1")
        .node("n1")
        .build();
    let mut mislabelled2 = mislabelled.clone();
    mislabelled2.metadata.name = Some("mis2".into());
    mislabelled2
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("cleave.dev/node".into(), "n3".into());
    for j in [&bad, &foreign, &mislabelled2] {
        fake.put(j);
    }
    reconcile_job(Arc::new(bad), ctx.clone()).await.unwrap();
    assert_eq!(
        fake.stored("bad").status.unwrap().reason.as_deref(),
        Some("InvalidRepairMetadata")
    );
    reconcile_job(Arc::new(foreign), ctx.clone()).await.unwrap();
    assert!(
        fake.stored("foreign").status.is_none(),
        "another node's job is untouched"
    );
    reconcile_job(Arc::new(mislabelled2), ctx.clone())
        .await
        .unwrap();
    let st = fake.stored("mis2").status.unwrap();
    assert_eq!(st.phase, Some(Phase::Failed));
    assert!(st.message.unwrap().contains("does not match spec.nodeName"));
    assert_eq!(fake.reasons(), ["InvalidRepairMetadata", "InvalidSpec"]);
}

#[tokio::test]
async fn a_lease_taken_over_mid_run_stops_the_writes() {
    let fake = Arc::new(Fake::default());
    let ctx = ctx(&fake);
    let j = JobBuilder::new("j").build();
    fake.put(&j);
    let mut lease = Lease {
        ctx: &ctx,
        job: &j,
        rv: Some("1".into()),
        lost: false,
    };
    let st = status::next(
        &JobStatus::default(),
        Event::Claimed {
            identity: &ctx.identity,
        },
        None,
        0,
    )
    .status;
    lease.write(&st).await;
    assert!(!lease.lost);
    // Someone else changes the object but the lease is still ours: retried.
    let mut other_change = fake.stored("j");
    other_change.metadata.resource_version = Some("10".into());
    fake.put(&other_change);
    lease.write(&st).await;
    assert!(!lease.lost);
    assert_eq!(lease.rv.as_deref(), Some("11"));
    // Another worker took it: the write stops, the lease is lost.
    let theirs = status::next(
        &st,
        Event::Claimed {
            identity: "n1/999/1",
        },
        None,
        0,
    )
    .status;
    let mut taken = fake.stored("j");
    taken.status = Some(theirs.clone());
    taken.metadata.resource_version = Some("20".into());
    fake.put(&taken);
    lease.write(&st).await;
    assert!(lease.lost);
    assert_eq!(
        fake.stored("j").status.unwrap(),
        theirs,
        "their status is not overwritten"
    );
}
