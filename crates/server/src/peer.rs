//! Server-to-server transport on the quorum port. Every server dials every
//! peer once and sends on that connection; what it receives arrives on the
//! connections peers dialed to it. Raft tolerates lost and duplicated
//! messages, so a full queue or a broken connection drops messages rather
//! than blocking the partition thread.
//!
//! Wire format: a hello frame naming the sender, then frames
//! `[len: u32 BE][kind: u8][payload]`, `len` counting kind and payload.
//! A raft message carrying a snapshot goes as a SNAPSHOT frame
//! `[data length: u64 BE][the raft message, its snapshot data left out]`
//! followed at once by SNAPSHOT_DATA frames whose payloads, concatenated,
//! are the data. The sender writes them straight from the snapshot it
//! holds and the receiver gathers them into the one buffer the message
//! then keeps: a snapshot is hundreds of megabytes, and each copy on the
//! way was one more of it in memory.
//!
//! A server not in the acceptor's membership is refused: the acceptor
//! answers its hello with one REFUSED frame carrying its membership
//! version and closes. That is how a server that missed its own removal
//! (the leader stops talking to a removed server) learns of it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use protobuf::Message as _;
use raft::eraftpb::Message as RaftMessage;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Largest frame accepted from a peer: room for a batch of appended
/// entries; snapshot data travels in frames below it.
pub const PEER_FRAME_BYTES_MAX: usize = 64 << 20;
/// Snapshot bytes carried by one SNAPSHOT_DATA frame.
const SNAPSHOT_PIECE_BYTES: usize = 16 << 20;
/// Largest snapshot a follower accepts: a serialized tree of this size is
/// the most it can be sent.
pub const PEER_SNAPSHOT_BYTES_MAX: u64 = 4 << 30;
/// raft's messages nest four deep (message → snapshot → metadata → conf
/// state); anything deeper is not ours.
const PROTOBUF_RECURSION_MAX: u32 = 8;
/// Messages queued toward one peer before new ones are dropped.
pub const PEER_QUEUE_MESSAGES_MAX: usize = 4096;
const HELLO_MAGIC: &[u8; 8] = b"STOAPEER";
/// The hello of a member that authenticates with SASL next
/// (`crate::peer_sasl`).
const SASL_HELLO_MAGIC: &[u8; 8] = b"STOASASL";
/// 2: snapshots as SNAPSHOT + SNAPSHOT_DATA frames (1 cut whole messages
/// into parts).
const PROTOCOL_VERSION: u32 = 2;
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// A peer connection whose sent data stays unacknowledged this long is
/// broken (TCP_USER_TIMEOUT) and redialed. Without it a connection that
/// lived through a partition keeps backing off its retransmissions (up to
/// two minutes apart), and a healed member stays behind that long.
const PEER_UNACKED_TIMEOUT: Duration = Duration::from_secs(2);
/// Keepalive probes find a dead connection that carries no data.
const PEER_KEEPALIVE_IDLE: Duration = Duration::from_secs(2);
const PEER_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// A dial that does not complete in this time is retried (a SYN to a
/// cut-off peer would otherwise wait out the kernel's retries).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(50);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(1);
/// A refused server dials again after this: each dial tells the refusing
/// side it is alive, and a reconfig adding it wants that from the last
/// second.
const REFUSED_REDIAL_DELAY: Duration = Duration::from_millis(400);
const WRITE_COALESCE_BYTES_MAX: usize = 1 << 20;
/// A write buffer grown past this (by a large message) is let go after use.
const WRITE_BUFFER_KEPT_BYTES_MAX: usize = 4 * WRITE_COALESCE_BYTES_MAX;

mod kind {
    pub const RAFT: u8 = 1;
    pub const ENGINE: u8 = 2;
    // 3 was protocol 1's PART.
    pub const REFUSED: u8 = 4;
    pub const SNAPSHOT: u8 = 5;
    pub const SNAPSHOT_DATA: u8 = 6;
    /// RAFT and SNAPSHOT of a partition other than 0: the payload starts
    /// with the partition (u32). Partition 0's messages keep the plain
    /// kinds, so a server of one partition sends what it always did.
    pub const PARTITION_RAFT: u8 = 7;
    pub const PARTITION_SNAPSHOT: u8 = 8;
}

