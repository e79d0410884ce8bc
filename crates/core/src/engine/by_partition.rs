//! Applying by partition on the engine's one thread: step 2 of owned
//! partitions (docs/partitions.md, "Owned partitions: the plan"), which
//! servers whose partitions own their threads (`partition.owned`) do.
//!
//! Each partition applies its own committed entries as soon as the order
//! lets it (`ApplyOrder::next_ready_on`): once every zxid below is in
//! hand, and nothing of the partitions the entry touches lies below it
//! unapplied. The partitions then stand at different zxids, as threads of
//! their own will, and what clients see must not show it:
//!
//! - **What applying hands the gate waits for the prefix.** Watch events
//!   and write outcomes of an entry above the prefix (the lowest zxid
//!   every partition has closed) are held, and handed over in zxid order
//!   as the prefix passes them. So every connection hears its events and
//!   replies in zxid order, as under the merge.
//! - **Plain reads go by closed watermark.** A read of one partition
//!   (getData, exists, getChildren, getACL) is answered once that
//!   partition's closed zxid reaches what its client saw (the handshake's
//!   `lastZxidSeen`, then every reply's: those at most at the prefix of
//!   their moment need no keeping, since no closed zxid is below the
//!   prefix), at the lowest zxid its state stands for that is not below
//!   that nor the prefix, and once none of its connection's events at or
//!   below that zxid can still come: none waits for the prefix, and every
//!   other partition holding a watch of the connection's has closed that
//!   zxid. (A read can see a write made after a watched change on another
//!   partition, which ZooKeeper would have announced first: the ensemble
//!   simulator's seed 1201 of two partitions.)
//! - **Anything else waits for a cut** at or past what its client saw
//!   (any other reply that carries a zxid): no partition applied past the
//!   prefix, so every tree is the one order's state at one zxid, and the
//!   reply carries it, after its connection's events up to it (handing
//!   over a write's outcome can bring the turn of a read queued behind
//!   it while later events are still being handed over: the ensemble
//!   simulator's seed 163 of five participants).
//! - **A handshake is taken if its client saw no more than is in hand**
//!   (`ApplyOrder::known`): that much will apply here without anything
//!   from elsewhere, and its reads wait for it.
//! - **A read holds back its session's next write.** The merge serves a
//!   read queued between two writes of its session right after the first
//!   applies, before the second. Applying by partition, the second can be
//!   on a partition that gets there first, and a read answered after it
//!   would see it (the ensemble simulator's seed 3 did). So once a write
//!   is in hand with a reply of its session queued before it, it is a
//!   *fence*: no partition applies it or anything above it until that
//!   reply is out. The reply then sees the session's state before the
//!   write, and carries a zxid below the write's, as ZooKeeper's would.
//!   The lowest fence's reply always gets its turn: every write of its
//!   session before it is below the fence. Fences are lifted at the start
//!   of each turn.
//! - **What needs a cut takes one.** A snapshot, an installed snapshot, a
//!   leader's seal: every partition first applies all it may, after which
//!   they meet at a cut (`ApplyOrder::at_cut`).
//! - **What spans partitions is a barrier.** An entry that is not a plain
//!   write (sessions, seals, group moves, restores, `/zookeeper`,
//!   extensions; `chains::touched`) carries a link on every partition, so
//!   it applies only once each has applied everything below it.
//!
//! Other servers apply in the merge. A server applying by partition
//! (`EngineConfig::apply_by_partition`) has each partition apply all it
//! may every turn; the partitions stand apart only while the order holds
//! one back (an entry whose zxids below are not all in hand yet, a
//! fence). The simulators (`EngineConfig::apply_lag_seed`, honoured only
//! in the engine's own test builds) have each partition apply a random
//! few of its ready entries per turn, as threads on a loaded machine
//! would, so the rules above are checked under crashes, failover, seals
//! and snapshots before threads rely on them.

use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

use stoa_proto::request::Request;

use stoa_tree::FastFlags;

use super::handoff::Applied;
use super::Engine;
use crate::session::{Pending, SessionId};
use crate::sim_rng::Rng;
use crate::watch::ConnId;

