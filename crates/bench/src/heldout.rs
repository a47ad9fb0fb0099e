//! Held-out calibration: what a threshold fitted on some items gives on
//! items it did not see. Owns the splits (k-fold cross-validation by a
//! seeded shuffle, or a second bench output of fresh items), applying a
//! fitted threshold to unseen items, the held-out curve of each signal
//! (CPT, APGR) and the bootstrap interval of the chosen point. It must not
//! read files nor render anything (`calibrate` does both).
//!
//! Why: `calibrate`'s curves are in sample. A threshold read off the same
//! items it is scored on is optimistic (it sits where those items happened
//! to be right); a user who ships it gets the held-out figure.
//!
//! The procedure, per split: fit on the training items exactly as
//! `calibrate` does on all of them ([`choose`] on their [`curve`]), then
//! apply the threshold to the test items (escalate below it, or when the
//! signal is missing; a split whose training items meet no threshold for
//! the target sends its test items to the cloud, what the advice would say).
//! Each item is tested once, so the pooled outcomes are the held-out
//! figure. The held-out curve of a signal repeats this for cloud-share
//! targets 2%, 4%, ..., 100%; with the two fixed ends (local only, cloud
//! only) its points give CPT and APGR by the same computation as in
//! sample (`routing_curve::figures`). The threshold that goes
//! into a config is still the one fitted on all items: cross-validation
//! measures the fitting procedure, not another threshold.
//!
//! The interval: a percentile bootstrap over the held-out items' pooled
//! outcomes (resampled with replacement). It covers the sampling of the
//! items tested, not the variation between fits.

use super::routing_curve::{choose, curve, figures, Baselines, CurvePoint, PairedItem, Target};
use edgecloud_core::harness::Signal;
use edgecloud_core::rng::SplitMix64;
use serde::{Deserialize, Serialize};

/// Cloud-share targets of the held-out curve: 1/GRID, 2/GRID, ..., 1.
const GRID: u32 = 50;

/// How to hold items out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldOutSettings {
    /// Folds of the cross-validation (at least 2; at most the items).
    pub folds: usize,
    /// Seed of the shuffle that splits items into folds, and of the
    /// bootstrap.
    pub seed: u64,
    /// Bootstrap resamples of the interval.
    pub resamples: usize,
}

impl Default for HeldOutSettings {
    fn default() -> Self {
        Self {
            folds: 5,
            seed: 21,
            resamples: 1000,
        }
    }
}

/// A 95% percentile-bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// 2.5th percentile.
    pub low: f64,
    /// 97.5th percentile.
    pub high: f64,
}

/// The chosen target's figures on held-out items.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HeldOutPoint {
    /// Share of held-out items sent to the cloud.
    pub cloud_share: f64,
    /// Accuracy on the held-out items.
    pub accuracy: f64,
    /// Share of the held-out items' local-to-cloud gap recovered.
    pub pgr: Option<f64>,
    /// Interval of `cloud_share`.
    pub cloud_share_ci: Interval,
    /// Interval of `accuracy`.
    pub accuracy_ci: Interval,
    /// Splits whose training items met no threshold for the target (their
    /// test items went to the cloud).
    pub splits_without_threshold: usize,
}

/// One signal's curve on held-out items.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignalHeldOut {
    /// The signal.
    pub signal: Signal,
    /// Held-out points by rising cloud share (threshold: none; each point
    /// pools several fitted thresholds).
    pub points: Vec<CurvePoint>,
    /// Held-out cloud share recovering 50% of the gap.
    pub cpt50: Option<f64>,
    /// Held-out cloud share recovering 80% of the gap.
    pub cpt80: Option<f64>,
    /// Area under the held-out PGR curve (random routing: 0.5).
    pub apgr: Option<f64>,
    /// 95% bootstrap interval of `apgr`: the held-out items resampled,
    /// the thresholds as fitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apgr_ci: Option<Interval>,
    /// The chosen target's held-out figures with this signal.
    pub target: HeldOutPoint,
}

/// Held-out figures of every signal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOut {
    /// How items were held out, for people ("5-fold cross-validation ...").
    pub method: String,
    /// Items tested.
    pub items: usize,
    /// Local-only accuracy on them.
    pub local_accuracy: f64,
    /// Cloud-only accuracy on them.
    pub cloud_accuracy: f64,
    /// One entry per signal.
    pub signals: Vec<SignalHeldOut>,
}

