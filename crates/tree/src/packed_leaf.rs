//! A leaf of a child map: up to 16 KiB of sibling znodes packed into one buffer.
//!
//! A znode in the old leaves took 128 bytes beside its data: a 24-byte name
//! and a 96-byte node inline, and its data in an allocation of its own with
//! a header and size-class rounding. Here a znode with a short name and a
//! fresh stat takes about a dozen bytes beside its data, which sits inline:
//! - a name keeps only what follows the prefix every name of the leaf
//!   shares (siblings are `lock-0000000042` or `k0001234`);
//! - a stat is varints: czxid and ctime as differences from the leaf's
//!   bases, mzxid, pzxid and mtime from czxid and ctime, and the fields that
//!   are usually zero or equal only as a flag;
//! - an ACL is the index of a slot the leaf's entries share.
//!
//! Entry layout (varints LEB128, signed ones zigzag first; `[..]` is there
//! only under its flag):
//!
//! ```text
//! suffix length, suffix bytes
//! flags
//! czxid - base_zxid, ctime - base_time
//! [mzxid - czxid] [pzxid - czxid] [mtime - ctime]
//! [version] [cversion] [aversion] [ephemeral owner: 8 bytes LE]
//! ACL slot
//! [children slot]
//! data tag: length << 1 with the data after it, or slot << 1 | 1,
//!   or NULL_DATA_TAG for null data (a length inline data never has)
//! ```
//!
//! Slots hold what is not bytes: ACL lists, child maps, and data above
//! [`INLINE_DATA_MAX`] (kept out so a leaf stays small and a write beside
//! big data does not copy it). A removed entry leaves its slots free; a
//! rebuild (split, merge, a name outside the prefix, too many free slots)
//! packs them again.
//!
//! Invariants (checked by [`Leaf::check`]): names strictly ascending, each
//! starting with the prefix; offsets ascending and every entry decoding to
//! exactly the bytes up to the next; every slot an entry names holds the
//! kind it expects, and no two entries name one children or data slot.

use std::cell::Cell;
use std::cmp::Ordering;

use crate::child_map::{word_at, ChildMap};
use crate::entry_offsets::EntryOffsets;
use crate::leaf_bytes::LeafBytes;
use crate::node::{Name, NewData, Node, NodeRef, PersistedStat, SharedAcl, SharedBytes, Updated};

/// An insert at most this many places from the last one continues its run:
/// sequential names that sort between older ones (`n-123459`, then
/// `n-123460` after `n-12346`) land a place or two apart.
const RUN_GAP: usize = 3;

/// Data up to this size sits inline in the leaf.
pub(crate) const INLINE_DATA_MAX: usize = 512;
/// The data tag of null data: an inline length one past the largest.
const NULL_DATA_TAG: u64 = ((INLINE_DATA_MAX as u64) + 1) << 1;

const MZXID: u8 = 1;
const PZXID: u8 = 2;
const MTIME: u8 = 4;
const VERSION: u8 = 8;
const CVERSION: u8 = 16;
const AVERSION: u8 = 32;
const OWNER: u8 = 64;
const CHILDREN: u8 = 128;

#[derive(Debug, Clone)]
enum Slot {
    Free,
    Acl(SharedAcl),
    Children(ChildMap),
    Data(SharedBytes),
}

#[derive(Debug, Clone)]
pub(crate) struct Leaf {
    /// What every name in the leaf starts with (cut at a char boundary).
    prefix: Name,
    base_zxid: i64,
    base_time: i64,
    /// Where each entry starts in `bytes`, in name order.
    offsets: EntryOffsets,
    bytes: LeafBytes,
    slots: Vec<Slot>,
    /// Where the last insert went, while no other change moved it: an
    /// insert next to it continues a run (ascending or descending names
    /// landing between two older ones), and the split leaves the run's side
    /// to fill up rather than two half-empty leaves.
    last_insert: Option<u32>,
    /// Where to cut, if the last insert continued a run (see
    /// [`Leaf::insert`]).
    run_cut: Option<u32>,
}

