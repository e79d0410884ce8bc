//! Golden bytes computed by hand from the field order of zookeeper.jute:
//! a field-order or width mistake in the codec fails here even though the
//! round-trip properties would still hold.

use stoa_proto::frame::{
    decode_connect_request, decode_request_frame, encode_connect_request, encode_connect_response,
    encode_notification, encode_reply, FrameDecoder, FrameError, RequestFrameError,
};
use stoa_proto::jute::{Reader, Record};
use stoa_proto::opcode::OpCode;
use stoa_proto::records::*;
use stoa_proto::{ErrorCode, MultiResult, Request, RequestError, Response};

/// Parses hex digits, ignoring whitespace and `|` separators.
fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text
        .bytes()
        .filter(|byte| byte.is_ascii_hexdigit())
        .collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn encoded(record: &impl Record) -> Vec<u8> {
    record.to_bytes()
}

fn sample_connect_request(read_only: bool) -> ConnectRequest {
    ConnectRequest {
        protocol_version: 0,
        last_zxid_seen: 0x0102_0304_0506_0708,
        time_out: 30_000,
        session_id: 0x1122_3344_5566_7788,
        passwd: vec![0xaa; 4],
        read_only,
    }
}

const CONNECT_REQUEST_LEGACY_HEX: &str =
    "00000000 | 0102030405060708 | 00007530 | 1122334455667788 | 00000004 aaaaaaaa";

#[test]
fn connect_request_with_read_only_matches_jute_layout() {
    let expected = hex(&format!("{CONNECT_REQUEST_LEGACY_HEX} | 01"));
    assert_eq!(encoded(&sample_connect_request(true)), expected);
    assert_eq!(
        decode_connect_request(&expected),
        Ok((sample_connect_request(true), true))
    );
}

#[test]
fn connect_request_without_read_only_decodes_as_an_old_client() {
    let legacy = hex(CONNECT_REQUEST_LEGACY_HEX);
    assert_eq!(legacy.len(), 32);
    let mut out = Vec::new();
    sample_connect_request(false).encode_legacy(&mut out);
    assert_eq!(out, legacy);
    assert_eq!(
        decode_connect_request(&legacy),
        Ok((sample_connect_request(false), false))
    );
    assert_eq!(
        ConnectRequest::from_bytes(&legacy),
        Ok(sample_connect_request(false))
    );
}

#[test]
fn fresh_session_connect_frame_is_the_45_byte_body_every_client_sends() {
    let request = ConnectRequest {
        time_out: 30_000,
        passwd: vec![0; 16],
        ..ConnectRequest::default()
    };
    let mut frame = Vec::new();
    encode_connect_request(&mut frame, &request);
    let expected = hex(
        "0000002d | 00000000 | 0000000000000000 | 00007530 | 0000000000000000 |
         00000010 00000000000000000000000000000000 | 00",
    );
    assert_eq!(frame, expected);
}

#[test]
fn connect_response_follows_the_client_dialect() {
    let response = ConnectResponse {
        protocol_version: 0,
        time_out: 10_000,
        session_id: 0x0100_0000_0000_0001,
        passwd: vec![0x55; 2],
        read_only: false,
    };
    let body = "00000000 | 00002710 | 0100000000000001 | 00000002 5555";
    let mut modern = Vec::new();
    encode_connect_response(&mut modern, &response, true);
    assert_eq!(modern, hex(&format!("00000017 | {body} | 00")));
    let mut legacy = Vec::new();
    encode_connect_response(&mut legacy, &response, false);
    assert_eq!(legacy, hex(&format!("00000016 | {body}")));
    let (decoded, present) =
        ConnectResponse::decode_with_presence(&mut Reader::new(&legacy[4..])).unwrap();
    assert_eq!((decoded, present), (response, false));
}

#[test]
fn reply_header_is_xid_zxid_err() {
    let header = ReplyHeader {
        xid: 7,
        zxid: 0x0000_0001_0000_0002,
        err: ErrorCode::NoNode.as_i32(),
    };
    let expected = hex("00000007 | 0000000100000002 | ffffff9b");
    assert_eq!(encoded(&header), expected);
    assert_eq!(ReplyHeader::from_bytes(&expected), Ok(header));
}

