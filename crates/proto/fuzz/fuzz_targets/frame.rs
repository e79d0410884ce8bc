//! Arbitrary bytes through the frame decoder, request frames, the connect
//! handshake and every reply shape. Run: `cargo +nightly fuzz run frame`
//! from crates/proto. The stable test `tests/untrusted_input.rs` runs the
//! same function on proptest inputs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stoa_proto::fuzzing::exercise(data);
});
