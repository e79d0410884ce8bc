//! CPU and allocations per request of the partition engine alone: frames
//! in, replies and WAL records out, no sockets, no disk, one thread. The
//! end-to-end benchmark (`stoa bench`) shares two noisy cores with its load
//! generator; this isolates the engine's own cost per write and per read,
//! so a change to the hot path can be judged in a few seconds.
//!
//! `cargo run --release -p stoa-core --example engine_write_path`
//! (`CONNS`, `BATCH` requests per connection per round, `ROUNDS`, `KEYS`,
//! `PAYLOAD` bytes, `PARTITIONS` override the defaults; `SPREAD=1` puts
//! every other key under `/g1`, with several partitions a group on
//! partition 1; `BY_PARTITION=1` applies by partition, as owned servers
//! do; `WRITERS_ENCODE=1` hands replies out as values, as a server with
//! `io.threads` does, for its writers to encode; `ONLY=setData` or
//! `ONLY=getData` runs one workload).

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use stoa_core::engine::{Engine, EngineConfig, Input, Recovered};
use stoa_proto::frame::{encode_connect_request, encode_request};
use stoa_proto::opcode::OpCode;
use stoa_proto::records::{
    Acl, ConnectRequest, CreateRequest, GetDataRequest, Id, RequestHeader, SetDataRequest,
};
use stoa_proto::request::Request;

