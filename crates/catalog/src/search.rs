//! Search over the catalog: the request every caller sends, the documents we index, filters,
//! and hits.
//!
//! Ranking itself is `retrieval`'s job; this module decides what text of a tool goes in which
//! field, and which tools a filter lets through. Filters narrow *before* ranking (through the
//! `keep` closure), for every strategy, so a filtered-out tool never takes a slot in the top k.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use retrieval::{Document, Feedback, Field, GroupPrior, Hybrid};

use crate::entry::{Error, ToolEntry};

/// How a search ranks tools (DESIGN.md section 2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Lexical: BM25F over names, descriptions and parameters. Only tools that share a term
    /// with the query are returned.
    #[default]
    Bm25,
    /// Semantic: cosine similarity of embeddings; every tool is ranked.
    Vector,
    /// Reciprocal rank fusion of the two, weighted by [`Hybrid::balance`].
    Hybrid,
}

impl Strategy {
    pub const ALL: [Strategy; 3] = [Strategy::Bm25, Strategy::Vector, Strategy::Hybrid];

    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Bm25 => "bm25",
            Strategy::Vector => "vector",
            Strategy::Hybrid => "hybrid",
        }
    }

    /// Whether the strategy needs tool and query vectors.
    pub fn needs_vectors(self) -> bool {
        self != Strategy::Bm25
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|strategy| strategy.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::UnknownStrategy(s.to_string()))
    }
}

/// One search, as every caller (gateway, CLI, eval) sends it to [`crate::Catalog::search_with`].
#[derive(Debug, Clone)]
pub struct SearchRequest<'a> {
    /// One or more queries, one per capability the caller needs. Several are ranked
    /// separately and fused by their best reciprocal rank (RRF sums break ties), so every
    /// query's best tools come first. No query, no hits.
    pub queries: &'a [String],
    /// One vector per query, from the same model as the catalog's tool vectors
    /// ([`crate::Catalog::vector_model`]). Needed by [`Strategy::Vector`] and
    /// [`Strategy::Hybrid`]; without them the search degrades to BM25.
    pub query_vectors: Option<&'a [Vec<f32>]>,
    pub strategy: Strategy,
    /// Balance, query-dependent fusion and minimum similarity. The minimum similarity also
    /// applies to [`Strategy::Vector`]; the rest only to [`Strategy::Hybrid`].
    pub hybrid: Hybrid,
    /// Pseudo-relevance feedback for BM25 where it answers alone: [`Strategy::Bm25`], a
    /// hybrid search at balance 0, one served by BM25 because there are no (usable or strong
    /// enough) vectors, and a CJK query the model cannot read. Never inside fusion, where it
    /// lost on two of the four sets (docs/retrieval.md).
    pub feedback: Option<Feedback>,
    /// Also apply [`SearchRequest::feedback`] to the BM25 list inside fusion: for measuring
    /// (`mcpgw eval --feedback-fusion`), off in the gateway.
    pub feedback_in_fusion: bool,
    /// Whether the vectors' model understands Chinese, Japanese and Korean. When it does not,
    /// a hybrid search for a query in those scripts is answered by BM25 alone.
    pub multilingual_vectors: bool,
    pub top_k: usize,
    pub filter: &'a Filter,
    /// `queries[1..]` are the needs [`split_request`] found in `queries[0]`: all are ranked
    /// and fused like several queries (best reciprocal rank first). The vectors may then be
    /// one per query or one for the whole request only (its needs are then ranked by BM25
    /// alone, which saves embedding them).
    pub needs: bool,
    /// Read before write: unless the request asks to change something, tools that may
    /// delete, reset or overwrite move [`crate::caution::DEMOTION`] places down.
    pub caution: bool,
    /// Reorderings measured with `mcpgw eval` (server prior, vector feedback, diversity);
    /// all off by default (the gateway turns on [`Rerank::vector_feedback`]).
    pub rerank: Rerank,
    /// The learned sparse list (SPLADE) as a further input of fusion; needs the tools' sparse
    /// vectors ([`crate::Catalog::with_sparse`]). Measured with `mcpgw eval --splade`.
    pub sparse: Option<SparseQuery<'a>>,
}

