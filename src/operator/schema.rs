//! The CRDs' own `openAPIV3Schema`, applied by cleave: what an apiserver refuses at admission,
//! checked where no apiserver stands between a manifest and the controller (`cleave run
//! --local`, `cleave validate`). The validator is generic — it reads the schema `crd::crds()`
//! generates, keyword by keyword — so a constraint added to a CRD field is enforced here
//! without a line written for it, and `cleave validate` cannot fall behind the CRD.
//!
//! Every problem is reported, each with its field path (`spec.ranges[0].end`), not only the
//! first: a manifest is fixed in one round. A field the schema does not know is reported at
//! any depth, with the known field spelt closest to it (`spec.destination.nodname` → "did you
//! mean spec.destination.nodeName?"), because the apiserver would prune it where the schema
//! does not preserve unknown fields, and cleave refuses it where it does.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde_json::Value;

use crate::reason::{Failure, Reason};

/// One problem of one field: the reason the controller fails the resource with, the field's
/// path, and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    /// `spec.ranges[0].end`, `metadata.labels`, `spec` (a rule across fields).
    pub field: String,
    pub reason: Reason,
    /// What was expected and what was found, without the field (`expected an integer, got
    /// "yesterday"`).
    pub message: String,
    /// Other fields the problem is about (the alternatives of a `oneOf`), so that one fact
    /// the schema and a controller check both find is reported once.
    pub about: Vec<String>,
}

impl SpecProblem {
    pub fn new(field: impl Into<String>, reason: Reason, message: impl Into<String>) -> Self {
        SpecProblem {
            field: field.into(),
            reason,
            message: message.into(),
            about: Vec::new(),
        }
    }

    /// The same problem, also about `fields`.
    pub fn about(mut self, fields: &[&str]) -> Self {
        self.about.extend(fields.iter().map(|f| f.to_string()));
        self
    }

    fn fields(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.field.as_str()).chain(self.about.iter().map(String::as_str))
    }
}

impl std::fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The failure a resource with `problems` ends with: the first problem's reason, every
/// problem in the message. `None` when there is none.
pub fn failure_of(problems: &[SpecProblem]) -> Option<Failure> {
    let first = problems.first()?;
    let all: Vec<String> = problems.iter().map(ToString::to_string).collect();
    Some(Failure::new(first.reason, all.join("; ")))
}

/// The schema's problems and a kind's own checks as one list. Where both found something
/// about the same field, the kind's check is kept: it carries the reason the controller
/// fails with (`InvalidRange` for a token, where the schema only knows "pattern").
pub fn merge(schema: Vec<SpecProblem>, checks: Vec<SpecProblem>) -> Vec<SpecProblem> {
    // A leaf problem of the schema gives way to a check of its own field only (a check
    // about `spec` does not hide `spec.repairedAt: expected at least 1`); an alternative
    // (`oneOf`) to a check about any field it is about.
    let fields: BTreeSet<&str> = checks.iter().map(|c| c.field.as_str()).collect();
    let about: BTreeSet<&str> = checks.iter().flat_map(SpecProblem::fields).collect();
    let rest: Vec<SpecProblem> = schema
        .into_iter()
        .filter(|p| {
            !fields.contains(p.field.as_str())
                && (p.about.is_empty() || !p.fields().any(|f| about.contains(f)))
        })
        .collect();
    // The checks first: the first problem's reason is the resource's, and a check's
    // (`InvalidRange`, `InvalidRepairMetadata`) says more than the schema's `InvalidSpec`.
    let mut out = checks;
    out.extend(rest);
    out
}

/// The `spec` schema of `kind` in the generated CRD.
pub fn spec_schema(kind: &str) -> Option<&'static Value> {
    static CRDS: OnceLock<Vec<Value>> = OnceLock::new();
    let crds = CRDS.get_or_init(|| super::crd::crds().unwrap_or_default());
    crds.iter()
        .find(|c| c["spec"]["names"]["kind"] == kind)
        .and_then(|c| c.pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec"))
}

/// Every problem the CRD's schema finds in `spec` (a resource's `.spec` as JSON) of `kind`.
pub fn spec_problems(kind: &str, spec: &Value) -> Vec<SpecProblem> {
    match spec_schema(kind) {
        Some(s) => check(s, spec, "spec"),
        None => vec![SpecProblem::new(
            "kind",
            Reason::InvalidSpec,
            format!("{kind:?}: no CRD of this kind"),
        )],
    }
}

/// Every problem `schema` finds in `v`, the value at `path`.
pub fn check(schema: &Value, v: &Value, path: &str) -> Vec<SpecProblem> {
    let mut out = Vec::new();
    walk(schema, v, path, true, &mut out);
    out
}

