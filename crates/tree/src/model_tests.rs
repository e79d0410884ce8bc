//! Property tests: random workloads through Preparer + apply keep the
//! tree's invariants, survive a snapshot round trip, and do not depend on
//! how preparation and application interleave.

use proptest::prelude::*;
use stoa_proto::records::*;
use stoa_proto::request::Request;

use crate::snapshot::{read_snapshot, write_snapshot};
use crate::testutil::*;
use crate::tree::DataTree;

const NAMES: [&str; 4] = ["/a", "/a/b", "/c", "/a/b/d"];
const SESSIONS: [i64; 3] = [0x11, 0x22, 0x33];

#[derive(Debug, Clone)]
enum Op {
    Req(i64, Request),
    Close(i64),
}

fn path() -> impl Strategy<Value = String> {
    prop::sample::select(NAMES.to_vec()).prop_map(str::to_owned)
}

fn single() -> impl Strategy<Value = Request> {
    prop_oneof![
        (path(), 0..7i32).prop_map(|(p, f)| create_mode(&p, f)),
        (path(), 0..7i32).prop_map(|(p, f)| Request::Create2(create_req(&p, f))),
        path().prop_map(|p| Request::CreateContainer(create_req(&p, 4))),
        (path(), 5..7i32, -1..3i64).prop_map(|(p, flags, ttl)| Request::CreateTtl(
            CreateTtlRequest {
                path: p,
                data: Some(vec![]),
                acl: open(),
                flags,
                ttl
            }
        )),
        (path(), -1..2i32).prop_map(|(p, v)| delete(&p, v)),
        (path(), -1..2i32, any::<u8>()).prop_map(|(p, v, b)| set_data(&p, &[b], v)),
        (path(), -1..2i32).prop_map(|(p, v)| set_acl(&p, open(), v)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let sess = prop::sample::select(SESSIONS.to_vec());
    prop_oneof![
        6 => (sess.clone(), single()).prop_map(|(s, r)| Op::Req(s, r)),
        2 => (sess.clone(), prop::collection::vec(
            prop_oneof![single(), (path(), -1..2i32).prop_map(|(p, v)| check(&p, v))], 0..4))
            .prop_map(|(s, ops)| Op::Req(s, Request::Multi(ops))),
        1 => sess.prop_map(Op::Close),
    ]
}

fn prepare(w: &mut World, op: &Op) -> crate::Txn {
    match op {
        Op::Req(s, r) => w.prepare(*s, &[], r),
        Op::Close(s) => {
            let ctx = w.ctx(*s, &[]);
            w.prep.prepare_close_session(&w.tree, &ctx)
        }
    }
}

fn check_tree(t: &DataTree) -> Result<(), TestCaseError> {
    prop_assert_eq!(t.check_invariants(), Ok(()));
    for p in t.paths_depth_first() {
        let n = t.node(&p).unwrap();
        let s = n.stat();
        prop_assert_eq!(s.num_children as usize, n.children().count());
        for c in n.children() {
            let child = t.node(&crate::path::join(&p, &c)).unwrap();
            // The parent saw this child's creation.
            prop_assert!(n.persisted().pzxid >= child.persisted().czxid);
            if child.persisted().czxid > 0 {
                prop_assert!(n.persisted().cversion >= 1);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_and_snapshots_round_trip(ops in prop::collection::vec(op(), 1..40)) {
        // Proves apply keeps every invariant and a snapshot restores the same digest.
        let mut w = World::new();
        for op in &ops {
            let before: Vec<(String, i32, i64)> = w.tree.paths_depth_first().iter()
                .map(|p| {
                    let n = w.tree.node(p).unwrap().persisted();
                    (p.to_string(), n.cversion, n.czxid)
                })
                .collect();
            let txn = prepare(&mut w, op);
            let applied = w.commit(&txn);
            check_tree(&w.tree)?;
            // cversion never goes back on a node that lived through the op (a multi may delete
            // and recreate a path); pzxid moves on every child change.
            for (p, cv, czxid) in before {
                if let Some(n) = w.tree.node(&p).filter(|n| n.persisted().czxid == czxid) {
                    prop_assert!(n.persisted().cversion >= cv);
                }
            }
            for e in &applied.events {
                // A multi may delete a child and then its parent: the event stays, the node goes.
                if e.kind == crate::TreeEventKind::NodeChildrenChanged {
                    if let Some(n) = w.tree.node(&e.path) {
                        prop_assert_eq!(n.persisted().pzxid, txn.header.zxid);
                    }
                }
            }
        }
        let mut buf = Vec::new();
        write_snapshot(&w.tree, &mut buf).unwrap();
        let back = read_snapshot(&mut buf.as_slice()).unwrap();
        prop_assert_eq!(back.digest(), w.tree.digest());
        prop_assert_eq!(back.last_zxid(), w.tree.last_zxid());
        prop_assert_eq!(back.sessions().collect::<Vec<_>>(), w.tree.sessions().collect::<Vec<_>>());
        for s in SESSIONS {
            prop_assert_eq!(back.ephemerals(s).collect::<Vec<_>>(), w.tree.ephemerals(s).collect::<Vec<_>>());
        }
    }

    #[test]
    fn batched_preparation_equals_one_at_a_time(
        ops in prop::collection::vec(op(), 1..30),
        batch in 1usize..8,
    ) {
        // Proves preparing N requests before applying them gives the same tree as lock-step.
        let mut step = World::new();
        for op in &ops {
            let t = prepare(&mut step, op);
            step.commit(&t);
        }
        let mut batched = World::new();
        for chunk in ops.chunks(batch) {
            let txns: Vec<_> = chunk.iter().map(|op| prepare(&mut batched, op)).collect();
            for t in &txns {
                batched.commit(t);
            }
            prop_assert_eq!(batched.prep.pending(), 0);
        }
        prop_assert_eq!(batched.tree.digest(), step.tree.digest());
    }
}