/// The queries' learned sparse vectors and how their list joins the ranking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SparseQuery<'a> {
    /// One `(term id, weight)` vector per query, from the model of the tools' vectors.
    pub vectors: &'a [Vec<(u32, f32)>],
    /// Its weight in reciprocal rank fusion; the BM25 and vector lists' weights add up to 1
    /// (BM25 has 1 where it would otherwise answer alone).
    pub weight: f32,
    /// Use it for queries in CJK scripts too (splade-tiny's vocabulary is English WordPiece).
    pub cjk: bool,
    /// Rank by the sparse list alone (for measuring it).
    pub alone: bool,
}

/// The default weight of [`Rerank::vector_feedback`]: chosen on three sets and checked on the
/// fourth (docs/retrieval.md, round three).
pub const VECTOR_FEEDBACK: f32 = 0.1;

/// The fusion weight of the learned sparse list ([`SparseQuery::weight`]) where the gateway
/// serves it (`[retrieval] splade`, off by default), with score fusion: the weight
/// cross-validation chose for two of the three English held-out sets, and the largest that
/// costs metatool no nDCG@10 (0.25 scores best summed over the sets but loses 0.4 there;
/// docs/retrieval.md, round five).
pub const SPLADE_WEIGHT: f32 = 0.15;

/// Reorderings of a single query's ranking, each measured on the four labelled sets
/// (docs/retrieval.md, "Round three"). `Default` is all off; the gateway serves
/// [`Rerank::vector_feedback`] at [`VECTOR_FEEDBACK`] (`[retrieval] vector_feedback`) and
/// nothing else, which lost or moved nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rerank {
    /// Server-aware ranking: the server's rank as a prior on its tools' scores, or the best
    /// servers' tools first. Neutral with one server.
    pub servers: Option<ServerPrior>,
    /// Rocchio feedback for the vector side of a hybrid search: the query vector plus this
    /// weight times the vector of the first pass's best hit, ranked and fused again.
    pub vector_feedback: Option<f32>,
    /// Diversity: at most this many tools of one server in the top `top_k` before the other
    /// servers' tools. Neutral with one server.
    pub per_server: Option<usize>,
    /// De-duplication: in the top `top_k`, a tool whose vector has at least this cosine
    /// similarity with a higher hit's moves to the end of the top `top_k`.
    pub dedup: Option<f32>,
    /// Maximal marginal relevance: the top `top_k` is picked greedily from the first
    /// [`MMR_POOL`] hits, each by its score (over the best) less this weight times its highest
    /// cosine similarity with a tool already picked.
    pub mmr: Option<f32>,
}

/// How many of the fused ranking's first hits maximal marginal relevance picks from.
pub const MMR_POOL: usize = 30;

/// Where a server's rank comes from, and how it weighs on its tools.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerPrior {
    pub prior: GroupPrior,
    /// Rank the servers by BM25 over each server's whole text (name, description, every
    /// tool's name and description) instead of by their tools' places in the ranking.
    pub lexical: bool,
}

/// The queries to search for one request: the request itself, then its needs when it splits
/// into several ([`retrieval::split_needs`]); send them with [`SearchRequest::needs`] set
/// when there is more than one.
pub fn split_request(query: &str) -> Vec<String> {
    let needs = retrieval::split_needs(query);
    if needs.len() < 2 {
        return vec![query.to_string()];
    }
    std::iter::once(query.to_string()).chain(needs).collect()
}

/// The hits of a search, and whether it ran as asked.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOutcome<'a> {
    /// Best first, at most `top_k`, ties by qualified name.
    pub hits: Vec<SearchHit<'a>>,
    /// Why the search did not run with the requested strategy, e.g. "no tool vectors;
    /// served BM25". `None` when it did.
    pub degraded: Option<String>,
}

