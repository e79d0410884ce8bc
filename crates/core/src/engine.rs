//! The partition engine: one partition's whole pipeline as a pure state
//! machine. The owning thread feeds it time and input (connection frames,
//! WAL completions, ticks) and drains its output (bytes per connection,
//! connections to close, records to make durable). No sockets, files or
//! clocks in here, so a simulator can drive it deterministically.
//!
//! Write path: request → prep (validate against tree + pending changes) →
//! raft proposal → WAL (fsync) → commit → apply → watches → replies. A
//! session's replies leave in request order; a read waits for the session's
//! earlier writes (ZooKeeper's FIFO client order).

use std::net::SocketAddr;

use raft::eraftpb::Entry;
use raft::RawNode;
use stoa_proto::codes::ErrorCode;
use stoa_proto::frame::{decode_connect_request, FrameDecoder, RequestFrameError};
use stoa_proto::response::Response;
use stoa_tree::{DataTree, Txn, TxnOp};

use crate::client_frame::ClientFrame;
use crate::ensemble::Role;
use crate::raft_log::RaftLog;
use crate::session::{Pending, SessionId};
use crate::stats::Stats;
use crate::watch::ConnId;

mod admin_commands;
mod admin_snapshots;
mod admission;
mod apply;
mod away;
mod away_apply;
mod balancer;
mod by_partition;
mod catch_up;
mod chains;
mod commit;
mod connect;
pub(crate) mod cores;
pub use cores::PartitionThreads;
mod core_read;
mod ensemble_view;
mod extension_host;
mod extensions;
mod fast_sessions;
pub mod forward;
mod gate;
mod group_moves;
mod groups;
mod handoff;
mod invariants;
mod leader_loss;
mod lent_apply;
mod lent_prep;
mod lent_reads;
mod lent_ready;
pub use lent_apply::{InlineWorkers, PartitionWorkers};
mod monitor;
mod ownership;
mod partition_core;
mod placement_state;
mod reconfig;
mod replication;
mod request;
mod routed_reads;
mod routing;
mod sasl_auth;
mod server_snapshots;
mod session_extensions;

/// Raft ticks per election timeout (a lone voter elects itself at once).
const RAFT_ELECTION_TICKS: usize = 10;
const RAFT_HEARTBEAT_TICKS: usize = 1;
/// Bytes of entries raft may put into one append message.
const RAFT_MAX_MSG_BYTES: u64 = 4 << 20;
/// Requests a connection may send after its handshake and before its
/// session is established (held, then served in order); beyond either
/// bound the connection is closed.
const EARLY_FRAMES_MAX: usize = 4096;
const EARLY_BYTES_MAX: usize = 4 << 20;
/// Ticks a new connection's handshake waits for a leader during an
/// election: four election timeouts, enough for a split vote and a retry.
const LEADER_WAIT_TICKS: usize = 4 * RAFT_ELECTION_TICKS;

/// A peer heard from within this long counts as connected in `mntr`
/// (it answers every heartbeat, sent each tick).
const PEER_LIVE_MS: i64 = 1_000;

/// Raft's randomized election timeout lies in `min..max` ticks. A
/// one-tick range (the simulator's) leaves raft's random pick no choice.
fn election_timeout_bounds(config: &EngineConfig) -> (usize, usize) {
    match config.fixed_election_ticks {
        Some(ticks) => (ticks, ticks + 1),
        None => (RAFT_ELECTION_TICKS, 2 * RAFT_ELECTION_TICKS),
    }
}

/// One partition's raft group, restored from what its partition recovered.
fn start_raft_group(
    config: &EngineConfig,
    membership: &crate::membership::Membership,
    (snapshot_index, snapshot_term): (u64, u64),
    hard_state: raft::eraftpb::HardState,
    entries: Vec<Entry>,
) -> Result<RawNode<RaftLog>, String> {
    let mut log = RaftLog::new(membership.voters(), membership.learners());
    let snapshot = raft::eraftpb::SnapshotMetadata {
        index: snapshot_index,
        term: snapshot_term,
        ..Default::default()
    };
    log.restore(snapshot, hard_state, entries);
    let (min_election_tick, max_election_tick) = election_timeout_bounds(config);
    let raft_config = raft::Config {
        id: config.server_id,
        election_tick: RAFT_ELECTION_TICKS,
        heartbeat_tick: RAFT_HEARTBEAT_TICKS,
        applied: snapshot_index,
        max_size_per_msg: RAFT_MAX_MSG_BYTES,
        max_inflight_msgs: 256,
        // Proposals (and commit advances) made before raft's messages are
        // taken join the append already queued for a peer instead of
        // each sending one of its own.
        batch_append: true,
        pre_vote: true,
        check_quorum: true,
        min_election_tick,
        max_election_tick,
        ..Default::default()
    };
    raft_config
        .validate()
        .map_err(|e| format!("raft config: {e}"))?;
    let logger = slog::Logger::root(slog::Discard, slog::o!());
    let mut raft = RawNode::new(&raft_config, log, &logger).map_err(|e| format!("raft: {e}"))?;
    // A lone voter elects itself at once; in an ensemble the randomized
    // election timer decides.
    if config.standalone() {
        raft.campaign().map_err(|e| format!("raft campaign: {e}"))?;
    }
    Ok(raft)
}

/// The one order of a server with several partitions, from what they
/// recovered: the cut of their whole server snapshot. Snapshots of one
/// partition each (written before whole server snapshots) are a cut only
/// while every transaction is on partition 0, as it was then.
fn start_order(recovered: &[Recovered]) -> Result<crate::apply_order::ApplyOrder<Entry>, String> {
    let cut_zxids: Vec<Option<i64>> = recovered.iter().map(|p| p.cut_zxid).collect();
    assert!(
        cut_zxids.windows(2).all(|pair| pair[0] == pair[1]),
        "partitions recovered from different cuts: {cut_zxids:?}"
    );
    let zxid = match cut_zxids[0] {
        Some(zxid) => zxid,
        None => {
            if let Some((partition, _)) = (recovered.iter().enumerate().skip(1))
                .find(|(_, partition)| partition.tree.last_zxid() != 0)
            {
                return Err(format!(
                    "partition {partition}'s own snapshot holds transactions: it is not a cut of \
                     the whole server"
                ));
            }
            recovered[0].tree.last_zxid()
        }
    };
    let cut = crate::apply_order::Cut {
        zxid,
        indices: recovered.iter().map(|p| p.snapshot_index).collect(),
    };
    Ok(crate::apply_order::ApplyOrder::recover(
        recovered.len(),
        &cut,
    ))
}

