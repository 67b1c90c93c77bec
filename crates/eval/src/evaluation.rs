//! Running one set: build the catalog as the gateway would, embed what vector strategies
//! need (through the cache), search every query with every strategy, and measure.
//!
//! Timing rules: a search is timed around `Catalog::search_with` alone, with its query vector
//! already computed, so BM25, vector and hybrid latencies compare the ranking work; embedding a
//! query is measured separately, one query at a time as a live search would (batches are
//! faster per text and would flatter it).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use catalog::{
    Catalog, EmbeddingText, Filter, IndexOptions, Rerank, SearchRequest, SparseQuery, Strategy,
};
use embed::local::splade::{SparseVector, Splade};
use embed::{Embedder, TextKind};
use retrieval::{Bm25Index, Feedback, Hybrid};

use crate::Error;
use crate::cache::{CacheKey, EmbeddingCache};
use crate::dataset::{Dataset, Query};
use crate::metrics::{DEPTH, Metrics, percentile};
use crate::report::{
    CompleteWithin, EmbeddingReport, Figures, NeedsCovered, Outcome, QueryNeeds, SetReport,
    SparseReport, StrategyReport, Subset,
};

/// How to evaluate.
#[derive(Debug, Clone)]
pub struct Options {
    /// In report order.
    pub strategies: Vec<Strategy>,
    pub hybrid: Hybrid,
    /// Evaluate only the first N queries of each set.
    pub limit: Option<usize>,
    /// The lexical index, as the gateway would build it (or a variant being measured).
    pub index: IndexOptions,
    /// `None`: what the gateway embeds ([`Catalog::embedding_texts`]).
    pub embedding_text: Option<EmbeddingText>,
    /// Texts per embedding call.
    pub batch_size: usize,
    /// Queries embedded one at a time to measure query-embedding latency.
    pub latency_sample: usize,
    /// Split each query into its needs ([`catalog::split_request`]) and merge their rankings.
    pub split_needs: bool,
    /// With `split_needs`: embed the needs too (otherwise only the whole query is embedded
    /// and its needs are ranked by BM25 alone).
    pub needs_vectors: bool,
    /// Read before write ([`SearchRequest::caution`]), on as in the gateway.
    pub caution: bool,
    /// Pseudo-relevance feedback where BM25 answers alone ([`SearchRequest::feedback`]).
    pub feedback: Option<Feedback>,
    /// [`SearchRequest::feedback_in_fusion`].
    pub feedback_in_fusion: bool,
    /// [`SearchRequest::rerank`].
    pub rerank: Rerank,
    /// The learned sparse list (SPLADE) as a further fusion input ([`SearchRequest::sparse`]);
    /// `None` as in the gateway.
    pub splade: Option<SpladeRun>,
    /// Field-aware tool vectors: the head (name, description) and the parameters line are
    /// embedded apart and each tool's vector is `w × head + (1 − w) × parameters` (unit
    /// vectors, the sum scaled to unit length; the head alone for a tool without parameters),
    /// `w` this value. One vector per tool still, so the search costs what it did. `None`: one
    /// text per tool, as in the gateway.
    pub field_vectors: Option<f32>,
    /// How many hits each search returns ([`SearchRequest::top_k`]); the metrics read the
    /// first [`DEPTH`] (10), so more only adds where the relevant tools of multi-need
    /// queries are placed ([`QueryNeeds::ranks`], [`Figures::complete_within`]). At least
    /// [`DEPTH`]. Options that work on the returned places (`rerank.mmr`, `dedup`,
    /// `per_server`) see this many.
    pub depth: usize,
}

/// The sparse encoder and how its list joins the ranking ([`SparseQuery`]).
#[derive(Debug, Clone)]
pub struct SpladeRun {
    pub encoder: Splade,
    pub weight: f32,
    pub cjk: bool,
    pub alone: bool,
    /// Folder of a cache of the set's sparse vectors (`<set>.splade-tiny.json`), so runs that
    /// vary only the weights do not encode again; `None` encodes every time.
    pub cache_dir: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            strategies: Strategy::ALL.to_vec(),
            hybrid: Hybrid::default(),
            limit: None,
            index: IndexOptions::default(),
            embedding_text: None,
            batch_size: 64,
            latency_sample: 32,
            split_needs: false,
            needs_vectors: true,
            caution: true,
            feedback: None,
            feedback_in_fusion: false,
            rerank: Rerank::default(),
            splade: None,
            field_vectors: None,
            depth: DEPTH,
        }
    }
}

