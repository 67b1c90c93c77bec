//! Search as the gateway runs it, on synthetic catalogs of 1k, 10k and 100k tools: catalog and
//! BM25 index build, BM25 search, and hybrid search including the query's embedding by a
//! local model (`cargo bench -p mcpgw-eval --bench search`).
//!
//! Everything goes through `catalog::Catalog` with the gateway's defaults (`IndexOptions`, the
//! configured balance), the way `Gateway::search` calls it: embed the query, then `search_with`, top 10.
//! Tools are MCP `Tool` objects built by a fixed-seed generator, 25 to a server.
//!
//! Tool vectors are pseudo-random unit vectors of the model's dimension: ranking cost does not
//! depend on their values, and embedding 100k tool texts with MiniLM would take minutes per
//! run. Query vectors are real: the embedding is what the figure is about. Models whose files
//! are missing are skipped with a message (run `scripts/fetch-models.sh`); CI only compiles
//! this (`cargo bench --no-run`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use catalog::{Catalog, Filter, IndexOptions, SearchRequest, ServerTools, Strategy};
use divan::{Bencher, black_box};
use embed::local::{self, LocalModel};
use embed::{Embedder, TextKind};
use retrieval::{Adaptive, Bm25Index, Feedback, Hybrid};
use serde_json::{Value, json};

#[allow(unsafe_code)]
fn main() {
    // As mcpgw's binary does (see `embed::local`), so the figures are the gateway's.
    for (name, value) in local::candle_env_defaults() {
        if std::env::var_os(name).is_none() {
            // SAFETY: first statement of `main`, before divan or anything else spawns a thread.
            unsafe { std::env::set_var(name, value) };
        }
    }
    divan::main();
}

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// Queries as models write them for `search_tools`; each iteration takes the next one.
const QUERIES: [&str; 6] = [
    "weather forecast for a city",
    "list files in a directory",
    "get the current time in a timezone",
    "create a github issue with labels",
    "send a message to a slack channel",
    "find recent news about electric cars",
];

/// The embedders the hybrid figures are for: the default (MiniLM blended with potion-base-8M),
/// MiniLM alone, and the static tier alone.
#[derive(Clone, Copy, Debug)]
enum Model {
    Blend,
    Alone(LocalModel),
}

const MODELS: [Model; 3] = [
    Model::Blend,
    Model::Alone(LocalModel::MiniLmL6V2),
    Model::Alone(LocalModel::PotionBase8M),
];

impl std::fmt::Display for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Model::Blend => write!(f, "MiniLM+potion (default)"),
            Model::Alone(model) => write!(f, "{model}"),
        }
    }
}

impl Model {
    fn parts(self) -> Vec<LocalModel> {
        match self {
            Model::Blend => vec![LocalModel::MiniLmL6V2, LocalModel::PotionBase8M],
            Model::Alone(model) => vec![model],
        }
    }

    /// The embedder as the gateway loads it with the default configuration.
    fn load(self) -> Arc<dyn Embedder> {
        let load = |model| local::load(model, None).expect("model listed as installed loads");
        match self {
            Model::Blend => {
                let blend = embed::Blend::new(
                    load(LocalModel::MiniLmL6V2),
                    load(LocalModel::PotionBase8M),
                    config::DEFAULT_BLEND_WEIGHT,
                )
                .expect("the default weight");
                Arc::new(blend)
            }
            Model::Alone(model) => load(model),
        }
    }

    fn slot(self) -> usize {
        match self {
            Model::Blend => 0,
            Model::Alone(LocalModel::PotionBase8M) => 2,
            Model::Alone(_) => 1,
        }
    }
}

#[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
fn build_catalog(bencher: Bencher, size: usize) {
    let servers = servers(size);
    bencher.bench(|| Catalog::build(black_box(&servers)));
}

/// The BM25 index alone, from the catalog's documents, with the gateway's settings.
#[divan::bench(args = SIZES, sample_count = 5, sample_size = 1)]
fn build_bm25(bencher: Bencher, size: usize) {
    let documents = catalog(size).search_documents();
    let options = IndexOptions::default();
    bencher.bench(|| {
        Bm25Index::build_with(
            black_box(&documents),
            &options.bm25,
            options.analyzer.clone(),
        )
    });
}

/// BM25 as the gateway runs it: with pseudo-relevance feedback (`retrieval::Feedback`).
#[divan::bench(args = SIZES)]
fn search_bm25(bencher: Bencher, size: usize) {
    let catalog = catalog(size);
    let next = AtomicUsize::new(0);
    bencher.bench(|| {
        let queries = [next_query(&next).to_string()];
        search(catalog, &queries, None, Strategy::Bm25)
    });
}

/// BM25 without feedback: what the feedback costs, against `search_bm25`.
#[divan::bench(args = SIZES)]
fn search_bm25_without_feedback(bencher: Bencher, size: usize) {
    let catalog = catalog(size);
    let next = AtomicUsize::new(0);
    let filter = Filter::default();
    bencher.bench(|| {
        let queries = [next_query(&next).to_string()];
        let outcome = catalog.search_with(&SearchRequest {
            feedback: None,
            ..request(&queries, None, Strategy::Bm25, &filter)
        });
        outcome.hits.len()
    });
}

