//! One step of a datacenter cleanup, decided from what the apiserver shows: the racks and
//! their nodes, the CleanupJobs this resource created, the ring's state, the rack restarts.
//! Pure: the controller gathers [`World`], applies [`Step`]'s actions, writes its status.

use std::collections::BTreeMap;

use super::crd::{
    DatacenterCleanupSpec, DatacenterCleanupStatus, FailurePolicy, NodeCounts, NodeStatus,
    RackRestart, RackStatus,
};
use crate::operator::status::{set_condition, ConditionType, Phase};
use crate::reason::{Milestone, Reason, Why};

/// One CleanupJob this resource created, as its status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildJob {
    pub name: String,
    pub node: String,
    pub keyspace: String,
    pub phase: Phase,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// A rack restart (CassandraTask), as cass-operator reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    Running,
    Complete,
    Failed(String),
}

/// What the controller read.
#[derive(Debug, Clone, Default)]
pub struct World {
    /// Racks in cleanup order, each with its nodes in name order.
    pub racks: Vec<(String, Vec<String>)>,
    pub jobs: Vec<ChildJob>,
    /// Why ownership is not settled now (a scale-up, a decommission, a replace), if so.
    pub ring_changing: Option<String>,
    /// Restart tasks by rack.
    pub tasks: BTreeMap<String, TaskState>,
}

/// What the controller does next.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// CleanupJobs to create: (node, keyspace).
    pub create: Vec<(String, String)>,
    /// CleanupJobs to delete so they are made again: they refused a changing ring and
    /// did nothing.
    pub retry: Vec<String>,
    /// The rack whose restart task to create.
    pub restart: Option<String>,
    pub status: DatacenterCleanupStatus,
}

/// Where one node is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NodeState {
    Pending,
    Running,
    Staged,
    Published,
    Failed { reason: String, message: String },
}

impl NodeState {
    fn as_str(&self) -> &'static str {
        match self {
            NodeState::Pending => "Pending",
            NodeState::Running => "Running",
            NodeState::Staged => "Staged",
            NodeState::Published => "Published",
            NodeState::Failed { .. } => "Failed",
        }
    }

    /// Nothing more happens on this node before a restart.
    fn settled(&self) -> bool {
        matches!(
            self,
            NodeState::Staged | NodeState::Published | NodeState::Failed { .. }
        )
    }
}

/// A job that refused a changing ring changed nothing (`CleanupJob` checks the ring
/// before it records anything): it is made again once the ring is stable.
fn refused_ring(j: &ChildJob) -> bool {
    j.phase == Phase::Failed && j.reason.as_deref() == Some(Reason::RingChanging.as_str())
}

fn node_state(spec: &DatacenterCleanupSpec, jobs: &[&ChildJob]) -> NodeState {
    if let Some(f) = jobs
        .iter()
        .find(|j| j.phase == Phase::Failed && !refused_ring(j))
    {
        return NodeState::Failed {
            reason: f.reason.clone().unwrap_or_else(|| "Failed".into()),
            message: format!(
                "CleanupJob {} (keyspace {}): {}",
                f.name,
                f.keyspace,
                f.message.as_deref().unwrap_or("failed")
            ),
        };
    }
    let live: Vec<&&ChildJob> = jobs.iter().filter(|j| !refused_ring(j)).collect();
    let all_made = spec
        .keyspaces
        .iter()
        .all(|k| live.iter().any(|j| &j.keyspace == k));
    if live.is_empty() {
        NodeState::Pending
    } else if !all_made {
        NodeState::Running
    } else if live.iter().all(|j| j.phase == Phase::Complete) {
        NodeState::Published
    } else if live
        .iter()
        .all(|j| matches!(j.phase, Phase::Complete | Phase::AwaitingRestart))
    {
        NodeState::Staged
    } else {
        NodeState::Running
    }
}