/// Which tools a search may return. `Default` lets everything through; every `Some` narrows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    /// Exact server names. `Some(vec![])` matches nothing: a filter only ever narrows, so an
    /// empty allow-list (say, from a policy that grants no server) must not mean "all".
    pub servers: Option<Vec<String>>,
    /// Against [`ToolEntry::is_read_only`]: a tool without `readOnlyHint` is not read-only.
    pub read_only: Option<bool>,
    /// Against [`ToolEntry::is_destructive`]: MCP defaults, a tool without annotations is
    /// destructive, a read-only tool never is.
    pub destructive: Option<bool>,
    /// Qualified names allowed (the caller's profile); `None` lets every tool through. Not
    /// part of the wire form: it comes from policy, never from a client.
    #[serde(skip)]
    pub tools: Option<std::sync::Arc<std::collections::HashSet<String>>>,
}

impl Filter {
    /// Whether `tool` passes every part of the filter.
    pub fn matches(&self, tool: &ToolEntry) -> bool {
        self.servers
            .as_ref()
            .is_none_or(|servers| servers.iter().any(|s| *s == tool.server))
            && self
                .read_only
                .is_none_or(|want| tool.is_read_only() == want)
            && self
                .destructive
                .is_none_or(|want| tool.is_destructive() == want)
            && self
                .tools
                .as_ref()
                .is_none_or(|tools| tools.contains(tool.qualified.as_str()))
    }
}

/// One ranked tool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchHit<'a> {
    pub tool: &'a ToolEntry,
    pub score: f32,
}

/// How the scores of a search's hits were made ([`crate::Catalog::explain`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Scoring {
    /// BM25 scores: higher is better, on no fixed scale.
    #[default]
    Bm25,
    /// Cosine similarities of the query's and the tool's embeddings, -1 to 1.
    Vector,
    /// Weighted reciprocal rank fusion: `bm25_weight / (RRF_K + BM25 rank) + vector_weight /
    /// (RRF_K + vector rank)`, a term only for a list the tool is in (ranks from 1). The weights
    /// are this query's: with [`retrieval::Adaptive`] they follow its length.
    Fused {
        bm25_weight: f32,
        vector_weight: f32,
    },
    /// A weighted sum of min-max normalised scores ([`retrieval::Fusion::Scores`]):
    /// `bm25_weight × (BM25 score − low) / (high − low) + vector_weight × (cosine − low) /
    /// (high − low)`, each with its list's `(low, high)` span ([`retrieval::score_span`]; a term
    /// only for a list the tool is in, and 1 when a list's scores are all equal). The weights
    /// are this query's, as for `Fused`.
    Normalised {
        bm25_weight: f32,
        vector_weight: f32,
        bm25_span: Option<(f32, f32)>,
        vector_span: Option<(f32, f32)>,
    },
    /// Several queries: each tool's best reciprocal rank over the queries.
    Capabilities,
}

impl Scoring {
    /// The scoring of a fusion by `fusion` at these weights; score fusion's spans are left for
    /// [`crate::Catalog::explain`] to fill, so a search does not scan its lists for them.
    pub fn of_fusion(fusion: retrieval::Fusion, bm25_weight: f32, vector_weight: f32) -> Scoring {
        match fusion {
            retrieval::Fusion::Ranks { .. } => Scoring::Fused {
                bm25_weight,
                vector_weight,
            },
            retrieval::Fusion::Scores => Scoring::Normalised {
                bm25_weight,
                vector_weight,
                bm25_span: None,
                vector_span: None,
            },
        }
    }
}

/// Where one hit stands in each list behind the ranking: `(rank from 1, score)`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sources {
    /// In the BM25 list; `None` when the tool shares no term with the query.
    pub bm25: Option<(usize, f32)>,
    /// In the vector list (cosine similarity); `None` without vectors, or below the minimum
    /// similarity.
    pub vector: Option<(usize, f32)>,
}

/// [`Scoring`] and the [`Sources`] of each hit, in the hits' order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Explanation {
    pub scoring: Scoring,
    pub sources: Vec<Sources>,
}

/// Longest self-description kept from a server's own words (title, description,
/// instructions), in characters.
pub const SELF_DESCRIPTION_CHARS: usize = 600;

