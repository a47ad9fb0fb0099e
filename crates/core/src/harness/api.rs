//! [`Harness`]: the one public type that runs requests. A harness holds N
//! [`Instance`]s (one by default), each a local lane and a cloud lane with
//! its own slots, so every promise of the contract holds per instance (one
//! outstanding task per lane, a late worker holds *its* instance's lane,
//! one deadline per run, settlement exactly once); what the instances
//! share is one loaded model and one batched decode loop for the local
//! lanes (`LocalLane::start_shared`), one backend (one HTTP connection
//! pool) for the cloud lanes, one runtime and one run-id counter. A lone
//! harness is the smallest case, not a second API: serve, bench, the CLI
//! and the bindings all run requests through this type.
//!
//! A request takes an idle instance: one that runs nothing and whose lanes
//! the policy uses are free (a late worker keeps its instance out), else
//! one that runs nothing and has the policy's first lane free (the other
//! lane is then reported `busy`). Among the idle ones it prefers the
//! instance whose last conversation shares most of this one (`affinity`:
//! its prompt is cached there), else the lowest-numbered one. When none can take it,
//! [`Harness::start`] refuses at once with [`HarnessError::PoolBusy`];
//! [`Harness::start_within`] waits up to a bound (counted inside the
//! request's own deadline) for one to free up, in order of arrival
//! (`queue`: a newcomer never takes an instance a waiter is owed). A harness of one instance
//! gives every request to that instance, whose own lane admission decides
//! (a busy lane is reported `busy` in the outcome, never `PoolBusy`).
//!
//! This module picks instances and owns the runtime it made; it must not
//! run anything itself (the instance starts the run) nor block in `Drop`.

use super::affinity::Affinity;
use super::backend::{BackendInfo, Candidate};
use super::claim::{Claim, Claims};
use super::error::HarnessError;
use super::handle::{ensure_blocking_allowed, RunHandle, RunOptions};
use super::instance::Instance;
use super::ledger::{Begin, Idempotency, Ticket};
use super::outcome::{LaneReport, LaneStatus, Outcome, RunStatus};
use super::policy::Policy;
use super::queue::WaitQueue;
use super::reaper::reap_when_idle;
use super::registry::{HarnessStats, ShutdownReport};
use crate::lane::Lane;
use crate::request::Request;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, Runtime};

/// How often a bounded wait looks again when no release woke it (a late
/// worker freeing its lane does not notify the harness).
const WAIT_RECHECK: Duration = Duration::from_millis(2);

/// Both lanes under one deadline, in one or more instances. Cheap to clone
/// (shared inside); usable from any thread. See the
/// [module docs](super) for a tour.
///
/// Lane slots belong to the harness's instances: clones share them, but
/// two harnesses built over the same backend each have their own slots, so
/// the one-task-per-lane promise holds per instance. Build one harness per
/// engine and share it.
///
/// By default the harness runs on a small runtime of its own (2 worker
/// threads per instance, plus tokio's blocking pool for user callbacks),
/// so it works from code with no runtime and from inside any tokio runtime
/// alike; [`HarnessBuilder::runtime`](super::HarnessBuilder::runtime) puts
/// it on an existing one instead.
///
/// ```
/// use edgecloud_core::harness::{Backend, BackendFuture, BackendInfo, Candidate, Harness, Policy};
/// use edgecloud_core::{FinishReason, LaneJob, Request};
///
/// struct Echo;
/// impl Backend for Echo {
///     fn info(&self) -> BackendInfo { BackendInfo::named("echo") }
///     fn run(&self, job: LaneJob) -> BackendFuture {
///         let text = job.messages.last().map(|m| m.content.clone()).unwrap_or_default();
///         Box::pin(async move { Ok(Candidate::new(text, FinishReason::Stop)) })
///     }
/// }
///
/// let harness = Harness::builder()
///     .local(Echo)
///     .policy(Policy::LocalOnly)
///     .instances(4)
///     .build()?;
/// // Four threads, four requests at once: each takes its own instance.
/// std::thread::scope(|s| {
///     for i in 0..4 {
///         let harness = &harness;
///         s.spawn(move || {
///             let outcome = harness.run_blocking(Request::user(format!("hello {i}")))?;
///             assert_eq!(outcome.text.as_deref(), Some(format!("hello {i}").as_str()));
///             Ok::<(), edgecloud_core::harness::HarnessError>(())
///         });
///     }
/// });
/// assert_eq!(harness.instances().len(), 4);
/// # Ok::<(), edgecloud_core::harness::HarnessError>(())
/// ```
#[derive(Clone)]
pub struct Harness {
    inner: Arc<Inner>,
}

