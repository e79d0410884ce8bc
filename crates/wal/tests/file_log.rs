//! FileLog on real files: round trips, overwrite semantics, rollover,
//! compaction, torn tails and corruption.

use std::fs;
use std::path::Path;

use stoa_wal::{
    FileLog, FileLogOptions, LogStore, Preallocate, Record, Replay, WalError, SEGMENT_HEADER_BYTES,
};

fn small_segments() -> FileLogOptions {
    FileLogOptions {
        segment_bytes: 1024,
        preallocate: Preallocate::Fallocate,
        prepare_next_segment: true,
    }
}

fn entry(partition: u32, index: u64, term: u64) -> Record {
    let payload = format!("p{partition}-i{index}-t{term}").into_bytes();
    Record::entry(partition, term, index, payload)
}

fn write_synced(dir: &Path, options: FileLogOptions, records: &[Record]) -> FileLog {
    let (mut log, _) = FileLog::open(dir, options).expect("open");
    log.append(records).expect("append");
    log.sync().expect("sync");
    log
}

fn reopen(dir: &Path, options: FileLogOptions) -> Replay {
    let (_, replay) = FileLog::open(dir, options).expect("reopen");
    replay
}

fn entries_of(replay: &Replay, partition: u32) -> Vec<Record> {
    replay
        .partition(partition)
        .map(|p| p.entries.clone())
        .unwrap_or_default()
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        // The spare being prepared for the next rollover is not a segment.
        .filter(|n| n.starts_with("wal-") && n.ends_with(".log"))
        .collect();
    names.sort();
    names
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

#[test]
fn round_trip_returns_exactly_what_was_synced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let records: Vec<Record> = (1..=20).map(|i| entry(0, i, 1)).collect();
    let mut log = write_synced(dir.path(), FileLogOptions::default(), &records);
    log.append(&[Record::hard_state(0, 1, 20, b"hs".to_vec())])
        .expect("append");
    log.sync().expect("sync");
    drop(log);
    let replay = reopen(dir.path(), FileLogOptions::default());
    assert_eq!(entries_of(&replay, 0), records);
    let hard_state = replay.partitions[&0]
        .hard_state
        .clone()
        .expect("hard state");
    assert_eq!(hard_state.payload, b"hs");
    assert_eq!(replay.torn_tail_bytes, 0);
}

#[test]
fn unsynced_appends_are_not_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = write_synced(dir.path(), FileLogOptions::default(), &[entry(0, 1, 1)]);
    log.append(&[entry(0, 2, 1)]).expect("append");
    drop(log);
    assert_eq!(
        entries_of(&reopen(dir.path(), FileLogOptions::default()), 0),
        vec![entry(0, 1, 1)]
    );
}

#[test]
fn later_entry_overwrites_suffix_of_its_partition_only_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut records = Vec::new();
    for i in 1..=6 {
        records.push(entry(0, i, 1));
        records.push(entry(1, i, 1));
    }
    records.push(entry(0, 4, 2));
    records.push(entry(0, 5, 2));
    drop(write_synced(dir.path(), small_segments(), &records));
    let replay = reopen(dir.path(), small_segments());
    let mut expected: Vec<Record> = (1..=3).map(|i| entry(0, i, 1)).collect();
    expected.extend([entry(0, 4, 2), entry(0, 5, 2)]);
    assert_eq!(entries_of(&replay, 0), expected);
    assert_eq!(
        entries_of(&replay, 1),
        (1..=6).map(|i| entry(1, i, 1)).collect::<Vec<_>>()
    );
}

#[test]
fn interleaved_partitions_survive_segment_rollover() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = FileLog::open(dir.path(), small_segments()).expect("open").0;
    for i in 1..=100 {
        for partition in 0..3 {
            log.append(&[entry(partition, i, 1)]).expect("append");
        }
        if i % 7 == 0 {
            log.sync().expect("sync");
        }
    }
    log.sync().expect("sync");
    assert!(log.segment_seqs().len() > 5, "expected rollover");
    assert_eq!(segment_files(dir.path()).len(), log.segment_seqs().len());
    drop(log);
    let replay = reopen(dir.path(), small_segments());
    for partition in 0..3 {
        let expected: Vec<Record> = (1..=100).map(|i| entry(partition, i, 1)).collect();
        assert_eq!(entries_of(&replay, partition), expected);
    }
}

