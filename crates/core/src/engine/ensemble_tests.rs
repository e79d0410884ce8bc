//! Three engines wired in memory (messages delivered by the test, WAL
//! batches acknowledged at once): raft elects a leader, the leader's writes
//! replicate, and every replica applies the same transactions.

use std::collections::VecDeque;

use stoa_proto::records::SyncRequest;
use stoa_proto::request::Request;

use super::sim_world::wire::{self, WireClient};
use super::tests::{config, empty};
use super::{Engine, Input};

const IDS: [u64; 3] = [1, 2, 3];
const T0_MS: i64 = 1_700_000_000_000;
const ROUNDS_MAX: usize = 500;

struct Cluster {
    engines: Vec<Engine>,
    /// Messages in flight: (to, message).
    wire: VecDeque<(u64, raft::eraftpb::Message)>,
    /// Engine messages in flight: (to, from, message).
    engine_wire: VecDeque<(u64, u64, super::forward::EngineMessage)>,
    now_ms: i64,
    /// Bytes each engine sent to connection 1 (the test's client).
    client_bytes: Vec<usize>,
    /// Each engine closed connection 1.
    client_closed: Vec<bool>,
    /// A server cut off from the others: messages to or from it are lost.
    isolated: Option<u64>,
    /// Engines whose disks are slow: their WAL batches are acknowledged
    /// only by `release_persists` (the newest ready held, per partition 0).
    slow_disks: Vec<usize>,
    held_persists: Vec<Option<u64>>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster::with_snap_count(100_000)
    }

    fn with_snap_count(snap_count: u64) -> Cluster {
        let engines = IDS
            .iter()
            .map(|&id| {
                let mut cfg = config();
                cfg.server_id = id;
                cfg.voters = IDS.to_vec();
                cfg.snap_count = snap_count;
                Engine::new(cfg, vec![empty()], T0_MS).expect("engine starts")
            })
            .collect();
        Cluster {
            engines,
            wire: VecDeque::new(),
            engine_wire: VecDeque::new(),
            now_ms: T0_MS,
            client_bytes: vec![0; IDS.len()],
            client_closed: vec![false; IDS.len()],
            isolated: None,
            slow_disks: Vec::new(),
            held_persists: vec![None; IDS.len()],
        }
    }

    fn cut_off(&self, from: u64, to: u64) -> bool {
        self.isolated.is_some_and(|id| id == from || id == to)
    }

    /// Takes everything engine `i` wants done: WAL batches acknowledged at
    /// once, messages onto the wire, client bytes counted; repeats while
    /// acknowledgements make more output.
    fn drain(&mut self, i: usize) {
        loop {
            let out = self.engines[i].take_output();
            assert!(out.fatal.is_none(), "{:?}", out.fatal);
            for (partition, m) in out.messages {
                assert_eq!(partition, 0, "one partition");
                if !self.cut_off(m.from, m.to) {
                    self.wire.push_back((m.to, m));
                }
            }
            for (to, m) in out.engine_messages {
                if !self.cut_off(IDS[i], to) {
                    self.engine_wire.push_back((to, IDS[i], m));
                }
            }
            for job in out.snapshots_to_ship {
                // The snapshot thread's work, done at once.
                let mut data = Vec::new();
                job.content.write(&mut data).expect("in memory");
                self.engines[i].handle(Input::SnapshotBuilt {
                    partition: job.partition,
                    index: job.index,
                    term: job.term,
                    data: data.into(),
                });
            }
            for (conn, bytes) in out.sends {
                if conn == 1 {
                    self.client_bytes[i] += bytes.len();
                }
            }
            self.client_closed[i] |= out.closes.contains(&1);
            let Some(last) = out.persists.last().map(|j| j.number) else {
                break;
            };
            if self.slow_disks.contains(&i) {
                self.held_persists[i] = Some(last);
                break;
            }
            self.engines[i].handle(Input::Persisted {
                partition: 0,
                number: last,
            });
        }
    }

    /// Runs every engine and delivers messages until the wire is quiet.
    fn pump(&mut self) {
        for i in 0..self.engines.len() {
            self.drain(i);
        }
        while !self.wire.is_empty() || !self.engine_wire.is_empty() {
            if let Some((to, m)) = self.wire.pop_front() {
                let i = IDS.iter().position(|&id| id == to).expect("known peer");
                self.engines[i].handle(Input::Raft {
                    partition: 0,
                    message: m,
                });
                self.drain(i);
            }
            if let Some((to, from, message)) = self.engine_wire.pop_front() {
                let i = IDS.iter().position(|&id| id == to).expect("known peer");
                self.engines[i].handle(Input::Peer { from, message });
                self.drain(i);
            }
        }
    }

    /// The slow disks catch up: their held batches are durable now.
    fn release_persists(&mut self) {
        for i in std::mem::take(&mut self.slow_disks) {
            if let Some(number) = self.held_persists[i].take() {
                self.engines[i].handle(Input::Persisted {
                    partition: 0,
                    number,
                });
            }
        }
        self.pump();
    }

    fn tick(&mut self) {
        self.now_ms += 100;
        for e in &mut self.engines {
            e.set_time(self.now_ms);
            e.tick();
        }
        self.pump();
    }

    /// Opens connection 1 on engine `i` and asks for a new session.
    fn connect_client(&mut self, i: usize) {
        let bytes = WireClient::new().connect_bytes(10_000);
        wire::open(&mut self.engines[i], 1, bytes);
        self.pump();
    }

    /// Sends a create of `path` on connection 1 of engine `i`.
    fn send_create(&mut self, i: usize, xid: i32, path: &str, data: Vec<u8>) {
        self.send(i, xid, &wire::create(path, data));
    }

    /// Sends `request` on connection 1 of engine `i`.
    fn send(&mut self, i: usize, xid: i32, request: &Request) {
        let bytes = wire::request_frame(xid, request);
        self.engines[i].handle(Input::Frames { conn: 1, bytes });
    }

    fn leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = (0..self.engines.len())
            .filter(|&i| self.engines[i].is_leader())
            .collect();
        assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
        leaders.first().copied()
    }

    fn elect(&mut self) -> usize {
        for _ in 0..ROUNDS_MAX {
            self.tick();
            if let Some(l) = self.leader() {
                return l;
            }
        }
        panic!("no leader after {ROUNDS_MAX} rounds");
    }
}

