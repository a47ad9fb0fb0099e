//! `POST /v1/responses` (the Responses API, stateless) as a response: the
//! whole response object and the stream's [`Shape`], the event sequence
//! the official clients parse (`response.created`,
//! `response.in_progress`, the message item with its `output_text` part
//! and deltas, each function call's item with its argument deltas,
//! `response.completed`, or `response.incomplete` at `max_output_tokens`;
//! `error` then `response.failed` for a failure after the first byte),
//! each event with its `sequence_number`. The request is read by `wire`
//! over `openai::parse_responses` (the one home of the mapping) and runs
//! like a chat request (`http`). It must not parse requests or choose
//! lanes.

use super::engine::Summary;
use super::respond::{extension, json_response, usage, Body};
use super::stream::Shape;
use super::wire::ApiError;
use edgecloud_wire::openai::{fields, Ending, Meta};
use hyper::Response;
use serde_json::{json, Value};

fn ending(finish: &str) -> Ending {
    if finish == "length" {
        Ending::Incomplete
    } else {
        Ending::Completed
    }
}

fn status(e: Ending) -> &'static str {
    match e {
        Ending::Completed => "completed",
        Ending::Incomplete => "incomplete",
    }
}

/// The finished response object of a run that succeeded.
fn finished(meta: &Meta, summary: &Summary, text: &str, finish: &str) -> Value {
    let mut object = meta.object(
        status(ending(finish)),
        meta.output(summary.reasoning.as_deref(), text, &summary.tool_calls),
        Some(usage(summary)),
        None,
    );
    object["edgecloud"] = extension(summary);
    object
}

/// A whole response.
pub(crate) fn whole(meta: &Meta, summary: &Summary, text: &str, finish: &str) -> Response<Body> {
    json_response(200, &finished(meta, summary, text, finish))
}

/// A streamed response.
pub(crate) struct Stream {
    meta: Meta,
    /// The reasoning item: not begun, open (thinking is streaming), or
    /// done (then it is output 0 and the message output 1).
    reasoning: Item,
    /// The thinking sent so far.
    thinking: String,
    /// The message item is open (its text is streaming).
    message_open: bool,
    /// The text sent so far.
    text: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Item {
    None,
    Open,
    Done,
}

impl Stream {
    pub(crate) fn new(meta: Meta) -> Self {
        Self {
            meta,
            reasoning: Item::None,
            thinking: String::new(),
            message_open: false,
            text: String::new(),
        }
    }

    /// The message item's output index: after the reasoning item, if any.
    fn message_index(&self) -> usize {
        usize::from(self.reasoning != Item::None)
    }

    /// `response.output_item.added` of the reasoning item.
    fn open_reasoning(&mut self, out: &mut Vec<u8>) {
        self.reasoning = Item::Open;
        let item = self.meta.reasoning_item(None, "in_progress");
        let added = self.meta.event(
            "response.output_item.added",
            fields(json!({"item": item, "output_index": 0})),
        );
        out.extend_from_slice(added.as_bytes());
    }

    /// `response.reasoning_text.done` and `response.output_item.done` of
    /// the reasoning item, when it is open.
    fn close_reasoning(&mut self, out: &mut Vec<u8>, thinking: &str) {
        if self.reasoning != Item::Open {
            return;
        }
        self.reasoning = Item::Done;
        let id = self.meta.reasoning_id();
        let events = [
            (
                "response.reasoning_text.done",
                json!({"content_index": 0, "item_id": id, "output_index": 0, "text": thinking}),
            ),
            (
                "response.output_item.done",
                json!({"item": self.meta.reasoning_item(Some(thinking), "completed"),
                    "output_index": 0}),
            ),
        ];
        for (kind, f) in events {
            out.extend_from_slice(self.meta.event(kind, fields(f)).as_bytes());
        }
    }

    /// `response.output_item.added` and `response.content_part.added` of
    /// the message item.
    fn open_message(&mut self, out: &mut Vec<u8>) {
        let thinking = std::mem::take(&mut self.thinking);
        self.close_reasoning(out, &thinking);
        self.message_open = true;
        let at = self.message_index();
        let item = self.meta.message_item(None, "in_progress");
        let id = self.meta.message_id();
        let added = self.meta.event(
            "response.output_item.added",
            fields(json!({"item": item, "output_index": at})),
        );
        let part = self.meta.event(
            "response.content_part.added",
            fields(
                json!({"content_index": 0, "item_id": id, "output_index": at,
                "part": Meta::text_part("")}),
            ),
        );
        out.extend_from_slice(added.as_bytes());
        out.extend_from_slice(part.as_bytes());
    }
}

impl Shape for Stream {
    fn opening(&mut self) -> Vec<u8> {
        let object = self.meta.object("in_progress", Vec::new(), None, None);
        let mut out = self
            .meta
            .event("response.created", fields(json!({"response": object})))
            .into_bytes();
        out.extend_from_slice(
            self.meta
                .event("response.in_progress", fields(json!({"response": object})))
                .as_bytes(),
        );
        out
    }

