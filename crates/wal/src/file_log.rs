//! `FileLog`: the log on real files, a directory of preallocated segments.
//!
//! Durability protocol (docs/format-wal.md, "Crash safety"):
//! - `append` only encodes into a buffer; `sync` issues one positioned write
//!   of the buffer and one `fdatasync`.
//! - A segment is created (reserved, header written, fsynced, directory
//!   fsynced) only after the previous segment's data is fdatasynced, so only
//!   the last segment can end in a torn write.
//! - With `prepare_next_segment`, a helper thread zero-fills the next
//!   segment as a spare while the active one fills up; rollover then only
//!   writes its header and renames it. Written blocks make each record's
//!   fdatasync cheaper than fallocated ones would (no extent conversion),
//!   and the zero-filling stays off the writer's path.
//! - Segments a durable snapshot marker makes compactable are deleted on a
//!   helper thread, oldest first with a directory fsync after each, so the
//!   writer never waits for an unlink; open deletes any the helper did not
//!   get to.
//! - On open, a bad record in the last segment is a torn tail: the bytes
//!   after the last valid record are zeroed before anything new is written,
//!   so stale fragments can never be read as data later. A bad record in
//!   any other segment is corruption and open fails.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::compaction::{CompactionState, UnitSummary};
use crate::error::WalError;
use crate::record::{encode_record, Record, RecordKind, RECORD_BODY_BYTES_MAX, RECORD_FRAME_BYTES};
use crate::replay::{Replay, ReplayBuilder};
use crate::segment::{
    create_segment, install_spare, lock_dir, parse_segment_file_name, prepare_spare, reserve,
    scan_records, segment_path, spare_path, sync_dir, Preallocate, ScanStop, SegmentHeader,
    SEGMENT_HEADER_BYTES,
};
use crate::store::{check_payload_bounds, LogStore};

pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
pub const SEGMENT_BYTES_MIN: u64 = 1024;
pub const SEGMENT_BYTES_MAX: u64 = 1024 * 1024 * 1024;
/// A segment grows past its reserved size only to hold one oversized
/// record, so no valid segment file is larger than this; open refuses to
/// read a larger one into memory.
const SEGMENT_FILE_BYTES_MAX: u64 =
    SEGMENT_BYTES_MAX + SEGMENT_HEADER_BYTES + (RECORD_FRAME_BYTES + RECORD_BODY_BYTES_MAX) as u64;
/// The sequence number of the very first segment of a log.
const SEGMENT_SEQ_FIRST: u64 = 1;
/// With `prepare_next_segment`, a segment made on the writer's path (a new
/// log's first, or when the spare is not ready) is zero-filled on the spot,
/// so it is kept this small: milliseconds to write.
const BRIDGE_SEGMENT_BYTES_MAX: u64 = 8 * 1024 * 1024;
/// The spare is started once the active segment holds this many bytes of
/// records (or is half full): a log that stays small, like most test
/// servers', never writes one, and a busy log has it ready in time.
const SPARE_START_BYTES: u64 = 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileLogOptions {
    /// Bytes reserved per segment, header included. A record larger than a
    /// whole segment gets an otherwise empty segment that grows to fit it.
    pub segment_bytes: u64,
    /// How a segment created on the writer's path is reserved.
    pub preallocate: Preallocate,
    /// Zero-fill the next segment on a helper thread (see module docs).
    pub prepare_next_segment: bool,
}

impl Default for FileLogOptions {
    fn default() -> Self {
        FileLogOptions {
            segment_bytes: SEGMENT_BYTES_DEFAULT,
            preallocate: Preallocate::Fallocate,
            prepare_next_segment: true,
        }
    }
}

impl FileLogOptions {
    /// Size and preallocation of a segment made on the writer's path.
    fn inline_segment(&self) -> (u64, Preallocate) {
        if self.prepare_next_segment {
            let bytes = self.segment_bytes.min(BRIDGE_SEGMENT_BYTES_MAX);
            (bytes, Preallocate::ZeroFill)
        } else {
            (self.segment_bytes, self.preallocate)
        }
    }

    fn validate(&self) -> Result<(), WalError> {
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&self.segment_bytes) {
            return Err(WalError::InvalidOptions(
                "segment_bytes outside [SEGMENT_BYTES_MIN, SEGMENT_BYTES_MAX]",
            ));
        }
        Ok(())
    }
}

