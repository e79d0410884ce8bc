//! A persistent ordered set: a copy-on-write B+tree.
//!
//! A parent's children live here. The red-black tree this replaces spent
//! two allocations (a tree node and an entry, some 80 bytes) on every
//! child; here elements sit inline in leaves of up to [`MAX`] of them, so a
//! child costs little more than its own size. Cloning is O(1) and a clone is
//! a frozen view, as with the other persistent maps of the tree: nodes are
//! shared until one side changes them, and a change copies only the nodes
//! on its path ([`Arc::make_mut`]), in place when nothing shares them.
//!
//! Invariants (checked by [`OrdSet::check`]): elements strictly ascending;
//! every leaf at the same depth; no node empty or above [`MAX`] entries;
//! a branch's entry carries the least element of its subtree exactly.

use std::borrow::Borrow;
use std::sync::Arc;

/// Elements per leaf and children per branch. Tests use a small fanout so
/// that a few thousand elements make a tree four levels deep.
const MAX: usize = if cfg!(test) { 8 } else { 64 };
/// Below this many entries a node is merged with (or topped up from) a
/// sibling after a removal.
const MIN: usize = MAX / 4;

#[derive(Debug, Clone)]
enum Node<T> {
    Leaf(Vec<T>),
    Branch(Vec<Child<T>>),
}

/// A branch's entry: a subtree and its least element, which routes lookups.
#[derive(Debug, Clone)]
struct Child<T> {
    least: T,
    node: Arc<Node<T>>,
}

#[derive(Debug, Clone)]
pub struct OrdSet<T> {
    root: Option<Arc<Node<T>>>,
    len: usize,
}

impl<T> Default for OrdSet<T> {
    fn default() -> Self {
        OrdSet { root: None, len: 0 }
    }
}

impl<T: Ord + Clone> OrdSet<T> {
    /// An empty set; allocates nothing.
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let mut node = match &self.root {
            Some(root) => &**root,
            None => return false,
        };
        loop {
            match node {
                Node::Leaf(items) => {
                    return items.binary_search_by(|x| x.borrow().cmp(key)).is_ok();
                }
                Node::Branch(children) => node = &children[route(children, key)].node,
            }
        }
    }

    /// The greatest element.
    pub fn last(&self) -> Option<&T> {
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Leaf(items) => return items.last(),
                Node::Branch(children) => node = &children.last()?.node,
            }
        }
    }

    /// Adds `value`; false (and the set unchanged) if an equal one is there.
    pub fn insert(&mut self, value: T) -> bool {
        if self.contains(&value) {
            // Checked first so that a present value copies no shared node.
            return false;
        }
        let Some(root) = self.root.as_mut() else {
            self.root = Some(Arc::new(Node::Leaf(vec![value])));
            self.len = 1;
            return true;
        };
        if let Some(right) = insert_into(root, value) {
            let left = self.root.take().expect("a root was split");
            let least = least_of(&left).clone();
            self.root = Some(Arc::new(Node::Branch(vec![
                Child { least, node: left },
                right,
            ])));
        }
        self.len += 1;
        true
    }

    /// Removes the element equal to `key`; false if there is none.
    pub fn remove<Q>(&mut self, key: &Q) -> bool
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        if !self.contains(key) {
            return false;
        }
        let root = self
            .root
            .as_mut()
            .expect("a set holding the key has a root");
        remove_from(root, key);
        self.len -= 1;
        // A branch left with one child hands the root down; an empty leaf
        // (the last element gone) leaves no root.
        loop {
            match self.root.as_deref() {
                Some(Node::Branch(children)) if children.len() == 1 => {
                    self.root = Some(children[0].node.clone());
                }
                Some(node) if entries(node) == 0 => self.root = None,
                _ => break,
            }
        }
        true
    }

    /// Elements in ascending order.
    pub fn iter(&self) -> Iter<'_, T> {
        self.iter_after(None)
    }

    /// Elements greater than `after` (all of them when `None`), ascending.
    /// Reaching the first costs one descent, not a scan.
    pub fn iter_after<Q>(&self, after: Option<&Q>) -> Iter<'_, T>
    where
        T: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let mut iter = Iter {
            pending: Vec::new(),
            leaf: &[],
            remaining: self.len,
        };
        let Some(mut node) = self.root.as_deref() else {
            return iter;
        };
        loop {
            match node {
                Node::Branch(children) => {
                    let i = after.map_or(0, |key| route(children, key));
                    iter.pending.push(&children[i + 1..]);
                    node = &children[i].node;
                }
                Node::Leaf(items) => {
                    let start = after.map_or(0, |key| items.partition_point(|x| x.borrow() <= key));
                    iter.leaf = &items[start..];
                    break;
                }
            }
        }
        if after.is_some() {
            // Only a full iteration knows its length up front.
            iter.remaining = usize::MAX;
        }
        iter
    }

    /// Checks the invariants in the module comment; for tests.
    pub fn check(&self) -> Result<(), String> {
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
            return Err(format!("{count} elements, length says {}", self.len));
        }
        let mut previous: Option<&T> = None;
        for x in self.iter() {
            if previous.is_some_and(|p| p >= x) {
                return Err("elements not strictly ascending".into());
            }
            previous = Some(x);
        }
        Ok(())
    }
}

