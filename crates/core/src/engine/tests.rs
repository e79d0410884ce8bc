//! The engine driven as a pure state machine: frames in, frames out, with
//! the WAL simulated by acknowledging persist jobs when the test says so.

use std::net::SocketAddr;

use raft::eraftpb::Entry;
use stoa_proto::codes::ErrorCode;
use stoa_proto::frame::encode_connect_request;
use stoa_proto::jute::Record;
use stoa_proto::opcode::{EventType, OpCode};
use stoa_proto::records::{
    Acl, ConnectRequest, ConnectResponse, CreateRequest, Id, RequestHeader, SetDataRequest,
};
use stoa_proto::request::Request;

use super::sim_world::wire::{self, ServerFrame as Frame};
use super::{Engine, EngineConfig, Input, Recovered};

const T0_MS: i64 = 1_700_000_000_000;

pub(super) fn config() -> EngineConfig {
    EngineConfig {
        ttl_enabled: true,
        reconfig_enabled: true,
        host_name: "test".into(),
        ..EngineConfig::default()
    }
}

pub(super) fn empty() -> Recovered {
    Recovered::empty()
}

/// An engine plus a simulated WAL: persist jobs wait in `unsynced` until
/// `sync()` acknowledges them, as the WAL thread would after its fsync.
struct Rig {
    engine: Engine,
    unsynced: Vec<u64>,
    /// Every entry the engine asked to persist, for restart tests.
    log: Vec<Entry>,
    inbox: std::collections::HashMap<u64, Vec<u8>>,
    closed: Vec<u64>,
    handshaken: std::collections::HashSet<u64>,
    /// Index of every snapshot the engine asked to write.
    snapshots: Vec<u64>,
}

impl Rig {
    fn new(recovered: Recovered) -> Rig {
        Rig::with_config(config(), recovered)
    }

    fn with_config(config: EngineConfig, recovered: Recovered) -> Rig {
        let engine = Engine::new(config, vec![recovered], T0_MS).unwrap();
        let mut rig = Rig {
            engine,
            unsynced: vec![],
            log: vec![],
            inbox: Default::default(),
            closed: vec![],
            handshaken: Default::default(),
            snapshots: vec![],
        };
        rig.settle();
        rig
    }

    fn collect(&mut self) {
        let out = self.engine.take_output();
        assert!(out.fatal.is_none(), "{:?}", out.fatal);
        for job in out.persists {
            let entries = (job.records.iter())
                .filter(|r| r.kind == stoa_wal::RecordKind::Entry)
                .map(|r| crate::node::record_to_entry(r).expect("an entry's record"));
            for e in entries {
                self.log.retain(|old| old.index < e.index);
                self.log.push(e);
            }
            self.unsynced.push(job.number);
        }
        for (conn, bytes) in out.sends {
            self.inbox.entry(conn).or_default().extend(bytes);
        }
        self.closed.extend(out.closes);
        self.snapshots
            .extend(out.snapshots.iter().map(|job| job.index));
    }

    fn sync(&mut self) {
        if let Some(&last) = self.unsynced.last() {
            self.unsynced.clear();
            self.engine.handle(Input::Persisted {
                partition: 0,
                number: last,
            });
        }
        self.collect();
    }

    /// Syncs until nothing is left to persist.
    fn settle(&mut self) {
        self.collect();
        while !self.unsynced.is_empty() {
            self.sync();
        }
    }

    fn open(&mut self, conn: u64, session_id: i64, passwd: Vec<u8>) {
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        self.engine.handle(Input::Accepted { conn, peer });
        let mut bytes = Vec::new();
        let req = ConnectRequest {
            time_out: 10_000,
            session_id,
            passwd,
            read_only: false,
            ..Default::default()
        };
        encode_connect_request(&mut bytes, &req);
        self.engine.handle(Input::Frames { conn, bytes });
    }

    fn connect(&mut self, conn: u64) -> ConnectResponse {
        self.open(conn, 0, vec![0; 16]);
        self.settle();
        match self.frames(conn).remove(0) {
            Frame::Connected(r) => r,
            other => panic!("expected a connect response, got {other:?}"),
        }
    }