impl HeldOut {
    /// The held-out figures of one signal.
    pub fn signal(&self, signal: Signal) -> Option<&SignalHeldOut> {
        self.signals.iter().find(|s| s.signal == signal)
    }
}

/// One split: fit on `train`, test on `test`.
struct Split<'a> {
    train: Vec<PairedItem>,
    test: Vec<&'a PairedItem>,
}

/// k folds of `items` by a seeded Fisher-Yates shuffle; fold of the i-th
/// shuffled item: i mod k. `folds` is clamped to `2..=items.len()`.
fn k_fold(items: &[PairedItem], folds: usize, seed: u64) -> Vec<Split<'_>> {
    let n = items.len();
    let k = folds.clamp(2, n.max(2));
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..n).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let mut fold_of = vec![0; n];
    for (pos, &i) in order.iter().enumerate() {
        fold_of[i] = pos % k;
    }
    (0..k)
        .map(|f| Split {
            train: (0..n)
                .filter(|&i| fold_of[i] != f)
                .map(|i| items[i].clone())
                .collect(),
            test: (0..n)
                .filter(|&i| fold_of[i] == f)
                .map(|i| &items[i])
                .collect(),
        })
        .collect()
}

/// Whether a cascade escalating below `threshold` sends `item` to the
/// cloud (as at run time: below it, or without the signal).
fn escalates(item: &PairedItem, signal: Signal, threshold: f64) -> bool {
    item.signals
        .get(&signal)
        .is_none_or(|v| !v.is_finite() || *v < threshold)
}

/// Per tested item: (escalated, right).
type Outcomes = Vec<(bool, bool)>;

