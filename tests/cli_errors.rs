//! Every subcommand reports a failure the way `split` does: `cleave: error[<Reason>]:
//! <message>` on stderr, or with `--json` one object `{"error": {"reason", "message",
//! "path"}}` on stdout, exit status 1 (`verify` reports each sstable's failure that way
//! inside its list). One test per subcommand, each on a real failure.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::cleave_bin;

fn cleave(args: &[&str]) -> Output {
    Command::new(cleave_bin()).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The `{"error": …}` object of a `--json` failure.
fn json_error(o: &Output) -> serde_json::Value {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", o.stdout));
    v["error"].clone()
}

/// A small generated sstable in `dir`; returns its Data.db.
fn small_table(dir: &Path) -> String {
    let o = cleave(&[
        "gen",
        "--out",
        dir.to_str().unwrap(),
        "--size",
        "256KiB",
        "--partition-size",
        "4KiB",
        "--row-size",
        "512",
        "--chunk",
        "4KiB",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    dir.join("nb-1-big-Data.db").to_str().unwrap().to_string()
}

#[test]
fn gen_reports_invalid_arguments_and_io_errors_with_a_reason() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("t");
    let out = out.to_str().unwrap();
    let o = cleave(&["gen", "--out", out, "--version", "zz"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cleave: error[InvalidRequest]: --version \"zz\""),
        "{}",
        stderr(&o)
    );
    let e = json_error(&cleave(&["gen", "--out", out, "--chunk", "3000", "--json"]));
    assert_eq!(e["reason"], "InvalidRequest", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("--chunk 3000"),
        "{e}"
    );
    assert_eq!(e["path"], out);
    // --out below a regular file: the directory cannot be created (ENOTDIR).
    let file = d.path().join("f");
    std::fs::write(&file, b"x").unwrap();
    let below = file.join("t");
    let e = json_error(&cleave(&[
        "gen",
        "--out",
        below.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!(e["reason"], "IoError", "{e}");
    assert_eq!(e["path"], below.to_str().unwrap());
    // A second gen into the same place is refused before anything is written.
    small_table(&d.path().join("g"));
    let g = d.path().join("g");
    let e = json_error(&cleave(&["gen", "--out", g.to_str().unwrap(), "--json"]));
    assert_eq!(e["reason"], "InvalidRequest", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("already exists"),
        "{e}"
    );
}

#[test]
fn inspect_reports_a_corrupt_component_with_its_reason_and_path() {
    let d = tempfile::tempdir().unwrap();
    let data = small_table(d.path());
    let ci = data.replace("Data.db", "CompressionInfo.db");
    let mut b = std::fs::read(&ci).unwrap();
    let n = b.len();
    // The last chunk offset goes backwards.
    b[n - 8..].copy_from_slice(&1i64.to_be_bytes());
    std::fs::write(&ci, &b).unwrap();
    let o = cleave(&["inspect", &data]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cleave: error[CorruptSSTable]:")
            && stderr(&o).contains("CompressionInfo.db"),
        "{}",
        stderr(&o)
    );
    let e = json_error(&cleave(&["inspect", &data, "--json"]));
    assert_eq!(e["reason"], "CorruptSSTable", "{e}");
    assert_eq!(e["path"], ci.as_str());
    assert!(
        e["message"].as_str().unwrap().contains("chunk offset"),
        "{e}"
    );
}

#[test]
fn verify_reports_each_failed_sstable_with_its_reason() {
    let d = tempfile::tempdir().unwrap();
    let good = small_table(&d.path().join("a"));
    let bad = small_table(&d.path().join("b"));
    let mut b = std::fs::read(&bad).unwrap();
    let n = b.len();
    b[n / 2] ^= 0x5a;
    std::fs::write(&bad, &b).unwrap();
    let o = cleave(&["verify", &good, &bad]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!("{bad}: FAILED: error[CorruptSSTable]:"))
            && text.contains(&format!("{good}: ok")),
        "{text}"
    );
    let o = cleave(&["verify", &good, &bad, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert!(v["sstables"][0]["error"].is_null(), "{v}");
    let e = &v["sstables"][1]["error"];
    assert_eq!(e["reason"], "CorruptSSTable", "{v}");
    assert_eq!(e["path"], bad.as_str());
    assert!(e["message"].as_str().unwrap().contains("checksum"), "{v}");
}

#[test]
fn recover_and_split_report_io_and_request_errors_with_a_reason() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("no-such-table");
    let e = json_error(&cleave(&["recover", missing.to_str().unwrap(), "--json"]));
    assert_eq!(e["reason"], "IoError", "{e}");
    assert_eq!(e["path"], missing.to_str().unwrap());
    let o = cleave(&["recover", missing.to_str().unwrap()]);
    assert!(
        stderr(&o).contains("cleave: error[IoError]:"),
        "{}",
        stderr(&o)
    );
    let data = small_table(&d.path().join("t"));
    let out = d.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let e = json_error(&cleave(&[
        "split",
        &data,
        "--out",
        out.to_str().unwrap(),
        "--parts",
        "1",
        "--json",
    ]));
    assert_eq!(e["reason"], "InvalidRequest", "{e}");
}

/// Copies `tests/data/system_local/<release>/system` under `data`: the node's own
/// `system.local` flush (real Cassandra 4.1.10 / 5.0.9 sstables).
fn node_system_local(data: &Path, release: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/system_local")
        .join(release);
    let o = Command::new("cp")
        .arg("-r")
        .arg(src.join("system"))
        .arg(data)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn split_learns_the_nodes_release_from_its_data_directory_and_refuses_a_dead_prefix_target() {
    // A parent in `<data>/<keyspace>/<table>/`, its node's system.local beside: 5.0.9
    // (scans Data.db from position 0) refuses a 4.1 target, naming the release and the
    // sstable it was read from — also when the parent is named relative to its table
    // directory; 4.1.10 (the control) lets the same dry run through, and so does a data
    // directory without a system keyspace.
    for (release, refused, relative) in [
        ("5.0.9", true, false),
        ("5.0.9", true, true),
        ("4.1.10", false, false),
        ("", false, false),
    ] {
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("data");
        let table = data.join("ks").join("t-0123456789abcdef0123456789abcdef");
        let parent = small_table(&table);
        if !release.is_empty() {
            node_system_local(&data, release);
        }
        let out = d.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        let args = [
            "split",
            &parent,
            "--out",
            out.to_str().unwrap(),
            "--parts",
            "2",
            "--target-cassandra",
            "4.1",
            "--dry-run",
            "--json",
        ];
        let o = if relative {
            let mut rel = args;
            rel[1] = "nb-1-big-Data.db";
            Command::new(cleave_bin())
                .args(rel)
                .current_dir(&table)
                .output()
                .unwrap()
        } else {
            cleave(&args)
        };
        if refused {
            let e = json_error(&o);
            assert_eq!(e["reason"], "InvalidRequest", "{e}");
            let m = e["message"].as_str().unwrap();
            assert!(m.contains("Cassandra 5.0.9") && m.contains("local-"), "{m}");
            if !relative {
                assert_eq!(e["path"], parent.as_str());
            }
        } else {
            assert!(o.status.success(), "{release}: {}", stderr(&o));
        }
    }
}
