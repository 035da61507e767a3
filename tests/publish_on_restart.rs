//! `split --publish on-restart` and `cleave apply-pending` on a loop-mounted XFS (reflink),
//! with Cassandra stand-ins (a UID-999 process holding a parent's Data.db open), judged by
//! the independent `sstcheck.py` (every live sstable valid, their key fingerprint equal to the
//! parent's); and the Replace guard in the sidecar shape (a PID namespace whose PID 1 is
//! another UID's idle process).
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const TABLE: &str = "ks/t-0123456789abcdef0123456789abcdef";

/// (count, xor, sum) of the keys of `paths`, as sstcheck prints them (each must pass).
fn sstcheck_fp(paths: &[PathBuf]) -> (u64, u64, u64) {
    let shared = shared_dir().expect("../shared");
    let mut fp = (0u64, 0u64, 0u64);
    for v in sstcheck_all(&shared, paths) {
        let h = |k: &str| u64::from_str_radix(v[k].as_str().unwrap(), 16).unwrap();
        fp.0 += v["partitions"].as_u64().unwrap();
        fp.1 ^= h("keys_xor");
        fp.2 = fp.2.wrapping_add(h("keys_sum"));
    }
    fp
}

/// A table of one 512 KiB parent (generation 1) in `root`.
fn table_in(root: &Path) -> PathBuf {
    let t = root.join(TABLE);
    gen_table(&t, &[(1, "512KiB")]);
    t
}

/// A UID-999 process holding `file` open on its stdin: a Cassandra stand-in.
fn holder(file: &Path) -> KillOnDrop {
    let f = std::fs::File::open(file).unwrap();
    let c = Command::new("setpriv")
        .args([
            "--reuid",
            "999",
            "--regid",
            "999",
            "--clear-groups",
            "sleep",
            "600",
        ])
        .stdin(f)
        .spawn()
        .unwrap();
    // Until it has exec'd sleep, /proc/<pid>/fd/0 is already the file (inherited).
    KillOnDrop(c)
}

fn outcome(table: &Path, uid: &str) -> serde_json::Value {
    let p = table.join(".cleave-pending").join(uid).join("outcome.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
}

/// Live Data.db files of the table, and that none is incomplete and no log is left.
fn live(table: &Path) -> Vec<PathBuf> {
    let n = names(table);
    assert!(
        !n.iter().any(|x| x.contains("_txn_")),
        "a log is left: {n:?}"
    );
    data_files(table)
}

#[test]
fn on_restart_stages_apply_pending_waits_for_cassandra_then_publishes() {
    let Some(m) = xfs_or_skip("on_restart", 512 << 20) else {
        return;
    };
    if shared_dir().is_none() {
        eprintln!("SKIP: no ../shared");
        return;
    }
    let data = m.mount_point.join("data");
    let table = table_in(&data);
    let parent = table.join("nb-1-big-Data.db");
    let fp0 = sstcheck_fp(std::slice::from_ref(&parent));

    // Nothing pending: a no-op that does not even look at /proc.
    let r = apply_pending_ok(&data);
    assert_eq!(r["jobs"].as_array().unwrap().len(), 0, "{r}");

    let before = names(&table);
    let p = pend_split(&table, "job-1");
    assert_eq!(p["job_uid"], "job-1");
    assert_eq!(p["split"]["check"]["ok"], true, "{p}");
    // The parent is live and untouched; the children wait in the hidden pending directory.
    let mut after = names(&table);
    after.retain(|n| n != ".cleave-pending");
    assert_eq!(after, before);
    let intent: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p["intent"].as_str().unwrap()).unwrap()).unwrap();
    assert_eq!(
        intent["parents"][0]["parent"]["data_file"],
        "nb-1-big-Data.db"
    );
    assert_eq!(intent["keep_repaired"], true);
    let children: Vec<PathBuf> = p["split"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
        .collect();
    assert_eq!(children.len(), 3);
    assert_eq!(
        sstcheck_fp(&children),
        fp0,
        "the staged children hold the parent's keys"
    );

    // A Cassandra stand-in under UID 999 holds the parent: refused, nothing changed.
    let snap = snapshot(&data);
    {
        let _cassandra = holder(&parent);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let out = apply_pending(&data).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["error"]["reason"], "CassandraRunning", "{v}");
        assert_eq!(
            snapshot(&data),
            snap,
            "a refused apply-pending changed files"
        );
    }

    // Cassandra stopped: published, the live sstables hold exactly the parent's keys.
    let r = apply_pending_ok(&data);
    assert_eq!(r["jobs"][0]["action"], "applied", "{r}");
    let o = outcome(&table, "job-1");
    assert_eq!(o["result"]["state"], "Complete", "{o}");
    let live_now = live(&table);
    assert!(!table.join("nb-1-big-Data.db").exists());
    assert_eq!(live_now.len(), 3, "{:?}", names(&table));
    assert_eq!(sstcheck_fp(&live_now), fp0);
    assert_eq!(
        names(&table.join(".cleave-pending/job-1")),
        vec!["outcome.json".to_string()]
    );

    // Idempotent: a second run changes nothing.
    let snap = snapshot(&data);
    let r = apply_pending_ok(&data);
    assert_eq!(r["jobs"][0]["action"], "already_done", "{r}");
    assert_eq!(snapshot(&data), snap);
}

