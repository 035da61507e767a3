//! The dead-prefix filler: empty, live partitions that occupy the bytes a zero-copy child
//! carries before its first real partition, so that its Data.db starts with a partition at
//! uncompressed position 0 — what Cassandra 5.0.5+'s linear compaction scanner
//! (`SSTableSimpleScanner`, CASSANDRA-20092) and every `Scrubber`/`SortedTableVerifier`
//! expect — while the rest of its chunks stay the parent's.
//!
//! A filler partition is the BIG partition framing with nothing inside
//! (`SortedTableWriter`/`ColumnIndex.writePartitionHeader` then `UnfilteredSerializer
//! .writeEndOfPartition`):
//!
//! ```text
//! u16 key length | key | partition DeletionTime LIVE | 0x01 (END_OF_PARTITION)
//! ```
//!
//! with DeletionTime LIVE = `int localDeletionTime = Integer.MAX_VALUE, long
//! markedForDeleteAt = Long.MIN_VALUE` (`7f ff ff ff 80 00 00 00 00 00 00 00`) before
//! `oa`, and the single byte `0x80` (`IS_LIVE_DELETION`) from `oa` on (5.0's
//! `DeletionTime.Serializer`). Cassandra never writes such a partition (a writer's
//! `append` of an empty partition writes nothing), readers return nothing for it, and the
//! next compaction drops it; `../shared/tools/sstcheck.py` counts it apart
//! (`empty_partitions`) and leaves it out of the key fingerprint, as cleave's check does.
//!
//! The filler's key must be a valid value of the partition key type (Statistics.db's
//! SerializationHeader) and its token must lie strictly between the cut below the child
//! (or the previous partition) and the child's first partition, so children never
//! overlap (LCS levels) and the filler stays inside the child's range. Its length is free
//! only for variable-length types, so the filler's size — exactly the dead prefix — can be
//! met only for those (`KeyShape`). A key is `'0'` padding then 16 hex digits of a counter
//! (valid bytes of `blob`, `text`, `ascii`); the search hashes only the counter's blocks
//! (`murmur::Hash3State`), so a try costs the same whatever the key length.

use std::ops::Range;

use md5::{Digest, Md5};

use super::murmur::Hash3State;
use super::token::{Partitioner, RandomToken, Token};
use super::Version;

/// The byte that pads a filler key: valid in every variable-length type the filler
/// supports, and one LZ4 run for the first chunk's tunable encoding (`sstable::lz4`).
pub const PAD: u8 = b'0';
/// Hex digits of the search counter at the end of the free part of the key.
pub const COUNTER_LEN: usize = 16;
/// The longest filler key. Cassandra takes keys up to 65,535 bytes
/// (`FBUtilities.MAX_UNSIGNED_SHORT`), but a dead prefix filled with a few long keys would
/// put a key of up to a chunk's length into Index.db, Summary.db (its first key) and the
/// key cache, and third-party readers misread keys of 256 bytes or more (cqlite 0.17
/// takes the u16 length's high byte for a flags byte). So fillers are many short
/// partitions: up to 61 for a 16 KiB chunk, 243 for 64 KiB.
pub const MAX_KEY_LEN: usize = 255;
/// END_OF_PARTITION (`UnfilteredSerializer`).
const END_OF_PARTITION: u8 = 0x01;
const LIVE_BEFORE_OA: [u8; 12] = [0x7f, 0xff, 0xff, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0];
const LIVE_OA: [u8; 1] = [0x80];

/// What a partition key type leaves free for a filler key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyShape {
    /// Any byte string of any length made of ASCII digits is a value: `UTF8Type`,
    /// `AsciiType`.
    Free,
    /// `BytesType`: any bytes at all, so a key with an exact Murmur3 token is built
    /// directly (`murmur::Hash3State` inverted over one free block) instead of searched.
    Blob,
    /// `CompositeType(...)`: each component `u16 length | value | end-of-component 0x00`
    /// (`CompositeType.build`); at least one component is free.
    Composite(Vec<Part>),
    /// A fixed-width type (`Int32Type`, `LongType`, `UUIDType`, ... or a composite of
    /// them): one key length only, so the filler's size cannot follow the dead prefix.
    Fixed(String),
    /// A type the filler does not build values of.
    Unsupported(String),
}

/// One component of a composite partition key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Free,
    /// A valid value of the component's fixed-width type.
    Fixed(Vec<u8>),
}

/// Why a child cannot have its dead prefix filled. `label()` is stable (metrics, JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    FixedWidthKey(String),
    KeyType(String),
    /// The table has static columns: every partition then carries a static row.
    StaticColumns,
    /// More static or regular columns than a row filler's subset bitmap encodes.
    ManyColumns(usize),
    /// ByteOrderedPartitioner: the token is the key itself.
    Partitioner(Partitioner),
    /// The token window below the child's first partition is so narrow that finding a key
    /// in it would take about `expected_tries` hashes.
    NarrowWindow {
        expected_tries: u128,
    },
    /// The search found no key in `tries` (`budget`).
    NotFound {
        tries: u64,
    },
    /// The table has no SerializationHeader (the key type is unknown).
    NoHeader,
    /// Nothing bounds the child's first token from below (no cut, no known partition
    /// before it), so a filler could overlap another child.
    NoFloor,
    /// An uncompressed parent's dead prefix shorter than the smallest filler (compressed
    /// children then get a chunk of filler in front; CRC.db's grid does not allow one).
    ShortDeadPrefix {
        bytes: u64,
    },
}

impl Refusal {
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::FixedWidthKey(_) => "fixed_width_key",
            Refusal::KeyType(_) => "key_type",
            Refusal::StaticColumns => "static_columns",
            Refusal::ManyColumns(_) => "many_columns",
            Refusal::Partitioner(_) => "partitioner",
            Refusal::NarrowWindow { .. } | Refusal::NotFound { .. } => "token_window",
            Refusal::NoHeader => "no_header",
            Refusal::NoFloor => "no_floor",
            Refusal::ShortDeadPrefix { .. } => "short_dead_prefix",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::FixedWidthKey(t) => write!(
                f,
                "the partition key type {t} has a fixed width, so no filler partition has the dead prefix's exact size"
            ),
            Refusal::KeyType(t) => write!(f, "cleave builds no filler key of type {t}"),
            Refusal::StaticColumns => f.write_str("the table has static columns"),
            Refusal::ManyColumns(n) => write!(
                f,
                "{n} columns: a row filler's empty rows encode at most {MAX_FILLER_COLUMNS}"
            ),
            Refusal::Partitioner(p) => write!(
                f,
                "{p:?}: a filler key would have to sort between two real keys"
            ),
            Refusal::NarrowWindow { expected_tries } => write!(
                f,
                "the token window before the first partition needs about {expected_tries} tries to hit"
            ),
            Refusal::NotFound { tries } => {
                write!(f, "no filler key found in the token window after {tries} tries")
            }
            Refusal::NoHeader => f.write_str("Statistics.db has no serialization header"),
            Refusal::NoFloor => f.write_str("no cut or known partition bounds the child's first token from below"),
            Refusal::ShortDeadPrefix { bytes } => write!(f, "the dead prefix ({bytes} bytes) is shorter than the smallest filler partition"),
        }
    }
}