    fn send(&mut self, conn: u64, xid: i32, request: Request) {
        let bytes = wire::request_frame(xid, &request);
        self.engine.handle(Input::Frames { conn, bytes });
        self.collect();
    }

    fn frames(&mut self, conn: u64) -> Vec<Frame> {
        let bytes = self.inbox.remove(&conn).unwrap_or_default();
        let mut handshaken = self.handshaken.contains(&conn);
        let frames = wire::decode_frames(&bytes, &mut handshaken);
        if handshaken {
            self.handshaken.insert(conn);
        }
        frames
    }

    fn reply_codes(&mut self, conn: u64) -> Vec<(i32, i32)> {
        self.frames(conn)
            .into_iter()
            .filter_map(|f| match f {
                Frame::Reply(h, _) => Some((h.xid, h.err)),
                _ => None,
            })
            .collect()
    }
}

fn create(path: &str) -> Request {
    wire::create(path, b"d".to_vec())
}

fn get(path: &str, watch: bool) -> Request {
    wire::get(path, watch)
}

const OK: i32 = 0;

/// The handshake and `requests`, framed as one read of a pipelining client.
fn handshake_and(requests: &[(i32, Request)]) -> Vec<u8> {
    let mut bytes = Vec::new();
    let connect = ConnectRequest {
        time_out: 10_000,
        passwd: vec![0; 16],
        ..Default::default()
    };
    encode_connect_request(&mut bytes, &connect);
    for (xid, request) in requests {
        bytes.extend(wire::request_frame(*xid, request));
    }
    bytes
}

#[test]
fn requests_sent_before_the_session_is_established_are_served_after_it_in_order() {
    let mut rig = Rig::new(empty());
    let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    rig.engine.handle(Input::Accepted { conn: 1, peer });
    let bytes = handshake_and(&[
        (1, create("/a")),
        (2, get("/a", false)),
        (3, get("/b", false)),
    ]);
    rig.engine.handle(Input::Frames { conn: 1, bytes });
    rig.settle();
    let frames = rig.frames(1);
    assert!(
        matches!(frames[0], Frame::Connected(ref r) if r.session_id != 0),
        "{frames:?}"
    );
    let codes: Vec<(i32, i32)> = frames[1..]
        .iter()
        .map(|f| match f {
            Frame::Reply(h, _) => (h.xid, h.err),
            other => panic!("expected a reply, got {other:?}"),
        })
        .collect();
    assert_eq!(
        codes,
        vec![(1, OK), (2, OK), (3, ErrorCode::NoNode.as_i32())]
    );
    assert!(rig.closed.is_empty(), "{:?}", rig.closed);
}

#[test]
fn a_connection_that_sends_too_much_before_its_session_exists_is_closed() {
    let mut rig = Rig::new(empty());
    let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    rig.engine.handle(Input::Accepted { conn: 1, peer });
    let many: Vec<(i32, Request)> = (1..=super::EARLY_FRAMES_MAX as i32 + 10)
        .map(|xid| (xid, get("/", false)))
        .collect();
    rig.engine.handle(Input::Frames {
        conn: 1,
        bytes: handshake_and(&many),
    });
    rig.collect();
    assert_eq!(rig.closed, vec![1]);
}

#[test]
fn frames_read_together_are_served_in_order_as_single_frames_are() {
    let mut rig = Rig::new(empty());
    rig.connect(1);
    // A pipelining client's read: three requests in one hand-off.
    let mut bytes = Vec::new();
    for (xid, request) in [
        (1, create("/a")),
        (2, get("/a", false)),
        (3, get("/b", false)),
    ] {
        bytes.extend(wire::request_frame(xid, &request));
    }
    rig.engine.handle(Input::Frames { conn: 1, bytes });
    rig.settle();
    assert_eq!(
        rig.reply_codes(1),
        vec![(1, OK), (2, OK), (3, ErrorCode::NoNode.as_i32())]
    );
    assert!(rig.closed.is_empty());
}

