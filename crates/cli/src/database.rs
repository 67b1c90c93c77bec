//! `mcpgw migrate` (the schema: where it stands, apply what is pending) and `mcpgw store copy`
//! (every table of one database into another), for SQLite and PostgreSQL alike.

use std::path::Path;

use anyhow::Context as _;
use clap::Subcommand;

use crate::Failure;
use crate::command::load_config;

#[derive(Subcommand)]
pub(crate) enum MigrateCommand {
    /// Show the backend, the schema version applied and the migrations pending (the default).
    Status {
        /// This database instead of the configuration's `[store]` (sqlite://PATH or
        /// postgres://...).
        #[arg(long)]
        url: Option<String>,
        /// Print {backend, database, applied, latest, pending: [{version, name}]}.
        #[arg(long)]
        json: bool,
    },
    /// Apply the pending migrations (a new SQLite file is created). The gateway applies them on
    /// start too; this lets an operator do it first, once, for every replica.
    Apply {
        /// This database instead of the configuration's `[store]`.
        #[arg(long)]
        url: Option<String>,
    },
}

#[derive(Subcommand)]
pub(crate) enum StoreCommand {
    /// Copy every table (OAuth registrations and sealed credentials, client keys, pins,
    /// approvals, audit, live leases, the embedding cache) from one database into another.
    ///
    /// Sealed values are copied as they are: the destination needs the same secret key
    /// (MCPGW_SECRET_KEY or the key file) to open them. The destination is created and migrated
    /// if needed and written in one transaction; one that holds rows is refused unless --force.
    Copy {
        /// The database to read: sqlite://PATH or postgres://USER@HOST/DATABASE.
        from: String,
        /// The database to write.
        to: String,
        /// Delete what the destination holds first, instead of refusing a non-empty one.
        #[arg(long)]
        force: bool,
    },
}

/// The database `url` names, else the configuration's.
fn location(config_path: Option<&Path>, url: Option<&str>) -> Result<store::Location, Failure> {
    match url {
        Some(url) => store::Location::parse(url).map_err(Failure::usage),
        None => {
            let config = load_config(config_path)?;
            gateway::store_location(&config.store).map_err(Failure::usage)
        }
    }
}

pub(crate) async fn migrate(
    config_path: Option<&Path>,
    command: Option<MigrateCommand>,
) -> Result<(), Failure> {
    match command.unwrap_or(MigrateCommand::Status {
        url: None,
        json: false,
    }) {
        MigrateCommand::Status { url, json } => {
            let location = location(config_path, url.as_deref())?;
            let status = store::Store::migration_status(&location)
                .await
                .context("cannot read the schema version")?;
            if json {
                let pending: Vec<serde_json::Value> = status
                    .pending
                    .iter()
                    .map(|(version, name)| serde_json::json!({"version": version, "name": name}))
                    .collect();
                let shown = serde_json::json!({
                    "backend": status.backend.as_str(),
                    "database": status.location,
                    "applied": status.applied,
                    "latest": status.latest,
                    "pending": pending,
                });
                println!("{shown:#}");
                return Ok(());
            }
            println!("backend:  {}", status.backend);
            println!("database: {}", status.location);
            println!(
                "schema:   version {} of {}{}",
                status.applied,
                status.latest,
                if status.applied > status.latest {
                    " (written by a newer mcpgw)"
                } else {
                    ""
                }
            );
            if status.pending.is_empty() {
                println!("pending:  none");
            } else {
                println!(
                    "pending:  {} (`mcpgw migrate apply`, or the gateway on start, applies them)",
                    names(&status.pending)
                );
            }
            Ok(())
        }
        MigrateCommand::Apply { url } => {
            let location = location(config_path, url.as_deref())?;
            let applied = store::Store::migrate(&location)
                .await
                .context("the migration failed; the database is as it was before it")?;
            let applied: Vec<(i64, &str)> = applied.iter().map(|m| (m.version, m.name)).collect();
            if applied.is_empty() {
                println!(
                    "nothing to apply: {location} is at schema version {}",
                    store::latest_version()
                );
            } else {
                println!(
                    "applied {} to {location}; it is at schema version {}",
                    names(&applied),
                    store::latest_version()
                );
            }
            Ok(())
        }
    }
}

fn names(migrations: &[(i64, &str)]) -> String {
    migrations
        .iter()
        .map(|(version, name)| format!("{version:04} {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) async fn store(command: StoreCommand) -> Result<(), Failure> {
    match command {
        StoreCommand::Copy { from, to, force } => {
            let from = store::Location::parse(&from).map_err(Failure::usage)?;
            let to = store::Location::parse(&to).map_err(Failure::usage)?;
            let report = store::Store::copy(&from, &to, store::CopyOptions { force })
                .await
                .map_err(|error| match error {
                    store::StoreError::NotEmpty { .. }
                    | store::StoreError::BadUrl { .. }
                    | store::StoreError::Missing { .. } => Failure::usage(error),
                    error => Failure::from(
                        anyhow::Error::new(error)
                            .context("the copy failed; the destination is as it was before it"),
                    ),
                })?;
            println!("copied {from} to {to}:");
            for (table, rows) in &report.tables {
                println!("  {table:<18} {rows:>8} rows");
            }
            println!("  pins generation    {:>8}", report.pins_generation);
            if report.expired_leases > 0 {
                println!(
                    "skipped {} expired lease(s) (they hold nothing any more)",
                    report.expired_leases
                );
            }
            println!(
                "sealed tokens and secrets were copied as they are: give the gateway on {to} the same \
                 secret key (MCPGW_SECRET_KEY or [store] key_file)"
            );
            Ok(())
        }
    }
}