fn simple_name(t: &str) -> &str {
    t.rsplit('.').next().unwrap_or(t)
}

/// A valid value of a fixed-width type, or `None` for a variable-length or unknown one.
fn fixed_value(simple: &str) -> Option<Vec<u8>> {
    Some(match simple {
        "BooleanType" | "ByteType" => vec![0],
        "ShortType" => vec![0; 2],
        "Int32Type" | "FloatType" | "SimpleDateType" => vec![0; 4],
        "LongType" | "TimestampType" | "DateType" | "DoubleType" | "TimeType"
        | "CounterColumnType" => vec![0; 8],
        "UUIDType" | "LexicalUUIDType" => vec![0; 16],
        // Version 1, IETF variant: `TimeUUIDType.validate` checks the version nibble.
        "TimeUUIDType" => {
            let mut u = vec![0; 16];
            u[6] = 0x10;
            u[8] = 0x80;
            u
        }
        _ => return None,
    })
}

fn is_free(simple: &str) -> bool {
    matches!(simple, "BytesType" | "UTF8Type" | "AsciiType")
}

/// The key of a one-component partition key of this free type.
fn free_shape(simple: &str) -> KeyShape {
    if simple == "BytesType" {
        KeyShape::Blob
    } else {
        KeyShape::Free
    }
}

/// The shape of the partition key type named in the SerializationHeader.
pub fn key_shape(key_type: &str) -> KeyShape {
    let t = key_type.trim();
    if let Some(open) = t.find('(') {
        let outer = simple_name(&t[..open]);
        let inner = t[open + 1..].strip_suffix(')').unwrap_or("");
        if outer != "CompositeType" || inner.contains('(') {
            return KeyShape::Unsupported(t.to_string());
        }
        let mut parts = Vec::new();
        for c in inner.split(',') {
            let s = simple_name(c.trim());
            if is_free(s) {
                parts.push(Part::Free);
            } else if let Some(v) = fixed_value(s) {
                parts.push(Part::Fixed(v));
            } else {
                return KeyShape::Unsupported(t.to_string());
            }
        }
        if parts.contains(&Part::Free) {
            KeyShape::Composite(parts)
        } else {
            KeyShape::Fixed(t.to_string())
        }
    } else {
        let s = simple_name(t);
        if is_free(s) {
            free_shape(s)
        } else if fixed_value(s).is_some() {
            KeyShape::Fixed(t.to_string())
        } else {
            KeyShape::Unsupported(t.to_string())
        }
    }
}

/// The partition framing's bytes around the key: its length, LIVE, END_OF_PARTITION.
pub fn overhead(version: Version) -> usize {
    2 + live_deletion(version).len() + 1
}

fn live_deletion(version: Version) -> &'static [u8] {
    if version.has_uint_deletion_time() {
        &LIVE_OA
    } else {
        &LIVE_BEFORE_OA
    }
}

/// The serialized empty live partition of `key`.
pub fn empty_partition(version: Version, key: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(key.len() + overhead(version));
    b.extend_from_slice(&(key.len() as u16).to_be_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(live_deletion(version));
    b.push(END_OF_PARTITION);
    b
}

/// Whether `after_key` — a partition's bytes after its key — is LIVE then END_OF_PARTITION:
/// an empty partition (only fillers are; Cassandra writes none).
pub fn is_empty_after_key(version: Version, after_key: &[u8]) -> bool {
    let live = live_deletion(version);
    after_key.len() > live.len()
        && &after_key[..live.len()] == live
        && after_key[live.len()] == END_OF_PARTITION
}

/// A key of `len` bytes with the counter's place and the pad run marked.
struct Template {
    bytes: Vec<u8>,
    counter_at: usize,
    pad: Range<usize>,
}

/// The shortest key a filler of `shape` can have.
pub fn min_key_len(shape: &KeyShape) -> Option<usize> {
    match shape {
        KeyShape::Free | KeyShape::Blob => Some(COUNTER_LEN),
        KeyShape::Composite(parts) => {
            let mut n = 0;
            let mut free_seen = false;
            for p in parts {
                n += 3 + match p {
                    Part::Fixed(v) => v.len(),
                    // The first free component carries the counter; later ones one pad byte.
                    Part::Free if !free_seen => {
                        free_seen = true;
                        COUNTER_LEN
                    }
                    Part::Free => 1,
                };
            }
            Some(n)
        }
        KeyShape::Fixed(_) | KeyShape::Unsupported(_) => None,
    }
}

fn template(shape: &KeyShape, len: usize) -> Option<Template> {
    let min = min_key_len(shape)?;
    if len < min || len > MAX_KEY_LEN {
        return None;
    }
    let extra = len - min;
    match shape {
        KeyShape::Free | KeyShape::Blob => {
            let mut bytes = vec![PAD; len];
            let counter_at = len - COUNTER_LEN;
            bytes[counter_at..].fill(b'0');
            Some(Template {
                bytes,
                counter_at,
                pad: 0..counter_at,
            })
        }
        KeyShape::Composite(parts) => {
            let mut bytes = Vec::with_capacity(len);
            let mut counter_at = 0;
            let mut pad = 0..0;
            let mut free_seen = false;
            for p in parts {
                let value: Vec<u8> = match p {
                    Part::Fixed(v) => v.clone(),
                    Part::Free if !free_seen => {
                        free_seen = true;
                        vec![PAD; extra + COUNTER_LEN]
                    }
                    Part::Free => vec![PAD],
                };
                bytes.extend_from_slice(&(value.len() as u16).to_be_bytes());
                let at = bytes.len();
                if matches!(p, Part::Free) && pad.is_empty() && counter_at == 0 {
                    pad = at..at + extra;
                    counter_at = at + extra;
                }
                bytes.extend_from_slice(&value);
                bytes.push(0);
            }
            (bytes.len() == len).then_some(Template {
                bytes,
                counter_at,
                pad,
            })
        }
        KeyShape::Fixed(_) | KeyShape::Unsupported(_) => None,
    }
}

fn put_counter(b: &mut [u8], n: u64) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, slot) in b.iter_mut().enumerate().take(COUNTER_LEN) {
        *slot = HEX[((n >> (4 * (COUNTER_LEN - 1 - i))) & 0xf) as usize];
    }
}

/// One filler partition: its key and serialized bytes, and where its pad run lies in
/// those bytes (for the first chunk's tunable LZ4 encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filler {
    pub key: Vec<u8>,
    pub bytes: Vec<u8>,
    /// `bytes[r]` is all `pad_byte` for every `r` in `pads` (ascending, disjoint): runs the
    /// first chunk's tunable LZ4 encoding turns into matches of a length it chooses.
    pub pads: Vec<Range<usize>>,
    pub pad_byte: u8,
}

