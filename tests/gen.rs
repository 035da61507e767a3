//! `cleave gen` writes SSTables that the independent checkers accept, with exactly the
//! rows it says it wrote.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};

use cleave::gen::{row_value, value_pool, Content};
use common::*;

fn gen(dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut a: Vec<&std::ffi::OsStr> = vec![
        "gen".as_ref(),
        "--out".as_ref(),
        dir.as_os_str(),
        "--json".as_ref(),
    ];
    a.extend(args.iter().map(|s| s.as_ref() as &std::ffi::OsStr));
    cleave_json(&a)
}

#[test]
fn every_version_and_compression_passes_sstcheck_and_inspect() {
    let Some(shared) = corpus_or_skip("gen") else {
        return;
    };
    for version in ["md", "me", "na", "nb", "oa"] {
        for extra in [
            &["--compressible"][..],
            &["--random", "--chunk", "4KiB"],
            &["--uncompressed"],
            &["--partitioner", "random"],
        ] {
            let d = tempfile::tempdir().unwrap();
            let mut args = vec![
                "--size",
                "2MiB",
                "--partition-size",
                "16KiB",
                "--row-size",
                "1KiB",
                "--version",
                version,
            ];
            args.extend_from_slice(extra);
            let r = gen(d.path(), &args);
            let data = PathBuf::from(r["data"].as_str().unwrap());
            let c = &sstcheck_all(&shared, std::slice::from_ref(&data))[0];
            assert_eq!(c["partitions"].as_u64(), r["partitions"].as_u64());
            let i = cleave_json(&["inspect".as_ref(), data.as_os_str(), "--json".as_ref()]);
            assert_eq!(
                i["partitions"].as_u64(),
                r["partitions"].as_u64(),
                "{version} {extra:?}"
            );
            assert!(i["digest_checked"].as_bool().unwrap());
        }
    }
}

/// cqlite (na/nb/oa) reads every row back, with the value `row_value` computes.
#[test]
fn cqlite_reads_every_row_written() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import cqlite"])
        .output();
    if !probe.map(|o| o.status.success()).unwrap_or(false) {
        eprintln!("SKIP gen cqlite: python package cqlite-py is not installed");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/cqlite_dump.py");
    for (version, content, flag) in [
        ("nb", Content::Compressible, "--compressible"),
        ("oa", Content::Random, "--random"),
        ("nb", Content::Compressible, "--uncompressed"),
    ] {
        let d = tempfile::tempdir().unwrap();
        let r = gen(
            d.path(),
            &[
                "--size",
                "1MiB",
                "--partition-size",
                "16KiB",
                "--row-size",
                "1KiB",
                "--version",
                version,
                flag,
            ],
        );
        let data = PathBuf::from(r["data"].as_str().unwrap());
        let schema = PathBuf::from(r["schema"].as_str().unwrap());
        let out = python_json(&[
            script.as_os_str(),
            "--schema".as_ref(),
            schema.as_os_str(),
            "--keyspace".as_ref(),
            "ks".as_ref(),
            "--table".as_ref(),
            "t".as_ref(),
            data.as_os_str(),
        ]);
        assert!(out.get("error").is_none(), "{}", out["error"]);
        let rows = out["rows"].as_array().unwrap();
        assert_eq!(
            rows.len() as u64,
            r["rows"].as_u64().unwrap(),
            "{version} {flag}"
        );
        let pool = value_pool(content, 21550);
        for row in rows {
            let k = (0..8)
                .map(|i| {
                    u8::from_str_radix(&row["k"].as_str().unwrap()[2 * i..2 * i + 2], 16).unwrap()
                })
                .collect::<Vec<u8>>();
            let c = row["c"].as_i64().unwrap() as i32;
            let want = cleave::sstable::hex::encode(row_value(&pool, &k, c, 1024 - 16));
            assert_eq!(
                row["v"].as_str().unwrap(),
                want,
                "{version} {flag} k={} c={c}",
                row["k"]
            );
        }
    }
}
