//! One log record and its byte encoding (docs/format-wal.md, "Record").
//!
//! ```text
//! [len u32][crc32c u32][kind u8][partition u32][term u64][index u64][payload]
//! ```
//! All integers little-endian. `len` counts the bytes after the crc field
//! (the body); the crc covers exactly those bytes.

/// Bytes of `len` + `crc` in front of every record body.
pub const RECORD_FRAME_BYTES: usize = 8;
/// Bytes of the fixed body fields: kind, partition, term, index.
pub const RECORD_BODY_FIXED_BYTES: usize = 1 + 4 + 8 + 8;
/// Largest payload the log accepts, so a corrupt length cannot make a
/// reader allocate without bound.
pub const RECORD_PAYLOAD_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Largest valid value of the `len` field.
pub const RECORD_BODY_BYTES_MAX: usize = RECORD_BODY_FIXED_BYTES + RECORD_PAYLOAD_BYTES_MAX;

/// What a record means to replay.
/// Payload of a Snapshot marker for a snapshot installed from the leader.
const SNAPSHOT_INSTALLED: &[u8] = &[1];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// A raft log entry at (`partition`, `index`) of `term`. A later entry at
    /// the same or a lower index discards the conflicting suffix.
    Entry,
    /// The partition's raft hard state (term, vote, commit); payload opaque.
    /// The latest one wins.
    HardState,
    /// The partition's snapshot was taken at `index`/`term`: everything of
    /// that partition at or below `index` is compactable.
    Snapshot,
}

impl RecordKind {
    /// The on-disk byte. 0 is never used, so zeroed space cannot be a kind.
    pub fn to_byte(self) -> u8 {
        match self {
            RecordKind::Entry => 1,
            RecordKind::HardState => 2,
            RecordKind::Snapshot => 3,
        }
    }

    pub fn from_byte(byte: u8) -> Option<RecordKind> {
        match byte {
            1 => Some(RecordKind::Entry),
            2 => Some(RecordKind::HardState),
            3 => Some(RecordKind::Snapshot),
            _ => None,
        }
    }
}

/// One record of the shared log. The payload is opaque to this crate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub kind: RecordKind,
    pub partition: u32,
    pub term: u64,
    pub index: u64,
    pub payload: Vec<u8>,
}

impl Record {
    pub fn entry(partition: u32, term: u64, index: u64, payload: Vec<u8>) -> Record {
        Record {
            kind: RecordKind::Entry,
            partition,
            term,
            index,
            payload,
        }
    }

    pub fn hard_state(partition: u32, term: u64, commit: u64, payload: Vec<u8>) -> Record {
        Record {
            kind: RecordKind::HardState,
            partition,
            term,
            index: commit,
            payload,
        }
    }

    pub fn snapshot(partition: u32, term: u64, index: u64, payload: Vec<u8>) -> Record {
        Record {
            kind: RecordKind::Snapshot,
            partition,
            term,
            index,
            payload,
        }
    }

    /// A snapshot received from the leader replaced the partition's whole
    /// log at `index`: replay forgets every entry written before this.
    pub fn snapshot_installed(partition: u32, term: u64, index: u64) -> Record {
        Record::snapshot(partition, term, index, SNAPSHOT_INSTALLED.to_vec())
    }

    /// True for a marker written by `snapshot_installed`.
    pub fn is_snapshot_installed(&self) -> bool {
        self.kind == RecordKind::Snapshot && self.payload == SNAPSHOT_INSTALLED
    }

    /// Bytes this record occupies on disk, frame included.
    pub fn encoded_bytes(&self) -> usize {
        RECORD_FRAME_BYTES + RECORD_BODY_FIXED_BYTES + self.payload.len()
    }
}

/// Appends the encoding of `record` to `out`.
///
/// The caller has checked the payload bound (it is input from the world);
/// here it is an invariant.
pub fn encode_record(record: &Record, out: &mut Vec<u8>) {
    assert!(record.payload.len() <= RECORD_PAYLOAD_BYTES_MAX);
    let body_bytes = RECORD_BODY_FIXED_BYTES + record.payload.len();
    let start = out.len();
    out.reserve(RECORD_FRAME_BYTES + body_bytes);
    out.extend_from_slice(&(body_bytes as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]); // crc, filled below
    out.push(record.kind.to_byte());
    out.extend_from_slice(&record.partition.to_le_bytes());
    out.extend_from_slice(&record.term.to_le_bytes());
    out.extend_from_slice(&record.index.to_le_bytes());
    out.extend_from_slice(&record.payload);
    let crc = crc32c::crc32c(&out[start + RECORD_FRAME_BYTES..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(out.len() - start, record.encoded_bytes());
}

/// What the bytes at a position hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A valid record occupying `bytes` bytes.
    Record { record: Record, bytes: usize },
    /// A zero length field (or fewer than 4 bytes, all zero): preallocated
    /// space, the end of the written part of a segment.
    End,
    /// Not a valid record: a torn write or corruption.
    Invalid(InvalidRecord),
}

/// Why bytes are not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvalidRecord {
    /// The length field is below the fixed body size or above the bound.
    BadLength,
    /// The record runs past the end of the available bytes.
    Truncated,
    /// The checksum does not match the body.
    BadChecksum,
    /// The checksum matches but the kind byte is unknown (a newer format).
    UnknownKind,
}

