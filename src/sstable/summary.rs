//! Summary.db, the sampled index (`io/sstable/indexsummary/IndexSummary.java`).
//!
//! Header big-endian: minIndexInterval, entry count, offheap size (= count*4 + entries
//! bytes, int64), samplingLevel, sizeAtFullSampling. Then — little-endian, a dump of the
//! builder's native-order memory — one int32 offset per entry (measured from the start of
//! the offsets array) and the entries: raw key bytes + int64 Index.db position. Last, first
//! and last key with int32 big-endian lengths.

use std::path::Path;

use super::bytes::{Put, Reader};
use super::error::Result;

/// `Downsampling.BASE_SAMPLING_LEVEL`: full sampling.
pub const BASE_SAMPLING_LEVEL: i32 = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryEntry {
    pub key: Vec<u8>,
    /// Offset of this key's entry in Index.db.
    pub index_position: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub min_index_interval: i32,
    pub sampling_level: i32,
    pub size_at_full_sampling: i32,
    pub entries: Vec<SummaryEntry>,
    pub first_key: Vec<u8>,
    pub last_key: Vec<u8>,
}

impl Summary {
    pub fn parse(file: &Path, bytes: &[u8]) -> Result<Summary> {
        let mut r = Reader::new(file, bytes);
        let at = r.offset();
        let min_index_interval = r.i32("minIndexInterval")?;
        if min_index_interval <= 0 {
            return Err(r.corrupt_at(
                at,
                format!("minIndexInterval: expected > 0, found {min_index_interval}"),
            ));
        }
        let at = r.offset();
        let count = r.count("summary entry count")?;
        let offheap = r.i64("offheap size")?;
        let at_level = r.offset();
        let sampling_level = r.i32("samplingLevel")?;
        if !(1..=BASE_SAMPLING_LEVEL).contains(&sampling_level) {
            return Err(r.corrupt_at(
                at_level,
                format!("samplingLevel: expected 1..=128, found {sampling_level}"),
            ));
        }
        let size_at_full_sampling = r.i32("sizeAtFullSampling")?;
        let offsets_start = r.pos();
        let offsets_len = count
            .checked_mul(4)
            .filter(|n| *n <= r.remaining())
            .ok_or_else(|| {
                r.corrupt_at(
                    at,
                    format!(
                        "entry count {count} cannot fit in the {} bytes left",
                        r.remaining()
                    ),
                )
            })?;
        let entries_len = u64::try_from(offheap)
            .ok()
            .and_then(|o| o.checked_sub(offsets_len as u64))
            .filter(|n| *n <= (r.remaining() - offsets_len) as u64)
            .ok_or_else(|| {
                r.corrupt_at(
                    at + 4,
                    format!("offheap size {offheap}: expected entry count*4 ({offsets_len}) plus entry bytes within the file"),
                )
            })? as usize;
        let mut offsets = Vec::with_capacity(count);
        for _ in 0..count {
            offsets.push(r.i32_le("summary entry offset")?);
        }
        let region_end = offsets_len + entries_len;
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let start = offsets[i];
            let end = if i + 1 < count {
                offsets[i + 1] as i64
            } else {
                region_end as i64
            };
            // Each entry is at least its 8-byte Index.db position.
            if (start as i64) < offsets_len as i64
                || end - (start as i64) < 8
                || end > region_end as i64
            {
                return Err(r.corrupt_at(
                    (offsets_start + 4 * i) as u64,
                    format!(
                        "summary offset {i} = {start}: expected entries to lie in [{offsets_len}, {region_end}) with at least 8 bytes each"
                    ),
                ));
            }
            let mut er = Reader::with_base(
                file,
                &bytes[offsets_start + start as usize..offsets_start + end as usize],
                (offsets_start + start as usize) as u64,
            );
            let key = er
                .bytes((end - start as i64 - 8) as usize, "summary key")?
                .to_vec();
            let index_position = er.i64_le("summary Index.db position")?;
            entries.push(SummaryEntry {
                key,
                index_position,
            });
        }
        r.seek(offsets_start + region_end)?;
        let n = r.count("first key length")?;
        let first_key = r.bytes(n, "first key")?.to_vec();
        let n = r.count("last key length")?;
        let last_key = r.bytes(n, "last key")?.to_vec();
        r.expect_end("the last key")?;
        Ok(Summary {
            min_index_interval,
            sampling_level,
            size_at_full_sampling,
            entries,
            first_key,
            last_key,
        })
    }

    pub fn serialize(&self) -> Vec<u8> {
        let count = self.entries.len();
        let entries_len: usize = self.entries.iter().map(|e| e.key.len() + 8).sum();
        let mut out = Vec::with_capacity(
            24 + count * 4 + entries_len + self.first_key.len() + self.last_key.len() + 8,
        );
        out.put_i32(self.min_index_interval);
        out.put_i32(count as i32);
        out.put_i64((count * 4 + entries_len) as i64);
        out.put_i32(self.sampling_level);
        out.put_i32(self.size_at_full_sampling);
        let mut off = count * 4;
        for e in &self.entries {
            out.extend_from_slice(&(off as i32).to_le_bytes());
            off += e.key.len() + 8;
        }
        for e in &self.entries {
            out.extend_from_slice(&e.key);
            out.extend_from_slice(&e.index_position.to_le_bytes());
        }
        out.put_i32(self.first_key.len() as i32);
        out.extend_from_slice(&self.first_key);
        out.put_i32(self.last_key.len() as i32);
        out.extend_from_slice(&self.last_key);
        out
    }
}

