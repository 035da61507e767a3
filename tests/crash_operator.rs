//! The sidecar killed mid-job (`cleave run --local`, a `Replace` AnticompactionJob over two
//! parents), SIGKILLed at fault points of the split and of publication; the next sidecar
//! takes the job over and completes it. Afterwards the table holds exactly the children of
//! both parents — no parent, no orphan, no log, no staging — and their key fingerprint is
//! the parents'.
//!
//! The dead sidecar's lease (30 s, `operator::decide::LEASE`) is made stale by rewriting
//! its heartbeat in the status file: that stands in for waiting 30 s per trial.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::Path;

use common::*;

const TABLE: &str = "t-0123456789abcdef0123456789abcdef";

fn sidecar(m: &Path, data: &Path, crash_at: Option<&str>) -> std::process::Output {
    let mut c = run_local_once(m);
    // Not a test of the space pre-flight: a shared disk above 90% would refuse the job.
    c.args(["--min-free-percent", "0"])
        .arg("--data-dir")
        .arg(data);
    if let Some(p) = crash_at {
        c.env("CLEAVE_CRASH_AT", p);
    }
    c.output().unwrap()
}

#[test]
fn a_sidecar_killed_mid_job_is_taken_over_and_no_row_is_lost_or_doubled() {
    let mut trials = 0;
    for point in [
        "write:child-file@3",
        "logged",
        "replace:renamed-file@4",
        "renamed",
        "committed",
        "delete:sstable-file@2",
        "logged@2",
        "committed@2",
    ] {
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("data");
        let table = data.join("ks").join(TABLE);
        std::fs::create_dir_all(&table).unwrap();
        for g in ["1", "2"] {
            cleave_json(&[
                "gen".as_ref(),
                "--out".as_ref(),
                table.as_os_str(),
                "--size".as_ref(),
                "1MiB".as_ref(),
                "--chunk".as_ref(),
                "4KiB".as_ref(),
                "--generation".as_ref(),
                g.as_ref(),
                "--seed".as_ref(),
                g.as_ref(),
                "--json".as_ref(),
            ]);
        }
        std::fs::remove_file(table.join("schema.cql")).ok();
        let parents = dir_fingerprint(&table);
        let m = d.path().join("manifests");
        std::fs::create_dir(&m).unwrap();
        std::fs::write(
            m.join("j.yaml"),
            "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: j\nspec:\n  nodeName: n1\n  keyspace: ks\n  ranges:\n    - {start: \"-9223372036854775808\", end: \"0\"}\n  repairedAt: 1700000000000\n  publish: Replace\n",
        )
        .unwrap();
        let first = sidecar(&m, &data, Some(point));
        let err = String::from_utf8_lossy(&first.stderr);
        assert!(
            err.contains("SIGKILL"),
            "{point}: the point is reached: {err}"
        );
        assert!(!first.status.success(), "{point}");
        // The lease of the dead sidecar has expired.
        let st = m.join("j.status.yaml");
        if let Ok(text) = std::fs::read_to_string(&st) {
            let stale: Vec<String> = text
                .lines()
                .map(|l| match l.split_once("heartbeatTime:") {
                    Some((indent, _)) => format!("{indent}heartbeatTime: 2000-01-01T00:00:00Z"),
                    None => l.to_string(),
                })
                .collect();
            std::fs::write(&st, stale.join("\n") + "\n").unwrap();
        }
        let second = sidecar(&m, &data, None);
        assert!(
            second.status.success(),
            "{point}: {}",
            String::from_utf8_lossy(&second.stderr)
        );
        let text = std::fs::read_to_string(&st).unwrap();
        assert!(text.contains("phase: Complete"), "{point}: {text}");
        // Exactly the children of both parents, complete, nothing else.
        assert_replaced(point, &table, &["1", "2"], &parents);
        trials += 1;
    }
    eprintln!(
        "operator crash campaign: {trials} kills of the sidecar, each taken over, 0 violations"
    );
}
