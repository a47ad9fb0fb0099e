//! The OpenAI-compatible cloud lane behind [`Backend`] (feature `cloud`).

use crate::{Admission, CloudCompletion, CloudConfig, CloudError, CloudLane};
use edgecloud_core::harness::TokenCounts;
use edgecloud_core::harness::{Availability, LaneHealth};
use edgecloud_core::harness::{
    Backend, BackendError, BackendFuture, BackendInfo, Candidate, LaneErrorKind, Timings,
};
use edgecloud_core::lane::{FinishReason, LaneJob};

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
            device: None,
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
            retry_in_ms: h.retry_in.map(edgecloud_core::millis::to_ms),
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
    let mut candidate = Candidate::new(c.text, c.finish_reason).with_reasoning(c.reasoning);
    candidate.tokens = TokenCounts {
        provider_reasoning: c.usage.and_then(|u| u.reasoning_tokens),
        provider_prompt: c.usage.map(|u| u.prompt_tokens),
        provider_completion: c.usage.map(|u| u.completion_tokens),
        provider_total: c.usage.map(|u| u.total_tokens),
        provider_cached_prompt: c.usage.and_then(|u| u.cached_prompt_tokens),
        ..TokenCounts::default()
    };
    candidate.timings = Timings {
        connect: t.connect,
        ttfb: t.ttfb,
        ttft: t.ttft,
        gen_tokens_per_s,
        total: Some(t.total),
        ..Timings::default()
    };
    candidate.signals = None;
    candidate.http_status = Some(c.http_status);
    candidate.tool_calls = c.tool_calls;
    candidate.logprobs = c.logprobs;
    candidate
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
        // The provider says the prompt is over its context (OpenAI's code).
        E::HttpStatus {
            code: Some(code), ..
        } if code == "context_length_exceeded" => LaneErrorKind::ContextLengthExceeded,
        E::NotFound { .. } | E::HttpStatus { .. } | E::Redirect { .. } => LaneErrorKind::HttpStatus,
        E::MalformedJson { .. }
        | E::MalformedEmbeddings { .. }
        | E::Provider { .. }
        | E::InvalidUtf8
        | E::EmptyChoices => LaneErrorKind::Protocol,
        E::BodyTooLarge { .. }
        | E::ContentTooLarge { .. }
        | E::LineTooLong { .. }
        | E::HeadersTooLarge { .. } => LaneErrorKind::TooLarge,
        E::SinkPanicked => LaneErrorKind::Panicked,
    }
}
