//! `cleave validate`: the controller and the CRD, offline (CI pipelines, every example the
//! project ships). Per document: the CRD's `openAPIV3Schema` as an apiserver applies it
//! (`schema`, generic over the generated CRD) and the controller's own checks — the one
//! function the reconcilers call before they act, `Kind::problems` — so neither the CLI nor
//! the controller can pass what the other refuses. Every problem of a document is reported,
//! one per field.
//!
//! Documents of other kinds (a CassandraDatacenter, a Secret) are not cleave's: they are
//! listed as skipped, not judged.

use serde_json::Value;

use super::core::Kind;
use super::crd::{AnticompactionJob, CleanupJob, RangeStream};
use super::schema::{self, SpecProblem};
use crate::reason::Reason;

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

/// Every problem the controller would find in `yaml` (one or more documents).
pub fn validate_manifest(yaml: &str) -> Vec<Problem> {
    check_manifest(yaml).problems
}

/// The problems of one document of kind `K`: when it parses as `K`, what the controller's
/// `Kind::problems` says (schema and checks); when it does not (a type error), the schema's
/// problems, which name the field (serde's error names none).
fn problems_of<K: Kind>(doc: Value) -> Vec<SpecProblem> {
    let spec = doc["spec"].clone();
    let raw = schema::spec_problems(K::KIND, &spec);
    match serde_json::from_value::<K>(doc) {
        Ok(obj) => obj.problems_in(&spec),
        Err(_) if !raw.is_empty() => raw,
        Err(e) => vec![SpecProblem::new("spec", Reason::InvalidSpec, e.to_string())],
    }
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
        let mut problem = |p: SpecProblem| {
            out.problems.push(Problem {
                document: i,
                object: object.clone(),
                reason: p.reason,
                field: p.field,
                message: p.message,
            })
        };
        if api != "cleave.dev/v1alpha1" {
            problem(SpecProblem::new(
                "apiVersion",
                Reason::InvalidSpec,
                format!("{api:?}: this cleave serves cleave.dev/v1alpha1"),
            ));
            continue;
        }
        let found = match kind.as_str() {
            "AnticompactionJob" => problems_of::<AnticompactionJob>(doc),
            "RangeStream" => problems_of::<RangeStream>(doc),
            "CleanupJob" => problems_of::<CleanupJob>(doc),
            "DatacenterCleanup" => {
                crate::operator::datacenter::crd::DatacenterCleanup::problems_in(&doc["spec"])
            }
            _ => {
                problem(SpecProblem::new(
                    "kind",
                    Reason::InvalidSpec,
                    format!("{kind:?}: cleave.dev/v1alpha1 has AnticompactionJob, RangeStream, CleanupJob and DatacenterCleanup"),
                ));
                continue;
            }
        };
        found.into_iter().for_each(&mut problem);
        out.resources.push(object);
    }
    out
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
        assert!(
            p.iter()
                .any(|p| (p.field.as_str(), p.message.as_str()) == ("spec.nodeName", "must be set")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|p| p.field == "spec.keyspace"),
            "every problem: {p:?}"
        );
    }
}
