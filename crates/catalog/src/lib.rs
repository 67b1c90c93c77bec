//! The tool catalog: upstream tool lists in, an immutable, searchable snapshot out.
//!
//! [`Catalog::build`] takes each server's tool list as plain data (the JSON objects exactly as
//! the upstream sent them, each in an `Arc` the catalog shares rather than copies: tool JSON is
//! most of a large catalog's memory) and derives what the gateway needs: qualified names
//! ([`naming`]), a resolved schema view for the model ([`schema`]), token costs ([`cost`]),
//! a BM25 index with filters ([`search`]) and "did you mean" suggestions.
//! It does not know where the lists came from: no async, no IO, no MCP SDK.
//!
//! Semantic search is layered on without IO either: [`Catalog::embedding_texts`] says what to
//! embed, the caller embeds it, and [`Catalog::with_vectors`] attaches the vectors. Every
//! caller searches through [`Catalog::search_with`], for every strategy.
//!
//! [`Catalog::validate_arguments`] checks a call's arguments against the tool's verbatim input
//! schema before it is forwarded ([`arguments`]: no remote `$ref` fetching, and a schema's own
//! problems never block a call).
//!
//! [`uri`] namespaces resource URIs the same way [`naming`] namespaces tool and prompt names:
//! reversibly, so the gateway can route a `resources/read` back to its server.
//!
//! Invariant: a Catalog is immutable; building never fails on upstream data. A malformed tool
//! is skipped and reported as a [`Problem`], the rest loads. Being immutable, a catalog's
//! clones share its tools and indexes, and each tool's JSON is the caller's own object.
//!
//! Invariant: names are deterministic. The same lists in the same order give the same
//! qualified names, and a server's names do not depend on the other servers (see [`naming`]).
//!
//! Invariant: the upstream name and the verbatim schema are what go on the wire; derived views
//! (qualified name, resolved schema) are for clients and models only.

pub mod arguments;
pub mod caution;
pub mod cost;
pub mod embedding;
pub mod entry;
pub mod naming;
pub mod schema;
pub mod search;
pub mod signature;
pub mod suggestion;
pub mod uri;

use ids::{QualifiedName, ServerName};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use retrieval::{
    Analyzer, Bm25Index, Bm25Params, DocId, Document, FieldWeights, Hit, Language, Ranked,
    SparseIndex, VectorIndex,
};

pub use arguments::{ArgumentError, ArgumentErrors, ArgumentValidator, Validation};
pub use embedding::{EmbeddingText, FIELD_WEIGHT, FieldTexts};
pub use entry::{Error, Problem, ToolEntry};
pub use search::{
    Explanation, Filter, Rerank, SPLADE_WEIGHT, Scoring, SearchHit, SearchOutcome, SearchRequest,
    ServerPrior, Sources, SparseQuery, Strategy, VECTOR_FEEDBACK, self_description, split_request,
};

use naming::Namer;
use suggestion::Candidate;

/// One upstream server's tools, as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerTools {
    /// The configured server name; valid by precondition: `[A-Za-z0-9_-]`, no `__`, unique.
    pub server: ServerName,
    /// For the search index (BM25's server-description field, the embedding text): the
    /// configured description, or the gateway's [`self_description`] of a server that has
    /// none.
    pub description: Option<String>,
    /// Raw MCP `Tool` objects as received. Each is an `Arc` so that the catalog's
    /// [`ToolEntry::raw`] is the same object as the caller's (the upstream's last good list),
    /// not a copy: tool JSON is most of a large catalog's memory.
    pub tools: Vec<Arc<Value>>,
}

/// How the lexical index is built. The default is what the gateway serves; `mcpgw eval`
/// measures alternatives before a default changes.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    pub bm25: Bm25Params,
    pub analyzer: Analyzer,
}

impl Default for IndexOptions {
    /// `retrieval`'s analyzer plus English stemming and stop words, and BM25 parameters tuned
    /// with `mcpgw eval` on the four labelled sets (docs/retrieval.md has every figure).
    /// Stemming and stop words (nDCG@10, BM25 alone): toollens 32.0 -> 35.0, metatool 43.4 ->
    /// 56.4, ultratool-en 56.3 -> 67.0. Tool queries are sentences ("I'm looking for ...")
    /// whose function words otherwise match every description, and tools say `creates` where
    /// queries say `create`.
    fn default() -> Self {
        IndexOptions {
            bm25: Bm25Params {
                // Short tool texts saturate soon: k1 0.5 beats 0.9 and 1.2 on toollens hybrid
                // (+0.4) and costs nothing elsewhere; b 0.4 beats 0.75 on every set.
                k1: 0.5,
                b: 0.4,
                // Parameters say what a tool acts on ("latitude", "ingredient", "currency"),
                // the nouns a request names: param_name 1 -> 2 and param_description 0.5 ->
                // 1.2 lift toollens hybrid 38.0 -> 38.8 (R@5 35.6 -> 36.0). A long description
                // counts a little less (0.8: +0.2 on ultratool-zh); a server description
                // shared by many tools adds little (0.3).
                weights: FieldWeights {
                    name: 3.0,
                    server: 1.5,
                    description: 0.8,
                    param_name: 2.0,
                    param_description: 1.2,
                    server_description: 0.3,
                },
            },
            analyzer: Analyzer {
                stemming: Some(Language::English),
                stop_words: Some(Language::English),
                ..Analyzer::default()
            },
        }
    }
}

/// How many of each query's best results take part when several queries are fused.
const MULTI_QUERY_DEPTH: usize = 5;

/// Fuses the rankings of several queries, one per capability the caller needs. Each tool
/// scores its best reciprocal rank over the queries (`1 / (60 + rank)`, as in RRF), and the
/// RRF sum only breaks ties. Plain RRF sums over full rankings let a tool that is middling
/// for every query outrank the best tool for each single one, the opposite of what was
/// asked; with the best rank, every query's first tool comes before any query's second.
/// Only each query's top `depth` take part.
fn fuse_capabilities<'k>(
    rankings: &[Vec<Hit>],
    depth: usize,
    key: &dyn Fn(DocId) -> &'k str,
) -> Vec<Hit> {
    let mut scores: HashMap<DocId, (f32, f32)> = HashMap::new();
    for ranking in rankings {
        for (rank, hit) in ranking.iter().take(depth).enumerate() {
            let rr = 1.0 / (retrieval::RRF_K + rank as f32 + 1.0);
            let entry = scores.entry(hit.doc).or_insert((0.0, 0.0));
            entry.0 = entry.0.max(rr);
            entry.1 += rr;
        }
    }
    let mut fused: Vec<(DocId, f32, f32)> = scores
        .into_iter()
        .map(|(doc, (best, sum))| (doc, best, sum))
        .collect();
    fused.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then(b.2.total_cmp(&a.2))
            .then_with(|| key(a.0).cmp(key(b.0)))
    });
    fused
        .into_iter()
        .map(|(doc, best, _)| Hit { doc, score: best })
        .collect()
}

/// Whether `text` has Han, Hiragana, Katakana or Hangul characters.
fn has_cjk(text: &str) -> bool {
    text.chars().any(|c| {
        matches!(c as u32,
            0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0xAC00..=0xD7AF | 0x20000..=0x2FA1F)
    })
}

/// An immutable snapshot of every upstream tool. `Send + Sync`; share it through an `Arc` and
/// replace it whole on refresh.
///
/// Cloning is cheap: the tools and indexes are shared, not copied (a snapshot never changes),
/// so the lexical catalog a refresh publishes and the same catalog with vectors attached
/// ([`Catalog::with_vectors`]) hold one copy of the tools between them.
#[derive(Clone)]
pub struct Catalog {
    lexical: Arc<Lexical>,
    vectors: Option<Arc<ToolVectors>>,
    sparse: Option<Arc<ToolSparse>>,
}

/// Everything of a [`Catalog`] but its vectors.
struct Lexical {
    tools: Vec<ToolEntry>,
    by_name: HashMap<QualifiedName, usize>,
    /// The `server__tool` names of tools shown bare (`prefix = "when-needed"`).
    aliases: HashMap<String, usize>,
    /// Server names and descriptions in the given order, each once.
    servers: Vec<(ServerName, Option<String>)>,
    index: Bm25Index,
    /// Each tool's server, as its position in `servers`.
    server_of: Vec<u32>,
    /// BM25 over each server's whole text, in `servers` order; built on first use
    /// ([`ServerPrior::lexical`]).
    server_index: OnceLock<Bm25Index>,
    options: IndexOptions,
    total_token_cost: usize,
    /// Each tool's argument validator, in [`Catalog::tools`] order, compiled on first use.
    /// Shared by clones of this snapshot (the tools, hence the schemas, are the same).
    validators: Box<[OnceLock<ArgumentValidator>]>,
}

/// Tools' learned sparse vectors (SPLADE), in [`Catalog::tools`] order, as an inverted index.
struct ToolSparse {
    model: String,
    index: SparseIndex,
}

/// Tool embeddings: one vector per tool, in [`Catalog::tools`] order.
struct ToolVectors {
    model: String,
    index: VectorIndex,
}

impl Catalog {
    /// Build a snapshot. Tools keep the given order (servers in order, tools in upstream order).
    /// Whatever could not be loaded comes back as problems, never as a failure.
    pub fn build(servers: &[ServerTools]) -> (Catalog, Vec<Problem>) {
        Catalog::build_with(servers, &IndexOptions::default())
    }

    /// [`Catalog::build`] with non-default lexical index options.
    pub fn build_with(servers: &[ServerTools], options: &IndexOptions) -> (Catalog, Vec<Problem>) {
        Catalog::build_named(servers, options, naming::Rules::default())
    }

