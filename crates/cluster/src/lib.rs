//! What mcpgw replicas share live, through Redis (`[store] redis`): events every replica must
//! hear at once, rate-limit buckets, and pending OAuth logins.
//!
//! One [`Cluster`] per process holds two connections to one Redis: a command connection (a
//! redis-rs `ConnectionManager`, which reconnects by itself) and a pub/sub connection that a
//! background task keeps subscribed to the namespace's channel, reconnecting with a backoff.
//! Another task pings Redis every second, so [`Cluster::is_up`] says within about a second
//! that Redis went away or came back.
//!
//! - [`Event`]s ([`Cluster::publish`], [`Cluster::events`]): an approval decided (the replica
//!   holding the waiting call wakes it), a server whose lists must be fetched again (a catalog
//!   and pin invalidation), a legacy session ended through one replica (the others close their
//!   copies of it), a sign-in finished (the replica whose call waits for it wakes it). Each
//!   process hears only the others' events, never its own.
//! - [`Cluster::take_token`]: one call from a shared token bucket (an atomic Lua script on
//!   Redis's own clock, so the replicas' clocks do not matter).
//! - [`Cluster::put_auth_state`] / [`Cluster::take_auth_state`]: a pending authorization kept
//!   under its `state` for [`AUTH_STATE_TTL`] (`SET … EX … NX`), taken once (`GETDEL`). The
//!   gateway keeps each sign-in it starts there, sealed by the caller (it holds the PKCE
//!   verifier), so that the browser's return may land on any replica; the take is the one
//!   authority on whether a login was used.
//!
//! Invariants:
//! - Redis is never the only record of anything that must survive: a decision, a pin or a
//!   credential is written to the database first, and an event only says "look again". A lost
//!   event costs latency (the waiting call's database poll, the periodic re-listing), never a
//!   wrong answer.
//! - Nothing here blocks a caller on a Redis that is down: commands are bounded by
//!   [`COMMAND_TIMEOUT`], and while the last ping failed they fail at once, so callers fall
//!   back to what one process can do alone.
//! - No Redis URL, password or stored value appears in a log, an error or `Debug` output.
//! - Every key and channel is under one namespace (`mcpgw` in production), so several
//!   installations or test runs can share one Redis.

use std::{
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::StreamExt as _;
use ids::{PrincipalId, ServerName};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};

/// The namespace of mcpgw's keys and channel in production.
pub const NAMESPACE: &str = "mcpgw";

/// How long a pending authorization stays takeable (the database's `AUTH_STATE_TTL`).
pub const AUTH_STATE_TTL: Duration = Duration::from_secs(10 * 60);

/// Longest a command may take, connecting included.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// How often Redis is pinged to know whether it is up.
const PING_EVERY: Duration = Duration::from_secs(1);

/// First and longest wait between attempts to subscribe again.
const RESUBSCRIBE_FIRST: Duration = Duration::from_millis(200);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(5);

/// What one replica tells the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// Approval `id` was decided (the decision is in the database).
    Approval { id: String },
    /// Server `name`'s lists changed, or its definitions must be checked against the pins
    /// again: list it again.
    Server { name: ServerName },
    /// A sign-in of `principal` to `server` finished (the tokens, if it succeeded, are in the
    /// database): `failure` says why it did not, `None` when it did.
    Login {
        server: ServerName,
        principal: PrincipalId,
        failure: Option<String>,
    },
    /// The legacy session whose client id has this SHA-256 (lowercase hex) was ended with
    /// HTTP DELETE through the sending replica (and recorded as ended in the database): a
    /// replica holding a copy of it closes that copy. Only the digest travels, never the id.
    SessionEnded { digest: String },
    /// Not sent by anyone: this process subscribed again after losing Redis, and may have
    /// missed events meanwhile.
    Resubscribed,
}

/// An event as it travels: who sent it, so a process ignores its own.
#[derive(Serialize, Deserialize)]
struct Wire {
    from: String,
    event: Event,
}

