//! The model set: several local models behind one front door, as Ollama
//! and llama-server's router mode hold them. It owns, per model name, a
//! slot (unloaded, loading, or loaded with its own [`Engine`]: a harness
//! with its own lanes, so two models answer at the same time), and the
//! rules that load and unload them:
//!
//! - a model loads on its first request (or at start: preload), through
//!   a [`Loader`]; requests for it that arrive meanwhile wait for that one
//!   load, and share its error when it fails (the next request tries
//!   again: the file may have been fixed);
//! - it unloads after its keep-alive of idleness ([`KeepAlive`]), checked
//!   by one sweeper task;
//! - loading one more model past the budget ([`MaxLoaded`]: a count of
//!   models and/or bytes of model files) first unloads the least recently
//!   used idle model; a model is idle when no request holds it (a lease)
//!   and its engine has no run in flight and no late worker, so a worker
//!   still running past its deadline keeps its model loaded. When nothing
//!   can be unloaded the request is refused at once (503 `models_busy`,
//!   as a busy lane is: nothing queues).
//!
//! It implements [`Engine`] by dispatching each job to its model's engine
//! (the HTTP layer is the same as for one model), and holds a lease on
//! that model for as long as the run (or embeddings request) lasts. It
//! must not know HTTP nor how a model is built (the loader does).

use super::embedder::{Embedder, Params, Vectors};
use super::engine::{
    BoxFuture, Drained, Engine, Health, Job, LaneState, ModelEntry, ModelState, Param, Run,
    RunInfo, StartError, Summary,
};
use super::harness_engine::DEFAULT_MODEL;
use super::wire::ApiError;
use edgecloud_core::lane::Lane;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a loaded model stays loaded with no request: Ollama's
/// `keep_alive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAlive {
    /// Never unloaded for idleness (`-1`); only the budget unloads it.
    Forever,
    /// Unloaded this long after its last request ended (`0`: at once).
    For(Duration),
}

impl KeepAlive {
    /// Ollama's default: five minutes.
    pub const DEFAULT: KeepAlive = KeepAlive::For(Duration::from_secs(300));

    /// Reads Ollama's forms: `-1` (or any negative number) never, `0` at
    /// once, a number of seconds (`300`), or a duration with a unit
    /// (`500ms`, `30s`, `5m`, `1h`, `1h30m`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Ok(n) = s.parse::<i64>() {
            return Ok(match u64::try_from(n) {
                Ok(secs) => KeepAlive::For(Duration::from_secs(secs)),
                Err(_) => KeepAlive::Forever,
            });
        }
        let bad = || {
            format!("`{s}` is not a keep-alive: -1 (never unload), 0 (at once), seconds (300) or a duration (500ms, 30s, 5m, 1h)")
        };
        if s.is_empty() {
            return Err(bad());
        }
        let mut total = Duration::ZERO;
        let mut rest = s;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit() && c != '.')
                .ok_or_else(bad)?;
            let value: f64 = rest[..digits].parse().map_err(|_| bad())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let unit = match &rest[..unit_len] {
                "ms" => 1e-3,
                "s" => 1.0,
                "m" => 60.0,
                "h" => 3600.0,
                _ => return Err(bad()),
            };
            rest = &rest[unit_len..];
            total += Duration::try_from_secs_f64(value * unit).map_err(|_| bad())?;
        }
        Ok(KeepAlive::For(total))
    }
}

impl fmt::Display for KeepAlive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepAlive::Forever => f.write_str("-1 (never)"),
            KeepAlive::For(d) => write!(f, "{:?}", d),
        }
    }
}

/// The memory budget: at most this many models loaded at once, and/or at
/// most this many bytes of model files. Unlimited where `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaxLoaded {
    /// Models loaded at once.
    pub models: Option<usize>,
    /// Bytes of the loaded models' files (llama.cpp maps the weights:
    /// that is their memory, before the contexts' KV caches).
    pub bytes: Option<u64>,
}

