use proptest::prelude::*;

use super::*;

fn z(epoch: u64, counter: u32) -> i64 {
    ((epoch << 32) | counter as u64) as i64
}

fn fresh(partitions: usize) -> ApplyOrder<()> {
    ApplyOrder::recover(partitions, &Cut::default())
}

/// Applies everything whose turn has come: (partition, zxid) in order,
/// what a seal voided left out.
fn drain(order: &mut ApplyOrder<()>) -> Vec<(usize, Option<i64>)> {
    std::iter::from_fn(|| order.next_ready())
        .filter(|ready| !ready.void)
        .map(|ready| (ready.partition, ready.zxid))
        .collect()
}

#[test]
fn dense_zxids_apply_in_order_whichever_partition_commits_first() {
    let mut order = fresh(2);
    let seal = order.seal(z(1, 1));
    assert_eq!(seal, vec![(1, z(1, 0))]);
    // As the seal commits (`Engine::absorb_committed`).
    order.add_voids(&seal);
    order.committed(1, 1, Some(z(1, 2)), ());
    assert_eq!(drain(&mut order), vec![]);
    order.committed(0, 1, Some(z(1, 1)), ());
    assert_eq!(
        drain(&mut order),
        vec![(0, Some(z(1, 1))), (1, Some(z(1, 2)))]
    );
    order.committed(1, 2, Some(z(1, 3)), ());
    assert_eq!(drain(&mut order), vec![(1, Some(z(1, 3)))]);
    assert_eq!(order.applied(), z(1, 3));
}

#[test]
fn a_seal_that_never_committed_voids_nothing_and_the_next_covers_its_gap() {
    // Ensemble simulator seed 745 of three partitions: a leader deposed
    // before its seal committed led again later; its second seal must
    // void what the first would have, since no other member has that one.
    let mut order = fresh(2);
    let first = order.seal(z(1, 1));
    order.add_voids(&first);
    order.committed(0, 1, Some(z(1, 1)), ());
    drain(&mut order);
    let lost = order.seal(z(2, 1));
    assert_eq!(lost, vec![(z(1, 2), z(2, 0))]);
    let again = order.seal(z(5, 1));
    assert_eq!(again, vec![(z(1, 2), z(5, 0))]);
    let mut follower = fresh(2);
    follower.add_voids(&first);
    follower.committed(0, 1, Some(z(1, 1)), ());
    follower.add_voids(&again);
    follower.committed(0, 2, Some(z(5, 1)), ());
    assert_eq!(
        drain(&mut follower),
        vec![(0, Some(z(1, 1))), (0, Some(z(5, 1)))]
    );
}

#[test]
fn a_new_epoch_waits_for_its_seal() {
    let mut order = fresh(2);
    let seal = order.seal(z(1, 1));
    order.add_voids(&seal);
    order.committed(0, 1, Some(z(1, 1)), ());
    drain(&mut order);
    order.committed(1, 1, Some(z(3, 1)), ());
    assert_eq!(drain(&mut order), vec![], "epochs 1 to 3 may hold more");
    order.add_voids(&[(z(1, 2), z(3, 0))]);
    assert_eq!(drain(&mut order), vec![(1, Some(z(3, 1)))]);
}

#[test]
fn a_leaders_seal_voids_what_never_committed_and_everything_above_it() {
    let mut order = fresh(2);
    let seal = order.seal(z(1, 1));
    order.add_voids(&seal);
    // z(1, 2) went to partition 0 and died with its leader; z(1, 3) and
    // z(1, 5), committed in partition 1's log above it, applied nowhere.
    order.committed(0, 1, Some(z(1, 1)), ());
    order.committed(1, 1, Some(z(1, 3)), ());
    order.committed(1, 2, Some(z(1, 5)), ());
    assert_eq!(drain(&mut order), vec![(0, Some(z(1, 1)))]);
    let seal = order.seal(z(4, 1));
    assert_eq!(seal, vec![(z(1, 2), z(4, 0))]);
    assert_eq!(
        drain(&mut order),
        vec![],
        "the voids wait for the seal to commit"
    );
    order.add_voids(&seal);
    let passed: Vec<(u64, bool)> = std::iter::from_fn(|| order.next_ready())
        .map(|ready| (ready.index, ready.void))
        .collect();
    assert_eq!(passed, vec![(1, true), (2, true)], "voided, in log order");
    assert_eq!(order.applied(), z(1, 1));
    assert_eq!(order.applied_index(1), 2);
    // A follower given the same seal applies the same, whether partition
    // 1 delivers its entries before the seal commits or after it applied.
    let mut follower = fresh(2);
    follower.add_voids(&[(1, z(1, 0))]);
    follower.committed(1, 1, Some(z(1, 3)), ());
    follower.committed(0, 1, Some(z(1, 1)), ());
    follower.add_voids(&seal);
    follower.committed(0, 2, Some(z(4, 1)), ());
    assert_eq!(
        drain(&mut follower),
        vec![(0, Some(z(1, 1))), (0, Some(z(4, 1)))]
    );
    follower.committed(1, 2, Some(z(1, 5)), ());
    let late: Vec<bool> = std::iter::from_fn(|| follower.next_ready())
        .map(|ready| ready.void)
        .collect();
    assert_eq!(late, vec![true]);
    assert_eq!(follower.applied(), z(4, 1));
}

