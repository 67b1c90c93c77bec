//! Rankings of documents that come in groups (a catalog's tools and their servers): a group's
//! standing as a prior on its documents, a two-stage "best groups first" order, and a cap on
//! how many documents of one group come before the other groups' documents.
//!
//! Every function here reorders a ranking it is given and never adds or drops a document. With
//! a single group each is the identity: every document gets the same prior, the same stage
//! and the same cap, so a one-server catalog ranks as before.

use std::collections::HashMap;

use crate::bm25::Hit;
use crate::document::DocId;
use crate::hybrid::RRF_K;

/// How a group's score is made from its documents' places in the ranking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupScore {
    /// The reciprocal rank `1 / (RRF_K + rank)` of its best document.
    Best,
    /// The sum of its documents' reciprocal ranks: a group with several good documents
    /// outranks one with a single better one.
    Sum,
}

/// A group's rank as a prior on its documents' scores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupPrior {
    pub score: GroupScore,
    /// 0..=1: a document scores `(1 - weight) / (RRF_K + its rank) + weight / (RRF_K + its
    /// group's rank)`. 0 leaves the ranking as it is; a weight that is not finite counts as 0.
    pub weight: f32,
    /// Two-stage: when above 0, the documents of the best `stages` groups come first (in
    /// their prior-weighted order), then the rest.
    pub stages: usize,
}

/// The groups ranked by [`GroupScore`] over `ranking`: each group's rank from 1, best first,
/// ties by the group's best place.
pub fn group_ranks(
    ranking: &[Hit],
    group: &dyn Fn(DocId) -> u32,
    score: GroupScore,
) -> HashMap<u32, usize> {
    // (score, best place) per group.
    let mut groups: HashMap<u32, (f64, usize)> = HashMap::new();
    for (at, hit) in ranking.iter().enumerate() {
        let rr = 1.0 / (f64::from(RRF_K) + (at + 1) as f64);
        let entry = groups.entry(group(hit.doc)).or_insert((0.0, at));
        match score {
            GroupScore::Best => entry.0 = entry.0.max(rr),
            GroupScore::Sum => entry.0 += rr,
        }
    }
    let mut order: Vec<(u32, f64, usize)> =
        groups.into_iter().map(|(g, (s, b))| (g, s, b)).collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    order
        .into_iter()
        .enumerate()
        .map(|(rank, (g, _, _))| (g, rank + 1))
        .collect()
}

/// `ranking` reordered by `prior`, with the groups' ranks from `ranks` (a group missing from
/// it ranks after all that are there). Scores become the prior-weighted reciprocal ranks.
/// Ties keep the input order.
pub fn apply_prior(
    ranking: &[Hit],
    group: &dyn Fn(DocId) -> u32,
    ranks: &HashMap<u32, usize>,
    prior: &GroupPrior,
) -> Vec<Hit> {
    let weight = if prior.weight.is_finite() {
        f64::from(prior.weight.clamp(0.0, 1.0))
    } else {
        0.0
    };
    let unranked = ranks.len() + 1;
    let mut scored: Vec<(usize, bool, f64, Hit)> = ranking
        .iter()
        .enumerate()
        .map(|(at, hit)| {
            let group_rank = ranks.get(&group(hit.doc)).copied().unwrap_or(unranked);
            let score = (1.0 - weight) / (f64::from(RRF_K) + (at + 1) as f64)
                + weight / (f64::from(RRF_K) + group_rank as f64);
            let first_stage = prior.stages == 0 || group_rank <= prior.stages;
            (at, first_stage, score, *hit)
        })
        .collect();
    scored.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.total_cmp(&a.2)).then(a.0.cmp(&b.0)));
    scored
        .into_iter()
        .map(|(_, _, score, hit)| Hit {
            doc: hit.doc,
            score: score as f32,
        })
        .collect()
}

/// [`group_ranks`] from `ranking` itself, then [`apply_prior`].
pub fn group_prior(ranking: &[Hit], group: &dyn Fn(DocId) -> u32, prior: &GroupPrior) -> Vec<Hit> {
    let ranks = group_ranks(ranking, group, prior.score);
    apply_prior(ranking, group, &ranks, prior)
}

