//! The sidecar on a directory of manifests (`cleave run --local`): the same reconcilers as
//! in Kubernetes, with status written beside each manifest.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn crds_in_the_repo_match_the_types() {
    let out = Command::new(cleave_bin()).arg("crd").output().unwrap();
    assert!(out.status.success());
    let repo =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/cleave.dev.yaml"))
            .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout) == repo,
        "crds/cleave.dev.yaml drifted from the Rust types: run `cleave crd > crds/cleave.dev.yaml`"
    );
    // A YAML 1.1 reader (PyYAML, like kubectl's) must read every enum value as the string
    // it is: an unquoted `Off` would be the boolean false and the apiserver would then
    // reject `digest: Off`.
    let check = "import yaml,sys\nbad=[]\ndef walk(v,p):\n  if isinstance(v,dict):\n    [walk(x,p+'.'+str(k)) for k,x in v.items()]\n    if 'enum' in v: bad.extend((p,e) for e in v['enum'] if not isinstance(e,str))\n  elif isinstance(v,list): [walk(x,p) for x in v]\nfor d in yaml.safe_load_all(open(sys.argv[1])):\n  walk(d,'')\nprint(bad)\nsys.exit(1 if bad else 0)\n";
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/cleave.dev.yaml");
    let out = Command::new("python3")
        .args(["-c", check])
        .arg(&crd)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "enum values a YAML 1.1 reader does not read as strings: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const TABLE: &str = "t-0123456789abcdef0123456789abcdef";

fn setup(parts: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let table = data.join("ks").join(TABLE);
    std::fs::create_dir_all(&table).unwrap();
    for (i, size) in parts.iter().enumerate() {
        let gen = (i + 1).to_string();
        cleave_json(&[
            "gen".as_ref(),
            "--out".as_ref(),
            table.as_os_str(),
            "--size".as_ref(),
            size.as_ref(),
            "--generation".as_ref(),
            gen.as_ref(),
            "--seed".as_ref(),
            gen.as_ref(),
            "--json".as_ref(),
        ]);
    }
    let m = d.path().join("manifests");
    std::fs::create_dir(&m).unwrap();
    (d, data, m)
}

