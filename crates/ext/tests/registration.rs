mod common;

use common::{node_spec, Harness, MemTree};
use stoa_ext::{
    parse_registration, ExtError, ExtensionKind, ExtensionManager, ExtensionSpec, Limits,
};

const OK_SOURCE: &str = "return function(req, zk) return nil end";

#[test]
fn parses_a_full_document() {
    // Proves every field of the registration JSON lands in the spec.
    let json = br#"{"kind": "node", "path": "/queue", "source": "return {}",
                    "limits": {"instructions": 5000, "memory_bytes": 1048576}}"#;
    let spec = parse_registration("pq", json, &Limits::default()).unwrap();
    assert_eq!(
        spec,
        ExtensionSpec {
            name: "pq".into(),
            kind: ExtensionKind::Node,
            path: Some("/queue".into()),
            source: "return {}".into(),
            limits: Limits {
                instructions_max: 5000,
                memory_bytes_max: 1 << 20
            },
        }
    );
}

#[test]
fn missing_limits_take_the_defaults() {
    // Proves absent limits (whole object or one field) fall back to the defaults given.
    let d = Limits {
        instructions_max: 42,
        memory_bytes_max: 1 << 20,
    };
    let spec = parse_registration("s", br#"{"kind": "session", "source": "x"}"#, &d).unwrap();
    assert_eq!(spec.limits, d);
    let spec = parse_registration(
        "w",
        br#"{"kind": "watch", "source": "x", "limits": {"instructions": 7}}"#,
        &d,
    )
    .unwrap();
    assert_eq!(spec.limits.instructions_max, 7);
    assert_eq!(spec.limits.memory_bytes_max, 1 << 20);
}

#[test]
fn malformed_documents_are_refused() {
    // Proves bad JSON, unknown kinds/fields, missing or reserved paths and absurd limits are BadRegistration.
    let d = Limits::default();
    let bad = [
        &b"not json"[..],
        br#"{"kind": "thing", "path": "/q", "source": ""}"#,
        br#"{"kind": "node", "source": ""}"#,
        br#"{"kind": "node", "path": "/", "source": ""}"#,
        br#"{"kind": "node", "path": "/extensions/x", "source": ""}"#,
        br#"{"kind": "node", "path": "/zookeeper", "source": ""}"#,
        br#"{"kind": "node", "path": "queue", "source": ""}"#,
        br#"{"kind": "node", "path": "/q/", "source": ""}"#,
        br#"{"kind": "session", "path": "/q", "source": ""}"#,
        br#"{"kind": "node", "path": "/q", "source": "", "souce": ""}"#,
        br#"{"kind": "node", "path": "/q", "source": "", "limits": {"instructions": 0}}"#,
        br#"{"kind": "node", "path": "/q", "source": "", "limits": {"memory_bytes": 10}}"#,
        br#"{"kind": "node", "path": "/q", "source": "", "limits": {"memory_bytes": 99999999999}}"#,
    ];
    for json in bad {
        let err = parse_registration("x", json, &d).unwrap_err();
        assert!(
            matches!(err, ExtError::BadRegistration { .. }),
            "{}: {err}",
            String::from_utf8_lossy(json)
        );
    }
    let err = parse_registration("a/b", br#"{"kind": "session", "source": ""}"#, &d).unwrap_err();
    assert!(matches!(err, ExtError::BadRegistration { .. }));
}

#[test]
fn compile_errors_are_refused_with_luas_message_and_change_nothing() {
    // Proves a syntax error is a Compile error carrying Lua's message, and the manager is unchanged.
    let mut mgr = ExtensionManager::new(Limits::default());
    let err = mgr
        .register(node_spec("bad", "/q", "return function( end"))
        .unwrap_err();
    match &err {
        ExtError::Compile { name, message } => {
            assert_eq!(name, "bad");
            assert!(message.contains("bad:1:"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("does not load"));
    assert!(mgr.names().is_empty());
    assert_eq!(mgr.node_extension_for("/q"), None);
}

#[test]
fn a_chunk_must_return_a_handler() {
    // Proves a chunk returning neither a function nor a table, or failing at top level, is refused.
    let mgr = ExtensionManager::new(Limits::default());
    for src in ["return 42", "local x = 1", "error('boom')"] {
        let err = mgr.check(&node_spec("x", "/q", src)).unwrap_err();
        assert!(matches!(err, ExtError::Compile { .. }), "{src}: {err:?}");
    }
    assert!(mgr.check(&node_spec("x", "/q", "return {}")).is_ok());
}

#[test]
fn bytecode_is_refused() {
    // Proves binary chunks cannot be registered (text mode only).
    let mgr = ExtensionManager::new(Limits::default());
    let src = "\x1bLua\x54\x00garbage";
    let err = mgr.check(&node_spec("x", "/q", src)).unwrap_err();
    match err {
        ExtError::Compile { message, .. } => assert!(message.contains("binary"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn overlapping_virtual_nodes_conflict() {
    // Proves a node extension cannot claim a path equal to, above or below another's; check() says so too.
    let mut mgr = ExtensionManager::new(Limits::default());
    mgr.register(node_spec("a", "/q", OK_SOURCE)).unwrap();
    for p in ["/q", "/q/sub", "/"] {
        let spec = node_spec("b", p, OK_SOURCE);
        if p == "/" {
            assert!(matches!(
                mgr.check(&spec),
                Err(ExtError::BadRegistration { .. })
            ));
            continue;
        }
        assert!(
            matches!(mgr.check(&spec), Err(ExtError::PathConflict { .. })),
            "{p}"
        );
        assert!(matches!(
            mgr.register(spec),
            Err(ExtError::PathConflict { .. })
        ));
    }
    mgr.register(node_spec("c", "/qq", OK_SOURCE)).unwrap();
    // Re-registering the same name at an overlapping path replaces it.
    mgr.register(node_spec("a", "/q/inner", OK_SOURCE)).unwrap();
    assert_eq!(mgr.node_extension_for("/q/inner/x").as_deref(), Some("a"));
    assert_eq!(mgr.node_extension_for("/q"), None);
    assert_eq!(mgr.names(), vec!["a".to_string(), "c".to_string()]);
}

#[test]
fn routing_finds_the_owner_of_a_path() {
    // Proves node_extension_for matches the virtual node and its subtree only.
    let mut mgr = ExtensionManager::new(Limits::default());
    mgr.register(node_spec("pq", "/queue", OK_SOURCE)).unwrap();
    assert_eq!(mgr.node_extension_for("/queue").as_deref(), Some("pq"));
    assert_eq!(mgr.node_extension_for("/queue/next").as_deref(), Some("pq"));
    assert_eq!(mgr.node_extension_for("/queued"), None);
    assert_eq!(mgr.node_extension_for("/"), None);
    assert!(mgr.unregister("pq"));
    assert!(!mgr.unregister("pq"));
    assert_eq!(mgr.node_extension_for("/queue"), None);
}

#[test]
fn check_does_not_register() {
    // Proves check() compiles without changing the manager.
    let mgr = ExtensionManager::new(Limits::default());
    mgr.check(&node_spec("x", "/q", OK_SOURCE)).unwrap();
    assert!(mgr.names().is_empty());
}

#[test]
fn calling_the_wrong_kind_or_an_unknown_name_fails() {
    // Proves call() refuses unknown names and non-node extensions.
    let mut h = Harness::new(MemTree::new());
    h.mgr
        .register(ExtensionSpec {
            name: "s".into(),
            kind: ExtensionKind::Session,
            path: None,
            source: OK_SOURCE.into(),
            limits: Limits::default(),
        })
        .unwrap();
    let req = stoa_ext::ExtRequest {
        op: stoa_ext::ExtOp::GetData,
        path: "/x".into(),
        data: vec![],
        version: -1,
        session_id: 1,
    };
    assert!(matches!(
        h.mgr.call("s", &req, &h.tree),
        Err(ExtError::WrongKind { .. })
    ));
    assert!(matches!(
        h.mgr.call("nope", &req, &h.tree),
        Err(ExtError::UnknownExtension(_))
    ));
}
