//! The partitions lent to the server's worker pool (`partition.threads`)
//! produce, byte for byte, what the engine produces applying them on its
//! own thread: the same workload through two engines of three partitions,
//! one with the pool and one without, gives the same replies, events and
//! WAL records, and the pool is used to prepare writes, handle the raft
//! groups' readies, apply the writes and serve reads; the one with the
//! pool is fed its requests decoded, as the server's readers decode them.
//! The one fed decoded requests also hands its replies and events out as
//! values, as to the server's writers on the I/O threads, which encode
//! them (`replies_encoded_by_writers`): encoded, they are the same bytes.
//! A third engine takes its output after every request, so that no write
//! or read waits in a batch: each connection is answered as by the other
//! two.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use stoa_core::client_frame::decode_frames;
use stoa_core::engine::{Engine, EngineConfig, Input, PartitionWorkers, Recovered};
use stoa_proto::frame::{encode_connect_request, encode_frames, encode_request, FrameDecoder};
use stoa_proto::opcode::OpCode;
use stoa_proto::records::{
    Acl, ConnectRequest, CreateRequest, GetDataRequest, Id, RequestHeader, SetDataRequest,
};
use stoa_proto::request::Request;
use stoa_server::partition_workers::PartitionPool;

const CONNS: u64 = 6;
const KEYS: usize = 60;

fn config() -> EngineConfig {
    EngineConfig {
        partitions: 3,
        partition_groups: vec!["/a".into(), "/b".into()],
        // No snapshot during the run.
        snap_count: 100_000_000,
        ..EngineConfig::default()
    }
}

/// The pool, counting the runs it was lent.
struct Counting {
    pool: PartitionPool,
    runs: Arc<AtomicU64>,
}

impl PartitionWorkers for Counting {
    fn threads(&self) -> usize {
        self.pool.threads()
    }

    fn run_all(&self, jobs: &mut [&mut (dyn FnMut() + Send)]) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.pool.run_all(jobs);
    }
}

/// What the engine sent each connection, and every WAL record, in order.
#[derive(Default, PartialEq, Eq)]
struct Transcript {
    sends: Vec<Vec<u8>>,
    records: Vec<u8>,
}

struct Driver {
    engine: Engine,
    seen: Transcript,
    /// Takes the output after every request: each write is prepared
    /// alone, as it arrives.
    flush_each: bool,
    /// Feeds requests decoded, as the server's readers do
    /// (`Input::Requests`), not as bytes, and takes replies as values, as
    /// its writers do.
    decoded: bool,
}

impl Driver {
    fn new(workers: Option<Box<dyn PartitionWorkers>>, flush_each: bool, decoded: bool) -> Driver {
        let config = EngineConfig {
            replies_encoded_by_writers: decoded,
            ..config()
        };
        let mut engine = Engine::new(
            config,
            vec![Recovered::empty(), Recovered::empty(), Recovered::empty()],
            1_700_000_000_000,
        )
        .unwrap();
        if let Some(workers) = workers {
            engine.lend_partitions(workers);
        }
        let mut driver = Driver {
            engine,
            seen: Transcript {
                sends: vec![Vec::new(); CONNS as usize + 1],
                records: Vec::new(),
            },
            flush_each,
            decoded,
        };
        driver.flush();
        driver
    }

    /// Carries out the output, acknowledging every persist at once (an
    /// infinitely fast disk), until the engine has nothing more to do.
    fn flush(&mut self) {
        loop {
            let out = self.engine.take_output();
            assert!(out.fatal.is_none(), "{:?}", out.fatal);
            let mut last: Vec<(u32, u64)> = Vec::new();
            for job in &out.persists {
                for record in &job.records {
                    self.seen
                        .records
                        .extend_from_slice(&format!("{record:?}").into_bytes());
                }
                last.retain(|(p, _)| *p != job.partition);
                last.push((job.partition, job.number));
            }
            assert!(
                if self.decoded {
                    out.sends.is_empty()
                } else {
                    out.frames.is_empty()
                },
                "bytes and frames mixed"
            );
            for (conn, bytes) in out.sends {
                self.seen.sends[conn as usize].extend_from_slice(&bytes);
            }
            for (conn, frames) in out.frames {
                encode_frames(&mut self.seen.sends[conn as usize], &frames);
            }
            if last.is_empty() {
                return;
            }
            for (partition, number) in last {
                self.engine.handle(Input::Persisted { partition, number });
            }
        }
    }

    fn frame(&mut self, conn: u64, xid: i32, op: OpCode, request: &Request) {
        let mut bytes = Vec::new();
        encode_request(
            &mut bytes,
            &RequestHeader {
                xid,
                kind: op as i32,
            },
            request,
        );
        if self.decoded {
            let frames = decode_frames(&FrameDecoder::new(1 << 20), &bytes, false);
            self.engine.handle(Input::Requests { conn, frames });
        } else {
            self.engine.handle(Input::Frames { conn, bytes });
        }
        if self.flush_each {
            self.flush();
        }
    }
}

fn key(i: usize) -> String {
    match i % 3 {
        0 => format!("/a/k{i}"),
        1 => format!("/b/k{i}"),
        _ => format!("/k{i}"),
    }
}

