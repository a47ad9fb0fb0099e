//! Speculative decoding's drafts (contract point 16): the settings
//! (`--spec-type`, `--draft-max`, `--draft-min`, named as llama-server
//! names them) and their one check, n-gram prompt lookup (which tokens to
//! propose next), and the per-sequence back-off that stops proposing when
//! proposals keep failing.
//!
//! Prompt lookup, as llama.cpp's lookup decoding: the earlier place in
//! what the sequence holds (prompt and answer so far) whose tokens match
//! the most of its last tokens (at least [`NGRAM_MIN`], counted up to
//! [`NGRAM_MAX`]; the most recent of equal matches) gives the draft: the
//! tokens that followed it. Answers that copy spans of their prompt (an
//! extraction, a rewrite, a JSON object naming the prompt's fields)
//! repeat runs the lookup finds.
//!
//! How sure a proposal is depends on where it comes from ([`Source`]): a
//! match of two or three tokens is often wrong in plain text, one of
//! eight or more rarely is (llama-server's `ngram-simple` proposes only
//! after a 12-token match). So each sequence keeps one acceptance rate
//! per class of source (short, medium and long matches, a draft model),
//! each from its own prior, and the cost model below reads the rate of
//! the class at hand: a long match is drafted where a short one would
//! not pay.
//!
//! When to draft, and how many (a cost model, per sequence and class): a
//! verify step's extra rows are not free. On a CPU they are compute like any
//! other row (about half a plain step each on the 2-core VM: the figures
//! are in docs/performance.md, "What a draft row costs"); on a GPU they
//! are nearly free. What a row costs also depends on how many there are
//! (ggml's CPU kernels take a batch of rows in blocks). So the decode loop
//! measures it per
//! draft count ([`RowCost`]: its plain steps' time and its verify steps'
//! extra time per draft row, as `alpha(k)`, a share of a plain step; a
//! count not measured yet takes the mean over all counts), and each
//! sequence keeps its drafts' acceptance rate `p` per class (per
//! position tried, a moving average starting at the class's prior,
//! [`PRIOR_ACCEPT`]). With drafts kept as a
//! run while each is the pick, k drafts are expected to add
//! `E(k) = p + p^2 + ... + p^k` tokens to a step that costs `1 + alpha(k)
//! k` plain steps, so a proposal has the k in 1..=cap that maximises
//! `(1 + E(k)) / (1 + alpha(k) k)`, and there is none unless that beats a
//! plain step by [`MIN_GAIN`] (10%: the rate and the cost are estimates,
//! and a verify step that just breaks even in the model lost in
//! measurement): a workload with nothing to copy stops drafting as soon
//! as its rate shows it, and where a row costs nearly a step (a 1.5B model
//! on one CPU core: 0.9) nothing is drafted.
//!
//! A draft model's draft costs more than its row: the draft model's own
//! step ([`RowCost::per_draft`]; before it has proposed, its weights' size
//! over the model's, then what its proposals took), and, once per job, the
//! fill of its context with the prompt. So before the first fill the
//! decode loop measures a row's cost with one verify step of prompt
//! lookup's drafts ([`RowCost::wants_probe`], [`Drafter::probe`]), and the
//! draft model is filled only where a draft then pays.
//!
//! Back-off: a step whose kept drafts did not pay for their rows (none,
//! or fewer than `alpha k`) is a miss; two misses in a row pause drafting
//! (8 steps, then 16, ... 256; a step that paid halves the next pause). A
//! proposal whose class's rate makes no k worth it is not drafted (the
//! lookup is cheap: microseconds against a step's milliseconds). After a
//! pause the rates start again from at least their priors, so a sequence that begins to copy (a quoted
//! span late in an answer) is found again, while one whose tries mostly
//! fail (plain chat, where two-token matches are sometimes right) pauses
//! ever longer: its tries cost a few per cent of its steps at most. The cap on k also follows the last step (it
//! doubles while drafts are kept whole, else it is twice what was kept).
//! Single-token matches are not looked up: in plain text they are
//! everywhere and rarely right.
//!
//! A draft is only a guess: the decode loop (`batch`) decodes it with the
//! sequence's next token in one step and keeps the drafts the sequence's
//! own picker would have chosen, so the answer never depends on it. This
//! module must not decode, pick or count anything; it only proposes.

use serde::{Deserialize, Serialize};

/// The longest match counted (a longer one counts as this long).
pub(super) const NGRAM_MAX: usize = 16;
/// The shortest match that proposes anything.
pub(super) const NGRAM_MIN: usize = 2;

/// Where a proposal comes from, which says how sure it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// Prompt lookup, with a match of this many tokens.
    Match(usize),
    /// The draft model.
    Model,
}

/// The classes of [`Source`]: matches up to this many tokens are short.
const SHORT_MATCH: usize = 3;
/// ... and up to this many medium; longer ones are long.
const MEDIUM_MATCH: usize = 7;
/// Classes: short, medium and long matches, the draft model.
const CLASSES: usize = 4;

