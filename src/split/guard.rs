//! The Replace guard: one rule for `split --publish replace`, `cleanup --publish replace`,
//! the operator's `publish: Replace` and `apply-pending`. Files may only be swapped under a
//! table when no Cassandra can have them open: a live node would not see the children,
//! keeps reading the parent it has open, and its own generation counter
//! (`SSTableIdFactory`/`SequenceBasedSSTableId`, max + 1 at startup) could hand out a
//! child's id again.
//!
//! Two questions, asked of `/proc` (`io::proc`):
//! 1. does a process we can see hold (open or map) a file under the directories?
//!    → `CassandraRunning` (`Busy` when it is another cleave holding the table's lock).
//!    Files are compared by device and inode, not by path: Cassandra in its own container
//!    may mount the volume elsewhere, or reach it through a bind mount;
//! 2. can we see every process that could? Not when cleave is alone in a PID namespace of
//!    its own, nor when a process that could reach the volume ([`io::proc::could_hold`]:
//!    it mounts the volume's filesystem or is privileged, and may search down to the data
//!    directory) has open files we cannot read → `CassandraMayBeRunning`. Processes that
//!    cannot reach the volume (the pod's `pause`, another container's tools) do not count.
//!
//! [`io::proc::could_hold`]: crate::io::proc::could_hold

use std::path::Path;

use super::error::PublishError;
use crate::io::lock::LockError;
use crate::io::proc::{
    holders, init_facts, judge_container_init, open_elsewhere, probe_visibility_for, Visibility,
};

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
        let held = holders(&dir);
        // Another cleave (it holds the table's flock: `io::lock`) working in the tree holds
        // its own temporary files there: that is `Busy`, not a Cassandra. Any other holder
        // wins, so a Cassandra beside a cleave is still `CassandraRunning`.
        if let Some(h) = held.iter().find(|h| !h.locks_the_tree) {
            return Err(PublishError::CassandraRunning {
                dir,
                pid: h.pid,
                cmd: format!("{} (holds {})", h.cmd, h.what),
            });
        }
        if let Some(h) = held.first() {
            return Err(PublishError::Busy(LockError::Busy {
                dir,
                holder: Some(h.pid),
            }));
        }
    }
    if let Visibility::Limited(why) = probe_visibility_for(dirs) {
        let dir = dirs.first().map(|d| d.to_path_buf()).unwrap_or_default();
        return Err(PublishError::CassandraMayBeRunning { dir, why });
    }
    Ok(CassandraStopped { _proof: () })
}

/// `apply-pending`'s guard: [`cassandra_stopped`], or — where cleave cannot see the pod's
/// other containers (no `shareProcessNamespace`, which K8ssandraCluster cannot set) — the
/// init container's proof, which holds only in that position:
///
/// 1. this process is the first and only process of a PID namespace of its own
///    ([`judge_container_init`]): a container's main process that has just started. The
///    kubelet runs a pod's init containers to completion, one after the other, before it
///    starts any of the pod's app containers (Kubernetes docs, "Init Containers": "each init
///    container must complete successfully before the next one starts", and the app
///    containers start only after all of them). So the pod's Cassandra has not started and
///    cannot start until this process exits. A process `kubectl exec`'d into the running
///    sidecar or Cassandra container is never PID 1 of it, so it still refuses;
/// 2. no file under the directories is open or mapped by any process of the node, in any
///    namespace ([`open_elsewhere`], the kernel's own count through a write lease): no
///    Cassandra of another pod (a second pod on the same volume, a misconfigured sidecar
///    running this command as its entrypoint) holds them either.
///
/// Everywhere else (split, cleanup, the operator's Replace) the guard is
/// [`cassandra_stopped`] alone: a Job's container is PID 1 too, but no kubelet ordering
/// keeps the node's Cassandra from running beside it.
///
/// [`judge_container_init`]: crate::io::proc::judge_container_init
/// [`open_elsewhere`]: crate::io::proc::open_elsewhere
pub fn cassandra_not_started(dirs: &[&Path]) -> Result<CassandraStopped, PublishError> {
    match cassandra_stopped(dirs) {
        Err(PublishError::CassandraMayBeRunning { dir, why }) => match init_container_proof(dirs) {
            Ok(()) => Ok(CassandraStopped { _proof: () }),
            Err(not) => Err(PublishError::CassandraMayBeRunning {
                dir,
                why: format!("{why}; nor is this the init container's proof: {not}"),
            }),
        },
        other => other,
    }
}

fn init_container_proof(dirs: &[&Path]) -> Result<(), String> {
    judge_container_init(&init_facts())?;
    for d in dirs {
        let mut stack = vec![d.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let rd = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for e in rd {
                let e = e.map_err(|e| format!("{}: {e}", dir.display()))?;
                let p = e.path();
                let t = e.file_type().map_err(|e| format!("{}: {e}", p.display()))?;
                if t.is_dir() {
                    stack.push(p);
                } else if t.is_file() {
                    match open_elsewhere(&p) {
                        Ok(false) => {}
                        Ok(true) => {
                            return Err(format!(
                                "{} is open or mapped by a process it cannot see (the kernel refused a write lease on it)",
                                p.display()
                            ))
                        }
                        Err(e) => {
                            return Err(format!(
                                "cannot tell whether {} is open elsewhere: write lease: {e} (run apply-pending as the files' owner, the Cassandra user, or give it CAP_LEASE)",
                                p.display()
                            ))
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
