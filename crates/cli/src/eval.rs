//! `mcpgw eval`: parses the evaluation options, loads the local embedding model, runs
//! `eval::evaluate` on each set and prints a table per set (or one JSON document).

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use indicatif::ProgressBar;

use catalog::{EmbeddingText, IndexOptions, Rerank, ServerPrior, Strategy};
use embed::Embedder;
use embed::local::{LoadOptions, LocalModel};
// `::eval` is the crate; this module shares its name.
use ::eval::{
    CompleteWithin, Dataset, EmbeddingCache, FileCache, MemoryCache, Outcome, Report, Semantic,
    SemanticBlend, SetReport, Settings, StrategyReport,
};
use retrieval::{Adaptive, Feedback, Field, GroupPrior, GroupScore, Hybrid, Language};

use crate::{Failure, render};

#[derive(clap::Args)]
#[command(after_long_help = SET_FORMAT_HELP)]
pub(crate) struct Args {
    /// Set folders, each with tools.json, queries.jsonl and qrels.tsv (see below), e.g.
    /// eval/metatool in the repository.
    #[arg(required = true, value_name = "SET_DIR")]
    sets: Vec<PathBuf>,
    /// bm25, vector, hybrid, or all.
    #[arg(long, default_value = "all")]
    strategy: String,
    /// Local embedding model for vector and hybrid: all-MiniLM-L6-v2 (minilm), potion-base-8M
    /// (potion) or multilingual-e5-small-q4 (e5).
    #[arg(long, default_value = "all-MiniLM-L6-v2")]
    model: String,
    /// Folder holding the model's files (default: the standard model folders).
    #[arg(long)]
    model_dir: Option<PathBuf>,
    /// Threads for the embedding model (default: as the gateway, the available parallelism).
    #[arg(long)]
    threads: Option<usize>,
    /// Texts per embedding call (the model splits them into its own batches).
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Hybrid balance: 0 lexical only, 100 semantic only (default: the gateway's).
    #[arg(long, default_value_t = config::RetrievalConfig::default().balance, value_parser = clap::value_parser!(u8).range(0..=100))]
    balance: u8,
    /// Drop vector hits below this cosine similarity.
    #[arg(long)]
    min_similarity: Option<f32>,
    /// Evaluate only the first N queries of each set.
    #[arg(long)]
    limit: Option<usize>,
    /// Take each ranking this deep (at least 10, which the metrics read): above 10, the JSON
    /// gives each multi-need query's relevant tools' places (`ranks`) and, over the queries
    /// with 3+ relevant tools, how many have all of them within 5, 10, 20, ... places
    /// (`complete_within`).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(10..=1000))]
    depth: u16,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    json: bool,
    /// Embedding cache folder (default: $XDG_CACHE_HOME/mcpgw/eval or ~/.cache/mcpgw/eval).
    #[arg(long, conflicts_with = "no_cache")]
    cache_dir: Option<PathBuf>,
    /// Keep embeddings in memory only.
    #[arg(long)]
    no_cache: bool,
    /// BM25: English stemming (Porter2), as the gateway does; `--stemming false` to measure
    /// without.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true, value_name = "BOOL")]
    stemming: bool,
    /// BM25: drop English stop words, as the gateway does; `--stop-words false` to measure
    /// without.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true, value_name = "BOOL")]
    stop_words: bool,
    /// BM25 variant to measure: term-frequency saturation k1.
    #[arg(long)]
    k1: Option<f32>,
    /// BM25 variant to measure: length normalisation b.
    #[arg(long)]
    b: Option<f32>,
    /// BM25 variant to measure: one field's weight, as FIELD=WEIGHT (fields: name, server,
    /// description, param_name, param_description, server_description; 0 switches a field
    /// off). Repeatable.
    #[arg(long = "weight", value_name = "FIELD=WEIGHT", value_parser = field_weight)]
    weights: Vec<(Field, f32)>,
    /// What the tool embedding text adds: auto (the gateway's choice: the server's
    /// description when there are several servers), none, name, description or both.
    #[arg(long, default_value = "auto")]
    embed_server: String,
    /// Split each query into its needs and merge their rankings so every need is served
    /// first (`true` or `false`).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false, value_name = "BOOL")]
    split_needs: bool,
    /// With --split-needs: embed each need too (`false`: only the whole query is embedded and
    /// its needs are ranked by BM25).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true, value_name = "BOOL")]
    needs_vectors: bool,
    /// Read before write, as the gateway does: unless a query asks to change something, tools
    /// that may delete, reset or overwrite move two places down; `--caution false` to measure
    /// without.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true, value_name = "BOOL")]
    caution: bool,
    /// Query-dependent fusion, as the gateway does: the hybrid balance moves per query by its
    /// length (`on` or `off`; off keeps the balance for every query).
    #[arg(long, default_value = "on", value_parser = on_off, action = clap::ArgAction::Set, value_name = "on|off")]
    adaptive: bool,
    /// Field-aware tool vectors, as the gateway does by default (`[retrieval] field_vectors`):
    /// embed each tool's head (name, description) and its parameters apart, and use W × head +
    /// (1 − W) × parameters as its vector; `off` for one text per tool.
    #[arg(long, default_value = "0.5", value_parser = weight_or_off, value_name = "W|off")]
    field_vectors: WeightOrOff,
    /// A second local model blended into the vectors (`[retrieval.embedder] blend`), or
    /// `none`. Default: as the gateway, potion-base-8M with the default model, none otherwise.
    #[arg(long, value_name = "MODEL|none")]
    blend: Option<String>,
    /// The blend model's weight, strictly between 0 and 1 (`[retrieval.embedder]
    /// blend_weight`).
    #[arg(long, default_value_t = config::DEFAULT_BLEND_WEIGHT, value_name = "W")]
    blend_weight: f32,
    /// How hybrid combines its lists: `scores` (a weighted sum of min-max normalised scores,
    /// as the gateway does) or `ranks` (weighted reciprocal rank fusion; its balance was 45).
    #[arg(long, default_value = "scores", value_name = "scores|ranks")]
    fusion: String,
    /// With --fusion ranks: the RRF constant k.
    #[arg(long, default_value_t = retrieval::RRF_K)]
    rrf_k: f32,
    /// With --adaptive on: how far the semantic weight moves per span of query terms.
    #[arg(long, default_value_t = retrieval::Adaptive::default().slope)]
    adaptive_slope: f32,
    /// With --adaptive on: the query length, in spans, at which the balance holds unchanged.
    #[arg(long, default_value_t = retrieval::Adaptive::default().pivot)]
    adaptive_pivot: f32,
    /// With --adaptive on: query terms per span.
    #[arg(long, default_value_t = retrieval::Adaptive::default().span)]
    adaptive_span: f32,
    /// With --adaptive on: count whitespace-separated words instead of analysed terms.
    #[arg(long, action = clap::ArgAction::Set, default_value_t = retrieval::Adaptive::default().words, value_name = "BOOL")]
    adaptive_words: bool,
    /// Pseudo-relevance feedback (RM3) where BM25 answers alone, as the gateway does: the
    /// number of feedback documents (0 switches it off).
    #[arg(long, default_value_t = retrieval::Feedback::default().docs, value_name = "DOCS")]
    feedback: usize,
    /// Expansion terms taken from the feedback documents.
    #[arg(long, default_value_t = retrieval::Feedback::default().terms, value_name = "TERMS")]
    feedback_terms: usize,
    /// The expansion's weight λ in the query model (0 to 0.9).
    #[arg(long, default_value_t = retrieval::Feedback::default().weight, value_name = "LAMBDA")]
    feedback_weight: f32,
    /// The largest share of the tools an expansion term may occur in (0 to 1).
    #[arg(long, default_value_t = retrieval::Feedback::default().max_df, value_name = "SHARE")]
    feedback_max_df: f32,
    /// Apply feedback to the BM25 list inside hybrid fusion too (off in the gateway).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false, value_name = "BOOL")]
    feedback_fusion: bool,
    /// Server-aware ranking to measure: a server's rank as a prior on its tools, the server
    /// ranked by its best tool (best), the sum of its tools' reciprocal ranks (sum) or BM25
    /// over its whole text (bm25); off as in the gateway.
    #[arg(long, default_value = "off", value_name = "off|best|sum|bm25")]
    server_prior: String,
    /// With --server-prior: the prior's weight (0 to 1).
    #[arg(long, default_value_t = 0.3)]
    server_weight: f32,
    /// With --server-prior: two-stage, the tools of the best N servers first (0: off).
    #[arg(long, default_value_t = 0, value_name = "N")]
    server_stages: usize,
    /// Rocchio feedback on the vector side of hybrid: the query vector plus this weight times
    /// the first pass's best hit's vector, as the gateway does (0: off).
    #[arg(long, default_value_t = catalog::VECTOR_FEEDBACK, value_name = "BETA")]
    vector_feedback: f32,
    /// Diversity: at most N tools of one server in the top k before other servers' tools
    /// (0: off, as in the gateway).
    #[arg(long, default_value_t = 0, value_name = "N")]
    per_server: usize,
    /// De-duplication: a tool whose vector is at least this similar (cosine) to a higher
    /// hit's moves to the end of the top k (off by default).
    #[arg(long, value_name = "COSINE")]
    dedup: Option<f32>,
    /// Maximal marginal relevance: pick the top k from the first 30 hits, each by its score
    /// over the best less this weight times its highest cosine with a tool picked before it.
    #[arg(long, value_name = "LAMBDA")]
    mmr: Option<f32>,
    /// The learned sparse list (splade-tiny, `scripts/fetch-models.sh splade`) as a further
    /// input of fusion: `on`, `off` (as in the gateway) or `alone` (rank by it alone). With
    /// --strategy bm25 it is fused with BM25; with hybrid it is a third list.
    #[arg(long, default_value = "off", value_name = "on|off|alone")]
    splade: String,
    /// With --splade on: the sparse list's RRF weight (the BM25 and vector weights add up to 1;
    /// BM25 has 1 where it would answer alone).
    #[arg(long, default_value_t = 0.5, value_name = "W")]
    splade_weight: f32,
    /// With --splade: use it for queries in CJK scripts too (its vocabulary is English).
    #[arg(long, action = clap::ArgAction::Set, default_value_t = false, value_name = "BOOL")]
    splade_cjk: bool,
    /// Folder holding splade-tiny's files (default: the standard model folders).
    #[arg(long)]
    splade_dir: Option<PathBuf>,
}

/// `on` or `off` (also `true`/`false`).
/// A weight from 0 to 1, or off (`None`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct WeightOrOff(Option<f32>);

fn weight_or_off(text: &str) -> Result<WeightOrOff, String> {
    match text.to_ascii_lowercase().as_str() {
        "off" | "none" => Ok(WeightOrOff(None)),
        number => number
            .parse::<f32>()
            .ok()
            .filter(|w| (0.0..=1.0).contains(w))
            .map(|w| WeightOrOff(Some(w)))
            .ok_or_else(|| format!("`{text}` is neither a weight from 0 to 1 nor off")),
    }
}

fn on_off(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(format!("`{text}` is neither on nor off")),
    }
}

