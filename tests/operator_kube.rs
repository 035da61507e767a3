//! End to end against a REAL kube-apiserver + etcd + kube-controller-manager on loopback
//! (`scripts/k8s-testenv.sh`; `scripts/test.sh` installs it): CRDs applied, the sidecar
//! started as a process, AnticompactionJobs and RangeStreams created with kubectl.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::k8s::*;
use common::*;

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
    // Invalid in a way only the controller sees (the schema refuses both markers, an empty
    // range list, ...: tests/crd_admission.rs): full and transient ranges overlap.
    cluster.apply(&job(
        "bad",
        "n1",
        "  pendingRepair: 6a3f4c2e-1d2b-11ef-9c4e-0242ac120002\n  transientRanges:\n    - {start: \"-100\", end: \"100\"}\n",
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
        "InvalidRange"
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

    // RangeStreams: a valid one is executed by its source node (this sidecar has no stream
    // client credentials, so it fails Unauthorized; tests/stream_kube.rs sends for real),
    // an invalid one fails validation (a port the schema's `host:port` pattern admits, but
    // not a u16).
    cluster.apply("apiVersion: cleave.dev/v1alpha1\nkind: RangeStream\nmetadata:\n  name: rs1\n  namespace: default\nspec:\n  sourceNode: n1\n  destination: {nodeName: n2, endpoint: \"10.0.0.2:9042\"}\n  keyspace: ks\n  ranges:\n    - {start: \"0\", end: \"100\"}\n");
    cluster.apply("apiVersion: cleave.dev/v1alpha1\nkind: RangeStream\nmetadata:\n  name: rs2\n  namespace: default\nspec:\n  sourceNode: n1\n  destination: {nodeName: n2, endpoint: \"10.0.0.2:99999\"}\n  keyspace: ks\n  ranges:\n    - {start: \"0\", end: \"100\"}\n");
    cluster.wait("rs1 executed", Duration::from_secs(30), || {
        cluster
            .get("rangestream", "rs1")
            .filter(|s| s["status"]["reason"] == "Unauthorized")
    });
    cluster.wait("rs2 failed", Duration::from_secs(30), || {
        cluster
            .get("rangestream", "rs2")
            .filter(|s| s["status"]["phase"] == "Failed" && s["status"]["reason"] == "InvalidSpec")
    });

    // Deleting a job runs the finalizer: this node's leftovers of it are removed.
    let leftover = table.join("cleave-staged/j1/ks/t/.cleave-staging-leftover");
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
    let staged = table.join("cleave-staged/j2/ks/t");
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

fn kube_client(kubeconfig: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let rt = tokio::runtime::Handle::current();
    rt.block_on(async {
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(cfg).unwrap()
    })
}

/// A sidecar with extra flags and its stderr kept in a file.
fn sidecar_with(
    c: &Cluster,
    kubeconfig: &Path,
    node: &str,
    data: &Path,
    port: u16,
    flags: &[&str],
    wrap: &[&str],
) -> (KillOnDrop, PathBuf) {
    let log = c.dir.path().join(format!("sidecar-{node}-{port}.log"));
    let mut cmd = match wrap.split_first() {
        Some((w, rest)) => {
            let mut c = Command::new(w);
            c.args(rest).arg(cleave_bin());
            c
        }
        None => Command::new(cleave_bin()),
    };
    cmd.args([
        "run",
        "--node",
        node,
        "--namespace",
        "default",
        "--kubeconfig",
    ])
    .arg(kubeconfig)
    .arg("--data-dir")
    .arg(data)
    .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
    .args(flags)
    .stdout(Stdio::null())
    .stderr(std::fs::File::create(&log).unwrap());
    (KillOnDrop(cmd.spawn().unwrap()), log)
}

fn condition(o: &serde_json::Value, t: &str) -> Option<serde_json::Value> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .cloned()
}

fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Issue 9 on a real apiserver: broken RBAC is visible, the lease and finalizer races,
/// a throttled job's rate, one job per table, the space pre-flight, Replace refused
/// without process visibility.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn production_conventions_on_a_real_apiserver() {
    if corpus_or_skip("kube conventions e2e").is_none() {
        return;
    }
    if !cache_bin().join("kube-apiserver").is_file() {
        eprintln!(
            "SKIP kube conventions e2e: no control plane in {} (scripts/k8s-testenv.sh install)",
            cache_bin().display()
        );
        return;
    }
    tokio::task::block_in_place(conventions);
}

