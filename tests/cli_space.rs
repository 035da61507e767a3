//! The CLI's free-space pre-flight (issue 37, item 3): `split`, `rewrite`, `cleanup` and
//! `apply-pending` refuse with `InsufficientSpace` before writing a byte when the run would
//! leave less than `--min-free-percent` (default 10, as the operator's) of the filesystem
//! free. On a real, small ext4 (no reflink: a split writes all of Data.db again) filled to
//! 7% free — enough for each run to succeed, not enough for the reserve — every command is
//! refused, exit status 1, every file byte-identical (sha256) and no file added; with
//! `CLEAVE_MIN_FREE_PERCENT=0` the same split runs.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary under test: this build's, or `$CLEAVE_BIN_UNDER_TEST` (how this test was run
/// against the binary of the code before the fix).
fn bin() -> PathBuf {
    std::env::var_os("CLEAVE_BIN_UNDER_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(common::cleave_bin)
}

/// `cleave args…` with the default reserve: the environment's own setting removed.
fn cleave(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("CLEAVE_MIN_FREE_PERCENT")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout {}\nstderr {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// sha256 of every file under `dir` (`sha256sum`, an independent implementation).
fn sha256_tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() && e.file_name() != "filler" {
                files.push(e.path());
            }
        }
    }
    files.sort();
    let o = Command::new("sha256sum").args(&files).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let m: BTreeMap<PathBuf, String> = out
        .lines()
        .map(|l| {
            let (h, p) = l.split_once("  ").unwrap();
            (PathBuf::from(p), h.to_string())
        })
        .collect();
    assert_eq!(m.len(), files.len());
    m
}

fn gen(dir: &Path) {
    ok(cleave(&[
        "gen",
        "--out",
        dir.to_str().unwrap(),
        "--size",
        "4MiB",
        "--partition-size",
        "8KiB",
        "--json",
    ]));
}

fn statvfs(p: &Path) -> (u64, u64) {
    let st = nix::sys::statvfs::statvfs(p).unwrap();
    let f = st.fragment_size() as u64;
    (st.blocks_available() as u64 * f, st.blocks() as u64 * f)
}

/// Writes a file of zeros (real blocks, fsynced) until `percent`% of the filesystem is
/// available.
fn fill_to(mount: &Path, percent: u64) {
    let (avail, total) = statvfs(mount);
    let target = total / 100 * percent;
    assert!(avail > target, "{avail} available of {total}");
    let mut f = std::fs::File::create(mount.join("filler")).unwrap();
    let block = vec![0u8; 1 << 20];
    let mut left = avail - target;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n]).unwrap();
        left -= n as u64;
    }
    f.sync_all().unwrap();
    let (avail, _) = statvfs(mount);
    let pct = avail * 100 / total;
    assert!(
        (percent - 1..=percent).contains(&pct),
        "{avail} of {total} available"
    );
}

fn refused(o: &Output, mount: &Path) {
    assert_eq!(o.status.code(), Some(1), "{}", text(o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)));
    let e = &v["error"];
    assert_eq!(e["reason"], "InsufficientSpace", "{v}");
    let m = e["message"].as_str().unwrap();
    let mount = std::fs::canonicalize(mount).unwrap();
    assert!(
        m.contains(&format!("(filesystem {})", mount.display()))
            && m.contains("bytes free (")
            && m.contains("this run writes about")
            && m.contains("(10% of the filesystem) must stay free (--min-free-percent)")
            && m.contains("nothing was written"),
        "{v}"
    );
}

#[test]
fn every_writing_command_keeps_the_reserve_free() {
    if let Some(why) = cleave::io::loopfs::unavailable_reason() {
        eprintln!("SKIP cli space: {why}");
        return;
    }
    let fs = cleave::io::loopfs::LoopMount::new(&std::env::temp_dir(), 128 << 20, "ext4").unwrap();
    let m = &fs.mount_point;
    let data = m.join("data");
    let t1 = data.join("ks/t1-0123456789abcdef0123456789abcdef");
    let t2 = data.join("ks/t2-0123456789abcdef0123456789abcdef");
    gen(&t1);
    gen(&t2);
    let p1 = t1.join("nb-1-big-Data.db");
    // An on-restart split of t2, pended while the disk had room, for apply-pending.
    ok(cleave(&[
        "split",
        t2.join("nb-1-big-Data.db").to_str().unwrap(),
        "--out",
        t2.to_str().unwrap(),
        "--parts",
        "2",
        "--publish",
        "on-restart",
        "--job-uid",
        "j1",
        "--json",
    ]));
    let out = m.join("out");
    std::fs::create_dir(&out).unwrap();
    let owned = m.join("owned.yaml");
    std::fs::write(&owned, "- {start: \"-9223372036854775808\", end: \"0\"}\n").unwrap();
    fill_to(m, 7);
    let before = sha256_tree(m);
    let (p1s, t1s, outs, owneds, datas) = (
        p1.to_str().unwrap(),
        t1.to_str().unwrap(),
        out.to_str().unwrap(),
        owned.to_str().unwrap(),
        data.to_str().unwrap(),
    );
    let runs: [&[&str]; 6] = [
        &["split", p1s, "--out", outs, "--parts", "2", "--json"],
        &[
            "split",
            p1s,
            "--out",
            outs,
            "--parts",
            "2",
            "--dry-run",
            "--json",
        ],
        &[
            "split",
            p1s,
            "--out",
            t1s,
            "--parts",
            "2",
            "--publish",
            "replace",
            "--json",
        ],
        &["rewrite", p1s, "--force", "--json"],
        &["cleanup", t1s, "--owned-ranges", owneds, "--json"],
        &["apply-pending", "--data-dir", datas, "--json"],
    ];
    for args in runs {
        let o = cleave(args);
        refused(&o, m);
        assert!(
            sha256_tree(m) == before,
            "{args:?} changed the filesystem: {}",
            text(&o)
        );
    }
    // The same reserve by flag; with the reserve at 0 (the environment's setting) the split
    // that was refused fits and runs.
    refused(
        &cleave(&[
            "split",
            p1s,
            "--out",
            outs,
            "--parts",
            "2",
            "--min-free-percent",
            "10",
            "--json",
        ]),
        m,
    );
    let v = ok(Command::new(bin())
        .args(["split", p1s, "--out", outs, "--parts", "2", "--json"])
        .env("CLEAVE_MIN_FREE_PERCENT", "0")
        .output()
        .unwrap());
    assert_eq!(v["children"].as_array().unwrap().len(), 2, "{v}");
}
