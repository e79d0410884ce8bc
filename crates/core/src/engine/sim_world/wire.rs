//! The client's side of the ZooKeeper protocol, as the rigs speak it to
//! an engine: handshakes that resume a session, requests numbered by xid,
//! and the frames a server sends back.

use std::net::SocketAddr;

use stoa_proto::codes::ErrorCode;
use stoa_proto::frame::{decode_reply_frame, encode_connect_request, encode_request, FrameDecoder};
use stoa_proto::jute::{Reader, Record};
use stoa_proto::opcode::OpCode;
use stoa_proto::records::{
    Acl, CheckVersionRequest, ConnectRequest, ConnectResponse, CreateRequest, GetDataRequest,
    ReplyHeader, RequestHeader, SetDataRequest, SetWatches, WatcherEvent,
};
use stoa_proto::request::Request;
use stoa_proto::response::{MultiResult, Response};

use crate::engine::{Engine, Input};

/// The address every simulated client connects from.
pub(crate) fn client_address() -> SocketAddr {
    "127.0.0.1:5000".parse().expect("literal address")
}

/// A frame a server sent: the handshake's answer, a reply, or a watch
/// event (xid -1) with the zxid its header carries.
#[derive(Debug, PartialEq)]
pub(crate) enum ServerFrame {
    Connected(ConnectResponse),
    Reply(ReplyHeader, Vec<u8>),
    Event(i64, WatcherEvent),
}

/// One client's protocol state: its session (kept across connections),
/// whether the current connection's handshake was answered, its next xid
/// and the bytes servers sent it, not yet read.
pub(crate) struct WireClient {
    pub session: Option<(i64, Vec<u8>)>,
    pub handshaken: bool,
    pub next_xid: i32,
    pub inbox: Vec<u8>,
    /// The newest zxid it has seen: a server behind it refuses the
    /// client's handshake.
    pub last_zxid: i64,
}

impl WireClient {
    pub fn new() -> WireClient {
        WireClient {
            session: None,
            handshaken: false,
            next_xid: 1,
            inbox: Vec::new(),
            last_zxid: 0,
        }
    }

    /// The handshake of a new connection: it resumes the client's session
    /// if it has one.
    pub fn connect_bytes(&mut self, timeout_ms: i32) -> Vec<u8> {
        self.handshaken = false;
        let (session_id, passwd) = self.session.clone().unwrap_or((0, vec![0; 16]));
        let request = ConnectRequest {
            time_out: timeout_ms,
            session_id,
            passwd,
            last_zxid_seen: self.last_zxid,
            ..Default::default()
        };
        let mut bytes = Vec::new();
        encode_connect_request(&mut bytes, &request);
        bytes
    }

    /// `request` framed under the client's next xid.
    pub fn request_bytes(&mut self, request: &Request) -> (i32, Vec<u8>) {
        let xid = self.next_xid;
        self.next_xid += 1;
        (xid, request_frame(xid, request))
    }

    /// Takes the session a handshake answered with (0: expired or
    /// unknown, so none).
    pub fn adopt(&mut self, response: &ConnectResponse) {
        self.session =
            (response.session_id != 0).then(|| (response.session_id, response.passwd.clone()));
    }

    /// Reads every whole frame in the inbox (servers send whole frames).
    /// The first after a handshake is its answer.
    pub fn take_frames(&mut self) -> Vec<ServerFrame> {
        let bytes = std::mem::take(&mut self.inbox);
        decode_frames(&bytes, &mut self.handshaken)
    }
}

