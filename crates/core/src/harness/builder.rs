//! [`HarnessBuilder`]: lanes, defaults, routes, observers and runtime, put
//! together and checked once. Configuration files go through
//! [`HarnessBuilder::config`]; this module must not read files itself.

use super::api::Harness;
use super::backend::Backend;
use super::callbacks::{Arbiter, Compressor, Named, PreScore, Scorer};
use super::error::{ConfigError, HarnessError, Setting};
use super::instance::{Inner, Instance};
use super::ledger::{BudgetUnit, Idempotency, Ledger, LedgerStore, PriceTable};
use super::observer::{EventSink, Observer};
use super::policy::{CommitMode, Policy};
use super::registry::Registry;
use super::route::{Route, RouteSettings, DEFAULT_ROUTE};
use super::route_config::RouteConfig;
use super::slot::LaneSlot;
use crate::lane::{Lane, PerLane};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

/// Where [`HarnessBuilder::config`] reads harness settings and routes
/// from: the `[harness]` table and the `[routes.NAME]` tables of a
/// configuration file (`edgecloud_core::harness::HarnessConfig` is one).
pub trait RouteTables {
    /// The `[harness]` table: defaults every route inherits.
    fn defaults(&self) -> &RouteConfig;
    /// The `[routes.NAME]` tables, by name.
    fn routes(&self) -> &BTreeMap<String, RouteConfig>;
    /// The `[prices."MODEL"]` tables (none by default).
    fn prices(&self) -> Option<&PriceTable> {
        None
    }
    /// The `[ledger]` table's store directory and idempotency window
    /// (none by default).
    fn ledger_store(&self) -> Option<(&Path, Duration)> {
        None
    }
}

/// What [`HarnessBuilder::lanes_from`] starts lanes from: a configuration
/// that knows the lanes' own settings (this crate knows no lane).
pub trait StartLanes {
    /// Starts the lanes it describes and puts them on `builder` (one local
    /// backend per instance where it shares a model:
    /// [`HarnessBuilder::instance_count`]).
    fn start_lanes(&self, builder: HarnessBuilder) -> Result<HarnessBuilder, HarnessError>;
}

/// Builds a [`Harness`].
///
/// ```
/// use edgecloud_core::harness::{Harness, Policy, Route};
/// use std::time::Duration;
/// let harness = Harness::builder()
///     .policy(Policy::cascade(0.4))
///     .deadline(Duration::from_secs(3))
///     .route("vehicle_control", Route::new(Policy::LocalOnly).deadline(Duration::from_millis(200)))
///     .build()
///     .expect("a harness without lanes still builds");
/// assert_eq!(harness.routes(), ["default", "vehicle_control"]);
/// ```
pub struct HarnessBuilder {
    local: Option<Arc<dyn Backend>>,
    /// One local backend per instance (the lanes of one shared
    /// model); `None`: every instance shares `local`.
    local_per_instance: Option<Vec<Arc<dyn Backend>>>,
    instances: usize,
    cloud: Option<Arc<dyn Backend>>,
    defaults: Route,
    routes: Vec<(String, Route)>,
    default_route: Option<String>,
    observers: Vec<Arc<dyn Observer>>,
    runtime: Option<tokio::runtime::Handle>,
    worker_threads: usize,
    pub(crate) named: Named,
    prices: PriceTable,
    store: Option<LedgerStore>,
}

impl Default for HarnessBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for HarnessBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field("local", &self.local.is_some())
            .field("cloud", &self.cloud.is_some())
            .field("defaults", &self.defaults)
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

impl HarnessBuilder {
    /// An empty builder: no lanes, default settings.
    pub fn new() -> Self {
        Self {
            local: None,
            local_per_instance: None,
            instances: 1,
            cloud: None,
            defaults: Route::default(),
            routes: Vec::new(),
            default_route: None,
            observers: Vec::new(),
            runtime: None,
            worker_threads: 2,
            named: Named::default(),
            prices: PriceTable::new(),
            store: None,
        }
    }

