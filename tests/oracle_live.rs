//! Stock Cassandra judges cleave's children on a live node (issue 30, deliverables 4 and 5,
//! the live half). For each pinned version, one node (one version at a time): the node itself
//! writes the parents (CQL INSERTs with TTLs and every kind of deletion, then `nodetool
//! flush`); cleave splits, anticompacts and cleans up copies of them; the node imports the
//! children (`nodetool import --keep-repaired`), verifies them (`verify -e -f`), SELECTs every
//! row (equal to the parent's), compacts and SELECTs again. Then the `OnRestart` path
//! (children placed by `apply-pending` while the node is stopped) and the negative controls:
//! one flipped byte, one missing partition, and a dead-prefix child made for 4.1 on each
//! version (docs/testenv.md records what each Cassandra does with it).
#![cfg(test)]

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use common::cassandra::{self, Node};
use common::*;

const KS: &str = "oracle";
/// The repair time anticompaction writes into repaired children.
const REPAIRED_AT: i64 = 1_764_600_000_000;
/// The middle half of the Murmur3 ring, `(-2^62, 2^62]`: owned by the cleanup, repaired by
/// the anticompaction.
const MID: (i64, i64) = (-(1 << 62), 1 << 62);

/// One schema family: its columns, partition key and how many rows of what the node writes.
struct Family {
    name: &'static str,
    columns: &'static str,
    /// The partition key columns, as `token(...)` takes them.
    pk: &'static str,
    /// What a SELECT compares: every column and the write time of `v` (kept by a split).
    select: &'static str,
    extra: &'static str,
}

const FAMILIES: [Family; 4] = [
    Family {
        name: "f_int",
        select: "k, v, n, writetime(v)",
        columns: "k int PRIMARY KEY, v text, n bigint",
        pk: "k",
        extra: "",
    },
    Family {
        name: "f_uuid",
        select: "k, c, s, v, writetime(v)",
        columns: "k uuid, c int, s text static, v text, PRIMARY KEY (k, c)",
        pk: "k",
        extra: "",
    },
    Family {
        name: "f_text",
        select: "k, v, l, writetime(v)",
        columns: "k text PRIMARY KEY, v text, l list<int>",
        pk: "k",
        extra: "",
    },
    Family {
        name: "f_comp",
        select: "k1, k2, c, v, writetime(v)",
        columns: "k1 text, k2 int, c int, v text, PRIMARY KEY ((k1, k2), c)",
        pk: "k1, k2",
        extra: " AND CLUSTERING ORDER BY (c DESC)",
    },
];

/// splitmix64: deterministic values for the rows.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// `n` hex characters (barely compressible: the parent spans many 4 KiB chunks).
    fn hex(&mut self, n: usize) -> String {
        let mut s = String::with_capacity(n + 16);
        while s.len() < n {
            s.push_str(&format!("{:016x}", self.next()));
        }
        s.truncate(n);
        s
    }
    fn uuid(&mut self) -> String {
        let h = self.hex(32);
        format!(
            "{}-{}-4{}-8{}-{}",
            &h[0..8],
            &h[8..12],
            &h[13..16],
            &h[17..20],
            &h[20..32]
        )
    }
}

fn create(table: &str, f: &Family) -> String {
    // 4 KiB chunks: a parent of a few hundred KiB spans enough chunks for interior (shared)
    // chunks and dead prefixes; background compaction off so that what a test imports is
    // what it finds, until it asks for `nodetool compact`.
    format!(
        "CREATE TABLE {KS}.{table} ({}) WITH compression = {{'class': 'LZ4Compressor', \
         'chunk_length_in_kb': '4'}} AND compaction = {{'class': \
         'SizeTieredCompactionStrategy', 'enabled': 'false'}}{}",
        f.columns, f.extra
    )
}

