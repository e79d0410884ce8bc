//! Test support: an in-memory tree standing in for the engine, which applies
//! a call's writes as one all-or-nothing multi.
#![allow(dead_code)]

use std::collections::BTreeMap;

use stoa_ext::{
    ErrorCode, ExtError, ExtOp, ExtOutcome, ExtReply, ExtRequest, ExtensionKind, ExtensionManager,
    ExtensionSpec, Limits, NodeKind, Stat, TreeView, WriteOp,
};

#[derive(Clone, Default)]
pub struct MemTree {
    pub nodes: BTreeMap<String, (Vec<u8>, Stat)>,
    zxid: i64,
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) => "/",
        Some(i) => &path[..i],
        None => "/",
    }
}

impl MemTree {
    /// What the full paths of `path`'s children start with; NoNode if
    /// `path` is not a node.
    fn child_prefix(&self, path: &str) -> Result<String, ErrorCode> {
        if !self.nodes.contains_key(path) {
            return Err(ErrorCode::NoNode);
        }
        Ok(if path == "/" {
            "/".to_string()
        } else {
            format!("{path}/")
        })
    }

    pub fn new() -> Self {
        let mut t = MemTree::default();
        t.nodes.insert("/".into(), (Vec::new(), Stat::default()));
        t
    }

    /// A tree with the given regular nodes (parents first).
    pub fn with(nodes: &[(&str, &str)]) -> Self {
        let mut t = MemTree::new();
        for (p, d) in nodes {
            t.create(p, d.as_bytes(), 0).expect("fixture create");
        }
        t
    }

    pub fn data(&self, path: &str) -> Option<String> {
        self.nodes
            .get(path)
            .map(|(d, _)| String::from_utf8_lossy(d).into_owned())
    }

    fn create(&mut self, path: &str, data: &[u8], owner: i64) -> Result<(), ErrorCode> {
        if self.nodes.contains_key(path) {
            return Err(ErrorCode::NodeExists);
        }
        let parent = parent_of(path).to_string();
        self.zxid += 1;
        let zxid = self.zxid;
        let p = self.nodes.get_mut(&parent).ok_or(ErrorCode::NoNode)?;
        if p.1.ephemeral_owner != 0 {
            return Err(ErrorCode::NoChildrenForEphemerals);
        }
        p.1.num_children += 1;
        p.1.cversion += 1;
        p.1.pzxid = zxid;
        let stat = Stat {
            czxid: zxid,
            mzxid: zxid,
            pzxid: zxid,
            ephemeral_owner: owner,
            data_length: data.len() as i32,
            ..Stat::default()
        };
        self.nodes.insert(path.to_string(), (data.to_vec(), stat));
        Ok(())
    }

    fn apply_one(&mut self, op: &WriteOp, session: i64) -> Result<(), ErrorCode> {
        match op {
            WriteOp::Create {
                path, data, kind, ..
            } => self.create(
                path,
                data,
                if *kind == NodeKind::Ephemeral {
                    session
                } else {
                    0
                },
            ),
            WriteOp::Delete { path, version } => {
                let (_, stat) = self.nodes.get(path).ok_or(ErrorCode::NoNode)?;
                if *version != -1 && *version != stat.version {
                    return Err(ErrorCode::BadVersion);
                }
                if stat.num_children > 0 {
                    return Err(ErrorCode::NotEmpty);
                }
                self.nodes.remove(path);
                let p = self
                    .nodes
                    .get_mut(parent_of(path))
                    .ok_or(ErrorCode::NoNode)?;
                p.1.num_children -= 1;
                p.1.cversion += 1;
                Ok(())
            }
            WriteOp::SetData {
                path,
                data,
                version,
            } => {
                self.zxid += 1;
                let zxid = self.zxid;
                let node = self.nodes.get_mut(path).ok_or(ErrorCode::NoNode)?;
                if *version != -1 && *version != node.1.version {
                    return Err(ErrorCode::BadVersion);
                }
                node.0 = data.clone();
                node.1.version += 1;
                node.1.mzxid = zxid;
                node.1.data_length = data.len() as i32;
                Ok(())
            }
        }
    }

    /// Applies writes as one multi: all or nothing.
    pub fn apply(&mut self, writes: &[WriteOp], session: i64) -> Result<(), ErrorCode> {
        let mut next = self.clone();
        for w in writes {
            next.apply_one(w, session)?;
        }
        *self = next;
        Ok(())
    }
}

