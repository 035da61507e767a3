//! The reconciler in process, through the `Store` trait: a recording fake with
//! resourceVersions (so the lease precondition is exercised) and builder fixtures, as
//! kube-rs/controller-rs tests its reconciler. The real-apiserver side is in
//! tests/operator_kube.rs.

use std::collections::BTreeMap;

use kube::core::Status;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;

use kube::ResourceExt;

use super::*;
use crate::operator::crd::{
    AnticompactionJob, AnticompactionJobSpec, JobStatus, RangeStream, TokenRange,
};
use crate::operator::decide::TableClaim;
use crate::operator::metrics::Metrics;
use crate::operator::status::{self, Event, Note, Phase};

#[derive(Default)]
struct Fake {
    /// The stored resources (`kind/name` → the object as JSON, with its resourceVersion).
    objects: Mutex<HashMap<String, serde_json::Value>>,
    /// Status writes of jobs and of streams, in order.
    writes: Mutex<Vec<JobStatus>>,
    stream_writes: Mutex<Vec<JobStatus>>,
    events: Mutex<Vec<Note>>,
}

fn fake_key<K: Kind>(name: &str) -> String {
    format!("{}/{name}", K::KIND)
}

impl Fake {
    fn put_obj<K: Kind>(&self, o: &K) {
        self.objects.lock().unwrap().insert(
            fake_key::<K>(&o.name_any()),
            serde_json::to_value(o).unwrap(),
        );
    }
    fn obj<K: Kind>(&self, name: &str) -> Option<K> {
        self.objects
            .lock()
            .unwrap()
            .get(&fake_key::<K>(name))
            .map(|v| serde_json::from_value(v.clone()).unwrap())
    }
    fn put(&self, j: &AnticompactionJob) {
        self.put_obj(j)
    }
    fn stored(&self, name: &str) -> AnticompactionJob {
        self.obj(name).unwrap()
    }
    fn reasons(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|n| n.reason.as_str().to_string())
            .collect()
    }
}

fn conflict() -> OperatorError {
    let mut s = Status::failure("the object has been modified", "Conflict");
    s.code = 409;
    OperatorError::Kube(kube::Error::Api(s.boxed()))
}

impl Store for Arc<Fake> {
    async fn patch_status<K: Kind>(
        &self,
        obj: &K,
        status: &JobStatus,
        expect: Option<&str>,
    ) -> Result<Option<String>, OperatorError> {
        let Some(mut x) = self.obj::<K>(&obj.name_any()) else {
            return Err(OperatorError::Store("gone".into()));
        };
        if expect.is_some() && expect != x.meta().resource_version.as_deref() {
            return Err(conflict());
        }
        let rv: u64 = x
            .meta()
            .resource_version
            .as_deref()
            .unwrap_or("0")
            .parse()
            .unwrap();
        x.meta_mut().resource_version = Some((rv + 1).to_string());
        x.set_status(Some(status.clone()));
        self.put_obj(&x);
        if K::KIND == "RangeStream" {
            self.stream_writes.lock().unwrap().push(status.clone());
        } else {
            self.writes.lock().unwrap().push(status.clone());
        }
        Ok(x.meta().resource_version.clone())
    }
    async fn get<K: Kind>(&self, obj: &K) -> Result<Option<K>, OperatorError> {
        Ok(self.obj(&obj.name_any()))
    }
    async fn delete<K: Kind>(&self, obj: &K) -> Result<(), OperatorError> {
        self.objects
            .lock()
            .unwrap()
            .remove(&fake_key::<K>(&obj.name_any()));
        Ok(())
    }
    async fn event<K: Kind>(&self, _obj: &K, note: &Note) {
        self.events.lock().unwrap().push(note.clone());
    }
}

/// Builder fixture for jobs.
struct JobBuilder(AnticompactionJob);

