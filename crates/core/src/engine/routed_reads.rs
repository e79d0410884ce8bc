//! Reads that need more than their path's partition (docs/partitions.md,
//! "Routing by placement"): what is kept per partition and asked of the
//! whole tree (a session's ephemerals, the count of descendants of a path
//! holding group roots, a multiRead over several groups), and watches set
//! on a path whose subtree holds group roots (setWatches after a
//! reconnect, a recursive addWatch, their removal).

use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::AddWatchMode;
use stoa_proto::records::{
    GetAllChildrenNumberResponse, GetDataRequest, GetEphemeralsResponse, SetWatches, SetWatches2,
};
use stoa_proto::request::Request;
use stoa_proto::response::Response;

use super::handoff::{ReadCall, ReadOutcome};
use super::Engine;

/// The placement's own node, which no client's count includes.
fn is_placement_node(path: &str) -> bool {
    path == stoa_tree::PARTITIONS
}

impl Engine {
    /// Runs a read on the partitions it needs and answers as one.
    pub(super) fn read_routed(&mut self, call: ReadCall) -> ReadOutcome {
        if self.cores.len() == 1 {
            return self.cores[0].read(call);
        }
        match &call.request {
            Request::GetEphemerals(_) => self.read_ephemerals(call),
            Request::GetAllChildrenNumber(r) if self.partitions_under(&r.path).len() > 1 => {
                self.read_children_number(call)
            }
            Request::MultiRead(ops) if self.multi_read_partitions(ops).len() > 1 => {
                self.read_multi_across(call)
            }
            Request::SetWatches(w) => {
                let w = w.clone();
                self.set_watches_across(call, |keep| {
                    Request::SetWatches(SetWatches {
                        relative_zxid: w.relative_zxid,
                        data_watches: keep(&w.data_watches),
                        exist_watches: keep(&w.exist_watches),
                        child_watches: keep(&w.child_watches),
                    })
                })
            }
            Request::SetWatches2(w) => {
                let w = w.clone();
                self.set_watches_across(call, |keep| {
                    Request::SetWatches2(SetWatches2 {
                        relative_zxid: w.relative_zxid,
                        data_watches: keep(&w.data_watches),
                        exist_watches: keep(&w.exist_watches),
                        child_watches: keep(&w.child_watches),
                        persistent_watches: keep(&w.persistent_watches),
                        persistent_recursive_watches: keep(&w.persistent_recursive_watches),
                    })
                })
            }
            Request::AddWatch(r)
                if r.mode == AddWatchMode::PersistentRecursive as i32
                    && self.partitions_under(&r.path).len() > 1 =>
            {
                let partitions = self.partitions_under(&r.path);
                self.read_on_each(call, &partitions, |outcomes| outcomes.swap_remove(0))
            }
            request @ (Request::RemoveWatches(_) | Request::CheckWatches(_))
                if self.partitions_under(request.path().unwrap_or("/")).len() > 1 =>
            {
                let partitions = self.partitions_under(request.path().unwrap_or("/"));
                // Found on any partition is found.
                self.read_on_each(call, &partitions, |outcomes| {
                    let at = (outcomes.iter())
                        .position(|o| o.result.is_ok())
                        .unwrap_or(0);
                    outcomes.swap_remove(at)
                })
            }
            request => {
                let partition = self.read_partition(request);
                self.cores[partition].read(call)
            }
        }
    }

    /// The partition of `path` and every partition holding a group root
    /// below it.
    pub(super) fn partitions_under(&self, path: &str) -> Vec<usize> {
        let mut partitions = vec![self.partition_of(path)];
        let below = |root: &str| root != path && stoa_tree::within(root, path);
        for (root, partition) in self.placement.groups() {
            let partition = partition as usize;
            if below(root) && !partitions.contains(&partition) {
                partitions.push(partition);
            }
        }
        partitions
    }

    fn multi_read_partitions(&self, ops: &[Request]) -> Vec<usize> {
        let mut partitions: Vec<usize> = ops.iter().map(|op| self.read_partition(op)).collect();
        partitions.sort_unstable();
        partitions.dedup();
        partitions
    }

    /// Runs `call` on each of `partitions` (the first is the path's own)
    /// and picks the answer; events fired anywhere are kept.
    fn read_on_each(
        &mut self,
        call: ReadCall,
        partitions: &[usize],
        pick: impl FnOnce(&mut Vec<ReadOutcome>) -> ReadOutcome,
    ) -> ReadOutcome {
        let mut outcomes: Vec<ReadOutcome> = (partitions.iter())
            .map(|&p| self.cores[p].read(call.clone()))
            .collect();
        let fired = outcomes
            .iter_mut()
            .flat_map(|o| o.fired.drain(..))
            .collect();
        let mut picked = pick(&mut outcomes);
        picked.fired = fired;
        picked
    }

