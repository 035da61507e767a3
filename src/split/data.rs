//! Writing a child's Data.db in each layout, with its chunk offsets (compressed) or CRC.db
//! (uncompressed), byte accounting, and — when asked — the Digest derived without reading
//! the data back.
//!
//! Every layout re-encodes both ends of a compressed child: the first chunk decodes to a
//! zero-filled dead prefix then the child's first partitions, the last chunk ends exactly at
//! the child's `dataLength` (only the last chunk may be short: `CompressionMetadata.chunkFor`
//! maps a position to `position / chunkLength`). Interior chunks are shared or copied
//! verbatim, their CRC trailers with them.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::fallback::Fallback;
use super::head::Head;
use super::plan::{Geometry, Layout};
use super::regrid;
use crate::io::throttle::TokenBucket;
use crate::io::{copy, reflink};
use crate::sstable::checksum::ChunkChecksums;
use crate::sstable::compression::{Codec, CodecState, CompressionInfo};
use crate::sstable::data::DataReader;
use crate::sstable::lz4::{self, LengthTarget};
use crate::sstable::{FormatError, Result};

/// CEP-66's head-pad alignment: the padded layout keeps chunks at their source offset
/// modulo 64 KiB.
pub const PAD_ALIGNMENT: u64 = 64 * 1024;

/// What writing one child's Data.db produced. `file` is the written, not yet durable
/// Data.db: the caller hands it to its `io::durable::Batch`.
#[derive(Debug, Default)]
pub struct DataResult {
    /// Child chunk offsets (compressed parents).
    pub offsets: ChildOffsets,
    pub file: Option<File>,
    pub data_length: u64,
    pub file_size: u64,
    /// CRC.db of the child (uncompressed parents with a CRC.db).
    pub crc: Option<ChunkChecksums>,
    /// CRC32 of the whole Data.db, when derived from chunk CRCs (`--digest combine`).
    pub combined_digest: Option<u32>,
    pub layout: Option<Layout>,
    pub fallback: Option<Fallback>,
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
}

/// A child's chunk offsets without a copy of the parent's: the chunks cleave encodes
/// (`head`, `tail`) are its own, the interior is a window `[from, to)` on the parent's
/// offsets moved by the same distance (`dst_start - src_start`). Rebased a block at a time
/// when CompressionInfo.db is written (`write_compression_info`), never collected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChildOffsets {
    pub head: Vec<u64>,
    /// Parent chunks `[from, to)` whose first byte `src_start` lands at `dst_start`.
    pub interior: Option<InteriorChunks>,
    pub tail: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InteriorChunks {
    pub from: u64,
    pub to: u64,
    pub src_start: u64,
    pub dst_start: u64,
}

