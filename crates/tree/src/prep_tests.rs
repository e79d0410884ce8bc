//! ZooKeeper's write rules, one test per rule, through prepare + apply.

use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::perms;
use stoa_proto::records::*;
use stoa_proto::request::Request;
use stoa_proto::response::{MultiResult, Response};

use crate::acl::digest_id;
use crate::apply::{TreeEvent, TreeEventKind};
use crate::ephemeral::ttl_owner;
use crate::testutil::*;
use crate::txn::TxnOp;

use ErrorCode::{
    BadArguments, BadVersion, InvalidAcl, MarshallingError, NoAuth, NoChildrenForEphemerals,
    NoNode, NodeExists, NotEmpty, RuntimeInconsistency, Unimplemented,
};

fn ttl_req(path: &str, flags: i32, ttl: i64) -> Request {
    Request::CreateTtl(CreateTtlRequest {
        path: path.into(),
        data: Some(vec![]),
        acl: open(),
        flags,
        ttl,
    })
}

#[test]
fn create_fills_stat_and_updates_parent() {
    // Proves a create's stat (czxid=mzxid=pzxid=zxid, ctime) and the parent's cversion/pzxid.
    let mut w = World::new();
    let r = w.run(&Request::Create2(create_req("/a", 0)));
    let Ok(Response::Create2(c)) = r else {
        panic!("{r:?}")
    };
    let z = w.zxid;
    assert_eq!(c.path, "/a");
    assert_eq!((c.stat.czxid, c.stat.mzxid, c.stat.pzxid), (z, z, z));
    assert_eq!(c.stat.ctime, w.time_ms);
    assert_eq!(
        (c.stat.version, c.stat.cversion, c.stat.data_length),
        (0, 0, 1)
    );
    let root = w.stat("/");
    assert_eq!((root.num_children, root.pzxid, root.cversion), (2, z, 0));
    let ev = &w.last.as_ref().unwrap().events;
    assert_eq!(
        ev,
        &[
            TreeEvent {
                kind: TreeEventKind::NodeCreated,
                path: "/a".into()
            },
            TreeEvent {
                kind: TreeEventKind::NodeChildrenChanged,
                path: "/".into()
            },
        ]
    );
}

#[test]
fn delete_updates_pzxid_and_client_cversion() {
    // Proves delete bumps pzxid but not persisted cversion; client cversion counts both.
    let mut w = World::new();
    w.run(&create("/p")).unwrap();
    w.run(&create("/p/c")).unwrap();
    w.run(&delete("/p/c", -1)).unwrap();
    let s = w.stat("/p");
    assert_eq!((s.cversion, s.num_children, s.pzxid), (2, 0, w.zxid));
    assert_eq!(w.tree.node("/p").unwrap().persisted().cversion, 1);
    let ev = &w.last.as_ref().unwrap().events;
    assert_eq!(
        ev[0],
        TreeEvent {
            kind: TreeEventKind::NodeDeleted,
            path: "/p/c".into()
        }
    );
    assert_eq!(
        ev[1],
        TreeEvent {
            kind: TreeEventKind::NodeChildrenChanged,
            path: "/p".into()
        }
    );
}

#[test]
fn sequential_names_use_parent_cversion_including_pending() {
    // Proves %010d suffixes come from the (pending) parent cversion and survive deletes.
    let mut w = World::new();
    w.run(&create("/q")).unwrap();
    assert_eq!(
        created_path(w.run(&create_mode("/q/n-", 2))),
        "/q/n-0000000000"
    );
    w.run(&delete("/q/n-0000000000", -1)).unwrap();
    assert_eq!(
        created_path(w.run(&create_mode("/q/n-", 2))),
        "/q/n-0000000001"
    );
    // Two prepared before either applies get distinct numbers.
    let t1 = w.prepare(1, &[], &create_mode("/q/x", 2));
    let t2 = w.prepare(1, &[], &create_mode("/q/x", 2));
    let names: Vec<_> = [&t1, &t2]
        .iter()
        .map(|t| match &t.op {
            TxnOp::Create(c) => c.path.clone(),
            o => panic!("{o:?}"),
        })
        .collect();
    assert_eq!(names, ["/q/x0000000002", "/q/x0000000003"]);
    w.commit(&t1);
    w.commit(&t2);
    assert_eq!(w.tree.check_invariants(), Ok(()));
}