    /// A session's ephemerals on every partition (a group root's link is
    /// its parent partition's copy, not counted).
    fn read_ephemerals(&mut self, call: ReadCall) -> ReadOutcome {
        let mut ephemerals = Vec::new();
        for p in 0..self.cores.len() {
            let outcome = self.cores[p].read(call.clone());
            match outcome.result {
                Ok(Response::GetEphemerals(r)) => ephemerals
                    .extend((r.ephemerals.into_iter()).filter(|path| self.partition_of(path) == p)),
                _ => return outcome,
            }
        }
        ephemerals.sort_unstable();
        ReadOutcome {
            zxid: 0,
            result: Ok(Response::GetEphemerals(GetEphemeralsResponse {
                ephemerals,
            })),
            fired: Vec::new(),
        }
    }

    /// The nodes below the path, each counted on the partition that
    /// serves it: a partition's tree also holds links to group roots and
    /// stubs above nested ones, which it does not serve. Walks the
    /// subtrees, as ZooKeeper's count does. The node's own partition
    /// first refuses what getData would (a bad path, no node, no READ
    /// permission): the same checks as the count's, without its walk.
    fn read_children_number(&mut self, call: ReadCall) -> ReadOutcome {
        let Request::GetAllChildrenNumber(r) = &call.request else {
            unreachable!("routed here for getAllChildrenNumber")
        };
        let path = r.path.clone();
        let own = self.partition_of(&path);
        let check = ReadCall {
            request: Request::GetData(GetDataRequest {
                path: path.clone(),
                watch: false,
            }),
            ..call
        };
        let outcome = self.cores[own].read(check);
        if outcome.result.is_err() {
            return outcome;
        }
        let partitions = self.cores.len();
        let mut total = 0usize;
        for partition in self.partitions_under(&path) {
            let placement = &self.placement;
            (self.cores[partition].tree).walk_below(&path, |at, _| {
                let served = super::routing::partition_holding(placement, partitions, at);
                total += usize::from(served == partition && !is_placement_node(at));
            });
        }
        ReadOutcome {
            zxid: 0,
            result: Ok(Response::GetAllChildrenNumber(
                GetAllChildrenNumberResponse {
                    total_number: total as i32,
                },
            )),
            fired: Vec::new(),
        }
    }

    /// A multiRead over several groups: each op on its path's partition,
    /// the results in the ops' order.
    fn read_multi_across(&mut self, call: ReadCall) -> ReadOutcome {
        let Request::MultiRead(ops) = &call.request else {
            unreachable!("routed here for multiRead")
        };
        let mut results = Vec::with_capacity(ops.len());
        for op in ops.clone() {
            let partition = self.read_partition(&op);
            let one = ReadCall {
                request: Request::MultiRead(vec![op]),
                ..call.clone()
            };
            let outcome = self.cores[partition].read(one);
            match outcome.result {
                Ok(Response::Multi(mut one)) if one.len() == 1 => results.push(one.remove(0)),
                Ok(_) => {
                    return ReadOutcome {
                        result: Err(ErrorCode::MarshallingError),
                        ..outcome
                    }
                }
                Err(_) => return outcome,
            }
        }
        ReadOutcome {
            zxid: 0,
            result: Ok(Response::Multi(results)),
            fired: Vec::new(),
        }
    }

    /// setWatches: each partition restores the watches on its own paths
    /// (and fires what its tree changed since `relative_zxid`).
    fn set_watches_across(
        &mut self,
        call: ReadCall,
        subset: impl Fn(&dyn Fn(&[String]) -> Vec<String>) -> Request,
    ) -> ReadOutcome {
        let mut fired = Vec::new();
        for p in 0..self.cores.len() {
            let keep = |paths: &[String]| -> Vec<String> {
                (paths.iter())
                    .filter(|path| self.partition_of(path) == p)
                    .cloned()
                    .collect()
            };
            let request = subset(&keep);
            let outcome = self.cores[p].read(ReadCall {
                request,
                ..call.clone()
            });
            fired.extend(outcome.fired);
        }
        ReadOutcome {
            zxid: 0,
            result: Ok(Response::Empty),
            fired,
        }
    }
}
