//! The partition core's read path: a read handed over by the session gate
//! runs against the applied tree and the core's watch table, and comes
//! back as one value (`ReadOutcome`).

use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::{AddWatchMode, WatcherType};
use stoa_proto::records::{ClientInfo, Id, Stat, SyncResponse, WhoAmIResponse};
use stoa_proto::request::Request;
use stoa_proto::response::Response;

use super::handoff::{ReadCall, ReadOutcome};
use super::partition_core::PartitionCore;
use crate::watch::{ChangeKind, ConnId, WatchKind};

impl PartitionCore {
    /// Runs a read against the applied tree: its answer, and the watch
    /// events a setWatches fires at once (sent before the answer).
    pub fn read(&mut self, call: ReadCall) -> ReadOutcome {
        let mut fired = Vec::new();
        let result = self.read_response(&call, &mut fired);
        ReadOutcome {
            zxid: self.tree.last_zxid(),
            result,
            fired,
        }
    }

    fn read_response(
        &mut self,
        call: &ReadCall,
        fired: &mut Vec<(ChangeKind, String)>,
    ) -> Result<Response, ErrorCode> {
        let (conn, sid, c) = (call.conn, call.session, &call.identity);
        match &call.request {
            Request::Ping => Ok(Response::Empty),
            Request::SetWatches(w) => {
                let restore = WatchesToRestore {
                    relative_zxid: w.relative_zxid,
                    data: &w.data_watches,
                    exist: &w.exist_watches,
                    child: &w.child_watches,
                    persistent: &[],
                    recursive: &[],
                };
                self.set_watches(conn, restore, fired);
                Ok(Response::Empty)
            }
            Request::SetWatches2(w) => {
                let restore = WatchesToRestore {
                    relative_zxid: w.relative_zxid,
                    data: &w.data_watches,
                    exist: &w.exist_watches,
                    child: &w.child_watches,
                    persistent: &w.persistent_watches,
                    recursive: &w.persistent_recursive_watches,
                };
                self.set_watches(conn, restore, fired);
                Ok(Response::Empty)
            }
            Request::Sync(r) => {
                // Standalone: everything committed is applied already (an
                // ensemble's sync goes through the log instead).
                stoa_tree::validate_path(&r.path)?;
                Ok(Response::Sync(SyncResponse {
                    path: r.path.clone(),
                }))
            }
            Request::WhoAmI => {
                // ZooKeeper shows a digest identity by its user name only.
                let user = |id: &Id| match id.scheme.as_str() {
                    "digest" => id.id.split(':').next().unwrap_or_default().to_string(),
                    _ => id.id.clone(),
                };
                let client_info = c
                    .ids
                    .iter()
                    .map(|id| ClientInfo {
                        auth_scheme: id.scheme.clone(),
                        user: user(id),
                    })
                    .collect();
                Ok(Response::WhoAmI(WhoAmIResponse { client_info }))
            }
            Request::AddWatch(r) => {
                stoa_tree::validate_path(&r.path)?;
                let kind = match AddWatchMode::from_i32(r.mode) {
                    Some(AddWatchMode::Persistent) => WatchKind::Persistent,
                    Some(AddWatchMode::PersistentRecursive) => WatchKind::PersistentRecursive,
                    None => return Err(ErrorCode::BadArguments),
                };
                self.watches.add(conn, kind, &r.path);
                // ZooKeeper answers addWatch with an ErrorResponse body of 0.
                Ok(Response::AddWatch(stoa_proto::records::ErrorResponse {
                    err: 0,
                }))
            }
            Request::RemoveWatches(r) => self.remove_watches(conn, &r.path, r.kind, true),
            Request::CheckWatches(r) => self.remove_watches(conn, &r.path, r.kind, false),
            _ => {
                let result = self
                    .tree
                    .execute_read(&c.ids, c.is_super, sid, &call.request);
                self.register_read_watch(conn, &call.request, &result);
                result
            }
        }
    }

