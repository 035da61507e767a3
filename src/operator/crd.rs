//! The custom resources, group `cleave.dev`, version `v1alpha1`, both namespaced:
//! `AnticompactionJob` (split a node's sstables into repaired / pending / unrepaired
//! children) and `RangeStream` (send the part of a node's sstables covering some ranges to
//! another node). Status after batch/v1 Job and cass-operator's CassandraTask.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::sstable::Partitioner;

/// `(start, end]` as written (the engine's `RangeSpec`, one type from the CRD to the
/// ranges file of `cleave split --ranges`).
pub use crate::split::ranges::{RangeSpec as TokenRange, TOKEN_ANY};

// One type per concept from the CRD to the engine: the engine's own, with the CRD's
// serialized names (PascalCase, as Kubernetes enums are).
pub use crate::split::plan::{DigestPolicy, LayoutRequest};
pub use crate::split::publish::Publish;

/// How a `Replace` gets its stopped Cassandra.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Maintenance {
    /// Whoever runs the node stops Cassandra before the job (default); cleave refuses
    /// (CassandraRunning) while a process holds the table.
    #[default]
    None,
    /// cleave opens a bounded window itself through the management API (sidecar flag
    /// `--management-api`): cluster probe, flush, drain, stop, Replace, start, ready
    /// (docs/operator.md "Maintenance window").
    ManagementApi,
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cleave.dev",
    version = "v1alpha1",
    kind = "AnticompactionJob",
    namespaced,
    status = "JobStatus",
    shortname = "acj",
    doc = "Split a node's sstables by the token ranges of a repair into repaired (or pending), transient and unrepaired children, without rewriting rows: the anticompaction Cassandra runs at the start of an incremental repair. Executed by the cleave sidecar of spec.nodeName.",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName"}"#,
    printcolumn = r#"{"name":"Datacenter","type":"string","jsonPath":".metadata.labels.cassandra\\.datastax\\.com/datacenter"}"#,
    printcolumn = r#"{"name":"Keyspace","type":"string","jsonPath":".spec.keyspace"}"#,
    printcolumn = r#"{"name":"Publish","type":"string","jsonPath":".spec.publish"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress.summary"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.reason"}"#,
    printcolumn = r#"{"name":"Started","type":"date","jsonPath":".status.startTime"}"#,
    printcolumn = r#"{"name":"Completed","type":"date","jsonPath":".status.completionTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
/// The desired job: which node, which sstables, which ranges, and how to publish.
#[serde(rename_all = "camelCase")]
pub struct AnticompactionJobSpec {
    /// The node whose cleave executes the job: the pod name (sidecar) or Kubernetes node
    /// name (DaemonSet). Label the job `cleave.dev/node` with the same value.
    #[schemars(length(min = 1))]
    pub node_name: String,
    /// Cassandra data directory on that node, keyspaces are its subdirectories (default:
    /// the sidecar's `--data-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_directory: Option<String>,
    /// Keyspace whose tables are split.
    #[schemars(length(min = 1), regex(pattern = NAME))]
    pub keyspace: String,
    /// Tables to split; empty = every table of the keyspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1), regex(pattern = NAME)))]
    pub tables: Vec<String>,
    /// Explicit parents (Data.db file names); empty = every unrepaired sstable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sstables: Vec<String>,
    /// `Anticompaction` (default): the repair session's `ranges` decide each child's repair
    /// state. `PreSplit` (with `publish: OnRestart`): no repair yet; every unrepaired sstable
    /// is cut at the tokens of the node's ring (read from the sidecar's `--management-api`),
    /// children keep the parent's repair state, so that an incremental repair of any ring
    /// ranges later finds each sstable wholly inside or outside them and only re-marks it
    /// (docs/repair.md).
    #[serde(default)]
    pub mode: JobMode,
    /// Token ranges the repair session covered, `(start, end]`; at least one. None with
    /// `mode: PreSplit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1))]
    pub ranges: Vec<TokenRange>,
    /// Ranges this node holds as a transient replica (Cassandra 4.0+): their children get
    /// `isTransient`. Needs pendingRepair (transient data is never marked repaired).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transient_ranges: Vec<TokenRange>,
    /// The partitioner of the cluster (`Murmur3`, `Random`, `ByteOrdered`; default
    /// `Murmur3`): the notation the tokens are checked against at admission. The job fails
    /// (InvalidSpec) when the sstables' own (Statistics.db) is another.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "partitioner_field::deserialize"
    )]
    #[schemars(schema_with = "partitioner_field::schema")]
    pub partitioner: Option<Partitioner>,
    /// Mark the repaired children repaired at this time (ms since the epoch). Exactly one
    /// of this and pendingRepair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub repaired_at: Option<i64>,
    /// Incremental-repair session (a UUID, `8-4-4-4-12` hex digits) the repaired children
    /// are pending on. Exactly one of this and repairedAt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = UUID))]
    pub pending_repair: Option<String>,
    /// Child Data.db layout (docs/split.md): `Aligned` shares all but the boundary chunks,
    /// `Padded` only for readers without data mmap, `Copy` copies, `Regrid` rewrites the
    /// chunk grid (no dead prefix), `Auto` (default) picks per child.
    #[serde(default)]
    pub layout: LayoutRequest,
    /// `Digest.crc32` of each child: `Off` (default; none), `Combine` (derived from the
    /// per-chunk CRCs), `Full` (reads the child).
    #[serde(default)]
    pub digest: DigestPolicy,
    /// `Stage` (default): children in `<table>/cleave-staged/<job>/<ks>/<table>/`, parents kept, for
    /// `nodetool import --keep-repaired`. `Replace`: children replace their parents atomically (Cassandra
    /// stopped).
    #[serde(default)]
    pub publish: Publish,
    /// With `publish: Replace`: `ManagementApi` stops and starts Cassandra around the
    /// Replace through the node's management API; `None` (default) needs it stopped.
    #[serde(default)]
    pub maintenance: Maintenance,
    /// The longest Cassandra may stay down in a `ManagementApi` window, from the stop to
    /// ready again (seconds, default 300). At most 540: cass-operator deletes a pod that
    /// has not been ready for 10 minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 540))]
    pub max_downtime_seconds: Option<u32>,
    /// Plan only: status gets the per-parent plan and phase `Planned`; nothing is written.
    #[serde(default)]
    pub dry_run: bool,
    /// Throttle for copied and re-encoded bytes (bytes/s, at least 1); shared extents are
    /// not throttled. Unset: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_bytes_per_second: Option<u64>,
    /// SSTables split at once (at least 1; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parallelism: Option<u32>,
    /// Delete the job this many seconds after it finished (Complete, Failed, Planned).
    /// Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i64>,
    /// The Cassandra release that will read the children (`4.1`, `5.0.5`, ...). Unset: the
    /// sidecar's `--cassandra-version`, else unknown, taken as the newest release line:
    /// from 5.0.5 compaction reads Data.db from position 0, so no child may start with a
    /// dead prefix (docs/compatibility.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cassandra: Option<String>,
    /// Fields the schema does not know. The CRD keeps them (`x-kubernetes-preserve-unknown-
    /// fields`) instead of pruning them, so that a misspelt field (`dryrun`) fails the job
    /// with InvalidSpec instead of being ignored (see `unknown_fields`).
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// What an AnticompactionJob does to each unrepaired sstable.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum JobMode {
    /// Children per label of `spec.ranges`, the repaired ones marked `repairedAt` or
    /// `pendingRepair` (default).
    #[default]
    Anticompaction,
    /// Children at every token of the keyspace's ring (the node's management API; a ring
    /// with a joining, leaving or moving node is refused: RingChanging), each keeping the
    /// parent's repair state. Murmur3 only; `publish: OnRestart`; no ranges, repairedAt or pendingRepair.
    PreSplit,
}

