//! Client connections: a reader task that cuts frames (or spots a
//! four-letter word) and a writer task that drains replies. Both run on the
//! partition thread's runtime; they talk to the engine loop by channels.

use std::net::SocketAddr;

use stoa_proto::frame::{FrameDecoder, FrameError, FRAME_LENGTH_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::fourlw;
use crate::watch::ConnId;

/// Events from connection tasks to the engine loop.
pub enum NetEvent {
    Accepted {
        conn: ConnId,
        peer: SocketAddr,
        writer: mpsc::UnboundedSender<Outgoing>,
        reader: tokio::task::AbortHandle,
    },
    /// Whole frames, length prefixes included, in the order read: every
    /// frame a read completed, in one hand-off.
    Frames {
        conn: ConnId,
        bytes: Vec<u8>,
    },
    FourLetter {
        conn: ConnId,
        word: String,
    },
    Closed {
        conn: ConnId,
    },
}

pub enum Outgoing {
    Bytes(Vec<u8>),
    /// Flush and close.
    Close,
}

/// Bytes read from a socket at once: pipelined requests then cost one
/// `recv` for many frames instead of two per frame.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// A connection's read buffer is given back when a large frame left it
/// bigger than this.
const READ_BUFFER_KEPT_BYTES_MAX: usize = 4 * READ_BUFFER_BYTES;
/// Coalesce queued replies into one write up to this size.
const WRITE_COALESCE_BYTES_MAX: usize = 256 * 1024;

pub async fn accept_loop(
    listener: TcpListener,
    events: mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
) {
    let mut next_conn: ConnId = 1;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                log::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = next_conn;
        next_conn += 1;
        spawn_connection(conn, stream, peer, events.clone(), max_frame_bytes).await;
    }
}

async fn spawn_connection(
    conn: ConnId,
    stream: TcpStream,
    peer: SocketAddr,
    events: mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
) {
    let (read_half, write_half) = stream.into_split();
    let (writer_tx, writer_rx) = mpsc::unbounded_channel();
    tokio::task::spawn_local(write_loop(write_half, writer_rx));
    let reader_events = events.clone();
    let reader = tokio::task::spawn_local(async move {
        match read_loop(conn, read_half, &reader_events, max_frame_bytes).await {
            // The engine answers the word and closes the connection itself.
            Ok(ReadEnd::FourLetterWord) => return,
            Err(reason) => log::info!("connection {conn} from {peer}: {reason}"),
        }
        let _ = reader_events.send(NetEvent::Closed { conn }).await;
    });
    let accepted = NetEvent::Accepted {
        conn,
        peer,
        writer: writer_tx,
        reader: reader.abort_handle(),
    };
    if events.send(accepted).await.is_err() {
        reader.abort();
    }
}

enum ReadEnd {
    FourLetterWord,
}

