//! Every partition of a BTI sstable in token order, with its full key — what Index.db
//! gives a BIG split in one stream. Partitions.db stores only each key's shortest unique
//! prefix (`PartitionIndexBuilder`), so the key of a partition without a row index is read
//! where `BtiTableScanner` finds it, at its start in Data.db (u16 length, key); a partition
//! with a row index has its key, Data.db position and row-index trie in Rows.db
//! (`TrieIndexEntry`). Chunks are decoded in order, one at a time (`DataReader` keeps the
//! last), so a pass reads Data.db once.
//!
//! Each key is checked against the trie that led to it: its byte-comparable form must start
//! with the stored prefix and its filter hash byte must be the stored one — a Partitions.db
//! that points at the wrong partition fails here, not in Cassandra's reads.

use std::path::{Path, PathBuf};

use super::keys;
use super::partitions::{Entries, IndexPos, PartitionEntry, PartitionIndex};
use super::rows::{self, DeletionTime, RowBlock, RowIndexEntry};
use crate::sstable::data::DataReader;
use crate::sstable::error::{FormatError, Result};
use crate::sstable::hex;
use crate::sstable::index::TriePrefix;
use crate::sstable::token::Partitioner;

/// A partition's row index, as Rows.db holds it and a child re-serializes it: the blocks
/// (offsets relative to the partition start, so they move with it unchanged), the block
/// count and the partition-level deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowIndex {
    pub blocks: Vec<RowBlock>,
    pub block_count: u32,
    pub deletion: DeletionTime,
}

/// The two BTI index files, read whole (what `PartitionScan` borrows).
pub struct BtiIndexFiles {
    pub partitions_path: PathBuf,
    pub partitions: Vec<u8>,
    pub rows_path: PathBuf,
    pub rows: Vec<u8>,
}

/// One partition of the scan.
pub struct ScannedPartition<'s> {
    /// Empty in a trie-only scan where the key was not read (`KeyMode::AtBounds`).
    pub key: &'s [u8],
    pub position: u64,
    pub row_index: Option<&'s RowIndex>,
    /// The trie's prefix and hash byte: set by a trie-only scan only.
    pub prefix: Option<TriePrefix<'s>>,
}

/// Which partition keys a scan reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum KeyMode {
    /// Every key, checked against its trie prefix and hash byte.
    #[default]
    Every,
    /// Only the keys the trie cannot stand in for: a partition is known by its stored
    /// prefix and hash byte (`TriePrefix`), and its key is read from Data.db only when the
    /// prefix cannot place it against one of these bounds (increasing byte-comparable
    /// prefixes of one length, e.g. `keys::murmur3_token_bound` of every token a cut
    /// compares with: `keys::prefix_order` is `None`) or its entry has no hash byte. A
    /// Rows.db entry carries its key and gives it either way. The trie being prefix-free,
    /// at most one partition a bound is read: a split plans and writes without reading
    /// Data.db.
    AtBounds(Vec<Vec<u8>>),
}

impl KeyMode {
    /// Whether a key stored as `prefix` must be read to be placed against the bounds.
    fn must_read(&self, prefix: &[u8]) -> bool {
        match self {
            KeyMode::Every => true,
            // A one-key trie stores an empty prefix (its root is the leaf): no token in it.
            KeyMode::AtBounds(_) if prefix.len() < 2 => true,
            KeyMode::AtBounds(bounds) => {
                // Bounds extending `prefix` follow it directly in their order.
                let i = bounds.partition_point(|b| b.as_slice() < prefix);
                bounds
                    .get(i)
                    .is_some_and(|b| keys::prefix_order(prefix, b).is_none())
            }
        }
    }
}

pub struct PartitionScan<'a> {
    files: &'a BtiIndexFiles,
    keys: &'a KeyMode,
    entries: Entries<'a>,
    data: DataReader,
    data_length: u64,
    partitioner: Partitioner,
    first_key: Vec<u8>,
    last_key: Vec<u8>,
    /// Where the previous Rows.db entry ended: the next entry's trie starts there.
    rows_end: u64,
    /// The trie's next partition, read ahead: its position is where the scan stands.
    ahead: Option<Ahead>,
    key: Vec<u8>,
    /// The current partition's trie prefix (what a trie-only scan gives for its key).
    prefix: Vec<u8>,
    row_index: Option<RowIndex>,
    count: u64,
    /// The Data.db position of the last entry read ahead: positions must strictly increase
    /// (each partition starts after the previous one, as Cassandra writes them).
    last_position: Option<u64>,
    /// The byte-comparable form of the previous partition's key, when it was read (not
    /// skipped): keys must strictly increase in the trie's order.
    prev_comparable: Option<Vec<u8>>,
}

