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
/// A server of several partitions: which partition each group of the tree
/// lives on (`stoa_core::placement`'s text form), read-only but to the
/// super user, whose setData moves groups. Kept in partition 1's tree,
/// whose `/zookeeper` is not the one clients list.
pub const PARTITIONS: &str = "/zookeeper/partitions";

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
    // Paths are nearly always ASCII: scanning bytes there, rather than
    // decoding chars, halved the cost of this check per request.
    let valid = if bytes.is_ascii() {
        valid_chars(bytes, bytes.iter().map(|&b| char::from(b)).enumerate())
    } else {
        valid_chars(bytes, path.char_indices())
    };
    if valid {
        Ok(())
    } else {
        Err(ErrorCode::BadArguments)
    }
}

/// The per-char rules over `chars`, the chars of `bytes` with their byte
/// offsets; the first (the leading '/') is skipped.
fn valid_chars(bytes: &[u8], chars: impl Iterator<Item = (usize, char)>) -> bool {
    let component_ends_after = |i: usize| bytes.get(i + 1).is_none_or(|&b| b == b'/');
    let mut last = '/';
    let mut before_last = '/';
    for (i, c) in chars.skip(1) {
        let bad = match c {
            '\0' => true,
            '/' => last == '/',
            // ".." and "." as whole path components are relative paths.
            '.' if last == '.' => before_last == '/' && component_ends_after(i),
            '.' => last == '/' && component_ends_after(i),
            _ => is_invalid_char(c),
        };
        if bad {
            return false;
        }
        before_last = last;
        last = c;
    }
    true
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
    last_slash(path).map(|i| &path[..i])
}

/// The last component of `path` (everything after the last slash).
pub fn name_of(path: &str) -> &str {
    match last_slash(path) {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// `parent_of` and `name_of` at once, with one scan.
pub fn split_last(path: &str) -> Option<(&str, &str)> {
    last_slash(path).map(|i| (&path[..i], &path[i + 1..]))
}

/// The last '/' in `path`. A byte scan: paths are short, where `rfind`'s
/// searcher costs more in set-up than it saves, and '/' is ASCII, so the
/// index found is a char boundary.
fn last_slash(path: &str) -> Option<usize> {
    path.as_bytes().iter().rposition(|&byte| byte == b'/')
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

/// Whether `path` is `root` or lies below it, compared by whole
/// components: `/app` holds `/app/x` but not `/apple`; `/` holds every path.
pub fn within(path: &str, root: &str) -> bool {
    root == ROOT
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `DataTree.isSpecialPath`: nodes a client may never delete.
pub fn is_special(path: &str) -> bool {
    matches!(path, ROOT | ZOOKEEPER | QUOTA | CONFIG)
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

    #[test]
    fn within_compares_whole_components() {
        assert!(within("/app", "/app") && within("/app/x/y", "/app"));
        assert!(!within("/apple", "/app") && !within("/ap", "/app"));
        assert!(within("/", "/") && within("/anything/below", "/"));
        assert!(!within("/", "/app"));
    }

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