/// Diversification: walking down the first `window` places of `ranking`, a document whose
/// group already has `cap` documents placed is held back to the end of the window, so the
/// head covers more groups. Held-back documents keep their order, and so does the tail after
/// the window. A `cap` of 0 changes nothing.
pub fn cap_per_group(
    ranking: &[Hit],
    group: &dyn Fn(DocId) -> u32,
    cap: usize,
    window: usize,
) -> Vec<Hit> {
    if cap == 0 {
        return ranking.to_vec();
    }
    let window = window.min(ranking.len());
    let mut placed: HashMap<u32, usize> = HashMap::new();
    let mut head = Vec::with_capacity(ranking.len());
    let mut held = Vec::new();
    for hit in &ranking[..window] {
        let count = placed.entry(group(hit.doc)).or_insert(0);
        if *count < cap {
            *count += 1;
            head.push(*hit);
        } else {
            held.push(*hit);
        }
    }
    head.extend(held);
    head.extend_from_slice(&ranking[window..]);
    head
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn list(docs: &[DocId]) -> Vec<Hit> {
        docs.iter()
            .enumerate()
            .map(|(at, &doc)| Hit {
                doc,
                score: 100.0 - at as f32,
            })
            .collect()
    }

    fn docs(hits: &[Hit]) -> Vec<DocId> {
        hits.iter().map(|hit| hit.doc).collect()
    }

    /// Documents 0..10: group = doc / 3 (0,1,2 in group 0; 3,4,5 in group 1; ...).
    fn by_three(doc: DocId) -> u32 {
        doc / 3
    }

    #[test]
    fn sum_prior_lifts_a_group_with_several_good_documents() {
        // Group 1 (3, 4, 5) has places 2, 3, 4; group 0's best is first, alone.
        let ranking = list(&[0, 3, 4, 5, 6, 1]);
        let prior = GroupPrior {
            score: GroupScore::Sum,
            weight: 0.6,
            stages: 0,
        };
        assert_eq!(
            docs(&group_prior(&ranking, &by_three, &prior)),
            [3, 0, 4, 5, 1, 6]
        );
        // Best: group 0 keeps first place, and its second document 1 climbs over group 2's 6.
        let best = GroupPrior {
            score: GroupScore::Best,
            ..prior
        };
        assert_eq!(
            docs(&group_prior(&ranking, &by_three, &best)),
            [0, 3, 4, 5, 1, 6]
        );
    }

    #[test]
    fn two_stage_puts_the_best_groups_documents_first() {
        let ranking = list(&[0, 6, 3, 4, 1]);
        let prior = GroupPrior {
            score: GroupScore::Best,
            weight: 0.0,
            stages: 1,
        };
        assert_eq!(
            docs(&group_prior(&ranking, &by_three, &prior)),
            [0, 1, 6, 3, 4]
        );
    }

    #[test]
    fn cap_holds_back_a_third_document_of_one_group() {
        let ranking = list(&[0, 1, 2, 3, 6]);
        assert_eq!(
            docs(&cap_per_group(&ranking, &by_three, 2, 10)),
            [0, 1, 3, 6, 2]
        );
        assert_eq!(
            docs(&cap_per_group(&ranking, &by_three, 1, 3)),
            [0, 1, 2, 3, 6]
        );
        assert_eq!(
            docs(&cap_per_group(&ranking, &by_three, 0, 10)),
            [0, 1, 2, 3, 6]
        );
    }

    fn ranked() -> impl Strategy<Value = Vec<DocId>> {
        (
            Just((0..12).collect::<Vec<DocId>>()).prop_shuffle(),
            0usize..=12,
        )
            .prop_map(|(docs, len)| docs[..len].to_vec())
    }

    proptest! {
        #[test]
        fn one_group_leaves_the_ranking_as_it_is(
            ranking in ranked(), weight in 0.0f32..=1.0, stages in 0usize..3, sum in any::<bool>(),
            cap in 0usize..4,
        ) {
            let ranking = list(&ranking);
            let one = |_: DocId| 7;
            let score = if sum { GroupScore::Sum } else { GroupScore::Best };
            let prior = GroupPrior { score, weight, stages };
            prop_assert_eq!(docs(&group_prior(&ranking, &one, &prior)), docs(&ranking));
            prop_assert_eq!(docs(&cap_per_group(&ranking, &one, cap, 5)), docs(&ranking));
        }

        #[test]
        fn reordering_keeps_every_document_once(
            ranking in ranked(), weight in 0.0f32..=1.0, stages in 0usize..3, cap in 0usize..4,
        ) {
            let ranking = list(&ranking);
            let mut expected = docs(&ranking);
            expected.sort_unstable();
            let prior = GroupPrior { score: GroupScore::Sum, weight, stages };
            for reordered in [group_prior(&ranking, &by_three, &prior), cap_per_group(&ranking, &by_three, cap, 6)] {
                let mut got = docs(&reordered);
                got.sort_unstable();
                prop_assert_eq!(&got, &expected);
            }
        }

        #[test]
        fn weight_zero_without_stages_is_the_identity(ranking in ranked()) {
            let ranking = list(&ranking);
            let prior = GroupPrior { score: GroupScore::Sum, weight: 0.0, stages: 0 };
            prop_assert_eq!(docs(&group_prior(&ranking, &by_three, &prior)), docs(&ranking));
        }
    }
}