impl MaxLoaded {
    /// Ollama's default on a machine without a GPU: three models.
    pub const DEFAULT: MaxLoaded = MaxLoaded {
        models: Some(3),
        bytes: None,
    };

    /// Reads a count (`2`) or a size (`4GiB`, `500MB`, `1.5G`; binary
    /// units for `KiB`/`MiB`/`GiB`, decimal for `KB`/`MB`/`GB`, `K`/`M`/`G`
    /// binary as llama.cpp and Ollama print them).
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Ok(n) = s.parse::<usize>() {
            if n == 0 {
                return Err("--max-loaded must be at least 1 model".into());
            }
            return Ok(MaxLoaded {
                models: Some(n),
                bytes: None,
            });
        }
        let bad = || format!("`{s}` is neither a count of models (2) nor a size (4GiB, 500MB)");
        let at = s
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let value: f64 = s[..at].parse().map_err(|_| bad())?;
        let unit: f64 = match s[at..].trim().to_ascii_lowercase().as_str() {
            "b" => 1.0,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "tb" => 1e12,
            "k" | "kib" => 1024.0,
            "m" | "mib" => 1024.0 * 1024.0,
            "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
            "t" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => return Err(bad()),
        };
        let bytes = value * unit;
        if !bytes.is_finite() || bytes < 1.0 {
            return Err(bad());
        }
        Ok(MaxLoaded {
            models: None,
            bytes: Some(bytes as u64),
        })
    }
}

/// A loaded model: its engine, what embeds with it, and what it holds.
pub(crate) struct Loaded {
    pub(crate) engine: Arc<dyn Engine>,
    pub(crate) embedder: Option<Arc<dyn Embedder>>,
    pub(crate) memory_bytes: u64,
    /// Frees what the engine held once it is shut down and dropped (waits
    /// for the local worker's exit); blocking, so it runs off the
    /// runtime's threads.
    pub(crate) release: Mutex<Option<Release>>,
}

/// What frees a model's memory after its engine is gone.
pub(crate) type Release = Box<dyn FnOnce() + Send + Sync>;

/// What builds a model's engine from its name.
pub(crate) trait Loader: Send + Sync + 'static {
    /// What the model will hold once loaded (its file's size: the KV cache
    /// is known once it is loaded), for the
    /// byte budget before it is loaded.
    fn memory_estimate(&self, name: &str) -> u64;
    /// Loads it (seconds, perhaps: never on the runtime's own threads).
    fn load(&self, name: &str) -> BoxFuture<'static, Result<Loaded, String>>;
}

/// The names the set answers to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Names {
    /// The models, in the order `/v1/models` lists them.
    pub(crate) models: Vec<String>,
    /// The one `edgecloud` (and a request naming no model) selects.
    pub(crate) default: String,
    /// Named routes of every model's harness, each with the model it runs
    /// on (`None`: the default model).
    pub(crate) routes: Vec<(String, Option<String>)>,
}

/// When a busy model that should unload is looked at again: a late
/// worker's return is not signalled to the set.
const RECHECK: Duration = Duration::from_millis(100);

/// How long an unload waits for the model's engine to drain (it is idle
/// when chosen, so this is a bound, not a wait).
const UNLOAD_GRACE: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Slot {
    loaded: Option<Arc<Loaded>>,
    loading: bool,
    /// Leases held now.
    in_flight: u64,
    last_used: Option<Instant>,
    /// The keep-alive the last request that named one asked for
    /// (Ollama's per-request `keep_alive`); `None`: the server's.
    keep_alive: Option<KeepAlive>,
    /// Loads finished (either way), to tell a waiter whether the load it
    /// waited for failed.
    attempts: u64,
    last_error: Option<String>,
    load_lock: Arc<tokio::sync::Mutex<()>>,
    loads: u64,
    load_seconds: f64,
    load_failures: u64,
    unloads: u64,
    requests: u64,
}

