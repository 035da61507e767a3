//! BTI Rows.db: input = `u32 key offset ‖ u32 partition size` (big-endian) then the
//! component bytes. The offset is what Partitions.db would point at, the size what the next
//! partition's position would bound the row index by.
//!
//! Properties: reading the entry and walking its row-index trie never panic and always stop
//! (a typed error or the blocks); an entry that reads fully, written again by `RowsWriter`
//! (trie, key and trailer, as `BtiFormatPartitionWriter` and `TrieIndexEntry.serialize`
//! write them), re-reads to the same key, Data.db position, block count, deletion and
//! blocks.
#![no_main]

use std::path::Path;

use cleave::sstable::bti::rows::{read_blocks, read_entry};
use cleave::sstable::bti::{DeletionTime, RowBlock, RowsWriter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let at = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as u64;
    let size = u32::from_be_bytes([data[4], data[5], data[6], data[7]]) as u64;
    let rows = &data[8..];
    let file = Path::new("fuzz-Rows.db");
    let Ok(entry) = read_entry(file, rows, at) else {
        return;
    };
    let Ok(blocks) = read_blocks(file, rows, &entry, 0, size) else {
        return;
    };
    let mut w = RowsWriter::new(Vec::new());
    let Ok(key_at) = w.append(
        &entry.key,
        entry.data_position,
        &blocks,
        entry.block_count,
        entry.deletion,
    ) else {
        // The writer refuses what Cassandra's would (e.g. no blocks, an unordered separator).
        return;
    };
    let out = w.finish().expect("finishing an appended entry");
    let back = read_entry(file, &out, key_at).expect("a rewritten entry re-reads");
    assert_eq!(back.key, entry.key);
    assert_eq!(back.data_position, entry.data_position);
    assert_eq!(back.block_count, entry.block_count);
    assert_eq!(back.deletion, entry.deletion);
    let again = read_blocks(file, &out, &back, 0, size).expect("rewritten blocks re-read");
    // A live open marker is no marker: the writer leaves it out, as `RowIndexWriter` does.
    let canonical = |b: &[RowBlock]| -> Vec<RowBlock> {
        b.iter()
            .cloned()
            .map(|mut b| {
                b.open_marker = b.open_marker.filter(|d| *d != DeletionTime::Live);
                b
            })
            .collect()
    };
    assert_eq!(canonical(&again), canonical(&blocks));
});
