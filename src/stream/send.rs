//! The sender: for each child, the manifest first, then every file body from the
//! receiver's durable offset, then the commit whose verdict it returns.
//!
//! A child's files are `Segment`s: byte ranges of files on the source (a parent's
//! Data.db carried verbatim) or bytes built in memory (re-encoded boundary chunks, the
//! rebuilt small components). Nothing is written on the source. Bodies are read by a
//! blocking thread into 1 MiB frames (the `maxBytesPerSecond` token bucket is paid there)
//! and handed to hyper, so at most a few MiB are buffered per transfer.
//!
//! Failures: connection errors, 5xx and a resume-offset conflict are retried with
//! exponential backoff (progress since the last failure resets the budget); 429 waits for
//! `Retry-After` without using the budget; anything else (401, 4xx, 422, 507) is final.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use super::manifest::{self, FileEntry, Import, Manifest};
use super::metrics::StreamMetrics;
use super::plain;
use super::{reason_named, ErrorBody, StreamError, TransferState, Verdict, OFFSET_HEADER};
use crate::io::throttle::TokenBucket;
use crate::reason::Reason;
use crate::sstable::{Component, SSTable};

const FRAME: usize = 1 << 20;
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// 429 answers honoured before giving up (with the default Retry-After of 5 s: an hour).
const MAX_BUSY_WAITS: u32 = 720;

#[derive(Debug, Clone)]
pub enum Segment {
    /// `len` bytes of `path` from `offset`, sent as they are on disk.
    File {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
    /// Bytes built in memory.
    Bytes(Bytes),
}

impl Segment {
    pub(super) fn len(&self) -> u64 {
        match self {
            Segment::File { len, .. } => *len,
            Segment::Bytes(b) => b.len() as u64,
        }
    }