impl ChildOffsets {
    pub fn len(&self) -> usize {
        self.head.len() + self.interior.map_or(0, |i| (i.to - i.from) as usize) + self.tail.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The child's CompressionInfo.db: the parent's header, the child's `dataLength`, and its
/// offsets streamed from the parent's (8 bytes a chunk are never held for the child, nor
/// for the parent when its offsets are read on demand). Write errors name `out_path`.
pub fn write_compression_info<W: std::io::Write>(
    out: &mut W,
    out_path: &Path,
    parent: &CompressionInfo,
    data_length: u64,
    offsets: &ChildOffsets,
) -> Result<()> {
    let io = |e| FormatError::io(out_path, e);
    let mut head = Vec::with_capacity(128);
    parent.serialize_header(&mut head);
    head.extend_from_slice(&(data_length as i64).to_be_bytes());
    head.extend_from_slice(&(offsets.len() as i32).to_be_bytes());
    out.write_all(&head).map_err(io)?;
    // Offsets are written as Java longs; every child offset is non-negative, so its i64
    // and u64 big-endian bytes are the same.
    let mut buf = Vec::with_capacity(64 * 1024 + 8);
    put_rebased(&mut buf, &offsets.head, 0);
    if let Some(i) = offsets.interior {
        // A block of parent offsets at a time, each moved by the same distance: one
        // branch-free loop the compiler vectorises, instead of an iterator step an offset.
        let delta = i.dst_start.wrapping_sub(i.src_start);
        parent.offsets.for_each_block(i.from, i.to, |block| {
            put_rebased(&mut buf, block, delta);
            out.write_all(&buf).map_err(io)?;
            buf.clear();
            Ok(())
        })?;
    }
    put_rebased(&mut buf, &offsets.tail, 0);
    out.write_all(&buf).map_err(io)
}

/// Appends each of `offsets` moved by `delta` (wrapping: `o - src_start + dst_start` of an
/// interior chunk) to `out` as a big-endian long.
fn put_rebased(out: &mut Vec<u8>, offsets: &[u64], delta: u64) {
    let start = out.len();
    out.resize(start + offsets.len() * 8, 0);
    for (b, o) in out[start..].chunks_exact_mut(8).zip(offsets) {
        b.copy_from_slice(&o.wrapping_add(delta).to_be_bytes());
    }
}

/// One piece of a child's Data.db, at child file offset `dst`: a parent byte range carried
/// verbatim (shared by reflink where the offsets allow, else copied — or sent), or bytes
/// cleave encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Parent { dst: u64, src: u64, len: u64 },
    Bytes { dst: u64, bytes: Vec<u8> },
}

impl Segment {
    pub fn dst(&self) -> u64 {
        match self {
            Segment::Parent { dst, .. } | Segment::Bytes { dst, .. } => *dst,
        }
    }
    pub fn len(&self) -> u64 {
        match self {
            Segment::Parent { len, .. } => *len,
            Segment::Bytes { bytes, .. } => bytes.len() as u64,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A compressed child's Data.db decided but not written: what a writer writes and what a
/// stream sender sends.
#[derive(Debug, Clone)]
pub struct DataLayout {
    pub segments: Vec<Segment>,
    pub offsets: ChildOffsets,
    pub data_length: u64,
    pub file_size: u64,
    pub layout: Layout,
    pub fallback: Option<Fallback>,
    /// Parent chunks `[from, to]` carried verbatim (their CRC trailers give the digest).
    pub interior: Option<(u64, u64)>,
    /// `padded`: zeros before the first chunk (the first segment).
    pub pad: u64,
}

/// The parent's Data.db opened for reading chunks and ranges.
pub struct ParentData<'p> {
    pub path: std::path::PathBuf,
    pub file: &'p File,
    pub file_size: u64,
    pub reader: DataReader,
    pub compression: Option<&'p CompressionInfo>,
    pub crc: Option<&'p ChunkChecksums>,
    /// `maxBytesPerSecond`: taken for bytes copied or re-encoded, never for shared extents.
    pub throttle: Option<Arc<TokenBucket>>,
}

impl<'p> ParentData<'p> {
    /// The parent's CompressionInfo, for a layout `what` that needs compressed chunks.
    fn compressed(&self, what: &str) -> Result<&'p CompressionInfo> {
        self.compression.ok_or_else(|| {
            FormatError::corrupt(
                &self.path,
                None,
                format!("{what} on an uncompressed parent"),
            )
        })
    }

    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut b = vec![0u8; len];
        self.file
            .read_exact_at(&mut b, offset)
            .map_err(|e| FormatError::io(&self.path, e))?;
        Ok(b)
    }

    /// Checks every parent CRC.db block overlapping `[start, end)` against its stored CRC.
    /// An uncompressed child gets a fresh CRC for each block it re-derives from the
    /// parent's bytes; without this check a corrupt parent block would come out of the split
    /// with a valid checksum (laundered), the child verifying clean while the parent fails.
    pub fn check_parent_blocks(&self, start: u64, end: u64) -> Result<()> {
        let Some(pc) = &self.crc else { return Ok(()) };
        let unit = pc.chunk_size as u64;
        if unit == 0 || end <= start {
            return Ok(());
        }
        for idx in start / unit..end.div_ceil(unit) {
            let off = idx * unit;
            let len = unit.min(self.file_size.saturating_sub(off));
            let computed = crc32fast::hash(&self.read_at(off, len as usize)?);
            let Some(&stored) = pc.crcs.get(idx as usize) else {
                return Err(FormatError::corrupt(
                    &self.path,
                    Some(off),
                    format!(
                        "block {idx} has no CRC.db entry ({} entries)",
                        pc.crcs.len()
                    ),
                ));
            };
            if stored != computed {
                return Err(FormatError::Checksum {
                    loc: crate::sstable::error::Location {
                        file: self.path.clone(),
                        offset: Some(off),
                    },
                    what: format!("block {idx} (CRC.db entry {idx}), which a child re-derives"),
                    stored,
                    computed,
                });
            }
        }
        Ok(())
    }
}

/// The output file with a running position, byte counters and digest.
struct Out<'a> {
    path: &'a Path,
    file: File,
    pos: u64,
    digest: Option<crc32fast::Hasher>,
    shared: u64,
    copied: u64,
    reencoded: u64,
    clone_refusal: Option<reflink::CloneRefusal>,
    throttle: Option<Arc<TokenBucket>>,
}

