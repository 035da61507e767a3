//! Statistics.db, parsed as every supported version.
//!
//! Properties: parsing never panics; a parsed value serializes (in the same version) to
//! bytes that re-parse to an equal value, and serializing that again gives the same bytes.
//! Values that differ under `==` must print the same `Debug` (a NaN, which is a legal
//! compression ratio or token-space coverage, is not `==` to itself); the byte check
//! catches what `==` lets through (-0.0 and 0.0, NaN payloads).
#![no_main]

use std::path::Path;

use cleave::sstable::descriptor::{Version, SUPPORTED_BIG_VERSIONS};
use cleave::sstable::statistics::Statistics;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = Path::new("fuzz-Statistics.db");
    for v in SUPPORTED_BIG_VERSIONS {
        let v = Version::parse(v).expect("supported versions parse");
        let Ok(s) = Statistics::parse(file, data, v) else {
            continue;
        };
        if let Some(c) = &s.compaction {
            let _ = c.cardinality();
        }
        let out = s.serialize(v);
        let back = Statistics::parse(file, &out, v)
            .unwrap_or_else(|e| panic!("{v}: serialized Statistics does not re-parse: {e}"));
        if back != s {
            // NaN != NaN: only then do the values differ under `==` yet print the same.
            assert_eq!(
                format!("{back:?}"),
                format!("{s:?}"),
                "{v}: re-parse differs"
            );
        }
        assert_eq!(back.serialize(v), out, "{v}: serialize is not stable");
    }
});
