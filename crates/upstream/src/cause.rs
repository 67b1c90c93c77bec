//! Why a connection failed, in words a user can act on: "connection refused at
//! 127.0.0.1:9", "DNS: no such host 'x'", "HTTP 404 at /api: MCP endpoints usually end in
//! /mcp". Every HTTP connect error is explained here, from the innermost cause in its chain of
//! sources, rather than from the outermost wrapper's text (`Client error: error sending
//! request for url (...)`).
//!
//! The chain is read by type where the type is ours or std's (`io::Error` kinds, rmcp's
//! `StreamableHttpError`), and by the words of the layer that has no public type for it:
//! hyper-util's `dns error` and rustls's `invalid peer certificate: ...`, the two causes that
//! are only ever text. Nothing here echoes a header, a query or a response body that could
//! carry a credential: a URL shows as `host:port` or its path.

use std::error::Error as StdError;
use std::io;

use rmcp::transport::streamable_http_client::StreamableHttpError;
use url::Url;

/// A failed connection's cause, when one is recognised; `None` leaves the caller's words.
pub(crate) fn explain(error: &(dyn StdError + 'static), url: &Url) -> Option<String> {
    let mut found = None;
    for layer in chain(error) {
        if let Some(cause) = classify(layer, url) {
            // The innermost recognised cause wins: an io error beneath "dns error" says less
            // than the DNS verdict, so only replace a weaker finding.
            if found.as_ref().is_none_or(|(rank, _)| cause.0 >= *rank) {
                found = Some(cause);
            }
        }
    }
    found.map(|(_, words)| words)
}

/// An HTTP error status at `url`, explained: `HTTP 404 at /api: MCP endpoints usually end in
/// /mcp`. `body` is kept only when it is a short line of text (an HTML error page is noise).
pub(crate) fn http_status(status: u16, reason: &str, url: &Url, body: &str) -> String {
    let path = url.path();
    let mut words = format!("HTTP {status}");
    if !reason.is_empty() {
        words.push(' ');
        words.push_str(reason);
    }
    words.push_str(&format!(" at {path}"));
    let body = body.trim();
    if !body.is_empty() && body.len() <= 200 && !body.starts_with('<') && !body.contains('\n') {
        words.push_str(&format!(" ({body})"));
    }
    // Not found, or no POST there (405; 501 from a plain web server such as python's).
    if matches!(status, 404 | 405 | 501) {
        let hint = if path.ends_with("/mcp") || path.ends_with("/sse") {
            " — is an MCP server listening at this URL, and is it the right port?"
        } else {
            " — MCP endpoints usually end in /mcp (legacy SSE ones in /sse)"
        };
        words.push_str(hint);
    }
    words
}

/// `error` and its sources, opening what rmcp wraps without exposing it as a source.
fn chain<'a>(error: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut layers = Vec::new();
    let mut current = Some(error);
    while let Some(layer) = current {
        layers.push(layer);
        current = match layer.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::Client(inner)) => Some(inner),
            _ => layer.source(),
        };
        if layers.len() > 32 {
            break;
        }
    }
    layers
}

/// One layer's verdict and how specific it is (a higher rank is more specific).
fn classify(layer: &(dyn StdError + 'static), url: &Url) -> Option<(u8, String)> {
    let host = url.host_str().unwrap_or("the server");
    let at = match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    if let Some(error) = layer.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return match error {
            StreamableHttpError::UnexpectedServerResponse(text) => status_line(text)
                .map(|(status, reason, body)| (3, http_status(status, reason, url, body))),
            StreamableHttpError::HttpStatus(status) => {
                Some((3, http_status(status.status, "", url, "")))
            }
            _ => None,
        };
    }
    if let Some(error) = layer.downcast_ref::<reqwest::Error>()
        && error.is_timeout()
    {
        return Some((1, format!("timed out waiting for {at}")));
    }
    if let Some(error) = layer.downcast_ref::<io::Error>() {
        let words = match error.kind() {
            io::ErrorKind::ConnectionRefused => {
                format!(
                    "connection refused at {at} (nothing listens there: is the server running, on this port?)"
                )
            }
            io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => {
                format!("connection reset by {at}")
            }
            io::ErrorKind::TimedOut => format!("timed out connecting to {at}"),
            io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
                format!("no route to {at}")
            }
            io::ErrorKind::AddrNotAvailable => {
                format!("cannot connect to {at}: address not available")
            }
            // Other kinds carry their cause as text (a lookup failure, a TLS verdict).
            _ => String::new(),
        };
        if !words.is_empty() {
            return Some((2, words));
        }
    }
    let text = layer.to_string();
    if text == "dns error" || text.starts_with("failed to lookup address") {
        return Some((3, format!("DNS: no such host '{host}'")));
    }
    tls(&text, host, &at).map(|words| (2, words))
}

/// rustls's certificate verdicts (`invalid peer certificate: ...`) and the corrupt record of
/// speaking TLS to a plain HTTP port.
fn tls(text: &str, host: &str, at: &str) -> Option<String> {
    if let Some(detail) = text.strip_prefix("invalid peer certificate: ") {
        let detail = detail.to_ascii_lowercase();
        let words = if detail.contains("not valid for name") || detail.contains("notvalidforname") {
            format!("TLS: certificate not valid for host '{host}'")
        } else if detail.contains("unknownissuer") || detail.contains("unknown issuer") {
            format!(
                "TLS: the certificate of {at} is not signed by a trusted authority (self-signed or a private CA)"
            )
        } else if detail.contains("expired") {
            format!("TLS: the certificate of {at} has expired")
        } else {
            format!("TLS: the certificate of {at} was rejected ({detail})")
        };
        return Some(words);
    }
    if text.contains("received corrupt message") || text.contains("InvalidContentType") {
        return Some(format!(
            "TLS: {at} does not speak TLS (is it a plain http:// server?)"
        ));
    }
    None
}

