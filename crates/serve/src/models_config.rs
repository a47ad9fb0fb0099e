//! The public description of a server of several models ([`Models`]): the
//! names, how one is loaded (a closure building its [`Harness`]), the
//! keep-alive, the memory budget, preloading and which routes run on
//! which model; and its checks. [`Server::bind_models`](super::Server::bind_models)
//! turns it into the model set (`models`). Plain data and the loader
//! adapter; it must not decide when a model loads.

use super::embedder::Embedder;
use super::engine::BoxFuture;
use super::harness_engine::{HarnessEngine, DEFAULT_MODEL};
use super::models::{KeepAlive, Loaded, Loader, MaxLoaded, Names, Release};
use edgecloud_core::harness::{Harness, Policy};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Why a model could not be loaded (the loader's error, shown whole).
pub type LoadError = Box<dyn std::error::Error + Send + Sync + 'static>;

type LoadFn = dyn Fn(&str) -> Result<LoadedModel, LoadError> + Send + Sync + 'static;

/// One model, loaded: the harness that answers for it (its own local
/// lanes, and whatever cloud lane it was built with) and what embeds
/// with it.
pub struct LoadedModel {
    harness: Harness,
    embeddings: Option<Arc<dyn Embedder>>,
    memory_bytes: u64,
}

impl fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedModel")
            .field("memory_bytes", &self.memory_bytes)
            .finish_non_exhaustive()
    }
}

impl LoadedModel {
    /// The model's harness.
    pub fn new(harness: Harness) -> Self {
        Self {
            harness,
            embeddings: None,
            memory_bytes: 0,
        }
    }

    /// Answers `POST /v1/embeddings` for this model with this local lane
    /// (any of its pool's lanes: they share one worker), and shuts that
    /// worker down when the model is unloaded, so its memory is freed
    /// before the next load.
    pub fn embeddings(mut self, embedder: impl Embedder) -> Self {
        self.embeddings = Some(Arc::new(embedder));
        self
    }

    /// What it holds in memory (its weights and KV cache; 0: the file's
    /// size), for `/health`, metrics
    /// and the byte budget.
    pub fn memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = bytes;
        self
    }
}

/// Several local models behind one server: each a name a request's
/// `model` selects, loaded on its first request (or at start with
/// [`preload`](Self::preload)) by the closure given to [`new`](Self::new),
/// unloaded after [`keep_alive`](Self::keep_alive) of idleness or to make
/// room under [`max_loaded`](Self::max_loaded) (the least recently used
/// idle model first; never one with a run in flight).
pub struct Models {
    load: Arc<LoadFn>,
    models: Vec<(String, u64)>,
    default: Option<String>,
    routes: Vec<(String, Option<String>)>,
    keep_alive: KeepAlive,
    max_loaded: MaxLoaded,
    preload: bool,
}

impl fmt::Debug for Models {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Models")
            .field("models", &self.models)
            .field("default", &self.default)
            .field("routes", &self.routes)
            .field("keep_alive", &self.keep_alive)
            .field("max_loaded", &self.max_loaded)
            .field("preload", &self.preload)
            .finish_non_exhaustive()
    }
}

