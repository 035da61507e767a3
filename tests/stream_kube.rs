//! RangeStreams end to end on a REAL kube-apiserver + etcd (scripts/k8s-testenv.sh): two
//! `cleave run` sidecars on loopback with different `--node`, the destination one serving
//! the receiver (`--stream-addr`), RangeStreams applied with kubectl and executed by the
//! source node's reconciler. Judged by independent readers: sstcheck.py (every child, and
//! `SSTCHECK_RANGES` fingerprints of the parents) and cqlite (rows, for `oa`).
//!
//! Then the faults: the receiver killed mid-stream (the source shows `Retrying` with the
//! reason, resumes when it is back), a receiver that never answers (`Failed/Unreachable`
//! after the bounded retries), and the stream deleted mid-send (the receiver's staging of
//! the in-flight transfer is removed).
//!
//! `CLEAVE_STREAM_KUBE_SIZE` (default `1GiB`, the acceptance size) sets the generated
//! sstable's size.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::k8s::*;
use common::*;
use serde_json::Value;

const HEX: &str = "0123456789abcdef0123456789abcdef";
const RANGES: &str =
    "-9000000000000000000:-8000000000000000000,1000000000000000000:4000000000000000000";
const WIDE: &str = "-9000000000000000000:9000000000000000000";

struct Env {
    tmp: tempfile::TempDir,
    cluster: Cluster,
    shared: PathBuf,
    src: PathBuf,
    staging: PathBuf,
    stream_port: u16,
}

impl Env {
    fn log(&self, node: &str) -> PathBuf {
        self.tmp.path().join(format!("{node}.log"))
    }

