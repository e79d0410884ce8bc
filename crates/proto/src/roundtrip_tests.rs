//! Round-trip properties: decode(encode(x)) == x for every record, request
//! and response, and decoding consumes exactly the encoded bytes.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::arbitrary::Arb;
use crate::frame::{decode_request_frame, encode_request, FrameDecoder};
use crate::jute::{Reader, Record};
use crate::opcode::OpCode;
use crate::records::*;
use crate::request::Request;
use crate::response::Response;

const CASES_PER_TYPE: u32 = 256;

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: CASES_PER_TYPE,
        failure_persistence: None,
        ..Config::default()
    })
}

fn check_record_roundtrip<T: Record + Arb + PartialEq + Clone>() {
    runner()
        .run(&T::arb(), |value| {
            let bytes = value.to_bytes();
            let mut r = Reader::new(&bytes);
            let decoded = T::decode(&mut r).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&decoded, &value);
            prop_assert_eq!(r.remaining(), 0);
            Ok(())
        })
        .unwrap();
}

macro_rules! record_roundtrips {
    ($($test:ident: $ty:ty,)*) => {$(
        #[test]
        fn $test() {
            check_record_roundtrip::<$ty>();
        }
    )*};
}

record_roundtrips! {
    id_roundtrips: Id,
    acl_roundtrips: Acl,
    stat_roundtrips: Stat,
    client_info_roundtrips: ClientInfo,
    connect_request_roundtrips: ConnectRequest,
    connect_response_roundtrips: ConnectResponse,
    set_watches_roundtrips: SetWatches,
    set_watches2_roundtrips: SetWatches2,
    request_header_roundtrips: RequestHeader,
    multi_header_roundtrips: MultiHeader,
    auth_packet_roundtrips: AuthPacket,
    reply_header_roundtrips: ReplyHeader,
    get_data_request_roundtrips: GetDataRequest,
    set_data_request_roundtrips: SetDataRequest,
    reconfig_request_roundtrips: ReconfigRequest,
    set_data_response_roundtrips: SetDataResponse,
    get_sasl_request_roundtrips: GetSaslRequest,
    set_sasl_request_roundtrips: SetSaslRequest,
    set_sasl_response_roundtrips: SetSaslResponse,
    create_request_roundtrips: CreateRequest,
    create_ttl_request_roundtrips: CreateTtlRequest,
    delete_request_roundtrips: DeleteRequest,
    get_children_request_roundtrips: GetChildrenRequest,
    get_all_children_number_request_roundtrips: GetAllChildrenNumberRequest,
    get_children2_request_roundtrips: GetChildren2Request,
    check_version_request_roundtrips: CheckVersionRequest,
    sync_request_roundtrips: SyncRequest,
    sync_response_roundtrips: SyncResponse,
    get_acl_request_roundtrips: GetAclRequest,
    set_acl_request_roundtrips: SetAclRequest,
    set_acl_response_roundtrips: SetAclResponse,
    add_watch_request_roundtrips: AddWatchRequest,
    watcher_event_roundtrips: WatcherEvent,
    error_response_roundtrips: ErrorResponse,
    create_response_roundtrips: CreateResponse,
    create2_response_roundtrips: Create2Response,
    exists_request_roundtrips: ExistsRequest,
    exists_response_roundtrips: ExistsResponse,
    get_data_response_roundtrips: GetDataResponse,
    get_children_response_roundtrips: GetChildrenResponse,
    get_all_children_number_response_roundtrips: GetAllChildrenNumberResponse,
    get_children2_response_roundtrips: GetChildren2Response,
    get_acl_response_roundtrips: GetAclResponse,
    check_watches_request_roundtrips: CheckWatchesRequest,
    remove_watches_request_roundtrips: RemoveWatchesRequest,
    get_ephemerals_request_roundtrips: GetEphemeralsRequest,
    get_ephemerals_response_roundtrips: GetEphemeralsResponse,
    who_am_i_response_roundtrips: WhoAmIResponse,
    delete_container_request_roundtrips: DeleteContainerRequest,
}

/// The opcode whose reply has the shape of `response`.
fn reply_opcode(response: &Response) -> OpCode {
    match response {
        Response::Empty => OpCode::Delete,
        Response::Create(_) => OpCode::Create,
        Response::Create2(_) => OpCode::Create2,
        Response::Stat(_) => OpCode::Exists,
        Response::GetData(_) => OpCode::GetData,
        Response::GetAcl(_) => OpCode::GetAcl,
        Response::GetChildren(_) => OpCode::GetChildren,
        Response::GetChildren2(_) => OpCode::GetChildren2,
        Response::Sync(_) => OpCode::Sync,
        Response::Multi(_) => OpCode::Multi,
        Response::GetAllChildrenNumber(_) => OpCode::GetAllChildrenNumber,
        Response::GetEphemerals(_) => OpCode::GetEphemerals,
        Response::WhoAmI(_) => OpCode::WhoAmI,
        Response::AddWatch(_) => OpCode::AddWatch,
        Response::Sasl(_) => OpCode::Sasl,
    }
}

