//! Chain links: step 1 of owned partitions (docs/partitions.md, "Owned
//! partitions: the plan").
//!
//! With several partitions, every transaction is logged with a link on
//! each partition it touches: the zxid of that partition's item before it
//! (`stoa_tree::ChainLink`). A partition's items are then a chain, and a
//! partition on a thread of its own can apply along it without merging
//! the others' logs. Today every member still applies in the one merged
//! order, and checks each link against the item it applied last on that
//! partition: the simulators and the end-to-end tests exercise the links
//! under crashes, failovers, seals and group moves before anything relies
//! on them. A link that does not match is a bug in the leader's order of
//! proposals (each partition's items must be proposed in zxid order); it
//! is counted in `mntr` (`stoa_chain_breaks`), logged, and fatal under
//! test.
//!
//! A new leader's seal is an item on every partition (it is no plain
//! write), with unknown links: every chain goes on from it. A member forgets its
//! chains when it installs a snapshot, and partition 0's at a configuration
//! change (whose transaction travels without links).

use raft::eraftpb::{Entry, EntryType};
use stoa_tree::{ChainLink, ChainLinks, Txn, TxnOp, UNKNOWN_LINK};

use super::Engine;

/// The partitions a transaction proposed through `group`'s log touches,
/// the group's own first: a plain write (or one a watch extension
/// decided), its group's; a transaction of such parts, its parts'. Any
/// other (sessions, seals, group moves, restores, the server's own nodes
/// and extensions' registrations) is an item on every one of the `count`
/// partitions: whatever it changes beside trees (the gate, the placement,
/// the membership) then happens where every partition has applied all
/// below it (`engine/by_partition.rs`).
/// Each is named once, to `each`: the proposal path takes a link per
/// partition from it without gathering them first.
fn for_each_touched(group: usize, count: usize, op: &TxnOp, mut each: impl FnMut(u32)) {
    let group = group as u32;
    each(group);
    match op {
        TxnOp::Parts { parts, .. } if parts.iter().all(|(_, op)| changes_one_tree(op)) => {
            for (i, &(p, _)) in parts.iter().enumerate() {
                if p != group && !parts[..i].iter().any(|&(q, _)| q == p) {
                    each(p);
                }
            }
        }
        op if changes_one_tree(op) => {}
        _ => (0..count as u32).filter(|&p| p != group).for_each(each),
    }
}

/// Whether `op` changes nothing but its partition's tree and watches.
pub(super) fn changes_one_tree(op: &TxnOp) -> bool {
    let plain = super::lent_apply::is_plain;
    match op {
        TxnOp::Watched { op, extra, .. } => plain(op) && extra.iter().all(plain),
        op => plain(op),
    }
}

impl Engine {
    /// Leader: the links of `txn`, proposed through `group`'s log, each
    /// partition it touches moving its chain on to it.
    pub(super) fn take_links(&mut self, group: usize, txn: &Txn) -> Vec<ChainLink> {
        let (cores, zxid) = (&mut self.cores, txn.header.zxid);
        let mut links = Vec::new();
        for_each_touched(group, cores.len(), &txn.op, |p| {
            links.push((p, cores[p as usize].take_link(zxid)));
        });
        links
    }

    /// Leader: every chain starts anew at its seal (what the partitions'
    /// last items were under another leader, it does not know).
    pub(super) fn restart_chains(&mut self) {
        for core in &mut self.cores {
            core.chain_proposed = None;
        }
    }

    /// What each partition applied last is no longer known: a snapshot
    /// was installed in place of the entries before.
    pub(super) fn forget_applied_chains(&mut self) {
        self.chain_applied.fill(None);
    }

    /// Member, with several partitions: checks the links of an entry about
    /// to apply in the one order (not a voided one) against what each
    /// partition it touches applied last, then moves each chain on to it.
    pub(super) fn follow_chain(&mut self, group: usize, entry: &Entry) {
        match entry.get_entry_type() {
            // A configuration change's transaction travels without links.
            EntryType::EntryConfChangeV2 => {
                self.chain_applied[0] = None;
                return;
            }
            EntryType::EntryNormal if !entry.data.is_empty() => {}
            _ => return,
        }
        // An undecodable entry stops the engine when it applies.
        let (Some(zxid), Some(links)) = (Txn::zxid_of(&entry.data), Txn::chain_of(&entry.data))
        else {
            return;
        };
        let (followed, broken) = follow(&mut self.chain_applied, zxid, links);
        self.stats.chain_links_followed += followed;
        if let Some(why) = broken {
            self.chain_broken(group, zxid, why);
        }
    }

    fn chain_broken(&mut self, group: usize, zxid: i64, why: String) {
        self.stats.chain_breaks += 1;
        let message = format!("zxid {zxid:#x} in partition {group}'s log: {why}");
        if cfg!(test) {
            panic!("chain broken: {message}");
        }
        log::error!("chain broken: {message}");
    }
}