/// Where progress goes (a progress bar in the CLI, nowhere in tests).
pub trait Progress {
    /// A new stage of `total` steps.
    fn start(&self, label: &str, total: u64);
    fn advance(&self, steps: u64);
    fn finish(&self);
}

/// Progress that goes nowhere.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Progress for Silent {
    fn start(&self, _: &str, _: u64) {}
    fn advance(&self, _: u64) {}
    fn finish(&self) {}
}

/// What vector strategies need: an embedder and a cache for its vectors, and the model
/// blended with it, if any.
pub struct Semantic<'a> {
    pub embedder: &'a dyn Embedder,
    pub cache: &'a mut dyn EmbeddingCache,
    pub blend: Option<SemanticBlend<'a>>,
}

/// A second model blended into the vectors as the gateway's `embed::Blend` does, with its own
/// cache, so each model's vectors are reused by runs with other blends or none.
pub struct SemanticBlend<'a> {
    pub embedder: &'a dyn Embedder,
    pub cache: &'a mut dyn EmbeddingCache,
    /// The second model's weight, strictly between 0 and 1.
    pub weight: f32,
    /// The two embedders as one, for the per-query latency and the vectors' model id.
    pub both: &'a dyn Embedder,
}

/// Evaluates `set`. `semantic` is the embedder, or why there is none (vector strategies are
/// then reported as skipped with that reason; BM25 runs regardless).
pub async fn evaluate(
    set: &Dataset,
    options: &Options,
    semantic: Result<Semantic<'_>, String>,
    progress: &dyn Progress,
) -> SetReport {
    let started = Instant::now();
    let (catalog, problems) = Catalog::build_with(&set.servers, &options.index);
    let catalog_build = started.elapsed();
    let bm25_build = bm25_build_time(&catalog, &options.index);
    let mut warnings = set.warnings.clone();

    let judged = judge(set, &catalog, options.limit);
    if judged.unknown > 0 {
        warnings.push(format!(
            "{} relevant tools named in qrels.tsv are not in the catalog",
            judged.unknown
        ));
    }

    let texts = query_texts(&judged.queries, options);
    let (catalog, sparse_queries, sparse) = match &options.splade {
        Some(run) => match encode_sparse(&catalog, &set.name, &texts, options, run, progress).await
        {
            Ok((with_sparse, vectors, report)) => (with_sparse, Some(vectors), Some(report)),
            Err(error) => {
                warnings.push(format!("no sparse list: {error}"));
                (catalog, None, None)
            }
        },
        None => (catalog, None, None),
    };
    let needs_vectors = options.strategies.iter().any(|s| s.needs_vectors());
    let mut embedding = None;
    let vectors: Result<(Catalog, Vec<QueryVectors>), String> = match semantic {
        _ if !needs_vectors => Err("no vector strategy asked".to_string()),
        Err(reason) => Err(reason),
        Ok(semantic) => {
            match embed_set(&catalog, &texts, options, semantic, progress, &mut warnings).await {
                Ok((catalog, query_vectors, report)) => {
                    embedding = Some(report);
                    Ok((catalog, query_vectors))
                }
                Err(error) => Err(error.to_string()),
            }
        }
    };

    let mut strategies = Vec::new();
    for &strategy in &options.strategies {
        let outcome = match (strategy.needs_vectors(), &vectors) {
            (false, _) => Outcome::Ok(run(
                set,
                &catalog,
                Queries {
                    judged: &judged.queries,
                    texts: &texts,
                    vectors: None,
                    sparse: sparse_queries.as_deref(),
                },
                strategy,
                options,
                progress,
            )),
            (true, Ok((catalog, query_vectors))) => Outcome::Ok(run(
                set,
                catalog,
                Queries {
                    judged: &judged.queries,
                    texts: &texts,
                    vectors: Some(query_vectors),
                    sparse: sparse_queries.as_deref(),
                },
                strategy,
                options,
                progress,
            )),
            (true, Err(reason)) => Outcome::Skipped {
                reason: reason.clone(),
            },
        };
        strategies.push(StrategyReport { strategy, outcome });
    }
    progress.finish();

    SetReport {
        set: set.name.clone(),
        path: set.path.display().to_string(),
        servers: catalog.servers().len(),
        tools: catalog.len(),
        problems: problems.iter().map(ToString::to_string).collect(),
        warnings,
        queries: judged.queries.len(),
        queries_without_relevant: judged.without_relevant,
        unknown_relevant_tools: judged.unknown,
        catalog_build_ms: millis(catalog_build),
        bm25_build_ms: millis(bm25_build),
        embedding,
        sparse,
        strategies,
    }
}

