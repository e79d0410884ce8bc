//! Scripted scenarios: each file in `crates/core/testdata/scenarios/` is a
//! script of steps with the trace the clients saw written beneath each
//! step, as etcd's raft writes its `testdata/` (datadriven). The servers run
//! the production node driver over `SimLog` and the in-memory snapshot
//! store; the network delivers in order. A behaviour change shows as a
//! changed trace; when it is meant, `STOA_SCENARIO_REWRITE=1 cargo test -p
//! stoa-core scenario` rewrites the traces, and the diff is reviewed like
//! code.
//!
//! A step is one or more command lines, then `----`, then the expected
//! output, then a blank line; `#` starts a comment line. After its commands
//! a step lets the world settle (every WAL synced, every message delivered)
//! unless a server is held, and prints what each client received, in the
//! order clients are named. Commands:
//!
//! - `standalone` | `ensemble N`: start servers 1..=N (a leader elected);
//! - `connect C S [TIMEOUT_MS]`: client C connects to server S (resuming
//!   its session), asking for a session timeout (default 30000);
//! - `C create PATH [DATA] [ephemeral] [sequential]`, `C set PATH DATA`,
//!   `C get PATH [watch]`, `C exists PATH [watch]`, `C children PATH
//!   [watch]`, `C delete PATH`, `C sync PATH`, `C close` (closeSession),
//!   `C drop` (the connection breaks);
//! - `hold S` / `release S`: server S's WAL writer stops / goes on syncing;
//! - `tick N`: N engine ticks of `TICK_MS` on every server, settling after
//!   each;
//! - `crash S` / `restart S`: the machine stops (unsynced writes are lost,
//!   `SimLog` may keep a torn prefix) / starts from its disk;
//! - `isolate S` / `heal`: S is cut off from the other servers / rejoined;
//! - `pause S` / `resume S`: S stops as under SIGSTOP (no ticks; messages
//!   to it wait) / wakes: its clock jumps and it ticks before it reads them;
//! - `leader`: prints which server leads; `members`: the participants and
//!   observers each running server has applied;
//! - `C auth super`: digest authentication as the super user (reconfig
//!   needs it); `C reconfig add N participant|observer`, `C reconfig
//!   remove N`: a membership change of server N.
//!
//! Session ids and zxids print as `s1`, `s2`.. in order of appearance and
//! as hex, so traces read the same whatever the ids' bits are.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use stoa_proto::codes::ErrorCode;
use stoa_proto::jute::{Reader, Record};
use stoa_proto::opcode::{CreateMode, EventType};
use stoa_proto::records::{
    Acl, AuthPacket, CreateRequest, CreateResponse, DeleteRequest, ExistsRequest,
    GetChildrenRequest, GetChildrenResponse, GetDataResponse, ReconfigRequest, SetDataResponse,
    Stat, SyncRequest,
};
use stoa_proto::request::Request;

use super::sim_world::machine::{SimMachine, SimNode};
use super::sim_world::network::{input_of, SimNetwork};
use super::sim_world::wire::{self, ServerFrame, WireClient};
use super::tests::config;
use super::Input;

const T0_MS: i64 = 1_700_000_000_000;
const TICK_MS: i64 = 50;
/// Rounds of syncing and delivering before a step must be quiet.
const SETTLE_ROUNDS_MAX: usize = 1_000;
/// Ticks an ensemble may take to elect its first leader.
const ELECTION_TICKS_MAX: usize = 200;
/// The super user's digest credentials (`C auth super`).
const SUPER_CREDENTIALS: &str = "super:scenario";
const SCENARIO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/scenarios");

struct Server {
    machine: SimMachine,
    voters: u64,
}

struct Client {
    /// (server, connection) while connected.
    conn: Option<(u64, u64)>,
    wire: WireClient,
    /// What each request in flight was, to decode and print its reply.
    asked: HashMap<i32, (String, String)>,
}

struct World {
    now_ms: i64,
    servers: BTreeMap<u64, Server>,
    clients: BTreeMap<String, Client>,
    network: SimNetwork,
    held: BTreeSet<u64>,
    /// Servers stopped as by SIGSTOP: no ticks, nothing delivered to them.
    paused: BTreeSet<u64>,
    next_conn: u64,
    /// Session ids as printed: s1, s2, ... in order of appearance.
    session_names: HashMap<i64, String>,
    out: String,
}