/// The placement of the configured groups.
fn start_placement(config: &EngineConfig) -> Result<crate::placement::Placement, String> {
    crate::placement::Placement::new(
        config.partitions,
        config.partition_auto,
        &config.partition_groups,
    )
    .map_err(|e| format!("partition.groups: {e}"))
}

/// Settings the engine needs, derived from the server config.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub server_id: u64,
    /// Partitions (raft groups) this server runs, each with its own tree,
    /// raft group and zxid counter (docs/partitions.md). Every member of an
    /// ensemble runs the same number.
    pub partitions: u32,
    /// The roots of the configured groups (`crate::placement`), spread over
    /// partitions 1..; the same on every member.
    pub partition_groups: Vec<String>,
    /// `partition.balanceIntervalMs`: the load balancer's window; None
    /// leaves groups where they are (`engine/balancer.rs`).
    pub balance_interval_ms: Option<u64>,
    /// `partition.auto`: a new top-level node becomes a group of its own,
    /// on the partition with the fewest groups (`engine/group_moves.rs`).
    pub partition_auto: bool,
    pub min_session_timeout_ms: u32,
    pub max_session_timeout_ms: u32,
    pub ttl_enabled: bool,
    pub container_check_interval_ms: u64,
    /// `super:base64(sha1)`; a session authenticated with it bypasses ACLs.
    pub super_digest: Option<String>,
    pub snap_count: u64,
    pub max_frame_bytes: usize,
    /// Raft voters (participants) and learners (observers); standalone is
    /// `[server_id]` and none.
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// The `server.N` lines (addresses of the voters and learners above);
    /// a member missing here gets a placeholder address (simulations).
    pub members: Vec<crate::ensemble::Member>,
    /// `reconfigEnabled`: the `reconfig` operation is served.
    pub reconfig_enabled: bool,
    /// `readonlymode.enabled`: cut off from the quorum, serve reads to
    /// clients that asked for read-only sessions.
    pub read_only_enabled: bool,
    /// `None`: ZooKeeper's default (srvr only); `*` allows all.
    pub four_letter_whitelist: Option<Vec<String>>,
    /// Pre-rendered `conf` answer (key=value lines).
    pub conf_text: String,
    pub host_name: String,
    pub working_dir: String,
    /// Fixes raft's election timeout to this many ticks instead of raft's
    /// own random pick, which a deterministic simulation cannot replay.
    pub fixed_election_ticks: Option<usize>,
    /// The highest zxid counter of an epoch (None: ZooKeeper's 32 bits);
    /// simulations lower it to roll epochs often.
    pub zxid_counter_limit: Option<u32>,
    /// The JAAS `Server` section's DigestLoginModule users (name,
    /// password) for SASL DIGEST-MD5; none: SASL is not served.
    pub sasl_users: Vec<(String, String)>,
    /// The JAAS `Server` section's Krb5LoginModule: SASL GSSAPI served.
    pub gssapi: Option<crate::sasl::GssapiService>,
    /// `enforce.auth.enabled` with `enforce.auth.schemes`: a connection
    /// must authenticate with one of these before any other request.
    pub enforce_auth_schemes: Option<Vec<String>>,
    /// Seeds the SASL nonces (from the OS's randomness at start).
    pub nonce_seed: u64,
    /// With several partitions: each partition applies its own entries as
    /// soon as the order lets it, instead of the merge
    /// (`engine/by_partition.rs`). Servers whose partitions own their
    /// threads (`partition.owned`) do.
    pub apply_by_partition: bool,
    /// Simulations only, with several partitions: each partition applies
    /// its own entries instead of the merge, a random few per turn drawn
    /// from this seed (`engine/by_partition.rs`). Honoured only in the
    /// engine's own test builds, where its simulators run.
    pub apply_lag_seed: Option<u64>,
    /// Simulations only, with several partitions: cores go away to
    /// stand-in threads (`engine/cores.rs`) that run a job at once or only
    /// when the engine recalls the core, as drawn from this seed.
    pub owned_threads_seed: Option<u64>,
    /// The connections' writers run on other threads (`io.threads`) and
    /// encode what they send: replies and events leave the engine as
    /// values (`Output::frames`) instead of bytes (`Output::sends`).
    pub replies_encoded_by_writers: bool,
}

/// A standalone server 1 of one partition with ZooKeeper's defaults
/// (tickTime 2000's session bounds, snapCount, jute.maxbuffer; no TTL
/// nodes, no reconfig): what tests and examples start from, naming only
/// what they change. A real server's comes from its zoo.cfg
/// (`stoa_server::partition::engine_config`).
impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            server_id: 1,
            partitions: 1,
            partition_groups: Vec::new(),
            balance_interval_ms: None,
            partition_auto: false,
            min_session_timeout_ms: 4000,
            max_session_timeout_ms: 40000,
            ttl_enabled: false,
            container_check_interval_ms: 60_000,
            super_digest: None,
            snap_count: 100_000,
            max_frame_bytes: 0xfffff,
            voters: vec![1],
            learners: vec![],
            members: vec![],
            reconfig_enabled: false,
            read_only_enabled: false,
            four_letter_whitelist: None,
            conf_text: String::new(),
            host_name: "localhost".into(),
            working_dir: "/".into(),
            fixed_election_ticks: None,
            zxid_counter_limit: None,
            sasl_users: Vec::new(),
            gssapi: None,
            enforce_auth_schemes: None,
            nonce_seed: 0,
            apply_by_partition: false,
            apply_lag_seed: None,
            owned_threads_seed: None,
            replies_encoded_by_writers: false,
        }
    }
}

