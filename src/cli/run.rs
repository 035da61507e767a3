//! `cleave run`: the sidecar. `--node NAME` against the Kubernetes API, or `--local DIR`
//! over a directory of manifests; metrics and health on `--metrics-addr`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cleave::operator::controller::{self, KubeStore};
use cleave::operator::core::Ctx;
use cleave::operator::job::NodeLimits;
use cleave::operator::local::{self, LocalStore};
use cleave::operator::metrics::{self, Metrics};
use cleave::operator::stream::StreamClient;

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
    #[arg(long, env = "NODE_NAME", required_unless_present = "cluster")]
    pub node: Option<String>,
    /// The cluster-scoped side instead of a node's sidecar: DatacenterCleanups fanned out
    /// into per-node CleanupJobs and rack restarts (docs/operator.md "After a scale-up").
    /// One leader among the replicas (Lease `--leader-lease` in `--namespace`).
    #[arg(long, conflicts_with_all = ["local", "stream_addr", "management_api"])]
    pub cluster: bool,
    /// With --cluster: the Lease the replicas elect their leader with.
    #[arg(long, default_value = "cleave-cluster-leader", requires = "cluster")]
    pub leader_lease: String,
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
    /// The Cassandra release of this node (`4.1.7`, `5.0.5`, ...), for resources without
    /// `spec.targetCassandra`. When not given, the --management-api's
    /// `/api/v0/metadata/versions/release` at start, if it answers within 10 s, else the
    /// `release_version` of --data-dir's own system.local sstables (the log and
    /// `cleave_cassandra_release_info` say which source decided). Unknown is the newest line, the strictest:
    /// from 5.0.5 compaction reads Data.db from position 0, so children never start with
    /// a dead prefix. The receiver refuses such a child for a 5.0.5+ or unknown node.
    #[arg(long, default_value = "unknown", value_parser = clap::value_parser!(cleave::sstable::cassandra::TargetCassandra))]
    pub cassandra_version: cleave::sstable::cassandra::TargetCassandra,
    /// Survey --data-dir for sstables with a dead prefix (misread by Cassandra 5.0.5+)
    /// every this many seconds, into `cleave_survey_*` (0: never). One Index.db entry is
    /// read per sstable.
    #[arg(long = "survey-interval-seconds", default_value_t = 600)]
    pub survey_interval_seconds: u64,
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
    /// As a RangeStream's source: the CA receivers' certificates are checked against
    /// (default: --stream-tls-client-ca, the cluster's one stream CA). The client
    /// certificate is --stream-tls-cert/--stream-tls-key, the token --stream-token-file.
    #[arg(long = "stream-client-ca")]
    pub stream_client_ca: Option<PathBuf>,
    /// Consecutive failed attempts of a RangeStream retried before it fails.
    #[arg(long = "stream-retries", default_value_t = 5)]
    pub stream_retries: u32,
    /// The first retry's wait (doubled each time, at most 60 s).
    #[arg(long = "stream-backoff-ms", default_value_t = 1000)]
    pub stream_backoff_ms: u64,
    /// Receiver port of a `spec.destination.service` that names none.
    #[arg(long = "stream-service-port", default_value_t = 7070)]
    pub stream_service_port: u16,
    /// This node's management API (`http://localhost:8080` in a cass-operator pod, or
    /// `https://…` with the mutual TLS of `managementApiAuth.manual`): needed by jobs with
    /// `maintenance: ManagementApi`.
    #[arg(long = "management-api", env = "CLEAVE_MANAGEMENT_API")]
    pub management_api: Option<String>,
    /// CA that signed the management API's server certificate (https only).
    #[arg(long = "management-api-ca", requires = "management_api")]
    pub management_api_ca: Option<PathBuf>,
    /// Client certificate for the management API's mutual TLS (with --management-api-key).
    #[arg(long = "management-api-cert", requires_all = ["management_api_ca", "management_api_key"])]
    pub management_api_cert: Option<PathBuf>,
    #[arg(long = "management-api-key", requires = "management_api_cert")]
    pub management_api_key: Option<PathBuf>,
    /// Seconds this node's Cassandra needs from `/lifecycle/start` to ready: reserved in
    /// every window's `maxDowntimeSeconds`.
    #[arg(long = "management-api-start-seconds", default_value_t = 120)]
    pub management_api_start_seconds: u64,
    /// Bound of `/lifecycle/stop` (the agent's own worst case is 35 s: 7 SIGTERMs 5 s apart,
    /// then SIGKILL): reserved in every window's `maxDowntimeSeconds`.
    #[arg(long = "management-api-stop-seconds", default_value_t = 40)]
    pub management_api_stop_seconds: u64,
}

