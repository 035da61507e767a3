//! Issue 16, deliverable 4: `regrid` on every core writes the same bytes as on one.
//!
//! One generated parent is split `--layout regrid` twice, once with the encoding on the
//! caller's thread (`CLEAVE_REGRID_THREADS=1`) and once on four threads; every component of
//! every child must be byte-for-byte the same, the children must pass the independent
//! checker (`sstcheck.py`: chunk CRCs, keys against Data.db, first partition at 0) and hold
//! exactly the parent's keys. The parallel bytes are also compared with the pre-parallel
//! single-threaded code in `split::regrid`'s unit tests; a corrupt parent chunk fails with
//! `CorruptSSTable` (naming the parent and the chunk) and leaves nothing in `--out`.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn split(parent: &Path, out: &Path, threads: &str, extra: &[&str]) -> std::process::Output {
    std::fs::create_dir_all(out).unwrap();
    Command::new(cleave_bin())
        .env("CLEAVE_REGRID_THREADS", threads)
        .arg("split")
        .arg(parent)
        .arg("--out")
        .arg(out)
        .args([
            "--parts", "4", "--layout", "regrid", "--digest", "off", "--json",
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn children(r: &serde_json::Value) -> Vec<PathBuf> {
    r["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
        .collect()
}

/// Every component file of the sstable whose Data.db is `data`, by component name.
fn components(data: &Path) -> Vec<(String, Vec<u8>)> {
    let name = data.file_name().unwrap().to_string_lossy().to_string();
    let prefix = name.trim_end_matches("Data.db");
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(data.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .map(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            (n[prefix.len()..].to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn regrid_on_four_threads_writes_the_single_threaded_bytes() {
    let Some(shared) = corpus_or_skip("regrid") else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let gen = root.path().join("gen");
    std::fs::create_dir_all(&gen).unwrap();
    // 24 MiB in 16 KiB chunks (1,536 chunks: 24 batches of 64): every thread gets work.
    cleave_json(&[
        "gen".as_ref(),
        "--out".as_ref(),
        gen.as_os_str(),
        "--size".as_ref(),
        "24MiB".as_ref(),
        "--chunk".as_ref(),
        "16KiB".as_ref(),
        "--compressible".as_ref(),
        "--json".as_ref(),
    ]);
    let parent = data_files(&gen).remove(0);
    let one = split(&parent, &root.path().join("one"), "1", &[]);
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    let four = split(&parent, &root.path().join("four"), "4", &[]);
    assert!(
        four.status.success(),
        "{}",
        String::from_utf8_lossy(&four.stderr)
    );
    let one: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    let four: serde_json::Value = serde_json::from_slice(&four.stdout).unwrap();
    let (a, b) = (children(&one), children(&four));
    assert_eq!(a.len(), 4);
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        let (cx, cy) = (components(x), components(y));
        assert!(
            cx.len() >= 7,
            "{cx:?}",
            cx = cx.iter().map(|c| &c.0).collect::<Vec<_>>()
        );
        assert_eq!(
            cx.iter().map(|c| &c.0).collect::<Vec<_>>(),
            cy.iter().map(|c| &c.0).collect::<Vec<_>>()
        );
        for ((n, bx), (_, by)) in cx.iter().zip(&cy) {
            assert!(
                bx == by,
                "{n} of {} differs between 1 and 4 threads",
                x.display()
            );
        }
    }
    for c in one["children"].as_array().unwrap() {
        assert_eq!(c["layout"], "regrid", "{c}");
    }
    // Judged by the independent reader: CRCs, keys, position 0, the parent's keys.
    let checked = sstcheck_all_from_zero(&shared, &b);
    let parent_check = sstcheck_all(&shared, std::slice::from_ref(&parent)).remove(0);
    let mut n = 0u64;
    let mut x = 0u64;
    let mut s = 0u64;
    for c in &checked {
        n += c["partitions"].as_u64().unwrap();
        x ^= u64::from_str_radix(c["keys_xor"].as_str().unwrap(), 16).unwrap();
        s = s.wrapping_add(u64::from_str_radix(c["keys_sum"].as_str().unwrap(), 16).unwrap());
        assert_eq!(c["empty_partitions"], 0, "{c}");
    }
    assert_eq!(n, parent_check["partitions"].as_u64().unwrap());
    assert_eq!(
        format!("{x:016x}"),
        parent_check["keys_xor"].as_str().unwrap()
    );
    assert_eq!(
        format!("{s:016x}"),
        parent_check["keys_sum"].as_str().unwrap()
    );
    assert_eq!(
        key_fingerprint(&b),
        key_fingerprint(std::slice::from_ref(&parent))
    );
}

#[test]
fn a_corrupt_parent_chunk_fails_typed_and_leaves_nothing() {
    let root = tempfile::tempdir().unwrap();
    let gen = root.path().join("gen");
    std::fs::create_dir_all(&gen).unwrap();
    cleave_json(&[
        "gen".as_ref(),
        "--out".as_ref(),
        gen.as_os_str(),
        "--size".as_ref(),
        "8MiB".as_ref(),
        "--compressible".as_ref(),
        "--json".as_ref(),
    ]);
    let parent = data_files(&gen).remove(0);
    // Flip one byte in the middle of Data.db: that chunk's CRC no longer matches.
    let mut bytes = std::fs::read(&parent).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    std::fs::write(&parent, &bytes).unwrap();
    for threads in ["1", "4"] {
        let out = root.path().join(format!("out{threads}"));
        let r = split(&parent, &out, threads, &[]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{threads} threads: {err}");
        assert!(!err.contains("panicked"), "{err}");
        // `--json`: the error is the report on stdout, with its reason and the parent.
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(
            v["error"]["reason"], "CorruptSSTable",
            "{threads} threads: {v}"
        );
        assert_eq!(v["error"]["path"], parent.to_string_lossy().as_ref(), "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("checksum mismatch in chunk"),
            "{v}"
        );
        assert_eq!(
            std::fs::read_dir(&out).unwrap().count(),
            0,
            "{threads} threads left files in --out"
        );
    }
}
