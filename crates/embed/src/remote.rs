//! Any OpenAI-compatible `/embeddings` endpoint (OpenAI itself, vLLM, Ollama, llama.cpp,
//! TEI, LiteLLM and other proxies).
//!
//! Wire contract: `POST {base_url}/embeddings` with
//! `{"model", "input": [texts], "encoding_format": "float", "dimensions"?}` and
//! `Authorization: Bearer <key>` when a key is configured; the answer is
//! `{"data": [{"index", "embedding": [floats]}, ...]}`.
//!
//! The server is trusted for numbers, not for shape: the count, the `index` permutation, the
//! dimension and finiteness are checked, items are put back in input order (servers may
//! reorder), and every vector is L2-normalised here because not every server normalises.
//!
//! Failures: connect errors, timeouts, 408, 429 and 5xx are retried with exponential backoff
//! and jitter (429/503 honour `Retry-After`, capped); other 4xx fail at once with the status and
//! the server's (truncated) message. Embedding is idempotent, so retrying a request whose
//! answer was lost is safe. The API key is redacted from everything this module formats,
//! including messages a server echoes back.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::{EmbedError, Embedder, TextKind};

/// Texts per request unless configured otherwise: small enough for every server we know of
/// (OpenAI accepts 2048, some self-hosted servers far fewer), large enough to amortise latency.
pub const DEFAULT_BATCH_SIZE: usize = 64;
/// Bound on one HTTP attempt (connect, send, and reading the whole answer).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries after the first attempt.
pub const DEFAULT_RETRIES: u32 = 3;

/// Where and how to reach an OpenAI-compatible embeddings endpoint.
///
/// Build it with [`RemoteConfig::new`] and struct-update syntax for the rest:
/// `RemoteConfig { api_key: Some(key), ..RemoteConfig::new(url, "text-embedding-3-small") }`.
#[derive(Clone)]
pub struct RemoteConfig {
    /// The API root, e.g. `https://api.openai.com/v1`; `/embeddings` is appended (with or
    /// without a trailing slash here). A query string (Azure's `api-version`) is kept. Must not
    /// carry `user:password@`: credentials belong in `api_key`.
    pub base_url: Url,
    pub model: String,
    /// Sent as `Authorization: Bearer <key>`; no header when `None` (local servers).
    pub api_key: Option<SecretString>,
    /// Texts per request; batches go out one after another.
    pub batch_size: usize,
    /// Bound on each HTTP attempt. The worst case for one batch is
    /// `(retries + 1) * timeout` plus the backoff between attempts.
    pub timeout: Duration,
    /// Retries after the first attempt of each batch.
    pub retries: u32,
    /// The optional `dimensions` request field (text-embedding-3-* can shorten vectors).
    pub dimensions: Option<usize>,
}

impl RemoteConfig {
    /// A config with the defaults: no key, [`DEFAULT_BATCH_SIZE`], [`DEFAULT_TIMEOUT`],
    /// [`DEFAULT_RETRIES`], the model's own dimension.
    pub fn new(base_url: Url, model: impl Into<String>) -> Self {
        RemoteConfig {
            base_url,
            model: model.into(),
            api_key: None,
            batch_size: DEFAULT_BATCH_SIZE,
            timeout: DEFAULT_TIMEOUT,
            retries: DEFAULT_RETRIES,
            dimensions: None,
        }
    }
}

// By hand, not derived: the key must never be printed, and neither must URL credentials
// (rejected by `RemoteEmbedder::new`, but a config can be printed before it is validated).
impl fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("base_url", &without_credentials(&self.base_url).as_str())
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| REDACTED))
            .field("batch_size", &self.batch_size)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("dimensions", &self.dimensions)
            .finish()
    }
}

