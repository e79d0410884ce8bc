//! ZooKeeper path rules (`PathUtils.validatePath`) and the special paths the
//! server owns.

use stoa_proto::codes::ErrorCode;

/// The root node.
pub const ROOT: &str = "/";
/// ZooKeeper's own subtree.
pub const ZOOKEEPER: &str = "/zookeeper";
/// Where quota limits live.
pub const QUOTA: &str = "/zookeeper/quota";
/// The ensemble configuration node (read-only by default, ZOOKEEPER-2014).
pub const CONFIG: &str = "/zookeeper/config";

/// `PathUtils.validatePath`: `BadArguments` for anything ZooKeeper rejects.
///
/// ZooKeeper checks UTF-16 code units; a character outside the Basic
/// Multilingual Plane is a surrogate pair there, which it rejects, so every
/// such `char` is rejected here too.
pub fn validate_path(path: &str) -> Result<(), ErrorCode> {
    // Runs for every request naming a path: no allocation. '/' and '.' are
    // ASCII, so the byte after a '.' tells whether its component ends.
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return Err(ErrorCode::BadArguments);
    }
    if bytes.len() == 1 {
        return Ok(());
    }
    if bytes.last() == Some(&b'/') {
        return Err(ErrorCode::BadArguments);
    }
    let component_ends_after = |i: usize| bytes.get(i + 1).is_none_or(|&b| b == b'/');
    let mut last = '/';
    let mut before_last = '/';
    for (i, c) in path.char_indices().skip(1) {
        let bad = match c {
            '\0' => true,
            '/' => last == '/',
            // ".." and "." as whole path components are relative paths.
            '.' if last == '.' => before_last == '/' && component_ends_after(i),
            '.' => last == '/' && component_ends_after(i),
            _ => is_invalid_char(c),
        };
        if bad {
            return Err(ErrorCode::BadArguments);
        }
        before_last = last;
        last = c;
    }
    Ok(())
}

fn is_invalid_char(c: char) -> bool {
    let u = c as u32;
    (0x01..=0x1f).contains(&u)
        || (0x7f..=0x9f).contains(&u)
        || (0xd800..=0xf8ff).contains(&u)
        || (0xfff0..=0xffff).contains(&u)
        || u > 0xffff
}

/// The parent of `path` as ZooKeeper computes it (`path.substring(0,
/// lastSlash)`): `""` for a child of the root, `None` without a slash.
pub fn parent_of(path: &str) -> Option<&str> {
    path.rfind('/').map(|i| &path[..i])
}

/// The last component of `path` (everything after the last slash).
pub fn name_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// ZooKeeper stores the root under both `""` and `"/"`; we store it under
/// `"/"` only and map the alias here.
pub fn canonical(path: &str) -> &str {
    if path.is_empty() {
        ROOT
    } else {
        path
    }
}

/// `DataTree.isSpecialPath`: nodes a client may never delete.
pub fn is_special(path: &str) -> bool {
    matches!(path, ROOT | ZOOKEEPER | QUOTA | CONFIG)
}

/// The order of a depth-first walk that visits siblings sorted by name:
/// byte order, except that `/` sorts before every other byte, so a node's
/// whole subtree comes before a sibling whose name extends its own
/// (`/a/x` < `/a-b` < `/ab`). Paths never hold a NUL byte.
pub fn depth_first_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    match first_difference(a, b) {
        Some(i) => {
            let rank = |byte: u8| if byte == b'/' { 0 } else { byte };
            rank(a[i]).cmp(&rank(b[i]))
        }
        None => a.len().cmp(&b.len()),
    }
}

/// Where `a` and `b` first differ, within the shorter one. Eight bytes at
/// a time: sibling paths share long prefixes, and sorting a snapshot's
/// paths compares them millions of times.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    let len = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= len {
        let word = |s: &[u8]| u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]));
        let diff = word(a) ^ word(b);
        if diff != 0 {
            return Some(i + diff.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    (i..len).find(|&j| a[j] != b[j])
}

/// The path of `name` under `parent` (`parent` in canonical form).
pub fn join(parent: &str, name: &str) -> String {
    if parent == ROOT {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// ZooKeeper's rules stated per component: a different formulation from
    /// the scanner's, as an oracle.
    fn valid_by_components(p: &str) -> bool {
        p == "/"
            || p.strip_prefix('/').is_some_and(|rest| {
                rest.split('/').all(|c| {
                    !c.is_empty()
                        && c != "."
                        && c != ".."
                        && c.chars().all(|ch| ch != '\0' && !is_invalid_char(ch))
                })
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]
        #[test]
        fn validate_path_agrees_with_the_component_rules(
            chars in proptest::collection::vec(
                prop::sample::select(vec!['/', '.', 'a', '\0', '\u{1}', 'é', '\u{e000}', '\u{1f600}']),
                0..10,
            )
        ) {
            // Proves the allocation-free scanner accepts exactly ZooKeeper's paths.
            let p: String = chars.into_iter().collect();
            prop_assert_eq!(validate_path(&p).is_ok(), valid_by_components(&p), "{:?}", p);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]
        #[test]
        fn depth_first_cmp_is_component_wise_order(
            a in "[/.a-]{0,20}",
            b in "[/.a-]{0,20}",
        ) {
            // Proves the word-at-a-time comparison equals comparing the paths
            // component by component (which is what a walk visits).
            let reference = a.split('/').cmp(b.split('/'));
            prop_assert_eq!(depth_first_cmp(&a, &b), reference, "{:?} {:?}", a, b);
        }
    }

    #[test]
    fn validate_path_accepts_what_zookeeper_accepts() {
        // Proves ordinary names, dots inside names and the root are valid.
        for p in [
            "/", "/a", "/a/b", "/a.b", "/..a", "/a..", "/.a./b", "/ü", "/a b",
        ] {
            assert_eq!(validate_path(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn validate_path_rejects_what_zookeeper_rejects() {
        // Proves every PathUtils rejection maps to BadArguments.
        for p in [
            "",
            "a",
            "a/b",
            "/a/",
            "//",
            "/a//b",
            "/.",
            "/..",
            "/a/./b",
            "/a/../b",
            "/a/.",
            "/a\0b",
            "/a\u{1}",
            "/a\u{7f}",
            "/a\u{9f}",
            "/a\u{e000}",
            "/a\u{fff0}",
            "/a\u{1f600}",
        ] {
            assert_eq!(validate_path(p), Err(ErrorCode::BadArguments), "{p:?}");
        }
    }

    #[test]
    fn parent_and_name_follow_last_slash() {
        // Proves the root's children have parent "" like ZooKeeper's substring.
        assert_eq!(parent_of("/a"), Some(""));
        assert_eq!(parent_of("/a/b"), Some("/a"));
        assert_eq!(parent_of("a"), None);
        assert_eq!(name_of("/a/b"), "b");
        assert_eq!(canonical(""), "/");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }
}
