//! A parent's children: a persistent (copy-on-write) B+tree of znodes keyed
//! by name, whose leaves pack their znodes into one buffer
//! ([`crate::packed_leaf`]).
//!
//! Cloning is O(1) and a clone is a frozen view, as with the other
//! persistent maps of the tree: nodes are shared until one side changes
//! them, and a change copies only the nodes on its path ([`Arc::make_mut`]),
//! in place when nothing shares them. Names sort in byte order, so a branch
//! can route by integer words (see [`Child`]).
//!
//! Invariants (checked by [`ChildMap::check`]): names strictly ascending;
//! every leaf at the same depth; no node empty, no branch above its
//! capacity, no leaf of two or more entries much above its weight; a
//! branch's entry carries the least name of its subtree exactly, and routing
//! words that match it; every leaf's own invariants.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::node::{Name, NewData, Node, NodeRef, PersistedStat, SharedAcl, Updated};
use crate::packed_leaf::Leaf;

/// Bytes a leaf holds before it splits. A write copies its leaf when a
/// snapshot clone shares it and moves the entries after the one it
/// changes, so smaller is cheaper there; but each leaf costs about 260 B
/// of its own (its `Arc`'d node, offsets and slots allocations, its entry
/// in the branch above). At 4 KiB that was 8 MiB of a million-znode tree,
/// at 16 KiB it is 2; setData beside such a tree, with snapshots, and a
/// restart from it measured no slower.
const LEAF_BYTES: usize = if cfg!(test) { 600 } else { 16384 };
/// Children per branch.
const BRANCH_MAX: usize = if cfg!(test) { 8 } else { 64 };

/// Below a quarter full a node is merged with (or topped up from) a
/// sibling after a removal.
fn underfull(node: &MapNode) -> bool {
    match node {
        MapNode::Leaf(leaf) => leaf.weight() < LEAF_BYTES / 4,
        MapNode::Branch(children) => children.len() < BRANCH_MAX / 4,
    }
}

#[derive(Debug, Clone)]
enum MapNode {
    Leaf(Leaf),
    Branch(Vec<Child>),
}

/// A branch's entry: a subtree and its least name, which routes lookups.
#[derive(Debug, Clone)]
struct Child {
    least: Name,
    /// How many leading bytes all least names of this branch share (the
    /// same in every entry of a branch), and the eight bytes of `least`
    /// after them: a lookup compares these words as integers and reads a
    /// name only on a tie. Siblings share long prefixes
    /// (`lock-0000000042`), so comparing names from their start spent most
    /// of a lookup. Set by [`reword`] whenever a branch's entries change.
    skip: u32,
    word: u64,
    node: Arc<MapNode>,
}

impl Child {
    fn new(least: Name, node: Arc<MapNode>) -> Self {
        Child {
            least,
            skip: 0,
            word: 0,
            node,
        }
    }

    fn leaf(leaf: Leaf) -> Self {
        Child::new(leaf.name(0), Arc::new(MapNode::Leaf(leaf)))
    }
}

/// The eight bytes of `key` from `at` on, zero-padded, as an integer that
/// orders like the bytes (equal words leave the order to the rest). Fewer
/// than eight are shifted in byte by byte: copying a slice of variable
/// length is a library call.
pub(crate) fn word_at(key: &[u8], at: usize) -> u64 {
    let rest = key.get(at..).unwrap_or_default();
    match rest.first_chunk::<8>() {
        Some(chunk) => u64::from_be_bytes(*chunk),
        None => rest
            .iter()
            .enumerate()
            .fold(0, |word, (i, &b)| word | u64::from(b) << (56 - 8 * i)),
    }
}