struct Inner {
    instances: Vec<Instance>,
    /// Runs of the harness in flight on each instance: at most one, except
    /// on a harness of one instance, where every request goes to it and
    /// its run reports a busy lane as `busy`.
    claims: Arc<Claims>,
    /// Each instance's last conversation: a request prefers the idle
    /// instance that shares most of it (its prompt is cached there).
    affinity: Affinity,
    rejected: AtomicU64,
    /// Requests waiting for an instance, in order of arrival.
    queue: WaitQueue,
    waited_total: AtomicU64,
    /// The runtime every instance's runs are spawned on.
    handle: Handle,
    /// Present when the harness made its runtime.
    runtime: Mutex<Option<Runtime>>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("local", &self.lane_info(Lane::Local).map(|i| i.name))
            .field("cloud", &self.lane_info(Lane::Cloud).map(|i| i.name))
            .field("routes", &self.routes())
            .field("instances", &self.inner.instances.len())
            .field("busy", &self.busy_instances())
            .finish()
    }
}

/// The result of a synchronous single-lane diagnostic
/// ([`Harness::local_only`], [`Harness::cloud_only`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Diagnostic {
    /// The lane.
    pub lane: Lane,
    /// The backend that served it (model, load time).
    pub backend: BackendInfo,
    /// The completion with all its timings and token counts (returned even
    /// when blank or cut short: a diagnostic reports what happened).
    pub completion: Candidate,
    /// The lane's report, as in an outcome.
    pub report: LaneReport,
    /// The run's time budget.
    pub deadline_ms: f64,
    /// Call to result, as the harness measured it.
    pub elapsed_ms: f64,
}

/// What the harness counted of its instances since it was built (each
/// instance's own run counters: [`Harness::stats`], [`Instance::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PoolStats {
    /// Instances in the harness.
    pub instances: usize,
    /// Instances running a run of the harness now.
    pub busy: usize,
    /// Requests refused because no instance could take them.
    pub rejected: u64,
    /// Requests waiting for an instance now (bounded waits only).
    pub waiting: u64,
    /// Requests that waited for an instance and got one.
    pub waited: u64,
}

impl Harness {
    /// A builder; see [`HarnessBuilder`](super::HarnessBuilder).
    pub fn builder() -> super::HarnessBuilder {
        super::HarnessBuilder::new()
    }

    pub(crate) fn new(instances: Vec<Instance>, handle: Handle, runtime: Option<Runtime>) -> Self {
        assert!(
            !instances.is_empty(),
            "the builder makes at least one instance"
        );
        Self {
            inner: Arc::new(Inner {
                claims: Arc::new(Claims::new(instances.len())),
                affinity: Affinity::new(instances.len()),
                instances,
                rejected: AtomicU64::new(0),
                queue: WaitQueue::default(),
                waited_total: AtomicU64::new(0),
                handle,
                runtime: Mutex::new(runtime),
            }),
        }
    }

    /// Starts a run on an idle instance and returns at once, or refuses
    /// with [`HarnessError::PoolBusy`] when no instance can take it. The
    /// deadline is fixed now: the request's own deadline, else the
    /// route's.
    ///
    /// A run with an idempotency key ([`RunOptions::idempotency_key`]) on
    /// a harness with a ledger store: a recorded answer comes back at once
    /// as a replay (no instance claimed, no lane run); a key whose first
    /// run is still in flight is refused here with
    /// [`HarnessError::IdempotencyInFlight`] ([`start_within`](Self::start_within)
    /// and [`run_with`](Self::run_with) wait for it instead).
    pub fn start(&self, request: Request, options: RunOptions) -> Result<RunHandle, HarnessError> {
        let ticket = match self.arrive(&request, &options)? {
            Arrival::Run(ticket) => ticket,
            Arrival::Replayed(handle) => return Ok(*handle),
            Arrival::InFlight(_, key) => return Err(HarnessError::IdempotencyInFlight { key }),
        };
        match self.try_claim(&options, &request)? {
            Some(claim) => self.start_on(claim, request, options, false, ticket),
            None => Err(self.refuse()),
        }
    }

