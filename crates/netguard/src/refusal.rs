//! A refused URL or address, and the message that says exactly what to change.
//!
//! The message names the one line that would allow the request (`[network] allow`, or the
//! server's `allow_private_network`), and only lines that would actually work: every remedy is
//! checked by a test that applies it. It shows the URL's origin only (scheme, host, port):
//! paths and queries of MCP and OAuth URLs can carry tokens, and userinfo carries passwords.

use std::error::Error as StdError;
use std::fmt;
use std::net::IpAddr;

use url::Url;

use crate::Blocked;

/// A request the policy does not allow. [`Display`](fmt::Display) says why and what to
/// change; the accessors let a caller present or act on the parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal(Box<Parts>);

/// Boxed: a refusal travels in `Result`s and error chains, and is rare.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Parts {
    /// The refused URL's origin; `None` when refused at resolution, which sees only a name.
    target: Option<String>,
    reason: Reason,
    remedy: Remedy,
    settings: Settings,
}

/// Where the lines a refusal suggests are written, so that its message names a file the user
/// has: a gateway serving an `mcpServers` JSON file as it is has no `mcpgw.toml` to edit.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settings {
    /// A TOML file (`file` is its name, `mcpgw.toml` by default), with its `[network] allow`
    /// and each server's `allow_private_network`.
    Toml { file: String },
    /// An `mcpServers` JSON file (Claude Desktop, Cursor, VS Code) served as it is, which has
    /// no such settings: they go into an mcpgw.toml made from it by `mcpgw import`. Both are
    /// paths as the user should type them.
    McpServersJson { file: String, toml: String },
}

impl Default for Settings {
    fn default() -> Self {
        Settings::Toml {
            file: "mcpgw.toml".to_owned(),
        }
    }
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// A scheme other than `http` or `https`.
    Scheme { scheme: String },
    /// A user name or password in the URL.
    Credentials,
    /// A URL without a host.
    NoHost,
    /// `http` to a host the allowlist does not name.
    PlainHttp { host: String },
    /// The allowlist names the host, but only with other ports.
    Port {
        host: String,
        port: u16,
        allowed: Vec<u16>,
    },
    /// The host is, or resolves to, an address that is not public. `host` is the name as
    /// written, or the address itself for an IP literal.
    Address {
        host: String,
        ip: IpAddr,
        blocked: Blocked,
    },
}

/// What would allow the request; empty when nothing would.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Remedy {
    /// Switching to https would do.
    pub(crate) https: bool,
    /// The `[network] allow` entry that would do.
    pub(crate) allow: Option<String>,
    /// `allow_private_network = true` on this server would do.
    pub(crate) private_network_server: Option<String>,
    /// A clause about the case, after the remedy.
    pub(crate) note: Option<&'static str>,
}

impl Refusal {
    pub(crate) fn new(
        target: Option<&Url>,
        settings: &Settings,
        reason: Reason,
        remedy: Remedy,
    ) -> Self {
        Refusal(Box::new(Parts {
            target: target.map(origin),
            reason,
            remedy,
            settings: settings.clone(),
        }))
    }

    /// The same refusal, naming `url` (whose origin only is shown) if it names no URL yet: a
    /// refusal from a request's error chain came from the resolver, which sees only a host
    /// name, or from a redirect, which already names the refused hop (and keeps it).
    #[must_use]
    pub fn at(mut self, url: &Url) -> Self {
        self.0.target.get_or_insert_with(|| origin(url));
        self
    }

    /// The first `Refusal` in `error`'s chain of sources, `error` included: how a caller finds
    /// the guard's verdict inside a `reqwest::Error` (resolution and redirect refusals travel
    /// as its source).
    pub fn find_in<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a Refusal> {
        let mut current = Some(error);
        while let Some(error) = current {
            if let Some(refusal) = error.downcast_ref::<Refusal>() {
                return Some(refusal);
            }
            current = error.source();
        }
        None
    }

    pub fn reason(&self) -> &Reason {
        &self.0.reason
    }

    /// The address class, when an address was refused.
    pub fn blocked(&self) -> Option<Blocked> {
        match self.0.reason {
            Reason::Address { blocked, .. } => Some(blocked),
            _ => None,
        }
    }

    /// The `[network] allow` entry that would allow this request, if one would.
    pub fn suggested_allow(&self) -> Option<&str> {
        self.0.remedy.allow.as_deref()
    }

    /// Whether `allow_private_network = true` on the server would allow this request.
    pub fn suggests_private_network(&self) -> bool {
        self.0.remedy.private_network_server.is_some()
    }
}

impl StdError for Refusal {}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Parts {
            target,
            reason,
            remedy,
            settings,
        } = &*self.0;
        match target {
            Some(target) => write!(f, "refused {target}: {reason}")?,
            None => write!(f, "refused to connect: {reason}")?,
        }
        remedy.write(f, settings)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Scheme { scheme } => write!(f, "the scheme \"{scheme}\" is not allowed"),
            Reason::Credentials => f.write_str("URLs may not carry a user name or password"),
            Reason::NoHost => f.write_str("the URL has no host"),
            Reason::PlainHttp { .. } => {
                f.write_str("plain http is allowed only for hosts named in [network] allow")
            }
            Reason::Port {
                host,
                port,
                allowed,
            } => {
                let allowed: Vec<String> = allowed.iter().map(u16::to_string).collect();
                let plural = if allowed.len() == 1 { "" } else { "s" };
                write!(
                    f,
                    "{host} is allowed on port{plural} {} only, not {port}",
                    allowed.join(", ")
                )
            }
            Reason::Address { host, ip, blocked } if *host == ip.to_string() => {
                write!(f, "{ip} is not a public address ({blocked})")
            }
            Reason::Address { host, ip, blocked } => {
                write!(f, "{host} resolves to {ip} ({blocked})")
            }
        }
    }
}

impl Remedy {
    /// `; to allow it, ...`, naming where the settings go.
    fn write(&self, f: &mut fmt::Formatter<'_>, settings: &Settings) -> fmt::Result {
        let in_toml = match settings {
            Settings::Toml { file } => format!(" in {file}"),
            Settings::McpServersJson { .. } => String::new(),
        };
        let mut ways = Vec::new();
        if self.https {
            ways.push("use https".to_owned());
        }
        if let Some(entry) = &self.allow {
            ways.push(format!("add \"{entry}\" to [network] allow{in_toml}"));
        }
        if let Some(server) = &self.private_network_server {
            ways.push(format!(
                "set allow_private_network = true on server '{server}'"
            ));
        }
        if !ways.is_empty() {
            write!(f, "; to allow it, {}", ways.join(", or "))?;
        }
        if let Settings::McpServersJson { file, toml } = settings
            && (self.allow.is_some() || self.private_network_server.is_some())
        {
            write!(
                f,
                " in an mcpgw.toml ({file} has no such settings): `mcpgw import {file} --output {toml}` writes one from it; add the line there and serve that"
            )?;
        }
        if let Some(note) = self.note {
            write!(f, "; {note}")?;
        }
        Ok(())
    }
}

/// `scheme://host[:port]`, never userinfo, path, query or fragment.
fn origin(url: &Url) -> String {
    match url.origin() {
        origin @ url::Origin::Tuple(..) => origin.ascii_serialization(),
        // Opaque origins (non-special schemes): the scheme alone says enough.
        url::Origin::Opaque(_) => format!("a {} URL", url.scheme()),
    }
}
