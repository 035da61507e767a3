//! Filter.db, both layouts (`na`+ and the byte-reversed `ma`..`me` words).
//!
//! Properties: parsing never panics; both layouts accept exactly the same inputs; each
//! serializes back to exactly the input in its own layout, and the two parses are the
//! same bits with every 8-byte word reversed; a key added to a parsed filter is then
//! found by `may_contain`.
#![no_main]

use std::path::Path;

use cleave::sstable::filter::BloomFilter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = Path::new("fuzz-Filter.db");
    let new = BloomFilter::parse(file, data, false);
    let old = BloomFilter::parse(file, data, true);
    let (new, old) = match (new, old) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(_), Err(_)) => return,
        (n, o) => panic!("layouts disagree: new {:?}, old {:?}", n.err(), o.err()),
    };
    assert_eq!(new.serialize(false), data);
    assert_eq!(old.serialize(true), data);
    assert_eq!(new.hash_count, old.hash_count);
    assert_eq!(new.serialize(true), old.serialize(false));
    for (a, b) in new.bits.chunks(8).zip(old.bits.chunks(8)) {
        assert!(a.iter().eq(b.iter().rev()));
    }

    let key = &data[data.len().saturating_sub(16)..];
    let _ = new.may_contain(key);
    let mut f = new;
    f.add(key);
    assert!(f.may_contain(key), "an added key is not found");
});
