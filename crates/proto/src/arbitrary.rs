//! Proptest strategies for every wire type (tests only).

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::Union;

use crate::codes::ErrorCode;
use crate::opcode::CreateMode;
use crate::records::*;
use crate::request::Request;
use crate::response::{MultiResult, Response};

const STRING_CHARS_MAX: usize = 8;
const BUFFER_BYTES_MAX: usize = 16;
const VEC_ELEMENTS_MAX: usize = 4;
const MULTI_OPS_MAX: usize = 5;

/// A type with a default proptest strategy.
pub trait Arb: Sized + std::fmt::Debug {
    fn arb() -> BoxedStrategy<Self>;
}

impl Arb for i32 {
    fn arb() -> BoxedStrategy<Self> {
        any::<i32>().boxed()
    }
}

impl Arb for i64 {
    fn arb() -> BoxedStrategy<Self> {
        any::<i64>().boxed()
    }
}

impl Arb for bool {
    fn arb() -> BoxedStrategy<Self> {
        any::<bool>().boxed()
    }
}

impl Arb for String {
    fn arb() -> BoxedStrategy<Self> {
        vec(any::<char>(), 0..=STRING_CHARS_MAX)
            .prop_map(String::from_iter)
            .boxed()
    }
}

impl Arb for Vec<u8> {
    fn arb() -> BoxedStrategy<Self> {
        vec(any::<u8>(), 0..=BUFFER_BYTES_MAX).boxed()
    }
}

impl Arb for Option<Vec<u8>> {
    fn arb() -> BoxedStrategy<Self> {
        proptest::option::of(vec(any::<u8>(), 0..=BUFFER_BYTES_MAX)).boxed()
    }
}

impl<T: Arb + 'static> Arb for Vec<T> {
    fn arb() -> BoxedStrategy<Self> {
        vec(T::arb(), 0..=VEC_ELEMENTS_MAX).boxed()
    }
}

impl Arb for ErrorCode {
    fn arb() -> BoxedStrategy<Self> {
        proptest::sample::select(ErrorCode::ALL).boxed()
    }
}

/// A create whose flags name a real `CreateMode`, as multi ops must.
fn valid_create() -> BoxedStrategy<CreateRequest> {
    (
        CreateRequest::arb(),
        proptest::sample::select(CreateMode::ALL),
    )
        .prop_map(|(mut create, mode)| {
            create.flags = mode.flags();
            create
        })
        .boxed()
}

pub fn write_op() -> BoxedStrategy<Request> {
    Union::new(vec![
        valid_create().prop_map(Request::Create).boxed(),
        valid_create().prop_map(Request::Create2).boxed(),
        valid_create().prop_map(Request::CreateContainer).boxed(),
        CreateTtlRequest::arb().prop_map(Request::CreateTtl).boxed(),
        DeleteRequest::arb().prop_map(Request::Delete).boxed(),
        SetDataRequest::arb().prop_map(Request::SetData).boxed(),
        CheckVersionRequest::arb().prop_map(Request::Check).boxed(),
    ])
    .boxed()
}

pub fn read_op() -> BoxedStrategy<Request> {
    Union::new(vec![
        GetDataRequest::arb().prop_map(Request::GetData).boxed(),
        GetChildrenRequest::arb()
            .prop_map(Request::GetChildren)
            .boxed(),
    ])
    .boxed()
}

