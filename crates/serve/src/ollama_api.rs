//! `POST /api/chat` and `POST /api/generate` (Ollama's native API) on the
//! server's side: a body read through `edgecloud_wire::ollama` (the one
//! home of the mapping onto the chat request), the `edgecloud`
//! extension object, `keep_alive` and `Request::validate` (its errors
//! named as this body spells the field: `options.num_predict`); the
//! answer whole, or streamed as Ollama streams it by default (one JSON
//! object per line, `application/x-ndjson`, the last one `done` with
//! its timings in nanoseconds from the run's own); and every error in
//! Ollama's shape (`{"error": "..."}`). The run goes the way every
//! generation request goes (`http`). It must not route requests or
//! choose lanes.

use super::app::App;
use super::engine::Summary;
use super::http::{self, Head};
use super::models::KeepAlive;
use super::respond::{self, error_as, extension, json_response, usage, Body};
use super::stream::{self, Shape};
use super::wire::{self, ApiError, ChatParams, Limits};
use edgecloud_core::request::{Request, RequestField};
use edgecloud_wire::ollama::{self, Done, Timings};
use hyper::body::Incoming;
use hyper::Response;
use serde_json::Value;
use std::sync::Arc;
use std::time::SystemTime;

/// An error as Ollama's clients read it: the status as it is, the
/// message (naming its field) in `{"error": ...}`.
pub(crate) fn error_response(e: &ApiError) -> Response<Body> {
    error_as(e, e.status(), &ollama::error_body(&e.described()))
}

/// Which call: `/api/chat` (the text in `message.content`) or
/// `/api/generate` (in `response`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Chat,
    Generate,
}

impl Call {
    /// The field the prompt came in (an error about its length names it).
    fn prompt_param(self) -> &'static str {
        match self {
            Call::Chat => "messages",
            Call::Generate => "prompt",
        }
    }

    /// One object of the answer: a piece (`done` `None`) or the last.
    fn object(
        self,
        model: &str,
        text: &str,
        summary: Option<&Summary>,
        done: Option<&Done>,
    ) -> Value {
        let now = ollama::rfc3339(SystemTime::now());
        match self {
            Call::Chat => {
                let calls = summary.map_or(&[][..], |s| &s.tool_calls[..]);
                ollama::chat(model, &now, text, calls, done)
            }
            Call::Generate => ollama::generate(model, &now, text, done),
        }
    }
}

/// A chat or generate request, validated.
pub(crate) struct Params {
    pub(crate) chat: ChatParams,
    /// `keep_alive`, read.
    pub(crate) keep_alive: Option<KeepAlive>,
    /// Nothing to answer (no messages, no prompt): load the model, as
    /// Ollama does for such a request.
    pub(crate) load_only: bool,
}

/// Reads a `/api/chat` or `/api/generate` body.
pub(crate) fn parse(body: &[u8], limits: Limits, call: Call) -> Result<Params, ApiError> {
    let obj = wire::json_object(body)?;
    let (r, extra) = match call {
        Call::Chat => ollama::parse_chat(&obj)?,
        Call::Generate => ollama::parse_generate(&obj)?,
    };
    if r.messages.len() > limits.max_messages {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "`messages` has {} messages; this server accepts at most {}",
                r.messages.len(),
                limits.max_messages
            ),
        )
        .code("too_many_messages"));
    }
    let (policy, deadline) =
        wire::extension(wire::present(&extra, "edgecloud"), limits.max_deadline)?;
    let keep_alive = r
        .keep_alive
        .as_deref()
        .map(|k| {
            KeepAlive::parse(k)
                .map_err(|e| ApiError::invalid("keep_alive", format!("`keep_alive`: {e}")))
        })
        .transpose()?;
    let load_only = r.messages.is_empty();
    let request = Request {
        id: None,
        messages: r.messages.clone(),
        sampling: r.sampling(wire::defaults(limits)),
        deadline,
    };
    if !load_only {
        let prompt = call.prompt_param();
        request
            .validate()
            .map_err(|e| {
                wire::invalid_as(e, |field| match field {
                    RequestField::Messages => Some(prompt),
                    RequestField::MaxTokens => Some("options.num_predict"),
                    RequestField::Temperature => Some("options.temperature"),
                    RequestField::TopP => Some("options.top_p"),
                    RequestField::ResponseFormat => Some("format"),
                    _ => None,
                })
            })
            .map_err(|mut e| {
                if let Some(i) = e.param.as_deref().and_then(|p| p.strip_prefix("stop[")) {
                    e.param = Some(format!("options.stop[{i}"));
                }
                e
            })?;
    }
    Ok(Params {
        chat: ChatParams {
            include_usage: false,
            stream: r.stream,
            model: r.model,
            messages: request.messages,
            sampling: request.sampling,
            policy,
            deadline,
        },
        keep_alive,
        load_only,
    })
}

