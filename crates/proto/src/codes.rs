//! ZooKeeper's result codes (`KeeperException.Code`), as they travel in
//! `ReplyHeader.err`, `ErrorResponse.err` and multi results.

use std::fmt;

macro_rules! error_codes {
    ($($variant:ident = $value:literal, $message:literal;)*) => {
        /// Every `KeeperException.Code` of ZooKeeper 3.9.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(i32)]
        pub enum ErrorCode {
            $($variant = $value,)*
        }

        impl ErrorCode {
            /// All codes, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            pub fn from_i32(value: i32) -> Option<Self> {
                match value {
                    $($value => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }

            /// The text ZooKeeper puts after "KeeperErrorCode = ".
            pub fn message(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $message,)*
                }
            }
        }
    };
}

// Messages follow KeeperException.getCodeMessage; the two codes it has no
// case for (UnknownSession, RequestTimeout) get their constant's name.
error_codes! {
    Ok = 0, "ok";
    SystemError = -1, "SystemError";
    RuntimeInconsistency = -2, "RuntimeInconsistency";
    DataInconsistency = -3, "DataInconsistency";
    ConnectionLoss = -4, "ConnectionLoss";
    MarshallingError = -5, "MarshallingError";
    Unimplemented = -6, "Unimplemented";
    OperationTimeout = -7, "OperationTimeout";
    BadArguments = -8, "BadArguments";
    UnknownSession = -12, "UnknownSession";
    NewConfigNoQuorum = -13, "NewConfigNoQuorum";
    ReconfigInProgress = -14, "ReconfigInProgress";
    ApiError = -100, "APIError";
    NoNode = -101, "NoNode";
    NoAuth = -102, "NoAuth";
    BadVersion = -103, "BadVersion";
    NoChildrenForEphemerals = -108, "NoChildrenForEphemerals";
    NodeExists = -110, "NodeExists";
    NotEmpty = -111, "Directory not empty";
    SessionExpired = -112, "Session expired";
    InvalidCallback = -113, "Invalid callback";
    InvalidAcl = -114, "InvalidACL";
    AuthFailed = -115, "AuthFailed";
    SessionMoved = -118, "Session moved";
    NotReadOnly = -119, "Not a read-only call";
    EphemeralOnLocalSession = -120, "Ephemeral node on local session";
    NoWatcher = -121, "No such watcher";
    RequestTimeout = -122, "RequestTimeout";
    ReconfigDisabled = -123, "Reconfig is disabled";
    SessionClosedRequireSaslAuth = -124, "Session closed because client failed to authenticate";
    QuotaExceeded = -125, "Quota has exceeded";
    Throttled = -127, "Op throttled due to high load";
}

impl ErrorCode {
    pub fn as_i32(self) -> i32 {
        self as i32
    }

    pub fn is_ok(self) -> bool {
        self == ErrorCode::Ok
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_integer() {
        for &code in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_i32(code.as_i32()), Some(code));
        }
        assert_eq!(ErrorCode::ALL.len(), 32);
        assert_eq!(ErrorCode::from_i32(-126), None);
        assert_eq!(ErrorCode::NoNode.to_string(), "NoNode");
    }
}