/// The tools' sparse vectors attached to `catalog` (from the same texts as the embeddings),
/// each query's, and the cost: encoding the tools, the index, one query at a time.
async fn encode_sparse(
    catalog: &Catalog,
    set: &str,
    queries: &[Vec<String>],
    options: &Options,
    run: &SpladeRun,
    progress: &dyn Progress,
) -> Result<(Catalog, Vec<Vec<SparseVector>>, SparseReport), Error> {
    let encoder = &run.encoder;
    let path = run
        .cache_dir
        .as_ref()
        .map(|dir| dir.join(format!("{set}.splade-tiny.json")));
    let mut cache: HashMap<String, SparseVector> = path
        .as_ref()
        .and_then(|path| std::fs::read(path).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut fresh = 0;
    let mut encode =
        async |texts: &[String], label: &str| -> Result<(Vec<SparseVector>, f64), Error> {
            let missing: Vec<String> = texts
                .iter()
                .filter(|text| !cache.contains_key(*text))
                .cloned()
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            progress.start(label, missing.len() as u64);
            let started = Instant::now();
            let vectors = encoder.encode(&missing).await?;
            let elapsed = millis(started.elapsed());
            progress.advance(missing.len() as u64);
            fresh += missing.len();
            cache.extend(missing.into_iter().zip(vectors));
            let out = texts
                .iter()
                .map(|text| cache.get(text).cloned().unwrap_or_default())
                .collect();
            Ok((out, elapsed))
        };
    let texts = match &options.embedding_text {
        Some(text) => catalog.embedding_texts_with(text),
        None => catalog.embedding_texts(),
    };
    let (tools, tools_ms) = encode(&texts, "sparse encoding tools").await?;
    let terms: usize = tools.iter().map(Vec::len).sum();
    let started = Instant::now();
    let with_sparse = catalog
        .clone()
        .with_sparse(encoder.id().to_string(), tools)
        .map_err(Error::Vectors)?;
    let index_ms = millis(started.elapsed());

    let flat: Vec<String> = queries.iter().flatten().cloned().collect();
    let (encoded, queries_ms) = encode(&flat, "sparse encoding queries").await?;
    let mut encoded = encoded.into_iter();
    if let Some(path) = path.filter(|_| fresh > 0)
        && let Ok(json) = serde_json::to_vec(&cache)
    {
        let _ = std::fs::write(path, json);
    }
    let grouped: Vec<Vec<SparseVector>> = queries
        .iter()
        .map(|texts| encoded.by_ref().take(texts.len()).collect())
        .collect();
    let query_terms: usize = grouped.iter().flatten().map(Vec::len).sum();

    let mut single = Vec::new();
    for text in queries
        .iter()
        .filter_map(|texts| texts.first())
        .take(options.latency_sample)
    {
        let started = Instant::now();
        encoder.encode(std::slice::from_ref(text)).await?;
        single.push(millis(started.elapsed()));
    }
    let report = SparseReport {
        model: encoder.id().to_string(),
        tools: texts.len(),
        tools_encode_ms: tools_ms,
        mean_tool_terms: round3(terms as f64 / texts.len().max(1) as f64),
        index_build_ms: index_ms,
        queries: flat.len(),
        queries_encode_ms: queries_ms,
        mean_query_terms: round3(query_terms as f64 / flat.len().max(1) as f64),
        query_encode_p50_ms: percentile(&single, 0.5).map(round3),
        query_encode_sample: single.len(),
        encoded: fresh,
    };
    Ok((with_sparse, grouped, report))
}

/// One query's vectors: its text's, then its needs' when they are embedded.
type QueryVectors = Vec<Vec<f32>>;

/// What each query searches for: its text, then its needs when they are split.
fn query_texts(queries: &[(&Query, HashSet<String>)], options: &Options) -> Vec<Vec<String>> {
    queries
        .iter()
        .map(|(query, _)| match options.split_needs {
            true => catalog::split_request(&query.text),
            false => vec![query.text.clone()],
        })
        .collect()
}

/// The queries of a run: relevant tools, texts searched and their vectors, by query.
struct Queries<'q, 'a> {
    judged: &'q [(&'a Query, HashSet<String>)],
    texts: &'q [Vec<String>],
    vectors: Option<&'q [QueryVectors]>,
    /// Each query's sparse vectors (its text's, then its needs').
    sparse: Option<&'q [Vec<SparseVector>]>,
}