impl EngineConfig {
    /// A lone voter and no learners: a standalone server.
    pub fn standalone(&self) -> bool {
        self.voters == [self.server_id] && self.learners.is_empty()
    }

    pub fn four_letter_allowed(&self, word: &str) -> bool {
        (word == "isro" && self.read_only_enabled)
            || crate::fourlw::four_letter_allowed(self.four_letter_whitelist.as_deref(), word)
    }
}

/// The durable state a partition starts from (one per partition).
pub struct Recovered {
    pub tree: DataTree,
    /// Raft index and term the tree snapshot covers.
    pub snapshot_index: u64,
    pub snapshot_term: u64,
    /// The zxid of the cut when the tree came from a whole server's
    /// snapshot (`node::server_snapshot`); None for a partition's own.
    pub cut_zxid: Option<i64>,
    pub hard_state: raft::eraftpb::HardState,
    pub entries: Vec<Entry>,
}

impl Recovered {
    /// A partition that starts from nothing: an empty tree and log.
    pub fn empty() -> Recovered {
        Recovered {
            tree: DataTree::new(),
            snapshot_index: 0,
            snapshot_term: 0,
            cut_zxid: None,
            hard_state: Default::default(),
            entries: vec![],
        }
    }
}

#[derive(Debug)]
pub enum Input {
    Accepted {
        conn: ConnId,
        peer: SocketAddr,
    },
    /// Whole frames, each with its length prefix, as a read brought them
    /// (the reader has checked every length against `max_frame_bytes`).
    Frames {
        conn: ConnId,
        bytes: Vec<u8>,
    },
    /// Whole frames as their reader cut and decoded them
    /// (`client_frame::decode_frames`).
    Requests {
        conn: ConnId,
        frames: Vec<ClientFrame<'static>>,
    },
    /// A connection's TLS client certificate named this subject (RFC
    /// 2253): its requests carry the `x509` identity too, as ZooKeeper's
    /// X509AuthenticationProvider adds it at the handshake.
    ClientCertificate {
        conn: ConnId,
        subject: String,
    },
    /// A four-letter word sent instead of a handshake.
    FourLetter {
        conn: ConnId,
        word: String,
    },
    Closed {
        conn: ConnId,
    },
    /// The WAL made every batch of `partition` up to this raft ready
    /// number durable.
    Persisted {
        partition: u32,
        number: u64,
    },
    /// A raft message from a peer for `partition`'s group.
    Raft {
        partition: u32,
        message: raft::eraftpb::Message,
    },
    /// An engine message from peer `from`.
    Peer {
        from: u64,
        message: forward::EngineMessage,
    },
    /// Peer `from` refused our connection: its membership, at this
    /// version, does not include this server.
    RefusedByPeer {
        from: u64,
        membership_version: i64,
    },
    /// Server `from`, outside the membership, dialed this one and was
    /// refused: it is up (a reconfig adding it checks that).
    Knocked {
        from: u64,
    },
    /// The connection peer `from` sends on closed (its process may have
    /// died: see `leader_loss`).
    PeerLost {
        from: u64,
    },
    /// The tree asked for by `Output::snapshots_to_ship`, serialized.
    SnapshotBuilt {
        partition: u32,
        index: u64,
        term: u64,
        data: bytes::Bytes,
    },
}

/// A batch of log records for the WAL writer.
pub struct PersistJob {
    /// The raft group the records belong to (the WAL tags each record).
    pub partition: u32,
    pub number: u64,
    /// False when only the commit index changed: raft allows that to be
    /// written lazily, so the job needs no fsync of its own.
    pub must_sync: bool,
    /// The raft entries it persists.
    pub entries: usize,
    /// What it writes, when it must sync (`node::persist_records`): an
    /// installed snapshot's marker, the entries, the latest hard state.
    /// Built where the ready was taken apart, so that a core away does it
    /// on its own thread.
    pub records: Vec<stoa_wal::Record>,
    /// A snapshot from the leader that replaces this server's whole log:
    /// written (and synced) before the batch's records, which follow it.
    pub installed: Option<InstalledSnapshot>,
}

/// A snapshot received from the leader, in the snapshot file format: the
/// group's (index, term) it replaces the log at, and where it is stored.
pub struct InstalledSnapshot {
    pub index: u64,
    pub term: u64,
    pub data: bytes::Bytes,
    /// The store (partition) and key it is written under: the group's own
    /// for a tree, partition 0's (index, term) for a whole server's.
    pub stored_as: (u32, u64, u64),
}

/// What a snapshot holds.
pub enum SnapshotContent {
    /// The one partition's tree (a server of one partition).
    Tree(DataTree),
    /// Every partition's tree at one cut of the one order.
    Server(crate::node::server_snapshot::ServerSnapshot),
}

impl SnapshotContent {
    pub fn write(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        match self {
            SnapshotContent::Tree(tree) => stoa_tree::write_snapshot(tree, out),
            SnapshotContent::Server(server) => {
                crate::node::server_snapshot::write_server_snapshot(server, out)
            }
        }
    }
}

/// A point-in-time copy of the state for the snapshot writer, named by
/// the (index, term) of partition `partition`'s group: its own, or for a
/// whole server's, partition 0's (a local snapshot) or the group's that
/// asked for it (one shipped to a peer).
pub struct SnapshotJob {
    pub partition: u32,
    pub index: u64,
    pub term: u64,
    pub content: SnapshotContent,
}

