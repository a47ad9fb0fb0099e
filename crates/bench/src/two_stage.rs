//! Two-stage routing, simulated over graded items (issue 33): a request
//! whose prompt-only signal is below the first threshold goes straight to
//! the cloud with no local answer at all; the others run the answer-only
//! cascade (escalated when the answer's signal is below the second
//! threshold). Owns the joint fit of both thresholds on the calibration
//! items (bagged: the pair must reach the target on most bootstrap
//! resamples of them, so that it transfers to new items), and
//! the figures of a fitted pair on any items, latency included. It must
//! not read files nor render anything (`calibrate` does).
//!
//! The latency of an item, from its recorded runs (a simulation, said as
//! such wherever it is quoted):
//! - straight to the cloud: the prompt signal's cost (`prompt_ms`, the
//!   prompt pass, or `embed_ms`, the embedding; none for a prompt's length,
//!   known from its tokens) plus the cloud-only run;
//! - kept local: the local-only run (its prompt pass is the one that read
//!   a `prompt_logprob`; a `prompt_neighbours` embedding is added);
//! - escalated after the answer: the local-only run plus the cloud-only.

use super::heldout::{bootstrap, Interval};
use super::routing_curve::{mean, PairedItem};
use edgecloud_core::harness::Signal;
use edgecloud_core::rng::SplitMix64;
use serde::{Deserialize, Serialize};

/// Bootstrap resamples of the bagged fit.
pub(super) const BAGS: usize = 200;

/// A pair of thresholds: straight to the cloud below `prompt`, escalate
/// after the answer below `answer`. `None`: that stage never fires.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// The prompt-only signal's threshold.
    pub prompt: Option<f64>,
    /// The answer signal's threshold.
    pub answer: Option<f64>,
}

/// What a pair of thresholds gives on some items.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StagePoint {
    /// Items.
    pub items: usize,
    /// Accuracy.
    pub accuracy: f64,
    /// Share of items that called the cloud (either stage).
    pub cloud_share: f64,
    /// Share sent straight to the cloud by the first stage.
    pub straight_share: f64,
    /// Mean simulated latency, ms.
    pub mean_ms: f64,
    /// 95% bootstrap interval of `cloud_share`.
    pub cloud_share_ci: Interval,
    /// 95% bootstrap interval of `accuracy`.
    pub accuracy_ci: Interval,
}

/// A fitted two-stage route and, beside it, the answer-only cascade fitted
/// the same way, on the calibration items and on held-out ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TwoStage {
    /// The first stage's signal.
    pub prompt_signal: Signal,
    /// The second stage's signal.
    pub answer_signal: Signal,
    /// The accuracy the fit aims at.
    pub target_accuracy: f64,
    /// The two-stage thresholds (bagged).
    pub thresholds: Thresholds,
    /// The answer-only cascade's threshold (bagged), for comparison.
    pub cascade: Thresholds,
    /// The two-stage route on the calibration items.
    pub in_sample: StagePoint,
    /// The cascade on the calibration items.
    pub cascade_in_sample: StagePoint,
    /// The two-stage route on the held-out items, when there are some.
    pub held_out: Option<StagePoint>,
    /// The cascade on the held-out items.
    pub cascade_held_out: Option<StagePoint>,
}

/// One item's route under `t`: (called the cloud, went straight, right,
/// latency ms).
fn route(
    it: &PairedItem,
    prompt_signal: Signal,
    answer_signal: Signal,
    t: Thresholds,
) -> (bool, bool, bool, f64) {
    let cloud_ms = it.cloud_ms.unwrap_or(0.0);
    let prompt_ms = match prompt_signal {
        Signal::PromptNeighbours => it.embed_ms,
        Signal::PromptBrevity => None,
        _ => it.prompt_ms,
    }
    .unwrap_or(0.0);
    let below = |v: Option<f64>, t: Option<f64>| match (v, t) {
        (_, None) => false,
        (Some(v), Some(t)) => v < t,
        // No value: the stage cannot vouch for the local answer.
        (None, Some(_)) => true,
    };
    if below(it.signals.get(&prompt_signal).copied(), t.prompt) {
        return (true, true, it.cloud_correct, prompt_ms + cloud_ms);
    }
    // A neighbours score costs its embedding on every item; a prompt
    // log-probability is read in the local answer's own prompt pass.
    let extra = if t.prompt.is_some() && prompt_signal == Signal::PromptNeighbours {
        prompt_ms
    } else {
        0.0
    };
    if below(it.signals.get(&answer_signal).copied(), t.answer) {
        return (
            true,
            false,
            it.cloud_correct,
            extra + it.local_ms + cloud_ms,
        );
    }
    (false, false, it.local_correct, extra + it.local_ms)
}

