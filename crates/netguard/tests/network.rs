//! The guard on a real network: guarded clients against HTTP servers on 127.0.0.1, resolving
//! names through the system resolver, following real redirects.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::response::{IntoResponse, Redirect, Response};
use netguard::{Blocked, Policy, Reason, Refusal, check_url, guarded_client_builder};
use url::Url;

/// An HTTP server on 127.0.0.1 that answers every request with "hello", or with a redirect to
/// `redirect_to`, and counts the requests that reached it.
struct Server {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Server {
    async fn start(redirect_to: Option<String>) -> Server {
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let app = Router::new().fallback(move || {
            let counter = counter.clone();
            let redirect_to = redirect_to.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let response: Response = match redirect_to {
                    Some(to) => Redirect::temporary(&to).into_response(),
                    None => "hello".into_response(),
                };
                response
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let port = listener.local_addr().expect("local address").port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Server { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn url(text: &str) -> Url {
    Url::parse(text).expect("test URLs parse")
}

fn client(policy: Policy) -> reqwest::Client {
    guarded_client_builder(Arc::new(policy))
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .expect("client builds")
}

/// What a caller does: check the URL, then request it.
async fn fetch(policy: Policy, text: &str) -> Result<String, String> {
    check_url(&url(text), &policy).map_err(|refusal| refusal.to_string())?;
    let response =
        client(policy)
            .get(text)
            .send()
            .await
            .map_err(|error| match Refusal::find_in(&error) {
                Some(refusal) => refusal.clone().at(&url(text)).to_string(),
                None => format!("not a refusal: {error}"),
            })?;
    response.text().await.map_err(|error| error.to_string())
}

#[tokio::test]
async fn localhost_is_refused_at_resolution_without_an_allowlist() {
    let server = Server::start(None).await;
    let target = format!("http://localhost:{}/mcp", server.port);

    // No check_url here: the client alone must refuse, on the address "localhost" resolves to.
    let error = client(Policy::default().for_server("dev", false))
        .get(&target)
        .send()
        .await
        .expect_err("loopback is refused");

    let refusal = Refusal::find_in(&error).expect("the refusal is in the error chain");
    assert_eq!(
        refusal.clone().at(&url(&target)).to_string(),
        format!(
            "refused http://localhost:{}: localhost resolves to 127.0.0.1 (loopback); to allow it, add \"localhost\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'",
            server.port
        )
    );
    assert_eq!(server.hits(), 0);
}

#[tokio::test]
async fn a_loopback_address_is_refused_before_the_request() {
    let server = Server::start(None).await;
    let target = format!("http://127.0.0.1:{}/mcp", server.port);

    let result = fetch(Policy::default().for_server("dev", false), &target).await;

    assert_eq!(
        result,
        Err(format!(
            "refused http://127.0.0.1:{}: 127.0.0.1 is not a public address (loopback); to allow it, add \"127.0.0.1\" to [network] allow in mcpgw.toml, or set allow_private_network = true on server 'dev'",
            server.port
        ))
    );
    assert_eq!(server.hits(), 0);
}

/// Pins the limit the crate documents: reqwest connects to IP-literal URLs without asking the
/// resolver, so only `check_url` stands between a caller and 127.0.0.1. Should reqwest start
/// resolving literals, this fails and the documentation can be relaxed.
#[tokio::test]
async fn ip_literal_urls_bypass_the_resolver_so_check_url_is_required() {
    let server = Server::start(None).await;
    let target = format!("http://127.0.0.1:{}/", server.port);

    let response = client(Policy::default()).get(&target).send().await;

    assert!(response.is_ok(), "{response:?}");
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn an_allowlisted_address_or_name_is_reached() {
    let server = Server::start(None).await;
    let by_address = format!("http://127.0.0.1:{}/mcp", server.port);
    let by_name = format!("http://localhost:{}/mcp", server.port);

    let allow = |entries: &[&str]| Policy::parse(entries).expect("rules parse");
    assert_eq!(
        fetch(allow(&["127.0.0.1"]), &by_address).await,
        Ok("hello".to_owned())
    );
    assert_eq!(
        fetch(allow(&["127.0.0.0/8"]), &by_address).await,
        Ok("hello".to_owned())
    );
    assert_eq!(
        fetch(allow(&["localhost"]), &by_name).await,
        Ok("hello".to_owned())
    );
    assert_eq!(
        fetch(allow(&[&format!("localhost:{}", server.port)]), &by_name).await,
        Ok("hello".to_owned())
    );
    // An address entry admits what a name resolves to (the name itself would need https).
    let response = client(allow(&["127.0.0.1"])).get(&by_name).send().await;
    assert!(response.is_ok(), "{response:?}");
    assert_eq!(server.hits(), 5);
}

#[tokio::test]
async fn the_private_network_switch_reaches_localhost() {
    let server = Server::start(None).await;

    let result = fetch(
        Policy::default().for_server("dev", true),
        &format!("http://localhost:{}/mcp", server.port),
    )
    .await;

    assert_eq!(result, Ok("hello".to_owned()));
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn a_redirect_to_an_unlisted_private_address_is_refused() {
    let inside = Server::start(None).await;
    for to in [
        format!("http://127.0.0.1:{}/secret", inside.port),
        format!("http://[::ffff:127.0.0.1]:{}/secret", inside.port),
        format!("http://169.254.169.254:{}/latest/meta-data", inside.port),
    ] {
        let front = Server::start(Some(to.clone())).await;
        let target = format!("http://localhost:{}/mcp", front.port);

        let result = fetch(Policy::parse(["localhost"]).expect("rule parses"), &target).await;

        let message = result.expect_err(&to);
        let to = url(&to);
        let expected = check_url(&to, &Policy::parse(["localhost"]).expect("rule parses"))
            .expect_err("the hop is refused on its own");
        // The refusal names the hop, not the allowlisted URL that redirected to it.
        assert_eq!(message, expected.to_string());
        assert!(
            matches!(expected.reason(), Reason::Address { .. }),
            "{expected}"
        );
        assert_eq!(front.hits(), 1, "{to}");
    }
    assert_eq!(inside.hits(), 0);
}

#[tokio::test]
async fn a_redirect_between_allowlisted_hosts_is_followed() {
    let inside = Server::start(None).await;
    let front = Server::start(Some(format!("http://127.0.0.1:{}/ok", inside.port))).await;

    let result = fetch(
        Policy::parse(["localhost", "127.0.0.1"]).expect("rules parse"),
        &format!("http://localhost:{}/mcp", front.port),
    )
    .await;

    assert_eq!(result, Ok("hello".to_owned()));
    assert_eq!((front.hits(), inside.hits()), (1, 1));
}

#[tokio::test]
async fn a_callers_redirect_rule_runs_after_the_check() {
    let inside = Server::start(None).await;
    let allowed = Server::start(Some(format!("http://localhost:{}/ok", inside.port))).await;
    let refused = Server::start(Some(format!("http://127.0.0.1:{}/ok", inside.port))).await;
    let policy = Arc::new(Policy::parse(["localhost"]).expect("rule parses"));
    let client = guarded_client_builder(policy.clone())
        .redirect(netguard::redirect_policy(policy, |attempt| attempt.stop()))
        .build()
        .expect("client builds");

    let stopped = client
        .get(format!("http://localhost:{}/", allowed.port))
        .send()
        .await
        .expect("an allowed hop reaches the caller's rule, which stops");
    assert!(stopped.status().is_redirection());

    let error = client
        .get(format!("http://localhost:{}/", refused.port))
        .send()
        .await
        .expect_err("a refused hop never reaches the caller's rule");
    let refusal = Refusal::find_in(&error).expect("the refusal is in the error chain");
    assert_eq!(refusal.blocked(), Some(Blocked::Loopback));
    assert_eq!(inside.hits(), 0);
}