#[derive(Default)]
pub struct Output {
    pub sends: Vec<(ConnId, Vec<u8>)>,
    /// With `replies_encoded_by_writers`, what each connection is sent
    /// instead of `sends`: its frames in order, for its writer to encode.
    pub frames: Vec<(ConnId, Vec<stoa_proto::frame::OutgoingFrame>)>,
    /// Closed after their pending bytes are written.
    pub closes: Vec<ConnId>,
    pub persists: Vec<PersistJob>,
    pub snapshots: Vec<SnapshotJob>,
    /// Trees to serialize for lagging peers (at most one per partition);
    /// each is answered by `Input::SnapshotBuilt`.
    pub snapshots_to_ship: Vec<SnapshotJob>,
    /// The ensemble's members changed: the peer transport's new list.
    pub members: Option<(i64, Vec<crate::ensemble::Member>)>,
    /// Raft messages for peers (`to` names the peer), each with the
    /// partition whose group sends it.
    pub messages: Vec<(u32, raft::eraftpb::Message)>,
    /// Engine messages for peers: (to, message).
    pub engine_messages: Vec<(u64, forward::EngineMessage)>,
    /// Fatal: the thread must stop serving (e.g. fsync failed).
    pub fatal: Option<String>,
    /// A snapshot's worth of memory was just let go (an installed
    /// snapshot's data, now on disk; one built for lagging peers, no
    /// longer needed): time to return it to the system.
    pub memory_freed: bool,
}

pub struct Engine {
    config: EngineConfig,
    now_ms: i64,
    /// Connections, sessions and their pending replies.
    gate: gate::SessionGate,
    /// Each partition's tree, raft group and what hangs on them, by
    /// partition number. Sessions and extensions live on partition 0, and
    /// znodes too unless the placement puts their group elsewhere
    /// (`engine/routing.rs`).
    pub(crate) cores: cores::Cores,
    /// Hands out the zxids of every partition (`crate::zxid`).
    zxids: crate::zxid::ZxidClock,
    /// Which partition each path lives on (`crate::placement`).
    placement: crate::placement::Placement,
    /// The data was checked against the placement once caught up
    /// (`Engine::check_placement_matches_data`).
    placement_checked: bool,
    /// With several partitions: the one order their entries apply in
    /// (`crate::apply_order`). None with one: its log is the order.
    order: Option<crate::apply_order::ApplyOrder<Entry>>,
    /// Applying by partition instead of the merge (`engine/by_partition.rs`).
    by_partition: Option<by_partition::ByPartition>,
    /// Leader with several partitions: its seal is proposed, so it may
    /// hand out zxids (`Engine::maybe_seal`).
    sealed: bool,
    /// With several partitions: the zxid of each partition's last item
    /// applied, where known (`engine/chains.rs`; each partition's own once
    /// partitions own their threads).
    chain_applied: Vec<Option<i64>>,
    /// Leader: the zxid of a group move proposed and not yet applied;
    /// nothing else is prepared meanwhile (`engine/group_moves.rs`).
    group_moves_in_flight: Option<i64>,
    /// Requests per group in the balancer's window (`engine/balancer.rs`).
    group_load: balancer::GroupLoad,
    /// Extensions' writes made by the entries a new leader applied before
    /// its seal: (extension, session, writes), proposed right after it.
    held_internal_writes: Vec<(String, SessionId, Vec<stoa_ext::WriteOp>)>,
    /// Whether a leader wrote the placement (or one partition needs none):
    /// `Engine::placement_settled`.
    placement_settled: bool,
    /// A leader wrote the placement node (kept with `placement_settled`).
    placement_written: bool,
    /// Leader: whose writes it accepts, what it holds until it may
    /// prepare.
    holds: ownership::LeaderHolds,
    /// Membership, leader knowledge, peer liveness.
    ensemble: ensemble_view::EnsembleView,
    /// When containers and TTL nodes were last looked for
    /// (`Engine::check_containers`).
    last_container_check_ms: i64,
    extensions: extension_host::ExtensionHost,
    /// Sessions that opted into fast reads or watches (`engine/fast_sessions.rs`).
    fast: fast_sessions::FastSessions,
    /// The AdminServer's restores (`engine/admin_snapshots.rs`).
    restore: admin_snapshots::RestoreState,
    out: Output,
    pub(crate) stats: Stats,
    /// Threads the partitions are lent to (`engine/lent_apply.rs`).
    workers: Box<dyn lent_apply::PartitionWorkers>,
    /// The run of plain transactions being applied, its buffers kept.
    run: lent_apply::Run,
    /// Plain writes admitted this turn, not yet prepared.
    prep_batch: lent_prep::PrepBatch,
    /// Plain reads taken this turn, not yet served.
    read_batch: lent_reads::ReadBatch,
    /// A batch of reads sent to the partitions' threads, not yet answered
    /// (`Engine::land_reads`).
    read_flight: lent_reads::ReadBatch,
}

impl Engine {
    pub fn new(
        config: EngineConfig,
        recovered: Vec<Recovered>,
        now_ms: i64,
    ) -> Result<Engine, String> {
        if recovered.len() != config.partitions as usize || recovered.is_empty() {
            return Err(format!(
                "{} partition(s) recovered for a server of {}",
                recovered.len(),
                config.partitions
            ));
        }
        if config.partitions > 1 && config.reconfig_enabled {
            return Err("reconfig with several partitions is not supported yet".into());
        }
        let membership = reconfig::initial_membership(&config, &recovered[0].tree)?;
        let mut gate = gate::SessionGate::new(
            crate::session::initial_session_id(config.server_id, now_ms),
            config.replies_encoded_by_writers,
        );
        gate.restore_sessions(&recovered[0].tree, now_ms);
        let order = (config.partitions > 1)
            .then(|| start_order(&recovered))
            .transpose()?;
        let placement = start_placement(&config)?;
        let mut cores = Vec::with_capacity(recovered.len());
        for recovered in recovered {
            let Recovered {
                tree,
                snapshot_index,
                snapshot_term,
                cut_zxid: _,
                hard_state,
                entries,
            } = recovered;
            let snapshot = (snapshot_index, snapshot_term);
            let raft = start_raft_group(&config, &membership, snapshot, hard_state, entries)?;
            cores.push(partition_core::PartitionCore::new(
                tree, raft, snapshot, now_ms,
            ));
        }
        let chained = cores.len() > 1;
        for core in &mut cores {
            core.chained = chained;
        }
        let mut engine = Engine {
            now_ms,
            cores: cores::Cores::new(cores),
            zxids: crate::zxid::ZxidClock::new(config.zxid_counter_limit),
            by_partition: by_partition::ByPartition::configured(&config, order.is_some()),
            order,
            placement,
            placement_checked: false,
            sealed: false,
            chain_applied: vec![None; config.partitions as usize],
            group_moves_in_flight: None,
            group_load: Default::default(),
            held_internal_writes: Vec::new(),
            placement_settled: false,
            placement_written: false,
            holds: Default::default(),
            gate,
            ensemble: ensemble_view::EnsembleView::new(membership, config.partitions as usize),
            last_container_check_ms: now_ms,
            extensions: extension_host::ExtensionHost::new(),
            fast: Default::default(),
            restore: Default::default(),
            out: Output::default(),
            stats: Stats {
                started_at_ms: now_ms,
                ..Stats::default()
            },
            workers: Box::new(lent_apply::InlineWorkers),
            run: Default::default(),
            prep_batch: Default::default(),
            read_batch: Default::default(),
            read_flight: Default::default(),
            config,
        };
        // A lone voter is leader from the start; that is no change of leader.
        engine.ensemble.known_leader = engine.leader_id();
        engine.ensemble.known_leader_terms = engine.cores.iter().map(|c| c.term()).collect();
        engine.settle_placement()?;
        engine.load_extensions();
        engine.reload_fast_sessions();
        engine.publish_members();
        Ok(engine)
    }

