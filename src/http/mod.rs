//! The one HTTP/1.1 server of cleave (hyper 1 + hyper-util): `/metrics`, `/healthz` and
//! `/readyz` of the sidecar, and the RangeStream receiver on its own port, each a
//! [`Server`] with its own [`Limits`].
//!
//! What every server enforces before a handler runs:
//! * at most `max_connections` connections at once: the accept loop takes a permit before
//!   it accepts, so further clients wait in the kernel's backlog instead of costing memory;
//! * a request head (start line + headers) of at most `max_head_bytes` and `max_headers`
//!   headers, read within `header_timeout` (hyper answers 431 / closes). The same timer runs
//!   while a kept-alive connection waits for its next request, so idle connections close;
//! * a body of at most `max_body_bytes`: a `Content-Length` above it is answered 413 without
//!   reading a byte (and without `100 Continue`), a chunked body is cut off at the limit by
//!   [`Body`], which also fails when no byte arrives for `body_idle_timeout`;
//! * optionally a deadline for the whole handler (`handler_timeout`, 503);
//! * optionally TLS (rustls, [`Server::tls`]); the peer address and the verified client
//!   certificate chain reach the handler as a [`ConnInfo`] request extension.
//!
//! * optionally ([`Limits::unauthenticated`]) connections nobody vouched for yet are kept
//!   apart: each must be marked authenticated by the handler ([`ConnInfo::authenticated`])
//!   within a short deadline or it is closed, and they have a budget of their own in which a
//!   new connection evicts the oldest one, so idle or slow sockets of anyone who can reach
//!   the port cannot hold every connection an authenticated client needs;
//! * optionally ([`Server::errors`]) the answers the server writes itself — hyper's 400/
//!   414/431 for a request it cannot parse, the 413 and 503 above — in the handler's own
//!   error format (the stream receiver's JSON body and `cleave-protocol` header).
//!
//! Accept errors: a per-connection error (`ECONNABORTED`, …) is skipped; any other
//! (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`) is logged and retried after an exponential
//! backoff (5 ms doubling to 1 s, reset by the next success) instead of spinning a core.
//!
//! Shutdown: when the future passed to [`Server::serve`] completes, the listener is
//! closed, every connection finishes its in-flight request and closes (hyper's graceful
//! shutdown), and after `drain_timeout` whatever is left is dropped.

mod body;
mod router;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::{Bytes, Incoming};
use hyper::{header, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

pub use body::{Body, BodyError};
pub use router::{full, streaming, text, Handler, Router};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// What a handler receives.
pub type Request = hyper::Request<Body>;
/// What a handler returns; build it with [`text`], [`full`] or [`streaming`].
pub type Response = hyper::Response<ResponseBody>;
pub type ResponseBody = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// Per-server bounds. `Default` suits small control endpoints (`/metrics`); an upload
/// endpoint raises `max_body_bytes` and drops `handler_timeout`.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub max_head_bytes: usize,
    pub max_headers: usize,
    pub max_body_bytes: u64,
    pub header_timeout: Duration,
    pub body_idle_timeout: Duration,
    pub handler_timeout: Option<Duration>,
    pub drain_timeout: Duration,
    /// Separate treatment of unauthenticated connections (`None`: every connection is
    /// one of `max_connections`, as for `/metrics`).
    pub unauthenticated: Option<Unauthenticated>,
}

/// Bounds of connections until their handler marks them authenticated.
#[derive(Debug, Clone)]
pub struct Unauthenticated {
    /// How many may be open at once; one more evicts the oldest.
    pub max_connections: usize,
    /// From accept to an authenticated request head (the TLS handshake included).
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 64,
            max_head_bytes: 16 * 1024,
            max_headers: 64,
            max_body_bytes: 64 * 1024,
            header_timeout: Duration::from_secs(10),
            body_idle_timeout: Duration::from_secs(30),
            handler_timeout: Some(Duration::from_secs(30)),
            drain_timeout: Duration::from_secs(10),
            unauthenticated: None,
        }
    }
}

/// Facts about the connection a request came on (a request extension).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    /// The client's certificate chain as rustls verified it (empty without TLS or without
    /// client authentication).
    pub client_certs: Vec<CertificateDer<'static>>,
    /// Set by the handler once a request on this connection passed authentication: it
    /// lifts the unauthenticated deadline and budget ([`Limits::unauthenticated`]).
    pub authenticated: Arc<AtomicBool>,
}