fn create(path: &str) -> Request {
    Request::Create(CreateRequest {
        path: path.into(),
        data: Some(b"0".to_vec()),
        acl: vec![Acl {
            perms: 31,
            id: Id {
                scheme: "world".into(),
                id: "anyone".into(),
            },
        }],
        flags: 0,
    })
}

/// Connections, the keys on three partitions, a watcher's data watches on
/// every key, then rounds in which every connection pipelines setData on
/// keys of every partition, some of them followed by a read of the key,
/// and a last burst of writes in one turn.
fn workload(d: &mut Driver) {
    let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    for conn in 1..=CONNS {
        d.engine.handle(Input::Accepted { conn, peer });
        let mut bytes = Vec::new();
        encode_connect_request(
            &mut bytes,
            &ConnectRequest {
                time_out: 30_000,
                passwd: vec![0; 16],
                ..Default::default()
            },
        );
        d.engine.handle(Input::Frames { conn, bytes });
        d.flush();
    }
    let mut xid = 1;
    for root in ["/a", "/b"] {
        d.frame(1, xid, OpCode::Create, &create(root));
        xid += 1;
    }
    for i in 0..KEYS {
        d.frame(1, xid, OpCode::Create, &create(&key(i)));
        xid += 1;
    }
    d.flush();
    // Connection CONNS watches every key's data.
    for i in 0..KEYS {
        let get = Request::GetData(GetDataRequest {
            path: key(i),
            watch: true,
        });
        d.frame(CONNS, xid, OpCode::GetData, &get);
        xid += 1;
    }
    d.flush();
    // Every connection reads every key, some with a watch: one turn's
    // reads, long enough to be served by the pool. A ping among them is
    // answered in its session's order, and the reads behind it after.
    for conn in 1..CONNS {
        for i in 0..KEYS {
            let get = Request::GetData(GetDataRequest {
                path: key(i),
                watch: (i + conn as usize).is_multiple_of(4),
            });
            d.frame(conn, xid, OpCode::GetData, &get);
            xid += 1;
            if i == 50 {
                d.frame(conn, -2, OpCode::Ping, &Request::Ping);
            }
        }
    }
    d.flush();
    for round in 0..20 {
        for conn in 1..CONNS {
            for n in 0..12 {
                let path = key((round * 7 + conn as usize * 13 + n) % KEYS);
                let set = Request::SetData(SetDataRequest {
                    path: path.clone(),
                    data: Some(format!("{round}-{conn}-{n}").into_bytes()),
                    version: -1,
                });
                d.frame(conn, xid, OpCode::SetData, &set);
                xid += 1;
                if (n + conn as usize).is_multiple_of(5) {
                    let get = Request::GetData(GetDataRequest { path, watch: false });
                    d.frame(conn, xid, OpCode::GetData, &get);
                    xid += 1;
                }
            }
        }
        d.flush();
    }
    // One burst of 300 writes in a turn: the groups' readies then carry
    // enough entries for a round of them to be lent.
    for conn in 1..CONNS {
        for i in 0..KEYS {
            let set = Request::SetData(SetDataRequest {
                path: key(i),
                data: Some(format!("burst-{conn}-{i}").into_bytes()),
                version: -1,
            });
            d.frame(conn, xid, OpCode::SetData, &set);
            xid += 1;
        }
    }
    d.flush();
}

#[test]
fn lent_partitions_answer_byte_for_byte_as_the_engines_own_thread() {
    let mut inline = Driver::new(None, false, false);
    workload(&mut inline);
    let runs = Arc::new(AtomicU64::new(0));
    let pool = Counting {
        pool: PartitionPool::start(2).unwrap(),
        runs: runs.clone(),
    };
    let mut lent = Driver::new(Some(Box::new(pool)), false, true);
    workload(&mut lent);
    let mut one_by_one = Driver::new(None, true, false);
    workload(&mut one_by_one);
    let stats = lent.engine.monitor().stats;
    assert!(
        stats.prep_batches_lent > 0
            && stats.apply_runs_lent > 0
            && stats.read_batches_lent > 0
            && stats.ready_rounds_lent > 0,
        "no batch, run or round of readies was long enough to be lent: {stats:?}"
    );
    assert_eq!(
        runs.load(Ordering::Relaxed),
        stats.prep_batches_lent
            + stats.apply_runs_lent
            + stats.read_batches_lent
            + stats.ready_rounds_lent
    );
    let alone = one_by_one.engine.monitor().stats;
    assert_eq!(
        alone.prep_batches, alone.prep_batch_writes,
        "a batch of several writes"
    );
    assert_eq!(
        alone.read_batches, alone.read_batch_reads,
        "a batch of several reads"
    );
    assert!(inline.seen.sends.iter().skip(1).all(|s| !s.is_empty()));
    for (conn, (a, b)) in (inline.seen.sends.iter().zip(&lent.seen.sends)).enumerate() {
        assert!(a == b, "connection {conn} was answered differently");
    }
    assert!(
        inline.seen.records == lent.seen.records,
        "the WAL records differ"
    );
    for (conn, (a, b)) in (inline.seen.sends.iter().zip(&one_by_one.seen.sends)).enumerate() {
        assert!(
            a == b,
            "connection {conn} was answered differently when every request was prepared on arrival"
        );
    }
}