impl<'a> Out<'a> {
    fn create(path: &'a Path, digest: bool) -> Result<Out<'a>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| FormatError::io(path, e))?;
        Ok(Out {
            path,
            file,
            pos: 0,
            digest: digest.then(crc32fast::Hasher::new),
            shared: 0,
            copied: 0,
            reencoded: 0,
            clone_refusal: None,
            throttle: None,
        })
    }

    fn throttled(mut self, t: Option<Arc<TokenBucket>>) -> Self {
        self.throttle = t;
        self
    }

    fn take(&self, n: u64) {
        if let Some(t) = &self.throttle {
            t.take_blocking(n);
        }
    }

    fn write(&mut self, b: &[u8]) -> Result<()> {
        self.take(b.len() as u64);
        self.file
            .write_all_at(b, self.pos)
            .map_err(|e| FormatError::io(self.path, e))?;
        if let Some(d) = &mut self.digest {
            d.update(b);
        }
        self.pos += b.len() as u64;
        Ok(())
    }

    /// Parent bytes `[src, src+len)` placed at the current position: whole blocks shared
    /// when `block > 0` and the offsets are congruent, partial blocks copied.
    fn parent_range(&mut self, parent: &File, src: u64, len: u64, block: u64) -> Result<()> {
        let dst = self.pos;
        let map_io = |e: std::io::Error| FormatError::io(self.path, e);
        if block == 0 || src % block != dst % block || self.clone_refusal.is_some() {
            self.take(len);
            copy::copy_range(parent, src, len, &self.file, dst).map_err(map_io)?;
            self.copied += len;
        } else {
            let head = ((block - dst % block) % block).min(len);
            let body = (len - head) / block * block;
            let tail = len - head - body;
            self.take(head + tail);
            copy::copy_range(parent, src, head, &self.file, dst).map_err(map_io)?;
            let mut copied = head + tail;
            if body > 0 {
                match reflink::clone_range(parent, src + head, body, &self.file, dst + head) {
                    Ok(()) => self.shared += body,
                    Err(refusal) => {
                        // The probe said yes but this range was refused: copy it and say so.
                        self.clone_refusal = Some(refusal);
                        self.take(body);
                        copy::copy_range(parent, src + head, body, &self.file, dst + head)
                            .map_err(map_io)?;
                        copied += body;
                    }
                }
            }
            copy::copy_range(
                parent,
                src + head + body,
                tail,
                &self.file,
                dst + head + body,
            )
            .map_err(map_io)?;
            self.copied += copied;
        }
        self.pos += len;
        Ok(())
    }

    /// Written, not yet durable: the caller's `io::durable::Batch` fsyncs the file (with
    /// the child's other files, concurrently) and then drops it from the page cache.
    fn finish(self) -> Result<Written> {
        Ok(Written {
            file: self.file,
            file_size: self.pos,
            digest: self.digest.map(|d| d.finalize()),
            shared: self.shared,
            copied: self.copied,
            reencoded: self.reencoded,
            refusal: self.clone_refusal,
        })
    }
}

/// What `Out::finish` reports.
struct Written {
    file: File,
    file_size: u64,
    digest: Option<u32>,
    shared: u64,
    copied: u64,
    reencoded: u64,
    refusal: Option<reflink::CloneRefusal>,
}

/// Encodes one chunk with the parent's codec; `na`+ stores a chunk raw when compression
/// does not get it below `maxCompressedLength`, zero-padded up to it
/// (`CompressedSequentialWriter`).
pub fn encode_chunk(file: &Path, ci: &CompressionInfo, content: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_chunk_into(
        file,
        ci,
        content,
        &mut CodecState::for_table(file, ci)?,
        &mut out,
    )?;
    Ok(out)
}

/// `encode_chunk` into `out` with a reused codec state: what a regrid thread calls chunk
/// after chunk without allocating.
pub fn encode_chunk_into(
    file: &Path,
    ci: &CompressionInfo,
    content: &[u8],
    state: &mut CodecState,
    out: &mut Vec<u8>,
) -> Result<()> {
    ci.codec().compress_with(file, content, state, out)?;
    if let Some(max) = ci.max_compressed_length {
        let max = max as usize;
        if out.len() >= max {
            out.clear();
            out.extend_from_slice(content);
            if out.len() < max {
                out.resize(max, 0);
            }
        }
    }
    Ok(())
}

/// The extra chunk after a child whose `dataLength` is a multiple of the chunk length:
/// an empty chunk, except for Noop whose empty payload would trip `Chunk`'s `length > 0`
/// assertion — a one-byte chunk past `dataLength` is never read.
pub(super) fn extra_chunk(file: &Path, ci: &CompressionInfo) -> Result<Vec<u8>> {
    if ci.codec() == Codec::Noop {
        return Ok(vec![0]);
    }
    encode_chunk(file, ci, &[])
}

/// Parent file offset where chunk `i` ends (its CRC included).
fn chunk_end(ci: &CompressionInfo, i: u64, file_size: u64) -> Result<u64> {
    ci.offsets.end_of(i, file_size)
}

