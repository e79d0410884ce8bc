//! SimLog: what survives a simulated crash, torn writes, injected fsync
//! failures, and its agreement with FileLog on the same history.

use stoa_wal::{LogStore, Record, Replay, SimLog, WalError};

fn entry(partition: u32, index: u64) -> Record {
    Record::entry(
        partition,
        1,
        index,
        vec![index as u8; (index % 13) as usize],
    )
}

fn indexes(replay: &Replay, partition: u32) -> Vec<u64> {
    replay
        .partition(partition)
        .map(|p| p.entries.iter().map(|e| e.index).collect())
        .unwrap_or_default()
}

#[test]
fn crash_keeps_synced_and_loses_or_cuts_back_unsynced_for_every_seed() {
    let mut lost_all = 0;
    let mut kept_some = 0;
    for seed in 0..500 {
        let mut log = SimLog::new();
        log.append(&(1..=5).map(|i| entry(0, i)).collect::<Vec<_>>())
            .expect("append");
        log.sync().expect("sync");
        log.append(&(6..=9).map(|i| entry(0, i)).collect::<Vec<_>>())
            .expect("append");
        log.crash(seed);
        assert!(matches!(log.append(&[entry(0, 10)]), Err(WalError::Failed)));
        let replay = log.recover();
        let survived = indexes(&replay, 0);
        // Synced records always survive; unsynced ones only as an intact
        // prefix of the torn write, never damaged, never out of order.
        assert!(survived.len() >= 5, "seed {seed}: synced record lost");
        assert_eq!(survived, (1..=survived.len() as u64).collect::<Vec<_>>());
        for record in &replay.partitions[&0].entries {
            assert_eq!(*record, entry(0, record.index), "seed {seed}");
        }
        if survived.len() == 5 {
            lost_all += 1;
        } else {
            kept_some += 1;
        }
        // Recovered log continues after what survived.
        let next = survived.len() as u64 + 1;
        log.append(&[entry(0, next)]).expect("append after recover");
        log.sync().expect("sync after recover");
        log.crash(seed + 1);
        assert_eq!(indexes(&log.recover(), 0).len() as u64, next);
    }
    assert!(lost_all > 100 && kept_some > 50, "{lost_all} {kept_some}");
}

#[test]
fn same_seed_replays_the_same_crash() {
    let run = |seed| {
        let mut log = SimLog::new();
        log.append(&(1..=20).map(|i| entry(3, i)).collect::<Vec<_>>())
            .expect("append");
        log.crash(seed);
        log.recover()
    };
    for seed in 0..50 {
        assert_eq!(run(seed), run(seed));
    }
}

#[test]
fn failed_sync_is_fail_stop_and_its_records_are_not_durable() {
    let mut log = SimLog::new();
    log.append(&[entry(0, 1)]).expect("append");
    log.sync().expect("sync");
    log.append(&[entry(0, 2)]).expect("append");
    log.fail_next_sync();
    assert!(matches!(log.sync(), Err(WalError::InjectedSyncFailure)));
    assert!(matches!(log.sync(), Err(WalError::Failed)));
    assert!(matches!(log.append(&[entry(0, 3)]), Err(WalError::Failed)));
    assert_eq!(log.durable_records().count(), 1);
    log.crash(7);
    let replay = log.recover();
    assert!(indexes(&replay, 0).starts_with(&[1]));
    log.append(&[entry(0, 2)]).expect("usable after recover");
    log.sync().expect("sync after recover");
}

#[test]
fn compaction_drops_covered_prefix_but_keeps_latest_state() {
    let mut log = SimLog::new();
    log.append(&[Record::hard_state(0, 1, 0, b"hs".to_vec())])
        .expect("append");
    log.append(&(1..=10).map(|i| entry(0, i)).collect::<Vec<_>>())
        .expect("append");
    log.sync().expect("sync");
    log.mark_compactable(0, 5).expect("compact");
    // The hard state is first and still the latest: nothing behind it goes.
    assert_eq!(log.durable_records().count(), 11);
    log.append(&[Record::hard_state(0, 1, 10, b"hs2".to_vec())])
        .expect("append");
    log.sync().expect("sync");
    log.mark_compactable(0, 5).expect("compact");
    assert_eq!(log.durable_records().count(), 6);
    let replay = log.recover();
    assert_eq!(indexes(&replay, 0), (6..=10).collect::<Vec<_>>());
    let hard_state = replay.partitions[&0].hard_state.clone().expect("hs");
    assert_eq!(hard_state.payload, b"hs2");
}

#[test]
fn sim_and_file_log_replay_the_same_synced_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut file, _) =
        stoa_wal::FileLog::open(dir.path(), stoa_wal::FileLogOptions::default()).expect("open");
    let mut sim = SimLog::new();
    let mut history = Vec::new();
    for i in 1..=30u64 {
        history.push(entry((i % 3) as u32, i / 3 + 1));
        if i % 10 == 0 {
            history.push(entry(0, 2));
            history.push(Record::hard_state(0, 2, 2, vec![]));
        }
    }
    for chunk in history.chunks(4) {
        file.append(chunk).expect("append");
        sim.append(chunk).expect("append");
        file.sync().expect("sync");
        sim.sync().expect("sync");
    }
    drop(file);
    let (_, file_replay) =
        stoa_wal::FileLog::open(dir.path(), stoa_wal::FileLogOptions::default()).expect("reopen");
    assert_eq!(file_replay, sim.recover());
}