/// The figures of `t` on `items` (intervals from `resamples` bootstrap
/// resamples seeded with `seed`).
pub(super) fn evaluate(
    items: &[PairedItem],
    prompt_signal: Signal,
    answer_signal: Signal,
    t: Thresholds,
    resamples: usize,
    seed: u64,
) -> StagePoint {
    let routed: Vec<_> = items
        .iter()
        .map(|it| route(it, prompt_signal, answer_signal, t))
        .collect();
    let outcomes: Vec<(bool, bool)> = routed.iter().map(|r| (r.0, r.2)).collect();
    let (cloud_share_ci, accuracy_ci) = bootstrap(&outcomes, resamples, seed);
    StagePoint {
        items: items.len(),
        accuracy: mean(routed.iter().map(|r| r.2)),
        cloud_share: mean(routed.iter().map(|r| r.0)),
        straight_share: mean(routed.iter().map(|r| r.1)),
        mean_ms: routed.iter().map(|r| r.3).sum::<f64>() / items.len().max(1) as f64,
        cloud_share_ci,
        accuracy_ci,
    }
}

/// Candidate thresholds of `signal` over `items`: never, then the
/// midpoints between adjacent distinct values, then above them all.
fn candidates(items: &[&PairedItem], signal: Signal) -> Vec<Option<f64>> {
    let mut v: Vec<f64> = items
        .iter()
        .filter_map(|i| i.signals.get(&signal).copied())
        .collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    let mut out = vec![None];
    out.extend(v.windows(2).map(|w| Some((w[0] + w[1]) / 2.0)));
    if let Some(last) = v.last() {
        out.push(Some(last + 1.0));
    }
    out
}

/// The bagged fit: among the pairs of thresholds over `items`, those
/// reaching `target` accuracy in at least half of [`BAGS`] bootstrap
/// resamples of the items; of them the one with the fewest cloud calls on
/// `items`, then the least mean latency. A pair chosen so is one whose
/// accuracy holds on most resamples, not one that reaches the target by
/// the luck of one item set (what a threshold fitted once on 100 items
/// does). None reaching it: everything to the cloud.
fn fit_bagged(
    items: &[PairedItem],
    prompt_signal: Signal,
    answer_signal: Signal,
    target: f64,
    prompt_stage: bool,
    seed: u64,
) -> Thresholds {
    let n = items.len();
    let mut rng = SplitMix64::new(seed);
    let bags: Vec<Vec<usize>> = (0..BAGS)
        .map(|_| {
            (0..n)
                .map(|_| (rng.next_u64() % n.max(1) as u64) as usize)
                .collect()
        })
        .collect();
    let refs: Vec<&PairedItem> = items.iter().collect();
    let firsts = if prompt_stage {
        candidates(&refs, prompt_signal)
    } else {
        vec![None]
    };
    let seconds = candidates(&refs, answer_signal);
    let mut best: Option<(usize, f64, Thresholds)> = None;
    for &p in &firsts {
        for &a in &seconds {
            let t = Thresholds {
                prompt: p,
                answer: a,
            };
            let routed: Vec<(bool, bool, f64)> = items
                .iter()
                .map(|it| {
                    let r = route(it, prompt_signal, answer_signal, t);
                    (r.0, r.2, r.3)
                })
                .collect();
            let reached = bags
                .iter()
                .filter(|bag| {
                    let right = bag.iter().filter(|&&i| routed[i].1).count();
                    right as f64 / n.max(1) as f64 >= target - 1e-9
                })
                .count();
            if reached * 2 < BAGS {
                continue;
            }
            let calls = routed.iter().filter(|r| r.0).count();
            let ms: f64 = routed.iter().map(|r| r.2).sum();
            if best.is_none_or(|(c, m, _)| calls < c || (calls == c && ms < m)) {
                best = Some((calls, ms, t));
            }
        }
    }
    best.map_or(
        Thresholds {
            prompt: None,
            answer: Some(f64::INFINITY),
        },
        |b| b.2,
    )
}