/// A branch of `anyOf`/`oneOf`/`not`: a partial schema, whose `properties` name only the
/// fields the rule is about (the others are not unknown to it).
fn branch(schema: &Value, v: &Value, path: &str) -> Vec<SpecProblem> {
    let mut out = Vec::new();
    walk(schema, v, path, false, &mut out);
    out
}

/// The constraint keywords [`check`] applies. Any other keyword in a CRD's spec schema is
/// a constraint cleave would not enforce: `tests/validate.rs` fails on one.
pub const KEYWORDS: &[&str] = &[
    "type",
    "format",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "required",
    "properties",
    "items",
    "additionalProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
];

fn problem(out: &mut Vec<SpecProblem>, path: &str, message: String) {
    out.push(SpecProblem::new(path, Reason::InvalidSpec, message));
}

/// A value as the manifest wrote it, for "got ...".
fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    }
}

fn article(t: &str) -> &'static str {
    match t {
        "object" | "array" | "integer" => "an",
        _ => "a",
    }
}

/// The range of an integer `format` (the Rust type serde reads the field into).
fn format_range(f: &str) -> Option<(i128, i128)> {
    Some(match f {
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "int64" => (i64::MIN.into(), i64::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "uint64" | "uint" => (0, u64::MAX.into()),
        _ => return None,
    })
}

fn walk(s: &Value, v: &Value, path: &str, strict: bool, out: &mut Vec<SpecProblem>) {
    if let Some(t) = s.get("type").and_then(Value::as_str) {
        if !type_ok(t, v) {
            // Nothing else of this schema can be said about a value of another type.
            problem(
                out,
                path,
                format!("expected {} {t}, got {}", article(t), shown(v)),
            );
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            let names: Vec<String> = e
                .iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                .collect();
            problem(
                out,
                path,
                format!("expected one of {}, got {}", names.join(", "), shown(v)),
            );
        }
    }
    if let Some(n) = v.as_number() {
        let x = n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from));
        let f = n.as_f64().unwrap_or(f64::NAN);
        let exclusive = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);
        if let Some(m) = s.get("minimum").and_then(Value::as_f64) {
            if f < m || (exclusive("exclusiveMinimum") && f <= m) {
                let op = if exclusive("exclusiveMinimum") {
                    "more than"
                } else {
                    "at least"
                };
                problem(out, path, format!("expected {op} {m}, got {n}"));
            }
        }
        if let Some(m) = s.get("maximum").and_then(Value::as_f64) {
            if f > m || (exclusive("exclusiveMaximum") && f >= m) {
                let op = if exclusive("exclusiveMaximum") {
                    "less than"
                } else {
                    "at most"
                };
                problem(out, path, format!("expected {op} {m}, got {n}"));
            }
        }
        if let Some((fmt, (lo, hi))) = s
            .get("format")
            .and_then(Value::as_str)
            .and_then(|f| Some((f, format_range(f)?)))
        {
            if x.is_none_or(|x| x < lo || x > hi) {
                problem(
                    out,
                    path,
                    format!("expected {} {fmt} ({lo}..={hi}), got {n}", article(fmt)),
                );
            }
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as u64;
        if let Some(m) = s.get("minLength").and_then(Value::as_u64) {
            if len < m {
                problem(
                    out,
                    path,
                    format!("expected at least {m} characters, got {}", shown(v)),
                );
            }
        }
        if let Some(m) = s.get("maxLength").and_then(Value::as_u64) {
            if len > m {
                problem(
                    out,
                    path,
                    format!("expected at most {m} characters, got {len}"),
                );
            }
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str) {
            match regex::Regex::new(p) {
                Ok(re) if re.is_match(text) => {}
                Ok(_) => problem(
                    out,
                    path,
                    format!("expected a string matching {p}, got {}", shown(v)),
                ),
                Err(e) => problem(out, path, format!("the schema's pattern {p:?}: {e}")),
            }
        }
    }
    if let Some(items) = v.as_array() {
        let n = items.len() as u64;
        if let Some(m) = s.get("minItems").and_then(Value::as_u64) {
            if n < m {
                problem(out, path, format!("expected at least {m} items, got {n}"));
            }
        }
        if let Some(m) = s.get("maxItems").and_then(Value::as_u64) {
            if n > m {
                let what = if m == 0 {
                    "no item".to_string()
                } else {
                    format!("at most {m} items")
                };
                problem(out, path, format!("expected {what}, got {n}"));
            }
        }
        if s.get("uniqueItems").and_then(Value::as_bool) == Some(true) {
            if let Some(i) = (1..items.len()).find(|&i| items[..i].contains(&items[i])) {
                problem(out, &format!("{path}[{i}]"), "a duplicate item".to_string());
            }
        }
        if let Some(is) = s.get("items") {
            for (i, x) in items.iter().enumerate() {
                walk(is, x, &format!("{path}[{i}]"), strict, out);
            }
        }
    }
    if let Some(obj) = v.as_object() {
        // An explicit null is pruned by the apiserver (no field is nullable): absent.
        let present = |k: &str| obj.get(k).is_some_and(|x| !x.is_null());
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !present(r) {
                problem(out, &format!("{path}.{r}"), "must be set".to_string());
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        let known: Vec<String> = props
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        for (k, x) in obj {
            if x.is_null() {
                continue;
            }
            let sub = format!("{path}.{k}");
            match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(ps), _) => walk(ps, x, &sub, strict, out),
                (None, Some(ap)) if ap.is_object() => walk(ap, x, &sub, strict, out),
                (None, ap) if strict && (props.is_some() || ap == Some(&Value::Bool(false))) => {
                    let hint = super::crd::closest_field(k, &known)
                        .map(|c| format!(" (did you mean {path}.{c}?)"))
                        .unwrap_or_default();
                    problem(out, &sub, format!("is not a field{hint}"));
                }
                _ => {}
            }
        }
    }
    for sub in s
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        walk(sub, v, path, strict, out);
    }
    if let Some(branches) = s.get("anyOf").and_then(Value::as_array) {
        let found: Vec<Vec<SpecProblem>> = branches.iter().map(|b| branch(b, v, path)).collect();
        if found.iter().all(|f| !f.is_empty()) {
            out.push(alternatives(found));
        }
    }
    if let Some(branches) = s.get("oneOf").and_then(Value::as_array) {
        let found: Vec<Vec<SpecProblem>> = branches.iter().map(|b| branch(b, v, path)).collect();
        let passing = found.iter().filter(|f| f.is_empty()).count();
        if passing == 0 {
            out.push(alternatives(found));
        } else if passing > 1 {
            problem(
                out,
                path,
                format!("matches {passing} of the schema's alternatives where exactly one must"),
            );
        }
    }
    if let Some(n) = s.get("not") {
        if branch(n, v, path).is_empty() {
            let what = if n.as_object().is_some_and(|o| o.is_empty()) {
                "must not be set here".to_string()
            } else {
                format!("must not match {n}")
            };
            problem(out, path, what);
        }
    }
}

