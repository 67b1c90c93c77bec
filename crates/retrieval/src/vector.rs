//! Vector ranking: cosine similarity of one query vector against every document vector.
//!
//! Embeddings arrive as plain `f32` vectors (computing them is the `embed` crate's job). The
//! index stores them unit-normalised in one contiguous buffer, so a query is one dot product
//! per kept document and a sort; no approximate nearest-neighbour structure, because tool
//! catalogs are small and exact full-depth ranks are what fusion needs. 10k tools x 384
//! dimensions is 15 MB and ranks in about 0.5 ms (`benches/vector.rs`, 2-core EPYC, release):
//! 0.4 ms of dot products, bound by memory bandwidth rather than arithmetic (32 accumulator
//! lanes or `target-cpu=native` gain little), and 0.1 ms of sorting.
//!
//! Rejected: an ANN index (HNSW) — approximate, and only faster far beyond catalog sizes;
//! quantising to `i8` — would change scores and ties for a saving nobody needs yet.

use std::fmt;

use crate::bm25::Hit;
use crate::document::DocId;

/// Why a set of vectors cannot be indexed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VectorError {
    /// `keys` and `vectors` differ in length.
    CountMismatch { keys: usize, vectors: usize },
    /// A vector's length differs from the first vector's.
    DimensionMismatch {
        doc: usize,
        expected: usize,
        found: usize,
    },
    /// A vector has a NaN or infinite component.
    NotFinite { doc: usize },
    /// The vectors have no components at all.
    ZeroDimension,
    /// More documents than a [`DocId`] can address.
    TooMany { count: usize },
}

impl fmt::Display for VectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VectorError::CountMismatch { keys, vectors } => {
                write!(f, "{keys} keys but {vectors} vectors")
            }
            VectorError::DimensionMismatch {
                doc,
                expected,
                found,
            } => write!(
                f,
                "vector {doc} has {found} components, expected {expected}"
            ),
            VectorError::NotFinite { doc } => write!(f, "vector {doc} has a non-finite component"),
            VectorError::ZeroDimension => write!(f, "vectors have no components"),
            VectorError::TooMany { count } => {
                write!(f, "{count} vectors are more than an index holds")
            }
        }
    }
}

impl std::error::Error for VectorError {}

/// An immutable index of unit-normalised document vectors, all of one dimension.
#[derive(Clone)]
pub struct VectorIndex {
    dim: usize,
    /// Document `d`'s vector is `data[d * dim..(d + 1) * dim]`, unit length (or all zeros for
    /// a zero input vector, which then scores 0 against everything).
    data: Vec<f32>,
    keys: Vec<String>,
    /// Position of each document when all are sorted by `(key, doc)`, as in `Bm25Index`.
    key_rank: Vec<u32>,
    by_key: Vec<DocId>,
}

impl VectorIndex {
    /// Indexes one vector per key; `DocId`s are positions. Vectors are normalised here, so an
    /// embedder that forgets to normalise still ranks by cosine. An empty input gives an empty
    /// index of dimension 0.
    pub fn build(keys: Vec<String>, vectors: &[Vec<f32>]) -> Result<VectorIndex, VectorError> {
        if keys.len() != vectors.len() {
            return Err(VectorError::CountMismatch {
                keys: keys.len(),
                vectors: vectors.len(),
            });
        }
        if vectors.len() > DocId::MAX as usize {
            return Err(VectorError::TooMany {
                count: vectors.len(),
            });
        }
        let dim = vectors.first().map_or(0, Vec::len);
        if dim == 0 && !vectors.is_empty() {
            return Err(VectorError::ZeroDimension);
        }
        let mut data = Vec::with_capacity(dim * vectors.len());
        for (doc, vector) in vectors.iter().enumerate() {
            if vector.len() != dim {
                return Err(VectorError::DimensionMismatch {
                    doc,
                    expected: dim,
                    found: vector.len(),
                });
            }
            if !vector.iter().all(|x| x.is_finite()) {
                return Err(VectorError::NotFinite { doc });
            }
            let start = data.len();
            data.extend_from_slice(vector);
            normalise(&mut data[start..]);
        }

        let mut by_key: Vec<DocId> = (0..keys.len() as DocId).collect();
        by_key.sort_unstable_by(|&a, &b| keys[a as usize].cmp(&keys[b as usize]).then(a.cmp(&b)));
        let mut key_rank = vec![0; keys.len()];
        for (rank, &doc) in by_key.iter().enumerate() {
            key_rank[doc as usize] = rank as u32;
        }
        Ok(VectorIndex {
            dim,
            data,
            keys,
            key_rank,
            by_key,
        })
    }