/// Where an entry's data is.
#[derive(Debug, Clone, Copy)]
enum Data<'a> {
    Inline(&'a [u8]),
    Slot(usize),
    Null,
}

/// One entry, decoded.
#[derive(Debug, Clone, Copy)]
struct Entry<'a> {
    suffix: &'a str,
    stat: PersistedStat,
    acl: usize,
    children: Option<usize>,
    data: Data<'a>,
}

/// What an entry is made of, wherever it comes from (a loose node, another
/// leaf's entry); `big` is the shared data when there is one, so moving an
/// entry between leaves does not copy big data.
#[derive(Clone, Copy)]
struct Parts<'a> {
    stat: PersistedStat,
    acl: &'a SharedAcl,
    children: Option<&'a ChildMap>,
    /// None: null data.
    data: Option<&'a [u8]>,
    big: Option<&'a SharedBytes>,
}

impl<'a> Parts<'a> {
    fn of_node(node: &'a Node) -> Self {
        Parts {
            stat: node.stat,
            acl: &node.acl,
            children: (!node.children.is_empty()).then_some(&node.children),
            data: node.data.as_option(),
            big: (!node.data.is_null()).then_some(&node.data),
        }
    }
}

impl Leaf {
    /// A leaf of one entry.
    pub(crate) fn of_one(name: &str, node: Node) -> Leaf {
        let parts = Parts::of_node(&node);
        pack(name, name, &parts.stat, [(name.into(), parts)])
    }

    pub(crate) fn len(&self) -> usize {
        self.offsets.len()
    }

    /// The leaf's size for deciding when to split and merge: its entries'
    /// bytes and four per entry, what a start took before starts could be
    /// two bytes (kept, so that leaves split where they did).
    pub(crate) fn weight(&self) -> usize {
        self.bytes.len() + 4 * self.offsets.len()
    }

    /// Whether the leaf weighs at most `max`, or is one entry (which no
    /// cut can lighten).
    pub(crate) fn fits(&self, max: usize) -> bool {
        self.weight() <= max || self.len() == 1
    }

    /// Entry `i`'s share of [`Leaf::weight`].
    fn entry_weight(&self, i: usize) -> usize {
        self.end(i) - self.start(i) + 4
    }