impl Source {
    fn class(self) -> usize {
        match self {
            Self::Match(n) if n <= SHORT_MATCH => 0,
            Self::Match(n) if n <= MEDIUM_MATCH => 1,
            Self::Match(_) => 2,
            Self::Model => 3,
        }
    }
}

/// The classes' names, for traces.
const CLASS_NAMES: [&str; CLASSES] = ["short", "medium", "long", "model"];

/// Misses (steps whose kept drafts did not pay for their rows) in a row
/// after which a sequence stops drafting for a while.
const MISSES_BEFORE_PAUSE: u32 = 2;
/// Steps without drafts after the first pause; each further pause
/// doubles it, up to [`MAX_PAUSE`]. An accepted draft starts it over.
const FIRST_PAUSE: u32 = 8;
const MAX_PAUSE: u32 = 256;
/// The fewest drafts proposed after a partial acceptance (the length
/// cap then grows back, doubling, while drafts are accepted whole).
const MIN_CAP: usize = 2;
/// The most drafts a sequence's first proposal has.
const FIRST_CAP: usize = 4;
/// The acceptance rate a sequence starts with per class (and starts
/// again from after a pause), by [`Source`] class: short, medium and long
/// matches, a draft model. Optimistic enough that drafting is tried
/// where a row is cheap; a short match is tried only where rows are
/// nearly free.
pub(super) const PRIOR_ACCEPT: [f64; CLASSES] = [0.6, 0.75, 0.9, 0.8];
/// How much one tried position moves the acceptance rate.
const ACCEPT_WEIGHT: f64 = 0.2;
/// The least expected gain (tokens per plain step's time, as a share)
/// worth a verify step.
const MIN_GAIN: f64 = 0.10;
/// A draft row's cost as a share of a plain step before any is measured
/// (the CPU figure above).
pub(super) const PRIOR_ALPHA: f64 = 0.6;

/// Whether and how the local lane drafts tokens (llama-server's
/// `--spec-type`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecType {
    /// No speculation (the default).
    #[default]
    Off,
    /// n-gram prompt lookup: drafts copied from the prompt and the answer
    /// so far, kept where they are the greedy pick, or, for a sampled
    /// answer without a grammar, by the speculative-sampling rule
    /// (`accept`); a sampled answer under a grammar does not draft.
    Ngram,
    /// A draft model (`LocalConfig::model_draft`, `--model-draft`): a
    /// smaller GGUF with the same vocabulary proposes the next tokens
    /// greedily; they are verified as prompt lookup's are.
    Draft,
}

impl SpecType {
    /// The name used by the CLI, the config file and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Ngram => "ngram",
            Self::Draft => "draft",
        }
    }
}

impl std::fmt::Display for SpecType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SpecType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "ngram" => Ok(Self::Ngram),
            "draft" => Ok(Self::Draft),
            other => Err(format!(
                "unknown speculation type {other:?} (expected off, ngram or draft)"
            )),
        }
    }
}

/// The most drafts one step may propose for one sequence.
pub const DRAFT_MAX_LIMIT: u32 = 128;

/// What is wrong with the speculation settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting `{key}`: {detail}")]
pub struct SpecSettingError {
    /// The setting, by its config key (`draft_max`, `draft_min`).
    pub key: &'static str,
    /// What is wrong.
    pub detail: String,
}

/// The one check of the speculation settings: `draft_max` in
/// 1..=[`DRAFT_MAX_LIMIT`], `draft_min` at most `draft_max`.
pub fn check_settings(draft_max: u32, draft_min: u32) -> Result<(), SpecSettingError> {
    if !(1..=DRAFT_MAX_LIMIT).contains(&draft_max) {
        return Err(SpecSettingError {
            key: "draft_max",
            detail: format!("must be 1 to {DRAFT_MAX_LIMIT}, not {draft_max}"),
        });
    }
    if draft_min > draft_max {
        return Err(SpecSettingError {
            key: "draft_min",
            detail: format!("must be at most draft_max ({draft_max}), not {draft_min}"),
        });
    }
    Ok(())
}

/// The tokens that followed the earlier place in `history` matching the
/// most of its last tokens (at least [`NGRAM_MIN`]; matches longer than
/// [`NGRAM_MAX`] count as that long; the most recent of equal matches),
/// at most `max` of them, into `out` (cleared first); the match's length,
/// 0 (and nothing) when no place matches [`NGRAM_MIN`] tokens.
pub(super) fn lookup<T: PartialEq + Copy>(history: &[T], max: usize, out: &mut Vec<T>) -> usize {
    out.clear();
    let len = history.len();
    if max == 0 || len <= NGRAM_MIN {
        return 0;
    }
    let last = history[len - 1];
    // (match length, where the match ends): an earlier match ends at
    // `end` (exclusive), before the suffix's own end at `len`.
    let mut best = (0, 0);
    for end in (1..len).rev() {
        if history[end - 1] != last {
            continue;
        }
        let mut n = 1;
        while n < NGRAM_MAX && n < end && history[end - 1 - n] == history[len - 1 - n] {
            n += 1;
        }
        if n > best.0 {
            best = (n, end);
            if n == NGRAM_MAX {
                break;
            }
        }
    }
    let (n, from) = best;
    if n < NGRAM_MIN {
        return 0;
    }
    out.extend_from_slice(&history[from..(from + max).min(len)]);
    n
}

