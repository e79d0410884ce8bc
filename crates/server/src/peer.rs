//! Server-to-server transport on the quorum port. Every server dials every
//! peer once and sends on that connection; what it receives arrives on the
//! connections peers dialed to it. Raft tolerates lost and duplicated
//! messages, so a full queue or a broken connection drops messages rather
//! than blocking the partition thread.
//!
//! Wire format: a hello frame naming the sender, then frames
//! `[len: u32 BE][kind: u8][payload]`, `len` counting kind and payload.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use protobuf::Message as _;
use raft::eraftpb::Message as RaftMessage;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Largest frame accepted from a peer: room for a batch of appended
/// entries; snapshots travel in chunks below it.
pub const PEER_FRAME_BYTES_MAX: usize = 64 << 20;
/// raft's messages nest four deep (message → snapshot → metadata → conf
/// state); anything deeper is not ours.
const PROTOBUF_RECURSION_MAX: u32 = 8;
/// Messages queued toward one peer before new ones are dropped.
pub const PEER_QUEUE_MESSAGES_MAX: usize = 4096;
const HELLO_MAGIC: &[u8; 8] = b"STOAPEER";
const PROTOCOL_VERSION: u32 = 1;
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(50);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(1);
const WRITE_COALESCE_BYTES_MAX: usize = 1 << 20;

mod kind {
    pub const RAFT: u8 = 1;
    pub const ENGINE: u8 = 2;
}

