//! The SSRF guard for every outbound URL mcpgw fetches: upstream MCP servers, OAuth metadata,
//! token and registration endpoints, JWKS, remote embedders.
//!
//! A URL must be https and reach a public address, unless the operator has named it: globally
//! in `[network] allow` (host names, `*.suffix` wildcards, IP addresses, CIDRs, optionally
//! with a port), or for one server with `allow_private_network = true` (loopback, private and
//! carrier-grade NAT addresses). A refusal says exactly which line to add, so a developer with
//! a server on `http://localhost:3000/mcp` reads:
//!
//! ```text
//! refused http://localhost:3000: plain http is allowed only for hosts named in [network] allow;
//! to allow it, use https, or add "localhost" to [network] allow in mcpgw.toml, or set
//! allow_private_network = true on server 'dev'
//! ```
//!
//! Entry points: [`Policy`] (built from [`Rule`]s, then [`Policy::for_server`]),
//! [`check_url`], [`classify`], and with the `client` feature (on by default)
//! [`guarded_client_builder`].
//!
//! Architecture invariants:
//! - Every outbound HTTP client in mcpgw is built by [`guarded_client_builder`], with the
//!   policy of what it talks to: a server's own policy for its transport and its OAuth, the
//!   global one for embedders and anything else.
//! - Checks happen on resolved addresses: the client resolves names only through
//!   [`GuardedResolver`], which passes on only admitted addresses, so the address connected to
//!   is an admitted one (DNS rebinding to 127.0.0.1 fails at connect, not at a string check).
//! - Every redirect hop is checked again ([`redirect_policy`]).
//! - Every URL is checked with [`check_url`] before its first request, configured or learned
//!   at run time (OAuth metadata, token and registration endpoints, JWKS URIs, an SSE
//!   `endpoint` event). This is where IP literals are caught: reqwest connects to an IP-literal
//!   URL without consulting any resolver.
//! - A refusal names no secret: it shows a URL's origin only, never userinfo, path or query.
//! - Without `client`, the crate needs only `url` and `thiserror` (`config` uses it that way
//!   to validate `[network] allow`).
//!
//! The address classes are tabulated on [`classify`], what admits each and when plain http
//! is allowed on [`Policy`].

mod address;
#[cfg(feature = "client")]
mod client;
mod policy;
mod refusal;
mod rule;

pub use address::{Blocked, classify};
#[cfg(feature = "client")]
pub use client::{GuardedResolver, Lookup, LookupFuture, guarded_client_builder, redirect_policy};
pub use policy::{Policy, check_url};
pub use refusal::{Reason, Refusal, Settings};
pub use rule::{Rule, RuleError};
