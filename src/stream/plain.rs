//! The zero-copy body path on plaintext connections: one `PUT …/files/<component>`
//! request written by hand on a blocking socket, so that the parent's Data.db bytes go
//! from the page cache to the socket with `sendfile(2)` (`crate::io::splice`).
//!
//! hyper owns its connection's socket and only writes bodies from userspace buffers, so
//! the sendfile path cannot run through it. It does not need to: an HTTP/1.1 request with
//! a `Content-Length` is its head followed by exactly that many raw bytes, so a body sent
//! by `sendfile` is byte for byte the request hyper would have written and the protocol
//! (version 1, docs/stream.md) does not change — the receiver cannot tell the two apart.
//! Each such request has its own connection (`connection: close`): the answer is then
//! whatever the receiver writes before closing, read with `httparse` and bounded.
//!
//! What is not a file range (re-encoded boundary chunks, the small components built in
//! memory) is written with `write_all` between the ranges. TLS connections never come
//! here: rustls encrypts in userspace.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::metrics::StreamMetrics;
use super::send::Segment;
use super::StreamError;
use crate::io::splice::{self, send_file_range};
use crate::io::throttle::TokenBucket;

/// The receiver closes a body that stops for 60 s; a send blocked as long is lost too.
const SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// After the last body byte the receiver checks the file's CRC, fsyncs it and its offset
/// file: bounded work, but on a slow disk not instant.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);
/// When a send failed because the receiver closed: how long its answer may take to read.
const LATE_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// An answer is a small JSON document (the receiver's `FileState` or error).
const MAX_ANSWER: usize = 1 << 20;

/// One body request.
pub(super) struct Put {
    pub addr: String,
    pub token: Option<String>,
    /// `/v1/transfers/<id>/files/<component>`.
    pub path: String,
    /// The file's first byte to send (the receiver's durable offset).
    pub from: u64,
    /// The file's size.
    pub size: u64,
    /// The file's segments from `from` on (`Segment::from_offset`).
    pub segments: Vec<Segment>,
}

/// Where a request's body stops: the caller's throttle, progress and cancel.
pub(super) struct Pacing {
    pub throttle: Option<Arc<TokenBucket>>,
    pub progress: Arc<dyn Fn(u64) + Send + Sync>,
    pub metrics: Arc<StreamMetrics>,
    /// Set when the sending future is dropped: the blocking thread stops at the next step.
    pub cancelled: Arc<AtomicBool>,
}

/// The receiver's answer, undecoded.
pub(super) struct Answer {
    pub status: u16,
    pub retry_after: Option<u64>,
    pub body: Vec<u8>,
}

/// Body bytes by how they went out.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct BodyStats {
    /// File ranges sent by `sendfile`.
    pub zero_copy: u64,
    /// Memory segments, and file ranges the kernel would not `sendfile`.
    pub written: u64,
}

fn unreachable(put: &Put, what: impl std::fmt::Display) -> StreamError {
    StreamError::Unreachable(format!("{} on {}: {what}", put.path, put.addr))
}

fn connect(put: &Put) -> Result<TcpStream, StreamError> {
    let addrs = put
        .addr
        .to_socket_addrs()
        .map_err(|e| unreachable(put, format!("resolving: {e}")))?;
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, super::send::CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(unreachable(
        put,
        match last {
            Some(e) => format!("connect: {e}"),
            None => "no address".to_string(),
        },
    ))
}

fn head(put: &Put) -> Result<Vec<u8>, StreamError> {
    let mut h = format!(
        "PUT {} HTTP/1.1\r\nhost: {}\r\n{}: {}\r\ncontent-length: {}\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n",
        put.path,
        put.addr,
        super::OFFSET_HEADER,
        put.from,
        put.size - put.from
    );
    if let Some(t) = &put.token {
        // A header value cannot hold a line break (RFC 9110 5.5); hyper refuses it too.
        if t.bytes().any(|b| b.is_ascii_control()) {
            return Err(StreamError::Invalid(
                "the bearer token contains control characters".into(),
            ));
        }
        h.push_str(&format!("authorization: Bearer {t}\r\n"));
    }
    h.push_str("\r\n");
    Ok(h.into_bytes())
}

/// A socket error is the connection; anything else while sending a file range is the
/// source file (sendfile reports both).
fn is_socket_error(e: &std::io::Error) -> bool {
    splice::is_peer_gone(e)
        || matches!(
            e.kind(),
            std::io::ErrorKind::TimedOut
                | std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::NotConnected
                | std::io::ErrorKind::HostUnreachable
                | std::io::ErrorKind::NetworkUnreachable
        )
}

