//! A real kube-apiserver + etcd for the tests (scripts/k8s-testenv.sh, binaries cached in
//! `~/.cache/cleave`), and kubectl against it. Shared by every test that talks to Kubernetes.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/k8s-testenv.sh")
}

/// Where scripts/k8s-testenv.sh installed kube-apiserver, etcd, kubectl and helm.
pub fn cache_bin() -> PathBuf {
    let base = std::env::var_os("CLEAVE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/cleave")
        });
    base.join("k8s-1.20.2/bin")
}

/// Runs `cmd` with `stdin` piped in (empty when `None`) and collects its output.
pub fn run_piped(mut cmd: Command, stdin: Option<&str>) -> Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut input = child.stdin.take().unwrap();
    let text = stdin.unwrap_or("").to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(text.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// [`run_piped`], asserting success; its stdout.
pub fn ok_piped(cmd: Command, stdin: Option<&str>) -> String {
    let what = format!("{cmd:?}");
    let out = run_piped(cmd, stdin);
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the control plane is installed; prints why a test skips when it is not.
pub fn control_plane_or_skip(test: &str) -> bool {
    let ok = cache_bin().join("kube-apiserver").is_file();
    if !ok {
        eprintln!(
            "SKIP {test}: no control plane in {} (scripts/k8s-testenv.sh install; scripts/test.sh does it)",
            cache_bin().display()
        );
    }
    ok
}

/// One apiserver + etcd in a temporary directory, stopped on drop.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

impl Cluster {
    pub fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Command::new(script());
        c.arg("start").arg(dir.path());
        ok_piped(c, None);
        let kubeconfig = dir.path().join("kubeconfig");
        Cluster { dir, kubeconfig }
    }

    /// Applies cleave's CRDs (`crds/`) and waits until all four are established.
    pub fn apply_crds(&self) {
        let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/cleave.dev.yaml");
        self.ok(&["apply", "--server-side", "-f", crds.to_str().unwrap()]);
        self.ok(&[
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "crd/anticompactionjobs.cleave.dev",
            "crd/rangestreams.cleave.dev",
            "crd/cleanupjobs.cleave.dev",
            "crd/datacentercleanups.cleave.dev",
        ]);
    }

    /// Stops one process of the control plane (`"apiserver"` or `"etcd"`) with `signal`
    /// (`"TERM"`, `"KILL"`); the rest keeps running (`scripts/k8s-testenv.sh stop-one`).
    pub fn stop_one(&self, what: &str, signal: &str) {
        let mut c = Command::new(script());
        c.arg("stop-one").arg(self.dir.path()).args([what, signal]);
        ok_piped(c, None);
    }

    /// Starts it again on the same ports with the same data, and waits until it is ready.
    pub fn start_one(&self, what: &str) {
        let mut c = Command::new(script());
        c.arg("start-one").arg(self.dir.path()).arg(what);
        ok_piped(c, None);
    }

    /// kubectl with another identity's kubeconfig (e.g. a ServiceAccount's).
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(cache_bin().join("kubectl"));
        c.arg("--kubeconfig").arg(kubeconfig).args(args);
        c
    }

    /// kubectl as the cluster admin; its output whatever the exit status.
    pub fn output(&self, args: &[&str]) -> Output {
        run_piped(self.kubectl_as(&self.kubeconfig, args), None)
    }

    /// kubectl as the cluster admin with `stdin`, asserting success; its stdout.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        ok_piped(self.kubectl_as(&self.kubeconfig, args), stdin)
    }

    pub fn ok(&self, args: &[&str]) -> String {
        self.kubectl(args, None)
    }

    pub fn apply(&self, yaml: &str) {
        let p = self
            .dir
            .path()
            .join(format!("m-{}.yaml", uuid::Uuid::new_v4().simple()));
        std::fs::write(&p, yaml).unwrap();
        self.ok(&["apply", "--server-side", "-f", p.to_str().unwrap()]);
    }

    /// The object in namespace `default`, or `None` if it does not exist.
    pub fn get(&self, kind: &str, name: &str) -> Option<serde_json::Value> {
        let o = self.output(&["get", kind, name, "-n", "default", "-o", "json"]);
        o.status
            .success()
            .then(|| serde_json::from_slice(&o.stdout).unwrap())
    }

    pub fn wait<T>(&self, what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
        let t = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(
                t.elapsed() < timeout,
                "timed out after {timeout:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    pub fn phase(&self, kind: &str, name: &str) -> Option<String> {
        self.get(kind, name)
            .and_then(|o| o["status"]["phase"].as_str().map(str::to_string))
    }

    /// `kubectl apply --dry-run=server` of a manifest stream; the server's objects as JSON.
    pub fn dry_run(&self, ns: &str, yaml: &str, what: &str) -> Vec<serde_json::Value> {
        let out = run_piped(
            self.kubectl_as(
                &self.kubeconfig,
                &[
                    "apply",
                    "--dry-run=server",
                    "-n",
                    ns,
                    "-o",
                    "json",
                    "-f",
                    "-",
                ],
            ),
            Some(yaml),
        );
        assert!(
            out.status.success(),
            "the apiserver rejects {what}:\n{}\n--- manifest\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        match v["kind"].as_str() {
            Some("List") => v["items"].as_array().unwrap().clone(),
            _ => vec![v],
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

/// `cleave run` for node `n1` against a [`Cluster`] as a process, its stderr (the tracing
/// log, `RUST_LOG=info`) in a file; killed on drop.
pub struct Sidecar {
    pub proc: super::KillOnDrop,
    pub log: PathBuf,
    pub port: u16,
}

impl Sidecar {
    /// Starts it with `env` added (e.g. `CLEAVE_CRASH_AT`), without waiting for it.
    pub fn spawn(c: &Cluster, data: &Path, env: &[(&str, &str)]) -> Sidecar {
        Sidecar::spawn_with(c, data, env, &[])
    }

    /// [`Sidecar::spawn`] with more flags (e.g. `--management-api URL`).
    pub fn spawn_with(c: &Cluster, data: &Path, env: &[(&str, &str)], args: &[&str]) -> Sidecar {
        Sidecar::spawn_node(c, "n1", data, env, args)
    }

    /// [`Sidecar::spawn_with`] for node `node` (`--node`) instead of `n1`.
    pub fn spawn_node(
        c: &Cluster,
        node: &str,
        data: &Path,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Sidecar {
        let port = super::free_port();
        let log = c.dir.path().join(format!("sidecar-{port}.log"));
        let mut cmd = Command::new(super::cleave_bin());
        cmd.args(["run", "--node", node, "--namespace", "default"])
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .arg("--data-dir")
            .arg(data)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            // The space pre-flight's 10% reserve is about the node's disk, not these
            // small tables: a shared CI disk above 90% would fail the jobs.
            .args(["--min-free-percent", "0"])
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        Sidecar {
            proc: super::KillOnDrop(cmd.spawn().unwrap()),
            log,
            port,
        }
    }

    /// [`Sidecar::spawn`], then waits until `/readyz` answers 200 (both CRDs listed).
    pub fn start(c: &Cluster, data: &Path, env: &[(&str, &str)]) -> Sidecar {
        Sidecar::start_with(c, data, env, &[])
    }

    /// [`Sidecar::start`] with more flags.
    pub fn start_with(c: &Cluster, data: &Path, env: &[(&str, &str)], args: &[&str]) -> Sidecar {
        Sidecar::start_node(c, "n1", data, env, args)
    }

    /// [`Sidecar::start_with`] for node `node` (`--node`) instead of `n1`.
    pub fn start_node(
        c: &Cluster,
        node: &str,
        data: &Path,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> Sidecar {
        let s = Sidecar::spawn_node(c, node, data, env, args);
        s.wait_ready(c);
        s
    }

    /// Waits until `/readyz` answers 200.
    pub fn wait_ready(&self, c: &Cluster) {
        c.wait("readyz", Duration::from_secs(60), || {
            super::http_get(self.port, "/readyz").filter(|r| r.starts_with("HTTP/1.1 200"))
        });
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log has `needle` `n` times.
    pub fn wait_log(&self, needle: &str, n: usize, timeout: Duration) {
        let t = Instant::now();
        while self.log().matches(needle).count() < n {
            assert!(
                t.elapsed() < timeout,
                "no {n}× {needle:?} in the sidecar's log after {timeout:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The sum of the `/metrics` samples whose line starts with `prefix`.
    pub fn counter(&self, prefix: &str) -> f64 {
        super::http_get(self.port, "/metrics")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Waits until the process exits (by itself: a crash point); its exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let t = Instant::now();
        loop {
            if let Some(st) = self.proc.0.try_wait().unwrap() {
                return st;
            }
            assert!(
                t.elapsed() < timeout,
                "the sidecar did not exit within {timeout:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
