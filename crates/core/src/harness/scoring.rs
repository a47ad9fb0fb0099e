//! Built-in scorers and the signal functions they are made of. Every
//! function here reads only a [`Candidate`]; none knows which lane made it,
//! so no lane gets a hard-coded score. Users compose these in their own
//! closures (see [`Scorer`]).
//!
//! The default formula ([`DefaultScorer`]):
//!
//! ```text
//! score = confidence * (1 - repetition) * truncation * refusal   (0 if blank)
//! confidence = exp(mean token log-prob) = 1 / perplexity   (1 when the
//!              candidate carries no log-probs: an absent signal is neutral)
//! truncation = 0.5 when finish_reason = length, else 1
//! refusal    = 0.2 when the answer opens like a refusal, else 1
//! ```
//!
//! `confidence` is the geometric mean of the sampled tokens' probabilities
//! under the raw model distribution: a small model that is unsure of its
//! answer spreads probability and scores low. Thresholds are model-specific;
//! `edgecloud run --json` prints each lane's score and signals to tune them.
//!
//! [`SignalScorer`] scores with one named [`Signal`] in the signal's own
//! units (a log-probability, or a probability margin), so a threshold
//! calibrated by `edgecloud bench calibrate` means the same thing at run
//! time: `escalate_below = { signal = "p10_logprob", value = -1.2 }` in a
//! cascade route is `Policy::cascade(-1.2)` with
//! `SignalScorer(Signal::P10Logprob)`.

use super::backend::{Candidate, TokenSignals};
use super::callbacks::{Score, ScoreContext, Scorer};
use crate::lane::FinishReason;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

/// Factor applied to an answer cut by `max_tokens`.
pub const TRUNCATION_FACTOR: f64 = 0.5;
/// Factor applied to an answer that opens like a refusal.
pub const REFUSAL_FACTOR: f64 = 0.2;

/// Mean token log-probability, when the candidate has log-probs.
pub fn mean_logprob(candidate: &Candidate) -> Option<f64> {
    candidate
        .signals
        .as_ref()
        .and_then(|s| s.mean_logprob)
        .map(f64::from)
}

/// Lowest token log-probability (the least likely token sampled).
pub fn min_logprob(candidate: &Candidate) -> Option<f64> {
    candidate
        .signals
        .as_ref()
        .and_then(|s| s.min_logprob)
        .map(f64::from)
}

/// 10th percentile of the token log-probabilities (nearest rank).
pub fn p10_logprob(candidate: &Candidate) -> Option<f64> {
    candidate
        .signals
        .as_ref()
        .and_then(|s| s.p10_logprob)
        .map(f64::from)
}

/// The first token's top-1 minus top-2 probability.
pub fn first_token_margin(candidate: &Candidate) -> Option<f64> {
    candidate
        .signals
        .as_ref()
        .and_then(|s| s.first_token_margin)
        .map(f64::from)
}

/// Tokens in the sliding window of [`min_window_logprob`].
pub const CONFIDENCE_WINDOW: usize = 16;
/// Tokens in the answer's tail of [`tail_logprob`].
pub const CONFIDENCE_TAIL: usize = 32;

/// The lowest mean of `window` consecutive finite log-probabilities (the
/// mean of all of them when there are fewer): DeepConf's lowest group
/// confidence (Fu et al. 2025), with the sampled token's log-probability
/// standing for the token's confidence. A reasoning trace that loses its
/// way for a few steps shows a dip that the mean over the whole answer
/// smooths out. `None` without a finite value.
pub fn lowest_window_mean(logprobs: &[f32], window: usize) -> Option<f64> {
    let v: Vec<f64> = logprobs
        .iter()
        .filter(|x| x.is_finite())
        .map(|&x| f64::from(x))
        .collect();
    if v.is_empty() {
        return None;
    }
    let w = window.clamp(1, v.len());
    let mut sum: f64 = v[..w].iter().sum();
    let mut low = sum;
    for i in w..v.len() {
        sum += v[i] - v[i - w];
        low = low.min(sum);
    }
    Some(low / w as f64)
}