/// The node's writes into `p_<family>`: rows, TTL cells, and one deletion of each kind the
/// family has (cell, row, range, partition).
fn writes(f: &Family) -> Vec<String> {
    let t = format!("{KS}.p_{}", f.name);
    let mut r = Rng(f.name.len() as u64 * 7919);
    let mut v = Vec::new();
    let ttl = |i: usize| if i % 9 == 4 { " USING TTL 86400" } else { "" };
    match f.name {
        "f_int" => {
            for i in 0..300usize {
                let k = (r.next() as i32) / 2;
                v.push(format!(
                    "INSERT INTO {t} (k, v, n) VALUES ({k}, '{}', {i}){}",
                    r.hex(700),
                    ttl(i)
                ));
                if i == 10 {
                    v.push(format!("DELETE v FROM {t} WHERE k = {k}"));
                }
                if i == 11 {
                    v.push(format!("DELETE FROM {t} WHERE k = {k}"));
                }
            }
        }
        "f_uuid" => {
            for i in 0..80usize {
                let k = r.uuid();
                v.push(format!("INSERT INTO {t} (k, s) VALUES ({k}, 'static-{i}')"));
                for c in 0..4 {
                    v.push(format!(
                        "INSERT INTO {t} (k, c, v) VALUES ({k}, {c}, '{}'){}",
                        r.hex(500),
                        ttl(i + c)
                    ));
                }
                match i {
                    3 => v.push(format!("DELETE v FROM {t} WHERE k = {k} AND c = 1")),
                    4 => v.push(format!("DELETE FROM {t} WHERE k = {k} AND c = 2")),
                    5 => v.push(format!(
                        "DELETE FROM {t} WHERE k = {k} AND c >= 1 AND c < 3"
                    )),
                    6 => v.push(format!("DELETE FROM {t} WHERE k = {k}")),
                    _ => {}
                }
            }
        }
        "f_text" => {
            for i in 0..300usize {
                let k = format!("key-{i}-{}", r.hex(8));
                v.push(format!(
                    "INSERT INTO {t} (k, v, l) VALUES ('{k}', '{}', [{i}, {}]){}",
                    r.hex(700),
                    i * 2,
                    ttl(i)
                ));
                if i == 20 {
                    v.push(format!("DELETE v FROM {t} WHERE k = '{k}'"));
                }
                if i == 21 {
                    v.push(format!("DELETE FROM {t} WHERE k = '{k}'"));
                }
            }
        }
        "f_comp" => {
            for i in 0..100usize {
                let k1 = format!("p{}", r.hex(6));
                let k2 = i as i32 * 3;
                for c in 0..3 {
                    v.push(format!(
                        "INSERT INTO {t} (k1, k2, c, v) VALUES ('{k1}', {k2}, {c}, '{}'){}",
                        r.hex(600),
                        ttl(i + c)
                    ));
                }
                let w = format!("k1 = '{k1}' AND k2 = {k2}");
                match i {
                    3 => v.push(format!("DELETE v FROM {t} WHERE {w} AND c = 0")),
                    4 => v.push(format!("DELETE FROM {t} WHERE {w} AND c = 1")),
                    5 => v.push(format!("DELETE FROM {t} WHERE {w} AND c > 0 AND c <= 2")),
                    6 => v.push(format!("DELETE FROM {t} WHERE {w}")),
                    _ => {}
                }
            }
        }
        other => unreachable!("family {other}"),
    }
    v
}

/// Every row of `table`, `token<TAB>columns...`, sorted.
fn rows(node: &Node, table: &str, f: &Family) -> Vec<String> {
    node.select(&format!(
        "SELECT token({}), {} FROM {KS}.{table}",
        f.pk, f.select
    ))
}

