//! ACL checks and ACL validation, as ZooKeeper's `checkACL`, `fixupACL`,
//! `DigestAuthenticationProvider` and `IPAuthenticationProvider` do them.
//!
//! Only the providers ZooKeeper registers by default exist: `ip` and
//! `digest`, plus the built-in `world:anyone` and the `auth` shorthand.

use stoa_proto::codes::ErrorCode;
use stoa_proto::records::{Acl, Id};

const SCHEME_WORLD: &str = "world";
/// A TLS client certificate's subject (ZooKeeper's
/// X509AuthenticationProvider): matched exactly, and "authenticated", so
/// an `auth` ACL entry takes it as it takes a digest.
const SCHEME_X509: &str = "x509";
/// A SASL-authenticated user (ZooKeeper's SASLAuthenticationProvider):
/// matched exactly, and authenticated too.
const SCHEME_SASL: &str = "sasl";
const SCHEME_AUTH: &str = "auth";
const SCHEME_DIGEST: &str = "digest";
const SCHEME_IP: &str = "ip";
const SCHEME_SUPER: &str = "super";
const ID_ANYONE: &str = "anyone";

/// Who is asking: the session's authenticated ids (the connection's `ip` id
/// included) and whether it is the super user.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub ids: &'a [Id],
    pub is_super: bool,
}

/// `ZooKeeperServer.checkACL`: `NoAuth` unless some entry of `acl` grants
/// one of the bits of `perm` to the caller. An empty ACL grants everything.
pub fn check(acl: &[Acl], perm: i32, caller: Caller<'_>) -> Result<(), ErrorCode> {
    if acl.is_empty() || caller.is_super || caller.ids.iter().any(|id| id.scheme == SCHEME_SUPER) {
        return Ok(());
    }
    for entry in acl.iter().filter(|a| a.perms & perm != 0) {
        if entry.id.scheme == SCHEME_WORLD && entry.id.id == ID_ANYONE {
            return Ok(());
        }
        let matcher: fn(&str, &str) -> bool = match entry.id.scheme.as_str() {
            SCHEME_DIGEST | SCHEME_X509 | SCHEME_SASL => |id, expr| id == expr,
            SCHEME_IP => ip_matches,
            _ => continue,
        };
        let granted = caller
            .ids
            .iter()
            .any(|id| id.scheme == entry.id.scheme && matcher(&id.id, &entry.id.id));
        if granted {
            return Ok(());
        }
    }
    Err(ErrorCode::NoAuth)
}

/// `PrepRequestProcessor.fixupACL`: drop duplicates, reject an empty list
/// or an invalid id, and expand `auth` entries into the caller's
/// authenticated (digest, x509, sasl) ids.
pub fn fixup(acl: &[Acl], ids: &[Id]) -> Result<Vec<Acl>, ErrorCode> {
    let mut unique: Vec<&Acl> = Vec::with_capacity(acl.len());
    for entry in acl {
        if !unique.contains(&entry) {
            unique.push(entry);
        }
    }
    if unique.is_empty() {
        return Err(ErrorCode::InvalidAcl);
    }
    let mut out = Vec::with_capacity(unique.len());
    for entry in unique {
        let id = &entry.id;
        if id.scheme == SCHEME_WORLD && id.id == ID_ANYONE {
            out.push(entry.clone());
        } else if id.scheme == SCHEME_AUTH {
            // Digest, x509 and sasl are "authenticated" providers; ip is not.
            let before = out.len();
            let authenticated = |cid: &&Id| {
                [SCHEME_DIGEST, SCHEME_X509, SCHEME_SASL].contains(&cid.scheme.as_str())
            };
            for cid in ids.iter().filter(authenticated) {
                out.push(Acl {
                    perms: entry.perms,
                    id: cid.clone(),
                });
            }
            if out.len() == before {
                return Err(ErrorCode::InvalidAcl);
            }
        } else {
            let valid = match id.scheme.as_str() {
                SCHEME_DIGEST => digest_id_is_valid(&id.id),
                SCHEME_IP => ip_id_is_valid(&id.id),
                SCHEME_X509 | SCHEME_SASL => !id.id.is_empty(),
                _ => false,
            };
            if !valid {
                return Err(ErrorCode::InvalidAcl);
            }
            out.push(entry.clone());
        }
    }
    Ok(out)
}

