//! The embedding cache: vectors keyed by (model id, SHA-256 of the text).

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use sqlx::Row as _;

use crate::backend::on_pool;
use crate::time::unix_seconds;
use crate::{Store, StoreError};

/// SHA-256 of a text, the cache key beside the model id.
pub type TextHash = [u8; 32];

pub fn text_hash(text: &str) -> TextHash {
    Sha256::digest(text.as_bytes()).into()
}

/// SQLite allows 32,766 bound parameters, PostgreSQL 65,535; stay well below both per
/// statement.
const CHUNK: usize = 500;

impl Store {
    /// The cached vectors of `model` for these texts; a text with no (valid) entry is absent
    /// from the map.
    pub async fn cached_embeddings(
        &self,
        model: &str,
        hashes: &[TextHash],
    ) -> Result<HashMap<TextHash, Vec<f32>>, StoreError> {
        let mut found = HashMap::with_capacity(hashes.len());
        for chunk in hashes.chunks(CHUNK) {
            let placeholders: Vec<String> = (2..chunk.len() + 2).map(|n| format!("${n}")).collect();
            let sql = format!(
                "SELECT text_hash, dim, vector FROM embeddings WHERE model = $1 AND text_hash IN ({})",
                placeholders.join(",")
            );
            on_pool!(&self.pool, pool => {
                // Only placeholders are formatted in; every value is bound.
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(model);
                for hash in chunk {
                    query = query.bind(hash.as_slice());
                }
                for row in query.fetch_all(pool).await? {
                    let hash: Vec<u8> = row.try_get("text_hash")?;
                    let dim: i64 = row.try_get("dim")?;
                    let blob: Vec<u8> = row.try_get("vector")?;
                    match (TextHash::try_from(hash.as_slice()), decode(&blob, dim)) {
                        (Ok(hash), Some(vector)) => {
                            found.insert(hash, vector);
                        }
                        _ => tracing::warn!(model, "ignoring an undecodable cached embedding"),
                    }
                }
            })
        }
        Ok(found)
    }

