//! What to do next with a job, from its spec and status alone: validation, ownership
//! (a heartbeat lease in status), TTL after finishing, which jobs may not run side by side.
//! Pure, so every rule is unit-tested.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::core::Kind;
use super::crd::{AnticompactionJobSpec, JobMode, JobStatus, Publish, RangeStreamSpec};
use super::schema::SpecProblem;
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

/// The spec checks no file is needed for, every problem at once (tokens are parsed in the
/// notation of `spec.partitioner` here, and again once the sstables' own partitioner is
/// known, by `validate_ranges`).
pub fn job_checks(spec: &AnticompactionJobSpec) -> Vec<SpecProblem> {
    let mut v = Vec::new();
    if spec.node_name.trim().is_empty() {
        v.push(SpecProblem::new(
            "spec.nodeName",
            Reason::InvalidSpec,
            "is empty",
        ));
    }
    v.extend(name_checks(&spec.keyspace, &spec.tables));
    v.extend(common_job_checks(spec));
    if spec.mode == JobMode::PreSplit {
        v.extend(pre_split_checks(spec));
        return v;
    }
    if spec.ranges.is_empty() {
        v.push(SpecProblem::new(
            "spec.ranges",
            Reason::InvalidSpec,
            "is empty: a repair session covers at least one range",
        ));
    }
    let meta = |field: &str, m: String| SpecProblem::new(field, Reason::InvalidRepairMetadata, m);
    match (spec.repaired_at, &spec.pending_repair) {
        (Some(_), Some(_)) | (None, None) => v.push(
            meta(
                "spec",
                "exactly one of spec.repairedAt and spec.pendingRepair must be set".to_string(),
            )
            .about(&["spec.repairedAt", "spec.pendingRepair"]),
        ),
        (Some(ms), None) if ms <= 0 => v.push(meta(
            "spec.repairedAt",
            format!("{ms}: expected milliseconds since the epoch"),
        )),
        (Some(_), None) if !spec.transient_ranges.is_empty() => v.push(meta(
            "spec.transientRanges",
            "needs spec.pendingRepair: transient data is never marked repaired".to_string(),
        )),
        (None, Some(u)) if uuid::Uuid::parse_str(u).is_err() => {
            v.push(meta("spec.pendingRepair", format!("{u:?} is not a UUID")))
        }
        _ => {}
    }
    let (full, mut bad) = token_checks("ranges", &spec.ranges, spec.partitioner);
    let (transient, bad_t) =
        token_checks("transientRanges", &spec.transient_ranges, spec.partitioner);
    bad.extend(bad_t);
    v.extend(bad);
    let p = spec.partitioner();
    if let (Some(full), Some(transient)) = (full, transient) {
        // Transient ranges without a pending session are refused above already.
        let transient = if spec.pending_repair.is_some() {
            transient
        } else {
            Vec::new()
        };
        v.extend(overlap_check("ranges", p, &full));
        v.extend(overlap_check("transientRanges", p, &transient));
        if let Some((f, t)) = crate::split::spec::overlapping_across(p, &full, &transient) {
            v.push(SpecProblem::new(
                "spec.transientRanges",
                Reason::InvalidRange,
                format!(
                    "({}, {}] overlaps the full range ({}, {}]: a token is either fully or transiently replicated",
                    t.left, t.right, f.left, f.right
                ),
            ));
        }
    }
    v
}

/// The checks of every AnticompactionJob, whatever its mode.
fn common_job_checks(spec: &AnticompactionJobSpec) -> Vec<SpecProblem> {
    let mut v = Vec::new();
    v.extend(parallelism_check(spec.parallelism));
    if let Some(t) = spec.ttl_seconds_after_finished.filter(|t| *t < 0) {
        v.push(SpecProblem::new(
            "spec.ttlSecondsAfterFinished",
            Reason::InvalidSpec,
            format!("{t} is negative"),
        ));
    }
    v.extend(rate_check(spec.max_bytes_per_second));
    v.extend(target_check(spec.target_cassandra.as_deref()));
    v
}