/// Sends the body of `put` from `put.from`. On a blocking thread.
fn send_body(sock: &mut TcpStream, put: &Put, p: &Pacing) -> Result<BodyStats, BodyFailure> {
    let mut stats = BodyStats::default();
    let sent = p.metrics.bytes.with_label_values(&["send", "sent"]);
    let zero = p.metrics.bytes.with_label_values(&["send", "sendfile"]);
    let pay = |n: u64| -> std::io::Result<()> {
        if p.cancelled.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("transfer cancelled"));
        }
        if let Some(t) = &p.throttle {
            t.take_blocking(n);
        }
        Ok(())
    };
    for s in &put.segments {
        match s {
            Segment::Bytes(part) => {
                pay(part.len() as u64).map_err(BodyFailure::Socket)?;
                sock.write_all(part).map_err(BodyFailure::Socket)?;
                (p.progress)(part.len() as u64);
                sent.inc_by(part.len() as u64);
                stats.written += part.len() as u64;
            }
            Segment::File { path, offset, len } => {
                let f = std::fs::File::open(path)
                    .map_err(|e| BodyFailure::Source(StreamError::io(path.display(), e)))?;
                let mut moved = 0u64;
                let how = send_file_range(sock, &f, *offset, *len, pay, |n| {
                    (p.progress)(n);
                    sent.inc_by(n);
                    moved += n;
                })
                .map_err(|e| {
                    if is_socket_error(&e) || p.cancelled.load(Ordering::Relaxed) {
                        BodyFailure::Socket(e)
                    } else {
                        BodyFailure::Source(StreamError::io(path.display(), e))
                    }
                })?;
                match how {
                    splice::Path::ZeroCopy => {
                        zero.inc_by(moved);
                        stats.zero_copy += moved;
                    }
                    splice::Path::Copied => stats.written += moved,
                }
            }
        }
    }
    Ok(stats)
}

enum BodyFailure {
    /// The connection (or a cancel): the receiver may still have answered.
    Socket(std::io::Error),
    /// Reading the source failed: final for this attempt, nothing to do with the peer.
    Source(StreamError),
}

/// Reads one HTTP/1.1 response: the head, then `content-length` bytes (or up to EOF).
fn read_answer(sock: &mut TcpStream, limit: usize) -> std::io::Result<Answer> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut resp = httparse::Response::new(&mut headers);
        let parsed = resp
            .parse(&buf)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let eof = if let httparse::Status::Complete(head_len) = parsed {
            let find = |name: &str| {
                resp.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .map(str::trim)
            };
            if find("transfer-encoding").is_some() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a chunked answer (the receiver always sends a length)",
                ));
            }
            let status = resp.code.unwrap_or(0);
            let retry_after = find("retry-after").and_then(|v| v.parse().ok());
            let want = find("content-length").and_then(|v| v.parse::<usize>().ok());
            if want.is_some_and(|w| w > limit) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("an answer of more than {limit} bytes"),
                ));
            }
            if let Some(w) = want {
                if buf.len() >= head_len + w {
                    return Ok(Answer {
                        status,
                        retry_after,
                        body: buf[head_len..head_len + w].to_vec(),
                    });
                }
            }
            let n = sock.read(&mut chunk)?;
            if n == 0 {
                if want.is_none() {
                    return Ok(Answer {
                        status,
                        retry_after,
                        body: buf[head_len..].to_vec(),
                    });
                }
                true
            } else {
                buf.extend_from_slice(&chunk[..n]);
                false
            }
        } else {
            let n = sock.read(&mut chunk)?;
            buf.extend_from_slice(&chunk[..n]);
            n == 0
        };
        if eof {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the connection closed after {} bytes of the answer",
                    buf.len()
                ),
            ));
        }
        if buf.len() > limit + 16 * 1024 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("an answer of more than {limit} bytes"),
            ));
        }
    }
}

/// One body request on its own connection; blocking. The receiver's answer is returned
/// whatever its status (the caller decodes it like any other).
pub(super) fn put(put: &Put, p: &Pacing) -> Result<(Answer, BodyStats), StreamError> {
    let mut sock = connect(put)?;
    let _ = sock.set_nodelay(true);
    sock.set_write_timeout(Some(SEND_TIMEOUT))
        .and_then(|_| sock.set_read_timeout(Some(ANSWER_TIMEOUT)))
        .map_err(|e| unreachable(put, e))?;
    let h = head(put)?;
    let body = sock
        .write_all(&h)
        .map_err(BodyFailure::Socket)
        .and_then(|_| send_body(&mut sock, put, p));
    match body {
        Ok(stats) => {
            let a = read_answer(&mut sock, MAX_ANSWER)
                .map_err(|e| unreachable(put, format!("reading the answer: {e}")))?;
            Ok((a, stats))
        }
        Err(BodyFailure::Source(e)) => Err(e),
        Err(BodyFailure::Socket(e)) => {
            // The receiver may have refused the body (an offset conflict, a corrupt chunk,
            // ENOSPC) and closed: its answer is the failure to report, not the broken pipe.
            if splice::is_peer_gone(&e) {
                let _ = sock.set_read_timeout(Some(LATE_ANSWER_TIMEOUT));
                if let Ok(a) = read_answer(&mut sock, MAX_ANSWER) {
                    return Ok((a, BodyStats::default()));
                }
            }
            Err(unreachable(put, format!("sending the body: {e}")))
        }
    }
}
