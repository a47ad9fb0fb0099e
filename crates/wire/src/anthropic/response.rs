//! What a Messages answer looks like: the whole `message` object
//! ([`message`]: its `content` blocks, `stop_reason`, `usage`), the
//! stream's events in Anthropic's order ([`Events`]: `message_start`,
//! `ping`, per block `content_block_start`, its `text_delta` or
//! `input_json_delta` deltas and `content_block_stop`, then
//! `message_delta` with the stop reason and usage, and `message_stop`;
//! an `error` event for a failure after the first byte), the error body,
//! and `count_tokens`' answer. It must not do I/O or know HTTP: the front
//! door chooses each error's status and `type`.

use crate::openai::{to_json, Ids};
use edgecloud_core::tools::ToolCall;
use serde_json::{json, Map, Value};

/// Why the model stopped, as Anthropic says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model ended its turn.
    EndTurn,
    /// `max_tokens` (or the context) was reached.
    MaxTokens,
    /// One of `stop_sequences` matched.
    StopSequence,
    /// The answer is one or more tool calls.
    ToolUse,
}

impl StopReason {
    /// Its wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::ToolUse => "tool_use",
        }
    }

    /// The reason for an answer: cut by its length, else its calls, else
    /// the stop sequence that ended it, else the end of the turn.
    pub fn of(cut_by_length: bool, has_calls: bool, stop_sequence: Option<&str>) -> Self {
        match (cut_by_length, has_calls, stop_sequence) {
            (true, _, _) => StopReason::MaxTokens,
            (false, true, _) => StopReason::ToolUse,
            (false, false, Some(_)) => StopReason::StopSequence,
            (false, false, None) => StopReason::EndTurn,
        }
    }
}

/// How a finished answer ended: its reason, the stop sequence when that
/// was it, and its token counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    pub reason: StopReason,
    pub stop_sequence: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A call's arguments as the `input` object a `tool_use` block holds
/// (`{}` when they are not a JSON object: a call cut by `max_tokens`).
fn input(call: &ToolCall) -> Value {
    match serde_json::from_str::<Value>(&call.function.arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

fn tool_use(call: &ToolCall) -> Value {
    json!({"id": call.id, "input": input(call), "name": call.function.name, "type": "tool_use"})
}

/// A `thinking` block: a reasoning model's thinking, with an empty
/// `signature` (nothing signs a local model's thinking; a client sending
/// it back is read as any thinking block is: skipped).
fn thinking_block(thinking: &str) -> Value {
    json!({"signature": "", "thinking": thinking, "type": "thinking"})
}

/// The `content` of an answer: its thinking as a `thinking` block (a
/// reasoning model's), its text as a text block (when it has text, or
/// nothing else), then one `tool_use` block per call.
pub fn content(reasoning: Option<&str>, text: &str, calls: &[ToolCall]) -> Vec<Value> {
    let mut out = Vec::with_capacity(calls.len() + 2);
    if let Some(r) = reasoning {
        out.push(thinking_block(r));
    }
    if !text.is_empty() || calls.is_empty() {
        out.push(json!({"text": text, "type": "text"}));
    }
    out.extend(calls.iter().map(tool_use));
    out
}

fn usage(input_tokens: u64, output_tokens: u64) -> Value {
    json!({"input_tokens": input_tokens, "output_tokens": output_tokens})
}

/// The `message` object: `content` and how it ended (`None`: not yet,
/// as `message_start` carries it).
pub fn message(ids: &Ids, content: Vec<Value>, ending: Option<&Ending>) -> Value {
    json!({
        "content": content,
        "id": ids.id,
        "model": ids.model,
        "role": "assistant",
        "stop_reason": ending.map(|e| e.reason.as_str()),
        "stop_sequence": ending.and_then(|e| e.stop_sequence.as_deref()),
        "type": "message",
        "usage": ending.map_or_else(|| usage(0, 0), |e| usage(e.input_tokens, e.output_tokens)),
    })
}

/// The body of an error: `{"type": "error", "error": {"type", "message"}}`
/// (`kind`: `invalid_request_error`, `not_found_error`, `api_error`, ...).
pub fn error_body(kind: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind}, "type": "error"})
}

/// `count_tokens`' answer.
pub fn tokens_count(input_tokens: u64) -> Value {
    json!({"input_tokens": input_tokens})
}

