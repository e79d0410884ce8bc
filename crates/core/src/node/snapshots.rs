//! Tree snapshots as a node keeps them: a store of complete snapshots (on
//! disk in production, in memory in the simulator, the same bytes in
//! both), the tasks a snapshot thread runs, and the rules every store
//! shares: which tasks run, how many snapshots stay, which one recovery
//! loads.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use stoa_tree::DataTree;

use super::server_snapshot::{self, ServerSnapshot, ServerSnapshotHead};
use crate::engine::{SnapshotContent, SnapshotJob};

/// Snapshots kept; the WAL keeps entries back to the oldest, so a damaged
/// newest snapshot still leaves a full recovery path.
pub const SNAPSHOTS_RETAINED: usize = 2;

/// What a snapshot is written from.
#[derive(Clone, Copy)]
pub enum SnapshotSource<'a> {
    /// Serialized here (`stoa_tree::write_snapshot`).
    Tree(&'a DataTree),
    /// Serialized here: a tree or a whole server's.
    Content(&'a SnapshotContent),
    /// Already serialized: a snapshot received from the leader.
    Bytes(&'a [u8]),
}

impl SnapshotSource<'_> {
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        match self {
            SnapshotSource::Tree(tree) => stoa_tree::write_snapshot(tree, out),
            SnapshotSource::Content(content) => content.write(out),
            SnapshotSource::Bytes(data) => out.write_all(data),
        }
    }
}

/// A snapshot as read back: one partition's tree, or a whole server's.
pub enum StoredSnapshot {
    Tree(DataTree),
    Server(ServerSnapshot),
}

