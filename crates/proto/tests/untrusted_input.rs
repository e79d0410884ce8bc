//! Arbitrary and mutated bytes through every decoder (the same function the
//! cargo-fuzz target runs): no panic, bounded time, and memory allocated
//! during a decode stays within a small multiple of the input's size. The
//! allocation bound is measured, not assumed: this test binary counts every
//! byte the decoding thread asks the allocator for.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use stoa_proto::frame::{encode_connect_request, encode_reply, encode_request};
use stoa_proto::fuzzing::{exercise, DECODERS};
use stoa_proto::records::*;
use stoa_proto::{ErrorCode, MultiResult, Request, Response};

/// Allocation a decoder may make per input byte. Worst cases are vectors of
/// small elements: an empty string is 4 wire bytes and 24 in memory, and a
/// growing vector may briefly hold twice its elements.
const ALLOCATED_BYTES_PER_INPUT_BYTE_MAX: usize = 16;
/// Fixed allowance for error messages and first vector capacities.
const ALLOCATED_BYTES_SLACK: usize = 4096;
const RANDOM_CASES: u32 = 20_000;
const MUTATED_CASES: u32 = 20_000;
const RANDOM_INPUT_BYTES_MAX: usize = 512;

thread_local! {
    static ALLOCATED_BYTES: Cell<usize> = const { Cell::new(0) };
}

struct CountingAllocator;

fn count(bytes: usize) {
    // try_with: the slot may be gone while a thread is being torn down.
    let _ = ALLOCATED_BYTES.try_with(|total| total.set(total.get().saturating_add(bytes)));
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocated_bytes() -> usize {
    ALLOCATED_BYTES.with(Cell::get)
}

/// Runs every decoder on `data`, failing if one allocates beyond the bound.
fn check_decoders(data: &[u8]) -> Result<(), TestCaseError> {
    let allowed = data.len() * ALLOCATED_BYTES_PER_INPUT_BYTE_MAX + ALLOCATED_BYTES_SLACK;
    for (name, decoder) in DECODERS {
        let before = allocated_bytes();
        decoder(data);
        let used = allocated_bytes() - before;
        prop_assert!(
            used <= allowed,
            "{} allocated {} bytes for {} input bytes",
            name,
            used,
            data.len()
        );
    }
    Ok(())
}

/// Valid frames and bodies to mutate, so mutations reach deep decoders
/// (multi ops, ACL vectors, watch lists) that random bytes rarely reach.
fn seeds() -> Vec<Vec<u8>> {
    let stat = Stat {
        czxid: 1,
        num_children: 2,
        ..Stat::default()
    };
    let requests = [
        Request::Create(CreateRequest {
            path: "/app/lock-".into(),
            data: Some(b"payload".to_vec()),
            acl: vec![Acl::open_unsafe(), Acl::open_unsafe()],
            flags: 3,
        }),
        Request::Multi(vec![
            Request::Create2(CreateRequest {
                path: "/m".into(),
                acl: vec![Acl::open_unsafe()],
                ..CreateRequest::default()
            }),
            Request::SetData(SetDataRequest {
                path: "/m".into(),
                data: Some(vec![1, 2, 3]),
                version: 0,
            }),
            Request::Delete(DeleteRequest {
                path: "/n".into(),
                version: -1,
            }),
        ]),
        Request::MultiRead(vec![
            Request::GetData(GetDataRequest {
                path: "/a".into(),
                watch: false,
            }),
            Request::GetChildren(GetChildrenRequest {
                path: "/".into(),
                watch: true,
            }),
        ]),
        Request::SetWatches2(SetWatches2 {
            relative_zxid: 7,
            data_watches: vec!["/a".into(), "/b".into()],
            exist_watches: vec!["/c".into()],
            child_watches: vec![],
            persistent_watches: vec!["/p".into()],
            persistent_recursive_watches: vec!["/r".into()],
        }),
    ];
    let mut seeds = Vec::new();
    for (xid, request) in (1..).zip(&requests) {
        let header = RequestHeader {
            xid,
            kind: request.opcode().as_i32(),
        };
        let mut frame = Vec::new();
        encode_request(&mut frame, &header, request);
        seeds.push(frame[4..].to_vec());
        seeds.push(frame);
    }
    let mut connect = Vec::new();
    encode_connect_request(
        &mut connect,
        &ConnectRequest {
            time_out: 30_000,
            passwd: vec![0; 16],
            ..ConnectRequest::default()
        },
    );
    seeds.push(connect[4..].to_vec());
    let responses = [
        Response::Multi(vec![
            MultiResult::Create2("/m".into(), stat.clone()),
            MultiResult::GetChildren(vec!["x".into(), "y".into()]),
            MultiResult::Error(ErrorCode::NoNode),
        ]),
        Response::GetAcl(GetAclResponse {
            acl: vec![Acl::open_unsafe()],
            stat,
        }),
    ];
    for response in &responses {
        let header = ReplyHeader {
            xid: 3,
            zxid: 4,
            err: 0,
        };
        let mut frame = Vec::new();
        encode_reply(&mut frame, &header, response);
        seeds.push(frame[20..].to_vec());
        seeds.push(frame[4..].to_vec());
    }
    seeds
}

#[derive(Debug, Clone)]
enum Mutation {
    Overwrite(usize, u8),
    Insert(usize, Vec<u8>),
    Truncate(usize),
    Remove(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Overwrite(at, byte)),
        (
            any::<usize>(),
            prop_oneof![
                Just(vec![0xff, 0xff, 0xff, 0xff]),
                Just(vec![0x7f, 0xff, 0xff, 0xff]),
                Just(vec![0x00, 0x00, 0x10, 0x00]),
                proptest::collection::vec(any::<u8>(), 1..8),
            ]
        )
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::Remove),
    ]
}

fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for mutation in mutations {
        let len = bytes.len();
        match mutation {
            Mutation::Overwrite(at, byte) if len > 0 => bytes[at % len] = *byte,
            Mutation::Insert(at, inserted) => {
                let at = at % (len + 1);
                bytes.splice(at..at, inserted.iter().copied());
            }
            Mutation::Truncate(at) => bytes.truncate(at % (len + 1)),
            Mutation::Remove(at) if len > 0 => {
                bytes.remove(at % len);
            }
            _ => {}
        }
    }
    bytes
}

#[test]
fn arbitrary_bytes_never_panic_nor_overallocate() {
    let mut runner = TestRunner::new(Config {
        cases: RANDOM_CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let input = proptest::collection::vec(any::<u8>(), 0..RANDOM_INPUT_BYTES_MAX);
    runner.run(&input, |data| check_decoders(&data)).unwrap();
}

#[test]
fn mutated_valid_frames_never_panic_nor_overallocate() {
    let seeds = seeds();
    for seed in &seeds {
        exercise(seed);
    }
    let mut runner = TestRunner::new(Config {
        cases: MUTATED_CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        proptest::sample::select(seeds),
        proptest::collection::vec(mutation(), 1..4),
    );
    runner
        .run(&strategy, |(seed, mutations)| {
            check_decoders(&apply(seed, &mutations))
        })
        .unwrap();
}

#[test]
fn claimed_lengths_far_beyond_the_input_allocate_nothing_big() {
    // A 20-byte frame claiming a 2 GiB path and a 2-billion-element vector.
    let hostile = [
        0, 0, 0, 9, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0,
    ];
    check_decoders(&hostile).unwrap();
    let vector_bomb = [0, 0, 0, 1, 0, 0, 0, 8, 0x7f, 0xff, 0xff, 0xff];
    check_decoders(&vector_bomb).unwrap();
}
