//! A persistent ordered map: a copy-on-write B+tree.
//!
//! A parent's children live here, keyed by name, each child node inline in
//! a leaf. The red-black tree of names plus hash map of paths this
//! replaced spent four allocations (some 200 bytes) on every child besides
//! the node itself. Cloning is O(1) and a clone is a frozen view, as with the
//! other persistent maps of the tree: nodes are shared until one side
//! changes them, and a change copies only the nodes on its path
//! ([`Arc::make_mut`]), in place when nothing shares them.
//!
//! Keys are byte strings (`AsRef<[u8]>`) in byte order, so a branch can
//! route by integer words (see [`Child`]).
//!
//! Invariants (checked by [`OrdMap::check`]): keys strictly ascending;
//! every leaf at the same depth; no node empty or above its capacity;
//! a branch's entry carries the least key of its subtree exactly, and
//! routing words that match it.

use std::cmp::Ordering;
use std::sync::Arc;

/// Entries per leaf. Each holds a whole znode (about 120 bytes), and a
/// write after a snapshot clone copies the leaf it lands in: small leaves
/// keep that copy (and the memory a snapshot pins) small.
const LEAF_MAX: usize = if cfg!(test) { 8 } else { 16 };
/// Children per branch.
const BRANCH_MAX: usize = if cfg!(test) { 8 } else { 64 };

/// Below a quarter full a node is merged with (or topped up from) a
/// sibling after a removal.
fn min_entries(max: usize) -> usize {
    (max / 4).max(2)
}

#[derive(Debug, Clone)]
enum Node<K, V> {
    Leaf(Vec<(K, V)>),
    Branch(Vec<Child<K, V>>),
}

/// A branch's entry: a subtree and its least key, which routes lookups.
#[derive(Debug, Clone)]
struct Child<K, V> {
    least: K,
    /// How many leading bytes all least keys of this branch share (the same
    /// in every entry of a branch), and the eight bytes of `least` after
    /// them: a lookup compares these words as integers and reads a name
    /// only on a tie. Siblings share long prefixes (`lock-0000000042`), so
    /// comparing names from their start spent most of a lookup. Set by
    /// [`reword`] whenever a branch's entries change.
    skip: u32,
    word: u64,
    node: Arc<Node<K, V>>,
}

impl<K, V> Child<K, V> {
    fn new(least: K, node: Arc<Node<K, V>>) -> Self {
        Child {
            least,
            skip: 0,
            word: 0,
            node,
        }
    }
}

/// The eight bytes of `key` from `at` on, zero-padded, as an integer that
/// orders like the bytes. (Shifted in byte by byte: copying a slice of
/// variable length is a library call.)
fn word_at(key: &[u8], at: usize) -> u64 {
    key.get(at..)
        .unwrap_or_default()
        .iter()
        .take(8)
        .enumerate()
        .fold(0u64, |word, (i, &b)| word | u64::from(b) << (56 - 8 * i))
}

/// Sets every entry's `skip` and `word` after a branch's entries changed.
/// The entries are sorted, so the prefix all least keys share is the one
/// the first and last share.
fn reword<K: AsRef<[u8]>, V>(children: &mut [Child<K, V>]) {
    let (Some(first), Some(last)) = (children.first(), children.last()) else {
        return;
    };
    let (a, b) = (first.least.as_ref(), last.least.as_ref());
    let skip = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let skip_u32 = u32::try_from(skip).unwrap_or(u32::MAX);
    for c in children {
        c.skip = skip_u32;
        c.word = word_at(c.least.as_ref(), skip);
    }
}

#[derive(Debug, Clone)]
pub struct OrdMap<K, V> {
    root: Option<Arc<Node<K, V>>>,
    len: usize,
}

impl<K, V> Default for OrdMap<K, V> {
    fn default() -> Self {
        OrdMap { root: None, len: 0 }
    }
}