#[test]
fn three_engines_elect_one_leader_and_replicate_its_writes() {
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    for &f in &followers {
        assert_eq!(
            cluster.engines[f].leader_id(),
            IDS[leader],
            "followers know the leader"
        );
    }
    // A client of the leader: a session and ten creates.
    cluster.connect_client(leader);
    for i in 0..10 {
        cluster.send_create(leader, i + 1, &format!("/n{i}"), vec![i as u8]);
    }
    for _ in 0..5 {
        cluster.tick();
    }
    assert!(cluster.client_bytes[leader] > 0, "the client got replies");
    let digest = cluster.engines[leader].tree().digest();
    for &f in &followers {
        assert!(
            cluster.engines[f].tree().node("/n9").is_some(),
            "replicated to {}",
            IDS[f]
        );
        assert_eq!(
            cluster.engines[f].tree().digest(),
            digest,
            "replica {} diverged",
            IDS[f]
        );
        assert_eq!(
            cluster.engines[f].tree().sessions().count(),
            1,
            "the session is replicated"
        );
    }
}

#[test]
fn a_follower_forwards_sessions_and_writes_and_answers_its_client() {
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    let follower = (leader + 1) % 3;
    cluster.connect_client(follower);
    let connected = cluster.client_bytes[follower];
    assert!(
        connected > 0,
        "the follower answered the handshake once the leader committed the session"
    );
    cluster.send_create(follower, 1, "/via-follower", vec![]);
    cluster.pump();
    assert!(
        cluster.client_bytes[follower] > connected,
        "the follower answered the create"
    );
    for e in &cluster.engines {
        assert!(
            e.tree().node("/via-follower").is_some(),
            "every replica has it"
        );
    }
}

