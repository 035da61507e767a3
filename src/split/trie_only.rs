//! Splitting a BTI sstable from its Partitions.db and Rows.db alone (`PlanSource::PartitionsTrie`).
//!
//! A BTI partition's key lives in Data.db (or in Rows.db when it has a row index):
//! Partitions.db keeps only the shortest prefix of its byte-comparable form that tells it
//! from its neighbours, and a hash byte (`PartitionIndexBuilder`). Reading every key means
//! decoding every chunk of Data.db, which is what the zero-copy split exists to avoid. So,
//! for Murmur3, a split reads the trie and nothing of Data.db but:
//! - the key of a partition whose prefix cannot place it against a token the cut compares
//!   with (at most one a token: the trie is prefix-free; `bti::scan::KeyMode::AtBounds`);
//! - the first and last key of every run (reports, fillers, the child's footer and
//!   Statistics.db first/last key): `fill_run_keys`, two keys a run, at the positions the
//!   plan kept (`Run::first_position`, `Run::last_position`).
//!
//! What that changes, and why it is safe:
//! - **A child's Partitions.db** is built from the parent's prefixes. Cassandra's builder
//!   keeps `cut(key, max(diff with previous, diff with next))`; two neighbours' stored
//!   prefixes both reach past their first differing byte, so the diff points of the
//!   prefixes are the keys', and the child's trie is byte for byte the one Cassandra would
//!   write from the full keys (`split_trie_only_children_equal_the_key_reading_ones`).
//! - **A child's Filter.db is the parent's**: without the keys there is nothing to hash.
//!   The parent's filter holds every key of the child, so a read never misses
//!   (`BloomFilter.isPresent` may only say "maybe" more often: a partition-index lookup
//!   that finds nothing). The cost is memory: each child loads the parent's filter until
//!   compaction rewrites it (N children of one parent: N times its off-heap filter memory).
//!   `--bti-keys data` reads every key and builds each child's own filter instead.
//! - **The fingerprint** the children must add up to is over (parent Data.db position,
//!   hash byte) of each partition instead of its key: the check maps every child entry's
//!   position back into the parent (`ParentMap`) and the boundary check reads the
//!   child's first and last key where its footer says they are.

use super::plan::{Layout, PlannedChild};
use super::spec::Cut;
use crate::sstable::bti::keys;
use crate::sstable::bti::scan::{key_at, KeyMode};
use crate::sstable::bti::PartitionIndex;
use crate::sstable::index::IndexEntryRef;
use crate::sstable::scan::PartitionSource;
use crate::sstable::table::CheckReport;
use crate::sstable::token::{Partitioner, Token};
use crate::sstable::{FormatError, Result, SSTable};

/// The bounds a trie-only scan must place every partition against: each token the cut
/// compares a partition's token with (`Cut::Parts` compares none).
pub fn key_mode(cut: &Cut) -> KeyMode {
    let mut tokens: Vec<&Token> = match cut {
        Cut::Tokens(b) => b.iter().collect(),
        Cut::Parts(_) => Vec::new(),
        Cut::Ranges(r) => r
            .full
            .iter()
            .chain(&r.transient)
            .flat_map(|r| [&r.left, &r.right])
            .collect(),
        Cut::Owned(o) => o.ranges.iter().flat_map(|r| [&r.left, &r.right]).collect(),
    };
    tokens.sort();
    tokens.dedup();
    KeyMode::AtBounds(
        tokens
            .into_iter()
            .filter_map(|t| match t {
                Token::Murmur3(v) => Some(keys::murmur3_token_bound(*v).to_vec()),
                _ => None,
            })
            .collect(),
    )
}

