//! What the AdminServer's `restore` takes (docs/operations.md, "Snapshot
//! and restore"): a snapshot as the `snapshot` command streams it (a whole
//! server's, `node::server_snapshot`), a tree snapshot from a Stoa data
//! directory, or a ZooKeeper snapshot (`snapshot.<zxid>` as ZooKeeper
//! writes it, or as its own `snapshot` command streams it). Pure: bytes in,
//! each partition's tree out, serialized for the raft entry that carries
//! the restore to every member.

use stoa_tree::DataTree;

use crate::import;
use crate::node::server_snapshot;

/// A snapshot read back, ready to restore.
pub struct RestoreImage {
    /// One tree per partition of the server that wrote it (one for a
    /// single tree, or a ZooKeeper snapshot).
    pub trees: Vec<DataTree>,
    /// The highest zxid anything in the image carries: the restore must
    /// take a zxid above it, so that no client sees zxids go back.
    pub zxid: i64,
    /// What the bytes were, for the log.
    pub kind: &'static str,
}

/// ZooKeeper's snapshot files open with "ZKSN".
const ZOOKEEPER_MAGIC: &[u8; 4] = b"ZKSN";
/// Stoa's tree snapshots (`stoa_tree::write_snapshot`) open with this.
const TREE_MAGIC: &[u8; 8] = b"STOASNAP";

/// Reads a snapshot of any kind `restore` takes; a clear error for
/// anything else.
pub fn read_restore_image(bytes: &[u8]) -> Result<RestoreImage, String> {
    let (trees, zxid, kind) = if server_snapshot::is_server_snapshot(bytes) {
        let server = server_snapshot::read_server_snapshot(&mut &bytes[..])
            .map_err(|e| format!("Stoa server snapshot: {e}"))?;
        let trees: Vec<DataTree> = server.parts.into_iter().map(|part| part.tree).collect();
        (trees, server.zxid, "a Stoa server snapshot")
    } else if bytes.starts_with(TREE_MAGIC) {
        let tree = stoa_tree::read_snapshot(&mut &bytes[..])
            .map_err(|e| format!("Stoa tree snapshot: {e}"))?;
        let zxid = tree.last_zxid();
        (vec![tree], zxid, "a Stoa tree snapshot")
    } else if bytes.starts_with(ZOOKEEPER_MAGIC) {
        let zk = import::read_snapshot(bytes).map_err(|e| format!("ZooKeeper snapshot: {e}"))?;
        // A ZooKeeper snapshot is fuzzy and its zxid is in the file's name,
        // not in the bytes: the nodes' own zxids bound it.
        let zxid = zk
            .nodes
            .iter()
            .map(|n| node_zxid(&n.stat))
            .max()
            .unwrap_or(0);
        let tree = stoa_tree::tree_from_nodes(&zk.acl_lists, zk.nodes, zk.sessions, zxid)
            .map_err(|e| format!("ZooKeeper snapshot: {e}"))?;
        (vec![tree], zxid, "a ZooKeeper snapshot")
    } else {
        return Err(
            "not a snapshot: neither Stoa's (as the snapshot command streams it) nor \
                    ZooKeeper's (a compressed ZooKeeper snapshot must be decompressed first)"
                .into(),
        );
    };
    if trees.is_empty() {
        return Err("the snapshot holds no tree".into());
    }
    let mut highest = zxid;
    for tree in &trees {
        if tree.node(stoa_tree::ZOOKEEPER).is_none() {
            return Err("the snapshot's tree has no /zookeeper: not a ZooKeeper tree".into());
        }
        highest = highest.max(tree.last_zxid());
        tree.walk(|_, node| {
            let stat = node.stat();
            highest = highest.max(stat.czxid).max(stat.mzxid).max(stat.pzxid);
        });
    }
    Ok(RestoreImage {
        trees,
        zxid: highest,
        kind,
    })
}

fn node_zxid(stat: &stoa_tree::PersistedStat) -> i64 {
    stat.czxid.max(stat.mzxid).max(stat.pzxid)
}

/// Each partition's tree of a server of `partitions` partitions,
/// serialized: the image's own trees if it has as many, or its one tree on
/// partition 0 and empty ones elsewhere when no groups are configured
/// (then every znode lives on partition 0).
pub fn restore_parts(
    image: &RestoreImage,
    partitions: usize,
    groups_configured: bool,
) -> Result<Vec<Vec<u8>>, String> {
    let empty = DataTree::new();
    let trees: Vec<&DataTree> = if image.trees.len() == partitions {
        image.trees.iter().collect()
    } else if image.trees.len() == 1 && !groups_configured {
        std::iter::once(&image.trees[0])
            .chain(std::iter::repeat_n(&empty, partitions - 1))
            .collect()
    } else if image.trees.len() == 1 {
        return Err(format!(
            "{} of one tree cannot be restored into a server whose partition.groups place \
             subtrees on other partitions; restore it into a server without partition.groups",
            image.kind
        ));
    } else {
        return Err(format!(
            "the snapshot holds {} partitions and this server runs {partitions}",
            image.trees.len()
        ));
    };
    Ok(trees
        .into_iter()
        .map(|tree| {
            let mut bytes = Vec::new();
            stoa_tree::write_snapshot(tree, &mut bytes).expect("writing to memory");
            bytes
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tree_bytes(tree: &DataTree) -> Vec<u8> {
        let mut bytes = Vec::new();
        stoa_tree::write_snapshot(tree, &mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_tree_snapshot_reads_back_as_one_tree() {
        let tree = DataTree::new();
        let image = read_restore_image(&tree_bytes(&tree)).unwrap();
        assert_eq!(image.trees.len(), 1);
        assert_eq!(image.kind, "a Stoa tree snapshot");
        let parts = restore_parts(&image, 3, false).unwrap();
        assert_eq!(parts.len(), 3);
        assert!(restore_parts(&image, 3, true)
            .unwrap_err()
            .contains("partition.groups"));
    }

    #[test]
    fn a_server_snapshot_keeps_its_partitions() {
        let server = server_snapshot::ServerSnapshot {
            zxid: 0x3_0000_0009,
            parts: (0..2)
                .map(|p| server_snapshot::PartSnapshot {
                    index: 10 + p,
                    term: 3,
                    tree: DataTree::new(),
                })
                .collect(),
        };
        let mut bytes = Vec::new();
        server_snapshot::write_server_snapshot(&server, &mut bytes).unwrap();
        let image = read_restore_image(&bytes).unwrap();
        assert_eq!((image.trees.len(), image.zxid), (2, 0x3_0000_0009));
        assert_eq!(restore_parts(&image, 2, true).unwrap().len(), 2);
        assert!(restore_parts(&image, 3, false)
            .unwrap_err()
            .contains("holds 2 partitions"));
    }

    #[test]
    fn other_bytes_are_refused_with_what_is_taken() {
        for bytes in [&b""[..], b"PK\x03\x04zip", b"ZKSN", b"STOASNAP\0\0"] {
            let error = read_restore_image(bytes).err().expect("refused");
            assert!(!error.is_empty());
        }
        assert!(read_restore_image(b"gzip")
            .err()
            .unwrap()
            .contains("neither Stoa's"));
    }

    proptest! {
        #[test]
        fn no_input_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..512), magic in 0..3usize) {
            let prefix: &[u8] = match magic {
                0 => b"ZKSN",
                1 => b"STOASNAP",
                _ => server_snapshot::MAGIC,
            };
            bytes.splice(0..0, prefix.iter().copied());
            let _ = read_restore_image(&bytes);
        }
    }
}
