//! CRC.db (`ChunkChecksums`).
//!
//! Properties: parsing never panics; a parsed value serializes back to exactly the input.
#![no_main]

use std::path::Path;

use cleave::sstable::checksum::ChunkChecksums;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = Path::new("fuzz-CRC.db");
    let Ok(c) = ChunkChecksums::parse(file, data) else {
        return;
    };
    assert!(c.chunk_size > 0);
    assert_eq!(c.serialize(), data, "serialize is not the input bytes");
    assert_eq!(ChunkChecksums::parse(file, &c.serialize()).unwrap(), c);
    let _ = c.expected_chunks(u64::MAX);
    let _ = c.expected_chunks(0);
});