/// A pre-split takes its tokens from the ring and keeps each parent's repair state: a
/// field of an anticompaction would be silently ignored, so it is refused. The ring's
/// tokens are Murmur3 (`/api/v2/tokens/rangetoendpoint` parses them as `Long`).
fn pre_split_checks(spec: &AnticompactionJobSpec) -> Vec<SpecProblem> {
    let mut v = Vec::new();
    let set = [
        ("spec.ranges", !spec.ranges.is_empty()),
        ("spec.transientRanges", !spec.transient_ranges.is_empty()),
        ("spec.repairedAt", spec.repaired_at.is_some()),
        ("spec.pendingRepair", spec.pending_repair.is_some()),
    ];
    for (field, _) in set.iter().filter(|(_, on)| *on) {
        v.push(SpecProblem::new(
            *field,
            Reason::InvalidSpec,
            "is set with mode: PreSplit, which cuts at the ring's tokens and keeps each sstable's repair state",
        ));
    }
    // The ring is read while Cassandra runs, and the children must replace their parents:
    // staged children imported beside them would hold every row twice (and the straddling
    // parents would still be anticompacted), and a Replace needs Cassandra stopped, when
    // it answers no ring query (also a maintenance window resumed after its stop).
    if spec.publish != Publish::OnRestart {
        v.push(SpecProblem::new(
            "spec.publish",
            Reason::InvalidSpec,
            format!(
                "{:?} with mode: PreSplit: expected OnRestart (the ring is read while Cassandra runs; the children replace their parents at its next start)",
                spec.publish
            ),
        ));
    }
    if spec.partitioner() != Partitioner::Murmur3 {
        v.push(SpecProblem::new(
            "spec.partitioner",
            Reason::InvalidSpec,
            format!(
                "{:?} with mode: PreSplit: the management API's ring is in Murmur3 tokens",
                spec.partitioner()
            ),
        ));
    }
    v
}

