//! The partition cores, each of which may be away on a thread of its own
//! between turns (docs/partitions.md, "Step 3, the inversion", its first
//! slice: "cores away between turns").
//!
//! A core is *home* when the engine's thread holds it and *away* while a
//! job sent to its partition's thread owns it. The job does work that
//! touches that core alone (`PartitionCore`'s functions of its core:
//! preparing a share of writes, taking its group's ready apart) and sends
//! the core back with what it did (`AwayDone`). The engine does not wait:
//! it goes on with its own work, and takes the core back either when its
//! host tells it that a thread finished (`Engine::take_returned`) or when
//! it needs the core itself. The latter is a *recall*: the engine waits
//! for the core there, wherever it reaches for it, through the same
//! `cores[p]` every engine function uses, so that no function can touch a
//! core that is away. What a recalled core brought back waits in order
//! until the engine absorbs it (`Engine::absorb_away`), which it does
//! before it takes a ready of its own from any group and at the start of
//! every input, so a group's readies are persisted in their order.
//!
//! Work sent to a core that is still away *follows* it instead of recalling
//! it: the job goes down a channel that travels with the core, and the
//! thread runs whatever waits there before it sends the core back. Only
//! a job that arrives after the thread looked for the last time is left
//! for the engine, which runs it as the core lands, before anything else
//! may reach the core. So a partition's jobs run in the order sent, on
//! whichever side holds the core.
//!
//! Without threads (the default, and every server of one partition) no
//! core is ever away.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::VecDeque;
use std::sync::mpsc;

use raft::eraftpb::{Message, MessageType};

use super::away_apply::AppliedAway;
use super::groups::Heard;
use super::handoff::ReadOutcome;
use super::lent_ready::TakenReady;
use super::partition_core::PartitionCore;

/// The threads the partitions' cores go away to, one per partition. The
/// server passes them (`partition.owned`); the core starts none.
pub trait PartitionThreads: Send {
    /// Runs `job` on `partition`'s thread, after every job sent there
    /// before.
    fn send(&self, partition: usize, job: Box<dyn FnOnce() + Send>);

    /// Called before the engine waits for `partition`'s core: a thread of
    /// its own needs nothing (its job sends the core back when done); the
    /// simulators' stand-in runs the jobs it holds now.
    fn finish(&self, _partition: usize) {}
}

/// What a core did away, handed back with it.
pub(crate) struct AwayDone {
    pub partition: usize,
    /// Writes of its share that failed (request errors, as a write
    /// prepared on the engine's thread counts them).
    pub errors: u64,
    /// Its group's ready, taken apart there: its messages, its committed
    /// entries and its persist job wait for the engine.
    pub taken: Option<TakenReady>,
    /// What a durable notification it heard there let go, which goes out
    /// before the ready's messages.
    pub heard: Heard,
    /// Committed entries it applied there (`engine/away_apply.rs`).
    pub applied: Option<AppliedAway>,
    /// The outcomes of a share of batched reads it served there, in order
    /// (`engine/lent_reads.rs`); taken before the rest is absorbed.
    pub reads: Vec<ReadOutcome>,
}

impl AwayDone {
    /// A job that did nothing the engine must absorb.
    pub fn nothing(partition: usize) -> AwayDone {
        AwayDone {
            partition,
            errors: 0,
            taken: None,
            heard: Heard::default(),
            applied: None,
            reads: Vec::new(),
        }
    }
}

/// Work for a core, wherever it is.
type Job = Box<dyn FnOnce(&mut PartitionCore) -> AwayDone + Send>;

/// A raft input kept for a core away, to step on its thread in the order
/// it came (`Cores::step_later`, `Cores::tick_later`).
pub(crate) enum KeptInput {
    Message(Message),
    Tick,
}

struct Returned {
    core: Box<PartitionCore>,
    /// Its follow-ups' channel, back with it.
    follow_ups: mpsc::Receiver<Job>,
    /// What each job did, in the order sent.
    done: Vec<AwayDone>,
}