/// An [`Embedder`] backed by an OpenAI-compatible `/embeddings` endpoint.
///
/// [`RemoteEmbedder::connect`] is the usual way in: it probes the endpoint once, so
/// [`Embedder::dim`] is known and a wrong URL, model or key shows up at startup rather than on
/// the first search. [`RemoteEmbedder::new`] does no IO; its `dim()` is the configured
/// `dimensions`, else 0 until the first successful call.
pub struct RemoteEmbedder {
    client: reqwest::Client,
    endpoint: Url,
    id: String,
    model: String,
    api_key: Option<SecretString>,
    batch_size: usize,
    timeout: Duration,
    retries: u32,
    dimensions: Option<usize>,
    /// 0 until learned; afterwards every answer must match it.
    dim: AtomicUsize,
    backoff: Backoff,
}

impl RemoteEmbedder {
    /// Validates `config` without touching the network. `client` is shared so connection
    /// pools, proxies and TLS roots are configured once by the caller; the per-request timeout
    /// comes from `config`, not from the client.
    pub fn new(config: RemoteConfig, client: reqwest::Client) -> Result<Self, EmbedError> {
        let invalid = |reason: String| EmbedError::Remote {
            endpoint: without_credentials(&config.base_url).to_string(),
            reason: format!("invalid configuration: {reason}"),
        };
        // Rejected rather than stripped: reqwest would turn them into a Basic header next to
        // our Bearer one, and they would end up in the cache key.
        if !config.base_url.username().is_empty() || config.base_url.password().is_some() {
            return Err(invalid(
                "base_url must not contain credentials; use the api key setting".into(),
            ));
        }
        let endpoint = embeddings_url(&config.base_url).map_err(invalid)?;
        if config.model.trim().is_empty() {
            return Err(invalid("model is empty".into()));
        }
        if config.batch_size == 0 {
            return Err(invalid("batch_size must be at least 1".into()));
        }
        if config.timeout.is_zero() {
            return Err(invalid("timeout must be positive".into()));
        }
        if config.dimensions == Some(0) {
            return Err(invalid("dimensions must be at least 1".into()));
        }
        if config.api_key.is_some() && endpoint.scheme() == "http" && !is_loopback(&endpoint) {
            // Allowed (self-hosted servers on a private network are common), but worth a
            // warning: the key crosses the network in clear text.
            tracing::warn!(
                endpoint = %endpoint,
                "sending the embedding API key over plain http to a non-loopback host"
            );
        }

        Ok(RemoteEmbedder {
            client,
            id: embedder_id(&config.model, &config.base_url, config.dimensions),
            endpoint,
            model: config.model,
            api_key: config.api_key,
            batch_size: config.batch_size,
            timeout: config.timeout,
            retries: config.retries,
            dimensions: config.dimensions,
            dim: AtomicUsize::new(config.dimensions.unwrap_or(0)),
            backoff: Backoff::DEFAULT,
        })
    }

    /// [`RemoteEmbedder::new`], then one request with a one-word input (retried like any
    /// other) to learn the dimension and to fail early on a wrong URL, model or key.
    pub async fn connect(
        config: RemoteConfig,
        client: reqwest::Client,
    ) -> Result<Self, EmbedError> {
        let embedder = Self::new(config, client)?;
        embedder
            .embed(&["probe".to_owned()], TextKind::Query)
            .await?;
        Ok(embedder)
    }