/// rmcp's `HTTP 404 Not Found: <body>`: the status, its reason phrase and the body.
fn status_line(text: &str) -> Option<(u16, &str, &str)> {
    let rest = text.strip_prefix("HTTP ")?;
    let (line, body) = rest.split_once(':').unwrap_or((rest, ""));
    let (code, reason) = line.split_once(' ').unwrap_or((line, ""));
    Some((code.parse().ok()?, reason.trim(), body))
}

#[cfg(test)]
mod tests {
    use std::fmt;

    use super::*;

    /// An error whose text and source are given, like a wrapper from a library.
    #[derive(Debug)]
    struct Wrapper {
        text: &'static str,
        source: Option<Box<dyn StdError + 'static>>,
    }

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.text)
        }
    }

    impl StdError for Wrapper {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.source.as_deref()
        }
    }

    fn wrap(text: &'static str, source: impl StdError + 'static) -> Wrapper {
        Wrapper {
            text,
            source: Some(Box::new(source)),
        }
    }

    fn url(text: &str) -> Url {
        Url::parse(text).expect("test url")
    }

    #[track_caller]
    fn check(error: &(dyn StdError + 'static), at: &str, expected: Option<&str>) {
        assert_eq!(explain(error, &url(at)).as_deref(), expected);
    }

    #[test]
    fn a_refused_connection_names_the_address() {
        let error = wrap(
            "error sending request for url (http://127.0.0.1:9/mcp)",
            wrap(
                "client error (Connect)",
                wrap(
                    "tcp connect error",
                    io::Error::from(io::ErrorKind::ConnectionRefused),
                ),
            ),
        );
        check(
            &error,
            "http://127.0.0.1:9/mcp",
            Some(
                "connection refused at 127.0.0.1:9 (nothing listens there: is the server running, on this port?)",
            ),
        );
        let client: StreamableHttpError<reqwest::Error> =
            StreamableHttpError::Io(io::Error::from(io::ErrorKind::ConnectionReset));
        check(
            &client,
            "https://mcp.example.com/mcp",
            Some("connection reset by mcp.example.com:443"),
        );
    }

    #[test]
    fn dns_failures_name_the_host_over_the_io_error_beneath() {
        let error = wrap(
            "client error (Connect)",
            wrap(
                "dns error",
                io::Error::other("failed to lookup address information: Name or service not known"),
            ),
        );
        check(
            &error,
            "https://nosuch.example/mcp",
            Some("DNS: no such host 'nosuch.example'"),
        );
    }

    #[test]
    fn tls_verdicts_are_named() {
        for (text, expected) in [
            (
                "invalid peer certificate: certificate not valid for name \"x.example\"; certificate is only valid for DnsName(\"other\")",
                "TLS: certificate not valid for host 'x.example'",
            ),
            (
                "invalid peer certificate: UnknownIssuer",
                "TLS: the certificate of x.example:8443 is not signed by a trusted authority (self-signed or a private CA)",
            ),
            (
                "invalid peer certificate: Expired",
                "TLS: the certificate of x.example:8443 has expired",
            ),
            (
                "received corrupt message of type InvalidContentType",
                "TLS: x.example:8443 does not speak TLS (is it a plain http:// server?)",
            ),
        ] {
            let error = wrap(
                "client error (Connect)",
                io::Error::new(io::ErrorKind::InvalidData, text),
            );
            check(&error, "https://x.example:8443/mcp", Some(expected));
        }
    }

    #[test]
    fn http_statuses_say_where_and_what_endpoints_look_like() {
        let not_found: StreamableHttpError<reqwest::Error> =
            StreamableHttpError::UnexpectedServerResponse("HTTP 404 Not Found: ".into());
        check(
            &not_found,
            "http://127.0.0.1:3000/api",
            Some(
                "HTTP 404 Not Found at /api — MCP endpoints usually end in /mcp (legacy SSE ones in /sse)",
            ),
        );
        let plain_web_server: StreamableHttpError<reqwest::Error> =
            StreamableHttpError::UnexpectedServerResponse("HTTP 501: ".into());
        check(
            &plain_web_server,
            "http://127.0.0.1:8000/api",
            Some("HTTP 501 at /api — MCP endpoints usually end in /mcp (legacy SSE ones in /sse)"),
        );
        let html: StreamableHttpError<reqwest::Error> =
            StreamableHttpError::UnexpectedServerResponse(
                "HTTP 404 Not Found: <!DOCTYPE html>\n<pre>Cannot POST /mcp</pre>".into(),
            );
        check(
            &html,
            "http://127.0.0.1:3000/mcp",
            Some(
                "HTTP 404 Not Found at /mcp — is an MCP server listening at this URL, and is it the right port?",
            ),
        );
        let text: StreamableHttpError<reqwest::Error> =
            StreamableHttpError::UnexpectedServerResponse(
                "HTTP 403 Forbidden: tenant disabled".into(),
            );
        check(
            &text,
            "https://x.example/mcp",
            Some("HTTP 403 Forbidden at /mcp (tenant disabled)"),
        );
    }

    #[test]
    fn an_unrecognised_chain_is_left_to_the_caller() {
        let error = wrap(
            "something else",
            Wrapper {
                text: "deeper",
                source: None,
            },
        );
        check(&error, "https://x.example/mcp", None);
    }
}
