//! Reading Data.db: compressed chunk by chunk (CRC-checked, then decoded) or uncompressed.
//!
//! Only what a splitter and a checker need: the bytes at an uncompressed position (to
//! confirm that an index position starts with its partition key) and per-chunk integrity.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::compression::{Codec, CompressionInfo};
use super::error::{FormatError, Result};

pub struct DataReader {
    path: PathBuf,
    file: File,
    file_size: u64,
    compression: Option<CompressionInfo>,
    codec: Codec,
    /// The last decoded chunk: (index, uncompressed bytes).
    cached: Option<(usize, Vec<u8>)>,
    stored: Vec<u8>,
}

impl DataReader {
    pub fn open(path: &Path, compression: Option<CompressionInfo>) -> Result<DataReader> {
        let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
        let file_size = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
        if let Some(ci) = &compression {
            ci.check_data_size(path, file_size)?;
        }
        let codec = compression.as_ref().map_or(Codec::Noop, |c| c.codec());
        Ok(DataReader {
            path: path.to_path_buf(),
            file,
            file_size,
            compression,
            codec,
            cached: None,
            stored: Vec::new(),
        })
    }

    /// A second reader of the same open file (a `dup` of its descriptor, so the same inode
    /// even if the path was replaced) with its own buffers: one per thread of a parallel
    /// re-encode (`split::regrid`).
    pub fn try_clone(&self) -> Result<DataReader> {
        Ok(DataReader {
            path: self.path.clone(),
            file: self
                .file
                .try_clone()
                .map_err(|e| FormatError::io(&self.path, e))?,
            file_size: self.file_size,
            compression: self.compression.clone(),
            codec: self.codec,
            cached: None,
            stored: Vec::new(),
        })
    }

    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// Logical length: CompressionInfo's `dataLength`, or the file size when uncompressed.
    pub fn data_length(&self) -> u64 {
        self.compression
            .as_ref()
            .map_or(self.file_size, |c| c.data_length)
    }

