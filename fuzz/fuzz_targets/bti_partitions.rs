//! BTI Partitions.db: input = the component bytes.
//!
//! Properties: parsing and walking never panic and always stop (a typed error or the end);
//! an index that reads fully and carries hash bytes, rewritten with
//! `PartitionIndexWriter` from its own prefixes and footer keys, re-reads to the same
//! number of entries with the same hash bytes and positions.
#![no_main]

use std::path::Path;

use cleave::sstable::bti::{PartitionEntry, PartitionIndex, PartitionIndexWriter};
use libfuzzer_sys::fuzz_target;

fn read_all(bytes: &[u8]) -> Option<(Vec<PartitionEntry>, Vec<u8>, Vec<u8>)> {
    let index = PartitionIndex::parse(Path::new("fuzz-Partitions.db"), bytes).ok()?;
    let f = index.footer().clone();
    let entries: Vec<_> = index.entries().collect::<Result<_, _>>().ok()?;
    Some((entries, f.first_key, f.last_key))
}

fuzz_target!(|data: &[u8]| {
    let Some((entries, first, last)) = read_all(data) else {
        return;
    };
    if entries.iter().any(|e| e.hash.is_none()) {
        return;
    }
    let mut w = PartitionIndexWriter::new(Vec::new());
    for e in &entries {
        w.add(&e.prefix, e.hash.unwrap(), e.pos)
            .expect("a walk yields strictly increasing prefixes");
    }
    let out = w.finish(Some((&first, &last))).unwrap();
    let (back, _, _) = read_all(&out).expect("rewritten Partitions.db does not re-read");
    assert_eq!(back.len(), entries.len());
    for (b, e) in back.iter().zip(&entries) {
        assert_eq!((b.hash, b.pos), (e.hash, e.pos));
        assert!(e.prefix.starts_with(&b.prefix) || b.prefix.starts_with(&e.prefix));
    }
});