/// The queries to evaluate, each with its relevant tools as qualified names.
struct Judged<'a> {
    queries: Vec<(&'a Query, HashSet<String>)>,
    without_relevant: usize,
    unknown: usize,
}

fn judge<'a>(set: &'a Dataset, catalog: &Catalog, limit: Option<usize>) -> Judged<'a> {
    let qualified: HashMap<(&str, &str), &str> = catalog
        .tools()
        .iter()
        .map(|tool| {
            (
                (tool.server.as_str(), tool.upstream_name.as_str()),
                tool.qualified.as_str(),
            )
        })
        .collect();
    let mut judged = Judged {
        queries: Vec::new(),
        without_relevant: 0,
        unknown: 0,
    };
    for query in set.queries.iter().take(limit.unwrap_or(usize::MAX)) {
        let mut relevant = HashSet::new();
        for tool in set.qrels.get(&query.id).into_iter().flatten() {
            let name = set
                .server_names
                .get(&tool.server)
                .and_then(|server| qualified.get(&(server.as_str(), tool.tool.as_str())));
            match name {
                Some(name) => {
                    relevant.insert(name.to_string());
                }
                None => judged.unknown += 1,
            }
        }
        if relevant.is_empty() {
            judged.without_relevant += 1;
        } else {
            judged.queries.push((query, relevant));
        }
    }
    judged
}