/// What the engine may still read of a core while it is away: its raft
/// group's term and leader, and the entries it applied, as it left. A job
/// away proposes, takes readies apart and applies, and steps raft only with
/// messages and ticks that cannot change who leads in which term
/// (`LeftAs::steps_in_place`, `LeftAs::ticks_in_place`), so the group's
/// state does not change there (checked when the core comes back); what it
/// applied only moves on, and the engine reads it as it was until the core
/// is back (`engine/away_apply.rs`). What only the engine's thread changes
/// (a snapshot installed, built or waited on) it reads here too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct LeftAs {
    term: u64,
    leader_id: u64,
    is_leader: bool,
    applied_since_snapshot: u64,
    /// The zxid its tree is at.
    applied_zxid: i64,
    /// Its applied entries reach its current term (`Engine::log_applied`).
    log_applied: bool,
    transferring: bool,
    joint_config: bool,
    /// Ticks since raft last heard from its leader (a follower) or last
    /// checked its quorum (a leader), as it left.
    election_elapsed: usize,
    /// The tick at which it would campaign (a follower: its randomized
    /// timeout) or check its quorum (a leader).
    election_timeout: usize,
    /// It waits for a snapshot from the leader to be durable (not ticked
    /// meanwhile: `PartitionCore::tick`). Only a job away lets it go.
    installing: bool,
    /// Leader: peers it sent a snapshot it waits to hear about
    /// (`Engine::watch_snapshot_sends`). Only the engine's thread adds them.
    snapshot_waits: bool,
    /// It keeps a snapshot built for lagging peers
    /// (`Engine::release_idle_shippable`). Only the engine's thread builds
    /// or drops one.
    shippable: bool,
}

impl LeftAs {
    /// What no job away may change: its raft group's state.
    fn group(&self) -> (u64, u64, bool, bool, bool) {
        let LeftAs {
            term,
            leader_id,
            is_leader,
            transferring,
            joint_config,
            ..
        } = *self;
        (term, leader_id, is_leader, transferring, joint_config)
    }

    /// Whether stepping `message` leaves the group's state as it is: the
    /// steady traffic of the term the core left in, which moves only the
    /// log, the commit index and the leader's view of its followers. A
    /// follower's appends and heartbeats from the leader it follows; a
    /// leader's responses to its own, while it hands nothing over (a
    /// response from the transferee may start the hand-over). Anything
    /// else (another term, a vote, a snapshot, a candidate hearing of a
    /// leader) may change who leads, so it is stepped at home.
    fn steps_in_place(&self, message: &Message) -> bool {
        if message.term != self.term || self.term == 0 {
            return false;
        }
        match message.get_msg_type() {
            MessageType::MsgAppend | MessageType::MsgHeartbeat => {
                !self.is_leader && self.leader_id != 0 && message.from == self.leader_id
            }
            MessageType::MsgAppendResponse | MessageType::MsgHeartbeatResponse => {
                self.is_leader && !self.transferring
            }
            _ => false,
        }
    }

    /// Whether one more raft tick, after `ticks_before` already sent since
    /// the core left, leaves the group's state as it is: a leader's tick
    /// short of its quorum check (it only sends heartbeats), a follower's
    /// short of its election timeout. Messages stepped away only reset a
    /// follower's count, so counting from the moment it left is safe.
    fn ticks_in_place(&self, ticks_before: usize) -> bool {
        if self.term == 0 || self.installing {
            return false;
        }
        let following = !self.is_leader && self.leader_id != 0;
        let steady = (self.is_leader && !self.transferring) || following;
        steady && self.election_elapsed + ticks_before + 1 < self.election_timeout
    }

    fn of(core: &PartitionCore) -> LeftAs {
        let raft = &core.raft.raft;
        LeftAs {
            term: core.term(),
            leader_id: core.leader_id(),
            is_leader: core.is_leader(),
            applied_since_snapshot: core.applied_since_snapshot(),
            applied_zxid: core.tree.last_zxid(),
            log_applied: core.log_applied(),
            transferring: core.transferring(),
            joint_config: core.in_joint_config(),
            election_elapsed: raft.election_elapsed,
            election_timeout: if core.is_leader() {
                raft.election_timeout()
            } else {
                raft.randomized_election_timeout()
            },
            installing: core.installing.is_some(),
            snapshot_waits: !core.snapshot_wait_ticks.is_empty(),
            shippable: core.raft.store().has_shippable(),
        }
    }
}

pub(crate) struct Slot {
    /// Empty while the core is away.
    home: OnceCell<Box<PartitionCore>>,
    /// As the core left, while it is away.
    left_as: LeftAs,
    back_tx: mpsc::Sender<Returned>,
    back_rx: mpsc::Receiver<Returned>,
    /// Jobs sent while the core is away, run by whoever holds it next.
    follow_tx: mpsc::Sender<Job>,
    /// Their receiving end, while the core is home (it leaves with the
    /// core).
    follow_rx: RefCell<Option<mpsc::Receiver<Job>>>,
    /// Raft messages and ticks for the core away, to step on its thread
    /// as one job (`Cores::step_later`, `Cores::tick_later`); empty while
    /// it is home.
    steps: RefCell<Vec<KeptInput>>,
    /// Ticks sent after the core since it left.
    ticks_since_left: usize,
}

