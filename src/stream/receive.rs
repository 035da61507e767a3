//! The receiver: accepts a child sstable's manifest, then its files, checking every chunk
//! as it arrives, records durable resume points, and on commit assembles the child, runs
//! the full sstable check, publishes it per `import` and answers with a verdict.
//!
//! Order of checks for every request (docs/stream.md "Receiver"): authentication, path
//! and manifest validation, the table allow-list, size bounds, free space and the
//! concurrent-transfer limit — all before the first byte is written. Files are created
//! with `openat(O_NOFOLLOW)` under a staging root opened once; names are allow-listed.
//!
//! On disk, under `--stream-staging`:
//! - `transfers/<id>/manifest`: the manifest as received (a replay must match it);
//! - `transfers/<id>/<Component>` and `<Component>.offset` (the verified, fsynced prefix:
//!   u64 offset, u32 CRC32 of that prefix, u32 CRC32 of those 12 bytes);
//! - `transfers/<id>/sstable/`: the assembled child during commit; `publish.json` the
//!   journal of a commit in progress; `verdict.json` once published (kept: it is what makes
//!   a replay publish nothing);
//! - `ready/<keyspace>/<table>/`: children of `import: None`.

use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};

use super::manifest::{self, Import, Manifest};
use super::metrics::StreamMetrics;
use super::verify::{Boundary, Chunking, Verifier};
use super::{
    fingerprint_string, ErrorBody, ErrorDetail, FileState, StreamError, TransferState, Verdict,
    OFFSET_HEADER, PROTOCOL_HEADER,
};
use crate::io::at::{self, Dir};
use crate::split::import_dir::staged_names;
use crate::sstable::checksum::{ChunkChecksums, Digest};
use crate::sstable::compression::CompressionInfo;
use crate::sstable::table::CheckLevel;
use crate::sstable::{Component, Descriptor, SSTable, SSTableId, Toc, Version};

/// Plain files get a resume point every 8 MiB; chunked files at chunk ends.
const PLAIN_STEP: u64 = 8 << 20;
/// A durable checkpoint (fdatasync + offset file) at most every 64 MiB of verified bytes.
const CHECKPOINT_BYTES: u64 = 64 << 20;
/// Received bytes are written and checked in pieces of this size.
const WRITE_BYTES: usize = 1 << 20;

#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    pub staging: PathBuf,
    /// Cassandra data directory (`<data>/<keyspace>/<table>-<id>/`), for Staging/Import.
    pub data_dir: Option<PathBuf>,
    /// Bearer token (the file's content, trimmed); `None` when only mutual TLS authenticates.
    pub token: Option<String>,
    /// `ks.table` or `ks.*`; empty = any table.
    pub allow_tables: Vec<String>,
    pub max_transfers: usize,
    pub min_free_percent: f64,
    /// argv template with `{keyspace}`, `{table}`, `{dir}` (no shell).
    pub import_command: Option<String>,
    pub retry_after_secs: u64,
    /// A transfer without a request for this long gives its slot up (staging is kept).
    pub idle_timeout: Duration,
    /// The Cassandra that reads what is published here: from 5.0.5 (and unknown) a child
    /// must have its first partition at Data.db position 0.
    pub cassandra: crate::sstable::cassandra::TargetCassandra,
    /// This receiver's node (`--node`): a manifest whose `destination` names another node
    /// is refused with 421 WrongDestination before anything is written. `None` (a
    /// standalone `stream serve` without `--node`) accepts any destination.
    pub node: Option<String>,
}

pub struct Receiver {
    cfg: ReceiverConfig,
    /// The staging root, opened once: `ready/…` is reached from it by descriptor.
    root: Dir,
    transfers: Dir,
    transfers_path: PathBuf,
    /// Concurrency slots: transfer id → last request. Held only by a live, unpublished
    /// transfer, from its accepted manifest to its commit, cancel or failure (or idleness).
    slots: Mutex<HashMap<String, Instant>>,
    /// One request at a time per transfer, slot or not (a GET must not read a file a PUT
    /// is writing). An entry nobody holds is dropped at the next lookup.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    commit_lock: tokio::sync::Mutex<()>,
    pub metrics: Arc<StreamMetrics>,
}

type Resp = Response<Full<Bytes>>;

fn json_response(status: u16, v: &impl serde::Serialize) -> Resp {
    let body = serde_json::to_vec(v).unwrap_or_default();
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .header(PROTOCOL_HEADER, manifest::PROTOCOL_VERSION.to_string())
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_default()
}

/// The response for an error: its status, the JSON error body, `Retry-After` on 429,
/// `WWW-Authenticate` on 401.
pub fn error_response(e: &StreamError) -> Resp {
    let offset = match e {
        StreamError::Conflict { offset, .. } => *offset,
        _ => None,
    };
    let body = ErrorBody {
        error: ErrorDetail {
            reason: e.reason().as_str().to_string(),
            message: e.to_string(),
            offset,
        },
    };
    let mut r = json_response(e.status(), &body);
    if let StreamError::TooManyTransfers {
        retry_after_secs, ..
    } = e
    {
        if let Ok(v) = retry_after_secs.to_string().parse() {
            r.headers_mut().insert("retry-after", v);
        }
    }
    if matches!(e, StreamError::Unauthorized(_)) {
        r.headers_mut().insert(
            "www-authenticate",
            hyper::header::HeaderValue::from_static("Bearer realm=\"cleave-stream\""),
        );
    }
    r
}

/// The receiver's form of an answer the HTTP server writes itself (a request head hyper
/// cannot parse: 400, 414, 431; a body above the server's limit: 413): the JSON error body
/// and `cleave-protocol`, like every other answer.
pub fn parser_error(status: hyper::StatusCode, message: &str) -> (Vec<(String, String)>, Vec<u8>) {
    let body = ErrorBody {
        error: ErrorDetail {
            reason: crate::reason::Reason::InvalidRequest.as_str().to_string(),
            message: format!("{} {message}", status.as_u16()),
            offset: None,
        },
    };
    (
        vec![(
            PROTOCOL_HEADER.to_string(),
            manifest::PROTOCOL_VERSION.to_string(),
        )],
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

/// Constant-time comparison: the token check must not leak its prefix through timing.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn io_at(path: &Path) -> impl Fn(std::io::Error) -> StreamError + '_ {
    move |e| StreamError::io(path.display(), e)
}

/// Runs blocking file I/O from a handler (the server runs a multi-threaded runtime).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn read_all(dir: &Dir, name: &str, what: &Path) -> Result<Vec<u8>, StreamError> {
    let mut f = dir.open_read(name).map_err(io_at(&what.join(name)))?;
    let mut v = Vec::new();
    f.read_to_end(&mut v).map_err(io_at(&what.join(name)))?;
    Ok(v)
}

