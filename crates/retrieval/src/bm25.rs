//! BM25F ranking: field-weighted term frequencies, per-field length normalisation, one
//! saturation per term, full-depth results.
//!
//! For a query term `t` and document `d`:
//!
//! ```text
//! tf'(t, d)    = sum over fields f of  w_f * tf(t, d, f) / (1 - b + b * len(d, f) / avglen(f))
//! idf(t)       = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
//! score(q, d)  = sum over distinct terms t of q of  idf(t) * tf' * (k1 + 1) / (k1 + tf')
//! ```
//!
//! This is BM25F rather than a weighted sum of per-field BM25 scores: the weighted
//! frequencies are combined *before* the saturation, so a term that appears in both the name
//! and the description does not collect two nearly full scores (the flaw Robertson et al.
//! point out in "Simple BM25 extension to multiple weighted fields", 2004).
//!
//! `avglen(f)` averages over the documents that have field `f`: sparse fields such as
//! `ServerDescription` would otherwise get an average near zero and over-penalise every
//! document that does carry them.
//!
//! Query terms count once however often they repeat: tool queries are short, and a
//! model's natural-language query repeating a word ("file ... files") says little about
//! weight. Corpus statistics (N, df, average lengths) are those of the whole index, not of
//! the documents that pass a filter, so a filter never changes the score of a document
//! that survives it.
//!
//! Every parameter is fixed at build time, so the build folds tf', idf and the saturation
//! into one precomputed impact per posting, and a query is one addition per posting into a
//! dense accumulator. Storing per-field term frequencies instead would allow re-weighting
//! without a rebuild, which nothing needs: a rebuild costs about 7 ms per thousand
//! tool-sized documents (release build, `benches/bm25.rs`).
//!
//! The term dictionary keeps std's SipHash: a faster unkeyed hash would shave a few
//! percent off the build, but the text comes from upstream servers, and a crafted tool
//! description could then degrade the table with colliding terms.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::analyzer::Analyzer;
use crate::document::{DocId, Document, Field};

/// BM25F parameters. Defaults are a starting point; the eval harness tunes them.
#[derive(Clone, Debug)]
pub struct Bm25Params {
    /// Term-frequency saturation. Non-finite values fall back to the default; others are
    /// clamped to `0.0..=1e6`.
    pub k1: f32,
    /// Length normalisation strength, clamped to `0.0..=1.0`; non-finite falls back to the
    /// default.
    pub b: f32,
    pub weights: FieldWeights,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params {
            k1: 1.2,
            b: 0.75,
            weights: FieldWeights::default(),
        }
    }
}

/// Per-field weights for BM25F. A weight that is not finite and positive switches its
/// field off: the field is not indexed at all, so it can neither score nor match. Weights
/// above 1e6 count as 1e6.
#[derive(Clone, Debug)]
pub struct FieldWeights {
    pub name: f32,
    pub server: f32,
    pub description: f32,
    pub param_name: f32,
    pub param_description: f32,
    pub server_description: f32,
}

impl Default for FieldWeights {
    fn default() -> Self {
        FieldWeights {
            name: 3.0,
            server: 1.5,
            description: 1.0,
            param_name: 1.0,
            param_description: 0.5,
            server_description: 0.5,
        }
    }
}

impl FieldWeights {
    pub fn get(&self, field: Field) -> f32 {
        match field {
            Field::Name => self.name,
            Field::Server => self.server,
            Field::Description => self.description,
            Field::ParamName => self.param_name,
            Field::ParamDescription => self.param_description,
            Field::ServerDescription => self.server_description,
        }
    }

    pub fn set(&mut self, field: Field, weight: f32) {
        let slot = match field {
            Field::Name => &mut self.name,
            Field::Server => &mut self.server,
            Field::Description => &mut self.description,
            Field::ParamName => &mut self.param_name,
            Field::ParamDescription => &mut self.param_description,
            Field::ServerDescription => &mut self.server_description,
        };
        *slot = weight;
    }
}

/// One ranked document.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub doc: DocId,
    pub score: f32,
}

/// Pseudo-relevance feedback, RM3-style (Lavrenko and Croft's relevance model, interpolated
/// with the query as in Abdul-Jaleel et al., 2004): rank once, take the `docs` best hits as
/// relevant, and rank again with the query plus the `terms` terms that weigh most in them.
///
/// ```text
/// P(t | R)  = sum over feedback docs d of  P(d | q) * P(t | d)     P(d | q) = score(d) / sum of their scores
/// P(t | d)  = tf'(t, d) / sum of tf'(u, d) over u in d            tf' = the field-weighted frequency of BM25F
/// weight(t) = (1 - weight) * P(t | q) + weight * P(t | R)          over the query's terms and the `terms` best of R
/// ```
///
/// and the second ranking scores `sum over t of weight(t) * impact(t, d)`, scaled so an
/// original query term keeps weight 1. A tool's text is short and written in its own words
/// ("latitude", "recipe", "repository"), so its best hit's words reach sibling tools a terse
/// request does not name.
///
/// Bounded for speed: each document keeps its [`FEEDBACK_DOC_TERMS`] heaviest terms (ties to
/// the rarer term), computed at build time, and the second ranking only adds the expansion
/// terms' postings to the first one's scores instead of ranking again from scratch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Feedback {
    /// Feedback documents: the best hits of the first ranking. 0 switches feedback off.
    pub docs: usize,
    /// Expansion terms taken from them. 0 switches feedback off.
    pub terms: usize,
    /// λ, the expansion's share of the query model, clamped to `0.0..=0.9`; 0 or not finite
    /// switches feedback off.
    pub weight: f32,
    /// The largest share of the index's documents an expansion term may occur in (`0.0..=1.0`);
    /// a commoner term is skipped, unless it is in at most [`FEEDBACK_CHEAP_DF`] documents.
    /// Such a term tells little (its idf is low) and costs the most (its postings are the
    /// longest, and every document they reach joins the ranking).
    pub max_df: f32,
}

