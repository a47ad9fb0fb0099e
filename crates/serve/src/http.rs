//! Request handling: routing, CORS (through `cors`), the bearer-token
//! check, the body cap, and for a generation request (chat, text
//! completion, Responses) the path top to bottom: parse (`wire`), start
//! the run (the engine, one `start` for every endpoint), respond (whole in
//! `response`, SSE in `stream`, each in its endpoint's shape:
//! `completions`, `responses`). One function per endpoint; embeddings
//! (no run: the local lane's worker) go through `embeddings`. It must not
//! accept connections or manage shutdown (`server` does) and must not
//! decide how a run goes (the engine does).
//!
//! Routing is a `match` on the path, on hyper, not an axum router with
//! tower-http layers: an axum 0.8 port added a measurable median per
//! request and saved no code, and tower-http's CORS and body-limit layers
//! answer in shapes of their own (an empty 200 to an unlisted origin's
//! preflight, a plain-text 413) where every answer here is the OpenAI JSON
//! error. docs/DESIGN.md ("serve's HTTP layer") has the figures.

use super::app::App;
use super::engine::{Job, ModelEntry, Param, StartError};
use super::respond::{
    self, all_instances_busy, error_response, full, json_response, shutting_down, Body, ErrorWriter,
};
use super::wire::{self, ApiError, Limits, INVALID_REQUEST};
use super::BearerToken;
use super::{
    anthropic_api, completions, cors, embeddings, ollama_api, ollama_models, responses_api, stream,
};
use bytes::Bytes;
use edgecloud_core::request::Request as LlmRequest;
use edgecloud_wire::openai::{Ids, Model, ModelList};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response};
use serde_json::json;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Request headers a client may use instead of the `edgecloud` body field.
pub(crate) const H_POLICY: &str = "x-edgecloud-policy";
pub(crate) const H_DEADLINE: &str = "x-edgecloud-deadline-ms";
/// A client's key for retries that do not pay twice (docs/cost.md).
pub(crate) const H_IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Handles one request; never fails (errors are responses).
pub(crate) async fn handle(
    app: Arc<App>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    if let Some(r) = cors::preflight(&app.cors, req.method(), req.headers()) {
        app.metrics.http("preflight", r.status().as_u16());
        return Ok(r);
    }
    let origin = req.headers().get(hyper::header::ORIGIN).cloned();
    let (endpoint, mut response) = route(&app, req).await;
    cors::decorate(&app.cors, origin.as_ref(), response.headers_mut());
    app.metrics.http(endpoint, response.status().as_u16());
    Ok(response)
}

