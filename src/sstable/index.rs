//! Index.db, the BIG primary index (`io/sstable/format/big/RowIndexEntry.java`).
//!
//! A plain concatenation of one entry per partition, in token order:
//! u16 key length, key, **unsigned vint** Data.db position (uncompressed), unsigned vint
//! size `S` of the promoted index, then `S` bytes. The promoted index is relative to the
//! partition start (`SortedTablePartitionWriter`), so a split copies it verbatim and only
//! rebases the position. The size field excludes the position, so a position whose vint
//! changes length moves later entries but never changes `S`.
//!
//! The reader streams: it keeps one buffer (grown only for an entry larger than it) and
//! hands out borrowed entries, so memory does not depend on the number of partitions.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::bti::scan::RowIndex;
use super::bytes::Put;
use super::error::{FormatError, Location, Result};
use super::vint;

/// One entry, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntryRef<'a> {
    pub key: &'a [u8],
    /// Uncompressed Data.db offset of the partition's first byte (its key length).
    pub position: u64,
    /// Promoted index bytes (empty when the partition is not indexed).
    pub promoted_index: &'a [u8],
    /// Offset of this entry in Index.db (for a BTI partition, its Data.db position:
    /// `scan::PartitionReader`).
    pub index_offset: u64,
    /// A BTI partition's row index (Rows.db); BIG keeps it in `promoted_index`.
    pub row_index: Option<&'a RowIndex>,
    /// A BTI partition as Partitions.db stores it, from a trie-only scan
    /// (`bti::scan::KeyMode::AtBounds`): then `key` is empty unless it was read (a Rows.db
    /// entry holds it; a prefix that cannot place the key against a bound reads it).
    pub prefix: Option<TriePrefix<'a>>,
}

/// What Partitions.db stores of a partition: the shortest prefix of its byte-comparable key
/// that tells it from its neighbours, and its filter hash byte (`PartitionIndex.Payload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriePrefix<'a> {
    pub comparable: &'a [u8],
    pub hash: u8,
}

impl IndexEntryRef<'_> {
    pub fn to_owned(&self) -> IndexEntry {
        IndexEntry {
            key: self.key.to_vec(),
            position: self.position,
            promoted_index: self.promoted_index.to_vec(),
            index_offset: self.index_offset,
            row_index: self.row_index.cloned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub key: Vec<u8>,
    pub position: u64,
    pub promoted_index: Vec<u8>,
    pub index_offset: u64,
    pub row_index: Option<RowIndex>,
}

const DEFAULT_BUFFER: usize = 256 * 1024;

pub struct IndexReader<R> {
    file: PathBuf,
    src: R,
    /// Total Index.db length, so that a corrupt length is reported, not allocated.
    file_len: u64,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// File offset of `buf[start]`.
    offset: u64,
    src_done: bool,
    /// Positions must stay below this (the Data.db logical length), if known.
    data_length: Option<u64>,
    last_position: Option<u64>,
    entries: u64,
}

impl IndexReader<File> {
    pub fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(|e| FormatError::io(path, e))?;
        let len = f.metadata().map_err(|e| FormatError::io(path, e))?.len();
        Ok(IndexReader::new(path, f, len))
    }

    /// Reads from `offset`, which must be where an entry starts (a split plan records
    /// where each child's entries begin).
    pub fn open_at(path: &Path, offset: u64) -> Result<Self> {
        use std::io::{Seek, SeekFrom};
        let mut f = File::open(path).map_err(|e| FormatError::io(path, e))?;
        let len = f.metadata().map_err(|e| FormatError::io(path, e))?.len();
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| FormatError::io(path, e))?;
        let mut r = IndexReader::new(path, f, len);
        r.offset = offset;
        Ok(r)
    }
}

