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
//!   position back into the parent (`parent_position`) and the boundary check reads the
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

/// The parent Data.db position of a child's partition at `child_position`: a zero-copy
/// child is the parent's bytes from `base` moved to `lead`; a `regrid` child lays its runs
/// back to back from 0.
pub fn parent_position(c: &super::plan::ChildPlan, child_position: u64) -> Option<u64> {
    match (c.layout, c.geometry) {
        (Layout::Regrid, _) | (_, None) => {
            let mut at = 0u64;
            for r in &c.child.runs {
                if child_position < at + r.bytes() {
                    return (child_position >= at).then(|| r.first_position + child_position - at);
                }
                at += r.bytes();
            }
            None
        }
        (_, Some(g)) => (child_position + g.base).checked_sub(g.lead),
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
    while let Some(e) = r.next_entry()? {
        if ordinal == 0 {
            rep.first_position = Some(e.position);
        }
        rep.last_position = Some(e.position);
        // The fillers and the first partition went in by their full keys (no parent
        // prefix stands for a filler): their trie entries are checked against those keys,
        // read from the child's first chunk or two.
        if ordinal <= fillers {
            if let Some(p) = e.prefix {
                let key = key_at(&mut data, e.position)?;
                let comparable = keys::decorated_key(child.partitioner, &key);
                if !comparable.is_some_and(|k| k.starts_with(p.comparable))
                    || keys::hash_byte(&key) != p.hash
                {
                    return Err(FormatError::corrupt(
                        &index_path,
                        None,
                        format!(
                            "partition {ordinal} (trie prefix {:02x?}, hash byte {:02x}) points at Data.db position {}, whose key {key:02x?} does not match",
                            p.comparable, p.hash, e.position
                        ),
                    ));
                }
            }
        }
        if ordinal < fillers {
            rep.empty_partitions += 1;
        } else {
            let (Some(p), Some(at)) = (e.prefix, parent_position(c, e.position)) else {
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
    rep.first_key = footer.first_key;
    rep.last_key = footer.last_key;
    Ok(rep)
}
