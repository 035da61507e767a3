//! Filter.db, the partition-key Bloom filter (`utils/BloomFilter.java`,
//! `utils/BloomFilterSerializer.java`, `utils/obs/OffHeapBitSet.java`).
//!
//! int32 hash count, int32 word count, then the bitset. In memory bit `i` is bit `i & 7`
//! of byte `i >> 3`. `na`+ dump those bytes as they are; `ma`..`me` wrote each 8-byte word
//! as a big-endian long of the little-endian-assembled word, i.e. every 8 bytes reversed.
//! Cassandra 4.1/5.0 cannot write that old layout correctly (sstable-format.md §7.4), so
//! cleave always writes a child's filter itself.

use std::path::Path;

use super::bytes::{Put, Reader};
use super::error::Result;
use super::murmur::KeyHash;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BloomFilter {
    pub hash_count: u32,
    /// The bitset in the in-memory (and `na`+ on-disk) byte order.
    pub bits: Vec<u8>,
}

/// `BloomCalculations.probs`: false-positive rate for `[bucketsPerElement][hashCount]`.
const PROBS: [&[f64]; 21] = [
    &[1.0],
    &[1.0, 1.0],
    &[1.0, 0.393, 0.400],
    &[1.0, 0.283, 0.237, 0.253],
    &[1.0, 0.221, 0.155, 0.147, 0.160],
    &[1.0, 0.181, 0.109, 0.092, 0.092, 0.101],
    &[1.0, 0.154, 0.0804, 0.0609, 0.0561, 0.0578, 0.0638],
    &[1.0, 0.133, 0.0618, 0.0423, 0.0359, 0.0347, 0.0364],
    &[1.0, 0.118, 0.0489, 0.0306, 0.024, 0.0217, 0.0216, 0.0229],
    &[
        1.0, 0.105, 0.0397, 0.0228, 0.0166, 0.0141, 0.0133, 0.0135, 0.0145,
    ],
    &[
        1.0, 0.0952, 0.0329, 0.0174, 0.0118, 0.00943, 0.00844, 0.00819, 0.00846,
    ],
    &[
        1.0, 0.0869, 0.0276, 0.0136, 0.00864, 0.0065, 0.00552, 0.00513, 0.00509,
    ],
    &[
        1.0, 0.08, 0.0236, 0.0108, 0.00646, 0.00459, 0.00371, 0.00329, 0.00314,
    ],
    &[
        1.0, 0.074, 0.0203, 0.00875, 0.00492, 0.00332, 0.00255, 0.00217, 0.00199, 0.00194,
    ],
    &[
        1.0, 0.0689, 0.0177, 0.00718, 0.00381, 0.00244, 0.00179, 0.00146, 0.00129, 0.00121, 0.0012,
    ],
    &[
        1.0, 0.0645, 0.0156, 0.00596, 0.003, 0.00183, 0.00128, 0.001, 0.000852, 0.000775, 0.000744,
    ],
    &[
        1.0, 0.0606, 0.0138, 0.005, 0.00239, 0.00139, 0.000935, 0.000702, 0.000574, 0.000505,
        0.00047, 0.000459,
    ],
    &[
        1.0, 0.0571, 0.0123, 0.00423, 0.00193, 0.00107, 0.000692, 0.000499, 0.000394, 0.000335,
        0.000302, 0.000287, 0.000284,
    ],
    &[
        1.0, 0.054, 0.0111, 0.00362, 0.00158, 0.000839, 0.000519, 0.00036, 0.000275, 0.000226,
        0.000198, 0.000183, 0.000176,
    ],
    &[
        1.0, 0.0513, 0.00998, 0.00312, 0.0013, 0.000663, 0.000394, 0.000264, 0.000194, 0.000155,
        0.000132, 0.000118, 0.000111, 0.000109,
    ],
    &[
        1.0, 0.0488, 0.00906, 0.0027, 0.00108, 0.00053, 0.000303, 0.000196, 0.00014, 0.000108,
        8.89e-05, 7.77e-05, 7.12e-05, 6.79e-05, 6.71e-05,
    ],
];

/// `optKPerBuckets`: the hash count with the lowest rate per row (first minimum wins).
fn opt_k(buckets: usize) -> usize {
    let row = PROBS[buckets];
    let mut best = 0;
    for j in 0..row.len() {
        if row[j] < row[best] {
            best = j;
        }
    }
    best.max(1)
}

/// `BloomCalculations.computeBloomSpec(20, fp)`: (hash count, buckets per element), or
/// `None` when `fp` is below what 20 buckets can give.
pub fn bloom_spec(fp: f64) -> Option<(usize, usize)> {
    let max_buckets = PROBS.len() - 1;
    if fp >= PROBS[2][1] {
        return Some((opt_k(2), 2));
    }
    let max_k = PROBS[max_buckets].len() - 1;
    if fp < PROBS[max_buckets][max_k] {
        return None;
    }
    let mut buckets = 2;
    let mut k = opt_k(2);
    while PROBS[buckets][k] > fp {
        buckets += 1;
        k = opt_k(buckets);
    }
    while PROBS[buckets][k - 1] <= fp {
        k -= 1;
    }
    Some((k, buckets))
}

