//! Publication: `replace` swaps children in for the parent atomically through a
//! Cassandra-format transaction log; a crash at any point is finished or rolled back by
//! `cleave recover` with the parent intact or all children live, and no orphan files.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn nb_clust(shared: &Path) -> PathBuf {
    shared.join("corpus/gitarcode-test+cassandra/test/data/legacy-sstables/nb/legacy_tables/legacy_nb_clust/nb-1-big-Data.db")
}

/// A table directory holding a copy of the corpus sstable.
fn table_dir(shared: &Path) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("ks/t-0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&table).unwrap();
    let src = nb_clust(shared);
    for e in std::fs::read_dir(src.parent().unwrap()).unwrap() {
        let e = e.unwrap();
        std::fs::write(table.join(e.file_name()), std::fs::read(e.path()).unwrap()).unwrap();
    }
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

fn generations(dir: &Path) -> Vec<String> {
    let mut g: Vec<String> = names(dir)
        .iter()
        .filter_map(|n| n.strip_suffix("-big-Data.db").map(str::to_string))
        .collect();
    g.sort();
    g
}

fn replace_cmd(parent: &Path, table: &Path) -> Command {
    let mut c = Command::new(cleave_bin());
    c.arg("split").arg(parent).arg("--out").arg(table).args([
        "--parts",
        "3",
        "--publish",
        "replace",
        "--json",
    ]);
    c
}

#[test]
fn replace_swaps_children_in() {
    let Some(shared) = corpus_or_skip("replace") else {
        return;
    };
    let (_d, table, parent) = table_dir(&shared);
    let out = replace_cmd(&parent, &table).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        generations(&table),
        vec!["nb-2", "nb-3", "nb-4"],
        "{:?}",
        names(&table)
    );
    assert!(
        !names(&table)
            .iter()
            .any(|n| n.contains("_txn_") || n.starts_with(".cleave")),
        "{:?}",
        names(&table)
    );
    let children: Vec<PathBuf> = r["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
        .collect();
    sstcheck_all(&shared, &children);
}

/// Kill the process at each point of the swap; `cleave recover` must leave either the
/// parent alone (before COMMIT) or the children alone (after), with nothing else behind.
#[test]
fn crash_at_every_point_then_recover() {
    let Some(shared) = corpus_or_skip("crash") else {
        return;
    };
    for (point, parent_survives) in [("logged", true), ("renamed", true), ("committed", false)] {
        let (_d, table, parent) = table_dir(&shared);
        let before = snapshot(&table);
        let out = replace_cmd(&parent, &table)
            .env("CLEAVE_CRASH_AT", point)
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{point}: the injected crash must stop the process"
        );
        assert!(
            names(&table).iter().any(|n| n.contains("_txn_")),
            "{point}: a transaction log is left: {:?}",
            names(&table)
        );
        let rec = cleave_json(&["recover".as_ref(), table.as_os_str(), "--json".as_ref()]);
        let rec = &rec["recovered"];
        assert_eq!(rec.as_array().unwrap().len(), 1, "{point}: {rec}");
        assert_eq!(
            rec[0]["committed"].as_bool(),
            Some(!parent_survives),
            "{point}"
        );
        let left = names(&table);
        assert!(
            !left
                .iter()
                .any(|n| n.contains("_txn_") || n.starts_with(".cleave")),
            "{point}: leftovers {left:?}"
        );
        if parent_survives {
            assert_eq!(
                before,
                snapshot(&table),
                "{point}: the parent must be exactly as it was, and alone"
            );
        } else {
            assert_eq!(
                generations(&table),
                vec!["nb-2", "nb-3", "nb-4"],
                "{point}: {left:?}"
            );
            let children: Vec<PathBuf> = generations(&table)
                .iter()
                .map(|g| table.join(format!("{g}-big-Data.db")))
                .collect();
            sstcheck_all(&shared, &children);
        }
        // Recovering again finds nothing to do.
        let again = cleave_json(&["recover".as_ref(), table.as_os_str(), "--json".as_ref()]);
        assert_eq!(again["recovered"].as_array().unwrap().len(), 0);
    }
}

/// Replace refuses while a process (a live Cassandra) has files of the table open.
#[test]
fn replace_refuses_while_a_process_holds_the_table() {
    let Some(shared) = corpus_or_skip("live") else {
        return;
    };
    let (_d, table, parent) = table_dir(&shared);
    let mut holder = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import time; f = open({:?}, 'rb'); print('ready', flush=True); time.sleep(60)",
            parent.to_str().unwrap()
        ))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    let before = snapshot(&table);
    let out = replace_cmd(&parent, &table).output().unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    // --json: one object {"error": {reason, message, path}} on stdout.
    let err = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let v: serde_json::Value = serde_json::from_str(&err).unwrap();
    assert_eq!(v["error"]["reason"], "CassandraRunning", "{err}");
    assert_eq!(
        std::fs::canonicalize(v["error"]["path"].as_str().unwrap()).unwrap(),
        std::fs::canonicalize(&table).unwrap()
    );
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&format!("process {}", holder.id())), "{err}");
    assert_eq!(before, snapshot(&table), "nothing written");
}