/// One server-sent event: `event: KIND` and its data, whose `type` is
/// `KIND` too.
pub fn event(kind: &str, mut data: Value) -> String {
    data["type"] = Value::String(kind.to_string());
    format!("event: {kind}\ndata: {}\n\n", to_json(&data))
}

/// The events of one streamed message, in order: `start` once, `text`
/// per piece (the text block opens on the first), then `finish` with the
/// calls and how it ended (or `error`).
#[derive(Debug, Clone)]
pub struct Events {
    ids: Ids,
    /// The index the next block takes.
    next_index: usize,
    /// The text block's index while it is open.
    text_block: Option<usize>,
    /// The thinking block's index while it is open.
    thinking_block: Option<usize>,
}

impl Events {
    pub fn new(ids: Ids) -> Self {
        Self {
            ids,
            next_index: 0,
            text_block: None,
            thinking_block: None,
        }
    }

    /// `message_start` (the message with no content yet) and a `ping`.
    pub fn start(&self) -> String {
        let mut out = event(
            "message_start",
            json!({"message": message(&self.ids, Vec::new(), None)}),
        );
        out.push_str(&event("ping", json!({})));
        out
    }

    /// A piece of a reasoning model's thinking: the thinking block's start
    /// on the first, then its `thinking_delta` (thinking comes before the
    /// text; a piece after the text has begun is not sent).
    pub fn thinking(&mut self, out: &mut String, piece: &str) {
        if self.text_block.is_some() {
            return;
        }
        let index = match self.thinking_block {
            Some(i) => i,
            None => {
                let i = self.open(out, thinking_block(""));
                self.thinking_block = Some(i);
                i
            }
        };
        out.push_str(&event(
            "content_block_delta",
            json!({"delta": {"thinking": piece, "type": "thinking_delta"}, "index": index}),
        ));
    }

    /// Ends the thinking block, when open: its (empty) `signature_delta`
    /// and its stop.
    fn close_thinking(&mut self, out: &mut String) {
        if let Some(i) = self.thinking_block.take() {
            out.push_str(&event(
                "content_block_delta",
                json!({"delta": {"signature": "", "type": "signature_delta"}, "index": i}),
            ));
            Self::close(out, i);
        }
    }

    /// A piece of text: the text block's start on the first, then its
    /// `text_delta`.
    pub fn text(&mut self, out: &mut String, piece: &str) {
        self.close_thinking(out);
        let index = match self.text_block {
            Some(i) => i,
            None => {
                let i = self.open(out, json!({"text": "", "type": "text"}));
                self.text_block = Some(i);
                i
            }
        };
        out.push_str(&event(
            "content_block_delta",
            json!({"delta": {"text": piece, "type": "text_delta"}, "index": index}),
        ));
    }

    fn open(&mut self, out: &mut String, block: Value) -> usize {
        let index = self.next_index;
        self.next_index += 1;
        out.push_str(&event(
            "content_block_start",
            json!({"content_block": block, "index": index}),
        ));
        index
    }

    fn close(out: &mut String, index: usize) {
        out.push_str(&event("content_block_stop", json!({"index": index})));
    }

    /// The end of a message that succeeded: the open text block's stop
    /// (or an empty text block, when the answer has neither text nor
    /// calls), each call as a `tool_use` block whose `input` comes as
    /// one `input_json_delta`, `message_delta` (stop reason, usage) and
    /// `message_stop`.
    pub fn finish(&mut self, calls: &[ToolCall], ending: &Ending) -> String {
        self.finish_with(calls, ending, Map::new())
    }

    /// [`Events::finish`], with `extra` fields on `message_delta` (the
    /// caller's own extensions).
    pub fn finish_with(
        &mut self,
        calls: &[ToolCall],
        ending: &Ending,
        extra: Map<String, Value>,
    ) -> String {
        let mut out = String::new();
        self.close_thinking(&mut out);
        if self.text_block.is_none() && calls.is_empty() {
            self.text(&mut out, "");
        }
        if let Some(i) = self.text_block.take() {
            Self::close(&mut out, i);
        }
        for call in calls {
            let i = self.open(
                &mut out,
                json!({"id": call.id, "input": {}, "name": call.function.name, "type": "tool_use"}),
            );
            let partial = to_json(&input(call));
            out.push_str(&event(
                "content_block_delta",
                json!({"delta": {"partial_json": partial, "type": "input_json_delta"}, "index": i}),
            ));
            Self::close(&mut out, i);
        }
        let mut delta = json!({
            "delta": {"stop_reason": ending.reason.as_str(),
                "stop_sequence": ending.stop_sequence},
            "usage": usage(ending.input_tokens, ending.output_tokens),
        });
        if let Value::Object(d) = &mut delta {
            d.extend(extra);
        }
        out.push_str(&event("message_delta", delta));
        out.push_str(&event("message_stop", json!({})));
        out
    }

