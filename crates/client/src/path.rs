//! Client-side path checks, as ZooKeeper's `PathUtils.validatePath`: a bad
//! path is refused before it costs a round trip, with Java's messages.

use crate::error::Error;

/// Checks `path` as ZooKeeper does before sending a request. A sequential
/// create may end in `/` (the server appends the counter).
pub fn validate_path(path: &str, sequential: bool) -> Result<(), Error> {
    if plainly_valid(path.as_bytes(), sequential) {
        return Ok(());
    }
    let checked = if sequential {
        format!("{path}1")
    } else {
        path.to_owned()
    };
    check(&checked).map_err(|message| Error::InvalidPath {
        path: path.to_owned(),
        message,
    })
}

/// Whether `path` (followed by the counter's first digit when
/// `sequential`) is printable ASCII that `check` accepts: the common case,
/// answered without the allocations `check` makes for Java's messages.
/// `false` only means "ask `check`", which decides and words the error.
fn plainly_valid(path: &[u8], sequential: bool) -> bool {
    let [b'/', rest @ ..] = path else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    // Bytes of the component being scanned, stopping counting at 3
    // (only "." and ".." matter); `dots` whether they were all dots.
    let (mut len, mut dots) = (0usize, true);
    for &b in rest {
        match b {
            b'/' => {
                if len == 0 || (dots && len <= 2) {
                    return false;
                }
                (len, dots) = (0, true);
            }
            b' '..=b'~' => {
                len = (len + 1).min(3);
                dots &= b == b'.';
            }
            _ => return false,
        }
    }
    // The last component: with a counter after it, a trailing '/' or a
    // dots-only name gets a digit and is fine.
    sequential || (len > 0 && !(dots && len <= 2))
}

fn check(path: &str) -> Result<(), String> {
    let chars: Vec<char> = path.chars().collect();
    let Some(&first) = chars.first() else {
        return Err("Path length must be > 0".to_owned());
    };
    if first != '/' {
        return Err("Path must start with / character".to_owned());
    }
    if chars.len() == 1 {
        return Ok(());
    }
    if chars.last() == Some(&'/') {
        return Err("Path must not end with / character".to_owned());
    }
    let invalid = |reason: &str, at: usize| {
        Err(format!(
            "Invalid path string \"{path}\" caused by {reason} @{at}"
        ))
    };
    for i in 1..chars.len() {
        let c = chars[i];
        let previous = chars[i - 1];
        let ends_component = i + 1 == chars.len() || chars[i + 1] == '/';
        if c == '\0' {
            return invalid("null character not allowed", i);
        } else if c == '/' && previous == '/' {
            return invalid("empty node name specified", i);
        } else if c == '.' && ends_component && is_dot_component(&chars, i) {
            return invalid("relative paths not allowed", i);
        } else if is_forbidden(c) {
            return invalid("invalid character", i);
        }
    }
    Ok(())
}

/// Whether the `.` at `i` ends a `.` or `..` component.
fn is_dot_component(chars: &[char], i: usize) -> bool {
    let previous = chars[i - 1];
    previous == '/' || (previous == '.' && i >= 2 && chars[i - 2] == '/')
}

/// Control characters, the private use area and specials, as in
/// `PathUtils`; characters outside the BMP are surrogate pairs in Java and
/// so refused there too.
fn is_forbidden(c: char) -> bool {
    matches!(c, '\u{1}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}')
        || c >= '\u{fff0}'
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message(path: &str, sequential: bool) -> String {
        match validate_path(path, sequential) {
            Ok(()) => "ok".to_owned(),
            Err(error) => error.to_string(),
        }
    }

    /// Paths over the characters that decide the checks, longer than
    /// any rule looks (`..` components, runs of `/`).
    fn tricky_path() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop::sample::select(vec![
                '/', '.', 'a', '\0', '\u{1}', '\u{7f}', 'é', '\u{fff0}',
            ]),
            0..9,
        )
        .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        /// The fast path never accepts what the full check refuses, and
        /// it does accept plain ASCII paths the full check accepts.
        #[test]
        fn the_fast_path_agrees_with_the_full_check(path in tricky_path(), sequential: bool) {
            let checked = if sequential { format!("{path}1") } else { path.clone() };
            let full = check(&checked).is_ok();
            let fast = plainly_valid(path.as_bytes(), sequential);
            prop_assert!(!fast || full, "fast path accepted {path:?}");
            let printable = path.bytes().all(|b| (b' '..=b'~').contains(&b));
            prop_assert_eq!(fast, full && printable, "{:?} sequential {}", path, sequential);
        }
    }

    #[test]
    fn paths_are_checked_with_zookeepers_messages() {
        assert_eq!(message("/", false), "ok");
        assert_eq!(message("/a/b.c/..d", false), "ok");
        assert_eq!(message("", false), "Path length must be > 0");
        assert_eq!(message("a", false), "Path must start with / character");
        assert_eq!(message("/a/", false), "Path must not end with / character");
        assert_eq!(message("/a/", true), "ok");
        assert_eq!(
            message("/a//b", false),
            "Invalid path string \"/a//b\" caused by empty node name specified @3"
        );
        assert_eq!(
            message("/a/..", false),
            "Invalid path string \"/a/..\" caused by relative paths not allowed @4"
        );
        assert_eq!(
            message("/./a", false),
            "Invalid path string \"/./a\" caused by relative paths not allowed @1"
        );
        assert_eq!(
            message("/a\u{1}", false),
            "Invalid path string \"/a\u{1}\" caused by invalid character @2"
        );
    }
}
