//! Session extensions, and the writes extensions make outside a client's
//! call (a session's start or end, a dead holder's release). A session
//! extension belongs to no path: it sees the whole server as a client
//! would, each path read on the partition that holds its node, and its
//! writes go wherever their paths route, as one transaction (a
//! transaction of parts when they span partitions).

use stoa_ext::{TreeView, WriteOp};
use stoa_proto::codes::ErrorCode;
use stoa_proto::records::Stat;
use stoa_proto::request::Request;

use super::extensions::{write_request, View};
use super::routing::partition_holding;
use super::Engine;
use crate::placement::Placement;
use crate::session::SessionId;

/// Every partition's state, each path read on the partition whose tree
/// holds its node: a group root's on its group's, a child list (links to
/// group roots included) and a sequence counter on the parent's. What a
/// client of the server would read.
struct ServerView<'a> {
    trees: Vec<View<'a>>,
    placement: &'a Placement,
}

impl ServerView<'_> {
    fn holding(&self, path: &str) -> &View<'_> {
        &self.trees[partition_holding(self.placement, self.trees.len(), path)]
    }
}

impl TreeView for ServerView<'_> {
    fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ErrorCode> {
        self.holding(path).get_data(path)
    }

    fn exists(&self, path: &str) -> Option<Stat> {
        self.holding(path).exists(path)
    }

    fn get_children(&self, path: &str) -> Result<Vec<String>, ErrorCode> {
        self.holding(path).get_children(path)
    }

    fn children_after(
        &self,
        path: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ErrorCode> {
        self.holding(path).children_after(path, after, limit)
    }

    fn next_sequence(&self, parent: &str) -> Result<i32, ErrorCode> {
        self.holding(parent).next_sequence(parent)
    }
}

impl Engine {
    /// Leader: an extension's writes made outside a client's call, as one
    /// transaction routed as a client's multi would be: on their
    /// partition, or as a transaction of parts over several. A refusal
    /// still takes its zxid, as an error transaction: with several
    /// partitions every member applies the zxids in order, and one handed
    /// out and never proposed would hold everything after it.
    pub(super) fn propose_internal_writes(
        &mut self,
        name: &str,
        sid: SessionId,
        writes: Vec<WriteOp>,
    ) {
        if !self.is_leader() {
            return; // the leader's own extension run makes these writes
        }
        if self.order.is_some() && !self.sealed {
            // A new leader applying its predecessors' entries hands out no
            // zxid before its seal (`Engine::maybe_seal` proposes these).
            self.held_internal_writes
                .push((name.to_string(), sid, writes));
            return;
        }
        let multi = Request::Multi(writes.into_iter().map(write_request).collect());
        let zxid = self.next_zxid();
        let ctx = self.internal_ctx(sid, zxid);
        let route = self.write_route(&multi);
        // Only the server's own placement writes may change the placement
        // (`Engine::prepare_placement_write`): an extension's would route
        // every member by a text no move was made for.
        let prepared = if self.cores.len() > 1 && super::request::touches_placement(&multi) {
            Err(stoa_tree::PrepError::Code(ErrorCode::BadArguments))
        } else {
            self.prepare_routed(&ctx, &multi, route)
        };
        let txn = prepared.unwrap_or_else(|e| {
            log::warn!("extension {name}: writes refused: {e:?}");
            ctx.failed(e)
        });
        self.propose_on(route.home(&txn), txn);
    }

    /// Session extensions at session start and end, on the whole server's
    /// state; their writes commit as transactions of their own.
    pub(super) fn run_session_extensions(&mut self, sid: SessionId, started: bool) {
        if !self.extensions.has_session_extensions() {
            return;
        }
        for partition in 0..self.cores.len() {
            self.prepare_extension_state(partition);
        }
        let view = ServerView {
            trees: (self.cores.iter())
                .map(|core| View(core.current_tree()))
                .collect(),
            placement: &self.placement,
        };
        let results = self
            .extensions
            .manager_mut()
            .session_event(started, sid, &view);
        if !self.extensions.has_node_extensions() {
            self.drop_speculative();
        }
        for (name, result) in results {
            match result {
                Ok(writes) if !writes.is_empty() => {
                    let owner = if started { sid } else { 0 };
                    self.propose_internal_writes(&name, owner, writes);
                }
                Ok(_) => {}
                Err(e) => log::warn!("session extension {name} failed: {e}"),
            }
        }
    }
}