#[test]
fn a_write_is_answered_only_after_the_wal_acknowledges_it() {
    let mut rig = Rig::new(empty());
    rig.connect(1);
    rig.send(1, 1, create("/a"));
    assert!(rig.reply_codes(1).is_empty(), "replied before fsync");
    rig.sync();
    assert_eq!(rig.reply_codes(1), vec![(1, OK)]);
}

#[test]
fn a_read_after_a_pending_write_of_the_same_session_waits_and_sees_it() {
    let mut rig = Rig::new(empty());
    rig.connect(1);
    rig.send(1, 1, create("/a"));
    rig.send(1, 2, get("/a", false));
    assert!(rig.reply_codes(1).is_empty());
    rig.settle();
    assert_eq!(rig.reply_codes(1), vec![(1, OK), (2, OK)]);
}

#[test]
fn a_refused_write_is_answered_after_the_pending_write_that_caused_it() {
    let mut rig = Rig::new(empty());
    rig.connect(1);
    rig.connect(2);
    rig.send(1, 1, create("/a"));
    rig.send(2, 1, create("/a"));
    rig.send(2, 2, get("/a", false));
    // Session 2's NodeExists must not overtake session 1's create.
    assert!(rig.reply_codes(2).is_empty());
    rig.settle();
    assert_eq!(
        rig.reply_codes(2),
        vec![(1, ErrorCode::NodeExists.as_i32()), (2, OK)]
    );
}

#[test]
fn a_data_watch_fires_before_the_reply_to_a_read_that_sees_the_change() {
    let mut rig = Rig::new(empty());
    rig.connect(1);
    rig.connect(2);
    rig.send(1, 1, create("/w"));
    rig.settle();
    rig.frames(1);
    rig.send(2, 1, get("/w", true));
    rig.frames(2);
    // A read issued while the set is still pending does not see it (and
    // comes before the event); one issued after the commit does.
    rig.send(
        1,
        2,
        Request::SetData(SetDataRequest {
            path: "/w".into(),
            data: Some(b"x".to_vec()),
            version: -1,
        }),
    );
    rig.send(2, 2, get("/w", false));
    assert!(matches!(&rig.frames(2)[..], [Frame::Reply(h, _)] if h.xid == 2));
    rig.settle();
    rig.send(2, 3, get("/w", false));
    let frames = rig.frames(2);
    assert!(
        matches!(&frames[0], Frame::Event(_, e) if e.kind == EventType::NodeDataChanged as i32 && e.path == "/w"),
        "{frames:?}"
    );
    assert!(matches!(&frames[1], Frame::Reply(h, _) if h.xid == 3 && h.err == OK));
    assert_eq!(frames.len(), 2, "one-shot watch fired more than once");
}

#[test]
fn an_unknown_opcode_gets_unimplemented_and_the_connection_closes() {
    let mut rig = Rig::new(empty());
    rig.connect(1);
    let mut bytes = Vec::new();
    stoa_proto::frame::encode_frame(&mut bytes, |out| {
        RequestHeader { xid: 7, kind: 999 }.encode(out)
    });
    rig.engine.handle(Input::Frames { conn: 1, bytes });
    rig.collect();
    assert_eq!(
        rig.reply_codes(1),
        vec![(7, ErrorCode::Unimplemented.as_i32())]
    );
    assert!(rig.closed.contains(&1));
}