    /// The entry named `key`, or where it would go.
    pub(crate) fn find(&self, key: &[u8]) -> Result<usize, usize> {
        let prefix = self.prefix.as_bytes();
        let head = &key[..key.len().min(prefix.len())];
        match head.cmp(prefix) {
            // Every name in the leaf is above (or below) the key.
            Ordering::Less => return Err(0),
            Ordering::Greater => return Err(self.len()),
            Ordering::Equal if key.len() < prefix.len() => return Err(0),
            Ordering::Equal => {}
        }
        let rest = &key[prefix.len()..];
        let rest_word = word_at(rest, 0);
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let suffix = self.suffix(mid);
            // Most suffixes differ in their first eight bytes: compared as
            // one integer, with no call to `memcmp`.
            let order = match word_at(suffix, 0).cmp(&rest_word) {
                Ordering::Equal => suffix.cmp(rest),
                unequal => unequal,
            };
            match order {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// The suffix of entry `i` only: what a search compares.
    fn suffix(&self, i: usize) -> &[u8] {
        let mut at = self.start(i);
        let len = get_uvarint(&self.bytes, &mut at) as usize;
        &self.bytes[at..at + len]
    }

    pub(crate) fn name(&self, i: usize) -> Name {
        let mut name = self.prefix.clone();
        name.push_str(self.entry(i).suffix);
        name
    }

    /// What every name in the leaf starts with.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn get(&self, i: usize) -> NodeRef<'_> {
        self.suffix_and_node(i).1
    }

    /// Entry `i`'s name after the prefix, and its node, from one decoding:
    /// a walk of the whole tree wants both.
    pub(crate) fn suffix_and_node(&self, i: usize) -> (&str, NodeRef<'_>) {
        let e = self.entry(i);
        let node = NodeRef {
            data: self.bytes_of(e.data),
            acl: self.acl(e.acl),
            stat: e.stat,
            children: e.children.map(|s| self.child_map(s)),
        };
        (e.suffix, node)
    }

    /// Entry `i`'s child map, if it has one.
    pub(crate) fn child_map_at(&self, i: usize) -> Option<&ChildMap> {
        self.children_slot(i).map(|s| self.child_map(s))
    }

    /// Entry `i`'s children slot, found by skipping over the fields before
    /// it rather than decoding them: a walk down a path needs only this of
    /// every node above the last.
    fn children_slot(&self, i: usize) -> Option<usize> {
        let bytes = &self.bytes;
        let mut at = self.start(i);
        at += get_uvarint(bytes, &mut at) as usize;
        let flags = bytes[at];
        at += 1;
        if flags & CHILDREN == 0 {
            return None;
        }
        let optional = [MZXID, PZXID, MTIME, VERSION, CVERSION, AVERSION];
        // czxid and ctime, the optional stat fields present, then (after
        // the owner) the ACL slot.
        let before_owner = 2 + optional.iter().filter(|&&bit| flags & bit != 0).count();
        for _ in 0..before_owner {
            skip_varint(bytes, &mut at);
        }
        if flags & OWNER != 0 {
            at += 8;
        }
        skip_varint(bytes, &mut at);
        Some(get_uvarint(bytes, &mut at) as usize)
    }

    /// Entry `i`'s child map for changing; made (empty) if it has none.
    pub(crate) fn children_mut(&mut self, i: usize) -> &mut ChildMap {
        let slot = match self.children_slot(i) {
            Some(s) => s,
            None => {
                let s = self.add_slot(Slot::Children(ChildMap::new()));
                let e = Entry {
                    children: Some(s),
                    ..self.entry(i)
                };
                let mut encoded = Vec::new();
                self.encode(&mut encoded, e);
                self.splice(i, &encoded);
                s
            }
        };
        match &mut self.slots[slot] {
            Slot::Children(map) => map,
            other => panic!("children slot {slot} holds {other:?}"),
        }
    }

    /// Rewrites entry `i`: its stat changed by `change` and, when given,
    /// new data or ACL. Returns what the caller's result needs, read on
    /// the same decode.
    pub(crate) fn update(
        &mut self,
        i: usize,
        change: &dyn Fn(&mut PersistedStat),
        data: NewData<'_>,
        acl: Option<&SharedAcl>,
    ) -> Updated {
        let acl = acl.map(|a| self.acl_slot(a));
        let old = self.entry(i);
        let mut stat = old.stat;
        change(&mut stat);
        let updated = Updated {
            old_data_len: self.bytes_of(old.data).map_or(0, <[u8]>::len),
            child_count: old.children.map_or(0, |s| self.child_map(s).len()),
            stat,
        };
        let acl = acl.unwrap_or(old.acl);
        let mut encoded = take_scratch();
        match data {
            None => self.encode(&mut encoded, Entry { stat, acl, ..old }),
            Some(bytes) => {
                let (suffix, children, old_data) = (Name::from(old.suffix), old.children, old.data);
                if let Data::Slot(s) = old_data {
                    self.slots[s] = Slot::Free;
                }
                let data = self.data_of(bytes, None);
                let e = Entry {
                    suffix: &suffix,
                    stat,
                    acl,
                    children,
                    data,
                };
                self.encode(&mut encoded, e);
            }
        }
        self.splice(i, &encoded);
        SCRATCH.set(encoded);
        self.compact_if_sparse();
        updated
    }

    /// Puts `node` in at `i`, the place [`Leaf::find`] gave for `name`,
    /// and notes whether it continues a run (lands within [`RUN_GAP`]
    /// places of the last insert): a split then cuts after it (ascending)
    /// or before it (descending).
    pub(crate) fn insert(&mut self, i: usize, name: &str, node: Node) {
        debug_assert_eq!(self.find(name.as_bytes()), Err(i));
        let run = match self.last_insert.map(|l| l as usize) {
            Some(l) if l < i && i <= l + RUN_GAP => Some(i + 1),
            Some(l) if i <= l && l <= i + RUN_GAP => Some(i),
            _ => None,
        };
        self.insert_unmarked(i, name, node);
        self.last_insert = Some(i as u32);
        self.run_cut = run.map(|c| c as u32);
    }

    fn insert_unmarked(&mut self, i: usize, name: &str, node: Node) {
        let parts = Parts::of_node(&node);
        let Some(suffix) = name.strip_prefix(self.prefix.as_str()) else {
            // Outside the prefix: all entries again, under a shorter one.
            let n = self.len();
            let first = if i == 0 { name.into() } else { self.name(0) };
            let last = if i == n {
                name.into()
            } else {
                self.name(n - 1)
            };
            let entries = (self.entries(0..i))
                .chain([(Name::from(name), parts)])
                .chain(self.entries(i..n));
            let base = if i == 0 {
                parts.stat
            } else {
                self.entry(0).stat
            };
            *self = pack(&first, &last, &base, entries);
            return;
        };
        let mut encoded = take_scratch();
        let e = self.entry_of(suffix, parts);
        self.encode(&mut encoded, e);
        let at = self.start(i);
        self.bytes.replace(at..at, &encoded);
        self.offsets.insert(i, at, encoded.len());
        SCRATCH.set(encoded);
    }

    /// Takes entry `i` out as a loose node.
    pub(crate) fn remove(&mut self, i: usize) -> Node {
        let e = self.entry(i);
        let (stat, acl, children) = (e.stat, self.acl(e.acl).clone(), e.children);
        let data = match e.data {
            Data::Inline(bytes) => Ok(SharedBytes::new(bytes)),
            Data::Null => Ok(SharedBytes::null()),
            Data::Slot(s) => Err(s),
        };
        let data =
            data.unwrap_or_else(
                |s| match std::mem::replace(&mut self.slots[s], Slot::Free) {
                    Slot::Data(bytes) => bytes,
                    other => panic!("data slot {s} held {other:?}"),
                },
            );
        let children = match children {
            Some(s) => match std::mem::replace(&mut self.slots[s], Slot::Free) {
                Slot::Children(map) => map,
                other => panic!("children slot {s} held {other:?}"),
            },
            None => ChildMap::new(),
        };
        self.splice(i, &[]);
        self.offsets.remove(i);
        self.last_insert = None;
        self.run_cut = None;
        if !self.offsets.is_empty() {
            self.compact_if_sparse();
        }
        Node {
            data,
            acl,
            stat,
            children,
        }
    }

    /// Cuts the leaf at `cuts` (ascending, inside it): keeps the first
    /// part and returns the others in order, each rebuilt. The part with
    /// the last insert still knows where it is.
    pub(crate) fn split_at(&mut self, cuts: &[usize]) -> Vec<Leaf> {
        let mut bounds = vec![0];
        bounds.extend_from_slice(cuts);
        bounds.push(self.len());
        assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "cuts {cuts:?} in {}",
            self.len()
        );
        let last = self.last_insert.map(|l| l as usize);
        let parts: Vec<Leaf> = bounds
            .windows(2)
            .map(|w| {
                let mut part = self.rebuilt(w[0]..w[1]);
                part.last_insert = last
                    .filter(|l| (w[0]..w[1]).contains(l))
                    .map(|l| (l - w[0]) as u32);
                part
            })
            .collect();
        let mut parts = parts.into_iter();
        *self = parts.next().expect("one part at least");
        parts.collect()
    }