    pub fn set_time(&mut self, now_ms: i64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// The engine's clock (ms), as the host last set it.
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// The WAL writer's timings, for `mntr` (the writer owns the counters).
    pub fn set_wal_sync_stats(&mut self, stats: stoa_wal::SyncStats) {
        self.stats.wal_sync = stats;
    }

    /// True once this server leads, may prepare writes (it applied an entry
    /// of its own term) and applied every entry of its log: standalone, the
    /// tree is then what clients were acknowledged before the restart.
    /// (Checked last, the entries applied recall every core away.)
    pub fn caught_up(&self) -> bool {
        self.leads_its_term()
            && (self.cores.iter()).all(|core| core.applied_index >= core.raft.store().last_index())
    }

    /// This server leads and may prepare writes: it applied an entry of its
    /// own term, so every entry of an earlier term too. Session expiry and
    /// container cleanup wait for it: what a session did before this term,
    /// and the tree it left, are then known.
    pub fn leads_its_term(&self) -> bool {
        self.is_leader() && self.may_prepare()
    }

    /// This server leads every partition's group (`leader_id` is this
    /// server).
    pub fn is_leader(&self) -> bool {
        (0..self.cores.len()).all(|p| self.cores.is_leader(p))
    }

    /// Cut off from the quorum with read-only mode enabled.
    pub fn read_only(&self) -> bool {
        self.config.read_only_enabled && self.leader_id() == 0
    }

    /// ZooKeeper's name for this server's role, as `srvr` and `mntr` print it.
    pub fn mode(&self) -> &'static str {
        if self.standalone() {
            "standalone"
        } else if self.read_only() {
            "read-only"
        } else if self.is_leader() {
            "leader"
        } else if self.ensemble.membership.role_of(self.config.server_id) == Some(Role::Observer) {
            "observer"
        } else {
            "follower"
        }
    }