/// The mean of the last `tail` finite log-probabilities (all of them when
/// there are fewer): DeepConf's tail confidence, the part of a reasoning
/// answer where the final result is stated. `None` without a finite value.
pub fn tail_mean(logprobs: &[f32], tail: usize) -> Option<f64> {
    let v: Vec<f64> = logprobs
        .iter()
        .filter(|x| x.is_finite())
        .map(|&x| f64::from(x))
        .collect();
    let t = tail.clamp(1, v.len().max(1));
    (!v.is_empty()).then(|| v[v.len() - t..].iter().sum::<f64>() / t as f64)
}

/// Lowest mean log-probability over a sliding window of
/// [`CONFIDENCE_WINDOW`] tokens (see [`lowest_window_mean`]).
pub fn min_window_logprob(candidate: &Candidate) -> Option<f64> {
    let s = candidate.signals.as_ref()?;
    lowest_window_mean(&s.token_logprobs, CONFIDENCE_WINDOW)
}

/// Mean log-probability of the last [`CONFIDENCE_TAIL`] tokens (see
/// [`tail_mean`]).
pub fn tail_logprob(candidate: &Candidate) -> Option<f64> {
    let s = candidate.signals.as_ref()?;
    tail_mean(&s.token_logprobs, CONFIDENCE_TAIL)
}

/// A confidence signal of a candidate, by name: what cascade thresholds
/// are expressed in and what `edgecloud bench calibrate` calibrates.
/// Higher always means more confident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Mean token log-probability (nats; 0 is certain).
    MeanLogprob,
    /// Lowest token log-probability.
    MinLogprob,
    /// 10th percentile of the token log-probabilities.
    P10Logprob,
    /// The first token's top-1 minus top-2 probability (`[0, 1]`).
    FirstTokenMargin,
    /// Lowest mean log-probability over a sliding window of
    /// [`CONFIDENCE_WINDOW`] tokens (DeepConf's lowest group confidence).
    MinWindowLogprob,
    /// Mean log-probability of the last [`CONFIDENCE_TAIL`] tokens
    /// (DeepConf's tail confidence).
    TailLogprob,
    /// The share of k samples of the same request whose answers agree with
    /// the majority answer (`[0, 1]`; self-consistency): needs a request
    /// with a [`consensus`](crate::request::Sampling::consensus) of more
    /// than one sample, and costs k answers of local time and tokens.
    AnswerAgreement,
    /// Prompt-only: the mean log-probability of the prompt's own tokens
    /// under the local model (nats), read in the prompt pass before any
    /// token is generated (a request with
    /// [`score_prompt`](crate::request::Sampling::score_prompt)).
    PromptLogprob,
    /// Prompt-only: minus the prompt's length in tokens (chat template
    /// applied), so that a longer prompt scores lower, as every signal
    /// escalates below its threshold (`-120`: longer than 120 tokens).
    /// Known once the local lane has tokenized the prompt, before its
    /// prompt pass: it costs no model work at all.
    PromptBrevity,
    /// Prompt-only: among the k calibration prompts nearest to this one
    /// (cosine similarity of their embeddings), the similarity-weighted
    /// share on which the local model was right (`[0, 1]`). Computed by
    /// `bench calibrate` from recorded embeddings, never from a candidate.
    PromptNeighbours,
}

impl Signal {
    /// Every signal, in documentation order.
    pub const ALL: [Signal; 10] = [
        Signal::MeanLogprob,
        Signal::MinLogprob,
        Signal::P10Logprob,
        Signal::FirstTokenMargin,
        Signal::MinWindowLogprob,
        Signal::TailLogprob,
        Signal::AnswerAgreement,
        Signal::PromptLogprob,
        Signal::PromptBrevity,
        Signal::PromptNeighbours,
    ];