/// Folds the parent's interior chunks `[from, to]` into a running CRC32 of the child file
/// from their stored CRC trailers: 4 bytes read per chunk, never the payloads.
fn combine_interior(
    digest: &mut crc32fast::Hasher,
    parent: &ParentData,
    ci: &CompressionInfo,
    from: u64,
    to: u64,
) -> Result<()> {
    for i in from..=to {
        let start = ci.offsets.at(i)?;
        let end = chunk_end(ci, i, parent.file_size)?;
        let crc_bytes = parent.read_at(end - 4, 4)?;
        let crc = u32::from_be_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
        digest.combine(&crc32fast::Hasher::new_with_initial_len(
            crc,
            end - 4 - start,
        ));
        digest.update(&crc_bytes);
    }
    Ok(())
}

/// The target's reflink support as the writers use it: `block` is the reflink unit (0: the
/// target cannot share, and `no_share` says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharing {
    pub block: u64,
    pub no_share: Option<reflink::CloneRefusal>,
}

/// How and where one child's Data.db is made: the requested layout, whether `padded` is
/// allowed, the target's reflink support, whether the digest is combined from the chunk
/// CRCs, and the file to write.
#[derive(Debug, Clone, Copy)]
pub struct DataTarget<'a> {
    pub want: Layout,
    pub allow_padded: bool,
    pub sharing: Sharing,
    pub combine_digest: bool,
    pub out_path: &'a Path,
}