/// Reads into one buffer and hands the engine every complete frame a read
/// brought as one event: one copy, allocation and channel send per read
/// rather than per frame (pipelined clients send many frames at once).
async fn read_loop(
    conn: ConnId,
    mut socket: OwnedReadHalf,
    events: &mpsc::Sender<NetEvent>,
    max_frame_bytes: usize,
) -> Result<ReadEnd, String> {
    let decoder = FrameDecoder::new(max_frame_bytes);
    let mut buf: Vec<u8> = Vec::with_capacity(READ_BUFFER_BYTES);
    let mut first = true;
    // Bytes the frame at the front of `buf` needs in all, once known.
    let mut wanted = FRAME_LENGTH_BYTES;
    loop {
        buf.reserve(wanted.saturating_sub(buf.len()).max(READ_BUFFER_BYTES / 4));
        match socket.read_buf(&mut buf).await {
            Ok(0) if buf.is_empty() => return Err("closed by peer".into()),
            Ok(0) => return Err("closed by peer in the middle of a frame".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
        if first {
            let Some(&head) = buf.first_chunk::<FRAME_LENGTH_BYTES>() else {
                continue;
            };
            first = false;
            if let Some(word) = fourlw::recognise(head) {
                let _ = events
                    .send(NetEvent::FourLetter {
                        conn,
                        word: word.to_string(),
                    })
                    .await;
                return Ok(ReadEnd::FourLetterWord);
            }
        }
        let (complete, next) = whole_frames(&buf, &decoder)
            .map_err(|e| format!("{e} (jute.maxbuffer); closing connection"))?;
        wanted = next;
        if complete == 0 {
            continue;
        }
        let bytes = buf[..complete].to_vec();
        buf.drain(..complete);
        if buf.capacity() > READ_BUFFER_KEPT_BYTES_MAX && buf.len() < READ_BUFFER_BYTES {
            buf.shrink_to(READ_BUFFER_BYTES);
        }
        if events.send(NetEvent::Frames { conn, bytes }).await.is_err() {
            return Err("server shutting down".into());
        }
    }
}

/// How many bytes at the front of `buf` are whole frames, and how many
/// bytes the frame after them takes in all (prefix included) as far as
/// known: its length once its prefix is there, else just the prefix.
fn whole_frames(buf: &[u8], decoder: &FrameDecoder) -> Result<(usize, usize), FrameError> {
    let mut complete = 0;
    while let Some((consumed, _)) = decoder.decode(&buf[complete..])? {
        complete += consumed;
    }
    let next = match buf[complete..].first_chunk::<FRAME_LENGTH_BYTES>() {
        // The decoder has checked it: not negative, not over the maximum.
        Some(&prefix) => FRAME_LENGTH_BYTES + i32::from_be_bytes(prefix) as usize,
        None => FRAME_LENGTH_BYTES,
    };
    Ok((complete, next))
}

async fn write_loop(mut socket: OwnedWriteHalf, mut outgoing: mpsc::UnboundedReceiver<Outgoing>) {
    let mut buf = Vec::new();
    while let Some(first) = outgoing.recv().await {
        let mut close = false;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Outgoing::Bytes(bytes) => buf.extend_from_slice(&bytes),
                Outgoing::Close => {
                    close = true;
                    break;
                }
            }
            if buf.len() < WRITE_COALESCE_BYTES_MAX {
                next = outgoing.try_recv().ok();
            }
        }
        if !buf.is_empty() {
            if socket.write_all(&buf).await.is_err() {
                return;
            }
            buf.clear();
        }
        if close {
            let _ = socket.shutdown().await;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn framed(bodies: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for body in bodies {
            out.extend_from_slice(&(body.len() as i32).to_be_bytes());
            out.extend_from_slice(body);
        }
        out
    }

    proptest! {
        /// However the stream is cut into reads, the hand-offs carry the
        /// frames whole and in order, and nothing is left over.
        #[test]
        fn reads_cut_anywhere_hand_off_whole_frames_in_order(
            bodies in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..12),
            cuts in prop::collection::vec(1usize..200, 1..40),
        ) {
            let stream = framed(&bodies);
            let decoder = FrameDecoder::new(1000);
            let (mut buf, mut handed, mut at) = (Vec::new(), Vec::new(), 0);
            for cut in cuts.iter().cycle() {
                if at == stream.len() {
                    break;
                }
                let end = (at + cut).min(stream.len());
                buf.extend_from_slice(&stream[at..end]);
                at = end;
                let (complete, wanted) = whole_frames(&buf, &decoder).unwrap();
                prop_assert!(wanted >= FRAME_LENGTH_BYTES);
                if buf.len() > complete + FRAME_LENGTH_BYTES {
                    prop_assert!(wanted > buf.len() - complete, "a whole frame was left behind");
                }
                handed.extend(buf.drain(..complete));
            }
            prop_assert!(buf.is_empty());
            prop_assert_eq!(handed, stream);
        }
    }

    #[test]
    fn a_frame_over_the_maximum_or_negative_is_refused_from_its_prefix() {
        let decoder = FrameDecoder::new(100);
        assert_eq!(whole_frames(&[0, 0], &decoder).unwrap(), (0, 4));
        assert_eq!(whole_frames(&[0, 0, 0, 100], &decoder).unwrap(), (0, 104));
        assert!(whole_frames(&[0, 0, 0, 101], &decoder).is_err());
        assert!(whole_frames(&(-1i32).to_be_bytes(), &decoder).is_err());
        let two = framed(&[vec![7; 3], vec![8; 5]]);
        assert_eq!(whole_frames(&two, &decoder).unwrap(), (two.len(), 4));
        assert_eq!(whole_frames(&two[..10], &decoder).unwrap(), (7, 4));
        assert_eq!(whole_frames(&two[..11], &decoder).unwrap(), (7, 9));
    }
}