#[test]
fn an_expired_session_loses_its_ephemerals_and_cannot_resume() {
    let mut rig = Rig::new(empty());
    let session = rig.connect(1);
    let mut eph = CreateRequest {
        path: "/e".into(),
        data: Some(vec![]),
        acl: vec![Acl::open_unsafe()],
        flags: 1,
    };
    rig.send(1, 1, Request::Create(eph.clone()));
    rig.settle();
    rig.engine.handle(Input::Closed { conn: 1 });
    rig.engine.set_time(T0_MS + session.time_out as i64 + 1);
    rig.engine.tick();
    rig.settle();
    assert!(
        rig.engine.tree().node("/e").is_none(),
        "ephemeral survived expiry"
    );
    rig.open(2, session.session_id, session.passwd.clone());
    rig.collect();
    match rig.frames(2).remove(0) {
        Frame::Connected(r) => assert_eq!(
            (r.session_id, r.time_out),
            (0, 0),
            "expired session resumed"
        ),
        other => panic!("{other:?}"),
    }
    eph.path = "/unused".into();
}

#[test]
fn a_restart_from_the_log_rebuilds_the_tree_and_sessions() {
    let mut rig = Rig::new(empty());
    let session = rig.connect(1);
    for i in 0..5 {
        rig.send(1, i + 1, create(&format!("/n{i}")));
    }
    rig.settle();
    let digest = rig.engine.tree().digest();
    let entries = rig.log.clone();
    let hard_state = raft::eraftpb::HardState {
        term: 1,
        vote: 1,
        commit: 0,
        ..Default::default()
    };
    let recovered = Recovered {
        entries,
        hard_state,
        ..empty()
    };
    let mut restarted = Rig::new(recovered);
    assert!(restarted.engine.caught_up());
    assert_eq!(restarted.engine.tree().digest(), digest);
    // The session is durable: it resumes with its password.
    restarted.open(9, session.session_id, session.passwd);
    restarted.collect();
    match restarted.frames(9).remove(0) {
        Frame::Connected(r) => assert_eq!(r.session_id, session.session_id),
        other => panic!("{other:?}"),
    }
}

#[test]
fn zxids_increase_across_a_restart() {
    let mut rig = Rig::new(empty());
    rig.connect(1);
    rig.send(1, 1, create("/a"));
    rig.settle();
    let before = rig.engine.tree().last_zxid();
    let recovered = Recovered {
        entries: rig.log.clone(),
        hard_state: raft::eraftpb::HardState {
            term: 1,
            vote: 1,
            commit: 0,
            ..Default::default()
        },
        ..empty()
    };
    let mut restarted = Rig::new(recovered);
    restarted.connect(1);
    restarted.send(1, 1, create("/b"));
    restarted.settle();
    assert!(restarted.engine.tree().last_zxid() > before);
    assert_eq!(OpCode::Create as i32, 1);
}

#[test]
fn the_speculative_tree_shows_proposed_writes_before_they_commit() {
    let mut rig = Rig::new(empty());
    rig.connect(1);
    rig.send(1, 1, create("/s"));
    assert!(rig.engine.tree().node("/s").is_none());
    assert!(
        rig.engine.speculative_tree(0).node("/s").is_some(),
        "built from the in-flight txns"
    );
    rig.send(1, 2, create("/t"));
    assert!(
        rig.engine.speculative_tree(0).node("/t").is_some(),
        "kept up to date by later proposals"
    );
    rig.settle();
    assert_eq!(
        rig.engine.speculative_tree(0).digest(),
        rig.engine.tree().digest()
    );
    rig.engine.drop_speculative();
}

#[test]
fn a_standalone_snapshot_waits_for_a_log_worth_a_quarter_of_the_tree() {
    // Proves snapCount alone no longer triggers a snapshot of a big tree:
    // small writes wait until their log is a quarter of the tree's size.
    let mut cfg = config();
    cfg.snap_count = 10;
    let mut rig = Rig::with_config(cfg, empty());
    rig.connect(1);
    let write = |path: &str, bytes: usize| {
        Request::Create(CreateRequest {
            path: path.into(),
            data: Some(vec![b'x'; bytes]),
            acl: vec![Acl::open_unsafe()],
            flags: 0,
        })
    };
    let mut xid = 0;
    let mut send = |rig: &mut Rig, request: Request| {
        xid += 1;
        rig.send(1, xid, request);
        rig.settle();
    };
    send(&mut rig, write("/big", 400_000));
    for i in 0..10 {
        send(&mut rig, write(&format!("/a{i}"), 10));
    }
    assert_eq!(rig.snapshots.len(), 1, "the big write's log pays for one");
    for i in 0..40 {
        send(&mut rig, write(&format!("/b{i}"), 10));
    }
    assert_eq!(
        rig.snapshots.len(),
        1,
        "40 writes past snapCount, but a few KB against a 400 KB tree"
    );
    for i in 0..3 {
        send(&mut rig, write(&format!("/c{i}"), 60_000));
    }
    assert_eq!(
        rig.snapshots.len(),
        2,
        "180 KB of log: a quarter of the tree"
    );
}

