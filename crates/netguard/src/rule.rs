//! One entry of `[network] allow`: a host name, a `*.suffix` wildcard, an IP address or a CIDR,
//! optionally with a port, parsed from what an operator writes.
//!
//! Forms: `localhost`, `mcp.internal.example`, `*.corp.example` (any name strictly below
//! `corp.example`, at any depth, but not `corp.example` itself), `10.1.2.3`, `::1`,
//! `10.0.0.0/8`, `fd00::/8`, and with a port `localhost:3000`, `10.1.2.3:8080`, `[::1]:3000`,
//! `*.corp.example:8443`. Names are compared case-insensitively, without a trailing dot, and
//! in their IDNA (punycode) form, exactly as the `url` crate normalises a URL's host.
//!
//! A CIDR with host bits set (`10.1.2.3/8`) is refused with the network it probably meant,
//! rather than silently widened: the difference between `/8` and `/24` is the kind of typo an
//! allowlist must not absorb. A URL (`http://localhost:3000/mcp`) is refused with the entry to
//! write instead, since pasting the server's URL is the first thing a developer tries.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use url::{Host, Url};

/// One allowlist entry. Parse with [`str::parse`]; [`Display`](fmt::Display) gives the
/// canonical form back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    target: Target,
    port: Option<u16>,
}

/// Why an allowlist entry is not one. The messages quote the entry as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("an empty string is not a host name, IP address or CIDR")]
    Empty,
    #[error("\"{entry}\" is not a valid CIDR: {reason}")]
    Cidr { entry: String, reason: String },
    #[error("\"{entry}\" is a URL; write just its host, \"{host}\"")]
    Url { entry: String, host: String },
    #[error("\"{entry}\" has an invalid port (a number from 1 to 65535)")]
    Port { entry: String },
    #[error("\"{entry}\": a wildcard must be the whole first label, as in \"*.example.com\"")]
    Wildcard { entry: String },
    #[error("\"{entry}\" is not a host name, IP address or CIDR")]
    Invalid { entry: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Target {
    /// An exact host name: lower case, ASCII, no trailing dot.
    Name(String),
    /// `*.suffix`: any name strictly below `suffix`.
    Below(String),
    /// An address block; a single address is a full-length block.
    Net(Net),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Rule {
    /// The port the entry is limited to, if it names one.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether the entry names `name` (normalised: see [`normalize_name`]), whatever the port.
    pub(crate) fn matches_name(&self, name: &str) -> bool {
        match &self.target {
            Target::Name(rule) => rule == name,
            Target::Below(suffix) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            Target::Net(_) => false,
        }
    }

    /// Whether the entry's address block contains `ip`, whatever the port.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        match self.target {
            Target::Net(net) => net.contains(ip.to_canonical()),
            _ => false,
        }
    }

    /// Whether the entry is exactly the single address `ip`.
    pub(crate) fn is_exactly(&self, ip: IpAddr) -> bool {
        match self.target {
            Target::Net(net) => {
                let ip = ip.to_canonical();
                net.addr == ip && net.prefix == full_length(ip)
            }
            _ => false,
        }
    }
}