impl Arb for Request {
    fn arb() -> BoxedStrategy<Self> {
        Union::new(vec![
            CreateRequest::arb().prop_map(Request::Create).boxed(),
            CreateRequest::arb().prop_map(Request::Create2).boxed(),
            CreateRequest::arb()
                .prop_map(Request::CreateContainer)
                .boxed(),
            CreateTtlRequest::arb().prop_map(Request::CreateTtl).boxed(),
            DeleteRequest::arb().prop_map(Request::Delete).boxed(),
            DeleteContainerRequest::arb()
                .prop_map(Request::DeleteContainer)
                .boxed(),
            ExistsRequest::arb().prop_map(Request::Exists).boxed(),
            GetDataRequest::arb().prop_map(Request::GetData).boxed(),
            SetDataRequest::arb().prop_map(Request::SetData).boxed(),
            GetAclRequest::arb().prop_map(Request::GetAcl).boxed(),
            SetAclRequest::arb().prop_map(Request::SetAcl).boxed(),
            GetChildrenRequest::arb()
                .prop_map(Request::GetChildren)
                .boxed(),
            GetChildren2Request::arb()
                .prop_map(Request::GetChildren2)
                .boxed(),
            SyncRequest::arb().prop_map(Request::Sync).boxed(),
            Just(Request::Ping).boxed(),
            CheckVersionRequest::arb().prop_map(Request::Check).boxed(),
            vec(write_op(), 0..=MULTI_OPS_MAX)
                .prop_map(Request::Multi)
                .boxed(),
            vec(read_op(), 0..=MULTI_OPS_MAX)
                .prop_map(Request::MultiRead)
                .boxed(),
            ReconfigRequest::arb().prop_map(Request::Reconfig).boxed(),
            CheckWatchesRequest::arb()
                .prop_map(Request::CheckWatches)
                .boxed(),
            RemoveWatchesRequest::arb()
                .prop_map(Request::RemoveWatches)
                .boxed(),
            GetAllChildrenNumberRequest::arb()
                .prop_map(Request::GetAllChildrenNumber)
                .boxed(),
            GetEphemeralsRequest::arb()
                .prop_map(Request::GetEphemerals)
                .boxed(),
            Just(Request::CloseSession).boxed(),
            AuthPacket::arb().prop_map(Request::Auth).boxed(),
            SetWatches::arb().prop_map(Request::SetWatches).boxed(),
            SetWatches2::arb().prop_map(Request::SetWatches2).boxed(),
            AddWatchRequest::arb().prop_map(Request::AddWatch).boxed(),
            Just(Request::WhoAmI).boxed(),
            GetSaslRequest::arb().prop_map(Request::Sasl).boxed(),
        ])
        .boxed()
    }
}

impl Arb for MultiResult {
    fn arb() -> BoxedStrategy<Self> {
        Union::new(vec![
            String::arb().prop_map(MultiResult::Create).boxed(),
            (String::arb(), Stat::arb())
                .prop_map(|(path, stat)| MultiResult::Create2(path, stat))
                .boxed(),
            Just(MultiResult::Delete).boxed(),
            Stat::arb().prop_map(MultiResult::SetData).boxed(),
            Just(MultiResult::Check).boxed(),
            (Option::<Vec<u8>>::arb(), Stat::arb())
                .prop_map(|(data, stat)| MultiResult::GetData(data, stat))
                .boxed(),
            Vec::<String>::arb()
                .prop_map(MultiResult::GetChildren)
                .boxed(),
            ErrorCode::arb().prop_map(MultiResult::Error).boxed(),
        ])
        .boxed()
    }
}

impl Arb for Response {
    fn arb() -> BoxedStrategy<Self> {
        Union::new(vec![
            Just(Response::Empty).boxed(),
            CreateResponse::arb().prop_map(Response::Create).boxed(),
            Create2Response::arb().prop_map(Response::Create2).boxed(),
            Stat::arb().prop_map(Response::Stat).boxed(),
            GetDataResponse::arb().prop_map(Response::GetData).boxed(),
            GetAclResponse::arb().prop_map(Response::GetAcl).boxed(),
            GetChildrenResponse::arb()
                .prop_map(Response::GetChildren)
                .boxed(),
            GetChildren2Response::arb()
                .prop_map(Response::GetChildren2)
                .boxed(),
            SyncResponse::arb().prop_map(Response::Sync).boxed(),
            vec(MultiResult::arb(), 0..=MULTI_OPS_MAX)
                .prop_map(Response::Multi)
                .boxed(),
            GetAllChildrenNumberResponse::arb()
                .prop_map(Response::GetAllChildrenNumber)
                .boxed(),
            GetEphemeralsResponse::arb()
                .prop_map(Response::GetEphemerals)
                .boxed(),
            WhoAmIResponse::arb().prop_map(Response::WhoAmI).boxed(),
            ErrorResponse::arb().prop_map(Response::AddWatch).boxed(),
            SetSaslResponse::arb().prop_map(Response::Sasl).boxed(),
        ])
        .boxed()
    }
}