/// The next step of the DatacenterCleanup `name`. `prev` is the status so far (start time,
/// conditions' transition times).
pub fn step(
    name: &str,
    spec: &DatacenterCleanupSpec,
    prev: &DatacenterCleanupStatus,
    world: &World,
    generation: Option<i64>,
    now: &str,
) -> Step {
    let mut out = Step {
        status: DatacenterCleanupStatus {
            conditions: prev.conditions.clone(),
            start_time: prev.start_time.clone(),
            completion_time: prev.completion_time.clone(),
            observed_generation: generation,
            ..Default::default()
        },
        ..Default::default()
    };
    let st = &mut out.status;
    let mut states: Vec<(String, String, NodeState, Vec<String>)> = Vec::new();
    for (rack, nodes) in &world.racks {
        for node in nodes {
            let jobs: Vec<&ChildJob> = world.jobs.iter().filter(|j| &j.node == node).collect();
            let s = node_state(spec, &jobs);
            if world.ring_changing.is_none() {
                out.retry.extend(
                    jobs.iter()
                        .filter(|j| refused_ring(j))
                        .map(|j| j.name.clone()),
                );
            }
            let names = jobs.iter().map(|j| j.name.clone()).collect();
            states.push((rack.clone(), node.clone(), s, names));
        }
    }
    // Reversed so that a node listed twice reads as its first entry, as a scan would.
    let by_node: BTreeMap<&str, &NodeState> =
        states.iter().rev().map(|s| (s.1.as_str(), &s.2)).collect();
    let count = |f: &dyn Fn(&NodeState) -> bool| states.iter().filter(|s| f(&s.2)).count() as u32;
    st.nodes = NodeCounts {
        total: states.len() as u32,
        running: count(&|s| *s == NodeState::Running),
        staged: count(&|s| *s == NodeState::Staged),
        published: count(&|s| *s == NodeState::Published),
        failed: count(&|s| matches!(s, NodeState::Failed { .. })),
        summary: String::new(),
    };
    let n = &st.nodes;
    st.nodes.summary = format!(
        "{}/{} published, {} staged, {} failed",
        n.published, n.total, n.staged, n.failed
    );
    st.node_statuses = states
        .iter()
        .map(|(rack, node, s, jobs)| {
            let (reason, message) = match s {
                NodeState::Failed { reason, message } => {
                    (Some(reason.clone()), Some(message.clone()))
                }
                _ => (None, None),
            };
            NodeStatus {
                node: node.clone(),
                rack: rack.clone(),
                state: s.as_str().into(),
                jobs: jobs.clone(),
                reason,
                message,
            }
        })
        .collect();
    let first_failed = states.iter().find_map(|(rack, node, s, _)| match s {
        NodeState::Failed { reason, message } => Some((rack, node, reason, message)),
        _ => None,
    });
    // A rack is done when nothing more happens there: every node published, or (no restart
    // asked) staged for whatever restarts it next, or failed under `Continue`; and its
    // restart task, if it has one, is complete: each pod publishes (apply-pending, its init
    // container) before its Cassandra is back, so its jobs are Complete while cass-operator
    // still restarts the rack, and the next rack must not start (nor restart) meanwhile.
    let restarting = |rack: &str| {
        spec.restart == RackRestart::CassandraTask
            && matches!(
                world.tasks.get(rack),
                Some(TaskState::Running | TaskState::Failed(_))
            )
    };
    let rack_done = |rack: &str| {
        !restarting(rack)
            && states.iter().filter(|s| s.0 == rack).all(|s| match &s.2 {
                NodeState::Published => true,
                NodeState::Staged => spec.restart == RackRestart::None,
                NodeState::Failed { .. } => spec.failure_policy == FailurePolicy::Continue,
                _ => false,
            })
    };
    let stop = first_failed.is_some() && spec.failure_policy == FailurePolicy::StopBeforeNextRack;
    let current = world.racks.iter().find(|(r, _)| !rack_done(r));
    let mut phase = Phase::Running;
    let mut failure: Option<(String, String)> =
        first_failed.map(|(rack, node, reason, message)| {
            (
                reason.clone(),
                format!("node {node} (rack {rack}): {message}"),
            )
        });
    let mut waiting: Option<String> = None;
    match current {
        None => {
            phase = if failure.is_some() {
                Phase::Failed
            } else if st.nodes.staged > 0 {
                Phase::AwaitingRestart
            } else {
                Phase::Complete
            };
        }
        Some((rack, nodes)) => {
            st.current_rack = Some(rack.clone());
            let of = |node: &String| {
                by_node
                    .get(node.as_str())
                    .map_or(NodeState::Pending, |s| (*s).clone())
            };
            let running = nodes.iter().filter(|n| of(n) == NodeState::Running).count();
            let settled = nodes.iter().all(|n| of(n).settled());
            if stop {
                // The failed node's rack finishes what runs; nothing new starts.
                phase = if running > 0 {
                    Phase::Running
                } else {
                    Phase::Failed
                };
            } else if !settled {
                if let Some(why) = &world.ring_changing {
                    waiting = Some(why.clone());
                } else {
                    let slots = (spec.max_concurrent_nodes.unwrap_or(1).max(1) as usize)
                        .saturating_sub(running);
                    // A node whose refused job is still being deleted waits for the
                    // next step: its new job takes the same name.
                    let refusing = |node: &String| {
                        world
                            .jobs
                            .iter()
                            .any(|j| &j.node == node && refused_ring(j))
                    };
                    for node in nodes
                        .iter()
                        .filter(|n| of(n) == NodeState::Pending && !refusing(n))
                        .take(slots)
                    {
                        for k in &spec.keyspaces {
                            out.create.push((node.clone(), k.clone()));
                        }
                    }
                    // A node with only some of its keyspaces' jobs (one was retried).
                    for node in nodes.iter().filter(|n| of(n) == NodeState::Running) {
                        for k in &spec.keyspaces {
                            let made = world
                                .jobs
                                .iter()
                                .any(|j| &j.node == node && &j.keyspace == k && !refused_ring(j));
                            if !made && !refusing(node) {
                                out.create.push((node.clone(), k.clone()));
                            }
                        }
                    }
                }
            } else {
                // Settled and restart asked (else the rack would be done): its task.
                phase = Phase::AwaitingRestart;
                match world.tasks.get(rack) {
                    None => out.restart = Some(rack.clone()),
                    Some(TaskState::Failed(m)) => {
                        failure = Some((
                            Reason::RestartFailed.as_str().into(),
                            format!("the CassandraTask restart of rack {rack} failed: {m}"),
                        ));
                        phase = Phase::Failed;
                    }
                    // Complete: the sidecars settle each job from apply-pending's outcome.
                    Some(_) => {}
                }
            }
        }
    }
    st.racks = world
        .racks
        .iter()
        .map(|(r, _)| {
            let done = rack_done(r);
            let state = if done {
                "Done"
            } else if st.current_rack.as_deref() == Some(r.as_str()) {
                if world.tasks.contains_key(r) || out.restart.as_deref() == Some(r.as_str()) {
                    "Restarting"
                } else {
                    "Cleaning"
                }
            } else {
                "Pending"
            };
            RackStatus {
                name: r.clone(),
                state: state.into(),
                restart_task: (world.tasks.contains_key(r)
                    || out.restart.as_deref() == Some(r.as_str()))
                .then(|| task_name(name, r)),
            }
        })
        .collect();
    if phase == Phase::Failed {
        st.current_rack = None;
    }
    if st.start_time.is_none() && (!out.create.is_empty() || !world.jobs.is_empty()) {
        st.start_time = Some(now.into());
    }
    let g = generation;
    let conds = &mut st.conditions;
    set_condition(
        conds,
        ConditionType::Running,
        phase == Phase::Running,
        Why::Milestone(Milestone::Started),
        &format!("rack {}", st.current_rack.as_deref().unwrap_or("-")),
        g,
        now,
    );
    match &waiting {
        Some(why) => set_condition(
            conds,
            ConditionType::Waiting,
            true,
            Why::Failure(Reason::RingChanging),
            &format!("paused at a node boundary: {why}"),
            g,
            now,
        ),
        None => set_condition(
            conds,
            ConditionType::Waiting,
            false,
            Why::Milestone(Milestone::Resumed),
            "the ring is stable",
            g,
            now,
        ),
    }
    set_condition(
        conds,
        ConditionType::AwaitingRestart,
        phase == Phase::AwaitingRestart,
        Why::Milestone(Milestone::AwaitingRestart),
        &st.nodes.summary,
        g,
        now,
    );
    st.phase = Some(phase);
    if let Some((reason, message)) = &failure {
        record_failure(st, reason, message, g, now);
    }
    if phase == Phase::Complete {
        set_condition(
            &mut st.conditions,
            ConditionType::Complete,
            true,
            Why::Milestone(Milestone::Completed),
            &st.nodes.summary,
            g,
            now,
        );
        if st.completion_time.is_none() {
            st.completion_time = Some(now.into());
        }
    }
    out
}

