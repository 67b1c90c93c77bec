//! Copying a whole store into another (`mcpgw store copy`): moving an installation from its
//! SQLite file to PostgreSQL (or back) without losing tokens, keys, pins or audit.
//!
//! Rows are copied as stored: sealed values stay sealed (their associated data is the row's
//! key columns, which are copied unchanged, so the same key opens them at the destination),
//! client keys stay hashes, audit rows keep their ids and so their order. Nothing is decrypted,
//! so no key is needed. Leases that have run out are skipped; a live one is copied (a refresh
//! in flight keeps its holder until it expires).
//!
//! The destination is written in one transaction: a copy that fails leaves it as it was. It
//! must be empty (every table without rows, the pins generation at 0) unless the caller forces
//! the copy, which first deletes what it holds.

use std::time::SystemTime;

use futures::TryStreamExt as _;
use sqlx::Row as _;

use crate::backend::{Location, Pool};
use crate::time::unix_millis;
use crate::{KeySource, Store, StoreError};

/// How to copy.
#[derive(Clone, Copy, Debug, Default)]
pub struct CopyOptions {
    /// Replace whatever the destination holds, instead of refusing a non-empty one.
    pub force: bool,
}

/// What was copied: rows per table, in copy order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyReport {
    pub tables: Vec<(&'static str, u64)>,
    /// Leases not copied because they had run out.
    pub expired_leases: u64,
    /// The pins generation carried over.
    pub pins_generation: i64,
}

#[derive(Clone, Copy)]
enum Kind {
    Int,
    Text,
    Blob,
}

/// One table: its columns (every column of the schema, by kind), and the order rows are read
/// in (the primary key; audit ids ascending).
struct Table {
    name: &'static str,
    columns: &'static [(&'static str, Kind)],
    order: &'static str,
}

use Kind::{Blob, Int, Text};

/// Every table with rows to copy. `tool_pins_generation` (one row, always present) is carried
/// over on its own. A new migration that adds a table or column adds it here; the test
/// `every_table_and_column_is_copied` fails until it does.
const TABLES: &[Table] = &[
    Table {
        name: "embeddings",
        columns: &[
            ("model", Text),
            ("text_hash", Blob),
            ("dim", Int),
            ("vector", Blob),
            ("created_at", Int),
        ],
        order: "model, text_hash",
    },
    Table {
        name: "oauth_clients",
        columns: &[
            ("issuer", Text),
            ("redirect_uri", Text),
            ("client_id", Text),
            ("client_secret", Blob),
            ("metadata", Text),
            ("created_at", Int),
        ],
        order: "issuer, redirect_uri",
    },
    Table {
        name: "oauth_credentials",
        columns: &[
            ("server", Text),
            ("principal", Text),
            ("issuer", Text),
            ("credentials", Blob),
            ("expires_at", Int),
            ("updated_at", Int),
        ],
        order: "server, principal",
    },
    Table {
        name: "oauth_states",
        columns: &[
            ("state", Text),
            ("server", Text),
            ("principal", Text),
            ("payload", Blob),
            ("created_at", Int),
        ],
        order: "state",
    },
    Table {
        name: "clients",
        columns: &[
            ("name", Text),
            ("key_hash", Blob),
            ("created_at", Int),
            ("last_used_at", Int),
        ],
        order: "name",
    },
    Table {
        name: "tool_pins",
        columns: &[
            ("server", Text),
            ("tool", Text),
            ("qualified", Text),
            ("trusted_hash", Blob),
            ("trusted_definition", Text),
            ("trusted_at", Int),
            ("pending_hash", Blob),
            ("pending_definition", Text),
            ("pending_since", Int),
        ],
        order: "server, tool",
    },
    Table {
        name: "approvals",
        columns: &[
            ("id", Text),
            ("principal", Text),
            ("server", Text),
            ("tool", Text),
            ("arguments", Text),
            ("created_ms", Int),
            ("expires_ms", Int),
            ("status", Text),
            ("decided_by", Text),
            ("decided_ms", Int),
            ("decided_arguments", Text),
            ("reason", Text),
        ],
        order: "id",
    },
    Table {
        name: "audit",
        columns: &[
            ("id", Int),
            ("at_ms", Int),
            ("principal", Text),
            ("server", Text),
            ("tool", Text),
            ("args_sha256", Text),
            ("decision", Text),
            ("approver", Text),
            ("outcome", Text),
            ("latency_ms", Int),
            ("error", Text),
        ],
        order: "id",
    },
    Table {
        name: "leases",
        columns: &[("key", Text), ("holder", Text), ("expires_ms", Int)],
        order: "key",
    },
];

