//! `CleanupJob` through the sidecar, in local mode (`cleave run --local`) and on the real
//! apiserver (`scripts/k8s-testenv.sh`): explicit `ownedRanges`, and `ownership:
//! ManagementApi` against the management API stand-in (`tests/common/mgmt.rs`, every
//! exchange checked against the agent's OpenAPI document; the ring read while Cassandra
//! runs, then a maintenance window for the Replace), give the same live keys: exactly
//! the parents' keys inside the owned ranges, judged by `sstcheck.py` (`SSTCHECK_RANGES`); a
//! ring with a joining peer is `RingChanging` and changes nothing.

#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::k8s::{control_plane_or_skip, Cluster, Sidecar};
use common::mgmt::StandIn;
use common::ring;
use common::*;
use std::time::Duration;

const TABLE: &str = "t-0123456789abcdef0123456789abcdef";
/// This sidecar's node in a 3-node ring.
const ME: usize = 0;
const NODES: usize = 3;

/// The ranges of `ME`.
fn mine() -> Vec<(i64, i64)> {
    ring::owned(NODES, ME)
}

/// The ring as `ME`'s management API shows it; `joining`: a fourth node bootstraps.
fn ring_json(joining: bool) -> String {
    ring::ring_json(NODES, ME, None, joining)
}

fn fingerprint(shared: &Path, paths: &[PathBuf], ranges: &[(i64, i64)]) -> (u64, u64, u64) {
    keys_fingerprint(shared, paths, ranges)
}

fn setup(d: &Path, name: &str) -> (PathBuf, PathBuf) {
    let data = d.join(name);
    let table = data.join("ks").join(TABLE);
    gen_table(&table, &[(1, "2MiB"), (2, "2MiB")]);
    (data, table)
}

fn job(m: &Path, name: &str, data: &Path, extra: &str) {
    std::fs::write(
        m.join(format!("{name}.yaml")),
        format!("apiVersion: cleave.dev/v1alpha1\nkind: CleanupJob\nmetadata:\n  name: {name}\nspec:\n  nodeName: n1\n  dataDirectory: {}\n  keyspace: ks\n  publish: Replace\n{extra}", data.display()),
    )
    .unwrap();
}

/// `cleave run --local m --once` for node `n1`, with the management API at `api` if any.
fn run_once(m: &Path, api: Option<&str>) -> Output {
    let mut c = run_local_once(m);
    if let Some(api) = api {
        c.args(["--management-api", api]);
    }
    c.output().unwrap()
}

/// `spec.ownedRanges` of a manifest: one `{start, end}` line each.
fn owned_ranges_yaml(owned: &[(i64, i64)]) -> String {
    let ranges: String = owned
        .iter()
        .map(|(l, r)| format!("    - {{start: \"{l}\", end: \"{r}\"}}\n"))
        .collect();
    format!("  ownedRanges:\n{ranges}")
}