impl Slot {
    fn idle(&self) -> bool {
        self.in_flight == 0
            && self.loaded.as_ref().is_some_and(|l| {
                let h = l.engine.health();
                h.runs_in_flight == 0 && h.late_workers_running == 0
            })
    }
}

struct State {
    slots: BTreeMap<String, Slot>,
    shutting_down: bool,
    /// The lanes the last loaded model had: what `/health` shows when
    /// none is loaded.
    lanes: Vec<LaneState>,
}

struct Inner {
    loader: Arc<dyn Loader>,
    names: Names,
    keep_alive: KeepAlive,
    max_loaded: MaxLoaded,
    state: Mutex<State>,
    /// Wakes the sweeper: a lease ended, or shutdown.
    wake: Arc<Notify>,
}

/// The set, as the server's [`Engine`].
pub(crate) struct ModelSet {
    inner: Arc<Inner>,
}

impl Drop for ModelSet {
    fn drop(&mut self) {
        // The sweeper holds only a weak reference: this ends it.
        self.inner.wake.notify_one();
    }
}

impl ModelSet {
    /// A set with nothing loaded; [`sweep`](Self::sweep) starts its
    /// keep-alive sweeper.
    pub(crate) fn new(
        loader: Arc<dyn Loader>,
        names: Names,
        keep_alive: KeepAlive,
        max_loaded: MaxLoaded,
    ) -> Self {
        let slots = names
            .models
            .iter()
            .map(|n| (n.clone(), Slot::default()))
            .collect();
        let inner = Arc::new(Inner {
            loader,
            names,
            keep_alive,
            max_loaded,
            state: Mutex::new(State {
                slots,
                shutting_down: false,
                lanes: vec![LaneState {
                    lane: Lane::Local,
                    configured: true,
                    busy: false,
                    health: None,
                    device: None,
                }],
            }),
            wake: Arc::new(Notify::new()),
        });
        Self { inner }
    }

    /// Starts the sweeper on the current runtime: it unloads models idle
    /// past their keep-alive until the set is dropped or shut down.
    pub(crate) fn sweep(self) -> Self {
        tokio::spawn(sweep(Arc::downgrade(&self.inner), self.inner.wake.clone()));
        self
    }

    /// Loads `name` now (what `--preload` does), within the budget.
    pub(crate) async fn preload(&self, name: &str) -> Result<(), StartError> {
        self.inner.lease(name, false).await.map(drop)
    }