/// Where a CleanupJob learns the ranges its node owns.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Ownership {
    /// `spec.ownedRanges` (default).
    #[default]
    Ranges,
    /// The node's management API (sidecar `--management-api`): the ranges whose replicas
    /// include this node, read before the cleanup and again just before publishing; a ring
    /// with a joining, leaving or moving node is refused (RingChanging). Murmur3 only.
    ManagementApi,
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cleave.dev",
    version = "v1alpha1",
    kind = "CleanupJob",
    namespaced,
    status = "JobStatus",
    shortname = "clj",
    doc = "Drop the token ranges a node no longer owns from its sstables without rewriting rows, what `nodetool cleanup` does after a scale-up: sstables wholly owned are kept, wholly unowned dropped, the others replaced by children holding only their owned partitions (shared chunks). Executed by the cleave sidecar of spec.nodeName.",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName"}"#,
    printcolumn = r#"{"name":"Datacenter","type":"string","jsonPath":".metadata.labels.cassandra\\.datastax\\.com/datacenter"}"#,
    printcolumn = r#"{"name":"Keyspace","type":"string","jsonPath":".spec.keyspace"}"#,
    printcolumn = r#"{"name":"Publish","type":"string","jsonPath":".spec.publish"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress.summary"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.reason"}"#,
    printcolumn = r#"{"name":"Started","type":"date","jsonPath":".status.startTime"}"#,
    printcolumn = r#"{"name":"Completed","type":"date","jsonPath":".status.completionTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
