mod common;

use common::{Harness, MemTree, CREATE, SEQ};
use stoa_ext::{ErrorCode, ExtOp};

// ---- priority queue -------------------------------------------------------

fn queue() -> Harness {
    Harness::example("priority_queue.lua", "/queue", MemTree::new())
}

#[test]
fn priority_queue_dequeues_by_priority_then_insertion_order() {
    // Proves smaller priorities come first, ties in insertion order, each getData /queue/next removing the head.
    let mut h = queue();
    for (prio, item) in [
        (5, "e1"),
        (1, "a1"),
        (5, "e2"),
        (-3, "neg"),
        (1, "a2"),
        (12, "z"),
    ] {
        let r = h.reply(SEQ, &format!("/queue/node-{prio}-"), item).unwrap();
        assert!(r.path.unwrap().starts_with(&format!("/queue/node-{prio}-")));
    }
    let mut got = Vec::new();
    while let Ok(item) = h.get("/queue/next") {
        got.push(item);
    }
    assert_eq!(got, ["neg", "a1", "a2", "e1", "e2", "z"]);
    assert_eq!(h.tree.nodes["/queue"].1.num_children, 0);
}

#[test]
fn priority_queue_is_nonode_when_empty() {
    // Proves dequeuing an empty (or never used) queue replies NoNode and writes nothing.
    let mut h = queue();
    assert_eq!(h.get("/queue/next"), Err(ErrorCode::NoNode));
    h.reply(SEQ, "/queue/node-1-", "x").unwrap();
    assert_eq!(h.get("/queue/next").unwrap(), "x");
    let out = h.run(ExtOp::GetData, "/queue/next", "", -1).unwrap();
    assert_eq!(out.reply, Err(ErrorCode::NoNode));
    assert!(out.writes.is_empty());
}

#[test]
fn priority_queue_removal_is_one_transaction() {
    // Proves a dequeue returns the head's data and emits exactly one delete (one multi, no retries).
    let mut h = queue();
    h.reply(SEQ, "/queue/node-2-", "b").unwrap();
    h.reply(SEQ, "/queue/node-1-", "a").unwrap();
    let out = h.run(ExtOp::GetData, "/queue/next", "", -1).unwrap();
    assert_eq!(out.reply.unwrap().data.as_deref(), Some(&b"a"[..]));
    assert_eq!(out.writes.len(), 1);
    assert!(
        matches!(&out.writes[0], stoa_ext::WriteOp::Delete { path, .. } if path.starts_with("/queue/node-1-"))
    );
}

#[test]
fn priority_queue_refuses_malformed_inserts() {
    // Proves non-sequential or misnamed inserts are BadArguments.
    let mut h = queue();
    assert_eq!(
        h.reply(CREATE, "/queue/node-1-", "x"),
        Err(ErrorCode::BadArguments)
    );
    assert_eq!(
        h.reply(SEQ, "/queue/item-", "x"),
        Err(ErrorCode::BadArguments)
    );
    assert_eq!(
        h.reply(SEQ, "/queue/node-x-", "x"),
        Err(ErrorCode::BadArguments)
    );
}

// ---- quota ----------------------------------------------------------------

fn quota(free: &str) -> Harness {
    Harness::example(
        "quota.lua",
        "/memory-quota",
        MemTree::with(&[("/memory", free)]),
    )
}

#[test]
fn quota_allocates_and_releases_atomically() {
    // Proves setData /memory-quota lowers /memory by the amount, negative amounts release, getData reads the free amount.
    let mut h = quota("1500");
    h.reply(ExtOp::SetData, "/memory-quota", "100").unwrap();
    h.reply(ExtOp::SetData, "/memory-quota", "400").unwrap();
    assert_eq!(h.tree.data("/memory").as_deref(), Some("1000"));
    let r = h.reply(ExtOp::SetData, "/memory-quota", "-100").unwrap();
    assert_eq!(r.stat.unwrap().version, 3);
    assert_eq!(h.get("/memory-quota").unwrap(), "1100");
}

#[test]
fn quota_fails_with_quota_exceeded_only_when_short() {
    // Proves an allocation beyond the free amount is QuotaExceeded and changes nothing; exactly the free amount succeeds.
    let mut h = quota("150");
    let out = h.run(ExtOp::SetData, "/memory-quota", "151", -1).unwrap();
    assert_eq!(out.reply, Err(ErrorCode::QuotaExceeded));
    assert!(out.writes.is_empty());
    assert_eq!(h.tree.data("/memory").as_deref(), Some("150"));
    assert_eq!(h.tree.nodes["/memory"].1.version, 0);
    h.reply(ExtOp::SetData, "/memory-quota", "150").unwrap();
    assert_eq!(h.tree.data("/memory").as_deref(), Some("0"));
    assert_eq!(
        h.reply(ExtOp::SetData, "/memory-quota", "1"),
        Err(ErrorCode::QuotaExceeded)
    );
}