#[test]
fn create_request_with_open_acl_matches_jute_layout() {
    let request = CreateRequest {
        path: "/a".into(),
        data: Some(b"hi".to_vec()),
        acl: vec![Acl::open_unsafe()],
        flags: 1,
    };
    let expected = hex("00000002 2f61 | 00000002 6869 | 00000001 | 0000001f |
         00000005 776f726c64 | 00000006 616e796f6e65 | 00000001");
    assert_eq!(encoded(&request), expected);
    assert_eq!(CreateRequest::from_bytes(&expected), Ok(request));
}

#[test]
fn stat_fields_are_in_jute_order_and_width() {
    let stat = Stat {
        czxid: 1,
        mzxid: 2,
        ctime: 3,
        mtime: 4,
        version: 5,
        cversion: 6,
        aversion: 7,
        ephemeral_owner: 8,
        data_length: 9,
        num_children: 10,
        pzxid: 11,
    };
    let expected = hex(
        "0000000000000001 0000000000000002 0000000000000003 0000000000000004
         00000005 00000006 00000007 0000000000000008 00000009 0000000a
         000000000000000b",
    );
    assert_eq!(expected.len(), 68);
    assert_eq!(encoded(&stat), expected);
    assert_eq!(Stat::from_bytes(&expected), Ok(stat));
}

#[test]
fn multi_request_with_two_ops_is_headers_bodies_and_terminator() {
    let multi = Request::Multi(vec![
        Request::Check(CheckVersionRequest {
            path: "/a".into(),
            version: 3,
        }),
        Request::Delete(DeleteRequest {
            path: "/b".into(),
            version: -1,
        }),
    ]);
    let expected = hex("0000000d 00 ffffffff | 00000002 2f61 00000003 |
         00000002 00 ffffffff | 00000002 2f62 ffffffff |
         ffffffff 01 ffffffff");
    let mut out = Vec::new();
    multi.encode(&mut out);
    assert_eq!(out, expected);
    assert_eq!(
        Request::decode(OpCode::Multi.as_i32(), &mut Reader::new(&expected)),
        Ok(multi)
    );
}

#[test]
fn failed_multi_response_reports_every_op_as_an_error_result() {
    let response = Response::Multi(vec![
        MultiResult::Error(ErrorCode::Ok),
        MultiResult::Error(ErrorCode::NoNode),
    ]);
    let expected = hex("ffffffff 00 00000000 | 00000000 |
         ffffffff 00 ffffff9b | ffffff9b |
         ffffffff 01 ffffffff");
    let mut out = Vec::new();
    response.encode(&mut out);
    assert_eq!(out, expected);
    assert_eq!(
        Response::decode(OpCode::Multi, &mut Reader::new(&expected)),
        Ok(response)
    );
}

#[test]
fn successful_multi_response_carries_bodies_with_err_zero() {
    let response = Response::Multi(vec![
        MultiResult::Create("/a".into()),
        MultiResult::Delete,
        MultiResult::Check,
    ]);
    let expected = hex("00000001 00 00000000 | 00000002 2f61 |
         00000002 00 00000000 |
         0000000d 00 00000000 |
         ffffffff 01 ffffffff");
    let mut out = Vec::new();
    response.encode(&mut out);
    assert_eq!(out, expected);
}

#[test]
fn notification_frame_has_xid_minus_one_and_the_event() {
    let event = WatcherEvent {
        kind: 3,
        state: 3,
        path: "/a".into(),
    };
    let mut frame = Vec::new();
    encode_notification(&mut frame, 5, &event);
    let expected =
        hex("0000001e | ffffffff 0000000000000005 00000000 | 00000003 00000003 00000002 2f61");
    assert_eq!(frame, expected);
}

#[test]
fn error_reply_frame_is_header_only() {
    let header = ReplyHeader {
        xid: 2,
        zxid: 9,
        err: ErrorCode::NodeExists.as_i32(),
    };
    let response = Response::Create(CreateResponse { path: "/x".into() });
    let mut frame = Vec::new();
    encode_reply(&mut frame, &header, &response);
    assert_eq!(frame, hex("00000010 | 00000002 0000000000000009 ffffff92"));
}

#[test]
fn add_watch_reply_body_is_an_error_response_of_zero() {
    let header = ReplyHeader {
        xid: 4,
        zxid: 1,
        err: 0,
    };
    let mut frame = Vec::new();
    encode_reply(
        &mut frame,
        &header,
        &Response::AddWatch(ErrorResponse { err: 0 }),
    );
    assert_eq!(
        frame,
        hex("00000014 | 00000004 0000000000000001 00000000 | 00000000")
    );
}

#[test]
fn get_data_request_frame_decodes_header_then_body() {
    let body = hex("00000001 00000004 | 00000002 2f61 | 01");
    let (header, request) = decode_request_frame(&body).unwrap();
    assert_eq!(header, RequestHeader { xid: 1, kind: 4 });
    assert_eq!(
        request,
        Request::GetData(GetDataRequest {
            path: "/a".into(),
            watch: true
        })
    );
    assert_eq!(request.path(), Some("/a"));
    assert!(!request.is_write());
}

#[test]
fn unknown_opcode_keeps_the_header_for_the_reply() {
    let body = hex("00000009 000003e7");
    let error = decode_request_frame(&body).unwrap_err();
    assert_eq!(
        error,
        RequestFrameError::Body {
            header: RequestHeader { xid: 9, kind: 999 },
            error: RequestError::UnknownOpcode(999),
        }
    );
    assert_eq!(error.header().map(|h| h.xid), Some(9));
}

#[test]
fn top_level_check_is_unknown_as_in_zookeeper_request_is_valid() {
    let body = hex("00000003 0000000d | 00000002 2f61 00000000");
    assert!(matches!(
        decode_request_frame(&body),
        Err(RequestFrameError::Body {
            error: RequestError::UnknownOpcode(13),
            ..
        })
    ));
}

#[test]
fn truncated_body_is_malformed_with_its_header() {
    let body = hex("00000005 00000001 | 00000010 2f");
    assert!(matches!(
        decode_request_frame(&body),
        Err(RequestFrameError::Body {
            header: RequestHeader { xid: 5, kind: 1 },
            error: RequestError::Malformed(_),
        })
    ));
    assert!(matches!(
        decode_request_frame(&hex("000000")),
        Err(RequestFrameError::Header(_))
    ));
}

#[test]
fn multi_refuses_mixed_kinds_and_bad_create_flags() {
    let mixed = hex("00000002 00 ffffffff | 00000002 2f61 ffffffff |
         00000004 00 ffffffff | 00000002 2f61 00 |
         ffffffff 01 ffffffff");
    assert!(matches!(
        Request::decode(OpCode::Multi.as_i32(), &mut Reader::new(&mixed)),
        Err(RequestError::Malformed(_))
    ));
    let bad_flags = hex(
        "00000001 00 ffffffff | 00000002 2f61 00000000 00000000 00000007 |
         ffffffff 01 ffffffff",
    );
    assert!(matches!(
        Request::decode(OpCode::Multi.as_i32(), &mut Reader::new(&bad_flags)),
        Err(RequestError::Malformed(_))
    ));
}

#[test]
fn jute_nulls_decode_as_empty_and_other_negative_lengths_fail() {
    let mut r = Reader::new(&[0xff; 12]);
    assert_eq!(r.read_string(), Ok(String::new()));
    assert_eq!(r.read_buffer(), Ok(Vec::new()));
    assert_eq!(r.read_vec(|r| r.read_string()), Ok(Vec::new()));
    // A vector count below -1 is zero elements in jute's BinaryIndex.
    assert_eq!(
        GetChildrenResponse::from_bytes(&hex("fffffffe")),
        Ok(GetChildrenResponse::default())
    );
    assert!(Reader::new(&hex("fffffffe")).read_string().is_err());
    assert!(Reader::new(&hex("00000002 c328")).read_string().is_err());
    assert!(Reader::new(&hex("7fffffff 00")).read_buffer().is_err());
}

#[test]
fn frame_decoder_waits_checks_and_splits() {
    let decoder = FrameDecoder::new(8);
    assert_eq!(decoder.decode(&hex("000000")), Ok(None));
    assert_eq!(decoder.decode(&hex("00000002 01")), Ok(None));
    let stream = hex("00000002 0102 | 00000000");
    assert_eq!(decoder.decode(&stream), Ok(Some((6, &stream[4..6]))));
    assert_eq!(decoder.decode(&stream[6..]), Ok(Some((4, &[][..]))));
    assert_eq!(
        decoder.decode(&hex("00000009")),
        Err(FrameError::TooLarge { len: 9, max: 8 })
    );
    assert_eq!(
        decoder.decode(&hex("ffffffff")),
        Err(FrameError::Negative(-1))
    );
    assert_eq!(
        FrameDecoder::default().decode(&hex("000fffff")),
        Ok(None),
        "jute.maxbuffer itself is allowed"
    );
    assert!(FrameDecoder::default().decode(&hex("00100000")).is_err());
}

/// Znode data may be null (jute buffer length -1), and null stays null:
/// ZooKeeper tells it apart from empty data.
#[test]
fn null_znode_data_round_trips_apart_from_empty() {
    use stoa_proto::jute::Record;
    use stoa_proto::records::{CreateRequest, GetDataResponse};
    for data in [None, Some(Vec::new()), Some(b"x".to_vec())] {
        let request = CreateRequest {
            path: "/n".into(),
            data: data.clone(),
            acl: Vec::new(),
            flags: 0,
        };
        let mut bytes = Vec::new();
        request.encode(&mut bytes);
        let length = &bytes[6..10]; // after the path: i32 length 2, "/n"
        let expected: i32 = data.as_ref().map_or(-1, |d| d.len() as i32);
        assert_eq!(length, expected.to_be_bytes());
        assert_eq!(CreateRequest::from_bytes(&bytes).unwrap(), request);
        let reply = GetDataResponse {
            data,
            ..GetDataResponse::default()
        };
        let mut bytes = Vec::new();
        reply.encode(&mut bytes);
        assert_eq!(GetDataResponse::from_bytes(&bytes).unwrap(), reply);
    }
}
