//! One reconcile of any kind: route → decide → apply → record, and the deletion cleanup.
//! A reconcile never runs an execution to the end: it claims the lease and spawns the run,
//! so the reconcile histogram measures reconciles and `cleave_job_duration_seconds`
//! measures executions.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use tracing::{info, instrument, warn};

use super::ctx::{now, Ctx};
use super::error::OperatorError;
use super::kind::{key_of, Kind};
use super::lease;
use super::observe;
use super::store::Store;
use crate::operator::decide::{self, Next};
use crate::operator::status::{self, Event, EventType, Note};
use crate::reason::Milestone;

/// Reconciles one resource of any kind.
#[instrument(skip_all, fields(kind = K::KIND, namespace = obj.meta().namespace.as_deref().unwrap_or_default(), name = obj.meta().name.as_deref().unwrap_or_default()))]
pub async fn reconcile<K: Kind, S: Store>(
    obj: Arc<K>,
    ctx: Arc<Ctx<S>>,
) -> Result<Action, OperatorError> {
    let timer = ctx
        .metrics
        .reconcile_duration
        .with_label_values(&[K::KIND])
        .start_timer();
    let key = key_of(&*obj);
    let next = if ctx.runs.is_running(&key) {
        // Our own run's status writes come back as watch events: nothing to decide. The
        // last one (AwaitingRestart) may arrive before the run is forgotten: it is looked
        // at again within the outcome poll, not in a minute.
        let staged = status::phase(obj.status()) == status::Phase::AwaitingRestart;
        Next::Wait(if staged {
            super::restart::POLL
        } else {
            Duration::from_secs(60)
        })
    } else {
        decide::next(&*obj, &ctx.node, &ctx.identity, now())
    };
    if next != Next::Ignore {
        observe::phase(&ctx, K::KIND, &key, Some(status::phase(obj.status())));
    }
    let result = apply(&obj, &ctx, &key, next).await;
    timer.observe_duration();
    if let Err(e) = &result {
        ctx.metrics
            .reconcile_errors
            .with_label_values(&[K::KIND, e.label()])
            .inc();
    }
    result
}

async fn apply<K: Kind, S: Store>(
    obj: &Arc<K>,
    ctx: &Arc<Ctx<S>>,
    key: &str,
    next: Next,
) -> Result<Action, OperatorError> {
    match next {
        Next::Ignore => Ok(Action::await_change()),
        Next::Wait(d) => Ok(Action::requeue(d)),
        Next::Finished(ttl) => {
            // A window left open by a failed run: no Cassandra stays down for good.
            if !obj.clone().close_window(ctx.clone()).await {
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
            Ok(ttl.map_or_else(Action::await_change, Action::requeue))
        }
        Next::Delete => {
            info!("ttlSecondsAfterFinished passed: deleting the {}", K::NOUN);
            ctx.store.delete(&**obj).await?;
            observe::forget(ctx, &**obj);
            Ok(Action::await_change())
        }
        Next::Fail(f) => {
            let t = status::next(
                &obj.status().cloned().unwrap_or_default(),
                Event::Rejected {
                    reason: f.reason,
                    message: &f.message,
                },
                obj.meta().generation,
                now(),
            );
            warn!(reason = %f.reason, detail = %f.message, "{} rejected", K::NOUN);
            ctx.store.patch_status(&**obj, &t.status, None).await?;
            observe::record(ctx, &**obj, key, &t.status, t.note.as_ref()).await;
            Ok(Action::await_change())
        }
        Next::Run => lease::start(obj, ctx, key).await,
        Next::AwaitRestart => super::restart::check(obj, ctx, key).await,
    }
}

/// Deletion of any kind: stop its execution if it runs here (within `K::STOP_BUDGET`), let
/// the kind remove its leftovers, say so in a `Cleanup` Event, forget its metrics.
#[instrument(skip_all, fields(kind = K::KIND, namespace = obj.meta().namespace.as_deref().unwrap_or_default(), name = obj.meta().name.as_deref().unwrap_or_default()))]
pub async fn cleanup<K: Kind, S: Store>(
    obj: Arc<K>,
    ctx: Arc<Ctx<S>>,
) -> Result<Action, OperatorError> {
    let key = key_of(&*obj);
    let stopped = ctx.runs.cancel(&key);
    if stopped {
        info!(
            "{} deleted while running: stopping it after the current sstable",
            K::NOUN
        );
        if !ctx.runs.wait_stopped(&key, K::STOP_BUDGET).await {
            return Err(OperatorError::Task(format!(
                "the running {} did not stop within {} s",
                K::KIND,
                K::STOP_BUDGET.as_secs()
            )));
        }
    }
    let message = obj.clone().cleanup(ctx.clone(), stopped).await;
    info!(detail = %message, "cleanup");
    let note = Note {
        type_: EventType::Normal,
        reason: Milestone::Cleanup.into(),
        message,
    };
    ctx.store.event(&*obj, &note).await;
    observe::forget(&ctx, &*obj);
    Ok(Action::await_change())
}
