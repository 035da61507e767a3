//! Issue 16, children already published: `cleave inspect`/`verify` warn about a dead
//! prefix (`warning[DeadPrefix]`, with the offset), and `cleave rewrite --publish replace`
//! re-encodes such an sstable in place from position 0 with the same keys, crash-atomically:
//! killed after its transaction log is committed, `cleave recover` finishes it; killed
//! before, the original is back untouched.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn s(p: &Path) -> &std::ffi::OsStr {
    p.as_os_str()
}

fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with("-Data.db"))
        .collect();
    v.sort();
    v
}

fn sstcheck(shared: &Path, d: &Path) -> serde_json::Value {
    let out = Command::new("python3")
        .arg(shared.join("tools/sstcheck.py"))
        .arg(d)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A table directory holding one child of a 4.1 split: it starts with a dead prefix.
fn dead_prefix_child(root: &Path) -> (PathBuf, PathBuf) {
    let gen = root.join("gen");
    let table = root.join("ks/t-0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&gen).unwrap();
    std::fs::create_dir_all(&table).unwrap();
    cleave_json(&[
        "gen".as_ref(),
        "--out".as_ref(),
        s(&gen),
        "--size".as_ref(),
        "4MiB".as_ref(),
        "--compressible".as_ref(),
        "--json".as_ref(),
    ]);
    let parent = data_files(&gen).remove(0);
    let r = cleave_json(&[
        "split".as_ref(),
        s(&parent),
        "--out".as_ref(),
        s(&table),
        "--parts".as_ref(),
        "2".as_ref(),
        "--target-cassandra".as_ref(),
        "4.1".as_ref(),
        "--json".as_ref(),
    ]);
    let child = PathBuf::from(r["children"][1]["path"].as_str().unwrap());
    // Keep only the second child in the table directory.
    let first = PathBuf::from(r["children"][0]["path"].as_str().unwrap());
    let prefix = first.to_string_lossy().replace("Data.db", "");
    for f in std::fs::read_dir(&table).unwrap() {
        let p = f.unwrap().path();
        if p.to_string_lossy().starts_with(&prefix) {
            std::fs::remove_file(p).unwrap();
        }
    }
    (table, child)
}

#[test]
fn a_dead_prefix_is_reported_and_rewritten_in_place() {
    let Some(shared) = corpus_or_skip("rewrite") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (table, child) = dead_prefix_child(d.path());
    let before = sstcheck(&shared, &child);
    assert_eq!(before["ok"], true, "{before}");
    let pos = before["first_position"].as_u64().unwrap();
    assert!(pos > 0, "a 4.1 child keeps its dead prefix");

    // inspect and verify warn, with the offset; both still succeed.
    let out = Command::new(cleave_bin())
        .arg("inspect")
        .arg(&child)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("warning[DeadPrefix]") && text.contains(&pos.to_string()),
        "{text}"
    );
    let v = cleave_json(&["verify".as_ref(), s(&child), "--json".as_ref()]);
    assert_eq!(v["ok"], true);
    assert_eq!(
        v["sstables"][0]["warnings"][0]["reason"], "DeadPrefix",
        "{v}"
    );
    assert_eq!(v["sstables"][0]["first_position"], pos);

    // rewrite: one child from position 0 with the same keys, the original gone.
    let r = cleave_json(&["rewrite".as_ref(), s(&child), "--json".as_ref()]);
    assert_eq!(r["children"].as_array().unwrap().len(), 1, "{r}");
    assert!(!child.exists(), "the original is replaced");
    let files = data_files(&table);
    assert_eq!(files.len(), 1, "{files:?}");
    let after = sstcheck(&shared, &files[0]);
    assert_eq!(after["ok"], true, "{after}");
    assert_eq!(after["first_position"], 0);
    for k in ["partitions", "keys_xor", "keys_sum"] {
        assert_eq!(after[k], before[k], "{k}");
    }
    let v = cleave_json(&["verify".as_ref(), s(&files[0]), "--json".as_ref()]);
    assert_eq!(v["sstables"][0]["warnings"], serde_json::json!([]), "{v}");
    // A second rewrite has nothing to do.
    let r = cleave_json(&["rewrite".as_ref(), s(&files[0]), "--json".as_ref()]);
    assert_eq!(r["rewritten"], false, "{r}");
    assert_eq!(data_files(&table), files);
}

#[test]
fn a_killed_rewrite_is_rolled_back_or_forward_by_recover() {
    let Some(shared) = corpus_or_skip("rewrite crash") else {
        return;
    };
    for (point, forward) in [("logged", false), ("committed", true)] {
        let d = tempfile::tempdir().unwrap();
        let (table, child) = dead_prefix_child(d.path());
        let before = sstcheck(&shared, &child);
        let st = Command::new(cleave_bin())
            .arg("rewrite")
            .arg(&child)
            .env("CLEAVE_CRASH_AT", point)
            .output()
            .unwrap()
            .status;
        assert!(!st.success(), "{point}: killed");
        let out = Command::new(cleave_bin())
            .arg("recover")
            .arg(&table)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let files = data_files(&table);
        assert_eq!(files.len(), 1, "{point}: {files:?}");
        assert_eq!(files[0] == child, !forward, "{point}: {files:?}");
        let after = sstcheck(&shared, &files[0]);
        assert_eq!(after["ok"], true, "{point}: {after}");
        assert_eq!(
            after["first_position"].as_u64().unwrap() == 0,
            forward,
            "{point}"
        );
        for k in ["partitions", "keys_xor", "keys_sum"] {
            assert_eq!(after[k], before[k], "{point}: {k}");
        }
        let left: Vec<String> = std::fs::read_dir(&table)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("_txn_") || n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{point}: {left:?}");
    }
}