impl Models {
    /// No models yet; `load` builds one by name (blocking: it runs on a
    /// thread of its own, never on the server's).
    pub fn new(
        load: impl Fn(&str) -> Result<LoadedModel, LoadError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            load: Arc::new(load),
            models: Vec::new(),
            default: None,
            routes: Vec::new(),
            keep_alive: KeepAlive::DEFAULT,
            max_loaded: MaxLoaded::DEFAULT,
            preload: false,
        }
    }

    /// Adds a model by name, with what it will hold in memory (its file's
    /// size), for the byte budget before it is loaded.
    pub fn model(mut self, name: impl Into<String>, memory_bytes: u64) -> Self {
        self.models.push((name.into(), memory_bytes));
        self
    }

    /// The model `edgecloud` (and every route naming none) runs on;
    /// default: the first added.
    pub fn default_model(mut self, name: impl Into<String>) -> Self {
        self.default = Some(name.into());
        self
    }

    /// A named route of the harnesses, and the model it runs on (`None`:
    /// the default model).
    pub fn route(mut self, route: impl Into<String>, model: Option<String>) -> Self {
        self.routes.push((route.into(), model));
        self
    }

    /// How long an idle model stays loaded (default five minutes).
    pub fn keep_alive(mut self, keep_alive: KeepAlive) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// The memory budget (default three models).
    pub fn max_loaded(mut self, max: MaxLoaded) -> Self {
        self.max_loaded = max;
        self
    }

    /// Loads every model at start (in order, within the budget) instead of
    /// on first use; a model that fails to load then fails the start.
    pub fn preload(mut self, yes: bool) -> Self {
        self.preload = yes;
        self
    }

    /// Whether the server loads every model at start.
    pub(crate) fn preloads(&self) -> bool {
        self.preload
    }

    /// The model names in order.
    pub(crate) fn names_in_order(&self) -> Vec<String> {
        self.models.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Checks the names: none empty or repeated, none a route's or
    /// `edgecloud`, every route's model known.
    pub(crate) fn names(&self) -> Result<Names, String> {
        let Some((first, _)) = self.models.first() else {
            return Err("no models".into());
        };
        let mut seen = BTreeMap::new();
        for (name, _) in &self.models {
            if name.trim().is_empty() || name.contains(char::is_whitespace) {
                return Err(format!("the model name `{name}` is empty or holds spaces"));
            }
            if name == DEFAULT_MODEL {
                return Err(format!(
                    "`{DEFAULT_MODEL}` is the default route's name; choose another model name"
                ));
            }
            if seen.insert(name.clone(), ()).is_some() {
                return Err(format!("the model name `{name}` is given twice"));
            }
        }
        let known = |m: &str| seen.contains_key(m);
        let default = self.default.clone().unwrap_or_else(|| first.clone());
        if !known(&default) {
            return Err(format!(
                "the default model `{default}` is not one of the models"
            ));
        }
        for (route, model) in &self.routes {
            if known(route) {
                return Err(format!(
                    "`{route}` is both a route and a model; rename one of them"
                ));
            }
            if let Some(m) = model.as_deref().filter(|m| !known(m)) {
                return Err(format!(
                    "the route `{route}` runs on the model `{m}`, which is not one of the models ({})",
                    self.names_in_order().join(", ")
                ));
            }
        }
        Ok(Names {
            models: self.names_in_order(),
            default,
            routes: self
                .routes
                .iter()
                .filter(|(r, _)| r != "default" && r != DEFAULT_MODEL)
                .cloned()
                .collect(),
        })
    }

    /// The loader the model set calls, building each model's engine as
    /// [`Server::bind`](super::Server::bind) builds the one.
    pub(crate) fn loader(&self, max_queue: Option<Duration>, presets: Vec<Policy>) -> FnLoader {
        FnLoader {
            load: self.load.clone(),
            sizes: self.models.iter().cloned().collect(),
            max_queue,
            presets,
        }
    }

    pub(crate) fn settings(&self) -> (KeepAlive, MaxLoaded) {
        (self.keep_alive, self.max_loaded)
    }
}

/// The closure as the set's [`Loader`].
pub(crate) struct FnLoader {
    load: Arc<LoadFn>,
    sizes: BTreeMap<String, u64>,
    max_queue: Option<Duration>,
    presets: Vec<Policy>,
}

/// How long an unloaded model's local worker gets to exit.
const WORKER_EXIT: Duration = Duration::from_secs(10);

impl Loader for FnLoader {
    fn memory_estimate(&self, name: &str) -> u64 {
        self.sizes.get(name).copied().unwrap_or(0)
    }

    fn load(&self, name: &str) -> BoxFuture<'static, Result<Loaded, String>> {
        let load = self.load.clone();
        let name = name.to_string();
        let max_queue = self.max_queue;
        let presets = self.presets.clone();
        let estimate = self.memory_estimate(&name);
        Box::pin(async move {
            let model = tokio::task::spawn_blocking(move || load(&name))
                .await
                .map_err(|e| format!("the loader panicked: {e}"))?
                .map_err(|e| edgecloud_core::error_chain(e.as_ref()))?;
            let memory_bytes = if model.memory_bytes > 0 {
                model.memory_bytes
            } else {
                estimate
            };
            let engine = HarnessEngine {
                harness: model.harness,
                max_queue,
                presets,
            };
            let (embedder, release) = match model.embeddings {
                Some(embedder) => {
                    let shut = embedder.clone();
                    let release: Release = Box::new(move || {
                        if !shut.release(WORKER_EXIT) {
                            tracing::warn!("an unloaded model's worker did not exit in time");
                        }
                    });
                    (Some(embedder), Some(release))
                }
                None => (None, None),
            };
            Ok(Loaded {
                engine: Arc::new(engine),
                embedder,
                memory_bytes,
                release: std::sync::Mutex::new(release),
            })
        })
    }
}
