//! Ranking quality metrics with binary relevance, per query and macro-averaged.
//!
//! For a ranking `r_1, r_2, ...` and the set `R` of relevant tools:
//!
//! ```text
//! nDCG@10   = DCG@10 / IDCG@10,  DCG@10 = sum over i <= 10 with r_i in R of 1 / log2(i + 1),
//!             IDCG@10 = sum over i <= min(|R|, 10) of 1 / log2(i + 1)
//! Recall@k  = |R ∩ {r_1..r_k}| / |R|
//! MRR@10    = 1 / (rank of the first relevant tool) if it is within the top 10, else 0
//! Comp@5    = 1 if every relevant tool is within the top 5, else 0 ("completeness": a
//!             task that needs several tools is only served when all of them are found)
//! ```
//!
//! A ranking that lists a tool twice counts it once, at its first position. Queries without
//! relevant tools have no defined score and are left out by the caller.

use std::collections::HashSet;

use serde::Serialize;

/// The five figures `mcpgw eval` reports for one query, or averaged over many; each in
/// `0.0..=1.0` (reports show them x100).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Metrics {
    pub ndcg_at_10: f64,
    pub recall_at_5: f64,
    pub recall_at_10: f64,
    pub mrr_at_10: f64,
    pub comp_at_5: f64,
}

/// How deep a ranking must be for [`Metrics::of`]: nothing past rank 10 is read.
pub const DEPTH: usize = 10;

impl Metrics {
    /// The metrics of one query's `ranking` (best first) against its `relevant` tools.
    /// `relevant` must not be empty; if it is, every metric is 0.
    pub fn of<S: AsRef<str>>(ranking: &[S], relevant: &HashSet<String>) -> Metrics {
        if relevant.is_empty() {
            return Metrics::default();
        }
        let mut seen: HashSet<&str> = HashSet::new();
        // 1-based ranks of the relevant tools found in the top DEPTH, ascending.
        let mut found: Vec<usize> = Vec::new();
        let mut rank = 0;
        for tool in ranking {
            let tool = tool.as_ref();
            if !seen.insert(tool) {
                continue;
            }
            rank += 1;
            if rank > DEPTH {
                break;
            }
            if relevant.contains(tool) {
                found.push(rank);
            }
        }
        let gain = |rank: usize| 1.0 / ((rank + 1) as f64).log2();
        let dcg: f64 = found.iter().map(|&rank| gain(rank)).sum();
        let ideal: f64 = (1..=relevant.len().min(DEPTH)).map(gain).sum();
        let within = |k: usize| found.iter().filter(|&&rank| rank <= k).count();
        let total = relevant.len() as f64;
        Metrics {
            ndcg_at_10: dcg / ideal,
            recall_at_5: within(5) as f64 / total,
            recall_at_10: within(10) as f64 / total,
            mrr_at_10: found.first().map_or(0.0, |&rank| 1.0 / rank as f64),
            comp_at_5: if within(5) == relevant.len() {
                1.0
            } else {
                0.0
            },
        }
    }

    /// The macro average (every query counts the same); all zeros for no queries.
    pub fn mean(all: &[Metrics]) -> Metrics {
        if all.is_empty() {
            return Metrics::default();
        }
        let n = all.len() as f64;
        let sum = |field: fn(&Metrics) -> f64| all.iter().map(field).sum::<f64>() / n;
        Metrics {
            ndcg_at_10: sum(|m| m.ndcg_at_10),
            recall_at_5: sum(|m| m.recall_at_5),
            recall_at_10: sum(|m| m.recall_at_10),
            mrr_at_10: sum(|m| m.mrr_at_10),
            comp_at_5: sum(|m| m.comp_at_5),
        }
    }

    /// Each figure x100, rounded to one decimal, as reports show them.
    pub fn percent(&self) -> Metrics {
        let p = |x: f64| (x * 1000.0).round() / 10.0;
        Metrics {
            ndcg_at_10: p(self.ndcg_at_10),
            recall_at_5: p(self.recall_at_5),
            recall_at_10: p(self.recall_at_10),
            mrr_at_10: p(self.mrr_at_10),
            comp_at_5: p(self.comp_at_5),
        }
    }
}