/// Rows per `INSERT`: at most 12 columns, so under 1,200 bound values a statement.
const BATCH: usize = 100;

#[derive(Clone)]
enum Cell {
    Int(Option<i64>),
    Text(Option<String>),
    Blob(Option<Vec<u8>>),
}

impl Store {
    /// Copies every row of the store at `from` into the store at `to` (created and migrated
    /// if needed; the source is migrated too, as the gateway would on open). See the module
    /// docs for what is copied and when the destination is refused.
    pub async fn copy(
        from: &Location,
        to: &Location,
        options: CopyOptions,
    ) -> Result<CopyReport, StoreError> {
        if let Location::Sqlite(path) = from
            && !path.exists()
        {
            return Err(StoreError::Missing {
                location: from.to_string(),
            });
        }
        if from.to_string() == to.to_string() {
            return Err(StoreError::BadUrl {
                url: to.to_string(),
                reason: "it is the source itself",
            });
        }
        let source = Store::connect(from, KeySource::ephemeral(), false).await?;
        source.migrate_now().await?;
        let destination = Store::connect(to, KeySource::ephemeral(), true).await?;
        destination.migrate_now().await?;
        let copied = copy_rows(&source, &destination, options).await;
        source.close().await;
        destination.close().await;
        copied
    }
}

async fn copy_rows(
    source: &Store,
    destination: &Store,
    options: CopyOptions,
) -> Result<CopyReport, StoreError> {
    let held = destination.row_counts().await?;
    let generation = destination.pins_generation().await?;
    if !options.force && (held.iter().any(|(_, n)| *n > 0) || generation != 0) {
        let mut tables: Vec<String> = held
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(table, n)| format!("{table}: {n} rows"))
            .collect();
        if generation != 0 {
            tables.push(format!("pins generation {generation}"));
        }
        return Err(StoreError::NotEmpty {
            location: destination.location.to_string(),
            tables: tables.join(", "),
        });
    }
    let now = unix_millis(SystemTime::now());
    let pins_generation = source.pins_generation().await?;
    let mut report = CopyReport {
        tables: Vec::with_capacity(TABLES.len()),
        expired_leases: 0,
        pins_generation,
    };
    let mut writer = Writer::begin(&destination.pool).await?;
    if options.force {
        for table in TABLES {
            writer
                .exec(&format!("DELETE FROM {}", table.name), None)
                .await?;
        }
    }
    for table in TABLES {
        let columns: Vec<&str> = table.columns.iter().map(|(name, _)| *name).collect();
        let mut sql = format!("SELECT {} FROM {}", columns.join(", "), table.name);
        let live_leases_only = table.name == "leases";
        if live_leases_only {
            sql.push_str(" WHERE expires_ms > $1");
        }
        sql.push_str(&format!(" ORDER BY {}", table.order));
        let bind = live_leases_only.then_some(now);
        let copied = copy_table(&source.pool, &sql, bind, table, &mut writer).await?;
        report.tables.push((table.name, copied));
    }
    let all_leases = source.table_count("leases").await?;
    let copied_leases = report
        .tables
        .iter()
        .find(|(name, _)| *name == "leases")
        .map_or(0, |(_, n)| *n);
    report.expired_leases = all_leases.saturating_sub(copied_leases);
    writer
        .exec(
            "UPDATE tool_pins_generation SET generation = $1 WHERE id = 1",
            Some(pins_generation),
        )
        .await?;
    if let Writer::Postgres(_) = writer {
        // Copied ids do not move the identity's sequence: start it after the last one.
        writer
            .exec(
                "SELECT setval(pg_get_serial_sequence('audit', 'id'), COALESCE(MAX(id), 0) + 1, false) FROM audit",
                None,
            )
            .await?;
    }
    writer.commit().await?;
    Ok(report)
}

