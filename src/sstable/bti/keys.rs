//! What the Partitions.db trie is keyed by: the byte-comparable form of a decorated key
//! (`ByteComparable` version OSS50, `Walker.BYTE_COMPARABLE_VERSION`), and the hash byte
//! stored beside each position.

use super::super::murmur;
use super::super::token::Partitioner;

/// `ByteSource.NEXT_COMPONENT`, written before each component of a `Multi`.
const NEXT_COMPONENT: u8 = 0x40;
/// `ByteSource.TERMINATOR`, ending a multi-component sequence in OSS50.
const TERMINATOR: u8 = 0x38;

/// The longest byte-comparable form `decorated_key` can give: a partition key is at most
/// 65,535 bytes (its u16 length in Data.db), escaping adds at most one byte per two
/// (`00 41` → `00 FF 41`) plus a terminator, and ByteOrdered's token is the escaped key
/// again. A Partitions.db prefix longer than this is no key's.
pub const MAX_COMPARABLE_LEN: usize = 3 + 2 * (65_535 * 3 / 2 + 2);

/// `DecoratedKey.asComparableBytes(OSS50)`: `0x40 ‖ token ‖ 0x40 ‖ escaped key ‖ 0x38`.
///
/// The token part is the partitioner's own encoding: for Murmur3 the 8 big-endian bytes
/// of `token ^ 0x8000000000000000` (`Murmur3Partitioner.LongToken.asComparableBytes` →
/// `ByteSource.of(long)`), for ByteOrdered the escaped key bytes
/// (`ByteOrderedPartitioner.BytesToken`). RandomPartitioner's varint encoding
/// (`IntegerType`) is not implemented: `None`.
pub fn decorated_key(partitioner: Partitioner, key: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(key.len() * 2 + 14);
    out.push(NEXT_COMPONENT);
    match partitioner {
        Partitioner::Murmur3 => {
            let t = partitioner.token(key);
            let v = match t {
                super::super::token::Token::Murmur3(v) => v,
                _ => return None,
            };
            out.extend_from_slice(&((v as u64) ^ 0x8000_0000_0000_0000).to_be_bytes());
        }
        Partitioner::ByteOrdered => escape(key, &mut out),
        Partitioner::Random => return None,
    }
    out.push(NEXT_COMPONENT);
    escape(key, &mut out);
    out.push(TERMINATOR);
    Some(out)
}

/// `ByteSource.AbstractEscaper` in OSS50: a `00` is written as `00`, each further `00`
/// of the same run as `FE`, and `FF` ends the run before the next non-zero byte; the
/// component ends with `00`, or with `FE` if it ended inside a run of zeros.
fn escape(bytes: &[u8], out: &mut Vec<u8>) {
    let mut escaped = false;
    for &b in bytes {
        if escaped {
            if b == 0 {
                out.push(0xFE);
                continue;
            }
            out.push(0xFF);
            escaped = false;
        }
        out.push(b);
        if b == 0 {
            escaped = true;
        }
    }
    out.push(if escaped { 0xFE } else { 0x00 });
}

/// `DecoratedKey.filterHashLowerBits()` as a byte: the low 8 bits of the second word of
/// `MurmurHash.hash3_x64_128(key, seed 0)` — the bloom filter's hash, so a lookup can
/// reject most absent keys without reading the full key.
pub fn hash_byte(key: &[u8]) -> u8 {
    murmur::hash3_x64_128(key)[1] as u8
}

/// `ByteComparable.diffPoint`: the 1-based index of the first differing byte (running
/// past the end of one counts as a difference).
pub(crate) fn diff_point(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count() + 1
}

/// How a key whose byte-comparable form starts with `stored` (a prefix the trie keeps for
/// it) orders against `bound` on the key's first `bound.len()` bytes, or `None` when the
/// stored prefix is too short to tell (it is a proper prefix of `bound`: only the full
/// key decides). With `bound` = `0x40 ‖ token bytes`, this is the key's token against a
/// token, without reading the key.
///
/// The trie's prefixes are prefix-free (each is a different leaf), so at most one entry
/// of a Partitions.db is `None` for any `bound`: a plan that cuts at a token reads at most
/// one key from Data.db per cut.
pub fn prefix_order(stored: &[u8], bound: &[u8]) -> Option<std::cmp::Ordering> {
    if stored.len() >= bound.len() {
        return Some(stored[..bound.len()].cmp(bound));
    }
    match stored.cmp(&bound[..stored.len()]) {
        std::cmp::Ordering::Equal => None,
        o => Some(o),
    }
}

/// `0x40 ‖ token bytes` of a Murmur3 token: the leading bytes of every byte-comparable
/// key of that token (`decorated_key`), a `bound` for `prefix_order`.
pub fn murmur3_token_bound(token: i64) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = NEXT_COMPONENT;
    out[1..].copy_from_slice(&((token as u64) ^ 0x8000_0000_0000_0000).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bti_keys_escape_as_cassandra_documents() {
        // The examples of `ByteSource.Reinterpreter`'s comment, in OSS50 form.
        let mut out = Vec::new();
        escape(&[0x41, 0, 0, 0x42], &mut out);
        assert_eq!(out, [0x41, 0x00, 0xFE, 0xFF, 0x42, 0x00]);
        out.clear();
        escape(&[0x41, 0, 0x42, 0], &mut out);
        assert_eq!(out, [0x41, 0x00, 0xFF, 0x42, 0x00, 0xFE]);
    }

    #[test]
    fn bti_keys_orders_like_tokens_then_keys() {
        let k = decorated_key(Partitioner::ByteOrdered, b"0").unwrap();
        assert_eq!(k, [0x40, 0x30, 0x00, 0x40, 0x30, 0x00, 0x38]);
        let m = decorated_key(Partitioner::Murmur3, b"a").unwrap();
        assert_eq!(m.len(), 1 + 8 + 1 + 2 + 1);
        assert_eq!(diff_point(b"ab", b"ac"), 2);
        assert_eq!(diff_point(b"ab", b"ab"), 3);
        assert!(decorated_key(Partitioner::Random, b"a").is_none());
    }

    #[test]
    fn bti_keys_hash_byte_matches_the_fixture() {
        // Hash bytes stored in Cassandra's legacy_da_simple Partitions.db for "0".."4".
        let got: Vec<u8> = (b'0'..=b'4').map(|k| hash_byte(&[k])).collect();
        assert_eq!(got, [0x09, 0x37, 0xdd, 0x02, 0x2f]);
    }
}
