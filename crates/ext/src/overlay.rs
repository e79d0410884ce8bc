//! The call-local view of the tree: the engine's [`TreeView`] plus the
//! writes the call made so far. Every operation is checked as ZooKeeper
//! would check it against this combined view, so the collected writes, run
//! in order as one multi, succeed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::{CreateMode, ErrorCode, Stat, TreeView, WriteOp};

/// Subtrees an extension may not write: `/zookeeper` is the server's own and
/// writing `/extensions` would register extensions without the admin ACL.
pub(crate) const RESERVED_ROOTS: &[&str] = &["/zookeeper", "/extensions"];

/// The most writes one call may make: they become one multi transaction,
/// which must stay well below ZooKeeper's 1 MiB request size in practice.
pub(crate) const WRITES_PER_CALL_MAX: usize = 10_000;

/// Why an overlay operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpError {
    /// A ZooKeeper error the extension may catch or pass on to the client.
    Code(ErrorCode),
    /// A misuse that stops the call (becomes a Lua runtime error).
    Fatal(String),
}

impl From<ErrorCode> for OpError {
    fn from(code: ErrorCode) -> Self {
        OpError::Code(code)
    }
}

/// ZooKeeper's path rules (PathUtils.validatePath), without its unicode
/// range checks.
pub(crate) fn validate_path(path: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') {
        return Err("must start with /");
    }
    if path.len() == 1 {
        return Ok(());
    }
    if path.ends_with('/') {
        return Err("must not end with /");
    }
    if path.contains('\0') {
        return Err("must not contain NUL");
    }
    for part in path[1..].split('/') {
        if part.is_empty() {
            return Err("empty node name");
        }
        if part == "." || part == ".." {
            return Err("relative paths are not allowed");
        }
    }
    Ok(())
}