/// What a session's next reply may do now, applying by partition
/// (`Engine::by_partition_turn`).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Turn {
    /// A plain read, answered by closed watermark at this zxid.
    pub read_at: Option<i64>,
    /// Anything else waits for a later turn.
    pub wait: bool,
    /// The read is answered now where its session's opt-in skipped a wait
    /// (`stoa_tree::FAST`).
    pub fast: bool,
    /// The partition that answers the read at `read_at`.
    pub partition: usize,
}

/// How fast each partition applies, turn by turn, as threads on a loaded
/// machine would: now and then one partition crawls for a stretch of turns
/// while the others keep up (a read of theirs then goes by watermark
/// while the partitions stand apart); otherwise, in most turns, each
/// applies a few, and in the rest all it may.
struct Lag {
    rng: Rng,
    /// The partition crawling, and for how many more turns.
    slow: Option<(usize, u32)>,
}

impl Lag {
    /// Each partition's budget this turn; None: all they may.
    fn budgets(&mut self, partitions: usize) -> Option<Vec<u64>> {
        if self.slow.is_none() && self.rng.chance(10) {
            let partition = self.rng.below(partitions as u64) as usize;
            self.slow = Some((partition, 5 + self.rng.below(60) as u32));
        }
        if let Some((slow, turns)) = &mut self.slow {
            let slow = *slow;
            *turns -= 1;
            if *turns == 0 {
                self.slow = None;
            }
            let crawl = u64::from(self.rng.chance(25));
            return Some(
                (0..partitions)
                    .map(|p| if p == slow { crawl } else { u64::MAX })
                    .collect(),
            );
        }
        self.rng
            .chance(70)
            .then(|| (0..partitions).map(|_| self.rng.below(3)).collect())
    }
}

/// Entries of a partition waiting in the order from which its core, at
/// home, goes away to apply them: waking its thread costs some
/// microseconds, applying a plain transaction about one.
const AWAY_MIN_ENTRIES: usize = 16;

pub(super) struct ByPartition {
    /// The simulators' lag; a server's partitions apply all they may.
    lag: Option<Lag>,
    /// Hand-offs of entries applied above the prefix, by zxid.
    held: BTreeMap<i64, Vec<Applied>>,
    /// The connections named by a watch event in `held`, with how many
    /// such events each: most have none, and asking whether one has
    /// (`event_held`, at every reply's turn) then skips the scan.
    held_events: FxHashMap<ConnId, u32>,
    /// Sessions whose next reply waits: for its partition's closed zxid,
    /// or for the partitions to meet at a cut.
    waiters: Vec<SessionId>,
    /// Writes in hand with a reply of their session queued before them:
    /// zxid to (session, cxid). Nothing at or above the lowest applies.
    fences: BTreeMap<i64, (SessionId, i32)>,
    /// Settling the partitions at a cut: nothing goes away to apply.
    settling: bool,
    /// Per partition, the entries taken away this turn, to send with its
    /// core (`engine/away_apply.rs`). Kept from turn to turn.
    away_shares: Vec<Vec<super::away_apply::AwayEntry>>,
    /// Per connection, the highest zxid its client saw above the prefix
    /// of the moment: its handshake's, or a read's by watermark. (Every
    /// other reply carries the prefix at most, which no partition's
    /// closed zxid is below.)
    seen: FxHashMap<ConnId, i64>,
}

impl ByPartition {
    /// Holds `applied`, of `zxid`, until the prefix passes it.
    fn hold(&mut self, zxid: i64, applied: Applied) {
        if let Applied::Fired { conns, .. } = &applied {
            for &conn in conns {
                *self.held_events.entry(conn).or_default() += 1;
            }
        }
        self.held.entry(zxid).or_default().push(applied);
    }

    /// `handoffs` leave `held`: their events no longer count.
    fn unhold_events(&mut self, handoffs: &[Applied]) {
        for applied in handoffs {
            let Applied::Fired { conns, .. } = applied else {
                continue;
            };
            for conn in conns {
                let count = self.held_events.get_mut(conn).expect("counted when held");
                *count -= 1;
                if *count == 0 {
                    self.held_events.remove(conn);
                }
            }
        }
    }

    /// The index of held events counts exactly the events held.
    pub(super) fn check_invariants(&self) -> Result<(), String> {
        let mut counted: FxHashMap<ConnId, u32> = FxHashMap::default();
        for applied in self.held.values().flatten() {
            if let Applied::Fired { conns, .. } = applied {
                for &conn in conns {
                    *counted.entry(conn).or_default() += 1;
                }
            }
        }
        if counted != self.held_events {
            return Err(format!(
                "held events indexed as {:?}, held {counted:?}",
                self.held_events
            ));
        }
        Ok(())
    }