impl ConnInfo {
    pub fn mark_authenticated(&self) {
        self.authenticated.store(true, Ordering::Relaxed);
    }
}

/// Builds the server's own error answers: `(status, message)` → extra headers and body.
pub type ErrorFormat =
    Arc<dyn Fn(StatusCode, &str) -> (Vec<(String, String)>, Vec<u8>) + Send + Sync>;

/// A response of the server itself: `errors`' format when set, else plain text.
fn own_error(errors: Option<&ErrorFormat>, status: StatusCode, message: String) -> Response {
    let Some(f) = errors else {
        return text(status, message);
    };
    let (headers, body) = f(status, message.trim_end());
    let mut r = full(status, "application/json", body);
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            header::HeaderName::from_bytes(k.as_bytes()),
            header::HeaderValue::from_str(&v),
        ) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

/// One listening socket, its handler and limits.
pub struct Server<H> {
    listener: TcpListener,
    handler: Arc<H>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    errors: Option<ErrorFormat>,
}

impl<H: Handler> Server<H> {
    pub fn new(listener: TcpListener, handler: H) -> Server<H> {
        Server {
            listener,
            handler: Arc::new(handler),
            limits: Limits::default(),
            tls: None,
            errors: None,
        }
    }

    /// The format of the answers the server writes itself (see the module docs).
    pub fn errors(mut self, f: ErrorFormat) -> Server<H> {
        self.errors = Some(f);
        self
    }

    pub fn limits(mut self, limits: Limits) -> Server<H> {
        self.limits = limits;
        self
    }

    /// Serve TLS: the handshake must finish within `header_timeout`.
    pub fn tls(mut self, acceptor: tokio_rustls::TlsAcceptor) -> Server<H> {
        self.tls = Some(acceptor);
        self
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then drains (see the module docs).
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) {
        let Server {
            listener,
            handler,
            limits,
            tls,
            errors,
        } = self;
        serve_on(listener, handler, limits, tls, errors, shutdown).await
    }
}

/// The accept side, a trait so that the error handling is tested with injected errors.
trait Accept: Send {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&mut self) -> impl Future<Output = std::io::Result<(Self::Io, SocketAddr)>> + Send;
}

impl Accept for TcpListener {
    type Io = TcpStream;
    async fn accept(&mut self) -> std::io::Result<(TcpStream, SocketAddr)> {
        TcpListener::accept(self).await
    }
}

/// Errors of one connection that the next accept does not repeat (accept(2) ERRORS).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED)
            | Some(libc::ECONNRESET)
            | Some(libc::EPROTO)
            | Some(libc::EINTR)
            | Some(libc::EPERM)
    )
}

/// The backoff after the `n`-th consecutive resource error (n >= 1).
fn accept_backoff(n: u32) -> Duration {
    Duration::from_millis(5u64 << n.saturating_sub(1).min(8)).min(Duration::from_secs(1))
}

/// The unauthenticated connections of a server, oldest first: their eviction signals.
#[derive(Default)]
struct Unverified {
    next: AtomicU64,
    open: Mutex<std::collections::VecDeque<(u64, Arc<tokio::sync::Notify>)>>,
}

impl Unverified {
    /// Registers a new connection; when more than `max` are open the oldest is told to
    /// close (its task drops the connection).
    fn admit(&self, max: usize) -> (u64, Arc<tokio::sync::Notify>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let n = Arc::new(tokio::sync::Notify::new());
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.push_back((id, n.clone()));
        while open.len() > max.max(1) {
            if let Some((_, old)) = open.pop_front() {
                // notify_one keeps the permit if the task is not waiting yet.
                old.notify_one();
            }
        }
        (id, n)
    }

    fn leave(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|(i, _)| *i != id);
    }
}

/// What a connection task needs besides its socket.
struct ConnCtx<H> {
    handler: Arc<H>,
    limits: Arc<Limits>,
    errors: Option<ErrorFormat>,
    unverified: Arc<Unverified>,
}