#[test]
fn a_follower_behind_the_compacted_log_catches_up_from_a_snapshot() {
    // snapCount 20: the leader snapshots every 20 entries and keeps 10.
    let mut cluster = Cluster::with_snap_count(20);
    let leader = cluster.elect();
    let lagging = (leader + 1) % 3;
    cluster.connect_client(leader);
    cluster.isolated = Some(IDS[lagging]);
    for i in 0..60 {
        cluster.send_create(leader, i + 1, &format!("/n{i}"), vec![i as u8]);
        cluster.pump();
    }
    cluster.tick();
    assert!(
        cluster.engines[leader].cores[0].raft.store().first_index() > 30,
        "the leader compacted its log"
    );
    assert!(cluster.engines[lagging].tree().node("/n0").is_none());
    cluster.isolated = None;
    for _ in 0..40 {
        cluster.tick();
    }
    let leader_engine = &cluster.engines[leader];
    let follower = &cluster.engines[lagging];
    assert_eq!(leader_engine.stats.snapshots_sent, 1, "one snapshot sent");
    assert_eq!(follower.stats.snapshots_installed, 1, "and installed");
    assert_eq!(
        follower.tree().digest(),
        leader_engine.tree().digest(),
        "the follower caught up"
    );
    assert_eq!(follower.tree().sessions().count(), 1, "with the session");
    // And it keeps up with entries after the snapshot.
    cluster.send_create(leader, 100, "/after", vec![]);
    cluster.pump();
    assert!(cluster.engines[lagging].tree().node("/after").is_some());
    // The leader keeps the snapshot a while for other peers, then lets it go.
    assert!(cluster.engines[leader].cores[0]
        .raft
        .store()
        .has_shippable());
    for _ in 0..super::catch_up::SHIPPABLE_IDLE_TICKS_MAX {
        cluster.tick();
    }
    assert!(!cluster.engines[leader].cores[0]
        .raft
        .store()
        .has_shippable());
    // A peer that falls behind again gets a new one (through a new
    // session: the first expired meanwhile).
    cluster.engines[leader].handle(Input::Closed { conn: 1 });
    cluster.connect_client(leader);
    cluster.isolated = Some(IDS[lagging]);
    for i in 0..60 {
        cluster.send_create(leader, 200 + i, &format!("/m{i}"), vec![]);
        cluster.pump();
    }
    cluster.tick();
    cluster.isolated = None;
    for _ in 0..40 {
        cluster.tick();
    }
    assert_eq!(cluster.engines[leader].stats.snapshots_sent, 2);
    assert_eq!(cluster.engines[lagging].stats.snapshots_installed, 2);
    assert!(cluster.engines[lagging].tree().node("/m59").is_some());
    assert_eq!(
        cluster.engines[lagging].tree().digest(),
        cluster.engines[leader].tree().digest()
    );
}

#[test]
fn a_leader_answers_a_sync_only_through_its_log() {
    // Proves a leader cut off from the quorum (deposed without knowing it
    // yet) does not answer a sync from its own tree: the sync waits for a
    // log entry that only a quorum commits, then is answered.
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    cluster.connect_client(leader);
    let before = cluster.client_bytes[leader];
    assert!(before > 0, "connected");
    cluster.isolated = Some(IDS[leader]);
    let sync = Request::Sync(SyncRequest { path: "/".into() });
    cluster.send(leader, 1, &sync);
    cluster.pump();
    assert_eq!(
        cluster.client_bytes[leader], before,
        "a leader without its quorum answered a sync"
    );
    cluster.isolated = None;
    for _ in 0..5 {
        cluster.tick();
        if cluster.client_bytes[leader] > before {
            break;
        }
    }
    assert!(
        cluster.client_bytes[leader] > before,
        "the sync was answered once the quorum was back"
    );
}