#[test]
fn create_path_checks_follow_zookeeper_order() {
    // Proves BadArguments/NoNode/NodeExists come in PrepRequestProcessor's order.
    let mut w = World::new();
    assert_eq!(w.run(&create("a")), Err(BadArguments));
    assert_eq!(w.run(&create("/a\0")), Err(BadArguments));
    assert_eq!(w.run(&create("/x/y")), Err(NoNode));
    assert_eq!(
        w.run(&create("/a/")),
        Err(NoNode),
        "parent /a looked up first"
    );
    w.run(&create("/a")).unwrap();
    assert_eq!(w.run(&create("/a/")), Err(BadArguments));
    assert_eq!(created_path(w.run(&create_mode("/a/", 2))), "/a/0000000000");
    assert_eq!(
        w.run(&create("/a/./b")),
        Err(NoNode),
        "parent /a/. does not exist"
    );
    assert_eq!(w.run(&create("/a/.")), Err(BadArguments));
    assert_eq!(w.run(&create("/a")), Err(NodeExists));
    assert_eq!(w.run(&create("/")), Err(NodeExists));
    assert_eq!(w.run(&create("/zookeeper")), Err(NodeExists));
    assert_eq!(
        w.run(&create_mode("/a/b", 7)),
        Err(BadArguments),
        "unknown flags"
    );
    assert_eq!(
        w.run(&create_acl("/nope/x", vec![])),
        Err(InvalidAcl),
        "ACL before parent"
    );
}

#[test]
fn pending_create_blocks_same_path() {
    // Proves a create after a pending create of the same path fails NodeExists.
    let mut w = World::new();
    let t1 = w.prepare(1, &[], &create("/dup"));
    let t2 = w.prepare(1, &[], &create("/dup"));
    assert!(matches!(t1.op, TxnOp::Create(_)));
    assert_eq!(t2.op, TxnOp::Error(NodeExists));
    w.commit(&t1);
    w.commit(&t2);
    // A pending delete makes the path free again.
    let t3 = w.prepare(1, &[], &delete("/dup", -1));
    let t4 = w.prepare(1, &[], &create("/dup"));
    assert!(matches!(t4.op, TxnOp::Create(_)));
    w.commit(&t3);
    w.commit(&t4);
    assert!(w.tree.node("/dup").is_some());
}

#[test]
fn ephemerals_cannot_have_children() {
    // Proves NoChildrenForEphemerals and the ephemeral owner in the stat.
    let mut w = World::new();
    w.run_as(0x55, &[], &create_mode("/e", 1)).unwrap();
    assert_eq!(w.stat("/e").ephemeral_owner, 0x55);
    assert_eq!(w.run(&create("/e/c")), Err(NoChildrenForEphemerals));
    assert_eq!(w.tree.ephemerals(0x55).collect::<Vec<_>>(), ["/e"]);
}

