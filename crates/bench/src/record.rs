//! One benchmark run as a plain serde record ([`RunRecord`]): the line
//! format of `runs.jsonl`. It holds figures only; it must not compute
//! summaries (see `summary`) nor run anything.
//!
//! Times are milliseconds as floats. A lane's `ttft_ms` and `total_ms`
//! count from that lane's admission; the run's `elapsed_ms` and `ttft_ms`
//! count from the run's start, as the caller saw them.

use edgecloud_core::harness::{LaneErrorKind, Signal};
use edgecloud_core::lane::Lane;
use serde::{Deserialize, Serialize};

/// How a run ended, and what happened to each lane: the harness's own
/// statuses, recorded as they are.
pub use edgecloud_core::harness::{LaneStatus as LaneState, RunStatus};

/// One lane's part in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaneRecord {
    /// Which lane.
    pub lane: Lane,
    /// What happened to it.
    pub state: LaneState,
    /// Admission to its first token.
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    /// Admission to its return.
    #[serde(default)]
    pub total_ms: Option<f64>,
    /// Prompt tokens (provider's count, else the local tokenizer's).
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Prompt tokens the local lane reused from its context (not decoded).
    #[serde(default)]
    pub reused_prompt_tokens: Option<u64>,
    /// Completion tokens (provider's count, else the local tokenizer's).
    #[serde(default)]
    pub completion_tokens: Option<u64>,
    /// Tokens the local lane sampled over all samples of a consensus
    /// (absent for a single answer, where it is `completion_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_tokens: Option<u64>,
    /// Samples the local lane was asked for (a consensus; absent for one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u32>,
    /// Prompt processing speed the lane measured (local).
    #[serde(default)]
    pub prompt_tokens_per_s: Option<f64>,
    /// Generation speed the lane measured (local).
    #[serde(default)]
    pub gen_tokens_per_s: Option<f64>,
    /// Tokens drafted and verified by speculative decoding (local, when
    /// any were), and those kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n: Option<u32>,
    /// Of the drafted tokens, those kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n_accepted: Option<u32>,
    /// Prompt tokens the cloud provider reported (never estimated).
    #[serde(default)]
    pub provider_prompt_tokens: Option<u64>,
    /// Completion tokens the cloud provider reported (never estimated).
    #[serde(default)]
    pub provider_completion_tokens: Option<u64>,
    /// Its error, when it failed (the whole message chain).
    #[serde(default)]
    pub error: Option<String>,
    /// The error's typed kind, when it failed.
    #[serde(default)]
    pub error_kind: Option<LaneErrorKind>,
    /// Whether this lane's own answer was right (graded items only): its
    /// text graded for a completed lane, `false` for a lane that failed or
    /// was cut without another lane winning, absent for a lane that did
    /// not run or lost a race.
    #[serde(default)]
    pub correct: Option<bool>,
    /// Whether its whole answer met what the request asked for (JSON, a
    /// schema, a declared tool call): `false` when the run rejected it as
    /// invalid; absent when the request asks for free text or the lane
    /// gave no whole answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid: Option<bool>,
    /// The confidence signals of its answer (the local lane).
    #[serde(default)]
    pub signals: Option<LaneSignals>,
}

/// A lane answer's confidence signals, as recorded (see
/// [`Signal`](edgecloud_core::harness::Signal)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LaneSignals {
    /// Mean token log-probability.
    #[serde(default)]
    pub mean_logprob: Option<f64>,
    /// Lowest token log-probability.
    #[serde(default)]
    pub min_logprob: Option<f64>,
    /// 10th percentile of the token log-probabilities.
    #[serde(default)]
    pub p10_logprob: Option<f64>,
    /// The first token's top-1 minus top-2 probability.
    #[serde(default)]
    pub first_token_margin: Option<f64>,
    /// Lowest mean log-probability over a sliding window of tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_window_logprob: Option<f64>,
    /// Mean log-probability of the answer's last tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_logprob: Option<f64>,
    /// Share of the local samples agreeing with the majority answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_agreement: Option<f64>,
    /// Mean log-probability of the prompt's own tokens (prompt-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprob: Option<f64>,
    /// Minus the prompt's tokens (prompt-only; records written before it
    /// existed give it from the lane's `prompt_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_brevity: Option<f64>,
    /// Weighted share of the nearest calibration prompts the local model
    /// got right (prompt-only; computed by `bench calibrate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_neighbours: Option<f64>,
}

impl LaneSignals {
    /// One signal's value.
    pub fn get(&self, signal: Signal) -> Option<f64> {
        match signal {
            Signal::MeanLogprob => self.mean_logprob,
            Signal::MinLogprob => self.min_logprob,
            Signal::P10Logprob => self.p10_logprob,
            Signal::FirstTokenMargin => self.first_token_margin,
            Signal::MinWindowLogprob => self.min_window_logprob,
            Signal::TailLogprob => self.tail_logprob,
            Signal::AnswerAgreement => self.answer_agreement,
            Signal::PromptLogprob => self.prompt_logprob,
            Signal::PromptBrevity => self.prompt_brevity,
            Signal::PromptNeighbours => self.prompt_neighbours,
        }
        .filter(|v| v.is_finite())
    }

