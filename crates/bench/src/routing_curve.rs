//! The routing curve: accuracy against cloud share for a cascade on one
//! local confidence signal, over items both baselines answered, and its
//! headline figures (CPT, APGR). Owns the paired item, the curve points,
//! the one computation of PGR, CPT and APGR (used by the in-sample curve
//! here and by `heldout`'s curves alike), and the choice of a threshold
//! for a target. It must not read files, render anything nor split items
//! (`calibrate` and `heldout` do).
//!
//! The simulated cascade matches the run-time one: an item escalates to
//! the cloud when its local signal is below the threshold (the harness
//! keeps a local answer when its score is `>=` the threshold), or when the
//! local lane gave no signal (it failed). Escalated items take the cloud's
//! graded answer, the others the local one.
//!
//! Definitions (RouteLLM, Ong et al. 2024):
//! - *weak* / *strong*: local-only / cloud-only accuracy on the paired items.
//! - *PGR* of a point: (accuracy - weak) / (strong - weak).
//! - *CPT(x)*: the smallest cloud share among the curve's points whose PGR
//!   reaches x (achievable thresholds only, no interpolation).
//! - *APGR*: the area under PGR against cloud share from 0 to 1, by the
//!   trapezoid rule over the curve's points (0 = weak only, 1 = strong
//!   only; random routing, the straight line, is 0.5). Interpolating
//!   between two points is what routing a random share of the tied or
//!   in-between items would give.
//!
//! Thresholds are midpoints between adjacent distinct signal values, so a
//! value recorded with a rounding difference still falls on the same side
//! at run time.

use edgecloud_core::harness::Signal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One workload item as both baselines answered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedItem {
    /// The item's id.
    pub item: String,
    /// The local answer's signals (`None`: none, e.g. the lane failed).
    pub signals: BTreeMap<Signal, f64>,
    /// Whether the local-only answer was right.
    pub local_correct: bool,
    /// Whether the cloud-only answer was right.
    pub cloud_correct: bool,
    /// The local-only run's latency.
    pub local_ms: f64,
    /// Tokens the local lane sampled for the item (all samples of a
    /// consensus), when recorded.
    #[serde(default)]
    pub local_tokens: Option<u64>,
    /// Tokens of the local answer itself (the chosen sample's).
    #[serde(default)]
    pub answer_tokens: Option<u64>,
    /// Samples the local lane drew (1 without a consensus).
    #[serde(default = "one")]
    pub samples: u32,
    /// The cloud-only run's latency, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_ms: Option<f64>,
    /// What reading the item's prompt-only signals cost (the prompt pass,
    /// or the embedding), when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ms: Option<f64>,
    /// What embedding the item's prompt cost (`prompt_neighbours`), when
    /// recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed_ms: Option<f64>,
    /// What the cloud-only answer cost in dollars (the run's `cost`), when
    /// its cloud model was priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_usd: Option<f64>,
}

fn one() -> u32 {
    1
}

/// One point of a simulated cascade.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Escalate below this value of the signal; `None` for the origin
    /// (never escalate: local-only).
    pub threshold: Option<f64>,
    /// Share of items sent to the cloud.
    pub cloud_share: f64,
    /// Accuracy of the cascade.
    pub accuracy: f64,
    /// Share of the local-to-cloud gap recovered (absent without a gap).
    pub pgr: Option<f64>,
    /// Cloud dollars per request of the cascade: what its escalated
    /// items' cloud-only runs cost, over all items (absent when no
    /// cloud-only run was priced; an unpriced item counts at the mean of
    /// the priced ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_request: Option<f64>,
}

/// The simulated cascade of one signal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalCurve {
    /// The signal.
    pub signal: Signal,
    /// Items without a value of this signal (always escalated).
    pub missing: usize,
    /// The curve, by rising cloud share (from 0 to 1).
    pub points: Vec<CurvePoint>,
    /// Cloud share needed to recover 50% of the gap.
    pub cpt50: Option<f64>,
    /// Cloud share needed to recover 80% of the gap.
    pub cpt80: Option<f64>,
    /// Area under the PGR curve (random routing: 0.5).
    pub apgr: Option<f64>,
}

/// What the chosen threshold was chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Target {
    /// The most accurate point whose cloud share is at most this.
    CloudShare(f64),
    /// The fewest cloud calls whose accuracy reaches this.
    Quality(f64),
    /// The fewest cloud calls recovering 80% of the gap (the default).
    Cpt80,
    /// The most accurate point whose cloud dollars per request are at
    /// most this (needs priced cloud-only runs).
    Cost(f64),
}

