//! Damaged SSTables: every one is refused with an error that names the file, the offset
//! and what was expected — never a panic, never a wrong answer — and nothing on disk
//! changes.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use cleave::sstable::table::CheckLevel;
use cleave::sstable::SSTable;
use common::*;

/// A writable copy of the sstable `data_db` in a fresh temp dir (`common::copy_sstable`).
fn copied(data_db: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let d = copy_sstable(data_db, dir.path());
    (dir, d)
}

fn component(data_db: &Path, c: &str) -> PathBuf {
    let s = data_db.to_str().unwrap();
    PathBuf::from(format!("{}{}", s.strip_suffix("Data.db").unwrap(), c))
}

fn mutate(p: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut b = std::fs::read(p).unwrap();
    f(&mut b);
    std::fs::write(p, b).unwrap();
}

/// Runs `cleave inspect` on the damaged copy: exit 1 (not a panic's 101), an error naming
/// `expect_file` and containing `expect_text`, and every file byte-identical afterwards.
fn assert_refused(data_db: &Path, expect_file: &str, expect_text: &str) {
    let dir = data_db.parent().unwrap();
    let snapshot = |d: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot(dir);
    let out = Command::new(cleave_bin())
        .arg("inspect")
        .arg(data_db)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "expected a clean error, got {:?}: {err}",
        out.status
    );
    assert!(
        err.contains(expect_file),
        "error should name {expect_file}: {err}"
    );
    assert!(
        err.contains(expect_text),
        "error should say {expect_text:?}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(before, snapshot(dir), "inspect changed files on disk");
}

fn nb_clust(shared: &Path) -> PathBuf {
    shared.join("corpus/gitarcode-test+cassandra/test/data/legacy-sstables/nb/legacy_tables/legacy_nb_clust/nb-1-big-Data.db")
}

fn mc_uncompressed(shared: &Path) -> PathBuf {
    shared.join(
        "corpus/scylladb+scylladb/test/resource/sstables/3.x/uncompressed/simple/mc-1-big-Data.db",
    )
}

#[test]
fn truncated_components() {
    let Some(shared) = corpus_or_skip("truncated") else {
        return;
    };
    for (c, text) in [
        ("Index.db", "runs past the end of Index.db"),
        ("Statistics.db", "Statistics.db"),
        ("CompressionInfo.db", "CompressionInfo.db"),
        ("Summary.db", "Summary.db"),
        ("Filter.db", "Filter.db"),
        ("Data.db", "Data.db"),
    ] {
        let (_d, data) = copied(&nb_clust(&shared));
        let p = component(&data, c);
        mutate(&p, |b| b.truncate(b.len() - 3));
        assert_refused(&data, c, text);
    }
}

#[test]
fn wrong_counts_and_lengths() {
    let Some(shared) = corpus_or_skip("lengths") else {
        return;
    };
    // Statistics.db: a component count of 9 (and, na+, its CRC is then wrong too).
    let (_d, data) = copied(&nb_clust(&shared));
    mutate(&component(&data, "Statistics.db"), |b| b[3] = 9);
    assert_refused(&data, "Statistics.db", "offset");
    // CompressionInfo.db: a chunk length that is not a power of two.
    let (_d, data) = copied(&nb_clust(&shared));
    mutate(&component(&data, "CompressionInfo.db"), |b| {
        let name_len = u16::from_be_bytes([b[0], b[1]]) as usize;
        let at = 2 + name_len + 4; // no options in this file
        b[at..at + 4].copy_from_slice(&3000i32.to_be_bytes());
    });
    assert_refused(&data, "CompressionInfo.db", "power of two");
    // Summary.db: entry count larger than the file.
    let (_d, data) = copied(&nb_clust(&shared));
    mutate(&component(&data, "Summary.db"), |b| {
        b[4..8].copy_from_slice(&1_000_000i32.to_be_bytes())
    });
    assert_refused(&data, "Summary.db", "entry count");
}

#[test]
fn statistics_crc_mismatch() {
    let Some(shared) = corpus_or_skip("stats crc") else {
        return;
    };
    let (_d, data) = copied(&nb_clust(&shared));
    let p = component(&data, "Statistics.db");
    mutate(&p, |b| {
        let n = b.len();
        b[n - 10] ^= 0x40; // inside HEADER, covered by its CRC32
    });
    assert_refused(
        &data,
        "Statistics.db",
        "checksum mismatch in metadata component 3",
    );
}

#[test]
fn chunk_offsets_out_of_order() {
    let Some(shared) = corpus_or_skip("offsets") else {
        return;
    };
    let (_d, data) = copied(&nb_clust(&shared));
    mutate(&component(&data, "CompressionInfo.db"), |b| {
        let n = b.len();
        // Swap the last two offsets.
        let (a, c) = (n - 16, n - 8);
        let last: Vec<u8> = b[c..].to_vec();
        let prev: Vec<u8> = b[a..c].to_vec();
        b[a..c].copy_from_slice(&last);
        b[c..].copy_from_slice(&prev);
    });
    assert_refused(&data, "CompressionInfo.db", "offsets increase");
}

#[test]
fn index_position_past_data_length() {
    let Some(shared) = corpus_or_skip("index position") else {
        return;
    };
    let (_d, data) = copied(&mc_uncompressed(&shared));
    let len = std::fs::metadata(&data).unwrap().len();
    let p = component(&data, "Index.db");
    // Rewrite the last entry's position to the Data.db length.
    let bytes = std::fs::read(&p).unwrap();
    let mut r = cleave::sstable::index::IndexReader::from_bytes(&p, &bytes);
    let mut w = cleave::sstable::index::IndexWriter::new(Vec::new(), 0);
    let mut entries = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        entries.push(e.to_owned());
    }
    let last = entries.len() - 1;
    for (i, e) in entries.iter().enumerate() {
        let pos = if i == last { len } else { e.position };
        w.append(&e.key, pos, &e.promoted_index).unwrap();
    }
    std::fs::write(&p, w.finish().unwrap()).unwrap();
    assert_refused(&data, "Index.db", "not below the Data.db length");
}

#[test]
fn unknown_version_and_format() {
    let Some(shared) = corpus_or_skip("version") else {
        return;
    };
    let (d, data) = copied(&nb_clust(&shared));
    for e in std::fs::read_dir(d.path()).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().into_string().unwrap();
        std::fs::rename(e.path(), d.path().join(n.replacen("nb-", "zz-", 1))).unwrap();
    }
    let zz = d.path().join(
        data.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .replacen("nb-", "zz-", 1),
    );
    assert_refused(&zz, "zz-1-big-Data.db", "unsupported: BIG version \"zz\"");
    let e = SSTable::open(Path::new("/nonexistent/nb-1-big-Data.db")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent"), "{e}");
}

#[test]
fn damaged_chunk_and_wrong_key() {
    let Some(shared) = corpus_or_skip("chunk") else {
        return;
    };
    let (_d, data) = copied(&nb_clust(&shared));
    mutate(&data, |b| b[100] ^= 1);
    assert_refused(&data, "Data.db", "checksum mismatch in chunk 0");
    // Uncompressed: a partition key byte changed (CRC.db and Digest then disagree too, but
    // the key check comes first).
    let (_d, data) = copied(&mc_uncompressed(&shared));
    mutate(&data, |b| b[3] ^= 0xFF);
    assert_refused(&data, "Data.db", "expected partition key");
    // The index-only check does not read Data.db and still succeeds.
    let t = SSTable::open(&data).unwrap();
    assert!(t.check(CheckLevel::Index, &mut |_| {}).is_ok());
}
