//! The zero-copy layouts on a real XFS with reflink (a loop mount; needs root, which CI
//! has) and on a filesystem that cannot share (ext4).
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};

use cleave::io::loopfs::{shared_bytes, LoopMount};
use cleave::sstable::compression::CompressionInfo;
use cleave::sstable::{SSTable, Version};
use common::*;

fn gen(dir: &Path, size: &str, extra: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "gen".as_ref(),
        "--out".as_ref(),
        dir.as_os_str(),
        "--size".as_ref(),
        size.as_ref(),
        "--json".as_ref(),
    ];
    args.extend(extra.iter().map(|s| s.as_ref() as &std::ffi::OsStr));
    let r = cleave_json(&args);
    PathBuf::from(r["data"].as_str().unwrap())
}

fn split(parent: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    std::fs::create_dir_all(out).unwrap();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "split".as_ref(),
        parent.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--json".as_ref(),
    ];
    args.extend(extra.iter().map(|s| s.as_ref() as &std::ffi::OsStr));
    cleave_json(&args)
}

fn child_paths(r: &serde_json::Value) -> Vec<PathBuf> {
    r["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
        .collect()
}

fn compression_info(data: &Path) -> CompressionInfo {
    let p = PathBuf::from(
        data.to_str()
            .unwrap()
            .replace("Data.db", "CompressionInfo.db"),
    );
    CompressionInfo::parse(
        &p,
        &std::fs::read(&p).unwrap(),
        Version::parse("nb").unwrap(),
    )
    .unwrap()
}

/// 256+ MiB of compressible data, split 8 ways `aligned`: every child starts at offset 0,
/// at least 90% need no fallback, and together they share at least 98% of their Data.db
/// bytes with the parent — measured by FIEMAP's shared flag and by the filesystem's used
/// space.
#[test]
fn aligned_children_share_their_data_on_xfs() {
    let Some(shared) = corpus_or_skip("xfs aligned") else {
        return;
    };
    let Some(fs) = xfs_or_skip("xfs aligned", 2 << 30) else {
        return;
    };
    let parent = gen(&fs.mount_point.join("t"), "300MiB", &["--compressible"]);
    let used_before = fs.used_bytes().unwrap();
    let out = fs.mount_point.join("t/out");
    let r = split(&parent, &out, &["--parts", "8", "--layout", "aligned"]);
    let used_after = fs.used_bytes().unwrap();
    assert_eq!(r["check"]["ok"].as_bool(), Some(true));
    let children = r["children"].as_array().unwrap();
    assert_eq!(children.len(), 8);
    let no_fallback = children
        .iter()
        .filter(|c| c["layout"] == "aligned" && c["fallback"].is_null())
        .count();
    assert!(
        no_fallback * 10 >= children.len() * 9,
        "only {no_fallback} of 8 children aligned without fallback: {r}"
    );
    let mut data_bytes = 0u64;
    let mut fiemap_shared = 0u64;
    for c in child_paths(&r) {
        let ci = compression_info(&c);
        assert_eq!(
            ci.offsets.at(0).unwrap(),
            0,
            "{}: aligned children start at offset 0",
            c.display()
        );
        data_bytes += std::fs::metadata(&c).unwrap().len();
        fiemap_shared += shared_bytes(&c).unwrap();
    }
    let reported: u64 = children
        .iter()
        .map(|c| c["bytes_shared"].as_u64().unwrap())
        .sum();
    assert!(
        fiemap_shared * 100 >= data_bytes * 98,
        "FIEMAP: {fiemap_shared} of {data_bytes} bytes shared"
    );
    assert!(
        reported * 100 >= data_bytes * 98,
        "reported: {reported} of {data_bytes} bytes shared"
    );
    // What the children cost the filesystem: their rebuilt components and unshared ends.
    let growth = used_after - used_before;
    assert!(
        growth * 50 < data_bytes,
        "used space grew by {growth} for {data_bytes} bytes of children"
    );
    sstcheck_all(&shared, &child_paths(&r));
    eprintln!("aligned on XFS: {fiemap_shared}/{data_bytes} bytes shared, used space +{growth}");
}

/// `padded` (CEP-66 head pad): offsets[0] is the source chunk offset modulo 64 KiB, and the
/// children still pass sstcheck (which reads through CompressionInfo's offsets).
#[test]
fn padded_children_keep_the_source_offset_mod_64k() {
    let Some(shared) = corpus_or_skip("xfs padded") else {
        return;
    };
    let Some(fs) = xfs_or_skip("xfs padded", 1 << 30) else {
        return;
    };
    let parent = gen(&fs.mount_point.join("t"), "64MiB", &["--compressible"]);
    let pci = compression_info(&parent);
    let r = split(
        &parent,
        &fs.mount_point.join("t/out"),
        &[
            "--parts",
            "4",
            "--layout",
            "padded",
            "--target-data-access",
            "standard",
            // The head pad with a zero dead prefix, as for a reader that never scans
            // Data.db from position 0 (the filler's children are covered by split_corpus).
            "--target-cassandra",
            "5.0.4",
        ],
    );
    let mut padded = 0;
    for (c, paths) in r["children"]
        .as_array()
        .unwrap()
        .iter()
        .zip(child_paths(&r))
    {
        let ci = compression_info(&paths);
        let t = SSTable::open(&paths).unwrap();
        let first_pos = t
            .index_reader()
            .unwrap()
            .next_entry()
            .unwrap()
            .unwrap()
            .position;
        if c["layout"] == "padded" {
            // The child's first chunk is the parent's chunk k, where k is the chunk of the
            // child's first partition; its offset keeps the parent's modulo 64 KiB.
            let parent_first = c["first_key"].as_str().unwrap();
            let pt = SSTable::open(&parent).unwrap();
            let mut pr = pt.index_reader().unwrap();
            let mut k = None;
            while let Some(e) = pr.next_entry().unwrap() {
                if cleave::sstable::hex::encode(e.key) == parent_first {
                    k = Some(e.position / pci.chunk_length as u64);
                    break;
                }
            }
            let k = k.unwrap() as usize;
            assert_eq!(
                ci.offsets.at(0).unwrap(),
                pci.offsets.at(k as u64).unwrap() % 65536,
                "{}",
                paths.display()
            );
            assert_eq!(
                Some(first_pos),
                c["dead_prefix"].as_u64(),
                "positions are rebased to the chunk start"
            );
            padded += 1;
        }
    }
    assert!(padded >= 3, "only {padded} of 4 children padded: {r}");
    sstcheck_all(&shared, &child_paths(&r));
}

/// Where extents cannot be shared the same command succeeds by copying, and says why.
#[test]
fn ext4_falls_back_to_copy_and_says_why() {
    let Some(shared) = corpus_or_skip("ext4 copy") else {
        return;
    };
    if let Some(why) = cleave::io::loopfs::unavailable_reason() {
        eprintln!("SKIP ext4 copy: {why}");
        return;
    }
    let fs = LoopMount::new(&std::env::temp_dir(), 512 << 20, "ext4").unwrap();
    let parent = gen(&fs.mount_point.join("t"), "32MiB", &["--compressible"]);
    let r = split(&parent, &fs.mount_point.join("t/out"), &["--parts", "4"]);
    for c in r["children"].as_array().unwrap() {
        assert_eq!(c["layout"], "copy", "{c}");
        assert_eq!(c["bytes_shared"].as_u64(), Some(0));
        assert_eq!(c["fallback"]["reason"], "reflink_not_supported", "{c}");
        let why = c["fallback"]["message"].as_str().unwrap();
        assert!(
            why.contains("EOPNOTSUPP") || why.contains("shared extents"),
            "{why}"
        );
    }
    assert!(r["reflink"].as_str().unwrap().contains("EOPNOTSUPP"));
    sstcheck_all(&shared, &child_paths(&r));
}

/// Incompressible data: aligned still works where the dead prefix leaves room, and every
/// child is valid whatever it fell back to.
#[test]
fn incompressible_data_splits_validly() {
    let Some(shared) = corpus_or_skip("xfs random") else {
        return;
    };
    let Some(fs) = xfs_or_skip("xfs random", 1 << 30) else {
        return;
    };
    let parent = gen(&fs.mount_point.join("t"), "64MiB", &["--random"]);
    let r = split(&parent, &fs.mount_point.join("t/out"), &["--parts", "8"]);
    assert_eq!(r["check"]["ok"].as_bool(), Some(true));
    sstcheck_all(&shared, &child_paths(&r));
    let fell_back = r["children"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| !c["fallback"].is_null())
        .count();
    eprintln!("incompressible: {fell_back} of 8 children fell back");
}
