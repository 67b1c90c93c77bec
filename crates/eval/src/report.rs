//! What an evaluation reports, as data: the `--json` document and the source of the table.
//!
//! Metrics are x100 with one decimal (see [`crate::Metrics::percent`]); times are wall-clock,
//! in milliseconds for builds and embedding and in microseconds for a search.

use serde::Serialize;

use catalog::Strategy;

use crate::metrics::Metrics;

/// Every set of one `mcpgw eval` run, with the settings that produced it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub settings: Settings,
    pub sets: Vec<SetReport>,
}

/// The knobs of a run, so a JSON report says what it measured.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    pub strategies: Vec<Strategy>,
    /// The embedding model asked for (`None` when only BM25 ran).
    pub model: Option<String>,
    pub balance: u8,
    /// How the balance is applied, in words (`fixed`, `adaptive slope=0.8 pivot=0.8 span=16`).
    pub fusion: String,
    /// Pseudo-relevance feedback, in words (`off`, `docs=1 terms=10 weight=0.1`, `... in fusion`).
    pub feedback: String,
    pub min_similarity: Option<f32>,
    /// Only the first N queries of each set, when set.
    pub limit: Option<usize>,
    /// The BM25 parameters and analyzer options, in words (`k1=1.2 b=0.75 stemming stop-words`).
    pub bm25: String,
    /// What the tool embedding text holds besides the tool (`tool`, `tool+server`, ...).
    pub embedding_text: String,
    /// The reorderings measured ([`catalog::Rerank`], in its debug form).
    pub rerank: String,
    /// `--splade` (`on weight=0.5`, `alone ...`); absent when off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub splade: Option<String>,
    /// The model blended into the vectors and its weight (`potion-base-8M@0.3`); absent when
    /// none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blend: Option<String>,
    /// The head's weight when tools' heads and parameters are embedded apart; absent when off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_vectors: Option<f32>,
    /// How deep each ranking was taken (`--depth`); absent at the metrics' 10.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<usize>,
}

/// One set, every strategy.
#[derive(Debug, Clone, Serialize)]
pub struct SetReport {
    pub set: String,
    pub path: String,
    pub servers: usize,
    pub tools: usize,
    /// Tools the catalog skipped (as it would for a live server).
    pub problems: Vec<String>,
    /// Renamed servers, unresolvable qrels, cache trouble.
    pub warnings: Vec<String>,
    /// Queries evaluated: the first `limit` of the file that have at least one relevant tool
    /// in the catalog.
    pub queries: usize,
    /// Queries (within the limit) left out because no relevant tool is known for them.
    pub queries_without_relevant: usize,
    /// Qrels rows (within the limit) naming a tool the catalog does not have.
    pub unknown_relevant_tools: usize,
    /// `Catalog::build` as a whole: naming, schema resolution, token costs, BM25.
    pub catalog_build_ms: f64,
    /// The BM25 index alone (median of 5 builds).
    pub bm25_build_ms: f64,
    /// Absent when no strategy needed vectors, or they could not be made.
    pub embedding: Option<EmbeddingReport>,
    /// The learned sparse list's cost, when it was asked for (`--splade`).
    pub sparse: Option<SparseReport>,
    pub strategies: Vec<StrategyReport>,
}

/// What the sparse (SPLADE) vectors cost to make, uncached.
#[derive(Debug, Clone, Serialize)]
pub struct SparseReport {
    pub model: String,
    pub tools: usize,
    /// Encoding every tool text, in batches.
    pub tools_encode_ms: f64,
    /// Non-zero terms per tool vector.
    pub mean_tool_terms: f64,
    /// Building the inverted index from the tool vectors.
    pub index_build_ms: f64,
    /// Query texts encoded (needs included).
    pub queries: usize,
    pub queries_encode_ms: f64,
    pub mean_query_terms: f64,
    /// Encoding one query on its own, median over the sample.
    pub query_encode_p50_ms: Option<f64>,
    pub query_encode_sample: usize,
    /// Texts encoded in this run (the others came from the cache; the times are for these).
    pub encoded: usize,
}

