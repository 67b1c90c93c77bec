//! `retrieval` ranks plain documents against text queries: BM25F today, vector and hybrid
//! strategies later.
//!
//! Entry points: [`Bm25Index::build`] indexes a slice of [`Document`]s once (rebuild when
//! the documents change); [`Bm25Index::rank`] returns every matching document, full depth,
//! for one query. [`tokenize`] and [`Analyzer`] define the terms both sides share.
//!
//! Architecture invariants:
//! - No MCP, no IO, no async, no serde: documents arrive as plain strings, results leave
//!   as [`DocId`]s into the caller's slice. No runtime dependency beyond `std`, so the
//!   crate is cheap to build, benchmark and property-test.
//! - No panics on any input: every string, every parameter value (NaN included) is handled.
//! - Ranking is deterministic and total: score descending, then [`Document::key`]
//!   ascending, then [`DocId`]; the order of words in a query does not change it.
//! - Filters narrow before ranking: a document rejected by `keep` is never scored, and
//!   corpus statistics are the whole index's, so a filter never changes a survivor's score.

mod analyzer;
mod bm25;
mod document;

pub use analyzer::{Analyzer, tokenize};
pub use bm25::{Bm25Index, Bm25Params, FieldWeights, Hit};
pub use document::{DocId, Document, Field};
