//! The key-set fingerprint every split is checked with: partition count, and XOR and
//! wrapping sum of the first 64 bits of Cassandra's Murmur3 of every key (the measure of
//! CASSANDRA-21550's harness and of `sstcheck.py`). Children must add up to the parent.

use super::murmur::KeyHash;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Fingerprint {
    pub count: u64,
    #[serde(serialize_with = "hex64")]
    pub xor: u64,
    #[serde(serialize_with = "hex64")]
    pub sum: u64,
}

fn hex64<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:016x}"))
}

impl Fingerprint {
    pub fn add(&mut self, key: &[u8]) {
        self.add_hash(KeyHash::of(key));
    }

    /// `add` of a key whose hash is already known.
    #[inline]
    pub fn add_hash(&mut self, hash: KeyHash) {
        let h = hash.0[0];
        self.count += 1;
        self.xor ^= h;
        self.sum = self.sum.wrapping_add(h);
    }

    pub fn merge(&mut self, other: &Fingerprint) {
        self.count += other.count;
        self.xor ^= other.xor;
        self.sum = self.sum.wrapping_add(other.sum);
    }
}
