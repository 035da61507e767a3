//! End to end against a REAL kube-apiserver + etcd + kube-controller-manager on loopback
//! (`scripts/k8s-testenv.sh`; `scripts/test.sh` installs it): CRDs applied, the sidecar
//! started as a process, AnticompactionJobs and RangeStreams created with kubectl.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/k8s-testenv.sh")
}

fn cache_bin() -> PathBuf {
    let base = std::env::var_os("CLEAVE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/cleave")
        });
    base.join("k8s-1.20.2/bin")
}

struct Cluster {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(script())
            .arg("start")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kubeconfig = dir.path().join("kubeconfig");
        Cluster { dir, kubeconfig }
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(cache_bin().join("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let o = self.kubectl(args);
        assert!(
            o.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).to_string()
    }

    fn apply(&self, yaml: &str) {
        let p = self
            .dir
            .path()
            .join(format!("m-{}.yaml", uuid::Uuid::new_v4().simple()));
        std::fs::write(&p, yaml).unwrap();
        self.ok(&["apply", "--server-side", "-f", p.to_str().unwrap()]);
    }

    fn get(&self, kind: &str, name: &str) -> Option<serde_json::Value> {
        let o = self.kubectl(&["get", kind, name, "-n", "default", "-o", "json"]);
        o.status
            .success()
            .then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    fn wait<T>(&self, what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
        let t = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                t.elapsed() < timeout,
                "timed out after {timeout:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn phase(&self, kind: &str, name: &str) -> Option<String> {
        self.get(kind, name)
            .and_then(|o| o["status"]["phase"].as_str().map(str::to_string))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

fn sidecar(c: &Cluster, data: &Path, port: u16, crash: Option<&str>) -> KillOnDrop {
    let mut cmd = Command::new(cleave_bin());
    cmd.args([
        "run",
        "--node",
        "n1",
        "--namespace",
        "default",
        "--kubeconfig",
    ])
    .arg(&c.kubeconfig)
    .arg("--data-dir")
    .arg(data)
    .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if let Some(p) = crash {
        cmd.env("CLEAVE_CRASH_AT", p);
    }
    KillOnDrop(cmd.spawn().unwrap())
}

fn job(name: &str, node: &str, extra: &str) -> String {
    format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{cleave.dev/node: {node}}}\nspec:\n  nodeName: {node}\n  keyspace: ks\n  ranges:\n    - {{start: \"-9223372036854775808\", end: \"0\"}}\n{extra}"
    )
}

const TABLE: &str = "t-0123456789abcdef0123456789abcdef";

#[test]
fn operator_end_to_end_on_a_real_apiserver() {
    let Some(shared) = corpus_or_skip("kube e2e") else {
        return;
    };
    if !cache_bin().join("kube-apiserver").is_file() {
        eprintln!("SKIP kube e2e: no control plane in {} (scripts/k8s-testenv.sh install; scripts/test.sh does it)", cache_bin().display());
        return;
    }
    let cluster = Cluster::start();
    cluster.ok(&[
        "apply",
        "--server-side",
        "-f",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crds/cleave.dev.yaml")
            .to_str()
            .unwrap(),
    ]);
    cluster.ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/anticompactionjobs.cleave.dev",
        "crd/rangestreams.cleave.dev",
    ]);

    // The node's data directory: on a loop XFS when we can mount one.
    let xfs = cleave::io::loopfs::unavailable_reason().is_none().then(|| {
        cleave::io::loopfs::LoopMount::new(&std::env::temp_dir(), 1 << 30, "xfs").unwrap()
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = xfs
        .as_ref()
        .map_or(tmp.path().to_path_buf(), |m| m.mount_point.clone());
    let data = root.join("data");
    let table = data.join("ks").join(TABLE);
    std::fs::create_dir_all(&table).unwrap();
    for g in 1..=3 {
        let gs = g.to_string();
        cleave_json(&[
            "gen".as_ref(),
            "--out".as_ref(),
            table.as_os_str(),
            "--size".as_ref(),
            "16MiB".as_ref(),
            "--generation".as_ref(),
            gs.as_ref(),
            "--seed".as_ref(),
            gs.as_ref(),
            "--json".as_ref(),
        ]);
    }
    let _ = std::fs::remove_file(table.join("schema.cql"));
    let parents: Vec<Vec<u8>> = (1..=3)
        .map(|g| std::fs::read(table.join(format!("nb-{g}-big-Data.db"))).unwrap())
        .collect();

    let port = free_port();
    let s = sidecar(&cluster, &data, port, None);
    cluster.wait("readyz", Duration::from_secs(30), || {
        http_get(port, "/readyz").filter(|r| r.starts_with("HTTP/1.1 200"))
    });

    // A job for this node completes, with status, an Event, metrics and valid children.
    cluster.apply(&job(
        "j1",
        "n1",
        "  pendingRepair: 6a3f4c2e-1d2b-11ef-9c4e-0242ac120002\n  digest: Combine\n",
    ));
    cluster.apply(&job("other", "n2", "  repairedAt: 1700000000000\n"));
    cluster.apply(&job(
        "bad",
        "n1",
        "  repairedAt: 1700000000000\n  pendingRepair: 6a3f4c2e-1d2b-11ef-9c4e-0242ac120002\n",
    ));
    cluster.wait("j1 Complete", Duration::from_secs(120), || {
        cluster
            .phase("anticompactionjob", "j1")
            .filter(|p| p == "Complete")
    });
    let j1 = cluster.get("anticompactionjob", "j1").unwrap();
    let st = &j1["status"];
    assert_eq!(st["progress"]["sstablesDone"], 3, "{st}");
    assert_eq!(st["progress"]["sstablesTotal"], 3);
    assert_eq!(st["observedGeneration"], j1["metadata"]["generation"]);
    assert!(st["startTime"].is_string() && st["completionTime"].is_string());
    let cond = |t: &str| {
        st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
    };
    assert_eq!(cond("Complete").unwrap()["status"], "True");
    assert_eq!(cond("Running").unwrap()["status"], "False");
    assert!(j1["metadata"]["finalizers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "cleave.dev/cleanup"));
    let children: Vec<PathBuf> = st["results"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["children"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| PathBuf::from(c.as_str().unwrap()))
        })
        .collect();
    assert_eq!(children.len(), 6);
    sstcheck_all(&shared, &children);
    if xfs.is_some() {
        assert!(
            st["progress"]["bytesShared"].as_u64().unwrap() > 0,
            "on XFS the children share: {st}"
        );
    }
    let events: serde_json::Value = serde_json::from_str(&cluster.ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        "default",
        "-o",
        "json",
    ]))
    .unwrap();
    let reasons: Vec<String> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["regarding"]["name"] == "j1")
        .map(|e| e["reason"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        reasons.iter().any(|r| r == "Completed"),
        "events for j1: {reasons:?}"
    );
    let metrics = http_get(port, "/metrics").unwrap();
    assert!(
        metrics.contains("cleave_jobs{kind=\"AnticompactionJob\",phase=\"Complete\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("cleave_sstables_total{kind=\"AnticompactionJob\",result=\"split\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("cleave_job_progress_ratio{kind=\"AnticompactionJob\",name=\"j1\",namespace=\"default\"} 1"), "{metrics}");

    // An invalid job fails with a reason; another node's job is not touched at all.
    cluster.wait("bad Failed", Duration::from_secs(30), || {
        cluster
            .phase("anticompactionjob", "bad")
            .filter(|p| p == "Failed")
    });
    assert_eq!(
        cluster.get("anticompactionjob", "bad").unwrap()["status"]["reason"],
        "InvalidRepairMetadata"
    );
    std::thread::sleep(Duration::from_secs(2));
    let other = cluster.get("anticompactionjob", "other").unwrap();
    assert!(other.get("status").is_none_or(|s| s.is_null()), "{other}");
    assert!(other["metadata"]["finalizers"].is_null(), "{other}");

    // Conditions are a list-map: two field managers' conditions merge under server-side apply.
    let status_doc = |t: &str| {
        format!("apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: other\n  namespace: default\nstatus:\n  conditions:\n  - {{type: {t}, status: \"True\", lastTransitionTime: \"2026-01-01T00:00:00Z\", reason: R, message: m}}\n")
    };
    for (mgr, t) in [("auditor", "Audited"), ("checker", "Checked")] {
        let p = cluster.dir.path().join(format!("{mgr}.yaml"));
        std::fs::write(&p, status_doc(t)).unwrap();
        cluster.ok(&[
            "apply",
            "--validate=false",
            "--server-side",
            "--subresource=status",
            "--field-manager",
            mgr,
            "-f",
            p.to_str().unwrap(),
        ]);
    }
    let other = cluster.get("anticompactionjob", "other").unwrap();
    let types: Vec<&str> = other["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types.len(),
        2,
        "list-map merge keeps both managers' conditions: {types:?}"
    );

    // RangeStream: accepted and validated.
    cluster.apply("apiVersion: cleave.dev/v1alpha1\nkind: RangeStream\nmetadata:\n  name: rs1\n  namespace: default\nspec:\n  sourceNode: n1\n  destination: {nodeName: n2, endpoint: \"10.0.0.2:9042\"}\n  keyspace: ks\n  ranges:\n    - {start: \"0\", end: \"100\"}\n");
    cluster.apply("apiVersion: cleave.dev/v1alpha1\nkind: RangeStream\nmetadata:\n  name: rs2\n  namespace: default\nspec:\n  sourceNode: n1\n  destination: {nodeName: n2, endpoint: \"nowhere\"}\n  keyspace: ks\n  ranges:\n    - {start: \"0\", end: \"100\"}\n");
    cluster.wait("rs1 accepted", Duration::from_secs(30), || {
        cluster
            .phase("rangestream", "rs1")
            .filter(|p| p == "Pending")
    });
    cluster.wait("rs2 failed", Duration::from_secs(30), || {
        cluster
            .phase("rangestream", "rs2")
            .filter(|p| p == "Failed")
    });

    // Deleting a job runs the finalizer: this node's leftovers of it are removed.
    let leftover = table.join("cleave-staged/j1/.cleave-staging-leftover");
    std::fs::create_dir_all(&leftover).unwrap();
    cluster.ok(&[
        "delete",
        "anticompactionjob",
        "j1",
        "-n",
        "default",
        "--wait=true",
        "--timeout=60s",
    ]);
    assert!(cluster.get("anticompactionjob", "j1").is_none());
    assert!(
        !leftover.exists(),
        "the finalizer removed the job's staging leftovers"
    );

    // Kill the controller mid-job (it aborts right after recording the first sstable); a
    // restarted one takes the job over once the lease expires and completes it. Parents are
    // intact and nothing is left in staging.
    drop(s);
    let crashing = sidecar(&cluster, &data, port, Some("job-after-first"));
    cluster.apply(&job("j2", "n1", "  repairedAt: 1700000000000\n  sstables: [nb-1-big-Data.db, nb-2-big-Data.db, nb-3-big-Data.db]\n"));
    let mut crashing = crashing;
    cluster.wait("the injected crash", Duration::from_secs(60), || {
        crashing.0.try_wait().unwrap()
    });
    let j2 = cluster.get("anticompactionjob", "j2").unwrap();
    assert_eq!(j2["status"]["phase"], "Running", "{j2}");
    assert_eq!(j2["status"]["progress"]["sstablesDone"], 1);
    assert!(
        j2["status"]["worker"].is_object(),
        "a live-looking lease is left behind: {j2}"
    );
    let _s2 = sidecar(&cluster, &data, free_port(), None);
    cluster.wait(
        "j2 Complete after takeover",
        Duration::from_secs(120),
        || {
            cluster
                .phase("anticompactionjob", "j2")
                .filter(|p| p == "Complete")
        },
    );
    let j2 = cluster.get("anticompactionjob", "j2").unwrap();
    assert_eq!(j2["status"]["results"].as_array().unwrap().len(), 3, "{j2}");
    assert!(j2["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Complete" && c["status"] == "True"));
    for (g, bytes) in parents.iter().enumerate() {
        assert_eq!(
            &std::fs::read(table.join(format!("nb-{}-big-Data.db", g + 1))).unwrap(),
            bytes,
            "parent {} intact",
            g + 1
        );
    }
    let staged = table.join("cleave-staged/j2");
    let orphans: Vec<String> = std::fs::read_dir(&staged)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".cleave-staging"))
        .collect();
    assert!(orphans.is_empty(), "orphans: {orphans:?}");
    let kids: Vec<PathBuf> = j2["status"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["children"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| PathBuf::from(c.as_str().unwrap()))
        })
        .collect();
    sstcheck_all(&shared, &kids);
}
