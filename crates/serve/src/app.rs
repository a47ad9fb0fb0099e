//! The state every request handler shares: the engine, metrics, limits and
//! the server's shutdown flags. Data only; it must not handle requests.

use super::config::RouteEmbedders;
use super::embedder::Embedder;
use super::engine::{BoxFuture, Engine, ModelEntry, StartError};
use super::metrics::Metrics;
use super::wire::Limits;
use super::{BearerToken, CorsOrigins};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

/// Everything a request handler needs, shared by all connections.
pub(crate) struct App {
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) token: Option<BearerToken>,
    /// Which browser origins may call (CORS).
    pub(crate) cors: CorsOrigins,
    pub(crate) max_body_bytes: usize,
    pub(crate) body_timeout: Duration,
    pub(crate) limits: Limits,
    pub(crate) retry_after_secs: u64,
    /// More names of the default route.
    pub(crate) model_aliases: Vec<String>,
    /// Unknown model names select the default route.
    pub(crate) accept_any_model: bool,
    /// What answers `POST /v1/embeddings` (`None`: nothing here can).
    pub(crate) embedder: Option<Arc<dyn Embedder>>,
    /// Routes whose embeddings another embedder answers (the cloud lane).
    pub(crate) route_embedders: RouteEmbedders,
    /// What the APIs that describe models say about each local model, by
    /// its name (`edgecloud` for a server of one).
    pub(crate) model_facts: std::collections::BTreeMap<String, super::ModelFacts>,
    pub(crate) created: u64,
    pub(crate) shutting_down: AtomicBool,
    pub(crate) connections: AtomicUsize,
}

/// Another name for what the engine's first entry (the default) selects.
fn default_named(models: &[ModelEntry], id: &str) -> ModelEntry {
    match models.first() {
        Some(first) => ModelEntry {
            id: id.to_string(),
            loaded: None,
            ..first.clone()
        },
        None => ModelEntry::route(id, None),
    }
}

impl App {
    /// The names a request may put in `model`: the engine's first (the
    /// default route's `edgecloud`), then the aliases, then the routes. A
    /// route's own name wins over an alias of the same spelling.
    pub(crate) fn models(&self) -> Vec<ModelEntry> {
        let mut models = self.engine.models();
        let at = models.len().min(1);
        let aliases: Vec<ModelEntry> = self
            .model_aliases
            .iter()
            .filter(|a| !models.iter().any(|m| &m.id == *a))
            .map(|a| default_named(&models, a))
            .collect();
        models.splice(at..at, aliases);
        models
    }

    /// What embeds for `entry`: its route's own embedder (the cloud lane)
    /// when it has one, else the local model it selects (an engine of
    /// several loads it), else the server's local lane; `None`: nothing
    /// here can. Each request is counted by the lane that embeds it.
    pub(crate) fn embedder_for(
        &self,
        entry: ModelEntry,
    ) -> BoxFuture<'_, Result<Option<Arc<dyn Embedder>>, StartError>> {
        Box::pin(async move {
            let found = match self.route_embedders.get(&entry.route) {
                Some(e) => Some(e.clone()),
                None => self
                    .engine
                    .embedder(entry.model)
                    .await?
                    .or_else(|| self.embedder.clone()),
            };
            Ok(found.map(|inner| {
                Arc::new(super::embeddings::Counted {
                    inner,
                    metrics: self.metrics.clone(),
                }) as Arc<dyn Embedder>
            }))
        })
    }

    /// The facts of the local model `entry` selects, when known.
    pub(crate) fn facts_of(&self, entry: &ModelEntry) -> Option<&super::ModelFacts> {
        let name = entry
            .model
            .as_deref()
            .unwrap_or(super::harness_engine::DEFAULT_MODEL);
        self.model_facts.get(name)
    }

    /// What the model name `id` selects; `None`: it is unknown here.
    pub(crate) fn resolve_model(&self, id: &str) -> Option<ModelEntry> {
        self.models().into_iter().find(|m| m.id == id).or_else(|| {
            self.accept_any_model
                .then(|| default_named(&self.engine.models(), id))
        })
    }
}
