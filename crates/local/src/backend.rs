//! The local llama.cpp lane behind [`Backend`] (feature `local`).

use crate::{LocalCompletion, LocalConfig, LocalError, LocalLane};
use edgecloud_core::harness::{
    Backend, BackendError, BackendFuture, BackendInfo, Candidate, LaneErrorKind, Timings,
};
use edgecloud_core::harness::{TokenCounts, TokenSignals};
use edgecloud_core::lane::LaneJob;

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

    /// Starts a lane (loads the model; blocking) and wraps it. The
    /// configuration is the lane's own: threads default to all physical
    /// cores and the compute threads keep their nice value unless
    /// `config.nice` says otherwise, as for the lane alone (a nice of 5
    /// starved llama.cpp on a loaded machine: docs/performance.md).
    pub fn start(config: LocalConfig) -> Result<Self, LocalError> {
        LocalLane::start(config).map(Self::new)
    }

    /// Like [`start`](Self::start), for the local lanes of a pool of
    /// `instances`: one loaded model, one batched decode loop, one lane
    /// (sequence) per instance (see `LocalLane::start_shared`).
    pub fn start_shared(config: LocalConfig, instances: usize) -> Result<Vec<Self>, LocalError> {
        Ok(LocalLane::start_shared(config, instances)?
            .into_iter()
            .map(Self::new)
            .collect())
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
            device: Some(i.offload.describe()),
        }
    }

    fn run(&self, job: LaneJob) -> BackendFuture {
        // The job (and the permit in it) goes to the lane's worker thread,
        // which drops it when the work really ends.
        let ticket = self.lane.submit(job);
        Box::pin(async move {
            ticket.await.map(candidate_from_local).map_err(|e| {
                BackendError::new(local_kind(&e), "local generation failed").with_source(e)
            })
        })
    }
}

/// A local completion as a candidate: tokenizer counts, timings and
/// log-probabilities carried over.
pub fn candidate_from_local(c: LocalCompletion) -> Candidate {
    let t = &c.timings;
    let mut candidate = Candidate::new(c.text, c.finish_reason).with_reasoning(c.reasoning);
    candidate.tokens = TokenCounts {
        local_reasoning: c.reasoning_tokens.map(u64::from),
        local_prompt: Some(u64::from(c.prompt_tokens)),
        local_reused_prompt: Some(u64::from(c.reused_prompt_tokens)),
        local_completion: Some(u64::from(c.completion_tokens)),
        local_sampled: Some(u64::from(c.sampled_tokens)),
        ..TokenCounts::default()
    };
    candidate.timings = Timings {
        ttft: t.ttft,
        prompt_eval: Some(t.prompt_eval),
        prompt_tokens_per_s: t.prompt_tokens_per_s,
        generation: Some(t.generation),
        gen_tokens_per_s: t.gen_tokens_per_s,
        total: Some(t.total),
        // Only when something was drafted: a lane without speculation
        // reports what it always did.
        draft_n: (t.draft_n > 0).then_some(t.draft_n),
        draft_n_accepted: (t.draft_n > 0).then_some(t.draft_n_accepted),
        ..Timings::default()
    };
    candidate.signals = Some(TokenSignals {
        token_logprobs: c.token_logprobs,
        mean_logprob: c.mean_logprob,
        min_logprob: c.min_logprob,
        p10_logprob: c.p10_logprob,
        first_token_margin: c.first_token_margin,
        agreement: c.agreement,
        prompt_logprob: c.prompt_logprob,
        prompt_tokens: Some(c.prompt_tokens),
    });
    candidate.http_status = None;
    candidate.tool_calls = c.tool_calls;
    candidate.logprobs = c.logprobs;
    candidate.stop_sequence = c.stop_sequence;
    candidate
}

/// The class of a local lane error (the error itself becomes the source).
/// Exhaustive on purpose: a new variant must be classed here.
fn local_kind(e: &LocalError) -> LaneErrorKind {
    match e {
        LocalError::InvalidModel(_)
        | LocalError::ModelLoad { .. }
        | LocalError::Context { .. }
        | LocalError::ChatTemplate { .. }
        | LocalError::Decode { .. } => LaneErrorKind::Model,
        // The model's answer missed its schema even under the grammar.
        LocalError::InvalidAnswer(_) => LaneErrorKind::Model,
        LocalError::Devices(_) | LocalError::Setting(_) | LocalError::DraftVocab { .. } => {
            LaneErrorKind::Config
        }
        // The model crashed or hung a probe process: the model is at fault;
        // a probe that could not run at all leaves the lane unavailable.
        LocalError::ProbeCrashed { .. }
        | LocalError::ProbeTimedOut { .. }
        | LocalError::ProbeFailed { .. } => LaneErrorKind::Model,
        LocalError::ProbeUnavailable { .. } => LaneErrorKind::Unavailable,
        LocalError::PromptTooLong { .. } | LocalError::EmbeddingTooLong { .. } => {
            LaneErrorKind::ContextLengthExceeded
        }
        LocalError::EmbeddingInput { .. }
        | LocalError::CannotEmbed { .. }
        | LocalError::NotGenerative { .. } => LaneErrorKind::InvalidRequest,
        LocalError::InvalidRequest(_) | LocalError::Grammar { .. } => LaneErrorKind::InvalidRequest,
        LocalError::Panicked { .. } => LaneErrorKind::Panicked,
        LocalError::WorkerGone | LocalError::Spawn { .. } => LaneErrorKind::Unavailable,
    }
}
