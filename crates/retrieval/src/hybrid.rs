//! Hybrid ranking: fusion of full-depth ranked lists, by ranks or by normalised scores.
//!
//! By ranks (weighted reciprocal rank fusion, RRF, [`fuse_top`]): a document at rank `r`
//! (1-based) in a list of weight `w` contributes `w / (RRF_K + r)`; contributions add up over
//! lists. By scores ([`fuse_scores_top`]): each list's scores are scaled to 0..1 for this query
//! (its best score 1, its floor or lowest score 0) and a document contributes `w` times its
//! scaled score. BM25 scores and cosine similarities live on unrelated scales, which the
//! per-query scaling removes while keeping what ranks throw away: how far ahead a list's first
//! hit is, and whether its top ten are all alike. On the four evaluation sets scores win
//! (docs/retrieval.md, round five), as Bruch et al. (2023, "An Analysis of Fusion Functions
//! for Hybrid Retrieval") found for text retrieval. Either way the inputs must be full depth
//! (every match, not a top k): cutting a list first would hide a document that ranks low in
//! one list and high in the other, and would move the scaled scores' lowest point, and so
//! change the fused order (DESIGN.md section 2).
//!
//! [`Hybrid`] is the policy on top: a balance between the lexical and the semantic list
//! (Rocket.Chat's "search balance": 0 lexical only, 100 semantic only), optionally moved per
//! query by its length ([`Adaptive`]), the [`Fusion`], and a minimum similarity that drops weak
//! vector hits but never a lexical one.
//!
//! RRF's `k` is 60, the value of Cormack et al. (2009) that most systems use: one knob less to
//! drift, and the balance already says how much each list counts ([`Fusion::Ranks`] takes
//! another for measuring).

use crate::bm25::Hit;
use crate::document::DocId;

/// The RRF constant `k`: it flattens the head of each list so a first place does not
/// outweigh everything else.
pub const RRF_K: f32 = 60.0;

/// Fuses ranked lists by weighted RRF: `score(d) = sum of w / (RRF_K + rank)` over the lists
/// containing `d`, ranks starting at 1. Sorted by fused score descending, ties by `key`
/// ascending, then by [`DocId`].
///
/// A list whose weight is not finite and positive is ignored entirely: its documents are not
/// added, so weight 0 means "this list is off", not "its documents score 0". A document that
/// repeats within one list counts once, at its first (best) rank. Input scores are not read.
pub fn fuse<'k>(lists: &[(&[Hit], f32)], key: &dyn Fn(DocId) -> &'k str) -> Vec<Hit> {
    fuse_top(lists, key, usize::MAX)
}

/// The first `limit` hits of [`fuse`], in the same order, without sorting the rest: the
/// inputs stay full depth, only the fused list's tail is left unsorted and dropped.
pub fn fuse_top<'k>(
    lists: &[(&[Hit], f32)],
    key: &dyn Fn(DocId) -> &'k str,
    limit: usize,
) -> Vec<Hit> {
    fuse_ranks(lists, RRF_K, key, limit)
}

/// How a hybrid search combines its ranked lists.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fusion {
    /// Weighted reciprocal rank fusion with constant `k` ([`fuse_top`] at `k` = [`RRF_K`]).
    Ranks { k: f32 },
    /// A weighted sum of each list's scores, each list min-max normalised per query
    /// ([`fuse_scores_top`]).
    Scores,
}

impl Default for Fusion {
    fn default() -> Self {
        Fusion::Ranks { k: RRF_K }
    }
}

/// One ranked list for [`fuse_with`]: its hits (full depth), its weight, and the score a
/// document absent from it would have, when there is one (BM25 and sparse lists: 0, since
/// they leave out exactly the documents sharing no term with the query). A list without a
/// floor (the vector list, which ranks every kept document) is normalised from its own lowest
/// score.
#[derive(Clone, Copy, Debug)]
pub struct Ranked<'a> {
    pub hits: &'a [Hit],
    pub weight: f32,
    pub floor: Option<f32>,
}

