//! Human-readable output: tables and progress bars (stderr), never used with `--json`.

use std::time::Duration;

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use gateway::overview;
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

/// The hits of `mcpgw search`; with `explain`, each hit's place in the BM25 and the vector
/// list.
pub(crate) fn search_table(hits: &[overview::Hit], explain: bool) -> Table {
    let mut table = table();
    let mut header = vec!["#", "tool", "server", "score"];
    if explain {
        header.extend(["bm25 rank (score)", "vector rank (cosine)"]);
    }
    header.push("description");
    table.set_header(header);
    let place = |place: Option<overview::Place>, digits: usize| match place {
        Some(overview::Place { rank, score }) => format!("{rank} ({score:.digits$})"),
        None => "-".to_owned(),
    };
    for (i, hit) in hits.iter().enumerate() {
        let mut row = vec![
            (i + 1).to_string(),
            hit.name.to_string(),
            hit.server.to_string(),
            format!("{:.4}", hit.score),
        ];
        if explain {
            row.push(place(hit.bm25, 2));
            row.push(place(hit.vector, 3));
        }
        row.push(hit.description.clone());
        table.add_row(row);
    }
    table
}

/// `mcpgw search --json`: each hit's name, server, description and score; with `explain` its
/// `bm25` and `vector` places too (`{rank, score}` or null), and when the score is fused, each
/// place's `weight` in it: by ranks the score is the sum of `weight / (60 + rank)` over the
/// places, by scores the sum of `weight × normalised` (each place then also has `normalised`,
/// its score scaled to 0..1 over its list). The weights are the query's own (query-dependent
/// fusion moves them with its length).
pub(crate) fn search_json(
    hits: &[overview::Hit],
    scoring: catalog::Scoring,
    explain: bool,
) -> Vec<serde_json::Value> {
    hits.iter()
        .map(|hit| {
            let mut row = serde_json::to_value(hit).unwrap_or_default();
            let Some(fields) = row.as_object_mut() else {
                return row;
            };
            if !explain {
                fields.remove("bm25");
                fields.remove("vector");
            } else if let catalog::Scoring::Fused {
                bm25_weight,
                vector_weight,
            } = scoring
            {
                for (list, weight) in [("bm25", bm25_weight), ("vector", vector_weight)] {
                    if let Some(place) = fields.get_mut(list).and_then(|p| p.as_object_mut()) {
                        place.insert("weight".to_owned(), serde_json::json!(weight));
                    }
                }
            } else if let catalog::Scoring::Normalised {
                bm25_weight,
                vector_weight,
                bm25_span,
                vector_span,
            } = scoring
            {
                for (list, weight, span) in [
                    ("bm25", bm25_weight, bm25_span),
                    ("vector", vector_weight, vector_span),
                ] {
                    if let Some(place) = fields.get_mut(list).and_then(|p| p.as_object_mut()) {
                        let score = place.get("score").and_then(serde_json::Value::as_f64);
                        place.insert("weight".to_owned(), serde_json::json!(weight));
                        if let (Some(score), Some((low, high))) = (score, span) {
                            let span = (f64::from(low), f64::from(high));
                            place.insert(
                                "normalised".to_owned(),
                                serde_json::json!(retrieval::scale(score, span) as f32),
                            );
                        }
                    }
                }
            }
            row
        })
        .collect()
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
                "score: reciprocal rank fusion of the BM25 and the vector ranking, {bm25_weight:.3} / ({k} + BM25 rank) + {vector_weight:.3} / ({k} + vector rank) (this query's weights), a term only for a list the tool is in; {best:.4} is first in both{}",
                if explained {
                    ""
                } else {
                    " (--explain shows the ranks)"
                }
            )
        }
        catalog::Scoring::Normalised {
            bm25_weight,
            vector_weight,
            bm25_span,
            vector_span,
        } => {
            let span = |span: Option<(f32, f32)>| match span {
                Some((low, high)) => format!("{low:.3}..{high:.3}"),
                None => "none".to_owned(),
            };
            format!(
                "score: {bm25_weight:.3} × BM25 score + {vector_weight:.3} × cosine similarity (this query's weights), each scaled to 0..1 over its list (BM25 {}, cosine {}), a term only for a list the tool is in; {:.3} is best in both{}",
                span(bm25_span),
                span(vector_span),
                bm25_weight + vector_weight,
                if explained {
                    ""
                } else {
                    " (--explain shows each list's place)"
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

pub(crate) fn tools_table(tools: &[overview::ToolRow], cost: bool) -> Table {
    let mut table = table();
    if cost {
        table.set_header(["tool", "server", "tokens", "description"]);
    } else {
        table.set_header(["tool", "server", "description"]);
    }
    for tool in tools {
        let mut row = vec![tool.name.to_string(), tool.server.to_string()];
        if cost {
            row.push(tool.tokens.unwrap_or_default().to_string());
        }
        row.push(tool.description.clone());
        table.add_row(row);
    }
    table
}

/// The lines under `mcpgw tools --cost`: the tools' total, and what a client's `tools/list`
/// costs in the view's exposure.
pub(crate) fn tools_cost(view: &overview::ToolsView) -> String {
    let total: usize = view.tools.iter().filter_map(|t| t.tokens).sum();
    let listing = &view.listing;
    let mode = if listing.configured_exposure == "auto" {
        format!(
            "auto exposure: {} ({} tokens against a budget of {})",
            listing.exposure, listing.passthrough_tokens, listing.token_budget
        )
    } else {
        format!("{} exposure", listing.exposure)
    };
    let pinned = if listing.exposure == "search" && !listing.always_listed.is_empty() {
        format!(", with pinned {}", listing.always_listed.join(", "))
    } else {
        String::new()
    };
    let who = match &listing.profile {
        Some(profile) => format!("profile '{profile}'"),
        None => "default view".to_owned(),
    };
    format!(
        "{} tools, {total} tokens (cl100k_base) if listed directly\n{who} ({mode}{pinned}): a client's tools/list costs {} tokens",
        view.tools.len(),
        listing.listed_tokens
    )
}

/// `mcpgw servers list`: each server's state, era, protocol, tool count, and its error or
/// `serverInfo`, with its tools held for approval.
pub(crate) fn servers_table(servers: &[overview::ServerRow]) -> Table {
    let mut table = table();
    table.set_header([
        "server", "state", "era", "protocol", "tools", "replica", "detail",
    ]);
    for server in servers {
        let mut detail = match &server.reason {
            Some(reason) => reason.clone(),
            None => server
                .server_name
                .as_ref()
                .map(|n| format!("{n} {}", server.server_version.clone().unwrap_or_default()))
                .unwrap_or_default(),
        };
        if server.held > 0 {
            if !detail.is_empty() {
                detail.push_str("; ");
            }
            let tools = if server.held == 1 { "tool" } else { "tools" };
            detail.push_str(&format!(
                "{} {tools} held for approval (see `mcpgw tools held`)",
                server.held
            ));
        }
        table.add_row([
            server.name.to_string(),
            server.state.clone(),
            server.era.clone().unwrap_or_default(),
            server.protocol_version.clone().unwrap_or_default(),
            server.tool_count.map(|n| n.to_string()).unwrap_or_default(),
            server.replica.clone(),
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
