//! Prometheus metrics and the routes `/metrics`, `/healthz`, `/readyz` (served by `crate::http`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
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
    /// CleanupJob: sstables by verdict (`kept`, `dropped`, `split`).
    pub cleanup_sstables: IntCounterVec,
    /// CleanupJob: apparent bytes removed (`Replace`), as `CleanupReport::bytes_reclaimed`.
    pub cleanup_reclaimed: prometheus::IntCounter,
    /// Wall time of a job's execution on this sidecar, by how it ended (apart from the
    /// reconcile histogram, which never includes a job's run).
    pub job_duration: HistogramVec,
    /// Jobs that ended Failed, by `reason` (the condition reason, `Reason::as_str()` for
    /// execution failures).
    pub failures: IntCounterVec,
    /// Bytes/s limit of the jobs running now (0: unlimited), per job.
    pub throttle: GaugeVec,
    /// Jobs held back by a limit, by reason (TableBusy, ConcurrencyLimit).
    pub waiting: IntGaugeVec,
    /// Kubernetes API calls that failed and are retried, by kind and operation: `status`
    /// (a job's status write: progress, heartbeat, the final one), `watch` (a watch or list
    /// that broke; the watcher re-lists with backoff).
    pub kube_errors: IntCounterVec,
    /// `/readyz`: both controllers' first list succeeded (local mode: at start).
    pub ready: AtomicBool,
    /// `cleave_ready`: `ready` as a series (1/0), read from it on every scrape, so that an
    /// alert sees a sidecar whose watches never came up (RBAC, a missing CRD) although it
    /// has no readiness probe (docs/install.md).
    ready_gauge: IntGauge,
    /// The transport's `cleave_stream_*` counters (side = send | receive), shared by this
    /// sidecar's sender and its receiver.
    pub stream: Arc<crate::stream::metrics::StreamMetrics>,
    /// Per RangeStream on its source node (namespace, name): bytes at the receiver, bytes
    /// planned, average throughput, retried attempts. Removed when the stream is deleted.
    pub stream_sent: IntGaugeVec,
    pub stream_total: IntGaugeVec,
    pub stream_throughput: IntGaugeVec,
    pub stream_retries: IntCounterVec,
    /// The dead-prefix survey of `--data-dir` (`split::survey`), per keyspace and table:
    /// live sstables, and those Cassandra 5.0.5+ misreads. Refreshed every
    /// `--survey-interval-seconds`.
    pub survey_sstables: IntGaugeVec,
    pub survey_dead_prefix: IntGaugeVec,
    /// 1 for the node's Cassandra release and the source that decided it
    /// (`operator::release`): `flag`, `management-api`, `system-local` or `none` (release
    /// `unknown`).
    pub cassandra_release: IntGaugeVec,
    /// `cleave run --cluster`: the nodes of each DatacenterCleanup by state (Pending,
    /// Running, Staged, Published, Failed), as its last reconcile counted them.
    pub datacenter_nodes: IntGaugeVec,
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
        let cleanup_sstables = IntCounterVec::new(
            Opts::new(
                "cleave_cleanup_sstables_total",
                "SSTables a CleanupJob kept, dropped or split",
            ),
            &["verdict"],
        )?;
        let cleanup_reclaimed = prometheus::IntCounter::new(
            "cleave_cleanup_bytes_reclaimed_total",
            "Bytes of sstables a CleanupJob removed, minus those of their children",
        )?;
        let job_duration = HistogramVec::new(
            HistogramOpts::new(
                "cleave_job_duration_seconds",
                "Execution time of a job on this sidecar, by result",
            )
            .buckets(vec![
                1.0,
                10.0,
                60.0,
                300.0,
                900.0,
                3600.0,
                4.0 * 3600.0,
                24.0 * 3600.0,
            ]),
            &["kind", "result"],
        )?;
        let failures = IntCounterVec::new(
            Opts::new("cleave_job_failures_total", "Jobs that failed, by reason"),
            &["kind", "reason"],
        )?;
        let throttle = GaugeVec::new(
            Opts::new(
                "cleave_job_throttle_bytes_per_second",
                "maxBytesPerSecond of a running job (0 = unlimited)",
            ),
            &["kind", "namespace", "name"],
        )?;
        let waiting = IntGaugeVec::new(
            Opts::new(
                "cleave_jobs_waiting",
                "Jobs held back by a limit, by reason",
            ),
            &["kind", "reason"],
        )?;
        let per_stream = |name: &str, help: &str| {
            IntGaugeVec::new(Opts::new(name, help), &["namespace", "name"])
        };
        let stream_sent = per_stream(
            "cleave_stream_sent_bytes",
            "Bytes of a RangeStream the receiver holds (sent, or published before)",
        )?;
        let stream_total = per_stream(
            "cleave_stream_planned_bytes",
            "Bytes of every planned child of a RangeStream",
        )?;
        let stream_throughput = per_stream(
            "cleave_stream_throughput_bytes_per_second",
            "Average send rate of a RangeStream on this sidecar",
        )?;
        let stream_retries = IntCounterVec::new(
            Opts::new(
                "cleave_stream_retries_total",
                "Failed attempts of a RangeStream that were retried",
            ),
            &["namespace", "name"],
        )?;
        let per_table = |name: &str, help: &str| {
            IntGaugeVec::new(Opts::new(name, help), &["keyspace", "table"])
        };
        let survey_sstables = per_table(
            "cleave_survey_sstables",
            "Live sstables of a table in the data directory, as last surveyed",
        )?;
        let survey_dead_prefix = per_table(
            "cleave_survey_dead_prefix_sstables",
            "Live sstables of a table whose first partition is past Data.db position 0 (misread by Cassandra 5.0.5+)",
        )?;
        let cassandra_release = IntGaugeVec::new(
            Opts::new(
                "cleave_cassandra_release_info",
                "The node's Cassandra release as this sidecar resolved it at start, and its source",
            ),
            &["release", "source"],
        )?;
        registry.register(Box::new(cassandra_release.clone()))?;
        let datacenter_nodes = IntGaugeVec::new(
            Opts::new(
                "cleave_datacenter_cleanup_nodes",
                "Nodes of a DatacenterCleanup by state (cleave run --cluster)",
            ),
            &["namespace", "name", "state"],
        )?;
        registry.register(Box::new(datacenter_nodes.clone()))?;
        registry.register(Box::new(survey_sstables.clone()))?;
        registry.register(Box::new(survey_dead_prefix.clone()))?;
        registry.register(Box::new(stream_sent.clone()))?;
        registry.register(Box::new(stream_total.clone()))?;
        registry.register(Box::new(stream_throughput.clone()))?;
        registry.register(Box::new(stream_retries.clone()))?;
        let stream = crate::stream::metrics::StreamMetrics::new(&registry)?;
        let kube_errors = IntCounterVec::new(
            Opts::new(
                "cleave_kube_errors_total",
                "Kubernetes API calls that failed and are retried, by operation",
            ),
            &["kind", "operation"],
        )?;
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        registry.register(Box::new(kube_errors.clone()))?;
        let ready_gauge = IntGauge::new(
            "cleave_ready",
            "1 once the watches of both CRDs have listed (what /readyz answers), else 0",
        )?;
        registry.register(Box::new(ready_gauge.clone()))?;
        registry.register(Box::new(job_duration.clone()))?;
        registry.register(Box::new(failures.clone()))?;
        registry.register(Box::new(throttle.clone()))?;
        registry.register(Box::new(waiting.clone()))?;
        registry.register(Box::new(jobs.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(bytes.clone()))?;
        registry.register(Box::new(partitions.clone()))?;
        registry.register(Box::new(progress.clone()))?;
        registry.register(Box::new(fallbacks.clone()))?;
        registry.register(Box::new(cleanup_sstables.clone()))?;
        registry.register(Box::new(cleanup_reclaimed.clone()))?;
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
            cleanup_sstables,
            cleanup_reclaimed,
            sstables,
            job_duration,
            failures,
            throttle,
            waiting,
            kube_errors,
            ready: AtomicBool::new(false),
            ready_gauge,
            stream,
            stream_sent,
            stream_total,
            stream_throughput,
            stream_retries,
            survey_sstables,
            survey_dead_prefix,
            datacenter_nodes,
            cassandra_release,
        }))
    }

    /// Publishes a survey: every surveyed table's two series, and tables no longer there
    /// removed (a dropped table's gauges would otherwise stay at their last value).
    pub fn set_survey(&self, s: &crate::split::survey::Survey) {
        self.survey_sstables.reset();
        self.survey_dead_prefix.reset();
        for t in &s.tables {
            let l = [t.keyspace.as_str(), t.table.as_str()];
            self.survey_sstables
                .with_label_values(&l)
                .set(t.sstables as i64);
            self.survey_dead_prefix
                .with_label_values(&l)
                .set(t.dead_prefix as i64);
        }
    }

    /// Removes a deleted resource's per-object series (progress, throttle).
    pub fn forget(&self, kind: &str, namespace: &str, name: &str) {
        let _ = self.progress.remove_label_values(&[kind, namespace, name]);
        let _ = self.throttle.remove_label_values(&[kind, namespace, name]);
        if kind == <super::crd::RangeStream as super::core::Kind>::KIND {
            let _ = self.stream_sent.remove_label_values(&[namespace, name]);
            let _ = self.stream_total.remove_label_values(&[namespace, name]);
            let _ = self
                .stream_throughput
                .remove_label_values(&[namespace, name]);
            let _ = self.stream_retries.remove_label_values(&[namespace, name]);
        }
    }

    pub fn render(&self) -> String {
        self.ready_gauge
            .set(i64::from(self.ready.load(Ordering::Relaxed)));
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