/// The expected speed of a verify step of `k` drafts against a plain
/// step (tokens per unit of time, as a ratio): `(1 + E(k)) / (1 + alpha
/// k)`, `E(k) = p + ... + p^k` (see the module docs), where a draft row
/// costs `alpha` of a plain step.
pub(super) fn expected_speedup(p: f64, alpha: f64, k: usize) -> f64 {
    let mut kept = 0.0;
    let mut run = 1.0;
    for _ in 0..k {
        run *= p;
        kept += run;
    }
    (1.0 + kept) / (1.0 + alpha * k as f64)
}

/// The number of drafts in 1..=cap with the best expected speedup, when
/// it beats a plain step by [`MIN_GAIN`]; a draft row of a step with k
/// drafts costs `alpha(k)` of a plain step.
pub(super) fn best_count(p: f64, alpha: impl Fn(usize) -> f64, cap: usize) -> Option<usize> {
    let (k, speedup) = (1..=cap)
        .map(|k| (k, expected_speedup(p, alpha(k), k)))
        .fold(
            (0, 1.0),
            |best, this| if this.1 > best.1 { this } else { best },
        );
    (k > 0 && speedup >= 1.0 + MIN_GAIN).then_some(k)
}

/// What a draft row costs, as a share of a plain step, measured by the
/// decode loop on its own steps, per draft count (moving averages: the
/// machine's load moves them).
#[derive(Debug, Clone)]
pub(super) struct RowCost {
    /// Seconds of a plain generation step (no drafts).
    plain: Option<f64>,
    /// The share over verify steps of every count, once one was measured
    /// after a plain step (a count not measured yet takes it).
    alpha: Option<f64>,
    /// The share per draft count (index: count - 1).
    by_count: Vec<Option<f64>>,
    /// A fixed share (`LocalConfig::draft_row_cost`): nothing measured.
    fixed: Option<f64>,
    /// Verify steps since the last plain one.
    since_plain: u32,
    /// Seconds the draft model takes per draft it proposes (its own
    /// steps, and catching up on the tokens kept since its last proposal;
    /// not its first fill with a job's prompt), a moving average; `None`
    /// before it has proposed.
    model_secs: Option<f64>,
    /// A draft model's cost per draft before it is measured, as a share
    /// of a plain step ([`RowCost::set_model_prior`]).
    model_prior: f64,
}

/// Verify steps after which a plain step is taken again, to keep the
/// baseline current (a sequence that drafts on every step, as one with a
/// draft model does, would otherwise never measure one).
const PLAIN_EVERY: u32 = 32;

/// How much one step moves [`RowCost`]'s averages.
const COST_WEIGHT: f64 = 0.1;
/// ... and a count's own average, which sees fewer steps.
const COUNT_WEIGHT: f64 = 0.25;

impl Default for RowCost {
    fn default() -> Self {
        Self::new(None)
    }
}

impl RowCost {
    /// Measured, unless `fixed` says what a row costs.
    pub(super) fn new(fixed: Option<f64>) -> Self {
        Self {
            plain: None,
            alpha: None,
            by_count: vec![None; DRAFT_MAX_LIMIT as usize],
            fixed: fixed.map(|f| f.clamp(0.0, 2.0)),
            since_plain: 0,
            model_secs: None,
            model_prior: 0.0,
        }
    }

    /// What a draft model's draft costs before one is measured, as a
    /// share of a plain step: its weights' size over the model's (on a
    /// CPU a step's time follows the bytes it reads and the products it
    /// computes; a GPU's steps cost less than their size says, and the
    /// measured figure takes over after the first proposal).
    pub(super) fn set_model_prior(&mut self, share: f64) {
        self.model_prior = share.clamp(0.0, 2.0);
    }

    /// Whether the next verify step should measure what a row costs with
    /// drafts that are free to find (prompt lookup's, padded): a plain
    /// step is measured and no verify step yet. A draft model is filled
    /// with a job's prompt before its first proposal, which costs as much
    /// as a tenth to a half of the model's own prompt pass; whether its
    /// drafts can pay at all is known from the row cost first (measured:
    /// on this project's 2-core VM a row costs 0.6-0.9 of a step, and
    /// Qwen2.5-Coder-0.5B drafting for 1.5B cannot pay, while its fill
    /// made a one-request run 0.79-0.91x of one without).
    pub(super) fn wants_probe(&self) -> bool {
        self.fixed.is_none() && self.plain.is_some() && self.alpha.is_none()
    }

