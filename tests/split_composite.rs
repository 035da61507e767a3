//! Composite partition keys end to end (issue 16): tables written by an independent
//! writer (cqlite-py, `tests/py/cqlite_write.py`: uncompressed `nb`, Murmur3), split for
//! the default target (unknown = the newest release line, which compacts Data.db from
//! position 0) and for 4.1. The corpus has composite-key sstables, but none with a known
//! schema, so cqlite cannot compare their rows; these tables have one.
//!
//! What is asserted, per table: every child passes `sstcheck.py`; for the unknown target
//! every child's first partition is at position 0; the children's keys, in order and
//! without their leading empty (filler) partitions, are the parent's; cqlite reads from the
//! children exactly the parent's rows; and how each child got there — fillers where a
//! component of the key is variable-length (`text`, `blob`), one row filler (empty rows
//! with tuned vints, issue 32) where every component is fixed-width.
//!
//! On a loop XFS (reflink=1), so that no child falls back for the filesystem's sake.
//! Uncompressed parents are cut at 64 KiB CRC.db blocks (docs/split.md "Layouts"): a child
//! that starts inside a block carries the block's start as its dead prefix, so here every
//! child but the first has one (the tables span three blocks, cut four ways).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};

use cleave::split::plan::Layout;
use cleave::split::publish::Publish;
use cleave::split::spec::Cut;
use cleave::split::{run_path, DigestPolicy, Policy, SplitReport, Target};
use cleave::sstable::cassandra::TargetCassandra;
use cleave::sstable::filler::{key_shape, KeyShape, Part};
use cleave::sstable::{hex, SSTable};
use common::index_keys as keys;
use common::*;

const KS: &str = "ks";

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(name)
}

