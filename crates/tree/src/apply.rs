//! Applying a [`Txn`] to the tree: deterministic, and the only way the
//! committed state changes.

use std::borrow::Cow;

use stoa_proto::codes::ErrorCode;
use stoa_proto::records::Stat;

use crate::node::{client_stat, shared_acl, shared_bytes, Node, PersistedStat};
use crate::path;
use crate::tree::DataTree;
use crate::txn::{CreateTxn, Txn, TxnHeader, TxnOp};

/// The outcome of one (sub-)transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnResult {
    Created {
        path: String,
        stat: Stat,
    },
    Deleted,
    SetData {
        stat: Stat,
    },
    SetAcl {
        stat: Stat,
    },
    Checked,
    /// createSession or closeSession.
    Session,
    Multi(Vec<TxnResult>),
    Error(ErrorCode),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TreeEventKind {
    NodeCreated,
    NodeDeleted,
    NodeDataChanged,
    NodeChildrenChanged,
}

/// A change a watch may fire on, in the order the tree made it. The path
/// is the transaction's own where it can be (all but the ephemerals a
/// session's close finds beyond its list): no copy per write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEvent<'t> {
    pub kind: TreeEventKind,
    pub path: Cow<'t, str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied<'t> {
    pub zxid: i64,
    pub result: TxnResult,
    pub events: Vec<TreeEvent<'t>>,
}

impl Applied<'_> {
    /// The same, owning its paths.
    pub fn into_owned(self) -> Applied<'static> {
        Applied {
            zxid: self.zxid,
            result: self.result,
            events: self
                .events
                .into_iter()
                .map(|e| TreeEvent {
                    kind: e.kind,
                    path: Cow::Owned(e.path.into_owned()),
                })
                .collect(),
        }
    }
}