/// `DigestAuthenticationProvider.generateDigest`: the id a session gets
/// from `addauth digest user:password`, `user:base64(sha1(user:password))`.
pub fn digest_id(user_colon_password: &str) -> Id {
    let user = user_colon_password.split(':').next().unwrap_or_default();
    let hash = sha1_smol::Sha1::from(user_colon_password.as_bytes())
        .digest()
        .bytes();
    Id {
        scheme: SCHEME_DIGEST.to_owned(),
        id: format!("{user}:{}", base64(&hash)),
    }
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[((v >> (18 - 6 * k)) & 0x3f) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Java's `String.split(sep)` without a limit: trailing empty parts dropped.
fn java_split(s: &str, sep: char) -> Vec<&str> {
    let mut parts: Vec<&str> = s.split(sep).collect();
    while parts.len() > 1 && parts.last() == Some(&"") {
        parts.pop();
    }
    if parts == [""] && !s.is_empty() {
        parts.clear();
    }
    parts
}

/// `DigestAuthenticationProvider.isValid`: exactly `user:hash`.
fn digest_id_is_valid(id: &str) -> bool {
    java_split(id, ':').len() == 2
}

/// `IPAuthenticationProvider.isValid`: an address with optional `/bits`.
fn ip_id_is_valid(id: &str) -> bool {
    let (addr, bits) = split_mask(id);
    let Some(addr) = ip_bytes(addr) else {
        return false;
    };
    match bits {
        None => true,
        Some(bits) => parse_mask_bits(bits, addr.len()).is_some(),
    }
}

/// `IPAuthenticationProvider.matches`: `id` (a client address) lies in the
/// network `expr` (an address with optional `/bits`).
fn ip_matches(id: &str, expr: &str) -> bool {
    let (addr, bits) = split_mask(expr);
    let Some(mut net) = ip_bytes(addr) else {
        return false;
    };
    let bits = match bits {
        None => net.len() * 8,
        Some(bits) => match parse_mask_bits(bits, net.len()) {
            Some(bits) => bits,
            None => return false,
        },
    };
    let Some(mut remote) = ip_bytes(id) else {
        return false;
    };
    mask(&mut net, bits);
    mask(&mut remote, bits);
    net == remote
}

fn split_mask(expr: &str) -> (&str, Option<&str>) {
    match expr.split_once('/') {
        Some((addr, bits)) => (addr, Some(bits)),
        None => (expr, None),
    }
}

fn parse_mask_bits(bits: &str, addr_len: usize) -> Option<usize> {
    let bits = java_parse_int(bits, 10)?;
    (0..=(addr_len as i64 * 8))
        .contains(&bits)
        .then_some(bits as usize)
}

fn mask(bytes: &mut [u8], bits: usize) {
    for (i, b) in bytes.iter_mut().enumerate() {
        let keep = bits.saturating_sub(i * 8).min(8);
        *b &= !(0xffu16 >> keep) as u8;
    }
}

/// `addr2Bytes`: IPv6 if it has a colon, else IPv4 if it has a dot.
fn ip_bytes(addr: &str) -> Option<Vec<u8>> {
    if addr.contains(':') {
        v6_bytes(addr)
    } else if addr.contains('.') {
        v4_bytes(addr)
    } else {
        None
    }
}

fn v4_bytes(addr: &str) -> Option<Vec<u8>> {
    let parts: Vec<&str> = addr.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    parts
        .iter()
        .map(|p| {
            java_parse_int(p, 10)
                .filter(|v| (0..=255).contains(v))
                .map(|v| v as u8)
        })
        .collect()
}

const V6_LEN: usize = 16;
const V6_SEGMENTS: usize = 8;
const V6_SEGMENT_HEX_MAX: usize = 4;

fn v6_bytes(addr: &str) -> Option<Vec<u8>> {
    let halves: Vec<&str> = addr.split("::").collect();
    let (head, tail): (Vec<&str>, Vec<&str>) = match halves.as_slice() {
        [all] => {
            let segs: Vec<&str> = all.split(':').collect();
            if segs.len() != V6_SEGMENTS {
                return None;
            }
            (segs, Vec::new())
        }
        [a, b] => {
            let (head, tail) = (v6_half(a), v6_half(b));
            if head.len() + tail.len() >= V6_SEGMENTS {
                return None;
            }
            (head, tail)
        }
        _ => return None,
    };
    let mut out = vec![0u8; V6_LEN];
    write_v6_segments(&mut out[..head.len() * 2], &head)?;
    let start = V6_LEN - tail.len() * 2;
    write_v6_segments(&mut out[start..], &tail)?;
    Some(out)
}

fn v6_half(s: &str) -> Vec<&str> {
    if s.is_empty() {
        Vec::new()
    } else {
        s.split(':').collect()
    }
}

fn write_v6_segments(out: &mut [u8], segments: &[&str]) -> Option<()> {
    for (i, seg) in segments.iter().enumerate() {
        if seg.is_empty() || seg.chars().count() > V6_SEGMENT_HEX_MAX {
            return None;
        }
        let v = java_parse_int(seg, 16)?;
        out[2 * i] = (v >> 8) as u8;
        out[2 * i + 1] = v as u8;
    }
    Some(())
}

/// `Integer.parseInt(s, radix)` for ASCII digits: optional sign, no
/// overflow past `i32`.
fn java_parse_int(s: &str, radix: u32) -> Option<i64> {
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    let mut v: i64 = 0;
    for c in digits.chars() {
        v = v * i64::from(radix) + i64::from(c.to_digit(radix)?);
        if v > i64::from(i32::MAX) + 1 {
            return None;
        }
    }
    let v = if negative { -v } else { v };
    i32::try_from(v).ok().map(i64::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoa_proto::opcode::perms;

    fn id(scheme: &str, id: &str) -> Id {
        Id {
            scheme: scheme.into(),
            id: id.into(),
        }
    }

    fn acl(p: i32, scheme: &str, i: &str) -> Acl {
        Acl {
            perms: p,
            id: id(scheme, i),
        }
    }

    fn caller(ids: &[Id]) -> Caller<'_> {
        Caller {
            ids,
            is_super: false,
        }
    }

    #[test]
    fn digest_id_matches_zookeeper_generate_digest() {
        // Proves digest ids equal DigestAuthenticationProvider.generateDigest output.
        assert_eq!(
            digest_id("super:test").id,
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        assert_eq!(
            digest_id("user:password").id,
            "user:tpUq/4Pn5A64fVZyQ0gOJ8ZWqkY="
        );
        assert_eq!(digest_id("user:password").scheme, "digest");
    }

    #[test]
    fn digest_id_takes_any_text_as_zookeeper_does() {
        // generateDigest: the text before the first colon (all of it
        // without one), then the hash of the whole text.
        assert_eq!(digest_id("blah").id, "blah:W/H9kn37hnlJai5s8Ay+UMHIcUU=");
        assert_eq!(digest_id(":pw").id, ":krPDEYdCl854cFNT6IXnoMv+VVA=");
        assert_eq!(digest_id("a:b:c").id, "a:cLzgnoJ6mP5qz3w+mwvPE2vDgu0=");
        assert_eq!(digest_id("").id, ":2jmj7l5rSw0yVb/vlWAYkK/YBwk=");
    }

    #[test]
    fn base64_pads_like_java() {
        // Proves the hand-written base64 pads one and two missing bytes.
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
    }

    #[test]
    fn an_x509_subject_matches_exactly_and_counts_as_authenticated() {
        let subject = "CN=client,O=Stoa";
        let ids = [id("ip", "10.0.0.7"), id("x509", subject)];
        let caller = Caller {
            ids: &ids,
            is_super: false,
        };
        assert_eq!(
            check(&[acl(perms::READ, "x509", subject)], perms::READ, caller),
            Ok(())
        );
        let other = [acl(perms::READ, "x509", "CN=client")];
        assert_eq!(check(&other, perms::READ, caller), Err(ErrorCode::NoAuth));
        let fixed = fixup(&[acl(perms::ALL, "auth", "")], &ids).unwrap();
        assert_eq!(fixed, vec![acl(perms::ALL, "x509", subject)]);
        assert_eq!(
            fixup(&[acl(perms::ALL, "x509", "")], &ids),
            Err(ErrorCode::InvalidAcl)
        );
    }

    #[test]
    fn check_grants_world_digest_ip_and_super() {
        // Proves each scheme grants only the bits it lists, and super skips checks.
        let ids = [id("ip", "10.0.0.7"), digest_id("bob:pw")];
        let bob = digest_id("bob:pw").id;
        assert_eq!(
            check(
                &[acl(perms::READ, "world", "anyone")],
                perms::READ,
                caller(&[])
            ),
            Ok(())
        );
        assert_eq!(
            check(
                &[acl(perms::READ, "world", "anyone")],
                perms::WRITE,
                caller(&[])
            ),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(
            check(
                &[acl(perms::ALL, "digest", &bob)],
                perms::ADMIN,
                caller(&ids)
            ),
            Ok(())
        );
        assert_eq!(
            check(
                &[acl(perms::ALL, "digest", &bob)],
                perms::ADMIN,
                caller(&ids[..1])
            ),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(
            check(
                &[acl(perms::READ, "ip", "10.0.0.0/8")],
                perms::READ,
                caller(&ids)
            ),
            Ok(())
        );
        assert_eq!(
            check(
                &[acl(perms::READ, "ip", "10.0.1.0/24")],
                perms::READ,
                caller(&ids)
            ),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(check(&[], perms::ADMIN, caller(&[])), Ok(()));
        let locked = [acl(perms::READ, "digest", "x:y")];
        assert_eq!(
            check(
                &locked,
                perms::WRITE,
                Caller {
                    ids: &[],
                    is_super: true
                }
            ),
            Ok(())
        );
        assert_eq!(
            check(&locked, perms::WRITE, caller(&[id("super", "")])),
            Ok(())
        );
    }

    #[test]
    fn ip_matching_handles_masks_and_v6() {
        // Proves CIDR masks, bad masks and IPv6 compression behave like IPAuthenticationProvider.
        assert!(ip_matches("192.168.1.5", "192.168.1.5"));
        assert!(ip_matches("192.168.1.5", "192.168.0.0/16"));
        assert!(ip_matches("192.168.1.5", "0.0.0.0/0"));
        assert!(!ip_matches("192.168.1.5", "192.168.0.0/33"));
        assert!(!ip_matches("192.168.1.5", "192.168.2.0/24"));
        assert!(ip_matches("192.168.1.5", "192.168.1.0/+24"));
        assert!(ip_matches("::1", "0:0:0:0:0:0:0:1"));
        assert!(ip_matches("fe80::1", "fe80::/64"));
        assert!(!ip_matches("fe80::1", "10.0.0.1"));
        assert!(!ip_matches("1::2::3", "1::2::3"));
    }

    #[test]
    fn fixup_validates_and_expands() {
        // Proves InvalidAcl for empty/unknown/malformed ids and `auth` expansion to digest ids.
        let bob = digest_id("bob:pw");
        let ids = [id("ip", "127.0.0.1"), bob.clone()];
        assert_eq!(fixup(&[], &ids), Err(ErrorCode::InvalidAcl));
        assert_eq!(
            fixup(&[acl(1, "world", "someone")], &ids),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(1, "foo", "bar")], &ids),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(1, "super", "")], &ids),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(1, "digest", "nocolon")], &ids),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(1, "digest", "a:b:c")], &ids),
            Err(ErrorCode::InvalidAcl)
        );
        assert!(fixup(&[acl(1, "digest", "a:b:")], &ids).is_ok());
        assert_eq!(
            fixup(&[acl(1, "ip", "300.0.0.1")], &ids),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(1, "ip", "10.0.0.1/40")], &ids),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(1, "ip", "localhost")], &ids),
            Err(ErrorCode::InvalidAcl)
        );
        assert!(fixup(&[acl(1, "ip", "10.0.0.0/8")], &ids).is_ok());
        assert_eq!(
            fixup(&[acl(1, "auth", "")], &ids[..1]),
            Err(ErrorCode::InvalidAcl)
        );
        assert_eq!(
            fixup(&[acl(7, "auth", "ignored")], &ids),
            Ok(vec![Acl {
                perms: 7,
                id: bob.clone()
            }])
        );
        let open = acl(perms::ALL, "world", "anyone");
        assert_eq!(fixup(&[open.clone(), open.clone()], &[]), Ok(vec![open]));
    }
}