/// The partition's token, or, when a trie-only scan did not read its key, the lowest
/// Murmur3 token its prefix allows: the scan read every key its prefix could not place
/// against the cut's tokens (`key_mode`), so this one orders like the real token against
/// each of them, and every cut decision comes out the same.
pub fn token(e: &IndexEntryRef<'_>, p: Partitioner, file: &std::path::Path) -> Result<Token> {
    match e.prefix {
        Some(pr) if e.key.is_empty() => {
            let c = pr.comparable;
            if c.first() != Some(&0x40) || p != Partitioner::Murmur3 {
                return Err(FormatError::corrupt(
                    file,
                    None,
                    format!(
                        "partition at Data.db position {} has trie prefix {c:02x?}: a Murmur3 key's starts with 40",
                        e.position
                    ),
                ));
            }
            let mut b = [0u8; 8];
            let n = (c.len() - 1).min(8);
            b[..n].copy_from_slice(&c[1..1 + n]);
            Ok(Token::Murmur3(
                (u64::from_be_bytes(b) ^ 0x8000_0000_0000_0000) as i64,
            ))
        }
        _ => Ok(p.token(e.key)),
    }
}

/// What a trie-only split counts a partition by in its fingerprints: where it starts in
/// the parent's Data.db and its hash byte.
pub fn identity(parent_position: u64, hash: u8) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[..8].copy_from_slice(&parent_position.to_be_bytes());
    out[8] = hash;
    out
}

/// Sets each run's first and last key and token from the keys at their Data.db positions
/// (a trie-only plan grouped partitions without them): two keys read a run.
pub fn fill_run_keys(t: &SSTable, children: &mut [PlannedChild]) -> Result<()> {
    let mut data = t.data_reader()?;
    for c in children.iter_mut() {
        for run in c.runs.iter_mut() {
            run.first_key = key_at(&mut data, run.first_position)?;
            run.first_token = t.partitioner.token(&run.first_key).to_string();
            run.last_key = key_at(&mut data, run.last_position)?;
            run.last_token = t.partitioner.token(&run.last_key).to_string();
        }
    }
    Ok(())
}

/// Where a child's bytes come from in the parent: a zero-copy child is the parent's bytes
/// from `base` moved to `lead`; a `regrid` child lays its runs back to back from 0.
struct ParentMap {
    /// Regrid: (child offset, parent position, bytes) of each run, in child order.
    runs: Option<Vec<(u64, u64, u64)>>,
    base: u64,
    lead: u64,
    /// Parent positions of the runs' first partitions, sorted.
    run_starts: Vec<u64>,
}

impl ParentMap {
    fn of(c: &super::plan::ChildPlan) -> ParentMap {
        let mut run_starts: Vec<u64> = c.child.runs.iter().map(|r| r.first_position).collect();
        run_starts.sort_unstable();
        match (c.layout, c.geometry) {
            (Layout::Regrid, _) | (_, None) => {
                let mut at = 0u64;
                let runs = c
                    .child
                    .runs
                    .iter()
                    .map(|r| {
                        let run = (at, r.first_position, r.bytes());
                        at += r.bytes();
                        run
                    })
                    .collect();
                ParentMap {
                    runs: Some(runs),
                    base: 0,
                    lead: 0,
                    run_starts,
                }
            }
            (_, Some(g)) => ParentMap {
                runs: None,
                base: g.base,
                lead: g.lead,
                run_starts,
            },
        }
    }

    /// The parent Data.db position of the child's partition at `child_position`.
    fn parent_position(&self, child_position: u64) -> Option<u64> {
        match &self.runs {
            Some(runs) => {
                let i = runs
                    .partition_point(|r| r.0 <= child_position)
                    .checked_sub(1)?;
                let (at, parent, bytes) = runs[i];
                (child_position - at < bytes).then(|| parent + child_position - at)
            }
            None => (child_position + self.base).checked_sub(self.lead),
        }
    }

    fn starts_run(&self, parent_position: u64) -> bool {
        self.run_starts.binary_search(&parent_position).is_ok()
    }
}

