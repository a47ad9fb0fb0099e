//! Calibration: from a bench output holding `local-only` and `cloud-only`
//! runs over the same graded items, simulate a cascade at every threshold
//! of each local confidence signal, without running anything. Owns pairing
//! the baselines' runs, picking the signal, the advice, and rendering the
//! result (Markdown, a chart, a
//! config snippet). It must not run lanes nor read files itself.
//!
//! The curves, their figures (CPT, APGR) and the choice of a threshold
//! are `routing_curve`'s; the held-out checks are `heldout`'s.

use super::error::BenchError;
use super::heldout::{cross_validate, evaluate_fresh, HeldOut, HeldOutPoint, HeldOutSettings};
use super::neighbours::{self, Labelled, NeighbourSettings};
use super::prompt_signals::{check_pair, PromptSignals};
use super::record::{RunRecord, RunStatus};
use super::report::{num, pct};
use super::routing_curve::{choose, curve, mean, Choice, PairedItem, SignalCurve, Target};
use super::svg;
use super::two_stage::{two_stage, TwoStage};
use edgecloud_core::harness::Signal;
use edgecloud_core::lane::Lane;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The chart `edgecloud bench calibrate` writes.
pub const CALIBRATION_CHART: &str = "quality_vs_cloud_share.svg";
/// The calibration as JSON.
pub const CALIBRATION_FILE: &str = "calibration.json";
/// The calibration as Markdown.
pub const CALIBRATION_REPORT: &str = "calibration.md";
/// The ready config snippet.
pub const CALIBRATION_CONFIG: &str = "calibrated.toml";

/// What the local-only runs cost per item: what every signal of this
/// calibration was paid with (see [`Calibration::cost`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LocalCost {
    /// Samples per item (the most any item drew).
    pub samples: u32,
    /// Tokens sampled per item, mean (all samples).
    pub tokens_mean: Option<f64>,
    /// Tokens of the answer itself per item, mean (one sample).
    pub answer_tokens_mean: Option<f64>,
    /// Local-only latency per item, median (nearest rank).
    pub ms_p50: f64,
    /// Local-only latency per item, mean.
    pub ms_mean: f64,
}

impl LocalCost {
    /// The cost of `items`' local-only runs.
    pub fn of(items: &[PairedItem]) -> Self {
        let mean_of =
            |v: Vec<u64>| (!v.is_empty()).then(|| v.iter().sum::<u64>() as f64 / v.len() as f64);
        let mut ms: Vec<f64> = items.iter().map(|i| i.local_ms).collect();
        ms.sort_by(f64::total_cmp);
        let ms_p50 = ms
            .get(((ms.len() as f64 * 0.5).ceil() as usize).max(1) - 1)
            .copied()
            .unwrap_or(0.0);
        Self {
            samples: items.iter().map(|i| i.samples).max().unwrap_or(1),
            tokens_mean: mean_of(items.iter().filter_map(|i| i.local_tokens).collect()),
            answer_tokens_mean: mean_of(items.iter().filter_map(|i| i.answer_tokens).collect()),
            ms_p50,
            ms_mean: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
        }
    }
}

/// A whole calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The deadline of the baseline runs used.
    pub deadline_ms: u64,
    /// Items paired (graded in both baselines).
    pub items: usize,
    /// Local-only accuracy on them.
    pub local_accuracy: f64,
    /// Cloud-only accuracy on them.
    pub cloud_accuracy: f64,
    /// Slowest local-only run among them.
    pub local_max_ms: f64,
    /// One curve per signal with values.
    pub curves: Vec<SignalCurve>,
    /// The chosen threshold, when the target is reachable.
    pub choice: Option<Choice>,
    /// Every signal's figures by k-fold cross-validation: what a threshold
    /// fitted on some items gives on the others.
    pub cross_validated: Option<HeldOut>,
    /// The figures on fresh items (`--eval`), fitted on all the items.
    #[serde(default)]
    pub fresh: Option<HeldOut>,
    /// What the local-only runs cost per item: the price of every signal
    /// here (the log-probability signals are read off the answer's own
    /// tokens; `answer_agreement` needs all the samples).
    #[serde(default)]
    pub cost: Option<LocalCost>,
    /// The k and weighting of `prompt_neighbours`, chosen on the
    /// calibration items, when embeddings were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbours: Option<NeighbourSettings>,
    /// Two-stage routes (one per prompt-only signal), when prompt signals
    /// were given and the target is an accuracy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub two_stage: Vec<TwoStage>,
    /// What reading each prompt-only signal cost per calibration item,
    /// mean ms (the scored prompt pass; the embedding).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prompt_cost_ms: BTreeMap<Signal, f64>,
    /// Plain advice from the figures (the held-out ones).
    pub advice: String,
}

/// The prompt-only signals joined to a calibration (`bench prompt-signals`
/// files, merged per half), with the workloads the runs were made on.
#[derive(Debug, Clone)]
pub struct PromptInputs {
    /// The calibration items' signals and where they came from.
    pub cal: (PromptSignals, String),
    /// The calibration runs' workload (`--workload`), when known.
    pub cal_workload: Option<String>,
    /// The fresh items' signals (`--eval`), and their runs' workload.
    pub eval: Option<(PromptSignals, String)>,
    /// The fresh runs' workload, when known.
    pub eval_workload: Option<String>,
}

/// A threshold separates the local answers a signal trusts from those it
/// doubts: calibration items the local model got all right, or all
/// wrong, cannot place one (any threshold fits them), so they are refused
/// by name rather than turned into a threshold that means nothing.
fn one_class_refused(items: &[PairedItem]) -> Result<(), BenchError> {
    let right = items.iter().filter(|i| i.local_correct).count();
    if right != 0 && right != items.len() {
        return Ok(());
    }
    let cloud = mean(items.iter().map(|i| i.cloud_correct));
    let (how, route) = if right == 0 {
        (
            "wrong",
            "`cloud-only` (or `fallback` for offline resilience)",
        )
    } else {
        ("right", "`local-only`")
    };
    Err(BenchError::InvalidSettings {
        reason: format!(
            "a one-class calibration set: the local model was {how} on all {} graded items \
             (cloud-only {}), so no threshold can be fitted (it needs items the local model got \
             right and items it got wrong); on this workload use {route}, or calibrate on more \
             varied items",
            items.len(),
            pct(cloud)
        ),
    })
}

