//! The call-local view of the tree: the engine's [`TreeView`] plus the
//! writes the call made so far. Every operation is checked as ZooKeeper
//! would check it against this combined view, so the collected writes, run
//! in order as one multi, succeed. A group of operations (`zk.multi`) can be
//! made atomic within the call: its changes are journalled and undone if
//! one of them fails.

use std::collections::{BTreeMap, HashMap};

use crate::children::{self, Touched};
use crate::{CreateMode, ErrorCode, NodeKind, Stat, TreeView, TxnStamp, WriteOp};
use stoa_proto::records::Acl;

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

/// A node's content as the call left it.
#[derive(Debug, Clone)]
struct Node {
    data: Vec<u8>,
    stat: Stat,
    /// Created by this call, so the view's children and sequence counter of
    /// this path (if it existed before and was deleted) do not apply.
    fresh: bool,
}

/// What a create may say besides its flags: the node's ACL (open when
/// none) and a TTL node's time to live.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CreateOptions {
    pub acl: Option<Vec<Acl>>,
    pub ttl_ms: Option<i64>,
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

/// What an atomic group of operations (a `zk.multi`) changed, so that a
/// failing group can be undone and leave the overlay as it found it.
#[derive(Debug)]
struct Journal {
    writes_len: usize,
    /// Previous entries, oldest first; `None` = there was no entry.
    undo: Vec<Undo>,
}

#[derive(Debug)]
enum Undo {
    Node(String, Option<Option<Node>>),
    Delta(String, Option<ChildDelta>),
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
    /// The zxid and time the writes will commit with, if known.
    stamp: Option<TxnStamp>,
    /// Some while an atomic group runs.
    journal: Option<Journal>,
    /// TTL nodes may be created (`zookeeper.extendedTypesEnabled`).
    ttl_enabled: bool,
}

impl<'v> Overlay<'v> {
    pub(crate) fn new(view: &'v dyn TreeView, ephemeral_owner: Option<i64>) -> Self {
        Overlay {
            view,
            nodes: BTreeMap::new(),
            deltas: HashMap::new(),
            writes: Vec::new(),
            ephemeral_owner,
            stamp: None,
            journal: None,
            ttl_enabled: false,
        }
    }

    /// Whether creates may make TTL nodes, as the server's
    /// `zookeeper.extendedTypesEnabled` says.
    pub(crate) fn with_ttl(mut self, enabled: bool) -> Self {
        self.ttl_enabled = enabled;
        self
    }

    /// Stats of the nodes this call writes carry `stamp` (see [`TxnStamp`]).
    pub(crate) fn with_stamp(mut self, stamp: Option<TxnStamp>) -> Self {
        self.stamp = stamp;
        self
    }

    pub(crate) fn into_writes(self) -> Vec<WriteOp> {
        self.writes
    }

    /// A stat from the view or the call's node entry, with the call's child
    /// creates and deletes below `path` applied (ZooKeeper moves the
    /// parent's pzxid to the transaction that adds or removes a child).
    fn adjust(&self, path: &str, mut stat: Stat) -> Stat {
        if let Some(d) = self.deltas.get(path) {
            stat.num_children += d.count;
            stat.cversion += d.cversion;
            if let Some(stamp) = self.stamp {
                stat.pzxid = stamp.zxid;
            }
        }
        stat
    }

    // ---- atomic groups --------------------------------------------------

    /// Starts recording changes so [`Overlay::rollback_atomic`] can undo
    /// them. Groups do not nest (`zk.multi` holds no Lua callbacks).
    pub(crate) fn begin_atomic(&mut self) {
        debug_assert!(self.journal.is_none(), "atomic groups do not nest");
        self.journal = Some(Journal {
            writes_len: self.writes.len(),
            undo: Vec::new(),
        });
    }

    /// Keeps the group's changes.
    pub(crate) fn commit_atomic(&mut self) {
        self.journal = None;
    }

