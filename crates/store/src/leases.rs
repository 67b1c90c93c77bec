//! Leases: one holder at a time per key, across every process that uses the database.
//!
//! [`Store::try_lease`] takes a free or expired lease (or renews the caller's own) in one
//! statement, so two processes racing for it cannot both win; [`Store::release_lease`] gives
//! it back, only if the caller still holds it. A holder that never releases (it crashed) holds
//! the key until the lease's time runs out.

use std::time::{Duration, SystemTime};

use crate::{Store, StoreError, time::unix_millis};

impl Store {
    /// Takes the lease on `key` for `holder` until `ttl` from now, if it is free, expired, or
    /// already `holder`'s. True when `holder` has it now.
    pub async fn try_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = SystemTime::now();
        let until = unix_millis(now + ttl);
        let taken = sqlx::query(
            "INSERT INTO leases (key, holder, expires_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms
             WHERE leases.expires_ms <= ?4 OR leases.holder = excluded.holder",
        )
        .bind(key)
        .bind(holder)
        .bind(until)
        .bind(unix_millis(now))
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(taken == 1)
    }

    /// Gives the lease on `key` back, if `holder` still has it.
    pub async fn release_lease(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM leases WHERE key = ?1 AND holder = ?2")
            .bind(key)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn one_holder_at_a_time_until_released_or_expired() {
        let store = Store::open_in_memory().await.expect("store");
        assert!(store.try_lease("k", "a", MINUTE).await.expect("lease"));
        assert!(
            !store.try_lease("k", "b", MINUTE).await.expect("lease"),
            "held by a"
        );
        assert!(
            store.try_lease("k", "a", MINUTE).await.expect("lease"),
            "a renews"
        );
        assert!(
            store.try_lease("other", "b", MINUTE).await.expect("lease"),
            "another key"
        );
        store.release_lease("k", "b").await.expect("release");
        assert!(
            !store.try_lease("k", "b", MINUTE).await.expect("lease"),
            "b never held it"
        );
        store.release_lease("k", "a").await.expect("release");
        assert!(
            store.try_lease("k", "b", MINUTE).await.expect("lease"),
            "released"
        );
        // b's lease runs out; a takes it over.
        assert!(
            store
                .try_lease("x", "b", Duration::ZERO)
                .await
                .expect("lease")
        );
        assert!(
            store.try_lease("x", "a", MINUTE).await.expect("lease"),
            "expired"
        );
    }

    #[tokio::test]
    async fn two_handles_on_one_file_see_each_others_leases() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("leases.db");
        let first = Store::open(&path).await.expect("store");
        let second = Store::open(&path).await.expect("store");
        assert!(first.try_lease("k", "one", MINUTE).await.expect("lease"));
        assert!(!second.try_lease("k", "two", MINUTE).await.expect("lease"));
        first.release_lease("k", "one").await.expect("release");
        assert!(second.try_lease("k", "two", MINUTE).await.expect("lease"));
    }
}