    /// The draft model proposed `drafts` drafts in `seconds`.
    pub(super) fn proposed_by_model(&mut self, seconds: f64, drafts: usize) {
        if drafts == 0 {
            return;
        }
        let per = seconds / drafts as f64;
        self.model_secs = Some(match self.model_secs {
            None => per,
            Some(m) => m + COST_WEIGHT * (per - m),
        });
    }

    /// A draft model's cost per draft, as a share of a plain step:
    /// measured once it has proposed, else its prior.
    fn model_share(&self) -> f64 {
        match (self.model_secs, self.plain) {
            (Some(secs), Some(plain)) if plain > 0.0 => (secs / plain).min(2.0),
            _ => self.model_prior,
        }
    }

    /// What one draft of a step of `drafts` costs, as a share of a plain
    /// step: its row, and, drafted `by_model`, the draft model's step; a
    /// fixed cost is the whole of it.
    pub(super) fn per_draft(&self, drafts: usize, by_model: bool) -> f64 {
        match self.fixed {
            Some(fixed) => fixed,
            None if by_model => self.alpha(drafts) + self.model_share(),
            None => self.alpha(drafts),
        }
    }

    /// Whether the next generation step should be a plain one: no plain
    /// step measured yet, or none for [`PLAIN_EVERY`] verify steps (never
    /// with a fixed cost). Without a baseline a row's cost stays the prior,
    /// and drafts that cost more than they give go on (measured: a draft
    /// model drafting from its sequence's first token at 0.8x).
    pub(super) fn wants_plain(&self) -> bool {
        self.fixed.is_none() && (self.plain.is_none() || self.since_plain >= PLAIN_EVERY)
    }

    /// A generation step without drafts took `seconds`.
    pub(super) fn plain(&mut self, seconds: f64) {
        self.since_plain = 0;
        self.plain = Some(match self.plain {
            None => seconds,
            Some(m) => m + COST_WEIGHT * (seconds - m),
        });
    }

    /// A generation step with `drafts` draft rows took `seconds`.
    pub(super) fn verified(&mut self, seconds: f64, drafts: usize) {
        let Some(plain) = self.plain.filter(|p| *p > 0.0) else {
            return;
        };
        if drafts == 0 {
            return;
        }
        self.since_plain = self.since_plain.saturating_add(1);
        let share = ((seconds - plain) / plain / drafts as f64).clamp(0.0, 2.0);
        self.alpha = Some(match self.alpha {
            None => share,
            Some(a) => a + COST_WEIGHT * (share - a),
        });
        if let Some(slot) = self.by_count.get_mut(drafts - 1) {
            *slot = Some(match *slot {
                None => share,
                Some(a) => a + COUNT_WEIGHT * (share - a),
            });
        }
    }

    /// The share in effect for a step of `drafts` drafts.
    pub(super) fn alpha(&self, drafts: usize) -> f64 {
        self.fixed
            .or_else(|| {
                drafts
                    .checked_sub(1)
                    .and_then(|i| self.by_count.get(i).copied().flatten())
            })
            .or(self.alpha)
            .unwrap_or(PRIOR_ALPHA)
    }
}

/// One sequence's drafting: when to propose, and how many at most.
#[derive(Debug, Clone)]
pub(super) struct Drafter {
    draft_max: usize,
    draft_min: usize,
    /// How many drafts the next proposal may have (it follows how many
    /// were accepted lately).
    cap: usize,
    /// The drafts' acceptance rate per position tried, per class of
    /// [`Source`].
    accept: [f64; CLASSES],
    /// The class of the proposal last counted (its verification updates
    /// that class's rate).
    last: usize,
    /// Whether a draft model has proposed for this sequence yet.
    proposed: bool,
    /// Misses in a row.
    misses: u32,
    /// Steps left without drafting, and the next pause's length.
    paused: u32,
    next_pause: u32,
}

impl Drafter {
    pub(super) fn new(draft_max: u32, draft_min: u32) -> Self {
        let draft_max = draft_max.max(1) as usize;
        Self {
            draft_max,
            draft_min: draft_min as usize,
            cap: FIRST_CAP.min(draft_max),
            accept: PRIOR_ACCEPT,
            last: 0,
            proposed: false,
            misses: 0,
            paused: 0,
            next_pause: FIRST_PAUSE,
        }
    }

    /// How many drafts a proposal may have now, at most `room`: 0 while
    /// paused (each call is one step of the pause) or when fewer than
    /// `draft_min` would fit.
    pub(super) fn room(&mut self, room: usize) -> usize {
        if self.paused > 0 {
            self.paused -= 1;
            if self.paused == 0 {
                for (rate, prior) in self.accept.iter_mut().zip(PRIOR_ACCEPT) {
                    *rate = rate.max(prior);
                }
            }
            return 0;
        }
        let cap = self.cap.min(room);
        if cap < self.draft_min.max(1) {
            return 0;
        }
        cap
    }

