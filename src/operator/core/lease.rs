//! Ownership of an execution: a lease in `status.worker`, taken with the resource's
//! `metadata.resourceVersion` as a precondition, so when two sidecars see the same stale
//! lease the apiserver answers 409 to the second and exactly one runs it. Every later write
//! of the run carries the resourceVersion of the previous one; a 409 there is resolved by
//! re-reading the resource: still ours → retry, someone else's → the run stops (lease lost).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::ResourceExt;
use tracing::{info, warn};

use super::ctx::{now, Ctx};
use super::error::OperatorError;
use super::kind::{Ended, Kind, Run};
use super::observe;
use super::store::Store;
use crate::operator::crd::JobStatus;
use crate::operator::decide::TableClaim;
use crate::operator::status::{self, Event};

/// On shutdown the final status write gives up after this many attempts, each bounded by
/// [`FINAL_WRITE_ATTEMPT`], with 0.5 + 1 + 2 s between them: at most 15.5 s after the
/// current sstable ends. The pod is going away; the lease then expires and the next sidecar
/// resumes. docs/operator.md, "Shutdown".
pub const FINAL_ATTEMPTS_ON_SHUTDOWN: u32 = 3;
/// One status write on shutdown: a connect plus one round trip to a live apiserver.
pub const FINAL_WRITE_ATTEMPT: Duration = Duration::from_secs(4);

/// The outcome of [`claim`].
pub enum Claim {
    /// This worker holds the lease: the claimed status, its resourceVersion, the run's
    /// cancel flag (registered in `ctx.runs`; the caller spawns the run).
    Taken {
        status: Box<JobStatus>,
        rv: Option<String>,
        cancel: Arc<AtomicBool>,
    },
    /// Not now: a limit holds it back (status says why) or another worker won the race.
    Later(Action),
}

/// Takes the lease of a job or stream, or says why it waits: the node's limits first
/// (`Runs::try_start`, one lock), then the status write conditional on the object's
/// resourceVersion, so of two sidecars with the same view exactly one gets past the 409.
pub async fn claim<S: Store, K: Kind>(
    obj: &K,
    ctx: &Ctx<S>,
    key: &str,
    tables: TableClaim,
) -> Result<Claim, OperatorError> {
    let generation = obj.meta().generation;
    let current = obj.status().cloned().unwrap_or_default();
    let kind = K::KIND;
    let cancel = match ctx
        .runs
        .try_start(key, tables, ctx.limits.max_concurrent_jobs)
    {
        Ok(c) => c,
        Err(blocked) => {
            let message = blocked.message();
            let ev = Event::Waiting {
                reason: blocked.reason(),
                message: &message,
            };
            let t = status::next(&current, ev, generation, now());
            observe::waiting(ctx, kind, key, Some(blocked.reason()));
            if t.note.is_some() {
                info!(reason = %blocked.reason(), detail = %message, "{kind} waits");
                ctx.store.patch_status(obj, &t.status, None).await?;
                observe::record(ctx, obj, key, &t.status, t.note.as_ref()).await;
            }
            return Ok(Claim::Later(Action::requeue(Duration::from_secs(3))));
        }
    };
    observe::waiting(ctx, kind, key, None);
    let ev = Event::Claimed {
        identity: &ctx.identity,
    };
    let t = status::next(&current, ev, generation, now());
    let expect = obj.meta().resource_version.clone();
    let rv = match ctx
        .store
        .patch_status(obj, &t.status, expect.as_deref())
        .await
    {
        Ok(rv) => rv,
        Err(e) => {
            ctx.runs.finish(key);
            if e.is_conflict() {
                info!("lease not taken: the {kind} changed since this view of it (409; another worker may have claimed it)");
                return Ok(Claim::Later(Action::requeue(Duration::from_secs(2))));
            }
            return Err(e);
        }
    };
    info!(identity = %ctx.identity, "lease taken");
    observe::record(ctx, obj, key, &t.status, t.note.as_ref()).await;
    Ok(Claim::Taken {
        status: Box::new(t.status),
        rv,
        cancel,
    })
}

/// Status writes of one run, each conditional on the previous one's resourceVersion.
pub struct Lease<'a, S: Store, K: Kind> {
    pub ctx: &'a Ctx<S>,
    pub job: &'a K,
    pub rv: Option<String>,
    pub lost: bool,
}

