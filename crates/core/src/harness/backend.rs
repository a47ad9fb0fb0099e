//! What the harness asks of an engine: the [`Backend`] trait, and the
//! unified [`Candidate`] every lane hands back. Adapters for the real lanes
//! live in `adapters`; this module must not know about llama.cpp or HTTP.

use super::availability::{Availability, LaneHealth};
use crate::lane::{FinishReason, LaneJob, TokenLogprob};
use crate::tools::ToolCall;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// The future a [`Backend`] returns for one job. It owns everything it uses
/// (`'static`), so a late worker can outlive its run and the harness.
pub type BackendFuture =
    Pin<Box<dyn Future<Output = Result<Candidate, BackendError>> + Send + 'static>>;

/// An engine the harness can put on a lane: the local llama.cpp lane, the
/// cloud lane, or anything a user writes (a test double, another runtime).
///
/// The harness calls [`Backend::run`] only while it holds the lane's slot,
/// and puts that slot in [`LaneJob::permit`]. A backend must drop the job's
/// permit when its work really ends (dropping the job does it), and should
/// stop soon after [`LaneJob::cancel`] fires or [`LaneJob::deadline`]
/// passes, returning `Ok` with [`FinishReason::Cancelled`] or
/// [`FinishReason::Deadline`] and whatever text it has. The harness never
/// drops a running backend future early: a backend that ignores the token
/// is never forcibly interrupted; it just keeps its lane busy until it
/// returns.
///
/// The lane stays busy until both the returned future has completed and
/// the job's permit is dropped. Work that outlives the future (a thread of
/// the backend's own) must therefore keep the whole job, or at least its
/// permit, until it ends. Beware: an `async move` block that names only
/// `job.cancel` captures just that field (edition 2021 disjoint captures)
/// and drops the rest of the job, permit included, when the future is
/// created; write `let job = job;` first when the job must live on.
pub trait Backend: Send + Sync + 'static {
    /// What this backend is, for reports and diagnostics.
    fn info(&self) -> BackendInfo;

    /// Whether the backend stops when the job's cancellation token fires.
    /// A backend that returns `false` is reported as
    /// [`CancelResult::NotPropagated`](crate::harness::CancelResult) when a
    /// run tries to cancel it, and the run does not wait for it to stop.
    fn observes_cancellation(&self) -> bool {
        true
    }

    /// Starts one job. The returned future runs on the harness's runtime.
    fn run(&self, job: LaneJob) -> BackendFuture;

    /// Whether the engine can take a job now. The harness asks at
    /// admission, while it holds the lane's slot, and right before
    /// [`Backend::run`]; [`Availability::Down`] leaves the lane out of the
    /// run at once (reported `unavailable`), like a busy lane. Answering
    /// [`Availability::Probe`] promises that the job about to run will
    /// tell the backend whether it is back. Default: always ready.
    fn availability(&self) -> Availability {
        Availability::Ready
    }

    /// The engine's reachability at a glance, when it tracks one (no side
    /// effects). Default: `None`.
    fn health(&self) -> Option<LaneHealth> {
        None
    }
}

/// A backend's description.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendInfo {
    /// Short name, e.g. `llama.cpp` or `openai-compatible`.
    pub name: String,
    /// The model it runs, when it knows.
    pub model: Option<String>,
    /// How long loading took (local models), when it applies.
    #[serde(with = "crate::millis::optional", default)]
    pub load_time: Option<Duration>,
    /// Where it computes, when it says: the local lane's
    /// `31/31 layers on Vulkan0 (llvmpipe ...)` or `none (CPU)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

impl BackendInfo {
    /// A description with just a name.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }
}

/// Token counts, kept apart by where they come from (docs/DESIGN.md point 9): a
/// provider's report, the local tokenizer's count, and a compressor's
/// estimate are different figures and are never mixed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    /// Prompt tokens as the cloud provider reported them.
    pub provider_prompt: Option<u64>,
    /// Completion tokens as the cloud provider reported them.
    pub provider_completion: Option<u64>,
    /// Total tokens as the cloud provider reported them.
    pub provider_total: Option<u64>,
    /// Of the prompt tokens, those the provider served from its prompt
    /// cache, when it reported them (priced at `cached_input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_cached_prompt: Option<u64>,
    /// Prompt tokens counted by the local model's tokenizer.
    pub local_prompt: Option<u64>,
    /// Prompt tokens reused from the local context (not decoded again).
    pub local_reused_prompt: Option<u64>,
    /// Completion tokens counted by the local model's tokenizer.
    pub local_completion: Option<u64>,
    /// Of `local_completion`, the tokens of a reasoning model's thinking
    /// (see [`crate::reasoning`]); `None` when it did not think.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_reasoning: Option<u64>,
    /// Of `provider_completion`, the reasoning tokens as the provider
    /// reported them (`completion_tokens_details.reasoning_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_reasoning: Option<u64>,
    /// Tokens the local lane sampled for this answer over all its samples
    /// (a consensus of k samples; `local_completion` is the chosen
    /// sample's): what the answer cost the device.
    #[serde(default)]
    pub local_sampled: Option<u64>,
    /// The prompt before compression, as the compressor estimated it.
    pub compressor_before: Option<u64>,
    /// The prompt after compression, as the compressor estimated it.
    pub compressor_after: Option<u64>,
}