    /// The model a job selects.
    fn model_of(&self, model: Option<String>) -> String {
        model.unwrap_or_else(|| self.inner.names.default.clone())
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Updates are small and leave the state whole: a poisoned lock
        // holds usable slots.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `name` loaded for one request, loading it first if needed.
    async fn lease(self: &Arc<Self>, name: &str, count: bool) -> Result<Lease, StartError> {
        let (lock, seen) = {
            let mut st = self.lock();
            if st.shutting_down {
                return Err(StartError::ShuttingDown);
            }
            let slot = st.slots.get_mut(name).ok_or_else(|| StartError::Invalid {
                param: Some(Param::Model),
                message: format!("no model `{name}` on this server"),
            })?;
            if count {
                slot.requests += 1;
            }
            if let Some(loaded) = slot.loaded.clone() {
                return Ok(self.take_lease(slot, name, loaded));
            }
            (slot.load_lock.clone(), slot.attempts)
        };
        // One load at a time per model; the others wait for it here.
        let guard = lock.lock_owned().await;
        let evicted = {
            let mut st = self.lock();
            if st.shutting_down {
                return Err(StartError::ShuttingDown);
            }
            let slot = st.slots.get_mut(name).expect("slots are never removed");
            if let Some(loaded) = slot.loaded.clone() {
                return Ok(self.take_lease(slot, name, loaded));
            }
            if slot.attempts > seen {
                if let Some(message) = slot.last_error.clone() {
                    return Err(StartError::ModelLoad {
                        model: name.to_string(),
                        message,
                    });
                }
            }
            let evicted = self.make_room(&mut st, name)?;
            st.slots
                .get_mut(name)
                .expect("slots are never removed")
                .loading = true;
            evicted
        };
        // The load runs on its own task, so a client that goes away does
        // not leave the slot half-loaded; its lease then ends at once.
        let inner = self.clone();
        let name = name.to_string();
        let task = tokio::spawn(async move {
            for loaded in evicted {
                inner.unload(loaded).await;
            }
            let started = Instant::now();
            let result = inner.loader.load(&name).await;
            let lease = inner.install(&name, result, started.elapsed());
            drop(guard);
            lease
        });
        match task.await {
            Ok(lease) => lease,
            Err(e) => Err(StartError::Internal(format!("the model load failed: {e}"))),
        }
    }

    fn take_lease(self: &Arc<Self>, slot: &mut Slot, name: &str, loaded: Arc<Loaded>) -> Lease {
        slot.in_flight += 1;
        slot.last_used = Some(Instant::now());
        Lease {
            inner: self.clone(),
            name: name.to_string(),
            loaded,
        }
    }

    /// Records a load's result; a loaded model comes with the lease of the
    /// request that asked for it (so nothing unloads it in between).
    fn install(
        self: &Arc<Self>,
        name: &str,
        result: Result<Loaded, String>,
        took: Duration,
    ) -> Result<Lease, StartError> {
        let mut st = self.lock();
        let shutting_down = st.shutting_down;
        let slot = st.slots.get_mut(name).expect("slots are never removed");
        slot.loading = false;
        slot.attempts += 1;
        match result {
            Ok(loaded) => {
                let loaded = Arc::new(loaded);
                slot.loads += 1;
                slot.load_seconds += took.as_secs_f64();
                slot.last_error = None;
                tracing::info!(
                    model = name,
                    took_ms = took.as_millis() as u64,
                    "model loaded"
                );
                if shutting_down {
                    return Err(StartError::ShuttingDown);
                }
                slot.loaded = Some(loaded.clone());
                let lease = self.take_lease(slot, name, loaded.clone());
                st.lanes = loaded
                    .engine
                    .health()
                    .lanes
                    .into_iter()
                    .map(|l| LaneState {
                        busy: false,
                        health: None,
                        ..l
                    })
                    .collect();
                Ok(lease)
            }
            Err(message) => {
                slot.load_failures += 1;
                slot.last_error = Some(message.clone());
                tracing::warn!(model = name, error = %message, "model load failed");
                Err(StartError::ModelLoad {
                    model: name.to_string(),
                    message,
                })
            }
        }
    }

    /// Takes out of their slots the least recently used idle models that
    /// must go for `name` to fit the budget; refuses when idle ones are
    /// not enough. A model alone is never refused for its size.
    fn make_room(&self, st: &mut State, name: &str) -> Result<Vec<Arc<Loaded>>, StartError> {
        let size_of = |n: &str, s: &Slot| {
            s.loaded
                .as_ref()
                .map_or_else(|| self.loader.memory_estimate(n), |l| l.memory_bytes)
        };
        let need = self.loader.memory_estimate(name);
        let (mut count, mut bytes) = st
            .slots
            .iter()
            .filter(|(n, s)| *n != name && (s.loaded.is_some() || s.loading))
            .fold((0usize, 0u64), |(c, b), (n, s)| (c + 1, b + size_of(n, s)));
        let fits = |count: usize, bytes: u64| {
            count == 0
                || (self.max_loaded.models.is_none_or(|m| count < m)
                    && self.max_loaded.bytes.is_none_or(|b| bytes + need <= b))
        };
        let mut idle: Vec<(Option<Instant>, String, u64)> = st
            .slots
            .iter()
            .filter(|(n, s)| *n != name && s.idle())
            .map(|(n, s)| (s.last_used, n.clone(), size_of(n, s)))
            .collect();
        idle.sort();
        let mut idle = idle.into_iter();
        let mut victims = Vec::new();
        while !fits(count, bytes) {
            let Some((_, victim, size)) = idle.next() else {
                return Err(StartError::ModelsBusy {
                    model: name.to_string(),
                    message: format!(
                        "{count} model(s) ({bytes} bytes) are loaded, the most --max-loaded allows{}, \
                         and each has a request in flight; retry shortly",
                        match (self.max_loaded.models, self.max_loaded.bytes) {
                            (Some(m), _) => format!(" ({m} models)"),
                            (None, Some(b)) => format!(" ({b} bytes)"),
                            (None, None) => String::new(),
                        }
                    ),
                });
            };
            count -= 1;
            bytes -= size;
            victims.push(victim);
        }
        let mut evicted = Vec::new();
        for victim in victims {
            let slot = st.slots.get_mut(&victim).expect("just found");
            if let Some(loaded) = slot.loaded.take() {
                slot.unloads += 1;
                tracing::info!(model = %victim, for_model = name, "unloading the least recently used idle model");
                evicted.push(loaded);
            }
        }
        Ok(evicted)
    }

    /// Shuts a model's engine down and frees what it held.
    async fn unload(&self, loaded: Arc<Loaded>) {
        let drained = loaded.engine.shutdown(UNLOAD_GRACE).await;
        let release = loaded
            .release
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        // A `/health` that holds the engine for a moment does not delay
        // the release: it stops the worker whoever still holds the lane.
        drop(loaded);
        if let (Some(release), 0) = (release, drained.workers_still_running) {
            let _ = tokio::task::spawn_blocking(release).await;
        }
    }

    /// Unloads the models idle past their keep-alive at `now`; says when
    /// to look again.
    async fn sweep_once(&self, now: Instant) -> Option<Instant> {
        let (expired, next) = self.expired(now);
        for loaded in expired {
            self.unload(loaded).await;
        }
        next
    }

    /// Takes out the models whose keep-alive ran out at `now` and are
    /// idle; says when to look again.
    fn expired(&self, now: Instant) -> (Vec<Arc<Loaded>>, Option<Instant>) {
        let mut st = self.lock();
        let mut out = Vec::new();
        let mut next: Option<Instant> = None;
        let mut soonest = |at: Instant| next = Some(next.map_or(at, |n| n.min(at)));
        for (name, slot) in st.slots.iter_mut() {
            if slot.loaded.is_none() || slot.in_flight > 0 {
                continue;
            }
            let KeepAlive::For(keep) = slot.keep_alive.unwrap_or(self.keep_alive) else {
                continue;
            };
            let at = slot.last_used.unwrap_or(now) + keep;
            if at > now {
                soonest(at);
            } else if slot.idle() {
                slot.unloads += 1;
                tracing::info!(model = %name, "unloading a model idle for its keep-alive");
                out.extend(slot.loaded.take());
            } else {
                // A late worker still runs on it.
                soonest(now + RECHECK);
            }
        }
        (out, next)
    }
}

/// Unloads models idle past their keep-alive, until the set is dropped
/// or shut down.
async fn sweep(inner: Weak<Inner>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            if inner.lock().shutting_down {
                return;
            }
            inner.sweep_once(Instant::now()).await
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

/// A request's hold on a loaded model: while it lives, the model is not
/// unloaded.
struct Lease {
    inner: Arc<Inner>,
    name: String,
    loaded: Arc<Loaded>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease").field("model", &self.name).finish()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        {
            let mut st = self.inner.lock();
            if let Some(slot) = st.slots.get_mut(&self.name) {
                slot.in_flight = slot.in_flight.saturating_sub(1);
                slot.last_used = Some(Instant::now());
            }
        }
        self.inner.wake.notify_one();
    }
}