#[derive(Debug, Clone, PartialEq)]
pub enum PeerMessage {
    /// A message of one partition's raft group.
    Raft {
        partition: u32,
        message: RaftMessage,
    },
    /// The engine's own messages (forwarded requests, session liveness);
    /// opaque here.
    Engine(Vec<u8>),
    /// The peer refused our connection: its membership, at this version,
    /// does not list us. Sent by the accepting side only.
    Refused { membership_version: i64 },
    /// Never on the wire: the accepting side's note that a server outside
    /// its membership dialed and was refused (a newcomer waiting for the
    /// reconfig that adds it is up and can reach this server).
    Knocked,
    /// Never on the wire: the accepting side's note that the connection a
    /// member sends on ended (its process may have died; the engine waits
    /// a moment for a word from it before it acts).
    Lost,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerError(pub String);

impl std::fmt::Display for PeerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Appends a message's frames. A snapshot's data is not among them: it is
/// returned, to follow at once as SNAPSHOT_DATA frames
/// ([`snapshot_data_frames`]) written from it directly.
pub fn encode_frame(out: &mut Vec<u8>, message: &PeerMessage) -> Result<Option<Bytes>, PeerError> {
    let encode_raft = |m: &RaftMessage| {
        m.write_to_bytes()
            .map_err(|e| PeerError(format!("encode raft message: {e}")))
    };
    let mut data = None;
    let (kind, payload): (u8, Cow<'_, [u8]>) = match message {
        PeerMessage::Raft {
            partition,
            message: m,
        } if !m.get_snapshot().data.is_empty() => {
            let snapshot_data = &m.get_snapshot().data;
            if snapshot_data.len() as u64 > PEER_SNAPSHOT_BYTES_MAX {
                return Err(PeerError(format!(
                    "snapshot of {} bytes exceeds {PEER_SNAPSHOT_BYTES_MAX}",
                    snapshot_data.len()
                )));
            }
            // A shallow copy: the data is shared, then left out.
            let mut head = m.clone();
            head.mut_snapshot().data = Bytes::new();
            let mut payload = partition_prefix(*partition);
            payload.extend_from_slice(&(snapshot_data.len() as u64).to_be_bytes());
            payload.extend_from_slice(&encode_raft(&head)?);
            data = Some(snapshot_data.clone());
            let kind = if *partition == 0 {
                kind::SNAPSHOT
            } else {
                kind::PARTITION_SNAPSHOT
            };
            (kind, payload.into())
        }
        PeerMessage::Raft {
            partition: 0,
            message,
        } => (kind::RAFT, encode_raft(message)?.into()),
        PeerMessage::Raft { partition, message } => {
            let mut payload = partition_prefix(*partition);
            payload.extend_from_slice(&encode_raft(message)?);
            (kind::PARTITION_RAFT, payload.into())
        }
        PeerMessage::Engine(bytes) => (kind::ENGINE, bytes.as_slice().into()),
        PeerMessage::Refused { membership_version } => (
            kind::REFUSED,
            membership_version.to_be_bytes().to_vec().into(),
        ),
        PeerMessage::Knocked | PeerMessage::Lost => {
            return Err(PeerError("a note of the transport is not sent".into()))
        }
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
    Ok(data)
}

/// What a PARTITION_ kind's payload starts with (nothing for partition 0,
/// whose messages use the plain kinds).
fn partition_prefix(partition: u32) -> Vec<u8> {
    if partition == 0 {
        Vec::new()
    } else {
        partition.to_be_bytes().to_vec()
    }
}

/// Splits a PARTITION_ kind's payload into its partition and the rest.
fn split_partition(payload: &[u8]) -> Result<(u32, &[u8]), PeerError> {
    let (partition, rest) = payload
        .split_first_chunk::<4>()
        .ok_or_else(|| PeerError("partition frame without its partition".into()))?;
    match u32::from_be_bytes(*partition) {
        0 => Err(PeerError("partition 0 sent as a partition frame".into())),
        partition => Ok((partition, rest)),
    }
}

/// A snapshot's data as SNAPSHOT_DATA frames: each frame's header, then
/// the piece of `data` it carries (to be written as is, not copied).
pub fn snapshot_data_frames(data: &[u8]) -> impl Iterator<Item = ([u8; 5], &[u8])> {
    data.chunks(SNAPSHOT_PIECE_BYTES).map(|piece| {
        let mut header = [0u8; 5];
        header[..4].copy_from_slice(&((1 + piece.len()) as u32).to_be_bytes());
        header[4] = kind::SNAPSHOT_DATA;
        (header, piece)
    })
}

/// Turns the frames of one connection back into messages, gathering a
/// snapshot's data into its message.
#[derive(Default)]
pub struct Assembler {
    /// A SNAPSHOT frame's partition and message, its data's declared
    /// length, and the data so far.
    snapshot: Option<((u32, RaftMessage), u64, BytesMut)>,
}

impl Assembler {
    /// One frame body; a message once it is whole.
    pub fn push(&mut self, body: &[u8]) -> Result<Option<PeerMessage>, PeerError> {
        match (body.split_first(), self.snapshot.as_mut()) {
            (Some((&kind::SNAPSHOT_DATA, piece)), Some((_, declared, data))) => {
                if piece.is_empty() || (data.len() + piece.len()) as u64 > *declared {
                    return Err(PeerError("snapshot data beyond its declared length".into()));
                }
                data.extend_from_slice(piece);
                if (data.len() as u64) < *declared {
                    return Ok(None);
                }
                let ((partition, mut message), _, data) =
                    self.snapshot.take().expect("matched above");
                message.mut_snapshot().data = data.freeze();
                Ok(Some(PeerMessage::Raft { partition, message }))
            }
            (Some((&kind::SNAPSHOT_DATA, _)), None) => {
                Err(PeerError("snapshot data without its message".into()))
            }
            (_, Some(_)) => Err(PeerError("a message interrupted a snapshot's data".into())),
            (Some((&kind @ (kind::SNAPSHOT | kind::PARTITION_SNAPSHOT), payload)), None) => {
                let (partition, payload) = match kind {
                    kind::SNAPSHOT => (0, payload),
                    _ => split_partition(payload)?,
                };
                let (declared, message) = payload
                    .split_first_chunk::<8>()
                    .ok_or_else(|| PeerError("snapshot frame without its length".into()))?;
                let declared = u64::from_be_bytes(*declared);
                if declared == 0 || declared > PEER_SNAPSHOT_BYTES_MAX {
                    return Err(PeerError(format!(
                        "snapshot of {declared} bytes (1..={PEER_SNAPSHOT_BYTES_MAX} accepted)"
                    )));
                }
                let message = decode_raft(message)?;
                if !message.get_snapshot().data.is_empty() {
                    return Err(PeerError("snapshot frame with data inside".into()));
                }
                // Grown as pieces arrive beyond this: the length is the
                // sender's word.
                let data = BytesMut::with_capacity(declared.min(1 << 30) as usize);
                self.snapshot = Some(((partition, message), declared, data));
                Ok(None)
            }
            _ => decode_body(body).map(Some),
        }
    }
}

fn decode_raft(payload: &[u8]) -> Result<RaftMessage, PeerError> {
    let mut input = protobuf::CodedInputStream::from_bytes(payload);
    input.set_recursion_limit(PROTOBUF_RECURSION_MAX);
    let mut m = RaftMessage::new();
    m.merge_from(&mut input)
        .map_err(|e| PeerError(format!("bad raft message: {e}")))?;
    Ok(m)
}

/// Decodes a frame body (`kind` + payload), bounded in size and depth.
pub fn decode_body(body: &[u8]) -> Result<PeerMessage, PeerError> {
    let (&kind, payload) = body
        .split_first()
        .ok_or_else(|| PeerError("empty peer frame".into()))?;
    match kind {
        kind::RAFT => decode_raft(payload).map(|message| PeerMessage::Raft {
            partition: 0,
            message,
        }),
        kind::PARTITION_RAFT => {
            let (partition, payload) = split_partition(payload)?;
            let message = decode_raft(payload)?;
            Ok(PeerMessage::Raft { partition, message })
        }
        kind::ENGINE => Ok(PeerMessage::Engine(payload.to_vec())),
        kind::REFUSED => {
            let version: [u8; 8] = payload
                .try_into()
                .map_err(|_| PeerError("refusal of the wrong size".into()))?;
            Ok(PeerMessage::Refused {
                membership_version: i64::from_be_bytes(version),
            })
        }
        kind::SNAPSHOT | kind::PARTITION_SNAPSHOT | kind::SNAPSHOT_DATA => Err(PeerError(
            "a snapshot's frame outside a connection's stream".into(),
        )),
        other => Err(PeerError(format!("unknown peer frame kind {other}"))),
    }
}

fn hello(from: u64, sasl: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(20);
    out.extend_from_slice(if sasl { SASL_HELLO_MAGIC } else { HELLO_MAGIC });
    out.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    out.extend_from_slice(&from.to_be_bytes());
    out
}

/// The sender's id, and whether it authenticates with SASL next.
fn parse_hello(bytes: &[u8; 20]) -> Result<(u64, bool), PeerError> {
    let sasl = match &bytes[..8] {
        magic if magic == HELLO_MAGIC => false,
        magic if magic == SASL_HELLO_MAGIC => true,
        _ => return Err(PeerError("not a Stoa peer (bad hello)".into())),
    };
    let version = u32::from_be_bytes(bytes[8..12].try_into().unwrap_or_default());
    if version != PROTOCOL_VERSION {
        return Err(PeerError(format!(
            "peer speaks protocol {version}, we speak {PROTOCOL_VERSION}"
        )));
    }
    let from = u64::from_be_bytes(bytes[12..20].try_into().unwrap_or_default());
    Ok((from, sasl))
}

/// The sending side: one queue and one dialing task per peer. The set of
/// peers follows the ensemble's membership (`set_peers`).
pub struct PeerNetwork {
    my_id: u64,
    dialers: HashMap<u64, Dialer>,
    /// Who may connect to us: shared with the accept loop, which runs on
    /// the same thread.
    known: Rc<RefCell<Known>>,
    /// Where dialers report a refusal (as if the peer had sent it).
    inbound: mpsc::Sender<(u64, PeerMessage)>,
    /// `sslQuorum`: every connection between members is TLS.
    tls: Option<PeerTls>,
    /// `quorum.auth.enableSasl`: members authenticate with SASL.
    sasl: Option<Rc<crate::peer_sasl::PeerSasl>>,
}

/// TLS between members (`sslQuorum`): both sides present their
/// certificate, and each checks the other's against the trust store.
#[derive(Clone)]
pub struct PeerTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub connector: tokio_rustls::TlsConnector,
    /// `sslQuorum`: this member dials with TLS.
    pub dial_tls: bool,
    /// `portUnification`: plain connections are taken beside TLS ones
    /// (told apart by their first byte).
    pub accept_plain: bool,
}

/// The membership as the accept loop needs it.
#[derive(Default)]
struct Known {
    ids: HashSet<u64>,
    /// Peers that refused this member's SASL credentials: their own
    /// connections are refused too, so a link between two members is up
    /// only when each authenticates to the other (else a member with a
    /// wrong password would hear the leader and never be heard).
    sasl_refused_by: HashSet<u64>,
    /// Told to a server we refuse.
    membership_version: i64,
}

struct Dialer {
    address: SocketAddr,
    outbox: mpsc::Sender<PeerMessage>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Dialer {
    fn drop(&mut self) {
        self.task.abort();
    }
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
        tls: Option<PeerTls>,
        sasl: Option<crate::peer_sasl::PeerSasl>,
    ) -> Result<PeerNetwork, PeerError> {
        let sasl = sasl.map(Rc::new);
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|e| PeerError(format!("cannot listen on quorum port {listen}: {e}")))?;
        let known = Rc::new(RefCell::new(Known::default()));
        let accepting = tls.as_ref().map(|t| (t.acceptor.clone(), t.accept_plain));
        tokio::task::spawn_local(accept_loop(
            listener,
            known.clone(),
            inbound.clone(),
            accepting,
            sasl.clone(),
        ));
        let mut network = PeerNetwork {
            my_id,
            dialers: HashMap::new(),
            known,
            inbound,
            tls,
            sasl,
        };
        // The configuration file's ensemble (version 0) until the engine
        // publishes the membership it recovered.
        network.set_peers(0, peers);
        Ok(network)
    }