impl<'a> Ranked<'a> {
    /// A list that leaves out exactly the documents scoring 0 (BM25, a sparse list).
    pub fn from_zero(hits: &'a [Hit], weight: f32) -> Ranked<'a> {
        Ranked {
            hits,
            weight,
            floor: Some(0.0),
        }
    }

    /// A list that ranks every kept document (the vector list): scaled from its lowest score.
    pub fn from_lowest(hits: &'a [Hit], weight: f32) -> Ranked<'a> {
        Ranked {
            hits,
            weight,
            floor: None,
        }
    }
}

/// The first `limit` hits of fusing `lists` the way `fusion` says.
pub fn fuse_with<'k>(
    fusion: Fusion,
    lists: &[Ranked<'_>],
    key: &dyn Fn(DocId) -> &'k str,
    limit: usize,
) -> Vec<Hit> {
    match fusion {
        Fusion::Ranks { k } => {
            let plain: Vec<(&[Hit], f32)> = lists.iter().map(|l| (l.hits, l.weight)).collect();
            let k = if k.is_finite() && k >= 0.0 { k } else { RRF_K };
            fuse_ranks(&plain, k, key, limit)
        }
        Fusion::Scores => fuse_scores_top(lists, key, limit),
    }
}

/// Fuses lists by a weighted sum of normalised scores: in each list a score `s` becomes
/// `(s - low) / (high - low)`, `high` the list's best score and `low` its floor (or its lowest
/// score when it has none, or when that is lower), so each list's best document gets 1 and
/// an absent one 0. A list whose scores are all equal gives each of its documents 1. Lists
/// with a weight that is not finite and positive are ignored, as in [`fuse_top`]; a score that
/// is not finite counts as `low`. Sorted by fused score descending, then `key`, then
/// [`DocId`]; only the first `limit` are returned.
pub fn fuse_scores_top<'k>(
    lists: &[Ranked<'_>],
    key: &dyn Fn(DocId) -> &'k str,
    limit: usize,
) -> Vec<Hit> {
    let lists: Vec<(&Ranked<'_>, f64)> = lists
        .iter()
        .filter(|list| list.weight.is_finite() && list.weight > 0.0)
        .map(|list| (list, f64::from(list.weight)))
        .collect();
    let plain: Vec<(&[Hit], f64)> = lists.iter().map(|(l, w)| (l.hits, *w)).collect();
    let total: usize = plain.iter().map(|(list, _)| list.len()).sum();
    let mut slots = Slots::new(&plain, total);
    let mut fused: Vec<(DocId, f64, usize)> = Vec::with_capacity(total);
    for (at_list, &(list, weight)) in lists.iter().enumerate() {
        let Some((low, high)) = score_span(list.hits, list.floor) else {
            // No usable score: every document of the list sits at its floor.
            continue;
        };
        for hit in list.hits {
            let normalised = scale(f64::from(hit.score), (f64::from(low), f64::from(high)));
            add(
                &mut fused,
                &mut slots,
                hit.doc,
                weight * normalised,
                at_list,
            );
        }
    }
    select(fused, key, limit)
}

/// The `(low, high)` that [`fuse_scores_top`] normalises a list's scores between: its best
/// finite score, and its floor or its lowest finite score, whichever is lower. `None` when the
/// list has no finite score.
pub fn score_span(hits: &[Hit], floor: Option<f32>) -> Option<(f32, f32)> {
    let finite = || hits.iter().map(|hit| hit.score).filter(|s| s.is_finite());
    let high = finite().reduce(f32::max)?;
    let lowest = finite().reduce(f32::min).unwrap_or(high);
    let low = match floor {
        Some(floor) if floor.is_finite() => floor.min(lowest),
        _ => lowest,
    };
    Some((low, high))
}

/// `score` scaled between a list's `(low, high)` span ([`score_span`]) as [`fuse_scores_top`]
/// counts it: 0 at `low`, 1 at `high`, clamped between; a score that is not finite counts as
/// `low`, and every score of a list whose span is empty counts 1.
pub fn scale(score: f64, (low, high): (f64, f64)) -> f64 {
    let range = high - low;
    if range <= 0.0 || !range.is_finite() {
        1.0
    } else if score.is_finite() {
        ((score - low) / range).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// Weighted RRF at constant `k`: the body of [`fuse_top`].
fn fuse_ranks<'k>(
    lists: &[(&[Hit], f32)],
    k: f32,
    key: &dyn Fn(DocId) -> &'k str,
    limit: usize,
) -> Vec<Hit> {
    let lists: Vec<(&[Hit], f64)> = lists
        .iter()
        .filter(|(_, weight)| weight.is_finite() && *weight > 0.0)
        .map(|&(list, weight)| (list, f64::from(weight)))
        .collect();
    let total: usize = lists.iter().map(|(list, _)| list.len()).sum();
    let mut slots = Slots::new(&lists, total);
    // (doc, fused score, last list that contributed); sums in f64, in list order, so the
    // result is deterministic and rounded once.
    let mut fused: Vec<(DocId, f64, usize)> = Vec::with_capacity(total);
    for (at_list, &(list, weight)) in lists.iter().enumerate() {
        for (at, hit) in list.iter().enumerate() {
            let contribution = weight / (f64::from(k) + (at + 1) as f64);
            add(&mut fused, &mut slots, hit.doc, contribution, at_list);
        }
    }
    select(fused, key, limit)
}

/// Adds list `at_list`'s `contribution` to `doc`'s fused entry: once per list, at the
/// document's first (best) place in it.
fn add(
    fused: &mut Vec<(DocId, f64, usize)>,
    slots: &mut Slots,
    doc: DocId,
    contribution: f64,
    at_list: usize,
) {
    match slots.get(doc) {
        Some(i) => {
            let entry = &mut fused[i];
            if entry.2 != at_list {
                entry.1 += contribution;
                entry.2 = at_list;
            }
        }
        None => {
            slots.set(doc, fused.len());
            fused.push((doc, contribution, at_list));
        }
    }
}

/// The first `limit` of the fused `(doc, score, _)` entries as hits, in the total order
/// (score descending, key, doc).
fn select<'k>(
    fused: Vec<(DocId, f64, usize)>,
    key: &dyn Fn(DocId) -> &'k str,
    limit: usize,
) -> Vec<Hit> {
    let mut hits: Vec<Hit> = fused
        .into_iter()
        .map(|(doc, score, _)| Hit {
            doc,
            score: score as f32,
        })
        .collect();
    // A total order (score, key, id), so partial selection gives the same head as a full sort.
    let order = |a: &Hit, b: &Hit| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| key(a.doc).cmp(key(b.doc)))
            .then(a.doc.cmp(&b.doc))
    };
    if limit == 0 {
        return Vec::new();
    }
    if limit < hits.len() {
        hits.select_nth_unstable_by(limit - 1, order);
        hits.truncate(limit);
    }
    hits.sort_unstable_by(order);
    hits
}

/// Where each document's entry is in the fused list: a dense table when document ids are
/// small (they are positions in a catalog, so they are), a map otherwise, so a stray huge id
/// cannot make fusion allocate gigabytes.
enum Slots {
    Dense(Vec<u32>),
    Sparse(std::collections::HashMap<DocId, usize>),
}

impl Slots {
    fn new(lists: &[(&[Hit], f64)], total: usize) -> Slots {
        let max = lists
            .iter()
            .flat_map(|(list, _)| list.iter().map(|hit| hit.doc as usize))
            .max();
        match max {
            Some(max) if max <= total.saturating_mul(4).saturating_add(1024) => {
                Slots::Dense(vec![u32::MAX; max + 1])
            }
            _ => Slots::Sparse(std::collections::HashMap::with_capacity(total)),
        }
    }

