//! Stock Cassandra judges cleave's children on a live node (issue 30, deliverables 4 and 5,
//! the live half). For each pinned version, one node (one version at a time), every schema
//! family of the offline matrix (`common::oracle_java::FAMILIES`, oracle/Oracle.java
//! `families()`): the family's parent written by Cassandra's own `CQLSSTableWriter` (the
//! offline matrix's cached parents), imported into the node and rewritten there by `nodetool
//! compact` (so every parent is the node's own sstable, LZ4 in 4 KiB chunks whatever its
//! writer's codec); cleave splits (`--parts`, `--tokens`), anticompacts (CLI and a local
//! `AnticompactionJob` through `cleave run --local`), cleans up, streams (a real `cleave stream
//! serve` receiver importing with the node's own nodetool) and rewrites copies of it, each
//! operation with the default target and with the node's version (`OTHER_TARGET`); the node
//! imports the children (`nodetool import --keep-repaired`), reports the repair state of the
//! anticompaction children (`sstablemetadata`), verifies them (`verify -e -f`), SELECTs every
//! row (equal to the parent's in the children's ranges), compacts, SELECTs again and reads
//! what it then holds with Cassandra's own reader (`judge_compacted`: a snapshot dumped by
//! `Oracle dump --digest`, equal to the parent's dump in the children's ranges). Then the
//! negative controls (one flipped byte, one missing partition, one dropped tombstone partition
//! that only the dump finds, a dead-prefix child made for 4.1
//! on each version; docs/testenv.md records what each Cassandra does with them) and the
//! `OnRestart` path of every family (children placed by `apply-pending` while the node is
//! stopped, one restart).
//!
//! Batched so that the whole matrix fits the CI budget: one nodetool JVM for the whole test
//! (`NodeToolServer`), one `nodetool import` per table with all its child directories, one
//! `verify` and one `compact` per keyspace, one `cql` session per round of SELECTs, one
//! `sstablemetadata` JVM for every repaired child, one restart for every family's OnRestart.
//! Every assertion still names the version, the family, the operation and, for an import,
//! the child directory.
#![cfg(test)]

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use common::cassandra::{self, Node};
use common::oracle_java::{
    oracle_or_skip, version_of, write_opts, Oracle, Partition, Pass, Summary, FAMILIES,
};
use common::*;

const KS: &str = "oracle";
/// The repair time anticompaction writes into repaired children.
const REPAIRED_AT: i64 = 1_764_600_000_000;
/// The pending repair session of the local `AnticompactionJob`'s pending children.
const PENDING: &str = "6a3f4c2e-1d2b-11ef-9c4e-0242ac120002";
/// The middle half of the Murmur3 ring, `(-2^62, 2^62]`: owned by the cleanup, repaired by
/// the anticompaction.
const MID: (i64, i64) = (-(1 << 62), 1 << 62);

/// One schema family as the node's table: `Oracle schema`'s columns and options, and what a
/// SELECT compares.
struct Family {
    name: String,
    columns: String,
    extra: String,
    /// The partition key columns, as `token(...)` takes them.
    pk: String,
    /// Every column, and the write time of the last single-cell regular column (kept by a
    /// split; a non-frozen collection has no one write time).
    select: String,
    /// Only deletions (`tomb_*`): CQL returns no row of them, before or after a split.
    tombstones_only: bool,
}

/// `s` split at its top-level commas (not inside `(...)` or `<...>`).
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for ch in s.chars() {
        match ch {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

impl Family {
    fn new(name: &str, columns: &str, extra: &str) -> Family {
        let (mut cols, mut pk, mut keys, mut multicell) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for item in split_top(columns) {
            if let Some(rest) = item.strip_prefix("PRIMARY KEY") {
                let inner = rest
                    .trim()
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .unwrap_or_else(|| panic!("{name}: primary key {item:?}"));
                let parts = split_top(inner);
                let first = parts[0].trim();
                pk = match first.strip_prefix('(') {
                    Some(p) => split_top(p.trim_end_matches(')')),
                    None => vec![first.to_string()],
                };
                keys.extend(pk.clone());
                keys.extend(parts[1..].iter().cloned());
            } else {
                let mut w = item.split_whitespace();
                let col = w.next().unwrap_or_default().to_string();
                let ty = w.next().unwrap_or_default();
                if item.ends_with("PRIMARY KEY") {
                    pk = vec![col.clone()];
                    keys.push(col.clone());
                }
                if ["list<", "set<", "map<"].iter().any(|m| ty.starts_with(m)) {
                    multicell.push(col.clone());
                }
                cols.push(col);
            }
        }
        assert!(!pk.is_empty(), "{name}: no partition key in {columns:?}");
        let wt = cols
            .iter()
            .rev()
            .find(|c| !keys.contains(c) && !multicell.contains(c));
        let select = match wt {
            Some(c) => format!("{}, writetime({c})", cols.join(", ")),
            None => cols.join(", "),
        };
        Family {
            name: name.to_string(),
            columns: columns.to_string(),
            extra: extra.to_string(),
            pk: pk.join(", "),
            select,
            tombstones_only: name.starts_with("tomb_"),
        }
    }

    fn create(&self, table: &str) -> String {
        // 4 KiB chunks: a parent of a hundred KiB spans enough chunks for interior (shared)
        // chunks and dead prefixes. Background compaction off so that what a test imports is
        // what it finds, until it asks for `nodetool compact`; a ten-year gc_grace so that no
        // compaction purges the writer's tombstones (their deletion time is when the cached
        // parent was written).
        format!(
            "CREATE TABLE {KS}.{table} ({}) WITH compression = {{'class': 'LZ4Compressor', \
             'chunk_length_in_kb': '4'}} AND compaction = {{'class': \
             'SizeTieredCompactionStrategy', 'enabled': 'false'}} AND gc_grace_seconds = \
             315360000{}",
            self.columns, self.extra
        )
    }

    /// The SELECT of every row of `table`: `token<TAB>columns...`.
    fn query(&self, table: &str) -> String {
        format!(
            "SELECT token({}), {} FROM {KS}.{table}",
            self.pk, self.select
        )
    }
}

/// Phase times of one version's run, printed at its end (docs/testenv.md quotes them).
struct Clock {
    version: String,
    t0: Instant,
    last: Instant,
    laps: Vec<(String, f64)>,
}

impl Clock {
    fn new(version: &str) -> Clock {
        let now = Instant::now();
        Clock {
            version: version.to_string(),
            t0: now,
            last: now,
            laps: Vec::new(),
        }
    }
    fn lap(&mut self, what: &str) {
        let d = self.last.elapsed().as_secs_f64();
        self.last = Instant::now();
        eprintln!("{}: {what}: {d:.1}s", self.version);
        self.laps.push((what.to_string(), d));
    }
    fn report(&self) {
        let parts: Vec<String> = self
            .laps
            .iter()
            .map(|(w, d)| format!("{w} {d:.1}"))
            .collect();
        eprintln!(
            "{}: done in {:.1}s: {}",
            self.version,
            self.t0.elapsed().as_secs_f64(),
            parts.join(", ")
        );
    }
}

fn token_of(row: &str) -> i64 {
    row.split('\t')
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token in row {row:?}"))
}

/// `cleave ARGS...` (with `--json`), which must succeed: its report.
fn cleave(args: &[&OsStr]) -> serde_json::Value {
    let out = std::process::Command::new(cleave_bin())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cleave {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("cleave {args:?}: not JSON ({e})"))
}

fn write_ranges(path: &Path, ranges: &[(i64, i64)]) -> PathBuf {
    let mut y = String::new();
    for (s, e) in ranges {
        y.push_str(&format!("- {{start: \"{s}\", end: \"{e}\"}}\n"));
    }
    std::fs::write(path, y).unwrap();
    path.to_path_buf()
}

fn ok(what: &str, out: &std::process::Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what}: {text}");
    text
}

/// One imported table: its family, the operation that made its children, the directories
/// whose children go in (none: the stream receiver imported them itself), and the rows the
/// node must then return.
struct Case {
    table: String,
    family: usize,
    op: &'static str,
    children: Vec<PathBuf>,
    expected: Vec<String>,
    /// Made for a target that reads through the index (5.0.4, 4.x): children may start with
    /// a dead prefix, which extended verify refuses.
    dead_prefix: bool,
}

/// Whether `version`'s compaction reads Data.db from position 0 (`SSTableSimpleScanner`,
/// 5.0.5 and later).
fn linear_reader(version: &str) -> bool {
    version
        .strip_prefix("5.0.")
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|p| p >= 5)
}