fn token_of(row: &str) -> i64 {
    row.split('\t').next().unwrap().parse().unwrap()
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

/// A copy of the only sstable of `p_<family>` into `dir/<family>/` (the node keeps its own).
fn copy_parent(node: &Node, f: &Family, dir: &Path) -> PathBuf {
    let live = node.table_dir(KS, &format!("p_{}", f.name));
    let data = data_files(&live);
    assert_eq!(data.len(), 1, "p_{} after one flush: {data:?}", f.name);
    copy_sstable(&data[0], &dir.join(f.name))
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

/// One imported table: its family, the directories whose children go in (none: the stream
/// receiver imported them itself), and the rows the node must then return.
struct Case {
    table: String,
    family: usize,
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
/// `nodetool import --keep-repaired` as the import command. Killed on drop.
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
            "{} nodetool {} import --keep-repaired {{keyspace}} {{table}} {{dir}}",
            cassandra::script().display(),
            node.dir.display()
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

    /// `cleave stream send` of `parent`'s range children in MID to `KS.table`, made for
    /// `version`, imported by the receiver; it must succeed.
    fn send(&self, parent: &Path, table: &str, version: &str) {
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
            "--target-cassandra",
            version,
            "--transfer-prefix",
            "oracle",
            "--group",
            "oracle",
        ]);
        let sent = common::stream::send(self.recv.port, &[parent], &args);
        assert!(
            sent.ok,
            "{version}: stream send to {table}: {}{}",
            sent.stdout, sent.stderr
        );
        let reports = sent.json();
        let r = &reports[0];
        assert_eq!(r["verdict"]["import"], "Import", "{r}");
        eprintln!(
            "{version}: RangeStream to {table}: {} partitions, {} of {} bytes zero-copy, imported by the receiver",
            r["verdict"]["partitions"], r["bytesZeroCopy"], r["bytesTotal"]
        );
    }
}