#[test]
fn oversized_record_gets_its_own_growing_segment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let big = Record::entry(0, 1, 2, vec![7; 5000]);
    let records = vec![entry(0, 1, 1), big.clone(), entry(0, 3, 2)];
    drop(write_synced(dir.path(), small_segments(), &records));
    let replay = reopen(dir.path(), small_segments());
    let survived = entries_of(&replay, 0);
    assert!(survived == records, "oversized record did not round trip");
    assert_eq!(big.payload.len(), survived[1].payload.len());
}

#[test]
fn compaction_deletes_only_segments_without_needed_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = FileLog::open(dir.path(), small_segments()).expect("open").0;
    // Partition 1 writes once, into the first segment, and its entry is
    // never covered: that segment must survive everything below.
    log.append(&[entry(1, 1, 1), Record::hard_state(0, 1, 0, vec![])])
        .expect("append");
    for i in 1..=200 {
        log.append(&[entry(0, i, 1)]).expect("append");
    }
    log.append(&[Record::hard_state(0, 1, 200, vec![])])
        .expect("append");
    log.sync().expect("sync");
    let before = log.segment_seqs();
    assert!(before.len() > 5);
    log.mark_compactable(0, 200).expect("compact");
    assert_eq!(log.segment_seqs(), before, "partition 1 pins the oldest");
    log.mark_compactable(1, 1).expect("compact");
    let after = log.segment_seqs();
    assert_eq!(after, vec![*before.last().expect("segments")]);
    assert_eq!(segment_files(dir.path()).len(), 1);
    drop(log);
    let replay = reopen(dir.path(), small_segments());
    let hard_state = replay.partitions[&0]
        .hard_state
        .clone()
        .expect("hard state");
    assert_eq!(hard_state.index, 200, "latest hard state kept");
}

#[test]
fn compaction_keeps_segment_holding_only_hard_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = FileLog::open(dir.path(), small_segments()).expect("open").0;
    log.append(&[Record::hard_state(5, 3, 0, b"only".to_vec())])
        .expect("append");
    for i in 1..=100 {
        log.append(&[entry(0, i, 1)]).expect("append");
    }
    log.sync().expect("sync");
    let first = log.segment_seqs()[0];
    log.mark_compactable(0, 100).expect("compact");
    assert_eq!(log.segment_seqs()[0], first);
    drop(log);
    let replay = reopen(dir.path(), small_segments());
    assert_eq!(
        replay.partitions[&5]
            .hard_state
            .as_ref()
            .map(|h| h.payload.clone()),
        Some(b"only".to_vec())
    );
}

#[test]
fn snapshot_marker_compacts_on_reopen_and_hides_covered_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut records: Vec<Record> = (1..=100).map(|i| entry(0, i, 1)).collect();
    records.push(Record::snapshot(0, 1, 90, vec![]));
    let log = write_synced(dir.path(), small_segments(), &records);
    let segments_before = log.segment_seqs().len();
    drop(log);
    let (log, replay) = FileLog::open(dir.path(), small_segments()).expect("reopen");
    assert!(log.segment_seqs().len() < segments_before);
    let indexes: Vec<u64> = entries_of(&replay, 0).iter().map(|e| e.index).collect();
    assert_eq!(indexes, (91..=100).collect::<Vec<_>>());
    assert_eq!(
        replay.partitions[&0].snapshot.as_ref().map(|s| s.index),
        Some(90)
    );
}

/// Small segments keep the per-offset copies and reopens cheap.
fn crash_options() -> FileLogOptions {
    // Segments made on the writer's path, fallocated: the other way in.
    FileLogOptions {
        segment_bytes: 4096,
        preallocate: Preallocate::Fallocate,
        prepare_next_segment: false,
    }
}

/// Writes `prefix` then `last`, all synced, into one segment; returns the
/// byte offset and size of `last`.
fn write_template(dir: &Path, prefix: &[Record], last: &Record) -> (u64, u64) {
    let mut log = write_synced(dir, crash_options(), prefix);
    log.append(std::slice::from_ref(last)).expect("append");
    log.sync().expect("sync");
    assert_eq!(log.segment_seqs().len(), 1);
    let start = SEGMENT_HEADER_BYTES + prefix.iter().map(|r| r.encoded_bytes() as u64).sum::<u64>();
    (start, last.encoded_bytes() as u64)
}

