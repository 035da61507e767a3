//! What a zero-copy child holds before its first partition, and the pure decision of it.
//!
//! Copying whole chunks leaves a *dead prefix*: the child's position 0 is the start of the
//! parent chunk (or 64 KiB CRC block) that holds its first partition, plus a lead chunk
//! when the `aligned` layout needs one as its knob. Index-driven readers never look there,
//! but Cassandra 5.0.5+ compaction scans Data.db from position 0
//! (`sstable::cassandra::TargetCassandra::scans_data_from_zero`). For such a target the
//! dead prefix is filled with empty live partitions (`sstable::filler`), listed in the
//! child's index like any partition, so its first partition is at position 0 and its
//! other chunks stay shared; where no filler fits, the child is `regrid` (re-encoded from
//! position 0), with the reason in its report. For older targets the prefix stays zeros.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use super::fallback::Fallback;
use super::plan::{ChildPlan, Layout, Prediction};
use super::spec::Cut;
use crate::sstable::cassandra::TargetCassandra;
use crate::sstable::filler::{self, Filler, KeyShape, Refusal, RowShape, Window};
use crate::sstable::lz4::Piece;
use crate::sstable::{Partitioner, Token, Version};

/// The bytes before a child's first partition: `Zeros` (a dead prefix, for targets that
/// never read it) or `Filler` partitions that occupy them exactly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Head {
    #[default]
    Zeros,
    Filler(Arc<Vec<Filler>>),
}

/// In a dry run's JSON: `"zeros"`, or the fillers' count and bytes.
impl serde::Serialize for Head {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        match self {
            Head::Zeros => s.serialize_str("zeros"),
            Head::Filler(f) => {
                let mut st = s.serialize_struct("Filler", 2)?;
                st.serialize_field("filler_partitions", &f.len())?;
                st.serialize_field("bytes", &f.iter().map(|f| f.bytes.len()).sum::<usize>())?;
                st.end()
            }
        }
    }
}

impl Head {
    pub fn fillers(&self) -> &[Filler] {
        match self {
            Head::Zeros => &[],
            Head::Filler(f) => f,
        }
    }

    /// The head's bytes `range` (child positions) as the tunable LZ4 encoder sees them.
    pub fn pieces(&self, range: Range<usize>) -> Vec<Piece<'_>> {
        match self {
            Head::Zeros => vec![Piece::Run(0, range.len())],
            Head::Filler(fs) => {
                let mut out = Vec::new();
                let mut at = 0usize;
                for f in fs.iter() {
                    // Literals between the pad runs, each run a `Run`.
                    let mut parts = Vec::with_capacity(2 * f.pads.len() + 1);
                    let mut lit = 0;
                    for p in &f.pads {
                        parts.push((lit..p.start, false));
                        parts.push((p.clone(), true));
                        lit = p.end;
                    }
                    parts.push((lit..f.bytes.len(), false));
                    for (r, run) in parts {
                        let (s, e) = (at + r.start, at + r.end);
                        let (s2, e2) = (s.max(range.start), e.min(range.end));
                        if s2 < e2 {
                            let local = (s2 - at)..(e2 - at);
                            out.push(if run {
                                Piece::Run(f.pad_byte, local.len())
                            } else {
                                Piece::Lit(&f.bytes[local])
                            });
                        }
                    }
                    at += f.bytes.len();
                }
                out
            }
        }
    }

    /// The head's bytes `range`, materialised.
    pub fn bytes(&self, range: Range<usize>) -> Vec<u8> {
        match self {
            Head::Zeros => vec![0; range.len()],
            Head::Filler(fs) => {
                let all: Vec<u8> = fs.iter().flat_map(|f| f.bytes.iter().copied()).collect();
                all.get(range).map(<[u8]>::to_vec).unwrap_or_default()
            }
        }
    }
}

