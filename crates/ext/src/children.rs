//! Ordered child listings through the overlay: the view's children merged
//! with the call's own creates and deletes, so a cursor (`after`, `limit`)
//! sees exactly what a full listing would, without listing everything.

/// A child of the listed node that the call wrote: its name and whether it
/// exists after the call's writes so far (`true`: created or rewritten,
/// `false`: deleted). For such a name the overlay, not the view, decides.
pub(crate) type Touched = (String, bool);

/// How many names to ask the view for so that the first `limit` names of
/// the merged listing all lie within the fetched ones. Only the call's
/// deletes can remove fetched names from the answer (a rewritten name stays
/// in it, through `touched`), so `limit` plus their count is enough: when
/// the view has that many, at least `limit` fetched names survive, and any
/// name past the last fetched one sorts after all of them.
pub(crate) fn base_batch(limit: usize, touched: &[Touched]) -> usize {
    let deleted = touched.iter().filter(|(_, present)| !present).count();
    limit.saturating_add(deleted)
}

/// The first `limit` names of `base` (the view's names, sorted) with the
/// call's `touched` names (sorted) applied: a touched name is listed if and
/// only if it is present, whether or not the view has it.
pub(crate) fn merge(base: Vec<String>, touched: Vec<Touched>, limit: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(limit.min(base.len() + touched.len()));
    let mut base = base.into_iter().peekable();
    let mut touched = touched.into_iter().peekable();
    while out.len() < limit {
        let next_touched = touched.peek().map(|(name, _)| name.as_str());
        if let Some(name) = base.next_if(|b| next_touched.is_none_or(|t| b.as_str() < t)) {
            out.push(name);
            continue;
        }
        let Some((name, present)) = touched.next() else {
            break;
        };
        // The view's entry of the same name, if any, is superseded.
        base.next_if_eq(&name);
        if present {
            out.push(name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn names() -> impl Strategy<Value = String> {
        // A small alphabet, so the view and the call often name the same child.
        "[ab]{0,3}"
    }

    #[test]
    fn touched_names_override_the_view() {
        // Proves a deleted base name disappears, a created one appears in order, and a rewritten one appears once.
        let base = vec!["a".to_string(), "c".to_string(), "e".to_string()];
        let touched = vec![
            ("b".to_string(), true),
            ("c".to_string(), false),
            ("e".to_string(), true),
        ];
        assert_eq!(merge(base.clone(), touched.clone(), 10), ["a", "b", "e"]);
        assert_eq!(merge(base, touched, 2), ["a", "b"]);
    }

    proptest! {
        #[test]
        fn a_page_equals_the_filtered_full_listing(
            base in prop::collection::btree_set(names(), 0..12),
            touched in prop::collection::btree_map(names(), any::<bool>(), 0..8),
            after in prop::option::of(names()),
            limit in 0usize..8,
        ) {
            // Proves merge + base_batch give the first `limit` names after `after` of (view minus the call's deletes) plus its creates, in byte order.
            let later = |n: &String| after.as_ref().is_none_or(|a| n > a);
            let mut expected: BTreeSet<String> =
                base.iter().filter(|n| !touched.contains_key(*n)).cloned().collect();
            expected.extend(touched.iter().filter(|(_, &p)| p).map(|(n, _)| n.clone()));
            let expected: Vec<String> =
                expected.into_iter().filter(later).take(limit).collect();

            let touched: Vec<Touched> = touched
                .into_iter()
                .filter(|(n, _)| later(n))
                .collect();
            let batch = base_batch(limit, &touched);
            let fetched: Vec<String> = base.into_iter().filter(later).take(batch).collect();
            prop_assert_eq!(merge(fetched, touched, limit), expected);
        }
    }

    #[test]
    fn an_unbounded_limit_does_not_overflow() {
        // Proves usize::MAX as the limit (a full listing) saturates instead of overflowing.
        let touched = vec![("x".to_string(), false)];
        assert_eq!(base_batch(usize::MAX, &touched), usize::MAX);
    }
}