/// A trie entry read ahead of the scan, with its Rows.db entry when it has one.
struct Ahead {
    entry: PartitionEntry,
    rows: Option<RowIndexEntry>,
    position: u64,
}

impl<'a> PartitionScan<'a> {
    pub fn new(
        files: &'a BtiIndexFiles,
        index: &PartitionIndex<'a>,
        data: DataReader,
        partitioner: Partitioner,
    ) -> Result<Self> {
        let footer = index.footer();
        let mut scan = PartitionScan {
            files,
            keys: &KeyMode::Every,
            entries: index.entries(),
            data_length: data.data_length(),
            data,
            partitioner,
            first_key: footer.first_key.clone(),
            last_key: footer.last_key.clone(),
            rows_end: 0,
            ahead: None,
            key: Vec::new(),
            prefix: Vec::new(),
            row_index: None,
            count: 0,
            last_position: None,
            prev_comparable: None,
        };
        scan.ahead = scan.read_ahead()?;
        Ok(scan)
    }

    /// Reads keys as `keys` says (`KeyMode::Every` unless set).
    pub fn with_keys(mut self, keys: &'a KeyMode) -> Self {
        self.keys = keys;
        self
    }

    fn rows_path(&self) -> &Path {
        &self.files.rows_path
    }

    fn read_ahead(&mut self) -> Result<Option<Ahead>> {
        let Some(entry) = self.entries.next().transpose()? else {
            return Ok(None);
        };
        let ahead = match entry.pos {
            IndexPos::Data(position) => Ahead {
                entry,
                rows: None,
                position,
            },
            IndexPos::Rows(at) => {
                let e = rows::read_entry(self.rows_path(), &self.files.rows, at)?;
                if e.data_position >= self.data_length {
                    return Err(FormatError::corrupt(
                        self.rows_path(),
                        Some(at),
                        format!(
                            "row index entry names Data.db position {}, past its data length {}",
                            e.data_position, self.data_length
                        ),
                    ));
                }
                Ahead {
                    entry,
                    position: e.data_position,
                    rows: Some(e),
                }
            }
        };
        // Callers size a partition as the next one's position minus its own.
        let p = ahead.position;
        if p >= self.data_length || self.last_position.is_some_and(|last| p <= last) {
            return Err(FormatError::corrupt(
                &self.files.partitions_path,
                None,
                format!(
                    "the trie's partition after {:?} is at Data.db position {p}: positions must increase and stay below the data length {}",
                    self.last_position, self.data_length
                ),
            ));
        }
        self.last_position = Some(p);
        Ok(Some(ahead))
    }

    /// The key a partition starts with in Data.db (u16 length, bytes:
    /// `PartitionIterator.readNext` reads it there).
    fn key_at(&mut self, position: u64) -> Result<Vec<u8>> {
        key_at(&mut self.data, position)
    }

    /// Data.db position of the next partition (the data length after the last): where
    /// the scan stands, as an Index.db offset says where a BIG reader stands.
    pub fn position(&self) -> u64 {
        self.ahead.as_ref().map_or(self.data_length, |a| a.position)
    }

    /// Skips, without reading their keys, the partitions that start before `position`.
    pub fn skip_to(&mut self, position: u64) -> Result<()> {
        while self.ahead.as_ref().is_some_and(|a| a.position < position) {
            if let Some(e) = self.ahead.take().and_then(|a| a.rows) {
                self.rows_end = e.end;
            }
            self.count += 1;
            self.prev_comparable = None;
            self.ahead = self.read_ahead()?;
        }
        Ok(())
    }

