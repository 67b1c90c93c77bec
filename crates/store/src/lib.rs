//! mcpgw's persistence: an embedded SQLite database (the default) or a PostgreSQL database
//! shared by several processes, behind one [`Store`]; all SQL in this crate.
//!
//! It holds the embedding cache (`embeddings`) and the OAuth state for upstream servers
//! (`oauth`: client registrations per authorization server, credentials per server and
//! principal, pending authorizations), sealed with a secret key (`secrets`), and the clients
//! of the HTTP listener with the hashes of their API keys (`clients`), and the tool pins: each
//! tool's trusted definition and a held change (`pins`), the calls waiting for a human
//! (`approvals`), the audit log of tool calls with its retention (`audit`), and short leases
//! that let one process at a time act for a key (`leases`: OAuth token refreshes). Callers get
//! domain types, never rows, and the same methods whichever the backend.
//!
//! `backend` says where a store lives ([`Location`]: `sqlite://PATH`, `postgres://...`) and
//! runs each query on either pool (`on_pool!`: one source, compiled per driver); `schema`
//! holds the migrations of both; `copy` moves every row from one store to another.
//!
//! Architecture invariants:
//! - All SQL lives here, written once with `$N` placeholders for both backends; only DDL
//!   differs. Schema changes are numbered migrations, the same numbers for SQLite
//!   (`migrations/`, `user_version`) and PostgreSQL (`migrations/postgres/`, the
//!   `mcpgw_schema_migrations` table), applied on open, never edited once released.
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
//!   and appears in no `Debug` output, error or log; nor does any stored value, nor a database
//!   password ([`Location`] shows URLs with `***`).
//! - A PostgreSQL store, shared by replicas, takes its key only from outside the database
//!   ([`KeySource::external`]): opening one with a source that would make up a key is refused.
//! - Every operation that must hold across processes (a lease, an approval's decision, a pin's
//!   approval) is one conditional statement or one transaction, on either backend.
//! - The store's tests run against both backends from one source (`testing::backend_tests!`).

mod approvals;
mod audit;
mod backend;
mod clients;
mod copy;
mod embeddings;
mod leases;
mod oauth;
mod pins;
mod schema;
mod secrets;
mod sessions;
#[cfg(test)]
mod testing;
pub mod time;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use backend::Pool;

pub use approvals::{Approval, ApprovalStatus, DecideError, NewApproval, Verdict};
pub use audit::{
    AUDIT_PRUNE_BATCH, AuditCursor, AuditEntry, AuditPage, AuditQuery, CallDecision, CallOutcome,
    DECISION_WORDS, MAX_AUDIT_ERROR_CHARS, OUTCOME_WORDS, scrub_error,
};
pub use backend::{Backend, Location, PostgresUrl, redact};
pub use clients::{CLIENT_KEY_PREFIX, ClientInfo, is_valid_client_name};
pub use copy::{CopyOptions, CopyReport};
pub use embeddings::{TextHash, text_hash};
pub use oauth::{AUTH_STATE_TTL, AuthState, ClientRegistration, CredentialStatus, Credentials};
pub use pins::{PinHash, PinState, SeenTool, ToolPin, TrustedDefinition};
pub use schema::{MIGRATIONS, Migration, MigrationStatus, latest_version};
pub use secrets::{KeySource, SECRET_KEY_FILE, SECRET_KEY_VAR};

/// Why the store failed. Messages are lower-case and name the file, variable or database (its
/// URL without a password), never a stored value or key.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the directory for the database {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the database {location}: {source}")]
    Open {
        location: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("cannot migrate the database {location}: {source}")]
    Migrate {
        location: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("the database {location} does not exist")]
    Missing { location: String },
    #[error("cannot use the database URL '{url}': {reason}")]
    BadUrl { url: String, reason: &'static str },
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
    #[error(
        "a PostgreSQL store needs its secret key from outside the database: set MCPGW_SECRET_KEY \
         (the base64 of 32 random bytes, e.g. `openssl rand -base64 32`) or `[store] key_file`"
    )]
    NoExternalKey,
    #[error(
        "the secret key file {path} does not exist; with PostgreSQL it is not created: copy the \
         key every replica shares there (mode 0600), or set MCPGW_SECRET_KEY"
    )]
    MissingKeyFile { path: PathBuf },
    #[error(
        "the destination database {location} is not empty ({tables}); copy into an empty database, \
         or pass --force to replace what it holds"
    )]
    NotEmpty { location: String, tables: String },
    #[error(
        "the database {location} has schema version {found}, newer than this mcpgw knows ({latest}); \
         use the mcpgw that wrote it"
    )]
    NewerSchema {
        location: String,
        found: i64,
        latest: i64,
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
    pool: Pool,
    secrets: Arc<secrets::Secrets>,
    /// Where it lives, as errors and status show it (no password).
    location: Arc<str>,
}