#[test]
fn a_used_up_zxid_counter_starts_a_new_epoch_without_losing_or_reordering_writes() {
    const LIMIT: u32 = 16;
    let mut rig = Rig::with_config(
        EngineConfig {
            zxid_counter_limit: Some(LIMIT),
            four_letter_whitelist: Some(vec!["*".into()]),
            ..config()
        },
        empty(),
    );
    rig.connect(1);
    let mut zxids = Vec::new();
    let mut xid = 0;
    for round in 0..20 {
        // Pipelined bursts of 1 to 7 writes, each burst settled.
        for _ in 0..(round % 7 + 1) {
            xid += 1;
            rig.send(1, xid, create(&format!("/n{xid}")));
        }
        rig.settle();
        for frame in rig.frames(1) {
            let Frame::Reply(header, _) = frame else {
                panic!("unexpected {frame:?}");
            };
            assert_eq!(header.err, OK, "xid {}", header.xid);
            zxids.push((header.xid, header.zxid));
        }
    }
    assert_eq!(zxids.len(), xid as usize, "every write answered");
    for pair in zxids.windows(2) {
        assert_eq!(pair[1].0, pair[0].0 + 1, "replies in request order");
        assert!(pair[1].1 > pair[0].1, "zxids ascend: {pair:x?}");
    }
    for (_, zxid) in &zxids {
        assert!(
            (*zxid as u32) <= LIMIT,
            "counter of {zxid:#x} past the limit"
        );
    }
    let epochs: std::collections::BTreeSet<u64> = zxids
        .iter()
        .map(|(_, z)| crate::zxid::epoch_of(*z))
        .collect();
    // 80 writes plus the session's creation, at most 14 per epoch before
    // the leader rolls (the rest of 16 is the reserve).
    assert!(epochs.len() >= 6, "epochs {epochs:?}");
    assert!(rig.engine.stats.epoch_rollovers >= 5);
    let rollovers = rig.engine.stats.epoch_rollovers;
    let mntr = rig.engine.four_letter("mntr", 1);
    assert!(
        mntr.contains(&format!("stoa_epoch_rollovers\t{rollovers}\n")),
        "{mntr}"
    );
    // Every write is in the tree, and survives a restart from the log.
    for n in 1..=xid {
        assert!(rig.engine.tree().node(&format!("/n{n}")).is_some());
    }
    let digest = rig.engine.tree().digest();
    let last = rig.engine.tree().last_zxid();
    let recovered = Recovered {
        entries: rig.log.clone(),
        hard_state: raft::eraftpb::HardState {
            term: rig.engine.cores[0].raft.raft.term,
            vote: 1,
            commit: 0,
            ..Default::default()
        },
        ..empty()
    };
    let mut restarted = Rig::with_config(
        EngineConfig {
            zxid_counter_limit: Some(LIMIT),
            ..config()
        },
        recovered,
    );
    assert_eq!(restarted.engine.tree().digest(), digest);
    restarted.connect(2);
    restarted.send(2, 1, create("/after"));
    restarted.settle();
    assert!(restarted.engine.tree().last_zxid() > last);
}

/// A GSS-API acceptor whose context completes on the token `ticket`
/// (anything else is refused), replying `ap-rep`, and "wraps" by prefixing
/// `W`: the engine's side of SASL GSSAPI without Kerberos.
struct ScriptedAcceptor;

struct ScriptedContext;

