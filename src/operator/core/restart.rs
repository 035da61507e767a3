//! `publish: OnRestart` after the staging: a resource in `AwaitingRestart` is settled from
//! what `cleave apply-pending` (the init container, before Cassandra starts) recorded on the
//! node's data volume, one outcome a table (`split::intent`). The files are the state, so
//! no lease is taken: a sidecar that starts after the restart, or one that kept running
//! (the DaemonSet shape, polling every [`POLL`]), turns the resource `Complete` or `Failed`
//! with the outcome's reason, then removes the outcome records.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::Resource;
use tracing::{info, warn};

use super::ctx::{now, Ctx};
use super::error::OperatorError;
use super::kind::Kind;
use super::observe;
use super::store::Store;
use crate::operator::crd::JobStatus;
use crate::operator::status::{self, Event};
use crate::reason::{Failure, Reason};
use crate::split::intent::{self, Outcome, OutcomeResult};

/// How often a running sidecar looks for an outcome: the bound is 30 s.
pub const POLL: Duration = Duration::from_secs(10);

/// The directory name of a resource's intents: its uid (a Kubernetes uid is a UUID), or,
/// for a resource without one (a manifest of `cleave run --manifests`), its namespace and
/// name with every other character made `_`.
pub fn job_uid<K: Resource>(obj: &K) -> String {
    let m = obj.meta();
    if let Some(u) = m
        .uid
        .as_deref()
        .filter(|u| intent::check_job_uid(u).is_ok())
    {
        return u.to_string();
    }
    let raw = format!(
        "{}-{}",
        m.namespace.as_deref().unwrap_or("default"),
        m.name.as_deref().unwrap_or_default()
    );
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// What the `AwaitingRestart` condition tells the admin: Cassandra must start again through
/// the init container, which is what a pod restart does (cass-operator's own stop is drain
/// in its preStop hook, then the pod's deletion).
pub fn how_to_restart(node: &str) -> String {
    format!(
        "restart Cassandra on {node} so that the init container `cleave apply-pending` publishes them before it starts: `kubectl delete pod {node}` (cass-operator drains it in its preStop hook and recreates it), or a cass-operator CassandraTask with command `restart` (args.rack: its rack, restarts the rack one pod at a time); this job turns Complete or Failed when the sidecar reads apply-pending's outcome (docs/operator.md \"Publish on restart\")"
    )
}

/// What the outcomes of one job come to.
#[derive(Debug, PartialEq)]
pub enum Settled {
    /// An intent still waits for apply-pending (Cassandra has not restarted yet).
    Waiting { tables: Vec<PathBuf> },
    /// Every table published: the job's results with their live children.
    Complete { results: Vec<(String, Vec<String>)> },
    /// A table was not published (the first failure's reason; the others add to the message).
    Failed(Failure),
}

/// Combines the outcomes of a job's tables. No intent and no outcome at all: the staged
/// children were lost before apply-pending ran (`PendingLost`). Pure.
pub fn settle(pending: Vec<PathBuf>, outcomes: &[Outcome]) -> Settled {
    if !pending.is_empty() {
        return Settled::Waiting { tables: pending };
    }
    if outcomes.is_empty() {
        return Settled::Failed(Failure::new(
            Reason::PendingLost,
            "the job's intents and staged children are gone from the data volume and apply-pending recorded no outcome for it: nothing was published (the parents are as they were); create the job again",
        ));
    }
    let failed: Vec<(Reason, String)> = outcomes
        .iter()
        .filter_map(|o| match &o.result {
            OutcomeResult::Failed { reason, message } => {
                Some((*reason, format!("{}: {message}", o.table_dir.display())))
            }
            OutcomeResult::Complete { .. } => None,
        })
        .collect();
    if let Some((reason, _)) = failed.first() {
        let complete = outcomes.len() - failed.len();
        let mut message = failed
            .iter()
            .map(|(_, m)| m.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        if complete > 0 {
            message.push_str(&format!(
                "; {complete} other table(s) of this job were published"
            ));
        }
        return Settled::Failed(Failure::new(*reason, message));
    }
    let results = outcomes
        .iter()
        .flat_map(|o| match &o.result {
            OutcomeResult::Complete { by_parent, .. } => by_parent
                .iter()
                .map(|p| {
                    (
                        o.table_dir.join(&p.parent).to_string_lossy().into_owned(),
                        p.children
                            .iter()
                            .map(|c| c.to_string_lossy().into_owned())
                            .collect(),
                    )
                })
                .collect::<Vec<_>>(),
            OutcomeResult::Failed { .. } => Vec::new(),
        })
        .collect();
    Settled::Complete { results }
}

/// The job's results with the children apply-pending published (matched by parent file
/// name: the data directory may be spelt differently by the two processes).
fn with_live_children(mut st: JobStatus, live: &[(String, Vec<String>)]) -> JobStatus {
    for r in &mut st.results {
        let name = Path::new(&r.parent).file_name();
        let dir = Path::new(&r.parent).parent().and_then(|d| d.file_name());
        if let Some((_, children)) = live.iter().find(|(p, _)| {
            let p = Path::new(p);
            p.file_name() == name && p.parent().and_then(|d| d.file_name()) == dir
        }) {
            r.children = children.clone();
        }
    }
    st
}

/// Settles an `AwaitingRestart` resource, or looks again after [`POLL`].
pub async fn check<K: Kind, S: Store>(
    obj: &Arc<K>,
    ctx: &Arc<Ctx<S>>,
    key: &str,
) -> Result<Action, OperatorError> {
    let d = obj.tables(&ctx.data_dir).data_dir;
    let uid = job_uid(&**obj);
    let u = uid.clone();
    let state = tokio::task::spawn_blocking(move || intent::job_state(&d, &u))
        .await
        .map_err(|e| OperatorError::Task(format!("reading the job's outcomes: {e}")))?;
    let state = match state {
        Ok(s) => s,
        Err(e) => {
            // An unreadable volume or outcome is not the job's failure: it may be transient
            // (the volume remounting); the sidecar's log and the next look say more.
            warn!(error = %e, "the outcomes of this OnRestart job cannot be read; looking again");
            return Ok(Action::requeue(POLL));
        }
    };
    let tables: Vec<PathBuf> = state.outcomes.iter().map(|o| o.table_dir.clone()).collect();
    let current = obj.status().cloned().unwrap_or_default();
    let settled = settle(state.pending, &state.outcomes);
    let (base, ev) = match &settled {
        Settled::Waiting { .. } => return Ok(Action::requeue(POLL)),
        Settled::Complete { results } => (
            with_live_children(current, results),
            Event::Finished { planned: false },
        ),
        Settled::Failed(f) => (
            current,
            Event::Failed {
                reason: f.reason,
                message: &f.message,
            },
        ),
    };
    let t = status::next(&base, ev, obj.meta().generation, now());
    // Conditional on the version this reconcile saw: of two sidecars (an old one shutting
    // down, a new one starting) one writes.
    let expect = obj.meta().resource_version.clone();
    match ctx
        .store
        .patch_status(&**obj, &t.status, expect.as_deref())
        .await
    {
        Ok(_) => {}
        Err(e) if e.is_conflict() => return Ok(Action::requeue(Duration::from_secs(1))),
        Err(e) => return Err(e),
    }
    info!(phase = ?t.status.phase, reason = ?t.status.reason, "{} settled from apply-pending's outcome", K::NOUN);
    observe::record(ctx, &**obj, key, &t.status, t.note.as_ref()).await;
    // Recorded in status: the outcome records can go (a failure here leaves a directory
    // the resource's deletion, or the next apply-pending's clean-up, removes).
    let r = tokio::task::spawn_blocking(move || {
        tables
            .iter()
            .try_for_each(|t| intent::acknowledge_outcome(t, &uid))
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r);
    if let Err(e) = r {
        warn!(error = %e, "the job's outcome records were not removed");
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::intent::{PublishedParent, FORMAT_VERSION};

    fn outcome(table: &str, result: OutcomeResult) -> Outcome {
        Outcome {
            version: FORMAT_VERSION,
            job_uid: "u".into(),
            table_dir: table.into(),
            operation: "anticompaction".into(),
            finished_unix_ms: 1,
            result,
        }
    }

    fn complete(table: &str, parent: &str, children: &[&str]) -> Outcome {
        let children: Vec<PathBuf> = children.iter().map(|c| Path::new(table).join(c)).collect();
        outcome(
            table,
            OutcomeResult::Complete {
                parents: vec![parent.into()],
                children: children.clone(),
                by_parent: vec![PublishedParent {
                    parent: parent.into(),
                    children,
                }],
            },
        )
    }

    #[test]
    fn a_pending_intent_waits_whatever_else_is_recorded() {
        let o = [complete(
            "/d/ks/t1",
            "nb-1-big-Data.db",
            &["nb-9-big-Data.db"],
        )];
        assert_eq!(
            settle(vec!["/d/ks/t2".into()], &o),
            Settled::Waiting {
                tables: vec!["/d/ks/t2".into()]
            }
        );
    }

    #[test]
    fn every_table_published_completes_with_the_live_children() {
        let o = [
            complete(
                "/d/ks/t1",
                "nb-1-big-Data.db",
                &["nb-8-big-Data.db", "nb-9-big-Data.db"],
            ),
            complete("/d/ks/t2", "nb-3-big-Data.db", &["nb-4-big-Data.db"]),
        ];
        let Settled::Complete { results } = settle(vec![], &o) else {
            panic!("not complete")
        };
        assert_eq!(results.len(), 2);
        let st = JobStatus {
            results: vec![crate::operator::crd::SSTableResult {
                parent: "/other/spelling/ks/t1/nb-1-big-Data.db".into(),
                children: vec!["/d/ks/t1/.cleave-pending/u/children-nb-1/nb-2-big-Data.db".into()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let st = with_live_children(st, &results);
        assert_eq!(
            st.results[0].children,
            ["/d/ks/t1/nb-8-big-Data.db", "/d/ks/t1/nb-9-big-Data.db"]
        );
    }

    #[test]
    fn one_failed_table_fails_the_job_with_its_reason() {
        let o = [
            complete("/d/ks/t1", "nb-1-big-Data.db", &["nb-9-big-Data.db"]),
            outcome(
                "/d/ks/t2",
                OutcomeResult::Failed {
                    reason: Reason::ParentChanged,
                    message: "nb-3-big-Data.db is gone".into(),
                },
            ),
        ];
        let Settled::Failed(f) = settle(vec![], &o) else {
            panic!("not failed")
        };
        assert_eq!(f.reason, Reason::ParentChanged);
        assert!(
            f.message.contains("/d/ks/t2: nb-3-big-Data.db is gone"),
            "{}",
            f.message
        );
        assert!(f.message.contains("1 other table(s)"), "{}", f.message);
    }

    #[test]
    fn nothing_on_the_volume_is_pending_lost() {
        let Settled::Failed(f) = settle(vec![], &[]) else {
            panic!("not failed")
        };
        assert_eq!(f.reason, Reason::PendingLost);
    }

    #[test]
    fn a_resource_without_uid_gets_a_directory_name() {
        let mut j = crate::operator::crd::AnticompactionJob::new("a.b", Default::default());
        j.metadata.namespace = Some("ns".into());
        assert_eq!(job_uid(&j), "ns-a_b");
        j.metadata.uid = Some("6f1c1c2e-0000-4000-8000-00000000beef".into());
        assert_eq!(job_uid(&j), "6f1c1c2e-0000-4000-8000-00000000beef");
    }
}