/// Decides a compressed child's Data.db in `aligned`, `padded` or `copy` without writing
/// it: reads and re-encodes the two end chunks, lays out the interior as one parent range.
/// `t` names the requested layout and the target's reflink support (`DataTarget`).
pub fn compressed_layout(
    parent: &mut ParentData,
    g: &Geometry,
    head: &Head,
    end_position: u64,
    t: &DataTarget,
) -> Result<DataLayout> {
    let DataTarget {
        want,
        allow_padded,
        sharing: Sharing { block, no_share },
        out_path,
        ..
    } = *t;
    // Borrowed, not cloned: the offsets are 8 bytes a chunk of the parent.
    let ci = parent.compressed("compressed layout")?;
    let l = ci.chunk_length as u64;
    let (k, j) = (g.first_chunk, g.last_chunk);
    let dead = g.dead_prefix as usize;
    let lead = g.lead as usize;
    // First chunk: the dead prefix (zeros, or the end of the fillers), then live bytes up
    // to the chunk's end (or the child's end when it holds the whole child).
    let first_live_end = if j == k {
        (end_position - k * l) as usize
    } else {
        l as usize
    };
    let mut first = head.bytes(lead..lead + dead);
    {
        let c = parent.reader.chunk(k as usize)?;
        if c.len() < first_live_end {
            return Err(FormatError::corrupt(
                &parent.path,
                Some(ci.offsets.at(k)?),
                format!(
                    "chunk {k} decodes to {} bytes, the child needs {first_live_end}",
                    c.len()
                ),
            ));
        }
        first.extend_from_slice(&c[dead..first_live_end]);
    }
    let last = if j > k {
        let c = parent.reader.chunk(j as usize)?;
        let n = (end_position - j * l) as usize;
        if c.len() < n {
            return Err(FormatError::corrupt(
                &parent.path,
                Some(ci.offsets.at(j)?),
                format!(
                    "chunk {j} decodes to {} bytes, the child needs {n}",
                    c.len()
                ),
            ));
        }
        Some(c[..n].to_vec())
    } else {
        None
    };
    let interior = if j >= k + 2 {
        Some((ci.offsets.at(k + 1)?, ci.offsets.at(j)?))
    } else {
        None
    };

    // A first chunk without a dead prefix that already sits on a block boundary in the
    // parent (chunk 0 always does) is carried verbatim with the interior: its successors
    // then land at congruent offsets whatever the data, incompressible included.
    let s_k = ci.offsets.at(k)?;
    if dead == 0
        && g.lead == 0
        && j > k
        && matches!(want, Layout::Aligned | Layout::Copy)
        && (want == Layout::Copy || block == 0 || s_k.is_multiple_of(block))
    {
        let (layout, fallback) = if want == Layout::Aligned && block == 0 {
            (
                Layout::Copy,
                Some(Fallback::NoShare(
                    no_share.unwrap_or(reflink::CloneRefusal::NotSupported),
                )),
            )
        } else {
            (want, None)
        };
        let s_j = ci.offsets.at(j)?;
        let mut segments = vec![Segment::Parent {
            dst: 0,
            src: s_k,
            len: s_j - s_k,
        }];
        let mut pos = s_j - s_k;
        let mut offsets = ChildOffsets {
            interior: Some(InteriorChunks {
                from: k,
                to: j,
                src_start: s_k,
                dst_start: 0,
            }),
            ..Default::default()
        };
        if let Some(last) = &last {
            let p = encode_chunk(out_path, ci, last)?;
            offsets
                .tail
                .push(push_bytes(&mut segments, &mut pos, with_crc(p)));
        }
        if g.extra_chunk {
            let p = extra_chunk(out_path, ci)?;
            offsets
                .tail
                .push(push_bytes(&mut segments, &mut pos, with_crc(p)));
        }
        return Ok(DataLayout {
            segments,
            offsets,
            data_length: g.data_length,
            file_size: pos,
            layout,
            fallback,
            interior: Some((k, j - 1)),
            pad: 0,
        });
    }

    // Decide the layout and the first chunk's encoding.
    let mut layout = want;
    let mut fallback: Option<Fallback> = None;
    let mut pad = 0u64;
    let max_ok = |len: usize| {
        ci.max_compressed_length
            .is_none_or(|m| (len as u64) < m as u64)
    };
    let mut first_payload: Option<Vec<u8>> = None;
    // (lead zero chunk, chunk k) when the lead chunk does the aligning.
    let mut lead_payloads: Option<(Vec<u8>, Vec<u8>)> = None;
    if matches!(want, Layout::Aligned | Layout::Padded) {
        if let Some((s1, _)) = interior {
            if block == 0 {
                layout = Layout::Copy;
                fallback = Some(Fallback::NoShare(
                    no_share.unwrap_or(reflink::CloneRefusal::NotSupported),
                ));
            } else if ci.codec() != Codec::Lz4 {
                layout = Layout::Copy;
                fallback = Some(Fallback::Codec {
                    layout: want,
                    compressor: ci.compressor.clone(),
                });
            } else {
                if want == Layout::Aligned && g.lead > 0 {
                    // The lead chunk of zeros is the knob: chunk k is encoded as usual and
                    // the zeros' encoding absorbs whatever residue is left. Its 16 last
                    // bytes go as "live" zeros so that the rest is a tunable zero run.
                    let p_k = encode_chunk(out_path, ci, &first)?;
                    let t = LengthTarget::Residue {
                        add: 4 + p_k.len() + 4,
                        modulus: block as usize,
                        residue: (s1 % block) as usize,
                    };
                    let n = l as usize;
                    let lead_chunk = lz4::encode_tuned_pieces(
                        &head.pieces(0..n - 16),
                        &head.bytes(n - 16..n),
                        t,
                    )
                    .filter(|p| max_ok(p.len()));
                    match lead_chunk {
                        Some(z) => lead_payloads = Some((z, p_k)),
                        None => {
                            fallback = Some(Fallback::NoAlignedEncoding {
                                dead_prefix: dead as u64,
                                residue: s1 % block,
                                block,
                            });
                            layout = Layout::Copy;
                        }
                    }
                } else if want == Layout::Aligned {
                    let t = LengthTarget::Residue {
                        add: 4,
                        modulus: block as usize,
                        residue: (s1 % block) as usize,
                    };
                    first_payload = lz4::encode_tuned_pieces(
                        &head.pieces(lead..lead + dead),
                        &first[dead..],
                        t,
                    )
                    .filter(|p| max_ok(p.len()));
                    if first_payload.is_none() {
                        fallback = Some(Fallback::NoAlignedEncoding {
                            dead_prefix: dead as u64,
                            residue: s1 % block,
                            block,
                        });
                        layout = if allow_padded {
                            Layout::Padded
                        } else {
                            Layout::Copy
                        };
                    }
                }
                if layout == Layout::Padded {
                    let s0 = ci.offsets.at(k)?;
                    let exact = (s1 - s0 - 4) as usize;
                    match lz4::encode_tuned_pieces(
                        &head.pieces(lead..lead + dead),
                        &first[dead..],
                        LengthTarget::Exact(exact),
                    )
                    .filter(|p| max_ok(p.len()))
                    {
                        Some(p) => {
                            first_payload = Some(p);
                            pad = s0 % PAD_ALIGNMENT;
                        }
                        None => {
                            fallback = Some(Fallback::NoExactEncoding {
                                length: exact as u64,
                                after_aligned: fallback.is_some(),
                            });
                            layout = Layout::Copy;
                        }
                    }
                }
            }
        }
    }

    let mut segments = Vec::with_capacity(5);
    let mut pos = 0u64;
    if pad > 0 {
        // CEP-66's head pad: zeros before offsets[0], never read by a non-mmap reader.
        push_bytes(&mut segments, &mut pos, vec![0u8; pad as usize]);
    }
    let mut offsets = ChildOffsets::default();
    match lead_payloads {
        Some((zeros, p_k)) => {
            offsets
                .head
                .push(push_bytes(&mut segments, &mut pos, with_crc(zeros)));
            offsets
                .head
                .push(push_bytes(&mut segments, &mut pos, with_crc(p_k)));
        }
        None => {
            let p = match first_payload {
                Some(p) => p,
                // A lead chunk that found no aligning encoding: its bytes are still there
                // (index positions count them), encoded plainly, and the child is copied.
                None if g.lead > 0 => {
                    let z = encode_chunk(out_path, ci, &head.bytes(0..l as usize))?;
                    offsets
                        .head
                        .push(push_bytes(&mut segments, &mut pos, with_crc(z)));
                    encode_chunk(out_path, ci, &first)?
                }
                None => encode_chunk(out_path, ci, &first)?,
            };
            offsets
                .head
                .push(push_bytes(&mut segments, &mut pos, with_crc(p)));
        }
    }
    if let Some((s1, sj)) = interior {
        offsets.interior = Some(InteriorChunks {
            from: k + 1,
            to: j,
            src_start: s1,
            dst_start: pos,
        });
        segments.push(Segment::Parent {
            dst: pos,
            src: s1,
            len: sj - s1,
        });
        pos += sj - s1;
    }
    if let Some(last) = &last {
        let p = encode_chunk(out_path, ci, last)?;
        offsets
            .tail
            .push(push_bytes(&mut segments, &mut pos, with_crc(p)));
    }
    if g.extra_chunk {
        let p = extra_chunk(out_path, ci)?;
        offsets
            .tail
            .push(push_bytes(&mut segments, &mut pos, with_crc(p)));
    }
    Ok(DataLayout {
        segments,
        offsets,
        data_length: g.data_length,
        file_size: pos,
        layout,
        fallback,
        interior: interior.map(|_| (k + 1, j - 1)),
        pad,
    })
}

