//! The receiver's listener: TCP, optionally TLS (rustls), HTTP/1.1 (hyper) with header
//! and handshake timeouts and a connection limit. `cleave stream serve` runs it; when the
//! sidecar's one HTTP server module lands, `cleave run --stream-addr` mounts
//! `Receiver::handle` there instead.

use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::receive::Receiver;

/// Open connections at most; further ones wait in the kernel's accept queue.
const MAX_CONNECTIONS: usize = 64;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    receiver: Arc<Receiver>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = tls.map(TlsAcceptor::from);
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => return,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
        };
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => { tracing::warn!("accept: {e}"); continue; }
            },
        };
        let _ = tcp.set_nodelay(true);
        let receiver = receiver.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let svc = service_fn(move |req| {
                let r = receiver.clone();
                async move { Ok::<_, std::convert::Infallible>(r.handle(req).await) }
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(true);
            let result = match acceptor {
                Some(a) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, a.accept(tcp)).await {
                    Ok(Ok(s)) => http.serve_connection(TokioIo::new(s), svc).await,
                    Ok(Err(e)) => {
                        tracing::warn!(%peer, "TLS handshake refused: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::warn!(%peer, "TLS handshake timed out");
                        return;
                    }
                },
                None => http.serve_connection(TokioIo::new(tcp), svc).await,
            };
            if let Err(e) = result {
                tracing::debug!(%peer, "connection: {e}");
            }
        });
    }
}
