//! Cassandra's MurmurHash variants (`utils/MurmurHash.java`).
//!
//! `hash3_x64_128` is "almost" MurmurHash3: the 16-byte body blocks mask bytes with `& 0xff`
//! like the reference, but the tail bytes are sign-extended before shifting
//! (`((long) key.get(i)) << n`), so any tail byte >= 0x80 also sets the high bits.
//! Tokens (Murmur3Partitioner), Bloom filter indexes and sstcheck's key hash all use it.

const C1: u64 = 0x87c3_7b91_1142_53d5;
const C2: u64 = 0x4cf5_ad43_2745_937f;

#[inline]
fn fmix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// The sign-extended tail byte of Cassandra's variant.
#[inline]
fn sx(b: u8) -> u64 {
    b as i8 as i64 as u64
}

/// `MurmurHash.hash3_x64_128(key, 0, len, seed=0)`: `[h1, h2]`.
pub fn hash3_x64_128(key: &[u8]) -> [u64; 2] {
    let body = key.len() / 16 * 16;
    let mut s = Hash3State::default();
    s.absorb_blocks(&key[..body]);
    s.finish(&key[body..], key.len())
}

/// A partition key's `hash3_x64_128`, computed once and shared by everything that needs it:
/// the Murmur3 token (`h1`, `Murmur3Partitioner.getToken`), the Bloom filter's indexes
/// (`BloomFilter.indexes` from both words) and the key fingerprint (`h1`). A split hashes
/// each key once where it writes it and once where its check reads it back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyHash(pub [u64; 2]);

impl KeyHash {
    #[inline]
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(hash3_x64_128(key))
    }
}

/// `hash3_x64_128` in two steps: whole 16-byte blocks first (`absorb_blocks`), then the
/// rest and the length (`finish`). A search over keys that share a long prefix (the
/// dead-prefix filler of `sstable::filler`) absorbs the prefix once and clones the state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hash3State {
    h1: u64,
    h2: u64,
}

impl Hash3State {
    /// Mixes in `blocks`, whose length must be a multiple of 16 (a remainder is ignored:
    /// it belongs to `finish`).
    pub fn absorb_blocks(&mut self, blocks: &[u8]) {
        let (mut h1, mut h2) = (self.h1, self.h2);
        for block in blocks.chunks_exact(16) {
            let mut k1 = u64::from_le_bytes(block[0..8].try_into().unwrap_or([0; 8]));
            let mut k2 = u64::from_le_bytes(block[8..16].try_into().unwrap_or([0; 8]));
            k1 = k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
            h1 ^= k1;
            h1 = h1
                .rotate_left(27)
                .wrapping_add(h2)
                .wrapping_mul(5)
                .wrapping_add(0x52dc_e729);
            k2 = k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
            h2 ^= k2;
            h2 = h2
                .rotate_left(31)
                .wrapping_add(h1)
                .wrapping_mul(5)
                .wrapping_add(0x3849_5ab5);
        }
        (self.h1, self.h2) = (h1, h2);
    }

    /// The hash of the absorbed blocks followed by `rest` (any length: its whole blocks,
    /// then the sign-extended tail), for a key of `total_len` bytes.
    pub fn finish(mut self, rest: &[u8], total_len: usize) -> [u64; 2] {
        let body = rest.len() / 16 * 16;
        self.absorb_blocks(&rest[..body]);
        let (t1, t2) = tail_mix(&rest[body..]);
        let (mut h1, mut h2) = (self.h1 ^ t1, self.h2 ^ t2);
        h1 ^= total_len as u64;
        h2 ^= total_len as u64;
        h1 = h1.wrapping_add(h2);
        h2 = h2.wrapping_add(h1);
        h1 = fmix(h1);
        h2 = fmix(h2);
        h1 = h1.wrapping_add(h2);
        h2 = h2.wrapping_add(h1);
        [h1, h2]
    }
}

/// What the tail (the last `len % 16` bytes, sign-extended) XORs into `h1` and `h2`: the
/// same in `Hash3State::finish` and backwards in `key_block_for` (XOR is its own inverse).
fn tail_mix(tail: &[u8]) -> (u64, u64) {
    let mut k1: u64 = 0;
    let mut k2: u64 = 0;
    for i in (8..tail.len()).rev() {
        k2 ^= sx(tail[i]) << (8 * (i - 8));
    }
    for i in (0..tail.len().min(8)).rev() {
        k1 ^= sx(tail[i]) << (8 * i);
    }
    let m2 = if tail.len() > 8 {
        k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1)
    } else {
        0
    };
    let m1 = if tail.is_empty() {
        0
    } else {
        k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2)
    };
    (m1, m2)
}