fn status(m: &Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(m.join(format!("{name}.status.yaml"))).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

#[test]
fn explicit_ranges_and_the_nodes_ring_give_the_same_owned_keys() {
    let Some(shared) = corpus_or_skip("cleanup job") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (data_a, table_a) = setup(d.path(), "a");
    let (data_b, table_b) = setup(d.path(), "b");
    let owned = mine();
    let want = fingerprint(&shared, &data_files(&table_a), &owned);
    assert!(want.0 > 0, "the owned ranges hold keys");
    let all = fingerprint(&shared, &data_files(&table_a), &[]);
    assert!(want.0 < all.0, "and some keys are not owned");
    let ring = d.path().join("ring.json");
    std::fs::write(&ring, ring_json(false)).unwrap();
    let api = StandIn::start(d.path(), &table_b, &["--ring", ring.to_str().unwrap()]);
    let m = d.path().join("manifests");
    std::fs::create_dir(&m).unwrap();
    job(&m, "explicit", &data_a, &owned_ranges_yaml(&owned));
    job(
        &m,
        "ring",
        &data_b,
        "  ownership: ManagementApi\n  maintenance: ManagementApi\n",
    );
    let out = run_once(&m, Some(&api.url()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (name, table) in [("explicit", &table_a), ("ring", &table_b)] {
        let s = status(&m, name);
        assert_eq!(s["phase"], "Complete", "{name}: {s:#?}");
        let results = s["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "{name}");
        assert!(
            results.iter().all(|r| r["verdict"] == "Split"),
            "{name}: {results:#?}"
        );
        let live = data_files(table);
        assert!(
            !live
                .iter()
                .any(|p| p.ends_with("nb-1-big-Data.db") || p.ends_with("nb-2-big-Data.db")),
            "{name}: a parent is still live"
        );
        assert_eq!(fingerprint(&shared, &live, &[]), want, "{name}: live keys");
    }
    // In a window the ring is read while Cassandra runs, before the drain (a stopped
    // Cassandra answers no ring query); the re-read before publishing is OnRestart's
    // (`on_the_real_apiserver_an_on_restart_cleanup_waits_for_the_restart_then_completes`).
    let calls = api.calls();
    let at = |path: &str| calls.iter().position(|c| c["path"] == path);
    let drain = at("/api/v0/ops/node/drain").expect("the window drained");
    for path in [
        "/api/v0/metadata/endpoints",
        "/api/v2/tokens/rangetoendpoint",
    ] {
        assert!(at(path).is_some_and(|i| i < drain), "{path}: {calls:#?}");
    }
}

#[test]
fn a_ring_with_a_joining_peer_is_ring_changing_and_changes_nothing() {
    let Some(_shared) = corpus_or_skip("cleanup job") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (data, table) = setup(d.path(), "a");
    let ring = d.path().join("ring.json");
    std::fs::write(&ring, ring_json(true)).unwrap();
    let api = StandIn::start(d.path(), &table, &["--ring", ring.to_str().unwrap()]);
    // After the stand-in's start: it adds its own hold file to the table directory.
    let snap = snapshot(&table);
    let m = d.path().join("manifests");
    std::fs::create_dir(&m).unwrap();
    job(
        &m,
        "ring",
        &data,
        "  ownership: ManagementApi\n  maintenance: ManagementApi\n",
    );
    let out = run_once(&m, Some(&api.url()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = status(&m, "ring");
    assert_eq!(s["phase"], "Failed", "{s:#?}");
    assert_eq!(s["reason"], "RingChanging", "{s:#?}");
    assert!(
        s["message"].as_str().unwrap().contains("10.0.0.4"),
        "{s:#?}"
    );
    let calls = api.calls();
    assert!(
        !calls.iter().any(|c| c["method"] == "POST"),
        "refused before the window opened (no flush, drain or stop): {calls:#?}"
    );
    assert_eq!(snapshot(&table), snap, "the table changed");
}

/// The same CleanupJob as [`job`], as the apiserver takes it (namespace, node label).
fn kube_job(name: &str, data: &Path, extra: &str) -> String {
    format!("apiVersion: cleave.dev/v1alpha1\nkind: CleanupJob\nmetadata:\n  name: {name}\n  namespace: default\n  labels:\n    cleave.dev/node: n1\nspec:\n  nodeName: n1\n  dataDirectory: {}\n  keyspace: ks\n  publish: Replace\n{extra}", data.display())
}

/// The job's status once it has ended (`Complete` or `Failed`).
fn ended(c: &Cluster, name: &str) -> serde_json::Value {
    c.wait(name, Duration::from_secs(120), || {
        let o = c.get("cleanupjob", name)?;
        let p = o["status"]["phase"].as_str()?;
        ["Complete", "Failed"]
            .contains(&p)
            .then(|| o["status"].clone())
    })
}

#[test]
fn on_the_real_apiserver_explicit_ranges_and_the_ring_agree_and_a_joining_peer_changes_nothing() {
    let Some(shared) = corpus_or_skip("cleanup job on the apiserver") else {
        return;
    };
    if !control_plane_or_skip("cleanup job on the apiserver") {
        return;
    }
    let cluster = Cluster::start();
    cluster.apply_crds();
    let d = tempfile::tempdir().unwrap();
    let (data_a, table_a) = setup(d.path(), "a");
    let (data_b, table_b) = setup(d.path(), "b");
    let owned = mine();
    let want = fingerprint(&shared, &data_files(&table_a), &owned);
    assert!(want.0 > 0, "the owned ranges hold keys");
    let ring = d.path().join("ring.json");
    std::fs::write(&ring, ring_json(false)).unwrap();
    let api = StandIn::start(d.path(), &table_b, &["--ring", ring.to_str().unwrap()]);
    let url = api.url();
    let sidecar = Sidecar::start_with(&cluster, &data_a, &[], &["--management-api", &url]);
    cluster.apply(&kube_job("explicit", &data_a, &owned_ranges_yaml(&owned)));
    cluster.apply(&kube_job(
        "ring",
        &data_b,
        "  ownership: ManagementApi\n  maintenance: ManagementApi\n",
    ));
    for (name, table) in [("explicit", &table_a), ("ring", &table_b)] {
        let s = ended(&cluster, name);
        assert_eq!(s["phase"], "Complete", "{name}: {s:#?}\n{}", sidecar.log());
        let results = s["results"].as_array().unwrap();
        assert_eq!(results.len(), 2, "{name}");
        assert!(
            results.iter().all(|r| r["verdict"] == "Split"),
            "{name}: {results:#?}"
        );
        assert_eq!(
            s["progress"]["summary"], "0 kept, 0 dropped, 2 split",
            "{name}"
        );
        assert_eq!(
            fingerprint(&shared, &data_files(table), &[]),
            want,
            "{name}: the live keys are the parents' owned keys"
        );
    }
    assert_eq!(
        sidecar.counter("cleave_cleanup_sstables_total{verdict=\"split\"}"),
        4.0,
        "{}",
        sidecar.log()
    );
    assert!(sidecar.counter("cleave_cleanup_bytes_reclaimed_total") > 0.0);
    api.calls();
    drop(sidecar);
    drop(api);

    // A peer joins: the job is refused before anything is written.
    let (data_c, table_c) = setup(d.path(), "c");
    let joining = d.path().join("ring-joining.json");
    std::fs::write(&joining, ring_json(true)).unwrap();
    let api = StandIn::start(d.path(), &table_c, &["--ring", joining.to_str().unwrap()]);
    let snap = snapshot(&table_c);
    let url = api.url();
    let sidecar = Sidecar::start_with(&cluster, &data_c, &[], &["--management-api", &url]);
    cluster.apply(&kube_job(
        "joining",
        &data_c,
        "  ownership: ManagementApi\n  maintenance: ManagementApi\n",
    ));
    let s = ended(&cluster, "joining");
    assert_eq!(s["phase"], "Failed", "{s:#?}\n{}", sidecar.log());
    assert_eq!(s["reason"], "RingChanging", "{s:#?}");
    let failed = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .cloned()
        .unwrap_or_default();
    assert_eq!(failed["reason"], "RingChanging", "{s:#?}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap_or("")
            .contains("10.0.0.4"),
        "{s:#?}"
    );
    api.calls();
    assert_eq!(snapshot(&table_c), snap, "the table changed");
}

/// The cass-operator flow of docs/operator.md: `ownership: ManagementApi`, `publish:
/// OnRestart` beside a running Cassandra (the stand-in's process holds a file of the
/// table). The job records the cleanup and waits in `AwaitingRestart` with nothing live
/// changed; `apply-pending` refuses while Cassandra runs; once it is stopped the init
/// container's `apply-pending` publishes, and the sidecar that kept running (the DaemonSet
/// case) settles the job `Complete` with the live children in its results: the live keys
/// are the parents' owned keys.
#[test]
fn on_the_real_apiserver_an_on_restart_cleanup_waits_for_the_restart_then_completes() {
    let Some(shared) = corpus_or_skip("on-restart cleanup job on the apiserver") else {
        return;
    };
    if !control_plane_or_skip("on-restart cleanup job on the apiserver") {
        return;
    }
    let cluster = Cluster::start();
    cluster.apply_crds();
    let d = tempfile::tempdir().unwrap();
    let (data, table) = setup(d.path(), "a");
    let want = fingerprint(&shared, &data_files(&table), &mine());
    let ring = d.path().join("ring.json");
    std::fs::write(&ring, ring_json(false)).unwrap();
    let api = StandIn::start(d.path(), &table, &["--ring", ring.to_str().unwrap()]);
    assert!(api.cassandra_runs());
    let visible = |t: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        snapshot(t)
            .into_iter()
            .filter(|(p, _)| !p.to_string_lossy().contains(".cleave-pending"))
            .collect()
    };
    let before = visible(&table);
    let url = api.url();
    let sidecar = Sidecar::start_with(&cluster, &data, &[], &["--management-api", &url]);
    cluster.apply(
        &kube_job(
            "on-restart",
            &data,
            "  ownership: ManagementApi\n  parallelism: 2\n",
        )
        .replace("publish: Replace", "publish: OnRestart"),
    );
    let s = cluster.wait("AwaitingRestart", Duration::from_secs(120), || {
        let o = cluster.get("cleanupjob", "on-restart")?;
        let p = o["status"]["phase"].as_str()?;
        assert_ne!(p, "Failed", "{:#?}\n{}", o["status"], sidecar.log());
        (p == "AwaitingRestart").then(|| o["status"].clone())
    });
    let waiting = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "AwaitingRestart")
        .cloned()
        .unwrap_or_default();
    assert_eq!(waiting["status"], "True", "{s:#?}");
    let results = s["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{s:#?}");
    for r in results {
        assert_eq!(r["verdict"], "Split", "{r}");
        let kids = r["children"].as_array().unwrap();
        assert!(kids.len() >= 2, "{r}");
        assert!(
            kids.iter()
                .all(|k| k.as_str().unwrap().contains("/.cleave-pending/")),
            "{r}"
        );
    }
    assert_eq!(
        visible(&table),
        before,
        "nothing live changes before the restart"
    );
    let calls = api.calls();
    assert!(
        calls
            .iter()
            .filter(|c| c["path"] == "/api/v2/tokens/rangetoendpoint")
            .count()
            >= 2,
        "the ring is read before the cleanup and again before recording it: {calls:#?}"
    );
    // The init container's run while Cassandra still runs: refused, nothing changes.
    let out = apply_pending(&data).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"CassandraRunning\""),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(visible(&table), before);

    // The restart: Cassandra stops, apply-pending publishes, Cassandra would start.
    drop(api);
    apply_pending_ok(&data);
    let s = cluster.wait("Complete", Duration::from_secs(60), || {
        let o = cluster.get("cleanupjob", "on-restart")?;
        (o["status"]["phase"] == "Complete").then(|| o["status"].clone())
    });
    let live = data_files(&table);
    assert!(
        !live
            .iter()
            .any(|p| p.ends_with("nb-1-big-Data.db") || p.ends_with("nb-2-big-Data.db")),
        "a parent is still live"
    );
    assert_eq!(
        fingerprint(&shared, &live, &[]),
        want,
        "live keys = owned keys"
    );
    let mut listed: Vec<PathBuf> = s["results"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["children"].as_array().unwrap().clone())
        .map(|k| PathBuf::from(k.as_str().unwrap()))
        .collect();
    listed.sort();
    let mut live_names: Vec<_> = live
        .iter()
        .map(|p| p.file_name().unwrap().to_owned())
        .collect();
    live_names.sort();
    let mut listed_names: Vec<_> = listed
        .iter()
        .map(|p| p.file_name().unwrap().to_owned())
        .collect();
    listed_names.sort();
    assert_eq!(
        listed_names, live_names,
        "the results name the live children"
    );
    assert!(
        eventually(Duration::from_secs(10), || !table
            .join(".cleave-pending")
            .exists()),
        "the outcome was acknowledged: {:?}",
        names(&table)
    );
}

/// An `OnRestart` job that fails at its second table (a secondary index: `SecondaryIndexPresent`)
/// publishes nothing at the next restart: the first table's recorded cleanup is withdrawn.
#[test]
fn a_failed_on_restart_job_withdraws_what_it_recorded() {
    let Some(_shared) = corpus_or_skip("failed on-restart cleanup job") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let first = data.join("ks").join("a-0123456789abcdef0123456789abcdef");
    let second = data.join("ks").join("b-0123456789abcdef0123456789abcdef");
    gen_table(&first, &[(1, "2MiB")]);
    gen_table(&second, &[(1, "2MiB")]);
    std::fs::create_dir(second.join(".b_idx")).unwrap();
    let before = (snapshot(&first), snapshot(&second));
    let m = d.path().join("manifests");
    std::fs::create_dir(&m).unwrap();
    job(&m, "two", &data, &owned_ranges_yaml(&mine()));
    let text = std::fs::read_to_string(m.join("two.yaml")).unwrap();
    std::fs::write(
        m.join("two.yaml"),
        text.replace("publish: Replace", "publish: OnRestart"),
    )
    .unwrap();
    let out = run_once(&m, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = status(&m, "two");
    assert_eq!(s["phase"], "Failed", "{s:#?}");
    assert_eq!(s["reason"], "SecondaryIndexPresent", "{s:#?}");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("nothing of this job will be published"),
        "{s:#?}"
    );
    assert!(
        !first.join(".cleave-pending").exists(),
        "the first table's intent is withdrawn: {:?}",
        names(&first)
    );
    assert_eq!((snapshot(&first), snapshot(&second)), before);
}