    /// How many of `found` drafts from `source` to verify at what a
    /// draft costs (`cost`): the count that pays best at the source's
    /// class's rate, at least `draft_min`; 0 when none pays.
    pub(super) fn count(&mut self, source: Source, found: usize, cost: &RowCost) -> usize {
        let class = source.class();
        self.last = class;
        let by_model = source == Source::Model;
        match best_count(self.accept[class], |k| cost.per_draft(k, by_model), found) {
            Some(k) if found >= self.draft_min => k.max(self.draft_min),
            _ => 0,
        }
    }

    /// The drafts to verify after the sequence's `history` (prompt,
    /// answer so far and its next token), at most `room` of them, into
    /// `out`; none while paused, when no count pays at a draft row's
    /// cost `alpha` (a share of a plain step, whatever the count) or when
    /// fewer than `draft_min` are found.
    #[cfg(test)]
    pub(super) fn propose<T: PartialEq + Copy>(
        &mut self,
        history: &[T],
        room: usize,
        alpha: f64,
        out: &mut Vec<T>,
    ) {
        let most = self.room(room);
        self.lookup(history, most, &RowCost::new(Some(alpha)), out);
        if out.len() < self.draft_min.max(1) {
            out.clear();
        }
    }

    /// Prompt lookup's drafts after `history`, at most `most`, into `out`:
    /// as many of the match's continuation as pay at its class's rate and
    /// what a row costs (`cost`); none without a match.
    pub(super) fn lookup<T: PartialEq + Copy>(
        &mut self,
        history: &[T],
        most: usize,
        cost: &RowCost,
        out: &mut Vec<T>,
    ) {
        let n = lookup(history, most, out);
        let k = if n == 0 {
            0
        } else {
            self.count(Source::Match(n), out.len(), cost)
        };
        out.truncate(k);
    }

    /// `k` drafts that measure what a row costs ([`RowCost::wants_probe`]):
    /// prompt lookup's continuation after `history`, padded with its last
    /// token. They are verified as any drafts are, so the answer does not
    /// depend on them, and whatever of them is kept is a step saved.
    pub(super) fn probe<T: PartialEq + Copy>(&mut self, history: &[T], k: usize, out: &mut Vec<T>) {
        let n = lookup(history, k, out);
        self.last = Source::Match(n.max(NGRAM_MIN)).class();
        if let Some(&last) = history.last() {
            out.resize(k, last);
        }
    }

    /// Whether the proposal last counted came from the draft model.
    pub(super) fn by_model(&self) -> bool {
        self.last == Source::Model.class()
    }

    /// True on the sequence's first call only (a draft model's first
    /// proposal also brings its context to the prompt).
    pub(super) fn first_proposal(&mut self) -> bool {
        !std::mem::replace(&mut self.proposed, true)
    }

