//! Sealed session state and the session ids that may no longer be revived.
//!
//! A gateway sharing this store with other replicas hands out MCP session ids that carry the
//! session's own state, sealed with the store's secret key (the same AES-256-GCM sealing as
//! stored secrets, under associated data of their own, so a sealed token can never be passed off
//! as a session or the reverse). Any replica with the key opens them; nothing else can read or
//! forge one.
//!
//! A session ended by its client (HTTP DELETE) must not come back on another replica: its id is
//! recorded as ended until its revival window closes. The record is a row of the `leases` table
//! (key `session-ended:<digest>`, held by `ended` until then): a lease that nobody takes is
//! exactly a key reserved until a time, and it needs no table of its own. Expired records are
//! deleted when a new one is written.

use std::time::SystemTime;

use crate::backend::on_pool;
use crate::secrets::Row;
use crate::{Store, StoreError, time::unix_millis};

const ENDED_PREFIX: &str = "session-ended:";
const ENDED_HOLDER: &str = "ended";

fn row() -> Row<'static> {
    Row {
        table: "sessions",
        column: "state",
        key: Vec::new(),
        shown: Vec::new(),
    }
}

impl Store {
    /// Seals a session's state with the store's secret key.
    pub fn seal_session(&self, state: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.secrets.seal_bytes(&row(), state)
    }

    /// Opens a session's sealed state; `None` when it does not open (forged, tampered, sealed
    /// under another key). Unlike a stored secret, a failure is not logged here: session ids
    /// come from the network, and the caller decides what is worth a line.
    pub fn open_session(&self, sealed: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.secrets.open_bytes(&row(), sealed)
    }

    /// Records session `digest` as ended until `until`: [`Store::session_ended`] says so until
    /// then, on every replica.
    pub async fn end_session(&self, digest: &str, until: SystemTime) -> Result<(), StoreError> {
        let key = format!("{ENDED_PREFIX}{digest}");
        let now = unix_millis(SystemTime::now());
        on_pool!(&self.pool, pool => {
            sqlx::query("DELETE FROM leases WHERE key LIKE $1 AND holder = $2 AND expires_ms <= $3")
                .bind(format!("{ENDED_PREFIX}%"))
                .bind(ENDED_HOLDER)
                .bind(now)
                .execute(pool)
                .await?;
            sqlx::query(
                "INSERT INTO leases (key, holder, expires_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms",
            )
            .bind(&key)
            .bind(ENDED_HOLDER)
            .bind(unix_millis(until))
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Whether session `digest` was ended ([`Store::end_session`]) and its record still holds.
    pub async fn session_ended(&self, digest: &str) -> Result<bool, StoreError> {
        let key = format!("{ENDED_PREFIX}{digest}");
        let now = unix_millis(SystemTime::now());
        let count: i64 = on_pool!(&self.pool, pool => {
            sqlx::query_scalar(
                "SELECT COUNT(*) FROM leases WHERE key = $1 AND holder = $2 AND expires_ms > $3",
            )
            .bind(&key)
            .bind(ENDED_HOLDER)
            .bind(now)
            .fetch_one(pool)
            .await?
        });
        Ok(count > 0)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::Store;

    #[tokio::test]
    async fn sealed_session_state_opens_only_under_its_key_and_untampered() {
        let store = Store::open_in_memory().await.expect("store");
        let other = Store::open_in_memory().await.expect("store");
        let sealed = store
            .seal_session(b"{\"p\":\"client:alice\"}")
            .expect("sealed");
        assert_eq!(
            store.open_session(&sealed).expect("key").as_deref(),
            Some(&b"{\"p\":\"client:alice\"}"[..])
        );
        assert_eq!(
            other.open_session(&sealed).expect("key"),
            None,
            "another key"
        );
        let mut tampered = sealed.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert_eq!(store.open_session(&tampered).expect("key"), None);
        assert_eq!(store.open_session(b"short").expect("key"), None);
    }

    #[tokio::test]
    async fn ended_sessions_read_as_ended_until_their_record_expires() {
        let store = Store::open_in_memory().await.expect("store");
        assert!(!store.session_ended("abc").await.expect("query"));
        let now = std::time::SystemTime::now();
        store
            .end_session("abc", now + Duration::from_secs(60))
            .await
            .expect("ended");
        store
            .end_session("old", now - Duration::from_secs(1))
            .await
            .expect("ended");
        assert!(store.session_ended("abc").await.expect("query"));
        assert!(!store.session_ended("old").await.expect("query"), "expired");
        assert!(!store.session_ended("abd").await.expect("query"));
    }
}
