//! The Kubernetes sidecar killed mid-job and taken over (issue 12, deliverable 2, "in the
//! operator"), like tests/crash_operator.rs but with `cleave run` against a REAL
//! kube-apiserver + etcd (`scripts/k8s-testenv.sh`): a `Replace` AnticompactionJob over two
//! parents (and a `Stage` one), the sidecar SIGKILLed at a fault point of the split or of publication
//! (`CLEAVE_CRASH_AT`), then another sidecar process for the same node (another identity in
//! `status.worker`) takes the job over once the dead one's lease has expired, runs the
//! recovery of the job's tables (`operator::job::recover_leftovers`) and completes it.
//! Afterwards the table holds exactly the children of both parents — no parent, no orphan,
//! no transaction log, no staging — with the parents' key fingerprint, and the job is
//! Complete under the new worker.
//!
//! The first trial waits out the real lease (`operator::decide::LEASE`, 30 s); the others
//! make it stale by patching the dead worker's `heartbeatTime` into the past (the same
//! decision, `decide::decide`, without 30 s per trial). `CLEAVE_KUBE_CRASH_POINTS=a,b,…`
//! runs other points (every name in docs/reliability.md "Fault points").
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::k8s::*;
use common::*;

const TABLE: &str = "t-0123456789abcdef0123456789abcdef";
/// `Replace` points, then `stage:` points (a `Stage` job: the parents stay, the children
/// go to `cleave-staged/<job>/`).
const DEFAULT_POINTS: &[&str] = &[
    "committed",
    "write:child-file@3",
    "logged",
    "replace:renamed-file@4",
    "renamed",
    "delete:sstable-file@2",
    "logged@2",
    "committed@2",
    "stage:committed",
    "stage:renamed-file@6",
];

fn job(name: &str, publish: &str) -> String {
    format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{cleave.dev/node: n1}}\nspec:\n  nodeName: n1\n  keyspace: ks\n  ranges:\n    - {{start: \"-9223372036854775808\", end: \"0\"}}\n  repairedAt: 1700000000000\n  publish: {publish}\n"
    )
}

/// After a `Stage` job: both parents byte-identical and alone in the table, and the job's
/// staging directory holds exactly two complete children per parent (a parent split twice
/// would leave four) with the parents' keys; no log, no staging left.
fn assert_staged(what: &str, table: &Path, job: &str, parents: &[Vec<u8>], fp: &serde_json::Value) {
    for (g, bytes) in parents.iter().enumerate() {
        assert_eq!(
            &std::fs::read(table.join(format!("nb-{}-big-Data.db", g + 1))).unwrap(),
            bytes,
            "{what}: parent {} intact",
            g + 1
        );
    }
    // `<table dir>/cleave-staged/<job>/<keyspace>/<table>` (split::import_dir).
    let staged = table.join("cleave-staged").join(job).join("ks/t");
    let left = names(&staged);
    assert!(
        !left
            .iter()
            .any(|n| n.contains("_txn_") || n.starts_with('.')),
        "{what}: leftovers {left:?}"
    );
    let children = data_files(&staged);
    assert_eq!(children.len(), 2 * parents.len(), "{what}: {left:?}");
    for c in &children {
        let toc = c.to_str().unwrap().replace("-Data.db", "-TOC.txt");
        assert!(Path::new(&toc).is_file(), "{what}: orphan {}", c.display());
    }
    assert_eq!(&key_fingerprint(&children), fp, "{what}: {left:?}");
}

fn parents(table: &Path) -> serde_json::Value {
    std::fs::create_dir_all(table).unwrap();
    for g in ["1", "2"] {
        cleave_json(&[
            "gen".as_ref(),
            "--out".as_ref(),
            table.as_os_str(),
            "--size".as_ref(),
            "1MiB".as_ref(),
            "--chunk".as_ref(),
            "4KiB".as_ref(),
            "--generation".as_ref(),
            g.as_ref(),
            "--seed".as_ref(),
            g.as_ref(),
            "--json".as_ref(),
        ]);
    }
    std::fs::remove_file(table.join("schema.cql")).ok();
    dir_fingerprint(table)
}

#[test]
fn a_kubernetes_sidecar_killed_mid_job_is_taken_over_and_no_row_is_lost_or_doubled() {
    if corpus_or_skip("kube crash").is_none() || !control_plane_or_skip("kube crash") {
        return;
    }
    let points: Vec<String> = match std::env::var("CLEAVE_KUBE_CRASH_POINTS") {
        Ok(v) => v.split(',').map(str::to_string).collect(),
        Err(_) => DEFAULT_POINTS.iter().map(|p| p.to_string()).collect(),
    };
    let t0 = Instant::now();
    let cluster = Cluster::start();
    cluster.apply_crds();
    for (i, point) in points.iter().enumerate() {
        let t = Instant::now();
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("data");
        let table = data.join("ks").join(TABLE);
        let before = parents(&table);
        let parent_bytes: Vec<Vec<u8>> = ["1", "2"]
            .iter()
            .map(|g| std::fs::read(table.join(format!("nb-{g}-big-Data.db"))).unwrap())
            .collect();
        let stage = point.starts_with("stage:");
        let name = format!("k{i}");
        let mut first = Sidecar::spawn(&cluster, &data, &[("CLEAVE_CRASH_AT", point)]);
        cluster.apply(&job(&name, if stage { "Stage" } else { "Replace" }));
        let st = first.wait_exit(Duration::from_secs(120));
        assert!(!st.success(), "{point}: {st:?}");
        assert!(
            first.log().contains("SIGKILL"),
            "{point}: the point is reached:\n{}",
            first.log()
        );
        let dead = cluster.get("anticompactionjob", &name).unwrap();
        assert_eq!(dead["status"]["phase"], "Running", "{point}: {dead}");
        let dead_worker = dead["status"]["worker"]["identity"]
            .as_str()
            .unwrap()
            .to_string();
        if i > 0 {
            cluster.ok(&[
                "patch",
                "anticompactionjob",
                &name,
                "-n",
                "default",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"worker":{"heartbeatTime":"2000-01-01T00:00:00Z"}}}"#,
            ]);
        }
        let second = Sidecar::start(&cluster, &data, &[]);
        let done = cluster.wait(
            &format!("{name} Complete after the takeover ({point})"),
            Duration::from_secs(180),
            || {
                cluster
                    .get("anticompactionjob", &name)
                    .filter(|j| j["status"]["phase"] == "Complete")
            },
        );
        let st = &done["status"];
        assert_eq!(
            st["progress"]["sstablesDone"], st["progress"]["sstablesTotal"],
            "{point}: {st}"
        );
        let log = second.log();
        assert!(log.contains("lease taken"), "{point}: {log}");
        assert!(
            !log.contains(&format!("identity={dead_worker}")),
            "{point}: the new sidecar has another identity"
        );
        drop(second);
        if stage {
            assert_staged(point, &table, &name, &parent_bytes, &before);
        } else {
            assert_replaced(point, &table, &["1", "2"], &before);
        }
        eprintln!(
            "{point}: killed, taken over from {dead_worker}, completed in {:?}",
            t.elapsed()
        );
    }
    eprintln!(
        "kube crash campaign: {} kills of the Kubernetes sidecar, each taken over, 0 violations, {:?}",
        points.len(),
        t0.elapsed()
    );
}