/// Sizes of the fillers that occupy exactly `total` bytes, each a valid filler size; `None`
/// when `total` is below the smallest filler (the caller adds a chunk of filler first).
pub fn sizes(shape: &KeyShape, version: Version, total: usize) -> Option<Vec<usize>> {
    let ovh = overhead(version);
    let min = min_key_len(shape)? + ovh;
    let max = MAX_KEY_LEN + ovh;
    if total < min {
        return None;
    }
    let n = total.div_ceil(max);
    if total < n * min {
        return None;
    }
    let base = total / n;
    let rem = total % n;
    Some((0..n).map(|i| base + usize::from(i < rem)).collect())
}

/// The token window a filler key must fall in: strictly above `floor` (the cut below the
/// child, or the partition before it), strictly below the child's first key's token.
#[derive(Debug, Clone)]
pub struct Window {
    pub floor: Token,
    pub first_key: Vec<u8>,
}

/// Hashes a search tries before giving up on a child (about 1 s of one core).
pub const SEARCH_BUDGET: u64 = 1 << 25;

/// Finds fillers of the given sizes in `window`, in Data.db order. Deterministic: the same
/// inputs give the same keys (a stream sender and `write` agree byte for byte).
pub fn find(
    partitioner: Partitioner,
    version: Version,
    shape: &KeyShape,
    sizes: &[usize],
    window: &Window,
    budget: u64,
) -> Result<Vec<Filler>, Refusal> {
    let ovh = overhead(version);
    if partitioner == Partitioner::ByteOrdered {
        return find_ordered(version, shape, sizes, window);
    }
    let ceiling = partitioner.token(&window.first_key);
    if let (KeyShape::Blob, Token::Murmur3(lo), Token::Murmur3(hi)) =
        (shape, &window.floor, &ceiling)
    {
        if let Some(f) = blob_fillers(version, sizes, *lo, *hi) {
            return Ok(f);
        }
    }
    // How many tries a uniform hash needs to land in (floor, ceiling).
    let expected = match (&window.floor, &ceiling) {
        (Token::Murmur3(lo), Token::Murmur3(hi)) => {
            let width = (*hi as i128) - (*lo as i128) - 1;
            if width <= 0 {
                u128::MAX
            } else {
                (1u128 << 64) / width as u128
            }
        }
        (Token::Random(lo), Token::Random(RandomToken::Value(hi))) => {
            let lo = match lo {
                RandomToken::Minimum => -1i128,
                RandomToken::Value(v) => *v as i128,
            };
            let width = (*hi as i128) - lo - 1;
            if width <= 0 {
                u128::MAX
            } else {
                (1u128 << 127) / width as u128
            }
        }
        _ => return Err(Refusal::Partitioner(partitioner)),
    };
    // Several fillers each need a hit.
    if expected.saturating_mul(sizes.len() as u128) > budget as u128 / 4 {
        return Err(Refusal::NarrowWindow {
            expected_tries: expected,
        });
    }
    let in_window = |t: &Token| t > &window.floor && t < &ceiling;
    let mut out: Vec<(Token, Filler)> = Vec::with_capacity(sizes.len());
    let mut counter = 0u64;
    let mut tries = 0u64;
    for &size in sizes {
        let key_len = size - ovh;
        let Some(mut t) = template(shape, key_len) else {
            return Err(Refusal::KeyType(format!("{shape:?}")));
        };
        let block = t.counter_at / 16 * 16;
        let (murmur, md5) = match partitioner {
            Partitioner::Murmur3 => {
                let mut s = Hash3State::default();
                s.absorb_blocks(&t.bytes[..block]);
                (Some(s), None)
            }
            _ => {
                let mut m = Md5::new();
                m.update(&t.bytes[..t.counter_at]);
                (None, Some(m))
            }
        };
        let found = loop {
            if tries >= budget {
                return Err(Refusal::NotFound { tries });
            }
            tries += 1;
            put_counter(&mut t.bytes[t.counter_at..], counter);
            counter += 1;
            let token = match (&murmur, &md5) {
                (Some(s), _) => {
                    let h = s.finish(&t.bytes[block..], key_len)[0] as i64;
                    // Murmur3Partitioner.getToken normalises Long.MIN_VALUE.
                    Token::Murmur3(if h == i64::MIN { i64::MAX } else { h })
                }
                (None, Some(m)) => {
                    let d = m.clone().chain_update(&t.bytes[t.counter_at..]).finalize();
                    let mut a = [0u8; 16];
                    a.copy_from_slice(&d);
                    Token::Random(RandomToken::Value(i128::from_be_bytes(a).unsigned_abs()))
                }
                (None, None) => return Err(Refusal::Partitioner(partitioner)),
            };
            if in_window(&token) && !out.iter().any(|(o, _)| *o == token) {
                break token;
            }
        };
        let bytes = empty_partition(version, &t.bytes);
        let pad = 2 + t.pad.start..2 + t.pad.end;
        out.push((
            found,
            Filler {
                key: t.bytes,
                bytes,
                pads: vec![pad],
                pad_byte: PAD,
            },
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.key.cmp(&b.1.key)));
    Ok(out.into_iter().map(|(_, f)| f).collect())
}

/// Blob keys under Murmur3: tokens spread evenly over `(lo, hi)`, each key built for its
/// token (`murmur::key_block_for`). `None` when the window holds fewer tokens than
/// fillers (the caller's search then refuses it).
fn blob_fillers(version: Version, sizes: &[usize], lo: i64, hi: i64) -> Option<Vec<Filler>> {
    let width = (hi as i128) - (lo as i128) - 1;
    let m = sizes.len() as i128;
    if width < m {
        return None;
    }
    let ovh = overhead(version);
    let mut out = Vec::with_capacity(sizes.len());
    for (i, &size) in sizes.iter().enumerate() {
        let len = size - ovh;
        let token = (lo as i128 + (i as i128 + 1) * width / (m + 1)) as i64;
        // The free block: the last whole 16-byte block; the padding before it is one run.
        let at = (len - 16) / 16 * 16;
        let mut key = vec![PAD; len];
        let mut s = Hash3State::default();
        s.absorb_blocks(&key[..at]);
        let block = super::murmur::key_block_for(s, &key[at + 16..], len, token as u64);
        key[at..at + 16].copy_from_slice(&block);
        // Checked forward: the token is the partitioner's, or the search takes over.
        if super::token::murmur3_token(&key) != token {
            return None;
        }
        let bytes = empty_partition(version, &key);
        out.push(Filler {
            key,
            bytes,
            pads: std::iter::once(2..2 + at).collect(),
            pad_byte: PAD,
        });
    }
    Some(out)
}

/// ByteOrderedPartitioner: the token is the key, so each filler key is the smallest ASCII
/// string of its length above the floor (or the previous filler), checked below the first
/// key. Longer fillers sort after shorter ones that are their prefix, so sizes go up.
fn find_ordered(
    version: Version,
    shape: &KeyShape,
    sizes: &[usize],
    window: &Window,
) -> Result<Vec<Filler>, Refusal> {
    if !matches!(shape, KeyShape::Free | KeyShape::Blob) {
        return Err(Refusal::Partitioner(Partitioner::ByteOrdered));
    }
    let Token::Bytes(floor) = &window.floor else {
        return Err(Refusal::Partitioner(Partitioner::ByteOrdered));
    };
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    let ovh = overhead(version);
    let mut below = floor.clone();
    let mut out = Vec::with_capacity(sizes.len());
    for size in sizes {
        let n = size - ovh;
        let key = ascii_above(&below, n)
            .filter(|k| k.as_slice() < window.first_key.as_slice())
            .ok_or(Refusal::NarrowWindow {
                expected_tries: u128::MAX,
            })?;
        let pad = longest_zero_run(&key);
        let bytes = empty_partition(version, &key);
        out.push(Filler {
            pads: std::iter::once(2 + pad.start..2 + pad.end).collect(),
            key: key.clone(),
            bytes,
            pad_byte: 0,
        });
        below = key;
    }
    Ok(out)
}

fn longest_zero_run(k: &[u8]) -> Range<usize> {
    let mut best = 0..0;
    let mut i = 0;
    while i < k.len() {
        if k[i] == 0 {
            let s = i;
            while i < k.len() && k[i] == 0 {
                i += 1;
            }
            if i - s > best.len() {
                best = s..i;
            }
        } else {
            i += 1;
        }
    }
    best
}

/// The smallest string of `n` ASCII bytes (valid `blob`, `ascii` and `text`) that sorts
/// strictly after `f` (unsigned bytes), or `None`.
fn ascii_above(f: &[u8], n: usize) -> Option<Vec<u8>> {
    let m = f.len().min(n);
    let non_ascii = f[..m].iter().position(|b| *b > 0x7f).unwrap_or(m);
    if non_ascii == m && n > f.len() {
        let mut k = f.to_vec();
        k.resize(n, 0);
        return Some(k);
    }
    // Exceed `f` at the last position before `non_ascii` that can go up.
    let j = f[..non_ascii].iter().rposition(|b| *b < 0x7f)?;
    let mut k = f[..j].to_vec();
    k.push(f[j] + 1);
    k.resize(n, 0);
    Some(k)
}

// ------------------------------------------------------------------ row fillers
//
// A fixed-width partition key (`int`, `bigint`, `uuid`, `timeuuid`, `timestamp`, composites of
// those) gives an empty partition one size, and a table with static columns must carry a static
// row in every partition (`SSTableSimpleIterator.readStaticRow` reads one whenever
// `SerializationHeader.hasStatic()`). For both, the filler is one partition whose size is tuned
// *inside* it, by empty rows written with non-minimal vints:
//
// ```text
// u16 len | key | DeletionTime LIVE
//   [static row: 0x80 EXTENSION_FLAG | 0x01 IS_STATIC | rowSize | prevSize | subset]
//   regular row* : 0x00 flags | clustering header vint per 32 columns (every value empty) |
//                  rowSize | prevSize | subset
// 0x01 END_OF_PARTITION
// ```
//
// * No flag is set: no liveness info, no deletion, not HAS_ALL_COLUMNS, so the columns present
//   are a subset (`Columns.Serializer.serializeSubset`), here the empty one: the bitmap of the
//   missing columns, all of them (`(1 << n) - 1`; `n` regular or static columns, `n < 64`).
//   No cell follows. `UnfilteredSerializer.deserialize` skips such an empty row ("Skip empty
//   rows"), as `SSTableIterator`'s readers do ("We may get empty row for the same reason
//   expressed on UnfilteredSerializer.deserializeOne"): the partition reads as empty, a
//   compaction writes nothing for it, and nothing is counted as a tombstone because nothing is
//   one. An empty static row is what Cassandra itself writes for a partition without static
//   data (`Rows.EMPTY_STATIC_ROW`).
// * `rowSize` is the bytes after it (`skipRowBody` skips by it), `prevSize`
//   (`previousUnfilteredSize`) is read and discarded by `deserializeRowBody`; written as nine
//   bytes of value 0 (`0xff` then eight zeros) it also gives the first chunk's LZ4 encoder a run
//   to tune its length with (`sstable::lz4`).
// * Every vint is written in the length the size needs: `VIntCoding.readUnsignedVInt` takes
//   the count of leading one bits of the first byte as the number of bytes that follow and does
//   not insist on the shortest form, so one row takes 12 to 36 bytes and a run of rows any size
//   from there on.
//
// The key is a real value of the key type (`TimeUUIDType` keeps version 1) found by counting in
// its low bytes until its token is in the window.

/// What the SerializationHeader says a row filler must encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowShape {
    /// Clustering columns (each row's values are all empty).
    pub clustering: usize,
    /// Static columns; a static row precedes the rows when there is any.
    pub statics: usize,
    /// Regular columns.
    pub regular: usize,
}

