//! ZooNet's Algorithm 1 as a pure state machine: it decides, call by call,
//! whether a call goes to its ensemble now (and whether a sync goes first)
//! or waits. The async shell in `compose` only carries out its decisions.
//!
//! The rules, for calls in the order the client made them:
//! - A call to the current target goes out at once, unless calls are
//!   already held (it then waits behind them: calls go out in order).
//! - A call to another ensemble waits until every call to the current
//!   target has completed; it then becomes the current target. If that call
//!   is a read, a sync goes to the new target right before it, so the read
//!   cannot see a state older than what the client saw elsewhere. If it is
//!   an update, the update itself is that point: later reads on the same
//!   session are ordered after it.
//! - Held calls leave in order, one at a time, each under the same rules.

use std::collections::VecDeque;

/// Index of a mount in the mount table.
pub(crate) type MountId = usize;

/// Identifies a held call.
pub(crate) type Ticket = u64;

/// What a call does to its ensemble's state, as Algorithm 1 sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Update,
}

/// A decision to send a call now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dispatch {
    pub(crate) mount: MountId,
    /// Send the mount's sync (or no-op write) right before the call.
    pub(crate) sync_first: bool,
}

impl Dispatch {
    /// Calls this dispatch puts in flight: the injected sync counts too.
    pub(crate) fn in_flight(&self) -> usize {
        1 + usize::from(self.sync_first)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    Go(Dispatch),
    /// Wait until [`Sequencer::next_ready`] names this ticket, then
    /// [`Sequencer::start_held`] it.
    Hold(Ticket),
}

#[derive(Debug)]
struct Held {
    ticket: Ticket,
    mount: MountId,
    access: Access,
    /// `next_ready` has named it; its caller is on the way to start it.
    signalled: bool,
}

/// Counters of what the sequencer decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComposeStats {
    /// Syncs (or no-op writes) sent before a read that switched ensembles.
    pub syncs_injected: u64,
    /// Calls that had to wait before being sent.
    pub calls_held: u64,
    /// Times the target ensemble changed.
    pub switches: u64,
    /// Injected syncs that failed (or whose call was dropped before the
    /// sync's answer); the next read there syncs again.
    pub sync_failures: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Sequencer {
    /// The ensemble the last dispatched call went to (None at first and
    /// after a failed sync, so the next read syncs again).
    current: Option<MountId>,
    /// Calls sent (syncs included) and not yet completed. They all went to
    /// `current`, or to the target before a failed sync reset it.
    outstanding: usize,
    held: VecDeque<Held>,
    next_ticket: Ticket,
    stats: ComposeStats,
}

impl Sequencer {
    pub(crate) fn stats(&self) -> ComposeStats {
        self.stats
    }