async fn serve_on<A: Accept, H: Handler>(
    mut acceptor: A,
    handler: Arc<H>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    errors: Option<ErrorFormat>,
    shutdown: impl Future<Output = ()> + Send,
) {
    // With a separate budget for unauthenticated connections, the accept loop admits up to
    // both budgets: while fewer than `max_connections` are authenticated a new connection
    // is always accepted (evicting the oldest unauthenticated one if need be), so sockets
    // nobody vouched for never make an authenticated client wait in the backlog.
    let total = limits.max_connections.max(1)
        + limits
            .unauthenticated
            .as_ref()
            .map_or(0, |u| u.max_connections.max(1));
    let permits = Arc::new(tokio::sync::Semaphore::new(total));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut failures = 0u32;
    let limits = Arc::new(limits);
    let unverified = Arc::new(Unverified::default());
    tokio::pin!(shutdown);
    loop {
        while tasks.try_join_next().is_some() {}
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (io, peer) = tokio::select! {
            _ = &mut shutdown => break,
            r = acceptor.accept() => match r {
                Ok(c) => {
                    failures = 0;
                    c
                }
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    failures += 1;
                    let wait = accept_backoff(failures);
                    tracing::warn!(error = %e, retry_in = ?wait, "http: accept failed");
                    tokio::select! {
                        _ = &mut shutdown => break,
                        _ = tokio::time::sleep(wait) => continue,
                    }
                }
            },
        };
        let watcher = graceful.watcher();
        let ctx = ConnCtx {
            handler: handler.clone(),
            limits: limits.clone(),
            errors: errors.clone(),
            unverified: unverified.clone(),
        };
        let tls = tls.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let authenticated = Arc::new(AtomicBool::new(false));
            // Unauthenticated: a deadline and an eviction signal until the handler marks it.
            let guard = ctx.limits.unauthenticated.as_ref().map(|u| {
                let (id, evict) = ctx.unverified.admit(u.max_connections);
                (id, evict, tokio::time::Instant::now() + u.deadline)
            });
            let work = async {
                match tls {
                    None => {
                        let info = ConnInfo {
                            peer,
                            client_certs: Vec::new(),
                            authenticated: authenticated.clone(),
                        };
                        connection(io, info, &ctx, watcher).await
                    }
                    Some(acceptor) => {
                        let hs =
                            tokio::time::timeout(ctx.limits.header_timeout, acceptor.accept(io));
                        match hs.await {
                            Ok(Ok(tls_io)) => {
                                let client_certs = tls_io
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                                    .unwrap_or_default();
                                let info = ConnInfo {
                                    peer,
                                    client_certs,
                                    authenticated: authenticated.clone(),
                                };
                                connection(tls_io, info, &ctx, watcher).await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "http: TLS handshake failed")
                            }
                            Err(_) => tracing::debug!(%peer, "http: TLS handshake timed out"),
                        }
                    }
                }
            };
            let Some((id, evict, deadline)) = guard else {
                return work.await;
            };
            tokio::pin!(work);
            // Until authenticated: closed at the deadline or when a newer unauthenticated
            // connection needs the budget. Once authenticated it leaves the budget.
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                if authenticated.load(Ordering::Relaxed) {
                    ctx.unverified.leave(id);
                    return work.await;
                }
                tokio::select! {
                    _ = &mut work => break,
                    _ = evict.notified() => {
                        if !authenticated.load(Ordering::Relaxed) {
                            tracing::debug!(%peer, "http: unauthenticated connection evicted by a newer one");
                            break;
                        }
                    }
                    _ = tokio::time::sleep_until(deadline) => {
                        if !authenticated.load(Ordering::Relaxed) {
                            tracing::debug!(%peer, "http: no authenticated request within the deadline");
                            break;
                        }
                    }
                    _ = tick.tick() => {}
                }
            }
            ctx.unverified.leave(id);
        });
    }
    drop(acceptor);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(limits.drain_timeout) => {
            tracing::warn!(timeout = ?limits.drain_timeout, "http: connections still open after the drain timeout; closing them");
        }
    }
    tasks.shutdown().await;
}

async fn connection<IO, H>(
    io: IO,
    info: ConnInfo,
    ctx: &ConnCtx<H>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let peer = info.peer;
    let l = ctx.limits.clone();
    let handler = ctx.handler.clone();
    let errors = ctx.errors.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let handler = handler.clone();
        let limits = l.clone();
        let info = info.clone();
        let errors = errors.clone();
        async move {
            Ok::<_, Infallible>(dispatch(&*handler, &limits, errors.as_ref(), info, req).await)
        }
    });
    let limits = &ctx.limits;
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // hyper's minimum read buffer is 8 KiB; the head limit proper is max_header_size.
        .max_buf_size(limits.max_head_bytes.max(8192))
        .max_header_size(limits.max_head_bytes)
        .max_headers(limits.max_headers);
    let io = OwnErrors::new(io, ctx.errors.clone());
    let conn = b.serve_connection(TokioIo::new(io), svc);
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(%peer, error = %e, "http: connection ended with an error");
    }
}

