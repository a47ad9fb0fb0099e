//! Request handling: routing, the bearer-token check, the body cap, and
//! turning an engine's run into an OpenAI-shaped response (whole JSON, or
//! SSE through `stream`). One function per endpoint. It must not accept
//! connections or manage shutdown (`server` does) and must not decide how a
//! run goes (the engine does).

use super::engine::{Engine, Job, ModelEntry, Run, RunInfo, StartError, Status, Summary};
use super::metrics::Metrics;
use super::stream;
use super::wire::{self, ApiError, Ids, Limits, Usage, INVALID_REQUEST};
use super::BearerToken;
use crate::request::Request as LlmRequest;
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// Request headers a client may use instead of the `edgecloud` body field.
pub(crate) const H_POLICY: &str = "x-edgecloud-policy";
pub(crate) const H_DEADLINE: &str = "x-edgecloud-deadline-ms";

/// Everything a request handler needs, shared by all connections.
pub(crate) struct App {
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) token: Option<BearerToken>,
    pub(crate) max_body_bytes: usize,
    pub(crate) body_timeout: Duration,
    pub(crate) limits: Limits,
    pub(crate) retry_after_secs: u64,
    pub(crate) created: u64,
    pub(crate) shutting_down: AtomicBool,
    pub(crate) connections: AtomicUsize,
}

/// Handles one request; never fails (errors are responses).
pub(crate) async fn handle(
    app: Arc<App>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (endpoint, response) = route(&app, req).await;
    app.metrics.http(endpoint, response.status().as_u16());
    Ok(response)
}

async fn route(app: &Arc<App>, req: Request<Incoming>) -> (&'static str, Response<Body>) {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let endpoint: &'static str = match path.as_str() {
        "/health" => "/health",
        "/metrics" => "/metrics",
        "/v1/models" => "/v1/models",
        "/v1/chat/completions" => "/v1/chat/completions",
        p if p.starts_with("/v1/models/") => "/v1/models/{id}",
        _ => "other",
    };
    if endpoint != "/health" {
        if let Err(e) = check_token(app.token.as_ref(), req.headers()) {
            return (endpoint, error_response(&e));
        }
    }
    let allowed = match endpoint {
        "/v1/chat/completions" => Method::POST,
        "other" => {
            let e = ApiError::new(
                404,
                INVALID_REQUEST,
                format!(
                    "unknown endpoint {method} {path}; this server has POST /v1/chat/completions, \
                     GET /v1/models, GET /health and GET /metrics"
                ),
            )
            .code("unknown_url");
            return (endpoint, error_response(&e));
        }
        _ => Method::GET,
    };
    if method != allowed {
        let e = ApiError::new(
            405,
            INVALID_REQUEST,
            format!("{path} accepts {allowed}, not {method}"),
        )
        .code("method_not_allowed");
        let mut r = error_response(&e);
        let allow = if allowed == Method::POST {
            "POST"
        } else {
            "GET"
        };
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
        return (endpoint, r);
    }
    let response = match endpoint {
        "/health" => health(app),
        "/metrics" => metrics(app),
        "/v1/models" => models(app),
        "/v1/models/{id}" => model(app, &path["/v1/models/".len()..]),
        _ => chat(app, req).await.unwrap_or_else(|e| error_response(&e)),
    };
    (endpoint, response)
}

/// Checks `Authorization: Bearer <token>` when the server has a token.
fn check_token(token: Option<&BearerToken>, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = token else {
        return Ok(());
    };
    let given = headers
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
    match given {
        None => Err(ApiError::new(
            401,
            INVALID_REQUEST,
            "missing bearer token: send the header `Authorization: Bearer <token>`",
        )
        .code("missing_api_key")),
        Some(given) if token.matches(given) => Ok(()),
        Some(_) => Err(
            ApiError::new(401, INVALID_REQUEST, "incorrect bearer token").code("invalid_api_key"),
        ),
    }
}

