//! `mcpgw audit`: the audit log of tool calls, newest first; `mcpgw audit prune` deletes the
//! rows `[audit]` no longer keeps, as the gateway does every hour.
//!
//! Reads the database the gateway writes (it may be running: SQLite's write-ahead log lets a
//! reader in, and a prune deletes in short batches). Times are shown in UTC; `--since` takes a
//! duration back from now (`90s`, `30m`, `1h`, `2d`, `1w`) or an RFC 3339 time. Rows never hold
//! arguments, only their SHA-256.

use std::{path::Path, time::SystemTime};

use crate::{
    Failure,
    command::{load_config, open_database},
};
use anyhow::{Context, anyhow};

/// How many records are shown unless `--limit` says otherwise.
const DEFAULT_LIMIT: u32 = 50;

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Only the calls of this client (`mcpgw clients add NAME`).
    #[arg(long, conflicts_with = "principal")]
    client: Option<String>,
    /// Only the calls of this principal id: `local`, `client:NAME` or `user:SUBJECT`.
    #[arg(long)]
    principal: Option<String>,
    /// Only calls since then: a duration back from now (30m, 1h, 2d) or an RFC 3339 time
    /// (2025-06-01T12:00:00Z).
    #[arg(long)]
    since: Option<String>,
    /// At most this many records, newest first.
    #[arg(long, default_value_t = DEFAULT_LIMIT, value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Delete the rows `[audit]` no longer keeps now, and say how many went (a running gateway
    /// does this every hour).
    ///
    /// Rows older than `retention_days` go, then the oldest beyond the newest `max_rows`.
    Prune,
}

pub(crate) async fn run(config_path: Option<&Path>, args: Args) -> Result<(), Failure> {
    match args.command {
        Some(Command::Prune) => prune(config_path).await,
        None => list(config_path, args).await,
    }
}

async fn prune(config_path: Option<&Path>) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    let retention = config.audit;
    if !retention.prunes() {
        println!(
            "audit retention is off ([audit] retention_days = 0 and max_rows = 0); nothing removed"
        );
        return Ok(());
    }
    let store = open_database(&config, "the audit log").await?;
    let removed = gateway::prune_audit_log(&store, &retention, SystemTime::now()).await;
    store.close().await;
    let removed = removed.context("cannot prune the audit log")?;
    println!(
        "removed {removed} audit row{} {}",
        if removed == 1 { "" } else { "s" },
        bounds_words(&retention)
    );
    Ok(())
}

/// `older than 90 days or beyond the newest 1000000`, for what retention keeps.
fn bounds_words(retention: &config::AuditConfig) -> String {
    let mut words = Vec::new();
    if let Some(days) = retention.retention_days() {
        words.push(format!(
            "older than {days} day{}",
            if days == 1 { "" } else { "s" }
        ));
    }
    if let Some(rows) = retention.max_rows {
        words.push(format!("beyond the newest {rows}"));
    }
    words.join(" or ")
}

async fn list(config_path: Option<&Path>, args: Args) -> Result<(), Failure> {
    let principal = match (&args.client, &args.principal) {
        (Some(name), _) if !store::is_valid_client_name(name) => {
            return Err(Failure::usage(anyhow!(
                "'{name}' is not a valid client name: use 1 to 64 of letters, digits, '_', '.', '-'"
            )));
        }
        (Some(name), _) => Some(format!("client:{name}")),
        (None, principal) => principal.clone(),
    };
    let now = SystemTime::now();
    let since = args
        .since
        .as_deref()
        .map(|text| parse_since(text, now))
        .transpose()
        .map_err(Failure::usage)?;
    let config = load_config(config_path)?;
    let store = open_database(&config, "the audit log").await?;
    let entries = store
        .audit_entries(&store::AuditQuery {
            principal: principal.map(ids::PrincipalId::from),
            since,
            limit: args.limit as usize,
            ..Default::default()
        })
        .await
        .context("cannot read the audit log")?;
    store.close().await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json_rows(&entries))?);
        return Ok(());
    }
    if entries.is_empty() {
        println!("no tool calls recorded{}", filters_words(&args));
        return Ok(());
    }
    println!("{}", table(&entries));
    if entries.len() == args.limit as usize {
        eprintln!(
            "showing the newest {}; use --limit or --since for others",
            args.limit
        );
    }
    Ok(())
}

fn filters_words(args: &Args) -> String {
    let mut words = Vec::new();
    if let Some(client) = &args.client {
        words.push(format!("by client '{client}'"));
    }
    if let Some(principal) = &args.principal {
        words.push(format!("by '{principal}'"));
    }
    if let Some(since) = &args.since {
        words.push(format!("since {since}"));
    }
    if words.is_empty() {
        String::new()
    } else {
        format!(" {}", words.join(" "))
    }
}

fn table(entries: &[store::AuditEntry]) -> comfy_table::Table {
    let mut table = crate::render::table();
    table.set_header([
        "time (UTC)",
        "principal",
        "tool",
        "decision",
        "outcome",
        "ms",
        "args",
        "error",
    ]);
    for entry in entries {
        let decision = match entry.decision.approver() {
            Some(approver) => format!("{} by {approver}", entry.decision.as_str()),
            None => entry.decision.as_str().to_owned(),
        };
        table.add_row([
            utc(entry.at, false),
            entry.principal.to_string(),
            entry.tool.to_string(),
            decision,
            entry.outcome.as_str().to_owned(),
            entry.latency.as_millis().to_string(),
            // Enough to tell calls apart at a glance; --json has the whole hash.
            entry.arguments_sha256.chars().take(12).collect(),
            entry.error.clone().unwrap_or_default(),
        ]);
    }
    table
}

