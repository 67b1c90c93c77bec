//! `eval` measures mcpgw's tool search on labelled sets: ranking quality (nDCG@10,
//! Recall@5/@10, MRR@10, Comp@5) and speed (index build, embedding, search latency).
//!
//! A set is a folder of `tools.json`, `queries.jsonl` and `qrels.tsv` ([`Dataset::load`];
//! `eval/metatool/` in the repository is one). Its tools go through
//! [`catalog::Catalog::build`] exactly as a live server's would, qrels are resolved
//! to qualified names through the catalog, and every query goes through
//! [`catalog::Catalog::search_with`], the same call the gateway makes; so the figures are the
//! product's, not a re-implementation's.
//!
//! Entry points: [`Dataset::load`], [`evaluate`] (async, because embedders are), and the
//! [`Report`] types it returns. [`Metrics`] holds the metric definitions. Embeddings go
//! through an [`EmbeddingCache`] ([`FileCache`] on disk by default) so reruns are fast.
//!
//! Invariant: no figure is made up. A strategy that cannot run (no model, embedding failed)
//! is reported as skipped with the reason, never as zeros; BM25 always runs.

pub mod cache;
pub mod dataset;
pub mod evaluation;
pub mod metrics;
pub mod report;

use std::path::PathBuf;

pub use cache::{CacheKey, EmbeddingCache, FileCache, MemoryCache};
pub use dataset::{Dataset, Query, ToolRef};
pub use evaluation::{Options, Progress, Semantic, SemanticBlend, Silent, SpladeRun, evaluate};
pub use metrics::Metrics;
pub use report::{
    CompleteWithin, EmbeddingReport, Figures, NeedsCovered, Outcome, QueryNeeds, Report, SetReport,
    Settings, SparseReport, StrategyReport, Subset,
};

/// Why a set could not be read or evaluated. Messages are lower-case.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // The io errors are part of the message rather than a `source`: anyhow's `{:#}` would
    // print them twice otherwise.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}:{line}: {reason}", path.display())]
    Parse {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("embedding cache {}: {error}", path.display())]
    Cache {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Embed(#[from] embed::EmbedError),
    #[error("cannot attach tool vectors: {0}")]
    Vectors(catalog::Error),
}
