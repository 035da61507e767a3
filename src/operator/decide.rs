//! What to do next with a job, from its spec and status alone: validation, ownership
//! (a heartbeat lease in status), TTL after finishing. Pure, so every rule is unit-tested.

use std::time::Duration;

use super::crd::{AnticompactionJobSpec, Condition, JobStatus};
use crate::split::spec::{RepairSession, RepairedRanges};
use crate::sstable::{Partitioner, TokenRange};

pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_PLANNED: &str = "Planned";
pub const PHASE_COMPLETE: &str = "Complete";
pub const PHASE_FAILED: &str = "Failed";

/// A worker that has not heartbeated for this long has lost the job.
pub const LEASE: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Another node's job.
    Ignore,
    /// Invalid spec: fail with this reason and message.
    Fail { reason: String, message: String },
    /// Start (or continue: results already in status are skipped).
    Run,
    /// Another live worker holds it; look again later.
    Wait(Duration),
    /// Done; delete after this long (TTL), or keep forever.
    Finished(Option<Duration>),
    /// TTL expired.
    Delete,
}

pub fn is_finished(s: Option<&JobStatus>) -> bool {
    matches!(
        s.and_then(|s| s.phase.as_deref()),
        Some(PHASE_COMPLETE) | Some(PHASE_FAILED) | Some(PHASE_PLANNED)
    )
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
pub fn validate_spec(spec: &AnticompactionJobSpec) -> Result<(), (String, String)> {
    let bad = |reason: &str, msg: String| Err((reason.to_string(), msg));
    if spec.node_name.trim().is_empty() {
        return bad("InvalidSpec", "spec.nodeName is empty".into());
    }
    if spec.keyspace.trim().is_empty() || spec.keyspace.contains('/') {
        return bad(
            "InvalidSpec",
            format!("spec.keyspace {:?} is not a keyspace name", spec.keyspace),
        );
    }
    if let Some(t) = spec.tables.iter().find(|t| t.is_empty() || t.contains('/')) {
        return bad(
            "InvalidSpec",
            format!("spec.tables: {t:?} is not a table name"),
        );
    }
    if spec.ranges.is_empty() {
        return bad(
            "InvalidSpec",
            "spec.ranges is empty: a repair session covers at least one range".into(),
        );
    }
    match (spec.repaired_at, &spec.pending_repair) {
        (Some(_), Some(_)) | (None, None) => return bad("InvalidRepairMetadata", "exactly one of spec.repairedAt and spec.pendingRepair must be set".into()),
        (Some(ms), None) if ms <= 0 => return bad("InvalidRepairMetadata", format!("spec.repairedAt {ms}: expected milliseconds since the epoch")),
        (Some(_), None) if !spec.transient_ranges.is_empty() => {
            return bad("InvalidRepairMetadata", "spec.transientRanges needs spec.pendingRepair: transient data is never marked repaired".into())
        }
        (None, Some(u)) if uuid::Uuid::parse_str(u).is_err() => return bad("InvalidRepairMetadata", format!("spec.pendingRepair {u:?} is not a UUID")),
        _ => {}
    }
    if spec.parallelism == Some(0) {
        return bad("InvalidSpec", "spec.parallelism must be at least 1".into());
    }
    if let Some(t) = spec.ttl_seconds_after_finished {
        if t < 0 {
            return bad(
                "InvalidSpec",
                format!("spec.ttlSecondsAfterFinished {t} is negative"),
            );
        }
    }
    Ok(())
}

/// The ranges as the split engine takes them, for the sstables' partitioner.
pub fn validate_ranges(
    spec: &AnticompactionJobSpec,
    p: Partitioner,
) -> Result<RepairedRanges, (String, String)> {
    let conv =
        |what: &str, rs: &[super::crd::TokenRange]| -> Result<Vec<TokenRange>, (String, String)> {
            rs.iter()
                .enumerate()
                .map(|(i, r)| {
                    let l = p.parse_token(&r.start).map_err(|e| {
                        (
                            "InvalidRange".to_string(),
                            format!("spec.{what}[{i}].start: {e}"),
                        )
                    })?;
                    let h = p.parse_token(&r.end).map_err(|e| {
                        (
                            "InvalidRange".to_string(),
                            format!("spec.{what}[{i}].end: {e}"),
                        )
                    })?;
                    Ok(TokenRange::new(l, h))
                })
                .collect()
        };
    let session = match (&spec.repaired_at, &spec.pending_repair) {
        (Some(ms), _) => RepairSession::RepairedAt(*ms),
        (None, Some(u)) => RepairSession::Pending(
            *uuid::Uuid::parse_str(u)
                .map_err(|e| ("InvalidRepairMetadata".to_string(), e.to_string()))?
                .as_bytes(),
        ),
        (None, None) => {
            return Err((
                "InvalidRepairMetadata".into(),
                "no repairedAt or pendingRepair".into(),
            ))
        }
    };
    let r = RepairedRanges {
        full: conv("ranges", &spec.ranges)?,
        transient: conv("transientRanges", &spec.transient_ranges)?,
        session,
    };
    r.validate(p).map_err(|m| ("InvalidRange".to_string(), m))?;
    Ok(r)
}

/// The decision for `node` (this sidecar, identity `me`) at `now` (seconds).
pub fn decide(
    spec: &AnticompactionJobSpec,
    status: Option<&JobStatus>,
    node: &str,
    me: &str,
    now: i64,
) -> Next {
    if spec.node_name != node {
        return Next::Ignore;
    }
    if is_finished(status) {
        let done = status
            .and_then(|s| s.completion_time.as_deref())
            .and_then(parse_time);
        return match (spec.ttl_seconds_after_finished, done) {
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
    if let Err((reason, message)) = validate_spec(spec) {
        return Next::Fail { reason, message };
    }
    if let Some(w) = status.and_then(|s| s.worker.as_ref()) {
        let beat = parse_time(&w.heartbeat_time).unwrap_or(0);
        let age = now - beat;
        if w.identity != me && age < LEASE.as_secs() as i64 {
            return Next::Wait(Duration::from_secs(
                (LEASE.as_secs() as i64 - age).max(1) as u64
            ));
        }
    }
    Next::Run
}

/// Sets a condition, keeping its transition time when the status does not change
/// (metav1.Condition semantics; conditions are a list-map keyed by type).
pub fn set_condition(
    conds: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let s = if status { "True" } else { "False" };
    match conds.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != s {
                c.last_transition_time = now_rfc3339();
            }
            c.status = s.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => conds.push(Condition {
            type_: type_.into(),
            status: s.into(),
            observed_generation: generation,
            last_transition_time: now_rfc3339(),
            reason: reason.into(),
            message: message.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::crd::{TokenRange as R, Worker};
    use super::*;

    fn spec() -> AnticompactionJobSpec {
        AnticompactionJobSpec {
            node_name: "n1".into(),
            data_directory: None,
            keyspace: "ks".into(),
            tables: vec![],
            sstables: vec![],
            ranges: vec![R {
                start: "0".into(),
                end: "100".into(),
            }],
            transient_ranges: vec![],
            repaired_at: Some(1_700_000_000_000),
            pending_repair: None,
            layout: Default::default(),
            digest: Default::default(),
            publish: Default::default(),
            dry_run: false,
            max_bytes_per_second: None,
            parallelism: None,
            ttl_seconds_after_finished: None,
        }
    }

    #[test]
    fn other_nodes_jobs_are_ignored() {
        assert_eq!(decide(&spec(), None, "n2", "me", 0), Next::Ignore);
        assert_eq!(decide(&spec(), None, "n1", "me", 0), Next::Run);
    }

    #[test]
    fn invalid_specs_fail_with_a_reason() {
        let mut s = spec();
        s.pending_repair = Some("6a3f4c2e-1d2b-11ef-9c4e-0242ac120002".into());
        assert!(
            matches!(decide(&s, None, "n1", "me", 0), Next::Fail { reason, .. } if reason == "InvalidRepairMetadata")
        );
        let mut s = spec();
        s.ranges.clear();
        assert!(matches!(decide(&s, None, "n1", "me", 0), Next::Fail { .. }));
        let mut s = spec();
        s.transient_ranges = vec![R {
            start: "1".into(),
            end: "2".into(),
        }];
        assert!(matches!(decide(&s, None, "n1", "me", 0), Next::Fail { .. }));
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
            phase: Some(PHASE_RUNNING.into()),
            worker: Some(Worker {
                identity: "other".into(),
                heartbeat_time: beat,
            }),
            ..Default::default()
        };
        assert!(matches!(
            decide(&spec(), Some(&st), "n1", "me", now),
            Next::Wait(_)
        ));
        assert_eq!(
            decide(&spec(), Some(&st), "n1", "other", now),
            Next::Run,
            "our own lease: resume"
        );
        assert_eq!(
            decide(&spec(), Some(&st), "n1", "me", now + 60),
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
            phase: Some(PHASE_COMPLETE.into()),
            completion_time: Some(done),
            ..Default::default()
        };
        assert_eq!(
            decide(&spec(), Some(&st), "n1", "me", now),
            Next::Finished(None)
        );
        let s = AnticompactionJobSpec {
            ttl_seconds_after_finished: Some(60),
            ..spec()
        };
        assert_eq!(
            decide(&s, Some(&st), "n1", "me", now),
            Next::Finished(Some(Duration::from_secs(50)))
        );
        let s = AnticompactionJobSpec {
            ttl_seconds_after_finished: Some(5),
            ..spec()
        };
        assert_eq!(decide(&s, Some(&st), "n1", "me", now), Next::Delete);
    }

    #[test]
    fn conditions_keep_transition_time_when_unchanged() {
        let mut c = Vec::new();
        set_condition(&mut c, "Running", true, "Started", "", Some(1));
        let t = c[0].last_transition_time.clone();
        set_condition(&mut c, "Running", true, "Progress", "1/2", Some(1));
        assert_eq!(c[0].last_transition_time, t);
        assert_eq!(c.len(), 1);
        set_condition(&mut c, "Complete", true, "Done", "", Some(1));
        assert_eq!(c.len(), 2);
    }
}