async fn dispatch<H: Handler>(
    handler: &H,
    limits: &Limits,
    errors: Option<&ErrorFormat>,
    info: ConnInfo,
    req: hyper::Request<Incoming>,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes) {
        let mut r = own_error(
            errors,
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "request body of {} bytes exceeds the limit of {} bytes\n",
                declared.unwrap_or(0),
                limits.max_body_bytes
            ),
        );
        r.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        return r;
    }
    let mut req = req.map(|b| Body::incoming(b, limits.max_body_bytes, limits.body_idle_timeout));
    req.extensions_mut().insert(info);
    let fut = handler.call(req);
    match limits.handler_timeout {
        None => fut.await,
        Some(t) => match tokio::time::timeout(t, fut).await {
            Ok(r) => r,
            Err(_) => own_error(
                errors,
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the request did not complete within {t:?}\n"),
            ),
        },
    }
}

/// The connection's socket as hyper sees it. With an [`ErrorFormat`], the answer hyper
/// writes by itself for a request head it cannot parse (a bare `4xx` head with
/// `content-length: 0`, written when no handler response is in progress, after which it
/// closes) is replaced by that format's answer; everything else passes through.
///
/// hyper 1 has no hook for those answers (`on_parse_error` writes a `MessageHead` with no
/// body), hence the rewrite at the byte level. With a format, vectored writes are declared
/// unsupported so that hyper flattens each message head into one buffer, which is what is
/// inspected.
struct OwnErrors<IO> {
    io: IO,
    errors: Option<ErrorFormat>,
    /// A replacement being written: its bytes, how many are out, the length hyper asked.
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<IO> OwnErrors<IO> {
    fn new(io: IO, errors: Option<ErrorFormat>) -> OwnErrors<IO> {
        OwnErrors {
            io,
            errors,
            pending: None,
        }
    }
}

/// The status of hyper's own bodiless error head in `buf`, if it is one.
fn bare_error_head(buf: &[u8]) -> Option<StatusCode> {
    let rest = buf.strip_prefix(b"HTTP/1.1 ")?;
    let code = std::str::from_utf8(rest.get(..3)?)
        .ok()?
        .parse::<u16>()
        .ok()?;
    if !(400..500).contains(&code) {
        return None;
    }
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    if end + 4 != buf.len() {
        return None;
    }
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    // Exactly the headers hyper adds to its automatic answer, nothing a handler sets.
    let only_auto = head.lines().skip(1).all(|l| {
        let n = l.split(':').next().unwrap_or("").to_ascii_lowercase();
        n == "content-length" || n == "date" || n == "connection"
    });
    let empty = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("content-length: 0"));
    (only_auto && empty)
        .then(|| StatusCode::from_u16(code).ok())
        .flatten()
}

fn own_error_bytes(f: &ErrorFormat, status: StatusCode) -> Vec<u8> {
    let message = match status {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "request head too large",
        StatusCode::URI_TOO_LONG => "request target too long",
        _ => "malformed request (start line or headers)",
    };
    let (headers, body) = f(status, message);
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(&body);
    out
}

impl<IO: AsyncRead + Unpin> AsyncRead for OwnErrors<IO> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for OwnErrors<IO> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = &mut *self;
        if this.pending.is_none() {
            if let Some(f) = &this.errors {
                if let Some(status) = bare_error_head(buf) {
                    this.pending = Some((own_error_bytes(f, status), 0, buf.len()));
                }
            }
        }
        let Some((bytes, done, claimed)) = &mut this.pending else {
            return std::pin::Pin::new(&mut this.io).poll_write(cx, buf);
        };
        while *done < bytes.len() {
            match std::pin::Pin::new(&mut this.io).poll_write(cx, &bytes[*done..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(n)) => *done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = *claimed;
        this.pending = None;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        // Only when rewriting: a server without an error format keeps hyper's strategy.
        self.errors.is_none() && self.io.is_write_vectored()
    }
}

#[cfg(test)]
mod tests;
