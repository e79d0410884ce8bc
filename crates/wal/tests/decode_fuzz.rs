//! The record decoder on arbitrary bytes: never panics, never allocates
//! beyond the input, and re-encodes whatever it accepts to the same bytes.

use proptest::prelude::*;
use stoa_wal::{decode_record, encode_record, Decoded, Record, RecordKind};

fn arb_record() -> impl Strategy<Value = Record> {
    (
        prop_oneof![
            Just(RecordKind::Entry),
            Just(RecordKind::HardState),
            Just(RecordKind::Snapshot)
        ],
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(kind, partition, term, index, payload)| Record {
            kind,
            partition,
            term,
            index,
            payload,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn arbitrary_bytes_never_panic_and_accepted_ones_reencode(
        bytes in proptest::collection::vec(any::<u8>(), 0..256)
    ) {
        if let Decoded::Record { record, bytes: used } = decode_record(&bytes) {
            prop_assert!(used <= bytes.len());
            prop_assert!(record.payload.len() < bytes.len());
            let mut again = Vec::new();
            encode_record(&record, &mut again);
            prop_assert_eq!(&again[..], &bytes[..used]);
        }
    }

    #[test]
    fn huge_length_prefix_is_rejected_without_allocating(
        len in any::<u32>(), tail in proptest::collection::vec(any::<u8>(), 0..64)
    ) {
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend_from_slice(&tail);
        // Whatever the length claims, nothing beyond the input is read.
        match decode_record(&bytes) {
            Decoded::Record { bytes: used, .. } => prop_assert!(used <= bytes.len()),
            Decoded::End => prop_assert_eq!(len, 0),
            Decoded::Invalid(_) => {}
        }
    }

    #[test]
    fn damaged_record_is_never_accepted_as_a_different_record(
        record in arb_record(), at in any::<prop::sample::Index>(), bit in 0u8..8
    ) {
        let mut bytes = Vec::new();
        encode_record(&record, &mut bytes);
        let at = at.index(bytes.len());
        bytes[at] ^= 1 << bit;
        if let Decoded::Record { record: decoded, .. } = decode_record(&bytes) {
            // Only a length change that still frames a valid record could
            // pass, and a single flipped bit cannot fix the checksum.
            prop_assert_eq!(decoded, record);
        }
    }

    #[test]
    fn records_round_trip(record in arb_record()) {
        let mut bytes = Vec::new();
        encode_record(&record, &mut bytes);
        prop_assert_eq!(
            decode_record(&bytes),
            Decoded::Record { record, bytes: bytes.len() }
        );
    }
}