fn server_config(id: u64, voters: u64) -> super::EngineConfig {
    let mut cfg = config();
    cfg.server_id = id;
    cfg.voters = (1..=voters).collect();
    // Server 1 times out first, so it leads after the start.
    cfg.fixed_election_ticks = (voters > 1).then_some((10 + 4 * (id - 1)) as usize);
    cfg.super_digest = Some(stoa_tree::digest_id(SUPER_CREDENTIALS).id);
    cfg
}

impl World {
    fn new() -> World {
        World {
            now_ms: T0_MS,
            servers: BTreeMap::new(),
            clients: BTreeMap::new(),
            network: SimNetwork::default(),
            held: BTreeSet::new(),
            paused: BTreeSet::new(),
            next_conn: 0,
            session_names: HashMap::new(),
            out: String::new(),
        }
    }

    fn start(&mut self, voters: u64) {
        for id in 1..=voters {
            self.servers.insert(
                id,
                Server {
                    machine: SimMachine::new(),
                    voters,
                },
            );
            self.restart(id);
        }
        for _ in 0..ELECTION_TICKS_MAX {
            self.settle();
            if self.leader().is_some() {
                return;
            }
            self.tick();
        }
        panic!("no leader elected");
    }

    fn leader(&self) -> Option<u64> {
        // A paused leader still believes it leads; the others moved on.
        self.servers
            .iter()
            .filter(|(id, _)| !self.paused.contains(id))
            .find(|(_, s)| s.machine.engine().is_some_and(|e| e.is_leader()))
            .map(|(&id, _)| id)
    }

    fn restart(&mut self, id: u64) {
        let server = self.servers.get_mut(&id).expect("a known server");
        let config = server_config(id, server.voters);
        server
            .machine
            .boot(config, self.now_ms)
            .unwrap_or_else(|e| panic!("server {id} cannot start: {e}"));
        self.collect(id);
    }

    fn crash(&mut self, id: u64) {
        let server = self.servers.get_mut(&id).expect("a known server");
        // Seeded by the server, so the same script keeps the same tail.
        if server.machine.crash(id).is_none() {
            return;
        }
        self.network.drop_server(id);
        // Its kernel closes its connections: the others read their end.
        let others: Vec<u64> = self.servers.keys().copied().filter(|&o| o != id).collect();
        for other in others {
            if self.network.cut(id, other) {
                continue;
            }
            if let Some(node) = self.node_mut(other) {
                node.engine_mut().handle(Input::PeerLost { from: id });
                self.collect(other);
            }
        }
        let dropped: Vec<String> = self
            .clients
            .iter()
            .filter(|(_, c)| c.conn.is_some_and(|(s, _)| s == id))
            .map(|(name, _)| name.clone())
            .collect();
        for name in dropped {
            let _ = writeln!(self.out, "{name} connection lost (server {id} stopped)");
            self.disconnect(&name);
        }
    }

    fn node_mut(&mut self, id: u64) -> Option<&mut SimNode> {
        self.servers.get_mut(&id)?.machine.node_mut()
    }

    /// Carries out server `id`'s output through its node driver.
    fn collect(&mut self, id: u64) {
        let Some(server) = self.servers.get_mut(&id) else {
            return;
        };
        let out = server
            .machine
            .flush()
            .unwrap_or_else(|reason| panic!("server {id} fatal: {reason}"));
        for (to, message) in out.messages {
            let up = self
                .servers
                .get(&to)
                .is_some_and(|s| s.machine.node().is_some());
            self.network.post(id, to, message, up);
        }
        for (conn, bytes) in out.sends {
            if let Some(c) = self.client_on(id, conn) {
                self.clients
                    .get_mut(&c)
                    .expect("listed")
                    .wire
                    .inbox
                    .extend(bytes);
            }
        }
        for conn in out.closes {
            if let Some(c) = self.client_on(id, conn) {
                self.receive(&c);
                let _ = writeln!(self.out, "{c} connection closed by server {id}");
                self.disconnect(&c);
            }
        }
    }

    fn client_on(&self, server: u64, conn: u64) -> Option<String> {
        self.clients
            .iter()
            .find(|(_, c)| c.conn == Some((server, conn)))
            .map(|(name, _)| name.clone())
    }

    fn disconnect(&mut self, name: &str) {
        if let Some(c) = self.clients.get_mut(name) {
            c.conn = None;
            c.wire.handshaken = false;
            c.asked.clear();
            c.wire.inbox.clear();
        }
    }

