//! The load balancer (AGORA §IV-G; docs/partitions.md, "The load
//! balancer"): every server counts the requests it takes per group; the
//! leader, once per interval, compares its partitions' counts and, when
//! the busiest carries clearly more than the least busy, moves the group
//! that evens them out best there, through the same transaction an
//! operator's move is (`engine/group_moves.rs`). One move per interval at
//! most, decided on a fresh count each time, so a move's own effect is
//! seen before the next.

use rustc_hash::FxHashMap;
use stoa_proto::request::Request;
use stoa_tree::GroupMove;

use super::Engine;
use crate::placement::Placement;

/// The busiest partition must carry at least this many times the least
/// busy one's requests for a move: smaller differences are noise, and a
/// move holds every write for a commit.
const IMBALANCE_RATIO: f64 = 1.5;
/// Requests a window must hold on the busiest partition before a move is
/// worth its pause.
const BUSY_REQUESTS_MIN: u64 = 200;

/// Requests per group in the current window.
#[derive(Debug, Default)]
pub(crate) struct GroupLoad {
    by_root: FxHashMap<String, u64>,
    window_started_ms: i64,
}

/// What the balancer decided: the group, where it goes, and the counts
/// behind it, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BalanceMove {
    pub root: String,
    pub from: u32,
    pub to: u32,
    pub group_load: u64,
    pub from_load: u64,
    pub to_load: u64,
}

/// The move that evens the partitions' loads out best, if any is worth
/// it: from the busiest partition to the least busy, the group whose load
/// brings the two closest together without swapping their places.
pub(crate) fn decide(
    placement: &Placement,
    by_root: &FxHashMap<String, u64>,
) -> Option<BalanceMove> {
    let mut per_partition = vec![0u64; placement.partitions() as usize];
    for (root, p) in placement.groups() {
        per_partition[p as usize] += by_root.get(root).copied().unwrap_or(0);
    }
    let (busiest, &from_load) = (per_partition.iter().enumerate())
        .max_by_key(|&(p, load)| (*load, std::cmp::Reverse(p)))?;
    // On a tie, not partition 0, which also carries `/` and the sessions.
    let (idlest, &to_load) =
        (per_partition.iter().enumerate()).min_by_key(|&(p, load)| (*load, p == 0, p))?;
    if busiest == idlest
        || from_load < BUSY_REQUESTS_MIN
        || (from_load as f64) < IMBALANCE_RATIO * to_load as f64
    {
        return None;
    }
    let gap = from_load - to_load;
    // Moving load g leaves max(from - g, to + g): best at g = gap / 2, and
    // no gain from g >= gap. `/` never moves.
    let (root, group_load) = placement
        .groups_on(busiest as u32)
        .filter(|root| *root != "/")
        .map(|root| (root, by_root.get(root).copied().unwrap_or(0)))
        .filter(|&(_, g)| g > 0 && g < gap)
        .min_by_key(|&(root, g)| ((2 * g).abs_diff(gap), root))?;
    Some(BalanceMove {
        root: root.to_string(),
        from: busiest as u32,
        to: idlest as u32,
        group_load,
        from_load,
        to_load,
    })
}

impl Engine {
    /// Whether requests are counted per group: the balancer is on.
    pub(super) fn group_load_counted(&self) -> bool {
        self.config.balance_interval_ms.is_some() && self.cores.len() > 1
    }

    /// Counts a request against its path's group (servers of several
    /// partitions with the balancer on).
    pub(super) fn count_group_request(&mut self, request: &Request) {
        let Some(path) = request.path() else {
            return;
        };
        let root = self.placement.group_of(path);
        match self.group_load.by_root.get_mut(root) {
            Some(count) => *count += 1,
            None => {
                self.group_load.by_root.insert(root.to_string(), 1);
            }
        }
    }

