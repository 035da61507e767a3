//! CompressionInfo.db and the chunk codecs (`io/compress/CompressionMetadata.java`).
//!
//! Layout: compressor class (writeUTF), option count + (key, value) pairs, chunk length,
//! `maxCompressedLength` (only `na`+), uncompressed `dataLength` (int64), chunk count, and
//! one int64 file offset per chunk. In Data.db each chunk is its payload followed by a
//! big-endian CRC32 of exactly the payload bytes; the last chunk's length comes from the
//! Data.db file size (`CompressionMetadata.chunkFor`), so a Data.db must end exactly after
//! its last CRC.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::bytes::{Put, Reader};
use super::descriptor::Version;
use super::error::{FormatError, Result};

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CompressionInfo {
    pub compressor: String,
    pub options: Vec<(String, String)>,
    /// Uncompressed bytes per chunk, a power of two (`CompressedChunkReader` asserts it).
    pub chunk_length: u32,
    /// `na`+ only. Chunks whose stored length is `>=` this are stored raw.
    pub max_compressed_length: Option<u32>,
    /// Uncompressed length of Data.db: the logical end every reader respects.
    pub data_length: u64,
    #[serde(skip)]
    pub offsets: ChunkOffsets,
}

/// Offsets held in memory up to this many chunks (64 KiB); above it (a 128 MiB Data.db at
/// 16 KiB chunks) they are read from CompressionInfo.db when needed, so that memory does
/// not grow with the chunk count (8 bytes a chunk: 16 MiB for a 32 GiB parent).
pub const IN_MEMORY_CHUNKS: usize = 8192;

/// Offsets read per page of the on-demand cache (4 KiB).
const PAGE: usize = 512;

/// A table's chunk offsets, shared by every reader of it (cloning is an `Arc` clone): in
/// memory when few, else read on demand from CompressionInfo.db by `pread` — one page
/// cached for point reads, blocks streamed for runs (`iter`). Checked once in full when
/// the file is opened (`CompressionInfo::open`), so a later read only fails on I/O.
#[derive(Clone)]
pub struct ChunkOffsets(Arc<Backing>);

enum Backing {
    Memory(Vec<u64>),
    File {
        path: PathBuf,
        file: File,
        /// File offset of offset 0.
        start: u64,
        count: usize,
        last: u64,
        page: Mutex<Option<(usize, Vec<u64>)>>,
    },
}

impl Default for ChunkOffsets {
    fn default() -> ChunkOffsets {
        ChunkOffsets::from(Vec::new())
    }
}

impl From<Vec<u64>> for ChunkOffsets {
    fn from(v: Vec<u64>) -> ChunkOffsets {
        ChunkOffsets(Arc::new(Backing::Memory(v)))
    }
}

impl std::fmt::Debug for ChunkOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.0 {
            Backing::Memory(v) if v.len() <= 16 => write!(f, "{v:?}"),
            Backing::Memory(v) => write!(f, "ChunkOffsets({} in memory)", v.len()),
            Backing::File { path, count, .. } => {
                write!(f, "ChunkOffsets({count} in {})", path.display())
            }
        }
    }
}

impl PartialEq for ChunkOffsets {
    fn eq(&self, other: &ChunkOffsets) -> bool {
        self.len() == other.len()
            && self
                .iter(0, self.len() as u64)
                .zip(other.iter(0, other.len() as u64))
                .all(|(a, b)| matches!((a, b), (Ok(a), Ok(b)) if a == b))
    }
}