/// The entry of `children` whose subtree would hold `key`: the last one
/// whose least element is not above it (the first if none).
fn route<T, Q>(children: &[Child<T>], key: &Q) -> usize
where
    T: Borrow<Q>,
    Q: Ord + ?Sized,
{
    children
        .partition_point(|c| c.least.borrow() <= key)
        .saturating_sub(1)
}

fn least_of<T>(node: &Node<T>) -> &T {
    match node {
        Node::Leaf(items) => &items[0],
        Node::Branch(children) => &children[0].least,
    }
}

fn entries<T>(node: &Node<T>) -> usize {
    match node {
        Node::Leaf(items) => items.len(),
        Node::Branch(children) => children.len(),
    }
}

/// Inserts a value known to be absent; returns the new right sibling when
/// the node split.
fn insert_into<T: Ord + Clone>(node: &mut Arc<Node<T>>, value: T) -> Option<Child<T>> {
    match Arc::make_mut(node) {
        Node::Leaf(items) => {
            let at = items.partition_point(|x| *x < value);
            items.insert(at, value);
            if items.len() <= MAX {
                return None;
            }
            // Ascending inserts (sequential znodes) land at the end: keep
            // the left leaf full there rather than leave every leaf half
            // empty.
            let split_at = if at + 1 == items.len() {
                MAX
            } else {
                items.len() / 2
            };
            let right = items.split_off(split_at);
            Some(Child {
                least: right[0].clone(),
                node: Arc::new(Node::Leaf(right)),
            })
        }
        Node::Branch(children) => {
            let i = route(children, &value);
            if value < children[i].least {
                children[i].least = value.clone();
            }
            let right = insert_into(&mut children[i].node, value)?;
            children.insert(i + 1, right);
            if children.len() <= MAX {
                return None;
            }
            let split_at = if i + 2 == children.len() {
                MAX
            } else {
                children.len() / 2
            };
            let right = children.split_off(split_at);
            Some(Child {
                least: right[0].least.clone(),
                node: Arc::new(Node::Branch(right)),
            })
        }
    }
}

/// Removes a value known to be present.
fn remove_from<T, Q>(node: &mut Arc<Node<T>>, key: &Q)
where
    T: Ord + Clone + Borrow<Q>,
    Q: Ord + ?Sized,
{
    match Arc::make_mut(node) {
        Node::Leaf(items) => {
            let at = items
                .binary_search_by(|x| x.borrow().cmp(key))
                .unwrap_or_else(|_| panic!("remove_from: key absent"));
            items.remove(at);
        }
        Node::Branch(children) => {
            let i = route(children, key);
            remove_from(&mut children[i].node, key);
            match entries(&children[i].node) {
                // Its last element gone (a node may hold one: see the
                // uneven split in `insert_into`).
                0 => {
                    children.remove(i);
                }
                n if n < MIN && children.len() > 1 => rebalance(children, i),
                _ => {}
            }
            // The removed element may have been a subtree's least one.
            for c in children.iter_mut() {
                if c.least.borrow() == key {
                    c.least = least_of(&c.node).clone();
                }
            }
        }
    }
}

