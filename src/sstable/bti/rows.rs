//! Rows.db, the BTI row index: one entry per partition that has at least two row index
//! blocks (`BtiFormatPartitionWriter`, `BtiTableWriter.IndexWriter.append`).
//!
//! An entry is, in file order: the partition's row-index trie (written while the
//! partition was written), `u16 len + key` — the offset of the key is what Partitions.db
//! points to — then the trailer `TrieIndexEntry.serialize` writes:
//!
//! ```text
//! uvint   Data.db position of the partition
//! vint    trie root − (offset just after the key)
//! uvint32 row index block count
//! deletion time: 0x80 if live, else i64 markedForDeleteAt + u32 localDeletionTime
//! ```
//!
//! The trie maps block separators (byte-comparable clusterings; the first is empty) to
//! the block's offset *relative to the partition start* (`pb & 7` bytes, signed) and,
//! with flag 8, the open range tombstone at the block start
//! (`RowIndexReader.readPayload`). Only the trailer's Data.db position is absolute.

use std::io::{self, Write};
use std::path::Path;

use super::super::bytes::{Put, Reader};
use super::super::error::{FormatError, Result};
use super::trie::{self, Payload, TrieWriter, Walk};

/// `RowIndexReader.FLAG_OPEN_MARKER`.
const FLAG_OPEN_MARKER: u8 = 8;

/// `DeletionTime` as serialized since `oa`/`da` (`DeletionTime.Serializer` with unsigned
/// local deletion time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionTime {
    Live,
    Deleted {
        marked_for_delete_at: i64,
        local_deletion_time: u32,
    },
}

impl DeletionTime {
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self> {
        let at = r.offset();
        let flags = r.bytes(1, field)?[0];
        if flags & 0x80 != 0 {
            if flags != 0x80 {
                return Err(FormatError::corrupt(
                    r.file(),
                    Some(at),
                    format!("{field}: invalid deletion time flags {flags:#04x}"),
                ));
            }
            return Ok(DeletionTime::Live);
        }
        let rest = r.bytes(7, field)?;
        let mut mfda = flags as i64;
        for &b in rest {
            mfda = (mfda << 8) | b as i64;
        }
        let ldt = r.u32(field)?;
        Ok(DeletionTime::Deleted {
            marked_for_delete_at: mfda,
            local_deletion_time: ldt,
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        match *self {
            DeletionTime::Live => out.push(0x80),
            DeletionTime::Deleted {
                marked_for_delete_at,
                local_deletion_time,
            } => {
                out.put_i64(marked_for_delete_at);
                out.put_u32(local_deletion_time);
            }
        }
    }

    fn size(&self) -> usize {
        match self {
            DeletionTime::Live => 1,
            DeletionTime::Deleted { .. } => 12,
        }
    }
}

/// A Rows.db entry's key and trailer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowIndexEntry {
    /// Where the key starts: the offset Partitions.db stores.
    pub key_offset: u64,
    pub key: Vec<u8>,
    /// Absolute Data.db offset of the partition: the one field a split rebases.
    pub data_position: u64,
    /// Absolute Rows.db offset of the row-index trie's root.
    pub trie_root: u64,
    pub block_count: u32,
    pub deletion: DeletionTime,
    /// Where the entry ends (the next entry's trie starts here).
    pub end: u64,
}

/// Reads the entry whose key is at `key_offset`, checking that the trie root lies before
/// the key (the trie is written first) and inside the file.
pub fn read_entry(file: &Path, buf: &[u8], key_offset: u64) -> Result<RowIndexEntry> {
    if key_offset >= buf.len() as u64 {
        return Err(FormatError::corrupt(
            file,
            Some(key_offset),
            format!(
                "row index entry offset {key_offset} is past the end of the file ({} bytes)",
                buf.len()
            ),
        ));
    }
    let mut r = Reader::with_base(file, &buf[key_offset as usize..], key_offset);
    let n = r.u16("partition key length")? as usize;
    let key = r.bytes(n, "partition key")?.to_vec();
    let base = r.offset();
    let data_position = r.uvint("partition Data.db position")?;
    let delta_at = r.offset();
    let delta = r.vint("row index trie root delta")?;
    let block_count = r.uvint("row index block count")?;
    let block_count = u32::try_from(block_count).map_err(|_| {
        FormatError::corrupt(
            file,
            Some(delta_at),
            format!("row index block count {block_count} does not fit 32 bits"),
        )
    })?;
    let deletion = DeletionTime::read(&mut r, "partition deletion time")?;
    let root = base as i64 + delta;
    if delta >= 0 || root < 0 {
        return Err(FormatError::corrupt(
            file,
            Some(delta_at),
            format!(
                "row index trie root {root} (delta {delta} from {base}) must lie before the \
                 key at {key_offset}"
            ),
        ));
    }
    Ok(RowIndexEntry {
        key_offset,
        key,
        data_position,
        trie_root: root as u64,
        block_count,
        deletion,
        end: r.offset(),
    })
}

/// One row index block, as stored in the partition's trie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowBlock {
    /// The separator the block is found by (empty for the first block).
    pub separator: Vec<u8>,
    /// Offset of the block relative to the partition start.
    pub offset: u64,
    /// The range tombstone open at the block start, if any.
    pub open_marker: Option<DeletionTime>,
}

