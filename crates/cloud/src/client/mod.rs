//! [`CloudLane`]: one request to an OpenAI-compatible endpoint, under the
//! job's deadline and cancellation token, with its answer streamed to the
//! job's sink. Owns the request/response exchange and every wait in it;
//! it does not decide retries, admission or arbitration (the harness does).
//!
//! ```text
//! run(job) ── validate ── send ──► headers ──► body reads ──► [DONE] ──► return
//!                                                               └─ rest of body drained in background
//!               every wait: select(cancel, deadline, stall timer, I/O)
//!               permit dropped after the connection is dropped, before return
//! ```
//!
//! The parts: what a call returns (`result`), the request/response exchange
//! (`exchange`), reading a body under the job's waits and a whole answer
//! (`body`), the stream's state machine (`stream`), and the embeddings
//! pass-through (`embeddings`).

mod body;
mod continuation;
mod embeddings;
mod exchange;
mod result;
mod stream;

pub use embeddings::{CloudEmbeddings, EmbeddingInput, EmbeddingsRequest};
pub use result::{CloudCompletion, CloudDiagnostic, CloudTimings, ProviderUsage};

use super::config::CloudConfig;
use super::endpoint::Endpoint;
use super::error::CloudError;
use super::health::{Admission, CloudHealth, Health, Observation};
use super::net;
use super::secret::Scrubber;
use edgecloud_core::lane::LaneJob;
use reqwest::header::HeaderValue;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest error body read from a non-success response.
const MAX_ERROR_BODY: usize = 64 << 10;
/// After `[DONE]`, how long a background task waits for the end of the
/// body so the connection can go back to the pool (bounded by the deadline
/// too). The call itself does not wait.
const DRAIN_GRACE: Duration = Duration::from_millis(100);
/// Longest parser complaint kept in an error.
const MAX_DETAIL_CHARS: usize = 300;

/// The cloud lane. Built once; holds one pooled HTTP client (keep-alive,
/// rustls with verified certificates, redirects never followed). Cloning is
/// cheap and shares the client.
///
/// The API key is read once, when the lane is built.
#[derive(Clone)]
pub struct CloudLane {
    inner: Arc<Inner>,
}

struct Inner {
    client: reqwest::Client,
    endpoint: Endpoint,
    /// The settings, with `api_key` removed (the key lives only in `auth`
    /// and the scrubber).
    config: CloudConfig,
    auth: Option<HeaderValue>,
    scrubber: Scrubber,
    /// Whether the server is reachable (shared by every clone).
    health: Health,
}

impl fmt::Debug for CloudLane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudLane")
            .field("endpoint", &self.inner.endpoint.display)
            .field("model", &self.inner.config.model)
            .field("stream", &self.inner.config.stream)
            .field("has_api_key", &self.inner.auth.is_some())
            .finish()
    }
}