impl JobBuilder {
    fn new(name: &str) -> JobBuilder {
        let spec = AnticompactionJobSpec::for_tests();
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
    let action = reconcile(Arc::new(j), ctx.clone()).await.unwrap();
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
    let action = reconcile(Arc::new(stale), ctx.clone()).await.unwrap();
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
    let a = reconcile(Arc::new(j), ctx.clone()).await.unwrap();
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
    reconcile(Arc::new(again), ctx.clone()).await.unwrap();
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
    reconcile(Arc::new(other), ctx.clone()).await.unwrap();
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
    reconcile(Arc::new(bad), ctx.clone()).await.unwrap();
    assert_eq!(
        fake.stored("bad").status.unwrap().reason.as_deref(),
        Some("InvalidRepairMetadata")
    );
    reconcile(Arc::new(foreign), ctx.clone()).await.unwrap();
    assert!(
        fake.stored("foreign").status.is_none(),
        "another node's job is untouched"
    );
    reconcile(Arc::new(mislabelled2), ctx.clone())
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

// ---- RangeStreams: the sender against a real receiver on loopback, in process ----

use std::path::Path;

use crate::operator::crd::{Destination, RangeStreamSpec};
use crate::operator::stream::StreamClient;

struct StreamFixture {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    staging: PathBuf,
    port: u16,
    stop: tokio::sync::watch::Sender<bool>,
}

/// A generated Murmur3 table `ks.t` and a receiver (token `tok`) on a free loopback port.
async fn stream_fixture(size: u64) -> StreamFixture {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let table = data.join("ks/t-0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&table).unwrap();
    crate::gen::generate(
        &crate::gen::GenOptions {
            out: table.clone(),
            size,
            partition_size: 16 << 10,
            row_size: 1 << 10,
            version: crate::sstable::Version::parse("nb").unwrap(),
            content: crate::gen::Content::Compressible,
            chunk_length: Some(16 << 10),
            partitioner: crate::sstable::Partitioner::Murmur3,
            generation: 1,
            seed: 7,
        },
        &mut |_| {},
    )
    .unwrap();
    let _ = std::fs::remove_file(table.join("schema.cql"));
    let staging = tmp.path().join("staging");
    let receiver = Arc::new(
        crate::stream::receive::Receiver::new(
            crate::stream::receive::ReceiverConfig {
                staging: staging.clone(),
                data_dir: None,
                token: Some("tok".into()),
                allow_tables: vec![],
                max_transfers: 2,
                min_free_percent: 0.0,
                import_command: None,
                retry_after_secs: 1,
                idle_timeout: Duration::from_secs(60),
                cassandra: Default::default(),
                node: None,
            },
            crate::stream::metrics::StreamMetrics::unregistered(),
        )
        .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, mut rx) = tokio::sync::watch::channel(false);
    tokio::spawn(crate::stream::listen::serve(
        listener,
        None,
        receiver,
        async move {
            let _ = rx.wait_for(|v| *v).await;
        },
    ));
    StreamFixture {
        _tmp: tmp,
        data,
        staging,
        port,
        stop,
    }
}

fn stream_ctx(fake: &Arc<Fake>, data: &Path, retries: u32) -> Arc<Ctx<Arc<Fake>>> {
    let mut c = Ctx::new(
        fake.clone(),
        "n1",
        data.to_path_buf(),
        Metrics::new().unwrap(),
    );
    c.stream = StreamClient {
        token: Some("tok".into()),
        tls: None,
        insecure_plaintext: true,
        retries,
        backoff: Duration::from_millis(50),
        service_port: 7070,
    };
    c.heartbeat = Duration::from_millis(300);
    Arc::new(c)
}

fn range_stream(name: &str, endpoint: &str, rate: Option<u64>) -> RangeStream {
    let mut s = RangeStream::new(
        name,
        RangeStreamSpec {
            source_node: "n1".into(),
            destination: Destination {
                node_name: "n2".into(),
                endpoint: Some(endpoint.into()),
                service: None,
                unknown: Default::default(),
            },
            keyspace: "ks".into(),
            tables: vec!["t".into()],
            ranges: vec![
                TokenRange {
                    start: "-9000000000000000000".into(),
                    end: "-3000000000000000000".into(),
                },
                TokenRange {
                    start: "1000000000000000000".into(),
                    end: "4000000000000000000".into(),
                },
            ],
            layout: Default::default(),
            max_bytes_per_second: rate,
            import: Default::default(),
            target_cassandra: None,
            partitioner: None,
            unknown: Default::default(),
        },
    );
    s.metadata.namespace = Some("default".into());
    s.metadata.resource_version = Some("1".into());
    s.metadata.generation = Some(1);
    s.metadata.uid = Some("6f1c1c2e-0000-4000-8000-00000000beef".into());
    s
}

impl Fake {
    fn put_stream(&self, s: &RangeStream) {
        self.put_obj(s)
    }
    fn stream(&self, name: &str) -> RangeStream {
        self.obj(name).unwrap()
    }
}

async fn wait_stream(fake: &Fake, name: &str, p: Phase, secs: u64) -> JobStatus {
    for _ in 0..secs * 20 {
        if let Some(st) = fake.stream(name).status.filter(|s| s.phase == Some(p)) {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{name} never reached {p:?}: {:?}", fake.stream(name).status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_sends_its_range_children_records_verdicts_and_a_replay_publishes_nothing() {
    let f = stream_fixture(4 << 20).await;
    let fake = Arc::new(Fake::default());
    let ctx = stream_ctx(&fake, &f.data, 2);
    let s = range_stream("s", &format!("127.0.0.1:{}", f.port), None);
    fake.put_stream(&s);
    let before = snapshot(&f.data);
    let action = reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    assert_eq!(
        action,
        Action::await_change(),
        "the reconcile does not run the send"
    );
    let st = wait_stream(&fake, "s", Phase::Complete, 60).await;
    let x = st.stream.clone().unwrap();
    assert_eq!(x.destination, format!("127.0.0.1:{}", f.port));
    assert_eq!(
        x.children_total, 2,
        "two disjoint ranges, two children: {x:?}"
    );
    assert_eq!(x.children_done, 2);
    assert!(x.bytes_total > 0);
    assert_eq!(x.bytes_sent, x.bytes_total);
    assert!(x.current_transfer.is_none() && x.current_sstable.is_none());
    assert_eq!(x.results.len(), 1);
    let r = &x.results[0];
    let sum: u64 = r.children.iter().map(|c| c.partitions).sum();
    assert_eq!(sum, r.partitions_in_ranges);
    assert!(r.partitions_in_ranges > 0 && r.partitions_in_ranges < r.partitions);
    for c in &r.children {
        assert!(c.ok && !c.replayed && c.chunks_checked > 0, "{c:?}");
        assert!(c
            .transfer
            .starts_with("6f1c1c2e-0000-4000-8000-00000000beef.t.nb-1.c"));
        assert!(
            c.published.starts_with(f.staging.to_str().unwrap()),
            "{c:?}"
        );
        assert!(Path::new(&c.published).is_file());
    }
    assert_eq!(st.progress.summary, "2/2 children");
    assert!(st.worker.is_none());
    let reasons = fake.reasons();
    assert_eq!(reasons, ["Started", "Completed"], "{reasons:?}");
    assert_eq!(snapshot(&f.data), before, "source unchanged");
    let m = ctx.metrics.render();
    let sent = format!(
        "cleave_stream_sent_bytes{{name=\"s\",namespace=\"default\"}} {}",
        x.bytes_total
    );
    assert!(m.contains(&sent), "{m}");
    assert!(
        m.contains("cleave_stream_bytes_total{side=\"send\",what=\"sent\"}"),
        "{m}"
    );
    // The same stream again from scratch (status lost): the receiver recognises every
    // transfer id and publishes nothing a second time.
    assert!(ctx.runs.wait_idle(Duration::from_secs(5)).await);
    let mut again = s.clone();
    again.metadata.resource_version = fake.stream("s").metadata.resource_version.clone();
    again.status = None;
    fake.put_stream(&again);
    reconcile(Arc::new(again), ctx.clone()).await.unwrap();
    let st2 = wait_stream(&fake, "s", Phase::Complete, 60).await;
    let r2 = &st2.stream.as_ref().unwrap().results[0];
    assert!(
        r2.children.iter().all(|c| c.replayed && c.bytes_sent == 0),
        "{r2:?}"
    );
    let published: Vec<_> = walk(&f.staging)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with("-Data.db"))
        .collect();
    assert_eq!(published.len(), 2, "no second child: {published:?}");
    // Deleting the stream forgets its series.
    observe::forget(&ctx, &s);
    assert!(!ctx.metrics.render().contains("cleave_stream_sent_bytes{"));
    let _ = f.stop.send(true);
}

fn snapshot(d: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    walk(d)
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![d.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_receiver_is_retried_visibly_then_the_stream_fails_unreachable() {
    let f = stream_fixture(1 << 20).await;
    let fake = Arc::new(Fake::default());
    let ctx = stream_ctx(&fake, &f.data, 2);
    // Nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let s = range_stream("u", &format!("127.0.0.1:{port}"), None);
    fake.put_stream(&s);
    reconcile(Arc::new(s), ctx.clone()).await.unwrap();
    let st = wait_stream(&fake, "u", Phase::Failed, 30).await;
    assert_eq!(st.reason.as_deref(), Some("Unreachable"));
    assert!(
        st.message.as_deref().unwrap().contains("after 3 attempts"),
        "{st:?}"
    );
    assert_eq!(st.stream.as_ref().unwrap().retries, 2);
    let retrying = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Retrying")
        .unwrap();
    assert_eq!(retrying.status, "False", "ended: {retrying:?}");
    // Every retry was visible while it waited: a Retrying=True write with its reason.
    let writes = fake.stream_writes.lock().unwrap().clone();
    let visible = writes
        .iter()
        .filter(|w| {
            w.conditions
                .iter()
                .any(|c| c.type_ == "Retrying" && c.status == "True" && c.reason == "Unreachable")
        })
        .count();
    assert!(visible >= 2, "{writes:?}");
    assert_eq!(
        fake.reasons(),
        ["Started", "Retrying", "Retrying", "Unreachable"]
    );
    let m = ctx.metrics.render();
    assert!(
        m.contains("cleave_stream_retries_total{name=\"u\",namespace=\"default\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("cleave_job_failures_total{kind=\"RangeStream\",reason=\"Unreachable\"} 1"),
        "{m}"
    );
    let _ = f.stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_stream_stops_mid_send_and_the_receiver_drops_its_staging() {
    let f = stream_fixture(8 << 20).await;
    let fake = Arc::new(Fake::default());
    let ctx = stream_ctx(&fake, &f.data, 2);
    // 512 KiB/s: the first child takes seconds.
    let s = range_stream("c", &format!("127.0.0.1:{}", f.port), Some(512 << 10));
    fake.put_stream(&s);
    reconcile(Arc::new(s.clone()), ctx.clone()).await.unwrap();
    let key = key_of(&s);
    // Wait until the receiver stages the first transfer.
    let transfers = f.staging.join("transfers");
    for _ in 0..100 {
        if walk(&transfers)
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".offset"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        walk(&transfers)
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".offset")),
        "nothing staged: {:?}",
        walk(&f.staging)
    );
    // What the finalizer does on deletion.
    assert!(ctx.runs.cancel(&key));
    assert!(ctx.runs.wait_stopped(&key, Duration::from_secs(20)).await);
    let left: Vec<_> = std::fs::read_dir(&transfers).unwrap().flatten().collect();
    assert!(left.is_empty(), "staging kept: {:?}", walk(&transfers));
    assert!(
        !walk(&f.staging)
            .iter()
            .any(|p| p.to_string_lossy().ends_with("-Data.db")),
        "nothing published"
    );
    let _ = f.stop.send(true);
}