/// More columns than the one-word subset bitmap (`Columns.Serializer` switches to a
/// list of indexes at 64), which no row filler encodes.
pub const MAX_FILLER_COLUMNS: usize = 63;

/// `previousUnfilteredSize`: value 0 in nine bytes.
const PREV: [u8; 9] = [0xff, 0, 0, 0, 0, 0, 0, 0, 0];

/// Bytes of the shortest unsigned vint of `v` (`VIntCoding.computeUnsignedVIntSize`).
pub fn vint_min_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    if bits > 56 {
        9
    } else {
        bits.max(1).div_ceil(7)
    }
}

/// `v` as an unsigned vint of exactly `len` bytes (`vint_min_len(v) <= len <= 9`): `len - 1`
/// leading one bits, a zero bit (when `len < 9`), then the value big-endian.
pub fn put_vint(v: u64, len: usize, out: &mut Vec<u8>) {
    debug_assert!(len >= vint_min_len(v) && len <= 9);
    if len >= 9 {
        out.push(0xff);
        out.extend_from_slice(&v.to_be_bytes());
        return;
    }
    let extra = len - 1;
    let prefix = !(0xffu32 >> extra) as u8;
    out.push(prefix | (v >> (8 * extra)) as u8);
    for i in (0..extra).rev() {
        out.push((v >> (8 * i)) as u8);
    }
}

/// An unsigned vint at the start of `b` and its length, in any length, as
/// `VIntCoding.readUnsignedVInt` decodes it; `None` when `b` is too short.
pub fn get_vint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let extra = first.leading_ones() as usize;
    let bytes = b.get(1..1 + extra)?;
    let mut v = u64::from(first) & (0xffu64 >> extra);
    for x in bytes {
        v = (v << 8) | u64::from(*x);
    }
    Some((v, 1 + extra))
}

