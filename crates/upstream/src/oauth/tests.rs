//! The OAuth module's tests: settings, refresh classification, stores, logins against a
//! local authorisation server, and authorised requests.

use oauth2::{CsrfToken, PkceCodeVerifier};

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, UNIX_EPOCH},
};

use netguard::Policy;
use rmcp::{
    model::ClientJsonRpcMessage,
    transport::streamable_http_client::{
        StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    },
};
use secrecy::{ExposeSecret, SecretString};
use url::Url;

use crate::lock;

use super::{client::*, error::*, guarded::*, login::*, settings::*, store::*, *};

fn settings() -> OAuthSettings {
    OAuthSettings::new("http://127.0.0.1:8765/callback")
}

#[test]
fn handles_can_move_between_tasks() {
    fn check<T: Send + Sync>() {}
    check::<PendingLogin>();
    check::<AuthorizedClient>();
    check::<ServerCredentials>();
}

#[test]
fn refresh_errors_are_classified_by_what_they_mean_for_the_grant() {
    fn check(error: AuthError, expect: RefreshFailure) {
        let text = error.to_string();
        assert_eq!(classify_refresh_error(&error), expect, "{text}");
    }
    // rmcp's rendering of an oauth2 ServerResponse error is "Server returned error response: …".
    let server = |body: &str| {
        AuthError::TokenRefreshFailed(format!("Server returned error response: {body}"))
    };
    check(
        AuthError::TokenRefreshRejected(
            "Server returned error response: invalid_grant: token revoked".into(),
        ),
        RefreshFailure::Reauthorize,
    );
    check(
        AuthError::AuthorizationRequired,
        RefreshFailure::Reauthorize,
    );
    check(server("invalid_client"), RefreshFailure::ClientRejected);
    check(
        server("unauthorized_client: client disabled"),
        RefreshFailure::ClientRejected,
    );
    check(server("invalid_scope: no"), RefreshFailure::Reauthorize);
    check(
        server("unsupported_grant_type"),
        RefreshFailure::Reauthorize,
    );
    check(server("server_error: try later"), RefreshFailure::Transient);
    check(server("temporarily_unavailable"), RefreshFailure::Transient);
    check(
        AuthError::TokenRefreshFailed("Request failed".into()),
        RefreshFailure::Transient,
    );
    check(
        AuthError::TokenRefreshFailed("Failed to parse server response".into()),
        RefreshFailure::Transient,
    );
    // A network message that merely mentions a code is not a server verdict.
    check(
        AuthError::TokenRefreshFailed("connect error: invalid_client".into()),
        RefreshFailure::Transient,
    );
    check(
        AuthError::CredentialStoreError("disk full".into()),
        RefreshFailure::Transient,
    );
    check(
        AuthError::InternalError("OAuth client not configured".into()),
        RefreshFailure::Transient,
    );
}

/// Whether the registration at (`issuer`, the test redirect URI) and `server`'s tokens
/// are stored.
async fn stored(credentials: &ServerCredentials, issuer: &str) -> (bool, bool) {
    let registration = credentials
        .store
        .registration(issuer, "http://127.0.0.1/cb")
        .await
        .expect("registration");
    let tokens = credentials.credentials().await.expect("credentials");
    (registration.is_some(), tokens.is_some())
}

#[tokio::test]
async fn refresh_failures_delete_only_what_is_dead() {
    let store: Arc<dyn OAuthStore> = Arc::new(MemoryOAuthStore::default());
    let credentials = ServerCredentials::new(store, "docs");
    // Tokens without an issuer: their registration lives under the server's own key.
    let issuer = credentials.issuer_key(None);
    assert_eq!(issuer, "mcpgw:server:docs");
    let seed = || async {
        credentials
            .save_registration(ClientRegistration {
                method: RegistrationMethod::Dynamic,
                client_id: "c1".into(),
                client_secret: None,
                issuer: issuer.clone(),
                redirect_uri: "http://127.0.0.1/cb".into(),
                registered_at: 0,
            })
            .await
            .expect("save registration");
        credentials
            .store
            .save_credentials(
                "docs",
                StoredCredentials::new("c1".into(), None, vec![], None),
            )
            .await
            .expect("save credentials");
    };

    seed().await;
    RefreshFailure::Transient
        .apply(&credentials)
        .await
        .expect("apply");
    assert_eq!(stored(&credentials, &issuer).await, (true, true));

    RefreshFailure::Reauthorize
        .apply(&credentials)
        .await
        .expect("apply");
    assert_eq!(stored(&credentials, &issuer).await, (true, false));

    seed().await;
    RefreshFailure::ClientRejected
        .apply(&credentials)
        .await
        .expect("apply");
    assert_eq!(stored(&credentials, &issuer).await, (false, false));
}

