//! `cleave validate`: the controller's own checks, offline. Every shipped example passes
//! (the operators' manifests are listed as skipped, not judged); each known-bad manifest in
//! tests/fixtures/invalid/ fails with the reason and field its first line expects.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{cleave_bin, run_local_once};

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

// ---- Issue 37 item 5: `validate` is the controller and the CRD, all of it. ----

use serde_json::{json, Value};

const UUID: &str = "6a3f4c2e-1d2b-11ef-9c4e-0242ac120002";

/// Valid specs of each kind, every optional field set where the kind allows it; the cases
/// below mutate the first base in which the field they change exists.
fn bases(kind: &str) -> Vec<Value> {
    match kind {
        "AnticompactionJob" => {
            let common = json!({
                "nodeName": "n1", "dataDirectory": "/var/lib/cassandra/data", "keyspace": "ks",
                "tables": ["t1"], "sstables": ["nb-1-big-Data.db"],
                "ranges": [{"start": "0", "end": "100"}], "partitioner": "Murmur3",
                "layout": "Auto", "digest": "Off", "publish": "Replace",
                "maintenance": "ManagementApi", "maxDowntimeSeconds": 300, "dryRun": false,
                "maxBytesPerSecond": 1000, "parallelism": 1, "ttlSecondsAfterFinished": 60,
                "targetCassandra": "4.1",
            });
            let mut repaired = common.clone();
            repaired["repairedAt"] = json!(1_767_225_600_000_i64);
            let mut pending = common.clone();
            pending["pendingRepair"] = json!(UUID);
            pending["transientRanges"] = json!([{"start": "200", "end": "300"}]);
            let mut pre_split = common;
            for f in ["ranges", "maintenance", "maxDowntimeSeconds"] {
                pre_split.as_object_mut().unwrap().remove(f);
            }
            pre_split["mode"] = json!("PreSplit");
            pre_split["publish"] = json!("OnRestart");
            vec![repaired, pending, pre_split]
        }
        "RangeStream" => {
            let common = json!({
                "sourceNode": "n1", "keyspace": "ks", "tables": ["t1"],
                "ranges": [{"start": "0", "end": "100"}], "partitioner": "Murmur3",
                "layout": "Auto", "maxBytesPerSecond": 1000, "import": "Staging",
                "targetCassandra": "4.1",
            });
            let mut by_endpoint = common.clone();
            by_endpoint["destination"] = json!({"nodeName": "n2", "endpoint": "10.0.0.2:7070"});
            let mut by_service = common;
            by_service["destination"] =
                json!({"nodeName": "n2", "service": "cluster1-dc1-all-pods-service"});
            vec![by_endpoint, by_service]
        }
        "CleanupJob" => {
            let common = json!({
                "nodeName": "n1", "dataDirectory": "/var/lib/cassandra/data", "keyspace": "ks",
                "tables": ["t1"], "partitioner": "Murmur3", "publish": "Replace",
                "maintenance": "ManagementApi", "maxDowntimeSeconds": 300, "dryRun": false,
                "parallelism": 1, "maxBytesPerSecond": 1000, "ttlSecondsAfterFinished": 60,
                "targetCassandra": "4.1",
            });
            let mut ranges = common.clone();
            ranges["ownership"] = json!("Ranges");
            ranges["ownedRanges"] = json!([{"start": "0", "end": "100"}]);
            let mut ring = common;
            ring["ownership"] = json!("ManagementApi");
            vec![ranges, ring]
        }
        "DatacenterCleanup" => {
            let common = json!({
                "keyspaces": ["ks"], "tables": ["t1"], "maxConcurrentNodes": 2,
                "failurePolicy": "Continue", "dataDirectory": "/var/lib/cassandra/data",
                "parallelism": 1, "maxBytesPerSecond": 1000, "targetCassandra": "4.1",
            });
            let mut by_dc = common.clone();
            by_dc["datacenter"] = json!("dc1");
            by_dc["restart"] = json!("CassandraTask");
            let mut by_pods = common;
            by_pods["podSelector"] = json!({"app": "cassandra"});
            by_pods["restart"] = json!("None");
            vec![by_dc, by_pods]
        }
        _ => unreachable!("{kind}"),
    }
}

