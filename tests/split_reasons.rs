//! Every failure of a split names its stable reason (`cleave::reason::Reason`), leaves no
//! staging behind and leaves the parent byte-identical. The CLI-level reasons of bad
//! requests, unsupported and corrupt parents and a live Cassandra are in
//! `split_publish.rs`; here: a disk that fills mid-split (a real, small XFS on a loop file),
//! a directory cleave may not write, a parent that vanishes between open and plan, and
//! children that fail their check (the typestate seam, driven through the library).
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use cleave::reason::Reason;
use cleave::split::publish::Publish;
use cleave::split::{Cut, Parent, Policy, SplitError, Target};
use cleave::sstable::Component;
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

/// Every file under `dir` with its bytes' CRC32 (the parent's identity).
fn digest_tree(dir: &Path) -> Vec<(PathBuf, u64, u32)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let b = std::fs::read(&p).unwrap();
            v.push((p, b.len() as u64, crc32fast::hash(&b)));
        }
    }
    v.sort();
    v
}

fn staging_dirs(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(".cleave-"))
        .collect()
}

/// `cleave split … --json` that must fail: the one error object on stdout.
fn split_fails(parent: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let o = Command::new(cleave_bin())
        .arg("split")
        .arg(parent)
        .arg("--out")
        .arg(out)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{stdout} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    v
}

/// A 320 MiB XFS holding a ~200 MiB incompressible parent: `--layout copy` must write
/// another ~200 MiB and runs out of space mid-split. The error is InsufficientSpace
/// (never CorruptSSTable), staging is gone, the parent is byte-identical.
#[test]
fn a_full_disk_mid_split_is_insufficient_space() {
    let Some(fs) = xfs_or_skip("full disk", 320 << 20) else {
        return;
    };
    let table = fs.mount_point.join("t");
    let parent = gen(&table, "200MiB", &["--random"]);
    let before = digest_tree(&table);
    let out = table.join("out");
    std::fs::create_dir(&out).unwrap();
    let used_before = fs.used_bytes().unwrap();
    // No reserve: the split must start and run into ENOSPC, not be refused by the
    // pre-flight (tests/cli_space.rs).
    let v = split_fails(
        &parent,
        &out,
        &[
            "--parts",
            "4",
            "--layout",
            "copy",
            "--min-free-percent",
            "0",
        ],
    );
    assert_eq!(v["error"]["reason"], "InsufficientSpace", "{v}");
    let path = v["error"]["path"].as_str().unwrap();
    assert!(path.starts_with(out.to_str().unwrap()), "{v}");
    assert!(
        staging_dirs(&out).is_empty(),
        "staging left: {:?}",
        staging_dirs(&out)
    );
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "nothing published"
    );
    assert_eq!(before, digest_tree(&table), "parent changed");
    // The space is back: what the failed split wrote was removed with staging.
    let used_after = fs.used_bytes().unwrap();
    assert!(
        used_after <= used_before + (4 << 20),
        "used {used_before} before, {used_after} after"
    );
}

/// An immutable output directory (`chattr +i`, which binds root too): PermissionDenied.
#[test]
fn an_unwritable_target_is_permission_denied() {
    let Some(fs) = xfs_or_skip("permission", 320 << 20) else {
        return;
    };
    let table = fs.mount_point.join("t");
    let parent = gen(&table, "4MiB", &["--compressible"]);
    let before = digest_tree(&table);
    let out = table.join("out");
    std::fs::create_dir(&out).unwrap();
    let chattr = |flag: &str| {
        let s = Command::new("chattr").arg(flag).arg(&out).status();
        s.is_ok_and(|s| s.success())
    };
    if !chattr("+i") {
        eprintln!("SKIP permission: chattr +i failed");
        return;
    }
    let v = split_fails(&parent, &out, &["--parts", "2"]);
    assert!(chattr("-i"));
    assert_eq!(v["error"]["reason"], "PermissionDenied", "{v}");
    assert_eq!(before, digest_tree(&table));
    assert!(staging_dirs(&out).is_empty());
}

fn policy() -> Policy {
    Policy::default()
}