/// Connections per PostgreSQL pool: enough for a gateway's concurrent calls (audit, leases,
/// approvals); a server's `max_connections` (100 by default) holds several replicas.
const POSTGRES_CONNECTIONS: u32 = 10;

/// Connections to a SQLite file: WAL lets the readers go on while one writes.
const SQLITE_CONNECTIONS: u32 = 4;

/// The page cache of each SQLite connection, in KiB (SQLite's default is 2 MiB).
const SQLITE_CACHE_KIB: u32 = 512;

impl Store {
    /// Closes every connection, waiting for those in use. With SQLite, the last one to close
    /// checkpoints the write-ahead log into the database file, so a stopped gateway leaves one
    /// complete file behind. Later calls on this store (or its clones) fail.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Which engine this store runs on.
    pub fn backend(&self) -> Backend {
        self.pool.backend()
    }

    /// Where this store lives, as a URL without its password (or a file path).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    /// Secrets use [`KeySource::beside`] `path`: `$MCPGW_SECRET_KEY`, else `secret.key` in the
    /// database's directory.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, KeySource::beside(path)).await
    }

    /// Like [`Store::open`], with the secret key from `keys` (read on first secret use).
    pub async fn open_with(path: &Path, keys: KeySource) -> Result<Store, StoreError> {
        Self::open_at(&Location::Sqlite(path.to_owned()), keys).await
    }

    /// Opens the database at `location` (a SQLite file is created if needed) and applies
    /// pending migrations. A PostgreSQL store refuses a key source that would create a key of
    /// its own ([`KeySource::check_external`]): every replica must seal with the same key.
    pub async fn open_at(location: &Location, keys: KeySource) -> Result<Store, StoreError> {
        if location.backend() == Backend::Postgres {
            keys.check_external()?;
        }
        let store = Self::connect(location, keys, true).await?;
        store.migrate_now().await?;
        Ok(store)
    }

    /// A private in-memory database (tests, `--no-store` runs). Its secrets are sealed with an
    /// ephemeral key: they die with the database anyway.
    pub async fn open_in_memory() -> Result<Store, StoreError> {
        Self::open_at(&Location::Memory, KeySource::ephemeral()).await
    }

    /// Where the schema of the database at `location` stands, changing nothing (a SQLite file
    /// that does not exist is not created: it is at version 0).
    pub async fn migration_status(location: &Location) -> Result<MigrationStatus, StoreError> {
        if let Location::Sqlite(path) = location
            && !path.exists()
        {
            return Ok(MigrationStatus::new(
                Backend::Sqlite,
                location.to_string(),
                0,
            ));
        }
        let store = Self::connect(location, KeySource::ephemeral(), false).await?;
        let status = store.status().await;
        store.close().await;
        status
    }

    /// Applies the pending migrations of the database at `location` (creating a SQLite file if
    /// needed) and returns those applied. Needs no secret key.
    pub async fn migrate(location: &Location) -> Result<Vec<&'static Migration>, StoreError> {
        let store = Self::connect(location, KeySource::ephemeral(), true).await?;
        let applied = store.migrate_now().await;
        store.close().await;
        applied
    }

    async fn status(&self) -> Result<MigrationStatus, StoreError> {
        let applied = schema::applied(&self.pool)
            .await
            .map_err(|source| self.migrate_error(source))?;
        Ok(MigrationStatus::new(
            self.backend(),
            self.location.to_string(),
            applied,
        ))
    }

    async fn migrate_now(&self) -> Result<Vec<&'static Migration>, StoreError> {
        let status = self.status().await?;
        if status.applied > status.latest {
            return Err(StoreError::NewerSchema {
                location: status.location,
                found: status.applied,
                latest: status.latest,
            });
        }
        schema::apply(&self.pool)
            .await
            .map_err(|source| self.migrate_error(source))
    }

    fn migrate_error(&self, source: sqlx::Error) -> StoreError {
        StoreError::Migrate {
            location: self.location.to_string(),
            source,
        }
    }

    /// Connects without migrating. `create`: a missing SQLite file (and its directory) is
    /// created.
    async fn connect(
        location: &Location,
        keys: KeySource,
        create: bool,
    ) -> Result<Store, StoreError> {
        let shown = location.to_string();
        let open_error = |source| StoreError::Open {
            location: shown.clone(),
            source,
        };
        let pool = match location {
            Location::Sqlite(path) => {
                if create {
                    if let Some(dir) = path.parent()
                        && !dir.as_os_str().is_empty()
                    {
                        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                            path: dir.to_owned(),
                            source,
                        })?;
                    }
                    private_files(path);
                }
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(create)
                    // WAL lets readers (searches) proceed while a refresh writes new embeddings.
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(5))
                    // Each connection keeps its own page cache, 2 MiB by default: after a burst
                    // of audit rows the four held 8 MiB for good, a fifth of an idle gateway's
                    // memory. The operating system caches the file as well, so 512 KiB each
                    // costs no disk reads on this store's small working set.
                    .pragma("cache_size", format!("-{SQLITE_CACHE_KIB}"));
                let pool = SqlitePoolOptions::new()
                    .max_connections(SQLITE_CONNECTIONS)
                    .connect_with(options)
                    .await
                    .map_err(open_error)?;
                Pool::Sqlite(pool)
            }
            Location::Memory => {
                // One connection: every connection to ":memory:" would be its own empty database.
                let pool = SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(SqliteConnectOptions::new().in_memory(true))
                    .await
                    .map_err(open_error)?;
                Pool::Sqlite(pool)
            }
            Location::Postgres(url) => {
                // One connection first: the pool would retry until its timeout and then say
                // only that it timed out, hiding "connection refused" or "password
                // authentication failed".
                let probe = <sqlx::PgConnection as sqlx::Connection>::connect_with(&url.options())
                    .await
                    .map_err(open_error)?;
                let _ = sqlx::Connection::close(probe).await;
                let pool = PgPoolOptions::new()
                    .max_connections(POSTGRES_CONNECTIONS)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(url.options())
                    .await
                    .map_err(open_error)?;
                Pool::Postgres(pool)
            }
        };
        Ok(Store {
            pool,
            secrets: Arc::new(secrets::Secrets::new(keys)),
            location: shown.into(),
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

    crate::testing::backend_tests! {
    /// Two handles on one database (two gateways, or a gateway and `mcpgw` commands) see each
    /// other's writes at once, and a lease one holds is refused to the other.
    async fn two_handles_see_each_others_writes_and_leases(db) {
        use secrecy::ExposeSecret as _;
        let a = db.open().await;
        let b = db.open().await;
        let key = a.add_client("ci").await.expect("add on a");
        assert_eq!(
            b.authenticate_client(key.expose_secret()).await.expect("auth on b").as_deref(),
            Some("ci")
        );
        b.put_credentials(
            "github",
            "local",
            &Credentials {
                issuer: "https://auth.example".into(),
                document: secrecy::SecretString::from("tok"),
                expires_at: None,
            },
        )
        .await
        .expect("put on b");
        let got = a.credentials("github", "local").await.expect("get on a").expect("present");
        assert_eq!(got.document.expose_secret(), "tok", "one key seals for both handles");
        let definition = serde_json::json!({"name": "echo"});
        let seen = SeenTool {
            server: "srv",
            tool: "echo",
            qualified: "srv__echo",
            hash: [7; 32],
            definition: &definition,
        };
        assert_eq!(a.pin_first_use(&[seen]).await.expect("pin on a"), [true]);
        assert_eq!(b.pin_first_use(&[seen]).await.expect("pin on b"), [false], "already pinned");
        assert!(a.try_lease("refresh:github:local", "a", Duration::from_secs(60)).await.expect("lease"));
        assert!(
            !b.try_lease("refresh:github:local", "b", Duration::from_secs(60)).await.expect("lease"),
            "held by a"
        );
        a.release_lease("refresh:github:local", "a").await.expect("release");
        assert!(b.try_lease("refresh:github:local", "b", Duration::from_secs(60)).await.expect("lease"));
    }
    }

    /// PostgreSQL is shared by replicas, so its key must come from outside: never a key file
    /// made up beside a database that has no "beside".
    #[tokio::test]
    async fn a_postgres_store_takes_its_key_only_from_outside() {
        use secrecy::ExposeSecret as _;
        let db = crate::testing::TestDb::new(Backend::Postgres).await;
        let no_var = |source: KeySource| source.with_env(|_| None);
        let dir = tempfile::tempdir().expect("tempdir");
        let refused = [
            no_var(KeySource::beside(&dir.path().join("mcpgw.db"))),
            no_var(KeySource::external(None)),
            no_var(KeySource::external(Some(dir.path().join("missing.key")))),
        ];
        for keys in refused {
            let error = Store::open_at(&db.location, keys)
                .await
                .expect_err("refused");
            let message = error.to_string();
            assert!(message.contains("MCPGW_SECRET_KEY"), "{message}");
            assert!(
                !dir.path().join("secret.key").exists(),
                "no key file made up"
            );
        }
        let key_file = dir.path().join("shared.key");
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&key_file)
                .expect("key file");
            use base64::Engine as _;
            std::io::Write::write_all(
                &mut file,
                base64::engine::general_purpose::STANDARD
                    .encode([9u8; 32])
                    .as_bytes(),
            )
            .expect("write");
        }
        let store = Store::open_at(&db.location, no_var(KeySource::external(Some(key_file))))
            .await
            .expect("a key file from outside is enough");
        store
            .put_auth_state(
                "st",
                &AuthState {
                    server: "s".into(),
                    principal: "p".into(),
                    payload: secrecy::SecretString::from("pkce"),
                },
            )
            .await
            .expect("sealed with the file's key");
        let taken = store
            .take_auth_state("st")
            .await
            .expect("take")
            .expect("present");
        assert_eq!(taken.payload.expose_secret(), "pkce");
        assert_eq!(store.backend(), Backend::Postgres);
    }
}
