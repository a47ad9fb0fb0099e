//! The seam between the HTTP front door and whatever answers a request:
//! the server hands an [`Engine`] one validated request and gets back a
//! [`Run`] (committed text as it comes, then a [`Summary`]). The harness
//! implements it in `harness_engine`; the front door's own tests implement
//! it with a script. This
//! module must not know HTTP, and the server must not know the harness
//! beyond this trait.

pub(crate) use super::embedder::BoxFuture;
use super::embedder::Embedder;
use edgecloud_core::harness::{LaneErrorKind, LaneHealth};
use edgecloud_core::lane::{FinishReason, Lane, TokenLogprob};
use edgecloud_core::reasoning::Piece;
use edgecloud_core::request::Request;
use edgecloud_core::tools::ToolCall;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// One request for the engine.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) request: Request,
    /// The route the request's `model` selects (`None`: the default).
    pub(crate) route: Option<String>,
    /// The local model it selects, where the engine holds several
    /// (`None`: the default one; an engine of one model ignores it).
    pub(crate) model: Option<String>,
    /// A policy name overriding the route's.
    pub(crate) policy: Option<String>,
    /// Whether the caller wants committed text as it comes.
    pub(crate) stream: bool,
    /// The request's `Idempotency-Key` header (docs/cost.md).
    pub(crate) idempotency_key: Option<String>,
}

/// The part of a request a [`StartError::Invalid`] is about; the HTTP
/// layer names it as the wire field the request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    /// The policy the request named (body or header).
    Policy,
    /// The model (route) the request named.
    Model,
}

/// Why a run could not start.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StartError {
    /// The request is unusable as given (`param` says which part).
    Invalid {
        param: Option<Param>,
        message: String,
    },
    /// No new runs: the engine is shutting down.
    ShuttingDown,
    /// Every instance is busy (after the configured wait, if any).
    Busy { instances: usize },
    /// The model the request selects could not be loaded (a corrupt or
    /// missing file): the server's fault, named, the other models still
    /// serving.
    ModelLoad { model: String, message: String },
    /// Loading the model would go over the memory budget and every loaded
    /// model has a run in flight, so none can be unloaded for it.
    ModelsBusy { model: String, message: String },
    /// The request's idempotency key cannot run now: it was used with
    /// another request, or its first run is still in flight (`code`
    /// says which). Nothing ran.
    Conflict { code: &'static str, message: String },
    /// Anything else (an engine fault, not the caller's).
    Internal(String),
}

/// A model name a request may put in `model`, and what it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelEntry {
    pub(crate) id: String,
    /// The route it selects (`None`: the default route).
    pub(crate) route: Option<String>,
    /// The local model it selects, where the engine holds several.
    pub(crate) model: Option<String>,
    /// Whether that model is loaded now (`None`: an engine of one model,
    /// always loaded).
    pub(crate) loaded: Option<bool>,
}

impl ModelEntry {
    /// A name for `route` on an engine of one model.
    pub(crate) fn route(id: impl Into<String>, route: Option<String>) -> Self {
        Self {
            id: id.into(),
            route,
            model: None,
            loaded: None,
        }
    }
}

/// A lane's state at a glance (for `/health` and gauges).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LaneState {
    pub(crate) lane: Lane,
    pub(crate) configured: bool,
    pub(crate) busy: bool,
    /// Reachability, for a lane whose backend tracks it (the cloud lane):
    /// `down`, `probing`, `retry_in_ms`, failure and transition counts.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) health: Option<LaneHealth>,
    /// Where the lane computes, when its backend says: the local lane's
    /// `31/31 layers on Vulkan0 (...)` or `none (CPU)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) device: Option<String>,
}

/// One instance of a pool at a glance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct InstanceState {
    /// The model whose pool it belongs to, where the engine holds several.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    pub(crate) instance: usize,
    /// A run of the pool is in flight on it.
    pub(crate) busy: bool,
    pub(crate) local_busy: bool,
    pub(crate) cloud_busy: bool,
    pub(crate) late_workers_running: u64,
    pub(crate) runs_in_flight: u64,
}

