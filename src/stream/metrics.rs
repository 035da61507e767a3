//! `cleave_stream_*` metrics, the same on both sides (label `side` = send | receive).

use std::sync::Arc;

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

pub struct StreamMetrics {
    /// Bytes by side and what: `sent`, `received`, `verified` (received and checked).
    pub bytes: IntCounterVec,
    /// Finished transfers by side and result (`ok` or a Reason name).
    pub transfers: IntCounterVec,
    /// Transfers a receiver holds a slot for.
    pub active: IntGauge,
    pub chunks_checked: IntCounterVec,
    /// Files resumed from a non-zero offset.
    pub resumes: IntCounterVec,
}

impl StreamMetrics {
    pub fn new(registry: &Registry) -> Result<Arc<StreamMetrics>, prometheus::Error> {
        let bytes = IntCounterVec::new(
            Opts::new("cleave_stream_bytes_total", "Stream bytes by side and what"),
            &["side", "what"],
        )?;
        let transfers = IntCounterVec::new(
            Opts::new(
                "cleave_stream_transfers_total",
                "Finished child transfers by side and result",
            ),
            &["side", "result"],
        )?;
        let active = IntGauge::new(
            "cleave_stream_active_transfers",
            "Transfers holding a receiver slot",
        )?;
        let chunks_checked = IntCounterVec::new(
            Opts::new(
                "cleave_stream_chunks_checked_total",
                "Chunks (or CRC.db blocks) whose CRC was checked on receipt",
            ),
            &["side"],
        )?;
        let resumes = IntCounterVec::new(
            Opts::new(
                "cleave_stream_resumes_total",
                "Files resumed from a durable offset",
            ),
            &["side"],
        )?;
        registry.register(Box::new(bytes.clone()))?;
        registry.register(Box::new(transfers.clone()))?;
        registry.register(Box::new(active.clone()))?;
        registry.register(Box::new(chunks_checked.clone()))?;
        registry.register(Box::new(resumes.clone()))?;
        Ok(Arc::new(StreamMetrics {
            bytes,
            transfers,
            active,
            chunks_checked,
            resumes,
        }))
    }

    /// Metrics nobody scrapes (CLI sender, tests).
    pub fn unregistered() -> Arc<StreamMetrics> {
        StreamMetrics::new(&Registry::new()).unwrap_or_else(|_| {
            // Registering into a fresh registry only fails on a duplicate name, which
            // `new` cannot produce.
            unreachable!("fresh registry")
        })
    }
}
