//! Token ranges as operators and the CRDs write them: `[{start: "<token>", end: "<token>"}]`
//! meaning `(start, end]`, decimal for Murmur3/Random and hex for ByteOrdered.

use crate::sstable::{Partitioner, TokenRange};

#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct RangeSpec {
    pub start: String,
    pub end: String,
}

/// A ranges file: either a list of ranges, or a mapping with `ranges` and optionally
/// `transientRanges` (the AnticompactionJob spec's field names).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct RangesFile {
    #[serde(default)]
    pub ranges: Vec<RangeSpec>,
    #[serde(default, rename = "transientRanges")]
    pub transient_ranges: Vec<RangeSpec>,
}

pub fn parse_ranges_yaml(text: &str) -> Result<RangesFile, String> {
    if let Ok(list) = serde_saphyr::from_str::<Vec<RangeSpec>>(text) {
        return Ok(RangesFile {
            ranges: list,
            transient_ranges: Vec::new(),
        });
    }
    serde_saphyr::from_str::<RangesFile>(text).map_err(|e| {
        format!("expected a list of {{start, end}} or a mapping with ranges/transientRanges: {e}")
    })
}

pub fn to_token_ranges(p: Partitioner, specs: &[RangeSpec]) -> Result<Vec<TokenRange>, String> {
    specs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let left = p
                .parse_token(&r.start)
                .map_err(|e| format!("range {i} start: {e}"))?;
            let right = p
                .parse_token(&r.end)
                .map_err(|e| format!("range {i} end: {e}"))?;
            Ok(TokenRange::new(left, right))
        })
        .collect()
}