impl<K: AsRef<[u8]> + Clone, V: Clone> OrdMap<K, V> {
    /// An empty map; allocates nothing.
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        Q: AsRef<[u8]> + ?Sized,
    {
        let key = key.as_ref();
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Leaf(items) => return Some(&items[position(items, key)?].1),
                Node::Branch(children) => node = &children[route(children, key)].node,
            }
        }
    }

    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        Q: AsRef<[u8]> + ?Sized,
    {
        self.get(key).is_some()
    }

    /// The value under `key`, for changing; copies the shared nodes on
    /// its path first (a miss may copy some for nothing: callers look up
    /// what they know is there).
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        Q: AsRef<[u8]> + ?Sized,
    {
        let key = key.as_ref();
        let mut node = Arc::make_mut(self.root.as_mut()?);
        loop {
            match node {
                Node::Leaf(items) => {
                    let at = position(items, key)?;
                    return Some(&mut items[at].1);
                }
                Node::Branch(children) => {
                    let i = route(children, key);
                    node = Arc::make_mut(&mut children[i].node);
                }
            }
        }
    }

    /// Adds `value` under `key`; false (and the map unchanged) if the key
    /// is there. A key above every other (sequential names, a snapshot's
    /// siblings in order) goes down the rightmost path without a search.
    pub fn insert_new(&mut self, key: K, value: V) -> bool {
        let last = match self.last_key() {
            None => {
                self.root = Some(Arc::new(Node::Leaf(vec![(key, value)])));
                self.len = 1;
                return true;
            }
            Some(last) => cmp_bytes(last.as_ref(), key.as_ref()).is_lt(),
        };
        if !last && self.contains_key(key.as_ref()) {
            return false;
        }
        let root = self
            .root
            .as_mut()
            .expect("a map with a last key has a root");
        if let Some(right) = insert_into(root, key, value, last) {
            self.grow_root(right);
        }
        self.len += 1;
        true
    }

    /// The root split: a new root over it and `right`, its new sibling.
    fn grow_root(&mut self, right: Child<K, V>) {
        let left = self.root.take().expect("a root was split");
        let least = least_of(&left).clone();
        let mut children = vec![Child::new(least, left), right];
        reword(&mut children);
        self.root = Some(Arc::new(Node::Branch(children)));
    }

    /// The greatest key.
    pub fn last_key(&self) -> Option<&K> {
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Leaf(items) => return items.last().map(|(k, _)| k),
                Node::Branch(children) => node = &children.last()?.node,
            }
        }
    }

    /// Removes the entry under `key` and returns its value.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        Q: AsRef<[u8]> + ?Sized,
    {
        let key = key.as_ref();
        if !self.contains_key(key) {
            return None;
        }
        let root = self.root.as_mut()?;
        let value = remove_from(root, key);
        self.len -= 1;
        // A branch left with one child hands the root down; an empty node
        // (the last entry gone) leaves no root.
        loop {
            match self.root.as_deref() {
                Some(Node::Branch(children)) if children.len() == 1 => {
                    self.root = Some(children[0].node.clone());
                }
                Some(node) if entries(node) == 0 => self.root = None,
                _ => break,
            }
        }
        Some(value)
    }

    /// Entries in ascending key order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        self.iter_after::<[u8]>(None)
    }

    /// Entries whose key is above `after` (all when `None`), ascending.
    /// Reaching the first costs one descent, not a scan.
    pub fn iter_after<Q>(&self, after: Option<&Q>) -> Iter<'_, K, V>
    where
        Q: AsRef<[u8]> + ?Sized,
    {
        let after = after.map(AsRef::as_ref);
        let mut iter = Iter {
            pending: Vec::new(),
            leaf: &[],
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
                    let start = after.map_or(0, |key| {
                        items.partition_point(|(k, _)| cmp_bytes(k.as_ref(), key).is_le())
                    });
                    iter.leaf = &items[start..];
                    return iter;
                }
            }
        }
    }

    /// Empties the map, handing `take` each value nothing else shares; the
    /// nodes a clone still holds are only released. Lets a tree of maps
    /// inside values be dismantled with a loop instead of a recursive drop.
    pub fn drain_unshared(&mut self, mut take: impl FnMut(V)) {
        let Some(root) = self.root.take() else {
            return;
        };
        self.len = 0;
        let mut pending = vec![root];
        while let Some(node) = pending.pop() {
            match Arc::try_unwrap(node) {
                Ok(Node::Leaf(items)) => items.into_iter().for_each(|(_, v)| take(v)),
                Ok(Node::Branch(children)) => pending.extend(children.into_iter().map(|c| c.node)),
                Err(_shared) => {}
            }
        }
    }

    /// Checks the invariants in the module comment.
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
            return Err(format!("{count} entries, length says {}", self.len));
        }
        let mut previous: Option<&[u8]> = None;
        for (k, _) in self.iter() {
            let k = k.as_ref();
            if previous.is_some_and(|p| cmp_bytes(p, k).is_ge()) {
                return Err("keys not strictly ascending".into());
            }
            previous = Some(k);
        }
        Ok(())
    }
}