    /// A leaf of our entries and then `right`'s, whose names all sort
    /// after ours. It still knows where the last insert into either went.
    pub(crate) fn joined(&self, right: &Leaf) -> Leaf {
        let last = right.name(right.len() - 1);
        let entries = self
            .entries(0..self.len())
            .chain(right.entries(0..right.len()));
        let mut joined = pack(&self.name(0), &last, &self.entry(0).stat, entries);
        joined.last_insert = self
            .last_insert
            .or(right.last_insert.map(|l| l + self.len() as u32));
        joined
    }

    /// The cut that splits the leaf into the two most even parts that
    /// each weigh at most `max` (or are one entry); none if no cut does.
    pub(crate) fn even_cut(&self, max: usize) -> Option<usize> {
        let n = self.len();
        let total = self.weight();
        let mut left = 0;
        let mut best: Option<(usize, usize)> = None;
        for c in 1..n {
            left += self.entry_weight(c - 1);
            let right = total - left;
            let fits = (left <= max || c == 1) && (right <= max || c + 1 == n);
            if fits && best.is_none_or(|(_, worst)| left.max(right) < worst) {
                best = Some((c, left.max(right)));
            }
        }
        best.map(|(c, _)| c)
    }

    /// Where to cut a leaf heavier than `max` so that no part of two or
    /// more entries is. At the run's cut (see [`Leaf::insert`]) if both
    /// sides obey that: the run's side fills up as it goes on, the other
    /// side was full before. After an insert at the end (sequential names)
    /// the new entry alone goes right and the rest stays full. Otherwise
    /// parts of about even weight.
    pub(crate) fn cuts(&self, max: usize) -> Vec<usize> {
        let run = self.run_cut.map(|c| c as usize);
        let inserted_at = self.last_insert.map_or(usize::MAX, |l| l as usize);
        let n = self.len();
        let fits = |range: std::ops::Range<usize>| {
            range.len() == 1 || range.map(|i| self.entry_weight(i)).sum::<usize>() <= max
        };
        if let Some(cut) = run.filter(|&c| 0 < c && c < n) {
            if fits(0..cut) && fits(cut..n) {
                return vec![cut];
            }
        }
        if inserted_at.wrapping_add(1) == n && fits(0..n - 1) {
            return vec![n - 1];
        }
        let even = self.weight().div_ceil(self.weight().div_ceil(max));
        let mut cuts = Vec::new();
        let mut part = 0;
        for i in 0..n {
            let w = self.entry_weight(i);
            if part > 0 && (part >= even || part + w > max) {
                cuts.push(i);
                part = 0;
            }
            part += w;
        }
        cuts
    }

