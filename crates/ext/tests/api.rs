mod common;

use common::{Harness, MemTree, CREATE, SEQ, SESSION};
use stoa_ext::{ErrorCode, ExtOp, ExtRequest, NodeKind, Stat, TxnStamp, WriteOp};
use stoa_proto::records::Acl;

fn harness(src: &str) -> Harness {
    Harness::node("/x", src, MemTree::with(&[("/x", "root"), ("/x/old", "o")]))
}

#[test]
fn reads_see_the_calls_own_writes() {
    // Proves get/exists/children reflect earlier create, set and delete of the same call.
    let src = r#"
      return function(req, zk)
        zk.create("/x/a", "1")
        zk.set("/x/a", "2")
        zk.delete("/x/old")
        local data, stat = zk.get("/x/a")
        assert(data == "2" and stat.version == 1 and stat.data_length == 1)
        assert(zk.exists("/x/old") == nil)
        local kids = zk.children("/x")
        assert(#kids == 1 and kids[1] == "a", table.concat(kids, ","))
        local _, root = zk.get("/x")
        assert(root.num_children == 1, root.num_children)
        return "ok"
      end"#;
    let mut h = harness(src);
    let out = h.run(ExtOp::GetData, "/x", "", -1).unwrap();
    assert_eq!(out.reply.unwrap().data.as_deref(), Some(&b"ok"[..]));
    assert_eq!(
        out.writes,
        vec![
            WriteOp::Create {
                path: "/x/a".into(),
                data: b"1".to_vec(),
                kind: NodeKind::Persistent,
                acl: vec![Acl::open_unsafe()]
            },
            WriteOp::SetData {
                path: "/x/a".into(),
                data: b"2".to_vec(),
                version: -1
            },
            WriteOp::Delete {
                path: "/x/old".into(),
                version: -1
            },
        ]
    );
    assert_eq!(h.tree.data("/x/a").as_deref(), Some("2"));
    assert!(!h.tree.nodes.contains_key("/x/old"));
}

#[test]
fn zookeeper_errors_behave_as_in_zookeeper_and_can_be_caught() {
    // Proves NoNode/NodeExists/NotEmpty/BadVersion/NoChildrenForEphemerals/BadArguments arise against the overlay and pcall sees e.name/e.code.
    let src = r#"
      local function err(f, ...)
        local ok, e = pcall(f, ...)
        assert(not ok)
        return e.name .. ":" .. e.code
      end
      return function(req, zk)
        local r = {}
        r[#r + 1] = err(zk.get, "/x/missing")
        r[#r + 1] = err(zk.create, "/x/old", "")
        r[#r + 1] = err(zk.create, "/x/no/parent", "")
        r[#r + 1] = err(zk.delete, "/x")
        r[#r + 1] = err(zk.set, "/x/old", "v", 7)
        r[#r + 1] = err(zk.delete, "/x/old", 3)
        zk.create("/x/eph", "", zk.EPHEMERAL)
        r[#r + 1] = err(zk.create, "/x/eph/child", "")
        r[#r + 1] = err(zk.get, "relative")
        r[#r + 1] = err(zk.create, "/x/ttl", "", 5)
        return table.concat(r, " ")
      end"#;
    let mut h = harness(src);
    let out = h.run(ExtOp::GetData, "/x", "", -1).unwrap();
    let text = String::from_utf8(out.reply.unwrap().data.unwrap()).unwrap();
    assert_eq!(
        text,
        "NoNode:-101 NodeExists:-110 NoNode:-101 NotEmpty:-111 BadVersion:-103 \
         BadVersion:-103 NoChildrenForEphemerals:-108 BadArguments:-8 Unimplemented:-6"
    );
    // The caught errors left the earlier successful write in place.
    assert_eq!(
        out.writes,
        vec![WriteOp::Create {
            path: "/x/eph".into(),
            data: vec![],
            kind: NodeKind::Ephemeral,
            acl: vec![Acl::open_unsafe()]
        }]
    );
    assert_eq!(h.tree.nodes["/x/eph"].1.ephemeral_owner, SESSION);
}

#[test]
fn an_uncaught_zookeeper_error_is_the_reply_and_discards_writes() {
    // Proves an uncaught API error reaches the client as its code with no writes.
    let src = r#"
      return function(req, zk)
        zk.create("/x/a", "")
        zk.get("/x/missing")
      end"#;
    let mut h = harness(src);
    let out = h.run(ExtOp::GetData, "/x", "", -1).unwrap();
    assert_eq!(out.reply, Err(ErrorCode::NoNode));
    assert!(out.writes.is_empty());
    assert!(!h.tree.nodes.contains_key("/x/a"));
    assert_eq!(h.mgr.metrics()[0].1.error_replies, 1);
}

#[test]
fn returned_or_raised_error_codes_discard_writes() {
    // Proves {error=name}, {error=code} and zk.fail(...) all reply with the code and commit nothing.
    let src = r#"
      return function(req, zk)
        zk.create("/x/a", "")
        if req.data == "name" then return { error = "badversion" } end
        if req.data == "code" then return { error = -125 } end
        if req.data == "fail" then zk.fail("NotEmpty") end
        zk.fail(-110)
      end"#;
    let mut h = harness(src);
    for (data, code) in [
        ("name", ErrorCode::BadVersion),
        ("code", ErrorCode::QuotaExceeded),
        ("fail", ErrorCode::NotEmpty),
        ("num", ErrorCode::NodeExists),
    ] {
        let out = h.run(ExtOp::SetData, "/x", data, -1).unwrap();
        assert_eq!(out.reply, Err(code), "{data}");
        assert!(out.writes.is_empty());
    }
    assert!(!h.tree.nodes.contains_key("/x/a"));
}

#[test]
fn sequential_creates_count_the_calls_own_creates() {
    // Proves suffixes are next_sequence(parent) plus earlier creates under that parent in the call, %010d.
    let src = r#"
      return function(req, zk)
        local a = zk.create("/x/s-", "", zk.PERSISTENT_SEQUENTIAL)
        local b = zk.create("/x/s-", "", zk.PERSISTENT_SEQUENTIAL)
        zk.create("/x/new", "")
        local c = zk.create("/x/new/", "", zk.PERSISTENT_SEQUENTIAL)
        return a .. " " .. b .. " " .. c
      end"#;
    let mut h = harness(src);
    // /x has had one child created (cversion 1).
    assert_eq!(
        h.get("/x").unwrap(),
        "/x/s-0000000001 /x/s-0000000002 /x/new/0000000000"
    );
}

#[test]
fn the_default_behaviour_is_regular_zookeeper() {
    // Proves a handler table without an op's key (and zk.default) executes the request as a regular node would.
    let mut h = harness("return {}");
    let r = h.reply(SEQ, "/x/q-", "d").unwrap();
    assert_eq!(r.path.as_deref(), Some("/x/q-0000000001"));
    assert_eq!(r.stat.as_ref().map(|s| s.data_length), Some(1));
    assert_eq!(h.get("/x/q-0000000001").unwrap(), "d");
    let r = h.reply(ExtOp::SetData, "/x/old", "n").unwrap();
    assert_eq!(r.stat.unwrap().version, 1);
    let r = h.reply(ExtOp::GetChildren, "/x", "").unwrap();
    assert_eq!(
        r.children.unwrap(),
        vec!["old".to_string(), "q-0000000001".to_string()]
    );
    assert_eq!(r.stat.unwrap().num_children, 2);
    assert_eq!(
        h.reply(ExtOp::Exists, "/x/none", ""),
        Err(ErrorCode::NoNode)
    );
    assert!(h.reply(ExtOp::Exists, "/x/old", "").unwrap().stat.is_some());
    assert_eq!(
        h.run(ExtOp::Delete, "/x/old", "", 5).unwrap().reply,
        Err(ErrorCode::BadVersion)
    );
    assert!(h.run(ExtOp::Delete, "/x/old", "", 1).unwrap().reply.is_ok());
    assert_eq!(
        h.reply(CREATE, "/x/q-0000000001", ""),
        Err(ErrorCode::NodeExists)
    );
}

#[test]
fn the_request_reaches_lua_in_full() {
    // Proves req carries op, path, data, version, session and the create flags.
    let src = r#"
      return function(req, zk)
        return { path = string.format("%s %s %s %d %d %s %s", req.op, req.path, req.data,
          req.version, req.session, tostring(req.sequential), tostring(req.ephemeral)) }
      end"#;
    let mut h = harness(src);
    let out = h.run(ExtOp::Create { flags: 3 }, "/x/p", "dd", -1).unwrap();
    assert_eq!(
        out.reply.unwrap().path.as_deref(),
        Some(format!("create /x/p dd -1 {SESSION} true true").as_str())
    );
}

#[test]
fn reserved_subtrees_cannot_be_written() {
    // Proves writes to /extensions and /zookeeper fail with NoAuth (no registration bypassing the admin ACL).
    let src = r#"
      return function(req, zk)
        local ok, e = pcall(zk.create, "/extensions/evil", "{}")
        return e.name
      end"#;
    let mut tree = MemTree::with(&[("/x", ""), ("/extensions", "")]);
    tree.nodes.remove("/x/old");
    let mut h = Harness::node("/x", src, tree);
    assert_eq!(h.get("/x").unwrap(), "NoAuth");
}

#[test]
fn reply_tables_carry_stat_and_children() {
    // Proves a returned stat table and children list come back in ExtReply.
    let src = r#"
      return function(req, zk)
        return { stat = { version = 9, num_children = 2 }, children = { "b", "a" }, path = "/p" }
      end"#;
    let mut h = harness(src);
    let r = h.reply(ExtOp::GetChildren, "/x", "").unwrap();
    let stat = r.stat.unwrap();
    assert_eq!((stat.version, stat.num_children, stat.czxid), (9, 2, 0));
    assert_eq!(r.children.unwrap(), vec!["b".to_string(), "a".to_string()]);
    assert_eq!(r.path.as_deref(), Some("/p"));
}

#[test]
fn stats_of_written_nodes_carry_the_commit_stamp_when_the_engine_gives_one() {
    // Proves with a TxnStamp a created node's zxids/times, a set node's mzxid/mtime and the parent's pzxid are the commit's; without one they stay 0 / as read.
    let src = r#"
      return function(req, zk)
        local _, created = zk.create("/x/a", "1")
        local set = zk.set("/x/old", "2")
        local _, parent = zk.get("/x")
        return { stat = created, data = string.format("%d %d %d %d %d %d %d",
          created.ctime, created.mtime, created.pzxid, set.mzxid, set.mtime, set.czxid, parent.pzxid) }
      end"#;
    let h = harness(src);
    let mut mgr = h.mgr;
    let request = ExtRequest {
        op: ExtOp::Create { flags: 0 },
        path: "/x".into(),
        data: Vec::new(),
        version: -1,
        session_id: SESSION,
    };
    let stamp = TxnStamp {
        zxid: 0x5_0000_0007,
        time_ms: 1_700_000_000_123,
    };
    let old_czxid = h.tree.nodes["/x/old"].1.czxid;
    let stamped = mgr
        .call_stamped("ext", &request, &h.tree, Some(stamp))
        .unwrap()
        .reply
        .unwrap();
    let stat = stamped.stat.unwrap();
    assert_eq!((stat.czxid, stat.mzxid), (stamp.zxid, stamp.zxid));
    assert_eq!(
        String::from_utf8(stamped.data.unwrap()).unwrap(),
        format!(
            "{t} {t} {z} {z} {t} {old_czxid} {z}",
            t = stamp.time_ms,
            z = stamp.zxid
        )
    );
    let plain = mgr.call("ext", &request, &h.tree).unwrap().reply.unwrap();
    let stat = plain.stat.unwrap();
    assert_eq!(
        (stat.czxid, stat.mzxid, stat.ctime, stat.pzxid),
        (0, 0, 0, 0)
    );
}

#[test]
fn every_stat_field_reaches_lua_under_its_own_name() {
    // Proves zk.get/exists/set/create hand Lua all 11 Stat fields under the right names, and a returned stat table comes back intact.
    let src = r#"
      local FIELDS = { "czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
                       "ephemeral_owner", "data_length", "num_children", "pzxid" }
      local function show(st)
        local out = {}
        for i, f in ipairs(FIELDS) do out[i] = f .. "=" .. tostring(st[f]) end
        return table.concat(out, " ")
      end
      return function(req, zk)
        local _, st = zk.get("/x/old")
        assert(show(zk.exists("/x/old")) == show(st))
        return { data = show(st), stat = st }
      end"#;
    let mut tree = MemTree::with(&[("/x", "root"), ("/x/old", "o")]);
    let stat = Stat {
        czxid: 1,
        mzxid: 2,
        ctime: 3,
        mtime: 4,
        version: 5,
        cversion: 6,
        aversion: 7,
        ephemeral_owner: 8,
        data_length: 1,
        num_children: 0,
        pzxid: 11,
    };
    tree.nodes.get_mut("/x/old").unwrap().1 = stat.clone();
    let mut h = Harness::node("/x", src, tree);
    let reply = h.reply(ExtOp::GetData, "/x", "").unwrap();
    assert_eq!(
        String::from_utf8(reply.data.unwrap()).unwrap(),
        "czxid=1 mzxid=2 ctime=3 mtime=4 version=5 cversion=6 aversion=7 ephemeral_owner=8 \
         data_length=1 num_children=0 pzxid=11"
    );
    assert_eq!(reply.stat, Some(stat));
}

#[test]
fn creates_take_an_acl_and_make_containers_and_ttl_nodes() {
    // Proves zk.create's options and modes (and zk.multi's): an ACL given
    // as zkCli's letters or as bits, a container, a TTL node with its TTL,
    // each written as the kind and ACL the engine turns into ZooKeeper's
    // requests; and the refusals ZooKeeper gives (a TTL without a TTL mode
    // or out of range, an invalid ACL, an unknown permission letter).
    let src = r#"
      local function err(f, ...)
        local ok, e = pcall(f, ...)
        assert(not ok)
        if type(e) == "table" then return e.name end
        return tostring(e)
      end
      return function(req, zk)
        local acl = { { scheme = "digest", id = "u:hash", perms = "rw" },
                      { scheme = "world", id = "anyone", perms = 1 } }
        zk.create("/x/secret", "s", zk.PERSISTENT, { acl = acl })
        zk.create("/x/box", "", zk.CONTAINER)
        zk.create("/x/lease-", "", zk.PERSISTENT_SEQUENTIAL_WITH_TTL, { ttl = 5000 })
        zk.multi({ { op = "create", path = "/x/m", flags = zk.PERSISTENT_WITH_TTL, ttl = 7,
                     acl = { { scheme = "world", id = "anyone", perms = "cdrwa" } } } })
        local r = {}
        r[#r + 1] = err(zk.create, "/x/t", "", zk.PERSISTENT, { ttl = 10 })
        r[#r + 1] = err(zk.create, "/x/t", "", zk.PERSISTENT_WITH_TTL, { ttl = 0 })
        r[#r + 1] = err(zk.create, "/x/t", "", zk.PERSISTENT_WITH_TTL)
        r[#r + 1] = err(zk.create, "/x/t", "", zk.PERSISTENT,
                        { acl = { { scheme = "nope", id = "x", perms = 1 } } })
        r[#r + 1] = err(zk.create, "/x/t", "", zk.PERSISTENT, { acl = {} })
        local bad = err(zk.create, "/x/t", "", zk.PERSISTENT,
                        { acl = { { scheme = "world", id = "anyone", perms = "rz" } } })
        assert(bad:find("unknown permission"), bad)
        local typo = err(zk.create, "/x/t", "", zk.PERSISTENT, { tll = 1 })
        assert(typo:find("unknown field"), typo)
        return table.concat(r, " ")
      end"#;
    let mut h = Harness::new(MemTree::with(&[("/x", "root"), ("/x/old", "o")]));
    h.mgr.set_ttl_enabled(true);
    h.mgr
        .register(common::node_spec("ext", "/x", src))
        .expect("register");
    let out = h.run(ExtOp::GetData, "/x", "", -1).unwrap();
    let text = String::from_utf8(out.reply.unwrap().data.unwrap()).unwrap();
    assert_eq!(
        text,
        "BadArguments BadArguments BadArguments InvalidAcl InvalidAcl"
    );
    let kinds: Vec<(&str, NodeKind, Vec<Acl>)> = out
        .writes
        .iter()
        .map(|w| match w {
            WriteOp::Create {
                path, kind, acl, ..
            } => (path.as_str(), *kind, acl.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    let digest = Acl {
        perms: 3,
        id: stoa_proto::records::Id {
            scheme: "digest".into(),
            id: "u:hash".into(),
        },
    };
    let world_read = Acl {
        perms: 1,
        ..Acl::open_unsafe()
    };
    assert_eq!(
        kinds,
        vec![
            ("/x/secret", NodeKind::Persistent, vec![digest, world_read]),
            ("/x/box", NodeKind::Container, vec![Acl::open_unsafe()]),
            (
                "/x/lease-0000000003",
                NodeKind::Ttl { ttl_ms: 5000 },
                vec![Acl::open_unsafe()]
            ),
            (
                "/x/m",
                NodeKind::Ttl { ttl_ms: 7 },
                vec![Acl::open_unsafe()]
            ),
        ]
    );
}
