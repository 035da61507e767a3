//! Executing a RangeStream on its source node: plan the range children of every sstable
//! of the keyspace's (or `spec.tables`') directories with the split planner
//! (`stream::plan::range_children`, nothing written on the source), then send them one by
//! one to the destination's receiver (`stream::send::send_child`), recording the bytes, the
//! throughput and each child's verdict in status.
//!
//! Ownership, Events and the phase machine are the AnticompactionJob's: a lease in
//! `status.worker` taken with the resourceVersion as a precondition (`core::Lease`),
//! Pending → Running → Complete | Failed, transitions in `status.rs`. A stream reads the
//! table it sends from, so it claims the table like a job does: a Replace job cannot swap a
//! parent out from under a send.
//!
//! Retries are the reconciler's, not the transport's: every child is sent with
//! `retries: 0`, and a retryable failure (unreachable, connection cut, 5xx, a resume
//! conflict) becomes a `Retrying` condition and a Warning Event, then a new attempt after
//! an exponential backoff, which resumes from the receiver's durable offsets. After
//! `--stream-retries` consecutive failures without progress the stream fails with the
//! transport's reason (`Unreachable` for a dead receiver). 429 is waited out inside the
//! transport (Retry-After), without using the budget.
//!
//! Cancel: deleting the RangeStream (the finalizer) stops the in-flight send by dropping
//! it and asks the receiver to `DELETE /v1/transfers/<id>`, so its staging is removed.
//! Children the receiver already published stay: they are the destination's data. A
//! shutdown (SIGTERM) stops the same way but keeps the receiver's staging, so the next
//! worker resumes from the durable offsets.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use tracing::{info, warn};

use super::core::{lease, now, Ctx, Ended, Kind, Lease, Run, Store};
use super::crd::{
    Destination, JobStatus, Progress, RangeStream, RangeStreamSpec, StreamChildResult,
    StreamSSTableResult, StreamStatus,
};
use super::decide::TableClaim;
use super::schema::SpecProblem;
use super::status::{self, Event};
use crate::io::throttle::TokenBucket;
use crate::reason::Failure;
use crate::reason::Reason;
use crate::sstable::{Component, Descriptor};
use crate::stream::plan::{range_children, RangeChild};
use crate::stream::send::{self, ChildName, Endpoint, SendOptions};
use crate::stream::StreamError;

/// The sidecar's sender side: the credentials it presents to receivers (`cleave run`
/// reuses the receiver's flags, docs/operator.md "Streaming") and its retry policy.
#[derive(Clone)]
pub struct StreamClient {
    /// `--stream-token-file`: the bearer token every receiver of the cluster accepts.
    pub token: Option<String>,
    /// `--stream-tls-client-ca` (the CA receivers' certificates are checked against) with
    /// `--stream-tls-cert/-key` as the client certificate for mutual TLS.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// `--insecure-plaintext`: send without TLS.
    pub insecure_plaintext: bool,
    /// `--stream-retries`: consecutive failed attempts retried before Failed.
    pub retries: u32,
    /// `--stream-backoff-ms`: the first retry's wait, doubled each time (at most 60 s).
    pub backoff: Duration,
    /// The receiver port of a `spec.destination.service` without one (the chart's
    /// `stream.port`).
    pub service_port: u16,
}

impl Default for StreamClient {
    fn default() -> StreamClient {
        StreamClient {
            token: None,
            tls: None,
            insecure_plaintext: false,
            retries: 5,
            backoff: Duration::from_secs(1),
            service_port: 7070,
        }
    }
}

const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// `host:port` of a stream's receiver: `endpoint` as it is, or `service` (`name`,
/// `name.namespace`, either with `:port`) as the destination pod's own DNS name
/// `<nodeName>.<name>.<namespace>.svc:<port>`, the namespace defaulting to the stream's own.
/// Not the Service's name: that resolves to any pod behind it, and a child would land on
/// whichever answered. `service` is therefore the headless Service that governs the
/// destination's StatefulSet (cass-operator: `<cluster>-<dc>-all-pods-service`), under
/// which each pod has the record `<pod>.<service>` (Kubernetes DNS for StatefulSets), and
/// `nodeName` is the pod's name (the sidecar shape). The receiver checks it too (`--node`,
/// 421 WrongDestination).
pub fn resolve_destination(d: &Destination, namespace: &str, default_port: u16) -> Option<String> {
    if let Some(e) = &d.endpoint {
        return Some(e.clone());
    }
    let svc = d.service.as_deref()?.trim();
    let (host, port) = match svc.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok()?),
        None => (svc, default_port),
    };
    let pod = d.node_name.trim();
    if host.is_empty() || pod.is_empty() || pod.contains('.') || pod.contains(':') {
        return None;
    }
    let host = if host.ends_with(".svc") || host.contains(".svc.") {
        host.to_string()
    } else if host.contains('.') {
        format!("{host}.svc")
    } else {
        format!("{host}.{namespace}.svc")
    };
    Some(format!("{pod}.{host}:{port}"))
}