/// [`job_checks`]' first problem as a failure (the unit tests' and older callers' form).
pub fn validate_spec(spec: &AnticompactionJobSpec) -> Result<(), Failure> {
    match super::schema::failure_of(&job_checks(spec)) {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// `spec.keyspace` and `spec.tables` become directory names.
pub fn name_checks(keyspace: &str, tables: &[String]) -> Vec<SpecProblem> {
    let mut v = Vec::new();
    if keyspace.trim().is_empty() || keyspace.contains('/') {
        v.push(SpecProblem::new(
            "spec.keyspace",
            Reason::InvalidSpec,
            format!("{keyspace:?} is not a keyspace name"),
        ));
    }
    for (i, t) in tables.iter().enumerate() {
        if t.trim().is_empty() || t.contains('/') {
            v.push(SpecProblem::new(
                format!("spec.tables[{i}]"),
                Reason::InvalidSpec,
                format!("{t:?} is not a table name"),
            ));
        }
    }
    v
}

/// `spec.targetCassandra`, when set, must name a Cassandra release (`4.1`, `5.0.5`): a typo
/// must not silently mean "unknown".
pub fn target_check(target: Option<&str>) -> Option<SpecProblem> {
    let t = target?;
    crate::sstable::cassandra::TargetCassandra::parse(t)
        .err()
        .map(|m| SpecProblem::new("spec.targetCassandra", Reason::InvalidSpec, m))
}

/// The tokens of `spec.<what>` in the notation of `spec.partitioner` (absent: Murmur3, the
/// documented default: a 19-digit number above 2^63-1 is `InvalidRange`, docs/crd-reference.md;
/// a Random cluster says `partitioner: Random`). Every token that does not parse is an
/// `InvalidRange` problem; the ranges when all parsed.
pub fn token_checks(
    what: &str,
    rs: &[super::crd::TokenRange],
    partitioner: Option<Partitioner>,
) -> (Option<Vec<TokenRange>>, Vec<SpecProblem>) {
    let p = partitioner.unwrap_or(Partitioner::Murmur3);
    let mut bad = Vec::new();
    let mut out = Some(Vec::with_capacity(rs.len()));
    for (i, r) in rs.iter().enumerate() {
        let mut bounds = Vec::with_capacity(2);
        for (end, t) in [("start", &r.start), ("end", &r.end)] {
            match p.parse_token(t) {
                Ok(t) => bounds.push(t),
                Err(e) => bad.push(SpecProblem::new(
                    format!("spec.{what}[{i}].{end}"),
                    Reason::InvalidRange,
                    e.to_string(),
                )),
            }
        }
        match (&mut out, bounds.pop(), bounds.pop()) {
            (Some(o), Some(h), Some(l)) => o.push(TokenRange::new(l, h)),
            _ => out = None,
        }
    }
    (out, bad)
}

/// Two ranges of one list that share a token: `InvalidRange` (no repair session, ring or
/// stream plan lists such ranges: a typo, or two lists pasted together).
pub fn overlap_check(what: &str, p: Partitioner, rs: &[TokenRange]) -> Option<SpecProblem> {
    let (a, b) = crate::split::spec::overlapping(p, rs)?;
    Some(SpecProblem::new(
        format!("spec.{what}"),
        Reason::InvalidRange,
        format!(
            "({}, {}] and ({}, {}] overlap: the ranges must be disjoint",
            a.left, a.right, b.left, b.right
        ),
    ))
}

/// `spec.parallelism`: unset, or at least 1 (the CRD's schema says so to an apiserver; a
/// local manifest is checked here).
pub fn parallelism_check(p: Option<u32>) -> Option<SpecProblem> {
    (p == Some(0)).then(|| {
        SpecProblem::new(
            "spec.parallelism",
            Reason::InvalidSpec,
            "must be at least 1",
        )
    })
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

/// The RangeStream spec checks no file is needed for, every problem at once (tokens in
/// `spec.partitioner`'s notation when set, else in any partitioner's: the sstables' own one
/// is applied when they are planned).
pub fn stream_checks(spec: &RangeStreamSpec) -> Vec<SpecProblem> {
    let mut v = Vec::new();
    let bad = |field: &str, m: &str| SpecProblem::new(field, Reason::InvalidSpec, m);
    if spec.source_node.is_empty() {
        v.push(bad("spec.sourceNode", "is empty"));
    }
    let d = &spec.destination;
    if d.node_name.is_empty() {
        v.push(bad("spec.destination.nodeName", "is empty"));
    } else if spec.source_node == d.node_name {
        v.push(bad("spec.destination.nodeName", "is the source node"));
    }
    let both = ["spec.destination.endpoint", "spec.destination.service"];
    match (&d.endpoint, &d.service) {
        (None, None) => {
            v.push(bad("spec.destination", "needs an endpoint or a service").about(&both))
        }
        (Some(_), Some(_)) => v.push(
            bad(
                "spec.destination",
                "has both endpoint and service: set exactly one",
            )
            .about(&both),
        ),
        _ => {}
    }
    if let Some(e) = &d.endpoint {
        if e.rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            v.push(SpecProblem::new(
                "spec.destination.endpoint",
                Reason::InvalidSpec,
                format!("{e:?} is not host:port"),
            ));
        }
    }
    if spec.ranges.is_empty() {
        v.push(bad("spec.ranges", "is empty"));
    }
    if spec.keyspace.is_empty() {
        v.push(bad("spec.keyspace", "is empty"));
    } else {
        v.extend(name_checks(&spec.keyspace, &spec.tables));
    }
    v.extend(rate_check(spec.max_bytes_per_second));
    v.extend(target_check(spec.target_cassandra.as_deref()));
    if spec.partitioner.is_some() {
        let (parsed, bad) = token_checks("ranges", &spec.ranges, spec.partitioner);
        v.extend(bad);
        if let Some(rs) = parsed {
            v.extend(overlap_check("ranges", spec.partitioner(), &rs));
        }
        return v;
    }
    for (i, r) in spec.ranges.iter().enumerate() {
        // The partitioner is the sstables'; a token must parse for at least one.
        let ok = [
            Partitioner::Murmur3,
            Partitioner::Random,
            Partitioner::ByteOrdered,
        ]
        .iter()
        .any(|p| p.parse_token(&r.start).is_ok() && p.parse_token(&r.end).is_ok());
        if !ok {
            v.push(SpecProblem::new(
                format!("spec.ranges[{i}]"),
                Reason::InvalidRange,
                format!("({}, {}] are not tokens", r.start, r.end),
            ));
        }
    }
    // Decimal tokens mean the same order in Murmur3 and Random: overlap is decided there.
    if let (Some(rs), _) = token_checks("ranges", &spec.ranges, Some(Partitioner::Random)) {
        v.extend(overlap_check("ranges", Partitioner::Random, &rs));
    }
    v
}

/// [`stream_checks`]' problems as a failure.
pub fn validate_stream(spec: &RangeStreamSpec) -> Result<(), Failure> {
    match super::schema::failure_of(&stream_checks(spec)) {
        Some(f) => Err(f),
        None => Ok(()),
    }
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

/// The node label must name the same node as the acting node (`spec.nodeName`,
/// `spec.sourceNode`): a mismatch means the resource was routed to this sidecar by mistake
/// (it would never reach the named node's).
pub fn node_label_check(
    labels: &std::collections::BTreeMap<String, String>,
    field: &str,
    node_name: &str,
) -> Option<SpecProblem> {
    match labels.get(NODE_LABEL) {
        Some(l) if *l != node_name => Some(SpecProblem::new(
            "metadata.labels",
            Reason::InvalidSpec,
            format!("label {NODE_LABEL}={l} does not match {field} {node_name:?}"),
        )),
        _ => None,
    }
}

/// [`node_label_check`] as a failure.
pub fn check_node_label(
    labels: &std::collections::BTreeMap<String, String>,
    node_name: &str,
) -> Result<(), Failure> {
    match node_label_check(labels, "spec.nodeName", node_name) {
        Some(p) => Err(Failure::new(p.reason, p.to_string())),
        None => Ok(()),
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

/// What the CRD schema refuses at admission, for manifests that reach cleave without an
/// apiserver (`cleave run --local`): the schema's own validator (`schema`), every problem in
/// one message (`spec.dryrun: is not a field (did you mean spec.dryRun?)`).
pub fn check_schema_rules_job(spec: &AnticompactionJobSpec) -> Result<(), String> {
    schema_rules(super::crd::AnticompactionJob::KIND, spec)
}

/// [`check_schema_rules_job`] for a RangeStream.
pub fn check_schema_rules_stream(spec: &RangeStreamSpec) -> Result<(), String> {
    schema_rules(super::crd::RangeStream::KIND, spec)
}

fn schema_rules<T: serde::Serialize>(kind: &str, spec: &T) -> Result<(), String> {
    let v = serde_json::to_value(spec).map_err(|e| format!("spec: {e}"))?;
    match super::schema::failure_of(&super::schema::spec_problems(kind, &v)) {
        Some(f) => Err(f.message),
        None => Ok(()),
    }
}

/// `maxBytesPerSecond: 0` refused (it would throttle to nothing; unset is unlimited).
pub fn rate_check(max_bytes_per_second: Option<u64>) -> Option<SpecProblem> {
    (max_bytes_per_second == Some(0)).then(|| {
        SpecProblem::new(
            "spec.maxBytesPerSecond",
            Reason::InvalidSpec,
            "is 0: it must be at least 1 (leave it unset for no limit)",
        )
    })
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
    fn a_pre_split_names_no_range_or_marker() {
        let pre_split = || AnticompactionJobSpec {
            mode: JobMode::PreSplit,
            ranges: vec![],
            repaired_at: None,
            publish: Publish::OnRestart,
            ..spec()
        };
        assert_eq!(job_checks(&pre_split()), vec![]);
        for (field, s) in [
            (
                "spec.ranges",
                AnticompactionJobSpec {
                    ranges: spec().ranges,
                    ..pre_split()
                },
            ),
            (
                "spec.repairedAt",
                AnticompactionJobSpec {
                    repaired_at: Some(1),
                    ..pre_split()
                },
            ),
            (
                "spec.pendingRepair",
                AnticompactionJobSpec {
                    pending_repair: Some("6a3f4c2e-1d2b-11ef-9c4e-0242ac120002".into()),
                    ..pre_split()
                },
            ),
            (
                "spec.partitioner",
                AnticompactionJobSpec {
                    partitioner: Some(Partitioner::Random),
                    ..pre_split()
                },
            ),
            (
                "spec.publish",
                AnticompactionJobSpec {
                    publish: Publish::Replace,
                    ..pre_split()
                },
            ),
        ] {
            let problems = job_checks(&s);
            assert_eq!(problems.len(), 1, "{field}: {problems:?}");
            assert_eq!(problems[0].field, field);
            assert_eq!(problems[0].reason, Reason::InvalidSpec);
        }
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
            e.contains("spec.dryrun: is not a field (did you mean spec.dryRun?)"),
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
            .contains("spec.destination.service: must not be set"));
        let s: RangeStreamSpec = serde_json::from_value(serde_json::json!({
            "sourceNode": "n1", "keyspace": "ks", "ranges": [{"start": "0", "end": "1"}],
            "destination": {"nodeName": "n2", "service": "s", "nodname": "n3"},
        }))
        .unwrap();
        let e = check_schema_rules_stream(&s).unwrap_err();
        assert!(
            e.contains(
                "spec.destination.nodname: is not a field (did you mean spec.destination.nodeName?)"
            ),
            "{e}"
        );
    }
}