    /// The next partition, or `None` after the last (whose key must be the footer's).
    pub fn next_partition(&mut self) -> Result<Option<ScannedPartition<'_>>> {
        let Some(Ahead {
            entry,
            rows,
            position,
        }) = self.ahead.take()
        else {
            if self.count > 0 && self.key != self.last_key && !self.key.is_empty() {
                return Err(FormatError::corrupt(
                    &self.files.partitions_path,
                    None,
                    format!(
                        "the footer's last key {} is not the last partition's key {}",
                        hex::encode(&self.last_key),
                        hex::encode(&self.key)
                    ),
                ));
            }
            return Ok(None);
        };
        // The next partition's position bounds this one: its row index may not reach past it.
        self.ahead = self.read_ahead()?;
        let size = self.position() - position;
        let every = *self.keys == KeyMode::Every;
        match rows {
            None if every || entry.hash.is_none() || self.keys.must_read(&entry.prefix) => {
                self.row_index = None;
                self.key = self.key_at(position)?;
            }
            None => {
                // Trie-only: the prefix and hash byte stand for the key.
                self.row_index = None;
                self.key.clear();
                self.prev_comparable = None;
                self.count += 1;
                self.prefix = entry.prefix;
                return Ok(Some(ScannedPartition {
                    key: &self.key,
                    position,
                    row_index: None,
                    prefix: entry.hash.map(|hash| TriePrefix {
                        comparable: &self.prefix,
                        hash,
                    }),
                }));
            }
            Some(e) => {
                // The trailer's Data.db position must hold this key, as it does for a
                // partition without a row index (Cassandra's reads seek there). A
                // trie-only scan takes Rows.db's word for it (the trie's prefix and hash
                // byte are still checked against the key below).
                if every && self.key_at(position)? != e.key {
                    return Err(FormatError::corrupt(
                        self.rows_path(),
                        None,
                        format!(
                            "row index entry of key {} names Data.db position {position}, where another partition starts",
                            hex::encode(&e.key)
                        ),
                    ));
                }
                let blocks =
                    rows::read_blocks(self.rows_path(), &self.files.rows, &e, self.rows_end, size)?;
                self.rows_end = e.end;
                self.row_index = Some(RowIndex {
                    blocks,
                    block_count: e.block_count,
                    deletion: e.deletion,
                });
                self.key = e.key;
            }
        }
        let comparable = keys::decorated_key(self.partitioner, &self.key).ok_or_else(|| {
            FormatError::unsupported(
                &self.files.partitions_path,
                None,
                format!("no byte-comparable key encoding for {:?}", self.partitioner),
            )
        })?;
        if !comparable.starts_with(&entry.prefix)
            || entry.hash.is_some_and(|h| h != keys::hash_byte(&self.key))
        {
            return Err(FormatError::corrupt(
                &self.files.partitions_path,
                None,
                format!(
                    "partition {} (trie prefix {}, hash byte {:?}) points at Data.db position {position}, whose key {} does not match",
                    self.count,
                    hex::encode(&entry.prefix),
                    entry.hash,
                    hex::encode(&self.key)
                ),
            ));
        }
        if self
            .prev_comparable
            .as_ref()
            .is_some_and(|prev| comparable <= *prev)
        {
            return Err(FormatError::corrupt(
                &self.files.partitions_path,
                None,
                format!(
                    "partition {} (key {}) does not sort after the previous partition's key",
                    self.count,
                    hex::encode(&self.key)
                ),
            ));
        }
        self.prev_comparable = Some(comparable);
        let hash = entry.hash.unwrap_or_else(|| keys::hash_byte(&self.key));
        if self.count == 0 && self.key != self.first_key {
            return Err(FormatError::corrupt(
                &self.files.partitions_path,
                None,
                format!(
                    "the footer's first key {} is not the first partition's key {}",
                    hex::encode(&self.first_key),
                    hex::encode(&self.key)
                ),
            ));
        }
        self.count += 1;
        self.prefix = entry.prefix;
        Ok(Some(ScannedPartition {
            key: &self.key,
            position,
            row_index: self.row_index.as_ref(),
            prefix: (!every).then_some(TriePrefix {
                comparable: &self.prefix,
                hash,
            }),
        }))
    }
}

/// The key a partition starts with in Data.db (u16 length, bytes:
/// `PartitionIterator.readNext` reads it there).
pub fn key_at(data: &mut DataReader, position: u64) -> Result<Vec<u8>> {
    let n = data.read_at(position, 2)?;
    let len = u16::from_be_bytes([n[0], n[1]]) as usize;
    data.read_at(position + 2, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bti_scan_trie_only_reads_keys_its_prefix_cannot_place() {
        let bound = keys::murmur3_token_bound(0).to_vec();
        let m = KeyMode::AtBounds(vec![bound.clone()]);
        // A one-key trie's empty prefix holds no token: read, whatever the bounds.
        assert!(KeyMode::AtBounds(Vec::new()).must_read(&[]));
        assert!(m.must_read(&bound[..3]));
        assert!(!m.must_read(&[0x40, 0x00]));
        assert!(!m.must_read(&[0x40, 0x81]));
        assert!(!m.must_read(&bound));
        assert!(KeyMode::Every.must_read(&bound));
    }
}