    /// Leader only: (live peers, live peers within `lag_ok` entries, the
    /// largest lag in entries of a live peer) from raft's view of each
    /// peer's log. Live: heard from within `PEER_LIVE_MS`, as ZooKeeper
    /// counts only the learners connected to it; a dead follower would
    /// otherwise count as synced until the log moved `lag_ok` entries on.
    pub(crate) fn follower_lag(&self, lag_ok: u64) -> (usize, usize, u64) {
        if !self.is_leader() {
            return (0, 0, 0);
        }
        let last = self.cores[0].raft.store().last_index();
        let me = self.config.server_id;
        let live = |id: u64| {
            self.ensemble
                .peer_heard_ms
                .get(&id)
                .is_some_and(|&heard| self.now_ms - heard <= PEER_LIVE_MS)
        };
        let lags: Vec<u64> = self.cores[0]
            .raft
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != me && live(**id))
            .map(|(_, p)| last.saturating_sub(p.matched))
            .collect();
        let synced = lags.iter().filter(|&&l| l <= lag_ok).count();
        (lags.len(), synced, lags.iter().copied().max().unwrap_or(0))
    }

    /// The leader this server knows of (0: none): the server that leads
    /// every partition's group. While the groups' leaders differ (an
    /// election, a transfer under way) there is none, and nobody prepares
    /// writes (docs/zxids.md).
    pub fn leader_id(&self) -> u64 {
        let leader = self.cores.leader_id(0);
        if self.cores.len() == 1 {
            return leader;
        }
        if (1..self.cores.len()).all(|p| self.cores.leader_id(p) == leader)
            && (leader != self.config.server_id || self.is_leader())
        {
            leader
        } else {
            0
        }
    }

    pub fn tree(&self) -> &DataTree {
        &self.cores[0].tree
    }

    pub fn handle(&mut self, input: Input) {
        if self.cores.len() == 1 {
            let _ = self.absorb_away();
            // One partition prepares each write on arrival.
            return self.handle_input(input);
        }
        // A turn's client requests, its own clients' or forwarded, may
        // leave plain writes to prepare together (`engine/lent_prep.rs`)
        // and plain reads to serve together (`engine/lent_reads.rs`);
        // anything else finds them done.
        let requests = matches!(
            input,
            Input::Frames { .. }
                | Input::Requests { .. }
                | Input::Peer {
                    message: forward::EngineMessage::Forward { .. },
                    ..
                }
        );
        // What cores brought back waits while a turn's reads are batched
        // or in flight (absorbing it would serve or land them:
        // `Engine::absorb_away`); the turn's output, or its next input of
        // another kind, takes it in.
        if !requests || (self.read_batch.is_empty() && self.read_flight.is_empty()) {
            let _ = self.absorb_away();
        }
        if !requests {
            self.finish_batches(true);
        }
        self.open_prep_batch(requests);
        self.handle_input(input);
        self.open_prep_batch(false);
    }

    #[inline(always)]
    fn handle_input(&mut self, input: Input) {
        match input {
            Input::Accepted { conn, peer } => self.gate.accept(conn, peer, self.now_ms),
            Input::ClientCertificate { conn, subject } => {
                let id = stoa_proto::records::Id {
                    scheme: "x509".into(),
                    id: subject,
                };
                self.gate.add_identity(conn, id, false);
            }
            Input::Frames { conn, bytes } => self.on_frames(conn, &bytes),
            Input::Requests { conn, frames } => {
                for frame in frames {
                    self.on_frame(conn, frame);
                }
            }
            Input::FourLetter { conn, word } => {
                let text = self.four_letter(&word, conn);
                self.gate.send_raw(conn, text.into_bytes());
                self.out.closes.push(conn);
            }
            Input::Closed { conn } => self.on_closed(conn),
            Input::Persisted { partition, number } => self.on_persisted(partition, number),
            Input::Peer { from, message } => self.on_peer(from, message),
            Input::Raft { partition, message } => {
                self.heard_from(message.from);
                self.leader_loss_on_raft(&message);
                if partition == 0 && !self.farewell_applies(&message) {
                    return;
                }
                let Some(message) = self.step_away(partition, message) else {
                    return;
                };
                let Some(core) = self.cores.get_mut(partition as usize) else {
                    // Once: a misconfigured peer sends several a tick.
                    if !std::mem::replace(&mut self.ensemble.foreign_partition_seen, true) {
                        log::warn!(
                            "raft message from server {} for partition {partition}, which this \
                             server does not run: every member must run the same partitions",
                            message.from
                        );
                    }
                    return;
                };
                core.step(message);
            }
            Input::SnapshotBuilt {
                partition,
                index,
                term,
                data,
            } => self.on_snapshot_built(partition as usize, index, term, data),
            Input::RefusedByPeer {
                from,
                membership_version,
            } => self.on_refused_by_peer(from, membership_version),
            Input::Knocked { from } => self.heard_from(from),
            Input::PeerLost { from } => self.on_peer_lost(from),
        }
    }

    /// Advances timers: raft ticks, session expiry, container/TTL cleanup.
    pub fn tick(&mut self) {
        let _ = self.absorb_away();
        self.finish_batches(true);
        assert_eq!(
            self.ensemble.outgoing.is_some(),
            self.in_joint_config(),
            "the leaving servers are kept exactly while raft's configuration is joint"
        );
        self.leader_loss_tick();
        self.tick_groups();
        self.align_groups();
        if !self.ensemble.farewell.is_empty() {
            // Their last heartbeat went out with the previous output.
            self.ensemble.farewell.clear();
            self.publish_members();
        }
        self.expire_leader_waits();
        self.expire_kept_waits();
        self.watch_snapshot_sends();
        self.release_idle_shippable();
        self.hand_over_if_not_participant();
        self.report_liveness();
        self.expire_sessions();
        self.check_containers();
        self.check_placement_matches_data();
        self.publish_placement();
        self.balance_partitions();
    }

    /// Runs raft until it has nothing more to do now, and returns everything
    /// the engine wants done outside.
    pub fn take_output(&mut self) -> Output {
        // The batch's raft messages for cores away go after them.
        self.cores.send_steps();
        let _ = self.absorb_away();
        // The turn's reads stay in flight while the engine goes on.
        self.finish_batches(false);
        self.roll_epoch();
        self.drive_raft();
        // Sessions established while raft ran (createSession applied, an
        // attach completed) serve what their connections sent early; their
        // writes then need raft again.
        while !self.gate.rebound.is_empty() {
            for conn in std::mem::take(&mut self.gate.rebound) {
                self.serve_early(conn);
            }
            self.drive_raft();
        }
        (self.gate).take_owed(&mut self.out.sends, &mut self.out.frames);
        std::mem::take(&mut self.out)
    }

    fn on_closed(&mut self, conn: ConnId) {
        self.forget_connection(conn);
        if self.gate.close(conn) {
            for core in &mut self.cores {
                core.watches.remove_conn(conn);
            }
        }
    }

    fn on_frames(&mut self, conn: ConnId, mut bytes: &[u8]) {
        let decoder = FrameDecoder::new(self.config.max_frame_bytes);
        while !bytes.is_empty() {
            match decoder.decode(bytes) {
                Ok(Some((consumed, body))) => {
                    self.on_frame(conn, ClientFrame::Bytes(body.into()));
                    bytes = &bytes[consumed..];
                }
                // The reader hands over whole frames only.
                Ok(None) | Err(_) => {
                    debug_assert!(
                        false,
                        "connection {conn}: a partial or bad frame reached the engine"
                    );
                    log::error!(
                        "connection {conn}: a partial or bad frame reached the engine; closing"
                    );
                    self.out.closes.push(conn);
                    return;
                }
            }
        }
    }

    fn on_frame(&mut self, conn: ConnId, frame: ClientFrame<'_>) {
        if !self.is_member() {
            self.out.closes.push(conn);
            return;
        }
        // A connection kept through the election holds its frames as
        // before a handshake completes (below); others wait in
        // `await_leader`.
        if self.leader_id() == 0
            && !self.config.read_only_enabled
            && !self.gate.kept.contains_key(&conn)
        {
            return self.await_leader(conn, frame);
        }
        let Some(c) = self.gate.conns.get_mut(&conn) else {
            return;
        };
        c.packets_received += 1;
        self.gate.counters.packets_received += 1;
        if !c.handshaken {
            let ClientFrame::Bytes(body) = frame else {
                // A reader decodes every frame but a connection's first.
                debug_assert!(
                    false,
                    "connection {conn}: a decoded frame before the handshake"
                );
                log::warn!("closing connection {conn}: a request before its handshake");
                self.out.closes.push(conn);
                return;
            };
            match decode_connect_request(&body) {
                Ok((req, sent_read_only)) => self.on_connect(conn, req, sent_read_only),
                Err(e) => {
                    log::warn!("closing connection {conn}: bad connect request: {e}");
                    self.out.closes.push(conn);
                }
            }
            return;
        }
        if c.session.is_none() {
            if c.early_bytes > EARLY_BYTES_MAX {
                // Refused below and closing: the rest of its read goes too.
                return;
            }
            if c.early.len() >= EARLY_FRAMES_MAX || c.early_bytes + frame.len() > EARLY_BYTES_MAX {
                c.early = Vec::new();
                c.early_bytes = EARLY_BYTES_MAX + 1;
                log::warn!(
                    "closing connection {conn}: over {} requests or {} bytes sent before its \
                     session was established",
                    EARLY_FRAMES_MAX,
                    EARLY_BYTES_MAX
                );
                self.out.closes.push(conn);
                return;
            }
            c.early_bytes += frame.len();
            c.early.push(frame.into_owned());
            return;
        }
        self.serve_frame(conn, frame);
    }

    /// No leader known, so nothing can be served consistently. A new
    /// connection's handshake waits for the election to end, up to
    /// `LEADER_WAIT_TICKS`, rather than being cut: a client cut now would
    /// try its next server, which may be the dead leader, and wait out its
    /// connect timeout there (issue 27). An established session that is
    /// not one the change of leader kept had its connection closed then;
    /// anything still arriving on it is refused.
    fn await_leader(&mut self, conn: ConnId, frame: ClientFrame<'_>) {
        if self.gate.conns.get(&conn).is_none_or(|c| c.handshaken) {
            self.out.closes.push(conn);
            return;
        }
        let waiting = self.gate.awaiting_leader.entry(conn).or_default();
        waiting.bytes += frame.len();
        waiting.frames.push(frame.into_owned());
        if waiting.frames.len() > EARLY_FRAMES_MAX || waiting.bytes > EARLY_BYTES_MAX {
            log::warn!("closing connection {conn}: too much sent while no leader is known");
            self.gate.awaiting_leader.remove(&conn);
            self.out.closes.push(conn);
        }
    }

    /// A leader is known: the handshakes that waited for one go on.
    pub(crate) fn serve_awaiting_leader(&mut self) {
        let waiting = std::mem::take(&mut self.gate.awaiting_leader);
        for (conn, held) in waiting {
            for frame in held.frames {
                self.on_frame(conn, frame);
            }
        }
    }

    /// Every tick: a handshake that waited `LEADER_WAIT_TICKS` for a leader
    /// is closed, so its client tries another server.
    fn expire_leader_waits(&mut self) {
        let waits = (self.gate.awaiting_leader.iter_mut()).map(|(c, w)| (c, &mut w.ticks));
        for conn in gate::waited_past(waits, LEADER_WAIT_TICKS) {
            log::info!("closing connection {conn}: no leader elected while it waited");
            self.gate.awaiting_leader.remove(&conn);
            self.out.closes.push(conn);
        }
    }

    /// Binds `conn` to `sid`; early frames are served at the next output.
    pub(crate) fn bind_session(&mut self, conn: ConnId, sid: SessionId) {
        self.gate.bind_session(conn, sid);
    }

    fn serve_early(&mut self, conn: ConnId) {
        let Some(c) = self
            .gate
            .conns
            .get_mut(&conn)
            .filter(|c| c.session.is_some())
        else {
            return;
        };
        let early = std::mem::take(&mut c.early);
        c.early_bytes = 0;
        for frame in early {
            self.serve_frame(conn, frame);
        }
    }

    /// A request frame of a connection with an established session.
    fn serve_frame(&mut self, conn: ConnId, frame: ClientFrame<'_>) {
        match frame.into_request() {
            Ok((header, request)) => self.on_request(conn, header.xid, request),
            Err(RequestFrameError::Body { header, error }) => {
                if matches!(error, stoa_proto::request::RequestError::UnknownOpcode(_)) {
                    // ZooKeeper answers Unimplemented and drops the connection.
                    log::warn!(
                        "connection {conn}: unknown request type {}; closing",
                        header.kind
                    );
                    self.queue_reply(conn, header.xid, ErrorCode::Unimplemented, Response::Empty);
                    self.out.closes.push(conn);
                } else {
                    log::warn!(
                        "connection {conn}: malformed request xid {}: {error}",
                        header.xid
                    );
                    self.queue_reply(
                        conn,
                        header.xid,
                        ErrorCode::MarshallingError,
                        Response::Empty,
                    );
                }
            }
            Err(e) => {
                log::warn!("closing connection {conn}: {e}");
                self.out.closes.push(conn);
            }
        }
    }

    // ----- output (the gate encodes) -----

    pub(crate) fn send_connect_response(
        &mut self,
        conn: ConnId,
        session: SessionId,
        timeout_ms: i32,
    ) {
        let read_only = self.read_only();
        self.gate
            .send_connect_response(conn, session, timeout_ms, read_only);
    }

    /// Appends a decided reply to the session's queue (or sends it now when
    /// nothing is ahead of it).
    pub(crate) fn queue_reply(
        &mut self,
        conn: ConnId,
        xid: i32,
        err: ErrorCode,
        response: Response,
    ) {
        let Some(sid) = self.gate.conns.get(&conn).and_then(|c| c.session) else {
            return;
        };
        if let Some(s) = self.gate.sessions.get_mut(&sid) {
            s.queue.push_back(Pending::Reply { xid, err, response });
        }
        self.pump(sid);
    }

    /// Sends every queued reply of `sid` that no longer waits for a write.
    /// (Applying by partition, the fences its replies lift go at the next
    /// turn: `Engine::apply_by_partition`.)
    pub(crate) fn pump(&mut self, sid: SessionId) {
        // Nothing applies while the queue drains.
        let applied_zxid = self.applied_zxid();
        let by_partition = self.applies_by_partition();
        let batching = self.batches_reads();
        loop {
            // Applying by partition, the head's turn takes some working out:
            // not when nothing can be answered now (the usual end of the
            // loop, once the queue is drained).
            if by_partition {
                let head = self.gate.sessions.get(&sid).and_then(|s| s.queue.front());
                if matches!(
                    head,
                    None | Some(Pending::Write { .. } | Pending::Remote { .. })
                ) {
                    return;
                }
            }
            // Applying by partition, a plain read goes by its partition's
            // closed zxid, anything else waits for a cut at or past what
            // the client saw (`engine/by_partition.rs`).
            let turn = match by_partition {
                true => self.by_partition_turn(sid),
                false => by_partition::Turn::default(),
            };
            let (read_at, wait) = (turn.read_at, turn.wait);
            let reads_hold = self.reads_hold(sid);
            let joins = batching && self.read_joins(sid, turn.partition);
            let Some(s) = self.gate.sessions.get_mut(&sid) else {
                return;
            };
            let Some(conn) = s.conn else {
                // Nobody to answer: drop what needs no commit; writes stay
                // until applied so their order is kept.
                while matches!(
                    s.queue.front(),
                    Some(Pending::Read { .. } | Pending::Reply { .. } | Pending::Decided { .. })
                ) {
                    s.queue.pop_front();
                }
                return;
            };
            match s.queue.front() {
                None | Some(Pending::Write { .. } | Pending::Remote { .. }) => return,
                // By closed watermark: it joins the batch, or is answered
                // now if the session's batched reads are none.
                Some(Pending::Read { .. }) if read_at.is_some() && reads_hold && !joins => {
                    self.stop_behind_reads(sid);
                    return;
                }
                Some(Pending::Read { .. }) if read_at.is_some() => {}
                Some(_) if wait => return self.wait_for_turn(sid),
                Some(Pending::Decided { after_zxid, .. }) if *after_zxid > applied_zxid => {
                    let waiting = self.gate.zxid_waiters.entry(*after_zxid).or_default();
                    if !waiting.contains(&sid) {
                        waiting.push(sid);
                    }
                    return;
                }
                Some(Pending::Read { request, .. })
                    if batching && !by_partition && lent_reads::is_plain_read(request) => {}
                // What is answered now must not overtake the session's
                // batched reads: the queue goes on once they are served.
                Some(_) if reads_hold => {
                    self.stop_behind_reads(sid);
                    return;
                }
                Some(Pending::Read { .. } | Pending::Reply { .. } | Pending::Decided { .. }) => {}
            }
            let Some(item) = s.queue.pop_front() else {
                return;
            };
            match item {
                Pending::Read {
                    xid,
                    request,
                    received_ms,
                } => {
                    if let Some(zxid) = read_at {
                        self.note_zxid_seen(conn, zxid);
                        if !self.at_cut() {
                            self.stats.reads_off_cut += 1;
                        }
                        self.stats.reads_fast += turn.fast as u64;
                    }
                    // Applying by partition, only a read by closed
                    // watermark waits in the batch.
                    let request = if batching && (!by_partition || read_at.is_some()) {
                        let at = read_at.map(|zxid| (zxid, turn.partition));
                        match self.batch_read(conn, sid, xid, request, received_ms, at) {
                            None => continue,
                            Some(request) => request,
                        }
                    } else {
                        request
                    };
                    self.execute_read(conn, sid, xid, request, read_at);
                    self.stats
                        .record_latency((self.now_ms - received_ms).max(0) as u64);
                }
                Pending::Reply { xid, err, response } => {
                    self.gate.send_reply(conn, xid, applied_zxid, err, response);
                }
                Pending::Decided {
                    xid,
                    err,
                    response,
                    watch,
                    ..
                } => {
                    // Set as the reply goes out: any change applied from
                    // here on fires it, and the read saw everything before.
                    if let Some((kind, path)) = watch {
                        let partition = self.partition_of(&path);
                        self.cores[partition].watches.add(conn, kind, &path);
                    }
                    self.gate.send_reply(conn, xid, applied_zxid, err, response);
                }
                Pending::Write { .. } | Pending::Remote { .. } => unreachable!("checked above"),
            }
        }
    }

    /// Proposes a transaction through partition 0's group.
    pub(crate) fn propose(&mut self, txn: Txn) {
        self.propose_on(0, txn);
    }

    /// Proposes a transaction through `partition`'s group: the partition
    /// of the node it names, or of a transaction of parts, the first
    /// part's.
    pub(crate) fn propose_on(&mut self, partition: usize, txn: Txn) {
        debug_assert!(
            self.prep_batch.is_empty(),
            "a proposal made while plain writes before it wait unprepared"
        );
        // Watch extensions see each partition's changes on its speculative
        // tree (a transaction of parts, part by part).
        let txn = self.decide_watches(partition, txn);
        if let TxnOp::Parts { parts, .. } = &txn.op {
            assert_eq!(
                parts[0].0 as usize, partition,
                "proposed through its first part's group"
            );
            for (part, op) in parts {
                if let Some(speculative) = &mut self.cores[*part as usize].speculative {
                    speculative.apply_part(&Txn {
                        header: txn.header,
                        op: op.clone(),
                    });
                }
            }
        }
        if extensions::changes_registration(&txn.op) {
            (self.holds.registrations_in_flight).push_back(txn.header.zxid);
        }
        if self.cores[partition].chained {
            let links = self.take_links(partition, &txn);
            self.cores[partition].propose_linked(partition, txn, &links);
        } else {
            self.cores[partition].propose_txn(partition, txn);
        }
    }

    /// Stops maintaining the speculative trees (nothing reads them).
    pub(crate) fn drop_speculative(&mut self) {
        for core in &mut self.cores {
            core.speculative = None;
        }
    }
}

impl Engine {
    /// Requests received and not yet answered, over all sessions.
    pub(crate) fn outstanding(&self) -> usize {
        self.gate.outstanding()
    }
}

#[cfg(test)]
mod ensemble_sim;
#[cfg(test)]
mod ensemble_tests;
#[cfg(test)]
mod scenario_tests;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod sim_world;
#[cfg(test)]
mod tests;