impl ChunkOffsets {
    pub fn len(&self) -> usize {
        match &*self.0 {
            Backing::Memory(v) => v.len(),
            Backing::File { count, .. } => *count,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether they are read from the file on demand (more than `IN_MEMORY_CHUNKS`).
    pub fn on_demand(&self) -> bool {
        matches!(&*self.0, Backing::File { .. })
    }
    pub fn last(&self) -> Option<u64> {
        match &*self.0 {
            Backing::Memory(v) => v.last().copied(),
            Backing::File { last, .. } => Some(*last),
        }
    }

    /// Offset of chunk `i`, `None` past the last chunk.
    pub fn get(&self, i: usize) -> Result<Option<u64>> {
        match &*self.0 {
            Backing::Memory(v) => Ok(v.get(i).copied()),
            Backing::File {
                path,
                file,
                start,
                count,
                page,
                ..
            } => {
                if i >= *count {
                    return Ok(None);
                }
                let p = i / PAGE;
                let mut cached = page.lock().unwrap_or_else(|e| e.into_inner());
                if cached.as_ref().is_none_or(|(q, _)| *q != p) {
                    let from = p * PAGE;
                    let n = PAGE.min(count - from);
                    let mut v = Vec::with_capacity(n);
                    read_offsets(path, file, *start, from, n, &mut v)?;
                    *cached = Some((p, v));
                }
                Ok(cached.as_ref().map(|(_, v)| v[i - p * PAGE]))
            }
        }
    }

    /// Offset of chunk `i`, which must exist.
    pub fn at(&self, i: u64) -> Result<u64> {
        self.get(i as usize)?.ok_or_else(|| {
            FormatError::corrupt(
                self.path(),
                None,
                format!("chunk {i} does not exist ({} chunks)", self.len()),
            )
        })
    }

    /// Where chunk `i` ends (its CRC included): where chunk `i+1` starts, the last one at
    /// the Data.db file size.
    pub fn end_of(&self, i: u64, data_file_size: u64) -> Result<u64> {
        Ok(self.get(i as usize + 1)?.unwrap_or(data_file_size))
    }

    fn path(&self) -> &Path {
        match &*self.0 {
            Backing::Memory(_) => Path::new("CompressionInfo.db"),
            Backing::File { path, .. } => path,
        }
    }

    /// Offsets of chunks `[from, to)` in order, streamed in blocks (never all held).
    pub fn iter(&self, from: u64, to: u64) -> OffsetsIter<'_> {
        let to = (to as usize).min(self.len());
        OffsetsIter {
            offsets: self,
            next: (from as usize).min(to),
            to,
            block: Vec::new(),
            block_start: 0,
        }
    }

    /// Offsets of chunks `[from, to)` in order, handed to `f` a block at a time: the
    /// held slice itself when they are in memory, blocks of `ITER_BLOCK` read from the file
    /// otherwise (never all held). For loops that are cheaper over a slice than an item at a
    /// time (rebasing a child's CompressionInfo.db).
    pub fn for_each_block(
        &self,
        from: u64,
        to: u64,
        mut f: impl FnMut(&[u64]) -> Result<()>,
    ) -> Result<()> {
        let to = (to as usize).min(self.len());
        let from = (from as usize).min(to);
        match &*self.0 {
            Backing::Memory(v) => {
                for block in v[from..to].chunks(ITER_BLOCK) {
                    f(block)?;
                }
                Ok(())
            }
            Backing::File {
                path, file, start, ..
            } => {
                let mut block = Vec::with_capacity(ITER_BLOCK.min(to - from));
                let mut i = from;
                while i < to {
                    let n = ITER_BLOCK.min(to - i);
                    read_offsets(path, file, *start, i, n, &mut block)?;
                    f(&block)?;
                    i += n;
                }
                Ok(())
            }
        }
    }

    /// Every offset, in memory (small tables, tests, a receiver's check).
    pub fn to_vec(&self) -> Result<Vec<u64>> {
        self.iter(0, self.len() as u64).collect()
    }
}

/// Reads offsets `[from, from + n)` of a CompressionInfo.db whose offset 0 is at `start`.
fn read_offsets(
    path: &Path,
    file: &File,
    start: u64,
    from: usize,
    n: usize,
    out: &mut Vec<u64>,
) -> Result<()> {
    let mut buf = vec![0u8; n * 8];
    file.read_exact_at(&mut buf, start + from as u64 * 8)
        .map_err(|e| FormatError::io(path, e))?;
    out.clear();
    out.extend(
        buf.chunks_exact(8)
            .map(|b| u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])),
    );
    Ok(())
}

/// Blocks of offsets read per step of an `OffsetsIter` (64 KiB).
const ITER_BLOCK: usize = 8192;

pub struct OffsetsIter<'a> {
    offsets: &'a ChunkOffsets,
    next: usize,
    to: usize,
    block: Vec<u64>,
    block_start: usize,
}

impl Iterator for OffsetsIter<'_> {
    type Item = Result<u64>;
    fn next(&mut self) -> Option<Result<u64>> {
        if self.next >= self.to {
            return None;
        }
        let i = self.next;
        self.next += 1;
        match &*self.offsets.0 {
            Backing::Memory(v) => v.get(i).copied().map(Ok),
            Backing::File {
                path, file, start, ..
            } => {
                if i < self.block_start || i >= self.block_start + self.block.len() {
                    let n = ITER_BLOCK.min(self.to - i);
                    if let Err(e) = read_offsets(path, file, *start, i, n, &mut self.block) {
                        self.next = self.to;
                        return Some(Err(e));
                    }
                    self.block_start = i;
                }
                Some(Ok(self.block[i - self.block_start]))
            }
        }
    }
}

impl CompressionInfo {
    /// Parses CompressionInfo.db held in memory (offsets in memory).
    pub fn parse(file: &Path, bytes: &[u8], version: Version) -> Result<CompressionInfo> {
        let mut r = Reader::new(file, bytes);
        let (mut ci, count) = Self::parse_header(&mut r, version)?;
        if r.remaining() != count * 8 {
            return Err(r.corrupt(format!(
                "chunk offsets: {count} chunks need {} bytes, {} remain",
                count * 8,
                r.remaining()
            )));
        }
        let mut offsets = Vec::with_capacity(count);
        let mut prev: Option<u64> = None;
        for i in 0..count {
            let at = r.offset();
            let o = r.i64("chunk offset")?;
            offsets.push(check_offset(file, i, at, o, prev)?);
            prev = Some(o as u64);
        }
        ci.offsets = offsets.into();
        Ok(ci)
    }

