//! Test databases of either backend, and [`backend_tests!`], which runs each test body once
//! against SQLite and once against PostgreSQL: one source, two tests (`NAME::sqlite`,
//! `NAME::postgres`).
//!
//! SQLite tests get a file in a temporary directory. PostgreSQL tests get a schema of their
//! own (`search_path` in the URL) in the database named by `$MCPGW_TEST_POSTGRES_URL`, else by
//! `.peers/postgres/url`, which `scripts/test-postgres.sh start` writes; so they run in
//! parallel. With neither, or no server answering, a PostgreSQL test fails saying how to start
//! one: it never passes without having run.

use std::path::PathBuf;

use sqlx::Connection as _;

use crate::{Backend, KeySource, Location, Store};

pub(crate) const POSTGRES_URL_VAR: &str = "MCPGW_TEST_POSTGRES_URL";

const HOW_TO_START: &str = "start the test PostgreSQL with `scripts/test-postgres.sh start` (it prints \
     MCPGW_TEST_POSTGRES_URL and writes .peers/postgres/url, which the tests read), or point \
     MCPGW_TEST_POSTGRES_URL at a server where the tests may create schemas";

/// A fresh database for one test, opened as often as the test likes.
pub(crate) struct TestDb {
    pub location: Location,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn new(backend: Backend) -> TestDb {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                TestDb {
                    location: Location::Sqlite(dir.path().join("mcpgw.db")),
                    _dir: Some(dir),
                }
            }
            Backend::Postgres => TestDb {
                location: postgres_schema().await,
                _dir: None,
            },
        }
    }

    /// A store on this database, sealing with a fixed test key (so every handle opens what
    /// another sealed).
    pub async fn open(&self) -> Store {
        self.open_with(test_keys()).await
    }

    pub async fn open_with(&self, keys: KeySource) -> Store {
        Store::open_at(&self.location, keys)
            .await
            .unwrap_or_else(|e| panic!("open {}: {e}", self.location))
    }

    pub fn backend(&self) -> Backend {
        self.location.backend()
    }
}

/// `$MCPGW_SECRET_KEY` as the tests set it: the same 32 bytes for every handle.
pub(crate) fn test_keys() -> KeySource {
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD.encode([42u8; 32]);
    KeySource::external(None).with_env(move |_| Some(key.clone().into()))
}

/// The base URL of the test server, or a failure saying how to start one.
pub(crate) fn postgres_url() -> String {
    if let Ok(url) = std::env::var(POSTGRES_URL_VAR)
        && !url.trim().is_empty()
    {
        return url.trim().to_owned();
    }
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.peers/postgres/url");
    match std::fs::read_to_string(&file) {
        Ok(url) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => panic!(
            "no PostgreSQL for the tests: {POSTGRES_URL_VAR} is not set and {} does not exist; {HOW_TO_START}",
            file.display()
        ),
    }
}

/// A new schema in the test database, and the URL of the database with it as `search_path`.
async fn postgres_schema() -> Location {
    let base = postgres_url();
    let mut bytes = [0u8; 8];
    aes_gcm::aead::common::getrandom::fill(&mut bytes).expect("random");
    let schema: String = std::iter::once("t_".to_owned())
        .chain(bytes.iter().map(|b| format!("{b:02x}")))
        .collect();
    let mut admin = sqlx::PgConnection::connect(&base)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot reach the test PostgreSQL at {}: {e}; {HOW_TO_START}",
                crate::redact(&base)
            )
        });
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut admin)
        .await
        .expect("create schema");
    let _ = admin.close().await;
    let separator = if base.contains('?') { '&' } else { '?' };
    Location::parse(&format!("{base}{separator}options[search_path]={schema}")).expect("test URL")
}

/// Runs each `async fn NAME(db) { ... }` as two tests, `NAME::sqlite` and `NAME::postgres`,
/// with `db` a fresh [`TestDb`] of that backend.
macro_rules! backend_tests {
    ($($(#[$meta:meta])* async fn $name:ident($db:ident) $body:block)*) => {
        $(
            $(#[$meta])*
            mod $name {
                #[allow(unused_imports)]
                use super::*;

                #[tokio::test]
                async fn sqlite() {
                    let $db = $crate::testing::TestDb::new($crate::Backend::Sqlite).await;
                    $body
                }

                #[tokio::test]
                async fn postgres() {
                    let $db = $crate::testing::TestDb::new($crate::Backend::Postgres).await;
                    $body
                }
            }
        )*
    };
}
pub(crate) use backend_tests;

impl Store {
    /// Runs `sql` (one or more statements, no parameters) on this store's database.
    pub(crate) async fn exec(&self, sql: &str) {
        crate::backend::on_pool!(&self.pool, pool => {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                .execute(pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        })
    }
}