/// Fits `target` on each split's training items and applies it to its
/// test items; returns the pooled outcomes and the splits that met no
/// threshold.
fn run_target(splits: &[Split<'_>], signal: Signal, target: Target) -> (Outcomes, usize) {
    let mut out = Vec::new();
    let mut missed = 0;
    for s in splits {
        let fitted = choose(&curve(&s.train, signal), target).and_then(|c| c.point.threshold);
        if fitted.is_none() {
            missed += 1;
        }
        // No threshold: the advice is the cloud, so the items go there.
        let th = fitted.unwrap_or(f64::INFINITY);
        for item in &s.test {
            let up = escalates(item, signal, th);
            out.push((
                up,
                if up {
                    item.cloud_correct
                } else {
                    item.local_correct
                },
            ));
        }
    }
    (out, missed)
}

fn share_and_accuracy(o: &[(bool, bool)]) -> (f64, f64) {
    let n = o.len().max(1) as f64;
    (
        o.iter().filter(|x| x.0).count() as f64 / n,
        o.iter().filter(|x| x.1).count() as f64 / n,
    )
}

/// The 2.5th and 97.5th percentiles (nearest rank) of `v`, sorted here.
fn interval(mut v: Vec<f64>) -> Interval {
    if v.is_empty() {
        return Interval {
            low: f64::NAN,
            high: f64::NAN,
        };
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Interval {
        low: at(0.025),
        high: at(0.975),
    }
}

/// Percentile-bootstrap intervals of (cloud share, accuracy) of `o`.
pub(super) fn bootstrap(o: &[(bool, bool)], resamples: usize, seed: u64) -> (Interval, Interval) {
    let n = o.len();
    if n == 0 || resamples == 0 {
        let (s, a) = share_and_accuracy(o);
        let point = |x| Interval { low: x, high: x };
        return (point(s), point(a));
    }
    let mut rng = SplitMix64::new(seed);
    let (mut shares, mut accs) = (Vec::with_capacity(resamples), Vec::with_capacity(resamples));
    for _ in 0..resamples {
        let (mut up, mut right) = (0usize, 0usize);
        for _ in 0..n {
            let (u, r) = o[(rng.next_u64() % n as u64) as usize];
            up += usize::from(u);
            right += usize::from(r);
        }
        shares.push(up as f64 / n as f64);
        accs.push(right as f64 / n as f64);
    }
    (interval(shares), interval(accs))
}

/// Percentile-bootstrap interval of the held-out APGR: the tested items
/// resampled, each grid point's outcomes on them counted again (its
/// thresholds as fitted; `grid[g][i]`: item `i` of `tested` at grid point
/// `g`).
fn apgr_interval(
    tested: &[&PairedItem],
    grid: &[Outcomes],
    resamples: usize,
    seed: u64,
) -> Option<Interval> {
    let n = tested.len();
    if n == 0 || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix64::new(seed ^ edgecloud_core::rng::GAMMA.rotate_left(17));
    let mut pick = vec![0usize; n];
    let mut values = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for p in pick.iter_mut() {
            *p = (rng.next_u64() % n as u64) as usize;
        }
        let base = Baselines::of(pick.iter().map(|&i| tested[i]));
        let mut points = vec![base.point(None, 0.0, base.weak)];
        for o in grid {
            let (up, right) = pick.iter().fold((0usize, 0usize), |(u, r), &i| {
                (u + usize::from(o[i].0), r + usize::from(o[i].1))
            });
            points.push(base.point(None, up as f64 / n as f64, right as f64 / n as f64));
        }
        points.push(base.point(None, 1.0, base.strong));
        points.sort_by(|a, b| a.cloud_share.total_cmp(&b.cloud_share));
        values.extend(figures(&points, base).apgr);
    }
    (!values.is_empty()).then(|| interval(values))
}

fn held_out(
    splits: &[Split<'_>],
    signals: &[Signal],
    target: Target,
    method: String,
    resamples: usize,
    seed: u64,
) -> HeldOut {
    let tested: Vec<&PairedItem> = splits.iter().flat_map(|s| s.test.iter().copied()).collect();
    let base = Baselines::of(tested.iter().copied());
    let (weak, strong) = (base.weak, base.strong);
    let point = |share: f64, acc: f64| base.point(None, share, acc);
    let per_signal = signals
        .iter()
        .map(|&signal| {
            let mut points = vec![point(0.0, weak)];
            let grid: Vec<Outcomes> = (1..=GRID)
                .map(|g| {
                    run_target(
                        splits,
                        signal,
                        Target::CloudShare(f64::from(g) / f64::from(GRID)),
                    )
                    .0
                })
                .collect();
            for o in &grid {
                let (s, a) = share_and_accuracy(o);
                points.push(point(s, a));
            }
            points.push(point(1.0, strong));
            points.sort_by(|a, b| a.cloud_share.total_cmp(&b.cloud_share));
            let f = figures(&points, base);
            let (o, missed) = run_target(splits, signal, target);
            let (s, a) = share_and_accuracy(&o);
            let (share_ci, acc_ci) = bootstrap(&o, resamples, seed ^ edgecloud_core::rng::GAMMA);
            SignalHeldOut {
                signal,
                cpt50: f.cpt50,
                cpt80: f.cpt80,
                apgr: f.apgr,
                apgr_ci: apgr_interval(&tested, &grid, resamples, seed),
                points,
                target: HeldOutPoint {
                    cloud_share: s,
                    accuracy: a,
                    pgr: base.pgr(a),
                    cloud_share_ci: share_ci,
                    accuracy_ci: acc_ci,
                    splits_without_threshold: missed,
                },
            }
        })
        .collect();
    HeldOut {
        method,
        items: tested.len(),
        local_accuracy: weak,
        cloud_accuracy: strong,
        signals: per_signal,
    }
}

/// k-fold cross-validation of `target` (and of each signal's curve) over
/// `items`.
pub fn cross_validate(
    items: &[PairedItem],
    signals: &[Signal],
    target: Target,
    settings: &HeldOutSettings,
) -> HeldOut {
    let splits = k_fold(items, settings.folds, settings.seed);
    let method = format!(
        "{}-fold cross-validation (items split by a shuffle seeded {}; each item tested once, \
         by a threshold fitted on the other folds)",
        splits.len(),
        settings.seed
    );
    held_out(
        &splits,
        signals,
        target,
        method,
        settings.resamples,
        settings.seed,
    )
}

/// Fits on all of `fit` and tests on `fresh` (another bench output's
/// items): the check on requests the calibration never saw.
pub fn evaluate_fresh(
    fit: &[PairedItem],
    fresh: &[PairedItem],
    signals: &[Signal],
    target: Target,
    settings: &HeldOutSettings,
    source: &str,
) -> HeldOut {
    let splits = [Split {
        train: fit.to_vec(),
        test: fresh.iter().collect(),
    }];
    let method = format!(
        "fitted on all {} calibration items, tested on the {} items of `{source}`",
        fit.len(),
        fresh.len()
    );
    held_out(
        &splits,
        signals,
        target,
        method,
        settings.resamples,
        settings.seed,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn item(i: usize, s: f64, local: bool, cloud: bool) -> PairedItem {
        let mut signals = BTreeMap::new();
        signals.insert(Signal::MeanLogprob, s);
        PairedItem {
            item: format!("i{i}"),
            signals,
            local_correct: local,
            cloud_correct: cloud,
            local_ms: 1.0,
            local_tokens: None,
            answer_tokens: None,
            samples: 1,
            cloud_ms: None,
            prompt_ms: None,
            embed_ms: None,
            cloud_usd: None,
        }
    }

    /// `n` items whose signal says nothing: the local lane is right at
    /// random (half the time), the cloud always.
    fn noise(n: usize, seed: u64) -> Vec<PairedItem> {
        let mut r = SplitMix64::new(seed);
        (0..n)
            .map(|i| {
                let s = -((r.next_u64() % 1_000_000) as f64) / 1e5;
                item(i, s, r.next_u64().is_multiple_of(2), true)
            })
            .collect()
    }

    /// `n` items whose signal predicts the local lane: right when above -1.
    fn informative(n: usize, seed: u64) -> Vec<PairedItem> {
        let mut r = SplitMix64::new(seed);
        (0..n)
            .map(|i| {
                let s = -((r.next_u64() % 1_000_000) as f64) / 5e5;
                item(i, s, s > -1.0, true)
            })
            .collect()
    }

    #[test]
    fn folds_partition_the_items_and_depend_only_on_the_seed() {
        let items = noise(23, 1);
        let a = k_fold(&items, 5, 7);
        assert_eq!(a.len(), 5);
        let mut tested: Vec<&str> = a
            .iter()
            .flat_map(|s| s.test.iter().map(|i| i.item.as_str()))
            .collect();
        tested.sort_unstable();
        let mut all: Vec<&str> = items.iter().map(|i| i.item.as_str()).collect();
        all.sort_unstable();
        assert_eq!(tested, all, "each item is tested exactly once");
        for s in &a {
            assert_eq!(s.train.len() + s.test.len(), 23);
            assert!(s
                .test
                .iter()
                .all(|t| s.train.iter().all(|x| x.item != t.item)));
            assert!((4..=5).contains(&s.test.len()));
        }
        let again = k_fold(&items, 5, 7);
        let names = |v: &[Split<'_>]| -> Vec<Vec<String>> {
            v.iter()
                .map(|s| s.test.iter().map(|i| i.item.clone()).collect())
                .collect()
        };
        assert_eq!(names(&a), names(&again));
        assert_ne!(names(&a), names(&k_fold(&items, 5, 8)));
        // More folds than items: leave-one-out.
        assert_eq!(k_fold(&items[..3], 5, 1).len(), 3);
    }

    /// On a signal that says nothing, where escalating gains nothing on
    /// average (each lane right half the time, independently), the
    /// in-sample "most accurate point" sits where those items happened to
    /// gain: it claims a gain. Held out, the same procedure gains nothing.
    /// Were the test items in the fit, the held-out figure would equal the
    /// in-sample one and this would fail.
    #[test]
    fn held_out_is_not_optimistic_where_in_sample_is() {
        let target = Target::CloudShare(1.0);
        let (mut in_sample, mut held, mut weak) = (0.0, 0.0, 0.0);
        let runs = 20;
        for seed in 0..runs {
            let mut r = SplitMix64::new(seed + 100);
            let items: Vec<PairedItem> = (0..60)
                .map(|i| {
                    let s = -((r.next_u64() % 1_000_000) as f64) / 1e5;
                    item(
                        i,
                        s,
                        r.next_u64().is_multiple_of(2),
                        r.next_u64().is_multiple_of(2),
                    )
                })
                .collect();
            let c = curve(&items, Signal::MeanLogprob);
            in_sample += choose(&c, target).unwrap().point.accuracy;
            let h = cross_validate(
                &items,
                &[Signal::MeanLogprob],
                target,
                &HeldOutSettings {
                    resamples: 0,
                    ..HeldOutSettings::default()
                },
            );
            held += h.signals[0].target.accuracy;
            weak += h.local_accuracy;
        }
        let n = runs as f64;
        let (in_sample, held, weak) = (in_sample / n, held / n, weak / n);
        let msg = format!("in sample {in_sample:.3}, held out {held:.3}, local only {weak:.3}");
        assert!(in_sample - weak > 0.03, "{msg}");
        assert!(in_sample - held > 0.03, "{msg}");
        assert!((held - weak).abs() < 0.03, "{msg}");
    }

    /// On a signal that does predict, held out and in sample agree.
    #[test]
    fn held_out_keeps_a_real_signal() {
        let items = informative(200, 3);
        let c = curve(&items, Signal::MeanLogprob);
        let h = cross_validate(
            &items,
            &[Signal::MeanLogprob],
            Target::Cpt80,
            &HeldOutSettings::default(),
        );
        let s = &h.signals[0];
        // Perfect ordering with half the items right locally: PGR climbs
        // to 1 by share 0.5 and stays there, area 0.75.
        assert!((c.apgr.unwrap() - 0.75).abs() < 0.01, "{:?}", c.apgr);
        assert!(s.apgr.unwrap() > 0.7, "held-out APGR {:?}", s.apgr);
        let inside = choose(&c, Target::Cpt80).unwrap().point;
        assert!((s.target.accuracy - inside.accuracy).abs() < 0.05);
        assert!((s.target.cloud_share - inside.cloud_share).abs() < 0.05);
        let ci = s.target.accuracy_ci;
        assert!(ci.low <= s.target.accuracy && s.target.accuracy <= ci.high);
        assert!(ci.high - ci.low > 0.0 && ci.high - ci.low < 0.2, "{ci:?}");
        // The curve's ends are the two baselines.
        assert_eq!(s.points.first().unwrap().cloud_share, 0.0);
        assert_eq!(s.points.last().unwrap().cloud_share, 1.0);
        // The held-out APGR's interval holds it and clears random.
        let a = s.apgr_ci.expect("an interval");
        assert!(
            a.low <= s.apgr.unwrap() && s.apgr.unwrap() <= a.high,
            "{a:?}"
        );
        assert!(a.low > 0.6, "{a:?}");
    }

    /// A signal that says nothing: its held-out APGR's interval holds the
    /// random line.
    #[test]
    fn a_noise_signal_s_apgr_interval_holds_one_half() {
        let h = cross_validate(
            &noise(200, 8),
            &[Signal::MeanLogprob],
            Target::Cpt80,
            &HeldOutSettings::default(),
        );
        let a = h.signals[0].apgr_ci.expect("an interval");
        assert!(a.low < 0.5 && 0.5 < a.high, "{a:?}");
        assert!(a.high - a.low < 0.3, "{a:?}");
    }

    #[test]
    fn fresh_items_are_tested_with_the_full_fit() {
        let fit = informative(100, 4);
        let fresh = informative(50, 5);
        let h = evaluate_fresh(
            &fit,
            &fresh,
            &[Signal::MeanLogprob],
            Target::Cpt80,
            &HeldOutSettings::default(),
            "other",
        );
        assert_eq!(h.items, 50);
        let th = choose(&curve(&fit, Signal::MeanLogprob), Target::Cpt80)
            .unwrap()
            .point
            .threshold
            .unwrap();
        let up = fresh
            .iter()
            .filter(|i| escalates(i, Signal::MeanLogprob, th))
            .count();
        assert_eq!(h.signals[0].target.cloud_share, up as f64 / 50.0);
        assert!(h.method.contains("`other`"));
    }

    #[test]
    fn bootstrap_interval_brackets_and_is_seeded() {
        let o: Outcomes = (0..100).map(|i| (i % 4 == 0, i % 2 == 0)).collect();
        let (s, a) = bootstrap(&o, 1000, 9);
        assert!(s.low < 0.25 && 0.25 < s.high, "{s:?}");
        assert!(a.low < 0.5 && 0.5 < a.high, "{a:?}");
        // About +-2 standard errors (0.1 for a half on 100 items).
        assert!(a.high - a.low > 0.12 && a.high - a.low < 0.28, "{a:?}");
        assert_eq!(bootstrap(&o, 1000, 9), (s, a));
    }
}