/// The threshold chosen for a target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// The signal.
    pub signal: Signal,
    /// What it was chosen for.
    pub target: Target,
    /// The curve point (its threshold is what goes in the config).
    pub point: CurvePoint,
}

/// The share of `it` that is true (0 when empty).
pub(super) fn mean(it: impl Iterator<Item = bool>) -> f64 {
    let (mut n, mut k) = (0usize, 0usize);
    for b in it {
        n += 1;
        k += usize::from(b);
    }
    if n == 0 {
        0.0
    } else {
        k as f64 / n as f64
    }
}

/// The two ends of a curve: local-only (*weak*) and cloud-only (*strong*)
/// accuracy on the items it is drawn over. PGR is measured against them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Baselines {
    /// Local-only accuracy.
    pub(super) weak: f64,
    /// Cloud-only accuracy.
    pub(super) strong: f64,
}

impl Baselines {
    /// The baselines of `items`.
    pub(super) fn of<'a>(items: impl Iterator<Item = &'a PairedItem> + Clone) -> Self {
        Self {
            weak: mean(items.clone().map(|i| i.local_correct)),
            strong: mean(items.map(|i| i.cloud_correct)),
        }
    }

    /// Whether there is a gap to recover (else PGR, CPT and APGR are
    /// undefined).
    fn has_gap(&self) -> bool {
        (self.strong - self.weak).abs() > 1e-12
    }

    /// The share of the gap an accuracy recovers.
    pub(super) fn pgr(&self, accuracy: f64) -> Option<f64> {
        self.has_gap()
            .then(|| (accuracy - self.weak) / (self.strong - self.weak))
    }

    /// A curve point at this threshold, cloud share and accuracy.
    pub(super) fn point(
        &self,
        threshold: Option<f64>,
        cloud_share: f64,
        accuracy: f64,
    ) -> CurvePoint {
        CurvePoint {
            threshold,
            cloud_share,
            accuracy,
            pgr: self.pgr(accuracy),
            usd_per_request: None,
        }
    }
}

/// The headline figures of a curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Figures {
    /// CPT(50%).
    pub(super) cpt50: Option<f64>,
    /// CPT(80%).
    pub(super) cpt80: Option<f64>,
    /// APGR.
    pub(super) apgr: Option<f64>,
}

/// CPT(50%), CPT(80%) and APGR of `points` (by rising cloud share, from 0
/// to 1) against `baselines`: the one computation of the headline figures
/// (see the module docs), in sample and held out.
pub(super) fn figures(points: &[CurvePoint], baselines: Baselines) -> Figures {
    let cpt = |x: f64| {
        points
            .iter()
            .find(|p| p.pgr.is_some_and(|g| g >= x - 1e-12))
            .map(|p| p.cloud_share)
    };
    let apgr = baselines.has_gap().then(|| {
        points
            .windows(2)
            .map(|w| {
                let (a, b) = (w[0], w[1]);
                (b.cloud_share - a.cloud_share) * (a.pgr.unwrap_or(0.0) + b.pgr.unwrap_or(0.0))
                    / 2.0
            })
            .sum()
    });
    Figures {
        cpt50: cpt(0.5),
        cpt80: cpt(0.8),
        apgr,
    }
}

