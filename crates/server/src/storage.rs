//! On-disk state of a server: tree snapshots in `<dataDir>/snapshots` and
//! the WAL in `<dataLogDir>/wal`. Restart = newest readable snapshot + the
//! raft entries the WAL holds after it (`stoa_core::node::recovered`, the
//! same code the simulator recovers through).

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Instant;

use stoa_core::node::{self, SnapshotSource, SnapshotStore};
use stoa_wal::{FileLog, FileLogOptions};

use crate::engine::Recovered;
use crate::paced_file::PacedFile;

const SNAPSHOT_PREFIX: &str = "snap-";
/// Large reads: a snapshot is read once, front to back.
const SNAPSHOT_READ_BUFFER: usize = 1 << 20;

/// Snapshots as files `snap-<index>-<term>` in one directory, each written
/// to a temporary file, synced, renamed into place and the directory
/// synced, so a crash leaves whole snapshots or none.
#[derive(Clone)]
pub struct FileSnapshotStore {
    dir: PathBuf,
}

impl FileSnapshotStore {
    /// Creates the directory if needed and deletes the temporary files of
    /// snapshots a stop or crash cut short: never read, they would only
    /// take disk space (one tree's worth each).
    pub fn open(dir: &Path) -> Result<FileSnapshotStore, String> {
        fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        remove_unfinished_snapshots(dir);
        Ok(FileSnapshotStore {
            dir: dir.to_path_buf(),
        })
    }

    fn path_of(&self, index: u64, term: u64) -> PathBuf {
        self.dir
            .join(format!("{SNAPSHOT_PREFIX}{index:020}-{term:020}"))
    }
}

impl SnapshotStore for FileSnapshotStore {
    fn list(&self) -> Result<Vec<(u64, u64)>, String> {
        let mut found = Vec::new();
        let listing = fs::read_dir(&self.dir)
            .map_err(|e| format!("cannot list {}: {e}", self.dir.display()))?;
        for item in listing.flatten() {
            let name = item.file_name().to_string_lossy().to_string();
            let Some(rest) = name.strip_prefix(SNAPSHOT_PREFIX) else {
                continue;
            };
            let Some((index, term)) = rest.split_once('-') else {
                continue;
            };
            if let (Ok(index), Ok(term)) = (index.parse::<u64>(), term.parse::<u64>()) {
                found.push((index, term));
            }
        }
        found.sort();
        Ok(found)
    }

    fn write(&mut self, index: u64, term: u64, source: SnapshotSource<'_>) -> Result<(), String> {
        let path = self.path_of(index, term);
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let fail =
            |what: &str, e: std::io::Error| format!("snapshot {}: {what}: {e}", tmp.display());
        let file = File::create(&tmp).map_err(|e| fail("create", e))?;
        // Paced, so the WAL's syncs meanwhile do not wait behind the file.
        let mut writer = PacedFile::new(file);
        source.write_to(&mut writer).map_err(|e| fail("write", e))?;
        let file = writer.finish().map_err(|e| fail("write", e))?;
        file.sync_all().map_err(|e| fail("fsync", e))?;
        fs::rename(&tmp, &path).map_err(|e| fail("rename", e))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail("fsync dir", e))
    }

    fn reader(&self, index: u64, term: u64) -> Result<Box<dyn BufRead + '_>, String> {
        let path = self.path_of(index, term);
        let file = File::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        Ok(Box::new(BufReader::with_capacity(
            SNAPSHOT_READ_BUFFER,
            file,
        )))
    }

    fn describe(&self, index: u64, term: u64) -> String {
        format!("snapshot {}", self.path_of(index, term).display())
    }

    fn remove(&mut self, index: u64, term: u64) -> Result<(), String> {
        fs::remove_file(self.path_of(index, term)).map_err(|e| e.to_string())
    }
}

/// Where partition `partition`'s snapshots live: partition 0's in the
/// snapshot directory itself (where a server of one partition keeps them),
/// each other's in a directory of its own inside it.
pub fn partition_snapshot_dir(snapshot_dir: &Path, partition: u32) -> PathBuf {
    if partition == 0 {
        snapshot_dir.to_path_buf()
    } else {
        snapshot_dir.join(format!("partition-{partition}"))
    }
}

