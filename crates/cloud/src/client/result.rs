//! What a cloud call returns: the answer, the provider's token counts,
//! where the time went, and the diagnostic form that keeps them on
//! failure too. Plain data; nothing here sends or reads.

use crate::error::CloudError;
use edgecloud_core::lane::FinishReason;
use edgecloud_wire::openai::Usage;
use serde::Serialize;
use std::time::Duration;

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
    /// Of the completion tokens, the reasoning ones, when it said
    /// (`completion_tokens_details.reasoning_tokens`).
    pub reasoning_tokens: Option<u64>,
    /// Of the prompt tokens, those served from the provider's prompt
    /// cache, when it said (`usage.prompt_tokens_details.cached_tokens`).
    pub cached_prompt_tokens: Option<u64>,
}

impl ProviderUsage {
    pub(super) fn from_wire(w: Usage) -> Option<Self> {
        let (prompt, completion) = (w.prompt_tokens?, w.completion_tokens?);
        Some(Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: w.total_tokens.unwrap_or(prompt + completion),
            reasoning_tokens: w.completion_tokens_details.and_then(|d| d.reasoning_tokens),
            cached_prompt_tokens: w.prompt_tokens_details.and_then(|d| d.cached_tokens),
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
    /// `Cancelled`): the answer, a reasoning model's thinking apart.
    pub text: String,
    /// A reasoning model's thinking: the provider's `reasoning_content`
    /// (or `reasoning`), or a `<think>` block opening its content (see
    /// `edgecloud_core::reasoning`).
    pub reasoning: Option<String>,
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
    /// The tool calls the provider returned (names and arguments as sent).
    pub tool_calls: Vec<edgecloud_core::tools::ToolCall>,
    /// Per-token log-probabilities, when asked for and sent.
    pub logprobs: Option<Vec<edgecloud_core::lane::TokenLogprob>>,
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