#[test]
fn a_server_refused_at_a_newer_membership_stops_serving_clients() {
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    let (refused, other) = ((leader + 1) % 3, (leader + 2) % 3);
    let version = cluster.engines[refused].membership().version;
    // A peer behind this server (or at the same membership) proves nothing.
    cluster.engines[refused].handle(Input::RefusedByPeer {
        from: IDS[other],
        membership_version: version,
    });
    assert!(
        cluster.engines[refused].is_member(),
        "a stale refusal counts"
    );
    cluster.engines[refused].handle(Input::RefusedByPeer {
        from: IDS[other],
        membership_version: version + 1,
    });
    assert!(!cluster.engines[refused].is_member());
    cluster.connect_client(refused);
    assert_eq!(
        cluster.client_bytes[refused], 0,
        "a removed server took a session"
    );
    cluster.connect_client(other);
    assert!(cluster.client_bytes[other] > 0, "the members still serve");
}

/// Ticks within which the followers of a leader whose connections closed
/// elect another (its silence confirmed, a stagger, pre-vote and vote),
/// well inside raft's election timeout of 10-20 ticks.
const LOSS_ELECTION_TICKS_MAX: usize = 6;

/// The followers of `gone` left after `ticks` rounds, with the one that
/// leads among them, if any.
fn successor_after(cluster: &mut Cluster, gone: usize, ticks: usize) -> Option<usize> {
    for _ in 0..ticks {
        cluster.tick();
        let successor = (0..3).find(|&i| i != gone && cluster.engines[i].is_leader());
        if successor.is_some() {
            return successor;
        }
    }
    None
}

#[test]
fn a_dead_leader_is_replaced_within_a_few_ticks_of_its_connections_closing() {
    for told in [false, true] {
        let mut cluster = Cluster::new();
        let leader = cluster.elect();
        let term = cluster.engines[leader].cores[0].raft.raft.term;
        // Dead: nothing more from it reaches the others.
        cluster.isolated = Some(IDS[leader]);
        if told {
            for i in (0..3).filter(|&i| i != leader) {
                cluster.engines[i].handle(Input::PeerLost { from: IDS[leader] });
            }
        }
        let successor = successor_after(&mut cluster, leader, LOSS_ELECTION_TICKS_MAX);
        if !told {
            // Raft alone waits out its election timeout: the test can tell.
            assert_eq!(successor, None, "elected without the hint");
            continue;
        }
        let successor = successor.expect("a successor within a few ticks");
        assert!(cluster.engines[successor].cores[0].raft.raft.term > term);
        let other = 3 - leader - successor;
        assert_eq!(cluster.engines[other].leader_id(), IDS[successor]);
        let noticed = cluster.engines[successor].stats.leader_losses_noticed
            + cluster.engines[other].stats.leader_losses_noticed;
        assert!(noticed >= 1, "the hint started the election");
    }
}

#[test]
fn a_closed_connection_from_a_live_leader_changes_nothing() {
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    let term = cluster.engines[leader].cores[0].raft.raft.term;
    // Both its connections broke, and it redials and goes on.
    for i in (0..3).filter(|&i| i != leader) {
        cluster.engines[i].handle(Input::PeerLost { from: IDS[leader] });
    }
    assert_eq!(successor_after(&mut cluster, leader, 30), None);
    assert!(cluster.engines[leader].is_leader());
    assert_eq!(cluster.engines[leader].cores[0].raft.raft.term, term);
    // A hint about a follower, or from a leader's own view, is ignored.
    let follower = (leader + 1) % 3;
    cluster.engines[leader].handle(Input::PeerLost {
        from: IDS[follower],
    });
    cluster.engines[follower].handle(Input::PeerLost {
        from: IDS[(leader + 2) % 3],
    });
    assert_eq!(successor_after(&mut cluster, leader, 30), None);
    assert_eq!(cluster.engines[leader].cores[0].raft.raft.term, term);
    assert!(cluster
        .engines
        .iter()
        .all(|e| e.stats.leader_losses_noticed == 0));
}