/// Embedding the query and the hybrid search, as one `search_tools` call pays for them.
#[divan::bench(consts = SIZES, args = installed())]
fn search_hybrid_with_embedding<const SIZE: usize>(bencher: Bencher, model: Model) {
    let (embedder, catalog) = with_vectors(model, SIZE);
    let next = AtomicUsize::new(0);
    embed_query(&*embedder, QUERIES[0]); // warm-up: the first call allocates
    bencher.bench(|| {
        let query = next_query(&next);
        let vectors = [embed_query(&*embedder, query)];
        let queries = [query.to_string()];
        search(catalog, &queries, Some(&vectors), Strategy::Hybrid)
    });
}

/// The ranking part alone, query already embedded: what fusion and the vector scan cost.
#[divan::bench(consts = SIZES, args = installed())]
fn search_hybrid_embedded<const SIZE: usize>(bencher: Bencher, model: Model) {
    search_embedded(bencher, model, SIZE, false);
}

/// The same with rank fusion (RRF at its balance, 45): what score fusion costs against it.
#[divan::bench(consts = SIZES, args = installed())]
fn search_hybrid_embedded_by_ranks<const SIZE: usize>(bencher: Bencher, model: Model) {
    search_embedded(bencher, model, SIZE, true);
}

/// Hybrid search of queries embedded beforehand, with the defaults or with rank fusion.
fn search_embedded(bencher: Bencher, model: Model, size: usize, by_ranks: bool) {
    let (embedder, catalog) = with_vectors(model, size);
    let embedded: Vec<(String, Vec<f32>)> = QUERIES
        .iter()
        .map(|query| (query.to_string(), embed_query(&*embedder, query)))
        .collect();
    let next = AtomicUsize::new(0);
    let filter = Filter::default();
    bencher.bench(|| {
        let (query, vector) = &embedded[next.fetch_add(1, Ordering::Relaxed) % embedded.len()];
        let queries = std::slice::from_ref(query);
        let vectors = std::slice::from_ref(vector);
        let mut request = request(queries, Some(vectors), Strategy::Hybrid, &filter);
        if by_ranks {
            request.hybrid.balance = 45;
            request.hybrid.fusion = retrieval::Fusion::default();
        }
        let outcome = catalog.search_with(&request);
        assert!(outcome.degraded.is_none(), "{:?}", outcome.degraded);
        outcome.hits.len()
    });
}

fn search(
    catalog: &Catalog,
    queries: &[String],
    vectors: Option<&[Vec<f32>]>,
    strategy: Strategy,
) -> usize {
    let filter = Filter::default();
    let outcome = catalog.search_with(&request(queries, vectors, strategy, &filter));
    assert!(outcome.degraded.is_none(), "{:?}", outcome.degraded);
    outcome.hits.len()
}

/// A search with the gateway's defaults.
fn request<'a>(
    queries: &'a [String],
    vectors: Option<&'a [Vec<f32>]>,
    strategy: Strategy,
    filter: &'a Filter,
) -> SearchRequest<'a> {
    let defaults = config::RetrievalConfig::default();
    SearchRequest {
        queries,
        query_vectors: vectors,
        strategy,
        hybrid: Hybrid {
            balance: defaults.balance,
            min_similarity: defaults.min_similarity,
            adaptive: defaults.adaptive.then(Adaptive::default),
            fusion: match defaults.fusion {
                config::Fusion::Scores => retrieval::Fusion::Scores,
                config::Fusion::Ranks => retrieval::Fusion::default(),
            },
        },
        feedback: defaults.feedback.then(Feedback::default),
        feedback_in_fusion: false,
        multilingual_vectors: false,
        top_k: 10,
        filter,
        needs: false,
        caution: true,
        rerank: catalog::Rerank {
            vector_feedback: defaults.vector_feedback.then_some(catalog::VECTOR_FEEDBACK),
            ..Default::default()
        },
        sparse: None,
    }
}

fn next_query(next: &AtomicUsize) -> &'static str {
    QUERIES[next.fetch_add(1, Ordering::Relaxed) % QUERIES.len()]
}

fn embed_query(embedder: &dyn Embedder, query: &str) -> Vec<f32> {
    runtime()
        .block_on(embedder.embed(&[query.to_string()], TextKind::Query))
        .expect("embed")
        .pop()
        .expect("one vector")
}

/// The default-strategy catalog, built once per size.
fn catalog(size: usize) -> &'static Catalog {
    static CATALOGS: [OnceLock<Catalog>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    CATALOGS[slot(size)].get_or_init(|| Catalog::build(&servers(size)).0)
}

