//! The docs agree with the binary (issue 37, item 8): what can be extracted from docs/*.md,
//! README.md and the chart's values.yaml is checked against the code, the generated CRDs
//! and the chart's templates, so the next change to one of them fails here instead of
//! misleading an operator.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &str) -> String {
    std::fs::read_to_string(repo().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Every markdown file the project ships: docs/*.md and README.md.
fn docs() -> Vec<(String, String)> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    v.sort();
    v.push(repo().join("README.md"));
    v.into_iter()
        .map(|p| {
            let name = p.strip_prefix(repo()).unwrap().display().to_string();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// Line breaks and runs of spaces as one space: prose wraps anywhere.
fn flat(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every `.rs` under src/, concatenated.
fn sources() -> String {
    fn walk(d: &Path, out: &mut String) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut s = String::new();
    walk(&repo().join("src"), &mut s);
    s
}

fn crds() -> Vec<Value> {
    cleave::operator::crd::crds().unwrap()
}

/// The paragraph (up to a blank line) around byte offset `at` of `text`.
fn paragraph(text: &str, at: usize) -> &str {
    let start = text[..at].rfind("\n\n").map_or(0, |i| i + 2);
    let end = text[at..].find("\n\n").map_or(text.len(), |i| at + i);
    &text[start..end]
}

#[test]
fn every_log_line_the_docs_grep_for_is_one_the_binary_prints() {
    // `kubectl logs … | grep 'text'`: the text must be in a string the code logs.
    let re = Regex::new(r#"logs .*\| *grep (?:-\w+ )*(?:'([^']+)'|"([^"]+)")"#).unwrap();
    let src = sources();
    let mut seen = 0;
    for (name, text) in docs() {
        for c in re.captures_iter(&text) {
            let quoted = c.get(1).or(c.get(2)).unwrap().as_str();
            seen += 1;
            assert!(
                src.contains(quoted),
                "{name} greps the logs for {quoted:?}, which no source file contains"
            );
        }
    }
    assert!(
        seen >= 1,
        "no `logs | grep` in the docs: the extraction broke"
    );
}

#[test]
fn the_uninstall_commands_name_every_kind() {
    let install = read("docs/install.md");
    let start = install
        .find("## Uninstall")
        .expect("install.md has an Uninstall section");
    let section = &install[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut short: Vec<String> = crds()
        .iter()
        .map(|c| {
            c["spec"]["names"]["shortNames"][0]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    short.sort();
    let re = Regex::new(r"kubectl -n \S+ (?:delete|get) ([a-z,]+) ").unwrap();
    let mut commands = 0;
    for c in re.captures_iter(section) {
        commands += 1;
        let mut listed: Vec<String> = c[1].split(',').map(str::to_string).collect();
        listed.sort();
        assert_eq!(
            listed, short,
            "docs/install.md's uninstall command `{}` must name every kind (each carries the finalizer)",
            &c[0]
        );
    }
    assert!(commands >= 2, "{section}");
}

#[test]
fn one_list_of_condition_types() {
    let all: Vec<&str> = cleave::operator::status::ConditionType::ALL
        .iter()
        .map(|c| c.as_str())
        .collect();
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .map(|w| w.trim().trim_end_matches(['.', ')']).to_string())
            .collect()
    };
    // docs: "keyed by `type`: A, B, …" up to the closing parenthesis or the full stop.
    let re = Regex::new(r"keyed by `type`: ([A-Za-z, ]+)").unwrap();
    for doc in ["docs/operator.md", "docs/crd-reference.md"] {
        let text = flat(&read(doc));
        let c = re
            .captures(&text)
            .unwrap_or_else(|| panic!("{doc} lists the condition types"));
        assert_eq!(list(&c[1]), all, "{doc}'s condition types");
    }
    // The CRD's own description of conditions[].type.
    for crd in crds() {
        let d = crd.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/conditions/items/properties/type/description")
            .and_then(Value::as_str)
            .unwrap();
        let d = flat(d);
        let l = d
            .strip_prefix("Condition type: ")
            .unwrap_or_else(|| panic!("{d}"));
        assert_eq!(list(l), all, "the CRD's description of a condition's type");
    }
}

#[test]
fn docs_listing_printer_columns_list_the_crds() {
    // Every paragraph that lists printer columns either names every column the generated
    // CRDs have, or points to docs/crd-reference.md, which must.
    let mut columns: Vec<String> = Vec::new();
    for crd in crds() {
        for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
        {
            let n = c["name"].as_str().unwrap().to_string();
            if !columns.contains(&n) {
                columns.push(n);
            }
        }
    }
    let mut reference = String::new();
    for (name, text) in docs() {
        for (at, _) in text.match_indices("Printer columns") {
            let p = paragraph(&text, at);
            if name == "docs/crd-reference.md" {
                reference.push_str(p);
                continue;
            }
            if p.contains("docs/crd-reference.md") {
                continue;
            }
            let missing: Vec<&String> =
                columns.iter().filter(|c| !p.contains(c.as_str())).collect();
            assert!(
                missing.is_empty(),
                "{name} lists printer columns without {missing:?}: {p}"
            );
        }
    }
    let missing: Vec<&String> = columns
        .iter()
        .filter(|c| !reference.contains(c.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/crd-reference.md's printer columns miss {missing:?}"
    );
}

#[test]
fn destination_service_is_resolved_as_the_docs_say() {
    use cleave::operator::crd::Destination;
    // The template both docs give, and the code's answer for it.
    let template = "<nodeName>.<service>.<namespace>.svc:<port>";
    let re = Regex::new(r"`(<[^`]*\.svc[^`]*)`").unwrap();
    for doc in ["docs/operator.md", "docs/crd-reference.md"] {
        let text = read(doc);
        let found: Vec<&str> = re
            .captures_iter(&text)
            .map(|c| c.get(1).unwrap().as_str())
            .collect();
        assert!(
            !found.is_empty(),
            "{doc} says how spec.destination.service resolves"
        );
        for f in found {
            assert_eq!(f, template, "{doc}: spec.destination.service resolution");
        }
    }
    let d: Destination = serde_json::from_value(serde_json::json!({
        "nodeName": "cluster1-dc1-default-sts-3", "service": "cluster1-dc1-all-pods-service",
    }))
    .unwrap();
    let got = cleave::operator::stream::resolve_destination(&d, "cass", 7070).unwrap();
    let want = template
        .replace("<nodeName>", "cluster1-dc1-default-sts-3")
        .replace("<service>", "cluster1-dc1-all-pods-service")
        .replace("<namespace>", "cass")
        .replace("<port>", "7070");
    assert_eq!(got, want);
}

#[test]
fn no_doc_says_the_operator_refuses_a_publish_mode_the_crd_has() {
    let crd = crds();
    let modes: Vec<String> = crd[0]
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/publish/enum")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(modes.iter().any(|m| m == "OnRestart"), "{modes:?}");
    for (name, text) in docs() {
        let text = flat(&text);
        for m in &modes {
            for claim in [
                format!("does not offer `publish: {m}`"),
                format!("refuses `publish: {m}`"),
                format!("`publish: {m}` yet"),
            ] {
                assert!(
                    !text.contains(&claim),
                    "{name} says the operator lacks `publish: {m}` ({claim:?}); the CRD has it"
                );
            }
        }
    }
}

#[test]
fn every_cleave_manifest_in_the_docs_can_run() {
    // Each YAML block of a cleave.dev kind passes `cleave validate`'s checks; and a
    // CleanupJob that reads the ring (a running Cassandra) with `publish: Replace` has a
    // window to stop Cassandra in (`maintenance: ManagementApi`): without one, Replace needs
    // Cassandra stopped before the job and the ring cannot be read.
    let block = Regex::new(r"(?s)```yaml\n(.*?)```").unwrap();
    let mut checked = 0;
    for (name, text) in docs() {
        for b in block.captures_iter(&text) {
            let y = &b[1];
            if !y.contains("apiVersion: cleave.dev/") {
                continue;
            }
            let c = cleave::operator::validate_cli::check_manifest(y);
            assert!(c.problems.is_empty(), "{name}:\n{y}\n{:?}", c.problems);
            for doc in serde_saphyr::from_multiple::<Value>(y).unwrap() {
                checked += 1;
                let s = &doc["spec"];
                if doc["kind"] == "CleanupJob"
                    && s["ownership"] == "ManagementApi"
                    && s["publish"] == "Replace"
                {
                    assert_eq!(
                        s["maintenance"], "ManagementApi",
                        "{name}: this CleanupJob cannot succeed:\n{y}"
                    );
                }
            }
        }
    }
    assert!(checked >= 3, "{checked}");
}

#[test]
fn values_yaml_comments_agree_with_the_chart() {
    let values = read("charts/cleave/values.yaml");
    // The sidecars' Role and the cluster part's.
    let rbac =
        read("charts/cleave/templates/rbac.yaml") + &read("charts/cleave/templates/cluster.yaml");
    // The Role's rules: the resources lines.
    let grants_secrets = rbac
        .lines()
        .filter(|l| l.trim_start().starts_with("resources:"))
        .any(|l| l.contains("secrets"));
    if !grants_secrets {
        let v = flat(&values);
        assert!(
            !Regex::new(r"(?i)role grants [^.]*secret")
                .unwrap()
                .is_match(&v),
            "values.yaml says the Role grants access to a Secret; rbac.yaml grants none"
        );
    }
    // The CassandraDatacenter field values.yaml names is the one the example uses.
    let re = Regex::new(r"CassandraDatacenter's `(\w+)`").unwrap();
    let flat_values = flat(&values);
    let field = re
        .captures(&flat_values)
        .expect("values.yaml says which CassandraDatacenter field takes the ServiceAccount");
    let dc = read("examples/cassandradatacenter.yaml");
    assert!(
        dc.lines().any(|l| l.trim_start().starts_with(&format!("{}:", &field[1]))),
        "values.yaml names the CassandraDatacenter's `{}`, examples/cassandradatacenter.yaml does not use it",
        &field[1]
    );
    // The Lease the cluster part's comment names is the one the chart passes and grants.
    let lease = leader_lease();
    let cluster = &values[values
        .find("\ncluster:\n")
        .expect("values.yaml has cluster:")..];
    let before = &values[..values.find("\ncluster:\n").unwrap()];
    let comments = before[before.rfind("\n\n").unwrap()..].to_string() + cluster;
    let names: Vec<&str> = Regex::new(r"cleave-[a-z-]*leader")
        .unwrap()
        .find_iter(&comments)
        .map(|m| m.as_str())
        .collect();
    assert!(
        !names.is_empty(),
        "values.yaml's cluster comment names no Lease"
    );
    for n in names {
        assert_eq!(
            n, lease,
            "values.yaml names the Lease {n}; the chart's is {lease}"
        );
    }
}

/// The name `cleave.leaderLease` in the chart's _helpers.tpl renders.
fn leader_lease() -> String {
    let helpers = read("charts/cleave/templates/_helpers.tpl");
    let c = Regex::new(r#"\{\{- define "cleave.leaderLease" -\}\}([a-z0-9-]+)\{\{- end \}\}"#)
        .unwrap()
        .captures(&helpers)
        .expect("_helpers.tpl defines cleave.leaderLease as one name");
    c[1].to_string()
}

/// (resource, verbs) of every rule in a chart template, verbs of one resource merged.
fn template_rules(
    text: &str,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let quoted = Regex::new(r#""([^"]*)""#).unwrap();
    let list =
        |l: &str| -> Vec<String> { quoted.captures_iter(l).map(|c| c[1].to_string()).collect() };
    let mut out: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    let mut resources = Vec::new();
    for l in text.lines().map(str::trim) {
        if let Some(r) = l.strip_prefix("resources:") {
            resources = list(r);
        } else if let Some(v) = l.strip_prefix("verbs:") {
            for r in &resources {
                out.entry(r.clone()).or_default().extend(list(v));
            }
        }
    }
    out
}

#[test]
fn the_cluster_parts_grants_in_install_md_are_the_charts() {
    // docs/install.md's table under "The cluster part": a row per resource, its verbs the
    // union of the chart's rules for it (the Lease's two rules in one row), no row the chart
    // does not grant.
    let chart = template_rules(&read("charts/cleave/templates/cluster.yaml"));
    assert!(chart.len() >= 9, "{chart:?}");
    let install = read("docs/install.md");
    let start = install
        .find("\n## The cluster part")
        .expect("docs/install.md has a section on the cluster part");
    let section = &install[start + 1..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    const VERBS: [&str; 7] = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let resource_re = Regex::new(r"`([a-z./]+)`$").unwrap();
    let word = Regex::new(r"[a-z]+").unwrap();
    let mut documented = std::collections::BTreeMap::new();
    for row in section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| API"))
    {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let resource = resource_re
            .captures(cells[1])
            .unwrap_or_else(|| panic!("row without a `resource` last in its first cell: {row}"))[1]
            .to_string();
        let verbs: std::collections::BTreeSet<String> = word
            .find_iter(cells[2])
            .map(|m| m.as_str().to_string())
            .filter(|w| VERBS.contains(&w.as_str()))
            .collect();
        documented.insert(resource, verbs);
    }
    assert_eq!(
        documented, chart,
        "docs/install.md's grants of the cluster part differ from charts/cleave/templates/cluster.yaml"
    );
    // The Lease row names the one Lease, and says so of get and update.
    let lease = leader_lease();
    assert!(
        section
            .lines()
            .any(|l| l.contains("`leases`") && l.contains(&format!("`{lease}` only"))),
        "docs/install.md: the Lease row does not say get/update are of {lease} only"
    );
}

#[test]
fn the_readme_says_who_it_is_for_first_and_names_every_kind() {
    let readme = read("README.md");
    let body = readme.split_once("\n\n").unwrap().1;
    let first = flat(&body[..body.find("\n\n").unwrap()]);
    assert!(
        first.contains("Kubernetes") && first.contains("command line"),
        "README's first paragraph says who cleave is for: {first}"
    );
    for crd in crds() {
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
        assert!(
            first.contains(kind),
            "README's first paragraph omits {kind}: {first}"
        );
    }
    for syscall in ["FICLONERANGE", "reflink", "copy_file_range"] {
        assert!(
            !first.contains(syscall),
            "README's first paragraph leads with {syscall} before saying who it is for"
        );
    }
}