/// How often cores went away and came back, for `mntr`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AwayCounts {
    /// Jobs sent to a partition's thread.
    pub sent: u64,
    /// Cores the engine reached for while they were away.
    pub recalled: u64,
    /// Of those, the ones it had to wait for (the job had not finished).
    pub waited: u64,
    /// Jobs sent after a core still away, to run before it comes back.
    pub followed: u64,
    /// Of those, the ones its thread had stopped looking for, which the
    /// engine ran as the core landed.
    pub followed_late: u64,
}

impl Slot {
    /// The core of a slot whose core was recalled.
    fn core_mut(&mut self) -> &mut PartitionCore {
        self.home.get_mut().expect("recalled first")
    }
}

/// Every core, each recalled first (`Cores::iter_mut`).
pub(crate) type CoresMut<'c> =
    std::iter::Map<std::slice::IterMut<'c, Slot>, fn(&mut Slot) -> &mut PartitionCore>;

pub(crate) struct Cores {
    slots: Vec<Slot>,
    threads: Option<Box<dyn PartitionThreads>>,
    /// What recalled cores brought back, not yet absorbed, in order.
    done: RefCell<VecDeque<AwayDone>>,
    recalled: Cell<u64>,
    waited: Cell<u64>,
    sent: u64,
    followed: u64,
    followed_late: Cell<u64>,
    /// Cores away now.
    away: Cell<usize>,
}

