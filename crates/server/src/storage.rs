//! On-disk state of a server: tree snapshots in `<dataDir>/snapshots` and
//! the WAL in `<dataLogDir>/wal`. Restart = newest readable snapshot + the
//! raft entries the WAL holds after it.

use std::fs::{self, File};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use raft::eraftpb::{Entry, EntryType, HardState};
use stoa_tree::DataTree;
use stoa_wal::{FileLog, FileLogOptions, Record, Replay};

use crate::engine::{PersistJob, Recovered};
use crate::paced_file::PacedFile;

const SNAPSHOT_PREFIX: &str = "snap-";
/// Large reads: a snapshot is read once, front to back.
const SNAPSHOT_READ_BUFFER: usize = 1 << 20;
/// Snapshots kept on disk; the WAL keeps entries back to the oldest, so a
/// damaged newest snapshot still leaves a full recovery path.
pub const SNAPSHOTS_RETAINED: usize = 2;

/// Raft entry → WAL record payload: one byte of entry type, then the data.
pub fn entry_to_record(partition: u32, entry: &Entry) -> Record {
    let mut payload = Vec::with_capacity(1 + entry.data.len());
    payload.push(entry.get_entry_type() as u8);
    payload.extend_from_slice(&entry.data);
    Record::entry(partition, entry.term, entry.index, payload)
}

