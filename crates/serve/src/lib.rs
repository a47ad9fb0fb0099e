//! An OpenAI-compatible HTTP front door (`edgecloud serve`): existing
//! OpenAI clients, in any language, send chat completions here and the
//! harness answers them (local lane, cloud lane, policy, one deadline).
//! This module owns HTTP, its side of the OpenAI wire format (the shapes
//! themselves are `edgecloud_wire::openai`'s), the bearer token,
//! request caps, metrics and graceful shutdown; it must not decide how a
//! run goes (the harness does) nor touch a lane directly.
//!
//! ```text
//!  client --HTTP/1.1--> server (accept, cap connections)
//!                          |
//!                          v
//!                       http (route, bearer token, body cap, parse)
//!                          |  Job (request, route, policy, stream)
//!                          v
//!                       engine (the harness)  --> Run: committed text, Summary
//!                          |
//!            +-------------+--------------+
//!            v                            v
//!        whole JSON (200 / error)     stream (SSE once the first text
//!                                     arrives; error event after it)
//! ```
//!
//! # Endpoints
//! | endpoint | what |
//! |---|---|
//! | `POST /v1/chat/completions` | chat completion, whole or streamed (`"stream": true`) |
//! | `POST /v1/completions` | legacy text completion of a raw prompt (no chat template), whole or streamed |
//! | `POST /v1/responses` | the Responses API (stateless), whole or streamed as its events |
//! | `POST /v1/embeddings` | the local model's embeddings ([`ServeConfig::embeddings`]; see `embeddings`), or the cloud endpoint's on a route that passes them through (`ServeConfig::cloud_embeddings`) |
//! | `POST /v1/messages`, `POST /v1/messages/count_tokens` | Anthropic's Messages API, whole or streamed as its events, errors in its shape (`anthropic_api`) |
//! | `GET /api/version`, `/api/tags`, `/api/ps`; `POST /api/show`, `/api/chat`, `/api/generate`, `/api/embed`, `/api/embeddings` | Ollama's native API, NDJSON streaming by default, errors in its shape (`ollama_api`, `ollama_models`; models described by [`ServeConfig::model_facts`]) |
//! | `GET /v1/models`, `GET /v1/models/{id}` | the names a request may put in `model` |
//! | `GET /health` | `ok` (200) or `shutting_down` (503), lanes busy or not; never needs the token |
//! | `GET /metrics` | Prometheus text format, every name prefixed `edgecloud_` |
//! | `GET /` | the server's name, version, models and endpoints (JSON) |
//!
//! # Extension fields and headers
//! A request may choose the policy and deadline, in the body (wins) or as
//! headers:
//! - `"edgecloud": {"policy": "race", "deadline_ms": 1500}`
//! - `X-Edgecloud-Policy: race`, `X-Edgecloud-Deadline-Ms: 1500`
//! - `X-Request-Id: ...` becomes the run's request id and is echoed back.
//!
//! Every chat response carries `X-Edgecloud-Run-Id`, `-Route`, `-Policy`
//! and `-Deadline-Ms`; a whole response (and any error after a run) also
//! carries `X-Edgecloud-Status`, `-Lane` (who answered), `-Elapsed-Ms`,
//! `-Late-Workers` and `-Lanes` (`local=completed,cloud=cancelled`). The
//! body's `edgecloud` field (the finish chunk's, when streaming) holds the
//! outcome summary: run id, route, policy, status, lane, deadline, elapsed,
//! overshoot, late workers, decision, and per lane its status, times,
//! finish reason, score, error and token counts by source.
//!
//! # Several models
//! [`Server::bind_models`] serves several local models ([`Models`]), a
//! request's `model` naming one: each is a harness of its own, loaded on
//! its first request, unloaded after its keep-alive or to make room under
//! the budget (never while a run or late worker holds it); `/v1/models`
//! says which are `loaded`, `/health` adds `models` (see `models`).
//!
//! # Browsers
//! [`ServeConfig::cors`] (off by default) answers CORS preflights (204, no
//! token needed) and marks every other response with the allowed origin;
//! see `cors`.
//!
//! # Errors
//! Each API's own shape: Anthropic's under `/v1/messages`, Ollama's under
//! `/api/`; elsewhere
//! `{"error": {"message", "type", "param", "code"}}`, as OpenAI sends them:
//! 400 malformed (`param` names the field), 401 bearer token, 404 unknown
//! model or endpoint, 405, 408 slow body, 413 body over the cap, 502 every
//! lane failed, 500 `model_load_failed` (a model of several that could
//! not be loaded, named), 503 `models_busy` (no loaded model idle to make
//! room for it), 503 every lane the request needs is busy (`lanes_busy`,
//! with `Retry-After`), down (`lanes_unavailable`: the cloud lane in its
//! cooldown, `Retry-After` until its next probe) or shutting down, 504 no usable answer by the
//! deadline. Nothing queues: a busy lane answers at once.
//!
//! # Example
//! ```
//! use edgecloud_core::harness::{Backend, BackendFuture, BackendInfo, Candidate, Harness};
//! use edgecloud_serve::{ServeConfig, ServeMetrics, Server};
//! use edgecloud_core::{FinishReason, LaneJob, Policy};
//!
//! /// A stand-in lane that answers at once.
//! struct Echo;
//! impl Backend for Echo {
//!     fn info(&self) -> BackendInfo { BackendInfo::named("echo") }
//!     fn run(&self, job: LaneJob) -> BackendFuture {
//!         let text = job.messages.last().map(|m| m.content.clone()).unwrap_or_default();
//!         Box::pin(async move { Ok(Candidate::new(text, FinishReason::Stop)) })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let metrics = ServeMetrics::new();
//! let harness = Harness::builder()
//!     .local(Echo)
//!     .policy(Policy::LocalOnly)
//!     .observer(metrics.observer())
//!     .build()?;
//! let config = ServeConfig::default()
//!     .listen("127.0.0.1:0".parse()?)
//!     .metrics(metrics);
//! let server = Server::bind(harness, config).await?.spawn();
//! let body = serde_json::json!({"model": "edgecloud", "messages": [{"role": "user", "content": "hi"}]});
//! let answer: serde_json::Value = reqwest::Client::new()
//!     .post(format!("{}/chat/completions", server.base_url()))
//!     .json(&body)
//!     .send()
//!     .await?
//!     .json()
//!     .await?;
//! assert_eq!(answer["choices"][0]["message"]["content"], "hi");
//! assert_eq!(answer["edgecloud"]["lane"], "local");
//! assert!(server.shutdown().await.is_clean());
//! # Ok(())
//! # }
//! ```