/// Reopens a damaged copy: exactly `prefix` survives, and the log takes and
/// keeps a new append after it.
fn assert_recovers_to(dir: &Path, prefix: &[Record], case: &str) {
    let (mut log, replay) =
        FileLog::open(dir, crash_options()).unwrap_or_else(|e| panic!("{case}: open failed: {e}"));
    assert_eq!(entries_of(&replay, 0), prefix, "{case}");
    let next = entry(0, prefix.len() as u64 + 1, 9);
    log.append(std::slice::from_ref(&next)).expect("append");
    log.sync().expect("sync");
    drop(log);
    let mut expected = prefix.to_vec();
    expected.push(next);
    assert_eq!(
        entries_of(&reopen(dir, crash_options()), 0),
        expected,
        "{case}: after new append"
    );
}

fn damage(template: &Path, segment: &str, apply: impl FnOnce(&mut Vec<u8>)) -> tempfile::TempDir {
    let copy = tempfile::tempdir().expect("tempdir");
    copy_dir(template, copy.path());
    let path = copy.path().join(segment);
    let mut bytes = fs::read(&path).expect("read");
    apply(&mut bytes);
    fs::write(&path, bytes).expect("write");
    copy
}

#[test]
fn torn_last_record_at_every_byte_is_cut_back_and_log_continues() {
    let template = tempfile::tempdir().expect("tempdir");
    let prefix: Vec<Record> = (1..=3).map(|i| entry(0, i, 1)).collect();
    let last = entry(0, 4, 1);
    let (start, len) = write_template(template.path(), &prefix, &last);
    let segment = segment_files(template.path()).remove(0);
    for cut in start..start + len {
        let cut = cut as usize;
        let truncated = damage(template.path(), &segment, |b| b.truncate(cut));
        assert_recovers_to(truncated.path(), &prefix, &format!("truncate at {cut}"));
        let zeroed = damage(template.path(), &segment, |b| b[cut..].fill(0));
        assert_recovers_to(zeroed.path(), &prefix, &format!("zero from {cut}"));
        // The first sector of a write lost but later ones kept: the stale
        // bytes after the cut must never resurface as data.
        let holed = damage(template.path(), &segment, |b| {
            b[start as usize..=cut].fill(0)
        });
        assert_recovers_to(holed.path(), &prefix, &format!("hole up to {cut}"));
    }
}

#[test]
fn flipped_byte_in_last_record_is_cut_back_and_log_continues() {
    let template = tempfile::tempdir().expect("tempdir");
    let prefix: Vec<Record> = (1..=3).map(|i| entry(0, i, 1)).collect();
    let last = entry(0, 4, 1);
    let (start, len) = write_template(template.path(), &prefix, &last);
    let segment = segment_files(template.path()).remove(0);
    for at in start..start + len {
        let flipped = damage(template.path(), &segment, |b| b[at as usize] ^= 0x40);
        assert_recovers_to(flipped.path(), &prefix, &format!("flip at {at}"));
    }
}

fn three_segment_template() -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let records: Vec<Record> = (1..=60).map(|i| entry(0, i, 1)).collect();
    let log = write_synced(dir.path(), small_segments(), &records);
    assert!(log.segment_seqs().len() >= 3);
    drop(log);
    let names = segment_files(dir.path());
    (dir, names)
}

fn assert_corrupt(dir: &Path, case: &str) {
    match FileLog::open(dir, small_segments()) {
        Err(WalError::Corrupt { .. }) => {}
        Err(other) => panic!("{case}: expected Corrupt, got {other}"),
        Ok(_) => panic!("{case}: damaged acknowledged data was accepted"),
    }
}

#[test]
fn bad_record_before_a_later_segment_is_corruption_not_a_torn_tail() {
    let (template, names) = three_segment_template();
    let first_record = SEGMENT_HEADER_BYTES as usize;
    let flipped = damage(template.path(), &names[0], |b| b[first_record + 12] ^= 1);
    assert_corrupt(flipped.path(), "flipped byte in first segment");
    let zeroed = damage(template.path(), &names[1], |b| {
        b[first_record..first_record + 8].fill(0)
    });
    assert_corrupt(zeroed.path(), "zeroed record in middle segment");
    let missing = tempfile::tempdir().expect("tempdir");
    copy_dir(template.path(), missing.path());
    fs::remove_file(missing.path().join(&names[1])).expect("remove");
    assert_corrupt(missing.path(), "missing middle segment");
    let bad_header = damage(template.path(), &names[0], |b| b[3] ^= 1);
    assert_corrupt(bad_header.path(), "bad header of first segment");
}

