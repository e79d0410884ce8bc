//! Format stability: a segment written by format version 1 and checked in
//! (tests/golden/) must keep opening to the same records, and today's
//! encoder must still produce it byte for byte. Regenerate only on a
//! deliberate format change: `STOA_WAL_BLESS=1 cargo test -p stoa-wal --test golden`.

use std::fs;
use std::path::PathBuf;

use stoa_wal::{FileLog, FileLogOptions, LogStore, Preallocate, Record};

const GOLDEN_SEGMENT: &str = "wal-0000000000000001.log";

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn options() -> FileLogOptions {
    FileLogOptions {
        segment_bytes: 1024,
        preallocate: Preallocate::ZeroFill,
        prepare_next_segment: false,
    }
}

fn golden_records() -> Vec<Record> {
    vec![
        Record::entry(0, 1, 1, b"create /a".to_vec()),
        Record::entry(7, 1, 1, Vec::new()),
        Record::hard_state(0, 1, 1, vec![0xde, 0xad]),
        Record::entry(0, 2, 2, b"set /a".to_vec()),
        Record::snapshot(7, 1, 1, b"snap".to_vec()),
    ]
}

fn write_fresh() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = FileLog::open(dir.path(), options()).expect("open");
    log.append(&golden_records()).expect("append");
    log.sync().expect("sync");
    drop(log);
    let bytes = fs::read(dir.path().join(GOLDEN_SEGMENT)).expect("read");
    (dir, bytes)
}

#[test]
fn encoder_still_writes_the_golden_segment() {
    let (_dir, bytes) = write_fresh();
    let golden_path = golden_dir().join(GOLDEN_SEGMENT);
    if std::env::var_os("STOA_WAL_BLESS").is_some() {
        fs::write(&golden_path, &bytes).expect("bless");
    }
    let golden = fs::read(&golden_path).expect("golden file present");
    assert!(
        golden == bytes,
        "segment encoding changed: bump the format version"
    );
}

#[test]
fn golden_segment_still_opens_to_the_same_records() {
    let copy = tempfile::tempdir().expect("tempdir");
    fs::copy(
        golden_dir().join(GOLDEN_SEGMENT),
        copy.path().join(GOLDEN_SEGMENT),
    )
    .expect("copy golden");
    let (_, replay) = FileLog::open(copy.path(), options()).expect("open golden");
    let p0 = &replay.partitions[&0];
    assert_eq!(
        p0.entries,
        vec![golden_records()[0].clone(), golden_records()[3].clone()]
    );
    assert_eq!(p0.hard_state.as_ref(), Some(&golden_records()[2]));
    let p7 = &replay.partitions[&7];
    assert!(p7.entries.is_empty(), "covered by the snapshot marker");
    assert_eq!(p7.snapshot.as_ref(), Some(&golden_records()[4]));
}