impl Default for Feedback {
    /// Tuned with `mcpgw eval` on the four sets (docs/retrieval.md).
    fn default() -> Self {
        Feedback {
            docs: 1,
            terms: 10,
            weight: 0.1,
            max_df: 0.05,
        }
    }
}

/// Expansion terms in at most this many documents are kept whatever [`Feedback::max_df`] says:
/// their postings are too short to cost anything.
pub const FEEDBACK_CHEAP_DF: usize = 32;

/// Terms kept per document for [`Feedback`]: the heaviest by field-weighted frequency.
pub const FEEDBACK_DOC_TERMS: usize = 32;

/// An immutable BM25F index over a slice of [`Document`]s. Rebuild it when the documents
/// change.
#[derive(Clone)]
pub struct Bm25Index {
    analyzer: Analyzer,
    terms: HashMap<String, u32>,
    /// The postings of term `t` are `postings[offsets[t]..offsets[t + 1]]`, ascending by doc.
    offsets: Vec<usize>,
    postings: Vec<Posting>,
    /// Position of each document when all are sorted by `(key, doc)`: ties compare two
    /// integers instead of two strings, and the index need not keep the keys.
    key_rank: Vec<u32>,
    /// The inverse of `key_rank`: documents in `(key, doc)` order.
    by_key: Vec<DocId>,
    /// The feedback terms of document `d` are `doc_terms[doc_offsets[d]..doc_offsets[d + 1]]`:
    /// at most [`FEEDBACK_DOC_TERMS`] `(term, P(t | d))`, heaviest first.
    doc_offsets: Vec<usize>,
    doc_terms: Vec<(u32, f32)>,
}

impl Bm25Index {
    /// Indexes `docs` with the default [`Analyzer`]. `DocId`s are positions in `docs`;
    /// documents past `u32::MAX` are not indexed.
    pub fn build(docs: &[Document], params: &Bm25Params) -> Self {
        Self::build_with(docs, params, Analyzer::default())
    }

    /// Indexes `docs` with `analyzer`, which is kept to analyze queries the same way.
    pub fn build_with(docs: &[Document], params: &Bm25Params, analyzer: Analyzer) -> Self {
        let docs = &docs[..docs.len().min(DocId::MAX as usize)];
        let params = Resolved::new(params);

        let mut terms: HashMap<String, u32> = HashMap::new();
        let mut raw: Vec<Vec<RawPosting>> = Vec::new();
        let mut lengths: Vec<[u32; FIELDS]> = Vec::with_capacity(docs.len());
        let mut occurrences: Vec<(u32, u8)> = Vec::new();
        // Per document, (term, field-weighted frequency); cut to the heaviest once every
        // document frequency is known.
        let mut weighted: Vec<Vec<(u32, f64)>> = Vec::with_capacity(docs.len());
        for (doc, document) in docs.iter().enumerate() {
            occurrences.clear();
            let mut length = [0u32; FIELDS];
            for (field, text) in &document.fields {
                let f = field.index();
                if params.weights[f] == 0.0 {
                    continue;
                }
                analyzer.for_each_token(text, |token| {
                    let term = match terms.get(token) {
                        Some(&term) => term,
                        None => {
                            let term = raw.len() as u32;
                            terms.insert(token.to_owned(), term);
                            raw.push(Vec::new());
                            term
                        }
                    };
                    occurrences.push((term, f as u8));
                    length[f] = length[f].saturating_add(1);
                });
            }
            occurrences.sort_unstable();
            let mut terms_of_doc = Vec::new();
            for group in occurrences.chunk_by(|a, b| a.0 == b.0) {
                let mut tf = [0u16; FIELDS];
                for &(_, f) in group {
                    tf[usize::from(f)] = tf[usize::from(f)].saturating_add(1);
                }
                let frequency: f64 = (0..FIELDS)
                    .map(|f| params.weights[f] * f64::from(tf[f]))
                    .sum();
                terms_of_doc.push((group[0].0, frequency));
                raw[group[0].0 as usize].push(RawPosting {
                    doc: doc as DocId,
                    tf,
                });
            }
            lengths.push(length);
            weighted.push(terms_of_doc);
        }

        let average = average_lengths(&lengths);
        let n = docs.len() as f64;
        let mut offsets = Vec::with_capacity(raw.len() + 1);
        let mut postings = Vec::with_capacity(raw.iter().map(Vec::len).sum());
        offsets.push(0);
        for term_postings in &raw {
            let df = term_postings.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for posting in term_postings {
                let length = &lengths[posting.doc as usize];
                let mut tf = 0.0;
                for f in 0..FIELDS {
                    if posting.tf[f] > 0 {
                        let norm = 1.0 - params.b + params.b * f64::from(length[f]) / average[f];
                        tf += params.weights[f] * f64::from(posting.tf[f]) / norm;
                    }
                }
                let impact = idf * tf * (params.k1 + 1.0) / (params.k1 + tf);
                postings.push(Posting {
                    doc: posting.doc,
                    impact: impact as f32,
                });
            }
            offsets.push(postings.len());
        }

        let mut by_key: Vec<DocId> = (0..docs.len() as DocId).collect();
        by_key.sort_unstable_by(|&a, &b| {
            docs[a as usize]
                .key
                .cmp(&docs[b as usize].key)
                .then(a.cmp(&b))
        });
        let mut key_rank = vec![0; docs.len()];
        for (rank, &doc) in by_key.iter().enumerate() {
            key_rank[doc as usize] = rank as u32;
        }

        let mut doc_offsets = Vec::with_capacity(docs.len() + 1);
        let mut doc_terms = Vec::new();
        doc_offsets.push(0);
        for mut terms_of_doc in weighted {
            let total: f64 = terms_of_doc.iter().map(|&(_, frequency)| frequency).sum();
            let df = |term: u32| raw[term as usize].len();
            terms_of_doc.sort_unstable_by(|a, b| {
                b.1.total_cmp(&a.1)
                    .then(df(a.0).cmp(&df(b.0)))
                    .then(a.0.cmp(&b.0))
            });
            terms_of_doc.truncate(FEEDBACK_DOC_TERMS);
            if total > 0.0 {
                doc_terms.extend(
                    terms_of_doc
                        .into_iter()
                        .map(|(term, frequency)| (term, (frequency / total) as f32)),
                );
            }
            doc_offsets.push(doc_terms.len());
        }

        Bm25Index {
            analyzer,
            terms,
            offsets,
            postings,
            key_rank,
            by_key,
            doc_offsets,
            doc_terms,
        }
    }