impl Engine for ModelSet {
    fn models(&self) -> Vec<ModelEntry> {
        let names = &self.inner.names;
        let st = self.inner.lock();
        let loaded = |m: &str| st.slots.get(m).map(|s| s.loaded.is_some());
        let entry = |id: &str, route: Option<String>, model: &str| ModelEntry {
            id: id.to_string(),
            route,
            model: Some(model.to_string()),
            loaded: loaded(model),
        };
        let mut out = vec![entry(DEFAULT_MODEL, None, &names.default)];
        out.extend(names.models.iter().map(|m| entry(m, None, m)));
        out.extend(
            names
                .routes
                .iter()
                .map(|(r, m)| entry(r, Some(r.clone()), m.as_deref().unwrap_or(&names.default))),
        );
        out
    }

    fn start(&self, job: Job) -> BoxFuture<'_, Result<Box<dyn Run>, StartError>> {
        Box::pin(async move {
            let name = self.model_of(job.model.clone());
            let lease = self.inner.lease(&name, true).await?;
            let run = lease.loaded.engine.start(job).await?;
            Ok(Box::new(LeasedRun { run, lease }) as Box<dyn Run>)
        })
    }

    fn health(&self) -> Health {
        let now = Instant::now();
        let (models, engines, lanes) = {
            let st = self.inner.lock();
            let models: Vec<ModelState> = self
                .inner
                .names
                .models
                .iter()
                .filter_map(|name| st.slots.get(name).map(|s| (name, s)))
                .map(|(name, s)| ModelState {
                    name: name.clone(),
                    loaded: s.loaded.is_some(),
                    loading: s.loading,
                    memory_bytes: s.loaded.as_ref().map(|l| l.memory_bytes),
                    in_flight: s.in_flight,
                    idle_ms: s
                        .loaded
                        .as_ref()
                        .filter(|_| s.in_flight == 0)
                        .and(s.last_used)
                        .map(|t| now.saturating_duration_since(t).as_secs_f64() * 1e3),
                    expires_in_ms: match (&s.loaded, s.keep_alive.unwrap_or(self.inner.keep_alive))
                    {
                        (None, _) | (_, KeepAlive::Forever) => None,
                        // In use: its keep-alive starts when it ends.
                        (Some(_), KeepAlive::For(keep)) if s.in_flight > 0 => {
                            Some(keep.as_secs_f64() * 1e3)
                        }
                        (Some(_), KeepAlive::For(keep)) => Some(
                            s.last_used
                                .map_or(keep, |t| (t + keep).saturating_duration_since(now))
                                .as_secs_f64()
                                * 1e3,
                        ),
                    },
                    loads: s.loads,
                    load_seconds: s.load_seconds,
                    load_failures: s.load_failures,
                    unloads: s.unloads,
                    requests: s.requests,
                    last_error: s.last_error.clone(),
                })
                .collect();
            let engines: Vec<(String, Arc<Loaded>)> = st
                .slots
                .iter()
                .filter_map(|(n, s)| s.loaded.clone().map(|l| (n.clone(), l)))
                .collect();
            (models, engines, st.lanes.clone())
        };
        let mut h = Health {
            lanes,
            models,
            ..Health::default()
        };
        let mut first = true;
        for (name, loaded) in engines {
            let e = loaded.engine.health();
            if first {
                h.lanes = e.lanes.clone();
                first = false;
            } else {
                for (mine, theirs) in h.lanes.iter_mut().zip(&e.lanes) {
                    mine.configured |= theirs.configured;
                    mine.busy &= theirs.busy;
                }
            }
            h.instances.extend(e.instances.into_iter().map(|i| {
                let mut i = i;
                i.model = Some(name.clone());
                i
            }));
            h.queued += e.queued;
            h.rejected += e.rejected;
            h.runs_in_flight += e.runs_in_flight;
            h.late_workers_running += e.late_workers_running;
            h.observer_events_dropped += e.observer_events_dropped;
        }
        h
    }

    /// The ledger as a loaded model's harness reports it: every model's
    /// harness is built from the one configuration, so they share the
    /// store and its routes (`None` while no model is loaded).
    fn ledger(&self) -> Option<edgecloud_core::harness::LedgerReport> {
        let loaded: Vec<Arc<Loaded>> = {
            let st = self.inner.lock();
            st.slots.values().filter_map(|s| s.loaded.clone()).collect()
        };
        loaded.iter().find_map(|l| l.engine.ledger())
    }

    fn shutdown(&self, grace: Duration) -> BoxFuture<'static, Drained> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let started = Instant::now();
            let loaded: Vec<Arc<Loaded>> = {
                let mut st = inner.lock();
                st.shutting_down = true;
                st.slots
                    .values_mut()
                    .filter_map(|s| s.loaded.take())
                    .collect()
            };
            inner.wake.notify_one();
            let drains = loaded.iter().map(|l| l.engine.shutdown(grace));
            let drained = futures_util::future::join_all(drains).await;
            let mut total = Drained {
                waited_ms: 0.0,
                runs_in_flight: 0,
                workers_still_running: 0,
            };
            for d in drained {
                total.runs_in_flight += d.runs_in_flight;
                total.workers_still_running += d.workers_still_running;
            }
            if total.workers_still_running == 0 {
                for l in loaded {
                    inner.unload(l).await;
                }
            }
            total.waited_ms = started.elapsed().as_secs_f64() * 1e3;
            total
        })
    }

    fn keep_alive(&self, model: Option<String>, keep: KeepAlive) {
        let name = self.model_of(model);
        if let Some(slot) = self.inner.lock().slots.get_mut(&name) {
            slot.keep_alive = Some(keep);
        }
        // The sweeper looks again with the new keep-alive.
        self.inner.wake.notify_one();
    }

    fn embedder(
        &self,
        model: Option<String>,
    ) -> BoxFuture<'_, Result<Option<Arc<dyn Embedder>>, StartError>> {
        Box::pin(async move {
            let name = self.model_of(model);
            let lease = self.inner.lease(&name, true).await?;
            let Some(embedder) = lease.loaded.embedder.clone() else {
                return Ok(None);
            };
            Ok(Some(Arc::new(LeasedEmbedder {
                embedder,
                _lease: lease,
            }) as Arc<dyn Embedder>))
        })
    }
}

