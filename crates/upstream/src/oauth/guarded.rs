//! The HTTP client of every OAuth request ([`GuardedOAuthClient`]): each URL checked by the
//! network guard, bounded in time and size, with the configured extra parameters added.

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use futures::StreamExt;
use netguard::{Policy, Refusal};
use rmcp::transport::auth::{
    AuthorizationManager, OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture,
    OAuthHttpRedirectPolicy, OAuthHttpRequest,
};
use url::Url;

use crate::lock;

use super::{AuthError, error::*, settings::*};

/// An rmcp manager for `server_url` whose every OAuth request goes through a
/// [`GuardedOAuthClient`] under `settings.policy`, and that client, to explain refusals.
pub(super) async fn new_manager(
    server_url: &str,
    settings: &OAuthSettings,
) -> Result<(AuthorizationManager, Arc<GuardedOAuthClient>), OAuthError> {
    let http = Arc::new(GuardedOAuthClient::new(settings)?);
    let manager = AuthorizationManager::new_with_oauth_http_client(
        server_url,
        http.clone() as Arc<dyn OAuthHttpClient>,
    )
    .await
    .map_err(OAuthError::Discovery)?;
    Ok((manager, http))
}

/// Bound on an OAuth request when rmcp suggests none (rmcp's own default).
const OAUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest OAuth response body read (rmcp's own limit): metadata, tokens and registrations are
/// small, and a hostile server must not make us buffer without bound.
const MAX_OAUTH_BODY_BYTES: usize = 1024 * 1024;

/// rmcp's [`OAuthHttpClient`] under the network policy: every request URL is checked with
/// `netguard::check_url` first (rmcp's default client would catch IP literals only for
/// discovered URLs), and both reqwest clients come from `netguard::guarded_client_builder`, so
/// names resolve only to admitted addresses and every redirect hop is judged. It also adds the
/// configured `token_params` to token requests: rmcp offers no other hook into them.
///
/// rmcp stringifies some failures (a token request's becomes "Request failed"), losing the
/// refusal; the last refusal is kept so that callers can still say what was refused.
pub(super) struct GuardedOAuthClient {
    policy: Arc<Policy>,
    /// Follows redirects (at most ten, each judged); for requests rmcp lets follow.
    follow: reqwest::Client,
    /// Follows none; rmcp handles (same-origin) redirects itself where it wants them.
    stop: reqwest::Client,
    token_params: Vec<(String, String)>,
    /// The refusal of the last request, if it was refused.
    refused: Mutex<Option<Refusal>>,
    /// Whether a refresh-token grant was sent since [`GuardedOAuthClient::take_refresh_sent`]
    /// last asked: rmcp refreshes inside `get_access_token` without saying so.
    refresh_sent: AtomicBool,
}

impl GuardedOAuthClient {
    fn new(settings: &OAuthSettings) -> Result<Self, OAuthError> {
        let build = |builder: reqwest::ClientBuilder| {
            builder
                .build()
                .map_err(|e| OAuthError::HttpClient(e.to_string()))
        };
        let policy = settings.policy.clone();
        Ok(Self {
            follow: build(netguard::guarded_client_builder(policy.clone()))?,
            stop: build(
                netguard::guarded_client_builder(policy.clone())
                    .redirect(reqwest::redirect::Policy::none()),
            )?,
            policy,
            token_params: settings
                .token_params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            refused: Mutex::new(None),
            refresh_sent: AtomicBool::new(false),
        })
    }

    /// Whether a refresh-token grant was sent since the last call; resets it.
    pub(super) fn take_refresh_sent(&self) -> bool {
        self.refresh_sent.swap(false, Ordering::Relaxed)
    }

    /// The refusal of the last request, if the network policy refused it.
    pub(super) fn last_refusal(&self) -> Option<Refusal> {
        lock(&self.refused).clone()
    }

    /// `error` as an [`OAuthError`]: [`OAuthError::Refused`] when the network policy refused
    /// the request behind it (found in its chain, or the last request's), else `otherwise`.
    pub(super) fn explain(
        &self,
        error: AuthError,
        otherwise: fn(AuthError) -> OAuthError,
    ) -> OAuthError {
        match Refusal::find_in(&error)
            .cloned()
            .or_else(|| self.last_refusal())
        {
            Some(refusal) => OAuthError::Refused(refusal),
            None => otherwise(error),
        }
    }

    async fn send(
        &self,
        request: OAuthHttpRequest,
    ) -> Result<oauth2::HttpResponse, OAuthHttpClientError> {
        let OAuthHttpRequest {
            mut request,
            redirect_policy,
            timeout,
            ..
        } = request;
        add_token_params(&mut request, &self.token_params);
        if grant_type(&request).as_deref() == Some("refresh_token") {
            self.refresh_sent.store(true, Ordering::Relaxed);
        }
        let mut request = reqwest::Request::try_from(request)?;
        netguard::check_url(request.url(), &self.policy).inspect_err(|refusal| {
            tracing::warn!(%refusal, "oauth request refused");
        })?;
        *request.timeout_mut() = Some(timeout.unwrap_or(OAUTH_TIMEOUT));
        let client = match redirect_policy {
            OAuthHttpRedirectPolicy::Follow => &self.follow,
            // `Stop`, and whatever a later rmcp adds: not following is the safe reading.
            _ => &self.stop,
        };
        let url = request.url().clone();
        let response =
            client
                .execute(request)
                .await
                .map_err(|error| match Refusal::find_in(&error) {
                    Some(refusal) => Box::new(refusal.clone().at(&url)) as OAuthHttpClientError,
                    None => Box::new(error),
                })?;
        let mut builder = oauth2::http::Response::builder()
            .status(response.status())
            .version(response.version());
        for (name, value) in response.headers() {
            builder = builder.header(name, value);
        }
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            if chunk.len() > MAX_OAUTH_BODY_BYTES - body.len() {
                return Err(
                    format!("OAuth response body exceeds {MAX_OAUTH_BODY_BYTES} bytes").into(),
                );
            }
            body.extend_from_slice(&chunk);
        }
        Ok(builder.body(body)?)
    }
}