/// Reads `sql` (with `$1 = bind` when given) from `pool` in batches of [`BATCH`] rows, each
/// written by `writer` before the next is read; returns the number of rows.
async fn copy_table(
    pool: &Pool,
    sql: &str,
    bind: Option<i64>,
    table: &Table,
    writer: &mut Writer,
) -> Result<u64, StoreError> {
    let mut copied = 0u64;
    crate::backend::on_pool!(pool, pool => {
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()));
        if let Some(bind) = bind {
            query = query.bind(bind);
        }
        let mut rows = query.fetch(pool);
        let mut batch = Vec::with_capacity(BATCH);
        while let Some(row) = rows.try_next().await? {
            let mut cells = Vec::with_capacity(table.columns.len());
            for (i, (_, kind)) in table.columns.iter().enumerate() {
                cells.push(match kind {
                    Int => Cell::Int(row.try_get(i)?),
                    Text => Cell::Text(row.try_get(i)?),
                    Blob => Cell::Blob(row.try_get(i)?),
                });
            }
            batch.push(cells);
            if batch.len() == BATCH {
                copied += BATCH as u64;
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                writer.insert(table, full).await?;
            }
        }
        if !batch.is_empty() {
            copied += batch.len() as u64;
            writer.insert(table, batch).await?;
        }
    });
    Ok(copied)
}

/// The destination's transaction.
enum Writer {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl Writer {
    async fn begin(pool: &Pool) -> Result<Writer, StoreError> {
        Ok(match pool {
            Pool::Sqlite(pool) => Writer::Sqlite(pool.begin().await?),
            Pool::Postgres(pool) => Writer::Postgres(pool.begin().await?),
        })
    }

    async fn exec(&mut self, sql: &str, bind: Option<i64>) -> Result<(), StoreError> {
        macro_rules! run {
            ($tx:expr) => {{
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()));
                if let Some(bind) = bind {
                    query = query.bind(bind);
                }
                query.execute(&mut **$tx).await?;
            }};
        }
        match self {
            Writer::Sqlite(tx) => run!(tx),
            Writer::Postgres(tx) => run!(tx),
        }
        Ok(())
    }

    async fn insert(&mut self, table: &Table, rows: Vec<Vec<Cell>>) -> Result<(), StoreError> {
        let columns: Vec<&str> = table.columns.iter().map(|(name, _)| *name).collect();
        let head = format!("INSERT INTO {} ({}) ", table.name, columns.join(", "));
        macro_rules! run {
            ($tx:expr) => {{
                let mut insert = sqlx::QueryBuilder::new(head);
                insert.push_values(rows, |mut values, row| {
                    for cell in row {
                        match cell {
                            Cell::Int(v) => values.push_bind(v),
                            Cell::Text(v) => values.push_bind(v),
                            Cell::Blob(v) => values.push_bind(v),
                        };
                    }
                });
                insert.build().persistent(false).execute(&mut **$tx).await?;
            }};
        }
        match self {
            Writer::Sqlite(tx) => run!(tx),
            Writer::Postgres(tx) => run!(tx),
        }
        Ok(())
    }

    async fn commit(self) -> Result<(), StoreError> {
        match self {
            Writer::Sqlite(tx) => tx.commit().await?,
            Writer::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }
}

impl Store {
    /// Rows in each copied table.
    async fn row_counts(&self) -> Result<Vec<(&'static str, u64)>, StoreError> {
        let mut counts = Vec::with_capacity(TABLES.len());
        for table in TABLES {
            counts.push((table.name, self.table_count(table.name).await?));
        }
        Ok(counts)
    }