/// Median of five builds of the BM25 index alone, from the catalog's own documents.
fn bm25_build_time(catalog: &Catalog, options: &IndexOptions) -> Duration {
    let documents = catalog.search_documents();
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let started = Instant::now();
            let index = Bm25Index::build_with(&documents, &options.bm25, options.analyzer.clone());
            let elapsed = started.elapsed();
            drop(index);
            elapsed
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Tool vectors attached to a copy of `catalog`, one vector per query, and how it went.
async fn embed_set(
    catalog: &Catalog,
    queries: &[Vec<String>],
    options: &Options,
    semantic: Semantic<'_>,
    progress: &dyn Progress,
    warnings: &mut Vec<String>,
) -> Result<(Catalog, Vec<QueryVectors>, EmbeddingReport), Error> {
    let Semantic {
        embedder,
        cache,
        mut blend,
    } = semantic;
    let fields = options
        .field_vectors
        .map(|_| catalog.embedding_fields(options.embedding_text.as_ref()));
    let texts = match (&fields, &options.embedding_text) {
        (Some(fields), _) => fields.texts.clone(),
        (None, Some(text)) => catalog.embedding_texts_with(text),
        (None, None) => catalog.embedding_texts(),
    };
    let mut tools = embed_cached(
        embedder,
        cache,
        &texts,
        TextKind::Passage,
        options.batch_size,
        progress,
        warnings,
    )
    .await?;
    // As the gateway's `embed::Blend` embedder does: each text blended, then the fields of a
    // tool combined.
    blend_in(
        &mut tools,
        blend.as_mut(),
        &texts,
        TextKind::Passage,
        options.batch_size,
        progress,
        warnings,
    )
    .await?;
    if let (Some(fields), Some(weight)) = (&fields, options.field_vectors) {
        tools.vectors = fields.combine(tools.vectors, weight);
    }
    // The model the vectors are from, as the gateway names it.
    let model = blend.as_ref().map_or(embedder, |blend| blend.both);

    let started = Instant::now();
    let with_vectors = catalog
        .clone()
        .with_vectors(model.id().to_string(), tools.vectors)
        .map_err(Error::Vectors)?;
    let vector_build = started.elapsed();

    // The whole query first, then its needs when they are embedded too.
    let per_query = |texts: &Vec<String>| {
        if options.needs_vectors {
            texts.len()
        } else {
            1
        }
    };
    let query_texts: Vec<String> = queries
        .iter()
        .flat_map(|texts| texts.iter().take(per_query(texts)).cloned())
        .collect();
    let mut embedded = embed_cached(
        embedder,
        cache,
        &query_texts,
        TextKind::Query,
        options.batch_size,
        progress,
        warnings,
    )
    .await?;
    blend_in(
        &mut embedded,
        blend.as_mut(),
        &query_texts,
        TextKind::Query,
        options.batch_size,
        progress,
        warnings,
    )
    .await?;
    let wholes: Vec<String> = queries
        .iter()
        .filter_map(|texts| texts.first().cloned())
        .take(options.latency_sample)
        .collect();
    let single = embedding_latencies(model, &wholes, progress).await?;

    let report = EmbeddingReport {
        model: model.id().to_string(),
        dim: model.dim(),
        tools: tools.distinct,
        tools_cached: tools.cached,
        tools_embed_ms: millis(tools.elapsed),
        queries: embedded.distinct,
        queries_cached: embedded.cached,
        queries_embed_ms: millis(embedded.elapsed),
        query_embed_p50_ms: percentile(&single, 0.5).map(round3),
        query_embed_sample: single.len(),
        vector_build_ms: millis(vector_build),
    };
    let mut vectors = embedded.vectors.into_iter();
    let grouped = queries
        .iter()
        .map(|texts| vectors.by_ref().take(per_query(texts)).collect())
        .collect();
    Ok((with_vectors, grouped, report))
}

/// Blends the blend model's vectors of `texts` (through its own cache) into `embedded`'s, when
/// there is a blend.
async fn blend_in(
    embedded: &mut Embedded,
    blend: Option<&mut SemanticBlend<'_>>,
    texts: &[String],
    kind: TextKind,
    batch_size: usize,
    progress: &dyn Progress,
    warnings: &mut Vec<String>,
) -> Result<(), Error> {
    let Some(blend) = blend else {
        return Ok(());
    };
    let other = embed_cached(
        blend.embedder,
        blend.cache,
        texts,
        kind,
        batch_size,
        progress,
        warnings,
    )
    .await?;
    embedded.vectors = embed::blend_vectors(&embedded.vectors, &other.vectors, blend.weight);
    embedded.add(&other);
    Ok(())
}

/// Milliseconds to embed each of `sample` on its own, uncached: what a live `search_tools`
/// call pays before ranking.
async fn embedding_latencies(
    embedder: &dyn Embedder,
    sample: &[String],
    progress: &dyn Progress,
) -> Result<Vec<f64>, Error> {
    progress.start("query embedding latency", sample.len() as u64);
    let mut single = Vec::with_capacity(sample.len());
    for text in sample {
        let started = Instant::now();
        embedder
            .embed(std::slice::from_ref(text), TextKind::Query)
            .await?;
        single.push(millis(started.elapsed()));
        progress.advance(1);
    }
    Ok(single)
}

/// Vectors of some texts, and how many came from the cache.
struct Embedded {
    /// One per text, in order.
    vectors: Vec<Vec<f32>>,
    /// Distinct texts.
    distinct: usize,
    /// Distinct texts found in the cache.
    cached: usize,
    /// Time spent embedding the others.
    elapsed: Duration,
}

impl Embedded {
    /// Counts in the blend model's pass over the same texts: its time adds up, and a text
    /// counts as cached only as far as both passes found theirs (at most the smaller count).
    fn add(&mut self, other: &Embedded) {
        self.cached = self.cached.min(other.cached);
        self.elapsed += other.elapsed;
    }
}

/// Flush the cache after this many new vectors, so an interrupted run keeps most of its work.
const FLUSH_EVERY: usize = 2048;

/// Embeds `texts` in batches, taking what it can from `cache` and adding the rest. A cache
/// that cannot be written is a warning, not a failure: the run goes on from memory.
async fn embed_cached(
    embedder: &dyn Embedder,
    cache: &mut dyn EmbeddingCache,
    texts: &[String],
    kind: TextKind,
    batch_size: usize,
    progress: &dyn Progress,
    warnings: &mut Vec<String>,
) -> Result<Embedded, Error> {
    let keys: Vec<CacheKey> = texts
        .iter()
        .map(|t| CacheKey::new(embedder.id(), kind, t))
        .collect();
    let mut distinct = HashSet::new();
    let mut missing = Vec::new();
    for (at, key) in keys.iter().enumerate() {
        if distinct.insert(*key) && cache.get(key).is_none() {
            missing.push(at);
        }
    }
    let label = match kind {
        TextKind::Query => "embedding queries",
        TextKind::Passage => "embedding tools",
    };
    progress.start(label, missing.len() as u64);
    let started = Instant::now();
    let mut unflushed = 0;
    for chunk in missing.chunks(batch_size.max(1)) {
        let batch: Vec<String> = chunk.iter().map(|&at| texts[at].clone()).collect();
        let vectors = embedder.embed(&batch, kind).await?;
        if vectors.len() != batch.len() {
            return Err(Error::Embed(embed::EmbedError::Model(format!(
                "{} vectors for {} texts",
                vectors.len(),
                batch.len()
            ))));
        }
        for (&at, vector) in chunk.iter().zip(vectors) {
            cache.put(keys[at], vector);
        }
        progress.advance(chunk.len() as u64);
        unflushed += chunk.len();
        if unflushed >= FLUSH_EVERY {
            flush(cache, warnings);
            unflushed = 0;
        }
    }
    let elapsed = started.elapsed();
    flush(cache, warnings);
    let vectors = keys
        .iter()
        .map(|key| cache.get(key).map(<[f32]>::to_vec))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            Error::Embed(embed::EmbedError::Model(
                "a vector went missing from the cache".into(),
            ))
        })?;
    Ok(Embedded {
        vectors,
        distinct: distinct.len(),
        cached: distinct.len() - missing.len(),
        elapsed,
    })
}