    /// What an idempotency key finds (no key, or no store: run).
    fn arrive(&self, request: &Request, options: &RunOptions) -> Result<Arrival, HarnessError> {
        let instance = &self.inner.instances[0];
        let (Some(idem), Some(key)) = (
            instance.inner.ledger.idempotency.as_ref(),
            options.idempotency_key.as_ref(),
        ) else {
            return Ok(Arrival::Run(None));
        };
        let fingerprint = Idempotency::fingerprint(&(
            &request.messages,
            &request.sampling,
            &options.route,
            options.policy.as_ref().map(|p| p.kind()),
        ));
        Ok(match idem.begin(key, &fingerprint)? {
            Begin::Fresh(t) => Arrival::Run(Some(t)),
            Begin::Conflict => return Err(HarnessError::IdempotencyConflict { key: key.clone() }),
            Begin::InFlight(rx) => Arrival::InFlight(rx, key.clone()),
            Begin::Replay(outcome) => {
                let abort = super::AbortHandle {
                    shared: super::run::RunShared::settled(
                        outcome.run_id,
                        instance.inner.events.clone(),
                        instance.inner.registry.clone(),
                    ),
                };
                Arrival::Replayed(Box::new(RunHandle::replayed(
                    *outcome,
                    options.stream,
                    abort,
                )))
            }
        })
    }

    /// [`arrive`](Self::arrive), waiting for a key in flight until
    /// `until` (then [`HarnessError::IdempotencyInFlight`]).
    async fn arrive_within(
        &self,
        request: &Request,
        options: &RunOptions,
        until: Instant,
    ) -> Result<Arrival, HarnessError> {
        loop {
            match self.arrive(request, options)? {
                Arrival::InFlight(mut rx, key) => {
                    let done = tokio::time::timeout_at(until.into(), rx.changed()).await;
                    if done.is_err() {
                        return Err(HarnessError::IdempotencyInFlight { key });
                    }
                }
                other => return Ok(other),
            }
        }
    }

    /// Like [`start`](Self::start), but waits up to `max_wait` for an
    /// instance to free up. The wait is counted inside the request's
    /// deadline: the run gets what is left of it (the route's deadline
    /// when the request has none), and a wait never outlasts it.
    pub async fn start_within(
        &self,
        mut request: Request,
        options: RunOptions,
        max_wait: Duration,
    ) -> Result<RunHandle, HarnessError> {
        let arrived = Instant::now();
        let budget = match request.deadline {
            Some(d) => d,
            None => self.inner.instances[0].route_deadline(&options)?,
        };
        let give_up = arrived + max_wait.min(budget);
        let ticket = match self
            .arrive_within(&request, &options, arrived + budget)
            .await?
        {
            Arrival::Run(ticket) => ticket,
            Arrival::Replayed(handle) => return Ok(*handle),
            Arrival::InFlight(..) => unreachable!("arrive_within waits out a key in flight"),
        };
        if options.idempotency_key.is_some() {
            // A wait for the key's first run came out of the deadline.
            request.deadline = Some(budget.saturating_sub(arrived.elapsed()));
        }
        // A newcomer claims at once only when nobody waits; otherwise it
        // takes its place in the queue (first come, first served: `queue`).
        if self.inner.queue.is_empty() {
            if let Some(claim) = self.try_claim(&options, &request)? {
                return self.start_on(claim, request, options, false, ticket);
            }
        }
        let wake_waiters = || self.inner.claims.wake_waiters();
        let place = self.inner.queue.join(&wake_waiters);
        let claim = loop {
            let released = self.inner.claims.released();
            if place.is_first() {
                if let Some(claim) = self.try_claim(&options, &request)? {
                    break claim;
                }
            }
            let now = Instant::now();
            if now >= give_up {
                return Err(self.refuse());
            }
            let wake = give_up.min(now + WAIT_RECHECK);
            let _ = tokio::time::timeout_at(wake.into(), released).await;
        };
        // Leaving the queue lets the next waiter look at once.
        drop(place);
        self.inner.waited_total.fetch_add(1, Ordering::Relaxed);
        request.deadline = Some(budget.saturating_sub(arrived.elapsed()));
        self.start_on(claim, request, options, false, ticket)
    }