impl StreamClient {
    /// The endpoint of `d` with this sidecar's credentials.
    pub fn endpoint(&self, d: &Destination, namespace: &str) -> Result<Endpoint, Failure> {
        let addr = resolve_destination(d, namespace, self.service_port).ok_or_else(|| {
            Failure::new(
                Reason::InvalidSpec,
                "spec.destination: no endpoint, and the service is not name[.namespace][:port]",
            )
        })?;
        let tls = match &self.tls {
            Some(cfg) => {
                let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| {
                        Failure::new(
                            Reason::InvalidSpec,
                            format!("spec.destination {addr}: not a TLS server name: {e}"),
                        )
                    })?;
                Some((cfg.clone(), name))
            }
            None if self.insecure_plaintext => None,
            None => {
                return Err(Failure::new(
                    Reason::Unauthorized,
                    "this sidecar has no stream client credentials: start it with --stream-tls-client-ca (TLS, the receivers' CA) or --insecure-plaintext, and --stream-token-file or --stream-tls-cert/--stream-tls-key",
                ))
            }
        };
        Ok(Endpoint {
            addr,
            tls,
            token: self.token.clone(),
        })
    }
}

/// One parent and its range children, planned before the first byte is sent.
pub struct Planned {
    pub result: StreamSSTableResult,
    pub children: Vec<RangeChild>,
}

