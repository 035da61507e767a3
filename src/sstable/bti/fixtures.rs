//! The BTI codecs against Cassandra's own `da` fixtures in `../shared/corpus`
//! (`test/data/legacy-sstables/da/legacy_tables/legacy_da_*`, written by Cassandra with
//! ByteOrderedPartitioner): every Partitions.db and Rows.db is read, rewritten from what
//! was read, and must come out byte-identical.

use std::path::{Path, PathBuf};

use super::keys;
use super::partitions::{IndexPos, PartitionIndex, PartitionIndexWriter};
use super::rows::{self, RowsWriter};
use crate::sstable::token::Partitioner;

const FIXTURES: [&str; 4] = [
    "legacy_da_simple",
    "legacy_da_simple_counter",
    "legacy_da_clust",
    "legacy_da_clust_counter",
];

fn fixture_dir(name: &str) -> Option<PathBuf> {
    let shared = std::env::var_os("CLEAVE_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let d = shared
        .join("corpus/gitarcode-test+cassandra/test/data/legacy-sstables/da/legacy_tables")
        .join(name);
    if d.is_dir() {
        Some(d)
    } else {
        eprintln!("SKIP {name}: {} not found (set CLEAVE_SHARED)", d.display());
        None
    }
}

struct Fixture {
    partitions_path: PathBuf,
    partitions: Vec<u8>,
    rows_path: PathBuf,
    rows: Vec<u8>,
    /// Uncompressed Data.db length: where the last partition ends.
    data_length: u64,
}

fn load(name: &str) -> Option<Fixture> {
    let d = fixture_dir(name)?;
    let partitions_path = d.join("da-1-bti-Partitions.db");
    let rows_path = d.join("da-1-bti-Rows.db");
    let table = crate::sstable::SSTable::open(&d.join("da-1-bti-Data.db")).unwrap();
    Some(Fixture {
        data_length: table.data_length(),
        partitions: std::fs::read(&partitions_path).unwrap(),
        rows: std::fs::read(&rows_path).unwrap(),
        partitions_path,
        rows_path,
    })
}

#[test]
fn bti_fixtures_partitions_read_and_rewrite_byte_identical() {
    let mut checked = 0;
    for name in FIXTURES {
        let Some(f) = load(name) else { continue };
        let index = PartitionIndex::parse(&f.partitions_path, &f.partitions)
            .unwrap()
            .with_limits(None, Some(f.rows.len() as u64));
        let footer = index.footer().clone();
        let entries: Vec<_> = index.entries().collect::<Result<_, _>>().unwrap();
        assert_eq!(entries.len() as u64, footer.key_count, "{name}");
        assert_eq!(entries.len(), 5, "{name}: the MANIFEST says 5 partitions");
        assert_eq!(index.root_end().unwrap(), footer.first_key_pos, "{name}");

        // Rows.db entries carry the full key: check prefix and hash against it.
        for e in &entries {
            assert!(
                e.hash.is_some(),
                "{name}: Cassandra 5.0 always writes a hash byte"
            );
            if let IndexPos::Rows(p) = e.pos {
                let entry = rows::read_entry(&f.rows_path, &f.rows, p).unwrap();
                assert_eq!(e.hash, Some(keys::hash_byte(&entry.key)), "{name}");
                let full = keys::decorated_key(Partitioner::ByteOrdered, &entry.key).unwrap();
                assert!(full.starts_with(&e.prefix), "{name}: {:02x?}", e.prefix);
            }
        }
        assert_eq!(
            entries[0].hash,
            Some(keys::hash_byte(&footer.first_key)),
            "{name}"
        );
        assert_eq!(
            entries[4].hash,
            Some(keys::hash_byte(&footer.last_key)),
            "{name}"
        );

        // Rewrite from the stored prefixes alone.
        let mut w = PartitionIndexWriter::new(Vec::new());
        for e in &entries {
            w.add(&e.prefix, e.hash.unwrap(), e.pos).unwrap();
        }
        let out = w
            .finish(Some((&footer.first_key, &footer.last_key)))
            .unwrap();
        assert_eq!(out, f.partitions, "{name}: rewrite from prefixes differs");
        checked += 1;
    }
    eprintln!("{checked} fixture Partitions.db rewritten byte-identically");
}

#[test]
fn bti_fixtures_partitions_from_full_keys_byte_identical() {
    // The fixtures' keys are "0".."4" (the first and last are in the footer; the others
    // are in Rows.db for the clustering tables). Building from the full byte-comparable
    // keys checks the ByteOrdered key encoding and the builder's cut logic.
    for name in FIXTURES {
        let Some(f) = load(name) else { continue };
        let index = PartitionIndex::parse(&f.partitions_path, &f.partitions).unwrap();
        let footer = index.footer().clone();
        let entries: Vec<_> = index.entries().collect::<Result<_, _>>().unwrap();
        let mut w = PartitionIndexWriter::new(Vec::new());
        for (i, e) in entries.iter().enumerate() {
            let key = [b'0' + i as u8];
            w.add_key(Partitioner::ByteOrdered, &key, e.pos).unwrap();
        }
        assert_eq!(footer.first_key, b"0");
        assert_eq!(footer.last_key, b"4");
        let out = w
            .finish(Some((&footer.first_key, &footer.last_key)))
            .unwrap();
        assert_eq!(out, f.partitions, "{name}: rewrite from full keys differs");
    }
}

#[test]
fn bti_fixtures_rows_read_and_rewrite_byte_identical() {
    let mut entries_checked = 0;
    for name in FIXTURES {
        let Some(f) = load(name) else { continue };
        let index = PartitionIndex::parse(&f.partitions_path, &f.partitions).unwrap();
        let mut w = RowsWriter::new(Vec::new());
        let mut trie_start = 0;
        let data_length = f.data_length;
        let positions: Vec<IndexPos> = index.entries().map(|e| e.unwrap().pos).collect();
        let data_position = |pos: IndexPos| match pos {
            IndexPos::Data(d) => d,
            IndexPos::Rows(r) => {
                rows::read_entry(&f.rows_path, &f.rows, r)
                    .unwrap()
                    .data_position
            }
        };
        for (i, &pos) in positions.iter().enumerate() {
            let IndexPos::Rows(p) = pos else {
                continue;
            };
            let entry = rows::read_entry(&f.rows_path, &f.rows, p).unwrap();
            // Each partition ends where the next starts (the data length after the last):
            // its blocks, sentinel included, must lie inside, as Cassandra wrote them.
            let end = positions
                .get(i + 1)
                .map_or(data_length, |&n| data_position(n));
            let size = end - entry.data_position;
            // Refused if a block, sentinel included, lay past the partition.
            let blocks =
                rows::read_blocks(&f.rows_path, &f.rows, &entry, trie_start, size).unwrap();
            // Cassandra writes a row index only for >= 2 blocks, plus a sentinel payload.
            assert!(entry.block_count >= 2, "{name}");
            assert_eq!(blocks.len() as u32, entry.block_count + 1, "{name}");
            assert!(blocks[0].separator.is_empty(), "{name}");
            assert!(
                blocks.windows(2).all(|b| b[0].offset < b[1].offset),
                "{name}"
            );
            let at = w
                .append(
                    &entry.key,
                    entry.data_position,
                    &blocks,
                    entry.block_count,
                    entry.deletion,
                )
                .unwrap();
            assert_eq!(at, p, "{name}: key lands at a different offset");
            trie_start = entry.end;
            entries_checked += 1;
        }
        let out = w.finish().unwrap();
        assert_eq!(out, f.rows, "{name}: Rows.db rewrite differs");
    }
    eprintln!("{entries_checked} fixture Rows.db entries rewritten byte-identically");
}