/// Byte order, as `[u8]::cmp`, eight bytes at a time: a lookup compares
/// names some twenty times, and siblings share long prefixes
/// (`lock-0000000042`).
fn cmp_bytes(a: &[u8], b: &[u8]) -> Ordering {
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

/// Where `key` is in a leaf.
fn position<K: AsRef<[u8]>, V>(items: &[(K, V)], key: &[u8]) -> Option<usize> {
    items
        .binary_search_by(|(k, _)| cmp_bytes(k.as_ref(), key))
        .ok()
}

/// The entry of `children` whose subtree would hold `key`: the last one
/// whose least key is not above it (the first if none).
fn route<K: AsRef<[u8]>, V>(children: &[Child<K, V>], key: &[u8]) -> usize {
    let first = &children[0];
    let skip = first.skip as usize;
    let head = skip.min(key.len());
    match cmp_bytes(&key[..head], &first.least.as_ref()[..head]) {
        // Below the prefix every least key starts with, or a proper prefix
        // of it: below them all.
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
            Ordering::Equal => cmp_bytes(c.least.as_ref(), key).is_le(),
        })
        .saturating_sub(1)
}

fn least_of<K, V>(node: &Node<K, V>) -> &K {
    match node {
        Node::Leaf(items) => &items[0].0,
        Node::Branch(children) => &children[0].least,
    }
}

/// The most entries `node` may hold.
fn capacity<K, V>(node: &Node<K, V>) -> usize {
    match node {
        Node::Leaf(_) => LEAF_MAX,
        Node::Branch(_) => BRANCH_MAX,
    }
}

fn entries<K, V>(node: &Node<K, V>) -> usize {
    match node {
        Node::Leaf(items) => items.len(),
        Node::Branch(children) => children.len(),
    }
}

/// Where a node that outgrew `max` splits. Ascending inserts (sequential
/// znodes) land at the end: the left node stays full there rather than
/// every node being left half empty.
fn split_point(len: usize, inserted_at: usize, max: usize) -> usize {
    if inserted_at + 1 == len {
        max
    } else {
        len / 2
    }
}

/// Moves the entries from `at` on into a new right sibling. The insert that
/// overflowed the leaf doubled its capacity: a leaf holds whole znodes, so
/// the spare half would be most of its memory.
fn split_leaf<K: Clone, V>(items: &mut Vec<(K, V)>, at: usize) -> Child<K, V> {
    let right = items.split_off(at);
    items.shrink_to_fit();
    Child::new(right[0].0.clone(), Arc::new(Node::Leaf(right)))
}

/// [`split_leaf`] for a branch.
fn split_branch<K: AsRef<[u8]> + Clone, V>(
    children: &mut Vec<Child<K, V>>,
    at: usize,
) -> Child<K, V> {
    let mut right = children.split_off(at);
    children.shrink_to_fit();
    reword(children);
    reword(&mut right);
    Child::new(right[0].least.clone(), Arc::new(Node::Branch(right)))
}

