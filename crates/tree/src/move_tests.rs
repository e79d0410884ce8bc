//! Group moves between trees: `DataTree::evict` and `DataTree::adopt`.

use proptest::prelude::*;

use crate::testutil::*;
use crate::tree::DataTree;

/// Every node at or under `root`: path, data, ACL and stat.
fn nodes_under(tree: &DataTree, root: &str) -> Vec<(String, Vec<u8>, String, String)> {
    let mut out = Vec::new();
    let prefix = format!("{root}/");
    tree.walk(|p, n| {
        if p == root || p.starts_with(&prefix) {
            let acl = format!("{:?}", n.acl());
            out.push((
                p.to_string(),
                n.data().to_vec(),
                acl,
                format!("{:?}", n.stat()),
            ));
        }
    });
    out
}

/// A world whose tree holds `/app` and a subtree below it built from
/// `shape` (each entry: parent index among the nodes so far, create flags
/// 0 persistent, 1 ephemeral, 4 container), plus `/other`.
fn world_with_group(shape: &[(usize, i32)]) -> World {
    let mut w = World::new();
    w.run(&create("/app")).unwrap();
    w.run(&create("/other")).unwrap();
    let mut paths = vec!["/app".to_string()];
    let mut ephemeral = vec![false];
    for (i, &(parent, flags)) in shape.iter().enumerate() {
        let parent = parent % paths.len();
        if ephemeral[parent] {
            continue; // an ephemeral has no children
        }
        let path = format!("{}/n{i}", paths[parent]);
        w.run_as(7, &[], &create_mode(&path, flags)).unwrap();
        paths.push(path);
        ephemeral.push(flags == 1);
    }
    w
}

proptest! {
    #[test]
    fn a_group_moves_whole_and_back(
        shape in proptest::collection::vec((0usize..40, prop::sample::select(vec![0, 1, 4])), 0..40),
    ) {
        let w = world_with_group(&shape);
        let mut source = w.tree.clone();
        let before_digest = source.digest();
        let (count, bytes) = (source.node_count(), source.approximate_data_size());
        let group = nodes_under(&source, "/app");
        let ephemerals: Vec<String> = source.ephemerals(7).map(str::to_string).collect();

        let mut target = DataTree::new();
        let (target_count, target_bytes) = (target.node_count(), target.approximate_data_size());
        let zxid = source.last_zxid() + 1;
        let subtree = source.evict("/app", zxid).expect("the group is there");
        target.adopt("/app", subtree, zxid);

        prop_assert_eq!(source.check_invariants(), Ok(()));
        prop_assert_eq!(target.check_invariants(), Ok(()));
        prop_assert!(nodes_under(&source, "/app").is_empty());
        prop_assert_eq!(nodes_under(&target, "/app"), group.clone());
        prop_assert_eq!(source.node_count() + target.node_count(), count + target_count);
        prop_assert_eq!(
            source.approximate_data_size() + target.approximate_data_size(),
            bytes + target_bytes
        );
        prop_assert_eq!(source.ephemerals(7).count(), 0);
        let moved: Vec<String> = target.ephemerals(7).map(str::to_string).collect();
        prop_assert_eq!(moved, ephemerals);
        prop_assert!(source.node("/other").is_some());
        prop_assert_eq!(source.last_zxid(), zxid);
        prop_assert_eq!(target.last_zxid(), zxid);

        // And back: the source is what it was, node for node.
        let subtree = target.evict("/app", zxid + 1).expect("moved there");
        source.adopt("/app", subtree, zxid + 1);
        prop_assert_eq!(source.digest(), before_digest);
        prop_assert_eq!(source.check_invariants(), Ok(()));
        prop_assert_eq!(target.check_invariants(), Ok(()));
        prop_assert_eq!(target.node_count(), target_count);
    }
}

#[test]
fn a_link_is_the_root_without_its_children() {
    let mut w = world_with_group(&[(0, 0), (1, 0), (0, 1)]);
    w.run(&set_data("/app", b"app data", -1)).unwrap();
    let stat = w.stat("/app");
    let mut tree = w.tree.clone();
    let subtree = tree.evict("/app", 100).expect("there");
    tree.adopt("/app", subtree.link(), 100);
    assert_eq!(tree.check_invariants(), Ok(()));
    let link = tree.node("/app").expect("the link");
    assert_eq!(link.data(), b"app data");
    assert_eq!(link.child_count(), 0);
    assert_eq!(link.stat().mzxid, stat.mzxid);
    assert_eq!(link.stat().version, stat.version);
    assert!(tree.node("/app/n0").is_none());
}

#[test]
fn evicting_what_is_not_there_changes_nothing() {
    let w = world_with_group(&[]);
    let mut tree = w.tree.clone();
    let digest = tree.digest();
    assert!(tree.evict("/missing", 50).is_none());
    assert!(tree.evict("/missing/deeper", 50).is_none());
    assert_eq!(tree.digest(), digest);
}

#[test]
#[should_panic(expected = "a node is there")]
fn adopting_over_a_node_is_refused() {
    let w = world_with_group(&[]);
    let mut tree = w.tree.clone();
    let subtree = tree.clone().evict("/app", 50).expect("there");
    tree.adopt("/app", subtree, 50);
}
