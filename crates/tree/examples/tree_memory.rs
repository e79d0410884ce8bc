//! Resident memory and snapshot load time of a tree of N znodes of 100 B,
//! laid out as `stoa bench --scenario create-async` lays them out:
//! `cargo run --release -p stoa-tree --example tree_memory -- 1000000`.

use std::time::Instant;

use stoa_proto::records::Acl;
use stoa_tree::{read_snapshot, write_snapshot, CreateTxn, DataTree, Txn, TxnHeader, TxnOp};

/// The server binary's allocator: size classes decide what a node costs.
/// Wrapped to count the bytes asked for, so RSS beyond them is the
/// allocator's (size classes, pages not yet reused).
#[global_allocator]
static ALLOCATOR: Counting = Counting;

struct Counting;
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

// SAFETY: forwards every call to mimalloc unchanged; only counts sizes.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, std::sync::atomic::Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as the caller's contract.
        unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new) }
    }
}

/// Bytes asked of mimalloc, plus what glibc's malloc has handed out: the
/// leaves' byte buffers live there (`LeafBytes`).
fn live_bytes() -> u64 {
    // SAFETY: mallinfo2 only reads glibc's counters.
    let glibc = unsafe { libc::mallinfo2() }.uordblks;
    (LIVE.load(std::sync::atomic::Ordering::Relaxed) + glibc) as u64
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .expect("rss")
        .parse()
        .expect("number");
    pages * 4096
}

fn create(tree: &mut DataTree, zxid: i64, path: String, data: Vec<u8>) {
    let txn = Txn {
        header: TxnHeader {
            session_id: 1,
            cxid: 0,
            zxid,
            time_ms: 1_700_000_000_000 + zxid,
        },
        op: TxnOp::Create(CreateTxn {
            path,
            data: Some(data),
            acl: vec![Acl::open_unsafe()],
            ephemeral_owner: 0,
            parent_cversion: zxid as i32,
        }),
    };
    tree.apply(&txn);
}

fn main() {
    if let Some(file) = std::env::var_os("LOAD_ONLY") {
        let image = std::fs::read(file).expect("snapshot file");
        let before = rss_bytes();
        let started = Instant::now();
        let loaded = read_snapshot(&mut image.as_slice()).expect("read");
        let image_bytes = image.len() as u64;
        println!(
            "snapshot load {:.2} s, RSS +{} MiB; {} MiB asked for",
            started.elapsed().as_secs_f64(),
            (rss_bytes() - before) >> 20,
            (live_bytes() - image_bytes) >> 20
        );
        std::mem::forget(loaded);
        return;
    }
    let n: usize = std::env::args()
        .nth(1)
        .map_or(1_000_000, |a| a.parse().expect("count"));
    let before = rss_bytes();
    let mut tree = DataTree::new();
    let mut zxid = 1;
    for dir in ["/stoa-bench", "/stoa-bench/w"] {
        create(&mut tree, zxid, dir.to_owned(), Vec::new());
        zxid += 1;
    }
    let started = Instant::now();
    for i in 0..n {
        create(
            &mut tree,
            zxid,
            // The load's one worker: `<nonce>-<worker>-<seq>`, seq from 1.
            format!("/stoa-bench/w/5f3a9c21-0-{}", i + 1),
            vec![b'x'; 100],
        );
        zxid += 1;
    }
    let built = started.elapsed();
    let after = rss_bytes();
    println!(
        "{n} znodes: built in {:.2} s, RSS +{} MiB, {} B/znode; {} MiB asked for",
        built.as_secs_f64(),
        (after - before) >> 20,
        (after - before) / n as u64,
        live_bytes() >> 20
    );
    let mut image = Vec::new();
    let started = Instant::now();
    write_snapshot(&tree, &mut image).expect("write");
    println!(
        "snapshot {} B/znode, written in {:.2} s",
        image.len() / n,
        started.elapsed().as_secs_f64()
    );
    if let Some(file) = std::env::var_os("SAVE_TO") {
        std::fs::write(file, &image).expect("save");
    }
    // Freeing a million nodes is not what is measured.
    std::mem::forget(tree);
    for _ in 0..loads() {
        let started = Instant::now();
        let loaded = read_snapshot(&mut image.as_slice()).expect("read");
        println!(
            "snapshot load {:.2} s ({} nodes)",
            started.elapsed().as_secs_f64(),
            loaded.node_count()
        );
        std::mem::forget(loaded);
    }
}

fn loads() -> usize {
    std::env::args()
        .nth(2)
        .map_or(1, |a| a.parse().expect("load count"))
}
