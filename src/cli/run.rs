//! `cleave run`: the sidecar. `--node NAME` against the Kubernetes API, or `--local DIR`
//! over a directory of manifests; metrics and health on `--metrics-addr`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cleave::operator::controller::{self, KubeStore};
use cleave::operator::job::NodeLimits;
use cleave::operator::local::{self, LocalStore};
use cleave::operator::metrics::{self, Metrics};
use cleave::operator::reconcile::Ctx;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line (for log collectors).
    Json,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// The node this sidecar serves: only resources naming it are acted on.
    #[arg(long, env = "NODE_NAME")]
    pub node: String,
    /// Kubeconfig (default: in-cluster, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Watch one namespace (default: all).
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Serve /metrics, /healthz, /readyz here.
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub metrics_addr: String,
    /// Cassandra data directory when a job does not name one.
    #[arg(long, default_value = "/var/lib/cassandra/data")]
    pub data_dir: PathBuf,
    /// Reconciles at once (a reconcile is short: it never runs a job to the end).
    #[arg(long, default_value_t = 2)]
    pub concurrency: u16,
    /// Jobs running at once on this node; more wait with condition Waiting/ConcurrencyLimit.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_jobs: u32,
    /// A job fails with InsufficientSpace before writing when its children would leave less
    /// than this share of the filesystem free.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub min_free_percent: u8,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter (tracing-subscriber EnvFilter syntax); default: $RUST_LOG, else "info".
    #[arg(long)]
    pub log_filter: Option<String>,
    /// Use the manifests in this directory instead of the Kubernetes API.
    #[arg(long, conflicts_with_all = ["kubeconfig", "namespace"])]
    pub local: Option<PathBuf>,
    /// With --local: exit once every job of this node has finished.
    #[arg(long, requires = "local")]
    pub once: bool,
    /// Serve the RangeStream receiver on this address (docs/stream.md); off by default.
    #[arg(long)]
    pub stream_addr: Option<String>,
    #[command(flatten)]
    pub stream: super::stream::ReceiverFlags,
}

/// The process's tracing subscriber: `filter` (EnvFilter syntax), else `$RUST_LOG`, else
/// `default`; text or JSON lines on stderr. kube-runtime's own watcher and reconciler
/// diagnostics come through it too.
pub fn init_tracing(format: LogFormat, filter: Option<&str>, default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = match filter {
        Some(f) => EnvFilter::try_new(f).ok(),
        None => EnvFilter::try_from_default_env().ok(),
    }
    .unwrap_or_else(|| EnvFilter::new(default));
    use std::io::IsTerminal;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => b.try_init(),
        LogFormat::Json => b.json().flatten_event(true).try_init(),
    };
}

/// Resolves on SIGTERM or SIGINT.
async fn termination() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => futures::future::pending::<()>().await,
            }
        } => {}
    }
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let metrics = Metrics::new()?;
        let listener = tokio::net::TcpListener::bind(&a.metrics_addr)
            .await
            .with_context(|| format!("binding --metrics-addr {}", a.metrics_addr))?;
        tracing::info!(addr = %listener.local_addr()?, "serving /metrics /healthz /readyz");
        // One stop signal for the HTTP server and the controllers.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            termination().await;
            let _ = stop_tx.send(true);
        });
        let stop = move || {
            let mut rx = stop_rx.clone();
            async move {
                let _ = rx.wait_for(|v| *v).await;
            }
        };
        let server = cleave::http::Server::new(listener, metrics::router(metrics.clone()));
        let http = tokio::spawn(server.serve(stop()));
        if let Some(addr) = &a.stream_addr {
            let registry = metrics.registry.clone();
            super::stream::spawn_receiver(
                addr,
                &a.stream,
                Some(a.data_dir.clone()),
                f64::from(a.min_free_percent),
                &registry,
                stop(),
            )
            .await?;
        }
        let limits = NodeLimits {
            max_concurrent_jobs: a.max_concurrent_jobs as usize,
            min_free_percent: a.min_free_percent,
        };
        match &a.local {
            Some(dir) => {
                let mut ctx = Ctx::new(
                    LocalStore { dir: dir.clone() },
                    &a.node,
                    a.data_dir.clone(),
                    metrics,
                );
                ctx.limits = limits;
                let ctx = Arc::new(ctx);
                let (s, stopped) = (ctx.shutdown.clone(), stop());
                tokio::spawn(async move {
                    stopped.await;
                    s.store(true, std::sync::atomic::Ordering::Relaxed);
                });
                local::run(ctx, Duration::from_secs(2), a.once).await?;
            }
            None => {
                let client = match &a.kubeconfig {
                    Some(p) => {
                        let kc = kube::config::Kubeconfig::read_from(p)?;
                        let cfg =
                            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
                        kube::Client::try_from(cfg)?
                    }
                    None => kube::Client::try_default().await?,
                };
                let mut ctx = Ctx::new(
                    KubeStore::new(client.clone(), &a.node),
                    &a.node,
                    a.data_dir.clone(),
                    metrics,
                );
                ctx.limits = limits;
                controller::run(
                    client,
                    a.namespace.clone(),
                    Arc::new(ctx),
                    a.concurrency.max(1),
                    stop(),
                )
                .await?;
            }
        }
        // Local --once ends without a signal: stop the server too.
        http.abort();
        let _ = http.await;
        Ok(ExitCode::SUCCESS)
    })
}
