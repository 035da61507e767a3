//! The Replace guard: one rule for `split --publish replace`, `cleanup --publish replace`,
//! the operator's `publish: Replace` and `apply-pending`. Files may only be swapped under a
//! table when no Cassandra can have them open: a live node would not see the children,
//! keeps reading the parent it has open, and its own generation counter
//! (`SSTableIdFactory`/`SequenceBasedSSTableId`, max + 1 at startup) could hand out a
//! child's id again.
//!
//! Two questions, asked of `/proc` (`io::proc`):
//! 1. does a process we can see hold (open or map) a file under the directories?
//!    → `CassandraRunning`;
//! 2. can we see every process that could? Not when cleave is alone in a PID namespace of
//!    its own, nor when a process that could reach the volume ([`io::proc::could_hold`]:
//!    it mounts the volume's filesystem or is privileged, and may search down to the data
//!    directory) has open files we cannot read → `CassandraMayBeRunning`. Processes that
//!    cannot reach the volume (the pod's `pause`, another container's tools) do not count.
//!
//! [`io::proc::could_hold`]: crate::io::proc::could_hold

use std::path::Path;

use super::error::PublishError;
use super::publish::processes_holding;
use crate::io::proc::{probe_visibility_for, Visibility};

/// The proof that no Cassandra (nor anything else we could not see) had a file of the
/// directories open when the guard looked: only [`cassandra_stopped`] makes one. A Replace
/// cannot be published without it (`publish::replace_all` takes it), and with it the
/// engine may make its result durable with one `syncfs` instead of an fsync a file
/// (`publish::Durability::SyncFs`): nothing else writes to the filesystem's table
/// directories, so flushing the whole filesystem costs no one else's pages.
#[derive(Debug)]
pub struct CassandraStopped {
    _proof: (),
}

/// Refuses unless no process holds a file under any of `dirs` and every process that could
/// is visible. Changes nothing.
pub fn ensure_no_cassandra(dirs: &[&Path]) -> Result<(), PublishError> {
    cassandra_stopped(dirs).map(|_| ())
}

/// `ensure_no_cassandra`, keeping the proof for the write and publish path.
pub fn cassandra_stopped(dirs: &[&Path]) -> Result<CassandraStopped, PublishError> {
    for d in dirs {
        let dir = std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf());
        if let Some((pid, cmd)) = processes_holding(&dir).into_iter().next() {
            return Err(PublishError::CassandraRunning { dir, pid, cmd });
        }
    }
    if let Visibility::Limited(why) = probe_visibility_for(dirs) {
        let dir = dirs.first().map(|d| d.to_path_buf()).unwrap_or_default();
        return Err(PublishError::CassandraMayBeRunning { dir, why });
    }
    Ok(CassandraStopped { _proof: () })
}