/// Puts `file`'s signals on `items` (checking it covers them all).
fn attach(
    items: &mut [PairedItem],
    file: &PromptSignals,
    source: &str,
    workload: Option<&str>,
) -> Result<(), BenchError> {
    if let Some(w) = workload {
        file.check_covers(w, items.iter().map(|i| i.item.as_str()), source)?;
    }
    for it in items.iter_mut() {
        let Some(p) = file.items.get(&it.item) else {
            return Err(BenchError::Mismatch {
                what: format!("{source} has no signals for item `{}`", it.item),
            });
        };
        if let Some(v) = p.prompt_logprob.filter(|v| v.is_finite()) {
            it.signals.insert(Signal::PromptLogprob, v);
            it.prompt_ms = Some(p.prompt_ms);
        }
        it.embed_ms = p.embed_ms;
    }
    Ok(())
}

/// The neighbours index of `items`: each one's embedding in `file` and its
/// local grade; `None` unless every item has an embedding.
fn neighbour_index_of<'a>(
    items: &[PairedItem],
    file: &'a PromptSignals,
) -> Option<Vec<Labelled<'a>>> {
    items
        .iter()
        .map(|i| {
            Some(Labelled {
                embedding: file.items.get(&i.item)?.embedding.as_deref()?,
                local_correct: i.local_correct,
            })
        })
        .collect()
}

/// The accuracy a target asks for on items of these baselines; `None`
/// for a cloud-share target (the two-stage fit aims at an accuracy).
fn target_accuracy(target: Target, weak: f64, strong: f64) -> Option<f64> {
    match target {
        Target::Quality(y) => Some(y),
        Target::Cpt80 => Some(weak + 0.8 * (strong - weak)),
        Target::CloudShare(_) => None,
    }
}

impl Calibration {
    /// The curve of one signal.
    pub fn curve(&self, signal: Signal) -> Option<&SignalCurve> {
        self.curves.iter().find(|c| c.signal == signal)
    }

    /// The held-out figures the advice stands on: fresh items when there
    /// are some, else the cross-validation.
    pub fn held_out(&self) -> Option<&HeldOut> {
        self.fresh.as_ref().or(self.cross_validated.as_ref())
    }

    /// The chosen target's held-out figures.
    pub fn held_out_choice(&self) -> Option<HeldOutPoint> {
        let ch = self.choice?;
        Some(self.held_out()?.signal(ch.signal)?.target)
    }
}

/// Pairs the `local-only` and `cloud-only` runs of `runs` by item, at
/// `deadline_ms` (default: the largest deadline both policies ran at).
/// The first measured pass of each item is used.
pub fn pair_items(
    runs: &[RunRecord],
    deadline_ms: Option<u64>,
) -> Result<(u64, Vec<PairedItem>), BenchError> {
    let bad = |reason: String| BenchError::InvalidSettings { reason };
    let deadlines = |policy: &str| {
        let mut d: Vec<u64> = runs
            .iter()
            .filter(|r| r.policy == policy)
            .map(|r| r.deadline_ms)
            .collect();
        d.sort_unstable();
        d.dedup();
        d
    };
    let (local_d, cloud_d) = (deadlines("local-only"), deadlines("cloud-only"));
    let both: Vec<u64> = local_d
        .iter()
        .copied()
        .filter(|d| cloud_d.contains(d))
        .collect();
    let deadline = match deadline_ms {
        Some(d) if both.contains(&d) => d,
        Some(d) => {
            return Err(bad(format!(
                "no local-only and cloud-only runs at {d} ms (both ran at: {both:?})"
            )))
        }
        None => *both.last().ok_or_else(|| {
            bad(
                "calibration needs local-only and cloud-only runs at the same deadline \
                 (run the bench with --policies local-only,cloud-only)"
                    .into(),
            )
        })?,
    };
    let first = |policy: &str| {
        let mut m: BTreeMap<&str, &RunRecord> = BTreeMap::new();
        for r in runs
            .iter()
            .filter(|r| r.policy == policy && r.deadline_ms == deadline)
        {
            let e = m.entry(r.item.as_str()).or_insert(r);
            if r.repeat < e.repeat {
                *e = r;
            }
        }
        m
    };
    let (local, cloud) = (first("local-only"), first("cloud-only"));
    let mut items = Vec::new();
    // Keep the workload's order (seq order of the local runs).
    let mut order: Vec<&&RunRecord> = local.values().collect();
    order.sort_by_key(|r| r.seq);
    for l in order {
        let Some(c) = cloud.get(l.item.as_str()) else {
            continue;
        };
        let lane_correct = |r: &RunRecord, lane: Lane| {
            r.lane(lane)
                .and_then(|x| x.correct)
                .or(r.expected_match)
                .or_else(|| (r.status != RunStatus::Ok).then_some(false))
        };
        let (Some(lc), Some(cc)) = (lane_correct(l, Lane::Local), lane_correct(c, Lane::Cloud))
        else {
            continue;
        };
        if l.expected_match.is_none() && c.expected_match.is_none() {
            continue;
        }
        let mut signals = BTreeMap::new();
        if let Some(s) = l.lane(Lane::Local).and_then(|x| x.signals) {
            for sig in Signal::ALL {
                if let Some(v) = s.get(sig) {
                    signals.insert(sig, v);
                }
            }
        }
        let lane = l.lane(Lane::Local);
        // Records written before `prompt_brevity` existed: from the
        // lane's prompt length (the same count).
        if let Some(t) = lane.and_then(|x| x.prompt_tokens) {
            signals
                .entry(Signal::PromptBrevity)
                .or_insert(Signal::brevity(t));
        }
        let answer_tokens = lane.and_then(|x| x.completion_tokens);
        items.push(PairedItem {
            item: l.item.clone(),
            signals,
            local_correct: lc,
            cloud_correct: cc,
            local_ms: l.elapsed_ms,
            local_tokens: lane.and_then(|x| x.sampled_tokens).or(answer_tokens),
            answer_tokens,
            samples: lane.and_then(|x| x.samples).unwrap_or(1),
            cloud_ms: Some(c.elapsed_ms),
            prompt_ms: None,
            embed_ms: None,
        });
    }
    if items.len() < 2 {
        return Err(bad(format!(
            "only {} graded item(s) have both a local-only and a cloud-only run at {deadline} ms; \
             calibration needs graded items (workload `expected`)",
            items.len()
        )));
    }
    Ok((deadline, items))
}