    /// Runs a request on the default route and waits for its outcome.
    pub async fn run(&self, request: Request) -> Result<Outcome, HarnessError> {
        self.run_with(request, RunOptions::default()).await
    }

    /// Runs a request with options and waits for its outcome.
    pub async fn run_with(
        &self,
        request: Request,
        options: RunOptions,
    ) -> Result<Outcome, HarnessError> {
        if options.idempotency_key.is_some() {
            // A key in flight is waited for, within the run's deadline.
            return self
                .start_within(request, options, Duration::ZERO)
                .await?
                .outcome()
                .await;
        }
        self.start(request, options)?.outcome().await
    }

    /// Blocking [`run`](Self::run), for code without an async runtime.
    pub fn run_blocking(&self, request: Request) -> Result<Outcome, HarnessError> {
        self.run_blocking_with(request, RunOptions::default())
    }

    /// Blocking [`run_with`](Self::run_with).
    pub fn run_blocking_with(
        &self,
        request: Request,
        options: RunOptions,
    ) -> Result<Outcome, HarnessError> {
        ensure_blocking_allowed()?;
        self.start(request, options)?.wait()
    }

    /// Runs the local lane alone, synchronously, through the same lane
    /// admission as every run (a busy lane is [`HarnessError::LaneBusy`]).
    pub fn local_only(&self, request: Request) -> Result<Diagnostic, HarnessError> {
        self.diagnose(Lane::Local, request)
    }

    /// Runs the cloud lane alone, synchronously; see
    /// [`local_only`](Self::local_only). The route's compressor applies.
    pub fn cloud_only(&self, request: Request) -> Result<Diagnostic, HarnessError> {
        self.diagnose(Lane::Cloud, request)
    }

    fn diagnose(&self, lane: Lane, request: Request) -> Result<Diagnostic, HarnessError> {
        ensure_blocking_allowed()?;
        let Some(mut backend) = self.lane_info(lane) else {
            return Err(HarnessError::LaneNotConfigured { lane });
        };
        // A diagnostic runs on the default route: the cloud model it
        // names is the one asked for.
        if lane == Lane::Cloud {
            if let Some(model) = self.inner.instances[0].default_cloud_model() {
                backend.model = Some(model);
            }
        }
        let policy = match lane {
            Lane::Local => Policy::LocalOnly,
            Lane::Cloud => Policy::CloudOnly,
        };
        let options = RunOptions::new().policy(policy);
        let Some(claim) = self.try_claim(&options, &request)? else {
            return Err(HarnessError::LaneBusy { lane });
        };
        let outcome = self.start_on(claim, request, options, true, None)?.wait()?;
        let report = outcome.lane(lane).clone();
        match (outcome.status, outcome.completion) {
            (RunStatus::Ok, Some(completion)) => Ok(Diagnostic {
                lane,
                backend,
                completion,
                report,
                deadline_ms: outcome.deadline_ms,
                elapsed_ms: outcome.elapsed_ms,
            }),
            (RunStatus::Aborted, _) => Err(HarnessError::Aborted),
            _ if report.status == LaneStatus::Busy => Err(HarnessError::LaneBusy { lane }),
            (RunStatus::DeadlineExceeded, _) => Err(HarnessError::DeadlineExceeded {
                lane,
                deadline_ms: outcome.deadline_ms,
            }),
            _ => Err(HarnessError::Lane {
                lane,
                error: report.error.unwrap_or_else(|| {
                    super::BackendError::new(
                        super::LaneErrorKind::Other,
                        outcome.error.unwrap_or_else(|| "no result".into()),
                    )
                }),
            }),
        }
    }