    /// Decides a new call.
    pub(crate) fn admit(&mut self, mount: MountId, access: Access) -> Admission {
        if self.held.is_empty() && self.may_go(mount) {
            return Admission::Go(self.dispatch(mount, access));
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.stats.calls_held += 1;
        self.held.push_back(Held {
            ticket,
            mount,
            access,
            signalled: false,
        });
        Admission::Hold(ticket)
    }

    /// A dispatched call (or injected sync) completed, successfully or not.
    pub(crate) fn complete(&mut self) {
        assert!(self.outstanding > 0, "completion without a call in flight");
        self.outstanding -= 1;
    }

    /// The injected sync before a read to `mount` failed: the read may be
    /// stale, so the next read there syncs again.
    pub(crate) fn sync_failed(&mut self, mount: MountId) {
        self.stats.sync_failures += 1;
        if self.current == Some(mount) {
            self.current = None;
        }
    }

    /// The held call that may start now, if any; named once. Its caller
    /// must then `start_held` it (or `cancel` it).
    pub(crate) fn next_ready(&mut self) -> Option<Ticket> {
        let head = self.held.front()?;
        if head.signalled || !self.may_go(head.mount) {
            return None;
        }
        let head = self.held.front_mut()?;
        head.signalled = true;
        Some(head.ticket)
    }

    /// Starts the held call `ticket`, which `next_ready` named.
    pub(crate) fn start_held(&mut self, ticket: Ticket) -> Dispatch {
        let head = self.held.pop_front().expect("start_held with nothing held");
        assert!(
            head.ticket == ticket && head.signalled,
            "held call {ticket} started out of turn (head {})",
            head.ticket
        );
        assert!(self.may_go(head.mount), "held call started too early");
        self.dispatch(head.mount, head.access)
    }

    /// Forgets a held call whose caller gave up on it.
    pub(crate) fn cancel(&mut self, ticket: Ticket) {
        self.held.retain(|held| held.ticket != ticket);
    }

    fn may_go(&self, mount: MountId) -> bool {
        self.current == Some(mount) || self.outstanding == 0
    }

    fn dispatch(&mut self, mount: MountId, access: Access) -> Dispatch {
        debug_assert!(self.may_go(mount));
        let switching = self.current != Some(mount);
        if switching {
            self.current = Some(mount);
            self.stats.switches += 1;
        }
        let dispatch = Dispatch {
            mount,
            sync_first: switching && access == Access::Read,
        };
        self.stats.syncs_injected += u64::from(dispatch.sync_first);
        self.outstanding += dispatch.in_flight();
        dispatch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: MountId = 0;
    const B: MountId = 1;
    use Access::{Read, Update};

    fn go(mount: MountId, sync_first: bool) -> Admission {
        Admission::Go(Dispatch { mount, sync_first })
    }

    #[test]
    fn a_read_that_switches_ensembles_gets_a_sync_and_an_update_does_not() {
        let mut seq = Sequencer::default();
        assert_eq!(seq.admit(A, Read), go(A, true));
        for _ in 0..2 {
            seq.complete();
        }
        assert_eq!(seq.admit(A, Read), go(A, false));
        seq.complete();
        assert_eq!(seq.admit(B, Update), go(B, false));
        seq.complete();
        assert_eq!(seq.admit(B, Read), go(B, false));
        seq.complete();
        assert_eq!(seq.admit(A, Read), go(A, true));
        assert_eq!(
            seq.stats(),
            ComposeStats {
                syncs_injected: 2,
                calls_held: 0,
                switches: 3,
                sync_failures: 0,
            }
        );
    }

    #[test]
    fn calls_to_another_ensemble_wait_for_the_current_one_and_leave_in_order() {
        let mut seq = Sequencer::default();
        assert_eq!(seq.admit(A, Update), go(A, false));
        assert_eq!(seq.admit(A, Update), go(A, false));
        let first = seq.admit(B, Read);
        let Admission::Hold(first) = first else {
            panic!("{first:?}")
        };
        // Behind a held call, even the current target waits.
        let Admission::Hold(second) = seq.admit(A, Read) else {
            panic!()
        };
        assert_eq!(seq.next_ready(), None);
        seq.complete();
        assert_eq!(seq.next_ready(), None);
        seq.complete();
        assert_eq!(seq.next_ready(), Some(first));
        assert_eq!(seq.next_ready(), None, "named once");
        // New calls still queue behind the signalled head.
        assert!(matches!(seq.admit(B, Read), Admission::Hold(_)));
        assert_eq!(
            seq.start_held(first),
            Dispatch {
                mount: B,
                sync_first: true
            }
        );
        assert_eq!(seq.next_ready(), None, "A waits for B's sync and read");
        seq.complete();
        seq.complete();
        assert_eq!(seq.next_ready(), Some(second));
        assert_eq!(
            seq.start_held(second),
            Dispatch {
                mount: A,
                sync_first: true
            }
        );
        assert_eq!(seq.stats().calls_held, 3);
    }

    #[test]
    fn a_cancelled_head_lets_the_next_call_go() {
        let mut seq = Sequencer::default();
        assert_eq!(seq.admit(A, Update), go(A, false));
        let Admission::Hold(b) = seq.admit(B, Update) else {
            panic!()
        };
        let Admission::Hold(a) = seq.admit(A, Update) else {
            panic!()
        };
        seq.cancel(b);
        assert_eq!(seq.next_ready(), Some(a));
        assert_eq!(
            seq.start_held(a),
            Dispatch {
                mount: A,
                sync_first: false
            }
        );
    }

    #[test]
    fn a_failed_sync_makes_the_next_read_sync_again() {
        let mut seq = Sequencer::default();
        assert_eq!(seq.admit(A, Read), go(A, true));
        seq.sync_failed(A);
        seq.complete();
        seq.complete();
        assert_eq!(seq.admit(A, Read), go(A, true));
    }

    /// Every sequence of up to 7 events (a new call to A or B, read or
    /// update; completing the oldest call in flight; starting the ready
    /// head) against a model: calls leave in the order made, a call never
    /// leaves while a call to another ensemble is in flight, and a sync
    /// precedes exactly the reads that switch ensembles.
    #[test]
    fn exhaustively_matches_algorithm_1() {
        #[derive(Clone, Copy, Debug)]
        enum Event {
            Call(MountId, Access),
            CompleteOldest,
            StartReady,
        }
        let events = [
            Event::Call(A, Read),
            Event::Call(A, Update),
            Event::Call(B, Read),
            Event::Call(B, Update),
            Event::CompleteOldest,
            Event::StartReady,
        ];
        let mut checked = 0;
        let mut stack: Vec<Vec<Event>> = vec![vec![]];
        while let Some(history) = stack.pop() {
            check_history(&history);
            checked += 1;
            if history.len() < 7 {
                for event in events {
                    let mut longer = history.clone();
                    longer.push(event);
                    stack.push(longer);
                }
            }
        }
        assert!(checked > 300_000, "{checked}");

        /// What Algorithm 1 allows, tracked independently of `Sequencer`.
        #[derive(Default)]
        struct Model {
            /// Mounts of the calls (and syncs) in flight, oldest first.
            in_flight: VecDeque<MountId>,
            /// Calls made so far, with their ticket when held.
            made: Vec<(MountId, Access, Option<Ticket>)>,
            /// How many of `made` were sent (a prefix, in order).
            sent: usize,
            last: Option<MountId>,
        }

        impl Model {
            fn send(&mut self, dispatch: Dispatch, index: usize, history: &[Event]) {
                assert_eq!(index, self.sent, "calls leave in the order made");
                let (mount, access, _) = self.made[index];
                assert_eq!(dispatch.mount, mount);
                assert!(
                    self.in_flight.iter().all(|&m| m == mount),
                    "sent while another ensemble has calls in flight: {history:?}"
                );
                let switching = self.last != Some(mount);
                assert_eq!(
                    dispatch.sync_first,
                    switching && access == Read,
                    "{history:?}"
                );
                self.last = Some(mount);
                for _ in 0..dispatch.in_flight() {
                    self.in_flight.push_back(mount);
                }
                self.sent += 1;
            }
        }

        fn check_history(history: &[Event]) {
            let mut seq = Sequencer::default();
            let mut model = Model::default();
            let mut ready: Option<Ticket> = None;
            for &event in history {
                match event {
                    Event::Call(mount, access) => {
                        let index = model.made.len();
                        match seq.admit(mount, access) {
                            Admission::Go(d) => {
                                model.made.push((mount, access, None));
                                model.send(d, index, history);
                            }
                            Admission::Hold(t) => model.made.push((mount, access, Some(t))),
                        }
                    }
                    Event::CompleteOldest => {
                        if model.in_flight.pop_front().is_some() {
                            seq.complete();
                        }
                    }
                    Event::StartReady => {
                        if ready.is_none() {
                            ready = seq.next_ready();
                        }
                        if let Some(ticket) = ready.take() {
                            let index = model
                                .made
                                .iter()
                                .position(|&(_, _, t)| t == Some(ticket))
                                .unwrap();
                            let d = seq.start_held(ticket);
                            model.send(d, index, history);
                        }
                    }
                }
                // Liveness: with nothing in flight, a held head is ready.
                if model.in_flight.is_empty() && ready.is_none() {
                    ready = seq.next_ready();
                    assert_eq!(
                        ready.is_some(),
                        model.sent < model.made.len(),
                        "{history:?}"
                    );
                }
            }
        }
    }
}