    async fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let request = WireRequest {
            model: &self.model,
            input: texts,
            encoding_format: "float",
            dimensions: self.dimensions,
        };
        let mut retry = 0;
        let vectors = loop {
            match self.attempt(&request).await {
                Ok(vectors) => break vectors,
                Err(Failure::Fatal(reason)) => return Err(self.error(reason)),
                Err(Failure::Transient {
                    reason,
                    retry_after,
                }) => {
                    if retry >= self.retries {
                        let attempts = retry + 1;
                        let plural = if attempts == 1 { "" } else { "s" };
                        return Err(self.error(format!(
                            "gave up after {attempts} attempt{plural}; last error: {reason}"
                        )));
                    }
                    let delay =
                        retry_after.unwrap_or_else(|| self.backoff.delay(retry, random_unit()));
                    tracing::warn!(
                        endpoint = %self.endpoint,
                        attempt = retry + 1,
                        ?delay,
                        reason = %self.redact(reason),
                        "embedding request failed; retrying"
                    );
                    tokio::time::sleep(delay).await;
                    retry += 1;
                }
            }
        };
        if let Some(first) = vectors.first() {
            self.check_dim(first.len())
                .map_err(|reason| self.error(reason))?;
        }
        Ok(vectors)
    }

    /// One HTTP exchange, classified into success, worth retrying, or not.
    async fn attempt(&self, request: &WireRequest<'_>) -> Result<Vec<Vec<f32>>, Failure> {
        let mut builder = self
            .client
            .post(self.endpoint.clone())
            .timeout(self.timeout)
            .json(request);
        if let Some(key) = &self.api_key {
            // reqwest marks this header sensitive, so it stays out of its own debug output.
            builder = builder.bearer_auth(key.expose_secret());
        }
        let mut response = builder.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();

        if status.is_success() {
            let limit = MAX_BODY_PER_INPUT
                .saturating_mul(request.input.len())
                .saturating_add(MAX_BODY_BASE);
            let (body, complete) = read_prefix(&mut response, limit)
                .await
                .map_err(|e| self.transport(e))?;
            if !complete {
                return Err(Failure::Fatal(format!(
                    "response body is larger than {limit} bytes"
                )));
            }
            return parse_embeddings(&body, request.input.len())
                .map_err(|reason| Failure::Fatal(format!("invalid response: {reason}")));
        }

        let retry_after = retry_after(response.headers());
        // The message is a courtesy: if reading it fails, the status alone still explains.
        let message = match read_prefix(&mut response, MAX_ERROR_BODY).await {
            Ok((body, _)) => server_message(&body, self.api_key.as_ref()),
            Err(_) => String::new(),
        };
        let reason = if message.is_empty() {
            format!("server answered {status}")
        } else {
            format!("server answered {status}: {message}")
        };
        // 408 is the server timing out on us, the same condition as our own timeout.
        if status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
            || status.is_server_error()
        {
            Err(Failure::Transient {
                reason,
                retry_after,
            })
        } else {
            Err(Failure::Fatal(reason))
        }
    }

    fn transport(&self, error: reqwest::Error) -> Failure {
        let reason = if error.is_timeout() {
            format!("request timed out after {:?}", self.timeout)
        } else if error.is_connect() {
            format!("could not connect: {}", error_chain(error))
        } else if error.is_builder() || error.is_redirect() {
            // Our request or the server's redirects are wrong; the next attempt would be too.
            return Failure::Fatal(format!("request failed: {}", error_chain(error)));
        } else {
            // Connection reset, truncated body and the like: transient, and embedding is
            // idempotent, so another attempt is safe.
            format!("request failed: {}", error_chain(error))
        };
        Failure::Transient {
            reason,
            retry_after: None,
        }
    }

    fn check_dim(&self, dim: usize) -> Result<(), String> {
        if let Some(asked) = self.dimensions
            && asked != dim
        {
            return Err(format!(
                "asked for {asked} dimensions, server returned {dim}"
            ));
        }
        match self
            .dim
            .compare_exchange(0, dim, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(known) if known == dim => Ok(()),
            Err(known) => Err(format!(
                "server returned {dim}-dimensional vectors, earlier ones had {known}"
            )),
        }
    }

    /// The single way errors leave this module, so the key is redacted in one place.
    fn error(&self, reason: String) -> EmbedError {
        EmbedError::Remote {
            endpoint: self.endpoint.to_string(),
            reason: self.redact(reason),
        }
    }

    fn redact(&self, text: String) -> String {
        redact(text, self.api_key.as_ref())
    }
}