fn manifest(kind: &str, name: &str, spec: &Value) -> String {
    // JSON is YAML: one document, as `kubectl apply` would take it.
    json!({
        "apiVersion": "cleave.dev/v1alpha1", "kind": kind,
        "metadata": {"name": name, "labels": {"cleave.dev/node": "n1"}},
        "spec": spec,
    })
    .to_string()
}

/// One step of a field path: an object key or an array index.
#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

fn dotted(segs: &[Seg]) -> String {
    let mut s = String::from("spec");
    for g in segs {
        match g {
            Seg::Key(k) => s.push_str(&format!(".{k}")),
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn at<'a>(v: &'a mut Value, segs: &[Seg]) -> Option<&'a mut Value> {
    segs.iter().try_fold(v, |v, g| match g {
        Seg::Key(k) => v.as_object_mut()?.get_mut(k),
        Seg::Index(i) => v.as_array_mut()?.get_mut(*i),
    })
}

/// One generated case: a valid spec with one constraint violated, and the field whose
/// problem `validate` must report.
struct Case {
    kind: &'static str,
    what: String,
    spec: Value,
    field: String,
    /// Text the problem's message must hold (empty: any).
    says: String,
}

/// A schema keyword that constrains nothing (`description`, extensions) or only shapes the
/// walk (`properties` is also a constraint: unknown fields; `items` is walked into).
fn annotation(k: &str) -> bool {
    k == "description" || k.starts_with("x-kubernetes-") || k == "items"
}

/// Walks the CRD's `spec` schema: a [`Case`] per leaf constraint (generated), and the JSON
/// pointer of every `oneOf`/`anyOf`/`not` (cases for those are written by hand, below).
fn walk(
    kind: &'static str,
    s: &Value,
    segs: Vec<Seg>,
    pointer: String,
    cases: &mut Vec<Case>,
    composites: &mut Vec<String>,
) {
    let obj = s.as_object().unwrap();
    let keywords = cleave::operator::schema::KEYWORDS;
    for k in obj.keys() {
        assert!(
            annotation(k) || keywords.contains(&k.as_str()),
            "{kind} {pointer}: the CRD uses `{k}`, which cleave's schema validator does not apply"
        );
    }
    let path = dotted(&segs);
    // Where the value lives in a base (its parent for `required`).
    let base_with = |segs: &[Seg]| -> Value {
        bases(kind)
            .into_iter()
            .find(|b| at(&mut b.clone(), segs).is_some())
            .unwrap_or_else(|| panic!("{kind}: no base has {}", dotted(segs)))
    };
    let mut leaf = |what: &str, value: Option<Value>, field: String, says: String| {
        let (target, parent) = match &value {
            Some(_) => (segs.clone(), None),
            None => (segs[..segs.len() - 1].to_vec(), segs.last().cloned()),
        };
        let mut spec = base_with(if value.is_some() { &target } else { &segs });
        let slot = at(&mut spec, &target).unwrap();
        match (value, parent) {
            (Some(v), _) => *slot = v,
            (None, Some(Seg::Key(k))) => {
                slot.as_object_mut().unwrap().remove(&k);
            }
            _ => unreachable!(),
        }
        cases.push(Case {
            kind,
            what: format!("{what} at {path}"),
            spec,
            field,
            says,
        });
    };
    if let Some(t) = obj.get("type").and_then(Value::as_str) {
        let wrong = match t {
            "string" => json!(12345),
            "integer" | "number" => json!("yesterday"),
            "boolean" => json!("maybe"),
            "array" | "object" => json!("x"),
            other => panic!("type {other}"),
        };
        if !segs.is_empty() {
            leaf("type", Some(wrong), path.clone(), "expected a".to_string());
        }
    }
    if let Some(e) = obj.get("enum") {
        assert!(e.as_array().unwrap().iter().all(Value::is_string));
        leaf(
            "enum",
            Some(json!("NotAValue")),
            path.clone(),
            "expected one of".into(),
        );
    }
    if let Some(m) = obj.get("minimum").and_then(Value::as_i64) {
        leaf(
            "minimum",
            Some(json!(m - 1)),
            path.clone(),
            format!("at least {m}"),
        );
    }
    if let Some(m) = obj.get("maximum").and_then(Value::as_i64) {
        leaf(
            "maximum",
            Some(json!(m + 1)),
            path.clone(),
            format!("at most {m}"),
        );
    }
    if let Some(f) = obj.get("format").and_then(Value::as_str) {
        let past = match f {
            "int32" => json!(i64::from(i32::MAX) + 1),
            "int64" => json!(u64::MAX),
            "uint32" => json!(u64::from(u32::MAX) + 1),
            "uint64" | "uint" => json!(-1),
            other => panic!("format {other}: add its case"),
        };
        leaf("format", Some(past), path.clone(), String::new());
    }
    if let Some(n) = obj.get("minLength").and_then(Value::as_u64) {
        leaf(
            "minLength",
            Some(json!("x".repeat(n as usize - 1))),
            path.clone(),
            String::new(),
        );
    }
    if let Some(n) = obj.get("maxLength").and_then(Value::as_u64) {
        leaf(
            "maxLength",
            Some(json!("x".repeat(n as usize + 1))),
            path.clone(),
            String::new(),
        );
    }
    if let Some(p) = obj.get("pattern").and_then(Value::as_str) {
        let re = regex::Regex::new(p).unwrap();
        let bad = ["/", "not a token", "x", "", "-", "12:x"]
            .into_iter()
            .find(|c| !re.is_match(c))
            .unwrap_or_else(|| panic!("{p}: no candidate violates it"));
        leaf("pattern", Some(json!(bad)), path.clone(), String::new());
    }
    for (k, over) in [("minItems", -1i64), ("maxItems", 1)] {
        if let Some(n) = obj.get(k).and_then(Value::as_i64) {
            let mut items = at(&mut base_with(&segs), &segs).unwrap().clone();
            let first = items[0].clone();
            let items = items.as_array_mut().unwrap();
            items.resize((n + over).max(0) as usize, first);
            leaf(k, Some(json!(items)), path.clone(), String::new());
        }
    }
    for r in obj
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let r = r.as_str().unwrap();
        let mut sub = segs.clone();
        sub.push(Seg::Key(r.into()));
        let mut spec = base_with(&sub);
        at(&mut spec, &segs)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove(r);
        cases.push(Case {
            kind,
            what: format!("required {r} at {path}"),
            spec,
            field: format!("{path}.{r}"),
            says: "must be set".into(),
        });
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        // A misspelt field, at every depth: two letters swapped in the first known name.
        let known = props.keys().next().unwrap();
        let mut typo: Vec<char> = known.chars().collect();
        typo.swap(1, 2);
        let typo: String = typo.into_iter().collect();
        let mut spec = base_with(&segs);
        at(&mut spec, &segs).unwrap()[&typo] = json!("x");
        cases.push(Case {
            kind,
            what: format!("unknown field {typo} at {path}"),
            spec,
            field: format!("{path}.{typo}"),
            says: format!("did you mean {path}.{known}?"),
        });
        for (k, sub) in props {
            let mut segs = segs.clone();
            segs.push(Seg::Key(k.clone()));
            walk(
                kind,
                sub,
                segs,
                format!("{pointer}/properties/{k}"),
                cases,
                composites,
            );
        }
    }
    if let Some(items) = obj.get("items") {
        let mut segs = segs.clone();
        segs.push(Seg::Index(0));
        walk(
            kind,
            items,
            segs,
            format!("{pointer}/items"),
            cases,
            composites,
        );
    }
    for (i, sub) in obj
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        walk(
            kind,
            sub,
            segs.clone(),
            format!("{pointer}/allOf/{i}"),
            cases,
            composites,
        );
    }
    for k in ["anyOf", "oneOf", "not"] {
        if obj.contains_key(k) {
            composites.push(format!("{kind} {pointer}/{k}"));
        }
    }
}