/// The desired cleanup: which node and tables, the ranges it keeps, and how to publish.
#[serde(rename_all = "camelCase")]
pub struct CleanupJobSpec {
    /// The node whose cleave executes the job (as AnticompactionJob's). Label the job
    /// `cleave.dev/node` with the same value.
    #[schemars(length(min = 1))]
    pub node_name: String,
    /// Cassandra data directory on that node (default: the sidecar's `--data-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_directory: Option<String>,
    /// Keyspace whose tables are cleaned up.
    #[schemars(length(min = 1), regex(pattern = NAME))]
    pub keyspace: String,
    /// Tables to clean up; empty = every table of the keyspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1), regex(pattern = NAME)))]
    pub tables: Vec<String>,
    /// The ranges this node owns, `(start, end]`, not overlapping. Exactly one of this and
    /// `ownership: ManagementApi`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owned_ranges: Vec<TokenRange>,
    /// `Ranges` (default): `ownedRanges`. `ManagementApi`: from the node's ring.
    #[serde(default)]
    pub ownership: Ownership,
    /// The partitioner of the cluster (`Murmur3`, `Random`, `ByteOrdered`; default
    /// `Murmur3`), as AnticompactionJob's.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "partitioner_field::deserialize"
    )]
    #[schemars(schema_with = "partitioner_field::schema")]
    pub partitioner: Option<Partitioner>,
    /// `Stage` (default): children of the split sstables in `<table>/cleave-staged/<job>/<ks>/<table>/`,
    /// nothing dropped, for `nodetool import --keep-repaired`. `Replace`: one crash-atomic
    /// transaction per table (Cassandra stopped, or stopped by the window of `maintenance:
    /// ManagementApi`). `OnRestart`: children and the sstables to drop recorded in the
    /// table's `.cleave-pending/<job uid>/`, published by the `cleave apply-pending` init
    /// container before Cassandra's next start (phase `AwaitingRestart` until then).
    #[serde(default)]
    pub publish: Publish,
    /// With `publish: Replace`: `ManagementApi` stops and starts Cassandra around the
    /// cleanup through the node's management API (as AnticompactionJob's); `None` (default)
    /// needs it stopped.
    #[serde(default)]
    pub maintenance: Maintenance,
    /// The longest Cassandra may stay down in a `ManagementApi` window (seconds, default
    /// 300, at most 540), as AnticompactionJob's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 540))]
    pub max_downtime_seconds: Option<u32>,
    /// Plan only: status gets the per-sstable verdicts and phase `Planned`.
    #[serde(default)]
    pub dry_run: bool,
    /// SSTables of a table split at once (at least 1; default 1). Each table is still
    /// published in one transaction, and every split shares `maxBytesPerSecond`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parallelism: Option<u32>,
    /// Throttle for copied and re-encoded bytes (bytes/s, at least 1). Unset: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_bytes_per_second: Option<u64>,
    /// Delete the job this many seconds after it finished. Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i64>,
    /// The Cassandra release that will read the children, as AnticompactionJob's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cassandra: Option<String>,
    /// Fields the schema does not know, kept to be refused (see `AnticompactionJobSpec::unknown`).
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// Where a RangeStream's children go: a receiving cleave, by address or by Service.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// The receiving node (as its cleave's `--node`).
    #[schemars(length(min = 1))]
    pub node_name: String,
    /// `host:port` of the receiving cleave (its `--stream-addr`). Exactly one of this and
    /// service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = HOST_PORT))]
    pub endpoint: Option<String>,
    /// Or the headless Service governing the destination pod's StatefulSet (`name` or
    /// `name.namespace`, cass-operator's `<cluster>-<dc>-all-pods-service`): cleave connects
    /// to `<nodeName>.<service>.<namespace>.svc`, the pod's own DNS name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub service: Option<String>,
    /// Fields the schema does not know, kept to be refused (see `AnticompactionJobSpec::unknown`).
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// What the receiver does with the checked children (the manifest's own type).
pub use crate::stream::manifest::Import;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "cleave.dev",
    version = "v1alpha1",
    kind = "RangeStream",
    namespaced,
    status = "JobStatus",
    doc = "Send the part of a node's sstables covering some token ranges to another node's cleave, as ready-made sstables the receiver checks and publishes. Executed by the cleave sidecar of spec.sourceNode.",
    // Not `rs`: that is ReplicaSet's, and `kubectl get rs` would list ReplicaSets
    // (tests/install.rs checks every short name against the apiserver's api-resources).
    shortname = "rstream",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.sourceNode"}"#,
    printcolumn = r#"{"name":"To","type":"string","jsonPath":".spec.destination.nodeName"}"#,
    printcolumn = r#"{"name":"Datacenter","type":"string","jsonPath":".metadata.labels.cassandra\\.datastax\\.com/datacenter"}"#,
    printcolumn = r#"{"name":"Keyspace","type":"string","jsonPath":".spec.keyspace"}"#,
    printcolumn = r#"{"name":"Import","type":"string","jsonPath":".spec.import"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress.summary"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.reason"}"#,
    printcolumn = r#"{"name":"Started","type":"date","jsonPath":".status.startTime"}"#,
    printcolumn = r#"{"name":"Completed","type":"date","jsonPath":".status.completionTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
/// The desired stream: from which node, to which receiver, which ranges.
#[serde(rename_all = "camelCase")]
pub struct RangeStreamSpec {
    /// The node whose cleave sends (label `cleave.dev/node` with the same value).
    #[schemars(length(min = 1))]
    pub source_node: String,
    /// Where the children go.
    pub destination: Destination,
    /// Keyspace to send.
    #[schemars(length(min = 1), regex(pattern = NAME))]
    pub keyspace: String,
    /// Tables to send; empty = every table of the keyspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1), regex(pattern = NAME)))]
    pub tables: Vec<String>,
    /// Token ranges to send, `(start, end]`; at least one.
    #[schemars(length(min = 1))]
    pub ranges: Vec<TokenRange>,
    /// The partitioner of the cluster (`Murmur3`, `Random`, `ByteOrdered`; default
    /// `Murmur3`): the notation the tokens are checked against at admission. The stream
    /// fails (InvalidSpec) when the sstables' own is another.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "partitioner_field::deserialize"
    )]
    #[schemars(schema_with = "partitioner_field::schema")]
    pub partitioner: Option<Partitioner>,
    /// Child Data.db layout, as AnticompactionJob.spec.layout (default `Auto`).
    #[serde(default)]
    pub layout: LayoutRequest,
    /// Throttle on bytes sent (bytes/s, at least 1). Unset: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_bytes_per_second: Option<u64>,
    /// What the receiver does with the checked children: `None` (default; receiver
    /// staging), `Staging` (the table's staging directory), `Import` (runs its
    /// `--stream-import-command`, which must keep the repair state:
    /// `nodetool import --keep-repaired`).
    #[serde(default)]
    pub import: Import,
    /// The Cassandra release that will read the children (`4.1`, `5.0.5`, ...). Unset:
    /// unknown, taken as the newest release line:
    /// from 5.0.5 compaction reads Data.db from position 0, so no child may start with a
    /// dead prefix (docs/compatibility.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cassandra: Option<String>,
    /// Fields the schema does not know, kept to be refused (see `AnticompactionJobSpec::unknown`).
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// metav1.Condition.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type: Running, Waiting, Failed, Retrying, Complete, Planned, Accepted,
    /// AwaitingRestart.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// The `metadata.generation` the condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// CamelCase reason: a failure reason (docs/runbook.md), or Started, Resumed, ...
    pub reason: String,
    /// Human-readable detail; never empty (falls back to the reason).
    pub message: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Parents to process.
    pub sstables_total: u64,
    /// Parents finished.
    pub sstables_done: u64,
    /// Bytes of the planned children.
    pub bytes_planned: u64,
    /// Bytes shared with the parents by reflink.
    pub bytes_shared: u64,
    /// Bytes copied because they could not be shared.
    pub bytes_copied: u64,
    /// Bytes of re-encoded boundary chunks (and regridded children).
    pub bytes_reencoded: u64,
    /// Partitions written to children.
    pub partitions: u64,
    /// "done/total" for the printer column. Never sent empty: a 1.20 apiserver's
    /// server-side apply turns "" into null and then rejects it as not a string.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
}