/// Why a Redis operation failed. No message carries the URL or a stored value.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("the Redis URL is not usable ({0})")]
    Url(String),
    #[error("redis is unreachable")]
    Down,
    #[error("redis did not answer within {}ms", COMMAND_TIMEOUT.as_millis())]
    Timeout,
    #[error("redis refused the command: {0}")]
    Redis(String),
}

impl From<redis::RedisError> for ClusterError {
    fn from(error: redis::RedisError) -> Self {
        // The kind and the server's message only: `Display` of a connection error may carry
        // the address, never the password, but the category is all a caller needs.
        if error.is_connection_refusal() || error.is_connection_dropped() || error.is_io_error() {
            ClusterError::Down
        } else if error.is_timeout() {
            ClusterError::Timeout
        } else {
            ClusterError::Redis(format!("{:?}", error.kind()))
        }
    }
}

/// A process's link to the shared Redis. Cheap to clone; the background tasks end when the
/// last clone is dropped.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    namespace: String,
    /// This process's id in events (random per process).
    origin: String,
    commands: ConnectionManager,
    client: redis::Client,
    events: broadcast::Sender<Event>,
    /// Whether the last ping was answered.
    reachable: watch::Sender<bool>,
    /// Whether the event subscription is in place.
    subscribed: AtomicBool,
    /// Events published and received, for the health report.
    published: AtomicU64,
    received: AtomicU64,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.inner.namespace)
            .field("up", &self.is_up())
            .finish_non_exhaustive()
    }
}

/// What `/healthz` shows of Redis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterHealth {
    /// `up` or `down`.
    pub redis: &'static str,
    /// Whether this process hears the other replicas' events now.
    pub subscribed: bool,
    pub events_published: u64,
    pub events_received: u64,
}

impl Cluster {
    /// Links this process to the Redis at `url` under `namespace`. Returns at once: the
    /// connections are made in the background (Redis may be down now and come up later).
    /// Must be called within a tokio runtime.
    pub fn connect(url: &str, namespace: &str) -> Result<Cluster, ClusterError> {
        let client = redis::Client::open(url)
            .map_err(|error| ClusterError::Url(format!("{:?}", error.kind())))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(COMMAND_TIMEOUT))
            .set_response_timeout(Some(COMMAND_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let commands = ConnectionManager::new_lazy_with_config(client.clone(), config)?;
        let (events, _) = broadcast::channel(1024);
        let inner = Arc::new(Inner {
            namespace: namespace.to_owned(),
            origin: origin(),
            commands,
            client,
            events,
            reachable: watch::Sender::new(false),
            subscribed: AtomicBool::new(false),
            published: AtomicU64::new(0),
            received: AtomicU64::new(0),
        });
        tokio::spawn(ping(Arc::downgrade(&inner)));
        tokio::spawn(subscribe(Arc::downgrade(&inner)));
        Ok(Cluster { inner })
    }

    /// Whether Redis answered the last ping and the event subscription is in place.
    pub fn is_up(&self) -> bool {
        *self.inner.reachable.borrow() && self.inner.subscribed.load(Ordering::SeqCst)
    }

    /// Waits until [`Cluster::is_up`] or `timeout` passes; says which.
    pub async fn wait_up(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, async {
            while !self.is_up() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .is_ok()
    }

    pub fn health(&self) -> ClusterHealth {
        ClusterHealth {
            redis: if *self.inner.reachable.borrow() {
                "up"
            } else {
                "down"
            },
            subscribed: self.inner.subscribed.load(Ordering::SeqCst),
            events_published: self.inner.published.load(Ordering::Relaxed),
            events_received: self.inner.received.load(Ordering::Relaxed),
        }
    }

    /// The other replicas' events, from now on (and [`Event::Resubscribed`]).
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.inner.events.subscribe()
    }

    /// Tells every other replica subscribed now.
    pub async fn publish(&self, event: &Event) -> Result<(), ClusterError> {
        let wire = Wire {
            from: self.inner.origin.clone(),
            event: event.clone(),
        };
        let payload = serde_json::to_string(&wire)
            .map_err(|error| ClusterError::Redis(format!("event not encoded: {error}")))?;
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(self.inner.channel()).arg(payload);
        let _: i64 = self.query(&cmd).await?;
        self.inner.published.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Takes one call from `key`'s shared bucket of `per_minute` calls a minute (a burst of
    /// `per_minute` tokens refilled at `per_minute` a minute). `Ok(Err(wait))`: empty, a token
    /// is back after `wait`. `per_minute` must not be 0 (the caller refuses those itself).
    pub async fn take_token(
        &self,
        key: &str,
        per_minute: u32,
    ) -> Result<Result<(), Duration>, ClusterError> {
        if per_minute == 0 {
            return Ok(Err(Duration::from_secs(60)));
        }
        self.ready()?;
        let script = redis::Script::new(TOKEN_BUCKET);
        let mut invocation = script.prepare_invoke();
        invocation
            .key(format!("{}:rate:{key}", self.inner.namespace))
            .arg(per_minute);
        let wait: i64 = self
            .inner
            .retried(|mut commands| {
                let invocation = &invocation;
                async move { invocation.invoke_async(&mut commands).await }
            })
            .await?;
        Ok(match u64::try_from(wait) {
            Ok(0) | Err(_) => Ok(()),
            Ok(ms) => Err(Duration::from_millis(ms)),
        })
    }

    /// Keeps `payload` under `state` for [`AUTH_STATE_TTL`]. `Ok(false)`: that state is
    /// pending already (states are never reused), and nothing was written.
    pub async fn put_auth_state(&self, state: &str, payload: &str) -> Result<bool, ClusterError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.inner.state_key(state))
            .arg(payload)
            .arg("EX")
            .arg(AUTH_STATE_TTL.as_secs())
            .arg("NX");
        let set: Option<String> = self.query(&cmd).await?;
        Ok(set.is_some())
    }

