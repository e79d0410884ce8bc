//! Length-prefixed framing: a 4-byte big-endian signed length, then that
//! many bytes of body. Also the whole-frame helpers the server and client
//! use on the hot path.

use std::fmt;

use crate::jute::{DecodeError, Reader, Record};
use crate::opcode::{OpCode, NOTIFICATION_XID};
use crate::records::{ConnectRequest, ConnectResponse, ReplyHeader, RequestHeader, WatcherEvent};
use crate::request::{Request, RequestError};
use crate::response::Response;

/// ZooKeeper's `jute.maxbuffer` default: a frame may be at most this long
/// (`NIOServerCnxn.readLength` rejects `len > jute.maxbuffer`).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 0xfffff;

/// Size of the length prefix.
pub const FRAME_LENGTH_BYTES: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The advertised length exceeds the configured maximum.
    TooLarge { len: usize, max: usize },
    /// The advertised length is negative.
    Negative(i32),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds the maximum of {max}")
            }
            FrameError::Negative(len) => write!(f, "frame length {len} is negative"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Splits a byte stream into frame bodies without copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameDecoder {
    pub max_frame_bytes: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
        }
    }
}

impl FrameDecoder {
    pub fn new(max_frame_bytes: usize) -> Self {
        FrameDecoder { max_frame_bytes }
    }

    /// The first complete frame at the start of `buf`: how many bytes it
    /// takes (prefix included) and its body. `Ok(None)` means `buf` holds
    /// only part of a frame. The length is checked as soon as its 4 bytes
    /// are there, so a caller can drop a hostile peer before buffering.
    ///
    /// On a connection's first frame the 4 bytes may instead be a
    /// four-letter word ("ruok", "stat", ...); the caller checks for those
    /// before calling this.
    pub fn decode<'b>(&self, buf: &'b [u8]) -> Result<Option<(usize, &'b [u8])>, FrameError> {
        let Some(prefix) = buf.get(..FRAME_LENGTH_BYTES) else {
            return Ok(None);
        };
        let mut length_bytes = [0u8; FRAME_LENGTH_BYTES];
        length_bytes.copy_from_slice(prefix);
        let len = i32::from_be_bytes(length_bytes);
        let body_bytes = usize::try_from(len).map_err(|_| FrameError::Negative(len))?;
        if body_bytes > self.max_frame_bytes {
            return Err(FrameError::TooLarge {
                len: body_bytes,
                max: self.max_frame_bytes,
            });
        }
        let consumed = FRAME_LENGTH_BYTES + body_bytes;
        Ok(buf
            .get(FRAME_LENGTH_BYTES..consumed)
            .map(|body| (consumed, body)))
    }
}

/// Appends one frame to `out`: reserves the length, lets `body_writer`
/// append the body, then patches the length in place.
///
/// Panics if the body exceeds `i32::MAX` bytes, which no record can reach.
pub fn encode_frame(out: &mut Vec<u8>, body_writer: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_LENGTH_BYTES]);
    body_writer(out);
    assert!(
        out.len() >= start + FRAME_LENGTH_BYTES,
        "body writer truncated the buffer"
    );
    let body_bytes = out.len() - start - FRAME_LENGTH_BYTES;
    let len = i32::try_from(body_bytes).expect("frame bodies stay below i32::MAX bytes");
    out[start..start + FRAME_LENGTH_BYTES].copy_from_slice(&len.to_be_bytes());
}

/// Why a request frame body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestFrameError {
    /// Not even a `RequestHeader`: there is no xid to answer, so ZooKeeper
    /// closes the connection.
    Header(DecodeError),
    /// The header decoded but the body did not. `error` is
    /// `UnknownOpcode` (ZooKeeper answers `Unimplemented` and closes the
    /// session) or `Malformed` (ZooKeeper answers `MarshallingError`).
    Body {
        header: RequestHeader,
        error: RequestError,
    },
}

impl RequestFrameError {
    /// The header, when it could be read, so the caller can reply to its xid.
    pub fn header(&self) -> Option<&RequestHeader> {
        match self {
            RequestFrameError::Header(_) => None,
            RequestFrameError::Body { header, .. } => Some(header),
        }
    }
}

impl fmt::Display for RequestFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestFrameError::Header(error) => write!(f, "bad request header: {error}"),
            RequestFrameError::Body { header, error } => {
                write!(
                    f,
                    "request xid {} type {}: {error}",
                    header.xid, header.kind
                )
            }
        }
    }
}