pub struct FileLog {
    dir: PathBuf,
    options: FileLogOptions,
    /// Held open for the advisory lock on the directory.
    _lock: File,
    /// Oldest first; the last is the active segment. Never empty.
    segments: VecDeque<UnitSummary>,
    active: File,
    /// Header plus records written to the active segment; the next write
    /// goes here. Invariant: `>= SEGMENT_HEADER_BYTES`.
    active_end_bytes: u64,
    /// The active segment's reserved size: a record that does not fit
    /// starts the next segment (unless the active one is empty).
    active_capacity_bytes: u64,
    /// The helper thread preparing the spare segment, if one runs or ran.
    spare: Option<JoinHandle<Result<(), WalError>>>,
    /// Tells the spare's helper to give up (the log is being dropped).
    spare_stop: Arc<AtomicBool>,
    /// The helper thread deleting the oldest segments, if one runs or ran:
    /// how many it deleted (in order) and why it stopped short, if it did.
    deleting: Option<JoinHandle<(usize, Result<(), WalError>)>>,
    /// Rollovers that found the spare ready.
    spares_used: u64,
    /// Records appended but not yet written, encoded.
    pending: Vec<u8>,
    /// HardState and Snapshot records (payload dropped) awaiting `sync`,
    /// with their segment: compaction may rely on them only once durable.
    pending_state: Vec<(u64, Record)>,
    compaction: CompactionState,
    /// Set by any failed write or sync; fail-stop from then on.
    failed: bool,
}