/// Searches every query with `strategy` and scores the rankings.
fn run(
    set: &Dataset,
    catalog: &Catalog,
    queries: Queries<'_, '_>,
    strategy: Strategy,
    options: &Options,
    progress: &dyn Progress,
) -> Figures {
    let judged = queries.judged;
    progress.start(&format!("{} {strategy}", set.name), judged.len() as u64);
    let filter = Filter::default();
    let mut metrics = Vec::with_capacity(judged.len());
    let mut covered = Vec::with_capacity(judged.len());
    let mut placed = Vec::with_capacity(judged.len());
    let mut latencies = Vec::with_capacity(judged.len());
    let mut degraded = 0;
    for (at, (_, relevant)) in judged.iter().enumerate() {
        let texts = &queries.texts[at];
        let request = SearchRequest {
            queries: texts,
            query_vectors: queries
                .vectors
                .and_then(|all| all.get(at))
                .map(Vec::as_slice),
            strategy,
            hybrid: options.hybrid.clone(),
            feedback: options.feedback,
            feedback_in_fusion: options.feedback_in_fusion,
            multilingual_vectors: catalog.vector_model().is_some_and(embed::handles_cjk),
            top_k: options.depth.max(DEPTH),
            filter: &filter,
            needs: texts.len() > 1,
            caution: options.caution,
            rerank: options.rerank,
            sparse: match (&options.splade, queries.sparse.and_then(|all| all.get(at))) {
                (Some(run), Some(vectors)) => Some(SparseQuery {
                    vectors,
                    weight: run.weight,
                    cjk: run.cjk,
                    alone: run.alone,
                }),
                _ => None,
            },
        };
        let started = Instant::now();
        let outcome = catalog.search_with(&request);
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
        degraded += usize::from(outcome.degraded.is_some());
        let ranking: Vec<&str> = outcome
            .hits
            .iter()
            .map(|hit| hit.tool.qualified.as_str())
            .collect();
        metrics.push(Metrics::of(&ranking, relevant));
        let ranks = ranks_of(&ranking, relevant);
        covered.push(ranks.iter().filter(|r| r.is_some_and(|r| r <= 5)).count());
        placed.push(ranks);
        if at % 256 == 255 {
            progress.advance(256);
        }
    }
    progress.advance((judged.len() % 256) as u64);

    let breakdown = Breakdown::of(judged, &metrics, &covered, &placed, options.depth);
    Figures {
        metrics: Metrics::mean(&metrics).percent(),
        search_p50_us: percentile(&latencies, 0.5).map_or(0.0, round1),
        search_p99_us: percentile(&latencies, 0.99).map_or(0.0, round1),
        degraded,
        by_relevant_count: breakdown.by_relevant_count,
        comp_at_5_3plus: breakdown.comp_at_5_3plus,
        needs_at_5: breakdown.needs_at_5,
        complete_within: breakdown.complete_within,
        multi_need_queries: breakdown.multi_need_queries,
    }
}

/// The figures of a run split by the number of relevant tools per query.
struct Breakdown {
    by_relevant_count: Vec<Subset>,
    comp_at_5_3plus: Option<f64>,
    needs_at_5: Vec<NeedsCovered>,
    complete_within: Vec<CompleteWithin>,
    multi_need_queries: Vec<QueryNeeds>,
}