/// The three files of a set folder, as `::eval::Dataset::load` reads them.
const SET_FORMAT_HELP: &str = r#"A set folder holds three files:

  tools.json      the catalog: a JSON array of servers, each
                    {"server": NAME, "description": TEXT, "tools": [TOOL, ...]}
                  where each TOOL is an MCP tool as a server's tools/list returns it
                  ({"name", "description", "inputSchema"}). Built into a catalog the way the
                  gateway builds one from live servers.
  queries.jsonl   one query per line: {"id": ID, "text": TEXT} (the id a string or a number).
  qrels.tsv       the answers: tab-separated, a header line first, then one line per relevant
                  tool:  QUERY_ID <tab> SERVER <tab> TOOL <tab> RELEVANCE
                  SERVER and TOOL as in tools.json (the upstream tool name); a relevance
                  above 0 counts as relevant.

Metrics, averaged over queries: nDCG@10, recall at 5 and 10, MRR@10, and Comp@5 (1 when every
relevant tool is in the top 5).

The repository ships one set, eval/metatool (MetaTool, MIT licence: eval/metatool/README.md):
  mcpgw eval eval/metatool --strategy bm25
More in docs/retrieval.md."#;

fn fusion(args: &Args) -> Result<retrieval::Fusion, Failure> {
    match args.fusion.as_str() {
        "ranks" | "rrf" => Ok(retrieval::Fusion::Ranks { k: args.rrf_k }),
        "scores" => Ok(retrieval::Fusion::Scores),
        other => Err(Failure::usage(anyhow!(
            "--fusion must be ranks or scores, not `{other}`"
        ))),
    }
}