impl Embedder for RemoteEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn dim(&self) -> usize {
        self.dim.load(Ordering::Acquire)
    }

    /// `kind` is ignored: the OpenAI API has no query/passage distinction, and a model that
    /// wants prefixes (E5 behind vLLM) would need them configured, not guessed.
    fn embed<'a>(
        &'a self,
        texts: &'a [String],
        _kind: TextKind,
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move {
            let mut vectors = Vec::with_capacity(texts.len());
            // Sequential on purpose: a catalog refresh can embed thousands of tool
            // descriptions, and one batch in flight keeps us well inside rate limits and off a
            // small self-hosted server's back; embedding is a background job, not a hot path.
            for batch in texts.chunks(self.batch_size) {
                vectors.extend(self.embed_batch(batch).await?);
            }
            Ok(vectors)
        })
    }
}

impl fmt::Debug for RemoteEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteEmbedder")
            .field("id", &self.id)
            .field("endpoint", &self.endpoint.as_str())
            .field("api_key", &self.api_key.as_ref().map(|_| REDACTED))
            .field("batch_size", &self.batch_size)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("dim", &self.dim())
            .finish_non_exhaustive()
    }
}

const REDACTED: &str = "[redacted]";
/// `Retry-After` is honoured up to this; a server asking for minutes gets a retry sooner and,
/// if still limited, a clear error instead of a refresh stalled for that long.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(20);
/// Server error messages are cut to this many characters: enough to explain, too short to
/// flood a log with an HTML error page.
const MAX_MESSAGE_CHARS: usize = 300;
const MAX_ERROR_BODY: usize = 64 * 1024;
/// A 4096-dimensional vector is about 90 KB of JSON floats; the bound only stops a broken or
/// hostile server from exhausting memory.
const MAX_BODY_PER_INPUT: usize = 256 * 1024;
const MAX_BODY_BASE: usize = 1024 * 1024;

#[derive(Serialize)]
struct WireRequest<'a> {
    model: &'a str,
    input: &'a [String],
    encoding_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dimensions: Option<usize>,
}

#[derive(Deserialize)]
struct WireResponse {
    data: Vec<WireItem>,
}

#[derive(Deserialize)]
struct WireItem {
    // Optional because some minimal servers leave it out; then array order is all we have.
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

enum Failure {
    Transient {
        reason: String,
        retry_after: Option<Duration>,
    },
    Fatal(String),
}

/// Exponential backoff with "equal jitter": the n-th retry waits between half and all of
/// `base * 2^n` (capped), so clients that failed together do not retry together, yet never
/// retry immediately.
#[derive(Clone, Copy, Debug)]
struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    const DEFAULT: Backoff = Backoff {
        base: Duration::from_millis(250),
        max: Duration::from_secs(8),
    };

    /// `unit` is a random number in [0, 1].
    fn delay(self, retry: u32, unit: f64) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        let nominal = self.base.saturating_mul(factor).min(self.max);
        nominal.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
    }
}