#[test]
fn ttl_rules() {
    // Proves TTL validation: disabled → Unimplemented, bad ttl or mode → BadArguments.
    let mut w = World::new();
    w.ttl_enabled = false;
    assert_eq!(w.run(&ttl_req("/t", 5, 100)), Err(Unimplemented));
    assert_eq!(w.run(&ttl_req("/t", 0, 100)), Err(BadArguments));
    w.ttl_enabled = true;
    assert_eq!(w.run(&ttl_req("/t", 5, 0)), Err(BadArguments));
    assert_eq!(
        w.run(&ttl_req("/t", 5, crate::TTL_MAX_MS + 1)),
        Err(BadArguments)
    );
    assert_eq!(w.run(&ttl_req("/t", 0, 100)), Err(BadArguments));
    assert_eq!(w.run(&ttl_req("/t", 1, -1)), Err(BadArguments));
    assert_eq!(
        w.run(&create_mode("/t", 5)),
        Err(BadArguments),
        "ttl mode via create"
    );
    let r = w.run(&ttl_req("/t", 5, 100));
    let Ok(Response::Create2(c)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(c.stat.ephemeral_owner, 0, "clients see 0 for TTL nodes");
    let n = w.tree.node("/t").unwrap().persisted();
    assert_eq!(n.ephemeral_owner, ttl_owner(100).unwrap());
    assert_eq!(
        created_path(w.run(&ttl_req("/t/s", 6, 50))),
        "/t/s0000000000"
    );
    // The parent has a child; the child itself has expired.
    assert_eq!(
        w.tree.expiry_candidates(n.mtime + 1_000, 0),
        ["/t/s0000000000"]
    );
    w.run(&delete("/t/s0000000000", -1)).unwrap();
    let mtime = w.tree.node("/t").unwrap().persisted().mtime;
    assert!(
        w.tree.expiry_candidates(mtime + 100, 0).is_empty(),
        "not yet expired"
    );
    assert_eq!(w.tree.expiry_candidates(mtime + 101, 0), ["/t"]);
}

#[test]
fn containers_expire_once_used_and_empty() {
    // Proves container owner marker, client owner 0, and ContainerManager's candidate rule.
    let mut w = World::new();
    let r = w.run(&Request::CreateContainer(create_req("/c", 4)));
    let Ok(Response::Create2(c)) = r else {
        panic!("{r:?}")
    };
    assert_eq!(c.stat.ephemeral_owner, 0);
    assert_eq!(w.tree.containers().collect::<Vec<_>>(), ["/c"]);
    assert!(
        w.tree.expiry_candidates(i64::MAX, 0).is_empty(),
        "never used"
    );
    assert_eq!(
        w.tree.expiry_candidates(1_000_000, 10),
        ["/c"],
        "never-used limit"
    );
    w.run(&create("/c/k")).unwrap();
    assert!(
        w.tree.expiry_candidates(i64::MAX, 0).is_empty(),
        "has a child"
    );
    w.run(&delete("/c/k", -1)).unwrap();
    assert_eq!(w.tree.expiry_candidates(0, 0), ["/c"]);
    let ctx = w.ctx(0, &[]);
    let t = w
        .prep
        .prepare_delete_container(&w.tree, &ctx, "/c")
        .unwrap();
    w.commit(&t);
    assert!(w.tree.node("/c").is_none());
    // deleteContainer refuses ephemerals with BadVersion and non-empty nodes with NotEmpty.
    w.run_as(9, &[], &create_mode("/eph", 1)).unwrap();
    let ctx = w.ctx(0, &[]);
    assert_eq!(
        w.prep.prepare_delete_container(&w.tree, &ctx, "/eph"),
        Err(crate::PrepError::Code(BadVersion))
    );
    let ctx = w.ctx(0, &[]);
    assert_eq!(
        w.prep.prepare_delete_container(&w.tree, &ctx, "/zookeeper"),
        Err(crate::PrepError::Code(BadArguments))
    );
}

#[test]
fn versions_compare_and_set() {
    // Proves -1 matches any version, a wrong version is BadVersion, versions increment.
    let mut w = World::new();
    w.run(&create("/v")).unwrap();
    assert_eq!(w.run(&set_data("/v", b"1", 3)), Err(BadVersion));
    let Ok(Response::Stat(s)) = w.run(&set_data("/v", b"12", 0)) else {
        panic!()
    };
    assert_eq!((s.version, s.data_length, s.mzxid), (1, 2, w.zxid));
    w.run(&set_data("/v", b"", -1)).unwrap();
    assert_eq!(w.stat("/v").version, 2);
    assert_eq!(w.run(&set_acl("/v", open(), 5)), Err(BadVersion));
    let Ok(Response::Stat(s)) = w.run(&set_acl("/v", open(), 0)) else {
        panic!()
    };
    assert_eq!(s.aversion, 1);
    assert_eq!(w.run(&delete("/v", 1)), Err(BadVersion));
    assert_eq!(w.run(&delete("/v", 2)), Ok(Response::Empty));
    assert_eq!(w.run(&set_data("/v", b"", -1)), Err(NoNode));
    assert_eq!(w.run(&set_data("v", b"", -1)), Err(BadArguments));
}

#[test]
fn delete_rules_and_special_paths() {
    // Proves NotEmpty, NoNode, and BadArguments for ZooKeeper's special paths.
    let mut w = World::new();
    w.run(&create("/d")).unwrap();
    w.run(&create("/d/e")).unwrap();
    assert_eq!(w.run(&delete("/d", -1)), Err(NotEmpty));
    assert_eq!(w.run(&delete("/nope", -1)), Err(NoNode));
    assert_eq!(w.run(&delete("/d/", -1)), Err(NoNode));
    for p in [
        "/",
        "/zookeeper",
        "/zookeeper/quota",
        "/zookeeper/config",
        "x",
    ] {
        assert_eq!(w.run(&delete(p, -1)), Err(BadArguments), "{p}");
    }
    assert_eq!(w.run(&set_data("/zookeeper/config", b"x", -1)), Err(NoAuth));
    assert_eq!(w.run(&create("/zookeeper/mine")).map(|_| ()), Ok(()));
}

#[test]
fn acl_permissions_per_operation() {
    // Proves create/delete need CREATE/DELETE on the parent, setData WRITE, setAcl ADMIN, check READ.
    let mut w = World::new();
    let bob = digest_id("bob:pw");
    let bob_ids = vec![bob.clone()];
    w.run(&create_acl("/r", acl(perms::READ, "world", "anyone")))
        .unwrap();
    assert_eq!(w.run(&create("/r/x")), Err(NoAuth));
    w.run(&create_acl(
        "/w",
        acl(ALL & !perms::DELETE, "world", "anyone"),
    ))
    .unwrap();
    w.run(&create("/w/x")).unwrap();
    assert_eq!(w.run(&delete("/w/x", -1)), Err(NoAuth));
    assert_eq!(w.run(&set_data("/r", b"", -1)), Err(NoAuth));
    assert_eq!(w.run(&set_acl("/r", open(), -1)), Err(NoAuth));
    w.run(&create_acl("/b", acl(ALL, "digest", &bob.id)))
        .unwrap();
    assert_eq!(w.run(&set_data("/b", b"", -1)), Err(NoAuth));
    assert!(w.run_as(1, &bob_ids, &set_data("/b", b"", -1)).is_ok());
    let m = Request::Multi(vec![check("/b", -1)]);
    assert_eq!(
        w.run(&m),
        Ok(Response::Multi(vec![MultiResult::Error(NoAuth)]))
    );
    assert_eq!(
        w.run_as(1, &bob_ids, &m),
        Ok(Response::Multi(vec![MultiResult::Check]))
    );
    // Super bypasses everything.
    let ctx = crate::PrepContext {
        is_super: true,
        ..w.ctx(1, &[])
    };
    let t = w
        .prep
        .prepare(&w.tree, &ctx, &set_data("/b", b"s", -1))
        .unwrap();
    w.commit(&t);
    assert_eq!(w.tree.node("/b").unwrap().data(), b"s");
    // ip ACLs match the connection's ip id.
    w.run(&create_acl("/ip", acl(ALL, "ip", "10.1.0.0/16")))
        .unwrap();
    let ip = vec![Id {
        scheme: "ip".into(),
        id: "10.1.2.3".into(),
    }];
    assert!(w.run_as(1, &ip, &set_data("/ip", b"", -1)).is_ok());
    assert_eq!(w.run(&set_data("/ip", b"", -1)), Err(NoAuth));
}

#[test]
fn acl_validation_on_create_and_set_acl() {
    // Proves InvalidAcl rules and `auth` expansion to the caller's digest ids.
    let mut w = World::new();
    assert_eq!(w.run(&create_acl("/i", vec![])), Err(InvalidAcl));
    assert_eq!(
        w.run(&create_acl("/i", acl(ALL, "auth", ""))),
        Err(InvalidAcl)
    );
    assert_eq!(
        w.run(&create_acl("/i", acl(ALL, "world", "nobody"))),
        Err(InvalidAcl)
    );
    // sasl and x509 ids are valid as with ZooKeeper's SASL and X509
    // providers configured (Stoa serves both); an unknown scheme is not.
    assert_eq!(
        w.run(&create_acl("/i", acl(ALL, "kerberos", "x"))),
        Err(InvalidAcl)
    );
    assert_eq!(
        w.run(&create_acl("/i", acl(ALL, "sasl", ""))),
        Err(InvalidAcl)
    );
    let bob = digest_id("bob:pw");
    let ids = vec![
        Id {
            scheme: "ip".into(),
            id: "127.0.0.1".into(),
        },
        bob.clone(),
    ];
    w.run_as(1, &ids, &create_acl("/i", acl(ALL, "auth", "")))
        .unwrap();
    assert_eq!(
        w.tree.node("/i").unwrap().acl(),
        acl(ALL, "digest", &bob.id).as_slice()
    );
    w.run(&create("/j")).unwrap();
    assert_eq!(w.run(&set_acl("/j", vec![], -1)), Err(InvalidAcl));
    assert_eq!(
        w.run(&set_acl("/nope", vec![], -1)),
        Err(InvalidAcl),
        "ACL before NoNode"
    );
    assert_eq!(w.run(&set_acl("/nope", open(), -1)), Err(NoNode));
}

#[test]
fn multi_success_results() {
    // Proves multi results per op kind: create → path, create2 → path+stat, then delete/setData/check.
    let mut w = World::new();
    let m = Request::Multi(vec![
        create("/m"),
        Request::Create2(create_req("/m/s-", 2)),
        set_data("/m", b"zz", 0),
        check("/m", 1),
        delete("/m/s-0000000000", 0),
    ]);
    let Ok(Response::Multi(rs)) = w.run(&m) else {
        panic!()
    };
    assert_eq!(rs[0], MultiResult::Create("/m".into()));
    let MultiResult::Create2(p, s) = &rs[1] else {
        panic!("{rs:?}")
    };
    assert_eq!((p.as_str(), s.czxid), ("/m/s-0000000000", w.zxid));
    let MultiResult::SetData(s) = &rs[2] else {
        panic!()
    };
    assert_eq!(s.version, 1);
    assert_eq!(&rs[3..], &[MultiResult::Check, MultiResult::Delete]);
    assert_eq!(w.stat("/m").cversion, 2);
}

#[test]
fn failed_multi_reports_codes_and_changes_nothing() {
    // Proves Ok / failing code / RuntimeInconsistency, rollback of pending records, zxid still used.
    let mut w = World::new();
    w.run(&create("/f")).unwrap();
    let before = w.tree.digest();
    let m = Request::Multi(vec![create_mode("/f/s", 2), create("/f"), delete("/f", -1)]);
    let r = w.run(&m);
    assert_eq!(
        r,
        Ok(Response::Multi(vec![
            MultiResult::Error(ErrorCode::Ok),
            MultiResult::Error(NodeExists),
            MultiResult::Error(RuntimeInconsistency),
        ]))
    );
    assert_eq!(w.tree.digest(), before);
    assert_eq!(
        w.tree.last_zxid(),
        w.zxid,
        "the failed multi consumed a zxid"
    );
    assert_eq!(w.prep.pending(), 0);
    // The rolled-back sequential create did not consume a number.
    assert_eq!(
        created_path(w.run(&create_mode("/f/s", 2))),
        "/f/s0000000000"
    );
    // Reads inside a write multi fail the whole request.
    assert_eq!(
        w.run(&Request::Multi(vec![get_data("/f")])),
        Err(MarshallingError)
    );
}

#[test]
fn multi_sees_its_own_earlier_ops() {
    // Proves ops in a multi check against the pending changes of earlier ops.
    let mut w = World::new();
    let m = Request::Multi(vec![create("/n"), create("/n/c"), delete("/n", -1)]);
    let Ok(Response::Multi(rs)) = w.run(&m) else {
        panic!()
    };
    assert_eq!(rs[2], MultiResult::Error(NotEmpty));
    assert!(w.tree.node("/n").is_none());
}

#[test]
fn close_session_removes_ephemerals_including_pending() {
    // Proves closeSession lists committed and pending ephemerals and removes the session.
    let mut w = World::new();
    let s = 0x77;
    let ctx = w.ctx(s, &[]);
    let t = w.prep.prepare_create_session(&ctx, 30_000);
    w.commit(&t);
    assert_eq!(w.tree.session_timeout_ms(s), Some(30_000));
    w.run_as(s, &[], &create_mode("/e1", 1)).unwrap();
    w.run_as(s, &[], &create("/keep")).unwrap();
    let pending = w.prepare(s, &[], &create_mode("/e2", 3));
    let ctx = w.ctx(s, &[]);
    let close = w.prep.prepare_close_session(&w.tree, &ctx);
    assert_eq!(
        close.op,
        TxnOp::CloseSession {
            paths: vec!["/e1".into(), "/e20000000002".into()]
        }
    );
    w.commit(&pending);
    let applied = w.commit(&close);
    assert_eq!(applied.events.len(), 4);
    assert_eq!(w.tree.ephemerals(s).count(), 0);
    assert!(w.tree.node("/keep").is_some());
    assert_eq!(w.tree.session_timeout_ms(s), None);
    assert_eq!(w.stat("/").pzxid, w.zxid);
}

#[test]
fn reads_check_acls_and_shape_replies() {
    // Proves exists/getData/getChildren need READ, getAcl masks digests without ADMIN.
    let mut w = World::new();
    let bob = digest_id("bob:pw");
    let mut acls = acl(perms::READ, "world", "anyone");
    acls.extend(acl(ALL, "digest", &bob.id));
    w.run(&create_acl("/g", acls)).unwrap();
    w.run(&create_acl("/h", acl(perms::ADMIN, "world", "anyone")))
        .unwrap();
    w.run(&create("/g2")).unwrap();
    let exists = |p: &str| {
        Request::Exists(ExistsRequest {
            path: p.into(),
            watch: false,
        })
    };
    assert!(matches!(
        w.read_as(&[], &exists("/g")),
        Ok(Response::Stat(_))
    ));
    assert_eq!(w.read_as(&[], &exists("/h")), Err(NoAuth));
    assert_eq!(w.read_as(&[], &exists("/zz")), Err(NoNode));
    assert_eq!(w.read_as(&[], &exists("/a\0")), Err(BadArguments));
    assert_eq!(w.read_as(&[], &get_data("/h")), Err(NoAuth));
    let get_acl = |p: &str| Request::GetAcl(GetAclRequest { path: p.into() });
    let Ok(Response::GetAcl(r)) = w.read_as(&[], &get_acl("/g")) else {
        panic!()
    };
    assert_eq!(r.acl[1].id.id, "bob:x");
    let Ok(Response::GetAcl(r)) = w.read_as(std::slice::from_ref(&bob), &get_acl("/g")) else {
        panic!()
    };
    assert_eq!(r.acl[1].id.id, bob.id);
    assert!(
        w.read_as(&[], &get_acl("/h")).is_ok(),
        "ADMIN alone suffices"
    );
    let kids = Request::GetChildren(GetChildrenRequest {
        path: "/".into(),
        watch: false,
    });
    let Ok(Response::GetChildren(c)) = w.read_as(&[], &kids) else {
        panic!()
    };
    assert_eq!(c.children, ["g", "g2", "h", "zookeeper"]);
    let n = |p: &str| Request::GetAllChildrenNumber(GetAllChildrenNumberRequest { path: p.into() });
    let count = |r| match r {
        Ok(Response::GetAllChildrenNumber(r)) => r.total_number,
        o => panic!("{o:?}"),
    };
    assert_eq!(count(w.read_as(&[], &n("/"))), 6);
    assert_eq!(count(w.read_as(&[], &n("/zookeeper"))), 2);
    let mr = Request::MultiRead(vec![get_data("/g2"), get_data("/h"), get_data("/none")]);
    let Ok(Response::Multi(rs)) = w.read_as(&[], &mr) else {
        panic!()
    };
    assert!(matches!(rs[0], MultiResult::GetData(..)));
    assert_eq!(
        rs[1..],
        [MultiResult::Error(NoAuth), MultiResult::Error(NoNode)]
    );
}

#[test]
fn get_ephemerals_filters_by_prefix() {
    // Proves getEphemerals returns the caller's ephemerals, filtered by raw prefix.
    let mut w = World::new();
    w.run(&create("/p")).unwrap();
    w.run_as(1, &[], &create_mode("/p/a", 1)).unwrap();
    w.run_as(1, &[], &create_mode("/pa", 1)).unwrap();
    w.run_as(2, &[], &create_mode("/other", 1)).unwrap();
    let q = |p: &str| {
        Request::GetEphemerals(GetEphemeralsRequest {
            prefix_path: p.into(),
        })
    };
    let list = |r| match r {
        Ok(Response::GetEphemerals(r)) => r.ephemerals,
        o => panic!("{o:?}"),
    };
    assert_eq!(list(w.read_as(&[], &q("/"))), ["/p/a", "/pa"]);
    assert_eq!(list(w.read_as(&[], &q(" "))), ["/p/a", "/pa"]);
    assert_eq!(list(w.read_as(&[], &q("/p/"))), ["/p/a"]);
    assert_eq!(list(w.read_as(&[], &q("/p"))), ["/p/a", "/pa"]);
}

#[test]
fn set_acl_pending_record_keeps_old_acl() {
    // Proves ZooKeeper's quirk: a pending setAcl does not change the ACL later pending ops see.
    let mut w = World::new();
    w.run(&create("/k")).unwrap();
    let t1 = w.prepare(
        1,
        &[],
        &set_acl("/k", acl(perms::READ, "world", "anyone"), -1),
    );
    let t2 = w.prepare(1, &[], &set_data("/k", b"x", -1));
    assert!(matches!(t2.op, TxnOp::SetData { .. }));
    w.commit(&t1);
    w.commit(&t2);
    assert_eq!(w.run(&set_data("/k", b"y", -1)), Err(NoAuth));
}

#[test]
fn failed_multi_over_pending_changes_restores_them() {
    // Proves a rolled-back multi leaves the pending records of the writes
    // before it (same paths, not yet applied) as they were, and that every
    // record goes once all are applied.
    let mut w = World::new();
    w.run(&create("/a")).unwrap();
    w.run(&create("/b")).unwrap();
    let first = w.prepare(1, &[], &set_data("/a", b"1", 0));
    let failed = w.prepare(
        1,
        &[],
        &Request::Multi(vec![
            set_data("/a", b"2", 1),
            set_data("/a", b"3", 2),
            set_data("/b", b"x", 0),
            create("/a"),
        ]),
    );
    assert!(matches!(failed.op, TxnOp::Multi(_)), "{failed:?}");
    // /a is at version 1 pending, /b still at 0: the multi left no trace.
    let second = w.prepare(1, &[], &set_data("/a", b"4", 1));
    let third = w.prepare(1, &[], &set_data("/b", b"y", 0));
    for t in [&first, &failed, &second, &third] {
        assert!(!matches!(t.op, TxnOp::Error(_)), "{t:?}");
        w.commit(t);
    }
    assert_eq!(w.prep.pending(), 0);
    assert_eq!(w.stat("/a").version, 2);
    assert_eq!(w.stat("/b").version, 1);
    // Paths of applied changes are gone: a long run keeps nothing.
    for i in 0..100 {
        let t = w.prepare(1, &[], &set_data("/a", b"z", 2 + i));
        w.commit(&t);
    }
    assert_eq!(w.prep.pending(), 0);
    assert_eq!(w.stat("/a").version, 102);
}

#[test]
fn a_multi_prepared_op_by_op_is_rolled_back_whole_or_kept_whole() {
    // Proves begin_multi/multi_op/end_multi: ops see the ones before them
    // (a create under a parent created earlier in the multi; each op with
    // its own context, one as super), a rolled-back multi leaves nothing
    // pending, and a kept one is pending exactly as its ops say.
    let mut w = World::new();
    let ctx = w.ctx(1, &[]);
    let as_super = crate::prep::PrepContext {
        is_super: true,
        ..ctx
    };
    let mark = w.prep.begin_multi();
    assert!(w
        .prep
        .multi_op(&w.tree, &ctx, &Request::Create(create_req("/p", 0)))
        .is_ok());
    assert!(w
        .prep
        .multi_op(&w.tree, &as_super, &Request::Create(create_req("/p/c", 0)))
        .is_ok());
    assert_eq!(
        w.prep
            .multi_op(&w.tree, &ctx, &Request::Create(create_req("/p", 0))),
        Err(NodeExists)
    );
    assert_eq!(
        w.prep.multi_op(
            &w.tree,
            &ctx,
            &Request::Sync(SyncRequest { path: "/".into() })
        ),
        Err(MarshallingError)
    );
    w.prep.end_multi(mark, false);
    // Nothing of it is pending: /p/c has no parent again.
    assert_eq!(w.run(&Request::Create(create_req("/p/c", 0))), Err(NoNode));
    let ctx = w.ctx(1, &[]);
    let mark = w.prep.begin_multi();
    let ops: Vec<TxnOp> = ["/q", "/q/c"]
        .iter()
        .map(|p| {
            (w.prep
                .multi_op(&w.tree, &ctx, &Request::Create(create_req(p, 0))))
            .unwrap()
        })
        .collect();
    w.prep.end_multi(mark, true);
    // Kept: pending, so the same create is refused before the multi applies.
    let refused = w.prepare(1, &[], &Request::Create(create_req("/q", 0)));
    assert_eq!(refused.op, TxnOp::Error(NodeExists));
    let multi = crate::txn::Txn {
        header: crate::txn::TxnHeader {
            session_id: 1,
            cxid: 1,
            zxid: ctx.zxid,
            time_ms: ctx.time_ms,
        },
        op: TxnOp::Multi(ops),
    };
    w.commit(&multi);
    w.commit(&refused);
    assert_eq!(w.stat("/q").num_children, 1);
}

mod pending_equals_applied {
    //! A leader prepares a write against the tree plus the records of the
    //! writes it prepared and has not applied yet. Whether an earlier write
    //! is still pending or already applied depends on timing (its own disk
    //! sync, a slow member), so both must give the same transaction. The
    //! one exception is ZooKeeper's own: a pending setACL leaves the old ACL
    //! in force (`set_acl_pending_record_keeps_old_acl`), so setACL is not
    //! among the ops here.
    use super::*;
    use crate::txn::Txn;
    use proptest::prelude::*;

    const PATHS: [&str; 6] = ["/d", "/d/a", "/d/a/y", "/d/b", "/e", "/e/f"];

    fn op_of(kind: u8, path: usize, arg: u8) -> Request {
        let path = PATHS[path % PATHS.len()];
        match kind % 6 {
            0 => create_mode(path, i32::from(arg % 4)),
            1 => delete(path, i32::from(arg % 3) - 1),
            2 => set_data(path, b"v", i32::from(arg % 3) - 1),
            3 => create_mode(path, 1),
            4 => Request::Multi(vec![
                create_mode(path, i32::from(arg % 4)),
                set_data(PATHS[(usize::from(arg)) % PATHS.len()], b"m", -1),
            ]),
            _ => Request::Multi(vec![
                delete(path, -1),
                create_mode(PATHS[usize::from(arg) % PATHS.len()], 2),
            ]),
        }
    }

    /// Every op prepared, then applied in groups of `lag` (1: each applied
    /// before the next is prepared).
    fn run(ops: &[Request], lag: usize) -> (Vec<Txn>, u64) {
        let mut w = World::new();
        let mut txns = Vec::new();
        let mut pending = std::collections::VecDeque::new();
        for op in ops {
            let txn = w.prepare(1, &[], op);
            txns.push(txn.clone());
            pending.push_back(txn);
            if pending.len() >= lag {
                while let Some(t) = pending.pop_front() {
                    w.commit(&t);
                }
            }
        }
        while let Some(t) = pending.pop_front() {
            w.commit(&t);
        }
        (txns, w.tree.digest())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]
        #[test]
        fn a_write_prepared_over_pending_records_is_the_one_prepared_over_the_applied_tree(
            ops in proptest::collection::vec((any::<u8>(), 0usize..6, any::<u8>()), 1..40),
            lag in 2usize..8,
        ) {
            let ops: Vec<Request> = ops.into_iter().map(|(k, p, a)| op_of(k, p, a)).collect();
            let (applied_each, digest_each) = run(&ops, 1);
            let (with_pending, digest_pending) = run(&ops, lag);
            for (i, (a, b)) in applied_each.iter().zip(&with_pending).enumerate() {
                prop_assert_eq!(&a.op, &b.op, "op {} {:?}", i, ops[i]);
            }
            prop_assert_eq!(digest_each, digest_pending);
        }
    }
}