    /// Stops every instance taking runs, then waits up to `grace` (one
    /// deadline for all) for runs in flight to settle and for late workers
    /// to return. Reports what is still running; nothing is forcibly
    /// stopped.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        let until = Instant::now() + grace;
        for instance in &self.inner.instances {
            instance.stop_taking_runs();
        }
        let mut total = ShutdownReport::default();
        for instance in &self.inner.instances {
            let left = instance.registry().wait_idle(until).await;
            total.waited_ms = total.waited_ms.max(left.waited_ms);
            total.runs_in_flight += left.runs_in_flight;
            total.still_running.extend(left.still_running);
        }
        // What the settled runs spent and recorded is on disk before the
        // process goes.
        if let Some(store) = self.inner.instances[0].inner.ledger.store.clone() {
            let flushed = tokio::task::spawn_blocking(move || store.flush()).await;
            if let Ok(Err(e)) = flushed {
                tracing::error!(error = %e, "ledger store: last write failed at shutdown");
            }
        }
        total
    }

    /// Blocking [`shutdown`](Self::shutdown).
    pub fn shutdown_blocking(&self, grace: Duration) -> Result<ShutdownReport, HarnessError> {
        ensure_blocking_allowed()?;
        Ok(self.inner.handle.block_on(self.shutdown(grace)))
    }

    /// Every instance's run counters added up, since the harness was built
    /// (the longest overrun is the longest of any instance).
    pub fn stats(&self) -> HarnessStats {
        let mut total = HarnessStats::default();
        for instance in &self.inner.instances {
            let s = instance.stats();
            total.runs_started += s.runs_started;
            total.runs_settled += s.runs_settled;
            total.runs_in_flight += s.runs_in_flight;
            total.workers_running += s.workers_running;
            total.late_workers_total += s.late_workers_total;
            total.late_workers_running += s.late_workers_running;
            total.late_results_discarded += s.late_results_discarded;
            total.max_overrun_ms = total.max_overrun_ms.max(s.max_overrun_ms);
            total.observer_events_dropped += s.observer_events_dropped;
        }
        total
    }

    /// The instance counters: how many, how many busy, refusals and waits.
    pub fn pool_stats(&self) -> PoolStats {
        PoolStats {
            instances: self.inner.instances.len(),
            busy: self.busy_instances(),
            rejected: self.inner.rejected.load(Ordering::Relaxed),
            waiting: self.inner.queue.len() as u64,
            waited: self.inner.waited_total.load(Ordering::Relaxed),
        }
    }

    /// The instances, in order (for per-instance lanes and counters).
    pub fn instances(&self) -> &[Instance] {
        &self.inner.instances
    }

    /// Per instance, whether a run of the harness is in flight on it.
    pub fn claimed(&self) -> Vec<bool> {
        self.inner.claims.held()
    }

    /// Instances running a run of the harness now.
    pub fn busy_instances(&self) -> usize {
        self.claimed().into_iter().filter(|&held| held).count()
    }

    /// Route names, sorted.
    pub fn routes(&self) -> Vec<String> {
        self.inner.instances[0].routes()
    }

    /// Whether a worker holds the lane of every instance right now (on a
    /// harness of one instance: whether its lane is held); always `false`
    /// for a lane that is not configured.
    pub fn is_busy(&self, lane: Lane) -> bool {
        self.inner.instances.iter().all(|i| i.is_busy(lane))
    }

    /// The lane's reachability, when its backend tracks one (the cloud
    /// lane does: down after connect-level failures, probing, counts).
    /// Instances share the cloud backend, so this is every instance's.
    pub fn lane_health(&self, lane: Lane) -> Option<super::LaneHealth> {
        self.inner.instances[0].lane_health(lane)
    }

    /// The lane's backend description, when configured.
    pub fn lane_info(&self, lane: Lane) -> Option<BackendInfo> {
        self.inner.instances[0].lane_info(lane)
    }

    /// Each route's cloud spending today and this month (UTC), and where
    /// it stands against its budget; `None` on a harness without a ledger
    /// store. Includes other processes' spending on the same store (read
    /// at most a second ago).
    pub fn ledger(&self) -> Option<super::LedgerReport> {
        let inner = &self.inner.instances[0].inner;
        inner.ledger.report(inner.routes.values().map(|r| &**r))
    }

    /// Waits until every spending and recorded answer so far is on disk
    /// (a no-op without a ledger store); the last write's failure, if
    /// any.
    pub fn flush_ledger(&self) -> Result<(), String> {
        match &self.inner.instances[0].inner.ledger.store {
            Some(s) => s.flush(),
            None => Ok(()),
        }
    }

    fn refuse(&self) -> HarnessError {
        self.inner.rejected.fetch_add(1, Ordering::Relaxed);
        HarnessError::PoolBusy {
            instances: self.inner.instances.len(),
        }
    }

    fn start_on(
        &self,
        claim: Claim,
        request: Request,
        options: RunOptions,
        diagnostic: bool,
        ticket: Option<Ticket>,
    ) -> Result<RunHandle, HarnessError> {
        let index = claim.index();
        let mut handle = self.inner.instances[index].start(request, options, diagnostic, ticket)?;
        handle.instance = index;
        handle.claim = Some(claim);
        Ok(handle)
    }

    /// Claims an instance for a run with these options: first one whose
    /// lanes the policy may use are all free, else one whose first lane
    /// is; among those, the one whose last conversation shares most of
    /// this request's (`affinity`), else the lowest-numbered one. Errors only for
    /// a route or policy the instances reject.
    fn try_claim(
        &self,
        options: &RunOptions,
        request: &Request,
    ) -> Result<Option<Claim>, HarnessError> {
        let inner = &self.inner;
        let n = inner.instances.len();
        if n == 1 {
            // A lone instance: its own admission decides (busy lanes are
            // reported in the run's outcome; a bad route or policy is
            // refused when the run starts).
            return Ok(Some(inner.claims.add(0)));
        }
        let needs = inner.instances[0].lane_needs(options)?;
        let free = |h: &Instance, lane: Lane| !needs.uses[lane] || !h.is_busy(lane);
        let whole = |h: &Instance| free(h, Lane::Local) && free(h, Lane::Cloud);
        let first = |h: &Instance| needs.first.iter().any(|&lane| !h.is_busy(lane));
        for fits in [&whole as &dyn Fn(&Instance) -> bool, &first] {
            // In index order: the lowest free instance first, so that a
            // pool's busy sequences keep neighbouring ids (llama.cpp splits
            // a step into one micro-batch per run of consecutive sequence
            // ids).
            let mut candidates: Vec<usize> =
                (0..n).filter(|&i| fits(&inner.instances[i])).collect();
            // Only the local lane keeps a conversation (its KV cache): a
            // run without it neither looks at nor leaves one.
            let local = needs.uses[Lane::Local];
            if local {
                inner.affinity.prefer(&mut candidates, &request.messages);
            }
            for i in candidates {
                if let Some(claim) = inner.claims.try_take(i) {
                    if local {
                        inner.affinity.record(i, &request.messages);
                    }
                    return Ok(Some(claim));
                }
            }
        }
        Ok(None)
    }
}

/// What an arriving run does about its idempotency key.
enum Arrival {
    /// Run it (with the key's ticket, when it has one).
    Run(Option<Ticket>),
    /// Its answer, given again.
    Replayed(Box<RunHandle>),
    /// Its first run is in flight: wait for the change, or refuse.
    InFlight(tokio::sync::watch::Receiver<bool>, String),
}

impl Drop for Inner {
    /// Never blocks: a runtime the harness made outlives it while any
    /// instance still has runs or late workers (a detached thread waits
    /// for them, then shuts the runtime down).
    fn drop(&mut self) {
        let rt = self
            .runtime
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(rt) = rt else {
            return;
        };
        let registries = self
            .instances
            .iter()
            .map(|i| i.registry().clone())
            .collect();
        reap_when_idle(rt, registries);
    }
}