#[tokio::test]
async fn registrations_are_shared_by_issuer_and_redirect_uri() {
    let store: Arc<dyn OAuthStore> = Arc::new(MemoryOAuthStore::default());
    let docs = ServerCredentials::new(store.clone(), "docs");
    let wiki = ServerCredentials::new(store.clone(), "wiki");
    let registration = |issuer: &str, client_id: &str| ClientRegistration {
        method: RegistrationMethod::Dynamic,
        client_id: client_id.into(),
        client_secret: Some(SecretString::from("s")),
        issuer: issuer.into(),
        redirect_uri: "http://127.0.0.1/cb".into(),
        registered_at: 0,
    };
    docs.save_registration(registration("https://as.example", "shared"))
        .await
        .expect("save");
    // Another server of the same authorisation server finds it, with its secret.
    let found = store
        .registration(
            &wiki.issuer_key(Some("https://as.example")),
            "http://127.0.0.1/cb",
        )
        .await
        .expect("load")
        .expect("shared registration");
    assert_eq!(found.client_id, "shared");
    assert!(found.client_secret.is_some());
    // Issuer-less servers never share one.
    assert_ne!(docs.issuer_key(None), wiki.issuer_key(None));

    // Tokens find their client by id, whatever its redirect URI.
    let tokens = StoredCredentials::new("shared".into(), None, vec![], None)
        .with_issuer(Some("https://as.example".into()));
    assert!(wiki.registration_of(&tokens).await.expect("load").is_some());
    let foreign = StoredCredentials::new("shared".into(), None, vec![], None)
        .with_issuer(Some("https://other.example".into()));
    assert!(
        wiki.registration_of(&foreign)
            .await
            .expect("load")
            .is_none()
    );
}

fn login_state(created_at: u64) -> StoredAuthorizationState {
    let mut state = StoredAuthorizationState::new(
        &PkceCodeVerifier::new("v".repeat(43)),
        &CsrfToken::new("s".into()),
    );
    state.created_at = created_at;
    state
}

#[test]
fn login_state_expires_after_ten_minutes() {
    let now = 1_000_000;
    assert!(!login_state_expired(&login_state(now), now));
    assert!(!login_state_expired(&login_state(now - 600), now));
    assert!(login_state_expired(&login_state(now - 601), now));
    assert!(
        login_state_expired(&login_state(now + 5), now),
        "from the future"
    );
}

#[tokio::test]
async fn an_expired_login_state_is_deleted_on_load() {
    let inner = Arc::new(MemoryLoginStates::default());
    let states = ExpiringStates(inner.clone());
    let now = now_epoch_secs();
    states.save("fresh", login_state(now)).await.expect("save");
    states
        .save("stale", login_state(now - 601))
        .await
        .expect("save");

    assert!(states.load_at("fresh", now).await.expect("load").is_some());
    assert!(states.load_at("stale", now).await.expect("load").is_none());
    assert!(
        inner.load("stale").await.expect("load").is_none(),
        "deleted"
    );
}

#[tokio::test]
async fn memory_login_states_purge_abandoned_logins() {
    let states = MemoryLoginStates::default();
    let now = now_epoch_secs();
    states
        .save("old", login_state(now - 3600))
        .await
        .expect("save");
    states.save("new", login_state(now)).await.expect("save");
    assert!(states.load("old").await.expect("load").is_none());
    assert!(states.load("new").await.expect("load").is_some());
}

#[test]
fn extra_authorization_params_are_appended_not_overridden() {
    let url = "https://as.example/authorize?response_type=code&client_id=c&state=s&prompt=login";
    let params = BTreeMap::from([
        ("audience".to_owned(), "api://x y".to_owned()),
        ("prompt".to_owned(), "consent".to_owned()),
    ]);
    let merged = add_query_params(url, &params).expect("valid URL");
    assert_eq!(
        merged,
        "https://as.example/authorize?response_type=code&client_id=c&state=s&prompt=login&audience=api%3A%2F%2Fx+y"
    );
    assert_eq!(
        add_query_params(url, &BTreeMap::new()).expect("valid URL"),
        url
    );
}

