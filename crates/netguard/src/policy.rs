//! The policy for one outbound client (the allowlist, and a server's private-network switch),
//! and the two judgements made with it: of a URL before it is requested ([`check_url`]) and of
//! each address a name resolves to ([`Policy::check_address`]).

use std::net::IpAddr;

use url::{Host, Url};

use crate::refusal::{Reason, Refusal, Remedy, Settings};
use crate::rule::normalize_name;
use crate::{Blocked, Rule, RuleError, classify};

/// Where one client may connect: the allowlist (`[network] allow`, shared by all clients) and,
/// for a server's clients, that server's `allow_private_network`.
///
/// Plain http is not a field: it is derived per host, as below.
///
/// What admits a non-public address, by class (see [`classify`]):
///
/// | class | admitted by |
/// |---|---|
/// | unspecified, multicast, broadcast | nothing: never a destination |
/// | cloud metadata | an allowlist entry naming that exact address only (not a host name, not a wider CIDR) |
/// | loopback, private, carrier-grade NAT | the server's `allow_private_network`, an entry naming the host, or a CIDR containing the address |
/// | link-local, documentation, benchmarking, reserved, Teredo | an entry naming the host, or a CIDR containing the address |
///
/// Plain http is allowed only where an operator has said the destination is theirs: a host
/// name an entry names, an IP literal an entry contains or the server's switch admits, and,
/// with `allow_private_network = true`, names that are local by construction (`localhost`,
/// `*.localhost`, single-label names such as docker-compose services, and `.local`,
/// `.internal`, `.lan`, `.home.arpa`). Everything else needs https, so that a developer with
/// `http://localhost:3000/mcp` needs exactly one line, while a token never crosses the public
/// internet in clear text because some name happened to be allowlisted for its address.
///
/// Ports: an entry with a port (`localhost:3000`) is enforced where the port is known, on the
/// URL: [`check_url`] refuses the host on another port, and for an IP-literal URL an address
/// entry applies only on its port. The resolver never sees the port, so for it a host-name
/// entry counts whatever its port (the URL was checked), and an address entry with a port
/// does not count (a name reaching that address through it would escape the port).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    allow: Vec<Rule>,
    allow_private_network: bool,
    /// The server this policy is for, named in refusal messages.
    server: Option<String>,
    /// Where the lines a refusal suggests are written, named in refusal messages.
    settings: Settings,
}

impl Policy {
    /// The global policy from parsed allowlist entries (the embedder, JWKS, anything not tied
    /// to one server).
    pub fn new(allow: Vec<Rule>) -> Self {
        Policy {
            allow,
            allow_private_network: false,
            server: None,
            settings: Settings::default(),
        }
    }

    /// The same policy, its refusals telling the user to write their remedies into
    /// `settings`.
    #[must_use]
    pub fn with_settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The global policy from allowlist entries as written; the first malformed entry is the
    /// error. (A config validator wanting every problem parses each entry as a [`Rule`].)
    pub fn parse<I, S>(allow: I) -> Result<Self, RuleError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let allow = allow
            .into_iter()
            .map(|entry| entry.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(Self::new(allow))
    }

    /// The policy for the clients of server `server`: this allowlist, plus that server's
    /// `allow_private_network` switch.
    #[must_use]
    pub fn for_server(&self, server: &str, allow_private_network: bool) -> Self {
        Policy {
            allow: self.allow.clone(),
            allow_private_network,
            server: Some(server.to_owned()),
            settings: self.settings.clone(),
        }
    }

    pub fn allow(&self) -> &[Rule] {
        &self.allow
    }

    pub fn allows_private_network(&self) -> bool {
        self.allow_private_network
    }

    /// Whether `ip`, which the name `host` resolved to, may be connected to: the resolver's
    /// judgement (see the type's docs for ports).
    pub fn check_address(&self, host: &str, ip: IpAddr) -> Result<(), Refusal> {
        let name = normalize_name(host);
        match self.judge(ip, Some(&name), None) {
            Judgement::Admitted => Ok(()),
            Judgement::Refused(blocked) | Judgement::OtherPorts(blocked, _) => Err(Refusal::new(
                None,
                &self.settings,
                Reason::Address {
                    host: name.clone(),
                    ip,
                    blocked,
                },
                self.address_remedy(&name, ip, blocked),
            )),
        }
    }