fn job(name: &str, node: &str, extra: &str) -> String {
    format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  keyspace: ks\n  ranges:\n    - {{start: \"-9223372036854775808\", end: \"0\"}}\n{extra}"
    )
}

fn status(m: &Path, name: &str) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(m.join(format!("{name}.status.yaml"))).ok()?;
    serde_saphyr::from_str(&text).ok()
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn local_jobs_complete_fail_or_are_ignored_and_metrics_tell() {
    let Some(shared) = corpus_or_skip("local operator") else {
        return;
    };
    let (_d, data, m) = setup(&["8MiB", "4MiB"]);
    std::fs::write(
        m.join("good.yaml"),
        job(
            "good",
            "n1",
            "  pendingRepair: 6a3f4c2e-1d2b-11ef-9c4e-0242ac120002\n  digest: Combine\n",
        ),
    )
    .unwrap();
    std::fs::write(
        m.join("bad.yaml"),
        job(
            "bad",
            "n1",
            "  repairedAt: 1\n  pendingRepair: 6a3f4c2e-1d2b-11ef-9c4e-0242ac120002\n",
        ),
    )
    .unwrap();
    std::fs::write(
        m.join("other.yaml"),
        job("other", "n2", "  repairedAt: 1700000000000\n"),
    )
    .unwrap();
    let port = free_port();
    let _s = KillOnDrop(
        Command::new(cleave_bin())
            .args(["run", "--node", "n1", "--local"])
            .arg(&m)
            .arg("--data-dir")
            .arg(&data)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("good to complete", Duration::from_secs(60), || {
        status(&m, "good").is_some_and(|s| s["phase"] == "Complete")
    });
    wait_for("bad to fail", Duration::from_secs(30), || {
        status(&m, "bad").is_some_and(|s| s["phase"] == "Failed")
    });
    let good = status(&m, "good").unwrap();
    assert_eq!(good["progress"]["sstablesTotal"], 2);
    assert_eq!(good["progress"]["sstablesDone"], 2);
    assert_eq!(
        good["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Complete")
            .unwrap()["status"],
        "True"
    );
    assert!(good["startTime"].is_string() && good["completionTime"].is_string());
    let children: Vec<PathBuf> = good["results"]
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
    assert_eq!(children.len(), 4, "full + unrepaired child per parent");
    sstcheck_all(&shared, &children);
    let bad = status(&m, "bad").unwrap();
    assert_eq!(bad["reason"], "InvalidRepairMetadata");
    assert!(
        status(&m, "other").is_none(),
        "another node's job is not touched"
    );
    let metrics = http_get(port, "/metrics").unwrap();
    assert!(
        metrics.contains("cleave_sstables_total{kind=\"AnticompactionJob\",result=\"split\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("cleave_job_progress_ratio{kind=\"AnticompactionJob\",name=\"good\",namespace=\"local\"} 1"), "{metrics}");
    assert!(
        metrics.contains("cleave_bytes_total{kind=\"AnticompactionJob\",what=\"copied\"}")
            || metrics.contains("what=\"shared\"")
    );
    assert!(
        metrics.contains("cleave_jobs{kind=\"AnticompactionJob\",phase=\"Complete\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("cleave_jobs{kind=\"AnticompactionJob\",phase=\"Failed\"} 1"),
        "{metrics}"
    );
    assert!(http_get(port, "/healthz")
        .unwrap()
        .starts_with("HTTP/1.1 200"));
    assert!(http_get(port, "/readyz")
        .unwrap()
        .starts_with("HTTP/1.1 200"));
    let events = std::fs::read_to_string(m.join("events.log")).unwrap();
    assert!(
        events.contains("good Completed") && events.contains("bad InvalidRepairMetadata"),
        "{events}"
    );
}

/// A job left Running by a worker that died (stale heartbeat) is resumed by the next one:
/// the sstable already in its results is not split again, the other is.
#[test]
fn a_dead_workers_job_is_resumed_not_redone() {
    let Some(_shared) = corpus_or_skip("resume") else {
        return;
    };
    let (_d, data, m) = setup(&["4MiB", "4MiB"]);
    std::fs::write(
        m.join("j.yaml"),
        job("j", "n1", "  repairedAt: 1700000000000\n"),
    )
    .unwrap();
    let table = data.join("ks").join(TABLE);
    let first = table.join("nb-1-big-Data.db");
    // The dead worker had finished the first parent and left a staging directory behind.
    let staged = table.join("cleave-staged/j/ks/t");
    std::fs::create_dir_all(staged.join(".cleave-staging-dead")).unwrap();
    std::fs::write(
        staged.join(".cleave-staging-dead/nb-9-big-Data.db"),
        b"half written",
    )
    .unwrap();
    let st = format!(
        "phase: Running\nstartTime: 2026-01-01T00:00:00Z\nworker:\n  identity: n1/1/1\n  heartbeatTime: 2026-01-01T00:00:00Z\nprogress:\n  sstablesTotal: 2\n  sstablesDone: 1\n  bytesPlanned: 0\n  bytesShared: 0\n  bytesCopied: 0\n  bytesReencoded: 0\n  partitions: 64\nresults:\n- parent: {}\n  children: []\n  bytesShared: 0\n  bytesCopied: 0\n  bytesReencoded: 0\n  partitions: 64\n",
        first.display()
    );
    std::fs::write(m.join("j.status.yaml"), st).unwrap();
    let out = run_local_once(&m)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = status(&m, "j").unwrap();
    assert_eq!(s["phase"], "Complete", "{s:?}");
    let results = s["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["parent"], first.to_str().unwrap());
    assert_eq!(
        results[1]["parent"],
        table.join("nb-2-big-Data.db").to_str().unwrap()
    );
    assert!(
        !staged.join(".cleave-staging-dead").exists(),
        "the dead worker's staging is removed"
    );
    let resumed = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["reason"] == "Completed");
    assert!(resumed);
}

/// `spec.parallelism`: that many parents are split at the same moment (and one by default);
/// every parent is done either way. A copy job throttled to 10 MB/s makes each split last
/// ~0.3 s, so two workers overlap for certain.
#[test]
fn parallelism_splits_that_many_sstables_at_once() {
    use cleave::operator::crd::{AnticompactionJobSpec, JobStatus, TokenRange};
    use cleave::operator::job::{self, NodeLimits, Outcome};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let (_d, data, _m) = setup(&["6MiB", "6MiB", "6MiB", "6MiB"]);
    let spec = |parallelism| AnticompactionJobSpec {
        node_name: "n1".into(),
        data_directory: None,
        keyspace: "ks".into(),
        tables: vec![],
        sstables: vec![],
        ranges: vec![TokenRange {
            start: "-9223372036854775808".into(),
            end: "0".into(),
        }],
        transient_ranges: vec![],
        repaired_at: Some(1_700_000_000_000),
        pending_repair: None,
        layout: cleave::operator::crd::LayoutRequest::Copy,
        digest: Default::default(),
        publish: Default::default(),
        dry_run: false,
        max_bytes_per_second: Some(10_000_000),
        parallelism,
        ..Default::default()
    };
    for (p, want) in [(None, 1), (Some(2), 2)] {
        let mut st = JobStatus::default();
        let name = format!("par{want}");
        let (outcome, stats) = job::run(
            job::JobWork {
                spec: &spec(p),
                cut: &job::JobCut::Anticompaction,
            },
            job::JobId {
                name: &name,
                uid: &name,
            },
            &data,
            &mut st,
            &Arc::new(AtomicBool::new(false)),
            &NodeLimits::default(),
            &mut |_, _| {},
        )
        .unwrap();
        assert_eq!(outcome, Outcome::Complete);
        assert_eq!(st.results.len(), 4);
        assert_eq!(stats.max_in_flight, want, "parallelism {p:?}");
    }
}