    /// Full-depth ranking: every document that shares at least one query term and passes `keep`,
    /// sorted by score descending, ties by `Document::key` ascending. `keep` is applied BEFORE scoring
    /// (filters narrow before ranking). Empty/termless query -> empty vec.
    ///
    /// `keep` is called at most once per document, and only for documents that share a term.
    /// Documents with equal keys tie-break by `DocId`, so the order is total.
    pub fn rank(&self, query: &str, keep: &dyn Fn(DocId) -> bool) -> Vec<Hit> {
        self.rank_with(query, None, keep)
    }

    /// [`Bm25Index::rank`], with pseudo-relevance [`Feedback`] when given (and not switched
    /// off by a zero). Feedback documents are chosen among the documents `keep` lets through,
    /// so the expansion comes from hits the caller may see; a survivor's score then depends on
    /// the filter, which it never does without feedback. The hits are still exactly the kept
    /// documents that share a term with the query or its expansion.
    pub fn rank_with(
        &self,
        query: &str,
        feedback: Option<&Feedback>,
        keep: &dyn Fn(DocId) -> bool,
    ) -> Vec<Hit> {
        let mut query_terms = self.query_terms(query);
        if query_terms.is_empty() {
            return Vec::new();
        }
        // Sorted, not just deduplicated: summing in term-id order makes the float sums, and
        // so the ranking, independent of the order of words in the query.
        query_terms.sort_unstable();
        query_terms.dedup();

        let mut accumulator = Accumulator::new(self.len());
        for &term in &query_terms {
            self.add(&mut accumulator, term, 1.0, keep);
        }
        if let Some(feedback) = feedback {
            let expansion = self.expansion(&accumulator, query_terms.len(), feedback);
            for (term, weight) in expansion {
                self.add(&mut accumulator, term, weight, keep);
            }
        }
        self.sorted(accumulator)
    }