/// Sets every entry's `skip` and `word` after a branch's entries changed.
/// The entries are sorted, so the prefix all least names share is the one
/// the first and last share.
fn reword(children: &mut [Child]) {
    let (Some(first), Some(last)) = (children.first(), children.last()) else {
        return;
    };
    let (a, b) = (first.least.as_bytes(), last.least.as_bytes());
    let skip = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let skip_u32 = u32::try_from(skip).unwrap_or(u32::MAX);
    for c in children {
        c.skip = skip_u32;
        c.word = word_at(c.least.as_bytes(), skip);
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ChildMap {
    root: Option<Arc<MapNode>>,
    len: usize,
}

/// Children nest inside their parent, so the default drop would recurse
/// once per level of the tree: a chain of a few thousand znodes (any
/// client may make one) would overflow a thread's stack when the last copy
/// of it goes. This drop takes apart, with a loop, whatever no snapshot
/// clone still shares.
impl Drop for ChildMap {
    fn drop(&mut self) {
        let Some(root) = self.root.take() else {
            return;
        };
        let mut pending = vec![root];
        while let Some(node) = pending.pop() {
            match Arc::try_unwrap(node) {
                Ok(MapNode::Leaf(mut leaf)) => leaf.take_child_maps(|mut map| {
                    pending.extend(map.root.take());
                }),
                Ok(MapNode::Branch(children)) => {
                    pending.extend(children.into_iter().map(|c| c.node));
                }
                Err(_shared) => {}
            }
        }
    }
}

impl ChildMap {
    /// An empty map; allocates nothing.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The leaf that would hold `key`.
    fn leaf_for(&self, key: &[u8]) -> Option<&Leaf> {
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                MapNode::Leaf(leaf) => return Some(leaf),
                MapNode::Branch(children) => node = &children[route(children, key)].node,
            }
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<NodeRef<'_>> {
        let leaf = self.leaf_for(name.as_bytes())?;
        Some(leaf.get(leaf.find(name.as_bytes()).ok()?))
    }

    /// The child map of the child `name`: `None` if there is no such
    /// child, `Some(None)` if it has no children.
    pub(crate) fn children_of(&self, name: &str) -> Option<Option<&ChildMap>> {
        let leaf = self.leaf_for(name.as_bytes())?;
        Some(leaf.child_map_at(leaf.find(name.as_bytes()).ok()?))
    }

    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.leaf_for(name.as_bytes())
            .is_some_and(|leaf| leaf.find(name.as_bytes()).is_ok())
    }

    /// The leaf holding `name`, for changing, and its place there; copies
    /// the shared nodes on its path first (a miss may copy some for
    /// nothing: callers look up what they know is there).
    fn leaf_mut(&mut self, name: &str) -> Option<(&mut Leaf, usize)> {
        let key = name.as_bytes();
        let mut node = Arc::make_mut(self.root.as_mut()?);
        loop {
            match node {
                MapNode::Leaf(leaf) => {
                    let at = leaf.find(key).ok()?;
                    return Some((leaf, at));
                }
                MapNode::Branch(children) => {
                    let i = route(children, key);
                    node = Arc::make_mut(&mut children[i].node);
                }
            }
        }
    }

    /// The child map of the child `name`, for changing (made empty if it
    /// never had one).
    pub(crate) fn children_mut(&mut self, name: &str) -> Option<&mut ChildMap> {
        let (leaf, at) = self.leaf_mut(name)?;
        Some(leaf.children_mut(at))
    }

    /// Changes the child `name`'s stat with `change` and, when given, gives
    /// it new data or ACL, in one walk down; `None` if there is no such
    /// child (the walk may then have copied shared nodes for nothing).
    /// A leaf that grew past its weight splits, as after an insert.
    pub(crate) fn update(
        &mut self,
        name: &str,
        change: &dyn Fn(&mut PersistedStat),
        data: NewData<'_>,
        acl: Option<&SharedAcl>,
    ) -> Option<Updated> {
        let root = self.root.as_mut()?;
        let mut found = None;
        let update = Change::Update {
            change,
            data,
            acl,
            found: &mut found,
        };
        let right = change_in(root, name, update);
        self.settle_root(right);
        found
    }

    /// Adds `node` under `name`; false (and the map unchanged) if the name
    /// is there. A name above every other (sequential names, a snapshot's
    /// siblings in order) goes down the rightmost path without a search.
    pub(crate) fn insert_new(&mut self, name: &str, node: Node) -> bool {
        let last = match self.last_key() {
            None => {
                self.root = Some(Arc::new(MapNode::Leaf(Leaf::of_one(name, node))));
                self.len = 1;
                return true;
            }
            Some(last) => cmp_bytes(last.as_bytes(), name.as_bytes()).is_lt(),
        };
        if !last && self.contains_key(name) {
            return false;
        }
        let root = self
            .root
            .as_mut()
            .expect("a map with a last key has a root");
        let right = change_in(root, name, Change::Insert { node, last });
        self.settle_root(right);
        self.len += 1;
        true
    }

    /// After a change: splits a root leaf over its weight (it has no
    /// neighbours to spill into), and grows a root that split.
    fn settle_root(&mut self, mut right: Vec<Child>) {
        let root = self.root.as_mut().expect("a changed map has a root");
        if heavy_leaf(root) {
            right = split_heavy(root);
        }
        self.grow_root(right);
    }

    /// After a root split: a new root over it and `right`, its new
    /// siblings (none: no split), itself split if they are too many.
    fn grow_root(&mut self, right: Vec<Child>) {
        if right.is_empty() {
            return;
        }
        let left = self.root.take().expect("a root was split");
        let mut children = vec![Child::new(least_of(&left), left)];
        children.extend(right);
        let right = if children.len() > BRANCH_MAX {
            split_branch(&mut children, false)
        } else {
            reword(&mut children);
            Vec::new()
        };
        self.root = Some(Arc::new(MapNode::Branch(children)));
        self.grow_root(right);
    }

    /// The greatest name.
    pub(crate) fn last_key(&self) -> Option<Name> {
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                MapNode::Leaf(leaf) => return leaf.len().checked_sub(1).map(|i| leaf.name(i)),
                MapNode::Branch(children) => node = &children.last()?.node,
            }
        }
    }

    /// Removes the child `name` and returns it.
    pub(crate) fn remove(&mut self, name: &str) -> Option<Node> {
        if !self.contains_key(name) {
            return None;
        }
        let root = self.root.as_mut()?;
        let node = remove_from(root, name.as_bytes());
        self.len -= 1;
        // A branch left with one child hands the root down; an empty node
        // (the last entry gone) leaves no root.
        loop {
            match self.root.as_deref() {
                Some(MapNode::Branch(children)) if children.len() == 1 => {
                    self.root = Some(children[0].node.clone());
                }
                Some(node) if entries(node) == 0 => self.root = None,
                _ => break,
            }
        }
        Some(node)
    }

    /// Children in ascending name order.
    pub(crate) fn iter(&self) -> Iter<'_> {
        self.iter_after(None)
    }

    /// Children whose name is above `after` (all when `None`), ascending.
    /// Reaching the first costs one descent, not a scan.
    pub(crate) fn iter_after(&self, after: Option<&str>) -> Iter<'_> {
        let after = after.map(str::as_bytes);
        let mut iter = Iter {
            pending: Vec::new(),
            leaf: None,
        };
        let Some(mut node) = self.root.as_deref() else {
            return iter;
        };
        loop {
            match node {
                MapNode::Branch(children) => {
                    let i = after.map_or(0, |key| route(children, key));
                    iter.pending.push(&children[i + 1..]);
                    node = &children[i].node;
                }
                MapNode::Leaf(leaf) => {
                    let start = after.map_or(0, |key| match leaf.find(key) {
                        Ok(i) => i + 1,
                        Err(i) => i,
                    });
                    iter.leaf = Some((leaf, start));
                    return iter;
                }
            }
        }
    }

    /// Checks the invariants in the module comment.
    pub(crate) fn check(&self) -> Result<(), String> {
        let Some(root) = &self.root else {
            return if self.len == 0 {
                Ok(())
            } else {
                Err(format!("no root but a length of {}", self.len))
            };
        };
        let mut leaf_depth = None;
        let mut count = 0;
        check_node(root, 0, &mut leaf_depth, &mut count)?;
        if count != self.len {
            return Err(format!("{count} entries, length says {}", self.len));
        }
        let mut previous: Option<Name> = None;
        for (name, _) in self.iter() {
            if previous.is_some_and(|p| cmp_bytes(p.as_bytes(), name.as_bytes()).is_ge()) {
                return Err("names not strictly ascending".into());
            }
            previous = Some(name);
        }
        Ok(())
    }
}

