//! `mcpgw approvals`: the tool calls waiting for a human, and deciding them.
//!
//! The CLI decides as the local operator, an admin: any pending call may be approved or
//! rejected, once. The waiting call (in a running `mcpgw serve`, possibly another process)
//! sees the decision within a fraction of a second: it watches the same database, and with
//! `[store] redis` the decision is announced to the replicas, which wake the call at once.

use std::{path::Path, time::SystemTime};

use anyhow::{Context, anyhow};
use serde_json::{Map, Value};

use store::time::duration_words;

use crate::{
    Failure,
    command::{load_config, open_database},
};

/// Who the CLI decides as: the local operator.
const DECIDER: &str = "local";

pub(crate) async fn list(config_path: Option<&Path>, all: bool, json: bool) -> Result<(), Failure> {
    let store = open_store(config_path).await?;
    let approvals = if all {
        store.recent_approvals(100).await
    } else {
        store.pending_approvals(None).await
    }
    .context("cannot read the approvals")?;
    if json {
        let rows: Vec<Value> = approvals.iter().map(gateway::approval_json).collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if approvals.is_empty() {
        println!(
            "{}",
            if all {
                "no approvals recorded"
            } else {
                "no tool call is waiting for approval"
            }
        );
        return Ok(());
    }
    let mut table = crate::render::table();
    table.set_header([
        "id",
        "status",
        "tool",
        "caller",
        "arguments",
        "waiting",
        "decided by",
    ]);
    for approval in &approvals {
        let arguments = Value::Object(approval.effective_arguments().clone()).to_string();
        table.add_row([
            approval.id.clone(),
            approval.status.as_str().to_owned(),
            approval.tool.to_string(),
            approval.principal.to_string(),
            shorten(&arguments, 60),
            match approval.status {
                store::ApprovalStatus::Pending => format!(
                    "{} left",
                    duration_words(
                        approval
                            .expires_at
                            .duration_since(SystemTime::now())
                            .unwrap_or_default()
                    )
                ),
                _ => "-".to_owned(),
            },
            approval
                .decided_by
                .clone()
                .unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    println!("{table}");
    if !all {
        eprintln!(
            "approve with `mcpgw approvals approve ID [--args JSON]`, reject with `mcpgw approvals reject ID`"
        );
    }
    Ok(())
}

pub(crate) async fn approve(
    config_path: Option<&Path>,
    id: &str,
    args: Option<&str>,
) -> Result<(), Failure> {
    let arguments = args.map(parse_arguments).transpose()?;
    let config = load_config(config_path)?;
    let store = open_database(&config, "approvals").await?;
    let decided = store
        .decide_approval(id, store::Verdict::Approve { arguments }, DECIDER)
        .await
        .map_err(decision_failure)?;
    announce(&config, &decided.id).await;
    println!(
        "approved {} ({}); the call runs with {}",
        decided.id,
        decided.tool,
        Value::Object(decided.effective_arguments().clone())
    );
    Ok(())
}

pub(crate) async fn reject(
    config_path: Option<&Path>,
    id: &str,
    reason: Option<String>,
) -> Result<(), Failure> {
    let config = load_config(config_path)?;
    let store = open_database(&config, "approvals").await?;
    let decided = store
        .decide_approval(id, store::Verdict::Reject { reason }, DECIDER)
        .await
        .map_err(decision_failure)?;
    announce(&config, &decided.id).await;
    println!(
        "rejected {} ({}); the tool is not run",
        decided.id, decided.tool
    );
    Ok(())
}

/// Tells the replicas through Redis, when configured; the decision is recorded either way.
async fn announce(config: &config::Config, id: &str) {
    if let Err(error) = gateway::announce_approval(&config.store, id).await {
        eprintln!(
            "note: could not announce the decision through Redis ({error}); the waiting call sees it at its next look at the database"
        );
    }
}

/// `--args`: a JSON object, never null or another type.
fn parse_arguments(text: &str) -> Result<Map<String, Value>, Failure> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(Failure::usage(anyhow!(
            "--args must be a JSON object (the tool's arguments), not {}",
            kind(&other)
        ))),
        Err(error) => Err(Failure::usage(anyhow!("--args is not valid JSON: {error}"))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn decision_failure(error: store::DecideError) -> Failure {
    match error {
        store::DecideError::Store(error) => {
            Failure::from(anyhow::Error::new(error).context("cannot record the decision"))
        }
        refused => Failure::usage(anyhow::Error::new(refused)),
    }
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{head}…")
}

async fn open_store(config_path: Option<&Path>) -> Result<store::Store, Failure> {
    open_database(&load_config(config_path)?, "approvals").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_arguments_must_be_an_object() {
        assert!(parse_arguments(r#"{"path": "/x"}"#).is_ok());
        for bad in ["null", "[]", "3", "\"x\"", "{oops"] {
            assert!(parse_arguments(bad).is_err(), "{bad}");
        }
    }
}
