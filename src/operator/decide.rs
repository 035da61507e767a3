//! What to do next with a job, from its spec and status alone: validation, ownership
//! (a heartbeat lease in status), TTL after finishing, which jobs may not run side by side.
//! Pure, so every rule is unit-tested.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::core::Kind;
use super::crd::{AnticompactionJobSpec, JobStatus, RangeStreamSpec};
use super::status;
use crate::reason::{Failure, Reason};
use crate::split::spec::{RepairSession, RepairedRanges};
use crate::sstable::{Partitioner, TokenRange};

/// The label job creators set so that only the named node's sidecar watches the job
/// (a server-side label selector); it must equal `spec.nodeName`.
pub const NODE_LABEL: &str = "cleave.dev/node";

/// A worker that has not heartbeated for this long has lost the job.
pub const LEASE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Another node's job.
    Ignore,
    /// Invalid spec: fail with this reason and message.
    Fail(Failure),
    /// Start (or continue: results already in status are skipped).
    Run,
    /// Another live worker holds it; look again later.
    Wait(Duration),
    /// Done; delete after this long (TTL), or keep forever.
    Finished(Option<Duration>),
    /// TTL expired.
    Delete,
    /// `publish: OnRestart` staged its children: look for apply-pending's outcome
    /// (`core::restart`), no lease needed (the node's files are the state).
    AwaitRestart,
}

pub fn is_finished(s: Option<&JobStatus>) -> bool {
    status::phase(s).is_finished()
}

/// Seconds since the epoch of an RFC 3339 time written by `now_rfc3339`.
pub fn parse_time(s: &str) -> Option<i64> {
    s.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

pub fn now_rfc3339() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| now.to_string())
}

/// The spec checks no file is needed for (tokens are parsed once the sstables' partitioner is
/// known, by `validate_ranges`).
pub fn validate_spec(spec: &AnticompactionJobSpec) -> Result<(), Failure> {
    let bad = |reason: Reason, msg: String| Err(Failure::new(reason, msg));
    if spec.node_name.trim().is_empty() {
        return bad(Reason::InvalidSpec, "spec.nodeName is empty".to_string());
    }
    if spec.keyspace.trim().is_empty() || spec.keyspace.contains('/') {
        return bad(
            Reason::InvalidSpec,
            format!("spec.keyspace {:?} is not a keyspace name", spec.keyspace),
        );
    }
    if let Some(t) = spec.tables.iter().find(|t| t.is_empty() || t.contains('/')) {
        return bad(
            Reason::InvalidSpec,
            format!("spec.tables: {t:?} is not a table name"),
        );
    }
    if spec.ranges.is_empty() {
        return bad(
            Reason::InvalidSpec,
            "spec.ranges is empty: a repair session covers at least one range".to_string(),
        );
    }
    match (spec.repaired_at, &spec.pending_repair) {
        (Some(_), Some(_)) | (None, None) => return bad(Reason::InvalidRepairMetadata, "exactly one of spec.repairedAt and spec.pendingRepair must be set".to_string()),
        (Some(ms), None) if ms <= 0 => return bad(Reason::InvalidRepairMetadata, format!("spec.repairedAt {ms}: expected milliseconds since the epoch")),
        (Some(_), None) if !spec.transient_ranges.is_empty() => {
            return bad(Reason::InvalidRepairMetadata, "spec.transientRanges needs spec.pendingRepair: transient data is never marked repaired".to_string())
        }
        (None, Some(u)) if uuid::Uuid::parse_str(u).is_err() => return bad(Reason::InvalidRepairMetadata, format!("spec.pendingRepair {u:?} is not a UUID")),
        _ => {}
    }
    check_parallelism(spec.parallelism)?;
    if let Some(t) = spec.ttl_seconds_after_finished {
        if t < 0 {
            return bad(
                Reason::InvalidSpec,
                format!("spec.ttlSecondsAfterFinished {t} is negative"),
            );
        }
    }
    Ok(())
}

/// `spec.parallelism`: unset, or at least 1 (the CRD's schema says so to an apiserver; a
/// local manifest is checked here).
pub fn check_parallelism(p: Option<u32>) -> Result<(), Failure> {
    if p == Some(0) {
        return Err(Failure::new(
            Reason::InvalidSpec,
            "spec.parallelism must be at least 1",
        ));
    }
    Ok(())
}

