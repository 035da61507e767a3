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

use super::plan::{Geometry, Layout};
use crate::io::{copy, reflink};
use crate::sstable::checksum::ChunkChecksums;
use crate::sstable::compression::{Codec, CompressionInfo};
use crate::sstable::data::DataReader;
use crate::sstable::lz4::{self, LengthTarget};
use crate::sstable::{FormatError, Result};

/// CEP-66's head-pad alignment: the padded layout keeps chunks at their source offset
/// modulo 64 KiB.
pub const PAD_ALIGNMENT: u64 = 64 * 1024;

/// What writing one child's Data.db produced.
#[derive(Debug, Clone, Default)]
pub struct DataResult {
    /// Child chunk offsets (compressed parents).
    pub offsets: Vec<u64>,
    pub data_length: u64,
    pub file_size: u64,
    /// CRC.db of the child (uncompressed parents with a CRC.db).
    pub crc: Option<ChunkChecksums>,
    /// CRC32 of the whole Data.db, when derived from chunk CRCs (`--digest combine`).
    pub combined_digest: Option<u32>,
    pub layout: Option<Layout>,
    pub fallback_reason: Option<String>,
    pub bytes_shared: u64,
    pub bytes_copied: u64,
    pub bytes_reencoded: u64,
}

/// The parent's Data.db opened for reading chunks and ranges.
pub struct ParentData {
    pub path: std::path::PathBuf,
    pub file: File,
    pub file_size: u64,
    pub reader: DataReader,
    pub compression: Option<CompressionInfo>,
    pub crc: Option<ChunkChecksums>,
}

