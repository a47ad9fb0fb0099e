//! User callbacks: the traits ([`PreScore`], [`Compressor`], [`Scorer`],
//! [`Arbiter`]) with blanket impls for closures, and the one way the harness
//! calls them: off the run's task, on a blocking thread, timed, with panics
//! caught. This module must not decide what a result means for the run;
//! the decision core (`decision`) does.
//!
//! Why a blocking thread: a callback is plain synchronous code of unknown
//! cost. Running it beside the run's task, not inside it, keeps every wait
//! of the run bounded by the deadline (docs/DESIGN.md point 1): the run's
//! task awaits the callback's result *or* the deadline, whichever comes first. A
//! callback still running at settlement is abandoned (its thread finishes on
//! its own; nothing waits for it) and reported `timed_out`. No harness lock
//! is held while any callback runs.

use super::backend::Candidate;
use crate::lane::Lane;
use crate::request::{ChatMessage, Request};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Callbacks registered by name, so a config file can refer to them.
#[derive(Default, Clone)]
pub(crate) struct Named {
    pub(crate) pre_score: HashMap<String, Arc<dyn PreScore>>,
    pub(crate) compressor: HashMap<String, Arc<dyn Compressor>>,
    pub(crate) scorer: HashMap<String, Arc<dyn Scorer>>,
    pub(crate) arbiter: HashMap<String, Arc<dyn Arbiter>>,
}

/// What a [`PreScore`] callback decided about the cloud lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloudNeed {
    /// Use the cloud lane as the policy says.
    Needed,
    /// Do not start the cloud lane for this request (reported `skipped`).
    NotNeeded,
}

impl From<bool> for CloudNeed {
    /// `true` means the cloud is needed.
    fn from(needed: bool) -> Self {
        if needed {
            CloudNeed::Needed
        } else {
            CloudNeed::NotNeeded
        }
    }
}

/// Decides before inference whether a request needs the cloud lane at all
/// (a deterministic intent such as "turn on the heater" does not).
///
/// Consulted by policies that use both lanes; `cloud-only` never asks.
/// Default on panic or when it does not answer by the deadline: the cloud
/// is needed (the policy runs as configured).
pub trait PreScore: Send + Sync + 'static {
    /// Whether the cloud lane should run for `request`.
    fn cloud_needed(&self, request: &Request) -> CloudNeed;
}

impl<F, R> PreScore for F
where
    F: Fn(&Request) -> R + Send + Sync + 'static,
    R: Into<CloudNeed>,
{
    fn cloud_needed(&self, request: &Request) -> CloudNeed {
        self(request).into()
    }
}

/// A compressed prompt, with the compressor's own token estimates
/// (reported apart from provider and tokenizer counts, docs/DESIGN.md point 9).
#[derive(Debug, Clone, PartialEq)]
pub struct Compressed {
    /// What the cloud lane receives.
    pub messages: Vec<ChatMessage>,
    /// Estimated prompt tokens before compression.
    pub tokens_before: Option<u64>,
    /// Estimated prompt tokens after compression.
    pub tokens_after: Option<u64>,
}

impl From<Vec<ChatMessage>> for Compressed {
    fn from(messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            tokens_before: None,
            tokens_after: None,
        }
    }
}

/// Shrinks what is sent to the cloud lane. The local lane always gets the
/// request as given (its context is the user's choice; prefix reuse likes
/// stable prompts).
///
/// Default on panic, on an empty result, or when it does not answer by the
/// deadline: the cloud lane gets the messages uncompressed (and, for the
/// deadline case, is not started, since the run is over).
pub trait Compressor: Send + Sync + 'static {
    /// The messages to send instead of `messages`.
    fn compress(&self, messages: &[ChatMessage]) -> Compressed;
}

impl<F, R> Compressor for F
where
    F: Fn(&[ChatMessage]) -> R + Send + Sync + 'static,
    R: Into<Compressed>,
{
    fn compress(&self, messages: &[ChatMessage]) -> Compressed {
        self(messages).into()
    }
}

/// A candidate's score: higher is better. Built-in scorers stay in
/// `[0, 1]`; thresholds are compared with `>=`. `signals` explains the
/// figure (e.g. `mean_logprob`, `repetition`) and is carried to the
/// outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The score.
    pub value: f64,
    /// Named components, for people reading the outcome.
    #[serde(default)]
    pub signals: BTreeMap<String, f64>,
}

impl Score {
    /// A score with no explanation.
    pub fn new(value: f64) -> Self {
        Self {
            value,
            signals: BTreeMap::new(),
        }
    }

    /// Adds a named component.
    pub fn with_signal(mut self, name: impl Into<String>, value: f64) -> Self {
        self.signals.insert(name.into(), value);
        self
    }
}

impl From<f64> for Score {
    fn from(value: f64) -> Self {
        Score::new(value)
    }
}

/// What a scorer knows besides the candidate.
#[derive(Debug, Clone)]
pub struct ScoreContext {
    /// The lane that produced the candidate.
    pub lane: Lane,
    /// The request as the caller gave it (before compression).
    pub request: Arc<Request>,
}

/// Rates a finished candidate. Same rules for every lane: no lane gets a
/// hard-coded score.
///
/// Default on panic, on a non-finite value, or when it does not answer by
/// the deadline: the candidate is unscored (`score: null`). An unscored
/// candidate never passes a threshold (so `cascade` escalates) but can still
/// win where no threshold applies.
pub trait Scorer: Send + Sync + 'static {
    /// The candidate's score.
    fn score(&self, candidate: &Candidate, context: &ScoreContext) -> Score;
}

