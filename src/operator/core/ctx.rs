//! What every reconcile of this sidecar shares.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::runs::Runs;
use super::store::Store;
use crate::operator::decide;
use crate::operator::job::NodeLimits;
use crate::operator::metrics::Metrics;
use crate::operator::status::Phase;
use crate::reason::Reason;

pub struct Ctx<S: Store> {
    pub store: S,
    pub node: String,
    /// This sidecar process (node/pid/start): a heartbeat from another identity is another worker.
    pub identity: String,
    pub data_dir: PathBuf,
    pub metrics: Arc<Metrics>,
    /// Set on SIGTERM: running jobs stop after their current sstable.
    pub shutdown: Arc<AtomicBool>,
    /// Last seen phase of each of this node's resources (`kind/ns/name`), for `cleave_jobs`.
    pub phases: Mutex<HashMap<String, (&'static str, Phase)>>,
    /// Resources held back by a limit (`key` → reason), for `cleave_jobs_waiting`.
    pub waiting: Mutex<HashMap<String, (&'static str, Reason)>>,
    pub runs: Runs,
    pub limits: NodeLimits,
    /// Heartbeat period of a running job (a third of the lease).
    pub heartbeat: Duration,
    /// How this sidecar reaches receivers as a RangeStream's source.
    pub stream: crate::operator::stream::StreamClient,
    /// `--management-api`: this node's agent, for maintenance windows.
    pub window: Option<crate::operator::window::NodeApi>,
}

impl<S: Store> Ctx<S> {
    pub fn new(store: S, node: &str, data_dir: PathBuf, metrics: Arc<Metrics>) -> Ctx<S> {
        Ctx {
            store,
            node: node.to_string(),
            identity: identity(node),
            data_dir,
            metrics,
            shutdown: Arc::new(AtomicBool::new(false)),
            phases: Default::default(),
            waiting: Default::default(),
            runs: Runs::default(),
            limits: NodeLimits::default(),
            heartbeat: decide::LEASE / 3,
            stream: Default::default(),
            window: None,
        }
    }

    pub fn shutdown_requested(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }
}

/// `node/pid/start-second`: unique per process, readable in `status.worker`.
pub fn identity(node: &str) -> String {
    format!("{node}/{}/{}", std::process::id(), now())
}

pub fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}