/// Joins the underfull child `i` with a neighbour; splits the two evenly
/// again if together they are more than a node holds.
fn rebalance<T: Ord + Clone>(children: &mut Vec<Child<T>>, i: usize) {
    let left = if i > 0 { i - 1 } else { i };
    let right_child = children.remove(left + 1);
    let mut right_node = Arc::unwrap_or_clone(right_child.node);
    let left_node = Arc::make_mut(&mut children[left].node);
    match (left_node, &mut right_node) {
        (Node::Leaf(a), Node::Leaf(b)) => {
            a.append(b);
            if a.len() > MAX {
                let tail = a.split_off(a.len() / 2);
                children.insert(
                    left + 1,
                    Child {
                        least: tail[0].clone(),
                        node: Arc::new(Node::Leaf(tail)),
                    },
                );
            }
        }
        (Node::Branch(a), Node::Branch(b)) => {
            a.append(b);
            if a.len() > MAX {
                let tail = a.split_off(a.len() / 2);
                children.insert(
                    left + 1,
                    Child {
                        least: tail[0].least.clone(),
                        node: Arc::new(Node::Branch(tail)),
                    },
                );
            }
        }
        _ => unreachable!("siblings at different depths"),
    }
}

fn check_node<T: Ord>(
    node: &Node<T>,
    depth: usize,
    leaf_depth: &mut Option<usize>,
    count: &mut usize,
) -> Result<(), String> {
    let n = entries(node);
    if n == 0 || n > MAX {
        return Err(format!("a node with {n} entries at depth {depth}"));
    }
    match node {
        Node::Leaf(items) => {
            if *leaf_depth.get_or_insert(depth) != depth {
                return Err("leaves at different depths".into());
            }
            *count += items.len();
        }
        Node::Branch(children) => {
            for c in children {
                if c.least != *least_of_subtree(&c.node) {
                    return Err(format!("stale least element at depth {depth}"));
                }
                check_node(&c.node, depth + 1, leaf_depth, count)?;
            }
        }
    }
    Ok(())
}

fn least_of_subtree<T>(mut node: &Node<T>) -> &T {
    loop {
        match node {
            Node::Leaf(items) => return &items[0],
            Node::Branch(children) => node = &children[0].node,
        }
    }
}

/// Ascending iteration: the rest of the current leaf, then the subtrees
/// still to visit, innermost last.
pub struct Iter<'a, T> {
    pending: Vec<&'a [Child<T>]>,
    leaf: &'a [T],
    /// Elements left when known (a full iteration), else `usize::MAX`.
    remaining: usize,
}

