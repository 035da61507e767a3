//! CompressionInfo.db and the chunk codecs (`io/compress/CompressionMetadata.java`).
//!
//! Layout: compressor class (writeUTF), option count + (key, value) pairs, chunk length,
//! `maxCompressedLength` (only `na`+), uncompressed `dataLength` (int64), chunk count, and
//! one int64 file offset per chunk. In Data.db each chunk is its payload followed by a
//! big-endian CRC32 of exactly the payload bytes; the last chunk's length comes from the
//! Data.db file size (`CompressionMetadata.chunkFor`), so a Data.db must end exactly after
//! its last CRC.

use std::io::Read;
use std::path::Path;

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
    pub offsets: Vec<u64>,
}

impl CompressionInfo {
    pub fn parse(file: &Path, bytes: &[u8], version: Version) -> Result<CompressionInfo> {
        let mut r = Reader::new(file, bytes);
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
        if r.remaining() != count * 8 {
            return Err(r.corrupt(format!(
                "chunk offsets: {count} chunks need {} bytes, {} remain",
                count * 8,
                r.remaining()
            )));
        }
        let needed = (data_length as u64).div_ceil(chunk_length as u64);
        if (count as u64) < needed {
            return Err(r.corrupt_at(
                at,
                format!("chunk count {count} is too small: data length {data_length} needs {needed} chunks of {chunk_length}"),
            ));
        }
        let mut offsets = Vec::with_capacity(count);
        let mut prev: Option<u64> = None;
        for i in 0..count {
            let at = r.offset();
            let o = r.i64("chunk offset")?;
            // Each chunk is at least its 4-byte CRC, so offsets strictly increase by >= 4.
            let ok = o >= 0 && prev.is_none_or(|p| o as u64 >= p + 4);
            if !ok {
                return Err(r.corrupt_at(
                    at,
                    format!(
                        "chunk offset {i} = {o}: expected >= {} (offsets increase by at least the 4-byte CRC)",
                        prev.map_or(0, |p| p + 4)
                    ),
                ));
            }
            offsets.push(o as u64);
            prev = Some(o as u64);
        }
        Ok(CompressionInfo {
            compressor,
            options,
            chunk_length: chunk_length as u32,
            max_compressed_length,
            data_length: data_length as u64,
            offsets,
        })
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

    pub fn serialize(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.offsets.len() * 8);
        self.serialize_header(&mut out);
        out.put_i64(self.data_length as i64);
        out.put_i32(self.offsets.len() as i32);
        for o in &self.offsets {
            out.put_i64(*o as i64);
        }
        out
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
    pub fn chunk_span(&self, i: usize, data_file_size: u64) -> (u64, u64) {
        let start = self.offsets[i];
        let end = self.offsets.get(i + 1).copied().unwrap_or(data_file_size);
        (start, end)
    }

    /// Checks what only the Data.db size can tell: the last chunk has room for its CRC.
    pub fn check_data_size(&self, file: &Path, data_file_size: u64) -> Result<()> {
        let last = *self.offsets.last().unwrap_or(&0);
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

    /// Whether a stored payload of this length is raw (`na`+: `length >= maxCompressedLength`,
    /// `CompressedChunkReader`), rather than compressor output.
    pub fn is_stored_raw(&self, payload_len: usize) -> bool {
        self.max_compressed_length
            .is_some_and(|m| payload_len as u64 >= m as u64)
    }
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
                return Err(FormatError::unsupported(
                    file,
                    Some(offset),
                    "ZstdCompressor chunks (cleave decodes LZ4, Snappy, Deflate and Noop)",
                ))
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
        out.clear();
        match self {
            Codec::Lz4 => {
                out.extend_from_slice(&(data.len() as i32).to_le_bytes());
                out.extend_from_slice(&lz4_flex::block::compress(data));
            }
            Codec::Noop => out.extend_from_slice(data),
            Codec::Snappy => {
                let v = snap::raw::Encoder::new().compress_vec(data).map_err(|e| {
                    FormatError::corrupt(file, None, format!("Snappy compression failed: {e}"))
                })?;
                out.extend_from_slice(&v);
            }
            Codec::Deflate => {
                use std::io::Write;
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).map_err(|e| FormatError::io(file, e))?;
                out.extend_from_slice(&e.finish().map_err(|e| FormatError::io(file, e))?);
            }
            Codec::Zstd | Codec::Unknown => {
                return Err(FormatError::unsupported(
                    file,
                    None,
                    "writing chunks with this compressor",
                ))
            }
        }
        Ok(())
    }
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
            offsets: vec![0, 100, 250],
        }
    }

    #[test]
    fn round_trip_both_layouts() {
        for v in ["md", "nb"] {
            let ci = sample(v);
            let bytes = ci.serialize();
            let back =
                CompressionInfo::parse(Path::new("c"), &bytes, Version::parse(v).unwrap()).unwrap();
            assert_eq!(back, ci);
            assert_eq!(back.serialize(), bytes);
        }
    }

    #[test]
    fn rejects_unordered_offsets_and_short_counts() {
        let mut ci = sample("nb");
        ci.offsets = vec![0, 300, 250];
        let e = CompressionInfo::parse(
            Path::new("c"),
            &ci.serialize(),
            Version::parse("nb").unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("chunk offset 2"), "{e}");
        let mut ci = sample("nb");
        ci.data_length = 16384 * 3 + 1;
        let e = CompressionInfo::parse(
            Path::new("c"),
            &ci.serialize(),
            Version::parse("nb").unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("too small"), "{e}");
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
        for c in [Codec::Lz4, Codec::Snappy, Codec::Deflate, Codec::Noop] {
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
}
