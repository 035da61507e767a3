//! Anticompaction: labelled ranges, repair metadata per label, vnode-like interleaving.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};

use cleave::sstable::statistics::Statistics;
use cleave::sstable::{SSTable, Version};
use common::*;

fn gen(dir: &Path, size: &str, partition: &str, version: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let r = cleave_json(&[
        "gen".as_ref(),
        "--out".as_ref(),
        dir.as_os_str(),
        "--size".as_ref(),
        size.as_ref(),
        "--partition-size".as_ref(),
        partition.as_ref(),
        "--row-size".as_ref(),
        "1KiB".as_ref(),
        "--version".as_ref(),
        version.as_ref(),
        "--json".as_ref(),
    ]);
    PathBuf::from(r["data"].as_str().unwrap())
}

fn stats(data: &Path) -> cleave::sstable::statistics::Stats {
    let t = SSTable::open(data).unwrap();
    let p = t.path(&cleave::sstable::Component::Statistics);
    Statistics::parse(&p, &std::fs::read(&p).unwrap(), t.descriptor.version)
        .unwrap()
        .stats
        .unwrap()
}

fn write(path: &Path, s: &str) -> PathBuf {
    std::fs::write(path, s).unwrap();
    path.to_path_buf()
}

/// 256 ranges spread over the ring, as vnodes give a node: one child per contiguous run
/// that is large enough, small runs of a label merged into one regrid child, at most
/// (large runs) + 3 children, all valid, keys adding up to the parent's.
#[test]
fn vnode_ranges_give_few_valid_children() {
    let Some(shared) = corpus_or_skip("vnodes") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let parent = gen(&work.path().join("p"), "48MiB", "8KiB", "nb");
    // 256 ranges (start, start + width], evenly spaced over the Murmur3 ring; every fourth
    // range is wide (a large run), the rest narrow.
    let mut yaml = String::from("ranges:\n");
    let step = (u64::MAX / 256) as i128;
    for i in 0..256i128 {
        let start = i64::MIN as i128 + i * step;
        let width = if i % 4 == 0 { step / 2 } else { step / 64 };
        yaml += &format!("  - {{start: \"{}\", end: \"{}\"}}\n", start, start + width);
    }
    let ranges = write(&work.path().join("ranges.yaml"), &yaml);
    let out = work.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let r = cleave_json(&[
        "split".as_ref(),
        parent.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--ranges".as_ref(),
        ranges.as_os_str(),
        "--repaired-at".as_ref(),
        "1700000000000".as_ref(),
        "--json".as_ref(),
    ]);
    let children = r["children"].as_array().unwrap();
    let plan = r["plan"].as_array().unwrap();
    let large = plan
        .iter()
        .filter(|p| !p["child"]["merged"].as_bool().unwrap())
        .count();
    let merged = plan.len() - large;
    assert!(merged <= 3, "{merged} merged children");
    assert!(
        children.len() <= large + 3,
        "{} children for {large} large runs",
        children.len()
    );
    assert!(
        children.len() >= 64,
        "expected a child per wide range, got {}",
        children.len()
    );
    assert_eq!(r["check"]["ok"].as_bool(), Some(true));
    let paths: Vec<PathBuf> = children
        .iter()
        .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
        .collect();
    sstcheck_all_from_zero(&shared, &paths);
    for c in children {
        let p = PathBuf::from(c["path"].as_str().unwrap());
        let s = stats(&p);
        match c["label"].as_str().unwrap() {
            "full" => assert_eq!(s.repaired_at, 1_700_000_000_000),
            "unrepaired" => assert_eq!(s.repaired_at, 0),
            l => panic!("unexpected label {l}"),
        }
        assert_eq!(s.pending_repair, Some(None));
        if c["layout"] == "regrid" {
            let t = SSTable::open(&p).unwrap();
            assert_eq!(
                t.index_reader()
                    .unwrap()
                    .next_entry()
                    .unwrap()
                    .unwrap()
                    .position,
                0
            );
        }
    }
    eprintln!(
        "{} children ({large} runs with their own child, {merged} merged)",
        children.len()
    );
}

