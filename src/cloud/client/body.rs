//! Reading a response body under every wait of the job (cancellation,
//! deadline, stall timer) and the body cap, draining it for reuse after
//! `[DONE]`, and a whole (non-streamed) answer. It must not parse SSE
//! (`stream` does).

use super::stream::StreamState;
use super::{Inner, Probe, DRAIN_GRACE, MAX_DETAIL_CHARS};
use crate::cloud::error::CloudError;
use crate::cloud::net;
use crate::cloud::status;
use crate::cloud::CloudCompletion;
use crate::lane::{CancellationToken, FinishReason, TokenSink};
use crate::openai::{self, ChatCompletion};
use bytes::Bytes;
use std::time::Duration;
use tokio::time::Instant as TokioInstant;

/// One read of the response body, bounded by cancellation, deadline and the
/// stall timer.
pub(super) enum Next {
    Data(Bytes),
    End,
    Stopped(FinishReason),
    Stalled(Duration),
    Broken(String),
}

pub(super) struct BodyReader<'a> {
    pub(super) response: reqwest::Response,
    pub(super) deadline: TokioInstant,
    pub(super) cancel: &'a CancellationToken,
    pub(super) stall: Duration,
    pub(super) read: usize,
    pub(super) cap: usize,
}

impl BodyReader<'_> {
    pub(super) async fn next(&mut self) -> Result<Next, CloudError> {
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
    pub(super) fn release_for_reuse(self) {
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

impl Inner {
    pub(super) async fn read_whole(
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
        let (content, tool_calls) = choice
            .message
            .map(|m| {
                (
                    m.content.unwrap_or_default(),
                    m.tool_calls.unwrap_or_default(),
                )
            })
            .unwrap_or_default();
        let mut st = StreamState {
            provider_finish: choice.finish_reason,
            usage: response.usage,
            model: response.model,
            saw_choice: true,
            done: true,
            tool_calls,
            logprobs: choice.logprobs.and_then(|l| l.content),
            ..StreamState::default()
        };
        self.check_tool_call_bytes(&st)?;
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

    pub(super) fn malformed(&self, e: &serde_json::Error) -> CloudError {
        CloudError::MalformedJson {
            detail: self.scrubber.scrub(&e.to_string(), MAX_DETAIL_CHARS),
        }
    }

    pub(super) fn provider_error(&self, message: String, code: Option<String>) -> CloudError {
        CloudError::Provider {
            message: self.scrubber.scrub(&message, status::MAX_MESSAGE_CHARS),
            code: code.map(|c| self.scrubber.scrub(&c, 100)),
        }
    }
}

pub(super) fn stopped_error(reason: FinishReason, status: u16) -> CloudError {
    match reason {
        FinishReason::Cancelled => CloudError::Cancelled,
        _ => CloudError::DeadlineBeforeFirstToken { status },
    }
}
