//! The custom resources, group `cleave.dev`, version `v1alpha1`, both namespaced:
//! `AnticompactionJob` (split a node's sstables into repaired / pending / unrepaired
//! children) and `RangeStream` (send the part of a node's sstables covering some ranges to
//! another node). Status after batch/v1 Job and cass-operator's CassandraTask.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `(start, end]`, tokens as decimal strings (Murmur3, Random) or hex (ByteOrdered).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct TokenRange {
    pub start: String,
    pub end: String,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Layout {
    #[default]
    Auto,
    Aligned,
    Padded,
    Copy,
    Regrid,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Digest {
    #[default]
    Off,
    Combine,
    Full,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Publish {
    /// Children next to the parent in a staging area for `nodetool import`; parent kept.
    #[default]
    Stage,
    /// Children replace the parent atomically (the node's Cassandra must be stopped).
    Replace,
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "cleave.dev",
    version = "v1alpha1",
    kind = "AnticompactionJob",
    namespaced,
    status = "JobStatus",
    shortname = "acj",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress.summary"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AnticompactionJobSpec {
    /// The node whose cleave sidecar executes this job.
    pub node_name: String,
    /// Cassandra data directory on that node (default: the sidecar's `--data-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_directory: Option<String>,
    pub keyspace: String,
    /// Tables to anticompact; empty = every table of the keyspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<String>,
    /// Explicit sstables (Data.db file names); empty = every unrepaired sstable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sstables: Vec<String>,
    /// Ranges the repair session covered, `(start, end]`.
    pub ranges: Vec<TokenRange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transient_ranges: Vec<TokenRange>,
    /// Mark repaired at this time (ms since the epoch). Exactly one of this and pendingRepair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repaired_at: Option<i64>,
    /// Incremental-repair session the repaired data is pending on (UUID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_repair: Option<String>,
    #[serde(default)]
    pub layout: Layout,
    #[serde(default)]
    pub digest: Digest,
    #[serde(default)]
    pub publish: Publish,
    #[serde(default)]
    pub dry_run: bool,
    /// Rate limit for the copy path (bytes/s); sharing is not limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes_per_second: Option<u64>,
    /// SSTables split at once (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    /// Delete the job this long after it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i64>,
    /// The Cassandra release that will read the children (`4.1`, `5.0.5`, ...). Unset: the
    /// sidecar's `--cassandra-version`, else unknown, taken as the newest release line:
    /// from 5.0.5 compaction reads Data.db from position 0, so no child may start with a
    /// dead prefix (docs/compatibility.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cassandra: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    pub node_name: String,
    /// `host:port` of the receiving sidecar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Or the headless Service governing the destination pod's StatefulSet (`name` or
    /// `name.namespace`, cass-operator's `<cluster>-<dc>-all-pods-service`): cleave connects
    /// to `<nodeName>.<service>.<namespace>.svc`, the pod's own DNS name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Import {
    /// Leave received sstables in the receiver's staging directory.
    #[default]
    None,
    /// Place them in the table's staging directory for an operator's `nodetool import`.
    Staging,
    /// Import them into the live table.
    Import,
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "cleave.dev",
    version = "v1alpha1",
    kind = "RangeStream",
    namespaced,
    status = "JobStatus",
    // Not `rs`: that is ReplicaSet's, and `kubectl get rs` would list ReplicaSets
    // (tests/install.rs checks every short name against the apiserver's api-resources).
    shortname = "rstream",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.sourceNode"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress.summary"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RangeStreamSpec {
    pub source_node: String,
    pub destination: Destination,
    pub keyspace: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<String>,
    pub ranges: Vec<TokenRange>,
    #[serde(default)]
    pub layout: Layout,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes_per_second: Option<u64>,
    #[serde(default)]
    pub import: Import,
    /// The Cassandra release that will read the children (`4.1`, `5.0.5`, ...). Unset:
    /// unknown, taken as the newest release line:
    /// from 5.0.5 compaction reads Data.db from position 0, so no child may start with a
    /// dead prefix (docs/compatibility.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cassandra: Option<String>,
}

/// metav1.Condition.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    pub last_transition_time: String,
    pub reason: String,
    pub message: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    pub sstables_total: u64,
    pub sstables_done: u64,
    pub bytes_planned: u64,
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
    pub partitions: u64,
    /// "done/total" for the printer column. Never sent empty: a 1.20 apiserver's
    /// server-side apply turns "" into null and then rejects it as not a string.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SSTableResult {
    pub parent: String,
    pub children: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
    pub partitions: u64,
}

/// Who is executing the job: a worker that stops heartbeating loses it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Worker {
    pub identity: String,
    pub heartbeat_time: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<super::status::Phase>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default)]
    pub progress: Progress,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<SSTableResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<Worker>,
    /// RangeStream only: bytes, throughput and the receiver's verdict per child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamStatus>,
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
    pub children_total: u64,
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

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamSSTableResult {
    /// The parent's Data.db file name (`<keyspace>/<table dir>/` on the source).
    pub parent: String,
    pub table: String,
    pub partitions: u64,
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
    pub partitions: u64,
    pub bytes: u64,
    /// Body bytes this sidecar sent for it (0 when the receiver had it already).
    pub bytes_sent: u64,
    /// The child's Data.db on the receiver.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub published: String,
    /// count:xor:sum of the Murmur3 of every key, as the receiver re-read them.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fingerprint: String,
    pub chunks_checked: u64,
    /// The receiver had published this transfer before: nothing was sent again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

/// Removes every `default` from a schema: serde fills defaults on read, and schemars'
/// defaults for optional and enum fields are not always valid structural defaults (a real
/// 1.20 apiserver rejects them).
fn strip_defaults(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.remove("default");
            for (_, x) in m.iter_mut() {
                strip_defaults(x);
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_defaults),
        _ => {}
    }
}

/// Both CRDs as YAML documents, as `cleave crd` prints them and `crds/` holds them.
/// serde-saphyr (the YAML crate kube's client already uses) quotes strings that a YAML 1.1
/// reader such as kubectl would take for something else, e.g. the enum value `Off`
/// (a boolean to YAML 1.1).
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    use kube::CustomResourceExt;
    let mut out = String::new();
    for crd in [AnticompactionJob::crd(), RangeStream::crd()] {
        let mut v = serde_json::to_value(&crd)
            .map_err(<serde_saphyr::SerializeError as serde::ser::Error>::custom)?;
        for version in v["spec"]["versions"].as_array_mut().into_iter().flatten() {
            strip_defaults(&mut version["schema"]["openAPIV3Schema"]);
        }
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&v)?);
    }
    Ok(out)
}