/// A failure into the status: `reason`, `message` and the Failed condition; the completion
/// time too once the phase is Failed. Under `failurePolicy: Continue` (or while the failed
/// rack finishes what runs) the failure is recorded while the phase is still Running.
/// `reason` may be a child CleanupJob's that is none of cleave's reasons (a failed job that
/// gave none reads `Failed`): the condition then says CheckFailed, `status.reason` keeps it.
pub fn record_failure(
    st: &mut DatacenterCleanupStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &str,
) {
    let why = reason
        .parse::<Reason>()
        .map(Why::Failure)
        .unwrap_or(Why::Failure(Reason::CheckFailed));
    let conds = &mut st.conditions;
    set_condition(
        conds,
        ConditionType::Failed,
        true,
        why,
        message,
        generation,
        now,
    );
    st.reason = Some(reason.into());
    st.message = Some(message.into());
    if st.phase == Some(Phase::Failed) && st.completion_time.is_none() {
        st.completion_time = Some(now.into());
    }
}

/// The name of a rack's restart task (a CassandraTask): `<cleanup>-restart-<rack>`, cut to
/// the 253 characters of a DNS subdomain name and lowercased as object names must be.
pub fn task_name(cleanup: &str, rack: &str) -> String {
    let mut n = format!("{cleanup}-restart-{rack}");
    n.truncate(253);
    n.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-12-07T00:00:00Z";

    fn spec(restart: RackRestart, max: u32) -> DatacenterCleanupSpec {
        DatacenterCleanupSpec {
            datacenter: Some("dc1".into()),
            keyspaces: vec!["ks".into()],
            max_concurrent_nodes: Some(max),
            restart,
            ..Default::default()
        }
    }

    fn world() -> World {
        World {
            racks: vec![
                ("r1".into(), vec!["a1".into(), "a2".into()]),
                ("r2".into(), vec!["b1".into(), "b2".into()]),
            ],
            ..Default::default()
        }
    }

    fn job(node: &str, phase: Phase, reason: Option<&str>) -> ChildJob {
        ChildJob {
            name: format!("j-{node}"),
            node: node.into(),
            keyspace: "ks".into(),
            phase,
            reason: reason.map(str::to_string),
            message: reason.map(|r| format!("{r} on {node}")),
        }
    }

    fn run(s: &DatacenterCleanupSpec, w: &World) -> Step {
        step(
            "dcc",
            s,
            &DatacenterCleanupStatus::default(),
            w,
            Some(1),
            NOW,
        )
    }

    #[test]
    fn datacenter_starts_with_the_first_rack_up_to_the_concurrency() {
        let st = run(&spec(RackRestart::None, 1), &world());
        assert_eq!(st.create, vec![("a1".into(), "ks".into())]);
        assert_eq!(st.status.current_rack.as_deref(), Some("r1"));
        assert_eq!(st.status.phase, Some(Phase::Running));
        let st = run(&spec(RackRestart::None, 2), &world());
        assert_eq!(st.create.len(), 2, "both nodes of r1, none of r2");
        assert!(st.create.iter().all(|(n, _)| n.starts_with('a')));
    }

    #[test]
    fn datacenter_next_rack_waits_for_the_restart_when_asked() {
        let mut w = world();
        w.jobs = vec![
            job("a1", Phase::AwaitingRestart, None),
            job("a2", Phase::AwaitingRestart, None),
        ];
        // Without restart: staged is done, r2 starts.
        let st = run(&spec(RackRestart::None, 1), &w);
        assert_eq!(st.create, vec![("b1".into(), "ks".into())]);
        // With restart: the task first, nothing in r2.
        let s = spec(RackRestart::CassandraTask, 1);
        let st = run(&s, &w);
        assert!(st.create.is_empty());
        assert_eq!(st.restart.as_deref(), Some("r1"));
        assert_eq!(st.status.phase, Some(Phase::AwaitingRestart));
        // Task complete but the jobs not settled yet: still waiting, no second task.
        w.tasks.insert("r1".into(), TaskState::Complete);
        let st = run(&s, &w);
        assert!(st.create.is_empty() && st.restart.is_none());
        // Published: r2.
        w.jobs = vec![
            job("a1", Phase::Complete, None),
            job("a2", Phase::Complete, None),
        ];
        let st = run(&s, &w);
        assert_eq!(st.create, vec![("b1".into(), "ks".into())]);
        assert_eq!(st.status.racks[0].state, "Done");
        assert_eq!(st.status.racks[1].state, "Cleaning");
    }

    #[test]
    fn datacenter_a_failed_node_stops_the_next_rack_and_is_named() {
        let mut w = world();
        w.jobs = vec![
            job("a1", Phase::Failed, Some("InsufficientSpace")),
            job("a2", Phase::AwaitingRestart, None),
        ];
        let st = run(&spec(RackRestart::None, 1), &w);
        assert!(st.create.is_empty(), "{:?}", st.create);
        assert_eq!(st.status.phase, Some(Phase::Failed));
        assert_eq!(st.status.reason.as_deref(), Some("InsufficientSpace"));
        let m = st.status.message.unwrap();
        assert!(m.contains("a1") && m.contains("r1"), "{m}");
        // Continue: r2 goes on, the end is Failed all the same.
        let mut s = spec(RackRestart::None, 1);
        s.failure_policy = FailurePolicy::Continue;
        let st = run(&s, &w);
        assert_eq!(st.create, vec![("b1".into(), "ks".into())]);
        w.jobs.push(job("b1", Phase::AwaitingRestart, None));
        w.jobs.push(job("b2", Phase::AwaitingRestart, None));
        let st = run(&s, &w);
        assert_eq!(st.status.phase, Some(Phase::Failed));
    }

    #[test]
    fn datacenter_a_ring_change_pauses_and_a_refused_job_is_made_again() {
        let mut w = world();
        w.ring_changing = Some("ScalingUp".into());
        w.jobs = vec![job("a1", Phase::Failed, Some("RingChanging"))];
        let st = run(&spec(RackRestart::None, 1), &w);
        assert!(st.create.is_empty() && st.retry.is_empty());
        assert_eq!(
            st.status.phase,
            Some(Phase::Running),
            "paused is not failed"
        );
        let waiting = st
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Waiting")
            .unwrap();
        assert_eq!(
            (waiting.status.as_str(), waiting.reason.as_str()),
            ("True", "RingChanging")
        );
        w.ring_changing = None;
        let st = run(&spec(RackRestart::None, 1), &w);
        assert_eq!(st.retry, vec!["j-a1".to_string()]);
        assert!(
            !st.create.iter().any(|(n, _)| n == "a1"),
            "made again once the refused one is gone (a2 may go first): {:?}",
            st.create
        );
        w.jobs.clear();
        let st = run(&spec(RackRestart::None, 1), &w);
        assert_eq!(st.create, vec![("a1".into(), "ks".into())]);
    }

    #[test]
    fn datacenter_a_published_rack_waits_for_its_restart_task() {
        let mut w = world();
        w.jobs = vec![
            job("a1", Phase::Complete, None),
            job("a2", Phase::Complete, None),
        ];
        w.tasks.insert("r1".into(), TaskState::Running);
        let s = spec(RackRestart::CassandraTask, 1);
        let st = run(&s, &w);
        assert!(st.create.is_empty() && st.restart.is_none(), "{st:?}");
        assert_eq!(st.status.current_rack.as_deref(), Some("r1"));
        assert_eq!(st.status.racks[0].state, "Restarting");
        w.tasks.insert(
            "r1".into(),
            TaskState::Failed("pod a2 did not start".into()),
        );
        let st = run(&s, &w);
        assert!(st.create.is_empty(), "{:?}", st.create);
        assert_eq!(st.status.phase, Some(Phase::Failed));
        assert_eq!(st.status.reason.as_deref(), Some("RestartFailed"));
        w.tasks.insert("r1".into(), TaskState::Complete);
        let st = run(&s, &w);
        assert_eq!(st.create, vec![("b1".into(), "ks".into())]);
    }

    #[test]
    fn datacenter_a_failed_restart_task_fails_the_cleanup() {
        let mut w = world();
        w.jobs = vec![
            job("a1", Phase::AwaitingRestart, None),
            job("a2", Phase::AwaitingRestart, None),
        ];
        w.tasks.insert(
            "r1".into(),
            TaskState::Failed("pod a2 did not start".into()),
        );
        let st = run(&spec(RackRestart::CassandraTask, 1), &w);
        assert_eq!(st.status.phase, Some(Phase::Failed));
        assert_eq!(st.status.reason.as_deref(), Some("RestartFailed"));
    }

    #[test]
    fn datacenter_all_published_is_complete() {
        let mut w = world();
        w.jobs = ["a1", "a2", "b1", "b2"]
            .iter()
            .map(|n| job(n, Phase::Complete, None))
            .collect();
        let st = run(&spec(RackRestart::CassandraTask, 1), &w);
        assert_eq!(st.status.phase, Some(Phase::Complete));
        assert_eq!(st.status.nodes.published, 4);
        assert!(st.status.completion_time.is_some());
    }
}
