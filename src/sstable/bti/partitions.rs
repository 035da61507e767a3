//! Partitions.db, the BTI partition index (`io/sstable/format/bti/PartitionIndex.java`,
//! written by `PartitionIndexBuilder.java`).
//!
//! Layout (`BtiFormat.md`, "Partition index"; `PartitionIndexBuilder.complete`):
//!
//! ```text
//! [trie nodes, page-packed] [u16 len + first key] [u16 len + last key]
//! [i64 firstKeyPos] [i64 keyCount] [i64 root]            (big-endian, last 24 bytes)
//! ```
//!
//! The trie maps the *shortest unique prefix* of each key's byte-comparable form (see
//! `keys`) to a payload: a hash byte (`filterHashLowerBits`), then a signed big-endian
//! position of 1 to 8 bytes (`SizedInts`): `>= 0` is the Rows.db offset of the
//! partition's row index entry, `< 0` is `~` the partition's Data.db position.

use std::io::{self, Write};
use std::path::Path;

use super::super::bytes::Reader;
use super::super::error::{FormatError, Result};
use super::super::token::Partitioner;
use super::keys;
use super::trie::{self, Payload, TrieWriter, Walk};

/// `PartitionIndex.FOOTER_LENGTH`.
pub const FOOTER_LENGTH: u64 = 24;
/// `PartitionIndex.FLAG_HAS_HASH_BYTE`.
const FLAG_HAS_HASH_BYTE: u8 = 8;

/// Where a partition's entry points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexPos {
    /// The partition starts at this Data.db offset (it has no row index); stored as `~pos`.
    Data(u64),
    /// Its row index entry's key is at this Rows.db offset.
    Rows(u64),
}

impl IndexPos {
    /// The signed value stored in the trie (`PartitionIndex.Payload.position`).
    pub fn to_stored(self) -> i64 {
        match self {
            IndexPos::Data(p) => !(p as i64),
            IndexPos::Rows(p) => p as i64,
        }
    }

    pub fn from_stored(v: i64) -> Self {
        if v < 0 {
            IndexPos::Data(!v as u64)
        } else {
            IndexPos::Rows(v as u64)
        }
    }
}

/// One partition as the trie stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionEntry {
    /// The shortest prefix of the key's byte-comparable form that tells it apart from its
    /// neighbours (the whole form is never needed to find it).
    pub prefix: Vec<u8>,
    /// The hash byte; Cassandra 5.0 always writes one, its reader also accepts none.
    pub hash: Option<u8>,
    pub pos: IndexPos,
}

/// The footer and the first/last keys it points to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footer {
    /// Where the first key is stored: the trie region is `[0, first_key_pos)`.
    pub first_key_pos: u64,
    pub key_count: u64,
    pub root: u64,
    pub first_key: Vec<u8>,
    pub last_key: Vec<u8>,
}

/// A parsed Partitions.db over its bytes (read whole or memory-mapped by the caller).
pub struct PartitionIndex<'a> {
    file: &'a Path,
    buf: &'a [u8],
    footer: Footer,
    data_length: Option<u64>,
    rows_length: Option<u64>,
}

