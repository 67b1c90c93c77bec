//! The two databases the store runs on, and where one lives: an embedded SQLite file (the
//! default) or a PostgreSQL server shared by several gateways.
//!
//! Every query is written once, with `$N` placeholders (SQLite reads `$N` as the N-th argument
//! too), and compiled for each backend by [`on_pool!`]: a `match` whose arms repeat the same
//! block with the pool of each type, so each backend runs its own native driver (SQLite keeps
//! its WAL, busy timeout and one-statement batches) and there is no per-row conversion.
//! Rejected: sqlx's `Any` driver, which converts every row to its own value type, maps
//! `QueryBuilder` placeholders to `?` (wrong for PostgreSQL), and hides the SQLite connect
//! options (WAL, synchronous, busy timeout) behind a URL.
//!
//! SQL that must differ (DDL, and nothing else today) lives in per-backend migration files
//! with the same numbers. Rows decoded outside a query's own block go through [`Record`], a
//! small trait both row types implement.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use secrecy::{ExposeSecret, SecretString};
use sqlx::Row as _;
use sqlx::postgres::{PgConnectOptions, PgPool, PgRow};
use sqlx::sqlite::{SqlitePool, SqliteRow};

use crate::StoreError;

/// Which engine a store runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a store lives: `sqlite://PATH`, `sqlite::memory:` or `postgres://…`
/// (`postgresql://…`). Its `Display` and `Debug` never show a password.
#[derive(Clone)]
pub enum Location {
    Sqlite(PathBuf),
    /// A private in-memory SQLite database (tests, `--no-store` runs).
    Memory,
    Postgres(PostgresUrl),
}

impl Location {
    /// Reads a database URL. A relative SQLite path is relative to the working directory.
    pub fn parse(url: &str) -> Result<Location, StoreError> {
        let url = url.trim();
        if url == "sqlite::memory:" {
            return Ok(Location::Memory);
        }
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(StoreError::BadUrl {
                    url: url.to_owned(),
                    reason: "it names no file (sqlite://PATH, e.g. sqlite:///var/lib/mcpgw/mcpgw.db)",
                });
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return PostgresUrl::parse(url).map(Location::Postgres);
        }
        Err(StoreError::BadUrl {
            url: redact(url),
            reason: "expected sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DATABASE",
        })
    }

    pub fn backend(&self) -> Backend {
        match self {
            Location::Sqlite(_) | Location::Memory => Backend::Sqlite,
            Location::Postgres(_) => Backend::Postgres,
        }
    }
}

impl From<&Path> for Location {
    fn from(path: &Path) -> Location {
        Location::Sqlite(path.to_owned())
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Memory => f.write_str("sqlite::memory:"),
            Location::Postgres(url) => fmt::Display::fmt(url, f),
        }
    }
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Location({self})")
    }
}

/// A PostgreSQL connection URL. It may hold a password, so it is kept as a secret and shown
/// with the password replaced by `***`.
#[derive(Clone)]
pub struct PostgresUrl {
    url: SecretString,
    shown: String,
}

impl PostgresUrl {
    pub fn parse(url: &str) -> Result<PostgresUrl, StoreError> {
        let shown = redact(url);
        // sqlx's own parser decides what it accepts; its error may quote the URL, so it is
        // replaced by ours.
        PgConnectOptions::from_str(url).map_err(|_| StoreError::BadUrl {
            url: shown.clone(),
            reason: "not a PostgreSQL connection URL (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)",
        })?;
        Ok(PostgresUrl {
            url: SecretString::from(url),
            shown,
        })
    }

    pub(crate) fn options(&self) -> PgConnectOptions {
        // Parsed once in `parse`; a failure here cannot happen, and would mean the defaults.
        PgConnectOptions::from_str(self.url.expose_secret()).unwrap_or_default()
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostgresUrl({})", self.shown)
    }
}

/// `url` with the password of its user info and any `password=` parameter replaced by `***`.
pub fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest = scheme_end + 3;
        let authority_end = out[rest..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| rest + i);
        if let Some(at) = out[rest..authority_end].rfind('@') {
            let at = rest + at;
            if let Some(colon) = out[rest..at].find(':') {
                out.replace_range(rest + colon + 1..at, "***");
            }
        }
    }
    if let Some(query) = out.find('?') {
        let (head, tail) = out.split_at(query + 1);
        let params: Vec<String> = tail
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                    format!("{name}=***")
                }
                _ => param.to_owned(),
            })
            .collect();
        out = format!("{head}{}", params.join("&"));
    }
    out
}

