//! What every lane shares: the lane names, one job's inputs, how a
//! generation finished, and the token sink. Lanes build on this; the harness
//! speaks only this vocabulary to them.

use crate::request::{ChatMessage, Sampling};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Instant;
pub use tokio_util::sync::CancellationToken;

/// One of the two engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// The in-process llama.cpp model.
    Local,
    /// The OpenAI-compatible HTTP endpoint.
    Cloud,
}

impl Lane {
    /// Both lanes, local first: the order of every per-lane listing.
    pub const ALL: [Lane; 2] = [Lane::Local, Lane::Cloud];

    /// The other lane.
    pub fn other(self) -> Lane {
        match self {
            Lane::Local => Lane::Cloud,
            Lane::Cloud => Lane::Local,
        }
    }

    /// Lower-case name, as in reports and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Local => "local",
            Lane::Cloud => "cloud",
        }
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value per lane, indexed by [`Lane`]: `per_lane[Lane::Cloud]`.
///
/// Replaces two-element arrays and index helpers, so a lane can never be
/// looked up at the wrong position.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PerLane<T> {
    /// The local lane's value.
    pub local: T,
    /// The cloud lane's value.
    pub cloud: T,
}

impl<T> PerLane<T> {
    /// Both values.
    pub const fn new(local: T, cloud: T) -> Self {
        Self { local, cloud }
    }

    /// Builds each lane's value from the lane.
    pub fn from_fn(mut f: impl FnMut(Lane) -> T) -> Self {
        Self {
            local: f(Lane::Local),
            cloud: f(Lane::Cloud),
        }
    }

    /// Each lane with its value, in [`Lane::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Lane, &T)> {
        [(Lane::Local, &self.local), (Lane::Cloud, &self.cloud)].into_iter()
    }

    /// Each lane with its value, mutably, in [`Lane::ALL`] order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Lane, &mut T)> {
        [
            (Lane::Local, &mut self.local),
            (Lane::Cloud, &mut self.cloud),
        ]
        .into_iter()
    }

    /// The values, in [`Lane::ALL`] order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        [&self.local, &self.cloud].into_iter()
    }

    /// The values, mutably, in [`Lane::ALL`] order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        [&mut self.local, &mut self.cloud].into_iter()
    }

    /// A new value per lane from each lane and its value.
    pub fn map<U>(self, mut f: impl FnMut(Lane, T) -> U) -> PerLane<U> {
        PerLane {
            local: f(Lane::Local, self.local),
            cloud: f(Lane::Cloud, self.cloud),
        }
    }

    /// Borrows each value.
    pub fn as_ref(&self) -> PerLane<&T> {
        PerLane {
            local: &self.local,
            cloud: &self.cloud,
        }
    }
}

impl<T> std::ops::Index<Lane> for PerLane<T> {
    type Output = T;
    fn index(&self, lane: Lane) -> &T {
        match lane {
            Lane::Local => &self.local,
            Lane::Cloud => &self.cloud,
        }
    }
}

impl<T> std::ops::IndexMut<Lane> for PerLane<T> {
    fn index_mut(&mut self, lane: Lane) -> &mut T {
        match lane {
            Lane::Local => &mut self.local,
            Lane::Cloud => &mut self.cloud,
        }
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model ended its answer or a stop string matched.
    Stop,
    /// `max_tokens` was reached.
    Length,
    /// The job's cancellation token fired; the text is partial.
    Cancelled,
    /// The job's deadline passed; the text is partial.
    Deadline,
}

impl FinishReason {
    /// Snake-case name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Deadline => "deadline",
        }
    }

    /// True when the answer is whole (not cut by cancellation or deadline).
    pub fn is_complete(self) -> bool {
        matches!(self, FinishReason::Stop | FinishReason::Length)
    }
}

/// One generated token's log-probability and the most likely tokens at
/// its position: OpenAI's `logprobs.content[]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    /// The token's text (lossy where it holds part of a UTF-8 character).
    pub token: String,
    /// Its log-probability (natural log).
    pub logprob: f32,
    /// Its bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Vec<u8>>,
    /// The most likely tokens at this position, most likely first.
    #[serde(default)]
    pub top_logprobs: Vec<TopLogprob>,
}

/// One of the most likely tokens at a position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    /// The token's text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Vec<u8>>,
}

/// Receives text as a lane produces it. Every call carries valid UTF-8 that
/// continues the previous one; the concatenation is the completion's text.
pub type TokenSink = Box<dyn FnMut(&str) + Send + 'static>;

/// Receives the log-probability of each token a lane samples, as it
/// samples it (see [`LaneJob::on_logprob`]).
pub type LogprobSink = Box<dyn FnMut(f32) + Send + 'static>;

/// Receives what the lane knows of the prompt before it generates (see
/// [`LaneJob::on_prompt_score`]).
pub type PromptScoreSink = Box<dyn FnOnce(PromptScore) + Send + 'static>;

/// What a lane reports of a prompt before it generates: what a two-stage
/// cascade's first stage reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PromptScore {
    /// The prompt's length in tokens, chat template applied.
    pub tokens: u32,
    /// The mean log-probability of the prompt's own tokens, for a job
    /// that scored its prompt ([`Sampling::score_prompt`]); `None`: the
    /// report came before the prompt pass.
    pub logprob: Option<f32>,
}

