//! What a kind brings to the core. Adding a kind is a module that implements [`Kind`] and
//! one line in `controller::run` and `local::run`; nothing else is written again.

use std::fmt::Debug;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::ctx::Ctx;
use super::store::Store;
use crate::operator::crd::JobStatus;
use crate::operator::decide::TableClaim;
use crate::operator::schema::{self, SpecProblem};
use crate::reason::Failure;

/// The three accessors every kind writes alike: its status in `.status`, the acting node in
/// `.spec.<field>` (`node_name` for jobs, `source_node` for a stream).
#[macro_export]
macro_rules! kind_status_and_node {
    ($node:ident) => {
        fn status(&self) -> Option<&$crate::operator::crd::JobStatus> {
            self.status.as_ref()
        }

        fn set_status(&mut self, status: Option<$crate::operator::crd::JobStatus>) {
            self.status = status;
        }

        fn acting_node(&self) -> &str {
            &self.spec.$node
        }
    };
}

pub trait Kind:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The resource's kind, also the `kind` metric label.
    const KIND: &'static str;
    /// What the logs call one (`job`, `stream`): "job ended", "stream failed" are the
    /// messages tests, dashboards and log alerts look for.
    const NOUN: &'static str;
    /// How long a deletion waits for a running execution to stop before the finalizer
    /// reports an error (and is retried).
    const STOP_BUDGET: std::time::Duration = std::time::Duration::from_secs(300);

    fn status(&self) -> Option<&JobStatus>;
    fn set_status(&mut self, status: Option<JobStatus>);
    /// The node whose sidecar acts on this resource (`spec.nodeName`, `spec.sourceNode`).
    /// Every other sidecar ignores it entirely: no status, no finalizer.
    fn acting_node(&self) -> &str;
    /// The kind's own checks no file is needed for (labels, tokens, rules across fields the
    /// schema cannot say): every problem, not only the first.
    fn checks(&self) -> Vec<SpecProblem>;
    /// Everything that fails the resource before it runs: the CRD's schema (an apiserver
    /// enforced it already; a `--local` manifest meets it here) and [`Kind::checks`]. The one
    /// function the controller and `cleave validate` both call.
    fn problems(&self) -> Vec<SpecProblem> {
        let spec = match serde_json::to_value(self) {
            Ok(mut v) => v["spec"].take(),
            Err(e) => {
                return vec![SpecProblem::new(
                    "spec",
                    crate::reason::Reason::InvalidSpec,
                    format!("not serializable: {e}"),
                )]
            }
        };
        self.problems_in(&spec)
    }
    /// [`Kind::problems`] with the schema applied to `spec` as written (`cleave validate`:
    /// a field the typed spec drops, such as a misspelt key of a range, is still seen).
    fn problems_in(&self, spec: &serde_json::Value) -> Vec<SpecProblem> {
        schema::merge(schema::spec_problems(Self::KIND, spec), self.checks())
    }
    /// [`Kind::problems`] as the failure of the resource: the first problem's reason, every
    /// problem in the message.
    fn validate(&self) -> Result<(), Failure> {
        match schema::failure_of(&self.problems()) {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }
    /// Delete the resource this long after it finished.
    fn ttl_seconds_after_finished(&self) -> Option<i64> {
        None
    }
    /// The copy rate limit the execution applies (`cleave_throttle_bytes_per_second`).
    fn rate_limit(&self) -> Option<u64> {
        None
    }
    /// The tables its execution holds: two executions on one table never run side by side.
    fn tables(&self, default_data_dir: &Path) -> TableClaim;
    /// The execution, on a task of its own once the lease is taken. It writes its progress
    /// through `run.lease(...)` and ends with `core::lease::finish`.
    fn work<S: Store>(
        self: Arc<Self>,
        ctx: Arc<Ctx<S>>,
        run: Run,
    ) -> impl Future<Output = ()> + Send;
    /// A finished resource whose maintenance window is still open (its run ended before
    /// Cassandra was started again, e.g. the start failed through an outage of the agent):
    /// starts Cassandra and records the window closed. `false`: not closed yet, look again
    /// later. Kinds without a window have none.
    fn close_window<S: Store>(
        self: Arc<Self>,
        _ctx: Arc<Ctx<S>>,
    ) -> impl Future<Output = bool> + Send {
        async { true }
    }
    /// Deletion, after the core stopped a running execution (`stopped`): removes this node's
    /// unpublished leftovers. Returns what the `Cleanup` Event says.
    fn cleanup<S: Store>(
        self: Arc<Self>,
        ctx: Arc<Ctx<S>>,
        stopped: bool,
    ) -> impl Future<Output = String> + Send;
}

/// A claimed execution: what the core hands to [`Kind::work`].
pub struct Run {
    /// `kind/namespace/name`, the key of `Ctx::runs` and the metrics maps.
    pub key: String,
    /// The status the claim wrote.
    pub claimed: JobStatus,
    /// Its resourceVersion: the precondition of the run's first status write.
    pub rv: Option<String>,
    /// Set to stop after the current sstable (deletion, shutdown, lease lost).
    pub cancel: Arc<AtomicBool>,
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Complete,
    /// A dry run: status says what would be done.
    Planned,
    /// Stopped between two sstables (shutdown, deletion, lease lost).
    Interrupted,
    Failed(Failure),
    /// `publish: OnRestart`: the children are staged; this says how to restart Cassandra
    /// so that `cleave apply-pending` publishes them (`core::restart` settles the job then).
    Staged(String),
}

impl Ended {
    /// The `result` label of `cleave_job_duration_seconds`.
    pub fn label(&self) -> &'static str {
        match self {
            Ended::Complete => "complete",
            Ended::Planned => "planned",
            Ended::Interrupted => "interrupted",
            Ended::Failed(_) => "failed",
            Ended::Staged(_) => "staged",
        }
    }
}

/// `kind/namespace/name`: the one key of a resource in this sidecar's maps and logs.
pub fn key_of<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}
