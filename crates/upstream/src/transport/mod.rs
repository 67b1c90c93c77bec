//! The transports under an upstream session, and the HTTP client they share.
//!
//! - [`stdio`]: a child process in its own process group, stderr into the log.
//! - [`streamable_http`]: the HTTP client under rmcp's Streamable HTTP transport, which
//!   recognises a restarted server's session rejection and makes every 401 look the same.
//! - [`sse`]: the legacy HTTP+SSE client rmcp lacks.
//! - [`ordered`]: a wrapper over any of them that counts the notifications a call must see
//!   before its result.
//!
//! [`http_client`] is the one HTTP client of a server's connections, for its MCP requests
//! (Streamable HTTP, SSE, and those of its OAuth client).

use std::{sync::Arc, time::Duration};

use netguard::Policy;

pub(crate) mod ordered;
pub mod sse;
pub(crate) mod stdio;
pub(crate) mod streamable_http;

/// The HTTP client of one server's connections (Streamable HTTP, SSE, and the MCP requests of
/// its OAuth client): guarded by `policy`, redirects judged by the guard and then kept on the
/// configured origin. There is no fallback to an unguarded client when building fails.
pub(crate) fn http_client(policy: Arc<Policy>) -> Result<reqwest::Client, reqwest::Error> {
    // Pooled connections idle out quickly: upstreams restart and we must not reuse dead sockets.
    netguard::guarded_client_builder(policy.clone())
        .pool_idle_timeout(Duration::from_secs(30))
        .redirect(netguard::redirect_policy(policy, same_origin_redirects))
        .build()
}

/// reqwest's default limit of 10 redirects, but only within the origin first asked: the
/// request carries credentials, custom headers included, that belong to that origin alone. A
/// redirect elsewhere is not followed; the caller sees the 3xx.
fn same_origin_redirects(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let same_origin = attempt
        .previous()
        .first()
        .is_some_and(|first| first.origin() == attempt.url().origin());
    if !same_origin {
        tracing::warn!(
            status = %attempt.status(),
            to = %attempt.url().origin().ascii_serialization(),
            "not following a redirect away from the configured origin"
        );
        attempt.stop()
    } else if attempt.previous().len() > 10 {
        attempt.error("too many redirects")
    } else {
        attempt.follow()
    }
}
