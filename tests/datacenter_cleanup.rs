//! `DatacenterCleanup` on the real apiserver (`scripts/k8s-testenv.sh`): a CassandraDatacenter
//! `dc1` (cass-operator's own CRD) of three racks and six pods `dc1-r{1,2,3}-sts-{0,1}`; each
//! node with its own data directory on one loop XFS, its own management API stand-in
//! (`tests/common/mgmt.rs`: a 6-node ring, RF 1, with that node `IS_LOCAL`, and a running
//! "Cassandra" holding the table's files) and its own sidecar (`cleave run --node <pod>`);
//! one `cleave run --cluster` runs the DatacenterCleanup controller.
//!
//! There is no kubelet and no cass-operator: the pods stay Pending (the controller reads
//! only their labels) and the test plays cass-operator. It writes the CassandraDatacenter's
//! conditions (a scale-up), and for a CassandraTask `restart` of a rack it does what the
//! rack's restart would: each node's Cassandra stops (its stand-in is dropped), the init
//! container's `cleave apply-pending` runs on its data directory, and the task's status
//! becomes `Complete` (`completionTime`, condition `Complete` True).

#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cleave::operator::datacenter::controller::{job_name, task_name};
use common::k8s::{control_plane_or_skip, Cluster, Sidecar};
use common::mgmt::StandIn;
use common::ring;
use common::*;
use serde_json::{json, Value};

const TABLE: &str = "t-0123456789abcdef0123456789abcdef";
const DCC: &str = "dcc";
const OWNER_LABEL: &str = "cleave.dev/datacenter-cleanup-uid";
/// The pods, two a rack; node `i` is 10.0.0.`i+1` in the ring.
const NODES: [(&str, &str); 6] = [
    ("dc1-r1-sts-0", "r1"),
    ("dc1-r1-sts-1", "r1"),
    ("dc1-r2-sts-0", "r2"),
    ("dc1-r2-sts-1", "r2"),
    ("dc1-r3-sts-0", "r3"),
    ("dc1-r3-sts-1", "r3"),
];
/// A CleanupJob phase after which nothing more runs on its node before a restart.
const SETTLED: [&str; 3] = ["AwaitingRestart", "Complete", "Failed"];
const DC_CRD: &str =
    "cass-operator/cassandra.datastax.com_cassandradatacenters.apiserver-1.20.yaml";
const TASK_CRD: &str = "cass-operator/control.k8ssandra.io_cassandratasks.yaml";

/// Node `i`'s ranges in the ring of [`NODES`].
fn owned(i: usize) -> Vec<(i64, i64)> {
    ring::owned(NODES.len(), i)
}

/// The ring of [`NODES`] as node `local`'s management API shows it.
fn ring_json(local: usize) -> String {
    ring::ring_json(NODES.len(), local, Some(&|i| NODES[i].1), false)
}

/// The files directly in the table directory (what Cassandra reads; cleave's staging and
/// pending areas are dot-directories below it), each with its length and a hash of its bytes.
fn visible(table: &Path) -> Vec<(String, usize, u64)> {
    let mut v: Vec<(String, usize, u64)> = std::fs::read_dir(table)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            // FNV-1a.
            let h = b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| {
                (h ^ u64::from(*x)).wrapping_mul(0x0100_0000_01b3)
            });
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                b.len(),
                h,
            )
        })
        .collect();
    v.sort();
    v
}

/// cleave's own entries in a table directory (`.cleave-pending`, `.cleave-staging-*`, ...).
fn cleave_entries(table: &Path) -> Vec<String> {
    names(table)
        .into_iter()
        .filter(|n| n.starts_with(".cleave"))
        .collect()
}

/// The CassandraDatacenter (its racks in `racks` order) and its six pods.
fn topology_yaml(racks: [&str; 3]) -> String {
    let racks: Vec<String> = racks.iter().map(|r| format!("{{name: {r}}}")).collect();
    let mut y = format!(
        "apiVersion: cassandra.datastax.com/v1beta1\nkind: CassandraDatacenter\nmetadata: {{name: dc1, namespace: default}}\nspec:\n  clusterName: c1\n  serverType: cassandra\n  serverVersion: \"4.1.5\"\n  size: 6\n  racks: [{}]\n  storageConfig:\n    cassandraDataVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {{requests: {{storage: 1Gi}}}}\n",
        racks.join(", ")
    );
    for (name, rack) in NODES {
        y += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{cassandra.datastax.com/datacenter: dc1, cassandra.datastax.com/rack: {rack}, app: cassandra}}\nspec:\n  automountServiceAccountToken: false\n  containers: [{{name: cassandra, image: cassandra:4.1}}]\n"
        );
    }
    y
}

fn dcc_yaml(extra: &str) -> String {
    format!("apiVersion: cleave.dev/v1alpha1\nkind: DatacenterCleanup\nmetadata:\n  name: {DCC}\n  namespace: default\nspec:\n  datacenter: dc1\n  keyspaces: [ks]\n{extra}")
}

fn rack_of(node: &str) -> &'static str {
    NODES
        .iter()
        .find(|(n, _)| *n == node)
        .map(|(_, r)| *r)
        .unwrap_or_else(|| panic!("a CleanupJob for {node:?}, not a node of dc1"))
}

