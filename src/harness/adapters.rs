//! Adapters from the real lanes to [`Backend`]: they translate one lane's
//! completion and error types into [`Candidate`] and [`BackendError`], and
//! nothing more (no policy, no retries, no timing of their own).

use super::availability::{Availability, LaneHealth};
use super::backend::{
    Backend, BackendError, BackendFuture, BackendInfo, Candidate, LaneErrorKind, Timings,
};
use super::backend::{TokenCounts, TokenSignals};
use crate::cloud::{Admission, CloudCompletion, CloudConfig, CloudError, CloudLane};
use crate::lane::{FinishReason, LaneJob};
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
    ///
    /// Unless `config.nice` is set, llama.cpp's compute threads run
    /// [`HARNESS_COMPUTE_NICE`] nice steps below normal: they take every
    /// core, and when a deadline comes the harness's timer and coordinator
    /// (which also ask the kernel for short time slices) must get one at
    /// once. Threads default to all physical cores, as for the lane alone.
    pub fn start(mut config: LocalConfig) -> Result<Self, LocalError> {
        if config.nice.is_none() {
            config.nice = Some(HARNESS_COMPUTE_NICE);
        }
        LocalLane::start(config).map(Self::new)
    }

    /// The lane, for its tokenizer or its own diagnostics.
    pub fn lane(&self) -> &LocalLane {
        &self.lane
    }
}

/// How many nice steps below normal llama.cpp's compute threads run under
/// the harness unless `LocalConfig::nice` says otherwise (see
/// [`LocalBackend::start`]).
pub const HARNESS_COMPUTE_NICE: u8 = 0;

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
            p10_logprob: c.p10_logprob,
            first_token_margin: c.first_token_margin,
        }),
        http_status: None,
        text: c.text,
    }
}

/// The cloud lane as a harness backend. It observes cancellation (the HTTP
/// exchange is dropped at once), and reports the lane's reachability: a
/// lane marked down after connect-level failures is
/// [`Availability::Down`] until its cooldown passes.
///
/// The cloud lane reports a deadline or a cancellation that came before
/// the first token as an error; for the harness that is a cut-short
/// completion with no text ([`FinishReason::Deadline`] or
/// [`FinishReason::Cancelled`]), like the local lane's, so a lane's report
/// says `cancelled`, not `failed`, when the run stopped it.
#[derive(Debug, Clone)]
pub struct CloudBackend {
    lane: CloudLane,
}

impl CloudBackend {
    /// Wraps a built lane.
    pub fn new(lane: CloudLane) -> Self {
        Self { lane }
    }

    /// Builds a lane (checks the settings, reads the key) and wraps it.
    pub fn start(config: CloudConfig) -> Result<Self, CloudError> {
        CloudLane::new(config).map(Self::new)
    }

    /// The lane.
    pub fn lane(&self) -> &CloudLane {
        &self.lane
    }
}

impl Backend for CloudBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "openai-compatible".into(),
            model: Some(self.lane.config().model.clone()),
            load_time: None,
        }
    }

    fn availability(&self) -> Availability {
        match self.lane.admit() {
            Admission::Open => Availability::Ready,
            Admission::Probe => Availability::Probe,
            Admission::Down { retry_in, reason } => Availability::Down { retry_in, reason },
        }
    }

    fn health(&self) -> Option<LaneHealth> {
        let h = self.lane.health();
        Some(LaneHealth {
            down: h.down,
            probing: h.probing,
            retry_in_ms: h.retry_in.map(crate::millis::to_ms),
            consecutive_failures: h.consecutive_failures,
            went_down: h.went_down,
            recovered: h.recovered,
            last_failure: h.last_failure,
        })
    }

    fn run(&self, job: LaneJob) -> BackendFuture {
        let lane = self.lane.clone();
        Box::pin(async move {
            match lane.run(job).await {
                Ok(c) => Ok(candidate_from_cloud(c)),
                Err(e) if e.is_cancelled() => Ok(Candidate::new("", FinishReason::Cancelled)),
                Err(e) if e.is_deadline() => {
                    let mut c = Candidate::new("", FinishReason::Deadline);
                    c.http_status = e.http_status();
                    Ok(c)
                }
                Err(e) => {
                    Err(BackendError::new(cloud_kind(&e), "cloud request failed").with_source(e))
                }
            }
        })
    }
}

/// A cloud completion as a candidate: provider usage (never estimated),
/// timings and HTTP status carried over.
pub fn candidate_from_cloud(c: CloudCompletion) -> Candidate {
    let gen_tokens_per_s = c.gen_tokens_per_s();
    let t = c.timings;
    Candidate {
        finish_reason: c.finish_reason,
        tokens: TokenCounts {
            provider_prompt: c.usage.map(|u| u.prompt_tokens),
            provider_completion: c.usage.map(|u| u.completion_tokens),
            provider_total: c.usage.map(|u| u.total_tokens),
            ..TokenCounts::default()
        },
        timings: Timings {
            connect: t.connect,
            ttfb: t.ttfb,
            ttft: t.ttft,
            gen_tokens_per_s,
            total: Some(t.total),
            ..Timings::default()
        },
        signals: None,
        http_status: Some(c.http_status),
        text: c.text,
    }
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
        LocalError::Devices(_) => LaneErrorKind::Config,
        // The model crashed or hung a probe process: the model is at fault;
        // a probe that could not run at all leaves the lane unavailable.
        LocalError::ProbeCrashed { .. }
        | LocalError::ProbeTimedOut { .. }
        | LocalError::ProbeFailed { .. } => LaneErrorKind::Model,
        LocalError::ProbeUnavailable { .. } => LaneErrorKind::Unavailable,
        LocalError::PromptTooLong { .. } | LocalError::InvalidRequest(_) => {
            LaneErrorKind::InvalidRequest
        }
        LocalError::Panicked { .. } => LaneErrorKind::Panicked,
        LocalError::WorkerGone | LocalError::Spawn { .. } => LaneErrorKind::Unavailable,
    }
}

/// The class of a cloud lane error (the error itself becomes the source).
/// Exhaustive on purpose: a new variant must be classed here.
fn cloud_kind(e: &CloudError) -> LaneErrorKind {
    use CloudError as E;
    match e {
        E::InvalidConfig { .. } => LaneErrorKind::Config,
        E::InvalidRequest(_) => LaneErrorKind::InvalidRequest,
        E::Dns { .. }
        | E::ConnectRefused { .. }
        | E::ConnectTimeout { .. }
        | E::Tls { .. }
        | E::Connect { .. } => LaneErrorKind::Unreachable,
        E::Transport { .. } | E::Truncated { .. } | E::Stalled { .. } => LaneErrorKind::Transport,
        E::DeadlineBeforeHeaders | E::DeadlineBeforeFirstToken { .. } => LaneErrorKind::Deadline,
        E::Cancelled => LaneErrorKind::Cancelled,
        E::Auth { .. } => LaneErrorKind::Auth,
        E::RateLimited { .. } => LaneErrorKind::RateLimited,
        E::Server { .. } => LaneErrorKind::ServerError,
        E::NotFound { .. } | E::HttpStatus { .. } | E::Redirect { .. } => LaneErrorKind::HttpStatus,
        E::MalformedJson { .. } | E::Provider { .. } | E::InvalidUtf8 | E::EmptyChoices => {
            LaneErrorKind::Protocol
        }
        E::BodyTooLarge { .. }
        | E::ContentTooLarge { .. }
        | E::LineTooLong { .. }
        | E::HeadersTooLarge { .. } => LaneErrorKind::TooLarge,
        E::SinkPanicked => LaneErrorKind::Panicked,
    }
}