    /// Makes `peers` (membership `version`) the set this server talks to:
    /// dials new ones (and moved ones at their new address), forgets the
    /// others.
    pub fn set_peers(&mut self, version: i64, peers: &[(u64, SocketAddr)]) {
        let me = self.my_id;
        self.dialers
            .retain(|id, d| peers.iter().any(|&(p, a)| p == *id && a == d.address));
        for &(id, address) in peers.iter().filter(|(id, _)| *id != me) {
            if self.dialers.contains_key(&id) {
                continue;
            }
            let (outbox, rx) = mpsc::channel(PEER_QUEUE_MESSAGES_MAX);
            let connector = (self.tls.as_ref())
                .filter(|t| t.dial_tls)
                .map(|t| t.connector.clone());
            let dialed = Dialed {
                me,
                peer: id,
                address,
            };
            let task = tokio::task::spawn_local(dial_loop(
                dialed,
                rx,
                self.inbound.clone(),
                connector,
                self.sasl.clone(),
                self.known.clone(),
            ));
            self.dialers.insert(
                id,
                Dialer {
                    address,
                    outbox,
                    task,
                },
            );
        }
        let mut known = self.known.borrow_mut();
        let Known {
            ids,
            sasl_refused_by,
            membership_version,
        } = &mut *known;
        *ids = peers.iter().map(|(id, _)| *id).collect();
        *membership_version = version;
        sasl_refused_by.retain(|id| ids.contains(id));
    }

