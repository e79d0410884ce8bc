//! Counters the partition thread keeps for `srvr`, `mntr` and Prometheus.

/// Reported as the ZooKeeper version clients parse (`envi`, `srvr`): the
/// protocol level Stoa implements, then Stoa's own version.
pub const ZOOKEEPER_COMPAT_VERSION: &str = "3.9.2";

pub fn version_line() -> String {
    format!(
        "{ZOOKEEPER_COMPAT_VERSION}-stoa-{}, built on unknown",
        env!("CARGO_PKG_VERSION")
    )
}

#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Restores applied (the AdminServer's `restore`).
    pub restores: u64,
    pub packets_received: u64,
    pub packets_sent: u64,
    pub notifications_sent: u64,
    pub proposals: u64,
    /// New epochs this server started as leader because its zxid counter
    /// neared its end.
    pub epoch_rollovers: u64,
    /// Follower: leaders found gone from their closed connection and
    /// silence (`engine::leader_loss`), each followed by a campaign.
    pub leader_losses_noticed: u64,
    /// Group moves applied (an operator's or the balancer's).
    pub group_moves: u64,
    /// Group moves the load balancer proposed as leader.
    pub balancer_moves: u64,
    /// Runs of plain transactions applied with several partitions, the
    /// transactions in them, and the runs lent to worker threads
    /// (`engine/lent_apply.rs`).
    pub apply_runs: u64,
    pub apply_run_txns: u64,
    pub apply_runs_lent: u64,
    /// Batches of plain writes prepared with several partitions, the
    /// writes in them, and the batches lent to worker threads
    /// (`engine/lent_prep.rs`).
    pub prep_batches: u64,
    pub prep_batch_writes: u64,
    pub prep_batches_lent: u64,
    /// Batches of plain reads served with several partitions, the reads
    /// in them, and the batches lent to worker threads or served on the
    /// partitions' own threads (`engine/lent_reads.rs`).
    pub read_batches: u64,
    pub read_batch_reads: u64,
    pub read_batches_lent: u64,
    /// Batches left in flight on the partitions' own threads while the
    /// engine went on (`Engine::land_reads` answers them).
    pub read_flights: u64,
    /// Rounds of the raft groups' readies, the readies in them, and the
    /// rounds lent to worker threads (`engine/lent_ready.rs`).
    pub ready_rounds: u64,
    pub ready_round_readies: u64,
    pub ready_rounds_lent: u64,
    /// Owned partitions (`engine/cores.rs`): jobs sent away with a core,
    /// cores the engine reached for while away (recalls), and recalls that
    /// waited for the job to finish; jobs sent after a core still away
    /// (followed), and those of them the engine ran as the core landed.
    pub cores_sent: u64,
    pub core_recalls: u64,
    pub core_recalls_waited: u64,
    pub core_jobs_followed: u64,
    pub core_jobs_followed_late: u64,
    /// Of the jobs followed, raft messages stepped on a partition's thread
    /// (`Engine::step_away`).
    pub raft_steps_away: u64,
    /// Raft ticks stepped on a partition's thread (`Engine::tick_groups`),
    /// with the messages kept for it.
    pub raft_ticks_away: u64,
    /// With several partitions: chain links checked as entries applied,
    /// and those that did not match (`engine/chains.rs`).
    pub chain_links_followed: u64,
    /// Applying by partition (`partition.owned`, and the simulations):
    /// entries a partition applied past the prefix, and writes held back
    /// as fences (`engine/by_partition.rs`).
    pub applied_past_prefix: u64,
    pub writes_fenced: u64,
    /// Jobs applying a partition's entries sent away with its core
    /// (`engine/away_apply.rs`).
    pub applies_sent_away: u64,
    /// Reads answered by closed watermark while partitions stood apart.
    pub reads_off_cut: u64,
    /// Reads of sessions that opted into fast reads or watches answered
    /// where the rule for every session would have waited.
    pub reads_fast: u64,
    /// Watch events sent before the prefix reached them, to sessions that
    /// opted into fast watches.
    pub events_fast: u64,
    /// Sessions that opted into fast reads, and into fast watches, now
    /// (filled in by the monitor).
    pub fast_read_sessions: u64,
    pub fast_watch_sessions: u64,
    pub chain_breaks: u64,
    pub txns_applied: u64,
    pub request_errors: u64,
    pub sessions_expired: u64,
    pub containers_deleted: u64,
    pub auth_failures: u64,
    pub latency_min_ms: Option<u64>,
    pub latency_max_ms: u64,
    pub latency_total_ms: u64,
    pub latency_count: u64,
    pub started_at_ms: i64,
    /// Leader only: ms from preparing a transaction to applying it.
    pub commit_latency_max_ms: u64,
    pub commit_latency_total_ms: u64,
    pub commits_timed: u64,
    /// WAL batches that carried raft entries, and those entries.
    pub wal_batches: u64,
    pub wal_batch_entries: u64,
    pub wal_batch_entries_max: u64,
    /// The WAL writer's groups: write plus fdatasync (copied from the
    /// writer thread's counters as groups complete).
    pub wal_sync: stoa_wal::SyncStats,
    /// Snapshots sent to lagging peers (leader) and installed (follower).
    pub snapshots_sent: u64,
    pub snapshots_installed: u64,
}

fn ratio(total: u64, count: u64) -> f64 {
    if count == 0 {
        0.0
    } else {
        total as f64 / count as f64
    }
}

impl Stats {
    pub fn record_latency(&mut self, ms: u64) {
        self.latency_min_ms = Some(self.latency_min_ms.map_or(ms, |m| m.min(ms)));
        self.latency_max_ms = self.latency_max_ms.max(ms);
        self.latency_total_ms += ms;
        self.latency_count += 1;
    }

    pub fn record_commit(&mut self, ms: u64) {
        self.commit_latency_max_ms = self.commit_latency_max_ms.max(ms);
        self.commit_latency_total_ms += ms;
        self.commits_timed += 1;
    }

    pub fn record_wal_batch(&mut self, entries: u64) {
        self.wal_batches += 1;
        self.wal_batch_entries += entries;
        self.wal_batch_entries_max = self.wal_batch_entries_max.max(entries);
    }

    pub fn commit_latency_avg_ms(&self) -> f64 {
        ratio(self.commit_latency_total_ms, self.commits_timed)
    }

    pub fn wal_sync_avg_ms(&self) -> f64 {
        ratio(self.wal_sync.sync_micros_total, self.wal_sync.groups) / 1000.0
    }

    pub fn wal_batch_entries_avg(&self) -> f64 {
        ratio(self.wal_batch_entries, self.wal_batches)
    }

    pub fn latency_avg_ms(&self) -> f64 {
        if self.latency_count == 0 {
            0.0
        } else {
            self.latency_total_ms as f64 / self.latency_count as f64
        }
    }

    pub fn reset_latency_only(&mut self) {
        self.latency_min_ms = None;
        self.latency_max_ms = 0;
        self.latency_total_ms = 0;
        self.latency_count = 0;
    }

    pub fn reset(&mut self) {
        let started_at_ms = self.started_at_ms;
        *self = Stats {
            started_at_ms,
            ..Stats::default()
        };
    }
}
