//! Partitioners, tokens, and Cassandra's `(left, right]` range semantics.
//!
//! The partitioner is not in the schema we can see: Statistics.db VALIDATION records its
//! class name (`ValidationMetadata`), and keys in Index.db/Data.db are ordered by
//! `DecoratedKey.compareTo`: token first, ties broken by unsigned key bytes.

use std::cmp::Ordering;
use std::fmt;

use md5::{Digest, Md5};

use super::murmur::KeyHash;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Partitioner {
    Murmur3,
    Random,
    ByteOrdered,
}

impl Partitioner {
    /// Parses the class name recorded in Statistics.db (`org.apache.cassandra.dht.X` or
    /// just `X`). `None` for any partitioner whose token cleave cannot compute.
    pub fn from_class_name(name: &str) -> Option<Partitioner> {
        let simple = name.rsplit('.').next().unwrap_or(name);
        match simple {
            "Murmur3Partitioner" => Some(Partitioner::Murmur3),
            "RandomPartitioner" => Some(Partitioner::Random),
            "ByteOrderedPartitioner" => Some(Partitioner::ByteOrdered),
            _ => None,
        }
    }

    pub fn class_name(self) -> &'static str {
        match self {
            Partitioner::Murmur3 => "org.apache.cassandra.dht.Murmur3Partitioner",
            Partitioner::Random => "org.apache.cassandra.dht.RandomPartitioner",
            Partitioner::ByteOrdered => "org.apache.cassandra.dht.ByteOrderedPartitioner",
        }
    }

    /// `IPartitioner.getToken(key)`.
    pub fn token(self, key: &[u8]) -> Token {
        match self {
            Partitioner::Murmur3 => Token::Murmur3(murmur3_token(key)),
            Partitioner::Random => Token::Random(random_token(key)),
            Partitioner::ByteOrdered => Token::Bytes(key.to_vec()),
        }
    }

    /// `token` of a key whose `hash3_x64_128` is already known: the Murmur3 token is taken
    /// from it, the others are computed from the key as `token` does.
    pub fn token_hashed(self, key: &[u8], hash: KeyHash) -> Token {
        match self {
            Partitioner::Murmur3 => Token::Murmur3(murmur3_token_of(key, hash)),
            _ => self.token(key),
        }
    }

    /// The partitioner's minimum token, which no real key maps to (for Murmur3 and
    /// Random); `(MIN, x]` therefore covers "every key up to x".
    pub fn min_token(self) -> Token {
        match self {
            Partitioner::Murmur3 => Token::Murmur3(i64::MIN),
            Partitioner::Random => Token::Random(RandomToken::Minimum),
            Partitioner::ByteOrdered => Token::Bytes(Vec::new()),
        }
    }

    /// Parses a token as operators write it: decimal for Murmur3 and Random, hex for
    /// ByteOrdered (as `nodetool` prints them).
    pub fn parse_token(self, s: &str) -> Result<Token, String> {
        let s = s.trim();
        match self {
            Partitioner::Murmur3 => s.parse::<i64>().map(Token::Murmur3).map_err(|e| {
                format!("{s:?} is not a Murmur3 token (a signed 64-bit decimal): {e}")
            }),
            Partitioner::Random => {
                if s == "-1" {
                    return Ok(Token::Random(RandomToken::Minimum));
                }
                let v = s.parse::<u128>().map_err(|e| {
                    format!("{s:?} is not a RandomPartitioner token (decimal 0..=2^127): {e}")
                })?;
                if v > 1u128 << 127 {
                    return Err(format!(
                        "{s:?} is larger than 2^127, the RandomPartitioner maximum"
                    ));
                }
                Ok(Token::Random(RandomToken::Value(v)))
            }
            Partitioner::ByteOrdered => {
                if !s.len().is_multiple_of(2) {
                    return Err(format!(
                        "{s:?} is not a ByteOrdered token (an even number of hex digits)"
                    ));
                }
                (0..s.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&s[i..i + 2], 16))
                    .collect::<Result<Vec<u8>, _>>()
                    .map(Token::Bytes)
                    .map_err(|_| format!("{s:?} is not a ByteOrdered token (hex digits)"))
            }
        }
    }
}

/// `Murmur3Partitioner.getToken`: h1 of Cassandra's MurmurHash3, with `Long.MIN_VALUE`
/// normalised to `Long.MAX_VALUE` so that no key takes the minimum token; the empty key
/// is the minimum (`Murmur3Partitioner.java:256-295`).
pub fn murmur3_token(key: &[u8]) -> i64 {
    if key.is_empty() {
        return i64::MIN;
    }
    murmur3_token_of(key, KeyHash::of(key))
}

/// `murmur3_token` from the key's hash.
#[inline]
fn murmur3_token_of(key: &[u8], hash: KeyHash) -> i64 {
    if key.is_empty() {
        return i64::MIN;
    }
    let h = hash.0[0] as i64;
    if h == i64::MIN {
        i64::MAX
    } else {
        h
    }
}

/// RandomPartitioner tokens are `abs(new BigInteger(md5(key)))`, in `0..=2^127`; the
/// minimum token is -1 (`RandomPartitioner.MINIMUM`), also the empty key's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RandomToken {
    Minimum,
    Value(u128),
}