impl TokenCounts {
    /// The prompt size from the most authoritative source that has one:
    /// the provider, then the local tokenizer. Never a compressor estimate.
    pub fn prompt(&self) -> Option<u64> {
        self.provider_prompt.or(self.local_prompt)
    }

    /// The completion size: provider, then local tokenizer.
    pub fn completion(&self) -> Option<u64> {
        self.provider_completion.or(self.local_completion)
    }
}

/// Timings a backend measured itself. All optional: each engine knows
/// different things. The harness measures its own wall times separately
/// (see [`LaneReport`](crate::harness::LaneReport)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Connection set-up (cloud).
    #[serde(with = "crate::millis::optional", default)]
    pub connect: Option<Duration>,
    /// Time to the first response byte (cloud).
    #[serde(with = "crate::millis::optional", default)]
    pub ttfb: Option<Duration>,
    /// Time to the first generated token.
    #[serde(with = "crate::millis::optional", default)]
    pub ttft: Option<Duration>,
    /// Prompt processing (local).
    #[serde(with = "crate::millis::optional", default)]
    pub prompt_eval: Option<Duration>,
    /// Prompt tokens per second (local).
    pub prompt_tokens_per_s: Option<f64>,
    /// Generation after the first token (local).
    #[serde(with = "crate::millis::optional", default)]
    pub generation: Option<Duration>,
    /// Generated tokens per second (local).
    pub gen_tokens_per_s: Option<f64>,
    /// The whole job, as the backend measured it.
    #[serde(with = "crate::millis::optional", default)]
    pub total: Option<Duration>,
    /// Tokens drafted and verified by speculative decoding (local, when
    /// it is on; llama-server's `draft_n`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n: Option<u32>,
    /// Of those, the tokens kept (`draft_n_accepted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n_accepted: Option<u32>,
}

/// Per-token log-probabilities a backend exposes (the local lane always;
/// a cloud provider when asked), and the confidence signals made of them.
/// Built-in scorers read these (see [`Signal`](super::scoring::Signal)).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenSignals {
    /// Log-probability of each generated token.
    pub token_logprobs: Vec<f32>,
    /// Mean of `token_logprobs`.
    pub mean_logprob: Option<f32>,
    /// Minimum of `token_logprobs`.
    pub min_logprob: Option<f32>,
    /// 10th percentile of `token_logprobs` (nearest rank: the value at
    /// rank ceil(0.1 n) of the sorted values; the minimum under 10 tokens).
    #[serde(default)]
    pub p10_logprob: Option<f32>,
    /// The first generated position's top-1 minus top-2 probability, in
    /// `[0, 1]` (needs the whole distribution: the local lane has it).
    #[serde(default)]
    pub first_token_margin: Option<f32>,
    /// The share of k samples of the same request whose answers agree with
    /// the majority, in `[0, 1]` (a consensus job of the local lane).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreement: Option<f32>,
    /// The mean log-probability of the prompt's tokens (a local job that
    /// scored its prompt: [`Sampling::score_prompt`](crate::request::Sampling::score_prompt)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprob: Option<f32>,
    /// The prompt's length in tokens, chat template applied (a local
    /// answer; the `prompt_brevity` signal is minus it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
}

