//! A client's frame as it reaches the engine: whole, or already decoded
//! by the thread that read it.
//!
//! Decoding a request is pure (its bytes alone decide it), so the reader
//! that cut the frames out of the socket decodes them too, and with
//! `io.threads` that work leaves the engine's thread. The first frame of a
//! connection, its connect request, stays whole: the engine decodes it as
//! part of the handshake.

use std::borrow::Cow;

use stoa_proto::frame::{decode_request_frame, FrameDecoder, RequestFrameError};
use stoa_proto::records::RequestHeader;
use stoa_proto::request::Request;

/// A request frame's decoding: its header and request, or why not.
pub type DecodedRequest = Result<(RequestHeader, Request), RequestFrameError>;

/// One frame's body (length prefix removed).
#[derive(Debug)]
pub enum ClientFrame<'a> {
    /// Not decoded yet (the connect request, or frames fed whole).
    Bytes(Cow<'a, [u8]>),
    /// A request frame decoded by its reader; `len` is its body's length.
    Request { len: usize, decoded: DecodedRequest },
}

impl ClientFrame<'_> {
    /// The body's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            ClientFrame::Bytes(bytes) => bytes.len(),
            ClientFrame::Request { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame, owning what it borrowed (to be kept for later).
    pub fn into_owned(self) -> ClientFrame<'static> {
        match self {
            ClientFrame::Bytes(bytes) => ClientFrame::Bytes(Cow::Owned(bytes.into_owned())),
            ClientFrame::Request { len, decoded } => ClientFrame::Request { len, decoded },
        }
    }

    /// The request it holds, decoding it if the reader did not.
    pub fn into_request(self) -> DecodedRequest {
        match self {
            ClientFrame::Bytes(bytes) => decode_request_frame(&bytes),
            ClientFrame::Request { decoded, .. } => decoded,
        }
    }
}

/// Cuts `bytes` (whole frames, each with its length prefix, every length
/// already checked by `decoder`) into frames: the connection's first frame
/// when `first` (its connect request) whole, every other one decoded.
pub fn decode_frames(
    decoder: &FrameDecoder,
    mut bytes: &[u8],
    mut first: bool,
) -> Vec<ClientFrame<'static>> {
    let mut frames = Vec::new();
    while let Ok(Some((consumed, body))) = decoder.decode(bytes) {
        frames.push(if std::mem::take(&mut first) {
            ClientFrame::Bytes(Cow::Owned(body.to_vec()))
        } else {
            ClientFrame::Request {
                len: body.len(),
                decoded: decode_request_frame(body),
            }
        });
        bytes = &bytes[consumed..];
    }
    debug_assert!(bytes.is_empty(), "only whole, checked frames are cut");
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoa_proto::frame::encode_request;
    use stoa_proto::opcode::OpCode;
    use stoa_proto::records::GetDataRequest;

    fn get(xid: i32, path: &str) -> Vec<u8> {
        let mut bytes = Vec::new();
        let header = RequestHeader {
            xid,
            kind: OpCode::GetData as i32,
        };
        let request = Request::GetData(GetDataRequest {
            path: path.into(),
            watch: false,
        });
        encode_request(&mut bytes, &header, &request);
        bytes
    }

    proptest::proptest! {
        /// Any bodies, cut from their frames: the first kept whole, every
        /// other one decoded exactly as the engine decodes a body it is
        /// given whole, and none lost or panicking.
        #[test]
        fn any_frames_cut_and_decode_as_the_engine_would(
            bodies in proptest::collection::vec(proptest::collection::vec(0u8..=255, 0..40), 0..6),
            first: bool,
        ) {
            let mut bytes = Vec::new();
            for body in &bodies {
                bytes.extend((body.len() as i32).to_be_bytes());
                bytes.extend(body);
            }
            let frames = decode_frames(&FrameDecoder::new(1 << 20), &bytes, first);
            proptest::prop_assert_eq!(frames.len(), bodies.len());
            for (i, (frame, body)) in frames.into_iter().zip(&bodies).enumerate() {
                proptest::prop_assert_eq!(frame.len(), body.len());
                proptest::prop_assert_eq!(matches!(frame, ClientFrame::Bytes(_)), first && i == 0);
                proptest::prop_assert_eq!(
                    format!("{:?}", frame.into_request()),
                    format!("{:?}", decode_request_frame(body))
                );
            }
        }
    }

    #[test]
    fn the_first_frame_stays_whole_and_the_others_decode_as_the_engine_would() {
        let decoder = FrameDecoder::new(1 << 20);
        let mut bytes = get(1, "/a");
        bytes.extend(get(2, "/b"));
        // An unknown opcode: a body error the engine answers Unimplemented.
        let mut unknown = get(3, "/c");
        unknown[11] = 99;
        bytes.extend(&unknown);
        let frames = decode_frames(&decoder, &bytes, true);
        assert_eq!(frames.len(), 3);
        let ClientFrame::Bytes(first) = &frames[0] else {
            panic!("the first frame was decoded: {:?}", frames[0]);
        };
        assert_eq!(&first[..], &get(1, "/a")[4..]);
        for (frame, whole) in frames
            .into_iter()
            .zip([get(1, "/a"), get(2, "/b"), unknown])
        {
            assert_eq!(frame.len(), whole.len() - 4);
            let expected = format!("{:?}", decode_request_frame(&whole[4..]));
            assert_eq!(format!("{:?}", frame.into_request()), expected);
        }
        let later = decode_frames(&decoder, &get(4, "/d"), false);
        assert!(matches!(
            &later[..],
            [ClientFrame::Request { decoded: Ok(_), .. }]
        ));
    }
}
