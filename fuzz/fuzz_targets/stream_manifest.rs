//! The stream manifest (src/stream/manifest.rs), what a receiver decodes from the network
//! before it writes anything.
//!
//! The input is tried twice: as a whole envelope, and as the JSON payload of an envelope
//! with a correct header and CRC (so the fuzzer reaches the field rules instead of
//! stopping at the CRC).
//!
//! Properties: decoding never panics; a decoded manifest passed every validation rule
//! (so its names are allow-listed and its sizes bounded), and encodes back to bytes that
//! decode to the same manifest.
#![no_main]

use cleave::stream::manifest::{
    decode, encode, ALLOWED_COMPONENTS, MAGIC, MAX_DATA_BYTES, PROTOCOL_VERSION,
};
use libfuzzer_sys::fuzz_target;

fn envelope(payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_be_bytes());
    b
}

fuzz_target!(|data: &[u8]| {
    check(data);
    check(&envelope(data));
});

fn check(data: &[u8]) {
    let Ok(m) = decode(data) else {
        return;
    };
    assert!(m.validate().is_ok());
    for f in &m.files {
        assert!(ALLOWED_COMPONENTS.contains(&f.component.as_str()));
        assert!(f.size <= MAX_DATA_BYTES);
    }
    assert!(!m.transfer.contains('/') && !m.transfer.starts_with('.'));
    assert_eq!(decode(&encode(&m)).unwrap(), m);
}
