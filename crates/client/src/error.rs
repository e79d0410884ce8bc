//! The client's error type: one variant per ZooKeeper result code (each with
//! the path of the request that failed), plus what can go wrong on this side
//! of the wire.

use std::fmt;
use std::io;

use stoa_proto::codes::ErrorCode;

macro_rules! keeper_errors {
    ($($variant:ident,)*) => {
        /// Why a client call failed.
        ///
        /// Every `ErrorCode` except `Ok` has a variant of the same name that
        /// carries the path of the failed request (empty for requests that
        /// name no path, such as `whoami`).
        #[derive(Debug)]
        pub enum Error {
            $(
                #[doc = concat!("The server answered `", stringify!($variant), "`.")]
                $variant { path: String },
            )*
            /// The path was refused before anything was sent, with the
            /// message ZooKeeper's `PathUtils.validatePath` gives.
            InvalidPath { path: String, message: String },
            /// A connection string, option or argument the client cannot use.
            InvalidArgument(String),
            /// Socket failure while connecting.
            Io(io::Error),
            /// The server sent bytes this client cannot make sense of.
            Protocol(String),
            /// `close()` was called; the session is over.
            Closed,
            /// A composed client has no mount that owns the path.
            NoMount { path: String, mounts: String },
            /// A composed client's `multi` or `multi_read` named paths of
            /// several mounts; a multi is atomic within one ensemble only.
            CrossMount { mounts: Vec<String> },
        }

        impl Error {
            /// The error for a non-`Ok` result code on a request for `path`.
            pub fn from_code(code: ErrorCode, path: &str) -> Error {
                let path = path.to_owned();
                match code {
                    $(ErrorCode::$variant => Error::$variant { path },)*
                    ErrorCode::Ok => Error::Protocol(format!("result code Ok reported as an error for {path}")),
                }
            }

            /// The ZooKeeper result code this error stands for, if any.
            pub fn code(&self) -> Option<ErrorCode> {
                match self {
                    $(Error::$variant { .. } => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }

            /// The path of the request that failed, if the error has one.
            pub fn path(&self) -> Option<&str> {
                match self {
                    $(Error::$variant { path } => Some(path),)*
                    Error::InvalidPath { path, .. } => Some(path),
                    Error::NoMount { path, .. } => Some(path),
                    _ => None,
                }
            }
        }
    };
}

keeper_errors! {
    SystemError,
    RuntimeInconsistency,
    DataInconsistency,
    ConnectionLoss,
    MarshallingError,
    Unimplemented,
    OperationTimeout,
    BadArguments,
    UnknownSession,
    NewConfigNoQuorum,
    ReconfigInProgress,
    ApiError,
    NoNode,
    NoAuth,
    BadVersion,
    NoChildrenForEphemerals,
    NodeExists,
    NotEmpty,
    SessionExpired,
    InvalidCallback,
    InvalidAcl,
    AuthFailed,
    SessionMoved,
    NotReadOnly,
    EphemeralOnLocalSession,
    NoWatcher,
    RequestTimeout,
    ReconfigDisabled,
    SessionClosedRequireSaslAuth,
    QuotaExceeded,
    Throttled,
}

impl fmt::Display for Error {
    /// Keeper errors read like Java's `KeeperException.getMessage()`:
    /// `KeeperErrorCode = NoNode for /a`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(code), Some(path)) = (self.code(), self.path()) {
            write!(f, "KeeperErrorCode = {}", code.message())?;
            if !path.is_empty() {
                write!(f, " for {path}")?;
            }
            return Ok(());
        }
        match self {
            Error::InvalidPath { message, .. } => f.write_str(message),
            Error::InvalidArgument(message) => f.write_str(message),
            Error::Io(error) => write!(f, "I/O error: {error}"),
            Error::Protocol(message) => write!(f, "protocol error: {message}"),
            Error::Closed => f.write_str("the client is closed"),
            Error::NoMount { path, mounts } => {
                write!(f, "no mount owns {path} (mounts: {mounts})")
            }
            Error::CrossMount { mounts } => write!(
                f,
                "a multi cannot span mounts {}: it is atomic within one ensemble only",
                mounts.join(" and ")
            ),
            // Every keeper variant has a code and a path, handled above.
            _ => write!(f, "{self:?}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(error) => Some(error),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(error: io::Error) -> Self {
        Error::Io(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_code_but_ok_maps_to_a_variant_and_back() {
        for &code in ErrorCode::ALL {
            let error = Error::from_code(code, "/a");
            if code == ErrorCode::Ok {
                assert!(matches!(error, Error::Protocol(_)));
                continue;
            }
            assert_eq!(error.code(), Some(code), "{code:?}");
            assert_eq!(error.path(), Some("/a"));
        }
    }

    #[test]
    fn display_reads_like_keeper_exception() {
        assert_eq!(
            Error::from_code(ErrorCode::NoNode, "/x").to_string(),
            "KeeperErrorCode = NoNode for /x"
        );
        assert_eq!(
            Error::from_code(ErrorCode::NotEmpty, "/x").to_string(),
            "KeeperErrorCode = Directory not empty for /x"
        );
        assert_eq!(
            Error::from_code(ErrorCode::AuthFailed, "").to_string(),
            "KeeperErrorCode = AuthFailed"
        );
        assert!(matches!(
            Error::from_code(ErrorCode::SessionExpired, "/s"),
            Error::SessionExpired { .. }
        ));
    }
}