/// The subset bitmap with every one of `n` columns missing.
fn all_missing(n: usize) -> u64 {
    (1u64 << n) - 1
}

/// The clustering header of each block of 32 columns with every value empty
/// (`ClusteringPrefix.Serializer.makeHeader`: bit `2i` = empty).
fn empty_clustering_headers(k: usize) -> Vec<u64> {
    (0..k.div_ceil(32))
        .map(|b| {
            let n = (k - 32 * b).min(32);
            (0..n).fold(0u64, |h, i| h | (1u64 << (2 * i)))
        })
        .collect()
}

/// One empty row's tunable vints: clustering headers (regular rows), rowSize, subset.
struct RowVints {
    /// `(value, length)`.
    headers: Vec<(u64, usize)>,
    size_len: usize,
    subset: (u64, usize),
}

impl RowVints {
    fn new(headers: &[u64], subset: u64) -> Self {
        RowVints {
            headers: headers.iter().map(|h| (*h, vint_min_len(*h))).collect(),
            size_len: 1,
            subset: (subset, vint_min_len(subset)),
        }
    }
    fn len(&self, is_static: bool) -> usize {
        (if is_static { 2 } else { 1 })
            + self.headers.iter().map(|h| h.1).sum::<usize>()
            + self.size_len
            + PREV.len()
            + self.subset.1
    }
    fn slack(&self) -> usize {
        self.headers.iter().map(|h| 9 - h.1).sum::<usize>()
            + (9 - self.size_len)
            + (9 - self.subset.1)
    }
    /// Lengthens the vints by up to `extra` bytes; what is left.
    fn grow(&mut self, mut extra: usize) -> usize {
        for l in self
            .headers
            .iter_mut()
            .map(|h| &mut h.1)
            .chain([&mut self.size_len, &mut self.subset.1])
        {
            let d = (9 - *l).min(extra);
            *l += d;
            extra -= d;
        }
        extra
    }
    /// Appends the row; the range of its prevSize's zeros.
    fn put(&self, is_static: bool, out: &mut Vec<u8>) -> Range<usize> {
        if is_static {
            out.extend_from_slice(&[0x80, 0x01]);
        } else {
            out.push(0x00);
            for &(h, l) in &self.headers {
                put_vint(h, l, out);
            }
        }
        put_vint((PREV.len() + self.subset.1) as u64, self.size_len, out);
        let at = out.len() + 1;
        out.extend_from_slice(&PREV);
        put_vint(self.subset.0, self.subset.1, out);
        at..at + PREV.len() - 1
    }
}

/// The empty rows of a row filler of `total` bytes with a key of `key_len` bytes: the static
/// row (if any) and the regular rows, or `None` when no such partition has that size.
fn row_plan(
    version: Version,
    shape: &RowShape,
    key_len: usize,
    total: usize,
) -> Option<(Option<RowVints>, Vec<RowVints>)> {
    if shape.statics > MAX_FILLER_COLUMNS || shape.regular > MAX_FILLER_COLUMNS {
        return None;
    }
    let headers = empty_clustering_headers(shape.clustering);
    let proto = RowVints::new(&headers, all_missing(shape.regular));
    let mut st = (shape.statics > 0).then(|| RowVints::new(&[], all_missing(shape.statics)));
    let fixed = overhead(version) + key_len + st.as_ref().map_or(0, |s| s.len(true));
    let rest = total.checked_sub(fixed)?;
    let st_slack = st.as_ref().map_or(0, RowVints::slack);
    // At least one vint-bearing row: the LZ4 encoder needs its run.
    let r0 = usize::from(st.is_none());
    let (rmin, rslack) = (proto.len(false), proto.slack());
    let rows = (r0..=rest / rmin).find(|r| {
        let extra = rest - r * rmin;
        extra <= r * rslack + st_slack
    })?;
    let mut extra = rest - rows * rmin;
    if let Some(s) = st.as_mut() {
        extra = s.grow(extra);
    }
    let mut out = Vec::with_capacity(rows);
    for _ in 0..rows {
        let mut r = RowVints::new(&headers, all_missing(shape.regular));
        extra = r.grow(extra);
        out.push(r);
    }
    (extra == 0).then_some((st, out))
}

/// Whether a row filler with a key of `key_len` bytes can be exactly `total` bytes.
pub fn row_filler_fits(version: Version, shape: &RowShape, key_len: usize, total: usize) -> bool {
    row_plan(version, shape, key_len, total).is_some()
}

/// The row filler partition of `key`, exactly `total` bytes.
pub fn row_filler(version: Version, shape: &RowShape, key: &[u8], total: usize) -> Option<Filler> {
    let (st, rows) = row_plan(version, shape, key.len(), total)?;
    let mut bytes = Vec::with_capacity(total);
    bytes.extend_from_slice(&(key.len() as u16).to_be_bytes());
    bytes.extend_from_slice(key);
    bytes.extend_from_slice(live_deletion(version));
    let mut pads = Vec::with_capacity(rows.len() + 1);
    if let Some(s) = &st {
        pads.push(s.put(true, &mut bytes));
    }
    for r in &rows {
        pads.push(r.put(false, &mut bytes));
    }
    bytes.push(END_OF_PARTITION);
    (bytes.len() == total).then(|| Filler {
        key: key.to_vec(),
        bytes,
        pads,
        pad_byte: 0,
    })
}

/// Whether `after_key` — a partition's bytes after its key — is a row filler: LIVE, the empty
/// static row of a static table, empty regular rows, END_OF_PARTITION. `None`: more bytes
/// are needed to tell.
pub fn is_row_filler_after_key(
    version: Version,
    shape: &RowShape,
    after_key: &[u8],
) -> Option<bool> {
    let live = live_deletion(version);
    let head = after_key.get(..live.len())?;
    if head != live {
        return Some(false);
    }
    let mut b = &after_key[live.len()..];
    let headers = empty_clustering_headers(shape.clustering);
    // One empty row's body after its flags: `Some(rest)`, `None` for too short, `Err` for not.
    let row = |mut b: &[u8], is_static: bool| -> Option<Result<usize, ()>> {
        let start = b.len();
        if !is_static {
            for h in &headers {
                let (v, l) = get_vint(b)?;
                if v != *h {
                    return Some(Err(()));
                }
                b = &b[l..];
            }
        }
        let (size, l) = get_vint(b)?;
        b = &b[l..];
        let (_prev, lp) = get_vint(b)?;
        let (subset, ls) = get_vint(b.get(lp..)?)?;
        let n = if is_static {
            shape.statics
        } else {
            shape.regular
        };
        if n > MAX_FILLER_COLUMNS || subset != all_missing(n) || size != (lp + ls) as u64 {
            return Some(Err(()));
        }
        Some(Ok(start - b.len() + lp + ls))
    };
    if shape.statics > 0 {
        if *b.first()? != 0x80 || *b.get(1)? != 0x01 {
            return Some(false);
        }
        match row(&b[2..], true)? {
            Ok(n) => b = &b[2 + n..],
            Err(()) => return Some(false),
        }
    }
    loop {
        match *b.first()? {
            END_OF_PARTITION => return Some(true),
            0x00 => match row(&b[1..], false)? {
                Ok(n) => b = &b[1 + n..],
                Err(()) => return Some(false),
            },
            _ => return Some(false),
        }
    }
}