fn split_args<'a>(parent: &'a Path, out: &'a Path, rest: &[&'a str]) -> Vec<&'a OsStr> {
    let mut a: Vec<&OsStr> = vec![
        "split".as_ref(),
        parent.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
        "--json".as_ref(),
    ];
    a.extend(rest.iter().map(|s| OsStr::new(*s)));
    a
}

/// `cleave stream serve` for a live node: its staging on the node's filesystem (beside, not
/// inside, the data directory), `--cassandra-version` the node's, and the node's own
/// `nodetool import --keep-repaired` (through the test's NodeToolServer) as the import
/// command. Killed on drop.
struct RangeStreamReceiver {
    recv: common::stream::Receiver,
    auth: Vec<String>,
}

impl RangeStreamReceiver {
    fn start(node: &Node, base: &Path, version: &str) -> RangeStreamReceiver {
        std::fs::create_dir_all(base.join("recv")).unwrap();
        let (_, auth) = common::stream::token_args(base, "oracle");
        let data = node.data_dir();
        // The receiver splits the template on whitespace (`stream::receive`).
        let import = format!(
            "{} import --keep-repaired {{keyspace}} {{table}} {{dir}}",
            node.nodetool_command()
        );
        let mut args: Vec<&str> = auth.iter().map(String::as_str).collect();
        args.extend([
            "--data-dir",
            data.to_str().unwrap(),
            "--cassandra-version",
            version,
            "--stream-import-command",
            &import,
            "--min-free-percent",
            "1",
        ]);
        let recv = common::stream::serve(&base.join("recv/staging"), &args);
        RangeStreamReceiver { recv, auth }
    }

    /// `cleave stream send` of `parent`'s range children in MID to `KS.table` on the
    /// `version` node, made for `target` (`None`: the default), imported by the receiver;
    /// it must succeed.
    fn send(&self, parent: &Path, table: &str, version: &str, target: Option<&str>) {
        let ranges = format!("{}:{}", MID.0, MID.1);
        let mut args: Vec<&str> = self.auth.iter().map(String::as_str).collect();
        args.extend([
            "--keyspace",
            KS,
            "--table",
            table,
            "--import",
            "import",
            "--ranges",
            &ranges,
            "--transfer-prefix",
            "oracle",
            "--group",
            "oracle",
        ]);
        if let Some(t) = target {
            args.extend(["--target-cassandra", t]);
        }
        let sent = common::stream::send(self.recv.port, &[parent], &args);
        assert!(
            sent.ok,
            "{version}: stream send to {table}: {}{}",
            sent.stdout, sent.stderr
        );
        let reports = sent.json();
        let r = &reports[0];
        assert_eq!(r["verdict"]["import"], "Import", "{version} {table}: {r}");
        eprintln!(
            "{version}: RangeStream to {table}: {} partitions, {} of {} bytes zero-copy, imported by the receiver",
            r["verdict"]["partitions"], r["bytesZeroCopy"], r["bytesTotal"]
        );
    }
}

/// The operations each family goes through, one table each (`<family>_<op>`): with the
/// default target (unknown, the strictest), `own` and `strm` with the node's version.
const OPS: [&str; 8] = [
    "parts", "tokens", "own", "anti", "clean", "strm", "rw", "acj",
];

/// Each operation again with the other target (issue 30: both targets for every
/// operation): the node's version for `tokens`, `anti`, `clean` and `acj` (`<op>own`), the
/// default for `strm` (`strmdef`). A target decides one thing,
/// `TargetCassandra::scans_data_from_zero`, which is the default's answer for a node that
/// reads Data.db from position 0 (5.0.5+): there the node's version makes the default's
/// children byte for byte (asserted, [`assert_same_children`]), which the node judges under
/// the operation's own table; elsewhere (5.0.4, 4.x: a dead prefix kept) the variant is
/// imported and judged under its own table.
const OTHER_TARGET: [&str; 5] = ["tokown", "antiown", "cleanown", "acjown", "strmdef"];

/// The tables the node imports and judges on `version`: every operation, and the other
/// target's variants where they make other bytes (always `strmdef`: the receiver imports
/// what it is sent).
fn ops(version: &str) -> Vec<&'static str> {
    let mut v = OPS.to_vec();
    v.extend(
        OTHER_TARGET
            .into_iter()
            .filter(|o| !linear_reader(version) || *o == "strmdef"),
    );
    v
}

/// The node's version as a target, with `--digest combine` where it keeps a dead prefix:
/// without a Digest, import's verify takes the extended path, which refuses a dead prefix
/// (docs/split.md "Digest"). Where it keeps none the digest stays the default's, so that the
/// children are the default's bytes.
fn own_target(version: &str) -> Vec<&str> {
    let mut v = vec!["--target-cassandra", version];
    if !linear_reader(version) {
        v.extend(["--digest", "combine"]);
    }
    v
}

/// The node's-version children `own` of an operation whose default-target children are in
/// `default`: on a node that reads from position 0 they must be the same bytes (nothing
/// more to import), elsewhere they are imported as a table of their own.
fn to_import(version: &str, what: &str, default: &Path, own: PathBuf) -> Option<PathBuf> {
    if linear_reader(version) {
        assert_same_children(&format!("{version} {what}"), default, &own);
        None
    } else {
        Some(own)
    }
}

/// The files below `a` and below `b` (the default target's children and the node's
/// version's, on a node that reads from position 0): the same names, the same bytes.
fn assert_same_children(what: &str, a: &Path, b: &Path) {
    let tree = |d: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        snapshot(d)
            .into_iter()
            .map(|(p, bytes)| (p.strip_prefix(d).unwrap().to_path_buf(), bytes))
            .collect()
    };
    let (ta, tb) = (tree(a), tree(b));
    assert!(
        ta.iter()
            .any(|(p, _)| p.to_string_lossy().ends_with("Data.db")),
        "{what}: no child in {}",
        a.display()
    );
    let names = |t: &[(PathBuf, Vec<u8>)]| t.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(names(&ta), names(&tb), "{what}: the children's files");
    for ((p, x), (_, y)) in ta.iter().zip(&tb) {
        assert!(
            x == y,
            "{what}: {} differs between the targets",
            p.display()
        );
    }
}

/// The families' parents as their writers made them: `version`'s own `CQLSSTableWriter`
/// (the offline matrix's cached parents, `write_opts`), or 4.1's for the `tomb_*` families on
/// 4.0, whose writer has no DELETE (CASSANDRA-14797); 4.1 writes the same `nb` format.
fn written_parents(test: &str, version: &str, or: &Oracle) -> Option<Vec<Vec<PathBuf>>> {
    let mut out = Vec::new();
    for (i, f) in FAMILIES.iter().enumerate() {
        let writer = if f.starts_with("tomb_") && version.starts_with("4.0.") {
            let v41 = version_of("4.1").unwrap_or_else(|| panic!("{test}: no 4.1 pinned"));
            oracle_or_skip(test, &v41)?
        } else {
            or.clone()
        };
        let dir = writer.write_parent(f, &write_opts(i));
        out.push(data_files(&dir));
    }
    Some(out)
}