impl FileLog {
    /// Opens (or creates) the log in `dir`, repairs a torn tail, deletes
    /// fully compactable segments and returns what survived.
    pub fn open(
        dir: impl AsRef<Path>,
        options: FileLogOptions,
    ) -> Result<(FileLog, Replay), WalError> {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        create_dir_durably(&dir)?;
        let lock = lock_dir(&dir)?;
        remove_spare(&dir)?;
        let mut seqs = list_segments(&dir)?;
        let unfinished_seq = drop_unfinished_last_segment(&dir, &mut seqs)?;

        let mut opened = OpenState::default();
        for (position, &seq) in seqs.iter().enumerate() {
            let is_last = position + 1 == seqs.len();
            opened.load_segment(&dir, seq, is_last, &options)?;
        }
        let (active, active_end_bytes, active_capacity_bytes) = match seqs.last() {
            Some(&seq) => {
                let path = segment_path(&dir, seq);
                let file = open_rw(&path)?;
                let capacity = file
                    .metadata()
                    .map_err(|e| WalError::io("stat segment", &path, e))?
                    .len();
                let end = opened.last_end_bytes.unwrap_or(SEGMENT_HEADER_BYTES);
                (file, end, capacity)
            }
            None => {
                let seq = unfinished_seq.unwrap_or(SEGMENT_SEQ_FIRST);
                let header = SegmentHeader {
                    seq,
                    prev_end_bytes: 0,
                };
                let (bytes, preallocate) = options.inline_segment();
                let file = create_segment(&dir, header, bytes, preallocate)?;
                opened.segments.push_back(UnitSummary::new(seq));
                (file, SEGMENT_HEADER_BYTES, bytes)
            }
        };
        let replay = opened.builder.finish(opened.torn_tail_bytes);
        let mut log = FileLog {
            dir,
            options,
            _lock: lock,
            segments: opened.segments,
            active,
            active_end_bytes,
            active_capacity_bytes,
            spare: None,
            spare_stop: Arc::new(AtomicBool::new(false)),
            deleting: None,
            spares_used: 0,
            pending: Vec::new(),
            pending_state: Vec::new(),
            compaction: opened.compaction,
            failed: false,
        };
        log.delete_compactable_prefix()?;
        Ok((log, replay))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sequence numbers of the segments on disk, oldest first.
    pub fn segment_seqs(&self) -> Vec<u64> {
        self.segments.iter().map(|s| s.seq).collect()
    }

    /// How many rollovers found the next segment already prepared.
    pub fn spares_used(&self) -> u64 {
        self.spares_used
    }

    fn active_seq(&self) -> u64 {
        match self.segments.back() {
            Some(summary) => summary.seq,
            None => unreachable!("a FileLog always has an active segment"),
        }
    }

    fn active_summary(&mut self) -> &mut UnitSummary {
        match self.segments.back_mut() {
            Some(summary) => summary,
            None => unreachable!("a FileLog always has an active segment"),
        }
    }

    /// Writes the pending bytes at the end of the active segment and
    /// fdatasyncs them.
    fn write_pending(&mut self) -> Result<(), WalError> {
        assert!(self.active_end_bytes >= SEGMENT_HEADER_BYTES);
        if self.pending.is_empty() {
            return Ok(());
        }
        let path = segment_path(&self.dir, self.active_seq());
        self.active
            .write_all_at(&self.pending, self.active_end_bytes)
            .map_err(|e| WalError::io("write segment", &path, e))?;
        self.active
            .sync_data()
            .map_err(|e| WalError::io("fdatasync segment", &path, e))?;
        self.active_end_bytes += self.pending.len() as u64;
        self.pending.clear();
        let written = self.active_end_bytes - SEGMENT_HEADER_BYTES;
        if written >= SPARE_START_BYTES.min(self.active_capacity_bytes / 2) {
            self.start_spare();
        }
        Ok(())
    }

    /// Seals the active segment (data synced first, see module comment) and
    /// starts the next one: the spare if it is ready, else one made here.
    fn roll_over(&mut self) -> Result<(), WalError> {
        self.write_pending()?;
        let header = SegmentHeader {
            seq: self.active_seq() + 1,
            prev_end_bytes: self.active_end_bytes,
        };
        if self.take_ready_spare() {
            self.spares_used += 1;
            self.active = install_spare(&self.dir, header)?;
            self.active_capacity_bytes = self.options.segment_bytes;
        } else {
            let (bytes, preallocate) = self.options.inline_segment();
            self.active = create_segment(&self.dir, header, bytes, preallocate)?;
            self.active_capacity_bytes = bytes;
        }
        self.active_end_bytes = SEGMENT_HEADER_BYTES;
        self.segments.push_back(UnitSummary::new(header.seq));
        Ok(())
    }

    /// Starts preparing the spare unless one is under way or ready.
    fn start_spare(&mut self) {
        if !self.options.prepare_next_segment || self.spare.is_some() {
            return;
        }
        let path = spare_path(&self.dir);
        let bytes = self.options.segment_bytes;
        let stop = Arc::clone(&self.spare_stop);
        let spawned = std::thread::Builder::new()
            .name("stoa-wal-spare".into())
            .spawn(move || prepare_spare(&path, bytes, &stop));
        // Without the thread, segments are made on the writer's path.
        self.spare = spawned.ok();
    }

    /// True when the spare is complete on disk. Never waits: a spare still
    /// being written is left to finish for the next rollover. A failed one
    /// is forgotten (the segment is then made here, which reports any
    /// lasting disk error itself).
    fn take_ready_spare(&mut self) -> bool {
        match self.spare.take() {
            Some(thread) if thread.is_finished() => matches!(thread.join(), Ok(Ok(()))),
            still_running => {
                self.spare = still_running;
                false
            }
        }
    }

    fn append_one(&mut self, record: &Record) -> Result<(), WalError> {
        let used_bytes = self.active_end_bytes + self.pending.len() as u64;
        let record_bytes = record.encoded_bytes() as u64;
        let segment_is_empty = used_bytes == SEGMENT_HEADER_BYTES;
        if used_bytes + record_bytes > self.active_capacity_bytes && !segment_is_empty {
            self.roll_over()?;
        }
        encode_record(record, &mut self.pending);
        self.active_summary().note(record);
        if record.kind != RecordKind::Entry {
            let seq = self.active_seq();
            let header_only = Record {
                kind: record.kind,
                partition: record.partition,
                term: record.term,
                index: record.index,
                payload: Vec::new(),
            };
            self.pending_state.push((seq, header_only));
        }
        Ok(())
    }

    /// Deletes the oldest segments while every record in them is
    /// compactable. Never the active one. Not fail-stop: a failed delete
    /// loses nothing and is retried on the next call.
    fn delete_compactable_prefix(&mut self) -> Result<(), WalError> {
        // One deleter at a time keeps deletions in order.
        self.reap_deletions(true);
        let (deleted, result) = delete_segments(&self.dir, &self.compactable_prefix());
        self.segments.drain(..deleted);
        result
    }

    /// The compactable prefix (never the active segment), oldest first.
    fn compactable_prefix(&self) -> Vec<u64> {
        let deletable = self.segments.len().saturating_sub(1);
        self.segments
            .iter()
            .take(deletable)
            .take_while(|unit| self.compaction.is_compactable(unit))
            .map(|unit| unit.seq)
            .collect()
    }

    /// Starts deleting the compactable prefix on a helper thread, unless a
    /// deletion is still under way (the next snapshot marker retries).
    fn delete_in_background(&mut self) {
        if self.deleting.is_some() {
            return;
        }
        let seqs = self.compactable_prefix();
        if seqs.is_empty() {
            return;
        }
        let dir = self.dir.clone();
        let spawned = std::thread::Builder::new()
            .name("stoa-wal-delete".into())
            .spawn(move || delete_segments(&dir, &seqs));
        // Without the thread the segments wait for the next open.
        self.deleting = spawned.ok();
    }

    /// Forgets the segments the helper deleted, once it is done (or waits
    /// for it). A failed deletion loses nothing; those segments stay listed
    /// and are tried again later.
    fn reap_deletions(&mut self, wait: bool) {
        let Some(thread) = self.deleting.take() else {
            return;
        };
        if !wait && !thread.is_finished() {
            self.deleting = Some(thread);
            return;
        }
        if let Ok((deleted, _)) = thread.join() {
            assert!(deleted < self.segments.len(), "deleted the active segment");
            self.segments.drain(..deleted);
        }
    }
}

/// Deletes segments `seqs` in order, each followed by a directory fsync
/// (which keeps deletions in order on disk, so a crash never leaves a hole
/// in the sequence); returns how many went and the error that stopped it.
fn delete_segments(dir: &Path, seqs: &[u64]) -> (usize, Result<(), WalError>) {
    for (deleted, &seq) in seqs.iter().enumerate() {
        let path = segment_path(dir, seq);
        let result = fs::remove_file(&path)
            .map_err(|e| WalError::io("delete segment", &path, e))
            .and_then(|()| sync_dir(dir));
        if result.is_err() {
            return (deleted, result);
        }
    }
    (seqs.len(), Ok(()))
}

impl Drop for FileLog {
    fn drop(&mut self) {
        // The helpers write into this directory: done before the lock goes.
        // An unfinished spare is abandoned (open deletes it).
        self.spare_stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.spare.take() {
            let _ = thread.join();
        }
        self.reap_deletions(true);
    }
}

/// A spare left by an earlier run may be incomplete; a new one is made.
fn remove_spare(dir: &Path) -> Result<(), WalError> {
    let path = spare_path(dir);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(WalError::io("delete spare segment", &path, e)),
    }
}

