//! Reloading the configuration while serving: [`Gateway::apply`] is the one path a new
//! configuration takes into a running gateway (SIGHUP, the file watch, and the admin API's and
//! console's server writes, all through [`Gateway::reload`]). A write edits the file
//! (`config_file`, with `toml_edit`) and then calls [`Gateway::reload`] rather than `apply`: it
//! checks what was written with the start-up loader and records the text, so the watch does not
//! apply it a second time.
//!
//! A reload is all or nothing up to the servers: the file is read and checked by the same
//! loader as at start-up, and a file that does not load changes nothing (the log and
//! `/healthz` say why). A loaded one replaces the server set ([`upstream::Upstreams::replace`]:
//! an unchanged server keeps its session and child, a changed one is restarted, a removed one
//! drains its calls and stops), then the catalog is rebuilt and clients hear of the change as
//! for any other. What a running gateway cannot change (the listener, the store, client
//! authentication, the network policy, the embedder, the limits read once at start) keeps its
//! running value, and the log says a restart is needed ([`RESTART_ONLY`]).
//!
//! The file is watched by polling it every second rather than with `notify`: no new
//! dependency, it works the same on every filesystem and through editors that replace the file
//! by renaming, and reading a configuration file once a second costs nothing.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use config::one_line;
use ids::ServerName;
use serde::Serialize;
use upstream::ListKind;

use crate::{Gateway, sync::lock};

/// What one reload did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ReloadReport {
    /// How many configurations have been applied since start (the first is 0).
    pub generation: u64,
    pub added: Vec<ServerName>,
    pub changed: Vec<ServerName>,
    pub removed: Vec<ServerName>,
    pub unchanged: Vec<ServerName>,
    /// Keys the new configuration changes that only a restart applies: the running value
    /// stays.
    pub restart_needed: Vec<&'static str>,
}

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file could not be read, or did not load; in one line, naming file:line.
    #[error("{0}")]
    NotLoaded(String),
}

/// How the last reload went, for `/healthz`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReloadStatus {
    /// `ok`, `failed`, or `null` before the first reload.
    pub last: Option<&'static str>,
    /// The generation of the running configuration.
    pub generation: u64,
    /// When the last reload ended, in seconds since the Unix epoch.
    pub at: Option<u64>,
    /// Why the last reload failed.
    pub error: Option<String>,
    /// What the running configuration's last reload left for a restart.
    pub restart_needed: Vec<&'static str>,
}

/// The gateway's reload state.
#[derive(Default)]
pub(crate) struct Reloads {
    /// One reload at a time.
    applying: tokio::sync::Mutex<()>,
    status: Mutex<ReloadStatus>,
    /// The file's text as the last reload (or the watch's start) read it, so the watch reloads
    /// only what it has not seen.
    seen: Mutex<Option<Vec<u8>>>,
}

impl Gateway {
    /// Reads the configuration file the gateway was started with and applies it
    /// ([`Gateway::apply`]); a file that does not load leaves everything as it is, says why in
    /// one WARN line and in [`Gateway::reload_status`].
    pub async fn reload(self: &Arc<Self>) -> Result<ReloadReport, ReloadError> {
        let path = self.config().source.clone();
        let text = tokio::fs::read(&path).await;
        let text = text.map_err(|error| format!("cannot read {}: {error}", path.display()));
        self.reload_text(&path, text).await
    }

    async fn reload_text(
        self: &Arc<Self>,
        path: &Path,
        text: Result<Vec<u8>, String>,
    ) -> Result<ReloadReport, ReloadError> {
        if let Ok(text) = &text {
            *lock(&self.reloads.seen) = Some(text.clone());
        }
        let loaded = text.and_then(|text| {
            let text = String::from_utf8(text)
                .map_err(|_| format!("{}: not UTF-8 text", path.display()))?;
            config::parse(&text, path).map_err(|error| describe(&error, path))
        });
        match loaded {
            Ok(config) => Ok(self.apply(config).await),
            Err(error) => {
                tracing::warn!(%error, "configuration not reloaded; the running one stays");
                let mut status = lock(&self.reloads.status);
                status.last = Some("failed");
                status.at = Some(unix_now());
                status.error = Some(error.clone());
                Err(ReloadError::NotLoaded(error))
            }
        }
    }

    /// Makes `new` the running configuration, as far as a running gateway can: servers are
    /// added, restarted with new settings, or drained and stopped; unchanged ones keep their
    /// sessions. The catalog is rebuilt and clients hear of the change. Keys only a restart
    /// applies keep their running values (each logged at WARN). Returns once the servers it
    /// started have connected or failed (each bounded by its own timeout).
    pub async fn apply(self: &Arc<Self>, new: config::Config) -> ReloadReport {
        let (report, starting) = {
            let _one_at_a_time = self.reloads.applying.lock().await;
            self.swap(new).await
        };
        futures::future::join_all(starting.iter().map(|server| async move {
            let ready = server.refresh_tools().await.is_ok();
            server.mark_started();
            if ready {
                self.publish_lexical().await;
                // Replicas with this server list it again: its definitions may have changed.
                self.tell_replicas(cluster::Event::Server {
                    name: server.name().clone(),
                });
            }
        }))
        .await;
        if !starting.is_empty() {
            // The new servers' resources and prompts are in the surface now.
            self.listeners.changed(ListKind::Resources);
            self.listeners.changed(ListKind::Prompts);
        }
        report
    }

