//! The command line's edges (issue 37, item 6): each is what a new admin typed, and each
//! test failed on the code before the fix (the report of the branch records how). Every
//! refusal is `InvalidRequest` with a message saying what was expected, exit status 1, and
//! nothing changed on disk.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test: this build's, or `$CLEAVE_BIN_UNDER_TEST` (how these tests were
/// run against the binary of the code before the fix).
fn bin() -> PathBuf {
    std::env::var_os("CLEAVE_BIN_UNDER_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(common::cleave_bin)
}

fn cleave_in(dir: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(bin());
    c.args(args);
    if let Some(d) = dir {
        c.current_dir(d);
    }
    c.output().unwrap()
}

fn cleave(args: &[&str]) -> Output {
    cleave_in(None, args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The `{"error": …}` object of a `--json` failure (exit status 1, no panic).
fn json_error(o: &Output) -> serde_json::Value {
    assert_eq!(
        o.status.code(),
        Some(1),
        "expected a refusal; stdout {} stderr {}",
        stdout(o),
        stderr(o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(o)));
    v["error"].clone()
}

fn json_ok(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "expected success; stdout {} stderr {}",
        stdout(o),
        stderr(o)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(o)))
}

/// A generated sstable (generation 1, 64 partitions of 4 KiB) in `dir`; its Data.db.
fn small_table(dir: &Path) -> PathBuf {
    let o = cleave(&[
        "gen",
        "--out",
        dir.to_str().unwrap(),
        "--size",
        "256KiB",
        "--partition-size",
        "4KiB",
        "--row-size",
        "512",
        "--chunk",
        "4KiB",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    dir.join("nb-1-big-Data.db")
}

/// Every file under `dir` with its bytes: what "nothing changed" is compared with.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let b = std::fs::read(&p).unwrap();
                v.push((p, b));
            }
        }
    }
    v.sort();
    v
}

fn data_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-Data.db"))
        .collect();
    v.sort();
    v
}

