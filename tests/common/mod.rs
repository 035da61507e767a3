//! Helpers shared by the integration tests: where the real Cassandra SSTables are, what
//! their MANIFEST says, and how to run the independent Python checkers.
#![expect(
    dead_code,
    reason = "each test crate includes this module and uses only some of its helpers"
)]

pub mod cassandra;
pub mod k8s;
pub mod mgmt;
pub mod oracle_java;
pub mod ring;
pub mod stream;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `../shared` beside the checkout (or `$CLEAVE_SHARED`). Tests that need it print why
/// they skip when it is absent; CI always has it.
pub fn shared_dir() -> Option<PathBuf> {
    let p = std::env::var_os("CLEAVE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    p.join("corpus/MANIFEST.tsv").is_file().then_some(p)
}

/// Cassandra's own BTI (`da`) legacy fixtures (ByteOrderedPartitioner), by table.
pub const BTI_FIXTURES: [&str; 4] = [
    "legacy_da_simple",
    "legacy_da_simple_counter",
    "legacy_da_clust",
    "legacy_da_clust_counter",
];

/// The Data.db of the BTI legacy fixture `table` (one of [`BTI_FIXTURES`]) in the corpus.
pub fn bti_fixture(shared: &Path, table: &str) -> PathBuf {
    shared.join(format!(
        "corpus/gitarcode-test+cassandra/test/data/legacy-sstables/da/legacy_tables/{table}/da-1-bti-Data.db"
    ))
}

/// The file of `component` (`"Rows.db"`, `"CompressionInfo.db"`, …) of the sstable whose
/// Data.db is `data`.
pub fn sibling(data: &Path, component: &str) -> PathBuf {
    let name = data.file_name().unwrap().to_string_lossy();
    data.with_file_name(name.replace("Data.db", component))
}

pub fn corpus_or_skip(test: &str) -> Option<PathBuf> {
    let d = shared_dir();
    if d.is_none() {
        eprintln!(
            "SKIP {test}: ../shared/corpus not found (set CLEAVE_SHARED to the shared folder)"
        );
    }
    d
}

#[derive(Debug, Clone)]
pub struct ManifestRow {
    pub data_db: PathBuf,
    pub version: String,
    pub format: String,
    pub compressed: bool,
    pub partitions: u64,
    pub invalid: bool,
    pub schema_file: Option<PathBuf>,
    /// `keyspace/table` as the MANIFEST names it (`ks/table~keyspace/table`).
    pub table: String,
}

/// Rows of `corpus/MANIFEST.tsv`: origin repo, commit, path, format, version, compressed,
/// data bytes, notes (partitions=N, schema_file=…, INTENTIONALLY_INVALID…).
pub fn manifest(shared: &Path) -> Vec<ManifestRow> {
    let text = std::fs::read_to_string(shared.join("corpus/MANIFEST.tsv")).expect("MANIFEST.tsv");
    let mut rows = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 8 {
            continue;
        }
        let origin = f[0].replace('/', "+");
        let root = shared.join("corpus").join(&origin);
        let notes = f[7];
        let partitions = notes
            .split('|')
            .find_map(|n| n.trim().strip_prefix("partitions="))
            .and_then(|n| n.trim().parse().ok())
            .expect("partitions= in MANIFEST notes");
        let schema_file = notes
            .split('|')
            .find_map(|n| n.trim().strip_prefix("schema_file="))
            .map(|s| root.join(s.trim()));
        let table = notes
            .split('|')
            .next()
            .and_then(|n| n.trim().split('~').nth(1))
            .unwrap_or("")
            .to_string();
        rows.push(ManifestRow {
            data_db: root.join(f[2]),
            version: f[4].to_string(),
            format: f[3].to_string(),
            compressed: f[5] == "yes",
            partitions,
            invalid: notes.contains("INTENTIONALLY_INVALID"),
            schema_file,
            table,
        });
    }
    assert!(
        rows.len() > 100,
        "MANIFEST.tsv lists {} sstables",
        rows.len()
    );
    rows
}

pub const SUPPORTED: [&str; 9] = ["ma", "mb", "mc", "md", "me", "na", "nb", "nc", "oa"];

pub fn is_supported_big(r: &ManifestRow) -> bool {
    r.format == "big" && SUPPORTED.contains(&r.version.as_str())
}

/// The deliberately damaged fixtures (Scylla's integrity_check set): wrong chunk CRCs or
/// a wrong Digest.
pub fn is_damaged(r: &ManifestRow) -> bool {
    r.data_db.to_string_lossy().contains("integrity_check")
}

/// Runs a Python script; returns its stdout parsed as JSON. Fails the test with stderr on
/// a non-zero exit.
pub fn python_json(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let out = Command::new("python3")
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success() || !out.stdout.is_empty(),
        "python3 {:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "python3 {:?}: not JSON ({e}): {}\n{}",
            args,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub fn cleave_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cleave"))
}