/// The sstable format a node writes (`cassandra-testenv.sh start --sstable-format`): its
/// compaction rewrites the imported parents into it, so every operation below runs on
/// parents of that format.
#[derive(Clone, Copy, PartialEq)]
enum Written {
    Big,
    Bti,
}

/// The whole matrix on one version's node.
fn live(version: &str, format: Written) {
    let test = match format {
        Written::Big => format!("live_{}", version.replace('.', "_")),
        Written::Bti => format!("live_bti_{}", version.replace('.', "_")),
    };
    let Some(()) = cassandra::require(&test, cassandra::installed(version)) else {
        return;
    };
    let Some(or) = oracle_or_skip(&test, version) else {
        return;
    };
    let _one_node = cassandra::node_lock();
    let mut clock = Clock::new(version);
    // The node's data and every copy on one filesystem: a loop XFS (reflink) when it can be
    // had, so that children share their parent's chunks as in production.
    let xfs = cleave::io::loopfs::unavailable_reason().is_none().then(|| {
        cleave::io::loopfs::LoopMount::new(&std::env::temp_dir(), 3 << 30, "xfs")
            .expect("mount a loop XFS")
    });
    let tmp = tempfile::tempdir().unwrap();
    let base = xfs
        .as_ref()
        .map(|m| m.mount_point.clone())
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let Some(mut node) = cassandra::require(
        &test,
        Node::start(
            version,
            &base.join("node"),
            match format {
                Written::Big => &["--unsafe-system"][..],
                Written::Bti => &["--unsafe-system", "--sstable-format", "bti"][..],
            },
        ),
    ) else {
        return;
    };
    clock.lap("node start");
    let work = base.join("work");
    let fams: Vec<Family> = or
        .schema()
        .iter()
        .map(|(n, c, e)| Family::new(n, c, e))
        .collect();
    let names: Vec<&str> = fams.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, FAMILIES, "Oracle schema lists the families");
    let Some(written) = written_parents(&test, version, &or) else {
        return;
    };
    // The nodetool JVM, started now so that its start is not charged to the first import.
    drop(node.nodetool_server());
    clock.lap("parents written (CQLSSTableWriter, cached) and nodetool JVM");

    // 1. The schema: per family, its parent table and one table per operation; the
    // negative controls' tables.
    let mut ddl = vec![format!(
        "CREATE KEYSPACE {KS} WITH replication = {{'class': 'SimpleStrategy', \
         'replication_factor': 1}}"
    )];
    for f in &fams {
        ddl.push(f.create(&format!("p_{}", f.name)));
        for op in ops(version) {
            ddl.push(f.create(&format!("{}_{op}", f.name)));
        }
    }
    let (neg, dp) = (&fams[NEG], &fams[DP]);
    for t in ["miss", "flip"] {
        ddl.push(neg.create(&format!("{}_{t}", neg.name)));
    }
    ddl.push(fams[TOMB].create(&format!("{}_miss", fams[TOMB].name)));
    for t in ["dp", "stg"] {
        ddl.push(dp.create(&format!("{}_{t}", dp.name)));
    }
    node.cql(&ddl);
    clock.lap(&format!("schema ({} statements)", ddl.len()));

    // 2. The parents: each writer's sstable imported, then rewritten by the node's own
    // compaction into its table's LZ4 4 KiB chunks.
    let p_tables: Vec<String> = fams.iter().map(|f| format!("p_{}", f.name)).collect();
    for (i, f) in fams.iter().enumerate() {
        let d = work.join("pin").join(&f.name).join(KS).join(&p_tables[i]);
        for w in &written[i] {
            copy_sstable(w, &d);
        }
        ok(
            &format!("{version} {}: import the writer's parent", f.name),
            &node.import_dirs(KS, &p_tables[i], &[d]),
        );
    }
    let p_refs: Vec<&str> = p_tables.iter().map(String::as_str).collect();
    ok(
        &format!("{version}: compact the parents"),
        &node.compact(KS, &p_refs),
    );
    let parent_rows = node.select_many(
        &fams
            .iter()
            .zip(&p_tables)
            .map(|(f, t)| f.query(t))
            .collect::<Vec<_>>(),
    );
    let prefix = match format {
        Written::Bti => "da-",
        Written::Big if version.starts_with('5') => "oa-",
        Written::Big => "nb-",
    };
    let mut parents = Vec::new();
    for (i, f) in fams.iter().enumerate() {
        let r = &parent_rows[i];
        if f.tombstones_only {
            assert!(r.is_empty(), "{version} {}: {} rows", f.name, r.len());
        } else {
            assert!(r.len() > 100, "{version} {}: {} rows", f.name, r.len());
        }
        // The compacted input's files go when its last reference is released, which may
        // lag the end of `nodetool compact` a little (`SSTableReader`'s tidy).
        let dir = node.table_dir(KS, &p_tables[i]);
        eventually(std::time::Duration::from_secs(20), || {
            data_files(&dir).len() == 1
        });
        let live = data_files(&dir);
        assert_eq!(
            live.len(),
            1,
            "{version} p_{} after compact: {live:?}",
            f.name
        );
        let name = live[0].file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with(prefix), "{version} compacted {name}");
        let ci =
            std::fs::read(live[0].with_file_name(name.replace("Data.db", "CompressionInfo.db")))
                .unwrap();
        assert!(
            ci.windows(13).any(|w| w == b"LZ4Compressor"),
            "{version} p_{}: the node's compaction writes its table's LZ4",
            f.name
        );
        parents.push(copy_sstable(&live[0], &work.join("parents").join(&f.name)));
    }
    clock.lap("parents imported, compacted by the node, SELECTed");

    // 3. cleave makes the children.
    let mid_yaml = write_ranges(&work.join("mid.yaml"), &[MID]);
    let in_mid = |r: &String| token_of(r) > MID.0 && token_of(r) <= MID.1;
    let mut cases = Vec::new();
    // RangeStream's receiver for this node (`cleave stream serve`, a real process over
    // loopback), which checks each child and runs the node's own `nodetool import
    // --keep-repaired` on it (`import: Import`).
    let receiver = RangeStreamReceiver::start(&node, &base, version);
    for (i, f) in fams.iter().enumerate() {
        let parent = &parents[i];
        let all = parent_rows[i].clone();
        let mid: Vec<String> = all.iter().filter(|r| in_mid(r)).cloned().collect();
        let out = |op: &str| {
            let d = work.join(format!("{}_{op}", f.name));
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        let mut case = |op: &'static str, children: Vec<PathBuf>, expected: &Vec<String>, dp| {
            cases.push(Case {
                table: format!("{}_{op}", f.name),
                family: i,
                op,
                children,
                expected: expected.clone(),
                dead_prefix: dp,
            })
        };
        // Default target (unknown: no dead prefix, fillers or regrid).
        let d = out("parts");
        let r = cleave(&split_args(parent, &d, &["--parts", "3"]));
        // No family regrids: variable-length keys get empty filler partitions,
        // fixed-width keys and static columns a row filler (issue 32), so what the node
        // imports, verifies and compacts below is the filler layout itself.
        let children = r["children"].as_array().expect("split report's children");
        let fillers: u64 = children
            .iter()
            .map(|c| c["filler_partitions"].as_u64().unwrap_or(0))
            .sum();
        // A child may still re-encode its first chunk (`no_aligned_encoding`: no encoding of
        // the filler puts the next whole chunk on the chunk grid), never regrid for a dead prefix.
        for c in children {
            assert_ne!(c["layout"], "regrid", "{version} {}: {c}", f.name);
            let reason = c["fallback"]["reason"].as_str().unwrap_or("");
            assert!(
                !reason.starts_with("dead_prefix"),
                "{version} {}: {c}",
                f.name
            );
        }
        eprintln!(
            "{version} {}: default target, {} children, {fillers} filler partitions",
            f.name,
            children.len()
        );
        case("parts", vec![d], &all, false);
        // Tokens: the parent's own quartiles (the children cut inside the data).
        let d = out("tokens");
        let toks: Vec<i64> = all.iter().map(|r| token_of(r)).collect();
        let cut = if toks.len() >= 4 {
            format!("{},{}", toks[toks.len() / 4], toks[toks.len() * 3 / 4])
        } else {
            format!("{},{}", MID.0, MID.1)
        };
        cleave(&split_args(parent, &d, &["--tokens", &cut]));
        let own = out("tokown");
        let mut a = vec!["--tokens", cut.as_str()];
        a.extend(own_target(version));
        cleave(&split_args(parent, &own, &a));
        if let Some(own) = to_import(version, &format!("{} tokown", f.name), &d, own) {
            case("tokown", vec![own], &all, true);
        }
        case("tokens", vec![d], &all, false);
        // The node's own version as the target (a dead prefix kept where it reads from the
        // index: 5.0.4 and 4.x). `--digest combine`: without a Digest, import's verify takes
        // the extended path, which refuses a dead prefix (docs/split.md "Digest").
        let d = out("own");
        cleave(&split_args(
            parent,
            &d,
            &[
                "--parts",
                "3",
                "--target-cassandra",
                version,
                "--digest",
                "combine",
            ],
        ));
        case("own", vec![d], &all, !linear_reader(version));
        // Anticompaction (CLI): the middle half repaired at REPAIRED_AT, the rest
        // unrepaired; both imported (--keep-repaired), every row back.
        let d = out("anti");
        let rep = REPAIRED_AT.to_string();
        let anti = [
            "--ranges",
            mid_yaml.to_str().unwrap(),
            "--repaired-at",
            &rep,
        ];
        cleave(&split_args(parent, &d, &anti));
        let own = out("antiown");
        cleave(&split_args(
            parent,
            &own,
            &[&anti[..], &own_target(version)].concat(),
        ));
        if let Some(own) = to_import(version, &format!("{} antiown", f.name), &d, own) {
            case("antiown", vec![own], &all, true);
        }
        case("anti", vec![d], &all, false);
        // Cleanup of a table directory holding the parent: owned = the middle half. The
        // node's version's copy of it has the same path below `own/` (the staged layout
        // names the keyspace and table from it).
        let cleanup = |root: &Path, op: &str, target: &[&str]| {
            let tdir = root.join(format!("cleantable/{}", f.name));
            copy_sstable(parent, &tdir);
            let d = out(op);
            let mut a: Vec<&OsStr> = vec![
                "cleanup".as_ref(),
                tdir.as_os_str(),
                "--owned-ranges".as_ref(),
                mid_yaml.as_os_str(),
                "--publish".as_ref(),
                "stage".as_ref(),
                "--out".as_ref(),
                d.as_os_str(),
                "--json".as_ref(),
            ];
            a.extend(target.iter().map(OsStr::new));
            cleave(&a);
            d
        };
        let d = cleanup(&work, "clean", &[]);
        let own = cleanup(&work.join("own"), "cleanown", &own_target(version));
        if let Some(own) = to_import(version, &format!("{} cleanown", f.name), &d, own) {
            case("cleanown", vec![own], &mid, true);
        }
        case("clean", vec![d], &mid, false);
        // RangeStream: the middle half's range children of the parent, made for this node's
        // version by the sender, checked, staged and imported by the receiver.
        receiver.send(parent, &format!("{}_strm", f.name), version, Some(version));
        case("strm", Vec::new(), &mid, !linear_reader(version));
        receiver.send(parent, &format!("{}_strmdef", f.name), version, None);
        case("strmdef", Vec::new(), &mid, false);
        // Rewrite: children made for a 4.1 target (a dead prefix kept, docs/split.md), each
        // rewritten from position 0 (`cleave rewrite --force --publish stage`): extended
        // verify, which refuses a dead prefix, passes them.
        let src = out("rwsrc");
        cleave(&split_args(
            parent,
            &src,
            &["--parts", "3", "--target-cassandra", "4.1"],
        ));
        let mut dirs = Vec::new();
        for (n, child) in data_files(&src).iter().enumerate() {
            let d = out(&format!("rw/{n}"));
            let r = cleave(&[
                "rewrite".as_ref(),
                child.as_os_str(),
                "--force".as_ref(),
                "--publish".as_ref(),
                "stage".as_ref(),
                "--out".as_ref(),
                d.as_os_str(),
                "--json".as_ref(),
            ]);
            assert_eq!(r["version"], 1, "{version} {}: {r}", f.name);
            dirs.push(d);
        }
        case("rw", dirs, &all, false);
    }
    drop(receiver);
    clock.lap("cleave: split, anticompaction, cleanup, RangeStream (with its imports), rewrite");
    // The local AnticompactionJobs: their children, staged as a user imports them; then
    // the same jobs with the node's version (`cleave run --cassandra-version`).
    let default = local_anticompaction_jobs(version, &fams, &parents, &work, None);
    let own = local_anticompaction_jobs(version, &fams, &parents, &work, Some(version));
    for ((i, dir), (_, own)) in default.into_iter().zip(own) {
        let mut case = |op: &'static str, children: PathBuf, dead_prefix| {
            cases.push(Case {
                table: format!("{}_{op}", fams[i].name),
                family: i,
                op,
                children: vec![children],
                expected: parent_rows[i].clone(),
                dead_prefix,
            })
        };
        if let Some(own) = to_import(version, &format!("{} acjown", fams[i].name), &dir, own) {
            case("acjown", own, true);
        }
        case("acj", dir, false);
    }
    clock.lap("cleave run --local: the AnticompactionJobs");

    // 4. The node imports them all (one command per table), verifies, SELECTs, compacts,
    // SELECTs.
    let mut refused = Vec::new();
    for c in cases.iter().filter(|c| !c.children.is_empty()) {
        let log_before = node.log().len();
        let out = node.import_dirs(KS, &c.table, &c.children);
        if !out.status.success() {
            refused.push(format!(
                "{} {} ({}; children {:?}): {}{}\nnode log:\n{}",
                fams[c.family].name,
                c.op,
                c.table,
                c.children,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                node.log().get(log_before..).unwrap_or_default()
            ));
        }
    }
    assert!(
        refused.is_empty(),
        "{version}: nodetool import refused {} of {} tables:\n{}",
        refused.len(),
        cases.len(),
        refused.join("\n")
    );
    clock.lap(&format!("import ({} tables)", cases.len()));
    repair_states_as_cassandra_reports(&node, version, &fams);
    clock.lap("sstablemetadata of the anticompaction children");
    let clean: Vec<&str> = cases
        .iter()
        .filter(|c| !c.dead_prefix)
        .map(|c| c.table.as_str())
        .collect();
    ok(
        &format!("{version}: verify -e -f {clean:?}"),
        &node.verify(KS, &clean),
    );
    let prefixed: Vec<&str> = cases
        .iter()
        .filter(|c| c.dead_prefix)
        .map(|c| c.table.as_str())
        .collect();
    if !prefixed.is_empty() {
        let log_before = node.log().len();
        let v = node.verify(KS, &prefixed);
        let said = format!(
            "{}{}{}",
            String::from_utf8_lossy(&v.stdout),
            String::from_utf8_lossy(&v.stderr),
            node.log().get(log_before..).unwrap_or_default()
        );
        eprintln!(
            "{version}: verify -e -f of the dead-prefix children {prefixed:?}: exit {:?}: {}",
            v.status.code(),
            said.lines().take(6).collect::<Vec<_>>().join("\n")
        );
        assert!(
            !v.status.success()
                && (said.contains("firstRowPositionFromIndex != 0")
                    || said.contains("First row position")),
            "{version}: extended verify should refuse a dead prefix: {said}"
        );
    }
    clock.lap("verify -e -f");
    let queries: Vec<String> = cases
        .iter()
        .map(|c| fams[c.family].query(&c.table))
        .collect();
    let check = |when: &str, got: Vec<Vec<String>>| {
        for (c, g) in cases.iter().zip(got) {
            assert!(
                g == c.expected,
                "{version} {} {}: SELECT {} {when}: {} rows, expected {} (first difference: {:?})",
                fams[c.family].name,
                c.op,
                c.table,
                g.len(),
                c.expected.len(),
                g.iter().zip(&c.expected).find(|(a, b)| a != b)
            );
        }
    };
    check("after import", node.select_many(&queries));
    clock.lap("SELECT");
    // Scrub (issue 32: fillers must behave under scrub as the parent does) of every child
    // that starts at 0 — a dead prefix is what every 5.0.x scrub misreads (the control below).
    // Scrub skips what it cannot read and says so in the log: per family, what the scrub of
    // the children logged must be what the scrub of the node's own parent logged (5.0.x's
    // scrubber warns "Data file partition position N differs from index file row position
    // -1" near the end of every sstable, Cassandra's own included).
    for (i, f) in fams.iter().enumerate() {
        // 5.0.4 and 5.0.9 scrub an sstable that holds only range tombstones away — "No valid
        // partitions found while scrubbing …; it is marked for deletion now" — the node's own
        // parent as well as the children (seen 2026-12-05 on both): that family's deletions
        // would then be gone for the judges below, so it is not scrubbed on 5.0.
        if version.starts_with("5.0.") && f.name == "tomb_range" {
            continue;
        }
        let (out, parent_said) = scrub(&node, &[&p_tables[i]]);
        ok(&format!("{version}: scrub {}", p_tables[i]), &out);
        let dir = node.table_dir(KS, &p_tables[i]);
        eventually(std::time::Duration::from_secs(20), || {
            data_files(&dir).len() == 1
        });
        let kids: Vec<&str> = clean
            .iter()
            .copied()
            .filter(|t| cases.iter().any(|c| c.table == *t && c.family == i))
            .collect();
        let (out, said) = scrub(&node, &kids);
        ok(&format!("{version}: scrub {kids:?}"), &out);
        let new = scrub_news(&parent_said, &said);
        assert!(
            new.is_empty(),
            "{version} {}: the scrub of the children logged what the parent's did not: {new:#?}",
            f.name
        );
    }
    check("after scrub", node.select_many(&queries));
    clock.lap("scrub, SELECT");
    let tables: Vec<&str> = cases.iter().map(|c| c.table.as_str()).collect();
    ok(&format!("{version}: compact"), &node.compact(KS, &tables));
    clock.lap("compact");
    check("after compact", node.select_many(&queries));
    clock.lap("SELECT after compact");
    judge_compacted(&node, &or, version, &cases, &parents);
    clock.lap("dump of the compacted tables (snapshot, Oracle dump --digest)");
    eprintln!(
        "{version}: {} tables ({} families × {} operations) imported, verified, compacted, equal",
        cases.len(),
        fams.len(),
        ops(version).len()
    );

    negative_controls(&node, &or, version, &fams, &parents, &parent_rows, &work);
    staged_layout_is_what_5_0_imports(
        &node,
        version,
        &fams[DP],
        &parents[DP],
        &parent_rows[DP],
        &work,
    );
    clock.lap("negative controls and the staged layout");

    // 5. OnRestart, every family at once: children pended beside the running node, placed
    // by apply-pending while it is stopped, read after one start. Both targets: where the
    // node's version keeps a dead prefix (5.0.4, 4.x) the odd families are split for it
    // (`split` inside the data directory reads the node's release from its system.local and
    // would refuse it on 5.0.5+), the even ones with the default.
    let mut live_parents = Vec::new();
    let mut dead_prefixed = Vec::new();
    for (i, t) in p_tables.iter().enumerate() {
        let live_table = node.table_dir(KS, t);
        let mut data = data_files(&live_table);
        assert_eq!(data.len(), 1, "{version} {t}: {data:?}");
        let live_parent = data.remove(0);
        let mut a: Vec<&OsStr> = vec![
            "split".as_ref(),
            live_parent.as_os_str(),
            "--out".as_ref(),
            live_table.as_os_str(),
            "--parts".as_ref(),
            "3".as_ref(),
            "--publish".as_ref(),
            "on-restart".as_ref(),
            "--json".as_ref(),
        ];
        if i % 2 == 1 && !linear_reader(version) {
            a.extend(own_target(version).into_iter().map(OsStr::new));
            dead_prefixed.push(t.as_str());
        }
        cleave(&a);
        live_parents.push((live_table, live_parent));
    }
    node.stop();
    let applied = apply_pending_ok(&node.data_dir());
    eprintln!(
        "{version}: apply-pending {}",
        applied.to_string().chars().take(400).collect::<String>()
    );
    for (t, (table, parent)) in p_tables.iter().zip(&live_parents) {
        let after = data_files(table);
        assert!(
            after.len() == 3 && !after.contains(parent),
            "{version} {t}: after apply-pending {after:?}"
        );
    }
    node.start_again().expect("the node starts again");
    let got = node.select_many(
        &fams
            .iter()
            .zip(&p_tables)
            .map(|(f, t)| f.query(t))
            .collect::<Vec<_>>(),
    );
    for ((f, g), want) in fams.iter().zip(got).zip(&parent_rows) {
        assert!(
            &g == want,
            "{version} {} OnRestart: SELECT p_{} after apply-pending and restart: {} rows, expected {}",
            f.name,
            f.name,
            g.len(),
            want.len()
        );
    }
    // Extended verify refuses a dead prefix (asserted above): the node's-version children
    // are judged by the SELECT.
    let starts_at_0: Vec<&str> = p_refs
        .iter()
        .copied()
        .filter(|t| !dead_prefixed.contains(t))
        .collect();
    ok(
        &format!("{version}: verify after restart"),
        &node.verify(KS, &starts_at_0),
    );
    eprintln!(
        "{version}: OnRestart, every row back; the node's version as the target for {dead_prefixed:?}"
    );
    clock.lap("OnRestart (split, stop, apply-pending, start, SELECT, verify)");
    clock.report();
    drop(node);
    drop(xfs);
}

