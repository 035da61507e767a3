//! Index.db: input = 8-byte big-endian Data.db length + the component bytes.
//!
//! Properties: reading every entry never panics and stops (at the end or at the first
//! error); a reader fed a few bytes per `read` sees exactly the same entries and error as
//! one over the whole slice; the entries read, rewritten with `IndexWriter` (base 0),
//! re-read to the same keys, positions and promoted indexes, at the offsets the writer
//! returned, and the rewrite of a fully valid index is the input unless it had
//! over-long vints.
#![no_main]

use std::io::Read;
use std::path::Path;

use cleave::sstable::index::{IndexEntry, IndexReader, IndexWriter};
use libfuzzer_sys::fuzz_target;

/// A source that returns at most `n` bytes per read, to exercise every refill path.
struct Trickle<'a> {
    rest: &'a [u8],
    n: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let k = self.rest.len().min(out.len()).min(self.n);
        out[..k].copy_from_slice(&self.rest[..k]);
        self.rest = &self.rest[k..];
        Ok(k)
    }
}

/// Every entry until the end or the first error (as its message).
fn read_all<R: Read>(mut r: IndexReader<R>) -> (Vec<IndexEntry>, Option<String>) {
    let mut entries = Vec::new();
    loop {
        match r.next_entry() {
            Ok(Some(e)) => entries.push(e.to_owned()),
            Ok(None) => {
                assert_eq!(r.entries_read(), entries.len() as u64);
                return (entries, None);
            }
            Err(e) => return (entries, Some(e.to_string())),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (dl, bytes) = data.split_at(8);
    let data_length = u64::from_be_bytes(dl.try_into().unwrap());
    let file = Path::new("fuzz-Index.db");

    let (entries, err) =
        read_all(IndexReader::from_bytes(file, bytes).with_data_length(data_length));

    let trickle = Trickle { rest: bytes, n: 7 };
    let streamed =
        read_all(IndexReader::new(file, trickle, bytes.len() as u64).with_data_length(data_length));
    assert_eq!(
        streamed,
        (entries.clone(), err.clone()),
        "result depends on read sizes"
    );

    let mut w = IndexWriter::new(Vec::new(), 0);
    let mut offsets = Vec::with_capacity(entries.len());
    for e in &entries {
        assert!(e.position < data_length);
        offsets.push(
            w.append(&e.key, e.position, &e.promoted_index)
                .expect("a parsed entry is writable at base 0"),
        );
    }
    let out = w.finish().unwrap();
    let (back, back_err) =
        read_all(IndexReader::from_bytes(file, &out).with_data_length(data_length));
    assert_eq!(back_err, None, "rewritten Index.db does not re-read");
    assert_eq!(back.len(), entries.len());
    for ((b, e), off) in back.iter().zip(&entries).zip(&offsets) {
        assert_eq!(b.key, e.key);
        assert_eq!(b.position, e.position);
        assert_eq!(b.promoted_index, e.promoted_index);
        assert_eq!(b.index_offset, *off);
    }
    // The writer uses the shortest vints; a vint of a given length has one encoding. So
    // the rewrite of a whole valid index is never longer, and equal length means equal.
    if err.is_none() {
        assert!(out.len() <= bytes.len());
        if out.len() == bytes.len() {
            assert_eq!(out, bytes);
        }
    }
});
