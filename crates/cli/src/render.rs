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

/// The hits of `mcpgw search`; with `sources` (`--explain`), each hit's place in the BM25 and
/// the vector list.
pub(crate) fn search_table(
    hits: &[gateway::FoundTool],
    sources: Option<&[catalog::Sources]>,
) -> Table {
    let mut table = table();
    let mut header = vec!["#", "tool", "server", "score"];
    if sources.is_some() {
        header.extend(["bm25 rank (score)", "vector rank (cosine)"]);
    }
    header.push("description");
    table.set_header(header);
    let place = |place: Option<(usize, f32)>, digits: usize| match place {
        Some((rank, score)) => format!("{rank} ({score:.digits$})"),
        None => "-".to_owned(),
    };
    for (i, hit) in hits.iter().enumerate() {
        let mut row = vec![
            (i + 1).to_string(),
            hit.name.to_string(),
            hit.server.to_string(),
            format!("{:.4}", hit.score),
        ];
        if let Some(sources) = sources {
            let of_hit = sources.get(i).copied().unwrap_or_default();
            row.push(place(of_hit.bm25, 2));
            row.push(place(of_hit.vector, 3));
        }
        row.push(hit.description.clone());
        table.add_row(row);
    }
    table
}

/// The line under `mcpgw search`'s table that says what the scores mean.
pub(crate) fn score_legend(scoring: catalog::Scoring, explained: bool) -> String {
    let k = retrieval::RRF_K;
    match scoring {
        catalog::Scoring::Fused {
            bm25_weight,
            vector_weight,
        } => {
            let best = (bm25_weight + vector_weight) / (k + 1.0);
            format!(
                "score: reciprocal rank fusion of the BM25 and the vector ranking, {bm25_weight:.2} / ({k} + BM25 rank) + {vector_weight:.2} / ({k} + vector rank), a term only for a list the tool is in; {best:.4} is first in both{}",
                if explained {
                    ""
                } else {
                    " (--explain shows the ranks)"
                }
            )
        }
        catalog::Scoring::Bm25 => {
            "score: BM25, how well the query's words match the tool's name, description and parameters (higher is better; compare within one query only)".to_owned()
        }
        catalog::Scoring::Vector => {
            "score: cosine similarity of the query's and the tool's embeddings (1 is the same meaning)".to_owned()
        }
        catalog::Scoring::Capabilities => {
            format!("score: each tool's best reciprocal rank 1 / ({k} + rank) over the queries")
        }
    }
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
        match held.get(status.name.as_str()).copied().unwrap_or(0) {
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
            status.name.to_string(),
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
