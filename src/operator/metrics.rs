//! Prometheus metrics and the HTTP endpoints `/metrics`, `/healthz`, `/readyz`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// Serves `/metrics`, `/healthz` (the process is up) and `/readyz` (the controllers have
/// started) until the listener fails.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            continue;
        };
        let m = metrics.clone();
        tokio::spawn(async move {
            // Read the request head (a client may send it in several writes).
            let mut buf = Vec::with_capacity(1024);
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
                match tokio::time::timeout(std::time::Duration::from_secs(5), sock.read(&mut chunk))
                    .await
                {
                    Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                    Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let req = String::from_utf8_lossy(&buf);
            let path = req.split_whitespace().nth(1).unwrap_or("/");
            let (code, body, ctype) = match path {
                "/metrics" => ("200 OK", m.render(), "text/plain; version=0.0.4"),
                "/healthz" => ("200 OK", "ok\n".to_string(), "text/plain"),
                "/readyz" if m.ready.load(Ordering::Relaxed) => {
                    ("200 OK", "ok\n".to_string(), "text/plain")
                }
                "/readyz" => (
                    "503 Service Unavailable",
                    "starting\n".to_string(),
                    "text/plain",
                ),
                _ => ("404 Not Found", "not found\n".to_string(), "text/plain"),
            };
            let resp = format!("HTTP/1.1 {code}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        });
    }
}