/// Calibrates: pairs the baselines, draws every signal's curve, checks
/// each on held-out items (k-fold cross-validation per `held_out`, and the
/// items of `fresh` when given: another bench output, its source named),
/// and picks a threshold for `target` on `signal` (default: the signal
/// with the highest held-out APGR). The threshold is fitted on all items.
pub fn calibrate(
    runs: &[RunRecord],
    deadline_ms: Option<u64>,
    signal: Option<Signal>,
    target: Target,
    held_out: &HeldOutSettings,
    fresh: Option<(&[RunRecord], &str)>,
    prompt: Option<&PromptInputs>,
) -> Result<Calibration, BenchError> {
    let (deadline, mut items) = pair_items(runs, deadline_ms)?;
    one_class_refused(&items)?;
    let mut neighbour_index: Option<(Vec<Labelled>, NeighbourSettings)> = None;
    if let Some(p) = prompt {
        let (file, source) = &p.cal;
        attach(&mut items, file, source, p.cal_workload.as_deref())?;
        if let Some((eval, eval_source)) = &p.eval {
            check_pair(file, eval, eval_source)?;
        }
        if let Some(index) = neighbour_index_of(&items, file) {
            let (settings, _) = neighbours::fit(&index, &items);
            let scores = neighbours::leave_one_out(&index, settings);
            items = neighbours::with_scores(&items, &scores);
            neighbour_index = Some((index, settings));
        }
    }
    let curves: Vec<SignalCurve> = Signal::ALL
        .into_iter()
        .map(|s| curve(&items, s))
        .filter(|c| c.missing < items.len())
        .collect();
    // Every local answer has a prompt length; a cascade needs a signal of
    // the answer itself.
    if curves.iter().all(|c| c.signal.is_prompt_only()) {
        return Err(BenchError::InvalidSettings {
            reason: "the local-only runs carry no confidence signals (a local lane with \
                     log-probabilities is needed)"
                .into(),
        });
    }
    let signals: Vec<Signal> = curves.iter().map(|c| c.signal).collect();
    let cv = cross_validate(&items, &signals, target, held_out);
    let mut fresh_paired = None;
    let fresh = match fresh {
        Some((runs, source)) => {
            let (_, mut fresh_items) = pair_items(runs, deadline_ms.or(Some(deadline)))
                .or_else(|_| pair_items(runs, None))?;
            if let Some((eval, eval_source)) = prompt.and_then(|p| p.eval.as_ref()) {
                let workload = prompt.and_then(|p| p.eval_workload.as_deref());
                attach(&mut fresh_items, eval, eval_source, workload)?;
                if let Some((index, settings)) = &neighbour_index {
                    let scores: Vec<Option<f64>> = fresh_items
                        .iter()
                        .map(|it| {
                            let e = eval.items.get(&it.item)?.embedding.as_deref()?;
                            neighbours::score(index, e, *settings, None)
                        })
                        .collect();
                    fresh_items = neighbours::with_scores(&fresh_items, &scores);
                }
            }
            let h = evaluate_fresh(&items, &fresh_items, &signals, target, held_out, source);
            fresh_paired = Some(fresh_items);
            Some(h)
        }
        None => None,
    };
    let judged = fresh.as_ref().unwrap_or(&cv);
    let apgr_of = |s: Signal| judged.signal(s).and_then(|h| h.apgr).unwrap_or(f64::MIN);
    // The cascade reads an answer signal; the prompt-only ones route in the
    // two-stage fit below.
    let pick =
        match signal {
            Some(s) if s.is_prompt_only() => {
                return Err(BenchError::InvalidSettings {
                    reason: format!(
                        "`{s}` reads the prompt, not the answer: its route is the two-stage one \
                     (the report's \"Two-stage routing\"); --signal names an answer signal"
                    ),
                })
            }
            Some(s) => curves.iter().find(|c| c.signal == s).ok_or_else(|| {
                BenchError::InvalidSettings {
                    reason: format!("the local-only runs carry no `{s}` values"),
                }
            })?,
            None => curves
                .iter()
                .filter(|c| !c.signal.is_prompt_only())
                .reduce(|best, c| {
                    if apgr_of(c.signal) > apgr_of(best.signal) + 1e-12 {
                        c
                    } else {
                        best
                    }
                })
                .expect("an answer signal's curve (checked above)"),
        };
    let choice = choose(pick, target);
    let (weak, strong) = (
        mean(items.iter().map(|i| i.local_correct)),
        mean(items.iter().map(|i| i.cloud_correct)),
    );
    // The second stage reads the cascade's signal.
    let two_stage = match target_accuracy(target, weak, strong) {
        Some(acc) => signals
            .iter()
            .filter(|s| s.is_prompt_only())
            .map(|&p| {
                two_stage(
                    &items,
                    fresh_paired.as_deref(),
                    p,
                    pick.signal,
                    acc,
                    held_out.resamples,
                    held_out.seed,
                )
            })
            .collect(),
        None => Vec::new(),
    };
    let mut c = Calibration {
        deadline_ms: deadline,
        items: items.len(),
        local_accuracy: mean(items.iter().map(|i| i.local_correct)),
        cloud_accuracy: mean(items.iter().map(|i| i.cloud_correct)),
        local_max_ms: items.iter().map(|i| i.local_ms).fold(0.0, f64::max),
        curves: curves.clone(),
        choice,
        cross_validated: Some(cv),
        fresh,
        cost: Some(LocalCost::of(&items)),
        neighbours: neighbour_index.map(|(_, s)| s),
        two_stage,
        prompt_cost_ms: [
            (
                Signal::PromptLogprob,
                items.iter().filter_map(|i| i.prompt_ms).collect::<Vec<_>>(),
            ),
            (
                Signal::PromptNeighbours,
                items.iter().filter_map(|i| i.embed_ms).collect(),
            ),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(s, v)| (s, v.iter().sum::<f64>() / v.len() as f64))
        // A prompt's length is known from its tokens: no model work.
        .chain(
            items
                .iter()
                .any(|i| i.signals.contains_key(&Signal::PromptBrevity))
                .then_some((Signal::PromptBrevity, 0.0)),
        )
        .collect(),
        advice: String::new(),
    };
    c.advice = advice(&c);
    Ok(c)
}