#[test]
fn every_request_variant_roundtrips_including_multi() {
    let mut runner = TestRunner::new(Config {
        cases: 4096,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&Request::arb(), |request| {
            let mut bytes = Vec::new();
            request.encode(&mut bytes);
            let mut r = Reader::new(&bytes);
            let decoded = Request::decode(request.opcode().as_i32(), &mut r)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&decoded, &request);
            prop_assert_eq!(r.remaining(), 0);
            Ok(())
        })
        .unwrap();
}

#[test]
fn every_request_roundtrips_through_a_frame() {
    let strategy = (any::<i32>(), Request::arb())
        .prop_filter("top-level check is not valid", |(_, request)| {
            !matches!(request, Request::Check(_))
        });
    runner()
        .run(&strategy, |(xid, request)| {
            let header = RequestHeader {
                xid,
                kind: request.opcode().as_i32(),
            };
            let mut frame = Vec::new();
            encode_request(&mut frame, &header, &request);
            let (consumed, body) = FrameDecoder::default()
                .decode(&frame)
                .map_err(|e| TestCaseError::fail(e.to_string()))?
                .ok_or_else(|| TestCaseError::fail("incomplete frame"))?;
            prop_assert_eq!(consumed, frame.len());
            let (decoded_header, decoded) =
                decode_request_frame(body).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(decoded_header, header);
            prop_assert_eq!(decoded, request);
            Ok(())
        })
        .unwrap();
}

#[test]
fn every_response_variant_roundtrips_including_multi() {
    let mut runner = TestRunner::new(Config {
        cases: 4096,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&Response::arb(), |response| {
            let mut bytes = Vec::new();
            response.encode(&mut bytes);
            let mut r = Reader::new(&bytes);
            let decoded = Response::decode(reply_opcode(&response), &mut r)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&decoded, &response);
            prop_assert_eq!(r.remaining(), 0);
            Ok(())
        })
        .unwrap();
}

#[test]
fn create_family_replies_share_the_create2_shape() {
    let response = Response::Create2(Create2Response {
        path: "/a".into(),
        stat: Stat::default(),
    });
    let mut bytes = Vec::new();
    response.encode(&mut bytes);
    for op in [OpCode::Create2, OpCode::CreateTtl, OpCode::CreateContainer] {
        assert_eq!(
            Response::decode(op, &mut Reader::new(&bytes)),
            Ok(response.clone())
        );
    }
}

/// Frames handed over as values decode, in order, to the replies and
/// events they hold, and `Encoded` carries bytes through unchanged.
#[test]
fn outgoing_frames_encode_to_the_frames_they_hold() {
    use crate::frame::{decode_reply_frame, encode_frames, encode_reply, OutgoingFrame};
    use crate::opcode::NOTIFICATION_XID;
    let reply = (any::<i32>(), any::<i64>(), any::<bool>(), Response::arb())
        .prop_filter("a reply's xid is not the notification's", |(xid, ..)| {
            *xid != NOTIFICATION_XID
        })
        .prop_map(|(xid, zxid, failed, response)| {
            let err = if failed { -101 } else { 0 };
            OutgoingFrame::Reply(ReplyHeader { xid, zxid, err }, response)
        });
    let frame = prop_oneof![
        reply.clone(),
        (any::<i64>(), WatcherEvent::arb())
            .prop_map(|(zxid, event)| OutgoingFrame::Notification(zxid, event)),
        reply.prop_map(|frame| {
            let OutgoingFrame::Reply(header, response) = frame else {
                unreachable!()
            };
            let mut bytes = Vec::new();
            encode_reply(&mut bytes, &header, &response);
            OutgoingFrame::Encoded(bytes)
        }),
    ];
    let mut runner = TestRunner::new(Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(frame, 0..6), |frames| {
            let mut bytes = Vec::new();
            encode_frames(&mut bytes, &frames);
            let mut rest = &bytes[..];
            for frame in &frames {
                let (consumed, body) = FrameDecoder::new(usize::MAX >> 1)
                    .decode(rest)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?
                    .ok_or_else(|| TestCaseError::fail("incomplete frame"))?;
                rest = &rest[consumed..];
                let (header, mut body) =
                    decode_reply_frame(body).map_err(|e| TestCaseError::fail(e.to_string()))?;
                match frame {
                    OutgoingFrame::Notification(zxid, event) => {
                        prop_assert_eq!(header.xid, NOTIFICATION_XID);
                        prop_assert_eq!(header.zxid, *zxid);
                        let mut r = Reader::new(body);
                        let decoded = WatcherEvent::decode(&mut r)
                            .map_err(|e| TestCaseError::fail(e.to_string()))?;
                        prop_assert_eq!(&decoded, event);
                        body = r.rest();
                    }
                    OutgoingFrame::Reply(expected, response) => {
                        prop_assert_eq!(&header, expected);
                        if header.err == 0 {
                            let mut r = Reader::new(body);
                            let decoded = Response::decode(reply_opcode(response), &mut r)
                                .map_err(|e| TestCaseError::fail(e.to_string()))?;
                            prop_assert_eq!(&decoded, response);
                            body = r.rest();
                        }
                    }
                    OutgoingFrame::Encoded(encoded) => {
                        prop_assert_eq!(
                            &encoded[..],
                            &bytes[bytes.len() - rest.len() - consumed..][..consumed]
                        );
                        body = &[];
                    }
                }
                prop_assert!(body.is_empty(), "bytes left in a frame");
            }
            prop_assert!(rest.is_empty());
            Ok(())
        })
        .unwrap();
}
