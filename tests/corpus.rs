//! The format layer against every real SSTable in `../shared/corpus`.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

use cleave::sstable::checksum::{ChunkChecksums, Digest};
use cleave::sstable::compression::CompressionInfo;
use cleave::sstable::filter::BloomFilter;
use cleave::sstable::index::{IndexReader, IndexWriter};
use cleave::sstable::statistics::Statistics;
use cleave::sstable::summary::Summary;
use cleave::sstable::table::CheckLevel;
use cleave::sstable::{hex, Component, FormatError, SSTable, Toc};
use common::*;

fn check_full(t: &SSTable) -> Result<cleave::sstable::table::CheckReport, FormatError> {
    t.check(CheckLevel::Full, &mut |_| {})
}

#[test]
fn every_supported_big_sstable_inspects_with_manifest_partition_counts() {
    let Some(shared) = corpus_or_skip("inspect corpus") else {
        return;
    };
    let mut checked = 0;
    for r in manifest(&shared) {
        let opened = SSTable::open(&r.data_db);
        let name = r.data_db.file_name().unwrap().to_string_lossy().to_string();
        let bti_da = name.starts_with("da-") && name.contains("-bti-");
        if !is_supported_big(&r) && !bti_da {
            // Pre-3.0 `la` is refused, clearly, at open (BTI `da` is read like BIG).
            let e = opened.expect_err("unsupported sstable must not open");
            assert_eq!(e.kind(), "unsupported", "{}: {e}", r.data_db.display());
            assert!(e
                .to_string()
                .contains(r.data_db.file_name().unwrap().to_str().unwrap()));
            continue;
        }
        let t = opened.unwrap_or_else(|e| panic!("{}: {e}", r.data_db.display()));
        let res = check_full(&t);
        if is_damaged(&r) {
            let e = res.expect_err("damaged fixture must fail the check");
            assert_eq!(e.kind(), "checksum", "{}: {e}", r.data_db.display());
            let msg = e.to_string();
            assert!(msg.contains("-big-"), "error names the file: {msg}");
            // Index-only checks still see every partition.
            let rep = t.check(CheckLevel::Index, &mut |_| {}).unwrap();
            assert_eq!(rep.partitions, r.partitions, "{}", r.data_db.display());
        } else {
            let rep = res.unwrap_or_else(|e| panic!("{}: {e}", r.data_db.display()));
            assert_eq!(rep.partitions, r.partitions, "{}", r.data_db.display());
            if r.compressed {
                assert_eq!(
                    rep.chunks_checked as usize,
                    t.compression.as_ref().unwrap().chunk_count()
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 100, "only {checked} sstables checked");
}

/// parse → serialize of every component is the original bytes (Index.db rewritten with a
/// zero rebase).
#[test]
fn every_component_round_trips_byte_exact() {
    let Some(shared) = corpus_or_skip("round trip") else {
        return;
    };
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in manifest(&shared).into_iter().filter(is_supported_big) {
        let t =
            SSTable::open(&r.data_db).unwrap_or_else(|e| panic!("{}: {e}", r.data_db.display()));
        let v = t.descriptor.version;
        for (c, _) in &t.files {
            let p = t.path(c);
            let bytes = std::fs::read(&p).unwrap();
            let again: Vec<u8> = match c {
                Component::CompressionInfo => CompressionInfo::parse(&p, &bytes, v)
                    .unwrap()
                    .serialize()
                    .unwrap(),
                Component::Summary => Summary::parse(&p, &bytes).unwrap().serialize(),
                Component::Filter if !bytes.is_empty() => {
                    BloomFilter::parse(&p, &bytes, t.old_filter_layout())
                        .unwrap()
                        .serialize(t.old_filter_layout())
                }
                Component::Statistics => Statistics::parse(&p, &bytes, v).unwrap().serialize(v),
                Component::Toc => Toc::parse(&p, &bytes).unwrap().serialize(),
                Component::Digest => Digest::parse(&p, &bytes).unwrap().serialize(),
                Component::Crc => ChunkChecksums::parse(&p, &bytes).unwrap().serialize(),
                Component::Index => {
                    let mut rd = IndexReader::from_bytes(&p, &bytes);
                    let mut w = IndexWriter::new(Vec::new(), 0);
                    while let Some(e) = rd.next_entry().unwrap() {
                        w.append(e.key, e.position, e.promoted_index).unwrap();
                    }
                    w.finish().unwrap()
                }
                _ => continue,
            };
            assert!(
                again == bytes,
                "{}: re-serialized bytes differ ({} vs {} bytes)",
                p.display(),
                again.len(),
                bytes.len()
            );
            *counts.entry(c.file_name().to_string()).or_default() += 1;
        }
    }
    eprintln!("round-tripped: {counts:?}");
    for c in [
        "CompressionInfo.db",
        "Summary.db",
        "Filter.db",
        "Statistics.db",
        "TOC.txt",
        "Digest.crc32",
        "CRC.db",
        "Index.db",
    ] {
        assert!(
            counts.get(c).copied().unwrap_or(0) >= 10,
            "too few {c} round-tripped: {counts:?}"
        );
    }
}

/// Every key's token equals what `sstcheck.py` computes, and the partition count and
/// key fingerprint (xor, sum) equal sstcheck's.
#[test]
fn tokens_and_fingerprints_agree_with_sstcheck() {
    let Some(shared) = corpus_or_skip("sstcheck tokens") else {
        return;
    };
    let sstcheck = shared.join("tools/sstcheck.py");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sstcheck_tokens.py");
    let mut keys_compared = 0;
    for r in manifest(&shared).into_iter().filter(is_supported_big) {
        let t = SSTable::open(&r.data_db).unwrap();
        let theirs = python_json(&[
            script.as_os_str(),
            sstcheck.as_os_str(),
            r.data_db.as_os_str(),
        ]);
        let mut rd = t.index_reader().unwrap();
        let mut i = 0;
        let keys = theirs["keys"].as_array().expect("keys");
        while let Some(e) = rd.next_entry().unwrap() {
            let k = &keys[i];
            assert_eq!(
                k[0].as_str().unwrap(),
                hex::encode(e.key),
                "{}",
                r.data_db.display()
            );
            assert_eq!(
                k[1].as_str().unwrap(),
                t.partitioner.token(e.key).to_string(),
                "{} key {}",
                r.data_db.display(),
                hex::encode(e.key)
            );
            i += 1;
        }
        assert_eq!(i, keys.len());
        keys_compared += i;
        let check = python_json(&[sstcheck.as_os_str(), r.data_db.as_os_str()]);
        let ours = t.check(CheckLevel::Index, &mut |_| {}).unwrap();
        assert_eq!(
            check["partitions"].as_u64(),
            Some(ours.partitions),
            "{}",
            r.data_db.display()
        );
        assert_eq!(
            check["keys_xor"].as_str(),
            Some(format!("{:016x}", ours.fingerprint.xor).as_str())
        );
        assert_eq!(
            check["keys_sum"].as_str(),
            Some(format!("{:016x}", ours.fingerprint.sum).as_str())
        );
        if !is_damaged(&r) && r.compressed {
            assert_eq!(
                check["ok"].as_bool(),
                Some(true),
                "sstcheck rejects {}: {}",
                r.data_db.display(),
                check["errors"]
            );
        }
    }
    eprintln!("{keys_compared} keys compared with sstcheck");
    assert!(keys_compared > 300);
}

/// For `na`, `nb` and `oa`, cqlite reads the same partition keys in the same order, and
/// its Murmur3 `token()` selects exactly the key for the token cleave computes. (The legacy
/// fixtures are ByteOrdered, whose token is the key itself; cqlite evaluates `token()` with
/// Murmur3 whatever the partitioner, which lets us compare our Murmur3 on every key.)
#[test]
fn keys_and_murmur3_tokens_agree_with_cqlite() {
    let Some(shared) = corpus_or_skip("cqlite") else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/cqlite_dump.py");
    let probe = std::process::Command::new("python3")
        .args(["-c", "import cqlite"])
        .output();
    if !probe.map(|o| o.status.success()).unwrap_or(false) {
        // CI installs cqlite-py (scripts/test.sh); a developer machine may not have it.
        eprintln!("SKIP cqlite: python package cqlite-py is not installed (pip install cqlite-py)");
        return;
    }
    let mut compared = 0;
    for r in manifest(&shared).into_iter().filter(is_supported_big) {
        if !["na", "nb", "oa"].contains(&r.version.as_str()) {
            continue;
        }
        let Some(schema) = &r.schema_file else {
            continue;
        };
        let (ks, table) = r.table.split_once('/').expect("keyspace/table");
        let t = SSTable::open(&r.data_db).unwrap();
        let mut rd = t.index_reader().unwrap();
        let mut ours = Vec::new();
        let mut tokens = serde_json::Map::new();
        while let Some(e) = rd.next_entry().unwrap() {
            ours.push(hex::encode(e.key));
            tokens.insert(
                hex::encode(e.key),
                cleave::sstable::token::murmur3_token(e.key)
                    .to_string()
                    .into(),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let tok_file = dir.path().join("tokens.json");
        std::fs::write(&tok_file, serde_json::to_vec(&tokens).unwrap()).unwrap();
        let out = python_json(&[
            script.as_os_str(),
            OsStr::new("--schema"),
            schema.as_os_str(),
            OsStr::new("--keyspace"),
            OsStr::new(ks),
            OsStr::new("--table"),
            OsStr::new(table),
            OsStr::new("--murmur3-tokens"),
            tok_file.as_os_str(),
            r.data_db.as_os_str(),
        ]);
        assert!(
            out.get("error").is_none(),
            "{}: {}",
            r.data_db.display(),
            out["error"]
        );
        let theirs: Vec<String> = out["partition_keys_hex"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(theirs, ours, "{}", r.data_db.display());
        for (k, hits) in out["murmur3_token_hits"].as_object().unwrap() {
            assert_eq!(
                hits.as_array().unwrap(),
                &vec![serde_json::Value::from(k.clone())],
                "{} key {k}",
                r.data_db.display()
            );
        }
        compared += ours.len();
    }
    eprintln!("{compared} keys compared with cqlite");
    assert!(compared >= 60, "only {compared} keys compared with cqlite");
}