/// Appends encoded bytes at `*pos`; returns where they start.
fn push_bytes(segments: &mut Vec<Segment>, pos: &mut u64, bytes: Vec<u8>) -> u64 {
    let dst = *pos;
    *pos += bytes.len() as u64;
    segments.push(Segment::Bytes { dst, bytes });
    dst
}

/// A chunk cleave encoded as stored: payload then its big-endian CRC32.
fn with_crc(mut payload: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&payload);
    payload.extend_from_slice(&crc.to_be_bytes());
    payload
}

/// Writes a decided layout: encoded bytes written, parent ranges shared by whole blocks
/// (unless the layout is `copy`) and copied at the partial blocks.
pub fn write_layout(
    parent: &ParentData,
    d: DataLayout,
    block: u64,
    combine_digest: bool,
    out_path: &Path,
) -> Result<DataResult> {
    let ci = parent.compression;
    let mut out = Out::create(out_path, combine_digest)?.throttled(parent.throttle.clone());
    let share_block = if d.layout == Layout::Copy { 0 } else { block };
    for (i, s) in d.segments.iter().enumerate() {
        match s {
            Segment::Bytes { bytes, .. } => {
                out.write(bytes)?;
                if i == 0 && d.pad > 0 {
                    out.copied += bytes.len() as u64;
                } else {
                    out.reencoded += bytes.len() as u64;
                }
            }
            Segment::Parent { src, len, .. } => {
                // The digest of the interior comes from its stored CRCs; do not hash it as
                // written.
                let digest = out.digest.take();
                out.parent_range(parent.file, *src, *len, share_block)?;
                out.digest = digest;
                if let (Some(dg), Some((from, to)), Some(ci)) =
                    (out.digest.as_mut(), d.interior, ci)
                {
                    combine_interior(dg, parent, ci, from, to)?;
                }
            }
        }
    }
    let Written {
        file,
        file_size,
        digest,
        shared,
        copied,
        reencoded,
        refusal,
    } = out.finish()?;
    let mut fallback = d.fallback;
    if let Some(r) = refusal {
        fallback = Some(Fallback::CloneRefused(r));
    }
    Ok(DataResult {
        offsets: d.offsets,
        file: Some(file),
        data_length: d.data_length,
        file_size,
        crc: None,
        combined_digest: digest,
        layout: Some(d.layout),
        fallback,
        bytes_shared: shared,
        bytes_copied: copied,
        bytes_reencoded: reencoded,
    })
}

/// A compressed child in `aligned`, `padded` or `copy`: `compressed_layout` then
/// `write_layout`.
pub fn write_compressed(
    parent: &mut ParentData,
    g: &Geometry,
    head: &Head,
    end_position: u64,
    t: &DataTarget,
) -> Result<DataResult> {
    let d = compressed_layout(parent, g, head, end_position, t)?;
    write_layout(parent, d, t.sharing.block, t.combine_digest, t.out_path)
}

