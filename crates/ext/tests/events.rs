mod common;

use common::MemTree;
use stoa_ext::{
    Delivery, EventType, ExtError, ExtensionKind, ExtensionManager, ExtensionSpec, Limits,
    NodeKind, WriteOp,
};
use stoa_proto::records::Acl;

fn spec(name: &str, kind: ExtensionKind, path: Option<&str>, src: &str) -> ExtensionSpec {
    ExtensionSpec {
        name: name.into(),
        kind,
        path: path.map(String::from),
        source: src.into(),
        limits: Limits::default(),
    }
}

#[test]
fn session_extensions_run_on_start_and_end() {
    // Proves session handlers get start/end events with the session id and their writes come back per extension.
    let src = r#"
      return {
        start = function(ev, zk)
          zk.create("/sessions/" .. ev.session, ev.event, zk.EPHEMERAL)
        end,
        ["end"] = function(ev, zk)
          local ok, e = pcall(zk.create, "/sessions/late", "", zk.EPHEMERAL)
          zk.create("/sessions/ended-" .. ev.session, e.name)
        end,
      }"#;
    let mut mgr = ExtensionManager::new(Limits::default());
    mgr.register(spec("track", ExtensionKind::Session, None, src))
        .unwrap();
    mgr.register(spec(
        "broken",
        ExtensionKind::Session,
        None,
        "return function() error('x') end",
    ))
    .unwrap();
    let mut tree = MemTree::with(&[("/sessions", "")]);
    let out = mgr.session_event(true, 7, &tree);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].0, "broken");
    assert!(matches!(out[0].1, Err(ExtError::Runtime { .. })));
    assert_eq!(
        out[1],
        (
            "track".to_string(),
            Ok(vec![WriteOp::Create {
                path: "/sessions/7".into(),
                data: b"start".to_vec(),
                kind: NodeKind::Ephemeral,
                acl: vec![Acl::open_unsafe()]
            }])
        )
    );
    tree.apply(out[1].1.as_ref().unwrap(), 7).unwrap();
    let out = mgr.session_event(false, 7, &tree);
    // An ending session cannot create ephemerals: SessionExpired.
    assert_eq!(
        out[1].1.as_ref().unwrap(),
        &vec![WriteOp::Create {
            path: "/sessions/ended-7".into(),
            data: b"SessionExpired".to_vec(),
            kind: NodeKind::Persistent,
            acl: vec![Acl::open_unsafe()]
        }]
    );
    let metrics = mgr.metrics();
    assert_eq!(metrics[0].1.errors, 2);
    assert_eq!(metrics[1].1.calls, 2);
}

#[test]
fn watch_extensions_can_suppress_events_under_their_path() {
    // Proves watch handlers see type and path, only for their subtree, and decide delivery.
    let src = r#"
      return function(ev, zk)
        if ev.type == "NodeDataChanged" and ev.path:match("/quiet$") then return false end
        return true
      end"#;
    let mut mgr = ExtensionManager::new(Limits::default());
    mgr.register(spec("w", ExtensionKind::Watch, Some("/app"), src))
        .unwrap();
    let tree = MemTree::new();
    let out = mgr.watch_event("/app/quiet", EventType::NodeDataChanged, &tree);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.as_ref().unwrap().delivery, Delivery::Suppressed);
    let out = mgr.watch_event("/app/loud", EventType::NodeDataChanged, &tree);
    assert_eq!(out[0].1.as_ref().unwrap().delivery, Delivery::AsIs);
    let out = mgr.watch_event("/app/quiet", EventType::NodeDeleted, &tree);
    assert_eq!(out[0].1.as_ref().unwrap().delivery, Delivery::AsIs);
    assert!(mgr
        .watch_event("/other/quiet", EventType::NodeDataChanged, &tree)
        .is_empty());
}

#[test]
fn watch_extensions_can_rewrite_an_event_into_others() {
    // Proves a handler may return one event or a list of events to deliver
    // instead, {} for none, and that malformed events are errors that leave
    // the event as it was.
    let src = r#"
      return function(ev, zk)
        if ev.path == "/app/one" then return { type = "NodeDataChanged", path = "/app" } end
        if ev.path == "/app/two" then
          return { { type = "NodeCreated", path = "/app/a" },
                   { type = "NodeChildrenChanged", path = "/app" } }
        end
        if ev.path == "/app/none" then return {} end
        if ev.path == "/app/badtype" then return { type = "Sideways", path = "/app" } end
        if ev.path == "/app/badpath" then return { type = "NodeCreated", path = "app" } end
        return true
      end"#;
    let mut mgr = ExtensionManager::new(Limits::default());
    mgr.register(spec("w", ExtensionKind::Watch, Some("/app"), src))
        .unwrap();
    let tree = MemTree::new();
    let delivery = |mgr: &mut ExtensionManager, path: &str| {
        mgr.watch_event(path, EventType::NodeDataChanged, &tree)
            .remove(0)
            .1
            .map(|outcome| outcome.delivery)
    };
    assert_eq!(
        delivery(&mut mgr, "/app/one"),
        Ok(Delivery::Instead(vec![(
            EventType::NodeDataChanged,
            "/app".into()
        )]))
    );
    assert_eq!(
        delivery(&mut mgr, "/app/two"),
        Ok(Delivery::Instead(vec![
            (EventType::NodeCreated, "/app/a".into()),
            (EventType::NodeChildrenChanged, "/app".into()),
        ]))
    );
    assert_eq!(delivery(&mut mgr, "/app/none"), Ok(Delivery::Suppressed));
    for bad in ["/app/badtype", "/app/badpath"] {
        let err = delivery(&mut mgr, bad).unwrap_err();
        assert!(matches!(err, ExtError::BadReply { .. }), "{bad}: {err:?}");
    }
}