/// Where complete snapshots live, named by raft (index, term).
pub trait SnapshotStore {
    /// Every complete snapshot, oldest (lowest index) first.
    fn list(&self) -> Result<Vec<(u64, u64)>, String>;
    /// Writes a snapshot atomically and durably: after `Ok` it survives a
    /// crash, and a crash before `Ok` leaves nothing of it in `list`.
    fn write(&mut self, index: u64, term: u64, source: SnapshotSource<'_>) -> Result<(), String>;
    /// Its bytes from the start; an error names the snapshot.
    fn reader(&self, index: u64, term: u64) -> Result<Box<dyn BufRead + '_>, String>;
    /// How errors name the snapshot (its file).
    fn describe(&self, index: u64, term: u64) -> String;
    fn remove(&mut self, index: u64, term: u64) -> Result<(), String>;

    /// Reads one back; an error names the snapshot and what is wrong.
    fn load(&self, index: u64, term: u64) -> Result<StoredSnapshot, String> {
        let (mut input, is_server) = self.open_sniffed(index, term)?;
        if is_server {
            server_snapshot::read_server_snapshot(&mut input)
                .map(StoredSnapshot::Server)
                .map_err(|e| self.unreadable(index, term, e))
        } else {
            stoa_tree::read_snapshot(&mut input)
                .map(StoredSnapshot::Tree)
                .map_err(|e| self.unreadable(index, term, e))
        }
    }

    /// Its bytes from the start, and whether they are a whole server's
    /// snapshot (told by its first bytes) rather than a tree's.
    fn open_sniffed(&self, index: u64, term: u64) -> Result<(Box<dyn BufRead + '_>, bool), String> {
        let mut input = self.reader(index, term)?;
        let is_server = (input.fill_buf())
            .map(server_snapshot::is_server_snapshot)
            .map_err(|e| self.unreadable(index, term, e))?;
        Ok((input, is_server))
    }

    fn unreadable(&self, index: u64, term: u64, why: impl std::fmt::Display) -> String {
        format!("{} is unreadable ({why})", self.describe(index, term))
    }

    /// Reads one back that must be a partition's own tree.
    fn load_tree(&self, index: u64, term: u64) -> Result<DataTree, String> {
        match self.load(index, term)? {
            StoredSnapshot::Tree(tree) => Ok(tree),
            StoredSnapshot::Server(server) => Err(format!(
                "{} is a snapshot of a whole server of {} partitions: start this server with \
                 the partitions it was written with",
                self.describe(index, term),
                server.parts.len()
            )),
        }
    }

    /// The head of a whole server's snapshot; None for a tree's.
    fn server_head(&self, index: u64, term: u64) -> Result<Option<ServerSnapshotHead>, String> {
        let (mut input, is_server) = self.open_sniffed(index, term)?;
        if !is_server {
            return Ok(None);
        }
        server_snapshot::read_server_snapshot_head(&mut input)
            .map(Some)
            .map_err(|e| self.unreadable(index, term, e))
    }
}

/// `write_snapshot_of` a store whose snapshots are partition 0's: the
/// index up to which its WAL may be compacted.
pub fn write_snapshot(
    store: &mut impl SnapshotStore,
    index: u64,
    term: u64,
    source: SnapshotSource<'_>,
) -> Result<Option<u64>, String> {
    Ok(write_snapshot_of(store, 0, index, term, source)?
        .first()
        .map(|&(_, upto)| upto))
}

/// Writes a snapshot into the store of `partition`'s snapshots and
/// removes all but the newest `SNAPSHOTS_RETAINED`. Returns each
/// partition's compaction point: where the oldest retained snapshot
/// stands (a whole server's names every partition).
pub fn write_snapshot_of(
    store: &mut impl SnapshotStore,
    partition: u32,
    index: u64,
    term: u64,
    source: SnapshotSource<'_>,
) -> Result<Vec<(u32, u64)>, String> {
    store.write(index, term, source)?;
    let kept = store.list()?;
    let excess = kept.len().saturating_sub(SNAPSHOTS_RETAINED);
    for &(old_index, old_term) in &kept[..excess] {
        if let Err(e) = store.remove(old_index, old_term) {
            log::warn!("cannot remove old snapshot at index {old_index}: {e}");
        }
    }
    let Some(&(oldest_index, oldest_term)) = kept.get(excess) else {
        return Ok(Vec::new());
    };
    Ok(match store.server_head(oldest_index, oldest_term) {
        Ok(Some(head)) => (0..)
            .zip(head.positions)
            .map(|(partition, (index, _))| (partition, index))
            .collect(),
        Ok(None) => vec![(partition, oldest_index)],
        // The log keeps what the damaged one would have let go; the next
        // snapshot removes it.
        Err(e) => {
            log::warn!("{e}: the log is not compacted this time");
            Vec::new()
        }
    })
}

/// The newest snapshot that reads back, with its raft index and term; an
/// empty tree at 0 when none does.
pub fn load_newest(store: &impl SnapshotStore) -> Result<(DataTree, u64, u64), String> {
    for (index, term) in store.list()?.into_iter().rev() {
        match store.load_tree(index, term) {
            Ok(tree) => return Ok((tree, index, term)),
            Err(e) => log::error!("{e}; trying an older snapshot"),
        }
    }
    Ok((DataTree::new(), 0, 0))
}

/// Where one partition starts from.
pub struct PartitionStart {
    pub tree: DataTree,
    pub index: u64,
    pub term: u64,
    /// The cut's zxid, for a tree from a whole server's snapshot.
    pub cut_zxid: Option<i64>,
}

/// What a server with one store per partition starts from. With several
/// partitions: the newest whole server snapshot in partition 0's store
/// that reads back; if the newest readable snapshot there is a tree of
/// its own (written before whole server snapshots), every partition's
/// newest tree. An empty tree at 0 where there is none.
pub fn load_newest_of_server<S: SnapshotStore>(
    stores: &[S],
) -> Result<Vec<PartitionStart>, String> {
    let partitions = stores.len();
    let own_trees = || {
        (stores.iter())
            .map(|store| {
                load_newest(store).map(|(tree, index, term)| PartitionStart {
                    tree,
                    index,
                    term,
                    cut_zxid: None,
                })
            })
            .collect()
    };
    if partitions == 1 {
        return own_trees();
    }
    for (index, term) in stores[0].list()?.into_iter().rev() {
        match stores[0].load(index, term) {
            Ok(StoredSnapshot::Server(server)) if server.parts.len() == partitions => {
                let zxid = server.zxid;
                return Ok((server.parts.into_iter())
                    .map(|part| PartitionStart {
                        tree: part.tree,
                        index: part.index,
                        term: part.term,
                        cut_zxid: Some(zxid),
                    })
                    .collect());
            }
            Ok(StoredSnapshot::Server(server)) => {
                return Err(format!(
                    "{} is a snapshot of a whole server of {} partitions, but this server runs \
                     {partitions}: start it with the partitions it was written with",
                    stores[0].describe(index, term),
                    server.parts.len()
                ))
            }
            Ok(StoredSnapshot::Tree(_)) => break,
            Err(e) => log::error!("{e}; trying an older snapshot"),
        }
    }
    own_trees()
}

/// Work for the snapshot thread: serializing a tree is slow for large
/// trees, so the node's own thread never does it.
pub enum SnapshotTask {
    /// Write to the store (then the WAL may be compacted).
    Write(SnapshotJob),
    /// Serialize in memory for a lagging peer.
    Ship(SnapshotJob),
}

impl SnapshotTask {
    /// The partition whose tree the task writes (its store).
    pub fn partition(&self) -> u32 {
        match self {
            SnapshotTask::Write(job) | SnapshotTask::Ship(job) => job.partition,
        }
    }
}

/// A task's outcome, for `Node::on_snapshot_done`.
pub enum SnapshotDone {
    Written {
        partition: u32,
        index: u64,
        term: u64,
        /// Each partition's log may be compacted up to (WAL markers).
        compact_to: Vec<(u32, u64)>,
    },
    Shipped {
        partition: u32,
        index: u64,
        term: u64,
        data: bytes::Bytes,
    },
}

/// The tasks waiting for the snapshot thread, to run now: every Ship (a
/// peer waits for each) and only the newest Write of each partition. Under a heavy load the
/// engine asks for a snapshot faster than a large tree is written (every
/// 1.3 s at 78k creates/s, while 800k znodes take longer): the queue grew,
/// each queued job holding a tree copy alive, and the newest snapshot fell
/// further behind, leaving more WAL to replay at a restart.
pub fn coalesce_snapshot_tasks(tasks: Vec<SnapshotTask>) -> Vec<SnapshotTask> {
    let mut out = Vec::with_capacity(tasks.len());
    let mut newest_writes: BTreeMap<u32, SnapshotJob> = BTreeMap::new();
    for task in tasks {
        match task {
            SnapshotTask::Write(job) => {
                if let Some(older) = newest_writes.insert(job.partition, job) {
                    log::debug!(
                        "snapshot of partition {} at raft index {} skipped: a newer one is queued",
                        older.partition,
                        older.index
                    );
                }
            }
            ship @ SnapshotTask::Ship(_) => out.push(ship),
        }
    }
    out.extend(newest_writes.into_values().map(SnapshotTask::Write));
    out
}

pub fn run_snapshot_task(
    store: &mut impl SnapshotStore,
    task: SnapshotTask,
) -> Result<SnapshotDone, String> {
    match task {
        SnapshotTask::Write(job) => write_snapshot_of(
            store,
            job.partition,
            job.index,
            job.term,
            SnapshotSource::Content(&job.content),
        )
        .map(|compact_to| SnapshotDone::Written {
            partition: job.partition,
            index: job.index,
            term: job.term,
            compact_to,
        }),
        SnapshotTask::Ship(job) => {
            let mut data = Vec::new();
            job.content
                .write(&mut data)
                .map(|()| SnapshotDone::Shipped {
                    partition: job.partition,
                    index: job.index,
                    term: job.term,
                    data: data.into(),
                })
                .map_err(|e| format!("serializing a snapshot for a peer: {e}"))
        }
    }
}

/// A `SnapshotStore` in memory, for the simulator and tests: each snapshot
/// is the bytes a file would hold, written and read by the same code as on
/// disk. A write is atomic (the file store's rename), so a crash keeps
/// whole snapshots only. `fail_writes` makes writes fail, as a full disk
/// would.
#[derive(Default)]
pub struct MemSnapshotStore {
    files: BTreeMap<(u64, u64), bytes::Bytes>,
    pub fail_writes: bool,
}

impl MemSnapshotStore {
    /// The stored bytes of one snapshot (tests damage them).
    pub fn bytes_mut(&mut self, index: u64, term: u64) -> Option<&mut bytes::Bytes> {
        self.files.get_mut(&(index, term))
    }
}

impl SnapshotStore for MemSnapshotStore {
    fn list(&self) -> Result<Vec<(u64, u64)>, String> {
        Ok(self.files.keys().copied().collect())
    }

