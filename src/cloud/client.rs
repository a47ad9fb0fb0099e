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

use super::config::CloudConfig;
use super::endpoint::Endpoint;
use super::error::CloudError;
use super::health::{Admission, CloudHealth, Health, Observation};
use super::net::{self, ConnectProbe};
use super::secret::Scrubber;
use super::sse::{SseDecoder, SseError, SseEvent};
use super::status;
use crate::lane::{CancellationToken, FinishReason, LaneJob, TokenSink};
use crate::openai::{self, ChatChunk, ChatCompletion, ChatRequest, Usage};
use crate::request::InvalidRequest;
use bytes::Bytes;
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde::Serialize;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::time::Instant as TokioInstant;

/// Longest error body read from a non-success response.
const MAX_ERROR_BODY: usize = 64 << 10;
/// After `[DONE]`, how long a background task waits for the end of the
/// body so the connection can go back to the pool (bounded by the deadline
/// too). The call itself does not wait.
const DRAIN_GRACE: Duration = Duration::from_millis(100);
/// Longest parser complaint kept in an error.
const MAX_DETAIL_CHARS: usize = 300;

/// Token counts exactly as the provider reported them. Never estimated:
/// when a provider sends no usage, [`CloudCompletion::usage`] is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProviderUsage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens generated (for reasoning models this includes hidden
    /// reasoning tokens).
    pub completion_tokens: u64,
    /// The provider's total; when it sent none, the sum of the two above.
    pub total_tokens: u64,
}

impl ProviderUsage {
    fn from_wire(w: Usage) -> Option<Self> {
        let (prompt, completion) = (w.prompt_tokens?, w.completion_tokens?);
        Some(Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: w.total_tokens.unwrap_or(prompt + completion),
        })
    }
}

/// Where the time went, each measured from the start of the call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CloudTimings {
    /// Opening a new connection (DNS, TCP, TLS); `None` when a pooled
    /// connection was reused or none was opened.
    pub connect: Option<Duration>,
    /// Response headers received (time to first byte).
    pub ttfb: Option<Duration>,
    /// First non-empty content delta (time to first token). For a
    /// non-streamed response: the whole body parsed.
    pub ttft: Option<Duration>,
    /// Last non-empty content delta.
    pub last_token: Option<Duration>,
    /// The whole call, up to just before it returned.
    pub total: Duration,
}

/// A finished (possibly partial) answer from the cloud lane.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CloudCompletion {
    /// The generated text (partial when `finish_reason` is `Deadline` or
    /// `Cancelled`).
    pub text: String,
    /// Why generation ended. Provider reasons other than `length` (`stop`,
    /// `content_filter`, `tool_calls`, none at all) map to `Stop`; see
    /// `provider_finish_reason` for the original.
    pub finish_reason: FinishReason,
    /// The provider's own `finish_reason`, if it sent one.
    pub provider_finish_reason: Option<String>,
    /// Token counts from the provider; `None` when it sent none.
    pub usage: Option<ProviderUsage>,
    /// The response's HTTP status.
    pub http_status: u16,
    /// Where the time went.
    pub timings: CloudTimings,
    /// The model name the server echoed, if any.
    pub model: Option<String>,
    /// Whether the answer came as server-sent events.
    pub streamed: bool,
}

impl CloudCompletion {
    /// Generation speed in tokens per second: provider completion tokens
    /// after the first, over the time from first to last content delta.
    /// `None` without provider usage, with fewer than two tokens, or when
    /// the answer arrived in one piece (not streamed).
    pub fn gen_tokens_per_s(&self) -> Option<f64> {
        let n = self.usage?.completion_tokens;
        let span = self.timings.last_token?.checked_sub(self.timings.ttft?)?;
        (n >= 2 && !span.is_zero()).then(|| (n - 1) as f64 / span.as_secs_f64())
    }
}

/// A call's result together with what was measured on the way, also on
/// failure (a 401 still has a status and a time to first byte).
#[derive(Debug)]
pub struct CloudDiagnostic {
    /// The answer or the error.
    pub result: Result<CloudCompletion, CloudError>,
    /// The HTTP status, if response headers arrived.
    pub http_status: Option<u16>,
    /// Timings so far.
    pub timings: CloudTimings,
}

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
    /// comes back with [`FinishReason::Deadline`] or
    /// [`FinishReason::Cancelled`]. Before it, the result is
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
            model = %inner.config.model,
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
                total_ms = crate::millis::to_ms(timings.total),
                "cloud request ended"
            ),
            Err(e) => tracing::debug!(
                kind = e.kind().as_str(),
                status = ?probe.status,
                error = %e,
                total_ms = crate::millis::to_ms(timings.total),
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

/// One read of the response body, bounded by cancellation, deadline and the
/// stall timer.
enum Next {
    Data(Bytes),
    End,
    Stopped(FinishReason),
    Stalled(Duration),
    Broken(String),
}

struct BodyReader<'a> {
    response: reqwest::Response,
    deadline: TokioInstant,
    cancel: &'a CancellationToken,
    stall: Duration,
    read: usize,
    cap: usize,
}