    /// The snake-case name (`p10_logprob`).
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MeanLogprob => "mean_logprob",
            Signal::MinLogprob => "min_logprob",
            Signal::P10Logprob => "p10_logprob",
            Signal::FirstTokenMargin => "first_token_margin",
            Signal::MinWindowLogprob => "min_window_logprob",
            Signal::TailLogprob => "tail_logprob",
            Signal::AnswerAgreement => "answer_agreement",
            Signal::PromptLogprob => "prompt_logprob",
            Signal::PromptBrevity => "prompt_brevity",
            Signal::PromptNeighbours => "prompt_neighbours",
        }
    }

    /// Whether the signal is known from the prompt alone, before any
    /// token of the answer is generated: what the first stage of a
    /// two-stage route reads.
    pub fn is_prompt_only(self) -> bool {
        matches!(
            self,
            Signal::PromptLogprob | Signal::PromptBrevity | Signal::PromptNeighbours
        )
    }

    /// The value of [`Signal::PromptBrevity`] for a prompt of `tokens`
    /// tokens: its one definition.
    pub fn brevity(tokens: u64) -> f64 {
        -(tokens as f64)
    }

    /// Whether a route's first stage can read it live
    /// ([`Route::prompt_escalate_on`](super::Route::prompt_escalate_on)):
    /// the local lane reports it before it generates (`prompt_neighbours`
    /// is computed by `bench calibrate` only).
    pub fn is_read_before_generation(self) -> bool {
        matches!(self, Signal::PromptLogprob | Signal::PromptBrevity)
    }

    /// Its unit, for people.
    pub fn unit(self) -> &'static str {
        match self {
            Signal::FirstTokenMargin => "probability",
            Signal::AnswerAgreement => "share of samples",
            Signal::PromptNeighbours => "weighted share of neighbours",
            Signal::PromptBrevity => "minus the prompt's tokens",
            _ => "log-probability (nats)",
        }
    }

    /// Whether the signal can be read while the answer is still being
    /// generated, and means then what it will mean at the end once it is
    /// below a threshold: it only ever falls as tokens come (the lowest
    /// token log-probability; the lowest window mean once a whole window
    /// is in). A cascade on such a signal can escalate early
    /// ([`Route::escalate_early`](super::Route::escalate_early)) with the
    /// same decisions it would make at the end.
    pub fn is_streamable(self) -> bool {
        matches!(self, Signal::MinLogprob | Signal::MinWindowLogprob)
    }

    /// The candidate's value of this signal, when it has one.
    pub fn of(self, candidate: &Candidate) -> Option<f64> {
        self.of_signals(candidate.signals.as_ref()?)
    }

    /// This signal's value in a completion's token signals (the windowed
    /// ones are computed from `token_logprobs`).
    pub fn of_signals(self, s: &TokenSignals) -> Option<f64> {
        match self {
            Signal::MeanLogprob => s.mean_logprob.map(f64::from),
            Signal::MinLogprob => s.min_logprob.map(f64::from),
            Signal::P10Logprob => s.p10_logprob.map(f64::from),
            Signal::FirstTokenMargin => s.first_token_margin.map(f64::from),
            Signal::MinWindowLogprob => lowest_window_mean(&s.token_logprobs, CONFIDENCE_WINDOW),
            Signal::TailLogprob => tail_mean(&s.token_logprobs, CONFIDENCE_TAIL),
            Signal::AnswerAgreement => s.agreement.map(f64::from),
            Signal::PromptLogprob => s.prompt_logprob.map(f64::from),
            Signal::PromptBrevity => s.prompt_tokens.map(|t| Signal::brevity(t.into())),
            Signal::PromptNeighbours => None,
        }
        .filter(|v| v.is_finite())
    }
}