    fn judge(&self, ip: IpAddr, name: Option<&str>, port: Option<u16>) -> Judgement {
        let Some(blocked) = classify(ip) else {
            return Judgement::Admitted;
        };
        if blocked.is_never_allowed() {
            return Judgement::Refused(blocked);
        }
        let mut other_ports = Vec::new();
        let address_rules = self.allow.iter().filter(|rule| {
            if blocked == Blocked::CloudMetadata {
                rule.is_exactly(ip)
            } else {
                rule.contains(ip)
            }
        });
        for rule in address_rules {
            match (rule.port(), port) {
                (None, _) => return Judgement::Admitted,
                (Some(wanted), Some(port)) if wanted == port => return Judgement::Admitted,
                (Some(wanted), Some(_)) => other_ports.push(wanted),
                (Some(_), None) => {}
            }
        }
        if blocked != Blocked::CloudMetadata
            && let Some(name) = name
            && self.allow.iter().any(|rule| rule.matches_name(name))
        {
            return Judgement::Admitted;
        }
        if blocked.is_private_network() && self.allow_private_network {
            return Judgement::Admitted;
        }
        if other_ports.is_empty() {
            Judgement::Refused(blocked)
        } else {
            Judgement::OtherPorts(blocked, other_ports)
        }
    }

    /// The rules naming `name`: all of them allow `port`, some do, or none names it.
    fn name_match(&self, name: &str, port: u16) -> NameMatch {
        let mut other_ports = Vec::new();
        for rule in self.allow.iter().filter(|rule| rule.matches_name(name)) {
            match rule.port() {
                None => return NameMatch::Allowed,
                Some(wanted) if wanted == port => return NameMatch::Allowed,
                Some(wanted) => other_ports.push(wanted),
            }
        }
        if other_ports.is_empty() {
            NameMatch::Unnamed
        } else {
            NameMatch::OtherPorts(other_ports)
        }
    }

    fn address_remedy(&self, host: &str, ip: IpAddr, blocked: Blocked) -> Remedy {
        match blocked {
            Blocked::Unspecified => Remedy {
                note: Some(
                    "it is never a destination: for this machine use localhost or 127.0.0.1",
                ),
                ..Remedy::default()
            },
            _ if blocked.is_never_allowed() => Remedy {
                note: Some("it is never a destination"),
                ..Remedy::default()
            },
            Blocked::CloudMetadata => Remedy {
                allow: Some(ip.to_canonical().to_string()),
                note: Some(
                    "only an entry naming that exact address allows a cloud metadata endpoint",
                ),
                ..Remedy::default()
            },
            _ => Remedy {
                allow: Some(host.to_owned()),
                private_network_server: self
                    .private_network_suggestion(blocked.is_private_network()),
                ..Remedy::default()
            },
        }
    }

    /// The server to suggest `allow_private_network = true` on, when that would help and is
    /// not already set.
    fn private_network_suggestion(&self, would_help: bool) -> Option<String> {
        if would_help && !self.allow_private_network {
            self.server.clone()
        } else {
            None
        }
    }
}