fn phase(job: &Value) -> &str {
    job["status"]["phase"].as_str().unwrap_or("Pending")
}

fn node_of(job: &Value) -> &str {
    job["spec"]["nodeName"].as_str().unwrap()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// The last `n` lines of a log file.
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

struct Node {
    name: &'static str,
    rack: &'static str,
    data: PathBuf,
    table: PathBuf,
    /// [`visible`] of the table when the test started.
    before: Vec<(String, usize, u64)>,
    sidecar: Option<Sidecar>,
    /// Its management API and running Cassandra, until the rack's restart stops them.
    api: Option<StandIn>,
}

/// `cleave run --cluster` as a process, its log in a file; killed on drop.
struct ClusterSide {
    _proc: KillOnDrop,
    log: PathBuf,
}

impl ClusterSide {
    fn start(c: &Cluster) -> ClusterSide {
        let port = free_port();
        let log = c.dir.path().join("cluster-side.log");
        let mut cmd = Command::new(cleave_bin());
        cmd.args(["run", "--cluster", "--namespace", "default"])
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "info")
            .env_remove("CLEAVE_MANAGEMENT_API")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let side = ClusterSide {
            _proc: KillOnDrop(cmd.spawn().unwrap()),
            log,
        };
        // Ready once it leads and has listed the DatacenterCleanups.
        let ready = eventually(Duration::from_secs(60), || {
            http_get(port, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
        });
        assert!(
            ready,
            "cleave run --cluster: /readyz is not 200 after 60 s:\n{}",
            tail(&side.log, 50)
        );
        side
    }
}

/// `kubectl get cleanupjobs --watch --output-watch-events -o json` into a file: every
/// version of every CleanupJob in the apiserver's order (polling could miss a job that ran
/// and settled between two looks); killed on drop.
struct JobWatch {
    _proc: KillOnDrop,
    out: PathBuf,
}

impl JobWatch {
    fn start(c: &Cluster) -> JobWatch {
        let out = c.dir.path().join("cleanupjobs.watch.json");
        let mut cmd = c.kubectl_as(
            &c.kubeconfig,
            &[
                "get",
                "cleanupjobs.cleave.dev",
                "-n",
                "default",
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ],
        );
        cmd.stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null());
        JobWatch {
            _proc: KillOnDrop(cmd.spawn().unwrap()),
            out,
        }
    }

    /// The events so far: `(ADDED|MODIFIED|DELETED, the job as it was then)`.
    fn events(&self) -> Vec<(String, Value)> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        serde_json::Deserializer::from_str(&text)
            .into_iter::<Value>()
            .map_while(Result::ok)
            .map(|e| {
                (
                    e["type"].as_str().unwrap_or("").to_string(),
                    e["object"].clone(),
                )
            })
            .collect()
    }
}

struct Setup {
    /// The racks in the CassandraDatacenter's `spec.racks` order.
    racks: [&'static str; 3],
    /// The racks whose nodes get a sidecar and a running Cassandra.
    sidecars: &'static [&'static str],
    /// A node whose data directory has no keyspace `ks` (its table is in `other`).
    no_keyspace: Option<&'static str>,
}

/// Everything one test runs; dropped in field order: the sidecars and stand-ins, the
/// cluster side, the control plane, the files, the XFS mount last.
struct Dc {
    nodes: Vec<Node>,
    side: ClusterSide,
    watch: JobWatch,
    cluster: Cluster,
    _work: tempfile::TempDir,
    _xfs: cleave::io::loopfs::LoopMount,
    shared: PathBuf,
    racks: [&'static str; 3],
}

impl Dc {
    /// `None` (the reason printed) without the corpus, the control plane, cass-operator's
    /// CRDs or a loop XFS.
    fn start(test: &str, s: Setup) -> Option<Dc> {
        let shared = corpus_or_skip(test)?;
        if !control_plane_or_skip(test) {
            return None;
        }
        let third_party = shared.join("third-party");
        if !third_party.join(DC_CRD).is_file() || !third_party.join(TASK_CRD).is_file() {
            eprintln!(
                "SKIP {test}: no cass-operator CRDs in {} (set CLEAVE_SHARED)",
                third_party.display()
            );
            return None;
        }
        let xfs = xfs_or_skip(test, 512 << 20)?;
        let work = tempfile::tempdir().unwrap();
        let cluster = Cluster::start();
        cluster.apply_crds();
        // cass-operator's CRDs in the copies the 1.20 apiserver accepts
        // (../shared/third-party/README.md; the CassandraTask CRD needs no change).
        for f in [DC_CRD, TASK_CRD] {
            cluster.ok(&[
                "apply",
                "--server-side",
                "-f",
                third_party.join(f).to_str().unwrap(),
            ]);
        }
        cluster.ok(&[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "crd/cassandradatacenters.cassandra.datastax.com",
            "crd/cassandratasks.control.k8ssandra.io",
        ]);
        cluster.apply(&topology_yaml(s.racks));
        let mut nodes = Vec::new();
        for (i, (name, rack)) in NODES.into_iter().enumerate() {
            let data = xfs.mount_point.join(name);
            let ks = if s.no_keyspace == Some(name) {
                "other"
            } else {
                "ks"
            };
            let table = data.join(ks).join(TABLE);
            gen_table(&table, &[(1, "2MiB"), (2, "2MiB")]);
            let ring = work.path().join(format!("ring-{name}.json"));
            std::fs::write(&ring, ring_json(i)).unwrap();
            let (api, sidecar) = if s.sidecars.contains(&rack) {
                let api = StandIn::start(work.path(), &table, &["--ring", ring.to_str().unwrap()]);
                let url = api.url();
                let sidecar =
                    Sidecar::spawn_node(&cluster, name, &data, &[], &["--management-api", &url]);
                (Some(api), Some(sidecar))
            } else {
                (None, None)
            };
            // After the stand-in's start: it adds its own hold file to the table directory.
            let before = visible(&table);
            nodes.push(Node {
                name,
                rack,
                data,
                table,
                before,
                sidecar,
                api,
            });
        }
        for n in &nodes {
            if let Some(s) = &n.sidecar {
                s.wait_ready(&cluster);
            }
        }
        let watch = JobWatch::start(&cluster);
        let side = ClusterSide::start(&cluster);
        Some(Dc {
            nodes,
            side,
            watch,
            cluster,
            _work: work,
            _xfs: xfs,
            shared,
            racks: s.racks,
        })
    }