#[test]
fn a_parent_compacted_away_drops_the_intent_with_parent_changed() {
    let Some(m) = xfs_or_skip("parent_changed", 512 << 20) else {
        return;
    };
    if shared_dir().is_none() {
        return;
    }
    let data = m.mount_point.join("data");
    let table = table_in(&data);
    pend_split(&table, "job-2");
    // "Compaction": the parent goes, another sstable takes its keys' place.
    for f in names(&table).iter().filter(|n| n.starts_with("nb-1-")) {
        std::fs::remove_file(table.join(f)).unwrap();
    }
    gen_table(&table, &[(9, "64KiB")]);
    let live_before = snapshot(&table)
        .into_iter()
        .filter(|(p, _)| !p.to_string_lossy().contains(".cleave-pending"))
        .collect::<Vec<_>>();
    let r = apply_pending_ok(&data);
    assert_eq!(r["jobs"][0]["action"], "applied", "{r}");
    let o = outcome(&table, "job-2");
    assert_eq!(o["result"]["state"], "Failed");
    assert_eq!(o["result"]["reason"], "ParentChanged", "{o}");
    assert!(o["result"]["message"]
        .as_str()
        .unwrap()
        .contains("nb-1-big-Data.db"));
    // The children are gone, the table is as compaction left it.
    assert_eq!(
        names(&table.join(".cleave-pending/job-2")),
        vec!["outcome.json".to_string()]
    );
    let live_after = snapshot(&table)
        .into_iter()
        .filter(|(p, _)| !p.to_string_lossy().contains(".cleave-pending"))
        .collect::<Vec<_>>();
    assert_eq!(live_after, live_before);

    // A parent rewritten in place under its name (another inode, size): also ParentChanged.
    let t2 = data.join("ks/u-0123456789abcdef0123456789abcdef");
    gen_table(&t2, &[(1, "512KiB")]);
    pend_split(&t2, "job-3");
    let d = t2.join("nb-1-big-Data.db");
    let bytes = std::fs::read(&d).unwrap();
    std::fs::remove_file(&d).unwrap();
    std::fs::write(&d, &bytes[..bytes.len() - 1]).unwrap();
    apply_pending_ok(&data);
    let o = outcome(&t2, "job-3");
    assert_eq!(o["result"]["reason"], "ParentChanged", "{o}");
    let msg = o["result"]["message"].as_str().unwrap();
    assert!(msg.contains("inode") && msg.contains("size"), "{msg}");
}

