//! Opening a log whose last segment ends in arbitrary bytes never panics,
//! keeps every record before the damage, and accepts appends after it.

use std::fs;

use proptest::prelude::*;
use stoa_wal::{FileLog, FileLogOptions, LogStore, Preallocate, Record, SEGMENT_HEADER_BYTES};

fn options() -> FileLogOptions {
    FileLogOptions {
        segment_bytes: 2048,
        preallocate: Preallocate::Fallocate,
        prepare_next_segment: true,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn garbage_tail_is_cut_and_log_continues(
        garbage in proptest::collection::vec(any::<u8>(), 1..512)
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let kept: Vec<Record> = (1..=4).map(|i| Record::entry(0, 1, i, vec![i as u8; 9])).collect();
        let (mut log, _) = FileLog::open(dir.path(), options()).expect("open");
        log.append(&kept).expect("append");
        log.sync().expect("sync");
        drop(log);
        let path = dir.path().join("wal-0000000000000001.log");
        let mut bytes = fs::read(&path).expect("read");
        let end = SEGMENT_HEADER_BYTES as usize
            + kept.iter().map(Record::encoded_bytes).sum::<usize>();
        bytes[end..end + garbage.len()].copy_from_slice(&garbage);
        fs::write(&path, &bytes).expect("write");

        let (mut log, replay) = FileLog::open(dir.path(), options()).expect("reopen");
        let survived = replay.partitions[&0].entries.clone();
        // Garbage might by chance frame a valid record only with a matching
        // crc32c; accept nothing less than the kept prefix.
        prop_assert!(survived.len() >= kept.len());
        prop_assert_eq!(&survived[..kept.len()], &kept[..]);
        let next = Record::entry(0, 2, 5, b"after".to_vec());
        log.append(std::slice::from_ref(&next)).expect("append");
        log.sync().expect("sync");
        drop(log);
        let (_, replay) = FileLog::open(dir.path(), options()).expect("reopen again");
        let mut expected = kept.clone();
        expected.push(next);
        prop_assert_eq!(&replay.partitions[&0].entries, &expected);
    }
}
