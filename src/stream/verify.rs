//! Checking a file while it arrives, without buffering it: every compressed chunk's CRC32
//! trailer (`CompressedChunkReader`: CRC32 of the stored payload, big-endian, after it),
//! or every CRC.db block of an uncompressed Data.db (`ChecksumWriter`: CRC32 per
//! `chunk_size` bytes), and the CRC32 of the whole file.
//!
//! The whole-file CRC of a chunked file is combined from the chunk CRCs
//! (`crc32fast::Hasher::combine`), so every byte is hashed once. The verifier also knows
//! the last **boundary** (a chunk end) it verified, and the file CRC there: that pair is
//! the durable resume point the receiver records, so a resumed transfer restarts exactly
//! at a verified chunk. Pure: bytes in, verdicts out.

use crc32fast::Hasher;

/// How a file is cut into independently checked pieces.
#[derive(Debug, Clone)]
pub enum Chunking {
    /// No per-piece checksum (small components): a boundary every `step` bytes, only the
    /// whole-file CRC is checked.
    Plain { step: u64 },
    /// Compressed Data.db: chunk `i` spans `[offsets[i], offsets[i+1])` (the last one to the
    /// file end) and ends with its 4-byte CRC. Bytes before `offsets[0]` (CEP-66 head pad)
    /// are covered by the whole-file CRC only.
    Compressed { offsets: Vec<u64> },
    /// Uncompressed Data.db with CRC.db: block `i` is `[i*size, (i+1)*size)`.
    Blocks { size: u64, crcs: Vec<u32> },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error(
        "chunk {index} at offset {offset}: CRC32 stored {stored:08x}, computed {computed:08x}"
    )]
    Chunk {
        index: u64,
        offset: u64,
        stored: u32,
        computed: u32,
    },
    #[error("more bytes than the declared size {size}")]
    TooLong { size: u64 },
    #[error("whole-file CRC32: manifest says {expected:08x}, received bytes give {computed:08x}")]
    File { expected: u32, computed: u32 },
    #[error("{0}")]
    Layout(String),
}

/// A verified prefix: `offset` bytes with CRC32 `crc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Boundary {
    pub offset: u64,
    pub crc: u32,
}

pub struct Verifier {
    chunking: Chunking,
    size: u64,
    /// Bytes seen so far.
    pos: u64,
    /// CRC of `[0, boundary.offset)`.
    boundary: Boundary,
    /// Current piece: its index, start, end, and running CRC of its payload.
    piece: u64,
    start: u64,
    end: u64,
    payload: Hasher,
    /// Trailer bytes of the current compressed chunk seen so far.
    trailer: [u8; 4],
    /// Chunks or CRC.db blocks whose CRC matched.
    checked: u64,
}

impl Verifier {
    /// Checks the layout against the declared `size` and resumes at `from` (a boundary the
    /// receiver recorded earlier, or zero).
    pub fn new(chunking: Chunking, size: u64, from: Boundary) -> Result<Verifier, VerifyError> {
        match &chunking {
            Chunking::Plain { step } if *step == 0 => {
                return Err(VerifyError::Layout("step 0".into()))
            }
            Chunking::Compressed { offsets } => {
                for w in offsets.windows(2) {
                    if w[1] < w[0] + 4 {
                        return Err(VerifyError::Layout(format!(
                            "chunk offsets {} then {}: a chunk needs at least its 4-byte CRC",
                            w[0], w[1]
                        )));
                    }
                }
                if let Some(last) = offsets.last() {
                    if size < last + 4 {
                        return Err(VerifyError::Layout(format!(
                            "last chunk starts at {last}, Data.db declares {size} bytes"
                        )));
                    }
                } else if size > 0 {
                    return Err(VerifyError::Layout(
                        "CompressionInfo.db has no chunks but Data.db is not empty".into(),
                    ));
                }
            }
            Chunking::Blocks { size: b, crcs } => {
                let n = size.div_ceil((*b).max(1));
                if *b == 0 || (crcs.len() as u64) < n || (crcs.len() as u64) > n + 1 {
                    return Err(VerifyError::Layout(format!(
                        "CRC.db has {} entries of {b} bytes, Data.db of {size} bytes needs {n}",
                        crcs.len()
                    )));
                }
            }
            Chunking::Plain { .. } => {}
        }
        let mut v = Verifier {
            chunking,
            size,
            pos: from.offset,
            boundary: from,
            piece: 0,
            start: 0,
            end: 0,
            payload: Hasher::new(),
            trailer: [0; 4],
            checked: 0,
        };
        v.locate(from.offset)?;
        Ok(v)
    }