    /// The segments of a file from byte `from` on (a resume point): the ones before it
    /// dropped, the one it falls in trimmed to start there.
    pub(super) fn from_offset(segments: &[Segment], from: u64) -> Vec<Segment> {
        let mut out = Vec::new();
        let mut start = 0u64;
        for s in segments {
            let end = start + s.len();
            if end > from {
                let skip = from.saturating_sub(start);
                out.push(match s {
                    Segment::Bytes(b) => Segment::Bytes(b.slice(skip as usize..)),
                    Segment::File { path, offset, len } => Segment::File {
                        path: path.clone(),
                        offset: offset + skip,
                        len: len - skip,
                    },
                });
            }
            start = end;
        }
        out
    }
}

#[derive(Debug, Clone)]
pub struct FileSource {
    pub component: String,
    pub segments: Vec<Segment>,
}

impl FileSource {
    pub fn size(&self) -> u64 {
        self.segments.iter().map(Segment::len).sum()
    }
}

/// One child to send: its manifest and where each file's bytes come from.
#[derive(Debug, Clone)]
pub struct ChildSource {
    pub manifest: Manifest,
    pub files: Vec<FileSource>,
}

/// What identifies a child on the receiver.
#[derive(Debug, Clone)]
pub struct ChildName {
    pub transfer: String,
    pub group: String,
    pub keyspace: String,
    pub table: String,
    pub import: Import,
    pub source: Option<String>,
    /// The destination node (RangeStream `spec.destination.nodeName`), declared in every
    /// manifest so that a receiver with `--node` refuses a child meant for another node.
    pub destination: Option<String>,
}

/// Send order: the chunk table first (the receiver checks Data.db against it), Data.db
/// last.
pub(super) const ORDER: &[Component] = &[
    Component::CompressionInfo,
    Component::Crc,
    Component::Statistics,
    Component::Summary,
    Component::Filter,
    Component::Index,
    Component::Partitions,
    Component::Rows,
    Component::Data,
];

fn crc_of(path: &Path) -> Result<u32, StreamError> {
    let f = File::open(path).map_err(|e| StreamError::io(path.display(), e))?;
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; FRAME];
    let mut at = 0;
    loop {
        let n = f
            .read_at(&mut buf, at)
            .map_err(|e| StreamError::io(path.display(), e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(h.finalize())
}

/// A whole sstable as one child: every component but Digest.crc32 and TOC.txt (the
/// receiver writes those), bytes verbatim from the source files. The Data.db CRC comes
/// from Digest.crc32 when there is one (the receiver recomputes it anyway).
pub fn whole_sstable(data: &Path, name: &ChildName) -> Result<ChildSource, StreamError> {
    let t = SSTable::open(data).map_err(|e| StreamError::Invalid(e.to_string()))?;
    if let Some((c, _)) = t
        .files
        .iter()
        .find(|(c, _)| !ORDER.contains(c) && !matches!(c, Component::Digest | Component::Toc))
    {
        return Err(StreamError::Invalid(format!(
            "{}: component {} cannot be streamed (only {})",
            data.display(),
            c.file_name(),
            manifest::ALLOWED_COMPONENTS.join(", ")
        )));
    }
    let digest = t.digest().ok().flatten().map(|d| d.crc32);
    let mut files = Vec::new();
    let mut entries = Vec::new();
    for c in ORDER {
        let Some(size) = t.size_of(c) else { continue };
        let path = t.path(c);
        let crc32 = match (c, digest) {
            (Component::Data, Some(d)) => d,
            _ => crc_of(&path)?,
        };
        entries.push(FileEntry {
            component: c.file_name().to_string(),
            size,
            crc32,
        });
        files.push(FileSource {
            component: c.file_name().to_string(),
            segments: vec![Segment::File {
                path,
                offset: 0,
                len: size,
            }],
        });
    }
    let manifest = Manifest {
        transfer: name.transfer.clone(),
        group: name.group.clone(),
        keyspace: name.keyspace.clone(),
        table: name.table.clone(),
        version: t.descriptor.version.to_string(),
        format: manifest::ManifestFormat::of(t.descriptor.format),
        import: name.import,
        source: name.source.clone(),
        destination: name.destination.clone(),
        files: entries,
    };
    manifest.validate()?;
    Ok(ChildSource { manifest, files })
}

/// `<data>/<keyspace>/<table>-<id>/<file>`: the keyspace and table a Data.db belongs to.
pub fn keyspace_table_of(data: &Path) -> Option<(String, String)> {
    let table_dir = data.parent()?;
    let t = table_dir.file_name()?.to_str()?;
    let table = t.split_once('-').map_or(t, |(n, _)| n);
    let ks = table_dir.parent()?.file_name()?.to_str()?;
    Some((ks.to_string(), table.to_string()))
}

/// Where and how to reach the receiver.
#[derive(Clone)]
pub struct Endpoint {
    /// `host:port`.
    pub addr: String,
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    pub token: Option<String>,
}

#[derive(Clone)]
pub struct SendOptions {
    pub retries: u32,
    pub backoff: Duration,
    pub throttle: Option<Arc<TokenBucket>>,
    pub metrics: Arc<StreamMetrics>,
    /// Called with the number of body bytes handed to the connection.
    pub on_progress: Arc<dyn Fn(u64) + Send + Sync>,
}

#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendReport {
    pub transfer: String,
    pub verdict: Option<Verdict>,
    /// Body bytes handed to the connection (a cut loses what was in flight).
    pub bytes_sent: u64,
    pub bytes_total: u64,
    /// Of `bytes_sent`, the bytes that went from a source file to the socket by
    /// `sendfile` (plaintext only; 0 over TLS).
    pub bytes_zero_copy: u64,
    /// (component, offset) of every body that started past zero.
    pub resumed: Vec<(String, u64)>,
    pub attempts: u32,
    /// The receiver had already published this transfer id: nothing was sent.
    pub replayed: bool,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Body = BoxBody<Bytes, std::io::Error>;

fn small_body(b: Vec<u8>) -> Body {
    Full::new(Bytes::from(b))
        .map_err(|never| match never {})
        .boxed()
}

async fn connect(ep: &Endpoint) -> Result<SendRequest<Body>, StreamError> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&ep.addr))
        .await
        .map_err(|_| StreamError::Unreachable(format!("connect to {}: timed out", ep.addr)))?
        .map_err(|e| StreamError::Unreachable(format!("connect to {}: {e}", ep.addr)))?;
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Io> = match &ep.tls {
        Some((cfg, name)) => {
            let s = tokio_rustls::TlsConnector::from(cfg.clone())
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| {
                    StreamError::Unauthorized(format!("TLS handshake with {}: {e}", ep.addr))
                })?;
            Box::new(s)
        }
        None => Box::new(tcp),
    };
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| StreamError::Unreachable(format!("HTTP handshake with {}: {e}", ep.addr)))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Sends one request and decodes a 2xx JSON answer, or the receiver's error.
async fn call<T: serde::de::DeserializeOwned>(
    conn: &mut SendRequest<Body>,
    ep: &Endpoint,
    method: Method,
    path: &str,
    headers: &[(&str, String)],
    body: Body,
) -> Result<T, StreamError> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", ep.addr.as_str());
    if let Some(t) = &ep.token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in headers {
        b = b.header(*k, v.as_str());
    }
    let req = b
        .body(body)
        .map_err(|e| StreamError::Invalid(format!("request {path}: {e}")))?;
    conn.ready()
        .await
        .map_err(|e| StreamError::Unreachable(format!("{}: {e}", ep.addr)))?;
    let resp = conn
        .send_request(req)
        .await
        .map_err(|e| StreamError::Unreachable(format!("{path} on {}: {e}", ep.addr)))?;
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let bytes = Limited::new(resp.into_body(), 1 << 20)
        .collect()
        .await
        .map_err(|e| StreamError::Unreachable(format!("{path} answer from {}: {e}", ep.addr)))?
        .to_bytes();
    decode(status, retry_after, &bytes, path)
}

