//! `[gateway] allowed_hosts` and `allowed_origins`: the extra names the HTTP listener answers
//! to and the browser origins it accepts requests from, parsed into normalised values that
//! the gateway's request guard compares with what a request's `Host` and `Origin` carry.
//!
//! Normal form (the guard's own parser produces the same): an ASCII host in lower case
//! (international names as their punycode `xn--` form), without a trailing dot, an IPv6
//! literal in brackets in its canonical text (`[::1]`).

use std::fmt;

use url::Url;

/// One `[gateway] allowed_hosts` entry: a name (or IP address) the listener also answers to,
/// for example behind a reverse proxy or a port forward. Without a port it matches any port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowedHost {
    pub host: String,
    pub port: Option<u16>,
}

/// One `[gateway] allowed_origins` entry: a browser origin (`scheme://host[:port]`) whose
/// pages may call the gateway. The port is explicit or the scheme's default.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllowedOrigin {
    /// `http` or `https`.
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

impl fmt::Display for AllowedOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// Parses an `allowed_hosts` entry (`name`, `name:port`, `[v6]:port`), or says what is wrong.
pub(crate) fn allowed_host(entry: &str) -> Result<AllowedHost, String> {
    if entry.contains("://") {
        return Err(format!(
            "`{entry}` is a URL; write just the host name, with a port if it must match one"
        ));
    }
    let url = Url::parse(&format!("http://{entry}"))
        .map_err(|error| format!("`{entry}` is not a host name or address: {error}"))?;
    if url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
        || entry.ends_with('/')
    {
        return Err(format!(
            "`{entry}` must be a host name with an optional port, nothing else"
        ));
    }
    let host = normal_host(&url).ok_or_else(|| format!("`{entry}` names no host"))?;
    // `url` drops a port that is the scheme's default; `name:80` still means port 80 only.
    let port = url.port().or_else(|| explicit_port(entry));
    Ok(AllowedHost { host, port })
}

/// Parses an `allowed_origins` entry (`https://app.example`, `http://localhost:6274`).
pub(crate) fn allowed_origin(entry: &str) -> Result<AllowedOrigin, String> {
    if entry.eq_ignore_ascii_case("null") {
        return Err(
            "`null` is the origin of sandboxed and file pages, which any page can make; it cannot be allowed"
                .to_owned(),
        );
    }
    let url = Url::parse(entry).map_err(|error| format!("`{entry}` is not an origin: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("`{entry}` must start with http:// or https://"));
    }
    // A trailing `/` is forgiven (browsers never send one, people paste them).
    if url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
    {
        return Err(format!(
            "`{entry}` is not an origin: an origin is scheme://host[:port], without a path"
        ));
    }
    let host = normal_host(&url).ok_or_else(|| format!("`{entry}` names no host"))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| format!("`{entry}` has no port"))?;
    Ok(AllowedOrigin {
        scheme: url.scheme().to_owned(),
        host,
        port,
    })
}

/// The URL's host in the normal form described in the module documentation.
fn normal_host(url: &Url) -> Option<String> {
    let host = url.host_str()?;
    let host = host.strip_suffix('.').unwrap_or(host);
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// The port written at the end of `entry`, if any (`url` forgets a default one).
fn explicit_port(entry: &str) -> Option<u16> {
    let (_, port) = entry.rsplit_once(':')?;
    port.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_normalised_and_keep_an_explicit_port() {
        let host = |entry: &str| allowed_host(entry).map(|h| h.to_string());
        assert_eq!(host("GW.Example."), Ok("gw.example".to_owned()));
        assert_eq!(host("gw.example:80"), Ok("gw.example:80".to_owned()));
        assert_eq!(host("localhost:9000"), Ok("localhost:9000".to_owned()));
        assert_eq!(host("[0:0::1]:8931"), Ok("[::1]:8931".to_owned()));
        assert_eq!(host("10.0.0.7"), Ok("10.0.0.7".to_owned()));
        assert_eq!(
            host("bücher.example"),
            Ok("xn--bcher-kva.example".to_owned())
        );
        for bad in [
            "",
            "https://gw.example",
            "gw.example/mcp",
            "user@gw.example",
            "gw.example:99999",
            "::1",
            "gw example",
        ] {
            assert!(allowed_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn origins_are_normalised_with_their_default_port() {
        let origin = |entry: &str| allowed_origin(entry).map(|o| o.to_string());
        assert_eq!(
            origin("https://App.Example"),
            Ok("https://app.example:443".to_owned())
        );
        assert_eq!(
            origin("http://localhost:6274"),
            Ok("http://localhost:6274".to_owned())
        );
        assert_eq!(
            origin("https://app.example/"),
            Ok("https://app.example:443".to_owned())
        );
        assert_eq!(origin("http://[::1]:80"), Ok("http://[::1]:80".to_owned()));
        for bad in [
            "null",
            "NULL",
            "app.example",
            "ftp://app.example",
            "https://app.example/path",
            "https://app.example?q",
            "https://u@app.example",
            "*",
        ] {
            assert!(allowed_origin(bad).is_err(), "{bad}");
        }
    }
}