impl Cores {
    pub fn new(cores: Vec<PartitionCore>) -> Cores {
        let slots = (cores.into_iter())
            .map(|core| {
                let (back_tx, back_rx) = mpsc::channel();
                let (follow_tx, follow_rx) = mpsc::channel();
                Slot {
                    home: OnceCell::from(Box::new(core)),
                    left_as: LeftAs::default(),
                    back_tx,
                    back_rx,
                    follow_tx,
                    follow_rx: RefCell::new(Some(follow_rx)),
                    steps: RefCell::default(),
                    ticks_since_left: 0,
                }
            })
            .collect();
        Cores {
            slots,
            threads: None,
            done: RefCell::default(),
            recalled: Cell::new(0),
            waited: Cell::new(0),
            sent: 0,
            followed: 0,
            followed_late: Cell::new(0),
            away: Cell::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Cores may go away to `threads` from now on.
    pub fn own(&mut self, threads: Box<dyn PartitionThreads>) {
        self.threads = Some(threads);
    }

    /// Whether cores may go away.
    pub fn owned(&self) -> bool {
        self.threads.is_some()
    }

    pub fn is_home(&self, partition: usize) -> bool {
        self.slots[partition].home.get().is_some()
    }

    pub fn counts(&self) -> AwayCounts {
        AwayCounts {
            sent: self.sent,
            recalled: self.recalled.get(),
            waited: self.waited.get(),
            followed: self.followed,
            followed_late: self.followed_late.get(),
        }
    }

    /// Sends `partition`'s core away to do `work` on its thread, or, if it
    /// is still away, sends `work` after it.
    pub fn send_away(
        &mut self,
        partition: usize,
        work: impl FnOnce(&mut PartitionCore) -> AwayDone + Send + 'static,
    ) {
        if self.away_now(partition) {
            return self.follow(partition, work);
        }
        self.dispatch(partition, Box::new(work));
    }

    /// Sends `work` after `partition`'s core, which is away (`away_now`);
    /// if it comes back meanwhile, the engine runs `work` as it lands.
    pub fn follow(
        &mut self,
        partition: usize,
        work: impl FnOnce(&mut PartitionCore) -> AwayDone + Send + 'static,
    ) {
        debug_assert!(
            !self.is_home(partition),
            "a core home is sent, not followed"
        );
        // The messages that came before go first.
        self.send_steps_of(partition);
        // The receiver is with the core, on its thread or on its way back.
        let _ = self.slots[partition].follow_tx.send(Box::new(work));
        self.followed += 1;
    }

    /// Keeps `message` for `partition`'s core, which is away (`away_now`)
    /// and may step it there (`steps_away`). The messages kept follow the
    /// core as one job (`PartitionCore::step_kept`) when the engine
    /// sends them (`send_steps`) or sends the core anything else; if the
    /// core lands first, they are stepped as it lands, after what was sent.
    pub fn step_later(&mut self, partition: usize, message: Message) {
        debug_assert!(self.steps_away(partition, &message));
        (self.slots[partition].steps.get_mut()).push(KeptInput::Message(message));
    }

    /// Keeps a raft tick for `partition`'s core, which is away
    /// (`away_now`) and may tick there (`ticks_away`), as `step_later`
    /// keeps a message.
    pub fn tick_later(&mut self, partition: usize) {
        debug_assert!(self.ticks_away(partition));
        let slot = &mut self.slots[partition];
        slot.steps.get_mut().push(KeptInput::Tick);
        slot.ticks_since_left += 1;
    }

    /// Whether a raft tick for `partition`, whose core is away, may follow
    /// it and be stepped on its thread (`LeftAs::ticks_in_place`).
    pub fn ticks_away(&self, partition: usize) -> bool {
        debug_assert!(!self.is_home(partition));
        let slot = &self.slots[partition];
        slot.left_as.ticks_in_place(slot.ticks_since_left)
    }

    /// Sends every core away the messages kept for it (the end of a batch
    /// of inputs: one ready for them all).
    pub fn send_steps(&mut self) {
        for partition in 0..self.slots.len() {
            self.send_steps_of(partition);
        }
    }

    fn send_steps_of(&mut self, partition: usize) {
        let slot = &mut self.slots[partition];
        if slot.steps.get_mut().is_empty() {
            return;
        }
        let inputs = std::mem::take(slot.steps.get_mut());
        let work = move |core: &mut PartitionCore| core.step_kept(partition, inputs);
        let _ = slot.follow_tx.send(Box::new(work));
        self.followed += 1;
    }

    /// Whether `message` for `partition`, whose core is away, may follow
    /// it and be stepped on its thread (`LeftAs::steps_in_place`).
    pub fn steps_away(&self, partition: usize, message: &Message) -> bool {
        debug_assert!(!self.is_home(partition));
        self.slots[partition].left_as.steps_in_place(message)
    }

    /// Sends `partition`'s core, home, to its thread to do `work` and then
    /// whatever follows it.
    fn dispatch(&mut self, partition: usize, work: Job) {
        let threads = self
            .threads
            .as_ref()
            .expect("cores go away only to threads");
        let slot = &mut self.slots[partition];
        debug_assert!(
            slot.steps.get_mut().is_empty(),
            "steps kept for a core home"
        );
        let mut core = slot.home.take().expect("a core away is sent again");
        let follow_ups = (slot.follow_rx.get_mut().take()).expect("a core home has its follow-ups");
        self.away.set(self.away.get() + 1);
        slot.left_as = LeftAs::of(&core);
        slot.ticks_since_left = 0;
        let back = slot.back_tx.clone();
        threads.send(
            partition,
            Box::new(move || {
                let mut done = vec![work(&mut core)];
                while let Ok(next) = follow_ups.try_recv() {
                    done.push(next(&mut core));
                }
                // The engine's side only goes with the server.
                let _ = back.send(Returned {
                    core,
                    follow_ups,
                    done,
                });
            }),
        );
        self.sent += 1;
    }

    /// A core that came back goes home: what it did waits to be absorbed,
    /// after which the follow-ups its thread did not see run here, so that
    /// the core is as every job sent so far left it.
    fn land(&self, partition: usize, returned: Returned) {
        let slot = &self.slots[partition];
        let Returned {
            mut core,
            follow_ups,
            done,
        } = returned;
        debug_assert_eq!(LeftAs::of(&core).group(), slot.left_as.group());
        self.away.set(self.away.get() - 1);
        let mut queue = self.done.borrow_mut();
        queue.extend(done);
        while let Ok(late) = follow_ups.try_recv() {
            self.followed_late.set(self.followed_late.get() + 1);
            queue.push_back(late(&mut core));
        }
        let steps = std::mem::take(&mut *slot.steps.borrow_mut());
        if !steps.is_empty() {
            queue.push_back(core.step_kept(partition, steps));
        }
        *slot.follow_rx.borrow_mut() = Some(follow_ups);
        assert!(slot.home.set(core).is_ok(), "a core landed twice");
    }

    /// Has every partition's thread finish its jobs (the simulators'
    /// stand-ins run them now); true if a core was away.
    #[cfg(test)]
    pub fn finish_all(&self) -> bool {
        let mut away = false;
        for partition in 0..self.len() {
            if !self.is_home(partition) {
                away = true;
                if let Some(threads) = &self.threads {
                    threads.finish(partition);
                }
            }
        }
        away
    }

    /// The outcomes of the share of batched reads last sent to
    /// `partition`'s core, once it has served them: the core is recalled
    /// (waited for) if it is away. What else its jobs did stays queued for
    /// the engine to absorb.
    pub fn take_reads(&mut self, partition: usize) -> Vec<ReadOutcome> {
        let _ = &self[partition];
        let done = self.done.get_mut();
        let served = (done.iter_mut().rev())
            .find(|d| d.partition == partition && !d.reads.is_empty())
            .expect("a share of reads sent comes back served");
        std::mem::take(&mut served.reads)
    }

    /// `index`'s slow path: the core is away.
    #[cold]
    #[inline(never)]
    fn recalled_ref(&self, partition: usize) -> &PartitionCore {
        self.recall(partition);
        self.slots[partition].home.get().expect("landed")
    }

    /// Waits for an away core, and takes it home: the engine reached for
    /// it (`index_mut`'s slow path).
    #[cold]
    #[inline(never)]
    fn recall(&self, partition: usize) {
        let slot = &self.slots[partition];
        self.recalled.set(self.recalled.get() + 1);
        let returned = slot.back_rx.try_recv().unwrap_or_else(|_| {
            self.waited.set(self.waited.get() + 1);
            if let Some(threads) = &self.threads {
                threads.finish(partition);
            }
            (slot.back_rx.recv()).expect("a partition's thread stopped with its core")
        });
        self.land(partition, returned)
    }

    /// Whether `partition`'s core is away now: not home, and not back
    /// either (a core its thread sent back is taken home here).
    pub fn away_now(&mut self, partition: usize) -> bool {
        if self.is_home(partition) {
            return false;
        }
        match self.slots[partition].back_rx.try_recv() {
            Ok(returned) => {
                self.land(partition, returned);
                false
            }
            Err(_) => true,
        }
    }

    /// Reads `partition`'s core, or what it left as while it is away,
    /// without recalling it.
    #[inline]
    fn read<T>(
        &self,
        partition: usize,
        home: impl FnOnce(&PartitionCore) -> T,
        away: impl FnOnce(&LeftAs) -> T,
    ) -> T {
        let slot = &self.slots[partition];
        match slot.home.get() {
            Some(core) => home(core),
            None => away(&slot.left_as),
        }
    }

    /// `partition`'s raft term, away or not.
    pub fn term(&self, partition: usize) -> u64 {
        self.read(partition, |core| core.term(), |left| left.term)
    }

    /// The leader of `partition`'s group as of its last step, away or not.
    pub fn leader_id(&self, partition: usize) -> u64 {
        self.read(partition, |core| core.leader_id(), |left| left.leader_id)
    }

    /// Whether this server leads `partition`'s group, away or not.
    pub fn is_leader(&self, partition: usize) -> bool {
        self.read(partition, |core| core.is_leader(), |left| left.is_leader)
    }

    /// Entries `partition` applied since its last snapshot, away or not.
    pub fn applied_since_snapshot(&self, partition: usize) -> u64 {
        self.read(
            partition,
            |core| core.applied_since_snapshot(),
            |left| left.applied_since_snapshot,
        )
    }

    /// The zxid `partition`'s tree is at, away or not.
    pub fn applied_zxid(&self, partition: usize) -> i64 {
        self.read(
            partition,
            |core| core.tree.last_zxid(),
            |left| left.applied_zxid,
        )
    }

    /// Whether `partition` applied an entry of its current term, away or
    /// not.
    pub fn log_applied(&self, partition: usize) -> bool {
        self.read(
            partition,
            |core| core.log_applied(),
            |left| left.log_applied,
        )
    }

    /// Whether `partition`'s group is handing its leadership over, away or
    /// not.
    pub fn transferring(&self, partition: usize) -> bool {
        self.read(
            partition,
            |core| core.transferring(),
            |left| left.transferring,
        )
    }

    /// Whether `partition`'s group waits to hear whether peers got the
    /// snapshots it sent them, away or not.
    pub fn snapshot_waits(&self, partition: usize) -> bool {
        self.read(
            partition,
            |core| !core.snapshot_wait_ticks.is_empty(),
            |left| left.snapshot_waits,
        )
    }

    /// Whether `partition`'s group keeps a snapshot built for lagging
    /// peers, away or not.
    pub fn keeps_shippable(&self, partition: usize) -> bool {
        self.read(
            partition,
            |core| core.raft.store().has_shippable(),
            |left| left.shippable,
        )
    }

    /// Whether `partition`'s raft configuration is joint, away or not.
    pub fn joint_config(&self, partition: usize) -> bool {
        self.read(
            partition,
            |core| core.in_joint_config(),
            |left| left.joint_config,
        )
    }

    /// What came back: first what recalled cores brought, then any core
    /// whose thread has finished (taken home without waiting).
    #[inline]
    pub fn next_done(&mut self) -> Option<AwayDone> {
        if self.away.get() == 0 && self.done.get_mut().is_empty() {
            return None;
        }
        self.next_done_slow()
    }

    fn next_done_slow(&mut self) -> Option<AwayDone> {
        if let Some(done) = self.done.get_mut().pop_front() {
            return Some(done);
        }
        for partition in 0..self.len() {
            let slot = &self.slots[partition];
            if slot.home.get().is_some() {
                continue;
            }
            if let Ok(returned) = slot.back_rx.try_recv() {
                self.land(partition, returned);
                return self.done.get_mut().pop_front();
            }
        }
        None
    }

    pub fn get(&self, partition: usize) -> Option<&PartitionCore> {
        (partition < self.len()).then(|| &self[partition])
    }

    pub fn get_mut(&mut self, partition: usize) -> Option<&mut PartitionCore> {
        (partition < self.len()).then(|| &mut self[partition])
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &PartitionCore> + ExactSizeIterator {
        (0..self.len()).map(|partition| &self[partition])
    }

    pub fn iter_mut(&mut self) -> CoresMut<'_> {
        for partition in 0..self.len() {
            let _ = &mut self[partition];
        }
        self.slots.iter_mut().map(Slot::core_mut)
    }

    /// The cores of the partitions `wanted` picks, each with its
    /// partition, in partition order, each recalled first: the others are
    /// left where they are.
    pub fn picked_mut(
        &mut self,
        wanted: impl Fn(usize) -> bool + Copy,
    ) -> impl Iterator<Item = (usize, &mut PartitionCore)> {
        for partition in (0..self.len()).filter(|&p| wanted(p)) {
            let _ = &mut self[partition];
        }
        (self.slots.iter_mut().enumerate())
            .filter(move |&(partition, _)| wanted(partition))
            .map(|(partition, slot)| (partition, slot.core_mut()))
    }

    /// The cores that are home, each with its partition: the others are
    /// left where they are.
    pub fn home_iter(&self) -> impl Iterator<Item = (usize, &PartitionCore)> {
        (self.slots.iter().enumerate())
            .filter_map(|(partition, slot)| Some((partition, &**slot.home.get()?)))
    }

    /// `home_iter`, mutably.
    pub fn home_iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut PartitionCore)> {
        (self.slots.iter_mut().enumerate())
            .filter_map(|(partition, slot)| Some((partition, &mut **slot.home.get_mut()?)))
    }

    /// Two different partitions' cores at once.
    pub fn pair_mut(&mut self, a: usize, b: usize) -> (&mut PartitionCore, &mut PartitionCore) {
        assert_ne!(a, b, "two different partitions");
        let _ = &mut self[a];
        let _ = &mut self[b];
        let (low, high) = (a.min(b), a.max(b));
        let (head, tail) = self.slots.split_at_mut(high);
        let low_core = &mut **head[low].home.get_mut().expect("recalled above");
        let high_core = &mut **tail[0].home.get_mut().expect("recalled above");
        if a < b {
            (low_core, high_core)
        } else {
            (high_core, low_core)
        }
    }
}

impl std::ops::Index<usize> for Cores {
    type Output = PartitionCore;

