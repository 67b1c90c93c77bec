//! Schema migrations for both backends: one numbered list, each entry with its SQLite and its
//! PostgreSQL DDL (`migrations/NNNN_name.sql` and `migrations/postgres/NNNN_name.sql`).
//!
//! SQLite records the number applied in its `user_version` (as it always has); PostgreSQL in a
//! small table, `mcpgw_schema_migrations`, one row per migration. sqlx's migrator was not used:
//! it needs its macro feature and keeps checksums of files that, here, are compiled in.
//! PostgreSQL applies everything pending in one transaction under an advisory lock, so two
//! replicas starting at once migrate once, and a failed migration leaves the schema as it was.

use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;

use crate::backend::{Backend, Pool};

/// One schema change. Released entries are never edited: a change is a new entry.
#[derive(Debug)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    sqlite: &'static str,
    postgres: &'static str,
}

/// `migration!(N, "NNNN", "name")`: migration N, from `NNNN_name.sql` of each backend.
macro_rules! migration {
    ($version:literal, $number:literal, $name:literal) => {
        Migration {
            version: $version,
            name: $name,
            sqlite: include_str!(concat!("../migrations/", $number, "_", $name, ".sql")),
            postgres: include_str!(concat!(
                "../migrations/postgres/",
                $number,
                "_",
                $name,
                ".sql"
            )),
        }
    };
}

/// Every migration, in order; a database's version is the number of the last one applied.
pub const MIGRATIONS: &[Migration] = &[
    migration!(1, "0001", "embeddings"),
    migration!(2, "0002", "oauth"),
    migration!(3, "0003", "clients"),
    migration!(4, "0004", "pins"),
    migration!(5, "0005", "approvals"),
    migration!(6, "0006", "audit"),
    migration!(7, "0007", "leases"),
];

/// The newest schema version this mcpgw knows.
pub fn latest_version() -> i64 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Where a database's schema stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationStatus {
    pub backend: Backend,
    /// The database as its URL shows it (no password).
    pub location: String,
    /// The version applied (0: none, or no database yet).
    pub applied: i64,
    /// The newest version this mcpgw knows.
    pub latest: i64,
    /// Migrations newer than `applied`, oldest first: (version, name).
    pub pending: Vec<(i64, &'static str)>,
}

impl MigrationStatus {
    pub(crate) fn new(backend: Backend, location: String, applied: i64) -> MigrationStatus {
        MigrationStatus {
            backend,
            location,
            applied,
            latest: latest_version(),
            pending: MIGRATIONS
                .iter()
                .filter(|m| m.version > applied)
                .map(|m| (m.version, m.name))
                .collect(),
        }
    }
}

/// The PostgreSQL advisory lock that serialises migrations ("mcpgw db" in ASCII).
const MIGRATION_LOCK: i64 = 0x6d63_7067_7720_6462;

pub(crate) async fn applied(pool: &Pool) -> Result<i64, sqlx::Error> {
    match pool {
        Pool::Sqlite(pool) => sqlite_version(pool).await,
        Pool::Postgres(pool) => {
            let exists: bool =
                sqlx::query_scalar("SELECT to_regclass('mcpgw_schema_migrations') IS NOT NULL")
                    .fetch_one(pool)
                    .await?;
            if !exists {
                return Ok(0);
            }
            postgres_version(pool).await
        }
    }
}

/// Applies every pending migration; returns those applied.
pub(crate) async fn apply(pool: &Pool) -> Result<Vec<&'static Migration>, sqlx::Error> {
    match pool {
        Pool::Sqlite(pool) => apply_sqlite(pool).await,
        Pool::Postgres(pool) => apply_postgres(pool).await,
    }
}

async fn sqlite_version(pool: &SqlitePool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(pool)
        .await
}

async fn postgres_version<'c>(
    executor: impl sqlx::postgres::PgExecutor<'c>,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM mcpgw_schema_migrations")
        .fetch_one(executor)
        .await
}

/// Each migration in its own transaction together with the `user_version` bump.
async fn apply_sqlite(pool: &SqlitePool) -> Result<Vec<&'static Migration>, sqlx::Error> {
    let current = sqlite_version(pool).await?;
    let mut applied = Vec::new();
    for migration in MIGRATIONS.iter().filter(|m| m.version > current) {
        let mut tx = pool.begin().await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(migration.sqlite))
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "PRAGMA user_version = {}",
            migration.version
        )))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::debug!(version = migration.version, "database migrated");
        applied.push(migration);
    }
    Ok(applied)
}

async fn apply_postgres(pool: &PgPool) -> Result<Vec<&'static Migration>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS mcpgw_schema_migrations (
             version    BIGINT NOT NULL PRIMARY KEY,
             name       TEXT   NOT NULL,
             applied_at BIGINT NOT NULL DEFAULT (EXTRACT(EPOCH FROM now())::BIGINT)
         )",
    )
    .execute(&mut *tx)
    .await?;
    let current = postgres_version(&mut *tx).await?;
    let mut applied = Vec::new();
    for migration in MIGRATIONS.iter().filter(|m| m.version > current) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(migration.postgres))
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO mcpgw_schema_migrations (version, name) VALUES ($1, $2)")
            .bind(migration.version)
            .bind(migration.name)
            .execute(&mut *tx)
            .await?;
        applied.push(migration);
    }
    tx.commit().await?;
    for migration in &applied {
        tracing::debug!(version = migration.version, "database migrated");
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_backends_have_every_migration_in_order() {
        for (i, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(migration.version, i as i64 + 1);
            for sql in [migration.sqlite, migration.postgres] {
                assert!(sql.contains("CREATE TABLE"), "{}", migration.name);
            }
            assert!(!migration.postgres.contains("BLOB"), "{}", migration.name);
            assert!(
                !migration.postgres.contains("WITHOUT ROWID"),
                "{}",
                migration.name
            );
        }
    }
}