/// How the vectors were made.
#[derive(Debug, Clone, Serialize)]
pub struct EmbeddingReport {
    /// The embedder's id, e.g. `local/all-MiniLM-L6-v2`.
    pub model: String,
    pub dim: usize,
    /// Distinct tool texts (two tools can read the same).
    pub tools: usize,
    /// Tool texts found in the cache (not embedded again).
    pub tools_cached: usize,
    /// Time to embed the tool texts that were not cached.
    pub tools_embed_ms: f64,
    /// Distinct query texts.
    pub queries: usize,
    pub queries_cached: usize,
    /// Time to embed the query texts that were not cached, in batches.
    pub queries_embed_ms: f64,
    /// Median time to embed one query on its own, as a live search does (never cached).
    pub query_embed_p50_ms: Option<f64>,
    /// How many queries that median is over.
    pub query_embed_sample: usize,
    /// Building the vector index from the tool vectors.
    pub vector_build_ms: f64,
}

/// One strategy on one set.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyReport {
    pub strategy: Strategy,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// Figures, or why there are none.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    Ok(Figures),
    Skipped { reason: String },
}

/// The figures of one strategy on one set.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Macro-averaged over the evaluated queries, x100.
    pub metrics: Metrics,
    /// Search only (query vectors are computed before timing starts).
    pub search_p50_us: f64,
    pub search_p99_us: f64,
    /// Searches that did not run as asked (should be 0: a vector strategy only runs with
    /// vectors).
    pub degraded: usize,
    /// The same metrics by number of relevant tools per query (`1`, `2`, `3+`).
    pub by_relevant_count: Vec<Subset>,
    /// Comp@5 over the queries with 3 or more relevant tools, x100 (`None` when there are
    /// none): the tasks an agent cannot finish with one tool.
    pub comp_at_5_3plus: Option<f64>,
    /// The per-need view: for each number of relevant tools (2 and up), how many of those
    /// queries have 0, 1, 2, ... of their needs (relevant tools) in the top 5.
    pub needs_at_5: Vec<NeedsCovered>,
    /// With `--depth` above 10: over the queries with 3 or more relevant tools, how many
    /// have all of them within the first k places, for k = 5, 10, 20, 50, ... up to the
    /// depth. Comp@10 3+ is what a perfect reordering of the top 10 could reach at 5.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub complete_within: Vec<CompleteWithin>,
    /// Every query with several relevant tools, with how many of them are in the top 5.
    pub multi_need_queries: Vec<QueryNeeds>,
}

/// Queries with 3 or more relevant tools that have every one within the first `k` places.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompleteWithin {
    pub k: usize,
    pub queries: usize,
    /// Of the queries with 3 or more relevant tools, x100.
    pub percent: f64,
}

/// Queries with the same number of relevant tools (needs), by how many needs the top 5 covers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NeedsCovered {
    /// Relevant tools per query.
    pub relevant: usize,
    pub queries: usize,
    /// `covered[n]`: queries with exactly `n` of their relevant tools in the top 5
    /// (`relevant + 1` entries).
    pub covered: Vec<usize>,
    /// Mean share of needs covered, x100 (Recall@5 over these queries).
    pub mean_covered: f64,
}

/// One query with several relevant tools: how many of them the top 5 holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryNeeds {
    pub id: String,
    pub relevant: usize,
    pub covered_at_5: usize,
    /// With `--depth` above 10: the relevant tools' places (1-based, ascending), `null` for
    /// each one not within the depth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<Option<usize>>>,
}

/// Queries with the same number of relevant tools.
#[derive(Debug, Clone, Serialize)]
pub struct Subset {
    pub relevant: String,
    pub queries: usize,
    pub metrics: Metrics,
}
