//! `cleave stream serve` (the receiver, standalone) and `cleave stream send` (ship
//! sstables to a receiver); protocol and flags in docs/stream.md.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use cleave::stream::manifest::Import;
use cleave::stream::metrics::StreamMetrics;
use cleave::stream::receive::{Receiver, ReceiverConfig};
use cleave::stream::send::{self, ChildName, Endpoint, SendOptions};
use cleave::stream::{listen, tls, StreamError};

#[derive(clap::Args)]
pub struct StreamArgs {
    #[command(subcommand)]
    pub command: StreamCommand,
}

#[derive(clap::Subcommand)]
pub enum StreamCommand {
    /// Receive child sstables: verify every chunk, stage, check, publish.
    Serve(ServeArgs),
    /// Send sstables to a receiver (each one whole, or its range children with --ranges).
    Send(SendArgs),
}

/// The receiver's flags, shared by `cleave stream serve` and `cleave run` (CONTRACT.md).
#[derive(clap::Args, Clone)]
pub struct ReceiverFlags {
    /// Receiver staging root; must be on the data directory's filesystem for Staging/Import.
    #[arg(long = "stream-staging")]
    pub staging: Option<PathBuf>,
    /// File holding the bearer token senders must present.
    #[arg(long = "stream-token-file")]
    pub token_file: Option<PathBuf>,
    #[arg(long = "stream-tls-cert", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long = "stream-tls-key", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (mutual TLS).
    #[arg(long = "stream-tls-client-ca", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Serve the stream port without TLS (authentication by token is still required).
    #[arg(long)]
    pub insecure_plaintext: bool,
    #[arg(long = "stream-max-transfers", default_value_t = 2)]
    pub max_transfers: usize,
    /// Run after every check for `import: Import`, e.g. "nodetool import --keep-repaired {keyspace} {table} {dir}".
    #[arg(long = "stream-import-command")]
    pub import_command: Option<String>,
    /// Only these tables: `ks.table,ks2.*`.
    #[arg(long = "stream-allow-tables", value_delimiter = ',')]
    pub allow_tables: Vec<String>,
    /// Seconds a 429 asks senders to wait.
    #[arg(long = "stream-retry-after", default_value_t = 5)]
    pub retry_after: u64,
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Listen address.
    #[arg(long = "stream-addr", default_value = "0.0.0.0:7070")]
    pub addr: String,
    #[command(flatten)]
    pub flags: ReceiverFlags,
    /// Cassandra data directory (`<data>/<keyspace>/<table>-<id>/`), for import Staging/Import.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Refuse (507) a transfer that would leave less free space than this.
    #[arg(long, default_value_t = 10.0)]
    pub min_free_percent: f64,
    /// The Cassandra release that will read what this receiver publishes. From 5.0.5 (and
    /// when unknown, the default) a child whose first partition is not at Data.db
    /// position 0 is refused (422 CheckFailed): that Cassandra's compaction misreads it.
    #[arg(long, default_value = "unknown", value_parser = clap::value_parser!(cleave::sstable::cassandra::TargetCassandra))]
    pub cassandra_version: cleave::sstable::cassandra::TargetCassandra,
    /// This receiver's node name: transfers whose manifest names another destination node
    /// are refused (421 WrongDestination) before a byte is written.
    #[arg(long)]
    pub node: Option<String>,
}

