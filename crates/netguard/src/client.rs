//! The guard inside reqwest: a resolver that judges every address a name resolves to, so the
//! connection is made only to admitted addresses (DNS rebinding to 127.0.0.1 fails at connect),
//! a redirect policy that judges every hop's URL, and the builder that installs both.
//!
//! What reqwest does not let the guard see, and how each gap is closed:
//! - IP-literal URLs: hyper connects to them without calling the resolver. [`crate::check_url`]
//!   must judge every URL before its first request; redirects are judged here.
//! - Proxies: through a proxy the resolver sees only the proxy's name, and the proxy resolves
//!   the target. The builder turns proxies off (including `HTTP(S)_PROXY` from the
//!   environment); a deployment that needs one needs a design for it first.
//! - `ClientBuilder::resolve` / `resolve_to_addrs` overrides are consulted before the resolver:
//!   never use them on a guarded builder. Likewise never replace `.dns_resolver`, and set
//!   `.redirect` only to [`redirect_policy`] or `reqwest::redirect::Policy::none()`.
//!
//! Rejected: a `Proxy::custom` that diverts refused URLs to a sentinel proxy the resolver
//! then refuses would catch IP literals at connect time, but it abuses proxy routing, loses
//! the refusal's message, and breaks if reqwest changes how it consults proxies.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect::{Action, Attempt};

use crate::{Policy, check_url};

/// reqwest's own default limit.
const MAX_REDIRECTS: usize = 10;

/// A client builder with the guard installed for `policy`: the [`GuardedResolver`], a
/// redirect policy that checks every hop and follows at most ten, and no proxy. Every
/// outbound HTTP client in mcpgw starts from this builder.
pub fn guarded_client_builder(policy: Arc<Policy>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver::new(policy.clone())))
        .redirect(redirect_policy(policy, follow_up_to_ten))
}

