//! The Replace guard against a Cassandra that reaches the table's files by another path than
//! cleave's (issue 31, item 6): from another mount namespace with the volume mounted
//! elsewhere, through a bind mount, through a memory map of a path with a space; and
//! `apply-pending` as an init container's first process in a PID namespace of its own, the
//! K8ssandraCluster shape, where it cannot see Cassandra's container (item 7).
//!
//! Every refusal is checked to change nothing: the bytes of every file of the data directory
//! before and after.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;

const TABLE: &str = "ks/t-0123456789abcdef0123456789abcdef";

/// One 512 KiB sstable (generation 1) in `data/ks/t-…`.
fn table_in(data: &Path) -> PathBuf {
    let t = data.join(TABLE);
    gen_table(&t, &[(1, "512KiB")]);
    t
}

/// `cleave split <gen 1> --out <table> --parts 2 --publish replace --json`.
fn split_replace(table: &Path) -> Command {
    let mut c = Command::new(cleave_bin());
    c.arg("split")
        .arg(table.join("nb-1-big-Data.db"))
        .arg("--out")
        .arg(table)
        .args(["--parts", "2", "--publish", "replace", "--json"]);
    c
}

/// `cleave cleanup <table>` keeping half the ring, published by Replace (its default).
fn cleanup_replace(table: &Path) -> Command {
    let ranges = table.parent().unwrap().join("owned.yaml");
    std::fs::write(&ranges, "- {start: \"-9223372036854775808\", end: \"0\"}\n").unwrap();
    let mut c = Command::new(cleave_bin());
    c.arg("cleanup")
        .arg(table)
        .arg("--owned-ranges")
        .arg(&ranges)
        .args(["--publish", "replace", "--json"]);
    c
}

/// The `{"error": …}` of a refused `--json` run (exit 1).
fn refusal(what: &str, out: &Output) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(1), "{what} must be refused: {v}");
    v["error"].clone()
}

/// Runs `cmd` and checks it is refused with `reason`, changing no byte under `data`.
fn refused_unchanged(what: &str, mut cmd: Command, data: &Path, reason: &str) -> serde_json::Value {
    let before = snapshot(data);
    let e = refusal(what, &cmd.output().unwrap());
    assert_eq!(e["reason"], reason, "{what}: {e}");
    assert_eq!(snapshot(data), before, "{what}: a refusal changed files");
    e
}