/// A value of the partition key type and the bytes a counter goes in.
#[derive(Debug, Clone)]
pub struct KeyGen {
    bytes: Vec<u8>,
    counter: Range<usize>,
    /// The counter as hex digits (`put_counter`), in text-valid keys; else big-endian binary.
    hex: bool,
}

impl KeyGen {
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    /// The key for counter `n`, or `None` past the counter's range.
    fn key(&mut self, n: u64) -> Option<&[u8]> {
        let c = &mut self.bytes[self.counter.clone()];
        if self.hex {
            put_counter(c, n);
        } else {
            let w = c.len();
            if w < 8 && n >> (8 * w) != 0 {
                return None;
            }
            c.copy_from_slice(&n.to_be_bytes()[8 - w..]);
        }
        Some(&self.bytes)
    }
}

/// Where the counter goes in a fixed-width value: the low four bytes of 8- and 16-byte
/// values (a `timeuuid` keeps its version nibble in byte 6 and variant in byte 8), all of a
/// shorter one.
fn fixed_counter(width: usize) -> Range<usize> {
    if width > 4 {
        width - 4..width
    } else {
        0..width
    }
}

/// The key generator of a partition key type, for a row filler.
pub fn key_gen(key_type: &str) -> Result<KeyGen, Refusal> {
    let shape = key_shape(key_type);
    match &shape {
        KeyShape::Fixed(t) => {
            let t = t.trim();
            if let Some(open) = t.find('(') {
                // A composite of fixed-width components: `u16 length | value | 0x00` each,
                // the counter in the last component.
                let inner = t[open + 1..].strip_suffix(')').unwrap_or("");
                let mut bytes = Vec::new();
                let mut counter = 0..0;
                for c in inner.split(',') {
                    let v = fixed_value(simple_name(c.trim()))
                        .ok_or_else(|| Refusal::KeyType(t.to_string()))?;
                    bytes.extend_from_slice(&(v.len() as u16).to_be_bytes());
                    let at = bytes.len();
                    let r = fixed_counter(v.len());
                    counter = at + r.start..at + r.end;
                    bytes.extend_from_slice(&v);
                    bytes.push(0);
                }
                Ok(KeyGen {
                    bytes,
                    counter,
                    hex: false,
                })
            } else {
                let v =
                    fixed_value(simple_name(t)).ok_or_else(|| Refusal::KeyType(t.to_string()))?;
                Ok(KeyGen {
                    counter: fixed_counter(v.len()),
                    bytes: v,
                    hex: false,
                })
            }
        }
        KeyShape::Free | KeyShape::Blob | KeyShape::Composite(_) => {
            let len = min_key_len(&shape).ok_or_else(|| Refusal::KeyType(key_type.to_string()))?;
            let t = template(&shape, len).ok_or_else(|| Refusal::KeyType(key_type.to_string()))?;
            Ok(KeyGen {
                counter: t.counter_at..t.counter_at + COUNTER_LEN,
                bytes: t.bytes,
                hex: true,
            })
        }
        KeyShape::Unsupported(t) => Err(Refusal::KeyType(t.clone())),
    }
}

/// How many tries a uniform hash needs to land strictly between `floor` and `ceiling`.
fn expected_tries(floor: &Token, ceiling: &Token) -> Option<u128> {
    match (floor, ceiling) {
        (Token::Murmur3(lo), Token::Murmur3(hi)) => {
            let width = (*hi as i128) - (*lo as i128) - 1;
            Some(if width <= 0 {
                u128::MAX
            } else {
                (1u128 << 64) / width as u128
            })
        }
        (Token::Random(lo), Token::Random(RandomToken::Value(hi))) => {
            let lo = match lo {
                RandomToken::Minimum => -1i128,
                RandomToken::Value(v) => *v as i128,
            };
            let width = (*hi as i128) - lo - 1;
            Some(if width <= 0 {
                u128::MAX
            } else {
                (1u128 << 127) / width as u128
            })
        }
        _ => None,
    }
}