/// A 2xx JSON answer decoded, or the receiver's error (`ErrorBody`) as `Remote`.
fn decode<T: serde::de::DeserializeOwned>(
    status: u16,
    retry_after: Option<u64>,
    bytes: &[u8],
    path: &str,
) -> Result<T, StreamError> {
    if (200..300).contains(&status) {
        return serde_json::from_slice(bytes).map_err(|e| StreamError::Remote {
            status,
            reason: Reason::InvalidRequest,
            message: format!("undecodable answer to {path}: {e}"),
            retry_after_secs: None,
            offset: None,
        });
    }
    let (reason, message, offset) = match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(e) => (
            reason_named(&e.error.reason).unwrap_or(Reason::InvalidRequest),
            e.error.message,
            e.error.offset,
        ),
        Err(_) => (
            if status == 401 {
                Reason::Unauthorized
            } else {
                Reason::InvalidRequest
            },
            String::from_utf8_lossy(bytes).chars().take(500).collect(),
            None,
        ),
    };
    Err(StreamError::Remote {
        status,
        reason,
        message,
        retry_after_secs: retry_after,
        offset,
    })
}

/// Sets its flag when dropped: a cancelled sending future stops its blocking thread.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A file body on a plaintext connection: by hand, its file ranges by sendfile
/// (`plain`), on a blocking thread.
async fn put_plain(
    ep: &Endpoint,
    path: String,
    file: &FileSource,
    from: u64,
    opts: &SendOptions,
) -> Result<(super::FileState, plain::BodyStats), StreamError> {
    let put = plain::Put {
        addr: ep.addr.clone(),
        token: ep.token.clone(),
        path: path.clone(),
        from,
        size: file.size(),
        segments: Segment::from_offset(&file.segments, from),
    };
    let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
    let pacing = plain::Pacing {
        throttle: opts.throttle.clone(),
        progress: opts.on_progress.clone(),
        metrics: opts.metrics.clone(),
        cancelled: cancel.0.clone(),
    };
    let (answer, stats) = tokio::task::spawn_blocking(move || plain::put(&put, &pacing))
        .await
        .map_err(|e| StreamError::Unreachable(format!("{path}: sending thread: {e}")))??;
    drop(cancel);
    let st = decode(answer.status, answer.retry_after, &answer.body, &path)?;
    Ok((st, stats))
}