/// Splits what a server sent a connection into frames; the first while
/// `handshaken` is false is the handshake's answer (and sets it).
pub(crate) fn decode_frames(bytes: &[u8], handshaken: &mut bool) -> Vec<ServerFrame> {
    let decoder = FrameDecoder::new(1 << 20);
    let mut at = 0;
    let mut frames = Vec::new();
    while let Some((used, body)) = decoder
        .decode(&bytes[at..])
        .expect("server frames are well formed")
    {
        at += used;
        if !*handshaken {
            *handshaken = true;
            let response =
                ConnectResponse::decode(&mut Reader::new(body)).expect("connect response");
            frames.push(ServerFrame::Connected(response));
            continue;
        }
        let (header, rest) = decode_reply_frame(body).expect("reply header");
        if header.xid == -1 {
            let event = WatcherEvent::decode(&mut Reader::new(rest)).expect("watch event");
            frames.push(ServerFrame::Event(header.zxid, event));
        } else {
            frames.push(ServerFrame::Reply(header, rest.to_vec()));
        }
    }
    assert_eq!(at, bytes.len(), "a server sent part of a frame");
    frames
}

/// `request` framed under `xid`.
pub(crate) fn request_frame(xid: i32, request: &Request) -> Vec<u8> {
    let mut bytes = Vec::new();
    let header = RequestHeader {
        xid,
        kind: request.opcode() as i32,
    };
    encode_request(&mut bytes, &header, request);
    bytes
}

/// A client connects to `engine` as connection `conn` and sends `bytes`.
pub(crate) fn open(engine: &mut Engine, conn: u64, bytes: Vec<u8>) {
    engine.handle(Input::Accepted {
        conn,
        peer: client_address(),
    });
    engine.handle(Input::Frames { conn, bytes });
}

/// create of a persistent node open to all.
pub(crate) fn create(path: &str, data: Vec<u8>) -> Request {
    Request::Create(CreateRequest {
        path: path.into(),
        data: Some(data),
        acl: vec![Acl::open_unsafe()],
        flags: 0,
    })
}

/// create of an ephemeral node open to all.
pub(crate) fn create_ephemeral(path: &str, data: Vec<u8>) -> Request {
    Request::Create(CreateRequest {
        path: path.into(),
        data: Some(data),
        acl: vec![Acl::open_unsafe()],
        flags: 1,
    })
}

pub(crate) fn get(path: &str, watch: bool) -> Request {
    Request::GetData(GetDataRequest {
        path: path.into(),
        watch,
    })
}

/// setData of any version.
pub(crate) fn set(path: &str, data: Vec<u8>) -> Request {
    Request::SetData(SetDataRequest {
        path: path.into(),
        data: Some(data),
        version: -1,
    })
}

/// A multi setting each of `sets` (any version) and, when `abort`, then
/// checking a version `first`'s node cannot have, which fails the whole.
pub(crate) fn multi_set(sets: Vec<(String, Vec<u8>)>, abort: bool) -> Request {
    let first = sets.first().map(|(path, _)| path.clone());
    let mut ops: Vec<Request> = sets
        .into_iter()
        .map(|(path, data)| set(&path, data))
        .collect();
    if let (true, Some(path)) = (abort, first) {
        ops.push(Request::Check(CheckVersionRequest {
            path,
            version: i32::MAX,
        }));
    }
    Request::Multi(ops)
}

/// The results of a multi's reply body.
pub(crate) fn multi_results(body: &[u8]) -> Result<Vec<MultiResult>, String> {
    match Response::decode(OpCode::Multi, &mut Reader::new(body)) {
        Ok(Response::Multi(results)) => Ok(results),
        other => Err(format!("{other:?}")),
    }
}

/// Whether a multi was refused whole, as ZooKeeper refuses one: every op
/// an error, the failing check's own (`BadVersion`) last.
pub(crate) fn refused_whole(results: &[MultiResult]) -> bool {
    results.iter().all(|r| matches!(r, MultiResult::Error(_)))
        && results.last() == Some(&MultiResult::Error(ErrorCode::BadVersion))
}

/// A multiRead of the data of each of `paths`.
pub(crate) fn multi_get(paths: &[String]) -> Request {
    Request::MultiRead(paths.iter().map(|path| get(path, false)).collect())
}

/// The data watches a client restores on a new connection (xid -8), for
/// changes after `relative_zxid`.
pub(crate) fn set_watches(relative_zxid: i64, data_watches: Vec<String>) -> Request {
    Request::SetWatches(SetWatches {
        relative_zxid,
        data_watches,
        exist_watches: Vec::new(),
        child_watches: Vec::new(),
    })
}
