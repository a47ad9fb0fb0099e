//! Calibration: from a bench output holding `local-only` and `cloud-only`
//! runs over the same graded items, simulate a cascade at every threshold
//! of each local confidence signal, without running anything. This module
//! computes (pairing the baselines' runs, the curves per signal, the
//! choice); `render` writes the result (the advice, Markdown, a chart, a
//! config snippet) and computes nothing. Neither runs lanes nor reads
//! files itself.
//!
//! The curves, their figures (CPT, APGR) and the choice of a threshold
//! are `routing_curve`'s; the held-out checks are `heldout`'s.

mod render;
#[cfg(test)]
mod tests;

use render::advice;
pub use render::{config_snippet, fmt_threshold, render_chart, render_markdown};

use super::error::BenchError;
use super::heldout::{cross_validate, evaluate_fresh, HeldOut, HeldOutPoint, HeldOutSettings};
use super::neighbours::{self, Labelled, NeighbourSettings};
use super::prompt_signals::{check_pair, PromptSignals};
use super::record::{RunRecord, RunStatus};
use super::report::pct;
use super::routing_curve::{choose, curve, mean, Choice, PairedItem, SignalCurve, Target};
use super::two_stage::{two_stage, TwoStage};
use edgecloud_core::harness::Signal;
use edgecloud_core::lane::Lane;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
/// for a cloud-share or cost target (the two-stage fit aims at an
/// accuracy).
fn target_accuracy(target: Target, weak: f64, strong: f64) -> Option<f64> {
    match target {
        Target::Quality(y) => Some(y),
        Target::Cpt80 => Some(weak + 0.8 * (strong - weak)),
        Target::CloudShare(_) | Target::Cost(_) => None,
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
            cloud_usd: c.cost.as_ref().and_then(|x| x.cloud_usd),
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