    /// Sets the current piece to the one starting at `at`, which must be a boundary.
    fn locate(&mut self, at: u64) -> Result<(), VerifyError> {
        let (piece, start, end) = match &self.chunking {
            Chunking::Plain { step } => (at / step, at, (at + step).min(self.size)),
            Chunking::Compressed { offsets } => {
                let first = offsets.first().copied().unwrap_or(self.size);
                if offsets.is_empty() {
                    (u64::MAX, at, self.size)
                } else if at < first {
                    if at != 0 {
                        return Err(VerifyError::Layout(format!(
                            "resume offset {at} is inside the head pad"
                        )));
                    }
                    (u64::MAX, 0, first)
                } else {
                    let i = offsets.partition_point(|o| *o <= at).saturating_sub(1);
                    if offsets[i] != at && at != self.size {
                        return Err(VerifyError::Layout(format!(
                            "resume offset {at} is not a chunk boundary"
                        )));
                    }
                    let end = offsets.get(i + 1).copied().unwrap_or(self.size);
                    (i as u64, at, end)
                }
            }
            Chunking::Blocks { size, .. } => {
                if !at.is_multiple_of(*size) && at != self.size {
                    return Err(VerifyError::Layout(format!(
                        "resume offset {at} is not a CRC.db block boundary"
                    )));
                }
                (at / size, at, (at + size).min(self.size))
            }
        };
        self.piece = piece;
        self.start = start;
        self.end = end;
        self.payload = Hasher::new();
        Ok(())
    }

    pub fn boundary(&self) -> Boundary {
        self.boundary
    }

    pub fn chunks_checked(&self) -> u64 {
        self.checked
    }

    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Feeds the next bytes of the file.
    pub fn feed(&mut self, mut b: &[u8]) -> Result<(), VerifyError> {
        if self.pos + b.len() as u64 > self.size {
            return Err(VerifyError::TooLong { size: self.size });
        }
        while !b.is_empty() {
            let take = ((self.end - self.pos) as usize).min(b.len());
            let (now, rest) = b.split_at(take);
            match &self.chunking {
                Chunking::Compressed { .. } if self.piece != u64::MAX => {
                    // Payload bytes go to the chunk hasher, the last 4 to the trailer.
                    let payload_end = self.end - 4;
                    let in_payload = (payload_end.saturating_sub(self.pos) as usize).min(now.len());
                    self.payload.update(&now[..in_payload]);
                    for (k, byte) in now[in_payload..].iter().enumerate() {
                        let t = (self.pos + (in_payload + k) as u64 - payload_end) as usize;
                        self.trailer[t] = *byte;
                    }
                }
                _ => self.payload.update(now),
            }
            self.pos += take as u64;
            b = rest;
            if self.pos == self.end {
                self.close_piece()?;
                if self.pos < self.size {
                    self.locate(self.pos)?;
                }
            }
        }
        Ok(())
    }

    fn close_piece(&mut self) -> Result<(), VerifyError> {
        let payload = std::mem::take(&mut self.payload);
        let len = self.end - self.start;
        let mut file = Hasher::new_with_initial_len(self.boundary.crc, self.boundary.offset);
        match &self.chunking {
            Chunking::Compressed { .. } if self.piece != u64::MAX => {
                let computed = payload.finalize();
                let stored = u32::from_be_bytes(self.trailer);
                if computed != stored {
                    return Err(VerifyError::Chunk {
                        index: self.piece,
                        offset: self.start,
                        stored,
                        computed,
                    });
                }
                self.checked += 1;
                file.combine(&Hasher::new_with_initial_len(computed, len - 4));
                file.update(&self.trailer);
            }
            Chunking::Blocks { crcs, .. } => {
                let computed = payload.finalize();
                let stored = crcs[self.piece as usize];
                if computed != stored {
                    return Err(VerifyError::Chunk {
                        index: self.piece,
                        offset: self.start,
                        stored,
                        computed,
                    });
                }
                self.checked += 1;
                file.combine(&Hasher::new_with_initial_len(computed, len));
            }
            _ => {
                let c = payload.finalize();
                file.combine(&Hasher::new_with_initial_len(c, len));
            }
        }
        self.boundary = Boundary {
            offset: self.end,
            crc: file.finalize(),
        };
        Ok(())
    }

