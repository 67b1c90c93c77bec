//! Who may do what: client JWTs (`[gateway.jwt]`), profiles (`[[profiles]]`), human approval
//! (`[approval]`) and limits (`[limits]`). File types, their validation, and the resolved forms
//! the gateway enforces.
//!
//! Invariants:
//! - Profile names are unique and every name that refers to one (`[gateway] default_profile`)
//!   names a defined profile; a client is attached to at most one profile.
//! - Patterns are `*`/`?` globs over qualified tool names (`server__tool`) or server names;
//!   they match whole names, case-sensitively.
//! - Approval rules are read in file order, the first that matches decides; a tool no rule
//!   names needs approval when its annotations say `destructiveHint: true` (unless
//!   `destructive = "allow"`).

use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::{Exposure, Problem};

/// A `*` and `?` glob matched against a whole name. `*` matches any run of characters
/// (including `__`), `?` exactly one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    pub fn new(text: &str) -> Pattern {
        Pattern(text.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, name: &str) -> bool {
        wildcard(self.0.as_bytes(), name.as_bytes())
    }
}

/// Iterative glob matching with one backtrack point: linear in practice, no recursion.
fn wildcard(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// `[gateway.jwt]`: bearer JWTs from an external identity provider, checked against its JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfig {
    /// Must equal the token's `iss`.
    pub issuer: String,
    /// One of these must be in the token's `aud`.
    pub audience: Vec<String>,
    /// Where the signing keys are fetched (and cached); subject to `[network] allow`.
    pub jwks_url: Url,
    /// Accepted signature algorithms (`RS256`, `ES256`, ...). Never `none` or HMAC.
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// A claim whose value (a string, or an array of strings) names the caller's profile.
    pub profile_claim: Option<String>,
}

pub const DEFAULT_JWT_ALGORITHMS: &[&str] = &["RS256", "ES256"];
const SUPPORTED_JWT_ALGORITHMS: &[&str] = &[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// One `[[profiles]]` entry: which servers and tools its principals may see and call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    /// Server name patterns; empty means every server.
    pub servers: Vec<Pattern>,
    /// Qualified tool name patterns; empty means every tool of an allowed server.
    pub allow: Vec<Pattern>,
    /// Qualified tool name patterns removed after `allow`.
    pub deny: Vec<Pattern>,
    /// Only tools annotated `readOnlyHint: true`.
    pub read_only: bool,
    /// When false, tools annotated `destructiveHint: true` are hidden.
    pub destructive: bool,
    /// Overrides `[gateway] exposure` for this profile's principals.
    pub exposure: Option<Exposure>,
    /// Overrides `[gateway] pinned` for this profile's principals.
    pub pinned: Option<Vec<String>>,
    /// Client names (`mcpgw clients add NAME`) that run under this profile.
    pub clients: Vec<String>,
    /// Principals of this profile may decide anyone's pending approvals and use the admin
    /// endpoints.
    pub admin: bool,
    /// Tool calls per minute per principal; overrides `[limits] calls_per_minute`.
    pub calls_per_minute: Option<u32>,
}

impl Profile {
    /// Whether a tool of `server` named `qualified`, with these annotation hints, is in this
    /// profile. `read_only_hint`/`destructive_hint` are the explicit annotation values. A tool
    /// shown bare (`prefix = "when-needed"`) is matched by its `server__tool` name too.
    pub fn permits(
        &self,
        server: &str,
        qualified: &str,
        read_only_hint: Option<bool>,
        destructive_hint: Option<bool>,
    ) -> bool {
        let prefixed = prefixed(server, qualified);
        let named =
            |p: &Pattern| p.matches(qualified) || prefixed.as_deref().is_some_and(|n| p.matches(n));
        (self.servers.is_empty() || self.servers.iter().any(|p| p.matches(server)))
            && (self.allow.is_empty() || self.allow.iter().any(named))
            && !self.deny.iter().any(named)
            && (!self.read_only || read_only_hint == Some(true))
            && (self.destructive || destructive_hint != Some(true) || read_only_hint == Some(true))
    }
}

/// The `server__tool` name of a tool shown bare under `prefix = "when-needed"` (a qualified name
/// without `__`); `None` for one shown prefixed. Policy patterns written for the prefixed name
/// keep applying when the gateway shows the bare one.
fn prefixed(server: &str, qualified: &str) -> Option<String> {
    (!qualified.contains("__")).then(|| format!("{server}__{qualified}"))
}