    /// [`Catalog::build_with`] under naming `rules` (`[gateway] prefix`, and the names that
    /// must not be handed out bare). Under [`naming::Prefix::WhenNeeded`] every server's names
    /// are looked at first, since a name stays bare only when no other server uses it.
    pub fn build_named(
        servers: &[ServerTools],
        options: &IndexOptions,
        rules: naming::Rules<'_>,
    ) -> (Catalog, Vec<Problem>) {
        let contested = match rules.prefix {
            naming::Prefix::Always => HashSet::new(),
            naming::Prefix::WhenNeeded => {
                let mut listed: HashSet<&str> = HashSet::new();
                naming::contested(
                    servers
                        .iter()
                        .filter(|upstream| listed.insert(upstream.server.as_str()))
                        .map(|upstream| {
                            upstream
                                .tools
                                .iter()
                                .filter_map(|raw| entry::upstream_name(raw).ok())
                        }),
                )
            }
        };
        let mut namer = Namer::with_rules(rules, contested);
        // One tokenizer for every tool of this build, released when the build is done.
        let counter = cost::Counter::load();
        let mut tools = Vec::new();
        let mut problems = Vec::new();
        let mut listed: Vec<(ServerName, Option<String>)> = Vec::new();
        for upstream in servers {
            let problem = |tool: Option<&str>, error: Error| Problem {
                server: upstream.server.clone(),
                tool: tool.map(str::to_string),
                message: error.to_string(),
            };
            if listed.iter().any(|(name, _)| *name == upstream.server) {
                problems.push(problem(None, Error::DuplicateServer));
                continue;
            }
            listed.push((upstream.server.clone(), upstream.description.clone()));

            // Upstream names loaded from this server: a second tool with the same name could
            // never be called (calls go out by upstream name), so it is not listed. A malformed
            // first copy does not count, so a good second copy still loads.
            let mut loaded: HashSet<&str> = HashSet::new();
            for raw in &upstream.tools {
                let name = entry::upstream_name(raw).ok();
                if let Some(name) = name
                    && loaded.contains(name)
                {
                    problems.push(problem(Some(name), Error::DuplicateTool));
                    continue;
                }
                match ToolEntry::parse(&upstream.server, raw, &mut namer, &counter) {
                    Ok(tool) => {
                        loaded.extend(name);
                        tools.push(tool);
                    }
                    Err(error) => problems.push(problem(name, error)),
                }
            }
        }

        let documents = documents(&tools, &listed);
        let index = Bm25Index::build_with(&documents, &options.bm25, options.analyzer.clone());

        let mut by_name = HashMap::with_capacity(tools.len());
        for (i, tool) in tools.iter().enumerate() {
            // The namer guarantees uniqueness; `Vacant` only keeps this total if it ever did not.
            if let Entry::Vacant(slot) = by_name.entry(tool.qualified.clone()) {
                slot.insert(i);
            }
        }
        // A bare name's `server__tool` form reaches it too, unless a real name took it.
        let mut aliases = HashMap::new();
        for (i, tool) in tools.iter().enumerate() {
            if tool.prefixed != tool.qualified && !by_name.contains_key(tool.prefixed.as_str()) {
                aliases.insert(tool.prefixed.clone(), i);
            }
        }
        let total_token_cost = tools.iter().map(|t| t.token_cost).sum();
        let validators = tools.iter().map(|_| OnceLock::new()).collect();
        let server_of = tools
            .iter()
            .map(|tool| {
                let at = listed.iter().position(|(name, _)| *name == tool.server);
                at.map_or(u32::MAX, |at| at as u32)
            })
            .collect();
        let catalog = Catalog {
            lexical: Arc::new(Lexical {
                tools,
                by_name,
                aliases,
                servers: listed,
                index,
                server_of,
                server_index: OnceLock::new(),
                options: options.clone(),
                total_token_cost,
                validators,
            }),
            vectors: None,
            sparse: None,
        };
        (catalog, problems)
    }

    /// The documents the lexical index is built from, one per tool in [`Catalog::tools`] order
    /// (for benchmarks and for explaining a ranking).
    pub fn search_documents(&self) -> Vec<Document> {
        documents(&self.lexical.tools, &self.lexical.servers)
    }

    /// The text to embed for each tool, in [`Catalog::tools`] order, with the default
    /// [`EmbeddingText`] options. Embed them as passages and hand the vectors to
    /// [`Catalog::with_vectors`].
    ///
    /// The server's description goes into the text only when the catalog has several
    /// servers: it then tells tools of different servers apart (toollens, 314 servers: hybrid
    /// nDCG@10 37.2 -> 37.9), while with one server it is the same words in every text and
    /// only blurs them (metatool: vector 67.3 -> 64.7).
    pub fn embedding_texts(&self) -> Vec<String> {
        self.embedding_texts_with(&self.embedding_text())
    }

    /// What [`Catalog::embedding_texts`] puts in each text: the server's description only with
    /// several servers.
    fn embedding_text(&self) -> EmbeddingText {
        EmbeddingText {
            server_description: self.lexical.servers.len() > 1,
            ..EmbeddingText::default()
        }
    }

    /// The embedding texts with each tool's fields apart ([`FieldTexts`]), the server line as
    /// [`Catalog::embedding_texts`] chooses it when `options` is `None`.
    pub fn embedding_fields(&self, options: Option<&EmbeddingText>) -> FieldTexts {
        let auto = self.embedding_text();
        let options = options.unwrap_or(&auto);
        FieldTexts::new(
            self.lexical
                .tools
                .iter()
                .map(|tool| options.parts(tool, self.server_description(&tool.server)))
                .collect(),
        )
    }

    /// [`Catalog::embedding_texts`] with explicit options.
    pub fn embedding_texts_with(&self, options: &EmbeddingText) -> Vec<String> {
        self.lexical
            .tools
            .iter()
            .map(|tool| options.text(tool, self.server_description(&tool.server)))
            .collect()
    }

    /// The tools' qualified names, in [`Catalog::tools`] order, for an index of `vectors`
    /// vectors (one per tool, or an error).
    fn keys_for(&self, vectors: usize) -> Result<Vec<String>, Error> {
        if vectors != self.len() {
            return Err(Error::VectorCount {
                tools: self.len(),
                vectors,
            });
        }
        Ok(self
            .lexical
            .tools
            .iter()
            .map(|tool| tool.qualified.to_string())
            .collect())
    }

    /// This catalog with tool vectors attached: one per tool, in [`Catalog::tools`] order,
    /// embedded by `model_id` (an `Embedder::id`, so callers can tell whether their query
    /// vectors are comparable). Replaces any earlier vectors.
    pub fn with_vectors(self, model_id: String, vectors: Vec<Vec<f32>>) -> Result<Catalog, Error> {
        let keys = self.keys_for(vectors.len())?;
        let index = VectorIndex::build(keys, &vectors).map_err(Error::Vectors)?;
        Ok(Catalog {
            vectors: Some(Arc::new(ToolVectors {
                model: model_id,
                index,
            })),
            ..self
        })
    }

    /// This catalog with the tools' learned sparse vectors (one per tool, in
    /// [`Catalog::tools`] order, from the model `model_id`; the same text as the embeddings,
    /// [`Catalog::embedding_texts`]), for [`SearchRequest::sparse`].
    pub fn with_sparse(
        self,
        model_id: String,
        vectors: Vec<Vec<(u32, f32)>>,
    ) -> Result<Catalog, Error> {
        let keys = self.keys_for(vectors.len())?;
        let index = SparseIndex::build(keys, &vectors);
        Ok(Catalog {
            sparse: Some(Arc::new(ToolSparse {
                model: model_id,
                index,
            })),
            ..self
        })
    }

    /// The model of the tools' sparse vectors, if there are any.
    pub fn sparse_model(&self) -> Option<&str> {
        self.sparse.as_ref().map(|sparse| sparse.model.as_str())
    }

    /// The model that embedded the tool vectors, if there are any.
    pub fn vector_model(&self) -> Option<&str> {
        self.vectors.as_ref().map(|vectors| vectors.model.as_str())
    }

    /// The dimension of the tool vectors, if there are any.
    pub fn vector_dim(&self) -> Option<usize> {
        self.vectors.as_ref().map(|vectors| vectors.index.dim())
    }

    /// How many tools have a description in Chinese, Japanese or Korean: text an
    /// English-only model cannot read, so requests in those languages are answered by BM25
    /// alone (see [`SearchRequest::multilingual_vectors`]).
    pub fn described_in_cjk(&self) -> usize {
        self.lexical
            .tools
            .iter()
            .filter(|tool| has_cjk(&tool.description))
            .count()
    }

    /// Every tool: servers in the given order, tools in upstream order.
    pub fn tools(&self) -> &[ToolEntry] {
        &self.lexical.tools
    }

    /// The tool with this qualified name, or with this `server__tool` name when it is shown
    /// bare (`prefix = "when-needed"`).
    pub fn get(&self, qualified: &str) -> Option<&ToolEntry> {
        self.lexical.tools.get(self.position(qualified)?)
    }

    /// Where the tool [`Catalog::get`] finds is in [`Catalog::tools`].
    fn position(&self, name: &str) -> Option<usize> {
        let lexical = &*self.lexical;
        lexical
            .by_name
            .get(name)
            .or_else(|| lexical.aliases.get(name))
            .copied()
    }

    /// Server names in the given order, including servers that currently have no tools.
    pub fn servers(&self) -> Vec<&str> {
        self.lexical
            .servers
            .iter()
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// The description configured or reported for `server`.
    pub fn server_description(&self, server: &str) -> Option<&str> {
        self.lexical
            .servers
            .iter()
            .find(|(name, _)| name == server)?
            .1
            .as_deref()
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.lexical.tools.len()
    }

    /// Whether the catalog has no tools.
    pub fn is_empty(&self) -> bool {
        self.lexical.tools.is_empty()
    }

    /// BM25 over the tools `filter` lets through, best first, at most `top_k`. Ties break by
    /// qualified name. Only tools that share a term with the query are returned.
    pub fn search(&self, query: &str, top_k: usize, filter: &Filter) -> Vec<SearchHit<'_>> {
        let queries = [query.to_string()];
        self.search_with(&SearchRequest {
            queries: &queries,
            query_vectors: None,
            strategy: Strategy::Bm25,
            hybrid: retrieval::Hybrid::default(),
            feedback: None,
            feedback_in_fusion: false,
            multilingual_vectors: false,
            top_k,
            filter,
            needs: false,
            caution: false,
            rerank: Rerank::default(),
            sparse: None,
        })
        .hits
    }