/// `spec.<what>` as the engine's ranges in partitioner `p`; a token that does not parse is
/// `InvalidRange` naming `spec.<what>[i].start|end`.
pub fn parse_token_ranges(
    what: &str,
    rs: &[super::crd::TokenRange],
    p: Partitioner,
) -> Result<Vec<TokenRange>, Failure> {
    rs.iter()
        .enumerate()
        .map(|(i, r)| {
            let l = p.parse_token(&r.start).map_err(|e| {
                Failure::new(Reason::InvalidRange, format!("spec.{what}[{i}].start: {e}"))
            })?;
            let h = p.parse_token(&r.end).map_err(|e| {
                Failure::new(Reason::InvalidRange, format!("spec.{what}[{i}].end: {e}"))
            })?;
            Ok(TokenRange::new(l, h))
        })
        .collect()
}

/// The ranges as the split engine takes them, for the sstables' partitioner.
pub fn validate_ranges(
    spec: &AnticompactionJobSpec,
    p: Partitioner,
) -> Result<RepairedRanges, Failure> {
    let session = match (&spec.repaired_at, &spec.pending_repair) {
        (Some(ms), _) => RepairSession::RepairedAt(*ms),
        (None, Some(u)) => RepairSession::Pending(
            *uuid::Uuid::parse_str(u)
                .map_err(|e| Failure::new(Reason::InvalidRepairMetadata, e.to_string()))?
                .as_bytes(),
        ),
        (None, None) => {
            return Err(Failure::new(
                Reason::InvalidRepairMetadata,
                "no repairedAt or pendingRepair",
            ))
        }
    };
    let r = RepairedRanges {
        full: parse_token_ranges("ranges", &spec.ranges, p)?,
        transient: parse_token_ranges("transientRanges", &spec.transient_ranges, p)?,
        session,
    };
    r.validate(p)
        .map_err(|m| Failure::new(Reason::InvalidRange, m))?;
    Ok(r)
}

/// What to do with a resource of any kind, from itself alone: another node's → ignore;
/// finished → wait for its TTL, then delete; invalid → fail; held by a live worker → wait;
/// else run (a Running resource whose worker stopped is resumed).
pub fn next<K: Kind>(obj: &K, node: &str, me: &str, now: i64) -> Next {
    if obj.acting_node() != node {
        return Next::Ignore;
    }
    let status = obj.status();
    if is_finished(status) {
        let done = status
            .and_then(|s| s.completion_time.as_deref())
            .and_then(parse_time);
        return match (obj.ttl_seconds_after_finished(), done) {
            (Some(ttl), Some(done)) => {
                let left = done + ttl - now;
                if left <= 0 {
                    Next::Delete
                } else {
                    Next::Finished(Some(Duration::from_secs(left as u64)))
                }
            }
            (Some(ttl), None) => Next::Finished(Some(Duration::from_secs(ttl.max(1) as u64))),
            (None, _) => Next::Finished(None),
        };
    }
    if status::phase(status) == status::Phase::AwaitingRestart {
        return Next::AwaitRestart;
    }
    if let Err(f) = obj.validate() {
        return Next::Fail(f);
    }
    lease_holder_wait(status, me, now).unwrap_or(Next::Run)
}

/// The RangeStream spec checks no file is needed for (tokens parse for some partitioner;
/// the sstables' own one is applied when they are planned).
pub fn validate_stream(spec: &RangeStreamSpec) -> Result<(), Failure> {
    if spec.source_node.is_empty() || spec.destination.node_name.is_empty() {
        return Err(Failure::new(
            Reason::InvalidSpec,
            "spec.sourceNode and spec.destination.nodeName are required",
        ));
    }
    if spec.source_node == spec.destination.node_name {
        return Err(Failure::new(
            Reason::InvalidSpec,
            "spec.destination.nodeName is the source node",
        ));
    }
    if spec.destination.endpoint.is_none() && spec.destination.service.is_none() {
        return Err(Failure::new(
            Reason::InvalidSpec,
            "spec.destination needs an endpoint or a service",
        ));
    }
    if let Some(e) = &spec.destination.endpoint {
        if e.rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Err(Failure::new(
                Reason::InvalidSpec,
                format!("spec.destination.endpoint {e:?} is not host:port"),
            ));
        }
    }
    if spec.ranges.is_empty() {
        return Err(Failure::new(Reason::InvalidSpec, "spec.ranges is empty"));
    }
    if spec.keyspace.is_empty() {
        return Err(Failure::new(Reason::InvalidSpec, "spec.keyspace is empty"));
    }
    for (i, r) in spec.ranges.iter().enumerate() {
        // The partitioner is the sstables'; a token must parse for at least one.
        let ok = [
            crate::sstable::Partitioner::Murmur3,
            crate::sstable::Partitioner::Random,
            crate::sstable::Partitioner::ByteOrdered,
        ]
        .iter()
        .any(|p| p.parse_token(&r.start).is_ok() && p.parse_token(&r.end).is_ok());
        if !ok {
            return Err(Failure::new(
                Reason::InvalidRange,
                format!("spec.ranges[{i}]: ({}, {}] are not tokens", r.start, r.end),
            ));
        }
    }
    Ok(())
}