/// The row filler of `total` bytes for a child: the first key of `keys` (counter 0, 1, ...)
/// whose token lies strictly inside the window. Deterministic.
pub fn find_row_filler(
    partitioner: Partitioner,
    version: Version,
    shape: &RowShape,
    mut keys: KeyGen,
    total: usize,
    window: &Window,
    budget: u64,
) -> Result<Filler, Refusal> {
    if partitioner == Partitioner::ByteOrdered {
        return Err(Refusal::Partitioner(partitioner));
    }
    let ceiling = partitioner.token(&window.first_key);
    let expected =
        expected_tries(&window.floor, &ceiling).ok_or(Refusal::Partitioner(partitioner))?;
    if expected > budget as u128 / 4 {
        return Err(Refusal::NarrowWindow {
            expected_tries: expected,
        });
    }
    for n in 0..budget {
        let Some(key) = keys.key(n) else {
            return Err(Refusal::NotFound { tries: n });
        };
        let t = partitioner.token(key);
        if t > window.floor && t < ceiling {
            let key = key.to_vec();
            return row_filler(version, shape, &key, total)
                .ok_or_else(|| Refusal::KeyType(format!("no row filler of {total} bytes")));
        }
    }
    Err(Refusal::NotFound { tries: budget })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).expect("version")
    }

    #[test]
    fn key_shapes_of_the_header_types() {
        let m = "org.apache.cassandra.db.marshal.";
        assert_eq!(key_shape(&format!("{m}UTF8Type")), KeyShape::Free);
        assert_eq!(key_shape(&format!("{m}BytesType")), KeyShape::Blob);
        assert!(matches!(
            key_shape(&format!("{m}Int32Type")),
            KeyShape::Fixed(_)
        ));
        assert!(matches!(
            key_shape(&format!("{m}UUIDType")),
            KeyShape::Fixed(_)
        ));
        assert!(matches!(
            key_shape(&format!("{m}IntegerType")),
            KeyShape::Unsupported(_)
        ));
        assert_eq!(
            key_shape(&format!("{m}CompositeType({m}Int32Type,{m}UTF8Type)")),
            KeyShape::Composite(vec![Part::Fixed(vec![0; 4]), Part::Free])
        );
        assert!(matches!(
            key_shape(&format!("{m}CompositeType({m}Int32Type,{m}LongType)")),
            KeyShape::Fixed(_)
        ));
        assert!(matches!(
            key_shape(&format!(
                "{m}CompositeType({m}FrozenType({m}ListType({m}Int32Type))))"
            )),
            KeyShape::Unsupported(_)
        ));
    }

    #[test]
    fn empty_partition_bytes_per_version() {
        assert_eq!(
            empty_partition(v("nb"), b"k"),
            [0, 1, b'k', 0x7f, 0xff, 0xff, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(empty_partition(v("oa"), b"k"), [0, 1, b'k', 0x80, 1]);
        for ver in ["ma", "mc", "me", "na", "nb", "oa"] {
            let p = empty_partition(v(ver), b"key");
            assert_eq!(p.len(), 3 + overhead(v(ver)));
            assert!(is_empty_after_key(v(ver), &p[5..]), "{ver}");
            // A partition deletion or a row after the header is not empty.
            let mut q = p.clone();
            let last = q.len() - 1;
            q[last] = 0x04;
            assert!(!is_empty_after_key(v(ver), &q[5..]), "{ver}");
        }
    }

    #[test]
    fn sizes_fill_exactly() {
        let s = KeyShape::Free;
        let ovh = overhead(v("nb"));
        assert_eq!(sizes(&s, v("nb"), 16 + ovh - 1), None);
        assert_eq!(sizes(&s, v("nb"), 16 + ovh), Some(vec![16 + ovh]));
        let big = sizes(&s, v("nb"), 70_000).expect("fits");
        assert_eq!(big.iter().sum::<usize>(), 70_000);
        assert!(big.iter().all(|n| n - ovh <= MAX_KEY_LEN));
        assert_eq!(big.len(), 70_000usize.div_ceil(MAX_KEY_LEN + ovh));
        assert_eq!(sizes(&KeyShape::Fixed("x".into()), v("nb"), 100), None);
    }

    #[test]
    fn found_keys_are_in_the_window_sized_and_valid() {
        let p = Partitioner::Murmur3;
        let first = b"some real key".to_vec();
        let Token::Murmur3(hi) = p.token(&first) else {
            unreachable!()
        };
        let window = Window {
            floor: Token::Murmur3(hi.saturating_sub(1 << 50)),
            first_key: first.clone(),
        };
        let m = "org.apache.cassandra.db.marshal.";
        for shape in [
            KeyShape::Free,
            KeyShape::Blob,
            key_shape(&format!(
                "{m}CompositeType({m}Int32Type,{m}UTF8Type,{m}TimeUUIDType)"
            )),
        ] {
            for ver in ["mc", "nb", "oa"] {
                for total in [60usize, 1000, 16_000, 70_000] {
                    let sz = sizes(&shape, v(ver), total).expect("size");
                    let f = find(p, v(ver), &shape, &sz, &window, SEARCH_BUDGET).expect("found");
                    let bytes: Vec<u8> = f.iter().flat_map(|f| f.bytes.clone()).collect();
                    assert_eq!(bytes.len(), total);
                    let mut prev = window.floor.clone();
                    for x in &f {
                        let t = p.token(&x.key);
                        assert!(t > prev && t < p.token(&first), "{t} {ver}");
                        prev = t;
                        if shape == KeyShape::Free {
                            assert!(x.key.iter().all(|b| b.is_ascii()), "ASCII (text-valid)");
                        }
                        assert!(x
                            .pads
                            .iter()
                            .all(|r| x.bytes[r.clone()].iter().all(|b| *b == PAD)));
                        assert!(is_empty_after_key(v(ver), &x.bytes[2 + x.key.len()..]));
                    }
                    // Deterministic.
                    assert_eq!(
                        find(p, v(ver), &shape, &sz, &window, SEARCH_BUDGET).expect("again"),
                        f
                    );
                }
            }
        }
    }

    #[test]
    fn blob_keys_are_built_for_tokens_in_a_window_of_any_width() {
        let p = Partitioner::Murmur3;
        let first = b"first".to_vec();
        let Token::Murmur3(hi) = p.token(&first) else {
            unreachable!()
        };
        // A window far too narrow for a search: 100 tokens for 61 fillers.
        let w = Window {
            floor: Token::Murmur3(hi - 101),
            first_key: first.clone(),
        };
        let sz = sizes(&KeyShape::Blob, v("nb"), 16_000).expect("sizes");
        assert!(sz.len() > 50);
        let f = find(p, v("nb"), &KeyShape::Blob, &sz, &w, SEARCH_BUDGET).expect("built");
        let mut prev = w.floor.clone();
        for x in &f {
            let t = p.token(&x.key);
            assert!(t > prev && t < p.token(&first));
            prev = t;
        }
        assert_eq!(f.iter().map(|f| f.bytes.len()).sum::<usize>(), 16_000);
    }

    #[test]
    fn random_partitioner_windows_and_refusals() {
        let p = Partitioner::Random;
        let first = b"k".to_vec();
        let Token::Random(RandomToken::Value(hi)) = p.token(&first) else {
            unreachable!()
        };
        let w = Window {
            floor: Token::Random(RandomToken::Value(hi - (1u128 << 110))),
            first_key: first.clone(),
        };
        let f = find(p, v("nb"), &KeyShape::Free, &[40], &w, SEARCH_BUDGET).expect("found");
        assert!(p.token(&f[0].key) < p.token(&first));
        let narrow = Window {
            floor: Token::Random(RandomToken::Value(hi - 2)),
            first_key: first,
        };
        assert!(matches!(
            find(p, v("nb"), &KeyShape::Free, &[40], &narrow, SEARCH_BUDGET),
            Err(Refusal::NarrowWindow { .. })
        ));
    }

    #[test]
    fn byte_ordered_fillers_sort_between_the_neighbours() {
        let ver = v("nb");
        let ovh = overhead(ver);
        let f = |floor: &[u8], first: &[u8], sizes: &[usize]| {
            find(
                Partitioner::ByteOrdered,
                ver,
                &KeyShape::Free,
                sizes,
                &Window {
                    floor: Token::Bytes(floor.to_vec()),
                    first_key: first.to_vec(),
                },
                SEARCH_BUDGET,
            )
        };
        for (floor, first) in [
            (&b"abc"[..], &b"abd"[..]),
            (b"", b"\x00\x01"),
            (b"a\xff\xff", b"c"),
            (b"key-0007", b"key-0008"),
        ] {
            let got = f(floor, first, &[ovh + 40, ovh + 300]).expect("between");
            let mut prev = floor.to_vec();
            for x in &got {
                assert!(x.key.as_slice() > prev.as_slice() && x.key.as_slice() < first);
                assert!(x.key.iter().all(u8::is_ascii));
                assert!(x
                    .pads
                    .iter()
                    .all(|r| x.bytes[r.clone()].iter().all(|b| *b == x.pad_byte)));
                prev = x.key.clone();
            }
        }
        // Nothing of 40 bytes sorts between "abc" and "abc\0".
        assert!(f(b"abc", b"abc\x00", &[ovh + 40]).is_err());
        assert!(matches!(
            find(
                Partitioner::ByteOrdered,
                ver,
                &KeyShape::Composite(vec![Part::Free]),
                &[ovh + 40],
                &Window {
                    floor: Token::Bytes(vec![1]),
                    first_key: vec![9]
                },
                SEARCH_BUDGET
            ),
            Err(Refusal::Partitioner(_))
        ));
    }

    #[test]
    fn vints_round_trip_in_every_length() {
        for v in [
            0u64,
            1,
            0x3f,
            0x7f,
            0x80,
            0x3fff,
            0x5555,
            1 << 40,
            (1 << 56) - 1,
            1 << 56,
            u64::MAX,
        ] {
            for len in vint_min_len(v)..=9 {
                let mut b = Vec::new();
                put_vint(v, len, &mut b);
                assert_eq!(b.len(), len, "{v} in {len}");
                assert_eq!(get_vint(&b), Some((v, len)), "{v} in {len}");
                // Truncated: more bytes needed, never a wrong value.
                assert_eq!(get_vint(&b[..len - 1]), None);
            }
        }
        // The shortest forms are Cassandra's (VIntCoding): 0x7f one byte, 0x80 two.
        assert_eq!(vint_min_len(0x7f), 1);
        assert_eq!(vint_min_len(0x80), 2);
        let mut b = Vec::new();
        put_vint(0x80, 2, &mut b);
        assert_eq!(b, [0x80, 0x80]);
    }

    #[test]
    fn row_fillers_take_every_size_from_their_smallest() {
        let shapes = [
            RowShape {
                clustering: 0,
                statics: 0,
                regular: 3,
            },
            RowShape {
                clustering: 2,
                statics: 0,
                regular: 1,
            },
            RowShape {
                clustering: 1,
                statics: 1,
                regular: 1,
            },
            RowShape {
                clustering: 40,
                statics: 2,
                regular: 63,
            },
            RowShape {
                clustering: 0,
                statics: 0,
                regular: 0,
            },
        ];
        for ver in ["mc", "nb", "oa"] {
            for sh in &shapes {
                for key_len in [4usize, 8, 16, 22] {
                    let key = vec![7u8; key_len];
                    let min = (1..200)
                        .find(|t| row_filler_fits(v(ver), sh, key_len, *t))
                        .expect("some size fits");
                    for total in (min..min + 400).chain([16_384, 65_536 + 777, 200_000]) {
                        // Wide clustering keys leave gaps between the static row alone and a
                        // first row; from two rows on every size fits.
                        let Some(f) = row_filler(v(ver), sh, &key, total) else {
                            assert!(total < min + 100, "{ver} {sh:?} {total}");
                            continue;
                        };
                        assert_eq!(f.bytes.len(), total);
                        assert!(!f.pads.is_empty());
                        for r in &f.pads {
                            assert_eq!(r.len(), 8);
                            assert!(f.bytes[r.clone()].iter().all(|b| *b == 0));
                        }
                        let after = &f.bytes[2 + key_len..];
                        assert_eq!(is_row_filler_after_key(v(ver), sh, after), Some(true));
                        // One byte short is not a filler (or not yet one).
                        assert_ne!(
                            is_row_filler_after_key(v(ver), sh, &after[..after.len() - 1]),
                            Some(true)
                        );
                        // A flipped byte of a vint or a missing END_OF_PARTITION is refused.
                        let mut bad = after.to_vec();
                        let last = bad.len() - 1;
                        bad[last] = 0x02;
                        assert_ne!(is_row_filler_after_key(v(ver), sh, &bad), Some(true));
                    }
                    assert!(!row_filler_fits(v(ver), sh, key_len, min - 1));
                }
            }
        }
        // More columns than the bitmap: no filler.
        let wide = RowShape {
            clustering: 0,
            statics: 0,
            regular: 64,
        };
        assert!(!row_filler_fits(v("nb"), &wide, 4, 5000));
    }

    #[test]
    fn row_filler_rejects_real_rows() {
        let sh = RowShape {
            clustering: 1,
            statics: 0,
            regular: 2,
        };
        let ver = v("nb");
        let mut after = live_deletion(ver).to_vec();
        // A row with a timestamp (flags 0x04): not a filler.
        after.extend_from_slice(&[0x04, 0x01, 0x05, 0x00]);
        assert_eq!(is_row_filler_after_key(ver, &sh, &after), Some(false));
        // A partition deletion: not a filler.
        let del = [0x5f, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9, 0x01];
        assert_eq!(is_row_filler_after_key(ver, &sh, &del), Some(false));
        // A regular row whose subset lists a present column: not empty.
        let mut b = live_deletion(ver).to_vec();
        b.extend_from_slice(&[0x00, 0x01, 0x02, 0x00, 0x01, 0x01]);
        assert_eq!(is_row_filler_after_key(ver, &sh, &b), Some(false));
    }

    #[test]
    fn key_gens_give_valid_values_in_the_window() {
        let m = "org.apache.cassandra.db.marshal.";
        let p = Partitioner::Murmur3;
        let first = 77i32.to_be_bytes().to_vec();
        let Token::Murmur3(hi) = p.token(&first) else {
            unreachable!()
        };
        let w = Window {
            floor: Token::Murmur3(hi.saturating_sub(1 << 50)),
            first_key: first.clone(),
        };
        let sh = RowShape {
            clustering: 1,
            statics: 0,
            regular: 1,
        };
        for (t, width) in [
            (format!("{m}Int32Type"), 4),
            (format!("{m}LongType"), 8),
            (format!("{m}TimestampType"), 8),
            (format!("{m}UUIDType"), 16),
            (format!("{m}TimeUUIDType"), 16),
            (
                format!("{m}CompositeType({m}Int32Type,{m}UUIDType)"),
                4 + 16 + 6,
            ),
            (format!("{m}UTF8Type"), COUNTER_LEN),
        ] {
            let g = key_gen(&t).expect("generator");
            assert_eq!(g.len(), width, "{t}");
            let f = find_row_filler(p, v("oa"), &sh, g, 3000, &w, SEARCH_BUDGET).expect(&t);
            let tok = p.token(&f.key);
            assert!(tok > w.floor && tok < p.token(&first), "{t}");
            if t.ends_with("TimeUUIDType") {
                assert_eq!(f.key[6] & 0xf0, 0x10, "version 1");
                assert_eq!(f.key[8] & 0xc0, 0x80, "IETF variant");
            }
            assert_eq!(f.bytes.len(), 3000);
        }
        assert!(matches!(
            key_gen(&format!("{m}IntegerType")),
            Err(Refusal::KeyType(_))
        ));
        // A window too narrow for a 4-byte key space.
        let narrow = Window {
            floor: Token::Murmur3(hi - 3),
            first_key: first,
        };
        let g = key_gen(&format!("{m}Int32Type")).expect("generator");
        assert!(find_row_filler(p, v("oa"), &sh, g, 3000, &narrow, SEARCH_BUDGET).is_err());
    }
}
