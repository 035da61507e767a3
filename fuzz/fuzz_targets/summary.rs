//! Summary.db.
//!
//! Properties: parsing never panics; a parsed summary serializes to bytes that re-parse
//! to an equal summary, and serializing that again gives the same bytes. (The input
//! itself need not come back: its offsets may leave gaps the writer does not.)
#![no_main]

use std::path::Path;

use cleave::sstable::summary::Summary;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = Path::new("fuzz-Summary.db");
    let Ok(s) = Summary::parse(file, data) else {
        return;
    };
    let out = s.serialize();
    assert!(
        out.len() <= data.len(),
        "serialized summary is longer than its input"
    );
    let back = Summary::parse(file, &out)
        .unwrap_or_else(|e| panic!("serialized Summary does not re-parse: {e}"));
    assert_eq!(back, s, "re-parse differs");
    assert_eq!(back.serialize(), out, "serialize is not stable");
});
