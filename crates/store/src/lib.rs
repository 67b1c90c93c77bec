//! mcpgw's persistence: one embedded SQLite database, all SQL in this crate.
//!
//! It holds the embedding cache (`embeddings`) and the OAuth state for upstream servers
//! (`oauth`: client registrations per authorization server, credentials per server and
//! principal, pending authorizations), sealed with a secret key (`secrets`), and the clients
//! of the HTTP listener with the hashes of their API keys (`clients`), and the tool pins: each
//! tool's trusted definition and a held change (`pins`), the calls waiting for a human
//! (`approvals`), the audit log of tool calls with its retention (`audit`), and short leases
//! that let one process at a time act for a key (`leases`: OAuth token refreshes). Callers get
//! domain types, never rows.
//!
//! Architecture invariants:
//! - All SQL lives here; schema changes are numbered migrations in `migrations/`, applied on
//!   open, never edited once released.
//! - The database is a cache and a record, not a source of truth for configuration: losing
//!   it costs re-embedding and re-authorising, never a wrong answer.
//! - A value read back that does not decode (wrong length, wrong dimension) is treated as
//!   absent and reported, never used.
//! - Secrets (tokens, client secrets, PKCE verifiers) are stored only sealed: AES-256-GCM
//!   under the store's secret key, with the row's identity as associated data. Plain columns
//!   hold only what is not secret (ids, issuers, expiry times, registration metadata).
//! - A sealed value that does not open (another key, another row, tampered, unknown format
//!   version) is absent, logged once naming its row, never returned and never an error. Only a
//!   key that cannot be loaded is an error, and only for the call that needed it.
//! - The secret key is loaded on first secret use (`$MCPGW_SECRET_KEY`, else a 0600 key
//!   file), so the embedding cache works with no key at all. Key material is zeroized on drop
//!   and appears in no `Debug` output, error or log; nor does any stored value.

mod approvals;
mod audit;
mod clients;
mod embeddings;
mod leases;
mod oauth;
mod pins;
mod secrets;
pub mod time;

/// Schema migrations in order; the database's `user_version` is the number applied.
/// Released entries are never edited: a change is a new entry.
const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_embeddings.sql"),
    include_str!("../migrations/0002_oauth.sql"),
    include_str!("../migrations/0003_clients.sql"),
    include_str!("../migrations/0004_pins.sql"),
    include_str!("../migrations/0005_approvals.sql"),
    include_str!("../migrations/0006_audit.sql"),
    include_str!("../migrations/0007_leases.sql"),
];

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

pub use approvals::{Approval, ApprovalStatus, DecideError, NewApproval, Verdict};
pub use audit::{
    AUDIT_PRUNE_BATCH, AuditCursor, AuditEntry, AuditPage, AuditQuery, CallDecision, CallOutcome,
    DECISION_WORDS, MAX_AUDIT_ERROR_CHARS, OUTCOME_WORDS, scrub_error,
};
pub use clients::{CLIENT_KEY_PREFIX, ClientInfo, is_valid_client_name};
pub use embeddings::{TextHash, text_hash};
pub use oauth::{AUTH_STATE_TTL, AuthState, ClientRegistration, CredentialStatus, Credentials};
pub use pins::{PinHash, PinState, SeenTool, ToolPin, TrustedDefinition};
pub use secrets::{KeySource, SECRET_KEY_FILE, SECRET_KEY_VAR};

/// Why the store failed. Messages are lower-case and name the file or variable, never a stored
/// value or key.
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
    #[error(
        "the environment variable {var} is not a valid secret key: expected the base64 encoding of 32 bytes"
    )]
    MalformedKeyVar { var: &'static str },
    #[error(
        "the secret key file {path} is not a valid secret key: expected the base64 encoding of 32 bytes"
    )]
    MalformedKeyFile { path: PathBuf },
    #[error(
        "the secret key file {path} is accessible to other users (mode {mode:03o}); restrict it with `chmod 600`"
    )]
    InsecureKeyFile { path: PathBuf, mode: u32 },
    #[error("cannot read or create the secret key file {path}: {source}")]
    KeyFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the client registration metadata for {issuer} is not a JSON object")]
    MalformedMetadata { issuer: String },
    #[error("the operating system's random number generator failed")]
    Random,
    #[error("a client named '{name}' already exists; remove it first to issue a new key")]
    ClientExists { name: String },
    #[error("'{name}' is not a valid client name: use 1 to 64 of letters, digits, '_', '.', '-'")]
    InvalidClientName { name: String },
    #[error("cannot encrypt a value for {table}")]
    Seal { table: &'static str },
}

/// A handle on the database; cheap to clone (a connection pool and the shared secret key).
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
    secrets: Arc<secrets::Secrets>,
}

impl Store {
    /// Closes every connection, waiting for those in use. The last one to close checkpoints
    /// the write-ahead log into the database file, so a stopped gateway leaves one complete
    /// file behind. Later calls on this store (or its clones) fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    /// Secrets use [`KeySource::beside`] `path`: `$MCPGW_SECRET_KEY`, else `secret.key` in the
    /// database's directory.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, KeySource::beside(path)).await
    }

    /// Like [`Store::open`], with the secret key from `keys` (read on first secret use).
    pub async fn open_with(path: &Path, keys: KeySource) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_owned(),
                source,
            })?;
        }
        private_files(path);
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
        Self::migrate(pool, path, keys).await
    }

    /// A private in-memory database (tests, `--no-store` runs). Its secrets are sealed with an
    /// ephemeral key: they die with the database anyway.
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
        Self::migrate(pool, path, KeySource::ephemeral()).await
    }

    /// Applies the migrations newer than the database's `user_version`, each in its own
    /// transaction together with the version bump. (sqlx's migrator needs its macro feature and
    /// a bookkeeping table; SQLite's `user_version` does the job in a few lines.)
    async fn migrate(pool: SqlitePool, path: &Path, keys: KeySource) -> Result<Store, StoreError> {
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
        Ok(Store {
            pool,
            secrets: Arc::new(secrets::Secrets::new(keys)),
        })
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

/// Makes the database file readable by its owner only (0600, like `secret.key`): it holds
/// sealed tokens, client key hashes and the audit log. A new file is created so before SQLite
/// opens it; SQLite gives its `-wal` and `-shm` files the database file's mode. An existing
/// file (and its `-wal`, `-shm`) left more open by an older mcpgw is tightened. Failures are
/// logged, not fatal: a read-only or foreign-owned file is the operator's to fix.
fn private_files(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        if !path.exists() {
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path);
            if let Err(error) = created
                && error.kind() != std::io::ErrorKind::AlreadyExists
            {
                tracing::warn!(path = %path.display(), %error, "cannot create the database file");
            }
        }
        let mut files = vec![path.to_owned()];
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            files.push(name.into());
        }
        for file in files {
            let Ok(metadata) = std::fs::metadata(&file) else {
                continue;
            };
            if metadata.permissions().mode() & 0o077 != 0
                && let Err(error) =
                    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
            {
                tracing::warn!(path = %file.display(), %error, "cannot make a database file private (0600)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn database_files_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mcpgw.db");
        let store = Store::open(&path).await.expect("open");
        store.add_client("alice").await.expect("write");
        for suffix in ["", "-wal", "-shm"] {
            let file = dir.path().join(format!("mcpgw.db{suffix}"));
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
        store.close().await;

        // A database an older mcpgw left world-readable is tightened on open.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let store = Store::open(&path).await.expect("reopen");
        assert_eq!(mode(&path), 0o600);
        store.close().await;
    }
}