/// Byte order, as `[u8]::cmp`, eight bytes at a time: a lookup compares
/// names some twenty times, and siblings share long prefixes
/// (`lock-0000000042`).
pub(crate) fn cmp_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let common = a.len().min(b.len());
    let (mut a_words, mut b_words) = (a[..common].chunks_exact(8), b[..common].chunks_exact(8));
    for (x, y) in (&mut a_words).zip(&mut b_words) {
        let word = |w: &[u8]| u64::from_be_bytes(w.try_into().unwrap_or([0; 8]));
        let (x, y) = (word(x), word(y));
        if x != y {
            return x.cmp(&y);
        }
    }
    // The last partial words, zero-padded: when they tie, the shorter name
    // is a prefix of the longer and sorts first.
    word_at(a_words.remainder(), 0)
        .cmp(&word_at(b_words.remainder(), 0))
        .then(a.len().cmp(&b.len()))
}

/// The entry of `children` whose subtree would hold `key`: the last one
/// whose least name is not above it (the first if none).
fn route(children: &[Child], key: &[u8]) -> usize {
    let first = &children[0];
    let skip = first.skip as usize;
    let head = skip.min(key.len());
    match cmp_bytes(&key[..head], &first.least.as_bytes()[..head]) {
        // Below the prefix every least name starts with, or a proper
        // prefix of it: below them all.
        Ordering::Less => return 0,
        Ordering::Equal if key.len() < skip => return 0,
        Ordering::Greater => return children.len() - 1,
        Ordering::Equal => {}
    }
    let word = word_at(key, skip);
    children
        .partition_point(|c| match c.word.cmp(&word) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => cmp_bytes(c.least.as_bytes(), key).is_le(),
        })
        .saturating_sub(1)
}

fn least_of(node: &MapNode) -> Name {
    match node {
        MapNode::Leaf(leaf) => leaf.name(0),
        MapNode::Branch(children) => children[0].least.clone(),
    }
}

fn entries(node: &MapNode) -> usize {
    match node {
        MapNode::Leaf(leaf) => leaf.len(),
        MapNode::Branch(children) => children.len(),
    }
}

/// Whether `node` is a leaf over its weight that a cut can lighten.
fn heavy_leaf(node: &MapNode) -> bool {
    matches!(node, MapNode::Leaf(leaf) if !leaf.fits(LEAF_BYTES))
}

/// Splits the heavy leaf `node`: the parts to its right as new siblings.
fn split_heavy(node: &mut Arc<MapNode>) -> Vec<Child> {
    let MapNode::Leaf(leaf) = Arc::make_mut(node) else {
        unreachable!("only a leaf is heavy");
    };
    lighten(leaf).into_iter().map(Child::leaf).collect()
}

/// Cuts `leaf` until every part fits its weight; returns the parts after
/// the first, in order. A part is encoded afresh (its own prefix and
/// bases), so it may weigh more than its share of the cut leaf did: such a
/// part is cut again. One entry always fits, so this ends.
fn lighten(leaf: &mut Leaf) -> Vec<Leaf> {
    if leaf.fits(LEAF_BYTES) {
        return Vec::new();
    }
    let cuts = leaf.cuts(LEAF_BYTES);
    let rest = leaf.split_at(&cuts);
    let mut out = lighten(leaf);
    for mut part in rest {
        let more = lighten(&mut part);
        out.push(part);
        out.extend(more);
    }
    out
}

