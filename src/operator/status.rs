//! Every status transition of both resources, as a pure function of (status, event, now).
//!
//! The reconciler decides (`decide.rs`), applies (runs, waits, deletes) and records what
//! [`next`] returns: the status to write and the Kubernetes Event to publish. Nothing else
//! writes `phase`, `conditions`, `reason`, `message`, the times or the lease, so the rules
//! below are the whole state machine:
//!
//! ```text
//! Pending --Claimed--> Running --Finished--> Complete | Planned (dry run)
//!    |  ^                 |  \--Failed----> Failed
//!    |  '--Waiting        |  \--Interrupted (stays Running, lease released)
//!    '--Rejected--> Failed |  '--Heartbeat / Progress (stays Running)
//!                         '--Staged (publish: OnRestart)--> AwaitingRestart
//!                                       --Finished | Failed (apply-pending's outcome)-->
//! ```
//!
//! Conditions follow metav1.Condition: a list-map keyed by `type`, `lastTransitionTime`
//! changes only when `status` does.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::crd::{
    Condition, JobStatus, Progress, SSTableResult, StreamStatus, WindowStatus, WindowStep, Worker,
};
use crate::reason::{Milestone, Reason, Why};

/// `status.phase`: Pending → Running → Complete, Failed, or Planned (a dry run).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    #[default]
    Pending,
    Running,
    /// A dry run finished: status says what would be done.
    Planned,
    Complete,
    Failed,
    /// `publish: OnRestart`: the children are staged and the intent durable; `cleave
    /// apply-pending` publishes them before Cassandra next starts, and the sidecar turns
    /// its outcome into Complete or Failed. No worker holds a lease meanwhile.
    AwaitingRestart,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Planned => "Planned",
            Phase::Complete => "Complete",
            Phase::Failed => "Failed",
            Phase::AwaitingRestart => "AwaitingRestart",
        }
    }

    pub fn is_finished(self) -> bool {
        matches!(self, Phase::Planned | Phase::Complete | Phase::Failed)
    }
}

/// The phase of a possibly absent status (no status = Pending).
pub fn phase(s: Option<&JobStatus>) -> Phase {
    s.and_then(|s| s.phase).unwrap_or_default()
}