impl CloudLane {
    /// Validates the settings, resolves the key and builds the HTTP client.
    pub fn new(mut config: CloudConfig) -> Result<Self, CloudError> {
        config.validate()?;
        let key = config.resolve_api_key()?;
        let endpoint = Endpoint::parse(&config.base_url)?;
        let client = net::build_client(&config)?;
        let auth = key.as_ref().map(|k| {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", k.expose_secret()))
                .expect("resolve_api_key only returns header-safe keys");
            v.set_sensitive(true);
            v
        });
        config.api_key = None;
        let config_policy = config.cooldown_policy();
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                endpoint,
                config,
                auth,
                scrubber: Scrubber::new(key),
                health: Health::new(config_policy),
            }),
        })
    }

    /// The settings (without the key).
    pub fn config(&self) -> &CloudConfig {
        &self.inner.config
    }

    /// The chat-completions URL in printable form (no query, no user info).
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint.display
    }

    /// Whether a job should be sent now, by what recent requests found (see
    /// the `health` rules in the module docs): [`Admission::Open`],
    /// [`Admission::Down`] (treat the lane as absent), or
    /// [`Admission::Probe`] when a cooldown has just passed, in which case
    /// the caller must send this job: it is the one probe, and until it
    /// reports every other admission sees the lane down. The harness asks
    /// this at admission, while it holds the lane's slot; [`CloudLane::run`]
    /// itself never refuses, so a diagnostic still reaches the server.
    pub fn admit(&self) -> Admission {
        self.inner.health.admit()
    }

    /// The lane's reachability at a glance (no side effects).
    pub fn health(&self) -> CloudHealth {
        self.inner.health.snapshot()
    }

    /// Runs one job. Tokens go to the job's sink as they arrive.
    ///
    /// Every wait is bounded by `job.deadline` and `job.cancel`. After the
    /// first token, stopping for either is not an error: the partial text
    /// comes back with [`FinishReason::Deadline`](edgecloud_core::lane::FinishReason::Deadline) or
    /// [`FinishReason::Cancelled`](edgecloud_core::lane::FinishReason::Cancelled). Before it, the result is
    /// [`CloudError::DeadlineBeforeHeaders`],
    /// [`CloudError::DeadlineBeforeFirstToken`] or [`CloudError::Cancelled`].
    /// Stopping drops the HTTP exchange at once (the connection closes).
    ///
    /// `job.permit` is dropped when the work has really ended, on every
    /// path, before this returns. After a complete stream, what follows
    /// `[DONE]` (usually just the end of the chunked body) is read by a
    /// short background task, bounded by the deadline and 100 ms, so the
    /// connection can return to the pool; the lane slot does not wait for it.
    pub async fn run(&self, job: LaneJob) -> Result<CloudCompletion, CloudError> {
        self.run_diagnostic(job).await.result
    }

    /// [`CloudLane::run`], also returning the status and timings measured
    /// before a failure.
    pub async fn run_diagnostic(&self, mut job: LaneJob) -> CloudDiagnostic {
        let permit = job.permit.take();
        let started = Instant::now();
        let inner = &*self.inner;
        tracing::debug!(
            endpoint = %inner.endpoint.display,
            model = %job.model.as_deref().unwrap_or(&inner.config.model),
            stream = inner.config.stream,
            "cloud request starts"
        );
        let mut probe = Probe {
            started,
            status: None,
            timings: CloudTimings::default(),
        };
        // Reports to the health state even if this future is dropped
        // half-way (then as "nothing learnt", which passes a probe on).
        let mut watch = HealthWatch {
            health: &inner.health,
            observation: Observation::Neutral,
        };
        let result = inner.exchange(&mut job, &mut probe).await;
        watch.observation = match Observation::of(&result) {
            // A run cancels its workers when its deadline fires, which
            // the exchange may see before its own deadline timer: with no
            // headers by then, it is still "no response before the
            // deadline".
            Observation::Neutral
                if result.as_ref().is_err_and(CloudError::is_cancelled)
                    && probe.status.is_none()
                    && Instant::now() >= job.deadline =>
            {
                Observation::ConnectFailure(CloudError::DeadlineBeforeHeaders.to_string())
            }
            obs => obs,
        };
        let timings = CloudTimings {
            total: started.elapsed(),
            ..probe.timings
        };
        let result = result.map(|mut c| {
            c.timings = timings;
            c
        });
        match &result {
            Ok(c) => tracing::debug!(
                status = c.http_status,
                finish = c.finish_reason.as_str(),
                text_bytes = c.text.len(),
                total_ms = edgecloud_core::millis::to_ms(timings.total),
                "cloud request ended"
            ),
            Err(e) => tracing::debug!(
                kind = e.kind().as_str(),
                status = ?probe.status,
                error = %e,
                total_ms = edgecloud_core::millis::to_ms(timings.total),
                "cloud request failed"
            ),
        }
        // The exchange (and with it the connection) is gone; record what it
        // found, then free the slot, before the caller can see the result
        // (the next admission must see the updated health).
        drop(watch);
        drop(permit);
        CloudDiagnostic {
            result,
            http_status: probe.status,
            timings,
        }
    }
}

/// Hands one request's observation to the lane's health when dropped.
struct HealthWatch<'a> {
    health: &'a Health,
    observation: Observation,
}

impl Drop for HealthWatch<'_> {
    fn drop(&mut self) {
        let obs = std::mem::replace(&mut self.observation, Observation::Neutral);
        self.health.observe(obs);
    }
}

/// What was measured so far.
#[derive(Debug)]
struct Probe {
    started: Instant,
    status: Option<u16>,
    timings: CloudTimings,
}

impl Probe {
    fn since_start(&self) -> Duration {
        self.started.elapsed()
    }
}