impl LogStore for FileLog {
    fn append(&mut self, records: &[Record]) -> Result<(), WalError> {
        if self.failed {
            return Err(WalError::Failed);
        }
        check_payload_bounds(records)?;
        for record in records {
            if let Err(e) = self.append_one(record) {
                self.failed = true;
                return Err(e);
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), WalError> {
        if self.failed {
            return Err(WalError::Failed);
        }
        if let Err(e) = self.write_pending() {
            self.failed = true;
            return Err(e);
        }
        let mut snapshot_marked = false;
        for (seq, record) in self.pending_state.drain(..) {
            snapshot_marked |= record.kind == RecordKind::Snapshot;
            self.compaction.note_durable(seq, &record);
        }
        self.reap_deletions(false);
        if snapshot_marked {
            self.delete_in_background();
        }
        Ok(())
    }

    fn mark_compactable(&mut self, partition: u32, index: u64) -> Result<(), WalError> {
        if self.failed {
            return Err(WalError::Failed);
        }
        self.compaction.mark_compactable(partition, index);
        self.delete_compactable_prefix()
    }
}

/// What open accumulates while it reads segments in order.
#[derive(Default)]
struct OpenState {
    builder: ReplayBuilder,
    compaction: CompactionState,
    segments: VecDeque<UnitSummary>,
    /// Where the records of the previously loaded segment ended.
    last_end_bytes: Option<u64>,
    torn_tail_bytes: u64,
}

impl OpenState {
    fn load_segment(
        &mut self,
        dir: &Path,
        seq: u64,
        is_last: bool,
        options: &FileLogOptions,
    ) -> Result<(), WalError> {
        let path = segment_path(dir, seq);
        let buf = read_segment(&path)?;
        let header = SegmentHeader::decode(&buf)
            .map_err(|why| WalError::corrupt(&path, 0, why.to_string()))?;
        if header.seq != seq {
            let reason = format!(
                "header names segment {} but the file name {seq}",
                header.seq
            );
            return Err(WalError::corrupt(&path, 16, reason));
        }
        if let Some(prev_end) = self.last_end_bytes {
            if header.prev_end_bytes != prev_end {
                let reason = format!(
                    "previous segment's records end at byte {prev_end} but this header \
                     says {}: data missing in the middle of the log",
                    header.prev_end_bytes
                );
                return Err(WalError::corrupt(&path, 24, reason));
            }
        }
        let mut summary = UnitSummary::new(seq);
        let (builder, compaction) = (&mut self.builder, &mut self.compaction);
        let scan = scan_records(&buf, |record| {
            summary.note(&record);
            compaction.note_durable(seq, &record);
            builder.push(record);
        });
        if let (ScanStop::Invalid(why), false) = (scan.stop, is_last) {
            let reason = format!("{} followed by later segments", why.describe());
            return Err(WalError::corrupt(&path, scan.valid_end_bytes, reason));
        }
        if is_last {
            let torn_bytes = nonzero_tail_bytes(&buf, scan.valid_end_bytes as usize);
            if torn_bytes > 0 {
                zero_tail(&path, scan.valid_end_bytes, buf.len() as u64, options)?;
            }
            self.torn_tail_bytes = torn_bytes;
        }
        self.last_end_bytes = Some(scan.valid_end_bytes);
        self.segments.push_back(summary);
        Ok(())
    }
}

/// Creates `dir` if missing and fsyncs its parent, so the log's directory
/// itself survives a crash right after the first acknowledged write.
fn create_dir_durably(dir: &Path) -> Result<(), WalError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|e| WalError::io("create log directory", dir, e))?;
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => Ok(()),
    }
}