    fn get(&self, doc: DocId) -> Option<usize> {
        match self {
            Slots::Dense(table) => match table.get(doc as usize) {
                Some(&slot) if slot != u32::MAX => Some(slot as usize),
                _ => None,
            },
            Slots::Sparse(map) => map.get(&doc).copied(),
        }
    }

    fn set(&mut self, doc: DocId, slot: usize) {
        match self {
            Slots::Dense(table) => {
                if let Some(entry) = table.get_mut(doc as usize) {
                    // `total` bounds the number of entries, and it fits the table's u32s
                    // because catalogs hold at most u32::MAX documents.
                    *entry = u32::try_from(slot).unwrap_or(u32::MAX);
                }
            }
            Slots::Sparse(map) => {
                map.insert(doc, slot);
            }
        }
    }
}

/// How a lexical (BM25) and a semantic (vector) ranking are combined.
#[derive(Clone, Debug, PartialEq)]
pub struct Hybrid {
    /// 0..=100: 0 serves the lexical list only, 100 the semantic list only; in between the
    /// semantic list has weight `balance / 100` and the lexical list the rest (moved per query
    /// by [`Hybrid::adaptive`] when set). Values above 100 count as 100.
    pub balance: u8,
    /// Vector hits with a cosine similarity below this are dropped before fusion. Lexical hits
    /// are never dropped: an exact term match (an error code, a tool name) stays findable
    /// however far its embedding is from the query's.
    pub min_similarity: Option<f32>,
    /// Moves the semantic weight by the query's length; `None` keeps `balance / 100` for every
    /// query. Never applies at balance 0 or 100, which switch a list off.
    pub adaptive: Option<Adaptive>,
    /// How the lists are combined: by ranks (RRF) or by normalised scores.
    pub fusion: Fusion,
}

impl Default for Hybrid {
    fn default() -> Self {
        Hybrid {
            balance: 50,
            min_similarity: None,
            adaptive: None,
            fusion: Fusion::default(),
        }
    }
}

/// Query-dependent fusion: the semantic weight falls as the query grows.
///
/// ```text
/// semantic weight = balance / 100 - slope * (terms / span - pivot), clamped to 0.05..=0.95
/// ```
///
/// `terms` is the number of distinct terms the analyzer finds in the query. A short request
/// ("add two numbers") says too little for BM25 to tell tools apart, while an embedding still
/// carries its meaning; a long one names the objects and parameters a tool's text repeats, and
/// a sentence embedding of it blurs into an average. Three parameters, fitted on the four
/// evaluation sets and cross-validated (tune on three, report on the fourth:
/// docs/retrieval.md); the other signals tried (BM25's top-score margin, the agreement of the
/// two lists' heads, the share of query terms the index knows) did no better than length.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adaptive {
    /// How far the weight moves per `span` terms.
    pub slope: f32,
    /// The length, in spans, at which the configured balance applies unchanged.
    pub pivot: f32,
    /// Terms per unit of length.
    pub span: f32,
    /// Count whitespace-separated words (stop words included) instead of distinct analysed
    /// terms; the caller does the counting.
    pub words: bool,
}

impl Default for Adaptive {
    fn default() -> Self {
        // Cross-validated on the four sets (docs/retrieval.md): the configured balance holds
        // at 19.2 terms, and each 16 terms move the semantic weight by 0.2 (0.3 until round
        // six, whose blended vectors are stronger on long requests too).
        Adaptive {
            slope: 0.2,
            pivot: 1.2,
            span: 16.0,
            words: false,
        }
    }
}

/// The semantic weight never leaves this range under [`Adaptive`], so neither list is ever
/// switched off by a query's length alone.
pub const ADAPTIVE_RANGE: std::ops::RangeInclusive<f32> = 0.05..=0.95;

