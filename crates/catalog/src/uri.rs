//! Namespaced resource URIs: how two servers' `file:///a` stay apart behind one gateway.
//!
//! A resource `ORIGINAL` of server `SERVER` is shown as
//!
//! - `mcpgw://SERVER/ORIGINAL` when `ORIGINAL` is *plain*: it starts with an ASCII letter (as
//!   every absolute URI's scheme does), has only characters RFC 3986 allows in a URI except
//!   `[` and `]` (which only an IP-literal host may hold), `%` only in `%XX` escapes, and at most
//!   one `#`. Then the whole is a valid URI (`SERVER` is the authority, the original's scheme,
//!   authority and path are our path, its query and fragment ours), readable at a glance:
//!   `mcpgw://everything/demo://resource/static/document/architecture.md`.
//! - `mcpgw://SERVER/~ESCAPED` otherwise, where `ESCAPED` is the original's UTF-8 with every byte
//!   outside RFC 3986's unreserved set written `%XX`: `http://[::1]/a b` becomes
//!   `mcpgw://s/~http%3A%2F%2F%5B%3A%3A1%5D%2Fa%20b`.
//!
//! Mapping back ([`split`]) takes the authority as the server and the rest after its `/` as the
//! original; a rest that starts with `~`, is escaped throughout and decodes to something that is
//! *not* plain is decoded. Every original round-trips exactly, and distinct (server, original)
//! pairs give distinct URIs.
//!
//! Templates (`resources/templates/list`) are always shown as `mcpgw://SERVER/TEMPLATE`, never
//! escaped, so their `{...}` expressions survive. RFC 6570 expands literals and expressions
//! without looking at what precedes them, so a client's expansion of the shown template is
//! `mcpgw://SERVER/` followed by exactly what expanding the upstream's template with the same
//! values gives, and [`split`] returns that. The one expansion that does not come back as it
//! went out: one that starts with `~`, is escaped throughout and decodes to something not plain
//! (possible only for a template that starts with an expression, e.g. `{path}` given the value
//! `~ x`); it reaches the upstream decoded.

use std::borrow::Cow;

/// The scheme of namespaced URIs.
pub const SCHEME: &str = "mcpgw";

/// What every namespaced URI starts with.
const PREFIX: &str = "mcpgw://";

/// Marks an escaped original (see the module docs). Unreserved, and never the first character
/// of a plain original, which starts with a letter.
const ESCAPED: char = '~';

/// The URI clients see for `server`'s resource `original`.
pub fn namespace(server: &str, original: &str) -> String {
    if is_plain(original) {
        format!("{PREFIX}{server}/{original}")
    } else {
        let mut out = String::with_capacity(PREFIX.len() + server.len() + 2 + original.len() * 3);
        out.push_str(PREFIX);
        out.push_str(server);
        out.push('/');
        out.push(ESCAPED);
        for &byte in original.as_bytes() {
            if is_unreserved(byte) {
                out.push(char::from(byte));
            } else {
                out.push('%');
                out.push(hex_digit(byte >> 4));
                out.push(hex_digit(byte & 0x0f));
            }
        }
        out
    }
}

/// The URI template clients see for `server`'s template `template`.
pub fn namespace_template(server: &str, template: &str) -> String {
    format!("{PREFIX}{server}/{template}")
}

/// The server and the original URI behind a namespaced URI (or behind the expansion of a
/// namespaced template); `None` when `uri` is not of that form. The server is returned as
/// written: whether such a server exists is the caller's question.
pub fn split(uri: &str) -> Option<(&str, Cow<'_, str>)> {
    let head = uri.get(..PREFIX.len())?;
    if !head.eq_ignore_ascii_case(PREFIX) {
        return None;
    }
    let (server, rest) = uri[PREFIX.len()..].split_once('/')?;
    if server.is_empty() {
        return None;
    }
    if let Some(escaped) = rest.strip_prefix(ESCAPED)
        && let Some(decoded) = unescape(escaped)
        && !is_plain(&decoded)
    {
        return Some((server, Cow::Owned(decoded)));
    }
    Some((server, Cow::Borrowed(rest)))
}