/// Segment sequence numbers in `dir`, sorted, checked for holes.
fn list_segments(dir: &Path) -> Result<Vec<u64>, WalError> {
    let entries = fs::read_dir(dir).map_err(|e| WalError::io("list log directory", dir, e))?;
    let mut seqs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io("list log directory", dir, e))?;
        if let Some(seq) = entry.file_name().to_str().and_then(parse_segment_file_name) {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    for pair in seqs.windows(2) {
        if pair[1] != pair[0] + 1 {
            let reason = format!("segments {:#x}..{:#x} are missing", pair[0] + 1, pair[1]);
            return Err(WalError::corrupt(segment_path(dir, pair[1]), 0, reason));
        }
    }
    Ok(seqs)
}

/// A crash while creating a segment can leave its header unwritten. Such a
/// segment held no records (none are written before its header is synced),
/// so it is deleted and its seq returned for reuse. A bad header in front
/// of records is corruption.
fn drop_unfinished_last_segment(dir: &Path, seqs: &mut Vec<u64>) -> Result<Option<u64>, WalError> {
    let Some(&seq) = seqs.last() else {
        return Ok(None);
    };
    let path = segment_path(dir, seq);
    let buf = read_segment(&path)?;
    if SegmentHeader::decode(&buf).is_ok() {
        return Ok(None);
    }
    let first_record_start = (SEGMENT_HEADER_BYTES as usize).min(buf.len());
    if nonzero_tail_bytes(&buf, first_record_start) > 0 {
        return Err(WalError::corrupt(
            &path,
            0,
            "bad segment header in front of data".to_string(),
        ));
    }
    fs::remove_file(&path).map_err(|e| WalError::io("delete unfinished segment", &path, e))?;
    sync_dir(dir)?;
    seqs.pop();
    Ok(Some(seq))
}

fn read_segment(path: &Path) -> Result<Vec<u8>, WalError> {
    let metadata = fs::metadata(path).map_err(|e| WalError::io("stat segment", path, e))?;
    if metadata.len() > SEGMENT_FILE_BYTES_MAX {
        let reason = format!("segment file of {} bytes exceeds the bound", metadata.len());
        return Err(WalError::corrupt(path, 0, reason));
    }
    fs::read(path).map_err(|e| WalError::io("read segment", path, e))
}

fn open_rw(path: &Path) -> Result<File, WalError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| WalError::io("open segment", path, e))
}

/// Bytes from `from` to the last non-zero byte of `buf`: what a torn write
/// left behind.
fn nonzero_tail_bytes(buf: &[u8], from: usize) -> u64 {
    let tail = buf.get(from..).unwrap_or(&[]);
    tail.iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last as u64 + 1)
}

/// Replaces everything after `valid_end_bytes` with reserved zeros and
/// syncs, before anything new is written after the valid records.
fn zero_tail(
    path: &Path,
    valid_end_bytes: u64,
    file_bytes: u64,
    options: &FileLogOptions,
) -> Result<(), WalError> {
    let file = open_rw(path)?;
    file.set_len(valid_end_bytes)
        .map_err(|e| WalError::io("truncate torn tail", path, e))?;
    let reserved_bytes = file_bytes.max(options.segment_bytes);
    reserve(
        &file,
        path,
        valid_end_bytes,
        reserved_bytes,
        options.preallocate,
    )?;
    file.sync_all()
        .map_err(|e| WalError::io("fsync repaired segment", path, e))
}