/// What the node holds after `nodetool compact`, read by Cassandra's own reader: each
/// table's live sstables (pinned by `nodetool snapshot`, which takes the table's current
/// view: the compacted inputs, whose files may outlive the compaction a little, are not in
/// it) through `Oracle dump --digest true`, both passes, must sum to the `Summary` of the
/// parent's partitions in the children's range (the whole ring; the middle half for the
/// cleanup and the stream). The parent is the node's own compacted sstable, so what
/// Cassandra's compaction does to the children (drop empty filler partitions, keep the
/// tombstones: ten-year gc_grace) it already did to the parent. This judges the `tomb_*`
/// families' deletions, of which SELECT shows nothing, and finds any extra partition.
fn judge_compacted(node: &Node, or: &Oracle, version: &str, cases: &[Case], parents: &[PathBuf]) {
    let wrong = judge(node, or, version, cases, parents);
    assert!(
        wrong.is_empty(),
        "{version}: the node's compacted sstables differ from the parent's partitions:\n{}",
        wrong
            .iter()
            .map(|(what, got, want)| format!("{what}: got {got:?}, want {want:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "{version}: the node's compacted sstables of {} tables read by Cassandra's reader, both passes: equal to the parent's partitions in their ranges",
        cases.len()
    );
}

/// [`judge_compacted`]'s comparison: each (table and pass, got, want) that differ.
fn judge(
    node: &Node,
    or: &Oracle,
    version: &str,
    cases: &[Case],
    parents: &[PathBuf],
) -> Vec<(String, Summary, Summary)> {
    let pd = or.dump(parents);
    let tag = "cleave-judge";
    let kt: Vec<String> = cases.iter().map(|c| format!("{KS}.{}", c.table)).collect();
    node.nodetool_ok(&["snapshot", "-t", tag, "-kt", &kt.join(",")]);
    let files_of = |c: &Case| data_files(&node.table_dir(KS, &c.table).join("snapshots").join(tag));
    let all: Vec<PathBuf> = cases.iter().flat_map(files_of).collect();
    let sums = or.dump_digest(&all);
    let mut wrong = Vec::new();
    for c in cases {
        let files = files_of(c);
        let (lo, hi) = match c.op {
            "clean" | "cleanown" | "strm" | "strmdef" => MID,
            _ => (i64::MIN, i64::MAX),
        };
        let parent = pd.rows(&parents[c.family..=c.family], Pass::Index);
        assert_eq!(
            parent,
            pd.rows(&parents[c.family..=c.family], Pass::Linear),
            "{version} {}: the parent's passes",
            c.table
        );
        let inside: Vec<Partition> = parent
            .into_iter()
            .filter(|p| lo == i64::MIN || (p.token > lo && p.token <= hi))
            .collect();
        let want = Summary::of(&inside).normalized();
        for pass in [Pass::Linear, Pass::Index] {
            let got = sums
                .iter()
                .filter(|(p, f, _)| *p == pass && files.contains(f))
                .fold(Summary::default(), |a, (_, _, s)| a.add(*s))
                .normalized();
            // `empty` apart: cleave's filler partitions (nothing in them) are no data, and
            // they are still there after `nodetool compact` where Cassandra left the
            // children as they were (seen on 5.0.9: a `pendingRepair` job's children, 24
            // empty partitions in blob_ck_acj).
            if got.empty > 0 {
                eprintln!(
                    "{version} {}: {pass:?}: {} empty partitions (fillers) after compact",
                    c.table, got.empty
                );
            }
            // Issue 32: no filler survives a compaction — except, so far unexplained, in
            // the pendingRepair job's children (`*_acj`, docs/testenv.md).
            let filler_left = got.empty > 0 && !(c.op == "acj" || c.op == "acjown");
            if filler_left || (Summary { empty: 0, ..got }) != want {
                wrong.push((
                    format!(
                        "{version} {} {}, {pass:?} dump of {files:?} against the parent's partitions in ({lo}, {hi}]",
                        c.op, c.table
                    ),
                    got,
                    want,
                ));
            }
        }
    }
    node.nodetool_ok(&["clearsnapshot", "-t", tag, KS]);
    wrong
}

/// The family of the missing-partition and flipped-byte controls (`text_coll`), and of the
/// dead-prefix control and the staged layout (`uuid_plain`).
const NEG: usize = 4;
const DP: usize = 0;
/// The family of the dropped-tombstone control of the dump judge (`tomb_range`).
const TOMB: usize = 9;

/// The anticompaction as the sidecar runs it, in local mode (`cleave run --local DIR --node
/// n1 --once`, docs/operator.md): a data directory laid out like the node's
/// (`<data>/oracle/<family>_acj-<id>/` holding a copy of the parent), two
/// `AnticompactionJob` manifests over the middle half — `repairedAt` for the even families,
/// `pendingRepair` for the odd ones —, `publish: Stage`. Returns, per family, the directory
/// the job staged its children in (`<table dir>/cleave-staged/<job>/<ks>/<table>/`, what a
/// user gives `nodetool import --keep-repaired`). With `target` (the node's version) the
/// sidecar is told the node's release (`cleave run --cassandra-version`), the tables are
/// `<family>_acjown` and, where that keeps a dead prefix, the jobs ask for `digest: Combine`
/// ([`own_target`]).
fn local_anticompaction_jobs(
    version: &str,
    fams: &[Family],
    parents: &[PathBuf],
    work: &Path,
    target: Option<&str>,
) -> Vec<(usize, PathBuf)> {
    let op = if target.is_some() { "acjown" } else { "acj" };
    let data = work.join(op).join("data");
    let manifests = work.join(op).join("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    let table_dir = |f: &Family| {
        data.join(KS)
            .join(format!("{}_{op}-0123456789abcdef0123456789abcdef", f.name))
    };
    let digest = match target {
        Some(_) if !linear_reader(version) => "  digest: Combine\n",
        _ => "",
    };
    for (f, p) in fams.iter().zip(parents) {
        copy_sstable(p, &table_dir(f));
    }
    let job = |name: &str, parity: usize, repair: &str| {
        let tables: Vec<String> = fams
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == parity)
            .map(|(_, f)| format!("    - {}_{op}\n", f.name))
            .collect();
        format!(
            "apiVersion: cleave.dev/v1alpha1\nkind: AnticompactionJob\nmetadata:\n  name: {name}\n\
             spec:\n  nodeName: n1\n  keyspace: {KS}\n  tables:\n{}  ranges:\n    - {{start: \"{}\", end: \"{}\"}}\n  {repair}\n  publish: Stage\n{digest}",
            tables.concat(),
            MID.0,
            MID.1
        )
    };
    std::fs::write(
        manifests.join("acj-rep.yaml"),
        job("acj-rep", 0, &format!("repairedAt: {REPAIRED_AT}")),
    )
    .unwrap();
    std::fs::write(
        manifests.join("acj-pend.yaml"),
        job("acj-pend", 1, &format!("pendingRepair: {PENDING}")),
    )
    .unwrap();
    let mut run = run_local_once(&manifests);
    run.arg("--data-dir").arg(&data);
    if let Some(t) = target {
        run.args(["--cassandra-version", t]);
    }
    let out = run.output().unwrap();
    assert!(
        out.status.success(),
        "{version}: cleave run --local: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["acj-rep", "acj-pend"] {
        let st = std::fs::read_to_string(manifests.join(format!("{name}.status.yaml")))
            .unwrap_or_else(|e| panic!("{version}: {name}.status.yaml: {e}"));
        assert!(
            st.contains("phase: Complete"),
            "{version}: AnticompactionJob {name}: {st}"
        );
    }
    fams.iter()
        .enumerate()
        .map(|(i, f)| {
            let job = if i % 2 == 0 { "acj-rep" } else { "acj-pend" };
            let staged = table_dir(f)
                .join("cleave-staged")
                .join(job)
                .join(KS)
                .join(format!("{}_{op}", f.name));
            let n = data_files(&staged).len();
            assert!(
                n >= 2,
                "{version} {} {op}: {n} children staged in {}",
                f.name,
                staged.display()
            );
            (i, staged)
        })
        .collect()
}

/// The repair state of every imported anticompaction child as Cassandra reports it (one
/// `sstablemetadata` JVM for all of them): the CLI's children `Repaired at` 0 and
/// REPAIRED_AT; the local jobs' children 0 and REPAIRED_AT (even families) or `Pending
/// repair` the job's session and none (odd families).
fn repair_states_as_cassandra_reports(node: &Node, version: &str, fams: &[Family]) {
    let anti: Vec<&str> = ops(version)
        .into_iter()
        .filter(|o| o.starts_with("anti") || o.starts_with("acj"))
        .collect();
    let mut files = Vec::new();
    for f in fams {
        for op in &anti {
            files.extend(data_files(&node.table_dir(KS, &format!("{}_{op}", f.name))));
        }
    }
    let states = cassandra::repair_states(version, &files);
    for (i, f) in fams.iter().enumerate() {
        for op in &anti {
            let dir = node.table_dir(KS, &format!("{}_{op}", f.name));
            let mut seen: Vec<(i64, String)> = states
                .iter()
                .filter(|(p, _, _)| p.starts_with(&dir))
                .map(|(_, r, pr)| (*r, pr.clone()))
                .collect();
            seen.sort();
            seen.dedup();
            let want: Vec<(i64, String)> = if op.starts_with("acj") && i % 2 == 1 {
                let mut w = vec![(0, "--".to_string()), (0, PENDING.to_string())];
                w.sort();
                w
            } else {
                vec![(0, "--".to_string()), (REPAIRED_AT, "--".to_string())]
            };
            assert_eq!(
                seen, want,
                "{version} {} {op}: (Repaired at, Pending repair) of the imported children as sstablemetadata prints them",
                f.name
            );
        }
    }
}

/// Where the operator stages (`split::import_dir`): Cassandra 5.0's import parses the
/// keyspace and table from the two parent directories of each sstable and silently skips
/// what does not parse. Children staged the way cleave did before
/// (`<table dir>/cleave-staged/<job>/`, a job name with a `-`) are skipped by 5.x with exit 0
/// and imported by 4.x; the same children below `…/<job>/<ks>/<table>/` are imported by
/// every version.
fn staged_layout_is_what_5_0_imports(
    node: &Node,
    version: &str,
    f: &Family,
    parent: &Path,
    parent_rows: &[String],
    work: &Path,
) {
    use cleave::split::import_dir::{importable_by_5_0, staged_dir};
    let table = format!("{}_stg", f.name);
    let table_dir = work
        .join("stg")
        .join(KS)
        .join(format!("{table}-0123456789abcdef0123456789abcdef"));
    let old = table_dir.join("cleave-staged").join("repair-job-1");
    std::fs::create_dir_all(&old).unwrap();
    cleave(&split_args(parent, &old, &["--parts", "2"]));
    assert_eq!(data_files(&old).len(), 2, "{version}: two children staged");
    let skips = version.starts_with("5.");
    assert!(!importable_by_5_0(&old), "the old layout");
    ok(
        &format!("{version}: import from {}", old.display()),
        &node.import(KS, &table, &old),
    );
    let (left, got) = (data_files(&old).len(), node.select(&f.query(&table)));
    eprintln!(
        "{version}: import from <table dir>/cleave-staged/<job>/ exit 0, {left} of 2 children left there, {} rows",
        got.len()
    );
    if skips {
        assert!(
            left == 2 && got.is_empty(),
            "{version}: 5.0 was seen skipping the old layout (2 left, 0 rows); now {left} left, {} rows: if 5.x imports it now, split::import_dir's comment is out of date",
            got.len()
        );
        let new = staged_dir(&table_dir, &["repair-job-1"]).unwrap();
        assert!(importable_by_5_0(&new));
        std::fs::create_dir_all(&new).unwrap();
        for e in std::fs::read_dir(&old).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                std::fs::rename(&p, new.join(p.file_name().unwrap())).unwrap();
            }
        }
        ok(
            &format!("{version}: import from {}", new.display()),
            &node.import(KS, &table, &new),
        );
        assert_eq!(
            data_files(&new).len(),
            0,
            "{version}: imported from the new layout"
        );
    } else {
        assert_eq!(left, 0, "{version}: 4.x imports from any directory");
    }
    assert_eq!(
        node.select(&f.query(&table)),
        parent_rows,
        "{version}: SELECT {table} after the staged import"
    );
}