    /// Number of components of every vector (0 for an empty index).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key of `doc`, as given to [`VectorIndex::build`].
    pub fn key(&self, doc: DocId) -> Option<&str> {
        self.keys.get(doc as usize).map(String::as_str)
    }

    /// The unit-normalised vector of `doc` (all zeros for a zero input vector).
    pub fn vector(&self, doc: DocId) -> Option<&[f32]> {
        let start = (doc as usize).checked_mul(self.dim)?;
        self.data.get(start..start + self.dim)
    }

    /// Full-depth ranking: every document that passes `keep`, by cosine similarity to `query`
    /// descending, ties by key ascending, then by `DocId`. `keep` is asked once per document,
    /// before scoring.
    ///
    /// A query of the wrong dimension or with a non-finite component ranks nothing (there is
    /// no meaningful order); a zero query scores 0 everywhere and so ranks by key.
    pub fn rank(&self, query: &[f32], keep: &dyn Fn(DocId) -> bool) -> Vec<Hit> {
        if query.len() != self.dim || self.dim == 0 || !query.iter().all(|x| x.is_finite()) {
            return Vec::new();
        }
        let mut query = query.to_vec();
        normalise(&mut query);

        // Same packed-integer sort as `Bm25Index::rank`: high half an order-preserving encoding
        // of the score (descending), low half the key rank.
        let mut order: Vec<u64> = Vec::with_capacity(self.len());
        for (doc, vector) in self.data.chunks_exact(self.dim).enumerate() {
            let doc = doc as DocId;
            if !keep(doc) {
                continue;
            }
            // Unit vectors: the dot product is within [-1, 1] up to rounding; clamping keeps
            // the scores in their documented range. `+ 0.0` turns -0.0 into 0.0 so the two
            // zeros sort together.
            let score = dot(&query, vector).clamp(-1.0, 1.0) + 0.0;
            order.push(pack(score, self.key_rank[doc as usize]));
        }
        sorted_hits(order, &self.by_key)
    }
}

impl fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VectorIndex")
            .field("docs", &self.len())
            .field("dim", &self.dim)
            .finish()
    }
}

/// Scales `v` to unit length; a zero vector stays zero.
fn normalise(v: &mut [f32]) {
    let norm = dot(v, v).sqrt();
    if norm > 0.0 && norm.is_finite() {
        for x in v {
            *x /= norm;
        }
    } else if !norm.is_finite() {
        // Components are finite but their squares overflowed: scale down first.
        let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        for x in v.iter_mut() {
            *x /= max;
        }
        normalise(v);
    }
}