#[test]
fn a_leader_whose_followers_disks_stall_keeps_leading() {
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    let term = cluster.engines[leader].cores[0].raft.raft.term;
    cluster.connect_client(leader);
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    // Both followers' disks take far longer than raft's election timeout
    // (10-20 ticks) to sync the write they were sent.
    cluster.slow_disks = followers.clone();
    cluster.send_create(leader, 1, "/stalled", b"x".to_vec());
    for _ in 0..40 {
        cluster.tick();
    }
    assert!(
        cluster.engines[leader].is_leader(),
        "the leader stepped down while its followers were alive, only slow to sync"
    );
    assert_eq!(cluster.engines[leader].cores[0].raft.raft.term, term);
    let committed = |cluster: &Cluster| {
        cluster.engines[leader].cores[0]
            .raft
            .raft
            .raft_log
            .committed
    };
    let before = committed(&cluster);
    cluster.release_persists();
    cluster.tick();
    assert!(
        committed(&cluster) > before,
        "the write commits once the disks catch up"
    );
    for i in followers {
        assert_eq!(cluster.engines[i].leader_id(), IDS[leader]);
    }
}

#[test]
fn a_call_right_after_a_registration_its_leader_has_not_applied_waits_for_it() {
    // Proves the leader holds a forwarded call while a registration change
    // it proposed is unapplied there (`Engine::registration_pending`). The
    // leader's disk is slow, so its followers commit and apply the
    // registration first; the follower's client at once calls the
    // extension. Without the hold the leader ran the call as a plain create
    // (NoNode here) and the follower, waiting for the extension's answer,
    // never replied.
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    let follower = (leader + 1) % 3;
    cluster.connect_client(follower);
    cluster.send_create(follower, 1, "/extensions", vec![]);
    cluster.pump();
    cluster.slow_disks = vec![leader];
    let declaration = br#"{"kind": "node", "path": "/queue", "source": "return { create = function(req, zk) zk.create('/made', 'x') return { path = '/made' } end }"}"#;
    cluster.send_create(follower, 2, "/extensions/q", declaration.to_vec());
    cluster.pump();
    assert!(
        cluster.engines[follower]
            .tree()
            .node("/extensions/q")
            .is_some()
            && cluster.engines[leader]
                .tree()
                .node("/extensions/q")
                .is_none(),
        "the followers applied the registration, the leader not yet"
    );
    let answered = cluster.client_bytes[follower];
    cluster.send_create(follower, 3, "/queue/x", vec![]);
    cluster.pump();
    assert_eq!(
        cluster.client_bytes[follower], answered,
        "held at the leader"
    );
    cluster.release_persists();
    for _ in 0..3 {
        cluster.tick();
    }
    assert!(
        cluster.client_bytes[follower] > answered,
        "the follower answered the call"
    );
    for e in &cluster.engines {
        assert!(e.tree().node("/made").is_some(), "the extension ran");
        assert!(e.tree().node("/queue/x").is_none(), "not as a plain create");
    }
}

/// A follower whose disk is slow has not applied a registration change its
/// leader has: its client's next call is routed by the old registrations.
/// The follower's client makes `setup`; the change comes from a client of
/// the leader (a call after the client's own change would wait for it).
/// Returns (leader, follower), the change committed and applied everywhere
/// but there.
fn follower_behind_on(
    cluster: &mut Cluster,
    change: &Request,
    setup: &[Request],
) -> (usize, usize) {
    let leader = cluster.elect();
    let follower = (leader + 1) % 3;
    cluster.connect_client(follower);
    for (xid, request) in setup.iter().enumerate() {
        cluster.send(follower, 1 + xid as i32, request);
        cluster.pump();
    }
    cluster.slow_disks = vec![follower];
    cluster.connect_client(leader);
    cluster.send(leader, 1, change);
    cluster.pump();
    (leader, follower)
}