    /// The event that ends a stream whose run failed after its first
    /// byte.
    pub fn error(kind: &str, message: &str) -> String {
        event("error", error_body(kind, message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Ids {
        Ids {
            id: "msg-edgecloud-4".into(),
            created: 1,
            model: "edgecloud".into(),
        }
    }

    /// (event name, data) of each event.
    fn parsed(s: &str) -> Vec<(String, Value)> {
        s.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let name = name.strip_prefix("event: ").unwrap().to_string();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(data["type"], name.as_str());
                (name, data)
            })
            .collect()
    }

    #[test]
    fn a_whole_message_holds_text_then_tool_use_blocks() {
        let calls = [ToolCall::new(
            "toolu_1",
            "get_weather",
            &json!({"city": "Oslo"}),
        )];
        let ending = Ending {
            reason: StopReason::of(false, true, None),
            stop_sequence: None,
            input_tokens: 9,
            output_tokens: 4,
        };
        let m = message(&ids(), content(None, "Checking.", &calls), Some(&ending));
        assert_eq!(m["type"], "message");
        assert_eq!(m["role"], "assistant");
        assert_eq!(
            m["content"][0],
            json!({"type": "text", "text": "Checking."})
        );
        assert_eq!(m["content"][1]["type"], "tool_use");
        assert_eq!(m["content"][1]["input"], json!({"city": "Oslo"}));
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(m["usage"], json!({"input_tokens": 9, "output_tokens": 4}));
        assert_eq!(
            content(None, "", &calls).len(),
            1,
            "no empty text beside a call"
        );
        assert_eq!(content(None, "", &[])[0]["text"], "");
        let cut = ToolCall {
            function: edgecloud_core::tools::FunctionCall {
                name: "f".into(),
                arguments: "{\"city\": \"Os".into(),
            },
            ..calls[0].clone()
        };
        assert_eq!(content(None, "", &[cut])[0]["input"], json!({}));
        assert_eq!(
            StopReason::of(false, false, Some("###")),
            StopReason::StopSequence
        );
        assert_eq!(StopReason::of(true, true, None), StopReason::MaxTokens);
        assert_eq!(
            error_body("not_found_error", "no"),
            json!({"type": "error", "error": {"type": "not_found_error", "message": "no"}})
        );
    }

    #[test]
    fn a_stream_opens_each_block_before_its_deltas_and_ends_with_message_stop() {
        let mut ev = Events::new(ids());
        let mut out = ev.start();
        ev.text(&mut out, "It is");
        ev.text(&mut out, " 12 C.");
        let calls = [ToolCall::new("toolu_1", "f", &json!({"a": 1}))];
        out.push_str(&ev.finish(
            &calls,
            &Ending {
                reason: StopReason::ToolUse,
                stop_sequence: None,
                input_tokens: 3,
                output_tokens: 5,
            },
        ));
        let events = parsed(&out);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(events[0].1["message"]["content"], json!([]));
        assert_eq!(events[0].1["message"]["stop_reason"], Value::Null);
        assert_eq!(events[2].1["content_block"]["type"], "text");
        assert_eq!(events[3].1["delta"]["text"], "It is");
        assert_eq!(events[6].1["index"], 1);
        assert_eq!(events[6].1["content_block"]["input"], json!({}));
        assert_eq!(events[7].1["delta"]["type"], "input_json_delta");
        assert_eq!(events[7].1["delta"]["partial_json"], "{\"a\":1}");
        assert_eq!(events[9].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[9].1["usage"]["input_tokens"], 3);
        // Nothing to say: one empty text block, as a message always has.
        let mut ev = Events::new(ids());
        let end = ev.finish(
            &[],
            &Ending {
                reason: StopReason::EndTurn,
                stop_sequence: None,
                input_tokens: 1,
                output_tokens: 0,
            },
        );
        let names: Vec<String> = parsed(&end).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let e = parsed(&Events::error("api_error", "decode failed"));
        assert_eq!(e[0].1["error"]["type"], "api_error");
    }
}