fn exists(dir: &Dir, name: &str) -> bool {
    dir.open_read(name).is_ok()
}

/// Writes `name` atomically: a temporary file, fsync, rename, directory fsync.
fn write_atomic(dir: &Dir, name: &str, bytes: &[u8], what: &Path) -> Result<(), StreamError> {
    let tmp = format!("{name}.tmp");
    let p = what.join(name);
    let mut f = dir.open_rw(&tmp).map_err(io_at(&p))?;
    f.set_len(0).map_err(io_at(&p))?;
    f.write_all(bytes).map_err(io_at(&p))?;
    f.sync_all().map_err(io_at(&p))?;
    dir.rename(&tmp, name).map_err(io_at(&p))?;
    dir.sync().map_err(io_at(what))
}

fn encode_boundary(b: Boundary) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&b.offset.to_be_bytes());
    v.extend_from_slice(&b.crc.to_be_bytes());
    let c = crc32fast::hash(&v);
    v.extend_from_slice(&c.to_be_bytes());
    v
}

fn decode_boundary(v: &[u8]) -> Option<Boundary> {
    if v.len() != 16 || crc32fast::hash(&v[..12]).to_be_bytes() != v[12..16] {
        return None;
    }
    let mut o = [0u8; 8];
    o.copy_from_slice(&v[..8]);
    Some(Boundary {
        offset: u64::from_be_bytes(o),
        crc: u32::from_be_bytes([v[8], v[9], v[10], v[11]]),
    })
}

/// The commit journal: where the assembled child goes, written before the first rename.
///
/// `generation` is the child's generation at the target; `staged_generation` the one its
/// files carry in `transfers/<id>/sstable/`. They differ once a rename into the target met
/// an existing file (another child took the generation while this commit was interrupted):
/// the journal is then rewritten with a fresh `generation`, and since the staged names do
/// not change, that rewrite is the only step and is atomic.
#[derive(serde::Serialize, serde::Deserialize)]
struct Journal {
    target: PathBuf,
    generation: u32,
    /// 0 in journals written before the field existed: the same as `generation`.
    #[serde(default)]
    staged_generation: u32,
    partitions: u64,
    fingerprint: String,
    data_crc32: u32,
    chunks_checked: u64,
}

impl Receiver {
    pub fn new(
        mut cfg: ReceiverConfig,
        metrics: Arc<StreamMetrics>,
    ) -> Result<Receiver, StreamError> {
        fs::create_dir_all(&cfg.staging).map_err(io_at(&cfg.staging))?;
        // Verdicts carry absolute paths.
        cfg.staging = fs::canonicalize(&cfg.staging).map_err(io_at(&cfg.staging))?;
        let transfers_path = cfg.staging.join("transfers");
        fs::create_dir_all(&transfers_path).map_err(io_at(&transfers_path))?;
        fs::create_dir_all(cfg.staging.join("ready")).map_err(io_at(&cfg.staging))?;
        let root = Dir::open(&cfg.staging).map_err(io_at(&cfg.staging))?;
        let transfers = root.open_dir("transfers").map_err(io_at(&transfers_path))?;
        for t in &cfg.allow_tables {
            let ok = t.split_once('.').is_some_and(|(k, tb)| {
                manifest::check_identifier("keyspace", k).is_ok()
                    && (tb == "*" || manifest::check_identifier("table", tb).is_ok())
            });
            if !ok {
                return Err(StreamError::Invalid(format!(
                    "--stream-allow-tables entry {t:?}: expected keyspace.table or keyspace.*"
                )));
            }
        }
        Ok(Receiver {
            cfg,
            root,
            transfers,
            transfers_path,
            slots: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
            commit_lock: tokio::sync::Mutex::new(()),
            metrics,
        })
    }

