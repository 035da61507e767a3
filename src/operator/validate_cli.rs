//! `cleave validate`: the controller's own checks of a manifest, offline (CI pipelines, every
//! example the project ships). One entry point, [`validate_manifest`], that calls the checks
//! the reconcilers run before they act (`decide::validate_spec`, `validate_ranges`,
//! `check_node_label`, `validate_stream`); it adds no rule of its own beyond "the document
//! parses as the CRD type", so the CLI and the controller cannot disagree.
//!
//! Documents of other kinds (a CassandraDatacenter, a Secret) are not cleave's: they are
//! listed as skipped, not judged.

use serde_json::Value;

use super::core::Kind;
use super::crd::{AnticompactionJob, CleanupJob, RangeStream};
use super::decide;
use crate::reason::Reason;
use crate::sstable::Partitioner;

/// One problem of one document: the reason the controller would fail it with, the field
/// path, and the controller's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 0-based index of the YAML document in the file.
    pub document: usize,
    /// `Kind/name` as far as it parsed.
    pub object: String,
    pub reason: Reason,
    /// `spec.ranges[0].start`, `metadata.labels`, ... (`spec` when the type did not parse).
    pub field: String,
    pub message: String,
}

/// What [`validate_manifest`] saw: the cleave resources it checked and the documents of
/// other kinds it left alone.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Checked {
    pub resources: Vec<String>,
    pub skipped: Vec<String>,
    pub problems: Vec<Problem>,
}

/// Every problem the controller would find in `yaml` (one or more documents). Ranges of an
/// AnticompactionJob are parsed as Murmur3 tokens (Cassandra's default partitioner; the
/// controller uses the sstables' own, which it only knows on the node).
pub fn validate_manifest(yaml: &str) -> Vec<Problem> {
    check_manifest(yaml).problems
}

/// [`validate_manifest`] with what was checked and skipped.
pub fn check_manifest(yaml: &str) -> Checked {
    let mut out = Checked::default();
    let docs: Vec<Value> = match serde_saphyr::from_multiple::<Value>(yaml) {
        Ok(d) => d,
        Err(e) => {
            out.problems.push(Problem {
                document: 0,
                object: String::new(),
                reason: Reason::InvalidSpec,
                field: String::new(),
                message: format!("not YAML: {e}"),
            });
            return out;
        }
    };
    for (i, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let name = doc["metadata"]["name"].as_str().unwrap_or("?").to_string();
        let object = format!("{kind}/{name}");
        let api = doc["apiVersion"].as_str().unwrap_or_default();
        if !api.starts_with("cleave.dev/") {
            out.skipped.push(object);
            continue;
        }
        let mut problem = |field: &str, reason: Reason, message: String| {
            out.problems.push(Problem {
                document: i,
                object: object.clone(),
                reason,
                field: field.to_string(),
                message,
            })
        };
        if api != "cleave.dev/v1alpha1" {
            problem(
                "apiVersion",
                Reason::InvalidSpec,
                format!("{api:?}: this cleave serves cleave.dev/v1alpha1"),
            );
            continue;
        }
        let found = |f: crate::reason::Failure| (field_of(&f.message), f.reason, f.message);
        match kind.as_str() {
            "AnticompactionJob" => match serde_json::from_value::<AnticompactionJob>(doc) {
                Err(e) => problem("spec", Reason::InvalidSpec, e.to_string()),
                Ok(job) => {
                    // The core's own validation (what a sidecar runs before it acts), then
                    // the ranges as Murmur3 tokens (the node knows the sstables' partitioner).
                    // the ranges only once the spec is valid: one mistake, one problem.
                    let check = Kind::validate(&job).and_then(|()| {
                        decide::validate_ranges(
                            &job.spec,
                            job.spec.partitioner.unwrap_or(Partitioner::Murmur3),
                        )
                        .map(|_| ())
                    });
                    if let Err(c) = check {
                        let (f, r, m) = found(c);
                        problem(&f, r, m);
                    }
                }
            },
            "RangeStream" => match serde_json::from_value::<RangeStream>(doc) {
                Err(e) => problem("spec", Reason::InvalidSpec, e.to_string()),
                Ok(s) => {
                    if let Err(c) = Kind::validate(&s) {
                        let (f, r, m) = found(c);
                        problem(&f, r, m);
                    }
                    let labels = s.metadata.labels.clone().unwrap_or_default();
                    if let Some(l) = labels.get(decide::NODE_LABEL) {
                        if *l != s.spec.source_node {
                            problem(
                                "metadata.labels",
                                Reason::InvalidSpec,
                                format!(
                                    "label {}={l} does not match spec.sourceNode {:?}",
                                    decide::NODE_LABEL,
                                    s.spec.source_node
                                ),
                            );
                        }
                    }
                }
            },
            "CleanupJob" => match serde_json::from_value::<CleanupJob>(doc) {
                Err(e) => problem("spec", Reason::InvalidSpec, e.to_string()),
                Ok(c) => {
                    if let Err(f) = Kind::validate(&c) {
                        let (f, r, m) = found(f);
                        problem(&f, r, m);
                    }
                }
            },
            _ => {
                problem(
                    "kind",
                    Reason::InvalidSpec,
                    format!("{kind:?}: cleave.dev/v1alpha1 has AnticompactionJob, RangeStream and CleanupJob"),
                );
                continue;
            }
        }
        out.resources.push(object);
    }
    out
}

/// The field a controller message names: its first word when it is a path (`spec.x[0].y:`),
/// `metadata.labels` for the node label, else `spec`.
fn field_of(message: &str) -> String {
    if message.starts_with("label ") {
        return "metadata.labels".into();
    }
    let first = message.split_whitespace().next().unwrap_or_default();
    let first = first.trim_end_matches(':').trim_end_matches(',');
    if first.starts_with("spec.") {
        first.to_string()
    } else {
        "spec".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: j\n  labels: {cleave.dev/node: n1}\nspec:\n  nodeName: n1\n  keyspace: ks\n  ranges:\n    - {start: \"0\", end: \"10\"}\n";

    #[test]
    fn a_valid_job_has_no_problem_and_other_kinds_are_skipped() {
        let c = check_manifest(&format!(
            "{JOB}  repairedAt: 1\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n"
        ));
        assert_eq!(c.problems, vec![]);
        assert_eq!(c.resources, ["AnticompactionJob/j"]);
        assert_eq!(c.skipped, ["Secret/s"]);
    }

    #[test]
    fn problems_carry_the_controllers_reason_and_field() {
        let p = validate_manifest(&format!(
            "{JOB}  repairedAt: 1\n  transientRanges:\n    - {{start: \"0\", end: \"5\"}}\n"
        ));
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].reason, Reason::InvalidRepairMetadata);
        assert_eq!(p[0].field, "spec.transientRanges");
        let p = validate_manifest(&format!("{JOB}  repairedAt: 1\n").replace("\"10\"", "\"x\""));
        assert_eq!(p[0].reason, Reason::InvalidRange, "{p:?}");
        assert_eq!(p[0].field, "spec.ranges[0].end");
        let p = validate_manifest(&JOB.replace("nodeName: n1", "nodeName: n2"));
        assert!(p.iter().any(|p| p.field == "metadata.labels"), "{p:?}");
        let p = validate_manifest("apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata: {name: j}\nspec: {}\n");
        assert_eq!(p[0].reason, Reason::InvalidSpec);
        assert!(p[0].message.contains("missing field"), "{p:?}");
    }
}