impl crate::sasl::gssapi::GssAcceptor for ScriptedAcceptor {
    fn new_context(&self) -> Result<Box<dyn crate::sasl::gssapi::GssAcceptContext>, String> {
        Ok(Box::new(ScriptedContext))
    }
}

impl crate::sasl::gssapi::GssAcceptContext for ScriptedContext {
    fn accept(&mut self, token: &[u8]) -> Result<crate::sasl::gssapi::Accepted, String> {
        match token {
            b"ticket" => Ok(crate::sasl::gssapi::Accepted::Complete {
                reply: b"ap-rep".to_vec(),
                initiator: "app/web1@EXAMPLE.COM".into(),
            }),
            _ => Err("defective token".into()),
        }
    }
    fn wrap(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
        crate::sasl::gssapi::scripted_layer::wrap(message)
    }
    fn unwrap(&mut self, token: &[u8]) -> Result<Vec<u8>, String> {
        crate::sasl::gssapi::scripted_layer::unwrap(token)
    }
}

fn gssapi_rig(digest_users: bool) -> Rig {
    let mut config = config();
    config.gssapi = Some(crate::sasl::GssapiService {
        acceptor: std::sync::Arc::new(ScriptedAcceptor),
        names: crate::sasl::kerberos_name::KerberosNames {
            default_realm: Some("EXAMPLE.COM".into()),
            remove_host: true,
            remove_realm: false,
        },
    });
    if digest_users {
        config.sasl_users = vec![("bob".into(), "secret".into())];
    }
    config.enforce_auth_schemes = Some(vec!["sasl".into()]);
    Rig::with_config(config, empty())
}

fn sasl(token: &[u8]) -> Request {
    Request::Sasl(stoa_proto::records::GetSaslRequest {
        token: token.to_vec(),
    })
}

/// The (xid, error, token) of each SASL reply.
fn sasl_replies(rig: &mut Rig, conn: u64) -> Vec<(i32, i32, Option<Vec<u8>>)> {
    use stoa_proto::records::SetSaslResponse;
    (rig.frames(conn).into_iter())
        .filter_map(|f| match f {
            Frame::Reply(h, body) if h.err == OK => Some((
                h.xid,
                h.err,
                SetSaslResponse::from_bytes(&body).unwrap().token,
            )),
            Frame::Reply(h, _) => Some((h.xid, h.err, None)),
            _ => None,
        })
        .collect()
}

#[test]
fn gssapi_authenticates_the_principal_as_its_sasl_identity() {
    let mut rig = gssapi_rig(false);
    rig.connect(1);
    rig.send(1, 1, sasl(b"ticket"));
    rig.send(1, 2, sasl(b""));
    rig.send(1, 3, sasl(b"W\x01\x00\x00\x00app/web1@EXAMPLE.COM"));
    let replies = sasl_replies(&mut rig, 1);
    // The last token is null, which ZooKeeper's Java client waits for.
    let want = [
        (1, OK, Some(b"ap-rep".to_vec())),
        (2, OK, Some(b"W\x01\x00\x00\x00".to_vec())),
        (3, OK, None),
    ];
    assert_eq!(replies, want);
    let id = rig.engine.gate.conns[&1].identity.ids.to_vec();
    let sasl_id = Id {
        scheme: "sasl".into(),
        id: "app@EXAMPLE.COM".into(),
    };
    assert!(id.contains(&sasl_id), "{id:?}");
    // enforce.auth.schemes=sasl: GSSAPI counts.
    rig.send(1, 4, get("/", false));
    rig.settle();
    assert_eq!(rig.reply_codes(1), vec![(4, OK)]);
    assert!(rig.closed.is_empty());
}

