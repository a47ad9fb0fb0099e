//! The server's settings ([`ServeConfig`]) and the default port: plain
//! data with builder methods. It must not open sockets or read the
//! environment; [`Server::bind`](super::Server::bind) turns it into a
//! running app.

use super::{BearerToken, CorsOrigins, ServeMetrics};
use edgecloud_core::harness::Policy;
use std::net::SocketAddr;
use std::time::Duration;

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
    /// Which browser origins may call the server (CORS); off by default.
    /// A preflight needs no token; every other request still does.
    pub cors: CorsOrigins,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// Most messages in one request (400 beyond).
    pub max_messages: usize,
    /// Longest deadline a request may ask for.
    pub max_deadline: Duration,
    /// `max_tokens` for requests that do not say
    /// ([`MAX_TOKENS_UNBOUNDED`](edgecloud_core::request::MAX_TOKENS_UNBOUNDED)
    /// by default: the answer ends when the model stops or its context is
    /// full, and the request's deadline bounds the run).
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
    /// What answers `POST /v1/embeddings`: set by
    /// [`embeddings`](Self::embeddings); without it the endpoint answers
    /// 400 `model_cannot_embed`.
    pub(crate) embedder: Option<std::sync::Arc<dyn super::embedder::Embedder>>,
    /// Routes whose embeddings go elsewhere (the cloud lane): by route,
    /// `None` for the default route. Set by
    /// [`cloud_embeddings`](Self::cloud_embeddings).
    pub(crate) route_embedders: RouteEmbedders,
    /// What the APIs that describe models (Ollama's `/api/tags`,
    /// `/api/show`, `/api/ps`) say about each local model, by name. Set by
    /// [`model_facts`](Self::model_facts).
    pub(crate) model_facts: std::collections::BTreeMap<String, super::ModelFacts>,
}

/// Embedders by route (`None`: the default route).
pub(crate) type RouteEmbedders =
    std::collections::BTreeMap<Option<String>, std::sync::Arc<dyn super::embedder::Embedder>>;

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            token: None,
            cors: CorsOrigins::Off,
            max_body_bytes: 1024 * 1024,
            max_messages: 256,
            max_deadline: Duration::from_secs(600),
            // No limit of its own (OpenAI's, llama-server's and Ollama's
            // default): the model, its context and the deadline end it.
            default_max_tokens: edgecloud_core::request::MAX_TOKENS_UNBOUNDED,
            retry_after: Duration::from_secs(1),
            max_queue: None,
            shutdown_grace: Duration::from_secs(10),
            max_connections: 512,
            body_timeout: Duration::from_secs(30),
            policy_presets: Vec::new(),
            metrics: None,
            model_aliases: Vec::new(),
            accept_any_model: false,
            embedder: None,
            route_embedders: RouteEmbedders::new(),
            model_facts: std::collections::BTreeMap::new(),
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

    /// Answers `POST /v1/embeddings` with this embedder (the local lane's:
    /// `edgecloud::serve::LocalEmbedder`, which runs on the lane's worker
    /// between its generation steps and takes no lane slot; any lane of a
    /// pool will do: they share one worker and model).
    pub fn embeddings(mut self, embedder: impl super::embedder::Embedder) -> Self {
        self.embedder = Some(std::sync::Arc::new(embedder));
        self
    }

    /// Answers `POST /v1/embeddings` on `route` (`None`: the default
    /// route, which `edgecloud` and the aliases select) with this embedder
    /// (the cloud endpoint's, passed through:
    /// `edgecloud::serve::CloudEmbedder`), whatever local model the server
    /// holds.
    pub fn cloud_embeddings(
        mut self,
        route: Option<&str>,
        embedder: impl super::embedder::Embedder,
    ) -> Self {
        self.route_embedders
            .insert(route.map(str::to_owned), std::sync::Arc::new(embedder));
        self
    }

    /// Describes the local model `name` (`edgecloud` for a server of one
    /// model; each model's name for a server of several) to the APIs that
    /// list models: Ollama's `/api/tags`, `/api/show` and `/api/ps`.
    pub fn model_facts(mut self, name: impl Into<String>, facts: super::ModelFacts) -> Self {
        self.model_facts.insert(name.into(), facts);
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

    /// Lets these browser origins call the server (see
    /// [`cors`](Self::cors)).
    pub fn cors(mut self, origins: CorsOrigins) -> Self {
        self.cors = origins;
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