/// `--management-api` and its TLS, as the windows' node API.
fn node_api(a: &RunArgs) -> Result<Option<cleave::operator::window::NodeApi>> {
    let Some(url) = &a.management_api else {
        return Ok(None);
    };
    let tls = match &a.management_api_ca {
        Some(ca) => {
            let client = match (&a.management_api_cert, &a.management_api_key) {
                (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
                _ => None,
            };
            Some(cleave::stream::tls::client_config(ca, client)?)
        }
        None => None,
    };
    let endpoint = cleave::mgmt::Endpoint::parse(url, tls)?;
    Ok(Some(cleave::operator::window::NodeApi {
        client: cleave::mgmt::Client::new(endpoint),
        timing: cleave::operator::window::Timing {
            start_allowance: Duration::from_secs(a.management_api_start_seconds),
            stop_timeout: Duration::from_secs(a.management_api_stop_seconds),
            ..Default::default()
        },
    }))
}

/// The sender side of the stream flags (docs/operator.md "Streaming").
fn stream_client(a: &RunArgs) -> Result<StreamClient> {
    let f = &a.stream;
    let token = f
        .token_file
        .as_deref()
        .map(super::stream::read_token)
        .transpose()?;
    let tls = match a.stream_client_ca.as_ref().or(f.tls_client_ca.as_ref()) {
        Some(ca) => {
            let client = match (&f.tls_cert, &f.tls_key) {
                (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
                _ => None,
            };
            Some(cleave::stream::tls::client_config(ca, client)?)
        }
        None => None,
    };
    Ok(StreamClient {
        token,
        tls,
        insecure_plaintext: f.insecure_plaintext,
        retries: a.stream_retries,
        backoff: Duration::from_millis(a.stream_backoff_ms),
        service_port: a.stream_service_port,
    })
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

/// The dead-prefix survey of the data directory, at start and every `every`, into the
/// metrics; a survey that cannot read the directory is logged and retried next time.
async fn survey_loop(data_dir: PathBuf, every: Duration, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let dir = data_dir.clone();
        match tokio::task::spawn_blocking(move || cleave::split::survey::survey(&dir)).await {
            Ok(Ok(s)) => {
                if s.dead_prefix > 0 {
                    tracing::warn!(
                        dead_prefix = s.dead_prefix,
                        sstables = s.sstables,
                        "sstables with a dead prefix in the data directory: Cassandra 5.0.5+ misreads them (cleave inspect <data dir>; docs/runbook.md)"
                    );
                }
                metrics.set_survey(&s);
            }
            Ok(Err(e)) => {
                tracing::warn!(reason = %e.reason(), error = %e, "dead-prefix survey")
            }
            Err(e) => tracing::warn!(error = %e, "dead-prefix survey task"),
        }
    }
}

pub fn run(a: RunArgs) -> Result<ExitCode> {
    if a.cluster {
        return run_cluster(a);
    }
    let node = a.node.clone().unwrap_or_default();
    // A `--local` directory that is not there is a typo, not a directory that will appear:
    // refused before anything starts (the local reconciler would poll it forever).
    if let Some(dir) = &a.local {
        let why = match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => None,
            Ok(_) => Some("not a directory".to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = why {
            return Ok(super::failure::Failed::invalid(
                dir,
                format!(
                    "--local {}: {why}: expected the directory of AnticompactionJob, RangeStream and CleanupJob manifests",
                    dir.display()
                ),
            )
            .print(false));
        }
    }
    serving(
        a,
        |a,
         Serving {
             metrics,
             stop,
             http,
         }| async move {
            let window = node_api(&a)?;
            let release = cleave::operator::release::resolve(
                a.cassandra_version,
                window.as_ref().map(|w| &w.client),
                &a.data_dir,
            )
            .await;
            tracing::info!(
                release = %release.release,
                source = release.source.as_str(),
                note = release.note.as_deref().unwrap_or(""),
                "the node's Cassandra release: the default target of its jobs and the receiver's strictness"
            );
            metrics
                .cassandra_release
                .with_label_values(&[&release.release.to_string(), release.source.as_str()])
                .set(1);
            if let Some(addr) = &a.stream_addr {
                super::stream::spawn_receiver(
                    addr,
                    &a.stream,
                    super::stream::ReceiverNode {
                        data_dir: Some(a.data_dir.clone()),
                        node: Some(node.clone()),
                        min_free_percent: f64::from(a.min_free_percent),
                        cassandra: release.release,
                    },
                    metrics.stream.clone(),
                    stop.wait(),
                )
                .await?;
            }
            if a.survey_interval_seconds > 0 {
                tokio::spawn(survey_loop(
                    a.data_dir.clone(),
                    Duration::from_secs(a.survey_interval_seconds),
                    metrics.clone(),
                ));
            }
            let client_side = stream_client(&a)?;
            let limits = NodeLimits {
                max_concurrent_jobs: a.max_concurrent_jobs as usize,
                min_free_percent: a.min_free_percent,
                cassandra: release.release,
            };
            match &a.local {
                Some(dir) => {
                    let mut ctx = Ctx::new(
                        LocalStore { dir: dir.clone() },
                        &node,
                        a.data_dir.clone(),
                        metrics,
                    );
                    ctx.limits = limits;
                    ctx.stream = client_side;
                    ctx.window = window;
                    let ctx = Arc::new(ctx);
                    let (s, stopped) = (ctx.shutdown.clone(), stop.wait());
                    tokio::spawn(async move {
                        stopped.await;
                        s.store(true, std::sync::atomic::Ordering::Relaxed);
                    });
                    local::run(ctx, Duration::from_secs(2), a.once).await?;
                }
                None => {
                    let client = kube_client(&a).await?;
                    let mut ctx = Ctx::new(
                        KubeStore::new(client.clone(), &node),
                        &node,
                        a.data_dir.clone(),
                        metrics,
                    );
                    ctx.limits = limits;
                    ctx.stream = client_side;
                    ctx.window = window;
                    controller::run(
                        client,
                        a.namespace.clone(),
                        Arc::new(ctx),
                        a.concurrency.max(1),
                        stop.wait(),
                    )
                    .await?;
                }
            }
            // Local --once ends without a signal: stop the server too.
            http.abort();
            let _ = http.await;
            Ok(ExitCode::SUCCESS)
        },
    )
}

/// What `run` and `run --cluster` share before their controllers start.
struct Serving {
    metrics: Arc<Metrics>,
    /// One stop signal (SIGTERM or SIGINT) for the HTTP server and the controllers.
    stop: Stop,
    /// The server of /metrics /healthz /readyz on `--metrics-addr`.
    http: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    /// Resolves once SIGTERM or SIGINT has come; any number of waiters.
    fn wait(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    }
}

/// Runs `body` on a multi-thread runtime once the metrics, the stop signal and the HTTP
/// server stand. When `body` ends, executions have ended (controller::run waits for them);
/// what is left are tasks talking to an apiserver that may not answer (Event publishing,
/// watches, a lease renewal). They must not hold the pod for the kube client's own timeouts.
fn serving<F, Fut>(a: RunArgs, body: F) -> Result<ExitCode>
where
    F: FnOnce(RunArgs, Serving) -> Fut,
    Fut: std::future::Future<Output = Result<ExitCode>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async move {
        let metrics = Metrics::new()?;
        let listener = tokio::net::TcpListener::bind(&a.metrics_addr)
            .await
            .with_context(|| format!("binding --metrics-addr {}", a.metrics_addr))?;
        tracing::info!(addr = %listener.local_addr()?, "serving /metrics /healthz /readyz");
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            termination().await;
            let _ = stop_tx.send(true);
        });
        let stop = Stop(stop_rx);
        let server = cleave::http::Server::new(listener, metrics::router(metrics.clone()));
        let http = tokio::spawn(server.serve(stop.wait()));
        body(
            a,
            Serving {
                metrics,
                stop,
                http,
            },
        )
        .await
    });
    rt.shutdown_timeout(Duration::from_secs(2));
    result
}

