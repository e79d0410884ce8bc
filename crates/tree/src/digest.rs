//! A stable per-node hash whose wrapping sum is the tree digest.
//!
//! FNV-1a over a length-prefixed encoding, finished with the SplitMix64
//! mixer so that summing node hashes does not cancel structure. Stable
//! across builds and platforms (no `std` hasher), so replicas running
//! different binaries still agree.

use crate::node::Node;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

struct Fnv(u64);

impl Fnv {
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(FNV_PRIME);
        }
    }

    fn u64(&mut self, v: u64) {
        for x in v.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(FNV_PRIME);
        }
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(crate) fn node_digest(path: &str, node: &Node) -> u64 {
    NodeDigest::of_record(path, node).finish(node.child_count())
}

/// A node's digest before its child count is known: everything but the
/// last field. Lets a snapshot loader hash a record on the thread that
/// decodes it and finish the hash once the node's children are in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeDigest(u64);

impl NodeDigest {
    pub(crate) fn of_record(path: &str, node: &Node) -> Self {
        let mut h = Fnv(FNV_OFFSET);
        h.bytes(path.as_bytes());
        h.bytes(node.data());
        h.u64(node.acl().len() as u64);
        for a in node.acl() {
            h.u64(a.perms as u64);
            h.bytes(a.id.scheme.as_bytes());
            h.bytes(a.id.id.as_bytes());
        }
        let s = node.persisted();
        for v in [
            s.czxid,
            s.mzxid,
            s.ctime,
            s.mtime,
            s.ephemeral_owner,
            s.pzxid,
        ] {
            h.u64(v as u64);
        }
        for v in [s.version, s.cversion, s.aversion] {
            h.u64(v as u64);
        }
        NodeDigest(h.0)
    }

    pub(crate) fn finish(self, child_count: usize) -> u64 {
        let mut h = Fnv(self.0);
        h.u64(child_count as u64);
        mix(h.0)
    }
}