impl<'a> PartitionIndex<'a> {
    /// Reads and checks the footer (`PartitionIndex.load`): the three longs at the very
    /// end, the two keys at `firstKeyPos` ending exactly where the footer starts, the
    /// root inside the trie region.
    pub fn parse(file: &'a Path, buf: &'a [u8]) -> Result<Self> {
        let len = buf.len() as u64;
        if len < FOOTER_LENGTH + 4 + 1 {
            return Err(FormatError::Truncated {
                loc: super::super::error::Location {
                    file: file.to_path_buf(),
                    offset: Some(0),
                },
                field: "Partitions.db footer (a root node, two key lengths, three longs)",
                needed: FOOTER_LENGTH + 5,
                available: len,
            });
        }
        let footer_at = len - FOOTER_LENGTH;
        let mut r = Reader::with_base(file, &buf[footer_at as usize..], footer_at);
        let first_key_pos = r.i64("footer firstKeyPos")?;
        let key_count = r.i64("footer keyCount")?;
        let root = r.i64("footer root")?;
        if first_key_pos < 1 || first_key_pos as u64 > footer_at - 4 {
            return Err(FormatError::corrupt(
                file,
                Some(footer_at),
                format!(
                    "footer firstKeyPos {first_key_pos} is not inside the file \
                     (1..={} for a trie of at least one node)",
                    footer_at - 4
                ),
            ));
        }
        let first_key_pos = first_key_pos as u64;
        if key_count < 0 {
            return Err(FormatError::corrupt(
                file,
                Some(footer_at + 8),
                format!("footer keyCount {key_count} is negative"),
            ));
        }
        if root < 0 || root as u64 >= first_key_pos {
            return Err(FormatError::corrupt(
                file,
                Some(footer_at + 16),
                format!("footer root {root} is outside the trie region [0, {first_key_pos})"),
            ));
        }
        let keys = &buf[first_key_pos as usize..footer_at as usize];
        let mut r = Reader::with_base(file, keys, first_key_pos);
        let first_key = read_short_bytes(&mut r, "first key")?.to_vec();
        let last_key = read_short_bytes(&mut r, "last key")?.to_vec();
        if !r.is_empty() {
            return Err(r.corrupt(format!(
                "{} unexpected byte(s) between the last key and the footer",
                r.remaining()
            )));
        }
        if key_count > 0 && first_key.is_empty() {
            return Err(FormatError::corrupt(
                file,
                Some(first_key_pos),
                "empty first key in an index with keys",
            ));
        }
        Ok(PartitionIndex {
            file,
            buf,
            footer: Footer {
                first_key_pos,
                key_count: key_count as u64,
                root: root as u64,
                first_key,
                last_key,
            },
            data_length: None,
            rows_length: None,
        })
    }

    /// Data.db positions must then be below `data_length`, Rows.db ones below `rows_length`.
    pub fn with_limits(mut self, data_length: Option<u64>, rows_length: Option<u64>) -> Self {
        self.data_length = data_length;
        self.rows_length = rows_length;
        self
    }

    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    /// Every partition in key (token) order. The walk checks each node and payload, and
    /// at the end that it found exactly the footer's key count.
    pub fn entries(&self) -> Entries<'a> {
        Entries {
            file: self.file,
            buf: self.buf,
            walk: Walk::new(
                self.file,
                self.buf,
                self.footer.root,
                0..self.footer.first_key_pos,
                keys::MAX_COMPARABLE_LEN,
            ),
            key_count: self.footer.key_count,
            root: self.footer.root,
            seen: 0,
            data_length: self.data_length,
            rows_length: self.rows_length,
            done: false,
        }
    }

    /// For each bound, in increasing order (none a proper prefix of a later one: token
    /// bounds all have one length), the ordinal of the first partition whose key
    /// sorts after it on the bound's length (`keys::prefix_order`), or the key count when
    /// none does. With `keys::murmur3_token_bound(t)` that is the first partition of a
    /// token above `t`: where a split at `t` cuts. One walk of the trie; `full_key` (the
    /// entry's ordinal and entry, giving its full byte-comparable key, read from Data.db
    /// or Rows.db) is called only for an entry its stored prefix cannot place, at most
    /// once per bound, so a plan reads one key per cut instead of every key.
    pub fn cuts_after(
        &self,
        bounds: &[&[u8]],
        mut full_key: impl FnMut(u64, &PartitionEntry) -> Result<Vec<u8>>,
    ) -> Result<Vec<u64>> {
        let mut out = Vec::with_capacity(bounds.len());
        // Compared on their own lengths, bounds keep their order only if none is a proper
        // prefix of a later one (`40` would place no key after it, `40 01` most).
        if bounds
            .windows(2)
            .any(|w| w[0] > w[1] || (w[1].len() > w[0].len() && w[1].starts_with(w[0])))
        {
            return Err(FormatError::corrupt(
                self.file,
                None,
                "split bounds must increase, none a prefix of a later one".to_string(),
            ));
        }
        let mut entries = self.entries();
        let mut ordinal = 0u64;
        while out.len() < bounds.len() {
            let Some(e) = entries.next().transpose()? else {
                break;
            };
            let mut full: Option<Vec<u8>> = None;
            while let Some(b) = bounds.get(out.len()) {
                let order = match keys::prefix_order(&e.prefix, b) {
                    Some(o) => o,
                    None => {
                        if full.is_none() {
                            full = Some(full_key(ordinal, &e)?);
                        }
                        let k = full.as_deref().unwrap_or_default();
                        if !k.starts_with(&e.prefix) {
                            return Err(FormatError::corrupt(
                                self.file,
                                None,
                                format!(
                                    "partition {ordinal}'s key {k:02x?} does not start with its trie prefix {:02x?}",
                                    e.prefix
                                ),
                            ));
                        }
                        k[..k.len().min(b.len())].cmp(b)
                    }
                };
                if order != std::cmp::Ordering::Greater {
                    break;
                }
                out.push(ordinal);
            }
            ordinal += 1;
        }
        out.resize(bounds.len(), self.footer.key_count);
        Ok(out)
    }

    /// Where the root node ends. Cassandra writes the root last, so in its files this is
    /// `first_key_pos`; a mismatch means trailing garbage in the trie region.
    pub fn root_end(&self) -> Result<u64> {
        let node = trie::read_node(
            self.file,
            self.buf,
            self.footer.root,
            self.footer.first_key_pos,
        )?;
        let len = payload_len(node.payload_flags);
        Ok(node.payload_pos + len as u64)
    }
}

