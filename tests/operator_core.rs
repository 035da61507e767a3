//! The operator core on a REAL kube-apiserver (issue 17's acceptance): routing that cannot be
//! forgotten (an unlabelled and a mislabelled job both get a status), a misspelt `dryRun`
//! that never writes a byte, and a shutdown that ends within its budget while the
//! apiserver is down.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::k8s::*;
use common::*;

const TABLE: &str = "t-0123456789abcdef0123456789abcdef";

fn job(name: &str, labels: &str, extra: &str) -> String {
    format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: {name}\n  namespace: default\n{labels}spec:\n  nodeName: n1\n  keyspace: ks\n  repairedAt: 1700000000000\n  ranges:\n    - {{start: \"-9223372036854775808\", end: \"0\"}}\n{extra}"
    )
}

/// A table of two generated sstables under `data/ks/`.
fn table(data: &Path) {
    gen_table(&data.join("ks").join(TABLE), &[(1, "4MiB"), (2, "4MiB")]);
}

fn reason(c: &Cluster, name: &str) -> Option<(String, String)> {
    let o = c.get("anticompactionjob", name)?;
    let phase = o["status"]["phase"].as_str()?.to_string();
    let reason = o["status"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Some((phase, reason))
}

#[test]
fn routing_typos_and_shutdown_on_a_real_apiserver() {
    if !control_plane_or_skip("operator core") {
        return;
    }
    let cluster = Cluster::start();
    cluster.apply_crds();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    table(&data);
    let before = snapshot(&data);
    let mut s = Sidecar::start(&cluster, &data, &[]);

    // 1. A job with no node label, one whose label names another node, one with `dryrun`
    //    for `dryRun`: each gets a status from n1's sidecar within 30 s.
    let t = Instant::now();
    cluster.apply(&job("unlabelled", "", "  dryRun: true\n"));
    cluster.apply(&job(
        "mislabelled",
        "  labels: {cleave.dev/node: n2}\n",
        "  dryRun: true\n",
    ));
    cluster.apply(&job(
        "typo",
        "  labels: {cleave.dev/node: n1}\n",
        "  dryrun: true\n",
    ));
    let unlabelled = cluster.wait("unlabelled has a status", Duration::from_secs(30), || {
        reason(&cluster, "unlabelled").filter(|(p, _)| p == "Planned" || p == "Failed")
    });
    assert_eq!(
        unlabelled.0, "Planned",
        "the unlabelled job is acted on: {unlabelled:?}"
    );
    let mislabelled = cluster.wait("mislabelled fails", Duration::from_secs(30), || {
        reason(&cluster, "mislabelled").filter(|(p, _)| p == "Failed")
    });
    assert_eq!(mislabelled.1, "InvalidSpec");
    let typo = cluster.wait("typo fails", Duration::from_secs(30), || {
        reason(&cluster, "typo").filter(|(p, _)| p == "Failed")
    });
    assert_eq!(typo.1, "InvalidSpec");
    let msg = cluster.get("anticompactionjob", "typo").unwrap()["status"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("spec.dryrun") && msg.contains("spec.dryRun"),
        "the message names the field and its spelling: {msg}"
    );
    eprintln!("three jobs with a status after {:?}", t.elapsed());
    // Neither the dry runs nor the refused typo wrote a byte.
    assert_eq!(
        snapshot(&data),
        before,
        "a dry run or a refused job changed the data"
    );

    // 2. Shutdown with the apiserver gone: SIGTERM, then exit within the documented budget
    //    (docs/operator.md, "Shutdown": 5 s of reconcile grace + 2 s of runtime teardown,
    //    nothing running).
    cluster.stop_one("apiserver", "KILL");
    std::thread::sleep(Duration::from_secs(2));
    let pid = s.proc.0.id() as i32;
    let t = Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let st = s.wait_exit(Duration::from_secs(20));
    let took = t.elapsed();
    eprintln!("exit after SIGTERM with the apiserver down: {took:?} ({st})");
    assert!(st.success(), "{st}: {}", s.log());
    assert!(
        took < Duration::from_secs(10),
        "exit took {took:?}, more than the 10 s budget: {}",
        s.log()
    );
}
