//! What a simulated client heard, in the order it heard it, and the check
//! of ZooKeeper's watch guarantees against the writes acknowledged.
//!
//! ZooKeeper sends a connection's events and replies in zxid order, so a
//! client hears a watch's event before the reply to any read that sees the
//! change, and before any reply that sees a later write (the order is
//! causal). The simulated clients write keys of their own, one writer per
//! key, so a value names its write and, once acknowledged, its zxid. A
//! client holds at most one data watch per key, set by a read that saw
//! some value; the change that fires it is the first write past that
//! value.

use std::collections::{BTreeMap, HashMap};

use stoa_proto::opcode::EventType;
use stoa_proto::records::WatcherEvent;
use stoa_proto::request::Request;

/// (owner, key): the key `/c{owner}/k{key}`.
pub(crate) type Key = (usize, usize);

/// The key a path names, if it is one of the clients' keys.
fn key_of(path: &str) -> Option<Key> {
    let (owner, key) = path.strip_prefix("/c")?.split_once("/k")?;
    Some((owner.parse().ok()?, key.parse().ok()?))
}

/// The zxid of every acknowledged write, by key and value.
pub(crate) type AckedWrites = HashMap<Key, BTreeMap<usize, i64>>;

/// Client `c`'s write of value `index` to its `key` was acknowledged at
/// `zxid`: `acked` is the client's newest acknowledged value of the key,
/// which its acknowledgements must raise.
pub(crate) fn record_ack(
    (seed, c): (u64, usize),
    acked: &mut Option<usize>,
    (key, index, zxid): (usize, usize, i64),
    writes_acked: &mut AckedWrites,
) {
    assert!(
        acked.is_none_or(|a| a < index),
        "seed {seed}: client {c} acks out of order"
    );
    *acked = Some(index);
    writes_acked
        .entry((c, key))
        .or_default()
        .insert(index, zxid);
}

/// What stays ordered for a fast session: its events and reads are ordered
/// only within a partition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lanes {
    /// The partition of each owner's keys (where each owner's keys stay on
    /// one partition).
    Owners(Vec<usize>),
    /// Each key alone (where groups move or nest, so that no partition is
    /// known for good).
    Keys,
}

/// One thing a client heard.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Heard {
    /// A read that set a data watch answered, seeing `seen` (the reply
    /// itself comes first, as `Replied`).
    Armed { key: Key, seen: Option<usize> },
    /// The watch on `key` fired.
    Fired { key: Key },
    /// A successful reply at `zxid`: a read's, with each key it read and
    /// the value it saw, or a write's (no reads).
    Replied {
        reads: Vec<(Key, Option<usize>)>,
        zxid: i64,
    },
    /// The session expired: its watches went with it.
    Expired,
}

/// A simulated client's side of its data watches: those it holds, the
/// newest event's zxid on its connection, and what it heard in order.
#[derive(Default)]
pub(crate) struct ClientWatches {
    /// Per key watched: the value the read that set the watch saw, and
    /// that read's zxid.
    pub held: BTreeMap<Key, (Option<usize>, i64)>,
    /// A session that opted into fast reads or fast watches
    /// (`stoa_tree::FAST`): which keys' events and reads stay ordered with
    /// each other.
    pub lanes: Option<Lanes>,
    /// Fast reads: a reply's zxid is at least what the client saw, which
    /// the state read may be below, so an event may come for a change
    /// below the zxid of the read that set its watch.
    pub reads_ahead: bool,
    /// The newest event's zxid on the connection, per partition for a fast
    /// session (else all under 0).
    last_event_zxid: BTreeMap<Key, i64>,
    /// Replies, events and watches set, in the order heard.
    pub heard: Vec<Heard>,
}

impl ClientWatches {
    /// A fast session's (`lanes`, and whether it reads fast), or a plain
    /// one's (None).
    pub fn fast(lanes: Option<Lanes>, reads_ahead: bool) -> Self {
        ClientWatches {
            lanes,
            reads_ahead,
            ..ClientWatches::default()
        }
    }

    /// A successful reply at `zxid`: a read's with what it saw of each key,
    /// or a write's (no reads).
    pub fn replied(&mut self, reads: Vec<(Key, Option<usize>)>, zxid: i64) {
        self.heard.push(Heard::Replied { reads, zxid });
    }