    /// Takes what is pending under `state`, once: `None` when unknown, taken or expired.
    pub async fn take_auth_state(&self, state: &str) -> Result<Option<String>, ClusterError> {
        let mut cmd = redis::cmd("GETDEL");
        cmd.arg(self.inner.state_key(state));
        self.query(&cmd).await
    }

    /// Fails at once while the last ping failed, so no caller waits on a Redis known down.
    fn ready(&self) -> Result<(), ClusterError> {
        if *self.inner.reachable.borrow() {
            Ok(())
        } else {
            Err(ClusterError::Down)
        }
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, ClusterError> {
        self.ready()?;
        self.inner
            .retried(|mut commands| async move { cmd.query_async(&mut commands).await })
            .await
    }
}

impl Inner {
    /// Runs `command` on the command connection within [`COMMAND_TIMEOUT`]. A connection that
    /// broke (Redis restarted) fails the first command and is replaced by the manager: that
    /// one failure is retried once, on the new connection.
    async fn retried<T, F, Fut>(&self, command: F) -> Result<T, ClusterError>
    where
        F: Fn(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        tokio::time::timeout(COMMAND_TIMEOUT, async {
            match command(self.commands.clone()).await {
                Err(error) if error.is_connection_dropped() || error.is_io_error() => {
                    Ok(command(self.commands.clone()).await?)
                }
                other => Ok(other?),
            }
        })
        .await
        .map_err(|_| ClusterError::Timeout)?
    }

    fn channel(&self) -> String {
        format!("{}:events", self.namespace)
    }

    fn state_key(&self, state: &str) -> String {
        format!("{}:oauth-state:{state}", self.namespace)
    }

