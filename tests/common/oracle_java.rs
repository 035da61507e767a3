//! Cassandra's own writer and reader (`oracle/Oracle.java`, docs/testenv.md "Cassandra's own
//! writer and reader"): compiled once per Cassandra version with `javac --release 11` against
//! that version's jars into a cache directory keyed by the source's hash, run on that line's
//! JVM. `write_parent` makes real parents through `CQLSSTableWriter` (cached by version,
//! family, options and seed); `dump` reads sets of sstables through Cassandra's reader, linearly
//! from position 0 (`getScanner()`) and key by key through the index, into canonical
//! partitions that compare by digest.
//!
//! Paths, JVM and flags come from `scripts/cassandra-testenv.sh`'s query verbs (`java`,
//! `classpath`, `jvm-opts`, `versions`): one source of truth with the live-node helpers.

use super::cassandra::one_line;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The Java source, compiled per version.
const SOURCE: &str = include_str!("../../oracle/Oracle.java");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `${CLEAVE_CACHE:-$HOME/.cache/cleave}`.
pub fn cache_root() -> PathBuf {
    std::env::var_os("CLEAVE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/cleave")
        })
}

/// The pinned versions (`cassandra-testenv.sh versions`), newest first.
pub fn versions() -> Vec<String> {
    one_line(&["versions"])
        .map(|s| s.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// The first pinned version of a line (`"5.0"`, `"4.1"`, `"4.0"`), or for `"5.0.4"` that exact
/// release; `None` if none is pinned.
pub fn version_of(line: &str) -> Option<String> {
    let v = versions();
    if v.iter().any(|x| x == line) {
        return Some(line.to_string());
    }
    v.into_iter()
        .find(|x| x.starts_with(&format!("{line}.")) && x.as_str() != "5.0.4")
}

/// A compiled oracle for one Cassandra version: its JVM, flags and class path.
#[derive(Clone, Debug)]
pub struct Oracle {
    pub version: String,
    java: String,
    opts: Vec<String>,
    classpath: String,
}

/// Whether a missing oracle must fail the test (`CI=true`) rather than skip it.
pub fn strict() -> bool {
    std::env::var("CI").map(|v| v == "true").unwrap_or(false)
}

/// FNV-1a 64: a stable hash (the source's cache key, the dump digest).
pub fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The oracle for `version`, compiled if needed; `None` (with the reason printed) when the
/// version is not installed, outside CI. Under `CI=true` a missing oracle fails the test.
pub fn oracle_or_skip(test: &str, version: &str) -> Option<Oracle> {
    static COMPILED: OnceLock<Mutex<std::collections::BTreeMap<String, Result<Oracle, String>>>> =
        OnceLock::new();
    let m = COMPILED.get_or_init(Default::default);
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    let r = m
        .entry(version.to_string())
        .or_insert_with(|| compile(version))
        .clone();
    match r {
        Ok(o) => Some(o),
        Err(why) if strict() => panic!("{test}: the Cassandra {version} oracle is missing: {why}"),
        Err(why) => {
            eprintln!("SKIP {test}: the Cassandra {version} oracle is missing: {why}");
            None
        }
    }
}

fn compile(version: &str) -> Result<Oracle, String> {
    let java = one_line(&["java", version])?;
    let cp = one_line(&["classpath", version])?;
    let opts: Vec<String> = one_line(&["jvm-opts", version, "client"])?
        .split_whitespace()
        .map(String::from)
        .collect();
    let classes = compiled("Oracle", SOURCE, version, &cp)?;
    Ok(Oracle {
        version: version.to_string(),
        java,
        opts,
        classpath: format!("{}:{cp}", classes.display()),
    })
}

/// `oracle/<class>.java` (text `source`) compiled with `javac --release 11` against a
/// version's classpath `cp` (so it runs on every line's JVM), cached under
/// `oracle-classes/<tag>-<hash of the source>`: the directory of its classes.
pub fn compiled(class: &str, source: &str, tag: &str, cp: &str) -> Result<PathBuf, String> {
    let key = format!("{:016x}", fnv(source.as_bytes()));
    let classes = cache_root().join(format!("cassandra/oracle-classes/{tag}-{key}"));
    if !classes.join(format!("{class}.class")).is_file() {
        // Compiled into a private directory, then renamed: concurrent test binaries never
        // see half a compilation.
        let tmp = private(&classes);
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let out = Command::new("javac")
            .args(["--release", "11", "-nowarn", "-cp", cp, "-d"])
            .arg(&tmp)
            .arg(repo().join(format!("oracle/{class}.java")))
            .output()
            .map_err(|e| format!("javac: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "javac --release 11 {class}.java against {cp}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if std::fs::rename(&tmp, &classes).is_err() {
            // Another process won the race with the same classes.
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    Ok(classes)
}

/// A private sibling of `path` for this process and call (threads of one test binary write
/// different parents at once), renamed onto `path` when complete.
fn private(path: &Path) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp{}-{n}", std::process::id()));
    path.with_file_name(name)
}

/// The schema families (oracle/Oracle.java `families()`), one list for the offline and the
/// live oracle; the `tomb_*` ones need DELETE in CQLSSTableWriter, which 4.0 lacks
/// (CASSANDRA-14797 is 4.1).
pub const FAMILIES: [&str; 14] = [
    "uuid_plain",
    "timeuuid_ck",
    "int_ck2desc",
    "bigint_static",
    "text_coll",
    "blob_ck",
    "text_int",
    "int_bigint",
    "tomb_row",
    "tomb_range",
    "tomb_partition",
    "tomb_cell",
    "ts_plain",
    "int_uuid",
];

/// Codec and chunk size per family, cycling so every codec and chunk size is covered on every
/// version (the offline matrix's parents; the live oracle imports the same cached ones).
pub fn write_opts(i: usize) -> WriteOpts {
    let codecs = ["lz4", "snappy", "deflate", "none", "lz4", "zstd"];
    let chunks = [4, 16, 64];
    WriteOpts {
        partitions: 600,
        compression: codecs[i % codecs.len()],
        chunk_kb: chunks[i % chunks.len()],
        seed: 30 + i as u64,
        ..WriteOpts::default()
    }
}

/// How a parent is written (`Oracle write`'s options).
#[derive(Clone, Debug)]
pub struct WriteOpts {
    pub partitions: u32,
    pub rows: u32,
    pub value_bytes: u32,
    pub seed: u64,
    /// `lz4`, `zstd`, `snappy`, `deflate` or `none`.
    pub compression: &'static str,
    pub chunk_kb: u32,
    /// `big` or `bti` (5.0 only).
    pub format: &'static str,
    /// `write --sorted true`: partitions added in token order through the writer's
    /// `sorted()` mode (no heap buffer: the big parents; one-column keys only).
    pub sorted: bool,
}

impl Default for WriteOpts {
    fn default() -> Self {
        WriteOpts {
            partitions: 200,
            rows: 4,
            value_bytes: 64,
            seed: 1,
            compression: "lz4",
            chunk_kb: 4,
            format: "big",
            sorted: false,
        }
    }
}

/// Which pass of `dump`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// `SSTableReader.getScanner()`: from Data.db position 0 in 5.0.5+ (`SSTableSimpleScanner`),
    /// index-driven before.
    Linear,
    /// Each key of the partition index, then its partition through the index.
    Index,
}

/// One partition as Cassandra read it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Partition {
    pub token: i64,
    pub key_hex: String,
    pub key_text: String,
    /// Cassandra's `toString(metadata, true)` of everything in it, or `EMPTY`.
    pub body: String,
}

impl Partition {
    /// Nothing in it: no deletion, no static row, no rows (cleave's filler partitions).
    pub fn is_empty(&self) -> bool {
        self.body == "EMPTY"
    }
}

/// One sstable's pass.
#[derive(Clone, Debug)]
pub struct DumpFile {
    pub pass: Pass,
    pub path: PathBuf,
    /// The Statistics.db fields Cassandra reports: `version=`, `repaired_at=`,
    /// `pending_repair=`, `transient=`.
    pub meta: std::collections::BTreeMap<String, String>,
    pub partitions: Vec<Partition>,
}

#[derive(Clone, Debug, Default)]
pub struct Dump {
    pub files: Vec<DumpFile>,
}

impl Dump {
    /// The passes of the sstable at `path`.
    pub fn of(&self, path: &Path, pass: Pass) -> &DumpFile {
        self.files
            .iter()
            .find(|f| f.path == path && f.pass == pass)
            .unwrap_or_else(|| panic!("no {pass:?} dump of {}", path.display()))
    }

    /// The non-empty partitions of `paths` in `pass`, sorted (token, key): what a set of
    /// sstables holds, whatever its split into files.
    pub fn rows(&self, paths: &[PathBuf], pass: Pass) -> Vec<Partition> {
        let mut v: Vec<Partition> = paths
            .iter()
            .flat_map(|p| self.of(p, pass).partitions.iter())
            .filter(|p| !p.is_empty())
            .cloned()
            .collect();
        v.sort();
        v
    }
}

/// The digest of a canonical partition list.
/// One sstable's pass as `dump --digest` sums it: `count` non-empty partitions, `empty` empty
/// ones, their tokens within `[min, max]`, and `sum`/`xor` of their MD5 prefixes (so the
/// summaries of disjoint files add up to the summary of their union).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Summary {
    pub count: u64,
    pub empty: u64,
    pub min: i64,
    pub max: i64,
    pub sum: u64,
    pub xor: u64,
}

impl Summary {
    /// The summary of the union of two disjoint sets of partitions (`empty` added too).
    pub fn add(self, o: Summary) -> Summary {
        Summary {
            count: self.count + o.count,
            empty: self.empty + o.empty,
            min: if o.count == 0 {
                self.min
            } else if self.count == 0 {
                o.min
            } else {
                self.min.min(o.min)
            },
            max: if o.count == 0 {
                self.max
            } else if self.count == 0 {
                o.max
            } else {
                self.max.max(o.max)
            },
            sum: self.sum.wrapping_add(o.sum),
            xor: self.xor ^ o.xor,
        }
    }
}

impl Summary {
    /// What `dump --digest true` prints for these partitions (oracle/Oracle.java `partition`
    /// and `summary`): the empty ones counted apart; of each other one the first 8 bytes of
    /// the MD5 of `<token>\t<key hex>\t<body>`, big-endian as Java's `ByteBuffer.getLong`,
    /// summed mod 2^64 and xored. So a subset of a full `dump` (the parent's partitions in a
    /// range) is compared with the digest of other files without a second JVM.
    pub fn of(parts: &[Partition]) -> Summary {
        use md5::{Digest, Md5};
        let mut s = Summary {
            min: i64::MAX,
            max: i64::MIN,
            ..Summary::default()
        };
        for p in parts {
            if p.is_empty() {
                s.empty += 1;
                continue;
            }
            let h = Md5::digest(format!("{}\t{}\t{}", p.token, p.key_hex, p.body).as_bytes());
            let x = u64::from_be_bytes(h[..8].try_into().expect("an MD5 has 16 bytes"));
            s.count += 1;
            s.sum = s.sum.wrapping_add(x);
            s.xor ^= x;
            s.min = s.min.min(p.token);
            s.max = s.max.max(p.token);
        }
        s
    }

    /// The same summary with the token range of no partition (`count` 0) made one value,
    /// so that summaries compare whatever the identity `min`/`max` of an empty pass.
    pub fn normalized(self) -> Summary {
        if self.count == 0 {
            Summary {
                min: 0,
                max: 0,
                ..self
            }
        } else {
            self
        }
    }
}

pub fn digest(rows: &[Partition]) -> u64 {
    let mut s = String::new();
    for p in rows {
        s.push_str(&format!("{}\t{}\t{}\n", p.token, p.key_hex, p.body));
    }
    fnv(s.as_bytes())
}

impl Oracle {
    fn java(&self) -> Command {
        let mut c = Command::new(&self.java);
        c.args(&self.opts)
            .arg("-cp")
            .arg(&self.classpath)
            .arg("Oracle");
        c
    }

    /// The table directory (`.../oracle/<family>`) of a parent written by this version's
    /// `CQLSSTableWriter`, cached under `<cache>/cassandra/oracle-parents/`.
    pub fn write_parent(&self, family: &str, o: &WriteOpts) -> PathBuf {
        let key = format!(
            "{}-{family}-{}-{}k-{}-p{}-r{}-v{}-s{}-{:08x}",
            self.version,
            o.compression,
            o.chunk_kb,
            o.format,
            o.partitions,
            o.rows,
            o.value_bytes,
            o.seed,
            fnv(SOURCE.as_bytes()) as u32
        );
        let key = if o.sorted { key + "-sorted" } else { key };
        let base = cache_root().join("cassandra/oracle-parents").join(&key);
        // Cassandra's Descriptor takes the keyspace and table from the two directories above
        // the file, so the parent sits in `oracle/<family>`.
        let table = base.join("oracle").join(family);
        if base.join(".done").is_file() {
            return table;
        }
        let tmp = private(&base);
        let _ = std::fs::remove_dir_all(&tmp);
        let ttable = tmp.join("oracle").join(family);
        std::fs::create_dir_all(&ttable).unwrap();
        let out = self
            .java()
            .arg("write")
            .arg("--out")
            .arg(&ttable)
            .args(["--family", family])
            .args(["--partitions", &o.partitions.to_string()])
            .args(["--rows", &o.rows.to_string()])
            .args(["--value-bytes", &o.value_bytes.to_string()])
            .args(["--seed", &o.seed.to_string()])
            .args(["--compression", o.compression])
            .args(["--chunk-kb", &o.chunk_kb.to_string()])
            .args(["--format", o.format])
            .args(["--sorted", if o.sorted { "true" } else { "false" }])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "Cassandra {} CQLSSTableWriter {family} {o:?}: {}",
            self.version,
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(tmp.join(".done"), "").unwrap();
        if std::fs::rename(&tmp, &base).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        table
    }

    /// Each family's table as `Oracle schema` prints it: (name, columns, options after the
    /// compression), in `families()` order.
    pub fn schema(&self) -> Vec<(String, String, String)> {
        let out = self.java().arg("schema").output().unwrap();
        assert!(
            out.status.success(),
            "Oracle schema on {}: {}",
            self.version,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.splitn(3, '\t').collect();
                assert_eq!(f.len(), 3, "Oracle schema line {l:?}");
                (f[0].to_string(), f[1].to_string(), f[2].to_string())
            })
            .collect()
    }

    /// Reads `files` (Data.db paths) with this version's reader, both passes, in one JVM;
    /// `Err` with Cassandra's message when its reader throws.
    pub fn try_dump(&self, files: &[PathBuf]) -> Result<Dump, String> {
        let out = self
            .java()
            .arg("dump")
            .args(["--mode", "both"])
            .args(files)
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).to_string());
        }
        Ok(parse_dump(&String::from_utf8_lossy(&out.stdout)))
    }

    /// [`Oracle::try_dump`], failing the test when Cassandra's reader throws.
    /// `dump --digest true`: per file, the summary of its index and linear passes
    /// (`Summary`), without holding any row.
    pub fn dump_digest(&self, files: &[PathBuf]) -> Vec<(Pass, PathBuf, Summary)> {
        self.digests(files, "both", "true")
    }

    /// `dump --mode linear --digest rows`: one summary of every row of `files` (each row
    /// hashed alone, so the sum over a table's sstables does not change when Cassandra
    /// merges one partition's rows from two sstables into one; `empty` counts partitions
    /// without a row, cleave's fillers).
    pub fn row_digest(&self, files: &[PathBuf]) -> Summary {
        self.digests(files, "linear", "rows")
            .into_iter()
            .fold(Summary::default(), |a, (_, _, s)| a.add(s))
    }

    fn digests(
        &self,
        files: &[PathBuf],
        mode: &str,
        digest: &str,
    ) -> Vec<(Pass, PathBuf, Summary)> {
        let out = self
            .java()
            .arg("dump")
            .args(["--mode", mode, "--digest", digest])
            .args(files)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "Cassandra {} cannot read {files:?}: {}",
            self.version,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .take(12)
                .collect::<Vec<_>>()
                .join("\n")
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut v = Vec::new();
        let mut cur: Option<(Pass, PathBuf)> = None;
        for line in text.lines() {
            if let Some(h) = line.strip_prefix("## ") {
                let kv: std::collections::BTreeMap<&str, &str> =
                    h.split(' ').filter_map(|x| x.split_once('=')).collect();
                let num = |k: &str| -> i128 {
                    kv.get(k)
                        .and_then(|x| x.parse().ok())
                        .unwrap_or_else(|| panic!("summary {k}: {line}"))
                };
                let (pass, path) = cur.take().expect("a summary before its header");
                v.push((
                    pass,
                    path,
                    Summary {
                        count: num("count") as u64,
                        empty: num("empty") as u64,
                        min: num("min") as i64,
                        max: num("max") as i64,
                        sum: num("sum") as u64,
                        xor: num("xor") as u64,
                    },
                ));
            } else if let Some(h) = line.strip_prefix("# ") {
                let mut it = h.split(' ');
                let pass = match it.next() {
                    Some("linear") => Pass::Linear,
                    Some("index") => Pass::Index,
                    other => panic!("dump header {other:?}: {line}"),
                };
                cur = Some((pass, PathBuf::from(it.next().unwrap())));
            } else {
                panic!("digest dump line: {line}");
            }
        }
        v
    }

    pub fn dump(&self, files: &[PathBuf]) -> Dump {
        self.try_dump(files).unwrap_or_else(|e| {
            panic!(
                "Cassandra {} cannot read {files:?}: {}",
                self.version,
                e.lines().take(12).collect::<Vec<_>>().join("\n")
            )
        })
    }

    /// Runs a Cassandra class offline with this version's client flags (e.g.
    /// `org.apache.cassandra.tools.SSTableExport`); its stdout. Tools that call
    /// `DatabaseDescriptor.toolInitialization()` want a yaml (`cassandra.config` as a URL):
    /// a minimal one with throwaway directories, and on 5.0 `storage_compatibility_mode: NONE`
    /// — with the default (`CASSANDRA_4`) 5.0.9's SSTableExport refuses the `oa` files 5.0
    /// writes ("incompatible sstable version (oa); you should have run upgradesstables").
    pub fn tool(&self, class: &str, args: &[&std::ffi::OsStr]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let mut yaml = format!(
            "cluster_name: oracle\n\
             partitioner: org.apache.cassandra.dht.Murmur3Partitioner\n\
             endpoint_snitch: SimpleSnitch\n\
             commitlog_sync: periodic\n\
             commitlog_sync_period_in_ms: 10000\n\
             seed_provider: [{{class_name: org.apache.cassandra.locator.SimpleSeedProvider, \
             parameters: [{{seeds: \"127.0.0.1\"}}]}}]\n\
             data_file_directories: [{d}/data]\n\
             commitlog_directory: {d}/commitlog\n\
             saved_caches_directory: {d}/saved_caches\n\
             hints_directory: {d}/hints\n"
        );
        if self.version.starts_with("5.") {
            yaml.push_str("storage_compatibility_mode: NONE\n");
        }
        let y = dir.path().join("cassandra.yaml");
        std::fs::write(&y, yaml).unwrap();
        let out = Command::new(&self.java)
            .args(&self.opts)
            .arg(format!("-Dcassandra.config=file://{}", y.display()))
            .arg("-cp")
            .arg(&self.classpath)
            .arg(class)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{class} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }
}

