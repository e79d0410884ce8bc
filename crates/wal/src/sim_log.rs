//! `SimLog`: an in-memory `LogStore` for deterministic tests and the
//! simulator. It keeps what a disk would keep across a crash: synced
//! records always, unsynced records never, except that the last unsynced
//! write may be torn (a prefix of its bytes persisted, possibly damaged),
//! which recovery must decode and cut back exactly as `FileLog` does.

use std::collections::VecDeque;

use crate::compaction::{CompactionState, UnitSummary};
use crate::error::WalError;
use crate::record::{decode_record, encode_record, Decoded, Record};
use crate::replay::{Replay, ReplayBuilder};
use crate::store::{check_payload_bounds, LogStore};

#[derive(Clone, Debug)]
struct DurableRecord {
    /// Each record is its own compaction unit.
    unit: UnitSummary,
    record: Record,
}

#[derive(Clone, Debug, Default)]
pub struct SimLog {
    /// Synced records, oldest first.
    durable: VecDeque<DurableRecord>,
    next_unit_seq: u64,
    /// Appended, not yet synced.
    pending: Vec<Record>,
    /// Bytes a crash left behind the durable records; decoded by `recover`.
    crash_tail: Vec<u8>,
    compaction: CompactionState,
    /// A sync failed: fail-stop until `recover`.
    failed: bool,
    /// Crashed and not yet recovered.
    crashed: bool,
    fail_next_sync: bool,
    syncs: u64,
}

impl SimLog {
    pub fn new() -> SimLog {
        SimLog::default()
    }

    /// The next `sync` fails, and the log fails with it (fail-stop). The
    /// records it should have synced stay unsynced: a later crash may tear
    /// them or drop them.
    pub fn fail_next_sync(&mut self) {
        self.fail_next_sync = true;
    }

    /// Calls to `sync` so far, failed ones included.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// Records durable right now (synced, not compacted).
    pub fn durable_records(&self) -> impl Iterator<Item = &Record> {
        self.durable.iter().map(|d| &d.record)
    }

    /// Records appended but not yet synced.
    pub fn pending_records(&self) -> &[Record] {
        &self.pending
    }

    /// The machine stops. Unsynced records are lost; with half the seeds the
    /// last unsynced write is torn instead: a random prefix of its bytes
    /// persists (whole records in it survive, legitimately, as they would
    /// on a disk), and with a quarter of those one persisted byte is
    /// damaged. Until `recover`, every call fails.
    pub fn crash(&mut self, rng_seed: u64) {
        let mut rng = SplitMix64(rng_seed);
        let mut bytes = Vec::new();
        for record in &self.pending {
            encode_record(record, &mut bytes);
        }
        let tear = !bytes.is_empty() && rng.next().is_multiple_of(2);
        let persisted_bytes = if tear {
            1 + (rng.next() % bytes.len() as u64) as usize
        } else {
            0
        };
        bytes.truncate(persisted_bytes);
        if !bytes.is_empty() && rng.next().is_multiple_of(4) {
            let at = (rng.next() % bytes.len() as u64) as usize;
            bytes[at] ^= 1 << (rng.next() % 8);
        }
        self.crash_tail = bytes;
        self.pending.clear();
        self.crashed = true;
    }

    /// Restarts after `crash` (or a clean stop, losing unsynced records):
    /// decodes what the crash left exactly as `FileLog::open` would and
    /// returns the replay.
    pub fn recover(&mut self) -> Replay {
        let tail = std::mem::take(&mut self.crash_tail);
        let mut offset = 0;
        while let Decoded::Record { record, bytes } = decode_record(&tail[offset..]) {
            self.push_durable(record);
            offset += bytes;
        }
        let torn_tail_bytes = tail[offset..]
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |last| last as u64 + 1);
        self.pending.clear();
        self.failed = false;
        self.crashed = false;
        self.fail_next_sync = false;
        // mark_compactable calls are in-memory only, as with FileLog.
        self.compaction = CompactionState::default();
        let mut builder = ReplayBuilder::default();
        for durable in &self.durable {
            self.compaction
                .note_durable(durable.unit.seq, &durable.record);
            builder.push(durable.record.clone());
        }
        builder.finish(torn_tail_bytes)
    }

    fn push_durable(&mut self, record: Record) {
        let mut unit = UnitSummary::new(self.next_unit_seq);
        self.next_unit_seq += 1;
        unit.note(&record);
        self.durable.push_back(DurableRecord { unit, record });
    }

    fn check_usable(&self) -> Result<(), WalError> {
        if self.failed || self.crashed {
            return Err(WalError::Failed);
        }
        Ok(())
    }
}

impl LogStore for SimLog {
    fn append(&mut self, records: &[Record]) -> Result<(), WalError> {
        self.check_usable()?;
        check_payload_bounds(records)?;
        self.pending.extend_from_slice(records);
        Ok(())
    }

    fn sync(&mut self) -> Result<(), WalError> {
        self.check_usable()?;
        self.syncs += 1;
        if self.fail_next_sync {
            self.fail_next_sync = false;
            self.failed = true;
            return Err(WalError::InjectedSyncFailure);
        }
        for record in std::mem::take(&mut self.pending) {
            self.push_durable(record);
            if let Some(durable) = self.durable.back() {
                self.compaction
                    .note_durable(durable.unit.seq, &durable.record);
            }
        }
        Ok(())
    }

    fn mark_compactable(&mut self, partition: u32, index: u64) -> Result<(), WalError> {
        self.check_usable()?;
        self.compaction.mark_compactable(partition, index);
        while let Some(oldest) = self.durable.front() {
            if !self.compaction.is_compactable(&oldest.unit) {
                break;
            }
            self.durable.pop_front();
        }
        Ok(())
    }
}

/// A tiny deterministic generator so a seed replays exactly without a
/// dependency (Steele, Lea, Flood: SplitMix64).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