/// The parent's facts the filler decision needs.
pub struct Facts<'a> {
    pub target: TargetCassandra,
    pub partitioner: Partitioner,
    pub version: Version,
    /// The partition key type (SerializationHeader), `None` without a header.
    pub key_type: Option<&'a str>,
    pub has_static_columns: bool,
    /// Column counts of the SerializationHeader (row fillers), `None` without a header.
    pub row_shape: Option<RowShape>,
    /// Chunk length, or the CRC block of an uncompressed parent.
    pub unit: u64,
    /// Compressed parent: a chunk of filler may go in front of a short dead prefix.
    pub compressed: bool,
}

/// For a target that scans Data.db from position 0, gives every zero-copy child with a
/// dead prefix its filler, or makes it `regrid` with `Fallback::DeadPrefix`. Pure.
pub fn fill(children: &mut [ChildPlan], cut: &Cut, facts: &Facts<'_>) {
    if !facts.target.scans_data_from_zero() {
        return;
    }
    // The last key of every run, by its last ordinal: the partition before a child.
    let mut last_keys: BTreeMap<u64, &[u8]> = BTreeMap::new();
    for c in children.iter() {
        for r in &c.child.runs {
            last_keys.insert(r.last_ordinal, &r.last_key);
        }
    }
    let floors: Vec<Option<Token>> = children
        .iter()
        .map(|c| {
            let r = c.child.runs.first()?;
            let first = facts.partitioner.token(&r.first_key);
            let prev = r
                .first_ordinal
                .checked_sub(1)
                .and_then(|o| last_keys.get(&o))
                .map(|k| facts.partitioner.token(k));
            let cut_below = cut_below(cut, &first);
            // A child that starts with the parent's first partition has a dead prefix
            // only if the parent has one (an earlier child): nothing then tells where
            // its neighbours end, and the child is regrid (`Refusal::NoFloor`).
            match (prev, cut_below) {
                (Some(p), Some(c)) => Some(p.max(c)),
                (p, c) => p.or(c),
            }
        })
        .collect();
    let shape = facts.key_type.map(filler::key_shape);
    for (c, floor) in children.iter_mut().zip(floors) {
        let Some(g) = c.geometry.as_mut() else {
            continue;
        };
        if c.layout == Layout::Regrid || g.dead_prefix + g.lead == 0 {
            continue;
        }
        match fillers_for(
            c.child.runs[0].first_key.clone(),
            floor,
            shape.as_ref(),
            facts,
            g,
        ) {
            Ok(f) => c.head = Head::Filler(Arc::new(f)),
            Err(refusal) => {
                c.layout = Layout::Regrid;
                c.geometry = None;
                c.predicted = Prediction {
                    bytes_reencoded: c.child.bytes(),
                    ..Default::default()
                };
                c.fallback = Some(Fallback::DeadPrefix {
                    target: facts.target,
                    refusal,
                });
            }
        }
    }
}

/// The fillers of one child; grows its lead by one unit when the dead prefix is shorter
/// than the smallest filler.
fn fillers_for(
    first_key: Vec<u8>,
    floor: Option<Token>,
    shape: Option<&KeyShape>,
    facts: &Facts<'_>,
    g: &mut super::plan::Geometry,
) -> Result<Vec<Filler>, Refusal> {
    let shape = shape.ok_or(Refusal::NoHeader)?;
    if let KeyShape::Unsupported(t) = shape {
        return Err(Refusal::KeyType(t.clone()));
    }
    if facts.has_static_columns || matches!(shape, KeyShape::Fixed(_)) {
        return row_filler_for(first_key, floor, facts, g);
    }
    let floor = floor.ok_or(Refusal::NoFloor)?;
    let total = (g.lead + g.dead_prefix) as usize;
    let sizes = match filler::sizes(shape, facts.version, total) {
        Some(s) => s,
        None if g.lead == 0 && !facts.compressed => {
            return Err(Refusal::ShortDeadPrefix {
                bytes: g.dead_prefix,
            })
        }
        None if g.lead == 0 => {
            // Too short for a partition: one unit of filler more in front.
            let s = filler::sizes(shape, facts.version, total + facts.unit as usize)
                .ok_or_else(|| Refusal::KeyType(format!("{shape:?}")))?;
            g.lead = facts.unit;
            g.data_length += facts.unit;
            g.extra_chunk = g.data_length.is_multiple_of(facts.unit);
            s
        }
        None => return Err(Refusal::KeyType(format!("{shape:?}"))),
    };
    let window = Window { floor, first_key };
    filler::find(
        facts.partitioner,
        facts.version,
        shape,
        &sizes,
        &window,
        filler::SEARCH_BUDGET,
    )
}

