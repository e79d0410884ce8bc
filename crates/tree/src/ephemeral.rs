//! `EphemeralType`: what a node's raw ephemeral owner means.
//!
//! The raw owner is kept in the tree (as ZooKeeper's `StatPersisted`); the
//! client sees 0 for containers and TTL nodes (`DataNode.copyStat`).
//! Session ids must never have the top byte 0xff (ZooKeeper limits server
//! ids to 254 for the same reason), so the TTL encoding is unambiguous.

/// Owner of every container node.
pub const CONTAINER_OWNER: i64 = i64::MIN;
/// High byte marking an extended (TTL) owner.
const EXTENDED_MASK: i64 = 0xff00_0000_0000_0000_u64 as i64;
/// Bits reserved for the extended feature; 0 means TTL.
const RESERVED_BITS_MASK: i64 = 0x00ff_ff00_0000_0000;
/// Largest TTL in ms (about 34 years).
pub const TTL_MAX_MS: i64 = !(EXTENDED_MASK | RESERVED_BITS_MASK);

/// The kind of node an owner value denotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EphemeralKind {
    /// Persistent (owner 0).
    Void,
    /// Ephemeral, owned by a session.
    Normal,
    Container,
    /// Persistent with a time-to-live in ms.
    Ttl(i64),
}

impl EphemeralKind {
    pub fn of(owner: i64) -> EphemeralKind {
        if owner & EXTENDED_MASK == EXTENDED_MASK && owner & RESERVED_BITS_MASK == 0 {
            return EphemeralKind::Ttl(owner & TTL_MAX_MS);
        }
        match owner {
            CONTAINER_OWNER => EphemeralKind::Container,
            0 => EphemeralKind::Void,
            _ => EphemeralKind::Normal,
        }
    }
}

/// `EphemeralType.TTL.toEphemeralOwner`; `None` when out of range.
pub fn ttl_owner(ttl_ms: i64) -> Option<i64> {
    (ttl_ms > 0 && ttl_ms <= TTL_MAX_MS).then_some(EXTENDED_MASK | ttl_ms)
}

/// The owner a client sees in `Stat.ephemeralOwner`.
pub fn client_owner(owner: i64) -> i64 {
    match EphemeralKind::of(owner) {
        EphemeralKind::Normal => owner,
        _ => 0,
    }
}

/// The session owning an ephemeral node, if `owner` is one.
pub fn session_of(owner: i64) -> Option<i64> {
    (EphemeralKind::of(owner) == EphemeralKind::Normal).then_some(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_decode_like_ephemeral_type() {
        // Proves the TTL encoding round-trips and the client sees 0 for non-sessions.
        assert_eq!(TTL_MAX_MS, 0x0000_00ff_ffff_ffff);
        let owner = ttl_owner(1000).unwrap();
        assert_eq!(owner as u64, 0xff00_0000_0000_03e8);
        assert_eq!(EphemeralKind::of(owner), EphemeralKind::Ttl(1000));
        assert_eq!(EphemeralKind::of(CONTAINER_OWNER), EphemeralKind::Container);
        assert_eq!(EphemeralKind::of(0), EphemeralKind::Void);
        assert_eq!(EphemeralKind::of(0x100), EphemeralKind::Normal);
        assert_eq!(client_owner(owner), 0);
        assert_eq!(client_owner(CONTAINER_OWNER), 0);
        assert_eq!(client_owner(0x100), 0x100);
        assert_eq!(ttl_owner(0), None);
        assert_eq!(ttl_owner(TTL_MAX_MS + 1), None);
        assert!(ttl_owner(TTL_MAX_MS).is_some());
    }
}