/// One problem for a `oneOf`/`anyOf` no branch of which passes: the branch closest to passing
/// (fewest problems, the first on a tie — the one an apiserver reports) gives the field, the
/// others follow as what would do instead.
fn alternatives(mut found: Vec<Vec<SpecProblem>>) -> SpecProblem {
    found.sort_by_key(Vec::len);
    let about: Vec<String> = found
        .iter()
        .flatten()
        .map(|p| p.field.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut branches = found.into_iter().filter_map(|b| b.into_iter().next());
    let Some(best) = branches.next() else {
        return SpecProblem::new("spec", Reason::InvalidSpec, "no alternative of the schema");
    };
    let others: Vec<String> = branches.map(|p| p.to_string()).collect();
    let mut message = best.message;
    if !others.is_empty() {
        message.push_str(&format!(" (or else: {})", others.join("; or ")));
    }
    SpecProblem {
        field: best.field,
        reason: Reason::InvalidSpec,
        message,
        about,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(spec: Value) -> Vec<String> {
        spec_problems("AnticompactionJob", &spec)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let p = job(json!({
            "nodname": "n1", "keyspace": "ks", "ranges": [{"start": "0", "end": "x"}],
            "repairedAt": "yesterday", "publish": "replace", "maxDowntimeSeconds": 900,
        }));
        let has = |s: &str| p.iter().any(|l| l.contains(s));
        assert!(has("spec.nodeName: must be set"), "{p:?}");
        assert!(
            has("spec.nodname: is not a field (did you mean spec.nodeName?)"),
            "{p:?}"
        );
        assert!(
            has("spec.repairedAt: expected an integer, got \"yesterday\""),
            "{p:?}"
        );
        assert!(
            has("spec.publish: expected one of Stage, Replace, OnRestart, got \"replace\""),
            "{p:?}"
        );
        assert!(
            has("spec.maxDowntimeSeconds: expected at most 540, got 900"),
            "{p:?}"
        );
        assert!(
            has("spec.ranges[0].end: expected a string matching"),
            "{p:?}"
        );
    }

    #[test]
    fn a_valid_spec_has_no_problem_and_checks_win_over_the_schema() {
        let ok = json!({"nodeName": "n1", "keyspace": "ks",
            "ranges": [{"start": "0", "end": "1"}], "repairedAt": 1});
        assert_eq!(job(ok), Vec::<String>::new());
        let schema = vec![SpecProblem::new(
            "spec.parallelism",
            Reason::InvalidSpec,
            "a",
        )];
        let checks = vec![SpecProblem::new(
            "spec.parallelism",
            Reason::InvalidRange,
            "b",
        )];
        assert_eq!(merge(schema, checks.clone()), checks);
    }
}
