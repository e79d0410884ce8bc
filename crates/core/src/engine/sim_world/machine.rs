//! A simulated server machine: its node driver (the production one, over
//! the simulated log and snapshot store) while up, its disk while down.

use crate::engine::{Engine, EngineConfig};
use crate::node::outbox::Outbox;
use crate::node::sim_disk::{SimSnapshots, SimWal};
use crate::node::{self, Node};

pub(crate) type SimNode = Node<SimWal, SimSnapshots>;

pub(crate) struct SimMachine {
    node: Option<SimNode>,
    /// Its disk while it is down: the log and the snapshots.
    parked: Option<(SimWal, SimSnapshots)>,
}

/// What a boot found on the disk.
pub(crate) struct Booted {
    /// Recovery cut a torn or damaged tail off the log.
    pub torn_tail: bool,
}

impl SimMachine {
    /// A machine with a blank disk, down.
    pub fn new() -> SimMachine {
        SimMachine {
            node: None,
            parked: Some((SimWal::default(), SimSnapshots::default())),
        }
    }

    pub fn node(&self) -> Option<&SimNode> {
        self.node.as_ref()
    }

    pub fn node_mut(&mut self) -> Option<&mut SimNode> {
        self.node.as_mut()
    }

    pub fn engine(&self) -> Option<&Engine> {
        self.node.as_ref().map(Node::engine)
    }

    pub fn engine_mut(&mut self) -> Option<&mut Engine> {
        self.node.as_mut().map(Node::engine_mut)
    }

    /// The disk of a machine that is down.
    pub fn parked_disk_mut(&mut self) -> Option<&mut (SimWal, SimSnapshots)> {
        self.parked.as_mut()
    }

    /// Starts the server from its disk through the production recovery
    /// (`node::load_newest_of_server`, `node::recovered`); a disk it cannot recover
    /// from is an error.
    pub fn boot(&mut self, config: EngineConfig, now_ms: i64) -> Result<Booted, String> {
        let (mut wal, mut snapshots) = self.parked.take().expect("a machine boots once it is down");
        let replay = wal.recover();
        let booted = Booted {
            torn_tail: replay.torn_tail_bytes > 0,
        };
        let stores = snapshots.stores(config.partitions);
        let starts = node::load_newest_of_server(stores)?;
        let mut recovered = Vec::new();
        for (partition, start) in (0..).zip(starts) {
            recovered.push(node::recovered(start, &replay, partition)?);
        }
        let lend = config.partitions > 1;
        let owned = config.owned_threads_seed;
        let mut engine = Engine::new(config, recovered, now_ms)?;
        if lend {
            // As a server lending its partitions to threads, run in order.
            engine.lend_partitions(Box::new(crate::engine::lent_apply::SequentialWorkers));
        }
        if let Some(seed) = owned {
            engine.own_partitions(Box::new(crate::engine::cores::SimThreads::new(seed)));
        }
        self.node = Some(Node::new(engine, wal, snapshots));
        Ok(booted)
    }

    /// The machine stops: what was not synced is lost, and the log's tail
    /// is torn as `tail_seed` decides; a snapshot being written is lost.
    /// Returns the engine as it was (for statistics); nothing if it was
    /// down already.
    pub fn crash(&mut self, tail_seed: u64) -> Option<Engine> {
        let (engine, mut wal, mut snapshots) = self.node.take()?.into_parts();
        wal.crash(tail_seed);
        snapshots.crash();
        self.parked = Some((wal, snapshots));
        Some(engine)
    }

    /// Carries out the engine's output through the node driver. An error
    /// means the server must stop (a failed fsync, a snapshot it could not
    /// install), as a real one exits.
    pub fn flush(&mut self) -> Result<Outbox, String> {
        let mut out = Outbox::default();
        if let Some(node) = self.node.as_mut() {
            node.flush(&mut out)?;
        }
        Ok(out)
    }
}
