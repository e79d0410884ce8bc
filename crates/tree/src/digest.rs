//! A stable per-node hash whose wrapping sum is the tree digest.
//!
//! The hash runs over a length-prefixed encoding of the node and is
//! finished with the SplitMix64 mixer, so that summing node hashes does not
//! cancel structure. Stable across builds and platforms (no `std` hasher),
//! so replicas running different binaries still agree.
//!
//! Three schemes, named by the snapshot format that uses them: version 1
//! hashed with FNV-1a a byte at a time, version 2 a 64-bit word at a time,
//! version 3 the record's parts as separate word chains folded together.
//! Hashing every node was most of a snapshot's CPU (a multiply per byte,
//! each waiting for the last), and then still a fifth of it (a multiply
//! per word, each waiting for the last): independent chains let the CPU
//! run them side by side. Older snapshots stay readable.

use crate::node::NodeRef;

/// How node hashes are computed: a snapshot's format version says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DigestScheme {
    /// Format 1: FNV-1a over bytes.
    Fnv,
    /// Format 2: multiply-rotate over little-endian 64-bit words.
    Words,
    /// Format 3: the word step over five independent chains (path, data
    /// in two interleaved lanes, ACL, stat), folded into one.
    Lanes,
}

/// The scheme new snapshots and [`crate::DataTree::digest`] use.
pub(crate) const CURRENT_SCHEME: DigestScheme = DigestScheme::Lanes;

/// Seeds of the `Lanes` chains: distinct, so equal parts in different
/// roles hash apart.
const LANE_SEEDS: [u64; 5] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
];

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
/// Odd, with its bits spread (2^64 / golden ratio): each word's multiply
/// carries every input bit into the upper half, and the rotation brings
/// the upper half back down for the next word.
const WORDS_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
const WORDS_ROTATION: u32 = 26;

/// A hash state fed the node encoding.
trait Feed {
    fn u64(&mut self, v: u64);
    fn bytes(&mut self, b: &[u8]);
}

struct Fnv(u64);

impl Feed for Fnv {
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

struct Words(u64);

impl Feed for Words {
    fn u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v)
            .wrapping_mul(WORDS_MULTIPLIER)
            .rotate_left(WORDS_ROTATION);
    }

    /// The length first, so the zero padding of the last word is
    /// unambiguous.
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        let mut words = b.chunks_exact(8);
        for w in &mut words {
            let mut word = [0u8; 8];
            word.copy_from_slice(w);
            self.u64(u64::from_le_bytes(word));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.u64(u64::from_le_bytes(word));
        }
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(crate) fn node_digest(scheme: DigestScheme, path: &str, node: NodeRef<'_>) -> u64 {
    NodeDigest::of_record(scheme, path, node).finish(node.child_count())
}

/// A node's digest before its child count is known: everything but the
/// last field. Lets a snapshot loader hash a record on the thread that
/// decodes it and finish the hash once the node's children are in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeDigest {
    scheme: DigestScheme,
    state: u64,
}

impl NodeDigest {
    pub(crate) fn of_record(scheme: DigestScheme, path: &str, node: NodeRef<'_>) -> Self {
        let state = match scheme {
            DigestScheme::Fnv => {
                let mut h = Fnv(FNV_OFFSET);
                feed_record(&mut h, path, node);
                h.0
            }
            DigestScheme::Words => {
                let mut h = Words(FNV_OFFSET);
                feed_record(&mut h, path, node);
                h.0
            }
            DigestScheme::Lanes => lanes_record(path, node),
        };
        NodeDigest { scheme, state }
    }

    pub(crate) fn finish(self, child_count: usize) -> u64 {
        let state = match self.scheme {
            DigestScheme::Fnv => {
                let mut h = Fnv(self.state);
                h.u64(child_count as u64);
                h.0
            }
            DigestScheme::Words | DigestScheme::Lanes => {
                let mut h = Words(self.state);
                h.u64(child_count as u64);
                h.0
            }
        };
        mix(state)
    }
}