/// One finished parent of a job: the resume checkpoint.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SSTableResult {
    /// The parent Data.db.
    pub parent: String,
    /// Paths of the children (Data.db).
    pub children: Vec<String>,
    /// Layout used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// Why a child used another layout than planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
    /// Bytes shared with this parent by reflink.
    pub bytes_shared: u64,
    /// Bytes copied for this parent.
    pub bytes_copied: u64,
    /// Bytes re-encoded for this parent.
    pub bytes_reencoded: u64,
    /// Partitions of this parent.
    pub partitions: u64,
    /// CleanupJob only: what became of the sstable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<CleanupVerdict>,
    /// A dry run (`spec.dryRun`): the children the run would write, as planned. The
    /// `bytes*` above are then the plan's predictions (their sums), not bytes written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planned: Vec<PlannedChild>,
}

/// One child a dry run plans (`status.results[].planned[]`).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedChild {
    /// Token of its first partition.
    pub first_token: String,
    /// Token of its last partition.
    pub last_token: String,
    /// Partitions of the parent it holds.
    pub partitions: u64,
    /// Parent Data.db bytes (uncompressed) its partitions occupy.
    pub data_bytes: u64,
    /// Layout planned (aligned, padded, copy, regrid).
    pub layout: String,
    /// Anticompaction: full, transient or unrepaired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Predicted bytes shared with the parent by reflink.
    pub bytes_shared: u64,
    /// Predicted bytes copied.
    pub bytes_copied: u64,
    /// Predicted bytes re-encoded.
    pub bytes_reencoded: u64,
}

impl PlannedChild {
    /// The status's view of one child of the split engine's plan.
    pub fn of(p: &crate::split::plan::ChildPlan) -> PlannedChild {
        PlannedChild {
            first_token: p
                .child
                .runs
                .first()
                .map(|r| r.first_token.clone())
                .unwrap_or_default(),
            last_token: p
                .child
                .runs
                .last()
                .map(|r| r.last_token.clone())
                .unwrap_or_default(),
            partitions: p.child.partitions(),
            data_bytes: p.child.bytes(),
            layout: format!("{:?}", p.layout).to_lowercase(),
            label: p.label.map(|l| l.to_string()),
            bytes_shared: p.predicted.bytes_shared,
            bytes_copied: p.predicted.bytes_copied,
            bytes_reencoded: p.predicted.bytes_reencoded,
        }
    }
}

/// What a cleanup did with one sstable.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CleanupVerdict {
    /// Wholly inside the owned ranges: the same file.
    Kept,
    /// Wholly outside: removed.
    Dropped,
    /// Across a boundary: replaced by children holding its owned partitions.
    Split,
}

/// Who is executing the job: a worker that stops heartbeating loses it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Worker {
    /// `<node>/<pid>/<start time>` of the worker.
    pub identity: String,
    /// Last heartbeat (RFC 3339; every 10 s while running).
    pub heartbeat_time: String,
}

/// Written by cleave (status subresource, server-side apply), after batch/v1 Job.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// Pending → Running → Complete or Failed; Planned after a dry run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<super::status::Phase>,
    /// metav1.Condition list-map keyed by `type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Reason of the failure (docs/runbook.md), also the Failed condition's reason and the
    /// metric label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Message of the last failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When a worker first started the job (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When the job finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    /// Counters, updated after each sstable.
    #[serde(default)]
    pub progress: Progress,
    /// One entry per finished parent: the resume checkpoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<SSTableResult>,
    /// The lease: who runs the job. A worker whose heartbeat is older than 30 s loses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<Worker>,
    /// RangeStream only: bytes, throughput and the receiver's verdict per child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamStatus>,
    /// `maintenance: ManagementApi` only: the window's last step, so that a sidecar that
    /// restarts in the middle knows Cassandra is down and starts it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowStatus>,
}

/// The steps of a maintenance window, in order.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum WindowStep {
    /// The cluster probe passed and the tables were flushed; Cassandra still runs.
    Flushed,
    /// `nodetool drain` done: no more writes, memtables on disk.
    Drained,
    /// `/lifecycle/stop` answered, the pid endpoint says no Cassandra: the Replace may run.
    Stopped,
    /// Every parent is replaced (or the Replace failed: see the job's reason).
    Replaced,
    /// `/lifecycle/start` answered; waiting for readiness.
    Started,
    /// The readiness probe is 200 again: the window is closed.
    Ready,
}

/// Where a maintenance window stands.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowStatus {
    /// The last step done.
    pub step: WindowStep,
    /// When Cassandra was asked to stop (seconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<i64>,
    /// When Cassandra was asked to drain (seconds since the epoch): a drained node serves
    /// nothing, so the downtime budget counts from here (windows recorded before this field
    /// count from `stoppedAt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drained_at: Option<i64>,
    /// When the readiness probe answered 200 again (seconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<i64>,
    /// The downtime budget of this window (seconds).
    pub max_downtime_seconds: u32,
}

/// A RangeStream's transfer, as its source node's sidecar reports it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamStatus {
    /// Where the children go (`host:port`, the resolved endpoint or Service).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination: String,
    /// Bytes of every planned child (all files), known once every sstable is planned.
    pub bytes_total: u64,
    /// Bytes the receiver holds for this stream: body bytes sent plus those of children
    /// it had already published (a replay sends nothing).
    pub bytes_sent: u64,
    /// Average bytes/s of this worker's sending so far.
    pub throughput: u64,
    /// Children planned: one per contiguous run of a parent in the ranges.
    pub children_total: u64,
    /// Children the receiver checked and published.
    pub children_done: u64,
    /// Failed attempts retried so far (see the `Retrying` condition).
    pub retries: u64,
    /// The parent being sent now (Data.db file name).
    #[serde(
        default,
        rename = "currentSSTable",
        skip_serializing_if = "Option::is_none"
    )]
    pub current_sstable: Option<String>,
    /// The transfer id in flight: the one whose receiver staging a deletion cancels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_transfer: Option<String>,
    /// Per parent sstable, in send order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<StreamSSTableResult>,
}