    async fn table_count(&self, table: &str) -> Result<u64, StoreError> {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        let count: i64 = crate::backend::on_pool!(&self.pool, pool => {
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(pool).await?
        });
        Ok(count.max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testing::TestDb;
    use crate::{AuditEntry, Backend, CallDecision, CallOutcome};

    /// The tables and columns the schema has (besides the pins generation and the migrations'
    /// own bookkeeping), as the database itself lists them.
    async fn schema_columns(store: &Store) -> Vec<(String, String)> {
        let sql = match store.backend() {
            Backend::Sqlite => {
                "SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p
                 WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'
                 ORDER BY m.name, p.cid"
            }
            Backend::Postgres => {
                "SELECT CAST(table_name AS TEXT), CAST(column_name AS TEXT)
                 FROM information_schema.columns WHERE table_schema = current_schema()
                 ORDER BY table_name, ordinal_position"
            }
        };
        let mut columns: Vec<(String, String)> = crate::backend::on_pool!(&store.pool, pool => {
            sqlx::query_as(sql).fetch_all(pool).await.expect("columns")
        });
        columns.retain(|(table, _)| {
            table != "tool_pins_generation" && table != "mcpgw_schema_migrations"
        });
        columns
    }

    fn entry(at_ms: u64) -> AuditEntry {
        AuditEntry {
            at: std::time::UNIX_EPOCH + Duration::from_millis(at_ms),
            principal: "local".into(),
            server: "fs".into(),
            tool: "fs__read".into(),
            arguments_sha256: "ab".repeat(32),
            decision: CallDecision::Allowed,
            outcome: CallOutcome::Ok,
            latency: Duration::from_millis(3),
            error: None,
        }
    }

    crate::testing::backend_tests! {
    async fn every_table_and_column_is_copied(db) {
        let store = db.open().await;
        let mut copied: Vec<(String, String)> = TABLES
            .iter()
            .flat_map(|t| t.columns.iter().map(|(c, _)| (t.name.to_owned(), (*c).to_owned())))
            .collect();
        copied.sort();
        let mut schema = schema_columns(&store).await;
        schema.sort();
        assert_eq!(copied, schema, "a migration added a table or column that copy misses");
    }

    /// Into each backend, from the other: what is there is refused unless forced, and forcing
    /// replaces it.
    async fn a_destination_with_rows_is_refused_unless_forced(db) {
        let other = match db.backend() {
            Backend::Sqlite => Backend::Postgres,
            Backend::Postgres => Backend::Sqlite,
        };
        let source = TestDb::new(other).await;
        let from = source.open().await;
        from.record_calls(&[entry(1), entry(2)]).await.expect("audit");
        from.add_client("ci").await.expect("client");
        from.close().await;

        let to = db.open().await;
        to.record_call(&entry(99)).await.expect("audit");
        to.close().await;
        let refused = Store::copy(&source.location, &db.location, CopyOptions::default())
            .await
            .expect_err("refused");
        assert!(matches!(refused, StoreError::NotEmpty { .. }), "{refused}");
        assert!(refused.to_string().contains("audit: 1 rows"), "{refused}");

        let report = Store::copy(&source.location, &db.location, CopyOptions { force: true })
            .await
            .expect("forced");
        assert!(report.tables.contains(&("audit", 2)), "{report:?}");
        let to = db.open().await;
        let audit = to
            .audit_entries(&crate::AuditQuery { limit: 10, ..Default::default() })
            .await
            .expect("audit");
        assert_eq!(audit, [entry(2), entry(1)], "the destination's own row is gone");
        assert_eq!(to.clients().await.expect("clients").len(), 1);
        // A row written after the copy, at the same time as the last copied one, comes after
        // it: its id follows the copied ids (PostgreSQL's identity was moved on).
        let mut later = entry(2);
        later.tool = "fs__later".into();
        to.record_call(&later).await.expect("audit");
        let newest = to
            .audit_page(&crate::AuditQuery { limit: 1, ..Default::default() })
            .await
            .expect("page");
        assert_eq!(newest.entries, [later]);
        to.close().await;

        let itself = Store::copy(&db.location, &db.location, CopyOptions { force: true })
            .await
            .expect_err("not into itself");
        assert!(itself.to_string().contains("the source itself"), "{itself}");
    }
    }
}