/// Lightens the heavy leaf `i` by moving entries to a neighbour with room
/// (a B*-tree's redistribution): the two are cut again where they are most
/// even. Splitting only when neither neighbour has room keeps leaves fuller
/// than half when inserts land in many places at once (sequential names
/// that sort between older ones). False if neither neighbour takes any.
fn spill(children: &mut [Child], i: usize) -> bool {
    let neighbours = [
        i.checked_sub(1),
        Some(i + 1).filter(|&j| j < children.len()),
    ];
    for j in neighbours.into_iter().flatten() {
        let (l, r) = (i.min(j), i.max(j));
        let (MapNode::Leaf(a), MapNode::Leaf(b)) = (&*children[l].node, &*children[r].node) else {
            return false;
        };
        // Room for a few more inserts each, or the next insert spills again.
        if a.weight() + b.weight() > 2 * LEAF_BYTES - LEAF_BYTES / 4 {
            continue;
        }
        let mut joined = a.joined(b);
        let Some(cut) = joined.even_cut(LEAF_BYTES) else {
            continue;
        };
        let right = joined.split_at(&[cut]).pop().expect("two parts");
        // Each part is encoded afresh (its own prefix and bases): check.
        if !joined.fits(LEAF_BYTES) || !right.fits(LEAF_BYTES) {
            continue;
        }
        children[l] = Child::leaf(joined);
        children[r] = Child::leaf(right);
        return true;
    }
    false
}

/// Splits a branch over its capacity: the parts to its right as new
/// siblings. Ascending inserts land at the end (`appended`): the left parts
/// stay full there rather than every node being left half empty.
fn split_branch(children: &mut Vec<Child>, appended: bool) -> Vec<Child> {
    let n = children.len();
    let size = if appended {
        BRANCH_MAX
    } else {
        n.div_ceil(n.div_ceil(BRANCH_MAX))
    };
    let cuts: Vec<usize> = (1..).map(|k| k * size).take_while(|&c| c < n).collect();
    let mut parts: Vec<Child> = cuts
        .iter()
        .rev()
        .map(|&at| {
            let mut right = children.split_off(at);
            reword(&mut right);
            Child::new(right[0].least.clone(), Arc::new(MapNode::Branch(right)))
        })
        .collect();
    parts.reverse();
    children.shrink_to_fit();
    reword(children);
    parts
}

/// What [`change_in`] does at the leaf.
enum Change<'a> {
    /// Adds an absent name; `last`: it is above every other, so it goes at
    /// the end without a search.
    Insert { node: Node, last: bool },
    /// Rewrites a name if it is there, and says what it found.
    Update {
        change: &'a dyn Fn(&mut PersistedStat),
        data: NewData<'a>,
        acl: Option<&'a SharedAcl>,
        found: &'a mut Option<Updated>,
    },
}

/// Makes `change` to `name` in the subtree; returns the new right siblings
/// when the node split.
fn change_in(node: &mut Arc<MapNode>, name: &str, change: Change<'_>) -> Vec<Child> {
    let key = name.as_bytes();
    match Arc::make_mut(node) {
        MapNode::Leaf(leaf) => {
            match change {
                Change::Insert { node, last } => {
                    let at = if last {
                        leaf.len()
                    } else {
                        leaf.find(key).expect_err("insert of an absent name")
                    };
                    leaf.insert(at, name, node);
                }
                Change::Update {
                    change,
                    data,
                    acl,
                    found,
                } => {
                    if let Ok(at) = leaf.find(key) {
                        *found = Some(leaf.update(at, change, data, acl));
                    }
                }
            }
            // A heavy leaf is the parent's to lighten: it may spill into a
            // neighbour.
            Vec::new()
        }
        MapNode::Branch(children) => {
            let last = matches!(change, Change::Insert { last: true, .. });
            let i = if last {
                children.len() - 1
            } else {
                route(children, key)
            };
            // Only an insert can lower a subtree's least name (an update
            // of a name below it is a miss).
            let mut changed = matches!(change, Change::Insert { .. })
                && cmp_bytes(key, children[i].least.as_bytes()).is_lt();
            if changed {
                children[i].least = name.into();
            }
            let mut right = change_in(&mut children[i].node, name, change);
            if heavy_leaf(&children[i].node) {
                if spill(children, i) {
                    changed = true;
                } else {
                    right = split_heavy(&mut children[i].node);
                }
            }
            if right.is_empty() {
                if changed {
                    reword(children);
                }
                return Vec::new();
            }
            let added = right.len();
            children.splice(i + 1..i + 1, right);
            if children.len() <= BRANCH_MAX {
                reword(children);
                return Vec::new();
            }
            split_branch(children, i + 1 + added == children.len())
        }
    }
}

/// Removes a name known to be present and returns its node.
fn remove_from(node: &mut Arc<MapNode>, key: &[u8]) -> Node {
    match Arc::make_mut(node) {
        MapNode::Leaf(leaf) => {
            let at = leaf.find(key).expect("remove_from: name present");
            leaf.remove(at)
        }
        MapNode::Branch(children) => {
            let i = route(children, key);
            let removed = remove_from(&mut children[i].node, key);
            let mut changed = true;
            if entries(&children[i].node) == 0 {
                children.remove(i);
            } else if underfull(&children[i].node) && children.len() > 1 {
                rebalance(children, i);
            } else {
                changed = false;
            }
            // The removed name may have been a subtree's least one.
            for c in children.iter_mut() {
                if c.least.as_bytes() == key {
                    c.least = least_of(&c.node);
                    changed = true;
                }
            }
            if changed {
                reword(children);
            }
            removed
        }
    }
}