impl Breakdown {
    /// `metrics[i]`, `covered[i]` (relevant tools in the top 5) and `placed[i]` (the relevant
    /// tools' places, within `depth`) belong to `queries[i]`.
    fn of(
        queries: &[(&Query, HashSet<String>)],
        metrics: &[Metrics],
        covered: &[usize],
        placed: &[Vec<Option<usize>>],
        depth: usize,
    ) -> Self {
        let mut by_relevant_count = Vec::new();
        let mut comp_at_5_3plus = None;
        for (label, range) in [("1", 1..=1), ("2", 2..=2), ("3+", 3..=usize::MAX)] {
            let subset: Vec<Metrics> = queries
                .iter()
                .zip(metrics)
                .filter(|((_, relevant), _)| range.contains(&relevant.len()))
                .map(|(_, m)| *m)
                .collect();
            if subset.is_empty() {
                continue;
            }
            let mean = Metrics::mean(&subset).percent();
            if label == "3+" {
                comp_at_5_3plus = Some(mean.comp_at_5);
            }
            by_relevant_count.push(Subset {
                relevant: label.to_string(),
                queries: subset.len(),
                metrics: mean,
            });
        }
        let mut needs: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        let mut multi_need_queries = Vec::new();
        for (((query, relevant), &found), ranks) in queries.iter().zip(covered).zip(placed) {
            if relevant.len() < 2 {
                continue;
            }
            let row = needs
                .entry(relevant.len())
                .or_insert_with(|| vec![0; relevant.len() + 1]);
            row[found.min(relevant.len())] += 1;
            multi_need_queries.push(QueryNeeds {
                id: query.id.clone(),
                relevant: relevant.len(),
                covered_at_5: found,
                ranks: (depth > DEPTH).then(|| ranks.clone()),
            });
        }
        // Comp@k over the 3+ queries for every k the ranking reached: how much a better
        // order of what was found could give, against what needs better recall.
        let three_plus: Vec<&Vec<Option<usize>>> = queries
            .iter()
            .zip(placed)
            .filter(|((_, relevant), _)| relevant.len() >= 3)
            .map(|(_, ranks)| ranks)
            .collect();
        let complete_within = if three_plus.is_empty() || depth <= DEPTH {
            Vec::new()
        } else {
            [5, 10, 20, 50, 100, 200]
                .into_iter()
                .filter(|&k| k <= depth)
                .map(|k| {
                    let complete = three_plus
                        .iter()
                        .filter(|ranks| ranks.iter().all(|r| r.is_some_and(|r| r <= k)))
                        .count();
                    CompleteWithin {
                        k,
                        queries: complete,
                        percent: round1(complete as f64 * 100.0 / three_plus.len() as f64),
                    }
                })
                .collect()
        };
        let needs_at_5 = needs
            .into_iter()
            .map(|(relevant, covered)| {
                let queries: usize = covered.iter().sum();
                let found: usize = covered.iter().enumerate().map(|(n, q)| n * q).sum();
                let share = found as f64 / (queries * relevant).max(1) as f64;
                NeedsCovered {
                    relevant,
                    queries,
                    covered,
                    mean_covered: round1(share * 100.0),
                }
            })
            .collect();
        Breakdown {
            by_relevant_count,
            comp_at_5_3plus,
            needs_at_5,
            complete_within,
            multi_need_queries,
        }
    }
}

/// Saves the cache; a failure becomes one warning.
fn flush(cache: &mut dyn EmbeddingCache, warnings: &mut Vec<String>) {
    if let Err(error) = cache.flush() {
        let warning = format!("embedding cache not saved: {error}");
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
}

/// The 1-based place of each relevant tool in `ranking` (repeats skipped), ascending, and
/// `None` for each one `ranking` does not hold.
fn ranks_of(ranking: &[&str], relevant: &HashSet<String>) -> Vec<Option<usize>> {
    let mut seen = HashSet::new();
    let mut ranks: Vec<Option<usize>> = ranking
        .iter()
        .filter(|tool| seen.insert(**tool))
        .enumerate()
        .filter(|(_, tool)| relevant.contains(**tool))
        .map(|(at, _)| Some(at + 1))
        .collect();
    ranks.resize(relevant.len(), None);
    ranks
}

fn millis(duration: Duration) -> f64 {
    round3(duration.as_secs_f64() * 1e3)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
