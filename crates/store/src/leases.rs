//! Leases: one holder at a time per key, across every process that uses the database.
//!
//! [`Store::try_lease`] takes a free or expired lease (or renews the caller's own) in one
//! statement, so two processes racing for it cannot both win; [`Store::release_lease`] gives
//! it back, only if the caller still holds it. A holder that never releases (it crashed) holds
//! the key until the lease's time runs out.
//!
//! On PostgreSQL the same statement is safe across replicas: `INSERT ... ON CONFLICT DO UPDATE
//! ... WHERE` locks the conflicting row and evaluates the condition on its latest version, so of
//! two replicas racing for an expired lease exactly one updates it (the other's `WHERE` sees the
//! winner's fresh expiry) and of two racing for a new key exactly one inserts it.

use std::time::{Duration, SystemTime};

use crate::backend::on_pool;
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
        let taken = on_pool!(&self.pool, pool => {
            sqlx::query(
                "INSERT INTO leases (key, holder, expires_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms
                 WHERE leases.expires_ms <= $4 OR leases.holder = excluded.holder",
            )
            .bind(key)
            .bind(holder)
            .bind(until)
            .bind(unix_millis(now))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(taken == 1)
    }

    /// Gives the lease on `key` back, if `holder` still has it.
    pub async fn release_lease(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        on_pool!(&self.pool, pool => {
            sqlx::query("DELETE FROM leases WHERE key = $1 AND holder = $2")
                .bind(key)
                .bind(holder)
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    crate::testing::backend_tests! {
    async fn one_holder_at_a_time_until_released_or_expired(db) {
        let store = db.open().await;
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

    /// Two handles on one database (two processes on one file; two replicas on one server).
    async fn two_handles_on_one_database_see_each_others_leases(db) {
        let first = db.open().await;
        let second = db.open().await;
        assert!(first.try_lease("k", "one", MINUTE).await.expect("lease"));
        assert!(!second.try_lease("k", "two", MINUTE).await.expect("lease"));
        first.release_lease("k", "one").await.expect("release");
        assert!(second.try_lease("k", "two", MINUTE).await.expect("lease"));
        assert!(!first.try_lease("k", "one", MINUTE).await.expect("lease"));
    }

    /// Many holders racing for one free key, then for it once expired: exactly one wins each
    /// round, whatever the interleaving.
    async fn racing_holders_get_one_lease(db) {
        let handles = [db.open().await, db.open().await, db.open().await];
        for (round, ttl) in [(0, Duration::from_millis(200)), (1, MINUTE)] {
            if round == 1 {
                // Until the first round's lease has run out.
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let mut racers = tokio::task::JoinSet::new();
            for i in 0..12 {
                let store = handles[i % handles.len()].clone();
                racers.spawn(async move {
                    store
                        .try_lease("refresh:github:local", &format!("r{round}-{i}"), ttl)
                        .await
                        .expect("lease")
                });
            }
            let won = racers.join_all().await.into_iter().filter(|won| *won).count();
            assert_eq!(won, 1, "round {round}");
        }
    }
    }
}