#[test]
fn entries_outside_the_order_pass_at_once() {
    let mut order = fresh(2);
    order.committed(1, 1, None, ());
    order.committed(1, 2, Some(z(1, 1)), ());
    order.committed(1, 3, None, ());
    assert_eq!(drain(&mut order), vec![(1, None)]);
    order.add_voids(&[(1, z(1, 0))]);
    assert_eq!(drain(&mut order), vec![(1, Some(z(1, 1))), (1, None)]);
    assert_eq!(order.applied_index(1), 3);
}

#[test]
fn a_snapshot_installed_replaces_what_waited_under_it() {
    let mut order = fresh(2);
    order.add_voids(&[(1, z(1, 0))]);
    order.committed(0, 1, Some(z(1, 1)), ());
    drain(&mut order);
    order.committed(1, 1, Some(z(1, 3)), ());
    order.committed(1, 2, Some(z(1, 6)), ());
    // The leader's snapshot at z(1, 5): partition 0 at index 4, 1 at 1.
    let cut = Cut {
        zxid: z(1, 5),
        indices: vec![4, 1],
    };
    order.install(&cut);
    assert_eq!(order.applied(), z(1, 5));
    assert_eq!(order.applied_index(1), 1);
    assert_eq!(drain(&mut order), vec![(1, Some(z(1, 6)))]);
    order.committed(0, 5, Some(z(1, 7)), ());
    assert_eq!(drain(&mut order), vec![(0, Some(z(1, 7)))]);
}

#[test]
fn a_seal_past_a_cut_comes_again_after_a_restart_and_applies_in_its_place() {
    let cut = Cut {
        zxid: z(2, 6),
        indices: vec![6, 3],
    };
    let mut order: ApplyOrder<()> = ApplyOrder::recover(2, &cut);
    // z(2, 7) is partition 1's, committed but not yet here; z(2, 8) died
    // with its leader; the seal is z(3, 1).
    order.add_voids(&[(z(2, 8), z(3, 0))]);
    order.committed(0, 7, Some(z(3, 1)), ());
    assert_eq!(drain(&mut order), vec![]);
    order.committed(1, 4, Some(z(2, 7)), ());
    order.committed(1, 5, Some(z(3, 2)), ());
    assert_eq!(
        drain(&mut order),
        vec![(1, Some(z(2, 7))), (0, Some(z(3, 1))), (1, Some(z(3, 2)))]
    );
    assert_eq!(
        order.cut(),
        Cut {
            zxid: z(3, 2),
            indices: vec![7, 5]
        }
    );
}

