//! Fast reads and fast watches (docs/partitions.md, "Fast reads and fast
//! watches"): a session opts in by owning an ephemeral node named by its
//! own session id under [`FAST`], whose data lists what it opts into. Being
//! a node, the choice is replicated, outlives a reconnect to another
//! member, shows in `ls`, and goes with the session.
//!
//! The rules a write there must keep, so that every member derives the same
//! sessions from the tree: a flag node is a plain ephemeral of the session
//! its name gives, its data a list [`FastFlags::parse`] accepts, and
//! [`FAST`] itself a plain persistent node (an ephemeral parent would take
//! every other session's flag with it).

use stoa_proto::codes::ErrorCode;
use stoa_proto::opcode::CreateMode;

/// The parent of the sessions' flag nodes. Clients create it once
/// (persistent), as ZooKeeper's tree starts without it.
pub const FAST: &str = "/zookeeper/fast";

/// What a session opted into.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FastFlags {
    /// Reads are answered as soon as their partition has the node, without
    /// waiting for what the session saw on other partitions.
    pub reads: bool,
    /// Watch events go out as their partition applies the change, without
    /// waiting for the other partitions to reach its zxid.
    pub watches: bool,
}

impl FastFlags {
    /// A flag node's data: words from `reads` and `watches`, separated by
    /// commas or white space, in any order; none (null or empty data)
    /// opts into nothing. Anything else is `BadArguments`.
    pub fn parse(data: Option<&[u8]>) -> Result<Self, ErrorCode> {
        let text =
            std::str::from_utf8(data.unwrap_or_default()).map_err(|_| ErrorCode::BadArguments)?;
        let mut flags = FastFlags::default();
        let words = text.split(|c: char| c == ',' || c.is_whitespace());
        for word in words.filter(|w| !w.is_empty()) {
            match word {
                "reads" => flags.reads = true,
                "watches" => flags.watches = true,
                _ => return Err(ErrorCode::BadArguments),
            }
        }
        Ok(flags)
    }

    pub fn any(self) -> bool {
        self.reads || self.watches
    }
}

/// The session whose flag node `path` is: a child of [`FAST`] named by a
/// session id in hexadecimal (at most 16 digits, either case, no prefix).
pub fn flag_owner(path: &str) -> Option<i64> {
    let name = path.strip_prefix(FAST)?.strip_prefix('/')?;
    let hex = |b: u8| b.is_ascii_hexdigit();
    if name.is_empty() || name.len() > 16 || !name.bytes().all(hex) {
        return None;
    }
    u64::from_str_radix(name, 16).ok().map(|id| id as i64)
}

/// Whether a create at `path` (as named after any sequence suffix) with
/// `mode` and `data` by `session` keeps the rules above; None if `path`
/// is neither [`FAST`] nor a child of it.
pub(crate) fn check_create(
    path: &str,
    mode: CreateMode,
    data: Option<&[u8]>,
    session: i64,
) -> Option<Result<(), ErrorCode>> {
    // Every create comes here: most are nowhere near.
    if !path.starts_with(FAST) {
        return None;
    }
    if path == FAST {
        let plain = mode == CreateMode::Persistent;
        return Some(if plain {
            Ok(())
        } else {
            Err(ErrorCode::BadArguments)
        });
    }
    if crate::path::parent_of(path) != Some(FAST) {
        return None;
    }
    let owned = mode == CreateMode::Ephemeral && flag_owner(path) == Some(session);
    Some(match owned {
        true => FastFlags::parse(data).map(|_| ()),
        false => Err(ErrorCode::BadArguments),
    })
}

/// Whether a setData of `path` with `data` keeps the rules above.
pub(crate) fn check_set(path: &str, data: Option<&[u8]>) -> Result<(), ErrorCode> {
    if path.starts_with(FAST) && crate::path::parent_of(path) == Some(FAST) {
        FastFlags::parse(data)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(reads: bool, watches: bool) -> FastFlags {
        FastFlags { reads, watches }
    }

    #[test]
    fn flag_lists_parse_in_any_order_and_separation() {
        let parse = |s: &str| FastFlags::parse(Some(s.as_bytes()));
        assert_eq!(FastFlags::parse(None), Ok(flags(false, false)));
        assert_eq!(parse(""), Ok(flags(false, false)));
        assert_eq!(parse("reads"), Ok(flags(true, false)));
        assert_eq!(parse("watches"), Ok(flags(false, true)));
        assert_eq!(parse("watches,reads"), Ok(flags(true, true)));
        assert_eq!(parse(" reads \n watches "), Ok(flags(true, true)));
        assert_eq!(parse("reads,,reads"), Ok(flags(true, false)));
        for bad in ["Reads", "read", "reads;watches", "all", "fast"] {
            assert_eq!(parse(bad), Err(ErrorCode::BadArguments), "{bad}");
        }
        assert_eq!(
            FastFlags::parse(Some(&[0xff, b'r'])),
            Err(ErrorCode::BadArguments)
        );
    }

    #[test]
    fn flag_nodes_are_named_by_their_session() {
        assert_eq!(flag_owner("/zookeeper/fast/1f"), Some(0x1f));
        assert_eq!(flag_owner("/zookeeper/fast/01000AbC"), Some(0x0100_0abc));
        let top = "/zookeeper/fast/ffffffffffffffff";
        assert_eq!(flag_owner(top), Some(-1));
        for no in [
            "/zookeeper/fast",
            "/zookeeper/fast/",
            "/zookeeper/fast/0x1f",
            "/zookeeper/fast/1f/x",
            "/zookeeper/fast/10000000000000000",
            "/zookeeper/fast/-1",
            "/zookeeper/fastx/1f",
            "/zookeeper/1f",
        ] {
            assert_eq!(flag_owner(no), None, "{no}");
        }
    }

    #[test]
    fn creates_under_the_flags_keep_their_rules() {
        use CreateMode::*;
        let (sid, reads) = (0x1f, Some(&b"reads"[..]));
        let ok = Some(Ok(()));
        let bad = Some(Err(ErrorCode::BadArguments));
        assert_eq!(check_create(FAST, Persistent, None, sid), ok);
        for mode in [
            Ephemeral,
            Container,
            PersistentSequential,
            PersistentWithTtl,
        ] {
            assert_eq!(check_create(FAST, mode, None, sid), bad, "{mode:?}");
        }
        let own = "/zookeeper/fast/1f";
        assert_eq!(check_create(own, Ephemeral, reads, sid), ok);
        assert_eq!(check_create(own, Ephemeral, None, sid), ok);
        assert_eq!(check_create(own, Ephemeral, Some(b"fast"), sid), bad);
        assert_eq!(check_create(own, Persistent, reads, sid), bad);
        assert_eq!(check_create(own, Ephemeral, reads, 0x20), bad);
        let named = "/zookeeper/fast/x";
        assert_eq!(check_create(named, Ephemeral, reads, sid), bad);
        assert_eq!(
            check_create("/zookeeper/fast/1f/x", Ephemeral, reads, sid),
            None
        );
        assert_eq!(
            check_create("/zookeeper/other", Ephemeral, reads, sid),
            None
        );
        assert_eq!(check_set(own, Some(b"watches")), Ok(()));
        assert_eq!(check_set(own, Some(b"x")), Err(ErrorCode::BadArguments));
        assert_eq!(check_set(FAST, Some(b"x")), Ok(()));
    }
}
