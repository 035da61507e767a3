//! Faults around Kubernetes while an AnticompactionJob runs (issue 12, deliverable 4), on a
//! REAL kube-apiserver + etcd (`scripts/k8s-testenv.sh`, `tests/common/k8s.rs`):
//!
//! (a) the apiserver is SIGKILLed once the job runs and started again only after the split
//!     has ended: the split carries on without it, the status writes that failed (progress,
//!     heartbeat, the final one) are retried and the job completes with the right status;
//! (b) etcd is SIGKILLed and restarted mid-job (same data): the job completes;
//! (c) the watches break with both restarts: the sidecar re-lists and goes on (a job created
//!     after the restart is picked up and runs).
//!
//! After each job: every parent byte-identical, the staged children exactly two per parent
//! (no duplicate from a re-run), complete (TOC.txt, no staging left), accepted by
//! sstcheck.py, and their key fingerprint equal to the parents'. The sidecar's log and
//! `cleave_kube_errors_total` show the failed writes and the broken watches.
//!
//! The job is made long honestly: `maxBytesPerSecond: 1 MiB/s` on a filesystem without
//! reflink (the temp dir; every Data.db byte is copied and paid for), three parents of
//! about 2 MiB, so a job runs ~6 s at 1 MiB/s (~12 s for the first one, at 512 KiB/s).
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::k8s::*;
use common::*;

const KS: &str = "ks";

fn job(name: &str, table: &str, bytes_per_second: u64) -> String {
    format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{cleave.dev/node: n1}}\nspec:\n  nodeName: n1\n  keyspace: {KS}\n  tables: [{table}]\n  ranges:\n    - {{start: \"-9223372036854775808\", end: \"0\"}}\n  repairedAt: 1700000000000\n  maxBytesPerSecond: {bytes_per_second}\n"
    )
}

/// Three parents `nb-1..3` in `<data>/ks/<table>-<id>`; their bytes and key fingerprint.
fn table(data: &Path, table: &str) -> (PathBuf, Vec<Vec<u8>>, serde_json::Value) {
    let dir = data
        .join(KS)
        .join(format!("{table}-0123456789abcdef0123456789abcdef"));
    gen_table(&dir, &[(1, "2MiB"), (2, "2MiB"), (3, "2MiB")]);
    let bytes = (1..=3)
        .map(|g| std::fs::read(dir.join(format!("nb-{g}-big-Data.db"))).unwrap())
        .collect();
    let fp = dir_fingerprint(&dir);
    (dir, bytes, fp)
}

fn wait_complete(c: &Cluster, name: &str) -> serde_json::Value {
    c.wait(
        &format!("{name} Complete"),
        Duration::from_secs(180),
        || {
            c.get("anticompactionjob", name)
                .filter(|j| j["status"]["phase"] == "Complete")
        },
    )
}