impl BodyReader<'_> {
    async fn next(&mut self) -> Result<Next, CloudError> {
        // Checked before every read: a server that never pauses must not
        // outrun the deadline (a ready read would otherwise always win).
        if self.cancel.is_cancelled() {
            return Ok(Next::Stopped(FinishReason::Cancelled));
        }
        let now = TokioInstant::now();
        if now >= self.deadline {
            return Ok(Next::Stopped(FinishReason::Deadline));
        }
        let stall_at = now + self.stall;
        let wake = stall_at.min(self.deadline);
        let read = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Ok(Next::Stopped(FinishReason::Cancelled)),
            r = tokio::time::timeout_at(wake, self.response.chunk()) => r,
        };
        Ok(match read {
            Err(_elapsed) if stall_at < self.deadline => Next::Stalled(self.stall),
            Err(_elapsed) => Next::Stopped(FinishReason::Deadline),
            Ok(Ok(Some(bytes))) => {
                self.read += bytes.len();
                if self.read > self.cap {
                    return Err(CloudError::BodyTooLarge { limit: self.cap });
                }
                Next::Data(bytes)
            }
            Ok(Ok(None)) => Next::End,
            Ok(Err(e)) => Next::Broken(net::body_error_text(e)),
        })
    }

    /// Hands the rest of the body to a background task that reads it for
    /// a short while, so the connection can go back to the pool; the caller
    /// returns at once. Anything odd (more data than the cap, no end in
    /// time) just drops the connection.
    fn release_for_reuse(self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut response = self.response;
        let until = (TokioInstant::now() + DRAIN_GRACE).min(self.deadline);
        let mut left = self.cap.saturating_sub(self.read);
        runtime.spawn(async move {
            while let Ok(Ok(Some(bytes))) = tokio::time::timeout_at(until, response.chunk()).await {
                match left.checked_sub(bytes.len()) {
                    Some(l) => left = l,
                    None => return,
                }
            }
        });
    }
}

/// What a stream has delivered so far.
#[derive(Default)]
struct StreamState {
    text: String,
    provider_finish: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
    saw_choice: bool,
    done: bool,
}

impl Inner {
    async fn exchange(
        &self,
        job: &mut LaneJob,
        probe: &mut Probe,
    ) -> Result<CloudCompletion, CloudError> {
        if job.messages.is_empty() {
            return Err(InvalidRequest::new("a request needs at least one message").into());
        }
        job.sampling.validate()?;
        if job.cancel.is_cancelled() {
            return Err(CloudError::Cancelled);
        }
        if Instant::now() >= job.deadline {
            return Err(CloudError::DeadlineBeforeHeaders);
        }
        let deadline = TokioInstant::from_std(job.deadline);
        let cfg = &self.config;
        let body = ChatRequest::new(
            &cfg.model,
            &job.messages,
            &job.sampling,
            cfg.stream,
            cfg.stream_usage,
            cfg.send_top_k,
        );
        let body = serde_json::to_vec(&body).expect("the request body is plain data");
        let accept = if cfg.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut request = self
            .client
            .post(self.endpoint.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, accept)
            .body(body);
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }

        let connect = Arc::new(ConnectProbe::default());
        let send = net::with_connect_probe(Arc::clone(&connect), request.send());
        let response = tokio::select! {
            biased;
            _ = job.cancel.cancelled() => return Err(CloudError::Cancelled),
            _ = tokio::time::sleep_until(deadline) => return Err(CloudError::DeadlineBeforeHeaders),
            r = send => r.map_err(|e| net::classify_send_error(e, &self.endpoint, cfg))?,
        };
        probe.timings.connect = connect.elapsed();
        probe.timings.ttfb = Some(probe.since_start());
        let status = response.status().as_u16();
        probe.status = Some(status);

