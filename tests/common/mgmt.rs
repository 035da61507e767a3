//! The management API stand-in of `tests/py/mgmt_standin.py`: only the paths, codes and
//! shapes of `../shared/third-party/management-api/openapi.json`, every exchange logged and
//! checked against that document.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{http_get, shared_dir};

/// `tests/py/mgmt_standin.py` on a port of its own, stopped (with its Cassandra) on drop.
pub struct StandIn {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl StandIn {
    pub fn start(dir: &Path, table: &Path, extra: &[&str]) -> StandIn {
        let openapi = shared_dir()
            .expect("shared dir")
            .join("third-party/management-api/openapi.json");
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port_file = dir.join(format!("standin-{n}.port"));
        let log = dir.join(format!("standin-{n}.log"));
        let hold = table.join("standin.hold");
        std::fs::write(&hold, b"").unwrap();
        let child = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/mgmt_standin.py"))
            .arg("--openapi")
            .arg(&openapi)
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .arg("--hold")
            .arg(&hold)
            .arg("--table")
            .arg(table)
            .args(["--ready-after", "1"])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().parse().unwrap();
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "stand-in did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        StandIn { child, port, log }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every exchange so far, asserting the document allowed each.
    pub fn calls(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let calls: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for c in &calls {
            assert!(
                c.get("violation").is_none(),
                "an exchange the OpenAPI document does not allow: {c}"
            );
        }
        calls
    }

    /// Whether the stand-in's Cassandra serves (`/probes/readiness` is 200: running, not
    /// drained).
    pub fn cassandra_ready(&self) -> bool {
        http_get(self.port, "/api/v0/probes/readiness")
            .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    }

    /// Whether the stand-in's Cassandra runs (`/lifecycle/pid` is 200).
    pub fn cassandra_runs(&self) -> bool {
        http_get(self.port, "/api/v0/lifecycle/pid").is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        // SIGTERM: the stand-in kills its Cassandra process, then exits.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