async fn route(app: &Arc<App>, req: Request<Incoming>) -> (&'static str, Response<Body>) {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let endpoint: &'static str = match path.as_str() {
        "/" => "/",
        "/health" => "/health",
        "/metrics" => "/metrics",
        "/v1/models" => "/v1/models",
        "/v1/chat/completions" => "/v1/chat/completions",
        "/v1/completions" => "/v1/completions",
        "/v1/responses" => "/v1/responses",
        "/v1/embeddings" => "/v1/embeddings",
        "/v1/messages" => "/v1/messages",
        "/v1/messages/count_tokens" => "/v1/messages/count_tokens",
        "/api/version" => "/api/version",
        "/api/tags" => "/api/tags",
        "/api/ps" => "/api/ps",
        "/api/show" => "/api/show",
        "/api/chat" => "/api/chat",
        "/api/generate" => "/api/generate",
        "/api/embed" => "/api/embed",
        "/api/embeddings" => "/api/embeddings",
        "/api/pull" | "/api/push" | "/api/create" | "/api/copy" | "/api/delete" => {
            "/api/{management}"
        }
        p if p.starts_with("/api/blobs/") => "/api/{management}",
        p if p.starts_with("/v1/models/") => "/v1/models/{id}",
        _ => "other",
    };
    // Each API's errors in its own shape, from the token check on.
    let errors = errors_of(&path);
    if endpoint != "/health" {
        if let Err(e) = check_token(app.token.as_ref(), req.headers()) {
            return (endpoint, errors(&e));
        }
    }
    let allowed = match endpoint {
        "/v1/chat/completions"
        | "/v1/completions"
        | "/v1/responses"
        | "/v1/embeddings"
        | "/v1/messages"
        | "/v1/messages/count_tokens"
        | "/api/show"
        | "/api/chat"
        | "/api/generate"
        | "/api/embed"
        | "/api/embeddings" => Method::POST,
        // Whatever the method: not offered.
        "/api/{management}" => {
            return (endpoint, errors(&ollama_models::management(&path)));
        }
        "other" => {
            let e = ApiError::new(
                404,
                INVALID_REQUEST,
                format!(
                    "unknown endpoint {method} {path}; this server has {}",
                    ENDPOINTS.join(", ")
                ),
            )
            .code("unknown_url");
            return (endpoint, errors(&e));
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
        let mut r = errors(&e);
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
        "/" => root(app),
        "/health" => health(app),
        "/metrics" => metrics(app),
        "/v1/models" => models(app),
        "/v1/models/{id}" => model(app, &path["/v1/models/".len()..]),
        "/v1/completions" => completion(app, req)
            .await
            .unwrap_or_else(|e| error_response(&e)),
        "/v1/responses" => response_api(app, req)
            .await
            .unwrap_or_else(|e| error_response(&e)),
        "/v1/embeddings" => embed(app, req).await.unwrap_or_else(|e| error_response(&e)),
        "/v1/messages" => messages(app, req).await.unwrap_or_else(|e| errors(&e)),
        "/v1/messages/count_tokens" => count_tokens(app, req).await.unwrap_or_else(|e| errors(&e)),
        "/api/version" => ollama_models::version(),
        "/api/tags" => ollama_models::tags(app).await,
        "/api/ps" => ollama_models::ps(app).await,
        "/api/show" => ollama_models::show(app, req)
            .await
            .unwrap_or_else(|e| errors(&e)),
        "/api/chat" => ollama_api::answer(app, req, ollama_api::Call::Chat)
            .await
            .unwrap_or_else(|e| errors(&e)),
        "/api/generate" => ollama_api::answer(app, req, ollama_api::Call::Generate)
            .await
            .unwrap_or_else(|e| errors(&e)),
        "/api/embed" => ollama_models::embed(app, req, false)
            .await
            .unwrap_or_else(|e| errors(&e)),
        "/api/embeddings" => ollama_models::embed(app, req, true)
            .await
            .unwrap_or_else(|e| errors(&e)),
        _ => chat(app, req).await.unwrap_or_else(|e| error_response(&e)),
    };
    (endpoint, response)
}

/// How errors under `path` are written: Anthropic's shape under
/// `/v1/messages`, Ollama's under `/api/`, OpenAI's elsewhere.
fn errors_of(path: &str) -> ErrorWriter {
    if path == "/v1/messages" || path.starts_with("/v1/messages/") {
        anthropic_api::error_response
    } else if path.starts_with("/api/") {
        ollama_api::error_response
    } else {
        error_response
    }
}

/// Checks `Authorization: Bearer <token>` when the server has a token;
/// `x-api-key: <token>` (how Anthropic's clients send a key) is the same
/// token.
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
        })
        .or_else(|| {
            headers
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
        });
    match given {
        None => Err(ApiError::new(
            401,
            INVALID_REQUEST,
            "missing bearer token: send the header `Authorization: Bearer <token>` (or \
             `x-api-key: <token>`)",
        )
        .code("missing_api_key")),
        Some(given) if token.matches(given) => Ok(()),
        Some(_) => Err(
            ApiError::new(401, INVALID_REQUEST, "incorrect bearer token").code("invalid_api_key"),
        ),
    }
}

