//! `POST /v1/messages` and `POST /v1/messages/count_tokens` (Anthropic's
//! Messages API) on the server's side: a body read through
//! `edgecloud_wire::anthropic` (the one home of the mapping onto the chat
//! request), the `edgecloud` extension object and `Request::validate`
//! (its errors named as this body spells the field); the whole `message`
//! and the stream's [`Shape`]; and every error in Anthropic's shape and
//! statuses ([`error_response`]: `{"type": "error", "error": {"type",
//! "message"}}`; 529 `overloaded_error` where the OpenAI endpoints answer
//! 503, 500 `api_error` for a 502). The run itself goes the way every
//! generation request goes (`http`). It must not route requests or
//! choose lanes.

use super::engine::Summary;
use super::respond::{error_as, extension, json_response, usage, Body};
use super::stream::Shape;
use super::wire::{self, ApiError, ChatParams, Limits};
use edgecloud_core::request::{Request, RequestField};
use edgecloud_wire::anthropic::{self, Ending, Events, StopReason};
use edgecloud_wire::openai::Ids;
use hyper::Response;
use serde_json::Map;

/// The status Anthropic sends an error of ours with, and its `type`.
fn status_and_type(status: u16) -> (u16, &'static str) {
    match status {
        400 => (400, "invalid_request_error"),
        401 => (401, "authentication_error"),
        403 => (403, "permission_error"),
        404 => (404, "not_found_error"),
        405 => (405, "invalid_request_error"),
        408 | 504 => (status, "timeout_error"),
        413 => (413, "request_too_large"),
        429 => (429, "rate_limit_error"),
        // Busy, down or stopping: Anthropic's "temporarily overloaded",
        // which its clients retry (after `Retry-After`).
        503 => (529, "overloaded_error"),
        _ => (500, "api_error"),
    }
}

/// An error as Anthropic's clients read it.
pub(crate) fn error_response(e: &ApiError) -> Response<Body> {
    let (status, kind) = status_and_type(e.status());
    error_as(e, status, &anthropic::error_body(kind, &e.described()))
}

/// Reads a Messages body (`create`) or a `count_tokens` body: the
/// chat parameters its run (or count) takes.
pub(crate) fn parse(
    body: &[u8],
    limits: Limits,
    kind: anthropic::Body,
) -> Result<ChatParams, ApiError> {
    let obj = wire::json_object(body)?;
    let (body, extra) = anthropic::parse_messages(&obj, kind)?;
    if body.messages.len() > limits.max_messages {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "`messages` makes {} messages; this server accepts at most {}",
                body.messages.len(),
                limits.max_messages
            ),
        )
        .code("too_many_messages"));
    }
    let (policy, deadline) =
        wire::extension(wire::present(&extra, "edgecloud"), limits.max_deadline)?;
    let request = Request {
        id: None,
        messages: body.messages.clone(),
        sampling: body.sampling(wire::defaults(limits)),
        deadline,
    };
    request
        .validate()
        .map_err(|e| {
            wire::invalid_as(e, |field| match field {
                RequestField::Stop(_) => None,
                RequestField::ResponseFormat => Some("output_config.format"),
                _ => None,
            })
        })
        .map_err(|mut e| {
            // `stop[1]` in the chat spelling is `stop_sequences.1` here.
            if let Some(i) = e.param.as_deref().and_then(|p| p.strip_prefix("stop[")) {
                e.param = Some(format!("stop_sequences.{}", i.trim_end_matches(']')));
            }
            e
        })?;
    Ok(ChatParams {
        include_usage: false,
        stream: body.stream,
        model: body.model,
        messages: request.messages,
        sampling: request.sampling,
        policy,
        deadline,
    })
}

/// How an answer ended, as Anthropic says it.
fn ending(summary: &Summary, finish: &str) -> Ending {
    let reason = StopReason::of(
        finish == "length",
        !summary.tool_calls.is_empty(),
        summary.stop_sequence.as_deref(),
    );
    let u = usage(summary);
    Ending {
        reason,
        stop_sequence: summary
            .stop_sequence
            .clone()
            .filter(|_| reason == StopReason::StopSequence),
        input_tokens: u.prompt_tokens.unwrap_or(0),
        output_tokens: u.completion_tokens.unwrap_or(0),
    }
}

/// A whole message, with the `edgecloud` summary beside Anthropic's
/// fields.
pub(crate) fn whole(ids: &Ids, summary: &Summary, text: &str, finish: &str) -> Response<Body> {
    let content = anthropic::content(summary.reasoning.as_deref(), text, &summary.tool_calls);
    let mut message = anthropic::message(ids, content, Some(&ending(summary, finish)));
    message["edgecloud"] = extension(summary);
    json_response(200, &message)
}

