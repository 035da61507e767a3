//! Durability at the cost the situation needs (issue 21, docs/split.md "Durability"): an
//! offline Replace — the guard proved no process holds the table — makes its result
//! durable with one `syncfs` and a handful of fsyncs; a split while a Cassandra stand-in
//! holds the parent's Data.db (the guard would refuse Replace) never calls `syncfs` and
//! fsyncs every file. Judged twice: by the calls the split report counts
//! (`io::durable::counts`, per process) and, independently, by the flushes the loop
//! device under a real XFS completed (`/proc/diskstats`), which only these runs write to.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cleave::io::proc::BlockDevice;
use common::*;

/// One generated 64 MiB parent in `table`; its Data.db.
fn gen(table: &Path) -> PathBuf {
    gen_table(table, &[(1, "64MiB")]);
    let data = data_files(table);
    assert_eq!(data.len(), 1, "{data:?}");
    data[0].clone()
}

fn split_args<'a>(parent: &'a Path, out: &'a Path, publish: &'a str) -> Vec<&'a std::ffi::OsStr> {
    vec![
        "split".as_ref(),
        parent.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--parts".as_ref(),
        "8".as_ref(),
        "--publish".as_ref(),
        publish.as_ref(),
        "--json".as_ref(),
    ]
}

/// Runs a split and returns its report with the device flushes it cost (from before the
/// process started until it exited: every fsync and syncfs returns only once flushed).
fn split_counting(dev: BlockDevice, args: &[&std::ffi::OsStr]) -> (serde_json::Value, u64) {
    let before = dev.flushes_completed().unwrap().unwrap();
    let r = cleave_json(args);
    let after = dev.flushes_completed().unwrap().unwrap();
    (r, after - before)
}

fn calls(r: &serde_json::Value) -> (String, u64, u64) {
    let d = &r["durability"];
    (
        d["mode"].as_str().unwrap().to_string(),
        d["calls"]["syncfs"].as_u64().unwrap(),
        d["calls"]["fsyncs"].as_u64().unwrap(),
    )
}

#[test]
fn offline_replace_issues_one_syncfs_and_a_held_table_none() {
    let Some(fs) = xfs_or_skip("durability", 1 << 30) else {
        return;
    };
    let dev = BlockDevice::of(&fs.mount_point).unwrap();
    if dev.flushes_completed().ok().flatten().is_none() {
        eprintln!("SKIP durability: no flush counts in /proc/diskstats (kernel < 5.5)");
        return;
    }
    let offline = fs.mount_point.join("ks").join("offline-1");
    let held = fs.mount_point.join("ks").join("held-2");
    let staged_out = fs.mount_point.join("staged");
    std::fs::create_dir_all(&staged_out).unwrap();
    let p_offline = gen(&offline);
    let p_held = gen(&held);
    // Everything `gen` wrote is on the device before counting starts.
    cleave::io::durable::syncfs(&fs.mount_point).unwrap();

    // Offline Replace: nothing holds the table.
    let (r, flushes) = split_counting(dev, &split_args(&p_offline, &offline, "replace"));
    let (mode, syncfs, fsyncs) = calls(&r);
    eprintln!(
        "offline replace: {mode}, {syncfs} syncfs, {fsyncs} fsyncs, {flushes} device flushes"
    );
    assert_eq!(mode, "syncfs");
    assert_eq!(syncfs, 1, "{r}");
    // The table directory after the renames, the log after COMMIT, the table directory
    // after the parent's deletion (docs/split.md "Durability").
    assert_eq!(fsyncs, 3, "{r}");
    assert!(!p_offline.exists(), "the parent is replaced");
    assert_eq!(r["children"].as_array().unwrap().len(), 8);
    for c in r["children"].as_array().unwrap() {
        assert!(Path::new(c["path"].as_str().unwrap()).starts_with(&offline));
    }

    // A Cassandra stand-in holds the other parent's Data.db: Replace is refused, Stage
    // writes and publishes with an fsync a file and no syncfs.
    let data = std::fs::File::open(&p_held).unwrap();
    let mut holder = KillOnDrop(
        Command::new("sleep")
            .arg("600")
            .stdin(data)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let refused = Command::new(cleave_bin())
        .args(split_args(&p_held, &held, "replace"))
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("CassandraRunning"), "{said}");
    let (r, held_flushes) = split_counting(dev, &split_args(&p_held, &staged_out, "stage"));
    let _ = holder.0.kill();
    let _ = holder.0.wait();
    let (mode, syncfs, fsyncs) = calls(&r);
    eprintln!(
        "staged split with a holder: {mode}, {syncfs} syncfs, {fsyncs} fsyncs, {held_flushes} device flushes"
    );
    assert_eq!(mode, "per_file");
    assert_eq!(syncfs, 0, "{r}");
    let files: usize = std::fs::read_dir(&staged_out)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_type().unwrap().is_file())
        .count();
    assert!(files >= 8 * 7, "{files} files staged");
    assert!(
        fsyncs >= files as u64,
        "every staged file is fsynced: {fsyncs} fsyncs for {files} files"
    );
    assert!(p_held.exists(), "Stage leaves the parent");
    // The device agrees: the per-file split flushes many times what the Replace did.
    assert!(
        flushes * 4 <= held_flushes,
        "offline replace {flushes} flushes, per-file stage {held_flushes}"
    );
}
