//! Splitting Cassandra 5.0's BTI (`da`) sstables: Cassandra's own four `da` fixtures
//! (ByteOrderedPartitioner; partitions with and without a Rows.db row index, counters).
//! Cassandra itself judges Murmur3 children of every schema family in
//! `oracle_offline::oracle_matrix_bti_*`; these run without a JVM.
// Always true here; said so that clippy.toml's allow-unwrap-in-tests covers the helpers too
// (rust-clippy#11119).
#![cfg(test)]

mod common;

use std::path::{Path, PathBuf};

use cleave::sstable::table::CheckLevel;
use cleave::sstable::{Component, SSTable};
use common::*;

/// The fixture `name` copied into `<dir>/ks/<name>-<id>/` (writable, as a table directory),
/// and an empty `--out` directory beside it; (parent Data.db, out).
fn fixture_table(shared: &Path, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let fixture = bti_fixture(shared, name);
    let src = fixture.parent().unwrap();
    let table = dir.join(format!("ks/{name}-00000000000000000000000000000001"));
    let out = dir.join(format!("out/ks/{name}-00000000000000000000000000000001"));
    std::fs::create_dir_all(&table).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = table.join(e.file_name());
        std::fs::copy(e.path(), &to).unwrap();
        let mut p = std::fs::metadata(&to).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        p.set_readonly(false);
        std::fs::set_permissions(&to, p).unwrap();
    }
    (table.join("da-1-bti-Data.db"), out)
}

/// `cleave split <parent> --out <out> ARGS --json`.
fn split(parent: &Path, out: &Path, args: &[&str]) -> serde_json::Value {
    let mut a: Vec<&std::ffi::OsStr> = vec!["split".as_ref(), parent.as_os_str()];
    a.extend(["--out".as_ref(), out.as_os_str()]);
    a.extend(args.iter().map(std::ffi::OsStr::new));
    a.push("--json".as_ref());
    cleave_json(&a)
}

/// Every partition of an sstable through cleave's reader: (key, position, has a row index).
fn partitions(data: &Path) -> Vec<(Vec<u8>, u64, bool)> {
    let t = SSTable::open(data).unwrap();
    let src = t.partition_source().unwrap();
    let mut r = src.reader(&t).unwrap();
    let mut v = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        v.push((e.key.to_vec(), e.position, e.row_index.is_some()));
    }
    v
}

/// A cut below every key makes one child holding the whole parent: its Partitions.db,
/// Rows.db and Filter.db are Cassandra's own bytes (the index is rebuilt from the keys,
/// through the port of `PartitionIndexBuilder` and the row-index writer, not copied).
#[test]
fn split_bti_whole_child_rebuilds_cassandras_index_bytes() {
    let Some(shared) = corpus_or_skip("bti whole child") else {
        return;
    };
    let mut rows_indexed = 0;
    for name in BTI_FIXTURES {
        let d = tempfile::tempdir().unwrap();
        let (parent, out) = fixture_table(&shared, d.path(), name);
        let v = split(&parent, &out, &["--tokens", "00"]);
        let kids = data_files(&out);
        assert_eq!(kids.len(), 1, "{name}: {v}");
        let child = SSTable::open(&kids[0]).unwrap();
        let parent_t = SSTable::open(&parent).unwrap();
        for c in [Component::Partitions, Component::Rows, Component::Filter] {
            assert_eq!(
                std::fs::read(child.path(&c)).unwrap(),
                std::fs::read(parent_t.path(&c)).unwrap(),
                "{name}: {} differs from Cassandra's",
                c.file_name()
            );
        }
        assert!(!child.has(&Component::Index) && !child.has(&Component::Summary));
        let toc = std::fs::read_to_string(child.path(&Component::Toc)).unwrap();
        assert!(
            toc.contains("Partitions.db") && toc.contains("Rows.db"),
            "{toc}"
        );
        rows_indexed += partitions(&parent).iter().filter(|p| p.2).count();
    }
    assert!(rows_indexed >= 5, "the clust fixtures have row indexes");
}

/// `--parts 2` of each fixture: the children open, pass cleave's full check (every key at
/// its position, Partitions.db's prefixes and hash bytes against the keys, the filter),
/// hold the parent's keys in order between them, each with a row index where it had one.
#[test]
fn split_bti_children_hold_the_parents_partitions() {
    let Some(shared) = corpus_or_skip("bti parts") else {
        return;
    };
    for name in BTI_FIXTURES {
        let d = tempfile::tempdir().unwrap();
        let (parent, out) = fixture_table(&shared, d.path(), name);
        split(&parent, &out, &["--parts", "2"]);
        let mut kids = data_files(&out);
        kids.sort();
        assert_eq!(kids.len(), 2, "{name}");
        let mut got = Vec::new();
        for k in &kids {
            let t = SSTable::open(k).unwrap();
            let rep = t.check(CheckLevel::Full, &mut |_| {}).unwrap();
            assert!(rep.partitions > 0, "{name}: {}", k.display());
            // Fillers (empty partitions) lead a child that does not start at a chunk
            // boundary; they are not the parent's.
            let skip = rep.empty_partitions as usize;
            got.extend(
                partitions(k)
                    .into_iter()
                    .skip(skip)
                    .map(|(key, _, rows)| (key, rows)),
            );
        }
        let want: Vec<_> = partitions(&parent)
            .into_iter()
            .map(|(key, _, rows)| (key, rows))
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

/// Corruption of a child's Partitions.db is reported by cleave's check, naming the file:
/// every single-byte flip in the trie region either fails the check or leaves a trie that
/// still finds exactly the same partitions (a flipped padding byte).
#[test]
fn split_bti_check_rejects_a_damaged_partitions_db() {
    let Some(shared) = corpus_or_skip("bti damage") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let (parent, out) = fixture_table(&shared, d.path(), "legacy_da_clust");
    split(&parent, &out, &["--tokens", "00"]);
    let kid = data_files(&out).remove(0);
    let t = SSTable::open(&kid).unwrap();
    let path = t.path(&Component::Partitions);
    let good = std::fs::read(&path).unwrap();
    let want = partitions(&kid);
    let (mut caught, mut harmless) = (0, 0);
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        std::fs::write(&path, &bad).unwrap();
        let res = SSTable::open(&kid).and_then(|t| {
            t.check(CheckLevel::Index, &mut |_| {})?;
            let src = t.partition_source()?;
            let mut r = src.reader(&t)?;
            let mut v = Vec::new();
            while let Some(e) = r.next_entry()? {
                v.push((e.key.to_vec(), e.position, e.row_index.is_some()));
            }
            Ok(v)
        });
        match res {
            Err(e) => {
                assert!(
                    e.to_string().contains("Partitions.db") || e.to_string().contains("Rows.db"),
                    "byte {at}: {e}"
                );
                caught += 1;
            }
            Ok(v) => {
                assert_eq!(v, want, "byte {at}: a damaged trie read other partitions");
                harmless += 1;
            }
        }
    }
    std::fs::write(&path, &good).unwrap();
    eprintln!(
        "Partitions.db of {} bytes: {caught} flips caught, {harmless} harmless",
        good.len()
    );
    assert!(caught > good.len() / 2, "{caught} of {}", good.len());
}