/// One request for one lane: what to generate, and until when.
pub struct LaneJob {
    /// The conversation, oldest first.
    pub messages: Vec<ChatMessage>,
    /// How to sample.
    pub sampling: Sampling,
    /// Absolute instant after which the lane stops and returns what it has.
    pub deadline: Instant,
    /// Fired by whoever owns the run; the lane stops as soon as it can.
    pub cancel: CancellationToken,
    /// Optional streaming sink: the answer's text as it is generated.
    pub on_token: Option<TokenSink>,
    /// Optional streaming sink for a reasoning model's thinking (see
    /// [`crate::reasoning`]): a lane that splits thinking from answer
    /// hands the thinking here and only the answer to `on_token`. With
    /// no reasoning sink set, a lane drops the thinking from the stream
    /// (the candidate still carries it).
    pub on_reasoning: Option<TokenSink>,
    /// Optional sink for each sampled token's log-probability under the
    /// raw model distribution, in order, as the answer is generated: how a
    /// cascade reads a confidence before the answer is finished. Lanes
    /// that have no log-probabilities (the cloud lane) never call it, nor
    /// does the local lane for a consensus job (its answer is known only
    /// at the end).
    pub on_logprob: Option<LogprobSink>,
    /// Optional sink for what the lane knows of the prompt, called once
    /// before the first answer token: how a two-stage cascade routes
    /// before the local lane generates. Only the local lane calls it: for
    /// a job with [`Sampling::score_prompt`], when the prompt pass is done
    /// (with the prompt's mean token log-probability, for a prompt of two
    /// tokens or more); otherwise as soon as the prompt is tokenized,
    /// before any of it is decoded (its length only).
    pub on_prompt_score: Option<PromptScoreSink>,
    /// The lane's admission slot, if the caller holds one. The lane drops it
    /// when the work really ends (on every path) and *before* it hands back
    /// the result, so a caller that has the result can admit the next job.
    pub permit: Option<LanePermit>,
    /// The model a lane that reaches several by name should answer with
    /// (the cloud lane sends it as the request's `model`): a route's
    /// `cloud_model`. `None`: the lane's configured model. A local lane
    /// holds one model and ignores it.
    pub model: Option<String>,
}

/// Anything whose drop releases a lane slot (a semaphore permit, a guard).
pub type LanePermit = Box<dyn std::any::Any + Send + 'static>;

impl LaneJob {
    /// A job with no streaming sink and a fresh cancellation token.
    pub fn new(messages: Vec<ChatMessage>, sampling: Sampling, deadline: Instant) -> Self {
        Self {
            messages,
            sampling,
            deadline,
            cancel: CancellationToken::new(),
            on_token: None,
            on_reasoning: None,
            on_logprob: None,
            on_prompt_score: None,
            permit: None,
            model: None,
        }
    }

    /// Names the model the lane should answer with; see [`LaneJob::model`].
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Hands the lane's admission slot to the job; see [`LaneJob::permit`].
    pub fn with_permit(mut self, permit: impl std::any::Any + Send + 'static) -> Self {
        self.permit = Some(Box::new(permit));
        self
    }

    /// Sets the streaming sink.
    pub fn with_sink(mut self, sink: impl FnMut(&str) + Send + 'static) -> Self {
        self.on_token = Some(Box::new(sink));
        self
    }

    /// Sets the reasoning sink; see [`LaneJob::on_reasoning`].
    pub fn with_reasoning_sink(mut self, sink: impl FnMut(&str) + Send + 'static) -> Self {
        self.on_reasoning = Some(Box::new(sink));
        self
    }

    /// Hands one streamed part to its sink: answer text to `on_token`,
    /// thinking to `on_reasoning` (empty text goes nowhere).
    pub fn emit(&mut self, part: crate::reasoning::Part<'_>) {
        use crate::reasoning::Part;
        let (sink, text) = match part {
            Part::Answer(t) => (self.on_token.as_mut(), t),
            Part::Reasoning(t) => (self.on_reasoning.as_mut(), t),
        };
        if let Some(sink) = sink.filter(|_| !text.is_empty()) {
            sink(text);
        }
    }

    /// Sets the log-probability sink; see [`LaneJob::on_logprob`].
    pub fn with_logprob_sink(mut self, sink: impl FnMut(f32) + Send + 'static) -> Self {
        self.on_logprob = Some(Box::new(sink));
        self
    }

    /// Sets the prompt-score sink; see [`LaneJob::on_prompt_score`].
    pub fn with_prompt_score_sink(
        mut self,
        sink: impl FnOnce(PromptScore) + Send + 'static,
    ) -> Self {
        self.on_prompt_score = Some(Box::new(sink));
        self
    }

    /// Uses the given cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Whether the job should stop now, and why.
    pub fn stop_reason(&self) -> Option<FinishReason> {
        if self.cancel.is_cancelled() {
            Some(FinishReason::Cancelled)
        } else if Instant::now() >= self.deadline {
            Some(FinishReason::Deadline)
        } else {
            None
        }
    }
}

impl fmt::Debug for LaneJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaneJob")
            .field("messages", &self.messages.len())
            .field("sampling", &self.sampling)
            .field("deadline", &self.deadline)
            .field("cancelled", &self.cancel.is_cancelled())
            .field("streaming", &self.on_token.is_some())
            .field("streaming_reasoning", &self.on_reasoning.is_some())
            .field("watching_logprobs", &self.on_logprob.is_some())
            .field("watching_prompt_score", &self.on_prompt_score.is_some())
            .field("holds_permit", &self.permit.is_some())
            .field("model", &self.model)
            .finish()
    }
}
