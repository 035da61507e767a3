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
    /// `bytes[pad]` are all `pad_byte`.
    pub pad: Range<usize>,
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
                pad,
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
            pad: 2..2 + at,
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
            pad: 2 + pad.start..2 + pad.end,
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
                        assert!(x.bytes[x.pad.clone()].iter().all(|b| *b == PAD));
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
                assert!(x.bytes[x.pad.clone()].iter().all(|b| *b == x.pad_byte));
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
}