/// Inserts an absent key; returns the new right sibling when the node
/// split. `last`: the key is above every other, so it goes at the end
/// without a search.
fn insert_into<K: AsRef<[u8]> + Clone, V: Clone>(
    node: &mut Arc<Node<K, V>>,
    key: K,
    value: V,
    last: bool,
) -> Option<Child<K, V>> {
    match Arc::make_mut(node) {
        Node::Leaf(items) => {
            let at = if last {
                items.len()
            } else {
                items.partition_point(|(k, _)| cmp_bytes(k.as_ref(), key.as_ref()).is_lt())
            };
            items.insert(at, (key, value));
            if items.len() <= LEAF_MAX {
                return None;
            }
            Some(split_leaf(items, split_point(items.len(), at, LEAF_MAX)))
        }
        Node::Branch(children) => {
            let i = if last {
                children.len() - 1
            } else {
                route(children, key.as_ref())
            };
            let new_least = cmp_bytes(key.as_ref(), children[i].least.as_ref()).is_lt();
            if new_least {
                children[i].least = key.clone();
            }
            let Some(right) = insert_into(&mut children[i].node, key, value, last) else {
                if new_least {
                    reword(children);
                }
                return None;
            };
            children.insert(i + 1, right);
            if children.len() <= BRANCH_MAX {
                reword(children);
                return None;
            }
            Some(split_branch(
                children,
                split_point(children.len(), i + 1, BRANCH_MAX),
            ))
        }
    }
}

/// Removes a key known to be present and returns its value.
fn remove_from<K: AsRef<[u8]> + Clone, V: Clone>(node: &mut Arc<Node<K, V>>, key: &[u8]) -> V {
    match Arc::make_mut(node) {
        Node::Leaf(items) => {
            let at = position(items, key).expect("remove_from: key present");
            items.remove(at).1
        }
        Node::Branch(children) => {
            let i = route(children, key);
            let value = remove_from(&mut children[i].node, key);
            let max = capacity(&children[i].node);
            let mut changed = true;
            match entries(&children[i].node) {
                // Its last entry gone (a node may hold one: see
                // `split_point`).
                0 => {
                    children.remove(i);
                }
                n if n < min_entries(max) && children.len() > 1 => rebalance(children, i),
                _ => changed = false,
            }
            // The removed key may have been a subtree's least one.
            for c in children.iter_mut() {
                if c.least.as_ref() == key {
                    c.least = least_of(&c.node).clone();
                    changed = true;
                }
            }
            if changed {
                reword(children);
            }
            value
        }
    }
}

/// Joins the underfull child `i` with a neighbour; splits the two evenly
/// again if together they are more than a node holds.
fn rebalance<K: AsRef<[u8]> + Clone, V: Clone>(children: &mut Vec<Child<K, V>>, i: usize) {
    let left = if i > 0 { i - 1 } else { i };
    let right_child = children.remove(left + 1);
    let mut right_node = Arc::unwrap_or_clone(right_child.node);
    let left_node = Arc::make_mut(&mut children[left].node);
    let tail = match (left_node, &mut right_node) {
        (Node::Leaf(a), Node::Leaf(b)) => {
            a.append(b);
            (a.len() > LEAF_MAX).then(|| split_leaf(a, a.len() / 2))
        }
        (Node::Branch(a), Node::Branch(b)) => {
            a.append(b);
            if a.len() > BRANCH_MAX {
                Some(split_branch(a, a.len() / 2))
            } else {
                reword(a);
                None
            }
        }
        _ => unreachable!("siblings at different depths"),
    };
    if let Some(tail) = tail {
        children.insert(left + 1, tail);
    }
}