    #[inline(always)]
    fn index(&self, partition: usize) -> &PartitionCore {
        match self.slots[partition].home.get() {
            Some(core) => core,
            None => self.recalled_ref(partition),
        }
    }
}

impl std::ops::IndexMut<usize> for Cores {
    #[inline(always)]
    fn index_mut(&mut self, partition: usize) -> &mut PartitionCore {
        if self.slots[partition].home.get().is_none() {
            self.recall(partition);
        }
        match self.slots[partition].home.get_mut() {
            Some(core) => core,
            None => unreachable!("recalled"),
        }
    }
}

impl<'c> IntoIterator for &'c mut Cores {
    type Item = &'c mut PartitionCore;
    type IntoIter = CoresMut<'c>;

    fn into_iter(self) -> CoresMut<'c> {
        self.iter_mut()
    }
}

/// For the simulators: stand-in threads, one queue per partition, that run
/// a job as it is sent or hold it until the engine recalls the core
/// (`finish`), as their seed draws; deterministic, on the caller's thread.
#[cfg(test)]
type Queued = VecDeque<Box<dyn FnOnce() + Send>>;

#[cfg(test)]
pub(crate) struct SimThreads {
    /// The draws' state, and each partition's held jobs.
    queues: std::sync::Mutex<(u64, Vec<Queued>)>,
}

