//! The JSON of every command is an interface (issue 37, item 7; docs/json.md): one object
//! with `"version": 1`, publish modes spelt as the CLI's `--publish` (`stage`, `replace`,
//! `on-restart`), `null` and never `""` for a value that is not known, and every field the
//! binary prints documented in docs/json.md — taken from real outputs of split (stage, dry
//! run, on-restart), cleanup (replace, dry run), inspect, verify (ok and failed),
//! apply-pending (dry run and run), recover (after an interrupted replace), stream send, and
//! a refusal.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::stream::StreamPair;
use common::*;
use serde_json::Value;

const TABLE: &str = "t-0123456789abcdef0123456789abcdef";

/// The binary under test: this build's, or `CLEAVE_BIN_UNDER_TEST` (to show that a test
/// fails on an older binary, e.g. main's `target/release/cleave`).
fn bin() -> PathBuf {
    std::env::var_os("CLEAVE_BIN_UNDER_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(cleave_bin)
}

/// `cleave ARGS`: stdout as JSON, whatever the exit status (refusals print JSON too).
fn run(args: &[&OsStr], env: Option<(&str, &str)>) -> (bool, Value) {
    let mut c = Command::new(bin());
    c.args(args);
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "cleave {args:?}: not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), v)
}

fn ok(args: &[&OsStr]) -> Value {
    let (ok, v) = run(args, None);
    assert!(ok, "cleave {args:?}: {v}");
    v
}

/// Every field path of `v`: `a.b`, `a[].b` (array elements share one path).
fn paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(p.clone());
                paths(x, &p, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                paths(x, &format!("{prefix}[]"), out);
            }
        }
        _ => {}
    }
}

/// Empty strings and publish spellings that are not the CLI's, with their paths.
fn offences(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.is_empty() => out.push(format!("{at}: \"\" (null for unknown)")),
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{at}.{k}");
                if k == "publish" {
                    match x.as_str() {
                        Some("stage" | "replace" | "on-restart") => {}
                        _ => out.push(format!("{p}: {x} is not stage|replace|on-restart")),
                    }
                }
                offences(x, &p, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| offences(x, &format!("{at}[]"), out)),
        _ => {}
    }
}

