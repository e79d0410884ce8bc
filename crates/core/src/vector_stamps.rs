//! AGORA's vector timestamps (§IV-C2), built to be measured against the one
//! order (issue 23; docs/partitions.md, "Three read rules, compared").
//!
//! Each partition numbers its own writes; a timestamp holds one sequence
//! number per partition. The leader's partition merges the timestamp a
//! write request carries (what its session has seen) into its own and
//! stamps the write with the result and the write's new number. Every
//! server's partition merges the stamps of the writes it applies. A read
//! carrying timestamp `t` waits on partition `p` until `p` has applied
//! `t[p]` writes, and its reply carries the merge of `t` and `p`'s clock.
//! The server keeps each session's timestamp (its client keeps one 64-bit
//! zxid), so pipelined requests get the stamps synchronous ones would.
//!
//! Partitions never wait for each other's writes, only reads wait, and
//! only for the partitions they depend on. What it gives up is the one
//! order: two servers may apply independent writes of two partitions in
//! different orders, and two sessions can see them in different orders.
//! `order_model` finds that (two sessions each reading both keys, in
//! opposite orders) where ZooKeeper's one order cannot show it.
//!
//! Pure: no I/O, no clock.

/// One sequence number per partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorStamp(Vec<u64>);

impl VectorStamp {
    pub fn zero(partitions: usize) -> Self {
        VectorStamp(vec![0; partitions])
    }

    pub fn get(&self, partition: usize) -> u64 {
        self.0[partition]
    }

    /// The element-wise maximum of both.
    pub fn merge(&mut self, other: &VectorStamp) {
        debug_assert_eq!(self.0.len(), other.0.len(), "stamps of one server");
        for (mine, &theirs) in self.0.iter_mut().zip(&other.0) {
            *mine = (*mine).max(theirs);
        }
    }

    /// Every element at least `other`'s.
    pub fn covers(&self, other: &VectorStamp) -> bool {
        self.0
            .iter()
            .zip(&other.0)
            .all(|(mine, theirs)| mine >= theirs)
    }

    /// The one number a standard client keeps: the sum, which never goes
    /// back while the stamp grows. It cannot say which partitions a
    /// session has seen, so a server that receives it on reconnect cannot
    /// rebuild the session's stamp.
    pub fn scalar(&self) -> i64 {
        self.0.iter().sum::<u64>() as i64
    }
}

/// A server's partitions under vector stamps: each partition's clock.
#[derive(Debug, Clone)]
pub struct VectorReplica {
    clocks: Vec<VectorStamp>,
}

impl VectorReplica {
    pub fn new(partitions: usize) -> Self {
        VectorReplica {
            clocks: vec![VectorStamp::zero(partitions); partitions],
        }
    }

    pub fn partitions(&self) -> usize {
        self.clocks.len()
    }

    /// The writes `partition` has applied.
    pub fn applied(&self, partition: usize) -> u64 {
        self.clocks[partition].get(partition)
    }

    /// What `partition` has seen of every partition.
    pub fn clock(&self, partition: usize) -> &VectorStamp {
        &self.clocks[partition]
    }

    /// `partition` applied its next write, stamped `stamp`.
    pub fn apply(&mut self, partition: usize, stamp: &VectorStamp) {
        let next = self.applied(partition) + 1;
        assert_eq!(
            stamp.get(partition),
            next,
            "partition {partition} applied write {} out of turn",
            stamp.get(partition)
        );
        self.clocks[partition].merge(stamp);
    }

    /// A read of `partition` by a session whose stamp is `seen`: the stamp
    /// its reply carries, or None while the partition is behind what the
    /// session saw of it (the read waits).
    pub fn serve(&self, partition: usize, seen: &VectorStamp) -> Option<VectorStamp> {
        (seen.get(partition) <= self.applied(partition)).then(|| {
            let mut reply = seen.clone();
            reply.merge(&self.clocks[partition]);
            reply
        })
    }

