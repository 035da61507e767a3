//! Issue 17, deliverables 4 and 5, on a REAL kube-apiserver 1.20 + etcd
//! (`scripts/k8s-testenv.sh`, `tests/common/k8s.rs`), with the CRDs of `crds/`:
//!
//! - the malformed specs of the issue (`ranges: []`, token `"abc"`, both `repairedAt` and
//!   `pendingRepair`, `pendingRepair: yesterday`, `maxBytesPerSecond: 0`, `parallelism: 0`)
//!   and a RangeStream with both `endpoint` and `service` are refused by `kubectl apply`
//!   itself (client-side and server-side apply): nonzero exit, nothing stored, and the
//!   apiserver's message names the field;
//! - the token notation follows `spec.partitioner`: for each partitioner, the apiserver
//!   admits a token exactly when `Partitioner::parse_token` takes it (apart from the
//!   numeric bounds a pattern only approximates by a digit count);
//! - every manifest in `examples/` is admitted (server-side dry run);
//! - a misspelt field (`dryrun: true`, `destination.nodname`) is stored, not pruned, and
//!   what cleave reads back names it, with the field it resembles, so the controller can
//!   fail the job with InvalidSpec (the end-to-end run is the controller's test).
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::Path;
use std::process::Output;

use cleave::operator::crd::{AnticompactionJob, Partitioner, RangeStream};
use cleave::operator::decide;
use common::k8s::*;

const UUID: &str = "6a3f4c2e-1d2b-11ef-9c4e-0242ac120002";

fn job_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{cleave.dev/node: n1}}\nspec:\n  nodeName: n1\n  keyspace: ks\n{spec}"
    )
}