fn parse_dump(text: &str) -> Dump {
    let mut d = Dump::default();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("# ") {
            let mut it = h.split(' ');
            let pass = match it.next() {
                Some("linear") => Pass::Linear,
                Some("index") => Pass::Index,
                other => panic!("dump header {other:?}: {line}"),
            };
            let path = PathBuf::from(it.next().unwrap());
            let meta = it
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            d.files.push(DumpFile {
                pass,
                path,
                meta,
                partitions: Vec::new(),
            });
            continue;
        }
        let f: Vec<&str> = line.splitn(4, '\t').collect();
        assert_eq!(f.len(), 4, "dump line: {line}");
        let cur = d.files.last_mut().expect("a partition before any header");
        cur.partitions.push(Partition {
            token: f[0]
                .parse()
                .unwrap_or_else(|e| panic!("token {}: {e}", f[0])),
            key_hex: f[1].to_string(),
            key_text: f[2].to_string(),
            body: f[3].to_string(),
        });
    }
    d
}

/// `write_parent` through the version's oracle (the contract's free function).
pub fn write_parent(version: &str, family: &str, o: &WriteOpts) -> Option<PathBuf> {
    oracle_or_skip("write_parent", version).map(|or| or.write_parent(family, o))
}

/// `dump` through the version's oracle: the canonical partitions of `files` in `pass` and
/// their digest.
pub fn dump(version: &str, files: &[PathBuf], pass: Pass) -> Option<(Vec<Partition>, u64)> {
    let or = oracle_or_skip("dump", version)?;
    let d = or.dump(files);
    let rows = d.rows(files, pass);
    let dg = digest(&rows);
    Some((rows, dg))
}