impl<F, R> Scorer for F
where
    F: Fn(&Candidate, &ScoreContext) -> R + Send + Sync + 'static,
    R: Into<Score>,
{
    fn score(&self, candidate: &Candidate, context: &ScoreContext) -> Score {
        self(candidate, context).into()
    }
}

/// A finished candidate with its score, as an [`Arbiter`] sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    /// The lane that produced it.
    pub lane: Lane,
    /// The completion.
    pub candidate: Candidate,
    /// Its score, if the scorer gave one.
    pub score: Option<Score>,
    /// When it finished, counted from the run's start.
    #[serde(with = "crate::millis::required")]
    pub finished_after: Duration,
}

/// Picks the winner among scored candidates (`best-of`, and any policy that
/// ends with several usable candidates but none acceptable).
///
/// Return the index of the winner, or `None` to reject them all (the run
/// then fails with "arbiter rejected every candidate"). Default on panic, on
/// an index out of range, or when it does not answer by the deadline: the
/// built-in rule ([`pick_highest`](super::arbitration::pick_highest)).
pub trait Arbiter: Send + Sync + 'static {
    /// Index of the winner in `candidates`, or `None`.
    fn pick(&self, candidates: &[Scored]) -> Option<usize>;
}

impl<F> Arbiter for F
where
    F: Fn(&[Scored]) -> Option<usize> + Send + Sync + 'static,
{
    fn pick(&self, candidates: &[Scored]) -> Option<usize> {
        self(candidates)
    }
}

/// Which callback a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallbackKind {
    /// The [`PreScore`] callback.
    PreScore,
    /// The [`Compressor`].
    Compress,
    /// The [`Scorer`].
    Score,
    /// The [`Arbiter`].
    Arbitrate,
}

impl CallbackKind {
    /// Snake-case name, as in JSON and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackKind::PreScore => "pre_score",
            CallbackKind::Compress => "compress",
            CallbackKind::Score => "score",
            CallbackKind::Arbitrate => "arbitrate",
        }
    }
}

/// How a callback call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallbackStatus {
    /// It returned a usable value.
    Ok,
    /// It panicked; the documented default was used.
    Panicked,
    /// It returned something unusable (non-finite score, index out of
    /// range, empty message list); the documented default was used.
    Invalid,
    /// It had not returned when the run settled; it was abandoned.
    TimedOut,
}

/// One callback call, timed (docs/DESIGN.md point 6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallbackReport {
    /// Which callback.
    pub kind: CallbackKind,
    /// The lane it was about, if any.
    pub lane: Option<Lane>,
    /// Time inside the callback (for `timed_out`: until settlement).
    pub elapsed_ms: f64,
    /// How it ended.
    pub status: CallbackStatus,
    /// Whether it took longer than the configured budget (a `tracing`
    /// warning was emitted).
    pub over_budget: bool,
    /// The panic message or what was invalid.
    pub detail: Option<String>,
}

/// The raw result of one offloaded call: the value or the panic message,
/// and the time spent inside the callback.
pub(crate) struct CallResult<T> {
    pub(crate) value: Result<T, String>,
    pub(crate) elapsed: Duration,
}

/// Runs `f` on the runtime's blocking pool with its panic caught and its
/// time measured inside the thread (so queueing is not billed to the
/// callback).
pub(crate) fn offload<T, F>(
    handle: &tokio::runtime::Handle,
    f: F,
) -> tokio::task::JoinHandle<CallResult<T>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    handle.spawn_blocking(move || {
        let started = Instant::now();
        let value =
            catch_unwind(AssertUnwindSafe(f)).map_err(|p| crate::panic_payload::message(&*p));
        CallResult {
            value,
            elapsed: started.elapsed(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lane::FinishReason;

    #[test]
    fn closures_are_callbacks() {
        let s: Arc<dyn Scorer> = Arc::new(|c: &Candidate, _: &ScoreContext| c.text.len() as f64);
        let ctx = ScoreContext {
            lane: Lane::Local,
            request: Arc::new(Request::user("q")),
        };
        assert_eq!(
            s.score(&Candidate::new("abc", FinishReason::Stop), &ctx)
                .value,
            3.0
        );
        let p: Arc<dyn PreScore> = Arc::new(|r: &Request| r.messages.len() > 1);
        assert_eq!(p.cloud_needed(&Request::user("q")), CloudNeed::NotNeeded);
        let a: Arc<dyn Arbiter> = Arc::new(|c: &[Scored]| c.len().checked_sub(1));
        assert_eq!(a.pick(&[]), None);
        let c: Arc<dyn Compressor> = Arc::new(|m: &[ChatMessage]| m[..1].to_vec());
        assert_eq!(c.compress(&[ChatMessage::user("a")]).messages.len(), 1);
    }

    #[test]
    fn offload_catches_panics_and_times_the_call() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime builds");
        let r = rt.block_on(offload(rt.handle(), || -> u32 { panic!("boom") }));
        let r = r.expect("the blocking task itself does not panic");
        assert_eq!(r.value, Err("boom".to_string()));
        let r = rt
            .block_on(offload(rt.handle(), || 7))
            .expect("the blocking task itself does not panic");
        assert_eq!(r.value, Ok(7));
    }
}