        let header_bytes: usize = response
            .headers()
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum();
        if header_bytes > cfg.limits.max_header_bytes {
            return Err(CloudError::HeadersTooLarge {
                limit: cfg.limits.max_header_bytes,
            });
        }

        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|ct| ct.trim().to_ascii_lowercase())
            .filter(|ct| !ct.is_empty())
            // Without a content type, trust what we asked for; with one,
            // only an event stream is read as one (an HTML error page from
            // a proxy must not pass for an empty stream).
            .map_or(cfg.stream, |ct| ct.starts_with("text/event-stream"));

        if !response.status().is_success() {
            return Err(self.status_error(response, deadline, &job.cancel).await);
        }
        if let Some(len) = response.content_length() {
            if len > cfg.limits.max_body_bytes as u64 {
                return Err(CloudError::BodyTooLarge {
                    limit: cfg.limits.max_body_bytes,
                });
            }
        }
        let mut reader = BodyReader {
            response,
            deadline,
            cancel: &job.cancel,
            stall: cfg.stall_timeout,
            read: 0,
            cap: cfg.limits.max_body_bytes,
        };
        if is_sse {
            self.read_stream(reader, &mut job.on_token, probe, status)
                .await
        } else {
            self.read_whole(&mut reader, &mut job.on_token, probe, status)
                .await
        }
    }

    async fn status_error(
        &self,
        response: reqwest::Response,
        deadline: TokioInstant,
        cancel: &CancellationToken,
    ) -> CloudError {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let cap = MAX_ERROR_BODY.min(self.config.limits.max_body_bytes);
        let mut reader = BodyReader {
            response,
            deadline,
            cancel,
            stall: self.config.stall_timeout,
            read: 0,
            cap: usize::MAX,
        };
        let mut body = Vec::new();
        // Whatever arrives before the body ends, the cap, the deadline or a
        // stall is the message; the status alone already decides the variant.
        while let Ok(Next::Data(bytes)) = reader.next().await {
            body.extend_from_slice(&bytes);
            if body.len() >= cap {
                body.truncate(cap);
                break;
            }
        }
        status::error_for(status, &headers, &body, &self.scrubber, SystemTime::now())
    }

    async fn read_stream(
        &self,
        mut reader: BodyReader<'_>,
        sink: &mut Option<TokenSink>,
        probe: &mut Probe,
        status: u16,
    ) -> Result<CloudCompletion, CloudError> {
        let limits = &self.config.limits;
        let mut decoder = SseDecoder::new(limits.max_line_bytes);
        let mut events: Vec<SseEvent> = Vec::new();
        let mut st = StreamState::default();
        let sse_error = |e: SseError| match e {
            SseError::LineTooLong => CloudError::LineTooLong {
                limit: limits.max_line_bytes,
            },
            SseError::InvalidUtf8 => CloudError::InvalidUtf8,
        };
        while !st.done {
            match reader.next().await? {
                Next::Data(bytes) => decoder.push(&bytes, &mut events).map_err(sse_error)?,
                Next::End => {
                    decoder.finish(&mut events);
                    for ev in events.drain(..) {
                        self.on_event(ev, &mut st, sink, probe)?;
                        if st.done {
                            break;
                        }
                    }
                    if st.done {
                        break;
                    }
                    return Err(CloudError::Truncated {
                        partial: st.text,
                        detail: None,
                    });
                }
                Next::Stopped(reason) => {
                    if probe.timings.ttft.is_none() {
                        return Err(stopped_error(reason, status));
                    }
                    return Ok(self.completion(st, reason, status, true));
                }
                Next::Stalled(waited) => {
                    return Err(CloudError::Stalled {
                        waited,
                        partial: st.text,
                    })
                }
                Next::Broken(detail) => {
                    return Err(CloudError::Truncated {
                        partial: st.text,
                        detail: Some(self.scrubber.scrub(&detail, MAX_DETAIL_CHARS)),
                    })
                }
            }
            for ev in events.drain(..) {
                self.on_event(ev, &mut st, sink, probe)?;
                if st.done {
                    break;
                }
            }
        }
        if !st.saw_choice {
            return Err(CloudError::EmptyChoices);
        }
        reader.release_for_reuse();
        let reason = match st.provider_finish.as_deref() {
            Some("length") | Some("max_tokens") => FinishReason::Length,
            _ => FinishReason::Stop,
        };
        Ok(self.completion(st, reason, status, true))
    }

    fn on_event(
        &self,
        ev: SseEvent,
        st: &mut StreamState,
        sink: &mut Option<TokenSink>,
        probe: &mut Probe,
    ) -> Result<(), CloudError> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            st.done = true;
            return Ok(());
        }
        if ev.event.as_deref() == Some("error") {
            let (message, code) = serde_json::from_str(data)
                .ok()
                .and_then(|v| openai::provider_error(&v))
                .unwrap_or_else(|| (data.to_owned(), None));
            return Err(self.provider_error(message, code));
        }
        // Fast path: straight into the chunk type. Error objects are rare;
        // they are looked for only when the chunk says so or does not parse.
        let chunk = match serde_json::from_str::<ChatChunk>(data) {
            Ok(chunk) if !chunk.may_be_error() => chunk,
            parsed => {
                let value: Option<serde_json::Value> = serde_json::from_str(data).ok();
                if let Some((message, code)) = value.as_ref().and_then(openai::provider_error) {
                    return Err(self.provider_error(message, code));
                }
                parsed.map_err(|e| self.malformed(&e))?
            }
        };
        if chunk.model.is_some() {
            st.model = chunk.model;
        }
        if chunk.usage.is_some() {
            st.usage = chunk.usage;
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            st.saw_choice = true;
            if let Some(content) = choice.delta.and_then(|d| d.content) {
                self.append(&mut st.text, &content, sink, probe)?;
            }
            if choice.finish_reason.is_some() {
                st.provider_finish = choice.finish_reason;
            }
        }
        Ok(())
    }

    /// Adds generated text, enforcing the content cap and feeding the sink.
    fn append(
        &self,
        text: &mut String,
        content: &str,
        sink: &mut Option<TokenSink>,
        probe: &mut Probe,
    ) -> Result<(), CloudError> {
        if content.is_empty() {
            return Ok(());
        }
        let limit = self.config.limits.max_content_bytes;
        if text.len() + content.len() > limit {
            return Err(CloudError::ContentTooLarge { limit });
        }
        let at = probe.since_start();
        probe.timings.ttft.get_or_insert(at);
        probe.timings.last_token = Some(at);
        text.push_str(content);
        if let Some(sink) = sink.as_mut() {
            // A panicking sink must not unwind through the lane: the
            // exchange is dropped and the caller gets a clear error.
            std::panic::catch_unwind(AssertUnwindSafe(|| sink(content)))
                .map_err(|_| CloudError::SinkPanicked)?;
        }
        Ok(())
    }

    async fn read_whole(
        &self,
        reader: &mut BodyReader<'_>,
        sink: &mut Option<TokenSink>,
        probe: &mut Probe,
        status: u16,
    ) -> Result<CloudCompletion, CloudError> {
        let mut body = Vec::new();
        loop {
            match reader.next().await? {
                Next::Data(bytes) => body.extend_from_slice(&bytes),
                Next::End => break,
                Next::Stopped(reason) => return Err(stopped_error(reason, status)),
                Next::Stalled(waited) => {
                    return Err(CloudError::Stalled {
                        waited,
                        partial: String::new(),
                    })
                }
                Next::Broken(detail) => {
                    return Err(CloudError::Truncated {
                        partial: String::new(),
                        detail: Some(self.scrubber.scrub(&detail, MAX_DETAIL_CHARS)),
                    })
                }
            }
        }
        let text = std::str::from_utf8(&body).map_err(|_| CloudError::InvalidUtf8)?;
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| self.malformed(&e))?;
        if let Some((message, code)) = openai::provider_error(&value) {
            return Err(self.provider_error(message, code));
        }
        let response: ChatCompletion =
            serde_json::from_value(value).map_err(|e| self.malformed(&e))?;
        let mut choices = response.choices;
        let pos = choices.iter().position(|c| c.index == 0).unwrap_or(0);
        if choices.is_empty() {
            return Err(CloudError::EmptyChoices);
        }
        let choice = choices.swap_remove(pos);
        let content = choice.message.and_then(|m| m.content).unwrap_or_default();
        let mut st = StreamState {
            provider_finish: choice.finish_reason,
            usage: response.usage,
            model: response.model,
            saw_choice: true,
            done: true,
            ..StreamState::default()
        };
        self.append(&mut st.text, &content, sink, probe)?;
        if probe.timings.ttft.is_none() {
            // An empty answer still arrived: its "first token" time is now.
            let at = probe.since_start();
            probe.timings.ttft = Some(at);
            probe.timings.last_token = Some(at);
        }
        let reason = match st.provider_finish.as_deref() {
            Some("length") | Some("max_tokens") => FinishReason::Length,
            _ => FinishReason::Stop,
        };
        Ok(self.completion(st, reason, status, false))
    }

    fn completion(
        &self,
        st: StreamState,
        reason: FinishReason,
        status: u16,
        streamed: bool,
    ) -> CloudCompletion {
        CloudCompletion {
            text: st.text,
            finish_reason: reason,
            provider_finish_reason: if reason.is_complete() {
                st.provider_finish
            } else {
                None
            },
            usage: st.usage.and_then(ProviderUsage::from_wire),
            http_status: status,
            timings: CloudTimings::default(),
            model: st.model,
            streamed,
        }
    }

    fn malformed(&self, e: &serde_json::Error) -> CloudError {
        CloudError::MalformedJson {
            detail: self.scrubber.scrub(&e.to_string(), MAX_DETAIL_CHARS),
        }
    }

    fn provider_error(&self, message: String, code: Option<String>) -> CloudError {
        CloudError::Provider {
            message: self.scrubber.scrub(&message, status::MAX_MESSAGE_CHARS),
            code: code.map(|c| self.scrubber.scrub(&c, 100)),
        }
    }
}

fn stopped_error(reason: FinishReason, status: u16) -> CloudError {
    match reason {
        FinishReason::Cancelled => CloudError::Cancelled,
        _ => CloudError::DeadlineBeforeFirstToken { status },
    }
}