    fn logs(&self) -> String {
        ["n1", "n2"]
            .iter()
            .map(|n| {
                let t = std::fs::read_to_string(self.log(n)).unwrap_or_default();
                let tail: Vec<&str> = t.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {n}\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `cleave run` for `node`; the source (n1) sends, the destination (n2) receives.
    fn sidecar(&self, node: &str, metrics_port: u16) -> KillOnDrop {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(node))
            .unwrap();
        let token = self.tmp.path().join("token");
        let mut cmd = Command::new(cleave_bin());
        cmd.args([
            "run",
            "--node",
            node,
            "--namespace",
            "default",
            "--kubeconfig",
        ])
        .arg(&self.cluster.kubeconfig)
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
        .arg("--stream-token-file")
        .arg(&token)
        .arg("--insecure-plaintext")
        .stdout(Stdio::null())
        .stderr(log);
        if node == "n1" {
            cmd.arg("--data-dir").arg(&self.src).args([
                "--max-concurrent-jobs",
                "2",
                "--stream-retries",
                "4",
                "--stream-backoff-ms",
                "1000",
            ]);
        } else {
            let dst = self.tmp.path().join("dst/data");
            std::fs::create_dir_all(&dst).unwrap();
            cmd.arg("--data-dir")
                .arg(dst)
                .args(["--stream-addr", &format!("127.0.0.1:{}", self.stream_port)])
                .arg("--stream-staging")
                .arg(&self.staging)
                .args(["--min-free-percent", "0"]);
        }
        let child = KillOnDrop(cmd.spawn().unwrap());
        self.cluster
            .wait(&format!("{node} ready"), Duration::from_secs(30), || {
                http_get(metrics_port, "/readyz").filter(|r| r.starts_with("HTTP/1.1 200"))
            });
        child
    }

    fn apply_stream(&self, name: &str, tables: &[&str], ranges: &str, extra: &str) {
        let endpoint = format!("127.0.0.1:{}", self.stream_port);
        self.apply_stream_to(name, tables, ranges, &endpoint, extra);
    }

    fn apply_stream_to(&self, name: &str, tables: &[&str], ranges: &str, to: &str, extra: &str) {
        let ranges: String = ranges
            .split(',')
            .map(|r| {
                let (l, h) = r.split_once(':').unwrap();
                format!("    - {{start: \"{l}\", end: \"{h}\"}}\n")
            })
            .collect();
        self.cluster.apply(&format!(
            "apiVersion: cleave.dev/v1alpha1\nkind: RangeStream\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{cleave.dev/node: n1}}\nspec:\n  sourceNode: n1\n  destination: {{nodeName: n2, endpoint: \"{to}\"}}\n  keyspace: ks\n  tables: [{}]\n  ranges:\n{ranges}{extra}",
            tables.join(", ")
        ));
    }

    fn stream(&self, name: &str) -> Value {
        self.cluster.get("rangestream", name).unwrap_or(Value::Null)
    }

    /// Waits for a finished phase; the stream's status.
    fn finished(&self, name: &str, timeout: Duration) -> Value {
        let t = Instant::now();
        loop {
            let s = self.stream(name);
            let p = s["status"]["phase"].as_str().unwrap_or("");
            if p == "Complete" || p == "Failed" {
                return s["status"].clone();
            }
            assert!(
                t.elapsed() < timeout,
                "{name} not finished after {timeout:?}: {}\n{}",
                s["status"],
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn complete(&self, name: &str, timeout: Duration) -> Value {
        let st = self.finished(name, timeout);
        assert_eq!(st["phase"], "Complete", "{name}: {st}\n{}", self.logs());
        st
    }
}

fn sstcheck(shared: &Path, data: &Path, ranges: Option<&str>) -> Value {
    let mut c = Command::new("python3");
    c.arg(shared.join("tools/sstcheck.py")).arg(data);
    if let Some(r) = ranges {
        c.env("SSTCHECK_RANGES", r);
    }
    let out = c.output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "sstcheck {}: {e}: {}",
            data.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Files under `dir` with their length and CRC32: the source must be byte-identical
/// afterwards (a hash instead of `common::snapshot`'s bytes: the tree holds a GiB).
fn digest_tree(dir: &Path) -> Vec<(PathBuf, u64, u32)> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let mut h = crc32fast::Hasher::new();
            let mut f = std::fs::File::open(&p).unwrap();
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                let k = std::io::Read::read(&mut f, &mut buf).unwrap();
                if k == 0 {
                    break;
                }
                h.update(&buf[..k]);
                n += k as u64;
            }
            v.push((p, n, h.finalize()));
        }
    }
    v.sort();
    v
}

fn gen(dir: &Path, args: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new(cleave_bin())
        .arg("gen")
        .arg("--out")
        .arg(dir)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(dir.join("schema.cql"));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    PathBuf::from(v["data"].as_str().unwrap())
}

/// The stream's status holds a verdict per child; every child passes sstcheck and together
/// they hold exactly the keys sstcheck finds in the ranges of each parent. Returns the
/// children's Data.db paths per parent file name.
fn check_children(
    env: &Env,
    st: &Value,
    parents: &[(&str, PathBuf)],
    ranges: &str,
) -> Vec<(String, Vec<PathBuf>)> {
    let x = &st["stream"];
    assert!(x["bytesTotal"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(x["bytesSent"], x["bytesTotal"], "{st}");
    assert_eq!(x["childrenDone"], x["childrenTotal"], "{st}");
    let results = x["results"].as_array().unwrap();
    assert_eq!(results.len(), parents.len(), "one result per parent: {st}");
    let mut out = Vec::new();
    for (table, data) in parents {
        let file = data.file_name().unwrap().to_str().unwrap();
        let r = results
            .iter()
            .find(|r| r["table"] == *table && r["parent"] == file)
            .unwrap_or_else(|| panic!("no result for {table}/{file}: {st}"));
        let want = sstcheck(&env.shared, data, Some(ranges));
        assert_eq!(want["ok"], true, "{}", want["errors"]);
        let want = &want["in_ranges"];
        assert_eq!(r["partitionsInRanges"], want["partitions"], "{r}");
        let (mut n, mut xor, mut sum) = (0u64, 0u64, 0u64);
        let mut paths = Vec::new();
        for c in r["children"].as_array().unwrap() {
            assert_eq!(c["ok"], true, "{c}");
            assert!(c["chunksChecked"].as_u64().unwrap() > 0, "{c}");
            let d = PathBuf::from(c["published"].as_str().unwrap());
            assert!(d.starts_with(&env.staging), "{}", d.display());
            let got = sstcheck(&env.shared, &d, None);
            assert_eq!(got["ok"], true, "{}: {}", d.display(), got["errors"]);
            let (live, c_xor, c_sum) =
                sstcheck_without_row_filler(&got, c["partitions"].as_u64().unwrap());
            n += live;
            xor ^= c_xor;
            sum = sum.wrapping_add(c_sum);
            paths.push(d);
        }
        assert_eq!(
            n,
            want["partitions"].as_u64().unwrap(),
            "{table}: partitions"
        );
        assert_eq!(xor, hex64(&want["keys_xor"]), "{table}: keys_xor");
        assert_eq!(sum, hex64(&want["keys_sum"]), "{table}: keys_sum");
        out.push((file.to_string(), paths));
    }
    out
}

fn cqlite_rows(schema: &Path, data: &[PathBuf]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/cqlite_dump.py");
    let mut args: Vec<&std::ffi::OsStr> = vec![
        script.as_os_str(),
        "--schema".as_ref(),
        schema.as_os_str(),
        "--keyspace".as_ref(),
        "ks".as_ref(),
        "--table".as_ref(),
        "t".as_ref(),
    ];
    args.extend(data.iter().map(|p| p.as_os_str()));
    let out = python_json(&args);
    assert!(out.get("error").is_none(), "cqlite: {}", out["error"]);
    out["rows"].as_array().unwrap().clone()
}

fn in_ranges(token: i64, ranges: &str) -> bool {
    ranges.split(',').any(|r| {
        let (l, h) = r.split_once(':').unwrap();
        let (l, h): (i64, i64) = (l.parse().unwrap(), h.parse().unwrap());
        l < token && token <= h
    })
}

fn condition(st: &Value, t: &str) -> Option<Value> {
    st["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .cloned()
}

#[test]
fn range_streams_between_two_sidecars_on_a_real_apiserver() {
    let Some(shared) = corpus_or_skip("stream kube e2e") else {
        return;
    };
    if !cache_bin().join("kube-apiserver").is_file() {
        eprintln!(
            "SKIP stream kube e2e: no control plane in {} (scripts/k8s-testenv.sh install)",
            cache_bin().display()
        );
        return;
    }
    let started = Instant::now();
    let cluster = Cluster::start();
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/cleave.dev.yaml");
    cluster.ok(&["apply", "--server-side", "-f", crds.to_str().unwrap()]);
    cluster.ok(&[
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/rangestreams.cleave.dev",
        "crd/anticompactionjobs.cleave.dev",
    ]);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("token"), "s3cret\n").unwrap();
    let env = Env {
        src: tmp.path().join("src/data"),
        staging: tmp.path().join("dst/staging"),
        stream_port: free_port(),
        shared: shared.clone(),
        cluster,
        tmp,
    };
    let ks = env.src.join("ks");

    // The source node: compressed Murmur3 corpus sstables (what range children support and
    // sstcheck's `in_ranges` fingerprints), one table each, and generated ones.
    let rows = manifest(&shared);
    let mut corpus = Vec::new();
    for r in rows.iter().filter(|r| {
        is_supported_big(r) && !r.invalid && !is_damaged(r) && r.compressed && r.partitions >= 5
    }) {
        if corpus.len() < 3
            && sstcheck(&shared, &r.data_db, None)["partitioner"] == "Murmur3Partitioner"
        {
            let i = corpus.len();
            let table = format!("c{i}");
            let d = copy_sstable(&r.data_db, &ks.join(format!("{table}-{HEX}")));
            corpus.push((table, d, r.version.clone()));
        }
    }
    assert!(
        !corpus.is_empty(),
        "corpus lacks compressed Murmur3 sstables"
    );
    let size = std::env::var("CLEAVE_STREAM_KUBE_SIZE").unwrap_or_else(|_| "1GiB".into());
    let t = Instant::now();
    let big = gen(&ks.join(format!("big-{HEX}")), &["--size", &size]);
    let gen_secs = t.elapsed().as_secs_f64();
    let small_dir = ks.join(format!("small-{HEX}"));
    let small = gen(
        &small_dir,
        &[
            "--size",
            "16MiB",
            "--version",
            "oa",
            "--partition-size",
            "16KiB",
            "--row-size",
            "1KiB",
        ],
    );
    let before = digest_tree(&env.src);

    let (m1, m2) = (free_port(), free_port());
    let mut n2 = Some(env.sidecar("n2", m2));
    let _n1 = env.sidecar("n1", m1);

    // 1. Ranges of the corpus sstables (all but their first and last partition) and of
    //    the generated ones, each stream applied with kubectl.
    let mut corpus_ranges = Vec::new();
    for (table, data, _) in &corpus {
        let whole = sstcheck(&shared, data, None);
        let (first, last) = (
            whole["first_token"].as_i64().unwrap(),
            whole["last_token"].as_i64().unwrap(),
        );
        let ranges = format!("{first}:{}", last - 1);
        env.apply_stream(&format!("rs-{table}"), &[table], &ranges, "");
        corpus_ranges.push(ranges);
    }
    env.apply_stream("rs-gen", &["big", "small"], RANGES, "");
    let t = Instant::now();
    for ((table, data, version), ranges) in corpus.iter().zip(&corpus_ranges) {
        let st = env.complete(&format!("rs-{table}"), Duration::from_secs(120));
        let got = check_children(&env, &st, &[(table, data.clone())], ranges);
        assert_eq!(
            got[0].1.len(),
            1,
            "{version}: one contiguous run, one child"
        );
    }
    let st = env.complete("rs-gen", Duration::from_secs(600));
    let send_secs = t.elapsed().as_secs_f64();
    let gen_children = check_children(
        &env,
        &st,
        &[("big", big.clone()), ("small", small.clone())],
        RANGES,
    );
    let x = &st["stream"];
    eprintln!(
        "rs-gen: {} bytes in {} children, throughput {} B/s (status), {send_secs:.1} s for all streams; gen {size} took {gen_secs:.1} s",
        x["bytesTotal"], x["childrenTotal"], x["throughput"]
    );
    assert_eq!(
        st["progress"]["summary"],
        format!("{0}/{0} children", x["childrenTotal"])
    );
    assert!(condition(&st, "Complete").is_some_and(|c| c["status"] == "True"));
    // cqlite (reads oa): the children's rows are the parent's rows in the ranges.
    let schema = env.tmp.path().join("schema.cql");
    std::fs::write(
        &schema,
        "CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};\nCREATE TABLE ks.t (k blob, c int, v blob, PRIMARY KEY (k, c));\n",
    )
    .unwrap();
    let small_children = &gen_children[1].1;
    let key_of = |row: &Value| unhex(row["k"].as_str().unwrap());
    let mut want: Vec<String> = cqlite_rows(&schema, std::slice::from_ref(&small))
        .iter()
        .filter(|row| in_ranges(cleave::sstable::token::murmur3_token(&key_of(row)), RANGES))
        .map(|r| r.to_string())
        .collect();
    let mut got: Vec<String> = cqlite_rows(&schema, small_children)
        .iter()
        .map(|r| r.to_string())
        .collect();
    want.sort();
    got.sort();
    assert!(!got.is_empty());
    assert_eq!(got, want, "cqlite rows of the oa children");
    // Events on the stream.
    let ev = env.cluster.ok(&[
        "get",
        "events.v1.events.k8s.io",
        "-n",
        "default",
        "--field-selector",
        "regarding.name=rs-gen",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(ev.contains("Started") && ev.contains("Completed"), "{ev}");
    // Per-stream metrics on the source.
    let m = http_get(m1, "/metrics").unwrap();
    assert!(
        m.lines().any(|l| l
            .starts_with("cleave_stream_sent_bytes{name=\"rs-gen\",namespace=\"default\"}")
            && l.ends_with(&format!(" {}", x["bytesTotal"]))),
        "{m}"
    );
    assert_eq!(
        digest_tree(&env.src),
        before,
        "the source data directory changed"
    );

    // 2. The receiver killed mid-stream: the source shows the retry with its reason and
    //    resumes once the receiver is back; a receiver that never answers fails the
    //    stream with Unreachable after the bounded retries.
    // Half the ring of the generated sstable at 64 MiB/s, killed once the receiver holds
    // more than its 64 MiB checkpoint interval (a SIGKILL keeps only checkpointed bytes).
    const HALF: &str = "-9000000000000000000:0";
    env.apply_stream("rs-kill", &["big"], HALF, "  maxBytesPerSecond: 67108864\n");
    let dead = format!("127.0.0.1:{}", free_port());
    env.apply_stream_to("rs-dead", &["c0"], &corpus_ranges[0], &dead, "");
    let id = env
        .cluster
        .wait("rs-kill sending", Duration::from_secs(60), || {
            let s = env.stream("rs-kill");
            s["status"]["stream"]["currentTransfer"]
                .as_str()
                .filter(|id| id.contains(".big."))
                .map(str::to_string)
        });
    let staged_data = env.staging.join("transfers").join(&id).join("Data.db");
    let t = Instant::now();
    while std::fs::metadata(&staged_data).map_or(0, |m| m.len()) < 72 << 20 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "rs-kill: {} never reached 72 MiB: {}",
            staged_data.display(),
            env.stream("rs-kill")["status"]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(n2.take());
    let retrying = env
        .cluster
        .wait("rs-kill Retrying", Duration::from_secs(30), || {
            condition(&env.stream("rs-kill")["status"], "Retrying")
                .filter(|c| c["status"] == "True")
        });
    assert_eq!(retrying["reason"], "Unreachable", "{retrying}");
    assert!(
        retrying["message"].as_str().unwrap().contains(&id),
        "{retrying}"
    );
    n2 = Some(env.sidecar("n2", m2));
    let st = env.complete("rs-kill", Duration::from_secs(120));
    assert!(st["stream"]["retries"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(
        condition(&st, "Retrying").unwrap()["status"],
        "False",
        "{st}"
    );
    check_children(&env, &st, &[("big", big.clone())], HALF);
    let m = http_get(m1, "/metrics").unwrap();
    let resumes = m
        .lines()
        .find(|l| l.starts_with("cleave_stream_resumes_total{side=\"send\"}"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap());
    eprintln!(
        "rs-kill: {} retries, sender resumes {resumes:?}",
        st["stream"]["retries"]
    );
    assert!(
        resumes.unwrap_or(0) >= 1,
        "resumed from durable offsets: {m}"
    );
    let st = env.finished("rs-dead", Duration::from_secs(120));
    assert_eq!(st["phase"], "Failed", "{st}");
    assert_eq!(st["reason"], "Unreachable", "{st}");
    assert_eq!(st["stream"]["retries"], 4, "{st}");
    assert!(
        st["message"].as_str().unwrap().contains("after 5 attempts"),
        "{st}"
    );

    // 3. Deleted mid-stream: the finalizer stops the send and the receiver drops the
    //    in-flight transfer's staging.
    env.apply_stream("rs-del", &["small"], WIDE, "  maxBytesPerSecond: 1048576\n");
    let id = env
        .cluster
        .wait("rs-del sending", Duration::from_secs(60), || {
            let s = env.stream("rs-del");
            let id = s["status"]["stream"]["currentTransfer"]
                .as_str()?
                .to_string();
            let staged = env.staging.join("transfers").join(&id);
            staged.join("manifest").exists().then_some(()).or_else(|| {
                std::fs::read_dir(&staged)
                    .ok()?
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with(".offset"))
                    .then_some(())
            })?;
            Some(id)
        });
    let staged = env.staging.join("transfers").join(&id);
    assert!(staged.exists());
    env.cluster.ok(&[
        "delete",
        "rangestream",
        "rs-del",
        "-n",
        "default",
        "--wait=true",
        "--timeout=60s",
    ]);
    assert!(env.cluster.get("rangestream", "rs-del").is_none());
    assert!(
        !staged.exists(),
        "the receiver's staging of {id} is left: {:?}\n{}",
        std::fs::read_dir(&staged).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>()),
        env.logs()
    );
    let m = http_get(m1, "/metrics").unwrap();
    assert!(
        !m.contains("name=\"rs-del\""),
        "the deleted stream's series are gone: {m}"
    );
    assert_eq!(
        digest_tree(&env.src),
        before,
        "the source data directory changed"
    );
    drop(n2);
    eprintln!(
        "stream_kube: {:.1} s wall (uptime: {})",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&Command::new("uptime").output().unwrap().stdout).trim()
    );
}

/// A RangeStream lands on its destination or nowhere: one for `n3` whose endpoint is `n2`'s
/// receiver (a stale address, a Service resolving to another pod) ends `Failed` with
/// `WrongDestination`, and `n2` holds nothing: no published child, no staged transfer.
#[test]
fn a_stream_for_n3_sent_to_n2s_receiver_fails_wrong_destination() {
    if !cache_bin().join("kube-apiserver").is_file() {
        eprintln!(
            "SKIP wrong destination: no control plane in {} (scripts/k8s-testenv.sh install)",
            cache_bin().display()
        );
        return;
    }
    let cluster = Cluster::start();
    cluster.apply_crds();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("token"), "s3cret\n").unwrap();
    let env = Env {
        src: tmp.path().join("src/data"),
        staging: tmp.path().join("dst/staging"),
        stream_port: free_port(),
        shared: PathBuf::new(),
        cluster,
        tmp,
    };
    gen(&env.src.join(format!("ks/t-{HEX}")), &["--size", "8MiB"]);
    let (m1, m2) = (free_port(), free_port());
    let _n2 = env.sidecar("n2", m2);
    let _n1 = env.sidecar("n1", m1);
    env.cluster.apply(&format!(
        "apiVersion: cleave.dev/v1alpha1\nkind: RangeStream\nmetadata:\n  name: rs-n3\n  namespace: default\n  labels: {{cleave.dev/node: n1}}\nspec:\n  sourceNode: n1\n  destination: {{nodeName: n3, endpoint: \"127.0.0.1:{}\"}}\n  keyspace: ks\n  ranges:\n    - {{start: \"{}\", end: \"{}\"}}\n",
        env.stream_port, -9_000_000_000_000_000_000i64, 9_000_000_000_000_000_000i64
    ));
    let st = env.finished("rs-n3", Duration::from_secs(120));
    assert_eq!(st["phase"], "Failed", "{st}\n{}", env.logs());
    assert_eq!(st["reason"], "WrongDestination", "{st}");
    let msg = st["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("n3") && msg.contains("n2"),
        "the message names both nodes: {st}"
    );
    // Refused before a byte: nothing under n2's staging but its empty skeleton, nothing in
    // its data directory.
    let files: Vec<PathBuf> = walk_files(&env.staging)
        .into_iter()
        .chain(walk_files(&env.tmp.path().join("dst/data")))
        .collect();
    assert!(files.is_empty(), "n2 holds files of n3's stream: {files:?}");
    assert!(
        http_get(m2, "/metrics")
            .unwrap_or_default()
            .lines()
            .all(|l| !l.starts_with("cleave_stream_bytes_total") || l.ends_with(" 0")),
        "n2's receiver counted no received bytes"
    );
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}