    /// Applying by partition, if `config` asks for it and the server has
    /// several partitions (`several`: it has an order to apply by).
    pub(super) fn configured(config: &super::EngineConfig, several: bool) -> Option<Self> {
        let lag_seed = config.apply_lag_seed.filter(|_| cfg!(test));
        if !several || !(config.apply_by_partition || lag_seed.is_some()) {
            return None;
        }
        Some(ByPartition {
            lag: lag_seed.map(|seed| Lag {
                rng: Rng(seed),
                slow: None,
            }),
            held: BTreeMap::new(),
            held_events: FxHashMap::default(),
            waiters: Vec::new(),
            fences: BTreeMap::new(),
            settling: false,
            away_shares: Vec::new(),
            seen: FxHashMap::default(),
        })
    }
}

fn zxid_of(applied: &Applied) -> i64 {
    match applied {
        Applied::Fired { zxid, .. } => *zxid,
        Applied::Outcome(outcome) => outcome.zxid,
    }
}

impl Engine {
    /// Whether the partitions apply by partition rather than in the merge.
    #[inline(always)]
    pub(super) fn applies_by_partition(&self) -> bool {
        self.by_partition.is_some()
    }

    /// Applies what the order lets each partition apply. `lagged`: the
    /// partitions go at speeds drawn from the seed (`Lag::budgets`), the
    /// rest waiting for a later turn, and, where partitions own their
    /// threads, what touches one partition alone follows a core that is
    /// away, to apply there (`engine/away_apply.rs`); otherwise each
    /// applies all it may here, so they meet at a cut.
    pub(super) fn apply_by_partition(&mut self, lagged: bool) {
        self.lift_fences();
        let partitions = self.cores.len();
        let owned = self.cores.owned();
        let by = self.by_partition.as_mut().expect("applying by partition");
        let budgets = match lagged {
            true => by.lag.as_mut().and_then(|lag| lag.budgets(partitions)),
            false => None,
        };
        let away = lagged && owned && !by.settling;
        // The simulators also send entries after a core at home, half the
        // time, so that applies go out as often as they follow.
        let eager = away && by.lag.as_mut().is_some_and(|lag| lag.rng.chance(50));
        let mut shares = std::mem::take(&mut by.away_shares);
        shares.resize_with(partitions, Vec::new);
        let lag = budgets.is_some();
        loop {
            let mut applied_some = false;
            for partition in 0..partitions {
                let budget = budgets.as_ref().map_or(u64::MAX, |b| b[partition]);
                for _ in 0..budget {
                    if self.out.fatal.is_some() {
                        return;
                    }
                    let fence = self.lowest_fence();
                    // After a core already away (or entries of its that
                    // are), which would be recalled to apply here; from a
                    // core at home only a long share, since a trip costs
                    // more than applying a few (a follower's cores go
                    // away for nothing else).
                    let order = self.order.as_mut().expect("several partitions");
                    let send = away
                        && (eager
                            || !self.cores.is_home(partition)
                            || order.away_on(partition)
                            || order.waiting_on(partition) >= AWAY_MIN_ENTRIES);
                    let Some(ready) = order.next_ready_on(partition, fence, |_| send) else {
                        break;
                    };
                    applied_some = true;
                    if ready.away {
                        self.follow_chain(partition, &ready.entry);
                        // As `apply_txn` decides it.
                        let timed = self.is_leader() && self.log_applied();
                        shares[partition].push(super::away_apply::AwayEntry {
                            entry: ready.entry,
                            timed,
                        });
                        continue;
                    }
                    if ready.void {
                        self.skip_void_entry(partition, &ready.entry);
                        continue;
                    }
                    self.follow_chain(partition, &ready.entry);
                    self.apply_entry(partition, ready.entry);
                    if !self.at_cut() {
                        self.stats.applied_past_prefix += 1;
                    }
                }
            }
            if !applied_some || lag {
                break;
            }
        }
        self.send_applies_away(&mut shares);
        (self.by_partition.as_mut())
            .expect("applying by partition")
            .away_shares = shares;
        // A partition with entries away from an earlier pass applies no
        // more here: taken back (`take_back_applies`), cores land one at a
        // time, and what one brought back applies before the next is
        // absorbed.
        let held_by_away = (self.order.as_ref()).is_some_and(|order| order.has_away());
        debug_assert!(
            lag || away || held_by_away || self.at_cut(),
            "every partition applied all it may, yet they are not at a cut"
        );
        self.release_handoffs();
    }