/// The check of a trie-only child, reading no key but the two its footer names (the
/// caller's boundary check reads them at their positions in the child's Data.db): the trie
/// walks whole (node encodings, increasing positions inside Data.db, the footer's key
/// count, each Rows.db entry), the head's fillers lead it, and every other entry, mapped
/// back into the parent, is counted by `identity` — what the plan counted the parent's
/// partitions by.
pub fn check_child(child: &SSTable, c: &super::plan::ChildPlan) -> Result<CheckReport> {
    let index_path = child.path(&child.partition_index());
    let src = PartitionSource::with_keys(child, KeyMode::AtBounds(Vec::new()))?;
    let footer = match &src {
        PartitionSource::Bti(files, _) => {
            PartitionIndex::parse(&files.partitions_path, &files.partitions)?
                .footer()
                .clone()
        }
        PartitionSource::Big(_) => {
            return Err(FormatError::unsupported(
                &index_path,
                None,
                "a trie-only check reads a BTI child",
            ))
        }
    };
    let fillers = c.head.fillers().len() as u64;
    let mut rep = CheckReport::default();
    let mut r = src.reader(child)?;
    let mut data = child.data_reader()?;
    let mut ordinal = 0u64;
    let map = ParentMap::of(c);
    // The last entry, whose key is checked after the walk (one buffer, no allocation a
    // partition).
    let mut last: Option<(u64, u8)> = None;
    let mut last_prefix: Vec<u8> = Vec::new();
    while let Some(e) = r.next_entry()? {
        if ordinal == 0 {
            rep.first_position = Some(e.position);
        }
        rep.last_position = Some(e.position);
        let at = map.parent_position(e.position);
        // Keys read where a mistake would hide from the fingerprint's arithmetic: the
        // fillers and the first partition (they went in by their full keys), each run's
        // first partition (where a regrid child's runs join) and the last; one chunk each.
        if let Some(p) = e.prefix {
            if ordinal <= fillers || at.is_some_and(|a| map.starts_run(a)) {
                let key = key_at(&mut data, e.position)?;
                super::child::trie_key_matches(&index_path, &key, p, e.position)?;
            }
            last = Some((e.position, p.hash));
            last_prefix.clear();
            last_prefix.extend_from_slice(p.comparable);
        }
        if ordinal < fillers {
            rep.empty_partitions += 1;
        } else {
            let (Some(p), Some(at)) = (e.prefix, at) else {
                return Err(FormatError::corrupt(
                    &index_path,
                    None,
                    format!(
                        "partition {ordinal} at Data.db position {} has no trie hash byte or lies outside the parent runs it was cut from",
                        e.position
                    ),
                ));
            };
            rep.fingerprint.add(&identity(at, p.hash));
            rep.partitions += 1;
        }
        ordinal += 1;
    }
    if let Some((position, hash)) = last {
        let key = key_at(&mut data, position)?;
        let p = crate::sstable::index::TriePrefix {
            comparable: &last_prefix,
            hash,
        };
        super::child::trie_key_matches(&index_path, &key, p, position)?;
    }
    rep.first_key = footer.first_key;
    rep.last_key = footer.last_key;
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sstable::bti::keys::murmur3_token_bound;
    use crate::sstable::index::TriePrefix;

    fn entry(prefix: &[u8]) -> IndexEntryRef<'_> {
        IndexEntryRef {
            key: &[],
            position: 7,
            promoted_index: &[],
            index_offset: 7,
            row_index: None,
            prefix: Some(TriePrefix {
                comparable: prefix,
                hash: 0,
            }),
        }
    }

    #[test]
    fn trie_only_a_short_prefix_orders_like_its_keys_against_every_bound() {
        let f = std::path::Path::new("p");
        let m = Partitioner::Murmur3;
        // 40 80 = tokens 0 ..= 2^56 - 1: the lowest stands for all of them.
        assert_eq!(
            token(&entry(&[0x40, 0x80]), m, f).unwrap(),
            Token::Murmur3(0)
        );
        let full = murmur3_token_bound(-5);
        assert_eq!(token(&entry(&full), m, f).unwrap(), Token::Murmur3(-5));
        // A prefix with no token byte is refused, not read as token MIN.
        assert!(token(&entry(&[]), m, f).is_err());
        // A bound the prefix cannot place makes the scan read the key; the others do not.
        let mode = key_mode(&Cut::Tokens(vec![Token::Murmur3(5)]));
        let KeyMode::AtBounds(b) = &mode else {
            panic!("{mode:?}")
        };
        assert_eq!(b, &vec![murmur3_token_bound(5).to_vec()]);
    }

    #[test]
    fn trie_only_identity_is_position_and_hash() {
        assert_eq!(identity(0x0102, 0xAB), [0, 0, 0, 0, 0, 0, 1, 2, 0xAB]);
        assert_ne!(identity(1, 2), identity(1, 3));
    }
}
