//! [`Instance`]: one local lane and one cloud lane under one harness, the
//! unit the contract's per-lane rules speak of. It owns the lane slots, the
//! resolved routes, the runtime handle and the observers' sink, and turns a
//! request into a spawned run. Callers never run requests on it: the
//! [`Harness`](super::Harness) picks an instance and starts the run here.
//! It must not make run decisions (the decision core in `decision` does),
//! own a runtime (the harness does) nor block in `Drop`.

use super::backend::BackendInfo;
use super::error::{ConfigError, HarnessError, Setting};
use super::handle::{RunHandle, RunOptions};
use super::ledger::{calendar, BudgetState, Ledger, RunLedger, Ticket};
use super::observer::EventSink;
use super::policy::{LaneNeeds, Plan, Policy};
use super::registry::{HarnessStats, Registry};
use super::route::RouteSettings;
use super::run::{launch, RunSetup};
use super::slot::LaneSlot;
use crate::lane::{Lane, PerLane};
use crate::request::Request;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

/// One instance of a [`Harness`](super::Harness): its own lane slots (one
/// outstanding task per lane), its own late workers and counters. A lone
/// harness has one; a pool has N over one shared model, decode loop and
/// connection pool. Read-only from outside: look at its lanes and counters
/// (per-instance health); run requests through the harness.
#[derive(Clone)]
pub struct Instance {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) slots: PerLane<Option<Arc<LaneSlot>>>,
    pub(crate) default_route: Arc<RouteSettings>,
    pub(crate) routes: HashMap<String, Arc<RouteSettings>>,
    pub(crate) handle: Handle,
    pub(crate) events: EventSink,
    pub(crate) registry: Arc<Registry>,
    /// Shared by the instances of a harness: run ids are unique harness-wide.
    pub(crate) next_run: Arc<AtomicU64>,
    pub(crate) shutting_down: AtomicBool,
    /// Prices, budgets and idempotency keys, shared by the instances.
    pub(crate) ledger: Arc<Ledger>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("local", &self.lane_info(Lane::Local).map(|i| i.name))
            .field("cloud", &self.lane_info(Lane::Cloud).map(|i| i.name))
            .field("local_busy", &self.is_busy(Lane::Local))
            .field("cloud_busy", &self.is_busy(Lane::Cloud))
            .finish()
    }
}