fn conventions() {
    use cleave::operator::controller::{remove_finalizer, KubeStore, FINALIZER};
    use cleave::operator::core::{reconcile, Ctx};
    use cleave::operator::crd::AnticompactionJob;
    use cleave::operator::metrics::Metrics;
    use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

    let cluster = Cluster::start();
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/cleave.dev.yaml");
    cluster.ok(&["apply", "--server-side", "-f", crds.to_str().unwrap()]);
    cluster.ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/anticompactionjobs.cleave.dev",
        "crd/rangestreams.cleave.dev",
    ]);
    let rt = tokio::runtime::Handle::current();
    let client = kube_client(&cluster.kubeconfig);
    let api: Api<AnticompactionJob> = Api::namespaced(client.clone(), "default");

    // 1. Broken RBAC: a ServiceAccount that may get but not list the jobs. The sidecar stays
    //    not ready and says why.
    cluster.ok(&["create", "serviceaccount", "norbac", "-n", "default"]);
    cluster.ok(&[
        "create",
        "role",
        "get-only",
        "-n",
        "default",
        "--verb=get",
        "--resource=anticompactionjobs.cleave.dev,rangestreams.cleave.dev",
    ]);
    cluster.ok(&[
        "create",
        "rolebinding",
        "get-only",
        "-n",
        "default",
        "--role=get-only",
        "--serviceaccount=default:norbac",
    ]);
    let secret = cluster.wait("the SA token secret", Duration::from_secs(60), || {
        let s = cluster.ok(&[
            "get",
            "sa",
            "norbac",
            "-n",
            "default",
            "-o",
            "jsonpath={.secrets[0].name}",
        ]);
        (!s.trim().is_empty()).then(|| s.trim().to_string())
    });
    let b64 = cluster.ok(&[
        "get",
        "secret",
        &secret,
        "-n",
        "default",
        "-o",
        "jsonpath={.data.token}",
    ]);
    let out = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        out.stdin
            .as_ref()
            .unwrap()
            .write_all(b64.trim().as_bytes())
            .unwrap();
    }
    let token = String::from_utf8(out.wait_with_output().unwrap().stdout).unwrap();
    let admin = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
    let sa_kc = cluster.dir.path().join("norbac.kubeconfig");
    std::fs::write(
        &sa_kc,
        admin
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("token:") {
                    format!("    token: {}", token.trim())
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let empty = tempfile::tempdir().unwrap();
    let port = free_port();
    let (rbac, rbac_log) = sidecar_with(&cluster, &sa_kc, "n9", empty.path(), port, &[], &[]);
    cluster.wait(
        "an explained RBAC error in the log",
        Duration::from_secs(30),
        || {
            let log = std::fs::read_to_string(&rbac_log).unwrap_or_default();
            (log.contains("forbidden") && log.contains("needs get, list, watch")).then_some(())
        },
    );
    assert!(http_get(port, "/healthz")
        .unwrap()
        .starts_with("HTTP/1.1 200"));
    let r = http_get(port, "/readyz").unwrap();
    assert!(r.starts_with("HTTP/1.1 503"), "{r}");
    let m = http_get(port, "/metrics?x=1").unwrap();
    assert!(
        m.starts_with("HTTP/1.1 200") && m.contains("process_cpu_seconds_total"),
        "{m}"
    );
    drop(rbac);

    // 2. The lease race: two controllers see the same job with a stale lease; the apiserver
    //    lets exactly one claim it (409 to the other), 50 times.
    let stale = r#"{"phase":"Running","worker":{"identity":"n1/1/1","heartbeatTime":"2020-01-01T00:00:00Z"},"progress":{"sstablesTotal":1,"sstablesDone":0,"bytesPlanned":0,"bytesShared":0,"bytesCopied":0,"bytesReencoded":0,"partitions":0}}"#;
    let mk_ctx = |who: &str| {
        let mut c = Ctx::new(
            KubeStore::new(client.clone(), "n1"),
            "n1",
            empty.path().join("missing"),
            Metrics::new().unwrap(),
        );
        c.identity = format!("n1/{who}");
        c.store.field_manager = format!("cleave-n1-{who}");
        Arc::new(c)
    };
    let (a, b) = (mk_ctx("a"), mk_ctx("b"));
    let runs = |c: &Arc<Ctx<KubeStore>>| {
        metric(
            &c.metrics.render(),
            "cleave_job_duration_seconds_count{kind=\"AnticompactionJob\",result=\"failed\"}",
        )
        .unwrap_or(0.0) as u32
    };
    for i in 0..50 {
        let name = format!("race-{i}");
        let j: AnticompactionJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "cleave.dev/v1alpha1", "kind": "AnticompactionJob",
            "metadata": {"name": name, "namespace": "default", "labels": {"cleave.dev/node": "n1"}},
            "spec": {"nodeName": "n1", "keyspace": "ks", "repairedAt": 1700000000000i64,
                     "ranges": [{"start": "0", "end": "100"}]},
        }))
        .unwrap();
        let seen = rt.block_on(async {
            api.create(&PostParams::default(), &j).await.unwrap();
            let st: serde_json::Value = serde_json::from_str(stale).unwrap();
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": st})),
            )
            .await
            .unwrap()
        });
        let seen = Arc::new(seen);
        let (ra, rb) = rt.block_on(async {
            tokio::join!(
                reconcile(seen.clone(), a.clone()),
                reconcile(seen.clone(), b.clone())
            )
        });
        ra.unwrap();
        rb.unwrap();
        rt.block_on(async {
            assert!(
                a.runs.wait_idle(Duration::from_secs(30)).await
                    && b.runs.wait_idle(Duration::from_secs(30)).await
            );
        });
        assert_eq!(
            runs(&a) + runs(&b),
            i + 1,
            "trial {i}: exactly one controller ran the job"
        );
        let after = rt.block_on(api.get(&name)).unwrap();
        assert_eq!(
            after.status.unwrap().reason.as_deref(),
            Some("KeyspaceNotFound")
        );
    }
    eprintln!("lease race: a ran {} jobs, b ran {}", runs(&a), runs(&b));
    assert!(runs(&a) > 0 || runs(&b) > 0);

    // 3. The finalizer race: ours is removed by index with a `test` op; another controller's
    //    finalizer added meanwhile (our view is stale) survives.
    let f: AnticompactionJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "cleave.dev/v1alpha1", "kind": "AnticompactionJob",
        "metadata": {"name": "fin", "namespace": "default", "finalizers": [FINALIZER]},
        "spec": {"nodeName": "n2", "keyspace": "ks", "repairedAt": 1700000000000i64, "ranges": [{"start": "0", "end": "1"}]},
    }))
    .unwrap();
    let stale_view = rt.block_on(api.create(&PostParams::default(), &f)).unwrap();
    rt.block_on(async {
        let add: Patch<()> = Patch::Json(
            serde_json::from_value(serde_json::json!([
                {"op": "add", "path": "/metadata/finalizers/0", "value": "example.com/keep"}
            ]))
            .unwrap(),
        );
        api.patch("fin", &PatchParams::default(), &add)
            .await
            .unwrap();
        api.delete("fin", &DeleteParams::default()).await.unwrap();
        remove_finalizer(&api, &stale_view, FINALIZER)
            .await
            .unwrap();
    });
    let fin = rt.block_on(api.get("fin")).unwrap();
    assert_eq!(
        fin.metadata.finalizers.as_deref(),
        Some(&["example.com/keep".to_string()][..])
    );
    assert!(fin.metadata.deletion_timestamp.is_some());

    // 4-5. A throttled copy job and a second job on the same table, which waits for it.
    let xfs = cleave::io::loopfs::unavailable_reason().is_none().then(|| {
        cleave::io::loopfs::LoopMount::new(&std::env::temp_dir(), 1 << 30, "xfs").unwrap()
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = xfs
        .as_ref()
        .map_or(tmp.path().to_path_buf(), |m| m.mount_point.clone());
    let data = root.join("data");
    let table = data.join("ks").join(TABLE);
    gen_table(&table, &[(1, "8MiB"), (2, "8MiB")]);
    let port = free_port();
    let (_n1, n1_log) = sidecar_with(
        &cluster,
        &cluster.kubeconfig,
        "n1",
        &data,
        port,
        &["--max-concurrent-jobs", "2"],
        &[],
    );
    cluster.wait("readyz", Duration::from_secs(30), || {
        http_get(port, "/readyz").filter(|r| r.starts_with("HTTP/1.1 200"))
    });
    // 1 MiB/s over ~7.5 MB: ~7 s, so the unthrottled work (index passes, rebuilt
    // components, fsync) stays a few percent of the measured wall time.
    const RATE: u64 = 1 << 20;
    cluster.apply(&job("slow", "n1", &format!("  repairedAt: 1700000000000\n  layout: Copy\n  maxBytesPerSecond: {RATE}\n  tables: [t]\n")));
    cluster.wait("slow Running", Duration::from_secs(30), || {
        cluster
            .phase("anticompactionjob", "slow")
            .filter(|p| p == "Running")
    });
    cluster.apply(&job(
        "next",
        "n1",
        "  repairedAt: 1700000000000\n  dryRun: true\n  tables: [t]\n",
    ));
    let waiting = cluster.wait("next Waiting", Duration::from_secs(30), || {
        cluster
            .get("anticompactionjob", "next")
            .and_then(|o| condition(&o, "Waiting"))
            .filter(|c| c["status"] == "True")
    });
    assert_eq!(waiting["reason"], "TableBusy", "{waiting}");
    assert!(
        waiting["message"]
            .as_str()
            .unwrap()
            .contains("default/slow"),
        "{waiting}"
    );
    assert_eq!(
        cluster.phase("anticompactionjob", "slow").as_deref(),
        Some("Running")
    );
    cluster.wait("slow Complete", Duration::from_secs(120), || {
        cluster
            .phase("anticompactionjob", "slow")
            .filter(|p| p == "Complete")
    });
    cluster.wait("next Planned", Duration::from_secs(60), || {
        cluster
            .phase("anticompactionjob", "next")
            .filter(|p| p == "Planned")
    });
    let slow = cluster.get("anticompactionjob", "slow").unwrap();
    let next = cluster.get("anticompactionjob", "next").unwrap();
    assert!(
        next["status"]["startTime"].as_str().unwrap()
            >= slow["status"]["completionTime"].as_str().unwrap(),
        "{next}\n{slow}"
    );
    let moved = slow["status"]["progress"]["bytesCopied"].as_u64().unwrap()
        + slow["status"]["progress"]["bytesReencoded"]
            .as_u64()
            .unwrap();
    let m = http_get(port, "/metrics").unwrap();
    let secs = metric(
        &m,
        "cleave_job_duration_seconds_sum{kind=\"AnticompactionJob\",result=\"complete\"}",
    )
    .unwrap();
    let rate = moved as f64 / secs;
    eprintln!("throttled job: {moved} bytes copied/re-encoded in {secs:.3} s = {rate:.0} B/s (limit {RATE})");
    assert!(moved > 6 << 20, "{slow}");
    assert!(
        (rate - RATE as f64).abs() / (RATE as f64) < 0.10,
        "rate {rate:.0} B/s vs limit {RATE}"
    );
    assert!(!m.contains("cleave_job_progress_ratio{kind=\"AnticompactionJob\",name=\"gone\""));
    // Deleting a job removes its per-job series.
    assert!(m.contains("name=\"next\""), "{m}");
    cluster.ok(&[
        "delete",
        "anticompactionjob",
        "next",
        "-n",
        "default",
        "--wait=true",
        "--timeout=60s",
    ]);
    let m = http_get(port, "/metrics").unwrap();
    assert!(
        !m.contains("cleave_job_progress_ratio{kind=\"AnticompactionJob\",name=\"next\""),
        "{m}"
    );
    let log = std::fs::read_to_string(&n1_log).unwrap();
    assert!(
        log.contains("reconcile{kind=\"AnticompactionJob\" namespace=\"default\" name=\"slow\"}: cleave::operator::core::lease: lease taken"),
        "a span per reconcile names the job: {log}"
    );

    // 6. Space pre-flight: a sidecar that must keep 100% free refuses before writing.
    let small = tempfile::tempdir().unwrap();
    let t3 = small.path().join("ks").join(TABLE);
    gen_table(&t3, &[(1, "1MiB")]);
    let before = snapshot(small.path());
    let p3 = free_port();
    let (_n3, _) = sidecar_with(
        &cluster,
        &cluster.kubeconfig,
        "n3",
        small.path(),
        p3,
        &["--min-free-percent", "100"],
        &[],
    );
    cluster.apply(&job("space", "n3", "  repairedAt: 1700000000000\n"));
    cluster.wait("space Failed", Duration::from_secs(60), || {
        cluster
            .phase("anticompactionjob", "space")
            .filter(|p| p == "Failed")
    });
    let sp = cluster.get("anticompactionjob", "space").unwrap();
    assert_eq!(sp["status"]["reason"], "InsufficientSpace", "{sp}");
    assert!(
        sp["status"]["message"]
            .as_str()
            .unwrap()
            .contains("--min-free-percent"),
        "{sp}"
    );
    assert_eq!(snapshot(small.path()), before, "nothing written");
    assert!(http_get(p3, "/metrics").unwrap().contains(
        "cleave_job_failures_total{kind=\"AnticompactionJob\",reason=\"InsufficientSpace\"} 1"
    ));

    // 7. Replace without process visibility: the sidecar in a PID namespace of its own (as
    //    in a pod without shareProcessNamespace/hostPID) refuses.
    let rep = tempfile::tempdir().unwrap();
    let t4 = rep.path().join("ks").join(TABLE);
    gen_table(&t4, &[(1, "1MiB")]);
    let before = snapshot(rep.path());
    let p4 = free_port();
    let (_n4, n4_log) = sidecar_with(
        &cluster,
        &cluster.kubeconfig,
        "n4",
        rep.path(),
        p4,
        &["--log-format", "json"],
        &["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"],
    );
    cluster.apply(&job(
        "replace",
        "n4",
        "  repairedAt: 1700000000000\n  publish: Replace\n",
    ));
    cluster.wait("replace Failed", Duration::from_secs(60), || {
        cluster
            .phase("anticompactionjob", "replace")
            .filter(|p| p == "Failed")
    });
    let rp = cluster.get("anticompactionjob", "replace").unwrap();
    assert_eq!(rp["status"]["reason"], "CassandraMayBeRunning", "{rp}");
    let msg = rp["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("shareProcessNamespace") && msg.contains("hostPID"),
        "{msg}"
    );
    assert_eq!(snapshot(rep.path()), before, "nothing written");
    let log = std::fs::read_to_string(&n4_log).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("CassandraMayBeRunning"))
        .unwrap_or_else(|| panic!("{log}"));
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("--log-format json: {e}: {line}"));
    assert_eq!(v["level"], "WARN", "{v}");
    assert_eq!(v["message"], "job failed", "{v}");
    assert_eq!(v["span"]["namespace"], "default", "the reconcile span: {v}");
}