#[test]
fn by_partition_each_applies_its_own_once_every_zxid_below_is_in_hand() {
    let mut order = fresh(2);
    order.add_voids(&[(1, z(1, 0))]);
    // z(1, 2) on partition 1 is in hand, z(1, 1) is not: a seal could yet
    // void z(1, 2), so it waits.
    order.committed(1, 1, Some(z(1, 2)), ());
    assert!(order.next_ready_on(1, i64::MAX, |_| false).is_none());
    assert_eq!((order.known(), order.closed(1)), (z(1, 0), z(1, 0)));
    order.committed(0, 1, Some(z(1, 1)), ());
    // Now partition 1 goes first, partition 0 behind it.
    assert_eq!(
        order.next_ready_on(1, i64::MAX, |_| false).map(|r| r.zxid),
        Some(Some(z(1, 2)))
    );
    assert_eq!((order.closed(0), order.closed(1)), (z(1, 0), z(1, 2)));
    assert_eq!(order.applied(), z(1, 0));
    assert!(!order.at_cut(), "partition 1 is past the prefix");
    // An entry of partition 0's log with a part on 1 waits for both.
    order.committed_with_parts(0, 2, Some(z(1, 3)), vec![1], ());
    order.committed(1, 2, Some(z(1, 4)), ());
    assert!(
        order.next_ready_on(1, i64::MAX, |_| false).is_none(),
        "z(1, 3) has a part on 1"
    );
    assert_eq!(order.closed(1), z(1, 2));
    assert_eq!(
        order.next_ready_on(0, i64::MAX, |_| false).map(|r| r.zxid),
        Some(Some(z(1, 1)))
    );
    assert_eq!(
        order.next_ready_on(0, i64::MAX, |_| false).map(|r| r.zxid),
        Some(Some(z(1, 3)))
    );
    assert_eq!(order.applied(), z(1, 3));
    assert_eq!(
        order.next_ready_on(1, i64::MAX, |_| false).map(|r| r.zxid),
        Some(Some(z(1, 4)))
    );
    assert_eq!((order.applied(), order.at_cut()), (z(1, 4), true));
    assert_eq!(order.cut().indices, vec![2, 2]);
}

#[test]
fn void_ranges_coalesce() {
    let mut voids = Voids::default();
    voids.add(10, 12);
    voids.add(20, 25);
    voids.add(13, 19);
    assert_eq!(voids.list(), vec![(10, 25)]);
    voids.add(5, 30);
    voids.add(40, 41);
    voids.add(1, 0);
    assert_eq!(voids.list(), vec![(5, 30), (40, 41)]);
    assert!(voids.covers(6, 30));
    assert!(!voids.covers(6, 31));
    assert!(voids.covers(9, 8));
    voids.forget_through(30);
    assert_eq!(voids.list(), vec![(40, 41)]);
}

// ---- A model: leaders, lost entries, seals, snapshots, restarts ----

#[derive(Debug, Clone)]
enum Item {
    Empty,
    /// A transaction and the partitions it has parts on (its own log's
    /// among them).
    Txn(i64, Vec<usize>),
    /// A new leader's first transaction, and the void ranges below it.
    Seal(i64, Vec<(i64, i64)>),
}

impl Item {
    fn zxid(&self) -> Option<i64> {
        match self {
            Item::Txn(zxid, _) | Item::Seal(zxid, _) => Some(*zxid),
            Item::Empty => None,
        }
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) % n.max(1)
    }
}

/// Every group's committed log, and cuts a leader could ship.
struct History {
    logs: Vec<Vec<Item>>,
    cuts: Vec<Cut>,
    last_applied: i64,
    /// The committed seals' ranges: what applies nowhere.
    voided: Vec<(i64, i64)>,
}

impl History {
    fn voided(&self, zxid: i64) -> bool {
        self.voided.iter().any(|&(lo, hi)| lo <= zxid && zxid <= hi)
    }
}

impl History {
    /// The transactions with a part on `partition`, up to `through`, in
    /// the order they apply there.
    fn truth(&self, partition: usize, through: i64) -> Vec<i64> {
        let mut zxids: Vec<i64> = (self.logs.iter().flatten())
            .filter_map(|item| match item {
                Item::Txn(zxid, parts)
                    if parts.contains(&partition) && *zxid <= through && !self.voided(*zxid) =>
                {
                    Some(*zxid)
                }
                Item::Seal(zxid, _) if partition == 0 && *zxid <= through => Some(*zxid),
                _ => None,
            })
            .collect();
        zxids.sort_unstable();
        zxids
    }
}