    fn lowest_fence(&self) -> i64 {
        (self.by_partition.as_ref())
            .and_then(|by| by.fences.first_key_value())
            .map_or(i64::MAX, |(&zxid, _)| zxid)
    }

    /// An entry came in hand: a fence if it is a write of its session's
    /// with a reply queued before it.
    pub(super) fn fence_if_replies_before(&mut self, header: &stoa_tree::TxnHeader) {
        if self.replies_before(header.session_id, header.zxid, header.cxid) {
            let by = self.by_partition.as_mut().expect("applying by partition");
            by.fences
                .insert(header.zxid, (header.session_id, header.cxid));
            self.stats.writes_fenced += 1;
        }
    }

    /// Whether `sid`'s queue holds its write of `zxid` (known here by its
    /// zxid, or by its xid if forwarded) behind some reply yet to go out.
    fn replies_before(&self, sid: SessionId, zxid: i64, cxid: i32) -> bool {
        let Some(session) = self.gate.sessions.get(&sid) else {
            return false;
        };
        let mut reply_before = false;
        for pending in &session.queue {
            match pending {
                Pending::Write { .. } if pending.is_write_of(zxid, cxid) => return reply_before,
                Pending::Write { .. } => {}
                _ => reply_before = true,
            }
        }
        false
    }

    /// Whether a fence's replies before it have gone out since the fences
    /// were last looked at (`lift_fences`): what waited behind it may apply.
    pub(super) fn fence_liftable(&self) -> bool {
        (self.by_partition.as_ref()).is_some_and(|by| {
            (by.fences.iter()).any(|(&zxid, &(s, cxid))| !self.replies_before(s, zxid, cxid))
        })
    }

    /// Drops the fences whose replies before them have gone out.
    fn lift_fences(&mut self) {
        let Some(by) = self.by_partition.as_ref() else {
            return;
        };
        let lifted: Vec<i64> = (by.fences.iter())
            .filter(|(&zxid, &(s, cxid))| !self.replies_before(s, zxid, cxid))
            .map(|(&zxid, _)| zxid)
            .collect();
        let by = self.by_partition.as_mut().expect("checked");
        for zxid in lifted {
            by.fences.remove(&zxid);
        }
    }

    /// Every partition applies all it may, what it had away first: they
    /// then meet at a cut.
    pub(super) fn settle_partitions(&mut self) {
        if !self.applies_by_partition() {
            return;
        }
        let by = self.by_partition.as_mut().expect("checked");
        let nested = std::mem::replace(&mut by.settling, true);
        self.take_back_applies();
        self.apply_by_partition(false);
        (self.by_partition.as_mut()).expect("checked").settling = nested;
    }

    /// Whether every partition's tree is the one order's state at one
    /// zxid (always, applying in the merge).
    pub(crate) fn at_cut(&self) -> bool {
        self.order.as_ref().is_none_or(|order| order.at_cut())
    }

    /// The zxid a reply carries now: the prefix, applying by partition.
    pub(super) fn prefix_zxid(&self) -> Option<i64> {
        if !self.applies_by_partition() {
            return None;
        }
        self.order.as_ref().map(|order| order.prefix())
    }

    /// Holds `applied` if its entry lies above the prefix; else gives it
    /// back, to go to the gate now.
    pub(super) fn hold_handoff(&mut self, applied: Applied) -> Option<Applied> {
        let Some(prefix) = self.prefix_zxid() else {
            return Some(applied);
        };
        let zxid = zxid_of(&applied);
        if zxid > prefix {
            let applied = self.send_fast_events(applied)?;
            self.by_partition
                .as_mut()
                .expect("checked")
                .hold(zxid, applied);
            return None;
        }
        let by = self.by_partition.as_mut().expect("checked");
        // What was held below it goes first (and what is held above it,
        // after). It waits among them meanwhile: handing one over can let
        // a reply of its connection out, which must see it still held
        // (`event_held`; the ensemble simulator's seed 2659 of three
        // partitions read a change before its event).
        if (by.held.first_key_value()).is_some_and(|(&lowest, _)| lowest <= zxid) {
            by.hold(zxid, applied);
            self.deliver_held_through(zxid);
            return None;
        }
        Some(applied)
    }