/// The row filler of one child (a fixed-width key or static columns: `filler::row_filler`);
/// grows its lead by one unit when the dead prefix is shorter than the smallest one.
fn row_filler_for(
    first_key: Vec<u8>,
    floor: Option<Token>,
    facts: &Facts<'_>,
    g: &mut super::plan::Geometry,
) -> Result<Vec<Filler>, Refusal> {
    let rows = facts.row_shape.as_ref().ok_or(Refusal::NoHeader)?;
    if rows.statics > filler::MAX_FILLER_COLUMNS || rows.regular > filler::MAX_FILLER_COLUMNS {
        return Err(Refusal::ManyColumns(rows.statics.max(rows.regular)));
    }
    let keys = filler::key_gen(facts.key_type.ok_or(Refusal::NoHeader)?)?;
    let floor = floor.ok_or(Refusal::NoFloor)?;
    let mut total = (g.lead + g.dead_prefix) as usize;
    if !filler::row_filler_fits(facts.version, rows, keys.len(), total) {
        if g.lead != 0 || !facts.compressed {
            return Err(Refusal::ShortDeadPrefix {
                bytes: g.dead_prefix,
            });
        }
        // Too short for the smallest row filler: one unit of filler more in front.
        total += facts.unit as usize;
        if !filler::row_filler_fits(facts.version, rows, keys.len(), total) {
            return Err(Refusal::ShortDeadPrefix {
                bytes: g.dead_prefix,
            });
        }
        g.lead = facts.unit;
        g.data_length += facts.unit;
        g.extra_chunk = g.data_length.is_multiple_of(facts.unit);
    }
    let window = Window { floor, first_key };
    filler::find_row_filler(
        facts.partitioner,
        facts.version,
        rows,
        keys,
        total,
        &window,
        filler::SEARCH_BUDGET,
    )
    .map(|f| vec![f])
}

/// The largest cut token strictly below `first`: a `--tokens` boundary or a range bound.
/// The partition before a child of such a cut is at or below it (children change where a
/// boundary or a range bound lies between two partitions).
fn cut_below(cut: &Cut, first: &Token) -> Option<Token> {
    let below = |t: &&Token| *t < first;
    match cut {
        Cut::Tokens(b) => b.iter().filter(below).max().cloned(),
        Cut::Ranges(r) => r
            .full
            .iter()
            .chain(r.transient.iter())
            .flat_map(|x| [&x.left, &x.right])
            .filter(below)
            .max()
            .cloned(),
        Cut::Owned(o) => o.bounds().into_iter().filter(|t| t < first).max(),
        Cut::Parts(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cut_the_fillers_bytes() {
        let v = Version::parse("nb").expect("nb");
        let p = Partitioner::Murmur3;
        let first = b"first".to_vec();
        let w = Window {
            floor: Token::Murmur3(i64::MIN),
            first_key: first,
        };
        let sizes = filler::sizes(&KeyShape::Free, v, 5000).expect("sizes");
        let f = filler::find(p, v, &KeyShape::Free, &sizes, &w, 1 << 20).expect("found");
        let h = Head::Filler(Arc::new(f));
        let all = h.bytes(0..5000);
        assert_eq!(all.len(), 5000);
        for r in [0..5000, 0..10, 100..4999, 4990..5000, 2..3] {
            let mat: Vec<u8> = h
                .pieces(r.clone())
                .iter()
                .flat_map(|p| match *p {
                    Piece::Lit(l) => l.to_vec(),
                    Piece::Run(b, n) => vec![b; n],
                })
                .collect();
            assert_eq!(mat, all[r.clone()], "{r:?}");
        }
        assert_eq!(Head::Zeros.bytes(0..3), vec![0, 0, 0]);
    }
}