impl DataTree {
    /// Applies `txn`. Its zxid must exceed every zxid applied before.
    ///
    /// A txn whose precondition does not hold (parent missing, node exists)
    /// yields an error result and changes nothing, as ZooKeeper's
    /// `processTxn` does; replicas stay identical either way.
    pub fn apply<'t>(&mut self, txn: &'t Txn) -> Applied<'t> {
        assert!(
            txn.header.zxid > self.last_zxid,
            "zxid {:#x} not after last applied {:#x}",
            txn.header.zxid,
            self.last_zxid
        );
        let mut events = Vec::new();
        let result = match &txn.op {
            TxnOp::Watched { op, extra, .. } => {
                let result = self.apply_top(&txn.header, op, &mut events);
                if !extra.is_empty() {
                    // Prepared by the leader against the state `op` left.
                    let extra = self.apply_multi(&txn.header, extra, &mut events);
                    debug_assert!(
                        matches!(&extra, TxnResult::Multi(results)
                            if results.iter().all(|r| !matches!(r, TxnResult::Error(_)))),
                        "a watch extension's writes failed: {extra:?}"
                    );
                }
                result
            }
            TxnOp::Restore { tree, .. } => self.restore(tree),
            op => self.apply_top(&txn.header, op, &mut events),
        };
        self.last_zxid = txn.header.zxid;
        // The full O(n) check_invariants runs in the property tests; here
        // only the cheap, local ones (in attach/detach).
        Applied {
            zxid: txn.header.zxid,
            result,
            events,
        }
    }

    /// Becomes the tree `snapshot` holds, keeping this one's configuration
    /// node: the ensemble's membership is its own, whatever ensemble the
    /// snapshot came from. The leader checked the bytes before proposing;
    /// bytes that do not read back change nothing, on every member alike.
    fn restore(&mut self, snapshot: &[u8]) -> TxnResult {
        let mut restored = match crate::read_snapshot(&mut &snapshot[..]) {
            Ok(tree) => tree,
            Err(_) => return TxnResult::Error(ErrorCode::SystemError),
        };
        if let Some(config) = self.node(path::CONFIG) {
            let data = config.data.map(<[u8]>::to_vec);
            restored.keep_config(config.stat, data.as_deref(), config.acl.clone());
        }
        *self = restored;
        TxnResult::Checked
    }

    fn apply_top<'t>(
        &mut self,
        h: &TxnHeader,
        op: &'t TxnOp,
        ev: &mut Vec<TreeEvent<'t>>,
    ) -> TxnResult {
        match op {
            TxnOp::Multi(ops) => self.apply_multi(h, ops, ev),
            op => self.apply_op(h, op, ev),
        }
    }

    fn apply_multi<'t>(
        &mut self,
        h: &TxnHeader,
        ops: &'t [TxnOp],
        ev: &mut Vec<TreeEvent<'t>>,
    ) -> TxnResult {
        if ops.iter().any(|o| matches!(o, TxnOp::Error(_))) {
            // ZooKeeper turns every op into an error: Ok before the first
            // failure, RuntimeInconsistency after it.
            let mut failed = false;
            let results = ops
                .iter()
                .map(|o| match o {
                    TxnOp::Error(code) => {
                        failed = true;
                        TxnResult::Error(*code)
                    }
                    _ if failed => TxnResult::Error(ErrorCode::RuntimeInconsistency),
                    _ => TxnResult::Error(ErrorCode::Ok),
                })
                .collect();
            return TxnResult::Multi(results);
        }
        TxnResult::Multi(ops.iter().map(|o| self.apply_op(h, o, ev)).collect())
    }

    fn set_data<'t>(
        &mut self,
        h: &TxnHeader,
        path: &'t str,
        data: Option<&[u8]>,
        version: i32,
        ev: &mut Vec<TreeEvent<'t>>,
    ) -> TxnResult {
        let change = |s: &mut PersistedStat| {
            s.mtime = h.time_ms;
            s.mzxid = h.zxid;
            s.version = version;
        };
        let Some(updated) = self.update_node(path, &change, Some(data), None) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        let new_len = data.map_or(0, <[u8]>::len);
        self.data_bytes = self.data_bytes - updated.old_data_len as u64 + new_len as u64;
        ev.push(event(TreeEventKind::NodeDataChanged, Cow::Borrowed(path)));
        TxnResult::SetData {
            stat: client_stat(&updated.stat, new_len, updated.child_count),
        }
    }

    fn apply_op<'t>(
        &mut self,
        h: &TxnHeader,
        op: &'t TxnOp,
        ev: &mut Vec<TreeEvent<'t>>,
    ) -> TxnResult {
        match op {
            TxnOp::CreateSession { timeout_ms } => {
                self.sessions.insert_mut(h.session_id, *timeout_ms);
                TxnResult::Session
            }
            TxnOp::CloseSession { paths } => {
                self.close_session(h, paths, ev);
                TxnResult::Session
            }
            TxnOp::Create(c) => self.create(h, c, ev),
            TxnOp::Delete { path } | TxnOp::DeleteContainer { path } => {
                match self.delete(h.zxid, Cow::Borrowed(path), ev) {
                    Ok(()) => TxnResult::Deleted,
                    Err(code) => TxnResult::Error(code),
                }
            }
            TxnOp::SetData {
                path,
                data,
                version,
            } => self.set_data(h, path, data.as_deref(), *version, ev),
            // The engine moves the groups' subtrees between the trees; this
            // one (partition 0's) records where they went.
            TxnOp::MoveGroups { data, version, .. } => {
                self.set_data(h, path::PARTITIONS, Some(data), *version, ev)
            }
            TxnOp::SetAcl {
                path,
                acl,
                aversion,
            } => {
                let change = |s: &mut PersistedStat| s.aversion = *aversion;
                let acl = shared_acl(acl);
                let Some(updated) = self.update_node(path, &change, None, Some(&acl)) else {
                    return TxnResult::Error(ErrorCode::NoNode);
                };
                TxnResult::SetAcl {
                    stat: client_stat(&updated.stat, updated.old_data_len, updated.child_count),
                }
            }
            TxnOp::Check { .. } => TxnResult::Checked,
            TxnOp::Error(code) => TxnResult::Error(*code),
            TxnOp::Seal { .. } => TxnResult::Error(ErrorCode::Ok),
            TxnOp::Restore { .. } => panic!("a restore reached apply inside another op"),
            // Decoding and preparing never nest multis or watched ops.
            TxnOp::Multi(_) => panic!("nested multi reached apply"),
            TxnOp::Watched { .. } => panic!("nested watched op reached apply"),
            // Each part is applied to its own partition's tree.
            TxnOp::Parts { .. } => panic!("a transaction of parts reached one tree whole"),
        }
    }

    /// `DataTree.createNode`.
    fn create<'t>(
        &mut self,
        h: &TxnHeader,
        c: &'t CreateTxn,
        ev: &mut Vec<TreeEvent<'t>>,
    ) -> TxnResult {
        let Some(parent_path) = path::parent_of(&c.path).map(path::canonical) else {
            return TxnResult::Error(ErrorCode::BadArguments);
        };
        let name = path::name_of(&c.path);
        let Some(parent) = self.node(parent_path) else {
            return TxnResult::Error(ErrorCode::NoNode);
        };
        if parent.child(name).is_some() || c.path == path::ROOT {
            return TxnResult::Error(ErrorCode::NodeExists);
        }
        // Children usually carry their parent's ACL: share it.
        let acl = if parent.acl() == c.acl.as_slice() {
            parent.acl.clone()
        } else {
            shared_acl(&c.acl)
        };
        let parent_cversion = parent.stat.cversion;
        let stat = PersistedStat::created(h.zxid, h.time_ms, c.ephemeral_owner);
        let node = Node::new(shared_bytes(c.data.as_deref()), acl, stat);
        let client_stat = node.as_ref().stat();
        self.attach(&c.path, node);
        if c.parent_cversion > parent_cversion {
            let change = |s: &mut PersistedStat| {
                s.cversion = c.parent_cversion;
                s.pzxid = h.zxid;
            };
            self.update_node(parent_path, &change, None, None)
                .expect("the parent is there");
        }
        ev.push(event(TreeEventKind::NodeCreated, Cow::Borrowed(&c.path)));
        ev.push(event(
            TreeEventKind::NodeChildrenChanged,
            Cow::Borrowed(parent_path),
        ));
        TxnResult::Created {
            path: c.path.clone(),
            stat: client_stat,
        }
    }

    /// `DataTree.deleteNode`; refuses to orphan children.
    fn delete<'t>(
        &mut self,
        zxid: i64,
        p: Cow<'t, str>,
        ev: &mut Vec<TreeEvent<'t>>,
    ) -> Result<(), ErrorCode> {
        let parent_path: Cow<'t, str> = match &p {
            Cow::Borrowed(p) => Cow::Borrowed(
                path::parent_of(p)
                    .map(path::canonical)
                    .ok_or(ErrorCode::BadArguments)?,
            ),
            Cow::Owned(p) => Cow::Owned(
                path::parent_of(p)
                    .map(path::canonical)
                    .ok_or(ErrorCode::BadArguments)?
                    .to_owned(),
            ),
        };
        match self.node(&p) {
            None => return Err(ErrorCode::NoNode),
            Some(n) if n.child_count() > 0 || p == path::ROOT => return Err(ErrorCode::NotEmpty),
            Some(_) => {}
        }
        self.detach(&p, Some(zxid));
        ev.push(event(TreeEventKind::NodeDeleted, p));
        ev.push(event(TreeEventKind::NodeChildrenChanged, parent_path));
        Ok(())
    }

    /// `DataTree.killSession`: the listed paths first, then any ephemeral
    /// of the session the list missed.
    fn close_session<'t>(
        &mut self,
        h: &TxnHeader,
        paths: &'t [String],
        ev: &mut Vec<TreeEvent<'t>>,
    ) {
        for p in paths {
            // A listed path may be gone or reused; ZooKeeper ignores NoNode.
            let _ = self.delete(h.zxid, Cow::Borrowed(p), ev);
        }
        let rest: Vec<String> = self.ephemerals(h.session_id).map(str::to_owned).collect();
        for p in rest {
            let _ = self.delete(h.zxid, Cow::Owned(p), ev);
        }
        self.sessions.remove_mut(&h.session_id);
    }
}

