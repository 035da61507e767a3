//! RangeStream: shipping child sstables to another node, verified per chunk, resumable,
//! authenticated. The protocol (HTTP/1.1, version 1) is in docs/stream.md.
//!
//! - `manifest`: the pure, fuzzed codec of what the receiver must know before a byte.
//! - `verify`: per-chunk CRC and whole-file CRC checking of bytes as they arrive (pure).
//! - `receive`: the receiver (staging, resume points, commit: check, publish, verdict).
//! - `listen`: the TCP/TLS accept loop serving the receiver (`cleave stream serve`).
//! - `send`: the sender (manifest, bodies from the parent file, retries, resume).
//! - `plain`: the sender's plaintext body path, file ranges by sendfile (zero-copy).
//! - `tls`: rustls configurations from PEM files.

pub mod listen;
pub mod manifest;
pub mod metrics;
mod plain;
pub mod plan;
pub mod receive;
pub mod send;
pub mod tls;
pub mod verify;

use crate::reason::Reason;

/// Header carrying a file body's starting offset (`PUT …/files/<component>`).
pub const OFFSET_HEADER: &str = "cleave-offset";
/// Header every receiver response carries: the protocol version it speaks.
pub const PROTOCOL_HEADER: &str = "cleave-protocol";

/// Everything that stops a transfer, on either side. The variant decides the HTTP status
/// and the stable reason; the message names the file, field or offset.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Manifest(#[from] manifest::ManifestError),
    /// Bad request other than the manifest: a header, a path, a length.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// Keyspace/table not in `--stream-allow-tables`.
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("request body too large: {0}")]
    TooLarge(String),
    /// State conflict: a resume from the wrong offset, a file before its chunk table, a
    /// commit before every file arrived. `offset` is the receiver's durable offset.
    #[error("{message}")]
    Conflict {
        message: String,
        offset: Option<u64>,
    },
    #[error("too many concurrent transfers ({active}/{limit}); retry after {retry_after_secs} s")]
    TooManyTransfers {
        active: usize,
        limit: usize,
        retry_after_secs: u64,
    },
    #[error("insufficient space: {0}")]
    InsufficientSpace(String),
    /// The manifest names another node than this receiver's `--node` (HTTP 421
    /// Misdirected Request: the request reached a server that is not its destination).
    #[error("wrong destination: {0}")]
    WrongDestination(String),
    /// A chunk CRC, a declared size or the whole-file CRC does not match.
    #[error("corrupt transfer: {0}")]
    Corrupt(String),
    /// The assembled child fails the full sstable check.
    #[error("check failed: {0}")]
    Check(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("import command failed: {0}")]
    Import(String),
    /// Sender side: planning or building a range child of a source sstable failed (the
    /// split engine's reason: CorruptSSTable, InvalidRequest, …).
    #[error(transparent)]
    Source(#[from] crate::split::SplitError),
    /// Sender side: the receiver could not be reached or the connection broke.
    #[error("receiver unreachable: {0}")]
    Unreachable(String),
    /// Sender side: the receiver answered with an error.
    #[error("receiver answered {status} {reason}: {message}")]
    Remote {
        status: u16,
        reason: Reason,
        message: String,
        retry_after_secs: Option<u64>,
        offset: Option<u64>,
    },
}

impl StreamError {
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> StreamError {
        StreamError::Io {
            path: path.to_string(),
            source,
        }
    }

    pub fn reason(&self) -> Reason {
        match self {
            StreamError::Manifest(_)
            | StreamError::Invalid(_)
            | StreamError::NotFound(_)
            | StreamError::Forbidden(_)
            | StreamError::TooLarge(_)
            | StreamError::Conflict { .. } => Reason::InvalidRequest,
            StreamError::Unauthorized(_) => Reason::Unauthorized,
            StreamError::TooManyTransfers { .. } => Reason::TooManyTransfers,
            StreamError::InsufficientSpace(_) => Reason::InsufficientSpace,
            StreamError::WrongDestination(_) => Reason::WrongDestination,
            StreamError::Corrupt(_) => Reason::CorruptSSTable,
            StreamError::Check(_) => Reason::CheckFailed,
            StreamError::Io { source, .. } => Reason::of_io(source),
            StreamError::Import(_) => Reason::ImportFailed,
            StreamError::Source(e) => e.reason(),
            StreamError::Unreachable(_) => Reason::Unreachable,
            StreamError::Remote { reason, .. } => *reason,
        }
    }

    /// The HTTP status the receiver answers with (docs/stream.md "Errors").
    pub fn status(&self) -> u16 {
        match self {
            StreamError::Manifest(_) | StreamError::Invalid(_) => 400,
            StreamError::Unauthorized(_) => 401,
            StreamError::Forbidden(_) => 403,
            StreamError::NotFound(_) => 404,
            StreamError::Conflict { .. } => 409,
            StreamError::TooLarge(_) => 413,
            StreamError::WrongDestination(_) => 421,
            StreamError::Corrupt(_) | StreamError::Check(_) => 422,
            StreamError::TooManyTransfers { .. } => 429,
            StreamError::InsufficientSpace(_) => 507,
            StreamError::Io { source, .. }
                if Reason::of_io(source) == Reason::InsufficientSpace =>
            {
                507
            }
            StreamError::Io { .. } | StreamError::Import(_) | StreamError::Source(_) => 500,
            StreamError::Unreachable(_) => 503,
            StreamError::Remote { status, .. } => *status,
        }
    }

    /// Whether a sender should try again (after a backoff or Retry-After): the network,
    /// the concurrency limit, a resume-offset conflict. Never a refusal or a corruption.
    pub fn retryable(&self) -> bool {
        match self {
            StreamError::Unreachable(_) | StreamError::TooManyTransfers { .. } => true,
            // A 409 with an offset is a resume point to re-read; without one (an id reused
            // with another manifest) retrying cannot help.
            StreamError::Remote {
                status: 409,
                offset,
                ..
            } => offset.is_some(),
            StreamError::Remote { status, .. } => matches!(status, 429 | 500 | 503),
            _ => false,
        }
    }
}

/// The JSON error body of every non-2xx response.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ErrorDetail {
    pub reason: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

/// A reason by its stable name (the wire carries names, never Rust values).
pub fn reason_named(name: &str) -> Option<Reason> {
    Reason::ALL.iter().copied().find(|r| r.as_str() == name)
}

/// The receiver's answer to a commit: what it checked and where the child went.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub transfer: String,
    pub ok: bool,
    /// Files of the published child (Data.db first), absolute paths on the receiver.
    pub published: Vec<String>,
    pub partitions: u64,
    /// The child's key fingerprint as the receiver re-read it: count, XOR and sum of the
    /// Murmur3 of every key (hex), to compare with the sender's.
    pub fingerprint: String,
    /// Digest.crc32 the receiver computed for Data.db.
    pub data_crc32: u32,
    pub chunks_checked: u64,
    pub import: manifest::Import,
    /// The import command's outcome (Import only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import_output: Option<String>,
}

/// What a receiver reports for `GET /v1/transfers/<id>`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TransferState {
    pub transfer: String,
    /// `receiving` or `published`.
    pub state: String,
    pub files: Vec<FileState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FileState {
    pub component: String,
    pub size: u64,
    /// Durable, verified bytes: the sender resumes here.
    pub offset: u64,
}

pub fn fingerprint_string(f: &crate::sstable::fingerprint::Fingerprint) -> String {
    format!("{}:{:016x}:{:016x}", f.count, f.xor, f.sum)
}