    /// Undoes every change since [`Overlay::begin_atomic`].
    pub(crate) fn rollback_atomic(&mut self) {
        let Some(journal) = self.journal.take() else {
            return;
        };
        self.writes.truncate(journal.writes_len);
        for undo in journal.undo.into_iter().rev() {
            match undo {
                Undo::Node(path, Some(prev)) => {
                    self.nodes.insert(path, prev);
                }
                Undo::Node(path, None) => {
                    self.nodes.remove(&path);
                }
                Undo::Delta(path, Some(prev)) => {
                    self.deltas.insert(path, prev);
                }
                Undo::Delta(path, None) => {
                    self.deltas.remove(&path);
                }
            }
        }
    }

    /// Every change to `nodes` goes through here, so an atomic group can
    /// be undone.
    fn put_node(&mut self, path: &str, node: Option<Node>) {
        let prev = self.nodes.insert(path.to_string(), node);
        if let Some(journal) = &mut self.journal {
            journal.undo.push(Undo::Node(path.to_string(), prev));
        }
    }

    /// Every change to `deltas` goes through here (`None` removes).
    fn put_delta(&mut self, path: &str, delta: Option<ChildDelta>) {
        let prev = match delta {
            Some(d) => self.deltas.insert(path.to_string(), d),
            None => self.deltas.remove(path),
        };
        if let Some(journal) = &mut self.journal {
            journal.undo.push(Undo::Delta(path.to_string(), prev));
        }
    }