/// The blocks of an entry's trie, in separator order. `trie_start` is where the trie's
/// region begins (the end of the previous entry, or 0): nodes outside
/// `[trie_start, key_offset)` are corruption. `partition_size` is the partition's length in
/// Data.db (the next partition's position minus its own): every block starts inside it, at
/// increasing offsets, as `BtiFormatPartitionWriter` adds them while it writes the rows,
/// and the sentinel `RowIndexWriter.complete` adds last holds the end of the rows, at most
/// the partition's end — Cassandra seeks to `partition start + offset` for a slice, so an
/// offset past the partition would read another one.
pub fn read_blocks(
    file: &Path,
    buf: &[u8],
    entry: &RowIndexEntry,
    trie_start: u64,
    partition_size: u64,
) -> Result<Vec<RowBlock>> {
    let end = entry.key_offset.min(buf.len() as u64);
    // A separator is a byte-comparable clustering prefix of a row in the partition; its
    // form is at most a few times the clustering's serialized size (an empty component
    // costs Data.db two header bits, its comparable form a separator and a terminator).
    let max_depth =
        usize::try_from(partition_size.saturating_mul(8).saturating_add(64)).unwrap_or(usize::MAX);
    let mut walk = Walk::new(file, buf, entry.trie_root, trie_start..end, max_depth);
    let mut blocks: Vec<RowBlock> = Vec::new();
    while let Some(v) = walk.next_node()? {
        let node = &v.node;
        let flags = node.payload_flags;
        if flags == 0 {
            if node.children.is_empty() {
                return Err(FormatError::corrupt(
                    file,
                    Some(node.pos),
                    "row index trie leaf without a payload",
                ));
            }
            continue;
        }
        let bytes = (flags & !FLAG_OPEN_MARKER) as usize;
        let avail = trie::payload_bytes(file, buf, node, bytes)?;
        let offset = trie::read_sized_signed(avail);
        if offset < 0 {
            return Err(FormatError::corrupt(
                file,
                Some(node.payload_pos),
                format!("row index block offset {offset} is negative"),
            ));
        }
        let open_marker = if flags & FLAG_OPEN_MARKER != 0 {
            let at = node.payload_pos + bytes as u64;
            let within = &buf[at.min(node.limit) as usize..node.limit as usize];
            let mut r = Reader::with_base(file, within, at);
            Some(DeletionTime::read(&mut r, "row index open marker")?)
        } else {
            None
        };
        let offset = offset as u64;
        if offset > partition_size || blocks.last().is_some_and(|b| b.offset >= offset) {
            return Err(FormatError::corrupt(
                file,
                Some(node.payload_pos),
                format!(
                    "row index block {} of the partition at Data.db position {} starts at \
                     offset {offset}: blocks must start inside the partition ({partition_size} \
                     bytes, the sentinel at its end) after the previous block ({:?})",
                    blocks.len(),
                    entry.data_position,
                    blocks.last().map(|b| b.offset)
                ),
            ));
        }
        blocks.push(RowBlock {
            separator: v.path,
            offset,
            open_marker,
        });
    }
    Ok(blocks)
}

/// The row-index trie payload (`RowIndexReader.getSerializer`).
struct RowPayload {
    offset: u64,
    open_marker: Option<DeletionTime>,
}

impl Payload for RowPayload {
    fn flags(&self) -> u8 {
        let bytes = trie::non_zero_size(self.offset as i64) as u8;
        match self.open_marker {
            Some(d) if d != DeletionTime::Live => bytes | FLAG_OPEN_MARKER,
            _ => bytes,
        }
    }
    fn size(&self) -> usize {
        trie::non_zero_size(self.offset as i64)
            + match self.open_marker {
                Some(d) if d != DeletionTime::Live => d.size(),
                _ => 0,
            }
    }
    fn write(&self, out: &mut Vec<u8>) {
        trie::write_sized(out, self.offset, trie::non_zero_size(self.offset as i64));
        if let Some(d) = self.open_marker {
            if d != DeletionTime::Live {
                d.write(out);
            }
        }
    }
}

/// Writes Rows.db entries one after another, as `BtiFormatPartitionWriter` (the trie,
/// through the same page-aware writer as Cassandra's `RowIndexWriter`) and
/// `BtiTableWriter.IndexWriter.append` (key and trailer) do.
pub struct RowsWriter<W: Write> {
    out: Option<W>,
    pos: u64,
}