fn pend_cmd(table: &Path, uid: &str) -> Command {
    let mut c = Command::new(cleave_bin());
    c.arg("split")
        .arg(table.join("nb-1-big-Data.db"))
        .arg("--out")
        .arg(table)
        .args(["--parts", "3", "--publish", "on-restart", "--job-uid", uid])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// After a killed run and a complete `apply-pending`: either the parent (a pend killed
/// before its intent was durable) or exactly the children are live, with the parent's keys,
/// and nothing is left but the outcome.
fn check_trial(what: &str, table: &Path, fp0: (u64, u64, u64), uid: &str) -> bool {
    let l = live(table);
    let parent_live = table.join("nb-1-big-Data.db").exists();
    assert!(
        (parent_live && l.len() == 1) || (!parent_live && l.len() == 3),
        "{what}: both or neither: {:?}",
        names(table)
    );
    for n in names(table).iter().filter(|n| n.starts_with("nb-")) {
        let (p, _) = n.rsplit_once("-big-").unwrap();
        assert!(
            table.join(format!("{p}-big-TOC.txt")).exists(),
            "{what}: orphan {n}"
        );
    }
    assert_eq!(sstcheck_fp(&l), fp0, "{what}");
    let job = table.join(".cleave-pending").join(uid);
    if !parent_live {
        assert_eq!(outcome(table, uid)["result"]["state"], "Complete", "{what}");
        assert_eq!(names(&job), vec!["outcome.json".to_string()], "{what}");
    } else {
        assert!(!job.exists(), "{what}: {:?}", names(&job));
    }
    !parent_live
}

#[test]
fn sigkill_pend_or_apply_at_every_fault_point_ends_in_parent_or_children() {
    let Some(m) = xfs_or_skip("on_restart_crash", 512 << 20) else {
        return;
    };
    if shared_dir().is_none() {
        return;
    }
    let list = m.mount_point.join("points.txt");
    // The points of an unharmed pend and apply.
    let w = m.mount_point.join("w0");
    let table = table_in(&w);
    let fp0 = sstcheck_fp(&[table.join("nb-1-big-Data.db")]);
    let pend_points = fault_points(pend_cmd(&table, "j"), &list);
    let apply_points = fault_points(apply_pending(&w), &list);
    assert!(check_trial("unharmed", &table, fp0, "j"));
    let mut trials = 0;
    let mut children = 0;
    for (phase, points) in [("pend", &pend_points), ("apply", &apply_points)] {
        for (point, count) in points {
            // The first and the last time a point is reached.
            let mut nths = vec![1];
            if *count > 1 {
                nths.push(*count);
            }
            for nth in nths {
                trials += 1;
                let what = format!("{phase} killed at {point}@{nth}");
                let w = m.mount_point.join(format!("w{trials}"));
                let table = table_in(&w);
                let mut c = pend_cmd(&table, "j");
                if phase == "pend" {
                    c.env("CLEAVE_CRASH_AT", format!("{point}@{nth}"));
                    let out = c.output().unwrap();
                    assert!(!out.status.success(), "{what}: not killed");
                } else {
                    assert!(c.output().unwrap().status.success());
                    let out = apply_pending(&w)
                        .env("CLEAVE_CRASH_AT", format!("{point}@{nth}"))
                        .output()
                        .unwrap();
                    assert!(!out.status.success(), "{what}: not killed");
                }
                apply_pending_ok(&w);
                if check_trial(&what, &table, fp0, "j") {
                    children += 1;
                }
                // A second run is a no-op.
                let snap = snapshot(&w);
                apply_pending_ok(&w);
                assert_eq!(snapshot(&w), snap, "{what}: second run changed files");
                std::fs::remove_dir_all(&w).unwrap();
            }
        }
    }
    eprintln!(
        "on-restart crash campaign: {} pend points, {} apply points, {trials} kills, {children} ended in children, {} in the parent",
        pend_points.len(),
        apply_points.len(),
        trials - children
    );
    assert!(
        trials >= 15,
        "too few fault points: {pend_points:?} {apply_points:?}"
    );
    // Every kill of apply-pending ends in the children (the parent never changed).
    assert!(children >= apply_points.len());
}

/// `unshare --pid --fork --mount-proc`: cleave alone in a PID namespace of its own.
#[test]
fn replace_alone_in_a_pid_namespace_is_cassandra_may_be_running() {
    let Some(m) = xfs_or_skip("pidns_alone", 512 << 20) else {
        return;
    };
    let table = table_in(&m.mount_point.join("data"));
    let snap = snapshot(&table);
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(cleave_bin())
        .arg("split")
        .arg(table.join("nb-1-big-Data.db"))
        .arg("--out")
        .arg(&table)
        .args(["--parts", "2", "--publish", "replace", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    assert_eq!(v["error"]["reason"], "CassandraMayBeRunning", "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("shareProcessNamespace"));
    assert_eq!(snapshot(&table), snap);
}

/// A process started through `nsenter` (which forks into the PID namespace and waits): the
/// child in the namespace is killed with it, by pid, when dropped.
struct KillTree(std::process::Child);

impl Drop for KillTree {
    fn drop(&mut self) {
        let pid = self.0.id();
        let kids =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for k in kids.split_whitespace() {
            if let Ok(k) = k.parse::<i32>() {
                // SAFETY: kill(2) of a pid this test started.
                unsafe { libc::kill(k, libc::SIGKILL) };
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The sidecar shape: a PID namespace whose PID 1 is another UID's idle process (`pause`,
/// UID 65535) that cannot reach the table (0750 directories of UID 999), cleave as UID 999
/// without capabilities in a mount namespace of its own, and Cassandra stand-ins under UID
/// 999 holding the parent or not.
#[test]
fn sidecar_shape_guard_sees_cassandra_and_ignores_pause() {
    let Some(m) = xfs_or_skip("sidecar_shape", 512 << 20) else {
        return;
    };
    let data = m.mount_point.join("data");
    let table = table_in(&data);
    let chown = Command::new("chown")
        .args(["-R", "999:999"])
        .arg(&data)
        .status()
        .unwrap();
    assert!(chown.success());
    for d in [data.clone(), data.join("ks"), table.clone()] {
        let s = Command::new("chmod").arg("0750").arg(&d).status().unwrap();
        assert!(s.success());
    }
    // PID 1 of the namespace: pause, UID 65535.
    let pause = KillOnDrop(
        Command::new("unshare")
            .args(["--pid", "--kill-child", "--mount-proc", "setpriv"])
            .args(["--reuid", "65535", "--regid", "65535", "--clear-groups"])
            .args(["sleep", "600"])
            .spawn()
            .unwrap(),
    );
    // The namespace's PID 1 is the child of unshare's fork.
    let mut pid1 = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", pause.0.id()))
            .unwrap_or_default();
        if let Some(k) = kids.split_whitespace().next() {
            let cmd = std::fs::read_to_string(format!("/proc/{k}/cmdline")).unwrap_or_default();
            if cmd.starts_with("sleep") {
                pid1 = Some(k.to_string());
                break;
            }
        }
    }
    let pid1 = pid1.expect("the namespace's PID 1");
    // setpriv's uid change clears unshare's --kill-child death signal, and a namespace's
    // init ignores SIGTERM: SIGKILL it by pid when the test ends, even on a failed assert.
    let _pid1_guard = KillPid(pid1.parse().expect("a pid"));
    // A command in that PID namespace and its /proc.
    let in_pod = |uid: &str, own_mount_ns: bool| {
        let mut c = Command::new("nsenter");
        c.args(["-t", &pid1, "-p", "-m"]);
        if own_mount_ns {
            c.args(["unshare", "--mount", "--propagation", "private"]);
        }
        c.args(["setpriv", "--reuid", uid, "--regid", uid, "--clear-groups"]);
        c
    };
    let split = |parts: &str| {
        let mut c = in_pod("999", true);
        c.arg(cleave_bin())
            .arg("split")
            .arg(table.join("nb-1-big-Data.db"))
            .arg("--out")
            .arg(&table)
            .args(["--parts", parts, "--publish", "replace", "--json"]);
        c.output().unwrap()
    };
    let snap = snapshot(&table);
    {
        // Cassandra (UID 999) holds the parent: seen.
        let f = std::fs::File::open(table.join("nb-1-big-Data.db")).unwrap();
        let mut c = in_pod("999", false);
        c.args(["sleep", "600"]).stdin(f);
        let _cassandra = KillTree(c.spawn().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(300));
        let out = split("2");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(v["error"]["reason"], "CassandraRunning", "{v}");
        assert_eq!(snapshot(&table), snap);
    }
    {
        // A Cassandra stand-in that holds nothing of the table, and pause: the guard passes.
        let mut c = in_pod("999", false);
        c.args(["sleep", "600"]);
        let _idle = KillTree(c.spawn().unwrap());
        std::thread::sleep(std::time::Duration::from_millis(300));
        let out = split("2");
        assert!(
            out.status.success(),
            "{} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!table.join("nb-1-big-Data.db").exists());
    }
    drop(pause);
}

/// An AnticompactionJob with `publish: OnRestart`, for the sidecar of node `n1`.
fn on_restart_job(name: &str, data: &Path, parent: &str) -> String {
    format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: {name}\n  namespace: default\n  labels:\n    cleave.dev/node: n1\nspec:\n  nodeName: n1\n  dataDirectory: {}\n  keyspace: ks\n  sstables: [{parent}]\n  ranges:\n    - {{start: \"-3074457345618258603\", end: \"3074457345618258602\"}}\n  repairedAt: 1700000000000\n  publish: OnRestart\n",
        data.display()
    )
}

/// The job's status once its phase is one of `phases`.
fn job_in(
    c: &common::k8s::Cluster,
    name: &str,
    phases: &[&str],
    timeout: Duration,
) -> serde_json::Value {
    c.wait(&format!("{name} in {phases:?}"), timeout, || {
        let o = c.get("anticompactionjob", name)?;
        let p = o["status"]["phase"].as_str()?;
        assert!(
            phases.contains(&p) || ["Pending", "Running", "AwaitingRestart"].contains(&p),
            "{name}: unexpected {o:#}"
        );
        phases.contains(&p).then(|| o["status"].clone())
    })
}

fn condition<'a>(st: &'a serde_json::Value, ty: &str) -> &'a serde_json::Value {
    st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == ty)
        .unwrap_or_else(|| panic!("no {ty} condition: {st:#}"))
}

/// The operator side on the real apiserver: an `OnRestart` job stages while a Cassandra
/// stand-in holds its parent and waits in `AwaitingRestart`; `apply-pending` refuses while
/// the stand-in runs and changes nothing, publishes once it stopped; the sidecar started
/// afterwards marks the job `Complete` with the live children, which hold exactly the
/// parent's keys. A second job, whose parent is compacted away before the restart, is
/// settled by the sidecar that kept running (within its 10 s poll): `Failed` /
/// `ParentChanged`, its children gone.
#[test]
fn an_on_restart_job_awaits_the_restart_and_the_sidecar_settles_its_outcome() {
    use common::k8s::{control_plane_or_skip, Cluster, Sidecar};
    if !control_plane_or_skip("on-restart job") {
        return;
    }
    let Some(m) = xfs_or_skip("on_restart_job", 512 << 20) else {
        return;
    };
    if shared_dir().is_none() {
        eprintln!("SKIP: no ../shared");
        return;
    }
    let data = m.mount_point.join("data");
    let table = data.join(TABLE);
    gen_table(&table, &[(1, "512KiB"), (2, "512KiB")]);
    let p1 = table.join("nb-1-big-Data.db");
    let fp1 = sstcheck_fp(std::slice::from_ref(&p1));
    let c = Cluster::start();
    c.apply_crds();

    // Cassandra runs (a stand-in holds the parent): the job stages beside it.
    let cassandra = holder(&p1);
    let sidecar = Sidecar::start(&c, &data, &[]);
    c.apply(&on_restart_job("first", &data, "nb-1-big-Data.db"));
    let st = job_in(&c, "first", &["AwaitingRestart"], Duration::from_secs(120));
    let cond = condition(&st, "AwaitingRestart");
    assert_eq!(cond["status"], "True", "{st:#}");
    let how = cond["message"].as_str().unwrap();
    assert!(
        how.contains("kubectl delete pod n1")
            && how.contains("CassandraTask")
            && how.contains("apply-pending"),
        "{how}"
    );
    assert_eq!(condition(&st, "Running")["status"], "False");
    assert!(
        st["worker"].is_null(),
        "no lease while awaiting the restart: {st:#}"
    );
    let staged: Vec<&str> = st["results"][0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(
        !staged.is_empty() && staged.iter().all(|c| c.contains("/.cleave-pending/")),
        "{staged:?}"
    );
    assert_eq!(
        data_files(&table),
        vec![p1.clone(), table.join("nb-2-big-Data.db")],
        "nothing live changed"
    );
    // The job stays there while nothing restarts (a reconcile does not run it again).
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        c.phase("anticompactionjob", "first").as_deref(),
        Some("AwaitingRestart")
    );

    // The init container before Cassandra stopped: refused, nothing changed.
    let snap = snapshot(&data);
    let out = apply_pending(&data).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["reason"], "CassandraRunning", "{v}");
    assert_eq!(
        snapshot(&data),
        snap,
        "a refused apply-pending changed files"
    );
    // As the chart's init container runs it: the same refusal, but Cassandra may start.
    let out = apply_pending(&data)
        .arg("--never-block-start")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["reason"], "CassandraRunning", "{v}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("the intents wait for the next restart"));
    assert_eq!(
        snapshot(&data),
        snap,
        "a refused apply-pending changed files"
    );

    // The pod restarts: sidecar and Cassandra stop, the init container publishes, the
    // sidecar starts again (before Cassandra) and settles the job.
    drop(sidecar);
    drop(cassandra);
    let r = apply_pending_ok(&data);
    assert_eq!(r["jobs"][0]["action"], "applied", "{r}");
    let sidecar = Sidecar::start(&c, &data, &[]);
    let st = job_in(
        &c,
        "first",
        &["Complete", "Failed"],
        Duration::from_secs(60),
    );
    assert_eq!(st["phase"], "Complete", "{st:#}");
    assert_eq!(condition(&st, "AwaitingRestart")["status"], "False");
    let children: Vec<PathBuf> = st["results"][0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| PathBuf::from(c.as_str().unwrap()))
        .collect();
    assert!(!children.is_empty());
    for ch in &children {
        assert_eq!(ch.parent(), Some(table.as_path()), "a live child: {ch:?}");
    }
    let mut live_now = live(&table);
    live_now.retain(|p| !p.ends_with("nb-2-big-Data.db"));
    let mut want = children.clone();
    want.sort();
    assert_eq!(
        live_now, want,
        "the live sstables are the job's children and nb-2"
    );
    assert!(!p1.exists());
    assert_eq!(
        sstcheck_fp(&children),
        fp1,
        "the children hold exactly the parent's keys"
    );
    assert!(
        eventually(Duration::from_secs(10), || !table
            .join(".cleave-pending")
            .exists()),
        "the outcome is removed once recorded: {:?}",
        names(&table)
    );

    // A second job, then its parent is compacted away before the restart; this time the
    // sidecar keeps running (the DaemonSet shape) and settles it by itself.
    c.apply(&on_restart_job("second", &data, "nb-2-big-Data.db"));
    job_in(&c, "second", &["AwaitingRestart"], Duration::from_secs(120));
    for f in names(&table).iter().filter(|n| n.starts_with("nb-2-")) {
        std::fs::rename(table.join(f), table.join(f.replacen("nb-2-", "nb-90-", 1))).unwrap();
    }
    let r = apply_pending_ok(&data);
    assert_eq!(
        r["jobs"][0]["outcome"]["result"]["reason"], "ParentChanged",
        "{r}"
    );
    let t = std::time::Instant::now();
    let st = job_in(
        &c,
        "second",
        &["Complete", "Failed"],
        Duration::from_secs(30),
    );
    assert!(t.elapsed() <= Duration::from_secs(30));
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert_eq!(st["reason"], "ParentChanged", "{st:#}");
    assert!(
        st["message"].as_str().unwrap().contains("nb-2-big-Data.db"),
        "{st:#}"
    );
    assert!(
        eventually(Duration::from_secs(10), || !table
            .join(".cleave-pending")
            .exists()),
        "the second job's children are gone: {:?}",
        names(&table)
    );
    let mut live_now = live(&table);
    live_now.retain(|p| !p.ends_with("nb-90-big-Data.db"));
    assert_eq!(live_now, want, "the first job's children are untouched");
    drop(sidecar);
}

/// The DaemonSet shape with the chart's `daemonset.processCapabilities`: a UID-0 container
/// with only `CAP_DAC_READ_SEARCH`, `CAP_SYS_PTRACE` and `CAP_DAC_OVERRIDE` (its bounding set
/// is exactly those) sees the open files of a UID-999 Cassandra and refuses the Replace with
/// `CassandraRunning`; without `CAP_SYS_PTRACE` (reading the fd links), or without both
/// `CAP_DAC_READ_SEARCH` and `CAP_DAC_OVERRIDE` (listing the fd directory), it cannot read
/// them and says `CassandraMayBeRunning` (docs/split.md "The Replace guard"). Nothing
/// changes on disk in any case.
#[test]
fn the_daemonset_capabilities_let_the_guard_see_another_uids_cassandra() {
    let d = tempfile::tempdir().unwrap();
    let table = table_in(d.path());
    let parent = table.join("nb-1-big-Data.db");
    let _cassandra = holder(&parent);
    std::thread::sleep(Duration::from_millis(300));
    let snap = snapshot(&table);
    for (caps, want) in [
        (
            "+dac_read_search,+sys_ptrace,+dac_override",
            "CassandraRunning",
        ),
        // CAP_DAC_OVERRIDE bypasses the directory's read check as CAP_DAC_READ_SEARCH
        // does: with it, listing another UID's fd directory needs nothing more.
        ("+sys_ptrace,+dac_override", "CassandraRunning"),
        ("+sys_ptrace", "CassandraMayBeRunning"),
        ("+dac_read_search,+dac_override", "CassandraMayBeRunning"),
        ("+dac_read_search", "CassandraMayBeRunning"),
    ] {
        let out = Command::new("setpriv")
            .arg(format!("--bounding-set=-all,{caps}"))
            .arg("--inh-caps=-all")
            .arg(cleave_bin())
            .arg("split")
            .arg(&parent)
            .arg("--out")
            .arg(&table)
            .args(["--parts", "2", "--publish", "replace", "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{caps}: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(v["error"]["reason"], want, "{caps}: {v}");
        assert_eq!(snapshot(&table), snap, "{caps}: the table changed");
    }
}

/// A node's first boot: cass-operator's `server-data` volume is empty and Cassandra creates
/// `data/` only when it first starts, after the init container. `apply-pending` (as the
/// chart runs it) reports nothing pending, exits 0 and writes nothing to stderr: an error
/// logged on every new node would teach admins to ignore the init container's log. An empty
/// data directory is the same. Issue 37 item 2.
#[test]
fn a_first_boot_on_an_empty_volume_is_nothing_pending_without_an_error() {
    let volume = tempfile::tempdir().unwrap();
    let data = volume.path().join("data");
    for (what, json) in [("missing", true), ("missing", false), ("empty", true)] {
        if what == "empty" {
            std::fs::create_dir(&data).unwrap();
        }
        let mut c = Command::new(cleave_bin());
        c.arg("apply-pending")
            .arg(format!("--data-dir={}", data.display()));
        if json {
            c.arg("--json");
        }
        // Once with the chart's --never-block-start, once without: a first boot is not a
        // failure that flag forgives, it is nothing to do.
        for never_block in [true, false] {
            let mut c2 = Command::new(cleave_bin());
            c2.args(c.get_args());
            if never_block {
                c2.arg("--never-block-start");
            }
            let out = c2.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && stderr.is_empty(),
                "{what} data dir (json {json}, never-block {never_block}): {:?}\nstdout: {stdout}\nstderr: {stderr}",
                out.status
            );
            if json {
                let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
                assert_eq!(v["jobs"], serde_json::json!([]), "{v}");
                assert_eq!(v["tables"], 0, "{v}");
                assert_eq!(v["data_dir_exists"], what == "empty", "{v}");
            } else {
                assert!(stdout.contains("nothing pending"), "{stdout}");
            }
        }
    }
    // Nothing was created: the directory is Cassandra's to make.
    assert_eq!(
        std::fs::read_dir(&data).unwrap().count(),
        0,
        "apply-pending wrote into the empty data directory"
    );
}