    /// The child maps in slots, leaving the leaf without them: lets a
    /// nested tree be taken apart with a loop rather than a recursive drop.
    pub(crate) fn take_child_maps(&mut self, mut take: impl FnMut(ChildMap)) {
        for slot in &mut self.slots {
            if let Slot::Children(map) = slot {
                take(std::mem::take(map));
            }
        }
    }

    /// Checks the invariants in the module comment.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.offsets.get(0).is_some_and(|o| o != 0) {
            return Err("the first entry does not start the bytes".into());
        }
        let mut used = vec![false; self.slots.len()];
        let mut previous: Option<Name> = None;
        for i in 0..self.len() {
            let mut at = self.start(i);
            let e = decode(&self.bytes, &mut at, self.base_zxid, self.base_time);
            if at != self.end(i) {
                return Err(format!("entry {i} decodes to {at}, not {}", self.end(i)));
            }
            let name = self.name(i);
            if previous
                .as_ref()
                .is_some_and(|p| p.as_bytes() >= name.as_bytes())
            {
                return Err(format!("{name:?} out of order"));
            }
            if !matches!(self.slots.get(e.acl), Some(Slot::Acl(_))) {
                return Err(format!("{name:?}: ACL slot {} holds no ACL", e.acl));
            }
            let owned = [
                e.children
                    .map(|s| (s, matches!(self.slots.get(s), Some(Slot::Children(_))))),
                match e.data {
                    Data::Slot(s) => Some((s, matches!(self.slots.get(s), Some(Slot::Data(_))))),
                    Data::Inline(bytes) if bytes.len() > INLINE_DATA_MAX => {
                        return Err(format!("{name:?}: {} bytes inline", bytes.len()));
                    }
                    Data::Inline(_) | Data::Null => None,
                },
            ];
            for (s, right_kind) in owned.into_iter().flatten() {
                if !right_kind || std::mem::replace(&mut used[s], true) {
                    return Err(format!("{name:?}: slot {s} of the wrong kind or shared"));
                }
            }
            previous = Some(name);
        }
        Ok(())
    }

    fn start(&self, i: usize) -> usize {
        self.offsets.get(i).unwrap_or(self.bytes.len())
    }

    fn end(&self, i: usize) -> usize {
        self.start(i + 1)
    }

    fn entry(&self, i: usize) -> Entry<'_> {
        let mut at = self.start(i);
        decode(&self.bytes, &mut at, self.base_zxid, self.base_time)
    }

    fn parts(&self, i: usize) -> Parts<'_> {
        let e = self.entry(i);
        let (data, big) = match e.data {
            Data::Inline(bytes) => (Some(bytes), None),
            Data::Null => (None, None),
            Data::Slot(s) => match &self.slots[s] {
                Slot::Data(bytes) => (Some(&bytes[..]), Some(bytes)),
                other => panic!("data slot {s} holds {other:?}"),
            },
        };
        Parts {
            stat: e.stat,
            acl: self.acl(e.acl),
            children: e.children.map(|s| self.child_map(s)),
            data,
            big,
        }
    }

    fn acl(&self, slot: usize) -> &SharedAcl {
        match &self.slots[slot] {
            Slot::Acl(acl) => acl,
            other => panic!("ACL slot {slot} holds {other:?}"),
        }
    }

    /// An entry's data, wherever it sits; None for null data.
    fn bytes_of<'s>(&'s self, data: Data<'s>) -> Option<&'s [u8]> {
        match data {
            Data::Inline(bytes) => Some(bytes),
            Data::Slot(s) => Some(self.big(s)),
            Data::Null => None,
        }
    }

    fn big(&self, slot: usize) -> &[u8] {
        match &self.slots[slot] {
            Slot::Data(bytes) => bytes,
            other => panic!("data slot {slot} holds {other:?}"),
        }
    }

    fn child_map(&self, slot: usize) -> &ChildMap {
        match &self.slots[slot] {
            Slot::Children(map) => map,
            other => panic!("children slot {slot} holds {other:?}"),
        }
    }

    /// The slot holding `acl` (a list equal to it), added if none does.
    fn acl_slot(&mut self, acl: &SharedAcl) -> usize {
        let found = self.slots.iter().position(|s| match s {
            Slot::Acl(a) => a.slice == acl.slice,
            _ => false,
        });
        found.unwrap_or_else(|| self.add_slot(Slot::Acl(acl.clone())))
    }

    fn add_slot(&mut self, slot: Slot) -> usize {
        if let Some(free) = self.slots.iter().position(|s| matches!(s, Slot::Free)) {
            self.slots[free] = slot;
            return free;
        }
        self.slots.reserve_exact(1);
        self.slots.push(slot);
        self.slots.len() - 1
    }

    /// Replaces entry `i`'s bytes with `encoded` (none: removes them but
    /// not the offset) and moves the later offsets.
    fn splice(&mut self, i: usize, encoded: &[u8]) {
        let (start, end) = (self.start(i), self.end(i));
        let new_end = start + encoded.len();
        self.bytes.replace(start..end, encoded);
        if new_end != end {
            let grown = new_end as isize - end as isize;
            self.offsets.shift(i + 1, grown);
        }
    }

    /// Rebuilds when most slots are free or hold ACLs no entry names.
    fn compact_if_sparse(&mut self) {
        if self.slots.len() > 2 * self.len() + 4 {
            *self = self.rebuilt(0..self.len());
        }
    }

    fn rebuilt(&self, range: std::ops::Range<usize>) -> Leaf {
        let first = self.name(range.start);
        let last = self.name(range.end - 1);
        let base = self.entry(range.start).stat;
        pack(&first, &last, &base, self.entries(range))
    }

    /// The entries in `range` with their full names, for packing anew.
    fn entries(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (Name, Parts<'_>)> + '_ {
        range.map(|j| (self.name(j), self.parts(j)))
    }

    /// Entry `parts` under `suffix`, taking the slots it needs: its ACL's
    /// (shared), its children's and its data's if too big to sit inline.
    fn entry_of<'p>(&mut self, suffix: &'p str, parts: Parts<'p>) -> Entry<'p> {
        Entry {
            suffix,
            stat: parts.stat,
            acl: self.acl_slot(parts.acl),
            children: parts
                .children
                .map(|map| self.add_slot(Slot::Children(map.clone()))),
            data: self.data_of(parts.data, parts.big),
        }
    }

    /// Where `data` goes: inline, or a slot (sharing `big` when given);
    /// None is null data.
    fn data_of<'p>(&mut self, data: Option<&'p [u8]>, big: Option<&SharedBytes>) -> Data<'p> {
        let Some(data) = data else {
            return Data::Null;
        };
        if data.len() <= INLINE_DATA_MAX {
            return Data::Inline(data);
        }
        let shared = big.cloned().unwrap_or_else(|| SharedBytes::new(data));
        Data::Slot(self.add_slot(Slot::Data(shared)))
    }

    fn encode(&self, out: &mut Vec<u8>, e: Entry<'_>) {
        encode(out, e, self.base_zxid, self.base_time);
    }
}