/// A description for a server that has none configured, from what it said about itself at
/// initialisation (`serverInfo.title` and `.description`, the `instructions`), for BM25's
/// server-description field and the embedding text, cut at [`SELF_DESCRIPTION_CHARS`] (at a
/// word boundary). `None` when there is nothing to say.
///
/// Its tools' names are not added: each tool's document has its own name already, and the
/// names of its siblings would let every tool of the server match a query about any one of
/// them, a tool held for approval included (a server's whole text as a prior lost on
/// toollens, docs/retrieval.md).
pub fn self_description(
    title: Option<&str>,
    description: Option<&str>,
    instructions: Option<&str>,
) -> Option<String> {
    let mut own = String::new();
    for part in [title, description, instructions].into_iter().flatten() {
        let part = part.split_whitespace().collect::<Vec<_>>().join(" ");
        if part.is_empty() || own.contains(&part) {
            continue;
        }
        if !own.is_empty() {
            own.push_str(if own.ends_with('.') { " " } else { ". " });
        }
        own.push_str(&part);
    }
    if own.chars().count() > SELF_DESCRIPTION_CHARS {
        let cut: String = own.chars().take(SELF_DESCRIPTION_CHARS).collect();
        own = match cut.rfind(' ') {
            Some(at) => cut[..at].to_string(),
            None => cut,
        };
        own.push('…');
    }
    (!own.is_empty()).then_some(own)
}

/// The search document of `tool`. The key is the qualified name, so ties break the same way
/// on every run.
pub(crate) fn document(tool: &ToolEntry, server_description: Option<&str>) -> Document {
    let mut fields = vec![
        (Field::Name, tool.upstream_name.clone()),
        (Field::Name, tool.qualified.to_string()),
        (Field::Server, tool.server.to_string()),
    ];
    if !tool.description.is_empty() {
        fields.push((Field::Description, tool.description.clone()));
    }
    if let Some(title) = &tool.title {
        fields.push((Field::Description, title.clone()));
    }
    // The resolved view, so parameters behind a `$ref` are searchable too.
    for (name, schema) in properties(tool.resolved_input_schema()) {
        push_param(&mut fields, name, schema);
        let nested = properties(schema).chain(schema.get("items").into_iter().flat_map(properties));
        for (name, schema) in nested {
            push_param(&mut fields, name, schema);
        }
    }
    if let Some(description) = server_description.filter(|d| !d.is_empty()) {
        fields.push((Field::ServerDescription, description.to_string()));
    }
    Document {
        key: tool.qualified.to_string(),
        fields,
    }
}

fn push_param(fields: &mut Vec<(Field, String)>, name: &str, schema: &Value) {
    fields.push((Field::ParamName, name.to_string()));
    if let Some(description) = schema.get("description").and_then(Value::as_str) {
        fields.push((Field::ParamDescription, description.to_string()));
    }
}

/// `(name, schema)` of each entry of `schema.properties`, if any.
pub(crate) fn properties(schema: &Value) -> impl Iterator<Item = (&str, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, sub)| (name.as_str(), sub))
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    use super::*;

    #[test]
    fn self_description_joins_what_a_server_says() {
        let text = self_description(
            Some("Household ledger"),
            None,
            Some("Keeps the accounts:\n  invoices and reimbursements"),
        );
        expect!["Household ledger. Keeps the accounts: invoices and reimbursements"]
            .assert_eq(text.as_deref().unwrap_or_default());
        // A title repeated in the instructions is said once; no words, nothing.
        let text = self_description(Some("Ledger"), Some("Ledger"), None);
        assert_eq!(text.as_deref(), Some("Ledger"));
        assert_eq!(self_description(None, Some("  "), None), None);
    }

    #[test]
    fn self_description_is_bounded() {
        let long = "word ".repeat(1000);
        let text = self_description(None, None, Some(&long)).unwrap_or_default();
        assert!(
            text.ends_with('…') && text.chars().count() <= SELF_DESCRIPTION_CHARS + 1,
            "{text}"
        );
    }
}
