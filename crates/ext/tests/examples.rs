mod common;

use common::{example_source, node_spec, Harness, MemTree, CREATE, SEQ};
use proptest::prelude::*;
use stoa_ext::{ErrorCode, ExtOp};

// ---- priority queue -------------------------------------------------------

fn queue() -> Harness {
    Harness::example("priority_queue.lua", "/queue", MemTree::new())
}

/// Inserts `item` with priority `prio` (as the client spells it); returns
/// the stored node's path.
fn enqueue(h: &mut Harness, prio: &str, item: &str) -> String {
    let r = h.reply(SEQ, &format!("/queue/node-{prio}-"), item).unwrap();
    r.path.unwrap()
}

fn drain(h: &mut Harness) -> Vec<String> {
    let mut got = Vec::new();
    while let Ok(item) = h.get("/queue/next") {
        got.push(item);
    }
    got
}

#[test]
fn priority_queue_dequeues_by_priority_then_insertion_order() {
    // Proves smaller priorities come first, ties in insertion order, each getData /queue/next removing the head; the insert's reply names the stored node.
    let mut h = queue();
    for (prio, item) in [
        (5, "e1"),
        (1, "a1"),
        (5, "e2"),
        (-3, "neg"),
        (1, "a2"),
        (12, "z"),
    ] {
        let path = enqueue(&mut h, &prio.to_string(), item);
        assert!(path.starts_with("/queue/node-"), "{path}");
        assert_eq!(h.tree.data(&path).as_deref(), Some(item));
    }
    assert_eq!(drain(&mut h), ["neg", "a1", "a2", "e1", "e2", "z"]);
    assert_eq!(h.tree.nodes["/queue"].1.num_children, 0);
}

#[test]
fn priority_queue_orders_negative_and_64_bit_priorities() {
    // Proves the stored names order the whole i64 range (both extremes, around zero, leading zeros) with ties in insertion order.
    let mut h = queue();
    let min = i64::MIN.to_string();
    let max = i64::MAX.to_string();
    for (prio, item) in [
        (max.as_str(), "max"),
        ("0", "zero"),
        ("-1", "minus-one"),
        (min.as_str(), "min"),
        ("007", "seven-a"),
        ("-10", "minus-ten"),
        ("-0", "zero-b"),
        ("7", "seven-b"),
        (min.as_str(), "min-b"),
        ("1", "one"),
        (max.as_str(), "max-b"),
    ] {
        enqueue(&mut h, prio, item);
    }
    assert_eq!(
        drain(&mut h),
        [
            "min",
            "min-b",
            "minus-ten",
            "minus-one",
            "zero",
            "zero-b",
            "one",
            "seven-a",
            "seven-b",
            "max",
            "max-b"
        ]
    );
}