#[test]
fn settings_refuse_to_override_the_flow() {
    let mut s = settings();
    assert!(s.validate().is_ok());
    s.authorization_params.insert("state".into(), "x".into());
    let error = s.validate().expect_err("reserved");
    assert_eq!(
        error.to_string(),
        "oauth setting `authorization_params` is invalid: `state` is set by the OAuth flow and cannot be overridden"
    );

    let mut s = settings();
    s.token_params.insert("code_verifier".into(), "x".into());
    assert!(s.validate().is_err());

    let mut s = settings();
    s.client_secret = Some(SecretString::from("hunter2"));
    assert!(s.validate().is_err(), "secret without client id");

    let mut s = settings();
    s.client_metadata_url = Some("http://example.com/client.json".into());
    assert!(s.validate().is_err(), "metadata document must be https");
}

#[test]
fn debug_output_hides_secrets() {
    let mut s = settings();
    s.client_id = Some("client".into());
    s.client_secret = Some(SecretString::from("hunter2"));
    s.token_params
        .insert("assertion".into(), "eyJsecret".into());
    let text = format!("{s:?}");
    assert!(
        !text.contains("hunter2") && !text.contains("eyJsecret"),
        "{text}"
    );
    assert!(text.contains("assertion"), "{text}");

    let registration = ClientRegistration {
        method: RegistrationMethod::Dynamic,
        client_id: "c".into(),
        client_secret: Some(SecretString::from("hunter2")),
        issuer: "https://as.example".into(),
        redirect_uri: "http://127.0.0.1/cb".into(),
        registered_at: 0,
    };
    assert!(!format!("{registration:?}").contains("hunter2"));
    let callback = LoginCallback::Url("http://127.0.0.1/cb?code=abc123&state=s".into());
    assert!(!format!("{callback:?}").contains("abc123"));
    let callback = LoginCallback::Code {
        code: "abc123".into(),
        state: "s".into(),
        issuer: None,
    };
    assert!(!format!("{callback:?}").contains("abc123"));
}

#[test]
fn registration_round_trips_through_the_store_format() {
    let registration = ClientRegistration {
        method: RegistrationMethod::Dynamic,
        client_id: "c".into(),
        client_secret: Some(SecretString::from("s3")),
        issuer: "https://as.example".into(),
        redirect_uri: "http://127.0.0.1/cb".into(),
        registered_at: 7,
    };
    let json = serde_json::to_string(&registration).expect("serialize");
    let back: ClientRegistration = serde_json::from_str(&json).expect("deserialize");
    assert_eq!(
        back.client_secret.map(|s| s.expose_secret().to_owned()),
        Some("s3".into())
    );
    assert_eq!(back.issuer, "https://as.example");
}

fn token_request(body: &str) -> oauth2::HttpRequest {
    oauth2::http::Request::builder()
        .method("POST")
        .uri("https://as.example/token")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.as_bytes().to_vec())
        .expect("request")
}

#[test]
fn token_params_go_on_code_and_refresh_requests_only() {
    let params = vec![
        ("audience".to_owned(), "api".to_owned()),
        ("resource".to_owned(), "https://evil".to_owned()),
    ];
    let mut request =
        token_request("grant_type=refresh_token&refresh_token=r&resource=https%3A%2F%2Fmcp");
    add_token_params(&mut request, &params);
    assert_eq!(
        String::from_utf8_lossy(request.body()),
        "grant_type=refresh_token&refresh_token=r&resource=https%3A%2F%2Fmcp&audience=api"
    );

    let mut request = token_request("grant_type=client_credentials");
    add_token_params(&mut request, &params);
    assert_eq!(
        String::from_utf8_lossy(request.body()),
        "grant_type=client_credentials"
    );
}

#[test]
fn scope_union_keeps_first_seen_order() {
    let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        union_scopes([
            s(&["mcp:basic"]),
            s(&["mcp:basic", "profile"]),
            s(&["mcp:write"])
        ]),
        s(&["mcp:basic", "profile", "mcp:write"])
    );
    assert!(union_scopes([Vec::new(), Vec::new()]).is_empty());
}

/// An authorisation server and an MCP endpoint on one loopback port. The endpoint accepts
/// only the token the server issued last; the token endpoint answers refreshes as told.
struct Fake {
    url: String,
    refreshes: Arc<std::sync::atomic::AtomicUsize>,
    registrations: Arc<std::sync::atomic::AtomicUsize>,
    accepted: Arc<Mutex<String>>,
    answer: Arc<Mutex<(u16, serde_json::Value)>>,
}