impl<'a, T> Iter<'a, T> {
    fn descend(&mut self, mut node: &'a Node<T>) {
        loop {
            match node {
                Node::Leaf(items) => {
                    self.leaf = items;
                    return;
                }
                Node::Branch(children) => {
                    self.pending.push(&children[1..]);
                    node = &children[0].node;
                }
            }
        }
    }
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        loop {
            if let Some((first, rest)) = self.leaf.split_first() {
                self.leaf = rest;
                if self.remaining != usize::MAX {
                    self.remaining -= 1;
                }
                return Some(first);
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

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.remaining == usize::MAX {
            (self.leaf.len(), None)
        } else {
            (self.remaining, Some(self.remaining))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        Remove(u16),
        Clone,
    }

    fn op(keys: u16) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..keys).prop_map(Op::Insert),
            3 => (0..keys).prop_map(Op::Remove),
            1 => Just(Op::Clone),
        ]
    }

    fn assert_same(set: &OrdSet<u16>, model: &BTreeSet<u16>) {
        assert_eq!(set.check(), Ok(()));
        assert_eq!(set.len(), model.len());
        assert!(set.iter().eq(model.iter()));
        assert_eq!(set.iter().size_hint(), (model.len(), Some(model.len())));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Proves the set behaves as a `BTreeSet` under inserts and removes,
        /// keeps its invariants, and that clones taken along the way stay as
        /// they were (copy-on-write never writes through to a clone).
        #[test]
        fn behaves_as_a_btree_set(
            keys in prop_oneof![Just(40u16), Just(3000u16)],
            ops in prop::collection::vec(op(3000), 1..1500),
        ) {
            let mut set = OrdSet::new();
            let mut model = BTreeSet::new();
            let mut frozen: Vec<(OrdSet<u16>, BTreeSet<u16>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(k) => {
                        let k = k % keys;
                        prop_assert_eq!(set.insert(k), model.insert(k));
                    }
                    Op::Remove(k) => {
                        let k = k % keys;
                        prop_assert_eq!(set.remove(&k), model.remove(&k));
                    }
                    Op::Clone => frozen.push((set.clone(), model.clone())),
                }
                prop_assert_eq!(set.len(), model.len());
            }
            assert_same(&set, &model);
            prop_assert_eq!(set.last(), model.last());
            for (set, model) in &frozen {
                assert_same(set, model);
            }
            for k in 0..keys {
                prop_assert_eq!(set.contains(&k), model.contains(&k));
                let after: Vec<_> = set.iter_after(Some(&k)).copied().collect();
                let expected: Vec<_> = model.range(k + 1..).copied().collect();
                prop_assert_eq!(after, expected);
            }
        }
    }

    #[test]
    fn ascending_inserts_fill_leaves() {
        // Proves sequential names (the common znode pattern) pack leaves
        // full rather than half empty, and that removing them all in order
        // or out of order leaves an empty set without a root.
        let mut set = OrdSet::new();
        for k in 0..10_000u32 {
            assert!(set.insert(k));
        }
        assert_eq!(set.check(), Ok(()));
        assert_eq!(leaf_count(&set), 10_000usize.div_ceil(MAX));
        let frozen = set.clone();
        // Thinned to one in MAX, leaves are merged rather than left with
        // an element each.
        for k in (0..10_000u32).filter(|k| k % MAX as u32 != 0) {
            assert!(set.remove(&k));
        }
        assert_eq!(set.check(), Ok(()));
        assert!(
            leaf_count(&set) <= set.len().div_ceil(MIN),
            "{}",
            leaf_count(&set)
        );
        for k in (0..10_000u32).step_by(MAX).rev() {
            assert!(set.remove(&k));
            if k % 997 == 0 {
                assert_eq!(set.check(), Ok(()));
            }
        }
        assert!(set.is_empty() && set.root.is_none());
        assert_eq!(frozen.len(), 10_000);
        assert!(frozen.iter().copied().eq(0..10_000));
    }

    fn leaf_count<T>(set: &OrdSet<T>) -> usize {
        let mut leaves = 0;
        let mut stack: Vec<&Node<T>> = set.root.as_deref().into_iter().collect();
        while let Some(node) = stack.pop() {
            match node {
                Node::Leaf(_) => leaves += 1,
                Node::Branch(children) => stack.extend(children.iter().map(|c| &*c.node)),
            }
        }
        leaves
    }

    #[test]
    fn lookups_by_borrowed_key() {
        // Proves a set of owned strings is searched and trimmed by &str.
        let mut set: OrdSet<String> = OrdSet::new();
        for name in ["b", "a", "c"] {
            set.insert(name.to_owned());
        }
        assert!(set.contains("a"));
        assert_eq!(set.iter_after(Some("a")).collect::<Vec<_>>(), ["b", "c"]);
        assert!(set.remove("b"));
        assert!(!set.remove("b"));
        assert_eq!(set.iter().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(set.iter_after::<str>(None).count(), 2);
    }
}