#[test]
fn priority_queue_refuses_priorities_beyond_64_bits() {
    // Proves a priority outside i64 is BadArguments and writes nothing, instead of wrapping or rounding.
    let mut h = queue();
    for prio in [
        "9223372036854775808",
        "-9223372036854775809",
        "100000000000000000000",
    ] {
        let out = h
            .run(SEQ, &format!("/queue/node-{prio}-"), "x", -1)
            .unwrap();
        assert_eq!(out.reply, Err(ErrorCode::BadArguments), "{prio}");
        assert!(out.writes.is_empty());
    }
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
    let head = enqueue(&mut h, "1", "a");
    let out = h.run(ExtOp::GetData, "/queue/next", "", -1).unwrap();
    assert_eq!(out.reply.unwrap().data.as_deref(), Some(&b"a"[..]));
    assert_eq!(
        out.writes,
        [stoa_ext::WriteOp::Delete {
            path: head,
            version: 0
        }]
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
    for bad in [
        "/queue/item-",
        "/queue/node-x-",
        "/queue/node-+1-",
        "/queue/node-1.5-",
    ] {
        assert_eq!(
            h.reply(SEQ, bad, "x"),
            Err(ErrorCode::BadArguments),
            "{bad}"
        );
    }
}

#[test]
fn priority_queue_skips_children_that_are_not_elements() {
    // Proves nodes under /queue from before the extension (other names, the old node-<prio>-<seq> form) are never served and do not hide elements.
    let tree = MemTree::with(&[
        ("/queue", ""),
        ("/queue/node-5-0000000001", "old"),
        ("/queue/node-oops", "foreign"),
        ("/queue/other", "foreign"),
    ]);
    let mut h = Harness::example("priority_queue.lua", "/queue", tree);
    assert_eq!(h.get("/queue/next"), Err(ErrorCode::NoNode));
    enqueue(&mut h, "9", "late");
    enqueue(&mut h, "-9", "early");
    assert_eq!(drain(&mut h), ["early", "late"]);
    assert_eq!(h.tree.nodes["/queue"].1.num_children, 3);
}

#[test]
fn priority_queue_dequeue_cost_does_not_grow_with_the_queue() {
    // Proves a dequeue from 3,000 elements runs within 5,000 Lua instructions (a scan would need over 40,000).
    let mut h = Harness::new(MemTree::new());
    let mut spec = node_spec("pq", "/queue", &example_source("priority_queue.lua"));
    spec.limits.instructions_max = 5_000;
    h.mgr.register(spec).unwrap();
    for i in 0..3_000 {
        enqueue(&mut h, &(i % 7).to_string(), &i.to_string());
    }
    assert_eq!(h.get("/queue/next").unwrap(), "0");
    assert_eq!(h.get("/queue/next").unwrap(), "7");
    assert_eq!(h.mgr.metrics()[0].1.limits_hit, 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn priority_queue_serves_a_stable_sort_by_priority(
        prios in prop::collection::vec(prop_oneof![any::<i64>(), -3i64..3], 0..24)
    ) {
        // Proves, for any i64 priorities, the drain order equals a stable sort of the inserts by priority.
        let mut h = queue();
        for (i, prio) in prios.iter().enumerate() {
            enqueue(&mut h, &prio.to_string(), &i.to_string());
        }
        let mut expected: Vec<(i64, usize)> = prios.iter().copied().zip(0..).collect();
        expected.sort_by_key(|(prio, _)| *prio);
        let expected: Vec<String> = expected.iter().map(|(_, i)| i.to_string()).collect();
        prop_assert_eq!(drain(&mut h), expected);
    }
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
    // The delete, the lock's data, and the grant of b's ticket.
    assert_eq!(out.writes.len(), 3);
    assert_eq!(h.tree.data("/lock/l"), Some(name(&b)));
    assert_eq!(h.tree.nodes[&b].1.version, 1);
    assert_eq!(h.get("/lock/l").unwrap(), name(&b));
    h.run_as(2, ExtOp::Delete, &b, "", -1)
        .unwrap()
        .reply
        .unwrap();
    assert_eq!(h.get("/lock/l").unwrap(), "");
}

#[test]
fn fifo_lock_grants_by_the_tickets_version_in_the_acquiring_call() {
    // Proves the create's reply says whether the caller holds the lock (version 1) or waits (0), a grant
    // touches only the granted ticket (each waiter is notified in turn, no herd), and a cancelled wait
    // grants nothing.
    let mut h = Harness::example("fifo_lock.lua", "/lock", MemTree::new());
    let take = |h: &mut Harness, session: i64| {
        let r = h.run_as(session, CREATE, "/lock/l/w-", "me", -1).unwrap();
        let r = r.reply.unwrap();
        (r.path.unwrap(), r.stat.unwrap().version)
    };
    let (a, va) = take(&mut h, 1);
    let (b, vb) = take(&mut h, 2);
    let (c, vc) = take(&mut h, 3);
    assert_eq!((va, vb, vc), (1, 0, 0));
    assert_eq!(h.tree.data(&a).as_deref(), Some("me"));
    // c cancels: nothing changes for a and b.
    let out = h.run_as(3, ExtOp::Delete, &c, "", -1).unwrap();
    assert_eq!(out.writes.len(), 1);
    assert_eq!(h.tree.nodes[&b].1.version, 0);
    h.run_as(1, ExtOp::Delete, &a, "", -1).unwrap();
    assert_eq!(h.tree.nodes[&b].1.version, 1);
    assert_eq!(h.tree.data(&b).as_deref(), Some("me"));
    // Grants are the extension's: a client cannot set a ticket.
    assert_eq!(
        h.run_as(2, ExtOp::SetData, &b, "x", -1).unwrap().reply,
        Err(ErrorCode::BadArguments)
    );
}

// ---- semaphore ------------------------------------------------------------

fn sem_take(h: &mut Harness, session: i64, sem: &str) -> Result<(String, i32), ErrorCode> {
    let r = h
        .run_as(session, CREATE, &format!("{sem}/p-"), "", -1)
        .unwrap();
    let r = r.reply?;
    Ok((r.path.unwrap(), r.stat.unwrap().version))
}

#[test]
fn semaphore_grants_n_permits_then_waiters_in_arrival_order() {
    // Proves N permits are granted at once, the rest wait, every release (by any holder) grants the oldest
    // waiter in the same transaction, and a missing or bad N is refused.
    let mut h = Harness::example("semaphore.lua", "/sem", MemTree::new());
    assert_eq!(h.reply(CREATE, "/sem/s", "0"), Err(ErrorCode::BadArguments));
    assert_eq!(sem_take(&mut h, 1, "/sem/s"), Err(ErrorCode::NoNode));
    h.reply(CREATE, "/sem/s", "2").unwrap();
    let tickets: Vec<(String, i32)> = (1..=5)
        .map(|s| sem_take(&mut h, s, "/sem/s").unwrap())
        .collect();
    let versions: Vec<i32> = tickets.iter().map(|t| t.1).collect();
    assert_eq!(versions, [1, 1, 0, 0, 0]);
    let version = |h: &Harness, i: usize| h.tree.nodes[&tickets[i].0].1.version;
    // The second holder releases: the third ticket (oldest waiter) is granted, not the fifth.
    let out = h.run_as(2, ExtOp::Delete, &tickets[1].0, "", -1).unwrap();
    assert_eq!(out.writes.len(), 2);
    assert_eq!((version(&h, 2), version(&h, 3), version(&h, 4)), (1, 0, 0));
    // Only the owner releases.
    assert_eq!(
        h.run_as(9, ExtOp::Delete, &tickets[0].0, "", -1)
            .unwrap()
            .reply,
        Err(ErrorCode::NoAuth)
    );
    // More permits grant waiters at once.
    h.reply(ExtOp::SetData, "/sem/s", "4").unwrap();
    assert_eq!((version(&h, 3), version(&h, 4)), (1, 1));
    assert_eq!(
        h.reply(ExtOp::SetData, "/sem/s", "-1"),
        Err(ErrorCode::BadArguments)
    );
    assert_eq!(h.get("/sem/s").unwrap(), "4");
}

#[test]
fn semaphore_with_fewer_permits_grants_only_below_the_new_count() {
    // Proves lowering N takes no permit back but holds waiters until the holders drop below N.
    let mut h = Harness::example("semaphore.lua", "/sem", MemTree::new());
    h.reply(CREATE, "/sem/s", "3").unwrap();
    let t: Vec<String> = (1..=4)
        .map(|s| sem_take(&mut h, s, "/sem/s").unwrap().0)
        .collect();
    h.reply(ExtOp::SetData, "/sem/s", "1").unwrap();
    h.run_as(1, ExtOp::Delete, &t[0], "", -1).unwrap();
    h.run_as(2, ExtOp::Delete, &t[1], "", -1).unwrap();
    assert_eq!(h.tree.nodes[&t[3]].1.version, 0);
    h.run_as(3, ExtOp::Delete, &t[2], "", -1).unwrap();
    assert_eq!(h.tree.nodes[&t[3]].1.version, 1);
}

// ---- leader election ------------------------------------------------------

#[test]
fn election_hands_leadership_to_the_next_candidate_in_join_order() {
    // Proves the oldest candidate leads (its ticket at version 1, its name the election's data), a non-leader
    // resigning changes nothing, and the leader resigning elects the next candidate in the same transaction.
    let mut h = Harness::example("election.lua", "/election", MemTree::new());
    let join = |h: &mut Harness, session: i64, me: &str| {
        let r = h.run_as(session, CREATE, "/election/e/c-", me, -1).unwrap();
        let r = r.reply.unwrap();
        (r.path.unwrap(), r.stat.unwrap().version)
    };
    let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
    let (a, va) = join(&mut h, 1, "host-a");
    let (b, vb) = join(&mut h, 2, "host-b");
    let (c, vc) = join(&mut h, 3, "host-c");
    assert_eq!((va, vb, vc), (1, 0, 0));
    assert_eq!(h.get("/election/e").unwrap(), name(&a));
    let out = h.run_as(2, ExtOp::Delete, &b, "", -1).unwrap();
    assert_eq!(out.writes.len(), 1);
    assert_eq!(h.get("/election/e").unwrap(), name(&a));
    h.run_as(1, ExtOp::Delete, &a, "", -1).unwrap();
    assert_eq!(h.get("/election/e").unwrap(), name(&c));
    assert_eq!(h.tree.nodes[&c].1.version, 1);
    assert_eq!(h.tree.data(&c).as_deref(), Some("host-c"));
    h.run_as(3, ExtOp::Delete, &c, "", -1).unwrap();
    assert_eq!(h.get("/election/e").unwrap(), "");
}

// ---- read-write lock ------------------------------------------------------

#[test]
fn rwlock_shares_readers_and_queues_them_behind_a_waiting_writer() {
    // Proves readers share, a writer waits for them and then holds alone, readers that came after a waiting
    // writer wait for it (no writer starvation), and a writer's release grants all the readers behind it.
    let mut h = Harness::example("rwlock.lua", "/rw", MemTree::new());
    let take = |h: &mut Harness, session: i64, kind: &str| {
        let r = h
            .run_as(session, CREATE, &format!("/rw/l/{kind}-"), "", -1)
            .unwrap();
        let r = r.reply.unwrap();
        (r.path.unwrap(), r.stat.unwrap().version)
    };
    assert_eq!(
        h.reply(SEQ, "/rw/l/other-", ""),
        Err(ErrorCode::BadArguments)
    );
    let (r1, v1) = take(&mut h, 1, "read");
    let (r2, v2) = take(&mut h, 2, "read");
    let (w3, v3) = take(&mut h, 3, "write");
    let (r4, v4) = take(&mut h, 4, "read");
    let (r5, v5) = take(&mut h, 5, "read");
    let (w6, v6) = take(&mut h, 6, "write");
    assert_eq!((v1, v2, v3, v4, v5, v6), (1, 1, 0, 0, 0, 0));
    let version = |h: &Harness, p: &str| h.tree.nodes[p].1.version;
    let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
    assert_eq!(
        h.get("/rw/l").unwrap(),
        format!("{} {}", name(&r1), name(&r2))
    );
    h.run_as(1, ExtOp::Delete, &r1, "", -1).unwrap();
    assert_eq!(version(&h, &w3), 0);
    h.run_as(2, ExtOp::Delete, &r2, "", -1).unwrap();
    assert_eq!((version(&h, &w3), version(&h, &r4)), (1, 0));
    assert_eq!(h.get("/rw/l").unwrap(), name(&w3));
    h.run_as(3, ExtOp::Delete, &w3, "", -1).unwrap();
    assert_eq!(
        (version(&h, &r4), version(&h, &r5), version(&h, &w6)),
        (1, 1, 0)
    );
    h.run_as(4, ExtOp::Delete, &r4, "", -1).unwrap();
    h.run_as(5, ExtOp::Delete, &r5, "", -1).unwrap();
    assert_eq!(version(&h, &w6), 1);
    assert_eq!(
        h.run_as(1, ExtOp::Delete, &w6, "", -1).unwrap().reply,
        Err(ErrorCode::NoAuth)
    );
}

#[test]
fn barrier_size_can_be_lowered_to_open_it() {
    // Proves setData on the barrier checks N and opens the barrier in the same transaction when enough
    // members are in.
    let mut h = Harness::example("barrier.lua", "/barrier", MemTree::new());
    h.reply(CREATE, "/barrier/b", "3").unwrap();
    h.reply(CREATE, "/barrier/b/m1", "").unwrap();
    h.reply(CREATE, "/barrier/b/m2", "").unwrap();
    assert_eq!(
        h.reply(ExtOp::SetData, "/barrier/b", "x"),
        Err(ErrorCode::BadArguments)
    );
    assert!(!h.tree.nodes.contains_key("/barrier/b/ready"));
    h.reply(ExtOp::SetData, "/barrier/b", "2").unwrap();
    assert!(h.tree.nodes.contains_key("/barrier/b/ready"));
}

// ---- any path, two instances ----------------------------------------------

/// A harness with `file` registered twice, at `a` and at `b`.
fn twice(file: &str, a: &str, b: &str, tree: MemTree) -> Harness {
    let mut h = Harness::new(tree);
    let source = example_source(file);
    h.mgr.register(node_spec("first", a, &source)).unwrap();
    h.mgr.register(node_spec("second", b, &source)).unwrap();
    h
}

// Paths with Lua pattern characters in them ('-', '.', '%'), nested, and
// beside a default path: every shipped example must work wherever a user
// registers it, and two registrations are two independent instances.
const A: &str = "/jobs-2/q.x";
const B: &str = "/queue";

#[test]
fn every_example_works_at_any_path_and_twice_independently() {
    // Priority queue: each instance holds and serves its own elements.
    let mut h = twice(
        "priority_queue.lua",
        A,
        B,
        MemTree::with(&[("/jobs-2", "")]),
    );
    h.reply(SEQ, &format!("{A}/node-5-"), "a5").unwrap();
    h.reply(SEQ, &format!("{B}/node-1-"), "b1").unwrap();
    h.reply(SEQ, &format!("{A}/node-2-"), "a2").unwrap();
    assert_eq!(h.get(&format!("{A}/next")).unwrap(), "a2");
    assert_eq!(h.get(&format!("{B}/next")).unwrap(), "b1");
    assert_eq!(h.get(&format!("{A}/next")).unwrap(), "a5");
    assert_eq!(h.get(&format!("{B}/next")), Err(ErrorCode::NoNode));

    // Counter.
    let mut h = twice(
        "counter.lua",
        A,
        "/counter",
        MemTree::with(&[("/jobs-2", "")]),
    );
    assert_eq!(h.get(&format!("{A}/c/next")).unwrap(), "1");
    assert_eq!(h.get(&format!("{A}/c/next")).unwrap(), "2");
    assert_eq!(h.get("/counter/c/next").unwrap(), "1");

    // Assertion: each guards its own subtree.
    let mut h = twice(
        "assertion.lua",
        A,
        "/validated",
        MemTree::with(&[("/jobs-2", "")]),
    );
    assert_eq!(
        h.reply(CREATE, &format!("{A}/n"), "x"),
        Err(ErrorCode::BadArguments)
    );
    h.reply(CREATE, &format!("{A}/n"), "7").unwrap();
    h.reply(CREATE, "/validated/n", "8").unwrap();
    assert_eq!(h.get(&format!("{A}/n")).unwrap(), "7");

    // Barrier.
    let mut h = twice(
        "barrier.lua",
        A,
        "/barrier",
        MemTree::with(&[("/jobs-2", "")]),
    );
    h.reply(CREATE, &format!("{A}/b"), "1").unwrap();
    h.reply(CREATE, "/barrier/b", "2").unwrap();
    h.reply(CREATE, &format!("{A}/b/m"), "").unwrap();
    h.reply(CREATE, "/barrier/b/m", "").unwrap();
    assert!(h.tree.nodes.contains_key(&format!("{A}/b/ready")));
    assert!(!h.tree.nodes.contains_key("/barrier/b/ready"));

    // FIFO lock: each instance has its own holder.
    let mut h = twice(
        "fifo_lock.lua",
        A,
        "/lock",
        MemTree::with(&[("/jobs-2", "")]),
    );
    let take = |h: &mut Harness, session, path: &str| {
        let out = h.run_as(session, CREATE, path, "", -1).unwrap();
        out.reply.unwrap().path.unwrap()
    };
    let a = take(&mut h, 1, &format!("{A}/l/w-"));
    let b = take(&mut h, 2, "/lock/l/w-");
    let name = |p: &str| p.rsplit('/').next().unwrap().to_string();
    assert_eq!(h.tree.data(&format!("{A}/l")), Some(name(&a)));
    assert_eq!(h.tree.data("/lock/l"), Some(name(&b)));

    // Semaphore, election and read-write lock: each instance grants on its own.
    for (file, kind) in [
        ("semaphore.lua", "p-"),
        ("election.lua", "c-"),
        ("rwlock.lua", "write-"),
    ] {
        let mut h = twice(file, A, B, MemTree::with(&[("/jobs-2", "")]));
        if file == "semaphore.lua" {
            h.reply(CREATE, &format!("{A}/s"), "1").unwrap();
            h.reply(CREATE, &format!("{B}/s"), "1").unwrap();
        }
        let take = |h: &mut Harness, session, path: String| {
            let out = h.run_as(session, CREATE, &path, "", -1).unwrap();
            out.reply.unwrap().stat.unwrap().version
        };
        assert_eq!(take(&mut h, 1, format!("{A}/s/{kind}")), 1, "{file}");
        assert_eq!(take(&mut h, 2, format!("{B}/s/{kind}")), 1, "{file}");
        assert_eq!(take(&mut h, 3, format!("{A}/s/{kind}")), 0, "{file}");
    }

    // Quota: each guards the node its path names.
    let tree = MemTree::with(&[("/jobs-2", ""), ("/jobs-2/cpu", "10"), ("/memory", "100")]);
    let mut h = twice("quota.lua", "/jobs-2/cpu-quota", "/memory-quota", tree);
    h.reply(ExtOp::SetData, "/jobs-2/cpu-quota", "4").unwrap();
    h.reply(ExtOp::SetData, "/memory-quota", "30").unwrap();
    assert_eq!(h.tree.data("/jobs-2/cpu").as_deref(), Some("6"));
    assert_eq!(h.tree.data("/memory").as_deref(), Some("70"));
    assert_eq!(
        h.reply(ExtOp::SetData, "/jobs-2/cpu-quota", "7"),
        Err(ErrorCode::QuotaExceeded)
    );
}