/// The outputs of every command, by the docs/json.md section that documents them.
fn outputs(d: &Path) -> BTreeMap<&'static str, Vec<Value>> {
    let data = d.join("data");
    let table = data.join("ks").join(TABLE);
    gen_table(&table, &[(1, "4MiB"), (2, "4MiB"), (3, "4MiB")]);
    let mut o: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
    let parent = |g: u32| table.join(format!("nb-{g}-big-Data.db"));

    // split: a dry run, a stage, a refusal.
    let out = d.join("stage");
    std::fs::create_dir_all(&out).unwrap();
    let split = |g: u32, out: &Path, extra: &[&str]| -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = vec![
            "split".into(),
            parent(g).into(),
            "--out".into(),
            out.into(),
            "--parts".into(),
            "3".into(),
            "--json".into(),
        ];
        a.extend(extra.iter().map(Into::into));
        a
    };
    let a = split(1, &out, &["--dry-run"]);
    o.entry("split").or_default().push(ok(&os(&a)));
    let a = split(1, &out, &[]);
    o.entry("split").or_default().push(ok(&os(&a)));
    let (refused, e) = run(&os(&split(1, &out, &[])), None);
    assert!(
        !refused,
        "a second stage into the same --out is refused: {e}"
    );
    o.entry("errors").or_default().push(e);

    // inspect and verify (one sstable that fails).
    let p1 = parent(1);
    o.entry("inspect").or_default().push(ok(&[
        "inspect".as_ref(),
        p1.as_os_str(),
        "--json".as_ref(),
        "--keys".as_ref(),
    ]));
    o.entry("inspect").or_default().push(ok(&[
        "inspect".as_ref(),
        p1.as_os_str(),
        "--json".as_ref(),
        "--quick".as_ref(),
    ]));
    o.entry("inspect-survey").or_default().push(ok(&[
        "inspect".as_ref(),
        data.as_os_str(),
        "--json".as_ref(),
    ]));
    let bad = d.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    let bad_data = copy_sstable(&parent(2), &bad);
    let mut bytes = std::fs::read(&bad_data).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&bad_data, bytes).unwrap();
    let (_, v) = run(
        &[
            "verify".as_ref(),
            p1.as_os_str(),
            bad_data.as_os_str(),
            "--json".as_ref(),
        ],
        None,
    );
    o.entry("verify").or_default().push(v);

    // stream send to a receiver.
    let pair = StreamPair::serve(&[]);
    let s = pair.send(&[&parent(3)], &[]);
    assert!(s.ok, "{}\n{}", s.stdout, s.stderr);
    o.entry("stream-send")
        .or_default()
        .push(serde_json::from_str(&s.stdout).unwrap());
    // split --publish on-restart, then apply-pending: a dry run and the run.
    o.entry("split-on-restart")
        .or_default()
        .push(pend_split(&table, "job-json"));
    for dry in [true, false] {
        let mut a: Vec<&OsStr> = vec![
            "apply-pending".as_ref(),
            "--data-dir".as_ref(),
            data.as_os_str(),
            "--json".as_ref(),
        ];
        if dry {
            a.push("--dry-run".as_ref());
        }
        o.entry("apply-pending").or_default().push(ok(&a));
    }

    // cleanup: a dry run and the run (replace).
    let owned = d.join("owned.yaml");
    std::fs::write(&owned, "- {start: \"-9223372036854775808\", end: \"0\"}\n").unwrap();
    for dry in [true, false] {
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
        o.entry("cleanup").or_default().push(ok(&a));
    }

    // recover: an interrupted replace (killed after COMMIT), then nothing to do.
    let t2 = d.join("data2").join("ks").join(TABLE);
    gen_table(&t2, &[(1, "2MiB")]);
    let p = t2.join("nb-1-big-Data.db");
    let a: Vec<&OsStr> = vec![
        "split".as_ref(),
        p.as_os_str(),
        "--out".as_ref(),
        t2.as_os_str(),
        "--parts".as_ref(),
        "2".as_ref(),
        "--publish".as_ref(),
        "replace".as_ref(),
    ];
    let crashed = Command::new(bin())
        .args(&a)
        .env("CLEAVE_CRASH_AT", "committed")
        .output()
        .unwrap();
    assert!(!crashed.status.success(), "the injected crash stops it");
    for _ in 0..2 {
        o.entry("recover").or_default().push(ok(&[
            "recover".as_ref(),
            t2.as_os_str(),
            "--json".as_ref(),
        ]));
    }

    o
}

fn os(a: &[std::ffi::OsString]) -> Vec<&OsStr> {
    a.iter().map(|s| s.as_os_str()).collect()
}

/// (section, field prefix, section that documents the rest, as prefix): a pend report's
/// `split` is a split report, a cleanup's children and plan a split's.
const SAME_AS: &[(&str, &str, &str, &str)] = &[
    ("split-on-restart", "split.", "split", ""),
    ("cleanup", "sstables[].children[].", "split", "children[]."),
    ("cleanup", "sstables[].plan[].", "split", "plan[]."),
];

fn section<'a>(doc: &'a str, name: &str) -> &'a str {
    let head = format!("\n## {name}\n");
    let start = doc
        .find(&head)
        .unwrap_or_else(|| panic!("docs/json.md has no section `## {name}`"))
        + head.len();
    let rest = &doc[start..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

#[test]
fn every_command_prints_versioned_json_documented_in_docs_json_md() {
    let d = tempfile::tempdir().unwrap();
    let outputs = outputs(d.path());
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json.md"))
        .unwrap();
    let mut problems = Vec::new();
    for (name, vs) in &outputs {
        let text = section(&doc, name);
        let mut fields = BTreeSet::new();
        for v in vs {
            if !v.is_object() || v["version"] != 1 {
                problems.push(format!("{name}: not an object with \"version\": 1: {v}"));
            }
            offences(v, name, &mut problems);
            paths(v, "", &mut fields);
        }
        for f in fields {
            let here = text.contains(&format!("`{f}`"));
            // Fields documented once, in the section of the report they are (the doc says so
            // in the section that embeds it).
            let elsewhere = SAME_AS.iter().any(|(sec, prefix, other, as_)| {
                sec == name
                    && f.strip_prefix(prefix).is_some_and(|rest| {
                        section(&doc, other).contains(&format!("`{as_}{rest}`"))
                    })
            });
            if !here && !elsewhere {
                problems.push(format!("{name}: `{f}` is printed, not in docs/json.md"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
