//! Serving the receiver on the sidecar's one HTTP server (`crate::http`): the stream port
//! gets its own `Limits` — bodies up to the largest declared Data.db (each file body is
//! bounded again by its manifest entry), no handler deadline (a body may take hours), a
//! 60 s idle cut-off between body frames; connections that have not authenticated a
//! request get 5 s and a budget of 64 of their own (a 65th evicts the oldest), so idle or
//! slow sockets cannot keep an authenticated sender waiting; the server's own errors
//! (hyper's 400/431 for an unparsable head, 413) carry the receiver's JSON error body and
//! `cleave-protocol`. Used by `cleave stream serve` and `cleave run --stream-addr`.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use tokio::net::TcpListener;

use super::manifest::MAX_DATA_BYTES;
use super::receive::parser_error;
use super::receive::Receiver;
use crate::http::{Limits, Request, Server, Unauthenticated};

/// Unauthenticated connections at once (a newer one evicts the oldest).
pub const MAX_UNAUTHENTICATED: usize = 64;
/// From accept to a request whose token (or client certificate) was accepted.
pub const UNAUTHENTICATED_DEADLINE: Duration = Duration::from_secs(5);

pub fn limits() -> Limits {
    Limits {
        max_connections: 64,
        max_body_bytes: MAX_DATA_BYTES,
        handler_timeout: None,
        body_idle_timeout: Duration::from_secs(60),
        header_timeout: Duration::from_secs(30),
        unauthenticated: Some(Unauthenticated {
            max_connections: MAX_UNAUTHENTICATED,
            deadline: UNAUTHENTICATED_DEADLINE,
        }),
        ..Limits::default()
    }
}

/// Serves `receiver` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    receiver: Arc<Receiver>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let handler = move |req: Request| {
        let r = receiver.clone();
        async move {
            r.handle(req)
                .await
                .map(|b| b.map_err(|never| match never {}).boxed())
        }
    };
    let mut server = Server::new(listener, handler)
        .limits(limits())
        .errors(Arc::new(parser_error));
    if let Some(cfg) = tls {
        server = server.tls(tokio_rustls::TlsAcceptor::from(cfg));
    }
    server.serve(shutdown).await
}
