//! The server over real loopback sockets, raw HTTP/1.1 written by hand so that every bound
//! is exercised as a misbehaving client would.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn router() -> Router {
    Router::new()
        .get("/metrics", |_r: Request| async {
            text(StatusCode::OK, "cleave_up 1\n")
        })
        .get("/slow", |_r: Request| async {
            tokio::time::sleep(Duration::from_millis(400)).await;
            text(StatusCode::OK, "slow done\n")
        })
        .post("/upload", |r: Request| async move {
            match r.into_body().collect().await {
                Ok(b) => text(StatusCode::OK, format!("{} bytes\n", b.to_bytes().len())),
                Err(BodyError::TooLarge { .. }) => text(StatusCode::PAYLOAD_TOO_LARGE, "big\n"),
                Err(BodyError::Idle(_)) => text(StatusCode::REQUEST_TIMEOUT, "idle\n"),
                Err(e) => text(StatusCode::BAD_REQUEST, e.to_string()),
            }
        })
}

struct Running {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

async fn start(limits: Limits) -> Running {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = Server::new(l, router()).limits(limits);
    let addr = server.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(server.serve(async move {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        done,
    }
}

/// Writes `raw`, reads until the peer closes (or `wait` passes); the response text.
async fn exchange(addr: SocketAddr, raw: &[u8], wait: Duration) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).to_string()
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn query_strings_methods_and_unknown_paths() {
    let srv = start(Limits::default()).await;
    let r = exchange(srv.addr, &get("/metrics?x=1"), Duration::from_secs(5)).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.ends_with("cleave_up 1\n"), "{r}");
    let r = exchange(
        srv.addr,
        b"DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 405"), "{r}");
    assert!(r.to_ascii_lowercase().contains("allow: get, head"), "{r}");
    let r = exchange(srv.addr, &get("/nope"), Duration::from_secs(5)).await;
    assert!(r.starts_with("HTTP/1.1 404"), "{r}");
}

#[tokio::test]
async fn a_head_over_the_limit_is_431() {
    let srv = start(Limits {
        max_head_bytes: 8192,
        ..Limits::default()
    })
    .await;
    let raw = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let r = exchange(srv.addr, raw.as_bytes(), Duration::from_secs(5)).await;
    assert!(r.starts_with("HTTP/1.1 431"), "{r}");
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused_declared_or_chunked() {
    let srv = start(Limits {
        max_body_bytes: 100,
        ..Limits::default()
    })
    .await;
    // Declared: refused before the handler runs, without reading the body.
    let r = exchange(
        srv.addr,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 413"), "{r}");
    assert!(r.contains("exceeds the limit of 100 bytes"), "{r}");
    // Chunked: cut off at the limit while the handler reads.
    let chunk = "a".repeat(80);
    let raw = format!(
        "POST /upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n50\r\n{chunk}\r\n50\r\n{chunk}\r\n0\r\n\r\n"
    );
    let r = exchange(srv.addr, raw.as_bytes(), Duration::from_secs(5)).await;
    assert!(r.starts_with("HTTP/1.1 413"), "{r}");
    // Within the limit: read whole.
    let raw = format!(
        "POST /upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 80\r\n\r\n{chunk}"
    );
    let r = exchange(srv.addr, raw.as_bytes(), Duration::from_secs(5)).await;
    assert!(
        r.starts_with("HTTP/1.1 200") && r.ends_with("80 bytes\n"),
        "{r}"
    );
}

#[tokio::test]
async fn slow_heads_and_stalled_bodies_are_cut_off() {
    let srv = start(Limits {
        header_timeout: Duration::from_millis(300),
        body_idle_timeout: Duration::from_millis(300),
        ..Limits::default()
    })
    .await;
    let t = Instant::now();
    let r = exchange(
        srv.addr,
        b"GET /metrics HTTP/1.1\r\nHo",
        Duration::from_secs(5),
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(!r.starts_with("HTTP/1.1 200"), "{r}");
    let r = exchange(
        srv.addr,
        b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab",
        Duration::from_secs(5),
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 408"), "{r}");
}

#[tokio::test]
async fn connections_beyond_the_limit_wait_until_one_closes() {
    let srv = start(Limits {
        max_connections: 1,
        ..Limits::default()
    })
    .await;
    let hog = TcpStream::connect(srv.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(&get("/metrics")).await.unwrap();
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "the second connection must not be served yet"
    );
    drop(hog);
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    assert!(out.starts_with(b"HTTP/1.1 200"));
}

#[tokio::test]
async fn shutdown_finishes_the_request_in_flight_then_stops_listening() {
    let mut srv = start(Limits::default()).await;
    let addr = srv.addr;
    let inflight =
        tokio::spawn(async move { exchange(addr, &get("/slow"), Duration::from_secs(5)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = srv.stop.take().unwrap().send(());
    let r = inflight.await.unwrap();
    assert!(
        r.starts_with("HTTP/1.1 200") && r.ends_with("slow done\n"),
        "{r}"
    );
    tokio::time::timeout(Duration::from_secs(5), &mut srv.done)
        .await
        .unwrap()
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
}

/// An acceptor that fails with EMFILE every time, counting the calls.
struct Emfile(Arc<AtomicUsize>);

impl Accept for Emfile {
    type Io = TcpStream;
    async fn accept(&mut self) -> std::io::Result<(TcpStream, SocketAddr)> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(std::io::Error::from_raw_os_error(libc::EMFILE))
    }
}

#[tokio::test]
async fn emfile_is_backed_off_not_spun() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve_on(
        Emfile(calls.clone()),
        Arc::new(router()),
        Limits::default(),
        None,
        None,
        async move {
            let _ = rx.await;
        },
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = tx.send(());
    task.await.unwrap();
    // 5+10+20+40+80+160 ms = 315 ms: seven calls in half a second, not millions.
    let n = calls.load(Ordering::SeqCst);
    assert!((3..=12).contains(&n), "{n} accept calls in 500 ms");
    assert_eq!(accept_backoff(1), Duration::from_millis(5));
    assert_eq!(accept_backoff(100), Duration::from_secs(1));
}