    /// Sends now the events of `applied` (held for the prefix otherwise)
    /// to connections whose sessions opted into fast watches, unless one
    /// of the same partition is held for them still (their partition's
    /// events stay in zxid order); gives back the rest, if any.
    fn send_fast_events(&mut self, applied: Applied) -> Option<Applied> {
        if self.fast.is_empty() {
            return Some(applied);
        }
        let Applied::Fired {
            conns,
            zxid,
            change,
            path,
        } = applied
        else {
            return Some(applied);
        };
        let partition = self.partition_of(&path);
        let (fast, held): (Vec<ConnId>, Vec<ConnId>) = conns.into_iter().partition(|&conn| {
            self.fast_flags_of(conn).watches && !self.event_held(conn, zxid, Some(partition))
        });
        for conn in fast {
            self.notify(conn, zxid, change, &path);
            self.stats.events_fast += 1;
        }
        (!held.is_empty()).then_some(Applied::Fired {
            conns: held,
            zxid,
            change,
            path,
        })
    }

    /// Hands the gate what was held of zxids up to `zxid`, in zxid order.
    fn deliver_held_through(&mut self, zxid: i64) {
        loop {
            let by = self.by_partition.as_mut().expect("applying by partition");
            let Some(entry) = by.held.first_entry() else {
                break;
            };
            if *entry.key() > zxid {
                break;
            }
            // At or below the prefix now: each goes to the gate at once.
            let handoffs = entry.remove();
            by.unhold_events(&handoffs);
            for applied in handoffs {
                self.hand_to_gate(applied);
            }
        }
    }

    /// Hands the gate what the prefix has passed, in zxid order; then the
    /// replies that waited try again.
    pub(super) fn release_handoffs(&mut self) {
        let Some(prefix) = self.prefix_zxid() else {
            return;
        };
        self.deliver_held_through(prefix);
        // A prefix that passed void zxids passed the replies waiting for them.
        self.release_zxid_waiters(prefix);
        // Each tries again: a closed zxid or the prefix moved, or not.
        let by = self.by_partition.as_mut().expect("applying by partition");
        for sid in std::mem::take(&mut by.waiters) {
            self.pump(sid);
        }
    }

    /// `conn`'s client saw `zxid` (applying by partition).
    pub(super) fn note_zxid_seen(&mut self, conn: ConnId, zxid: i64) {
        if !self.applies_by_partition() {
            return;
        }
        if let Some(by) = self.by_partition.as_mut() {
            let seen = by.seen.entry(conn).or_default();
            *seen = (*seen).max(zxid);
        }
    }

    pub(super) fn forget_connection(&mut self, conn: ConnId) {
        if !self.applies_by_partition() {
            return;
        }
        if let Some(by) = self.by_partition.as_mut() {
            by.seen.remove(&conn);
        }
    }

    /// Every zxid at or below is in hand here, applying by partition.
    pub(super) fn known_zxid(&self) -> Option<i64> {
        if !self.applies_by_partition() {
            return None;
        }
        self.order.as_ref().map(|order| order.known())
    }

    /// What `sid`'s next reply may do now: a plain read by closed
    /// watermark, the zxid it is answered at; else whether it waits for
    /// a cut at or past what its client saw.
    #[cold]
    #[inline(never)]
    pub(super) fn by_partition_turn(&self, sid: SessionId) -> Turn {
        let Some((conn, head)) =
            (self.gate.sessions.get(&sid)).and_then(|s| Some((s.conn?, s.queue.front()?)))
        else {
            return Turn::default();
        };
        let by = self.by_partition.as_ref().expect("applying by partition");
        let seen = by.seen.get(&conn).copied().unwrap_or(0);
        if let Pending::Read { request, .. } = head {
            let fast = self.fast_flags_of(conn);
            if let Some((zxid, partition)) = self.watermark_read_zxid(conn, seen, request, fast) {
                // Counted where the rule for every session would have waited.
                let skipped = fast.any()
                    && (self.watermark_read_zxid(conn, seen, request, FastFlags::default()))
                        .is_none();
                return Turn {
                    read_at: Some(zxid),
                    wait: false,
                    fast: skipped,
                    partition,
                };
            }
        }
        // At a cut, a reply carries the prefix: the connection's events up
        // to it go first. (They are being handed over now, when a write's
        // outcome among them let this reply's turn come.)
        let order = self.order.as_ref().expect("several partitions");
        let wait =
            !order.at_cut() || order.prefix() < seen || self.event_held(conn, order.prefix(), None);
        Turn {
            wait,
            ..Turn::default()
        }
    }

