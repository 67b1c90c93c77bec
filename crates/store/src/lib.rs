//! mcpgw's persistence: one embedded SQLite database, all SQL in this crate.
//!
//! Today it holds the embedding cache; tokens, OAuth clients, approvals, pins and the audit log
//! join it as their features land. Callers get domain types, never rows.
//!
//! Architecture invariants:
//! - All SQL lives here; schema changes are numbered migrations in `migrations/`, applied on
//!   open, never edited once released.
//! - The database is a cache and a record, not a source of truth for configuration: losing
//!   it costs re-embedding (and, later, re-authorising), never a wrong answer.
//! - A value read back that does not decode (wrong length, wrong dimension) is treated as
//!   absent and reported, never used.

mod embeddings;

/// Schema migrations in order; the database's `user_version` is the number applied.
/// Released entries are never edited: a change is a new entry.
const MIGRATIONS: &[&str] = &[include_str!("../migrations/0001_embeddings.sql")];

use std::path::{Path, PathBuf};

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

pub use embeddings::{TextHash, text_hash};

/// Why the store failed. Messages are lower-case and name the file, never a stored value.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the directory for the database {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the database {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: sqlx::Error,
    },
    #[error("cannot migrate the database {path}: {source}")]
    Migrate {
        path: PathBuf,
        #[source]
        source: sqlx::Error,
    },
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
}

/// A handle on the database; cheap to clone (a connection pool).
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_owned(),
                source,
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            // WAL lets readers (searches) proceed while a refresh writes new embeddings.
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(std::time::Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Open {
                path: path.to_owned(),
                source,
            })?;
        Self::migrate(pool, path).await
    }

    /// A private in-memory database (tests, `--no-store` runs).
    pub async fn open_in_memory() -> Result<Store, StoreError> {
        let path = Path::new(":memory:");
        // One connection: every connection to ":memory:" would be its own empty database.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(SqliteConnectOptions::new().in_memory(true))
            .await
            .map_err(|source| StoreError::Open {
                path: path.to_owned(),
                source,
            })?;
        Self::migrate(pool, path).await
    }

    /// Applies the migrations newer than the database's `user_version`, each in its own
    /// transaction together with the version bump. (sqlx's migrator needs its macro feature and
    /// a bookkeeping table; SQLite's `user_version` does the job in a few lines.)
    async fn migrate(pool: SqlitePool, path: &Path) -> Result<Store, StoreError> {
        let fail = |source: sqlx::Error| StoreError::Migrate {
            path: path.to_owned(),
            source,
        };
        let current: i64 = sqlx::query_scalar("PRAGMA user_version")
            .fetch_one(&pool)
            .await
            .map_err(fail)?;
        for (version, sql) in MIGRATIONS.iter().enumerate() {
            let version = version as i64 + 1;
            if version <= current {
                continue;
            }
            let mut tx = pool.begin().await.map_err(fail)?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
                .execute(&mut *tx)
                .await
                .map_err(fail)?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "PRAGMA user_version = {version}"
            )))
            .execute(&mut *tx)
            .await
            .map_err(fail)?;
            tx.commit().await.map_err(fail)?;
            tracing::debug!(version, "database migrated");
        }
        Ok(Store { pool })
    }

    /// The default database location: `$XDG_DATA_HOME/mcpgw/mcpgw.db`, else
    /// `~/.local/share/mcpgw/mcpgw.db`, else `./mcpgw.db`.
    pub fn default_path() -> PathBuf {
        let base = std::env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|home| PathBuf::from(home).join(".local/share"))
            });
        match base {
            Some(base) => base.join("mcpgw/mcpgw.db"),
            None => PathBuf::from("mcpgw.db"),
        }
    }
}