/// The engine's state at a glance (`Default`: nothing configured, nothing
/// running).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Health {
    /// Per lane, over the whole pool: `busy` when no instance has the lane
    /// free.
    pub(crate) lanes: Vec<LaneState>,
    /// Per instance (one for a lone harness).
    pub(crate) instances: Vec<InstanceState>,
    /// Requests waiting for an instance now (a bounded queue only).
    pub(crate) queued: u64,
    /// Requests refused because every instance was busy.
    pub(crate) rejected: u64,
    pub(crate) runs_in_flight: u64,
    pub(crate) late_workers_running: u64,
    /// Observer events dropped because the observers' queue was full.
    pub(crate) observer_events_dropped: u64,
    /// Each configured model, loaded or not (an engine of several models).
    pub(crate) models: Vec<ModelState>,
}

/// One model of an engine of several, at a glance (`/health`, metrics).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ModelState {
    pub(crate) name: String,
    pub(crate) loaded: bool,
    pub(crate) loading: bool,
    /// What it holds in memory when loaded: the weights and the KV cache
    /// of its lanes' context, about ([`crate::local::LocalInfo::memory_bytes`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) memory_bytes: Option<u64>,
    /// Runs and embeddings requests holding it now.
    pub(crate) in_flight: u64,
    /// Since its last request ended, while loaded and idle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) idle_ms: Option<f64>,
    /// Until its keep-alive unloads it, while loaded (`None`: never for
    /// idleness); a model in use counts its whole keep-alive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expires_in_ms: Option<f64>,
    pub(crate) loads: u64,
    pub(crate) load_seconds: f64,
    pub(crate) load_failures: u64,
    pub(crate) unloads: u64,
    /// Requests that selected it.
    pub(crate) requests: u64,
    /// The last load's error, until a load succeeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) last_error: Option<String>,
}

/// What a shutdown found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Drained {
    pub(crate) waited_ms: f64,
    pub(crate) runs_in_flight: u64,
    pub(crate) workers_still_running: usize,
}

/// Whatever answers requests.
pub(crate) trait Engine: Send + Sync + 'static {
    /// The names a request may put in `model`.
    fn models(&self) -> Vec<ModelEntry>;
    /// Starts one run: at once, or after at most the engine's bounded
    /// wait for a free instance; never blocks a thread.
    fn start(&self, job: Job) -> BoxFuture<'_, Result<Box<dyn Run>, StartError>>;
    /// Lane and run state now.
    fn health(&self) -> Health;
    /// Stops new runs and waits up to `grace` for runs and late workers.
    fn shutdown(&self, grace: Duration) -> BoxFuture<'static, Drained>;
    /// What embeds for the local model `model` selects (`None`: the
    /// default one), where the engine holds several models: loading it
    /// when needed, and holding it loaded while the embedder lives.
    /// `Ok(None)`: the engine has no say (the server's own embedder).
    fn embedder(
        &self,
        model: Option<String>,
    ) -> BoxFuture<'_, Result<Option<Arc<dyn Embedder>>, StartError>> {
        let _ = model;
        Box::pin(async { Ok(None) })
    }
    /// Keeps the local model `model` selects loaded for `keep` after its
    /// last request from now on (Ollama's per-request `keep_alive`), where
    /// the engine unloads idle models; an engine that never unloads has
    /// nothing to do.
    fn keep_alive(&self, model: Option<String>, keep: super::models::KeepAlive) {
        let _ = (model, keep);
    }
    /// Each route's cloud spending and budget, where the engine keeps a
    /// ledger store (`/health`, `/metrics`).
    fn ledger(&self) -> Option<edgecloud_core::harness::LedgerReport> {
        None
    }
}

