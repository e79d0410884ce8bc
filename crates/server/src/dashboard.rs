//! The dashboard: a page the AdminServer serves next to its commands, for
//! an operator's browser. The page, its script and its style are compiled
//! into the binary (no CDN: an admin port is often on a network without
//! internet access); the script polls the JSON commands from the same
//! origin, so it works over HTTP and HTTPS alike and needs nothing more
//! from the server.

/// One of the dashboard's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asset {
    Page,
    Script,
    Style,
}

const PAGE: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// Where the page puts `admin.commandURL` for its script.
const COMMAND_URL_SLOT: &str = "{{command_url}}";

/// Headers every dashboard answer carries. `no-cache`: a browser checks
/// again after an upgrade rather than running an old script against new
/// commands. The content policy allows only the page's own files and
/// same-origin fetches, so even a value that slipped past the script's
/// escaping could not load or run anything.
pub const HEADERS: &str = "Cache-Control: no-cache\r\n\
     Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'\r\n\
     X-Content-Type-Options: nosniff\r\n\
     Referrer-Policy: no-referrer\r\n";

/// The dashboard file at `path`, if any: the page at `/` and
/// `/dashboard`, unless `admin.commandURL` claims the path (the commands
/// keep every path they had).
pub fn asset(path: &str, command_url: &str) -> Option<Asset> {
    let claimed = path
        .strip_prefix(command_url)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    if claimed {
        return None;
    }
    match path {
        "/" | "/dashboard" | "/dashboard/" => Some(Asset::Page),
        "/dashboard.js" => Some(Asset::Script),
        "/dashboard.css" => Some(Asset::Style),
        _ => None,
    }
}

/// The Content-Type and body of `asset`.
pub fn content(asset: Asset, command_url: &str) -> (&'static str, String) {
    match asset {
        Asset::Page => (
            "text/html; charset=utf-8",
            PAGE.replace(COMMAND_URL_SLOT, &escape_attribute(command_url)),
        ),
        Asset::Script => ("text/javascript; charset=utf-8", SCRIPT.to_string()),
        Asset::Style => ("text/css; charset=utf-8", STYLE.to_string()),
    }
}

/// Text made safe inside a double-quoted HTML attribute (the command URL
/// comes from zoo.cfg).
fn escape_attribute(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_at_the_root_and_at_dashboard_unless_the_commands_are() {
        assert_eq!(asset("/", "/commands"), Some(Asset::Page));
        assert_eq!(asset("/dashboard", "/commands"), Some(Asset::Page));
        assert_eq!(asset("/dashboard.js", "/commands"), Some(Asset::Script));
        assert_eq!(asset("/dashboard.css", "/commands"), Some(Asset::Style));
        assert_eq!(asset("/dashboard/x", "/commands"), None);
        assert_eq!(asset("/dashboard", "/dashboard"), None);
        assert_eq!(asset("/dashboard/", "/dashboard"), None);
        assert_eq!(asset("/", "/dashboard"), Some(Asset::Page));
        assert_eq!(asset("/dashboard.js", "/dashboard"), Some(Asset::Script));
    }

    #[test]
    fn the_page_names_its_files_and_carries_the_command_url_escaped() {
        let (content_type, page) = content(Asset::Page, "/a\"<b>&");
        assert_eq!(content_type, "text/html; charset=utf-8");
        assert!(
            page.contains("content=\"/a&quot;&lt;b&gt;&amp;\""),
            "{page}"
        );
        assert!(!page.contains(COMMAND_URL_SLOT));
        assert!(page.contains("src=\"/dashboard.js\""));
        assert!(page.contains("href=\"/dashboard.css\""));
        // Self-contained: nothing fetched from elsewhere.
        for text in [PAGE, SCRIPT, STYLE] {
            let text = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!text.contains("http://") && !text.contains("https://"));
        }
        // The script writes server data as text only.
        assert!(!SCRIPT.contains("innerHTML") && !SCRIPT.contains("outerHTML"));
        assert!(!SCRIPT.contains("insertAdjacentHTML") && !SCRIPT.contains("document.write"));
    }
}