/// Counts allocations (and reallocations) made by every thread.
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every other key under `/g1` (the same keys at any partition count, so
/// counts compare); with several partitions `/g1` is a group on partition 1.
fn spread() -> bool {
    env_or("SPREAD", 0) == 1
}

/// Replies leave the engine as values (`WRITERS_ENCODE=1`).
fn writers_encode() -> bool {
    env_or("WRITERS_ENCODE", 0) == 1
}

fn config() -> EngineConfig {
    EngineConfig {
        partitions: env_or("PARTITIONS", 1) as u32,
        partition_groups: if spread() && env_or("PARTITIONS", 1) > 1 {
            vec!["/g1".into()]
        } else {
            Vec::new()
        },
        apply_by_partition: env_or("BY_PARTITION", 0) == 1,
        replies_encoded_by_writers: writers_encode(),
        // Large enough that no snapshot is taken during the run.
        snap_count: 100_000_000,
        host_name: "bench".into(),
        ..EngineConfig::default()
    }
}

/// The engine plus what the partition thread does around it: WAL records
/// built for every persist job, every job acknowledged at once (as if the
/// disk were infinitely fast), replies counted and dropped.
struct Driver {
    engine: Engine,
    replies_bytes: u64,
    replies_frames: u64,
}

impl Driver {
    fn flush(&mut self) {
        loop {
            let out = self.engine.take_output();
            assert!(out.fatal.is_none(), "{:?}", out.fatal);
            // The highest ready of each partition's group.
            let mut last: Vec<(u32, u64)> = Vec::new();
            for job in &out.persists {
                // Built with the job (where its ready was taken apart).
                std::hint::black_box(&job.records);
                last.retain(|(p, _)| *p != job.partition);
                last.push((job.partition, job.number));
            }
            for (_, bytes) in &out.sends {
                self.replies_bytes += bytes.len() as u64;
            }
            for (_, frames) in out.frames {
                // Encoded on the writers' threads, which this does not
                // count; dropped here, as the replies are where the engine
                // encodes them (their memory comes back to the engine's
                // thread either way).
                self.replies_frames += frames.len() as u64;
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
        let header = RequestHeader {
            xid,
            kind: op as i32,
        };
        encode_request(&mut bytes, &header, request);
        self.engine.handle(Input::Frames { conn, bytes });
    }
}

fn main() {
    let conns = env_or("CONNS", 8) as u64;
    let batch = env_or("BATCH", 16);
    let rounds = env_or("ROUNDS", 20_000);
    let keys = env_or("KEYS", 1000);
    let payload = vec![b'x'; env_or("PAYLOAD", 100)];

    let partitions = env_or("PARTITIONS", 1);
    let recovered = (0..partitions).map(|_| Recovered::empty()).collect();
    let engine = Engine::new(config(), recovered, 1_700_000_000_000).expect("engine");
    let mut d = Driver {
        engine,
        replies_bytes: 0,
        replies_frames: 0,
    };
    d.flush();
    assert!(d.engine.caught_up(), "a single voter leads at once");

    let peer: SocketAddr = "127.0.0.1:5000".parse().expect("address");
    for conn in 1..=conns {
        d.engine.handle(Input::Accepted { conn, peer });
        let mut bytes = Vec::new();
        let request = ConnectRequest {
            time_out: 30_000,
            passwd: vec![0; 16],
            ..Default::default()
        };
        encode_connect_request(&mut bytes, &request);
        d.engine.handle(Input::Frames { conn, bytes });
        d.flush();
    }
    let open_acl = vec![Acl {
        perms: 31,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }];
    let spread = spread();
    let key = |i: usize| match spread && i % 2 == 1 {
        true => format!("/g1/bench-{i:08}"),
        false => format!("/bench-{i:08}"),
    };
    if spread {
        let create = Request::Create(CreateRequest {
            path: "/g1".into(),
            data: None,
            acl: open_acl.clone(),
            flags: 0,
        });
        d.frame(1, 0, OpCode::Create, &create);
        d.flush();
    }
    for i in 0..keys {
        let create = Request::Create(CreateRequest {
            path: key(i),
            data: Some(payload.clone()),
            acl: open_acl.clone(),
            flags: 0,
        });
        d.frame(1, i as i32 + 1, OpCode::Create, &create);
        d.flush();
    }

    // Requests are encoded before the clock starts: only the engine is timed.
    let workloads: [(&str, OpCode); 2] =
        [("setData", OpCode::SetData), ("getData", OpCode::GetData)];
    // `ONLY=setData` or `ONLY=getData` runs one of them (for callgrind).
    let only = std::env::var("ONLY").ok();
    for (name, op) in workloads {
        if only.as_deref().is_some_and(|only| only != name) {
            continue;
        }
        let mut frames = Vec::with_capacity(conns as usize * batch);
        for i in 0..conns as usize * batch {
            let path = key(i * 7919 % keys);
            let request = match op {
                OpCode::SetData => Request::SetData(SetDataRequest {
                    path,
                    data: Some(payload.clone()),
                    version: -1,
                }),
                _ => Request::GetData(GetDataRequest { path, watch: false }),
            };
            let mut bytes = Vec::new();
            encode_request(
                &mut bytes,
                &RequestHeader {
                    xid: 1_000_000 + i as i32,
                    kind: op as i32,
                },
                &request,
            );
            frames.push((1 + i as u64 % conns, bytes));
        }
        let allocations_before = ALLOCATIONS.load(Ordering::Relaxed);
        let started = Instant::now();
        let replies_before = (d.replies_bytes, d.replies_frames);
        for _ in 0..rounds {
            for (conn, bytes) in &frames {
                // xids need not increase for the engine; the copy stands for
                // the read the reader task hands over.
                d.engine.handle(Input::Frames {
                    conn: *conn,
                    bytes: bytes.clone(),
                });
            }
            d.flush();
        }
        let elapsed = started.elapsed();
        let ops = (rounds * frames.len()) as f64;
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - allocations_before;
        let replies = if writers_encode() {
            format!(
                "{:5.2} reply frames/op",
                (d.replies_frames - replies_before.1) as f64 / ops
            )
        } else {
            format!(
                "{:5.0} reply bytes/op",
                (d.replies_bytes - replies_before.0) as f64 / ops
            )
        };
        println!(
            "{name:8} {conns} conns x {batch}: {:7.0} ns/op  {:5.1} allocations/op  {replies}",
            elapsed.as_nanos() as f64 / ops,
            allocations as f64 / ops,
        );
    }
}