    /// Stores vectors for `model`, replacing any previous entry for the same text.
    pub async fn put_embeddings(
        &self,
        model: &str,
        entries: &[(TextHash, Vec<f32>)],
    ) -> Result<(), StoreError> {
        let now = unix_seconds(std::time::SystemTime::now());
        on_pool!(&self.pool, pool => {
            let mut tx = pool.begin().await?;
            for (hash, vector) in entries {
                sqlx::query(
                    "INSERT INTO embeddings (model, text_hash, dim, vector, created_at)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (model, text_hash) DO UPDATE SET
                         dim = excluded.dim, vector = excluded.vector,
                         created_at = excluded.created_at",
                )
                .bind(model)
                .bind(hash.as_slice())
                .bind(vector.len() as i64)
                .bind(encode(vector))
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Number of cached vectors for `model` (for status output and tests).
    pub async fn embedding_count(&self, model: &str) -> Result<u64, StoreError> {
        let count: i64 = on_pool!(&self.pool, pool => {
            sqlx::query_scalar("SELECT COUNT(*) FROM embeddings WHERE model = $1")
                .bind(model)
                .fetch_one(pool)
                .await?
        });
        Ok(count.max(0) as u64)
    }
}

fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode(blob: &[u8], dim: i64) -> Option<Vec<f32>> {
    let dim = usize::try_from(dim).ok()?;
    if dim == 0 || blob.len() != dim * 4 {
        return None;
    }
    let vector: Vec<f32> = blob
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    vector.iter().all(|x| x.is_finite()).then_some(vector)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn closing_leaves_everything_in_the_database_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mcpgw.db");
        let store = Store::open(&path).await.expect("store");
        store
            .put_embeddings("m1", &[(text_hash("read a file"), vec![1.0, 0.5])])
            .await
            .expect("put");
        store.close().await;
        let wal = dir.path().join("mcpgw.db-wal");
        assert!(
            std::fs::metadata(&wal).map_or(true, |m| m.len() == 0),
            "the write-ahead log is checkpointed"
        );
        let bytes = std::fs::read(&path).expect("database file");
        assert!(
            bytes
                .windows(b"embeddings".len())
                .any(|w| w == b"embeddings"),
            "the schema is in the database file itself"
        );
    }

    crate::testing::backend_tests! {
    async fn embeddings_round_trip_per_model(db) {
        let store = db.open().await;
        let a = text_hash("read a file");
        let b = text_hash("write a file");
        store
            .put_embeddings("m1", &[(a, vec![1.0, 0.5]), (b, vec![-1.0, 0.25])])
            .await
            .expect("put");
        store
            .put_embeddings("m2", &[(a, vec![9.0, 9.0, 9.0])])
            .await
            .expect("put");
        let got = store
            .cached_embeddings("m1", &[a, b, text_hash("other")])
            .await
            .expect("get");
        assert_eq!(got.len(), 2);
        assert_eq!(got[&a], vec![1.0, 0.5]);
        assert_eq!(got[&b], vec![-1.0, 0.25]);
        let other = store.cached_embeddings("m2", &[a, b]).await.expect("get");
        assert_eq!(other.len(), 1, "models never share vectors");
        assert_eq!(other[&a], vec![9.0, 9.0, 9.0]);
        assert_eq!(store.embedding_count("m1").await.expect("count"), 2);
    }

    async fn many_lookups_are_chunked(db) {
        let store = db.open().await;
        let entries: Vec<(TextHash, Vec<f32>)> = (0..1_200)
            .map(|i| (text_hash(&format!("tool {i}")), vec![i as f32, 1.0]))
            .collect();
        store.put_embeddings("m", &entries).await.expect("put");
        let hashes: Vec<TextHash> = entries.iter().map(|(h, _)| *h).collect();
        let got = store.cached_embeddings("m", &hashes).await.expect("get");
        assert_eq!(got.len(), 1_200);
        assert_eq!(got[&hashes[1_199]], vec![1_199.0, 1.0]);
    }

    async fn a_reopened_database_keeps_its_cache(db) {
        let hash = text_hash("persisted");
        {
            let store = db.open().await;
            store
                .put_embeddings("m", &[(hash, vec![0.5; 4])])
                .await
                .expect("put");
            let replaced = vec![0.25; 4];
            store
                .put_embeddings("m", &[(hash, replaced)])
                .await
                .expect("put again replaces");
            store.close().await;
        }
        let store = db.open().await;
        let got = store.cached_embeddings("m", &[hash]).await.expect("get");
        assert_eq!(got[&hash], vec![0.25; 4]);
        assert_eq!(store.embedding_count("m").await.expect("count"), 1);
    }

    async fn migrations_run_once(db) {
        let before = Store::migration_status(&db.location).await.expect("status");
        assert_eq!(before.applied, 0, "a new database has no schema");
        assert_eq!(before.pending.len(), crate::MIGRATIONS.len());
        db.open().await.close().await;
        let store = db.open().await;
        let after = Store::migration_status(&db.location).await.expect("status");
        assert_eq!(after.applied, crate::MIGRATIONS.len() as i64);
        assert_eq!(after.latest, after.applied);
        assert!(after.pending.is_empty());
        assert_eq!(after.backend, db.backend());
        assert!(Store::migrate(&db.location).await.expect("migrate").is_empty());
        store.close().await;
    }
    }

    #[tokio::test]
    async fn a_nested_sqlite_path_is_created() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nested/state/mcpgw.db");
        Store::open(&path).await.expect("open").close().await;
        assert!(path.is_file());
    }

    #[test]
    fn undecodable_vectors_are_rejected() {
        assert_eq!(decode(&encode(&[1.0, 2.0]), 2), Some(vec![1.0, 2.0]));
        assert_eq!(decode(&encode(&[1.0, 2.0]), 3), None, "dimension mismatch");
        assert_eq!(decode(&[0, 0, 0], 1), None, "truncated");
        assert_eq!(decode(&encode(&[f32::NAN]), 1), None, "not finite");
        assert_eq!(decode(&[], 0), None);
    }
}
