//! The stream tests' receiver and sender: real `cleave` processes over loopback. A
//! `StreamPair` is a temporary directory, a token file, a receiver listening on a free port
//! (`cleave stream serve`, or the sidecar `cleave run --local` serving the receiver and
//! `/metrics`), and the sender arguments that authenticate to it. The receiver is killed
//! and reaped on drop, the directory removed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{cleave_bin, free_port, http_get, KillOnDrop};

/// The token every pair uses unless told otherwise.
pub const TOKEN: &str = "tok";

/// What `cleave stream send --json` did.
pub struct Sent {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Sent {
    /// The sender's reports, one per sstable: `sent` of its JSON object (docs/json.md).
    pub fn json(&self) -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", self.stdout, self.stderr));
        assert_eq!(v["version"], 1, "{v}");
        v["sent"].clone()
    }
}

/// A token file `<dir>/token-<token>` and the arguments that use it on both sides
/// (`--stream-token-file F --insecure-plaintext`).
pub fn token_args(dir: &Path, token: &str) -> (PathBuf, Vec<String>) {
    let f = dir.join(format!("token-{token}"));
    std::fs::write(&f, format!("{token}\n")).unwrap();
    let args = vec![
        "--stream-token-file".to_string(),
        f.display().to_string(),
        "--insecure-plaintext".to_string(),
    ];
    (f, args)
}

/// Blocks (at most `limit`) until `ready` holds.
fn wait(what: &str, limit: Duration, ready: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !ready() {
        assert!(t0.elapsed() < limit, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn listens(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// A receiver process; killed and reaped on drop.
pub struct Receiver {
    pub process: KillOnDrop,
    pub port: u16,
    pub staging: PathBuf,
}

/// `cleave stream serve --stream-addr 127.0.0.1:<free port> --stream-staging <staging>
/// EXTRA`, once it accepts connections.
pub fn serve(staging: &Path, extra: &[&str]) -> Receiver {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = Command::new(cleave_bin())
        .args([
            "stream",
            "serve",
            "--stream-addr",
            &addr,
            "--stream-staging",
        ])
        .arg(staging)
        .args(extra)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let process = KillOnDrop(child);
    wait("receiver did not listen", Duration::from_secs(20), || {
        listens(port)
    });
    Receiver {
        process,
        port,
        staging: staging.to_path_buf(),
    }
}

/// The receiver served by a sidecar (`cleave run --node node-b --local <dir>/manifests
/// --data-dir <dir>/data --stream-staging <dir>/recv`) on `port`, its `/metrics` on
/// `mport`, once both answer.
pub fn sidecar_receiver(dir: &Path, port: u16, mport: u16, auth: &[String]) -> Receiver {
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let staging = dir.join("recv");
    let child = Command::new(cleave_bin())
        .args(["run", "--node", "node-b", "--local"])
        .arg(&manifests)
        .args(["--data-dir"])
        .arg(dir.join("data"))
        .args(["--metrics-addr", &format!("127.0.0.1:{mport}")])
        .args([
            "--stream-addr",
            &format!("127.0.0.1:{port}"),
            "--stream-staging",
        ])
        .arg(&staging)
        .args(auth)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let process = KillOnDrop(child);
    wait("sidecar did not serve", Duration::from_secs(30), || {
        listens(port) && http_get(mport, "/metrics").is_some()
    });
    Receiver {
        process,
        port,
        staging,
    }
}

/// `cleave stream send --to 127.0.0.1:<port> --json DATA EXTRA`.
pub fn send(port: u16, data: &[&Path], extra: &[&str]) -> Sent {
    let out = Command::new(cleave_bin())
        .args([
            "stream",
            "send",
            "--to",
            &format!("127.0.0.1:{port}"),
            "--json",
        ])
        .args(data)
        .args(extra)
        .output()
        .unwrap();
    Sent {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A receiver in `<dir>/recv` that takes `token`, and the sender that authenticates to it.
pub struct StreamPair {
    /// `recv` is declared first so that it is killed before `dir` is removed.
    pub recv: Receiver,
    /// The receiver's `/metrics` port (sidecar only).
    pub metrics_port: Option<u16>,
    /// `--stream-token-file <dir>/token-<token> --insecure-plaintext`.
    pub auth: Vec<String>,
    pub dir: tempfile::TempDir,
}

impl StreamPair {
    /// `cleave stream serve` taking `TOKEN`, with `extra` receiver flags.
    pub fn serve(extra: &[&str]) -> StreamPair {
        StreamPair::serve_with_token(TOKEN, extra)
    }

    /// `cleave stream serve` taking `token`, with `extra` receiver flags.
    pub fn serve_with_token(token: &str, extra: &[&str]) -> StreamPair {
        let dir = tempfile::tempdir().unwrap();
        let (_, auth) = token_args(dir.path(), token);
        let mut args: Vec<&str> = auth.iter().map(String::as_str).collect();
        args.extend_from_slice(extra);
        let recv = serve(&dir.path().join("recv"), &args);
        StreamPair {
            recv,
            metrics_port: None,
            auth,
            dir,
        }
    }

    /// The sidecar (`sidecar_receiver`) taking `TOKEN`, in a directory the test already
    /// filled.
    pub fn sidecar_in(dir: tempfile::TempDir) -> StreamPair {
        let (_, auth) = token_args(dir.path(), TOKEN);
        let (port, mport) = (free_port(), free_port());
        let recv = sidecar_receiver(dir.path(), port, mport, &auth);
        StreamPair {
            recv,
            metrics_port: Some(mport),
            auth,
            dir,
        }
    }

    /// Kills the receiver and waits until it is gone.
    pub fn kill_receiver(&mut self) {
        self.recv.process.0.kill().unwrap();
        self.recv.process.0.wait().unwrap();
    }

    /// The sidecar again, on the same ports and staging (after `kill_receiver`).
    pub fn restart_sidecar(&mut self) {
        let mport = self.metrics_port.expect("a sidecar pair");
        self.recv = sidecar_receiver(self.dir.path(), self.recv.port, mport, &self.auth);
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn port(&self) -> u16 {
        self.recv.port
    }

    /// The receiver's staging root (`transfers/`, `ready/`).
    pub fn staging(&self) -> &Path {
        &self.recv.staging
    }

    /// The sender's arguments that authenticate to this receiver, then `extra`.
    pub fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut v: Vec<&str> = self.auth.iter().map(String::as_str).collect();
        v.extend_from_slice(extra);
        v
    }

    /// `cleave stream send` to this receiver with its token, then `extra`.
    pub fn send(&self, data: &[&Path], extra: &[&str]) -> Sent {
        self.send_via(self.recv.port, data, extra)
    }

    /// As `send`, through another port (a proxy in front of the receiver).
    pub fn send_via(&self, port: u16, data: &[&Path], extra: &[&str]) -> Sent {
        send(port, data, &self.args(extra))
    }
}