/// Dot product with eight independent accumulators: float addition is not associative, so
/// the compiler will not vectorise a single running sum on its own; eight lanes let it use
/// SIMD registers and hide the add latency.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut acc = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (a_rest, b_rest) = (a_chunks.remainder(), b_chunks.remainder());
    for (x, y) in a_chunks.zip(b_chunks) {
        for lane in 0..LANES {
            acc[lane] += x[lane] * y[lane];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for (x, y) in a_rest.iter().zip(b_rest) {
        sum += x * y;
    }
    sum
}

/// A hit packed into one integer that sorts best first: the high half an order-preserving
/// encoding of `score`, inverted (descending), the low half the document's key rank (ties by
/// key ascending).
pub(crate) fn pack(score: f32, key_rank: u32) -> u64 {
    (u64::from(!sortable(score)) << 32) | u64::from(key_rank)
}

/// Sorts hits packed by [`pack`] and unpacks them, `by_key` mapping a key rank to its document.
pub(crate) fn sorted_hits(mut order: Vec<u64>, by_key: &[DocId]) -> Vec<Hit> {
    order.sort_unstable();
    order
        .into_iter()
        .map(|packed| Hit {
            doc: by_key[(packed as u32) as usize],
            score: unsortable(!((packed >> 32) as u32)),
        })
        .collect()
}

/// The bits of `x` as an unsigned integer that orders like `x` (for non-NaN floats).
pub(crate) fn sortable(x: f32) -> u32 {
    let bits = x.to_bits();
    if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// The inverse of [`sortable`].
pub(crate) fn unsortable(bits: u32) -> f32 {
    if bits & 0x8000_0000 != 0 {
        f32::from_bits(bits & 0x7fff_ffff)
    } else {
        f32::from_bits(!bits)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn order<'a>(index: &'a VectorIndex, query: &[f32]) -> Vec<&'a str> {
        index
            .rank(query, &|_| true)
            .iter()
            .filter_map(|hit| index.key(hit.doc))
            .collect()
    }

    #[test]
    fn ranks_every_document_by_cosine() {
        let index = VectorIndex::build(
            keys(&["east", "north", "west", "northeast"]),
            &[
                vec![1.0, 0.0],
                vec![0.0, 1.0],
                vec![-1.0, 0.0],
                vec![1.0, 1.0],
            ],
        )
        .expect("valid");
        assert_eq!(index.dim(), 2);
        assert_eq!(
            order(&index, &[1.0, 0.1]),
            ["east", "northeast", "north", "west"]
        );
        let hits = index.rank(&[2.0, 0.0], &|_| true);
        let scores: Vec<f32> = hits.iter().map(|hit| hit.score).collect();
        let half = std::f32::consts::FRAC_1_SQRT_2;
        assert!((scores[0] - 1.0).abs() < 1e-6, "{scores:?}");
        assert!((scores[1] - half).abs() < 1e-6, "{scores:?}");
        assert!(scores[2].abs() < 1e-6, "{scores:?}");
        assert!((scores[3] + 1.0).abs() < 1e-6, "{scores:?}");
    }

    #[test]
    fn unnormalised_input_ranks_like_normalised() {
        let raw = VectorIndex::build(keys(&["a", "b"]), &[vec![10.0, 0.0], vec![0.3, 0.4]])
            .expect("valid");
        let unit = VectorIndex::build(keys(&["a", "b"]), &[vec![1.0, 0.0], vec![0.6, 0.8]])
            .expect("valid");
        assert_eq!(
            raw.rank(&[0.0, 5.0], &|_| true),
            unit.rank(&[0.0, 1.0], &|_| true)
        );
    }

    #[test]
    fn ties_break_by_key_then_doc_id() {
        let same = vec![1.0, 0.0];
        let index = VectorIndex::build(
            keys(&["b", "a", "c", "a"]),
            &[same.clone(), same.clone(), same.clone(), same],
        )
        .expect("valid");
        let docs: Vec<DocId> = index
            .rank(&[1.0, 0.0], &|_| true)
            .iter()
            .map(|h| h.doc)
            .collect();
        assert_eq!(docs, [1, 3, 0, 2]);
    }

    #[test]
    fn keep_filter_excludes_even_the_best_match() {
        let index =
            VectorIndex::build(keys(&["best", "worst"]), &[vec![1.0, 0.0], vec![-1.0, 0.0]])
                .expect("valid");
        let hits = index.rank(&[1.0, 0.0], &|doc| doc != 0);
        assert_eq!(hits.len(), 1);
        assert_eq!(index.key(hits[0].doc), Some("worst"));
    }

    #[test]
    fn invalid_vectors_are_rejected_with_the_reason() {
        let check = |keys: Vec<String>, vectors: &[Vec<f32>], expected: &str| {
            let error = VectorIndex::build(keys, vectors).expect_err("invalid");
            assert_eq!(error.to_string(), expected);
        };
        check(keys(&["a"]), &[], "1 keys but 0 vectors");
        check(
            keys(&["a", "b"]),
            &[vec![1.0, 2.0], vec![1.0]],
            "vector 1 has 1 components, expected 2",
        );
        check(
            keys(&["a"]),
            &[vec![f32::NAN]],
            "vector 0 has a non-finite component",
        );
        check(keys(&["a"]), &[vec![]], "vectors have no components");
    }

    #[test]
    fn bad_queries_rank_nothing_and_zero_query_ranks_by_key() {
        let index = VectorIndex::build(keys(&["b", "a"]), &[vec![1.0, 0.0], vec![0.0, 1.0]])
            .expect("valid");
        assert_eq!(index.rank(&[1.0], &|_| true), []);
        assert_eq!(index.rank(&[f32::INFINITY, 0.0], &|_| true), []);
        assert_eq!(order(&index, &[0.0, 0.0]), ["a", "b"]);
        let empty = VectorIndex::build(Vec::new(), &[]).expect("valid");
        assert!(empty.is_empty());
        assert_eq!(empty.rank(&[], &|_| true), []);
    }

    #[test]
    fn huge_components_still_normalise() {
        let index = VectorIndex::build(
            keys(&["a", "b"]),
            &[vec![f32::MAX, f32::MAX], vec![1.0, 0.0]],
        )
        .expect("valid");
        let hits = index.rank(&[1.0, 1.0], &|_| true);
        assert_eq!(index.key(hits[0].doc), Some("a"));
        assert!((hits[0].score - 1.0).abs() < 1e-6, "{hits:?}");
    }

    #[test]
    fn sortable_encoding_orders_like_floats() {
        let values = [-1.0f32, -0.5, -1e-30, 0.0, 1e-30, 0.25, 1.0];
        for pair in values.windows(2) {
            assert!(sortable(pair[0]) < sortable(pair[1]), "{pair:?}");
        }
        for x in values {
            assert_eq!(unsortable(sortable(x)), x);
        }
    }

    fn vectors(dim: usize) -> impl Strategy<Value = Vec<Vec<f32>>> {
        prop::collection::vec(prop::collection::vec(-4i8..=4, dim), 0..10).prop_map(|vs| {
            vs.into_iter()
                .map(|v| v.into_iter().map(f32::from).collect())
                .collect()
        })
    }

    proptest! {
        #[test]
        fn ranking_is_full_depth_sorted_and_filtered(
            docs in vectors(5),
            query in prop::collection::vec(-4i8..=4, 5),
            mask in prop::collection::vec(any::<bool>(), 10),
        ) {
            let keys: Vec<String> = (0..docs.len()).map(|i| format!("k{}", i % 3)).collect();
            let index = VectorIndex::build(keys.clone(), &docs).expect("valid");
            let query: Vec<f32> = query.into_iter().map(f32::from).collect();
            let keep = |doc: DocId| mask[doc as usize];
            let hits = index.rank(&query, &keep);
            prop_assert_eq!(&hits, &index.rank(&query, &keep));
            let expected = (0..docs.len()).filter(|&d| mask[d]).count();
            prop_assert_eq!(hits.len(), expected);
            for pair in hits.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                prop_assert!(
                    a.score > b.score
                        || (a.score == b.score && (&keys[a.doc as usize], a.doc) < (&keys[b.doc as usize], b.doc)),
                    "{:?} before {:?}", a, b
                );
            }
            prop_assert!(hits.iter().all(|h| (-1.0..=1.0).contains(&h.score)));
        }
    }
}