    /// Each tick: at the end of a window, the leader decides on its counts
    /// and proposes the move, if any; every server starts a new window.
    pub(super) fn balance_partitions(&mut self) {
        let Some(interval_ms) = self.config.balance_interval_ms else {
            return;
        };
        if self.cores.len() == 1 {
            return;
        }
        if self.now_ms - self.group_load.window_started_ms < interval_ms as i64 {
            return;
        }
        let counts = std::mem::take(&mut self.group_load.by_root);
        self.group_load.window_started_ms = self.now_ms;
        if !self.is_leader() || !self.may_prepare() {
            return;
        }
        let Some(decided) = decide(&self.placement, &counts) else {
            return;
        };
        log::info!(
            "load balancer: partition {} took {} requests in the last {interval_ms} ms, \
             partition {} took {}: moving group {} ({} requests) to partition {}",
            decided.from,
            decided.from_load,
            decided.to,
            decided.to_load,
            decided.root,
            decided.group_load,
            decided.to
        );
        let mut next = self.placement.clone();
        if let Err(e) = next.move_group(&decided.root, decided.to) {
            log::warn!("load balancer: {e}");
            return;
        }
        self.stats.balancer_moves += 1;
        let moved = GroupMove {
            root: decided.root,
            from: decided.from,
            to: decided.to,
        };
        self.propose_placement(next, vec![moved]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(groups: &[(&str, u32)]) -> Placement {
        let mut p = Placement::new(3, false, &[]).unwrap();
        for &(root, partition) in groups {
            p.add_group(root, partition).unwrap();
        }
        p
    }

    fn load(counts: &[(&str, u64)]) -> FxHashMap<String, u64> {
        counts.iter().map(|&(r, c)| (r.to_string(), c)).collect()
    }

    #[test]
    fn a_skew_moves_the_group_that_evens_it_out_best() {
        let p = placement(&[("/a", 1), ("/b", 1), ("/c", 1), ("/d", 2)]);
        let decided = decide(
            &p,
            &load(&[("/a", 900), ("/b", 500), ("/c", 100), ("/d", 300)]),
        );
        // Partition 1 has 1500, 2 has 300, 0 has none: the gap to 0 is
        // 1500; /a's 900 leaves 600 and 900, /b's 500 leaves 1000 and 500,
        // /c's 100 leaves 1400 and 100.
        assert_eq!(
            decided,
            Some(BalanceMove {
                root: "/a".into(),
                from: 1,
                to: 0,
                group_load: 900,
                from_load: 1500,
                to_load: 0,
            })
        );
    }

    #[test]
    fn nothing_moves_when_it_would_not_help() {
        let p = placement(&[("/a", 1), ("/b", 2)]);
        // Quiet, or even.
        assert_eq!(decide(&p, &load(&[])), None);
        assert_eq!(decide(&p, &load(&[("/a", 150), ("/b", 10)])), None);
        assert_eq!(
            decide(&p, &load(&[("/a", 1000), ("/b", 900), ("/", 800)])),
            None
        );
        // One hot group alone on its partition: moving it moves the hotspot.
        assert_eq!(decide(&p, &load(&[("/a", 5000)])), None);
        // The root group never moves, however hot.
        let p = placement(&[("/a", 2)]);
        assert_eq!(decide(&p, &load(&[("/", 5000), ("/a", 10)])), None);
    }

    #[test]
    fn an_idle_partition_other_than_0_is_preferred() {
        let p = placement(&[("/a", 1), ("/b", 1)]);
        let decided = decide(&p, &load(&[("/a", 600), ("/b", 600)])).unwrap();
        assert_eq!((decided.from, decided.to), (1, 2));
    }

    proptest::proptest! {
        /// Whatever the loads, a decided move lowers the busier of the two
        /// partitions it touches and never makes the target the busier.
        #[test]
        fn a_move_always_narrows_the_gap(loads in proptest::collection::vec(0u64..5000, 6)) {
            let p = placement(&[("/a", 1), ("/b", 1), ("/c", 2), ("/d", 0), ("/e", 1)]);
            let roots = ["/", "/a", "/b", "/c", "/d", "/e"];
            let counts: FxHashMap<String, u64> =
                roots.iter().zip(&loads).map(|(r, &c)| (r.to_string(), c)).collect();
            if let Some(m) = decide(&p, &counts) {
                proptest::prop_assert!(m.root != "/");
                proptest::prop_assert_eq!(p.partition_of(&m.root), m.from);
                proptest::prop_assert!(m.group_load < m.from_load - m.to_load);
                let after = (m.from_load - m.group_load).max(m.to_load + m.group_load);
                proptest::prop_assert!(after < m.from_load);
            }
        }
    }
}