/// The oracle can fail: each control below is caught, the way its assertion says.
fn negative_controls(
    node: &Node,
    or: &Oracle,
    version: &str,
    fams: &[Family],
    parents: &[PathBuf],
    parent_rows: &[Vec<String>],
    work: &Path,
) {
    // A child missing one partition (a cleanup that does not own one partition's token):
    // SELECT returns every row but that partition's.
    let (i, f) = (NEG, &fams[NEG]);
    let gone = token_of(&parent_rows[i][parent_rows[i].len() / 2]);
    let yaml = write_ranges(
        &work.join("miss.yaml"),
        &[(i64::MIN, gone - 1), (gone, i64::MAX)],
    );
    let tdir = work.join("misstable");
    copy_sstable(&parents[i], &tdir);
    let table = format!("{}_miss", f.name);
    let d = work.join(&table);
    std::fs::create_dir_all(&d).unwrap();
    cleave(&[
        "cleanup".as_ref(),
        tdir.as_os_str(),
        "--owned-ranges".as_ref(),
        yaml.as_os_str(),
        "--publish".as_ref(),
        "stage".as_ref(),
        "--out".as_ref(),
        d.as_os_str(),
        "--json".as_ref(),
    ]);
    ok("import miss", &node.import(KS, &table, &d));
    let got = node.select(&f.query(&table));
    let missing: Vec<&String> = parent_rows[i].iter().filter(|r| !got.contains(r)).collect();
    assert!(
        !missing.is_empty() && missing.iter().all(|r| token_of(r) == gone),
        "{version}: the child missing one partition must lose exactly its rows: {missing:?}"
    );
    assert_ne!(got, parent_rows[i], "{version}: SELECT must differ");

    // A dropped tombstone: `tomb_range`'s children without one of its partitions (a
    // cleanup that does not own its token). SELECT returns no row of either, so it cannot
    // tell; the dump of the node's compacted sstables (`judge`) must be one partition short
    // of the parent's, in both passes.
    let (t, tf) = (TOMB, &fams[TOMB]);
    assert_eq!(tf.name, "tomb_range", "TOMB names tomb_range");
    let parts = or.dump(&parents[t..=t]).rows(&parents[t..=t], Pass::Index);
    let gone = parts[parts.len() / 2].token;
    let yaml = write_ranges(
        &work.join("tombmiss.yaml"),
        &[(i64::MIN, gone - 1), (gone, i64::MAX)],
    );
    let tdir = work.join("tombmisstable");
    copy_sstable(&parents[t], &tdir);
    let table = format!("{}_miss", tf.name);
    let d = work.join(&table);
    std::fs::create_dir_all(&d).unwrap();
    cleave(&[
        "cleanup".as_ref(),
        tdir.as_os_str(),
        "--owned-ranges".as_ref(),
        yaml.as_os_str(),
        "--publish".as_ref(),
        "stage".as_ref(),
        "--out".as_ref(),
        d.as_os_str(),
        "--json".as_ref(),
    ]);
    ok("import tomb miss", &node.import(KS, &table, &d));
    assert!(
        node.select(&tf.query(&table)).is_empty(),
        "{version}: {table}: SELECT of tombstones only"
    );
    ok("compact tomb miss", &node.compact(KS, &[&table]));
    let case = Case {
        table: table.clone(),
        family: t,
        op: "miss",
        children: vec![d],
        expected: Vec::new(),
        dead_prefix: false,
    };
    let wrong = judge(node, or, version, &[case], parents);
    eprintln!("{version}: the dump judge of {table} (one tombstone partition dropped): {wrong:?}");
    assert!(
        wrong.len() == 2
            && wrong
                .iter()
                .all(|(_, got, want)| got.count + 1 == want.count),
        "{version}: the judge must find {table} one partition short in both passes: {wrong:?}"
    );

    // One flipped byte in an interior chunk of a child.
    let table = format!("{}_flip", f.name);
    let d = work.join(&table);
    std::fs::create_dir_all(&d).unwrap();
    cleave(&split_args(&parents[i], &d, &["--parts", "3"]));
    let child = data_files(&d).remove(1);
    let mut bytes = std::fs::read(&child).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&child, &bytes).unwrap();
    let log_before = node.log().len();
    let imp = node.import(KS, &table, &d);
    let imp_text = format!(
        "{}{}\nnode log:\n{}",
        String::from_utf8_lossy(&imp.stdout),
        String::from_utf8_lossy(&imp.stderr),
        node.log().get(log_before..).unwrap_or_default()
    );
    eprintln!(
        "{version}: flipped byte at {at} of {}: import exit {:?}: {}",
        child.display(),
        imp.status.code(),
        imp_text.chars().take(1500).collect::<String>()
    );
    let caught_at_import = !imp.status.success();
    if caught_at_import {
        assert!(
            imp_text.contains("Some directories failed to import") && imp_text.contains("Corrupt"),
            "{version}: import refused the flipped child, but how? {imp_text}"
        );
    } else {
        let v = node.verify(KS, &[&table]);
        let vt = format!(
            "{}{}",
            String::from_utf8_lossy(&v.stdout),
            String::from_utf8_lossy(&v.stderr)
        );
        eprintln!("{version}: verify of the flipped child: {vt}");
        assert!(
            !v.status.success(),
            "{version}: verify -e -f accepted a child with a flipped byte"
        );
    }

    // The dead-prefix hazard: children made for a 4.1 target keep their dead prefix. 5.0.5+
    // compaction reads Data.db from position 0 (SSTableSimpleScanner); 5.0.4 and 4.x read
    // from the index.
    let (i, f) = (DP, &fams[DP]);
    let table = format!("{}_dp", f.name);
    let d = work.join(&table);
    std::fs::create_dir_all(&d).unwrap();
    let r = cleave(&split_args(
        &parents[i],
        &d,
        &[
            "--parts",
            "3",
            "--target-cassandra",
            "4.1",
            "--digest",
            "combine",
        ],
    ));
    eprintln!(
        "{version}: dead-prefix split report: {}",
        r.to_string().chars().take(600).collect::<String>()
    );
    ok("import dp", &node.import(KS, &table, &d));
    assert_eq!(
        node.select(&f.query(&table)),
        parent_rows[i],
        "{version}: SELECT of the dead-prefix children (read through the index)"
    );
    let log_before = node.log().len();
    let c = node.compact(KS, &[&table]);
    let ct = format!(
        "{}{}",
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
    // What the server threw: nodetool only relays what JMX can serialize (5.0.9's
    // exception carries a `File`, so nodetool says `NotSerializableException`).
    let server = error_block(node.log().get(log_before..).unwrap_or_default());
    let after = node.select(&f.query(&table));
    eprintln!(
        "{version}: compact of the dead-prefix children: exit {:?}, {} rows after (parent {}): {}\nthe node logged:\n{server}",
        c.status.code(),
        after.len(),
        parent_rows[i].len(),
        ct.chars().take(1500).collect::<String>()
    );
    if linear_reader(version) {
        assert!(
            !c.status.success() || after != parent_rows[i],
            "{version}: compaction from position 0 read the dead-prefix children unharmed"
        );
        assert!(
            server.contains("CorruptSSTableException") && server.contains(&table),
            "{version}: the node should log its compaction's CorruptSSTableException naming a child of {table}: {server}"
        );
        // The scrub judge's negative control: the children compaction could not get past
        // are still there, and scrub (which reads Data.db from position 0 on every 5.0.x)
        // must fail or log what the parent's scrub did not.
        let (_, parent_said) = scrub(node, &[&format!("p_{}", f.name)]);
        let (out, said) = scrub(node, &[&table]);
        let new = scrub_news(&parent_said, &said);
        eprintln!(
            "{version}: scrub of the dead-prefix children: exit {:?}, new in the log: {new:#?}",
            out.status.code(),
        );
        assert!(
            !out.status.success() || !new.is_empty(),
            "{version}: scrub read the dead-prefix children as the parent"
        );
    } else {
        ok(&format!("{version}: compact dead-prefix"), &c);
        assert_eq!(after, parent_rows[i], "{version}: SELECT after compact");
    }
}

