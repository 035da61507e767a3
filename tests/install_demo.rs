//! First contact: `cleave demo` (the README's first command) ends with a short summary, and
//! says in one line when its directory cannot share extents and how to see sharing.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::process::Command;

use common::*;

fn demo(args: &[&str]) -> (String, String) {
    let out = Command::new(cleave_bin())
        .arg("demo")
        .args(["--size", "8MiB"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "cleave demo {args:?}:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}

fn can_share(dir: &std::path::Path) -> bool {
    let f = dir.join("probe-src");
    std::fs::write(&f, vec![7u8; 1 << 16]).unwrap();
    let r = cleave::io::reflink::probe(&std::fs::File::open(&f).unwrap(), dir).unwrap();
    std::fs::remove_file(&f).unwrap();
    matches!(r, cleave::io::reflink::ReflinkSupport::Supported { .. })
}

#[test]
fn demo_ends_with_a_summary_and_says_when_it_cannot_share() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("demo");
    std::fs::create_dir_all(&dir).unwrap();
    let (out, err) = demo(&["--dir", dir.to_str().unwrap()]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        6,
        "a six-line summary, not the status YAML:\n{out}"
    );
    assert!(
        lines[0].starts_with("AnticompactionJob demo-repair: Complete in "),
        "{out}"
    );
    assert!(lines[1].starts_with("  parents   2 sstables, "), "{out}");
    assert!(lines[2].starts_with("  children  "), "{out}");
    assert!(
        lines[2].contains("pending repair") && lines[2].contains("transient"),
        "{out}"
    );
    assert!(lines[3].starts_with("  bytes     shared "), "{out}");
    assert!(lines[4].starts_with("  check     ok"), "{out}");
    let status = dir.join("manifests/demo-repair.status.yaml");
    assert!(lines[5].contains(status.to_str().unwrap()), "{out}");
    assert!(std::fs::read_to_string(&status)
        .unwrap()
        .contains("phase: Complete"));
    let hint = err.lines().filter(|l| l.contains("--loop-xfs")).count();
    if can_share(&dir) {
        assert_eq!(hint, 0, "{err}");
    } else {
        assert_eq!(hint, 1, "one line says the directory cannot share:\n{err}");
        assert!(lines[3].contains("shared 0 B"), "{out}");
    }
}

#[test]
fn demo_json_keeps_the_whole_status() {
    let (out, _) = demo(&["--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"]["phase"], "Complete");
    assert_eq!(v["check"]["ok"], true);
}

#[test]
fn demo_on_a_loop_xfs_shares_and_says_nothing_about_copying() {
    if let Some(why) = cleave::io::loopfs::unavailable_reason() {
        eprintln!("SKIP demo --loop-xfs: {why}");
        return;
    }
    let (out, err) = demo(&["--loop-xfs"]);
    assert!(!err.contains("are copied"), "{err}");
    let bytes = out.lines().find(|l| l.starts_with("  bytes")).unwrap();
    assert!(!bytes.contains("shared 0 B"), "{out}");
}