mod anthropic_api;
mod app;
mod completions;
mod config;
mod cors;
pub mod embedder;
mod embeddings;
mod engine;
mod harness_engine;
mod http;
mod metrics;
mod model_facts;
mod models;
mod models_config;
mod ollama_api;
mod ollama_models;
mod respond;
mod responses_api;
mod server;
mod stream;
mod token;
#[doc(hidden)]
pub mod wire;

#[cfg(test)]
mod tests;

pub use self::config::{ServeConfig, DEFAULT_PORT};
pub use self::cors::CorsOrigins;
pub use self::model_facts::ModelFacts;
pub use self::models::{KeepAlive, MaxLoaded};
pub use self::models_config::{LoadError, LoadedModel, Models};
pub use self::token::BearerToken;

use self::app::App;
use self::engine::Engine;
use self::harness_engine::HarnessEngine;
use self::metrics::Metrics;
use edgecloud_core::harness::{Event, Harness, Observer};
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// The server's counters, shared with the harness's observer.
#[derive(Debug, Clone, Default)]
pub struct ServeMetrics(Arc<Metrics>);

impl ServeMetrics {
    /// Empty counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// An observer for [`HarnessBuilder::observer`](edgecloud_core::harness::HarnessBuilder::observer):
    /// it records how long late workers ran past their run.
    pub fn observer(&self) -> impl Observer {
        let metrics = self.0.clone();
        move |event: &Event| {
            if let Event::LateWorkerFinished {
                lane, overrun_ms, ..
            } = event
            {
                metrics.late_worker_finished(
                    *lane,
                    Duration::from_secs_f64(overrun_ms.max(0.0) / 1e3),
                );
            }
        }
    }

    /// The Prometheus text `GET /metrics` serves, for a harness that is not
    /// behind a server (per-instance gauges included).
    pub fn render(&self, harness: &Harness) -> String {
        let engine = HarnessEngine {
            harness: harness.clone(),
            max_queue: None,
            presets: Vec::new(),
        };
        self.0.render(&engine.health(), engine.ledger().as_ref(), 0)
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The address could not be bound (in use, not permitted, ...).
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The bearer token is unusable.
    #[error("invalid bearer token: {reason}")]
    Token {
        /// Why (never the token itself).
        reason: String,
    },
    /// The CORS origins are unusable.
    #[error("invalid CORS origins: {reason}")]
    Cors {
        /// Why.
        reason: String,
    },
    /// The models' names are unusable (empty, repeated, a route's).
    #[error("invalid models: {reason}")]
    Models {
        /// Why.
        reason: String,
    },
    /// A model to preload could not be loaded.
    #[error("the model `{model}` could not be loaded: {reason}")]
    ModelLoad {
        /// Its name.
        model: String,
        /// Why (the loader's error, whole).
        reason: String,
    },
}

/// What shutdown found when its grace period ended (or everything
/// finished).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServeReport {
    /// From the shutdown signal to the end.
    pub waited_ms: f64,
    /// Connections still open when the grace period ran out.
    pub connections_left: usize,
    /// Runs not yet settled.
    pub runs_in_flight: u64,
    /// Workers (late or not) still holding a lane.
    pub workers_still_running: usize,
}