/// A run in flight. Dropping it does not stop the run; `abort` does.
pub(crate) trait Run: Send {
    /// The run's id, route, policy and deadline, fixed at its start.
    fn info(&self) -> &RunInfo;
    /// The next piece of committed text (answer or a reasoning model's
    /// thinking); `None` once the run has settled and everything was
    /// delivered (or when not streaming).
    fn next_piece(&mut self) -> BoxFuture<'_, Option<Piece>>;
    /// Waits for the settled run.
    fn finish(self: Box<Self>) -> BoxFuture<'static, Result<Summary, String>>;
    /// Something that aborts the run from anywhere (the client went away).
    fn aborter(&self) -> Box<dyn Fn() + Send + Sync>;
}

/// What the caller learns when a run starts (route and policy only when
/// the request named them; the summary always has them).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunInfo {
    pub(crate) run_id: u64,
    pub(crate) route: Option<String>,
    pub(crate) policy: Option<String>,
    pub(crate) deadline_ms: f64,
    /// The answer is a recorded one, given again for its idempotency key
    /// (`x-edgecloud-replay: true`).
    pub(crate) replay: bool,
}

/// How a run ended and what happened to each lane: the harness's own
/// statuses (the scripted engine in the tests speaks them too).
pub(crate) use edgecloud_core::harness::{LaneStatus, RunStatus as Status};

/// Token counts by source (provider-reported and local counts apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Tokens {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) provider_prompt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) provider_completion: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) local_prompt: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) local_completion: Option<u64>,
    /// Of `local_prompt`, the tokens taken from cached cells (the
    /// instance's own, or the prompt cache's) instead of decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) local_reused_prompt: Option<u64>,
}

/// One lane's part in a run: the compact form the response carries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LaneSummary {
    pub(crate) lane: Lane,
    pub(crate) status: LaneStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ttft_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) total_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) finish_reason: Option<FinishReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) score: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// The error's typed kind (the metrics label).
    #[serde(skip)]
    pub(crate) error_kind: Option<LaneErrorKind>,
    pub(crate) tokens: Tokens,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
    /// Why its answer was rejected as invalid, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rejected: Option<String>,
    /// When `unavailable`: until the lane is tried again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retry_in_ms: Option<f64>,
    /// Speculative decoding's drafted tokens, and those kept, when the
    /// lane drafted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) draft_n: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) draft_n_accepted: Option<u32>,
}

#[cfg(test)]
impl LaneSummary {
    /// A lane that reported nothing but its status (tests).
    pub(crate) fn empty(lane: Lane, status: LaneStatus) -> Self {
        Self {
            lane,
            status,
            ttft_ms: None,
            total_ms: None,
            finish_reason: None,
            score: None,
            error: None,
            error_kind: None,
            tokens: Tokens::default(),
            note: None,
            rejected: None,
            retry_in_ms: None,
            draft_n: None,
            draft_n_accepted: None,
        }
    }
}

/// The settled run, compact: what the `edgecloud` response field carries,
/// plus the winning text (not serialized; it is the answer itself).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Summary {
    pub(crate) run_id: u64,
    pub(crate) route: String,
    pub(crate) policy: String,
    pub(crate) status: Status,
    /// The lane that answered.
    pub(crate) lane: Option<Lane>,
    /// The lane a streaming run committed to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) committed: Option<Lane>,
    pub(crate) deadline_ms: f64,
    pub(crate) elapsed_ms: f64,
    pub(crate) overshoot_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ttft_ms: Option<f64>,
    pub(crate) late_workers: u32,
    pub(crate) decision: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    pub(crate) lanes: Vec<LaneSummary>,
    #[serde(skip)]
    pub(crate) text: Option<String>,
    /// The winner's thinking, when it is a reasoning model's answer.
    #[serde(skip)]
    pub(crate) reasoning: Option<String>,
    /// Of the winner's completion tokens, the thinking's (local count, else
    /// the provider's).
    #[serde(skip)]
    pub(crate) reasoning_tokens: Option<u64>,
    #[serde(skip)]
    pub(crate) finish_reason: Option<FinishReason>,
    /// The winner's tool calls (the answer itself, not serialized here).
    #[serde(skip)]
    pub(crate) tool_calls: Vec<ToolCall>,
    /// The winner's per-token log-probabilities, when asked for.
    #[serde(skip)]
    pub(crate) logprobs: Option<Vec<TokenLogprob>>,
    /// The lane the log-probabilities come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) logprobs_from: Option<Lane>,
    /// The stop string that ended the winner's text, when its lane knows
    /// (Anthropic's `stop_sequence`).
    #[serde(skip)]
    pub(crate) stop_sequence: Option<String>,
    /// The winner's own timings (prompt processing and generation, where
    /// its lane measures them: Ollama's `prompt_eval_duration` and
    /// `eval_duration`).
    #[serde(skip)]
    pub(crate) timings: Option<edgecloud_core::harness::Timings>,
    /// A two-stage cascade's first stage: the prompt's score, its
    /// threshold and whether it sent the run straight to the cloud.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prompt_stage: Option<edgecloud_core::harness::PromptStage>,
    /// What the answer cost and saved (docs/cost.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cost: Option<edgecloud_core::harness::Cost>,
    /// Set on a recorded answer given again for its idempotency key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) replay: Option<edgecloud_core::harness::Replay>,
    /// Set when the lane the answer began on failed part-way and the
    /// other lane continued it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) switch: Option<edgecloud_core::harness::LaneSwitch>,
}