fn health(app: &App) -> Response<Body> {
    let h = app.engine.health();
    let down = app.shutting_down.load(Ordering::Acquire);
    let body = json!({
        "status": if down { "shutting_down" } else { "ok" },
        "lanes": h.lanes,
        "runs_in_flight": h.runs_in_flight,
        "late_workers_running": h.late_workers_running,
    });
    json_response(if down { 503 } else { 200 }, &body)
}

fn metrics(app: &App) -> Response<Body> {
    let text = app.metrics.render(
        &app.engine.health(),
        app.connections.load(Ordering::Relaxed),
    );
    let mut r = Response::new(full(text));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

fn models(app: &App) -> Response<Body> {
    let data: Vec<Value> = app
        .engine
        .models()
        .iter()
        .map(|m| wire::model_json(&m.id, app.created))
        .collect();
    json_response(200, &json!({"object": "list", "data": data}))
}

fn model(app: &App, id: &str) -> Response<Body> {
    match app.engine.models().iter().find(|m| m.id == id) {
        Some(m) => json_response(200, &wire::model_json(&m.id, app.created)),
        None => error_response(&unknown_model(id, &app.engine.models()).param("model")),
    }
}

fn unknown_model(id: &str, known: &[ModelEntry]) -> ApiError {
    let names: Vec<&str> = known.iter().map(|m| m.id.as_str()).collect();
    ApiError::new(
        404,
        INVALID_REQUEST,
        format!(
            "the model `{id}` does not exist on this server; its models are: {}",
            names.join(", ")
        ),
    )
    .code("model_not_found")
}

/// Reads the body within the size cap and the body timeout.
async fn read_body(app: &App, req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            413,
            INVALID_REQUEST,
            format!(
                "the request body is larger than this server accepts ({} bytes)",
                app.max_body_bytes
            ),
        )
        .code("request_too_large")
    };
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > app.max_body_bytes as u64) {
        return Err(too_large());
    }
    let limited = Limited::new(req.into_body(), app.max_body_bytes);
    match tokio::time::timeout(app.body_timeout, limited.collect()).await {
        Err(_) => Err(ApiError::new(
            408,
            INVALID_REQUEST,
            "the request body took too long to arrive",
        )
        .code("request_timeout")),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(ApiError::new(
            400,
            INVALID_REQUEST,
            format!("could not read the request body: {e}"),
        )),
    }
}

/// Options a client may send as headers; the body's `edgecloud` field wins.
fn header_options(
    headers: &HeaderMap,
    limits: &Limits,
) -> Result<(Option<String>, Option<Duration>), ApiError> {
    let text = |name: &str| -> Result<Option<String>, ApiError> {
        match headers.get(name) {
            None => Ok(None),
            Some(v) => v.to_str().map(|s| Some(s.trim().to_string())).map_err(|_| {
                ApiError::invalid(name, format!("header `{name}` is not visible ASCII"))
            }),
        }
    };
    let policy = text(H_POLICY)?;
    let deadline = match text(H_DEADLINE)? {
        None => None,
        Some(s) => {
            let ms = s.parse::<u64>().map_err(|_| {
                ApiError::invalid(
                    H_DEADLINE,
                    format!(
                        "header `{H_DEADLINE}` must be a whole number of milliseconds, not `{s}`"
                    ),
                )
                .code("invalid_type")
            })?;
            Some(wire::deadline_ms(ms, H_DEADLINE, limits.max_deadline)?)
        }
    };
    Ok((policy, deadline))
}

fn request_id(headers: &HeaderMap) -> Option<String> {
    let v = headers.get("x-request-id")?.to_str().ok()?.trim();
    (!v.is_empty() && v.len() <= 128).then(|| v.to_string())
}