    /// Syncs every WAL not held and delivers every message, until quiet.
    fn settle(&mut self) {
        for _ in 0..SETTLE_ROUNDS_MAX {
            let mut busy = false;
            let ids: Vec<u64> = self.servers.keys().copied().collect();
            for &id in &ids {
                if self.held.contains(&id) || self.paused.contains(&id) {
                    continue;
                }
                let Some(node) = self.node_mut(id) else {
                    continue;
                };
                let queued = node.log().queued();
                if let Some(result) = node.log_mut().write_group(queued) {
                    node.on_durable(result.expect("no fsync failures in scenarios"));
                    busy = true;
                }
                for done in node.snapshots_mut().run_queued() {
                    node.on_snapshot_done(done)
                        .expect("the WAL takes the marker");
                    busy = true;
                }
                self.collect(id);
            }
            for (from, to) in self.network.busy_links(None) {
                if self.paused.contains(&to) {
                    continue; // waits in the link until the server wakes
                }
                while let Some(message) = self.network.take((from, to)) {
                    busy = true;
                    if let Some(node) = self.node_mut(to) {
                        node.engine_mut().handle(input_of(from, message));
                    }
                }
                self.collect(to);
            }
            if !busy {
                return;
            }
        }
        panic!("the world does not settle");
    }

    fn tick(&mut self) {
        self.now_ms += TICK_MS;
        let ids: Vec<u64> = self.servers.keys().copied().collect();
        for id in ids {
            if !self.paused.contains(&id) {
                self.tick_server(id);
            }
        }
    }

    fn tick_server(&mut self, id: u64) {
        let now = self.now_ms;
        if let Some(node) = self.node_mut(id) {
            node.engine_mut().set_time(now);
            node.engine_mut().tick();
        }
        self.collect(id);
    }

    fn connect(&mut self, name: &str, server: u64, timeout_ms: i32) {
        assert!(
            !self.paused.contains(&server),
            "connect to paused server {server}"
        );
        self.next_conn += 1;
        let conn = self.next_conn;
        let client = self.clients.entry(name.to_string()).or_insert(Client {
            conn: None,
            wire: WireClient::new(),
            asked: HashMap::new(),
        });
        client.conn = Some((server, conn));
        let bytes = client.wire.connect_bytes(timeout_ms);
        let node = self.node_mut(server).expect("connect to a running server");
        wire::open(node.engine_mut(), conn, bytes);
        self.collect(server);
    }

    fn send(&mut self, name: &str, op: &str, path: &str, request: Request) {
        let client = self.clients.get_mut(name).expect("a connected client");
        let (server, conn) = client.conn.expect("the client is connected");
        assert!(
            !self.paused.contains(&server),
            "{name} asks paused server {server}"
        );
        let (xid, bytes) = client.wire.request_bytes(&request);
        client.asked.insert(xid, (op.to_string(), path.to_string()));
        let node = self.node_mut(server).expect("the server runs");
        node.engine_mut().handle(Input::Frames { conn, bytes });
        self.collect(server);
    }

    fn session_name(&mut self, id: i64) -> String {
        let next = self.session_names.len() + 1;
        self.session_names
            .entry(id)
            .or_insert_with(|| format!("s{next}"))
            .clone()
    }

    /// Prints what client `name` received since the last time.
    fn receive(&mut self, name: &str) {
        let Some(client) = self.clients.get_mut(name) else {
            return;
        };
        let mut lines = Vec::new();
        for frame in client.wire.take_frames() {
            let client = self.clients.get_mut(name).expect("listed");
            match frame {
                ServerFrame::Connected(r) => {
                    let resumed = client
                        .wire
                        .session
                        .as_ref()
                        .is_some_and(|(id, _)| *id == r.session_id);
                    client.wire.adopt(&r);
                    if r.session_id == 0 {
                        lines.push(format!("{name} session expired"));
                        continue;
                    }
                    let session = self.session_name(r.session_id);
                    let verb = if resumed { "resumed" } else { "connected" };
                    lines.push(format!("{name} {verb} {session} timeout={}", r.time_out));
                }
                ServerFrame::Event(_, event) => {
                    let kind = EventType::from_i32(event.kind).expect("known event type");
                    lines.push(format!("{name} event {kind:?} {}", event.path));
                }
                ServerFrame::Reply(header, body) => {
                    let Some((op, path)) = client.asked.remove(&header.xid) else {
                        continue; // pings
                    };
                    let err = ErrorCode::from_i32(header.err).expect("known error code");
                    let target = if path.is_empty() {
                        op.clone()
                    } else {
                        format!("{op} {path}")
                    };
                    let mut line = format!("{name} #{} {target} -> {err:?}", header.xid);
                    if err == ErrorCode::Ok {
                        line.push_str(&describe(&op, &body));
                    }
                    let _ = write!(line, " zxid={:#x}", header.zxid);
                    lines.push(line);
                }
            }
        }
        for line in lines {
            let _ = writeln!(self.out, "{line}");
        }
    }