/// The `Lanes` state of a record: each part its own chain of word steps,
/// then the five results folded, in order, into one chain.
fn lanes_record(path: &str, node: NodeRef<'_>) -> u64 {
    let mut p = Words(LANE_SEEDS[0]);
    p.bytes(path.as_bytes());
    // The data in two lanes, words alternating between them; the length
    // (in the first) makes the zero padding of the last word unambiguous.
    let data = node.data();
    let (mut even, mut odd) = (Words(LANE_SEEDS[1]), Words(LANE_SEEDS[2]));
    even.u64(data_len_mark(node));
    let mut pairs = data.chunks_exact(16);
    for pair in &mut pairs {
        let (a, b) = pair.split_at(8);
        even.u64(u64::from_le_bytes(a.try_into().expect("eight bytes")));
        odd.u64(u64::from_le_bytes(b.try_into().expect("eight bytes")));
    }
    let mut tail = [0u8; 16];
    let rest = pairs.remainder();
    if !rest.is_empty() {
        tail[..rest.len()].copy_from_slice(rest);
        even.u64(u64::from_le_bytes(
            tail[..8].try_into().expect("eight bytes"),
        ));
        odd.u64(u64::from_le_bytes(
            tail[8..].try_into().expect("eight bytes"),
        ));
    }
    let mut acl = Words(LANE_SEEDS[3]);
    feed_acl(&mut acl, node);
    let mut stat = Words(LANE_SEEDS[4]);
    feed_stat(&mut stat, node);
    let mut h = Words(FNV_OFFSET);
    for part in [p.0, even.0, odd.0, acl.0, stat.0] {
        h.u64(part);
    }
    h.0
}

fn feed_acl(h: &mut impl Feed, node: NodeRef<'_>) {
    h.u64(node.acl().len() as u64);
    for a in node.acl() {
        h.u64(a.perms as u64);
        h.bytes(a.id.scheme.as_bytes());
        h.bytes(a.id.id.as_bytes());
    }
}

fn feed_stat(h: &mut impl Feed, node: NodeRef<'_>) {
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
}

/// The data's length as the digest takes it: null data has a length no
/// data has, so it hashes apart from empty data (and other data's hashes
/// stay what they were before null data existed).
fn data_len_mark(node: NodeRef<'_>) -> u64 {
    node.nullable_data().map_or(u64::MAX, |d| d.len() as u64)
}

fn feed_record(h: &mut impl Feed, path: &str, node: NodeRef<'_>) {
    h.bytes(path.as_bytes());
    match node.nullable_data() {
        Some(data) => h.bytes(data),
        None => h.u64(data_len_mark(node)),
    }
    feed_acl(h, node);
    feed_stat(h, node);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{shared_acl, shared_bytes, Node, PersistedStat};
    use proptest::prelude::*;

    fn node(data: &[u8], version: i32) -> Node {
        let stat = PersistedStat {
            version,
            ..PersistedStat::created(5, 1_000, 0)
        };
        Node::new(shared_bytes(Some(data)), shared_acl(&[]), stat)
    }

    proptest! {
        /// Any one change of data, stat or child count changes the node's
        /// hash, in both schemes; in particular zero bytes added at the end
        /// of the data (the word scheme pads its last word with zeros).
        #[test]
        fn one_change_changes_the_hash(
            path in "/[a-z]{0,20}",
            data in proptest::collection::vec(any::<u8>(), 0..40),
            extra in proptest::collection::vec(0u8..2, 1..9),
            version in any::<i32>(),
            children in 0usize..5,
        ) {
            for scheme in [DigestScheme::Fnv, DigestScheme::Words, DigestScheme::Lanes] {
                let n = node(&data, version);
                let base = NodeDigest::of_record(scheme, &path, n.as_ref()).finish(children);
                let mut longer = data.clone();
                longer.extend(&extra);
                let changed = [
                    NodeDigest::of_record(scheme, &path, node(&longer, version).as_ref()).finish(children),
                    NodeDigest::of_record(scheme, &path, node(&data, version ^ 1).as_ref()).finish(children),
                    NodeDigest::of_record(scheme, &path, n.as_ref()).finish(children + 1),
                    NodeDigest::of_record(scheme, &format!("{path}x"), n.as_ref()).finish(children),
                ];
                for other in changed {
                    prop_assert_ne!(base, other);
                }
            }
        }
    }

    #[test]
    fn the_schemes_differ_and_are_stable() {
        // Fixed values: a change to either scheme is a format change.
        let n = node(b"hello, world", 3);
        assert_eq!(
            node_digest(DigestScheme::Fnv, "/a/b", n.as_ref()),
            0xccb3_bf4f_8b63_dfa2
        );
        assert_eq!(
            node_digest(DigestScheme::Words, "/a/b", n.as_ref()),
            0x426f_6eb8_010d_c2cd
        );
        assert_eq!(
            node_digest(DigestScheme::Lanes, "/a/b", n.as_ref()),
            0x63a2_eef3_b97e_c147
        );
        // A byte moved from the path into the data.
        for scheme in [DigestScheme::Fnv, DigestScheme::Words, DigestScheme::Lanes] {
            assert_ne!(
                node_digest(scheme, "/ab", node(b"c", 0).as_ref()),
                node_digest(scheme, "/a", node(b"bc", 0).as_ref())
            );
        }
    }
}