async fn kube_client(a: &RunArgs) -> Result<kube::Client> {
    Ok(match &a.kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)?;
            let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
            kube::Client::try_from(cfg)?
        }
        None => kube::Client::try_default().await?,
    })
}

/// `cleave run --cluster`: metrics and health, then the leader election, then the
/// DatacenterCleanup controller for as long as the lease is held. A replica that loses the
/// lease exits 1 (its pod restarts and stands again): a controller that stopped acting
/// mid-step must not act again from stale memory.
fn run_cluster(a: RunArgs) -> Result<ExitCode> {
    use cleave::operator::datacenter::{controller as dc, leader};
    serving(
        a,
        |a,
         Serving {
             metrics,
             stop,
             http,
         }| async move {
            let client = kube_client(&a).await?;
            let namespace = a.namespace.clone().unwrap_or_else(|| "default".into());
            let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
                format!(
                    "{}-{}",
                    std::fs::read_to_string("/proc/sys/kernel/hostname")
                        .unwrap_or_default()
                        .trim(),
                    std::process::id()
                )
            });
            let election =
                leader::Election::new(client.clone(), &namespace, &a.leader_lease, &identity);
            tracing::info!(lease = %a.leader_lease, namespace = %namespace, identity = %identity, "cluster: standing for leader");
            tokio::select! {
                r = election.acquire() => r?,
                _ = stop.wait() => {
                    http.abort();
                    return Ok(ExitCode::SUCCESS);
                }
            }
            tracing::info!(identity = %identity, "cluster: leading; DatacenterCleanups are reconciled here");
            let (lost_tx, mut lost_rx) = tokio::sync::watch::channel(false);
            let controller = dc::run(client, a.namespace.clone(), metrics.clone(), identity, {
                let s = stop.wait();
                async move {
                    tokio::select! {
                        _ = s => {}
                        _ = lost_rx.wait_for(|v| *v) => {}
                    }
                }
            });
            let lost = tokio::select! {
                _ = controller => false,
                _ = election.hold() => true,
            };
            let _ = lost_tx.send(true);
            metrics
                .ready
                .store(false, std::sync::atomic::Ordering::Relaxed);
            http.abort();
            if lost {
                tracing::error!(
                    "cluster: leadership lost; exiting so that this replica stands again"
                );
                return Ok(ExitCode::FAILURE);
            }
            election.release().await;
            Ok(ExitCode::SUCCESS)
        },
    )
}