/// A host name as rules compare it: ASCII lower case, without a trailing dot. URL hosts are
/// already lower case and IDNA-encoded by the `url` crate.
pub(crate) fn normalize_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let text = entry.trim();
        let invalid = || RuleError::Invalid {
            entry: entry.to_owned(),
        };
        if text.is_empty() {
            return Err(RuleError::Empty);
        }
        if text.contains("://") {
            return Err(match Url::parse(text).ok().and_then(|url| host_of(&url)) {
                Some(host) => RuleError::Url {
                    entry: entry.to_owned(),
                    host,
                },
                None => invalid(),
            });
        }
        if let Some((addr, prefix)) = text.split_once('/') {
            // A path after a host name ("example.com/mcp") is not a CIDR attempt.
            let addr: IpAddr = addr.parse().map_err(|_| invalid())?;
            return Ok(Rule {
                target: Target::Net(Net::parse(entry, addr, prefix)?),
                port: None,
            });
        }
        if let Some(rest) = text.strip_prefix('[') {
            let (inner, after) = rest.split_once(']').ok_or_else(invalid)?;
            let addr: Ipv6Addr = inner.parse().map_err(|_| invalid())?;
            let port = match after {
                "" => None,
                _ => Some(parse_port(
                    entry,
                    after.strip_prefix(':').ok_or_else(invalid)?,
                )?),
            };
            return Ok(Rule {
                target: Target::Net(Net::single(IpAddr::V6(addr))),
                port,
            });
        }
        if let Ok(addr) = text.parse::<IpAddr>() {
            return Ok(Rule {
                target: Target::Net(Net::single(addr)),
                port: None,
            });
        }
        let (host, port) = match text.rsplit_once(':') {
            None => (text, None),
            Some((host, port)) if !host.contains(':') => (host, Some(parse_port(entry, port)?)),
            // Several colons and not an IPv6 address.
            Some(_) => return Err(invalid()),
        };
        let target = if let Some(suffix) = host.strip_prefix("*.") {
            match parse_host(suffix) {
                Some(Host::Domain(suffix)) if !suffix.contains('*') => Target::Below(suffix),
                Some(Host::Domain(_)) => {
                    return Err(RuleError::Wildcard {
                        entry: entry.to_owned(),
                    });
                }
                _ => return Err(invalid()),
            }
        } else if host.contains('*') {
            return Err(RuleError::Wildcard {
                entry: entry.to_owned(),
            });
        } else {
            match parse_host(host) {
                Some(Host::Domain(name)) => Target::Name(name),
                // WHATWG IPv4 forms ("127.1", "0x7f.0.0.1") mean what they mean in a URL.
                Some(Host::Ipv4(addr)) => Target::Net(Net::single(IpAddr::V4(addr))),
                Some(Host::Ipv6(addr)) => Target::Net(Net::single(IpAddr::V6(addr))),
                None => return Err(invalid()),
            }
        };
        Ok(Rule { target, port })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.target, self.port) {
            (Target::Name(name), None) => f.write_str(name),
            (Target::Name(name), Some(port)) => write!(f, "{name}:{port}"),
            (Target::Below(suffix), None) => write!(f, "*.{suffix}"),
            (Target::Below(suffix), Some(port)) => write!(f, "*.{suffix}:{port}"),
            (Target::Net(net), None) if net.prefix == full_length(net.addr) => {
                write!(f, "{}", net.addr)
            }
            (Target::Net(net), None) => write!(f, "{}/{}", net.addr, net.prefix),
            (Target::Net(Net { addr, .. }), Some(port)) => match addr {
                IpAddr::V4(addr) => write!(f, "{addr}:{port}"),
                IpAddr::V6(addr) => write!(f, "[{addr}]:{port}"),
            },
        }
    }
}

impl Net {
    fn single(addr: IpAddr) -> Self {
        let addr = addr.to_canonical();
        Net {
            addr,
            prefix: full_length(addr),
        }
    }

    fn parse(entry: &str, addr: IpAddr, prefix: &str) -> Result<Self, RuleError> {
        let max = full_length(addr);
        let cidr_error = |reason: String| RuleError::Cidr {
            entry: entry.to_owned(),
            reason,
        };
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|&prefix| prefix <= max)
            .ok_or_else(|| {
                cidr_error(format!(
                    "the prefix length must be a number from 0 to {max}"
                ))
            })?;
        let network = mask(addr, prefix);
        if network != addr {
            return Err(cidr_error(format!(
                "it has host bits set; did you mean \"{network}/{prefix}\"?"
            )));
        }
        // An IPv4-mapped block is the IPv4 block it maps.
        Ok(match addr {
            IpAddr::V6(v6) if prefix >= 96 && v6.to_ipv4_mapped().is_some() => Net {
                addr: addr.to_canonical(),
                prefix: prefix - 96,
            },
            _ => Net { addr, prefix },
        })
    }

    fn contains(self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(ip, self.prefix) == self.addr
            }
            _ => false,
        }
    }
}

fn full_length(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// `addr` with all but its first `prefix` bits cleared (`prefix` is at most the length).
fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            // Shifting a u32 by 32 overflows: prefix 0 clears everything.
            let bits = if prefix == 0 {
                0
            } else {
                u32::from(v4) & (u32::MAX << (32 - u32::from(prefix)))
            };
            IpAddr::V4(Ipv4Addr::from(bits))
        }
        IpAddr::V6(v6) => {
            let bits = if prefix == 0 {
                0
            } else {
                u128::from(v6) & (u128::MAX << (128 - u32::from(prefix)))
            };
            IpAddr::V6(Ipv6Addr::from(bits))
        }
    }
}

