//! `cleave validate`: the controller's own checks, offline. Every shipped example passes
//! (the operators' manifests are listed as skipped, not judged); each known-bad manifest in
//! tests/fixtures/invalid/ fails with the reason and field its first line expects.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::cleave_bin;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    v.sort();
    v
}

fn validate(files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(cleave_bin())
        .arg("validate")
        .args(files)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.stderr.is_empty() || out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), stdout)
}

#[test]
fn every_shipped_example_passes_the_controllers_validation() {
    let examples = yaml_files(&repo().join("examples"));
    assert!(examples.len() >= 7, "{examples:?}");
    let (ok, out) = validate(&examples);
    assert!(ok, "cleave validate examples/*.yaml:\n{out}");
    assert_eq!(out.lines().count(), examples.len(), "{out}");
    for e in &examples {
        let name = e.file_name().unwrap().to_str().unwrap();
        let line = out
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("no line for {name}:\n{out}"));
        assert!(line.contains(": ok ("), "{line}");
        match name {
            "cassandradatacenter.yaml" => assert!(
                line.contains("0 checked, skipped CassandraDatacenter/dc1"),
                "{line}"
            ),
            "k8ssandracluster.yaml" => assert!(
                line.contains("0 checked, skipped K8ssandraCluster/cluster1"),
                "{line}"
            ),
            _ => assert!(line.contains("1 checked"), "{line}"),
        }
    }
}

#[test]
fn known_bad_manifests_fail_with_their_reason_and_field() {
    let bad = yaml_files(&repo().join("tests/fixtures/invalid"));
    assert!(bad.len() >= 5, "{bad:?}");
    for f in &bad {
        let text = std::fs::read_to_string(f).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: first line # expect: <Reason> <field>", f.display()));
        let (reason, field) = expect.split_once(' ').unwrap();
        let (ok, out) = validate(std::slice::from_ref(f));
        assert!(!ok, "{} passed validation:\n{out}", f.display());
        assert!(
            out.contains(&format!("error[{reason}] {field}: ")),
            "{}: expected error[{reason}] {field}:\n{out}",
            f.display()
        );
    }
    // All at once: one line per problem, the good example still ok, exit 1.
    let mut files = bad.clone();
    files.push(repo().join("examples/anticompaction-stage.yaml"));
    let (ok, out) = validate(&files);
    assert!(!ok);
    assert!(
        out.contains("anticompaction-stage.yaml: ok (1 checked)"),
        "{out}"
    );
}