/// Index.db disappears after the parent was opened (compaction removed the sstable):
/// IoError naming the file, not CorruptSSTable.
#[test]
fn a_vanished_component_is_an_io_error() {
    let d = tempfile::tempdir().unwrap();
    let parent = gen(d.path(), "2MiB", &["--compressible"]);
    let p = Parent::open(&parent).unwrap();
    let index = p.table().path(&Component::Index);
    std::fs::remove_file(&index).unwrap();
    let e = p.plan(&Cut::Parts(2), &policy()).err().unwrap();
    assert_eq!(SplitError::from(e).reason(), Reason::IoError);
}

/// Children that do not pass their re-check are never published: write, damage a child's
/// Index.db in staging, and `check` refuses with CheckFailed and removes staging.
#[test]
fn a_child_that_fails_its_check_is_check_failed() {
    let d = tempfile::tempdir().unwrap();
    let parent = gen(&d.path().join("t"), "8MiB", &["--compressible"]);
    let before = digest_tree(&d.path().join("t"));
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let p = Parent::open(&parent).unwrap();
    let plan = p.plan(&Cut::Parts(3), &policy()).unwrap();
    assert_eq!(plan.children.len(), 3);
    let staged = plan.write(&out).unwrap();
    let staging = staged.staging_dir().to_path_buf();
    assert!(staging.is_dir());
    let idx = staged.descriptors()[1].path(&Component::Index);
    let mut b = std::fs::read(&idx).unwrap();
    let n = b.len();
    b.truncate(n / 2);
    std::fs::write(&idx, &b).unwrap();
    let e = staged.check().err().unwrap();
    assert_eq!(e.reason(), Reason::CheckFailed, "{e}");
    assert!(!staging.exists(), "staging removed when the check fails");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    assert_eq!(before, digest_tree(&d.path().join("t")));
}

/// The pipeline step by step, as the operator and a stream sender use it: the plan is
/// pure (a dry run writes nothing), the in-memory components of a child are the bytes
/// the writer puts on disk.
#[test]
fn the_plan_serves_files_and_memory_alike() {
    let d = tempfile::tempdir().unwrap();
    let parent = gen(&d.path().join("t"), "8MiB", &["--compressible"]);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let p = Parent::open(&parent).unwrap();
    let plan = p.plan(&Cut::Parts(4), &policy()).unwrap();
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        0,
        "planning writes nothing"
    );
    let target = Target {
        out_dir: out.clone(),
        publish: Publish::Stage,
        dry_run: false,
    };
    let lock = cleave::split::lock(&parent, &target).unwrap();
    let report =
        cleave::split::run(&p, &Cut::Parts(4), &policy(), &target, &lock, &mut |_| {}).unwrap();
    assert_eq!(report.children.len(), 4);
    for (i, c) in report.children.iter().enumerate() {
        // The writer probed the filesystem (tmp is not XFS here: copy) — plan the memory
        // version for the same block (0) and compare every component but Data.db.
        let layout = plan.data_layout(i, 0).unwrap();
        let data: Vec<u8> = {
            let mut v = vec![0u8; layout.file_size as usize];
            let f = std::fs::read(&parent).unwrap();
            for s in &layout.segments {
                match s {
                    cleave::split::data::Segment::Bytes { dst, bytes } => {
                        v[*dst as usize..*dst as usize + bytes.len()].copy_from_slice(bytes)
                    }
                    cleave::split::data::Segment::Parent { dst, src, len } => v
                        [*dst as usize..(*dst + *len) as usize]
                        .copy_from_slice(&f[*src as usize..(*src + *len) as usize]),
                }
            }
            v
        };
        assert_eq!(data, std::fs::read(&c.path).unwrap(), "child {i} Data.db");
        let desc = cleave::sstable::Descriptor::from_path(&c.path).unwrap().0;
        for (component, bytes) in plan.components(i, &layout).unwrap() {
            let on_disk = std::fs::read(desc.path(&component)).unwrap();
            assert_eq!(bytes, on_disk, "child {i} {component:?}");
        }
    }
}