/// A connection pool of either backend.
#[derive(Clone, Debug)]
pub(crate) enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Pool {
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
        }
    }

    pub(crate) async fn close(&self) {
        match self {
            Pool::Sqlite(pool) => pool.close().await,
            Pool::Postgres(pool) => pool.close().await,
        }
    }
}

/// Runs `$body` with `$pool` bound to the pool of whichever backend `$store_pool` is: the
/// same source, compiled once per driver.
macro_rules! on_pool {
    ($store_pool:expr, $pool:ident => $body:expr) => {
        match $store_pool {
            $crate::backend::Pool::Sqlite($pool) => $body,
            $crate::backend::Pool::Postgres($pool) => $body,
        }
    };
}
pub(crate) use on_pool;

/// Typed column reads shared by both row types, for decoding helpers that serve either
/// backend.
pub(crate) trait Record {
    fn text(&self, column: &str) -> Result<String, sqlx::Error>;
    fn text_opt(&self, column: &str) -> Result<Option<String>, sqlx::Error>;
    fn int(&self, column: &str) -> Result<i64, sqlx::Error>;
    fn int_opt(&self, column: &str) -> Result<Option<i64>, sqlx::Error>;
    fn bytes(&self, column: &str) -> Result<Vec<u8>, sqlx::Error>;
    fn bytes_opt(&self, column: &str) -> Result<Option<Vec<u8>>, sqlx::Error>;
}

macro_rules! record {
    ($row:ty) => {
        impl Record for $row {
            fn text(&self, column: &str) -> Result<String, sqlx::Error> {
                self.try_get(column)
            }
            fn text_opt(&self, column: &str) -> Result<Option<String>, sqlx::Error> {
                self.try_get(column)
            }
            fn int(&self, column: &str) -> Result<i64, sqlx::Error> {
                self.try_get(column)
            }
            fn int_opt(&self, column: &str) -> Result<Option<i64>, sqlx::Error> {
                self.try_get(column)
            }
            fn bytes(&self, column: &str) -> Result<Vec<u8>, sqlx::Error> {
                self.try_get(column)
            }
            fn bytes_opt(&self, column: &str) -> Result<Option<Vec<u8>>, sqlx::Error> {
                self.try_get(column)
            }
        }
    };
}
record!(SqliteRow);
record!(PgRow);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_read_as_locations_and_never_show_a_password() {
        let check = |url: &str, expect: &str| {
            let shown = match Location::parse(url) {
                Ok(location) => format!("{} {location} {location:?}", location.backend()),
                Err(error) => format!("error: {error}"),
            };
            assert_eq!(shown, expect, "{url}");
            assert!(!shown.contains("hunter2"), "{shown}");
        };
        check(
            "sqlite:///var/lib/mcpgw/mcpgw.db",
            "sqlite /var/lib/mcpgw/mcpgw.db Location(/var/lib/mcpgw/mcpgw.db)",
        );
        check(
            "sqlite://state/mcpgw.db",
            "sqlite state/mcpgw.db Location(state/mcpgw.db)",
        );
        check(
            "sqlite::memory:",
            "sqlite sqlite::memory: Location(sqlite::memory:)",
        );
        check(
            "postgres://mcpgw:hunter2@db.internal:5432/mcpgw",
            "postgres postgres://mcpgw:***@db.internal:5432/mcpgw Location(postgres://mcpgw:***@db.internal:5432/mcpgw)",
        );
        check(
            "postgresql://mcpgw@db/mcpgw?password=hunter2&sslmode=require",
            "postgres postgresql://mcpgw@db/mcpgw?password=***&sslmode=require Location(postgresql://mcpgw@db/mcpgw?password=***&sslmode=require)",
        );
        check(
            "sqlite://",
            "error: cannot use the database URL 'sqlite://': it names no file (sqlite://PATH, e.g. sqlite:///var/lib/mcpgw/mcpgw.db)",
        );
        check(
            "mysql://root:hunter2@db/mcpgw",
            "error: cannot use the database URL 'mysql://root:***@db/mcpgw': expected sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DATABASE",
        );
        check(
            "postgres://u:hunter2@db:notaport/x",
            "error: cannot use the database URL 'postgres://u:***@db:notaport/x': not a PostgreSQL connection URL (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE)",
        );
    }
}