/// Joins the underfull child `i` with a neighbour if the two fit in one
/// node; two branches that do not are split evenly again. Two leaves that
/// do not stay as they are: an even split of entries of any size may leave
/// a part over its weight.
fn rebalance(children: &mut Vec<Child>, i: usize) {
    let left = if i > 0 { i - 1 } else { i };
    let joined = match (&*children[left].node, &*children[left + 1].node) {
        (MapNode::Leaf(a), MapNode::Leaf(b)) => {
            if a.weight() + b.weight() > LEAF_BYTES {
                return;
            }
            let joined = a.joined(b);
            if joined.weight() > LEAF_BYTES {
                return;
            }
            MapNode::Leaf(joined)
        }
        (MapNode::Branch(a), MapNode::Branch(b)) => {
            let mut joined: Vec<Child> = a.iter().chain(b).cloned().collect();
            let tail = if joined.len() > BRANCH_MAX {
                split_branch(&mut joined, false)
            } else {
                reword(&mut joined);
                Vec::new()
            };
            children[left].node = Arc::new(MapNode::Branch(joined));
            children.splice(left + 1..left + 2, tail);
            return;
        }
        _ => unreachable!("siblings at different depths"),
    };
    children[left].node = Arc::new(joined);
    children.remove(left + 1);
}

fn check_node(
    node: &MapNode,
    depth: usize,
    leaf_depth: &mut Option<usize>,
    count: &mut usize,
) -> Result<(), String> {
    let n = entries(node);
    if n == 0 {
        return Err(format!("an empty node at depth {depth}"));
    }
    match node {
        MapNode::Leaf(leaf) => {
            if *leaf_depth.get_or_insert(depth) != depth {
                return Err("leaves at different depths".into());
            }
            // A new child map adds a slot index to its parent's entry
            // without a split.
            if n > 1 && leaf.weight() > LEAF_BYTES + 4 * n {
                return Err(format!("a leaf of {n} entries weighs {}", leaf.weight()));
            }
            leaf.check()?;
            *count += n;
        }
        MapNode::Branch(children) => {
            if n > BRANCH_MAX {
                return Err(format!("a branch of {n} at depth {depth}"));
            }
            let mut reworded = children.to_vec();
            reword(&mut reworded);
            for (c, expected) in children.iter().zip(&reworded) {
                if (c.skip, c.word) != (expected.skip, expected.word) {
                    return Err(format!("stale routing word at depth {depth}"));
                }
                if c.least != least_of_subtree(&c.node) {
                    return Err(format!("stale least name at depth {depth}"));
                }
                check_node(&c.node, depth + 1, leaf_depth, count)?;
            }
        }
    }
    Ok(())
}

fn least_of_subtree(mut node: &MapNode) -> Name {
    loop {
        match node {
            MapNode::Leaf(leaf) => return leaf.name(0),
            MapNode::Branch(children) => node = &children[0].node,
        }
    }
}

/// Ascending iteration: the rest of the current leaf, then the subtrees
/// still to visit, innermost last.
pub(crate) struct Iter<'a> {
    pending: Vec<&'a [Child]>,
    leaf: Option<(&'a Leaf, usize)>,
}

impl<'a> Iter<'a> {
    fn descend(&mut self, mut node: &'a MapNode) {
        loop {
            match node {
                MapNode::Leaf(leaf) => {
                    self.leaf = Some((leaf, 0));
                    return;
                }
                MapNode::Branch(children) => {
                    self.pending.push(&children[1..]);
                    node = &children[0].node;
                }
            }
        }
    }
}