#[derive(clap::Args)]
pub struct SendArgs {
    /// Data.db of each sstable to send.
    #[arg(required = true)]
    pub sstables: Vec<PathBuf>,
    /// Receiver `host:port`.
    #[arg(long)]
    pub to: String,
    /// File holding the bearer token.
    #[arg(long, alias = "stream-token-file")]
    pub token_file: Option<PathBuf>,
    /// Trust this CA for the receiver's certificate (TLS).
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate and key for mutual TLS.
    #[arg(long, requires = "tls_key", requires = "tls_ca")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The receiving node's name: a receiver started with `--node` refuses the transfer
    /// (421 WrongDestination) when it is another node's.
    #[arg(long)]
    pub destination_node: Option<String>,
    /// Name to verify in the receiver's certificate (default: the host of --to).
    #[arg(long)]
    pub tls_server_name: Option<String>,
    #[arg(long, conflicts_with = "tls_ca")]
    pub insecure_plaintext: bool,
    /// Default: from the path `<data>/<keyspace>/<table>-<id>/`.
    #[arg(long)]
    pub keyspace: Option<String>,
    #[arg(long)]
    pub table: Option<String>,
    /// Transfer id prefix; each sstable's id is `<prefix>.<keyspace>.<table>.<version>-<generation>`.
    #[arg(long, default_value = "cli")]
    pub transfer_prefix: String,
    #[arg(long, default_value = "cli")]
    pub group: String,
    #[arg(long, value_enum, default_value = "none")]
    pub import: ImportArg,
    #[arg(long)]
    pub max_bytes_per_second: Option<u64>,
    /// The Cassandra release of the receiving node (`4.1`, `5.0.5`, ...). From 5.0.5, and
    /// when unknown (the default), range children never start with a dead prefix.
    #[arg(long, default_value = "unknown", value_parser = clap::value_parser!(cleave::sstable::cassandra::TargetCassandra))]
    pub target_cassandra: cleave::sstable::cassandra::TargetCassandra,
    /// Retries of a failed connection (exponential backoff from --backoff-ms).
    #[arg(long, default_value_t = 5)]
    pub retries: u32,
    #[arg(long, default_value_t = 1000)]
    pub backoff_ms: u64,
    #[arg(long)]
    pub json: bool,
    /// Send only the partitions in these token ranges `(l, r]`, as range children of each
    /// sstable: `l:r,l2:r2` (decimal for Murmur3/Random, hex for ByteOrdered).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true)]
    pub ranges: Vec<String>,
}

/// `--import`: the CLI's spelling of the manifest's `Import`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ImportArg {
    None,
    Staging,
    Import,
}

impl From<ImportArg> for Import {
    fn from(a: ImportArg) -> Import {
        match a {
            ImportArg::None => Import::None,
            ImportArg::Staging => Import::Staging,
            ImportArg::Import => Import::Import,
        }
    }
}

pub fn read_token(p: &Path) -> Result<String> {
    let t = std::fs::read_to_string(p).with_context(|| format!("--token-file {}", p.display()))?;
    let t = t.trim().to_string();
    anyhow::ensure!(!t.is_empty(), "--token-file {} is empty", p.display());
    Ok(t)
}

fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
}

pub fn run(a: StreamArgs) -> Result<ExitCode> {
    init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match a.command {
        StreamCommand::Serve(s) => rt.block_on(serve(s)),
        StreamCommand::Send(s) => rt.block_on(send_all(s)),
    }
}

/// `--stream-staging` when not given: `cleave-stream-staging/` beside the data directory
/// (`/var/lib/cassandra/cleave-stream-staging` for `/var/lib/cassandra/data`), on the same
/// volume so publication is a rename, and not inside it, where Cassandra would take the
/// directory for a keyspace.
pub fn default_staging(data_dir: &Path) -> PathBuf {
    match data_dir.parent() {
        Some(p) if p != Path::new("") => p.join("cleave-stream-staging"),
        _ => data_dir.join("..").join("cleave-stream-staging"),
    }
}

/// Refuses a `--stream-staging` root inside `--data-dir` (Cassandra takes every directory
/// there for a keyspace or a table, and would read what is staged: the rows of a transfer
/// live before its check, and twice once published), or one that is, or looks like, a
/// table directory (`publish::table_dir_evidence`; issue 31, item 5). Before the listener
/// binds, so nothing was received.
fn check_staging(staging: &Path, data_dir: Option<&Path>) -> Result<()> {
    let refuse = |what: String| -> Result<()> {
        Err(cleave::split::PublishError::StageOut {
            out: staging.to_path_buf(),
            what,
        }
        .into())
    };
    if let Some(d) = data_dir {
        let (s, d) = (
            cleave::split::publish::canonical_lenient(staging),
            cleave::split::publish::canonical_lenient(d),
        );
        if s.starts_with(&d) {
            return refuse(format!(
                "--stream-staging is inside --data-dir {}: Cassandra would take the staged sstables for its own; stage beside the data directory (the default, {})",
                d.display(),
                default_staging(&d).display()
            ));
        }
    }
    if let Some(why) = cleave::split::publish::table_dir_evidence(staging) {
        return refuse(format!(
            "{why}: the receiver's staging root must not be a table directory"
        ));
    }
    Ok(())
}

