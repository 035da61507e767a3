//! Serving the receiver on the sidecar's one HTTP server (`crate::http`): the stream port
//! gets its own `Limits` — bodies up to the largest declared Data.db (each file body is
//! bounded again by its manifest entry), no handler deadline (a body may take hours), a
//! 60 s idle cut-off between body frames. Used by `cleave stream serve` and
//! `cleave run --stream-addr`.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use tokio::net::TcpListener;

use super::manifest::MAX_DATA_BYTES;
use super::receive::Receiver;
use crate::http::{Limits, Request, Server};

pub fn limits() -> Limits {
    Limits {
        max_connections: 64,
        max_body_bytes: MAX_DATA_BYTES,
        handler_timeout: None,
        body_idle_timeout: Duration::from_secs(60),
        header_timeout: Duration::from_secs(30),
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
    let mut server = Server::new(listener, handler).limits(limits());
    if let Some(cfg) = tls {
        server = server.tls(tokio_rustls::TlsAcceptor::from(cfg));
    }
    server.serve(shutdown).await
}