/// A streamable signal ([`Signal::is_streamable`]) read token by token:
/// after each token, the most the finished answer's value can be, once
/// that is known (from the first token for `min_logprob`, from the
/// [`CONFIDENCE_WINDOW`]-th for `min_window_logprob`: with fewer tokens the
/// finished value is the mean of them all, which can still rise).
#[derive(Debug, Clone)]
pub(crate) struct RunningSignal {
    signal: Signal,
    /// The last window's finite values (`min_window_logprob`).
    window: std::collections::VecDeque<f64>,
    sum: f64,
    low: Option<f64>,
}

impl RunningSignal {
    /// A reader of `signal`; `None` when it cannot be read early.
    pub(crate) fn new(signal: Signal) -> Option<Self> {
        signal.is_streamable().then(|| Self {
            signal,
            window: std::collections::VecDeque::with_capacity(CONFIDENCE_WINDOW),
            sum: 0.0,
            low: None,
        })
    }

    /// Takes the next sampled token's log-probability; returns the bound
    /// so far. Non-finite values are skipped, as the finished signal
    /// skips them.
    pub(crate) fn push(&mut self, logprob: f32) -> Option<f64> {
        if !logprob.is_finite() {
            return self.low;
        }
        let v = f64::from(logprob);
        let next = match self.signal {
            Signal::MinLogprob => Some(v),
            _ => {
                self.window.push_back(v);
                self.sum += v;
                if self.window.len() > CONFIDENCE_WINDOW {
                    self.sum -= self.window.pop_front().unwrap_or(0.0);
                }
                (self.window.len() == CONFIDENCE_WINDOW)
                    .then(|| self.sum / CONFIDENCE_WINDOW as f64)
            }
        };
        if let Some(x) = next {
            self.low = Some(self.low.map_or(x, |l| l.min(x)));
        }
        self.low
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A signal name that is not one of [`Signal::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown signal `{0}`; expected mean_logprob, min_logprob, p10_logprob, first_token_margin, \
     min_window_logprob, tail_logprob, answer_agreement, prompt_logprob, prompt_brevity or \
     prompt_neighbours"
)]
pub struct UnknownSignal(pub String);

impl FromStr for Signal {
    type Err = UnknownSignal;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('-', "_");
        Signal::ALL
            .into_iter()
            .find(|k| k.as_str() == norm)
            .ok_or_else(|| UnknownSignal(s.to_string()))
    }
}

/// Scores a candidate with one [`Signal`], in the signal's own units (not
/// `[0, 1]`). A candidate without the signal, or with blank text, gets a
/// non-finite score, i.e. is unscored: it never passes a threshold, so a
/// cascade escalates it. Every signal the candidate has is recorded in the
/// score's components (so a report shows them all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalScorer(pub Signal);

impl Scorer for SignalScorer {
    fn score(&self, candidate: &Candidate, _: &ScoreContext) -> Score {
        let mut s = Score::new(f64::NAN);
        for sig in Signal::ALL {
            if let Some(v) = sig.of(candidate) {
                s.signals.insert(sig.as_str().into(), v);
            }
        }
        if !is_empty(candidate) {
            if let Some(v) = self.0.of(candidate) {
                s.value = v;
            }
        }
        s
    }
}

/// Perplexity of the sampled text: `exp(-mean log-prob)`; 1 is certain.
pub fn perplexity(candidate: &Candidate) -> Option<f64> {
    mean_logprob(candidate).map(|m| (-m).exp())
}

/// Share of repeated material in `text`, in `[0, 1]`: the fraction of word
/// trigrams that already appeared earlier (character 8-grams for text
/// without spaces). Degenerate loops ("the the the ...") score near 1.
pub fn repetition(text: &str) -> f64 {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() >= 4 {
        return repeated_share(words.windows(3));
    }
    let chars: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    if chars.len() >= 16 {
        return repeated_share(chars.windows(8));
    }
    0.0
}

fn repeated_share<T: std::hash::Hash + Eq>(grams: impl Iterator<Item = T>) -> f64 {
    let mut seen = HashSet::new();
    let (mut total, mut repeated) = (0usize, 0usize);
    for g in grams {
        total += 1;
        if !seen.insert(g) {
            repeated += 1;
        }
    }
    if total == 0 {
        0.0
    } else {
        repeated as f64 / total as f64
    }
}

/// True when generation stopped at `max_tokens`.
pub fn is_truncated(candidate: &Candidate) -> bool {
    candidate.finish_reason == FinishReason::Length
}

/// True when the text is blank.
pub fn is_empty(candidate: &Candidate) -> bool {
    candidate.text.trim().is_empty()
}

/// True when the answer opens like a refusal ("I'm sorry, but I can't...").
/// English phrases only, looked for in the first 160 characters.
pub fn is_refusal(text: &str) -> bool {
    const OPENINGS: &[&str] = &[
        "i'm sorry",
        "i am sorry",
        "sorry, i",
        "i can't",
        "i cannot",
        "i can not",
        "i won't",
        "i will not",
        "i'm unable",
        "i am unable",
        "i'm not able",
        "as an ai",
    ];
    let head: String = text
        .trim_start()
        .chars()
        .take(160)
        .collect::<String>()
        .to_lowercase()
        .replace('\u{2019}', "'");
    OPENINGS.iter().any(|p| head.contains(p))
}

/// The text checks every candidate gets: blank (0), refusal, truncation and
/// repetition factors. Returns the product and records each signal.
fn generic_part(candidate: &Candidate, score: &mut Score) -> f64 {
    let empty = is_empty(candidate);
    let refused = is_refusal(&candidate.text);
    let truncated = is_truncated(candidate);
    let rep = repetition(&candidate.text);
    score
        .signals
        .insert("empty".into(), f64::from(u8::from(empty)));
    score
        .signals
        .insert("refused".into(), f64::from(u8::from(refused)));
    score
        .signals
        .insert("truncated".into(), f64::from(u8::from(truncated)));
    score.signals.insert("repetition".into(), rep);
    if empty {
        return 0.0;
    }
    let mut v = 1.0 - rep;
    if truncated {
        v *= TRUNCATION_FACTOR;
    }
    if refused {
        v *= REFUSAL_FACTOR;
    }
    v
}

/// The confidence part: `exp(mean log-prob)`, 1 when absent.
fn confidence_part(candidate: &Candidate, score: &mut Score) -> f64 {
    let Some(mean) = mean_logprob(candidate) else {
        return 1.0;
    };
    score.signals.insert("mean_logprob".into(), mean);
    for (name, v) in [
        ("min_logprob", min_logprob(candidate)),
        ("p10_logprob", p10_logprob(candidate)),
        ("first_token_margin", first_token_margin(candidate)),
        ("min_window_logprob", min_window_logprob(candidate)),
        ("tail_logprob", tail_logprob(candidate)),
        ("answer_agreement", Signal::AnswerAgreement.of(candidate)),
    ] {
        if let Some(v) = v {
            score.signals.insert(name.into(), v);
        }
    }
    score.signals.insert("perplexity".into(), (-mean).exp());
    let c = mean.exp().clamp(0.0, 1.0);
    score.signals.insert("confidence".into(), c);
    c
}

/// The default scorer: confidence from the model's own log-probs times the
/// generic text checks (see the module docs for the formula).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultScorer;

impl Scorer for DefaultScorer {
    fn score(&self, candidate: &Candidate, _: &ScoreContext) -> Score {
        let mut s = Score::new(0.0);
        let g = generic_part(candidate, &mut s);
        let c = confidence_part(candidate, &mut s);
        s.value = g * c;
        s
    }
}

/// Text checks only (blank, refusal, truncation, repetition), for any
/// candidate; ignores log-probs.
#[derive(Debug, Clone, Copy, Default)]
pub struct GenericScorer;

impl Scorer for GenericScorer {
    fn score(&self, candidate: &Candidate, _: &ScoreContext) -> Score {
        let mut s = Score::new(0.0);
        s.value = generic_part(candidate, &mut s);
        s
    }
}

/// Confidence only: `exp(mean log-prob)` (1 without log-probs, 0 when
/// blank).
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfidenceScorer;

impl Scorer for ConfidenceScorer {
    fn score(&self, candidate: &Candidate, _: &ScoreContext) -> Score {
        let mut s = Score::new(0.0);
        let c = confidence_part(candidate, &mut s);
        s.value = if is_empty(candidate) { 0.0 } else { c };
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lane::Lane;
    use crate::request::Request;
    use std::sync::Arc;

    fn ctx() -> ScoreContext {
        ScoreContext {
            lane: Lane::Local,
            request: Arc::new(Request::user("q")),
        }
    }

    #[test]
    fn repetition_sees_loops_and_not_prose() {
        assert!(repetition(&"the cat sat ".repeat(20)) > 0.8);
        assert!(repetition("The quick brown fox jumps over the lazy dog.") < 0.01);
        assert_eq!(repetition("hi"), 0.0);
        assert!(repetition(&"ab".repeat(40)) > 0.8);
    }

    #[test]
    fn refusals_are_recognised() {
        assert!(is_refusal("I’m sorry, but I can’t help with that."));
        assert!(is_refusal("  As an AI language model, ..."));
        assert!(!is_refusal("Sure! Paris is the capital of France."));
    }

    #[test]
    fn signal_scorer_scores_in_the_signals_units() {
        let mut c =
            Candidate::new("Paris", FinishReason::Stop).with_logprobs(vec![-0.5, -1.5, -0.1]);
        c.signals.as_mut().unwrap().first_token_margin = Some(0.75);
        let s = SignalScorer(Signal::P10Logprob).score(&c, &ctx());
        assert_eq!(s.value, -1.5f32 as f64);
        assert_eq!(s.signals["first_token_margin"], 0.75);
        assert_eq!(s.signals.len(), 6);
        let w = SignalScorer(Signal::MinWindowLogprob).score(&c, &ctx());
        // Three tokens, fewer than the window: their mean.
        assert!((w.value - (-0.7)).abs() < 1e-6, "{w:?}");
        let m = SignalScorer(Signal::FirstTokenMargin).score(&c, &ctx());
        assert_eq!(m.value, 0.75);
        // No signal, or blank text: unscored (never passes a threshold).
        let bare = Candidate::new("Paris", FinishReason::Stop);
        assert!(!SignalScorer(Signal::MeanLogprob)
            .score(&bare, &ctx())
            .value
            .is_finite());
        let blank = Candidate::new(" ", FinishReason::Stop).with_logprobs(vec![-0.1]);
        assert!(!SignalScorer(Signal::MeanLogprob)
            .score(&blank, &ctx())
            .value
            .is_finite());
        for sig in Signal::ALL {
            assert_eq!(sig.as_str().parse::<Signal>(), Ok(sig));
        }
        assert!("p10-logprob".parse::<Signal>().is_ok());
        assert!("p5".parse::<Signal>().is_err());
    }

    #[test]
    fn windowed_confidence_finds_the_dip_and_the_tail() {
        // 40 sure tokens with a 16-token dip (-2.0) in the middle, then a
        // sure ending.
        let mut lp = vec![-0.1f32; 40];
        for x in &mut lp[10..26] {
            *x = -2.0;
        }
        assert!((lowest_window_mean(&lp, 16).unwrap() - -2.0).abs() < 1e-6);
        // A window of 4 over [-1, -3, -3, -1, 0, 0]: lowest is the first
        // four (-8/4).
        assert_eq!(
            lowest_window_mean(&[-1.0, -3.0, -3.0, -1.0, 0.0, 0.0], 4),
            Some(-2.0)
        );
        // Fewer values than the window: the mean; non-finite ignored.
        assert_eq!(
            lowest_window_mean(&[-1.0, f32::NEG_INFINITY, -3.0], 16),
            Some(-2.0)
        );
        assert_eq!(lowest_window_mean(&[], 16), None);
        assert_eq!(lowest_window_mean(&[f32::NAN], 16), None);
        // The tail: the last n values.
        assert_eq!(tail_mean(&[-5.0, -1.0, -3.0], 2), Some(-2.0));
        assert_eq!(tail_mean(&[-1.0, -3.0], 32), Some(-2.0));
        assert_eq!(tail_mean(&[], 32), None);
        // A trace unsure at its end: the whole-answer mean hides it, the
        // tail shows it.
        let mut end = vec![-0.05f32; 200];
        for x in &mut end[168..] {
            *x = -1.5;
        }
        let c = Candidate::new("... The answer is 7.", FinishReason::Stop).with_logprobs(end);
        let tail = Signal::TailLogprob.of(&c).unwrap();
        assert!((tail - -1.5).abs() < 1e-6, "{tail}");
        assert!(Signal::MeanLogprob.of(&c).unwrap() > -0.3);
        assert!((Signal::MinWindowLogprob.of(&c).unwrap() - -1.5).abs() < 1e-6);
        assert_eq!(
            "min-window-logprob".parse::<Signal>(),
            Ok(Signal::MinWindowLogprob)
        );
    }

    #[test]
    fn running_signals_bound_the_finished_value_and_end_on_it() {
        assert!(RunningSignal::new(Signal::MeanLogprob).is_none());
        assert!(RunningSignal::new(Signal::AnswerAgreement).is_none());
        let mut x = 7u64;
        let lp: Vec<f32> = (0..90)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if i == 40 {
                    f32::NEG_INFINITY
                } else {
                    -((x % 300) as f32) / 100.0
                }
            })
            .collect();
        for sig in [Signal::MinLogprob, Signal::MinWindowLogprob] {
            let mut r = RunningSignal::new(sig).unwrap();
            let mut last = None;
            for n in 1..=lp.len() {
                let bound = r.push(lp[n - 1]);
                let finished = sig
                    .of_signals(&TokenSignals::from_logprobs(lp[..n].to_vec()))
                    .unwrap();
                if let Some(b) = bound {
                    // Never above what the answer so far gives, and never
                    // rising.
                    assert!(
                        (b - finished).abs() < 1e-9,
                        "{sig} n={n}: {b} vs {finished}"
                    );
                    assert!(last.is_none_or(|l: f64| b <= l));
                    last = Some(b);
                } else {
                    assert!(sig == Signal::MinWindowLogprob && n < CONFIDENCE_WINDOW);
                }
            }
        }
    }

    #[test]
    fn default_score_follows_the_formula() {
        let sure = Candidate::new("Paris is the capital.", FinishReason::Stop)
            .with_logprobs(vec![-0.1, -0.1, -0.1]);
        let unsure = Candidate::new("Paris is the capital.", FinishReason::Stop)
            .with_logprobs(vec![-3.0, -3.0, -3.0]);
        let s = DefaultScorer.score(&sure, &ctx());
        assert!((s.value - (-0.1f64).exp()).abs() < 1e-6, "{s:?}");
        assert!(s.value > DefaultScorer.score(&unsure, &ctx()).value);
        assert!((s.signals["perplexity"] - 0.1f64.exp()).abs() < 1e-6);
        let cut = Candidate::new("Paris is the capital.", FinishReason::Length);
        assert_eq!(DefaultScorer.score(&cut, &ctx()).value, TRUNCATION_FACTOR);
        let blank = Candidate::new(" ", FinishReason::Stop).with_logprobs(vec![-0.1]);
        assert_eq!(DefaultScorer.score(&blank, &ctx()).value, 0.0);
        let no = Candidate::new("I cannot do that.", FinishReason::Stop);
        assert_eq!(GenericScorer.score(&no, &ctx()).value, REFUSAL_FACTOR);
        assert_eq!(
            ConfidenceScorer
                .score(&Candidate::new("x", FinishReason::Stop), &ctx())
                .value,
            1.0
        );
    }
}