    /// Opens CompressionInfo.db at `path`: the header read, every offset checked in one
    /// streamed pass, and the offsets kept in memory only when there are at most
    /// `IN_MEMORY_CHUNKS` (else read on demand from the file, which stays open).
    pub fn open(path: &Path, version: Version) -> Result<CompressionInfo> {
        let file = File::open(path).map_err(|e| FormatError::io(path, e))?;
        let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
        // The header is a class name, a few options and five numbers.
        let head_len = len.min(64 * 1024) as usize;
        let mut head = vec![0u8; head_len];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| FormatError::io(path, e))?;
        let mut r = Reader::new(path, &head);
        let parsed = Self::parse_header(&mut r, version);
        let (mut ci, count) = match parsed {
            Ok(h) if (h.1 as u64) > IN_MEMORY_CHUNKS as u64 => h,
            // Small, or a header longer than what was read: all of it in memory.
            _ => {
                let mut all = Vec::with_capacity(len as usize);
                (&file)
                    .read_to_end(&mut all)
                    .map_err(|e| FormatError::io(path, e))?;
                return Self::parse(path, &all, version);
            }
        };
        let start = r.offset();
        let remaining = len - start;
        if remaining != count as u64 * 8 {
            return Err(FormatError::corrupt(
                path,
                Some(start),
                format!(
                    "chunk offsets: {count} chunks need {} bytes, {remaining} remain",
                    count * 8
                ),
            ));
        }
        let mut prev: Option<u64> = None;
        let mut i = 0;
        while i < count {
            let n = ITER_BLOCK.min(count - i);
            let mut buf = vec![0u8; n * 8];
            file.read_exact_at(&mut buf, start + i as u64 * 8)
                .map_err(|e| FormatError::io(path, e))?;
            for (k, b) in buf.chunks_exact(8).enumerate() {
                let o = i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                let at = start + (i + k) as u64 * 8;
                prev = Some(check_offset(path, i + k, at, o, prev)?);
            }
            i += n;
        }
        ci.offsets = ChunkOffsets(Arc::new(Backing::File {
            path: path.to_path_buf(),
            file,
            start,
            count,
            last: prev.unwrap_or(0),
            page: Mutex::new(None),
        }));
        Ok(ci)
    }

    /// Fields 1–6 (through the chunk count); the offsets are left to the caller.
    fn parse_header(r: &mut Reader, version: Version) -> Result<(CompressionInfo, usize)> {
        let compressor = r.utf("compressor class name")?;
        let at = r.offset();
        let n_options = r.count("compression option count")?;
        if n_options > r.remaining() / 4 {
            return Err(r.corrupt_at(
                at,
                format!(
                    "option count {n_options} cannot fit in the {} bytes left",
                    r.remaining()
                ),
            ));
        }
        let mut options = Vec::with_capacity(n_options);
        for _ in 0..n_options {
            let k = r.utf("compression option key")?;
            let v = r.utf("compression option value")?;
            options.push((k, v));
        }
        let at = r.offset();
        let chunk_length = r.i32("chunk length")?;
        if chunk_length <= 0 || (chunk_length & (chunk_length - 1)) != 0 {
            return Err(r.corrupt_at(
                at,
                format!("chunk length: expected a positive power of two, found {chunk_length}"),
            ));
        }
        let max_compressed_length = if version.has_max_compressed_length() {
            let at = r.offset();
            let m = r.i32("maxCompressedLength")?;
            if m <= 0 {
                return Err(r.corrupt_at(
                    at,
                    format!("maxCompressedLength: expected a positive int, found {m}"),
                ));
            }
            Some(m as u32)
        } else {
            None
        };
        let at = r.offset();
        let data_length = r.i64("data length")?;
        if data_length < 0 {
            return Err(r.corrupt_at(
                at,
                format!("data length: expected >= 0, found {data_length}"),
            ));
        }
        let at = r.offset();
        let count = r.i32("chunk count")?;
        if count <= 0 {
            // CompressionMetadata: "Compressed file with 0 chunks encountered".
            return Err(r.corrupt_at(at, format!("chunk count: expected > 0, found {count}")));
        }
        let count = count as usize;
        let needed = (data_length as u64).div_ceil(chunk_length as u64);
        if (count as u64) < needed {
            return Err(r.corrupt_at(
                at,
                format!("chunk count {count} is too small: data length {data_length} needs {needed} chunks of {chunk_length}"),
            ));
        }
        Ok((
            CompressionInfo {
                compressor,
                options,
                chunk_length: chunk_length as u32,
                max_compressed_length,
                data_length: data_length as u64,
                offsets: ChunkOffsets::default(),
            },
            count,
        ))
    }

    /// The header (fields 1–5) as Cassandra writes it; children copy it verbatim.
    pub fn serialize_header(&self, out: &mut Vec<u8>) {
        out.put_utf(&self.compressor);
        out.put_i32(self.options.len() as i32);
        for (k, v) in &self.options {
            out.put_utf(k);
            out.put_utf(v);
        }
        out.put_i32(self.chunk_length as i32);
        if let Some(m) = self.max_compressed_length {
            out.put_i32(m as i32);
        }
    }

    pub fn serialize(&self) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(64 + self.offsets.len() * 8);
        self.serialize_header(&mut out);
        out.put_i64(self.data_length as i64);
        out.put_i32(self.offsets.len() as i32);
        for o in self.offsets.iter(0, self.offsets.len() as u64) {
            out.put_i64(o? as i64);
        }
        Ok(out)
    }

    pub fn chunk_count(&self) -> usize {
        self.offsets.len()
    }

    /// Chunks that hold bytes below `data_length`; any further one is the trailing empty
    /// chunk of an early-opened compaction output (sstable-format.md §4.4).
    pub fn live_chunk_count(&self) -> usize {
        self.data_length.div_ceil(self.chunk_length as u64) as usize
    }

    /// `CompressionMetadata.chunkFor`: the chunk holding uncompressed `position`.
    pub fn chunk_index(&self, position: u64) -> Option<usize> {
        let i = (position / self.chunk_length as u64) as usize;
        (i < self.offsets.len()).then_some(i)
    }

    /// File range `[start, end)` of chunk `i` including its CRC: chunk i ends where chunk
    /// i+1 starts, and the last at the Data.db file size.
    pub fn chunk_span(&self, i: usize, data_file_size: u64) -> Result<(u64, u64)> {
        let start = self.offsets.at(i as u64)?;
        let end = self.offsets.end_of(i as u64, data_file_size)?;
        Ok((start, end))
    }

    /// Checks what only the Data.db size can tell: the last chunk has room for its CRC.
    pub fn check_data_size(&self, file: &Path, data_file_size: u64) -> Result<()> {
        let last = self.offsets.last().unwrap_or(0);
        if data_file_size < last + 4 {
            return Err(FormatError::corrupt(
                file,
                None,
                format!(
                    "last chunk starts at {last} but Data.db is only {data_file_size} bytes (a chunk needs at least its 4-byte CRC)"
                ),
            ));
        }
        Ok(())
    }

    pub fn codec(&self) -> Codec {
        Codec::from_class_name(&self.compressor)
    }

    /// The Zstd level this table's chunks are written at: option `compression_level`
    /// (`ZstdCompressor.getOrDefaultCompressionLevel`), default 3, within
    /// `Zstd.minCompressionLevel()..=maxCompressionLevel()` (`isValid`).
    pub fn zstd_level(&self, file: &Path) -> Result<i32> {
        let Some((_, v)) = self.options.iter().find(|(k, _)| k == "compression_level") else {
            return Ok(ZSTD_DEFAULT_LEVEL);
        };
        let min = zstd::zstd_safe::min_c_level();
        let max = zstd::zstd_safe::max_c_level();
        match v.trim().parse::<i32>() {
            Ok(l) if (min..=max).contains(&l) => Ok(l),
            _ => Err(FormatError::unsupported(
                file,
                None,
                format!("ZstdCompressor compression_level={v:?} (expected {min}..={max})"),
            )),
        }
    }

    /// Whether a stored payload of this length is raw (`na`+: `CompressedChunkReader.Standard
    /// .readChunk` and `Mmap.readChunk` uncompress only when `chunk.length <
    /// maxCompressedLength`, 4.x/5.0 source read in docs/split.md), rather than compressor
    /// output.
    pub fn is_stored_raw(&self, payload_len: usize) -> bool {
        self.max_compressed_length
            .is_some_and(|m| payload_len as u64 >= m as u64)
    }
}