    /// Ranks the tools `request.filter` lets through (the filter applies before ranking, for
    /// every strategy), best first, at most `top_k`, ties by qualified name.
    ///
    /// A vector or hybrid search that cannot run as asked (no tool vectors, no or unusable
    /// query vectors) is served by BM25 and says why in [`SearchOutcome::degraded`].
    pub fn search_with(&self, request: &SearchRequest<'_>) -> SearchOutcome<'_> {
        let (strategy, degraded) = self.runnable(request);
        if request.top_k == 0 || request.queries.is_empty() {
            return SearchOutcome {
                hits: Vec::new(),
                degraded,
            };
        }
        let keep = |doc: DocId| {
            self.tool(doc)
                .is_some_and(|tool| request.filter.matches(tool))
        };
        let key = |doc: DocId| self.tool(doc).map_or("", |tool| tool.qualified.as_str());
        // One query's ranking feeds the answer (top_k) or the capability fusion (its depth);
        // the inputs of each hybrid fusion stay full depth, only the fused tail is skipped.
        let caution = request.caution
            && !request
                .queries
                .iter()
                .any(|query| caution::asks_for_change(query));
        let top_k = request.top_k + if caution { caution::DEMOTION } else { 0 };
        let depth = if request.queries.len() > 1 {
            top_k.max(MULTI_QUERY_DEPTH)
        } else if request.rerank.servers.is_some() {
            // A server's standing is read from its tools' places: all of them.
            usize::MAX
        } else if request.rerank.mmr.is_some() {
            top_k.max(search::MMR_POOL)
        } else {
            top_k
        };
        let mut rankings: Vec<Vec<Hit>> = (0..request.queries.len())
            .map(|at| self.rank_query(request, strategy, at, depth, &keep, &key).0)
            .collect();
        let mut ranked = if rankings.len() == 1 {
            let ranked = rankings.pop().unwrap_or_default();
            self.rerank(request, ranked, top_k)
        } else {
            // A request split into its needs ranks like the caller's own `queries`: the best
            // of every need first (`mcpgw eval --split-needs`; off in the gateway, since it
            // lost on three of the four sets: docs/retrieval.md).
            fuse_capabilities(&rankings, top_k.max(MULTI_QUERY_DEPTH), &key)
        };
        if caution {
            ranked.truncate(top_k);
            ranked = caution::demote(
                ranked,
                |hit| hit.doc,
                |doc| self.tool(doc).is_some_and(caution::is_risky),
            );
        }
        let hits = ranked
            .into_iter()
            .filter_map(|hit| {
                Some(SearchHit {
                    tool: self.tool(hit.doc)?,
                    score: hit.score,
                })
            })
            .take(request.top_k)
            .collect();
        SearchOutcome { hits, degraded }
    }

    /// [`SearchRequest::rerank`]'s server prior, diversity and de-duplication applied to one
    /// query's ranking, in that order.
    fn rerank(&self, request: &SearchRequest<'_>, mut ranked: Vec<Hit>, top_k: usize) -> Vec<Hit> {
        let rerank = &request.rerank;
        let server_of = |doc: DocId| {
            self.lexical
                .server_of
                .get(doc as usize)
                .copied()
                .unwrap_or(u32::MAX)
        };
        if let Some(servers) = rerank.servers {
            ranked = if servers.lexical {
                let ranks = self.server_ranks(request.queries[0].as_str());
                retrieval::apply_prior(&ranked, &server_of, &ranks, &servers.prior)
            } else {
                retrieval::group_prior(&ranked, &server_of, &servers.prior)
            };
        }
        if let Some(cap) = rerank.per_server {
            ranked = retrieval::cap_per_group(&ranked, &server_of, cap, request.top_k);
        }
        if let (Some(threshold), Some(vectors)) = (rerank.dedup, self.vectors.as_ref()) {
            ranked = dedup(&ranked, &vectors.index, threshold, request.top_k);
        }
        if let (Some(lambda), Some(vectors)) = (rerank.mmr, self.vectors.as_ref()) {
            ranked = mmr(&ranked, &vectors.index, lambda, request.top_k);
        }
        ranked.truncate(top_k);
        ranked
    }

    /// Each server's rank (from 1) by BM25 over its whole text; servers that share no term
    /// with the query are left out.
    fn server_ranks(&self, query: &str) -> HashMap<u32, usize> {
        let lexical = &*self.lexical;
        let index = lexical.server_index.get_or_init(|| {
            let documents = server_documents(&lexical.tools, &lexical.servers);
            Bm25Index::build_with(
                &documents,
                &lexical.options.bm25,
                lexical.options.analyzer.clone(),
            )
        });
        index
            .rank(query, &|_| true)
            .into_iter()
            .enumerate()
            .map(|(at, hit)| (hit.doc, at + 1))
            .collect()
    }

    /// One query's ranking (the `at`th of `request`) and how its scores were made. A single
    /// list is served full depth, as it comes; a fused one only its first `depth` hits.
    fn rank_query<'s>(
        &'s self,
        request: &SearchRequest<'_>,
        strategy: Strategy,
        at: usize,
        depth: usize,
        keep: &dyn Fn(DocId) -> bool,
        key: &dyn Fn(DocId) -> &'s str,
    ) -> (Vec<Hit>, Scoring) {
        let query = request.queries[at].as_str();
        let hybrid = &request.hybrid;
        let lexical = || self.lexical.index.rank(query, keep);
        // BM25 answering alone gets pseudo-relevance feedback when the request asks for it.
        let lexical_alone = || {
            self.lexical
                .index
                .rank_with(query, request.feedback.as_ref(), keep)
        };
        let semantic = || -> Vec<Hit> {
            let vector_index = self.vectors.as_ref().map(|vectors| &vectors.index);
            let query_vectors = request.query_vectors.unwrap_or_default();
            match (vector_index, query_vectors.get(at)) {
                (Some(index), Some(vector)) => {
                    hybrid.strong(&index.rank(vector, keep)).into_owned()
                }
                _ => Vec::new(),
            }
        };
        // The learned sparse list (SPLADE), when the request brings this query's vector and the
        // catalog has the tools'; not for CJK text unless asked (its vocabulary is English).
        let sparse = request.sparse.as_ref().and_then(|sparse| {
            let index = &self.sparse.as_ref()?.index;
            let vector = sparse.vectors.get(at)?;
            if !sparse.cjk && has_cjk(query) {
                return None;
            }
            Some((index.rank(vector, keep), sparse))
        });
        if let Some((list, sparse)) = &sparse
            && sparse.alone
        {
            return (list.clone(), Scoring::Bm25);
        }
        // BM25 with the sparse list beside it where BM25 would answer alone.
        // The sparse list's own term is not explained (docs/retrieval.md, round four).
        let lexical_or_sparse = || match &sparse {
            Some((list, sparse)) if !list.is_empty() && sparse.weight > 0.0 => (
                hybrid.fuse_lists(
                    &[
                        Ranked::from_zero(&lexical(), 1.0),
                        Ranked::from_zero(list, sparse.weight),
                    ],
                    key,
                    depth,
                ),
                Scoring::of_fusion(hybrid.fusion, 1.0, 0.0),
            ),
            _ => (lexical_alone(), Scoring::Bm25),
        };
        match strategy {
            Strategy::Bm25 => lexical_or_sparse(),
            Strategy::Vector => (semantic(), Scoring::Vector),
            // Balance 0 skips the vector ranking it would ignore; balance 100 skips BM25
            // unless it is needed because no vector hit is strong enough.
            Strategy::Hybrid if hybrid.balance == 0 => (lexical_alone(), Scoring::Bm25),
            // An English-only model turns Chinese, Japanese or Korean text into near-noise
            // (MiniLM: ultratool-zh hybrid 39.4 vs BM25 70.1): let BM25 answer alone.
            Strategy::Hybrid if !request.multilingual_vectors && has_cjk(query) => {
                lexical_or_sparse()
            }
            Strategy::Hybrid => {
                let semantic = semantic();
                if semantic.is_empty() {
                    return (lexical_alone(), Scoring::Bm25);
                }
                if hybrid.balance >= 100 {
                    return (semantic, Scoring::Vector);
                }
                let lexical = if request.feedback_in_fusion {
                    lexical_alone()
                } else {
                    lexical()
                };
                if lexical.is_empty() {
                    return (semantic, Scoring::Vector);
                }
                let terms = match hybrid.adaptive {
                    Some(adaptive) if adaptive.words => query.split_whitespace().count(),
                    _ => self.lexical.index.query_length(query),
                };
                let vector_weight = hybrid.semantic_weight(terms);
                let scoring = Scoring::of_fusion(hybrid.fusion, 1.0 - vector_weight, vector_weight);
                // Two lists, or three with the sparse one at its own weight (the BM25 and vector
                // weights still add up to 1).
                let fuse = |semantic: &[Hit]| match &sparse {
                    Some((list, sparse)) if !list.is_empty() && sparse.weight > 0.0 => {
                        let semantic = hybrid.strong(semantic);
                        hybrid.fuse_lists(
                            &[
                                Ranked::from_zero(&lexical, 1.0 - vector_weight),
                                Ranked::from_lowest(&semantic, vector_weight),
                                Ranked::from_zero(list, sparse.weight),
                            ],
                            key,
                            depth,
                        )
                    }
                    _ => hybrid.fuse_top(&lexical, semantic, terms, key, depth),
                };
                let fused = fuse(&semantic);
                let moved = match (request.rerank.vector_feedback, fused.first()) {
                    (Some(beta), Some(best)) => self.rocchio(request, at, best.doc, beta),
                    _ => None,
                };
                match moved {
                    Some(vector) => {
                        let semantic = self.vectors.as_ref().map_or_else(Vec::new, |vectors| {
                            hybrid
                                .strong(&vectors.index.rank(&vector, keep))
                                .into_owned()
                        });
                        (fuse(&semantic), scoring)
                    }
                    None => (fused, scoring),
                }
            }
        }
    }