    /// [`Gateway::apply`] up to the connections of the new servers, which it returns.
    async fn swap(
        self: &Arc<Self>,
        new: config::Config,
    ) -> (ReloadReport, Vec<Arc<upstream::Server>>) {
        let running = self.config();
        let (new, restart_needed) = keep_restart_only(&running, new);
        for key in &restart_needed {
            tracing::warn!(
                key,
                "changed in the configuration file, but only a restart applies it; the running value stays"
            );
        }
        let replaced = self.upstreams.replace(&new, &self.network);
        let grace = new.policy.limits.shutdown_grace;
        *self
            .config
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(new);
        for server in replaced.retired {
            tokio::spawn(async move { server.drain(grace).await });
        }
        let starting: Vec<_> = replaced
            .added
            .iter()
            .chain(&replaced.changed)
            .cloned()
            .collect();
        for server in &starting {
            server.mark_starting();
        }
        let names = |servers: &[Arc<upstream::Server>]| -> Vec<ServerName> {
            servers.iter().map(|s| s.name().clone()).collect()
        };
        // Applies are one at a time: the generation read here is still the latest below.
        let report = ReloadReport {
            generation: lock(&self.reloads.status).generation + 1,
            added: names(&replaced.added),
            changed: names(&replaced.changed),
            removed: replaced.removed,
            unchanged: replaced.unchanged,
            restart_needed,
        };
        tracing::info!(
            generation = report.generation,
            added = ?report.added,
            changed = ?report.changed,
            removed = ?report.removed,
            unchanged = report.unchanged.len(),
            "configuration reloaded"
        );
        // Removed servers' tools leave the catalog now; new ones join as they connect.
        self.publish_lexical().await;
        self.listeners.changed(ListKind::Resources);
        self.listeners.changed(ListKind::Prompts);
        // `ok` once the catalog without the removed servers is out.
        *lock(&self.reloads.status) = ReloadStatus {
            last: Some("ok"),
            generation: report.generation,
            at: Some(unix_now()),
            error: None,
            restart_needed: report.restart_needed.clone(),
        };
        (report, starting)
    }

    /// How the last reload went.
    pub fn reload_status(&self) -> ReloadStatus {
        lock(&self.reloads.status).clone()
    }

    /// Watches the configuration file and reloads it when its contents change and have stayed
    /// the same for a second (an editor's write in several steps is read once, finished). Ends
    /// with the gateway.
    pub fn watch_config_file(self: &Arc<Self>) {
        let path = self.config().source.clone();
        *lock(&self.reloads.seen) = std::fs::read(&path).ok();
        tokio::spawn(watch_file(Arc::downgrade(self), path));
    }
}

/// How often the configuration file is read for changes.
const WATCH_TICK: Duration = Duration::from_secs(1);