fn event(kind: TreeEventKind, path: Cow<'_, str>) -> TreeEvent<'_> {
    TreeEvent { kind, path }
}

#[cfg(test)]
mod restore_tests {
    use super::*;
    use crate::testutil::{create, set_data, World};
    use crate::txn::TxnHeader;

    fn restore_txn(zxid: i64, snapshot: Vec<u8>) -> Txn {
        Txn {
            header: TxnHeader {
                session_id: 0,
                cxid: 0,
                zxid,
                time_ms: 5_000,
            },
            op: TxnOp::Restore {
                origin: 1,
                token: 1,
                tree: snapshot,
            },
        }
    }

    fn snapshot_of(tree: &DataTree) -> Vec<u8> {
        let mut bytes = Vec::new();
        crate::write_snapshot(tree, &mut bytes).unwrap();
        bytes
    }

    #[test]
    fn a_restore_becomes_the_snapshot_and_keeps_the_config_node() {
        let mut source = World::new();
        source.run(&create("/kept")).unwrap();
        source.run(&set_data("/kept", b"v1", -1)).unwrap();
        let snapshot = snapshot_of(&source.tree);

        let mut target = World::new();
        target.run(&create("/gone")).unwrap();
        let config = b"server.1=127.0.0.1:2888:3888:participant".to_vec();
        target.tree.keep_config(
            PersistedStat {
                mzxid: 2,
                version: 1,
                ..PersistedStat::default()
            },
            Some(&config),
            shared_acl(&[]),
        );
        let txn = restore_txn(0x5_0000_0001, snapshot);
        let applied = target.tree.apply(&txn);
        assert_eq!(applied.result, TxnResult::Checked);
        assert!(applied.events.is_empty(), "a restore fires no watch itself");
        assert!(target.tree.node("/gone").is_none());
        let kept = target.tree.node("/kept").expect("restored");
        assert_eq!(kept.data(), b"v1");
        assert_eq!(kept.stat, source.tree.node("/kept").unwrap().stat);
        let node = target.tree.node(path::CONFIG).unwrap();
        assert_eq!(node.data(), &config[..]);
        assert_eq!(node.stat.version, 1);
        assert_eq!(target.tree.last_zxid(), 0x5_0000_0001);
        assert_eq!(target.tree.node_count(), source.tree.node_count());
    }

    #[test]
    fn bytes_that_are_no_snapshot_change_nothing() {
        let mut target = World::new();
        target.run(&create("/stays")).unwrap();
        let digest = target.tree.digest();
        let txn = restore_txn(9, b"not a snapshot".to_vec());
        let applied = target.tree.apply(&txn);
        assert_eq!(applied.result, TxnResult::Error(ErrorCode::SystemError));
        assert!(target.tree.node("/stays").is_some());
        assert_eq!(target.tree.digest(), digest);
    }
}
