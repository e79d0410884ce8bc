//! ACL text as zkCli reads and writes it: `scheme:id:perms[,...]` with the
//! permission letters `crwda`.

use stoa_proto::opcode::perms;
use stoa_proto::records::{Acl, Id};

/// Permission letters in the order `ZKUtil.getPermString` prints them.
const PERM_LETTERS: [(char, i32); 5] = [
    ('c', perms::CREATE),
    ('d', perms::DELETE),
    ('r', perms::READ),
    ('w', perms::WRITE),
    ('a', perms::ADMIN),
];

/// `world:anyone:cdrwa`, the ACL of a node created without one.
pub fn open_acl_unsafe() -> Vec<Acl> {
    vec![Acl::open_unsafe()]
}

/// Parses a comma-separated ACL list. The id is everything between the
/// first and the last colon, so `digest:user:hash:cdrwa` and
/// `ip:10.0.0.1:r` both work.
pub fn parse_acl(text: &str) -> Result<Vec<Acl>, String> {
    text.split(',').map(parse_one).collect()
}

fn parse_one(entry: &str) -> Result<Acl, String> {
    let (Some(first), Some(last)) = (entry.find(':'), entry.rfind(':')) else {
        return Err(format!("{entry} does not have the form scheme:id:perm"));
    };
    if first == last {
        return Err(format!("{entry} does not have the form scheme:id:perm"));
    }
    Ok(Acl {
        perms: parse_perms(&entry[last + 1..])?,
        id: Id {
            scheme: entry[..first].to_owned(),
            id: entry[first + 1..last].to_owned(),
        },
    })
}

/// Parses permission letters (`crwda`, any order) into `Acl.perms` bits.
pub fn parse_perms(text: &str) -> Result<i32, String> {
    text.chars().try_fold(0, |bits, c| {
        PERM_LETTERS
            .iter()
            .find(|(letter, _)| *letter == c)
            .map(|(_, bit)| bits | bit)
            .ok_or_else(|| format!("Unknown perm type: {c}"))
    })
}

/// Permission bits as letters, in `cdrwa` order.
pub fn perms_to_string(bits: i32) -> String {
    PERM_LETTERS
        .iter()
        .filter(|(_, bit)| bits & bit != 0)
        .map(|(letter, _)| *letter)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_lists_parse_with_colons_inside_the_id() {
        let acl = parse_acl("world:anyone:cdrwa,digest:bob:abc=:r,ip:10.0.0.1:rw").unwrap();
        assert_eq!(acl[0], Acl::open_unsafe());
        assert_eq!(acl[1].id.scheme, "digest");
        assert_eq!(acl[1].id.id, "bob:abc=");
        assert_eq!(acl[1].perms, perms::READ);
        assert_eq!(acl[2].id.id, "10.0.0.1");
        assert_eq!(acl[2].perms, perms::READ | perms::WRITE);
    }

    #[test]
    fn malformed_acls_are_refused() {
        assert!(parse_acl("world:anyone").is_err());
        assert!(parse_acl("world").is_err());
        assert_eq!(
            parse_acl("world:anyone:rx").unwrap_err(),
            "Unknown perm type: x"
        );
    }

    #[test]
    fn perms_print_in_zookeeper_order() {
        assert_eq!(perms_to_string(perms::ALL), "cdrwa");
        assert_eq!(perms_to_string(perms::READ | perms::ADMIN), "ra");
        assert_eq!(perms_to_string(0), "");
        assert_eq!(parse_perms("arwdc").unwrap(), perms::ALL);
    }
}