impl Instance {
    /// Starts a run on this instance and returns at once. The deadline is
    /// fixed now: the request's own deadline, else the route's. The caller
    /// (the harness) has claimed the instance; lane admission happens in
    /// the run.
    pub(crate) fn start(
        &self,
        request: Request,
        options: RunOptions,
        diagnostic: bool,
        ticket: Option<Ticket>,
    ) -> Result<RunHandle, HarnessError> {
        let inner = &self.inner;
        if inner.shutting_down.load(Ordering::Acquire) {
            return Err(HarnessError::ShuttingDown);
        }
        request.validate()?;
        let (route, policy) = self.route_and_policy(&options)?;
        let (ledger, policy) = self.run_ledger(&route, policy, ticket, diagnostic);
        let start = Instant::now();
        let deadline = start + request.deadline.unwrap_or(route.deadline);
        let run_id = inner.next_run.fetch_add(1, Ordering::Relaxed);
        let (stream_tx, stream_rx) = if options.stream {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let commit = options.commit.unwrap_or(route.commit);
        let setup = RunSetup {
            run_id,
            request: Arc::new(request),
            route,
            policy,
            commit,
            stream: stream_tx,
            start,
            deadline,
            slots: inner.slots.clone(),
            handle: inner.handle.clone(),
            registry: inner.registry.clone(),
            events: inner.events.clone(),
            diagnostic,
            ledger,
        };
        let (shared, outcome) = launch(setup);
        Ok(RunHandle {
            run_id,
            deadline,
            abort: super::AbortHandle { shared },
            tokens: stream_rx,
            outcome,
            instance: 0,
            claim: None,
            replay: false,
        })
    }

    /// What the ledger knows of a run on `route` starting now, and the
    /// policy it runs: a hybrid policy leans local (runs as a cascade:
    /// local first, the cloud only when the local answer fails or scores
    /// low) once the route's budget reaches its lean share. A diagnostic
    /// runs as asked.
    fn run_ledger(
        &self,
        route: &RouteSettings,
        policy: Policy,
        ticket: Option<Ticket>,
        diagnostic: bool,
    ) -> (RunLedger, Policy) {
        let ledger = self.inner.ledger.clone();
        let cloud_model = route.cloud_model.clone().or_else(|| {
            self.inner.slots[Lane::Cloud]
                .as_ref()
                .and_then(|s| s.info.model.clone())
        });
        let mut budget = ledger
            .budget(route, calendar::now_unix_ms())
            .map(|(_, report)| report);
        let mut policy = policy;
        if let Some(b) = budget.as_mut().filter(|b| b.state == BudgetState::Lean) {
            let from = policy.kind();
            let leans = matches!(
                policy,
                Policy::Race | Policy::Hedge { .. } | Policy::Fallback { .. } | Policy::BestOf
            );
            if leans && !diagnostic && self.inner.slots[Lane::Local].is_some() {
                policy = Policy::from_kind(super::policy::PolicyKind::Cascade);
                b.note = Some(format!(
                    "leaning local: {} ran as cascade ({:.0}% of the cloud budget spent)",
                    from.as_str(),
                    100.0 * b.spent / b.limit.max(f64::MIN_POSITIVE)
                ));
            }
        }
        (
            RunLedger {
                ledger,
                cloud_model,
                budget,
                ticket,
            },
            policy,
        )
    }

    /// The route and policy a run with these options uses.
    fn route_and_policy(
        &self,
        options: &RunOptions,
    ) -> Result<(Arc<RouteSettings>, Policy), HarnessError> {
        let inner = &self.inner;
        let route = match &options.route {
            None => inner.default_route.clone(),
            Some(name) => inner.routes.get(name).cloned().ok_or_else(|| {
                let mut known: Vec<String> = inner.routes.keys().cloned().collect();
                known.sort();
                HarnessError::UnknownRoute {
                    name: name.clone(),
                    known,
                }
            })?,
        };
        let policy = match options.policy.clone() {
            Some(p) => {
                p.validate().map_err(|detail| {
                    HarnessError::Config(ConfigError::Invalid {
                        key: "policy".into(),
                        setting: Setting::Policy,
                        detail,
                    })
                })?;
                p
            }
            None => route.policy.clone(),
        };
        Ok((route, policy))
    }

    /// The lanes a run with these options may use and starts with, among
    /// the configured ones: what the harness looks at to pick an instance.
    /// The table itself is the policy's [`Plan`].
    pub(crate) fn lane_needs(&self, options: &RunOptions) -> Result<LaneNeeds, HarnessError> {
        let (_, policy) = self.route_and_policy(options)?;
        // The hedge delay does not change which lanes start at once.
        let plan = Plan::new(&policy, |_| Duration::ZERO);
        Ok(plan
            .lane_needs()
            .only(|lane| self.inner.slots[lane].is_some()))
    }

    /// The deadline budget of the route these options name.
    pub(crate) fn route_deadline(&self, options: &RunOptions) -> Result<Duration, HarnessError> {
        Ok(self.route_and_policy(options)?.0.deadline)
    }

    /// Stops this instance taking runs.
    pub(crate) fn stop_taking_runs(&self) {
        self.inner.shutting_down.store(true, Ordering::Release);
    }

    /// This instance's run registry (runs in flight, late workers).
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.inner.registry
    }

    /// Counters since the harness was built, for this instance alone.
    pub fn stats(&self) -> HarnessStats {
        HarnessStats {
            observer_events_dropped: self.inner.events.dropped(),
            ..self.inner.registry.stats()
        }
    }

    /// Route names, sorted (every instance of a harness has the same).
    pub(crate) fn routes(&self) -> Vec<String> {
        let mut v: Vec<String> = self.inner.routes.keys().cloned().collect();
        v.sort();
        v
    }

    /// Whether a worker holds this instance's lane right now (always
    /// `false` for a lane that is not configured).
    pub fn is_busy(&self, lane: Lane) -> bool {
        self.inner.slots[lane].as_ref().is_some_and(|s| s.is_busy())
    }

    /// The lane's reachability, when its backend tracks one (the cloud
    /// lane does: down after connect-level failures, probing, counts).
    pub fn lane_health(&self, lane: Lane) -> Option<super::LaneHealth> {
        self.inner.slots[lane]
            .as_ref()
            .and_then(|s| s.backend.health())
    }

    /// The lane's backend description, when configured.
    pub fn lane_info(&self, lane: Lane) -> Option<BackendInfo> {
        self.inner.slots[lane].as_ref().map(|s| s.info.clone())
    }

    /// The cloud model the default route names, if it names one.
    pub(crate) fn default_cloud_model(&self) -> Option<String> {
        self.inner.default_route.cloud_model.clone()
    }
}