impl ServeReport {
    /// True when nothing was left running.
    pub fn is_clean(&self) -> bool {
        self.connections_left == 0 && self.runs_in_flight == 0 && self.workers_still_running == 0
    }
}

/// A bound server, not yet serving.
pub struct Server {
    listener: TcpListener,
    app: Arc<App>,
    addr: SocketAddr,
    max_connections: usize,
    grace: Duration,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds `config.listen` with the harness behind it. Binding to port 0
    /// picks a free port: see [`local_addr`](Self::local_addr). A request
    /// takes an idle instance of the harness; when none is free it is
    /// refused with 503 `lanes_busy` (or waits up to
    /// [`ServeConfig::max_queue`]).
    pub async fn bind(harness: Harness, config: ServeConfig) -> Result<Server, ServeError> {
        let engine = HarnessEngine {
            harness,
            max_queue: config.max_queue,
            presets: config.policy_presets.clone(),
        };
        Self::bind_engine(Arc::new(engine), config).await
    }

    /// Binds `config.listen` with several models behind it (see
    /// [`Models`]): a request's `model` names one, which is loaded on its
    /// first request (or here, with [`Models::preload`]).
    pub async fn bind_models(models: Models, config: ServeConfig) -> Result<Server, ServeError> {
        let names = models
            .names()
            .map_err(|reason| ServeError::Models { reason })?;
        let (keep_alive, max_loaded) = models.settings();
        let loader = models.loader(config.max_queue, config.policy_presets.clone());
        let set =
            self::models::ModelSet::new(Arc::new(loader), names, keep_alive, max_loaded).sweep();
        if models.preloads() {
            for name in models.names_in_order() {
                set.preload(&name)
                    .await
                    .map_err(|e| ServeError::ModelLoad {
                        model: name.clone(),
                        reason: match e {
                            engine::StartError::ModelLoad { message, .. }
                            | engine::StartError::ModelsBusy { message, .. }
                            | engine::StartError::Invalid { message, .. }
                            | engine::StartError::Internal(message) => message,
                            other => format!("{other:?}"),
                        },
                    })?;
            }
        }
        Self::bind_engine(Arc::new(set), config).await
    }

    pub(crate) async fn bind_engine(
        engine: Arc<dyn Engine>,
        config: ServeConfig,
    ) -> Result<Server, ServeError> {
        let metrics = config.metrics.clone().unwrap_or_default().0;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
        if !addr.ip().is_loopback() && config.token.is_none() {
            tracing::warn!(%addr, "listening beyond loopback without a bearer token");
        }
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let app = Arc::new(App {
            engine,
            metrics,
            token: config.token,
            cors: config.cors,
            max_body_bytes: config.max_body_bytes,
            body_timeout: config.body_timeout,
            limits: wire::Limits {
                max_messages: config.max_messages,
                max_deadline: config.max_deadline,
                default_max_tokens: config.default_max_tokens,
            },
            retry_after_secs: config.retry_after.as_secs().max(1),
            model_aliases: config.model_aliases,
            accept_any_model: config.accept_any_model,
            embedder: config.embedder,
            route_embedders: config.route_embedders,
            model_facts: config.model_facts,
            created,
            shutting_down: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
        });
        Ok(Server {
            listener,
            app,
            addr,
            max_connections: config.max_connections,
            grace: config.shutdown_grace,
        })
    }

    /// The address it listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The names a request may put in `model`: `edgecloud` (the harness's
    /// default route), the configured aliases of it, then each route's name
    /// when the harness has named routes.
    pub fn models(&self) -> Vec<String> {
        self.app.models().into_iter().map(|m| m.id).collect()
    }

    /// Serves until `shutdown` completes, then shuts down gracefully: stops
    /// accepting, lets in-flight requests finish, and waits for late
    /// workers, all within the grace period.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> ServeReport {
        server::serve(
            self.listener,
            self.app,
            self.max_connections,
            self.grace,
            shutdown,
        )
        .await
    }

    /// Serves on a task of the current runtime; the handle stops it.
    pub fn spawn(self) -> ServerHandle {
        let addr = self.addr;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run_until(async move {
            let _ = stopped.await;
        }));
        ServerHandle { addr, stop, task }
    }
}

/// A server running on a task (see [`Server::spawn`]).
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<ServeReport>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR/v1`, what an OpenAI client takes as its base URL.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Shuts the server down gracefully and waits for it.
    pub async fn shutdown(self) -> ServeReport {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(report) => report,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only a runtime shutting down cancels the task, and then
            // nothing awaits this.
            Err(e) => panic!("the server task was cancelled: {e}"),
        }
    }
}