/// `Wait` while another identity's heartbeat is younger than the lease.
fn lease_holder_wait(status: Option<&JobStatus>, me: &str, now: i64) -> Option<Next> {
    let w = status.and_then(|s| s.worker.as_ref())?;
    let age = now - parse_time(&w.heartbeat_time).unwrap_or(0);
    (w.identity != me && age < LEASE.as_secs() as i64).then(|| {
        Next::Wait(Duration::from_secs(
            (LEASE.as_secs() as i64 - age).max(1) as u64
        ))
    })
}

/// The tables a job works on, for "one job per table at a time" (two jobs splitting the
/// same parents would each publish children of the same rows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableClaim {
    pub data_dir: PathBuf,
    pub keyspace: String,
    /// Empty: every table of the keyspace.
    pub tables: Vec<String>,
}

/// A job's data directory: `spec.dataDirectory`, else the sidecar's `--data-dir`.
pub fn data_dir(data_directory: Option<&str>, default: &Path) -> PathBuf {
    data_directory.map_or_else(|| default.to_path_buf(), PathBuf::from)
}

impl TableClaim {
    pub fn of(spec: &AnticompactionJobSpec, default_data_dir: &Path) -> TableClaim {
        TableClaim {
            data_dir: data_dir(spec.data_directory.as_deref(), default_data_dir),
            keyspace: spec.keyspace.clone(),
            tables: spec.tables.clone(),
        }
    }

    pub fn conflicts(&self, other: &TableClaim) -> bool {
        self.data_dir == other.data_dir
            && self.keyspace == other.keyspace
            && (self.tables.is_empty()
                || other.tables.is_empty()
                || self.tables.iter().any(|t| other.tables.contains(t)))
    }

    /// `ks.t1,t2` or `ks.*`, for messages.
    pub fn describe(&self) -> String {
        if self.tables.is_empty() {
            format!("{}.*", self.keyspace)
        } else {
            format!("{}.{}", self.keyspace, self.tables.join(","))
        }
    }
}

/// The node label must name the same node as `spec.nodeName`: a mismatch means the job
/// was routed to this sidecar by mistake (it would never reach the named node's).
pub fn check_node_label(
    labels: &std::collections::BTreeMap<String, String>,
    node_name: &str,
) -> Result<(), Failure> {
    match labels.get(NODE_LABEL) {
        Some(l) if *l != node_name => Err(Failure::new(
            Reason::InvalidSpec,
            format!("label {NODE_LABEL}={l} does not match spec.nodeName {node_name:?}"),
        )),
        _ => Ok(()),
    }
}

/// `spec.partitioner` (absent: Murmur3 or Random, the decimal notation) against the partitioner the
/// sstables record in Statistics.db (`ValidationMetadata.partitioner`). The schema checks
/// the tokens' notation against `spec.partitioner` at admission; this catches a spec that
/// names the wrong one (its tokens would mean other keys). Fail with `InvalidSpec`.
pub fn check_partitioner(
    spec_value: Option<Partitioner>,
    sstable_partitioner: Partitioner,
) -> Result<(), String> {
    let spec = spec_value.unwrap_or(Partitioner::Murmur3);
    // Absent, the tokens were admitted in decimal notation, which Random shares with
    // Murmur3: they mean what the sstables' partitioner says they mean.
    let same_notation = spec_value.is_none() && sstable_partitioner == Partitioner::Random;
    if spec == sstable_partitioner || same_notation {
        return Ok(());
    }
    let short = |p: Partitioner| format!("{p:?}");
    Err(format!(
        "spec.partitioner is {}{} but the sstables were written by {}: set spec.partitioner: {} \
         (and its token notation)",
        short(spec),
        if spec_value.is_none() {
            " (the default)"
        } else {
            ""
        },
        sstable_partitioner.class_name(),
        short(sstable_partitioner),
    ))
}

/// The fields of a spec the schema does not know, as one message (`spec.dryrun is not a
/// field (did you mean spec.dryRun?)`), or `Ok` when there are none. The CRD keeps unknown
/// fields so that they reach this check: a misspelt `dryRun` must not make a dry run
/// real. Fail with `InvalidSpec`.
pub fn check_unknown_fields(
    kind: &str,
    unknown: &[super::crd::UnknownField],
) -> Result<(), String> {
    if unknown.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = unknown.iter().map(|u| u.to_string()).collect();
    Err(format!(
        "{}; a {kind} refuses fields it does not know instead of ignoring them",
        list.join("; ")
    ))
}