/// `cd <table>; cleave split nb-1-big-Data.db --out . --publish replace` and `cleave rewrite
/// nb-2-big-Data.db`: a bare file name is a file of the current directory. Before, its
/// directory was the empty path and both failed `IoError` naming no file.
#[test]
fn a_bare_file_name_is_a_file_of_the_current_directory() {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("t");
    small_table(&table);
    let v = json_ok(&cleave_in(
        Some(&table),
        &[
            "split",
            "nb-1-big-Data.db",
            "--out",
            ".",
            "--publish",
            "replace",
            "--parts",
            "2",
            "--json",
        ],
    ));
    assert_eq!(v["children"].as_array().unwrap().len(), 2, "{v}");
    let after = data_files(&table);
    assert_eq!(after, ["nb-2-big-Data.db", "nb-3-big-Data.db"], "{v}");
    let v = json_ok(&cleave_in(
        Some(&table),
        &["rewrite", "nb-2-big-Data.db", "--force", "--json"],
    ));
    assert_eq!(v["children"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(
        data_files(&table),
        ["nb-3-big-Data.db", "nb-4-big-Data.db"],
        "{v}"
    );
    // verify and inspect take a bare name too.
    let o = cleave_in(Some(&table), &["verify", "nb-4-big-Data.db"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let o = cleave_in(Some(&table), &["inspect", "nb-4-big-Data.db", "--json"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

/// `cleave verify … | head -1`: the report stops quietly when its reader goes away, as
/// `cat` does (SIGPIPE), instead of `println!` panicking on EPIPE with exit status 101.
#[test]
fn a_report_into_a_closed_pipe_ends_quietly() {
    let d = tempfile::tempdir().unwrap();
    let data = small_table(&d.path().join("t"));
    let mut child = Command::new(bin())
        .arg("verify")
        .arg(&data)
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before the first line is written.
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{status:?}: {err}");
    assert_ne!(status.code(), Some(101), "{err}");
    assert_eq!(status.signal(), Some(libc::SIGPIPE), "{status:?}: {err}");
    assert!(err.is_empty(), "{err}");
}

/// `cleave run --local <missing dir>`: refused at once, saying what it expected, instead of
/// a reconciler polling a directory that is not there, forever.
#[test]
fn run_local_on_a_missing_directory_fails_fast() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("manifests");
    let mut child = Command::new(bin())
        .args([
            "run",
            "--node",
            "n1",
            "--metrics-addr",
            "127.0.0.1:0",
            "--local",
        ])
        .arg(&missing)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let Some(status) = status else {
        panic!(
            "run --local {} still running after 20 s: {err}",
            missing.display()
        );
    };
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("cleave: error[InvalidRequest]: --local")
            && err.contains(missing.to_str().unwrap())
            && err.contains("expected the directory of AnticompactionJob"),
        "{err}"
    );
}

/// `cleave cleanup` on a keyspace directory, or on a directory without sstables: refused,
/// saying it expects a table directory (before, both succeeded having done nothing).
#[test]
fn cleanup_of_a_keyspace_or_an_empty_directory_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let ks = d.path().join("ks");
    let table = ks.join("t1-0123456789abcdef0123456789abcdef");
    small_table(&table);
    let owned = d.path().join("owned.yaml");
    std::fs::write(&owned, "- {start: \"-9223372036854775808\", end: \"0\"}\n").unwrap();
    let before = tree(d.path());
    let e = json_error(&cleave(&[
        "cleanup",
        ks.to_str().unwrap(),
        "--owned-ranges",
        owned.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(e["reason"], "InvalidRequest", "{e}");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains("a keyspace directory")
            && m.contains("t1-0123456789abcdef0123456789abcdef")
            && m.contains("expected a table directory"),
        "{e}"
    );
    assert!(tree(d.path()) == before, "the keyspace's files changed");
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = cleave(&[
        "cleanup",
        empty.to_str().unwrap(),
        "--owned-ranges",
        owned.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("error[InvalidRequest]")
            && stderr(&o).contains("holds no sstable")
            && stderr(&o).contains("expected a table directory"),
        "{}",
        stderr(&o)
    );
    assert!(tree(d.path()) == before, "something changed");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}

/// A ranges file whose key lost its ':' names the line (before: "expected mapping start" at
/// 1:1, naming nothing), a misspelt key is named, and a mapping without `ranges:` is
/// refused (before: read as no full range at all, so no partition was marked).
#[test]
fn a_ranges_file_names_its_wrong_key_and_needs_ranges() {
    let d = tempfile::tempdir().unwrap();
    let data = small_table(&d.path().join("t"));
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let split_ranges = |yaml: &str, marker: [&str; 2]| {
        let f = d.path().join("ranges.yaml");
        std::fs::write(&f, yaml).unwrap();
        json_error(&cleave(&[
            "split",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--ranges",
            f.to_str().unwrap(),
            marker[0],
            marker[1],
            "--dry-run",
            "--json",
        ]))
    };
    let repaired = ["--repaired-at", "1700000000000"];
    let pending = ["--pending-repair", "0b5f0a3e-6d6c-4a4b-9c4e-2f0f1f5a9e01"];
    let e = split_ranges("ranges\n  - {start: \"0\", end: \"100\"}\n", repaired);
    assert_eq!(e["reason"], "InvalidRequest", "{e}");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains("line 1: \"ranges\"") && !m.contains("expected mapping start"),
        "{e}"
    );
    let e = split_ranges("ranegs:\n  - {start: \"0\", end: \"100\"}\n", repaired);
    assert!(e["message"].as_str().unwrap().contains("`ranegs`"), "{e}");
    for marker in [repaired, pending] {
        let e = split_ranges(
            "transientRanges:\n  - {start: \"0\", end: \"100\"}\n",
            marker,
        );
        assert_eq!(e["reason"], "InvalidRequest", "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("missing field `ranges`"),
            "{marker:?}: {e}"
        );
    }
    let e = split_ranges("# nothing yet\n", pending);
    assert!(
        e["message"].as_str().unwrap().contains("no document"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
}

/// `--parts 5000` of an sstable with 64 partitions: refused with the count (before: 64
/// children, silently).
#[test]
fn parts_beyond_the_partitions_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let data = small_table(&d.path().join("t"));
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let e = json_error(&cleave(&[
        "split",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--parts",
        "5000",
        "--json",
    ]));
    assert_eq!(e["reason"], "InvalidRequest", "{e}");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains("--parts 5000") && m.contains("has 64 partitions"),
        "{e}"
    );
    assert!(data_files(&out).is_empty());
    // As many parts as partitions is a split.
    let v = json_ok(&cleave(&[
        "split",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--parts",
        "64",
        "--dry-run",
        "--json",
    ]));
    assert_eq!(v["plan"].as_array().unwrap().len(), 64, "{v}");
}

/// `--repaired-at` / `--pending-repair` mark the repaired children of `--ranges`; with
/// `--tokens` or `--parts` there are no repaired children, so they are refused (before:
/// ignored, and the children kept the parent's repair state).
#[test]
fn repair_markers_without_ranges_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let data = small_table(&d.path().join("t"));
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for marker in [
        ["--repaired-at", "1700000000000"],
        ["--pending-repair", "0b5f0a3e-6d6c-4a4b-9c4e-2f0f1f5a9e01"],
    ] {
        for cut in [["--tokens", "0"], ["--parts", "2"]] {
            let mut args = vec!["split", data.to_str().unwrap(), "--out"];
            args.push(out.to_str().unwrap());
            args.extend(cut);
            args.extend(marker);
            args.push("--json");
            let o = cleave(&args);
            assert_ne!(o.status.code(), Some(0), "{args:?}: {}", stdout(&o));
            let text = format!("{}{}", stdout(&o), stderr(&o));
            assert!(
                text.contains(marker[0]) && text.contains("--ranges"),
                "{args:?}: {text}"
            );
            assert!(data_files(&out).is_empty(), "{args:?}");
        }
    }
}

/// A file whose name is not an sstable component's: `InvalidRequest` ("not an sstable
/// component name"), not `CorruptSSTable` — nothing of the file was read.
#[test]
fn a_name_that_is_not_an_sstables_is_an_invalid_request() {
    let d = tempfile::tempdir().unwrap();
    small_table(&d.path().join("t"));
    let notes = d.path().join("t").join("notes.txt");
    std::fs::write(&notes, b"not an sstable").unwrap();
    let n = notes.to_str().unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let o = out.to_str().unwrap();
    for args in [
        vec!["inspect", n, "--json"],
        vec!["split", n, "--out", o, "--parts", "2", "--json"],
        vec!["rewrite", n, "--json"],
    ] {
        let e = json_error(&cleave(&args));
        assert_eq!(e["reason"], "InvalidRequest", "{args:?}: {e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("not an sstable component name"),
            "{args:?}: {e}"
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&cleave(&["verify", n, "--json"]).stdout).unwrap();
    assert_eq!(v["sstables"][0]["error"]["reason"], "InvalidRequest", "{v}");
}

/// `inspect --keys` without `--json` lists the keys in the text report too (before: the
/// flag was accepted and nothing listed).
#[test]
fn inspect_keys_lists_keys_in_text_too() {
    let d = tempfile::tempdir().unwrap();
    let data = small_table(&d.path().join("t"));
    let o = cleave(&["inspect", data.to_str().unwrap(), "--keys"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json = json_ok(&cleave(&[
        "inspect",
        data.to_str().unwrap(),
        "--keys",
        "--json",
    ]));
    let keys = json["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 64);
    let text = stdout(&o);
    for k in keys {
        let line = format!(
            "{} {} {}",
            k["token"].as_str().unwrap(),
            k["key"].as_str().unwrap(),
            k["position"]
        );
        assert!(text.contains(&line), "no {line:?} in\n{text}");
    }
}

/// `split --publish on-restart --out <elsewhere>`: the refusal speaks of on-restart and of
/// the table directory it stages in (before: "--publish replace needs --out …").
#[test]
fn on_restart_with_another_out_says_what_on_restart_needs() {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("t");
    let data = small_table(&table);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let before = tree(d.path());
    let e = json_error(&cleave(&[
        "split",
        data.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--parts",
        "2",
        "--publish",
        "on-restart",
        "--json",
    ]));
    assert_eq!(e["reason"], "InvalidRequest", "{e}");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains("--publish on-restart")
            && m.contains(".cleave-pending")
            && m.contains(std::fs::canonicalize(&table).unwrap().to_str().unwrap())
            && !m.contains("--publish replace"),
        "{e}"
    );
    assert!(tree(d.path()) == before, "something changed");
}
