//! Human-readable output: tables and progress bars (stderr), never used with `--json`.

use std::time::Duration;

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use indicatif::{ProgressBar, ProgressStyle};

pub(crate) fn progress(total: u64, what: &str) -> ProgressBar {
    // indicatif draws to stderr and hides itself when stderr is not a terminal.
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {prefix} [{bar:20}] {pos}/{len} {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

pub(crate) fn state_word(status: &upstream::ServerStatus) -> &'static str {
    match status.state {
        upstream::ServerState::Idle => "idle",
        upstream::ServerState::Starting => "starting",
        upstream::ServerState::Connecting => "connecting",
        upstream::ServerState::Ready => "ready",
        upstream::ServerState::Failed { .. } => "failed",
        upstream::ServerState::Unresponsive { .. } => "unresponsive",
    }
}

pub(crate) fn table() -> Table {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic);
    table
}

pub(crate) fn search_table(hits: &[gateway::FoundTool]) -> Table {
    let mut table = table();
    table.set_header(["#", "tool", "server", "score", "description"]);
    for (i, hit) in hits.iter().enumerate() {
        table.add_row([
            (i + 1).to_string(),
            hit.name.clone(),
            hit.server.clone(),
            format!("{:.4}", hit.score),
            hit.description.clone(),
        ]);
    }
    table
}

pub(crate) fn tools_table(tools: &[&catalog::ToolEntry], cost: bool) -> Table {
    let mut table = table();
    if cost {
        table.set_header(["tool", "server", "tokens", "description"]);
    } else {
        table.set_header(["tool", "server", "description"]);
    }
    for tool in tools {
        let mut row = vec![tool.qualified.to_string(), tool.server.to_string()];
        if cost {
            row.push(tool.token_cost.to_string());
        }
        row.push(tool.one_line_description());
        table.add_row(row);
    }
    table
}

/// `held`: how many tools of each server are held for approval, by name.
pub(crate) fn servers_table(
    statuses: &[upstream::ServerStatus],
    held: &std::collections::HashMap<String, usize>,
) -> Table {
    let mut table = table();
    table.set_header(["server", "state", "era", "protocol", "tools", "detail"]);
    for status in statuses {
        let mut detail = match &status.state {
            upstream::ServerState::Failed { reason }
            | upstream::ServerState::Unresponsive { reason } => reason.clone(),
            _ => status
                .server_name
                .as_ref()
                .map(|n| format!("{n} {}", status.server_version.clone().unwrap_or_default()))
                .unwrap_or_default(),
        };
        match held.get(&status.name).copied().unwrap_or(0) {
            0 => {}
            n => {
                if !detail.is_empty() {
                    detail.push_str("; ");
                }
                let tools = if n == 1 { "tool" } else { "tools" };
                detail.push_str(&format!(
                    "{n} {tools} held for approval (see `mcpgw tools held`)"
                ));
            }
        }
        table.add_row([
            status.name.clone(),
            state_word(status).to_owned(),
            status.era.map(|e| e.to_string()).unwrap_or_default(),
            status.protocol_version.clone().unwrap_or_default(),
            status.tool_count.map(|n| n.to_string()).unwrap_or_default(),
            detail,
        ]);
    }
    table
}

pub(crate) fn server_test(
    name: &str,
    status: &upstream::ServerStatus,
    tools: &[String],
    elapsed: Duration,
) -> String {
    let era = status.era.map(|e| e.to_string()).unwrap_or_default();
    let mut out = format!(
        "server    {name}: ok\nimplements {} {}\nprotocol  {} ({era} era)\nlatency   connect {} ms, total {} ms\ntools     {}\n",
        status
            .server_name
            .clone()
            .unwrap_or_else(|| "(unnamed)".to_owned()),
        status.server_version.clone().unwrap_or_default(),
        status.protocol_version.clone().unwrap_or_default(),
        status.connect_ms.unwrap_or(0),
        elapsed.as_millis(),
        tools.len(),
    );
    for tool in tools {
        out.push_str("  ");
        out.push_str(tool);
        out.push('\n');
    }
    out
}