pub(crate) async fn run(args: Args) -> Result<(), Failure> {
    let strategies = strategies(&args.strategy)?;
    let embedding_text = match args.embed_server.as_str() {
        // What the gateway does: the server description when there are several servers.
        "auto" => None,
        "none" => Some(EmbeddingText::default()),
        "name" => Some(EmbeddingText {
            server_name: true,
            server_description: false,
        }),
        "description" => Some(EmbeddingText {
            server_name: false,
            server_description: true,
        }),
        "both" => Some(EmbeddingText {
            server_name: true,
            server_description: true,
        }),
        other => {
            return Err(Failure::usage(anyhow!(
                "--embed-server must be auto, none, name, description or both, not `{other}`"
            )));
        }
    };
    let mut bm25 = IndexOptions::default().bm25;
    bm25.k1 = args.k1.unwrap_or(bm25.k1);
    bm25.b = args.b.unwrap_or(bm25.b);
    for &(field, weight) in &args.weights {
        bm25.weights.set(field, weight);
    }
    let mut index = IndexOptions {
        bm25,
        ..IndexOptions::default()
    };
    index.analyzer.stemming = args.stemming.then_some(Language::English);
    index.analyzer.stop_words = args.stop_words.then_some(Language::English);
    let options = ::eval::Options {
        strategies: strategies.clone(),
        hybrid: Hybrid {
            balance: args.balance,
            min_similarity: args.min_similarity,
            adaptive: args.adaptive.then_some(Adaptive {
                slope: args.adaptive_slope,
                pivot: args.adaptive_pivot,
                span: args.adaptive_span,
                words: args.adaptive_words,
            }),
            fusion: fusion(&args)?,
        },
        feedback: (args.feedback > 0).then_some(Feedback {
            docs: args.feedback,
            terms: args.feedback_terms,
            weight: args.feedback_weight,
            max_df: args.feedback_max_df,
        }),
        feedback_in_fusion: args.feedback_fusion,
        limit: args.limit,
        index,
        embedding_text: embedding_text.clone(),
        batch_size: args.batch_size.max(1),
        split_needs: args.split_needs,
        needs_vectors: args.needs_vectors,
        caution: args.caution,
        rerank: Rerank {
            servers: server_prior(&args)?,
            vector_feedback: (args.vector_feedback != 0.0).then_some(args.vector_feedback),
            per_server: (args.per_server > 0).then_some(args.per_server),
            dedup: args.dedup,
            mmr: args.mmr,
        },
        splade: splade(&args).await?,
        field_vectors: args.field_vectors.0,
        depth: usize::from(args.depth),
        ..::eval::Options::default()
    };

    let sets = args
        .sets
        .iter()
        .map(|dir| {
            Dataset::load(dir).with_context(|| format!("cannot load the set in {}", dir.display()))
        })
        .collect::<Result<Vec<_>, _>>()?;

    let needs_vectors = strategies.iter().any(|s| s.needs_vectors());
    let embedder = if needs_vectors {
        let model: LocalModel = args.model.parse().map_err(Failure::usage)?;
        Some(load_model(model, args.model_dir.clone(), args.threads).await)
    } else {
        None
    };
    // The blend model, loaded only beside a model that loaded.
    let blend_model = match args.blend.as_deref().map(str::trim) {
        None => config::LocalBlend::default_for(&args.model, None).map(|blend| blend.model),
        Some(name) if name.eq_ignore_ascii_case("none") => None,
        Some(name) => Some(name.to_owned()),
    };
    let blend = match (blend_model, &embedder) {
        (Some(name), Some(Ok(first))) => {
            let model: LocalModel = name.parse().map_err(Failure::usage)?;
            let second = load_model(model, None, args.threads)
                .await
                .map_err(|reason| anyhow!("the blend model {name}: {reason}"))?;
            let both = embed::Blend::new(Arc::clone(first), Arc::clone(&second), args.blend_weight)
                .map_err(Failure::usage)?;
            Some((second, both))
        }
        _ => None,
    };
    let cache_dir = match (&args.cache_dir, args.no_cache) {
        (_, true) => None,
        (Some(dir), false) => Some(dir.clone()),
        (None, false) => ::eval::cache::default_dir(),
    };

    let bar = Bar::default();
    let mut reports = Vec::with_capacity(sets.len());
    for set in &sets {
        let report = match &embedder {
            Some(Ok(embedder)) => {
                let open_cache = |model: &str| -> Box<dyn EmbeddingCache> {
                    match &cache_dir {
                        Some(dir) => match FileCache::open(dir, model, &set.name) {
                            Ok(cache) => Box::new(cache),
                            Err(error) => {
                                tracing::warn!("{error}; embeddings are not cached");
                                Box::new(MemoryCache::default())
                            }
                        },
                        None => Box::new(MemoryCache::default()),
                    }
                };
                let mut cache = open_cache(embedder.id());
                let mut blend_cache = blend.as_ref().map(|(second, _)| open_cache(second.id()));
                let semantic = Semantic {
                    embedder: embedder.as_ref(),
                    cache: cache.as_mut(),
                    blend: blend.as_ref().zip(blend_cache.as_mut()).map(
                        |((second, both), cache)| SemanticBlend {
                            embedder: second.as_ref(),
                            cache: cache.as_mut(),
                            weight: args.blend_weight,
                            both,
                        },
                    ),
                };
                ::eval::evaluate(set, &options, Ok(semantic), &bar).await
            }
            Some(Err(reason)) => ::eval::evaluate(set, &options, Err(reason.clone()), &bar).await,
            None => ::eval::evaluate(set, &options, Err("not asked".into()), &bar).await,
        };
        if !args.json {
            bar.suspend(|| print_set(&report));
        }
        reports.push(report);
    }
    ::eval::Progress::finish(&bar);

    if args.json {
        let report = Report {
            settings: Settings {
                strategies,
                model: needs_vectors.then(|| args.model.clone()),
                balance: args.balance,
                fusion: match &options.hybrid.adaptive {
                    Some(a) => format!(
                        "adaptive slope={} pivot={} span={}{}",
                        a.slope,
                        a.pivot,
                        a.span,
                        if a.words { " words" } else { "" }
                    ),
                    None => "fixed".to_string(),
                },
                feedback: match &options.feedback {
                    Some(f) => format!(
                        "docs={} terms={} weight={}{}",
                        f.docs,
                        f.terms,
                        f.weight,
                        if options.feedback_in_fusion {
                            " in fusion"
                        } else {
                            ""
                        }
                    ),
                    None => "off".to_string(),
                },
                min_similarity: args.min_similarity,
                limit: args.limit,
                bm25: bm25_words(&options.index),
                embedding_text: args.embed_server.clone(),
                rerank: format!("{:?}", options.rerank),
                splade: options.splade.as_ref().map(|s| {
                    format!(
                        "{} weight={}{}",
                        if s.alone { "alone" } else { "on" },
                        s.weight,
                        if s.cjk { " cjk" } else { "" }
                    )
                }),
                blend: blend
                    .as_ref()
                    .map(|(second, _)| format!("{}@{}", second.id(), args.blend_weight)),
                field_vectors: needs_vectors.then_some(options.field_vectors).flatten(),
                depth: (options.depth > 10).then_some(options.depth),
            },
            sets: reports,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

/// `--splade` and its settings, with the encoder loaded.
async fn splade(args: &Args) -> Result<Option<::eval::SpladeRun>, Failure> {
    let alone = match args.splade.as_str() {
        "off" => return Ok(None),
        "on" => false,
        "alone" => true,
        other => {
            return Err(Failure::usage(anyhow!(
                "--splade must be on, off or alone, not `{other}`"
            )));
        }
    };
    let dir = args.splade_dir.clone();
    let defaults = LoadOptions::default();
    let options = LoadOptions {
        threads: args.threads.unwrap_or(defaults.threads).max(1),
        ..defaults
    };
    let encoder = tokio::task::spawn_blocking(move || {
        embed::local::splade::Splade::load(dir.as_deref(), &options)
    })
    .await
    .map_err(|e| anyhow!("splade loading failed: {e}"))?
    .context("--splade needs splade-tiny (scripts/fetch-models.sh splade)")?;
    Ok(Some(::eval::SpladeRun {
        encoder,
        weight: args.splade_weight,
        cjk: args.splade_cjk,
        alone,
        cache_dir: match (&args.cache_dir, args.no_cache) {
            (_, true) => None,
            (Some(dir), false) => Some(dir.clone()),
            (None, false) => ::eval::cache::default_dir(),
        },
    }))
}

/// `--server-prior` and its weight and stages.
fn server_prior(args: &Args) -> Result<Option<ServerPrior>, Failure> {
    let (score, lexical) = match args.server_prior.as_str() {
        "off" => return Ok(None),
        "best" => (GroupScore::Best, false),
        "sum" => (GroupScore::Sum, false),
        "bm25" => (GroupScore::Best, true),
        other => {
            return Err(Failure::usage(anyhow!(
                "--server-prior must be off, best, sum or bm25, not `{other}`"
            )));
        }
    };
    Ok(Some(ServerPrior {
        prior: GroupPrior {
            score,
            weight: args.server_weight,
            stages: args.server_stages,
        },
        lexical,
    }))
}

fn strategies(flag: &str) -> Result<Vec<Strategy>, Failure> {
    if flag.eq_ignore_ascii_case("all") {
        return Ok(Strategy::ALL.to_vec());
    }
    flag.split(',')
        .map(|s| s.trim().parse::<Strategy>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Failure::usage(anyhow!("--strategy: {e} (or all)")))
}

/// The model, or why it cannot be used (vector strategies then report it as skipped).
async fn load_model(
    model: LocalModel,
    dir: Option<PathBuf>,
    threads: Option<usize>,
) -> Result<Arc<dyn Embedder>, String> {
    let defaults = LoadOptions::default();
    let options = LoadOptions {
        threads: threads.unwrap_or(defaults.threads).max(1),
        ..defaults
    };
    tokio::task::spawn_blocking(move || embed::local::load_with(model, dir.as_deref(), &options))
        .await
        .map_err(|e| format!("model loading failed: {e}"))?
        .map_err(|e| e.to_string())
}

/// `name=2.5` as a field and its weight.
fn field_weight(text: &str) -> Result<(Field, f32), String> {
    let (name, weight) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not FIELD=WEIGHT"))?;
    let field = Field::ALL
        .into_iter()
        .find(|field| field.as_str() == name.trim())
        .ok_or_else(|| {
            let names: Vec<&str> = Field::ALL.iter().map(|field| field.as_str()).collect();
            format!("unknown field `{name}`; fields: {}", names.join(", "))
        })?;
    let weight: f32 = weight
        .trim()
        .parse()
        .map_err(|_| format!("weight `{weight}` is not a number"))?;
    if !weight.is_finite() || weight < 0.0 {
        return Err(format!("weight {weight} must be 0 or more"));
    }
    Ok((field, weight))
}

/// The BM25 settings in words, e.g. `k1=1.2 b=0.75 stemming stop-words`.
fn bm25_words(index: &IndexOptions) -> String {
    let mut words = vec![format!("k1={} b={}", index.bm25.k1, index.bm25.b)];
    let weights = &index.bm25.weights;
    let defaults = retrieval::FieldWeights::default();
    for field in Field::ALL {
        if weights.get(field) != defaults.get(field) {
            words.push(format!("{}={}", field.as_str(), weights.get(field)));
        }
    }
    if index.analyzer.stemming.is_some() {
        words.push("stemming".to_string());
    }
    if index.analyzer.stop_words.is_some() {
        words.push("stop-words".to_string());
    }
    words.join(" ")
}

/// `hybrid: 3+ queries with every relevant tool within 5 / 10 / 20 places: 3.4% / 8.3% /
/// 17.2%`, for a strategy measured with `--depth` above 10 on a set with 3+ queries.
fn complete_within_line(strategy: &StrategyReport) -> Option<String> {
    let Outcome::Ok(figures) = &strategy.outcome else {
        return None;
    };
    if figures.complete_within.is_empty() {
        return None;
    }
    let join = |part: &dyn Fn(&CompleteWithin) -> String| {
        figures
            .complete_within
            .iter()
            .map(part)
            .collect::<Vec<_>>()
            .join(" / ")
    };
    Some(format!(
        "{}: 3+ queries with every relevant tool within {} places: {}",
        strategy.strategy,
        join(&|c| c.k.to_string()),
        join(&|c| format!("{:.1}%", c.percent)),
    ))
}

fn print_set(report: &SetReport) {
    println!(
        "{}: {} servers, {} tools, {} queries{}",
        report.set,
        report.servers,
        report.tools,
        report.queries,
        match (
            report.queries_without_relevant,
            report.unknown_relevant_tools
        ) {
            (0, 0) => String::new(),
            (without, unknown) =>
                format!(" ({without} without a known relevant tool, {unknown} unknown qrels)"),
        }
    );
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header([
            "strategy",
            "nDCG@10",
            "R@5",
            "R@10",
            "MRR@10",
            "Comp@5",
            "Comp@5 3+",
            "search p50",
            "p99",
        ]);
    // Reasons go under the table: a long one would stretch a column.
    let mut skipped: Vec<(String, &str)> = Vec::new();
    for strategy in &report.strategies {
        match &strategy.outcome {
            Outcome::Ok(figures) => {
                let m = figures.metrics;
                table.add_row([
                    strategy.strategy.to_string(),
                    format!("{:.1}", m.ndcg_at_10),
                    format!("{:.1}", m.recall_at_5),
                    format!("{:.1}", m.recall_at_10),
                    format!("{:.1}", m.mrr_at_10),
                    format!("{:.1}", m.comp_at_5),
                    figures
                        .comp_at_5_3plus
                        .map_or("-".to_string(), |c| format!("{c:.1}")),
                    format!("{:.1} µs", figures.search_p50_us),
                    format!("{:.1} µs", figures.search_p99_us),
                ]);
            }
            Outcome::Skipped { reason } => {
                table.add_row([strategy.strategy.as_str(), "skipped"]);
                match skipped.iter_mut().find(|(_, r)| *r == reason.as_str()) {
                    Some((names, _)) => {
                        names.push_str(", ");
                        names.push_str(strategy.strategy.as_str());
                    }
                    None => skipped.push((strategy.strategy.to_string(), reason)),
                }
            }
        }
    }
    println!("{table}");
    for (strategies, reason) in skipped {
        println!("{strategies} skipped: {reason}");
    }
    // With --depth above 10: how far a better order of what was found could take Comp@5 3+.
    for strategy in &report.strategies {
        if let Some(line) = complete_within_line(strategy) {
            println!("{line}");
        }
    }
    println!(
        "index build: catalog {:.1} ms, BM25 alone {:.2} ms",
        report.catalog_build_ms, report.bm25_build_ms
    );
    if let Some(e) = &report.embedding {
        println!(
            "embedding ({}, {}-d): tools {:.1} s ({} of {} cached), queries {:.1} s ({} of {} cached), \
             one query p50 {} (n={}), vector index {:.2} ms",
            e.model,
            e.dim,
            e.tools_embed_ms / 1e3,
            e.tools_cached,
            e.tools,
            e.queries_embed_ms / 1e3,
            e.queries_cached,
            e.queries,
            e.query_embed_p50_ms
                .map_or("-".to_string(), |ms| format!("{ms:.1} ms")),
            e.query_embed_sample,
            e.vector_build_ms,
        );
    }
    if let Some(s) = &report.sparse {
        println!(
            "sparse ({}): {} texts encoded: tools {:.2} s ({:.1} terms each), index {:.2} ms, \
             queries {:.1} s ({} texts, {:.1} terms each), one query p50 {} (n={})",
            s.model,
            s.encoded,
            s.tools_encode_ms / 1e3,
            s.mean_tool_terms,
            s.index_build_ms,
            s.queries_encode_ms / 1e3,
            s.queries,
            s.mean_query_terms,
            s.query_encode_p50_ms
                .map_or("-".to_string(), |ms| format!("{ms:.2} ms")),
            s.query_encode_sample,
        );
    }
    if !report.problems.is_empty() || !report.warnings.is_empty() {
        println!(
            "{} tools skipped, {} warnings (see --json)",
            report.problems.len(),
            report.warnings.len()
        );
    }
    println!();
}

/// indicatif behind `::eval::Progress`: one bar, created on the first stage and reused by the
/// next (reset, relabelled), cleared between sets so tables print cleanly. Draws on stderr and
/// hides itself off a terminal.
#[derive(Default)]
struct Bar(RefCell<Option<ProgressBar>>);

impl Bar {
    /// Runs `f` with the bar out of the way, e.g. to print a table.
    fn suspend(&self, f: impl FnOnce()) {
        match &*self.0.borrow() {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }
}

impl ::eval::Progress for Bar {
    fn start(&self, label: &str, total: u64) {
        let mut slot = self.0.borrow_mut();
        match &*slot {
            Some(bar) => {
                bar.reset();
                bar.set_length(total);
                bar.set_prefix(label.to_string());
                bar.enable_steady_tick(Duration::from_millis(120));
            }
            None => *slot = Some(render::progress(total, label)),
        }
    }

    fn advance(&self, steps: u64) {
        if let Some(bar) = &*self.0.borrow() {
            bar.inc(steps);
        }
    }

    fn finish(&self) {
        if let Some(bar) = &*self.0.borrow() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_defaults_to_the_metrics_depth_and_its_summary_prints_one_line() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            eval: Args,
        }
        let parsed = Cli::try_parse_from(["eval", "set"]).expect("parses");
        assert_eq!(parsed.eval.depth, 10);
        // Shallower than the metrics read would change them: refused.
        assert!(Cli::try_parse_from(["eval", "set", "--depth", "9"]).is_err());
        let strategy = |complete_within: Vec<CompleteWithin>| StrategyReport {
            strategy: Strategy::Hybrid,
            outcome: Outcome::Ok(::eval::Figures {
                metrics: ::eval::Metrics::default(),
                search_p50_us: 0.0,
                search_p99_us: 0.0,
                degraded: 0,
                by_relevant_count: Vec::new(),
                comp_at_5_3plus: Some(3.4),
                needs_at_5: Vec::new(),
                complete_within,
                multi_need_queries: Vec::new(),
            }),
        };
        assert_eq!(complete_within_line(&strategy(Vec::new())), None);
        let line = complete_within_line(&strategy(vec![
            CompleteWithin {
                k: 5,
                queries: 48,
                percent: 3.4,
            },
            CompleteWithin {
                k: 10,
                queries: 115,
                percent: 8.3,
            },
            CompleteWithin {
                k: 20,
                queries: 240,
                percent: 17.2,
            },
        ]));
        assert_eq!(
            line.as_deref(),
            Some(
                "hybrid: 3+ queries with every relevant tool within 5 / 10 / 20 places: 3.4% / 8.3% / 17.2%"
            )
        );
    }

    #[test]
    fn field_vector_weights_parse_and_default_to_the_gateway_s() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            eval: Args,
        }
        let parsed = Cli::try_parse_from(["eval", "set"]).expect("parses");
        let gateway = config::RetrievalConfig::default();
        assert_eq!(
            parsed.eval.field_vectors.0,
            gateway.field_vectors.then_some(catalog::FIELD_WEIGHT)
        );
        assert_eq!(parsed.eval.balance, gateway.balance);
        assert_eq!(weight_or_off("OFF"), Ok(WeightOrOff(None)));
        assert_eq!(weight_or_off("0.25"), Ok(WeightOrOff(Some(0.25))));
        assert!(weight_or_off("1.5").is_err());
        assert!(weight_or_off("heavy").is_err());
    }

    #[test]
    fn field_weights_parse_and_say_what_is_wrong() {
        assert_eq!(field_weight("name=2.5"), Ok((Field::Name, 2.5)));
        assert_eq!(
            field_weight(" param_description = 0 "),
            Ok((Field::ParamDescription, 0.0))
        );
        assert_eq!(
            field_weight("name"),
            Err("`name` is not FIELD=WEIGHT".to_string())
        );
        assert_eq!(
            field_weight("title=1"),
            Err(
                "unknown field `title`; fields: name, server, description, param_name, \
                 param_description, server_description"
                    .to_string()
            )
        );
        assert_eq!(
            field_weight("name=heavy"),
            Err("weight `heavy` is not a number".to_string())
        );
        assert_eq!(
            field_weight("name=-1"),
            Err("weight -1 must be 0 or more".to_string())
        );
    }
}