    /// Queues a message; false when the peer is unknown or its queue is full
    /// (the message is dropped, which raft tolerates).
    pub fn send(&self, to: u64, message: PeerMessage) -> bool {
        self.dialers
            .get(&to)
            .is_some_and(|d| d.outbox.try_send(message).is_ok())
    }
}

/// Socket options for peer connections: no Nagle delay, and broken
/// connections detected within seconds (best effort: a platform without
/// these options keeps the kernel's defaults).
fn tune(stream: &TcpStream) {
    let _ = stream.set_nodelay(true);
    let socket = socket2::SockRef::from(stream);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(PEER_KEEPALIVE_IDLE)
        .with_interval(PEER_KEEPALIVE_INTERVAL);
    if let Err(e) = socket
        .set_tcp_keepalive(&keepalive)
        .and_then(|()| socket.set_tcp_user_timeout(Some(PEER_UNACKED_TIMEOUT)))
    {
        log::debug!("peer socket options: {e}");
    }
}

/// Who dials whom, where.
#[derive(Clone, Copy)]
struct Dialed {
    me: u64,
    peer: u64,
    address: SocketAddr,
}

/// How a connection to a peer ended.
enum Ended {
    /// Lost, or refused: dial again.
    Redial,
    /// The sending side is gone: the peer left the membership.
    Stop,
}

async fn dial_loop(
    dialed: Dialed,
    mut queue: mpsc::Receiver<PeerMessage>,
    inbound: mpsc::Sender<(u64, PeerMessage)>,
    tls: Option<tokio_rustls::TlsConnector>,
    sasl: Option<Rc<crate::peer_sasl::PeerSasl>>,
    known: Rc<RefCell<Known>>,
) {
    let Dialed { peer, address, .. } = dialed;
    let mut delay = RECONNECT_DELAY_MIN;
    // The last refusal's version: logged once, not on every redial.
    let mut refused_at: Option<i64> = None;
    loop {
        let connected = async {
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
                .await
                .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))?;
            tune(&stream);
            Ok::<_, std::io::Error>(stream)
        };
        let mut stream = match connected.await {
            Ok(s) => s,
            Err(e) => {
                log::debug!("peer {peer} at {address}: {e}; retrying in {delay:?}");
                if !back_off(&mut queue, &mut delay).await {
                    return;
                }
                continue;
            }
        };
        let mut received = Vec::new();
        let mut connection = Connection {
            dialed,
            queue: &mut queue,
            inbound: &inbound,
            refused_at: &mut refused_at,
            received: &mut received,
            delay: &mut delay,
            sasl: sasl.as_deref(),
            known: &known,
        };
        let ended = match &tls {
            None => {
                let (from_peer, to_peer) = stream.split();
                connection.serve(from_peer, to_peer).await
            }
            Some(connector) => {
                let name = rustls::pki_types::ServerName::IpAddress(address.ip().into());
                let handshake =
                    tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, stream));
                match handshake.await {
                    Ok(Ok(tls_stream)) => {
                        let (from_peer, to_peer) = tokio::io::split(tls_stream);
                        connection.serve(from_peer, to_peer).await
                    }
                    failed => {
                        let why = match failed {
                            Ok(Err(e)) => e.to_string(),
                            _ => "no TLS handshake in time".to_string(),
                        };
                        let delay = *connection.delay;
                        log::warn!("peer {peer} at {address}: TLS: {why}; retrying in {delay:?}");
                        redial_later(connection.queue, connection.delay).await
                    }
                }
            }
        };
        if let Ended::Stop = ended {
            return;
        }
        if refused_at.is_some() && received.is_empty() {
            // Closed without a refusal: no longer refused, or not yet known.
            refused_at = None;
        }
        // What was queued for the lost connection is stale; raft resends
        // what the peer still needs once it is back.
        while queue.try_recv().is_ok() {}
    }
}

/// One connection a dialer made, plain or TLS: its queue goes out on it,
/// and the only thing that can come back is a refusal.
struct Connection<'a> {
    dialed: Dialed,
    queue: &'a mut mpsc::Receiver<PeerMessage>,
    inbound: &'a mpsc::Sender<(u64, PeerMessage)>,
    refused_at: &'a mut Option<i64>,
    /// What the accepting side sent (a refusal, or nothing).
    received: &'a mut Vec<u8>,
    delay: &'a mut Duration,
    sasl: Option<&'a crate::peer_sasl::PeerSasl>,
    known: &'a RefCell<Known>,
}