    /// Sets one signal's value.
    pub fn set(&mut self, signal: Signal, value: Option<f64>) {
        let slot = match signal {
            Signal::MeanLogprob => &mut self.mean_logprob,
            Signal::MinLogprob => &mut self.min_logprob,
            Signal::P10Logprob => &mut self.p10_logprob,
            Signal::FirstTokenMargin => &mut self.first_token_margin,
            Signal::MinWindowLogprob => &mut self.min_window_logprob,
            Signal::TailLogprob => &mut self.tail_logprob,
            Signal::AnswerAgreement => &mut self.answer_agreement,
            Signal::PromptLogprob => &mut self.prompt_logprob,
            Signal::PromptBrevity => &mut self.prompt_brevity,
            Signal::PromptNeighbours => &mut self.prompt_neighbours,
        };
        *slot = value.filter(|v| v.is_finite());
    }

    /// True when no signal is known.
    pub fn is_empty(&self) -> bool {
        Signal::ALL.iter().all(|s| self.get(*s).is_none())
    }
}

impl LaneRecord {
    /// A record with only the lane and its state.
    pub fn new(lane: Lane, state: LaneState) -> Self {
        Self {
            lane,
            state,
            ttft_ms: None,
            total_ms: None,
            prompt_tokens: None,
            reused_prompt_tokens: None,
            completion_tokens: None,
            sampled_tokens: None,
            samples: None,
            prompt_tokens_per_s: None,
            gen_tokens_per_s: None,
            draft_n: None,
            draft_n_accepted: None,
            provider_prompt_tokens: None,
            provider_completion_tokens: None,
            error: None,
            error_kind: None,
            correct: None,
            valid: None,
            signals: None,
        }
    }
}

/// Tokens a run did not send to the cloud thanks to a callback. These are
/// estimates and are kept apart from provider counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokensSaved {
    /// Prompt tokens the compressor removed (its own before/after
    /// estimates).
    #[serde(default)]
    pub compression: u64,
    /// Prompt tokens not sent because the pre-score callback skipped the
    /// cloud (the prompt size as the local tokenizer or the compressor
    /// counted it).
    #[serde(default)]
    pub pre_score: u64,
}

/// One run of one workload item under one policy and deadline: one line
/// of `runs.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// When the run (its wave, under `--concurrency`) started, in
    /// milliseconds after the bench loop began: what aggregate throughput
    /// is computed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<f64>,
    /// Position in the bench (0-based, in start order). Lines of
    /// `runs.jsonl` may be out of order when late workers delayed one.
    pub seq: u64,
    /// The policy's name (`race`, `cascade`, ...).
    pub policy: String,
    /// The run's time budget.
    pub deadline_ms: u64,
    /// The workload item's id.
    pub item: String,
    /// The workload item's tag.
    #[serde(default)]
    pub tag: Option<String>,
    /// Which pass over the workload (0-based, warm-up excluded).
    pub repeat: u32,
    /// How the run ended.
    pub status: RunStatus,
    /// The winning lane.
    #[serde(default)]
    pub winner: Option<Lane>,
    /// Start to settlement, as the caller saw it.
    pub elapsed_ms: f64,
    /// Start to the first token the caller received.
    #[serde(default)]
    pub ttft_ms: Option<f64>,
    /// How far settlement came after the deadline (0 when before).
    #[serde(default)]
    pub overshoot_ms: f64,
    /// One record per lane: local, then cloud.
    pub lanes: Vec<LaneRecord>,
    /// Workers still running when the run settled.
    #[serde(default)]
    pub late_workers: u32,
    /// For each late worker that came back: how long after settlement.
    #[serde(default)]
    pub late_overrun_ms: Vec<f64>,
    /// Tokens saved by compression and pre-scoring.
    #[serde(default)]
    pub tokens_saved: TokensSaved,
    /// Whether the run's answer was right by the item's grader: `false`
    /// when the run gave no answer; absent when the item has no expected
    /// answer.
    #[serde(default)]
    pub expected_match: Option<bool>,
    /// Why the run did not succeed.
    #[serde(default)]
    pub error: Option<String>,
    /// A two-stage cascade's first stage (the prompt's score, its
    /// threshold, whether it sent the run straight to the cloud).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_stage: Option<edgecloud_core::harness::PromptStage>,
    /// What the run cost (the outcome's `cost`), when its cloud model is
    /// priced (`[prices]` in the config; docs/cost.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<edgecloud_core::harness::Cost>,
}

impl RunRecord {
    /// The record of one lane, when present.
    pub fn lane(&self, lane: Lane) -> Option<&LaneRecord> {
        self.lanes.iter().find(|r| r.lane == lane)
    }

    /// True when some lane was absent because its slot was busy.
    pub fn had_busy_lane(&self) -> bool {
        self.lanes.iter().any(|l| l.state == LaneState::Busy)
    }
}