/// Binds the receiver on `addr` and serves it on a task until `shutdown`, counting into
/// `metrics` (`cleave run` shares them with its sender). The check that every listener
/// authenticates is here.
/// What the receiver knows of its node.
pub struct ReceiverNode {
    pub data_dir: Option<PathBuf>,
    /// Transfers declaring another destination are refused (`WrongDestination`).
    pub node: Option<String>,
    pub min_free_percent: f64,
    pub cassandra: cleave::sstable::cassandra::TargetCassandra,
}

pub async fn spawn_receiver(
    addr: &str,
    f: &ReceiverFlags,
    n: ReceiverNode,
    metrics: Arc<StreamMetrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>> {
    let ReceiverNode {
        data_dir,
        node,
        min_free_percent,
        cassandra,
    } = n;
    let staging = match (&f.staging, &data_dir) {
        (Some(s), _) => s.clone(),
        (None, Some(d)) => default_staging(d),
        (None, None) => {
            anyhow::bail!("the stream receiver needs --stream-staging (or --data-dir, whose sibling cleave-stream-staging/ is the default)")
        }
    };
    check_staging(&staging, data_dir.as_deref())?;
    let token = f.token_file.as_deref().map(read_token).transpose()?;
    let tls = match (&f.tls_cert, &f.tls_key) {
        (Some(c), Some(k)) => Some(tls::server_config(c, k, f.tls_client_ca.as_deref())?),
        _ => None,
    };
    // Every listener authenticates: a token, or client certificates.
    anyhow::ensure!(
        token.is_some() || f.tls_client_ca.is_some(),
        "the receiver needs --stream-token-file or --stream-tls-client-ca: it never accepts unauthenticated transfers"
    );
    anyhow::ensure!(
        tls.is_some() || f.insecure_plaintext,
        "no --stream-tls-cert/--stream-tls-key: pass --insecure-plaintext to serve without TLS"
    );
    let receiver = Arc::new(Receiver::new(
        ReceiverConfig {
            staging,
            data_dir,
            token,
            allow_tables: f.allow_tables.clone(),
            max_transfers: f.max_transfers.max(1),
            min_free_percent,
            import_command: f.import_command.clone(),
            retry_after_secs: f.retry_after,
            idle_timeout: Duration::from_secs(300),
            cassandra,
            node,
        },
        metrics,
    )?);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("bind --stream-addr {addr}"))?;
    tracing::info!(
        addr = %listener.local_addr()?,
        tls = tls.is_some(),
        "stream receiver listening"
    );
    Ok(tokio::spawn(listen::serve(
        listener, tls, receiver, shutdown,
    )))
}

async fn serve(a: ServeArgs) -> Result<ExitCode> {
    let registry = prometheus::Registry::new();
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {},
        }
    };
    let task = spawn_receiver(
        &a.addr,
        &a.flags,
        ReceiverNode {
            data_dir: a.data_dir,
            node: a.node,
            min_free_percent: a.min_free_percent,
            cassandra: a.cassandra_version,
        },
        StreamMetrics::new(&registry)?,
        shutdown,
    )
    .await?;
    task.await?;
    Ok(ExitCode::SUCCESS)
}

fn fail(e: &StreamError, json: bool) -> ExitCode {
    if json {
        super::json::print_error(
            serde_json::json!({"reason": e.reason().as_str(), "message": e.to_string()}),
        );
    }
    eprintln!("error[{}]: {e}", e.reason());
    ExitCode::from(1)
}

/// `l:r` pairs (`--ranges`) as token ranges `(l, r]` of `p`.
fn parse_ranges(
    p: cleave::sstable::Partitioner,
    specs: &[String],
) -> Result<Vec<cleave::sstable::TokenRange>> {
    let specs = specs
        .iter()
        .map(|s| {
            s.split_once(':')
                .map(|(l, r)| cleave::split::ranges::RangeSpec {
                    start: l.to_string(),
                    end: r.to_string(),
                })
                .with_context(|| format!("--ranges {s:?}: expected l:r"))
        })
        .collect::<Result<Vec<_>>>()?;
    cleave::split::ranges::to_token_ranges(p, &specs).map_err(|e| anyhow::anyhow!("--ranges: {e}"))
}

