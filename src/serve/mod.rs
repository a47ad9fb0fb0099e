//! An OpenAI-compatible HTTP front door (`edgecloud serve`): existing
//! OpenAI clients, in any language, send chat completions here and the
//! harness answers them (local lane, cloud lane, policy, one deadline).
//! This module owns HTTP, the OpenAI wire format, the bearer token,
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
//! | `GET /v1/models`, `GET /v1/models/{id}` | the names a request may put in `model` |
//! | `GET /health` | `ok` (200) or `shutting_down` (503), lanes busy or not; never needs the token |
//! | `GET /metrics` | Prometheus text format, every name prefixed `edgecloud_` |
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
//! # Errors
//! `{"error": {"message", "type", "param", "code"}}`, as OpenAI sends them:
//! 400 malformed (`param` names the field), 401 bearer token, 404 unknown
//! model or endpoint, 405, 408 slow body, 413 body over the cap, 502 every
//! lane failed, 503 every lane the request needs is busy (`lanes_busy`,
//! with `Retry-After`), down (`lanes_unavailable`: the cloud lane in its
//! cooldown, `Retry-After` until its next probe) or shutting down, 504 no usable answer by the
//! deadline. Nothing queues: a busy lane answers at once.
//!
//! # Example
//! ```
//! use edgecloud::harness::{Backend, BackendFuture, BackendInfo, Candidate, Harness};
//! use edgecloud::serve::{ServeConfig, ServeMetrics, Server};
//! use edgecloud::{FinishReason, LaneJob, Policy};
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

mod app;
mod engine;
mod harness_engine;
mod http;
mod metrics;
mod response;
mod server;
mod stream;
mod wire;

#[cfg(test)]
mod tests;

use self::app::App;
use self::engine::Engine;
use self::harness_engine::HarnessEngine;
use self::metrics::Metrics;
use crate::harness::{Event, Harness, HarnessPool, Observer, Policy};
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// The port `edgecloud serve` listens on by default: not llama-server's
/// 8080, vLLM's 8000, LiteLLM's 4000, Ollama's 11434 or LM Studio's 1234,
/// so edgecloud runs next to any of them (and in front of one) unchanged.
pub const DEFAULT_PORT: u16 = 8181;

/// The server's settings. `Default` binds 127.0.0.1:[`DEFAULT_PORT`] with
/// no token.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeConfig {
    /// Where to listen. Loopback by default: exposing the server is a
    /// decision (set a token when you do).
    pub listen: SocketAddr,
    /// When set, every endpoint but `/health` needs
    /// `Authorization: Bearer <token>`.
    pub token: Option<BearerToken>,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Most messages in one request (400 beyond).
    pub max_messages: usize,
    /// Longest deadline a request may ask for.
    pub max_deadline: Duration,
    /// `max_tokens` for requests that do not say.
    pub default_max_tokens: u32,
    /// The `Retry-After` a busy (503) answer suggests.
    pub retry_after: Duration,
    /// How long a request may wait for a free instance of the pool before
    /// it is refused (`--max-queue-ms`); the wait counts inside the
    /// request's own deadline. `None` (the default): refuse at once, as a
    /// lane does.
    pub max_queue: Option<Duration>,
    /// How long shutdown waits for in-flight requests and late workers.
    pub shutdown_grace: Duration,
    /// Most connections open at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// How long a client may take to send a request body (408 beyond).
    pub body_timeout: Duration,
    /// Parameters for the policies a request may name (e.g. the configured
    /// cascade threshold); a kind not listed runs with its defaults.
    pub policy_presets: Vec<Policy>,
    /// Where the counters go; give the same value's
    /// [`observer`](ServeMetrics::observer) to the harness builder so late
    /// workers' overrun is counted too. `None`: fresh metrics.
    pub metrics: Option<ServeMetrics>,
    /// More names for the default route (vLLM's `--served-model-name`):
    /// a client with a hard-coded model name (`gpt-4o-mini`, `llama3`)
    /// works unchanged. Listed in `/v1/models` after `edgecloud`; a route's
    /// own name wins over an alias.
    pub model_aliases: Vec<String>,
    /// Any model name not otherwise known selects the default route
    /// instead of a 404 (`model_not_found`); `/v1/models` still lists the
    /// known names.
    pub accept_any_model: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            token: None,
            max_body_bytes: 1024 * 1024,
            max_messages: 256,
            max_deadline: Duration::from_secs(600),
            default_max_tokens: 256,
            retry_after: Duration::from_secs(1),
            max_queue: None,
            shutdown_grace: Duration::from_secs(10),
            max_connections: 512,
            body_timeout: Duration::from_secs(30),
            policy_presets: Vec::new(),
            metrics: None,
            model_aliases: Vec::new(),
            accept_any_model: false,
        }
    }
}