async fn fake(accepted: &str) -> Fake {
    use axum::{
        Json, Router,
        http::{HeaderMap, StatusCode, header},
        response::IntoResponse,
        routing::{get, post},
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let refreshes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let registrations = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accepted = Arc::new(Mutex::new(accepted.to_owned()));
    let answer = Arc::new(Mutex::new((
        200,
        serde_json::json!({"access_token": "new", "token_type": "Bearer", "expires_in": 3600}),
    )));
    let prm =
        serde_json::json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]});
    let metadata = serde_json::json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
    });
    let challenge =
        format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
    let app = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || async move { Json(prm) }),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(move || async move { Json(metadata) }),
        )
        .route("/register", {
            let registrations = registrations.clone();
            post(move || async move {
                registrations.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let body = serde_json::json!({
                    "client_id": "dyn-1", "client_secret": "dyn-secret", "redirect_uris": [],
                });
                (StatusCode::CREATED, Json(body))
            })
        })
        .route("/token", {
            let (refreshes, accepted, answer) =
                (refreshes.clone(), accepted.clone(), answer.clone());
            post(move || async move {
                refreshes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                // Latency, so that requests rejected together overlap the refresh.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let (status, body) = lock(&answer).clone();
                if let Some(token) = body.get("access_token").and_then(|t| t.as_str()) {
                    *lock(&accepted) = token.to_owned();
                }
                (StatusCode::from_u16(status).expect("status"), Json(body))
            })
        })
        .route("/mcp", {
            let accepted = accepted.clone();
            post(move |headers: HeaderMap| async move {
                let expected = format!("Bearer {}", lock(&accepted));
                let sent = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                if sent == Some(expected.as_str()) {
                    Json(serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {}}))
                        .into_response()
                } else {
                    (
                        StatusCode::UNAUTHORIZED,
                        [(header::WWW_AUTHENTICATE, challenge.clone())],
                    )
                        .into_response()
                }
            })
        });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Fake {
        url: format!("{base}/mcp"),
        refreshes,
        registrations,
        accepted,
        answer,
    }
}

impl Fake {
    fn issuer(&self) -> String {
        self.url.trim_end_matches("/mcp").to_owned()
    }

    /// Credentials for client `c1` holding access token `token`, received `age` ago.
    async fn seed(&self, credentials: &ServerCredentials, token: &str, age: Duration) {
        self.seed_client(credentials, "c1", token, age).await
    }

    /// Credentials for client `client_id` holding access token `token`, received `age`
    /// ago, and that client's registration.
    async fn seed_client(
        &self,
        credentials: &ServerCredentials,
        client_id: &str,
        token: &str,
        age: Duration,
    ) {
        let response = serde_json::from_value(serde_json::json!({
            "access_token": token, "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt",
        }))
        .expect("token response");
        let received = now_epoch_secs() - age.as_secs();
        let stored =
            StoredCredentials::new(client_id.into(), Some(response), vec![], Some(received))
                .with_issuer(Some(self.issuer()));
        credentials
            .store
            .save_credentials(credentials.server(), stored)
            .await
            .expect("seed credentials");
        credentials
            .save_registration(ClientRegistration {
                method: RegistrationMethod::Dynamic,
                client_id: client_id.into(),
                client_secret: None,
                issuer: self.issuer(),
                redirect_uri: "http://127.0.0.1:1/callback".into(),
                registered_at: 0,
            })
            .await
            .expect("seed registration");
    }

    /// Whether the seeded registration and any tokens are stored.
    async fn stored(&self, credentials: &ServerCredentials) -> (bool, bool) {
        let registration = credentials
            .store
            .registration(&self.issuer(), "http://127.0.0.1:1/callback")
            .await
            .expect("registration");
        let tokens = credentials.credentials().await.expect("credentials");
        (registration.is_some(), tokens.is_some())
    }