/// Every Data.db of the directories, sorted (whatever their repair state: a stream moves
/// all the data in its ranges). One cleave cannot read (a BTI version other than `da`, a
/// BIG one before `ma`) is listed too, so that the stream fails on it
/// (`UnsupportedSSTable`) instead of completing without its rows.
fn sstables_of(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, Failure> {
    let mut out = Vec::new();
    for d in dirs {
        let rd = std::fs::read_dir(d).map_err(|e| Failure::io(d.display(), &e))?;
        for e in rd.filter_map(|e| e.ok()) {
            let p = e.path();
            if let Ok((_, Component::Data)) = Descriptor::from_path(&p) {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn failure(e: StreamError) -> Failure {
    Failure::new(e.reason(), e.to_string())
}

/// Plans the stream (blocking: reads every parent's Index.db once). Transfer ids are
/// `<uid>.<table>.<version>-<generation>.c<child>`: the same for every worker and every
/// retry, so a replay is recognised by the receiver and never published twice.
pub fn plan(
    data_dir: &Path,
    spec: &RangeStreamSpec,
    uid: &str,
    group: &str,
    node: &str,
) -> Result<Vec<Planned>, Failure> {
    let dirs = super::job::table_dirs_of(data_dir, &spec.keyspace, &spec.tables)?;
    let specs = &spec.ranges;
    let mut out = Vec::new();
    for data in sstables_of(&dirs)? {
        let file = data
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (_, table) = send::keyspace_table_of(&data).ok_or_else(|| {
            Failure::new(
                Reason::InvalidSpec,
                format!("{}: no table directory", data.display()),
            )
        })?;
        let (desc, _) = Descriptor::from_path(&data).map_err(read_failure)?;
        let partitioner = crate::sstable::SSTable::open(&data)
            .map_err(read_failure)?
            .partitioner;
        super::decide::check_partitioner(spec.partitioner, partitioner)
            .map_err(|m| Failure::new(Reason::InvalidSpec, m))?;
        let ranges = crate::split::ranges::to_token_ranges(partitioner, specs)
            .map_err(|m| Failure::new(Reason::InvalidRange, format!("spec.ranges: {m}")))?;
        let name = ChildName {
            transfer: format!("{uid}.{table}.{}-{}", desc.version, desc.id),
            group: group.to_string(),
            keyspace: spec.keyspace.clone(),
            table: table.clone(),
            import: spec.import,
            source: Some(format!("{node}:{file}")),
            destination: Some(spec.destination.node_name.clone()),
        };
        let target = super::job::target_cassandra(
            spec.target_cassandra.as_deref(),
            crate::sstable::cassandra::TargetCassandra::Unknown,
        )?;
        let rc = range_children(&data, &ranges, &name, target).map_err(failure)?;
        out.push(Planned {
            result: StreamSSTableResult {
                parent: file,
                table,
                partitions: rc.parent_partitions,
                partitions_in_ranges: rc.partitions_in_ranges,
                children: Vec::new(),
            },
            children: rc.children,
        });
    }
    Ok(out)
}

/// A read error of the source sstable, with the reason its kind gives (a short read is
/// `CorruptSSTable`, EACCES `PermissionDenied`, EIO `IoError`).
fn read_failure(e: crate::sstable::error::FormatError) -> Failure {
    Failure::new(crate::split::error::format_reason(&e), e.to_string())
}

/// Only the source node's sidecar acts on a RangeStream (the destination's receiver
/// learns of it from its transfers), with the same lease as a job's.
impl Kind for RangeStream {
    const KIND: &'static str = "RangeStream";
    const NOUN: &'static str = "stream";
    const STOP_BUDGET: Duration = Duration::from_secs(120);

    crate::kind_status_and_node!(source_node);

    fn checks(&self) -> Vec<SpecProblem> {
        let mut v: Vec<SpecProblem> = super::decide::node_label_check(
            self.labels(),
            "spec.sourceNode",
            &self.spec.source_node,
        )
        .into_iter()
        .collect();
        v.extend(super::decide::stream_checks(&self.spec));
        v
    }

    fn rate_limit(&self) -> Option<u64> {
        self.spec.max_bytes_per_second
    }

    fn tables(&self, default_data_dir: &Path) -> TableClaim {
        TableClaim {
            data_dir: default_data_dir.to_path_buf(),
            keyspace: self.spec.keyspace.clone(),
            tables: self.spec.tables.clone(),
        }
    }

    async fn work<S: Store>(self: Arc<Self>, ctx: Arc<Ctx<S>>, run: Run) {
        send(&self, &ctx, run).await
    }

    /// A run that was stopped asked the receiver to drop the in-flight transfer's staging
    /// itself; when no run was here (a previous worker died), the transfer the status names
    /// is cancelled on the receiver. Published children stay on the destination.
    async fn cleanup<S: Store>(self: Arc<Self>, ctx: Arc<Ctx<S>>, stopped: bool) -> String {
        if stopped {
            return "the send was stopped and the receiver asked to drop its staging".to_string();
        }
        let in_flight = self
            .status
            .as_ref()
            .and_then(|st| st.stream.as_ref())
            .and_then(|x| x.current_transfer.clone());
        let ns = self.namespace().unwrap_or_default();
        match (in_flight, ctx.stream.endpoint(&self.spec.destination, &ns)) {
            (Some(id), Ok(ep)) => match cancel_on_receiver(&ep, &id).await {
                Ok(()) => format!("the receiver dropped the staging of {id}"),
                Err(e) => format!("cleanup incomplete: the receiver's staging of {id} stays: {e}"),
            },
            _ => "nothing in flight".to_string(),
        }
    }
}

/// How a send ended, short of success.
enum Stop {
    /// The run was asked to stop (deletion, shutdown, lease lost).
    Cancelled,
    Failed(Failure),
}

/// The state of one run, written through the lease.
struct Sender<'a, S: Store> {
    ctx: &'a Ctx<S>,
    s: &'a RangeStream,
    lease: Lease<'a, S, RangeStream>,
    latest: JobStatus,
    stream: StreamStatus,
    progress: Progress,
    /// Body bytes this worker handed to connections (all attempts).
    sent: Arc<AtomicU64>,
    started: Instant,
}

impl<S: Store> Sender<'_, S> {
    fn labels(&self) -> [String; 2] {
        [self.s.namespace().unwrap_or_default(), self.s.name_any()]
    }

    /// Writes `stream`/`progress` (and the heartbeat) to status and the metrics.
    async fn write_progress(&mut self, in_flight: u64) {
        let mut st = self.stream.clone();
        st.bytes_sent += in_flight;
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        st.throughput = (self.sent.load(Ordering::Relaxed) as f64 / secs) as u64;
        let [ns, name] = self.labels();
        let m = &self.ctx.metrics;
        let l = [ns.as_str(), name.as_str()];
        m.stream_sent
            .with_label_values(&l)
            .set(st.bytes_sent as i64);
        m.stream_total
            .with_label_values(&l)
            .set(st.bytes_total as i64);
        m.stream_throughput
            .with_label_values(&l)
            .set(st.throughput as i64);
        let ev = Event::StreamProgress {
            identity: &self.ctx.identity,
            stream: &st,
            progress: &self.progress,
        };
        self.latest = status::next(&self.latest, ev, self.s.metadata.generation, now()).status;
        self.lease.write(&self.latest).await;
    }

    /// A transition with an Event (retrying, recovered): written and published.
    async fn transition(&mut self, ev: Event<'_>) {
        let t = status::next(&self.latest, ev, self.s.metadata.generation, now());
        self.latest = t.status;
        self.lease.write(&self.latest).await;
        if let Some(n) = &t.note {
            self.ctx.store.event(self.s, n).await;
        }
    }
}

/// Resolves when `cancel` is set (polled: the flag is shared with the job runner's).
async fn cancelled(cancel: &AtomicBool) {
    while !cancel.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends one child until its verdict, retrying as the module doc says.
async fn send_one<S: Store>(
    sender: &mut Sender<'_, S>,
    ep: &Endpoint,
    child: &RangeChild,
    opts: &SendOptions,
    cancel: &AtomicBool,
) -> Result<send::SendReport, Stop> {
    let retries = sender.ctx.stream.retries;
    let mut failures = 0u32;
    let mut tick = tokio::time::interval(sender.ctx.heartbeat.min(Duration::from_secs(5)));
    tick.tick().await;
    loop {
        let at_start = sender.sent.load(Ordering::Relaxed);
        let fut = send::send_child(ep, &child.source, opts);
        tokio::pin!(fut);
        let r = loop {
            tokio::select! {
                r = &mut fut => break r,
                _ = tick.tick() => {
                    let in_flight = sender.sent.load(Ordering::Relaxed) - at_start;
                    sender.write_progress(in_flight).await;
                    if sender.lease.lost {
                        return Err(Stop::Cancelled);
                    }
                }
                _ = cancelled(cancel) => return Err(Stop::Cancelled),
            }
        };
        let e = match r {
            Ok(report) => {
                if failures > 0 {
                    let identity = sender.ctx.identity.clone();
                    sender
                        .transition(Event::Recovered {
                            identity: &identity,
                        })
                        .await;
                }
                return Ok(report);
            }
            Err(e) => e,
        };
        if sender.sent.load(Ordering::Relaxed) > at_start {
            // Bytes went through since the last failure: a new budget (as the transport's).
            failures = 0;
        }
        let id = &child.source.manifest.transfer;
        if !e.retryable() || failures >= retries {
            let after = if failures > 0 {
                format!(" (after {} attempts)", failures + 1)
            } else {
                String::new()
            };
            return Err(Stop::Failed(Failure::new(
                e.reason(),
                format!("transfer {id} to {}: {e}{after}", ep.addr),
            )));
        }
        let wait = sender
            .ctx
            .stream
            .backoff
            .saturating_mul(1 << failures.min(16))
            .min(MAX_BACKOFF);
        failures += 1;
        sender.stream.retries += 1;
        let [ns, name] = sender.labels();
        sender
            .ctx
            .metrics
            .stream_retries
            .with_label_values(&[ns.as_str(), name.as_str()])
            .inc();
        let message = format!(
            "transfer {id} to {}: attempt {failures} of {} failed: {e}; retrying in {} ms from the receiver's durable offsets",
            ep.addr,
            retries + 1,
            wait.as_millis()
        );
        warn!(reason = e.reason().as_str(), detail = %message, "stream attempt failed");
        let (identity, reason) = (sender.ctx.identity.clone(), e.reason());
        sender.write_progress(0).await;
        sender
            .transition(Event::Retrying {
                identity: &identity,
                reason,
                message: &message,
            })
            .await;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = cancelled(cancel) => return Err(Stop::Cancelled),
        }
    }
}

/// Asks the receiver to drop a transfer's staging (deletion of the stream).
pub async fn cancel_on_receiver(ep: &Endpoint, id: &str) -> Result<(), StreamError> {
    tokio::time::timeout(Duration::from_secs(30), send::cancel_transfer(ep, id))
        .await
        .map_err(|_| StreamError::Unreachable(format!("DELETE {id} on {}: timed out", ep.addr)))?
}

/// One stream's execution, on its own task.
async fn send<S: Store>(s: &Arc<RangeStream>, ctx: &Arc<Ctx<S>>, mut run: Run) {
    let started = Instant::now();
    let claimed = std::mem::take(&mut run.claimed);
    let lease = run.lease(&**ctx, &**s);
    let mut sender = Sender {
        ctx,
        s,
        lease,
        stream: StreamStatus {
            // Retries survive a takeover; bytes and results are this worker's.
            retries: claimed.stream.as_ref().map_or(0, |x| x.retries),
            ..Default::default()
        },
        latest: claimed,
        progress: Progress::default(),
        sent: Arc::new(AtomicU64::new(0)),
        started,
    };
    let mut in_flight: Option<(Endpoint, String)> = None;
    let ended = match execute(&mut sender, &run.cancel, &mut in_flight).await {
        Ok(()) => Ended::Complete,
        Err(Stop::Cancelled) => Ended::Interrupted,
        Err(Stop::Failed(f)) => Ended::Failed(f),
    };
    let deleted = ended == Ended::Interrupted && !ctx.shutdown_requested() && !sender.lease.lost;
    if deleted {
        // Deleted: the finalizer waits for this; the receiver's staging goes with it.
        if let Some((ep, id)) = in_flight {
            match cancel_on_receiver(&ep, &id).await {
                Ok(()) => {
                    info!(transfer = %id, "stream deleted: the receiver dropped the transfer's staging")
                }
                Err(e) => {
                    warn!(transfer = %id, error = %e, "stream deleted: the receiver could not be told to drop its staging")
                }
            }
        }
    } else if !sender.lease.lost {
        sender.write_progress(0).await;
    }
    let last = sender.latest.clone();
    lease::finish(&mut sender.lease, &run.key, started, &last, ended).await;
}

/// Plans, then sends every child in order; `in_flight` names the transfer being sent.
async fn execute<S: Store>(
    sender: &mut Sender<'_, S>,
    cancel: &Arc<AtomicBool>,
    in_flight: &mut Option<(Endpoint, String)>,
) -> Result<(), Stop> {
    let (ctx, s) = (sender.ctx, sender.s);
    let ns = s.namespace().unwrap_or_default();
    let ep = ctx
        .stream
        .endpoint(&s.spec.destination, &ns)
        .map_err(Stop::Failed)?;
    sender.stream.destination = ep.addr.clone();
    let (data_dir, spec) = (ctx.data_dir.clone(), s.spec.clone());
    let (uid, group, node) = (
        s.uid().unwrap_or_else(|| s.name_any()),
        s.name_any(),
        ctx.node.clone(),
    );
    let planned = tokio::task::spawn_blocking(move || plan(&data_dir, &spec, &uid, &group, &node))
        .await
        .map_err(|e| Stop::Failed(Failure::new(Reason::IoError, e.to_string())))?
        .map_err(Stop::Failed)?;
    sender.stream.bytes_total = planned
        .iter()
        .flat_map(|p| &p.children)
        .map(|c| c.source.manifest.total_bytes())
        .sum();
    sender.stream.children_total = planned.iter().map(|p| p.children.len() as u64).sum();
    sender.progress.sstables_total = planned.len() as u64;
    sender.progress.bytes_planned = sender.stream.bytes_total;
    summarize(sender);
    info!(
        sstables = planned.len(),
        children = sender.stream.children_total,
        bytes = sender.stream.bytes_total,
        destination = %ep.addr,
        "stream planned"
    );
    sender.write_progress(0).await;
    let sent = sender.sent.clone();
    let opts = SendOptions {
        retries: 0,
        backoff: Duration::from_millis(100),
        throttle: s
            .spec
            .max_bytes_per_second
            .map(|r| Arc::new(TokenBucket::new(r))),
        metrics: ctx.metrics.stream.clone(),
        on_progress: Arc::new(move |n| {
            sent.fetch_add(n, Ordering::Relaxed);
        }),
    };
    for p in planned {
        let mut result = p.result;
        sender.stream.current_sstable = Some(result.parent.clone());
        for child in &p.children {
            if cancel.load(Ordering::Relaxed) {
                return Err(Stop::Cancelled);
            }
            let id = child.source.manifest.transfer.clone();
            sender.stream.current_transfer = Some(id.clone());
            *in_flight = Some((ep.clone(), id.clone()));
            // Written before the first byte: a deletion from now on knows what to cancel.
            sender.write_progress(0).await;
            let report = send_one(sender, &ep, child, &opts, cancel).await?;
            *in_flight = None;
            let v = report.verdict.unwrap_or_else(|| crate::stream::Verdict {
                transfer: id.clone(),
                ok: false,
                published: Vec::new(),
                partitions: 0,
                fingerprint: String::new(),
                data_crc32: 0,
                chunks_checked: 0,
                import: child.source.manifest.import,
                import_output: None,
            });
            if !v.ok || v.partitions != child.partitions {
                return Err(Stop::Failed(Failure::new(
                    Reason::CheckFailed,
                    format!(
                        "transfer {id}: the receiver's verdict has {} partitions (ok: {}), the child {}",
                        v.partitions, v.ok, child.partitions
                    ),
                )));
            }
            result.children.push(StreamChildResult {
                transfer: id,
                ok: v.ok,
                partitions: v.partitions,
                bytes: report.bytes_total,
                bytes_sent: report.bytes_sent,
                published: v.published.first().cloned().unwrap_or_default(),
                fingerprint: v.fingerprint.clone(),
                chunks_checked: v.chunks_checked,
                replayed: report.replayed,
            });
            sender.stream.children_done += 1;
            sender.stream.bytes_sent += report.bytes_total;
            sender.progress.partitions += v.partitions;
            sender.stream.current_transfer = None;
            sender.stream.results = with_result(&sender.stream.results, &result);
            summarize(sender);
            sender.write_progress(0).await;
        }
        sender.progress.sstables_done += 1;
        sender.stream.results = with_result(&sender.stream.results, &result);
        summarize(sender);
    }
    sender.stream.current_sstable = None;
    Ok(())
}

/// The results with `r` recorded (replacing the entry of the same parent).
fn with_result(
    results: &[StreamSSTableResult],
    r: &StreamSSTableResult,
) -> Vec<StreamSSTableResult> {
    let mut v: Vec<StreamSSTableResult> = results
        .iter()
        .filter(|x| x.parent != r.parent || x.table != r.table)
        .cloned()
        .collect();
    v.push(r.clone());
    v
}

fn summarize<S: Store>(sender: &mut Sender<'_, S>) {
    sender.progress.summary = format!(
        "{}/{} children",
        sender.stream.children_done, sender.stream.children_total
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(endpoint: Option<&str>, service: Option<&str>) -> Destination {
        Destination {
            node_name: "n2".into(),
            endpoint: endpoint.map(str::to_string),
            service: service.map(str::to_string),
            unknown: Default::default(),
        }
    }

    #[test]
    fn a_service_resolves_to_the_destination_pods_dns_name() {
        let r = |svc| resolve_destination(&dest(None, Some(svc)), "db", 7070);
        assert_eq!(r("recv").as_deref(), Some("n2.recv.db.svc:7070"));
        assert_eq!(r("recv.other").as_deref(), Some("n2.recv.other.svc:7070"));
        assert_eq!(r("recv:7171").as_deref(), Some("n2.recv.db.svc:7171"));
        assert_eq!(
            r("recv.other.svc:1").as_deref(),
            Some("n2.recv.other.svc:1")
        );
        let mut d = dest(None, Some("recv"));
        d.node_name = "a.b".into();
        assert_eq!(
            resolve_destination(&d, "db", 1),
            None,
            "a node name with a dot is no pod name"
        );
        assert_eq!(r("recv:x"), None);
        assert_eq!(r(":1"), None);
        let e = resolve_destination(&dest(Some("10.0.0.2:7070"), Some("x")), "db", 1);
        assert_eq!(e.as_deref(), Some("10.0.0.2:7070"), "endpoint wins");
    }

    #[test]
    fn without_credentials_a_sidecar_refuses_to_send() {
        let c = StreamClient::default();
        let e = c
            .endpoint(&dest(Some("127.0.0.1:1"), None), "db")
            .err()
            .unwrap();
        assert_eq!(e.reason, Reason::Unauthorized);
        let c = StreamClient {
            insecure_plaintext: true,
            token: Some("t".into()),
            ..Default::default()
        };
        let ep = c.endpoint(&dest(None, Some("recv")), "db").unwrap();
        assert_eq!(ep.addr, "n2.recv.db.svc:7070");
        assert!(ep.tls.is_none());
    }
}