/// A loop-mounted XFS (reflink=1), or `None` with the reason printed.
pub fn xfs_or_skip(test: &str, size: u64) -> Option<cleave::io::loopfs::LoopMount> {
    if let Some(why) = cleave::io::loopfs::unavailable_reason() {
        eprintln!("SKIP {test}: {why}");
        return None;
    }
    let parent = std::env::temp_dir();
    Some(cleave::io::loopfs::LoopMount::new(&parent, size, "xfs").expect("mount a loop XFS"))
}

/// Runs `cleave` with args; returns stdout as JSON, panicking with stderr on failure.
pub fn cleave_json(args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let out = Command::new(cleave_bin())
        .args(args)
        .output()
        .expect("cleave runs");
    assert!(
        out.status.success(),
        "cleave {:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("cleave {args:?}: not JSON ({e})"))
}

/// Runs `cleave` expecting failure; returns stderr.
pub fn cleave_fails(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(cleave_bin())
        .args(args)
        .output()
        .expect("cleave runs");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "cleave {args:?} should fail cleanly: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// sstcheck.py on each path; panics unless every one is ok.
pub fn sstcheck_all(shared: &Path, paths: &[PathBuf]) -> Vec<serde_json::Value> {
    let sstcheck = shared.join("tools/sstcheck.py");
    let mut args: Vec<&std::ffi::OsStr> = vec![sstcheck.as_os_str()];
    args.extend(paths.iter().map(|p| p.as_os_str()));
    let out = Command::new("python3").args(&args).output().unwrap();
    let v: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        v.len(),
        paths.len(),
        "sstcheck: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (p, r) in paths.iter().zip(&v) {
        assert_eq!(
            r["ok"].as_bool(),
            Some(true),
            "sstcheck rejects {}: {}",
            p.display(),
            r["errors"]
        );
    }
    v
}

/// `sstcheck_all`, and every sstable's first partition is at Data.db position 0 (what a
/// 5.0.5+ or unknown target needs: no dead prefix).
pub fn sstcheck_all_from_zero(shared: &Path, paths: &[PathBuf]) -> Vec<serde_json::Value> {
    let v = sstcheck_all(shared, paths);
    for (p, r) in paths.iter().zip(&v) {
        assert_eq!(
            r["first_position"],
            0,
            "{} starts with a dead prefix",
            p.display()
        );
    }
    v
}

/// The files of a directory, recursively, with their bytes: to prove a failed command
/// changed nothing.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let b = std::fs::read(&p).unwrap();
                v.push((p, b));
            }
        }
    }
    v.sort();
    v
}

/// A free loopback port (bound then released: a later bind may race, good enough for tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET `path` from 127.0.0.1:`port`; the raw response, or `None` if nothing answered.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    for _ in 0..5 {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        };
        if s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .is_err()
        {
            continue;
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        if !out.is_empty() {
            return Some(String::from_utf8_lossy(&out).to_string());
        }
    }
    None
}

/// A child process killed and reaped when dropped.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `split --parts 3 --publish on-restart --job-uid UID` of generation 1 of `table`: its
/// children pended for the next restart; the JSON report.
pub fn pend_split(table: &Path, uid: &str) -> serde_json::Value {
    cleave_json(&[
        "split".as_ref(),
        table.join("nb-1-big-Data.db").as_os_str(),
        "--out".as_ref(),
        table.as_os_str(),
        "--parts".as_ref(),
        "3".as_ref(),
        "--publish".as_ref(),
        "on-restart".as_ref(),
        "--job-uid".as_ref(),
        uid.as_ref(),
        "--json".as_ref(),
    ])
}

/// SIGKILLs a process a test started, by pid (one it did not spawn as a `Child`, e.g. the
/// PID 1 of a namespace it made), when dropped.
pub struct KillPid(pub i32);

