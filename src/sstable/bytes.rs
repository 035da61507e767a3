//! Big-endian cursor over a component's bytes that turns every short read into a
//! `FormatError` naming the file, the absolute offset and the field.

use std::path::Path;

use super::error::{FormatError, Location, Result};
use super::vint;

pub struct Reader<'a> {
    file: &'a Path,
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the file, so that errors report file offsets.
    base: u64,
}

impl<'a> Reader<'a> {
    pub fn new(file: &'a Path, buf: &'a [u8]) -> Self {
        Reader {
            file,
            buf,
            pos: 0,
            base: 0,
        }
    }

    pub fn with_base(file: &'a Path, buf: &'a [u8], base: u64) -> Self {
        Reader {
            file,
            buf,
            pos: 0,
            base,
        }
    }

    pub fn file(&self) -> &'a Path {
        self.file
    }

    /// Position relative to the start of the slice.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Absolute file offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub fn seek(&mut self, pos: usize) -> Result<()> {
        if pos > self.buf.len() {
            return Err(self.corrupt(format!(
                "offset {} is past the end of the component ({} bytes)",
                self.base + pos as u64,
                self.buf.len()
            )));
        }
        self.pos = pos;
        Ok(())
    }

    pub fn corrupt(&self, what: impl Into<String>) -> FormatError {
        FormatError::corrupt(self.file, Some(self.offset()), what)
    }

    pub fn corrupt_at(&self, offset: u64, what: impl Into<String>) -> FormatError {
        FormatError::corrupt(self.file, Some(offset), what)
    }

    pub fn unsupported(&self, what: impl Into<String>) -> FormatError {
        FormatError::unsupported(self.file, Some(self.offset()), what)
    }

    fn truncated(&self, field: &'static str, needed: usize) -> FormatError {
        FormatError::Truncated {
            loc: Location {
                file: self.file.to_path_buf(),
                offset: Some(self.offset()),
            },
            field,
            needed: needed as u64,
            available: self.remaining() as u64,
        }
    }

    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(self.truncated(field, n));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The bytes not consumed yet, without consuming them.
    pub fn peek_rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        let s = self.bytes(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8> {
        Ok(self.array::<1>(field)?[0])
    }

    pub fn bool(&mut self, field: &'static str) -> Result<bool> {
        let at = self.offset();
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.corrupt_at(
                at,
                format!("{field}: expected a boolean byte 0 or 1, found {b}"),
            )),
        }
    }

    pub fn u16(&mut self, field: &'static str) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    pub fn i32(&mut self, field: &'static str) -> Result<i32> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    pub fn u32(&mut self, field: &'static str) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    pub fn i32_le(&mut self, field: &'static str) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array(field)?))
    }

    pub fn i64(&mut self, field: &'static str) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    pub fn i64_le(&mut self, field: &'static str) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array(field)?))
    }

    pub fn f64(&mut self, field: &'static str) -> Result<f64> {
        Ok(f64::from_bits(u64::from_be_bytes(self.array(field)?)))
    }

    /// A non-negative int32 count or length; a negative one is corruption.
    pub fn count(&mut self, field: &'static str) -> Result<usize> {
        let at = self.offset();
        let v = self.i32(field)?;
        usize::try_from(v).map_err(|_| {
            self.corrupt_at(
                at,
                format!("{field}: expected a non-negative count, found {v}"),
            )
        })
    }

    pub fn uvint(&mut self, field: &'static str) -> Result<u64> {
        match vint::decode_unsigned(&self.buf[self.pos..]) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(vint::VintError::Truncated { needed }) => Err(self.truncated(field, needed)),
        }
    }

    pub fn vint(&mut self, field: &'static str) -> Result<i64> {
        match vint::decode_signed(&self.buf[self.pos..]) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(vint::VintError::Truncated { needed }) => Err(self.truncated(field, needed)),
        }
    }

    /// An unsigned vint used as a length that must fit in what is left of the component.
    pub fn uvint_len(&mut self, field: &'static str) -> Result<usize> {
        let at = self.offset();
        let v = self.uvint(field)?;
        if v > self.remaining() as u64 {
            return Err(self.corrupt_at(
                at,
                format!(
                    "{field}: length {v} exceeds the {} bytes left",
                    self.remaining()
                ),
            ));
        }
        Ok(v as usize)
    }

    /// Java `DataInput.readUTF`: u16 length + modified UTF-8. Names we read (compressor,
    /// partitioner, option keys) are ASCII in practice; anything else is kept lossless as bytes.
    pub fn utf(&mut self, field: &'static str) -> Result<String> {
        let n = self.u16(field)? as usize;
        let at = self.offset();
        let b = self.bytes(n, field)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| self.corrupt_at(at, format!("{field}: expected a UTF-8 string")))
    }

    /// `ByteBufferUtil.readWithVIntLength`.
    pub fn vint_bytes(&mut self, field: &'static str) -> Result<&'a [u8]> {
        let n = self.uvint_len(field)?;
        self.bytes(n, field)
    }

    /// Fails unless every byte was consumed: a component with trailing bytes is not what
    /// Cassandra wrote.
    pub fn expect_end(&self, what: &str) -> Result<()> {
        if self.remaining() != 0 {
            return Err(self.corrupt(format!(
                "{} unexpected trailing byte(s) after {what}",
                self.remaining()
            )));
        }
        Ok(())
    }
}

/// Big-endian writers on a byte vector, the mirror of `Reader`.
pub trait Put {
    fn put_u8(&mut self, v: u8);
    fn put_bool(&mut self, v: bool);
    fn put_u16(&mut self, v: u16);
    fn put_i32(&mut self, v: i32);
    fn put_u32(&mut self, v: u32);
    fn put_i64(&mut self, v: i64);
    fn put_f64(&mut self, v: f64);
    fn put_uvint(&mut self, v: u64);
    fn put_vint(&mut self, v: i64);
    fn put_utf(&mut self, s: &str);
    fn put_vint_bytes(&mut self, b: &[u8]);
}

impl Put for Vec<u8> {
    fn put_u8(&mut self, v: u8) {
        self.push(v)
    }
    fn put_bool(&mut self, v: bool) {
        self.push(v as u8)
    }
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_i32(&mut self, v: i32) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_be_bytes())
    }
    fn put_f64(&mut self, v: f64) {
        self.extend_from_slice(&v.to_bits().to_be_bytes())
    }
    fn put_uvint(&mut self, v: u64) {
        vint::encode_unsigned(v, self)
    }
    fn put_vint(&mut self, v: i64) {
        vint::encode_signed(v, self)
    }
    fn put_utf(&mut self, s: &str) {
        self.put_u16(s.len() as u16);
        self.extend_from_slice(s.as_bytes());
    }
    fn put_vint_bytes(&mut self, b: &[u8]) {
        self.put_uvint(b.len() as u64);
        self.extend_from_slice(b);
    }
}