impl TokenSignals {
    /// Signals from per-token log-probabilities, with mean, minimum and
    /// 10th percentile computed (non-finite values are ignored for all
    /// three); no first-token margin.
    pub fn from_logprobs(token_logprobs: Vec<f32>) -> Self {
        let finite: Vec<f32> = token_logprobs
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .collect();
        let mean = (!finite.is_empty()).then(|| {
            (finite.iter().map(|v| f64::from(*v)).sum::<f64>() / finite.len() as f64) as f32
        });
        let min = finite.iter().copied().reduce(f32::min);
        let mut sorted = finite;
        sorted.sort_by(f32::total_cmp);
        let p10 = (!sorted.is_empty()).then(|| {
            let rank = ((0.1 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
            sorted[rank - 1]
        });
        Self {
            token_logprobs,
            mean_logprob: mean,
            min_logprob: min,
            p10_logprob: p10,
            first_token_margin: None,
            agreement: None,
            prompt_logprob: None,
            prompt_tokens: None,
        }
    }
}

/// One lane's finished completion and its signals: what scorers and
/// arbiters look at, and what the winner's outcome carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Candidate {
    /// The generated text: the answer (a reasoning model's thinking is in
    /// `reasoning`).
    pub text: String,
    /// A reasoning model's thinking, kept apart from the answer (see
    /// [`crate::reasoning`]): scorers, validity checks and arbiters judge
    /// `text` alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Why generation ended.
    pub finish_reason: FinishReason,
    /// Token counts by source.
    pub tokens: TokenCounts,
    /// Timings the backend measured.
    pub timings: Timings,
    /// Token log-probabilities, when the backend has them.
    pub signals: Option<TokenSignals>,
    /// HTTP status of the final response (cloud).
    pub http_status: Option<u16>,
    /// The tool calls the answer makes (then `text` may be empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Per-token log-probabilities with their alternatives, when the
    /// request asked for them (`Sampling::logprobs`) and the lane has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<TokenLogprob>>,
    /// The stop string (`Sampling::stop`) that ended the text, when one
    /// did and the lane knows which (the local lane does; an
    /// OpenAI-compatible provider does not say). Anthropic's Messages API
    /// reports it (`stop_sequence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequence: Option<String>,
}

impl Candidate {
    /// A candidate with only text and finish reason.
    pub fn new(text: impl Into<String>, finish_reason: FinishReason) -> Self {
        Self {
            text: text.into(),
            reasoning: None,
            finish_reason,
            tokens: TokenCounts::default(),
            timings: Timings::default(),
            signals: None,
            http_status: None,
            tool_calls: Vec::new(),
            logprobs: None,
            stop_sequence: None,
        }
    }

    /// Adds a reasoning model's thinking (empty thinking is none).
    pub fn with_reasoning(mut self, reasoning: Option<String>) -> Self {
        self.reasoning = reasoning.filter(|r| !r.is_empty());
        self
    }

    /// Adds tool calls.
    pub fn with_tool_calls(mut self, calls: Vec<ToolCall>) -> Self {
        self.tool_calls = calls;
        self
    }

    /// Adds token log-probabilities.
    pub fn with_logprobs(mut self, token_logprobs: Vec<f32>) -> Self {
        self.signals = Some(TokenSignals::from_logprobs(token_logprobs));
        self
    }

    /// True when the answer is whole and says something (text that is
    /// not blank, or a tool call): the least any policy needs before it
    /// can pick a candidate.
    pub fn is_usable(&self) -> bool {
        self.finish_reason.is_complete()
            && (!self.text.trim().is_empty() || !self.tool_calls.is_empty())
    }
}

/// What kind of failure a lane had: the classes a caller can act on
/// (retry later, fix the configuration, shorten the prompt, ...). The
/// backend's own error, with every detail, is the [`BackendError`]'s
/// `source()`. More kinds may come; match with a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LaneErrorKind {
    /// The request was refused before any work (bad sampling, a prompt
    /// longer than the context, ...).
    InvalidRequest,
    /// The prompt is longer than the lane's context (the local model's
    /// context size, or a provider's `context_length_exceeded`): another
    /// lane with a larger context may still take it.
    ContextLengthExceeded,
    /// The lane's configuration is wrong (bad URL, missing key, ...).
    Config,
    /// The model could not be loaded or run (file, template, context,
    /// decode).
    Model,
    /// The endpoint could not be reached (DNS, refused, connect timeout,
    /// TLS): the lane is likely down.
    Unreachable,
    /// The connection broke or stalled after it was made, or the answer
    /// was cut short.
    Transport,
    /// The endpoint refused the credentials (401, 403).
    Auth,
    /// The endpoint asked us to slow down (429).
    RateLimited,
    /// The endpoint failed (5xx).
    ServerError,
    /// The endpoint answered with another unexpected status (404, a
    /// redirect, ...).
    HttpStatus,
    /// The answer broke the protocol (malformed JSON, an error object, no
    /// choices, invalid UTF-8).
    Protocol,
    /// The answer exceeded a size cap (body, content, line, headers).
    TooLarge,
    /// The deadline passed before the lane had any answer.
    Deadline,
    /// The job was cancelled before the lane had any answer.
    Cancelled,
    /// The backend (or a sink it called) panicked.
    Panicked,
    /// The lane's worker is gone or could not start.
    Unavailable,
    /// Anything else (custom backends, tests).
    Other,
}

