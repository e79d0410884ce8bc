//! Watch events and the client's record of the watches it holds, which it
//! re-registers with `SetWatches2` after reconnecting.

use std::collections::BTreeSet;
use std::fmt;

use stoa_proto::opcode::{EventType, KeeperState, WatcherType};
use stoa_proto::records::SetWatches2;

/// A watch notification, or a change of the connection's state
/// (`event_type` `None`, empty path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedEvent {
    pub event_type: EventType,
    pub state: KeeperState,
    pub path: String,
    /// The zxid of the change; -1 for connection state events.
    pub zxid: i64,
}

impl fmt::Display for WatchedEvent {
    /// As Java's `WatchedEvent.toString()` in 3.9.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "null"
        } else {
            &self.path
        };
        write!(
            f,
            "WatchedEvent state:{:?} type:{:?} path:{} zxid: {}",
            self.state, self.event_type, path, self.zxid
        )
    }
}

/// What a successful read registers (or a removal unregisters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchKind {
    /// getData: a data watch.
    Data,
    /// exists: a data watch if the node exists, else an exist watch.
    Exists,
    /// getChildren: a child watch.
    Child,
    Persistent,
    PersistentRecursive,
    /// removeWatches of this type succeeded.
    Remove(WatcherType),
}

/// Picks one of the watch lists of a `SetWatches2`.
type WatchListField = fn(&mut SetWatches2) -> &mut Vec<String>;

/// The watches this session holds, by path.
#[derive(Debug, Default)]
pub(crate) struct WatchTable {
    data: BTreeSet<String>,
    exist: BTreeSet<String>,
    child: BTreeSet<String>,
    persistent: BTreeSet<String>,
    persistent_recursive: BTreeSet<String>,
}

impl WatchTable {
    /// Records the effect of a read's reply: `node_exists` is false when
    /// the read failed with NoNode (only exists registers then).
    pub(crate) fn register(&mut self, kind: WatchKind, path: &str, node_exists: bool) {
        let set = match (kind, node_exists) {
            (WatchKind::Data, true) | (WatchKind::Exists, true) => &mut self.data,
            (WatchKind::Exists, false) => &mut self.exist,
            (WatchKind::Child, true) => &mut self.child,
            (WatchKind::Persistent, true) => &mut self.persistent,
            (WatchKind::PersistentRecursive, true) => &mut self.persistent_recursive,
            (WatchKind::Remove(kind), true) => {
                self.remove(kind, path);
                return;
            }
            _ => return,
        };
        set.insert(path.to_owned());
    }

    fn remove(&mut self, kind: WatcherType, path: &str) {
        let (data, child, persistent) = match kind {
            WatcherType::Children => (false, true, false),
            WatcherType::Data => (true, false, false),
            WatcherType::Any => (true, true, true),
            WatcherType::Persistent | WatcherType::PersistentRecursive => (false, false, true),
        };
        if data {
            self.data.remove(path);
            self.exist.remove(path);
        }
        if child {
            self.child.remove(path);
        }
        if persistent {
            self.persistent.remove(path);
            self.persistent_recursive.remove(path);
        }
    }

    /// Drops the one-shot watches an event fires, as ZooKeeper's
    /// `ZKWatchManager.materialize`; persistent watches stay.
    pub(crate) fn fire(&mut self, event_type: EventType, path: &str) {
        match event_type {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                self.data.remove(path);
                self.exist.remove(path);
            }
            EventType::NodeChildrenChanged => {
                self.child.remove(path);
            }
            EventType::NodeDeleted => {
                self.data.remove(path);
                self.exist.remove(path);
                self.child.remove(path);
            }
            _ => {}
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.exist.is_empty()
            && self.child.is_empty()
            && self.persistent.is_empty()
            && self.persistent_recursive.is_empty()
    }

    /// `SetWatches2` requests re-registering everything, each at most
    /// about `max_bytes` of paths (ZooKeeper splits at 128 KiB so that no
    /// frame nears `jute.maxbuffer`).
    pub(crate) fn set_watches(&self, relative_zxid: i64, max_bytes: usize) -> Vec<SetWatches2> {
        let mut requests = Vec::new();
        let mut current = SetWatches2 {
            relative_zxid,
            ..SetWatches2::default()
        };
        let mut bytes = 0;
        let lists: [(&BTreeSet<String>, WatchListField); 5] = [
            (&self.data, |r| &mut r.data_watches),
            (&self.exist, |r| &mut r.exist_watches),
            (&self.child, |r| &mut r.child_watches),
            (&self.persistent, |r| &mut r.persistent_watches),
            (&self.persistent_recursive, |r| {
                &mut r.persistent_recursive_watches
            }),
        ];
        for (set, field) in lists {
            for path in set {
                if bytes > 0 && bytes + path.len() > max_bytes {
                    requests.push(std::mem::replace(
                        &mut current,
                        SetWatches2 {
                            relative_zxid,
                            ..SetWatches2::default()
                        },
                    ));
                    bytes = 0;
                }
                field(&mut current).push(path.clone());
                bytes += path.len();
            }
        }
        if bytes > 0 {
            requests.push(current);
        }
        requests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_watches_fire_once_and_persistent_ones_stay() {
        let mut table = WatchTable::default();
        table.register(WatchKind::Data, "/a", true);
        table.register(WatchKind::Exists, "/b", false);
        table.register(WatchKind::Child, "/a", true);
        table.register(WatchKind::PersistentRecursive, "/", true);
        table.register(WatchKind::Data, "/missing", false);
        let all = table.set_watches(7, 1 << 17);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].relative_zxid, 7);
        assert_eq!(all[0].data_watches, ["/a"]);
        assert_eq!(all[0].exist_watches, ["/b"]);
        assert_eq!(all[0].child_watches, ["/a"]);
        assert_eq!(all[0].persistent_recursive_watches, ["/"]);

        table.fire(EventType::NodeDataChanged, "/a");
        table.fire(EventType::NodeCreated, "/b");
        table.fire(EventType::NodeDeleted, "/a");
        let left = table.set_watches(7, 1 << 17);
        assert_eq!(left[0].persistent_recursive_watches, ["/"]);
        assert!(left[0].data_watches.is_empty() && left[0].child_watches.is_empty());
        table.register(WatchKind::Remove(WatcherType::Any), "/", true);
        assert!(table.is_empty());
        assert!(table.set_watches(7, 1 << 17).is_empty());
    }

    #[test]
    fn set_watches_is_split_by_size() {
        let mut table = WatchTable::default();
        for i in 0..10 {
            table.register(WatchKind::Data, &format!("/node{i}"), true);
        }
        let requests = table.set_watches(0, 12);
        assert_eq!(requests.len(), 5);
        assert!(requests.iter().all(|r| r.data_watches.len() == 2));
    }

    #[test]
    fn events_print_like_java() {
        let event = WatchedEvent {
            event_type: EventType::NodeDataChanged,
            state: KeeperState::SyncConnected,
            path: "/a".into(),
            zxid: 5,
        };
        assert_eq!(
            event.to_string(),
            "WatchedEvent state:SyncConnected type:NodeDataChanged path:/a zxid: 5"
        );
    }
}