fn check_node<K: AsRef<[u8]> + Clone, V: Clone>(
    node: &Node<K, V>,
    depth: usize,
    leaf_depth: &mut Option<usize>,
    count: &mut usize,
) -> Result<(), String> {
    let n = entries(node);
    if n == 0 || n > capacity(node) {
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
            let mut reworded = children.to_vec();
            reword(&mut reworded);
            for (c, expected) in children.iter().zip(&reworded) {
                if (c.skip, c.word) != (expected.skip, expected.word) {
                    return Err(format!("stale routing word at depth {depth}"));
                }
                if c.least.as_ref() != least_of_subtree(&c.node).as_ref() {
                    return Err(format!("stale least key at depth {depth}"));
                }
                check_node(&c.node, depth + 1, leaf_depth, count)?;
            }
        }
    }
    Ok(())
}

fn least_of_subtree<K, V>(mut node: &Node<K, V>) -> &K {
    loop {
        match node {
            Node::Leaf(items) => return &items[0].0,
            Node::Branch(children) => node = &children[0].node,
        }
    }
}

/// Ascending iteration: the rest of the current leaf, then the subtrees
/// still to visit, innermost last.
pub struct Iter<'a, K, V> {
    pending: Vec<&'a [Child<K, V>]>,
    leaf: &'a [(K, V)],
}