/// Whether `original` can follow `mcpgw://SERVER/` as it is (see the module docs).
pub fn is_plain(original: &str) -> bool {
    let bytes = original.as_bytes();
    if !bytes.first().is_some_and(u8::is_ascii_alphabetic) {
        return false;
    }
    let mut hashes = 0;
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        match byte {
            b'%' => {
                let escape = bytes.get(at + 1..at + 3);
                if !escape.is_some_and(|pair| pair.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                at += 3;
                continue;
            }
            b'#' => hashes += 1,
            _ if is_unreserved(byte) || is_plain_delimiter(byte) => {}
            _ => return false,
        }
        at += 1;
    }
    hashes <= 1
}

/// RFC 3986 `unreserved`: ALPHA / DIGIT / "-" / "." / "_" / "~".
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// RFC 3986 `gen-delims` without `[` and `]`, and `sub-delims`.
fn is_plain_delimiter(byte: u8) -> bool {
    matches!(
        byte,
        b':' | b'/'
            | b'?'
            | b'#'
            | b'@'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
    )
}

fn hex_digit(nibble: u8) -> char {
    char::from(b"0123456789ABCDEF"[usize::from(nibble & 0x0f)])
}

/// Decodes a string of unreserved characters and `%XX` escapes; `None` when it has anything
/// else or does not decode to UTF-8.
fn unescape(escaped: &str) -> Option<String> {
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let pair = escaped.get(at + 1..at + 3)?;
                if !pair.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(pair, 16).ok()?);
                at += 3;
            }
            byte if is_unreserved(byte) => {
                out.push(byte);
                at += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use proptest::prelude::*;

    use super::*;

    fn check(server: &str, original: &str, expect: Expect) {
        let shown = namespace(server, original);
        expect.assert_eq(&shown);
        assert!(is_uri(&shown), "not a URI: {shown}");
        let (back_server, back) = split(&shown).expect("splits");
        assert_eq!((back_server, back.as_ref()), (server, original));
    }

    /// RFC 3986 `URI` for what `namespace` produces: `scheme "://" reg-name path-abempty
    /// ["?" query] ["#" fragment]`, checked character by character.
    fn is_uri(uri: &str) -> bool {
        let Some(rest) = uri.strip_prefix("mcpgw://") else {
            return false;
        };
        let (authority, rest) = rest.split_once('/').unwrap_or((rest, ""));
        let pct_ok = |s: &str| {
            let b = s.as_bytes();
            b.iter().enumerate().all(|(i, &c)| {
                c != b'%'
                    || (b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                        && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            })
        };
        let pchar = |c: u8| {
            is_unreserved(c)
                || c == b'%'
                || matches!(
                    c,
                    b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b','
                )
                || matches!(c, b';' | b'=' | b':' | b'@')
        };
        let (before_fragment, fragment) = rest.split_once('#').unwrap_or((rest, ""));
        let (path, query) = before_fragment
            .split_once('?')
            .unwrap_or((before_fragment, ""));
        !authority.is_empty()
            && authority.bytes().all(|c| is_unreserved(c) || c == b'%')
            && path.bytes().all(|c| pchar(c) || c == b'/')
            && query.bytes().all(|c| pchar(c) || c == b'/' || c == b'?')
            && fragment.bytes().all(|c| pchar(c) || c == b'/' || c == b'?')
            && pct_ok(uri)
    }

    #[test]
    fn plain_uris_follow_the_server_verbatim() {
        check(
            "everything",
            "demo://resource/static/document/architecture.md",
            expect!["mcpgw://everything/demo://resource/static/document/architecture.md"],
        );
        check("fs", "file:///a", expect!["mcpgw://fs/file:///a"]);
        check(
            "web",
            "https://user@example.com:8443/a%20b?q=1&r=?#frag/x?",
            expect!["mcpgw://web/https://user@example.com:8443/a%20b?q=1&r=?#frag/x?"],
        );
        check(
            "x",
            "urn:isbn:0451450523",
            expect!["mcpgw://x/urn:isbn:0451450523"],
        );
    }

    #[test]
    fn other_uris_are_escaped_after_a_tilde() {
        check(
            "s",
            "http://[::1]/a b",
            expect!["mcpgw://s/~http%3A%2F%2F%5B%3A%3A1%5D%2Fa%20b"],
        );
        check(
            "s",
            "file:///é",
            expect!["mcpgw://s/~file%3A%2F%2F%2F%C3%A9"],
        );
        check("s", "", expect!["mcpgw://s/~"]);
        check("s", "~x", expect!["mcpgw://s/~~x"]);
        check("s", "a%zz", expect!["mcpgw://s/~a%25zz"]);
        check("s", "a#b#c", expect!["mcpgw://s/~a%23b%23c"]);
        check("s", "/relative", expect!["mcpgw://s/~%2Frelative"]);
    }

    #[test]
    fn two_servers_same_uri_differ() {
        assert_ne!(namespace("a", "file:///a"), namespace("b", "file:///a"));
    }

    #[test]
    fn expanded_templates_map_back_to_the_upstream_expansion() {
        // (upstream template, values expanded by hand per RFC 6570, upstream's expansion)
        let cases = [
            (
                "demo://resource/dynamic/text/{resourceId}",
                "demo://resource/dynamic/text/42",
            ),
            ("file:///{+path}", "file:///docs/a%20b.md"),
            ("file:///{path}", "file:///docs%2Fa.md"),
            (
                "http://h/search{?q,lang}",
                "http://h/search?q=caf%C3%A9&lang=fr",
            ),
            ("http://h/x{#section}", "http://h/x#a/b"),
            ("http://h{/seg*}", "http://h/a/b/c"),
            ("http://h/m{;x,y}", "http://h/m;x=1;y=2"),
            ("http://h/?fixed=1{&x}", "http://h/?fixed=1&x=1"),
            ("http://h/f{.ext}", "http://h/f.json"),
            ("{+base}/child", "https://example.com/child"),
            ("{+base}", "~home"),
        ];
        for (template, expanded) in cases {
            let shown = namespace_template("s", template);
            assert!(shown.starts_with("mcpgw://s/"), "{shown}");
            // The client's expansion of the shown template is the prefix and the upstream's.
            let client_expansion = format!("mcpgw://s/{expanded}");
            let (server, back) = split(&client_expansion).expect("splits");
            assert_eq!((server, back.as_ref()), ("s", expanded), "{template}");
        }
    }

    #[test]
    fn foreign_uris_do_not_split() {
        for uri in [
            "file:///a",
            "mcpgw:/s/x",
            "mcpgw://",
            "mcpgw:///x",
            "mcpgw://s",
            "mcp",
            "",
        ] {
            assert_eq!(split(uri), None, "{uri}");
        }
        assert_eq!(
            split("MCPGW://s/file:///a").map(|(s, o)| (s, o.into_owned())),
            Some(("s", "file:///a".to_owned()))
        );
        // Badly escaped after the tilde: taken verbatim.
        assert_eq!(
            split("mcpgw://s/~%zz").map(|(_, o)| o.into_owned()),
            Some("~%zz".to_owned())
        );
        assert_eq!(
            split("mcpgw://s/~%FF").map(|(_, o)| o.into_owned()),
            Some("~%FF".to_owned())
        );
    }

    fn server_name() -> impl Strategy<Value = String> {
        "[A-Za-z0-9-]{1,12}(_[A-Za-z0-9-]{1,12}){0,1}"
    }

    fn original() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]{1,8}://[a-z0-9./]{0,20}",
            "[a-z]{1,5}:[A-Za-z0-9:/?#@!$&'()*+,;=%._~\\[\\] -]{0,30}",
            "[~%#\\[\\]a-z]{0,10}",
            "\\PC{0,30}",
            ".{0,30}",
        ]
    }

    proptest! {
        #[test]
        fn every_uri_round_trips_and_is_a_uri(server in server_name(), original in original()) {
            let shown = namespace(&server, &original);
            prop_assert!(is_uri(&shown), "not a URI: {shown}");
            let (back_server, back) = split(&shown).expect("splits");
            prop_assert_eq!(back_server, server.as_str());
            prop_assert_eq!(back.as_ref(), original.as_str());
        }

        #[test]
        fn plain_expansions_come_back_verbatim(server in server_name(), expansion in "[a-z][A-Za-z0-9:/?#@!$&'()*+,;=%._~-]{0,40}") {
            let uri = format!("mcpgw://{server}/{expansion}");
            let (back_server, back) = split(&uri).expect("splits");
            prop_assert_eq!(back_server, server.as_str());
            prop_assert_eq!(back.as_ref(), expansion.as_str());
        }

        #[test]
        fn split_never_panics(uri in "\\PC{0,60}") {
            let _ = split(&uri);
            let _ = split(&format!("mcpgw://s/{uri}"));
        }
    }
}
