//! CompressionInfo.db: input = one version-selector byte + the component bytes.
//!
//! Properties: parsing never panics; a parsed value serializes back to exactly the input
//! (the layout has one encoding per value) and re-parses to an equal value; the chunk
//! helpers never panic on a parsed value.
#![no_main]

use std::path::Path;

use cleave::sstable::compression::CompressionInfo;
use cleave::sstable::descriptor::{Version, SUPPORTED_BIG_VERSIONS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, bytes)) = data.split_first() else {
        return;
    };
    let v = SUPPORTED_BIG_VERSIONS[sel as usize % SUPPORTED_BIG_VERSIONS.len()];
    let version = Version::parse(v).expect("supported versions parse");
    let file = Path::new("fuzz-CompressionInfo.db");
    let Ok(ci) = CompressionInfo::parse(file, bytes, version) else {
        return;
    };

    let out = ci
        .serialize()
        .expect("offsets parsed into memory serialize");
    let back = CompressionInfo::parse(file, &out, version)
        .unwrap_or_else(|e| panic!("serialized CompressionInfo does not re-parse: {e}"));
    assert_eq!(back, ci, "re-parse differs");
    assert_eq!(out, bytes, "serialize is not the input bytes");

    // Invariants parse guarantees, and helpers that must not panic on any parsed value.
    assert!(ci.chunk_length.is_power_of_two());
    assert!(ci.live_chunk_count() <= ci.chunk_count());
    let offsets = ci
        .offsets
        .to_vec()
        .expect("offsets parsed into memory are readable");
    assert!(offsets.windows(2).all(|w| w[1] >= w[0] + 4));
    let last = *offsets.last().expect("at least one chunk");
    assert!(ci.check_data_size(file, last + 4).is_ok());
    assert!(ci.check_data_size(file, last + 3).is_err());
    for i in 0..ci.chunk_count() {
        let (s, e) = ci
            .chunk_span(i, last + 4)
            .expect("every parsed chunk has a span in a file of the right size");
        assert!(s + 4 <= e);
    }
    if ci.data_length > 0 {
        assert!(ci.chunk_index(ci.data_length - 1).is_some());
    }
    let _ = ci.chunk_index(u64::MAX);
    let _ = ci.codec();
    let _ = ci.is_stored_raw(usize::MAX);
});
