//! Digest.crc32 and CRC.db (`io/util/ChecksumWriter.java`, `io/util/DataIntegrityMetadata.java`).
//!
//! Digest.crc32 holds the decimal ASCII CRC32 of the whole Data.db file, no newline; it is
//! read with `Long.parseLong(readLine())`. CRC.db (uncompressed sstables only) holds the
//! int32 chunk size followed by one int32 CRC32 per chunk of Data.db.

use std::path::Path;

use super::bytes::{Put, Reader};
use super::error::{FormatError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest {
    pub crc32: u32,
}

impl Digest {
    pub fn parse(file: &Path, bytes: &[u8]) -> Result<Digest> {
        // readLine() stops at the first line terminator; anything after it is ignored by
        // Cassandra but would not be what Cassandra wrote.
        let text = std::str::from_utf8(bytes)
            .map_err(|_| FormatError::corrupt(file, Some(0), "expected decimal ASCII"))?;
        let v: u64 = text.parse().map_err(|_| {
            FormatError::corrupt(
                file,
                Some(0),
                format!("expected the decimal CRC32 of Data.db, found {text:?}"),
            )
        })?;
        let crc32 = u32::try_from(v).map_err(|_| {
            FormatError::corrupt(
                file,
                Some(0),
                format!("{v} is larger than a CRC32 (4294967295)"),
            )
        })?;
        Ok(Digest { crc32 })
    }

    pub fn serialize(&self) -> Vec<u8> {
        self.crc32.to_string().into_bytes()
    }
}

/// CRC.db: per-chunk CRC32s of an uncompressed Data.db.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkChecksums {
    /// Bytes of Data.db per CRC (the data writer's buffer, 64 KiB by default).
    pub chunk_size: u32,
    pub crcs: Vec<u32>,
}

impl ChunkChecksums {
    pub fn parse(file: &Path, bytes: &[u8]) -> Result<ChunkChecksums> {
        let mut r = Reader::new(file, bytes);
        let at = r.offset();
        let chunk_size = r.i32("chunk size")?;
        if chunk_size <= 0 {
            return Err(r.corrupt_at(at, format!("chunk size: expected > 0, found {chunk_size}")));
        }
        if !r.remaining().is_multiple_of(4) {
            return Err(r.corrupt(format!(
                "{} bytes of CRCs is not a whole number of int32s",
                r.remaining()
            )));
        }
        let mut crcs = Vec::with_capacity(r.remaining() / 4);
        while !r.is_empty() {
            crcs.push(r.u32("chunk CRC")?);
        }
        Ok(ChunkChecksums {
            chunk_size: chunk_size as u32,
            crcs,
        })
    }

    pub fn serialize(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.crcs.len() * 4);
        out.put_i32(self.chunk_size as i32);
        for c in &self.crcs {
            out.put_u32(*c);
        }
        out
    }

    /// Chunks needed to cover `data_len` bytes; CRC.db may carry one extra trailing entry
    /// for an empty final chunk (the same double sync as the compressed writer's).
    pub fn expected_chunks(&self, data_len: u64) -> u64 {
        data_len.div_ceil(self.chunk_size as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_round_trip_and_errors() {
        let d = Digest::parse(Path::new("d"), b"4294967295").unwrap();
        assert_eq!(d.crc32, u32::MAX);
        assert_eq!(d.serialize(), b"4294967295");
        assert!(Digest::parse(Path::new("d"), b"4294967296").is_err());
        assert!(Digest::parse(Path::new("d"), b"12x").is_err());
        assert!(Digest::parse(Path::new("d"), b"").is_err());
    }

    #[test]
    fn crc_round_trip() {
        let c = ChunkChecksums {
            chunk_size: 65536,
            crcs: vec![1, 2, 0xFFFF_FFFF],
        };
        assert_eq!(
            ChunkChecksums::parse(Path::new("c"), &c.serialize()).unwrap(),
            c
        );
        assert!(ChunkChecksums::parse(Path::new("c"), &c.serialize()[..9]).is_err());
    }
}