    pub fn compression(&self) -> Option<&CompressionInfo> {
        self.compression.as_ref()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| FormatError::io(&self.path, e))
    }

    /// Reads chunk `i`'s stored payload, checks its CRC32 trailer, and decodes it.
    pub fn chunk(&mut self, i: usize) -> Result<&[u8]> {
        if self.cached.as_ref().is_some_and(|c| c.0 == i) {
            return Ok(self.cached.as_ref().map(|c| c.1.as_slice()).unwrap_or(&[]));
        }
        let ci = self.compression.as_ref().ok_or_else(|| {
            FormatError::corrupt(&self.path, None, "chunk read on an uncompressed Data.db")
        })?;
        if i >= ci.chunk_count() {
            return Err(FormatError::corrupt(
                &self.path,
                None,
                format!(
                    "chunk {i} does not exist (CompressionInfo has {})",
                    ci.chunk_count()
                ),
            ));
        }
        let (start, end) = ci.chunk_span(i, self.file_size)?;
        if end < start + 4 || end > self.file_size {
            return Err(FormatError::corrupt(
                &self.path,
                Some(start),
                format!("chunk {i} spans [{start}, {end}) which cannot hold a payload and its 4-byte CRC in a {}-byte file", self.file_size),
            ));
        }
        let len = (end - start) as usize;
        let mut stored = std::mem::take(&mut self.stored);
        stored.resize(len, 0);
        self.read_exact_at(&mut stored, start)?;
        let payload_len = len - 4;
        let crc_stored = u32::from_be_bytes([
            stored[payload_len],
            stored[payload_len + 1],
            stored[payload_len + 2],
            stored[payload_len + 3],
        ]);
        let crc = crc32fast::hash(&stored[..payload_len]);
        if crc != crc_stored {
            self.stored = stored;
            return Err(FormatError::Checksum {
                loc: super::error::Location {
                    file: self.path.clone(),
                    offset: Some(start),
                },
                what: format!("chunk {i} ({payload_len} bytes)"),
                stored: crc_stored,
                computed: crc,
            });
        }
        let chunk_length = ci.chunk_length as usize;
        let mut out = self.cached.take().map(|c| c.1).unwrap_or_default();
        if ci.is_stored_raw(payload_len) {
            // `na`+ raw chunk (`CompressedChunkReader.Standard.readChunk`: `chunk.length >=
            // maxCompressedLength` reads the stored bytes as the content, up to the
            // `chunkLength` buffer): at most chunkLength bytes of data, zero-padded to
            // maxCompressedLength (CompressedSequentialWriter).
            out.clear();
            out.extend_from_slice(&stored[..payload_len.min(chunk_length)]);
        } else {
            self.codec
                .decompress(
                    &self.path,
                    start,
                    &stored[..payload_len],
                    chunk_length,
                    &mut out,
                )
                .map_err(|e| match e {
                    // Name the chunk beside the file and offset the codec names.
                    FormatError::Corrupt { loc, what } => FormatError::Corrupt {
                        loc,
                        what: format!("chunk {i}: {what}"),
                    },
                    e => e,
                })?;
        }
        // Every chunk but the last holding data is exactly chunkLength bytes: positions map
        // to chunks by division (CompressionMetadata.chunkFor).
        let live = ci.live_chunk_count();
        if i + 1 < live && out.len() != chunk_length {
            self.stored = stored;
            return Err(FormatError::corrupt(
                &self.path,
                Some(start),
                format!("chunk {i} decodes to {} bytes; every chunk before the last must hold {chunk_length}", out.len()),
            ));
        }
        self.stored = stored;
        self.cached = Some((i, out));
        Ok(self.cached.as_ref().map(|c| c.1.as_slice()).unwrap_or(&[]))
    }

    /// `n` bytes at uncompressed `position`, which must lie below the data length.
    pub fn read_at(&mut self, position: u64, n: usize) -> Result<Vec<u8>> {
        let dl = self.data_length();
        if position.checked_add(n as u64).is_none_or(|e| e > dl) {
            return Err(FormatError::corrupt(
                &self.path,
                Some(position),
                format!("read of {n} bytes at {position} runs past the data length {dl}"),
            ));
        }
        let mut out = Vec::with_capacity(n);
        match self.compression.as_ref().map(|c| c.chunk_length as u64) {
            None => {
                out.resize(n, 0);
                self.read_exact_at(&mut out, position)?;
            }
            Some(cl) => {
                let mut pos = position;
                while out.len() < n {
                    let i = (pos / cl) as usize;
                    let within = (pos % cl) as usize;
                    let want = n - out.len();
                    let path = self.path.clone();
                    let c = self.chunk(i)?;
                    if within >= c.len() {
                        return Err(FormatError::corrupt(
                            &path,
                            Some(pos),
                            format!("uncompressed position {pos} lies past the {} bytes chunk {i} decodes to", c.len()),
                        ));
                    }
                    let take = want.min(c.len() - within);
                    out.extend_from_slice(&c[within..within + take]);
                    pos += take as u64;
                }
            }
        }
        Ok(out)
    }

    /// CRC32 of the whole file, as Digest.crc32 records it.
    pub fn file_crc32(&self, mut progress: impl FnMut(u64)) -> Result<u32> {
        let mut h = crc32fast::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0;
        while off < self.file_size {
            let n = ((self.file_size - off) as usize).min(buf.len());
            self.read_exact_at(&mut buf[..n], off)?;
            h.update(&buf[..n]);
            off += n as u64;
            progress(n as u64);
        }
        Ok(h.finalize())
    }

    /// CRC32 of each `chunk_size` block of an uncompressed Data.db (CRC.db's content).
    pub fn block_crc32s(&self, chunk_size: u32) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; chunk_size as usize];
        let mut off = 0;
        while off < self.file_size {
            let n = ((self.file_size - off) as usize).min(buf.len());
            self.read_exact_at(&mut buf[..n], off)?;
            out.push(crc32fast::hash(&buf[..n]));
            off += n as u64;
        }
        Ok(out)
    }
}