/// A shell command run as a Cassandra stand-in, which prints `ready` once it holds what it
/// should; killed (with its mount namespace, if it made one) when dropped.
fn holder(cmd: &mut Command) -> KillOnDrop {
    let mut c = KillOnDrop(cmd.stdout(Stdio::piped()).spawn().unwrap());
    let mut line = String::new();
    std::io::BufReader::new(c.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the stand-in did not start");
    c
}

/// The holder in a mount namespace of its own, the volume bind-mounted at another path
/// there (`elsewhere`, empty in ours), reading `nb-1-big-Data.db` through that path: the
/// shape of Cassandra in its own container when the sidecar mounts the volume elsewhere.
fn holder_in_other_mount_ns(data: &Path, elsewhere: &Path) -> KillOnDrop {
    std::fs::create_dir_all(elsewhere).unwrap();
    let script = format!(
        "mount --bind \"$0\" \"$1\" && exec 3<\"$1/{TABLE}/nb-1-big-Data.db\" && echo ready && exec sleep 600"
    );
    holder(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .arg(data)
            .arg(elsewhere),
    )
}

#[test]
fn a_holder_in_another_mount_namespace_at_another_path_is_cassandra_running() {
    let Some(m) = xfs_or_skip("guard_mount_ns", 512 << 20) else {
        return;
    };
    let data = m.mount_point.join("data");
    let table = table_in(&data);
    let elsewhere = m.mount_point.join("elsewhere");
    let cassandra = holder_in_other_mount_ns(&data, &elsewhere);
    // Its fd names a path that does not exist in our namespace.
    let link = std::fs::read_link(format!("/proc/{}/fd/3", cassandra.0.id())).unwrap();
    assert!(link.starts_with(&elsewhere) && !link.exists(), "{link:?}");
    let holds = |e: &serde_json::Value| {
        e["message"]
            .as_str()
            .unwrap()
            .contains(&format!("process {} ", cassandra.0.id()))
    };
    for (what, cmd) in [
        ("split --publish replace", split_replace(&table)),
        ("cleanup --publish replace", cleanup_replace(&table)),
    ] {
        let e = refused_unchanged(what, cmd, &data, "CassandraRunning");
        assert!(holds(&e), "{what}: names the holder: {e}");
    }
    // Staging for the next restart needs no guard; publishing it does.
    pend_split(&table, "job-1");
    {
        let what = "apply-pending";
        let e = refused_unchanged(what, apply_pending(&data), &data, "CassandraRunning");
        assert!(holds(&e), "{what}: names the holder: {e}");
    }
    drop(cassandra);
    // Cassandra gone: the same apply-pending publishes.
    let r = apply_pending_ok(&data);
    assert_eq!(r["jobs"][0]["action"], "applied", "{r}");
}

/// Unmounts a bind mount this test made, when dropped (even on a failed assert).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_holder_through_a_bind_mount_is_cassandra_running() {
    if !cleave::io::proc::is_root() {
        eprintln!("SKIP bind mount: needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let table = table_in(&data);
    let bind = d.path().join("bind");
    std::fs::create_dir(&bind).unwrap();
    let st = Command::new("mount")
        .arg("--bind")
        .arg(&data)
        .arg(&bind)
        .status()
        .unwrap();
    assert!(st.success());
    let _unmount = Unmount(bind.clone());
    let cassandra = holder(
        Command::new("sh")
            .args(["-c", "exec 3<\"$0\" && echo ready && exec sleep 600"])
            .arg(bind.join(TABLE).join("nb-1-big-Data.db")),
    );
    for (what, cmd) in [
        ("split --publish replace", split_replace(&table)),
        ("cleanup --publish replace", cleanup_replace(&table)),
    ] {
        let e = refused_unchanged(what, cmd, &data, "CassandraRunning");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains(&format!("process {} ", cassandra.0.id())),
            "{what}: {e}"
        );
    }
}

/// A read-only shared mapping of `path` with its descriptor closed: only `maps` shows it.
struct Mapped(*mut libc::c_void, usize);

impl Mapped {
    fn new(path: &Path) -> Mapped {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(path).unwrap();
        let len = f.metadata().unwrap().len() as usize;
        // SAFETY: a fresh read-only mapping of a file we opened, unmapped on drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        Mapped(p, len)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.0, self.1) };
    }
}

#[test]
fn a_mapping_without_fd_on_a_path_with_a_space_is_cassandra_running() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("cassandra data");
    let table = table_in(&data);
    // This test's own process is the holder (cleave ignores only itself).
    let map = Mapped::new(&table.join("nb-1-big-Data.db"));
    let me = std::process::id();
    let fds: Vec<_> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .filter(|l| l.starts_with(&data))
        .collect();
    assert!(fds.is_empty(), "no fd, only the mapping: {fds:?}");
    for (what, cmd) in [
        ("split --publish replace", split_replace(&table)),
        ("cleanup --publish replace", cleanup_replace(&table)),
    ] {
        let e = refused_unchanged(what, cmd, &data, "CassandraRunning");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains(&format!("process {me} ")),
            "{what}: {e}"
        );
    }
    drop(map);
    let out = split_replace(&table).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A process holding the table's `flock` (as a cleave does, `io::lock`) and one of its own
/// temporary files under the data directory: another cleave, `Busy`. A Cassandra holding
/// a file beside it is still `CassandraRunning`.
#[test]
fn another_cleave_holding_the_lock_and_its_files_is_busy() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let table = table_in(&data);
    let tmp = table.join(".cleave-pending/job-9/children-x/nb-2-big-Data.db");
    std::fs::create_dir_all(tmp.parent().unwrap()).unwrap();
    std::fs::write(&tmp, b"partial").unwrap();
    let other_cleave = holder(Command::new("python3").args([
        "-c",
        "import fcntl, os, sys, time\n\
         d = os.open(sys.argv[1], os.O_RDONLY)\n\
         fcntl.flock(d, fcntl.LOCK_EX)\n\
         f = open(sys.argv[2], 'rb')\n\
         print('ready', flush=True)\n\
         time.sleep(600)",
        table.to_str().unwrap(),
        tmp.to_str().unwrap(),
    ]));
    for (what, cmd) in [
        ("split --publish replace", split_replace(&table)),
        ("apply-pending", apply_pending(&data)),
    ] {
        let e = refused_unchanged(what, cmd, &data, "Busy");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains(&format!("pid {}", other_cleave.0.id())),
            "{what}: {e}"
        );
    }
    let _cassandra = holder(
        Command::new("sh")
            .args(["-c", "exec 3<\"$0\" && echo ready && exec sleep 600"])
            .arg(table.join("nb-1-big-Data.db")),
    );
    // (apply-pending asks the guard first; split would take the table's lock first, Busy.)
    refused_unchanged(
        "a Cassandra beside a cleave",
        apply_pending(&data),
        &data,
        "CassandraRunning",
    );
}

/// The data directory of an XFS volume with one pending split, owned by UID 999 (Cassandra's
/// user, as the chart runs the init container).
fn pending_volume(m: &cleave::io::loopfs::LoopMount) -> (PathBuf, PathBuf) {
    let data = m.mount_point.join("data");
    let table = table_in(&data);
    pend_split(&table, "job-1");
    let st = Command::new("chown")
        .args(["-R", "999:999"])
        .arg(&data)
        .status()
        .unwrap();
    assert!(st.success());
    (data, table)
}