    fn run(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let server = |i: usize| -> u64 {
            words
                .get(i)
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| panic!("{line}: a server number expected"))
        };
        match words.as_slice() {
            ["standalone"] => self.start(1),
            ["ensemble", n] => self.start(n.parse().expect("a size")),
            ["connect", c, _] => self.connect(c, server(2), 30_000),
            ["connect", c, _, timeout] => {
                self.connect(c, server(2), timeout.parse().expect("a timeout in ms"))
            }
            ["pause", _] => {
                self.paused.insert(server(1));
            }
            ["resume", _] => {
                // A woken process sees its clock jump and runs its timers
                // before it reads what its peers sent meanwhile.
                let id = server(1);
                self.paused.remove(&id);
                self.tick_server(id);
            }
            ["hold", _] => {
                self.held.insert(server(1));
            }
            ["release", _] => {
                self.held.remove(&server(1));
            }
            ["tick", n] => {
                for _ in 0..n.parse::<usize>().expect("a count") {
                    self.tick();
                    self.settle();
                }
            }
            ["crash", _] => self.crash(server(1)),
            ["restart", _] => self.restart(server(1)),
            ["isolate", _] => self.network.isolate(server(1)),
            ["heal"] => self.network.heal(),
            ["members"] => {
                let lines: Vec<String> = self
                    .servers
                    .iter()
                    .filter_map(|(id, s)| Some((id, s.machine.engine()?.membership())))
                    .map(|(id, m)| {
                        format!(
                            "server {id}: participants {:?} observers {:?}",
                            m.voters(),
                            m.learners()
                        )
                    })
                    .collect();
                for line in lines {
                    let _ = writeln!(self.out, "{line}");
                }
            }
            [c, "auth", "super"] => {
                let auth = Request::Auth(AuthPacket {
                    kind: 0,
                    scheme: "digest".into(),
                    auth: SUPER_CREDENTIALS.as_bytes().to_vec(),
                });
                self.send(c, "auth", "super", auth);
            }
            [c, "reconfig", change, n, role @ ..] => {
                let n: u64 = n.parse().expect("a server number");
                let (joining, leaving) = match (*change, role) {
                    ("add", [role]) => (
                        format!("server.{n}=127.0.0.1:2888:3888:{role}"),
                        String::new(),
                    ),
                    ("remove", []) => (String::new(), n.to_string()),
                    _ => panic!("unknown command: {line}"),
                };
                let reconfig = Request::Reconfig(ReconfigRequest {
                    joining_servers: joining,
                    leaving_servers: leaving,
                    new_members: String::new(),
                    cur_config_id: -1,
                });
                self.send(c, "reconfig", &format!("{change} {n}"), reconfig);
            }
            ["leader"] => {
                let leader = self
                    .leader()
                    .map_or("none".into(), |id| format!("server {id}"));
                let _ = writeln!(self.out, "leader: {leader}");
            }
            [c, "drop"] => {
                if let Some((server, conn)) = self.clients.get(*c).and_then(|c| c.conn) {
                    if let Some(node) = self.node_mut(server) {
                        node.engine_mut().handle(Input::Closed { conn });
                    }
                    self.disconnect(c);
                }
            }
            [c, "close"] => self.send(c, "close", "", Request::CloseSession),
            [c, op, path, rest @ ..] => self.client_request(c, op, path, rest, line),
            _ => panic!("unknown command: {line}"),
        }
    }

    fn client_request(&mut self, c: &str, op: &str, path: &str, rest: &[&str], line: &str) {
        let watch = rest.contains(&"watch");
        let request = match op {
            "create" => {
                let ephemeral = rest.contains(&"ephemeral");
                let sequential = rest.contains(&"sequential");
                let mode = match (ephemeral, sequential) {
                    (false, false) => CreateMode::Persistent,
                    (false, true) => CreateMode::PersistentSequential,
                    (true, false) => CreateMode::Ephemeral,
                    (true, true) => CreateMode::EphemeralSequential,
                };
                let data = rest
                    .first()
                    .filter(|w| !["ephemeral", "sequential"].contains(w))
                    .map_or(Vec::new(), |d| d.as_bytes().to_vec());
                Request::Create(CreateRequest {
                    path: path.into(),
                    data: Some(data),
                    acl: vec![Acl::open_unsafe()],
                    flags: mode.as_i32(),
                })
            }
            "set" => wire::set(
                path,
                rest.first().map_or(Vec::new(), |d| d.as_bytes().to_vec()),
            ),
            "get" => wire::get(path, watch),
            "exists" => Request::Exists(ExistsRequest {
                path: path.into(),
                watch,
            }),
            "children" => Request::GetChildren(GetChildrenRequest {
                path: path.into(),
                watch,
            }),
            "delete" => Request::Delete(DeleteRequest {
                path: path.into(),
                version: -1,
            }),
            "sync" => Request::Sync(SyncRequest { path: path.into() }),
            _ => panic!("unknown command: {line}"),
        };
        self.send(c, op, path, request);
    }

    /// Runs one step's commands, settles unless a server is held, and
    /// returns what the clients saw.
    fn step(&mut self, commands: &[&str]) -> String {
        for line in commands {
            self.run(line);
        }
        if self.held.is_empty() {
            self.settle();
        }
        let names: Vec<String> = self.clients.keys().cloned().collect();
        for name in names {
            self.receive(&name);
        }
        std::mem::take(&mut self.out)
    }
}