    /// Puts a backend on the local lane.
    pub fn local(self, backend: impl Backend) -> Self {
        self.local_arc(Arc::new(backend))
    }

    /// Puts a shared backend on the local lane.
    pub fn local_arc(mut self, backend: Arc<dyn Backend>) -> Self {
        self.local = Some(backend);
        self.local_per_instance = None;
        self
    }

    /// Puts one local backend per instance (see [`build`](Self::build)):
    /// there must be as many as
    /// [`instances`](Self::instances). [`lanes_from`](Self::lanes_from)
    /// does this for a configured model: the lanes of one loaded model.
    pub fn local_per_instance(mut self, backends: Vec<Arc<dyn Backend>>) -> Self {
        self.local = backends.first().cloned();
        self.local_per_instance = Some(backends);
        self
    }

    /// How many instances the harness has (at least one; default 1): how
    /// many requests it runs at once, each with its own lane slots. Set it before [`lanes_from`](Self::lanes_from),
    /// which starts one local lane per instance over one loaded model.
    pub fn instances(mut self, n: usize) -> Self {
        self.instances = n.max(1);
        self
    }

    /// Puts a backend on the cloud lane.
    pub fn cloud(self, backend: impl Backend) -> Self {
        self.cloud_arc(Arc::new(backend))
    }

    /// Puts a shared backend on the cloud lane.
    pub fn cloud_arc(mut self, backend: Arc<dyn Backend>) -> Self {
        self.cloud = Some(backend);
        self
    }

    /// Whether a lane has a backend.
    pub fn has_lane(&self, lane: Lane) -> bool {
        match lane {
            Lane::Local => self.local.is_some(),
            Lane::Cloud => self.cloud.is_some(),
        }
    }

