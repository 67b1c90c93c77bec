//! Local embedder speed: load time, single-query latency, and throughput on 1,000 synthetic
//! tool descriptions (14–60 characters, like shared/NOTES-embeddings.md §3.3) per model.
//!
//! `cargo bench -p mcpgw-embed`. Models whose files are missing are skipped with a message
//! (run `scripts/fetch-models.sh`); CI only compiles this (`cargo bench --no-run`).

use std::sync::{Arc, OnceLock};

use divan::Bencher;
use divan::counter::ItemsCount;
use embed::local::{self, LoadOptions, LocalModel};
use embed::{Embedder, TextKind};

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

/// Models whose files are installed; says why the others are skipped.
fn installed() -> Vec<LocalModel> {
    LocalModel::ALL
        .into_iter()
        .filter(|&model| match local::model_status(model) {
            Ok(_) => true,
            Err(error) => {
                eprintln!("skipping {model}: {error} (run scripts/fetch-models.sh)");
                false
            }
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

fn load(model: LocalModel, options: &LoadOptions) -> Arc<dyn Embedder> {
    local::load_with(model, None, options).expect("model listed as installed loads")
}

fn embed(embedder: &dyn Embedder, texts: &[String], kind: TextKind) -> Vec<Vec<f32>> {
    runtime()
        .block_on(embedder.embed(texts, kind))
        .expect("embed")
}

/// 1,000 short, varied, deterministic tool descriptions.
fn descriptions() -> Vec<String> {
    const VERBS: &[&str] = &[
        "Search",
        "Read",
        "Create",
        "Delete",
        "List",
        "Update",
        "Send",
        "Fetch",
        "Translate",
        "Summarize",
        "Convert",
        "Schedule",
    ];
    const OBJECTS: &[&str] = &[
        "files in a folder",
        "an email",
        "the weather forecast",
        "open pull requests",
        "calendar events",
        "a database table",
        "stock prices",
        "web pages",
        "issues",
        "a Slack message",
        "images",
        "the user's notes",
        "a spreadsheet row",
    ];
    const TAILS: &[&str] = &[
        "",
        " by name",
        " for a city",
        " from the last week",
        " with optional filters",
        " and return JSON",
    ];
    (0..1000)
        .map(|i| {
            let verb = VERBS[i % VERBS.len()];
            let object = OBJECTS[(i / VERBS.len()) % OBJECTS.len()];
            let tail = TAILS[(i / 7) % TAILS.len()];
            format!("{verb} {object}{tail}")
        })
        .collect()
}

#[divan::bench(args = installed(), sample_count = 3, sample_size = 1)]
fn load_model(bencher: Bencher, model: LocalModel) {
    bencher.bench(|| load(model, &LoadOptions::default()));
}

#[divan::bench(args = installed(), sample_count = 50)]
fn single_query(bencher: Bencher, model: LocalModel) {
    let embedder = load(model, &LoadOptions::default());
    let query = vec!["find recent news about electric cars".to_string()];
    embed(&*embedder, &query, TextKind::Query); // warm-up: first call allocates
    bencher.bench(|| embed(&*embedder, &query, TextKind::Query));
}

/// The same query on one matmul thread (the default is the available parallelism).
#[divan::bench(args = installed(), sample_count = 50)]
fn single_query_one_thread(bencher: Bencher, model: LocalModel) {
    let options = LoadOptions {
        threads: 1,
        ..LoadOptions::default()
    };
    let embedder = load(model, &options);
    let query = vec!["find recent news about electric cars".to_string()];
    embed(&*embedder, &query, TextKind::Query);
    bencher.bench(|| embed(&*embedder, &query, TextKind::Query));
}

#[divan::bench(args = installed(), sample_count = 1, sample_size = 1)]
fn thousand_descriptions(bencher: Bencher, model: LocalModel) {
    let embedder = load(model, &LoadOptions::default());
    let texts = descriptions();
    bencher
        .counter(ItemsCount::new(texts.len()))
        .bench(|| embed(&*embedder, &texts, TextKind::Passage));
}

/// The same batch on one matmul thread, to re-check the notes' "one thread is faster on two
/// vCPUs" (it is not, with candle 0.11: see `embed::local`).
#[divan::bench(args = installed(), sample_count = 1, sample_size = 1)]
fn thousand_descriptions_one_thread(bencher: Bencher, model: LocalModel) {
    let options = LoadOptions {
        threads: 1,
        ..LoadOptions::default()
    };
    let embedder = load(model, &options);
    let texts = descriptions();
    bencher
        .counter(ItemsCount::new(texts.len()))
        .bench(|| embed(&*embedder, &texts, TextKind::Passage));
}
