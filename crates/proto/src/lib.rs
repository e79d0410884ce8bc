//! The Apache ZooKeeper 3.9 client wire protocol: jute encoding, the
//! records of `zookeeper.jute`, opcodes, error codes, request and reply
//! bodies and framing. Pure code: no I/O, no clocks.
//!
//! Every decoder takes untrusted bytes and returns an error, never panics,
//! and never allocates more than a small multiple of its input.
//!
//! Wire facts from ZooKeeper 3.9's sources that shape the server's replies:
//! - `ConnectRequest.readOnly` is optional; a client that omits it gets a
//!   `ConnectResponse` without it ([`frame::decode_connect_request`] and
//!   [`frame::encode_connect_response`] carry that flag).
//! - A frame longer than `jute.maxbuffer` (0xfffff) or negative closes the
//!   connection; the first 4 bytes of a connection may be a four-letter word.
//! - An opcode `Request.isValid` rejects (unknown, notification, top-level
//!   check) gets `Unimplemented` and the session is closed; a body that does
//!   not decode gets `MarshallingError`.
//! - Replies with `err != 0` have no body. A failed multi is not such a
//!   reply: its header has `err` 0 and the failure is in the results.
//! - addWatch answers with an `ErrorResponse{err: 0}` body, not nothing.
//! - reconfig answers with a `GetDataResponse`; multiRead ignores the ops'
//!   watch flags.

pub mod codes;
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod jute;
pub mod opcode;
pub mod records;
pub mod request;
pub mod response;
pub mod time;

#[cfg(test)]
mod arbitrary;
#[cfg(test)]
mod roundtrip_tests;

pub use codes::ErrorCode;
pub use frame::{FrameDecoder, FrameError, RequestFrameError};
pub use jute::{DecodeError, Reader, Record};
pub use opcode::{CreateMode, OpCode};
pub use request::{Request, RequestError};
pub use response::{MultiResult, Response};
