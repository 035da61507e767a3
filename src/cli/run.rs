//! `cleave run`: the sidecar. `--node NAME` against the Kubernetes API, or `--local DIR`
//! over a directory of manifests; metrics and health on `--metrics-addr`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use cleave::operator::controller::{self, KubeStore};
use cleave::operator::local::{self, LocalStore};
use cleave::operator::metrics::{self, Metrics};
use cleave::operator::reconcile::Ctx;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The node this sidecar serves: only resources naming it are acted on.
    #[arg(long, env = "CLEAVE_NODE")]
    pub node: String,
    /// Kubeconfig (default: in-cluster, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Watch one namespace (default: all).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Serve /metrics, /healthz, /readyz here.
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub metrics_addr: String,
    /// Cassandra data directory when a job does not name one.
    #[arg(long, default_value = "/var/lib/cassandra/data")]
    pub data_dir: PathBuf,
    /// Jobs reconciled at once.
    #[arg(long, default_value_t = 2)]
    pub concurrency: u16,
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

pub fn identity(node: &str) -> String {
    format!(
        "{node}/{}/{}",
        std::process::id(),
        k8s_openapi::jiff::Timestamp::now().as_second()
    )
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
        eprintln!(
            "cleave: serving /metrics /healthz /readyz on {}",
            listener.local_addr()?
        );
        let (stop_http, http_stopped) = tokio::sync::watch::channel(false);
        let server = cleave::http::Server::new(listener, metrics::router(metrics.clone()));
        let http = tokio::spawn(server.serve(async move {
            let mut rx = http_stopped;
            let _ = rx.wait_for(|v| *v).await;
        }));
        if let Some(addr) = &a.stream_addr {
            let mut rx = stop_http.subscribe();
            let stop = async move {
                let _ = rx.wait_for(|v| *v).await;
            };
            let registry = metrics.registry.clone();
            super::stream::spawn_receiver(
                addr,
                &a.stream,
                Some(a.data_dir.clone()),
                10.0,
                &registry,
                stop,
            )
            .await?;
        }
        let shutdown = Arc::new(AtomicBool::new(false));
        match &a.local {
            Some(dir) => {
                let ctx = Arc::new(Ctx {
                    store: LocalStore { dir: dir.clone() },
                    node: a.node.clone(),
                    identity: identity(&a.node),
                    data_dir: a.data_dir.clone(),
                    metrics,
                    shutdown: shutdown.clone(),
                    phases: Default::default(),
                });
                let s = shutdown.clone();
                tokio::spawn(async move {
                    let _ = tokio::signal::ctrl_c().await;
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
                let recorder = kube::runtime::events::Recorder::new(
                    client.clone(),
                    controller::reporter(&a.node),
                );
                let ctx = Arc::new(Ctx {
                    store: KubeStore {
                        client: client.clone(),
                        recorder,
                        field_manager: format!("cleave-{}", a.node),
                        failures: Mutex::new(Default::default()),
                    },
                    node: a.node.clone(),
                    identity: identity(&a.node),
                    data_dir: a.data_dir.clone(),
                    metrics,
                    shutdown,
                    phases: Default::default(),
                });
                controller::run(client, a.namespace.clone(), ctx, a.concurrency.max(1)).await?;
            }
        }
        let _ = stop_http.send(true);
        let _ = http.await;
        Ok(ExitCode::SUCCESS)
    })
}