/// The first ERROR a node's log holds and the exception lines after it (its causes and
/// their first frames), at most 40 lines: what a compaction that failed on the server threw.
fn error_block(log: &str) -> String {
    let mut lines = log.lines().skip_while(|l| !l.contains("ERROR"));
    let mut out: Vec<&str> = lines.next().into_iter().collect();
    out.extend(
        lines
            .take_while(|l| {
                l.starts_with('\t') || l.starts_with("Caused by") || l.contains("Exception")
            })
            .take(39),
    );
    out.join("\n")
}

/// `nodetool scrub --no-snapshot` of `tables`, and what the node logged meanwhile.
fn scrub(node: &Node, tables: &[&str]) -> (std::process::Output, String) {
    let before = node.log().len();
    let out = node.scrub(KS, tables);
    let said = node.log().get(before..).unwrap_or_default().to_string();
    (out, said)
}

/// What the scrub of the children logged that the scrub of their parent did not: WARN and
/// ERROR lines, each reduced to its message with numbers and paths replaced (positions,
/// sizes, times, table names differ between any two sstables). Lines of other threads than the scrub's (a trigger
/// directory check) are not the scrub's and left out.
fn scrub_news(parent: &str, children: &str) -> Vec<String> {
    fn messages(log: &str) -> std::collections::BTreeSet<String> {
        log.lines()
            .filter(|l| l.contains("CompactionExecutor") || l.starts_with("ERROR"))
            .map(|l| {
                let m = l.split_once(" - ").map_or(l, |(_, m)| m);
                // Paths name the table and its id: each word with a `/` becomes PATH.
                let m = m
                    .split(' ')
                    .map(|w| if w.contains('/') { "PATH" } else { w })
                    .collect::<Vec<_>>()
                    .join(" ");
                let mut out = String::new();
                let mut digit = false;
                for ch in m.chars() {
                    if ch.is_ascii_digit() {
                        if !digit {
                            out.push('N');
                        }
                        digit = true;
                    } else {
                        digit = false;
                        out.push(ch);
                    }
                }
                out
            })
            .collect()
    }
    let seen = messages(parent);
    messages(children)
        .into_iter()
        .filter(|m| !seen.contains(m))
        .collect()
}