impl<W: Write> RowsWriter<W> {
    pub fn new(out: W) -> Self {
        RowsWriter {
            out: Some(out),
            pos: 0,
        }
    }

    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Appends one entry; returns the key's offset (the Partitions.db payload). `blocks`
    /// are the trie's payloads in separator order, the first with an empty separator;
    /// Cassandra adds a sentinel after the last block, so there is one payload more than
    /// `block_count`.
    pub fn append(
        &mut self,
        key: &[u8],
        data_position: u64,
        blocks: &[RowBlock],
        block_count: u32,
        deletion: DeletionTime,
    ) -> io::Result<u64> {
        let out = self
            .out
            .take()
            .ok_or_else(|| io::Error::other("Rows.db writer used after an error"))?;
        let mut trie = TrieWriter::new(out, self.pos);
        for b in blocks {
            trie.add(
                &b.separator,
                RowPayload {
                    offset: b.offset,
                    open_marker: b.open_marker,
                },
            )?;
        }
        let done = trie.finish()?;
        let mut out = done.out;
        let key_offset = done.end;
        let len = u16::try_from(key.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "partition key longer than 65535 bytes",
            )
        })?;
        let mut tail = Vec::with_capacity(key.len() + 32);
        tail.put_u16(len);
        tail.extend_from_slice(key);
        let base = key_offset + tail.len() as u64;
        tail.put_uvint(data_position);
        tail.put_vint(done.root as i64 - base as i64);
        tail.put_uvint(block_count as u64);
        deletion.write(&mut tail);
        out.write_all(&tail)?;
        self.pos = key_offset + tail.len() as u64;
        self.out = Some(out);
        Ok(key_offset)
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.out
            .take()
            .ok_or_else(|| io::Error::other("Rows.db writer used after an error"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(n: usize) -> Vec<RowBlock> {
        (0..n)
            .map(|i| RowBlock {
                separator: if i == 0 {
                    Vec::new()
                } else {
                    format!("ck{i:05}").into_bytes()
                },
                offset: 4 + i as u64 * 17_000,
                open_marker: (i % 7 == 3).then_some(DeletionTime::Deleted {
                    marked_for_delete_at: 1_700_000_000_000_000,
                    local_deletion_time: 1_700_000_000,
                }),
            })
            .collect()
    }

    #[test]
    fn rows_round_trip_small_and_multi_page_tries() {
        let file = Path::new("Rows.db");
        let mut w = RowsWriter::new(Vec::new());
        let shapes = [3usize, 1000, 14];
        let mut at = Vec::new();
        for (i, &n) in shapes.iter().enumerate() {
            let del = if i == 1 {
                DeletionTime::Deleted {
                    marked_for_delete_at: 5,
                    local_deletion_time: 6,
                }
            } else {
                DeletionTime::Live
            };
            let key = format!("pk{i}").into_bytes();
            at.push(
                w.append(&key, 1 << (20 + i), &blocks(n), n as u32 - 1, del)
                    .unwrap(),
            );
        }
        let bytes = w.finish().unwrap();
        let mut start = 0;
        for (i, &n) in shapes.iter().enumerate() {
            let e = read_entry(file, &bytes, at[i]).unwrap();
            assert_eq!(e.key, format!("pk{i}").into_bytes());
            assert_eq!(e.data_position, 1 << (20 + i));
            assert_eq!(e.block_count, n as u32 - 1);
            let got = read_blocks(file, &bytes, &e, start, 1 << 30).unwrap();
            assert_eq!(got, blocks(n));
            start = e.end;
        }
        assert_eq!(start, bytes.len() as u64);
    }

    #[test]
    fn rows_corruption_is_a_typed_error_never_a_panic() {
        let file = Path::new("Rows.db");
        let mut w = RowsWriter::new(Vec::new());
        let at = w
            .append(b"pk", 99, &blocks(40), 39, DeletionTime::Live)
            .unwrap();
        let bytes = w.finish().unwrap();
        for cut in 0..bytes.len() {
            let r = read_entry(file, &bytes[..cut], at)
                .and_then(|e| read_blocks(file, &bytes[..cut], &e, 0, 1 << 30));
            assert!(r.is_err(), "cut at {cut}");
        }
        let e = read_entry(file, &bytes, bytes.len() as u64 + 3).unwrap_err();
        assert!(e.to_string().contains("past the end"), "{e}");
        // The 40 blocks end at offset 4 + 39 × 17,000: a partition that ends before the
        // last block starts cannot hold them (the next partition's position says so).
        let e = read_entry(file, &bytes, at).unwrap();
        let last = 4 + 39 * 17_000;
        assert_eq!(read_blocks(file, &bytes, &e, 0, last).unwrap().len(), 40);
        let err = read_blocks(file, &bytes, &e, 0, last - 1).unwrap_err();
        assert_eq!(err.kind(), "corrupt");
        assert!(err.to_string().contains("inside the partition"), "{err}");
        // Blocks out of order (a later separator at an earlier offset) are refused too.
        let mut swapped = blocks(3);
        swapped[2].offset = swapped[1].offset;
        let mut w = RowsWriter::new(Vec::new());
        let at = w
            .append(b"pk", 99, &swapped, 2, DeletionTime::Live)
            .unwrap();
        let bytes = w.finish().unwrap();
        let e = read_entry(file, &bytes, at).unwrap();
        let err = read_blocks(file, &bytes, &e, 0, 1 << 30).unwrap_err();
        assert!(
            err.to_string().contains("after the previous block"),
            "{err}"
        );
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0xA5;
            let _ =
                read_entry(file, &bad, at).and_then(|e| read_blocks(file, &bad, &e, 0, 1 << 30));
        }
    }
}