/// A successful reply's body, briefly.
fn describe(op: &str, body: &[u8]) -> String {
    let mut r = Reader::new(body);
    let stat = |s: &Stat| format!(" version={} cversion={}", s.version, s.cversion);
    match op {
        "create" => {
            CreateResponse::decode(&mut r).map_or(String::new(), |c| format!(" {}", c.path))
        }
        "set" => SetDataResponse::decode(&mut r).map_or(String::new(), |s| stat(&s.stat)),
        "get" => GetDataResponse::decode(&mut r).map_or(String::new(), |g| {
            let data = g.data.as_deref().map_or("null".to_owned(), |d| {
                format!("{:?}", String::from_utf8_lossy(d))
            });
            format!(" data={data}{}", stat(&g.stat))
        }),
        "exists" => Stat::decode(&mut r).map_or(String::new(), |s| stat(&s)),
        "children" => GetChildrenResponse::decode(&mut r)
            .map_or(String::new(), |g| format!(" {:?}", g.children)),
        _ => String::new(),
    }
}

/// Runs one script; returns it with the traces the run produced.
fn run_script(text: &str) -> String {
    let mut world = World::new();
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let mut commands = vec![line];
        for next in lines.by_ref() {
            if next == "----" {
                break;
            }
            commands.push(next);
        }
        // Skip the old trace, up to the blank line that ends the step.
        for next in lines.by_ref() {
            if next.trim().is_empty() {
                break;
            }
        }
        let trace = world.step(&commands);
        for command in &commands {
            out.push_str(command);
            out.push('\n');
        }
        out.push_str("----\n");
        out.push_str(&trace);
        out.push('\n');
    }
    out
}

#[test]
fn scenarios_replay_their_traces() {
    let rewrite = std::env::var("STOA_SCENARIO_REWRITE").is_ok();
    let mut paths: Vec<_> = std::fs::read_dir(SCENARIO_DIR)
        .expect("the scenario directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no scenarios in {SCENARIO_DIR}");
    let mut changed = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("a scenario");
        let replayed = run_script(&text);
        if replayed != text {
            if rewrite {
                std::fs::write(&path, &replayed).expect("rewrite the scenario");
            } else {
                changed.push(format!(
                    "{}:\n{}",
                    path.display(),
                    first_difference(&text, &replayed)
                ));
            }
        }
    }
    assert!(
        changed.is_empty(),
        "traces changed (STOA_SCENARIO_REWRITE=1 rewrites them if that is meant):\n{}",
        changed.join("\n")
    );
}

/// The first line that differs, with the line before it.
fn first_difference(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let at = e
        .iter()
        .zip(&a)
        .position(|(x, y)| x != y)
        .unwrap_or(e.len().min(a.len()));
    format!(
        "  line {}: expected {:?}\n  line {}: got      {:?}",
        at + 1,
        e.get(at).copied().unwrap_or("<end>"),
        at + 1,
        a.get(at).copied().unwrap_or("<end>")
    )
}
