//! Histories of sessions reading and writing registers, and two checks of
//! them: sequential consistency (one order of every write that every
//! session's reads agree with: ZooKeeper's) and causal consistency (each
//! session alone sees writes in an order that respects causality:
//! AGORA's guarantee across partitions).
//!
//! Each write has its own id (a `multi` is one write of several keys) and
//! each key one order of its writes (every server applies a partition's
//! writes in its log's order), so both checks
//! are cycle searches over a graph of the operations, with these edges:
//! each session's order; a key's writes in order; from the write a read
//! saw to the read; and from a read to the write after the one it saw (it
//! came before that write). With every such edge the history is
//! sequentially consistent if and only if the graph has no cycle. Causal
//! consistency asks the same of each session alone: every edge but the
//! last kind, which only that session's reads keep.

/// A write's id; 0 is a key's value before any write.
pub type WriteId = u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// One write of every key in `keys`, atomically.
    Write {
        keys: Vec<usize>,
        id: WriteId,
    },
    Read {
        key: usize,
        saw: WriteId,
    },
}

#[derive(Debug, Clone, Default)]
pub struct History {
    /// Each session's operations, in the order it made them.
    pub sessions: Vec<Vec<Op>>,
    /// Each key's writes, in the order every server applies them.
    pub versions: Vec<Vec<WriteId>>,
}

/// The operations around a cycle, as "session#index op".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle(pub Vec<String>);

impl History {
    /// One order of every write that every read agrees with.
    pub fn sequentially_consistent(&self) -> Result<(), Cycle> {
        Graph::build(self, |_| true).cycle().map_or(Ok(()), Err)
    }

    /// For every session, an order of every write that its own reads agree
    /// with and that respects what any session saw before it wrote. The
    /// error names the first session that has none.
    pub fn causally_consistent(&self) -> Result<(), (usize, Cycle)> {
        for session in 0..self.sessions.len() {
            let graph = Graph::build(self, |s| s == session);
            if let Some(cycle) = graph.cycle() {
                return Err((session, cycle));
            }
        }
        Ok(())
    }
}

struct Graph<'h> {
    history: &'h History,
    /// The first node of each session; a node is one operation.
    starts: Vec<usize>,
    edges: Vec<Vec<usize>>,
}

impl<'h> Graph<'h> {
    /// The graph of `history`, keeping the edge from a read to the write
    /// after the one it saw for the sessions `keeps_reads` names.
    fn build(history: &'h History, keeps_reads: impl Fn(usize) -> bool) -> Self {
        let mut starts = Vec::with_capacity(history.sessions.len());
        let mut total = 0;
        for ops in &history.sessions {
            starts.push(total);
            total += ops.len();
        }
        let mut node_of_write = std::collections::HashMap::new();
        for (session, ops) in history.sessions.iter().enumerate() {
            for (index, op) in ops.iter().enumerate() {
                if let Op::Write { id, .. } = *op {
                    assert!(id != 0, "write id 0 is the initial value");
                    let twice = node_of_write.insert(id, starts[session] + index);
                    assert!(twice.is_none(), "write {id} made twice");
                }
            }
        }
        // Where each write stands in its key's order.
        let mut position = std::collections::HashMap::new();
        for (key, writes) in history.versions.iter().enumerate() {
            for (at, &id) in writes.iter().enumerate() {
                position.insert((key, id), at);
            }
        }
        let mut edges = vec![Vec::new(); total];
        for writes in &history.versions {
            for pair in writes.windows(2) {
                edges[node_of_write[&pair[0]]].push(node_of_write[&pair[1]]);
            }
        }
        for (session, ops) in history.sessions.iter().enumerate() {
            for (index, op) in ops.iter().enumerate() {
                let node = starts[session] + index;
                if index + 1 < ops.len() {
                    edges[node].push(node + 1);
                }
                let Op::Read { key, saw } = *op else { continue };
                let next = if saw == 0 {
                    0
                } else {
                    let at = (position.get(&(key, saw)))
                        .unwrap_or_else(|| panic!("read of {key} saw {saw}, not a write of it"));
                    edges[node_of_write[&saw]].push(node);
                    at + 1
                };
                if keeps_reads(session) {
                    if let Some(overwrite) = history.versions[key].get(next) {
                        edges[node].push(node_of_write[overwrite]);
                    }
                }
            }
        }
        Graph {
            history,
            starts,
            edges,
        }
    }