/// The `q`-quantile (`0.0..=1.0`) of `values` by the nearest-rank method; `None` when empty.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relevant(tools: &[&str]) -> HashSet<String> {
        tools.iter().map(|t| t.to_string()).collect()
    }

    fn close(actual: Metrics, expected: Metrics) {
        let pairs = [
            ("ndcg@10", actual.ndcg_at_10, expected.ndcg_at_10),
            ("recall@5", actual.recall_at_5, expected.recall_at_5),
            ("recall@10", actual.recall_at_10, expected.recall_at_10),
            ("mrr@10", actual.mrr_at_10, expected.mrr_at_10),
            ("comp@5", actual.comp_at_5, expected.comp_at_5),
        ];
        for (name, a, e) in pairs {
            assert!((a - e).abs() < 1e-9, "{name}: {a} != {e} in {actual:?}");
        }
    }

    #[test]
    fn perfect_ranking_scores_one_everywhere() {
        close(
            Metrics::of(&["a", "b", "x"], &relevant(&["a", "b"])),
            Metrics {
                ndcg_at_10: 1.0,
                recall_at_5: 1.0,
                recall_at_10: 1.0,
                mrr_at_10: 1.0,
                comp_at_5: 1.0,
            },
        );
    }

    #[test]
    fn nothing_found_scores_zero_everywhere() {
        close(
            Metrics::of(&["x", "y"], &relevant(&["a"])),
            Metrics::default(),
        );
        let empty: [&str; 0] = [];
        close(Metrics::of(&empty, &relevant(&["a"])), Metrics::default());
    }

    #[test]
    fn single_relevant_tool_at_rank_three() {
        // DCG = 1/log2(4) = 0.5, IDCG = 1; MRR = 1/3.
        close(
            Metrics::of(&["x", "y", "a", "z"], &relevant(&["a"])),
            Metrics {
                ndcg_at_10: 0.5,
                recall_at_5: 1.0,
                recall_at_10: 1.0,
                mrr_at_10: 1.0 / 3.0,
                comp_at_5: 1.0,
            },
        );
    }

    #[test]
    fn two_relevant_one_first_one_at_rank_three() {
        // DCG = 1 + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3) = 1.6309...
        let idcg = 1.0 + 1.0 / 3f64.log2();
        close(
            Metrics::of(&["a", "x", "b"], &relevant(&["a", "b"])),
            Metrics {
                ndcg_at_10: 1.5 / idcg,
                recall_at_5: 1.0,
                recall_at_10: 1.0,
                mrr_at_10: 1.0,
                comp_at_5: 1.0,
            },
        );
    }

    #[test]
    fn partial_recall_fails_completeness() {
        // Two of three relevant found, at ranks 2 and 7; the third is missing.
        let ranking = ["x1", "a", "x2", "x3", "x4", "x5", "b", "x6"];
        let dcg = 1.0 / 3f64.log2() + 1.0 / 8f64.log2();
        let idcg = 1.0 + 1.0 / 3f64.log2() + 0.5;
        close(
            Metrics::of(&ranking, &relevant(&["a", "b", "c"])),
            Metrics {
                ndcg_at_10: dcg / idcg,
                recall_at_5: 1.0 / 3.0,
                recall_at_10: 2.0 / 3.0,
                mrr_at_10: 0.5,
                comp_at_5: 0.0,
            },
        );
    }

    #[test]
    fn hits_past_rank_ten_do_not_count() {
        let mut ranking: Vec<String> = (0..10).map(|i| format!("x{i}")).collect();
        ranking.push("a".into());
        close(Metrics::of(&ranking, &relevant(&["a"])), Metrics::default());
    }

    #[test]
    fn repeated_tool_counts_once() {
        // `a` repeated does not push `b` out of the top 2 nor count twice.
        let metrics = Metrics::of(&["a", "a", "b"], &relevant(&["a", "b"]));
        assert_eq!(metrics.ndcg_at_10, 1.0);
        assert_eq!(metrics.recall_at_5, 1.0);
    }

    #[test]
    fn more_relevant_than_depth_caps_the_ideal() {
        // Twelve relevant tools, the top 10 all relevant: nDCG 1, recall 10/12, no Comp@5.
        let tools: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
        let set: HashSet<String> = tools.iter().cloned().collect();
        let metrics = Metrics::of(&tools, &set);
        assert!((metrics.ndcg_at_10 - 1.0).abs() < 1e-12);
        assert!((metrics.recall_at_10 - 10.0 / 12.0).abs() < 1e-12);
        assert_eq!(metrics.comp_at_5, 0.0);
    }

    #[test]
    fn mean_is_a_macro_average_and_percent_rounds() {
        let one = Metrics::of(&["a"], &relevant(&["a"]));
        let zero = Metrics::of(&["x"], &relevant(&["a"]));
        let mean = Metrics::mean(&[one, zero, zero]);
        assert!((mean.ndcg_at_10 - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(mean.percent().ndcg_at_10, 33.3);
        assert_eq!(Metrics::mean(&[]), Metrics::default());
        let two_thirds = Metrics::mean(&[one, one, zero]);
        assert_eq!(two_thirds.percent().mrr_at_10, 66.7);
    }

    #[test]
    fn percentile_uses_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), Some(50.0));
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&values, 1.0), Some(100.0));
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.5), Some(2.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
