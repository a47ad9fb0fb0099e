//! The settled result of a run ([`Outcome`]) and its parts: per-lane
//! reports, the decision, cancellation results. Plain serde data, built once
//! by the run's task at settlement (from the decision core's report);
//! nothing here runs or decides.
//!
//! Times are milliseconds as floats. Lane times (`ttft_ms`, `total_ms`)
//! count from the moment that lane's worker was admitted; `started_ms`
//! says when that was, counted from the run's start. The run's `ttft_ms`
//! is what the caller saw: from the run's start to the first piece of
//! text handed to the caller's stream (streaming runs only).

use super::backend::{BackendError, Candidate, LaneErrorKind, TokenCounts};
use super::callbacks::CallbackReport;
use super::ledger::{Cost, Replay};
use super::policy::PolicyKind;
use super::scoring::Signal;
use crate::lane::{FinishReason, Lane};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// A winner was picked; `text` holds its answer.
    Ok,
    /// The deadline came before any usable answer (or before the lane the
    /// stream committed to finished).
    DeadlineExceeded,
    /// Every lane that could run failed, was busy, or gave nothing usable.
    Failed,
    /// The run was aborted (see [`AbortHandle`](super::AbortHandle)).
    Aborted,
}

impl RunStatus {
    /// Snake-case name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::DeadlineExceeded => "deadline_exceeded",
            RunStatus::Failed => "failed",
            RunStatus::Aborted => "aborted",
        }
    }
}

/// What happened to one lane in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneStatus {
    /// The plan never started it (not in the policy, not configured, not
    /// needed because the run was decided, or no time left). `note` says
    /// which.
    NotStarted,
    /// Its slot was held by another worker; it was absent from this run.
    Busy,
    /// Its backend said it is down (the cloud lane after connect-level
    /// failures, until its cooldown passes); it was absent from this run.
    /// `note` says why and when it will be tried again.
    Unavailable,
    /// The pre-score callback said the cloud was not needed.
    Skipped,
    /// It returned a whole answer (`stop` or `length`).
    Completed,
    /// It returned an error or panicked.
    Failed,
    /// It returned early, cut by cancellation or its deadline.
    Cancelled,
    /// It was still running when the run settled; it keeps its lane until
    /// it returns, and its result will be discarded.
    Late,
}

impl LaneStatus {
    /// Whether a run whose lanes ended so found every lane it wanted busy:
    /// one at least busy and none ran. The one failure a caller should
    /// simply retry (serve's 503 `lanes_busy`, the bindings' busy error).
    pub fn all_busy(statuses: impl IntoIterator<Item = LaneStatus>) -> bool {
        let mut busy = false;
        for s in statuses {
            if s.ran() {
                return false;
            }
            busy |= s == LaneStatus::Busy;
        }
        busy
    }

    /// Whether a worker ran on the lane in this run.
    pub fn ran(self) -> bool {
        matches!(
            self,
            LaneStatus::Completed | LaneStatus::Failed | LaneStatus::Cancelled | LaneStatus::Late
        )
    }

    /// Snake-case name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            LaneStatus::NotStarted => "not_started",
            LaneStatus::Busy => "busy",
            LaneStatus::Unavailable => "unavailable",
            LaneStatus::Skipped => "skipped",
            LaneStatus::Completed => "completed",
            LaneStatus::Failed => "failed",
            LaneStatus::Cancelled => "cancelled",
            LaneStatus::Late => "late",
        }
    }
}

/// What the run's attempt to cancel a lane achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelResult {
    /// The worker saw the token and returned before the run settled.
    StoppedInTime,
    /// The worker had not returned when the run settled: it is late.
    StillRunning,
    /// The worker had already returned when cancellation was requested.
    AlreadyFinished,
    /// The backend declares it does not observe cancellation; the token was
    /// passed but has no effect (the worker runs to its own end).
    NotPropagated,
}

/// One lane's part in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LaneReport {
    /// Which lane.
    pub lane: Lane,
    /// What happened to it.
    pub status: LaneStatus,
    /// The backend's name, when the lane is configured.
    pub backend: Option<String>,
    /// When its worker was admitted, from the run's start.
    pub started_ms: Option<f64>,
    /// Admission to its first token, as the harness saw it (the backend's
    /// own figure when it streamed nothing).
    pub ttft_ms: Option<f64>,
    /// Admission to its return (absent while late).
    pub total_ms: Option<f64>,
    /// Prompt tokens: the provider's count, else the local tokenizer's.
    pub prompt_tokens: Option<u64>,
    /// Completion tokens: the provider's count, else the local tokenizer's.
    pub completion_tokens: Option<u64>,
    /// Every token count by source, compressor estimates included.
    pub tokens: TokenCounts,
    /// Why its generation ended, when it returned a completion.
    pub finish_reason: Option<FinishReason>,
    /// Its score, when scored.
    pub score: Option<f64>,
    /// The score's named components.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub signals: BTreeMap<String, f64>,
    /// Its error, when it failed: a typed kind, and the whole message
    /// chain in JSON.
    pub error: Option<BackendError>,
    /// What cancelling it achieved, when the run cancelled it.
    pub cancel: Option<CancelResult>,
    /// Why it was not started or skipped, or what else a reader should
    /// know.
    pub note: Option<String>,
    /// Its text when it was not the winner (losers, unaccepted answers).
    pub text: Option<String>,
    /// Its tool calls when it was not the winner and made some.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<crate::tools::ToolCall>,
    /// Why its whole answer was rejected as invalid (not JSON, off the
    /// request's schema, a call of an undeclared tool or with invalid
    /// arguments), when it was: validity is part of acceptance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// When it was `unavailable`: how long until its backend tries again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<f64>,
    /// Tokens its speculative decoding drafted and verified, when it
    /// drafted (the local lane with `spec_type` on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n: Option<u32>,
    /// Of those, the tokens kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_n_accepted: Option<u32>,
}