/// Bad inputs to split: a clear error, nothing written outside staging, staging removed.
#[test]
fn bad_split_inputs_change_nothing() {
    let Some(shared) = corpus_or_skip("bad split") else {
        return;
    };
    let bti = bti_fixture(&shared, "legacy_da_clust");
    let (d, table, parent) = table_dir(&shared);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let run = |args: &[&str], want: &str, reason: &str| {
        let before = snapshot(d.path());
        let mut a: Vec<std::ffi::OsString> = vec!["split".into()];
        a.extend(args.iter().map(|s| s.into()));
        let a: Vec<&std::ffi::OsStr> = a.iter().map(|s| s.as_os_str()).collect();
        let err = cleave_fails(&a);
        assert!(err.contains(want), "expected {want:?}: {err}");
        assert!(
            err.contains(&format!("error[{reason}]")),
            "expected reason {reason}: {err}"
        );
        assert_eq!(before, snapshot(d.path()), "{args:?} changed files");
    };
    let p = parent.to_str().unwrap();
    let o = out.to_str().unwrap();
    run(
        &[p, "--out", o, "--tokens", "35,33"],
        "strictly increasing",
        "InvalidRequest",
    );
    run(
        &[p, "--out", o, "--tokens", "30,30"],
        "strictly increasing",
        "InvalidRequest",
    );
    run(
        &[p, "--out", o, "--tokens", "zz"],
        "ByteOrdered token",
        "InvalidRequest",
    );
    run(
        &[p, "--out", o, "--parts", "1"],
        "at least 2",
        "InvalidRequest",
    );
    // A BTI version cleave does not read (trunk's `ea`): refused by its name alone.
    let ea_dir = tempfile::tempdir().unwrap();
    let ea = ea_dir.path().join("ea-1-bti-Data.db");
    std::fs::copy(&bti, &ea).unwrap();
    run(
        &[ea.to_str().unwrap(), "--out", o, "--parts", "2"],
        "BTI version \"ea\"",
        "UnsupportedSSTable",
    );
    run(
        &[p, "--out", "/dev/shm", "--parts", "2"],
        "another filesystem",
        "InvalidRequest",
    );
    run(
        &[p, "--out", o, "--parts", "2", "--publish", "replace"],
        "table directory",
        "InvalidRequest",
    );
    // A secondary-index component.
    std::fs::write(table.join("nb-1-big-SI_by_val.db"), b"x").unwrap();
    run(
        &[p, "--out", o, "--parts", "2"],
        "secondary-index component SI_by_val.db",
        "UnsupportedSSTable",
    );
    std::fs::remove_file(table.join("nb-1-big-SI_by_val.db")).unwrap();
    // A compressor Cassandra does not ship (Zstd is decoded since issue 30).
    let ci = table.join("nb-1-big-CompressionInfo.db");
    let orig = std::fs::read(&ci).unwrap();
    let mut b = orig.clone();
    let name_len = u16::from_be_bytes([b[0], b[1]]) as usize;
    let mut z = (16u16).to_be_bytes().to_vec();
    z.extend_from_slice(b"BrotliCompressor");
    b.splice(0..2 + name_len, z);
    std::fs::write(&ci, &b).unwrap();
    run(
        &[p, "--out", o, "--parts", "2"],
        "unsupported compressor BrotliCompressor",
        "UnsupportedSSTable",
    );
    std::fs::write(&ci, &orig).unwrap();
    // A corrupt parent: an index position past the data length.
    let stats = table.join("nb-1-big-Statistics.db");
    let orig = std::fs::read(&stats).unwrap();
    let mut b = orig.clone();
    let n = b.len();
    b[n - 20] ^= 0xFF;
    std::fs::write(&stats, &b).unwrap();
    run(
        &[p, "--out", o, "--parts", "2"],
        "checksum mismatch",
        "CorruptSSTable",
    );
    std::fs::write(&stats, &orig).unwrap();
    // A corrupt chunk that the split must decode (the first chunk of a child).
    let mut b = std::fs::read(&parent).unwrap();
    b[200] ^= 0x55;
    std::fs::write(&parent, &b).unwrap();
    run(
        &[p, "--out", o, "--parts", "2"],
        "checksum mismatch in chunk 0",
        "CorruptSSTable",
    );
    assert!(names(&out).is_empty(), "staging removed: {:?}", names(&out));
}