    /// The query's length in words, as [`crate::Adaptive`] reads it: the number of distinct
    /// terms the analyzer finds in `query`, whether or not the index has them, except that
    /// CJK text, which has no spaces, counts as words rather than as its unigrams and
    /// bigrams. Its distinct characters count for [`CJK_CHARS_PER_WORD`] each; without that
    /// a Chinese request measured 2.8 times its English translation (ultratool's parallel
    /// queries: 63.0 terms on average against 22.3), and adaptive fusion leaned all the way
    /// to BM25 for every Chinese request when the model reads Chinese.
    pub fn query_length(&self, query: &str) -> usize {
        let mut words: HashSet<String> = HashSet::new();
        let mut cjk_chars: HashSet<char> = HashSet::new();
        self.analyzer.for_each_token(query, |token| {
            let mut chars = token.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) if crate::analyzer::is_cjk(c) => {
                    cjk_chars.insert(c);
                }
                (Some(c), Some(_)) if crate::analyzer::is_cjk(c) => {}
                _ => {
                    if !words.contains(token) {
                        words.insert(token.to_owned());
                    }
                }
            }
        });
        words.len() + (cjk_chars.len() as f32 / CJK_CHARS_PER_WORD).round() as usize
    }

    /// The ids of the query's terms that the index has, in query order, repeats included.
    fn query_terms(&self, query: &str) -> Vec<u32> {
        let mut query_terms = Vec::new();
        self.analyzer.for_each_token(query, |token| {
            if let Some(&term) = self.terms.get(token) {
                query_terms.push(term);
            }
        });
        query_terms
    }

    /// Adds `weight` times each posting's impact of `term` to the scores of the documents
    /// `keep` lets through.
    fn add(
        &self,
        accumulator: &mut Accumulator,
        term: u32,
        weight: f32,
        keep: &dyn Fn(DocId) -> bool,
    ) {
        let Accumulator { scores, seen, kept } = accumulator;
        for posting in self.postings(term) {
            let doc = posting.doc as usize;
            let impact = weight * posting.impact;
            match seen[doc] {
                Seen::Kept => scores[doc] += impact,
                Seen::Dropped => {}
                Seen::No if keep(posting.doc) => {
                    seen[doc] = Seen::Kept;
                    kept.push(posting.doc);
                    scores[doc] += impact;
                }
                Seen::No => seen[doc] = Seen::Dropped,
            }
        }
    }

    /// The expansion terms of [`Feedback`] from the first ranking's scores, each with its
    /// weight relative to an original query term (1), in term-id order. Empty when feedback
    /// is switched off or nothing matched.
    fn expansion(
        &self,
        first: &Accumulator,
        query_terms: usize,
        feedback: &Feedback,
    ) -> Vec<(u32, f32)> {
        let lambda = if feedback.weight.is_finite() {
            feedback.weight.clamp(0.0, 0.9)
        } else {
            0.0
        };
        if feedback.docs == 0 || feedback.terms == 0 || lambda == 0.0 || first.kept.is_empty() {
            return Vec::new();
        }
        // The best `docs` hits, in ranking order (score, then key).
        let mut best: Vec<u64> = first
            .kept
            .iter()
            .map(|&doc| self.packed(doc, first.scores[doc as usize]))
            .collect();
        let docs = feedback.docs.min(best.len());
        if docs < best.len() {
            best.select_nth_unstable(docs - 1);
            best.truncate(docs);
        }
        best.sort_unstable();
        let mass: f64 = best.iter().map(|&packed| f64::from(score_of(packed))).sum();
        if mass <= 0.0 {
            return Vec::new();
        }
        let mut model: Vec<(u32, f64)> = Vec::new();
        for &packed in &best {
            let doc = self.by_key[(packed as u32) as usize] as usize;
            let relevance = f64::from(score_of(packed)) / mass;
            let (Some(&start), Some(&end)) =
                (self.doc_offsets.get(doc), self.doc_offsets.get(doc + 1))
            else {
                continue;
            };
            for &(term, p) in self.doc_terms.get(start..end).unwrap_or_default() {
                model.push((term, relevance * f64::from(p)));
            }
        }
        model.sort_unstable_by_key(|&(term, _)| term);
        let mut merged: Vec<(u32, f64)> = Vec::with_capacity(model.len());
        for (term, p) in model {
            match merged.last_mut() {
                Some(last) if last.0 == term => last.1 += p,
                _ => merged.push((term, p)),
            }
        }
        // Terms in more than `max_df` of the documents are left out (see [`Feedback::max_df`]),
        // unless they are in at most FEEDBACK_CHEAP_DF: those cost nothing, so a small catalog
        // keeps its whole expansion.
        let df = |term: u32| self.postings(term).len();
        let max_df = if feedback.max_df.is_finite() {
            let share = f64::from(feedback.max_df.clamp(0.0, 1.0)) * self.len() as f64;
            (share.ceil() as usize).max(FEEDBACK_CHEAP_DF)
        } else {
            self.len()
        };
        merged.retain(|&(term, _)| df(term) <= max_df);
        // The heaviest terms, ties to the rarer (shorter postings, more telling), then by id.
        merged.sort_unstable_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then(df(a.0).cmp(&df(b.0)))
                .then(a.0.cmp(&b.0))
        });
        merged.truncate(feedback.terms);
        let kept_mass: f64 = merged.iter().map(|&(_, p)| p).sum();
        if kept_mass <= 0.0 {
            return Vec::new();
        }
        // (1 - λ) / |q| for a query term and λ P(t | R) for an expansion term, both divided
        // by the former so query terms keep weight 1 and the first ranking's sums stay valid.
        let scale = f64::from(lambda) / (1.0 - f64::from(lambda)) * query_terms as f64 / kept_mass;
        let mut expansion: Vec<(u32, f32)> = merged
            .into_iter()
            .map(|(term, p)| (term, (p * scale) as f32))
            .filter(|&(_, weight)| weight.is_finite() && weight > 0.0)
            .collect();
        expansion.sort_unstable_by_key(|&(term, _)| term);
        expansion
    }

    /// The sort key of a hit: the high half is the inverted bit pattern of the score (scores
    /// are sums of non-negative impacts, and for non-negative floats the bit pattern orders
    /// like the value, so inverting it sorts descending), the low half is the key rank.
    fn packed(&self, doc: DocId, score: f32) -> u64 {
        (u64::from(!score.to_bits()) << 32) | u64::from(self.key_rank[doc as usize])
    }

    /// The kept documents, best first. Sorting packed integers instead of comparing through a
    /// closure: at full depth over 10k documents the sort dominates a query, and this made
    /// `rank` about 1.7x faster than `sort_by`.
    fn sorted(&self, accumulator: Accumulator) -> Vec<Hit> {
        let Accumulator { scores, kept, .. } = accumulator;
        let mut order: Vec<u64> = kept
            .into_iter()
            .map(|doc| self.packed(doc, scores[doc as usize]))
            .collect();
        order.sort_unstable();
        order
            .into_iter()
            .map(|packed| Hit {
                doc: self.by_key[(packed as u32) as usize],
                score: score_of(packed),
            })
            .collect()
    }

    /// Number of indexed documents.
    pub fn len(&self) -> usize {
        self.key_rank.len()
    }

    pub fn is_empty(&self) -> bool {
        self.key_rank.is_empty()
    }

    /// Number of distinct terms in the index.
    pub fn term_count(&self) -> usize {
        self.terms.len()
    }

    /// The analyzer that indexed the documents and analyzes queries.
    pub fn analyzer(&self) -> &Analyzer {
        &self.analyzer
    }

    fn postings(&self, term: u32) -> &[Posting] {
        let term = term as usize;
        match (self.offsets.get(term), self.offsets.get(term + 1)) {
            (Some(&start), Some(&end)) => self.postings.get(start..end).unwrap_or_default(),
            _ => &[],
        }
    }
}

impl fmt::Debug for Bm25Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bm25Index")
            .field("docs", &self.len())
            .field("terms", &self.term_count())
            .field("postings", &self.postings.len())
            .field("analyzer", &self.analyzer)
            .finish()
    }
}

const FIELDS: usize = Field::ALL.len();

/// Characters per word in Chinese text, for [`Bm25Index::query_length`]: ultratool's
/// Chinese requests have 1.47 distinct characters per distinct English term of the same
/// request in English (median over its 1,000 parallel queries), and corpus studies put the
/// mean Chinese word at 1.5 to 1.6 characters.
pub const CJK_CHARS_PER_WORD: f32 = 1.5;

/// Upper bound for `k1` and field weights.
const MAX_PARAM: f32 = 1e6;

#[derive(Clone, Copy)]
struct Posting {
    doc: DocId,
    impact: f32,
}

/// A posting before corpus statistics are known. `u16` counts saturate, harmlessly: BM25
/// saturates long before.
struct RawPosting {
    doc: DocId,
    tf: [u16; FIELDS],
}

/// The score of a packed sort key ([`Bm25Index::packed`]).
fn score_of(packed: u64) -> f32 {
    f32::from_bits(!((packed >> 32) as u32))
}

/// One ranking's running scores: dense over the index, with the documents that passed `keep`
/// in the order they were first seen.
struct Accumulator {
    scores: Vec<f32>,
    seen: Vec<Seen>,
    kept: Vec<DocId>,
}

impl Accumulator {
    fn new(len: usize) -> Self {
        Accumulator {
            scores: vec![0.0; len],
            seen: vec![Seen::No; len],
            kept: Vec::new(),
        }
    }
}

