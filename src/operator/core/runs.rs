//! The executions running on this sidecar: a cancel flag each and the tables they hold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::operator::decide::TableClaim;
use crate::reason::Reason;

/// The jobs running on this sidecar: a cancel flag each and the tables they hold.
#[derive(Default)]
pub struct Runs {
    inner: Mutex<HashMap<String, RunEntry>>,
}

struct RunEntry {
    cancel: Arc<AtomicBool>,
    tables: TableClaim,
}

/// Why a job cannot start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// Another job of this node works on one of its tables.
    TableBusy { other: String, tables: String },
    /// `--max-concurrent-jobs` jobs are running.
    ConcurrencyLimit { max: usize },
}

impl Blocked {
    pub fn reason(&self) -> Reason {
        match self {
            Blocked::TableBusy { .. } => Reason::TableBusy,
            Blocked::ConcurrencyLimit { .. } => Reason::ConcurrencyLimit,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Blocked::TableBusy { other, tables } => format!(
                "waits for {other}, which works on {tables} on this node: jobs and streams on one table run one at a time"
            ),
            Blocked::ConcurrencyLimit { max } => format!(
                "waits for a slot: {max} jobs already run on this node (--max-concurrent-jobs)"
            ),
        }
    }
}

impl Runs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunEntry>> {
        // A panic while holding the lock leaves at most one stale entry, which its task's
        // end removes; the map itself stays consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_running(&self, key: &str) -> bool {
        self.lock().contains_key(key)
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Registers a run unless a limit holds it back; one lock, so two reconciles cannot
    /// both take the last slot or the same table.
    pub fn try_start(
        &self,
        key: &str,
        tables: TableClaim,
        max: usize,
    ) -> Result<Arc<AtomicBool>, Blocked> {
        let mut m = self.lock();
        if let Some((other, e)) = m.iter().find(|(_, e)| e.tables.conflicts(&tables)) {
            return Err(Blocked::TableBusy {
                other: other
                    .split_once('/')
                    .map_or(other.as_str(), |(_, o)| o)
                    .to_string(),
                tables: e.tables.describe(),
            });
        }
        if m.len() >= max.max(1) {
            return Err(Blocked::ConcurrencyLimit { max: max.max(1) });
        }
        let cancel = Arc::new(AtomicBool::new(false));
        m.insert(
            key.to_string(),
            RunEntry {
                cancel: cancel.clone(),
                tables,
            },
        );
        Ok(cancel)
    }

    pub fn finish(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Asks a run to stop after its current sstable. False if it is not running here.
    pub fn cancel(&self, key: &str) -> bool {
        self.lock()
            .get(key)
            .map(|e| e.cancel.store(true, Ordering::Relaxed))
            .is_some()
    }

    pub fn cancel_all(&self) {
        for e in self.lock().values() {
            e.cancel.store(true, Ordering::Relaxed);
        }
    }

    /// Waits until no job runs (or `timeout` passes); true if none does.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let t = Instant::now();
        while self.count() > 0 {
            if t.elapsed() > timeout {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    }

    /// Waits until `key` no longer runs (or `timeout` passes).
    pub async fn wait_stopped(&self, key: &str, timeout: Duration) -> bool {
        let t = Instant::now();
        while self.is_running(key) {
            if t.elapsed() > timeout {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        true
    }
}