impl Summary {
    /// The winner's report.
    pub(crate) fn winner(&self) -> Option<&LaneSummary> {
        let lane = self.lane?;
        self.lanes.iter().find(|l| l.lane == lane)
    }

    /// True when no worker ran because every lane the plan wanted was
    /// busy: the one case the caller should simply retry.
    pub(crate) fn all_busy(&self) -> bool {
        self.status != Status::Ok && LaneStatus::all_busy(self.lanes.iter().map(|l| l.status))
    }

    /// True when no worker ran and a lane the plan wanted was down (the
    /// cloud lane in its cooldown), none busy: the answer is "come back
    /// later", with the shortest time until a lane is tried again.
    pub(crate) fn unavailable_for(&self) -> Option<f64> {
        if self.status == Status::Ok
            || self
                .lanes
                .iter()
                .any(|l| l.status.ran() || l.status == LaneStatus::Busy)
        {
            return None;
        }
        self.lanes
            .iter()
            .filter(|l| l.status == LaneStatus::Unavailable)
            .map(|l| l.retry_in_ms.unwrap_or(0.0))
            .reduce(f64::min)
    }

    /// What every lane that ran said, when each failed with `kind`.
    fn every_lane_failed_with(&self, kind: LaneErrorKind) -> Option<String> {
        if self.status == Status::Ok {
            return None;
        }
        let ran: Vec<&LaneSummary> = self.lanes.iter().filter(|l| l.status.ran()).collect();
        let all = !ran.is_empty() && ran.iter().all(|l| l.error_kind == Some(kind));
        all.then(|| {
            ran.iter()
                .map(|l| {
                    format!(
                        "{}: {}",
                        l.lane,
                        l.error.as_deref().unwrap_or(kind.as_str())
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// Why the prompt fits no lane, when every lane that ran said it is
    /// over its context: the request's fault, a 400.
    pub(crate) fn context_exceeded(&self) -> Option<String> {
        self.every_lane_failed_with(LaneErrorKind::ContextLengthExceeded)
            .map(|said| {
                format!(
                    "the prompt is longer than the context of every lane that could take it ({said})"
                )
            })
    }

    /// Why the request is invalid, when every lane that ran refused it as
    /// such (a `json_schema` llama.cpp cannot turn into a grammar, say):
    /// the request's fault, a 400, never a gateway error.
    pub(crate) fn refused_as_invalid(&self) -> Option<String> {
        self.every_lane_failed_with(LaneErrorKind::InvalidRequest)
            .map(|said| format!("every lane that took the request refused it ({said})"))
    }

    /// `lane=status` pairs, for a header.
    pub(crate) fn lanes_header(&self) -> String {
        self.lanes
            .iter()
            .map(|l| format!("{}={}", l.lane, l.status.as_str()))
            .collect::<Vec<_>>()
            .join(",")
    }
}
