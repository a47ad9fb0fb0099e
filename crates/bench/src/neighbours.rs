//! The `prompt_neighbours` signal (issue 33): a prompt's score is the
//! share of the k calibration prompts nearest to it (cosine similarity of
//! unit-length embeddings) on which the local model was right, each
//! neighbour weighted uniformly or by its similarity. No training beyond
//! the calibration items the user already graded: the index is those
//! items' embeddings and their local grades. Owns the scoring, the
//! leave-one-out scores of the calibration items themselves, and the
//! choice of k and weighting (by leave-one-out APGR on the calibration
//! items only, so the choice never sees a held-out item). It must not read
//! files nor run a model.

use super::routing_curve::{curve, PairedItem};
use edgecloud_core::harness::Signal;
use serde::{Deserialize, Serialize};

/// How neighbours count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weighting {
    /// Each of the k counts the same.
    Uniform,
    /// Each counts `exp(similarity / SIMILARITY_TEMPERATURE)`: the
    /// nearest dominate (embeddings of one task's prompts are all alike,
    /// so raw similarities differ in the second decimal).
    Similarity,
}

/// The temperature of [`Weighting::Similarity`].
pub(super) const SIMILARITY_TEMPERATURE: f64 = 0.02;

/// The k and weighting of a neighbours signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighbourSettings {
    /// Neighbours read.
    pub k: usize,
    /// How they count.
    pub weighting: Weighting,
}

/// The ks tried by [`fit`].
pub(super) const KS: [usize; 6] = [1, 3, 5, 10, 20, 40];

/// One calibration prompt: its embedding and whether the local model was
/// right on it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Labelled<'a> {
    /// Unit-length embedding.
    pub(super) embedding: &'a [f32],
    /// The local answer's grade.
    pub(super) local_correct: bool,
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

/// The score of `query` against `index` (leaving out index entry `skip`:
/// a calibration item is never its own neighbour). `None` when the
/// index has no other entry.
pub(super) fn score(
    index: &[Labelled<'_>],
    query: &[f32],
    settings: NeighbourSettings,
    skip: Option<usize>,
) -> Option<f64> {
    let mut near: Vec<(f64, bool)> = index
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .map(|(_, l)| (cosine(query, l.embedding), l.local_correct))
        .collect();
    if near.is_empty() {
        return None;
    }
    near.sort_by(|a, b| b.0.total_cmp(&a.0));
    near.truncate(settings.k.max(1));
    let top = near[0].0;
    let (mut num, mut den) = (0.0, 0.0);
    for (sim, right) in near {
        let w = match settings.weighting {
            Weighting::Uniform => 1.0,
            // Relative to the nearest, so the exponent never overflows.
            Weighting::Similarity => ((sim - top) / SIMILARITY_TEMPERATURE).exp(),
        };
        den += w;
        if right {
            num += w;
        }
    }
    Some(num / den)
}

/// Every calibration item's score against the others.
pub(super) fn leave_one_out(
    index: &[Labelled<'_>],
    settings: NeighbourSettings,
) -> Vec<Option<f64>> {
    (0..index.len())
        .map(|i| score(index, index[i].embedding, settings, Some(i)))
        .collect()
}

/// The k and weighting whose leave-one-out scores route the calibration
/// items best (highest APGR; ties: the smaller k, uniform first), with
/// that APGR. `items[i]` is the item whose embedding is `index[i]`.
pub(super) fn fit(
    index: &[Labelled<'_>],
    items: &[PairedItem],
) -> (NeighbourSettings, Option<f64>) {
    let mut best: Option<(NeighbourSettings, f64)> = None;
    for k in KS.into_iter().filter(|&k| k < index.len().max(2)) {
        for weighting in [Weighting::Uniform, Weighting::Similarity] {
            let s = NeighbourSettings { k, weighting };
            let scored = with_scores(items, &leave_one_out(index, s));
            let Some(apgr) = curve(&scored, Signal::PromptNeighbours).apgr else {
                continue;
            };
            if best.is_none_or(|(_, b)| apgr > b + 1e-12) {
                best = Some((s, apgr));
            }
        }
    }
    match best {
        Some((s, a)) => (s, Some(a)),
        None => (
            NeighbourSettings {
                k: 5,
                weighting: Weighting::Uniform,
            },
            None,
        ),
    }
}

/// `items` with `scores[i]` as item i's `prompt_neighbours` value.
pub(super) fn with_scores(items: &[PairedItem], scores: &[Option<f64>]) -> Vec<PairedItem> {
    items
        .iter()
        .zip(scores)
        .map(|(it, s)| {
            let mut it = it.clone();
            match s {
                Some(v) => it.signals.insert(Signal::PromptNeighbours, *v),
                None => it.signals.remove(&Signal::PromptNeighbours),
            };
            it
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: [f32; 2]) -> Vec<f32> {
        let n = (v[0] * v[0] + v[1] * v[1]).sqrt();
        vec![v[0] / n, v[1] / n]
    }

    #[test]
    fn a_prompt_scores_by_its_nearest_calibration_prompts() {
        // Two clusters: the local model is right near (1, 0), wrong near (0, 1).
        let embs: Vec<Vec<f32>> = [[1.0, 0.1], [1.0, 0.0], [1.0, -0.1], [0.1, 1.0], [0.0, 1.0]]
            .map(unit)
            .to_vec();
        let right = [true, true, true, false, false];
        let index: Vec<Labelled> = embs
            .iter()
            .zip(right)
            .map(|(e, r)| Labelled {
                embedding: e,
                local_correct: r,
            })
            .collect();
        let s = NeighbourSettings {
            k: 2,
            weighting: Weighting::Uniform,
        };
        assert_eq!(score(&index, &unit([1.0, 0.05]), s, None), Some(1.0));
        assert_eq!(score(&index, &unit([0.05, 1.0]), s, None), Some(0.0));
        // Left out, item 3's neighbours are item 4 and one of the others.
        let loo = leave_one_out(&index, s);
        assert_eq!(loo[3], Some(0.5));
        assert_eq!(loo[1], Some(1.0));
        let k1 = NeighbourSettings { k: 1, ..s };
        assert_eq!(leave_one_out(&index, k1)[3], Some(0.0));
        // Similarity weighting: the nearest counts far more.
        let w = NeighbourSettings {
            k: 5,
            weighting: Weighting::Similarity,
        };
        assert!(score(&index, &unit([1.0, 0.0]), w, None).unwrap() > 0.99);
        assert_eq!(score(&index[..1], &unit([1.0, 0.0]), s, Some(0)), None);
    }
}