/// `cmd` as UID 999 without capabilities (the chart's init container: `runAsUser: 999`,
/// `drop: [ALL]`).
fn as_cassandra_user(c: &mut Command) -> &mut Command {
    c.args([
        "setpriv",
        "--reuid",
        "999",
        "--regid",
        "999",
        "--clear-groups",
    ])
}

/// `cleave apply-pending` as the first and only process of a new PID namespace: the init
/// container without `shareProcessNamespace` (K8ssandraCluster cannot set it).
fn apply_pending_as_pid1(data: &Path) -> Output {
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--kill-child", "--mount-proc"]);
    as_cassandra_user(&mut c)
        .arg(cleave_bin())
        .arg("apply-pending")
        .arg("--data-dir")
        .arg(data)
        .arg("--json")
        .output()
        .unwrap()
}

#[test]
fn apply_pending_as_the_init_containers_first_process_publishes() {
    let Some(m) = xfs_or_skip("init_container_pid1", 512 << 20) else {
        return;
    };
    let (data, table) = pending_volume(&m);
    let keys = dir_fingerprint(&table);
    let out = apply_pending_as_pid1(&data);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["jobs"][0]["action"], "applied", "{r}");
    assert!(!table.join("nb-1-big-Data.db").exists());
    let live = data_files(&table);
    assert_eq!(live.len(), 3, "{:?}", names(&table));
    assert_eq!(
        key_fingerprint(&live),
        keys,
        "the children hold exactly the parent's keys"
    );
}

#[test]
fn apply_pending_exec_d_into_a_running_container_or_beside_a_holder_refuses() {
    let Some(m) = xfs_or_skip("init_container_refusals", 512 << 20) else {
        return;
    };
    let (data, table) = pending_volume(&m);

    // 1. A running container: its PID 1 (Cassandra, UID 999, idle here) exists; cleave
    // enters its PID and mount namespaces as `kubectl exec` does, so it is not PID 1.
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--kill-child", "--mount-proc"]);
    let container = KillOnDrop(
        as_cassandra_user(&mut c)
            .args(["sleep", "600"])
            .spawn()
            .unwrap(),
    );
    let mut pid1 = None;
    for _ in 0..50 {
        let kids =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", container.0.id()))
                .unwrap_or_default();
        if let Some(k) = kids.split_whitespace().next() {
            pid1 = Some(k.to_string());
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let pid1 = pid1.expect("the container's PID 1");
    let _pid1 = KillPid(pid1.parse().unwrap());
    let mut exec = Command::new("nsenter");
    exec.args(["-t", &pid1, "-p", "-m"]);
    as_cassandra_user(&mut exec)
        .arg(cleave_bin())
        .arg("apply-pending")
        .arg("--data-dir")
        .arg(&data)
        .arg("--json");
    let e = refused_unchanged(
        "exec'd into a running container",
        exec,
        &data,
        "CassandraMayBeRunning",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("not its first process"),
        "{e}"
    );
    drop(container);

    // 2. PID 1 and alone, but a Cassandra it cannot see (another PID namespace: here the
    // host's) holds the parent: the kernel refuses the write lease.
    let _cassandra = holder(
        Command::new("sh")
            .args(["-c", "exec 3<\"$0\" && echo ready && exec sleep 600"])
            .arg(table.join("nb-1-big-Data.db")),
    );
    let before = snapshot(&data);
    let e = refusal("PID 1 beside a holder", &apply_pending_as_pid1(&data));
    assert_eq!(e["reason"], "CassandraMayBeRunning", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("write lease"),
        "{e}"
    );
    assert_eq!(snapshot(&data), before);

    // 3. And a mapping without fd, the same.
    drop(_cassandra);
    let map = Mapped::new(&table.join("nb-1-big-Data.db"));
    let e = refusal("PID 1 beside a mapping", &apply_pending_as_pid1(&data));
    assert_eq!(e["reason"], "CassandraMayBeRunning", "{e}");
    assert_eq!(snapshot(&data), before);
    drop(map);

    // 4. split --publish replace as PID 1 and alone keeps refusing: no kubelet ordering
    // protects a Job's container. (A table of its own, without an intent.)
    let table = data.join("ks2/t-0123456789abcdef0123456789abcdef");
    gen_table(&table, &[(1, "256KiB")]);
    let st = Command::new("chown")
        .args(["-R", "999:999"])
        .arg(data.join("ks2"))
        .status()
        .unwrap();
    assert!(st.success());
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--kill-child", "--mount-proc"]);
    as_cassandra_user(&mut c)
        .arg(cleave_bin())
        .arg("split")
        .arg(table.join("nb-1-big-Data.db"))
        .arg("--out")
        .arg(&table)
        .args(["--parts", "2", "--publish", "replace", "--json"]);
    refused_unchanged("split as PID 1", c, &data, "CassandraMayBeRunning");
}