    /// The cluster side's log and the end of each sidecar's, for failure messages.
    fn logs(&self) -> String {
        let mut s = format!("--- cleave run --cluster\n{}\n", tail(&self.side.log, 150));
        for n in &self.nodes {
            if let Some(sc) = &n.sidecar {
                s += &format!("--- sidecar {}\n{}\n", n.name, tail(&sc.log, 25));
            }
        }
        s
    }

    fn list(&self, kind: &str) -> Vec<Value> {
        let v: Value = serde_json::from_str(
            &self
                .cluster
                .ok(&["get", kind, "-n", "default", "-o", "json"]),
        )
        .unwrap();
        v["items"].as_array().unwrap().clone()
    }

    fn jobs(&self) -> Vec<Value> {
        self.list("cleanupjobs.cleave.dev")
    }

    fn tasks(&self) -> Vec<Value> {
        self.list("cassandratasks.control.k8ssandra.io")
    }

    fn dcc(&self) -> Option<Value> {
        self.cluster.get("datacentercleanups.cleave.dev", DCC)
    }

    fn status(&self) -> Value {
        self.dcc().expect("the DatacenterCleanup")["status"].clone()
    }

    fn nodes_of(&self, rack: &str) -> impl Iterator<Item = &Node> {
        let rack = rack.to_string();
        self.nodes.iter().filter(move |n| n.rack == rack)
    }

    /// Writes an object's status as its operator would (`kubectl patch --subresource=status`).
    fn patch_status(&self, kind: &str, name: &str, status: Value) {
        self.cluster.ok(&[
            "patch",
            kind,
            name,
            "-n",
            "default",
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({ "status": status }).to_string(),
        ]);
    }

    /// cass-operator's condition `type_` on dc1 (the only one it has).
    fn set_dc_condition(&self, type_: &str, on: bool) {
        let now = cleave::operator::decide::now_rfc3339();
        self.patch_status(
            "cassandradatacenters.cassandra.datastax.com",
            "dc1",
            json!({"conditions": [{"type": type_, "status": if on { "True" } else { "False" },
                "reason": if on { "ScalingUpStarted" } else { "ScalingUpFinished" },
                "message": format!("{type_} {on}"), "lastTransitionTime": now}]}),
        );
    }

    /// The rack's restart: each node's Cassandra stops, and the init container's
    /// `apply-pending` publishes what its CleanupJob recorded.
    fn restart(&mut self, rack: &str) {
        for n in self.nodes.iter_mut().filter(|n| n.rack == rack) {
            let api = n.api.take().expect("the node's Cassandra runs");
            drop(api);
            let r = apply_pending_ok(&n.data);
            let jobs = r["jobs"].as_array().unwrap();
            assert_eq!(jobs.len(), 1, "{}: one recorded cleanup: {r}", n.name);
            assert_eq!(jobs[0]["action"], "applied", "{}: {r}", n.name);
        }
    }

    /// What cass-operator writes when a task is done.
    fn complete_task(&self, name: &str) {
        let now = cleave::operator::decide::now_rfc3339();
        self.patch_status(
            "cassandratasks.control.k8ssandra.io",
            name,
            json!({"completionTime": now, "conditions": [{"type": "Complete", "status": "True",
                "reason": "CompletedSuccessfully", "message": "every pod of the rack restarted",
                "lastTransitionTime": now}]}),
        );
    }

    /// Every CleanupJob is the one this resource makes for its node.
    fn check_jobs_shape(&self, jobs: &[Value], uid: &str) {
        for j in jobs {
            let node = node_of(j);
            rack_of(node);
            assert_eq!(j["metadata"]["name"], job_name(DCC, node, "ks"), "{j:#}");
            assert_eq!(j["metadata"]["labels"]["cleave.dev/node"], node, "{j:#}");
            assert_eq!(j["metadata"]["labels"][OWNER_LABEL], uid, "{j:#}");
            assert_eq!(j["spec"]["ownership"], "ManagementApi", "{j:#}");
            assert_eq!(j["spec"]["publish"], "OnRestart", "{j:#}");
            assert_eq!(j["spec"]["keyspace"], "ks", "{j:#}");
            let owner = &j["metadata"]["ownerReferences"][0];
            assert_eq!(owner["kind"], "DatacenterCleanup", "{j:#}");
            assert_eq!(owner["uid"], uid, "{j:#}");
        }
    }