/// A signal's APGR as the advice judges it: held out when known.
fn judged_apgr(c: &Calibration, k: &SignalCurve) -> Option<f64> {
    match c.held_out() {
        Some(h) => h.signal(k.signal).and_then(|s| s.apgr),
        None => k.apgr,
    }
}

fn advice(c: &Calibration) -> String {
    let (weak, strong) = (c.local_accuracy, c.cloud_accuracy);
    let best = c
        .curves
        .iter()
        .filter_map(|k| judged_apgr(c, k).map(|a| (k.signal, a)))
        .fold(None::<(Signal, f64)>, |b, x| match b {
            Some(b) if b.1 >= x.1 => Some(b),
            _ => Some(x),
        });
    let judged = if c.held_out().is_some() {
        "held-out"
    } else {
        "in-sample"
    };
    if strong <= weak + 1e-12 {
        return format!(
            "Local only: the local model is as accurate as the cloud here ({} against {}); \
             cloud calls buy no quality on this workload.",
            pct(weak),
            pct(strong)
        );
    }
    if weak < 0.1 || weak < 0.25 * strong {
        return format!(
            "Cloud first: the local model is rarely right here ({} against the cloud's {}). \
             Use `cloud-only`, or `fallback` for offline resilience; a cascade would spend \
             local time on answers that are mostly wrong or escalated anyway.",
            pct(weak),
            pct(strong)
        );
    }
    match (best, c.choice) {
        (Some((sig, apgr)), _) if apgr < 0.55 => format!(
            "No local signal routes much better than random here (best {judged} APGR {apgr:.2}, \
             `{sig}`; random is 0.50): a cascade saves cloud calls only in proportion to the \
             quality it gives up."
        ),
        (_, Some(ch)) => match c.held_out_choice() {
            Some(h) => format!(
                "Cascade on `{}`: escalating below {} sends {} (95% interval {}) of new requests \
                 to the cloud for {} accuracy ({}), {} of the gap recovered, on items the \
                 threshold was not fitted on (in sample: {} for {}; local only {}, cloud only {}).",
                ch.signal,
                fmt_threshold(ch.point.threshold.unwrap_or(f64::NAN)),
                pct(h.cloud_share),
                fmt_interval(h.cloud_share_ci),
                pct(h.accuracy),
                fmt_interval(h.accuracy_ci),
                opt_pct(h.pgr),
                pct(ch.point.cloud_share),
                pct(ch.point.accuracy),
                pct(weak),
                pct(strong),
            ),
            None => format!(
                "Cascade on `{}`: escalating below {} sends {} of requests to the cloud for {} \
                 accuracy (local only {}, cloud only {}), {} of the gap recovered (in sample).",
                ch.signal,
                fmt_threshold(ch.point.threshold.unwrap_or(f64::NAN)),
                pct(ch.point.cloud_share),
                pct(ch.point.accuracy),
                pct(weak),
                pct(strong),
                opt_pct(ch.point.pgr)
            ),
        },
        _ => "No threshold meets the target on this workload.".into(),
    }
}

/// An interval for people: `40.0%–55.0%`.
fn fmt_interval(i: super::heldout::Interval) -> String {
    format!("{}–{}", pct(i.low), pct(i.high))
}

/// A threshold as it goes into a config: enough digits to fall between
/// the two signal values it separates.
pub fn fmt_threshold(v: f64) -> String {
    format!("{v:.6}")
}

fn opt_pct(v: Option<f64>) -> String {
    v.map_or("–".into(), pct)
}

/// The accuracy of a curve at cloud share `x`, reading the curve as a
/// step between realisable points (the most accurate point at or below
/// `x`).
fn accuracy_at(curve: &SignalCurve, x: f64) -> f64 {
    curve
        .points
        .iter()
        .filter(|p| p.cloud_share <= x + 1e-9)
        .map(|p| p.accuracy)
        .fold(f64::MIN, f64::max)
}

