//! Where each entry of a leaf starts in its bytes, ascending: two bytes
//! per entry while every start fits in 16 bits, four otherwise.
//!
//! A leaf splits at 16 KiB, so its starts fit in two bytes: 1.9 MiB less
//! for a million znodes. Only a leaf past 64 KiB needs four, and it is
//! about to be cut (a name outside the prefix lengthens every entry's
//! suffix before the split that follows), or is one long-named entry.

#[derive(Debug, Clone)]
pub(crate) enum EntryOffsets {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
}

impl Default for EntryOffsets {
    fn default() -> Self {
        EntryOffsets::Narrow(Vec::new())
    }
}

impl EntryOffsets {
    pub(crate) fn len(&self) -> usize {
        match self {
            EntryOffsets::Narrow(v) => v.len(),
            EntryOffsets::Wide(v) => v.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn get(&self, i: usize) -> Option<usize> {
        match self {
            EntryOffsets::Narrow(v) => v.get(i).map(|&o| usize::from(o)),
            EntryOffsets::Wide(v) => v.get(i).map(|&o| o as usize),
        }
    }

    /// Adds a start past every other (building a leaf).
    pub(crate) fn push(&mut self, at: usize) {
        debug_assert!(self.last().is_none_or(|last| last <= at));
        self.widen_for(at);
        match self {
            EntryOffsets::Narrow(v) => v.push(narrow(at)),
            EntryOffsets::Wide(v) => v.push(wide(at)),
        }
    }

    /// Puts `at` in place `i` (its room exactly, as a leaf's growth is one
    /// entry at a time), and moves every later start by `grown`.
    pub(crate) fn insert(&mut self, i: usize, at: usize, grown: usize) {
        let highest = match self.last() {
            Some(last) if i < self.len() => last + grown,
            _ => at,
        };
        self.widen_for(highest);
        match self {
            EntryOffsets::Narrow(v) => {
                v.reserve_exact(1);
                v.insert(i, narrow(at));
                v[i + 1..].iter_mut().for_each(|o| *o += narrow(grown));
            }
            EntryOffsets::Wide(v) => {
                v.reserve_exact(1);
                v.insert(i, wide(at));
                v[i + 1..].iter_mut().for_each(|o| *o += wide(grown));
            }
        }
    }

    /// Moves the starts from place `from` on by `delta` bytes.
    pub(crate) fn shift(&mut self, from: usize, delta: isize) {
        if let Some(last) = self.last().filter(|_| from < self.len()) {
            self.widen_for(last.saturating_add_signed(delta));
        }
        match self {
            EntryOffsets::Narrow(v) => v[from..]
                .iter_mut()
                .for_each(|o| *o = narrow(usize::from(*o).wrapping_add_signed(delta))),
            EntryOffsets::Wide(v) => v[from..]
                .iter_mut()
                .for_each(|o| *o = wide((*o as usize).wrapping_add_signed(delta))),
        }
    }

    pub(crate) fn remove(&mut self, i: usize) {
        match self {
            EntryOffsets::Narrow(v) => drop(v.remove(i)),
            EntryOffsets::Wide(v) => drop(v.remove(i)),
        }
    }

    /// The same starts, at their exact size and as narrow as they fit.
    pub(crate) fn to_exact(&self) -> EntryOffsets {
        match self {
            EntryOffsets::Narrow(v) => EntryOffsets::Narrow(v.to_vec()),
            EntryOffsets::Wide(v) => match v.iter().map(|&o| u16::try_from(o)).collect() {
                Ok(narrowed) => EntryOffsets::Narrow(narrowed),
                Err(_) => EntryOffsets::Wide(v.to_vec()),
            },
        }
    }

    fn last(&self) -> Option<usize> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// Switches to four bytes per start if `at` does not fit in two.
    fn widen_for(&mut self, at: usize) {
        if let EntryOffsets::Narrow(v) = self {
            if at > usize::from(u16::MAX) {
                *self = EntryOffsets::Wide(v.iter().map(|&o| u32::from(o)).collect());
            }
        }
    }
}

fn narrow(at: usize) -> u16 {
    u16::try_from(at).expect("a start that fits two bytes")
}

fn wide(at: usize) -> u32 {
    u32::try_from(at).expect("a leaf under 4 GiB")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(usize, usize),
        Shift(usize, isize),
        Remove(usize),
        Exact,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<usize>(), 0..40_000usize).prop_map(|(i, g)| Op::Insert(i, g)),
            (any::<usize>(), -30_000..30_000isize).prop_map(|(i, d)| Op::Shift(i, d)),
            any::<usize>().prop_map(Op::Remove),
            Just(Op::Exact),
        ]
    }

    proptest! {
        /// Any sequence of changes that keeps the starts ascending and
        /// under 4 GiB gives the same starts as a `Vec<usize>`, narrow
        /// whenever they fit after `to_exact`.
        #[test]
        fn keeps_the_starts_a_vec_would(ops in prop::collection::vec(op(), 0..80)) {
            let mut ours = EntryOffsets::default();
            let mut model: Vec<usize> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(i, grown) => {
                        let i = i % (model.len() + 1);
                        let at = if i == 0 { 0 } else { model[i - 1] + 1 };
                        if i < model.len() && at > model[i] {
                            continue;
                        }
                        ours.insert(i, at, grown);
                        model.insert(i, at);
                        model[i + 1..].iter_mut().for_each(|o| *o += grown);
                    }
                    Op::Shift(from, delta) => {
                        let from = from % (model.len() + 1);
                        let floor = if from == 0 { 0 } else { model[from - 1] };
                        if model.get(from).is_some_and(|&o| o.checked_add_signed(delta).is_none_or(|n| n < floor)) {
                            continue;
                        }
                        ours.shift(from, delta);
                        model[from..].iter_mut().for_each(|o| *o = o.wrapping_add_signed(delta));
                    }
                    Op::Remove(i) if !model.is_empty() => {
                        let i = i % model.len();
                        ours.remove(i);
                        model.remove(i);
                    }
                    Op::Remove(_) => {}
                    Op::Exact => {
                        ours = ours.to_exact();
                        let fits = model.iter().all(|&o| o <= usize::from(u16::MAX));
                        prop_assert_eq!(matches!(ours, EntryOffsets::Narrow(_)), fits);
                    }
                }
                prop_assert_eq!(ours.len(), model.len());
                let starts: Vec<usize> = (0..ours.len()).filter_map(|i| ours.get(i)).collect();
                prop_assert_eq!(&starts, &model);
            }
        }
    }

    #[test]
    fn a_start_past_64_kib_widens() {
        let mut offsets = EntryOffsets::default();
        offsets.push(0);
        offsets.push(65_535);
        assert!(matches!(offsets, EntryOffsets::Narrow(_)));
        offsets.insert(1, 10, 1);
        assert!(matches!(offsets, EntryOffsets::Wide(_)));
        assert_eq!(offsets.get(2), Some(65_536));
        offsets.shift(2, -1);
        assert!(matches!(offsets.to_exact(), EntryOffsets::Narrow(_)));
    }
}