impl<'a> Iter<'a> {
    /// The next child as its leaf's shared prefix, the rest of its name
    /// and its node: no name is built, and the entry is decoded once.
    pub(crate) fn next_entry(&mut self) -> Option<(&'a str, &'a str, NodeRef<'a>)> {
        loop {
            if let Some((leaf, i)) = &mut self.leaf {
                let leaf: &'a Leaf = leaf;
                if *i < leaf.len() {
                    let at = *i;
                    *i += 1;
                    let (suffix, node) = leaf.suffix_and_node(at);
                    return Some((leaf.prefix(), suffix, node));
                }
                self.leaf = None;
            }
            let siblings = self.pending.last_mut()?;
            match siblings.split_first() {
                Some((next, rest)) => {
                    *siblings = rest;
                    self.descend(&next.node);
                }
                None => {
                    self.pending.pop();
                }
            }
        }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = (Name, NodeRef<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let (prefix, suffix, node) = self.next_entry()?;
        let mut name = Name::from(prefix);
        name.push_str(suffix);
        Some((name, node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{shared_acl, shared_bytes};
    use crate::packed_leaf::INLINE_DATA_MAX;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::ops::Bound;
    use stoa_proto::records::{Acl, Id};

    /// What the map should hold for one child.
    #[derive(Debug, Clone, PartialEq)]
    struct Model {
        data: Option<Vec<u8>>,
        acl: Vec<Acl>,
        stat: PersistedStat,
        kids: BTreeSet<String>,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, Model),
        Remove(u16),
        Update(
            u16,
            PersistedStat,
            Option<Option<Vec<u8>>>,
            Option<Vec<Acl>>,
        ),
        AddKid(u16, u16),
        RemoveKid(u16, u16),
        Clone,
    }

    /// Names of mixed lengths and scripts, so that byte order, the leaf's
    /// shared prefix (cut at a char boundary) and the word-at-a-time
    /// comparison all come into play.
    fn name(k: u16) -> String {
        match k % 5 {
            0 => format!("é{k:x}"),
            1 => format!("ée{}", "-".repeat(usize::from(k % 7))),
            _ => format!("node-{k:x}{}", "-".repeat(usize::from(k % 7))),
        }
    }

    fn acl_list(i: u8) -> Vec<Acl> {
        let id = |scheme: &str, id: &str| Id {
            scheme: scheme.into(),
            id: id.into(),
        };
        match i % 3 {
            0 => vec![Acl::open_unsafe()],
            1 => vec![Acl {
                perms: 1,
                id: id("world", "anyone"),
            }],
            _ => vec![
                Acl {
                    perms: 31,
                    id: id("digest", "a:b"),
                },
                Acl {
                    perms: 1,
                    id: id("ip", "10.0.0.0/8"),
                },
            ],
        }
    }

    fn stat() -> impl Strategy<Value = PersistedStat> {
        let wide = prop_oneof![
            Just(0i64),
            Just(i64::MIN),
            Just(i64::MAX),
            any::<i64>(),
            0..1000i64
        ];
        let narrow = prop_oneof![Just(0i32), Just(-1i32), Just(i32::MIN), any::<i32>()];
        (
            (
                wide.clone(),
                wide.clone(),
                wide.clone(),
                wide.clone(),
                wide.clone(),
            ),
            (narrow.clone(), narrow.clone(), narrow),
            (wide.clone(), wide),
        )
            .prop_map(
                |((czxid, mzxid, ctime, mtime, pzxid), (v, cv, av), (owner, same))| {
                    // Often the shape of a fresh node: the fields equal or zero.
                    if same % 2 == 0 {
                        PersistedStat::created(czxid, ctime, 0)
                    } else {
                        PersistedStat {
                            czxid,
                            mzxid,
                            ctime,
                            mtime,
                            version: v,
                            cversion: cv,
                            aversion: av,
                            ephemeral_owner: owner,
                            pzxid,
                        }
                    }
                },
            )
    }

    /// Data of every kind a leaf stores differently: null, empty, inline,
    /// the largest inline, the smallest in a slot, big.
    fn data() -> impl Strategy<Value = Option<Vec<u8>>> {
        let len = prop_oneof![
            Just(0usize),
            1..120usize,
            Just(INLINE_DATA_MAX),
            Just(INLINE_DATA_MAX + 1),
            Just(2000),
        ];
        let bytes = (len, any::<u8>()).prop_map(|(n, b)| vec![b; n]);
        prop_oneof![1 => Just(None), 6 => bytes.prop_map(Some)]
    }

    fn model() -> impl Strategy<Value = Model> {
        (data(), any::<u8>(), stat()).prop_map(|(data, acl, stat)| Model {
            data,
            acl: acl_list(acl),
            stat,
            kids: BTreeSet::new(),
        })
    }

    fn op(keys: u16) -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0..keys, model()).prop_map(|(k, m)| Op::Insert(k, m)),
            3 => (0..keys).prop_map(Op::Remove),
            3 => (0..keys, stat(), prop::option::of(data()), prop::option::of(any::<u8>()))
                .prop_map(|(k, s, d, a)| Op::Update(k, s, d, a.map(acl_list))),
            2 => (0..keys, 0..8u16).prop_map(|(k, c)| Op::AddKid(k, c)),
            1 => (0..keys, 0..8u16).prop_map(|(k, c)| Op::RemoveKid(k, c)),
            1 => Just(Op::Clone),
        ]
    }

    fn loose(m: &Model) -> Node {
        Node::new(shared_bytes(m.data.as_deref()), shared_acl(&m.acl), m.stat)
    }