/// The calibration as Markdown: advice, the per-signal table, the curve at
/// fixed cloud shares next to random routing, the chosen threshold.
pub fn render_markdown(c: &Calibration, source: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# edgecloud bench calibrate\n");
    let _ = writeln!(
        md,
        "From `{source}`: {} graded items with both a local-only and a cloud-only run at {} ms. \
         Local-only accuracy {}, cloud-only {}. Nothing was run: each curve simulates a \
         cascade that escalates an item when its local signal is below the threshold.\n",
        c.items,
        c.deadline_ms,
        pct(c.local_accuracy),
        pct(c.cloud_accuracy)
    );
    let _ = writeln!(md, "**Advice**: {}\n", c.advice);
    let _ = writeln!(md, "## Signals\n");
    let held = c.held_out();
    let ho = |k: &SignalCurve| held.and_then(|h| h.signal(k.signal));
    let apgr_cell = |a: Option<f64>| a.map_or("–".into(), |a| format!("{a:.3}"));
    let _ = writeln!(
        md,
        "| signal | unit | items without it | CPT(50%) in sample | CPT(50%) held out | \
         CPT(80%) in sample | CPT(80%) held out | APGR in sample | APGR held out (95% CI) |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for k in &c.curves {
        let h = ho(k);
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} |",
            k.signal,
            k.signal.unit(),
            k.missing,
            opt_pct(k.cpt50),
            opt_pct(h.and_then(|h| h.cpt50)),
            opt_pct(k.cpt80),
            opt_pct(h.and_then(|h| h.cpt80)),
            apgr_cell(k.apgr),
            match (h.and_then(|h| h.apgr), h.and_then(|h| h.apgr_ci)) {
                (Some(a), Some(ci)) => format!("{a:.3} ({:.3}–{:.3})", ci.low, ci.high),
                (a, _) => apgr_cell(a),
            },
        );
    }
    let gap = c.cloud_accuracy - c.local_accuracy;
    let (c50, c80, a) = (
        if gap > 0.0 { "50.0%" } else { "–" },
        if gap > 0.0 { "80.0%" } else { "–" },
        if gap.abs() > 1e-12 { "0.500" } else { "–" },
    );
    let _ = writeln!(
        md,
        "| random routing | – | – | {c50} | {c50} | {c80} | {c80} | {a} | {a} |\n"
    );
    for h in [&c.cross_validated, &c.fresh].into_iter().flatten() {
        let _ = writeln!(
            md,
            "Held out by {}: {} items, local-only accuracy {}, cloud-only {}. Chosen target, \
             per signal (95% bootstrap intervals over the held-out items):\n",
            h.method,
            h.items,
            pct(h.local_accuracy),
            pct(h.cloud_accuracy)
        );
        let _ = writeln!(
            md,
            "| signal | cloud share in sample | cloud share held out | accuracy in sample | \
             accuracy held out | gap recovered held out |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
        for s in &h.signals {
            let inside = c
                .curve(s.signal)
                .and_then(|k| choose(k, c.choice.map_or(Target::Cpt80, |ch| ch.target)));
            let t = s.target;
            let _ = writeln!(
                md,
                "| `{}` | {} | {} ({}) | {} | {} ({}) | {}{} |",
                s.signal,
                inside.map_or("–".into(), |ch| pct(ch.point.cloud_share)),
                pct(t.cloud_share),
                fmt_interval(t.cloud_share_ci),
                inside.map_or("–".into(), |ch| pct(ch.point.accuracy)),
                pct(t.accuracy),
                fmt_interval(t.accuracy_ci),
                opt_pct(t.pgr),
                if t.splits_without_threshold > 0 {
                    format!(
                        " ({} split(s) met no threshold: cloud)",
                        t.splits_without_threshold
                    )
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(md);
    }
    if let Some(cost) = &c.cost {
        render_cost(&mut md, c, cost);
    }
    render_two_stage(&mut md, c);
    let _ = writeln!(md, "## Accuracy at a given cloud share\n");
    let mut head = String::from("| cloud share |");
    let mut rule = String::from("|---:|");
    for k in &c.curves {
        let _ = write!(head, " `{}` |", k.signal);
        rule.push_str("---:|");
    }
    head.push_str(" random |");
    rule.push_str("---:|");
    let _ = writeln!(md, "{head}\n{rule}");
    for step in 0..=10 {
        let x = f64::from(step) / 10.0;
        let mut row = format!("| {} |", pct(x));
        for k in &c.curves {
            let _ = write!(row, " {} |", pct(accuracy_at(k, x)));
        }
        let _ = write!(row, " {} |", pct(c.local_accuracy + x * gap));
        let _ = writeln!(md, "{row}");
    }
    let _ = writeln!(
        md,
        "\nEach cell: the most accurate simulated cascade with at most that cloud share.\n"
    );
    match c.choice {
        Some(ch) => {
            let _ = writeln!(md, "## Chosen threshold\n");
            let _ = writeln!(
                md,
                "Target {}: `{}` below **{}** ({}), fitted on all {} items. In sample: cloud share {}, \
                 accuracy {}, gap recovered {}.{} Config: `{CALIBRATION_CONFIG}`.\n",
                match ch.target {
                    Target::CloudShare(x) => format!("cloud share at most {}", pct(x)),
                    Target::Quality(y) => format!("accuracy at least {}", pct(y)),
                    Target::Cpt80 => "fewest cloud calls recovering 80% of the gap".into(),
                },
                ch.signal,
                fmt_threshold(ch.point.threshold.unwrap_or(f64::NAN)),
                ch.signal.unit(),
                c.items,
                pct(ch.point.cloud_share),
                pct(ch.point.accuracy),
                opt_pct(ch.point.pgr),
                match c.held_out_choice() {
                    Some(h) => format!(
                        " **Held out** (what new requests get): cloud share {} ({}), accuracy {} \
                         ({}), gap recovered {}.",
                        pct(h.cloud_share),
                        fmt_interval(h.cloud_share_ci),
                        pct(h.accuracy),
                        fmt_interval(h.accuracy_ci),
                        opt_pct(h.pgr)
                    ),
                    None => String::new(),
                }
            );
        }
        None => {
            let _ = writeln!(md, "No threshold meets the target.\n");
        }
    }
    let _ = writeln!(md, "![Accuracy against cloud share]({CALIBRATION_CHART})\n");
    let _ = writeln!(
        md,
        "Definitions: *CPT(x)*: the smallest simulated cloud share recovering x of the \
         local-to-cloud accuracy gap; *APGR*: the area under the gap-recovered curve over cloud \
         shares 0 to 1 (random routing 0.5, above 1 possible when a cascade beats both lanes). \
         *In sample*: the threshold is read off the same items it is scored on (optimistic); \
         *held out*: each item is scored by a threshold fitted without it (the held-out curve \
         pools fits for cloud-share targets 2%, 4%, ..., 100%). Items whose local run gave no \
         signal always escalate, as at run time."
    );
    md
}

/// The two-stage routes beside the answer-only cascade.
fn render_two_stage(md: &mut String, c: &Calibration) {
    if c.two_stage.is_empty() {
        return;
    }
    let _ = writeln!(md, "## Two-stage routing\n");
    if let Some(n) = c.neighbours {
        let _ = writeln!( md,
            "`prompt_neighbours`: k = {}, {:?} weighting, chosen by leave-one-out APGR on the calibration items (their own scores are leave-one-out; held-out items are scored against every calibration item).\n", n.k, n.weighting
        );
    }
    let _ = writeln!( md,
        "A request whose prompt-only signal is below the first threshold goes straight to the cloud (no local answer); the others run the cascade on the answer signal. Both thresholds are fitted jointly on the calibration items: among the pairs reaching the target accuracy on at least half of {} bootstrap resamples of them (bagged, so that the pair transfers to new items), the one with the fewest cloud calls, then the least mean latency; the answer-only cascade is fitted the same way. Latencies are simulated from the recorded runs: straight = signal cost + cloud-only run; kept = local-only run; escalated =          local-only + cloud-only (escalation after the answer).\n", super::two_stage::BAGS
    );
    let _ = writeln!( md,
        "| route | thresholds | half | accuracy (95% CI) | cloud share (95% CI) | straight to cloud | mean latency ms | latency vs cascade |"
    );
    let _ = writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|");
    let th = |v: Option<f64>| v.map_or("never".into(), fmt_threshold);
    for t in &c.two_stage {
        let rows = [
            ("calibration", Some(t.in_sample), Some(t.cascade_in_sample)),
            ("held out", t.held_out, t.cascade_held_out),
        ];
        for (half, two, cas) in rows {
            let (Some(two), Some(cas)) = (two, cas) else {
                continue;
            };
            let row =
                |name: String, thr: String, p: super::two_stage::StagePoint, ratio: String| {
                    format!(
                        "| {name} | {thr} | {half} | {} ({}) | {} ({}) | {} | {} | {ratio} |",
                        pct(p.accuracy),
                        fmt_interval(p.accuracy_ci),
                        pct(p.cloud_share),
                        fmt_interval(p.cloud_share_ci),
                        pct(p.straight_share),
                        num(Some(p.mean_ms)),
                    )
                };
            let _ = writeln!(
                md,
                "{}",
                row(
                    format!("two-stage `{}` then `{}`", t.prompt_signal, t.answer_signal),
                    format!("{} / {}", th(t.thresholds.prompt), th(t.thresholds.answer)),
                    two,
                    format!("{:.2}x", two.mean_ms / cas.mean_ms.max(1e-9)),
                )
            );
            let _ = writeln!(
                md,
                "{}",
                row(
                    format!("cascade `{}`", t.answer_signal),
                    th(t.cascade.answer),
                    cas,
                    "1.00x".into(),
                )
            );
        }
    }
    let _ = writeln!(md);
}

/// What each signal cost the local lane in these runs.
fn render_cost(md: &mut String, c: &Calibration, cost: &LocalCost) {
    let tokens = |v: Option<f64>| v.map_or("–".into(), |t| format!("{t:.0}"));
    let time = format!("{} / {}", num(Some(cost.ms_p50)), num(Some(cost.ms_mean)));
    let _ = writeln!(md, "## What the signals cost\n");
    let _ = writeln!(
        md,
        "Local lane per item in the local-only runs: {} sample(s), {} tokens sampled (the \
         answer's own: {}), latency p50 / mean {time} ms. The log-probability signals are \
         read off the answer's own tokens (one pass over the logits per token, no decoding \
         beyond the answer); `answer_agreement` needs every sample.\n",
        cost.samples,
        tokens(cost.tokens_mean),
        tokens(cost.answer_tokens_mean),
    );
    let _ = writeln!(
        md,
        "| signal | local samples per item | local tokens per item (mean) | local ms per item p50 / mean |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|");
    for k in &c.curves {
        if k.signal.is_prompt_only() {
            let ms = c.prompt_cost_ms.get(&k.signal).copied();
            let cost = match k.signal {
                Signal::PromptBrevity => "0 (the prompt's tokens, counted)".to_string(),
                _ => format!("{} (mean: its prompt pass or embedding alone)", num(ms)),
            };
            let _ = writeln!(
                md,
                "| `{}` | 0 (before any answer) | 0 | {cost} |",
                k.signal
            );
            continue;
        }
        let row = if k.signal == Signal::AnswerAgreement || cost.samples == 1 {
            format!("{} | {} | {time}", cost.samples, tokens(cost.tokens_mean))
        } else {
            // Read from the chosen sample: one answer's tokens; its time
            // alone was not measured (it decoded with the others).
            format!(
                "1 | {} | – (decoded with the other samples)",
                tokens(cost.answer_tokens_mean)
            )
        };
        let _ = writeln!(md, "| `{}` | {row} |", k.signal);
    }
    let _ = writeln!(md);
}

/// A config snippet with the chosen threshold: the `[harness]` table (what
/// `edgecloud bench --config` and `run` use); the same keys work in a
/// `[routes.NAME]` table. `None` without a threshold, or when the cloud
/// is no more accurate than the local model on these items.
pub fn config_snippet(c: &Calibration, source: &str) -> Option<String> {
    // No gap to recover: any escalation only adds cloud calls (the advice
    // says local-only).
    if c.cloud_accuracy <= c.local_accuracy + 1e-12 {
        return None;
    }
    let ch = c.choice?;
    let threshold = ch.point.threshold?;
    let share_needed = c.local_max_ms / c.deadline_ms.max(1) as f64;
    let local_share = if share_needed <= 0.45 { 0.5 } else { 0.95 };
    let figures = match c.held_out_choice() {
        Some(h) => format!(
            "# Held out ({}):\n# cloud share {} ({}), accuracy {} ({}); in sample {} and {}.\n",
            c.held_out().map_or("", |h| h.method.as_str()),
            pct(h.cloud_share),
            fmt_interval(h.cloud_share_ci),
            pct(h.accuracy),
            fmt_interval(h.accuracy_ci),
            pct(ch.point.cloud_share),
            pct(ch.point.accuracy),
        ),
        None => format!(
            "# Simulated in sample: cloud share {}, accuracy {}.\n",
            pct(ch.point.cloud_share),
            pct(ch.point.accuracy)
        ),
    };
    let (default_route, two_stage_table) = two_stage_snippet(c, local_share).unwrap_or_default();
    let snippet = format!(
        "# From `edgecloud bench calibrate {source}`: {} items at {} ms.\n\
         {figures}\
         # Local only {}, cloud only {}.\n\
         # The same keys work under [routes.NAME].\n\
         [harness]\n\
         policy = \"cascade\"\n\
         deadline_ms = {}\n\
         # The simulation assumes the local lane answers: its slowest local-only run took\n\
         # {} ms ({} of the deadline).\n\
         local_share = {local_share}\n\
         escalate_below = {{ signal = \"{}\", value = {} }}\n{}",
        c.items,
        c.deadline_ms,
        pct(c.local_accuracy),
        pct(c.cloud_accuracy),
        c.deadline_ms,
        num(Some(c.local_max_ms)),
        pct(share_needed),
        ch.signal,
        fmt_threshold(threshold),
        if ch.signal.is_streamable() {
            format!(
                "# `{}` only falls as tokens come: with the next line the cloud starts as soon as\n\
                 # it is below the value, while local still generates (the same decisions, sooner;\n\
                 # an escalated request then keeps no local answer if the cloud fails).\n\
                 # escalate_early = true\n",
                ch.signal
            )
        } else if ch.signal == Signal::AnswerAgreement {
            format!(
                "# `answer_agreement` needs every request to ask the local lane for a consensus\n\
                 # of {} samples (Sampling::consensus; `edgecloud bench --samples {}`).\n",
                c.cost.map_or(1, |k| k.samples),
                c.cost.map_or(1, |k| k.samples),
            )
        } else {
            String::new()
        }
    );
    Some(format!("{snippet}{default_route}{two_stage_table}"))
}

/// Route choices apart from the answer-only cascade: the two-stage route
/// on a prompt-only signal a route reads live (`prompt_logprob`,
/// `prompt_brevity`; of the two, the one reaching the target in sample
/// with the least mean latency there), as a
/// `[routes.two-stage]` table with both fitted thresholds, and the
/// `[harness]` line making it the default: active when, on the
/// calibration items, it reaches the target with a mean latency at most
/// 0.9x the cascade's (decided before looking at the held-out half),
/// commented otherwise. `None` when no such route was fitted. A stage
/// the fit never uses gets the value -1e30 (never below it).
fn two_stage_snippet(c: &Calibration, local_share: f64) -> Option<(String, String)> {
    let reaches = |t: &&TwoStage| t.in_sample.accuracy >= t.target_accuracy;
    let t = c
        .two_stage
        .iter()
        .filter(|t| t.prompt_signal.is_read_before_generation())
        .min_by(|a, b| {
            reaches(b)
                .cmp(&reaches(a))
                .then(a.in_sample.mean_ms.total_cmp(&b.in_sample.mean_ms))
        })?;
    let (two, cas) = (t.in_sample, t.cascade_in_sample);
    let ratio = two.mean_ms / cas.mean_ms.max(1e-9);
    let wins = two.accuracy >= t.target_accuracy && ratio <= 0.9;
    let held = match (t.held_out, t.cascade_held_out) {
        (Some(h), Some(hc)) => format!(
            "; held out {} at {} cloud calls, {:.2}x the cascade's latency",
            pct(h.accuracy),
            pct(h.cloud_share),
            h.mean_ms / hc.mean_ms.max(1e-9)
        ),
        _ => String::new(),
    };
    let line = format!(
        "# Two-stage ([routes.two-stage] below): in sample {} at {} cloud calls ({} straight to\n\
         # the cloud), mean latency {ratio:.2}x the answer-only cascade's (simulated){held}.\n\
         {}default_route = \"two-stage\"\n",
        pct(two.accuracy),
        pct(two.cloud_share),
        pct(two.straight_share),
        if wins {
            ""
        } else {
            "# Not the default: it does not save 10% of the cascade's latency in sample.\n# "
        },
    );
    // No threshold ("never" in the report): the fit sends no prompt
    // straight to the cloud, or keeps every local answer it does not.
    let never = |v: Option<f64>| v.map_or("-1e30".into(), fmt_threshold);
    let (prompt, answer) = (never(t.thresholds.prompt), never(t.thresholds.answer));
    let how = if t.prompt_signal == Signal::PromptBrevity {
        "# The prompt's length is known once the local lane has tokenized it: longer than the\n\
         # first value's tokens, the cloud starts before local decodes anything.\n"
    } else {
        "# The prompt's mean token log-probability is read in the local lane's prompt pass:\n\
         # below the first value the cloud starts before local generates anything.\n"
    };
    let table = format!(
        "\n{how}\
         [routes.two-stage]\n\
         policy = \"cascade\"\n\
         deadline_ms = {}\n\
         local_share = {local_share}\n\
         prompt_escalate_below = {{ signal = \"{}\", value = {prompt} }}\n\
         escalate_below = {{ signal = \"{}\", value = {answer} }}\n",
        c.deadline_ms, t.prompt_signal, t.answer_signal,
    );
    Some((line, table))
}

/// The chart: accuracy against cloud share, one line per signal, the
/// random-routing line, the chosen point.
pub fn render_chart(c: &Calibration) -> String {
    let mut series: Vec<svg::XySeries> = c
        .curves
        .iter()
        .map(|k| svg::XySeries {
            name: format!(
                "{} (APGR {})",
                k.signal,
                k.apgr.map_or("–".into(), |a| format!("{a:.2}"))
            ),
            points: k
                .points
                .iter()
                .map(|p| (p.cloud_share, p.accuracy))
                .collect(),
            dashed: false,
        })
        .collect();
    series.push(svg::XySeries {
        name: "random routing".into(),
        points: vec![(0.0, c.local_accuracy), (1.0, c.cloud_accuracy)],
        dashed: true,
    });
    let marker = c.choice.map(|ch| (ch.point.cloud_share, ch.point.accuracy));
    svg::xy_chart(
        "Accuracy against cloud share (simulated cascade)",
        "cloud share",
        "accuracy",
        &series,
        marker,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The snippet read as the `[harness]` table of a configuration file
    /// and turned into a route, as the file's reader does (the whole
    /// file's reader lives in the `edgecloud` crate, above this one).
    fn parse_snippet(toml: &str) -> Result<edgecloud_core::harness::RouteConfig, String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            harness: edgecloud_core::harness::RouteConfig,
        }
        let file: File = toml::from_str(toml).map_err(|e| e.to_string())?;
        file.harness.route("harness").map_err(|e| e.to_string())?;
        Ok(file.harness)
    }
    use crate::routing_curve::tests::{four, item};

    #[test]
    fn rendering_names_the_threshold_and_signal() {
        let items = four();
        let curves = vec![curve(&items, Signal::P10Logprob)];
        let choice = choose(&curves[0], Target::CloudShare(0.5));
        let mut c = Calibration {
            deadline_ms: 1000,
            items: 4,
            local_accuracy: 0.5,
            cloud_accuracy: 0.75,
            local_max_ms: 10.0,
            curves,
            choice,
            cross_validated: None,
            fresh: None,
            cost: Some(LocalCost::of(&items)),
            neighbours: None,
            two_stage: Vec::new(),
            prompt_cost_ms: BTreeMap::new(),
            advice: String::new(),
        };
        c.advice = advice(&c);
        assert!(c.advice.contains("p10_logprob"), "{}", c.advice);
        assert!(c.advice.contains("(in sample)"), "{}", c.advice);
        let toml = config_snippet(&c, "dir").unwrap();
        assert!(toml.contains("escalate_below = { signal = \"p10_logprob\", value = -0.750000 }"));
        let harness = parse_snippet(&toml).expect("the snippet parses");
        assert_eq!(
            harness.resolved_policy("harness").unwrap(),
            Some(edgecloud_core::harness::Policy::cascade(-0.75))
        );
        let md = render_markdown(&c, "dir");
        assert!(md.contains("| random routing |"));
        assert!(
            md.contains("| `p10_logprob` | 1 | 20 | 10.0 / 10.0 |"),
            "{md}"
        );
        assert!(render_chart(&c).contains("random routing"));
        // A streamable signal's snippet offers early escalation, and the
        // line, uncommented, is a valid config.
        let mut w = c.clone();
        w.choice = Some(Choice {
            signal: Signal::MinWindowLogprob,
            ..c.choice.unwrap()
        });
        let toml = config_snippet(&w, "dir").unwrap();
        assert!(toml.contains("# escalate_early = true"), "{toml}");
        let on = toml.replace("# escalate_early = true", "escalate_early = true");
        parse_snippet(&on).expect("early escalation parses");
        // The agreement signal's snippet says what requests must ask for.
        w.choice = Some(Choice {
            signal: Signal::AnswerAgreement,
            ..c.choice.unwrap()
        });
        w.cost = Some(LocalCost {
            samples: 4,
            ..LocalCost::of(&items)
        });
        assert!(config_snippet(&w, "dir")
            .unwrap()
            .contains("consensus\n# of 4 samples"));
    }

    #[test]
    fn the_cost_of_a_consensus_run_is_every_sample() {
        let mut items = four();
        for (i, it) in items.iter_mut().enumerate() {
            it.samples = 4;
            it.local_tokens = Some(400 + 40 * i as u64);
            it.answer_tokens = Some(100);
            it.local_ms = 1000.0 * (i + 1) as f64;
            it.signals.insert(Signal::AnswerAgreement, 0.25 * i as f64);
        }
        let cost = LocalCost::of(&items);
        assert_eq!(cost.samples, 4);
        assert_eq!(cost.tokens_mean, Some(460.0));
        assert_eq!(cost.answer_tokens_mean, Some(100.0));
        assert_eq!((cost.ms_p50, cost.ms_mean), (2000.0, 2500.0));
        let curves = vec![
            curve(&items, Signal::P10Logprob),
            curve(&items, Signal::AnswerAgreement),
        ];
        let c = Calibration {
            deadline_ms: 1000,
            items: 4,
            local_accuracy: 0.5,
            cloud_accuracy: 0.75,
            local_max_ms: 4000.0,
            choice: choose(&curves[1], Target::Cpt80),
            curves,
            cross_validated: None,
            fresh: None,
            cost: Some(cost),
            neighbours: None,
            two_stage: Vec::new(),
            prompt_cost_ms: BTreeMap::new(),
            advice: String::new(),
        };
        let md = render_markdown(&c, "dir");
        assert!(
            md.contains("| `answer_agreement` | 4 | 460 | 2000 / 2500 |"),
            "{md}"
        );
        assert!(
            md.contains("| `p10_logprob` | 1 | 100 | – (decoded with the other samples) |"),
            "{md}"
        );
    }

    /// The advice and the config quote the held-out figures once there
    /// are some.
    #[test]
    fn advice_and_config_use_the_held_out_figures() {
        let items: Vec<PairedItem> = (0..40)
            .map(|i| {
                let v = -(i as f64) / 10.0;
                item(&i.to_string(), Some(v), v > -2.0, true)
            })
            .collect();
        let curves = vec![curve(&items, Signal::P10Logprob)];
        let choice = choose(&curves[0], Target::Cpt80);
        let cv = cross_validate(
            &items,
            &[Signal::P10Logprob],
            Target::Cpt80,
            &HeldOutSettings::default(),
        );
        let mut c = Calibration {
            deadline_ms: 1000,
            items: 40,
            local_accuracy: 0.5,
            cloud_accuracy: 1.0,
            local_max_ms: 10.0,
            curves,
            choice,
            cross_validated: Some(cv),
            fresh: None,
            cost: None,
            neighbours: None,
            two_stage: Vec::new(),
            prompt_cost_ms: BTreeMap::new(),
            advice: String::new(),
        };
        c.advice = advice(&c);
        let h = c.held_out_choice().unwrap();
        assert!(c.advice.contains("not fitted on"), "{}", c.advice);
        assert!(c.advice.contains(&pct(h.accuracy)), "{}", c.advice);
        let toml = config_snippet(&c, "dir").unwrap();
        assert!(
            toml.contains("# Held out (5-fold cross-validation"),
            "{toml}"
        );
        parse_snippet(&toml).expect("the snippet parses");
        let md = render_markdown(&c, "dir");
        assert!(md.contains("APGR held out"));
        assert!(md.contains("**Held out**"));
        // With the local model as accurate as the cloud there is no gap to
        // recover: no threshold is written, whatever the curve allows.
        c.cloud_accuracy = c.local_accuracy;
        c.advice = advice(&c);
        assert!(c.advice.starts_with("Local only"), "{}", c.advice);
        assert_eq!(config_snippet(&c, "dir"), None);
    }

    #[test]
    fn a_one_class_calibration_set_is_refused_by_name() {
        let all = |right: bool| -> Vec<PairedItem> {
            (0..6)
                .map(|i| item(&i.to_string(), Some(-(i as f64)), right, true))
                .collect()
        };
        let e = one_class_refused(&all(true)).unwrap_err().to_string();
        assert!(
            e.contains("one-class") && e.contains("right on all 6") && e.contains("`local-only`"),
            "{e}"
        );
        let e = one_class_refused(&all(false)).unwrap_err().to_string();
        assert!(
            e.contains("wrong on all 6") && e.contains("`cloud-only`"),
            "{e}"
        );
        let mut mixed = all(true);
        mixed[0].local_correct = false;
        assert!(one_class_refused(&mixed).is_ok());
    }
}