/// Leaders one after the other: each starts a term (an empty entry in
/// every group), seals (sometimes lost with it), hands out zxids to random
/// partitions and dies with a random tail of each group uncommitted. The
/// last leader's seal commits. A reference order fed everything committed
/// computes the seals and the cuts.
fn history(rng: &mut Rng, partitions: usize, leaders: usize) -> History {
    let mut reference = fresh(partitions);
    let mut logs: Vec<Vec<Item>> = vec![Vec::new(); partitions];
    let mut cuts = Vec::new();
    let commit =
        |reference: &mut ApplyOrder<()>, logs: &mut Vec<Vec<Item>>, p: usize, item: Item| {
            if let Item::Seal(_, ranges) = &item {
                reference.add_voids(ranges);
            }
            logs[p].push(item.clone());
            reference.committed(p, logs[p].len() as u64, item.zxid(), ());
            drain(reference);
        };
    let mut epoch = 0;
    for leader in 0..leaders {
        let last = leader + 1 == leaders;
        epoch += 1 + rng.below(3);
        for p in 0..partitions {
            commit(&mut reference, &mut logs, p, Item::Empty);
        }
        let seal_commits = last || rng.below(4) != 0;
        let ranges = reference.clone().seal(z(epoch, 1));
        if seal_commits {
            commit(
                &mut reference,
                &mut logs,
                0,
                Item::Seal(z(epoch, 1), ranges),
            );
        }
        let handed = if last { 1 } else { 1 + rng.below(9) as u32 };
        let mut per_partition: Vec<Vec<Item>> = vec![Vec::new(); partitions];
        for counter in 2..=handed {
            let home = rng.below(partitions as u64) as usize;
            let mut parts = vec![home];
            // One in four spans partitions.
            if rng.below(4) == 0 {
                parts.extend((0..partitions).filter(|&p| p != home && rng.below(2) == 0));
            }
            per_partition[home].push(Item::Txn(z(epoch, counter), parts));
        }
        // What each group committed of them: a prefix of its log.
        let kept: Vec<usize> = (0..partitions)
            .map(|p| match p {
                0 if !seal_commits => 0,
                _ => rng.below(per_partition[p].len() as u64 + 1) as usize,
            })
            .collect();
        // Commits interleave across groups.
        let mut next = vec![0; partitions];
        while (0..partitions).any(|p| next[p] < kept[p]) {
            let p = rng.below(partitions as u64) as usize;
            if next[p] < kept[p] {
                commit(
                    &mut reference,
                    &mut logs,
                    p,
                    per_partition[p][next[p]].clone(),
                );
                next[p] += 1;
                if rng.below(3) == 0 {
                    cuts.push(reference.cut());
                }
            }
        }
    }
    assert!(
        reference.waiting.iter().all(VecDeque::is_empty),
        "the last seal leaves nothing waiting"
    );
    let voided = (logs.iter().flatten())
        .filter_map(|item| match item {
            Item::Seal(_, ranges) => Some(ranges.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    History {
        logs,
        cuts,
        last_applied: reference.applied(),
        voided,
    }
}

/// A server fed the history's commits in a random interleaving, taking
/// snapshots, restarting and installing leaders' snapshots at random. It
/// applies in the one order, or `by_partition`: each partition its own
/// entries, a random few at a time, some of them away (applied later, as
/// a partition's thread would).
fn run_server(rng: &mut Rng, history: &History, by_partition: bool) {
    let partitions = history.logs.len();
    let mut order = fresh(partitions);
    let mut state: Vec<Vec<i64>> = vec![Vec::new(); partitions];
    let mut away = Away::new(partitions);
    let mut delivered = vec![0usize; partitions];
    let mut persisted = Cut::default();
    let restore = |cut: &Cut, state: &mut Vec<Vec<i64>>, delivered: &mut Vec<usize>| {
        for p in 0..partitions {
            state[p] = history.truth(p, cut.zxid);
            delivered[p] = delivered[p].max(cut.indices.get(p).copied().unwrap_or(0) as usize);
        }
    };
    let apply =
        |rng: &mut Rng, order: &mut ApplyOrder<()>, state: &mut Vec<Vec<i64>>, away: &mut Away| {
            if by_partition {
                away.apply_some(rng, order, state);
                apply_some_by_partition(rng, order, state, history, away);
            } else {
                apply_ready(order, state, history);
            }
        };
    for _ in 0..400 {
        match rng.below(20) {
            0 if order.at_cut() => persisted = order.cut(),
            1 => {
                order = ApplyOrder::recover(partitions, &persisted);
                away = Away::new(partitions);
                delivered = vec![0; partitions];
                restore(&persisted, &mut state, &mut delivered);
            }
            // A member installs a snapshot with nothing away (the engine
            // takes back what is first).
            2 if !history.cuts.is_empty() && !order.has_away() => {
                let cut = &history.cuts[rng.below(history.cuts.len() as u64) as usize];
                // A leader sends its snapshot to a member behind it: past
                // whatever any partition here applied.
                if cut.zxid >= order.applied()
                    && state.iter().flatten().all(|&zxid| zxid <= cut.zxid)
                    && (0..partitions).any(|p| cut.indices[p] > order.applied_index(p))
                {
                    order.install(cut);
                    restore(cut, &mut state, &mut delivered);
                    persisted = cut.clone();
                }
            }
            _ => {
                let p = rng.below(partitions as u64) as usize;
                deliver(&mut order, history, &mut delivered, p);
            }
        }
        apply(rng, &mut order, &mut state, &mut away);
        check_prefix(&order, &state, history);
    }
    // Then everything that is left, in a random interleaving.
    while let Some(p) = (0..partitions).find(|&p| delivered[p] < history.logs[p].len()) {
        let p = if rng.below(2) == 0 {
            p
        } else {
            partitions - 1 - p
        };
        deliver(&mut order, history, &mut delivered, p);
        apply(rng, &mut order, &mut state, &mut away);
        check_prefix(&order, &state, history);
    }
    // What is left applies in the mode the run used: the merge's applied
    // zxid is the last it applied, which could be below what a partition
    // applied on its own.
    if by_partition {
        away.apply_all(&mut order, &mut state);
        apply_all_by_partition(&mut order, &mut state, history);
    } else {
        apply_ready(&mut order, &mut state, history);
    }
    assert!(order.at_cut(), "everything that may apply did");
    if by_partition {
        // The prefix may reach over void zxids the merge stops below.
        assert!(order.applied() >= history.last_applied);
    } else {
        assert_eq!(order.applied(), history.last_applied);
    }
    for (p, applied) in state.iter().enumerate() {
        assert_eq!(applied, &history.truth(p, i64::MAX), "partition {p}");
    }
}

/// Partition p's group commits its next entry (if the history has more).
fn deliver(order: &mut ApplyOrder<()>, history: &History, delivered: &mut [usize], p: usize) {
    let Some(item) = history.logs[p].get(delivered[p]) else {
        return;
    };
    if let Item::Seal(_, ranges) = item {
        order.add_voids(ranges);
    }
    delivered[p] += 1;
    let others = match item {
        Item::Txn(_, parts) => parts[1..].iter().map(|&p| p as u32).collect(),
        _ => Vec::new(),
    };
    order.committed_with_parts(p, delivered[p] as u64, item.zxid(), others, ());
}

/// The partitions an applied entry has parts on, checked against the
/// history (a voided one has none, an entry outside the order neither).
fn parts_applied(history: &History, ready: &Ready<()>) -> Vec<usize> {
    let Some(zxid) = ready.zxid else {
        return Vec::new();
    };
    if ready.void {
        assert!(
            history.voided(zxid),
            "{zxid:#x} passed as void, no seal voided it"
        );
        return Vec::new();
    }
    assert!(
        !history.voided(zxid),
        "{zxid:#x} applied, but a seal voided it"
    );
    match &history.logs[ready.partition][ready.index as usize - 1] {
        Item::Txn(_, parts) => parts.clone(),
        Item::Seal(..) => vec![0],
        Item::Empty => panic!(
            "entry {} of partition {} has no zxid",
            ready.index, ready.partition
        ),
    }
}

/// Entries taken away, per partition in order, each with the partitions
/// it applies to: applied later, a random few at a time.
struct Away(Vec<VecDeque<(i64, Vec<usize>)>>);

impl Away {
    fn new(partitions: usize) -> Away {
        Away((0..partitions).map(|_| VecDeque::new()).collect())
    }

    /// Each partition's thread applies a random few of what it has away.
    fn apply_some(&mut self, rng: &mut Rng, order: &mut ApplyOrder<()>, state: &mut [Vec<i64>]) {
        for p in 0..self.0.len() {
            for _ in 0..rng.below(3) {
                self.apply_next(p, order, state);
            }
        }
    }

    fn apply_all(&mut self, order: &mut ApplyOrder<()>, state: &mut [Vec<i64>]) {
        for p in 0..self.0.len() {
            while self.apply_next(p, order, state) {}
        }
    }

    fn apply_next(&mut self, p: usize, order: &mut ApplyOrder<()>, state: &mut [Vec<i64>]) -> bool {
        let Some((zxid, parts)) = self.0[p].pop_front() else {
            return false;
        };
        assert_eq!(parts, vec![p], "only an entry of one partition goes away");
        record_applied(state, parts, zxid);
        order.applied_away(p, zxid);
        true
    }
}

/// Each partition applies a random few of its entries whose turn has come,
/// in a random order of partitions, now and then below a fence a little
/// above the prefix; an entry with parts is applied on each. Half the
/// time, an entry of one partition goes away, to be applied later.
fn apply_some_by_partition(
    rng: &mut Rng,
    order: &mut ApplyOrder<()>,
    state: &mut [Vec<i64>],
    history: &History,
    away: &mut Away,
) {
    let partitions = state.len();
    let fence = match rng.below(3) {
        0 => order.applied() + 1 + rng.below(4) as i64,
        _ => i64::MAX,
    };
    for _ in 0..rng.below(3 * partitions as u64 + 1) {
        let p = rng.below(partitions as u64) as usize;
        let goes_away = rng.below(2) == 0;
        let Some(ready) = order.next_ready_on(p, fence, |_| goes_away) else {
            continue;
        };
        assert!(
            ready.void || ready.zxid.is_none_or(|zxid| zxid < fence),
            "applied at or above the fence"
        );
        let zxid = ready.zxid.unwrap_or_default();
        let parts = parts_applied(history, &ready);
        if ready.away {
            assert!(goes_away && !ready.void, "went away unasked");
            away.0[p].push_back((zxid, parts));
        } else {
            record_applied(state, parts, zxid);
        }
    }
}

/// Every partition applies all it may, until none may apply more.
fn apply_all_by_partition(order: &mut ApplyOrder<()>, state: &mut [Vec<i64>], history: &History) {
    loop {
        let mut applied_some = false;
        for p in 0..state.len() {
            while let Some(ready) = order.next_ready_on(p, i64::MAX, |_| false) {
                applied_some = true;
                let zxid = ready.zxid.unwrap_or_default();
                record_applied(state, parts_applied(history, &ready), zxid);
            }
        }
        if !applied_some {
            return;
        }
    }
}

/// `zxid` applied on each of `parts`: each partition's in zxid order, once.
fn record_applied(state: &mut [Vec<i64>], parts: Vec<usize>, zxid: i64) {
    for part in parts {
        let applied = &mut state[part];
        assert!(
            applied.last().is_none_or(|&last| last < zxid),
            "{zxid:#x} applied to partition {part} after {:#x?}",
            applied.last()
        );
        applied.push(zxid);
    }
}

/// Applies what is ready, each part on its partition; a partition's
/// transactions must arrive in zxid order, each once.
fn apply_ready(order: &mut ApplyOrder<()>, state: &mut [Vec<i64>], history: &History) {
    while let Some(ready) = order.next_ready() {
        let parts = parts_applied(history, &ready);
        let Some(zxid) = ready.zxid.filter(|_| !parts.is_empty()) else {
            continue;
        };
        assert_eq!(order.applied(), zxid);
        record_applied(state, parts, zxid);
    }
}

/// Each partition holds exactly the history's projection at its closed
/// zxid, and `applied` is the lowest of those: under the merge, what a
/// reader sees is a prefix of the one order; by partition, a projection
/// of it at a zxid the reader may be told.
fn check_prefix(order: &ApplyOrder<()>, state: &[Vec<i64>], history: &History) {
    for (p, applied) in state.iter().enumerate() {
        let closed = order.closed(p);
        assert_eq!(
            applied,
            &history.truth(p, closed),
            "partition {p} closed at {closed:#x}"
        );
        assert!(closed <= order.known());
    }
    let lowest = (0..state.len()).map(|p| order.closed(p)).min();
    assert!(
        lowest >= Some(order.applied()),
        "the prefix is below every partition's closed zxid"
    );
    if order.at_cut() {
        for (p, applied) in state.iter().enumerate() {
            assert_eq!(
                applied,
                &history.truth(p, order.applied()),
                "partition {p} at the cut"
            );
        }
    }
}

/// A random history of `leaders` and a server fed it.
fn check_a_server(seed: u64, partitions: usize, leaders: usize, by_partition: bool) {
    let mut rng = Rng(seed | 1);
    let history = history(&mut rng, partitions, leaders);
    run_server(&mut rng, &history, by_partition);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn every_server_applies_a_prefix_of_one_order(
        seed in any::<u64>(), partitions in 1usize..=4, leaders in 1usize..=6,
    ) {
        check_a_server(seed, partitions, leaders, false);
    }

    #[test]
    fn each_partition_applying_its_own_holds_the_projection_at_its_closed_zxid(
        seed in any::<u64>(), partitions in 1usize..=4, leaders in 1usize..=6,
    ) {
        check_a_server(seed, partitions, leaders, true);
    }
}