pub fn random_token(key: &[u8]) -> RandomToken {
    if key.is_empty() {
        return RandomToken::Minimum;
    }
    let d = Md5::digest(key);
    let mut a = [0u8; 16];
    a.copy_from_slice(&d);
    RandomToken::Value((i128::from_be_bytes(a)).unsigned_abs())
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Token {
    Murmur3(i64),
    Random(RandomToken),
    /// ByteOrderedPartitioner: the key bytes, compared unsigned lexicographically.
    Bytes(Vec<u8>),
}

impl Token {
    /// Orders tokens of one partitioner; tokens of different partitioners never meet in
    /// one sstable, and are ordered by kind to keep `Ord` total.
    pub fn cmp_token(&self, other: &Token) -> Ordering {
        match (self, other) {
            (Token::Murmur3(a), Token::Murmur3(b)) => a.cmp(b),
            (Token::Random(a), Token::Random(b)) => a.cmp(b),
            (Token::Bytes(a), Token::Bytes(b)) => a.cmp(b),
            _ => self.kind().cmp(&other.kind()),
        }
    }

    fn kind(&self) -> u8 {
        match self {
            Token::Murmur3(_) => 0,
            Token::Random(_) => 1,
            Token::Bytes(_) => 2,
        }
    }
}

impl PartialOrd for Token {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Token {
    fn cmp(&self, other: &Self) -> Ordering {
        self.cmp_token(other)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Murmur3(t) => write!(f, "{t}"),
            Token::Random(RandomToken::Minimum) => write!(f, "-1"),
            Token::Random(RandomToken::Value(v)) => write!(f, "{v}"),
            Token::Bytes(b) => {
                for x in b {
                    write!(f, "{x:02x}")?;
                }
                Ok(())
            }
        }
    }
}

/// `DecoratedKey.compareTo`: token, then unsigned key bytes.
pub fn compare_decorated(p: Partitioner, a: &[u8], b: &[u8]) -> Ordering {
    p.token(a).cmp(&p.token(b)).then_with(|| a.cmp(b))
}

/// `Range(left, right]` (`dht/Range.java`): non-wrapping when `left < right`, wrapping
/// (`t > left || t <= right`) otherwise; `(x, x]` is the whole ring. A right bound equal
/// to the minimum token means "to the end of the ring".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRange {
    pub left: Token,
    pub right: Token,
}

impl TokenRange {
    pub fn new(left: Token, right: Token) -> Self {
        TokenRange { left, right }
    }

    fn right_is_min(&self, p: Partitioner) -> bool {
        self.right == p.min_token()
    }

    pub fn contains(&self, p: Partitioner, t: &Token) -> bool {
        if self.left == self.right {
            return true;
        }
        if self.right_is_min(p) {
            return *t > self.left;
        }
        if self.left < self.right {
            self.left < *t && *t <= self.right
        } else {
            *t > self.left || *t <= self.right
        }
    }

    pub fn is_wrap_around(&self, p: Partitioner) -> bool {
        self.left >= self.right && !self.right_is_min(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_token_of_int_1() {
        // token(int 1) from cqlsh: -4069959284402364209.
        assert_eq!(murmur3_token(&[0, 0, 0, 1]), -4069959284402364209);
        assert_eq!(murmur3_token(&[]), i64::MIN);
    }

    #[test]
    fn random_token_is_abs_of_signed_md5() {
        // md5("") is not used (empty key = MINIMUM); md5("a") = 0cc175b9c0f1b6a831c399e269772661,
        // positive as a signed 128-bit number.
        assert_eq!(
            random_token(b"a"),
            RandomToken::Value(0x0cc175b9c0f1b6a831c399e269772661)
        );
        assert_eq!(random_token(b""), RandomToken::Minimum);
    }

    #[test]
    fn range_semantics() {
        let p = Partitioner::Murmur3;
        let t = |v| Token::Murmur3(v);
        let r = TokenRange::new(t(0), t(10));
        assert!(!r.contains(p, &t(0)));
        assert!(r.contains(p, &t(1)));
        assert!(r.contains(p, &t(10)));
        assert!(!r.contains(p, &t(11)));
        let w = TokenRange::new(t(10), t(0));
        assert!(w.is_wrap_around(p));
        assert!(w.contains(p, &t(11)));
        assert!(w.contains(p, &t(-5)));
        assert!(w.contains(p, &t(0)));
        assert!(!w.contains(p, &t(5)));
        let whole = TokenRange::new(t(3), t(3));
        assert!(whole.contains(p, &t(3)));
        let to_end = TokenRange::new(t(5), p.min_token());
        assert!(!to_end.is_wrap_around(p));
        assert!(to_end.contains(p, &t(i64::MAX)));
        assert!(!to_end.contains(p, &t(5)));
    }

    #[test]
    fn parse_tokens() {
        assert_eq!(
            Partitioner::Murmur3.parse_token("-42"),
            Ok(Token::Murmur3(-42))
        );
        assert!(Partitioner::Murmur3.parse_token("x").is_err());
        assert_eq!(
            Partitioner::ByteOrdered.parse_token("0a0B"),
            Ok(Token::Bytes(vec![10, 11]))
        );
        assert!(Partitioner::ByteOrdered.parse_token("abc").is_err());
        assert!(Partitioner::Random
            .parse_token("170141183460469231731687303715884105729")
            .is_err());
    }
}