#[test]
fn torn_tail_in_last_of_several_segments_is_cut_back() {
    let (template, names) = three_segment_template();
    let last = names.last().expect("names");
    let bytes = fs::read(template.path().join(last)).expect("read");
    let end = bytes.iter().rposition(|&b| b != 0).expect("data");
    let torn = damage(template.path(), last, |b| b[end] ^= 0x10);
    let (mut log, replay) = FileLog::open(torn.path(), small_segments()).expect("open");
    let expected: Vec<Record> = (1..=59).map(|i| entry(0, i, 1)).collect();
    assert_eq!(entries_of(&replay, 0), expected);
    assert!(replay.torn_tail_bytes > 0);
    log.append(&[entry(0, 60, 2)]).expect("append");
    log.sync().expect("sync");
    drop(log);
    assert_eq!(
        entries_of(&reopen(torn.path(), small_segments()), 0).len(),
        60
    );
}

#[test]
fn unfinished_last_segment_without_header_is_discarded() {
    let (template, names) = three_segment_template();
    let copy = tempfile::tempdir().expect("tempdir");
    copy_dir(template.path(), copy.path());
    let last = names.last().expect("names");
    let seq = u64::from_str_radix(&last[4..20], 16).expect("seq");
    let unfinished = copy.path().join(format!("wal-{:016x}.log", seq + 1));
    fs::write(&unfinished, vec![0u8; 1024]).expect("write");
    let (mut log, replay) = FileLog::open(copy.path(), small_segments()).expect("open");
    assert_eq!(entries_of(&replay, 0).len(), 60);
    log.append(&[entry(0, 61, 1)]).expect("append");
    log.sync().expect("sync");
    drop(log);
    assert_eq!(
        entries_of(&reopen(copy.path(), small_segments()), 0).len(),
        61
    );
}

#[test]
fn second_open_of_same_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_log, _) = FileLog::open(dir.path(), FileLogOptions::default()).expect("open");
    assert!(matches!(
        FileLog::open(dir.path(), FileLogOptions::default()),
        Err(WalError::Locked { .. })
    ));
}

#[test]
fn oversized_payload_rejects_whole_batch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, _) = FileLog::open(dir.path(), FileLogOptions::default()).expect("open");
    let too_big = Record::entry(0, 1, 2, vec![0; stoa_wal::RECORD_PAYLOAD_BYTES_MAX + 1]);
    assert!(matches!(
        log.append(&[entry(0, 1, 1), too_big]),
        Err(WalError::RecordTooLarge { .. })
    ));
    log.sync().expect("log still usable");
    drop(log);
    assert!(reopen(dir.path(), FileLogOptions::default())
        .partitions
        .is_empty());
}

#[test]
fn zero_fill_preallocation_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = FileLogOptions {
        segment_bytes: 4096,
        preallocate: Preallocate::ZeroFill,
        prepare_next_segment: true,
    };
    let records: Vec<Record> = (1..=100).map(|i| entry(0, i, 1)).collect();
    drop(write_synced(dir.path(), options, &records));
    let file = dir.path().join(&segment_files(dir.path())[0]);
    assert_eq!(fs::metadata(file).expect("stat").len(), 4096);
    assert_eq!(entries_of(&reopen(dir.path(), options), 0), records);
}