fn read_short_bytes<'b>(r: &mut Reader<'b>, field: &'static str) -> Result<&'b [u8]> {
    let n = r.u16(field)? as usize;
    r.bytes(n, field)
}

/// Payload bytes for the given flags (`PartitionIndex.getIndexPos`).
fn payload_len(flags: u8) -> usize {
    match flags {
        0 => 0,
        f if f >= FLAG_HAS_HASH_BYTE => 1 + (f - FLAG_HAS_HASH_BYTE + 1) as usize,
        f => f as usize,
    }
}

pub struct Entries<'a> {
    file: &'a Path,
    buf: &'a [u8],
    walk: Walk<'a>,
    key_count: u64,
    root: u64,
    seen: u64,
    data_length: Option<u64>,
    rows_length: Option<u64>,
    done: bool,
}

impl Entries<'_> {
    fn step(&mut self) -> Result<Option<PartitionEntry>> {
        while let Some(v) = self.walk.next_node()? {
            let node = &v.node;
            if node.payload_flags == 0 {
                // A leaf with neither payload nor children stands for nothing; Cassandra
                // writes one only as the root of an empty index.
                if node.children.is_empty() && !(node.pos == self.root && self.key_count == 0) {
                    return Err(FormatError::corrupt(
                        self.file,
                        Some(node.pos),
                        "trie leaf without a payload",
                    ));
                }
                continue;
            }
            let len = payload_len(node.payload_flags);
            let p = trie::payload_bytes(self.file, self.buf, node, len)?;
            let (hash, pos_bytes) = if node.payload_flags >= FLAG_HAS_HASH_BYTE {
                (Some(p[0]), &p[1..])
            } else {
                (None, p)
            };
            let pos = IndexPos::from_stored(trie::read_sized_signed(pos_bytes));
            let (limit, what) = match pos {
                IndexPos::Data(p) => (self.data_length.map(|l| (p, l)), "Data.db"),
                IndexPos::Rows(p) => (self.rows_length.map(|l| (p, l)), "Rows.db"),
            };
            if let Some((p, l)) = limit {
                if p >= l {
                    return Err(FormatError::corrupt(
                        self.file,
                        Some(node.payload_pos),
                        format!("partition position {p} is past the end of {what} ({l} bytes)"),
                    ));
                }
            }
            self.seen += 1;
            if self.seen > self.key_count {
                return Err(FormatError::corrupt(
                    self.file,
                    Some(node.pos),
                    format!(
                        "trie holds more partitions than the footer's key count {}",
                        self.key_count
                    ),
                ));
            }
            return Ok(Some(PartitionEntry {
                prefix: v.path,
                hash,
                pos,
            }));
        }
        if self.seen != self.key_count {
            return Err(FormatError::corrupt(
                self.file,
                Some(self.root),
                format!(
                    "trie holds {} partitions, the footer says {}",
                    self.seen, self.key_count
                ),
            ));
        }
        Ok(None)
    }
}