/// What an approval rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalAction {
    /// The call waits for a human.
    Require,
    /// The call goes ahead.
    Allow,
}

crate::display_as_written! {
    ApprovalAction { Require => "require", Allow => "allow" }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRule {
    /// Qualified tool name patterns.
    pub tools: Vec<Pattern>,
    pub action: ApprovalAction,
}

/// `[approval]`: which calls wait for a human, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalConfig {
    /// How long a call waits for a decision made out of band.
    pub timeout: Duration,
    /// What a tool no rule names gets when annotated `destructiveHint: true`.
    pub destructive: ApprovalAction,
    pub rules: Vec<ApprovalRule>,
}

pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

impl Default for ApprovalConfig {
    fn default() -> Self {
        ApprovalConfig {
            timeout: DEFAULT_APPROVAL_TIMEOUT,
            destructive: ApprovalAction::Require,
            rules: Vec::new(),
        }
    }
}

impl ApprovalConfig {
    /// Whether a call of `qualified` needs a human. `annotations` is the tool's `annotations`
    /// member as the upstream sent it (`None` when absent). Fail closed: annotations that are
    /// not an object, or a `destructiveHint` that is not a boolean, need approval.
    pub fn requires(&self, qualified: &str, annotations: Option<&serde_json::Value>) -> bool {
        self.requires_names(&[qualified], annotations)
    }

    /// [`ApprovalConfig::requires`] for a tool of `server`: a tool shown bare (`prefix =
    /// "when-needed"`) is matched by its `server__tool` name too.
    pub fn requires_tool(
        &self,
        server: &str,
        qualified: &str,
        annotations: Option<&serde_json::Value>,
    ) -> bool {
        match prefixed(server, qualified) {
            Some(prefixed) => self.requires_names(&[qualified, &prefixed], annotations),
            None => self.requires_names(&[qualified], annotations),
        }
    }

    fn requires_names(&self, names: &[&str], annotations: Option<&serde_json::Value>) -> bool {
        if let Some(rule) = self.rules.iter().find(|rule| {
            rule.tools
                .iter()
                .any(|p| names.iter().any(|n| p.matches(n)))
        }) {
            return rule.action == ApprovalAction::Require;
        }
        let destructive = match annotations {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Object(map)) => match map.get("destructiveHint") {
                None | Some(serde_json::Value::Null) => false,
                Some(serde_json::Value::Bool(hint)) => {
                    *hint && map.get("readOnlyHint") != Some(&serde_json::Value::Bool(true))
                }
                Some(_) => true,
            },
            Some(_) => true,
        };
        destructive && self.destructive == ApprovalAction::Require
    }
}

/// `[limits]`: caps on what crosses the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsConfig {
    /// Largest HTTP request body a client may send.
    pub request_bytes: usize,
    /// Largest response an upstream may send for one message.
    pub response_bytes: usize,
    /// Largest decoded image in a tool result.
    pub image_bytes: usize,
    /// Most images in one tool result; the rest are dropped with a note.
    pub images_per_result: usize,
    /// Tool calls per minute per principal, unless its profile says otherwise. `None`: no
    /// limit.
    pub calls_per_minute: Option<u32>,
    /// Most HTTP connections open at once; beyond it a new connection is answered 503 and
    /// closed.
    pub max_connections: usize,
    /// How long a connection may take to send a request's headers.
    pub header_timeout: std::time::Duration,
    /// How long an idle keep-alive connection stays open.
    pub idle_timeout: std::time::Duration,
    /// How long an MCP session may stay unused before it is closed.
    pub session_idle: std::time::Duration,
    /// Most MCP sessions open at once; beyond it `initialize` is answered 503.
    pub max_sessions: usize,
    /// Most MCP sessions one principal may hold open; beyond it `initialize` is answered 429.
    pub max_sessions_per_principal: usize,
    /// On SIGTERM, how long calls in flight may take to finish while new ones get 503.
    pub shutdown_grace: std::time::Duration,
}