#[test]
fn fast_flag_nodes_are_a_sessions_own_plain_ephemerals() {
    // Proves the rules of /zookeeper/fast (docs/partitions.md, "Fast reads
    // and fast watches"), in a multi too, and ZooKeeper's order of errors.
    let mut w = World::new();
    let flag = |data: &[u8], flags: i32| {
        Request::Create(CreateRequest {
            path: "/zookeeper/fast/2a".into(),
            data: Some(data.to_vec()),
            acl: open(),
            flags,
        })
    };
    assert_eq!(w.run_as(0x2a, &[], &flag(b"reads", 1)), Err(NoNode));
    assert_eq!(w.run(&create_mode("/zookeeper/fast", 1)), Err(BadArguments));
    w.run(&create("/zookeeper/fast")).unwrap();
    assert_eq!(w.run_as(0x2b, &[], &flag(b"reads", 1)), Err(BadArguments));
    assert_eq!(w.run_as(0x2a, &[], &flag(b"reads", 0)), Err(BadArguments));
    assert_eq!(w.run_as(0x2a, &[], &flag(b"reads", 3)), Err(BadArguments));
    assert_eq!(w.run_as(0x2a, &[], &flag(b"quick", 1)), Err(BadArguments));
    let multi = Request::Multi(vec![create("/m"), flag(b"quick", 1)]);
    assert!(w
        .run_as(0x2a, &[], &multi)
        .is_ok_and(|r| format!("{r:?}").contains("BadArguments")));
    assert!(w.tree.node("/m").is_none());
    w.run_as(0x2a, &[], &flag(b"reads, watches", 1)).unwrap();
    let node = w.tree.node("/zookeeper/fast/2a").unwrap();
    assert_eq!(node.stat().ephemeral_owner, 0x2a);
    assert_eq!(w.run_as(0x2a, &[], &flag(b"reads", 1)), Err(NodeExists));
    let set = |data: &[u8]| set_data("/zookeeper/fast/2a", data, -1);
    assert_eq!(w.run_as(0x2a, &[], &set(b"everything")), Err(BadArguments));
    w.run_as(0x2a, &[], &set(b"watches")).unwrap();
    assert_eq!(w.run_as(7, &[], &set(b"")).map(|_| ()), Ok(()));
    // The parent's data is nobody's flags.
    w.run(&set_data("/zookeeper/fast", b"anything", -1))
        .unwrap();
}
