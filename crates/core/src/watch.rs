//! Watch table of one partition. Watches belong to a connection, as in
//! ZooKeeper: a closed connection loses them and the client re-registers
//! them with setWatches after reconnecting.

use std::collections::{BTreeSet, HashMap, HashSet};

use stoa_proto::opcode::EventType;

pub type ConnId = u64;

/// What a change in the tree means for watchers (mirrors the tree's event kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Created,
    Deleted,
    DataChanged,
    ChildrenChanged,
}

impl ChangeKind {
    pub fn event_type(self) -> EventType {
        match self {
            ChangeKind::Created => EventType::NodeCreated,
            ChangeKind::Deleted => EventType::NodeDeleted,
            ChangeKind::DataChanged => EventType::NodeDataChanged,
            ChangeKind::ChildrenChanged => EventType::NodeChildrenChanged,
        }
    }
}

/// The kinds a client can register or remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchKind {
    /// getData or exists on an existing node.
    Data,
    /// exists on a missing node.
    Exist,
    Child,
    Persistent,
    PersistentRecursive,
}

#[derive(Default)]
pub struct WatchTable {
    by_kind: HashMap<WatchKind, HashMap<String, HashSet<ConnId>>>,
    /// Reverse index so closing a connection is proportional to its watches.
    by_conn: rustc_hash::FxHashMap<ConnId, BTreeSet<(WatchKind, String)>>,
}

impl WatchTable {
    pub fn add(&mut self, conn: ConnId, kind: WatchKind, path: &str) {
        self.by_kind
            .entry(kind)
            .or_default()
            .entry(path.to_string())
            .or_default()
            .insert(conn);
        self.by_conn
            .entry(conn)
            .or_default()
            .insert((kind, path.to_string()));
    }

    pub fn contains(&self, conn: ConnId, kind: WatchKind, path: &str) -> bool {
        self.by_kind
            .get(&kind)
            .and_then(|m| m.get(path))
            .is_some_and(|s| s.contains(&conn))
    }

    /// Removes one registration; true if it existed.
    pub fn remove(&mut self, conn: ConnId, kind: WatchKind, path: &str) -> bool {
        let Some(paths) = self.by_kind.get_mut(&kind) else {
            return false;
        };
        let Some(conns) = paths.get_mut(path) else {
            return false;
        };
        let removed = conns.remove(&conn);
        if conns.is_empty() {
            paths.remove(path);
        }
        if removed {
            if let Some(set) = self.by_conn.get_mut(&conn) {
                set.remove(&(kind, path.to_string()));
                if set.is_empty() {
                    self.by_conn.remove(&conn);
                }
            }
        }
        removed
    }

    /// Every registration whose kind and path `keep` selects, as (conn,
    /// kind, path), sorted.
    pub fn select(
        &self,
        keep: impl Fn(WatchKind, &str) -> bool,
    ) -> Vec<(ConnId, WatchKind, String)> {
        let mut out = Vec::new();
        for (&kind, paths) in &self.by_kind {
            for (path, conns) in paths.iter().filter(|(path, _)| keep(kind, path)) {
                out.extend(conns.iter().map(|&conn| (conn, kind, path.clone())));
            }
        }
        out.sort();
        out
    }

    pub fn remove_conn(&mut self, conn: ConnId) {
        for (kind, path) in self.by_conn.remove(&conn).unwrap_or_default() {
            if let Some(paths) = self.by_kind.get_mut(&kind) {
                if let Some(conns) = paths.get_mut(&path) {
                    conns.remove(&conn);
                    if conns.is_empty() {
                        paths.remove(&path);
                    }
                }
            }
        }
    }