async fn watch_file(gateway: std::sync::Weak<Gateway>, path: PathBuf) {
    // A scheduling tick, not a readiness wait.
    let mut tick = tokio::time::interval(WATCH_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Option<Vec<u8>> = None;
    loop {
        tick.tick().await;
        let Some(gateway) = gateway.upgrade() else {
            return;
        };
        // A file missing for a moment (an editor renaming over it) is no change.
        let Ok(now) = tokio::fs::read(&path).await else {
            continue;
        };
        let stable = previous.as_ref() == Some(&now);
        let unseen = lock(&gateway.reloads.seen).as_ref() != Some(&now);
        previous = Some(now.clone());
        if stable && unseen {
            tracing::info!(file = %path.display(), "configuration file changed; reloading");
            // The outcome is logged and kept for `/healthz`.
            let _ = gateway.reload_text(&path, Ok(now)).await;
        }
    }
}

/// Keys of the configuration a running gateway keeps as they were at start, as the file
/// writes them: each is read once, when the listener, store, embedder, logging or tracing is set up,
/// or loosening it on a live listener would be unsafe (client authentication).
pub const RESTART_ONLY: &[&str] = &[
    "gateway.listen",
    "gateway.client_auth",
    "gateway.allow_unauthenticated_loopback",
    "gateway.jwt",
    "gateway.allowed_hosts",
    "gateway.allowed_origins",
    "gateway.log_format",
    "store",
    "network",
    "retrieval.embedder",
    "retrieval.splade",
    "retrieval.field_vectors",
    "limits.request_bytes",
    "limits.response_bytes",
    "limits.max_connections",
    "limits.header_timeout_s",
    "limits.idle_timeout_s",
    "limits.session_idle_s",
    "limits.max_sessions",
    "limits.max_sessions_per_principal",
    "limits.shutdown_grace_s",
    "telemetry",
];

/// `new` with every [`RESTART_ONLY`] key set back to its running value, and the keys that
/// differed.
fn keep_restart_only(
    running: &config::Config,
    mut new: config::Config,
) -> (config::Config, Vec<&'static str>) {
    let mut kept = Vec::new();
    macro_rules! keep {
        ($($key:literal => $($field:ident).+;)+) => {$(
            if new.$($field).+ != running.$($field).+ {
                new.$($field).+ = running.$($field).+.clone();
                kept.push($key);
            }
        )+};
    }
    keep! {
        "gateway.listen" => gateway.listen;
        "gateway.client_auth" => gateway.client_auth;
        "gateway.allow_unauthenticated_loopback" => gateway.allow_unauthenticated_loopback;
        "gateway.jwt" => gateway.jwt;
        "gateway.allowed_hosts" => gateway.allowed_hosts;
        "gateway.allowed_origins" => gateway.allowed_origins;
        "gateway.log_format" => gateway.log_format;
        "store" => store;
        "network" => network;
        "retrieval.embedder" => retrieval.embedder;
        "retrieval.splade" => retrieval.splade;
        "retrieval.field_vectors" => retrieval.field_vectors;
        "limits.request_bytes" => policy.limits.request_bytes;
        "limits.response_bytes" => policy.limits.response_bytes;
        "limits.max_connections" => policy.limits.max_connections;
        "limits.header_timeout_s" => policy.limits.header_timeout;
        "limits.idle_timeout_s" => policy.limits.idle_timeout;
        "limits.session_idle_s" => policy.limits.session_idle;
        "limits.max_sessions" => policy.limits.max_sessions;
        "limits.max_sessions_per_principal" => policy.limits.max_sessions_per_principal;
        "limits.shutdown_grace_s" => policy.limits.shutdown_grace;
        "telemetry" => telemetry;
    }
    (new, kept)
}

/// Why a configuration did not load, in one line, each problem at its file:line:column.
fn describe(error: &config::ConfigError, path: &Path) -> String {
    match error {
        config::ConfigError::Invalid(problems) => problems
            .iter()
            .map(|problem| match problem.location {
                Some(_) => format!("{}:{problem}", path.display()),
                None => format!("{}: {problem}", path.display()),
            })
            .collect::<Vec<_>>()
            .join("; "),
        other => one_line(&other.to_string()),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> config::Config {
        config::parse_toml(text, Path::new("/etc/mcpgw/mcpgw.toml")).expect("config")
    }

    #[test]
    fn restart_only_keys_keep_their_running_values_and_the_rest_apply() {
        let running =
            parse("[gateway]\nlisten = \"127.0.0.1:8931\"\n[limits]\nrequest_bytes = 10000\n");
        let new = parse(
            "[gateway]\nlisten = \"0.0.0.0:9000\"\nexposure = \"passthrough\"\nlog_format = \"json\"\n[limits]\nrequest_bytes = 20000\ncalls_per_minute = 5\n[network]\nallow = [\"10.0.0.0/8\"]\n",
        );
        let (effective, kept) = keep_restart_only(&running, new);
        assert_eq!(
            kept,
            [
                "gateway.listen",
                "gateway.log_format",
                "network",
                "limits.request_bytes"
            ]
        );
        assert_eq!(effective.gateway.listen, running.gateway.listen);
        assert_eq!(effective.network, running.network);
        assert_eq!(effective.policy.limits.request_bytes, 10000);
        assert_eq!(effective.gateway.exposure, config::Exposure::Passthrough);
        assert_eq!(effective.policy.limits.calls_per_minute, Some(5));
        let (_, kept) = keep_restart_only(&running, running.clone());
        assert!(kept.is_empty());
    }

    #[test]
    fn every_restart_only_key_is_listed() {
        // The macro's keys and the published list are the same, in the same order.
        let running = parse("");
        let new = parse(
            r#"
[gateway]
listen = "127.0.0.1:1"
client_auth = "api_key"
allow_unauthenticated_loopback = false
allowed_hosts = ["a.example"]
allowed_origins = ["https://a.example"]
log_format = "json"
[gateway.jwt]
issuer = "https://idp.example"
audience = ["mcpgw"]
jwks_url = "https://idp.example/jwks"
[store]
path = "/tmp/x.db"
[network]
allow = ["10.0.0.0/8"]
[retrieval]
splade = true
field_vectors = false
[retrieval.embedder]
type = "none"
[limits]
request_bytes = 2048
response_bytes = 2048
max_connections = 1
header_timeout_s = 1
idle_timeout_s = 1
session_idle_s = 10
max_sessions = 1
max_sessions_per_principal = 1
shutdown_grace_s = 1
[telemetry]
otlp_endpoint = "http://127.0.0.1:4318"
"#,
        );
        let (_, kept) = keep_restart_only(&running, new);
        assert_eq!(kept, RESTART_ONLY);
    }

    #[test]
    fn a_multi_line_error_becomes_one_line() {
        assert_eq!(
            one_line("a.toml:3:1: error: x\n\n  a.toml: 1 error\n"),
            "a.toml:3:1: error: x; a.toml: 1 error"
        );
    }
}