    /// Serves one request; never fails (errors become their response).
    pub async fn handle<B>(self: &Arc<Self>, req: Request<B>) -> Resp
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
    {
        match self.route(req).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(reason = e.reason().as_str(), "stream request refused: {e}");
                error_response(&e)
            }
        }
    }

    fn authenticate(&self, headers: &hyper::HeaderMap) -> Result<(), StreamError> {
        let Some(token) = &self.cfg.token else {
            // Only mutual TLS authenticates: the handshake already verified the client.
            return Ok(());
        };
        let given = headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| StreamError::Unauthorized("no bearer token".into()))?;
        // Exactly the token: no whitespace is trimmed (the parser already removed the
        // header's own leading and trailing blanks; what is left is part of the value).
        if !ct_eq(given.as_bytes(), token.as_bytes()) {
            return Err(StreamError::Unauthorized("wrong bearer token".into()));
        }
        Ok(())
    }

    async fn route<B>(self: &Arc<Self>, req: Request<B>) -> Result<Resp, StreamError>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
    {
        self.authenticate(req.headers())?;
        // The connection has shown its credentials: the server lifts its unauthenticated
        // deadline and budget (`crate::http::Unauthenticated`).
        if let Some(info) = req.extensions().get::<crate::http::ConnInfo>() {
            info.mark_authenticated();
        }
        let path = req.uri().path().to_string();
        let rest = path
            .strip_prefix("/v1/transfers/")
            .ok_or_else(|| StreamError::NotFound(format!("no resource {path}")))?;
        let segs: Vec<&str> = rest.split('/').collect();
        let id = segs[0].to_string();
        manifest::check_id("transfer", &id)?;
        let method = req.method().clone();
        match (method, segs.as_slice()) {
            (Method::PUT, [_]) => {
                let len = content_length(req.headers());
                if len.is_some_and(|l| l > manifest::MAX_MANIFEST_BYTES as u64) {
                    return Err(StreamError::TooLarge(format!(
                        "manifest of {} bytes, at most {}",
                        len.unwrap_or(0),
                        manifest::MAX_MANIFEST_BYTES
                    )));
                }
                let body = Limited::new(req.into_body(), manifest::MAX_MANIFEST_BYTES)
                    .collect()
                    .await
                    .map_err(|e| StreamError::TooLarge(format!("manifest body: {e}")))?
                    .to_bytes();
                let _g = self.lock(&id).lock_owned().await;
                self.put_manifest(&id, &body)
            }
            (Method::GET, [_]) => {
                let _g = self.lock(&id).lock_owned().await;
                blocking(|| self.state(&id)).map(|s| json_response(200, &s))
            }
            (Method::DELETE, [_]) => {
                let _g = self.lock(&id).lock_owned().await;
                blocking(|| self.cancel(&id))
            }
            (Method::POST, [_, "commit"]) => {
                let _g = self.lock(&id).lock_owned().await;
                let _c = self.commit_lock.lock().await;
                blocking(|| self.commit(&id)).map(|v| json_response(200, &v))
            }
            (Method::PUT, [_, "files", component]) => {
                let component = component.to_string();
                if !manifest::ALLOWED_COMPONENTS.contains(&component.as_str()) {
                    return Err(StreamError::Invalid(format!(
                        "component {component:?} is not an allowed name"
                    )));
                }
                let offset = req
                    .headers()
                    .get(OFFSET_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| {
                        StreamError::Invalid(format!("{OFFSET_HEADER}: expected a decimal offset"))
                    })?;
                let len = content_length(req.headers())
                    .ok_or_else(|| StreamError::Invalid("Content-Length is required".into()))?;
                let _g = self.lock(&id).lock_owned().await;
                // A full disk at any step (a data write, an fsync, an offset file) ends the
                // transfer: its staging is removed so the space comes back at once, and a
                // resend starts over after the free-space pre-check.
                self.put_file(&id, &component, offset, len, req.into_body())
                    .await
                    .map_err(|e| {
                        if e.reason() == crate::reason::Reason::InsufficientSpace {
                            self.fail(&id, e)
                        } else {
                            e
                        }
                    })
            }
            (m, _) => Err(StreamError::NotFound(format!("no resource {m} {path}"))),
        }
    }

    /// The per-transfer lock (no slot: see `take_slot`).
    fn lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = match self.locks.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
            .clone()
    }

    /// Takes (or refreshes) the concurrency slot of `id`: called only once the transfer is
    /// known to be live and unpublished, under its lock, so that a request that ends in a
    /// 404 or 409 never holds one (429 when all are held).
    fn take_slot(&self, id: &str) -> Result<(), StreamError> {
        let mut slots = match self.slots.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        let now = Instant::now();
        if let Some(t) = slots.get_mut(id) {
            *t = now;
            return Ok(());
        }
        let idle = self.cfg.idle_timeout;
        let busy: Vec<String> = {
            let locks = match self.locks.lock() {
                Ok(l) => l,
                Err(p) => p.into_inner(),
            };
            locks
                .iter()
                .filter(|(_, l)| Arc::strong_count(l) > 1)
                .map(|(k, _)| k.clone())
                .collect()
        };
        // An idle transfer gives its slot up (its staging stays for a resume); one with a
        // request in progress (a body that takes hours) never does.
        slots.retain(|k, t| now.duration_since(*t) < idle || busy.contains(k));
        if slots.len() >= self.cfg.max_transfers {
            self.metrics.active.set(slots.len() as i64);
            return Err(StreamError::TooManyTransfers {
                active: slots.len(),
                limit: self.cfg.max_transfers,
                retry_after_secs: self.cfg.retry_after_secs,
            });
        }
        slots.insert(id.to_string(), now);
        self.metrics.active.set(slots.len() as i64);
        Ok(())
    }

    fn release(&self, id: &str) {
        let mut slots = match self.slots.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        slots.remove(id);
        self.metrics.active.set(slots.len() as i64);
    }

    fn dir_path(&self, id: &str) -> PathBuf {
        self.transfers_path.join(id)
    }

    fn open_transfer(&self, id: &str) -> Result<Dir, StreamError> {
        self.transfers
            .open_dir(id)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) => StreamError::NotFound(format!("no transfer {id}")),
                Some(libc::ELOOP) | Some(libc::ENOTDIR) => StreamError::Invalid(format!(
                    "staging entry {} is not a directory (a symlink?)",
                    self.dir_path(id).display()
                )),
                _ => StreamError::io(self.dir_path(id).display(), e),
            })
    }

    /// The stored manifest, `None` when there is no valid one: a crash (or ENOSPC) between
    /// creating `transfers/<id>` and the manifest's rename leaves such a directory, and it
    /// must count as no transfer at all (else the id could never be sent again).
    fn stored_manifest(
        &self,
        id: &str,
        dir: &Dir,
    ) -> Result<Option<(Vec<u8>, Manifest)>, StreamError> {
        let b = match read_all(dir, "manifest", &self.dir_path(id)) {
            Ok(b) => b,
            Err(StreamError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOENT) => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        match manifest::decode(&b) {
            Ok(m) if m.transfer == id => Ok(Some((b, m))),
            _ => Ok(None),
        }
    }

    fn load_manifest(&self, id: &str, dir: &Dir) -> Result<Manifest, StreamError> {
        match self.stored_manifest(id, dir)? {
            Some((_, m)) => Ok(m),
            None => Err(StreamError::NotFound(format!(
                "no transfer {id} (its directory has no valid manifest: send the manifest again)"
            ))),
        }
    }

    fn verdict(&self, id: &str, dir: &Dir) -> Result<Option<Verdict>, StreamError> {
        if !exists(dir, "verdict.json") {
            return Ok(None);
        }
        let b = read_all(dir, "verdict.json", &self.dir_path(id))?;
        serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| StreamError::Invalid(format!("verdict.json of {id}: {e}")))
    }

    fn progress(&self, dir: &Dir, component: &str) -> Boundary {
        let name = format!("{component}.offset");
        let Ok(mut f) = dir.open_read(&name) else {
            return Boundary::default();
        };
        let mut v = Vec::new();
        if f.read_to_end(&mut v).is_err() {
            return Boundary::default();
        }
        // A torn or damaged offset file restarts the file from zero: safe, only slower.
        decode_boundary(&v).unwrap_or_default()
    }

    fn state(&self, id: &str) -> Result<TransferState, StreamError> {
        let dir = self.open_transfer(id)?;
        let m = self.load_manifest(id, &dir)?;
        let verdict = self.verdict(id, &dir)?;
        let files = m
            .files
            .iter()
            .map(|f| FileState {
                component: f.component.clone(),
                size: f.size,
                offset: if verdict.is_some() {
                    f.size
                } else {
                    self.progress(&dir, &f.component).offset
                },
            })
            .collect();
        Ok(TransferState {
            transfer: id.to_string(),
            state: if verdict.is_some() {
                "published"
            } else {
                "receiving"
            }
            .into(),
            files,
            verdict,
        })
    }

    /// Removes a transfer's staging entirely (a refused or corrupt transfer, a cancel).
    fn discard(&self, id: &str, reason: &str) {
        let p = self.dir_path(id);
        if let Err(e) = fs::remove_dir_all(&p) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::error!("cannot remove staging {}: {e}", p.display());
            }
        }
        let _ = self.transfers.sync();
        self.release(id);
        self.metrics
            .transfers
            .with_label_values(&["receive", reason])
            .inc();
    }

    /// `err` fails the whole transfer: staging is removed and the error returned.
    fn fail(&self, id: &str, err: StreamError) -> StreamError {
        tracing::warn!(transfer = id, "transfer failed, staging removed: {err}");
        self.discard(id, err.reason().as_str());
        err
    }

    fn table_allowed(&self, m: &Manifest) -> bool {
        self.cfg.allow_tables.is_empty()
            || self.cfg.allow_tables.iter().any(|t| {
                t.split_once('.')
                    .is_some_and(|(k, tb)| k == m.keyspace && (tb == "*" || tb == m.table))
            })
    }

    /// `<data>/<keyspace>/<table>-<id>` (or `<table>`): exactly one must exist.
    fn table_dir(&self, m: &Manifest) -> Result<PathBuf, StreamError> {
        let data = self.cfg.data_dir.as_ref().ok_or_else(|| {
            StreamError::Invalid(format!(
                "import {:?} needs the receiver's --data-dir",
                m.import
            ))
        })?;
        let ks = data.join(&m.keyspace);
        let rd = fs::read_dir(&ks).map_err(|e| {
            StreamError::NotFound(format!("keyspace directory {}: {e}", ks.display()))
        })?;
        let prefix = format!("{}-", m.table);
        let mut found: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n == m.table.as_str()
                    || n.strip_prefix(&prefix).is_some_and(|id| {
                        id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit())
                    })
            })
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        found.sort();
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(StreamError::NotFound(format!(
                "no directory for table {}.{} under {}",
                m.keyspace,
                m.table,
                ks.display()
            ))),
            _ => Err(StreamError::Invalid(format!(
                "several directories for table {}.{} under {} (a dropped and re-created table?): {:?}",
                m.keyspace,
                m.table,
                ks.display(),
                found
            ))),
        }
    }

    fn target_dir(&self, m: &Manifest) -> Result<(PathBuf, Option<PathBuf>), StreamError> {
        match m.import {
            Import::None => Ok((
                self.cfg
                    .staging
                    .join("ready")
                    .join(&m.keyspace)
                    .join(&m.table),
                None,
            )),
            Import::Staging | Import::Import => {
                let t = self.table_dir(m)?;
                let below = staged_names(&staged_group(m), &m.keyspace, &m.table)
                    .iter()
                    .fold(t.clone(), |p, n| p.join(n));
                Ok((below, Some(t)))
            }
        }
    }

    fn put_manifest(&self, id: &str, body: &[u8]) -> Result<Resp, StreamError> {
        let m = manifest::decode(body)?;
        if let (Some(me), Some(to)) = (&self.cfg.node, &m.destination) {
            if me != to {
                return Err(StreamError::WrongDestination(format!(
                    "manifest destination {to:?}: this receiver is node {me:?} (--node); the sender resolved spec.destination to the wrong receiver"
                )));
            }
        }
        if m.transfer != id {
            return Err(StreamError::Invalid(format!(
                "manifest transfer {:?} differs from the path's {id:?}",
                m.transfer
            )));
        }
        if !self.table_allowed(&m) {
            return Err(StreamError::Forbidden(format!(
                "table {}.{} is not in --stream-allow-tables",
                m.keyspace, m.table
            )));
        }
        if m.import == Import::Import && self.cfg.import_command.is_none() {
            return Err(StreamError::Invalid(
                "import: Import needs the receiver's --stream-import-command".into(),
            ));
        }
        if let (_, Some(table)) = self.target_dir(&m)? {
            let a = crate::io::fs::device_of(&table).map_err(io_at(&table))?;
            let b =
                crate::io::fs::device_of(&self.cfg.staging).map_err(io_at(&self.cfg.staging))?;
            if a != b {
                return Err(StreamError::Invalid(format!(
                    "staging {} is on another filesystem than the table directory {}: children are published by rename",
                    self.cfg.staging.display(),
                    table.display()
                )));
            }
        }
        blocking(|| {
            match self.transfers.open_dir(id) {
                Ok(dir) => match self.stored_manifest(id, &dir)? {
                    Some((stored, stored_m)) => {
                        if stored != body {
                            return Err(StreamError::Conflict {
                                message: format!(
                                    "transfer {id} exists with a different manifest: a transfer id names one child"
                                ),
                                offset: None,
                            });
                        }
                        if self.verdict(id, &dir)?.is_none() {
                            self.take_slot(id)?;
                        } else {
                            // A replay is where a sender learns it is published (it then
                            // sends no commit): clear what a crash after the verdict left.
                            self.clean_published(id, &dir, &stored_m);
                        }
                        return Ok(json_response(200, &self.state(id)?));
                    }
                    None => {
                        // An interrupted accept: nothing in it was acknowledged to anyone.
                        drop(dir);
                        tracing::info!(
                            transfer = id,
                            "staging directory without a valid manifest removed"
                        );
                        let p = self.dir_path(id);
                        fs::remove_dir_all(&p).map_err(io_at(&p))?;
                    }
                },
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(self.fail_open(id, e)),
            }
            self.take_slot(id)?;
            if let Err(e) = self.check_space(&m) {
                self.release(id);
                return Err(e);
            }
            if let Err(e) = self.transfers.create_dir(id) {
                self.release(id);
                return Err(StreamError::io(self.dir_path(id).display(), e));
            }
            // From here a failure removes the directory again (and frees the slot), so that
            // a full disk or an I/O error leaves no half-accepted transfer behind.
            let accept = || -> Result<(), StreamError> {
                self.transfers.sync().map_err(io_at(&self.transfers_path))?;
                crate::io::fault::point("stream-receive:created");
                let dir = self.open_transfer(id)?;
                // A fallible point: tests inject ENOSPC on the manifest's write here.
                crate::io::fault::io_point("stream-receive:manifest-write")
                    .map_err(io_at(&self.dir_path(id).join("manifest")))?;
                write_atomic(&dir, "manifest", body, &self.dir_path(id))?;
                crate::io::fault::point("stream-receive:accepted");
                Ok(())
            };
            if let Err(e) = accept() {
                return Err(self.fail(id, e));
            }
            tracing::info!(
                transfer = id,
                keyspace = m.keyspace,
                table = m.table,
                bytes = m.total_bytes(),
                "transfer accepted"
            );
            Ok(json_response(201, &self.state(id)?))
        })
    }

    fn fail_open(&self, id: &str, e: std::io::Error) -> StreamError {
        match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => StreamError::Invalid(format!(
                "staging entry {} is a symlink or not a directory: refused",
                self.dir_path(id).display()
            )),
            _ => StreamError::io(self.dir_path(id).display(), e),
        }
    }

    /// 507 when accepting the declared bytes would leave less than `--min-free-percent`.
    fn check_space(&self, m: &Manifest) -> Result<(), StreamError> {
        let (avail, total) = at::space(&self.cfg.staging).map_err(io_at(&self.cfg.staging))?;
        let need = m.total_bytes();
        let floor = (total as f64 * self.cfg.min_free_percent / 100.0) as u64;
        if avail < need.saturating_add(floor) {
            return Err(StreamError::InsufficientSpace(format!(
                "{} needs {need} bytes; {} has {avail} of {total} available and keeps {}% ({floor} bytes) free",
                m.transfer,
                self.cfg.staging.display(),
                self.cfg.min_free_percent
            )));
        }
        Ok(())
    }

    fn chunking(
        &self,
        id: &str,
        dir: &Dir,
        m: &Manifest,
        component: &str,
    ) -> Result<Chunking, StreamError> {
        if component != "Data.db" {
            return Ok(Chunking::Plain { step: PLAIN_STEP });
        }
        let table = if m.is_compressed() {
            "CompressionInfo.db"
        } else {
            "CRC.db"
        };
        let entry = m
            .file(table)
            .ok_or_else(|| StreamError::Invalid(format!("{table} missing")))?;
        if self.progress(dir, table).offset != entry.size {
            return Err(StreamError::Conflict {
                message: format!(
                    "Data.db before {table} is complete: its chunks are checked against it"
                ),
                offset: Some(0),
            });
        }
        let path = self.dir_path(id).join(table);
        let bytes = read_all(dir, table, &self.dir_path(id))?;
        let version = Version::parse(&m.version)
            .ok_or_else(|| StreamError::Invalid(format!("version {}", m.version)))?;
        if m.is_compressed() {
            let ci = CompressionInfo::parse(&path, &bytes, version)
                .map_err(|e| StreamError::Corrupt(e.to_string()))?;
            Ok(Chunking::Compressed {
                offsets: ci
                    .offsets
                    .to_vec()
                    .map_err(|e| StreamError::Corrupt(e.to_string()))?,
            })
        } else {
            let c = ChunkChecksums::parse(&path, &bytes)
                .map_err(|e| StreamError::Corrupt(e.to_string()))?;
            Ok(Chunking::Blocks {
                size: c.chunk_size as u64,
                crcs: c.crcs,
            })
        }
    }

    fn checkpoint(
        &self,
        id: &str,
        dir: &Dir,
        file: &fs::File,
        component: &str,
        b: Boundary,
    ) -> Result<(), StreamError> {
        let p = self.dir_path(id).join(component);
        file.sync_data().map_err(io_at(&p))?;
        crate::io::fault::point("stream-receive:checkpoint");
        write_atomic(
            dir,
            &format!("{component}.offset"),
            &encode_boundary(b),
            &self.dir_path(id),
        )
    }

    async fn put_file<B>(
        self: &Arc<Self>,
        id: &str,
        component: &str,
        offset: u64,
        len: u64,
        mut body: B,
    ) -> Result<Resp, StreamError>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + std::fmt::Display,
    {
        let dir = self.open_transfer(id)?;
        let m = self.load_manifest(id, &dir)?;
        if self.verdict(id, &dir)?.is_some() {
            return Err(StreamError::Conflict {
                message: format!("transfer {id} is already published"),
                offset: None,
            });
        }
        // Live and unpublished: this transfer holds (or takes back) a slot.
        self.take_slot(id)?;
        let entry = m
            .file(component)
            .ok_or_else(|| {
                StreamError::NotFound(format!("{component} is not in the manifest of {id}"))
            })?
            .clone();
        let from = self.progress(&dir, component);
        if offset != from.offset {
            return Err(StreamError::Conflict {
                message: format!(
                    "{component} of {id}: body starts at {offset}, the durable offset is {}",
                    from.offset
                ),
                offset: Some(from.offset),
            });
        }
        if len != entry.size - offset {
            return Err(StreamError::Invalid(format!(
                "{component} of {id}: Content-Length {len}, expected {} (size {} - offset {offset})",
                entry.size - offset,
                entry.size
            )));
        }
        // A chunk table that does not parse is as corrupt as a bad chunk: the same failure
        // path (staging removed, slot released), not a 422 that keeps both.
        let chunking = self
            .chunking(id, &dir, &m, component)
            .map_err(|e| match e {
                StreamError::Corrupt(_) => self.fail(id, e),
                e => e,
            })?;
        let path = self.dir_path(id).join(component);
        let file = match dir.open_rw(component) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(self.fail(
                    id,
                    StreamError::Invalid(format!(
                        "{} is a symlink: refused (staging entries are never followed)",
                        path.display()
                    )),
                ))
            }
            Err(e) => return Err(StreamError::io(path.display(), e)),
        };
        blocking(|| file.set_len(offset)).map_err(io_at(&path))?;
        let mut v = Verifier::new(chunking, entry.size, from)
            .map_err(|e| self.fail(id, StreamError::Corrupt(format!("{component}: {e}"))))?;
        if offset > 0 {
            self.metrics.resumes.with_label_values(&["receive"]).inc();
            tracing::info!(transfer = id, component, offset, "resuming");
        }
        let mut last_checkpoint = from.offset;
        let mut checked = 0;
        let received = self
            .metrics
            .bytes
            .with_label_values(&["receive", "received"]);
        let chunks = self.metrics.chunks_checked.with_label_values(&["receive"]);
        // hyper hands over whatever one socket read gave (often 16 KiB); writing, checking
        // and leaving the async worker per 1 MiB instead keeps the receiver off the CPU.
        let mut buf: Vec<u8> = Vec::with_capacity(WRITE_BYTES);
        let mut broken = None;
        loop {
            let frame = match body.frame().await {
                None => None,
                Some(Ok(f)) => f.into_data().ok(),
                Some(Err(e)) => {
                    broken = Some(e.to_string());
                    None
                }
            };
            let end = frame.is_none();
            if let Some(data) = frame {
                buf.extend_from_slice(&data);
            }
            if buf.len() < WRITE_BYTES && !end {
                continue;
            }
            if !buf.is_empty() {
                let at = v.position();
                blocking(|| file.write_all_at(&buf, at)).map_err(io_at(&path))?;
                v.feed(&buf).map_err(|e| {
                    self.fail(id, StreamError::Corrupt(format!("{}: {e}", path.display())))
                })?;
                received.inc_by(buf.len() as u64);
                let c = v.chunks_checked();
                chunks.inc_by(c - checked);
                checked = c;
                buf.clear();
                let b = v.boundary();
                if b.offset - last_checkpoint >= CHECKPOINT_BYTES && !end {
                    blocking(|| self.checkpoint(id, &dir, &file, component, b))?;
                    last_checkpoint = b.offset;
                }
            }
            if end {
                break;
            }
        }
        if let Some(e) = broken {
            // The connection broke: keep the verified prefix, durable.
            let b = v.boundary();
            blocking(|| -> Result<(), StreamError> {
                self.checkpoint(id, &dir, &file, component, b)?;
                file.set_len(b.offset).map_err(io_at(&path))
            })?;
            tracing::info!(
                transfer = id,
                component,
                offset = b.offset,
                "body broken, durable offset kept: {e}"
            );
            return Err(StreamError::Unreachable(format!("{component} body: {e}")));
        }
        if v.position() != entry.size {
            let b = v.boundary();
            blocking(|| -> Result<(), StreamError> {
                self.checkpoint(id, &dir, &file, component, b)?;
                file.set_len(b.offset).map_err(io_at(&path))
            })?;
            return Err(StreamError::Invalid(format!(
                "{component} body ended at {} of {} bytes",
                v.position(),
                entry.size
            )));
        }
        let crc = v
            .finish(entry.crc32)
            .map_err(|e| self.fail(id, StreamError::Corrupt(format!("{}: {e}", path.display()))))?;
        blocking(|| -> Result<(), StreamError> {
            file.sync_all().map_err(io_at(&path))?;
            crate::io::fault::point("stream-receive:file-synced");
            write_atomic(
                &dir,
                &format!("{component}.offset"),
                &encode_boundary(Boundary {
                    offset: entry.size,
                    crc,
                }),
                &self.dir_path(id),
            )
        })?;
        crate::io::fault::point("stream-receive:file-done");
        self.metrics
            .bytes
            .with_label_values(&["receive", "verified"])
            .inc_by(entry.size - offset);
        Ok(json_response(
            200,
            &FileState {
                component: component.to_string(),
                size: entry.size,
                offset: entry.size,
            },
        ))
    }

    fn cancel(&self, id: &str) -> Result<Resp, StreamError> {
        let dir = self.open_transfer(id)?;
        if let Some(v) = self.verdict(id, &dir)? {
            // Published children are the destination's data now; cancel keeps them.
            self.release(id);
            return Ok(json_response(200, &v));
        }
        self.discard(id, "Cancelled");
        Ok(json_response(
            200,
            &serde_json::json!({"transfer": id, "state": "cancelled"}),
        ))
    }

    fn commit(&self, id: &str) -> Result<Verdict, StreamError> {
        let dir = self.open_transfer(id)?;
        let m = self.load_manifest(id, &dir)?;
        if let Some(v) = self.verdict(id, &dir)? {
            // A crash after the verdict may have left the rest of the staging behind.
            self.release(id);
            self.clean_published(id, &dir, &m);
            return Ok(v);
        }
        self.take_slot(id)?;
        let tdir = self.dir_path(id);
        let mut journal: Journal = if exists(&dir, "publish.json") {
            let b = read_all(&dir, "publish.json", &tdir)?;
            serde_json::from_slice(&b)
                .map_err(|e| StreamError::Invalid(format!("publish.json of {id}: {e}")))?
        } else {
            for f in &m.files {
                let p = self.progress(&dir, &f.component);
                if p.offset != f.size {
                    return Err(StreamError::Conflict {
                        message: format!(
                            "commit of {id} before {} is complete ({} of {} bytes)",
                            f.component, p.offset, f.size
                        ),
                        offset: Some(p.offset),
                    });
                }
            }
            match self.assemble(id, &dir, &m) {
                Ok(j) => j,
                Err(e) => return Err(self.fail(id, e)),
            }
        };
        if journal.staged_generation == 0 {
            journal.staged_generation = journal.generation;
        }
        let version = Version::parse(&m.version)
            .ok_or_else(|| StreamError::Invalid(format!("version {}", m.version)))?;
        let desc = |generation: u32, dir: PathBuf| Descriptor {
            dir,
            version,
            id: SSTableId::Sequence(generation),
            format: m.format.format(),
        };
        let (target, table) = self.target_dir(&m)?;
        if target != journal.target {
            return Err(StreamError::Check(format!(
                "the journal of {id} publishes into {}, the table's directory is now {}",
                journal.target.display(),
                target.display()
            )));
        }
        let sdir_path = tdir.join("sstable");
        let sdir = dir.open_dir("sstable").map_err(io_at(&sdir_path))?;
        let tgt = self.open_target(&m, true)?;
        // Move the checked child into place, TOC last (Cassandra ignores an sstable
        // without TOC); a crash here is finished by the next commit from the journal.
        let mut components: Vec<Component> = m
            .files
            .iter()
            .map(|f| Component::parse(&f.component))
            .collect();
        components.push(Component::Digest);
        components.push(Component::Toc);
        let mut attempts = 0;
        let published = 'publish: loop {
            let staged = desc(journal.staged_generation, sdir_path.clone());
            let fin = desc(journal.generation, target.clone());
            let mut published = Vec::new();
            // Files of this child already at the target. A file leaves `sstable/` only by
            // the rename below, so one missing there and present at the target is ours.
            let mut ours: Vec<(String, String)> = Vec::new();
            for c in &components {
                let from = staged.file_name(c);
                let to = fin.file_name(c);
                let at_target = fin.path(c);
                if sdir.contains(&from).map_err(io_at(&staged.path(c)))? {
                    match sdir.rename_noreplace(&from, &tgt, &to) {
                        Ok(()) => crate::io::fault::point("stream-receive:renamed"),
                        Err(e)
                            if e.raw_os_error() == Some(libc::EEXIST)
                                && sdir.same_file(&from, &tgt, &to).unwrap_or(false) =>
                        {
                            // A link whose unlink a crash interrupted (the fallback of
                            // filesystems without RENAME_NOREPLACE): it is ours already.
                            sdir.remove_file(&from).map_err(io_at(&staged.path(c)))?;
                        }
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                            // Another child has this name: the generation was taken while
                            // this commit was interrupted. Never replace it: take back what
                            // of ours is there, choose a free generation, journal it, redo.
                            attempts += 1;
                            if attempts > 16 {
                                return Err(StreamError::Check(format!(
                                    "{} exists at the target; no free generation after {attempts} tries",
                                    at_target.display()
                                )));
                            }
                            for (f, t) in &ours {
                                tgt.rename_noreplace(t, &sdir, f)
                                    .map_err(io_at(&target.join(t)))?;
                            }
                            tgt.sync().map_err(io_at(&target))?;
                            sdir.sync().map_err(io_at(&sdir_path))?;
                            let g =
                                self.choose_generation(id, &target, table.as_deref(), &sdir_path)?;
                            tracing::warn!(
                                transfer = id,
                                taken = journal.generation,
                                generation = g,
                                "{} exists: publishing under a new generation",
                                at_target.display()
                            );
                            journal.generation = g;
                            let jb = serde_json::to_vec(&journal).unwrap_or_default();
                            write_atomic(&dir, "publish.json", &jb, &tdir)?;
                            crate::io::fault::point("stream-receive:rechosen");
                            continue 'publish;
                        }
                        Err(e) => return Err(StreamError::io(at_target.display(), e)),
                    }
                } else if !tgt.contains(&to).map_err(io_at(&at_target))? {
                    return Err(StreamError::Check(format!(
                        "{from} is neither in staging nor at {}",
                        at_target.display()
                    )));
                }
                ours.push((from, to));
                if *c == Component::Data {
                    published.insert(0, at_target.display().to_string());
                } else {
                    published.push(at_target.display().to_string());
                }
            }
            break published;
        };
        tgt.sync().map_err(io_at(&target))?;
        crate::io::fault::point("stream-receive:published");
        // Re-open where Cassandra will read it.
        let data = desc(journal.generation, target.clone()).path(&Component::Data);
        SSTable::open(&data)
            .and_then(|t| t.check(CheckLevel::Index, &mut |_| {}))
            .map_err(|e| StreamError::Check(format!("published child {}: {e}", data.display())))?;
        let import_output = if m.import == Import::Import {
            Some(self.run_import(&m, &target)?)
        } else {
            None
        };
        let verdict = Verdict {
            transfer: id.to_string(),
            ok: true,
            published,
            partitions: journal.partitions,
            fingerprint: journal.fingerprint.clone(),
            data_crc32: journal.data_crc32,
            chunks_checked: journal.chunks_checked,
            import: m.import,
            import_output,
        };
        let vb = serde_json::to_vec(&verdict).unwrap_or_default();
        write_atomic(&dir, "verdict.json", &vb, &tdir)?;
        crate::io::fault::point("stream-receive:verdict");
        self.clean_published(id, &dir, &m);
        self.release(id);
        self.metrics
            .transfers
            .with_label_values(&["receive", "ok"])
            .inc();
        tracing::info!(transfer = id, target = %target.display(), "child published");
        Ok(verdict)
    }

    /// Only the manifest and the verdict stay once published: they make a replay a no-op.
    fn clean_published(&self, id: &str, dir: &Dir, m: &Manifest) {
        for f in &m.files {
            let _ = dir.remove_file(&format!("{}.offset", f.component));
            let _ = dir.remove_file(&format!("{}.offset.tmp", f.component));
        }
        // std's remove_dir_all does not follow symlinks (it removes the link itself).
        let _ = fs::remove_dir_all(self.dir_path(id).join("sstable"));
        let _ = dir.remove_file("publish.json");
        let _ = dir.remove_file("publish.json.tmp");
    }

    /// Opens (creating with `create`) the directory a child of `m` is published into, each
    /// level by descriptor and never through a symlink: `ready/<ks>/<table>` below the
    /// staging root, `<ks>/<table dir>/cleave-staged/<group>[/<transfer>]/<ks>/<table>` below the data
    /// directory. A symlink anywhere is refused (400), so nothing lands outside.
    fn open_target(&self, m: &Manifest, create: bool) -> Result<Dir, StreamError> {
        let (path, table) = self.target_dir(m)?;
        let refuse = |e: std::io::Error| {
            match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => StreamError::Invalid(format!(
                "a component of {} is a symlink or not a directory: refused (publish paths are never followed)",
                path.display()
            )),
            _ => StreamError::io(path.display(), e),
        }
        };
        match (&table, &self.cfg.data_dir) {
            (None, _) => self
                .root
                .walk(&["ready", &m.keyspace, &m.table], create)
                .map_err(refuse),
            (Some(t), Some(data)) => {
                let tname = t
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let names: Vec<&str> = vec![&m.keyspace, &tname];
                let base = Dir::open_configured(data).map_err(io_at(data))?;
                let t = base.walk(&names, false).map_err(refuse)?;
                let group = staged_group(m);
                let names = staged_names(&group, &m.keyspace, &m.table);
                t.walk(&names, create).map_err(refuse)
            }
            (Some(_), None) => Err(StreamError::Invalid(format!(
                "import {:?} needs the receiver's --data-dir",
                m.import
            ))),
        }
    }

    /// The highest generation a commit journal of any other transfer holds. A journal
    /// lives from before a child's first rename until after its last, so with the target
    /// directories (scanned by `next_generations`) it covers every generation in use: a
    /// commit interrupted between its journal and its renames keeps its generation.
    fn journaled_generations(&self, except: &str) -> u32 {
        let Ok(rd) = fs::read_dir(&self.transfers_path) else {
            return 0;
        };
        let mut max = 0;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == except {
                continue;
            }
            let Ok(d) = self.transfers.open_dir(&name) else {
                continue;
            };
            let Ok(b) = read_all(&d, "publish.json", &self.dir_path(&name)) else {
                continue;
            };
            if let Ok(j) = serde_json::from_slice::<Journal>(&b) {
                max = max.max(j.generation).max(j.staged_generation);
            }
        }
        max
    }

    /// A generation free at the target and the table directory, and in no other journal.
    /// Commits are serialised (`commit_lock`), so nothing takes it between here and the
    /// journal that records it.
    fn choose_generation(
        &self,
        id: &str,
        target: &Path,
        table: Option<&Path>,
        sdir: &Path,
    ) -> Result<u32, StreamError> {
        let mut dirs: Vec<&Path> = vec![target, sdir];
        if let Some(t) = table {
            dirs.push(t);
        }
        let scanned = crate::split::publish::next_generations(&dirs, 1)
            .map_err(|e| StreamError::Check(e.to_string()))?
            .first()
            .copied()
            .unwrap_or(1);
        let journaled = self.journaled_generations(id);
        journaled
            .checked_add(1)
            .map(|j| j.max(scanned))
            .filter(|g| *g <= i32::MAX as u32)
            .ok_or_else(|| StreamError::Check("no free sequence generation below 2^31".into()))
    }

    /// Undoes an assemble a crash interrupted before its journal: received files go back
    /// to their received names, what assemble wrote itself (Digest, TOC) is removed.
    fn unstage(&self, id: &str, dir: &Dir, sdir: &Dir, m: &Manifest) -> Result<(), StreamError> {
        let sp = self.dir_path(id).join("sstable");
        let rd = fs::read_dir(&sp).map_err(io_at(&sp))?;
        for e in rd {
            let e = e.map_err(io_at(&sp))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let received = Descriptor::from_path(&e.path())
                .ok()
                .map(|(_, c)| c.file_name().to_string())
                .filter(|c| m.file(c).is_some());
            match received {
                Some(c) => {
                    // The staged copy is the one that was complete and verified; anything
                    // under the received name was written after it.
                    dir.remove_file(&c).map_err(io_at(&sp))?;
                    sdir.rename_noreplace(&name, dir, &c)
                        .map_err(io_at(&sp.join(&name)))?;
                }
                _ => sdir.remove_file(&name).map_err(io_at(&sp.join(&name)))?,
            }
        }
        dir.sync().map_err(io_at(&self.dir_path(id)))
    }

    /// Names the received files as an sstable, writes Digest.crc32 and TOC.txt, runs the
    /// full check and writes the commit journal.
    fn assemble(&self, id: &str, dir: &Dir, m: &Manifest) -> Result<Journal, StreamError> {
        let tdir = self.dir_path(id);
        let (target, table) = self.target_dir(m)?;
        // Created now (and refused if a symlink is on the way) so that the scan below sees
        // it and the renames of the commit cannot fail for a missing directory.
        let tgt = self.open_target(m, true)?;
        drop(tgt);
        let sdir_path = tdir.join("sstable");
        let sdir = dir.create_open_dir("sstable").map_err(|e| {
            if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR)) {
                StreamError::Invalid(format!(
                    "{} is a symlink or not a directory: refused",
                    sdir_path.display()
                ))
            } else {
                StreamError::io(sdir_path.display(), e)
            }
        })?;
        self.unstage(id, dir, &sdir, m)?;
        let generation = self.choose_generation(id, &target, table.as_deref(), &sdir_path)?;
        let desc = Descriptor {
            dir: sdir_path.clone(),
            version: Version::parse(&m.version)
                .ok_or_else(|| StreamError::Invalid(format!("version {}", m.version)))?,
            id: SSTableId::Sequence(generation),
            format: m.format.format(),
        };
        let mut toc = Vec::new();
        for f in &m.files {
            let c = Component::parse(&f.component);
            if f.size == 0 && !exists(dir, &f.component) {
                // An empty component (a BTI Rows.db when no partition has a row index)
                // gets no byte on the wire, so no PUT ever created it.
                let p = desc.path(&c);
                let file = sdir.create_new(&desc.file_name(&c)).map_err(io_at(&p))?;
                file.sync_all().map_err(io_at(&p))?;
            } else {
                dir.rename_noreplace(&f.component, &sdir, &desc.file_name(&c))
                    .map_err(io_at(&desc.path(&c)))?;
            }
            toc.push(c);
        }
        let data_crc32 = self.progress(dir, "Data.db").crc;
        let write = |c: &Component, b: &[u8]| -> Result<(), StreamError> {
            let p = desc.path(c);
            let mut f = sdir.create_new(&desc.file_name(c)).map_err(io_at(&p))?;
            f.write_all(b).map_err(io_at(&p))?;
            f.sync_all().map_err(io_at(&p))
        };
        write(
            &Component::Digest,
            &Digest { crc32: data_crc32 }.serialize(),
        )?;
        toc.push(Component::Digest);
        toc.push(Component::Toc);
        write(&Component::Toc, &Toc { components: toc }.serialize())?;
        sdir.sync().map_err(io_at(&sdir_path))?;
        crate::io::fault::point("stream-receive:assembled");
        let data = desc.path(&Component::Data);
        let t = SSTable::open(&data)
            .map_err(|e| StreamError::Check(format!("received child does not open: {e}")))?;
        let rep = t
            .check(CheckLevel::Full, &mut |_| {})
            .map_err(|e| StreamError::Check(format!("received child fails the full check: {e}")))?;
        // Cassandra 5.0.5+ compaction reads Data.db from position 0 (CASSANDRA-20092).
        if self.cfg.cassandra.scans_data_from_zero() && rep.first_position.unwrap_or(0) != 0 {
            return Err(StreamError::Check(format!(
                "received child's first partition is at Data.db position {}, not 0: Cassandra {} compacts Data.db from position 0 and would misread it (send with --target-cassandra / spec.targetCassandra for this node)",
                rep.first_position.unwrap_or(0),
                self.cfg.cassandra
            )));
        }
        let j = Journal {
            target,
            generation,
            staged_generation: generation,
            partitions: rep.partitions,
            fingerprint: fingerprint_string(&rep.fingerprint),
            data_crc32,
            chunks_checked: rep.chunks_checked,
        };
        let jb = serde_json::to_vec(&j).unwrap_or_default();
        write_atomic(dir, "publish.json", &jb, &tdir)?;
        // The window of issue 22's data loss: the generation is journaled, nothing is at
        // the target yet.
        crate::io::fault::point("stream-receive:journaled");
        Ok(j)
    }

    fn run_import(&self, m: &Manifest, dir: &Path) -> Result<String, StreamError> {
        let template = self.cfg.import_command.as_deref().unwrap_or_default();
        let argv: Vec<String> = template
            .split_whitespace()
            .map(|a| {
                a.replace("{keyspace}", &m.keyspace)
                    .replace("{table}", &m.table)
                    .replace("{dir}", &dir.display().to_string())
            })
            .collect();
        let Some((prog, args)) = argv.split_first() else {
            return Err(StreamError::Import("empty --stream-import-command".into()));
        };
        let out = std::process::Command::new(prog)
            .args(args)
            .output()
            .map_err(|e| StreamError::Import(format!("{prog}: {e}")))?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        text.truncate(4096);
        if !out.status.success() {
            return Err(StreamError::Import(format!(
                "{} exited with {}: {}",
                argv.join(" "),
                out.status,
                text.trim()
            )));
        }
        Ok(text.trim().to_string())
    }
}

/// The group's names between `cleave-staged` and `<keyspace>/<table>`: the group, and for
/// `Import` the transfer (each transfer's child imported from its own directory).
fn staged_group(m: &Manifest) -> Vec<&str> {
    let mut g = vec![m.group.as_str()];
    if m.import == Import::Import {
        g.push(&m.transfer);
    }
    g
}

fn content_length(h: &hyper::HeaderMap) -> Option<u64> {
    h.get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_files_round_trip_and_refuse_damage() {
        let b = Boundary {
            offset: 1 << 40,
            crc: 0xdead_beef,
        };
        let e = encode_boundary(b);
        assert_eq!(decode_boundary(&e), Some(b));
        for i in 0..e.len() {
            let mut d = e.clone();
            d[i] ^= 1;
            assert_eq!(decode_boundary(&d), None);
        }
        assert_eq!(decode_boundary(&e[..15]), None);
    }

    #[test]
    fn token_comparison() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
    }
}