impl<'a, K, V> Iter<'a, K, V> {
    fn descend(&mut self, mut node: &'a Node<K, V>) {
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

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(((k, v), rest)) = self.leaf.split_first() {
                self.leaf = rest;
                return Some((k, v));
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::ops::Bound;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        Remove(u16),
        Bump(u16),
        Clone,
    }

    fn op(keys: u16) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..keys).prop_map(Op::Insert),
            3 => (0..keys).prop_map(Op::Remove),
            1 => (0..keys).prop_map(Op::Bump),
            1 => Just(Op::Clone),
        ]
    }

    type Model = BTreeMap<String, u32>;

    /// Names of mixed lengths under a shared prefix, so that byte order,
    /// prefixes and the word-at-a-time comparison all come into play.
    fn name(k: u16) -> String {
        format!("node-{k:x}{}", "-".repeat(usize::from(k % 7)))
    }

    fn assert_same(map: &OrdMap<String, u32>, model: &Model) {
        assert_eq!(map.check(), Ok(()));
        assert_eq!(map.len(), model.len());
        assert!(map.iter().eq(model.iter()));
        assert_eq!(map.last_key(), model.keys().last());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Proves the map behaves as a `BTreeMap` under inserts, removes
        /// and changes in place, keeps its invariants, and that clones
        /// taken along the way stay as they were (copy-on-write never
        /// writes through to a clone).
        #[test]
        fn behaves_as_a_btree_map(
            keys in prop_oneof![Just(40u16), Just(3000u16)],
            ops in prop::collection::vec(op(3000), 1..1500),
        ) {
            let mut map = OrdMap::new();
            let mut model = Model::new();
            let mut frozen: Vec<(OrdMap<String, u32>, Model)> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                let n = n as u32;
                match op {
                    Op::Insert(k) => {
                        let k = name(k % keys);
                        let fresh = !model.contains_key(&k);
                        if fresh {
                            model.insert(k.clone(), n);
                        }
                        prop_assert_eq!(map.insert_new(k, n), fresh);
                    }
                    Op::Remove(k) => {
                        let k = name(k % keys);
                        prop_assert_eq!(map.remove(&k), model.remove(&k));
                    }
                    Op::Bump(k) => {
                        let k = name(k % keys);
                        if let Some(v) = model.get_mut(&k) {
                            *v += 1;
                        }
                        if let Some(v) = map.get_mut(&k) {
                            *v += 1;
                        }
                    }
                    Op::Clone => frozen.push((map.clone(), model.clone())),
                }
                prop_assert_eq!(map.len(), model.len());
            }
            assert_same(&map, &model);
            for (map, model) in &frozen {
                assert_same(map, model);
            }
            // Every name, and probes outside the prefix the names share (a
            // branch routes those without its words).
            let probes = ["", "a", "node", "node-", "node-0", "nodf", "z", "node-\u{7f}\u{7f}"];
            for k in (0..keys).map(name).chain(probes.map(String::from)) {
                prop_assert_eq!(map.get(&k), model.get(&k));
                let after: Vec<_> = map.iter_after(Some(&k)).map(|(k, _)| k).collect();
                let expected: Vec<_> = model
                    .range::<String, _>((Bound::Excluded(&k), Bound::Unbounded))
                    .map(|(k, _)| k)
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

    fn leaf_count<K, V>(map: &OrdMap<K, V>) -> usize {
        let mut leaves = 0;
        let mut stack: Vec<&Node<K, V>> = map.root.as_deref().into_iter().collect();
        while let Some(node) = stack.pop() {
            match node {
                Node::Leaf(_) => leaves += 1,
                Node::Branch(children) => stack.extend(children.iter().map(|c| &*c.node)),
            }
        }
        leaves
    }

    #[test]
    fn ascending_inserts_fill_leaves() {
        // Proves sequential names (the common znode pattern) pack leaves
        // full rather than half empty, that a thinned map merges its
        // leaves, and that removing everything leaves no root.
        let key = |k: u32| format!("k{k:05}");
        let mut map = OrdMap::new();
        for k in 0..10_000u32 {
            assert!(map.insert_new(key(k), ()));
        }
        assert_eq!(map.check(), Ok(()));
        assert_eq!(leaf_count(&map), 10_000usize.div_ceil(LEAF_MAX));
        let frozen = map.clone();
        let keep = LEAF_MAX as u32;
        for k in (0..10_000u32).filter(|k| k % keep != 0) {
            assert!(map.remove(&key(k)).is_some());
        }
        assert_eq!(map.check(), Ok(()));
        let most = map.len().div_ceil(min_entries(LEAF_MAX));
        assert!(leaf_count(&map) <= most, "{} leaves", leaf_count(&map));
        for k in (0..10_000u32).step_by(LEAF_MAX).rev() {
            assert!(map.remove(&key(k)).is_some());
            if k % 997 == 0 {
                assert_eq!(map.check(), Ok(()));
            }
        }
        assert!(map.is_empty() && map.root.is_none());
        assert_eq!(frozen.len(), 10_000);
        assert!(frozen
            .iter()
            .map(|(k, _)| k.clone())
            .eq((0..10_000).map(key)));
    }

    #[test]
    fn drain_unshared_hands_over_only_what_no_clone_holds() {
        // Proves draining yields every value of an unshared map and none
        // of a leaf a clone still holds, and leaves the clone intact.
        let key = |k: u32| format!("k{k:03}");
        let mut map = OrdMap::new();
        for k in 0..100u32 {
            map.insert_new(key(k), k);
        }
        let mut all = Vec::new();
        map.clone().drain_unshared(|v| all.push(v));
        assert!(all.is_empty(), "the original shares every node");
        let frozen = map.clone();
        *map.get_mut(&key(0)).unwrap() = 1000;
        map.drain_unshared(|v| all.push(v));
        assert!(map.is_empty() && map.check().is_ok());
        // Only the copied leaf (with key 0) belonged to `map` alone.
        all.sort();
        assert_eq!(all.len(), LEAF_MAX.min(100));
        assert_eq!(all.last(), Some(&1000));
        assert!(frozen
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .eq((0..100).map(|k| (key(k), k))));
    }

    #[test]
    fn lookups_by_borrowed_key() {
        // Proves a map keyed by owned strings is searched and trimmed by &str.
        let mut map: OrdMap<String, u8> = OrdMap::new();
        for (i, name) in ["b", "a", "c"].into_iter().enumerate() {
            map.insert_new(name.to_owned(), i as u8);
        }
        assert_eq!(map.get("a"), Some(&1));
        let after: Vec<&str> = map.iter_after(Some("a")).map(|(k, _)| k.as_str()).collect();
        assert_eq!(after, ["b", "c"]);
        assert_eq!(map.remove("b"), Some(0));
        assert_eq!(map.remove("b"), None);
        assert!(map.get_mut("b").is_none());
        *map.get_mut("c").unwrap() = 9;
        let all: Vec<(&str, u8)> = map.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(all, [("a", 1), ("c", 9)]);
    }
}
