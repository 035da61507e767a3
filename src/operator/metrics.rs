//! Prometheus metrics and the routes `/metrics`, `/healthz`, `/readyz` (served by `crate::http`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

pub struct Metrics {
    pub registry: Registry,
    /// Jobs by kind and phase, as last seen by this sidecar.
    pub jobs: IntGaugeVec,
    pub reconcile_duration: HistogramVec,
    /// Reconcile failures by kind and error label (`OperatorError::label`).
    pub reconcile_errors: IntCounterVec,
    /// Bytes by what happened to them: shared, copied, reencoded, read, written.
    pub bytes: IntCounterVec,
    pub partitions: IntCounterVec,
    pub progress: GaugeVec,
    /// Children that did not get the requested layout, by reason label.
    pub fallbacks: IntCounterVec,
    pub sstables: IntCounterVec,
    pub ready: AtomicBool,
}

impl Metrics {
    pub fn new() -> Result<Arc<Metrics>, prometheus::Error> {
        let registry = Registry::new();
        let jobs = IntGaugeVec::new(
            Opts::new("cleave_jobs", "Jobs by kind and phase"),
            &["kind", "phase"],
        )?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new("cleave_reconcile_duration_seconds", "Time per reconcile")
                .buckets(vec![0.01, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0]),
            &["kind"],
        )?;
        let reconcile_errors = IntCounterVec::new(
            Opts::new(
                "cleave_reconcile_errors_total",
                "Reconcile errors by reason",
            ),
            &["kind", "reason"],
        )?;
        let bytes = IntCounterVec::new(
            Opts::new(
                "cleave_bytes_total",
                "Bytes shared, copied, re-encoded, read and written",
            ),
            &["kind", "what"],
        )?;
        let partitions = IntCounterVec::new(
            Opts::new("cleave_partitions_total", "Partitions placed in children"),
            &["kind"],
        )?;
        let progress = GaugeVec::new(
            Opts::new("cleave_job_progress_ratio", "Done / total sstables per job"),
            &["kind", "namespace", "name"],
        )?;
        let fallbacks = IntCounterVec::new(
            Opts::new(
                "cleave_layout_fallbacks_total",
                "Children that fell back from the requested layout",
            ),
            &["reason"],
        )?;
        let sstables = IntCounterVec::new(
            Opts::new("cleave_sstables_total", "Parent sstables processed"),
            &["kind", "result"],
        )?;
        registry.register(Box::new(jobs.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(bytes.clone()))?;
        registry.register(Box::new(partitions.clone()))?;
        registry.register(Box::new(progress.clone()))?;
        registry.register(Box::new(fallbacks.clone()))?;
        registry.register(Box::new(sstables.clone()))?;
        Ok(Arc::new(Metrics {
            registry,
            jobs,
            reconcile_duration,
            reconcile_errors,
            bytes,
            partitions,
            progress,
            fallbacks,
            sstables,
            ready: AtomicBool::new(false),
        }))
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// `/metrics`, `/healthz` (the process is up) and `/readyz` (see [`Metrics::ready`]) for
/// [`crate::http::Server`].
pub fn router(metrics: Arc<Metrics>) -> crate::http::Router {
    use crate::http::{full, text, Request};
    use hyper::StatusCode;
    let m = metrics.clone();
    crate::http::Router::new()
        .get("/metrics", move |_r: Request| {
            let m = m.clone();
            async move { full(StatusCode::OK, "text/plain; version=0.0.4", m.render()) }
        })
        .get("/healthz", |_r: Request| async {
            text(StatusCode::OK, "ok\n")
        })
        .get("/readyz", move |_r: Request| {
            let ready = metrics.ready.load(Ordering::Relaxed);
            async move {
                if ready {
                    text(StatusCode::OK, "ok\n")
                } else {
                    text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                }
            }
        })
}