impl BloomFilter {
    /// `FilterFactory.getFilter(n, fp)`: `n * bucketsPerElement + 20` bits, rounded up to
    /// whole 64-bit words. `None` for `fp >= 1` (no filter) or an unreachable `fp`.
    pub fn with_capacity(n: u64, fp: f64) -> Option<BloomFilter> {
        if fp.is_nan() || fp >= 1.0 {
            return None;
        }
        let (k, buckets) = bloom_spec(fp)?;
        let bits = n.max(1) * buckets as u64 + 20;
        let words = (bits - 1) / 64 + 1;
        Some(BloomFilter {
            hash_count: k as u32,
            bits: vec![0; (words * 8) as usize],
        })
    }

    pub fn parse(file: &Path, bytes: &[u8], old_format: bool) -> Result<BloomFilter> {
        let mut r = Reader::new(file, bytes);
        let at = r.offset();
        let hash_count = r.i32("hash count")?;
        if !(1..=64).contains(&hash_count) {
            return Err(r.corrupt_at(
                at,
                format!("hash count: expected 1..=64, found {hash_count}"),
            ));
        }
        let at = r.offset();
        let words = r.count("word count")?;
        if words == 0 || words.checked_mul(8) != Some(r.remaining()) {
            return Err(r.corrupt_at(
                at,
                format!(
                    "word count {words}: expected > 0 and exactly the {} bytes that follow / 8",
                    r.remaining()
                ),
            ));
        }
        let mut bits = r.rest().to_vec();
        if old_format {
            for w in bits.chunks_exact_mut(8) {
                w.reverse();
            }
        }
        Ok(BloomFilter {
            hash_count: hash_count as u32,
            bits,
        })
    }

    pub fn serialize(&self, old_format: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.bits.len());
        out.put_i32(self.hash_count as i32);
        out.put_i32((self.bits.len() / 8) as i32);
        if old_format {
            for w in self.bits.chunks_exact(8) {
                out.extend(w.iter().rev());
            }
        } else {
            out.extend_from_slice(&self.bits);
        }
        out
    }

    fn num_bits(&self) -> u64 {
        self.bits.len() as u64 * 8
    }

    /// `BloomFilter.indexes`: base = h1, inc = h0, `abs(base % bits)` with Java's signed
    /// remainder, base += inc (wrapping) per hash. `f` answers whether to go on.
    #[inline]
    fn for_each_index(
        hash_count: u32,
        num_bits: u64,
        hash: KeyHash,
        mut f: impl FnMut(u64) -> bool,
    ) -> bool {
        let [h0, h1] = hash.0;
        let bits = num_bits as i64;
        let mut base = h1 as i64;
        let inc = h0 as i64;
        for _ in 0..hash_count {
            let idx = (base % bits).unsigned_abs();
            if !f(idx) {
                return false;
            }
            base = base.wrapping_add(inc);
        }
        true
    }

    pub fn add(&mut self, key: &[u8]) {
        self.add_hash(KeyHash::of(key));
    }

    /// `add` of a key whose hash is already known (no allocation: the bits are set as the
    /// indexes come).
    pub fn add_hash(&mut self, hash: KeyHash) {
        let num_bits = self.num_bits();
        let bits = &mut self.bits;
        Self::for_each_index(self.hash_count, num_bits, hash, |i| {
            if let Some(b) = bits.get_mut((i >> 3) as usize) {
                *b |= 1 << (i & 7);
            }
            true
        });
    }

    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(KeyHash::of(key))
    }

    /// `may_contain` of a key whose hash is already known.
    pub fn may_contain_hash(&self, hash: KeyHash) -> bool {
        Self::for_each_index(self.hash_count, self.num_bits(), hash, |i| {
            self.bits
                .get((i >> 3) as usize)
                .is_some_and(|b| b & (1 << (i & 7)) != 0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_matches_cassandra() {
        assert_eq!(bloom_spec(0.01), Some((5, 10)));
        assert_eq!(bloom_spec(0.1), Some((3, 5)));
        assert_eq!(bloom_spec(0.001), Some((7, 15)));
        assert_eq!(bloom_spec(0.5), Some((1, 2)));
        assert_eq!(bloom_spec(1e-9), None);
    }

    #[test]
    fn both_layouts_round_trip_and_find_keys() {
        let mut f = BloomFilter::with_capacity(100, 0.01).unwrap();
        for i in 0u32..100 {
            f.add(&i.to_be_bytes());
        }
        for i in 0u32..100 {
            assert!(f.may_contain(&i.to_be_bytes()));
        }
        for old in [false, true] {
            let b = f.serialize(old);
            assert_eq!(BloomFilter::parse(Path::new("f"), &b, old).unwrap(), f);
        }
        assert_ne!(f.serialize(true), f.serialize(false));
        assert!(BloomFilter::parse(Path::new("f"), &f.serialize(false)[..20], false).is_err());
    }
}