/// An uncompressed child cut at a CRC-block-aligned base (`g.base`): the dead prefix is
/// zero-filled, the file ends at the last partition's end, full CRC blocks keep the
/// parent's CRC.db entries and only the first and last are recomputed.
pub fn write_uncompressed(
    parent: &ParentData,
    g: &Geometry,
    head: &Head,
    unit: u64,
    t: &DataTarget,
) -> Result<DataResult> {
    // `padded` needs compression offsets: an uncompressed child is `aligned` or `copy`.
    let DataTarget {
        want,
        sharing: Sharing { block, no_share },
        combine_digest,
        out_path,
        ..
    } = *t;
    let dl = g.data_length;
    let first_len = dl.min(unit);
    // The blocks whose CRC the child recomputes: the first, and a partial last one.
    parent.check_parent_blocks(g.base + g.dead_prefix, g.base + first_len)?;
    if dl > unit && !dl.is_multiple_of(unit) {
        parent.check_parent_blocks(g.base + dl - 1, g.base + dl)?;
    }
    let mut first = head.bytes(0..g.dead_prefix as usize);
    first.extend_from_slice(
        &parent.read_at(g.base + g.dead_prefix, (first_len - g.dead_prefix) as usize)?,
    );
    let mut out = Out::create(out_path, false)?.throttled(parent.throttle.clone());
    out.write(&first)?;
    out.reencoded += first.len() as u64;
    let mut layout = if want == Layout::Copy {
        Layout::Copy
    } else {
        Layout::Aligned
    };
    let mut fallback = None;
    if dl > unit {
        let share = if layout == Layout::Copy {
            0
        } else if block == 0 {
            fallback = no_share.map(Fallback::NoShare);
            layout = Layout::Copy;
            0
        } else {
            block
        };
        out.parent_range(parent.file, g.base + unit, dl - unit, share)?;
    }
    let Written {
        file,
        file_size,
        shared,
        copied,
        reencoded,
        refusal,
        ..
    } = out.finish()?;
    if let Some(r) = refusal {
        fallback = Some(Fallback::CloneRefused(r));
    }
    // CRC.db: whole middle blocks are the parent's; the first and a partial last are new.
    let crc = match &parent.crc {
        Some(pc) if pc.chunk_size as u64 == unit => {
            let n = dl.div_ceil(unit);
            let mut crcs = Vec::with_capacity(n as usize);
            let child = File::open(out_path).map_err(|e| FormatError::io(out_path, e))?;
            for i in 0..n {
                let len = (dl - i * unit).min(unit);
                let parent_idx = (g.base / unit + i) as usize;
                let reuse = i > 0 && len == unit && parent_idx < pc.crcs.len();
                if reuse {
                    crcs.push(pc.crcs[parent_idx]);
                } else {
                    let mut b = vec![0u8; len as usize];
                    child
                        .read_exact_at(&mut b, i * unit)
                        .map_err(|e| FormatError::io(out_path, e))?;
                    crcs.push(crc32fast::hash(&b));
                }
            }
            Some(ChunkChecksums {
                chunk_size: pc.chunk_size,
                crcs,
            })
        }
        _ => None,
    };
    let combined_digest = match (&crc, combine_digest) {
        (Some(c), true) => {
            let mut d = crc32fast::Hasher::new();
            for (i, v) in c.crcs.iter().enumerate() {
                let len = (dl - i as u64 * unit).min(unit);
                d.combine(&crc32fast::Hasher::new_with_initial_len(*v, len));
            }
            Some(d.finalize())
        }
        _ => None,
    };
    Ok(DataResult {
        offsets: ChildOffsets::default(),
        file: Some(file),
        data_length: dl,
        file_size,
        crc,
        combined_digest,
        layout: Some(layout),
        fallback,
        bytes_shared: shared,
        bytes_copied: copied,
        bytes_reencoded: reencoded,
    })
}

/// The chunks of a compressed `regrid` child, in order, each batch handed to `emit` (which
/// stores the payloads with their CRCs and returns where the batch starts): the partitions
/// of `runs` back to back from position 0 on a fresh grid, then the extra chunk when the
/// length is a multiple of it. Encoded on every core (`regrid`), written in order.
fn regrid_chunks(
    parent: &ParentData,
    ci: &CompressionInfo,
    runs: &[(u64, u64)],
    out_path: &Path,
    emit: &mut regrid::Emit<'_>,
) -> Result<Vec<u64>> {
    regrid::chunks(
        &parent.reader,
        &parent.path,
        ci,
        runs,
        out_path,
        regrid::Tuning::for_chunk_length(ci.chunk_length as u64),
        emit,
    )
}