/// Opens the WAL and loads each partition's newest readable snapshot: the
/// state the server's `partitions` partitions start from.
pub fn recover(
    snapshot_dir: &Path,
    wal_dir: &Path,
    partitions: u32,
) -> Result<(Vec<Recovered>, FileLog), String> {
    let stores = (0..partitions)
        .map(|p| FileSnapshotStore::open(&partition_snapshot_dir(snapshot_dir, p)))
        .collect::<Result<Vec<_>, String>>()?;
    refuse_other_partition_count(snapshot_dir, partitions)?;
    fs::create_dir_all(wal_dir).map_err(|e| format!("cannot create {}: {e}", wal_dir.display()))?;
    // Reading the log is mostly waiting for the disk and loading the
    // snapshot mostly computing: side by side, a restart takes about as
    // long as the snapshot alone.
    let (opened, loaded) = std::thread::scope(|scope| {
        let wal = scope.spawn(|| {
            let started = Instant::now();
            FileLog::open(wal_dir, FileLogOptions::default()).map(|open| (open, started.elapsed()))
        });
        let started = Instant::now();
        let loaded =
            node::load_newest_of_server(&stores).map(|snapshots| (snapshots, started.elapsed()));
        (wal.join().expect("WAL reader thread panicked"), loaded)
    });
    let ((log, replay), wal_read) =
        opened.map_err(|e| format!("WAL {}: {e}", wal_dir.display()))?;
    if let Some(&beyond) = replay.partitions.keys().find(|&&p| p >= partitions) {
        return Err(format!(
            "the WAL in {} holds partition {beyond}, but this server runs {partitions} \
             partition(s): start it with the partitions it was written with",
            wal_dir.display()
        ));
    }
    let (snapshots, snapshot_read) = loaded?;
    let mut recovered = Vec::with_capacity(snapshots.len());
    for (partition, snapshot) in (0..partitions).zip(snapshots) {
        let r = node::recovered(snapshot, &replay, partition)?;
        log::info!(
            "partition {partition}: recovered snapshot at index {} ({} nodes, zxid {:#x}) and {} \
             log entries",
            r.snapshot_index,
            r.tree.node_count(),
            r.tree.last_zxid(),
            r.entries.len(),
        );
        recovered.push(r);
    }
    log::info!(
        "snapshots read in {:.2} s, WAL read in {:.2} s",
        snapshot_read.as_secs_f64(),
        wal_read.as_secs_f64()
    );
    Ok((recovered, log))
}

/// A data directory written with more partitions than configured holds
/// state this server would not serve: refused rather than dropped.
fn refuse_other_partition_count(snapshot_dir: &Path, partitions: u32) -> Result<(), String> {
    let Ok(listing) = fs::read_dir(snapshot_dir) else {
        return Ok(());
    };
    for item in listing.flatten() {
        let name = item.file_name().to_string_lossy().to_string();
        let Some(p) = name
            .strip_prefix("partition-")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if p >= partitions {
            return Err(format!(
                "{} holds snapshots of partition {p}, but this server runs {partitions} \
                 partition(s): start it with the partitions it was written with",
                snapshot_dir.display()
            ));
        }
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use stoa_tree::DataTree;

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
        let mut store = FileSnapshotStore::open(&snaps).unwrap();
        let tree = DataTree::new();
        node::write_snapshot(&mut store, 5, 1, SnapshotSource::Tree(&tree)).unwrap();
        let unfinished = snaps.join(format!("{SNAPSHOT_PREFIX}{:020}-{:020}.tmp", 9, 1));
        fs::write(&unfinished, b"half a snapshot").unwrap();
        let (recovered, wal_log) = recover(&snaps, &wal, 1).unwrap();
        assert_eq!(recovered[0].snapshot_index, 5);
        assert!(!unfinished.exists(), "unfinished snapshot left behind");
        assert_eq!(store.list().unwrap(), vec![(5, 1)]);
        drop(wal_log);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn each_partition_recovers_its_own_snapshot_and_a_smaller_count_is_refused() {
        // Proves partition 1's snapshots live in their own directory and
        // come back as partition 1's, and that a server started with fewer
        // partitions than its data directory holds refuses to start.
        let base =
            std::env::temp_dir().join(format!("stoa-partitions-test-{}", std::process::id()));
        let (snaps, wal) = (base.join("snapshots"), base.join("wal"));
        let mut second = FileSnapshotStore::open(&partition_snapshot_dir(&snaps, 1)).unwrap();
        let tree = DataTree::new();
        node::write_snapshot(&mut second, 7, 2, SnapshotSource::Tree(&tree)).unwrap();
        let (recovered, wal_log) = recover(&snaps, &wal, 2).unwrap();
        let indexes: Vec<u64> = recovered.iter().map(|r| r.snapshot_index).collect();
        assert_eq!(indexes, [0, 7]);
        drop(wal_log);
        let Err(err) = recover(&snaps, &wal, 1) else {
            panic!("started with one partition over a directory of two");
        };
        assert!(err.contains("partition 1"), "{err}");
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_file_store_keeps_the_newest_two_and_reads_back_what_it_wrote() {
        // Proves the file store obeys the same retention rule as every store
        // and that a snapshot written from bytes reads back as the tree.
        let dir = std::env::temp_dir().join(format!("stoa-snapstore-{}", std::process::id()));
        let mut store = FileSnapshotStore::open(&dir).unwrap();
        let tree = DataTree::new();
        let mut bytes = Vec::new();
        stoa_tree::write_snapshot(&tree, &mut bytes).unwrap();
        for index in [3, 6, 9] {
            node::write_snapshot(&mut store, index, 2, SnapshotSource::Bytes(&bytes)).unwrap();
        }
        assert_eq!(store.list().unwrap(), vec![(6, 2), (9, 2)]);
        assert_eq!(store.load_tree(9, 2).unwrap().digest(), tree.digest());
        fs::remove_dir_all(&dir).unwrap();
    }
}