/// The whole matrix on one version's node.
fn live(version: &str) {
    let test = format!("live_{}", version.replace('.', "_"));
    let Some(()) = cassandra::require(&test, cassandra::installed(version)) else {
        return;
    };
    let _one_node = cassandra::node_lock();
    let t0 = std::time::Instant::now();
    // The node's data and every copy on one filesystem: a loop XFS (reflink) when it can be
    // had, so that children share their parent's chunks as in production.
    let xfs = cleave::io::loopfs::unavailable_reason().is_none().then(|| {
        cleave::io::loopfs::LoopMount::new(&std::env::temp_dir(), 2 << 30, "xfs")
            .expect("mount a loop XFS")
    });
    let tmp = tempfile::tempdir().unwrap();
    let base = xfs
        .as_ref()
        .map(|m| m.mount_point.clone())
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let Some(mut node) = cassandra::require(&test, Node::start(version, &base.join("node"), &[]))
    else {
        return;
    };
    let work = base.join("work");

    // 1. The node writes the parents.
    let mut ddl = vec![format!(
        "CREATE KEYSPACE {KS} WITH replication = {{'class': 'SimpleStrategy', \
         'replication_factor': 1}}"
    )];
    let ops = [
        "split", "own", "clean", "anti", "strm", "rw", "miss", "flip", "dp", "stg",
    ];
    for f in &FAMILIES {
        ddl.push(create(&format!("p_{}", f.name), f));
        for op in ops {
            ddl.push(create(&format!("{}_{op}", f.name), f));
        }
    }
    node.cql(&ddl);
    let mut w = Vec::new();
    for f in &FAMILIES {
        w.extend(writes(f));
    }
    let tw = std::time::Instant::now();
    node.cql(&w);
    eprintln!(
        "{version}: {} writes in {:.1}s",
        w.len(),
        tw.elapsed().as_secs_f64()
    );
    node.flush(KS);
    let parent_rows: Vec<Vec<String>> = FAMILIES
        .iter()
        .map(|f| rows(&node, &format!("p_{}", f.name), f))
        .collect();
    for (f, r) in FAMILIES.iter().zip(&parent_rows) {
        assert!(r.len() > 100, "{}: {} rows", f.name, r.len());
    }
    let parents: Vec<PathBuf> = FAMILIES
        .iter()
        .map(|f| copy_parent(&node, f, &work.join("parents")))
        .collect();
    let prefix = if version.starts_with('5') {
        "oa-"
    } else {
        "nb-"
    };
    for p in &parents {
        let name = p.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with(prefix), "{version} flushed {name}");
    }

    // 2. cleave makes the children.
    let mid_yaml = write_ranges(&work.join("mid.yaml"), &[MID]);
    let mut cases = Vec::new();
    // RangeStream's receiver for this node (`cleave stream serve`, a real process over
    // loopback), which checks each child and runs the node's own `nodetool import
    // --keep-repaired` on it (`import: Import`).
    let receiver = RangeStreamReceiver::start(&node, &base, version);
    for (i, f) in FAMILIES.iter().enumerate() {
        let parent = &parents[i];
        let all = parent_rows[i].clone();
        let mid: Vec<String> = all
            .iter()
            .filter(|r| token_of(r) > MID.0 && token_of(r) <= MID.1)
            .cloned()
            .collect();
        let out = |op: &str| {
            let d = work.join(format!("{}_{op}", f.name));
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        // Default target (unknown: no dead prefix, fillers or regrid).
        let d = out("split");
        cleave(&split_args(parent, &d, &["--parts", "3"]));
        cases.push(Case {
            table: format!("{}_split", f.name),
            family: i,
            children: vec![d],
            expected: all.clone(),
            dead_prefix: false,
        });
        // The node's own version as the target (a dead prefix kept where it reads from the
        // index: 5.0.4 and 4.x).
        let d = out("own");
        // `--digest combine`: without a Digest, import's verify takes the extended path,
        // which refuses a dead prefix (docs/split.md "Digest").
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
        cases.push(Case {
            table: format!("{}_own", f.name),
            family: i,
            children: vec![d],
            expected: all.clone(),
            dead_prefix: !linear_reader(version),
        });
        // Anticompaction: the middle half repaired at REPAIRED_AT, the rest unrepaired; both
        // imported (--keep-repaired), every row back.
        let d = out("anti");
        let rep = REPAIRED_AT.to_string();
        cleave(&split_args(
            parent,
            &d,
            &[
                "--ranges",
                mid_yaml.to_str().unwrap(),
                "--repaired-at",
                &rep,
            ],
        ));
        cases.push(Case {
            table: format!("{}_anti", f.name),
            family: i,
            children: vec![d],
            expected: all.clone(),
            dead_prefix: false,
        });
        // Cleanup of a table directory holding the parent: owned = the middle half.
        let tdir = work.join(format!("cleantable/{}", f.name));
        copy_sstable(parent, &tdir);
        let d = out("clean");
        cleave(&[
            "cleanup".as_ref(),
            tdir.as_os_str(),
            "--owned-ranges".as_ref(),
            mid_yaml.as_os_str(),
            "--publish".as_ref(),
            "stage".as_ref(),
            "--out".as_ref(),
            d.as_os_str(),
            "--json".as_ref(),
        ]);
        cases.push(Case {
            table: format!("{}_clean", f.name),
            family: i,
            children: vec![d],
            expected: mid.clone(),
            dead_prefix: false,
        });
        // RangeStream: the middle half's range children of the parent, made for this node's
        // version by the sender, checked, staged and imported by the receiver.
        let table = format!("{}_strm", f.name);
        receiver.send(parent, &table, version);
        cases.push(Case {
            table,
            family: i,
            children: Vec::new(),
            expected: mid,
            dead_prefix: !linear_reader(version),
        });
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
            assert_eq!(r["version"], 1, "{r}");
            dirs.push(d);
        }
        cases.push(Case {
            table: format!("{}_rw", f.name),
            family: i,
            children: dirs,
            expected: all.clone(),
            dead_prefix: false,
        });
    }
    drop(receiver);

    // 3. The node imports them all, verifies, SELECTs, compacts, SELECTs.
    let mut refused = Vec::new();
    for c in &cases {
        for dir in &c.children {
            let log_before = node.log().len();
            let out = node.import(KS, &c.table, dir);
            if !out.status.success() {
                refused.push(format!(
                    "{} ({}): {}{}\nnode log:\n{}",
                    c.table,
                    dir.display(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr),
                    &node.log()[log_before..]
                ));
            }
        }
    }
    assert!(
        refused.is_empty(),
        "{version}: nodetool import refused {} of {} tables:\n{}",
        refused.len(),
        cases.len(),
        refused.join("\n")
    );
    // What Cassandra says of the anticompaction's repair state, on the imported files.
    for f in &FAMILIES {
        let dir = node.table_dir(KS, &format!("{}_anti", f.name));
        let mut states: Vec<i64> = data_files(&dir)
            .iter()
            .map(|d| cassandra::repair_state(version, d).0)
            .collect();
        states.sort();
        states.dedup();
        assert_eq!(
            states,
            vec![0, REPAIRED_AT],
            "{version} {}: repairedAt of the imported anticompaction children",
            f.name
        );
    }
    let tables: Vec<&str> = cases.iter().map(|c| c.table.as_str()).collect();
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
            &node.log()[log_before..]
        );
        eprintln!(
            "{version}: verify -e -f of the dead-prefix children {prefixed:?}: exit {:?}: {said}",
            v.status.code()
        );
        assert!(
            !v.status.success()
                && (said.contains("firstRowPositionFromIndex != 0")
                    || said.contains("First row position")),
            "{version}: extended verify should refuse a dead prefix: {said}"
        );
    }
    for c in &cases {
        let got = rows(&node, &c.table, &FAMILIES[c.family]);
        assert_eq!(
            got, c.expected,
            "{version}: SELECT {} after import",
            c.table
        );
    }
    ok(&format!("{version}: compact"), &node.compact(KS, &tables));
    for c in &cases {
        let got = rows(&node, &c.table, &FAMILIES[c.family]);
        assert_eq!(
            got, c.expected,
            "{version}: SELECT {} after compact",
            c.table
        );
    }
    eprintln!(
        "{version}: {} tables imported, verified, compacted, equal ({:.1}s so far)",
        cases.len(),
        t0.elapsed().as_secs_f64()
    );

    negative_controls(&node, version, &parents, &parent_rows, &work);
    staged_layout_is_what_5_0_imports(&node, version, &parents[0], &parent_rows[0], &work);

    // 4. OnRestart: children pended beside the running node, placed by apply-pending while it
    // is stopped, read after it starts.
    let f = &FAMILIES[1];
    let live_table = node.table_dir(KS, &format!("p_{}", f.name));
    let live_parent = data_files(&live_table).remove(0);
    cleave(&[
        "split".as_ref(),
        live_parent.as_os_str(),
        "--out".as_ref(),
        live_table.as_os_str(),
        "--parts".as_ref(),
        "3".as_ref(),
        "--publish".as_ref(),
        "on-restart".as_ref(),
        "--json".as_ref(),
    ]);
    node.stop();
    let applied = apply_pending_ok(&node.data_dir());
    eprintln!("{version}: apply-pending {applied}");
    let after = data_files(&live_table);
    assert!(
        after.len() == 3 && !after.contains(&live_parent),
        "{version}: after apply-pending {after:?}"
    );
    node.start_again().expect("the node starts again");
    assert_eq!(
        rows(&node, &format!("p_{}", f.name), f),
        parent_rows[1],
        "{version}: SELECT after apply-pending and restart"
    );
    ok(
        &format!("{version}: verify after restart"),
        &node.verify(KS, &[&format!("p_{}", f.name)]),
    );
    eprintln!("{version}: done in {:.1}s", t0.elapsed().as_secs_f64());
    drop(node);
    drop(xfs);
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
    parent: &Path,
    parent_rows: &[String],
    work: &Path,
) {
    use cleave::split::import_dir::{importable_by_5_0, staged_dir};
    let f = &FAMILIES[0];
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
    let (left, got) = (data_files(&old).len(), rows(node, &table, f));
    eprintln!(
        "{version}: import from <table dir>/cleave-staged/<job>/ exit 0, {left} of 2 children left there, {} rows",
        got.len()
    );
    if skips {
        assert!(
            left == 2 && got.is_empty(),
            "{version}: 5.0 was seen skipping the old layout (2 left, 0 rows); now {left} left, {} rows:              if 5.x imports it now, split::import_dir's comment is out of date",
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
        rows(node, &table, f),
        parent_rows,
        "{version}: SELECT {table} after the staged import"
    );
}

/// The oracle can fail: each control below is caught, the way its assertion says.
fn negative_controls(
    node: &Node,
    version: &str,
    parents: &[PathBuf],
    parent_rows: &[Vec<String>],
    work: &Path,
) {
    // A child missing one partition (a cleanup that does not own one partition's token):
    // SELECT returns every row but that partition's.
    let (i, f) = (2, &FAMILIES[2]);
    let gone = token_of(&parent_rows[i][parent_rows[i].len() / 2]);
    let yaml = write_ranges(
        &work.join("miss.yaml"),
        &[(i64::MIN, gone - 1), (gone, i64::MAX)],
    );
    let tdir = work.join("misstable");
    copy_sstable(&parents[i], &tdir);
    let d = work.join("f_text_miss");
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
    ok("import miss", &node.import(KS, "f_text_miss", &d));
    let got = rows(node, "f_text_miss", f);
    let missing: Vec<&String> = parent_rows[i].iter().filter(|r| !got.contains(r)).collect();
    assert!(
        missing.len() == 1 && token_of(missing[0]) == gone,
        "{version}: the child missing one partition must lose exactly it: {missing:?}"
    );
    assert_ne!(got, parent_rows[i], "{version}: SELECT must differ");

    // One flipped byte in an interior chunk of a child.
    let d = work.join("f_text_flip");
    std::fs::create_dir_all(&d).unwrap();
    cleave(&split_args(&parents[i], &d, &["--parts", "3"]));
    let child = data_files(&d).remove(1);
    let mut bytes = std::fs::read(&child).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&child, &bytes).unwrap();
    let log_before = node.log().len();
    let imp = node.import(KS, "f_text_flip", &d);
    let imp_text = format!(
        "{}{}\nnode log:\n{}",
        String::from_utf8_lossy(&imp.stdout),
        String::from_utf8_lossy(&imp.stderr),
        &node.log()[log_before..]
    );
    eprintln!(
        "{version}: flipped byte at {at} of {}: import exit {:?}: {imp_text}",
        child.display(),
        imp.status.code()
    );
    let caught_at_import = !imp.status.success();
    if caught_at_import {
        assert!(
            imp_text.contains("Some directories failed to import") && imp_text.contains("Corrupt"),
            "{version}: import refused the flipped child, but how? {imp_text}"
        );
    } else {
        let v = node.verify(KS, &["f_text_flip"]);
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
    let (i, f) = (0, &FAMILIES[0]);
    let d = work.join("f_int_dp");
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
    eprintln!("{version}: dead-prefix split report: {r}");
    ok("import dp", &node.import(KS, "f_int_dp", &d));
    assert_eq!(
        rows(node, "f_int_dp", f),
        parent_rows[i],
        "{version}: SELECT of the dead-prefix children (read through the index)"
    );
    let c = node.compact(KS, &["f_int_dp"]);
    let ct = format!(
        "{}{}",
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    );
    let after = rows(node, "f_int_dp", f);
    eprintln!(
        "{version}: compact of the dead-prefix children: exit {:?}, {} rows after (parent {}): {ct}",
        c.status.code(),
        after.len(),
        parent_rows[i].len()
    );
    if linear_reader(version) {
        assert!(
            !c.status.success() || after != parent_rows[i],
            "{version}: compaction from position 0 read the dead-prefix children unharmed"
        );
    } else {
        ok(&format!("{version}: compact dead-prefix"), &c);
        assert_eq!(after, parent_rows[i], "{version}: SELECT after compact");
    }
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
    live("5.0.9");
}

#[test]
fn live_5_0_4() {
    live("5.0.4");
}

#[test]
fn live_4_1_10() {
    live("4.1.10");
}

#[test]
fn live_4_0_19() {
    live("4.0.19");
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
