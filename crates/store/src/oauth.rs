//! OAuth state for upstream servers: client registrations, credentials, pending authorizations.
//!
//! Secrets are sealed (see `secrets`) and come back as `SecretString`s; everything else is plain
//! so status can be listed without the key. The store knows nothing of OAuth libraries: the
//! credential document and the authorization payload are the caller's JSON, opaque here.

use std::time::{Duration, SystemTime};

use ids::{PrincipalId, ServerName};
use secrecy::{ExposeSecret, SecretString};
use sqlx::Row as _;

use crate::backend::on_pool;
use crate::secrets::Row;
use crate::time::{from_unix_seconds, unix_seconds};
use crate::{Store, StoreError};

/// How long a pending authorization stays takeable; older ones are absent and purged.
pub const AUTH_STATE_TTL: Duration = Duration::from_secs(10 * 60);

/// A client registered with an authorization server, shared by every user of the gateway.
#[derive(Debug)]
pub struct ClientRegistration {
    pub client_id: String,
    /// `None` for a public client.
    pub client_secret: Option<SecretString>,
    /// The registration's metadata as a JSON object (e.g. the registration response). Its
    /// `client_secret` and `registration_access_token` members are dropped before storing,
    /// since this column is plain: the secret belongs in `client_secret`.
    pub metadata: String,
}

/// One principal's credentials for one server.
#[derive(Debug)]
pub struct Credentials {
    /// The authorization server that issued them.
    pub issuer: String,
    /// The whole credential document (tokens, scopes, ...), as the caller serialised it.
    pub document: SecretString,
    /// When the access token expires, if known; stored to the second.
    pub expires_at: Option<SystemTime>,
}

/// What can be shown about stored credentials without decrypting them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialStatus {
    pub server: ServerName,
    pub principal: PrincipalId,
    pub issuer: String,
    pub expires_at: Option<SystemTime>,
    pub updated_at: SystemTime,
}

/// An authorization in flight, between the redirect to the authorization server and its
/// callback.
#[derive(Debug)]
pub struct AuthState {
    pub server: ServerName,
    pub principal: PrincipalId,
    /// What the callback needs (the PKCE verifier and the like), as the caller serialised it.
    pub payload: SecretString,
}

