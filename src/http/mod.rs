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
use std::sync::Arc;
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
}

/// One listening socket, its handler and limits.
pub struct Server<H> {
    listener: TcpListener,
    handler: Arc<H>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl<H: Handler> Server<H> {
    pub fn new(listener: TcpListener, handler: H) -> Server<H> {
        Server {
            listener,
            handler: Arc::new(handler),
            limits: Limits::default(),
            tls: None,
        }
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
        } = self;
        serve_on(listener, handler, limits, tls, shutdown).await
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

async fn serve_on<A: Accept, H: Handler>(
    mut acceptor: A,
    handler: Arc<H>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut failures = 0u32;
    let limits = Arc::new(limits);
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
        let handler = handler.clone();
        let limits = limits.clone();
        let tls = tls.clone();
        tasks.spawn(async move {
            let _permit = permit;
            match tls {
                None => {
                    let info = ConnInfo {
                        peer,
                        client_certs: Vec::new(),
                    };
                    connection(io, info, handler, limits, watcher).await
                }
                Some(acceptor) => {
                    let hs = tokio::time::timeout(limits.header_timeout, acceptor.accept(io));
                    match hs.await {
                        Ok(Ok(tls_io)) => {
                            let client_certs = tls_io
                                .get_ref()
                                .1
                                .peer_certificates()
                                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect())
                                .unwrap_or_default();
                            let info = ConnInfo { peer, client_certs };
                            connection(tls_io, info, handler, limits, watcher).await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "http: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "http: TLS handshake timed out"),
                    }
                }
            }
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
    handler: Arc<H>,
    limits: Arc<Limits>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Handler,
{
    let peer = info.peer;
    let l = limits.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let handler = handler.clone();
        let limits = l.clone();
        let info = info.clone();
        async move { Ok::<_, Infallible>(dispatch(&*handler, &limits, info, req).await) }
    });
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // hyper's minimum read buffer is 8 KiB; the head limit proper is max_header_size.
        .max_buf_size(limits.max_head_bytes.max(8192))
        .max_header_size(limits.max_head_bytes)
        .max_headers(limits.max_headers);
    let conn = b.serve_connection(TokioIo::new(io), svc);
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(%peer, error = %e, "http: connection ended with an error");
    }
}

async fn dispatch<H: Handler>(
    handler: &H,
    limits: &Limits,
    info: ConnInfo,
    req: hyper::Request<Incoming>,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes) {
        let mut r = text(
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
            Err(_) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the request did not complete within {t:?}\n"),
            ),
        },
    }
}

#[cfg(test)]
mod tests;