    /// A cycle, if there is one: a depth-first search that keeps its
    /// path, without recursion (histories run to thousands of nodes).
    fn cycle(&self) -> Option<Cycle> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            OnPath,
            Done,
        }
        let mut marks = vec![Mark::New; self.edges.len()];
        for root in 0..self.edges.len() {
            if marks[root] != Mark::New {
                continue;
            }
            let mut path: Vec<(usize, usize)> = vec![(root, 0)];
            marks[root] = Mark::OnPath;
            while let Some(&mut (node, ref mut next)) = path.last_mut() {
                let Some(&to) = self.edges[node].get(*next) else {
                    marks[node] = Mark::Done;
                    path.pop();
                    continue;
                };
                *next += 1;
                match marks[to] {
                    Mark::New => {
                        marks[to] = Mark::OnPath;
                        path.push((to, 0));
                    }
                    Mark::OnPath => {
                        let from = path.iter().position(|&(n, _)| n == to).unwrap();
                        let nodes = path[from..].iter().map(|&(n, _)| self.describe(n));
                        return Some(Cycle(nodes.collect()));
                    }
                    Mark::Done => {}
                }
            }
        }
        None
    }

    fn describe(&self, node: usize) -> String {
        let session = self.starts.partition_point(|&start| start <= node) - 1;
        let index = node - self.starts[session];
        let op = match self.history.sessions[session][index] {
            Op::Write { ref keys, id } => format!("write {keys:?}={id}"),
            Op::Read { key, saw } => format!("read k{key} saw {saw}"),
        };
        format!("s{session}#{index} {op}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(key: usize, id: WriteId) -> Op {
        Op::Write {
            keys: vec![key],
            id,
        }
    }
    fn r(key: usize, saw: WriteId) -> Op {
        Op::Read { key, saw }
    }

    #[test]
    fn a_serial_history_passes_both() {
        let history = History {
            sessions: vec![vec![w(0, 1), r(1, 0), w(1, 2)], vec![r(1, 2), r(0, 1)]],
            versions: vec![vec![1], vec![2]],
        };
        assert_eq!(history.sequentially_consistent(), Ok(()));
        assert_eq!(history.causally_consistent(), Ok(()));
    }

    #[test]
    fn independent_reads_of_independent_writes_in_opposite_orders_are_causal_only() {
        let history = History {
            sessions: vec![
                vec![w(0, 1)],
                vec![w(1, 2)],
                vec![r(0, 1), r(1, 0)],
                vec![r(1, 2), r(0, 0)],
            ],
            versions: vec![vec![1], vec![2]],
        };
        let cycle = history.sequentially_consistent().unwrap_err();
        assert_eq!(cycle.0.len(), 6, "{cycle:?}");
        assert_eq!(history.causally_consistent(), Ok(()));
    }

    #[test]
    fn a_read_that_goes_back_is_neither() {
        let history = History {
            sessions: vec![vec![w(0, 1), w(0, 2)], vec![r(0, 2), r(0, 1)]],
            versions: vec![vec![1, 2]],
        };
        assert!(history.sequentially_consistent().is_err());
        let (session, _) = history.causally_consistent().unwrap_err();
        assert_eq!(session, 1);
    }

    #[test]
    fn a_ready_node_seen_before_its_data_is_neither() {
        // Session 0 writes the data, then the ready node; session 1 sees
        // the ready node and then the data's old value.
        let history = History {
            sessions: vec![vec![w(0, 1), w(1, 2)], vec![r(1, 2), r(0, 0)]],
            versions: vec![vec![1], vec![2]],
        };
        assert!(history.sequentially_consistent().is_err());
        assert_eq!(history.causally_consistent().unwrap_err().0, 1);
    }

    #[test]
    fn half_a_multi_seen_is_neither() {
        let multi = Op::Write {
            keys: vec![0, 1],
            id: 1,
        };
        let torn = History {
            sessions: vec![vec![multi.clone()], vec![r(0, 1), r(1, 0)]],
            versions: vec![vec![1], vec![1]],
        };
        assert!(torn.sequentially_consistent().is_err());
        assert!(torn.causally_consistent().is_err());
        let whole = History {
            sessions: vec![vec![multi], vec![r(1, 0), r(0, 1), r(1, 1)]],
            versions: vec![vec![1], vec![1]],
        };
        assert_eq!(whole.sequentially_consistent(), Ok(()));
    }

    #[test]
    fn reading_ones_own_write_back_is_required() {
        let history = History {
            sessions: vec![vec![w(0, 1), r(0, 0)]],
            versions: vec![vec![1]],
        };
        assert!(history.sequentially_consistent().is_err());
        assert!(history.causally_consistent().is_err());
    }
}