async fn send_all(a: SendArgs) -> Result<ExitCode> {
    let token = a.token_file.as_deref().map(read_token).transpose()?;
    let tls = match &a.tls_ca {
        Some(ca) => {
            let client = match (&a.tls_cert, &a.tls_key) {
                (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
                _ => None,
            };
            let cfg = tls::client_config(ca, client)?;
            let host = a.tls_server_name.clone().unwrap_or_else(|| {
                a.to.rsplit_once(':')
                    .map_or(a.to.clone(), |(h, _)| h.to_string())
            });
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .with_context(|| format!("TLS server name {host:?}"))?;
            Some((cfg, name))
        }
        None => {
            anyhow::ensure!(
                a.insecure_plaintext,
                "no --tls-ca: pass --insecure-plaintext to send without TLS"
            );
            None
        }
    };
    let ep = Endpoint {
        addr: a.to.clone(),
        tls,
        token,
    };
    let mut children = Vec::new();
    for p in &a.sstables {
        let (ks, tb) = match (&a.keyspace, &a.table, send::keyspace_table_of(p)) {
            (Some(k), Some(t), _) => (k.clone(), t.clone()),
            (k, t, Some((pk, pt))) => (k.clone().unwrap_or(pk), t.clone().unwrap_or(pt)),
            (_, _, None) => anyhow::bail!("{}: pass --keyspace and --table", p.display()),
        };
        let (desc, _) = cleave::sstable::Descriptor::from_path(p)?;
        let name = ChildName {
            transfer: format!(
                "{}.{ks}.{tb}.{}-{}",
                a.transfer_prefix, desc.version, desc.id
            ),
            group: a.group.clone(),
            keyspace: ks.clone(),
            table: tb.clone(),
            import: a.import.into(),
            source: p.file_name().map(|n| n.to_string_lossy().into_owned()),
            destination: a.destination_node.clone(),
        };
        if a.ranges.is_empty() {
            match send::whole_sstable(p, &name) {
                Ok(c) => children.push(c),
                Err(e) => return Ok(fail(&e, a.json)),
            }
            continue;
        }
        let partitioner = cleave::sstable::SSTable::open(p)?.partitioner;
        let ranges = parse_ranges(partitioner, &a.ranges)?;
        match cleave::stream::plan::range_children(p, &ranges, &name, a.target_cassandra) {
            Ok(rc) => {
                if !a.json {
                    eprintln!(
                        "{}: {} of {} partitions in the ranges, {} children",
                        p.display(),
                        rc.partitions_in_ranges,
                        rc.parent_partitions,
                        rc.children.len()
                    );
                }
                children.extend(rc.children.into_iter().map(|c| c.source));
            }
            Err(e) => return Ok(fail(&e, a.json)),
        }
    }
    let total: u64 = children.iter().map(|c| c.manifest.total_bytes()).sum();
    let bar = super::progress::bytes_bar(total, "stream");
    let bar2 = bar.clone();
    let opts = SendOptions {
        retries: a.retries,
        backoff: Duration::from_millis(a.backoff_ms),
        throttle: a
            .max_bytes_per_second
            .map(|r| Arc::new(cleave::io::throttle::TokenBucket::new(r))),
        metrics: StreamMetrics::unregistered(),
        on_progress: Arc::new(move |n| bar2.inc(n)),
    };
    let mut reports = Vec::new();
    for c in &children {
        bar.set_message(c.manifest.transfer.clone());
        match send::send_child(&ep, c, &opts).await {
            Ok(r) => {
                if !a.json {
                    let v = r.verdict.as_ref();
                    eprintln!(
                        "{}: {} ({} partitions, {} bytes sent{}{})",
                        r.transfer,
                        v.map_or("?".into(), |v| v
                            .published
                            .first()
                            .cloned()
                            .unwrap_or_default()),
                        v.map_or(0, |v| v.partitions),
                        r.bytes_sent,
                        if r.replayed {
                            ", already published"
                        } else {
                            ""
                        },
                        if r.resumed.is_empty() {
                            String::new()
                        } else {
                            format!(", resumed {:?}", r.resumed)
                        }
                    );
                }
                reports.push(r);
            }
            Err(e) => {
                bar.abandon();
                return Ok(fail(&e, a.json));
            }
        }
    }
    bar.finish_and_clear();
    if a.json {
        // An object, like every other command's: `{"version": 1, "sent": [...]}`.
        super::json::print(&reports, "sent")?;
    }
    Ok(ExitCode::SUCCESS)
}
