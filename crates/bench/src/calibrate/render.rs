//! A calibration, written for people and for the config file: the advice
//! (which signal, at which threshold, what it buys), the Markdown report,
//! the SVG chart and the `[harness]` snippet. It computes nothing the
//! calibration does not already hold.

use super::*;
use crate::report::{num, pct};
use crate::svg;
use std::fmt::Write as _;

/// A signal's APGR as the advice judges it: held out when known.
fn judged_apgr(c: &Calibration, k: &SignalCurve) -> Option<f64> {
    match c.held_out() {
        Some(h) => h.signal(k.signal).and_then(|s| s.apgr),
        None => k.apgr,
    }
}

pub(super) fn advice(c: &Calibration) -> String {
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
fn fmt_interval(i: crate::heldout::Interval) -> String {
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
                    Target::Cost(usd) => format!("cloud cost at most ${usd} per request"),
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
        "A request whose prompt-only signal is below the first threshold goes straight to the cloud (no local answer); the others run the cascade on the answer signal. Both thresholds are fitted jointly on the calibration items: among the pairs reaching the target accuracy on at least half of {} bootstrap resamples of them (bagged, so that the pair transfers to new items), the one with the fewest cloud calls, then the least mean latency; the answer-only cascade is fitted the same way. Latencies are simulated from the recorded runs: straight = signal cost + cloud-only run; kept = local-only run; escalated =          local-only + cloud-only (escalation after the answer).\n", crate::two_stage::BAGS
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
                |name: String, thr: String, p: crate::two_stage::StagePoint, ratio: String| {
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
