//! Entry points that feed untrusted bytes to every decoder. The cargo-fuzz
//! target and a stable proptest both call [`exercise`].

use crate::frame::{
    decode_connect_request, decode_reply_frame, decode_request_frame, FrameDecoder,
};
use crate::jute::{Reader, Record};
use crate::opcode::OpCode;
use crate::records::{ConnectResponse, WatcherEvent};
use crate::response::Response;

/// A named decoder over arbitrary bytes. Decoders may fail; they must not
/// panic, loop without bound, or allocate beyond a small multiple of the
/// input.
pub type Decoder = fn(&[u8]);

/// Every decoder a peer can reach, with a name for failure messages.
pub const DECODERS: &[(&str, Decoder)] = &[
    ("frames", frames),
    ("request_frame", request_frame),
    ("connect_request", connect_request),
    ("connect_response", connect_response),
    ("reply_frame", reply_frame),
    ("responses", responses),
];

/// Runs every decoder on `data`.
pub fn exercise(data: &[u8]) {
    for (_, decoder) in DECODERS {
        decoder(data);
    }
}

/// Splits `data` into frames with a small maximum, and decodes each body
/// as a request, as the server's read loop does.
fn frames(data: &[u8]) {
    const FUZZ_MAX_FRAME_BYTES: usize = 4096;
    let decoder = FrameDecoder::new(FUZZ_MAX_FRAME_BYTES);
    let mut rest = data;
    while let Ok(Some((consumed, body))) = decoder.decode(rest) {
        assert!(consumed >= 4 && consumed <= rest.len());
        let _ = decode_request_frame(body);
        rest = &rest[consumed..];
    }
}

fn request_frame(data: &[u8]) {
    let _ = decode_request_frame(data);
}

fn connect_request(data: &[u8]) {
    let _ = decode_connect_request(data);
}

fn connect_response(data: &[u8]) {
    let _ = ConnectResponse::decode(&mut Reader::new(data));
}

fn reply_frame(data: &[u8]) {
    if let Ok((header, rest)) = decode_reply_frame(data) {
        let _ = WatcherEvent::decode(&mut Reader::new(rest));
        let _ = header;
    }
}

/// The first byte picks the opcode, so the fuzzer reaches every response
/// shape from one input.
fn responses(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let op = OpCode::ALL[usize::from(selector) % OpCode::ALL.len()];
    let _ = Response::decode(op, &mut Reader::new(rest));
}