impl Connection<'_> {
    /// Remembers whether `peer` refused this member's SASL credentials
    /// (`Known::sasl_refused_by`).
    fn note_credentials(&self, peer: u64, authenticated: &Result<(), PeerError>) {
        let mut known = self.known.borrow_mut();
        match authenticated {
            Err(e) if e.refused_credentials() => known.sasl_refused_by.insert(peer),
            _ => known.sasl_refused_by.remove(&peer),
        };
    }

    async fn serve<R, W>(&mut self, mut from_peer: R, mut to_peer: W) -> Ended
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let Dialed { me, peer, address } = self.dialed;
        if to_peer
            .write_all(&hello(me, self.sasl.is_some()))
            .await
            .is_err()
        {
            return Ended::Redial;
        }
        if let Some(sasl) = self.sasl {
            let mut both = tokio::io::join(&mut from_peer, &mut to_peer);
            let authenticated =
                crate::peer_sasl::authenticate(&mut both, sasl, peer, address).await;
            self.note_credentials(peer, &authenticated);
            if let Err(e) = authenticated {
                let delay = *self.delay;
                log::warn!("peer {peer} at {address}: {}; retrying in {delay:?}", e.0);
                return redial_later(self.queue, self.delay).await;
            }
        }
        if self.refused_at.is_none() {
            log::info!("connected to peer {peer} at {address}");
        }
        *self.delay = RECONNECT_DELAY_MIN;
        let mut read_buf = [0u8; 64];
        let mut buf = Vec::new();
        loop {
            tokio::select! {
                first = self.queue.recv() => {
                    let Some(first) = first else { return Ended::Stop };
                    buf.clear();
                    let mut next = Some(first);
                    let mut snapshot_data = None;
                    while let Some(message) = next.take() {
                        match encode_frame(&mut buf, &message) {
                            Ok(data) => snapshot_data = data,
                            Err(e) => log::error!("peer {peer}: {e}"),
                        }
                        // A snapshot's data follows its frame at once.
                        if snapshot_data.is_none() && buf.len() < WRITE_COALESCE_BYTES_MAX {
                            next = self.queue.try_recv().ok();
                        }
                    }
                    let mut written = to_peer.write_all(&buf).await;
                    for (header, piece) in snapshot_data.iter().flat_map(|d| snapshot_data_frames(d)) {
                        if written.is_ok() {
                            written = to_peer.write_all(&header).await;
                        }
                        if written.is_ok() {
                            written = to_peer.write_all(piece).await;
                        }
                    }
                    if written.is_ok() {
                        // A TLS stream holds written bytes until flushed.
                        written = to_peer.flush().await;
                    }
                    if buf.capacity() > WRITE_BUFFER_KEPT_BYTES_MAX {
                        // A rare large message: do not hold its size for good.
                        buf = Vec::new();
                    }
                    if let Err(e) = written {
                        if self.refused_at.is_none() {
                            log::warn!("peer {peer} at {address}: {e}; reconnecting");
                        }
                        return Ended::Redial;
                    }
                }
                read = from_peer.read(&mut read_buf) => {
                    let n = read.unwrap_or(0);
                    self.received.extend_from_slice(&read_buf[..n]);
                    if let Some(version) = refusal_in(self.received) {
                        if *self.refused_at != Some(version) {
                            log::warn!(
                                "peer {peer} refused this server: it is not in membership \
                                 version {version:x} there"
                            );
                        }
                        *self.refused_at = Some(version);
                        let refusal = PeerMessage::Refused { membership_version: version };
                        let _ = self.inbound.try_send((peer, refusal));
                        if !discard_for(self.queue, REFUSED_REDIAL_DELAY).await {
                            return Ended::Stop;
                        }
                        return Ended::Redial;
                    }
                    // Closed (redial), or bytes that are no refusal of ours.
                    if n == 0 || self.received.len() > read_buf.len() {
                        return Ended::Redial;
                    }
                }
            }
        }
    }
}

/// After a failed handshake: backs off, then redials (or stops, once the
/// sending side is gone).
async fn redial_later(queue: &mut mpsc::Receiver<PeerMessage>, delay: &mut Duration) -> Ended {
    if back_off(queue, delay).await {
        Ended::Redial
    } else {
        Ended::Stop
    }
}

/// After a failed dial: waits `delay` (dropping what is queued meanwhile)
/// and doubles it up to `RECONNECT_DELAY_MAX`. False once the sending side
/// is gone.
async fn back_off(queue: &mut mpsc::Receiver<PeerMessage>, delay: &mut Duration) -> bool {
    if !discard_for(queue, *delay).await {
        return false;
    }
    *delay = (*delay * 2).min(RECONNECT_DELAY_MAX);
    true
}

/// Waits `delay`, dropping whatever is queued meanwhile: with no connection
/// to the peer, messages would only pile up (a leader's appends to a peer
/// that is down, up to the queue's bound) and reach it stale when it comes
/// back. False once the sending side is gone.
async fn discard_for(queue: &mut mpsc::Receiver<PeerMessage>, delay: Duration) -> bool {
    let deadline = tokio::time::sleep(delay);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => return true,
            message = queue.recv() => {
                if message.is_none() {
                    return false;
                }
            }
        }
    }
}

/// The refusal in the bytes an accepting peer sent, once complete.
fn refusal_in(received: &[u8]) -> Option<i64> {
    let len = u32::from_be_bytes(received.get(..4)?.try_into().ok()?) as usize;
    let body = received.get(4..4 + len)?;
    match decode_body(body) {
        Ok(PeerMessage::Refused { membership_version }) => Some(membership_version),
        _ => None,
    }
}