    /// The `at`th query vector moved towards the vector of tool `best` (Rocchio): `q + beta
    /// * v`, both unit length; `None` without vectors or with a weight that is not finite.
    fn rocchio(
        &self,
        request: &SearchRequest<'_>,
        at: usize,
        best: DocId,
        beta: f32,
    ) -> Option<Vec<f32>> {
        let index = &self.vectors.as_ref()?.index;
        let query = request.query_vectors?.get(at)?;
        let tool = index.vector(best)?;
        if !beta.is_finite() || query.len() != tool.len() {
            return None;
        }
        let norm = query
            .iter()
            .map(|x| x * x)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        Some(
            query
                .iter()
                .zip(tool)
                .map(|(q, t)| q / norm + beta * t)
                .collect(),
        )
    }

    /// What stands behind the hits of [`Catalog::search_with`] for the same request: how their
    /// scores were made, and each hit's rank and score in the BM25 and the vector list of the
    /// first query (full depth, filter applied, vector hits below the minimum similarity
    /// dropped). For `mcpgw search --explain`; it ranks again, so it costs a second search.
    pub fn explain(&self, request: &SearchRequest<'_>, hits: &[SearchHit<'_>]) -> Explanation {
        let (strategy, _) = self.runnable(request);
        let Some(query) = request.queries.first() else {
            return Explanation::default();
        };
        let keep = |doc: DocId| {
            self.tool(doc)
                .is_some_and(|tool| request.filter.matches(tool))
        };
        let key = |doc: DocId| self.tool(doc).map_or("", |tool| tool.qualified.as_str());
        let scoring = if request.queries.len() > 1 {
            Scoring::Capabilities
        } else {
            self.rank_query(request, strategy, 0, request.top_k, &keep, &key)
                .1
        };
        let positions = |list: Vec<Hit>| -> HashMap<&str, (usize, f32)> {
            list.into_iter()
                .enumerate()
                .map(|(at, hit)| (key(hit.doc), (at + 1, hit.score)))
                .collect()
        };
        // The BM25 list as the search used it: with feedback only where BM25 answered alone.
        let feedback = match scoring {
            Scoring::Bm25 | Scoring::Capabilities if strategy == Strategy::Bm25 => {
                request.feedback.as_ref()
            }
            Scoring::Bm25 => request.feedback.as_ref(),
            Scoring::Fused { .. } | Scoring::Normalised { .. } if request.feedback_in_fusion => {
                request.feedback.as_ref()
            }
            _ => None,
        };
        let lexical = self.lexical.index.rank_with(query, feedback, &keep);
        let bm25_span = retrieval::score_span(&lexical, Some(0.0));
        let lexical = positions(lexical);
        // The vector list as the fusion used it: with vector feedback, the moved query's.
        let moved = match (scoring, request.rerank.vector_feedback) {
            (Scoring::Fused { .. } | Scoring::Normalised { .. }, Some(beta)) => {
                let first_pass = SearchRequest {
                    rerank: Rerank {
                        vector_feedback: None,
                        ..request.rerank
                    },
                    ..request.clone()
                };
                let (first, _) = self.rank_query(&first_pass, strategy, 0, 1, &keep, &key);
                first
                    .first()
                    .and_then(|best| self.rocchio(request, 0, best.doc, beta))
            }
            _ => None,
        };
        let semantic = match (
            self.vectors.as_ref(),
            moved
                .as_ref()
                .or_else(|| request.query_vectors.and_then(|vectors| vectors.first())),
        ) {
            (Some(vectors), Some(vector)) if strategy.needs_vectors() => request
                .hybrid
                .strong(&vectors.index.rank(vector, &keep))
                .into_owned(),
            _ => Vec::new(),
        };
        // Score fusion's spans, from the lists just ranked as the fusion ranked them.
        let scoring = match scoring {
            Scoring::Normalised {
                bm25_weight,
                vector_weight,
                ..
            } => Scoring::Normalised {
                bm25_weight,
                vector_weight,
                bm25_span,
                vector_span: (vector_weight > 0.0)
                    .then(|| retrieval::score_span(&semantic, None))
                    .flatten(),
            },
            other => other,
        };
        let semantic = positions(semantic);
        Explanation {
            scoring,
            sources: hits
                .iter()
                .map(|hit| {
                    let name = hit.tool.qualified.as_str();
                    Sources {
                        bm25: lexical.get(name).copied(),
                        vector: semantic.get(name).copied(),
                    }
                })
                .collect(),
        }
    }

    /// The strategy `request` can run with, and why it differs from the one asked for.
    fn runnable(&self, request: &SearchRequest<'_>) -> (Strategy, Option<String>) {
        if !request.strategy.needs_vectors() {
            return (request.strategy, None);
        }
        let problem = match (&self.vectors, request.query_vectors) {
            (None, _) => Some("no tool vectors".to_string()),
            (Some(_), None) => Some("no query vectors".to_string()),
            (Some(_), Some(vectors))
                if vectors.len() != request.queries.len()
                    && !(request.needs && vectors.len() == 1) =>
            {
                Some(format!(
                    "{} query vectors for {} queries",
                    vectors.len(),
                    request.queries.len()
                ))
            }
            (Some(tools), Some(vectors)) => vectors
                .iter()
                .find(|vector| vector.len() != tools.index.dim())
                .map(|vector| {
                    format!(
                        "query vectors have {} components, tool vectors {}",
                        vector.len(),
                        tools.index.dim()
                    )
                }),
        };
        match problem {
            Some(problem) => (Strategy::Bm25, Some(format!("{problem}; served BM25"))),
            None => (request.strategy, None),
        }
    }

    /// The qualified names closest to an unknown tool name, best first, at most `limit`; see
    /// [`suggestion`] for the tiers.
    pub fn suggest(&self, unknown: &str, limit: usize) -> Vec<&str> {
        self.suggest_where(unknown, limit, |_| true)
    }

    /// [`Catalog::suggest`] among the tools `keep` lets through (a caller's profile).
    pub fn suggest_where(
        &self,
        unknown: &str,
        limit: usize,
        keep: impl Fn(&ToolEntry) -> bool,
    ) -> Vec<&str> {
        let candidates = self
            .lexical
            .tools
            .iter()
            .filter(|tool| keep(tool))
            .map(|tool| Candidate {
                qualified: &tool.qualified,
                upstream: &tool.upstream_name,
            });
        suggestion::suggest(unknown, candidates, limit)
    }

    /// Checks a `tools/call`'s arguments (absent ones as `{}`) against the input schema of the
    /// tool named `qualified`, as its upstream published it; see [`arguments`] for what is
    /// checked and why a schema's own problems give [`Validation::Unvalidated`] rather than
    /// blocking the call. The tool's validator is compiled on its first check and reused.
    pub fn validate_arguments(
        &self,
        qualified: &str,
        arguments: Option<&Map<String, Value>>,
    ) -> Result<Validation, ArgumentErrors> {
        let Some(at) = self.position(qualified) else {
            return Ok(Validation::UnknownTool);
        };
        let lexical = &*self.lexical;
        let (Some(tool), Some(slot)) = (lexical.tools.get(at), lexical.validators.get(at)) else {
            return Ok(Validation::UnknownTool);
        };
        slot.get_or_init(|| ArgumentValidator::new(tool.input_schema()))
            .validate(arguments)
    }

    /// Sum of every tool's [`ToolEntry::token_cost`]: what passthrough mode would cost a client.
    pub fn total_token_cost(&self) -> usize {
        self.lexical.total_token_cost
    }

    /// The document id of a tool is its index in `tools`.
    fn tool(&self, doc: DocId) -> Option<&ToolEntry> {
        self.lexical.tools.get(usize::try_from(doc).ok()?)
    }
}

/// The search document of every tool, with its server's description.
fn documents(tools: &[ToolEntry], servers: &[(ServerName, Option<String>)]) -> Vec<Document> {
    let descriptions: HashMap<&str, &str> = servers
        .iter()
        .filter_map(|(name, description)| Some((name.as_str(), description.as_deref()?)))
        .collect();
    tools
        .iter()
        .map(|tool| search::document(tool, descriptions.get(tool.server.as_str()).copied()))
        .collect()
}

/// One document per server: its name, its description, and every tool's name and
/// description, for ranking servers as wholes ([`ServerPrior::lexical`]).
fn server_documents(
    tools: &[ToolEntry],
    servers: &[(ServerName, Option<String>)],
) -> Vec<Document> {
    servers
        .iter()
        .map(|(name, description)| {
            let mut fields = vec![(retrieval::Field::Name, name.to_string())];
            if let Some(description) = description.as_deref().filter(|d| !d.is_empty()) {
                fields.push((retrieval::Field::ServerDescription, description.to_string()));
            }
            for tool in tools.iter().filter(|tool| tool.server == *name) {
                fields.push((retrieval::Field::Description, tool.upstream_name.clone()));
                fields.push((retrieval::Field::Description, tool.description.clone()));
            }
            Document {
                key: name.to_string(),
                fields,
            }
        })
        .collect()
}

/// Walking down the first `window` hits, a hit whose vector has a cosine similarity of at
/// least `threshold` with a hit already placed moves to the end of the window.
fn dedup(ranked: &[Hit], index: &VectorIndex, threshold: f32, window: usize) -> Vec<Hit> {
    let window = window.min(ranked.len());
    let mut placed: Vec<Hit> = Vec::with_capacity(ranked.len());
    let mut held = Vec::new();
    for hit in &ranked[..window] {
        let near = index.vector(hit.doc).is_some_and(|vector| {
            placed.iter().any(|other| {
                index.vector(other.doc).is_some_and(|o| {
                    vector.iter().zip(o).map(|(a, b)| a * b).sum::<f32>() >= threshold
                })
            })
        });
        if near {
            held.push(*hit);
        } else {
            placed.push(*hit);
        }
    }
    placed.extend(held);
    placed.extend_from_slice(&ranked[window..]);
    placed
}