    fn uid(&self) -> String {
        self.dcc().expect("the DatacenterCleanup")["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// Looks at the resource every 300 ms until its phase is `want`, calling `between` after each
/// look that is not; the other final phase fails the test at once (the controller never
/// leaves Complete or Failed). `deadline` counts from `t0`, the test's start.
fn wait_for_phase(
    dc: &mut Dc,
    want: &str,
    t0: Instant,
    deadline: Duration,
    mut between: impl FnMut(&mut Dc),
) -> Value {
    let other = if want == "Complete" {
        "Failed"
    } else {
        "Complete"
    };
    loop {
        assert!(
            t0.elapsed() < deadline,
            "not {want} after {deadline:?}: {:#}\n{}",
            dc.status(),
            dc.logs()
        );
        let st = dc.status();
        assert_ne!(st["phase"], other, "{st:#}\n{}", dc.logs());
        if st["phase"] == want {
            return st;
        }
        between(dc);
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn jobs_of<'a>(jobs: &'a [Value], rack: &str) -> Vec<&'a Value> {
    jobs.iter()
        .filter(|j| rack_of(node_of(j)) == rack)
        .collect()
}

/// Replays the CleanupJobs' history (a [`JobWatch`]): after every change at most `max` jobs
/// of a rack are not settled, and a job of a rack is made only once each node of every
/// rack before it (in `order`) has its job in one of the phases `done`. The nodes in the
/// order their job was made.
fn replay(events: &[(String, Value)], order: [&str; 3], max: usize, done: &[&str]) -> Vec<String> {
    let mut jobs: std::collections::BTreeMap<String, Value> = Default::default();
    let mut made = Vec::new();
    for (i, (kind, job)) in events.iter().enumerate() {
        let name = job["metadata"]["name"].as_str().unwrap().to_string();
        if kind == "DELETED" {
            jobs.remove(&name);
        } else {
            jobs.insert(name, job.clone());
        }
        let now: Vec<Value> = jobs.values().cloned().collect();
        let node = node_of(job);
        if kind == "ADDED" {
            made.push(node.to_string());
            let k = order.iter().position(|r| *r == rack_of(node)).unwrap();
            for earlier in &order[..k] {
                let finished = jobs_of(&now, earlier)
                    .iter()
                    .filter(|j| done.contains(&phase(j)))
                    .count();
                assert_eq!(
                    finished, 2,
                    "event {i}: {node}'s job made before rack {earlier} was {done:?}: {now:#?}"
                );
            }
        }
        for rack in order {
            let busy: Vec<&str> = jobs_of(&now, rack)
                .iter()
                .filter(|j| !SETTLED.contains(&phase(j)))
                .map(|j| node_of(j))
                .collect();
            assert!(
                busy.len() <= max,
                "event {i}: maxConcurrentNodes {max}, yet {busy:?} of rack {rack} run at once: {now:#?}"
            );
        }
    }
    made
}

/// `restart: CassandraTask`, `maxConcurrentNodes: 1`, racks r1, r2, r3: each rack's nodes
/// one at a time, the rack's restart once both are staged, the next rack only once the
/// restart task is complete and the rack's jobs are published. At the end every node's live
/// keys are its owned keys.
#[test]
fn datacenter_cleans_rack_by_rack_with_the_configured_concurrency_and_restarts_each_rack() {
    let test = "datacenter cleanup rack by rack";
    let t0 = Instant::now();
    let Some(mut dc) = Dc::start(
        test,
        Setup {
            racks: ["r1", "r2", "r3"],
            sidecars: &["r1", "r2", "r3"],
            no_keyspace: None,
        },
    ) else {
        return;
    };
    eprintln!("{test}: set up in {:?}", t0.elapsed());
    let want: Vec<(u64, u64, u64)> = (0..NODES.len())
        .map(|i| {
            let t = &dc.nodes[i].table;
            let w = keys_fingerprint(&dc.shared, &data_files(t), &owned(i));
            let all = keys_fingerprint(&dc.shared, &data_files(t), &[]);
            assert!(w.0 > 0 && w.0 < all.0, "node {i} owns some keys, not all");
            w
        })
        .collect();
    dc.cluster.apply(&dcc_yaml(
        "  maxConcurrentNodes: 1\n  restart: CassandraTask\n",
    ));
    let uid = dc.uid();
    let rack_order = dc.racks;
    // The racks whose task this test completed, in order.
    let mut restarted: Vec<&str> = Vec::new();
    // The nodes in the order their job was first seen.
    let mut started: Vec<String> = Vec::new();
    let mut mid_run_listing = String::new();
    let st = wait_for_phase(&mut dc, "Complete", t0, Duration::from_secs(360), |dc| {
        // The jobs' exact history so far, then what one look shows.
        replay(&dc.watch.events(), rack_order, 1, &["Complete"]);
        let jobs = dc.jobs();
        dc.check_jobs_shape(&jobs, &uid);
        for j in &jobs {
            if !started.iter().any(|n| n == node_of(j)) {
                started.push(node_of(j).to_string());
            }
        }
        for (k, rack) in rack_order.iter().enumerate() {
            let of_rack = jobs_of(&jobs, rack);
            let busy: Vec<&str> = of_rack
                .iter()
                .filter(|j| !SETTLED.contains(&phase(j)))
                .map(|j| node_of(j))
                .collect();
            assert!(
                busy.len() <= 1,
                "maxConcurrentNodes 1, yet {busy:?} of rack {rack} run at once: {of_rack:#?}"
            );
            if of_rack.is_empty() {
                continue;
            }
            for earlier in &rack_order[..k] {
                assert!(
                    restarted.contains(earlier),
                    "a job of rack {rack} before rack {earlier}'s restart completed: {jobs:#?}"
                );
                let published = jobs_of(&jobs, earlier)
                    .iter()
                    .filter(|j| phase(j) == "Complete")
                    .count();
                assert_eq!(
                    published, 2,
                    "a job of rack {rack} before rack {earlier} was published: {jobs:#?}"
                );
            }
        }
        let tasks = dc.tasks();
        let new = tasks.iter().find(|t| {
            !restarted
                .iter()
                .any(|r| t["metadata"]["name"] == task_name(DCC, r))
        });
        if let Some(task) = new {
            let rack = rack_order[restarted.len()];
            let name = task_name(DCC, rack);
            assert_eq!(
                tasks.len(),
                restarted.len() + 1,
                "one rack restarts at a time: {tasks:#?}"
            );
            assert_eq!(
                task["metadata"]["name"], name,
                "racks restart in spec order"
            );
            assert_eq!(task["spec"]["datacenter"]["name"], "dc1", "{task:#}");
            let job = &task["spec"]["jobs"][0];
            assert_eq!(job["command"], "restart", "{task:#}");
            assert_eq!(job["args"]["rack"], rack, "{task:#}");
            assert_eq!(job["args"]["fast"], true, "{task:#}");
            assert_eq!(task["metadata"]["ownerReferences"][0]["uid"], uid.as_str());
            // The task comes once every node of the rack is staged, nothing published.
            let jobs = dc.jobs();
            let staged: Vec<&str> = jobs_of(&jobs, rack).iter().map(|j| phase(j)).collect();
            assert_eq!(
                staged,
                ["AwaitingRestart", "AwaitingRestart"],
                "rack {rack} restarts once staged: {jobs:#?}"
            );
            for n in dc.nodes_of(rack) {
                assert_eq!(
                    visible(&n.table),
                    n.before,
                    "{}: nothing live changed yet",
                    n.name
                );
            }
            dc.restart(rack);
            // The sidecars settle their jobs from apply-pending's outcome (every 10 s).
            dc.cluster.wait(
                &format!("rack {rack}'s jobs Complete"),
                Duration::from_secs(90),
                || {
                    let jobs = dc.jobs();
                    let of_rack = jobs_of(&jobs, rack);
                    assert!(of_rack.iter().all(|j| phase(j) != "Failed"), "{of_rack:#?}");
                    of_rack.iter().all(|j| phase(j) == "Complete").then_some(())
                },
            );
            // Published, but the rack is still restarting (cass-operator has not said it is
            // done): nothing moves on, through more than one of the controller's polls.
            let held = Instant::now();
            while held.elapsed() < Duration::from_secs(7) {
                let jobs = dc.jobs();
                for later in &rack_order[restarted.len() + 1..] {
                    assert!(
                        jobs_of(&jobs, later).is_empty(),
                        "rack {later} started while rack {rack}'s restart task runs: {jobs:#?}\n{}",
                        dc.logs()
                    );
                }
                assert_eq!(dc.tasks().len(), restarted.len() + 1);
                let st = dc.status();
                assert_ne!(
                    st["phase"], "Complete",
                    "the last restart still runs: {st:#}"
                );
                assert_eq!(st["currentRack"], rack, "{st:#}");
                std::thread::sleep(Duration::from_millis(500));
            }
            if rack == "r2" {
                mid_run_listing = dc.cluster.ok(&["get", "dcc", "-n", "default"]);
            }
            dc.complete_task(&name);
            restarted.push(rack);
        }
    });
    let took = t0.elapsed();
    assert_eq!(restarted, ["r1", "r2", "r3"]);
    let order: Vec<&str> = NODES.iter().map(|(n, _)| *n).collect();
    assert_eq!(started, order, "nodes started in rack order, one at a time");
    // The exact history: one node of a rack at a time, a rack after the previous one published.
    let made = replay(&dc.watch.events(), rack_order, 1, &["Complete"]);
    assert_eq!(made, order, "one CleanupJob a node, in rack order");
    // The tasks' creation order is the racks' order.
    let mut tasks = dc.tasks();
    tasks.sort_by_key(|t| {
        t["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .to_string()
    });
    let by_time: Vec<&str> = tasks
        .iter()
        .map(|t| t["spec"]["jobs"][0]["args"]["rack"].as_str().unwrap())
        .collect();
    assert_eq!(by_time, ["r1", "r2", "r3"]);

    // Status.
    let n = &st["nodes"];
    assert_eq!(
        (
            &n["total"],
            &n["published"],
            &n["staged"],
            &n["running"],
            &n["failed"]
        ),
        (&json!(6), &json!(6), &json!(0), &json!(0), &json!(0)),
        "{st:#}"
    );
    assert_eq!(n["summary"], "6/6 published, 0 staged, 0 failed");
    assert_eq!(condition(&st, "Complete")["status"], "True", "{st:#}");
    assert!(st["completionTime"].is_string() && st["startTime"].is_string());
    let racks: Vec<Value> = ["r1", "r2", "r3"]
        .iter()
        .map(|r| json!({"name": r, "state": "Done", "restartTask": task_name(DCC, r)}))
        .collect();
    assert_eq!(st["racks"], json!(racks), "{st:#}");
    for (node, rack) in NODES {
        let ns = st["nodeStatuses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["node"] == node)
            .unwrap_or_else(|| panic!("{node} in {st:#}"));
        assert_eq!(ns["rack"], rack);
        assert_eq!(ns["state"], "Published", "{ns}");
        assert_eq!(ns["jobs"], json!([job_name(DCC, node, "ks")]), "{ns}");
    }

    // Every node's live keys are its owned keys.
    for (i, node) in dc.nodes.iter().enumerate() {
        let live = data_files(&node.table);
        assert!(
            !live
                .iter()
                .any(|p| p.ends_with("nb-1-big-Data.db") || p.ends_with("nb-2-big-Data.db")),
            "{}: a parent is still live: {live:?}",
            node.name
        );
        assert_eq!(
            keys_fingerprint(&dc.shared, &live, &[]),
            want[i],
            "{}: live keys = owned keys",
            node.name
        );
        assert!(
            eventually(Duration::from_secs(20), || !node
                .table
                .join(".cleave-pending")
                .exists()),
            "{}: the outcome was acknowledged: {:?}",
            node.name,
            names(&node.table)
        );
    }

    // Events on the resource: the nodes as they started, one a step, and the restarts.
    let events: Value = serde_json::from_str(&dc.cluster.ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        "default",
        "-o",
        "json",
    ]))
    .unwrap();
    let ours: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["kind"] == "DatacenterCleanup" && e["regarding"]["name"] == DCC)
        .collect();
    // kube-runtime's Recorder folds repeats of one reason into a series (`series.count`,
    // the first note kept): how often each was published, and the notes it kept.
    let of = |reason: &str| -> (u64, Vec<String>) {
        let mut v: Vec<(String, u64, String)> = ours
            .iter()
            .filter(|e| e["reason"] == reason)
            .map(|e| {
                (
                    e["eventTime"].as_str().unwrap_or("").to_string(),
                    e["series"]["count"].as_u64().unwrap_or(1),
                    e["note"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        v.sort();
        (
            v.iter().map(|e| e.1).sum(),
            v.into_iter().map(|e| e.2).collect(),
        )
    };
    let (n, notes) = of("NodesStarted");
    assert_eq!(n, 6, "one node a step: {ours:#?}");
    assert_eq!(
        notes[0], "rack r1: CleanupJobs for dc1-r1-sts-0",
        "{ours:#?}"
    );
    let (n, notes) = of("RackRestart");
    assert_eq!(n, 3, "{ours:#?}");
    assert_eq!(
        notes[0],
        format!(
            "rack r1 is staged: CassandraTask {} restarts it",
            task_name(DCC, "r1")
        ),
        "{ours:#?}"
    );
    assert_eq!(of("Complete").0, 1, "{ours:#?}");
    assert_eq!(of("Failed").0, 0, "{ours:#?}");

    // kubectl get: Datacenter, Phase, Nodes, Rack.
    let mid: Vec<&str> = mid_run_listing.lines().collect();
    assert_eq!(mid.len(), 2, "{mid_run_listing}");
    for col in [
        "NAME",
        "DATACENTER",
        "PHASE",
        "NODES",
        "RACK",
        "REASON",
        "AGE",
    ] {
        assert!(
            mid[0].split_whitespace().any(|c| c == col),
            "{mid_run_listing}"
        );
    }
    assert!(
        mid[1].starts_with("dcc ")
            && mid[1].contains(" dc1 ")
            && mid[1].contains(" AwaitingRestart ")
            && mid[1].contains(" 4/6 published, 0 staged, 0 failed ")
            && mid[1].contains(" r2 "),
        "{mid_run_listing}"
    );
    let end = dc.cluster.ok(&["get", "dcc", "-n", "default"]);
    let row = end.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains(" dc1 ")
            && row.contains(" Complete ")
            && row.contains(" 6/6 published, 0 staged, 0 failed "),
        "{end}"
    );
    eprintln!(
        "{test}: Complete {took:?} after the start, {:?} in all",
        t0.elapsed()
    );
}

/// `failurePolicy` StopBeforeNextRack (the default), `maxConcurrentNodes` 1 (the default):
/// the second node of rack r1 has no directory for the keyspace (`KeyspaceNotFound`). The
/// cleanup fails with that node's reason, naming it and its rack; no CleanupJob of r2 or r3
/// is ever made, and r1 is not restarted (its first node stays staged for its next restart).
#[test]
fn datacenter_a_failed_node_stops_the_next_rack() {
    let test = "datacenter cleanup stops at a failed node";
    let t0 = Instant::now();
    let bad = "dc1-r1-sts-1";
    let Some(mut dc) = Dc::start(
        test,
        Setup {
            racks: ["r1", "r2", "r3"],
            sidecars: &["r1"],
            no_keyspace: Some(bad),
        },
    ) else {
        return;
    };
    dc.cluster.apply(&dcc_yaml("  restart: CassandraTask\n"));
    let uid = dc.uid();
    let check = |dc: &Dc, what: &str| {
        let jobs = dc.jobs();
        dc.check_jobs_shape(&jobs, &uid);
        for rack in ["r2", "r3"] {
            assert!(
                jobs_of(&jobs, rack).is_empty(),
                "{what}: a CleanupJob of rack {rack}: {jobs:#?}\n{}",
                dc.logs()
            );
        }
        let tasks = dc.tasks();
        assert!(tasks.is_empty(), "{what}: a rack restart: {tasks:#?}");
    };
    check(&dc, "while r1 runs");
    wait_for_phase(&mut dc, "Failed", t0, Duration::from_secs(240), |dc| {
        check(dc, "while r1 runs")
    });
    let failed_at = Instant::now();
    // Failed is final: more than two of the controller's polls later, still nothing new.
    while failed_at.elapsed() < Duration::from_secs(12) {
        check(&dc, "after Failed");
        std::thread::sleep(Duration::from_millis(500));
    }
    // Nor did one exist for a moment between two looks.
    let events = dc.watch.events();
    assert!(!events.is_empty());
    for (_, j) in &events {
        assert_eq!(
            rack_of(node_of(j)),
            "r1",
            "a CleanupJob of another rack: {j:#}"
        );
    }
    let st = dc.status();
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert_eq!(st["reason"], "KeyspaceNotFound", "{st:#}");
    let message = st["message"].as_str().unwrap();
    assert!(
        message.contains(bad) && message.contains("rack r1"),
        "the message names the node and its rack: {message}"
    );
    let failed = condition(&st, "Failed");
    assert_eq!(
        (&failed["status"], &failed["reason"]),
        (&json!("True"), &json!("KeyspaceNotFound")),
        "{st:#}"
    );
    let n = &st["nodes"];
    assert_eq!(
        (&n["total"], &n["staged"], &n["failed"], &n["published"]),
        (&json!(6), &json!(1), &json!(1), &json!(0)),
        "{st:#}"
    );
    let state = |node: &str| -> Value {
        st["nodeStatuses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["node"] == node)
            .cloned()
            .unwrap_or_else(|| panic!("{node} in {st:#}"))
    };
    assert_eq!(state("dc1-r1-sts-0")["state"], "Staged", "{st:#}");
    let b = state(bad);
    assert_eq!(
        (&b["state"], &b["reason"]),
        (&json!("Failed"), &json!("KeyspaceNotFound"))
    );
    for node in [
        "dc1-r2-sts-0",
        "dc1-r2-sts-1",
        "dc1-r3-sts-0",
        "dc1-r3-sts-1",
    ] {
        assert_eq!(state(node)["state"], "Pending", "{st:#}");
    }
    // The failed node's job is what the status reports.
    let job = dc
        .cluster
        .get("cleanupjob", &job_name(DCC, bad, "ks"))
        .expect("the failed node's CleanupJob");
    assert_eq!(job["status"]["reason"], "KeyspaceNotFound", "{job:#}");
    // Nothing live changed anywhere (the staged node publishes only at a restart).
    for n in &dc.nodes {
        assert_eq!(visible(&n.table), n.before, "{}", n.name);
    }
    let events: Value = serde_json::from_str(&dc.cluster.ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        "default",
        "-o",
        "json",
    ]))
    .unwrap();
    let warned = events["items"].as_array().unwrap().iter().any(|e| {
        e["regarding"]["name"] == DCC
            && e["type"] == "Warning"
            && e["reason"] == "Failed"
            && e["note"].as_str().unwrap_or("").contains(bad)
    });
    assert!(warned, "a Warning event names the node: {events:#}");
    eprintln!("{test}: {:?}", t0.elapsed());
}

/// `restart: None`, `maxConcurrentNodes` 2, the racks listed r2, r1, r3 in the
/// CassandraDatacenter (the spec's order, not the names'). While cass-operator says
/// `ScalingUp` the cleanup waits (`Waiting`/`RingChanging`, no CleanupJob); once it is False
/// it resumes with r2. Once r2 is staged the resource is deleted: its CleanupJobs go, each
/// node's sidecar withdraws what it recorded or was making (no `.cleave-pending` or staging
/// is left, no live file changed), and the resource goes. r1 may be staged or still running
/// by then; r3's nodes have no sidecar (pods being rescheduled, say): a job of theirs, if
/// one was made, has no finalizer and must not hold the deletion.
#[test]
fn datacenter_a_ring_change_pauses_and_deleting_withdraws_what_was_not_published() {
    let test = "datacenter cleanup paused by a ring change, then deleted";
    let t0 = Instant::now();
    let Some(mut dc) = Dc::start(
        test,
        Setup {
            racks: ["r2", "r1", "r3"],
            sidecars: &["r2", "r1"],
            no_keyspace: None,
        },
    ) else {
        return;
    };
    dc.set_dc_condition("ScalingUp", true);
    dc.cluster
        .apply(&dcc_yaml("  maxConcurrentNodes: 2\n  restart: None\n"));
    let st = dc
        .cluster
        .wait("Waiting/RingChanging", Duration::from_secs(60), || {
            let st = dc.status();
            (condition(&st, "Waiting")["status"] == "True").then_some(st)
        });
    let waiting = condition(&st, "Waiting");
    assert_eq!(waiting["reason"], "RingChanging", "{st:#}");
    assert!(
        waiting["message"].as_str().unwrap().contains("ScalingUp"),
        "{st:#}"
    );
    assert_eq!(st["phase"], "Running", "paused is not failed: {st:#}");
    assert_eq!(st["currentRack"], "r2", "the spec's first rack: {st:#}");
    // Paused, through more than one of the controller's polls.
    let paused = Instant::now();
    while paused.elapsed() < Duration::from_secs(7) {
        let jobs = dc.jobs();
        assert!(
            jobs.is_empty(),
            "a CleanupJob while the ring changes: {jobs:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let events = dc.watch.events();
    assert!(
        events.is_empty(),
        "a CleanupJob while the ring changed: {events:#?}"
    );
    dc.set_dc_condition("ScalingUp", false);
    let uid = dc.uid();
    // The order is checked on the jobs' history below ([`replay`]): the status may lag
    // the jobs by a step.
    dc.cluster
        .wait("rack r2 staged", Duration::from_secs(120), || {
            let jobs = dc.jobs();
            dc.check_jobs_shape(&jobs, &uid);
            let st = dc.status();
            assert_ne!(st["phase"], "Failed", "{st:#}\n{}", dc.logs());
            let staged = jobs_of(&jobs, "r2")
                .iter()
                .filter(|j| phase(j) == "AwaitingRestart")
                .count();
            (staged == 2).then_some(())
        });
    let st = dc
        .cluster
        .wait("the status: r2 staged", Duration::from_secs(30), || {
            let st = dc.status();
            let r2_staged = st["nodeStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["rack"] == "r2" && s["state"] == "Staged")
                .count();
            (r2_staged == 2).then_some(st)
        });
    assert_eq!(
        condition(&st, "Waiting")["status"],
        "False",
        "resumed: {st:#}"
    );
    // Both r2 nodes at once (maxConcurrentNodes 2): the second job was made before the
    // first settled.
    let events = dc.watch.events();
    let first_settled = events
        .iter()
        .position(|(_, j)| SETTLED.contains(&phase(j)))
        .unwrap();
    let added_r2 = events
        .iter()
        .take(first_settled)
        .filter(|(k, j)| k == "ADDED" && rack_of(node_of(j)) == "r2")
        .count();
    assert_eq!(added_r2, 2, "{events:#?}");
    for n in &dc.nodes {
        assert_eq!(
            visible(&n.table),
            n.before,
            "{}: nothing live changed",
            n.name
        );
    }
    for n in dc.nodes_of("r2") {
        assert!(
            n.table.join(".cleave-pending").is_dir(),
            "{}: the staged cleanup is recorded: {:?}",
            n.name,
            names(&n.table)
        );
    }

    // r2 first (the spec's first rack), both its nodes at once, r1 only once r2 is staged.
    let made = replay(
        &dc.watch.events(),
        ["r2", "r1", "r3"],
        2,
        &["AwaitingRestart"],
    );
    assert_eq!(made[..2], ["dc1-r2-sts-0", "dc1-r2-sts-1"], "{made:?}");

    // Deleted while r2 is staged and r1 has started (or is about to).
    let at_delete: Vec<(String, String)> = dc
        .jobs()
        .iter()
        .map(|j| (node_of(j).to_string(), phase(j).to_string()))
        .collect();
    eprintln!("{test}: deleting with the CleanupJobs {at_delete:?}");
    dc.cluster.ok(&[
        "delete",
        "datacentercleanups.cleave.dev",
        DCC,
        "-n",
        "default",
        "--wait=false",
    ]);
    dc.cluster.wait(
        "the DatacenterCleanup gone",
        Duration::from_secs(120),
        || dc.dcc().is_none().then_some(()),
    );
    let left = dc.jobs();
    assert!(
        left.is_empty(),
        "CleanupJobs left: {left:#?}\n{}",
        dc.logs()
    );
    for n in &dc.nodes {
        assert!(
            eventually(Duration::from_secs(20), || cleave_entries(&n.table)
                .is_empty()),
            "{}: the recorded (or half-made) cleanup is withdrawn: {:?}",
            n.name,
            names(&n.table)
        );
        assert_eq!(
            visible(&n.table),
            n.before,
            "{}: no live file changed",
            n.name
        );
    }
    // A restart of every node now publishes nothing.
    for n in &mut dc.nodes {
        drop(n.api.take());
        let r = apply_pending_ok(&n.data);
        assert_eq!(r["jobs"], json!([]), "{}: nothing to publish: {r}", n.name);
        assert_eq!(visible(&n.table), n.before, "{}", n.name);
    }
    eprintln!("{test}: {:?}", t0.elapsed());
}