/// What happened to a resource.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// The spec or a pre-flight refused the job: it fails without having written anything.
    Rejected { reason: Reason, message: &'a str },
    /// A limit holds the job back (another job on its table, the node's concurrency); it
    /// stays Pending with a `Waiting` condition saying why.
    Waiting { reason: Reason, message: &'a str },
    /// This worker takes the lease (a Running status means it resumes another's work).
    Claimed { identity: &'a str },
    /// The worker renews its lease.
    Heartbeat { identity: &'a str },
    /// The executor recorded more results (it owns `progress` and `results`).
    Progress {
        identity: &'a str,
        progress: &'a Progress,
        results: &'a [SSTableResult],
    },
    /// Every parent is done (`planned`: it was a dry run).
    Finished { planned: bool },
    /// Stopped between two sstables (shutdown); the lease is released for the next worker.
    Interrupted,
    /// Execution failed.
    Failed { reason: Reason, message: &'a str },
    /// `publish: OnRestart`: every parent's children are staged beside the running
    /// Cassandra and recorded in intents; `how` says how to restart it.
    Staged { how: &'a str },
    /// A RangeStream's spec is valid; it waits for the streaming engine.
    StreamAccepted,
    /// A RangeStream's sender recorded more bytes or verdicts (it owns `stream` and
    /// `progress`).
    StreamProgress {
        identity: &'a str,
        stream: &'a StreamStatus,
        progress: &'a Progress,
    },
    /// An attempt failed with a retryable reason (the receiver unreachable, killed, busy
    /// with 5xx); the sender waits and tries again: condition `Retrying` says why and when.
    Retrying {
        identity: &'a str,
        reason: Reason,
        message: &'a str,
    },
    /// A retried child went through: `Retrying` turns False.
    Recovered { identity: &'a str },
    /// A maintenance window reached a step (the window owns `window`): an Event when
    /// Cassandra is stopped and when it is ready again.
    Window {
        identity: &'a str,
        window: &'a WindowStatus,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// A Kubernetes Event to publish with a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub type_: EventType,
    pub reason: Why,
    pub message: String,
}

impl Note {
    fn new(type_: EventType, reason: impl Into<Why>, message: &str) -> Option<Note> {
        Some(Note {
            type_,
            reason: reason.into(),
            message: message.into(),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub status: JobStatus,
    /// `None`: nothing worth an Event (heartbeats, progress, an unchanged wait).
    pub note: Option<Note>,
}

/// The `type` of a status condition: the list every kind writes (metav1.Condition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionType {
    Running,
    Waiting,
    Failed,
    Retrying,
    Complete,
    Planned,
    Accepted,
    AwaitingRestart,
}

impl ConditionType {
    /// Every condition type, in the order the docs list them (tests/docs_agree.rs checks
    /// docs/operator.md, docs/crd-reference.md and the CRD's description against it).
    pub const ALL: [ConditionType; 8] = [
        ConditionType::Running,
        ConditionType::Waiting,
        ConditionType::Failed,
        ConditionType::Retrying,
        ConditionType::Complete,
        ConditionType::Planned,
        ConditionType::Accepted,
        ConditionType::AwaitingRestart,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Running => "Running",
            ConditionType::Waiting => "Waiting",
            ConditionType::Failed => "Failed",
            ConditionType::Retrying => "Retrying",
            ConditionType::Complete => "Complete",
            ConditionType::Planned => "Planned",
            ConditionType::Accepted => "Accepted",
            ConditionType::AwaitingRestart => "AwaitingRestart",
        }
    }

    /// Conditions that appear only once they were True: a job that never waited (a stream
    /// that never retried) gets no False `Waiting` (`Retrying`).
    fn absent_until_true(self) -> bool {
        matches!(
            self,
            ConditionType::Waiting | ConditionType::Retrying | ConditionType::AwaitingRestart
        )
    }
}

/// The condition writer of one transition: its generation and time, set once.
struct Conditions<'a> {
    list: &'a mut Vec<Condition>,
    generation: Option<i64>,
    now: &'a str,
}

impl Conditions<'_> {
    fn set(&mut self, ty: ConditionType, on: bool, why: impl Into<Why>, message: &str) {
        set_condition(
            self.list,
            ty,
            on,
            why.into(),
            message,
            self.generation,
            self.now,
        );
    }

    fn is_true(&self, ty: ConditionType) -> bool {
        self.list
            .iter()
            .any(|c| c.type_ == ty.as_str() && c.status == "True")
    }
}

/// RFC 3339 at whole seconds (what the apiserver stores for metav1.Time).
pub fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

fn worker(identity: &str, t: &str) -> Option<Worker> {
    Some(Worker {
        identity: identity.into(),
        heartbeat_time: t.into(),
    })
}

/// The status after `ev` at `now` (seconds since the epoch), for a resource at `generation`.
pub fn next(status: &JobStatus, ev: Event<'_>, generation: Option<i64>, now: i64) -> Transition {
    use ConditionType::*;
    let mut st = status.clone();
    let t = rfc3339(now);
    let mut conditions = std::mem::take(&mut st.conditions);
    let mut c = Conditions {
        list: &mut conditions,
        generation,
        now: &t,
    };
    let note = match ev {
        Event::Rejected { reason, message } | Event::Failed { reason, message } => {
            st.phase = Some(Phase::Failed);
            st.reason = Some(reason.as_str().into());
            st.message = Some(message.into());
            st.observed_generation = generation;
            st.completion_time = Some(t.clone());
            st.worker = None;
            for (ty, on) in [
                (Running, false),
                (Waiting, false),
                (Failed, true),
                (Retrying, false),
                (AwaitingRestart, false),
            ] {
                c.set(ty, on, reason, message);
            }
            Note::new(EventType::Warning, reason, message)
        }
        Event::Waiting { reason, message } => {
            let unchanged = st.phase == Some(Phase::Pending)
                && c.list.iter().any(|x| {
                    x.type_ == Waiting.as_str()
                        && x.status == "True"
                        && x.reason == reason.as_str()
                        && x.message == message
                });
            st.phase = Some(Phase::Pending);
            st.reason = Some(reason.as_str().into());
            st.message = Some(message.into());
            st.observed_generation = generation;
            c.set(Waiting, true, reason, message);
            if unchanged {
                None
            } else {
                Note::new(EventType::Normal, reason, message)
            }
        }
        Event::Claimed { identity } => {
            let (why, message) = if st.phase == Some(Phase::Running) {
                (
                    Milestone::Resumed,
                    format!("resumed by {identity} after the previous worker stopped"),
                )
            } else {
                (Milestone::Started, format!("started by {identity}"))
            };
            st.phase = Some(Phase::Running);
            st.reason = None;
            st.message = None;
            st.observed_generation = generation;
            st.start_time.get_or_insert_with(|| t.clone());
            st.worker = worker(identity, &t);
            c.set(Waiting, false, why, &message);
            c.set(Running, true, why, &message);
            Note::new(EventType::Normal, why, &message)
        }
        Event::Heartbeat { identity } => {
            st.worker = worker(identity, &t);
            None
        }
        Event::Window { identity, window } => {
            let before = st.window.as_ref().map(|w| w.step);
            st.window = Some(window.clone());
            st.worker = worker(identity, &t);
            match window.step {
                _ if before == Some(window.step) => None,
                WindowStep::Stopped => Note::new(
                    EventType::Normal,
                    Milestone::WindowOpened,
                    &format!(
                        "stopping Cassandra through the management API for the Replace; it must be ready again within {} s",
                        window.max_downtime_seconds
                    ),
                ),
                WindowStep::Ready => Note::new(
                    EventType::Normal,
                    Milestone::WindowClosed,
                    &format!(
                        "Cassandra is ready again {} s after the drain",
                        window.ready_at.unwrap_or(now)
                            - window.drained_at.or(window.stopped_at).unwrap_or(now)
                    ),
                ),
                _ => None,
            }
        }
        Event::Progress {
            identity,
            progress,
            results,
        } => {
            st.progress = progress.clone();
            st.results = results.to_vec();
            st.worker = worker(identity, &t);
            None
        }
        Event::Finished { planned } => {
            let (phase, cond, why) = if planned {
                (Phase::Planned, Planned, Milestone::DryRun)
            } else {
                (Phase::Complete, Complete, Milestone::Completed)
            };
            let p = &st.progress;
            let message = match &st.stream {
                Some(s) => format!(
                    "{} children of {} sstables, {} partitions: {} of {} bytes at the receiver, {} retries",
                    s.children_done, p.sstables_done, p.partitions, s.bytes_sent, s.bytes_total, s.retries
                ),
                None => format!(
                    "{} sstables, {} partitions: {} bytes shared, {} copied, {} re-encoded",
                    p.sstables_done, p.partitions, p.bytes_shared, p.bytes_copied, p.bytes_reencoded
                ),
            };
            st.phase = Some(phase);
            st.reason = Some(why.as_str().into());
            st.message = Some(message.clone());
            st.completion_time = Some(t.clone());
            st.worker = None;
            c.set(Running, false, why, &message);
            c.set(AwaitingRestart, false, why, &message);
            c.set(cond, true, why, &message);
            Note::new(EventType::Normal, why, &message)
        }
        Event::Staged { how } => {
            let why = Milestone::AwaitingRestart;
            let p = &st.progress;
            let message = format!(
                "children of {} sstables staged ({} partitions, {} bytes shared, {} copied, {} re-encoded); {how}",
                p.sstables_done, p.partitions, p.bytes_shared, p.bytes_copied, p.bytes_reencoded
            );
            st.phase = Some(Phase::AwaitingRestart);
            st.reason = Some(why.as_str().into());
            st.message = Some(message.clone());
            st.worker = None;
            c.set(Running, false, why, &message);
            c.set(AwaitingRestart, true, why, &message);
            Note::new(EventType::Normal, why, &message)
        }
        Event::Interrupted => {
            st.worker = None;
            let why = Milestone::Interrupted;
            c.set(
                Running,
                true,
                why,
                "the worker stopped between two sstables; the next one resumes",
            );
            Note::new(
                EventType::Normal,
                why,
                "stopped between two sstables for shutdown",
            )
        }
        Event::StreamAccepted => {
            st.phase = Some(Phase::Pending);
            st.reason = Some(Milestone::Accepted.as_str().into());
            st.message =
                Some("valid; waiting for the streaming engine of this sidecar version".into());
            st.observed_generation = generation;
            c.set(Accepted, true, Milestone::Valid, "spec validated");
            Note::new(EventType::Normal, Milestone::Accepted, "spec validated")
        }
        Event::StreamProgress {
            identity,
            stream,
            progress,
        } => {
            st.stream = Some(stream.clone());
            st.progress = progress.clone();
            st.worker = worker(identity, &t);
            None
        }
        Event::Retrying {
            identity,
            reason,
            message,
        } => {
            st.worker = worker(identity, &t);
            c.set(Retrying, true, reason, message);
            Note::new(
                EventType::Warning,
                Milestone::Retrying,
                &format!("{reason}: {message}"),
            )
        }
        Event::Recovered { identity } => {
            st.worker = worker(identity, &t);
            if c.is_true(Retrying) {
                let why = Milestone::Recovered;
                c.set(
                    Retrying,
                    false,
                    why,
                    "the receiver answered again; the transfer resumed from its durable offsets",
                );
                Note::new(EventType::Normal, why, "the receiver answered again")
            } else {
                None
            }
        }
    };
    st.conditions = conditions;
    Transition { status: st, note }
}

/// Sets a condition, keeping its transition time when the status does not change
/// (metav1.Condition semantics; conditions are a list-map keyed by type). An empty message
/// falls back to the reason: a 1.20 apiserver's server-side apply turns "" into null.
pub fn set_condition(
    conds: &mut Vec<Condition>,
    ty: ConditionType,
    status: bool,
    why: Why,
    message: &str,
    generation: Option<i64>,
    now: &str,
) {
    let s = if status { "True" } else { "False" };
    let reason = why.as_str();
    let message = if message.is_empty() { reason } else { message };
    match conds.iter_mut().find(|c| c.type_ == ty.as_str()) {
        Some(c) => {
            if c.status != s {
                c.last_transition_time = now.into();
            }
            c.status = s.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None if !status && ty.absent_until_true() => {}
        None => conds.push(Condition {
            type_: ty.as_str().into(),
            status: s.into(),
            observed_generation: generation,
            last_transition_time: now.into(),
            reason: reason.into(),
            message: message.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_800_000_000;

    fn cond<'a>(st: &'a JobStatus, t: &str) -> &'a Condition {
        st.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn a_job_is_claimed_runs_and_completes() {
        let t = next(
            &JobStatus::default(),
            Event::Claimed { identity: "n1/1/1" },
            Some(2),
            T0,
        );
        let st = t.status;
        assert_eq!(st.phase, Some(Phase::Running));
        assert_eq!(st.worker.as_ref().unwrap().identity, "n1/1/1");
        assert_eq!(st.start_time.as_deref(), Some(rfc3339(T0).as_str()));
        assert_eq!(st.observed_generation, Some(2));
        assert_eq!(t.note.unwrap().reason, Why::Milestone(Milestone::Started));
        assert!(st.conditions.iter().all(|c| c.type_ != "Waiting"));
        let progress = Progress {
            sstables_total: 2,
            sstables_done: 2,
            partitions: 10,
            ..Default::default()
        };
        let st = next(
            &st,
            Event::Progress {
                identity: "n1/1/1",
                progress: &progress,
                results: &[],
            },
            Some(2),
            T0 + 5,
        );
        assert!(st.note.is_none());
        let done = next(
            &st.status,
            Event::Finished { planned: false },
            Some(2),
            T0 + 9,
        );
        let s = &done.status;
        assert_eq!(s.phase, Some(Phase::Complete));
        assert!(s.worker.is_none(), "the lease is released");
        assert_eq!(s.completion_time.as_deref(), Some(rfc3339(T0 + 9).as_str()));
        assert_eq!(cond(s, "Running").status, "False");
        assert_eq!(cond(s, "Complete").status, "True");
        assert!(s
            .message
            .as_ref()
            .unwrap()
            .starts_with("2 sstables, 10 partitions"));
        // The start time is the first claim's, not the last one's.
        assert_eq!(s.start_time.as_deref(), Some(rfc3339(T0).as_str()));
    }

    #[test]
    fn a_claim_of_a_running_job_is_a_resume() {
        let st = JobStatus {
            phase: Some(Phase::Running),
            start_time: Some(rfc3339(T0 - 100)),
            ..Default::default()
        };
        let t = next(&st, Event::Claimed { identity: "b" }, None, T0);
        assert_eq!(t.note.unwrap().reason, Why::Milestone(Milestone::Resumed));
        assert_eq!(
            t.status.start_time.as_deref(),
            Some(rfc3339(T0 - 100).as_str())
        );
    }

    #[test]
    fn waiting_says_why_and_publishes_an_event_only_when_it_changes() {
        let w = Event::Waiting {
            reason: Reason::TableBusy,
            message: "ks.t is being anticompacted by default/j1",
        };
        let a = next(&JobStatus::default(), w, Some(1), T0);
        assert_eq!(a.status.phase, Some(Phase::Pending));
        assert_eq!(cond(&a.status, "Waiting").reason, "TableBusy");
        assert!(a.note.is_some());
        let b = next(&a.status, w, Some(1), T0 + 5);
        assert!(b.note.is_none(), "same wait: no new Event");
        assert_eq!(
            cond(&b.status, "Waiting").last_transition_time,
            rfc3339(T0),
            "transition time kept"
        );
        let c = next(
            &b.status,
            Event::Claimed { identity: "me" },
            Some(1),
            T0 + 10,
        );
        assert_eq!(cond(&c.status, "Waiting").status, "False");
        assert_eq!(
            cond(&c.status, "Waiting").last_transition_time,
            rfc3339(T0 + 10)
        );
    }

    #[test]
    fn rejection_and_failure_end_the_job_with_the_reason() {
        for ev in [
            Event::Rejected {
                reason: Reason::InsufficientSpace,
                message: "needs 3 GiB",
            },
            Event::Failed {
                reason: Reason::CorruptSSTable,
                message: "bad chunk",
            },
        ] {
            let running = next(
                &JobStatus::default(),
                Event::Claimed { identity: "me" },
                None,
                T0,
            )
            .status;
            let t = next(&running, ev, Some(3), T0 + 1);
            let s = &t.status;
            assert_eq!(s.phase, Some(Phase::Failed));
            assert!(s.worker.is_none());
            assert_eq!(cond(s, "Failed").status, "True");
            assert_eq!(cond(s, "Running").status, "False");
            assert_eq!(Some(cond(s, "Failed").reason.clone()), s.reason);
            assert_eq!(t.note.unwrap().type_, EventType::Warning);
        }
    }

    #[test]
    fn an_interrupt_keeps_results_and_releases_the_lease() {
        let mut st = next(
            &JobStatus::default(),
            Event::Claimed { identity: "me" },
            None,
            T0,
        )
        .status;
        st.progress.sstables_done = 1;
        let t = next(&st, Event::Interrupted, None, T0 + 1);
        assert_eq!(t.status.phase, Some(Phase::Running));
        assert!(t.status.worker.is_none());
        assert_eq!(t.status.progress.sstables_done, 1);
        assert_eq!(cond(&t.status, "Running").reason, "Interrupted");
    }

    #[test]
    fn a_heartbeat_moves_only_the_lease() {
        let st = next(
            &JobStatus::default(),
            Event::Claimed { identity: "me" },
            None,
            T0,
        )
        .status;
        let t = next(&st, Event::Heartbeat { identity: "me" }, None, T0 + 10);
        let mut expect = st.clone();
        expect.worker.as_mut().unwrap().heartbeat_time = rfc3339(T0 + 10);
        assert_eq!(t.status, expect);
        assert!(t.note.is_none());
    }

    #[test]
    fn a_stream_retry_is_a_condition_that_recovery_or_failure_turns_false() {
        let running = next(
            &JobStatus::default(),
            Event::Claimed { identity: "me" },
            None,
            T0,
        )
        .status;
        assert!(running.conditions.iter().all(|c| c.type_ != "Retrying"));
        let quiet = next(&running, Event::Recovered { identity: "me" }, None, T0);
        assert!(quiet.note.is_none(), "nothing to recover from");
        assert!(quiet
            .status
            .conditions
            .iter()
            .all(|c| c.type_ != "Retrying"));
        let r = next(
            &running,
            Event::Retrying {
                identity: "me",
                reason: Reason::Unreachable,
                message: "attempt 1 of 6 failed",
            },
            None,
            T0 + 1,
        );
        assert_eq!(cond(&r.status, "Retrying").status, "True");
        assert_eq!(cond(&r.status, "Retrying").reason, "Unreachable");
        assert_eq!(r.status.phase, Some(Phase::Running));
        let n = r.note.unwrap();
        assert_eq!(
            (n.type_, n.reason.as_str()),
            (EventType::Warning, "Retrying")
        );
        let ok = next(&r.status, Event::Recovered { identity: "me" }, None, T0 + 2);
        assert_eq!(cond(&ok.status, "Retrying").status, "False");
        assert_eq!(
            ok.note.unwrap().reason,
            Why::Milestone(Milestone::Recovered)
        );
        let failed = next(
            &r.status,
            Event::Failed {
                reason: Reason::Unreachable,
                message: "after 6 attempts",
            },
            None,
            T0 + 3,
        );
        assert_eq!(cond(&failed.status, "Retrying").status, "False");
        assert_eq!(failed.status.phase, Some(Phase::Failed));
    }

    #[test]
    fn a_finished_stream_says_what_reached_the_receiver() {
        let st = JobStatus {
            stream: Some(StreamStatus {
                bytes_total: 10,
                bytes_sent: 10,
                children_done: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = next(&st, Event::Finished { planned: false }, None, T0);
        assert!(
            t.status
                .message
                .as_deref()
                .unwrap()
                .starts_with("2 children of 0 sstables"),
            "{:?}",
            t.status.message
        );
    }

    #[test]
    fn conditions_keep_transition_time_when_unchanged() {
        let mut c = Vec::new();
        let started = Why::Milestone(Milestone::Started);
        set_condition(
            &mut c,
            ConditionType::Running,
            true,
            started,
            "",
            Some(1),
            "t1",
        );
        set_condition(
            &mut c,
            ConditionType::Running,
            true,
            started,
            "1/2",
            Some(1),
            "t2",
        );
        assert_eq!(c[0].last_transition_time, "t1");
        assert_eq!(c.len(), 1);
        let done = Why::Milestone(Milestone::Completed);
        set_condition(
            &mut c,
            ConditionType::Complete,
            true,
            done,
            "",
            Some(1),
            "t3",
        );
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[1].message, "Completed",
            "empty message falls back to the reason"
        );
    }
}