#[test]
fn quota_refuses_malformed_amounts_and_other_ops() {
    // Proves non-integer amounts are BadArguments and unsupported ops Unimplemented.
    let mut h = quota("10");
    for bad in ["", "abc", "1.5", "1e3"] {
        assert_eq!(
            h.reply(ExtOp::SetData, "/memory-quota", bad),
            Err(ErrorCode::BadArguments),
            "{bad}"
        );
    }
    assert_eq!(
        h.reply(ExtOp::Delete, "/memory-quota", ""),
        Err(ErrorCode::Unimplemented)
    );
    assert_eq!(
        h.reply(ExtOp::SetData, "/memory-quota/x", "1"),
        Err(ErrorCode::NoNode)
    );
    assert_eq!(h.tree.data("/memory").as_deref(), Some("10"));
}

// ---- counter --------------------------------------------------------------

#[test]
fn counter_fetch_and_add() {
    // Proves getData /counter/<c>/next increments from 0 and setData /counter/<c> adds a delta.
    let mut h = Harness::example("counter.lua", "/counter", MemTree::new());
    assert_eq!(h.get("/counter/hits/next").unwrap(), "1");
    assert_eq!(h.get("/counter/hits/next").unwrap(), "2");
    assert_eq!(h.get("/counter/other/next").unwrap(), "1");
    h.reply(ExtOp::SetData, "/counter/hits", "40").unwrap();
    assert_eq!(h.get("/counter/hits").unwrap(), "42");
    h.reply(ExtOp::SetData, "/counter/hits", "-50").unwrap();
    assert_eq!(h.get("/counter/hits/next").unwrap(), "-7");
    assert_eq!(
        h.reply(ExtOp::SetData, "/counter/hits", "x"),
        Err(ErrorCode::BadArguments)
    );
}

// ---- assertion ------------------------------------------------------------

#[test]
fn assertion_validates_data_under_its_subtree() {
    // Proves creates/sets with invalid data are BadArguments with nothing written; valid ones pass through.
    let mut h = Harness::example("assertion.lua", "/validated", MemTree::new());
    assert_eq!(
        h.reply(CREATE, "/validated/a", "hello"),
        Err(ErrorCode::BadArguments)
    );
    assert!(!h.tree.nodes.contains_key("/validated"));
    h.reply(CREATE, "/validated/a", "10").unwrap();
    assert_eq!(
        h.reply(ExtOp::SetData, "/validated/a", "1001"),
        Err(ErrorCode::BadArguments)
    );
    assert_eq!(
        h.reply(ExtOp::SetData, "/validated/a", "1 "),
        Err(ErrorCode::BadArguments)
    );
    h.reply(ExtOp::SetData, "/validated/a", "1000").unwrap();
    assert_eq!(h.get("/validated/a").unwrap(), "1000");
    h.reply(ExtOp::SetData, "/validated", "anything").unwrap();
}

// ---- barrier --------------------------------------------------------------

#[test]
fn barrier_opens_on_the_nth_join() {
    // Proves /barrier/<b>/ready appears in the same transaction as the N-th join, not before.
    let mut h = Harness::example("barrier.lua", "/barrier", MemTree::new());
    assert_eq!(
        h.reply(CREATE, "/barrier/b", "zero"),
        Err(ErrorCode::BadArguments)
    );
    h.reply(CREATE, "/barrier/b", "3").unwrap();
    h.reply(CREATE, "/barrier/b/m1", "").unwrap();
    h.reply(CREATE, "/barrier/b/m2", "").unwrap();
    assert!(!h.tree.nodes.contains_key("/barrier/b/ready"));
    let out = h.run(CREATE, "/barrier/b/m3", "", -1).unwrap();
    assert_eq!(out.writes.len(), 2);
    assert!(h.tree.nodes.contains_key("/barrier/b/ready"));
    assert_eq!(
        h.reply(CREATE, "/barrier/b/ready", ""),
        Err(ErrorCode::BadArguments)
    );
}

// ---- FIFO lock ------------------------------------------------------------

#[test]
fn fifo_lock_hands_off_in_arrival_order() {
    // Proves acquirers queue in order, the lock's data names the holder, and release hands off to the next one in the same transaction.
    let mut h = Harness::example("fifo_lock.lua", "/lock", MemTree::new());
    let a = h
        .run_as(1, CREATE, "/lock/l/w-", "", -1)
        .unwrap()
        .reply
        .unwrap()
        .path
        .unwrap();
    let b = h
        .run_as(2, CREATE, "/lock/l/w-", "", -1)
        .unwrap()
        .reply
        .unwrap()
        .path
        .unwrap();
    let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
    assert_eq!(h.tree.data("/lock/l"), Some(name(&a)));
    assert_eq!(h.tree.nodes[&a].1.ephemeral_owner, 1);
    // Only the owner may release.
    assert_eq!(
        h.run_as(2, ExtOp::Delete, &a, "", -1).unwrap().reply,
        Err(ErrorCode::NoAuth)
    );
    let out = h.run_as(1, ExtOp::Delete, &a, "", -1).unwrap();
    assert_eq!(out.writes.len(), 2);
    assert_eq!(h.tree.data("/lock/l"), Some(name(&b)));
    assert_eq!(h.get("/lock/l").unwrap(), name(&b));
    h.run_as(2, ExtOp::Delete, &b, "", -1)
        .unwrap()
        .reply
        .unwrap();
    assert_eq!(h.get("/lock/l").unwrap(), "");
}