    /// Default policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.defaults.policy = Some(policy);
        self
    }

    /// Default deadline.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.defaults.deadline = Some(deadline);
        self
    }

    /// Default commit mode for streaming runs.
    pub fn commit(mut self, commit: CommitMode) -> Self {
        self.defaults.commit = Some(commit);
        self
    }

    /// Default minimum score for any candidate to be acceptable.
    pub fn min_score(mut self, min: f64) -> Self {
        self.defaults = self.defaults.min_score(min);
        self
    }

    /// Default pre-score callback.
    pub fn pre_score(mut self, p: impl PreScore) -> Self {
        self.defaults = self.defaults.pre_score(p);
        self
    }

    /// Default compressor for what is sent to the cloud.
    pub fn compressor(mut self, c: impl Compressor) -> Self {
        self.defaults = self.defaults.compressor(c);
        self
    }

    /// Default scorer (instead of the built-in one).
    pub fn scorer(mut self, s: impl Scorer) -> Self {
        self.defaults = self.defaults.scorer(s);
        self
    }

    /// Default arbiter (instead of the built-in rule).
    pub fn arbiter(mut self, a: impl Arbiter) -> Self {
        self.defaults = self.defaults.arbiter(a);
        self
    }

    /// Time a callback may take before a `tracing` warning.
    pub fn callback_budget(mut self, budget: Duration) -> Self {
        self.defaults.callback_budget = Some(budget);
        self
    }

    /// How long a run that cancels workers before its deadline waits for
    /// them (see [`Route::cancel_grace`]).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.defaults.cancel_grace = Some(grace);
        self
    }

    /// Replaces the default settings as a whole.
    pub fn defaults(mut self, route: Route) -> Self {
        self.defaults = route;
        self
    }

    /// Adds (or replaces) a named route.
    pub fn route(mut self, name: impl Into<String>, route: Route) -> Self {
        let name = name.into();
        self.routes.retain(|(n, _)| *n != name);
        self.routes.push((name, route));
        self
    }

    /// The route runs use when they name none (default: the harness's
    /// own defaults, named `default`).
    pub fn default_route(mut self, name: impl Into<String>) -> Self {
        self.default_route = Some(name.into());
        self
    }

    /// Adds an observer.
    pub fn observer(mut self, o: impl Observer) -> Self {
        self.observers.push(Arc::new(o));
        self
    }

    /// Runs on an existing tokio runtime instead of a runtime of the
    /// harness's own. The runtime must outlive the harness's runs and late
    /// workers (the harness cannot keep it alive).
    pub fn runtime(mut self, handle: tokio::runtime::Handle) -> Self {
        self.runtime = Some(handle);
        self
    }

    /// Worker threads of the harness's own runtime per instance (default
    /// 2).
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.worker_threads = n.max(1);
        self
    }

    /// Registers a pre-score callback under a name a config file can use.
    pub fn register_pre_score(mut self, name: impl Into<String>, p: impl PreScore) -> Self {
        self.named.pre_score.insert(name.into(), Arc::new(p));
        self
    }

    /// Registers a compressor under a name a config file can use.
    pub fn register_compressor(mut self, name: impl Into<String>, c: impl Compressor) -> Self {
        self.named.compressor.insert(name.into(), Arc::new(c));
        self
    }

    /// Registers a scorer under a name a config file can use.
    pub fn register_scorer(mut self, name: impl Into<String>, s: impl Scorer) -> Self {
        self.named.scorer.insert(name.into(), Arc::new(s));
        self
    }

    /// Registers an arbiter under a name a config file can use.
    pub fn register_arbiter(mut self, name: impl Into<String>, a: impl Arbiter) -> Self {
        self.named.arbiter.insert(name.into(), Arc::new(a));
        self
    }

    /// Prices answers with `prices` (per cloud model; every outcome's
    /// `cost`, docs/cost.md). Each model must be one the harness asks for
    /// (the cloud lane's or a route's `cloud_model`), checked at build.
    pub fn prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// Keeps cloud spending (for the routes' cloud budgets) and the
    /// answers of idempotency keys in `store`, across restarts.
    pub fn ledger(mut self, store: LedgerStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Applies a configuration's harness settings and routes (lanes are
    /// built from it separately). Settings already made on the builder
    /// that the file also sets are overridden by the file; call builder
    /// methods after this one to override the file.
    pub fn config(mut self, config: &impl RouteTables) -> Result<Self, ConfigError> {
        let defaults = config.defaults().to_route("harness", &self.named)?;
        self.defaults = defaults.over(&self.defaults);
        for (name, rc) in config.routes() {
            let r = rc.to_route(&format!("routes.{name}"), &self.named)?;
            self = self.route(name.clone(), r);
        }
        if let Some(d) = &config.defaults().default_route {
            self.default_route = Some(d.clone());
        }
        if let Some(p) = config.prices() {
            self.prices = p.clone();
        }
        if let Some((dir, window)) = config.ledger_store() {
            let store = LedgerStore::open(dir, window).map_err(|e| ConfigError::Invalid {
                key: "ledger.store".into(),
                setting: Setting::Ledger,
                detail: e.to_string(),
            })?;
            self.store = Some(store);
        }
        Ok(self)
    }

    /// Starts the lanes a configuration describes (`[local]`: loads the
    /// model, blocking; `[cloud]`: checks the settings and reads the key)
    /// and puts them on the builder. A build without a lane's cargo feature
    /// has no such section (parsing rejects it).
    pub fn lanes_from(self, config: &impl StartLanes) -> Result<Self, HarnessError> {
        config.start_lanes(self)
    }

    /// How many instances the harness will run ([`HarnessBuilder::instances`]):
    /// a lane starter gives each its own local backend.
    pub fn instance_count(&self) -> usize {
        self.instances
    }

    fn resolve_routes(&self) -> Result<Resolved, HarnessError> {
        let invalid = |key: String, detail: String| ConfigError::Invalid {
            key,
            setting: Setting::Route,
            detail,
        };
        let base = self
            .defaults
            .resolve(DEFAULT_ROUTE)
            .map_err(|d| invalid("harness".into(), d))?;
        let mut routes = HashMap::new();
        routes.insert(DEFAULT_ROUTE.to_string(), Arc::new(base));
        for (name, r) in &self.routes {
            if name.trim().is_empty() {
                return Err(invalid("routes".into(), "a route name cannot be empty".into()).into());
            }
            let settings = r
                .over(&self.defaults)
                .resolve(name)
                .map_err(|d| invalid(format!("routes.{name}"), d))?;
            routes.insert(name.clone(), Arc::new(settings));
        }
        let default_route = match &self.default_route {
            None => routes[DEFAULT_ROUTE].clone(),
            Some(n) => routes.get(n).cloned().ok_or_else(|| {
                invalid(
                    "default_route".into(),
                    format!("names route `{n}`, which is not defined"),
                )
            })?,
        };
        Ok(Resolved {
            routes,
            default_route,
        })
    }

    /// Checks everything and builds the harness: [`instances`](Self::instances)
    /// instances (one by default) sharing one runtime (the builder's, or
    /// one of the harness's own with [`worker_threads`](Self::worker_threads)
    /// per instance, at most the machine's cores + 2), one run-id counter,
    /// the cloud backend and, from [`lanes_from`](Self::lanes_from) or
    /// [`local_per_instance`](Self::local_per_instance), one local lane per
    /// instance over one model. A single local backend set with
    /// [`local`](Self::local) is shared by every instance (each still has
    /// its own slot for it).
    pub fn build(self) -> Result<Harness, HarnessError> {
        let n = self.instances;
        if let Some(locals) = &self.local_per_instance {
            if locals.len() != n {
                return Err(ConfigError::Invalid {
                    key: "instances".into(),
                    setting: Setting::Instances,
                    detail: format!(
                        "{} local backends for {n} instances: give one per instance",
                        locals.len()
                    ),
                }
                .into());
            }
        }
        let resolved = self.resolve_routes()?;
        if self.cloud.is_none() {
            resolved.refuse_cloud_models()?;
        }
        let ledger = Arc::new(self.check_ledger(&resolved)?);
        let cap = std::thread::available_parallelism().map_or(2, |n| n.get()) + 2;
        let (handle, runtime) =
            self.runtime_with((self.worker_threads * n).min(cap).max(self.worker_threads))?;
        let next_run = Arc::new(AtomicU64::new(1));
        let mut instances = Vec::with_capacity(n);
        for i in 0..n {
            let local = match &self.local_per_instance {
                Some(locals) => Some(locals[i].clone()),
                None => self.local.clone(),
            };
            instances.push(self.assemble(
                resolved.clone(),
                local,
                handle.clone(),
                next_run.clone(),
                ledger.clone(),
            )?);
        }
        Ok(Harness::new(instances, handle, runtime))
    }

    /// The ledger, checked against the routes: every priced model is one
    /// the harness asks for; a budget has a store, and a price when it
    /// counts dollars.
    fn check_ledger(&self, resolved: &Resolved) -> Result<Ledger, ConfigError> {
        let lane_model = self.cloud.as_ref().and_then(|c| c.info().model);
        let mut known: Vec<String> = resolved
            .routes
            .values()
            .filter_map(|r| r.cloud_model.clone())
            .chain(lane_model.clone())
            .collect();
        known.sort();
        known.dedup();
        self.prices.check(&known)?;
        let mut names: Vec<&String> = resolved.routes.keys().collect();
        names.sort();
        for name in names {
            let r = &resolved.routes[name];
            let Some(budget) = r.cloud_budget else {
                continue;
            };
            let key = if name == DEFAULT_ROUTE {
                "harness".to_string()
            } else {
                format!("routes.{name}")
            };
            if self.store.is_none() {
                return Err(ConfigError::invalid_field(
                    &key,
                    Setting::Ledger,
                    "cloud_budget",
                    "needs a ledger store ([ledger] store = \"DIR\" in the config, or --ledger DIR): \
                     a budget kept in memory alone would start from zero at every restart",
                ));
            }
            let model = r.cloud_model.clone().or_else(|| lane_model.clone());
            if budget.unit == BudgetUnit::Usd
                && model.as_ref().is_none_or(|m| self.prices.get(m).is_none())
            {
                return Err(ConfigError::invalid_field(
                    &key,
                    Setting::Ledger,
                    "cloud_budget",
                    format!(
                        "counts dollars, but the route's cloud model {} has no price \
                         (add [prices.\"MODEL\"] input = ..., output = ..., or count tokens)",
                        model.map_or("(none: no cloud lane)".to_string(), |m| format!("`{m}`"))
                    ),
                ));
            }
        }
        Ok(Ledger {
            prices: self.prices.clone(),
            idempotency: self.store.clone().map(Idempotency::new),
            store: self.store.clone(),
        })
    }

    /// The builder's runtime, else one of its own with `worker_threads`
    /// (returned, for the harness to own).
    fn runtime_with(
        &self,
        worker_threads: usize,
    ) -> Result<(tokio::runtime::Handle, Option<tokio::runtime::Runtime>), HarnessError> {
        Ok(match self.runtime.clone() {
            Some(h) => (h, None),
            None => {
                let rt = own_runtime(worker_threads)?;
                (rt.handle().clone(), Some(rt))
            }
        })
    }

    fn assemble(
        &self,
        resolved: Resolved,
        local: Option<Arc<dyn Backend>>,
        handle: tokio::runtime::Handle,
        next_run: Arc<AtomicU64>,
        ledger: Arc<Ledger>,
    ) -> Result<Instance, HarnessError> {
        let events = EventSink::start(self.observers.clone()).map_err(HarnessError::Start)?;
        let slots = PerLane::new(
            local.map(|b| Arc::new(LaneSlot::new(b))),
            self.cloud.clone().map(|b| Arc::new(LaneSlot::new(b))),
        );
        Ok(Instance {
            inner: Arc::new(Inner {
                slots,
                default_route: resolved.default_route,
                routes: resolved.routes,
                handle,
                events,
                registry: Arc::new(Registry::default()),
                next_run,
                shutting_down: AtomicBool::new(false),
                ledger,
            }),
        })
    }
}

