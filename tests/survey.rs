//! The dead-prefix survey (issue 32, deliverable 3): `cleave inspect <directory>` and the
//! sidecar's `cleave_survey_*` gauges count the sstables Cassandra 5.0.5+ misreads, as an
//! independent reader (sstcheck.py's `first_position`) finds them.

// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too.
#![cfg(test)]

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::Value;

const ID: &str = "0123456789abcdef0123456789abcdef";

fn split(parent: &Path, out: &Path, extra: &[&str]) -> Vec<PathBuf> {
    std::fs::create_dir_all(out).unwrap();
    let mut a: Vec<&OsStr> = vec![
        "split".as_ref(),
        parent.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--parts".as_ref(),
        "3".as_ref(),
        "--json".as_ref(),
    ];
    a.extend(extra.iter().map(|s| OsStr::new(*s)));
    let r = cleave_json(&a);
    r["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| PathBuf::from(c["path"].as_str().unwrap()))
        .collect()
}

fn inspect(dir: &Path) -> Value {
    cleave_json(&["inspect".as_ref(), dir.as_os_str(), "--json".as_ref()])
}

fn inspect_text(dir: &Path) -> String {
    let out = Command::new(cleave_bin())
        .arg("inspect")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn survey_counts_the_dead_prefixes_an_independent_reader_finds() {
    let Some(shared) = shared_dir() else {
        eprintln!("survey: ../shared missing, skipped");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let ks = data.join("ks");
    let parent_dir = ks.join(format!("t-{ID}"));
    gen_table(&parent_dir, &[(1, "4MiB")]);
    let parent = parent_dir.join("nb-1-big-Data.db");
    // Children for 4.1 keep a dead prefix; the default target's never do.
    let old = split(
        &parent,
        &ks.join(format!("d41-{ID}")),
        &["--target-cassandra", "4.1"],
    );
    let new = split(&parent, &ks.join(format!("d50-{ID}")), &[]);
    let firsts = sstcheck_all(&shared, &old);
    let dead: Vec<&PathBuf> = old
        .iter()
        .zip(&firsts)
        .filter(|(_, r)| r["first_position"].as_u64().unwrap() > 0)
        .map(|(p, _)| p)
        .collect();
    assert!(
        dead.len() >= 2,
        "4.1 children with a dead prefix: {firsts:?}"
    );
    sstcheck_all_from_zero(&shared, &new);
    // A snapshot of a dead-prefix child (counted apart), and an sstable whose Index.db is
    // cut short (reported, not fatal).
    copy_sstable(
        dead[0],
        &ks.join(format!("d41-{ID}/snapshots/before-upgrade")),
    );
    let bad = copy_sstable(&parent, &ks.join(format!("bad-{ID}")));
    let index = bad.with_file_name("nb-1-big-Index.db");
    let bytes = std::fs::read(&index).unwrap();
    std::fs::write(&index, &bytes[..3]).unwrap();

    let s = inspect(&data);
    assert_eq!(s["version"], 1);
    assert_eq!(s["sstables"], 1 + 3 + 3, "{s}");
    assert_eq!(s["dead_prefix"], dead.len(), "{s}");
    assert_eq!(s["dead_prefix_aside"], 1, "{s}");
    let want_bytes: u64 = dead
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(s["dead_prefix_bytes"], want_bytes, "{s}");
    let table = |name: &str| {
        s["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["table"] == name)
            .unwrap_or_else(|| panic!("no table {name}: {s}"))
            .clone()
    };
    assert_eq!(table("d41")["dead_prefix"], dead.len());
    assert_eq!(table("d41")["keyspace"], "ks");
    assert_eq!(table("d50")["dead_prefix"], 0);
    assert_eq!(table("t")["dead_prefix"], 0);
    let mut listed: Vec<PathBuf> = s["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["aside"] == false)
        .map(|f| PathBuf::from(f["path"].as_str().unwrap()))
        .collect();
    listed.sort();
    let mut want: Vec<PathBuf> = dead.iter().map(|p| (*p).clone()).collect();
    want.sort();
    assert_eq!(listed, want);
    for (f, r) in s["files"].as_array().unwrap().iter().zip(&firsts) {
        if f["aside"] == false && f["path"] == old[0].to_str().unwrap() {
            assert_eq!(f["first_position"], r["first_position"]);
        }
    }
    let unreadable = s["unreadable"].as_array().unwrap();
    assert_eq!(unreadable.len(), 1, "{s}");
    assert_eq!(unreadable[0]["reason"], "CorruptSSTable", "{s}");
    assert!(
        unreadable[0]["message"]
            .as_str()
            .unwrap()
            .contains("Index.db"),
        "{s}"
    );
    let text = inspect_text(&data);
    assert!(text.contains("warning[DeadPrefix]"), "{text}");
    assert!(text.contains("cleave rewrite"), "{text}");

    // Negative control: the default target's table alone has none, and says nothing.
    let only_new = inspect(&ks.join(format!("d50-{ID}")));
    assert_eq!(only_new["sstables"], 3, "{only_new}");
    assert_eq!(only_new["dead_prefix"], 0, "{only_new}");
    assert!(!inspect_text(&ks.join(format!("d50-{ID}"))).contains("DeadPrefix"));

    // The sidecar's gauges say the same.
    let manifests = d.path().join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let port = free_port();
    let mut c = Command::new(cleave_bin());
    c.args(["run", "--local"])
        .arg(&manifests)
        .args(["--node", "n1", "--metrics-addr"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(&data)
        .args(["--survey-interval-seconds", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _run = KillOnDrop(c.spawn().unwrap());
    let want = format!(
        "cleave_survey_dead_prefix_sstables{{keyspace=\"ks\",table=\"d41\"}} {}",
        dead.len()
    );
    let mut body = String::new();
    let seen = eventually(Duration::from_secs(30), || {
        body = http_get(port, "/metrics").unwrap_or_default();
        body.contains(&want)
    });
    assert!(seen, "{want} not in /metrics: {body}");
    assert!(
        body.contains("cleave_survey_dead_prefix_sstables{keyspace=\"ks\",table=\"d50\"} 0"),
        "{body}"
    );
    assert!(
        body.contains("cleave_survey_sstables{keyspace=\"ks\",table=\"d50\"} 3"),
        "{body}"
    );
}

#[test]
fn survey_of_a_missing_directory_fails_with_a_reason_and_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("nope");
    let err = cleave_fails(&["inspect".as_ref(), missing.as_os_str()]);
    assert!(err.contains("error[") && err.contains("nope"), "{err}");
    assert!(!missing.exists());
}

/// BTI (`da`): children cut for a 5.0.4 target keep a dead prefix, and the survey finds each
/// one through Partitions.db — the same count and first positions the split reported
/// (`dead_prefix`, the planner's figure, read back here from the children alone); the
/// default target's children have none, and the survey says so.
#[test]
fn survey_counts_a_bti_dead_prefix() {
    let Some(shared) = corpus_or_skip("survey bti") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let ks = d.path().join("data/ks");
    let parent = copy_sstable(
        &bti_fixture(&shared, "legacy_da_clust"),
        &ks.join(format!("t-{ID}")),
    );
    let mut a: Vec<&OsStr> = vec![
        "split".as_ref(),
        parent.as_os_str(),
        "--parts".as_ref(),
        "3".as_ref(),
        "--json".as_ref(),
        "--out".as_ref(),
    ];
    let old_dir = ks.join(format!("d504-{ID}"));
    let new_dir = ks.join(format!("d509-{ID}"));
    std::fs::create_dir_all(&old_dir).unwrap();
    std::fs::create_dir_all(&new_dir).unwrap();
    let mut old_args = a.clone();
    old_args.extend([
        old_dir.as_os_str(),
        "--target-cassandra".as_ref(),
        "5.0.4".as_ref(),
    ]);
    let old = cleave_json(&old_args);
    a.push(new_dir.as_os_str());
    let new = cleave_json(&a);
    let dead: Vec<(String, u64)> = old["children"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["dead_prefix"].as_u64().unwrap() > 0)
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["dead_prefix"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(!dead.is_empty(), "5.0.4 children with a dead prefix: {old}");
    assert!(
        new["children"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["dead_prefix"] == 0),
        "{new}"
    );

    let s = inspect(&ks);
    assert_eq!(s["sstables"], 1 + 3 + 3, "{s}");
    assert_eq!(s["unreadable"].as_array().unwrap().len(), 0, "{s}");
    assert_eq!(s["dead_prefix"], dead.len(), "{s}");
    let mut listed: Vec<(String, u64)> = s["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["first_position"].as_u64().unwrap(),
            )
        })
        .collect();
    listed.sort();
    let mut want = dead.clone();
    want.sort();
    assert_eq!(listed, want, "{s}");
    let only_new = inspect(&new_dir);
    assert_eq!(only_new["dead_prefix"], 0, "{only_new}");
    assert_eq!(only_new["unreadable"].as_array().unwrap().len(), 0);
}