/// Fits a two-stage route and the answer-only cascade on `cal` for
/// `target` accuracy, and reports both there and on `held_out`.
pub(super) fn two_stage(
    cal: &[PairedItem],
    held_out: Option<&[PairedItem]>,
    prompt_signal: Signal,
    answer_signal: Signal,
    target: f64,
    resamples: usize,
    seed: u64,
) -> TwoStage {
    let thresholds = fit_bagged(cal, prompt_signal, answer_signal, target, true, seed);
    let cascade = fit_bagged(cal, prompt_signal, answer_signal, target, false, seed);
    let eval =
        |items: &[PairedItem], t| evaluate(items, prompt_signal, answer_signal, t, resamples, seed);
    TwoStage {
        prompt_signal,
        answer_signal,
        target_accuracy: target,
        thresholds,
        cascade,
        in_sample: eval(cal, thresholds),
        cascade_in_sample: eval(cal, cascade),
        held_out: held_out.map(|h| eval(h, thresholds)),
        cascade_held_out: held_out.map(|h| eval(h, cascade)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn item(p: f64, a: f64, local: bool, cloud: bool) -> PairedItem {
        PairedItem {
            item: String::new(),
            signals: BTreeMap::from([(Signal::PromptLogprob, p), (Signal::MinLogprob, a)]),
            local_correct: local,
            cloud_correct: cloud,
            local_ms: 1000.0,
            local_tokens: None,
            answer_tokens: None,
            samples: 1,
            cloud_ms: Some(100.0),
            prompt_ms: Some(10.0),
            embed_ms: None,
            cloud_usd: None,
        }
    }

    #[test]
    fn a_prompt_signal_that_knows_the_hard_items_sends_them_straight_and_saves_their_local_time() {
        // Hard items (prompt -5) the local model gets wrong, whatever its
        // answer signal says; easy ones (prompt -1) it gets right. The
        // answer signal sees through half the hard ones only.
        let mut items = Vec::new();
        for i in 0..20 {
            items.push(item(-1.0, -0.1 - 0.01 * f64::from(i), true, true));
            items.push(item(
                -5.0,
                if i % 2 == 0 { -3.0 } else { -0.05 },
                false,
                true,
            ));
        }
        let t = two_stage(
            &items,
            Some(&items),
            Signal::PromptLogprob,
            Signal::MinLogprob,
            1.0,
            100,
            1,
        );
        let two = t.in_sample;
        assert_eq!(two.accuracy, 1.0);
        assert_eq!(two.cloud_share, 0.5);
        assert_eq!(two.straight_share, 0.5);
        // The hard half skips its 1,000 ms local answer.
        assert!((two.mean_ms - (20.0 * 1000.0 + 20.0 * 110.0) / 40.0).abs() < 1e-9);
        // The cascade alone must escalate every item to reach 100%.
        let cas = t.cascade_in_sample;
        assert_eq!(cas.accuracy, 1.0);
        assert_eq!(cas.cloud_share, 1.0);
        assert_eq!(cas.straight_share, 0.0);
        assert!(cas.mean_ms > two.mean_ms);
        assert_eq!(t.held_out, Some(two));
        // A stage that never fires routes nothing.
        let none = evaluate(
            &items,
            Signal::PromptLogprob,
            Signal::MinLogprob,
            Thresholds {
                prompt: None,
                answer: None,
            },
            0,
            1,
        );
        assert_eq!((none.cloud_share, none.accuracy), (0.0, 0.5));
    }

    #[test]
    fn an_unreachable_target_sends_everything_to_the_cloud() {
        let items = vec![
            item(-1.0, -1.0, false, false),
            item(-2.0, -2.0, true, false),
        ];
        let t = two_stage(
            &items,
            None,
            Signal::PromptLogprob,
            Signal::MinLogprob,
            1.0,
            10,
            1,
        );
        assert_eq!(t.cascade.answer, Some(f64::INFINITY));
        assert_eq!(t.cascade_in_sample.cloud_share, 1.0);
        assert_eq!(t.held_out, None);
    }
}
