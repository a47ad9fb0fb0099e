//! The stream's state machine: SSE events in, text to the job's sink and
//! the finish reason, usage and model out, until `[DONE]` (or an error
//! event, a cut, a stall). Whole (non-streamed) answers are read here too
//! and end through the same state (`completion`).

use super::body::{stopped_error, BodyReader, Next};
use super::result::ProviderUsage;
use super::{Inner, Probe, MAX_DETAIL_CHARS};
use crate::error::CloudError;
use crate::sse::{SseDecoder, SseError, SseEvent};
use crate::{CloudCompletion, CloudTimings};
use edgecloud_core::lane::{FinishReason, LaneJob, TokenLogprob};
use edgecloud_core::reasoning::{Part, ReasoningSplitter};
use edgecloud_core::tools::{FunctionCall, ToolCall};
use edgecloud_wire::openai::{self, ChatChunk, ChatCompletion, ToolCallDelta, Usage};
use std::panic::AssertUnwindSafe;

/// What a stream has delivered so far.
#[derive(Default)]
pub(super) struct StreamState {
    pub(super) text: String,
    /// A reasoning model's thinking: the provider's `reasoning_content`,
    /// or a `<think>` block at the start of its content.
    pub(super) reasoning: String,
    /// Splits a `<think>` block off the content as it arrives.
    pub(super) think: ReasoningSplitter,
    pub(super) provider_finish: Option<String>,
    pub(super) usage: Option<Usage>,
    pub(super) model: Option<String>,
    pub(super) saw_choice: bool,
    pub(super) done: bool,
    /// Tool calls so far, by their stream index.
    pub(super) tool_calls: Vec<ToolCall>,
    /// Per-token log-probabilities so far, when the provider sends them.
    pub(super) logprobs: Option<Vec<TokenLogprob>>,
}

impl StreamState {
    /// Adds a streamed piece of a tool call: a new call (id, name) or more
    /// of its arguments. Returns the bytes added, for the content cap.
    pub(super) fn add_tool_call(&mut self, d: ToolCallDelta) -> usize {
        let i = d.index as usize;
        while self.tool_calls.len() <= i {
            self.tool_calls.push(ToolCall {
                id: String::new(),
                kind: "function".into(),
                function: FunctionCall {
                    name: String::new(),
                    arguments: String::new(),
                },
            });
        }
        let call = &mut self.tool_calls[i];
        let mut added = 0;
        if let Some(id) = d.id {
            call.id = id;
        }
        if let Some(f) = d.function {
            if let Some(name) = f.name {
                added += name.len();
                call.function.name.push_str(&name);
            }
            if let Some(args) = f.arguments {
                added += args.len();
                call.function.arguments.push_str(&args);
            }
        }
        added
    }

    /// The tool-call bytes so far (they count against the content cap).
    pub(super) fn tool_call_bytes(&self) -> usize {
        self.tool_calls
            .iter()
            .map(|c| c.function.name.len() + c.function.arguments.len())
            .sum()
    }
}