/// Chunk offset `i` (read at file offset `at`) after `prev`: each chunk is at least its
/// 4-byte CRC, so offsets strictly increase by >= 4.
fn check_offset(file: &Path, i: usize, at: u64, o: i64, prev: Option<u64>) -> Result<u64> {
    let ok = o >= 0 && prev.is_none_or(|p| o as u64 >= p + 4);
    if !ok {
        return Err(FormatError::corrupt(
            file,
            Some(at),
            format!(
                "chunk offset {i} = {o}: expected >= {} (offsets increase by at least the 4-byte CRC)",
                prev.map_or(0, |p| p + 4)
            ),
        ));
    }
    Ok(o as u64)
}

/// The compressors Cassandra ships (`schema/CompressionParams`). A class name without a
/// package resolves to `org.apache.cassandra.io.compress.<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Codec {
    Lz4,
    Snappy,
    Deflate,
    Zstd,
    Noop,
    Unknown,
}

impl Codec {
    pub fn from_class_name(name: &str) -> Codec {
        match name.rsplit('.').next().unwrap_or(name) {
            "LZ4Compressor" => Codec::Lz4,
            "SnappyCompressor" => Codec::Snappy,
            "DeflateCompressor" => Codec::Deflate,
            "ZstdCompressor" => Codec::Zstd,
            "NoopCompressor" => Codec::Noop,
            _ => Codec::Unknown,
        }
    }