/// One parent of a RangeStream, in send order.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamSSTableResult {
    /// The parent's Data.db file name (`<keyspace>/<table dir>/` on the source).
    pub parent: String,
    /// The parent's table.
    pub table: String,
    /// Partitions of the parent.
    pub partitions: u64,
    /// Partitions of the parent in the ranges (the children's sum).
    pub partitions_in_ranges: u64,
    /// One per contiguous run of the parent in the ranges (none: nothing in the ranges).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<StreamChildResult>,
}

/// The receiver's verdict on one child (its commit answer).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamChildResult {
    /// `<RangeStream uid>.<table>.<version>-<generation>.c<index>`: the idempotency key.
    pub transfer: String,
    /// The receiver checked and published the child.
    pub ok: bool,
    /// Partitions of the child, as the receiver counted them.
    pub partitions: u64,
    /// Bytes of the child (all files).
    pub bytes: u64,
    /// Body bytes this sidecar sent for it (0 when the receiver had it already).
    pub bytes_sent: u64,
    /// The child's Data.db on the receiver.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub published: String,
    /// count:xor:sum of the Murmur3 of every key, as the receiver re-read them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fingerprint: String,
    /// Compressed chunks (or CRC.db blocks) whose CRC the receiver checked.
    pub chunks_checked: u64,
    /// The receiver had published this transfer before: nothing was sent again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

// The admission rules a kube-apiserver 1.20 enforces (structural schemas, no CEL). Field
// rules sit on the fields above (`#[schemars(...)]`); rules across fields are added to the
// generated CRD by `admission_rules`, after kube's structural rewrite (which would hoist the
// properties of an `anyOf`/`oneOf` into the object).

/// `Murmur3Partitioner`: a signed 64-bit decimal (`LongToken`).
pub const TOKEN_MURMUR3: &str = "^-?[0-9]{1,19}$";
/// `RandomPartitioner`: a decimal 0..=2^127 (`BigIntegerToken`), or -1, its minimum.
pub const TOKEN_RANDOM: &str = "^(-1|[0-9]{1,39})$";
/// `ByteOrderedPartitioner`: the key bytes in hex (`BytesToken`, `Hex.bytesToHex`).
pub const TOKEN_BYTE_ORDERED: &str = "^([0-9a-fA-F]{2})*$";
/// A `TimeUUID` as Cassandra prints it (`UUID.toString`: 8-4-4-4-12 hex digits).
pub const UUID: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
/// A keyspace or table name: it becomes a directory name.
pub const NAME: &str = "^[^/]+$";
/// `host:port` (the port at most 5 digits; cleave checks it is a u16).
pub const HOST_PORT: &str = "^.+:[0-9]{1,5}$";

/// `spec.partitioner`: the engine's own `Partitioner` (one type from CRD to engine), by
/// its short name, as the schema's enum spells it.
mod partitioner_field {
    use super::Partitioner;
    use serde::{Deserialize, Deserializer};

    pub const NAMES: [(&str, Partitioner); 3] = [
        ("Murmur3", Partitioner::Murmur3),
        ("Random", Partitioner::Random),
        ("ByteOrdered", Partitioner::ByteOrdered),
    ];

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Partitioner>, D::Error> {
        let Some(name) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| Some(*p))
            .ok_or_else(|| {
                serde::de::Error::unknown_variant(&name, &["Murmur3", "Random", "ByteOrdered"])
            })
    }

    pub fn schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "enum": NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        })
    }
}

/// The names the schema knows for the fields of `T` (its `properties`).
fn known_fields<T: JsonSchema>() -> Vec<String> {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// `prefix.field` for every field in `unknown`, with the known field spelt closest to it.
fn describe_unknown<T: JsonSchema>(
    prefix: &str,
    unknown: &BTreeMap<String, serde_json::Value>,
) -> Vec<UnknownField> {
    if unknown.is_empty() {
        return Vec::new();
    }
    let known = known_fields::<T>();
    unknown
        .keys()
        .map(|k| UnknownField {
            path: format!("{prefix}.{k}"),
            did_you_mean: closest_field(k, &known).map(|c| format!("{prefix}.{c}")),
        })
        .collect()
}

/// A field of a spec that the schema does not know (kept by the apiserver, see
/// `AnticompactionJobSpec::unknown`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownField {
    /// `spec.dryrun`, `spec.destination.nodname`.
    pub path: String,
    /// The known field spelt closest to it (`spec.dryRun`), if one is close.
    pub did_you_mean: Option<String>,
}

impl std::fmt::Display for UnknownField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.did_you_mean {
            Some(k) => write!(f, "{} is not a field (did you mean {k}?)", self.path),
            None => write!(f, "{} is not a field", self.path),
        }
    }
}

impl AnticompactionJobSpec {
    /// The paths of the fields the schema does not know (`spec.dryrun`), sorted.
    pub fn unknown_fields(&self) -> Vec<String> {
        self.unknown_fields_explained()
            .into_iter()
            .map(|u| u.path)
            .collect()
    }

    /// [`Self::unknown_fields`], each with the known field spelt closest to it.
    pub fn unknown_fields_explained(&self) -> Vec<UnknownField> {
        describe_unknown::<AnticompactionJobSpec>("spec", &self.unknown)
    }

    /// The partitioner the tokens are written for: `spec.partitioner`, default Murmur3
    /// (Cassandra's default since 1.2, `cassandra.yaml` `partitioner`).
    pub fn partitioner(&self) -> Partitioner {
        self.partitioner.unwrap_or(Partitioner::Murmur3)
    }
}