/// Maximal marginal relevance ([`Rerank::mmr`]): the first `window` places picked greedily
/// from `ranked` (its head, [`search::MMR_POOL`] deep), each the hit with the highest score
/// over the best score less `lambda` times its highest cosine with a hit already picked (ties
/// to the earlier place); the rest follow in their order. Hits without a vector count as
/// similar to nothing.
fn mmr(ranked: &[Hit], index: &VectorIndex, lambda: f32, window: usize) -> Vec<Hit> {
    let best = ranked.first().map_or(1.0, |hit| hit.score);
    if !(lambda.is_finite() && best.is_finite() && best > 0.0) {
        return ranked.to_vec();
    }
    let pool = ranked.len().min(search::MMR_POOL.max(window));
    let mut left: Vec<Hit> = ranked[..pool].to_vec();
    let mut picked: Vec<Hit> = Vec::with_capacity(ranked.len());
    while picked.len() < window && !left.is_empty() {
        let value = |hit: &Hit| {
            let redundancy = index.vector(hit.doc).map_or(0.0, |vector| {
                picked
                    .iter()
                    .filter_map(|other| index.vector(other.doc))
                    .map(|other| vector.iter().zip(other).map(|(a, b)| a * b).sum::<f32>())
                    .fold(0.0f32, f32::max)
            });
            hit.score / best - lambda * redundancy
        };
        let mut at = 0;
        let mut top = f32::NEG_INFINITY;
        for (i, hit) in left.iter().enumerate() {
            let v = value(hit);
            if v > top {
                top = v;
                at = i;
            }
        }
        picked.push(left.remove(at));
    }
    picked.extend(left);
    picked.extend_from_slice(&ranked[pool..]);
    picked
}

impl Default for Catalog {
    /// The empty catalog, before any upstream has answered.
    fn default() -> Self {
        Catalog::build(&[]).0
    }
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Catalog")
            .field("servers", &self.servers())
            .field("tools", &self.len())
            .field("total_token_cost", &self.total_token_cost())
            .field("vector_model", &self.vector_model())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use proptest::prelude::*;
    // The glob above brings proptest's `Strategy` trait; ours is the search strategy.
    use proptest::strategy::Strategy as _;
    use serde_json::json;

    use super::*;
    use crate::search::Strategy;

    /// Tool objects as a caller hands them over, each in its own `Arc`.
    pub(crate) fn shared(tools: Vec<Value>) -> Vec<Arc<Value>> {
        tools.into_iter().map(Arc::new).collect()
    }

