//! `DatacenterCleanup`: one resource for a whole datacenter's cleanup after a scale-up. The
//! cluster-scoped controller (`cleave run --cluster`) fans it out into one `CleanupJob` per
//! node and keyspace, rack by rack; the node sidecars execute those as they execute any.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::operator::crd::{Condition, NAME};
use crate::operator::status::Phase;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cleave.dev",
    version = "v1alpha1",
    kind = "DatacenterCleanup",
    namespaced,
    status = "DatacenterCleanupStatus",
    shortname = "dcc",
    doc = "Clean up every node of a datacenter after a scale-up, rack by rack: one CleanupJob per node and keyspace (ownership from each node's management API, published OnRestart), then, if asked, one CassandraTask restart of the rack before the next rack starts. Executed by `cleave run --cluster` (one leader).",
    printcolumn = r#"{"name":"Datacenter","type":"string","jsonPath":".spec.datacenter"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Nodes","type":"string","jsonPath":".status.nodes.summary"}"#,
    printcolumn = r#"{"name":"Rack","type":"string","jsonPath":".status.currentRack"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
/// The desired datacenter cleanup: which nodes (a CassandraDatacenter, or pods by label),
/// which keyspaces, how many nodes of a rack at once, and whether the rack is restarted.
#[serde(rename_all = "camelCase")]
pub struct DatacenterCleanupSpec {
    /// The CassandraDatacenter (`cassandra.datastax.com/v1beta1`, this namespace) whose
    /// nodes are cleaned up: its pods (label `cassandra.datastax.com/datacenter`), its
    /// racks in `spec.racks` order, its `ScalingUp`/`ScalingDown`/`ReplacingNodes`
    /// conditions as the ring's state. Exactly one of this and `podSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub datacenter: Option<String>,
    /// Without cass-operator: the Cassandra pods of the datacenter, by label (every label
    /// must match); racks from the label `cassandra.datastax.com/rack` (absent: one rack
    /// `default`), in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<BTreeMap<String, String>>,
    /// Keyspaces to clean up on every node (one CleanupJob per node and keyspace).
    #[schemars(length(min = 1), inner(length(min = 1), regex(pattern = NAME)))]
    pub keyspaces: Vec<String>,
    /// Tables of each keyspace; empty = every table.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(min = 1), regex(pattern = NAME)))]
    pub tables: Vec<String>,
    /// Nodes of one rack cleaned up at once (default 1, as CassandraTask's
    /// `maxConcurrentPods`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrent_nodes: Option<u32>,
    /// `None` (default): every rack is staged in turn and each node publishes at its next
    /// restart, whenever that is. `CassandraTask`: once a rack is staged, one cass-operator
    /// CassandraTask `restart` of that rack (`fast`: the whole rack at once) before the
    /// next rack starts (needs `datacenter`).
    #[serde(default)]
    pub restart: RackRestart,
    /// `StopBeforeNextRack` (default): a failed node stops the cleanup before the next rack
    /// (its rack's other nodes finish). `Continue`: the other racks go on; the resource
    /// ends `Failed` all the same.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    /// Cassandra data directory on the nodes (default: each sidecar's `--data-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_directory: Option<String>,
    /// As CleanupJob's: SSTables of a table split at once on each node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parallelism: Option<u32>,
    /// As CleanupJob's: the copy throttle of each node (bytes/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_bytes_per_second: Option<u64>,
    /// As CleanupJob's: the Cassandra release that will read the children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cassandra: Option<String>,
    /// Fields the schema does not know, kept to be refused.
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// How a staged rack gets its restart.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RackRestart {
    /// Nobody restarts on the cleanup's behalf.
    #[default]
    None,
    /// A cass-operator CassandraTask `restart` of the rack.
    CassandraTask,
}

/// What a failed node does to the racks after it.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailurePolicy {
    /// No next rack starts.
    #[default]
    StopBeforeNextRack,
    /// The next racks start anyway.
    Continue,
}

/// Observed state, after cass-operator's CassandraTask: counts of nodes, the current rack,
/// one entry per node.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatacenterCleanupStatus {
    /// Pending, Running, AwaitingRestart, Complete or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Conditions, keyed by type (Running, Waiting, Failed, Complete, AwaitingRestart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The failure reason when Failed (the failed node's own, or RestartFailed, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What failed and where (node, rack, job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The rack being cleaned up (or restarted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_rack: Option<String>,
    /// Node counts.
    #[serde(default)]
    pub nodes: NodeCounts,
    /// Racks in the order they are cleaned up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub racks: Vec<RackStatus>,
    /// One entry per node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_statuses: Vec<NodeStatus>,
    /// When the first CleanupJob was created (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
}

/// Nodes by state.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    /// Nodes of the datacenter.
    pub total: u32,
    /// Nodes whose CleanupJobs run.
    pub running: u32,
    /// Nodes whose cleanup is recorded and waits for the node's restart.
    pub staged: u32,
    /// Nodes whose cleanup was published (every job Complete).
    pub published: u32,
    /// Nodes with a failed job.
    pub failed: u32,
    /// `published/total` and what is staged or failed, for `kubectl get`.
    pub summary: String,
}

/// One rack.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RackStatus {
    /// The rack's name.
    pub name: String,
    /// Pending, Cleaning, Restarting or Done.
    pub state: String,
    /// The CassandraTask that restarts it, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_task: Option<String>,
}

/// One node.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node (its pod's name, the sidecar's `--node`).
    pub node: String,
    /// Its rack.
    pub rack: String,
    /// Pending, Running, Staged, Published or Failed.
    pub state: String,
    /// Its CleanupJobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<String>,
    /// The failure reason of its failed job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// That job's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl DatacenterCleanup {
    /// Everything that fails the resource before it runs: the CRD's schema (an apiserver
    /// enforced it already; `cleave validate` meets a manifest here), unknown fields
    /// included. The one check the controller and `cleave validate` both make.
    pub fn problems_in(spec: &serde_json::Value) -> Vec<crate::operator::schema::SpecProblem> {
        crate::operator::schema::spec_problems("DatacenterCleanup", spec)
    }

    pub fn problems(&self) -> Vec<crate::operator::schema::SpecProblem> {
        match serde_json::to_value(&self.spec) {
            Ok(spec) => Self::problems_in(&spec),
            Err(e) => vec![crate::operator::schema::SpecProblem::new(
                "spec",
                crate::reason::Reason::InvalidSpec,
                format!("not serializable: {e}"),
            )],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datacenter_spec_needs_exactly_one_way_to_name_the_nodes_and_known_fields() {
        let ok = serde_json::json!({"datacenter": "dc1", "keyspaces": ["ks"]});
        assert!(DatacenterCleanup::problems_in(&ok).is_empty());
        for bad in [
            serde_json::json!({"keyspaces": ["ks"]}),
            serde_json::json!({"datacenter": "dc1", "podSelector": {"a": "b"}, "keyspaces": ["ks"]}),
            serde_json::json!({"podSelector": {"a": "b"}, "keyspaces": ["ks"], "restart": "CassandraTask"}),
            serde_json::json!({"datacenter": "dc1", "keyspaces": []}),
            serde_json::json!({"datacenter": "dc1", "keyspaces": ["ks"], "maxConcurentNodes": 2}),
        ] {
            assert!(!DatacenterCleanup::problems_in(&bad).is_empty(), "{bad}");
        }
    }
}