/// A body streaming `file` from `from`, read on a blocking thread.
fn file_body(file: &FileSource, from: u64, opts: &SendOptions) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let segments = Segment::from_offset(&file.segments, from);
    let throttle = opts.throttle.clone();
    let progress = opts.on_progress.clone();
    let metrics = opts.metrics.clone();
    tokio::task::spawn_blocking(move || {
        for s in segments {
            match s {
                Segment::Bytes(part) => {
                    let n = part.len() as u64;
                    if let Some(t) = &throttle {
                        t.take_blocking(n);
                    }
                    if tx.blocking_send(Ok(part)).is_err() {
                        return;
                    }
                    progress(n);
                    metrics.bytes.with_label_values(&["send", "sent"]).inc_by(n);
                }
                Segment::File { path, offset, len } => {
                    let f = match File::open(&path) {
                        Ok(f) => f,
                        Err(e) => {
                            let _ = tx.blocking_send(Err(e));
                            return;
                        }
                    };
                    let mut at = offset;
                    let end = offset + len;
                    while at < end {
                        let n = ((end - at) as usize).min(FRAME);
                        let mut buf = vec![0u8; n];
                        if let Err(e) = f.read_exact_at(&mut buf, at) {
                            let _ = tx.blocking_send(Err(e));
                            return;
                        }
                        if let Some(t) = &throttle {
                            t.take_blocking(n as u64);
                        }
                        if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
                            return;
                        }
                        progress(n as u64);
                        metrics
                            .bytes
                            .with_label_values(&["send", "sent"])
                            .inc_by(n as u64);
                        at += n as u64;
                    }
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|r| (r.map(Frame::data), rx))
    });
    BodyExt::boxed(StreamBody::new(stream))
}

async fn attempt(
    ep: &Endpoint,
    child: &ChildSource,
    opts: &SendOptions,
    report: &mut SendReport,
) -> Result<Verdict, StreamError> {
    let id = &child.manifest.transfer;
    let mut conn = connect(ep).await?;
    let st: TransferState = call(
        &mut conn,
        ep,
        Method::PUT,
        &format!("/v1/transfers/{id}"),
        &[("content-type", "application/vnd.cleave.manifest".into())],
        small_body(manifest::encode(&child.manifest)),
    )
    .await?;
    if let Some(v) = st.verdict.filter(|_| st.state == "published") {
        report.replayed = true;
        return Ok(v);
    }
    let mut bypassed = false;
    for f in &child.files {
        let size = f.size();
        let from = st
            .files
            .iter()
            .find(|s| s.component == f.component)
            .map_or(0, |s| s.offset);
        if from >= size {
            continue;
        }
        if from > 0 {
            report.resumed.push((f.component.clone(), from));
            opts.metrics.resumes.with_label_values(&["send"]).inc();
        }
        let sent_before = report.bytes_sent;
        let path = format!("/v1/transfers/{id}/files/{}", f.component);
        let from_file = f.segments.iter().any(|s| matches!(s, Segment::File { .. }));
        if ep.tls.is_none() && from_file {
            let (_, stats) = put_plain(ep, path, f, from, opts).await?;
            report.bytes_zero_copy += stats.zero_copy;
            bypassed = true;
        } else {
            let _: super::FileState = call(
                &mut conn,
                ep,
                Method::PUT,
                &path,
                &[
                    (OFFSET_HEADER, from.to_string()),
                    ("content-length", (size - from).to_string()),
                    ("content-type", "application/octet-stream".into()),
                ],
                file_body(f, from, opts),
            )
            .await?;
        }
        report.bytes_sent = sent_before + (size - from);
    }
    if bypassed {
        // The receiver closes a kept-alive connection idle for its header timeout (30 s):
        // after bodies sent on their own connections, commit on a fresh one.
        conn = connect(ep).await?;
    }
    call(
        &mut conn,
        ep,
        Method::POST,
        &format!("/v1/transfers/{id}/commit"),
        &[],
        small_body(Vec::new()),
    )
    .await
}