impl LaneReport {
    /// An empty report for a lane that has not done anything yet.
    pub(crate) fn new(lane: Lane, status: LaneStatus) -> Self {
        Self {
            lane,
            status,
            backend: None,
            started_ms: None,
            ttft_ms: None,
            total_ms: None,
            prompt_tokens: None,
            completion_tokens: None,
            tokens: TokenCounts::default(),
            finish_reason: None,
            score: None,
            signals: BTreeMap::new(),
            error: None,
            cancel: None,
            note: None,
            text: None,
            tool_calls: Vec::new(),
            rejected: None,
            retry_in_ms: None,
            draft_n: None,
            draft_n_accepted: None,
        }
    }
}

/// Who made the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// The policy's own rule (first acceptable, the committed lane, the
    /// only candidate).
    Policy,
    /// The user's arbiter.
    Arbiter,
    /// The built-in arbitration rule (no arbiter, or its default).
    BuiltIn,
    /// Nothing was decided (no candidate, abort).
    Nobody,
}

/// Why the winner won (or why there is none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// In words.
    pub reason: String,
    /// Who decided.
    pub decided_by: DecidedBy,
    /// Every lane's score (`null`: not scored).
    pub scores: BTreeMap<Lane, Option<f64>>,
}

/// A two-stage cascade's first stage
/// ([`Route::prompt_escalate_below`](super::Route::prompt_escalate_below)):
/// the prompt's score, its threshold and what it decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptStage {
    /// The prompt-only signal read ([`Signal::PromptLogprob`] or
    /// [`Signal::PromptBrevity`]).
    pub signal: Signal,
    /// Below it, the run goes straight to the cloud.
    pub threshold: f64,
    /// The prompt's score in the signal's units (`None`: none came, e.g.
    /// a one-token prompt's log-probability, or the lane failed or was
    /// not admitted first).
    pub score: Option<f64>,
    /// The score sent the run to the cloud before the local lane
    /// generated its answer (and the cloud started).
    pub straight_to_cloud: bool,
}

/// The settled result of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Outcome {
    /// The run's id (unique within one harness).
    pub run_id: u64,
    /// The request's own id, if it had one.
    pub request_id: Option<String>,
    /// The route it ran on.
    pub route: String,
    /// The policy it ran.
    pub policy: PolicyKind,
    /// How it ended.
    pub status: RunStatus,
    /// The winning lane.
    pub winner: Option<Lane>,
    /// The winning text.
    pub text: Option<String>,
    /// The winning completion, with its signals.
    pub completion: Option<Candidate>,
    /// Why the run did not succeed.
    pub error: Option<String>,
    /// The lane a streaming run committed to.
    pub committed: Option<Lane>,
    /// The run's time budget.
    pub deadline_ms: f64,
    /// Start to settlement.
    pub elapsed_ms: f64,
    /// How far settlement came after the deadline (0 when before).
    pub overshoot_ms: f64,
    /// Time to the first token the caller received (streaming runs).
    pub ttft_ms: Option<f64>,
    /// The decision.
    pub decision: Decision,
    /// One report per lane: local, then cloud.
    pub lanes: Vec<LaneReport>,
    /// Every callback call, timed.
    pub callbacks: Vec<CallbackReport>,
    /// Sum of the callbacks' times.
    pub callback_ms: f64,
    /// Workers still running at settlement.
    pub late_workers: u32,
    /// A two-stage cascade's first stage (`None`: the run had none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_stage: Option<PromptStage>,
    /// What the answer cost and saved (docs/cost.md).
    #[serde(default)]
    pub cost: Cost,
    /// Set when this outcome is a recorded answer given again for a
    /// repeated idempotency key (no lane ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Replay>,
    /// Set when the lane the answer began on failed part-way and the
    /// other lane continued it (the answer is both lanes' text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<LaneSwitch>,
}

/// A switch of lanes mid-answer: the lane an answer began on failed
/// part-way and the other lane continued the text it had produced (for a
/// streaming caller, exactly the text it had received).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaneSwitch {
    /// The lane that failed.
    pub from: Lane,
    /// The lane that continued the answer.
    pub to: Lane,
    /// How `from` failed.
    pub error_kind: LaneErrorKind,
    /// Why `from` failed: its error's kind and message.
    pub reason: String,
    /// Characters of answer produced before the switch.
    pub sent_chars: u64,
    /// Characters of thinking produced before the switch.
    #[serde(default)]
    pub sent_reasoning_chars: u64,
    /// Pieces of text produced before the switch: tokens when the local
    /// lane failed, streamed deltas when the cloud lane did (one token
    /// each from llama-server and vLLM).
    pub sent_pieces: u64,
    /// When the failure was seen, from the run's start.
    pub at_ms: f64,
    /// From the failure's detection to the continuing lane's first text
    /// (`None`: it produced none).
    pub first_token_after_ms: Option<f64>,
}

impl Outcome {
    /// The report of one lane.
    pub fn lane(&self, lane: Lane) -> &LaneReport {
        self.lanes
            .iter()
            .find(|r| r.lane == lane)
            .expect("an outcome carries a report for both lanes")
    }

    /// True when the run has a winner.
    pub fn is_ok(&self) -> bool {
        self.status == RunStatus::Ok
    }
}
