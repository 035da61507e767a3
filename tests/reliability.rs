//! Regression tests for the seven findings of issue 12 (each seen failing on the code
//! before its fix): concurrent cleaves, transaction-log paths, laundered CRCs, replace after
//! COMMIT, replace before COMMIT and the reflink probe, missing or odd components, and
//! transaction-log names Cassandra accepts.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn nb_clust(shared: &Path) -> PathBuf {
    shared.join("corpus/gitarcode-test+cassandra/test/data/legacy-sstables/nb/legacy_tables/legacy_nb_clust/nb-1-big-Data.db")
}

/// A table directory `<tmp>/ks/t-<id>` holding a copy of the sstable `data_db`.
fn table_with(data_db: &Path) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("ks/t-0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&table).unwrap();
    let name = data_db.file_name().unwrap().to_str().unwrap();
    let prefix = name.strip_suffix("Data.db").unwrap();
    for e in std::fs::read_dir(data_db.parent().unwrap()).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_str().unwrap().starts_with(prefix) {
            std::fs::write(table.join(e.file_name()), std::fs::read(e.path()).unwrap()).unwrap();
        }
    }
    let parent = table.join(name);
    (d, table, parent)
}

/// A generated Murmur3 `nb` sstable (`cleave gen`) in its own table directory.
fn generated(size: &str, uncompressed: bool) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("ks/g-0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&table).unwrap();
    let mut c = Command::new(cleave_bin());
    c.arg("gen").arg("--out").arg(&table).args([
        "--size",
        size,
        "--partition-size",
        "2KiB",
        "--row-size",
        "256",
        "--chunk",
        "4KiB",
    ]);
    if uncompressed {
        c.arg("--uncompressed");
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", said(&out));
    std::fs::remove_file(table.join("schema.cql")).ok();
    let parent = table.join("nb-1-big-Data.db");
    (d, table, parent)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn data_files(dir: &Path) -> Vec<PathBuf> {
    names(dir)
        .iter()
        .filter(|n| n.ends_with("-Data.db"))
        .map(|n| dir.join(n))
        .collect()
}

/// Runs a command, killing it after `secs`: a hang is a failure, never a stuck suite.
fn run_with_timeout(c: &mut Command, secs: u64) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("{c:?} hung for {secs} s: {}", said(&out));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What a cleave run said: stderr, then stdout, where `--json` puts a failure
/// (`{"error": {"reason", "message", "path"}}`, cli::split::Failed).
fn said(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    )
}

fn cleave(args: &[&std::ffi::OsStr]) -> Output {
    run_with_timeout(Command::new(cleave_bin()).args(args), 60)
}

fn split_cmd(parent: &Path, out: &Path, publish: &str) -> Command {
    let mut c = Command::new(cleave_bin());
    c.arg("split").arg(parent).arg("--out").arg(out).args([
        "--parts",
        "3",
        "--publish",
        publish,
        "--json",
    ]);
    c
}

/// `cleave verify --json` of every Data.db in `dir`: (all ok, total partitions, xor, sum).
fn verify_dir(dir: &Path) -> (bool, u64, String, String) {
    let files = data_files(dir);
    if files.is_empty() {
        return (true, 0, "0".repeat(16), "0".repeat(16));
    }
    let mut c = Command::new(cleave_bin());
    c.arg("verify").args(&files).arg("--json");
    let out = run_with_timeout(&mut c, 60);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        v["ok"].as_bool().unwrap(),
        v["total"]["partitions"].as_u64().unwrap(),
        v["total"]["keys_xor"].as_str().unwrap().to_string(),
        v["total"]["keys_sum"].as_str().unwrap().to_string(),
    )
}