/// A random number in [0, 1). Every `RandomState` gets fresh keys, which is plenty for jitter
/// and spares a dependency on a random number crate.
fn random_unit() -> f64 {
    let bits = RandomState::new().hash_one(SystemTime::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// `{base}/embeddings`, whether or not `base` ends with a slash; `Url::join` would replace
/// the last segment of `https://api.openai.com/v1` instead of appending to it.
fn embeddings_url(base: &Url) -> Result<Url, String> {
    if !matches!(base.scheme(), "http" | "https") {
        return Err(format!(
            "base_url must be http or https, not {}",
            base.scheme()
        ));
    }
    let mut url = base.clone();
    url.path_segments_mut()
        .map_err(|()| "base_url cannot have a path".to_owned())?
        .pop_if_empty()
        .push("embeddings");
    url.set_fragment(None);
    Ok(url)
}

/// The cache key: the model, the base URL without a trailing slash (so `v1` and `v1/` share
/// a cache), and `dimensions` when set, because shortened vectors are different vectors.
fn embedder_id(model: &str, base_url: &Url, dimensions: Option<usize>) -> String {
    let base = without_credentials(base_url);
    let base = base.as_str().trim_end_matches('/');
    match dimensions {
        Some(d) => format!("openai/{model}@{base}#dimensions={d}"),
        None => format!("openai/{model}@{base}"),
    }
}

fn without_credentials(url: &Url) -> Url {
    let mut url = url.clone();
    // Both fail only for URLs that cannot carry credentials in the first place.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Reads at most `limit` bytes of the body; the flag says whether that was all of it.
async fn read_prefix(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

/// Unit vectors in input order, or why the answer cannot be trusted.
fn parse_embeddings(body: &[u8], expected: usize) -> Result<Vec<Vec<f32>>, String> {
    let response: WireResponse =
        serde_json::from_slice(body).map_err(|e| format!("not an embeddings response: {e}"))?;
    let got = response.data.len();
    if got != expected {
        return Err(format!("expected {expected} embeddings, got {got}"));
    }

    let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
    let positional = response.data.iter().all(|item| item.index.is_none());
    for (position, item) in response.data.into_iter().enumerate() {
        let index = match (item.index, positional) {
            (Some(index), _) => index,
            (None, true) => position,
            (None, false) => return Err(format!("item {position} has no index")),
        };
        let slot = slots
            .get_mut(index)
            .ok_or_else(|| format!("index {index} is out of range for {expected} inputs"))?;
        if slot.is_some() {
            return Err(format!("index {index} appears twice"));
        }
        *slot = Some(item.embedding);
    }
    // Every slot is filled: `expected` items with distinct in-range indexes.
    let mut vectors: Vec<Vec<f32>> = slots.into_iter().flatten().collect();

    let dim = vectors.first().map_or(0, Vec::len);
    if dim == 0 && expected > 0 {
        return Err("embedding 0 is empty".into());
    }
    for (index, vector) in vectors.iter_mut().enumerate() {
        if vector.len() != dim {
            return Err(format!(
                "embedding {index} has {} dimensions, embedding 0 has {dim}",
                vector.len()
            ));
        }
        normalise(vector).map_err(|problem| format!("embedding {index} {problem}"))?;
    }
    Ok(vectors)
}

/// Scales to unit L2 norm; the sum runs in f64 so large components cannot overflow it.
fn normalise(vector: &mut [f32]) -> Result<(), &'static str> {
    let norm = vector
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if !norm.is_finite() {
        return Err("contains a non-finite value");
    }
    if norm == 0.0 {
        return Err("is all zeros and cannot be normalised");
    }
    for x in vector.iter_mut() {
        *x = (f64::from(*x) / norm) as f32;
    }
    Ok(())
}

/// The wait a 429/503 asks for: OpenAI's `retry-after-ms`, else `Retry-After` in seconds
/// (the HTTP-date form is rare for APIs and falls back to our own backoff).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    let seconds = header("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| header(RETRY_AFTER.as_str()))?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    Some(Duration::from_secs_f64(
        seconds.min(MAX_RETRY_AFTER.as_secs_f64()),
    ))
}

/// The human part of an error body (`{"error": {"message"}}` for OpenAI, `{"error": "..."}`
/// for Ollama, `{"detail"}` or `{"message"}` elsewhere, else the raw text) on one line, with
/// the key redacted before it is cut, so a cut cannot leave a recognisable prefix behind.
fn server_message(body: &[u8], key: Option<&SecretString>) -> String {
    let text = String::from_utf8_lossy(body);
    let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
    let from_json = json.as_ref().and_then(|json| {
        let error = json.get("error");
        error
            .and_then(|e| e.get("message"))
            .or(error)
            .or_else(|| json.get("message"))
            .or_else(|| json.get("detail"))
            .and_then(serde_json::Value::as_str)
    });
    let message = from_json.unwrap_or(&text);
    let one_line = message
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    truncate(redact(one_line, key), MAX_MESSAGE_CHARS)
}

fn redact(text: String, key: Option<&SecretString>) -> String {
    match key.map(ExposeSecret::expose_secret) {
        Some(key) if !key.is_empty() && text.contains(key) => text.replace(key, REDACTED),
        _ => text,
    }
}

fn truncate(text: String, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// reqwest's message plus its causes ("error sending request: client error (Connect):
/// connection refused"), without the URL, which the error already names.
fn error_chain(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests;
