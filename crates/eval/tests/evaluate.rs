//! End-to-end runs of `eval::evaluate` on a small set written to a temporary folder, with a
//! deterministic stand-in embedder.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use catalog::Strategy;
use embed::{EmbedError, Embedder, TextKind};
use eval::cache::EmbeddingCache;
use eval::{
    Dataset, FileCache, MemoryCache, Options, Outcome, Semantic, SemanticBlend, SetReport, Silent,
    evaluate,
};
use expect_test::expect;
use futures::future::BoxFuture;

/// Bag of words hashed into 32 dimensions, with a few synonyms folded together, so "sum"
/// lands near "add" although no term is shared. Counts the texts it embeds.
struct WordEmbedder {
    texts: AtomicUsize,
}

impl WordEmbedder {
    fn new() -> WordEmbedder {
        WordEmbedder {
            texts: AtomicUsize::new(0),
        }
    }

    fn vector(text: &str) -> Vec<f32> {
        let mut v = vec![0.0; 32];
        for word in text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
        {
            let word = word.to_lowercase();
            let word = match word.as_str() {
                "sum" | "total" | "plus" => "add",
                "climate" | "rain" => "weather",
                other => other,
            };
            let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
            v[(hash % 32) as usize] += 1.0;
        }
        v
    }
}

impl Embedder for WordEmbedder {
    fn id(&self) -> &str {
        "test/words"
    }

    fn dim(&self) -> usize {
        32
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
        _: TextKind,
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        self.texts.fetch_add(texts.len(), Ordering::SeqCst);
        Box::pin(async move { Ok(texts.iter().map(|t| WordEmbedder::vector(t)).collect()) })
    }
}

fn write_set(dir: &Path) {
    let tools = r#"[
      {"server": "Math Tools", "description": "Arithmetic", "tools": [
        {"name": "add", "description": "Add two numbers", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
        {"name": "multiply", "description": "Multiply two numbers", "inputSchema": {"type": "object"}}
      ]},
      {"server": "Weather", "tools": [
        {"name": "get_forecast", "description": "Weather forecast for a city", "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"name": "broken"}
      ]}
    ]"#;
    fs::write(dir.join("tools.json"), tools).expect("write tools");
    let queries = [
        r#"{"id": "q1", "text": "multiply numbers"}"#,
        r#"{"id": "q2", "text": "weather forecast for Paris"}"#,
        r#"{"id": "q3", "text": "sum"}"#,
        r#"{"id": "q4", "text": "no labels for me"}"#,
        r#"{"id": "q5", "text": "add numbers and the forecast"}"#,
    ];
    fs::write(dir.join("queries.jsonl"), queries.join("\n")).expect("write queries");
    let qrels = "query_id\tserver\ttool\trelevance\n\
        q1\tMath Tools\tmultiply\t1\n\
        q2\tWeather\tget_forecast\t1\n\
        q3\tMath Tools\tadd\t1\n\
        q4\tNowhere\tnothing\t1\n\
        q5\tMath Tools\tadd\t1\n\
        q5\tWeather\tget_forecast\t1\n";
    fs::write(dir.join("qrels.tsv"), qrels).expect("write qrels");
}

fn summary(report: &SetReport) -> String {
    let mut lines = vec![format!(
        "{}: {} servers, {} tools, {} queries ({} without relevant, {} unknown qrels), {} problems",
        report.set,
        report.servers,
        report.tools,
        report.queries,
        report.queries_without_relevant,
        report.unknown_relevant_tools,
        report.problems.len()
    )];
    for strategy in &report.strategies {
        lines.push(match &strategy.outcome {
            Outcome::Ok(figures) => {
                let m = figures.metrics;
                format!(
                    "{}: ndcg@10 {} r@5 {} r@10 {} mrr@10 {} comp@5 {} degraded {}",
                    strategy.strategy,
                    m.ndcg_at_10,
                    m.recall_at_5,
                    m.recall_at_10,
                    m.mrr_at_10,
                    m.comp_at_5,
                    figures.degraded
                )
            }
            Outcome::Skipped { reason } => format!("{}: skipped: {reason}", strategy.strategy),
        });
    }
    lines.join("\n")
}

#[test]
fn bm25_runs_and_vector_strategies_are_skipped_without_a_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_set(dir.path());
    let set = Dataset::load(dir.path()).expect("set loads");
    let report = futures::executor::block_on(evaluate(
        &set,
        &Options::default(),
        Err("model 'all-MiniLM-L6-v2' not found".to_string()),
        &Silent,
    ));
    // q3 ("sum") shares no term with `add`: BM25 misses it. q5 needs both tools: found.
    let name = report.set.clone();
    expect![[r#"
        NAME: 2 servers, 3 tools, 4 queries (1 without relevant, 1 unknown qrels), 1 problems
        bm25: ndcg@10 75 r@5 75 r@10 75 mrr@10 75 comp@5 75 degraded 0
        vector: skipped: model 'all-MiniLM-L6-v2' not found
        hybrid: skipped: model 'all-MiniLM-L6-v2' not found"#]]
    .assert_eq(&summary(&report).replace(&name, "NAME"));
    assert!(report.embedding.is_none());
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("renamed to `Math-Tools`")),
        "{:?}",
        report.warnings
    );
}

