//! Jute binary encoding, as ZooKeeper's `BinaryInputArchive` and
//! `BinaryOutputArchive` define it: big-endian integers, one byte per bool,
//! buffers and strings as a 4-byte signed length then the bytes (length -1
//! means null), vectors as a 4-byte count then the elements.
//!
//! The reader never trusts a length: every length is compared with the bytes
//! that remain before anything is allocated, so a hostile frame cannot make
//! us allocate more than a small multiple of its own size.

use std::fmt;

/// The length jute writes for a null buffer, string or vector.
pub const NULL_LENGTH: i32 = -1;

/// Why a byte sequence is not the record we expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    message: String,
}

impl DecodeError {
    pub fn new(message: impl Into<String>) -> Self {
        DecodeError {
            message: message.into(),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "jute decode error: {}", self.message)
    }
}

impl std::error::Error for DecodeError {}

/// A cursor over one jute-encoded byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    /// Invariant: `position <= bytes.len()`.
    position: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, position: 0 }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The bytes not yet consumed, without consuming them.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.position..]
    }

    fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        if count > self.remaining() {
            return Err(DecodeError::new(format!(
                "{what}: need {count} bytes, {} remain",
                self.remaining()
            )));
        }
        let start = self.position;
        self.position += count;
        assert!(self.position <= self.bytes.len());
        Ok(&self.bytes[start..self.position])
    }

    fn take_array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], DecodeError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N, what)?);
        Ok(array)
    }

    pub fn read_i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.take_array("int")?))
    }

    pub fn read_i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.take_array("long")?))
    }

    /// Any non-zero byte is true, as Java's `DataInput.readBoolean`.
    pub fn read_bool(&mut self) -> Result<bool, DecodeError> {
        let [byte] = self.take_array::<1>("boolean")?;
        Ok(byte != 0)
    }

    /// A length-prefixed byte run; `None` for jute's null (-1).
    fn read_length_prefixed(&mut self, what: &str) -> Result<Option<&'a [u8]>, DecodeError> {
        let length = self.read_i32()?;
        if length == NULL_LENGTH {
            return Ok(None);
        }
        let length = usize::try_from(length)
            .map_err(|_| DecodeError::new(format!("{what}: negative length {length}")))?;
        self.take(length, what).map(Some)
    }

    /// A buffer that may be null (znode data: ZooKeeper keeps null apart
    /// from empty).
    pub fn read_nullable_buffer(&mut self) -> Result<Option<Vec<u8>>, DecodeError> {
        Ok(self.read_length_prefixed("buffer")?.map(<[u8]>::to_vec))
    }

    /// A buffer; null decodes as empty.
    pub fn read_buffer(&mut self) -> Result<Vec<u8>, DecodeError> {
        Ok(self
            .read_length_prefixed("buffer")?
            .map(<[u8]>::to_vec)
            .unwrap_or_default())
    }

    /// A UTF-8 string; null decodes as empty.
    pub fn read_string(&mut self) -> Result<String, DecodeError> {
        match self.read_length_prefixed("ustring")? {
            None => Ok(String::new()),
            Some(bytes) => std::str::from_utf8(bytes)
                .map(str::to_owned)
                .map_err(|error| DecodeError::new(format!("ustring: invalid UTF-8: {error}"))),
        }
    }

    /// A vector whose elements `read_element` decodes. Null and, as in jute,
    /// any negative count decode as empty. Every jute element takes at least
    /// one byte, so a count above the remaining bytes is rejected before
    /// anything is allocated.
    pub fn read_vec<T>(
        &mut self,
        mut read_element: impl FnMut(&mut Reader<'a>) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let count = self.read_i32()?;
        let Ok(count) = usize::try_from(count) else {
            return Ok(Vec::new());
        };
        if count > self.remaining() {
            return Err(DecodeError::new(format!(
                "vector: {count} elements cannot fit in {} bytes",
                self.remaining()
            )));
        }
        let mut elements = Vec::with_capacity(count.min(VEC_PREALLOCATION_ELEMENTS_MAX));
        for _ in 0..count {
            let before = self.position;
            elements.push(read_element(self)?);
            if self.position == before {
                return Err(DecodeError::new("vector: element consumed no bytes"));
            }
        }
        Ok(elements)
    }
}

