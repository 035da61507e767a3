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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangesFile {
    pub ranges: Vec<RangeSpec>,
    pub transient_ranges: Vec<RangeSpec>,
}

/// A ranges file's entry: `RangeSpec` refusing unknown keys. A key cleave does not know is
/// a key it would ignore, and an ignored `transient: true` or a misspelt list name
/// silently changes which rows a cleanup keeps (issue 31, item 3); `RangeSpec` itself stays
/// open because it is also the CRD's schema, whose unknown fields the API server refuses.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRange {
    start: String,
    end: String,
}

/// The mapping form. `deny_unknown_fields`: `transient_ranges` (snake case) or `range`
/// must not parse as an empty list while the ranges they meant are taken for unowned.
/// `ranges` is required (`ranges: []` says "none" on purpose): a mapping with only
/// `transientRanges`, or an empty file, was read as no full range at all (issue 37).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMapping {
    ranges: Vec<FileRange>,
    #[serde(default, rename = "transientRanges")]
    transient_ranges: Vec<FileRange>,
}

/// Parser limits for a ranges file: serde-saphyr's defaults (250,000 nodes) stop at about
/// 50,000 ranges (five nodes each). A vnode ring hands a node a few thousand at most, but
/// the ranges of several nodes, or a split into many, are legitimate; 2,000,000 nodes (about
/// 400,000 ranges, some 20 MB of YAML) keeps a runaway file from taking the memory.
const MAX_NODES: usize = 2_000_000;

fn yaml_options(max_nodes: usize) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_nodes = max_nodes;
    budget.max_events = 4 * max_nodes;
    let mut o = serde_saphyr::Options::default();
    o.budget = Some(budget);
    o
}

/// Whether the document's first token opens a sequence (`- ` or `[`): the file's shape is
/// decided by what it starts with, so that the error reported is the one of the form the
/// file is written in (two attempts reported the second's, "expected mapping start", for
/// a list that broke a parser limit).
fn starts_with_sequence(text: &str) -> bool {
    first_content(text).is_some_and(|(_, t)| t.starts_with('[') || t == "-" || t.starts_with("- "))
}

/// The document's first token's line (1-based) and its text, past comments, directives
/// and `---`.
fn first_content(text: &str) -> Option<(usize, &str)> {
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start_matches('\u{feff}').trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with('%') {
            continue;
        }
        let t = t.strip_prefix("---").map_or(t, str::trim_start);
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        return Some((n + 1, t));
    }
    None
}

fn specs(v: Vec<FileRange>) -> Vec<RangeSpec> {
    v.into_iter()
        .map(|r| RangeSpec {
            start: r.start,
            end: r.end,
        })
        .collect()
}

pub fn parse_ranges_yaml(text: &str) -> Result<RangesFile, String> {
    parse_limited(text, MAX_NODES)
}

fn parse_limited(text: &str, max_nodes: usize) -> Result<RangesFile, String> {
    if starts_with_sequence(text) {
        let list =
            serde_saphyr::from_str_with_options::<Vec<FileRange>>(text, yaml_options(max_nodes))
                .map_err(|e| format!("expected a list of {{start, end}}: {e}"))?;
        return Ok(RangesFile {
            ranges: specs(list),
            transient_ranges: Vec::new(),
        });
    }
    let Some((n, first)) = first_content(text) else {
        return Err(
            "the file holds no document: expected a list of {start, end} or a mapping with ranges (and transientRanges); write `ranges: []` for none"
                .into(),
        );
    };
    // Neither a list entry nor `key:` (nor a flow mapping): a key without its ':' or
    // misspelt beyond recognition. Said with the line, rather than the parser's "expected
    // mapping start" at 1:1.
    if !first.starts_with('{') && !first.contains(':') {
        return Err(format!(
            "line {n}: {first:?} is neither a list entry (`- {{start: …, end: …}}`) nor a key of a mapping (`ranges:`, `transientRanges:`): a key is followed by ':'"
        ));
    }
    let m = serde_saphyr::from_str_with_options::<FileMapping>(text, yaml_options(max_nodes))
        .map_err(|e| {
            format!(
                "expected a list of {{start, end}} or a mapping with ranges (required) and transientRanges: {e}"
            )
        })?;
    Ok(RangesFile {
        ranges: specs(m.ranges),
        transient_ranges: specs(m.transient_ranges),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_parse() {
        let list = "# owned\n---\n- {start: \"1\", end: \"2\"}\n";
        assert_eq!(parse_ranges_yaml(list).unwrap().ranges.len(), 1);
        let flow = "[{start: \"1\", end: \"2\"}, {start: \"3\", end: \"4\"}]";
        assert_eq!(parse_ranges_yaml(flow).unwrap().ranges.len(), 2);
        let map = "ranges:\n  - {start: \"1\", end: \"2\"}\ntransientRanges:\n  - {start: \"2\", end: \"3\"}\n";
        let f = parse_ranges_yaml(map).unwrap();
        assert_eq!((f.ranges.len(), f.transient_ranges.len()), (1, 1));
        assert_eq!(
            parse_ranges_yaml("ranges: []\n").unwrap(),
            RangesFile::default()
        );
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        for (text, key) in [
            (
                "ranges: []\ntransient_ranges:\n  - {start: \"1\", end: \"2\"}\n",
                "transient_ranges",
            ),
            ("range:\n  - {start: \"1\", end: \"2\"}\n", "range"),
            (
                "- {start: \"1\", end: \"2\", transient: true}\n",
                "transient",
            ),
            (
                "ranges:\n  - {start: \"1\", end: \"2\", strat: \"3\"}\n",
                "strat",
            ),
        ] {
            let e = parse_ranges_yaml(text).unwrap_err();
            assert!(e.contains(&format!("`{key}`")), "{text}: {e}");
        }
    }

    /// A mapping needs `ranges` (before: a mapping of `transientRanges` alone, or an empty
    /// file, was read as no full range), and a first line that is neither a list entry nor
    /// a key is named (before: "expected mapping start" at 1:1).
    #[test]
    fn a_mapping_needs_ranges_and_a_bad_first_line_is_named() {
        let e =
            parse_ranges_yaml("transientRanges:\n  - {start: \"1\", end: \"2\"}\n").unwrap_err();
        assert!(e.contains("`ranges`"), "{e}");
        for empty in ["", "# nothing\n", "---\n"] {
            let e = parse_ranges_yaml(empty).unwrap_err();
            assert!(e.contains("no document"), "{empty:?}: {e}");
        }
        let e = parse_ranges_yaml("ranges\n  - {start: \"1\", end: \"2\"}\n").unwrap_err();
        assert!(
            e.contains("line 1: \"ranges\"") && !e.contains("mapping start"),
            "{e}"
        );
    }

    /// A list over the parser's node limit says so, not "expected mapping start" (what
    /// the second, mapping, attempt said of 60,000 ranges).
    #[test]
    fn a_list_over_the_limit_names_the_limit() {
        let text: String = (0..300)
            .map(|i| format!("- {{start: \"{i}\", end: \"{}\"}}\n", i + 1))
            .collect();
        assert_eq!(parse_limited(&text, 2_000).unwrap().ranges.len(), 300);
        let e = parse_limited(&text, 1_000).unwrap_err();
        assert!(!e.contains("mapping"), "{e}");
        assert!(e.to_lowercase().contains("node"), "{e}");
    }
}