pub const DEFAULT_BODY_BYTES: usize = 5 * 1024 * 1024;

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            request_bytes: DEFAULT_BODY_BYTES,
            response_bytes: DEFAULT_BODY_BYTES,
            image_bytes: 10 * 1024 * 1024,
            images_per_result: 5,
            calls_per_minute: None,
            max_connections: 1024,
            header_timeout: std::time::Duration::from_secs(10),
            idle_timeout: std::time::Duration::from_secs(60),
            session_idle: std::time::Duration::from_secs(300),
            max_sessions: 10_000,
            max_sessions_per_principal: 100,
            shutdown_grace: std::time::Duration::from_secs(10),
        }
    }
}

/// Profiles, approval and limits, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyConfig {
    pub profiles: Vec<Profile>,
    /// The profile of principals no profile names (the local user, clients not listed in
    /// any profile, JWTs without a profile claim). `None`: they see everything.
    pub default_profile: Option<String>,
    pub approval: ApprovalConfig,
    pub limits: LimitsConfig,
}

impl PolicyConfig {
    pub fn profile(&self, name: &str) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// The profile a client key runs under: the one listing the client, else the default.
    pub fn profile_of_client(&self, client: &str) -> Option<&Profile> {
        self.profiles
            .iter()
            .find(|p| p.clients.iter().any(|c| c == client))
            .or_else(|| self.default())
    }

    /// The default profile, if one is set.
    pub fn default(&self) -> Option<&Profile> {
        self.default_profile
            .as_deref()
            .and_then(|n| self.profile(n))
    }
}