#[derive(Debug, Clone, PartialEq)]
pub enum PeerMessage {
    Raft(RaftMessage),
    /// The engine's own messages (forwarded requests, session liveness);
    /// opaque here.
    Engine(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerError(pub String);

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Appends one whole frame.
pub fn encode_frame(out: &mut Vec<u8>, message: &PeerMessage) -> Result<(), PeerError> {
    let (kind, payload) = match message {
        PeerMessage::Raft(m) => (
            kind::RAFT,
            m.write_to_bytes()
                .map_err(|e| PeerError(format!("encode raft message: {e}")))?,
        ),
        PeerMessage::Engine(bytes) => (kind::ENGINE, bytes.clone()),
    };
    let len = payload.len() + 1;
    if len > PEER_FRAME_BYTES_MAX {
        return Err(PeerError(format!(
            "peer message of {len} bytes exceeds {PEER_FRAME_BYTES_MAX}"
        )));
    }
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.push(kind);
    out.extend_from_slice(&payload);
    Ok(())
}

/// Decodes a frame body (`kind` + payload), bounded in size and depth.
pub fn decode_body(body: &[u8]) -> Result<PeerMessage, PeerError> {
    let (&kind, payload) = body
        .split_first()
        .ok_or_else(|| PeerError("empty peer frame".into()))?;
    match kind {
        kind::RAFT => {
            let mut input = protobuf::CodedInputStream::from_bytes(payload);
            input.set_recursion_limit(PROTOBUF_RECURSION_MAX);
            let mut m = RaftMessage::new();
            m.merge_from(&mut input)
                .map_err(|e| PeerError(format!("bad raft message: {e}")))?;
            Ok(PeerMessage::Raft(m))
        }
        kind::ENGINE => Ok(PeerMessage::Engine(payload.to_vec())),
        other => Err(PeerError(format!("unknown peer frame kind {other}"))),
    }
}

fn hello(from: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    out.extend_from_slice(HELLO_MAGIC);
    out.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    out.extend_from_slice(&from.to_be_bytes());
    out
}

fn parse_hello(bytes: &[u8; 20]) -> Result<u64, PeerError> {
    if &bytes[..8] != HELLO_MAGIC {
        return Err(PeerError("not a Stoa peer (bad hello)".into()));
    }
    let version = u32::from_be_bytes(bytes[8..12].try_into().unwrap_or_default());
    if version != PROTOCOL_VERSION {
        return Err(PeerError(format!(
            "peer speaks protocol {version}, we speak {PROTOCOL_VERSION}"
        )));
    }
    Ok(u64::from_be_bytes(
        bytes[12..20].try_into().unwrap_or_default(),
    ))
}

/// The sending side: one queue and one dialing task per peer.
pub struct PeerNetwork {
    outboxes: HashMap<u64, mpsc::Sender<PeerMessage>>,
}

impl PeerNetwork {
    /// Starts dialers toward `peers` and the listener on `listen`; received
    /// messages go to `inbound` as (sender id, message). Must run inside a
    /// tokio `LocalSet`.
    pub async fn start(
        my_id: u64,
        listen: SocketAddr,
        peers: &[(u64, SocketAddr)],
        inbound: mpsc::Sender<(u64, PeerMessage)>,
    ) -> Result<PeerNetwork, PeerError> {
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| PeerError(format!("cannot listen on quorum port {listen}: {e}")))?;
        let known: Vec<u64> = peers.iter().map(|(id, _)| *id).collect();
        tokio::task::spawn_local(accept_loop(listener, known, inbound));
        let mut outboxes = HashMap::new();
        for &(id, address) in peers {
            let (tx, rx) = mpsc::channel(PEER_QUEUE_MESSAGES_MAX);
            tokio::task::spawn_local(dial_loop(my_id, id, address, rx));
            outboxes.insert(id, tx);
        }
        Ok(PeerNetwork { outboxes })
    }

    /// Queues a message; false when the peer is unknown or its queue is full
    /// (the message is dropped, which raft tolerates).
    pub fn send(&self, to: u64, message: PeerMessage) -> bool {
        self.outboxes
            .get(&to)
            .is_some_and(|tx| tx.try_send(message).is_ok())
    }
}

async fn dial_loop(
    my_id: u64,
    peer: u64,
    address: SocketAddr,
    mut queue: mpsc::Receiver<PeerMessage>,
) {
    let mut delay = RECONNECT_DELAY_MIN;
    loop {
        let mut stream = match TcpStream::connect(address).await {
            Ok(s) => s,
            Err(e) => {
                log::debug!("peer {peer} at {address}: {e}; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RECONNECT_DELAY_MAX);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if stream.write_all(&hello(my_id)).await.is_err() {
            continue;
        }
        log::info!("connected to peer {peer} at {address}");
        delay = RECONNECT_DELAY_MIN;
        let mut buf = Vec::new();
        loop {
            let Some(first) = queue.recv().await else {
                return;
            };
            buf.clear();
            let mut next = Some(first);
            while let Some(message) = next.take() {
                if let Err(e) = encode_frame(&mut buf, &message) {
                    log::error!("peer {peer}: {e}");
                }
                if buf.len() < WRITE_COALESCE_BYTES_MAX {
                    next = queue.try_recv().ok();
                }
            }
            if let Err(e) = stream.write_all(&buf).await {
                log::warn!("peer {peer} at {address}: {e}; reconnecting");
                break;
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    known: Vec<u64>,
    inbound: mpsc::Sender<(u64, PeerMessage)>,
) {
    loop {
        let Ok((stream, from_address)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let inbound = inbound.clone();
        let known = known.clone();
        tokio::task::spawn_local(async move {
            match read_peer(stream, &known, &inbound).await {
                Ok(()) => {}
                Err(e) => log::warn!("peer connection from {from_address}: {e}"),
            }
        });
    }
}

async fn read_peer(
    stream: TcpStream,
    known: &[u64],
    inbound: &mpsc::Sender<(u64, PeerMessage)>,
) -> Result<(), PeerError> {
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let mut hello_bytes = [0u8; 20];
    tokio::time::timeout(HELLO_TIMEOUT, reader.read_exact(&mut hello_bytes))
        .await
        .map_err(|_| PeerError("no hello in time".into()))?
        .map_err(|e| PeerError(format!("reading hello: {e}")))?;
    let from = parse_hello(&hello_bytes)?;
    if !known.contains(&from) {
        return Err(PeerError(format!("server {from} is not in this ensemble")));
    }
    loop {
        let mut len_bytes = [0u8; 4];
        if reader.read_exact(&mut len_bytes).await.is_err() {
            return Ok(()); // closed; the peer redials
        }
        let len = u32::from_be_bytes(len_bytes) as usize;
        if len == 0 || len > PEER_FRAME_BYTES_MAX {
            return Err(PeerError(format!(
                "server {from}: frame of {len} bytes outside 1..={PEER_FRAME_BYTES_MAX}"
            )));
        }
        let mut body = vec![0u8; len];
        reader
            .read_exact(&mut body)
            .await
            .map_err(|e| PeerError(format!("server {from}: {e}")))?;
        let message = decode_body(&body)?;
        if inbound.send((from, message)).await.is_err() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::{Entry, MessageType};

    fn raft_message(to: u64, entries: usize) -> RaftMessage {
        let mut m = RaftMessage::new();
        m.set_msg_type(MessageType::MsgAppend);
        m.to = to;
        m.term = 3;
        m.entries = (0..entries)
            .map(|i| Entry {
                index: i as u64 + 1,
                data: vec![7; 10].into(),
                ..Default::default()
            })
            .collect();
        m
    }

    #[test]
    fn frames_round_trip_and_hostile_bodies_are_refused() {
        let mut out = Vec::new();
        let m = PeerMessage::Raft(raft_message(2, 3));
        encode_frame(&mut out, &m).unwrap();
        let len = u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(decode_body(&out[4..4 + len]).unwrap(), m);
        assert!(decode_body(&[]).is_err());
        assert!(decode_body(&[9, 1, 2]).is_err());
        assert!(decode_body(&[kind::RAFT, 0xff, 0xff, 0xff]).is_err());
        for cut in 1..len {
            let _ = decode_body(&out[4..4 + cut]); // never panics
        }
    }

    #[test]
    fn a_bad_hello_is_refused() {
        assert_eq!(parse_hello(&hello(7).try_into().unwrap()).unwrap(), 7);
        let mut bad: [u8; 20] = hello(7).try_into().unwrap();
        bad[0] = b'X';
        assert!(parse_hello(&bad).is_err());
    }

    #[test]
    fn two_servers_exchange_messages_over_loopback() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, async {
            let free = || {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
            };
            let (a, b) = (free(), free());
            let (a_tx, mut a_rx) = mpsc::channel(16);
            let (b_tx, mut b_rx) = mpsc::channel(16);
            let net_a = PeerNetwork::start(1, a, &[(2, b)], a_tx).await.unwrap();
            let net_b = PeerNetwork::start(2, b, &[(1, a)], b_tx).await.unwrap();
            assert!(net_a.send(2, PeerMessage::Raft(raft_message(2, 2))));
            assert!(net_b.send(1, PeerMessage::Engine(b"touch".to_vec())));
            assert!(!net_a.send(9, PeerMessage::Engine(vec![])), "unknown peer");
            let within = Duration::from_secs(10);
            let (from, got) = tokio::time::timeout(within, b_rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((from, got), (1, PeerMessage::Raft(raft_message(2, 2))));
            let (from, got) = tokio::time::timeout(within, a_rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((from, got), (2, PeerMessage::Engine(b"touch".to_vec())));
        });
    }
}