fn stream_yaml(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: RangeStream\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{cleave.dev/node: n1}}\nspec:\n  sourceNode: n1\n  keyspace: ks\n  ranges: [{{start: \"0\", end: \"100\"}}]\n{spec}"
    )
}

/// `kubectl apply [extra] -f -` of `yaml`, whatever its exit status.
fn apply(c: &Cluster, extra: &[&str], yaml: &str) -> Output {
    let mut args = vec!["apply"];
    args.extend_from_slice(extra);
    args.extend(["-f", "-"]);
    run_piped(c.kubectl_as(&c.kubeconfig, &args), Some(yaml))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn cluster_or_skip(test: &str) -> Option<Cluster> {
    if !control_plane_or_skip(test) {
        return None;
    }
    let c = Cluster::start();
    c.apply_crds();
    Some(c)
}

#[test]
fn malformed_specs_are_refused_by_kubectl_apply_naming_the_field() {
    let Some(c) = cluster_or_skip("malformed_specs_are_refused_by_kubectl_apply_naming_the_field")
    else {
        return;
    };
    // The structural schema was accepted as such (a 1.20 apiserver would refuse a
    // non-structural v1 CRD at creation, and mark a legacy one NonStructuralSchema).
    for crd in ["anticompactionjobs.cleave.dev", "rangestreams.cleave.dev"] {
        let v: serde_json::Value =
            serde_json::from_str(&c.ok(&["get", "crd", crd, "-o", "json"])).unwrap();
        let conds = v["status"]["conditions"].as_array().unwrap();
        assert!(
            !conds.iter().any(|x| x["type"] == "NonStructuralSchema"),
            "{crd}: {conds:?}"
        );
    }

    let ranges = "  ranges: [{start: \"0\", end: \"100\"}]\n";
    let marker = "  repairedAt: 1700000000000\n";
    // (what, manifest, fields of which the apiserver's message must name one, and what it
    // says about it)
    let cases: Vec<(&str, String, Vec<&str>, &str)> = vec![
        (
            "a pre-split with the ranges of a session",
            job_yaml(
                "bad-presplit-ranges",
                &format!("  mode: PreSplit\n  publish: OnRestart\n{ranges}"),
            ),
            vec!["spec.ranges"],
            "at most 0 items",
        ),
        (
            "a pre-split published by Stage",
            job_yaml("bad-presplit-stage", "  mode: PreSplit\n  publish: Stage\n"),
            vec!["spec.publish"],
            "Unsupported value",
        ),
        (
            "ranges: []",
            job_yaml("bad-ranges", &format!("  ranges: []\n{marker}")),
            vec!["spec.ranges"],
            "at least 1 items",
        ),
        (
            "token \"abc\"",
            job_yaml(
                "bad-token",
                &format!("  ranges: [{{start: \"abc\", end: \"100\"}}]\n{marker}"),
            ),
            vec!["spec.ranges.start"],
            "should match",
        ),
        (
            "both repairedAt and pendingRepair",
            job_yaml(
                "bad-both-markers",
                &format!("{ranges}{marker}  pendingRepair: {UUID}\n"),
            ),
            vec!["spec.repairedAt", "spec.pendingRepair"],
            "must not validate the schema",
        ),
        (
            "pendingRepair: yesterday",
            job_yaml("bad-uuid", &format!("{ranges}  pendingRepair: yesterday\n")),
            vec!["spec.pendingRepair"],
            "should match",
        ),
        (
            "maxBytesPerSecond: 0",
            job_yaml("bad-rate", &format!("{ranges}{marker}  maxBytesPerSecond: 0\n")),
            vec!["spec.maxBytesPerSecond"],
            "greater than or equal to 1",
        ),
        (
            "parallelism: 0",
            job_yaml("bad-parallelism", &format!("{ranges}{marker}  parallelism: 0\n")),
            vec!["spec.parallelism"],
            "greater than or equal to 1",
        ),
        (
            "neither repairedAt nor pendingRepair",
            job_yaml("bad-no-marker", ranges),
            vec!["spec.repairedAt", "spec.pendingRepair"],
            "Required value",
        ),
        (
            "transientRanges with repairedAt",
            job_yaml(
                "bad-transient",
                &format!("{ranges}{marker}  transientRanges: [{{start: \"100\", end: \"200\"}}]\n"),
            ),
            vec!["spec.transientRanges"],
            "at most 0 items",
        ),
        (
            "a hex token under the default Murmur3",
            job_yaml(
                "bad-hex-murmur3",
                &format!("  ranges: [{{start: \"0a\", end: \"100\"}}]\n{marker}"),
            ),
            vec!["spec.ranges.start"],
            "should match",
        ),
        (
            "a negative token under ByteOrdered",
            job_yaml(
                "bad-negative-bop",
                &format!("  partitioner: ByteOrdered\n  ranges: [{{start: \"-5\", end: \"00\"}}]\n{marker}"),
            ),
            vec!["spec.ranges.start"],
            "should match",
        ),
        (
            "an unknown partitioner",
            job_yaml("bad-partitioner", &format!("  partitioner: Murmur3Partitioner\n{ranges}{marker}")),
            vec!["spec.partitioner"],
            "Unsupported value",
        ),
        (
            "a stream with endpoint and service",
            stream_yaml(
                "bad-both-destinations",
                "  destination: {nodeName: n2, endpoint: \"10.0.0.2:7070\", service: recv}\n",
            ),
            vec!["spec.destination.endpoint", "spec.destination.service"],
            "must not validate the schema",
        ),
        (
            "a stream with neither endpoint nor service",
            stream_yaml("bad-no-destination", "  destination: {nodeName: n2}\n"),
            vec!["spec.destination.endpoint", "spec.destination.service"],
            "Required value",
        ),
        (
            "a stream with maxBytesPerSecond: 0",
            stream_yaml(
                "bad-stream-rate",
                "  destination: {nodeName: n2, service: recv}\n  maxBytesPerSecond: 0\n",
            ),
            vec!["spec.maxBytesPerSecond"],
            "greater than or equal to 1",
        ),
    ];
    for (what, yaml, fields, says) in &cases {
        for mode in [&[][..], &["--server-side"][..]] {
            let out = apply(&c, mode, yaml);
            let msg = text(&out);
            assert!(
                !out.status.success(),
                "kubectl apply {mode:?} admitted {what}:\n{msg}\n--- manifest\n{yaml}"
            );
            let line = msg.lines().find(|l| {
                fields
                    .iter()
                    .any(|f| l.contains(&format!("{f}:")) || l.contains(&format!("\"{f}\"")))
                    && l.contains(says)
            });
            assert!(
                line.is_some(),
                "{what} ({mode:?}): no line naming one of {fields:?} with {says:?}:\n{msg}"
            );
            eprintln!("{what}: {}", line.unwrap().trim());
        }
        let kind = if yaml.contains("kind: RangeStream") {
            "rs.cleave.dev"
        } else {
            "acj"
        };
        let name = yaml
            .lines()
            .find_map(|l| l.strip_prefix("  name: "))
            .unwrap();
        assert!(c.get(kind, name).is_none(), "{what}: stored anyway");
    }

    // The same manifests with the fault removed are admitted: the refusals above are the
    // field's, not the base manifest's; `null` counts as absent (spec fields are not
    // nullable, so the apiserver prunes the null before the exactly-one rule).
    for (what, yaml) in [
        ("a valid job", job_yaml("ok-job", &format!("{ranges}{marker}"))),
        (
            "repairedAt: null with pendingRepair",
            job_yaml(
                "ok-null-marker",
                &format!("{ranges}  repairedAt: null\n  pendingRepair: {UUID}\n  transientRanges: [{{start: \"100\", end: \"200\"}}]\n"),
            ),
        ),
        (
            "a stream by service",
            stream_yaml("ok-stream", "  destination: {nodeName: n2, service: recv}\n"),
        ),
    ] {
        let out = apply(&c, &[], &yaml);
        assert!(out.status.success(), "{what} refused:\n{}", text(&out));
    }
    let stored = c.get("acj", "ok-null-marker").unwrap();
    assert!(stored["spec"].get("repairedAt").is_none(), "{stored}");

    // Reason / Started / Completed beside Phase and Progress.
    let header = c.ok(&["get", "acj", "-n", "default"]);
    let header = header.lines().next().unwrap();
    for col in [
        "NODE",
        "PHASE",
        "PROGRESS",
        "REASON",
        "STARTED",
        "COMPLETED",
        "AGE",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let header = c.ok(&["get", "rangestreams.cleave.dev", "-n", "default"]);
    assert!(
        header.lines().next().unwrap().contains("REASON"),
        "{header}"
    );
}

/// The cells of `kubectl get` output by column header: each value is what stands between
/// its header's start and the next header's.
fn table(out: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut lines = out.lines();
    let header = lines.next().unwrap_or_default();
    let mut starts: Vec<(usize, String)> = Vec::new();
    let mut prev = ' ';
    for (i, ch) in header.char_indices() {
        if ch != ' ' && prev == ' ' {
            let name: String = header[i..].chars().take_while(|c| *c != ' ').collect();
            starts.push((i, name));
        }
        prev = ch;
    }
    lines
        .map(|l| {
            let mut row = std::collections::BTreeMap::new();
            for (k, (start, name)) in starts.iter().enumerate() {
                let end = starts.get(k + 1).map_or(l.len(), |n| n.0.min(l.len()));
                let cell = l.get(*start..end).unwrap_or("").trim().to_string();
                row.insert(name.clone(), cell);
            }
            row
        })
        .collect()
}

/// `kubectl get` says what and where for every kind, as a CassandraTask user expects at a
/// glance: the node, the datacenter (cass-operator's `cassandra.datastax.com/datacenter`
/// label), the keyspace and the kind of work (how an AnticompactionJob or CleanupJob
/// publishes; a RangeStream's destination node and import), evaluated by a real apiserver
/// from the CRDs in crds/. Issue 37 item 9.
#[test]
fn kubectl_get_columns_say_what_and_where_for_every_kind() {
    let Some(c) = cluster_or_skip("kubectl_get_columns_say_what_and_where_for_every_kind") else {
        return;
    };
    let labels = "  labels: {cleave.dev/node: n1, cassandra.datastax.com/datacenter: dc1}\n";
    let meta = |kind: &str, name: &str| {
        format!("apiVersion: cleave.dev/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: default\n{labels}")
    };
    let yaml = format!(
        "{}spec:\n  nodeName: n1\n  keyspace: ks\n  ranges: [{{start: \"0\", end: \"100\"}}]\n  repairedAt: 1700000000000\n  publish: OnRestart\n---\n\
         {}spec:\n  nodeName: n1\n  keyspace: ks2\n  ownedRanges: [{{start: \"0\", end: \"100\"}}]\n  publish: Replace\n---\n\
         {}spec:\n  sourceNode: n1\n  keyspace: ks3\n  ranges: [{{start: \"0\", end: \"100\"}}]\n  destination: {{nodeName: n2, endpoint: \"n2:7100\"}}\n  import: Staging\n",
        meta("AnticompactionJob", "cols-acj"),
        meta("CleanupJob", "cols-clj"),
        meta("RangeStream", "cols-rs"),
    );
    let out = apply(&c, &[], &yaml);
    assert!(out.status.success(), "{}", text(&out));

    let common = [
        "NAME",
        "NODE",
        "DATACENTER",
        "KEYSPACE",
        "PHASE",
        "PROGRESS",
        "REASON",
        "STARTED",
        "COMPLETED",
        "AGE",
    ];
    for (kind, want) in [
        (
            "anticompactionjobs.cleave.dev",
            vec![
                ("NAME", "cols-acj"),
                ("NODE", "n1"),
                ("DATACENTER", "dc1"),
                ("KEYSPACE", "ks"),
                ("PUBLISH", "OnRestart"),
            ],
        ),
        (
            "cleanupjobs.cleave.dev",
            vec![
                ("NAME", "cols-clj"),
                ("NODE", "n1"),
                ("DATACENTER", "dc1"),
                ("KEYSPACE", "ks2"),
                ("PUBLISH", "Replace"),
            ],
        ),
        (
            "rangestreams.cleave.dev",
            vec![
                ("NAME", "cols-rs"),
                ("NODE", "n1"),
                ("TO", "n2"),
                ("DATACENTER", "dc1"),
                ("KEYSPACE", "ks3"),
                ("IMPORT", "Staging"),
            ],
        ),
    ] {
        let out = c.ok(&["get", kind, "-n", "default"]);
        let rows = table(&out);
        assert_eq!(rows.len(), 1, "{kind}:\n{out}");
        for col in common {
            assert!(rows[0].contains_key(col), "{kind}: no {col} column:\n{out}");
        }
        for (col, val) in want {
            assert_eq!(
                rows[0].get(col).map(String::as_str),
                Some(val),
                "{kind}: column {col}:\n{out}"
            );
        }
    }
}

#[test]
fn tokens_are_admitted_in_the_notation_of_spec_partitioner() {
    let Some(c) = cluster_or_skip("tokens_are_admitted_in_the_notation_of_spec_partitioner") else {
        return;
    };
    let tokens = [
        "0",
        "-1",
        "-42",
        "-9223372036854775808",
        "9223372036854775807",
        "9999999999999999999",
        "170141183460469231731687303715884105728",
        "999999999999999999999999999999999999999",
        "0a0B",
        "ff",
        "",
        "abc",
        "-",
        "1e3",
        "+5",
        " 5",
        "yesterday",
    ];
    // Where a pattern's digit count admits a number outside the partitioner's range: the
    // token then fails `validate_ranges` in the controller (InvalidRange) instead.
    let approximations = [
        (Partitioner::Murmur3, "9999999999999999999"),
        (
            Partitioner::Random,
            "999999999999999999999999999999999999999",
        ),
    ];
    let mut n = 0;
    for (p, name, end) in [
        (None, "default", "0"),
        (Some(Partitioner::Murmur3), "Murmur3", "0"),
        (Some(Partitioner::Random), "Random", "0"),
        (Some(Partitioner::ByteOrdered), "ByteOrdered", "00"),
    ] {
        let family = p.unwrap_or(Partitioner::Murmur3);
        for t in tokens {
            let line = p.map_or(String::new(), |_| format!("  partitioner: {name}\n"));
            let yaml = job_yaml(
                &format!("t-{}", name.to_lowercase()),
                &format!("{line}  ranges: [{{start: {t:?}, end: \"{end}\"}}]\n  repairedAt: 1\n"),
            );
            let out = apply(&c, &["--dry-run=server"], &yaml);
            let admitted = out.status.success();
            let parses = family.parse_token(t).is_ok() && !t.starts_with([' ', '+']);
            n += 1;
            if t.is_empty() && parses {
                // ByteOrdered's minimum token. A 1.20 apiserver turns an empty string in a
                // custom resource into null before validating it, whatever the schema says
                // (also with the pre-issue-17 CRD): refused as "not a string".
                assert!(
                    !admitted && text(&out).contains("must be of type string: \"null\""),
                    "{name} {t:?}: {}",
                    text(&out)
                );
                continue;
            }
            if approximations.contains(&(family, t)) {
                assert!(admitted && !parses, "{name} {t:?}: {}", text(&out));
                continue;
            }
            assert_eq!(
                admitted,
                parses,
                "{name} {t:?}: the apiserver {} it, parse_token {} it:\n{}",
                if admitted { "admits" } else { "refuses" },
                if parses { "takes" } else { "refuses" },
                text(&out)
            );
        }
    }
    eprintln!("{n} (partitioner, token) pairs: the apiserver agrees with parse_token");
}

#[test]
fn examples_are_admitted_and_misspelt_fields_are_kept_for_the_controller() {
    let Some(c) =
        cluster_or_skip("examples_are_admitted_and_misspelt_fields_are_kept_for_the_controller")
    else {
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut examples: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        // cleave's own resources; the CassandraDatacenter and K8ssandraCluster examples need
        // the operators' CRDs and are dry-run against them in tests/install.rs.
        .filter(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .any(|l| l.starts_with("apiVersion: cleave.dev/"))
        })
        .collect();
    examples.sort();
    assert!(examples.len() >= 5, "{examples:?}");
    for e in &examples {
        let objs = c.dry_run(
            "default",
            &std::fs::read_to_string(e).unwrap(),
            &e.display().to_string(),
        );
        assert!(!objs.is_empty(), "{}", e.display());
    }

    // `dryrun: true` (for dryRun): stored as written, with dryRun absent.
    c.apply(&job_yaml(
        "typo",
        "  ranges: [{start: \"0\", end: \"100\"}]\n  repairedAt: 1700000000000\n  dryrun: true\n",
    ));
    let stored = c.get("acj", "typo").unwrap();
    assert_eq!(
        stored["spec"]["dryrun"],
        serde_json::json!(true),
        "{stored}"
    );
    assert!(stored["spec"].get("dryRun").is_none(), "{stored}");
    let job: AnticompactionJob = serde_json::from_value(stored).unwrap();
    assert!(!job.spec.dry_run);
    assert_eq!(job.spec.unknown_fields(), ["spec.dryrun"]);
    let e = decide::check_schema_rules_job(&job.spec).unwrap_err();
    assert!(
        e.contains("spec.dryrun: is not a field (did you mean spec.dryRun?)"),
        "{e}"
    );

    // A nested typo is kept too (preserve-unknown-fields on spec.destination).
    c.apply(&stream_yaml(
        "typo",
        "  destination: {nodeName: n2, service: recv, nodname: n3}\n  improt: Staging\n",
    ));
    let stored = c.get("rangestreams.cleave.dev", "typo").unwrap();
    assert_eq!(stored["spec"]["destination"]["nodname"], "n3", "{stored}");
    let stream: RangeStream = serde_json::from_value(stored).unwrap();
    assert_eq!(
        stream.spec.unknown_fields(),
        ["spec.improt", "spec.destination.nodname"]
    );
    let e = decide::check_schema_rules_stream(&stream.spec).unwrap_err();
    assert!(
        e.contains("(did you mean spec.import?)")
            && e.contains(
                "spec.destination.nodname: is not a field (did you mean spec.destination.nodeName?)"
            ),
        "{e}"
    );
}