// ---- file types ----

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JwtFile {
    pub issuer: Option<String>,
    pub audience: Option<Audience>,
    pub jwks_url: Option<String>,
    pub algorithms: Option<Vec<String>>,
    pub leeway_s: Option<i64>,
    pub profile_claim: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Audience {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileFile {
    pub name: Option<String>,
    #[serde(default)]
    pub servers: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub exposure: Option<Exposure>,
    pub pinned: Option<Vec<String>>,
    #[serde(default)]
    pub clients: Vec<String>,
    pub admin: Option<bool>,
    pub calls_per_minute: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalFile {
    pub timeout_s: Option<i64>,
    pub destructive: Option<ApprovalAction>,
    #[serde(default)]
    pub rules: Vec<ApprovalRuleFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalRuleFile {
    #[serde(default)]
    pub tools: Vec<String>,
    pub action: Option<ApprovalAction>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsFile {
    pub request_bytes: Option<i64>,
    pub response_bytes: Option<i64>,
    pub image_bytes: Option<i64>,
    pub images_per_result: Option<i64>,
    pub calls_per_minute: Option<i64>,
    pub max_connections: Option<i64>,
    pub header_timeout_s: Option<i64>,
    pub idle_timeout_s: Option<i64>,
    pub session_idle_s: Option<i64>,
    pub max_sessions: Option<i64>,
    pub max_sessions_per_principal: Option<i64>,
    pub shutdown_grace_s: Option<i64>,
}

// ---- validation ----

const MAX_APPROVAL_TIMEOUT_S: i64 = 24 * 3600;

pub(crate) fn jwt(file: JwtFile, problems: &mut Vec<Problem>) -> Option<JwtConfig> {
    const PATH: &str = "gateway.jwt";
    let before = problems.len();
    let issuer = file.issuer.filter(|i| !i.trim().is_empty());
    if issuer.is_none() {
        problems.push(
            Problem::new(format!("{PATH}.issuer"), "missing issuer")
                .hint("the identity provider's issuer URL, exactly as tokens carry it in `iss`"),
        );
    }
    let audience = match file.audience {
        Some(Audience::One(a)) => vec![a],
        Some(Audience::Many(list)) => list,
        None => Vec::new(),
    };
    if audience.is_empty() || audience.iter().any(|a| a.trim().is_empty()) {
        problems.push(
            Problem::new(format!("{PATH}.audience"), "missing or empty audience")
                .hint("the `aud` value the identity provider issues for this gateway"),
        );
    }
    let jwks_url = match file.jwks_url.as_deref().map(Url::parse) {
        None => {
            problems.push(Problem::new(format!("{PATH}.jwks_url"), "missing jwks_url"));
            None
        }
        Some(Err(error)) => {
            problems.push(Problem::new(
                format!("{PATH}.jwks_url"),
                format!("invalid url: {error}"),
            ));
            None
        }
        Some(Ok(url)) if !matches!(url.scheme(), "http" | "https") => {
            problems.push(Problem::new(
                format!("{PATH}.jwks_url"),
                "the JWKS url must be http(s)",
            ));
            None
        }
        Some(Ok(url)) => Some(url),
    };
    let algorithms = file.algorithms.unwrap_or_else(|| {
        DEFAULT_JWT_ALGORITHMS
            .iter()
            .map(|a| (*a).to_owned())
            .collect()
    });
    if algorithms.is_empty() {
        problems.push(Problem::new(
            format!("{PATH}.algorithms"),
            "at least one algorithm is needed",
        ));
    }
    for (i, algorithm) in algorithms.iter().enumerate() {
        if !SUPPORTED_JWT_ALGORITHMS.contains(&algorithm.as_str()) {
            problems.push(
                Problem::new(
                    format!("{PATH}.algorithms[{i}]"),
                    format!("unsupported algorithm `{algorithm}`"),
                )
                .hint(format!(
                    "one of {}; shared-secret (HS*) and `none` tokens are never accepted",
                    SUPPORTED_JWT_ALGORITHMS.join(", ")
                )),
            );
        }
    }
    let leeway = match file.leeway_s {
        None => Duration::from_secs(30),
        Some(s @ 0..=300) => Duration::from_secs(s as u64),
        Some(s) => {
            problems.push(Problem::new(
                format!("{PATH}.leeway_s"),
                format!("{s} is out of range 0..=300"),
            ));
            Duration::ZERO
        }
    };
    if problems.len() > before {
        return None;
    }
    Some(JwtConfig {
        issuer: issuer?,
        audience,
        jwks_url: jwks_url?,
        algorithms,
        leeway,
        profile_claim: file.profile_claim.filter(|c| !c.is_empty()),
    })
}

fn patterns(path: &str, list: Vec<String>, problems: &mut Vec<Problem>) -> Vec<Pattern> {
    list.into_iter()
        .enumerate()
        .filter_map(|(i, text)| {
            if text.trim().is_empty() {
                problems.push(Problem::new(format!("{path}[{i}]"), "empty pattern"));
                None
            } else {
                Some(Pattern(text))
            }
        })
        .collect()
}

pub(crate) fn policy(
    profiles: Vec<ProfileFile>,
    default_profile: Option<String>,
    approval: ApprovalFile,
    limits: LimitsFile,
    problems: &mut Vec<Problem>,
) -> PolicyConfig {
    let mut resolved: Vec<Profile> = Vec::with_capacity(profiles.len());
    for (i, file) in profiles.into_iter().enumerate() {
        let path = format!("profiles[{i}]");
        let Some(name) = file.name.filter(|n| !n.trim().is_empty()) else {
            problems.push(Problem::new(format!("{path}.name"), "missing profile name"));
            continue;
        };
        if resolved.iter().any(|p| p.name == name) {
            problems.push(Problem::new(
                format!("{path}.name"),
                format!("duplicate profile name `{name}`"),
            ));
            continue;
        }
        for (j, client) in file.clients.iter().enumerate() {
            if let Some(other) = resolved.iter().find(|p| p.clients.contains(client)) {
                problems.push(
                    Problem::new(
                        format!("{path}.clients[{j}]"),
                        format!("client `{client}` is already in profile `{}`", other.name),
                    )
                    .hint("a client runs under one profile; remove it from one of them"),
                );
            }
        }
        let calls_per_minute = match file.calls_per_minute {
            None => None,
            Some(n @ 1..=1_000_000) => Some(n as u32),
            Some(n) => {
                problems.push(Problem::new(
                    format!("{path}.calls_per_minute"),
                    format!("{n} is out of range 1..=1000000"),
                ));
                None
            }
        };
        resolved.push(Profile {
            servers: patterns(&format!("{path}.servers"), file.servers, problems),
            allow: patterns(&format!("{path}.allow"), file.allow, problems),
            deny: patterns(&format!("{path}.deny"), file.deny, problems),
            read_only: file.read_only.unwrap_or(false),
            destructive: file.destructive.unwrap_or(true),
            exposure: file.exposure,
            pinned: file.pinned,
            clients: file.clients,
            admin: file.admin.unwrap_or(false),
            calls_per_minute,
            name,
        });
    }
    if let Some(name) = &default_profile
        && !resolved.iter().any(|p| &p.name == name)
    {
        problems.push(
            Problem::new(
                "gateway.default_profile",
                format!("no profile is named `{name}`"),
            )
            .hint("define it with a [[profiles]] table, or remove the line"),
        );
    }

    let timeout = match approval.timeout_s {
        None => DEFAULT_APPROVAL_TIMEOUT,
        Some(s @ 1..=MAX_APPROVAL_TIMEOUT_S) => Duration::from_secs(s as u64),
        Some(s) => {
            problems.push(Problem::new(
                "approval.timeout_s",
                format!("{s} is out of range 1..={MAX_APPROVAL_TIMEOUT_S}"),
            ));
            DEFAULT_APPROVAL_TIMEOUT
        }
    };
    let mut rules = Vec::with_capacity(approval.rules.len());
    for (i, rule) in approval.rules.into_iter().enumerate() {
        let path = format!("approval.rules[{i}]");
        if rule.tools.is_empty() {
            problems.push(
                Problem::new(
                    format!("{path}.tools"),
                    "a rule needs at least one tool pattern",
                )
                .hint("tools = [\"server__tool\", \"server__delete_*\"]"),
            );
        }
        let Some(action) = rule.action else {
            problems.push(
                Problem::new(format!("{path}.action"), "missing action")
                    .hint("action = \"require\" or \"allow\""),
            );
            continue;
        };
        rules.push(ApprovalRule {
            tools: patterns(&format!("{path}.tools"), rule.tools, problems),
            action,
        });
    }
    let approval = ApprovalConfig {
        timeout,
        destructive: approval.destructive.unwrap_or(ApprovalAction::Require),
        rules,
    };

    let defaults = LimitsConfig::default();
    let mut bytes = |name: &str, value: Option<i64>, default: usize| match value {
        None => default,
        Some(n @ 1024..=1_073_741_824) => n as usize,
        Some(n) => {
            problems.push(Problem::new(
                format!("limits.{name}"),
                format!("{n} is out of range 1024..=1073741824 (bytes)"),
            ));
            default
        }
    };
    let request_bytes = bytes(
        "request_bytes",
        limits.request_bytes,
        defaults.request_bytes,
    );
    let response_bytes = bytes(
        "response_bytes",
        limits.response_bytes,
        defaults.response_bytes,
    );
    let image_bytes = bytes("image_bytes", limits.image_bytes, defaults.image_bytes);
    let images_per_result = match limits.images_per_result {
        None => defaults.images_per_result,
        Some(n @ 0..=1000) => n as usize,
        Some(n) => {
            problems.push(Problem::new(
                "limits.images_per_result",
                format!("{n} is out of range 0..=1000"),
            ));
            defaults.images_per_result
        }
    };
    let calls_per_minute = match limits.calls_per_minute {
        None => None,
        Some(n @ 1..=1_000_000) => Some(n as u32),
        Some(n) => {
            problems.push(Problem::new(
                "limits.calls_per_minute",
                format!("{n} is out of range 1..=1000000"),
            ));
            None
        }
    };
    let mut ranged = |name: &str,
                      value: Option<i64>,
                      range: std::ops::RangeInclusive<i64>,
                      default: u64| match value {
        None => default,
        Some(n) if range.contains(&n) => n as u64,
        Some(n) => {
            problems.push(Problem::new(
                format!("limits.{name}"),
                format!("{n} is out of range {}..={}", range.start(), range.end()),
            ));
            default
        }
    };
    let seconds = |s: u64| std::time::Duration::from_secs(s);
    let max_connections = ranged(
        "max_connections",
        limits.max_connections,
        1..=1_000_000,
        defaults.max_connections as u64,
    ) as usize;
    let header_timeout = seconds(ranged(
        "header_timeout_s",
        limits.header_timeout_s,
        1..=3600,
        defaults.header_timeout.as_secs(),
    ));
    let idle_timeout = seconds(ranged(
        "idle_timeout_s",
        limits.idle_timeout_s,
        1..=86_400,
        defaults.idle_timeout.as_secs(),
    ));
    let session_idle = seconds(ranged(
        "session_idle_s",
        limits.session_idle_s,
        10..=86_400,
        defaults.session_idle.as_secs(),
    ));
    let max_sessions = ranged(
        "max_sessions",
        limits.max_sessions,
        1..=1_000_000,
        defaults.max_sessions as u64,
    ) as usize;
    let max_sessions_per_principal = ranged(
        "max_sessions_per_principal",
        limits.max_sessions_per_principal,
        1..=1_000_000,
        defaults.max_sessions_per_principal as u64,
    ) as usize;
    let shutdown_grace = seconds(ranged(
        "shutdown_grace_s",
        limits.shutdown_grace_s,
        0..=3600,
        defaults.shutdown_grace.as_secs(),
    ));
    PolicyConfig {
        profiles: resolved,
        default_profile,
        approval,
        limits: LimitsConfig {
            request_bytes,
            response_bytes,
            image_bytes,
            images_per_result,
            calls_per_minute,
            max_connections,
            header_timeout,
            idle_timeout,
            session_idle,
            max_sessions,
            max_sessions_per_principal,
            shutdown_grace,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn globs_match_whole_names() {
        let cases = [
            ("fs__*", "fs__read_file", true),
            ("fs__*", "fsx__read", false),
            ("*__delete_*", "git__delete_branch", true),
            ("*", "", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*read*", "fs__read_file", true),
            ("fs__read", "fs__read_file", false),
            ("*a*b", "xaxxb", true),
            ("*a*b", "xaxxbc", false),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(
                Pattern::new(pattern).matches(name),
                want,
                "{pattern} {name}"
            );
        }
    }

    fn profile() -> Profile {
        Profile {
            name: "p".into(),
            servers: vec![],
            allow: vec![],
            deny: vec![],
            read_only: false,
            destructive: true,
            exposure: None,
            pinned: None,
            clients: vec![],
            admin: false,
            calls_per_minute: None,
        }
    }

    #[test]
    fn profiles_combine_servers_allow_deny_and_annotations() {
        let mut p = profile();
        p.servers = vec![Pattern::new("fs")];
        p.deny = vec![Pattern::new("*__write*")];
        assert!(p.permits("fs", "fs__read", None, None));
        assert!(!p.permits("git", "git__log", None, None));
        assert!(!p.permits("fs", "fs__write_file", None, None));
        p.read_only = true;
        assert!(!p.permits("fs", "fs__read", None, None));
        assert!(p.permits("fs", "fs__read", Some(true), None));
        let mut p = profile();
        p.destructive = false;
        assert!(!p.permits("fs", "fs__rm", None, Some(true)));
        assert!(p.permits("fs", "fs__rm", None, None));
    }

    #[test]
    fn bare_names_are_matched_by_their_prefixed_form_too() {
        let mut p = profile();
        p.allow = vec![Pattern::new("fs__*")];
        p.deny = vec![Pattern::new("fs__write*")];
        assert!(p.permits("fs", "read_file", None, None));
        assert!(!p.permits("fs", "write_file", None, None));
        assert!(!p.permits("git", "log", None, None));
        let config = ApprovalConfig {
            rules: vec![ApprovalRule {
                tools: vec![Pattern::new("git__push")],
                action: ApprovalAction::Require,
            }],
            ..ApprovalConfig::default()
        };
        assert!(config.requires_tool("git", "push", None));
        assert!(config.requires_tool("git", "git__push", None));
        assert!(!config.requires_tool("other", "push", None));
    }

    #[test]
    fn approval_rules_then_destructive_hint_and_fail_closed() {
        let config = ApprovalConfig {
            rules: vec![
                ApprovalRule {
                    tools: vec![Pattern::new("fs__delete_*")],
                    action: ApprovalAction::Allow,
                },
                ApprovalRule {
                    tools: vec![Pattern::new("git__*")],
                    action: ApprovalAction::Require,
                },
            ],
            ..ApprovalConfig::default()
        };
        let destructive = json!({"destructiveHint": true});
        assert!(config.requires("x__rm", Some(&destructive)));
        assert!(!config.requires("fs__delete_file", Some(&destructive)));
        assert!(config.requires("git__log", None));
        assert!(!config.requires("x__echo", None));
        assert!(!config.requires("x__echo", Some(&json!({"readOnlyHint": true}))));
        // Unreadable annotations need approval.
        assert!(config.requires("x__echo", Some(&json!("yes"))));
        assert!(config.requires("x__echo", Some(&json!({"destructiveHint": "yes"}))));
        let relaxed = ApprovalConfig {
            destructive: ApprovalAction::Allow,
            ..ApprovalConfig::default()
        };
        assert!(!relaxed.requires("x__rm", Some(&destructive)));
    }
}