#[derive(Clone, Copy)]
enum Seen {
    No,
    Kept,
    Dropped,
}

/// Parameters made safe to compute with: no NaN or infinity can reach a score. The upper
/// bound keeps every impact, and any sum of them, far inside `f32` range; real values are
/// single digits.
struct Resolved {
    k1: f64,
    b: f64,
    /// 0.0 marks a disabled field.
    weights: [f64; FIELDS],
}

impl Resolved {
    fn new(params: &Bm25Params) -> Self {
        let defaults = Bm25Params::default();
        let k1 = if params.k1.is_finite() {
            params.k1.clamp(0.0, MAX_PARAM)
        } else {
            defaults.k1
        };
        let b = if params.b.is_finite() {
            params.b.clamp(0.0, 1.0)
        } else {
            defaults.b
        };
        let weights = Field::ALL.map(|field| {
            let weight = params.weights.get(field);
            if weight.is_finite() && weight > 0.0 {
                f64::from(weight.min(MAX_PARAM))
            } else {
                0.0
            }
        });
        Resolved {
            k1: f64::from(k1),
            b: f64::from(b),
            weights,
        }
    }
}

/// Average length of each field over the documents that have it (1.0 where none do, which
/// is never read: no posting comes from an empty field).
fn average_lengths(lengths: &[[u32; FIELDS]]) -> [f64; FIELDS] {
    let mut total = [0.0f64; FIELDS];
    let mut count = [0u32; FIELDS];
    for length in lengths {
        for f in 0..FIELDS {
            if length[f] > 0 {
                total[f] += f64::from(length[f]);
                count[f] += 1;
            }
        }
    }
    std::array::from_fn(|f| {
        if count[f] > 0 {
            total[f] / f64::from(count[f])
        } else {
            1.0
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use expect_test::{Expect, expect};
    use proptest::prelude::*;

    use super::*;
    use crate::analyzer::tokenize;

    type Spec<'a> = (&'a str, &'a [(Field, &'a str)]);

    fn documents(specs: &[Spec<'_>]) -> Vec<Document> {
        specs
            .iter()
            .map(|(key, fields)| Document {
                key: key.to_string(),
                fields: fields
                    .iter()
                    .map(|(field, text)| (*field, text.to_string()))
                    .collect(),
            })
            .collect()
    }

    fn keys(docs: &[Document], hits: &[Hit]) -> String {
        hits.iter()
            .map(|hit| docs[hit.doc as usize].key.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Ranks `query` over `specs` with default parameters; renders the keys in rank order.
    fn check(specs: &[Spec<'_>], query: &str, expect: Expect) {
        check_filtered(specs, query, &|_| true, expect);
    }

    fn check_filtered(
        specs: &[Spec<'_>],
        query: &str,
        keep: &dyn Fn(DocId) -> bool,
        expect: Expect,
    ) {
        let docs = documents(specs);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        expect.assert_eq(&keys(&docs, &index.rank(query, keep)));
    }

    const TOOLS: &[Spec<'_>] = &[
        (
            "time__get_current_time",
            &[
                (Field::Name, "get_current_time"),
                (Field::Server, "time"),
                (
                    Field::Description,
                    "Get the current time in a given timezone",
                ),
                (Field::ParamName, "timezone"),
            ],
        ),
        (
            "weather__get_forecast",
            &[
                (Field::Name, "get_forecast"),
                (Field::Server, "weather"),
                (
                    Field::Description,
                    "Weather forecast for a city, including the time of sunrise",
                ),
                (Field::ParamName, "city"),
            ],
        ),
        (
            "fs__read_file",
            &[
                (Field::Name, "read_file"),
                (Field::Server, "fs"),
                (Field::Description, "Read a file from disk"),
                (Field::ParamName, "path"),
                (Field::ParamDescription, "Absolute path of the file"),
            ],
        ),
        (
            "zh__weather",
            &[
                (Field::Name, "query_weather"),
                (Field::Description, "查询城市的天气预报"),
            ],
        ),
    ];

    #[test]
    fn only_docs_sharing_a_term_are_returned() {
        check(TOOLS, "file", expect![["fs__read_file"]]);
        check(TOOLS, "sunrise", expect![["weather__get_forecast"]]);
        check(TOOLS, "nothing matches this", expect![[""]]);
    }

    #[test]
    fn name_match_outranks_description_only_match() {
        check(
            TOOLS,
            "time",
            expect![["time__get_current_time weather__get_forecast"]],
        );
        check(
            TOOLS,
            "weather",
            expect![["zh__weather weather__get_forecast"]],
        );
    }

    #[test]
    fn exact_tool_name_query_ranks_that_tool_first() {
        let specs: &[Spec<'_>] = &[
            ("a", &[(Field::Name, "time_get_current")]),
            ("b", &[(Field::Name, "get_current_time")]),
            ("c", &[(Field::Name, "current_time_get")]),
        ];
        check(specs, "get_current_time", expect![["b a c"]]);
        check(specs, "getCurrentTime", expect![["b a c"]]);
    }

    #[test]
    fn chinese_query_matches_chinese_description() {
        check(TOOLS, "查询天气", expect![["zh__weather"]]);
        check(
            TOOLS,
            "天气 forecast",
            expect!["zh__weather weather__get_forecast"],
        );
    }

    #[test]
    fn ties_break_by_key_ascending() {
        let same: &[(Field, &str)] = &[(Field::Name, "echo")];
        check(
            &[("b", same), ("c", same), ("a", same)],
            "echo",
            expect![["a b c"]],
        );
    }

    #[test]
    fn equal_keys_tie_break_by_doc_id() {
        let docs = documents(&[
            ("k", &[(Field::Name, "echo")]),
            ("k", &[(Field::Name, "echo")]),
        ]);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        let order: Vec<DocId> = index
            .rank("echo", &|_| true)
            .iter()
            .map(|hit| hit.doc)
            .collect();
        assert_eq!(order, [0, 1]);
    }

    #[test]
    fn keep_filter_excludes_docs_regardless_of_score() {
        check_filtered(
            TOOLS,
            "time",
            &|doc| doc != 0,
            expect![["weather__get_forecast"]],
        );
        check_filtered(TOOLS, "time", &|_| false, expect![[""]]);
    }

    #[test]
    fn keep_filter_leaves_survivor_scores_unchanged() {
        let docs = documents(TOOLS);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        let all = index.rank("weather time", &|_| true);
        let some = index.rank("weather time", &|doc| doc % 2 == 1);
        let expected: Vec<Hit> = all.into_iter().filter(|hit| hit.doc % 2 == 1).collect();
        assert_eq!(some, expected);
    }

    #[test]
    fn keep_is_asked_once_per_candidate() {
        let docs = documents(TOOLS);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        let asked = std::cell::RefCell::new(Vec::new());
        index.rank("get time weather forecast", &|doc| {
            asked.borrow_mut().push(doc);
            true
        });
        let mut asked = asked.into_inner();
        asked.sort_unstable();
        assert_eq!(asked, [0, 1, 3]);
    }

    #[test]
    fn empty_or_termless_query_returns_nothing() {
        check(TOOLS, "", expect![[""]]);
        check(TOOLS, "  ,.;!? ", expect![[""]]);
    }

    #[test]
    fn empty_index_returns_nothing() {
        let index = Bm25Index::build(&[], &Bm25Params::default());
        assert!(index.is_empty());
        assert_eq!(index.len(), 0);
        assert_eq!(index.rank("anything", &|_| true), []);
    }

    #[test]
    fn documents_without_text_are_counted_but_never_returned() {
        let docs = documents(&[("empty", &[]), ("blank", &[(Field::Name, " - ")])]);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        assert_eq!(index.len(), 2);
        assert_eq!(index.rank("blank empty", &|_| true), []);
    }

    #[test]
    fn repeated_query_terms_count_once() {
        let docs = documents(TOOLS);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        assert_eq!(
            index.rank("time time time weather", &|_| true),
            index.rank("weather time", &|_| true)
        );
    }

    #[test]
    fn rarer_term_scores_higher() {
        let specs: &[Spec<'_>] = &[
            ("common1", &[(Field::Description, "list items")]),
            ("common2", &[(Field::Description, "list things")]),
            ("rare", &[(Field::Description, "export things")]),
        ];
        check(specs, "list export", expect![["rare common1 common2"]]);
    }

    #[test]
    fn shorter_field_scores_higher() {
        let specs: &[Spec<'_>] = &[
            (
                "long",
                &[(
                    Field::Description,
                    "search the web for pages news images and more",
                )],
            ),
            ("short", &[(Field::Description, "search code")]),
        ];
        check(specs, "search", expect![["short long"]]);
    }

    #[test]
    fn repeated_fields_count_as_one_field() {
        let docs = documents(&[
            (
                "split",
                &[(Field::ParamName, "city"), (Field::ParamName, "country")],
            ),
            ("joined", &[(Field::ParamName, "city country")]),
        ]);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        let hits = index.rank("city", &|_| true);
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].score, hits[1].score);
    }

    #[test]
    fn score_follows_the_bm25f_formula() {
        // One document, one name token: N = df = 1, tf' = w_name.
        let docs = documents(&[("only", &[(Field::Name, "echo")])]);
        let params = Bm25Params::default();
        let index = Bm25Index::build(&docs, &params);
        let hits = index.rank("echo", &|_| true);
        let idf = (1.0f64 + 0.5 / 1.5).ln();
        let (w, k1) = (f64::from(params.weights.name), f64::from(params.k1));
        let expected = idf * w * (k1 + 1.0) / (k1 + w);
        assert_eq!(hits.len(), 1);
        assert!(
            (f64::from(hits[0].score) - expected).abs() < 1e-6,
            "{hits:?} vs {expected}"
        );
    }

    #[test]
    fn disabled_field_neither_matches_nor_scores() {
        let docs = documents(TOOLS);
        let mut params = Bm25Params::default();
        params.weights.set(Field::Description, 0.0);
        params.weights.set(Field::ParamDescription, f32::NAN);
        let index = Bm25Index::build(&docs, &params);
        assert_eq!(index.rank("sunrise disk absolute", &|_| true), []);
        assert_eq!(params.weights.get(Field::Description), 0.0);
    }

    #[test]
    fn invalid_params_still_give_finite_scores() {
        let docs = documents(TOOLS);
        let params = Bm25Params {
            k1: f32::NAN,
            b: 7.0,
            weights: FieldWeights::default(),
        };
        let hits = Bm25Index::build(&docs, &params).rank("time weather", &|_| true);
        assert!(!hits.is_empty());
        assert!(
            hits.iter()
                .all(|hit| hit.score.is_finite() && hit.score > 0.0),
            "{hits:?}"
        );
        let weights = FieldWeights {
            name: f32::MAX,
            ..FieldWeights::default()
        };
        let params = Bm25Params {
            k1: f32::MAX,
            b: f32::INFINITY,
            weights,
        };
        let hits = Bm25Index::build(&docs, &params).rank("time weather", &|_| true);
        assert!(
            hits.iter()
                .all(|hit| hit.score.is_finite() && hit.score > 0.0),
            "{hits:?}"
        );
        let params = Bm25Params {
            k1: -1.0,
            b: -0.5,
            ..Bm25Params::default()
        };
        let hits = Bm25Index::build(&docs, &params).rank("time weather", &|_| true);
        assert!(
            hits.iter()
                .all(|hit| hit.score.is_finite() && hit.score > 0.0),
            "{hits:?}"
        );
    }

    #[test]
    fn debug_output_is_a_summary() {
        let index = Bm25Index::build(&documents(TOOLS[..1].as_ref()), &Bm25Params::default());
        expect!["Bm25Index { docs: 1, terms: 9, postings: 9, analyzer: Analyzer { compounds: true, cjk_bigrams: true, max_token_bytes: 128, stop_words: None, stemming: None } }"]
            .assert_eq(&format!("{index:?}"));
    }

    /// Tools of a paper workflow: a request for "arxiv papers" finds the search tool, and only
    /// feedback (its words "summary", "abstract") reaches the summariser.
    const PAPERS: &[Spec<'_>] = &[
        (
            "papers__search_arxiv",
            &[
                (Field::Name, "search_arxiv"),
                (
                    Field::Description,
                    "Search arxiv papers for an abstract and summary",
                ),
                (Field::ParamName, "query"),
            ],
        ),
        (
            "papers__summarize",
            &[
                (Field::Name, "summarize"),
                (Field::Description, "Write a short summary of an abstract"),
                (Field::ParamName, "text"),
            ],
        ),
        (
            "notes__save",
            &[
                (Field::Name, "save_note"),
                (Field::Description, "Save a note"),
                (Field::ParamName, "text"),
            ],
        ),
    ];

    /// Ranks `query` with `feedback` (None: plain) and renders `key score` per hit.
    fn check_feedback(specs: &[Spec<'_>], query: &str, feedback: Option<Feedback>, expect: Expect) {
        let docs = documents(specs);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        let hits = index.rank_with(query, feedback.as_ref(), &|_| true);
        let rendered: Vec<String> = hits
            .iter()
            .map(|hit| format!("{} {:.3}", docs[hit.doc as usize].key, hit.score))
            .collect();
        expect.assert_eq(&rendered.join(", "));
    }

    #[test]
    fn feedback_reaches_a_tool_only_the_best_hit_shares_words_with() {
        check_feedback(
            PAPERS,
            "find arxiv papers",
            None,
            expect!["papers__search_arxiv 2.442"],
        );
        check_feedback(
            PAPERS,
            "find arxiv papers",
            Some(Feedback::default()),
            expect!["papers__search_arxiv 2.711, papers__summarize 0.016"],
        );
    }

    #[test]
    fn feedback_keeps_the_query_terms_at_full_weight() {
        // The expansion only adds: every plain hit keeps at least its plain score.
        let docs = documents(PAPERS);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        let plain = index.rank("summary of a note", &|_| true);
        let expanded = index.rank_with("summary of a note", Some(&Feedback::default()), &|_| true);
        for hit in &plain {
            let after = expanded
                .iter()
                .find(|h| h.doc == hit.doc)
                .expect("still a hit");
            assert!(after.score >= hit.score, "{plain:?} -> {expanded:?}");
        }
    }

    #[test]
    fn query_length_counts_distinct_analyzed_terms() {
        let index = Bm25Index::build(&documents(TOOLS), &Bm25Params::default());
        assert_eq!(index.query_length(""), 0);
        // Unknown words count too: the length is the request's, not the index's.
        assert_eq!(index.query_length("time time zebra"), 2);
        // Chinese counts in words, not in its unigrams and bigrams: four characters, about
        // three words at 1.5 characters a word (7 terms before); a repeated character once.
        assert_eq!(index.query_length("查询天气"), 3);
        assert_eq!(index.query_length("查询查询"), 1);
        // Mixed text: the Latin words as terms, the Chinese by its characters.
        assert_eq!(index.query_length("查询天气 weather zebra"), 5);
    }

    #[test]
    fn a_chinese_request_measures_about_as_long_as_its_english_translation() {
        // One of ultratool's parallel requests, as the catalog analyzes it. Before CJK text
        // counted in words the Chinese measured 2.8 times the English on average, and
        // adaptive fusion gave it the semantic weight of a request three times as long.
        let index = Bm25Index::build_with(
            &documents(TOOLS),
            &Bm25Params::default(),
            Analyzer {
                stemming: Some(crate::Language::English),
                stop_words: Some(crate::Language::English),
                ..Analyzer::default()
            },
        );
        let english = index.query_length(
            "I need to create a file named meeting_notes.txt with the content \
             \"Meeting notes of March 15, 2023\". And after the file is created, I also \
             need to update the content to \"Department meeting notes of March 15, 2023\".",
        );
        let chinese = index.query_length(
            "我需要创建一个名称为 meeting_notes.txt 的新文件，内容为 \"2023年3月15日会议记录\"。\
             并且在文件创建后，我还需要更新内容为 \"2023年3月15日部门会议记录\"。",
        );
        let ratio = chinese as f32 / english as f32;
        assert!((0.7..=1.4).contains(&ratio), "{chinese} / {english}");
        let hybrid = crate::Hybrid {
            balance: 65,
            adaptive: Some(crate::Adaptive::default()),
            ..crate::Hybrid::default()
        };
        let (zh, en) = (
            hybrid.semantic_weight(chinese),
            hybrid.semantic_weight(english),
        );
        assert!(
            (zh - en).abs() <= 0.1,
            "semantic weight {zh} (zh) against {en} (en)"
        );
    }

    #[test]
    fn feedback_switched_off_is_the_plain_ranking() {
        let docs = documents(PAPERS);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        let plain = index.rank("arxiv summary", &|_| true);
        for off in [
            Feedback {
                docs: 0,
                ..Feedback::default()
            },
            Feedback {
                terms: 0,
                ..Feedback::default()
            },
            Feedback {
                weight: 0.0,
                ..Feedback::default()
            },
            Feedback {
                weight: f32::NAN,
                ..Feedback::default()
            },
            Feedback {
                weight: -1.0,
                ..Feedback::default()
            },
        ] {
            assert_eq!(
                index.rank_with("arxiv summary", Some(&off), &|_| true),
                plain,
                "{off:?}"
            );
        }
    }

    #[test]
    fn feedback_documents_come_from_what_the_filter_lets_through() {
        // With the search tool filtered out, the summariser is the best hit and its words
        // ("summary", "abstract", "text") reach the note tool through "text".
        let docs = documents(PAPERS);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        let keep = |doc: DocId| doc != 0;
        let keys_of = |hits: &[Hit]| keys(&docs, hits);
        assert_eq!(keys_of(&index.rank("summary", &keep)), "papers__summarize");
        assert_eq!(
            keys_of(&index.rank_with("summary", Some(&Feedback::default()), &keep)),
            "papers__summarize notes__save"
        );
    }

    #[test]
    fn document_terms_are_bounded_and_sum_to_at_most_one() {
        let long: String = (0..100).map(|i| format!("word{i} ")).collect();
        let docs = documents(&[
            ("long", &[(Field::Description, &long)]),
            ("short", TOOLS[0].1),
        ]);
        let index = Bm25Index::build(&docs, &Bm25Params::default());
        for doc in 0..docs.len() {
            let terms = &index.doc_terms[index.doc_offsets[doc]..index.doc_offsets[doc + 1]];
            assert!(terms.len() <= FEEDBACK_DOC_TERMS);
            let mass: f32 = terms.iter().map(|&(_, p)| p).sum();
            assert!(mass > 0.0 && mass <= 1.0 + 1e-6, "{mass}");
            assert!(terms.windows(2).all(|pair| pair[0].1 >= pair[1].1));
        }
    }

    // Property tests: a small vocabulary so documents and queries overlap often.

    const WORDS: &[&str] = &[
        "get", "list", "file", "files2", "getTime", "get_time", "weather", "天气", "查询", "s3",
        "GitHub", "issue", "time", "x",
    ];

    fn text() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(WORDS), 0..5).prop_map(|words| words.join(" "))
    }

    fn docs() -> impl Strategy<Value = Vec<Document>> {
        let field = prop::sample::select(Field::ALL.as_slice());
        let document = ("[a-c]{0,2}", prop::collection::vec((field, text()), 0..4))
            .prop_map(|(key, fields)| Document { key, fields });
        prop::collection::vec(document, 0..12)
    }

    fn tokens_of(document: &Document) -> HashSet<String> {
        document
            .fields
            .iter()
            .flat_map(|(_, text)| tokenize(text))
            .collect()
    }

    proptest! {
        #[test]
        fn ranking_invariants_hold(docs in docs(), query in text(), mask in prop::collection::vec(any::<bool>(), 12)) {
            let keep = |doc: DocId| mask[doc as usize];
            let index = Bm25Index::build(&docs, &Bm25Params::default());
            let hits = index.rank(&query, &keep);

            // Deterministic: same input, same output, also from a fresh build.
            prop_assert_eq!(&hits, &index.rank(&query, &keep));
            prop_assert_eq!(&hits, &Bm25Index::build(&docs, &Bm25Params::default()).rank(&query, &keep));

            // Word order in the query does not matter.
            let reversed: Vec<&str> = query.split(' ').rev().collect();
            prop_assert_eq!(&hits, &index.rank(&reversed.join(" "), &keep));

            // Sorted by score descending, then key ascending, then doc id.
            for pair in hits.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                let ordered = a.score > b.score
                    || (a.score == b.score
                        && (&docs[a.doc as usize].key, a.doc) < (&docs[b.doc as usize].key, b.doc));
                prop_assert!(ordered, "{:?} before {:?}", a, b);
            }

            // Exactly the kept documents that share a token, each once, with a positive score.
            let query_tokens: HashSet<String> = tokenize(&query).into_iter().collect();
            let expected: HashSet<DocId> = (0..docs.len() as DocId)
                .filter(|&doc| keep(doc) && !tokens_of(&docs[doc as usize]).is_disjoint(&query_tokens))
                .collect();
            let returned: HashSet<DocId> = hits.iter().map(|hit| hit.doc).collect();
            prop_assert_eq!(returned.len(), hits.len());
            prop_assert_eq!(returned, expected);
            prop_assert!(hits.iter().all(|hit| hit.score.is_finite() && hit.score > 0.0));
        }

        #[test]
        fn feedback_ranking_invariants_hold(
            docs in docs(), query in text(), mask in prop::collection::vec(any::<bool>(), 12),
            fb_docs in 0usize..4, fb_terms in 0usize..12, weight in 0.0f32..1.0,
            max_df in 0.0f32..=1.0,
        ) {
            let keep = |doc: DocId| mask[doc as usize];
            let feedback = Feedback { docs: fb_docs, terms: fb_terms, weight, max_df };
            let index = Bm25Index::build(&docs, &Bm25Params::default());
            let hits = index.rank_with(&query, Some(&feedback), &keep);
            prop_assert_eq!(&hits, &index.rank_with(&query, Some(&feedback), &keep));
            let reversed: Vec<&str> = query.split(' ').rev().collect();
            prop_assert_eq!(&hits, &index.rank_with(&reversed.join(" "), Some(&feedback), &keep));
            for pair in hits.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                let ordered = a.score > b.score
                    || (a.score == b.score
                        && (&docs[a.doc as usize].key, a.doc) < (&docs[b.doc as usize].key, b.doc));
                prop_assert!(ordered, "{:?} before {:?}", a, b);
            }
            // Every plain hit stays, only kept documents come in, each once, scores finite.
            let plain = index.rank(&query, &keep);
            let returned: HashSet<DocId> = hits.iter().map(|hit| hit.doc).collect();
            prop_assert_eq!(returned.len(), hits.len());
            prop_assert!(plain.iter().all(|hit| returned.contains(&hit.doc)));
            prop_assert!(hits.iter().all(|hit| keep(hit.doc) && hit.score.is_finite() && hit.score > 0.0));
        }

        #[test]
        fn arbitrary_text_never_panics(
            texts in prop::collection::vec(any::<String>(), 0..6),
            query in any::<String>(),
        ) {
            let docs: Vec<Document> = texts
                .into_iter()
                .enumerate()
                .map(|(at, text)| Document { key: text.clone(), fields: vec![(Field::ALL[at % 6], text)] })
                .collect();
            let index = Bm25Index::build(&docs, &Bm25Params::default());
            for hit in index.rank(&query, &|_| true) {
                prop_assert!((hit.doc as usize) < docs.len());
                prop_assert!(hit.score.is_finite());
            }
        }
    }
}