impl Drop for KillPid {
    fn drop(&mut self) {
        // SAFETY: kill(2) of a pid this test started.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// The file names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// `cleave verify --json` over `files` (Data.db paths), asserting they verify: the
/// `total` key fingerprint (partitions, xor and sum of the key hashes).
pub fn key_fingerprint(files: &[PathBuf]) -> serde_json::Value {
    let out = Command::new(cleave_bin())
        .arg("verify")
        .args(files)
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify {files:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(v["ok"], true, "{v}");
    v["total"].clone()
}

/// The Data.db files directly in `dir`.
pub fn data_files(dir: &Path) -> Vec<PathBuf> {
    names(dir)
        .iter()
        .filter(|n| n.ends_with("-Data.db"))
        .map(|n| dir.join(n))
        .collect()
}

/// [`key_fingerprint`] of every sstable directly in `dir`.
pub fn dir_fingerprint(dir: &Path) -> serde_json::Value {
    key_fingerprint(&data_files(dir))
}

/// After a `Replace` of the parents `nb-<g>-big-*` or `da-<g>-bti-*` (`gens`): none of them
/// is left, every other sstable in `table` is complete (has its TOC.txt: no orphan), no
/// transaction log, no staging or probe, and the live keys are exactly `parents` (a
/// fingerprint from [`dir_fingerprint`] taken before). `what` names the trial in messages.
pub fn assert_replaced(what: &str, table: &Path, gens: &[&str], parents: &serde_json::Value) {
    let left = names(table);
    assert!(
        !left.iter().any(|n| gens
            .iter()
            .any(|g| n.starts_with(&format!("nb-{g}-")) || n.starts_with(&format!("da-{g}-")))),
        "{what}: a parent survived: {left:?}"
    );
    assert!(
        !left
            .iter()
            .any(|n| n.contains("_txn_") || n.starts_with('.')),
        "{what}: leftovers {left:?}"
    );
    let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for n in &left {
        let Some((p, c)) = n.rsplit_once("-big-").or_else(|| n.rsplit_once("-bti-")) else {
            continue;
        };
        groups.entry(p.to_string()).or_default().push(c.to_string());
    }
    for (p, comps) in &groups {
        assert!(
            comps.iter().any(|c| c == "TOC.txt"),
            "{what}: orphan files of {p}: {comps:?}"
        );
    }
    assert_eq!(&dir_fingerprint(table), parents, "{what}: {left:?}");
}

/// `cleave gen` of one sstable per `(generation, size)` into `table` (created), seeded by
/// its generation, without the `schema.cql` a table directory of Cassandra never has.
pub fn gen_table(table: &Path, gens: &[(u32, &str)]) {
    std::fs::create_dir_all(table).unwrap();
    for (g, size) in gens {
        let gs = g.to_string();
        cleave_json(&[
            "gen".as_ref(),
            "--out".as_ref(),
            table.as_os_str(),
            "--size".as_ref(),
            size.as_ref(),
            "--generation".as_ref(),
            gs.as_ref(),
            "--seed".as_ref(),
            gs.as_ref(),
            "--json".as_ref(),
        ]);
    }
    let _ = std::fs::remove_file(table.join("schema.cql"));
}

/// Copies every component of the sstable `data_db` into `dir` (created), names kept, as
/// fresh writable files (the corpus is read-only), so that a test can damage or replace
/// them without touching ../shared; the copy's Data.db.
pub fn copy_sstable(data_db: &Path, dir: &Path) -> PathBuf {
    let name = data_db.file_name().unwrap().to_str().unwrap();
    let prefix = name.strip_suffix("Data.db").unwrap();
    std::fs::create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(data_db.parent().unwrap()).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().into_string().unwrap();
        if n.starts_with(prefix) && e.file_type().unwrap().is_file() {
            std::fs::write(dir.join(&n), std::fs::read(e.path()).unwrap()).unwrap();
        }
    }
    dir.join(name)
}

/// Whether the independent reader cqlite (PyPI `cqlite-py`) can be imported.
pub fn cqlite_available() -> bool {
    Command::new("python3")
        .args(["-c", "import cqlite"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The rows cqlite reads (`tests/py/cqlite_dump.py`) from each of `data` in turn (one
/// sstable at a time), concatenated; fails the test on cqlite's error.
pub fn cqlite_dump_rows<P: AsRef<Path>>(
    schema: &Path,
    keyspace: &str,
    table: &str,
    data: &[P],
) -> Vec<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/cqlite_dump.py");
    let mut rows = Vec::new();
    for d in data {
        let d = d.as_ref();
        let out = python_json(&[
            script.as_os_str(),
            "--schema".as_ref(),
            schema.as_os_str(),
            "--keyspace".as_ref(),
            keyspace.as_ref(),
            "--table".as_ref(),
            table.as_ref(),
            d.as_os_str(),
        ]);
        assert!(
            out.get("error").is_none(),
            "cqlite on {}: {}",
            d.display(),
            out["error"]
        );
        rows.extend(out["rows"].as_array().unwrap().iter().cloned());
    }
    rows
}

/// The partition keys (hex) of an sstable, in index order.
pub fn index_keys(data: &Path) -> Vec<String> {
    let t = cleave::sstable::SSTable::open(data).unwrap();
    let mut r = t.index_reader().unwrap();
    let mut v = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        v.push(cleave::sstable::hex::encode(e.key));
    }
    v
}

/// (count, xor, sum) of sstcheck's key fingerprint over `paths` (each must pass): of every
/// key, or (with `ranges`, `(l, r]` Murmur3 tokens) of the keys in those ranges.
pub fn keys_fingerprint(
    shared: &Path,
    paths: &[PathBuf],
    ranges: &[(i64, i64)],
) -> (u64, u64, u64) {
    let mut c = Command::new("python3");
    c.arg(shared.join("tools/sstcheck.py")).args(paths);
    if !ranges.is_empty() {
        let r: Vec<String> = ranges.iter().map(|(l, r)| format!("{l}:{r}")).collect();
        c.env("SSTCHECK_RANGES", r.join(","));
    }
    let out = c.output().unwrap();
    let mut fp = (0u64, 0u64, 0u64);
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["ok"], true, "sstcheck: {v}");
        let v = if ranges.is_empty() {
            &v
        } else {
            &v["in_ranges"]
        };
        let h = |k: &str| u64::from_str_radix(v[k].as_str().unwrap(), 16).unwrap();
        fp.0 += v["partitions"].as_u64().unwrap();
        fp.1 ^= h("keys_xor");
        fp.2 = fp.2.wrapping_add(h("keys_sum"));
    }
    fp
}

/// Waits up to `timeout` for `cond`, polling every 100 ms; true if it held. For effects
/// that follow a status write (the sidecar removes an outcome only after its status landed).
pub fn eventually(timeout: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// One pass of the local controller as node `n1` over the manifests in `m` (`cleave run
/// --node n1 --once --metrics-addr 127.0.0.1:0 --local M`; an ephemeral metrics port so
/// tests run side by side). Callers add `--data-dir`, the management API, the environment.
pub fn run_local_once(m: &Path) -> Command {
    let mut c = Command::new(cleave_bin());
    c.args([
        "run",
        "--node",
        "n1",
        "--once",
        "--metrics-addr",
        "127.0.0.1:0",
        "--local",
    ])
    .arg(m);
    c
}

/// `cleave apply-pending --data-dir DIR --json`, output piped.
pub fn apply_pending(data_dir: &Path) -> Command {
    let mut c = Command::new(cleave_bin());
    c.arg("apply-pending")
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// [`apply_pending`], which must succeed: its JSON report.
pub fn apply_pending_ok(data_dir: &Path) -> serde_json::Value {
    let out = apply_pending(data_dir).output().unwrap();
    assert!(
        out.status.success(),
        "apply-pending: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every fault point an unharmed run of `cmd` reaches, with how many times.
pub fn fault_points(mut cmd: Command, list: &Path) -> std::collections::BTreeMap<String, usize> {
    let _ = std::fs::remove_file(list);
    let out = cmd.env("CLEAVE_CRASH_LIST", list).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut counts = std::collections::BTreeMap::new();
    for l in std::fs::read_to_string(list).unwrap_or_default().lines() {
        // A point is `<where>:<what>` or one of `replace`'s historical short names (logged,
        // renamed, committed; src/split/publish.rs): two names written into one line by
        // concurrent threads would otherwise become a point no run reaches.
        assert!(
            !l.is_empty()
                && l.split(':').count() <= 2
                && l.split(':').all(|p| !p.is_empty())
                && l.bytes().all(|b| b.is_ascii_graphic()),
            "fault list line {l:?} is not one point name"
        );
        *counts.entry(l.to_string()).or_default() += 1;
    }
    counts
}

/// sstcheck.py's partitions and key fingerprint (XOR, sum) of a child, its row filler left
/// out. sstcheck leaves out only empty filler partitions (`LIVE | END_OF_PARTITION`); a row
/// filler (fixed-width keys, static columns; `sstable::filler`) is one more partition to it,
/// the child's first. `live` is cleave's count: when sstcheck counts exactly one more and
/// found no empty one, the first key is dropped from the fingerprint; any other difference
/// fails.
pub fn sstcheck_without_row_filler(got: &serde_json::Value, live: u64) -> (u64, u64, u64) {
    let (mut xor, mut sum) = (hex64(&got["keys_xor"]), hex64(&got["keys_sum"]));
    let counted = got["partitions"].as_u64().unwrap();
    if counted == live + 1 && got["empty_partitions"] == 0 {
        let key = unhex(got["first_key"].as_str().unwrap());
        let h = cleave::sstable::token::murmur3_token(&key) as u64;
        xor ^= h;
        sum = sum.wrapping_sub(h);
    } else {
        assert_eq!(
            counted, live,
            "sstcheck's partitions against cleave's: {got}"
        );
    }
    (live, xor, sum)
}

/// A 64-bit value sstcheck.py prints in hex (`keys_xor`, `keys_sum`).
pub fn hex64(v: &serde_json::Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap(), 16).unwrap()
}

/// Bytes from their hex spelling (sstcheck's and cqlite's keys).
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