    /// A read that set a data watch on `key` answered at `zxid`, seeing
    /// `seen` (after its `replied`): the first change past it fires the
    /// watch (a watch already held stays as it was).
    pub fn arm(&mut self, key: Key, seen: Option<usize>, zxid: i64) {
        self.held.entry(key).or_insert((seen, zxid));
        self.heard.push(Heard::Armed { key, seen });
    }

    /// An event at `zxid`: it must be a data change of a key watched here,
    /// after the read that set the watch and no older than the
    /// connection's event before it.
    pub fn fired(&mut self, zxid: i64, event: &WatcherEvent) -> Result<Key, String> {
        let path = &event.path;
        let key = key_of(path).ok_or_else(|| format!("an event for {path}"))?;
        if event.kind != EventType::NodeDataChanged as i32 {
            return Err(format!("an event of type {} for {path}", event.kind));
        }
        let (_, since) = (self.held.remove(&key))
            .ok_or_else(|| format!("an event for {path}, which it holds no watch on"))?;
        if zxid <= since && !self.reads_ahead {
            return Err(format!(
                "an event for {path} at {zxid:#x}, its watch set at {since:#x}"
            ));
        }
        let last = self
            .last_event_zxid
            .entry(lane(self.lanes.as_ref(), key))
            .or_default();
        if zxid < *last {
            return Err(format!(
                "events out of zxid order: {zxid:#x} after {last:#x}"
            ));
        }
        *last = zxid;
        self.heard.push(Heard::Fired { key });
        Ok(key)
    }

    /// A new connection: events are ordered afresh on it.
    pub fn new_connection(&mut self) {
        self.last_event_zxid.clear();
    }

    /// The session expired: its watches went with it.
    pub fn expired(&mut self) {
        self.held.clear();
        self.heard.push(Heard::Expired);
    }

    /// The setWatches a client sends first on a new connection (xid -8) to
    /// restore the watches it holds, for the changes after the newest zxid
    /// it saw, as ZooKeeper's clients do; None if it holds none.
    pub fn restoring(&self, last_zxid: i64) -> Option<Request> {
        let paths: Vec<String> = (self.held.keys())
            .map(|&(owner, key)| format!("/c{owner}/k{key}"))
            .collect();
        (!paths.is_empty()).then(|| super::wire::set_watches(last_zxid, paths))
    }

    /// Settled, a connected client has heard every event: each watch it
    /// still holds is on a key whose value (`value_of`) is the one its
    /// read saw.
    pub fn check_unchanged(&self, value_of: impl Fn(Key) -> Option<usize>) -> Result<(), String> {
        for (&key, &(seen, since)) in &self.held {
            let now = value_of(key);
            if now != seen {
                return Err(format!(
                    "its watch on /c{}/k{} (set at {since:#x}, seeing {seen:?}) never fired; the key is {now:?}",
                    key.0, key.1
                ));
            }
        }
        Ok(())
    }

    /// Events heard.
    pub fn fired_count(&self) -> usize {
        (self.heard.iter())
            .filter(|h| matches!(h, Heard::Fired { .. }))
            .count()
    }
}

/// What `key`'s events and reads are ordered with, for a fast session
/// (`lanes`); else one order for all.
fn lane(lanes: Option<&Lanes>, key: Key) -> Key {
    match lanes {
        None => (0, 0),
        Some(Lanes::Owners(partitions)) => (partitions[key.0], usize::MAX),
        Some(Lanes::Keys) => key,
    }
}

/// The first acknowledged write of `key` past value `seen`: (value, zxid).
fn first_change_after(acked: &AckedWrites, key: Key, seen: Option<usize>) -> Option<(usize, i64)> {
    let first = seen.map_or(0, |v| v + 1);
    let writes = acked.get(&key)?;
    writes.range(first..).next().map(|(&v, &at)| (v, at))
}