/// Whether `url` may be requested under `policy`. Call it on every URL before the first
/// request to it: configured URLs when connecting, and every URL learned at run time (OAuth
/// metadata, token and registration endpoints, JWKS, an SSE `endpoint` event). Redirects are
/// checked by the guarded client itself.
///
/// It refuses non-http(s) schemes, userinfo, plain http to a host not allowed it (see the
/// [`Policy`] docs), a host named by the allowlist only on other ports, and IP literals that are
/// not public and not admitted. A host name passes here and is judged again at connection, on
/// the addresses it resolves to. IP literals must be caught here: reqwest connects to them
/// without asking any resolver.
pub fn check_url(url: &Url, policy: &Policy) -> Result<(), Refusal> {
    let refuse = |reason: Reason, remedy: Remedy| {
        Err(Refusal::new(Some(url), &policy.settings, reason, remedy))
    };
    let https = match url.scheme() {
        "https" => true,
        "http" => false,
        scheme => {
            return refuse(
                Reason::Scheme {
                    scheme: scheme.to_owned(),
                },
                Remedy {
                    note: Some(
                        "only https, and http to hosts named in [network] allow, are fetched",
                    ),
                    ..Remedy::default()
                },
            );
        }
    };
    if !url.username().is_empty() || url.password().is_some() {
        return refuse(
            Reason::Credentials,
            Remedy {
                note: Some("give credentials through the auth or headers settings instead"),
                ..Remedy::default()
            },
        );
    }
    let Some(host) = url.host() else {
        return refuse(Reason::NoHost, Remedy::default());
    };
    let port = url
        .port_or_known_default()
        .unwrap_or(if https { 443 } else { 80 });
    let plain_http = |host: String, local: bool| {
        let remedy = Remedy {
            https: true,
            allow: Some(host.clone()),
            private_network_server: policy.private_network_suggestion(local),
            note: None,
        };
        refuse(Reason::PlainHttp { host }, remedy)
    };
    match host {
        Host::Domain(name) => {
            let name = normalize_name(name);
            match policy.name_match(&name, port) {
                NameMatch::Allowed => Ok(()),
                NameMatch::OtherPorts(allowed) => refuse(
                    Reason::Port {
                        host: name.clone(),
                        port,
                        allowed,
                    },
                    Remedy {
                        allow: Some(format!("{name}:{port}")),
                        ..Remedy::default()
                    },
                ),
                NameMatch::Unnamed if https => Ok(()),
                NameMatch::Unnamed if policy.allow_private_network && is_local_name(&name) => {
                    Ok(())
                }
                NameMatch::Unnamed => {
                    let local = is_local_name(&name);
                    plain_http(name, local)
                }
            }
        }
        Host::Ipv4(ip) => check_ip_literal(url, policy, IpAddr::V4(ip), port, https),
        Host::Ipv6(ip) => check_ip_literal(url, policy, IpAddr::V6(ip), port, https),
    }
}

fn check_ip_literal(
    url: &Url,
    policy: &Policy,
    ip: IpAddr,
    port: u16,
    https: bool,
) -> Result<(), Refusal> {
    let refuse = |reason: Reason, remedy: Remedy| {
        Err(Refusal::new(Some(url), &policy.settings, reason, remedy))
    };
    let host = ip.to_canonical().to_string();
    let allowed_by_rule = policy
        .allow
        .iter()
        .any(|rule| rule.contains(ip) && rule.port().is_none_or(|wanted| wanted == port));
    match policy.judge(ip, None, Some(port)) {
        Judgement::Refused(blocked) => refuse(
            Reason::Address {
                host: ip.to_string(),
                ip,
                blocked,
            },
            policy.address_remedy(&host, ip, blocked),
        ),
        Judgement::OtherPorts(_, allowed) => refuse(
            Reason::Port {
                host: host.clone(),
                port,
                allowed,
            },
            Remedy {
                allow: Some(match ip.to_canonical() {
                    IpAddr::V4(_) => format!("{host}:{port}"),
                    IpAddr::V6(_) => format!("[{host}]:{port}"),
                }),
                ..Remedy::default()
            },
        ),
        // A public address needs https unless an entry names it; an admitted non-public one
        // was named by an entry or the server's switch, and http to it stays on that network.
        Judgement::Admitted if https || allowed_by_rule || classify(ip).is_some() => Ok(()),
        Judgement::Admitted => refuse(
            Reason::PlainHttp { host: host.clone() },
            Remedy {
                https: true,
                allow: Some(host),
                ..Remedy::default()
            },
        ),
    }
}

/// Names that are local by construction, so plain http to them stays on the operator's
/// network: RFC 6761 `localhost`, single-label names (docker-compose services, Kubernetes
/// short names, hosts found through the search domain), mDNS `.local` (RFC 6762), ICANN's
/// private-use `.internal`, the de facto `.lan`, and `.home.arpa` (RFC 8375).
fn is_local_name(name: &str) -> bool {
    const LOCAL_SUFFIXES: [&str; 5] = [".localhost", ".local", ".internal", ".lan", ".home.arpa"];
    name == "localhost" || !name.contains('.') || LOCAL_SUFFIXES.iter().any(|s| name.ends_with(s))
}

