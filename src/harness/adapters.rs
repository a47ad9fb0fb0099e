//! Adapters from the real lanes to [`Backend`]: they translate one lane's
//! completion and error types into [`Candidate`] and [`BackendError`], and
//! nothing more (no policy, no retries, no timing of their own).

use super::backend::{Backend, BackendError, BackendFuture, BackendInfo, Candidate, Timings};
use super::backend::{TokenCounts, TokenSignals};
use crate::lane::LaneJob;
use crate::local::{LocalCompletion, LocalConfig, LocalError, LocalLane};

/// The local llama.cpp lane as a harness backend. It observes cancellation
/// between tokens and inside `llama_decode`.
#[derive(Debug, Clone)]
pub struct LocalBackend {
    lane: LocalLane,
}

impl LocalBackend {
    /// Wraps a started lane.
    pub fn new(lane: LocalLane) -> Self {
        Self { lane }
    }

    /// Starts a lane (loads the model; blocking) and wraps it.
    pub fn start(config: LocalConfig) -> Result<Self, LocalError> {
        LocalLane::start(config).map(Self::new)
    }

    /// The lane, for its tokenizer or its own diagnostics.
    pub fn lane(&self) -> &LocalLane {
        &self.lane
    }
}

impl Backend for LocalBackend {
    fn info(&self) -> BackendInfo {
        let i = self.lane.info();
        BackendInfo {
            name: "llama.cpp".into(),
            model: Some(i.model.display().to_string()),
            load_time: Some(i.load_time),
        }
    }

    fn run(&self, job: LaneJob) -> BackendFuture {
        // The job (and the permit in it) goes to the lane's worker thread,
        // which drops it when the work really ends.
        let ticket = self.lane.submit(job);
        Box::pin(async move {
            ticket
                .await
                .map(candidate_from_local)
                .map_err(|e| BackendError::new(e.kind(), e.to_string()))
        })
    }
}

/// A local completion as a candidate: tokenizer counts, timings and
/// log-probabilities carried over.
pub fn candidate_from_local(c: LocalCompletion) -> Candidate {
    let t = &c.timings;
    Candidate {
        finish_reason: c.finish_reason,
        tokens: TokenCounts {
            local_prompt: Some(u64::from(c.prompt_tokens)),
            local_reused_prompt: Some(u64::from(c.reused_prompt_tokens)),
            local_completion: Some(u64::from(c.completion_tokens)),
            ..TokenCounts::default()
        },
        timings: Timings {
            ttft: t.ttft,
            prompt_eval: Some(t.prompt_eval),
            prompt_tokens_per_s: t.prompt_tokens_per_s,
            generation: Some(t.generation),
            gen_tokens_per_s: t.gen_tokens_per_s,
            total: Some(t.total),
            ..Timings::default()
        },
        signals: Some(TokenSignals {
            token_logprobs: c.token_logprobs,
            mean_logprob: c.mean_logprob,
            min_logprob: c.min_logprob,
        }),
        http_status: None,
        text: c.text,
    }
}