    fn tool(name: &str, description: &str, annotations: Value) -> Value {
        let mut tool = json!({
            "name": name,
            "description": description,
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}
        });
        if !annotations.is_null() {
            tool["annotations"] = annotations;
        }
        tool
    }

    fn fixture() -> Vec<ServerTools> {
        vec![
            ServerTools {
                server: "everything".into(),
                description: Some("Reference server that exercises every MCP feature".into()),
                tools: shared(vec![
                    tool(
                        "echo",
                        "Echoes back the input message.",
                        json!({"readOnlyHint": true}),
                    ),
                    tool(
                        "add",
                        "Adds two numbers together.",
                        json!({"readOnlyHint": true}),
                    ),
                    json!({
                        "name": "longRunningOperation",
                        "description": "Demonstrates a long running operation with progress updates",
                        "inputSchema": {
                            "type": "object",
                            "properties": {"config": {"$ref": "#/$defs/Config"}},
                            "$defs": {"Config": {"type": "object", "properties": {
                                "duration": {"type": "number", "description": "seconds to wait"},
                                "steps": {"type": "integer"}
                            }}}
                        }
                    }),
                ]),
            },
            ServerTools {
                server: "fs".into(),
                description: None,
                tools: shared(vec![
                    tool(
                        "read_file",
                        "Read a file from disk.",
                        json!({"readOnlyHint": true}),
                    ),
                    tool(
                        "write_file",
                        "Write a file to disk, replacing it.",
                        json!({"readOnlyHint": false}),
                    ),
                    tool(
                        "move_file",
                        "Move or rename a file.",
                        json!({"readOnlyHint": false, "destructiveHint": false}),
                    ),
                    tool("delete_file", "Delete a file.", json!(null)),
                ]),
            },
            ServerTools {
                server: "github".into(),
                description: Some("Issues and pull requests".into()),
                tools: shared(vec![
                    tool(
                        "search_repositories",
                        "Search GitHub repositories.",
                        json!({"readOnlyHint": true}),
                    ),
                    tool(
                        "create_issue",
                        "Open a new issue in a repository.",
                        json!({"destructiveHint": false}),
                    ),
                    tool(
                        "read_file",
                        "Read a file from a repository.",
                        json!({"readOnlyHint": true}),
                    ),
                ]),
            },
        ]
    }

    /// Keeps the tokenizer loaded for the whole test process: the property tests build a
    /// catalog per case, and loading it per build is slow in an unoptimised build.
    pub(crate) static TOKENIZER: std::sync::LazyLock<cost::Counter> =
        std::sync::LazyLock::new(cost::Counter::load);

    fn catalog() -> Catalog {
        std::sync::LazyLock::force(&TOKENIZER);
        let (catalog, problems) = Catalog::build(&fixture());
        assert_eq!(problems, Vec::new());
        catalog
    }

    fn check_search(query: &str, filter: &Filter, expect: Expect) {
        let catalog = catalog();
        let hits: Vec<&str> = catalog
            .search(query, 5, filter)
            .iter()
            .map(|hit| hit.tool.qualified.as_str())
            .collect();
        expect.assert_eq(&hits.join(" "));
    }

    #[test]
    fn catalog_is_send_sync_and_lists_tools_in_order() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Catalog>();

        let catalog = catalog();
        let names: Vec<&str> = catalog
            .tools()
            .iter()
            .map(|t| t.qualified.as_str())
            .collect();
        expect![[r#"
            everything__echo everything__add everything__longRunningOperation fs__read_file fs__write_file fs__move_file fs__delete_file github__search_repositories github__create_issue github__read_file"#]]
        .assert_eq(&names.join(" "));
        assert_eq!(catalog.servers(), ["everything", "fs", "github"]);
        assert_eq!(catalog.len(), 10);
        let read = catalog.get("github__read_file").expect("listed");
        assert_eq!(
            (read.server.as_str(), read.upstream_name.as_str()),
            ("github", "read_file")
        );
        assert!(catalog.get("read_file").is_none());
        assert_eq!(
            catalog.server_description("github"),
            Some("Issues and pull requests")
        );
        assert!(Catalog::default().is_empty());
    }

    #[test]
    fn malformed_tools_are_problems_and_the_rest_loads() {
        let servers = [
            ServerTools {
                server: "broken".into(),
                description: None,
                tools: shared(vec![
                    json!({"description": "no name", "inputSchema": {}}),
                    json!({"name": 42, "inputSchema": {}}),
                    json!({"name": "bad_schema", "inputSchema": []}),
                    json!({"name": "no_schema"}),
                    json!(null),
                    json!({"name": "good", "inputSchema": {"type": "object"}}),
                    json!({"name": "good", "inputSchema": {"type": "object"}, "description": "again"}),
                    json!({"name": "retried", "inputSchema": 1}),
                    json!({"name": "retried", "inputSchema": {}}),
                ]),
            },
            ServerTools {
                server: "fine".into(),
                description: None,
                tools: shared(vec![json!({"name": "ok", "inputSchema": {}})]),
            },
            ServerTools {
                server: "fine".into(),
                description: None,
                tools: shared(vec![json!({"name": "shadow", "inputSchema": {}})]),
            },
        ];
        let (catalog, problems) = Catalog::build(&servers);
        let problems: Vec<String> = problems.iter().map(Problem::to_string).collect();
        expect![[r#"
            broken: tool has no name
            broken: tool name is not a string
            broken: tool "bad_schema": inputSchema is not a JSON object
            broken: tool "no_schema": tool has no inputSchema
            broken: tool is not a JSON object
            broken: tool "good": duplicate tool name; the first tool with this name is kept
            broken: tool "retried": inputSchema is not a JSON object
            fine: server listed more than once; only its first tool list is used"#]]
        .assert_eq(&problems.join("\n"));
        let names: Vec<&str> = catalog
            .tools()
            .iter()
            .map(|t| t.qualified.as_str())
            .collect();
        assert_eq!(names, ["broken__good", "broken__retried", "fine__ok"]);
        assert_eq!(
            catalog.get("broken__good").map(|t| t.description.as_str()),
            Some("")
        );
    }

    #[test]
    fn search_ranks_by_name_params_and_server_description() {
        check_search("echo", &Filter::default(), expect!["everything__echo"]);
        // `duration` is behind a `$ref`; the resolved view makes it searchable.
        check_search(
            "duration",
            &Filter::default(),
            expect!["everything__longRunningOperation"],
        );
        check_search(
            "pull requests",
            &Filter::default(),
            expect!["github__create_issue github__read_file github__search_repositories"],
        );
        check_search("zzzz", &Filter::default(), expect![""]);
    }

    #[test]
    fn search_filters_by_server_and_annotations() {
        let servers = |names: &[&str]| Filter {
            servers: Some(names.iter().map(|s| s.to_string()).collect()),
            ..Filter::default()
        };
        check_search(
            "read file",
            &servers(&["fs"]),
            expect!["fs__read_file fs__delete_file fs__move_file fs__write_file"],
        );
        check_search(
            "read file",
            &servers(&["github"]),
            expect!["github__read_file"],
        );
        check_search("read file", &servers(&[]), expect![""]);
        let read_only = Filter {
            read_only: Some(true),
            ..Filter::default()
        };
        check_search(
            "file",
            &read_only,
            expect!["fs__read_file github__read_file"],
        );
        let safe = Filter {
            destructive: Some(false),
            ..Filter::default()
        };
        check_search(
            "file",
            &safe,
            expect!["fs__move_file fs__read_file github__read_file"],
        );
        let destructive = Filter {
            destructive: Some(true),
            ..Filter::default()
        };
        check_search(
            "file",
            &destructive,
            expect!["fs__delete_file fs__write_file"],
        );
    }

    #[test]
    fn search_respects_top_k() {
        let catalog = catalog();
        assert_eq!(catalog.search("file", 2, &Filter::default()).len(), 2);
        assert!(catalog.search("file", 0, &Filter::default()).is_empty());
    }

    fn arb_filter() -> impl proptest::strategy::Strategy<Value = Filter> {
        let servers = prop::option::of(prop::collection::vec(
            prop_oneof![Just("everything"), Just("fs"), Just("github"), Just("nope")]
                .prop_map(String::from),
            0..3,
        ));
        // A profile's allowed set: a random subset of the fixture's qualified names.
        let names: Vec<String> = catalog()
            .tools()
            .iter()
            .map(|t| t.qualified.to_string())
            .collect();
        let tools = prop::option::of(prop::sample::subsequence(names.clone(), 0..=names.len()));
        (servers, any::<Option<bool>>(), any::<Option<bool>>(), tools).prop_map(
            |(servers, read_only, destructive, tools)| Filter {
                servers,
                read_only,
                destructive,
                tools: tools.map(|t| std::sync::Arc::new(t.into_iter().collect())),
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn filtered_tool_never_appears_whatever_the_strategy(
            filter in arb_filter(),
            strategy in prop::sample::select(Strategy::ALL.as_slice()),
            balance in 0u8..=100,
            query in prop_oneof![Just("file"), Just("read file"), Just("echo add"), Just("zzz")],
            query_vector in prop::collection::vec(-3i8..=3, TOPICS.len()),
        ) {
            let catalog = vector_catalog();
            let queries = [query.to_string()];
            let vectors = [query_vector.into_iter().map(f32::from).collect::<Vec<f32>>()];
            let mut request = request(&queries, Some(&vectors), strategy, &filter);
            request.hybrid.balance = balance;
            request.top_k = 100;
            let outcome = catalog.search_with(&request);
            prop_assert_eq!(outcome.degraded, None);
            for hit in &outcome.hits {
                prop_assert!(filter.matches(hit.tool), "{} passed {:?}", hit.tool.qualified, filter);
            }
            // A vector ranking covers every tool the filter lets through.
            if strategy == Strategy::Vector {
                let visible = catalog.tools().iter().filter(|tool| filter.matches(tool)).count();
                prop_assert_eq!(outcome.hits.len(), visible);
            }
        }

        #[test]
        fn search_never_returns_filtered_tools(
            filter in arb_filter(),
            query in prop_oneof![Just("file"), Just("read file"), Just("echo add"), Just("repository issue"), Just("every file echo")],
        ) {
            let catalog = catalog();
            let hits = catalog.search(query, 100, &filter);
            for hit in &hits {
                prop_assert!(filter.matches(hit.tool), "{} passed {:?}", hit.tool.qualified, filter);
            }
            // Filtering narrows before ranking: every matching tool that shares a term is found.
            let unfiltered = catalog.search(query, 100, &Filter::default());
            let expected = unfiltered.iter().filter(|hit| filter.matches(hit.tool)).count();
            prop_assert_eq!(hits.len(), expected);
        }
    }

    /// A made-up embedding: one axis per topic, so tests can say which tool a query is near.
    const TOPICS: [&str; 4] = ["math", "files", "code", "talk"];

    fn topic_vector(topics: &[(&str, f32)]) -> Vec<f32> {
        TOPICS
            .iter()
            .map(|t| {
                topics
                    .iter()
                    .find(|(name, _)| name == t)
                    .map_or(0.0, |(_, w)| *w)
            })
            .collect()
    }

    fn tool_vectors(catalog: &Catalog) -> Vec<Vec<f32>> {
        catalog
            .tools()
            .iter()
            .map(|tool| match tool.upstream_name.as_str() {
                "echo" => topic_vector(&[("talk", 1.0)]),
                "add" => topic_vector(&[("math", 1.0)]),
                "longRunningOperation" => topic_vector(&[("math", 0.3), ("talk", 0.2)]),
                "search_repositories" => topic_vector(&[("code", 1.0)]),
                "create_issue" => topic_vector(&[("code", 1.0), ("talk", 0.3)]),
                "read_file" if tool.server == "github" => {
                    topic_vector(&[("code", 0.6), ("files", 0.5)])
                }
                _ => topic_vector(&[("files", 1.0), ("math", 0.1)]),
            })
            .collect()
    }

    fn vector_catalog() -> Catalog {
        let catalog = catalog();
        let vectors = tool_vectors(&catalog);
        catalog
            .with_vectors("test/topics".into(), vectors)
            .expect("one valid vector per tool")
    }

    fn request<'a>(
        queries: &'a [String],
        query_vectors: Option<&'a [Vec<f32>]>,
        strategy: Strategy,
        filter: &'a Filter,
    ) -> SearchRequest<'a> {
        SearchRequest {
            queries,
            query_vectors,
            strategy,
            hybrid: retrieval::Hybrid::default(),
            feedback: None,
            feedback_in_fusion: false,
            multilingual_vectors: false,
            top_k: 5,
            filter,
            needs: false,
            caution: false,
            rerank: Default::default(),
            sparse: None,
        }
    }

    fn names(outcome: &SearchOutcome<'_>) -> String {
        outcome
            .hits
            .iter()
            .map(|hit| hit.tool.qualified.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The vector catalog with sparse vectors where only `add` has term 7.
    fn sparse_catalog() -> Catalog {
        let catalog = vector_catalog();
        let sparse = catalog
            .tools()
            .iter()
            .map(|tool| match tool.upstream_name.as_str() {
                "add" => vec![(7, 1.0), (9, 0.5)],
                _ => vec![(9, 0.5)],
            })
            .collect();
        catalog
            .with_sparse("test/sparse".into(), sparse)
            .expect("one sparse vector per tool")
    }

    #[test]
    fn the_sparse_list_joins_fusion_at_its_own_weight() {
        let catalog = sparse_catalog();
        assert_eq!(catalog.sparse_model(), Some("test/sparse"));
        let filter = Filter::default();
        let search = |query: &str, strategy: Strategy, sparse: Option<SparseQuery<'_>>| {
            let queries = [query.to_string()];
            let vectors = [topic_vector(&[("files", 1.0)])];
            let mut request = request(&queries, Some(&vectors), strategy, &filter);
            request.sparse = sparse;
            names(&catalog.search_with(&request))
        };
        let vectors = [vec![(7, 1.0)]];
        let on = |weight: f32| SparseQuery {
            vectors: &vectors,
            weight,
            cjk: false,
            alone: false,
        };
        // `add` shares no word with the query and its vector is far; the sparse list alone
        // brings it, first at weight 2 (2/61 against at most 1/61 from the other two lists).
        let without = search("read file", Strategy::Hybrid, None);
        assert!(!without.starts_with("everything__add"), "{without}");
        let with = search("read file", Strategy::Hybrid, Some(on(2.0)));
        assert!(with.starts_with("everything__add "), "{with}");
        // Weight 0 switches it off.
        assert_eq!(
            search("read file", Strategy::Hybrid, Some(on(0.0))),
            without
        );
        // Beside BM25 alone, and alone.
        assert_eq!(search("zzz", Strategy::Bm25, None), "");
        assert_eq!(
            search("zzz", Strategy::Bm25, Some(on(1.0))),
            "everything__add"
        );
        let alone = SparseQuery {
            alone: true,
            ..on(1.0)
        };
        assert_eq!(
            search("read file", Strategy::Bm25, Some(alone)),
            "everything__add"
        );
        // A CJK query skips it unless asked (the model's vocabulary is English).
        assert_eq!(search("读取文件", Strategy::Bm25, Some(on(1.0))), "");
        let cjk = SparseQuery {
            cjk: true,
            ..on(1.0)
        };
        assert_eq!(
            search("读取文件", Strategy::Bm25, Some(cjk)),
            "everything__add"
        );
    }

    #[test]
    fn bm25_beside_the_sparse_list_says_which_fusion_made_its_scores() {
        let catalog = sparse_catalog();
        let filter = Filter::default();
        let queries = ["read file".to_string()];
        let vectors = [vec![(7, 1.0)]];
        let scoring = |fusion: retrieval::Fusion| {
            let mut request = request(&queries, None, Strategy::Bm25, &filter);
            request.hybrid.fusion = fusion;
            request.sparse = Some(SparseQuery {
                vectors: &vectors,
                weight: 1.0,
                cjk: false,
                alone: false,
            });
            let outcome = catalog.search_with(&request);
            assert!(!outcome.hits.is_empty());
            catalog.explain(&request, &outcome.hits).scoring
        };
        assert_eq!(
            scoring(retrieval::Fusion::default()),
            Scoring::Fused {
                bm25_weight: 1.0,
                vector_weight: 0.0
            }
        );
        let Scoring::Normalised {
            bm25_weight,
            vector_weight,
            bm25_span: Some((low, high)),
            vector_span: None,
        } = scoring(retrieval::Fusion::Scores)
        else {
            panic!("not score fusion");
        };
        assert_eq!((bm25_weight, vector_weight, low), (1.0, 0.0, 0.0));
        assert!(high > 0.0);
    }

    #[test]
    fn cjk_query_is_lexical_only_when_the_model_is_english_only() {
        let catalog = vector_catalog();
        // A Chinese query that BM25 cannot match, and a query vector pointing at `add`.
        let queries = ["读取文件".to_string()];
        let vectors = [topic_vector(&[("math", 1.0)])];
        let filter = Filter::default();
        let mut english_only = request(&queries, Some(&vectors), Strategy::Hybrid, &filter);
        english_only.multilingual_vectors = false;
        let lexical = catalog.search_with(&request(&queries, None, Strategy::Bm25, &filter));
        assert_eq!(
            names(&catalog.search_with(&english_only)),
            names(&lexical),
            "an English-only model's vector for Chinese text is noise: BM25 answers alone"
        );
        let mut multilingual = english_only.clone();
        multilingual.multilingual_vectors = true;
        assert!(
            names(&catalog.search_with(&multilingual)).starts_with("everything__add"),
            "a multilingual model's vector is used"
        );
    }

    #[test]
    fn several_queries_bring_each_capability_s_best_tools() {
        // Two capabilities; a tool that is middling for both must not beat the best of each.
        let catalog = vector_catalog();
        let queries = ["add numbers".to_string(), "echo a message".to_string()];
        let vectors = [
            topic_vector(&[("math", 1.0)]),
            topic_vector(&[("talk", 1.0)]),
        ];
        let filter = Filter::default();
        let mut both = request(&queries, Some(&vectors), Strategy::Hybrid, &filter);
        both.top_k = 2;
        let top = names(&catalog.search_with(&both));
        assert!(top.contains("everything__add"), "{top}");
        assert!(top.contains("everything__echo"), "{top}");
    }

    #[test]
    fn vector_search_ranks_every_tool_by_similarity() {
        let catalog = vector_catalog();
        assert_eq!(catalog.vector_model(), Some("test/topics"));
        assert_eq!(catalog.vector_dim(), Some(4));
        // "compute sum" shares no term with any tool; the vector search still finds `add`.
        let queries = ["compute sum".to_string()];
        let vectors = [topic_vector(&[("math", 1.0)])];
        let outcome = catalog.search_with(&request(
            &queries,
            Some(&vectors),
            Strategy::Vector,
            &Filter::default(),
        ));
        assert_eq!(outcome.degraded, None);
        expect!["everything__add everything__longRunningOperation fs__delete_file fs__move_file fs__read_file"]
            .assert_eq(&names(&outcome));
        let bm25 = catalog.search_with(&request(
            &queries,
            Some(&vectors),
            Strategy::Bm25,
            &Filter::default(),
        ));
        assert_eq!(names(&bm25), "");
    }

    #[test]
    fn hybrid_recovers_semantic_only_match() {
        // The seed's three-tool example on a real catalog: BM25 finds the five file tools by
        // name, the vector search puts `search_repositories` (no shared term) first, and
        // hybrid keeps both: the consensus first, the semantic-only match after the lexical
        // ones, as in the seed's table.
        let catalog = vector_catalog();
        let queries = ["read file".to_string()];
        let vectors = [topic_vector(&[("code", 1.0)])];
        let filter = Filter::default();
        let mut request = request(&queries, Some(&vectors), Strategy::Bm25, &filter);
        request.top_k = 7;
        let bm25 = catalog.search_with(&request);
        assert!(
            !names(&bm25).contains("github__search_repositories"),
            "{}",
            names(&bm25)
        );
        request.strategy = Strategy::Vector;
        let vector = catalog.search_with(&request);
        assert_eq!(vector.hits[0].tool.qualified, "github__search_repositories");
        request.strategy = Strategy::Hybrid;
        let hybrid = catalog.search_with(&request);
        expect!["github__read_file fs__read_file fs__delete_file fs__move_file fs__write_file github__search_repositories github__create_issue"].assert_eq(&names(&hybrid));
    }

    #[test]
    fn hybrid_balance_extremes_serve_one_list() {
        let catalog = vector_catalog();
        let queries = ["read file".to_string()];
        let vectors = [topic_vector(&[("code", 1.0)])];
        let filter = Filter::default();
        let run = |strategy, balance| {
            let mut request = request(&queries, Some(&vectors), strategy, &filter);
            request.hybrid.balance = balance;
            names(&catalog.search_with(&request))
        };
        assert_eq!(run(Strategy::Hybrid, 0), run(Strategy::Bm25, 50));
        assert_eq!(run(Strategy::Hybrid, 100), run(Strategy::Vector, 50));
    }

    #[test]
    fn feedback_applies_where_bm25_answers_alone_and_never_inside_fusion() {
        let catalog = vector_catalog();
        let queries = ["read file".to_string()];
        let vectors = [topic_vector(&[("code", 1.0)])];
        let filter = Filter::default();
        let feedback = Some(retrieval::Feedback::default());
        let run = |strategy, balance, feedback, vectors: Option<&[Vec<f32>]>| {
            let mut request = request(&queries, vectors, strategy, &filter);
            request.hybrid.balance = balance;
            request.feedback = feedback;
            request.top_k = 100;
            catalog.search_with(&request).hits
        };
        let scores = |hits: Vec<SearchHit<'_>>| -> Vec<(String, f32)> {
            hits.iter()
                .map(|hit| (hit.tool.qualified.to_string(), hit.score))
                .collect()
        };
        let plain = scores(run(Strategy::Bm25, 45, None, None));
        let expanded = scores(run(Strategy::Bm25, 45, feedback, None));
        assert_ne!(plain, expanded, "feedback changes BM25 alone");
        // Balance 0 and a search without vectors are BM25 alone too.
        assert_eq!(
            scores(run(Strategy::Hybrid, 0, feedback, Some(&vectors))),
            expanded
        );
        assert_eq!(scores(run(Strategy::Hybrid, 45, feedback, None)), expanded);
        // Inside fusion the BM25 list is the plain one.
        assert_eq!(
            scores(run(Strategy::Hybrid, 45, feedback, Some(&vectors))),
            scores(run(Strategy::Hybrid, 45, None, Some(&vectors)))
        );
    }

    #[test]
    fn explained_fusion_weights_are_the_query_s_own() {
        let catalog = vector_catalog();
        let filter = Filter::default();
        let vectors = [topic_vector(&[("files", 1.0)])];
        let weights = |query: &str, adaptive: Option<retrieval::Adaptive>| {
            let queries = [query.to_string()];
            let mut request = request(&queries, Some(&vectors), Strategy::Hybrid, &filter);
            request.hybrid.balance = 45;
            request.hybrid.adaptive = adaptive;
            request.top_k = 100;
            let outcome = catalog.search_with(&request);
            let explanation = catalog.explain(&request, &outcome.hits);
            // Every fused score is what the explained ranks and weights say.
            let Scoring::Fused {
                bm25_weight,
                vector_weight,
            } = explanation.scoring
            else {
                panic!("not fused: {explanation:?}");
            };
            for (hit, sources) in outcome.hits.iter().zip(&explanation.sources) {
                let part = |place: Option<(usize, f32)>, weight: f32| {
                    place.map_or(0.0, |(rank, _)| weight / (retrieval::RRF_K + rank as f32))
                };
                let expected =
                    part(sources.bm25, bm25_weight) + part(sources.vector, vector_weight);
                assert!((hit.score - expected).abs() < 1e-6, "{hit:?} {sources:?}");
            }
            vector_weight
        };
        let adaptive = Some(retrieval::Adaptive::default());
        assert_eq!(weights("read file", None), 0.45);
        let short = weights("read file", adaptive);
        let long = weights(
            "read the file from the disk and every file of the folder then read each line of it again slowly and carefully please",
            adaptive,
        );
        assert!(short > 0.45 && long < short, "{short} {long}");
    }

    #[test]
    fn mmr_lets_a_different_tool_past_a_near_copy() {
        let keys = ["a", "a2", "b", "c"].map(String::from).to_vec();
        let vectors = vec![
            vec![1.0, 0.0, 0.0],
            vec![0.99, 0.141, 0.0],
            vec![0.0, 1.0, 0.0],
            vec![0.0, 0.0, 1.0],
        ];
        let index = VectorIndex::build(keys, &vectors).expect("index");
        let ranked: Vec<Hit> = [(0, 1.0), (1, 0.95), (2, 0.8), (3, 0.5)]
            .map(|(doc, score)| Hit { doc, score })
            .to_vec();
        let order = |lambda: f32| -> Vec<DocId> {
            mmr(&ranked, &index, lambda, 3)
                .iter()
                .map(|hit| hit.doc)
                .collect()
        };
        // a2 is a near copy of a: with enough weight on redundancy b and c go before it.
        assert_eq!(order(0.0), [0, 1, 2, 3]);
        assert_eq!(order(0.3), [0, 2, 1, 3]);
        assert_eq!(order(1.0), [0, 2, 3, 1]);
        // A weight that is not finite changes nothing.
        assert_eq!(order(f32::NAN), [0, 1, 2, 3]);
    }

    #[test]
    fn explained_score_fusion_adds_up() {
        let catalog = vector_catalog();
        let filter = Filter::default();
        let vectors = [topic_vector(&[("files", 1.0), ("math", 0.3)])];
        let queries = ["read file and add numbers".to_string()];
        for vector_feedback in [None, Some(0.1)] {
            let mut request = request(&queries, Some(&vectors), Strategy::Hybrid, &filter);
            request.hybrid.fusion = retrieval::Fusion::Scores;
            request.rerank.vector_feedback = vector_feedback;
            request.top_k = 100;
            let outcome = catalog.search_with(&request);
            assert!(outcome.hits.len() > 2, "{:?}", outcome.hits);
            let explanation = catalog.explain(&request, &outcome.hits);
            let Scoring::Normalised {
                bm25_weight,
                vector_weight,
                bm25_span,
                vector_span,
            } = explanation.scoring
            else {
                panic!("not score fusion: {explanation:?}");
            };
            assert_eq!(
                bm25_span.map(|(low, _)| low),
                Some(0.0),
                "BM25's floor is 0"
            );
            for (hit, sources) in outcome.hits.iter().zip(&explanation.sources) {
                let part =
                    |place: Option<(usize, f32)>, weight: f32, span: Option<(f32, f32)>| match (
                        place, span,
                    ) {
                        (Some((_, score)), Some((low, high))) if high > low => {
                            weight * (score - low) / (high - low)
                        }
                        (Some(_), _) => weight,
                        (None, _) => 0.0,
                    };
                let expected = part(sources.bm25, bm25_weight, bm25_span)
                    + part(sources.vector, vector_weight, vector_span);
                assert!(
                    (hit.score - expected).abs() < 1e-5,
                    "{vector_feedback:?} {hit:?} {sources:?}"
                );
            }
        }
    }

    #[test]
    fn min_similarity_drops_weak_vector_hits_but_not_bm25_hits() {
        let catalog = vector_catalog();
        let queries = ["echo".to_string()];
        let vectors = [topic_vector(&[("math", 1.0)])];
        let filter = Filter::default();
        let mut strict = request(&queries, Some(&vectors), Strategy::Hybrid, &filter);
        strict.hybrid.min_similarity = Some(0.9);
        // `echo` is orthogonal to the query vector but matches by name; `add` is the one
        // strong vector hit.
        assert_eq!(
            names(&catalog.search_with(&strict)),
            "everything__add everything__echo"
        );
        strict.strategy = Strategy::Vector;
        assert_eq!(names(&catalog.search_with(&strict)), "everything__add");
    }

    #[test]
    fn vector_strategies_without_vectors_degrade_to_bm25() {
        let plain = catalog();
        let vectors = vector_catalog();
        let queries = ["read file".to_string()];
        let good = [topic_vector(&[("code", 1.0)])];
        let short = [vec![1.0, 0.0]];
        let two = [good[0].clone(), good[0].clone()];
        let filter = Filter::default();
        let bm25 = names(&plain.search_with(&request(&queries, None, Strategy::Bm25, &filter)));
        let check = |catalog: &Catalog, query_vectors: Option<&[Vec<f32>]>, expect: Expect| {
            for strategy in [Strategy::Vector, Strategy::Hybrid] {
                let outcome =
                    catalog.search_with(&request(&queries, query_vectors, strategy, &filter));
                assert_eq!(names(&outcome), bm25, "{strategy}");
                expect.assert_eq(outcome.degraded.as_deref().unwrap_or("not degraded"));
            }
        };
        check(&plain, Some(&good), expect!["no tool vectors; served BM25"]);
        check(&vectors, None, expect!["no query vectors; served BM25"]);
        check(
            &vectors,
            Some(&two),
            expect!["2 query vectors for 1 queries; served BM25"],
        );
        check(
            &vectors,
            Some(&short),
            expect!["query vectors have 2 components, tool vectors 4; served BM25"],
        );
        let outcome = plain.search_with(&request(&queries, None, Strategy::Bm25, &filter));
        assert_eq!(outcome.degraded, None);
    }

    #[test]
    fn attaching_vectors_checks_count_and_values() {
        let check = |vectors: Vec<Vec<f32>>, expect: Expect| {
            let error = catalog().with_vectors("m".into(), vectors).err();
            expect.assert_eq(&error.map_or("ok".to_string(), |e| e.to_string()));
        };
        check(
            vec![vec![1.0]; 3],
            expect!["expected one vector per tool (10), got 3"],
        );
        let mut bad = vec![vec![1.0, 0.0]; 10];
        bad[4] = vec![f32::NAN, 0.0];
        check(
            bad,
            expect!["invalid tool vectors: vector 4 has a non-finite component"],
        );
        let mut ragged = vec![vec![1.0, 0.0]; 10];
        ragged[9] = vec![1.0];
        check(
            ragged,
            expect!["invalid tool vectors: vector 9 has 1 components, expected 2"],
        );
        check(vec![vec![0.5, 0.5]; 10], expect!["ok"]);
    }

    #[test]
    fn several_queries_are_fused() {
        let catalog = catalog();
        let queries = ["echo".to_string(), "add numbers".to_string()];
        let outcome =
            catalog.search_with(&request(&queries, None, Strategy::Bm25, &Filter::default()));
        assert_eq!(outcome.degraded, None);
        // Each query's best tool ranks first in one list; ties break by qualified name.
        assert_eq!(names(&outcome), "everything__add everything__echo");
        let none: [String; 0] = [];
        assert!(
            catalog
                .search_with(&request(&none, None, Strategy::Bm25, &Filter::default()))
                .hits
                .is_empty()
        );
    }

    #[test]
    fn search_with_bm25_is_search() {
        let catalog = vector_catalog();
        for query in ["file", "read file", "pull requests", "echo add", "zzz"] {
            let queries = [query.to_string()];
            let outcome =
                catalog.search_with(&request(&queries, None, Strategy::Bm25, &Filter::default()));
            assert_eq!(
                outcome.hits,
                catalog.search(query, 5, &Filter::default()),
                "{query}"
            );
        }
    }

    #[test]
    fn embedding_texts_describe_each_tool() {
        let catalog = catalog();
        let texts = catalog.embedding_texts();
        assert_eq!(texts.len(), catalog.len());
        expect![[r#"
            long Running Operation
            Server: Reference server that exercises every MCP feature
            Demonstrates a long running operation with progress updates
            Parameters: config; duration (seconds to wait); steps."#]]
        .assert_eq(&texts[2]);
        let with_server = catalog.embedding_texts_with(&EmbeddingText {
            server_name: true,
            server_description: true,
        });
        expect![[r#"
            search repositories
            Server: github. Issues and pull requests
            Search GitHub repositories.
            Parameters: text."#]]
        .assert_eq(&with_server[7]);
        let name_only = catalog.embedding_texts_with(&EmbeddingText {
            server_name: true,
            server_description: false,
        });
        expect![[r#"
            read file
            Server: fs.
            Read a file from disk.
            Parameters: text."#]]
        .assert_eq(&name_only[3]);
    }

    #[test]
    fn strategy_parses_and_prints() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.as_str().parse::<Strategy>(), Ok(strategy));
        }
        assert_eq!("HYBRID".parse::<Strategy>(), Ok(Strategy::Hybrid));
        expect!["unknown search strategy `fuzzy`; expected bm25, vector or hybrid"].assert_eq(
            &"fuzzy"
                .parse::<Strategy>()
                .expect_err("unknown")
                .to_string(),
        );
    }

    #[test]
    fn default_index_stems_english_and_drops_stop_words() {
        let plain = IndexOptions {
            analyzer: retrieval::Analyzer::default(),
            ..IndexOptions::default()
        };
        let (plain, _) = Catalog::build_with(&fixture(), &plain);
        let english = catalog();
        // "echoing" only matches `echo` through its stem.
        assert!(plain.search("echoing", 5, &Filter::default()).is_empty());
        let hits = english.search("echoing", 5, &Filter::default());
        assert_eq!(
            hits.first().map(|hit| hit.tool.qualified.as_str()),
            Some("everything__echo")
        );
        // "the" matches `echo`'s description ("Echoes back the input message") only when
        // stop words are kept.
        assert!(!plain.search("the", 5, &Filter::default()).is_empty());
        assert!(english.search("the", 5, &Filter::default()).is_empty());
        assert_eq!(english.search_documents().len(), english.len());
    }

    #[test]
    fn tool_json_is_shared_with_the_caller_and_between_clones_not_copied() {
        let servers = fixture();
        let (catalog, _) = Catalog::build(&servers);
        let echo = catalog.get("everything__echo").expect("echo");
        assert!(Arc::ptr_eq(&echo.raw, &servers[0].tools[0]));
        let with_vectors = catalog
            .clone()
            .with_vectors("test/topics".into(), tool_vectors(&catalog))
            .expect("vectors");
        assert!(std::ptr::eq(
            catalog.tools().as_ptr(),
            with_vectors.tools().as_ptr()
        ));
    }

    #[test]
    fn suggest_finds_echo() {
        let mut servers = fixture();
        servers.push(ServerTools {
            server: "other".into(),
            description: None,
            tools: shared(vec![tool("echoes", "Something else.", json!(null))]),
        });
        let (catalog, _) = Catalog::build(&servers);
        let check = |unknown: &str, expect: Expect| {
            expect.assert_eq(&format!("{:?}", catalog.suggest(unknown, 3)));
        };
        check(
            "echo",
            expect![[r#"["everything__echo", "other__echoes"]"#]],
        );
        check("everything__ecko", expect![[r#"["everything__echo"]"#]]);
        check("everythng__echo", expect![[r#"["everything__echo"]"#]]);
        check(
            "read_file",
            expect![[r#"["fs__read_file", "github__read_file"]"#]],
        );
        check("nothing_like_it", expect!["[]"]);
    }

    #[test]
    fn token_costs_are_positive_stable_and_summed() {
        let a = catalog();
        let b = catalog();
        for (x, y) in a.tools().iter().zip(b.tools()) {
            assert!(x.token_cost > 0, "{}", x.qualified);
            assert_eq!(x.token_cost, y.token_cost);
        }
        let sum: usize = a.tools().iter().map(|t| t.token_cost).sum();
        assert_eq!(a.total_token_cost(), sum);
        let echo = a.get("everything__echo").map(|t| t.token_cost);
        expect!["Some(39)"].assert_eq(&format!("{echo:?}"));
    }

    #[test]
    fn when_needed_shows_unshared_names_bare_and_still_answers_their_prefixed_names() {
        let rules = naming::Rules {
            prefix: naming::Prefix::WhenNeeded,
            reserved: &["add"],
        };
        let (catalog, problems) = Catalog::build_named(&fixture(), &IndexOptions::default(), rules);
        assert!(problems.is_empty(), "{problems:?}");
        let shown: Vec<String> = catalog
            .tools()
            .iter()
            .map(|t| format!("{} {}", t.qualified, t.prefixed))
            .collect();
        expect![[r#"
            echo everything__echo
            everything__add everything__add
            longRunningOperation everything__longRunningOperation
            fs__read_file fs__read_file
            write_file fs__write_file
            move_file fs__move_file
            delete_file fs__delete_file
            search_repositories github__search_repositories
            create_issue github__create_issue
            github__read_file github__read_file"#]]
        .assert_eq(&shown.join("\n"));
        let by_alias = catalog
            .get("everything__echo")
            .map(|t| t.qualified.as_str());
        assert_eq!(by_alias, Some("echo"));
        assert!(catalog.get("read_file").is_none(), "two servers share it");
        assert!(matches!(
            catalog.validate_arguments("fs__write_file", Some(&Map::new())),
            Ok(Validation::Valid)
        ));
    }

    #[test]
    fn names_are_stable_across_rebuilds_and_new_servers() {
        std::sync::LazyLock::force(&TOKENIZER);
        let names = |servers: &[ServerTools]| -> Vec<(String, String)> {
            let (catalog, _) = Catalog::build(servers);
            catalog
                .tools()
                .iter()
                .filter(|t| t.server != "github")
                .map(|t| {
                    (
                        format!("{}/{}", t.server, t.upstream_name),
                        t.qualified.to_string(),
                    )
                })
                .collect()
        };
        let all = fixture();
        let two = &all[..2];
        let mut reordered = vec![all[2].clone()];
        reordered.extend_from_slice(two);
        assert_eq!(names(two), names(two));
        assert_eq!(names(two), names(&all));
        assert_eq!(names(two), names(&reordered));
    }
}