/// The model name as the server knows it: Ollama's clients may add the
/// tag `:latest` to a name that has none.
pub(crate) fn known_name(app: &App, name: &str) -> Option<String> {
    if app.resolve_model(name).is_some() {
        return Some(name.to_string());
    }
    name.strip_suffix(":latest")
        .filter(|n| app.resolve_model(n).is_some())
        .map(str::to_string)
}

/// The run's timings as Ollama's final object has them, in nanoseconds:
/// the whole request (`total_duration`), the answering lane's prompt
/// processing and generation (the local lane measures both; for the
/// cloud lane, time to first token and the rest), and the token counts
/// of `usage`. No model is loaded by a request here (`load_duration` 0:
/// a model of several is loaded before its run starts).
fn timings(summary: &Summary) -> Timings {
    let u = usage(summary);
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let lane = summary.winner();
    let t = summary.timings.as_ref();
    let ttft = lane.and_then(|l| l.ttft_ms);
    let prompt = t
        .and_then(|t| t.prompt_eval)
        .map(ms)
        .or(ttft)
        .unwrap_or(0.0);
    let eval = t
        .and_then(|t| t.generation)
        .map(ms)
        .or_else(|| Some(lane?.total_ms? - ttft.unwrap_or(0.0)))
        .unwrap_or(0.0);
    Timings {
        total_duration: ollama::nanos(summary.elapsed_ms),
        load_duration: 0,
        prompt_eval_count: u.prompt_tokens.unwrap_or(0),
        // The local lane's reused prompt cells (the cloud's cache is not
        // reported to us).
        prompt_eval_cached_count: lane.and_then(|l| l.tokens.local_reused_prompt),
        prompt_eval_duration: ollama::nanos(prompt),
        eval_count: u.completion_tokens.unwrap_or(0),
        eval_duration: ollama::nanos(eval),
    }
}

fn done(summary: &Summary, finish: &str) -> Done {
    Done {
        reason: if finish == "length" { "length" } else { "stop" },
        timings: timings(summary),
    }
}

/// The whole answer, with the `edgecloud` summary beside Ollama's fields.
fn whole(call: Call, model: &str, summary: &Summary, text: &str, finish: &str) -> Response<Body> {
    let mut v = call.object(model, text, Some(summary), Some(&done(summary, finish)));
    if let Some(r) = summary.reasoning.as_deref() {
        ollama::add_thinking(&mut v, r);
    }
    v["edgecloud"] = extension(summary);
    json_response(200, &v)
}

/// A streamed answer: one object per piece, then (chat) the tool calls
/// in an object of their own, then the `done` object with the timings
/// and the `edgecloud` summary; a failure after the first line is an
/// `{"error": ...}` line.
pub(crate) struct Stream {
    call: Call,
    model: String,
}

impl Shape for Stream {
    fn opening(&mut self) -> Vec<u8> {
        Vec::new()
    }

    fn text(&mut self, out: &mut Vec<u8>, piece: &str) {
        let v = self.call.object(&self.model, piece, None, None);
        out.extend_from_slice(ollama::line(&v).as_bytes());
    }

    fn reasoning(&mut self, out: &mut Vec<u8>, piece: &str) {
        let mut v = self.call.object(&self.model, "", None, None);
        ollama::add_thinking(&mut v, piece);
        out.extend_from_slice(ollama::line(&v).as_bytes());
    }

    fn ending(&mut self, summary: &Summary, finish: &'static str) -> Vec<u8> {
        let mut out = String::new();
        if self.call == Call::Chat && !summary.tool_calls.is_empty() {
            let now = ollama::rfc3339(SystemTime::now());
            out.push_str(&ollama::line(&ollama::chat(
                &self.model,
                &now,
                "",
                &summary.tool_calls,
                None,
            )));
        }
        let mut last = self
            .call
            .object(&self.model, "", None, Some(&done(summary, finish)));
        last["edgecloud"] = extension(summary);
        out.push_str(&ollama::line(&last));
        out.into_bytes()
    }