impl TreeView for MemTree {
    fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ErrorCode> {
        self.nodes.get(path).cloned().ok_or(ErrorCode::NoNode)
    }
    fn exists(&self, path: &str) -> Option<Stat> {
        self.nodes.get(path).map(|(_, s)| s.clone())
    }
    fn get_children(&self, path: &str) -> Result<Vec<String>, ErrorCode> {
        let prefix = self.child_prefix(path)?;
        // Reverse order on purpose: the crate must not rely on the view sorting.
        Ok(self
            .nodes
            .keys()
            .rev()
            .filter_map(|k| k.strip_prefix(&prefix))
            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
            .map(String::from)
            .collect())
    }
    /// Ordered, as the engine's view is (the trait's default sorts the
    /// whole listing): a range over the full paths, skipping grandchildren.
    fn children_after(
        &self,
        path: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ErrorCode> {
        let prefix = self.child_prefix(path)?;
        let from = format!("{prefix}{}", after.unwrap_or(""));
        Ok(self
            .nodes
            .range(from..)
            .map_while(|(k, _)| k.strip_prefix(&prefix))
            .filter(|name| !name.is_empty() && !name.contains('/'))
            .filter(|name| after.is_none_or(|a| *name > a))
            .take(limit)
            .map(String::from)
            .collect())
    }
    fn next_sequence(&self, parent: &str) -> Result<i32, ErrorCode> {
        // ZooKeeper derives the suffix from the parent's cversion.
        self.nodes
            .get(parent)
            .map(|(_, s)| s.cversion)
            .ok_or(ErrorCode::NoNode)
    }
}

pub const SESSION: i64 = 0x1234;

/// A manager, a tree, and a helper that runs a call and commits its writes
/// the way the engine does.
pub struct Harness {
    pub mgr: ExtensionManager,
    pub tree: MemTree,
}

pub fn example_source(file: &str) -> String {
    let path = format!(
        "{}/../../examples/extensions/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn node_spec(name: &str, path: &str, source: &str) -> ExtensionSpec {
    ExtensionSpec {
        name: name.into(),
        kind: ExtensionKind::Node,
        path: Some(path.into()),
        source: source.into(),
        limits: Limits::default(),
    }
}

impl Harness {
    pub fn new(tree: MemTree) -> Self {
        Harness {
            mgr: ExtensionManager::new(Limits::default()),
            tree,
        }
    }

    /// A harness with one node extension registered.
    pub fn node(path: &str, source: &str, tree: MemTree) -> Self {
        let mut h = Harness::new(tree);
        h.mgr
            .register(node_spec("ext", path, source))
            .expect("register");
        h
    }

    pub fn example(file: &str, path: &str, tree: MemTree) -> Self {
        Harness::node(path, &example_source(file), tree)
    }

    /// Routes like the engine: finds the owning extension, runs it, commits.
    pub fn run(
        &mut self,
        op: ExtOp,
        path: &str,
        data: &str,
        version: i32,
    ) -> Result<ExtOutcome, ExtError> {
        self.run_as(SESSION, op, path, data, version)
    }

    pub fn run_as(
        &mut self,
        session: i64,
        op: ExtOp,
        path: &str,
        data: &str,
        version: i32,
    ) -> Result<ExtOutcome, ExtError> {
        let name = self
            .mgr
            .node_extension_for(path)
            .unwrap_or_else(|| panic!("no extension owns {path}"));
        let req = ExtRequest {
            op,
            path: path.into(),
            data: data.as_bytes().to_vec(),
            version,
            session_id: session,
        };
        let out = self.mgr.call(&name, &req, &self.tree)?;
        if out.reply.is_ok() {
            self.tree
                .apply(&out.writes, session)
                .expect("the overlay's writes must apply as a multi");
        } else {
            assert!(out.writes.is_empty(), "an error reply carries no writes");
        }
        Ok(out)
    }

    /// Shorthand: run and return the client's reply.
    pub fn reply(&mut self, op: ExtOp, path: &str, data: &str) -> Result<ExtReply, ErrorCode> {
        self.run(op, path, data, -1).expect("no ExtError").reply
    }

    pub fn get(&mut self, path: &str) -> Result<String, ErrorCode> {
        self.reply(ExtOp::GetData, path, "")
            .map(|r| String::from_utf8_lossy(&r.data.unwrap_or_default()).into_owned())
    }
}

pub const SEQ: ExtOp = ExtOp::Create { flags: 2 };
pub const CREATE: ExtOp = ExtOp::Create { flags: 0 };
