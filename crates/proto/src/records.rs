//! The records of `zookeeper.jute` that a 3.9 client and server exchange,
//! field for field in jute order. Names are jute's in Rust case: a field
//! called `type` is `kind`, `timeOut` is `time_out`.

use crate::jute::{write_bool, DecodeError};
use crate::jute::{Field, Reader, Record};

/// Declares records whose encoding is exactly their fields in order.
macro_rules! records {
    ($(
        $(#[$meta:meta])*
        $name:ident { $($field:ident : $ty:ty),* $(,)? }
    )*) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            $(pub $field: $ty,)*
        }

        impl Record for $name {
            fn encode(&self, out: &mut Vec<u8>) {
                $(Field::encode_field(&self.$field, out);)*
            }

            fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                // Struct expressions evaluate their fields in source order,
                // which is the wire order.
                Ok($name { $($field: Field::decode_field(r)?,)* })
            }
        }

        impl Field for $name {
            fn encode_field(&self, out: &mut Vec<u8>) {
                Record::encode(self, out);
            }

            fn decode_field(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                <$name as Record>::decode(r)
            }
        }

        #[cfg(test)]
        impl crate::arbitrary::Arb for $name {
            fn arb() -> proptest::strategy::BoxedStrategy<Self> {
                use proptest::strategy::Strategy;
                ($(<$ty as crate::arbitrary::Arb>::arb(),)*)
                    .prop_map(|($($field,)*)| $name { $($field,)* })
                    .boxed()
            }
        }
    )*};
}

records! {
    /// `org.apache.zookeeper.data.Id`: an identity under an auth scheme.
    Id { scheme: String, id: String }

    /// `ACL`: permission bits granted to one identity.
    Acl { perms: i32, id: Id }

    /// `Stat`: the metadata of a znode as clients see it.
    Stat {
        czxid: i64,
        mzxid: i64,
        ctime: i64,
        mtime: i64,
        version: i32,
        cversion: i32,
        aversion: i32,
        ephemeral_owner: i64,
        data_length: i32,
        num_children: i32,
        pzxid: i64,
    }

    /// `ClientInfo`: one identity of a session, for `whoAmI`.
    ClientInfo { auth_scheme: String, user: String }

    SetWatches {
        relative_zxid: i64,
        data_watches: Vec<String>,
        exist_watches: Vec<String>,
        child_watches: Vec<String>,
    }

    SetWatches2 {
        relative_zxid: i64,
        data_watches: Vec<String>,
        exist_watches: Vec<String>,
        child_watches: Vec<String>,
        persistent_watches: Vec<String>,
        persistent_recursive_watches: Vec<String>,
    }

    /// Precedes every request body after the connect handshake.
    RequestHeader { xid: i32, kind: i32 }

    /// Precedes each op of a multi request and each result of its reply.
    MultiHeader { kind: i32, done: bool, err: i32 }

    AuthPacket { kind: i32, scheme: String, auth: Vec<u8> }

    /// Precedes every reply and notification from the server.
    ReplyHeader { xid: i32, zxid: i64, err: i32 }

    GetDataRequest { path: String, watch: bool }
    SetDataRequest { path: String, data: Option<Vec<u8>>, version: i32 }
    ReconfigRequest {
        joining_servers: String,
        leaving_servers: String,
        new_members: String,
        cur_config_id: i64,
    }
    SetDataResponse { stat: Stat }
    GetSaslRequest { token: Vec<u8> }
    SetSaslRequest { token: Vec<u8> }
    /// A null token ends a GSSAPI exchange (ZooKeeper's Java client waits
    /// for that null, not an empty token).
    SetSaslResponse { token: Option<Vec<u8>> }
    CreateRequest { path: String, data: Option<Vec<u8>>, acl: Vec<Acl>, flags: i32 }
    CreateTtlRequest { path: String, data: Option<Vec<u8>>, acl: Vec<Acl>, flags: i32, ttl: i64 }
    DeleteRequest { path: String, version: i32 }
    GetChildrenRequest { path: String, watch: bool }
    GetAllChildrenNumberRequest { path: String }
    GetChildren2Request { path: String, watch: bool }
    CheckVersionRequest { path: String, version: i32 }
    SyncRequest { path: String }
    SyncResponse { path: String }
    GetAclRequest { path: String }
    SetAclRequest { path: String, acl: Vec<Acl>, version: i32 }
    SetAclResponse { stat: Stat }
    AddWatchRequest { path: String, mode: i32 }
    WatcherEvent { kind: i32, state: i32, path: String }
    ErrorResponse { err: i32 }
    CreateResponse { path: String }
    Create2Response { path: String, stat: Stat }
    ExistsRequest { path: String, watch: bool }
    ExistsResponse { stat: Stat }
    GetDataResponse { data: Option<Vec<u8>>, stat: Stat }
    GetChildrenResponse { children: Vec<String> }
    GetAllChildrenNumberResponse { total_number: i32 }
    GetChildren2Response { children: Vec<String>, stat: Stat }
    GetAclResponse { acl: Vec<Acl>, stat: Stat }
    CheckWatchesRequest { path: String, kind: i32 }
    RemoveWatchesRequest { path: String, kind: i32 }
    GetEphemeralsRequest { prefix_path: String }
    GetEphemeralsResponse { ephemerals: Vec<String> }
    WhoAmIResponse { client_info: Vec<ClientInfo> }

    /// Not in zookeeper.jute: ZooKeeper's hand-written
    /// `DeleteContainerRequest`, whose path travels as a buffer, which is
    /// the same bytes as a ustring.
    DeleteContainerRequest { path: String }
}