    fn write(&mut self, index: u64, term: u64, source: SnapshotSource<'_>) -> Result<(), String> {
        if self.fail_writes {
            return Err(format!("snapshot {index}-{term}: write: no space left"));
        }
        let mut data = Vec::new();
        source
            .write_to(&mut data)
            .map_err(|e| format!("snapshot {index}-{term}: write: {e}"))?;
        self.files.insert((index, term), data.into());
        Ok(())
    }

    fn reader(&self, index: u64, term: u64) -> Result<Box<dyn BufRead + '_>, String> {
        let data = self
            .files
            .get(&(index, term))
            .ok_or_else(|| format!("snapshot {index}-{term}: not found"))?;
        Ok(Box::new(&data[..]))
    }

    fn describe(&self, index: u64, term: u64) -> String {
        format!("snapshot {index}-{term}")
    }

    fn remove(&mut self, index: u64, term: u64) -> Result<(), String> {
        self.files.remove(&(index, term));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(index: u64) -> SnapshotJob {
        SnapshotJob {
            partition: 0,
            index,
            term: 1,
            content: SnapshotContent::Tree(DataTree::new()),
        }
    }

    #[test]
    fn queued_snapshot_tasks_keep_every_ship_and_the_newest_write() {
        let tasks = vec![
            SnapshotTask::Write(job(100)),
            SnapshotTask::Ship(job(150)),
            SnapshotTask::Write(job(200)),
            SnapshotTask::Ship(job(250)),
            SnapshotTask::Write(job(300)),
        ];
        let kept: Vec<(bool, u64)> = coalesce_snapshot_tasks(tasks)
            .into_iter()
            .map(|t| match t {
                SnapshotTask::Write(j) => (true, j.index),
                SnapshotTask::Ship(j) => (false, j.index),
            })
            .collect();
        assert_eq!(kept, vec![(false, 150), (false, 250), (true, 300)]);
        assert!(coalesce_snapshot_tasks(Vec::new()).is_empty());
    }

    #[test]
    fn writing_keeps_the_newest_two_and_compacts_to_the_older() {
        let mut store = MemSnapshotStore::default();
        let tree = DataTree::new();
        for (i, index) in [10, 20, 30].into_iter().enumerate() {
            let compact_to =
                write_snapshot(&mut store, index, 1, SnapshotSource::Tree(&tree)).unwrap();
            assert_eq!(compact_to, Some(if i == 0 { 10 } else { index - 10 }));
        }
        assert_eq!(store.list().unwrap(), vec![(20, 1), (30, 1)]);
    }

    #[test]
    fn recovery_falls_back_to_an_older_snapshot_when_the_newest_is_damaged() {
        let mut store = MemSnapshotStore::default();
        let tree = DataTree::new();
        write_snapshot(&mut store, 5, 1, SnapshotSource::Tree(&tree)).unwrap();
        write_snapshot(&mut store, 9, 1, SnapshotSource::Tree(&tree)).unwrap();
        assert_eq!(load_newest(&store).unwrap().1, 9);
        *store.bytes_mut(9, 1).unwrap() = bytes::Bytes::from_static(b"half a snapshot");
        let (_, index, _) = load_newest(&store).unwrap();
        assert_eq!(index, 5, "the damaged newest one is skipped");
    }

    fn server_of(zxid: i64, positions: &[(u64, u64)]) -> ServerSnapshot {
        ServerSnapshot {
            zxid,
            parts: (positions.iter())
                .map(|&(index, term)| server_snapshot::PartSnapshot {
                    index,
                    term,
                    tree: DataTree::new(),
                })
                .collect(),
        }
    }

    fn write_server(
        store: &mut MemSnapshotStore,
        zxid: i64,
        positions: &[(u64, u64)],
    ) -> Vec<(u32, u64)> {
        let content = SnapshotContent::Server(server_of(zxid, positions));
        let sum = positions.iter().map(|p| p.0).sum();
        write_snapshot_of(
            store,
            0,
            zxid as u64,
            sum,
            SnapshotSource::Content(&content),
        )
        .unwrap()
    }

    #[test]
    fn whole_server_snapshots_compact_every_partition_to_the_older_one_kept() {
        let mut store = MemSnapshotStore::default();
        assert_eq!(
            write_server(&mut store, 0x100, &[(5, 1), (2, 1)]),
            vec![(0, 5), (1, 2)]
        );
        assert_eq!(
            write_server(&mut store, 0x180, &[(9, 1), (2, 1)]),
            vec![(0, 5), (1, 2)]
        );
        assert_eq!(
            write_server(&mut store, 0x200, &[(9, 1), (7, 2)]),
            vec![(0, 9), (1, 2)]
        );
        assert_eq!(store.list().unwrap().len(), SNAPSHOTS_RETAINED);
    }

    #[test]
    fn a_server_starts_from_its_newest_whole_snapshot_else_from_its_partitions_own() {
        // Before whole server snapshots: each partition's own newest tree.
        let mut stores = vec![MemSnapshotStore::default(), MemSnapshotStore::default()];
        let tree = DataTree::new();
        write_snapshot(&mut stores[0], 4, 1, SnapshotSource::Tree(&tree)).unwrap();
        write_snapshot(&mut stores[1], 3, 1, SnapshotSource::Tree(&tree)).unwrap();
        let starts = load_newest_of_server(&stores).unwrap();
        let at: Vec<_> = starts
            .iter()
            .map(|s| (s.index, s.term, s.cut_zxid))
            .collect();
        assert_eq!(at, vec![(4, 1, None), (3, 1, None)]);
        // A whole server snapshot (named by its cut, above any raft index)
        // is the newest from then on, for every partition.
        write_server(&mut stores[0], 0x5_0000_0002, &[(6, 1), (8, 2)]);
        let starts = load_newest_of_server(&stores).unwrap();
        let at: Vec<_> = starts
            .iter()
            .map(|s| (s.index, s.term, s.cut_zxid))
            .collect();
        let cut = Some(0x5_0000_0002);
        assert_eq!(at, vec![(6, 1, cut), (8, 2, cut)]);
        // Damaged: the older snapshots serve.
        let newest = *stores[0].list().unwrap().last().unwrap();
        *stores[0].bytes_mut(newest.0, newest.1).unwrap() =
            bytes::Bytes::from_static(b"STOACUT1..");
        let starts = load_newest_of_server(&stores).unwrap();
        assert_eq!(starts[0].index, 4);
        assert_eq!(starts[1].cut_zxid, None);
        // Written over a damaged one: nothing compacted until it is gone.
        assert_eq!(
            write_server(&mut stores[0], 0x5_0000_0009, &[(7, 1), (8, 2)]),
            vec![]
        );
        assert_eq!(
            write_server(&mut stores[0], 0x5_0000_000a, &[(7, 1), (9, 2)]),
            vec![(0, 7), (1, 8)]
        );
        // Fewer or more partitions than the snapshot holds: refused, clearly.
        let mut three: Vec<MemSnapshotStore> =
            (0..3).map(|_| MemSnapshotStore::default()).collect();
        write_server(&mut three[0], 0x9, &[(1, 1), (1, 1)]);
        let Err(err) = load_newest_of_server(&three) else {
            panic!("three partitions started from a snapshot of two");
        };
        assert!(
            err.contains("2 partitions") && err.contains("runs 3"),
            "{err}"
        );
        let Err(err) = stores[0].load_tree(0x5_0000_0009, 15) else {
            panic!("a whole server's snapshot read as one tree");
        };
        assert!(err.contains("whole server of 2 partitions"), "{err}");
    }
}
