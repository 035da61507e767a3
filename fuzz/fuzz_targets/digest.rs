//! Digest.crc32.
//!
//! Properties: parsing never panics; a parsed digest serializes to the canonical decimal,
//! which re-parses to the same value; an input that is already canonical comes back as is.
#![no_main]

use std::path::Path;

use cleave::sstable::checksum::Digest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = Path::new("fuzz-Digest.crc32");
    let Ok(d) = Digest::parse(file, data) else {
        return;
    };
    let out = d.serialize();
    assert_eq!(Digest::parse(file, &out).unwrap(), d);
    assert!(out.iter().all(u8::is_ascii_digit));
    let canonical = data.first() != Some(&b'0') || data == b"0";
    if canonical && data.iter().all(u8::is_ascii_digit) {
        assert_eq!(out, data);
    }
});