/// Packs entries, in name order, into a new leaf.
struct Builder {
    leaf: Leaf,
    scratch: Vec<u8>,
}

impl Builder {
    /// A builder for names from `first` to `last`, with bases from `stat`.
    fn new(first: &str, last: &str, stat: &PersistedStat) -> Self {
        let shared = first
            .bytes()
            .zip(last.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        let cut = (0..=shared)
            .rev()
            .find(|&n| first.is_char_boundary(n))
            .unwrap_or(0);
        Builder {
            leaf: Leaf {
                prefix: first[..cut].into(),
                base_zxid: stat.czxid,
                base_time: stat.ctime,
                offsets: EntryOffsets::default(),
                bytes: LeafBytes::new(),
                slots: Vec::new(),
                last_insert: None,
                run_cut: None,
            },
            scratch: Vec::new(),
        }
    }

    fn push(&mut self, name: &str, p: Parts<'_>) {
        let leaf = &mut self.leaf;
        let suffix = name
            .strip_prefix(leaf.prefix.as_str())
            .unwrap_or_else(|| panic!("{name:?} outside the prefix {:?}", leaf.prefix));
        let e = leaf.entry_of(suffix, p);
        leaf.offsets.push(self.scratch.len());
        encode(&mut self.scratch, e, leaf.base_zxid, leaf.base_time);
    }

    /// The leaf, every buffer allocated at its exact size.
    fn finish(self) -> Leaf {
        let mut leaf = self.leaf;
        leaf.bytes = LeafBytes::from_slice(&self.scratch);
        leaf.offsets = leaf.offsets.to_exact();
        leaf.slots = leaf.slots.to_vec();
        leaf
    }
}

/// A leaf of `entries` (in name order, from `first` to `last`), with the
/// prefix those two share and bases from `base`.
fn pack<'a>(
    first: &str,
    last: &str,
    base: &PersistedStat,
    entries: impl IntoIterator<Item = (Name, Parts<'a>)>,
) -> Leaf {
    let mut b = Builder::new(first, last, base);
    for (name, parts) in entries {
        b.push(&name, parts);
    }
    b.finish()
}

fn encode(out: &mut Vec<u8>, e: Entry<'_>, base_zxid: i64, base_time: i64) {
    let s = &e.stat;
    put_uvarint(out, e.suffix.len() as u64);
    out.extend_from_slice(e.suffix.as_bytes());
    let mut flags = 0;
    for (bit, present) in [
        (MZXID, s.mzxid != s.czxid),
        (PZXID, s.pzxid != s.czxid),
        (MTIME, s.mtime != s.ctime),
        (VERSION, s.version != 0),
        (CVERSION, s.cversion != 0),
        (AVERSION, s.aversion != 0),
        (OWNER, s.ephemeral_owner != 0),
        (CHILDREN, e.children.is_some()),
    ] {
        if present {
            flags |= bit;
        }
    }
    out.push(flags);
    put_ivarint(out, s.czxid.wrapping_sub(base_zxid));
    put_ivarint(out, s.ctime.wrapping_sub(base_time));
    for (bit, value) in [
        (MZXID, s.mzxid.wrapping_sub(s.czxid)),
        (PZXID, s.pzxid.wrapping_sub(s.czxid)),
        (MTIME, s.mtime.wrapping_sub(s.ctime)),
        (VERSION, i64::from(s.version)),
        (CVERSION, i64::from(s.cversion)),
        (AVERSION, i64::from(s.aversion)),
    ] {
        if flags & bit != 0 {
            put_ivarint(out, value);
        }
    }
    if flags & OWNER != 0 {
        out.extend_from_slice(&s.ephemeral_owner.to_le_bytes());
    }
    put_uvarint(out, e.acl as u64);
    if let Some(c) = e.children {
        put_uvarint(out, c as u64);
    }
    match e.data {
        Data::Inline(bytes) => {
            put_uvarint(out, (bytes.len() as u64) << 1);
            out.extend_from_slice(bytes);
        }
        Data::Slot(slot) => put_uvarint(out, (slot as u64) << 1 | 1),
        Data::Null => put_uvarint(out, NULL_DATA_TAG),
    }
}

thread_local! {
    /// Where an entry is encoded before it is spliced into its leaf: one
    /// buffer per thread rather than an allocation and a free per write.
    /// Inline data is at most [`INLINE_DATA_MAX`], so it stays small.
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The scratch buffer, empty; give it back with `SCRATCH.set` (if not, as
/// on a panic, the next write allocates a new one).
fn take_scratch() -> Vec<u8> {
    let mut buf = SCRATCH.take();
    buf.clear();
    buf
}

fn decode<'a>(bytes: &'a [u8], at: &mut usize, base_zxid: i64, base_time: i64) -> Entry<'a> {
    let len = get_uvarint(bytes, at) as usize;
    let suffix = std::str::from_utf8(&bytes[*at..*at + len]).expect("names are UTF-8");
    *at += len;
    let flags = bytes[*at];
    *at += 1;
    let czxid = base_zxid.wrapping_add(get_ivarint(bytes, at));
    let ctime = base_time.wrapping_add(get_ivarint(bytes, at));
    let mut field = |bit: u8| {
        if flags & bit != 0 {
            get_ivarint(bytes, at)
        } else {
            0
        }
    };
    let mzxid = czxid.wrapping_add(field(MZXID));
    let pzxid = czxid.wrapping_add(field(PZXID));
    let mtime = ctime.wrapping_add(field(MTIME));
    // Encoded from i32s, so they fit.
    let version = field(VERSION) as i32;
    let cversion = field(CVERSION) as i32;
    let aversion = field(AVERSION) as i32;
    let ephemeral_owner = if flags & OWNER != 0 {
        let raw: [u8; 8] = bytes[*at..*at + 8].try_into().expect("eight bytes");
        *at += 8;
        i64::from_le_bytes(raw)
    } else {
        0
    };
    let acl = get_uvarint(bytes, at) as usize;
    let children = (flags & CHILDREN != 0).then(|| get_uvarint(bytes, at) as usize);
    let tag = get_uvarint(bytes, at);
    let data = if tag & 1 == 1 {
        Data::Slot((tag >> 1) as usize)
    } else if tag == NULL_DATA_TAG {
        Data::Null
    } else {
        let len = (tag >> 1) as usize;
        let data = &bytes[*at..*at + len];
        *at += len;
        Data::Inline(data)
    };
    Entry {
        suffix,
        stat: PersistedStat {
            czxid,
            mzxid,
            ctime,
            mtime,
            version,
            cversion,
            aversion,
            ephemeral_owner,
            pzxid,
        },
        acl,
        children,
        data,
    }
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn skip_varint(bytes: &[u8], at: &mut usize) {
    while bytes[*at] >= 0x80 {
        *at += 1;
    }
    *at += 1;
}

fn get_uvarint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = bytes[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

fn put_ivarint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn get_ivarint(bytes: &[u8], at: &mut usize) -> i64 {
    let u = get_uvarint(bytes, at);
    (u >> 1) as i64 ^ -((u & 1) as i64)
}