impl Inner {
    pub(super) async fn read_stream(
        &self,
        mut reader: BodyReader<'_>,
        job: &mut LaneJob,
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
                        self.on_event(ev, &mut st, job, probe)?;
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
                self.on_event(ev, &mut st, job, probe)?;
                if st.done {
                    break;
                }
            }
        }
        if !st.saw_choice {
            return Err(CloudError::EmptyChoices);
        }
        self.end_content(&mut st, job, probe)?;
        reader.release_for_reuse();
        let reason = match st.provider_finish.as_deref() {
            Some("length") | Some("max_tokens") => FinishReason::Length,
            _ => FinishReason::Stop,
        };
        Ok(self.completion(st, reason, status, true))
    }

    pub(super) async fn read_whole(
        &self,
        reader: &mut BodyReader<'_>,
        job: &mut LaneJob,
        probe: &mut Probe,
        status: u16,
    ) -> Result<CloudCompletion, CloudError> {
        let body = self.read_to_end(reader, status).await?;
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
        let (content, tool_calls, reasoning) = choice
            .message
            .map(|m| {
                (
                    m.content.unwrap_or_default(),
                    m.tool_calls.unwrap_or_default(),
                    m.reasoning_content.filter(|r| !r.is_empty()),
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
        if let Some(r) = reasoning {
            self.append(&mut st, Part::Reasoning(&r), job, probe)?;
        }
        self.add_content(&mut st, &content, job, probe)?;
        self.end_content(&mut st, job, probe)?;
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

    pub(super) fn on_event(
        &self,
        ev: SseEvent,
        st: &mut StreamState,
        job: &mut LaneJob,
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
            if let Some(lp) = choice.logprobs.and_then(|l| l.content) {
                st.logprobs.get_or_insert_with(Vec::new).extend(lp);
            }
            let Some(delta) = choice.delta else {
                if choice.finish_reason.is_some() {
                    st.provider_finish = choice.finish_reason;
                }
                continue;
            };
            for d in delta.tool_calls.into_iter().flatten() {
                st.add_tool_call(d);
                self.check_tool_call_bytes(st)?;
            }
            if let Some(r) = delta.reasoning_content {
                self.append(st, Part::Reasoning(&r), job, probe)?;
            }
            if let Some(content) = delta.content {
                self.add_content(st, &content, job, probe)?;
            }
            if choice.finish_reason.is_some() {
                st.provider_finish = choice.finish_reason;
            }
        }
        Ok(())
    }

    /// Tool-call names and arguments count against the content cap.
    pub(super) fn check_tool_call_bytes(&self, st: &StreamState) -> Result<(), CloudError> {
        let limit = self.config.limits.max_content_bytes;
        if st.text.len() + st.reasoning.len() + st.tool_call_bytes() > limit {
            return Err(CloudError::ContentTooLarge { limit });
        }
        Ok(())
    }

    /// Adds generated content: a `<think>` block at its start goes to the
    /// thinking (a provider that does not split it off itself), the rest
    /// to the answer.
    pub(super) fn add_content(
        &self,
        st: &mut StreamState,
        content: &str,
        job: &mut LaneJob,
        probe: &mut Probe,
    ) -> Result<(), CloudError> {
        let mut parts: Vec<(bool, String)> = Vec::new();
        st.think.push(content, &mut |p| parts.push(owned(p)));
        self.append_parts(st, parts, job, probe)
    }

    /// Ends the content: what the `<think>` splitter held back goes out.
    pub(super) fn end_content(
        &self,
        st: &mut StreamState,
        job: &mut LaneJob,
        probe: &mut Probe,
    ) -> Result<(), CloudError> {
        let mut parts: Vec<(bool, String)> = Vec::new();
        st.think.finish(&mut |p| parts.push(owned(p)));
        self.append_parts(st, parts, job, probe)
    }

    fn append_parts(
        &self,
        st: &mut StreamState,
        parts: Vec<(bool, String)>,
        job: &mut LaneJob,
        probe: &mut Probe,
    ) -> Result<(), CloudError> {
        for (answer, text) in parts {
            let part = if answer {
                Part::Answer(&text)
            } else {
                Part::Reasoning(&text)
            };
            self.append(st, part, job, probe)?;
        }
        Ok(())
    }

    /// Adds generated text (answer or thinking), enforcing the content cap
    /// over both and feeding the job's sinks.
    pub(super) fn append(
        &self,
        st: &mut StreamState,
        part: Part<'_>,
        job: &mut LaneJob,
        probe: &mut Probe,
    ) -> Result<(), CloudError> {
        let (Part::Answer(content) | Part::Reasoning(content)) = part;
        if content.is_empty() {
            return Ok(());
        }
        let limit = self.config.limits.max_content_bytes;
        if st.text.len() + st.reasoning.len() + content.len() > limit {
            return Err(CloudError::ContentTooLarge { limit });
        }
        let at = probe.since_start();
        probe.timings.ttft.get_or_insert(at);
        probe.timings.last_token = Some(at);
        match part {
            Part::Answer(_) => st.text.push_str(content),
            Part::Reasoning(_) => st.reasoning.push_str(content),
        }
        // A panicking sink must not unwind through the lane: the
        // exchange is dropped and the caller gets a clear error.
        std::panic::catch_unwind(AssertUnwindSafe(|| job.emit(part)))
            .map_err(|_| CloudError::SinkPanicked)?;
        Ok(())
    }

    pub(super) fn completion(
        &self,
        st: StreamState,
        reason: FinishReason,
        status: u16,
        streamed: bool,
    ) -> CloudCompletion {
        CloudCompletion {
            text: st.text,
            reasoning: (!st.reasoning.is_empty()).then_some(st.reasoning),
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
            tool_calls: st.tool_calls,
            logprobs: st.logprobs,
        }
    }
}

/// A part as (is answer, text), to hand on after the splitter's borrow.
fn owned(p: Part<'_>) -> (bool, String) {
    match p {
        Part::Answer(t) => (true, t.to_string()),
        Part::Reasoning(t) => (false, t.to_string()),
    }
}