#[test]
fn a_bad_gssapi_token_is_auth_failed_and_closes_the_connection() {
    for tokens in [
        &[&b"forged"[..]][..],
        &[b"ticket", b"late"],
        &[b"ticket", b"", b"unwrapped"],
    ] {
        let mut rig = gssapi_rig(false);
        rig.connect(1);
        for (xid, token) in tokens.iter().enumerate() {
            rig.send(1, xid as i32 + 1, sasl(token));
        }
        let last = sasl_replies(&mut rig, 1).pop().unwrap();
        assert_eq!(
            (last.0, last.1),
            (tokens.len() as i32, ErrorCode::AuthFailed as i32)
        );
        assert_eq!(rig.closed, vec![1], "{tokens:?}");
    }
}

#[test]
fn with_digest_users_too_an_empty_first_token_opens_digest_md5() {
    let mut rig = gssapi_rig(true);
    rig.connect(1);
    rig.send(1, 1, sasl(b""));
    let (_, err, challenge) = sasl_replies(&mut rig, 1).remove(0);
    assert_eq!(err, OK);
    let challenge = String::from_utf8(challenge.unwrap()).unwrap();
    assert!(challenge.contains("realm=\"zk-sasl-md5\""));
    rig.connect(2);
    rig.send(2, 1, sasl(b"ticket"));
    assert_eq!(
        sasl_replies(&mut rig, 2),
        vec![(1, OK, Some(b"ap-rep".to_vec()))]
    );
}

/// Applying by partition, a write that comes in hand behind a reply of its
/// session not yet sent is fenced; the reply going out lifts the fence.
/// Pipelined writes and reads over two groups chain such fences: each
/// lifted must let what waited behind it apply in the same output, not at
/// the next input (once load stopped, one tick per fence).
#[test]
fn fences_lifted_by_replies_apply_without_waiting_for_another_input() {
    let config = EngineConfig {
        partitions: 3,
        partition_groups: vec!["/a".into(), "/b".into()],
        reconfig_enabled: false,
        apply_by_partition: true,
        ..config()
    };
    let recovered = (0..3).map(|_| empty()).collect();
    let mut engine = Engine::new(config, recovered, T0_MS).unwrap();
    let mut inbox = Vec::new();
    // Every persist job acknowledged as the WAL would, output by output,
    // with no tick between.
    let mut run = |engine: &mut Engine, input: Option<Input>| {
        if let Some(input) = input {
            engine.handle(input);
        }
        loop {
            let out = engine.take_output();
            assert!(out.fatal.is_none(), "{:?}", out.fatal);
            for (_, bytes) in out.sends {
                inbox.extend(bytes);
            }
            if out.persists.is_empty() {
                break;
            }
            for job in out.persists {
                engine.handle(Input::Persisted {
                    partition: job.partition,
                    number: job.number,
                });
            }
        }
    };
    run(&mut engine, None);
    let mut client = wire::WireClient::new();
    wire::open(&mut engine, 1, client.connect_bytes(10_000));
    run(&mut engine, None);
    let mut setup = Vec::new();
    for path in ["/a", "/b", "/a/k", "/b/k"] {
        setup.extend(client.request_bytes(&wire::create(path, b"0".to_vec())).1);
    }
    run(
        &mut engine,
        Some(Input::Frames {
            conn: 1,
            bytes: setup,
        }),
    );
    let mut burst = Vec::new();
    const ROUNDS: usize = 40;
    for round in 0..ROUNDS {
        let (own, other) = if round % 2 == 0 {
            ("/a/k", "/b/k")
        } else {
            ("/b/k", "/a/k")
        };
        burst.extend(client.request_bytes(&wire::set(own, vec![round as u8])).1);
        burst.extend(client.request_bytes(&wire::get(other, false)).1);
    }
    run(
        &mut engine,
        Some(Input::Frames {
            conn: 1,
            bytes: burst,
        }),
    );
    let mut handshaken = false;
    let replies = wire::decode_frames(&inbox, &mut handshaken)
        .into_iter()
        .filter(|f| matches!(f, Frame::Reply(..)))
        .count();
    assert_eq!(
        replies,
        4 + 2 * ROUNDS,
        "replies left waiting for another input"
    );
    assert!(
        engine.stats.writes_fenced > 0,
        "no write was fenced: the test shows nothing"
    );
}