/// The first byte of a TLS handshake record; a Stoa hello starts with
/// `S` (`HELLO_MAGIC`), so the two never meet.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// With `portUnification`: whether a new connection starts a TLS
/// handshake (else it speaks plain Stoa frames).
async fn starts_tls(stream: &TcpStream) -> Result<bool, PeerError> {
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(HELLO_TIMEOUT, stream.peek(&mut first))
        .await
        .map_err(|_| PeerError("nothing received in time".into()))?
        .map_err(|e| PeerError(format!("reading the first byte: {e}")))?;
    if peeked == 0 {
        return Err(PeerError("closed before its hello".into()));
    }
    Ok(first[0] == TLS_HANDSHAKE_RECORD)
}

async fn accept_loop(
    listener: TcpListener,
    known: Rc<RefCell<Known>>,
    inbound: mpsc::Sender<(u64, PeerMessage)>,
    tls: Option<(tokio_rustls::TlsAcceptor, bool)>,
    sasl: Option<Rc<crate::peer_sasl::PeerSasl>>,
) {
    loop {
        let Ok((stream, from_address)) = listener.accept().await else {
            continue;
        };
        tune(&stream);
        let inbound = inbound.clone();
        let known = known.clone();
        let tls = tls.clone();
        let sasl = sasl.clone();
        tokio::task::spawn_local(async move {
            let sasl = sasl.as_deref();
            let tls = match tls {
                Some((acceptor, true)) => match starts_tls(&stream).await {
                    Ok(true) => Some(acceptor),
                    Ok(false) => None,
                    Err(e) => {
                        log::warn!("peer connection from {from_address}: {e}");
                        return;
                    }
                },
                Some((acceptor, false)) => Some(acceptor),
                None => None,
            };
            let read = match tls {
                None => read_peer(stream, &known, &inbound, sasl).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HELLO_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls_stream)) => read_peer(tls_stream, &known, &inbound, sasl).await,
                        Ok(Err(e)) => Err(PeerError(format!("TLS: {e}"))),
                        Err(_) => Err(PeerError("no TLS handshake in time".into())),
                    }
                }
            };
            if let Err(e) = read {
                log::warn!("peer connection from {from_address}: {e}");
            }
        });
    }
}

async fn read_peer<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    known: &RefCell<Known>,
    inbound: &mpsc::Sender<(u64, PeerMessage)>,
    sasl: Option<&crate::peer_sasl::PeerSasl>,
) -> Result<(), PeerError> {
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let mut hello_bytes = [0u8; 20];
    tokio::time::timeout(HELLO_TIMEOUT, reader.read_exact(&mut hello_bytes))
        .await
        .map_err(|_| PeerError("no hello in time".into()))?
        .map_err(|e| PeerError(format!("reading hello: {e}")))?;
    let (from, authenticates) = parse_hello(&hello_bytes)?;
    if known.borrow().sasl_refused_by.contains(&from) {
        return Err(PeerError(format!(
            "server {from}: refused, as it refuses this member's SASL credentials"
        )));
    }
    let user = crate::peer_sasl::accept(&mut reader, sasl, authenticates)
        .await
        .map_err(|e| PeerError(format!("server {from}: {}", e.0)))?;
    if let Some(user) = user {
        log::debug!("server {from} authenticated as {user}");
    }
    let refusal = {
        let known = known.borrow();
        (!known.ids.contains(&from)).then_some(known.membership_version)
    };
    if let Some(membership_version) = refusal {
        // Quietly: a removed server keeps dialing (about once a second)
        // and logs the refusal itself.
        log::debug!("refusing server {from}: not in membership version {membership_version:x}");
        let mut frame = Vec::with_capacity(13);
        encode_frame(&mut frame, &PeerMessage::Refused { membership_version })?;
        let stream = reader.get_mut();
        if stream.write_all(&frame).await.is_ok() {
            let _ = stream.flush().await;
        }
        let _ = inbound.try_send((from, PeerMessage::Knocked));
        return Ok(());
    }
    let received = read_frames(reader, from, known, inbound).await;
    // However it ended, a member's connection is gone: a dead leader is
    // noticed here well before raft's election timeout.
    let _ = inbound.try_send((from, PeerMessage::Lost));
    received
}