    /// The sum of every partition's writes applied here: what a reconnect
    /// can compare a client's scalar with.
    pub fn scalar(&self) -> i64 {
        (0..self.partitions()).map(|p| self.applied(p) as i64).sum()
    }
}

/// The leader's side: each partition numbers its writes and stamps them.
#[derive(Debug, Clone)]
pub struct VectorSequencer {
    clocks: Vec<VectorStamp>,
}

impl VectorSequencer {
    pub fn new(partitions: usize) -> Self {
        VectorSequencer {
            clocks: vec![VectorStamp::zero(partitions); partitions],
        }
    }

    /// The stamp of a write to `partitions` by a session whose stamp is
    /// `seen`: each partition in turn merges the stamp so far into its
    /// clock and numbers the write (§IV-E: a write over several partitions
    /// gets one stamp with a number from each); then each merges the whole
    /// stamp, so that its later writes come after every part of this one.
    pub fn stamp(&mut self, partitions: &[usize], seen: &VectorStamp) -> VectorStamp {
        assert!(!partitions.is_empty(), "a write touches a partition");
        let mut stamp = seen.clone();
        for &partition in partitions {
            let clock = &mut self.clocks[partition];
            clock.merge(&stamp);
            clock.0[partition] += 1;
            stamp = clock.clone();
        }
        for &partition in partitions {
            self.clocks[partition].merge(&stamp);
        }
        stamp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_ready_node_waits_for_its_data() {
        // AGORA's Fig. 4: /data on partition 0, then /ready on partition 1
        // by the same client; a reader sees /ready on a server that has
        // not applied /data yet.
        let mut leader = VectorSequencer::new(2);
        let writer = VectorStamp::zero(2);
        let data = leader.stamp(&[0], &writer);
        assert_eq!(data, VectorStamp(vec![1, 0]));
        let ready = leader.stamp(&[1], &data);
        assert_eq!(ready, VectorStamp(vec![1, 1]));

        let mut server = VectorReplica::new(2);
        server.apply(1, &ready);
        let reader = server.serve(1, &VectorStamp::zero(2)).unwrap();
        assert_eq!(reader, VectorStamp(vec![1, 1]));
        assert_eq!(server.serve(0, &reader), None, "waits for /data");
        server.apply(0, &data);
        assert_eq!(server.serve(0, &reader), Some(VectorStamp(vec![1, 1])));
    }

    #[test]
    fn independent_writes_need_no_wait() {
        let mut leader = VectorSequencer::new(2);
        let a = leader.stamp(&[0], &VectorStamp::zero(2));
        let b = leader.stamp(&[1], &VectorStamp::zero(2));
        let mut server = VectorReplica::new(2);
        server.apply(1, &b);
        let seen = server.serve(1, &VectorStamp::zero(2)).unwrap();
        assert_eq!(seen, VectorStamp(vec![0, 1]));
        assert!(server.serve(0, &seen).is_some(), "b does not depend on a");
        server.apply(0, &a);
        assert!(seen.scalar() < server.scalar());
        assert!(!seen.covers(&a) && !a.covers(&seen));
    }

    #[test]
    fn a_write_over_two_partitions_is_numbered_by_both_and_orders_their_later_writes() {
        let mut leader = VectorSequencer::new(2);
        let zero = VectorStamp::zero(2);
        let multi = leader.stamp(&[1, 0], &zero);
        assert_eq!(multi, VectorStamp(vec![1, 1]));
        // A later write on either partition depends on both parts.
        assert_eq!(leader.stamp(&[1], &zero), VectorStamp(vec![1, 2]));
        assert_eq!(leader.stamp(&[0], &zero), VectorStamp(vec![2, 1]));
    }

    #[test]
    #[should_panic(expected = "out of turn")]
    fn a_partition_applies_its_writes_in_order() {
        let mut leader = VectorSequencer::new(1);
        let zero = VectorStamp::zero(1);
        let _first = leader.stamp(&[0], &zero);
        let second = leader.stamp(&[0], &zero);
        VectorReplica::new(1).apply(0, &second);
    }
}