    fn refreshes(&self) -> usize {
        self.refreshes.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn client(&self, credentials: &ServerCredentials) -> AuthorizedClient {
        AuthorizedClient::new(
            &self.url,
            &loopback(OAuthSettings::new("http://127.0.0.1:1/callback")),
            credentials.clone(),
        )
        .await
        .expect("client")
    }
}

/// `settings` under a policy that admits the loopback fake.
fn loopback(mut settings: OAuthSettings) -> OAuthSettings {
    settings.policy = Arc::new(Policy::parse(["127.0.0.1"]).expect("rule parses"));
    settings
}

fn memory_credentials() -> ServerCredentials {
    ServerCredentials::new(Arc::new(MemoryOAuthStore::default()), "docs")
}

async fn ping(
    client: &AuthorizedClient,
    url: &str,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<HttpError>> {
    let message: ClientJsonRpcMessage =
        serde_json::from_value(serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .expect("message");
    client
        .post_message(url.into(), message, None, None, HashMap::new())
        .await
}

async fn ping_concurrently(client: &AuthorizedClient, url: &str, n: usize) -> usize {
    let calls = (0..n).map(|_| ping(client, url));
    futures::future::join_all(calls)
        .await
        .into_iter()
        .filter(|r| r.is_ok())
        .count()
}

#[tokio::test]
async fn concurrent_requests_with_an_expiring_token_share_one_refresh() {
    let fake = fake("unused").await;
    let credentials = memory_credentials();
    // Received an hour ago with a one-hour lifetime: past rmcp's 30 s margin.
    fake.seed(&credentials, "old", Duration::from_secs(3600))
        .await;
    let client = fake.client(&credentials).await;

    assert_eq!(ping_concurrently(&client, &fake.url, 8).await, 8);
    assert_eq!(fake.refreshes(), 1);
    let stored = credentials
        .credentials()
        .await
        .expect("load")
        .expect("credentials");
    let token = stored.token_response.expect("token");
    assert_eq!(token.access_token().secret(), "new");
    assert_eq!(
        token.refresh_token().map(|t| t.secret().as_str()),
        Some("rt"),
        "a refresh response without a refresh token keeps the old one"
    );
}

#[tokio::test]
async fn tokens_of_a_later_login_are_refreshed_for_their_own_client() {
    let fake = fake("old").await;
    let credentials = memory_credentials();
    fake.seed(&credentials, "old", Duration::ZERO).await;
    let client = fake.client(&credentials).await;
    assert!(ping(&client, &fake.url).await.is_ok());

    // Another process logs in again, as another client; its token is due for a refresh.
    // Refreshing it as the client this one was set up for would fail and delete it.
    fake.seed_client(&credentials, "c2", "old", Duration::from_secs(3600))
        .await;
    assert!(ping(&client, &fake.url).await.is_ok());
    assert_eq!(fake.refreshes(), 1);
    let stored = credentials
        .credentials()
        .await
        .expect("load")
        .expect("kept");
    assert_eq!(stored.client_id, "c2");
    let token = stored.token_response.expect("token");
    assert_eq!(token.access_token().secret(), "new");
    assert_eq!(client.last_refresh_failure(), None);
}

#[tokio::test]
async fn requests_rejected_together_refresh_once_and_retry() {
    // The server has revoked "old" although it has not expired.
    let fake = fake("revoked-on-the-server").await;
    let credentials = memory_credentials();
    fake.seed(&credentials, "old", Duration::ZERO).await;
    let client = fake.client(&credentials).await;

    assert_eq!(ping_concurrently(&client, &fake.url, 8).await, 8);
    assert_eq!(fake.refreshes(), 1);
    assert!(
        client
            .last_challenge()
            .is_some_and(|c| c.contains("resource_metadata"))
    );
    assert_eq!(client.last_refresh_failure(), None);
}

#[tokio::test]
async fn a_rejected_refresh_token_deletes_the_tokens_and_keeps_the_client() {
    let fake = fake("unused").await;
    *lock(&fake.answer) = (400, serde_json::json!({"error": "invalid_grant"}));
    let credentials = memory_credentials();
    fake.seed(&credentials, "old", Duration::from_secs(3600))
        .await;
    let client = fake.client(&credentials).await;

    let error = ping(&client, &fake.url).await.expect_err("no usable token");
    assert!(
        error.auth_challenge().is_some(),
        "the server's challenge comes back: {error}"
    );
    assert_eq!(fake.stored(&credentials).await, (true, false));
    assert_eq!(
        client.last_refresh_failure().map(|(f, _)| f),
        Some(RefreshFailure::Reauthorize)
    );
}

#[tokio::test]
async fn a_refresh_that_lost_to_another_process_uses_the_winners_tokens() {
    let fake = fake("unused").await;
    // Another process used the refresh token first: this refresh is refused.
    *lock(&fake.answer) = (400, serde_json::json!({"error": "invalid_grant"}));
    let credentials = memory_credentials();
    fake.seed(&credentials, "old", Duration::from_secs(3600))
        .await;
    let client = fake.client(&credentials).await;
    // While this refresh is in flight, the other process stores what it was given.
    let other_process = async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        *lock(&fake.accepted) = "winner".into();
        let token = serde_json::from_value(serde_json::json!({
            "access_token": "winner", "token_type": "Bearer", "expires_in": 3600, "refresh_token": "rt2",
        }))
        .expect("token response");
        let stored =
            StoredCredentials::new("c1".into(), Some(token), vec![], Some(now_epoch_secs()))
                .with_issuer(Some(fake.issuer()));
        credentials.store.save_credentials("docs", stored).await
    };
    let (result, saved) = tokio::join!(ping(&client, &fake.url), other_process);
    saved.expect("save");
    assert_eq!(fake.refreshes(), 1);
    assert!(result.is_ok(), "{:?}", result.err());
    let stored = credentials
        .credentials()
        .await
        .expect("load")
        .expect("the winner's tokens are kept");
    let token = stored.token_response.expect("token");
    assert_eq!(token.access_token().secret(), "winner");
    assert_eq!(client.last_refresh_failure(), None);
}

#[tokio::test]
async fn a_rejected_client_deletes_the_registration_too() {
    let fake = fake("unused").await;
    *lock(&fake.answer) = (401, serde_json::json!({"error": "invalid_client"}));
    let credentials = memory_credentials();
    fake.seed(&credentials, "old", Duration::from_secs(3600))
        .await;
    let client = fake.client(&credentials).await;

    assert!(ping(&client, &fake.url).await.is_err());
    assert_eq!(fake.stored(&credentials).await, (false, false));
    assert_eq!(
        client.last_refresh_failure().map(|(f, _)| f),
        Some(RefreshFailure::ClientRejected)
    );
}

#[tokio::test]
async fn a_server_error_during_refresh_keeps_the_token() {
    let fake = fake("unused").await;
    *lock(&fake.answer) = (503, serde_json::json!({"error": "temporarily_unavailable"}));
    let credentials = memory_credentials();
    fake.seed(&credentials, "old", Duration::from_secs(3600))
        .await;
    let client = fake.client(&credentials).await;

    let error = ping(&client, &fake.url).await.expect_err("refresh failed");
    assert!(matches!(error, StreamableHttpError::Auth(_)), "{error}");
    assert!(error.auth_challenge().is_none(), "no login prompt");
    let stored = credentials.credentials().await.expect("load");
    assert!(stored.is_some_and(|c| c.token_response.is_some()));
    assert_eq!(
        client.last_refresh_failure().map(|(f, _)| f),
        Some(RefreshFailure::Transient)
    );
    // The next request tries again and succeeds once the server is back.
    *lock(&fake.answer) = (
        200,
        serde_json::json!({"access_token": "new", "token_type": "Bearer", "expires_in": 3600}),
    );
    assert!(ping(&client, &fake.url).await.is_ok());
    assert_eq!(fake.refreshes(), 2);
    assert_eq!(client.last_refresh_failure(), None);
    assert_eq!(*lock(&fake.accepted), "new");
}

#[tokio::test]
async fn login_registers_once_and_consumes_its_state_even_when_forged() {
    let fake = fake("unused").await;
    let credentials = memory_credentials();
    let states = Arc::new(MemoryLoginStates::default());
    let mut settings = loopback(OAuthSettings::new("http://127.0.0.1:1/callback"));
    settings
        .authorization_params
        .insert("prompt".into(), "consent".into());

    let (url, pending) = start_login(&fake.url, &settings, &credentials, states.clone(), None)
        .await
        .expect("start");
    let url = Url::parse(&url).expect("authorization URL");
    let param = |name: &str| {
        url.query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    assert_eq!(param("client_id").as_deref(), Some("dyn-1"));
    assert_eq!(param("prompt").as_deref(), Some("consent"));
    assert_eq!(param("code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(param("resource").as_deref(), Some(fake.url.as_str()));
    let state = param("state").expect("state");
    assert!(states.load(&state).await.expect("load").is_some());
    let registration = credentials
        .store
        .registration(&fake.issuer(), "http://127.0.0.1:1/callback")
        .await
        .expect("load")
        .expect("dynamic registration stored");
    assert_eq!(registration.client_id, "dyn-1");
    assert!(registration.client_secret.is_some());
    assert_eq!(registration.issuer, fake.issuer());

    let forged = LoginCallback::Code {
        code: "c".into(),
        state: "forged".into(),
        issuer: None,
    };
    let error = finish_login(pending, forged)
        .await
        .expect_err("foreign state");
    assert!(matches!(error, OAuthError::StateMismatch), "{error}");
    assert!(
        states.load(&state).await.expect("load").is_none(),
        "single use"
    );

    let (url, _pending) = start_login(&fake.url, &settings, &credentials, states, None)
        .await
        .expect("second start");
    assert!(url.contains("client_id=dyn-1"));
    assert_eq!(
        fake.registrations.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the stored registration is reused"
    );
}

#[tokio::test]
async fn a_login_started_in_one_process_finishes_in_another_from_its_handoff() {
    let fake = fake("unused").await;
    let settings = loopback(OAuthSettings::new("http://127.0.0.1:1/callback"));
    let started_with = memory_credentials();
    let (url, pending) = start_login(
        &fake.url,
        &settings,
        &started_with,
        Arc::new(MemoryLoginStates::default()),
        None,
    )
    .await
    .expect("start");
    let state = Url::parse(&url)
        .expect("authorization URL")
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .expect("state");
    let handoff = pending.handoff();
    assert_eq!(handoff.state(), state);
    assert_eq!(handoff.redirect_uri(), "http://127.0.0.1:1/callback");
    let shown = format!("{handoff:?}");
    assert!(
        !shown.contains(&state) && !shown.contains("dyn-secret") && !shown.contains("verifier"),
        "{shown}"
    );
    // As it travels: text, and nothing of the first process with it.
    let text = serde_json::to_string(handoff).expect("serialised");
    drop(pending);
    let elsewhere = memory_credentials();

    let forged: LoginHandoff = serde_json::from_str(&text).expect("handoff");
    let wrong = LoginCallback::Code {
        code: "c".into(),
        state: "forged".into(),
        issuer: None,
    };
    let error = finish_handoff(forged, &settings, &elsewhere, wrong)
        .await
        .expect_err("another login's state");
    assert!(matches!(error, OAuthError::StateMismatch), "{error}");

    let handoff: LoginHandoff = serde_json::from_str(&text).expect("handoff");
    let callback = LoginCallback::Code {
        code: "c".into(),
        state,
        issuer: Some(fake.issuer()),
    };
    let outcome = finish_handoff(handoff, &settings, &elsewhere, callback)
        .await
        .expect("finished elsewhere");
    assert_eq!(outcome.client_id, "dyn-1");
    let stored = elsewhere
        .credentials()
        .await
        .expect("load")
        .expect("tokens stored by the finishing process");
    assert!(stored.token_response.is_some());
    assert_eq!(stored.issuer.as_deref(), Some(fake.issuer().as_str()));
    assert_eq!(*lock(&fake.accepted), "new");
}

/// A protected resource on loopback whose metadata sends mcpgw to `elsewhere`, a second
/// loopback port nothing is listening for: as its authorisation server, or (with
/// `token_only`) as the token endpoint of an authorisation server on the resource's port.
async fn pointing_elsewhere(elsewhere: u16, token_only: bool) -> String {
    use axum::{
        Json, Router,
        http::StatusCode,
        response::IntoResponse,
        routing::{get, post},
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let other = format!("http://127.0.0.1:{elsewhere}");
    let authorization_server = if token_only {
        base.clone()
    } else {
        other.clone()
    };
    let prm = serde_json::json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [authorization_server],
    });
    let metadata = serde_json::json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{other}/token"),
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
    });
    let challenge =
        format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\"");
    let app = Router::new()
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(move || async move { Json(prm) }),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(move || async move { Json(metadata) }),
        )
        .route(
            "/mcp",
            post(move || async move {
                (
                    StatusCode::UNAUTHORIZED,
                    [(axum::http::header::WWW_AUTHENTICATE, challenge)],
                )
                    .into_response()
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("{base}/mcp")
}

/// A loopback port that counts as "elsewhere": it must never be connected to.
fn sink() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    (listener, port)
}

/// Settings under a policy that names only the resource server's port.
fn only_port_of(url: &str) -> OAuthSettings {
    let port = Url::parse(url).ok().and_then(|u| u.port()).expect("a port");
    let mut settings = OAuthSettings::new("http://127.0.0.1:1/callback");
    settings.policy = Arc::new(
        Policy::parse([format!("127.0.0.1:{port}")])
            .expect("rule parses")
            .for_server("docs", false),
    );
    settings
}

#[tokio::test]
async fn login_refuses_an_authorization_server_the_policy_does_not_allow() {
    let (sink, elsewhere) = sink();
    let url = pointing_elsewhere(elsewhere, false).await;
    let settings = only_port_of(&url);
    let error = start_login(
        &url,
        &settings,
        &memory_credentials(),
        Arc::new(MemoryLoginStates::default()),
        None,
    )
    .await
    .expect_err("refused");
    let port = Url::parse(&url).ok().and_then(|u| u.port()).expect("port");
    assert!(matches!(error, OAuthError::Refused(_)), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "refused http://127.0.0.1:{elsewhere}: 127.0.0.1 is allowed on port {port} only, not {elsewhere}; to allow it, add \"127.0.0.1:{elsewhere}\" to [network] allow in mcpgw.toml"
        )
    );
    assert!(sink.accept().is_err(), "the refused server was contacted");

    // The same login with the server's own URL refused says so before any request.
    let mut strict = settings.clone();
    strict.policy = Arc::new(Policy::default().for_server("docs", false));
    let error = start_login(
        &url,
        &strict,
        &memory_credentials(),
        Arc::new(MemoryLoginStates::default()),
        None,
    )
    .await
    .expect_err("refused");
    assert!(
        error
            .to_string()
            .starts_with(&format!("refused http://127.0.0.1:{port}: ")),
        "{error}"
    );
}

#[tokio::test]
async fn a_refresh_at_a_token_endpoint_the_policy_refuses_keeps_the_token_and_says_why() {
    let (sink, elsewhere) = sink();
    let url = pointing_elsewhere(elsewhere, true).await;
    let credentials = memory_credentials();
    let issuer = url.trim_end_matches("/mcp").to_owned();
    let response = serde_json::from_value(serde_json::json!({
        "access_token": "old", "token_type": "Bearer", "expires_in": 60, "refresh_token": "rt",
    }))
    .expect("token response");
    let stored = StoredCredentials::new(
        "c1".into(),
        Some(response),
        vec![],
        Some(now_epoch_secs() - 3600),
    )
    .with_issuer(Some(issuer));
    credentials
        .store
        .save_credentials("docs", stored)
        .await
        .expect("seed");
    let client = AuthorizedClient::new(&url, &only_port_of(&url), credentials.clone())
        .await
        .expect("client");

    assert!(
        ping(&client, &url).await.is_err(),
        "the refresh cannot happen"
    );
    let (failure, reason) = client.last_refresh_failure().expect("a recorded failure");
    assert_eq!(failure, RefreshFailure::Transient);
    assert!(
        reason.contains(&format!(
            "refused http://127.0.0.1:{elsewhere}: 127.0.0.1 is allowed on port "
        )),
        "{reason}"
    );
    assert!(
        credentials.credentials().await.expect("read").is_some(),
        "a refusal says nothing about the grant: the tokens are kept"
    );
    assert!(sink.accept().is_err(), "the refused server was contacted");
}

#[tokio::test]
async fn status_shows_no_secret_and_reads_expiry() {
    let store: Arc<dyn OAuthStore> = Arc::new(MemoryOAuthStore::default());
    let credentials = ServerCredentials::new(store.clone(), "docs");
    assert!(!credentials.status().await.expect("status").logged_in());

    let token: OAuthTokenResponse = serde_json::from_value(
        serde_json::json!({"access_token": "at", "token_type": "Bearer", "expires_in": 60, "refresh_token": "rt"}),
    )
    .expect("token");
    store
        .save_credentials(
            "docs",
            StoredCredentials::new("c1".into(), Some(token), vec!["mcp".into()], Some(100)),
        )
        .await
        .expect("save");
    let status = credentials.status().await.expect("status");
    assert!(status.logged_in() && status.has_refresh_token);
    assert_eq!(status.client_id.as_deref(), Some("c1"));
    assert_eq!(
        status.expires_at,
        Some(UNIX_EPOCH + Duration::from_secs(160))
    );
    let json = serde_json::to_string(&status).expect("json");
    assert!(!json.contains("\"at\"") && !json.contains("rt\""), "{json}");
}
