//! Learned sparse ranking (SPLADE): documents and queries are weights over a vocabulary of
//! term ids, computed by the caller's model; a document scores the dot product of its weights
//! with the query's.
//!
//! An inverted index: each term id has a postings list of `(document, weight)`, so a query
//! touches only the documents that share one of its terms, like BM25. A document that shares
//! none is not ranked (score 0 is "no evidence", not a place at the bottom).

use std::collections::HashMap;
use std::fmt;

use crate::bm25::Hit;
use crate::document::DocId;
use crate::vector::{pack, sorted_hits};

/// An immutable inverted index of sparse document vectors.
#[derive(Clone, Default)]
pub struct SparseIndex {
    postings: HashMap<u32, Vec<(DocId, f32)>>,
    keys: Vec<String>,
    /// Position of each document when all are sorted by `(key, doc)`, as in `Bm25Index`.
    key_rank: Vec<u32>,
    by_key: Vec<DocId>,
}

impl SparseIndex {
    /// Indexes one `(term id, weight)` list per key; `DocId`s are positions. Weights that are
    /// not finite and positive are dropped (they carry no evidence), as is a repeated term
    /// after its first weight. Extra vectors or keys beyond the shorter list are ignored.
    pub fn build(keys: Vec<String>, vectors: &[Vec<(u32, f32)>]) -> SparseIndex {
        let count = keys.len().min(vectors.len()).min(DocId::MAX as usize);
        let mut keys = keys;
        keys.truncate(count);
        let mut postings: HashMap<u32, Vec<(DocId, f32)>> = HashMap::new();
        for (doc, vector) in vectors.iter().take(count).enumerate() {
            for &(term, weight) in vector {
                if !(weight.is_finite() && weight > 0.0) {
                    continue;
                }
                let list = postings.entry(term).or_default();
                if list.last().is_some_and(|&(last, _)| last == doc as DocId) {
                    continue;
                }
                list.push((doc as DocId, weight));
            }
        }
        let mut by_key: Vec<DocId> = (0..count as DocId).collect();
        by_key.sort_unstable_by(|&a, &b| keys[a as usize].cmp(&keys[b as usize]).then(a.cmp(&b)));
        let mut key_rank = vec![0; count];
        for (rank, &doc) in by_key.iter().enumerate() {
            key_rank[doc as usize] = rank as u32;
        }
        SparseIndex {
            postings,
            keys,
            key_rank,
            by_key,
        }
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Number of distinct term ids with postings.
    pub fn terms(&self) -> usize {
        self.postings.len()
    }

    /// Full-depth ranking of the documents that pass `keep` and share a term with `query`, by
    /// dot product descending, ties by key ascending, then by `DocId`. Query weights that are
    /// not finite and positive are ignored; a repeated query term counts once.
    pub fn rank(&self, query: &[(u32, f32)], keep: &dyn Fn(DocId) -> bool) -> Vec<Hit> {
        let mut scores: Vec<f32> = vec![0.0; self.len()];
        let mut touched: Vec<DocId> = Vec::new();
        let mut seen: Vec<u32> = Vec::with_capacity(query.len());
        for &(term, weight) in query {
            if !(weight.is_finite() && weight > 0.0) || seen.contains(&term) {
                continue;
            }
            seen.push(term);
            for &(doc, w) in self.postings.get(&term).into_iter().flatten() {
                let slot = &mut scores[doc as usize];
                if *slot == 0.0 {
                    touched.push(doc);
                }
                *slot += weight * w;
            }
        }
        let order: Vec<u64> = touched
            .into_iter()
            .filter(|&doc| keep(doc))
            .map(|doc| pack(scores[doc as usize], self.key_rank[doc as usize]))
            .collect();
        sorted_hits(order, &self.by_key)
    }
}

impl fmt::Debug for SparseIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SparseIndex")
            .field("docs", &self.len())
            .field("terms", &self.terms())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> SparseIndex {
        SparseIndex::build(
            vec![
                "weather".into(),
                "news".into(),
                "mail".into(),
                "also_news".into(),
            ],
            &[
                vec![(1, 2.0), (2, 0.5)],
                vec![(3, 1.0), (2, 1.0)],
                vec![(4, 1.0)],
                vec![(3, 1.0), (2, 1.0), (9, f32::NAN), (8, -1.0)],
            ],
        )
    }

    fn check(query: &[(u32, f32)], keep: &dyn Fn(DocId) -> bool, expect: &[(DocId, f32)]) {
        let got: Vec<(DocId, f32)> = index()
            .rank(query, keep)
            .into_iter()
            .map(|hit| (hit.doc, hit.score))
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn ranks_by_dot_product_only_documents_sharing_a_term() {
        // weather 2·1 + 0.5·1 = 2.5; news and also_news 1·1 = 1, tied, by key.
        check(
            &[(1, 1.0), (2, 1.0)],
            &|_| true,
            &[(0, 2.5), (3, 1.0), (1, 1.0)],
        );
        check(&[(3, 2.0)], &|_| true, &[(3, 2.0), (1, 2.0)]);
        check(&[(7, 1.0)], &|_| true, &[]);
        check(&[], &|_| true, &[]);
    }

    #[test]
    fn filter_bad_weights_and_repeats_are_handled() {
        check(&[(2, 1.0)], &|doc| doc != 0, &[(3, 1.0), (1, 1.0)]);
        // NaN, negative and repeated query terms are ignored; so were the bad document ones.
        check(
            &[
                (9, 1.0),
                (8, 1.0),
                (4, f32::NAN),
                (4, -2.0),
                (4, 1.0),
                (4, 5.0),
            ],
            &|_| true,
            &[(2, 1.0)],
        );
        let mismatched = SparseIndex::build(vec!["a".into()], &[vec![(1, 1.0)], vec![(1, 1.0)]]);
        assert_eq!(mismatched.len(), 1);
        assert_eq!(mismatched.rank(&[(1, 1.0)], &|_| true).len(), 1);
    }
}