/// Sends one child, retrying as the module doc says.
pub async fn send_child(
    ep: &Endpoint,
    child: &ChildSource,
    opts: &SendOptions,
) -> Result<SendReport, StreamError> {
    child.manifest.validate()?;
    for (f, e) in child.files.iter().zip(&child.manifest.files) {
        if f.component != e.component || f.size() != e.size {
            return Err(StreamError::Invalid(format!(
                "source of {} has {} bytes, the manifest declares {} of {}",
                f.component,
                f.size(),
                e.size,
                e.component
            )));
        }
    }
    let mut report = SendReport {
        transfer: child.manifest.transfer.clone(),
        verdict: None,
        bytes_sent: 0,
        bytes_total: child.manifest.total_bytes(),
        bytes_zero_copy: 0,
        resumed: Vec::new(),
        attempts: 0,
        replayed: false,
    };
    let mut failures = 0u32;
    let mut busy = 0u32;
    loop {
        report.attempts += 1;
        let before = report.bytes_sent;
        match attempt(ep, child, opts, &mut report).await {
            Ok(v) => {
                opts.metrics
                    .transfers
                    .with_label_values(&["send", "ok"])
                    .inc();
                report.verdict = Some(v);
                return Ok(report);
            }
            Err(e) => {
                if report.bytes_sent > before {
                    failures = 0;
                }
                let is_busy = matches!(
                    e,
                    StreamError::Remote { status: 429, .. } | StreamError::TooManyTransfers { .. }
                );
                let wait = if is_busy && busy < MAX_BUSY_WAITS {
                    busy += 1;
                    match &e {
                        StreamError::Remote {
                            retry_after_secs: Some(s),
                            ..
                        } => Some(Duration::from_secs(*s)),
                        _ => Some(Duration::from_secs(5)),
                    }
                } else if !is_busy && e.retryable() && failures < opts.retries {
                    let w = opts.backoff.saturating_mul(1 << failures.min(16));
                    failures += 1;
                    Some(w.min(MAX_BACKOFF))
                } else {
                    None
                };
                match wait {
                    Some(w) => {
                        tracing::warn!(
                            transfer = %report.transfer,
                            reason = e.reason().as_str(),
                            "attempt {} failed, retrying in {:?}: {e}",
                            report.attempts,
                            w
                        );
                        tokio::time::sleep(w).await;
                    }
                    None => {
                        opts.metrics
                            .transfers
                            .with_label_values(&["send", e.reason().as_str()])
                            .inc();
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// Cancels a transfer on the receiver (`DELETE /v1/transfers/<id>`): its staging is
/// removed; a child it already published stays (the destination's data now). A receiver
/// that never saw the id answers 404, which is success here: nothing is staged.
/// (Added for the RangeStream reconciler's finalizer, src/operator/stream.rs.)
pub async fn cancel_transfer(ep: &Endpoint, id: &str) -> Result<(), StreamError> {
    manifest::check_id("transfer", id)?;
    let mut conn = connect(ep).await?;
    match call::<serde_json::Value>(
        &mut conn,
        ep,
        Method::DELETE,
        &format!("/v1/transfers/{id}"),
        &[],
        small_body(Vec::new()),
    )
    .await
    {
        Ok(_) | Err(StreamError::Remote { status: 404, .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lens(v: &[Segment]) -> Vec<(char, u64, u64)> {
        v.iter()
            .map(|s| match s {
                Segment::File { offset, len, .. } => ('f', *offset, *len),
                Segment::Bytes(b) => ('b', b[0] as u64, b.len() as u64),
            })
            .collect()
    }

    #[test]
    fn a_resume_point_drops_and_trims_segments() {
        let segs = vec![
            Segment::Bytes(Bytes::from_static(&[0, 1, 2, 3])),
            Segment::File {
                path: PathBuf::from("p"),
                offset: 100,
                len: 10,
            },
            Segment::Bytes(Bytes::from_static(&[14, 15])),
        ];
        assert_eq!(lens(&Segment::from_offset(&segs, 0)), lens(&segs));
        assert_eq!(
            lens(&Segment::from_offset(&segs, 2)),
            vec![('b', 2, 2), ('f', 100, 10), ('b', 14, 2)]
        );
        assert_eq!(
            lens(&Segment::from_offset(&segs, 4)),
            vec![('f', 100, 10), ('b', 14, 2)]
        );
        assert_eq!(
            lens(&Segment::from_offset(&segs, 7)),
            vec![('f', 103, 7), ('b', 14, 2)]
        );
        assert_eq!(lens(&Segment::from_offset(&segs, 15)), vec![('b', 15, 1)]);
        assert!(Segment::from_offset(&segs, 16).is_empty());
    }
}