    fn text(&mut self, out: &mut Vec<u8>, piece: &str) {
        if !self.message_open {
            self.open_message(out);
        }
        self.text.push_str(piece);
        let id = self.meta.message_id();
        let at = self.message_index();
        let delta = self.meta.event(
            "response.output_text.delta",
            fields(json!({"content_index": 0, "delta": piece, "item_id": id,
                "logprobs": [], "output_index": at})),
        );
        out.extend_from_slice(delta.as_bytes());
    }

    /// Thinking streams in the reasoning item, output 0, before the
    /// message (`response.reasoning_text.delta`).
    fn reasoning(&mut self, out: &mut Vec<u8>, piece: &str) {
        if self.message_open {
            return;
        }
        if self.reasoning == Item::None {
            self.open_reasoning(out);
        }
        self.thinking.push_str(piece);
        let id = self.meta.reasoning_id();
        let delta = self.meta.event(
            "response.reasoning_text.delta",
            fields(json!({"content_index": 0, "delta": piece, "item_id": id, "output_index": 0})),
        );
        out.extend_from_slice(delta.as_bytes());
    }

    fn ending(&mut self, summary: &Summary, finish: &'static str) -> Vec<u8> {
        let calls = &summary.tool_calls;
        let mut out = Vec::new();
        // The answer is what the run settled on; the stream carried it.
        let text = summary.text.clone().unwrap_or_else(|| self.text.clone());
        let thinking = summary
            .reasoning
            .clone()
            .unwrap_or_else(|| self.thinking.clone());
        self.close_reasoning(&mut out, &thinking);
        if !self.message_open && (!text.is_empty() || calls.is_empty()) {
            self.open_message(&mut out);
        }
        let mut index = self.message_index();
        if self.message_open {
            let at = index;
            let id = self.meta.message_id();
            let events = [
                (
                    "response.output_text.done",
                    json!({"content_index": 0, "item_id": id, "logprobs": [],
                        "output_index": at, "text": text}),
                ),
                (
                    "response.content_part.done",
                    json!({"content_index": 0, "item_id": id, "output_index": at,
                        "part": Meta::text_part(&text)}),
                ),
                (
                    "response.output_item.done",
                    json!({"item": self.meta.message_item(Some(&text), "completed"),
                        "output_index": at}),
                ),
            ];
            for (kind, f) in events {
                out.extend_from_slice(self.meta.event(kind, fields(f)).as_bytes());
            }
            index += 1;
        }
        for (i, call) in calls.iter().enumerate() {
            let at = index + i;
            let id = self.meta.call_item_id(i);
            let events = [
                (
                    "response.output_item.added",
                    json!({"item": self.meta.call_item(i, call, false), "output_index": at}),
                ),
                (
                    "response.function_call_arguments.delta",
                    json!({"delta": call.function.arguments, "item_id": id, "output_index": at}),
                ),
                (
                    "response.function_call_arguments.done",
                    json!({"arguments": call.function.arguments, "item_id": id,
                        "name": call.function.name, "output_index": at}),
                ),
                (
                    "response.output_item.done",
                    json!({"item": self.meta.call_item(i, call, true), "output_index": at}),
                ),
            ];
            for (kind, f) in events {
                out.extend_from_slice(self.meta.event(kind, fields(f)).as_bytes());
            }
        }
        let object = finished(&self.meta, summary, &text, finish);
        let kind = match ending(finish) {
            Ending::Completed => "response.completed",
            Ending::Incomplete => "response.incomplete",
        };
        out.extend_from_slice(
            self.meta
                .event(kind, fields(json!({"response": object})))
                .as_bytes(),
        );
        out
    }

    fn failure(&mut self, e: &ApiError) -> Vec<u8> {
        let body = e.body().error;
        let error = self.meta.event(
            "error",
            fields(json!({"code": body.code, "message": body.message, "param": body.param})),
        );
        let object = self.meta.object(
            "failed",
            Vec::new(),
            None,
            Some(
                json!({"code": body.code.unwrap_or_else(|| "server_error".into()),
                "message": body.message}),
            ),
        );
        let failed = self
            .meta
            .event("response.failed", fields(json!({"response": object})));
        format!("{error}{failed}").into_bytes()
    }

    fn prompt_param(&self) -> &'static str {
        "input"
    }
}