impl CleanupJobSpec {
    /// As [`AnticompactionJobSpec::unknown_fields_explained`].
    pub fn unknown_fields_explained(&self) -> Vec<UnknownField> {
        describe_unknown::<CleanupJobSpec>("spec", &self.unknown)
    }

    /// As [`AnticompactionJobSpec::partitioner`].
    pub fn partitioner(&self) -> Partitioner {
        self.partitioner.unwrap_or(Partitioner::Murmur3)
    }
}

#[cfg(test)]
impl AnticompactionJobSpec {
    /// The operator's unit tests' spec: node `n1`, keyspace `ks`, range (0, 100], repaired
    /// at 2023-11-14, every option at its default; each test changes what it is about.
    pub(crate) fn for_tests() -> AnticompactionJobSpec {
        AnticompactionJobSpec {
            node_name: "n1".into(),
            data_directory: None,
            keyspace: "ks".into(),
            tables: vec![],
            sstables: vec![],
            mode: JobMode::Anticompaction,
            ranges: vec![TokenRange {
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
            maintenance: Default::default(),
            max_downtime_seconds: None,
            max_bytes_per_second: None,
            parallelism: None,
            ttl_seconds_after_finished: None,
            target_cassandra: None,
            partitioner: None,
            unknown: Default::default(),
        }
    }
}

impl RangeStreamSpec {
    /// The paths of the fields the schema does not know (`spec.dryrun`,
    /// `spec.destination.nodname`), sorted within each object.
    pub fn unknown_fields(&self) -> Vec<String> {
        self.unknown_fields_explained()
            .into_iter()
            .map(|u| u.path)
            .collect()
    }

    /// [`Self::unknown_fields`], each with the known field spelt closest to it.
    pub fn unknown_fields_explained(&self) -> Vec<UnknownField> {
        let mut v = describe_unknown::<RangeStreamSpec>("spec", &self.unknown);
        v.extend(describe_unknown::<Destination>(
            "spec.destination",
            &self.destination.unknown,
        ));
        v
    }

    /// As [`AnticompactionJobSpec::partitioner`].
    pub fn partitioner(&self) -> Partitioner {
        self.partitioner.unwrap_or(Partitioner::Murmur3)
    }
}

/// The field of `known` spelt closest to `name`: the same letters in another case
/// (`dryrun` → `dryRun`), else the one at the smallest edit distance when that is at most
/// a third of the name's length (one typo in a short name, two in a long one). `None`
/// when nothing is that close.
pub fn closest_field<'a>(name: &str, known: &'a [String]) -> Option<&'a str> {
    if let Some(k) = known.iter().find(|k| k.eq_ignore_ascii_case(name)) {
        return Some(k);
    }
    let lower = name.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (edit_distance(&lower, &k.to_ascii_lowercase()), k))
        .filter(|(d, _)| *d <= (name.chars().count() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
}

/// Levenshtein distance, with a swap of two neighbours counting as one edit (optimal
/// string alignment): `nodname` → `nodeName` is 1, `ednpoint` → `endpoint` is 1.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The two kinds, for [`admission_rules`].
#[derive(Clone, Copy)]
enum Kind {
    Job,
    Stream,
    Cleanup,
    Datacenter,
}

/// The schema rules across fields, and what makes the generated schema one a 1.20
/// apiserver takes, applied to the `openAPIV3Schema` of `kind`:
/// - no `default` anywhere: serde fills defaults on read, and schemars' defaults for
///   optional and enum fields are not always valid structural defaults (a real 1.20
///   apiserver rejects them);
/// - in `spec`: no `nullable` (the apiserver then prunes an explicit `null`, so
///   `repairedAt: null` counts as absent in the rules below), no `additionalProperties`
///   (structural schemas forbid it beside `properties`), and
///   `x-kubernetes-preserve-unknown-fields` on `spec` and `spec.destination`, so that a
///   misspelt field is kept to be refused instead of pruned;
/// - the tokens of `ranges` (and `transientRanges`) in the notation of `spec.partitioner`
///   (absent: Murmur3), one implication per family;
/// - exactly one of `repairedAt` and `pendingRepair`, `transientRanges` only with
///   `pendingRepair`; exactly one of `destination.endpoint` and `destination.service`.
///
/// The exclusive-or rules are `oneOf` of two branches that each forbid the other field
/// (`not: {}`): the apiserver then names the offending field ("spec.pendingRepair must not
/// validate the schema (not)", "spec.repairedAt: Required value"), where a bare
/// `oneOf` of two `required` only says "Found 2 valid alternatives".
fn admission_rules(kind: Kind, schema: &mut serde_json::Value) {
    use serde_json::json;
    strip(schema, &["default"]);
    let Some(spec) = schema.pointer_mut("/properties/spec") else {
        return;
    };
    strip(spec, &["nullable", "additionalProperties"]);
    spec["x-kubernetes-preserve-unknown-fields"] = json!(true);
    // The spec struct's doc comment (kube's derive leaves the `spec` property without one).
    let doc = match kind {
        Kind::Job => type_description::<AnticompactionJobSpec>(),
        Kind::Stream => type_description::<RangeStreamSpec>(),
        Kind::Cleanup => type_description::<CleanupJobSpec>(),
        Kind::Datacenter => type_description::<super::datacenter::crd::DatacenterCleanupSpec>(),
    };
    if spec.get("description").is_none() {
        if let Some(d) = doc {
            spec["description"] = json!(d);
        }
    }
    let token_lists: &[&str] = match kind {
        Kind::Job => &["ranges", "transientRanges"],
        Kind::Stream => &["ranges"],
        Kind::Cleanup => &["ownedRanges"],
        Kind::Datacenter => {
            // No tokens: exactly one way to name the nodes, and a restart by CassandraTask
            // only for a CassandraDatacenter.
            spec["oneOf"] = json!([
                {"required": ["datacenter"], "properties": {"podSelector": {"not": {}}}},
                {"required": ["podSelector"], "properties": {
                    "datacenter": {"not": {}},
                    "restart": {"enum": ["None"]},
                }},
            ]);
            // A map of labels: without its value schema a structural schema prunes every
            // key of it, and an empty selector would select every pod of the namespace.
            spec["properties"]["podSelector"]["additionalProperties"] = json!({"type": "string"});
            return;
        }
    };
    let tokens = |pattern: &str| {
        let range = json!({"items": {"properties": {
            "start": {"pattern": pattern},
            "end": {"pattern": pattern},
        }}});
        let props: serde_json::Map<String, serde_json::Value> = token_lists
            .iter()
            .map(|l| (l.to_string(), range.clone()))
            .collect();
        json!({ "properties": props })
    };
    // "partitioner is F ⇒ tokens in F's notation", as "tokens in F's notation, or
    // partitioner is another". The token branch comes first: the apiserver reports the
    // failing branch with the most passing checks, the first on a tie, and that is the
    // one whose message names the token.
    let family =
        |pattern: &str, other: serde_json::Value| json!({"anyOf": [tokens(pattern), other]});
    spec["allOf"] = json!([
        family(
            TOKEN_MURMUR3,
            json!({"required": ["partitioner"], "properties": {"partitioner": {"enum": ["Random", "ByteOrdered"]}}})
        ),
        family(
            TOKEN_RANDOM,
            json!({"properties": {"partitioner": {"enum": ["Murmur3", "ByteOrdered"]}}})
        ),
        family(
            TOKEN_BYTE_ORDERED,
            json!({"properties": {"partitioner": {"enum": ["Murmur3", "Random"]}}})
        ),
    ]);
    match kind {
        Kind::Job => {
            // An anticompaction names its session's ranges and exactly one marker; a
            // pre-split none of them (its tokens are the ring's). The pre-split branch of
            // the `oneOf` checks the mode alone, so that a manifest without a marker is
            // reported by a marker branch ("spec.repairedAt: Required value"): the
            // apiserver names the failing branch with the most passing checks. What a
            // pre-split forbids is an implication beside the partitioner's.
            let anticompaction = json!({"enum": ["Anticompaction"]});
            spec["oneOf"] = json!([
                {"required": ["repairedAt", "ranges"], "properties": {
                    "pendingRepair": {"not": {}},
                    "transientRanges": {"maxItems": 0},
                    "mode": anticompaction,
                }},
                {"required": ["pendingRepair", "ranges"], "properties": {
                    "repairedAt": {"not": {}},
                    "mode": anticompaction,
                }},
                {"required": ["mode"], "properties": {"mode": {"enum": ["PreSplit"]}}},
            ]);
            if let Some(all) = spec["allOf"].as_array_mut() {
                all.push(json!({"anyOf": [
                    {"required": ["publish"], "properties": {
                        "publish": {"enum": ["OnRestart"]},
                        "repairedAt": {"not": {}},
                        "pendingRepair": {"not": {}},
                        "ranges": {"maxItems": 0},
                        "transientRanges": {"maxItems": 0},
                    }},
                    {"properties": {"mode": anticompaction}},
                ]}));
            }
        }
        Kind::Stream => {
            let d = &mut spec["properties"]["destination"];
            d["x-kubernetes-preserve-unknown-fields"] = json!(true);
            d["oneOf"] = json!([
                {"required": ["endpoint"], "properties": {"service": {"not": {}}}},
                {"required": ["service"], "properties": {"endpoint": {"not": {}}}},
            ]);
        }
        Kind::Datacenter => {}
        Kind::Cleanup => {
            // Exactly one source of ownership: explicit ranges, or the management API.
            spec["oneOf"] = json!([
                {"required": ["ownedRanges"], "properties": {
                    "ownedRanges": {"minItems": 1},
                    "ownership": {"enum": ["Ranges"]},
                }},
                {"required": ["ownership"], "properties": {
                    "ownership": {"enum": ["ManagementApi"]},
                    "ownedRanges": {"maxItems": 0},
                }},
            ]);
        }
    }
}

/// The description schemars takes from `T`'s doc comment.
fn type_description<T: JsonSchema>() -> Option<String> {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    schema
        .get("description")
        .and_then(|d| d.as_str())
        .map(str::to_string)
}

/// Removes every key in `keys` from every object in `v`.
fn strip(v: &mut serde_json::Value, keys: &[&str]) {
    match v {
        serde_json::Value::Object(m) => {
            for k in keys {
                m.remove(*k);
            }
            m.values_mut().for_each(|x| strip(x, keys));
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| strip(x, keys)),
        _ => {}
    }
}

/// Both CRDs as `kubectl apply` takes them: kube's derive, then `admission_rules`.
pub fn crds() -> Result<Vec<serde_json::Value>, serde_json::Error> {
    use kube::CustomResourceExt;
    [
        (Kind::Job, AnticompactionJob::crd()),
        (Kind::Stream, RangeStream::crd()),
        (Kind::Cleanup, CleanupJob::crd()),
        (
            Kind::Datacenter,
            super::datacenter::crd::DatacenterCleanup::crd(),
        ),
    ]
    .into_iter()
    .map(|(kind, crd)| {
        let mut v = serde_json::to_value(&crd)?;
        for version in v["spec"]["versions"].as_array_mut().into_iter().flatten() {
            admission_rules(kind, &mut version["schema"]["openAPIV3Schema"]);
        }
        Ok(v)
    })
    .collect()
}

/// Both CRDs as YAML documents, as `cleave crd` prints them and `crds/` holds them.
/// serde-saphyr (the YAML crate kube's client already uses) quotes strings that a YAML 1.1
/// reader such as kubectl would take for something else, e.g. the enum value `Off`
/// (a boolean to YAML 1.1).
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for v in crds().map_err(<serde_saphyr::SerializeError as serde::ser::Error>::custom)? {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&v)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn the_closest_known_field_is_suggested() {
        let known = known_fields::<AnticompactionJobSpec>();
        assert!(known.iter().any(|k| k == "dryRun") && !known.iter().any(|k| k == "unknown"));
        let c = |n: &str| closest_field(n, &known);
        assert_eq!(c("dryrun"), Some("dryRun"));
        assert_eq!(c("DRYRUN"), Some("dryRun"));
        assert_eq!(c("nodname"), Some("nodeName"));
        assert_eq!(c("keyspcae"), Some("keyspace"));
        assert_eq!(c("paralelism"), Some("parallelism"));
        assert_eq!(c("repaired_at"), Some("repairedAt"));
        assert_eq!(c("maxBytesPerSec"), Some("maxBytesPerSecond"));
        assert_eq!(c("throttle"), None, "nothing close: no guess");
        assert_eq!(c("x"), None);
        assert_eq!(c("colour"), None);
    }

    #[test]
    fn unknown_fields_are_kept_and_named_with_their_path() {
        let j: AnticompactionJobSpec = serde_json::from_value(json!({
            "nodeName": "n1", "keyspace": "ks", "ranges": [{"start": "0", "end": "1"}],
            "repairedAt": 1, "dryrun": true, "partitioner": "Random",
        }))
        .unwrap();
        assert_eq!(j.unknown_fields(), ["spec.dryrun"]);
        assert_eq!(j.partitioner(), Partitioner::Random);
        // Kept on the way back out, too (local mode rewrites manifests with their status).
        assert_eq!(serde_json::to_value(&j).unwrap()["dryrun"], json!(true));
        let s: RangeStreamSpec = serde_saphyr::from_str(
            "sourceNode: n1\nkeyspace: ks\nranges: [{start: \"0\", end: \"1\"}]\n\
             destination: {nodeName: n2, service: s, nodname: n3}\nimprot: Staging\n",
        )
        .unwrap();
        assert_eq!(
            s.unknown_fields(),
            ["spec.improt", "spec.destination.nodname"]
        );
        assert_eq!(
            s.unknown_fields_explained()[0].did_you_mean.as_deref(),
            Some("spec.import")
        );
        assert_eq!(s.partitioner(), Partitioner::Murmur3, "the default");
        let bad = serde_json::from_value::<AnticompactionJobSpec>(json!({
            "nodeName": "n1", "keyspace": "ks", "ranges": [], "partitioner": "murmur3",
        }));
        assert!(bad.is_err(), "only the schema's enum values");
    }

    /// Every property of `v` (at `path`) and below has a description; no `nullable` or
    /// `additionalProperties` in a spec.
    fn check(v: &Value, path: &str, in_spec: bool, bad: &mut Vec<String>) {
        // The one map in a spec, DatacenterCleanup's label selector, needs its value schema
        // (without it, a structural schema prunes every label).
        let map = path == ".spec.podSelector"
            && v["additionalProperties"] == serde_json::json!({"type": "string"});
        if in_spec
            && (v.get("nullable").is_some() || (v.get("additionalProperties").is_some() && !map))
        {
            bad.push(format!("{path}: nullable/additionalProperties"));
        }
        let props = v
            .get("properties")
            .or_else(|| v.pointer("/items/properties"));
        for (k, p) in props.and_then(Value::as_object).into_iter().flatten() {
            let sub = format!("{path}.{k}");
            if p["description"]
                .as_str()
                .is_none_or(|d| d.trim().is_empty())
            {
                bad.push(format!("{sub}: no description"));
            }
            check(p, &sub, in_spec || sub == ".spec", bad);
        }
    }

    #[test]
    fn the_crds_describe_every_field_and_keep_unknown_spec_fields() {
        let crds = crds().unwrap();
        assert_eq!(crds.len(), 4);
        for crd in &crds {
            let v = &crd["spec"]["versions"][0];
            let schema = &v["schema"]["openAPIV3Schema"];
            let mut bad = Vec::new();
            check(schema, "", false, &mut bad);
            assert!(bad.is_empty(), "{bad:?}");
            let text = serde_json::to_string(crd).unwrap();
            assert!(!text.contains("Auto-generated"), "kube-derive boilerplate");
            assert!(!text.contains("\"default\""), "no defaults");
            let spec = &schema["properties"]["spec"];
            assert_eq!(spec["x-kubernetes-preserve-unknown-fields"], json!(true));
            let kind = crd["spec"]["names"]["kind"].as_str();
            if !matches!(kind, Some("CleanupJob") | Some("DatacenterCleanup")) {
                assert_eq!(spec["properties"]["ranges"]["minItems"], json!(1));
            }
            let columns: Vec<&str> = v["additionalPrinterColumns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap())
                .collect();
            if kind == Some("DatacenterCleanup") {
                // No node: the datacenter, then how far, rack by rack (issue 35).
                let want = ["Datacenter", "Phase", "Nodes", "Rack", "Reason", "Age"];
                assert_eq!(columns, want);
                assert_eq!(spec["oneOf"].as_array().map(Vec::len), Some(2));
                continue;
            }
            // What and where (issue 37 item 9), then the common progress columns.
            let what_where: &[&str] = match crd["spec"]["names"]["kind"].as_str() {
                Some("RangeStream") => &["Node", "To", "Datacenter", "Keyspace", "Import"],
                _ => &["Node", "Datacenter", "Keyspace", "Publish"],
            };
            let progress = ["Phase", "Progress", "Reason", "Started", "Completed", "Age"];
            assert_eq!(columns, [what_where, &progress[..]].concat());
        }
        let dest = &crds[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["spec"]["properties"]["destination"];
        assert_eq!(dest["x-kubernetes-preserve-unknown-fields"], json!(true));
        assert!(dest["oneOf"].is_array());
    }
}