/// Routes checked and resolved, shared by every instance.
#[derive(Clone)]
struct Resolved {
    routes: HashMap<String, Arc<RouteSettings>>,
    default_route: Arc<RouteSettings>,
}

impl Resolved {
    /// A route that names a cloud model on a harness without a cloud lane
    /// is a mistake (its runs could never reach that model), named.
    fn refuse_cloud_models(&self) -> Result<(), ConfigError> {
        let mut named: Vec<(&String, &String)> = self
            .routes
            .iter()
            .filter_map(|(name, r)| r.cloud_model.as_ref().map(|m| (name, m)))
            .collect();
        named.sort();
        match named.first() {
            None => Ok(()),
            Some((name, model)) => Err(ConfigError::Invalid {
                key: if name.as_str() == DEFAULT_ROUTE {
                    "harness.cloud_model".into()
                } else {
                    format!("routes.{name}.cloud_model")
                },
                setting: Setting::Route,
                detail: format!(
                    "route `{name}` names the cloud model `{model}`, but no cloud lane is \
                     configured ([cloud] in the config, or --base-url)"
                ),
            }),
        }
    }
}

/// The runtime a harness makes when it is given none.
fn own_runtime(worker_threads: usize) -> Result<tokio::runtime::Runtime, HarnessError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads)
        .thread_name("edgecloud-harness")
        // The run loop settles runs at their deadlines: it must preempt
        // llama.cpp's compute threads on waking.
        .on_thread_start(|| {
            crate::sched::prefer_short_slices();
        })
        .enable_all()
        .build()
        .map_err(HarnessError::Start)
}