    /// After the last byte: the whole-file CRC must be the manifest's.
    pub fn finish(&self, expected: u32) -> Result<u32, VerifyError> {
        if self.pos != self.size || self.boundary.offset != self.size {
            return Err(VerifyError::Layout(format!(
                "file ends at {} of {} declared bytes",
                self.pos, self.size
            )));
        }
        if self.boundary.crc != expected {
            return Err(VerifyError::File {
                expected,
                computed: self.boundary.crc,
            });
        }
        Ok(self.boundary.crc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A compressed-looking file: a 5-byte head pad then chunks with CRC trailers.
    fn chunked(payloads: &[&[u8]], pad: usize) -> (Vec<u8>, Vec<u64>) {
        let mut f = vec![0u8; pad];
        let mut offsets = Vec::new();
        for p in payloads {
            offsets.push(f.len() as u64);
            f.extend_from_slice(p);
            f.extend_from_slice(&crc32fast::hash(p).to_be_bytes());
        }
        (f, offsets)
    }

    #[test]
    fn accepts_good_chunks_in_any_slicing_and_combines_the_file_crc() {
        let (f, offsets) = chunked(&[b"hello", b"", b"chunky world", b"x"], 5);
        for step in [1, 2, 3, 7, 100] {
            let mut v = Verifier::new(
                Chunking::Compressed {
                    offsets: offsets.clone(),
                },
                f.len() as u64,
                Boundary::default(),
            )
            .unwrap();
            for piece in f.chunks(step) {
                v.feed(piece).unwrap();
            }
            assert_eq!(v.finish(crc32fast::hash(&f)).unwrap(), crc32fast::hash(&f));
        }
    }

    #[test]
    fn a_flipped_payload_or_trailer_byte_names_its_chunk() {
        let (f, offsets) = chunked(&[b"hello", b"chunky world"], 0);
        for i in 0..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x40;
            let mut v = Verifier::new(
                Chunking::Compressed {
                    offsets: offsets.clone(),
                },
                g.len() as u64,
                Boundary::default(),
            )
            .unwrap();
            let e = v.feed(&g).unwrap_err();
            let want = if i < 9 { 0 } else { 1 };
            assert!(
                matches!(e, VerifyError::Chunk { index, .. } if index == want),
                "{e}"
            );
        }
    }

    #[test]
    fn resumes_at_a_recorded_boundary() {
        let (f, offsets) = chunked(&[b"aaaa", b"bbbbbbbb", b"cc"], 3);
        let ch = || Chunking::Compressed {
            offsets: offsets.clone(),
        };
        let mut v = Verifier::new(ch(), f.len() as u64, Boundary::default()).unwrap();
        // A cut in the middle of chunk 1: the boundary is the end of chunk 0.
        v.feed(&f[..offsets[1] as usize + 3]).unwrap();
        let b = v.boundary();
        assert_eq!(b.offset, offsets[1]);
        let mut w = Verifier::new(ch(), f.len() as u64, b).unwrap();
        w.feed(&f[b.offset as usize..]).unwrap();
        assert_eq!(w.finish(crc32fast::hash(&f)).unwrap(), crc32fast::hash(&f));
        assert!(Verifier::new(ch(), f.len() as u64, Boundary { offset: 1, crc: 0 }).is_err());
        assert!(Verifier::new(
            ch(),
            f.len() as u64,
            Boundary {
                offset: offsets[1] + 1,
                crc: 0
            }
        )
        .is_err());
    }

    #[test]
    fn crc_db_blocks_and_plain_files() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let crcs: Vec<u32> = data.chunks(256).map(crc32fast::hash).collect();
        let mut v = Verifier::new(
            Chunking::Blocks {
                size: 256,
                crcs: crcs.clone(),
            },
            1000,
            Boundary::default(),
        )
        .unwrap();
        v.feed(&data[..300]).unwrap();
        assert_eq!(v.boundary().offset, 256);
        v.feed(&data[300..]).unwrap();
        v.finish(crc32fast::hash(&data)).unwrap();
        let mut bad = data.clone();
        bad[600] ^= 1;
        let mut v = Verifier::new(
            Chunking::Blocks { size: 256, crcs },
            1000,
            Boundary::default(),
        )
        .unwrap();
        assert!(matches!(
            v.feed(&bad).unwrap_err(),
            VerifyError::Chunk { index: 2, .. }
        ));

        let mut p = Verifier::new(Chunking::Plain { step: 64 }, 1000, Boundary::default()).unwrap();
        p.feed(&data).unwrap();
        assert!(matches!(p.finish(1).unwrap_err(), VerifyError::File { .. }));
        assert!(p.feed(b"x").is_err(), "past the declared size");
    }

    #[test]
    fn layouts_that_do_not_fit_the_size_are_refused() {
        assert!(Verifier::new(
            Chunking::Compressed {
                offsets: vec![0, 2]
            },
            10,
            Boundary::default()
        )
        .is_err());
        assert!(Verifier::new(
            Chunking::Compressed {
                offsets: vec![0, 8]
            },
            10,
            Boundary::default()
        )
        .is_err());
        assert!(Verifier::new(
            Chunking::Blocks {
                size: 10,
                crcs: vec![0]
            },
            25,
            Boundary::default()
        )
        .is_err());
    }
}