    fn failure(&mut self, e: &ApiError) -> Vec<u8> {
        ollama::line(&ollama::error_body(&e.described())).into_bytes()
    }

    fn prompt_param(&self) -> &'static str {
        self.call.prompt_param()
    }

    fn errors(&self) -> respond::ErrorWriter {
        error_response
    }

    fn content_type(&self) -> &'static str {
        "application/x-ndjson"
    }
}

/// `POST /api/chat` or `POST /api/generate`.
pub(crate) async fn answer(
    app: &Arc<App>,
    req: hyper::Request<Incoming>,
    call: Call,
) -> Result<Response<Body>, ApiError> {
    let (head, body): (Head, _) = http::read_request(app, req).await?;
    let mut p = parse(&body, app.limits, call)?;
    if let Some(name) = known_name(app, &p.chat.model) {
        p.chat.model = name;
    }
    let Some(entry) = app.resolve_model(&p.chat.model) else {
        return Err(http::unknown_model(&p.chat.model, &app.models()).param("model"));
    };
    if let Some(keep) = p.keep_alive {
        app.engine.keep_alive(entry.model.clone(), keep);
    }
    let model = p.chat.model.clone();
    if p.load_only {
        // Ollama's "load the model" (a model of several loads now and
        // stays for its keep-alive), or with `keep_alive: 0` "unload it"
        // (its keep-alive, set above, lets the sweeper unload it once
        // idle: nothing to load first).
        let reason = match p.keep_alive {
            Some(KeepAlive::For(d)) if d.is_zero() => "unload",
            _ => "load",
        };
        if reason == "load" {
            app.engine
                .embedder(entry.model)
                .await
                .map_err(|e| http::start_error(app, e, http::H_POLICY))?;
        }
        let v = call.object(
            &model,
            "",
            None,
            Some(&Done {
                reason,
                timings: Timings::default(),
            }),
        );
        return Ok(json_response(200, &v));
    }
    let run = http::start(app, &head, &mut p.chat).await?;
    if p.chat.stream {
        stream::respond(app.clone(), run, Stream { call, model }, head.request_id).await
    } else {
        respond::whole(
            app,
            run,
            head.request_id,
            call.prompt_param(),
            error_response,
            |summary, text, finish| whole(call, &model, summary, text, finish),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const LIMITS: Limits = Limits {
        max_messages: 4,
        max_deadline: Duration::from_secs(60),
        default_max_tokens: 64,
    };

    fn param(body: &str, call: Call) -> String {
        match parse(body.as_bytes(), LIMITS, call) {
            Err(e) => e.param.unwrap_or_default(),
            Ok(_) => panic!("{body} parsed"),
        }
    }

    #[test]
    fn range_errors_name_the_option_and_keep_alive_is_read() {
        let chat = r#""messages": [{"role": "user", "content": "x"}]"#;
        for (body, field) in [
            (
                format!(r#"{{"model": "m", {chat}, "options": {{"num_predict": 0}}}}"#),
                "options.num_predict",
            ),
            (
                format!(r#"{{"model": "m", {chat}, "options": {{"temperature": 3}}}}"#),
                "options.temperature",
            ),
            (
                format!(r#"{{"model": "m", {chat}, "options": {{"top_p": 0}}}}"#),
                "options.top_p",
            ),
            (
                format!(r#"{{"model": "m", {chat}, "options": {{"stop": ["a", ""]}}}}"#),
                "options.stop[1]",
            ),
            (
                format!(r#"{{"model": "m", {chat}, "keep_alive": "soon"}}"#),
                "keep_alive",
            ),
            (
                format!(r#"{{"model": "m", {chat}, "edgecloud": {{"policy": 3}}}}"#),
                "edgecloud.policy",
            ),
        ] {
            assert_eq!(param(&body, Call::Chat), field, "{body}");
        }
        let p = parse(
            br#"{"model": "m", "prompt": "Why?", "keep_alive": 0, "stream": false}"#,
            LIMITS,
            Call::Generate,
        )
        .unwrap();
        assert_eq!(p.keep_alive, Some(KeepAlive::For(Duration::ZERO)));
        assert!(!p.chat.stream && !p.load_only);
        assert_eq!(p.chat.sampling.max_tokens, 64);
        let p = parse(br#"{"model": "m"}"#, LIMITS, Call::Generate).unwrap();
        assert!(p.load_only && p.chat.stream);
    }
}