/// The tests below cover exactly the script's pinned versions.
#[test]
fn one_test_per_pinned_version() {
    assert_eq!(
        cassandra::versions(),
        ["5.0.9", "5.0.4", "4.1.10", "4.0.19"],
        "add or rename the live_* tests with the pins"
    );
}

#[test]
fn live_5_0_9() {
    live("5.0.9", Written::Big);
}

#[test]
fn live_5_0_4() {
    live("5.0.4", Written::Big);
}

/// The same matrix on a 5.0.9 node that writes BTI (`da`): its compaction makes the parents
/// BTI, and every child (split, anticompaction, cleanup, RangeStream, rewrite) is imported,
/// verified, SELECTed and compacted by it (issue 33).
#[test]
fn live_bti_5_0_9() {
    live("5.0.9", Written::Bti);
}

#[test]
fn live_bti_5_0_4() {
    live("5.0.4", Written::Bti);
}

#[test]
fn live_4_1_10() {
    live("4.1.10", Written::Big);
}

#[test]
fn live_4_0_19() {
    live("4.0.19", Written::Big);
}

/// A real Cassandra 5.0.9 flush with TTL cells (`tests/fixtures/cassandra-5.0.9-ttl`, 50 rows
/// `USING TTL 86400`, written by this test environment's node): its STATS component ends with
/// 4 zero bytes for the one tombstone-histogram bin (Cassandra's serializedSize padding).
/// cleave refused it as `CorruptSSTable` ("4 unexpected trailing byte(s) after STATS
/// metadata") before the fix; now it opens, and the children of a split open too.
#[test]
fn a_5_0_9_flush_with_ttls_opens_and_splits() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cassandra-5.0.9-ttl/oa-1-big-Data.db");
    let work = tempfile::tempdir().unwrap();
    let parent = copy_sstable(&fixture, &work.path().join("p"));
    let info = cleave(&["inspect".as_ref(), parent.as_os_str(), "--json".as_ref()]);
    assert!(info.get("error").is_none(), "{info}");
    let out = work.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    cleave(&split_args(&parent, &out, &["--parts", "2"]));
    let children = data_files(&out);
    assert_eq!(children.len(), 2, "{children:?}");
    assert_eq!(key_fingerprint(&children), key_fingerprint(&[parent]));
}