/// The follower's client creates /queue/x: the leader refuses it, so the
/// follower drops the connection. Then the follower's disk catches up.
fn call_the_extension_and_settle(cluster: &mut Cluster, follower: usize) {
    cluster.send_create(follower, 51, "/queue/x", vec![]);
    cluster.pump();
    assert!(
        cluster.client_closed[follower],
        "the follower dropped the connection"
    );
    cluster.release_persists();
    for _ in 0..3 {
        cluster.tick();
    }
}

const MAKER: &[u8] = br#"{"kind": "node", "path": "/queue", "source": "return { create = function(req, zk) zk.create('/made', 'x') return { path = '/made' } end }"}"#;

#[test]
fn a_plain_write_routed_by_a_follower_behind_a_registration_is_refused_not_run() {
    // Proves the leader refuses a forward its origin routed as a plain
    // write when the leader routes it to an extension registered since:
    // the follower's session waits for the transaction and would never
    // have matched the extension's answer (the call hung). The connection
    // drops instead, before the extension runs, and the client retries.
    let mut cluster = Cluster::new();
    let (leader, follower) = follower_behind_on(
        &mut cluster,
        &wire::create("/extensions/q", MAKER.to_vec()),
        &[wire::create("/extensions", vec![])],
    );
    assert!(cluster.engines[leader]
        .tree()
        .node("/extensions/q")
        .is_some());
    assert!(cluster.engines[follower]
        .tree()
        .node("/extensions/q")
        .is_none());
    call_the_extension_and_settle(&mut cluster, follower);
    for e in &cluster.engines {
        assert!(
            e.tree().node("/made").is_none(),
            "the extension did not run"
        );
        assert!(e.tree().node("/extensions/q").is_some());
    }
}

#[test]
fn an_extension_call_routed_by_a_follower_behind_an_unregistration_is_refused_not_run() {
    // Proves the leader refuses a forward its origin routed to an
    // extension the leader has unregistered since: run as a plain write,
    // its transaction would never have matched the follower's wait for an
    // extension's answer (the call hung).
    let mut cluster = Cluster::new();
    let (leader, follower) = follower_behind_on(
        &mut cluster,
        &Request::Delete(stoa_proto::records::DeleteRequest {
            path: "/extensions/q".into(),
            version: -1,
        }),
        &[
            wire::create("/extensions", vec![]),
            wire::create("/extensions/q", MAKER.to_vec()),
        ],
    );
    assert!(cluster.engines[leader]
        .tree()
        .node("/extensions/q")
        .is_none());
    assert!(cluster.engines[follower]
        .tree()
        .node("/extensions/q")
        .is_some());
    call_the_extension_and_settle(&mut cluster, follower);
    for e in &cluster.engines {
        assert!(
            e.tree().node("/queue/x").is_none(),
            "not run as a plain create"
        );
        assert!(e.tree().node("/made").is_none());
    }
}

/// A snapshot (a tree's bytes) holding `/restored` created at `zxid`.
fn snapshot_with_node_at(zxid: i64) -> Vec<u8> {
    let mut tree = stoa_tree::DataTree::new();
    tree.apply(&stoa_tree::Txn {
        header: stoa_tree::TxnHeader {
            session_id: 0,
            cxid: 0,
            zxid,
            time_ms: T0_MS,
        },
        op: stoa_tree::TxnOp::Create(stoa_tree::CreateTxn {
            path: "/restored".into(),
            data: Some(b"from the snapshot".to_vec()),
            acl: vec![stoa_proto::records::Acl::open_unsafe()],
            ephemeral_owner: 0,
            parent_cversion: 1,
        }),
    });
    let mut bytes = Vec::new();
    stoa_tree::write_snapshot(&tree, &mut bytes).unwrap();
    bytes
}

/// Ticks until engine `i` has an AdminServer answer; returns them.
fn admin_answers(cluster: &mut Cluster, i: usize) -> Vec<(u64, crate::admin::AdminAnswer)> {
    for _ in 0..ROUNDS_MAX {
        let answers = cluster.engines[i].take_admin_answers();
        if !answers.is_empty() {
            return answers;
        }
        cluster.tick();
    }
    panic!("no answer from engine {i}");
}