    /// Decompresses one stored payload into `out` (cleared first). `max_len` bounds the
    /// output (the chunk length): a corrupt length header never makes us allocate more.
    pub fn decompress(
        self,
        file: &Path,
        offset: u64,
        payload: &[u8],
        max_len: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        out.clear();
        let bad = |what: String| FormatError::corrupt(file, Some(offset), what);
        match self {
            Codec::Lz4 => {
                // LZ4Compressor: 4-byte little-endian uncompressed length, then a raw LZ4 block.
                if payload.len() < 4 {
                    return Err(bad(format!(
                        "LZ4 chunk of {} bytes has no 4-byte length header",
                        payload.len()
                    )));
                }
                let n = i32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
                if n < 0 || n as usize > max_len {
                    return Err(bad(format!(
                        "LZ4 chunk header says {n} uncompressed bytes; expected 0..={max_len}"
                    )));
                }
                out.resize(n as usize, 0);
                let got = lz4_flex::block::decompress_into(&payload[4..], out)
                    .map_err(|e| bad(format!("LZ4 chunk does not decompress: {e}")))?;
                if got != n as usize {
                    return Err(bad(format!(
                        "LZ4 chunk decompressed to {got} bytes, header says {n}"
                    )));
                }
            }
            Codec::Snappy => {
                let n = snap::raw::decompress_len(payload)
                    .map_err(|e| bad(format!("Snappy chunk header: {e}")))?;
                if n > max_len {
                    return Err(bad(format!(
                        "Snappy chunk says {n} uncompressed bytes; expected at most {max_len}"
                    )));
                }
                out.resize(n, 0);
                snap::raw::Decoder::new()
                    .decompress(payload, out)
                    .map_err(|e| bad(format!("Snappy chunk does not decompress: {e}")))?;
            }
            Codec::Deflate => {
                // DeflateCompressor uses java.util.zip.Inflater with the zlib wrapper.
                // `bufread` inflates straight from the slice (no 32 KiB copy buffer). One
                // byte past `max_len` tells an oversized chunk; room for exactly that up
                // front, since `read_to_end` would otherwise double the buffer past it.
                let mut d = flate2::bufread::ZlibDecoder::new(payload).take(max_len as u64 + 1);
                out.reserve_exact(max_len + 1);
                d.read_to_end(out)
                    .map_err(|e| bad(format!("Deflate chunk does not inflate: {e}")))?;
                if out.len() > max_len {
                    return Err(bad(format!(
                        "Deflate chunk inflates past the chunk length {max_len}"
                    )));
                }
            }
            Codec::Noop => {
                if payload.len() > max_len {
                    return Err(bad(format!(
                        "Noop chunk of {} bytes exceeds the chunk length {max_len}",
                        payload.len()
                    )));
                }
                out.extend_from_slice(payload);
            }
            Codec::Zstd => {
                // ZstdCompressor.uncompress: `Zstd.decompressByteArray` into the chunk
                // buffer, i.e. `ZSTD_decompressDCtx` (every frame of the payload, the
                // content checksum verified when the frame has one). Decoding into a
                // buffer of exactly `max_len` bytes is the bound: a frame that would
                // write past it fails (`dstSize_tooSmall`) before anything more is
                // allocated; the context's own state is fixed-size. An empty payload is
                // no frame at all (ZstdCompressor always writes one), which libzstd would
                // take for zero bytes.
                if payload.is_empty() {
                    return Err(bad("Zstd chunk of 0 bytes holds no frame".into()));
                }
                out.resize(max_len, 0);
                let got = ZSTD_DCTX.with(|d| {
                    let mut d = d.borrow_mut();
                    let dctx = d.get_or_insert_with(zstd::zstd_safe::DCtx::create);
                    dctx.decompress(&mut out[..], payload)
                });
                match got {
                    Ok(n) => out.truncate(n),
                    Err(code) => {
                        out.clear();
                        return Err(bad(format!(
                            "Zstd chunk does not decompress into at most {max_len} bytes: {}",
                            zstd::zstd_safe::get_error_name(code)
                        )));
                    }
                }
            }
            Codec::Unknown => {
                return Err(FormatError::unsupported(
                    file,
                    Some(offset),
                    "unknown compressor class",
                ))
            }
        }
        Ok(())
    }

    /// Compresses one chunk the way the Cassandra compressor would frame it. Only LZ4 and
    /// Noop are written by cleave (a child's re-encoded chunks keep the parent's codec).
    pub fn compress(self, file: &Path, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.compress_with(file, data, &mut CodecState::default(), out)
    }

    /// `compress` with the codec's state and the output buffer kept by the caller, chunk
    /// after chunk (one `CodecState` per thread of a re-encode): once `out` has grown to
    /// the largest chunk, LZ4 and Snappy allocate nothing of ours per chunk and Deflate
    /// reuses its compressor. The bytes are the same as a fresh state's
    /// (`tests::reused_state_encodes_the_same_bytes`).
    pub fn compress_with(
        self,
        file: &Path,
        data: &[u8],
        state: &mut CodecState,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        out.clear();
        match self {
            Codec::Lz4 => {
                // LZ4Compressor's frame: 4-byte little-endian length, then the raw block.
                // `compress_into` picks the same hash table as `compress` (by input length)
                // but writes into our buffer; the table itself is lz4_flex's own (8 KiB
                // for a chunk under 64 KiB), allocated per call: 0.11 has no API to pass
                // one in.
                out.extend_from_slice(&(data.len() as i32).to_le_bytes());
                out.resize(4 + lz4_flex::block::get_maximum_output_size(data.len()), 0);
                let n = lz4_flex::block::compress_into(data, &mut out[4..]).map_err(|e| {
                    FormatError::corrupt(file, None, format!("LZ4 compression failed: {e}"))
                })?;
                out.truncate(4 + n);
            }
            Codec::Noop => out.extend_from_slice(data),
            Codec::Snappy => {
                out.resize(snap::raw::max_compress_len(data.len()), 0);
                let n = state
                    .snappy
                    .get_or_insert_with(snap::raw::Encoder::new)
                    .compress(data, out)
                    .map_err(|e| {
                        FormatError::corrupt(file, None, format!("Snappy compression failed: {e}"))
                    })?;
                out.truncate(n);
            }
            Codec::Deflate => {
                // DeflateCompressor: java.util.zip.Deflater, zlib wrapper, default level.
                let c = state.deflate.get_or_insert_with(|| {
                    flate2::Compress::new(flate2::Compression::default(), true)
                });
                c.reset();
                out.reserve(data.len() + data.len() / 8 + 64);
                loop {
                    let consumed = c.total_in() as usize;
                    let status = c
                        .compress_vec(&data[consumed..], out, flate2::FlushCompress::Finish)
                        .map_err(|e| {
                            FormatError::corrupt(
                                file,
                                None,
                                format!("Deflate compression failed: {e}"),
                            )
                        })?;
                    if status == flate2::Status::StreamEnd {
                        break;
                    }
                    out.reserve(out.capacity().max(64));
                }
            }
            Codec::Zstd => {
                // ZstdCompressor.compress: `Zstd.compress(output, input, compressionLevel,
                // ENABLE_CHECKSUM_FLAG = true)`, one zstd frame (content size in the
                // header, a content checksum at the end) at the table's
                // `compression_level` (default 3). The output buffer Cassandra gives it is
                // `initialCompressedBufferLength = Zstd.compressBound(chunkLength)`, so a
                // frame always fits; whether it is stored raw is the caller's
                // `maxCompressedLength` test, as for every codec.
                let level = state.zstd_level;
                let (set, cctx) = state
                    .zstd
                    .get_or_insert_with(|| (None, zstd::zstd_safe::CCtx::create()));
                let zerr = |code: usize| {
                    FormatError::corrupt(
                        file,
                        None,
                        format!(
                            "Zstd compression failed: {}",
                            zstd::zstd_safe::get_error_name(code)
                        ),
                    )
                };
                if *set != Some(level) {
                    use zstd::zstd_safe::CParameter;
                    cctx.set_parameter(CParameter::CompressionLevel(level))
                        .map_err(zerr)?;
                    cctx.set_parameter(CParameter::ChecksumFlag(true))
                        .map_err(zerr)?;
                    *set = Some(level);
                }
                out.reserve(zstd::zstd_safe::compress_bound(data.len()));
                cctx.compress2(out, data).map_err(zerr)?;
            }
            Codec::Unknown => {
                return Err(FormatError::unsupported(
                    file,
                    None,
                    "writing chunks with an unknown compressor",
                ))
            }
        }
        Ok(())
    }
}

