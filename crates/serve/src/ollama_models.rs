//! The rest of Ollama's native API, the calls apps make before they ask
//! anything (`GET /api/version`, `GET /api/tags`, `POST /api/show` with
//! the model's `capabilities`, `GET /api/ps`) and the embeddings calls
//! (`POST /api/embed`, the older `POST /api/embeddings`), answered from
//! the server's own models and their [`ModelFacts`]; and the
//! model-management calls edgecloud does not offer (`pull`, `push`,
//! `create`, `copy`, `delete`, blobs), refused with what to do instead.
//! Errors are Ollama's shape (`ollama_api::error_response`). It must not
//! run generation (`ollama_api` does) or load models but through the
//! engine.

use super::app::App;
use super::embedder::{Input, Params};
use super::embeddings;
use super::engine::ModelEntry;
use super::http;
use super::model_facts::ModelFacts;
use super::models::KeepAlive;
use super::ollama_api::known_name;
use super::respond::{json_response, Body};
use super::wire::{self, ApiError};
use edgecloud_wire::ollama::{self, ModelListing, Timings};
use hyper::body::Incoming;
use hyper::Response;
use serde_json::{json, Map};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The Ollama API level these endpoints follow: what `/api/version`
/// reports (apps check it before they use tools or structured outputs).
pub(crate) const OLLAMA_VERSION: &str = "0.14.0";

/// `GET /api/version`.
pub(crate) fn version() -> Response<Body> {
    json_response(
        200,
        &json!({"version": OLLAMA_VERSION, "edgecloud": env!("CARGO_PKG_VERSION")}),
    )
}

/// How a name is listed: its model's facts, digest included.
async fn listing(app: &App, entry: &ModelEntry) -> (ModelListing, Option<ModelFacts>) {
    let facts = app.facts_of(entry).cloned();
    let mut l = ModelListing {
        name: entry.id.clone(),
        ..ModelListing::default()
    };
    if let Some(f) = &facts {
        l.size = f.size;
        l.digest = f.digest().await;
        l.modified_at = f.modified.map(ollama::rfc3339);
        l.family = f.architecture.clone();
        l.parameters = f.parameters;
        l.quantization = f.quantization.clone();
    }
    (l, facts)
}

/// `GET /api/tags`: every name a request may put in `model`, as
/// `/v1/models` lists them, with its model's size, digest and details.
pub(crate) async fn tags(app: &App) -> Response<Body> {
    let mut models = Vec::new();
    for entry in app.models() {
        models.push(listing(app, &entry).await.0.tag());
    }
    json_response(200, &json!({"models": models}))
}

/// A model name from a body, as the server knows it.
fn entry_of(app: &App, name: &str) -> Result<(String, ModelEntry), ApiError> {
    let name = known_name(app, name).unwrap_or_else(|| name.to_string());
    match app.resolve_model(&name) {
        Some(e) => Ok((name, e)),
        None => Err(http::unknown_model(&name, &app.models()).param("model")),
    }
}

/// `POST /api/show`: the model's details, template, parameters,
/// `model_info` (its GGUF keys) and `capabilities`.
pub(crate) async fn show(
    app: &Arc<App>,
    req: hyper::Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let body = http::read_body(app, req).await?;
    let obj = wire::json_object(&body)?;
    let (_, entry) = entry_of(app, &ollama::model_name(&obj)?)?;
    let (l, facts) = listing(app, &entry).await;
    // A server without a local model answers with its cloud lane, which
    // generates and takes tools.
    let facts = facts.unwrap_or_else(ModelFacts::generative);
    let mut info = Map::new();
    if let Some(arch) = &facts.architecture {
        info.insert("general.architecture".into(), json!(arch));
        for (key, v) in [
            ("context_length", facts.context_length),
            ("embedding_length", facts.embedding_length),
        ] {
            if let Some(n) = v {
                info.insert(format!("{arch}.{key}"), json!(n));
            }
        }
    }
    if let Some(n) = facts.parameters {
        info.insert("general.parameter_count".into(), json!(n));
    }
    if let Some(q) = &facts.quantization {
        info.insert("general.file_type".into(), json!(q));
    }
    let parameters = facts
        .serving_context
        .map(|n| format!("num_ctx                        {n}"))
        .unwrap_or_default();
    let from = facts
        .path
        .as_ref()
        .map_or_else(|| entry.id.clone(), |p| p.display().to_string());
    let v = json!({
        "capabilities": facts.capabilities(),
        "details": l.details(),
        "license": "",
        "model_info": info,
        "modelfile": format!(
            "# edgecloud serves this model from its GGUF file; it has no Modelfile\nFROM {from}\n"
        ),
        "modified_at": l.modified_at.unwrap_or_else(|| ollama::rfc3339(SystemTime::UNIX_EPOCH)),
        "parameters": parameters,
        "template": facts.chat_template.clone().unwrap_or_default(),
    });
    Ok(json_response(200, &v))
}