#[test]
fn hybrid_recovers_the_query_bm25_misses() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_set(dir.path());
    let set = Dataset::load(dir.path()).expect("set loads");
    let embedder = WordEmbedder::new();
    let mut cache = MemoryCache::default();
    let semantic = Semantic {
        embedder: &embedder,
        cache: &mut cache,
        blend: None,
    };
    let report =
        futures::executor::block_on(evaluate(&set, &Options::default(), Ok(semantic), &Silent));
    let summary = summary(&report);
    let hybrid = summary
        .lines()
        .find(|l| l.starts_with("hybrid"))
        .expect("hybrid line");
    assert!(hybrid.contains("r@10 100 "), "{summary}");
    let embedding = report.embedding.expect("embedded");
    assert_eq!(
        (embedding.model.as_str(), embedding.dim),
        ("test/words", 32)
    );
    assert_eq!((embedding.tools, embedding.tools_cached), (3, 0));
    assert_eq!((embedding.queries, embedding.queries_cached), (4, 0));
    assert_eq!(embedding.query_embed_sample, 4);
}

#[test]
fn a_blend_embeds_with_both_models_each_in_its_own_cache_and_names_both() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_set(dir.path());
    let set = Dataset::load(dir.path()).expect("set loads");
    let (first, second) = (WordEmbedder::new(), WordEmbedder::new());
    let both = embed::Blend::new(
        std::sync::Arc::new(WordEmbedder::new()),
        std::sync::Arc::new(WordEmbedder::new()),
        0.5,
    )
    .expect("blend");
    let (mut first_cache, mut second_cache) = (MemoryCache::default(), MemoryCache::default());
    let semantic = Semantic {
        embedder: &first,
        cache: &mut first_cache,
        blend: Some(SemanticBlend {
            embedder: &second,
            cache: &mut second_cache,
            weight: 0.5,
            both: &both,
        }),
    };
    let options = Options {
        latency_sample: 0,
        ..Options::default()
    };
    let report = futures::executor::block_on(evaluate(&set, &options, Ok(semantic), &Silent));
    // Each model embedded the 3 tools and 4 queries once, into its own cache.
    assert_eq!(first.texts.load(Ordering::SeqCst), 3 + 4);
    assert_eq!(second.texts.load(Ordering::SeqCst), 3 + 4);
    assert_eq!((first_cache.len(), second_cache.len()), (7, 7));
    let embedding = report.embedding.as_ref().expect("embedded");
    assert_eq!(
        (embedding.model.as_str(), embedding.dim),
        ("test/words+test/words@0.5", 64)
    );
    // The same model twice blends to the same cosines: the ranking is the model's own.
    let summary = summary(&report);
    let hybrid = summary
        .lines()
        .find(|l| l.starts_with("hybrid"))
        .expect("hybrid line");
    assert!(hybrid.contains("r@10 100 "), "{summary}");
}

