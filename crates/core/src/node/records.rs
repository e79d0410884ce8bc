//! Raft's entries and hard state as WAL records, and back: what a persist
//! job writes and what a replay gives the engine on restart.

use raft::eraftpb::{Entry, EntryType, HardState};
use stoa_wal::{Record, Replay};

/// Raft entry → WAL record payload: one byte of entry type, then the data.
pub fn entry_to_record(partition: u32, entry: &Entry) -> Record {
    let mut payload = Vec::with_capacity(1 + entry.data.len());
    payload.push(entry.get_entry_type() as u8);
    payload.extend_from_slice(&entry.data);
    Record::entry(partition, entry.term, entry.index, payload)
}

pub fn record_to_entry(record: &Record) -> Result<Entry, String> {
    let (&kind, data) = record
        .payload
        .split_first()
        .ok_or_else(|| format!("empty WAL entry at index {}", record.index))?;
    let entry_type = match kind {
        0 => EntryType::EntryNormal,
        1 => EntryType::EntryConfChange,
        2 => EntryType::EntryConfChangeV2,
        other => {
            return Err(format!(
                "unknown entry type {other} at index {}",
                record.index
            ))
        }
    };
    let mut entry = Entry {
        term: record.term,
        index: record.index,
        data: data.to_vec().into(),
        ..Default::default()
    };
    entry.set_entry_type(entry_type);
    Ok(entry)
}

pub fn hard_state_record(partition: u32, hs: &HardState) -> Record {
    let mut payload = Vec::with_capacity(24);
    payload.extend_from_slice(&hs.term.to_be_bytes());
    payload.extend_from_slice(&hs.vote.to_be_bytes());
    payload.extend_from_slice(&hs.commit.to_be_bytes());
    Record::hard_state(partition, hs.term, hs.commit, payload)
}

pub fn record_to_hard_state(record: &Record) -> Result<HardState, String> {
    let p = &record.payload;
    if p.len() != 24 {
        return Err(format!("hard state record of {} bytes", p.len()));
    }
    let word = |i: usize| u64::from_be_bytes(p[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    Ok(HardState {
        term: word(0),
        vote: word(1),
        commit: word(2),
        ..Default::default()
    })
}

/// The WAL records of one synced batch of `partition`'s group: the marker
/// of a snapshot installed from the leader (its term and index) first, so
/// that replay forgets the log it replaced and keeps what follows; then the
/// entries and the latest hard state (every synced batch carries it).
pub fn persist_records(
    partition: u32,
    installed: Option<(u64, u64)>,
    entries: &[Entry],
    hard_state: &HardState,
) -> Vec<Record> {
    let mut records: Vec<Record> = Vec::with_capacity(entries.len() + 2);
    if let Some((term, index)) = installed {
        records.push(Record::snapshot_installed(partition, term, index));
    }
    records.extend(entries.iter().map(|e| entry_to_record(partition, e)));
    records.push(hard_state_record(partition, hard_state));
    records
}

/// The hard state and the entries after `snapshot_index` that the log holds
/// for `partition`; they must follow the snapshot without a gap.
pub fn entries_after(
    replay: &Replay,
    partition: u32,
    snapshot_index: u64,
) -> Result<(HardState, Vec<Entry>), String> {
    let Some(p) = replay.partition(partition) else {
        return Ok((HardState::default(), Vec::new()));
    };
    let hard_state = p
        .hard_state
        .as_ref()
        .map(record_to_hard_state)
        .transpose()?
        .unwrap_or_default();
    let mut entries = Vec::new();
    for record in p.entries.iter().filter(|r| r.index > snapshot_index) {
        entries.push(record_to_entry(record)?);
    }
    if let Some(first) = entries.first() {
        if first.index != snapshot_index + 1 {
            return Err(format!(
                "WAL starts at index {} but the snapshot ends at {snapshot_index}: entries are missing",
                first.index
            ));
        }
    }
    Ok((hard_state, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_through_wal_records() {
        let mut e = Entry {
            term: 3,
            index: 9,
            data: b"txn".to_vec().into(),
            ..Default::default()
        };
        e.set_entry_type(EntryType::EntryConfChange);
        let back = record_to_entry(&entry_to_record(0, &e)).unwrap();
        assert_eq!(back, e);
        let hs = HardState {
            term: 4,
            vote: 1,
            commit: 77,
            ..Default::default()
        };
        assert_eq!(
            record_to_hard_state(&hard_state_record(0, &hs)).unwrap(),
            hs
        );
    }
}