impl ParentData {
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
        })
    }

    fn write(&mut self, b: &[u8]) -> Result<()> {
        self.file
            .write_all_at(b, self.pos)
            .map_err(|e| FormatError::io(self.path, e))?;
        if let Some(d) = &mut self.digest {
            d.update(b);
        }
        self.pos += b.len() as u64;
        Ok(())
    }

    /// A chunk cleave encoded: payload then its big-endian CRC32.
    fn chunk(&mut self, payload: &[u8]) -> Result<u64> {
        let at = self.pos;
        self.write(payload)?;
        self.write(&crc32fast::hash(payload).to_be_bytes())?;
        self.reencoded += payload.len() as u64 + 4;
        Ok(at)
    }

    /// Parent bytes `[src, src+len)` placed at the current position: whole blocks shared
    /// when `block > 0` and the offsets are congruent, partial blocks copied.
    fn parent_range(&mut self, parent: &File, src: u64, len: u64, block: u64) -> Result<()> {
        let dst = self.pos;
        let map_io = |e: std::io::Error| FormatError::io(self.path, e);
        if block == 0 || src % block != dst % block || self.clone_refusal.is_some() {
            copy::copy_range(parent, src, len, &self.file, dst).map_err(map_io)?;
            self.copied += len;
        } else {
            let head = ((block - dst % block) % block).min(len);
            let body = (len - head) / block * block;
            let tail = len - head - body;
            copy::copy_range(parent, src, head, &self.file, dst).map_err(map_io)?;
            let mut copied = head + tail;
            if body > 0 {
                match reflink::clone_range(parent, src + head, body, &self.file, dst + head) {
                    Ok(()) => self.shared += body,
                    Err(refusal) => {
                        // The probe said yes but this range was refused: copy it and say so.
                        self.clone_refusal = Some(refusal);
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

    fn finish(self) -> Result<Written> {
        self.file
            .sync_all()
            .map_err(|e| FormatError::io(self.path, e))?;
        // Written and durable: keep it out of the page cache (Cassandra itself does not
        // fadvise writes, but nothing reads these bytes soon and they would evict hot pages).
        crate::io::fs::drop_cache(&self.file, 0, 0);
        Ok(Written {
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
    ci.codec().compress(file, content, &mut out)?;
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
    Ok(out)
}

/// The extra chunk after a child whose `dataLength` is a multiple of the chunk length:
/// an empty chunk, except for Noop whose empty payload would trip `Chunk`'s `length > 0`
/// assertion — a one-byte chunk past `dataLength` is never read.
fn extra_chunk(file: &Path, ci: &CompressionInfo) -> Result<Vec<u8>> {
    if ci.codec() == Codec::Noop {
        return Ok(vec![0]);
    }
    encode_chunk(file, ci, &[])
}

/// Parent file offset where chunk `i` ends (its CRC included).
fn chunk_end(ci: &CompressionInfo, i: u64, file_size: u64) -> u64 {
    ci.offsets.get(i as usize + 1).copied().unwrap_or(file_size)
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
        let start = ci.offsets[i as usize];
        let end = chunk_end(ci, i, parent.file_size);
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

/// A compressed child in `aligned`, `padded` or `copy`. `want` is the requested layout,
/// `block` the reflink unit (0: the target cannot share, and `no_share_reason` says why).
#[allow(clippy::too_many_arguments)]
pub fn write_compressed(
    parent: &mut ParentData,
    g: &Geometry,
    end_position: u64,
    want: Layout,
    allow_padded: bool,
    block: u64,
    no_share_reason: Option<&str>,
    combine_digest: bool,
    out_path: &Path,
) -> Result<DataResult> {
    // Borrowed, not cloned: the offsets are 8 bytes a chunk of the parent.
    let ci = parent.compression.as_ref().ok_or_else(|| {
        FormatError::corrupt(
            &parent.path,
            None,
            "compressed layout on an uncompressed parent",
        )
    })?;
    let l = ci.chunk_length as u64;
    let (k, j) = (g.first_chunk, g.last_chunk);
    let dead = g.dead_prefix as usize;
    // First chunk: zero-filled dead prefix, then live bytes up to the chunk's end (or the
    // child's end when it holds the whole child).
    let first_live_end = if j == k {
        (end_position - k * l) as usize
    } else {
        l as usize
    };
    let mut first = vec![0u8; dead];
    {
        let c = parent.reader.chunk(k as usize)?;
        if c.len() < first_live_end {
            return Err(FormatError::corrupt(
                &parent.path,
                Some(ci.offsets[k as usize]),
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
                Some(ci.offsets[j as usize]),
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
        Some((ci.offsets[k as usize + 1], ci.offsets[j as usize]))
    } else {
        None
    };

    // Decide the layout and the first chunk's encoding.
    let mut layout = want;
    let mut reason: Option<String> = None;
    let mut pad = 0u64;
    let max_ok = |len: usize| {
        ci.max_compressed_length
            .is_none_or(|m| (len as u64) < m as u64)
    };
    let mut first_payload: Option<Vec<u8>> = None;
    if matches!(want, Layout::Aligned | Layout::Padded) {
        if let Some((s1, _)) = interior {
            if block == 0 {
                layout = Layout::Copy;
                reason = Some(
                    no_share_reason
                        .unwrap_or("the target cannot share extents")
                        .to_string(),
                );
            } else if ci.codec() != Codec::Lz4 {
                layout = Layout::Copy;
                reason = Some(format!("{want:?} needs LZ4 chunks to tune the first chunk's length; the parent uses {}", ci.compressor).to_lowercase());
            } else {
                if want == Layout::Aligned {
                    let t = LengthTarget::Residue {
                        add: 4,
                        modulus: block as usize,
                        residue: (s1 % block) as usize,
                    };
                    first_payload =
                        lz4::encode_tuned(dead, &first[dead..], t).filter(|p| max_ok(p.len()));
                    if first_payload.is_none() {
                        reason = Some(format!(
                            "no LZ4 encoding of the first chunk (dead prefix {dead} bytes) puts the next chunk at offset {} mod {block}",
                            s1 % block
                        ));
                        layout = if allow_padded {
                            Layout::Padded
                        } else {
                            Layout::Copy
                        };
                    }
                }
                if layout == Layout::Padded {
                    let s0 = ci.offsets[k as usize];
                    let exact = (s1 - s0 - 4) as usize;
                    match lz4::encode_tuned(dead, &first[dead..], LengthTarget::Exact(exact))
                        .filter(|p| max_ok(p.len()))
                    {
                        Some(p) => {
                            first_payload = Some(p);
                            pad = s0 % PAD_ALIGNMENT;
                        }
                        None => {
                            let why = format!("no LZ4 encoding of the first chunk has its original length {exact}");
                            reason = Some(match reason {
                                Some(r) => format!("{r}; {why}"),
                                None => why,
                            });
                            layout = Layout::Copy;
                        }
                    }
                }
            }
        }
    }
    let first_payload = match first_payload {
        Some(p) => p,
        None => encode_chunk(out_path, ci, &first)?,
    };

    let mut out = Out::create(out_path, combine_digest)?;
    let mut offsets = Vec::with_capacity((j - k + 2) as usize);
    if pad > 0 {
        // CEP-66's head pad: zeros before offsets[0], never read by a non-mmap reader.
        out.write(&vec![0u8; pad as usize])?;
        out.copied += pad;
    }
    offsets.push(out.chunk(&first_payload)?);
    if let Some((s1, sj)) = interior {
        let d1 = out.pos;
        for i in k + 1..j {
            offsets.push(d1 + (ci.offsets[i as usize] - s1));
        }
        let share_block = if layout == Layout::Copy { 0 } else { block };
        // The digest of the interior comes from its stored CRCs; do not hash it as written.
        let digest = out.digest.take();
        out.parent_range(&parent.file, s1, sj - s1, share_block)?;
        out.digest = digest;
        if let Some(d) = out.digest.as_mut() {
            combine_interior(d, parent, ci, k + 1, j - 1)?;
        }
    }
    if let Some(last) = &last {
        let p = encode_chunk(out_path, ci, last)?;
        offsets.push(out.chunk(&p)?);
    }
    if g.extra_chunk {
        let p = extra_chunk(out_path, ci)?;
        offsets.push(out.chunk(&p)?);
    }
    let Written {
        file_size,
        digest,
        shared,
        copied,
        reencoded,
        refusal,
    } = out.finish()?;
    if let Some(r) = refusal {
        reason = Some(format!("a clone was refused mid-way, copied instead: {r}"));
    }
    Ok(DataResult {
        offsets,
        data_length: g.data_length,
        file_size,
        crc: None,
        combined_digest: digest,
        layout: Some(layout),
        fallback_reason: reason,
        bytes_shared: shared,
        bytes_copied: copied,
        bytes_reencoded: reencoded,
    })
}

/// An uncompressed child cut at a CRC-block-aligned base (`g.base`): the dead prefix is
/// zero-filled, the file ends at the last partition's end, full CRC blocks keep the
/// parent's CRC.db entries and only the first and last are recomputed.
#[allow(clippy::too_many_arguments)]
pub fn write_uncompressed(
    parent: &ParentData,
    g: &Geometry,
    unit: u64,
    want: Layout,
    block: u64,
    no_share_reason: Option<&str>,
    combine_digest: bool,
    out_path: &Path,
) -> Result<DataResult> {
    let dl = g.data_length;
    let first_len = dl.min(unit);
    // The blocks whose CRC the child recomputes: the first, and a partial last one.
    parent.check_parent_blocks(g.base + g.dead_prefix, g.base + first_len)?;
    if dl > unit && !dl.is_multiple_of(unit) {
        parent.check_parent_blocks(g.base + dl - 1, g.base + dl)?;
    }
    let mut first = vec![0u8; g.dead_prefix as usize];
    first.extend_from_slice(
        &parent.read_at(g.base + g.dead_prefix, (first_len - g.dead_prefix) as usize)?,
    );
    let mut out = Out::create(out_path, false)?;
    out.write(&first)?;
    out.reencoded += first.len() as u64;
    let mut layout = if want == Layout::Copy {
        Layout::Copy
    } else {
        Layout::Aligned
    };
    let mut reason = None;
    if dl > unit {
        let share = if layout == Layout::Copy {
            0
        } else if block == 0 {
            reason = no_share_reason.map(str::to_string);
            layout = Layout::Copy;
            0
        } else {
            block
        };
        out.parent_range(&parent.file, g.base + unit, dl - unit, share)?;
    }
    let Written {
        file_size,
        shared,
        copied,
        reencoded,
        refusal,
        ..
    } = out.finish()?;
    if let Some(r) = refusal {
        reason = Some(format!("a clone was refused mid-way, copied instead: {r}"));
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
        offsets: Vec::new(),
        data_length: dl,
        file_size,
        crc,
        combined_digest,
        layout: Some(layout),
        fallback_reason: reason,
        bytes_shared: shared,
        bytes_copied: copied,
        bytes_reencoded: reencoded,
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
    let mut out = Out::create(out_path, combine_digest)?;
    let total: u64 = runs.iter().map(|(a, b)| b - a).sum();
    match parent.compression.clone() {
        Some(ci) => {
            let l = ci.chunk_length as u64;
            let mut buf: Vec<u8> = Vec::with_capacity(l as usize);
            let mut offsets = Vec::new();
            for &(first, end) in runs {
                let mut pos = first;
                while pos < end {
                    let c = pos / l;
                    let chunk = parent.reader.chunk(c as usize)?;
                    let from = (pos - c * l) as usize;
                    let to = ((end - c * l) as usize).min(chunk.len());
                    if to <= from {
                        return Err(FormatError::corrupt(
                            &parent.path,
                            Some(ci.offsets[c as usize]),
                            format!(
                                "chunk {c} decodes to {} bytes, position {pos} needs more",
                                chunk.len()
                            ),
                        ));
                    }
                    let mut piece = &chunk[from..to];
                    pos += piece.len() as u64;
                    while !piece.is_empty() {
                        let take = piece.len().min(l as usize - buf.len());
                        buf.extend_from_slice(&piece[..take]);
                        piece = &piece[take..];
                        if buf.len() == l as usize {
                            let p = encode_chunk(out_path, &ci, &buf)?;
                            offsets.push(out.chunk(&p)?);
                            buf.clear();
                        }
                    }
                }
            }
            if !buf.is_empty() {
                let p = encode_chunk(out_path, &ci, &buf)?;
                offsets.push(out.chunk(&p)?);
            }
            if total.is_multiple_of(l) {
                let p = extra_chunk(out_path, &ci)?;
                offsets.push(out.chunk(&p)?);
            }
            let Written {
                file_size,
                digest,
                shared,
                copied,
                reencoded,
                ..
            } = out.finish()?;
            Ok(DataResult {
                offsets,
                data_length: total,
                file_size,
                crc: None,
                combined_digest: digest,
                layout: Some(Layout::Regrid),
                fallback_reason: None,
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
                file_size,
                digest,
                shared,
                copied,
                reencoded,
                ..
            } = out.finish()?;
            Ok(DataResult {
                offsets: Vec::new(),
                data_length: total,
                file_size,
                crc: parent.crc.as_ref().map(|c| ChunkChecksums {
                    chunk_size: c.chunk_size,
                    crcs,
                }),
                combined_digest: digest,
                layout: Some(Layout::Regrid),
                fallback_reason: None,
                bytes_shared: shared,
                bytes_copied: copied,
                bytes_reencoded: reencoded,
            })
        }
    }
}