/// Preallocation cap for vectors: beyond it the vector grows as elements
/// actually decode, so memory follows the input rather than its claims.
const VEC_PREALLOCATION_ELEMENTS_MAX: usize = 16;

pub fn write_i32(out: &mut Vec<u8>, value: i32) {
    out.extend_from_slice(&value.to_be_bytes());
}

pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(&value.to_be_bytes());
}

pub fn write_bool(out: &mut Vec<u8>, value: bool) {
    out.push(u8::from(value));
}

/// Writes a length then the bytes.
///
/// Panics if `bytes` is longer than `i32::MAX`: jute cannot express it, and
/// every caller bounds its data far below that.
pub fn write_buffer(out: &mut Vec<u8>, bytes: &[u8]) {
    write_length(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Writes a buffer, or null (length -1).
pub fn write_nullable_buffer(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(bytes) => write_buffer(out, bytes),
        None => write_i32(out, NULL_LENGTH),
    }
}

pub fn write_string(out: &mut Vec<u8>, value: &str) {
    write_buffer(out, value.as_bytes());
}

/// Writes a count then each element with `write_element`.
pub fn write_vec<T>(
    out: &mut Vec<u8>,
    elements: &[T],
    mut write_element: impl FnMut(&mut Vec<u8>, &T),
) {
    write_length(out, elements.len());
    for element in elements {
        write_element(out, element);
    }
}

fn write_length(out: &mut Vec<u8>, length: usize) {
    let length = i32::try_from(length).expect("jute lengths fit in an i32 by caller contract");
    write_i32(out, length);
}

/// A jute record: a fixed sequence of fields, encoded back to back.
pub trait Record: Sized {
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// Decodes a whole slice as this record (trailing bytes are ignored, as
    /// ZooKeeper ignores them).
    fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::decode(&mut Reader::new(bytes))
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }
}

/// A value that can be one field of a record. Implemented for the jute
/// primitives, `Vec<u8>` (buffer), `String` (ustring), vectors of fields and
/// every record.
pub trait Field: Sized {
    fn encode_field(&self, out: &mut Vec<u8>);
    fn decode_field(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

impl Field for i32 {
    fn encode_field(&self, out: &mut Vec<u8>) {
        write_i32(out, *self);
    }
    fn decode_field(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_i32()
    }
}

impl Field for i64 {
    fn encode_field(&self, out: &mut Vec<u8>) {
        write_i64(out, *self);
    }
    fn decode_field(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_i64()
    }
}

impl Field for bool {
    fn encode_field(&self, out: &mut Vec<u8>) {
        write_bool(out, *self);
    }
    fn decode_field(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_bool()
    }
}

impl Field for String {
    fn encode_field(&self, out: &mut Vec<u8>) {
        write_string(out, self);
    }
    fn decode_field(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_string()
    }
}

impl Field for Vec<u8> {
    fn encode_field(&self, out: &mut Vec<u8>) {
        write_buffer(out, self);
    }
    fn decode_field(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_buffer()
    }
}

/// Znode data: null stays null.
impl Field for Option<Vec<u8>> {
    fn encode_field(&self, out: &mut Vec<u8>) {
        write_nullable_buffer(out, self.as_deref());
    }
    fn decode_field(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_nullable_buffer()
    }
}

impl<T: Field> Field for Vec<T> {
    fn encode_field(&self, out: &mut Vec<u8>) {
        write_vec(out, self, |out, element| element.encode_field(out));
    }
    fn decode_field(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.read_vec(T::decode_field)
    }
}