/// A run that holds its model loaded until it has settled.
struct LeasedRun {
    run: Box<dyn Run>,
    lease: Lease,
}

impl Run for LeasedRun {
    fn info(&self) -> &RunInfo {
        self.run.info()
    }

    fn next_piece(&mut self) -> BoxFuture<'_, Option<edgecloud_core::reasoning::Piece>> {
        self.run.next_piece()
    }

    fn finish(self: Box<Self>) -> BoxFuture<'static, Result<Summary, String>> {
        let LeasedRun { run, lease } = *self;
        Box::pin(async move {
            let summary = run.finish().await;
            drop(lease);
            summary
        })
    }

    fn aborter(&self) -> Box<dyn Fn() + Send + Sync> {
        self.run.aborter()
    }
}

/// An embedder that holds its model loaded while it lives.
#[derive(Debug)]
struct LeasedEmbedder {
    embedder: Arc<dyn Embedder>,
    _lease: Lease,
}

impl Embedder for LeasedEmbedder {
    fn lane(&self) -> edgecloud_core::lane::Lane {
        self.embedder.lane()
    }

    fn embed(&self, params: &Params) -> BoxFuture<'static, Result<Vectors, ApiError>> {
        self.embedder.embed(params)
    }

    fn count_prompt(
        &self,
        messages: &[edgecloud_core::request::ChatMessage],
        sampling: &edgecloud_core::request::Sampling,
    ) -> Option<Result<u64, ApiError>> {
        self.embedder.count_prompt(messages, sampling)
    }
}

#[cfg(test)]
#[path = "models_tests.rs"]
mod tests;
