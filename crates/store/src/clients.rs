//! Clients of the gateway's HTTP listener and their API keys.
//!
//! A key is `mcpgw_` followed by 32 random bytes in unpadded base64url. It is returned once, by
//! [`Store::add_client`], and only its SHA-256 is stored. A plain (unsalted, fast) hash is
//! enough here, unlike for passwords: a key has 256 bits of entropy, so no dictionary or
//! brute force reaches it from the hash, and a slow hash (argon2, bcrypt) would only add its
//! cost to every request. A presented key is hashed and looked up by hash; the found hash is
//! then compared to the presented one in constant time (`subtle`). The lookup's own timing can
//! only tell an attacker about the hash of a key they already hold, which does not help them
//! find another key.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use sqlx::Row as _;
use subtle::ConstantTimeEq as _;

use crate::backend::on_pool;
use crate::time::{from_unix_seconds, unix_seconds};
use crate::{Store, StoreError};

/// What every client key starts with, so a leaked key is recognisable (secret scanners, logs).
pub const CLIENT_KEY_PREFIX: &str = "mcpgw_";

/// A client's last use is written at most this often: a busy client would otherwise write to
/// the database on every request.
const LAST_USED_RESOLUTION: Duration = Duration::from_secs(60);

/// What can be shown about a client: never its key, which is not stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientInfo {
    pub name: String,
    pub created_at: SystemTime,
    /// `None` until the key is first used.
    pub last_used_at: Option<SystemTime>,
}