impl Iterator for Entries<'_> {
    type Item = Result<PartitionEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The trie payload `PartitionIndex.PartitionIndexSerializer` writes: flags
/// `8 + (size - 1)`, the hash byte, then `size` bytes of the signed position.
#[derive(Debug, Clone, Copy)]
struct PartitionPayload {
    hash: u8,
    stored: i64,
}

impl Payload for PartitionPayload {
    fn flags(&self) -> u8 {
        FLAG_HAS_HASH_BYTE + (trie::non_zero_size(self.stored) as u8 - 1)
    }
    fn size(&self) -> usize {
        1 + trie::non_zero_size(self.stored)
    }
    fn write(&self, out: &mut Vec<u8>) {
        out.push(self.hash);
        trie::write_sized(out, self.stored as u64, trie::non_zero_size(self.stored));
    }
}

/// Writes a Partitions.db as `PartitionIndexBuilder` does: each key is held back until
/// the next one arrives, then added to the trie cut just past the first byte where it
/// differs from either neighbour; the last key is added by `finish`.
///
/// `add` takes a key's byte-comparable form *or any prefix of it that keeps its first
/// difference from both neighbours* — such as the prefixes a parent's Partitions.db
/// stores: the cut points computed from those are the same (`diffPoint` of two prefixes
/// that each include their first difference equals that of the full keys), so a child's
/// index can be built from its parent's trie alone.
pub struct PartitionIndexWriter<W: Write> {
    trie: TrieWriter<PartitionPayload, W>,
    last: Option<(Vec<u8>, PartitionPayload)>,
    last_diff_point: usize,
}

impl<W: Write> PartitionIndexWriter<W> {
    pub fn new(out: W) -> Self {
        PartitionIndexWriter {
            trie: TrieWriter::new(out, 0),
            last: None,
            last_diff_point: 0,
        }
    }