#[test]
fn a_restore_through_a_follower_applies_on_every_member_above_the_snapshots_epoch() {
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    let follower = (leader + 1) % 3;
    cluster.connect_client(leader);
    cluster.send_create(leader, 1, "/before", vec![]);
    cluster.tick();
    assert!(cluster.engines[follower].tree().node("/before").is_some());
    // A snapshot from a later epoch than this ensemble's.
    let snapshot_zxid = 0x9_0000_0005;
    let snapshot = snapshot_with_node_at(snapshot_zxid);
    let refused = cluster.engines[follower].admin_restore(7, snapshot_zxid, vec![snapshot]);
    assert!(refused.is_none(), "{refused:?}");
    cluster.pump();
    let answers = admin_answers(&mut cluster, follower);
    assert_eq!(answers.len(), 1);
    let (token, answer) = &answers[0];
    assert_eq!((*token, answer.status), (7, 200), "{}", answer.body);
    assert!(answer.body.contains("\"last_zxid\""), "{}", answer.body);
    for _ in 0..5 {
        cluster.tick();
    }
    let digest = cluster.engines[leader].tree().digest();
    for engine in &cluster.engines {
        let tree = engine.tree();
        assert!(
            tree.node("/before").is_none(),
            "the restore replaced the tree"
        );
        assert_eq!(tree.node("/restored").unwrap().data(), b"from the snapshot");
        assert!(tree.last_zxid() > snapshot_zxid, "zxids never go back");
        assert_eq!(tree.digest(), digest, "every member restored alike");
    }
    // Writes go on above the snapshot's zxids (the client reconnects).
    let leader = cluster.elect();
    assert!(
        cluster.client_closed[leader],
        "clients reconnect after a restore"
    );
    cluster.engines[leader].handle(Input::Closed { conn: 1 });
    cluster.connect_client(leader);
    cluster.send_create(leader, 1, "/after", vec![]);
    cluster.tick();
    let after = cluster.engines[follower]
        .tree()
        .node("/after")
        .expect("replicated");
    assert!(after.stat().czxid > snapshot_zxid);
    assert_eq!(cluster.engines[leader].stats.restores, 1);
}

#[test]
fn a_restore_is_a_barrier_and_one_at_a_time() {
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    cluster.connect_client(leader);
    // A snapshot of this epoch: no new epoch needed.
    let snapshot = snapshot_with_node_at(1);
    assert!(cluster.engines[leader]
        .admin_restore(1, 1, vec![snapshot.clone()])
        .is_none());
    let second = cluster.engines[leader].admin_restore(2, 1, vec![snapshot]);
    assert_eq!(second.map(|a| a.status), Some(429), "one restore at a time");
    // A write sent while the restore is under way waits, and goes with
    // its connection when the restore closes every client's.
    cluster.send_create(leader, 2, "/during", vec![]);
    let answers = admin_answers(&mut cluster, leader);
    assert_eq!(answers.len(), 1);
    assert_eq!((answers[0].0, answers[0].1.status), (1, 200));
    for _ in 0..5 {
        cluster.tick();
    }
    assert!(cluster.client_closed[leader]);
    for engine in &cluster.engines {
        let tree = engine.tree();
        assert!(tree.node("/restored").is_some());
        assert!(
            tree.node("/during").is_none(),
            "held, then dropped unapplied"
        );
    }
}

#[test]
fn a_restore_larger_than_one_raft_entry_is_refused_before_anything_happens() {
    let mut cluster = Cluster::new();
    let leader = cluster.elect();
    let too_big = vec![0u8; super::admin_snapshots::RESTORE_BYTES_MAX + 1];
    let refused = cluster.engines[leader].admin_restore(1, 1, vec![too_big]);
    assert_eq!(refused.map(|a| a.status), Some(413));
    cluster.tick();
    assert!(cluster.engines[leader].take_admin_answers().is_empty());
}