    /// Whether an event for `conn` at or below `zxid` (of a node on
    /// `partition`, if given) is held for the prefix still.
    fn event_held(&self, conn: ConnId, zxid: i64, partition: Option<usize>) -> bool {
        let Some(by) = self.by_partition.as_ref() else {
            return false;
        };
        if by.held_events.is_empty() || !by.held_events.contains_key(&conn) {
            return false;
        }
        let on = |path: &str| partition.is_none_or(|p| self.partition_of(path) == p);
        (by.held.range(..=zxid).flat_map(|(_, held)| held)).any(|applied| {
            matches!(applied, Applied::Fired { conns, path, .. }
                if conns.contains(&conn) && on(path))
        })
    }

    /// A plain read of one partition by a client that saw `seen`: the
    /// zxid it is answered at, once the partition can vouch for `seen`
    /// (its closed zxid) and no event of the connection's at or below
    /// that zxid can still come: none waits for the prefix, and every
    /// other partition holding a watch of the connection's has closed that
    /// zxid (the read may see its change, or a later write). The
    /// partition's state is the history's at any zxid from its last
    /// applied to its closed one; the reply carries the lowest of those
    /// that is not below `seen`. A fence keeps the partition below the
    /// session's next write.
    ///
    /// A session that opted into fast reads (`fast`) skips what ties the
    /// read to other partitions: its partition need not vouch for `seen`
    /// (the reply still carries `seen` at least: the zxid a client sees
    /// never goes back), and the connection's events of other partitions
    /// may come after it. Only its own partition's events up to the
    /// read's zxid come first, so a read that sees a change still comes
    /// after that change's event. Fast watches skip the second alone: the
    /// connection's events are not ordered across partitions anyway.
    ///
    /// Gives the zxid with the partition that answers.
    fn watermark_read_zxid(
        &self,
        conn: ConnId,
        seen: i64,
        request: &Request,
        fast: FastFlags,
    ) -> Option<(i64, usize)> {
        if !super::lent_reads::is_plain_read(request) {
            return None;
        }
        let order = self.order.as_ref()?;
        let partition = self.read_partition(request);
        // A partition with entries away has its state on its thread, past
        // what the order counts applied: the read waits for it.
        if (order.closed(partition) < seen && !fast.reads) || order.away_on(partition) {
            return None;
        }
        // Not below what the connection was told before either: the
        // prefix then, at most.
        let zxid = (seen.max(order.last_applied(partition))).max(order.prefix());
        // (Entries away may have fired a watch of the connection there
        // already, and their events are not in hand yet.)
        let watched_behind = !fast.any()
            && (0..self.cores.len()).any(|p| {
                p != partition
                    && order.closed(p) < zxid
                    && (order.away_on(p) || self.cores[p].watches.of_conn(conn).next().is_some())
            });
        let held_on = fast.reads.then_some(partition);
        (!watched_behind && !self.event_held(conn, zxid, held_on)).then_some((zxid, partition))
    }

    /// `sid`'s next reply waits: it is pumped again after the next turn.
    pub(super) fn wait_for_turn(&mut self, sid: SessionId) {
        let by = self
            .by_partition
            .as_mut()
            .expect("only applying by partition does a reply wait for a turn");
        if !by.waiters.contains(&sid) {
            by.waiters.push(sid);
        }
    }

    /// Partitions stand apart, or hand-offs are held: a later turn applies
    /// or hands over more.
    pub(crate) fn applying_behind(&self) -> bool {
        if !self.applies_by_partition() {
            return false;
        }
        if self.order.as_ref().is_some_and(|order| order.has_away()) {
            // The rest waits for the partitions' threads: what comes back
            // from them applies whatever waited for it.
            return false;
        }
        self.by_partition.as_ref().is_some_and(|by| {
            !by.held.is_empty()
                || !self.at_cut()
                || self
                    .order
                    .as_ref()
                    .is_some_and(|order| order.has_applicable())
        })
    }
}