    /// `PartitionIndexBuilder.addEntry` for a key's byte-comparable form (or a stored
    /// prefix of it), its hash byte and where it points. Keys must strictly increase.
    pub fn add(&mut self, comparable: &[u8], hash: u8, pos: IndexPos) -> io::Result<()> {
        let payload = PartitionPayload {
            hash,
            stored: pos.to_stored(),
        };
        if let Some((last, _)) = &self.last {
            // Checked here, not only when the held-back key reaches the trie.
            if comparable <= last.as_slice() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("partition keys must strictly increase: {comparable:02x?} after {last:02x?}"),
                ));
            }
        }
        if let Some((last, last_payload)) = self.last.take() {
            let diff = keys::diff_point(&last, comparable);
            let cut = diff.max(self.last_diff_point).min(last.len());
            self.trie.add(&last[..cut], last_payload)?;
            self.last_diff_point = diff;
        } else {
            self.last_diff_point = 0;
        }
        self.last = Some((comparable.to_vec(), payload));
        Ok(())
    }

    /// `add` for a raw partition key: computes its byte-comparable form and hash byte.
    pub fn add_key(
        &mut self,
        partitioner: Partitioner,
        key: &[u8],
        pos: IndexPos,
    ) -> io::Result<()> {
        let comparable = keys::decorated_key(partitioner, key).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                format!("no byte-comparable key encoding for {partitioner:?}"),
            )
        })?;
        self.add(&comparable, keys::hash_byte(key), pos)
    }

    /// `PartitionIndexBuilder.complete`: adds the held-back key, completes the trie, then
    /// writes the first and last raw keys and the footer. `first_last` is required when
    /// keys were added and ignored otherwise (an empty index stores two empty keys).
    pub fn finish(mut self, first_last: Option<(&[u8], &[u8])>) -> io::Result<W> {
        if let Some((last, payload)) = self.last.take() {
            let cut = self.last_diff_point.min(last.len());
            self.trie.add(&last[..cut], payload)?;
        }
        let done = self.trie.finish()?;
        let mut out = done.out;
        let mut tail = Vec::new();
        let (first, last) = match (done.count, first_last) {
            (0, _) => (&[][..], &[][..]),
            (_, Some(fl)) => fl,
            (_, None) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "Partitions.db with keys needs its first and last keys",
                ))
            }
        };
        for k in [first, last] {
            let n = u16::try_from(k.len()).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "partition key longer than 65535 bytes",
                )
            })?;
            tail.extend_from_slice(&n.to_be_bytes());
            tail.extend_from_slice(k);
        }
        // The trie ends with its root, so the keys start where it stopped.
        tail.extend_from_slice(&(done.end as i64).to_be_bytes());
        tail.extend_from_slice(&(done.count as i64).to_be_bytes());
        tail.extend_from_slice(&(done.root as i64).to_be_bytes());
        out.write_all(&tail)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(n: u32) -> (Vec<u8>, Vec<(Vec<u8>, IndexPos)>) {
        let mut keys: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
            .map(|i| {
                let k = format!("key-{i}").into_bytes();
                (keys::decorated_key(Partitioner::Murmur3, &k).unwrap(), k)
            })
            .collect();
        keys.sort();
        let mut w = PartitionIndexWriter::new(Vec::new());
        let mut want = Vec::new();
        for (i, (c, k)) in keys.iter().enumerate() {
            let pos = if i % 3 == 0 {
                IndexPos::Rows(i as u64 * 40)
            } else {
                IndexPos::Data(i as u64 * 1000)
            };
            w.add(c, keys::hash_byte(k), pos).unwrap();
            want.push((c.clone(), pos));
        }
        let first = keys.first().map(|k| k.1.clone()).unwrap_or_default();
        let last = keys.last().map(|k| k.1.clone()).unwrap_or_default();
        (w.finish(Some((&first, &last))).unwrap(), want)
    }

    #[test]
    fn partitions_round_trip_over_many_pages() {
        let file = Path::new("Partitions.db");
        for n in [0u32, 1, 2, 300, 20_000] {
            let (bytes, want) = build(n);
            let index = PartitionIndex::parse(file, &bytes).unwrap();
            assert_eq!(index.footer().key_count, n as u64);
            assert_eq!(index.root_end().unwrap(), index.footer().first_key_pos);
            let got: Vec<_> = index.entries().collect::<Result<_>>().unwrap();
            assert_eq!(got.len(), want.len());
            for (g, (full, pos)) in got.iter().zip(&want) {
                assert!(full.starts_with(&g.prefix), "{n}");
                assert_eq!(g.pos, *pos);
            }
            if n == 20_000 {
                assert!(bytes.len() > 8 * 4096, "a multi-page trie: {}", bytes.len());
            }
            // Rebuilding from the stored prefixes gives the same bytes.
            let mut w = PartitionIndexWriter::new(Vec::new());
            for g in &got {
                w.add(&g.prefix, g.hash.unwrap(), g.pos).unwrap();
            }
            let f = index.footer();
            let again = w.finish(Some((&f.first_key, &f.last_key))).unwrap();
            assert_eq!(again, bytes, "{n}");
        }
    }

    /// xorshift64: a deterministic generator for the randomised tests.
    fn next(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    /// `n` keys in the trie's order as (byte-comparable form, raw key): Murmur3 keys, or
    /// ByteOrdered ones sharing long prefixes (deep tries, long stored prefixes).
    fn sorted_keys(partitioner: Partitioner, n: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut keys: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
            .map(|i| {
                let k = match partitioner {
                    Partitioner::ByteOrdered => format!("user:{:07}", i * 7 % 1_000_003),
                    _ => format!("key-{i}"),
                }
                .into_bytes();
                (keys::decorated_key(partitioner, &k).unwrap(), k)
            })
            .collect();
        keys.sort();
        keys.dedup_by(|a, b| a.0 == b.0);
        keys
    }

    /// The trie of `keys` (from `sorted_keys`), each at `pos(i)`, as the parent's Partitions.db.
    fn trie_of(keys: &[(Vec<u8>, Vec<u8>)], pos: impl Fn(usize) -> IndexPos) -> Vec<u8> {
        let mut w = PartitionIndexWriter::new(Vec::new());
        for (i, (c, k)) in keys.iter().enumerate() {
            w.add(c, keys::hash_byte(k), pos(i)).unwrap();
        }
        w.finish(Some((&keys[0].1, &keys[keys.len() - 1].1)))
            .unwrap()
    }

    /// A random bound: a Murmur3 token bound (half the time, for Murmur3), else a key of
    /// the table cut anywhere (equal to a stored prefix, inside one, or past a whole key).
    fn random_bound(
        partitioner: Partitioner,
        keys: &[(Vec<u8>, Vec<u8>)],
        seed: &mut u64,
    ) -> Vec<u8> {
        let r = next(seed);
        if partitioner == Partitioner::Murmur3 && r.is_multiple_of(2) {
            keys::murmur3_token_bound(next(seed) as i64).to_vec()
        } else {
            let k = &keys[(r % keys.len() as u64) as usize].0;
            let cut = 1 + (next(seed) % k.len() as u64) as usize;
            k[..cut].to_vec()
        }
    }

    /// A child's trie built from its parent's stored prefixes, with only its first and
    /// last key (and any fillers before them) in full, is byte for byte the trie built
    /// from every full key: interior keys keep their neighbours, so their prefixes; the
    /// split needs no key of Data.db but the boundary ones (bti-format.md §1.5).
    #[test]
    fn partitions_child_trie_from_parent_prefixes_is_the_full_key_trie() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for partitioner in [Partitioner::Murmur3, Partitioner::ByteOrdered] {
            let keys = sorted_keys(partitioner, 20_000);
            let n = keys.len();
            let parent = trie_of(&keys, |i| IndexPos::Data(i as u64 * 1000));
            let index = PartitionIndex::parse(Path::new("Partitions.db"), &parent).unwrap();
            let entries: Vec<_> = index.entries().collect::<Result<_>>().unwrap();
            assert_eq!(entries.len(), n);
            let mut ranges = vec![(0, n), (0, 1), (n - 1, n), (0, 2), (n - 2, n)];
            for _ in 0..150 {
                let a = (next(&mut seed) % n as u64) as usize;
                let len = match next(&mut seed) % 4 {
                    0 => 1,
                    1 => 2,
                    _ => 1 + (next(&mut seed) % (n - a) as u64) as usize,
                };
                ranges.push((a, (a + len).min(n)));
            }
            for (a, b) in ranges {
                // Fillers lead a child and sort before its first key: any earlier keys.
                let fillers = a.min((next(&mut seed) % 3) as usize);
                let rebased = |i: usize| IndexPos::Data((i + fillers - a) as u64 * 1000);
                let first_raw = &keys[a - fillers].1;
                let last_raw = &keys[b - 1].1;
                let mut full = PartitionIndexWriter::new(Vec::new());
                let mut derived = PartitionIndexWriter::new(Vec::new());
                for (j, (c, k)) in keys[a - fillers..a].iter().enumerate() {
                    let p = IndexPos::Data(j as u64 * 1000);
                    full.add(c, keys::hash_byte(k), p).unwrap();
                    derived.add(c, keys::hash_byte(k), p).unwrap();
                }
                for i in a..b {
                    let (c, k) = &keys[i];
                    full.add(c, keys::hash_byte(k), rebased(i)).unwrap();
                    let e = &entries[i];
                    let stored = if i == a || i == b - 1 { c } else { &e.prefix };
                    derived.add(stored, e.hash.unwrap(), rebased(i)).unwrap();
                }
                let full = full.finish(Some((first_raw, last_raw))).unwrap();
                let derived = derived.finish(Some((first_raw, last_raw))).unwrap();
                assert!(
                    full == derived,
                    "{partitioner:?} child [{a}, {b}) with {fillers} fillers: the trie from prefixes differs"
                );
            }
        }
    }

    /// `keys::prefix_order` on every stored prefix agrees with the full key wherever it
    /// answers, and leaves at most one entry undecided per bound (Murmur3 token bounds
    /// and truncated keys of both partitioners).
    #[test]
    fn partitions_prefix_order_decides_all_but_one_entry() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for partitioner in [Partitioner::Murmur3, Partitioner::ByteOrdered] {
            let keys = sorted_keys(partitioner, 5_000);
            let bytes = trie_of(&keys, |i| IndexPos::Data(i as u64));
            let index = PartitionIndex::parse(Path::new("Partitions.db"), &bytes).unwrap();
            let entries: Vec<_> = index.entries().collect::<Result<_>>().unwrap();
            let mut bounds: Vec<Vec<u8>> = Vec::new();
            for _ in 0..200 {
                bounds.push(random_bound(partitioner, &keys, &mut seed));
            }
            bounds.push(keys::murmur3_token_bound(i64::MIN).to_vec());
            bounds.push(keys::murmur3_token_bound(i64::MAX).to_vec());
            let mut undecided_total = 0;
            for b in &bounds {
                let mut undecided = 0;
                for (e, (full, _)) in entries.iter().zip(&keys) {
                    let truth = full[..full.len().min(b.len())].cmp(b.as_slice());
                    match keys::prefix_order(&e.prefix, b) {
                        Some(o) => assert_eq!(o, truth, "{partitioner:?} bound {b:02x?}"),
                        None => undecided += 1,
                    }
                }
                assert!(
                    undecided <= 1,
                    "{partitioner:?} bound {b:02x?}: {undecided}"
                );
                undecided_total += undecided;
            }
            eprintln!(
                "{partitioner:?}: {undecided_total} undecided entries over {} bounds",
                bounds.len()
            );
        }
    }

    /// `cuts_after` finds, for sorted bounds, the first partition after each (as the full
    /// keys say), asking for at most one full key per bound.
    #[test]
    fn partitions_cuts_after_reads_one_key_per_bound_at_most() {
        let mut seed = 0x1234_5678_9ABC_DEF1u64;
        for partitioner in [Partitioner::Murmur3, Partitioner::ByteOrdered] {
            let keys = sorted_keys(partitioner, 8_000);
            let bytes = trie_of(&keys, |i| IndexPos::Data(i as u64));
            let index = PartitionIndex::parse(Path::new("Partitions.db"), &bytes).unwrap();
            for round in 0..40 {
                let mut bounds: Vec<Vec<u8>> = (0..1 + round % 9)
                    .map(|_| random_bound(partitioner, &keys, &mut seed))
                    .collect();
                if round == 0 {
                    bounds = vec![vec![0x00], vec![0xFF; 12]];
                }
                bounds.sort();
                bounds.dedup_by(|later, earlier| later.starts_with(earlier));
                let refs: Vec<&[u8]> = bounds.iter().map(|b| b.as_slice()).collect();
                let mut asked = 0;
                let got = index
                    .cuts_after(&refs, |i, e| {
                        asked += 1;
                        assert!(keys[i as usize].0.starts_with(&e.prefix));
                        Ok(keys[i as usize].0.clone())
                    })
                    .unwrap();
                let want: Vec<u64> = bounds
                    .iter()
                    .map(|b| {
                        keys.iter()
                            .position(|(c, _)| c[..c.len().min(b.len())] > b[..])
                            .unwrap_or(keys.len()) as u64
                    })
                    .collect();
                assert_eq!(got, want, "{partitioner:?} bounds {bounds:02x?}");
                assert!(
                    asked <= bounds.len(),
                    "{asked} keys for {} bounds",
                    bounds.len()
                );
            }
        }
        let (bytes, _) = build(10);
        let index = PartitionIndex::parse(Path::new("Partitions.db"), &bytes).unwrap();
        assert!(index
            .cuts_after(&[&[2u8][..], &[1u8][..]], |_, _| Ok(Vec::new()))
            .is_err());
        assert!(index
            .cuts_after(&[&[0x40u8][..], &[0x40u8, 1][..]], |_, _| Ok(Vec::new()))
            .is_err());
    }

    fn walk_all(bytes: &[u8]) -> Result<usize> {
        let index = PartitionIndex::parse(Path::new("Partitions.db"), bytes)?;
        let mut n = 0;
        for e in index.entries() {
            e?;
            n += 1;
        }
        Ok(n)
    }

    #[test]
    fn partitions_corruption_is_a_typed_error_never_a_panic() {
        let (bytes, _) = build(300);
        let len = bytes.len();
        // Truncated anywhere: an error, never a panic.
        for cut in 0..len {
            assert!(walk_all(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // Root pointer past the trie region.
        let mut bad = bytes.clone();
        bad[len - 8..].copy_from_slice(&(len as i64).to_be_bytes());
        let e = walk_all(&bad).unwrap_err();
        assert!(e.to_string().contains("footer root"), "{e}");
        assert!(e.to_string().contains("Partitions.db"), "{e}");
        // firstKeyPos outside the file.
        let mut bad = bytes.clone();
        bad[len - 24..len - 16].copy_from_slice(&(-5i64).to_be_bytes());
        assert_eq!(walk_all(&bad).unwrap_err().kind(), "corrupt");
        // Key count off by one.
        let mut bad = bytes.clone();
        bad[len - 16..len - 8].copy_from_slice(&299i64.to_be_bytes());
        let e = walk_all(&bad).unwrap_err();
        assert!(e.to_string().contains("key count"), "{e}");
        // Every single-byte change of the file: typed error or a clean walk.
        for i in 0..len {
            for x in [0x00u8, 0xFF, 0x5A] {
                let mut bad = bytes.clone();
                bad[i] ^= x | 1;
                let _ = walk_all(&bad);
            }
        }
    }

    #[test]
    fn partitions_out_of_range_child_pointer_is_corrupt() {
        // Root: Single8 (ordinal 2) at offset 0 pointing 9 bytes back: before the file.
        let mut bytes = vec![0x20, 0x41, 0x09];
        let first_key_pos = bytes.len() as i64;
        bytes.extend_from_slice(&[0, 1, b'a', 0, 1, b'a']);
        for v in [first_key_pos, 1, 0] {
            bytes.extend_from_slice(&v.to_be_bytes());
        }
        let e = walk_all(&bytes).unwrap_err();
        assert_eq!(e.kind(), "corrupt");
        assert!(e.to_string().contains("child pointer"), "{e}");
    }

    #[test]
    fn partitions_writer_refuses_unsorted_keys() {
        let mut w = PartitionIndexWriter::new(Vec::new());
        w.add(b"b", 0, IndexPos::Data(0)).unwrap();
        w.add(b"c", 0, IndexPos::Data(1)).unwrap();
        assert!(w.add(b"a", 0, IndexPos::Data(2)).is_err());
    }
}