impl<S: Store, K: Kind> Lease<'_, S, K> {
    /// One status write. True when it landed, or when the lease is lost (nothing left to
    /// write); false after a transient failure (apiserver or etcd down, network), counted
    /// in `cleave_kube_errors_total{operation="status"}`.
    pub async fn write(&mut self, st: &JobStatus) -> bool {
        if self.lost {
            return true;
        }
        for _ in 0..3 {
            match self
                .ctx
                .store
                .patch_status(self.job, st, self.rv.as_deref())
                .await
            {
                Ok(rv) => {
                    self.rv = rv;
                    return true;
                }
                // Also the answer to a write that landed but whose response was lost (the
                // apiserver died after committing it): our own write moved the version.
                Err(e) if e.is_conflict() => match self.ctx.store.get(self.job).await {
                    Ok(Some(fresh))
                        if fresh
                            .status()
                            .and_then(|s| s.worker.as_ref())
                            .is_some_and(|w| w.identity == self.ctx.identity) =>
                    {
                        // Someone else changed the object (a condition of another field
                        // manager, a label) but the lease is still ours.
                        self.rv = fresh.meta().resource_version.clone();
                    }
                    Ok(_) => {
                        warn!("lease lost: another worker holds the job; stopping after the current sstable");
                        self.lost = true;
                        return true;
                    }
                    Err(e) => {
                        self.failed();
                        warn!(error = %e, "re-reading the job after a conflict failed");
                        return false;
                    }
                },
                Err(e) => {
                    // Transient (apiserver restart, network): each status is a whole
                    // snapshot, so the next write carries what this one had.
                    self.failed();
                    warn!(error = %e, "status write failed; retrying with the next update");
                    return false;
                }
            }
        }
        false
    }

    fn failed(&self) {
        self.ctx
            .metrics
            .kube_errors
            .with_label_values(&[K::KIND, "status"])
            .inc();
    }

    /// The run's last write (its end), retried with backoff until it lands: there is no
    /// next update to carry it. Lost, it would leave the job Running under this lease, and
    /// the next reconcile (this sidecar's or, after the lease, another's) would run it
    /// again and split the parents whose results it lost a second time — in Stage mode
    /// their rows would be staged twice. The job stays in `Runs` meanwhile, so this
    /// sidecar does not start it again. On shutdown it gives up after a few attempts (the
    /// pod is going away; the lease then expires and the next sidecar resumes).
    pub async fn write_final(&mut self, st: &JobStatus) {
        let mut delay = Duration::from_millis(500);
        let mut attempts = 0u32;
        loop {
            let landed = if self.ctx.shutdown_requested() {
                // An apiserver that does not answer must not hold the pod for the kube
                // client's own timeouts (minutes): each attempt gets a bounded slice.
                tokio::time::timeout(FINAL_WRITE_ATTEMPT, self.write(st))
                    .await
                    .unwrap_or(false)
            } else {
                self.write(st).await
            };
            if landed {
                return;
            }
            attempts += 1;
            if self.ctx.shutdown_requested() && attempts >= FINAL_ATTEMPTS_ON_SHUTDOWN {
                warn!(attempts, "shutting down: the {}'s final status was not written; the next sidecar resumes it after the lease", K::NOUN);
                return;
            }
            warn!(attempts, retry_in = ?delay, "the {}'s final status is not written yet; retrying", K::NOUN);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    }
}

impl Run {
    /// The status writer of this run.
    pub fn lease<'a, S: Store, K: Kind>(&mut self, ctx: &'a Ctx<S>, obj: &'a K) -> Lease<'a, S, K> {
        Lease {
            ctx,
            job: obj,
            rv: self.rv.take(),
            lost: false,
        }
    }
}

/// The end of every execution: the duration metric, then (unless the lease was lost or the
/// resource is being deleted) the final status, retried until it lands, and its Event.
pub async fn finish<S: Store, K: Kind>(
    lease: &mut Lease<'_, S, K>,
    key: &str,
    started: Instant,
    last: &JobStatus,
    ended: Ended,
) {
    let ctx = lease.ctx;
    let obj = lease.job;
    ctx.metrics
        .job_duration
        .with_label_values(&[K::KIND, ended.label()])
        .observe(started.elapsed().as_secs_f64());
    if lease.lost {
        return;
    }
    if ended == Ended::Interrupted && !ctx.shutdown_requested() {
        // Deleted while running: the finalizer waits for this, then the resource is gone.
        return;
    }
    let ev = match &ended {
        Ended::Complete => Event::Finished { planned: false },
        Ended::Planned => Event::Finished { planned: true },
        Ended::Interrupted => Event::Interrupted,
        Ended::Failed(f) => Event::Failed {
            reason: f.reason,
            message: &f.message,
        },
        Ended::Staged(how) => Event::Staged { how },
    };
    match &ended {
        Ended::Failed(f) => warn!(reason = %f.reason, detail = %f.message, "{} failed", K::NOUN),
        e => info!(outcome = e.label(), elapsed = ?started.elapsed(), "{} ended", K::NOUN),
    }
    let t = status::next(last, ev, obj.meta().generation, now());
    lease.write_final(&t.status).await;
    observe::record(ctx, obj, key, &t.status, t.note.as_ref()).await;
}

/// Takes the lease and spawns the kind's work on a task of its own.
pub async fn start<S: Store, K: Kind>(
    obj: &Arc<K>,
    ctx: &Arc<Ctx<S>>,
    key: &str,
) -> Result<Action, OperatorError> {
    let tables = obj.tables(&ctx.data_dir);
    let (claimed, rv, cancel) = match claim(&**obj, ctx, key, tables).await? {
        Claim::Taken { status, rv, cancel } => (*status, rv, cancel),
        Claim::Later(a) => return Ok(a),
    };
    let span = tracing::Span::current();
    let (obj, ctx2, key2) = (obj.clone(), ctx.clone(), key.to_string());
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    ctx.metrics
        .throttle
        .with_label_values(&[K::KIND, &ns, &name])
        .set(obj.rate_limit().unwrap_or(0) as f64);
    let run = Run {
        key: key.to_string(),
        claimed,
        rv,
        cancel,
    };
    tokio::spawn(tracing::Instrument::instrument(
        async move {
            obj.work(ctx2.clone(), run).await;
            ctx2.metrics
                .throttle
                .remove_label_values(&[K::KIND, &ns, &name])
                .ok();
            ctx2.runs.finish(&key2);
        },
        span,
    ));
    Ok(Action::await_change())
}
