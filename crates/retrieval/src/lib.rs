//! `retrieval` ranks plain documents against queries: lexical (BM25F), semantic (cosine over
//! vectors the caller computed) and hybrid (fusion of the two, by normalised scores or by
//! weighted reciprocal ranks).
//!
//! Entry points: [`Bm25Index::build`] indexes a slice of [`Document`]s once (rebuild when
//! the documents change); [`Bm25Index::rank`] returns every matching document, full depth,
//! for one query. [`tokenize`] and [`Analyzer`] define the terms both sides share.
//! [`VectorIndex::build`] and [`VectorIndex::rank`] do the same for embeddings (every kept
//! document is ranked), and [`SparseIndex`] for learned sparse vectors (SPLADE; documents
//! that share a term with the query). [`fuse`] combines full-depth rankings by weighted RRF,
//! [`fuse_scores_top`] by a weighted sum of per-query min-max normalised scores, and
//! [`Hybrid`] is the lexical/semantic policy on top (balance, query-dependent [`Adaptive`]
//! weights, minimum similarity). [`Bm25Index::rank_with`] adds pseudo-relevance
//! [`Feedback`] (RM3). [`group_prior`] and [`cap_per_group`] reorder a ranking by the
//! documents' groups (a catalog's servers): the group's standing as a prior, best groups
//! first, or at most so many documents of one group in the head.
//!
//! Architecture invariants:
//! - No MCP, no IO, no async, no serde: documents arrive as plain strings, results leave
//!   as [`DocId`]s into the caller's slice. No runtime dependency beyond `std`, so the
//!   crate is cheap to build, benchmark and property-test.
//! - No panics on any input: every string, every parameter value (NaN included) is handled.
//! - Ranking is deterministic and total: score descending, then [`Document::key`]
//!   ascending, then [`DocId`]; the order of words in a query does not change it. The same
//!   holds for vector and fused rankings (ties by key, then `DocId`).
//! - Rankings are full depth: fusion sees every document's true rank in each list.
//! - Filters narrow before ranking: a document rejected by `keep` is never scored, and
//!   corpus statistics are the whole index's, so a filter never changes a survivor's score
//!   (except through [`Feedback`], whose feedback documents are chosen among the survivors).

mod analyzer;
mod bm25;
mod document;
mod english;
mod groups;
mod hybrid;
mod needs;
mod sparse;
mod vector;

pub use analyzer::{Analyzer, Language, tokenize};
pub use bm25::{Bm25Index, Bm25Params, FEEDBACK_DOC_TERMS, Feedback, FieldWeights, Hit};
pub use document::{DocId, Document, Field};
pub use groups::{GroupPrior, GroupScore, apply_prior, cap_per_group, group_prior, group_ranks};
pub use hybrid::{
    ADAPTIVE_RANGE, Adaptive, Fusion, Hybrid, RRF_K, Ranked, fuse, fuse_scores_top, fuse_top,
    fuse_with, scale, score_span,
};
pub use needs::{MAX_NEEDS, split_needs};
pub use sparse::SparseIndex;
pub use vector::{VectorError, VectorIndex};