/// The endpoints, as `GET /` lists them (and the 404 names them).
pub(crate) const ENDPOINTS: &[&str] = &[
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /v1/responses",
    "POST /v1/embeddings",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "GET /v1/models",
    "GET /v1/models/{id}",
    "GET /health",
    "GET /metrics",
    "GET /",
    "GET /api/version",
    "GET /api/tags",
    "POST /api/show",
    "GET /api/ps",
    "POST /api/chat",
    "POST /api/generate",
    "POST /api/embed",
    "POST /api/embeddings",
];

/// `GET /`: what this server is, its version, models and endpoints (a
/// browser or `curl` pointed at the bare address learns where to go).
fn root(app: &App) -> Response<Body> {
    let models: Vec<String> = app.models().into_iter().map(|m| m.id).collect();
    json_response(
        200,
        &json!({
            "name": "edgecloud",
            "version": env!("CARGO_PKG_VERSION"),
            "api": "OpenAI-compatible, base URL /v1; Anthropic's Messages API at /v1/messages; Ollama's native API at /api",
            "models": models,
            "endpoints": ENDPOINTS,
        }),
    )
}

fn health(app: &App) -> Response<Body> {
    let h = app.engine.health();
    let down = app.shutting_down.load(Ordering::Acquire);
    let body = json!({
        "status": if down { "shutting_down" } else { "ok" },
        "lanes": h.lanes,
        "runs_in_flight": h.runs_in_flight,
        "late_workers_running": h.late_workers_running,
        "instances": h.instances,
        "queued": h.queued,
        "rejected": h.rejected,
    });
    let mut body = body;
    if !h.models.is_empty() {
        body["models"] = json!(h.models);
    }
    if let Some(ledger) = app.engine.ledger() {
        body["ledger"] = json!(ledger);
    }
    json_response(if down { 503 } else { 200 }, &body)
}