    fn set_reachable(&self, up: bool) {
        let was = self.reachable.send_replace(up);
        if was != up {
            if up {
                tracing::info!("redis is reachable");
            } else {
                tracing::warn!(
                    "redis is unreachable: this replica carries on alone (approvals and catalog changes of other replicas are seen by polling, rate limits are counted here)"
                );
            }
        }
    }
}

/// A token bucket per key, on Redis's clock. ARGV[1]: calls a minute (the burst and the refill
/// rate). Returns 0 when a token was taken, else the milliseconds until one is back. A bucket
/// untouched for a minute is full, the same as none, so it expires then.
const TOKEN_BUCKET: &str = r"
local capacity = tonumber(ARGV[1])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = capacity
  at = now
end
local elapsed = now - at
if elapsed < 0 then elapsed = 0 end
tokens = math.min(capacity, tokens + elapsed * capacity / 60000)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = math.ceil((1 - tokens) * 60000 / capacity)
  if wait < 1 then wait = 1 end
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], 61000)
return wait
";

/// A process id for events: not a secret, only distinct between processes.
fn origin() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    format!("{}-{:016x}", std::process::id(), hasher.finish())
}

/// Pings Redis every [`PING_EVERY`] while the cluster lives, recording whether it answered.
async fn ping(inner: Weak<Inner>) {
    let mut tick = tokio::time::interval(PING_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let answered = inner
            .retried(|mut commands| async move {
                redis::cmd("PING")
                    .query_async::<String>(&mut commands)
                    .await
            })
            .await;
        inner.set_reachable(answered.is_ok());
    }
}

/// Keeps the event subscription in place while the cluster lives: subscribes, forwards each
/// other process's event, and subscribes again (with a backoff) when the connection drops or
/// the pings stop being answered.
async fn subscribe(inner: Weak<Inner>) {
    let mut wait = RESUBSCRIBE_FIRST;
    let mut ever = false;
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let client = strong.client.clone();
        let channel = strong.channel();
        let mut reachable = strong.reachable.subscribe();
        drop(strong);
        let connected = tokio::time::timeout(COMMAND_TIMEOUT, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        let pubsub = match connected {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(_)) | Err(_) => {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RESUBSCRIBE_MAX);
                continue;
            }
        };
        wait = RESUBSCRIBE_FIRST;
        {
            let Some(strong) = inner.upgrade() else {
                return;
            };
            strong.subscribed.store(true, Ordering::SeqCst);
            // The command connection may not know yet: say it is up now rather than at the
            // next ping, since the subscription just answered.
            strong.set_reachable(true);
            if ever {
                tracing::info!("subscribed to the other replicas' events again");
                let _ = strong.events.send(Event::Resubscribed);
            }
        }
        ever = true;
        let mut messages = pubsub.into_on_message();
        loop {
            tokio::select! {
                message = messages.next() => {
                    let Some(message) = message else { break };
                    let Some(strong) = inner.upgrade() else { return };
                    let Ok(payload) = message.get_payload::<String>() else { continue };
                    match serde_json::from_str::<Wire>(&payload) {
                        Ok(wire) if wire.from == strong.origin => {}
                        Ok(wire) => {
                            strong.received.fetch_add(1, Ordering::Relaxed);
                            let _ = strong.events.send(wire.event);
                        }
                        Err(error) => {
                            tracing::warn!(%error, "ignored an unreadable event from another replica");
                        }
                    }
                }
                changed = reachable.wait_for(|up| !*up) => {
                    // The pings stopped being answered: this subscription may be half open.
                    let _ = changed;
                    break;
                }
            }
        }
        let Some(strong) = inner.upgrade() else {
            return;
        };
        strong.subscribed.store(false, Ordering::SeqCst);
        // Most often Redis went away: say so now rather than at the next failed ping (the
        // next answered one says it is back), so callers stop trying it at once.
        strong.set_reachable(false);
        tracing::warn!("lost the subscription to the other replicas' events; subscribing again");
        drop(strong);
        tokio::time::sleep(RESUBSCRIBE_FIRST).await;
    }
}

#[cfg(test)]
mod tests;
