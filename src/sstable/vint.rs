//! Cassandra's variable-length integers (`utils/vint/VIntCoding.java`).
//!
//! Not LEB128: the number of leading one bits of the first byte is the number of extra
//! bytes, which follow big-endian; the first byte's remaining low bits are the value's
//! high bits. Nine bytes at most (`0xFF` then a full 8-byte value).

/// Number of bytes `encode_unsigned(v)` writes: `(639 - 9 * nlz(v | 1)) >> 6`
/// (`VIntCoding.computeUnsignedVIntSize`).
pub fn unsigned_size(v: u64) -> usize {
    let nlz = (v | 1).leading_zeros() as usize;
    (639 - 9 * nlz) >> 6
}

/// Appends the unsigned vint encoding of `v` (always the shortest form, as Cassandra writes).
pub fn encode_unsigned(v: u64, out: &mut Vec<u8>) {
    let size = unsigned_size(v);
    if size == 1 {
        out.push(v as u8);
        return;
    }
    if size == 9 {
        out.push(0xFF);
        out.extend_from_slice(&v.to_be_bytes());
        return;
    }
    let extra = size - 1;
    let be = v.to_be_bytes();
    let mut buf = [0u8; 9];
    buf[..size].copy_from_slice(&be[8 - size..]);
    // The first byte carries `extra` leading one bits above the value's top bits.
    buf[0] |= !(0xFFu8 >> extra);
    out.extend_from_slice(&buf[..size]);
}

/// Zig-zag then unsigned (`VIntCoding.writeVInt`).
pub fn encode_signed(v: i64, out: &mut Vec<u8>) {
    encode_unsigned(((v << 1) ^ (v >> 63)) as u64, out)
}

/// Why a vint could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VintError {
    /// The slice ends inside the vint; `needed` is its full length.
    Truncated { needed: usize },
}

/// Decodes an unsigned vint at the start of `buf`: (value, bytes consumed).
#[inline]
pub fn decode_unsigned(buf: &[u8]) -> Result<(u64, usize), VintError> {
    let first = match buf.first() {
        Some(b) => *b,
        None => return Err(VintError::Truncated { needed: 1 }),
    };
    if first < 0x80 {
        return Ok((first as u64, 1));
    }
    let extra = first.leading_ones() as usize;
    let size = extra + 1;
    if buf.len() < size {
        return Err(VintError::Truncated { needed: size });
    }
    let mut v: u64 = if extra == 8 {
        0
    } else {
        (first & (0xFFu8 >> extra)) as u64
    };
    for b in &buf[1..size] {
        v = (v << 8) | *b as u64;
    }
    Ok((v, size))
}

pub fn decode_signed(buf: &[u8]) -> Result<(i64, usize), VintError> {
    let (u, n) = decode_unsigned(buf)?;
    Ok((((u >> 1) as i64) ^ -((u & 1) as i64), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_cassandra_formula_boundaries() {
        assert_eq!(unsigned_size(0), 1);
        assert_eq!(unsigned_size(127), 1);
        assert_eq!(unsigned_size(128), 2);
        assert_eq!(unsigned_size((1 << 14) - 1), 2);
        assert_eq!(unsigned_size(1 << 14), 3);
        assert_eq!(unsigned_size((1 << 56) - 1), 8);
        assert_eq!(unsigned_size(1 << 56), 9);
        assert_eq!(unsigned_size(u64::MAX), 9);
    }

    #[test]
    fn known_encodings() {
        let mut v = Vec::new();
        encode_unsigned(300, &mut v);
        // 300 = 0x012C: one extra byte, first byte 0b10_000001.
        assert_eq!(v, vec![0x81, 0x2C]);
        v.clear();
        encode_unsigned(u64::MAX, &mut v);
        assert_eq!(v, vec![0xFF; 9]);
    }

    #[test]
    fn round_trip_many() {
        let mut x: u64 = 1;
        for shift in 0..64 {
            for delta in [0u64, 1, 2] {
                let v = (x << shift).wrapping_sub(delta);
                let mut buf = Vec::new();
                encode_unsigned(v, &mut buf);
                assert_eq!(buf.len(), unsigned_size(v));
                assert_eq!(decode_unsigned(&buf), Ok((v, buf.len())));
                let s = v as i64;
                buf.clear();
                encode_signed(s, &mut buf);
                assert_eq!(decode_signed(&buf), Ok((s, buf.len())));
            }
            x = 1;
        }
    }

    #[test]
    fn truncated_is_an_error() {
        assert_eq!(
            decode_unsigned(&[]),
            Err(VintError::Truncated { needed: 1 })
        );
        assert_eq!(
            decode_unsigned(&[0xC0, 0x01]),
            Err(VintError::Truncated { needed: 3 })
        );
    }
}