/// What the CRD schema refuses at admission and [`validate_spec`] does not check, for
/// manifests that reach cleave without an apiserver (`cleave run --local`): unknown fields
/// and `maxBytesPerSecond: 0` (it would throttle to nothing; unset is unlimited). Fail with
/// `InvalidSpec`.
pub fn check_schema_rules_job(spec: &AnticompactionJobSpec) -> Result<(), String> {
    check_unknown_fields("AnticompactionJob", &spec.unknown_fields_explained())?;
    check_rate(spec.max_bytes_per_second)
}

/// [`check_schema_rules_job`] for a RangeStream, plus `endpoint` and `service` both set
/// ([`validate_stream`] refuses neither, the schema refuses both).
pub fn check_schema_rules_stream(spec: &RangeStreamSpec) -> Result<(), String> {
    check_unknown_fields("RangeStream", &spec.unknown_fields_explained())?;
    check_rate(spec.max_bytes_per_second)?;
    if spec.destination.endpoint.is_some() && spec.destination.service.is_some() {
        return Err("spec.destination has both endpoint and service: set exactly one".to_string());
    }
    Ok(())
}

/// `maxBytesPerSecond: 0` refused (it would throttle to nothing; unset is unlimited).
pub fn check_rate(max_bytes_per_second: Option<u64>) -> Result<(), String> {
    match max_bytes_per_second {
        Some(0) => Err(
            "spec.maxBytesPerSecond is 0: it must be at least 1 (leave it unset for no limit)"
                .to_string(),
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::crd::{TokenRange as R, Worker};
    use super::*;

    fn spec() -> AnticompactionJobSpec {
        AnticompactionJobSpec::for_tests()
    }

    fn job(
        spec: AnticompactionJobSpec,
        status: Option<JobStatus>,
    ) -> super::super::crd::AnticompactionJob {
        let mut j = super::super::crd::AnticompactionJob::new("j", spec);
        j.status = status;
        j
    }

    #[test]
    fn other_nodes_jobs_are_ignored() {
        assert_eq!(next(&job(spec(), None), "n2", "me", 0), Next::Ignore);
        assert_eq!(next(&job(spec(), None), "n1", "me", 0), Next::Run);
    }

    #[test]
    fn invalid_specs_fail_with_a_reason() {
        let mut s = spec();
        s.pending_repair = Some("6a3f4c2e-1d2b-11ef-9c4e-0242ac120002".into());
        assert!(
            matches!(next(&job(s, None), "n1", "me", 0), Next::Fail(f) if f.reason == Reason::InvalidRepairMetadata)
        );
        let mut s = spec();
        s.ranges.clear();
        assert!(matches!(next(&job(s, None), "n1", "me", 0), Next::Fail(_)));
        let mut s = spec();
        s.transient_ranges = vec![R {
            start: "1".into(),
            end: "2".into(),
        }];
        assert!(matches!(next(&job(s, None), "n1", "me", 0), Next::Fail(_)));
        let s = spec();
        assert!(validate_ranges(
            &AnticompactionJobSpec {
                ranges: vec![R {
                    start: "x".into(),
                    end: "1".into()
                }],
                ..s
            },
            Partitioner::Murmur3
        )
        .is_err());
    }

    #[test]
    fn a_fresh_lease_of_another_worker_waits_a_stale_one_is_taken_over() {
        let now = 1_800_000_000;
        let beat = k8s_openapi::jiff::Timestamp::from_second(now - 5)
            .unwrap()
            .to_string();
        let st = JobStatus {
            phase: Some(status::Phase::Running),
            worker: Some(Worker {
                identity: "other".into(),
                heartbeat_time: beat,
            }),
            ..Default::default()
        };
        assert!(matches!(
            next(&job(spec(), Some(st.clone())), "n1", "me", now),
            Next::Wait(_)
        ));
        assert_eq!(
            next(&job(spec(), Some(st.clone())), "n1", "other", now),
            Next::Run,
            "our own lease: resume"
        );
        assert_eq!(
            next(&job(spec(), Some(st.clone())), "n1", "me", now + 60),
            Next::Run,
            "stale: take over"
        );
    }

    #[test]
    fn ttl_after_finishing() {
        let now = 1_800_000_000;
        let done = k8s_openapi::jiff::Timestamp::from_second(now - 10)
            .unwrap()
            .to_string();
        let st = JobStatus {
            phase: Some(status::Phase::Complete),
            completion_time: Some(done),
            ..Default::default()
        };
        assert_eq!(
            next(&job(spec(), Some(st.clone())), "n1", "me", now),
            Next::Finished(None)
        );
        let s = AnticompactionJobSpec {
            ttl_seconds_after_finished: Some(60),
            ..spec()
        };
        assert_eq!(
            next(&job(s, Some(st.clone())), "n1", "me", now),
            Next::Finished(Some(Duration::from_secs(50)))
        );
        let s = AnticompactionJobSpec {
            ttl_seconds_after_finished: Some(5),
            ..spec()
        };
        assert_eq!(
            next(&job(s, Some(st.clone())), "n1", "me", now),
            Next::Delete
        );
    }

    #[test]
    fn jobs_conflict_on_a_shared_table_or_a_whole_keyspace() {
        let c = |ks: &str, t: &[&str]| TableClaim {
            data_dir: "/d".into(),
            keyspace: ks.into(),
            tables: t.iter().map(|s| s.to_string()).collect(),
        };
        assert!(c("ks", &["a"]).conflicts(&c("ks", &["a", "b"])));
        assert!(!c("ks", &["a"]).conflicts(&c("ks", &["b"])));
        assert!(c("ks", &[]).conflicts(&c("ks", &["b"])));
        assert!(!c("ks", &[]).conflicts(&c("ks2", &[])));
        let mut other_dir = c("ks", &["a"]);
        other_dir.data_dir = "/e".into();
        assert!(!other_dir.conflicts(&c("ks", &["a"])));
    }

    #[test]
    fn the_node_label_must_match_the_node_name() {
        let mut l = std::collections::BTreeMap::new();
        assert!(
            check_node_label(&l, &spec().node_name).is_ok(),
            "no label: the client-side filter decides"
        );
        l.insert(NODE_LABEL.to_string(), "n1".to_string());
        assert!(check_node_label(&l, &spec().node_name).is_ok());
        l.insert(NODE_LABEL.to_string(), "n2".to_string());
        assert!(check_node_label(&l, &spec().node_name).is_err());
    }

    #[test]
    fn the_partitioner_of_the_spec_must_be_the_sstables() {
        assert!(check_partitioner(None, Partitioner::Murmur3).is_ok());
        assert!(check_partitioner(Some(Partitioner::Random), Partitioner::Random).is_ok());
        let e = check_partitioner(None, Partitioner::ByteOrdered).unwrap_err();
        assert!(
            e.contains("Murmur3 (the default)")
                && e.contains("org.apache.cassandra.dht.ByteOrderedPartitioner")
                && e.contains("spec.partitioner: ByteOrdered"),
            "{e}"
        );
        assert!(check_partitioner(Some(Partitioner::Murmur3), Partitioner::Random).is_err());
        assert!(check_partitioner(None, Partitioner::Random).is_ok());
    }

    #[test]
    fn a_misspelt_field_is_refused_with_the_field_it_resembles() {
        let j: AnticompactionJobSpec = serde_json::from_value(serde_json::json!({
            "nodeName": "n1", "keyspace": "ks", "ranges": [{"start": "0", "end": "1"}],
            "repairedAt": 1, "dryrun": true,
        }))
        .unwrap();
        assert!(!j.dry_run, "the typo is not taken for dryRun");
        let e = check_schema_rules_job(&j).unwrap_err();
        assert!(
            e.contains("spec.dryrun is not a field (did you mean spec.dryRun?)"),
            "{e}"
        );
        assert!(check_schema_rules_job(&spec()).is_ok());
        let mut zero = spec();
        zero.max_bytes_per_second = Some(0);
        assert!(check_schema_rules_job(&zero)
            .unwrap_err()
            .contains("maxBytesPerSecond"));

        let s: RangeStreamSpec = serde_json::from_value(serde_json::json!({
            "sourceNode": "n1", "keyspace": "ks", "ranges": [{"start": "0", "end": "1"}],
            "destination": {"nodeName": "n2", "endpoint": "h:1", "service": "s"},
        }))
        .unwrap();
        assert!(check_schema_rules_stream(&s)
            .unwrap_err()
            .contains("both endpoint and service"));
        let s: RangeStreamSpec = serde_json::from_value(serde_json::json!({
            "sourceNode": "n1", "keyspace": "ks", "ranges": [{"start": "0", "end": "1"}],
            "destination": {"nodeName": "n2", "service": "s", "nodname": "n3"},
        }))
        .unwrap();
        let e = check_schema_rules_stream(&s).unwrap_err();
        assert!(
            e.contains(
                "spec.destination.nodname is not a field (did you mean spec.destination.nodeName?)"
            ),
            "{e}"
        );
    }
}