/// Whether `path` is `root` or lies below it.
pub(crate) fn is_within(path: &str, root: &str) -> bool {
    if root == "/" {
        return path.starts_with('/');
    }
    match path.strip_prefix(root) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

pub(crate) fn is_reserved(path: &str) -> bool {
    RESERVED_ROOTS.iter().any(|root| is_within(path, root))
}

/// "/a/b" -> "/a", "/a" -> "/", "/" -> None.
pub(crate) fn parent_of(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

fn join(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

/// A node's content as the call left it.
#[derive(Debug, Clone)]
struct Node {
    data: Vec<u8>,
    stat: Stat,
    /// Created by this call, so the view's children and sequence counter of
    /// this path (if it existed before and was deleted) do not apply.
    fresh: bool,
}

/// Children bookkeeping of one parent during the call.
#[derive(Debug, Clone, Copy, Default)]
struct ChildDelta {
    /// Creates minus deletes of children.
    count: i32,
    /// Every create and delete bumps ZooKeeper's cversion.
    cversion: i32,
    /// Sequential-counter values this call consumed (creates only, matching
    /// the engine's `next_sequence` contract).
    creates: i32,
}

pub(crate) struct Overlay<'v> {
    view: &'v dyn TreeView,
    /// Some = content written by the call; None = deleted by the call.
    nodes: BTreeMap<String, Option<Node>>,
    deltas: HashMap<String, ChildDelta>,
    writes: Vec<WriteOp>,
    /// The session that owns ephemeral creates; None where there is none
    /// (watch events, session end), and ephemeral creates then fail.
    ephemeral_owner: Option<i64>,
}

impl<'v> Overlay<'v> {
    pub(crate) fn new(view: &'v dyn TreeView, ephemeral_owner: Option<i64>) -> Self {
        Overlay {
            view,
            nodes: BTreeMap::new(),
            deltas: HashMap::new(),
            writes: Vec::new(),
            ephemeral_owner,
        }
    }

    pub(crate) fn into_writes(self) -> Vec<WriteOp> {
        self.writes
    }

    fn adjust(&self, path: &str, mut stat: Stat) -> Stat {
        if let Some(d) = self.deltas.get(path) {
            stat.num_children += d.count;
            stat.cversion += d.cversion;
        }
        stat
    }

    pub(crate) fn exists(&self, path: &str) -> Option<Stat> {
        match self.nodes.get(path) {
            Some(Some(node)) => Some(self.adjust(path, node.stat.clone())),
            Some(None) => None,
            None => self.view.exists(path).map(|s| self.adjust(path, s)),
        }
    }

    pub(crate) fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), OpError> {
        check_path(path)?;
        match self.nodes.get(path) {
            Some(Some(node)) => Ok((node.data.clone(), self.adjust(path, node.stat.clone()))),
            Some(None) => Err(ErrorCode::NoNode.into()),
            None => {
                let (data, stat) = self.view.get_data(path)?;
                Ok((data, self.adjust(path, stat)))
            }
        }
    }

    /// Sorted, so extensions behave the same whatever order the view uses.
    pub(crate) fn children(&self, path: &str) -> Result<Vec<String>, OpError> {
        check_path(path)?;
        let base_visible = match self.nodes.get(path) {
            Some(Some(node)) => !node.fresh,
            Some(None) => return Err(ErrorCode::NoNode.into()),
            None => true,
        };
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        let touched_below = self
            .nodes
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&prefix));
        if base_visible && !touched_below {
            // Nothing written under this node in this call: the view's list
            // is the answer (the common case: a dequeue scans, then writes).
            let mut names = self.view.get_children(path)?;
            names.sort_unstable();
            return Ok(names);
        }
        let mut names = BTreeSet::new();
        if base_visible {
            for name in self.view.get_children(path)? {
                if !matches!(self.nodes.get(&join(path, &name)), Some(None)) {
                    names.insert(name);
                }
            }
        }
        for (full, node) in self.nodes.range(prefix.clone()..) {
            let Some(rest) = full.strip_prefix(&prefix) else {
                break;
            };
            if node.is_some() && !rest.contains('/') {
                names.insert(rest.to_string());
            }
        }
        Ok(names.into_iter().collect())
    }

    fn push(&mut self, op: WriteOp) -> Result<(), OpError> {
        if self.writes.len() >= WRITES_PER_CALL_MAX {
            return Err(OpError::Fatal(format!(
                "more than {WRITES_PER_CALL_MAX} writes in one call"
            )));
        }
        self.writes.push(op);
        Ok(())
    }

    fn bump_parent(&mut self, path: &str, count: i32, create: bool) {
        if let Some(parent) = parent_of(path) {
            let d = self.deltas.entry(parent.to_string()).or_default();
            d.count += count;
            d.cversion += 1;
            if create {
                d.creates += 1;
            }
        }
    }

    /// Returns the final path (with any sequence suffix) and the new stat.
    pub(crate) fn create(
        &mut self,
        path: &str,
        data: Vec<u8>,
        flags: i32,
    ) -> Result<(String, Stat), OpError> {
        let mode = CreateMode::from_flags(flags).ok_or(ErrorCode::BadArguments)?;
        // Containers and TTL nodes need server-side reaping a WriteOp cannot
        // express.
        if mode.is_container() || mode.is_ttl() {
            return Err(ErrorCode::Unimplemented.into());
        }
        let owner = if mode.is_ephemeral() {
            match self.ephemeral_owner {
                Some(owner) => owner,
                None => return Err(ErrorCode::SessionExpired.into()),
            }
        } else {
            0
        };
        // A sequential create may name just the parent plus "/" (ZooKeeper
        // validates the path with its suffix), so check the stem loosely.
        let stem_check = if mode.is_sequential() {
            format!("{path}0")
        } else {
            path.to_string()
        };
        check_path(&stem_check)?;
        let parent = parent_of(path).ok_or(ErrorCode::BadArguments)?.to_string();
        let parent_stat = self.exists(&parent).ok_or(ErrorCode::NoNode)?;
        if parent_stat.ephemeral_owner != 0 {
            return Err(ErrorCode::NoChildrenForEphemerals.into());
        }
        let final_path = if mode.is_sequential() {
            let base = match self.nodes.get(&parent) {
                Some(Some(node)) if node.fresh => 0,
                _ => self.view.next_sequence(&parent)?,
            };
            let taken = self.deltas.get(&parent).map_or(0, |d| d.creates);
            format!("{path}{:010}", base.wrapping_add(taken))
        } else {
            path.to_string()
        };
        if is_reserved(&final_path) {
            return Err(ErrorCode::NoAuth.into());
        }
        if self.exists(&final_path).is_some() {
            return Err(ErrorCode::NodeExists.into());
        }
        let stat = Stat {
            ephemeral_owner: owner,
            data_length: len_i32(&data),
            ..Stat::default()
        };
        self.push(WriteOp::Create {
            path: final_path.clone(),
            data: data.clone(),
            ephemeral: owner != 0,
        })?;
        // A re-created path starts with no children and a fresh counter.
        self.deltas.remove(&final_path);
        self.nodes.insert(
            final_path.clone(),
            Some(Node {
                data,
                stat: stat.clone(),
                fresh: true,
            }),
        );
        self.bump_parent(&final_path, 1, true);
        Ok((final_path, stat))
    }

    pub(crate) fn delete(&mut self, path: &str, version: i32) -> Result<(), OpError> {
        check_path(path)?;
        if path == "/" {
            return Err(ErrorCode::BadArguments.into());
        }
        if is_reserved(path) {
            return Err(ErrorCode::NoAuth.into());
        }
        let stat = self.exists(path).ok_or(ErrorCode::NoNode)?;
        if version != -1 && version != stat.version {
            return Err(ErrorCode::BadVersion.into());
        }
        if stat.num_children > 0 {
            return Err(ErrorCode::NotEmpty.into());
        }
        self.push(WriteOp::Delete {
            path: path.to_string(),
            version,
        })?;
        self.nodes.insert(path.to_string(), None);
        self.deltas.remove(path);
        self.bump_parent(path, -1, false);
        Ok(())
    }

    pub(crate) fn set_data(
        &mut self,
        path: &str,
        data: Vec<u8>,
        version: i32,
    ) -> Result<Stat, OpError> {
        check_path(path)?;
        if is_reserved(path) {
            return Err(ErrorCode::NoAuth.into());
        }
        let (fresh, mut stat) = match self.nodes.get(path) {
            Some(Some(node)) => (node.fresh, node.stat.clone()),
            Some(None) => return Err(ErrorCode::NoNode.into()),
            None => (false, self.view.exists(path).ok_or(ErrorCode::NoNode)?),
        };
        if version != -1 && version != stat.version {
            return Err(ErrorCode::BadVersion.into());
        }
        stat.version = stat.version.wrapping_add(1);
        stat.data_length = len_i32(&data);
        self.push(WriteOp::SetData {
            path: path.to_string(),
            data: data.clone(),
            version,
        })?;
        self.nodes.insert(
            path.to_string(),
            Some(Node {
                data,
                stat: stat.clone(),
                fresh,
            }),
        );
        Ok(self.adjust(path, stat))
    }
}

fn check_path(path: &str) -> Result<(), OpError> {
    validate_path(path).map_err(|_| OpError::Code(ErrorCode::BadArguments))
}

/// Data lengths are i32 on the wire; anything longer is far past the
/// memory limit anyway, so saturate rather than fail.
fn len_i32(data: &[u8]) -> i32 {
    i32::try_from(data.len()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_helpers_follow_zookeeper_rules() {
        // Proves the parent/within/validation helpers agree with ZooKeeper's path rules.
        assert_eq!(parent_of("/a/b"), Some("/a"));
        assert_eq!(parent_of("/a"), Some("/"));
        assert_eq!(parent_of("/"), None);
        assert!(is_within("/queue/x", "/queue"));
        assert!(is_within("/queue", "/queue"));
        assert!(!is_within("/queued", "/queue"));
        assert!(is_reserved("/extensions/x"));
        assert!(validate_path("/a/b").is_ok());
        assert!(validate_path("/a/").is_err());
        assert!(validate_path("/a//b").is_err());
        assert!(validate_path("/a/./b").is_err());
        assert!(validate_path("a").is_err());
    }
}