/// A redirect policy that refuses any hop [`check_url`] refuses (the request fails with the
/// [`crate::Refusal`] as its source) and hands the others to `then`, for callers with their
/// own rule (such as "stay on the configured origin").
pub fn redirect_policy<F>(policy: Arc<Policy>, then: F) -> reqwest::redirect::Policy
where
    F: Fn(Attempt<'_>) -> Action + Send + Sync + 'static,
{
    reqwest::redirect::Policy::custom(move |attempt| match check_url(attempt.url(), &policy) {
        Ok(()) => then(attempt),
        Err(refusal) => {
            tracing::warn!(%refusal, "redirect refused");
            attempt.error(refusal)
        }
    })
}

fn follow_up_to_ten(attempt: Attempt<'_>) -> Action {
    if attempt.previous().len() > MAX_REDIRECTS {
        attempt.error("too many redirects")
    } else {
        attempt.follow()
    }
}

/// The future of a [`Lookup`].
pub type LookupFuture = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

/// Turns a host name into addresses. The system's by default; tests substitute their own
/// to play a rebinding DNS server. Whatever it returns is judged before use.
pub type Lookup = Arc<dyn Fn(&str) -> LookupFuture + Send + Sync>;

/// A `reqwest` resolver that resolves through a [`Lookup`] and passes on only the addresses
/// the policy admits for that name. When it admits none the resolution fails with the
/// [`crate::Refusal`] for the first refused address; when it admits some, the others are
/// dropped with a warning (a name answering with both public and private addresses is either
/// misconfigured or an attack, and the public ones are all that may be reached either way).
pub struct GuardedResolver {
    policy: Arc<Policy>,
    lookup: Lookup,
}

impl GuardedResolver {
    /// Resolving through the system resolver (`getaddrinfo`, on tokio's blocking pool: what
    /// reqwest's default resolver does too).
    pub fn new(policy: Arc<Policy>) -> Self {
        Self::with_lookup(policy, Arc::new(system_lookup))
    }

    pub fn with_lookup(policy: Arc<Policy>, lookup: Lookup) -> Self {
        GuardedResolver { policy, lookup }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let policy = self.policy.clone();
        let lookup = (self.lookup)(&host);
        Box::pin(async move {
            let mut admitted = Vec::new();
            let mut refused = Vec::new();
            for ip in lookup.await? {
                match policy.check_address(&host, ip) {
                    Ok(()) => admitted.push(SocketAddr::new(ip, 0)),
                    Err(refusal) => refused.push((ip, refusal)),
                }
            }
            if admitted.is_empty() {
                return Err(match refused.into_iter().next() {
                    Some((_, refusal)) => {
                        tracing::debug!(%refusal, "resolution refused");
                        refusal.into()
                    }
                    None => {
                        io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"))
                            .into()
                    }
                });
            }
            if !refused.is_empty() {
                let dropped: Vec<String> = refused
                    .iter()
                    .map(|(ip, refusal)| match refusal.blocked() {
                        Some(blocked) => format!("{ip} ({blocked})"),
                        None => ip.to_string(),
                    })
                    .collect();
                tracing::warn!(
                    host,
                    ?dropped,
                    "{host} resolved to admitted and refused addresses; connecting to the admitted ones only"
                );
            }
            Ok(Box::new(admitted.into_iter()) as Addrs)
        })
    }
}

fn system_lookup(host: &str) -> LookupFuture {
    let host = host.to_owned();
    Box::pin(async move {
        let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
        Ok(addrs.map(|addr| addr.ip()).collect())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Blocked, Refusal};

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("test addresses parse")
    }

    /// A DNS server that answers every name with `addrs`.
    fn answering(addrs: &[&str]) -> Lookup {
        let addrs: Vec<IpAddr> = addrs.iter().map(|text| ip(text)).collect();
        Arc::new(move |_| {
            let addrs = addrs.clone();
            Box::pin(async move { Ok(addrs) })
        })
    }

    async fn resolve(policy: Policy, lookup: Lookup, name: &str) -> Result<Vec<IpAddr>, String> {
        let resolver = GuardedResolver::with_lookup(Arc::new(policy), lookup);
        let name: Name = name.parse().map_err(|_| "bad name".to_owned())?;
        match resolver.resolve(name).await {
            Ok(addrs) => Ok(addrs.map(|addr| addr.ip()).collect()),
            Err(error) => Err(error.to_string()),
        }
    }

    #[tokio::test]
    async fn a_name_rebound_to_loopback_is_refused_at_resolution() {
        let result = resolve(
            Policy::default().for_server("remote", false),
            answering(&["127.0.0.1"]),
            "mcp.attacker.example",
        )
        .await;
        assert_eq!(
            result,
            Err("refused to connect: mcp.attacker.example resolves to 127.0.0.1 (loopback); to allow it, add \"mcp.attacker.example\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'remote'".to_owned())
        );
    }

    #[tokio::test]
    async fn refused_addresses_are_dropped_from_a_mixed_answer() {
        let result = resolve(
            Policy::default(),
            answering(&[
                "127.0.0.1",
                "93.184.215.14",
                "::ffff:169.254.169.254",
                "2606:4700::1",
            ]),
            "mixed.example",
        )
        .await;
        assert_eq!(result, Ok(vec![ip("93.184.215.14"), ip("2606:4700::1")]));
    }

    #[tokio::test]
    async fn admitted_private_addresses_pass_through() {
        let result = resolve(
            Policy::parse(["10.0.0.0/8"]).expect("rule parses"),
            answering(&["10.1.1.1", "192.168.1.1"]),
            "internal.example",
        )
        .await;
        assert_eq!(result, Ok(vec![ip("10.1.1.1")]));
    }

    #[tokio::test]
    async fn an_empty_answer_is_an_error_not_a_refusal() {
        let result = resolve(Policy::default(), answering(&[]), "nothing.example").await;
        assert_eq!(result, Err("nothing.example has no address".to_owned()));
    }

    /// Through a real client: the resolver double rebinds a name to the loopback listener, and
    /// the request fails with the refusal without connecting.
    #[tokio::test]
    async fn a_client_never_connects_to_a_rebound_address() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("local address").port();
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver::with_lookup(
                Arc::new(Policy::default()),
                answering(&["127.0.0.1"]),
            )))
            .build()
            .expect("client builds");

        let error = client
            .get(format!("https://rebind.example:{port}/"))
            .send()
            .await
            .expect_err("refused");

        let refusal = Refusal::find_in(&error).expect("the refusal is in the error chain");
        assert_eq!(refusal.blocked(), Some(Blocked::Loopback));
        assert!(
            listener.accept().is_err(),
            "nothing may have connected to the loopback listener"
        );
    }

    /// The control for the test above: the same double, with the address admitted, does
    /// connect.
    #[tokio::test]
    async fn a_client_connects_to_an_admitted_address() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let port = listener.local_addr().expect("local address").port();
        let client = reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver::with_lookup(
                Arc::new(Policy::parse(["127.0.0.0/8"]).expect("rule parses")),
                answering(&["127.0.0.1"]),
            )))
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .expect("client builds");

        let request = client.get(format!("http://rebind.example:{port}/")).send();
        tokio::select! {
            accepted = listener.accept() => assert!(accepted.is_ok()),
            result = request => panic!("the request ended without connecting: {result:?}"),
        }
    }
}