    // ---- reads ------------------------------------------------------------

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
        self.children_after(path, None, usize::MAX)
    }

    /// Up to `limit` children of `path` that sort (bytewise) after `after`
    /// (from the first when `None`), as the call sees them: the view's
    /// children without the ones the call deleted, plus the ones it
    /// created. Costs what the view's ordered query costs plus the call's
    /// own writes below `path`, not the number of children.
    pub(crate) fn children_after(
        &self,
        path: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, OpError> {
        check_path(path)?;
        let base_visible = match self.nodes.get(path) {
            // Created by this call: whatever the view lists under this path
            // belonged to a node the call deleted.
            Some(Some(node)) => !node.fresh,
            Some(None) => return Err(ErrorCode::NoNode.into()),
            None => true,
        };
        let touched = self.touched_children(path, after);
        let base = if base_visible {
            let batch = children::base_batch(limit, &touched);
            self.view.children_after(path, after, batch)?
        } else {
            Vec::new()
        };
        Ok(children::merge(base, touched, limit))
    }

    /// The direct children of `path` after `after` that this call created,
    /// rewrote or deleted, sorted by name.
    fn touched_children(&self, path: &str, after: Option<&str>) -> Vec<Touched> {
        let prefix = if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        };
        // Full paths under one parent sort like their names; deeper
        // descendants interleave and are skipped.
        let from = format!("{prefix}{}", after.unwrap_or(""));
        self.nodes
            .range(from..)
            .map_while(|(full, node)| Some((full.strip_prefix(&prefix)?, node)))
            .filter(|(name, _)| !name.is_empty() && !name.contains('/'))
            .filter(|(name, _)| after.is_none_or(|a| *name > a))
            .map(|(name, node)| (name.to_string(), node.is_some()))
            .collect()
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
            let mut d = self.deltas.get(parent).copied().unwrap_or_default();
            d.count += count;
            d.cversion += 1;
            if create {
                d.creates += 1;
            }
            self.put_delta(parent, Some(d));
        }
    }

    /// The stat of a node created now: `Stat::default()` but for the owner,
    /// the length and, when known, the commit's zxid and time.
    fn created_stat(&self, ephemeral_owner: i64, data: &[u8]) -> Stat {
        let (zxid, time) = self.stamp.map_or((0, 0), |s| (s.zxid, s.time_ms));
        Stat {
            czxid: zxid,
            mzxid: zxid,
            ctime: time,
            mtime: time,
            pzxid: zxid,
            ephemeral_owner,
            data_length: len_i32(data),
            ..Stat::default()
        }
    }

    /// Returns the final path (with any sequence suffix) and the new stat.
    pub(crate) fn create(
        &mut self,
        path: &str,
        data: Vec<u8>,
        flags: i32,
        options: &CreateOptions,
    ) -> Result<(String, Stat), OpError> {
        let mode = CreateMode::from_flags(flags).ok_or(ErrorCode::BadArguments)?;
        let kind = if mode.is_container() {
            NodeKind::Container
        } else if mode.is_ttl() {
            // ZooKeeper's answers with extended types off, and for a TTL
            // out of range.
            if !self.ttl_enabled {
                return Err(ErrorCode::Unimplemented.into());
            }
            let ttl_ms = options.ttl_ms.ok_or(ErrorCode::BadArguments)?;
            if !(1..=stoa_tree::TTL_MAX_MS).contains(&ttl_ms) {
                return Err(ErrorCode::BadArguments.into());
            }
            NodeKind::Ttl { ttl_ms }
        } else if mode.is_ephemeral() {
            NodeKind::Ephemeral
        } else {
            NodeKind::Persistent
        };
        if options.ttl_ms.is_some() && !mode.is_ttl() {
            return Err(ErrorCode::BadArguments.into());
        }
        let acl = match &options.acl {
            None => vec![Acl::open_unsafe()],
            // The extension has no identities of its own: `auth` is refused.
            Some(acl) => stoa_tree::fixup_acl(acl, &[])?,
        };
        let owner = if kind == NodeKind::Ephemeral {
            match self.ephemeral_owner {
                Some(owner) => owner,
                None => return Err(ErrorCode::SessionExpired.into()),
            }
        } else {
            // Clients see 0 for containers and TTL nodes too.
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
        let stat = self.created_stat(owner, &data);
        self.push(WriteOp::Create {
            path: final_path.clone(),
            data: data.clone(),
            kind,
            acl,
        })?;
        // A re-created path starts with no children and a fresh counter.
        self.put_delta(&final_path, None);
        self.put_node(
            &final_path,
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
        self.put_node(path, None);
        self.put_delta(path, None);
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
        if let Some(stamp) = self.stamp {
            stat.mzxid = stamp.zxid;
            stat.mtime = stamp.time_ms;
        }
        self.push(WriteOp::SetData {
            path: path.to_string(),
            data: data.clone(),
            version,
        })?;
        self.put_node(
            path,
            Some(Node {
                data,
                stat: stat.clone(),
                fresh,
            }),
        );
        Ok(self.adjust(path, stat))
    }

    /// ZooKeeper's `check` (a multi's version guard): `path` exists and,
    /// unless `version` is -1, has that version.
    pub(crate) fn check(&self, path: &str, version: i32) -> Result<(), OpError> {
        check_path(path)?;
        let stat = self.exists(path).ok_or(ErrorCode::NoNode)?;
        if version != -1 && version != stat.version {
            return Err(ErrorCode::BadVersion.into());
        }
        Ok(())
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
    use crate::multi::MultiOp;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// A view with `/`, `/q` and the given children of `/q`.
    struct Base(BTreeSet<String>);

    impl TreeView for Base {
        fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ErrorCode> {
            let stat = self.exists(path).ok_or(ErrorCode::NoNode)?;
            Ok((Vec::new(), stat))
        }
        fn exists(&self, path: &str) -> Option<Stat> {
            let num_children = match path {
                "/" => 1,
                "/q" => self.0.len() as i32,
                _ => match path.strip_prefix("/q/") {
                    Some(name) if self.0.contains(name) => 0,
                    _ => return None,
                },
            };
            Some(Stat {
                num_children,
                ..Stat::default()
            })
        }
        fn get_children(&self, path: &str) -> Result<Vec<String>, ErrorCode> {
            match path {
                "/" => Ok(vec!["q".into()]),
                // Reverse order on purpose: the overlay must sort.
                "/q" => Ok(self.0.iter().rev().cloned().collect()),
                _ => self
                    .exists(path)
                    .map(|_| Vec::new())
                    .ok_or(ErrorCode::NoNode),
            }
        }
        fn next_sequence(&self, _parent: &str) -> Result<i32, ErrorCode> {
            Ok(0)
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Create(String),
        Delete(String),
        Set(String),
        /// Deletes every child and `/q` itself, then creates `/q` again.
        Recreate,
        /// A multi of creates and deletes that fails at its end.
        FailedMulti(Vec<(String, bool)>),
    }

    fn name() -> impl Strategy<Value = String> {
        "[abc]{1,2}"
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => name().prop_map(Step::Create),
            4 => name().prop_map(Step::Delete),
            1 => name().prop_map(Step::Set),
            1 => Just(Step::Recreate),
            1 => prop::collection::vec((name(), any::<bool>()), 0..4).prop_map(Step::FailedMulti),
        ]
    }

    /// Runs `step` on the overlay and on `model` (the children of `/q`).
    fn apply(overlay: &mut Overlay<'_>, model: &mut BTreeSet<String>, step: &Step) {
        let path = |n: &str| format!("/q/{n}");
        match step {
            Step::Create(n) => {
                if overlay
                    .create(&path(n), Vec::new(), 0, &CreateOptions::default())
                    .is_ok()
                {
                    model.insert(n.clone());
                }
            }
            Step::Delete(n) => {
                if overlay.delete(&path(n), -1).is_ok() {
                    model.remove(n);
                }
            }
            Step::Set(n) => {
                let _ = overlay.set_data(&path(n), b"x".to_vec(), -1);
            }
            Step::Recreate => {
                for n in std::mem::take(model) {
                    overlay.delete(&path(&n), -1).expect("listed child");
                }
                overlay.delete("/q", -1).expect("empty /q");
                overlay
                    .create("/q", Vec::new(), 0, &CreateOptions::default())
                    .expect("deleted /q");
            }
            Step::FailedMulti(ops) => {
                let mut ops: Vec<MultiOp> = ops
                    .iter()
                    .map(|(n, create)| match create {
                        true => MultiOp::Create {
                            path: path(n),
                            data: Vec::new(),
                            flags: 0,
                            options: CreateOptions::default(),
                        },
                        false => MultiOp::Delete {
                            path: path(n),
                            version: -1,
                        },
                    })
                    .collect();
                ops.push(MultiOp::Check {
                    path: "/q/zz-missing".into(),
                    version: -1,
                });
                assert!(overlay.multi(&ops).is_err());
            }
        }
    }

    proptest! {
        #[test]
        fn the_overlay_pages_children_like_the_model(
            base in prop::collection::btree_set(name(), 0..8),
            steps in prop::collection::vec(step(), 0..16),
            after in prop::option::of(name()),
            limit in 0usize..6,
        ) {
            // Proves children_after through the overlay (pending creates, deletes, a re-created parent, rolled-back multis) equals the expected set filtered and cut, and the parent's num_children agrees.
            let view = Base(base.clone());
            let mut overlay = Overlay::new(&view, Some(1));
            let mut model = base;
            for step in &steps {
                apply(&mut overlay, &mut model, step);
            }
            let expected: Vec<String> = model
                .iter()
                .filter(|n| after.as_ref().is_none_or(|a| *n > a))
                .take(limit)
                .cloned()
                .collect();
            let page = overlay.children_after("/q", after.as_deref(), limit).unwrap();
            prop_assert_eq!(page, expected);
            let all: Vec<String> = model.iter().cloned().collect();
            prop_assert_eq!(overlay.children("/q").unwrap(), all);
            prop_assert_eq!(overlay.exists("/q").unwrap().num_children as usize, model.len());
        }
    }

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