#[cfg(test)]
impl SimThreads {
    pub fn new(seed: u64) -> SimThreads {
        SimThreads {
            queues: std::sync::Mutex::new((seed, Vec::new())),
        }
    }
}

#[cfg(test)]
impl PartitionThreads for SimThreads {
    fn send(&self, partition: usize, job: Box<dyn FnOnce() + Send>) {
        let mut guard = self.queues.lock().expect("one caller");
        let (seed, queues) = &mut *guard;
        *seed = crate::session::splitmix64(*seed);
        if *seed % 2 == 1 {
            queues.resize_with(queues.len().max(partition + 1), VecDeque::new);
            return queues[partition].push_back(job);
        }
        drop(guard);
        job();
    }

    fn finish(&self, partition: usize) {
        let jobs: Vec<_> = {
            let mut queues = self.queues.lock().expect("one caller");
            let queues = &mut queues.1;
            match queues.get_mut(partition) {
                Some(queue) => queue.drain(..).collect(),
                None => Vec::new(),
            }
        };
        for job in jobs {
            job();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use raft::eraftpb::{Message, MessageType};

    use super::{AwayDone, LeftAs, PartitionThreads};
    use crate::engine::{Engine, EngineConfig, Recovered};

    fn message(kind: MessageType, from: u64, term: u64) -> Message {
        let mut m = Message::default();
        m.set_msg_type(kind);
        m.from = from;
        m.term = term;
        m
    }

    #[test]
    fn only_the_steady_traffic_of_the_term_steps_away() {
        use MessageType::*;
        let follower = LeftAs {
            term: 4,
            leader_id: 2,
            ..LeftAs::default()
        };
        let leader = LeftAs {
            term: 4,
            leader_id: 1,
            is_leader: true,
            ..LeftAs::default()
        };
        // A follower steps its leader's appends and heartbeats of the term.
        assert!(follower.steps_in_place(&message(MsgAppend, 2, 4)));
        assert!(follower.steps_in_place(&message(MsgHeartbeat, 2, 4)));
        // Another sender, another term, or anything else may change who
        // leads.
        assert!(!follower.steps_in_place(&message(MsgAppend, 3, 4)));
        assert!(!follower.steps_in_place(&message(MsgAppend, 2, 5)));
        assert!(!follower.steps_in_place(&message(MsgAppend, 2, 3)));
        assert!(!follower.steps_in_place(&message(MsgAppendResponse, 2, 4)));
        for kind in [
            MsgRequestVote,
            MsgRequestPreVote,
            MsgSnapshot,
            MsgTimeoutNow,
        ] {
            assert!(!follower.steps_in_place(&message(kind, 2, 4)), "{kind:?}");
        }
        // A candidate (no leader known) hearing of one becomes its follower.
        let candidate = LeftAs {
            term: 4,
            ..LeftAs::default()
        };
        assert!(!candidate.steps_in_place(&message(MsgAppend, 2, 4)));
        assert!(!candidate.steps_in_place(&message(MsgHeartbeat, 2, 4)));
        // A leader steps its followers' responses of the term...
        assert!(leader.steps_in_place(&message(MsgAppendResponse, 3, 4)));
        assert!(leader.steps_in_place(&message(MsgHeartbeatResponse, 3, 4)));
        assert!(!leader.steps_in_place(&message(MsgAppendResponse, 3, 5)));
        assert!(!leader.steps_in_place(&message(MsgAppend, 3, 4)));
        assert!(!leader.steps_in_place(&message(MsgRequestVoteResponse, 3, 4)));
        // ...but not while it hands its leadership over.
        let handing_over = LeftAs {
            transferring: true,
            ..leader
        };
        assert!(!handing_over.steps_in_place(&message(MsgAppendResponse, 3, 4)));
    }

    #[test]
    fn only_ticks_short_of_a_timeout_tick_away() {
        let follower = LeftAs {
            term: 4,
            leader_id: 2,
            election_elapsed: 3,
            election_timeout: 13,
            ..LeftAs::default()
        };
        // A follower ticks away until the tick that would campaign: the
        // tenth from here (elapsed 13) stays home.
        assert!(follower.ticks_in_place(0));
        assert!(follower.ticks_in_place(8));
        assert!(!follower.ticks_in_place(9));
        // A candidate, a pre-candidate or a server that knows no leader
        // may campaign at any tick.
        let candidate = LeftAs {
            leader_id: 0,
            ..follower
        };
        assert!(!candidate.ticks_in_place(0));
        // So may a group that never had a term, or one installing a
        // snapshot (it is not ticked until that is durable).
        assert!(!LeftAs {
            term: 0,
            ..follower
        }
        .ticks_in_place(0));
        let installing = LeftAs {
            installing: true,
            ..follower
        };
        assert!(!installing.ticks_in_place(0));
        // A leader ticks away (heartbeats) short of its quorum check.
        let leader = LeftAs {
            term: 4,
            leader_id: 1,
            is_leader: true,
            election_elapsed: 0,
            election_timeout: 10,
            ..LeftAs::default()
        };
        assert!(leader.ticks_in_place(0));
        assert!(leader.ticks_in_place(8));
        assert!(!leader.ticks_in_place(9));
        // While it hands its leadership over, a tick may abandon that.
        let handing_over = LeftAs {
            transferring: true,
            ..leader
        };
        assert!(!handing_over.ticks_in_place(0));
    }

    type Held = Arc<Mutex<Vec<VecDeque<Box<dyn FnOnce() + Send>>>>>;

    /// Threads that run nothing until the test says so.
    struct HeldThreads(Held);

    impl PartitionThreads for HeldThreads {
        fn send(&self, partition: usize, job: Box<dyn FnOnce() + Send>) {
            self.0.lock().unwrap()[partition].push_back(job);
        }

        fn finish(&self, partition: usize) {
            run_held(&self.0, partition);
        }
    }

    fn run_held(held: &Held, partition: usize) {
        let jobs: Vec<_> = held.lock().unwrap()[partition].drain(..).collect();
        for job in jobs {
            job();
        }
    }

    fn engine_of_two() -> (Engine, Held) {
        let config = EngineConfig {
            partitions: 2,
            reconfig_enabled: false,
            ..crate::engine::tests::config()
        };
        let recovered = vec![Recovered::empty(), Recovered::empty()];
        let mut engine = Engine::new(config, recovered, 1_700_000_000_000).unwrap();
        // The jobs count on it (`job`).
        assert_eq!(engine.cores[1].shippable_idle_ticks, 0);
        let held: Held = Arc::new(Mutex::new(vec![VecDeque::new(), VecDeque::new()]));
        engine.cores.own(Box::new(HeldThreads(held.clone())));
        (engine, held)
    }

    /// A job that says which it was (as its error count) and checks it ran
    /// after every job sent before it to the same core.
    fn job(number: u64) -> impl FnOnce(&mut super::PartitionCore) -> AwayDone + Send {
        move |core| {
            assert_eq!(
                core.shippable_idle_ticks, number as u32,
                "jobs out of order"
            );
            core.shippable_idle_ticks += 1;
            AwayDone {
                errors: number,
                ..AwayDone::nothing(1)
            }
        }
    }

    fn absorbed(engine: &mut Engine) -> Vec<u64> {
        std::iter::from_fn(|| engine.cores.next_done())
            .map(|done| done.errors)
            .collect()
    }

    #[test]
    fn jobs_sent_after_a_core_away_run_on_its_thread_before_it_comes_back() {
        let (mut engine, held) = engine_of_two();
        engine.cores.send_away(1, job(0));
        engine.cores.send_away(1, job(1));
        engine.cores.send_away(1, job(2));
        assert!(!engine.cores.is_home(1));
        assert_eq!(absorbed(&mut engine), Vec::<u64>::new());
        run_held(&held, 1);
        assert_eq!(absorbed(&mut engine), vec![0, 1, 2]);
        assert!(engine.cores.is_home(1));
        let counts = engine.cores.counts();
        assert_eq!(
            (counts.sent, counts.followed, counts.followed_late),
            (1, 2, 0)
        );
        assert_eq!((counts.recalled, counts.waited), (0, 0));
        assert_eq!(engine.cores[1].shippable_idle_ticks, 3);
    }

    #[test]
    fn a_job_its_thread_no_longer_looked_for_runs_as_the_core_lands() {
        let (mut engine, held) = engine_of_two();
        engine.cores.send_away(1, job(0));
        // The thread finishes and sends the core back; the next job was
        // sent after its last look.
        run_held(&held, 1);
        engine.cores.follow(1, job(1));
        engine.cores.follow(1, job(2));
        assert_eq!(absorbed(&mut engine), vec![0, 1, 2]);
        assert_eq!(engine.cores.counts().followed_late, 2);
        assert_eq!(engine.cores[1].shippable_idle_ticks, 3);
        // The same, found by a recall: the core is as every job left it
        // before the engine touches it.
        engine.cores.send_away(1, job(3));
        run_held(&held, 1);
        engine.cores.follow(1, job(4));
        assert_eq!(engine.cores[1].shippable_idle_ticks, 5);
        assert_eq!(absorbed(&mut engine), vec![3, 4]);
        let counts = engine.cores.counts();
        assert_eq!((counts.recalled, counts.waited), (1, 0));
    }

    #[test]
    fn a_core_that_came_back_unnoticed_is_sent_again_not_followed() {
        let (mut engine, held) = engine_of_two();
        engine.cores.send_away(1, job(0));
        run_held(&held, 1);
        engine.cores.send_away(1, job(1));
        assert_eq!(engine.cores.counts().followed, 0);
        assert_eq!(absorbed(&mut engine), vec![0]);
        // A recall waits for the job held on the thread.
        assert_eq!(engine.cores[1].shippable_idle_ticks, 2);
        assert_eq!(absorbed(&mut engine), vec![1]);
        let counts = engine.cores.counts();
        assert_eq!((counts.sent, counts.recalled, counts.waited), (2, 1, 1));
    }
}
