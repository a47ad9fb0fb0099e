//! Reading a response body under every wait of the job (cancellation,
//! deadline, stall timer) and the body cap, draining it for reuse after
//! `[DONE]`, and the errors any body reading ends in. It must not parse
//! answers (`stream` does, whole or streamed), so it imports nothing from
//! `stream`.

use super::{Inner, DRAIN_GRACE, MAX_DETAIL_CHARS};
use crate::error::CloudError;
use crate::net;
use crate::status;
use bytes::Bytes;
use edgecloud_core::lane::{CancellationToken, FinishReason};
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
    /// Reads a whole (non-streamed) body, under the reader's waits and
    /// cap; a stop, stall or broken read becomes its error.
    pub(super) async fn read_to_end(
        &self,
        reader: &mut BodyReader<'_>,
        status: u16,
    ) -> Result<Vec<u8>, CloudError> {
        let mut body = Vec::new();
        loop {
            match reader.next().await? {
                Next::Data(bytes) => body.extend_from_slice(&bytes),
                Next::End => return Ok(body),
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