/// A process holding `flock(LOCK_EX)` on `dir` (what a running cleave holds) until killed.
fn hold_lock(dir: &Path) -> KillOnDrop {
    let mut p = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import fcntl, os, time\nfd = os.open({:?}, os.O_RDONLY)\nfcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(120)",
            dir.to_str().unwrap()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(p.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    KillOnDrop(p)
}

/// Finding 1: a second cleave on a table (or an --out) that another one holds fails with
/// Busy and changes nothing; recover waits its turn too.
#[test]
fn a_held_table_or_out_makes_split_and_recover_busy() {
    let Some(shared) = corpus_or_skip("busy") else {
        return;
    };
    let (d, table, parent) = table_with(&nb_clust(&shared));
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let before = snapshot(d.path());
    {
        let _held = hold_lock(&table);
        for (o, publish) in [(&table, "replace"), (&out, "stage")] {
            let r = run_with_timeout(&mut split_cmd(&parent, o, publish), 60);
            let err = said(&r);
            assert_eq!(r.status.code(), Some(1), "{publish}: {err}");
            assert!(err.contains("another cleave"), "{publish}: {err}");
            assert!(
                err.contains(table.to_str().unwrap()),
                "names the dir: {err}"
            );
        }
        let r = cleave(&["recover".as_ref(), table.as_os_str()]);
        assert_eq!(r.status.code(), Some(1));
        assert!(said(&r).contains("another cleave"));
    }
    {
        let _held = hold_lock(&out);
        let r = run_with_timeout(&mut split_cmd(&parent, &out, "stage"), 60);
        assert_eq!(r.status.code(), Some(1));
        assert!(said(&r).contains("another cleave"));
    }
    assert_eq!(before, snapshot(d.path()), "a Busy split changes nothing");
    // Released: the split runs.
    let r = run_with_timeout(&mut split_cmd(&parent, &out, "stage"), 60);
    assert!(r.status.success(), "{}", said(&r));
}

/// Finding 1, as it was found: cleaves started at once on one table / one --out. Whatever
/// interleaving happens, every success is whole and nothing is counted twice.
#[test]
fn concurrent_splits_never_duplicate_or_lose_a_partition() {
    let (d, table, parent) = generated("2MiB", false);
    let (ok, parts, xor, sum) = verify_dir(&table);
    assert!(ok && parts > 0);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // Three stage splits of one parent into one --out.
    let kids: Vec<_> = (0..3)
        .map(|_| {
            split_cmd(&parent, &out, "stage")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut successes = 0;
    for k in kids {
        let o = k.wait_with_output().unwrap();
        let err = said(&o);
        if o.status.success() {
            successes += 1;
        } else {
            assert!(err.contains("another cleave"), "only Busy may fail: {err}");
        }
    }
    assert!(successes >= 1);
    let (ok, n, _, _) = verify_dir(&out);
    assert!(ok, "children in --out verify");
    assert_eq!(
        n,
        successes * parts,
        "{successes} successful splits: {:?}",
        names(&out)
    );
    assert!(!names(&out)
        .iter()
        .any(|n| n.starts_with(".cleave") || n.contains("_txn_")));
    // Two replaces of one table.
    let kids: Vec<_> = (0..2)
        .map(|_| {
            split_cmd(&parent, &table, "replace")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for k in kids {
        let o = k.wait_with_output().unwrap();
        let err = said(&o);
        assert!(
            o.status.success() || err.contains("another cleave") || err.contains("No such file"),
            "{err}"
        );
    }
    assert_eq!(
        verify_dir(&table),
        (true, parts, xor, sum),
        "the table holds the parent's partitions exactly once: {:?}",
        names(&table)
    );
}

/// Finding 2: a log whose records name files outside the table directory, or names that
/// are not sstables, is refused whole and nothing is deleted.
#[test]
fn recover_refuses_logs_naming_paths_outside_the_table() {
    let Some(shared) = corpus_or_skip("log paths") else {
        return;
    };
    use cleave::split::publish::log_record;
    let (d, table, _parent) = table_with(&nb_clust(&shared));
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    for f in ["important-Data.db", "important-TOC.txt", "nb-9-big-Data.db"] {
        std::fs::write(elsewhere.join(f), b"precious").unwrap();
    }
    std::fs::write(table.join("important-Data.db"), b"precious").unwrap();
    let t = table.to_str().unwrap();
    let e = elsewhere.to_str().unwrap();
    for (record_path, committed) in [
        (format!("{e}/important"), false),
        (format!("{e}/nb-9-big"), false),
        (format!("{e}/nb-9-big"), true),
        (format!("{t}/../../elsewhere/nb-9-big"), false),
        (format!("{t}/important"), false),
        ("nb-1-big".to_string(), false),
    ] {
        let before = snapshot(d.path());
        let kind = if committed { "REMOVE" } else { "ADD" };
        let mut text = format!("{}\n", log_record(kind, &record_path, 0, 2));
        if committed {
            text.push_str(&format!("{}\n", log_record("COMMIT", "", 0, 0)));
        }
        let log =
            table.join("nb_txn_unknowncompactiontype_0f7c3a10-0000-1000-8000-636c65617665.log");
        std::fs::write(&log, &text).unwrap();
        let before_with_log = snapshot(d.path());
        let r = cleave(&["recover".as_ref(), table.as_os_str()]);
        let err = said(&r);
        assert_eq!(r.status.code(), Some(1), "{record_path}: {err}");
        assert!(
            err.contains("refused, nothing deleted"),
            "{record_path}: {err}"
        );
        assert!(err.contains(&record_path), "names the record: {err}");
        assert_eq!(
            before_with_log,
            snapshot(d.path()),
            "{record_path}: nothing deleted"
        );
        std::fs::remove_file(&log).unwrap();
        assert_eq!(before, snapshot(d.path()));
    }
}

/// Finding 3: a corrupt block of an uncompressed parent that a child would re-derive (and
/// give a fresh CRC) fails the split as corrupt instead of coming out clean.
#[test]
fn corrupt_uncompressed_block_is_not_laundered() {
    let (d, table, parent) = generated("256KiB", true);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let plan = cleave_json(&[
        "split".as_ref(),
        parent.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--parts".as_ref(),
        "2".as_ref(),
        "--dry-run".as_ref(),
        "--json".as_ref(),
    ]);
    let g = &plan["plan"][1]["geometry"];
    let at = g["base"].as_u64().unwrap() + g["dead_prefix"].as_u64().unwrap() + 200;
    let mut b = std::fs::read(&parent).unwrap();
    b[at as usize] ^= 0x20;
    std::fs::write(&parent, &b).unwrap();
    let (ok, ..) = verify_dir(&table);
    assert!(!ok, "the parent fails verify");
    let before = snapshot(d.path());
    let r = cleave(&[
        "split".as_ref(),
        parent.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--parts".as_ref(),
        "2".as_ref(),
    ]);
    let err = said(&r);
    assert_eq!(r.status.code(), Some(1), "the split must refuse: {err}");
    assert!(err.contains("checksum mismatch in block"), "{err}");
    assert!(err.contains("nb-1-big-Data.db"), "{err}");
    assert_eq!(before, snapshot(d.path()), "nothing written");
    assert!(names(&out).is_empty());
}

fn chattr(flag: &str, p: &Path) -> bool {
    Command::new("chattr")
        .arg(flag)
        .arg(p)
        .status()
        .is_ok_and(|s| s.success())
}

/// Finding 4: once COMMIT is written, a parent file that cannot be deleted does not turn
/// the split into a failure: it succeeds, says what is left, keeps the committed log; and
/// recover names exactly what blocks it, then finishes once the obstacle is gone.
#[test]
fn replace_goes_forward_after_commit_and_recover_names_the_blocker() {
    let Some(shared) = corpus_or_skip("after commit") else {
        return;
    };
    let (_d, table, parent) = table_with(&nb_clust(&shared));
    if !chattr("+i", &parent) {
        eprintln!("SKIP after commit: chattr +i is not available on this filesystem");
        return;
    }
    let r = run_with_timeout(&mut split_cmd(&parent, &table, "replace"), 60);
    chattr("-i", &parent); // before any assert, so the temp dir can be removed
    let err = said(&r);
    assert!(r.status.success(), "committed means success: {err}");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    let left = v["left_behind"].to_string();
    assert!(left.contains("nb-1-big-Data.db"), "{left}");
    assert!(left.contains("cleave recover"), "{left}");
    let children: Vec<PathBuf> = v["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
        .collect();
    sstcheck_all(&shared, &children);
    assert!(
        !table.join("nb-1-big-TOC.txt").exists(),
        "TOC deleted first"
    );
    let log: Vec<String> = names(&table)
        .into_iter()
        .filter(|n| n.contains("_txn_"))
        .collect();
    assert_eq!(log.len(), 1, "the committed log stays: {:?}", names(&table));
    // recover while the obstacle is there: exit 1, naming the file; the log stays.
    chattr("+i", &parent);
    let r = cleave(&["recover".as_ref(), table.as_os_str()]);
    chattr("-i", &parent);
    let err = said(&r);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("blocked by 1 file"), "{err}");
    assert!(err.contains(parent.to_str().unwrap()), "{err}");
    assert!(names(&table).iter().any(|n| n.contains("_txn_")));
    // Obstacle gone: recover finishes.
    let r = cleave(&["recover".as_ref(), table.as_os_str()]);
    assert!(r.status.success(), "{}", said(&r));
    assert!(
        !names(&table)
            .iter()
            .any(|n| n.starts_with("nb-1-") || n.contains("_txn_") || n.starts_with('.')),
        "{:?}",
        names(&table)
    );
    sstcheck_all(&shared, &children);
}

/// Finding 5: a failure before COMMIT (here an injected EIO at each step of the swap)
/// rolls itself back: the parent exactly as it was, alone, no log, no staging, without
/// running recover. A failure after COMMIT still ends with exactly the children.
#[test]
fn a_failure_before_commit_rolls_itself_back() {
    let Some(shared) = corpus_or_skip("rollback") else {
        return;
    };
    for (point, committed) in [
        ("txn:append@1", false),
        ("txn:append@2", false),
        ("txn:append@4", false), // COMMIT itself
        ("fsync:dir-before@2", false),
        ("replace:rename@1", false),
        ("replace:rename@5", false),
        ("delete:file@1", true),
        ("delete:file@3", true),
    ] {
        let (_d, table, parent) = table_with(&nb_clust(&shared));
        let before = snapshot(&table);
        let r = run_with_timeout(
            split_cmd(&parent, &table, "replace").env("CLEAVE_FAIL_AT", point),
            60,
        );
        let err = said(&r);
        assert!(
            err.contains("injected errno"),
            "{point}: the point is reached: {err}"
        );
        if committed {
            assert!(r.status.success(), "{point}: after COMMIT: {err}");
            // The log stays for recover to delete the rest of the parent.
            let rec = cleave(&["recover".as_ref(), table.as_os_str()]);
            assert!(rec.status.success(), "{point}");
            assert!(!table.join("nb-1-big-Data.db").exists(), "{point}");
            assert_eq!(data_files(&table).len(), 3, "{point}: {:?}", names(&table));
        } else {
            assert_eq!(r.status.code(), Some(1), "{point}: {err}");
            assert_eq!(before, snapshot(&table), "{point}: rolled back by itself");
        }
        assert!(
            !names(&table)
                .iter()
                .any(|n| n.contains("_txn_") || n.starts_with('.')),
            "{point}: {:?}",
            names(&table)
        );
    }
}

/// Finding 5, the probe: it is made inside staging, so a kill anywhere leaves nothing that
/// recover does not remove; recover also removes probes older versions left.
#[test]
fn reflink_probe_lives_in_staging_and_recover_removes_stale_probes() {
    let Some(shared) = corpus_or_skip("probe") else {
        return;
    };
    let (_d, table, parent) = table_with(&nb_clust(&shared));
    let before = snapshot(&table);
    std::fs::write(
        table.join(".cleave-reflink-probe-0123456789abcdef0123456789abcdef"),
        b"",
    )
    .unwrap();
    let r = run_with_timeout(
        split_cmd(&parent, &table, "replace").env("CLEAVE_CRASH_AT", "write:child-file"),
        60,
    );
    assert!(!r.status.success(), "killed after the first child file");
    assert!(
        names(&table)
            .iter()
            .filter(|n| n.starts_with(".cleave-reflink-probe-"))
            .count()
            == 1,
        "no new probe outside staging: {:?}",
        names(&table)
    );
    let r = cleave(&["recover".as_ref(), table.as_os_str()]);
    assert!(r.status.success(), "{}", said(&r));
    assert_eq!(before, snapshot(&table), "recover leaves the parent alone");
}

/// Puts something that is not a regular file at a path.
type MakeOdd = Box<dyn Fn(&Path)>;

/// Finding 6: verify and inspect fail when a TOC-listed integrity component is missing,
/// and name what a component that is not a regular file really is.
#[test]
fn missing_or_odd_components_fail_verify_and_inspect() {
    let Some(shared) = corpus_or_skip("components") else {
        return;
    };
    let check = |data: &Path, want: &str| {
        for cmd in ["verify", "inspect"] {
            let r = cleave(&[cmd.as_ref(), data.as_os_str()]);
            let text = format!("{}{}", String::from_utf8_lossy(&r.stdout), said(&r));
            assert_eq!(r.status.code(), Some(1), "{cmd} {want}: {text}");
            assert!(text.contains(want), "{cmd}: expected {want:?}: {text}");
            assert!(!text.contains("panicked"), "{text}");
        }
    };
    // Uncompressed: CRC.db or Digest.crc32 deleted and a Data.db byte flipped.
    for gone in ["CRC.db", "Digest.crc32"] {
        let (_d, table, parent) = generated("64KiB", true);
        let mut b = std::fs::read(&parent).unwrap();
        let n = b.len();
        b[n / 2] ^= 1;
        std::fs::write(&parent, b).unwrap();
        std::fs::remove_file(table.join(format!("nb-1-big-{gone}"))).unwrap();
        check(&parent, &format!("{gone} is listed in TOC.txt but missing"));
    }
    // Compressed: CompressionInfo.db gone is not "uncompressed".
    let (_d, table, parent) = table_with(&nb_clust(&shared));
    std::fs::remove_file(table.join("nb-1-big-CompressionInfo.db")).unwrap();
    check(
        &parent,
        "CompressionInfo.db is listed in TOC.txt but missing",
    );
    // Not regular files: each named for what it is.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("x"), b"x").unwrap();
    let cases: Vec<(&str, MakeOdd, String)> = vec![
        (
            "Index.db",
            Box::new(|p| std::os::unix::fs::symlink("/etc/passwd", p).unwrap()),
            "a symbolic link to /etc/passwd".into(),
        ),
        (
            "Data.db",
            Box::new(|p| std::os::unix::fs::symlink("/dev/zero", p).unwrap()),
            "a symbolic link to /dev/zero".into(),
        ),
        (
            "Summary.db",
            Box::new(|p| std::os::unix::fs::symlink("/nonexistent/dangling", p).unwrap()),
            "a symbolic link to /nonexistent/dangling".into(),
        ),
        (
            "Filter.db",
            Box::new(|p| std::fs::create_dir(p).unwrap()),
            "a directory".into(),
        ),
        (
            "Statistics.db",
            Box::new(|p| {
                let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
                // SAFETY: a valid C string.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
            }),
            "a FIFO".into(),
        ),
    ];
    for (component, make, want) in cases {
        let (_d, table, _) = table_with(&nb_clust(&shared));
        let p = table.join(format!("nb-1-big-{component}"));
        std::fs::remove_file(&p).unwrap();
        make(&p);
        let data = table.join("nb-1-big-TOC.txt");
        check(&data, &want);
        check(&data, &format!("nb-1-big-{component}"));
    }
}

/// Finding 7: the log is named `<version>_txn_<OperationType.fileName>_<uuid>.log` with an
/// operation every Cassandra 3.0–5.0 parses (`OperationType.fromFileName`): UNKNOWN for a
/// split (what Cassandra's own sstablesplit logs), ANTICOMPACTION for anticompaction.
#[test]
fn transaction_log_names_are_ones_cassandra_parses() {
    // OperationType.fileName of every type present, with this spelling, in 3.0 … 5.0.
    const COMMON: [&str; 2] = ["unknowncompactiontype", "anticompactionafterrepair"];
    let (d, table, parent) = generated("256KiB", false);
    let ranges = d.path().join("ranges.yaml");
    std::fs::write(&ranges, "- {start: -9223372036854775808, end: 0}\n").unwrap();
    for (args, op) in [
        (vec!["--parts", "3"], COMMON[0]),
        (
            vec![
                "--ranges",
                ranges.to_str().unwrap(),
                "--repaired-at",
                "1000",
            ],
            COMMON[1],
        ),
    ] {
        let before = snapshot(&table);
        let mut c = Command::new(cleave_bin());
        c.arg("split")
            .arg(&parent)
            .arg("--out")
            .arg(&table)
            .args(["--publish", "replace"])
            .args(&args)
            .env("CLEAVE_CRASH_AT", "logged");
        let r = run_with_timeout(&mut c, 60);
        assert!(!r.status.success());
        let logs: Vec<String> = names(&table)
            .into_iter()
            .filter(|n| n.ends_with(".log"))
            .collect();
        assert_eq!(logs.len(), 1, "{:?}", names(&table));
        // LogFile.FILE_REGEX = ^(.{2})_txn_(.*)_(.*)\.log$, group 3 a UUID.
        let name = logs[0].strip_suffix(".log").unwrap();
        let (version, rest) = name.split_at(2);
        assert_eq!(version, "nb");
        let rest = rest.strip_prefix("_txn_").unwrap();
        let (operation, id) = rest.rsplit_once('_').unwrap();
        assert_eq!(operation, op, "{name}");
        uuid::Uuid::parse_str(id).unwrap();
        let r = cleave(&["recover".as_ref(), table.as_os_str()]);
        assert!(r.status.success());
        assert_eq!(before, snapshot(&table));
    }
}

/// No harm to a live node's page cache: a stage split next to a warm parent leaves exactly
/// the parent pages resident that were resident before (it drops only what it read in).
#[test]
fn a_stage_split_leaves_the_parents_resident_pages_as_they_were() {
    use cleave::io::residency::Residency;
    let (d, table, parent) = generated("4MiB", false);
    let index = table.join("nb-1-big-Index.db");
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // Cold, then warm the way a live node's reads would: all of Index.db, every other
    // 64 KiB of Data.db.
    for p in [&index, &parent] {
        let f = std::fs::File::open(p).unwrap();
        cleave::io::fs::drop_cache(&f, 0, 0);
    }
    let _ = std::fs::read(&index).unwrap();
    let f = std::fs::File::open(&parent).unwrap();
    let len = f.metadata().unwrap().len();
    let mut buf = vec![0u8; 65536];
    let mut off = 0;
    while off + 65536 <= len {
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, off).unwrap();
        off += 2 * 65536;
    }
    let before: Vec<Residency> = [&index, &parent]
        .iter()
        .map(|p| Residency::of(p).unwrap())
        .collect();
    if before[0].resident_pages() == 0 {
        eprintln!("SKIP page cache: mincore reports no resident page on this filesystem");
        return;
    }
    let r = cleave(&[
        "split".as_ref(),
        parent.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--parts".as_ref(),
        "4".as_ref(),
    ]);
    assert!(r.status.success(), "{}", said(&r));
    for (p, b) in [&index, &parent].iter().zip(&before) {
        let after = Residency::of(p).unwrap();
        let bits = |r: &Residency| r.pages().iter().map(|x| x & 1).collect::<Vec<u8>>();
        assert_eq!(
            bits(b),
            bits(&after),
            "{}: {} resident pages before, {} after",
            p.display(),
            b.resident_pages(),
            after.resident_pages()
        );
    }
}