/// Appends and syncs `count` entries of partition 0 from `first`, pausing
/// between syncs so the spare segment has time to be prepared.
fn write_slowly(log: &mut FileLog, first: u64, count: u64) {
    for i in first..first + count {
        log.append(&[entry(0, i, 1)]).expect("append");
        log.sync().expect("sync");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn rollovers_install_the_prepared_spare_and_everything_replays() {
    // Proves the spare path is taken and loses or adds nothing across many
    // rollovers and a reopen.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = FileLog::open(dir.path(), small_segments()).expect("open").0;
    write_slowly(&mut log, 1, 300);
    assert!(log.segment_seqs().len() > 10, "expected rollovers");
    assert!(log.spares_used() > 0, "no rollover used a spare");
    assert_eq!(segment_files(dir.path()).len(), log.segment_seqs().len());
    drop(log);
    let expected: Vec<Record> = (1..=300).map(|i| entry(0, i, 1)).collect();
    assert_eq!(
        entries_of(&reopen(dir.path(), small_segments()), 0),
        expected
    );
}

#[test]
fn a_spare_left_by_an_earlier_run_never_brings_its_bytes_back() {
    // Proves a leftover spare holding valid-looking records (here a copy of
    // a real segment) is discarded at open, not installed with its content.
    let (template, names) = three_segment_template();
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(template.path(), dir.path());
    let stale = fs::read(template.path().join(&names[0])).expect("read");
    fs::write(dir.path().join("wal-spare.tmp"), &stale).expect("write spare");
    let (mut log, replay) = FileLog::open(dir.path(), small_segments()).expect("open");
    assert_eq!(entries_of(&replay, 0).len(), 60);
    write_slowly(&mut log, 61, 100);
    assert!(log.spares_used() > 0, "no rollover used a spare");
    drop(log);
    let expected: Vec<Record> = (1..=160).map(|i| entry(0, i, 1)).collect();
    assert_eq!(
        entries_of(&reopen(dir.path(), small_segments()), 0),
        expected
    );
}

#[test]
fn a_durable_snapshot_marker_deletes_covered_segments_while_running() {
    // A running server never reopens its log: the marker alone must free
    // the disk. The deletion runs on a helper thread, so wait (bounded).
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = FileLog::open(dir.path(), small_segments()).expect("open").0;
    let records: Vec<Record> = (1..=200).map(|i| entry(0, i, 1)).collect();
    log.append(&records).expect("append");
    log.append(&[Record::hard_state(0, 1, 200, vec![])])
        .expect("append");
    log.sync().expect("sync");
    let before = segment_files(dir.path()).len();
    assert!(before > 5, "expected rollovers");
    log.append(&[Record::snapshot(0, 1, 190, vec![])])
        .expect("append");
    log.sync().expect("sync");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while segment_files(dir.path()).len() > 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let left = segment_files(dir.path()).len();
    assert!(left <= 2, "{left} of {before} segments left");
    // A sync after the helper finished forgets the deleted segments. The
    // files can be gone while it still syncs the directory: then the sync
    // leaves them listed, and a later one forgets them (bounded wait).
    let mut last = 200;
    loop {
        last += 1;
        log.append(&[entry(0, last, 1)]).expect("append");
        log.sync().expect("sync");
        let listed = log.segment_seqs().len();
        if listed == segment_files(dir.path()).len() || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(log.segment_seqs().len(), segment_files(dir.path()).len());
    drop(log);
    let replay = reopen(dir.path(), small_segments());
    let indexes: Vec<u64> = entries_of(&replay, 0).iter().map(|e| e.index).collect();
    assert_eq!(indexes, (191..=last).collect::<Vec<_>>());
}

#[test]
fn dropping_the_log_abandons_a_spare_being_written() {
    // Default 64 MiB segments: the spare takes hundreds of slices, so a
    // drop right after it starts finds it unfinished and must not wait
    // for the rest (a stopping server would).
    let dir = tempfile::tempdir().expect("tempdir");
    let options = FileLogOptions::default();
    let mut log = FileLog::open(dir.path(), options).expect("open").0;
    let payload = vec![7u8; 64 * 1024];
    let records: Vec<Record> = (1..=32)
        .map(|i| Record::entry(0, 1, i, payload.clone()))
        .collect();
    log.append(&records).expect("append");
    log.sync().expect("sync"); // 2 MiB of records: the spare starts
    drop(log);
    let spare = dir.path().join("wal-spare.tmp");
    let spare_bytes = fs::metadata(&spare).map(|m| m.len()).unwrap_or(0);
    assert!(
        spare_bytes < options.segment_bytes,
        "the spare was finished ({spare_bytes} bytes) instead of abandoned"
    );
    let (_, replay) = FileLog::open(dir.path(), options).expect("reopen");
    assert_eq!(entries_of(&replay, 0), records);
    assert!(!spare.exists(), "open deletes an unfinished spare");
}