/// The job's status is right and its staged children are exactly the parents' rows.
fn assert_job_done(
    shared: &Path,
    j: &serde_json::Value,
    dir: &Path,
    parents: &[Vec<u8>],
    fp: &serde_json::Value,
) {
    let name = j["metadata"]["name"].as_str().unwrap();
    let st = &j["status"];
    assert_eq!(st["progress"]["sstablesDone"], 3, "{st}");
    assert_eq!(st["progress"]["sstablesTotal"], 3, "{st}");
    let results = st["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "one result per parent: {st}");
    assert!(
        st["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Complete" && c["status"] == "True"),
        "{st}"
    );
    assert!(st["completionTime"].is_string(), "{st}");
    for (g, bytes) in parents.iter().enumerate() {
        assert_eq!(
            &std::fs::read(dir.join(format!("nb-{}-big-Data.db", g + 1))).unwrap(),
            bytes,
            "{name}: parent {} intact",
            g + 1
        );
    }
    let staged = cleave::split::import_dir::staged_dir(dir, &[name]).unwrap();
    let left = names(&staged);
    assert!(
        !left
            .iter()
            .any(|n| n.starts_with('.') || n.contains("_txn_")),
        "{name}: staging or log left: {left:?}"
    );
    let on_disk = data_files(&staged);
    let mut recorded: Vec<PathBuf> = results
        .iter()
        .flat_map(|r| r["children"].as_array().unwrap())
        .map(|c| PathBuf::from(c.as_str().unwrap()))
        .collect();
    recorded.sort();
    assert_eq!(
        on_disk, recorded,
        "{name}: the staged children are exactly the recorded ones (a re-run would add more)"
    );
    assert_eq!(
        on_disk.len(),
        6,
        "{name}: two children per parent: {left:?}"
    );
    for d in &on_disk {
        let prefix = d.to_str().unwrap().trim_end_matches("Data.db");
        assert!(
            Path::new(&format!("{prefix}TOC.txt")).is_file(),
            "{name}: {} has no TOC.txt",
            d.display()
        );
    }
    assert_eq!(
        &key_fingerprint(&on_disk),
        fp,
        "{name}: the children hold exactly the parents' keys"
    );
    sstcheck_all(shared, &on_disk);
}

#[test]
fn apiserver_and_etcd_restarts_and_broken_watches_mid_job() {
    let Some(shared) = corpus_or_skip("kube faults") else {
        return;
    };
    if !control_plane_or_skip("kube faults") {
        return;
    }
    let t0 = Instant::now();
    let cluster = Cluster::start();
    cluster.apply_crds();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (d1, p1, fp1) = table(&data, "t1");
    let (d2, p2, fp2) = table(&data, "t2");
    let s = Sidecar::start(&cluster, &data, &[]);

    // (a) The apiserver dies while the job runs and comes back after the split has ended.
    // At 512 KiB/s the job takes ~12 s, so that it is still running when the kill lands.
    cluster.apply(&job("a1", "t1", 512 << 10));
    // The log, not kubectl: a poll through kubectl costs seconds of the job on a loaded
    // machine.
    s.wait_log("lease taken", 1, Duration::from_secs(60));
    cluster.stop_one("apiserver", "KILL");
    let down = Instant::now();
    assert!(
        !s.log().contains("job ended"),
        "a1 ended before the apiserver was killed (machine too fast for this rate?)"
    );
    s.wait_log("job ended", 1, Duration::from_secs(120));
    eprintln!(
        "a1: the split ended {:?} after the apiserver was killed",
        down.elapsed()
    );
    // The final status write failed and is being retried (it used to be dropped: the job
    // stayed Running, was run again after the restart and staged every parent twice).
    s.wait_log(
        "the job's final status is not written yet",
        1,
        Duration::from_secs(30),
    );
    cluster.start_one("apiserver");
    eprintln!("a1: the apiserver was down for {:?}", down.elapsed());
    let a1 = wait_complete(&cluster, "a1");
    assert_job_done(&shared, &a1, &d1, &p1, &fp1);
    let log = s.log();
    assert!(
        log.contains("watching AnticompactionJobs failed"),
        "the broken watch is logged:\n{log}"
    );
    let status_errors =
        s.counter("cleave_kube_errors_total{kind=\"AnticompactionJob\",operation=\"status\"}");
    let watch_errors =
        s.counter("cleave_kube_errors_total{kind=\"AnticompactionJob\",operation=\"watch\"}");
    eprintln!(
        "a1: {status_errors} failed status writes, {watch_errors} watch errors, a 410 re-list: {}",
        log.contains("too old resource version")
    );
    assert!(status_errors >= 2.0, "failed status writes are counted");
    assert!(watch_errors >= 1.0, "watch errors are counted");
    assert_eq!(
        log.matches("lease taken").count(),
        1,
        "one run, never restarted:\n{log}"
    );

    // (b) + (c) A job created after the apiserver came back is picked up (the watch was
    // re-established); etcd is killed and restarted while it runs.
    cluster.apply(&job("b1", "t2", 1 << 20));
    s.wait_log("lease taken", 2, Duration::from_secs(60));
    cluster.stop_one("etcd", "KILL");
    let down = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    cluster.start_one("etcd");
    eprintln!("b1: etcd was down for {:?}", down.elapsed());
    let b1 = wait_complete(&cluster, "b1");
    assert_job_done(&shared, &b1, &d2, &p2, &fp2);
    let log = s.log();
    assert_eq!(log.matches("lease taken").count(), 2, "{log}");
    assert!(!log.contains("panicked"), "{log}");
    eprintln!(
        "kube faults: 2 jobs through an apiserver and an etcd restart in {:?}; sidecar log:\n{}",
        t0.elapsed(),
        log.lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