/// The hand-written cases of the rules across fields (`oneOf`/`anyOf` of the CRD), by the
/// JSON pointer the walk finds them at: base index, the change, the field reported.
/// A hand-written case: the composite's key, the base, the change, the field reported.
type Composite = (String, usize, fn(&mut Value), &'static str);

fn composite_cases() -> Vec<Composite> {
    let mut v: Vec<Composite> = Vec::new();
    for (kind, list) in [
        ("AnticompactionJob", "ranges"),
        ("RangeStream", "ranges"),
        ("CleanupJob", "ownedRanges"),
    ] {
        let field: &'static str = match list {
            "ranges" => "spec.ranges[0].end",
            _ => "spec.ownedRanges[0].end",
        };
        // Murmur3 (absent partitioner): a hex token.
        v.push((
            format!("{kind} /allOf/0/anyOf"),
            0,
            |s| {
                s.as_object_mut().unwrap().remove("partitioner");
                let l = if s.get("ranges").is_some() {
                    "ranges"
                } else {
                    "ownedRanges"
                };
                s[l][0]["end"] = json!("abc");
            },
            field,
        ));
        v.push((
            format!("{kind} /allOf/1/anyOf"),
            0,
            |s| {
                s["partitioner"] = json!("Random");
                let l = if s.get("ranges").is_some() {
                    "ranges"
                } else {
                    "ownedRanges"
                };
                s[l][0]["end"] = json!("abc");
            },
            field,
        ));
        v.push((
            format!("{kind} /allOf/2/anyOf"),
            0,
            |s| {
                s["partitioner"] = json!("ByteOrdered");
                let l = if s.get("ranges").is_some() {
                    "ranges"
                } else {
                    "ownedRanges"
                };
                s[l][0] = json!({"start": "00", "end": "-5"});
            },
            field,
        ));
    }
    v.push((
        "AnticompactionJob /oneOf".into(),
        0,
        |s| {
            s["pendingRepair"] = json!(UUID);
        },
        "spec",
    ));
    // A pre-split forbids what an anticompaction needs.
    v.push((
        "AnticompactionJob /allOf/3/anyOf".into(),
        2,
        |s| {
            s["repairedAt"] = json!(1);
        },
        "spec.repairedAt",
    ));
    v.push((
        "RangeStream /properties/destination/oneOf".into(),
        0,
        |s| {
            s["destination"]["service"] = json!("svc");
        },
        "spec.destination",
    ));
    // Both ways of naming the nodes at once.
    v.push((
        "DatacenterCleanup /oneOf".into(),
        0,
        |s| {
            s["podSelector"] = json!({"app": "cassandra"});
        },
        "spec.podSelector",
    ));
    v.push((
        "CleanupJob /oneOf".into(),
        1,
        |s| {
            s["ownedRanges"] = json!([{"start": "0", "end": "1"}]);
        },
        "spec.ownedRanges",
    ));
    v
}