fn parse_port(entry: &str, text: &str) -> Result<u16, RuleError> {
    text.parse::<u16>()
        .ok()
        .filter(|&port| port != 0)
        .ok_or_else(|| RuleError::Port {
            entry: entry.to_owned(),
        })
}

fn parse_host(text: &str) -> Option<Host<String>> {
    if text.is_empty() {
        return None;
    }
    Host::parse(text.strip_suffix('.').unwrap_or(text))
        .ok()
        .map(|host| match host {
            Host::Domain(name) => Host::Domain(normalize_name(&name)),
            other => other,
        })
}

/// The entry to write for a URL: its host, with the port when the URL names one.
fn host_of(url: &Url) -> Option<String> {
    let host = match url.host()? {
        Host::Domain(name) => normalize_name(name),
        Host::Ipv4(addr) => addr.to_string(),
        Host::Ipv6(addr) if url.port().is_some() => format!("[{addr}]"),
        Host::Ipv6(addr) => addr.to_string(),
    };
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each entry parses, and prints back as `canonical`.
    #[track_caller]
    fn check_parses(rows: &[(&str, &str)]) {
        for &(entry, canonical) in rows {
            match entry.parse::<Rule>() {
                Ok(rule) => assert_eq!(rule.to_string(), canonical, "{entry}"),
                Err(error) => panic!("{entry} did not parse: {error}"),
            }
        }
    }

    /// Each entry is refused with exactly `message`.
    #[track_caller]
    fn check_refused(rows: &[(&str, &str)]) {
        for &(entry, message) in rows {
            match entry.parse::<Rule>() {
                Ok(rule) => panic!("{entry} parsed as {rule}"),
                Err(error) => assert_eq!(error.to_string(), message, "{entry}"),
            }
        }
    }

    fn rule(entry: &str) -> Rule {
        entry.parse().expect("test rules parse")
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("test addresses parse")
    }

    #[test]
    fn entries_parse_to_their_canonical_form() {
        check_parses(&[
            ("localhost", "localhost"),
            ("LocalHost", "localhost"),
            ("localhost.", "localhost"),
            ("  mcp.internal.example  ", "mcp.internal.example"),
            ("*.Corp.Example.", "*.corp.example"),
            ("münchen.example", "xn--mnchen-3ya.example"),
            ("localhost:3000", "localhost:3000"),
            ("*.corp.example:8443", "*.corp.example:8443"),
            ("127.0.0.1", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("127.0.0.1:3000", "127.0.0.1:3000"),
            ("::1", "::1"),
            ("[::1]", "::1"),
            ("[::1]:3000", "[::1]:3000"),
            ("::ffff:10.0.0.1", "10.0.0.1"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("192.168.1.7/32", "192.168.1.7"),
            ("fd00::/8", "fd00::/8"),
            ("::ffff:10.0.0.0/104", "10.0.0.0/8"),
        ]);
    }

    #[test]
    fn malformed_entries_are_refused_with_what_to_write() {
        check_refused(&[
            ("", "an empty string is not a host name, IP address or CIDR"),
            (
                "   ",
                "an empty string is not a host name, IP address or CIDR",
            ),
            (
                "10.0.0.0/33",
                "\"10.0.0.0/33\" is not a valid CIDR: the prefix length must be a number from 0 to 32",
            ),
            (
                "fd00::/129",
                "\"fd00::/129\" is not a valid CIDR: the prefix length must be a number from 0 to 128",
            ),
            (
                "10.0.0.0/",
                "\"10.0.0.0/\" is not a valid CIDR: the prefix length must be a number from 0 to 32",
            ),
            (
                "10.1.2.3/8",
                "\"10.1.2.3/8\" is not a valid CIDR: it has host bits set; did you mean \"10.0.0.0/8\"?",
            ),
            (
                "fd00::1/8",
                "\"fd00::1/8\" is not a valid CIDR: it has host bits set; did you mean \"fd00::/8\"?",
            ),
            (
                "10.0.0.256/8",
                "\"10.0.0.256/8\" is not a host name, IP address or CIDR",
            ),
            (
                "example.com/mcp",
                "\"example.com/mcp\" is not a host name, IP address or CIDR",
            ),
            (
                "http://localhost:3000/mcp",
                "\"http://localhost:3000/mcp\" is a URL; write just its host, \"localhost:3000\"",
            ),
            (
                "https://Mcp.Example.com/mcp",
                "\"https://Mcp.Example.com/mcp\" is a URL; write just its host, \"mcp.example.com\"",
            ),
            (
                "localhost:0",
                "\"localhost:0\" has an invalid port (a number from 1 to 65535)",
            ),
            (
                "localhost:http",
                "\"localhost:http\" has an invalid port (a number from 1 to 65535)",
            ),
            (
                "localhost:65536",
                "\"localhost:65536\" has an invalid port (a number from 1 to 65535)",
            ),
            (
                "*",
                "\"*\": a wildcard must be the whole first label, as in \"*.example.com\"",
            ),
            (
                "mcp*.example.com",
                "\"mcp*.example.com\": a wildcard must be the whole first label, as in \"*.example.com\"",
            ),
            (
                "*.*.example.com",
                "\"*.*.example.com\": a wildcard must be the whole first label, as in \"*.example.com\"",
            ),
            (
                "a.*.example.com",
                "\"a.*.example.com\": a wildcard must be the whole first label, as in \"*.example.com\"",
            ),
            (
                "*.10.0.0.1",
                "\"*.10.0.0.1\" is not a host name, IP address or CIDR",
            ),
            (
                "exa mple.com",
                "\"exa mple.com\" is not a host name, IP address or CIDR",
            ),
            (
                "fd00::1::2",
                "\"fd00::1::2\" is not a host name, IP address or CIDR",
            ),
            ("[::1", "\"[::1\" is not a host name, IP address or CIDR"),
            (
                "[::1]3000",
                "\"[::1]3000\" is not a host name, IP address or CIDR",
            ),
        ]);
    }

    #[test]
    fn names_match_case_insensitively_and_without_trailing_dots() {
        let localhost = rule("LOCALHOST.");
        assert!(localhost.matches_name(&normalize_name("localhost")));
        assert!(localhost.matches_name(&normalize_name("LocalHost.")));
        assert!(!localhost.matches_name(&normalize_name("localhost.localdomain")));
        assert!(!localhost.matches_name(&normalize_name("notlocalhost")));
    }

    #[test]
    fn wildcards_match_names_strictly_below_their_suffix() {
        let corp = rule("*.corp.example");
        for name in ["a.corp.example", "A.B.Corp.Example.", "x-1.corp.example"] {
            assert!(corp.matches_name(&normalize_name(name)), "{name}");
        }
        for name in [
            "corp.example",
            "evilcorp.example",
            "corp.example.evil",
            ".corp.example",
        ] {
            assert!(!corp.matches_name(&normalize_name(name)), "{name}");
        }
    }

    #[test]
    fn blocks_contain_their_addresses_in_either_spelling() {
        let ten = rule("10.0.0.0/8");
        assert!(ten.contains(ip("10.0.0.1")));
        assert!(ten.contains(ip("10.255.255.255")));
        assert!(ten.contains(ip("::ffff:10.9.8.7")));
        assert!(!ten.contains(ip("11.0.0.0")));
        assert!(!ten.contains(ip("::10.0.0.1")));

        let ula = rule("fd00::/8");
        assert!(ula.contains(ip("fd12::1")));
        assert!(!ula.contains(ip("fe80::1")));
        assert!(!ula.contains(ip("10.0.0.1")));

        let everything = rule("0.0.0.0/0");
        assert!(everything.contains(ip("127.0.0.1")));
        assert!(everything.contains(ip("255.255.255.255")));
        assert!(!everything.contains(ip("::1")));

        let single = rule("127.0.0.1");
        assert!(single.contains(ip("127.0.0.1")));
        assert!(single.contains(ip("::ffff:127.0.0.1")));
        assert!(!single.contains(ip("127.0.0.2")));
        assert!(single.is_exactly(ip("::ffff:127.0.0.1")));
        assert!(!rule("127.0.0.0/8").is_exactly(ip("127.0.0.0")));

        let mapped_block = rule("::ffff:169.254.0.0/112");
        assert!(mapped_block.contains(ip("169.254.1.1")));
    }

    #[test]
    fn name_rules_contain_no_addresses_and_address_rules_match_no_names() {
        assert!(!rule("localhost").contains(ip("127.0.0.1")));
        assert!(!rule("127.0.0.1").matches_name("127.0.0.1"));
        assert_eq!(rule("localhost:3000").port(), Some(3000));
        assert_eq!(rule("10.0.0.0/8").port(), None);
    }
}
