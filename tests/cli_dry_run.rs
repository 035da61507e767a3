//! Dry runs tell what the run would do, with the run's numbers (issue 37, item 4): each dry
//! run here is followed by the real run on the same data, and the two are compared —
//! `split --dry-run --json` (a plan, no check), `cleanup --dry-run` (the bytes it would
//! reclaim, within 1%), `apply-pending --dry-run` (the children it would publish) and the
//! operator's `spec.dryRun` (`status.results[].planned`).
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const TABLE: &str = "t-0123456789abcdef0123456789abcdef";

/// The binary under test: this build's, or `CLEAVE_BIN_UNDER_TEST` (to show that a test
/// fails on an older binary, e.g. main's `target/release/cleave`).
fn bin() -> PathBuf {
    std::env::var_os("CLEAVE_BIN_UNDER_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(cleave_bin)
}

/// `cleave ARGS` (which must succeed): stdout as JSON.
fn json(args: &[&OsStr]) -> serde_json::Value {
    let out = Command::new(bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "cleave {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("cleave {args:?}: not JSON ({e})"))
}

/// A data directory with one table of `gens` generated sstables; (tempdir, data, table).
fn table(gens: &[(u32, &str)]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let table = data.join("ks").join(TABLE);
    gen_table(&table, gens);
    (d, data, table)
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn split_dry_run_json_is_the_plan_and_no_check() {
    let (d, _data, table) = table(&[(1, "8MiB")]);
    let parent = table.join("nb-1-big-Data.db");
    let plan_out = d.path().join("plan");
    let run_out = d.path().join("run");
    std::fs::create_dir_all(&plan_out).unwrap();
    std::fs::create_dir_all(&run_out).unwrap();
    let split = |out: &Path, dry: bool| {
        let mut a: Vec<&OsStr> = vec![
            "split".as_ref(),
            parent.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
            "--parts".as_ref(),
            "4".as_ref(),
            "--json".as_ref(),
        ];
        if dry {
            a.push("--dry-run".as_ref());
        }
        json(&a)
    };
    let plan = split(&plan_out, true);
    assert_eq!(plan["dry_run"], true);
    // Nothing was written or checked: no check that reads as a failed one.
    assert!(
        plan["check"].is_null(),
        "a dry run prints no check: {}",
        plan["check"]
    );
    assert!(names(&plan_out).is_empty(), "a dry run writes nothing");
    let children = plan["plan"].as_array().unwrap();
    assert_eq!(children.len(), 4, "{plan}");
    let real = split(&run_out, false);
    assert_eq!(real["check"]["ok"], true, "{real}");
    let made = real["children"].as_array().unwrap();
    assert_eq!(made.len(), children.len());
    // The dry run's numbers are the run's: partitions, token ranges, predicted bytes.
    assert_eq!(
        u(&plan["parent_partitions"]),
        u(&real["check"]["parent"]["count"])
    );
    let (mut predicted, mut done) = (0u64, 0u64);
    for (p, c) in children.iter().zip(made) {
        let runs = p["child"]["runs"].as_array().unwrap();
        let parts: u64 = runs
            .iter()
            .map(|r| u(&r["last_ordinal"]) + 1 - u(&r["first_ordinal"]))
            .sum();
        assert_eq!(parts, u(&c["partitions"]), "{p}\n{c}");
        assert_eq!(runs[0]["first_token"], c["first_token"]);
        assert_eq!(runs[runs.len() - 1]["last_token"], c["last_token"]);
        let pr = &p["predicted"];
        predicted += u(&pr["bytes_shared"]) + u(&pr["bytes_copied"]) + u(&pr["bytes_reencoded"]);
        done += u(&c["bytes_shared"]) + u(&c["bytes_copied"]) + u(&c["bytes_reencoded"]);
    }
    for k in ["bytes_shared", "bytes_copied", "bytes_reencoded"] {
        let sum: u64 = children.iter().map(|p| u(&p["predicted"][k])).sum();
        assert_eq!(u(&plan[k]), sum, "{k}: the dry run's total is its plan's");
    }
    let off = predicted.abs_diff(done) as f64 / done as f64;
    assert!(
        off < 0.02,
        "predicted {predicted} bytes, the run did {done} ({:.2}% off)",
        off * 100.0
    );
}

fn owned_half(dir: &Path) -> PathBuf {
    let f = dir.join("owned.yaml");
    std::fs::write(&f, "- {start: \"-9223372036854775808\", end: \"0\"}\n").unwrap();
    f
}

#[test]
fn cleanup_dry_run_predicts_the_bytes_the_run_reclaims() {
    let (d, _data, table) = table(&[(1, "16MiB"), (2, "12MiB")]);
    let owned = owned_half(d.path());
    let cleanup = |dry: bool| {
        let mut a: Vec<&OsStr> = vec![
            "cleanup".as_ref(),
            table.as_os_str(),
            "--owned-ranges".as_ref(),
            owned.as_os_str(),
            "--json".as_ref(),
        ];
        if dry {
            a.push("--dry-run".as_ref());
        }
        json(&a)
    };
    let before = snapshot(&table);
    let plan = cleanup(true);
    assert!(snapshot(&table) == before, "a dry run changes nothing");
    let real = cleanup(false);
    for k in ["kept", "dropped", "split", "children", "partitions_dropped"] {
        assert_eq!(plan[k], real[k], "{k}");
    }
    let (p, r) = (u(&plan["bytes_reclaimed"]), u(&real["bytes_reclaimed"]));
    assert!(r > 1 << 20, "the run reclaims something: {real}");
    let off = p.abs_diff(r) as f64 / r as f64;
    assert!(
        off <= 0.01,
        "dry run predicted {p} bytes reclaimed, the run reclaimed {r} ({:.2}% off)",
        off * 100.0
    );
    // The prediction is the run's own sum: the files it removes less the children's files.
    let on_disk: u64 = before.iter().map(|(_, b)| b.len() as u64).sum::<u64>()
        - snapshot(&table)
            .iter()
            .map(|(_, b)| b.len() as u64)
            .sum::<u64>();
    assert_eq!(
        r, on_disk,
        "the run's bytes_reclaimed is what left the table"
    );
}

#[test]
fn apply_pending_dry_run_lists_the_children_it_publishes() {
    let (_d, data, table) = table(&[(1, "4MiB")]);
    pend_split(&table, "job-1");
    let apply = |dry: bool| {
        let mut a: Vec<&OsStr> = vec![
            "apply-pending".as_ref(),
            "--data-dir".as_ref(),
            data.as_os_str(),
            "--json".as_ref(),
        ];
        if dry {
            a.push("--dry-run".as_ref());
        }
        json(&a)
    };
    let children = |r: &serde_json::Value| -> Vec<String> {
        r["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|j| {
                j["outcome"]["result"]["children"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .map(|c| c.as_str().unwrap().to_string())
            .collect()
    };
    let would = apply(true);
    let did = apply(false);
    let (w, p) = (children(&would), children(&did));
    assert_eq!(p.len(), 3, "the run publishes the 3 pended children: {did}");
    assert_eq!(
        w.len(),
        p.len(),
        "the dry run lists what the run publishes: {would}"
    );
    // What it listed were the staged children the run then published (their keys).
    for c in &w {
        assert!(c.contains(".cleave-pending"), "{c}");
    }
    assert!(p.iter().all(|c| Path::new(c).exists()));
}

/// The operator's dry run (install guide step 5, examples/anticompaction-dry-run.yaml):
/// `status.results[].planned` is the plan, and the real run then writes those children.
#[test]
fn operator_dry_run_reports_the_plan_in_status() {
    let (d, data, _table) = table(&[(1, "6MiB"), (2, "4MiB")]);
    let m = d.path().join("manifests");
    std::fs::create_dir(&m).unwrap();
    let job = |name: &str, extra: &str| {
        format!(
            "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: {name}\nspec:\n  nodeName: n1\n  keyspace: ks\n  ranges:\n    - {{start: \"-9223372036854775808\", end: \"0\"}}\n  repairedAt: 1700000000000\n{extra}"
        )
    };
    let run_once = || {
        let out = Command::new(bin())
            .args([
                "run",
                "--node",
                "n1",
                "--once",
                "--metrics-addr",
                "127.0.0.1:0",
                "--local",
            ])
            .arg(&m)
            .arg("--data-dir")
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let status = |name: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(m.join(format!("{name}.status.yaml"))).unwrap();
        serde_saphyr::from_str(&text).unwrap()
    };
    std::fs::write(m.join("plan.yaml"), job("plan", "  dryRun: true\n")).unwrap();
    run_once();
    let plan = status("plan");
    assert_eq!(plan["phase"], "Planned", "{plan:?}");
    let planned: Vec<(String, Vec<serde_json::Value>)> = plan["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["parent"].as_str().unwrap().to_string(),
                r["planned"].as_array().cloned().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(planned.len(), 2);
    for (parent, kids) in &planned {
        assert!(!kids.is_empty(), "{parent}: a dry run reports its plan");
        for k in kids {
            assert!(k["firstToken"].is_string() && k["lastToken"].is_string());
            assert!(u(&k["partitions"]) > 0 && u(&k["dataBytes"]) > 0, "{k:?}");
        }
    }
    let predicted: u64 = plan["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| u(&r["bytesShared"]) + u(&r["bytesCopied"]) + u(&r["bytesReencoded"]))
        .sum();
    assert!(predicted > 0, "a dry run's bytes are the predictions");

    std::fs::remove_file(m.join("plan.yaml")).unwrap();
    std::fs::write(m.join("real.yaml"), job("real", "")).unwrap();
    run_once();
    let real = status("real");
    assert_eq!(real["phase"], "Complete", "{real:?}");
    for r in real["results"].as_array().unwrap() {
        let (_, kids) = planned
            .iter()
            .find(|(p, _)| r["parent"] == p.as_str())
            .unwrap();
        assert_eq!(
            r["children"].as_array().unwrap().len(),
            kids.len(),
            "the run writes the children the dry run planned: {r:?}"
        );
        let parts: u64 = kids.iter().map(|k| u(&k["partitions"])).sum();
        assert!(
            parts <= u(&r["partitions"]),
            "planned children hold the parent's partitions"
        );
    }
}