    /// Connections to notify of `change` at `path`, each once, sorted. One-shot
    /// watches that fire are removed; persistent ones stay.
    pub fn trigger(&mut self, change: ChangeKind, path: &str) -> Vec<ConnId> {
        let one_shot: &[WatchKind] = match change {
            ChangeKind::Created | ChangeKind::DataChanged => &[WatchKind::Data, WatchKind::Exist],
            ChangeKind::Deleted => &[WatchKind::Data, WatchKind::Exist, WatchKind::Child],
            ChangeKind::ChildrenChanged => &[WatchKind::Child],
        };
        let mut targets = BTreeSet::new();
        for &kind in one_shot {
            let conns = self
                .by_kind
                .get_mut(&kind)
                .and_then(|m| m.remove(path))
                .unwrap_or_default();
            for conn in conns {
                if let Some(set) = self.by_conn.get_mut(&conn) {
                    set.remove(&(kind, path.to_string()));
                    if set.is_empty() {
                        self.by_conn.remove(&conn);
                    }
                }
                targets.insert(conn);
            }
        }
        if let Some(conns) = self
            .by_kind
            .get(&WatchKind::Persistent)
            .and_then(|m| m.get(path))
        {
            targets.extend(conns.iter().copied());
        }
        // Recursive watches see every change in their subtree except child-list
        // changes, which they observe as the creations and deletions themselves.
        if change != ChangeKind::ChildrenChanged {
            if let Some(recursive) = self.by_kind.get(&WatchKind::PersistentRecursive) {
                for ancestor in ancestors_and_self(path) {
                    if let Some(conns) = recursive.get(ancestor) {
                        targets.extend(conns.iter().copied());
                    }
                }
            }
        }
        targets.into_iter().collect()
    }

    /// Registrations of a connection, for 4lw `wchc` and tests.
    pub fn of_conn(&self, conn: ConnId) -> impl Iterator<Item = &(WatchKind, String)> {
        self.by_conn.get(&conn).into_iter().flatten()
    }

    pub fn conns(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.by_conn.keys().copied()
    }

    /// (path → connections) over all kinds, for 4lw `wchp`.
    pub fn by_path(&self) -> std::collections::BTreeMap<&str, BTreeSet<ConnId>> {
        let mut out: std::collections::BTreeMap<&str, BTreeSet<ConnId>> = Default::default();
        for paths in self.by_kind.values() {
            for (path, conns) in paths {
                out.entry(path.as_str())
                    .or_default()
                    .extend(conns.iter().copied());
            }
        }
        out
    }

    pub fn watch_count(&self) -> usize {
        self.by_conn.values().map(|s| s.len()).sum()
    }

    pub fn path_count(&self) -> usize {
        self.by_path().len()
    }
}

/// `/a/b/c` → `/a/b/c`, `/a/b`, `/a`, `/`.
pub fn ancestors_and_self(path: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(path);
    std::iter::from_fn(move || {
        let current = next?;
        next = if current == "/" {
            None
        } else {
            match current.rfind('/') {
                Some(0) => Some("/"),
                Some(i) => Some(&current[..i]),
                None => None,
            }
        };
        Some(current)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_watches_fire_once_and_persistent_ones_stay() {
        let mut t = WatchTable::default();
        t.add(1, WatchKind::Data, "/a");
        t.add(2, WatchKind::Persistent, "/a");
        assert_eq!(t.trigger(ChangeKind::DataChanged, "/a"), vec![1, 2]);
        assert_eq!(t.trigger(ChangeKind::DataChanged, "/a"), vec![2]);
        assert_eq!(t.watch_count(), 1);
    }

    #[test]
    fn delete_fires_child_watches_and_recursive_skips_child_changes() {
        let mut t = WatchTable::default();
        t.add(1, WatchKind::Child, "/a");
        t.add(2, WatchKind::PersistentRecursive, "/");
        assert_eq!(
            t.trigger(ChangeKind::ChildrenChanged, "/"),
            Vec::<ConnId>::new()
        );
        assert_eq!(t.trigger(ChangeKind::Deleted, "/a"), vec![1, 2]);
        assert_eq!(t.trigger(ChangeKind::Created, "/a/b/c"), vec![2]);
    }

    #[test]
    fn closing_a_connection_drops_all_its_watches() {
        let mut t = WatchTable::default();
        t.add(1, WatchKind::Data, "/a");
        t.add(1, WatchKind::Exist, "/b");
        t.add(2, WatchKind::Data, "/a");
        t.remove_conn(1);
        assert_eq!(t.trigger(ChangeKind::DataChanged, "/a"), vec![2]);
        assert!(t.trigger(ChangeKind::Created, "/b").is_empty());
        assert_eq!(t.watch_count(), 0);
    }

    #[test]
    fn ancestors_walk_to_the_root() {
        let v: Vec<_> = ancestors_and_self("/a/b").collect();
        assert_eq!(v, vec!["/a/b", "/a", "/"]);
        assert_eq!(ancestors_and_self("/").collect::<Vec<_>>(), vec!["/"]);
    }
}
