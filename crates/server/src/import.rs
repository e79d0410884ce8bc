//! `stoa import`: a ZooKeeper data directory (its `dataDir` and
//! `dataLogDir`, 3.5 to 3.9) into a new Stoa data directory, offline. The
//! tree is what ZooKeeper itself would restore: its newest valid snapshot
//! and every logged transaction after it (`stoa_core::import`). Nothing is
//! written unless all of it reads.

use std::fs;
use std::path::{Path, PathBuf};

use stoa_core::import::{fill_close_session, read_log, read_snapshot};
use stoa_core::node::{self, SnapshotSource, SnapshotStore};
use stoa_tree::DataTree;
use stoa_wal::{FileLog, FileLogOptions, LogStore};

use crate::storage::FileSnapshotStore;

/// What an import brought.
#[derive(Debug)]
pub struct Imported {
    pub snapshot: Option<PathBuf>,
    pub transactions_replayed: usize,
    pub nodes: usize,
    pub sessions: usize,
    pub last_zxid: i64,
}

/// ZooKeeper's files live in `version-2` under the directories zoo.cfg
/// names; the directory itself is taken when it is that one already.
fn version_dir(dir: &Path) -> PathBuf {
    let inner = dir.join("version-2");
    if inner.is_dir() {
        inner
    } else {
        dir.to_path_buf()
    }
}

/// `prefix.<hex zxid>` files of a directory, newest zxid first.
fn zxid_files(dir: &Path, prefix: &str) -> Result<Vec<(i64, PathBuf)>, String> {
    let listing = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for item in listing.flatten() {
        let name = item.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('.')) else {
            continue;
        };
        if rest.ends_with(".gz") || rest.ends_with(".snappy") {
            return Err(format!(
                "{}: a compressed snapshot is not read; restart ZooKeeper with \
                 zookeeper.snapshot.compression.method=none so it writes a plain one",
                item.path().display()
            ));
        }
        if let Ok(zxid) = u64::from_str_radix(rest, 16) {
            files.push((zxid as i64, item.path()));
        }
    }
    files.sort_by_key(|f| std::cmp::Reverse(f.0));
    Ok(files)
}

/// Builds the tree ZooKeeper would restore from `data_dir` and `log_dir`.
pub fn restore(data_dir: &Path, log_dir: &Path) -> Result<(DataTree, Imported), String> {
    let snapshots = zxid_files(&version_dir(data_dir), "snapshot")?;
    let mut base = None;
    for (zxid, path) in &snapshots {
        let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        match read_snapshot(&bytes).and_then(|s| {
            stoa_tree::tree_from_nodes(&s.acl_lists, s.nodes, s.sessions, *zxid)
                .map_err(|e| e.to_string())
        }) {
            Ok(tree) => {
                base = Some((tree, path.clone()));
                break;
            }
            // As ZooKeeper: an unreadable newest snapshot leaves the one before.
            Err(e) => log::warn!("{}: {e}; trying an older snapshot", path.display()),
        }
    }
    if base.is_none() && !snapshots.is_empty() {
        return Err(format!(
            "no snapshot in {} reads",
            version_dir(data_dir).display()
        ));
    }
    let (mut tree, snapshot) = match base {
        Some((tree, path)) => (tree, Some(path)),
        None => (DataTree::new(), None),
    };
    let from = tree.last_zxid();
    let mut logs = zxid_files(&version_dir(log_dir), "log")?;
    logs.reverse();
    // Logs that start after the snapshot, and the one before them (it
    // holds the transactions just after the snapshot's zxid).
    let first = logs
        .iter()
        .rposition(|(start, _)| *start <= from + 1)
        .unwrap_or(0);
    let mut replayed = 0;
    for (_, path) in &logs[first..] {
        let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let txns = read_log(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        for mut txn in txns {
            if txn.header.zxid <= tree.last_zxid() {
                continue;
            }
            fill_close_session(&tree, &mut txn);
            tree.apply(&txn);
            replayed += 1;
        }
    }
    tree.check_invariants()
        .map_err(|e| format!("the restored tree is inconsistent: {e}"))?;
    let imported = Imported {
        snapshot,
        transactions_replayed: replayed,
        nodes: tree.node_count(),
        sessions: tree.sessions().count(),
        last_zxid: tree.last_zxid(),
    };
    Ok((tree, imported))
}

/// Writes `tree` as the state of a new Stoa data directory: a snapshot at
/// raft index 1 in the term of the tree's epoch, and a WAL holding that
/// term, so the server's next epoch (and zxids) come after ZooKeeper's.
pub fn write_data_dir(tree: &DataTree, data_dir: &Path, wal_dir: &Path) -> Result<(), String> {
    let snapshot_dir = data_dir.join("snapshots");
    for dir in [&snapshot_dir, &wal_dir.to_path_buf()] {
        if fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
            return Err(format!(
                "{} is not empty: import into a new data directory",
                dir.display()
            ));
        }
    }
    let term = stoa_core::zxid::epoch_of(tree.last_zxid()).max(1);
    let mut store = FileSnapshotStore::open(&snapshot_dir)?;
    node::write_snapshot(&mut store, 1, term, SnapshotSource::Tree(tree))?;
    fs::create_dir_all(wal_dir).map_err(|e| format!("{}: {e}", wal_dir.display()))?;
    let (mut log, _) = FileLog::open(wal_dir, FileLogOptions::default())
        .map_err(|e| format!("WAL {}: {e}", wal_dir.display()))?;
    let hard_state = raft::eraftpb::HardState {
        term,
        vote: 0,
        commit: 1,
        ..Default::default()
    };
    log.append(&[node::hard_state_record(0, &hard_state)])
        .and_then(|()| log.sync())
        .map_err(|e| format!("WAL {}: {e}", wal_dir.display()))?;
    drop(log);
    // Read back as a start would.
    let written = store.load_tree(1, term)?;
    if written.digest() != tree.digest() {
        return Err("the written snapshot does not read back as the tree".into());
    }
    Ok(())
}