    fn assert_same(map: &ChildMap, model: &BTreeMap<String, Model>) {
        assert_eq!(map.check(), Ok(()));
        assert_eq!(map.len(), model.len());
        let seen: Vec<(String, Model)> = map
            .iter()
            .map(|(name, n)| {
                let m = Model {
                    data: n.nullable_data().map(<[u8]>::to_vec),
                    acl: n.acl().to_vec(),
                    stat: n.persisted(),
                    kids: n.children().map(String::from).collect(),
                };
                (name.to_string(), m)
            })
            .collect();
        let expected: Vec<(String, Model)> =
            model.iter().map(|(k, m)| (k.clone(), m.clone())).collect();
        assert_eq!(seen, expected);
        for (k, m) in model {
            // The walk's shortcut to a child's children agrees.
            let kids: Option<BTreeSet<String>> = map.children_of(k).map(|c| {
                c.map_or_else(BTreeSet::new, |c| {
                    c.iter().map(|(n, _)| n.to_string()).collect()
                })
            });
            assert_eq!(kids.as_ref(), Some(&m.kids));
        }
        assert!(map.children_of("no such name \u{0}").is_none());
        assert_eq!(
            map.last_key().map(String::from),
            model.keys().last().cloned()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Proves the map holds what a `BTreeMap` of the same changes holds
        /// (names, data of every size around the inline limit, ACLs, stats
        /// of any values, children), keeps its and its leaves' invariants,
        /// and that clones taken along the way stay as they were.
        #[test]
        fn behaves_as_a_btree_map(
            keys in prop_oneof![Just(40u16), Just(600u16)],
            ops in prop::collection::vec(op(600), 1..600),
        ) {
            let mut map = ChildMap::new();
            let mut model: BTreeMap<String, Model> = BTreeMap::new();
            let mut frozen = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(k, m) => {
                        let k = name(k % keys);
                        let fresh = !model.contains_key(&k);
                        prop_assert_eq!(map.insert_new(&k, loose(&m)), fresh);
                        model.entry(k).or_insert(m);
                    }
                    Op::Remove(k) => {
                        let k = name(k % keys);
                        // Only a node without children leaves the tree.
                        if model.get(&k).is_some_and(|m| !m.kids.is_empty()) {
                            continue;
                        }
                        let removed = map.remove(&k).map(|n| Model {
                            data: n.data.as_option().map(<[u8]>::to_vec),
                            acl: n.acl.slice.to_vec(),
                            stat: n.stat,
                            kids: BTreeSet::new(),
                        });
                        prop_assert_eq!(removed, model.remove(&k));
                    }
                    Op::Update(k, stat, data, acl) => {
                        let k = name(k % keys);
                        let expected = model.get_mut(&k).map(|m| {
                            let found = Updated {
                                old_data_len: m.data.as_ref().map_or(0, Vec::len),
                                child_count: m.kids.len(),
                                stat,
                            };
                            m.stat = stat;
                            if let Some(d) = &data {
                                m.data = d.clone();
                            }
                            if let Some(a) = &acl {
                                m.acl = a.clone();
                            }
                            found
                        });
                        let acl = acl.map(|a| shared_acl(&a));
                        let new_data = data.as_ref().map(|d| d.as_deref());
                        let updated = map.update(&k, &|s| *s = stat, new_data, acl.as_ref());
                        prop_assert_eq!(updated, expected);
                    }
                    Op::AddKid(k, c) => {
                        let k = name(k % keys);
                        let Some(m) = model.get_mut(&k) else {
                            prop_assert!(map.children_mut(&k).is_none());
                            continue;
                        };
                        let kid = name(c);
                        let fresh = m.kids.insert(kid.clone());
                        let kids = map.children_mut(&k).expect("present");
                        let node = Node::new(shared_bytes(Some(b"k")), shared_acl(&[]), PersistedStat::default());
                        prop_assert_eq!(kids.insert_new(&kid, node), fresh);
                    }
                    Op::RemoveKid(k, c) => {
                        let k = name(k % keys);
                        let Some(m) = model.get_mut(&k) else {
                            continue;
                        };
                        let kid = name(c);
                        let had = m.kids.remove(&kid);
                        let kids = map.children_mut(&k).expect("present");
                        prop_assert_eq!(kids.remove(&kid).is_some(), had);
                    }
                    Op::Clone => frozen.push((map.clone(), model.clone())),
                }
                prop_assert_eq!(map.len(), model.len());
            }
            assert_same(&map, &model);
            for (map, model) in &frozen {
                assert_same(map, model);
            }
            // Every name, and probes outside the prefixes the names share.
            let probes = ["", "a", "node", "node-", "node-0", "nodf", "z", "é", "ée", "\u{7f}"];
            for k in (0..keys).map(name).chain(probes.map(String::from)) {
                prop_assert_eq!(map.get(&k).map(|n| n.nullable_data().map(<[u8]>::to_vec)), model.get(&k).map(|m| m.data.clone()));
                prop_assert_eq!(map.contains_key(&k), model.contains_key(&k));
                let after: Vec<String> = map.iter_after(Some(&k)).map(|(k, _)| k.into()).collect();
                let expected: Vec<String> = model
                    .range::<String, _>((Bound::Excluded(&k), Bound::Unbounded))
                    .map(|(k, _)| k.clone())
                    .collect();
                prop_assert_eq!(after, expected);
            }
        }