/// A table `ks.<table>` of `schema` written by cqlite in `dir`: its Data.db and the schema
/// file.
fn write_table(dir: &Path, table: &str, schema: &str, partitions: u32) -> (PathBuf, PathBuf) {
    let schema_path = dir.join(format!("{table}.cql"));
    std::fs::write(&schema_path, schema).unwrap();
    let out = dir.join(format!("{table}-written"));
    let partitions = partitions.to_string();
    let v = python_json(&[
        script("cqlite_write.py").as_os_str(),
        "--schema".as_ref(),
        schema_path.as_os_str(),
        "--keyspace".as_ref(),
        KS.as_ref(),
        "--table".as_ref(),
        table.as_ref(),
        "--partitions".as_ref(),
        partitions.as_ref(),
        "--rows-per-partition".as_ref(),
        "2".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    assert!(v.get("error").is_none(), "cqlite_write: {}", v["error"]);
    // Into a directory of its own: the split writes its children next to nothing else.
    let data = copy_sstable(
        Path::new(v["data_db"].as_str().unwrap()),
        &dir.join(format!("{table}-parent")),
    );
    (data, schema_path)
}

fn key_type(data: &Path) -> String {
    let t = SSTable::open(data).unwrap();
    t.statistics.header.as_ref().unwrap().key_type.clone()
}

fn split(parent: &Path, cut: &Cut, out: &Path, target: TargetCassandra) -> SplitReport {
    std::fs::create_dir_all(out).unwrap();
    let policy = Policy {
        digest: DigestPolicy::Combine,
        target,
        ..Policy::default()
    };
    let t = Target {
        out_dir: out.to_path_buf(),
        publish: Publish::Stage,
        dry_run: false,
    };
    let rep =
        run_path(parent, cut, &policy, &t, &mut |_| {}).unwrap_or_else(|e| panic!("split: {e}"));
    for c in &rep.children {
        eprintln!(
            "  {target} {cut:?}: {:?} dead prefix {} fillers {} ({} B) shared {} re-encoded {} {}",
            c.layout,
            c.dead_prefix,
            c.filler_partitions,
            c.filler_bytes,
            c.bytes_shared,
            c.bytes_reencoded,
            c.fallback.as_ref().map(|f| f.reason()).unwrap_or("")
        );
    }
    rep
}

/// The children pass sstcheck; for a target that scans from 0, start at position 0; hold
/// the parent's keys in order once their leading fillers are left out (sstcheck's
/// `empty_partitions`, the report's `filler_partitions`); and cqlite reads the parent's rows
/// from them.
fn assert_children(
    shared: &Path,
    parent: &Path,
    schema: &Path,
    table: &str,
    rep: &SplitReport,
    target: TargetCassandra,
) {
    let paths: Vec<PathBuf> = rep.children.iter().map(|c| c.path.clone()).collect();
    let checks = if target.scans_data_from_zero() {
        sstcheck_all_from_zero(shared, &paths)
    } else {
        sstcheck_all(shared, &paths)
    };
    let mut all = Vec::new();
    for (c, s) in rep.children.iter().zip(&checks) {
        let empties = s["empty_partitions"].as_u64().unwrap();
        // sstcheck.py counts only `LIVE | 0x01` as empty: a row filler (fixed-width keys,
        // `filler::row_filler`) is a partition to it, and the report's filler.
        let row_fillers = c.filler_partitions - empties;
        assert!(
            empties == c.filler_partitions || (empties == 0 && row_fillers == 1),
            "{}: sstcheck {empties} empty, report {} fillers",
            c.path.display(),
            c.filler_partitions
        );
        assert_eq!(s["partitions"].as_u64(), Some(c.partitions + row_fillers));
        let empties = c.filler_partitions;
        let ks = keys(&c.path);
        assert!(
            ks.len() as u64 > empties,
            "{}: no real partition",
            c.path.display()
        );
        all.extend(ks.into_iter().skip(empties as usize));
    }
    assert_eq!(
        all,
        keys(parent),
        "children's keys, in order, are the parent's"
    );
    assert!(rep.check.as_ref().is_some_and(|c| c.ok));
    if rep.children.iter().any(|c| c.filler_partitions > 0)
        && matches!(key_shape(&key_type(parent)), KeyShape::Fixed(_))
    {
        // cqlite 0.17 misreads a row filler's empty rows (a "row deletion" past the row's
        // size), where every Cassandra reads them as empty
        // (`oracle_offline::oracle_row_fillers_*`).
        return;
    }
    assert_eq!(
        cqlite_dump_rows(schema, KS, table, &paths),
        cqlite_dump_rows(schema, KS, table, &[parent]),
        "cqlite rows of the children"
    );
}

/// The cuts each table is split by: 4 parts, and 3 tokens at partitions of the parent.
fn cuts(parent: &Path) -> Vec<Cut> {
    let t = SSTable::open(parent).unwrap();
    let mut r = t.index_reader().unwrap();
    let mut tokens = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        tokens.push(t.partitioner.token(e.key));
    }
    tokens.sort();
    let n = tokens.len();
    let at = vec![
        tokens[n / 5].clone(),
        tokens[n / 2].clone(),
        tokens[4 * n / 5].clone(),
    ];
    vec![Cut::Parts(4), Cut::Tokens(at)]
}

/// A cqlite-written table on a loop XFS (reflink, so that a child's fallback is only ever
/// the dead prefix's), or `None` (skipped, with the reason printed).
struct Fixture {
    shared: PathBuf,
    table: &'static str,
    parent: PathBuf,
    schema: PathBuf,
    key_type: String,
    work: tempfile::TempDir,
    _fs: cleave::io::loopfs::LoopMount,
}

fn fixture(table: &'static str, schema: &str) -> Option<Fixture> {
    let shared = corpus_or_skip(table)?;
    if !cqlite_available() {
        eprintln!("SKIP {table}: python package cqlite-py is not installed");
        return None;
    }
    let fs = xfs_or_skip(table, 320 << 20)?;
    let work = tempfile::tempdir_in(&fs.mount_point).unwrap();
    let (parent, schema) = write_table(work.path(), table, schema, 700);
    let key_type = key_type(&parent);
    Some(Fixture {
        shared,
        table,
        parent,
        schema,
        key_type,
        work,
        _fs: fs,
    })
}

impl Fixture {
    /// Split by `cut` (the `i`th) for `target` into 4 children, checked by `assert_children`.
    fn split(&self, i: usize, cut: &Cut, target: TargetCassandra) -> SplitReport {
        let out = self.work.path().join(format!("{target}-{i}"));
        let rep = split(&self.parent, cut, &out, target);
        assert_eq!(rep.children.len(), 4, "{cut:?}");
        assert_children(
            &self.shared,
            &self.parent,
            &self.schema,
            self.table,
            &rep,
            target,
        );
        rep
    }
}

/// A composite key with a variable-length component: every child but the one at the
/// parent's position 0 gets filler partitions (with that component free, the others
/// valid fixed values), none is regrid.
fn variable_component(table: &'static str, schema: &str, expect_shape: fn(&KeyShape) -> bool) {
    let Some(fx) = fixture(table, schema) else {
        return;
    };
    let kt = &fx.key_type;
    assert!(expect_shape(&key_shape(kt)), "{kt}: {:?}", key_shape(kt));
    for (i, cut) in cuts(&fx.parent).iter().enumerate() {
        let rep = fx.split(i, cut, TargetCassandra::Unknown);
        for (k, c) in rep.children.iter().enumerate() {
            assert_eq!(c.fallback, None, "{cut:?} child {k}");
            assert_ne!(c.layout, Layout::Regrid, "{cut:?} child {k}");
            assert_eq!(c.dead_prefix, 0, "{cut:?} child {k}: zeros left");
            if k > 0 {
                assert!(
                    c.filler_partitions > 0 && c.filler_bytes > 0,
                    "{cut:?} child {k} starts inside a CRC block: it needs fillers"
                );
                // Each filler's key is a valid composite of the key type: sstcheck parsed
                // it; here, that its fixed components are values of their width.
                let t = SSTable::open(&c.path).unwrap();
                let mut r = t.index_reader().unwrap();
                let first = r.next_entry().unwrap().unwrap();
                assert_eq!(first.position, 0);
                assert_composite(first.key, &key_shape(kt));
            } else {
                assert_eq!(c.filler_partitions, 0, "the first child starts at 0");
            }
        }
    }
}

/// `key` is `u16 length | value | 0x00` per component, fixed components of their width.
fn assert_composite(key: &[u8], shape: &KeyShape) {
    let KeyShape::Composite(parts) = shape else {
        panic!("{shape:?}");
    };
    let mut at = 0;
    for p in parts {
        let len = u16::from_be_bytes([key[at], key[at + 1]]) as usize;
        if let Part::Fixed(v) = p {
            assert_eq!(len, v.len(), "{}", hex::encode(key));
        }
        assert_eq!(
            key[at + 2 + len],
            0,
            "end-of-component of {}",
            hex::encode(key)
        );
        at += 3 + len;
    }
    assert_eq!(at, key.len(), "{}", hex::encode(key));
}

#[test]
fn composite_text_int_key_gets_fillers() {
    variable_component(
        "ct",
        "CREATE TABLE ks.ct (k text, b int, c int, v text, PRIMARY KEY ((k, b), c));\n",
        |s| matches!(s, KeyShape::Composite(p) if p == &[Part::Free, Part::Fixed(vec![0; 4])]),
    );
}

#[test]
fn composite_blob_bigint_key_gets_fillers() {
    variable_component(
        "cb",
        "CREATE TABLE ks.cb (k blob, n bigint, c int, v text, PRIMARY KEY ((k, n), c));\n",
        |s| matches!(s, KeyShape::Composite(p) if p == &[Part::Free, Part::Fixed(vec![0; 8])]),
    );
}

/// Every component fixed-width (`int`, `bigint`): every child with a dead prefix gets one
/// row filler (issue 32: a partition of empty rows whose vints tune its size) for the
/// unknown target, zero-copy, no fallback; for 4.1 the same children keep their dead prefix
/// (zeros), zero-copy.
#[test]
fn composite_of_fixed_width_components_gets_a_row_filler() {
    let Some(fx) = fixture(
        "cf",
        "CREATE TABLE ks.cf (a int, n bigint, c int, v text, PRIMARY KEY ((a, n), c));\n",
    ) else {
        return;
    };
    let kt = &fx.key_type;
    assert!(matches!(key_shape(kt), KeyShape::Fixed(_)), "{kt}");
    for (i, cut) in cuts(&fx.parent).iter().enumerate() {
        let rep = fx.split(i, cut, TargetCassandra::Unknown);
        for (k, c) in rep.children.iter().enumerate() {
            assert_eq!(c.fallback, None, "{cut:?} child {k}");
            assert_ne!(c.layout, Layout::Regrid);
            if k == 0 {
                assert_eq!(c.filler_partitions, 0, "the first child starts at 0");
                continue;
            }
            assert_eq!(c.filler_partitions, 1, "{cut:?} child {k}: one row filler");
            assert!(c.filler_bytes > 0);
        }

        // Cassandra 4.1 never reads the dead prefix: the same children stay zero-copy.
        let t41 = TargetCassandra::parse("4.1").unwrap();
        let rep = fx.split(i, cut, t41);
        for (k, c) in rep.children.iter().enumerate() {
            assert_eq!(c.fallback, None, "{cut:?} child {k}");
            assert_ne!(c.layout, Layout::Regrid);
            assert_eq!(c.filler_partitions, 0);
            assert_eq!(
                c.dead_prefix > 0,
                k > 0,
                "{cut:?} child {k}: {}",
                c.dead_prefix
            );
        }
    }
}