/// What a codec keeps between chunks (`Codec::compress_with`): Snappy's hash tables,
/// Deflate's compressor and Zstd's context, made on first use. LZ4 needs none of ours.
pub struct CodecState {
    snappy: Option<snap::raw::Encoder>,
    deflate: Option<flate2::Compress>,
    /// The context and the level it was set to.
    zstd: Option<(Option<i32>, zstd::zstd_safe::CCtx<'static>)>,
    /// The level Zstd chunks are written at: the table's `compression_level`
    /// (`CodecState::for_table`), else ZstdCompressor's `DEFAULT_COMPRESSION_LEVEL`.
    zstd_level: i32,
}

impl Default for CodecState {
    fn default() -> CodecState {
        CodecState {
            snappy: None,
            deflate: None,
            zstd: None,
            zstd_level: ZSTD_DEFAULT_LEVEL,
        }
    }
}

impl CodecState {
    /// A state that writes chunks the way `ci`'s compressor was configured (Zstd's
    /// `compression_level`).
    pub fn for_table(file: &Path, ci: &CompressionInfo) -> Result<CodecState> {
        Ok(CodecState {
            zstd_level: ci.zstd_level(file)?,
            ..CodecState::default()
        })
    }
}

/// `ZstdCompressor.DEFAULT_COMPRESSION_LEVEL`.
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

thread_local! {
    /// One decompression context a thread (`ZSTD_createDCtx` allocates ~100 KiB; a chunk
    /// is read far more often than a thread starts).
    static ZSTD_DCTX: std::cell::RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(version: &str) -> CompressionInfo {
        CompressionInfo {
            compressor: "LZ4Compressor".into(),
            options: vec![("k".into(), "v".into())],
            chunk_length: 16384,
            max_compressed_length: Version::parse(version)
                .filter(|v| v.has_max_compressed_length())
                .map(|_| i32::MAX as u32),
            data_length: 40000,
            offsets: vec![0, 100, 250].into(),
        }
    }

    /// What `compress` did before the state was reused (issue 16): the reference the
    /// reused-state bytes must equal.
    fn compress_fresh(codec: Codec, data: &[u8]) -> Vec<u8> {
        match codec {
            Codec::Lz4 => {
                let mut out = (data.len() as i32).to_le_bytes().to_vec();
                out.extend_from_slice(&lz4_flex::block::compress(data));
                out
            }
            Codec::Snappy => snap::raw::Encoder::new().compress_vec(data).unwrap(),
            Codec::Deflate => {
                use std::io::Write;
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Codec::Zstd => {
                // ZstdCompressor: one frame, level 3, content checksum on.
                let mut c = zstd::zstd_safe::CCtx::create();
                c.set_parameter(zstd::zstd_safe::CParameter::CompressionLevel(3))
                    .unwrap();
                c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
                    .unwrap();
                let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
                c.compress2(&mut out, data).unwrap();
                out
            }
            _ => data.to_vec(),
        }
    }

    #[test]
    fn reused_state_encodes_the_same_bytes() {
        // Chunks of every size a table uses (4 KiB .. 64 KiB, and the u16 table boundary),
        // compressible, incompressible and empty, through one state and one buffer.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut inputs: Vec<Vec<u8>> = vec![Vec::new(), vec![7]];
        for len in [4096usize, 16384, 65534, 65535, 65536, 131072] {
            inputs.push((0..len).map(|_| rnd() as u8).collect());
            inputs.push(
                (0..len)
                    .map(|i| (i / 97) as u8 ^ (rnd() % 3) as u8)
                    .collect(),
            );
        }
        for codec in [
            Codec::Lz4,
            Codec::Snappy,
            Codec::Deflate,
            Codec::Zstd,
            Codec::Noop,
        ] {
            let mut state = CodecState::default();
            let mut out = Vec::new();
            for round in 0..2 {
                for (i, d) in inputs.iter().enumerate() {
                    codec
                        .compress_with(Path::new("x"), d, &mut state, &mut out)
                        .unwrap();
                    assert_eq!(
                        out,
                        compress_fresh(codec, d),
                        "{codec:?} input {i} round {round}"
                    );
                    let mut back = Vec::new();
                    codec
                        .decompress(Path::new("x"), 0, &out, d.len(), &mut back)
                        .unwrap();
                    assert_eq!(&back, d, "{codec:?} input {i}");
                }
            }
        }
    }

    #[test]
    fn round_trip_both_layouts() {
        for v in ["md", "nb"] {
            let ci = sample(v);
            let bytes = ci.serialize().unwrap();
            let back =
                CompressionInfo::parse(Path::new("c"), &bytes, Version::parse(v).unwrap()).unwrap();
            assert_eq!(back, ci);
            assert_eq!(back.serialize().unwrap(), bytes);
        }
    }

    #[test]
    fn rejects_unordered_offsets_and_short_counts() {
        let mut ci = sample("nb");
        ci.offsets = vec![0, 300, 250].into();
        let e = CompressionInfo::parse(
            Path::new("c"),
            &ci.serialize().unwrap(),
            Version::parse("nb").unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("chunk offset 2"), "{e}");
        let mut ci = sample("nb");
        ci.data_length = 16384 * 3 + 1;
        let e = CompressionInfo::parse(
            Path::new("c"),
            &ci.serialize().unwrap(),
            Version::parse("nb").unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("too small"), "{e}");
    }

    /// More than `IN_MEMORY_CHUNKS` chunks: `open` reads the offsets on demand, and they
    /// are the ones `parse` holds; a bad offset deep in the file is found at open.
    #[test]
    fn many_offsets_are_read_on_demand() {
        let dir = std::env::temp_dir().join(format!("cleave-ci-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nb-1-big-CompressionInfo.db");
        let n = IN_MEMORY_CHUNKS * 3 + 17;
        let mut ci = sample("nb");
        ci.data_length = n as u64 * 16384;
        ci.offsets = (0..n as u64)
            .map(|i| i * 7000 + i % 13)
            .collect::<Vec<_>>()
            .into();
        let bytes = ci.serialize().unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let v = Version::parse("nb").unwrap();
        let lazy = CompressionInfo::open(&path, v).unwrap();
        assert!(lazy.offsets.on_demand() && !ci.offsets.on_demand());
        assert_eq!(lazy, ci);
        assert_eq!(lazy.serialize().unwrap(), bytes);
        for i in [0, 1, PAGE - 1, PAGE, n / 2, n - 1] {
            assert_eq!(
                lazy.offsets.get(i).unwrap(),
                ci.offsets.get(i).unwrap(),
                "{i}"
            );
        }
        assert_eq!(lazy.offsets.get(n).unwrap(), None);
        let window: Vec<u64> = lazy.offsets.iter(5000, 9000).map(|o| o.unwrap()).collect();
        assert_eq!(
            window,
            (5000..9000u64)
                .map(|i| i * 7000 + i % 13)
                .collect::<Vec<_>>()
        );
        assert_eq!(lazy.chunk_span(n - 1, 1 << 40).unwrap().1, 1 << 40);
        // Offset 20,000 goes backwards: the open fails and names it and its file offset.
        let mut bad = bytes.clone();
        let at = bytes.len() - (n - 20_000) * 8;
        bad[at..at + 8].copy_from_slice(&5i64.to_be_bytes());
        std::fs::write(&path, &bad).unwrap();
        let e = CompressionInfo::open(&path, v).unwrap_err().to_string();
        assert!(
            e.contains("chunk offset 20000") && e.contains(&format!("offset {at}")),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn deflate_buffer_stays_within_max_len() {
        // Found by fuzz/fuzz_targets/codec.rs: `read_to_end` doubled the buffer, so a full
        // 64 KiB chunk got a 128 KiB one, past the `max_len` bound decompress promises.
        let mut z = Vec::new();
        Codec::Deflate
            .compress(Path::new("d"), &[0u8; 65536], &mut z)
            .unwrap();
        let mut out = Vec::new();
        Codec::Deflate
            .decompress(Path::new("d"), 0, &z, 65536, &mut out)
            .unwrap();
        assert_eq!(out.len(), 65536);
        assert!(out.capacity() <= 65537, "capacity {}", out.capacity());
        let mut big = Vec::new();
        Codec::Deflate
            .compress(Path::new("d"), &vec![0u8; 1 << 20], &mut big)
            .unwrap();
        let mut out = Vec::new();
        let e = Codec::Deflate
            .decompress(Path::new("d"), 7, &big, 65536, &mut out)
            .unwrap_err();
        assert!(
            e.to_string().contains("offset 7")
                && e.to_string().contains("past the chunk length 65536"),
            "{e}"
        );
        assert!(out.capacity() <= 65537, "capacity {}", out.capacity());
    }

    #[test]
    fn codecs_round_trip() {
        let data: Vec<u8> = (0..5000u32).flat_map(|i| (i % 97).to_le_bytes()).collect();
        for c in [
            Codec::Lz4,
            Codec::Snappy,
            Codec::Deflate,
            Codec::Zstd,
            Codec::Noop,
        ] {
            let mut z = Vec::new();
            c.compress(Path::new("d"), &data, &mut z).unwrap();
            let mut back = Vec::new();
            c.decompress(Path::new("d"), 0, &z, 65536, &mut back)
                .unwrap();
            assert_eq!(back, data, "{c:?}");
            assert!(
                c.decompress(Path::new("d"), 0, &z, 100, &mut back).is_err(),
                "{c:?} must honour max_len"
            );
        }
    }

    fn zstd_table(level: Option<&str>) -> CompressionInfo {
        CompressionInfo {
            compressor: "org.apache.cassandra.io.compress.ZstdCompressor".into(),
            options: level
                .map(|l| vec![("compression_level".to_string(), l.to_string())])
                .unwrap_or_default(),
            ..sample("nb")
        }
    }

    /// Zstd chunks as ZstdCompressor frames them: one frame with the content size and a
    /// content checksum (`ENABLE_CHECKSUM_FLAG`), at the table's `compression_level`
    /// (default 3); they decode back, within the chunk length, through a reused state.
    #[test]
    fn zstd_round_trip_at_the_table_level() {
        let f = Path::new("z");
        let data: Vec<u8> = (0..16384u32)
            .map(|i| (i / 7) as u8 ^ (i % 5) as u8)
            .collect();
        assert_eq!(zstd_table(None).zstd_level(f).unwrap(), 3);
        assert_eq!(zstd_table(Some("-5")).zstd_level(f).unwrap(), -5);
        assert_eq!(zstd_table(Some("19")).zstd_level(f).unwrap(), 19);
        for bad in ["23", "x", ""] {
            let e = zstd_table(Some(bad)).zstd_level(f).unwrap_err();
            assert_eq!(e.kind(), "unsupported", "{bad}: {e}");
        }
        let mut sizes = Vec::new();
        for level in [None, Some("1"), Some("19"), Some("-5")] {
            let ci = zstd_table(level);
            let mut state = CodecState::for_table(f, &ci).unwrap();
            let mut z = Vec::new();
            for round in 0..2 {
                Codec::Zstd
                    .compress_with(f, &data, &mut state, &mut z)
                    .unwrap();
                // Frame header: magic, then the descriptor byte: bit 2 is the checksum flag,
                // bits 6-7 (or the single-segment bit 5) say the content size is there.
                assert_eq!(&z[..4], &[0x28, 0xb5, 0x2f, 0xfd], "{level:?}");
                assert_ne!(z[4] & 0x04, 0, "{level:?}: no content checksum");
                assert!(z[4] & 0xe0 != 0, "{level:?}: no content size");
                let mut back = Vec::new();
                Codec::Zstd.decompress(f, 0, &z, 16384, &mut back).unwrap();
                assert_eq!(back, data, "{level:?} round {round}");
            }
            sizes.push(z.len());
        }
        // The level is honoured: 19 compresses at least as well as 1, -5 no better than 3.
        assert!(sizes[2] <= sizes[1] && sizes[3] >= sizes[0], "{sizes:?}");
        // The default state is level 3: the same bytes as a table without the option.
        let mut a = Vec::new();
        Codec::Zstd.compress(f, &data, &mut a).unwrap();
        assert_eq!(a, compress_fresh(Codec::Zstd, &data));
        // An empty chunk (the extra chunk after a child whose length is a multiple of the
        // chunk length) is a valid frame of nothing.
        let mut e = Vec::new();
        Codec::Zstd.compress(f, &[], &mut e).unwrap();
        let mut back = vec![1];
        Codec::Zstd.decompress(f, 0, &e, 4096, &mut back).unwrap();
        assert!(back.is_empty());
    }

    /// Corrupt Zstd chunks fail with a `CorruptSSTable` error naming the file and offset,
    /// never a panic, and never decode past the chunk length.
    #[test]
    fn zstd_corruption_is_an_error() {
        let f = Path::new("/t/nb-1-big-Data.db");
        let data: Vec<u8> = (0..65536u32)
            .map(|i| (i % 251) as u8 ^ (i >> 9) as u8)
            .collect();
        let mut z = Vec::new();
        Codec::Zstd.compress(f, &data, &mut z).unwrap();
        let mut out = Vec::new();
        let check = |payload: &[u8], max: usize, out: &mut Vec<u8>, what: &str| {
            let e = Codec::Zstd
                .decompress(f, 4242, payload, max, out)
                .expect_err(what);
            assert_eq!(e.kind(), "corrupt", "{what}: {e}");
            let m = e.to_string();
            assert!(
                m.contains("nb-1-big-Data.db") && m.contains("4242") && m.contains("Zstd"),
                "{what}: {m}"
            );
            assert!(
                out.capacity() <= max.max(65536),
                "{what}: {}",
                out.capacity()
            );
        };
        // Past the chunk length: the frame holds 64 KiB, the chunk is 16 KiB.
        check(&z, 16384, &mut out, "oversized frame");
        // Truncated, empty, garbage, a wrong magic.
        check(&z[..z.len() / 2], 65536, &mut out, "truncated");
        check(&[], 65536, &mut out, "empty");
        check(&[0x55; 40], 65536, &mut out, "garbage");
        let mut m = z.clone();
        m[0] ^= 1;
        check(&m, 65536, &mut out, "magic");
        // The content checksum catches a flipped byte in the last block's payload; any
        // flipped byte anywhere fails one way or another (or decodes to other bytes, which
        // the chunk CRC in Data.db catches first) — and never panics.
        let mut c = z.clone();
        let last = c.len() - 1;
        c[last] ^= 0x80;
        check(&c, 65536, &mut out, "checksum");
        for i in 0..z.len() {
            let mut c = z.clone();
            c[i] ^= 0x11;
            if let Ok(()) = Codec::Zstd.decompress(f, 0, &c, 65536, &mut out) {
                assert!(out.len() <= 65536);
            }
        }
        // Two frames, the second past the chunk length, are one chunk too long.
        let mut two = z.clone();
        two.extend_from_slice(&z);
        check(&two, 65536, &mut out, "two frames");
    }
}
