//! Who a request comes from: the local user, a client with a key, or the subject of an
//! accepted JWT. Every per-principal rule (profiles, admin rights, OAuth tokens, the audit
//! log, approvals, rate limits, session ownership) keys on [`Principal::id`], an
//! [`ids::PrincipalId`]. The HTTP edge (`http::client_auth`) decides a request's principal and
//! puts it into the request's extensions; stdio is the local user's.

use std::fmt;

use ids::PrincipalId;

/// Who a request comes from. Stdio and an unauthenticated loopback listener serve the local
/// user; an HTTP request with a key serves the client the key was issued to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    Local,
    /// A client added with `mcpgw clients add NAME`.
    Client(String),
    /// The subject of a JWT accepted under `[gateway.jwt]`, with the profile its profile
    /// claim names, if any.
    User {
        subject: String,
        profile: Option<String>,
    },
}

impl Principal {
    /// A stable identifier to key per-principal state by (OAuth tokens, audit): `local`, or
    /// `client:NAME`, so no client name can collide with the local user.
    pub fn id(&self) -> PrincipalId {
        match self {
            Principal::Local => PrincipalId::local(),
            Principal::Client(name) => PrincipalId::new(format!("client:{name}")),
            Principal::User { subject, .. } => PrincipalId::new(format!("user:{subject}")),
        }
    }

    /// The profile this principal runs under: the one its client is listed in or its token
    /// names, else `[gateway] default_profile`. `None`: no profile applies, everything is
    /// visible.
    pub fn profile<'a>(&self, policy: &'a config::PolicyConfig) -> Option<&'a config::Profile> {
        match self {
            Principal::Local => policy.default(),
            Principal::Client(name) => policy.profile_of_client(name),
            Principal::User { profile, .. } => profile
                .as_deref()
                .and_then(|name| policy.profile(name))
                .or_else(|| policy.default()),
        }
    }

    /// Whether this principal may decide anyone's pending approvals and use the admin
    /// endpoints: the local user (stdio, the CLI, an open loopback listener), or a principal
    /// whose profile says `admin = true`.
    pub fn is_admin(&self, policy: &config::PolicyConfig) -> bool {
        match self {
            Principal::Local => true,
            other => other.profile(policy).is_some_and(|p| p.admin),
        }
    }

    /// The principal of an MCP request, from its rmcp request context's extensions: the
    /// HTTP listener puts it into the request's `http::request::Parts`, which rmcp hands on.
    /// A request without one (stdio) is the local user's.
    pub fn of(extensions: &rmcp::model::Extensions) -> Principal {
        extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned()
            .unwrap_or(Principal::Local)
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id())
    }
}