impl OAuthHttpClient for GuardedOAuthClient {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            *lock(&self.refused) = None;
            let result = self.send(request).await;
            if let Err(error) = &result
                && let Some(refusal) = Refusal::find_in(error.as_ref())
            {
                *lock(&self.refused) = Some(refusal.clone());
            }
            result
        })
    }
}

/// The `grant_type` of a form-encoded POST: a token request.
fn grant_type(request: &oauth2::HttpRequest) -> Option<String> {
    if request.method() != http::Method::POST {
        return None;
    }
    url::form_urlencoded::parse(request.body())
        .find(|(key, _)| key == "grant_type")
        .map(|(_, value)| value.into_owned())
}

/// Adds the configured parameters to token requests (code exchange and refresh).
pub(super) fn add_token_params(request: &mut oauth2::HttpRequest, params: &[(String, String)]) {
    let is_form = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if request.method() != http::Method::POST || !is_form {
        return;
    }
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(request.body())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let grant = pairs
        .iter()
        .find(|(k, _)| k == "grant_type")
        .map(|(_, v)| v.as_str());
    if !matches!(grant, Some("authorization_code" | "refresh_token")) {
        return;
    }
    for (key, value) in params {
        if !pairs.iter().any(|(k, _)| k == key) {
            pairs.push((key.clone(), value.clone()));
        }
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(&pairs)
        .finish();
    request.headers_mut().remove(http::header::CONTENT_LENGTH);
    *request.body_mut() = body.into_bytes();
}

/// `url` with `params` appended to its query; a parameter already present is left alone.
pub(super) fn add_query_params(
    url: &str,
    params: &BTreeMap<String, String>,
) -> Result<String, OAuthError> {
    if params.is_empty() {
        return Ok(url.to_owned());
    }
    let mut parsed = Url::parse(url).map_err(|e| OAuthError::Authorization(e.into()))?;
    let present: Vec<String> = parsed.query_pairs().map(|(k, _)| k.into_owned()).collect();
    {
        let mut query = parsed.query_pairs_mut();
        for (key, value) in params {
            if !present.contains(key) {
                query.append_pair(key, value);
            }
        }
    }
    Ok(parsed.into())
}

/// The scopes of all `parts`, each once, in first-seen order.
pub(super) fn union_scopes<const N: usize>(parts: [Vec<String>; N]) -> Vec<String> {
    let mut scopes: Vec<String> = Vec::new();
    for scope in parts.into_iter().flatten() {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    scopes
}

pub(super) fn now_epoch_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