impl InvalidRecord {
    pub fn describe(self) -> &'static str {
        match self {
            InvalidRecord::BadLength => "record length out of bounds",
            InvalidRecord::Truncated => "record runs past the end of the segment",
            InvalidRecord::BadChecksum => "record checksum mismatch",
            InvalidRecord::UnknownKind => "unknown record kind",
        }
    }
}

/// Decodes the record at the start of `buf`. Never allocates more than the
/// payload actually present in `buf`, never panics.
pub fn decode_record(buf: &[u8]) -> Decoded {
    if buf.len() < 4 {
        return if buf.iter().all(|&b| b == 0) {
            Decoded::End
        } else {
            Decoded::Invalid(InvalidRecord::Truncated)
        };
    }
    let body_bytes = read_u32(buf, 0) as usize;
    if body_bytes == 0 {
        return Decoded::End;
    }
    if !(RECORD_BODY_FIXED_BYTES..=RECORD_BODY_BYTES_MAX).contains(&body_bytes) {
        return Decoded::Invalid(InvalidRecord::BadLength);
    }
    let total_bytes = RECORD_FRAME_BYTES + body_bytes;
    if buf.len() < total_bytes {
        return Decoded::Invalid(InvalidRecord::Truncated);
    }
    let crc_stored = read_u32(buf, 4);
    let body = &buf[RECORD_FRAME_BYTES..total_bytes];
    if crc32c::crc32c(body) != crc_stored {
        return Decoded::Invalid(InvalidRecord::BadChecksum);
    }
    let Some(kind) = RecordKind::from_byte(body[0]) else {
        return Decoded::Invalid(InvalidRecord::UnknownKind);
    };
    let record = Record {
        kind,
        partition: read_u32(body, 1),
        term: read_u64(body, 5),
        index: read_u64(body, 13),
        payload: body[RECORD_BODY_FIXED_BYTES..].to_vec(),
    };
    Decoded::Record {
        record,
        bytes: total_bytes,
    }
}

/// Callers have checked `at + 4 <= buf.len()`.
pub(crate) fn read_u32(buf: &[u8], at: usize) -> u32 {
    let mut bytes = [0u8; 4];
    bytes.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(bytes)
}

/// Callers have checked `at + 8 <= buf.len()`.
pub(crate) fn read_u64(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_decode_is_identity() {
        let record = Record::entry(7, 3, 42, b"hello".to_vec());
        let mut buf = Vec::new();
        encode_record(&record, &mut buf);
        assert_eq!(buf.len(), record.encoded_bytes());
        assert_eq!(
            decode_record(&buf),
            Decoded::Record {
                record,
                bytes: buf.len()
            }
        );
    }

    #[test]
    fn zero_length_is_end_of_log() {
        assert_eq!(decode_record(&[0u8; 64]), Decoded::End);
        assert_eq!(decode_record(&[]), Decoded::End);
        assert_eq!(decode_record(&[0, 0]), Decoded::End);
    }

    #[test]
    fn huge_length_is_rejected_before_reading() {
        let mut buf = vec![0xff; 8];
        buf.extend_from_slice(&[1; 32]);
        assert_eq!(
            decode_record(&buf),
            Decoded::Invalid(InvalidRecord::BadLength)
        );
    }

    #[test]
    fn golden_bytes_match_the_format_doc() {
        // The worked example of docs/format-wal.md.
        let record = Record::entry(1, 2, 3, b"ab".to_vec());
        let mut buf = Vec::new();
        encode_record(&record, &mut buf);
        let expected_head: [u8; 4] = [23, 0, 0, 0];
        assert_eq!(buf[0..4], expected_head);
        assert_eq!(
            buf[8..],
            [
                1, // kind Entry
                1, 0, 0, 0, // partition
                2, 0, 0, 0, 0, 0, 0, 0, // term
                3, 0, 0, 0, 0, 0, 0, 0, // index
                b'a', b'b',
            ]
        );
        assert_eq!(read_u32(&buf, 4), 0x3bc2_07c5);
        assert_eq!(read_u32(&buf, 4), crc32c::crc32c(&buf[8..]));
    }
}