        /// Proves the word-at-a-time comparison is byte order.
        #[test]
        fn cmp_bytes_is_byte_order(
            a in prop::collection::vec(prop::sample::select(vec![0u8, b'a', b'b', 0xff]), 0..20),
            b in prop::collection::vec(prop::sample::select(vec![0u8, b'a', b'b', 0xff]), 0..20),
        ) {
            prop_assert_eq!(cmp_bytes(&a, &b), a.cmp(&b));
            prop_assert_eq!(cmp_bytes(&a, &a), Ordering::Equal);
        }
    }

    fn leaves_of(map: &ChildMap) -> Vec<&Leaf> {
        let mut out = Vec::new();
        let mut stack: Vec<&MapNode> = map.root.as_deref().into_iter().collect();
        while let Some(node) = stack.pop() {
            match node {
                MapNode::Leaf(leaf) => out.push(leaf),
                MapNode::Branch(children) => stack.extend(children.iter().map(|c| &*c.node)),
            }
        }
        out
    }

    fn plain(data: &[u8], zxid: i64) -> Node {
        Node::new(
            shared_bytes(Some(data)),
            shared_acl(&[Acl::open_unsafe()]),
            PersistedStat::created(zxid, 1_700_000_000_000 + zxid, 0),
        )
    }

    #[test]
    fn an_update_of_an_absent_name_changes_nothing() {
        // Proves the single-walk update: a miss below every name (where the
        // route goes to the first subtree) or between names must not touch
        // the branches' least names on its way down.
        let key = |k: u32| format!("k{k:05}");
        let mut map = ChildMap::new();
        for k in 1..=2_000u32 {
            assert!(map.insert_new(&key(k * 2), plain(&[b'x'; 20], k.into())));
        }
        let before: Vec<Name> = map.iter().map(|(name, _)| name).collect();
        let frozen = map.clone();
        let stat = PersistedStat::default();
        for absent in ["a", "k00000", "k00003", "k02001", "z"] {
            assert_eq!(
                map.update(absent, &|s| *s = stat, Some(Some(b"new")), None),
                None
            );
            assert_eq!(map.check(), Ok(()));
        }
        let after: Vec<Name> = map.iter().map(|(name, _)| name).collect();
        assert_eq!(after, before);
        assert_eq!(frozen.check(), Ok(()));
        let found = map.update(&key(2), &|s| s.version = 7, Some(Some(b"y")), None);
        assert_eq!(
            found.map(|u| (u.old_data_len, u.stat.version)),
            Some((20, 7))
        );
        assert_eq!(
            map.get(&key(2)).map(|n| n.data().to_vec()),
            Some(b"y".to_vec())
        );
        assert_eq!(frozen.get(&key(2)).map(|n| n.data().len()), Some(20));
    }

    #[test]
    fn ascending_inserts_fill_leaves_and_removals_merge_them() {
        // Proves sequential names (the common znode pattern) pack leaves
        // nearly full rather than half empty, that a thinned map merges its
        // leaves, and that removing everything leaves no root.
        let key = |k: u32| format!("k{k:05}");
        let mut map = ChildMap::new();
        for k in 0..10_000u32 {
            assert!(map.insert_new(&key(k), plain(&[b'x'; 20], k.into())));
        }
        assert_eq!(map.check(), Ok(()));
        let weight: usize = leaves_of(&map).iter().map(|l| l.weight()).sum();
        let full = weight.div_ceil(LEAF_BYTES);
        assert!(
            leaves_of(&map).len() <= full + full / 10,
            "{} leaves for {full}",
            leaves_of(&map).len()
        );
        let frozen = map.clone();
        for k in (0..10_000u32).filter(|k| k % 16 != 0) {
            assert!(map.remove(&key(k)).is_some());
        }
        assert_eq!(map.check(), Ok(()));
        let weight: usize = leaves_of(&map).iter().map(|l| l.weight()).sum();
        assert!(leaves_of(&map).len() <= 2 * weight.div_ceil(LEAF_BYTES / 4));
        for k in (0..10_000u32).step_by(16).rev() {
            assert!(map.remove(&key(k)).is_some());
            if k % 997 == 0 {
                assert_eq!(map.check(), Ok(()));
            }
        }
        assert!(map.is_empty() && map.root.is_none());
        assert_eq!(frozen.len(), 10_000);
        assert!(frozen
            .iter()
            .map(|(k, _)| k.to_string())
            .eq((0..10_000).map(key)));
    }

    #[test]
    fn sequential_names_that_sort_between_older_ones_still_fill_leaves() {
        // Proves the spill into neighbours: the benchmark's `<nonce>-0-<seq>`
        // names land a place or two after the last insert, between older
        // names, where splitting alone leaves leaves about 70% full.
        let mut map = ChildMap::new();
        for k in 1..=20_000u32 {
            let name = format!("5f3a9c21-0-{k}");
            assert!(map.insert_new(&name, plain(&[b'x'; 100], k.into())));
        }
        assert_eq!(map.check(), Ok(()));
        let leaves = leaves_of(&map);
        let weight: usize = leaves.iter().map(|l| l.weight()).sum();
        let fill = weight as f64 / (leaves.len() * LEAF_BYTES) as f64;
        assert!(fill >= 0.75, "leaves {fill:.2} full");
    }

    #[test]
    fn a_leaf_packs_a_fresh_znode_into_a_few_bytes_beside_its_data() {
        // Proves the point of the packed leaf: sequential siblings with
        // 100-byte data cost little more than their data.
        let mut map = ChildMap::new();
        for k in 0..1_000u32 {
            let name = format!("1a2b3c4d-0-{k}");
            assert!(map.insert_new(&name, plain(&[b'x'; 100], (k as i64) * 3)));
        }
        let weight: usize = leaves_of(&map).iter().map(|l| l.weight()).sum();
        let per_node = weight as f64 / 1_000.0;
        assert!(per_node < 100.0 + 16.0, "{per_node} bytes per znode");
    }

    #[test]
    fn long_names_that_lose_their_shared_prefix_take_wide_offsets_until_cut() {
        // Ten names sharing a 30 KiB prefix pack into one small leaf; a
        // name outside that prefix re-encodes them all with the whole name
        // as suffix, 300 KiB at once, past what two-byte starts can hold.
        let prefix = "x".repeat(30 * 1024);
        let mut map = ChildMap::new();
        for k in 0..10u8 {
            let name = format!("{prefix}{k}");
            assert!(map.insert_new(&name, plain(b"d", k.into())));
        }
        assert_eq!(leaves_of(&map).len(), 1);
        assert!(map.insert_new("y", plain(b"d", 10)));
        assert_eq!(map.check(), Ok(()));
        assert_eq!(map.len(), 11);
        for k in 0..10u8 {
            assert!(map.contains_key(&format!("{prefix}{k}")));
        }
        assert!(map.contains_key("y"));
        assert!(leaves_of(&map).iter().all(|l| l.len() == 1));
    }

    #[test]
    fn a_deep_chain_drops_without_recursion() {
        // Proves a chain of nested child maps (a client can make one) is
        // dropped, shared or not, on a thread whose stack a recursive drop
        // would overflow.
        let run = || {
            let mut top = ChildMap::new();
            let mut map = &mut top;
            for _ in 0..20_000 {
                map.insert_new("a", plain(b"", 1));
                map = map.children_mut("a").expect("just made");
            }
            let frozen = top.clone();
            drop(top);
            drop(frozen);
        };
        std::thread::Builder::new()
            .stack_size(128 << 10)
            .spawn(run)
            .unwrap()
            .join()
            .expect("no stack overflow");
    }
}