/// Whether `name` can name a client: 1 to 64 of `[A-Za-z0-9_.-]`.
pub fn is_valid_client_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl Store {
    /// Creates client `name` with a new random key and returns the key: the only time it
    /// exists outside the caller's hands. Fails when `name` is taken or not a valid name.
    pub async fn add_client(&self, name: &str) -> Result<SecretString, StoreError> {
        if !is_valid_client_name(name) {
            return Err(StoreError::InvalidClientName {
                name: name.to_owned(),
            });
        }
        let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
        aes_gcm::aead::common::getrandom::fill(&mut bytes[..]).map_err(|_| StoreError::Random)?;
        let key = SecretString::from(format!(
            "{CLIENT_KEY_PREFIX}{}",
            URL_SAFE_NO_PAD.encode(&bytes[..])
        ));
        let hash = key_hash(key.expose_secret());
        let now = unix_seconds(SystemTime::now());
        let inserted = on_pool!(&self.pool, pool => {
            sqlx::query(
                "INSERT INTO clients (name, key_hash, created_at) VALUES ($1, $2, $3)
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(name)
            .bind(&hash[..])
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected()
        });
        if inserted == 0 {
            return Err(StoreError::ClientExists {
                name: name.to_owned(),
            });
        }
        Ok(key)
    }

    /// Every client, by name.
    pub async fn clients(&self) -> Result<Vec<ClientInfo>, StoreError> {
        on_pool!(&self.pool, pool => {
            let rows =
                sqlx::query("SELECT name, created_at, last_used_at FROM clients ORDER BY name")
                    .fetch_all(pool)
                    .await?;
            rows.iter()
                .map(|row| {
                    Ok(ClientInfo {
                        name: row.try_get("name")?,
                        created_at: from_unix_seconds(row.try_get("created_at")?),
                        last_used_at: row
                            .try_get::<Option<i64>, _>("last_used_at")?
                            .map(from_unix_seconds),
                    })
                })
                .collect()
        })
    }

    /// Whether any client exists.
    pub async fn has_clients(&self) -> Result<bool, StoreError> {
        let found: Option<String> = on_pool!(&self.pool, pool => {
            sqlx::query_scalar("SELECT name FROM clients LIMIT 1")
                .fetch_optional(pool)
                .await?
        });
        Ok(found.is_some())
    }

    /// Deletes client `name` and so its key; false if there was none. Takes effect on the
    /// next request: keys are looked up per request.
    pub async fn remove_client(&self, name: &str) -> Result<bool, StoreError> {
        let done = on_pool!(&self.pool, pool => {
            sqlx::query("DELETE FROM clients WHERE name = $1")
                .bind(name)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done > 0)
    }

    /// The name of the client whose key `presented` is, if any, and notes its use.
    pub async fn authenticate_client(&self, presented: &str) -> Result<Option<String>, StoreError> {
        let hash = key_hash(presented);
        let found: Option<(String, Vec<u8>, Option<i64>)> = on_pool!(&self.pool, pool => {
            sqlx::query_as("SELECT name, key_hash, last_used_at FROM clients WHERE key_hash = $1")
                .bind(&hash[..])
                .fetch_optional(pool)
                .await?
        });
        let Some((name, stored, last_used)) = found else {
            return Ok(None);
        };
        // The equality is already implied by the lookup; this makes the decision itself
        // independent of where two hashes differ (and of a stored hash of the wrong length).
        if !bool::from(stored.as_slice().ct_eq(&hash[..])) {
            return Ok(None);
        }
        let now = unix_seconds(SystemTime::now());
        let stale = last_used
            .is_none_or(|at| now.saturating_sub(at) >= LAST_USED_RESOLUTION.as_secs() as i64);
        if stale {
            on_pool!(&self.pool, pool => {
                sqlx::query("UPDATE clients SET last_used_at = $1 WHERE name = $2")
                    .bind(now)
                    .bind(&name)
                    .execute(pool)
                    .await?;
            });
        }
        Ok(Some(name))
    }
}

fn key_hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::testing::backend_tests! {
    async fn a_new_key_authenticates_its_client_only(db) {
        let store = db.open().await;
        let ci = store.add_client("ci").await.expect("add");
        let laptop = store.add_client("laptop").await.expect("add");
        assert!(ci.expose_secret().starts_with(CLIENT_KEY_PREFIX));
        assert_eq!(ci.expose_secret().len(), CLIENT_KEY_PREFIX.len() + 43);
        assert_ne!(ci.expose_secret(), laptop.expose_secret());
        let who = store
            .authenticate_client(ci.expose_secret())
            .await
            .expect("auth");
        assert_eq!(who.as_deref(), Some("ci"));
        let who = store
            .authenticate_client(laptop.expose_secret())
            .await
            .expect("auth");
        assert_eq!(who.as_deref(), Some("laptop"));
        for wrong in ["", "mcpgw_", "not a key", &ci.expose_secret()[1..]] {
            assert_eq!(
                store.authenticate_client(wrong).await.expect("auth"),
                None,
                "{wrong}"
            );
        }
    }

    async fn listing_shows_names_and_times_and_use(db) {
        let store = db.open().await;
        assert!(!store.has_clients().await.expect("has"));
        let key = store.add_client("b").await.expect("add");
        store.add_client("a").await.expect("add");
        assert!(store.has_clients().await.expect("has"));
        store
            .authenticate_client(key.expose_secret())
            .await
            .expect("auth");
        let listed = store.clients().await.expect("list");
        let names: Vec<&str> = listed.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(listed[0].last_used_at, None);
        assert!(listed[1].last_used_at.is_some());
        assert!(listed[1].created_at <= SystemTime::now());
    }

    async fn a_name_is_taken_once_and_must_be_valid(db) {
        let store = db.open().await;
        store.add_client("ci").await.expect("add");
        let taken = store.add_client("ci").await.expect_err("taken");
        assert_eq!(
            taken.to_string(),
            "a client named 'ci' already exists; remove it first to issue a new key"
        );
        for bad in ["", "a b", "ä", "x/y", &"a".repeat(65)] {
            assert!(store.add_client(bad).await.is_err(), "{bad}");
        }
    }

    async fn a_removed_client_key_no_longer_authenticates(db) {
        let store = db.open().await;
        let key = store.add_client("ci").await.expect("add");
        assert!(store.remove_client("ci").await.expect("remove"));
        assert!(!store.remove_client("ci").await.expect("remove"));
        assert_eq!(
            store
                .authenticate_client(key.expose_secret())
                .await
                .expect("auth"),
            None
        );
        assert!(!store.has_clients().await.expect("has"));
    }
    }
}
