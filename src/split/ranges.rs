//! Token ranges as operators and the CRDs write them: `[{start: "<token>", end: "<token>"}]`
//! meaning `(start, end]`, decimal for Murmur3/Random and hex for ByteOrdered.

use crate::sstable::{Partitioner, TokenRange};

/// Any token of any partitioner (the CRD's per-family rules are in
/// `operator::crd::admission_rules`), so that a word such as `abc` is refused with a message
/// naming the field.
pub const TOKEN_ANY: &str = "^(-?[0-9]+|([0-9a-fA-F]{2})*)$";

/// `(start, end]`, tokens as decimal strings (Murmur3, Random) or hex (ByteOrdered).
// The CRD's `TokenRange` too (its doc comments are the schema's descriptions). No
// catch-all for unknown fields here: both fields are required, so a misspelt one is
// refused as missing, and nothing optional can be misspelt.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema,
)]
pub struct RangeSpec {
    /// Exclusive start token: decimal for Murmur3 (signed 64-bit) and Random (0..2^127, or
    /// -1, its minimum), an even number of hex digits for ByteOrdered (`spec.partitioner`).
    #[schemars(regex(pattern = TOKEN_ANY))]
    pub start: String,
    /// Inclusive end token, in the same notation.
    #[schemars(regex(pattern = TOKEN_ANY))]
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