fn metrics(app: &App) -> Response<Body> {
    let text = app.metrics.render(
        &app.engine.health(),
        app.engine.ledger().as_ref(),
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
    let data = app
        .models()
        .iter()
        .map(|m| Model {
            loaded: m.loaded,
            ..Model::edgecloud(&m.id, app.created)
        })
        .collect();
    json_response(200, &ModelList::new(data))
}

fn model(app: &App, id: &str) -> Response<Body> {
    match app.resolve_model(id) {
        Some(m) => json_response(
            200,
            &Model {
                loaded: m.loaded,
                ..Model::edgecloud(&m.id, app.created)
            },
        ),
        None => error_response(&unknown_model(id, &app.models()).param("model")),
    }
}

pub(crate) fn unknown_model(id: &str, known: &[ModelEntry]) -> ApiError {
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
pub(crate) async fn read_body(app: &App, req: Request<Incoming>) -> Result<Bytes, ApiError> {
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

/// The `Idempotency-Key` header: visible ASCII, 1 to 255 characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(H_IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let bad = |why: &str| {
        ApiError::invalid(
            H_IDEMPOTENCY_KEY,
            format!("header `{H_IDEMPOTENCY_KEY}` {why}"),
        )
    };
    let v = v.to_str().map_err(|_| bad("is not visible ASCII"))?.trim();
    if v.is_empty() || v.len() > 255 {
        return Err(bad("must be 1 to 255 characters"));
    }
    Ok(Some(v.to_string()))
}

fn request_id(headers: &HeaderMap) -> Option<String> {
    let v = headers.get("x-request-id")?.to_str().ok()?.trim();
    (!v.is_empty() && v.len() <= 128).then(|| v.to_string())
}

/// What a generation request's headers say: the policy and deadline
/// options and the request id.
pub(crate) struct Head {
    policy: Option<String>,
    deadline: Option<Duration>,
    pub(crate) request_id: Option<String>,
    idempotency_key: Option<String>,
}

/// Reads a generation request's headers and body.
pub(crate) async fn read_request(
    app: &App,
    req: Request<Incoming>,
) -> Result<(Head, Bytes), ApiError> {
    let (policy, deadline) = header_options(req.headers(), &app.limits)?;
    let request_id = request_id(req.headers());
    let idempotency_key = idempotency_key(req.headers())?;
    let body = read_body(app, req).await?;
    Ok((
        Head {
            policy,
            deadline,
            request_id,
            idempotency_key,
        },
        body,
    ))
}

/// Starts the run of a validated request on the route its `model`
/// selects: every generation endpoint's one way to the engine. Takes the
/// messages and sampling out of `params`.
pub(crate) async fn start(
    app: &App,
    head: &Head,
    params: &mut wire::ChatParams,
) -> Result<Box<dyn super::engine::Run>, ApiError> {
    let Some(entry) = app.resolve_model(&params.model) else {
        return Err(unknown_model(&params.model, &app.models()).param("model"));
    };
    let policy = params.policy.clone().or_else(|| head.policy.clone());
    let policy_param = if params.policy.is_some() {
        "edgecloud.policy"
    } else {
        H_POLICY
    };
    let job = Job {
        request: LlmRequest {
            id: head.request_id.clone(),
            messages: std::mem::take(&mut params.messages),
            sampling: std::mem::take(&mut params.sampling),
            deadline: params.deadline.or(head.deadline),
        },
        route: entry.route.clone(),
        model: entry.model.clone(),
        policy,
        stream: params.stream,
        idempotency_key: head.idempotency_key.clone(),
    };
    if app.shutting_down.load(Ordering::Acquire) {
        return Err(shutting_down(app.retry_after_secs));
    }
    app.engine
        .start(job)
        .await
        .map_err(|e| start_error(app, e, policy_param))
}

/// Why a run (or an embeddings request) could not start, as the client's
/// answer.
pub(crate) fn start_error(app: &App, e: StartError, policy_param: &str) -> ApiError {
    match e {
        StartError::Invalid { param, message } => {
            let e = ApiError::new(400, INVALID_REQUEST, message);
            match param {
                Some(Param::Policy) => e.param(policy_param),
                Some(Param::Model) => e.param("model"),
                None => e,
            }
        }
        StartError::ShuttingDown => shutting_down(app.retry_after_secs),
        StartError::Busy { instances } => {
            app.metrics.busy_rejection();
            all_instances_busy(instances, app.retry_after_secs)
        }
        StartError::ModelLoad { model, message } => ApiError::new(
            500,
            "server_error",
            format!("the model `{model}` could not be loaded: {message}"),
        )
        .param("model")
        .code("model_load_failed"),
        StartError::ModelsBusy { model, message } => ApiError::new(
            503,
            "server_error",
            format!("the model `{model}` cannot be loaded now: {message}"),
        )
        .param("model")
        .code("models_busy")
        .retry_after(app.retry_after_secs),
        StartError::Conflict { code, message } => ApiError::new(409, INVALID_REQUEST, message)
            .param(H_IDEMPOTENCY_KEY)
            .code(code),
        StartError::Internal(m) => ApiError::new(500, "server_error", m),
    }
}

async fn chat(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let (head, body) = read_request(app, req).await?;
    let mut params = wire::parse_chat(&body, app.limits)?;
    let run = start(app, &head, &mut params).await?;
    let ids = Ids::new(run.info().run_id, &params.model);
    if params.stream {
        let shape = stream::ChatShape::new(ids, params.include_usage);
        stream::respond(app.clone(), run, shape, head.request_id).await
    } else {
        respond::whole(
            app,
            run,
            head.request_id,
            "messages",
            error_response,
            |summary, text, finish| respond::chat_completion(&ids, summary, text, finish),
        )
        .await
    }
}

async fn completion(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let (head, body) = read_request(app, req).await?;
    let mut params = wire::parse_completion(&body, app.limits)?;
    let run = start(app, &head, &mut params.chat).await?;
    let ids = Ids::prefixed("cmpl", run.info().run_id, &params.chat.model);
    let echo = params.echo.then_some(params.prompt);
    if params.chat.stream {
        let shape = completions::Stream::new(ids, echo, params.chat.include_usage);
        stream::respond(app.clone(), run, shape, head.request_id).await
    } else {
        respond::whole(
            app,
            run,
            head.request_id,
            "prompt",
            error_response,
            |summary, text, finish| {
                completions::whole(&ids, echo.as_deref(), summary, text, finish)
            },
        )
        .await
    }
}

async fn response_api(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let (head, body) = read_request(app, req).await?;
    let mut params = wire::parse_responses(&body, app.limits)?;
    let run = start(app, &head, &mut params.chat).await?;
    let ids = Ids::prefixed("resp", run.info().run_id, &params.chat.model);
    let meta = edgecloud_wire::openai::Meta::new(ids, params.echo);
    if params.chat.stream {
        let shape = responses_api::Stream::new(meta);
        stream::respond(app.clone(), run, shape, head.request_id).await
    } else {
        respond::whole(
            app,
            run,
            head.request_id,
            "input",
            error_response,
            |summary, text, finish| responses_api::whole(&meta, summary, text, finish),
        )
        .await
    }
}

/// `POST /v1/embeddings`: the model name checked as every endpoint checks
/// it, then the embedder's vectors (see `embeddings`).
async fn embed(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let body = read_body(app, req).await?;
    let params = embeddings::parse(&body)?;
    let Some(entry) = app.resolve_model(&params.model) else {
        return Err(unknown_model(&params.model, &app.models()).param("model"));
    };
    if app.shutting_down.load(Ordering::Acquire) {
        return Err(shutting_down(app.retry_after_secs));
    }
    // The route's cloud pass-through, else the local model (see `App`).
    let Some(embedder) = app
        .embedder_for(entry)
        .await
        .map_err(|e| start_error(app, e, H_POLICY))?
    else {
        return Err(embeddings::no_embedder(&params.model));
    };
    let out = embedder.embed(&params).await?;
    Ok(json_response(
        200,
        &embeddings::body(&params.model, out, params.base64),
    ))
}

/// `POST /v1/messages` (Anthropic's Messages API): read by
/// `anthropic_api`, run like every generation request, answered as a
/// `message` or its events.
async fn messages(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let (head, body) = read_request(app, req).await?;
    let mut params =
        anthropic_api::parse(&body, app.limits, edgecloud_wire::anthropic::Body::Create)?;
    let run = start(app, &head, &mut params).await?;
    let ids = Ids::prefixed("msg", run.info().run_id, &params.model);
    if params.stream {
        let shape = anthropic_api::Stream::new(ids);
        stream::respond(app.clone(), run, shape, head.request_id).await
    } else {
        respond::whole(
            app,
            run,
            head.request_id,
            "messages",
            anthropic_api::error_response,
            |summary, text, finish| anthropic_api::whole(&ids, summary, text, finish),
        )
        .await
    }
}

/// `POST /v1/messages/count_tokens`: the prompt a Messages request makes,
/// counted by the tokenizer of the local model its `model` selects (its
/// chat template and tools included; the model is loaded when the server
/// holds several), or estimated where no local model can count.
async fn count_tokens(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let body = read_body(app, req).await?;
    let params = anthropic_api::parse(
        &body,
        app.limits,
        edgecloud_wire::anthropic::Body::CountTokens,
    )?;
    let Some(entry) = app.resolve_model(&params.model) else {
        return Err(unknown_model(&params.model, &app.models()).param("model"));
    };
    // The local model (never a route's cloud pass-through): the one
    // whose tokenizer a run's local lane counts with.
    let counter = match app
        .engine
        .embedder(entry.model)
        .await
        .map_err(|e| start_error(app, e, H_POLICY))?
    {
        Some(e) => Some(e),
        None => app.embedder.clone(),
    };
    // Rendering a template and tokenizing a long prompt take
    // milliseconds: off the runtime's threads.
    let (messages, sampling) = (params.messages.clone(), params.sampling.clone());
    let counted = match counter {
        Some(c) => tokio::task::spawn_blocking(move || c.count_prompt(&messages, &sampling))
            .await
            .map_err(|e| ApiError::new(500, "server_error", e.to_string()))?
            .transpose()?,
        None => None,
    };
    Ok(anthropic_api::tokens_count(counted, &params))
}