#[test]
fn second_run_takes_every_vector_from_the_file_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_dir = tempfile::tempdir().expect("cache dir");
    write_set(dir.path());
    let set = Dataset::load(dir.path()).expect("set loads");
    let options = Options {
        latency_sample: 0,
        ..Options::default()
    };
    let run = |embedder: &WordEmbedder| {
        let mut cache =
            FileCache::open(cache_dir.path(), embedder.id(), &set.name).expect("cache opens");
        let semantic = Semantic {
            embedder,
            cache: &mut cache,
            blend: None,
        };
        futures::executor::block_on(evaluate(&set, &options, Ok(semantic), &Silent))
    };
    let first = WordEmbedder::new();
    let cold = run(&first);
    assert_eq!(first.texts.load(Ordering::SeqCst), 3 + 4);
    let second = WordEmbedder::new();
    let warm = run(&second);
    assert_eq!(second.texts.load(Ordering::SeqCst), 0);
    let embedding = warm.embedding.as_ref().expect("embedded");
    assert_eq!((embedding.tools_cached, embedding.queries_cached), (3, 4));
    assert_eq!(summary(&cold), summary(&warm));
}

#[test]
fn limit_takes_the_first_queries_of_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_set(dir.path());
    let set = Dataset::load(dir.path()).expect("set loads");
    let options = Options {
        strategies: vec![Strategy::Bm25],
        limit: Some(2),
        ..Options::default()
    };
    let report =
        futures::executor::block_on(evaluate(&set, &options, Err("unused".into()), &Silent));
    assert_eq!(report.queries, 2);
    assert_eq!(report.strategies.len(), 1);
    let name = report.set.clone();
    expect![[r#"
        NAME: 2 servers, 3 tools, 2 queries (0 without relevant, 0 unknown qrels), 1 problems
        bm25: ndcg@10 100 r@5 100 r@10 100 mrr@10 100 comp@5 100 degraded 0"#]]
    .assert_eq(&summary(&report).replace(&name, "NAME"));
}

#[test]
fn json_report_marks_skipped_strategies_with_a_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_set(dir.path());
    let set = Dataset::load(dir.path()).expect("set loads");
    let options = Options {
        strategies: vec![Strategy::Bm25, Strategy::Vector],
        limit: Some(1),
        ..Options::default()
    };
    let report =
        futures::executor::block_on(evaluate(&set, &options, Err("no model".into()), &Silent));
    let json = serde_json::to_value(&report).expect("serialises");
    let strategies = &json["strategies"];
    assert_eq!(strategies[0]["status"], "ok");
    assert_eq!(strategies[0]["strategy"], "bm25");
    assert_eq!(strategies[0]["metrics"]["ndcg_at_10"], 100.0);
    assert_eq!(strategies[0]["by_relevant_count"][0]["relevant"], "1");
    expect![[r#"{"reason":"no model","status":"skipped","strategy":"vector"}"#]]
        .assert_eq(&strategies[1].to_string());
}

#[test]
fn per_need_view_counts_the_needs_each_multi_tool_query_covers() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_set(dir.path());
    let set = Dataset::load(dir.path()).expect("set loads");
    let options = Options {
        strategies: vec![Strategy::Bm25],
        ..Options::default()
    };
    let report =
        futures::executor::block_on(evaluate(&set, &options, Err("unused".into()), &Silent));
    let Outcome::Ok(figures) = &report.strategies[0].outcome else {
        panic!("bm25 runs");
    };
    // q5 needs `add` and `get_forecast`; BM25 finds both ("add", "forecast").
    let json = serde_json::json!({
        "needs": figures.needs_at_5,
        "queries": figures.multi_need_queries,
        "comp3": figures.comp_at_5_3plus,
    });
    expect![[r#"{"comp3":null,"needs":[{"covered":[0,0,1],"mean_covered":100.0,"queries":1,"relevant":2}],"queries":[{"covered_at_5":2,"id":"q5","relevant":2}]}"#]]
        .assert_eq(&json.to_string());
}

#[test]
fn depth_places_each_needed_tool_without_changing_the_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tools: Vec<String> = (0..12)
        .map(|n| {
            format!(
                r#"{{"name": "tool_{n}", "description": "common word {}", "inputSchema": {{"type": "object"}}}}"#,
                ["alpha", "beta", "gamma"].get(n).copied().unwrap_or("filler")
            )
        })
        .collect();
    fs::write(
        dir.path().join("tools.json"),
        format!(r#"[{{"server": "s", "tools": [{}]}}]"#, tools.join(",")),
    )
    .expect("write tools");
    fs::write(
        dir.path().join("queries.jsonl"),
        [
            r#"{"id": "found", "text": "alpha beta gamma"}"#,
            // tool_11 shares only "common" with the query: placed, but not first.
            r#"{"id": "deep", "text": "alpha beta common"}"#,
            // tool_9 matches no word of the query: not placed at all.
            r#"{"id": "lost", "text": "alpha beta gamma"}"#,
        ]
        .join("\n"),
    )
    .expect("write queries");
    fs::write(
        dir.path().join("qrels.tsv"),
        "query_id\tserver\ttool\trelevance\n\
         found\ts\ttool_0\t1\nfound\ts\ttool_1\t1\nfound\ts\ttool_2\t1\n\
         deep\ts\ttool_0\t1\ndeep\ts\ttool_1\t1\ndeep\ts\ttool_11\t1\n\
         lost\ts\ttool_0\t1\nlost\ts\ttool_1\t1\nlost\ts\ttool_9\t1\n",
    )
    .expect("write qrels");
    let set = Dataset::load(dir.path()).expect("set loads");
    let run = |depth: usize| {
        let options = Options {
            strategies: vec![Strategy::Bm25],
            depth,
            ..Options::default()
        };
        let report =
            futures::executor::block_on(evaluate(&set, &options, Err("unused".into()), &Silent));
        let Outcome::Ok(figures) = &report.strategies[0].outcome else {
            panic!("bm25 runs");
        };
        figures.clone()
    };
    let (shallow, deep) = (run(10), run(20));
    // The metrics read the first 10 places whatever the depth.
    assert_eq!(
        serde_json::to_value(shallow.metrics).expect("json"),
        serde_json::to_value(deep.metrics).expect("json")
    );
    // At the metrics' depth the JSON stays as it was: no places, no summary.
    let json = serde_json::to_value(&shallow).expect("json");
    assert!(json.get("complete_within").is_none(), "{json}");
    assert!(
        json["multi_need_queries"][0].get("ranks").is_none(),
        "{json}"
    );
    let ranks = |id: &str| {
        deep.multi_need_queries
            .iter()
            .find(|q| q.id == id)
            .and_then(|q| q.ranks.clone())
            .expect("ranks at depth 20")
    };
    assert_eq!(ranks("found"), vec![Some(1), Some(2), Some(3)]);
    let deep_ranks = ranks("deep");
    assert_eq!(&deep_ranks[..2], &[Some(1), Some(2)]);
    assert!(
        deep_ranks[2].is_some_and(|r| r > 2 && r <= 12),
        "{deep_ranks:?}"
    );
    assert_eq!(ranks("lost"), vec![Some(1), Some(2), None]);
    let within: Vec<(usize, usize)> = deep
        .complete_within
        .iter()
        .map(|c| (c.k, c.queries))
        .collect();
    // 5, 10 and 20 places (the depth); the lost tool keeps "lost" out of every one.
    assert_eq!(
        within.iter().map(|w| w.0).collect::<Vec<_>>(),
        vec![5, 10, 20]
    );
    assert_eq!(within[2].1, 2, "{within:?}");
    assert!(within.windows(2).all(|w| w[0].1 <= w[1].1), "{within:?}");
    assert_eq!(Some(deep.complete_within[0].percent), deep.comp_at_5_3plus);
}