impl Store {
    /// Stores the client registered with `issuer` for `redirect_uri`, replacing any previous one.
    pub async fn put_client_registration(
        &self,
        issuer: &str,
        redirect_uri: &str,
        registration: &ClientRegistration,
    ) -> Result<(), StoreError> {
        let metadata = public_metadata(&registration.metadata).ok_or_else(|| {
            StoreError::MalformedMetadata {
                issuer: issuer.to_owned(),
            }
        })?;
        let row = client_row(issuer, redirect_uri, &registration.client_id);
        let secret = match &registration.client_secret {
            Some(secret) => Some(self.secrets.seal(&row, secret.expose_secret())?),
            None => None,
        };
        let now = unix_seconds(SystemTime::now());
        on_pool!(&self.pool, pool => {
            sqlx::query(
                "INSERT INTO oauth_clients
                     (issuer, redirect_uri, client_id, client_secret, metadata, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (issuer, redirect_uri) DO UPDATE SET
                     client_id = excluded.client_id,
                     client_secret = excluded.client_secret,
                     metadata = excluded.metadata,
                     created_at = excluded.created_at",
            )
            .bind(issuer)
            .bind(redirect_uri)
            .bind(&registration.client_id)
            .bind(secret)
            .bind(metadata)
            .bind(now)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// The client registered with `issuer` for `redirect_uri`. A registration whose secret does
    /// not decrypt is absent as a whole (without its secret a confidential client is useless,
    /// and mistaking it for a public one would fail later and less clearly): register again.
    pub async fn client_registration(
        &self,
        issuer: &str,
        redirect_uri: &str,
    ) -> Result<Option<ClientRegistration>, StoreError> {
        let found: Option<(String, Option<Vec<u8>>, String)> = on_pool!(&self.pool, pool => {
            sqlx::query_as(
                "SELECT client_id, client_secret, metadata FROM oauth_clients
                 WHERE issuer = $1 AND redirect_uri = $2",
            )
            .bind(issuer)
            .bind(redirect_uri)
            .fetch_optional(pool)
            .await?
        });
        let Some((client_id, sealed, metadata)) = found else {
            return Ok(None);
        };
        let client_secret = match sealed {
            None => None,
            Some(sealed) => {
                let row = client_row(issuer, redirect_uri, &client_id);
                match self.secrets.open(&row, &sealed)? {
                    Some(secret) => Some(secret),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(ClientRegistration {
            client_id,
            client_secret,
            metadata,
        }))
    }

    /// The client `client_id` registered with `issuer`, with the redirect URI it was registered
    /// for (the newest, should it have been registered for several). For refreshing tokens,
    /// which name their client but not the redirect URI. Absent like
    /// [`Store::client_registration`] when its secret does not decrypt.
    pub async fn find_client_registration(
        &self,
        issuer: &str,
        client_id: &str,
    ) -> Result<Option<(String, ClientRegistration)>, StoreError> {
        let found: Option<String> = on_pool!(&self.pool, pool => {
            sqlx::query_scalar(
                "SELECT redirect_uri FROM oauth_clients WHERE issuer = $1 AND client_id = $2
                 ORDER BY created_at DESC, redirect_uri LIMIT 1",
            )
            .bind(issuer)
            .bind(client_id)
            .fetch_optional(pool)
            .await?
        });
        let Some(redirect_uri) = found else {
            return Ok(None);
        };
        let registration = self.client_registration(issuer, &redirect_uri).await?;
        // Replaced between the two statements by another client: not the one asked for.
        Ok(registration
            .filter(|r| r.client_id == client_id)
            .map(|r| (redirect_uri, r)))
    }

    /// Forgets the client registered with `issuer` for `redirect_uri`; whether there was one.
    pub async fn delete_client_registration(
        &self,
        issuer: &str,
        redirect_uri: &str,
    ) -> Result<bool, StoreError> {
        let deleted: Option<String> = on_pool!(&self.pool, pool => {
            sqlx::query_scalar(
                "DELETE FROM oauth_clients WHERE issuer = $1 AND redirect_uri = $2
                 RETURNING client_id",
            )
            .bind(issuer)
            .bind(redirect_uri)
            .fetch_optional(pool)
            .await?
        });
        match deleted {
            Some(client_id) => {
                self.secrets
                    .forget(&client_row(issuer, redirect_uri, &client_id));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Stores `principal`'s credentials for `server`, replacing any previous ones.
    pub async fn put_credentials(
        &self,
        server: &str,
        principal: &str,
        credentials: &Credentials,
    ) -> Result<(), StoreError> {
        let row = credentials_row(server, principal, &credentials.issuer);
        let sealed = self
            .secrets
            .seal(&row, credentials.document.expose_secret())?;
        let now = unix_seconds(SystemTime::now());
        on_pool!(&self.pool, pool => {
            sqlx::query(
                "INSERT INTO oauth_credentials
                     (server, principal, issuer, credentials, expires_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (server, principal) DO UPDATE SET
                     issuer = excluded.issuer,
                     credentials = excluded.credentials,
                     expires_at = excluded.expires_at,
                     updated_at = excluded.updated_at",
            )
            .bind(server)
            .bind(principal)
            .bind(&credentials.issuer)
            .bind(sealed)
            .bind(credentials.expires_at.map(unix_seconds))
            .bind(now)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// `principal`'s credentials for `server`; absent when none are stored or they do not
    /// decrypt (the row stays, so restoring the right key brings them back).
    pub async fn credentials(
        &self,
        server: &str,
        principal: &str,
    ) -> Result<Option<Credentials>, StoreError> {
        let found: Option<(String, Vec<u8>, Option<i64>)> = on_pool!(&self.pool, pool => {
            sqlx::query_as(
                "SELECT issuer, credentials, expires_at FROM oauth_credentials
                 WHERE server = $1 AND principal = $2",
            )
            .bind(server)
            .bind(principal)
            .fetch_optional(pool)
            .await?
        });
        let Some((issuer, sealed, expires_at)) = found else {
            return Ok(None);
        };
        let row = credentials_row(server, principal, &issuer);
        let Some(document) = self.secrets.open(&row, &sealed)? else {
            return Ok(None);
        };
        Ok(Some(Credentials {
            issuer,
            document,
            expires_at: expires_at.map(from_unix_seconds),
        }))
    }

    /// Forgets `principal`'s credentials for `server`; whether there were any.
    pub async fn delete_credentials(
        &self,
        server: &str,
        principal: &str,
    ) -> Result<bool, StoreError> {
        let deleted: Option<String> = on_pool!(&self.pool, pool => {
            sqlx::query_scalar(
                "DELETE FROM oauth_credentials WHERE server = $1 AND principal = $2
                 RETURNING issuer",
            )
            .bind(server)
            .bind(principal)
            .fetch_optional(pool)
            .await?
        });
        match deleted {
            Some(issuer) => {
                self.secrets
                    .forget(&credentials_row(server, principal, &issuer));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Every stored credential's status, by server then principal. Needs no key, and lists
    /// rows whose secrets no longer decrypt too.
    pub async fn list_credentials(&self) -> Result<Vec<CredentialStatus>, StoreError> {
        on_pool!(&self.pool, pool => {
            let rows = sqlx::query(
                "SELECT server, principal, issuer, expires_at, updated_at FROM oauth_credentials
                 ORDER BY server, principal",
            )
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|row| {
                    let expires_at: Option<i64> = row.try_get("expires_at")?;
                    Ok(CredentialStatus {
                        server: row.try_get::<String, _>("server")?.into(),
                        principal: row.try_get::<String, _>("principal")?.into(),
                        issuer: row.try_get("issuer")?,
                        expires_at: expires_at.map(from_unix_seconds),
                        updated_at: from_unix_seconds(row.try_get("updated_at")?),
                    })
                })
                .collect()
        })
    }

    /// Records an authorization in flight under `state`, the unguessable `state` parameter sent
    /// to the authorization server (the caller's CSRF token). Purges expired ones. A `state`
    /// already pending is an error: states are never reused.
    pub async fn put_auth_state(&self, state: &str, auth: &AuthState) -> Result<(), StoreError> {
        self.purge_auth_states().await?;
        let row = state_row(state, &auth.server, &auth.principal);
        let sealed = self.secrets.seal(&row, auth.payload.expose_secret())?;
        let now = unix_seconds(SystemTime::now());
        on_pool!(&self.pool, pool => {
            sqlx::query(
                "INSERT INTO oauth_states (state, server, principal, payload, created_at)
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(state)
            .bind(auth.server.as_str())
            .bind(auth.principal.as_str())
            .bind(sealed)
            .bind(now)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Takes the authorization pending under `state`: deleted in the same statement that reads
    /// it, so two callbacks with one state cannot both succeed. Absent when unknown, already
    /// taken, older than [`AUTH_STATE_TTL`], or undecryptable.
    pub async fn take_auth_state(&self, state: &str) -> Result<Option<AuthState>, StoreError> {
        let taken: Option<(String, String, Vec<u8>, i64)> = on_pool!(&self.pool, pool => {
            sqlx::query_as(
                "DELETE FROM oauth_states WHERE state = $1
                 RETURNING server, principal, payload, created_at",
            )
            .bind(state)
            .fetch_optional(pool)
            .await?
        });
        self.purge_auth_states().await?;
        let Some((server, principal, sealed, created_at)) = taken else {
            return Ok(None);
        };
        let age = unix_seconds(SystemTime::now()).saturating_sub(created_at);
        if age > ttl_seconds() {
            return Ok(None);
        }
        let row = state_row(state, &server, &principal);
        let payload = self.secrets.open(&row, &sealed)?;
        // The row is gone: nothing left to report again.
        self.secrets.forget(&row);
        Ok(payload.map(|payload| AuthState {
            server: server.into(),
            principal: principal.into(),
            payload,
        }))
    }

    /// Seals a pending login that travels outside the database (to Redis, for another replica
    /// to finish: its PKCE verifier is a secret) under the store's key, bound to its `state`:
    /// sealed for one state, it does not open as another's.
    pub fn seal_login(&self, state: &str, payload: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.secrets.seal_bytes(&login_row(state), payload)
    }

    /// Opens a login sealed by [`Store::seal_login`] for `state`; `None` when it does not open
    /// (another key, another state, tampered). Not logged here: the caller says what it means.
    pub fn open_login(&self, state: &str, sealed: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.secrets.open_bytes(&login_row(state), sealed)
    }

    async fn purge_auth_states(&self) -> Result<(), StoreError> {
        let oldest = unix_seconds(SystemTime::now()) - ttl_seconds();
        on_pool!(&self.pool, pool => {
            sqlx::query("DELETE FROM oauth_states WHERE created_at < $1")
                .bind(oldest)
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}

// Each table's associated data: its key columns, plus what else the sealed value must stay
// with (the client id its secret belongs to, the issuer that granted the credentials). The
// logged names leave out the state id, a bearer value until the callback.

fn client_row<'a>(issuer: &'a str, redirect_uri: &'a str, client_id: &'a str) -> Row<'a> {
    Row {
        table: "oauth_clients",
        column: "client_secret",
        key: vec![issuer, redirect_uri, client_id],
        shown: vec![("issuer", issuer), ("redirect_uri", redirect_uri)],
    }
}

fn credentials_row<'a>(server: &'a str, principal: &'a str, issuer: &'a str) -> Row<'a> {
    Row {
        table: "oauth_credentials",
        column: "credentials",
        key: vec![server, principal, issuer],
        shown: vec![
            ("server", server),
            ("principal", principal),
            ("issuer", issuer),
        ],
    }
}

fn state_row<'a>(state: &'a str, server: &'a str, principal: &'a str) -> Row<'a> {
    Row {
        table: "oauth_states",
        column: "payload",
        key: vec![state, server, principal],
        shown: vec![("server", server), ("principal", principal)],
    }
}

fn login_row(state: &str) -> Row<'_> {
    Row {
        table: "oauth_states",
        column: "handoff",
        key: vec![state],
        shown: Vec::new(),
    }
}

/// Keeps only a JSON object's public members; `None` when `metadata` is not a JSON object.
fn public_metadata(metadata: &str) -> Option<String> {
    let serde_json::Value::Object(mut members) = serde_json::from_str(metadata).ok()? else {
        return None;
    };
    for secret in SECRET_METADATA {
        members.remove(*secret);
    }
    serde_json::to_string(&members).ok()
}

/// Registration response members (RFC 7591, RFC 7592) that are credentials, not metadata.
const SECRET_METADATA: &[&str] = &["client_secret", "registration_access_token"];

fn ttl_seconds() -> i64 {
    AUTH_STATE_TTL.as_secs() as i64
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};

    use base64::Engine;

    use super::*;
    use crate::{KeySource, SECRET_KEY_VAR};
    use std::time::UNIX_EPOCH;

    #[tokio::test]
    async fn a_sealed_login_opens_only_under_its_key_and_state() {
        let store = Store::open_in_memory().await.expect("store");
        let other = Store::open_in_memory().await.expect("store");
        let payload = br#"{"verifier":"v-123"}"#;
        let sealed = store.seal_login("state-1", payload).expect("sealed");
        assert!(
            !sealed.windows(5).any(|w| w == b"v-123"),
            "the verifier is not readable in the sealed value"
        );
        assert_eq!(
            store
                .open_login("state-1", &sealed)
                .expect("key")
                .as_deref(),
            Some(&payload[..])
        );
        assert_eq!(
            other.open_login("state-1", &sealed).expect("key"),
            None,
            "another key"
        );
        assert_eq!(
            store.open_login("state-2", &sealed).expect("key"),
            None,
            "another state"
        );
        let mut tampered = sealed.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert_eq!(store.open_login("state-1", &tampered).expect("key"), None);
    }

    const ISSUER: &str = "https://auth.example.com";
    const REDIRECT: &str = "http://127.0.0.1:8080/oauth/callback";

    fn b64_key(byte: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode([byte; 32])
    }

    /// A key source reading `MCPGW_SECRET_KEY` from `value` instead of the process environment.
    fn keys(key_file: &Path, value: Option<&str>) -> KeySource {
        let value = value.map(OsString::from);
        KeySource::new(key_file).with_env(move |name| {
            assert_eq!(name, SECRET_KEY_VAR);
            value.clone()
        })
    }

    async fn open(path: &Path, keys: KeySource) -> Store {
        Store::open_with(path, keys).await.expect("open")
    }

    /// A key source with `MCPGW_SECRET_KEY` set to `value`, usable on either backend.
    fn env_keys(value: &str) -> KeySource {
        let value = OsString::from(value);
        KeySource::external(None).with_env(move |_| Some(value.clone()))
    }

    fn credentials(document: &str) -> Credentials {
        Credentials {
            issuer: ISSUER.to_owned(),
            document: SecretString::from(document),
            expires_at: Some(UNIX_EPOCH + Duration::from_secs(1_900_000_000)),
        }
    }

    fn state(server: &str, payload: &str) -> AuthState {
        AuthState {
            server: server.into(),
            principal: "alice".into(),
            payload: SecretString::from(payload),
        }
    }

    struct Db {
        _dir: tempfile::TempDir,
        path: PathBuf,
        key_file: PathBuf,
    }

    fn db() -> Db {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data/mcpgw.db");
        let key_file = dir.path().join("data/secret.key");
        Db {
            _dir: dir,
            path,
            key_file,
        }
    }

    crate::testing::backend_tests! {
    async fn client_registrations_round_trip_without_secrets_in_metadata(db) {
        let store = db.open().await;
        assert!(
            store
                .client_registration(ISSUER, REDIRECT)
                .await
                .expect("get")
                .is_none()
        );
        let registration = ClientRegistration {
            client_id: "client-1".to_owned(),
            client_secret: Some(SecretString::from("cs-123")),
            metadata: r#"{"client_id":"client-1","client_secret":"cs-123","registration_access_token":"rat","redirect_uris":["x"],"client_secret_expires_at":0}"#.to_owned(),
        };
        store
            .put_client_registration(ISSUER, REDIRECT, &registration)
            .await
            .expect("put");
        let got = store
            .client_registration(ISSUER, REDIRECT)
            .await
            .expect("get")
            .expect("present");
        assert_eq!(got.client_id, "client-1");
        assert_eq!(
            got.client_secret.as_ref().map(|s| s.expose_secret()),
            Some("cs-123")
        );
        let metadata: serde_json::Value = serde_json::from_str(&got.metadata).expect("json");
        assert_eq!(
            metadata,
            serde_json::json!({"client_id": "client-1", "redirect_uris": ["x"], "client_secret_expires_at": 0}),
            "secret members never reach the plain column"
        );
        assert!(
            store
                .client_registration(ISSUER, "http://other/callback")
                .await
                .expect("get")
                .is_none(),
            "a registration belongs to its redirect URI"
        );

        let public = ClientRegistration {
            client_id: "client-2".to_owned(),
            client_secret: None,
            metadata: "{}".to_owned(),
        };
        store
            .put_client_registration(ISSUER, REDIRECT, &public)
            .await
            .expect("replace");
        let got = store
            .client_registration(ISSUER, REDIRECT)
            .await
            .expect("get")
            .expect("present");
        assert_eq!(got.client_id, "client-2");
        assert!(got.client_secret.is_none());

        assert!(
            store
                .delete_client_registration(ISSUER, REDIRECT)
                .await
                .expect("delete")
        );
        assert!(
            !store
                .delete_client_registration(ISSUER, REDIRECT)
                .await
                .expect("delete")
        );
        assert!(
            store
                .client_registration(ISSUER, REDIRECT)
                .await
                .expect("get")
                .is_none()
        );
    }

    async fn client_registrations_are_found_by_client_id(db) {
        let store = db.open().await;
        let registration = |client_id: &str| ClientRegistration {
            client_id: client_id.to_owned(),
            client_secret: Some(SecretString::from("cs")),
            metadata: "{}".to_owned(),
        };
        store
            .put_client_registration(ISSUER, REDIRECT, &registration("client-1"))
            .await
            .expect("put");
        store
            .put_client_registration(ISSUER, "http://127.0.0.1:9/cb", &registration("client-2"))
            .await
            .expect("put");
        let (redirect_uri, found) = store
            .find_client_registration(ISSUER, "client-2")
            .await
            .expect("find")
            .expect("present");
        assert_eq!(redirect_uri, "http://127.0.0.1:9/cb");
        assert_eq!(found.client_id, "client-2");
        assert_eq!(
            found.client_secret.as_ref().map(|s| s.expose_secret()),
            Some("cs")
        );
        for (issuer, client_id) in [(ISSUER, "client-3"), ("https://other.example", "client-1")] {
            assert!(
                store
                    .find_client_registration(issuer, client_id)
                    .await
                    .expect("find")
                    .is_none(),
                "{issuer} {client_id}"
            );
        }
    }

    async fn metadata_that_is_not_a_json_object_is_refused_without_echo(db) {
        let store = db.open().await;
        for metadata in ["not json cs-secret", "[1]", "\"cs-secret\""] {
            let error = store
                .put_client_registration(
                    ISSUER,
                    REDIRECT,
                    &ClientRegistration {
                        client_id: "c".to_owned(),
                        client_secret: None,
                        metadata: metadata.to_owned(),
                    },
                )
                .await
                .expect_err("refused");
            let message = error.to_string();
            assert!(message.contains("not a JSON object"), "{message}");
            assert!(!message.contains("cs-secret"), "{message}");
        }
    }

    async fn credentials_round_trip_and_list_without_secrets(db) {
        let store = db.open().await;
        store
            .put_credentials(
                "github",
                "alice",
                &credentials(r#"{"access_token":"tok-a"}"#),
            )
            .await
            .expect("put");
        let mut later = credentials(r#"{"access_token":"tok-b"}"#);
        later.expires_at = None;
        store
            .put_credentials("github", "bob", &later)
            .await
            .expect("put");
        store
            .put_credentials(
                "github",
                "alice",
                &credentials(r#"{"access_token":"tok-a2"}"#),
            )
            .await
            .expect("replace");

        let got = store
            .credentials("github", "alice")
            .await
            .expect("get")
            .expect("present");
        assert_eq!(got.document.expose_secret(), r#"{"access_token":"tok-a2"}"#);
        assert_eq!(got.issuer, ISSUER);
        assert_eq!(
            got.expires_at,
            Some(UNIX_EPOCH + Duration::from_secs(1_900_000_000))
        );
        assert!(
            store
                .credentials("github", "carol")
                .await
                .expect("get")
                .is_none()
        );
        assert!(
            store
                .credentials("linear", "alice")
                .await
                .expect("get")
                .is_none()
        );

        let listed = store.list_credentials().await.expect("list");
        let summary: Vec<_> = listed
            .iter()
            .map(|s| {
                (
                    s.server.as_str(),
                    s.principal.as_str(),
                    s.issuer.as_str(),
                    s.expires_at,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "github",
                    "alice",
                    ISSUER,
                    Some(UNIX_EPOCH + Duration::from_secs(1_900_000_000))
                ),
                ("github", "bob", ISSUER, None),
            ]
        );
        let age = SystemTime::now()
            .duration_since(listed[0].updated_at)
            .expect("updated in the past");
        assert!(age < Duration::from_secs(60), "{age:?}");
        let shown = format!("{listed:?} {got:?}");
        assert!(!shown.contains("tok-a"), "{shown}");

        assert!(
            store
                .delete_credentials("github", "alice")
                .await
                .expect("delete")
        );
        assert!(
            !store
                .delete_credentials("github", "alice")
                .await
                .expect("delete")
        );
        assert!(
            store
                .credentials("github", "alice")
                .await
                .expect("get")
                .is_none()
        );
        assert_eq!(store.list_credentials().await.expect("list").len(), 1);
    }

    async fn auth_states_are_single_use(db) {
        let store = db.open().await;
        store
            .put_auth_state("state-1", &state("github", "verifier-1"))
            .await
            .expect("put");
        let taken = store
            .take_auth_state("state-1")
            .await
            .expect("take")
            .expect("present");
        assert_eq!(taken.server, "github");
        assert_eq!(taken.principal, "alice");
        assert_eq!(taken.payload.expose_secret(), "verifier-1");
        assert!(
            store
                .take_auth_state("state-1")
                .await
                .expect("take")
                .is_none(),
            "a state is taken once"
        );
        assert!(
            store
                .take_auth_state("never-put")
                .await
                .expect("take")
                .is_none()
        );

        store
            .put_auth_state("state-2", &state("github", "v"))
            .await
            .expect("put");
        store
            .put_auth_state("state-2", &state("github", "v"))
            .await
            .expect_err("a pending state id is never reused");
    }

    async fn expired_auth_states_are_absent_and_purged(db) {
        let store = db.open().await;
        let age = |state: &'static str, seconds: i64| {
            let pool = store.pool.clone();
            let created_at = unix_seconds(SystemTime::now()) - seconds;
            async move {
                on_pool!(&pool, pool => {
                    sqlx::query("UPDATE oauth_states SET created_at = $1 WHERE state = $2")
                        .bind(created_at)
                        .bind(state)
                        .execute(pool)
                        .await
                        .expect("age the state");
                });
            }
        };
        store
            .put_auth_state("fresh", &state("s", "p"))
            .await
            .expect("put");
        store
            .put_auth_state("old", &state("s", "p"))
            .await
            .expect("put");
        store
            .put_auth_state("stale", &state("s", "p"))
            .await
            .expect("put");
        age("fresh", 9 * 60).await;
        age("old", 10 * 60 + 1).await;
        age("stale", 60 * 60).await;

        assert!(
            store.take_auth_state("old").await.expect("take").is_none(),
            "older than ten minutes is absent"
        );
        let left: Vec<String> = on_pool!(&store.pool, pool => {
            sqlx::query_scalar("SELECT state FROM oauth_states ORDER BY state")
                .fetch_all(pool)
                .await
                .expect("rows")
        });
        assert_eq!(left, vec!["fresh".to_owned()], "expired states are purged");
        assert!(
            store
                .take_auth_state("fresh")
                .await
                .expect("take")
                .is_some()
        );
    }

    async fn a_wrong_key_reads_as_absent_and_keeps_the_row(db) {
        let right = b64_key(1);
        let wrong = b64_key(2);
        {
            let store = db.open_with(env_keys(&right)).await;
            store
                .put_credentials("github", "alice", &credentials("tok"))
                .await
                .expect("put");
            store
                .put_client_registration(
                    ISSUER,
                    REDIRECT,
                    &ClientRegistration {
                        client_id: "c".to_owned(),
                        client_secret: Some(SecretString::from("cs")),
                        metadata: "{}".to_owned(),
                    },
                )
                .await
                .expect("put");
            store
                .put_auth_state("st", &state("github", "pkce"))
                .await
                .expect("put");
        }
        {
            let store = db.open_with(env_keys(&wrong)).await;
            assert!(
                store
                    .credentials("github", "alice")
                    .await
                    .expect("no error")
                    .is_none()
            );
            assert!(
                store
                    .credentials("github", "alice")
                    .await
                    .expect("no error")
                    .is_none(),
                "still absent when read again"
            );
            assert!(
                store
                    .client_registration(ISSUER, REDIRECT)
                    .await
                    .expect("no error")
                    .is_none()
            );
            assert_eq!(
                store.list_credentials().await.expect("list").len(),
                1,
                "status is still shown"
            );
        }
        let store = db.open_with(env_keys(&right)).await;
        let got = store
            .credentials("github", "alice")
            .await
            .expect("get")
            .expect("the right key brings them back");
        assert_eq!(got.document.expose_secret(), "tok");
        let got = store
            .take_auth_state("st")
            .await
            .expect("take")
            .expect("present");
        assert_eq!(got.payload.expose_secret(), "pkce");
    }

    async fn a_sealed_value_moved_to_another_row_reads_as_absent(db) {
        let store = db.open().await;
        for principal in ["alice", "mallory"] {
            store
                .put_credentials(
                    "github",
                    principal,
                    &credentials(&format!("tok-{principal}")),
                )
                .await
                .expect("put");
        }
        store
            .exec(
                "UPDATE oauth_credentials SET credentials =
                     (SELECT credentials FROM oauth_credentials WHERE principal = 'alice')
                 WHERE principal = 'mallory'",
            )
            .await;
        assert!(
            store
                .credentials("github", "mallory")
                .await
                .expect("get")
                .is_none(),
            "alice's token does not open as mallory's"
        );
        assert!(
            store
                .credentials("github", "alice")
                .await
                .expect("get")
                .is_some()
        );

        // Editing a plain column the value is bound to (the issuer) breaks it too.
        store
            .exec("UPDATE oauth_credentials SET issuer = 'https://evil.example' WHERE principal = 'alice'")
            .await;
        assert!(
            store
                .credentials("github", "alice")
                .await
                .expect("get")
                .is_none()
        );

        store
            .put_client_registration(
                ISSUER,
                REDIRECT,
                &ClientRegistration {
                    client_id: "c".to_owned(),
                    client_secret: Some(SecretString::from("cs")),
                    metadata: "{}".to_owned(),
                },
            )
            .await
            .expect("put");
        store
            .exec("UPDATE oauth_clients SET client_id = 'other-client'")
            .await;
        assert!(
            store
                .client_registration(ISSUER, REDIRECT)
                .await
                .expect("get")
                .is_none()
        );

        store
            .put_auth_state("st", &state("github", "pkce"))
            .await
            .expect("put");
        store
            .exec("UPDATE oauth_states SET principal = 'mallory'")
            .await;
        assert!(store.take_auth_state("st").await.expect("take").is_none());
    }

    async fn tampered_and_unknown_version_values_read_as_absent(db) {
        let store = db.open().await;
        store
            .put_credentials("a", "p", &credentials("tok"))
            .await
            .expect("put");
        store
            .put_credentials("b", "p", &credentials("tok"))
            .await
            .expect("put");
        // A future format version, and a flipped ciphertext bit.
        let edit = |server: &'static str, change: fn(&mut Vec<u8>)| {
            let pool = store.pool.clone();
            async move {
                on_pool!(&pool, pool => {
                    let mut sealed: Vec<u8> = sqlx::query_scalar(
                        "SELECT credentials FROM oauth_credentials WHERE server = $1",
                    )
                    .bind(server)
                    .fetch_one(pool)
                    .await
                    .expect("read");
                    change(&mut sealed);
                    sqlx::query("UPDATE oauth_credentials SET credentials = $1 WHERE server = $2")
                        .bind(sealed)
                        .bind(server)
                        .execute(pool)
                        .await
                        .expect("edit");
                });
            }
        };
        edit("a", |sealed| sealed[0] = 2).await;
        edit("b", |sealed| sealed[14] ^= 0xff).await;
        assert!(store.credentials("a", "p").await.expect("get").is_none());
        assert!(store.credentials("b", "p").await.expect("get").is_none());
    }

    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_key_file_is_created_private_on_first_secret_use_and_reused() {
        use std::os::unix::fs::PermissionsExt;

        let db = db();
        let store = open(&db.path, keys(&db.key_file, None)).await;
        store
            .put_embeddings("m", &[(crate::text_hash("t"), vec![1.0])])
            .await
            .expect("the embedding cache needs no key");
        assert!(store.credentials("s", "p").await.expect("get").is_none());
        assert!(!db.key_file.exists(), "no key until a secret is stored");

        store
            .put_credentials("s", "p", &credentials("tok"))
            .await
            .expect("put");
        let metadata = std::fs::metadata(&db.key_file).expect("key file created");
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        let first = std::fs::read(&db.key_file).expect("read");
        drop(store);

        let store = open(&db.path, keys(&db.key_file, None)).await;
        let got = store
            .credentials("s", "p")
            .await
            .expect("get")
            .expect("the key file is reused");
        assert_eq!(got.document.expose_secret(), "tok");
        assert_eq!(
            std::fs::read(&db.key_file).expect("read"),
            first,
            "not rewritten"
        );
    }

    #[tokio::test]
    async fn the_key_file_and_its_directory_are_created_where_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db_path = dir.path().join("mcpgw.db");
        let key_file = dir.path().join("elsewhere/keys/mcpgw.key");
        let store = open(&db_path, keys(&key_file, None)).await;
        store
            .put_auth_state("st", &state("s", "p"))
            .await
            .expect("put");
        assert!(key_file.is_file());
        assert!(!dir.path().join("secret.key").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(key_file.parent().expect("dir"))
                .expect("dir")
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "created directory is private: {mode:o}");
        }
    }

    #[tokio::test]
    async fn the_environment_key_wins_over_the_key_file() {
        let db = db();
        let env_key = b64_key(7);
        {
            let store = open(&db.path, keys(&db.key_file, Some(&env_key))).await;
            store
                .put_credentials("s", "p", &credentials("tok"))
                .await
                .expect("put");
            assert!(
                !db.key_file.exists(),
                "no key file when the variable is set"
            );
        }
        {
            // Without the variable the file key is used, and it cannot open the value.
            let store = open(&db.path, keys(&db.key_file, None)).await;
            assert!(store.credentials("s", "p").await.expect("get").is_none());
            store
                .put_credentials("s", "file", &credentials("tok-file"))
                .await
                .expect("put");
            assert!(db.key_file.exists());
        }
        // With both present, the variable wins.
        let store = open(&db.path, keys(&db.key_file, Some(&env_key))).await;
        let got = store
            .credentials("s", "p")
            .await
            .expect("get")
            .expect("sealed with the variable's key");
        assert_eq!(got.document.expose_secret(), "tok");
        assert!(store.credentials("s", "file").await.expect("get").is_none());
    }

    #[tokio::test]
    async fn a_malformed_environment_key_is_an_error_that_never_shows_it() {
        let db = db();
        let mut malformed = vec![
            OsString::from("hunter2-not-a-key"),
            OsString::from(""),
            OsString::from(base64::engine::general_purpose::STANDARD.encode(b"sixteen byte key")),
            OsString::from(format!("{}QUJD", b64_key(3).trim_end_matches('='))),
        ];
        #[cfg(unix)]
        malformed.push(std::os::unix::ffi::OsStringExt::from_vec(vec![
            0xff, 0xfe, b'k',
        ]));
        for value in malformed {
            let shown = value.to_string_lossy().into_owned();
            let source = KeySource::new(&db.key_file).with_env(move |_| Some(value.clone()));
            let store = open(&db.path, source).await;
            let error = store
                .put_credentials("s", "p", &credentials("tok"))
                .await
                .expect_err("a malformed key is an error");
            let message = error.to_string();
            assert!(message.contains(SECRET_KEY_VAR), "{message}");
            assert!(message.contains("base64"), "{message}");
            if !shown.is_empty() {
                assert!(!message.contains(&shown), "{message}");
                assert!(!format!("{error:?}").contains(&shown));
            }
            assert!(!db.key_file.exists(), "no fallback to the file");
            store
                .put_embeddings("m", &[(crate::text_hash("t"), vec![1.0])])
                .await
                .expect("the embedding cache works regardless");
        }
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_key_file_open_to_other_users_is_refused() {
        use std::os::unix::fs::PermissionsExt;

        let db = db();
        let key = b64_key(9);
        std::fs::create_dir_all(db.key_file.parent().expect("dir")).expect("dir");
        std::fs::write(&db.key_file, format!("{key}\n")).expect("write");
        for mode in [0o644, 0o640, 0o604] {
            std::fs::set_permissions(&db.key_file, std::fs::Permissions::from_mode(mode))
                .expect("chmod");
            let store = open(&db.path, keys(&db.key_file, None)).await;
            let error = store
                .put_credentials("s", "p", &credentials("tok"))
                .await
                .expect_err("refused");
            let message = error.to_string();
            assert!(message.contains("accessible to other users"), "{message}");
            assert!(message.contains(&format!("{mode:03o}")), "{message}");
            assert!(message.contains("chmod 600"), "{message}");
            assert!(!message.contains(&key), "{message}");
        }
        std::fs::set_permissions(&db.key_file, std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        let store = open(&db.path, keys(&db.key_file, None)).await;
        store
            .put_credentials("s", "p", &credentials("tok"))
            .await
            .expect("a private key file is used");
        // The file's key, not a new one: a store with the same key as a variable opens it.
        let store = open(&db.path, keys(&db.key_file, Some(&key))).await;
        assert!(store.credentials("s", "p").await.expect("get").is_some());
    }

    #[tokio::test]
    async fn a_malformed_key_file_is_an_error_that_never_shows_it() {
        let db = db();
        std::fs::create_dir_all(db.key_file.parent().expect("dir")).expect("dir");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        std::io::Write::write_all(
            &mut options.open(&db.key_file).expect("create"),
            b"hunter2-truncated-key",
        )
        .expect("write");
        let store = open(&db.path, keys(&db.key_file, None)).await;
        let message = store
            .put_credentials("s", "p", &credentials("tok"))
            .await
            .expect_err("malformed")
            .to_string();
        assert!(message.contains("not a valid secret key"), "{message}");
        assert!(
            message.contains(&db.key_file.display().to_string()),
            "{message}"
        );
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[tokio::test]
    async fn no_plaintext_secret_reaches_the_database_files() {
        let db = db();
        let store = open(&db.path, keys(&db.key_file, None)).await;
        let token = "ya29.PLAINTEXT-ACCESS-TOKEN-4f1c";
        let refresh = "1//PLAINTEXT-REFRESH-TOKEN-9b7e";
        let client_secret = "PLAINTEXT-CLIENT-SECRET-77aa";
        let verifier = "PLAINTEXT-PKCE-VERIFIER-0d3e";
        store
            .put_credentials(
                "github",
                "alice",
                &credentials(&format!(
                    r#"{{"access_token":"{token}","refresh_token":"{refresh}"}}"#
                )),
            )
            .await
            .expect("put");
        store
            .put_client_registration(
                ISSUER,
                REDIRECT,
                &ClientRegistration {
                    client_id: "PLAIN-CLIENT-ID".to_owned(),
                    client_secret: Some(SecretString::from(client_secret)),
                    metadata: format!(r#"{{"client_secret":"{client_secret}"}}"#),
                },
            )
            .await
            .expect("put");
        store
            .put_auth_state("st", &state("github", verifier))
            .await
            .expect("put");

        let files = |dir: &Path| -> Vec<(PathBuf, Vec<u8>)> {
            std::fs::read_dir(dir)
                .expect("read dir")
                .map(|entry| entry.expect("entry").path())
                .filter(|path| {
                    path.file_name()
                        .is_some_and(|name| name.to_string_lossy().starts_with("mcpgw.db"))
                })
                .map(|path| {
                    let bytes = std::fs::read(&path).expect("read");
                    (path, bytes)
                })
                .collect()
        };
        let dir = db.path.parent().expect("dir");
        let contains = |haystack: &[u8], needle: &str| {
            haystack
                .windows(needle.len())
                .any(|window| window == needle.as_bytes())
        };
        // Before the checkpoint the rows sit in the WAL; after it, in the main file.
        let before = files(dir);
        store.exec("PRAGMA wal_checkpoint(TRUNCATE)").await;
        let after = files(dir);
        for (when, snapshot) in [("before checkpoint", &before), ("after checkpoint", &after)] {
            let all: Vec<u8> = snapshot.iter().flat_map(|(_, b)| b.clone()).collect();
            // The plain columns are there, so this is looking at the right bytes.
            assert!(contains(&all, "PLAIN-CLIENT-ID"), "{when}: {snapshot:?}");
            assert!(contains(&all, ISSUER), "{when}");
            for secret in [token, refresh, client_secret, verifier] {
                for (path, bytes) in snapshot {
                    assert!(
                        !contains(bytes, secret),
                        "{when}: {secret} found in {}",
                        path.display()
                    );
                }
            }
        }
        assert!(
            after.iter().any(|(path, _)| path == &db.path),
            "the main file was read"
        );
        assert!(
            contains(&std::fs::read(&db.path).expect("read"), "PLAIN-CLIENT-ID"),
            "the checkpoint moved the rows into the main file"
        );
    }

    #[tokio::test]
    async fn a_version_1_database_is_upgraded_keeping_its_cache() {
        let db = db();
        let hash = crate::text_hash("kept");
        {
            let store = open(&db.path, keys(&db.key_file, None)).await;
            store
                .put_embeddings("m", &[(hash, vec![0.5])])
                .await
                .expect("put");
            // Back to the schema as released with only the embedding cache (later migrations
            // dropped too).
            store
                .exec(
                    "DROP TABLE oauth_clients; DROP TABLE oauth_credentials; DROP TABLE oauth_states; DROP TABLE clients;
                     DROP TABLE tool_pins; DROP TABLE tool_pins_generation; DROP TABLE approvals; DROP TABLE audit; DROP TABLE leases;
                     PRAGMA user_version = 1;",
                )
                .await;
        }
        let store = open(&db.path, keys(&db.key_file, None)).await;
        assert_eq!(
            store.cached_embeddings("m", &[hash]).await.expect("get")[&hash],
            vec![0.5]
        );
        store
            .put_credentials("s", "p", &credentials("tok"))
            .await
            .expect("the new tables exist");
    }

    #[test]
    fn times_survive_the_unix_seconds_round_trip() {
        for seconds in [0, 1, 1_900_000_000, -5] {
            assert_eq!(unix_seconds(from_unix_seconds(seconds)), seconds);
        }
    }
}