/// The simulated cascade of `signal` over `items` (see the module docs).
pub fn curve(items: &[PairedItem], signal: Signal) -> SignalCurve {
    let n = items.len();
    let base = Baselines::of(items.iter());
    let value = |i: &PairedItem| i.signals.get(&signal).copied().unwrap_or(f64::NEG_INFINITY);
    let mut sorted: Vec<&PairedItem> = items.iter().collect();
    sorted.sort_by(|a, b| value(a).total_cmp(&value(b)));
    let priced: Vec<f64> = items.iter().filter_map(|i| i.cloud_usd).collect();
    let mean_usd = (!priced.is_empty()).then(|| priced.iter().sum::<f64>() / priced.len() as f64);
    let usd_of = |i: &PairedItem| i.cloud_usd.or(mean_usd).unwrap_or(0.0);
    let priced_point = |p: CurvePoint, spent: f64| CurvePoint {
        usd_per_request: mean_usd.map(|_| spent / n as f64),
        ..p
    };
    let mut points = vec![priced_point(base.point(None, 0.0, base.weak), 0.0)];
    // Right answers when everything is local; each escalated item swaps
    // its local grade for the cloud's (and costs its cloud run).
    let mut right = items.iter().filter(|i| i.local_correct).count() as i64;
    let mut spent = 0.0;
    let mut k = 0;
    while k < n {
        let v = value(sorted[k]);
        while k < n && value(sorted[k]) == v {
            right += i64::from(sorted[k].cloud_correct) - i64::from(sorted[k].local_correct);
            spent += usd_of(sorted[k]);
            k += 1;
        }
        let threshold = match sorted.get(k).map(|i| value(i)) {
            Some(next) if v == f64::NEG_INFINITY => next - 1.0,
            Some(next) => (v + next) / 2.0,
            None if v == f64::NEG_INFINITY => 0.0,
            None => v + 1.0,
        };
        let accuracy = right as f64 / n as f64;
        points.push(priced_point(
            base.point(Some(threshold), k as f64 / n as f64, accuracy),
            spent,
        ));
    }
    let f = figures(&points, base);
    SignalCurve {
        signal,
        missing: items
            .iter()
            .filter(|i| !i.signals.contains_key(&signal))
            .count(),
        cpt50: f.cpt50,
        cpt80: f.cpt80,
        apgr: f.apgr,
        points,
    }
}
/// The point of `curve` that meets `target`, if any (see [`Target`]).
/// Only points with a threshold (realisable at run time) are chosen.
pub fn choose(curve: &SignalCurve, target: Target) -> Option<Choice> {
    let eps = 1e-9;
    let realisable = curve.points.iter().filter(|p| p.threshold.is_some());
    // Most accurate; among equals, fewest cloud calls.
    let most_accurate = |best: Option<CurvePoint>, p: &CurvePoint| match best {
        Some(b) if b.accuracy >= p.accuracy - eps => Some(b),
        _ => Some(*p),
    };
    let point = match target {
        Target::CloudShare(x) => realisable
            .filter(|p| p.cloud_share <= x + eps)
            .fold(None, most_accurate),
        Target::Cost(usd) => realisable
            .filter(|p| p.usd_per_request.is_some_and(|u| u <= usd + eps))
            .fold(None, most_accurate),
        Target::Quality(y) => realisable.copied().find(|p| p.accuracy >= y - eps),
        Target::Cpt80 => {
            let hit = realisable
                .clone()
                .copied()
                .find(|p| p.pgr.is_some_and(|g| g >= 0.8 - eps));
            // Without a gap to recover: the most accurate, fewest calls.
            hit.or_else(|| realisable.fold(None, most_accurate))
        }
    }?;
    Some(Choice {
        signal: curve.signal,
        target,
        point,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One paired item with a `p10_logprob` signal (shared with the
    /// calibration report's tests).
    pub(crate) fn item(name: &str, s: Option<f64>, local: bool, cloud: bool) -> PairedItem {
        let mut signals = BTreeMap::new();
        if let Some(v) = s {
            signals.insert(Signal::P10Logprob, v);
        }
        PairedItem {
            item: name.into(),
            signals,
            local_correct: local,
            cloud_correct: cloud,
            local_ms: 10.0,
            local_tokens: Some(20),
            answer_tokens: Some(20),
            samples: 1,
            cloud_ms: None,
            prompt_ms: None,
            embed_ms: None,
            cloud_usd: None,
        }
    }

    /// Four items, worked by hand:
    /// A -0.1 local right, cloud right; B -0.5 right, wrong;
    /// C -1.0 wrong, right; D -2.0 wrong, right.
    /// weak 2/4 = 0.5, strong 3/4 = 0.75, gap 0.25.
    /// Escalating in rising signal order: D (share .25): A, B local right,
    /// C wrong, D cloud right = 3/4; +C (.5): 4/4; +B (.75): 3/4; +A (1): 3/4.
    /// PGR: 0, 1, 2, 1, 1. CPT(50%) = CPT(80%) = 0.25.
    /// APGR = .25 * ((0+1) + (1+2) + (2+1) + (1+1)) / 2 = 1.125.
    pub(crate) fn four() -> Vec<PairedItem> {
        vec![
            item("A", Some(-0.1), true, true),
            item("B", Some(-0.5), true, false),
            item("C", Some(-1.0), false, true),
            item("D", Some(-2.0), false, true),
        ]
    }

    #[test]
    fn curve_matches_the_hand_computed_example() {
        let c = curve(&four(), Signal::P10Logprob);
        let shares: Vec<f64> = c.points.iter().map(|p| p.cloud_share).collect();
        let accs: Vec<f64> = c.points.iter().map(|p| p.accuracy).collect();
        assert_eq!(shares, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        assert_eq!(accs, vec![0.5, 0.75, 1.0, 0.75, 0.75]);
        let pgr: Vec<f64> = c.points.iter().map(|p| p.pgr.unwrap()).collect();
        assert_eq!(pgr, vec![0.0, 1.0, 2.0, 1.0, 1.0]);
        let th: Vec<Option<f64>> = c.points.iter().map(|p| p.threshold).collect();
        assert_eq!(
            th,
            vec![None, Some(-1.5), Some(-0.75), Some(-0.3), Some(0.9)]
        );
        assert_eq!(c.cpt50, Some(0.25));
        assert_eq!(c.cpt80, Some(0.25));
        assert!((c.apgr.unwrap() - 1.125).abs() < 1e-12);
        assert_eq!(c.missing, 0);
    }

    #[test]
    fn random_routing_has_apgr_one_half() {
        // Signal uncorrelated with which lane is right: every item is
        // local-wrong and cloud-right, so each escalation adds the same.
        let items: Vec<PairedItem> = (0..10)
            .map(|i| item(&i.to_string(), Some(-(i as f64)), false, true))
            .collect();
        let c = curve(&items, Signal::P10Logprob);
        assert!((c.apgr.unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(c.cpt50, Some(0.5));
        assert_eq!(c.cpt80, Some(0.8));
    }

    #[test]
    fn ties_move_together_and_missing_signals_escalate_first() {
        let items = vec![
            item("a", Some(-1.0), true, true),
            item("b", Some(-1.0), false, true),
            item("c", None, false, true),
            item("d", Some(-0.2), true, false),
        ];
        let c = curve(&items, Signal::P10Logprob);
        let shares: Vec<f64> = c.points.iter().map(|p| p.cloud_share).collect();
        assert_eq!(shares, vec![0.0, 0.25, 0.75, 1.0]);
        assert_eq!(c.missing, 1);
        // The missing item escalates below any finite threshold.
        assert_eq!(c.points[1].threshold, Some(-2.0));
        assert_eq!(c.points[2].threshold, Some(-0.6));
    }

    #[test]
    fn targets_pick_the_expected_points() {
        let c = curve(&four(), Signal::P10Logprob);
        let at = |t| choose(&c, t).map(|ch| (ch.point.cloud_share, ch.point.accuracy));
        assert_eq!(at(Target::CloudShare(0.3)), Some((0.25, 0.75)));
        assert_eq!(at(Target::CloudShare(0.5)), Some((0.5, 1.0)));
        assert_eq!(at(Target::CloudShare(1.0)), Some((0.5, 1.0)));
        assert_eq!(at(Target::Quality(0.9)), Some((0.5, 1.0)));
        assert_eq!(at(Target::Quality(0.7)), Some((0.25, 0.75)));
        assert_eq!(at(Target::Cpt80), Some((0.25, 0.75)));
        // The origin (never escalate) has no threshold: not choosable.
        assert_eq!(at(Target::CloudShare(0.1)), None);
        // Unpriced runs have no cost to meet.
        assert_eq!(at(Target::Cost(100.0)), None);
    }

    #[test]
    fn a_cost_target_takes_the_most_accurate_cascade_within_the_budget() {
        // Escalation order D, C, B, A; D's cloud run costs $0.04, C's is
        // unpriced (counted at the mean of the priced: $0.02), B's $0.01,
        // A's $0.01.
        let mut items = four();
        for (i, usd) in items
            .iter_mut()
            .zip([Some(0.01), Some(0.01), None, Some(0.04)])
        {
            i.cloud_usd = usd;
        }
        let c = curve(&items, Signal::P10Logprob);
        let usd: Vec<f64> = c
            .points
            .iter()
            .map(|p| p.usd_per_request.unwrap())
            .collect();
        let want = [0.0, 0.04 / 4.0, 0.06 / 4.0, 0.07 / 4.0, 0.08 / 4.0];
        for (got, want) in usd.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{usd:?}");
        }
        let at = |t| choose(&c, t).map(|ch| (ch.point.cloud_share, ch.point.accuracy));
        // $0.0125 a request buys D's escalation only; $0.015 buys C too.
        assert_eq!(at(Target::Cost(0.0125)), Some((0.25, 0.75)));
        assert_eq!(at(Target::Cost(0.015)), Some((0.5, 1.0)));
        assert_eq!(at(Target::Cost(0.005)), None);
    }
}