/// Checks one client's log: no reply sees a change to a watched key, or
/// anything written after such a change, before the watch fires. A read
/// sees up to the newest acknowledged write among the values it read; a
/// write's reply, up to its own zxid. A fast session's (`lanes`) reads
/// are held to it only for watched keys of their own partition: what it
/// gave up is the order across partitions.
pub(crate) fn check_watch_order(
    seed: u64,
    client: usize,
    heard: &[Heard],
    acked: &AckedWrites,
    lanes: Option<&Lanes>,
) -> Result<(), String> {
    let mut armed: BTreeMap<Key, Option<usize>> = BTreeMap::new();
    // Per key, the value its watch was set at when the watch fired: once
    // the event is heard, no reply may read the key as it was before the
    // change (ZooKeeper answers a connection's requests and sends its
    // events in one order, so a read answered after the event saw the
    // change). Fast sessions are held to their partitions' order only.
    let mut fired_past: BTreeMap<Key, Option<usize>> = BTreeMap::new();
    for (at, entry) in heard.iter().enumerate() {
        match entry {
            Heard::Armed { key, seen } => {
                // A second read's watch is the same watch: the first
                // change past the earlier read fires it.
                armed.entry(*key).or_insert(*seen);
            }
            Heard::Fired { key } => {
                let Some(seen) = armed.remove(key) else {
                    return Err(format!(
                        "seed {seed}: client {client} heard an event for /c{}/k{} it held no watch on (entry {at})",
                        key.0, key.1
                    ));
                };
                if lanes.is_none() {
                    fired_past.insert(*key, seen);
                }
            }
            Heard::Expired => {
                armed.clear();
                fired_past.clear();
            }
            Heard::Replied { reads, zxid } => {
                for (key, value) in reads {
                    if let Some(&before) = fired_past.get(key) {
                        if *value <= before {
                            return Err(format!(
                                "seed {seed}: client {client} read /c{}/k{} = {value:?} after the event of its watch set at {before:?} (entry {at})",
                                key.0, key.1
                            ));
                        }
                    }
                    if let Some(&seen) = armed.get(key) {
                        if *value > seen {
                            return Err(format!(
                                "seed {seed}: client {client} read /c{}/k{} = {value:?} before the event of its watch set at {seen:?} (entry {at})",
                                key.0, key.1
                            ));
                        }
                    }
                }
                let seen_upto = |watched: Key| {
                    if reads.is_empty() {
                        return Some(*zxid);
                    }
                    let zxid_of = |(key, value): &(Key, Option<usize>)| {
                        acked.get(key)?.get(&(*value)?).copied()
                    };
                    let ordered = |(key, _): &&(Key, Option<usize>)| {
                        lanes.is_none() || lane(lanes, *key) == lane(lanes, watched)
                    };
                    reads.iter().filter(ordered).filter_map(zxid_of).max()
                };
                for (key, seen) in &armed {
                    let Some(seen_upto) = seen_upto(*key) else {
                        continue;
                    };
                    if let Some((value, changed)) = first_change_after(acked, *key, *seen) {
                        if changed <= seen_upto {
                            return Err(format!(
                                "seed {seed}: client {client}'s reply at {zxid:#x} saw up to {seen_upto:#x}, \
                                 but its watch on /c{}/k{} (set at {seen:?}) had not fired for value {value} \
                                 written at {changed:#x} (entry {at})",
                                key.0, key.1
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: Key = (0, 0);
    const Y: Key = (3, 1);

    /// X written to 1 at 0x10, Y written to 1 at 0x20 (after X).
    fn acked() -> AckedWrites {
        let mut acked = AckedWrites::new();
        acked.insert(X, BTreeMap::from([(0, 0x5), (1, 0x10)]));
        acked.insert(Y, BTreeMap::from([(0, 0x6), (1, 0x20)]));
        acked
    }

    fn check(heard: &[Heard]) -> Result<(), String> {
        check_watch_order(1, 2, heard, &acked(), None)
    }

    fn read(key: Key, value: usize, zxid: i64) -> Heard {
        Heard::Replied {
            reads: vec![(key, Some(value))],
            zxid,
        }
    }

    fn armed_on_x() -> Vec<Heard> {
        vec![
            read(X, 0, 0x8),
            Heard::Armed {
                key: X,
                seen: Some(0),
            },
        ]
    }

    #[test]
    fn an_event_before_the_changes_reads_passes() {
        let mut heard = armed_on_x();
        heard.extend([Heard::Fired { key: X }, read(Y, 1, 0x20), read(X, 1, 0x20)]);
        assert_eq!(check(&heard), Ok(()));
    }

    #[test]
    fn reading_the_change_before_its_event_fails() {
        let mut heard = armed_on_x();
        heard.extend([read(X, 1, 0x10), Heard::Fired { key: X }]);
        assert!(check(&heard).unwrap_err().contains("before the event"));
    }

    #[test]
    fn reading_a_later_write_of_another_key_before_the_event_fails() {
        let mut heard = armed_on_x();
        heard.extend([read(Y, 1, 0x20), Heard::Fired { key: X }]);
        assert!(check(&heard).unwrap_err().contains("had not fired"));
    }

    #[test]
    fn a_fast_session_is_held_to_the_order_within_a_partition_only() {
        // X's owner on partition 0, Y's on 1 (owner 3); then both on 0.
        let apart = Lanes::Owners(vec![0, 0, 0, 1]);
        let mut heard = armed_on_x();
        heard.extend([read(Y, 1, 0x20), Heard::Fired { key: X }]);
        assert_eq!(
            check_watch_order(1, 2, &heard, &acked(), Some(&apart)),
            Ok(())
        );
        let each = Some(&Lanes::Keys);
        assert_eq!(check_watch_order(1, 2, &heard, &acked(), each), Ok(()));
        let together = Lanes::Owners(vec![0, 0, 0, 0]);
        let broken = check_watch_order(1, 2, &heard, &acked(), Some(&together));
        assert!(broken.unwrap_err().contains("had not fired"));
        // Its own key's change is never read before the event.
        let mut heard = armed_on_x();
        heard.extend([read(X, 1, 0x10), Heard::Fired { key: X }]);
        let broken = check_watch_order(1, 2, &heard, &acked(), Some(&apart));
        assert!(broken.unwrap_err().contains("before the event"));
        // Events: in zxid order within a partition, in any order across.
        let mut watches = ClientWatches {
            lanes: Some(apart.clone()),
            ..ClientWatches::default()
        };
        let event = |path: &str| WatcherEvent {
            kind: EventType::NodeDataChanged as i32,
            state: 3,
            path: path.into(),
        };
        for key in [X, Y, (1, 0)] {
            watches.arm(key, Some(0), 0x1);
        }
        assert_eq!(watches.fired(0x20, &event("/c3/k1")), Ok(Y));
        assert_eq!(watches.fired(0x10, &event("/c0/k0")), Ok(X));
        let late = watches.fired(0x0f, &event("/c1/k0"));
        assert!(late.unwrap_err().contains("out of zxid order"));
    }

    #[test]
    fn a_write_reply_past_the_change_before_the_event_fails() {
        let mut heard = armed_on_x();
        heard.push(Heard::Replied {
            reads: Vec::new(),
            zxid: 0x11,
        });
        assert!(check(&heard).unwrap_err().contains("had not fired"));
        // One below the change does not see it.
        let mut heard = armed_on_x();
        heard.push(Heard::Replied {
            reads: Vec::new(),
            zxid: 0xf,
        });
        assert_eq!(check(&heard), Ok(()));
    }

    #[test]
    fn an_unasked_event_fails_and_expiry_drops_watches() {
        assert!(check(&[Heard::Fired { key: X }])
            .unwrap_err()
            .contains("no watch"));
        let mut heard = armed_on_x();
        heard.extend([Heard::Expired, read(X, 1, 0x30)]);
        assert_eq!(check(&heard), Ok(()));
        heard.push(Heard::Fired { key: X });
        assert!(check(&heard).is_err());
    }

    #[test]
    fn reading_the_value_before_the_change_after_its_event_fails() {
        let mut heard = armed_on_x();
        heard.push(Heard::Fired { key: X });
        let stale = read(X, 0, 0x103);
        assert!(check(&[heard.clone(), vec![read(X, 1, 0x104)]].concat()).is_ok());
        let err = check(&[heard, vec![stale]].concat()).unwrap_err();
        assert!(err.contains("after the event"), "{err}");
    }

    #[test]
    fn a_second_read_keeps_the_first_watch() {
        let mut heard = armed_on_x();
        // Read again, unchanged, and watched again: one watch, which the
        // change must still fire before it is read.
        heard.extend([
            read(X, 0, 0x9),
            Heard::Armed {
                key: X,
                seen: Some(0),
            },
            read(X, 1, 0x12),
        ]);
        assert!(check(&heard).is_err());
    }
}