impl ServeConfig {
    /// Sets how long a request may wait for a free instance (see
    /// [`max_queue`](Self::max_queue)).
    pub fn max_queue(mut self, wait: Option<Duration>) -> Self {
        self.max_queue = wait;
        self
    }

    /// Adds a name for the default route (see
    /// [`model_aliases`](Self::model_aliases)).
    pub fn model_alias(mut self, name: impl Into<String>) -> Self {
        self.model_aliases.push(name.into());
        self
    }

    /// Lets any unknown model name select the default route.
    pub fn accept_any_model(mut self, yes: bool) -> Self {
        self.accept_any_model = yes;
        self
    }

    /// Listens on `addr`.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Requires this bearer token.
    pub fn token(mut self, token: BearerToken) -> Self {
        self.token = Some(token);
        self
    }

    /// Sets the body cap.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets the message-count cap.
    pub fn max_messages(mut self, n: usize) -> Self {
        self.max_messages = n;
        self
    }

    /// Sets the shutdown grace period.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Sets how long a client may take to send a request body.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// Sets `max_tokens` for requests that do not say.
    pub fn default_max_tokens(mut self, n: u32) -> Self {
        self.default_max_tokens = n;
        self
    }

    /// Uses these parameters when a request names a policy of its kind.
    pub fn policy_preset(mut self, policy: Policy) -> Self {
        self.policy_presets.retain(|p| p.kind() != policy.kind());
        self.policy_presets.push(policy);
        self
    }

    /// Records into `metrics` (see [`ServeConfig::metrics`]).
    pub fn metrics(mut self, metrics: ServeMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }
}

/// The server's counters, shared with the harness's observer.
#[derive(Debug, Clone, Default)]
pub struct ServeMetrics(Arc<Metrics>);

impl ServeMetrics {
    /// Empty counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// An observer for [`HarnessBuilder::observer`](crate::harness::HarnessBuilder::observer):
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
    /// behind a server.
    pub fn render(&self, harness: &Harness) -> String {
        self.render_pool(&HarnessPool::from(harness.clone()))
    }

    /// The Prometheus text for a pool's state now (per-instance gauges
    /// included).
    pub fn render_pool(&self, pool: &HarnessPool) -> String {
        let engine = HarnessEngine {
            pool: pool.clone(),
            max_queue: None,
            presets: Vec::new(),
        };
        self.0.render(&engine.health(), 0)
    }
}

/// A bearer token. `Debug` and `Display` print `BearerToken(***)`.
#[derive(Clone)]
pub struct BearerToken(Box<str>);

impl BearerToken {
    /// Wraps a token (visible ASCII, at least 1 character).
    pub fn new(token: impl Into<String>) -> Result<Self, ServeError> {
        let token: String = token.into();
        if token.is_empty() || !token.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(ServeError::Token {
                reason: "a token must be non-empty visible ASCII without spaces".into(),
            });
        }
        Ok(Self(token.into_boxed_str()))
    }

    /// Reads the token from the environment variable `var`, which must be
    /// set (naming a variable asks for a token).
    pub fn from_env(var: &str) -> Result<Self, ServeError> {
        match std::env::var(var) {
            Ok(v) => Self::new(v).map_err(|_| ServeError::Token {
                reason: format!(
                    "environment variable {var} must hold visible ASCII without spaces"
                ),
            }),
            Err(_) => Err(ServeError::Token {
                reason: format!("environment variable {var} is not set (or not Unicode)"),
            }),
        }
    }

    /// Compares in time independent of where the first difference is.
    pub(crate) fn matches(&self, given: &str) -> bool {
        use subtle::ConstantTimeEq;
        // Constant time in the content; the length may leak, as it does
        // for every bearer token on the wire.
        bool::from(self.0.as_bytes().ct_eq(given.as_bytes()))
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(***)")
    }
}

impl fmt::Display for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(***)")
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
    /// picks a free port: see [`local_addr`](Self::local_addr).
    pub async fn bind(harness: Harness, config: ServeConfig) -> Result<Server, ServeError> {
        Self::bind_pool(HarnessPool::from(harness), config).await
    }

    /// Like [`bind`](Self::bind), over a pool of instances: a request
    /// takes an idle instance, and when none is free it is refused with
    /// 503 `lanes_busy` (or waits up to [`ServeConfig::max_queue`]).
    pub async fn bind_pool(pool: HarnessPool, config: ServeConfig) -> Result<Server, ServeError> {
        let engine = HarnessEngine {
            pool,
            max_queue: config.max_queue,
            presets: config.policy_presets.clone(),
        };
        Self::bind_engine(Arc::new(engine), config).await
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