impl Acl {
    /// `world:anyone` with every permission (`ZooDefs.Ids.OPEN_ACL_UNSAFE`).
    pub fn open_unsafe() -> Self {
        Acl {
            perms: crate::opcode::perms::ALL,
            id: Id {
                scheme: "world".to_owned(),
                id: "anyone".to_owned(),
            },
        }
    }
}

/// The first frame a client sends. `read_only` is the last field since
/// ZooKeeper 3.4; older clients omit it, and ZooKeeper then also omits it
/// from the `ConnectResponse` (see `compat.ProtocolManager`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectRequest {
    pub protocol_version: i32,
    pub last_zxid_seen: i64,
    pub time_out: i32,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    pub read_only: bool,
}

impl ConnectRequest {
    /// Decodes, and tells whether the client sent the `read_only` byte:
    /// the server must answer in the same dialect.
    pub fn decode_with_presence(r: &mut Reader<'_>) -> Result<(Self, bool), DecodeError> {
        let mut request = ConnectRequest {
            protocol_version: r.read_i32()?,
            last_zxid_seen: r.read_i64()?,
            time_out: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?,
            read_only: false,
        };
        let present = r.remaining() > 0;
        if present {
            request.read_only = r.read_bool()?;
        }
        Ok((request, present))
    }

    /// Encodes without the `read_only` byte, as a pre-3.4 client does.
    pub fn encode_legacy(&self, out: &mut Vec<u8>) {
        self.protocol_version.encode_field(out);
        self.last_zxid_seen.encode_field(out);
        self.time_out.encode_field(out);
        self.session_id.encode_field(out);
        self.passwd.encode_field(out);
    }
}

impl Record for ConnectRequest {
    fn encode(&self, out: &mut Vec<u8>) {
        self.encode_legacy(out);
        write_bool(out, self.read_only);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Self::decode_with_presence(r).map(|(request, _)| request)
    }
}

/// The server's answer to a `ConnectRequest`; `read_only` is optional on
/// the wire exactly as in the request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectResponse {
    pub protocol_version: i32,
    pub time_out: i32,
    pub session_id: i64,
    pub passwd: Vec<u8>,
    pub read_only: bool,
}

impl ConnectResponse {
    pub fn decode_with_presence(r: &mut Reader<'_>) -> Result<(Self, bool), DecodeError> {
        let mut response = ConnectResponse {
            protocol_version: r.read_i32()?,
            time_out: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?,
            read_only: false,
        };
        let present = r.remaining() > 0;
        if present {
            response.read_only = r.read_bool()?;
        }
        Ok((response, present))
    }

    /// Encodes without the `read_only` byte, for a client that did not send
    /// one in its `ConnectRequest`.
    pub fn encode_legacy(&self, out: &mut Vec<u8>) {
        self.protocol_version.encode_field(out);
        self.time_out.encode_field(out);
        self.session_id.encode_field(out);
        self.passwd.encode_field(out);
    }

    /// Encodes in the dialect the client used: with `read_only` when the
    /// client's `ConnectRequest` had it.
    pub fn encode_for(&self, out: &mut Vec<u8>, client_sent_read_only: bool) {
        if client_sent_read_only {
            self.encode(out);
        } else {
            self.encode_legacy(out);
        }
    }
}

impl Record for ConnectResponse {
    fn encode(&self, out: &mut Vec<u8>) {
        self.encode_legacy(out);
        write_bool(out, self.read_only);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Self::decode_with_presence(r).map(|(response, _)| response)
    }
}

#[cfg(test)]
mod arbitrary_connect {
    use super::{ConnectRequest, ConnectResponse};
    use crate::arbitrary::Arb;
    use proptest::prelude::*;

    impl Arb for ConnectRequest {
        fn arb() -> BoxedStrategy<Self> {
            (
                any::<i32>(),
                any::<i64>(),
                any::<i32>(),
                any::<i64>(),
                Vec::<u8>::arb(),
                any::<bool>(),
            )
                .prop_map(
                    |(
                        protocol_version,
                        last_zxid_seen,
                        time_out,
                        session_id,
                        passwd,
                        read_only,
                    )| {
                        ConnectRequest {
                            protocol_version,
                            last_zxid_seen,
                            time_out,
                            session_id,
                            passwd,
                            read_only,
                        }
                    },
                )
                .boxed()
        }
    }

    impl Arb for ConnectResponse {
        fn arb() -> BoxedStrategy<Self> {
            (
                any::<i32>(),
                any::<i32>(),
                any::<i64>(),
                Vec::<u8>::arb(),
                any::<bool>(),
            )
                .prop_map(
                    |(protocol_version, time_out, session_id, passwd, read_only)| ConnectResponse {
                        protocol_version,
                        time_out,
                        session_id,
                        passwd,
                        read_only,
                    },
                )
                .boxed()
        }
    }
}