impl std::error::Error for RequestFrameError {}

/// Decodes a request frame body (after the connect handshake): the header,
/// then the body its type names. Mirrors ZooKeeper's `Request.isValid`: a
/// top-level `check` (13) is an unknown opcode there, though it is a valid
/// multi op.
pub fn decode_request_frame(body: &[u8]) -> Result<(RequestHeader, Request), RequestFrameError> {
    let mut r = Reader::new(body);
    let header = RequestHeader::decode(&mut r).map_err(RequestFrameError::Header)?;
    let body_error = |error| RequestFrameError::Body {
        header: header.clone(),
        error,
    };
    if header.kind == OpCode::Check.as_i32() {
        return Err(body_error(RequestError::UnknownOpcode(header.kind)));
    }
    let request = Request::decode(header.kind, &mut r).map_err(body_error)?;
    Ok((header, request))
}

/// Decodes the first frame of a connection. The flag tells whether the
/// client sent `read_only`; answer with [`encode_connect_response`] using it.
pub fn decode_connect_request(body: &[u8]) -> Result<(ConnectRequest, bool), DecodeError> {
    ConnectRequest::decode_with_presence(&mut Reader::new(body))
}

/// Writes a whole `ConnectResponse` frame in the client's dialect.
pub fn encode_connect_response(
    out: &mut Vec<u8>,
    response: &ConnectResponse,
    client_sent_read_only: bool,
) {
    encode_frame(out, |out| response.encode_for(out, client_sent_read_only));
}

/// Writes a whole reply frame. When `header.err` is not 0 the body is left
/// out whatever `response` holds, as ZooKeeper sends only the header.
pub fn encode_reply(out: &mut Vec<u8>, header: &ReplyHeader, response: &Response) {
    encode_frame(out, |out| {
        header.encode(out);
        if header.err == 0 {
            response.encode(out);
        }
    });
}

/// Writes a whole watch notification frame: xid -1, the event's zxid,
/// err 0, then the event.
pub fn encode_notification(out: &mut Vec<u8>, zxid: i64, event: &WatcherEvent) {
    let header = ReplyHeader {
        xid: NOTIFICATION_XID,
        zxid,
        err: 0,
    };
    encode_frame(out, |out| {
        header.encode(out);
        event.encode(out);
    });
}

/// A frame for a client, encoded or still as values: a server whose
/// connections' writers run on other threads hands them replies and
/// events as values, and each writer encodes its own (the encoding then
/// leaves the thread that decides the replies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutgoingFrame {
    /// Whole frames, encoded already.
    Encoded(Vec<u8>),
    Reply(ReplyHeader, Response),
    /// A watch notification at this zxid.
    Notification(i64, WatcherEvent),
}

impl OutgoingFrame {
    /// Appends the frame's bytes to `out`, as `encode_reply` and
    /// `encode_notification` write them.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            OutgoingFrame::Encoded(bytes) => out.extend_from_slice(bytes),
            OutgoingFrame::Reply(header, response) => encode_reply(out, header, response),
            OutgoingFrame::Notification(zxid, event) => encode_notification(out, *zxid, event),
        }
    }
}

/// Appends the bytes of `frames` to `out`, in order.
pub fn encode_frames(out: &mut Vec<u8>, frames: &[OutgoingFrame]) {
    for frame in frames {
        frame.encode(out);
    }
}

/// Writes a whole request frame (client side).
pub fn encode_request(out: &mut Vec<u8>, header: &RequestHeader, request: &Request) {
    encode_frame(out, |out| {
        header.encode(out);
        request.encode(out);
    });
}

/// Writes a whole `ConnectRequest` frame (client side), with `read_only`.
pub fn encode_connect_request(out: &mut Vec<u8>, request: &ConnectRequest) {
    encode_frame(out, |out| request.encode(out));
}

/// Splits a reply frame body (client side) into its header and the bytes
/// after it: a `WatcherEvent` when `xid` is -1, otherwise the body of the
/// reply, to decode with `Response::decode` when `err` is 0.
pub fn decode_reply_frame(body: &[u8]) -> Result<(ReplyHeader, &[u8]), DecodeError> {
    let mut r = Reader::new(body);
    let header = ReplyHeader::decode(&mut r)?;
    Ok((header, r.rest()))
}