/// Passes on a member's frames until its connection ends, or until that
/// member refuses this member's SASL credentials: its connection may have
/// been accepted just before this member's own dial to it was refused, and
/// a member that hears the leader but is never heard must not take itself
/// for a follower.
async fn read_frames<S: AsyncRead + Unpin>(
    mut reader: BufReader<S>,
    from: u64,
    known: &RefCell<Known>,
    inbound: &mpsc::Sender<(u64, PeerMessage)>,
) -> Result<(), PeerError> {
    let mut assembler = Assembler::default();
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
        let Some(message) = assembler.push(&body)? else {
            continue;
        };
        if known.borrow().sasl_refused_by.contains(&from) {
            return Err(PeerError(format!(
                "server {from}: connection closed, as it refuses this member's SASL credentials"
            )));
        }
        if inbound.send((from, message)).await.is_err() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::eraftpb::{Entry, MessageType};

    fn raft_in(partition: u32, message: RaftMessage) -> PeerMessage {
        PeerMessage::Raft { partition, message }
    }

    #[test]
    fn messages_of_other_partitions_carry_their_partition() {
        // Proves a message and a snapshot of partition 3 come back as
        // partition 3's, partition 0's use the plain kinds, and partition
        // frames that are cut short or name partition 0 are refused.
        let small = raft_in(3, raft_message(2, 2));
        let bytes = wire_bytes(&small);
        assert_eq!(bytes[4], kind::PARTITION_RAFT);
        assert_eq!(decode_body(&bytes[4..]).unwrap(), small);
        assert_eq!(wire_bytes(&raft_in(0, raft_message(2, 2)))[4], kind::RAFT);
        let big = raft_in(3, snapshot_message(SNAPSHOT_PIECE_BYTES + 9));
        let bytes = wire_bytes(&big);
        let mut assembler = Assembler::default();
        let mut got = Vec::new();
        for body in frames(&bytes) {
            got.extend(assembler.push(body).unwrap());
        }
        assert_eq!(got, vec![big]);
        assert!(decode_body(&[kind::PARTITION_RAFT, 0, 0]).is_err());
        assert!(decode_body(&[kind::PARTITION_RAFT, 0, 0, 0, 0]).is_err());
        let mut zero = vec![kind::PARTITION_SNAPSHOT, 0, 0, 0, 0];
        zero.extend_from_slice(&9u64.to_be_bytes());
        assert!(Assembler::default().push(&zero).is_err());
    }

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
        let m = raft_in(0, raft_message(2, 3));
        encode_frame(&mut out, &m).unwrap();
        let len = u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(decode_body(&out[4..4 + len]).unwrap(), m);
        assert!(decode_body(&[]).is_err());
        assert!(decode_body(&[9, 1, 2]).is_err());
        assert!(decode_body(&[kind::RAFT, 0xff, 0xff, 0xff]).is_err());
        let refusal = PeerMessage::Refused {
            membership_version: -2,
        };
        let mut out2 = Vec::new();
        encode_frame(&mut out2, &refusal).unwrap();
        assert_eq!(refusal_in(&out2), Some(-2));
        assert_eq!(refusal_in(&out2[..out2.len() - 1]), None, "incomplete");
        assert!(
            decode_body(&[kind::REFUSED, 1, 2]).is_err(),
            "short refusal"
        );
        for cut in 1..len {
            let _ = decode_body(&out[4..4 + cut]); // never panics
        }
    }

    fn frames(bytes: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            assert!(len <= PEER_FRAME_BYTES_MAX);
            out.push(&bytes[at + 4..at + 4 + len]);
            at += 4 + len;
        }
        out
    }

    /// A message's frames as the writer sends them: its own, then its
    /// snapshot's data frames.
    fn wire_bytes(message: &PeerMessage) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(data) = encode_frame(&mut out, message).unwrap() {
            for (header, piece) in snapshot_data_frames(&data) {
                out.extend_from_slice(&header);
                out.extend_from_slice(piece);
            }
        }
        out
    }

    fn snapshot_message(data_len: usize) -> RaftMessage {
        let mut snapshot = raft_message(2, 0);
        snapshot.set_msg_type(MessageType::MsgSnapshot);
        let data: Vec<u8> = (0..data_len).map(|i| (i * 7) as u8).collect();
        snapshot.mut_snapshot().data = data.into();
        snapshot.mut_snapshot().mut_metadata().index = 42;
        snapshot
    }

    #[test]
    fn a_snapshot_travels_as_its_message_then_its_data() {
        let big = raft_in(0, snapshot_message(SNAPSHOT_PIECE_BYTES * 2 + 77));
        let small = PeerMessage::Engine(b"after".to_vec());
        let mut out = wire_bytes(&big);
        out.extend_from_slice(&wire_bytes(&small));
        let bodies = frames(&out);
        assert_eq!(bodies.len(), 5, "the message, three pieces, the small one");
        assert!(
            bodies[0].len() < 100,
            "the data is not in the message's frame"
        );
        let mut assembler = Assembler::default();
        for body in &bodies[..3] {
            assert_eq!(assembler.push(body).unwrap(), None);
        }
        assert_eq!(assembler.push(bodies[3]).unwrap(), Some(big.clone()));
        assert_eq!(assembler.push(bodies[4]).unwrap(), Some(small.clone()));
        // A snapshot of exactly one piece, and a message without a snapshot.
        let one = raft_in(0, snapshot_message(SNAPSHOT_PIECE_BYTES));
        let mut assembler = Assembler::default();
        let got: Vec<_> = frames(&wire_bytes(&one))
            .into_iter()
            .filter_map(|b| assembler.push(b).unwrap())
            .collect();
        assert_eq!(got, vec![one]);
        let plain = raft_in(0, raft_message(2, 1));
        assert_eq!(frames(&wire_bytes(&plain)).len(), 1);
        // Out of order, interrupted, too long, or claiming too much.
        assert!(Assembler::default().push(bodies[1]).is_err(), "data first");
        let mut interrupted = Assembler::default();
        interrupted.push(bodies[0]).unwrap();
        interrupted.push(bodies[1]).unwrap();
        assert!(interrupted.push(bodies[4]).is_err());
        let mut overlong = Assembler::default();
        for body in &bodies[..3] {
            overlong.push(body).unwrap();
        }
        let mut extra = bodies[3].to_vec();
        extra.push(0);
        assert!(overlong.push(&extra).is_err());
        let mut huge = bodies[0].to_vec();
        huge[1..9].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(Assembler::default().push(&huge).is_err());
        let mut empty = bodies[0].to_vec();
        empty[1..9].copy_from_slice(&0u64.to_be_bytes());
        assert!(Assembler::default().push(&empty).is_err());
        assert!(decode_body(bodies[0]).is_err(), "only through an assembler");
    }

    proptest::proptest! {
        /// Arbitrary frame bodies never panic an assembler, whatever came
        /// before them.
        #[test]
        fn assembler_survives_any_bodies(
            bodies in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 0..8),
            prefix in 0usize..3,
        ) {
            let big = wire_bytes(&raft_in(0, snapshot_message(100)));
            let mut assembler = Assembler::default();
            for body in frames(&big).into_iter().take(prefix) {
                let _ = assembler.push(body);
            }
            for body in &bodies {
                let _ = assembler.push(body);
            }
        }
    }

    #[test]
    fn a_bad_hello_is_refused() {
        assert_eq!(
            parse_hello(&hello(7, false).try_into().unwrap()).unwrap(),
            (7, false)
        );
        assert_eq!(
            parse_hello(&hello(7, true).try_into().unwrap()).unwrap(),
            (7, true)
        );
        let mut bad: [u8; 20] = hello(7, false).try_into().unwrap();
        bad[0] = b'X';
        assert!(parse_hello(&bad).is_err());
    }

    #[test]
    fn a_member_that_refuses_our_credentials_is_no_longer_heard() {
        // Proves a connection accepted before its member refused this
        // member's credentials passes on nothing after the refusal: the
        // first frame arrives, the second (sent after) does not, and the
        // reader ends saying why.
        run_local(async {
            let known = RefCell::new(Known::default());
            let (inbound, mut heard) = mpsc::channel(4);
            let (mut to_reader, from_peer) = tokio::io::duplex(64 * 1024);
            let reading = read_frames(BufReader::new(from_peer), 2, &known, &inbound);
            let known = &known;
            let sending = async move {
                to_reader
                    .write_all(&wire_bytes(&raft_in(0, raft_message(2, 1))))
                    .await
                    .unwrap();
                let first = heard.recv().await.unwrap();
                known.borrow_mut().sasl_refused_by.insert(2);
                to_reader
                    .write_all(&wire_bytes(&raft_in(0, raft_message(2, 1))))
                    .await
                    .unwrap();
                drop(to_reader); // without the check, the reader ends Ok here
                (first, heard)
            };
            let (read, (first, mut heard)) = tokio::join!(reading, sending);
            assert_eq!(first.0, 2);
            let why = read.unwrap_err().0;
            assert!(
                why.contains("refuses this member's SASL credentials"),
                "{why}"
            );
            assert!(heard.try_recv().is_err());
        });
    }

    /// Runs `body` the way the partition thread runs the transport: on a
    /// current-thread runtime, inside a `LocalSet`.
    fn run_local<F: std::future::Future>(body: F) -> F::Output {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&runtime, body)
    }

    fn free_address() -> SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }

    #[test]
    fn two_servers_exchange_messages_over_loopback() {
        run_local(async {
            let (a, b) = (free_address(), free_address());
            let (a_tx, mut a_rx) = mpsc::channel(16);
            let (b_tx, mut b_rx) = mpsc::channel(16);
            let net_a = PeerNetwork::start(1, a, &[(2, b)], a_tx, None, None)
                .await
                .unwrap();
            let net_b = PeerNetwork::start(2, b, &[(1, a)], b_tx, None, None)
                .await
                .unwrap();
            assert!(net_a.send(2, raft_in(0, raft_message(2, 2))));
            assert!(net_b.send(1, PeerMessage::Engine(b"touch".to_vec())));
            assert!(!net_a.send(9, PeerMessage::Engine(vec![])), "unknown peer");
            let within = Duration::from_secs(10);
            let (from, got) = tokio::time::timeout(within, b_rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((from, got), (1, raft_in(0, raft_message(2, 2))));
            let (from, got) = tokio::time::timeout(within, a_rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((from, got), (2, PeerMessage::Engine(b"touch".to_vec())));
            // A snapshot of several pieces between two messages, in order.
            let snapshot = raft_in(0, snapshot_message(SNAPSHOT_PIECE_BYTES * 2 + 5));
            assert!(net_a.send(2, raft_in(0, raft_message(2, 1))));
            assert!(net_a.send(2, snapshot.clone()));
            assert!(net_a.send(2, raft_in(0, raft_message(2, 3))));
            for expected in [
                raft_in(0, raft_message(2, 1)),
                snapshot,
                raft_in(0, raft_message(2, 3)),
            ] {
                let (from, got) = tokio::time::timeout(within, b_rx.recv())
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!((from, got), (1, expected));
            }
        });
    }

    #[test]
    fn a_server_left_out_of_the_membership_is_told_so() {
        run_local(async {
            let (a, b) = (free_address(), free_address());
            let (a_tx, mut a_rx) = mpsc::channel(16);
            let (b_tx, mut b_rx) = mpsc::channel(16);
            // Server 1 applied a membership (version 0x500000002) without 2;
            // server 2 still thinks it is a member and dials 1.
            let mut net_a = PeerNetwork::start(1, a, &[], a_tx, None, None)
                .await
                .unwrap();
            net_a.set_peers(0x5_0000_0002, &[(1, a)]);
            let net_b = PeerNetwork::start(2, b, &[(1, a)], b_tx, None, None)
                .await
                .unwrap();
            assert!(net_b.send(1, PeerMessage::Engine(b"hello?".to_vec())));
            let within = Duration::from_secs(10);
            let (from, got) = tokio::time::timeout(within, b_rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                (from, got),
                (
                    1,
                    PeerMessage::Refused {
                        membership_version: 0x5_0000_0002
                    }
                )
            );
            // Server 1 only notes that server 2 knocked; nothing it sent
            // got through.
            let first = tokio::time::timeout(within, a_rx.recv()).await.unwrap();
            assert_eq!(first, Some((2, PeerMessage::Knocked)));
            let knocks = tokio::time::timeout(Duration::from_millis(300), async {
                while let Some((from, got)) = a_rx.recv().await {
                    assert_eq!((from, got), (2, PeerMessage::Knocked));
                }
            })
            .await;
            assert!(knocks.is_err(), "the channel stays open");
        });
    }
}