/// A `Read` over a shared file by `pread` from a position: point reads of Index.db that
/// neither move a shared cursor nor open the file again.
pub struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.read_at(out, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<'a> IndexReader<ReadAt<'a>> {
    /// Reads `file` (of `file_len` bytes) from `offset`, which must be where an entry
    /// starts, through a `buffer`-byte buffer (grown only for an entry larger than it).
    pub fn at(path: &Path, file: &'a File, file_len: u64, offset: u64, buffer: usize) -> Self {
        // Sized once: `new`'s default buffer would be allocated (and zeroed) for nothing, at
        // every one of a sampled plan's probes.
        let mut r = IndexReader::with_buffer(path, ReadAt { file, pos: offset }, file_len, buffer);
        r.offset = offset;
        r
    }
}

impl<'b> IndexReader<&'b [u8]> {
    pub fn from_bytes(path: &Path, bytes: &'b [u8]) -> Self {
        IndexReader::new(path, bytes, bytes.len() as u64)
    }
}

impl<R: Read> IndexReader<R> {
    pub fn new(path: &Path, src: R, file_len: u64) -> Self {
        let buffer = DEFAULT_BUFFER.min(file_len as usize);
        IndexReader::with_buffer(path, src, file_len, buffer)
    }

    /// `new` with a `buffer`-byte buffer (at least 64; grown only for a larger entry).
    fn with_buffer(path: &Path, src: R, file_len: u64, buffer: usize) -> Self {
        IndexReader {
            file: path.to_path_buf(),
            src,
            file_len,
            buf: vec![0; buffer.max(64)],
            start: 0,
            end: 0,
            offset: 0,
            src_done: false,
            data_length: None,
            last_position: None,
            entries: 0,
        }
    }

    /// Every position must be below `data_length` (the Data.db logical length).
    pub fn with_data_length(mut self, data_length: u64) -> Self {
        self.data_length = Some(data_length);
        self
    }

    pub fn entries_read(&self) -> u64 {
        self.entries
    }

    /// Index.db offset of the next entry (the end of the last one read).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn corrupt(&self, offset: u64, what: String) -> FormatError {
        FormatError::corrupt(&self.file, Some(offset), what)
    }

    /// Moves unread bytes to the front and reads more; grows the buffer to `need` if an
    /// entry is larger than it.
    fn fill(&mut self, need: usize) -> Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if need > self.buf.len() {
            self.buf.resize(need.next_power_of_two(), 0);
        }
        while self.end < need && !self.src_done {
            let n = self
                .src
                .read(&mut self.buf[self.end..])
                .map_err(|e| FormatError::io(&self.file, e))?;
            if n == 0 {
                self.src_done = true;
            }
            self.end += n;
        }
        Ok(())
    }

    fn truncated(&self, field: &'static str, needed: usize) -> FormatError {
        FormatError::Truncated {
            loc: Location {
                file: self.file.clone(),
                offset: Some(self.offset),
            },
            field,
            needed: needed as u64,
            available: (self.end - self.start) as u64,
        }
    }

    /// Parses the entry at `buf[start..end]`: Ok(Some(len, key range, position, promoted
    /// range)) or Ok(None) when more bytes are needed (with how many).
    fn parse_at(&self) -> Result<Result<ParsedEntry, (usize, &'static str)>> {
        let b = &self.buf[self.start..self.end];
        if b.len() < 2 {
            return Ok(Err((2, "partition key length")));
        }
        let klen = u16::from_be_bytes([b[0], b[1]]) as usize;
        let mut p = 2 + klen;
        if b.len() < p {
            return Ok(Err((p, "partition key")));
        }
        let (position, n) = match vint::decode_unsigned(&b[p..]) {
            Ok(v) => v,
            Err(vint::VintError::Truncated { needed }) => {
                return Ok(Err((p + needed, "partition position")))
            }
        };
        p += n;
        let (size, n) = match vint::decode_unsigned(&b[p..]) {
            Ok(v) => v,
            Err(vint::VintError::Truncated { needed }) => {
                return Ok(Err((p + needed, "promoted index size")))
            }
        };
        let size_at = p;
        p += n;
        // Checked twice: a size near u64::MAX must be reported, not overflow.
        let end = (p as u64).checked_add(size).filter(|e| {
            self.offset
                .checked_add(*e)
                .is_some_and(|x| x <= self.file_len)
        });
        let Some(end) = end else {
            return Err(self.corrupt(
                self.offset + size_at as u64,
                format!(
                    "promoted index size {size} runs past the end of Index.db ({} bytes)",
                    self.file_len
                ),
            ));
        };
        let end = end as usize;
        if b.len() < end {
            return Ok(Err((end, "promoted index")));
        }
        Ok(Ok(ParsedEntry {
            len: end,
            key: 2..2 + klen,
            position,
            promoted: p..end,
        }))
    }

    /// The next entry, or `None` at the end of Index.db.
    pub fn next_entry(&mut self) -> Result<Option<IndexEntryRef<'_>>> {
        if self.start == self.end {
            self.fill(1)?;
            if self.start == self.end {
                return Ok(None);
            }
        }
        let parsed = loop {
            match self.parse_at()? {
                Ok(p) => break p,
                Err((need, field)) => {
                    let had = self.end - self.start;
                    self.fill(need)?;
                    if self.end - self.start == had && self.src_done {
                        return Err(self.truncated(field, need));
                    }
                }
            }
        };
        let entry_offset = self.offset;
        if let Some(dl) = self.data_length {
            if parsed.position >= dl {
                return Err(self.corrupt(
                    entry_offset,
                    format!(
                        "partition position {} is not below the Data.db length {dl}",
                        parsed.position
                    ),
                ));
            }
        }
        if let Some(prev) = self.last_position {
            if parsed.position <= prev {
                return Err(self.corrupt(
                    entry_offset,
                    format!(
                        "partition position {} does not follow the previous one ({prev}): partitions are contiguous and in order",
                        parsed.position
                    ),
                ));
            }
        }
        self.last_position = Some(parsed.position);
        self.entries += 1;
        let s = self.start;
        self.start += parsed.len;
        self.offset += parsed.len as u64;
        let b = &self.buf[s..s + parsed.len];
        Ok(Some(IndexEntryRef {
            prefix: None,
            key: &b[parsed.key],
            position: parsed.position,
            promoted_index: &b[parsed.promoted],
            index_offset: entry_offset,
            row_index: None,
        }))
    }
}

