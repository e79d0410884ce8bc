//! Big-endian primitives shared by the txn and snapshot encodings.
//! The reader is bounded: every length is checked against the bytes that
//! remain before anything is allocated.

use stoa_proto::records::{Acl, Id};

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside a value.
    Truncated,
    /// A length or count exceeds what the input (or a named limit) allows.
    TooLong,
    /// A string is not UTF-8.
    BadUtf8,
    /// An unknown tag, code or version.
    BadValue(&'static str),
    /// Bytes remain after the value.
    TrailingBytes,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated => f.write_str("truncated"),
            DecodeError::TooLong => f.write_str("length out of bounds"),
            DecodeError::BadUtf8 => f.write_str("string is not UTF-8"),
            DecodeError::BadValue(what) => write!(f, "bad {what}"),
            DecodeError::TrailingBytes => f.write_str("trailing bytes"),
        }
    }
}

impl std::error::Error for DecodeError {}

pub(crate) fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Length-prefixed bytes. Lengths above `u32::MAX` cannot occur: request
/// frames are far smaller.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    let len = u32::try_from(b.len());
    assert!(len.is_ok(), "value of {} bytes exceeds u32 length", b.len());
    put_u32(out, len.unwrap_or(u32::MAX));
    out.extend_from_slice(b);
}

/// The length that marks null data: no bytes follow. Data never comes
/// near it, so files written before null data existed never hold it.
pub(crate) const NULL_BYTES_LEN: u32 = u32::MAX;

/// Bytes, or null.
pub(crate) fn put_nullable_bytes(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        Some(b) => {
            assert!(
                b.len() < NULL_BYTES_LEN as usize,
                "data of {} bytes",
                b.len()
            );
            put_bytes(out, b);
        }
        None => put_u32(out, NULL_BYTES_LEN),
    }
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

pub(crate) fn put_acl(out: &mut Vec<u8>, acl: &[Acl]) {
    put_u32(out, acl.len() as u32);
    for a in acl {
        put_i32(out, a.perms);
        put_str(out, &a.id.scheme);
        put_str(out, &a.id.id);
    }
}

/// Smallest encoding of one ACL entry: perms and two empty strings.
const ACL_ENTRY_MIN_BYTES: usize = 12;

#[derive(Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes)
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_be_bytes)
    }

    pub(crate) fn i32(&mut self) -> Result<i32, DecodeError> {
        self.array().map(i32::from_be_bytes)
    }

    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        self.array().map(i64::from_be_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_be_bytes)
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        if len > self.remaining() {
            return Err(DecodeError::TooLong);
        }
        self.take(len)
    }

    /// Bytes written by `put_nullable_bytes`.
    pub(crate) fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, DecodeError> {
        let mut peek = self.clone();
        if peek.u32()? == NULL_BYTES_LEN {
            *self = peek;
            return Ok(None);
        }
        self.bytes().map(Some)
    }

    pub(crate) fn string(&mut self) -> Result<String, DecodeError> {
        self.str().map(str::to_owned)
    }

    /// A string borrowed from the input.
    pub(crate) fn str(&mut self) -> Result<&'a str, DecodeError> {
        std::str::from_utf8(self.bytes()?).map_err(|_| DecodeError::BadUtf8)
    }

    /// A count of items each at least `min_bytes` long, checked against
    /// the remaining input so a forged count cannot force an allocation.
    pub(crate) fn count(&mut self, min_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes.max(1)) > self.remaining() {
            return Err(DecodeError::TooLong);
        }
        Ok(n)
    }

    pub(crate) fn acl(&mut self) -> Result<Vec<Acl>, DecodeError> {
        let n = self.count(ACL_ENTRY_MIN_BYTES)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let perms = self.i32()?;
            let scheme = self.string()?;
            let id = self.string()?;
            out.push(Acl {
                perms,
                id: Id { scheme, id },
            });
        }
        Ok(out)
    }
}