/// Moves each partition's last applied item (`applied`, None where not
/// known) on to `zxid` along an entry's `links`, checking each known link
/// against it: the links followed, and what the first one that did not
/// match found. An entry logged without links (before they were) leaves
/// nothing known of any chain.
fn follow(applied: &mut [Option<i64>], zxid: i64, links: ChainLinks<'_>) -> (u64, Option<String>) {
    if links.len() == 0 {
        applied.fill(None);
        return (0, None);
    }
    let (mut followed, mut broken) = (0, None);
    for (partition, previous) in links {
        let Some(last) = applied.get_mut(partition as usize) else {
            broken.get_or_insert(format!("a link on partition {partition}, which is not"));
            continue;
        };
        followed += 1;
        if let (Some(last), true) = (last.replace(zxid), previous != UNKNOWN_LINK) {
            if last != previous {
                broken.get_or_insert(format!(
                    "partition {partition}'s link names {previous:#x}, its last item applied \
                     is {last:#x}"
                ));
            }
        }
    }
    (followed, broken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoa_tree::{GroupMove, TxnHeader};

    fn touched(group: usize, count: usize, op: &TxnOp) -> Vec<u32> {
        let mut partitions = Vec::new();
        for_each_touched(group, count, op, |p| partitions.push(p));
        partitions
    }

    /// `links` as a member reads them from an entry.
    fn encoded(links: &[ChainLink]) -> Vec<u8> {
        let txn = Txn {
            header: TxnHeader::default(),
            op: TxnOp::Check { path: "/a".into() },
        };
        let mut data = Vec::new();
        if links.is_empty() {
            txn.encode(&mut data);
        } else {
            txn.encode_chained(links, &mut data);
        }
        data
    }

    fn follow_encoded(
        applied: &mut [Option<i64>],
        zxid: i64,
        links: &[ChainLink],
    ) -> (u64, Option<String>) {
        let data = encoded(links);
        follow(applied, zxid, Txn::chain_of(&data).unwrap())
    }

    #[test]
    fn links_that_match_move_every_chain_on() {
        let mut applied = [Some(3), None, Some(2)];
        assert_eq!(
            follow_encoded(&mut applied, 5, &[(0, 3), (2, 2)]),
            (2, None)
        );
        assert_eq!(applied, [Some(5), None, Some(5)]);
        // Unknown on either side: nothing to check, the chain moves on.
        assert_eq!(
            follow_encoded(&mut applied, 6, &[(1, 4), (0, UNKNOWN_LINK)]),
            (2, None)
        );
        assert_eq!(applied, [Some(6), Some(6), Some(5)]);
    }

    #[test]
    fn a_link_that_names_another_item_is_a_break() {
        let mut applied = [Some(3), Some(4)];
        let (followed, broken) = follow_encoded(&mut applied, 7, &[(1, 4), (0, 2)]);
        assert_eq!(followed, 2);
        let why = broken.expect("a break");
        assert!(why.contains("partition 0's link names 0x2"), "{why}");
        assert_eq!(applied, [Some(7), Some(7)], "the chains go on from it");
        let (_, broken) = follow_encoded(&mut applied, 8, &[(0, 7), (5, 1)]);
        assert!(broken.expect("a break").contains("partition 5"));
    }

    #[test]
    fn an_entry_without_links_forgets_every_chain() {
        let mut applied = [Some(3), Some(4)];
        assert_eq!(follow_encoded(&mut applied, 9, &[]), (0, None));
        assert_eq!(applied, [None, None]);
    }

    #[test]
    fn a_plain_transaction_touches_its_group_and_its_parts_and_any_other_every_partition() {
        let set = TxnOp::Check { path: "/a".into() };
        assert_eq!(touched(2, 4, &set), [2]);
        let parts = TxnOp::Parts {
            parts: vec![(1, set.clone()), (0, set.clone()), (3, set.clone())],
            order: vec![],
        };
        assert_eq!(touched(1, 4, &parts), [1, 0, 3]);
        // Several parts on one partition: one link each.
        let repeated = TxnOp::Parts {
            parts: [1, 0, 0, 3, 1, 3].map(|p| (p, set.clone())).to_vec(),
            order: vec![],
        };
        assert_eq!(touched(1, 4, &repeated), [1, 0, 3]);
        let close = TxnOp::Parts {
            parts: vec![(1, TxnOp::CloseSession { paths: vec![] }), (0, set.clone())],
            order: vec![],
        };
        assert_eq!(touched(1, 3, &close), [1, 0, 2], "a barrier");
        let watched = |op: TxnOp| TxnOp::Watched {
            op: Box::new(op),
            extra: vec![],
            events: vec![],
        };
        assert_eq!(touched(2, 4, &watched(set.clone())), [2]);
        let session = TxnOp::CreateSession { timeout_ms: 4000 };
        assert_eq!(touched(2, 3, &watched(session.clone())), [2, 0, 1]);
        assert_eq!(touched(0, 2, &session), [0, 1], "a barrier");
        let moves = TxnOp::MoveGroups {
            moves: vec![
                GroupMove {
                    root: "/a".into(),
                    from: 1,
                    to: 2,
                },
                GroupMove {
                    root: "/b".into(),
                    from: 2,
                    to: 0,
                },
            ],
            data: vec![],
            version: 1,
        };
        assert_eq!(touched(0, 4, &moves), [0, 1, 2, 3], "a barrier");
    }
}