enum Judgement {
    Admitted,
    Refused(Blocked),
    /// Refused, but an entry with another port contains the address.
    OtherPorts(Blocked, Vec<u16>),
}

enum NameMatch {
    Allowed,
    OtherPorts(Vec<u16>),
    Unnamed,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str]) -> Policy {
        Policy::parse(allow).expect("test rules parse")
    }

    fn url(text: &str) -> Url {
        Url::parse(text).expect("test URLs parse")
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("test addresses parse")
    }

    /// Each row: a policy, a URL, and `Ok` or the exact message a user would see.
    #[track_caller]
    fn check(rows: &[(&Policy, &str, Result<(), &str>)]) {
        let mut wrong = Vec::new();
        for (policy, text, expected) in rows {
            let actual = check_url(&url(text), policy).map_err(|refusal| refusal.to_string());
            if actual.as_ref().map_err(String::as_str) != expected.as_ref().map_err(|e| *e) {
                wrong.push(format!(
                    "{text} under {policy:?}\n  expected {expected:?}\n  got      {actual:?}"
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn public_https_urls_pass_and_everything_else_needs_a_reason() {
        let none = Policy::default();
        check(&[
            (&none, "https://mcp.example.com/mcp", Ok(())),
            (&none, "https://8.8.8.8/x", Ok(())),
            (&none, "https://[2606:4700:4700::1111]/x", Ok(())),
            (&none, "https://[::ffff:8.8.8.8]/x", Ok(())),
            (
                &none,
                "http://mcp.example.com/mcp?token=secret",
                Err(
                    "refused http://mcp.example.com: plain http is allowed only for hosts named in [network] allow; to allow it, use https, or add \"mcp.example.com\" to [network] allow in mcpgw.toml",
                ),
            ),
            (
                &none,
                "http://8.8.8.8:8080/",
                Err(
                    "refused http://8.8.8.8:8080: plain http is allowed only for hosts named in [network] allow; to allow it, use https, or add \"8.8.8.8\" to [network] allow in mcpgw.toml",
                ),
            ),
            (
                &none,
                "ftp://example.com/file",
                Err(
                    "refused ftp://example.com: the scheme \"ftp\" is not allowed; only https, and http to hosts named in [network] allow, are fetched",
                ),
            ),
            (
                &none,
                "file:///etc/passwd",
                Err(
                    "refused a file URL: the scheme \"file\" is not allowed; only https, and http to hosts named in [network] allow, are fetched",
                ),
            ),
            (
                &none,
                "https://user:hunter2@mcp.example.com/mcp",
                Err(
                    "refused https://mcp.example.com: URLs may not carry a user name or password; give credentials through the auth or headers settings instead",
                ),
            ),
            (
                &none,
                "https://token@mcp.example.com/mcp",
                Err(
                    "refused https://mcp.example.com: URLs may not carry a user name or password; give credentials through the auth or headers settings instead",
                ),
            ),
        ]);
    }

    #[test]
    fn ip_literals_are_judged_before_any_request() {
        let none = Policy::default();
        let server = Policy::default().for_server("dev", false);
        check(&[
            (
                &server,
                "http://127.0.0.1:3000/mcp",
                Err(
                    "refused http://127.0.0.1:3000: 127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'",
                ),
            ),
            (
                &none,
                "https://10.1.2.3/",
                Err(
                    "refused https://10.1.2.3: 10.1.2.3 is not a public address (private network); to allow it, add \"10.1.2.3\" to [network] allow in mcpgw.toml",
                ),
            ),
            (
                &server,
                "http://[::1]:3000/mcp",
                Err(
                    "refused http://[::1]:3000: ::1 is not a public address (loopback); to allow it, add \"::1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'",
                ),
            ),
            (
                &server,
                "http://[::ffff:127.0.0.1]:3000/",
                Err(
                    "refused http://[::ffff:7f00:1]:3000: ::ffff:127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'",
                ),
            ),
            (
                &server,
                "https://169.254.169.254/latest/meta-data/",
                Err(
                    "refused https://169.254.169.254: 169.254.169.254 is not a public address (cloud metadata endpoint); to allow it, add \"169.254.169.254\" to [network] allow in mcpgw.toml; only an entry naming that exact address allows a cloud metadata endpoint",
                ),
            ),
            (
                &server,
                "https://[64:ff9b::a9fe:a9fe]/",
                Err(
                    "refused https://[64:ff9b::a9fe:a9fe]: 64:ff9b::a9fe:a9fe is not a public address (cloud metadata endpoint); to allow it, add \"64:ff9b::a9fe:a9fe\" to [network] allow in mcpgw.toml; only an entry naming that exact address allows a cloud metadata endpoint",
                ),
            ),
            (
                &server,
                "http://0.0.0.0:3000/mcp",
                Err(
                    "refused http://0.0.0.0:3000: 0.0.0.0 is not a public address (unspecified); it is never a destination: for this machine use localhost or 127.0.0.1",
                ),
            ),
            (
                &server,
                "https://169.254.10.1/",
                Err(
                    "refused https://169.254.10.1: 169.254.10.1 is not a public address (link-local); to allow it, add \"169.254.10.1\" to [network] allow in mcpgw.toml",
                ),
            ),
            (
                &server,
                "https://0x7f.1/",
                Err(
                    "refused https://127.0.0.1: 127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'",
                ),
            ),
            (
                &server,
                "https://2130706433/",
                Err(
                    "refused https://127.0.0.1: 127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'",
                ),
            ),
            (
                &server,
                "https://224.0.0.1/",
                Err(
                    "refused https://224.0.0.1: 224.0.0.1 is not a public address (multicast); it is never a destination",
                ),
            ),
        ]);
    }

    #[test]
    fn plain_http_to_localhost_needs_one_line() {
        let none = Policy::default().for_server("dev", false);
        let named = policy(&["localhost"]).for_server("dev", false);
        let switched = Policy::default().for_server("dev", true);
        let by_address = policy(&["127.0.0.1"]).for_server("dev", false);
        check(&[
            (
                &none,
                "http://localhost:3000/mcp",
                Err(
                    "refused http://localhost:3000: plain http is allowed only for hosts named in [network] allow; to allow it, use https, or add \"localhost\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'",
                ),
            ),
            (&named, "http://localhost:3000/mcp", Ok(())),
            (&named, "http://LOCALHOST.:3000/mcp", Ok(())),
            (&switched, "http://localhost:3000/mcp", Ok(())),
            (&switched, "http://127.0.0.1:3000/mcp", Ok(())),
            (&switched, "http://[::1]:3000/mcp", Ok(())),
            (&switched, "http://mcp-server:8080/mcp", Ok(())),
            (&switched, "http://api.localhost/mcp", Ok(())),
            (&switched, "http://nas.local/mcp", Ok(())),
            (&switched, "http://host.docker.internal:3000/mcp", Ok(())),
            (&switched, "http://router.home.arpa/mcp", Ok(())),
            (&by_address, "http://127.0.0.1:3000/mcp", Ok(())),
            // The address entry does not name the host: http needs the name (or https, and
            // then the resolver admits 127.0.0.1 through the entry).
            (
                &by_address,
                "http://localhost:3000/mcp",
                Err(
                    "refused http://localhost:3000: plain http is allowed only for hosts named in [network] allow; to allow it, use https, or add \"localhost\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'",
                ),
            ),
            (&by_address, "https://localhost:3000/mcp", Ok(())),
            // The switch admits private addresses, not clear text to arbitrary names.
            (
                &switched,
                "http://mcp.corp.example/mcp",
                Err(
                    "refused http://mcp.corp.example: plain http is allowed only for hosts named in [network] allow; to allow it, use https, or add \"mcp.corp.example\" to [network] allow in mcpgw.toml",
                ),
            ),
            (&switched, "https://mcp.corp.example/mcp", Ok(())),
        ]);
    }

    #[test]
    fn entries_with_ports_allow_only_those_ports() {
        let p = policy(&["localhost:3000", "127.0.0.1:3000", "*.corp.example:8443"]);
        check(&[
            (&p, "http://localhost:3000/mcp", Ok(())),
            (
                &p,
                "http://localhost:3001/mcp",
                Err(
                    "refused http://localhost:3001: localhost is allowed on port 3000 only, not 3001; to allow it, add \"localhost:3001\" to [network] allow in mcpgw.toml",
                ),
            ),
            (
                &p,
                "https://localhost/mcp",
                Err(
                    "refused https://localhost: localhost is allowed on port 3000 only, not 443; to allow it, add \"localhost:443\" to [network] allow in mcpgw.toml",
                ),
            ),
            (&p, "http://127.0.0.1:3000/mcp", Ok(())),
            (
                &p,
                "http://127.0.0.1:22/",
                Err(
                    "refused http://127.0.0.1:22: 127.0.0.1 is allowed on port 3000 only, not 22; to allow it, add \"127.0.0.1:22\" to [network] allow in mcpgw.toml",
                ),
            ),
            (&p, "http://a.corp.example:8443/", Ok(())),
            (
                &p,
                "https://a.corp.example/",
                Err(
                    "refused https://a.corp.example: a.corp.example is allowed on port 8443 only, not 443; to allow it, add \"a.corp.example:443\" to [network] allow in mcpgw.toml",
                ),
            ),
        ]);
    }

    #[test]
    fn wildcard_and_cidr_entries_admit_their_hosts() {
        let p = policy(&["*.corp.example", "10.0.0.0/8", "fd00::/8"]);
        check(&[
            (&p, "http://mcp.corp.example/mcp", Ok(())),
            (&p, "http://A.B.Corp.Example./mcp", Ok(())),
            (
                &p,
                "http://corp.example/mcp",
                Err(
                    "refused http://corp.example: plain http is allowed only for hosts named in [network] allow; to allow it, use https, or add \"corp.example\" to [network] allow in mcpgw.toml",
                ),
            ),
            (&p, "http://10.20.30.40:8080/", Ok(())),
            (&p, "http://[fd00::5]/", Ok(())),
            (&p, "https://[::ffff:10.0.0.1]/", Ok(())),
            (
                &p,
                "https://192.168.0.1/",
                Err(
                    "refused https://192.168.0.1: 192.168.0.1 is not a public address (private network); to allow it, add \"192.168.0.1\" to [network] allow in mcpgw.toml",
                ),
            ),
        ]);
    }

    #[test]
    fn cloud_metadata_needs_its_exact_address() {
        let wide = policy(&["169.254.0.0/16", "0.0.0.0/0", "metadata.google.internal"]);
        let exact = policy(&["169.254.169.254"]);
        assert_eq!(
            check_url(&url("http://169.254.169.254/"), &wide).map_err(|r| r.blocked()),
            Err(Some(Blocked::CloudMetadata))
        );
        assert!(
            wide.check_address("metadata.google.internal", ip("169.254.169.254"))
                .is_err()
        );
        assert_eq!(check_url(&url("http://169.254.169.254/"), &exact), Ok(()));
        assert_eq!(
            exact.check_address("metadata.google.internal", ip("169.254.169.254")),
            Ok(())
        );
        // The wide block still admits the rest of link-local.
        assert_eq!(check_url(&url("http://169.254.1.1/"), &wide), Ok(()));
    }

    #[test]
    fn resolved_addresses_are_judged_by_class_name_and_block() {
        let none = Policy::default().for_server("dev", false);
        let refused = none
            .check_address("localhost", ip("127.0.0.1"))
            .expect_err("loopback is refused");
        assert_eq!(
            refused.to_string(),
            "refused to connect: localhost resolves to 127.0.0.1 (loopback); to allow it, add \"localhost\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'"
        );
        assert_eq!(
            refused.at(&url("http://localhost:3000/mcp")).to_string(),
            "refused http://localhost:3000: localhost resolves to 127.0.0.1 (loopback); to allow it, add \"localhost\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'"
        );
        assert_eq!(
            none.check_address("example.com", ip("93.184.215.14")),
            Ok(())
        );
        assert_eq!(
            none.check_address("rebind.example", ip("::ffff:10.0.0.1"))
                .map_err(|r| r.blocked()),
            Err(Some(Blocked::Private))
        );

        let named = policy(&["LocalHost", "*.corp.example"]);
        assert_eq!(named.check_address("localhost.", ip("127.0.0.1")), Ok(()));
        assert_eq!(named.check_address("localhost", ip("::1")), Ok(()));
        assert_eq!(
            named.check_address("a.corp.example", ip("169.254.3.3")),
            Ok(())
        );
        assert!(named.check_address("localhost", ip("0.0.0.0")).is_err());
        assert!(named.check_address("other", ip("127.0.0.1")).is_err());

        // A port on a host-name entry is checked on the URL; the resolver admits the name.
        let name_port = policy(&["localhost:3000"]);
        assert_eq!(
            name_port.check_address("localhost", ip("127.0.0.1")),
            Ok(())
        );
        // A port on an address entry cannot be checked by the resolver, so it does not count.
        let address_port = policy(&["127.0.0.1:3000"]);
        assert!(
            address_port
                .check_address("localhost", ip("127.0.0.1"))
                .is_err()
        );

        let switched = Policy::default().for_server("dev", true);
        for private in [
            "127.0.0.1",
            "::1",
            "10.0.0.1",
            "100.64.1.1",
            "fd7a:115c:a1e0::1",
        ] {
            assert_eq!(
                switched.check_address("h", ip(private)),
                Ok(()),
                "{private}"
            );
        }
        for special in [
            "169.254.1.1",
            "169.254.169.254",
            "fe80::1",
            "192.0.2.1",
            "0.0.0.0",
        ] {
            assert!(
                switched.check_address("h", ip(special)).is_err(),
                "{special}"
            );
        }
    }

    /// The point of the messages: whatever they suggest works. Each refused case is retried
    /// with the suggested entry added, and with the switch set when suggested.
    #[test]
    fn every_suggested_remedy_allows_the_request() {
        let base = Policy::default().for_server("dev", false);
        let ported = policy(&["localhost:3000", "127.0.0.1:3000"]).for_server("dev", false);
        let cases: &[(&Policy, &str)] = &[
            (&base, "http://localhost:3000/mcp"),
            (&base, "http://mcp.example.com/mcp"),
            (&base, "http://127.0.0.1:3000/mcp"),
            (&base, "http://[::1]:3000/mcp"),
            (&base, "https://10.1.2.3/"),
            (&base, "https://100.100.1.1/"),
            (&base, "http://169.254.169.254/latest"),
            (&base, "https://169.254.8.8/"),
            (&base, "https://[fe80::1]/"),
            (&base, "http://[::ffff:10.0.0.1]/"),
            (&base, "http://8.8.8.8/"),
            (&ported, "http://localhost:4000/"),
            (&ported, "http://127.0.0.1:4000/"),
        ];
        for &(policy, text) in cases {
            let url = url(text);
            let refusal = check_url(&url, policy).expect_err(text);
            assert!(
                refusal.suggested_allow().is_some() || refusal.suggests_private_network(),
                "{text}: no remedy in {refusal}"
            );
            if let Some(entry) = refusal.suggested_allow() {
                let mut allow = policy.allow().to_vec();
                allow.push(entry.parse().expect("suggested entries parse"));
                let fixed = Policy::new(allow).for_server("dev", false);
                assert_eq!(check_url(&url, &fixed), Ok(()), "{text} with \"{entry}\"");
            }
            if refusal.suggests_private_network() {
                let fixed = policy.for_server("dev", true);
                assert_eq!(check_url(&url, &fixed), Ok(()), "{text} with the switch");
            }
        }
    }

    #[test]
    fn global_policies_do_not_suggest_the_per_server_switch() {
        let refusal = check_url(&url("http://localhost:3000/"), &Policy::default())
            .expect_err("http to an unnamed host");
        assert!(!refusal.suggests_private_network());
        assert!(!refusal.to_string().contains("allow_private_network"));
    }
}