struct ParsedEntry {
    len: usize,
    key: std::ops::Range<usize>,
    position: u64,
    promoted: std::ops::Range<usize>,
}

/// Writes Index.db entries, rebasing positions by `base` (the uncompressed offset that
/// becomes position 0 in the output).
pub struct IndexWriter<W: Write> {
    out: W,
    base: u64,
    offset: u64,
    scratch: Vec<u8>,
}

impl<W: Write> IndexWriter<W> {
    pub fn new(out: W, base: u64) -> Self {
        IndexWriter {
            out,
            base,
            offset: 0,
            scratch: Vec::with_capacity(256),
        }
    }

    /// Appends one entry; returns its offset in the new Index.db (for Summary.db).
    pub fn append(
        &mut self,
        key: &[u8],
        position: u64,
        promoted_index: &[u8],
    ) -> std::io::Result<u64> {
        let position = position.checked_sub(self.base).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "position {position} is before the rebase point {}",
                    self.base
                ),
            )
        })?;
        let key_len = u16::try_from(key.len()).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "partition key longer than 65535 bytes",
            )
        })?;
        self.scratch.clear();
        self.scratch.put_u16(key_len);
        self.scratch.extend_from_slice(key);
        self.scratch.put_uvint(position);
        self.scratch.put_uvint(promoted_index.len() as u64);
        self.out.write_all(&self.scratch)?;
        self.out.write_all(promoted_index)?;
        let at = self.offset;
        self.offset += (self.scratch.len() + promoted_index.len()) as u64;
        Ok(at)
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.offset
    }

    pub fn is_empty(&self) -> bool {
        self.offset == 0
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(entries: &[(&[u8], u64, &[u8])]) -> Vec<u8> {
        let mut w = IndexWriter::new(Vec::new(), 0);
        for (k, p, pi) in entries {
            w.append(k, *p, pi).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn streams_with_a_tiny_buffer() {
        let big = vec![7u8; 1000];
        let bytes = build(&[(b"a", 0, b""), (b"bb", 200, &big), (b"ccc", 100_000, b"xy")]);
        // A reader over a byte-at-a-time source exercises every refill path.
        struct OneByte<'a>(&'a [u8]);
        impl Read for OneByte<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                if self.0.is_empty() || out.is_empty() {
                    return Ok(0);
                }
                out[0] = self.0[0];
                self.0 = &self.0[1..];
                Ok(1)
            }
        }
        let mut r = IndexReader::new(Path::new("i"), OneByte(&bytes), bytes.len() as u64);
        let mut got = Vec::new();
        while let Some(e) = r.next_entry().unwrap() {
            got.push(e.to_owned());
        }
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].promoted_index, big);
        assert_eq!(got[2].position, 100_000);
        assert_eq!(
            got[2].index_offset,
            (bytes.len() - 2 - 3 - 3 - 1 - 2) as u64
        );
    }

    #[test]
    fn rebase_and_round_trip() {
        let bytes = build(&[(b"a", 70_000, b"p"), (b"b", 70_100, b"")]);
        let mut r = IndexReader::from_bytes(Path::new("i"), &bytes);
        let mut w = IndexWriter::new(Vec::new(), 65_536);
        while let Some(e) = r.next_entry().unwrap() {
            w.append(e.key, e.position, e.promoted_index).unwrap();
        }
        let out = w.finish().unwrap();
        let mut r = IndexReader::from_bytes(Path::new("i"), &out);
        assert_eq!(r.next_entry().unwrap().unwrap().position, 70_000 - 65_536);
    }

    #[test]
    fn huge_promoted_index_size_is_corrupt_not_overflow() {
        // Found by fuzz/fuzz_targets/index.rs: a second entry whose promoted index size
        // is just below u64::MAX overflowed `offset + end` instead of being reported.
        let mut bytes = build(&[(b"a", 0, b"")]);
        assert_eq!(bytes.len(), 5);
        bytes.extend_from_slice(&[0, 1, b'b', 1]);
        bytes.put_uvint(u64::MAX - 13);
        let mut r = IndexReader::from_bytes(Path::new("i"), &bytes);
        r.next_entry().unwrap();
        let e = r.next_entry().unwrap_err();
        assert_eq!(e.kind(), "corrupt");
        let e = e.to_string();
        assert!(
            e.contains("offset 9") && e.contains("runs past the end of Index.db"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_offsets() {
        let bytes = build(&[(b"a", 10, b""), (b"b", 5, b"")]);
        let mut r = IndexReader::from_bytes(Path::new("i"), &bytes);
        r.next_entry().unwrap();
        let e = r.next_entry().unwrap_err().to_string();
        assert!(
            e.contains("offset 5") && e.contains("does not follow"),
            "{e}"
        );

        let bytes = build(&[(b"a", 10, b"")]);
        let mut r = IndexReader::from_bytes(Path::new("i"), &bytes).with_data_length(10);
        assert!(r
            .next_entry()
            .unwrap_err()
            .to_string()
            .contains("not below the Data.db length"));

        let mut r = IndexReader::from_bytes(Path::new("i"), &bytes[..bytes.len() - 1]);
        assert_eq!(r.next_entry().unwrap_err().kind(), "truncated");
    }
}