fn record_to_entry(record: &Record) -> Result<Entry, String> {
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

fn record_to_hard_state(record: &Record) -> Result<HardState, String> {
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

/// The WAL records of one batch. An installed snapshot's marker comes
/// first: replay then forgets the log it replaced, and keeps what follows.
pub fn persist_job_records(partition: u32, job: &PersistJob) -> Vec<Record> {
    let mut records: Vec<Record> = Vec::with_capacity(job.entries.len() + 2);
    if let Some(s) = &job.installed {
        records.push(Record::snapshot_installed(partition, s.term, s.index));
    }
    records.extend(job.entries.iter().map(|e| entry_to_record(partition, e)));
    if let Some(hs) = &job.hard_state {
        records.push(hard_state_record(partition, hs));
    }
    records
}

/// Opens the WAL and loads the newest readable snapshot: the state the
/// partition starts from.
pub fn recover(
    snapshot_dir: &Path,
    wal_dir: &Path,
    partition: u32,
) -> Result<(Recovered, FileLog), String> {
    fs::create_dir_all(snapshot_dir)
        .map_err(|e| format!("cannot create {}: {e}", snapshot_dir.display()))?;
    fs::create_dir_all(wal_dir).map_err(|e| format!("cannot create {}: {e}", wal_dir.display()))?;
    remove_unfinished_snapshots(snapshot_dir);
    // Reading the log is mostly waiting for the disk and loading the
    // snapshot mostly computing: side by side, a restart takes about as
    // long as the snapshot alone.
    let (opened, loaded) = std::thread::scope(|scope| {
        let wal = scope.spawn(|| {
            let started = Instant::now();
            FileLog::open(wal_dir, FileLogOptions::default()).map(|open| (open, started.elapsed()))
        });
        let started = Instant::now();
        let loaded = load_newest_snapshot(snapshot_dir).map(|tree| (tree, started.elapsed()));
        (wal.join().expect("WAL reader thread panicked"), loaded)
    });
    let ((log, replay), wal_read) =
        opened.map_err(|e| format!("WAL {}: {e}", wal_dir.display()))?;
    if replay.torn_tail_bytes > 0 {
        log::warn!(
            "WAL: discarded a torn tail of {} bytes (a write cut short by a crash)",
            replay.torn_tail_bytes
        );
    }
    let ((tree, snapshot_index, snapshot_term), snapshot_read) = loaded?;
    let (hard_state, entries) = entries_after(&replay, partition, snapshot_index)?;
    log::info!(
        "recovered snapshot at index {snapshot_index} ({} nodes, zxid {:#x}, read in {:.2} s) and {} log entries (WAL read in {:.2} s)",
        tree.node_count(),
        tree.last_zxid(),
        snapshot_read.as_secs_f64(),
        entries.len(),
        wal_read.as_secs_f64()
    );
    Ok((
        Recovered {
            tree,
            snapshot_index,
            snapshot_term,
            hard_state,
            entries,
        },
        log,
    ))
}

fn entries_after(
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

fn snapshot_files(dir: &Path) -> Result<Vec<(u64, u64, PathBuf)>, String> {
    let mut found = Vec::new();
    let listing = fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for item in listing.flatten() {
        let name = item.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix(SNAPSHOT_PREFIX) else {
            continue;
        };
        let Some((index, term)) = rest.split_once('-') else {
            continue;
        };
        if let (Ok(index), Ok(term)) = (index.parse::<u64>(), term.parse::<u64>()) {
            found.push((index, term, item.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// Deletes the temporary files of snapshots a stop or crash cut short:
/// never read, they would only take disk space (one tree's worth each).
fn remove_unfinished_snapshots(dir: &Path) {
    let Ok(listing) = fs::read_dir(dir) else {
        return;
    };
    for item in listing.flatten() {
        let name = item.file_name().to_string_lossy().to_string();
        if name.starts_with(SNAPSHOT_PREFIX) && name.ends_with(".tmp") {
            match fs::remove_file(item.path()) {
                Ok(()) => log::info!("removed unfinished snapshot {name}"),
                Err(e) => log::warn!("cannot remove unfinished snapshot {name}: {e}"),
            }
        }
    }
}

fn load_newest_snapshot(dir: &Path) -> Result<(DataTree, u64, u64), String> {
    for (index, term, path) in snapshot_files(dir)?.into_iter().rev() {
        let file = File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        match stoa_tree::read_snapshot(&mut BufReader::with_capacity(SNAPSHOT_READ_BUFFER, file)) {
            Ok(tree) => return Ok((tree, index, term)),
            Err(e) => log::error!(
                "snapshot {} is unreadable ({e}); trying an older one",
                path.display()
            ),
        }
    }
    Ok((DataTree::new(), 0, 0))
}

/// Writes a snapshot durably (temp file, fsync, rename, fsync dir) and
/// prunes old ones. Returns the index up to which the WAL may be compacted.
pub fn write_snapshot(
    dir: &Path,
    tree: &DataTree,
    index: u64,
    term: u64,
) -> Result<Option<u64>, String> {
    write_snapshot_with(dir, index, term, |w| stoa_tree::write_snapshot(tree, w))
}

/// Writes a snapshot already serialized (one received from the leader).
pub fn write_snapshot_bytes(
    dir: &Path,
    index: u64,
    term: u64,
    data: &[u8],
) -> Result<Option<u64>, String> {
    write_snapshot_with(dir, index, term, |w| w.write_all(data))
}

fn write_snapshot_with(
    dir: &Path,
    index: u64,
    term: u64,
    write: impl FnOnce(&mut PacedFile) -> std::io::Result<()>,
) -> Result<Option<u64>, String> {
    let name = format!("{SNAPSHOT_PREFIX}{index:020}-{term:020}");
    let tmp = dir.join(format!("{name}.tmp"));
    let fail = |what: &str, e: std::io::Error| format!("snapshot {}: {what}: {e}", tmp.display());
    let file = File::create(&tmp).map_err(|e| fail("create", e))?;
    // Paced, so the WAL's syncs meanwhile do not wait behind the file.
    let mut writer = PacedFile::new(file);
    write(&mut writer).map_err(|e| fail("write", e))?;
    let file = writer.finish().map_err(|e| fail("write", e))?;
    file.sync_all().map_err(|e| fail("fsync", e))?;
    fs::rename(&tmp, dir.join(&name)).map_err(|e| fail("rename", e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail("fsync dir", e))?;
    let files = snapshot_files(dir)?;
    let excess = files.len().saturating_sub(SNAPSHOTS_RETAINED);
    for (_, _, old) in &files[..excess] {
        if let Err(e) = fs::remove_file(old) {
            log::warn!("cannot remove old snapshot {}: {e}", old.display());
        }
    }
    // Keep the log back to the oldest retained snapshot.
    Ok(files.get(excess).map(|(index, _, _)| *index))
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

    #[test]
    fn recovery_loads_the_newest_snapshot_and_removes_unfinished_ones() {
        // Proves a snapshot cut short by a stop (its .tmp file) is deleted at
        // the next start, and the newest complete snapshot is the one loaded.
        let base = std::env::temp_dir().join(format!(
            "stoa-storage-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let (snaps, wal) = (base.join("snapshots"), base.join("wal"));
        fs::create_dir_all(&snaps).unwrap();
        let tree = DataTree::new();
        write_snapshot(&snaps, &tree, 5, 1).unwrap();
        let unfinished = snaps.join(format!("{SNAPSHOT_PREFIX}{:020}-{:020}.tmp", 9, 1));
        fs::write(&unfinished, b"half a snapshot").unwrap();
        let (recovered, wal_log) = recover(&snaps, &wal, 0).unwrap();
        assert_eq!(recovered.snapshot_index, 5);
        assert!(!unfinished.exists(), "unfinished snapshot left behind");
        assert_eq!(snapshot_files(&snaps).unwrap().len(), 1);
        drop(wal_log);
        fs::remove_dir_all(&base).unwrap();
    }
}