fn json_rows(entries: &[store::AuditEntry]) -> Vec<serde_json::Value> {
    entries.iter().map(gateway::records::audit_json).collect()
}

/// `--since`: a duration back from now or an RFC 3339 time.
fn parse_since(text: &str, now: SystemTime) -> anyhow::Result<SystemTime> {
    gateway::records::parse_time(text, now).ok_or_else(|| {
        anyhow!(
            "--since '{}' is neither a duration (90s, 30m, 1h, 2d, 1w) nor an RFC 3339 time (2025-06-01T12:00:00Z)",
            text.trim()
        )
    })
}

/// Now as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn utc_now_rfc3339() -> String {
    utc(SystemTime::now(), true)
}

use gateway::records::utc;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;
    use store::time::{from_unix_millis, unix_millis};

    fn at(ms: i64) -> SystemTime {
        from_unix_millis(ms)
    }

    #[test]
    fn since_reads_durations_and_rfc3339_times() {
        let now = at(1_750_000_000_000);
        let check = |text: &str, expect: Option<i64>| {
            assert_eq!(
                parse_since(text, now).ok().map(unix_millis),
                expect,
                "{text}"
            );
        };
        check("90s", Some(1_750_000_000_000 - 90_000));
        check("30m", Some(1_750_000_000_000 - 1_800_000));
        check("1h", Some(1_750_000_000_000 - 3_600_000));
        check("2d", Some(1_750_000_000_000 - 172_800_000));
        check("1w", Some(1_750_000_000_000 - 604_800_000));
        check("2025-06-01T12:00:00Z", Some(1_748_779_200_000));
        check("2025-06-01t12:00:00z", Some(1_748_779_200_000));
        check("2025-06-01 12:00:00Z", Some(1_748_779_200_000));
        check("2025-06-01T14:00:00+02:00", Some(1_748_779_200_000));
        check("2025-06-01T11:30:00.25-00:30", Some(1_748_779_200_250));
        check("2025-06-01", Some(1_748_736_000_000));
        check("2024-02-29T00:00:00Z", Some(1_709_164_800_000));
        check("1969-12-31T23:59:59Z", Some(-1000));
        for bad in [
            "",
            "h",
            "1x",
            "-1h",
            "1.5h",
            "30 m",
            "2025-02-29",
            "2025-13-01",
            "2025-06-01T25:00:00Z",
            "2025-06-01T12:00:00",
            "2025-06-01T12:00:00+2",
            "2025-06-01T12:00:00.Z",
            "yesterday",
            "99999999999999999999d",
        ] {
            check(bad, None);
        }
    }

    #[test]
    fn times_print_in_utc_both_ways() {
        assert_eq!(utc(at(0), false), "1970-01-01 00:00:00");
        assert_eq!(utc(at(1_748_779_200_250), true), "2025-06-01T12:00:00.250Z");
        assert_eq!(utc(at(1_709_164_800_000), false), "2024-02-29 00:00:00");
        assert_eq!(utc(at(-1), true), "1969-12-31T23:59:59.999Z");
    }

    fn entries() -> Vec<store::AuditEntry> {
        let entry =
            |ms, principal: &str, decision, outcome, error: Option<&str>| store::AuditEntry {
                at: at(ms),
                principal: principal.into(),
                server: "fs".into(),
                tool: "fs__read_file".into(),
                arguments_sha256: "0123456789abcdef".repeat(4),
                decision,
                outcome,
                latency: Duration::from_millis(42),
                error: error.map(str::to_owned),
            };
        vec![
            entry(
                1_748_779_200_250,
                "client:ci",
                store::CallDecision::Approved {
                    approver: "local".into(),
                },
                store::CallOutcome::Ok,
                None,
            ),
            entry(
                1_748_779_100_000,
                "user:ann",
                store::CallDecision::RateLimited,
                store::CallOutcome::NotRun,
                Some("rate limit"),
            ),
        ]
    }

    #[test]
    fn the_table_shows_one_line_per_call() {
        let mut table = table(&entries());
        table.set_content_arrangement(comfy_table::ContentArrangement::Disabled);
        let text = table.to_string();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1].contains("time (UTC)") && lines[1].contains("error"),
            "{text}"
        );
        let row = |line: &str| -> Vec<String> {
            line.split(['│', '┆'])
                .map(|cell| cell.trim().to_owned())
                .filter(|cell| !cell.is_empty())
                .collect()
        };
        assert_eq!(
            row(lines[3]),
            [
                "2025-06-01 12:00:00",
                "client:ci",
                "fs__read_file",
                "approved by local",
                "ok",
                "42",
                "0123456789ab"
            ]
        );
        assert_eq!(
            row(lines[4]),
            [
                "2025-06-01 11:58:20",
                "user:ann",
                "fs__read_file",
                "rate_limited",
                "not_run",
                "42",
                "0123456789ab",
                "rate limit"
            ]
        );
    }

    #[test]
    fn json_rows_carry_every_field() {
        let rows = json_rows(&entries());
        assert_eq!(
            rows[0],
            json!({
                "time": "2025-06-01T12:00:00.250Z",
                "at_ms": 1_748_779_200_250_i64,
                "principal": "client:ci",
                "server": "fs",
                "tool": "fs__read_file",
                "arguments_sha256": "0123456789abcdef".repeat(4),
                "decision": "approved",
                "approver": "local",
                "outcome": "ok",
                "latency_ms": 42,
                "error": null,
            })
        );
        assert_eq!(rows[1]["approver"], json!(null));
        assert_eq!(rows[1]["error"], "rate limit");
    }
}
