//! Hostile URLs on the path mcpgw takes (check the URL, then request it through the guarded
//! client): every spelling of loopback, private, link-local and metadata addresses, names that
//! resolve to this machine, userinfo tricks, other schemes and redirects is refused, and the
//! allowlisted servers are still reached.

// Cargo builds every file in tests/ as a test target. `network` gets `required-features =
// ["client"]` in Cargo.toml; this file gates itself instead, so that building the crate with
// `--no-default-features` still compiles its tests.
#![cfg(feature = "client")]

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::serve::ListenerExt;
use netguard::{Policy, Refusal, check_url, guarded_client_builder};
use url::Url;

use Tier::{Dev, Strict, Switched};

#[tokio::test]
async fn hostile_urls_are_refused_and_allowlisted_ones_reached() {
    let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let hello = Server::start(v4, None).await.expect("bind 127.0.0.1");
    // Not allowlisted anywhere: a redirect to it must never arrive.
    let inside = Server::start(v4, None).await.expect("bind 127.0.0.1");
    let hop = Server::start(v4, None).await.expect("bind 127.0.0.1");
    // Only the targets of the IPv6 rows. Without an IPv6 loopback (Docker's default) those
    // rows still run against a port nothing listens on: an admitted request then fails to
    // connect, which is not a refusal, so the row still fails.
    let hello6 = match Server::start(IpAddr::V6(Ipv6Addr::LOCALHOST), None).await {
        Ok(server) => Some(server),
        Err(error) => {
            eprintln!("no IPv6 loopback listener ({error}): IPv6 rows target a closed port");
            None
        }
    };
    let p = hello.addr.port();
    let q = inside.addr.port();
    let p6 = hello6.as_ref().map_or(q, |server| server.addr.port());

    let hostile_hops = [
        format!("http://127.0.0.1:{q}/secret"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("http://[::1]:{p6}/secret"),
        format!("http://0x7f000001:{q}/secret"),
    ];
    let mut fronts = Vec::new();
    for to in &hostile_hops {
        fronts.push(Server::start(v4, Some(to.clone())).await.expect("bind"));
    }
    let to_hop = Server::start(v4, Some(format!("http://127.0.0.1:{}/ok", hop.addr.port())))
        .await
        .expect("bind 127.0.0.1");
    let to_name = Server::start(v4, Some(format!("http://localhost:{p}/ok")))
        .await
        .expect("bind 127.0.0.1");

    // The developer's allowlist: the servers by address and port, and localhost on one port.
    let mut allow = vec![format!("localhost:{p}"), format!("127.0.0.1:{p}")];
    for server in fronts.iter().chain([&to_hop, &to_name, &hop]) {
        allow.push(server.addr.to_string());
    }
    let policies = Policies {
        strict: Policy::default().for_server("dev", false),
        switched: Policy::default().for_server("dev", true),
        dev: Policy::parse(&allow)
            .expect("rules parse")
            .for_server("dev", false),
    };

    const LOOPBACK: &str = "127.0.0.1 is not a public address (loopback)";
    const METADATA: &str = "169.254.169.254 is not a public address (cloud metadata endpoint)";
    const PLAIN_HTTP: &str = "plain http is allowed only for hosts named in [network] allow";
    let mut rows = vec![
        // IPv4 spellings (WHATWG host parsing turns them all into dotted quads), aimed at the
        // live server so that a wrongly admitted one would be reached.
        Row::refused(Strict, format!("http://2130706433:{p}/"), &[LOOPBACK]),
        Row::refused(Strict, format!("http://0177.0.0.1:{p}/"), &[LOOPBACK]),
        Row::refused(Strict, format!("http://0x7f000001:{p}/"), &[LOOPBACK]),
        Row::refused(Strict, format!("http://0x7f.0.0.1:{p}/"), &[LOOPBACK]),
        Row::refused(Strict, format!("http://0177.0x0.1:{p}/"), &[LOOPBACK]),
        Row::refused(Strict, format!("http://127.1:{p}/"), &[LOOPBACK]),
        Row::refused(Strict, format!("http://017700000001:{p}/"), &[LOOPBACK]),
        Row::refused(Strict, format!("http://127.0.0.1.:{p}/"), &[LOOPBACK]),
        Row::refused(Strict, format!("http://１２７.０.０.１:{p}/"), &[LOOPBACK]),
        Row::refused(Strict, "http://10.0.0.1/".into(), &["(private network)"]),
        Row::refused(Strict, "http://192.168.1.1/".into(), &["(private network)"]),
        Row::refused(Strict, "http://172.16.0.1/".into(), &["(private network)"]),
        Row::refused(
            Strict,
            "http://100.64.0.1/".into(),
            &["(carrier-grade NAT)"],
        ),
        // Linux connects 0.0.0.0 and :: to this machine; the private-network switch does not
        // admit them, nor metadata endpoints, nor link-local.
        Row::refused(Switched, format!("http://0.0.0.0:{p}/"), &["(unspecified)"]),
        Row::refused(Switched, format!("http://0:{p}/"), &["(unspecified)"]),
        Row::refused(Switched, "http://0xa9fea9fe/".into(), &[METADATA]),
        Row::refused(Switched, "http://2852039166/".into(), &[METADATA]),
        Row::refused(Switched, "http://0251.0376.0251.0376/".into(), &[METADATA]),
        Row::refused(
            Switched,
            "http://100.100.100.200/".into(),
            &["(cloud metadata endpoint)"],
        ),
        Row::refused(Switched, "http://169.254.1.1/".into(), &["(link-local)"]),
        // IPv6
        Row::refused(
            Strict,
            format!("http://[::1]:{p6}/"),
            &["::1 is not a public address (loopback)"],
        ),
        Row::refused(
            Strict,
            format!("http://[0:0:0:0:0:0:0:1]:{p6}/"),
            &["::1 is not a public address (loopback)"],
        ),
        Row::refused(
            Strict,
            format!("http://[::ffff:127.0.0.1]:{p}/"),
            &["::ffff:127.0.0.1 is not a public address (loopback)"],
        ),
        Row::refused(
            Strict,
            format!("http://[::ffff:7f00:1]:{p}/"),
            &["::ffff:127.0.0.1 is not a public address (loopback)"],
        ),
        Row::refused(
            Strict,
            format!("http://[64:ff9b::7f00:1]:{p}/"),
            &["64:ff9b::7f00:1 is not a public address (loopback)"],
        ),
        // IPv4-compatible (deprecated), displayed as plain IPv6.
        Row::refused(
            Strict,
            format!("http://[::127.0.0.1]:{p}/"),
            &["::7f00:1 is not a public address (loopback)"],
        ),
        Row::refused(
            Strict,
            "http://[2002:7f00:1::]/".into(),
            &["2002:7f00:1:: is not a public address (loopback)"],
        ),
        Row::refused(
            Strict,
            "http://[::ffff:0:7f00:1]/".into(),
            &["::ffff:0:7f00:1 is not a public address (reserved)"],
        ),
        Row::refused(
            Switched,
            format!("http://[::]:{p6}/"),
            &[":: is not a public address (unspecified)"],
        ),
        Row::refused(
            Switched,
            "http://[::ffff:169.254.169.254]/".into(),
            &["::ffff:169.254.169.254 is not a public address (cloud metadata endpoint)"],
        ),
        Row::refused(
            Switched,
            "http://[fd00:ec2::254]/".into(),
            &["fd00:ec2::254 is not a public address (cloud metadata endpoint)"],
        ),
        Row::refused(
            Switched,
            "http://[fe80::1]/".into(),
            &["fe80::1 is not a public address (link-local)"],
        ),
        Row::refused(
            Strict,
            "http://[fc00::1]/".into(),
            &["fc00::1 is not a public address (private network)"],
        ),
        // Userinfo: the credentials are refused even on the allowlisted server, and a
        // fragment's "@" does not move the host.
        Row::refused(
            Dev,
            format!("http://example.com@127.0.0.1:{p}/"),
            &["URLs may not carry a user name or password"],
        ),
        Row::refused(
            Strict,
            format!("http://127.0.0.1:{p}#@example.com/"),
            &[LOOPBACK],
        ),
        // Other schemes: check_url refuses them before the client is involved.
        Row::refused(
            Strict,
            "file:///etc/passwd".into(),
            &["the scheme \"file\""],
        ),
        Row::refused(
            Strict,
            format!("gopher://127.0.0.1:{p}/"),
            &["the scheme \"gopher\""],
        ),
        Row::refused(Strict, "ftp://10.0.0.1/".into(), &["the scheme \"ftp\""]),
        // Clear text to public hosts, refused before any resolution; the switch does not
        // allow it either.
        Row::refused(Strict, "http://mcp.example.com/mcp".into(), &[PLAIN_HTTP]),
        Row::refused(Strict, "http://8.8.8.8/".into(), &[PLAIN_HTTP]),
        Row::refused(Switched, "http://mcp.corp.example/".into(), &[PLAIN_HTTP]),
        // The allowlisted hosts on ports the allowlist does not name.
        Row::refused(
            Dev,
            format!("http://127.0.0.1:{q}/"),
            &["127.0.0.1 is allowed on ports", &format!("only, not {q}")],
        ),
        Row::refused(
            Dev,
            format!("http://localhost:{q}/"),
            &[&format!("localhost is allowed on port {p} only, not {q}")],
        ),
    ];

    // Redirects from allowlisted servers: the refusal names the hop, which sees no request.
    let other_port = format!("refused http://127.0.0.1:{q}: 127.0.0.1 is allowed on ports");
    let hop_says = [
        other_port.as_str(),
        METADATA,
        "::1 is not a public address (loopback)",
        other_port.as_str(),
    ];
    for (front, says) in fronts.iter().zip(hop_says) {
        let mut row = Row::refused(Dev, format!("http://{}/mcp", front.addr), &[says]);
        row.reaches = vec![front.addr];
        rows.push(row);
    }

    // Names that resolve to this machine, refused by the resolver (https, so check_url lets
    // them through to it).
    for name in loopback_names() {
        if let Some(row) = name_row(&name, p).await {
            rows.push(row);
        }
    }

    // Accepted: the allowlisted servers by address (in any spelling) and by name, and
    // redirects between allowlisted servers.
    rows.extend([
        Row::fetched(format!("http://127.0.0.1:{p}/"), vec![hello.addr]),
        Row::fetched(format!("http://localhost:{p}/"), vec![hello.addr]),
        Row::fetched(format!("http://0x7f000001:{p}/"), vec![hello.addr]),
        Row::fetched(
            format!("http://{}/", to_hop.addr),
            vec![to_hop.addr, hop.addr],
        ),
        Row::fetched(
            format!("http://{}/", to_name.addr),
            vec![to_name.addr, hello.addr],
        ),
    ]);

    let mut servers: Vec<&Server> = vec![&hello, &inside, &hop, &to_hop, &to_name];
    servers.extend(&fronts);
    servers.extend(&hello6);
    let mut wrong = Vec::new();
    for row in &rows {
        if let Err(problem) = row.run(&policies, &servers).await {
            wrong.push(format!("{} under {:?}: {problem}", row.url, row.tier));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    let accepted = rows
        .iter()
        .filter(|row| row.expect == Expect::Fetched)
        .count();
    assert!(
        rows.len() - accepted >= 30,
        "{} hostile rows",
        rows.len() - accepted
    );
    assert_eq!(accepted, 5);
    assert_eq!(inside.connections(), 0);
}

/// The three policies rows run under.
#[derive(Clone, Copy, Debug)]
enum Tier {
    /// A server with nothing allowlisted and `allow_private_network = false`.
    Strict,
    /// A server with `allow_private_network = true`.
    Switched,
    /// A server whose allowlist names the loopback test servers, by address and port.
    Dev,
}

struct Policies {
    strict: Policy,
    switched: Policy,
    dev: Policy,
}

impl Policies {
    fn get(&self, tier: Tier) -> &Policy {
        match tier {
            Strict => &self.strict,
            Switched => &self.switched,
            Dev => &self.dev,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Expect {
    /// Refused by the guard, with a message containing all of these.
    Refused(Vec<String>),
    /// The system resolver has no address for the name: the request fails in DNS.
    Unresolved,
    /// The server's "hello".
    Fetched,
}

struct Row {
    tier: Tier,
    url: String,
    expect: Expect,
    /// The servers that must see exactly one connection; all others must see none.
    reaches: Vec<SocketAddr>,
}

impl Row {
    fn refused(tier: Tier, url: String, says: &[&str]) -> Row {
        let says = says.iter().map(|part| (*part).to_owned()).collect();
        Row {
            tier,
            url,
            expect: Expect::Refused(says),
            reaches: Vec::new(),
        }
    }

    fn fetched(url: String, reaches: Vec<SocketAddr>) -> Row {
        Row {
            tier: Dev,
            url,
            expect: Expect::Fetched,
            reaches,
        }
    }

    async fn run(&self, policies: &Policies, servers: &[&Server]) -> Result<(), String> {
        let before: Vec<usize> = servers.iter().map(|server| server.connections()).collect();
        let outcome = fetch(policies.get(self.tier), &self.url).await;
        let mut problems = Vec::new();
        match (&self.expect, &outcome) {
            (Expect::Refused(says), Outcome::Refused(message)) => {
                let missing: Vec<&String> = says
                    .iter()
                    .filter(|part| !message.contains(part.as_str()))
                    .collect();
                if !missing.is_empty() {
                    problems.push(format!("refused, but without {missing:?}: {message}"));
                }
            }
            (Expect::Unresolved, Outcome::Failed(chain)) if chain.contains("dns error") => {}
            (Expect::Fetched, Outcome::Fetched(body)) if body == "hello" => {}
            (expect, outcome) => problems.push(format!("expected {expect:?}, got {outcome}")),
        }
        for (server, before) in servers.iter().zip(before) {
            let seen = server.connections() - before;
            let expected = usize::from(self.reaches.contains(&server.addr));
            if seen != expected {
                problems.push(format!(
                    "{} saw {seen} connections, not {expected}",
                    server.addr
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// The row for `https://name:port/` under [`Tier::Strict`], by what the system resolver says of
/// `name`: no address, so the request must fail in DNS (`foo.localhost` and `localhost.`
/// with glibc's files and dns); loopback only, so the guard must refuse it. Anything else is
/// no hostile row on this machine, and says so.
async fn name_row(name: &str, port: u16) -> Option<Row> {
    let url = format!("https://{name}:{port}/");
    let expect = match tokio::net::lookup_host((name, 0)).await {
        Err(_) => Expect::Unresolved,
        Ok(addrs) => {
            let ips: Vec<IpAddr> = addrs.map(|addr| addr.ip()).collect();
            if ips.is_empty() || !ips.iter().all(|ip| ip.to_canonical().is_loopback()) {
                eprintln!("skipped {url}: it resolves to {ips:?} here, not to loopback only");
                return None;
            }
            let host = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
            Expect::Refused(vec![
                format!("{host} resolves to "),
                "(loopback)".to_owned(),
            ])
        }
    };
    Some(Row {
        tier: Strict,
        url,
        expect,
        reaches: Vec::new(),
    })
}

/// `localhost` in several spellings (RFC 6761 reserves `*.localhost` too), and every name
/// `/etc/hosts` points at loopback addresses only.
fn loopback_names() -> Vec<String> {
    let mut names: Vec<String> = ["localhost", "LOCALHOST", "localhost.", "foo.localhost"]
        .map(str::to_owned)
        .to_vec();
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut entries: Vec<(String, bool)> = Vec::new();
    for line in hosts.lines() {
        let mut fields = line.split('#').next().unwrap_or("").split_whitespace();
        let Some(Ok(ip)) = fields.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        for name in fields {
            entries.push((name.to_ascii_lowercase(), ip.to_canonical().is_loopback()));
        }
    }
    // A name with any other address in /etc/hosts may be reached there: not hostile.
    let mut loopback: Vec<String> = Vec::new();
    for (name, _) in &entries {
        let only_loopback = entries.iter().all(|(n, lo)| n != name || *lo);
        if only_loopback && !loopback.contains(name) {
            loopback.push(name.clone());
        }
    }
    for name in ["ip6-localhost", "ip6-loopback"] {
        if !loopback.iter().any(|n| n == name) {
            eprintln!("skipped {name}: /etc/hosts has no loopback entry for it");
        }
    }
    for name in loopback {
        let host_is_a_name = Url::parse(&format!("https://{name}/"))
            .is_ok_and(|url| matches!(url.host(), Some(url::Host::Domain(_))));
        if !host_is_a_name {
            eprintln!("skipped {name} from /etc/hosts: not a host name in a URL");
        } else if !names.iter().any(|n| n.eq_ignore_ascii_case(&name)) {
            names.push(name);
        }
    }
    names
}

/// An HTTP server that answers "hello", or 302 to `redirect_to`, and counts TCP connections
/// (not requests: a TLS handshake against it counts too).
struct Server {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
}

impl Server {
    async fn start(ip: IpAddr, redirect_to: Option<String>) -> io::Result<Server> {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = connections.clone();
        let listener = listener.tap_io(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let app = Router::new().fallback(move || {
            let redirect_to = redirect_to.clone();
            async move {
                match redirect_to {
                    Some(to) => (StatusCode::FOUND, [(header::LOCATION, to)]).into_response(),
                    None => "hello".into_response(),
                }
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Server { addr, connections })
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

#[derive(Debug)]
enum Outcome {
    Fetched(String),
    Refused(String),
    /// Neither: the error and its sources.
    Failed(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Fetched(body) => write!(f, "a response: {body:?}"),
            Outcome::Refused(message) => write!(f, "a refusal: {message}"),
            Outcome::Failed(chain) => write!(f, "an error that is not a refusal: {chain}"),
        }
    }
}

/// What a caller does: check the URL, then request it with the guarded client.
async fn fetch(policy: &Policy, text: &str) -> Outcome {
    let url = match Url::parse(text) {
        Ok(url) => url,
        Err(error) => return Outcome::Failed(format!("unparsable: {error}")),
    };
    if let Err(refusal) = check_url(&url, policy) {
        return Outcome::Refused(refusal.to_string());
    }
    // Short timeouts: an admitted row must fail fast, not hang the test.
    let client = guarded_client_builder(Arc::new(policy.clone()))
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client builds");
    let error = match client.get(url.clone()).send().await {
        Ok(response) => match response.text().await {
            Ok(body) => return Outcome::Fetched(body),
            Err(error) => error,
        },
        Err(error) => error,
    };
    match Refusal::find_in(&error) {
        Some(refusal) => Outcome::Refused(refusal.clone().at(&url).to_string()),
        None => Outcome::Failed(chain(&error)),
    }
}

fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(error) = source {
        parts.push(error.to_string());
        source = error.source();
    }
    parts.join(": ")
}