/// Builds a full-sampling summary while Index.db entries are written: entry `i` is sampled
/// when `i % minIndexInterval == 0` (`IndexSummaryBuilder`, full sampling).
pub struct SummaryBuilder {
    min_index_interval: i32,
    entries: Vec<SummaryEntry>,
    keys: u64,
    first_key: Option<Vec<u8>>,
    last_key: Vec<u8>,
}

impl SummaryBuilder {
    pub fn new(min_index_interval: i32) -> Self {
        SummaryBuilder {
            min_index_interval: min_index_interval.max(1),
            entries: Vec::new(),
            keys: 0,
            first_key: None,
            last_key: Vec::new(),
        }
    }

    pub fn add(&mut self, key: &[u8], index_position: u64) {
        if self.keys.is_multiple_of(self.min_index_interval as u64) {
            self.entries.push(SummaryEntry {
                key: key.to_vec(),
                index_position: index_position as i64,
            });
        }
        if self.first_key.is_none() {
            self.first_key = Some(key.to_vec());
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.keys += 1;
    }

    /// The summary so far, without consuming the builder.
    pub fn snapshot(&self) -> Summary {
        Summary {
            min_index_interval: self.min_index_interval,
            sampling_level: BASE_SAMPLING_LEVEL,
            size_at_full_sampling: self.keys.div_ceil(self.min_index_interval as u64) as i32,
            entries: self.entries.clone(),
            first_key: self.first_key.clone().unwrap_or_default(),
            last_key: self.last_key.clone(),
        }
    }

    pub fn finish(self) -> Summary {
        Summary {
            min_index_interval: self.min_index_interval,
            sampling_level: BASE_SAMPLING_LEVEL,
            size_at_full_sampling: self.keys.div_ceil(self.min_index_interval as u64) as i32,
            entries: self.entries,
            first_key: self.first_key.unwrap_or_default(),
            last_key: self.last_key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_samples_and_round_trips() {
        let mut b = SummaryBuilder::new(2);
        for (i, k) in [b"k1", b"k2", b"k3"].iter().enumerate() {
            b.add(*k, i as u64 * 10);
        }
        let s = b.finish();
        assert_eq!(s.entries.len(), 2);
        assert_eq!(s.size_at_full_sampling, 2);
        assert_eq!(s.first_key, b"k1");
        assert_eq!(s.last_key, b"k3");
        let bytes = s.serialize();
        assert_eq!(Summary::parse(Path::new("s"), &bytes).unwrap(), s);
        for cut in [0, 10, 23, bytes.len() - 1] {
            assert!(
                Summary::parse(Path::new("s"), &bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }
}