/// The largest `regrid` child a stream sender encodes in memory (`regrid_layout`).
pub const MAX_REGRID_IN_MEMORY: u64 = 512 << 20;

/// A compressed `regrid` child's Data.db as encoded bytes, without writing anything: what
/// a stream sender carries for a child that may not keep a dead prefix and has no filler
/// (a fixed-width key for Cassandra 5.0.5+). Held in memory: the caller bounds it
/// (`MAX_REGRID_IN_MEMORY`).
pub fn regrid_layout(
    parent: &mut ParentData,
    runs: &[(u64, u64)],
    out_path: &Path,
) -> Result<DataLayout> {
    let ci = parent.compressed("regrid layout")?;
    let total: u64 = runs.iter().map(|(a, b)| b - a).sum();
    let mut segments = Vec::new();
    let mut pos = 0u64;
    let head = regrid_chunks(parent, ci, runs, out_path, &mut |bytes, lens| {
        // One segment a chunk, as the stream's layout carries them.
        let at = pos;
        let mut o = 0usize;
        for &n in lens {
            let n = n as usize;
            push_bytes(&mut segments, &mut pos, bytes[o..o + n].to_vec());
            o += n;
        }
        Ok(at)
    })?;
    Ok(DataLayout {
        segments,
        offsets: ChildOffsets {
            head,
            ..Default::default()
        },
        data_length: total,
        file_size: pos,
        layout: Layout::Regrid,
        fallback: None,
        interior: None,
        pad: 0,
    })
}

/// `regrid`: the partitions of `runs` (parent byte ranges) laid back to back from position
/// 0 into a fresh chunk grid (compressed) or a fresh file with a fresh CRC.db
/// (uncompressed). Partition bytes are position-independent (promoted-index offsets are
/// partition-relative), so no row is deserialised.
pub fn write_regrid(
    parent: &mut ParentData,
    runs: &[(u64, u64)],
    combine_digest: bool,
    out_path: &Path,
) -> Result<DataResult> {
    let mut out = Out::create(out_path, combine_digest)?.throttled(parent.throttle.clone());
    let total: u64 = runs.iter().map(|(a, b)| b - a).sum();
    match parent.compression {
        Some(ci) => {
            let offsets = regrid_chunks(parent, ci, runs, out_path, &mut |bytes, _| {
                let at = out.pos;
                out.write(bytes)?;
                out.reencoded += bytes.len() as u64;
                Ok(at)
            })?;
            let Written {
                file,
                file_size,
                digest,
                shared,
                copied,
                reencoded,
                ..
            } = out.finish()?;
            Ok(DataResult {
                offsets: ChildOffsets {
                    head: offsets,
                    ..Default::default()
                },
                file: Some(file),
                data_length: total,
                file_size,
                crc: None,
                combined_digest: digest,
                layout: Some(Layout::Regrid),
                fallback: None,
                bytes_shared: shared,
                bytes_copied: copied,
                bytes_reencoded: reencoded,
            })
        }
        None => {
            let unit = parent
                .crc
                .as_ref()
                .map_or(64 * 1024, |c| c.chunk_size as u64);
            let mut crcs = Vec::new();
            let mut block = crc32fast::Hasher::new();
            let mut in_block = 0u64;
            // Every byte of a regrid child gets a fresh CRC: check the parent's first.
            for &(first, end) in runs {
                parent.check_parent_blocks(first, end)?;
            }
            for &(first, end) in runs {
                let mut pos = first;
                while pos < end {
                    let n = (end - pos).min(unit - in_block);
                    let b = parent.read_at(pos, n as usize)?;
                    out.write(&b)?;
                    out.reencoded += n;
                    block.update(&b);
                    in_block += n;
                    pos += n;
                    if in_block == unit {
                        crcs.push(
                            std::mem::replace(&mut block, crc32fast::Hasher::new()).finalize(),
                        );
                        in_block = 0;
                    }
                }
            }
            if in_block > 0 {
                crcs.push(block.finalize());
            }
            let Written {
                file,
                file_size,
                digest,
                shared,
                copied,
                reencoded,
                ..
            } = out.finish()?;
            Ok(DataResult {
                offsets: ChildOffsets::default(),
                file: Some(file),
                data_length: total,
                file_size,
                crc: parent.crc.as_ref().map(|c| ChunkChecksums {
                    chunk_size: c.chunk_size,
                    crcs,
                }),
                combined_digest: digest,
                layout: Some(Layout::Regrid),
                fallback: None,
                bytes_shared: shared,
                bytes_copied: copied,
                bytes_reencoded: reencoded,
            })
        }
    }
}