    fn register_read_watch(
        &mut self,
        conn: ConnId,
        request: &Request,
        result: &Result<Response, ErrorCode>,
    ) {
        let (path, kind) = match request {
            Request::Exists(r) if r.watch => match result {
                Ok(_) => (&r.path, WatchKind::Data),
                Err(ErrorCode::NoNode) => (&r.path, WatchKind::Exist),
                Err(_) => return,
            },
            Request::GetData(r) if r.watch && result.is_ok() => (&r.path, WatchKind::Data),
            Request::GetChildren(r) if r.watch && result.is_ok() => (&r.path, WatchKind::Child),
            Request::GetChildren2(r) if r.watch && result.is_ok() => (&r.path, WatchKind::Child),
            _ => return,
        };
        self.watches.add(conn, kind, path);
    }

    fn remove_watches(
        &mut self,
        conn: ConnId,
        path: &str,
        watcher_type: i32,
        remove: bool,
    ) -> Result<Response, ErrorCode> {
        let kinds: &[WatchKind] = match WatcherType::from_i32(watcher_type) {
            Some(WatcherType::Children) => &[WatchKind::Child],
            Some(WatcherType::Data) => &[WatchKind::Data, WatchKind::Exist],
            Some(WatcherType::Persistent) => &[WatchKind::Persistent],
            Some(WatcherType::PersistentRecursive) => &[WatchKind::PersistentRecursive],
            Some(WatcherType::Any) => &[
                WatchKind::Child,
                WatchKind::Data,
                WatchKind::Exist,
                WatchKind::Persistent,
                WatchKind::PersistentRecursive,
            ],
            None => return Err(ErrorCode::BadArguments),
        };
        let mut found = false;
        for &kind in kinds {
            if remove {
                found |= self.watches.remove(conn, kind, path);
            } else {
                found |= self.watches.contains(conn, kind, path);
            }
        }
        if found {
            Ok(Response::Empty)
        } else {
            Err(ErrorCode::NoWatcher)
        }
    }

    /// Re-registers a reconnecting client's watches, firing at once those
    /// whose change it missed (anything newer than `relative_zxid`).
    fn set_watches(
        &mut self,
        conn: ConnId,
        w: WatchesToRestore<'_>,
        fired: &mut Vec<(ChangeKind, String)>,
    ) {
        let versioned: [VersionedWatches<'_>; 2] = [
            (
                w.data,
                WatchKind::Data,
                |s| s.mzxid,
                ChangeKind::DataChanged,
            ),
            (
                w.child,
                WatchKind::Child,
                |s| s.pzxid,
                ChangeKind::ChildrenChanged,
            ),
        ];
        for (paths, kind, changed_at, change) in versioned {
            for path in paths {
                match self.tree.node(path).map(|n| changed_at(&n.stat())) {
                    None => fired.push((ChangeKind::Deleted, path.clone())),
                    Some(at) if at > w.relative_zxid => fired.push((change, path.clone())),
                    Some(_) => self.watches.add(conn, kind, path),
                }
            }
        }
        for path in w.exist {
            if self.tree.node(path).is_some() {
                fired.push((ChangeKind::Created, path.clone()));
            } else {
                self.watches.add(conn, WatchKind::Exist, path);
            }
        }
        for (paths, kind) in [
            (w.persistent, WatchKind::Persistent),
            (w.recursive, WatchKind::PersistentRecursive),
        ] {
            for path in paths {
                self.watches.add(conn, kind, path);
            }
        }
    }
}

/// Watches restored against a zxid: paths, their kind, the stat field that
/// says when they last changed, and the event a newer change fires.
type VersionedWatches<'a> = (&'a [String], WatchKind, fn(&Stat) -> i64, ChangeKind);

/// The watches a reconnecting client asks to restore (setWatches/setWatches2).
struct WatchesToRestore<'a> {
    relative_zxid: i64,
    data: &'a [String],
    exist: &'a [String],
    child: &'a [String],
    persistent: &'a [String],
    recursive: &'a [String],
}