/// Pending repair with full and transient ranges: (0, session, false), (0, session, true)
/// and (0, none, false), as `CompactionManager.antiCompactGroup` writes them.
#[test]
fn pending_repair_triples_per_label() {
    let Some(shared) = corpus_or_skip("pending") else {
        return;
    };
    for version in ["nb", "oa"] {
        let work = tempfile::tempdir().unwrap();
        let parent = gen(&work.path().join("p"), "8MiB", "16KiB", version);
        let ranges = write(
            &work.path().join("r.yaml"),
            "ranges:\n  - {start: \"-9223372036854775808\", end: \"-3074457345618258603\"}\ntransientRanges:\n  - {start: \"-3074457345618258603\", end: \"3074457345618258602\"}\n",
        );
        let out = work.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let session = "6a3f4c2e-1d2b-11ef-9c4e-0242ac120002";
        let r = cleave_json(&[
            "split".as_ref(),
            parent.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
            "--ranges".as_ref(),
            ranges.as_os_str(),
            "--pending-repair".as_ref(),
            session.as_ref(),
            "--json".as_ref(),
        ]);
        let children = r["children"].as_array().unwrap();
        assert_eq!(children.len(), 3, "{r}");
        let u = *uuid::Uuid::parse_str(session).unwrap().as_bytes();
        for c in children {
            let s = stats(&PathBuf::from(c["path"].as_str().unwrap()));
            let want = match c["label"].as_str().unwrap() {
                "full" => (0, Some(u), false),
                "transient" => (0, Some(u), true),
                _ => (0, None, false),
            };
            assert_eq!(
                (
                    s.repaired_at,
                    s.pending_repair.flatten(),
                    s.is_transient.unwrap()
                ),
                want,
                "{version} {}",
                c["label"]
            );
        }
        let paths: Vec<PathBuf> = children
            .iter()
            .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
            .collect();
        sstcheck_all_from_zero(&shared, &paths);
        let _ = Version::parse(version);
    }
}

/// Cassandra's invariants are refused up front with a clear error, and nothing is written.
#[test]
fn bad_repair_combinations_are_refused() {
    let work = tempfile::tempdir().unwrap();
    let parent = gen(&work.path().join("p"), "2MiB", "16KiB", "nb");
    let out = work.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let ranges = write(
        &work.path().join("r.yaml"),
        "- {start: \"0\", end: \"100\"}\n",
    );
    let overlap = write(&work.path().join("o.yaml"), "ranges:\n  - {start: \"0\", end: \"100\"}\ntransientRanges:\n  - {start: \"50\", end: \"150\"}\n");
    let transient = write(&work.path().join("t.yaml"), "ranges:\n  - {start: \"0\", end: \"100\"}\ntransientRanges:\n  - {start: \"100\", end: \"150\"}\n");
    let base = |r: &Path| -> Vec<std::ffi::OsString> {
        vec![
            "split".into(),
            parent.clone().into(),
            "--out".into(),
            out.clone().into(),
            "--ranges".into(),
            r.into(),
        ]
    };
    let cases: Vec<(Vec<std::ffi::OsString>, &str)> = vec![
        (base(&ranges), "exactly one of --repaired-at"),
        (
            [base(&transient), vec!["--repaired-at".into(), "5".into()]].concat(),
            "transient ranges need --pending-repair",
        ),
        (
            [
                base(&overlap),
                vec![
                    "--pending-repair".into(),
                    "6a3f4c2e-1d2b-11ef-9c4e-0242ac120002".into(),
                ],
            ]
            .concat(),
            "overlap",
        ),
        (
            [
                base(&ranges),
                vec!["--pending-repair".into(), "not-a-uuid".into()],
            ]
            .concat(),
            "is not a UUID",
        ),
        (
            [base(&ranges), vec!["--repaired-at".into(), "-1".into()]].concat(),
            "expected milliseconds",
        ),
    ];
    for (args, want) in cases {
        let before = snapshot(work.path());
        let a: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_os_str()).collect();
        let err = cleave_fails(&a);
        assert!(err.contains(want), "expected {want:?} in: {err}");
        assert_eq!(
            before,
            snapshot(work.path()),
            "a refused split wrote something"
        );
    }
}