    /// The class of the proposal last counted, by name (for traces).
    pub(super) fn last_class(&self) -> &'static str {
        CLASS_NAMES[self.last]
    }

    /// The fewest drafts worth verifying (`--draft-min`).
    pub(super) fn draft_min(&self) -> usize {
        self.draft_min
    }

    fn pause(&mut self) {
        self.misses = 0;
        self.paused = self.next_pause;
        self.next_pause = (self.next_pause * 2).min(MAX_PAUSE);
    }

    /// How a proposal of `drafted` tokens went: `accepted` of them were
    /// the sequence's own picks, in a step whose draft rows cost `alpha`
    /// of a plain step each.
    pub(super) fn verified(&mut self, drafted: usize, accepted: usize, alpha: f64) {
        if drafted == 0 {
            return;
        }
        // Positions tried: the kept ones, and the first one not kept.
        let rate = &mut self.accept[self.last];
        for _ in 0..accepted {
            *rate += ACCEPT_WEIGHT * (1.0 - *rate);
        }
        if accepted < drafted {
            *rate -= ACCEPT_WEIGHT * *rate;
        }
        self.cap = if accepted == drafted {
            (self.cap * 2).min(self.draft_max)
        } else {
            (2 * accepted).clamp(MIN_CAP, self.draft_max)
        };
        if accepted == 0 || (accepted as f64) < alpha * drafted as f64 {
            self.misses += 1;
            if self.misses >= MISSES_BEFORE_PAUSE {
                self.pause();
            }
            return;
        }
        self.misses = 0;
        self.next_pause = (self.next_pause / 2).max(FIRST_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(history: &[u32], max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        lookup(history, max, &mut out);
        out
    }

    #[test]
    fn the_longest_suffix_found_earlier_gives_what_followed_it() {
        // "1 2 3" occurred before, followed by 4 5 6.
        assert_eq!(
            look(&[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 8),
            [4, 5, 6, 9, 1, 2, 3]
        );
        assert_eq!(look(&[1, 2, 3, 4, 5, 6, 9, 1, 2, 3], 2), [4, 5]);
    }

    #[test]
    fn the_most_recent_occurrence_wins() {
        // "7 8" twice before: the later one was followed by 2.
        assert_eq!(look(&[7, 8, 1, 0, 7, 8, 2, 0, 7, 8], 1), [2]);
    }

    #[test]
    fn a_longer_match_beats_a_more_recent_shorter_one() {
        // "5 6 7" occurs at the start (then 1); "6 7" alone later (then 2).
        assert_eq!(look(&[5, 6, 7, 1, 9, 6, 7, 2, 4, 5, 6, 7], 1), [1]);
    }

    #[test]
    fn shorter_suffixes_are_tried_down_to_two_tokens() {
        assert_eq!(look(&[4, 5, 9, 1, 3, 4, 5], 3), [9, 1, 3]);
        // One token alone is not looked up.
        assert!(look(&[4, 9, 1, 2, 4], 3).is_empty());
    }

    #[test]
    fn nothing_without_an_earlier_occurrence() {
        assert!(look(&[1, 2, 3, 4], 5).is_empty());
        assert!(look(&[], 5).is_empty());
        assert!(look(&[1], 5).is_empty());
        assert!(look(&[1, 2, 1, 2], 0).is_empty());
    }

    #[test]
    fn a_run_proposes_its_own_continuation() {
        // A repeated token: the earlier occurrence is followed by itself.
        assert_eq!(look(&[3, 3, 3, 3], 4), [3]);
        assert_eq!(look(&[3, 3, 3], 4), [3]);
        assert_eq!(look(&[1, 2, 1, 2, 1, 2], 4), [1, 2]);
    }

    /// A draft row as cheap as on a GPU: the cost model drafts the cap.
    const CHEAP: f64 = 0.01;

    #[test]
    fn draft_min_and_room_bound_a_proposal() {
        let history = [1, 2, 3, 4, 5, 1, 2];
        let mut out = Vec::new();
        let mut d = Drafter::new(16, 0);
        d.propose(&history, 2, CHEAP, &mut out);
        assert_eq!(out, [3, 4]);
        d.propose(&history, 16, CHEAP, &mut out);
        assert_eq!(out, [3, 4, 5, 1], "the first proposals are short");
        let mut d = Drafter::new(16, 4);
        d.propose(&history, 16, CHEAP, &mut out);
        assert_eq!(out, [3, 4, 5, 1]);
        d.propose(&history, 3, CHEAP, &mut out);
        assert!(out.is_empty(), "fewer than draft_min");
    }

    #[test]
    fn the_count_follows_the_cost_of_a_row_and_the_rate() {
        // Rows nearly free: the more the better.
        assert_eq!(best_count(0.95, |_| 0.001, 16), Some(16));
        // A row at 0.6 of a step (one CPU core): few, and none at a low
        // rate.
        assert_eq!(best_count(0.8, |_| PRIOR_ALPHA, 16), Some(1));
        let k = best_count(0.95, |_| PRIOR_ALPHA, 16).unwrap();
        assert!((3..=5).contains(&k), "{k}");
        assert_eq!(best_count(0.7, |_| PRIOR_ALPHA, 16), None);
        // A row at 0.9 of a step (a 1.5B model on one core): nothing pays
        // even at a high rate.
        assert_eq!(best_count(0.97, |_| 0.9, 16), None);
        // A row dearer than a step never pays.
        assert_eq!(best_count(0.99, |_| 1.0, 16), None);
        // The count follows what each count costs: three drafts when their
        // rows are cheap, even where one or two would not pay.
        let blocks = |k: usize| if k == 3 { 0.3 } else { 0.95 };
        assert_eq!(best_count(0.95, blocks, 16), Some(3));
        assert!((expected_speedup(1.0, 0.5, 2) - 1.5).abs() < 1e-12);
        assert!((expected_speedup(0.0, 0.5, 2) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn the_row_cost_is_measured_against_plain_steps_per_count() {
        let mut c = RowCost::default();
        assert_eq!(c.alpha(4), PRIOR_ALPHA);
        c.verified(0.2, 4);
        assert_eq!(c.alpha(4), PRIOR_ALPHA, "no plain step to compare with yet");
        c.plain(0.01);
        c.verified(0.03, 4);
        assert!((c.alpha(4) - 0.5).abs() < 1e-9, "{}", c.alpha(4));
        // A count not measured yet takes the mean over all counts.
        assert!((c.alpha(2) - 0.5).abs() < 1e-9, "{}", c.alpha(2));
        c.verified(0.02, 1);
        assert!((c.alpha(1) - 1.0).abs() < 1e-9, "{}", c.alpha(1));
        assert!((c.alpha(4) - 0.5).abs() < 1e-9, "each count its own");
        assert!((c.alpha(2) - 0.55).abs() < 1e-9, "{}", c.alpha(2));
        c.verified(0.01, 4);
        assert!((c.alpha(4) - 0.375).abs() < 1e-9, "{}", c.alpha(4));
        let mut c = RowCost::new(Some(0.1));
        c.plain(0.01);
        c.verified(0.05, 1);
        assert_eq!(c.alpha(1), 0.1, "a fixed cost is not measured");
    }

    #[test]
    fn a_plain_step_is_wanted_first_and_then_every_so_often() {
        let mut c = RowCost::default();
        assert!(c.wants_plain(), "no baseline yet");
        c.plain(0.01);
        assert!(!c.wants_plain());
        for _ in 0..PLAIN_EVERY {
            assert!(!c.wants_plain());
            c.verified(0.02, 1);
        }
        assert!(c.wants_plain(), "the baseline is refreshed");
        c.plain(0.01);
        assert!(!c.wants_plain());
        assert!(
            !RowCost::new(Some(0.5)).wants_plain(),
            "a fixed cost needs none"
        );
    }

    /// A draft model is priced at its row and its own step: before it
    /// proposes, its size's share of the model; after, what it took.
    /// Measured before it is ever filled: the row, by one probe.
    #[test]
    fn a_draft_model_pays_for_its_own_steps_and_is_priced_before_it_is_filled() {
        let mut c = RowCost::default();
        c.set_model_prior(0.44);
        assert!(!c.wants_probe(), "a plain step first");
        c.plain(0.03);
        assert!(c.wants_probe(), "then a row's cost, before any fill");
        c.verified(0.03 + 4.0 * 0.7 * 0.03, 4);
        assert!(!c.wants_probe(), "once");
        assert!((c.per_draft(4, false) - 0.7).abs() < 1e-9);
        assert!((c.per_draft(4, true) - 1.14).abs() < 1e-9);
        // This VM's case (Qwen2.5-Coder 0.5B for 1.5B): nothing pays, so
        // the draft model is never filled with the prompt.
        let mut d = Drafter::new(16, 0);
        assert_eq!(d.count(Source::Model, 16, &c), 0);
        assert!(d.by_model());
        // Where a row is cheap (a GPU, a memory-bound model), it drafts,
        // and then its measured steps take over from the prior.
        let mut cheap = RowCost::default();
        cheap.set_model_prior(0.44);
        cheap.plain(0.03);
        cheap.verified(0.03 + 4.0 * 0.02 * 0.03, 4);
        assert!(d.count(Source::Model, 16, &cheap) > 0);
        cheap.proposed_by_model(0.03 * 0.1 * 3.0, 3);
        assert!(
            (cheap.per_draft(4, true) - 0.12).abs() < 1e-9,
            "{}",
            cheap.per_draft(4, true)
        );
        // Prompt lookup's drafts cost their rows only; a fixed cost is all.
        assert!((cheap.per_draft(4, false) - 0.02).abs() < 1e-9);
        let mut fixed = RowCost::new(Some(0.1));
        fixed.set_model_prior(1.0);
        fixed.plain(0.03);
        assert!(!fixed.wants_probe());
        assert_eq!(fixed.per_draft(4, true), 0.1);
    }

    #[test]
    fn a_probe_is_prompt_lookups_continuation_padded() {
        let mut d = Drafter::new(16, 0);
        let mut out = Vec::new();
        d.probe(&long_match(), 4, &mut out);
        assert_eq!(out, [0, 1, 2, 3], "the match's continuation");
        assert!(!d.by_model());
        d.probe(&[5, 6, 7], 3, &mut out);
        assert_eq!(out, [7, 7, 7], "no match: the last token, repeated");
    }

    /// Ten tokens, then the same ten: the last ten match the first ten.
    fn long_match() -> Vec<u32> {
        (0..10).chain(0..10).collect()
    }

    #[test]
    fn two_misses_pause_drafting_for_longer_each_time() {
        // Rows at 0.3 of a step: a long match still pays after one miss.
        const ROW: f64 = 0.3;
        let history = long_match();
        let mut out = Vec::new();
        let mut d = Drafter::new(16, 0);
        let mut pauses = Vec::new();
        d.propose(&history, 16, ROW, &mut out);
        assert!(!out.is_empty(), "a long match is drafted");
        for _ in 0..3 {
            d.verified(out.len(), 0, ROW);
            d.propose(&history, 16, ROW, &mut out);
            assert!(!out.is_empty(), "one miss does not pause");
            d.verified(out.len(), 0, ROW);
            let mut paused = 0;
            loop {
                d.propose(&history, 16, ROW, &mut out);
                if !out.is_empty() {
                    break;
                }
                paused += 1;
            }
            pauses.push(paused);
        }
        assert_eq!(pauses, [FIRST_PAUSE, FIRST_PAUSE * 2, FIRST_PAUSE * 4]);
        // A step that paid halves the next pause.
        d.verified(1, 1, ROW);
        assert_eq!(d.next_pause, FIRST_PAUSE * 4);
    }

    #[test]
    fn the_match_length_is_returned_and_counted_up_to_the_longest() {
        let mut out = Vec::new();
        assert_eq!(lookup(&long_match(), 3, &mut out), 10);
        assert_eq!(out, [0, 1, 2]);
        let run = vec![7u32; 40];
        assert_eq!(lookup(&run, 3, &mut out), NGRAM_MAX);
        assert_eq!(out, [7]);
        assert_eq!(lookup(&[1, 2, 9, 1, 2], 3, &mut out), 2);
        assert_eq!(lookup(&[1, 2, 3], 3, &mut out), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn each_class_of_match_keeps_its_own_rate() {
        // Rows at the CPU's cost: a two-token match does not pay at its
        // prior, a ten-token one does.
        let mut out = Vec::new();
        let mut d = Drafter::new(16, 0);
        d.propose(&[1, 2, 3, 4, 5, 1, 2], 16, PRIOR_ALPHA, &mut out);
        assert!(out.is_empty(), "a short match at its prior does not pay");
        d.propose(&long_match(), 16, PRIOR_ALPHA, &mut out);
        assert!(!out.is_empty(), "a long match does");
        assert_eq!(d.last_class(), "long");
        // A failed long proposal lowers the long class's rate only.
        d.verified(out.len(), 0, PRIOR_ALPHA);
        assert!(d.accept[2] < PRIOR_ACCEPT[2]);
        assert_eq!(d.accept[0], PRIOR_ACCEPT[0]);
        assert_eq!(d.accept[1], PRIOR_ACCEPT[1]);
        assert_eq!(d.accept[3], PRIOR_ACCEPT[3]);
        // Where rows are nearly free, a short match is worth a try.
        let mut d = Drafter::new(16, 0);
        d.propose(&[1, 2, 3, 4, 5, 1, 2], 16, CHEAP, &mut out);
        assert_eq!(out, [3, 4, 5, 1]);
        assert_eq!(d.last_class(), "short");
        assert_eq!(Source::Match(SHORT_MATCH).class(), 0);
        assert_eq!(Source::Match(MEDIUM_MATCH).class(), 1);
        assert_eq!(Source::Match(MEDIUM_MATCH + 1).class(), 2);
        assert_eq!(Source::Model.class(), 3);
    }

    #[test]
    fn the_rate_follows_the_positions_tried() {
        let mut d = Drafter::new(16, 0);
        d.verified(4, 4, CHEAP);
        assert!(d.accept[0] > PRIOR_ACCEPT[0]);
        let high = d.accept[0];
        d.verified(4, 1, CHEAP);
        // One kept (up), one not (down by a fifth).
        let expected = (high + ACCEPT_WEIGHT * (1.0 - high)) * (1.0 - ACCEPT_WEIGHT);
        assert!((d.accept[0] - expected).abs() < 1e-12);
    }

    #[test]
    fn the_cap_follows_acceptance() {
        let mut d = Drafter::new(16, 0);
        assert_eq!(d.cap, FIRST_CAP);
        d.verified(4, 4, CHEAP);
        assert_eq!(d.cap, 8);
        d.verified(8, 8, CHEAP);
        assert_eq!(d.cap, 16);
        d.verified(16, 16, CHEAP);
        assert_eq!(d.cap, 16);
        d.verified(16, 3, CHEAP);
        assert_eq!(d.cap, 6);
        d.verified(6, 0, CHEAP);
        assert_eq!(d.cap, MIN_CAP);
    }

    #[test]
    fn drafts_that_do_not_pay_for_their_rows_are_misses() {
        let mut d = Drafter::new(16, 0);
        d.verified(8, 3, 0.5);
        d.verified(8, 3, 0.5);
        assert_eq!(d.paused, FIRST_PAUSE, "two misses pause");
        let mut d = Drafter::new(16, 0);
        d.verified(8, 3, 0.5);
        d.verified(8, 4, 0.5);
        d.verified(8, 3, 0.5);
        assert_eq!(d.paused, 0, "paying for the rows resets the count");
        let mut d = Drafter::new(16, 0);
        d.verified(8, 0, CHEAP);
        d.verified(8, 0, CHEAP);
        assert_eq!(
            d.paused, FIRST_PAUSE,
            "nothing kept is a miss however cheap"
        );
    }

    #[test]
    fn settings_are_checked() {
        assert!(check_settings(16, 0).is_ok());
        assert!(check_settings(1, 1).is_ok());
        assert_eq!(check_settings(0, 0).unwrap_err().key, "draft_max");
        assert_eq!(
            check_settings(DRAFT_MAX_LIMIT + 1, 0).unwrap_err().key,
            "draft_max"
        );
        assert_eq!(check_settings(4, 5).unwrap_err().key, "draft_min");
        assert_eq!("ngram".parse::<SpecType>(), Ok(SpecType::Ngram));
        assert_eq!("off".parse::<SpecType>(), Ok(SpecType::Off));
        assert_eq!("draft".parse::<SpecType>(), Ok(SpecType::Draft));
        assert!("eagle".parse::<SpecType>().is_err());
    }
}