async fn chat(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let (header_policy, header_deadline) = header_options(req.headers(), &app.limits)?;
    let id = request_id(req.headers());
    let body = read_body(app, req).await?;
    let params = wire::parse_chat(&body, app.limits)?;
    let known = app.engine.models();
    let Some(entry) = known.iter().find(|m| m.id == params.model) else {
        return Err(unknown_model(&params.model, &known).param("model"));
    };
    let policy = params.policy.clone().or(header_policy);
    let policy_param = if params.policy.is_some() {
        "edgecloud.policy"
    } else {
        H_POLICY
    };
    let job = Job {
        request: LlmRequest {
            id: id.clone(),
            messages: params.messages,
            sampling: params.sampling,
            deadline: params.deadline.or(header_deadline),
        },
        route: entry.route.clone(),
        policy,
        stream: params.stream,
    };
    if app.shutting_down.load(Ordering::Acquire) {
        return Err(shutting_down(app.retry_after_secs));
    }
    let run = app.engine.start(job).map_err(|e| match e {
        StartError::Invalid { param, message } => {
            let e = ApiError::new(400, INVALID_REQUEST, message);
            match param.as_deref() {
                Some("policy") => e.param(policy_param),
                Some(p) => e.param(p),
                None => e,
            }
        }
        StartError::ShuttingDown => shutting_down(app.retry_after_secs),
        StartError::Internal(m) => ApiError::new(500, "server_error", m),
    })?;
    let ids = Ids::new(run.info().run_id, &params.model);
    if params.stream {
        stream::respond(app.clone(), run, ids, params.include_usage, id).await
    } else {
        whole(app, run, ids, id).await
    }
}

fn shutting_down(retry_after: u64) -> ApiError {
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

async fn whole(
    app: &Arc<App>,
    run: Box<dyn Run>,
    ids: Ids,
    request_id: Option<String>,
) -> Result<Response<Body>, ApiError> {
    let info = run.info().clone();
    let mut guard = AbortOnDrop::new(&*run);
    let summary = run.finish().await;
    guard.disarm();
    let summary = summary.map_err(|e| ApiError::new(500, "server_error", e))?;
    app.metrics.run(&summary);
    let mut response = match success(&summary) {
        Some((text, finish)) => {
            let body =
                wire::completion_json(&ids, text, finish, usage(&summary), extension(&summary));
            json_response(200, &body)
        }
        None => error_response(&failure(app, &summary)),
    };
    outcome_headers(
        response.headers_mut(),
        &info,
        Some(&summary),
        request_id.as_deref(),
    );
    Ok(response)
}

/// The answer and its OpenAI finish reason, when the run succeeded.
pub(crate) fn success(s: &Summary) -> Option<(&str, &'static str)> {
    if s.status != Status::Ok {
        return None;
    }
    let finish = match s.finish_reason {
        Some(crate::lane::FinishReason::Length) => "length",
        _ => "stop",
    };
    Some((s.text.as_deref().unwrap_or(""), finish))
}

/// The winner's token counts: the provider's when it reported them, else
/// the local tokenizer's, else 0 (the `edgecloud` field says which).
pub(crate) fn usage(s: &Summary) -> Usage {
    let Some(w) = s.winner() else {
        return Usage::default();
    };
    let t = &w.tokens;
    Usage {
        prompt: t.provider_prompt.or(t.local_prompt).unwrap_or(0),
        completion: t.provider_completion.or(t.local_completion).unwrap_or(0),
    }
}

/// The `edgecloud` response field.
pub(crate) fn extension(s: &Summary) -> Value {
    serde_json::to_value(s).unwrap_or(Value::Null)
}

/// The error for a run that ended without an answer; counts busy
/// rejections.
pub(crate) fn failure(app: &App, s: &Summary) -> ApiError {
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
    header(map, "x-edgecloud-lanes", s.lanes_header());
}

pub(crate) fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).boxed()
}

pub(crate) fn json_response(status: u16, body: &Value) -> Response<Body> {
    let mut r = Response::new(full(body.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(crate) fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.status, &e.body());
    if let Some(secs) = e.retry_after {
        header(r.headers_mut(), "retry-after", secs.max(1));
    }
    r
}