impl LaneErrorKind {
    /// Snake-case name, as in JSON and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            LaneErrorKind::InvalidRequest => "invalid_request",
            LaneErrorKind::ContextLengthExceeded => "context_length_exceeded",
            LaneErrorKind::Config => "config",
            LaneErrorKind::Model => "model",
            LaneErrorKind::Unreachable => "unreachable",
            LaneErrorKind::Transport => "transport",
            LaneErrorKind::Auth => "auth",
            LaneErrorKind::RateLimited => "rate_limited",
            LaneErrorKind::ServerError => "server_error",
            LaneErrorKind::HttpStatus => "http_status",
            LaneErrorKind::Protocol => "protocol",
            LaneErrorKind::TooLarge => "too_large",
            LaneErrorKind::Deadline => "deadline",
            LaneErrorKind::Cancelled => "cancelled",
            LaneErrorKind::Panicked => "panicked",
            LaneErrorKind::Unavailable => "unavailable",
            LaneErrorKind::Other => "other",
        }
    }
}

impl std::fmt::Display for LaneErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a backend could not produce a candidate: a typed [`kind`](Self::kind)
/// a program can act on, a message in the backend's own words, and the
/// backend's original error as [`source`](std::error::Error::source) (its
/// text is never parsed). Render the whole story with
/// [`error_chain`](fn@crate::error_chain); JSON carries the kind and that
/// chain as `message`.
#[derive(Clone)]
pub struct BackendError {
    kind: LaneErrorKind,
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

impl BackendError {
    /// An error of the given kind (never put a secret in the message).
    pub fn new(kind: LaneErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The same error with its cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Arc::new(source));
        self
    }

    /// What kind of failure it was.
    pub fn kind(&self) -> LaneErrorKind {
        self.kind
    }

    /// The backend's message, without its causes.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::fmt::Debug for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Equal when kind and whole message chain are: sources are compared by
/// what they say, since error types rarely implement `PartialEq`.
impl PartialEq for BackendError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && crate::error_chain(self) == crate::error_chain(other)
    }
}

#[derive(Serialize, Deserialize)]
struct BackendErrorJson {
    kind: LaneErrorKind,
    message: String,
}

impl Serialize for BackendError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        BackendErrorJson {
            kind: self.kind,
            message: crate::error_chain(self),
        }
        .serialize(s)
    }
}

/// Read back from JSON, the chain becomes the message (the source's type
/// is gone).
impl<'de> Deserialize<'de> for BackendError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let j = BackendErrorJson::deserialize(d)?;
        Ok(BackendError::new(j.kind, j.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_ignore_non_finite_values() {
        let s = TokenSignals::from_logprobs(vec![-1.0, f32::NEG_INFINITY, -3.0]);
        assert_eq!(s.mean_logprob, Some(-2.0));
        assert_eq!(s.min_logprob, Some(-3.0));
        assert_eq!(s.p10_logprob, Some(-3.0));
        assert_eq!(TokenSignals::from_logprobs(vec![]).mean_logprob, None);
        let many: Vec<f32> = (1..=20).map(|i| -(i as f32)).collect();
        assert_eq!(TokenSignals::from_logprobs(many).p10_logprob, Some(-19.0));
    }

    #[test]
    fn prompt_count_prefers_provider_then_local_never_estimate() {
        let t = TokenCounts {
            compressor_before: Some(99),
            local_prompt: Some(7),
            ..TokenCounts::default()
        };
        assert_eq!(t.prompt(), Some(7));
        let t = TokenCounts {
            provider_prompt: Some(5),
            ..t
        };
        assert_eq!(t.prompt(), Some(5));
        assert_eq!(TokenCounts::default().prompt(), None);
    }

    #[test]
    fn an_error_keeps_its_kind_and_cause_and_serializes_the_chain() {
        let cause = std::io::Error::other("connection refused");
        let e = BackendError::new(LaneErrorKind::Unreachable, "cloud request failed")
            .with_source(cause);
        assert_eq!(e.kind(), LaneErrorKind::Unreachable);
        assert_eq!(e.to_string(), "cloud request failed");
        assert!(std::error::Error::source(&e).is_some());
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["kind"], "unreachable");
        assert_eq!(json["message"], "cloud request failed: connection refused");
        let back: BackendError = serde_json::from_value(json).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn usable_needs_complete_non_blank_text() {
        assert!(Candidate::new("hi", FinishReason::Stop).is_usable());
        assert!(Candidate::new("hi", FinishReason::Length).is_usable());
        assert!(!Candidate::new("  ", FinishReason::Stop).is_usable());
        assert!(!Candidate::new("hi", FinishReason::Deadline).is_usable());
    }
}
