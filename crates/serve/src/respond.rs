//! How a run ends as a response, for the whole and the streamed path
//! alike: waiting for the settled run (aborting it if the client leaves),
//! recording it, the answer or the OpenAI-shaped error, usage, the
//! `edgecloud` extension field and the `x-edgecloud-*` headers. It must not
//! route requests or write SSE frames.

use super::app::App;
use super::engine::{Run, RunInfo, Status, Summary};
use super::wire::{ApiError, INVALID_REQUEST};
use bytes::Bytes;
use edgecloud_wire::openai::{self, ChatCompletion, Ids, Usage};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde::Serialize;
use serde_json::Value;
use std::convert::Infallible;

pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// How an endpoint writes an error as a response: OpenAI's error object
/// ([`error_response`]) for the OpenAI endpoints, Anthropic's and
/// Ollama's for theirs (`anthropic_api`, `ollama_api`).
pub(crate) type ErrorWriter = fn(&ApiError) -> Response<Body>;

/// Answers a non-streaming request: one JSON body once the run settles,
/// `render(summary, text, finish_reason)` on success (the endpoint's
/// shape), the error written by `errors` otherwise (a prompt over the
/// context names `prompt_param`, the field the endpoint's prompt came
/// in).
pub(crate) async fn whole(
    app: &App,
    run: Box<dyn Run>,
    request_id: Option<String>,
    prompt_param: &'static str,
    errors: ErrorWriter,
    render: impl FnOnce(&Summary, &str, &'static str) -> Response<Body>,
) -> Result<Response<Body>, ApiError> {
    let info = run.info().clone();
    let guard = AbortOnDrop::new(&*run);
    let summary = settle(app, run, guard).await?;
    Ok(settled(
        app,
        &info,
        &summary,
        request_id.as_deref(),
        prompt_param,
        errors,
        |text, finish| render(&summary, text, finish),
    ))
}

/// A whole chat completion.
pub(crate) fn chat_completion(
    ids: &Ids,
    summary: &Summary,
    text: &str,
    finish: &'static str,
) -> Response<Body> {
    let mut body = ChatCompletion::answer(ids, text, finish, usage(summary))
        .with_reasoning(summary.reasoning.as_deref())
        .with_tool_calls(&summary.tool_calls)
        .with_logprobs(summary.logprobs.as_deref());
    body.edgecloud = Some(extension(summary));
    json_response(200, &body)
}

/// Waits for the run to settle and records it. The guard aborts the run if
/// this future is dropped first (the client went away).
pub(crate) async fn settle(
    app: &App,
    run: Box<dyn Run>,
    mut guard: AbortOnDrop,
) -> Result<Summary, ApiError> {
    let summary = run.finish().await;
    guard.disarm();
    let summary = summary.map_err(|e| ApiError::new(500, "server_error", e))?;
    app.metrics.run(&summary);
    Ok(summary)
}

/// The response to a run that settled before its first byte went out:
/// `answer(text, finish_reason)` renders a success (JSON or SSE), a
/// failure is the JSON error `errors` writes; both carry the outcome
/// headers.
pub(crate) fn settled(
    app: &App,
    info: &RunInfo,
    summary: &Summary,
    request_id: Option<&str>,
    prompt_param: &'static str,
    errors: ErrorWriter,
    answer: impl FnOnce(&str, &'static str) -> Response<Body>,
) -> Response<Body> {
    let mut response = match success(summary) {
        Some((text, finish)) => answer(text, finish),
        None => errors(&failure(app, summary, prompt_param)),
    };
    outcome_headers(response.headers_mut(), info, Some(summary), request_id);
    response
}

pub(crate) fn shutting_down(retry_after: u64) -> ApiError {
    ApiError::new(503, "server_error", "the server is shutting down")
        .code("shutting_down")
        .retry_after(retry_after)
}

/// Aborts the run if dropped before it settles: the client went away.
pub(crate) struct AbortOnDrop(Option<Box<dyn Fn() + Send + Sync>>);

impl AbortOnDrop {
    pub(crate) fn new(run: &dyn Run) -> Self {
        Self(Some(run.aborter()))
    }

    /// The run settled: nothing to abort any more.
    pub(crate) fn disarm(&mut self) {
        self.0 = None;
    }

    /// Aborts now (once).
    pub(crate) fn fire(&mut self) {
        if let Some(abort) = self.0.take() {
            abort();
        }
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.fire();
    }
}

/// The answer and its OpenAI finish reason, when the run succeeded.
pub(crate) fn success(s: &Summary) -> Option<(&str, &'static str)> {
    if s.status != Status::Ok {
        return None;
    }
    let finish = match s.finish_reason {
        Some(edgecloud_core::lane::FinishReason::Length) => "length",
        _ if !s.tool_calls.is_empty() => "tool_calls",
        _ => "stop",
    };
    Some((s.text.as_deref().unwrap_or(""), finish))
}

/// The winner's token counts: the provider's when it reported them, else
/// the local tokenizer's, else 0 (the `edgecloud` field says which).
pub(crate) fn usage(s: &Summary) -> Usage {
    let Some(w) = s.winner() else {
        return Usage::counted(0, 0);
    };
    let t = &w.tokens;
    Usage::counted(
        t.provider_prompt.or(t.local_prompt).unwrap_or(0),
        t.provider_completion.or(t.local_completion).unwrap_or(0),
    )
    .with_reasoning_tokens(s.reasoning_tokens)
}

/// The `edgecloud` response field.
pub(crate) fn extension(s: &Summary) -> Value {
    serde_json::to_value(s).unwrap_or(Value::Null)
}

/// The 503 for a request no instance of the pool could take.
pub(crate) fn all_instances_busy(instances: usize, retry_after: u64) -> ApiError {
    ApiError::new(
        503,
        "overloaded_error",
        format!("all {instances} instances are busy; retry shortly"),
    )
    .code("lanes_busy")
    .retry_after(retry_after)
}

/// The error for a run that ended without an answer; counts busy
/// rejections. A prompt over the context names `prompt_param` (`messages`,
/// `prompt`, `input`: where the endpoint's prompt came in).
pub(crate) fn failure(app: &App, s: &Summary, prompt_param: &'static str) -> ApiError {
    let detail = s.error.clone().unwrap_or_else(|| "no answer".into());
    if s.all_busy() {
        app.metrics.busy_rejection();
        return ApiError::new(
            503,
            "overloaded_error",
            format!(
                "every lane this request needs is busy ({}); retry shortly",
                s.lanes_header()
            ),
        )
        .code("lanes_busy")
        .retry_after(app.retry_after_secs);
    }
    if let Some(ms) = s.unavailable_for() {
        let secs = ((ms / 1e3).ceil() as u64).max(1);
        return ApiError::new(
            503,
            "server_error",
            format!(
                "every lane this request needs is down ({}): {}",
                s.lanes_header(),
                s.lanes
                    .iter()
                    .filter_map(|l| l.note.as_deref().map(|n| format!("{}: {n}", l.lane)))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )
        .code("lanes_unavailable")
        .retry_after(secs);
    }
    if let Some(message) = s.context_exceeded() {
        return ApiError::invalid(prompt_param, message).code("context_length_exceeded");
    }
    if let Some(message) = s.refused_as_invalid() {
        return ApiError::new(400, INVALID_REQUEST, message);
    }
    match s.status {
        Status::DeadlineExceeded => ApiError::new(
            504,
            "timeout_error",
            format!(
                "no usable answer within the {:.0} ms deadline ({}): {detail}",
                s.deadline_ms,
                s.lanes_header()
            ),
        )
        .code("deadline_exceeded"),
        Status::Aborted => shutting_down(app.retry_after_secs),
        _ => ApiError::new(
            502,
            "server_error",
            format!(
                "no lane produced an answer ({}): {detail}",
                s.lanes_header()
            ),
        )
        .code("lanes_failed"),
    }
}

fn header(map: &mut HeaderMap, name: &'static str, value: impl ToString) {
    if let Ok(v) = HeaderValue::from_str(&value.to_string()) {
        map.insert(HeaderName::from_static(name), v);
    }
}

/// The `x-edgecloud-*` response headers: the run's identity always, its
/// outcome when known (whole responses and errors; a stream's outcome is in
/// its last chunk).
pub(crate) fn outcome_headers(
    map: &mut HeaderMap,
    info: &RunInfo,
    summary: Option<&Summary>,
    request_id: Option<&str>,
) {
    header(map, "x-edgecloud-run-id", info.run_id);
    if info.replay {
        header(map, "x-edgecloud-replay", "true");
    }
    if let Some(id) = request_id {
        header(map, "x-request-id", id);
    }
    let Some(s) = summary else {
        // A stream's headers leave before its outcome: what is known now.
        if let Some(route) = &info.route {
            header(map, "x-edgecloud-route", route);
        }
        if let Some(policy) = &info.policy {
            header(map, "x-edgecloud-policy", policy);
        }
        header(
            map,
            "x-edgecloud-deadline-ms",
            format!("{:.0}", info.deadline_ms),
        );
        return;
    };
    header(map, "x-edgecloud-route", &s.route);
    header(map, "x-edgecloud-policy", &s.policy);
    header(
        map,
        "x-edgecloud-deadline-ms",
        format!("{:.0}", s.deadline_ms),
    );
    header(map, "x-edgecloud-status", s.status.as_str());
    if let Some(lane) = s.lane {
        header(map, "x-edgecloud-lane", lane);
    }
    header(
        map,
        "x-edgecloud-elapsed-ms",
        format!("{:.1}", s.elapsed_ms),
    );
    header(map, "x-edgecloud-late-workers", s.late_workers);
    if let Some(sw) = &s.switch {
        // `cloud->local; at 42 chars, 9 pieces; (transport) stream cut`
        header(
            map,
            "x-edgecloud-switch",
            format!(
                "{}->{}; at {} chars, {} pieces; {}",
                sw.from, sw.to, sw.sent_chars, sw.sent_pieces, sw.reason
            ),
        );
    }
    header(map, "x-edgecloud-lanes", s.lanes_header());
}

pub(crate) fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed()
}

pub(crate) fn json_response(status: u16, body: &(impl Serialize + ?Sized)) -> Response<Body> {
    let mut r = Response::new(full(openai::to_json(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(crate) fn error_response(e: &ApiError) -> Response<Body> {
    error_as(e, e.status, &e.body())
}

/// `e` as a response of `status` with `body` (another API's error shape),
/// with `Retry-After` when `e` has one.
pub(crate) fn error_as(e: &ApiError, status: u16, body: &impl Serialize) -> Response<Body> {
    let mut r = json_response(status, body);
    if let Some(secs) = e.retry_after {
        header(r.headers_mut(), "retry-after", secs.max(1));
    }
    r
}