/// `count_tokens`' answer: the local tokenizer's count (`source:
/// "local_tokenizer"`), or, where no local model counts (a server
/// without a local lane), the estimate every compressor uses, labelled
/// `estimate`.
pub(crate) fn tokens_count(counted: Option<u64>, params: &ChatParams) -> Response<Body> {
    let (n, source) = match counted {
        Some(n) => (n, "local_tokenizer"),
        None => (
            edgecloud_core::harness::compression::estimate_messages(&params.messages),
            "estimate",
        ),
    };
    let mut body = anthropic::tokens_count(n);
    body["edgecloud"] = serde_json::json!({"source": source});
    json_response(200, &body)
}

/// A streamed message: Anthropic's events (see
/// `edgecloud_wire::anthropic::Events`), the `edgecloud` summary on
/// `message_delta`.
pub(crate) struct Stream {
    events: Events,
}

impl Stream {
    pub(crate) fn new(ids: Ids) -> Self {
        Self {
            events: Events::new(ids),
        }
    }
}

impl Shape for Stream {
    fn opening(&mut self) -> Vec<u8> {
        self.events.start().into_bytes()
    }

    fn text(&mut self, out: &mut Vec<u8>, piece: &str) {
        let mut s = String::new();
        self.events.text(&mut s, piece);
        out.extend_from_slice(s.as_bytes());
    }

    fn reasoning(&mut self, out: &mut Vec<u8>, piece: &str) {
        let mut s = String::new();
        self.events.thinking(&mut s, piece);
        out.extend_from_slice(s.as_bytes());
    }

    fn ending(&mut self, summary: &Summary, finish: &'static str) -> Vec<u8> {
        let mut extra = Map::new();
        extra.insert("edgecloud".into(), extension(summary));
        self.events
            .finish_with(&summary.tool_calls, &ending(summary, finish), extra)
            .into_bytes()
    }

    fn failure(&mut self, e: &ApiError) -> Vec<u8> {
        let (_, kind) = status_and_type(e.status());
        Events::error(kind, &e.described()).into_bytes()
    }

    fn errors(&self) -> super::respond::ErrorWriter {
        error_response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_statuses_become_anthropics() {
        for (ours, theirs, kind) in [
            (400, 400, "invalid_request_error"),
            (401, 401, "authentication_error"),
            (404, 404, "not_found_error"),
            (413, 413, "request_too_large"),
            (500, 500, "api_error"),
            (502, 500, "api_error"),
            (503, 529, "overloaded_error"),
            (504, 504, "timeout_error"),
        ] {
            assert_eq!(status_and_type(ours), (theirs, kind), "{ours}");
        }
        let e = ApiError::invalid("messages.0.role", "unsupported role `bot`");
        assert_eq!(e.described(), "messages.0.role: unsupported role `bot`");
        let e = ApiError::invalid("max_tokens", "`max_tokens`: field required");
        assert_eq!(e.described(), "`max_tokens`: field required");
    }

    #[test]
    fn range_errors_name_the_field_as_this_body_spells_it() {
        let limits = Limits {
            max_messages: 4,
            max_deadline: std::time::Duration::from_secs(60),
            default_max_tokens: 64,
        };
        let param = |body: &str| {
            parse(body.as_bytes(), limits, anthropic::Body::Create)
                .unwrap_err()
                .param
                .unwrap_or_default()
        };
        let user = r#""messages": [{"role": "user", "content": "x"}]"#;
        assert_eq!(
            param(&format!(r#"{{"model": "m", "max_tokens": 0, {user}}}"#)),
            "max_tokens"
        );
        assert_eq!(
            param(&format!(
                r#"{{"model": "m", "max_tokens": 5, "stop_sequences": ["a", ""], {user}}}"#
            )),
            "stop_sequences.1"
        );
        assert_eq!(
            param(&format!(
                r#"{{"model": "m", "max_tokens": 5, "top_p": 0, {user}}}"#
            )),
            "top_p"
        );
        assert_eq!(
            param(&format!(
                r#"{{"model": "m", "max_tokens": 5, "edgecloud": {{"policy": 1}}, {user}}}"#
            )),
            "edgecloud.policy"
        );
        let p = parse(
            format!(
                r#"{{"model": "m", "max_tokens": 5, "edgecloud": {{"deadline_ms": 900}}, {user}}}"#
            )
            .as_bytes(),
            limits,
            anthropic::Body::Create,
        )
        .unwrap();
        assert_eq!(p.sampling.max_tokens, 5);
        assert_eq!(p.deadline, Some(std::time::Duration::from_millis(900)));
    }
}