impl Adaptive {
    /// The semantic weight for a query of `terms` distinct terms, starting from `base`
    /// (0..=1). A parameter that is not finite leaves `base` as it is, and a `span` of zero
    /// or less counts as one term.
    pub fn semantic_weight(&self, base: f32, terms: usize) -> f32 {
        if !(self.slope.is_finite() && self.pivot.is_finite() && self.span.is_finite()) {
            return base;
        }
        let length = terms as f32 / self.span.max(1.0);
        let weight = base - self.slope * (length - self.pivot);
        if weight.is_nan() {
            return base;
        }
        weight.clamp(*ADAPTIVE_RANGE.start(), *ADAPTIVE_RANGE.end())
    }
}

impl Hybrid {
    /// The vector hits that pass [`Hybrid::min_similarity`], in their order. A NaN minimum
    /// drops nothing.
    pub fn strong<'a>(&self, vector: &'a [Hit]) -> std::borrow::Cow<'a, [Hit]> {
        match self.min_similarity {
            Some(min) if !min.is_nan() => vector
                .iter()
                .copied()
                .filter(|hit| hit.score >= min)
                .collect(),
            _ => std::borrow::Cow::Borrowed(vector),
        }
    }

    /// The weight of the semantic list for a query of `terms` distinct terms (the lexical
    /// list gets the rest): `balance / 100`, moved by [`Hybrid::adaptive`] when set and the
    /// balance is strictly between 0 and 100.
    pub fn semantic_weight(&self, terms: usize) -> f32 {
        let base = f32::from(self.balance.min(100)) / 100.0;
        match self.adaptive {
            Some(adaptive) if self.balance > 0 && self.balance < 100 => {
                adaptive.semantic_weight(base, terms)
            }
            _ => base,
        }
    }

    /// The hybrid ranking of one query of `terms` distinct terms from its full-depth BM25 and
    /// vector rankings.
    ///
    /// At balance 0 this is exactly `bm25`; at 100 exactly the strong vector hits. When one
    /// side is empty (no shared term, every vector hit too weak, or that search failed and the
    /// caller passed nothing) the other side is served as is, scores included; otherwise the
    /// scores are fused RRF scores, weighted by [`Hybrid::semantic_weight`].
    pub fn fuse<'k>(
        &self,
        bm25: &[Hit],
        vector: &[Hit],
        terms: usize,
        key: &dyn Fn(DocId) -> &'k str,
    ) -> Vec<Hit> {
        self.fuse_top(bm25, vector, terms, key, usize::MAX)
    }

    /// The first `limit` hits of [`Hybrid::fuse`], in the same order: what a search for the
    /// top k needs, without sorting the whole fused list.
    pub fn fuse_top<'k>(
        &self,
        bm25: &[Hit],
        vector: &[Hit],
        terms: usize,
        key: &dyn Fn(DocId) -> &'k str,
        limit: usize,
    ) -> Vec<Hit> {
        let vector = self.strong(vector);
        let head = |list: &[Hit]| list[..limit.min(list.len())].to_vec();
        if self.balance == 0 || vector.is_empty() {
            return head(bm25);
        }
        if self.balance >= 100 || bm25.is_empty() {
            return head(&vector);
        }
        let semantic = self.semantic_weight(terms);
        self.fuse_lists(
            &[
                Ranked::from_zero(bm25, 1.0 - semantic),
                Ranked::from_lowest(&vector, semantic),
            ],
            key,
            limit,
        )
    }

    /// The first `limit` hits of fusing `lists` by this policy's [`Fusion`]; weights and
    /// floors as given (no balance, no minimum similarity applied here).
    pub fn fuse_lists<'k>(
        &self,
        lists: &[Ranked<'_>],
        key: &dyn Fn(DocId) -> &'k str,
        limit: usize,
    ) -> Vec<Hit> {
        fuse_with(self.fusion, lists, key, limit)
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use proptest::prelude::*;

    use super::*;

    const KEYS: &[&str] = &["A", "B", "C", "D", "E", "F", "G", "H", "I", "J"];

    fn key(doc: DocId) -> &'static str {
        KEYS.get(doc as usize).copied().unwrap_or("")
    }

    fn list(docs: &[DocId]) -> Vec<Hit> {
        docs.iter()
            .enumerate()
            .map(|(at, &doc)| Hit {
                doc,
                score: 100.0 - at as f32,
            })
            .collect()
    }

    fn names(hits: &[Hit]) -> String {
        hits.iter()
            .map(|hit| key(hit.doc))
            .collect::<Vec<_>>()
            .join(" ")
    }

    const A: DocId = 0;
    const B: DocId = 1;
    const C: DocId = 2;
    const D: DocId = 3;
    const E: DocId = 4;
    const F: DocId = 5;

    #[test]
    fn three_tool_example_matches_the_design_notes() {
        // seeds/001: BM25 finds A then B; the vector search ranks C (no shared term) first,
        // then A and B. Unweighted RRF gives A 1/61 + 1/62, B 1/62 + 1/63, C 1/61.
        let bm25 = list(&[A, B]);
        let vector = list(&[C, A, B]);
        let fused = fuse(&[(&bm25, 1.0), (&vector, 1.0)], &key);
        assert_eq!(names(&fused), "A B C");
        let expected = [1.0 / 61.0 + 1.0 / 62.0, 1.0 / 62.0 + 1.0 / 63.0, 1.0 / 61.0];
        for (hit, expected) in fused.iter().zip(expected) {
            assert!((f64::from(hit.score) - expected).abs() < 1e-7, "{fused:?}");
        }
    }

    #[test]
    fn hybrid_recovers_semantic_only_match() {
        let bm25 = list(&[A, B]);
        let vector = list(&[C, A, B]);
        assert_eq!(
            names(&Hybrid::default().fuse(&bm25, &vector, 3, &key)),
            "A B C"
        );
    }

    #[test]
    fn weights_scale_contributions() {
        let bm25 = list(&[A, B]);
        let vector = list(&[B, A]);
        let lexical_heavy = fuse(&[(&bm25, 0.9), (&vector, 0.1)], &key);
        assert_eq!(names(&lexical_heavy), "A B");
        let semantic_heavy = fuse(&[(&bm25, 0.1), (&vector, 0.9)], &key);
        assert_eq!(names(&semantic_heavy), "B A");
        let score = f64::from(semantic_heavy[0].score);
        assert!((score - (0.9 / 61.0 + 0.1 / 62.0)).abs() < 1e-7, "{score}");
    }

    #[test]
    fn zero_or_invalid_weight_switches_a_list_off() {
        let bm25 = list(&[A]);
        let vector = list(&[C, B]);
        assert_eq!(names(&fuse(&[(&bm25, 1.0), (&vector, 0.0)], &key)), "A");
        assert_eq!(
            names(&fuse(&[(&bm25, f32::NAN), (&vector, 1.0)], &key)),
            "C B"
        );
        assert_eq!(
            names(&fuse(&[(&bm25, -1.0), (&vector, f32::INFINITY)], &key)),
            ""
        );
    }

    #[test]
    fn equal_fused_scores_tie_by_key() {
        let one = list(&[B, A]);
        let other = list(&[A, B]);
        assert_eq!(names(&fuse(&[(&one, 1.0), (&other, 1.0)], &key)), "A B");
    }

    #[test]
    fn huge_doc_ids_fuse_like_small_ones() {
        let far = |docs: &[DocId]| -> Vec<Hit> {
            list(docs)
                .into_iter()
                .map(|hit| Hit {
                    doc: hit.doc + 4_000_000_000,
                    ..hit
                })
                .collect()
        };
        let near = fuse(&[(&list(&[A, B]), 1.0), (&list(&[C, A]), 1.0)], &key);
        let far = fuse(&[(&far(&[A, B]), 1.0), (&far(&[C, A]), 1.0)], &|doc| {
            key(doc - 4_000_000_000)
        });
        let shifted: Vec<DocId> = far.iter().map(|hit| hit.doc - 4_000_000_000).collect();
        assert_eq!(shifted, near.iter().map(|hit| hit.doc).collect::<Vec<_>>());
    }

    #[test]
    fn repeated_document_counts_once_at_its_best_rank() {
        let repeated = list(&[A, B, A]);
        let fused = fuse(&[(&repeated, 1.0)], &key);
        assert_eq!(names(&fused), "A B");
        assert!((f64::from(fused[0].score) - 1.0 / 61.0).abs() < 1e-7);
    }

    fn scored(hits: &[(DocId, f32)]) -> Vec<Hit> {
        hits.iter()
            .map(|&(doc, score)| Hit { doc, score })
            .collect()
    }

    #[test]
    fn score_fusion_normalises_each_list_between_its_floor_and_its_best() {
        // BM25 from its floor 0: A 1, B 0.5. Vector from its lowest score: B 1, C 0.5, A 0.
        let bm25 = scored(&[(A, 10.0), (B, 5.0)]);
        let vector = scored(&[(B, 0.9), (C, 0.5), (A, 0.1)]);
        let lists = [
            Ranked {
                hits: &bm25,
                weight: 0.5,
                floor: Some(0.0),
            },
            Ranked {
                hits: &vector,
                weight: 0.5,
                floor: None,
            },
        ];
        let fused = fuse_scores_top(&lists, &key, usize::MAX);
        let shown: Vec<String> = fused
            .iter()
            .map(|hit| format!("{}:{:.3}", key(hit.doc), hit.score))
            .collect();
        assert_eq!(shown, ["B:0.750", "A:0.500", "C:0.250"]);
        // The same through the hybrid policy at balance 50.
        let hybrid = Hybrid {
            fusion: Fusion::Scores,
            ..Hybrid::default()
        };
        assert_eq!(hybrid.fuse(&bm25, &vector, 3, &key), fused);
        // Ranks agree on the order here; they differ once score gaps differ from rank gaps.
        assert_eq!(names(&fuse(&[(&bm25, 0.5), (&vector, 0.5)], &key)), "B A C");
    }

    #[test]
    fn score_fusion_survives_flat_lists_odd_scores_and_off_weights() {
        let flat = scored(&[(A, 2.0), (B, 2.0)]);
        let odd = scored(&[(C, f32::NAN), (B, f32::INFINITY), (A, 1.0), (D, 0.5)]);
        let lists = [
            Ranked {
                hits: &flat,
                weight: 1.0,
                floor: None,
            },
            Ranked {
                hits: &odd,
                weight: 1.0,
                floor: None,
            },
            Ranked {
                hits: &list(&[E]),
                weight: 0.0,
                floor: None,
            },
            Ranked {
                hits: &list(&[F]),
                weight: f32::NAN,
                floor: None,
            },
        ];
        let shown: Vec<String> = fuse_scores_top(&lists, &key, usize::MAX)
            .iter()
            .map(|hit| format!("{}:{:.3}", key(hit.doc), hit.score))
            .collect();
        // A flat list gives each of its documents 1; a score that is not finite counts as the
        // list's lowest; lists that are off add nothing, not even their documents.
        assert_eq!(shown, ["A:2.000", "B:1.000", "C:0.000", "D:0.000"]);
        assert_eq!(fuse_scores_top(&[], &key, 3), []);
        let empty: [Hit; 0] = [];
        let lists = [Ranked {
            hits: &empty,
            weight: 1.0,
            floor: Some(0.0),
        }];
        assert_eq!(fuse_scores_top(&lists, &key, 3), []);
    }

    #[test]
    fn rank_fusion_takes_its_constant() {
        let one = list(&[A, B]);
        let fused = fuse_with(
            Fusion::Ranks { k: 0.0 },
            &[Ranked {
                hits: &one,
                weight: 1.0,
                floor: None,
            }],
            &key,
            usize::MAX,
        );
        assert_eq!(fused[0].score, 1.0);
        assert_eq!(fused[1].score, 0.5);
        // A constant that is not finite or is negative falls back to RRF_K.
        let fallback = fuse_with(
            Fusion::Ranks { k: f32::NAN },
            &[Ranked {
                hits: &one,
                weight: 1.0,
                floor: None,
            }],
            &key,
            usize::MAX,
        );
        assert_eq!(fallback, fuse(&[(&one, 1.0)], &key));
    }

    #[test]
    fn one_empty_side_serves_the_other_unchanged() {
        let bm25 = list(&[A, B]);
        let vector = list(&[C, A]);
        let hybrid = Hybrid::default();
        assert_eq!(hybrid.fuse(&bm25, &[], 3, &key), bm25);
        assert_eq!(hybrid.fuse(&[], &vector, 3, &key), vector);
        assert_eq!(hybrid.fuse(&[], &[], 3, &key), []);
    }

    #[test]
    fn min_similarity_drops_weak_vector_hits_only() {
        let bm25 = list(&[A]);
        let vector = vec![
            Hit { doc: C, score: 0.8 },
            Hit { doc: B, score: 0.2 },
            Hit { doc: A, score: 0.1 },
        ];
        let hybrid = Hybrid {
            balance: 50,
            min_similarity: Some(0.5),
            adaptive: None,
            fusion: Fusion::default(),
        };
        assert_eq!(names(&hybrid.fuse(&bm25, &vector, 3, &key)), "A C");
        let all_weak = Hybrid {
            min_similarity: Some(0.9),
            ..hybrid
        };
        assert_eq!(all_weak.fuse(&bm25, &vector, 3, &key), bm25);
    }

    /// The semantic weight at balance 45 under the default [`Adaptive`], for each length.
    fn check_weights(lengths: &[usize], expect: Expect) {
        let hybrid = Hybrid {
            balance: 45,
            adaptive: Some(Adaptive::default()),
            ..Hybrid::default()
        };
        let weights: Vec<String> = lengths
            .iter()
            .map(|&terms| format!("{terms}:{:.3}", hybrid.semantic_weight(terms)))
            .collect();
        expect.assert_eq(&weights.join(" "));
    }

    #[test]
    fn adaptive_weight_leans_semantic_for_short_queries_and_lexical_for_long_ones() {
        // 0.45 - 0.2 * (terms / 16 - 1.2): balance 45 holds at 19.2 terms, and the clamp
        // would keep a sliver of either list at the extremes.
        check_weights(
            &[0, 1, 3, 8, 13, 19, 20, 30, 60, 100],
            expect![
                "0:0.690 1:0.678 3:0.653 8:0.590 13:0.527 19:0.452 20:0.440 30:0.315 60:0.050 100:0.050"
            ],
        );
    }

    #[test]
    fn adaptive_weight_is_the_balance_without_adaptive_or_at_the_extremes() {
        let fixed = Hybrid {
            balance: 45,
            ..Hybrid::default()
        };
        assert_eq!(fixed.semantic_weight(3), 0.45);
        assert_eq!(fixed.semantic_weight(40), 0.45);
        for balance in [0, 100, 200] {
            let hybrid = Hybrid {
                balance,
                adaptive: Some(Adaptive::default()),
                ..Hybrid::default()
            };
            assert_eq!(
                hybrid.semantic_weight(3),
                f32::from(balance.min(100)) / 100.0
            );
        }
        let broken = Adaptive {
            slope: f32::NAN,
            ..Adaptive::default()
        };
        assert_eq!(broken.semantic_weight(0.45, 3), 0.45);
        let no_span = Adaptive {
            span: 0.0,
            ..Adaptive::default()
        };
        // A span of one term: 0.45 - 0.2 * (1 - 1.2).
        assert!((no_span.semantic_weight(0.45, 1) - 0.49).abs() < 1e-6);
    }

    #[test]
    fn adaptive_fusion_follows_the_list_its_length_favours() {
        // BM25 puts A first, the vector search B: a short query goes with the vector search,
        // a long one with BM25.
        let bm25 = list(&[A, B]);
        let vector = list(&[B, A]);
        let hybrid = Hybrid {
            balance: 45,
            adaptive: Some(Adaptive::default()),
            ..Hybrid::default()
        };
        assert_eq!(names(&hybrid.fuse(&bm25, &vector, 3, &key)), "B A");
        assert_eq!(names(&hybrid.fuse(&bm25, &vector, 30, &key)), "A B");
    }

    fn permutation() -> impl Strategy<Value = Vec<DocId>> {
        Just((0..KEYS.len() as DocId).collect::<Vec<_>>()).prop_shuffle()
    }

    /// A ranked list: a prefix of a permutation, so no document repeats.
    fn ranked() -> impl Strategy<Value = Vec<DocId>> {
        (permutation(), 0..=KEYS.len()).prop_map(|(docs, len)| docs[..len].to_vec())
    }

    fn similarities() -> impl Strategy<Value = Vec<Hit>> {
        (
            permutation(),
            prop::collection::vec(-100i8..=100, KEYS.len()),
        )
            .prop_map(|(docs, scores)| {
                let mut hits: Vec<Hit> = docs
                    .into_iter()
                    .zip(scores)
                    .map(|(doc, score)| Hit {
                        doc,
                        score: f32::from(score) / 100.0,
                    })
                    .collect();
                hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(key(a.doc).cmp(key(b.doc))));
                hits
            })
    }

    fn position(hits: &[Hit], doc: DocId) -> Option<usize> {
        hits.iter().position(|hit| hit.doc == doc)
    }

    proptest! {
        #[test]
        fn fusion_is_deterministic_and_sorted(a in ranked(), b in ranked(), wa in 0u8..=10, wb in 0u8..=10) {
            let (a, b) = (list(&a), list(&b));
            let lists = [(a.as_slice(), f32::from(wa) / 10.0), (b.as_slice(), f32::from(wb) / 10.0)];
            let fused = fuse(&lists, &key);
            prop_assert_eq!(&fused, &fuse(&lists, &key));
            for pair in fused.windows(2) {
                prop_assert!(
                    pair[0].score > pair[1].score
                        || (pair[0].score == pair[1].score && key(pair[0].doc) < key(pair[1].doc)),
                    "{:?}", fused
                );
            }
            // Exactly the documents of the lists that count, each once.
            let mut expected: Vec<DocId> = lists.iter()
                .filter(|(_, w)| *w > 0.0)
                .flat_map(|(l, _)| l.iter().map(|h| h.doc))
                .collect();
            expected.sort_unstable();
            expected.dedup();
            let mut got: Vec<DocId> = fused.iter().map(|h| h.doc).collect();
            got.sort_unstable();
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn top_k_is_the_head_of_the_full_fusion(
            a in ranked(), b in ranked(), balance in 0u8..=100, limit in 0usize..12,
            min in proptest::option::of(0.0f32..100.0), terms in 0usize..40, adaptive in any::<bool>(),
        ) {
            let (a, b) = (list(&a), list(&b));
            let adaptive = adaptive.then(Adaptive::default);
            for fusion in [Fusion::default(), Fusion::Scores] {
                let hybrid = Hybrid { balance, min_similarity: min, adaptive, fusion };
                let full = hybrid.fuse(&a, &b, terms, &key);
                let head = &full[..limit.min(full.len())];
                prop_assert_eq!(hybrid.fuse_top(&a, &b, terms, &key, limit), head.to_vec());
            }
            let hybrid = Hybrid { balance, min_similarity: min, adaptive, fusion: Fusion::default() };
            let full = hybrid.fuse(&a, &b, terms, &key);
            let head = &full[..limit.min(full.len())];
            prop_assert_eq!(hybrid.fuse_top(&a, &b, terms, &key, limit), head.to_vec());
            let lists = [(a.as_slice(), 0.4), (b.as_slice(), 0.6)];
            let full = fuse(&lists, &key);
            prop_assert_eq!(fuse_top(&lists, &key, limit), full[..limit.min(full.len())].to_vec());
        }

        #[test]
        fn first_in_both_lists_is_first_fused(a in ranked(), b in ranked(), balance in 1u8..100) {
            prop_assume!(!a.is_empty() && !b.is_empty());
            let top = a[0];
            let mut b = b;
            b.retain(|&doc| doc != top);
            b.insert(0, top);
            for fusion in [Fusion::default(), Fusion::Scores] {
                let fused = Hybrid { balance, min_similarity: None, adaptive: None, fusion }.fuse(&list(&a), &list(&b), 3, &key);
                prop_assert_eq!(fused[0].doc, top);
            }
        }

        #[test]
        fn improving_a_rank_never_lowers_the_fused_position(
            a in ranked(), b in ranked(), from in 0usize..10, to in 0usize..10, weight in 1u8..=10,
        ) {
            prop_assume!(from < a.len());
            let to = to.min(from);
            let doc = a[from];
            let mut better = a.clone();
            better.remove(from);
            better.insert(to, doc);
            let w = f32::from(weight) / 10.0;
            let b = list(&b);
            let before = fuse(&[(&list(&a), w), (&b, 1.0 - w + 0.05)], &key);
            let after = fuse(&[(&list(&better), w), (&b, 1.0 - w + 0.05)], &key);
            prop_assert!(position(&after, doc) <= position(&before, doc), "{:?} -> {:?}", before, after);
        }

        #[test]
        fn adding_a_doc_to_a_list_never_lowers_its_fused_position(a in ranked(), b in ranked(), at in 0usize..10) {
            // Monotone also from "absent" to "present": a tool BM25 missed can only gain.
            let doc = match (0..KEYS.len() as DocId).find(|d| !a.contains(d)) {
                Some(doc) => doc,
                None => return Ok(()),
            };
            let mut more = a.clone();
            more.insert(at.min(a.len()), doc);
            let b = list(&b);
            let before = fuse(&[(&list(&a), 0.5), (&b, 0.5)], &key);
            let after = fuse(&[(&list(&more), 0.5), (&b, 0.5)], &key);
            let before = position(&before, doc).unwrap_or(usize::MAX);
            prop_assert!(position(&after, doc).is_some_and(|p| p <= before));
        }

        #[test]
        fn adaptive_weight_is_monotone_and_bounded(
            balance in 1u8..100, a in 0usize..200, b in 0usize..200,
            slope in 0.0f32..4.0, pivot in -2.0f32..4.0, span in 1.0f32..64.0,
        ) {
            let hybrid = Hybrid {
                balance,
                adaptive: Some(Adaptive { slope, pivot, span, words: false }),
                ..Hybrid::default()
            };
            let (short, long) = (a.min(b), a.max(b));
            let (w_short, w_long) = (hybrid.semantic_weight(short), hybrid.semantic_weight(long));
            prop_assert!(w_long <= w_short, "{} terms: {}, {} terms: {}", short, w_short, long, w_long);
            prop_assert!(ADAPTIVE_RANGE.contains(&w_short) && ADAPTIVE_RANGE.contains(&w_long));
        }

        #[test]
        fn balance_extremes_equal_the_single_lists(bm25 in ranked(), vector in similarities()) {
            let bm25 = list(&bm25);
            // Adaptive fusion never overrides a list switched off.
            let adaptive = Some(Adaptive::default());
            let lexical = Hybrid { balance: 0, min_similarity: None, adaptive, fusion: Fusion::default() };
            let semantic = Hybrid { balance: 100, min_similarity: None, adaptive, fusion: Fusion::default() };
            prop_assert_eq!(lexical.fuse(&bm25, &vector, 3, &key), bm25.clone());
            prop_assert_eq!(semantic.fuse(&bm25, &vector, 3, &key), vector.clone());
            prop_assert_eq!(Hybrid { balance: 250, min_similarity: None, adaptive: None, fusion: Fusion::default() }.fuse(&bm25, &vector, 3, &key), vector);
        }

        #[test]
        fn min_similarity_never_removes_a_bm25_hit(
            bm25 in ranked(), vector in similarities(), balance in 0u8..=100, min in -100i8..=100,
        ) {
            let bm25 = list(&bm25);
            let hybrid = Hybrid { balance, min_similarity: Some(f32::from(min) / 100.0), adaptive: None, fusion: Fusion::default() };
            let fused = hybrid.fuse(&bm25, &vector, 3, &key);
            if balance < 100 {
                for hit in &bm25 {
                    prop_assert!(position(&fused, hit.doc).is_some(), "{:?} lost from {:?}", hit, fused);
                }
            }
            // And every vector hit that survives is strong enough, unless BM25 also found it.
            for hit in &fused {
                let lexical = position(&bm25, hit.doc).is_some();
                let strong = vector.iter().any(|v| v.doc == hit.doc && v.score >= f32::from(min) / 100.0);
                prop_assert!(lexical || strong, "{:?} in {:?}", hit, fused);
            }
        }

        #[test]
        fn semantic_only_match_appears_in_hybrid(bm25 in ranked(), balance in 1u8..=100) {
            // The three-tool example generalised: whatever BM25 finds, a tool it misses that the
            // vector search ranks first is in the hybrid result.
            let missed = match (0..KEYS.len() as DocId).find(|d| !bm25.contains(d)) {
                Some(doc) => doc,
                None => return Ok(()),
            };
            let mut vector: Vec<DocId> = vec![missed];
            vector.extend(bm25.iter().copied());
            let fused = Hybrid { balance, min_similarity: None, adaptive: None, fusion: Fusion::default() }.fuse(&list(&bm25), &list(&vector), 3, &key);
            prop_assert!(position(&fused, missed).is_some());
        }
    }
}