/// The 16-byte block that, after the state `s` (the key's whole blocks before it) and
/// before `tail` (the key's last bytes, shorter than a block), gives a key of `total_len`
/// bytes whose `h1` is `h1`. Every step of `hash3_x64_128` is a bijection of the 128-bit
/// state once the other bytes are fixed: the block's two words set the state after it
/// freely, and the tail, the length and both `fmix` are invertible, so the block is solved
/// backwards from the wanted `(h1, h2 = 0)`. Used for dead-prefix fillers of `blob` keys
/// (`sstable::filler`), whose tokens must fall in a given window.
pub fn key_block_for(s: Hash3State, tail: &[u8], total_len: usize, h1: u64) -> [u8; 16] {
    let (i5, ic1, ic2) = (inverse(5), inverse(C1), inverse(C2));
    let (m1, m2) = (0xff51_afd7_ed55_8ccd_u64, 0xc4ce_b9fe_1a85_ec53_u64);
    let (im1, im2) = (inverse(m1), inverse(m2));
    let unfmix = |mut k: u64| {
        k ^= k >> 33;
        k = k.wrapping_mul(im2);
        k ^= k >> 33;
        k = k.wrapping_mul(im1);
        k ^= k >> 33;
        k
    };
    // Final state (h1, h2 = 0) back to the state after the block.
    let (f1, f2) = (h1, 0u64);
    let mut b2 = f2.wrapping_sub(f1);
    let mut b1 = f1.wrapping_sub(b2);
    b1 = unfmix(b1);
    b2 = unfmix(b2);
    b2 = b2.wrapping_sub(b1);
    b1 = b1.wrapping_sub(b2);
    b1 ^= total_len as u64;
    b2 ^= total_len as u64;
    let (t1, t2) = tail_mix(tail);
    b1 ^= t1;
    b2 ^= t2;
    // The block step backwards: (s.h1, s.h2) → (b1, b2).
    let x = b1
        .wrapping_sub(0x52dc_e729)
        .wrapping_mul(i5)
        .wrapping_sub(s.h2)
        .rotate_right(27);
    let k1m = x ^ s.h1;
    let y = b2
        .wrapping_sub(0x3849_5ab5)
        .wrapping_mul(i5)
        .wrapping_sub(b1)
        .rotate_right(31);
    let k2m = y ^ s.h2;
    let w1 = k1m.wrapping_mul(ic2).rotate_right(31).wrapping_mul(ic1);
    let w2 = k2m.wrapping_mul(ic1).rotate_right(33).wrapping_mul(ic2);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&w1.to_le_bytes());
    out[8..].copy_from_slice(&w2.to_le_bytes());
    out
}

/// The multiplicative inverse of an odd number modulo 2^64 (Newton's iteration).
fn inverse(a: u64) -> u64 {
    let mut x = a;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
    }
    x
}

/// `MurmurHash.hash2_64(key, 0, len, seed=0)`, MurmurHash2-64A with the same tail
/// sign-extension. Cassandra feeds it to the HyperLogLog++ cardinality sketch
/// (`MetadataCollector.addKey`).
pub fn hash2_64(key: &[u8]) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let n = key.len();
    let mut h: u64 = (n as u64).wrapping_mul(M);
    let mut blocks = key.chunks_exact(8);
    for block in &mut blocks {
        let mut k = u64::from_le_bytes(block.try_into().unwrap_or([0; 8]));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for i in (0..tail.len()).rev() {
            h ^= sx(tail[i]) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Vectors from sstable-format.md §2.1 (a direct port of the Java code, anchored on
    /// the well-known `token(int 1)`).
    #[test]
    fn cassandra_vectors() {
        let cases: [(&str, [i64; 2]); 4] = [
            ("00000001", [-4069959284402364209, 8758431505130184934]),
            ("ff", [-4442228696663692417, -6049531771631615289]),
            ("808182", [4805209697930042770, 1511889025670584172]),
            (
                "ffffffffffffffffffffffffffffffffff",
                [-4128212798341382003, 3989950299795791994],
            ),
        ];
        for (k, [a, b]) in cases {
            let h = hash3_x64_128(&hex(k));
            assert_eq!([h[0] as i64, h[1] as i64], [a, b], "key {k}");
        }
    }

    #[test]
    fn two_step_hash_equals_the_whole_key() {
        let key: Vec<u8> = (0..100u32).map(|i| (i * 37 + 200) as u8).collect();
        for n in [0usize, 1, 15, 16, 17, 31, 32, 33, 64, 99, 100] {
            let k = &key[..n];
            for cut in (0..=n).step_by(16) {
                let mut s = Hash3State::default();
                s.absorb_blocks(&k[..cut]);
                assert_eq!(s.finish(&k[cut..], n), hash3_x64_128(k), "n {n} cut {cut}");
            }
        }
    }

    #[test]
    fn a_block_is_solved_for_any_h1() {
        for (len, want) in [
            (16usize, 7u64),
            (17, u64::MAX),
            (40, 1 << 63),
            (255, 12345),
            (33, 0),
        ] {
            let mut key = vec![b'0'; len];
            let at = (len - 16) / 16 * 16;
            let mut s = Hash3State::default();
            s.absorb_blocks(&key[..at]);
            let b = key_block_for(s, &key[at + 16..], len, want);
            key[at..at + 16].copy_from_slice(&b);
            assert_eq!(hash3_x64_128(&key), [want, 0], "len {len}");
        }
    }
}