/// `GET /api/ps`: the local models loaded now, each with the memory it
/// holds and when its keep-alive unloads it (a server of one model never
/// unloads it).
pub(crate) async fn ps(app: &App) -> Response<Body> {
    let health = app.engine.health();
    let now = SystemTime::now();
    let mut loaded: Vec<(ModelEntry, Option<u64>, String)> = Vec::new();
    if health.models.is_empty() {
        let local = health
            .lanes
            .iter()
            .any(|l| l.lane == edgecloud_core::lane::Lane::Local && l.configured);
        if local {
            let entry = ModelEntry::route(super::harness_engine::DEFAULT_MODEL, None);
            loaded.push((entry, None, ollama::NEVER_EXPIRES.to_string()));
        }
    } else {
        for m in health.models.iter().filter(|m| m.loaded) {
            let entry = ModelEntry {
                id: m.name.clone(),
                route: None,
                model: Some(m.name.clone()),
                loaded: Some(true),
            };
            let expires = m.expires_in_ms.map_or_else(
                || ollama::NEVER_EXPIRES.to_string(),
                |ms| ollama::rfc3339(now + Duration::from_secs_f64(ms / 1e3)),
            );
            loaded.push((entry, m.memory_bytes, expires));
        }
    }
    let mut models = Vec::new();
    for (entry, memory, expires) in loaded {
        let (l, facts) = listing(app, &entry).await;
        let memory = memory
            .or_else(|| facts.as_ref().and_then(|f| f.memory_bytes))
            .unwrap_or(l.size);
        let context = facts.as_ref().and_then(|f| f.serving_context);
        models.push(l.loaded(memory, &expires, context));
    }
    json_response(200, &json!({"models": models}))
}

/// `POST /api/embed` (`legacy`: `/api/embeddings`): the vectors of the
/// local model (or the route's cloud pass-through) `model` selects, as
/// `/v1/embeddings` gives them (L2-normalised).
pub(crate) async fn embed(
    app: &Arc<App>,
    req: hyper::Request<Incoming>,
    legacy: bool,
) -> Result<Response<Body>, ApiError> {
    let started = Instant::now();
    let body = http::read_body(app, req).await?;
    let obj = wire::json_object(&body)?;
    let r = ollama::parse_embed(&obj, legacy)?;
    let (name, entry) = entry_of(app, &r.model)?;
    if let Some(k) = r.keep_alive.as_deref() {
        let keep = KeepAlive::parse(k)
            .map_err(|e| ApiError::invalid("keep_alive", format!("`keep_alive`: {e}")))?;
        app.engine.keep_alive(entry.model.clone(), keep);
    }
    let params = Params {
        model: name.clone(),
        inputs: r.inputs.into_iter().map(Input::Text).collect(),
        base64: false,
        dimensions: r.dimensions,
    };
    let Some(embedder) = app
        .embedder_for(entry)
        .await
        .map_err(|e| http::start_error(app, e, http::H_POLICY))?
    else {
        return Err(embeddings::no_embedder(&name));
    };
    let out = embedder.embed(&params).await?;
    if legacy {
        let first = out.vectors.first().map_or(&[][..], |v| &v[..]);
        return Ok(json_response(200, &ollama::embedding(first)));
    }
    let timings = Timings {
        total_duration: started.elapsed().as_nanos() as u64,
        prompt_eval_count: u64::from(out.prompt_tokens),
        ..Timings::default()
    };
    Ok(json_response(
        200,
        &ollama::embed(&name, &out.vectors, &timings),
    ))
}

/// A model-management call edgecloud does not offer: 501, saying how
/// edgecloud gets models.
pub(crate) fn management(path: &str) -> ApiError {
    ApiError::new(
        501,
        "not_implemented",
        format!(
            "{path} is not offered: edgecloud does not manage a model store. Get a GGUF with \
             `edgecloud model fetch NAME` (or point at one from Ollama's store with \
             `-m ollama:NAME`, or from Hugging Face with `-m hf:REPO:QUANT`), then start \
             `edgecloud serve -m MODEL` (several: `--model NAME=MODEL`)"
        ),
    )
    .code("not_implemented")
}
