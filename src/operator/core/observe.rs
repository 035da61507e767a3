//! The metrics lifecycle of a resource: its phase (`cleave_jobs`), its wait
//! (`cleave_jobs_waiting`), its failures, its per-resource series, and the Event of a
//! transition. Every kind goes through these, so no gauge is set for one kind only.

use kube::ResourceExt;

use super::ctx::Ctx;
use super::kind::{key_of, Kind};
use super::store::Store;
use crate::operator::crd::JobStatus;
use crate::operator::status::{Note, Phase};
use crate::reason::Reason;

/// Records a resource's phase and recomputes the `cleave_jobs{kind,phase}` gauge.
pub fn phase<S: Store>(ctx: &Ctx<S>, kind: &'static str, key: &str, phase: Option<Phase>) {
    let Ok(mut m) = ctx.phases.lock() else { return };
    match phase {
        Some(p) => {
            m.insert(key.to_string(), (kind, p));
        }
        None => {
            m.remove(key);
        }
    }
    ctx.metrics.jobs.reset();
    for (k, p) in m.values() {
        ctx.metrics.jobs.with_label_values(&[*k, p.as_str()]).inc();
    }
}

/// Records why a resource waits (`None`: it no longer does).
pub fn waiting<S: Store>(ctx: &Ctx<S>, kind: &'static str, key: &str, reason: Option<Reason>) {
    let Ok(mut m) = ctx.waiting.lock() else {
        return;
    };
    match reason {
        Some(r) => m.insert(key.to_string(), (kind, r)),
        None => m.remove(key),
    };
    ctx.metrics.waiting.reset();
    for (k, r) in m.values() {
        ctx.metrics
            .waiting
            .with_label_values(&[*k, r.as_str()])
            .inc();
    }
}

/// Writes what a transition produced to the metrics and publishes its Event.
pub async fn record<S: Store, K: Kind>(
    ctx: &Ctx<S>,
    obj: &K,
    key: &str,
    st: &JobStatus,
    note: Option<&Note>,
) {
    phase(ctx, K::KIND, key, st.phase);
    if st.phase == Some(Phase::Failed) {
        let reason = st.reason.as_deref().unwrap_or("Unknown");
        ctx.metrics
            .failures
            .with_label_values(&[K::KIND, reason])
            .inc();
    }
    if let Some(n) = note {
        ctx.store.event(obj, n).await;
    }
}

/// Forgets a deleted resource: its phase, wait and per-resource series.
pub fn forget<S: Store, K: Kind>(ctx: &Ctx<S>, obj: &K) {
    let key = key_of(obj);
    phase(ctx, K::KIND, &key, None);
    waiting(ctx, K::KIND, &key, None);
    ctx.metrics.forget(
        K::KIND,
        &obj.namespace().unwrap_or_default(),
        &obj.name_any(),
    );
}