/// The model and a catalog of `size` tools with vectors of its dimension, built once.
fn with_vectors(model: Model, size: usize) -> (Arc<dyn Embedder>, &'static Catalog) {
    type Slot = OnceLock<(Arc<dyn Embedder>, Catalog)>;
    static SLOTS: [[Slot; 3]; 3] = [
        [OnceLock::new(), OnceLock::new(), OnceLock::new()],
        [OnceLock::new(), OnceLock::new(), OnceLock::new()],
        [OnceLock::new(), OnceLock::new(), OnceLock::new()],
    ];
    let (embedder, catalog) = SLOTS[model.slot()][slot(size)].get_or_init(|| {
        let embedder = model.load();
        let vectors = random_unit_vectors(size, embedder.dim());
        let catalog = catalog(size)
            .clone()
            .with_vectors(embedder.id().to_string(), vectors)
            .expect("one vector per tool");
        (embedder, catalog)
    });
    (embedder.clone(), catalog)
}

fn slot(size: usize) -> usize {
    SIZES.iter().position(|&s| s == size).unwrap_or(0)
}

fn installed() -> Vec<Model> {
    MODELS
        .into_iter()
        .filter(|model| {
            model
                .parts()
                .into_iter()
                .all(|part| match local::model_status(part) {
                    Ok(_) => true,
                    Err(error) => {
                        eprintln!("skipping {model}: {error} (run scripts/fetch-models.sh)");
                        false
                    }
                })
        })
        .collect()
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

const SERVERS: &[&str] = &[
    "github",
    "slack",
    "filesystem",
    "postgres",
    "weather",
    "time",
    "jira",
    "notion",
    "browser",
    "kubernetes",
    "stripe",
    "calendar",
    "gmail",
    "sentry",
    "docker",
    "news",
];
const VERBS: &[&str] = &[
    "get", "list", "create", "update", "delete", "search", "read", "write", "send", "fetch", "run",
    "query", "find", "add", "remove", "upload", "download", "sync", "describe", "cancel",
];
const NOUNS: &[&str] = &[
    "file",
    "issue",
    "pull request",
    "message",
    "channel",
    "table row",
    "forecast",
    "time zone",
    "page",
    "database",
    "bucket",
    "pod",
    "invoice",
    "event",
    "email",
    "ticket",
    "comment",
    "user",
    "repository",
    "branch",
    "article",
    "deployment",
    "container",
    "document",
    "folder",
    "task",
];
const PHRASES: &[&str] = &[
    "for the given identifier",
    "with optional filters",
    "and return the results as JSON",
    "from the last week",
    "sorted by date",
    "in a city or region",
    "by name or label",
    "with pagination",
    "for the current user",
    "including its metadata",
];
const PARAMS: &[(&str, &str)] = &[
    ("path", "Path of the file or folder"),
    ("query", "Words to search for"),
    ("limit", "Maximum number of results"),
    ("owner", "Account that owns the repository"),
    ("title", "Short title"),
    ("body", "Text of the message or issue"),
    ("labels", "Labels to attach"),
    ("city", "City name, e.g. Paris"),
    ("timezone", "IANA time zone, e.g. Europe/Paris"),
    ("channel_id", "Channel to post in"),
    ("start_date", "First day, ISO 8601"),
    ("format", "Output format: json or text"),
];

/// `size` tools, 25 to a server, as upstream `tools/list` answers would carry them.
fn servers(size: usize) -> Vec<ServerTools> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let tools: Vec<Arc<Value>> = (0..size)
        .map(|at| {
            let (verb, noun) = (rng.pick(VERBS), rng.pick(NOUNS));
            let mut properties = serde_json::Map::new();
            for _ in 0..1 + rng.below(4) {
                let (name, description) = PARAMS[rng.below(PARAMS.len())];
                properties.insert(
                    name.to_string(),
                    json!({"type": "string", "description": description}),
                );
            }
            Arc::new(json!({
                "name": format!("{verb}_{}_{at}", noun.replace(' ', "_")),
                "description": format!(
                    "{} a {noun} {}. {}.",
                    capitalise(verb),
                    rng.pick(PHRASES),
                    capitalise(rng.pick(PHRASES))
                ),
                "inputSchema": {"type": "object", "properties": properties},
            }))
        })
        .collect();
    tools
        .chunks(25)
        .enumerate()
        .map(|(at, chunk)| {
            let kind = SERVERS[at % SERVERS.len()];
            ServerTools {
                server: format!("{kind}-{at}").into(),
                description: Some(format!("{kind} MCP server")),
                tools: chunk.to_vec(),
            }
        })
        .collect()
}

fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn random_unit_vectors(count: usize, dim: usize) -> Vec<Vec<f32>> {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    (0..count)
        .map(|_| {
            let v: Vec<f32> = (0..dim)
                .map(|_| rng.below(20_001) as f32 / 10_000.0 - 1.0)
                .collect();
            let norm = v
                .iter()
                .map(|x| x * x)
                .sum::<f32>()
                .sqrt()
                .max(f32::EPSILON);
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

/// A fixed-seed xorshift generator: identical catalogs on every run, no `rand` dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}
