//! The engine's side of cores away on their partitions' threads
//! (`engine/cores.rs`): sending them, and absorbing what they bring back.

use super::cores::PartitionThreads;
use super::Engine;

impl Engine {
    /// From now on, at the end of each turn, each partition's share of the
    /// turn's writes is prepared on `threads`' thread for that partition,
    /// which owns its core until the engine takes it back. A server of
    /// one partition keeps its core (it prepares each write on arrival).
    pub fn own_partitions(&mut self, threads: Box<dyn PartitionThreads>) {
        if self.cores.len() > 1 {
            self.cores.own(threads);
        }
    }

    /// Takes back the cores whose threads have finished, and what they did
    /// (the host calls it when a partition's thread says it finished; every
    /// input does it too). Then `take_output` has their messages, persist
    /// jobs and replies. False if nothing had come back that an input had
    /// not already taken, or a batch of reads in flight is not all back:
    /// there is nothing new to output yet.
    pub fn take_returned(&mut self) -> bool {
        // Reads in flight land once all their shares are back: a share
        // back before the others waits for them rather than the engine.
        if !self.reads_back() {
            return false;
        }
        self.absorb_away()
    }

    /// What cores brought back, in order: each ready taken apart away is
    /// absorbed as if taken here (`Engine::absorb_ready`), so its messages
    /// go out and its persist job is queued before any later ready of its
    /// group.
    pub(super) fn absorb_away(&mut self) -> bool {
        // A share of reads in flight comes back among the rest: the batch
        // is answered first.
        self.land_reads();
        let mut any = false;
        while let Some(done) = self.cores.next_done() {
            any = true;
            debug_assert!(done.reads.is_empty(), "served reads absorbed unanswered");
            if done.taken.is_some() || done.applied.is_some() {
                // What it brings may apply: the reads batched meanwhile
                // were taken against the trees as they are now.
                self.serve_read_batch(true);
            }
            self.stats.request_errors += done.errors;
            self.absorb_heard(done.heard);
            if let Some(taken) = done.taken {
                self.absorb_ready(done.partition, taken);
                self.note_leader();
            }
            if let Some(applied) = done.applied {
                self.absorb_applied(done.partition, applied);
            }
        }
        any
    }
}

#[cfg(test)]
impl Engine {
    /// For the simulators: every partition's thread finishes what it was
    /// sent and the host hears of it (`take_returned`). True if a core was
    /// away or had brought back what the engine had not yet absorbed.
    pub(crate) fn threads_finish(&mut self) -> bool {
        let away = self.cores.finish_all();
        self.absorb_away() || away
    }
}