/// `cleave validate` on one file per case, all at once: the lines of each file.
fn validate_cases(dir: &Path, docs: &[(String, String)]) -> Vec<String> {
    let mut files = Vec::new();
    for (i, (_, text)) in docs.iter().enumerate() {
        let f = dir.join(format!("case-{i:03}.yaml"));
        std::fs::write(&f, text).unwrap();
        files.push(f);
    }
    let (ok, out) = validate(&files);
    assert!(!ok, "{out}");
    files
        .iter()
        .map(|f| {
            let name = format!("{}:", f.display());
            out.lines()
                .filter(|l| l.starts_with(&name))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

#[test]
fn every_crd_schema_constraint_has_a_case_validate_reports_with_its_field() {
    let crds = cleave::operator::crd::crds().unwrap();
    let mut cases = Vec::new();
    let mut composites = Vec::new();
    for crd in &crds {
        let kind: &'static str = match crd["spec"]["names"]["kind"].as_str().unwrap() {
            "AnticompactionJob" => "AnticompactionJob",
            "RangeStream" => "RangeStream",
            "CleanupJob" => "CleanupJob",
            "DatacenterCleanup" => "DatacenterCleanup",
            k => panic!("a kind without bases: {k}"),
        };
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        walk(
            kind,
            spec,
            Vec::new(),
            String::new(),
            &mut cases,
            &mut composites,
        );
    }
    // Each base is valid: a case's problem is its own.
    let d = tempfile::tempdir().unwrap();
    for kind in [
        "AnticompactionJob",
        "RangeStream",
        "CleanupJob",
        "DatacenterCleanup",
    ] {
        for (i, b) in bases(kind).iter().enumerate() {
            let f = d.path().join(format!("base-{kind}-{i}.yaml"));
            std::fs::write(&f, manifest(kind, "base", b)).unwrap();
            let (ok, out) = validate(&[f]);
            assert!(ok, "base {kind} {i} is not valid:\n{out}");
        }
    }
    let hand = composite_cases();
    let mut found: Vec<String> = composites.clone();
    found.sort();
    let mut written: Vec<String> = hand.iter().map(|c| c.0.clone()).collect();
    written.sort();
    assert_eq!(
        found, written,
        "every oneOf/anyOf/not of the CRDs needs a hand-written case (and no case may be stale)"
    );
    for (key, base, change, field) in hand {
        let kind = match key.split_once(' ').unwrap().0 {
            "AnticompactionJob" => "AnticompactionJob",
            "RangeStream" => "RangeStream",
            "DatacenterCleanup" => "DatacenterCleanup",
            _ => "CleanupJob",
        };
        let mut spec = bases(kind)[base].clone();
        change(&mut spec);
        cases.push(Case {
            kind,
            what: key,
            spec,
            field: field.into(),
            says: String::new(),
        });
    }
    assert!(cases.len() > 100, "{} cases", cases.len());
    let docs: Vec<(String, String)> = cases
        .iter()
        .map(|c| (c.what.clone(), manifest(c.kind, "case", &c.spec)))
        .collect();
    let lines = validate_cases(d.path(), &docs);
    let mut missed = Vec::new();
    for (c, out) in cases.iter().zip(&lines) {
        let hit = out.lines().any(|l| {
            l.contains("error[") && l.contains(&format!("] {}: ", c.field)) && l.contains(&c.says)
        });
        if !hit {
            missed.push(format!(
                "{} {}: expected a problem at {} saying {:?}, got:\n{out}",
                c.kind, c.what, c.field, c.says
            ));
        }
    }
    assert!(
        missed.is_empty(),
        "{} of {} cases:\n{}",
        missed.len(),
        cases.len(),
        missed.join("\n")
    );
    eprintln!("{} schema cases reported", cases.len());
}

/// The controller's own checks (`Kind::checks`: what no schema can say), one case each:
/// kind, base, the change, the reason and field. `controller: false` where no sidecar would
/// ever act on the resource (its acting node is empty, so it is no node's).
struct Check {
    name: &'static str,
    kind: &'static str,
    base: usize,
    change: fn(&mut Value),
    reason: &'static str,
    field: &'static str,
    controller: bool,
}

fn checks() -> Vec<Check> {
    let c = |name, kind, base, change: fn(&mut Value), reason, field, controller| Check {
        name,
        kind,
        base,
        change,
        reason,
        field,
        controller,
    };
    const J: &str = "AnticompactionJob";
    const S: &str = "RangeStream";
    const C: &str = "CleanupJob";
    vec![
        c(
            "job-node-blank",
            J,
            0,
            |s| s["nodeName"] = json!(" "),
            "InvalidSpec",
            "spec.nodeName",
            false,
        ),
        c(
            "job-keyspace-blank",
            J,
            0,
            |s| s["keyspace"] = json!(" "),
            "InvalidSpec",
            "spec.keyspace",
            true,
        ),
        c(
            "job-table-blank",
            J,
            0,
            |s| s["tables"] = json!([" "]),
            "InvalidSpec",
            "spec.tables[0]",
            true,
        ),
        c(
            "job-no-ranges",
            J,
            0,
            |s| s["ranges"] = json!([]),
            "InvalidSpec",
            "spec.ranges",
            true,
        ),
        c(
            "job-both-sessions",
            J,
            0,
            |s| s["pendingRepair"] = json!(UUID),
            "InvalidRepairMetadata",
            "spec",
            true,
        ),
        c(
            "job-repaired-zero",
            J,
            0,
            |s| s["repairedAt"] = json!(0),
            "InvalidRepairMetadata",
            "spec.repairedAt",
            true,
        ),
        c(
            "job-transient-repaired",
            J,
            0,
            |s| s["transientRanges"] = json!([{"start": "200", "end": "300"}]),
            "InvalidRepairMetadata",
            "spec.transientRanges",
            true,
        ),
        c(
            "job-session-not-uuid",
            J,
            1,
            |s| s["pendingRepair"] = json!("not-a-uuid"),
            "InvalidRepairMetadata",
            "spec.pendingRepair",
            true,
        ),
        c(
            "job-presplit-random",
            J,
            2,
            |s| s["partitioner"] = json!("Random"),
            "InvalidSpec",
            "spec.partitioner",
            true,
        ),
        c(
            "job-presplit-stage",
            J,
            2,
            |s| s["publish"] = json!("Stage"),
            "InvalidSpec",
            "spec.publish",
            true,
        ),
        c(
            "job-presplit-ranges",
            J,
            2,
            |s| s["ranges"] = json!([{"start": "0", "end": "100"}]),
            "InvalidSpec",
            "spec.ranges",
            true,
        ),
        c(
            "job-parallelism-zero",
            J,
            0,
            |s| s["parallelism"] = json!(0),
            "InvalidSpec",
            "spec.parallelism",
            true,
        ),
        c(
            "job-ttl-negative",
            J,
            0,
            |s| s["ttlSecondsAfterFinished"] = json!(-1),
            "InvalidSpec",
            "spec.ttlSecondsAfterFinished",
            true,
        ),
        c(
            "job-rate-zero",
            J,
            0,
            |s| s["maxBytesPerSecond"] = json!(0),
            "InvalidSpec",
            "spec.maxBytesPerSecond",
            true,
        ),
        c(
            "job-target-four",
            J,
            0,
            |s| s["targetCassandra"] = json!("four"),
            "InvalidSpec",
            "spec.targetCassandra",
            true,
        ),
        c(
            "job-token-range",
            J,
            0,
            |s| s["ranges"][0]["end"] = json!("9223372036854775808"),
            "InvalidRange",
            "spec.ranges[0].end",
            true,
        ),
        c(
            "job-token-start",
            J,
            0,
            |s| s["ranges"][0]["start"] = json!("9223372036854775808"),
            "InvalidRange",
            "spec.ranges[0].start",
            true,
        ),
        c(
            "job-overlap",
            J,
            0,
            |s| s["ranges"] = json!([{"start": "0", "end": "100"}, {"start": "50", "end": "150"}]),
            "InvalidRange",
            "spec.ranges",
            true,
        ),
        c(
            "job-overlap-transient",
            J,
            1,
            |s| {
                s["transientRanges"] =
                    json!([{"start": "200", "end": "300"}, {"start": "250", "end": "350"}])
            },
            "InvalidRange",
            "spec.transientRanges",
            true,
        ),
        c(
            "job-label",
            J,
            0,
            |s| s["nodeName"] = json!("n1"),
            "InvalidSpec",
            "metadata.labels",
            true,
        ),
        c(
            "stream-source-empty",
            S,
            0,
            |s| s["sourceNode"] = json!(""),
            "InvalidSpec",
            "spec.sourceNode",
            false,
        ),
        c(
            "stream-to-itself",
            S,
            0,
            |s| s["destination"]["nodeName"] = json!("n1"),
            "InvalidSpec",
            "spec.destination.nodeName",
            true,
        ),
        c(
            "stream-dest-empty",
            S,
            0,
            |s| s["destination"]["nodeName"] = json!(""),
            "InvalidSpec",
            "spec.destination.nodeName",
            true,
        ),
        c(
            "stream-no-address",
            S,
            0,
            |s| {
                s["destination"].as_object_mut().unwrap().remove("endpoint");
            },
            "InvalidSpec",
            "spec.destination",
            true,
        ),
        c(
            "stream-port",
            S,
            0,
            |s| s["destination"]["endpoint"] = json!("10.0.0.2:99999"),
            "InvalidSpec",
            "spec.destination.endpoint",
            true,
        ),
        c(
            "stream-no-ranges",
            S,
            0,
            |s| s["ranges"] = json!([]),
            "InvalidSpec",
            "spec.ranges",
            true,
        ),
        c(
            "stream-keyspace-empty",
            S,
            0,
            |s| s["keyspace"] = json!(""),
            "InvalidSpec",
            "spec.keyspace",
            true,
        ),
        c(
            "stream-table-blank",
            S,
            0,
            |s| s["tables"] = json!([" "]),
            "InvalidSpec",
            "spec.tables[0]",
            true,
        ),
        c(
            "stream-rate-zero",
            S,
            0,
            |s| s["maxBytesPerSecond"] = json!(0),
            "InvalidSpec",
            "spec.maxBytesPerSecond",
            true,
        ),
        c(
            "stream-target",
            S,
            0,
            |s| s["targetCassandra"] = json!("four"),
            "InvalidSpec",
            "spec.targetCassandra",
            true,
        ),
        c(
            "stream-token",
            S,
            0,
            |s| s["ranges"][0]["end"] = json!("9223372036854775808"),
            "InvalidRange",
            "spec.ranges[0].end",
            true,
        ),
        c(
            "stream-not-tokens",
            S,
            0,
            |s| {
                s.as_object_mut().unwrap().remove("partitioner");
                s["ranges"][0]["end"] = json!("xyz");
            },
            "InvalidRange",
            "spec.ranges[0]",
            true,
        ),
        c(
            "stream-overlap",
            S,
            0,
            |s| s["ranges"] = json!([{"start": "0", "end": "100"}, {"start": "50", "end": "150"}]),
            "InvalidRange",
            "spec.ranges",
            true,
        ),
        c(
            "stream-label",
            S,
            0,
            |s| s["sourceNode"] = json!("n1"),
            "InvalidSpec",
            "metadata.labels",
            true,
        ),
        c(
            "cleanup-keyspace-blank",
            C,
            0,
            |s| s["keyspace"] = json!(" "),
            "InvalidSpec",
            "spec.keyspace",
            true,
        ),
        c(
            "cleanup-rate-zero",
            C,
            0,
            |s| s["maxBytesPerSecond"] = json!(0),
            "InvalidSpec",
            "spec.maxBytesPerSecond",
            true,
        ),
        c(
            "cleanup-parallelism-zero",
            C,
            0,
            |s| s["parallelism"] = json!(0),
            "InvalidSpec",
            "spec.parallelism",
            true,
        ),
        c(
            "cleanup-target",
            C,
            0,
            |s| s["targetCassandra"] = json!("four"),
            "InvalidSpec",
            "spec.targetCassandra",
            true,
        ),
        c(
            "cleanup-no-ranges",
            C,
            0,
            |s| {
                s.as_object_mut().unwrap().remove("ownedRanges");
            },
            "InvalidSpec",
            "spec.ownedRanges",
            true,
        ),
        c(
            "cleanup-ranges-and-ring",
            C,
            1,
            |s| s["ownedRanges"] = json!([{"start": "0", "end": "1"}]),
            "InvalidSpec",
            "spec.ownedRanges",
            true,
        ),
        c(
            "cleanup-ring-random",
            C,
            1,
            |s| s["partitioner"] = json!("Random"),
            "InvalidSpec",
            "spec.ownership",
            true,
        ),
        c(
            "cleanup-ring-replace-without-window",
            C,
            1,
            |s| s["maintenance"] = json!("None"),
            "InvalidSpec",
            "spec.maintenance",
            true,
        ),
        c(
            "cleanup-token",
            C,
            0,
            |s| s["ownedRanges"][0]["end"] = json!("9223372036854775808"),
            "InvalidRange",
            "spec.ownedRanges[0].end",
            true,
        ),
        c(
            "cleanup-overlap",
            C,
            0,
            |s| {
                s["ownedRanges"] =
                    json!([{"start": "0", "end": "100"}, {"start": "50", "end": "150"}])
            },
            "InvalidRange",
            "spec.ownedRanges",
            true,
        ),
        c(
            "cleanup-label",
            C,
            0,
            |s| s["nodeName"] = json!("n1"),
            "InvalidSpec",
            "metadata.labels",
            true,
        ),
    ]
}

/// The manifest of a check case; the label cases name another node in the label.
fn check_manifest_text(c: &Check) -> String {
    let mut spec = bases(c.kind)[c.base].clone();
    (c.change)(&mut spec);
    let mut m: Value = serde_json::from_str(&manifest(c.kind, c.name, &spec)).unwrap();
    if c.field == "metadata.labels" {
        m["metadata"]["labels"]["cleave.dev/node"] = json!("n2");
    }
    m.to_string()
}

/// The field templates of the controller's checks, read from their source: a check added
/// without a case here fails this test.
fn check_fields_in_source() -> Vec<String> {
    let re = regex::Regex::new(
        r#"(?:SpecProblem::new|bad|meta)\(\s*(?:format!\()?"((?:spec|metadata)[^"]*)""#,
    )
    .unwrap();
    let mut v = Vec::new();
    for f in ["decide.rs", "cleanup.rs", "stream.rs", "anticompaction.rs"] {
        let text = std::fs::read_to_string(repo().join("src/operator").join(f)).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        v.extend(re.captures_iter(code).map(|c| c[1].to_string()));
    }
    v.sort();
    v.dedup();
    v
}

#[test]
fn every_controller_check_is_reported_by_validate_and_by_the_controller() {
    let cases = checks();
    // Coverage: every field a check names (templates such as `spec.{what}[{i}].{end}`
    // matched as patterns) has a case.
    let fields = check_fields_in_source();
    assert!(fields.len() >= 15, "{fields:?}");
    let placeholder = regex::Regex::new(r"\\\{[^}]*\\\}").unwrap();
    for t in &fields {
        let pattern = format!(
            "^{}$",
            placeholder.replace_all(&regex::escape(t), "[A-Za-z0-9]+")
        );
        let re = regex::Regex::new(&pattern).unwrap();
        assert!(
            cases.iter().any(|c| re.is_match(c.field)),
            "the controller check naming {t:?} has no case in tests/validate.rs"
        );
    }
    // validate: each case's reason and field.
    let d = tempfile::tempdir().unwrap();
    let docs: Vec<(String, String)> = cases
        .iter()
        .map(|c| (c.name.to_string(), check_manifest_text(c)))
        .collect();
    let lines = validate_cases(d.path(), &docs);
    for (c, out) in cases.iter().zip(&lines) {
        assert!(
            out.contains(&format!("error[{}] {}: ", c.reason, c.field)),
            "{}: validate should say error[{}] {}:\n{out}",
            c.name,
            c.reason,
            c.field
        );
    }
    // The controller (`cleave run --local --once`, node n1): each resource Failed with the
    // same reason, its message naming the field.
    let m = d.path().join("manifests");
    std::fs::create_dir(&m).unwrap();
    for c in cases.iter().filter(|c| c.controller) {
        std::fs::write(m.join(format!("{}.yaml", c.name)), check_manifest_text(c)).unwrap();
    }
    let out = run_local_once(&m)
        .arg("--data-dir")
        .arg(d.path().join("data"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut wrong = Vec::new();
    for c in cases.iter().filter(|c| c.controller) {
        let text =
            std::fs::read_to_string(m.join(format!("{}.status.yaml", c.name))).unwrap_or_default();
        let s: Value = serde_saphyr::from_str(&text).unwrap_or(Value::Null);
        let msg = s["message"].as_str().unwrap_or_default();
        if s["phase"] != "Failed" || s["reason"] != c.reason || !msg.contains(c.field) {
            wrong.push(format!(
                "{}: expected Failed {} naming {}, the controller wrote {s}",
                c.name, c.reason, c.field
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_issues_examples_one_line_per_problem_with_its_field() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("typos.yaml");
    std::fs::write(
        &f,
        "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: typos\nspec:\n  nodname: n1\n  keyspace: ks\n  ranges:\n    - {start: \"0\", stop: \"10\"}\n  repairedAt: yesterday\n  publish: replace\n  maxDowntimeSeconds: 900\n  targetCassandra: four\n",
    )
    .unwrap();
    let (ok, out) = validate(&[f]);
    assert!(!ok);
    for want in [
        "error[InvalidSpec] spec.nodeName: must be set",
        "error[InvalidSpec] spec.nodname: is not a field (did you mean spec.nodeName?)",
        "error[InvalidSpec] spec.ranges[0].end: must be set",
        "error[InvalidSpec] spec.ranges[0].stop: is not a field",
        "error[InvalidSpec] spec.repairedAt: expected an integer, got \"yesterday\"",
        "error[InvalidSpec] spec.publish: expected one of Stage, Replace, OnRestart, got \"replace\"",
        "error[InvalidSpec] spec.maxDowntimeSeconds: expected at most 540, got 900",
    ] {
        assert!(out.contains(want), "missing {want:?}:\n{out}");
    }
    assert!(out.lines().count() >= 7, "{out}");
}
