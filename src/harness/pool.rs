//! [`HarnessPool`]: N harness instances in one process, for a server or an
//! application that takes more than one request at a time. Each instance is
//! a whole [`Harness`] with its own lane slots, so every promise holds per
//! instance (one outstanding task per lane, a late worker holds *its*
//! instance's lane, one deadline per run, settlement exactly once); what
//! can be shared is: one loaded model and one batched decode loop for the
//! local lanes (`LocalLane::start_shared`), one backend (one HTTP
//! connection pool) for the cloud lanes, one runtime, one run-id counter.
//!
//! A request takes an idle instance: one that runs nothing and whose lanes
//! the policy uses are free (a late worker keeps its instance out), else
//! one that runs nothing and has the policy's first lane free (the other
//! lane is then reported `busy`, as on a lone harness). When none can take
//! it, [`HarnessPool::start`] refuses at once with
//! [`HarnessError::PoolBusy`]; [`HarnessPool::start_within`] waits up to a
//! bound (counted inside the request's own deadline) for one to free up.
//!
//! This module picks instances; it must not run anything itself.

use super::api::Harness;
use super::error::HarnessError;
use super::handle::{ensure_blocking_allowed, RunHandle, RunOptions};
use super::outcome::Outcome;
use super::registry::{HarnessStats, ShutdownReport};
use crate::lane::{Lane, PerLane};
use crate::request::Request;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::sync::Notify;

/// How often a bounded wait looks again when no release woke it (a late
/// worker freeing its lane does not notify the pool).
const WAIT_RECHECK: Duration = Duration::from_millis(2);

/// N harness instances sharing a model, a decode loop, a connection pool
/// and a runtime. A request takes an idle instance (nothing running, the
/// lanes its policy uses free; else nothing running and its first lane
/// free); when none can take it, [`start`](Self::start) refuses with
/// [`HarnessError::PoolBusy`] and [`start_within`](Self::start_within)
/// waits up to a bound. Each instance keeps every promise of a lone
/// [`Harness`]; a pool of one is one. Cheap to clone.
///
/// ```
/// use edgecloud::harness::{Backend, BackendFuture, BackendInfo, Candidate, Harness, Policy};
/// use edgecloud::{FinishReason, LaneJob, Request};
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
/// let pool = Harness::builder()
///     .local(Echo)
///     .policy(Policy::LocalOnly)
///     .instances(4)
///     .build_pool()?;
/// // Four threads, four requests at once: each takes its own instance.
/// std::thread::scope(|s| {
///     for i in 0..4 {
///         let pool = &pool;
///         s.spawn(move || {
///             let outcome = pool.run_blocking(Request::user(format!("hello {i}")))?;
///             assert_eq!(outcome.text.as_deref(), Some(format!("hello {i}").as_str()));
///             Ok::<(), edgecloud::harness::HarnessError>(())
///         });
///     }
/// });
/// assert_eq!(pool.instances().len(), 4);
/// # Ok::<(), edgecloud::harness::HarnessError>(())
/// ```
#[derive(Clone)]
pub struct HarnessPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    instances: Vec<Harness>,
    /// Runs of the pool in flight on each instance: at most one, except in
    /// a pool of one, which is a lone harness (every request goes to it and
    /// its run reports a busy lane as `busy`, as without a pool).
    claimed: Vec<AtomicUsize>,
    /// Where the next search for an instance starts (spreads the load).
    next: AtomicUsize,
    released: Notify,
    rejected: AtomicU64,
    waiting: AtomicU64,
    waited_total: AtomicU64,
    /// The runtime the instances run on, when the pool made it.
    runtime: Mutex<Option<Runtime>>,
}

impl std::fmt::Debug for HarnessPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessPool")
            .field("instances", &self.inner.instances.len())
            .field("busy", &self.busy_instances())
            .finish()
    }
}

/// What the pool counted since it was built (per instance: each
/// instance's own [`Harness::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct PoolStats {
    /// Instances in the pool.
    pub instances: usize,
    /// Instances running a run of the pool now.
    pub busy: usize,
    /// Requests refused because no instance could take them.
    pub rejected: u64,
    /// Requests waiting for an instance now (bounded waits only).
    pub waiting: u64,
    /// Requests that waited for an instance and got one.
    pub waited: u64,
}

/// A run of the pool: the instance's [`RunHandle`] plus the claim on the
/// instance, released when this value is dropped or its outcome is taken.
/// Keep it whole until the run settles (stream through `handle`, then
/// [`outcome`](Self::outcome) or [`wait`](Self::wait)): moving the handle
/// out drops the claim, and the pool may then pick the instance for
/// another request while this run still holds it.
pub struct PoolRun {
    /// The run itself: stream, abort, outcome.
    pub handle: RunHandle,
    /// The instance it runs on (an index into [`HarnessPool::instances`]).
    pub instance: usize,
    claim: Claim,
}

impl std::fmt::Debug for PoolRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolRun")
            .field("instance", &self.instance)
            .field("run_id", &self.handle.run_id())
            .finish()
    }
}

impl PoolRun {
    /// Waits for the outcome; the instance is free for the pool's next
    /// request once it has settled (its lanes may still be held by late
    /// workers, which keep it out of the pool's choice until they end).
    pub async fn outcome(self) -> Result<Outcome, HarnessError> {
        let PoolRun { handle, claim, .. } = self;
        let outcome = handle.outcome().await;
        drop(claim);
        outcome
    }

    /// Blocking [`outcome`](Self::outcome), for code without an async
    /// runtime.
    pub fn wait(self) -> Result<Outcome, HarnessError> {
        let PoolRun { handle, claim, .. } = self;
        let outcome = handle.wait();
        drop(claim);
        outcome
    }
}

/// The pool's hold on one instance while a run of the pool uses it.
struct Claim {
    pool: Arc<PoolInner>,
    index: usize,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.pool.claimed[self.index].fetch_sub(1, Ordering::AcqRel);
        self.pool.released.notify_waiters();
    }
}

impl From<Harness> for HarnessPool {
    /// A pool of one: the harness itself, on its own runtime.
    fn from(harness: Harness) -> Self {
        Self::new(vec![harness], None)
    }
}

impl HarnessPool {
    pub(crate) fn new(instances: Vec<Harness>, runtime: Option<Runtime>) -> Self {
        let claimed = instances.iter().map(|_| AtomicUsize::new(0)).collect();
        Self {
            inner: Arc::new(PoolInner {
                instances,
                claimed,
                next: AtomicUsize::new(0),
                released: Notify::new(),
                rejected: AtomicU64::new(0),
                waiting: AtomicU64::new(0),
                waited_total: AtomicU64::new(0),
                runtime: Mutex::new(runtime),
            }),
        }
    }

    /// The instances, in order (for per-instance health, stats, busy lanes).
    pub fn instances(&self) -> &[Harness] {
        &self.inner.instances
    }

    /// Route names, sorted (every instance has the same).
    pub fn routes(&self) -> Vec<String> {
        self.inner.instances[0].routes()
    }

    /// Per instance, whether a run of the pool is in flight on it.
    pub fn claimed(&self) -> Vec<bool> {
        self.inner
            .claimed
            .iter()
            .map(|c| c.load(Ordering::Acquire) > 0)
            .collect()
    }

    /// Instances running a run of the pool now.
    pub fn busy_instances(&self) -> usize {
        self.inner
            .claimed
            .iter()
            .filter(|c| c.load(Ordering::Acquire) > 0)
            .count()
    }

    /// The pool's counters.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            instances: self.inner.instances.len(),
            busy: self.busy_instances(),
            rejected: self.inner.rejected.load(Ordering::Relaxed),
            waiting: self.inner.waiting.load(Ordering::Relaxed),
            waited: self.inner.waited_total.load(Ordering::Relaxed),
        }
    }

    /// Every instance's counters added up (the longest overrun is the
    /// longest of any instance).
    pub fn harness_stats(&self) -> HarnessStats {
        let mut total = HarnessStats::default();
        for h in &self.inner.instances {
            let s = h.stats();
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

    /// Starts a run on an idle instance, or refuses at once with
    /// [`HarnessError::PoolBusy`] when none can take it.
    pub fn start(&self, request: Request, options: RunOptions) -> Result<PoolRun, HarnessError> {
        match self.try_claim(&options)? {
            Some(claim) => self.start_on(claim, request, options),
            None => Err(self.refuse()),
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
    ) -> Result<PoolRun, HarnessError> {
        let arrived = Instant::now();
        let budget = match request.deadline {
            Some(d) => d,
            None => self.inner.instances[0].route_deadline(&options)?,
        };
        let give_up = arrived + max_wait.min(budget);
        let mut counted = false;
        let claim = loop {
            let released = self.inner.released.notified();
            if let Some(claim) = self.try_claim(&options)? {
                break claim;
            }
            let now = Instant::now();
            if now >= give_up {
                if counted {
                    self.inner.waiting.fetch_sub(1, Ordering::Relaxed);
                }
                return Err(self.refuse());
            }
            if !counted {
                counted = true;
                self.inner.waiting.fetch_add(1, Ordering::Relaxed);
            }
            let wake = give_up.min(now + WAIT_RECHECK);
            let _ = tokio::time::timeout_at(wake.into(), released).await;
        };
        if counted {
            self.inner.waiting.fetch_sub(1, Ordering::Relaxed);
            self.inner.waited_total.fetch_add(1, Ordering::Relaxed);
            request.deadline = Some(budget.saturating_sub(arrived.elapsed()));
        }
        self.start_on(claim, request, options)
    }

    /// Runs a request on an idle instance (refusing when none is) and waits
    /// for its outcome.
    pub async fn run_with(
        &self,
        request: Request,
        options: RunOptions,
    ) -> Result<Outcome, HarnessError> {
        self.start(request, options)?.outcome().await
    }

    /// Blocking [`run_with`](Self::run_with) on the default route.
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

    /// Stops every instance taking runs and waits up to `grace` (one
    /// deadline for all) for their runs and late workers; the report adds
    /// up what each instance left.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        let until = Instant::now() + grace;
        let mut total = ShutdownReport::default();
        for h in &self.inner.instances {
            let left = h
                .shutdown(until.saturating_duration_since(Instant::now()))
                .await;
            total.waited_ms = total.waited_ms.max(left.waited_ms);
            total.runs_in_flight += left.runs_in_flight;
            total.still_running.extend(left.still_running);
        }
        total
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
    ) -> Result<PoolRun, HarnessError> {
        let instance = claim.index;
        let handle = self.inner.instances[instance].start(request, options)?;
        Ok(PoolRun {
            handle,
            instance,
            claim,
        })
    }

    /// Claims an instance for a run with these options: first one whose
    /// lanes the policy may use are all free, else one whose first lane
    /// is. Errors only for a route or policy the instances reject.
    fn try_claim(&self, options: &RunOptions) -> Result<Option<Claim>, HarnessError> {
        let inner = &self.inner;
        let needs = inner.instances[0].lanes_for(options)?;
        let n = inner.instances.len();
        if n == 1 {
            // A lone harness: its own admission decides (busy lanes are
            // reported in the run's outcome, as without a pool).
            inner.claimed[0].fetch_add(1, Ordering::AcqRel);
            return Ok(Some(Claim {
                pool: Arc::clone(&self.inner),
                index: 0,
            }));
        }
        let from = inner.next.fetch_add(1, Ordering::Relaxed);
        let free = |h: &Harness, lane: Lane| !needs.uses[lane] || !h.is_busy(lane);
        let whole = |h: &Harness| free(h, Lane::Local) && free(h, Lane::Cloud);
        let first = |h: &Harness| needs.first.iter().any(|&lane| !h.is_busy(lane));
        for fits in [&whole as &dyn Fn(&Harness) -> bool, &first] {
            for k in 0..n {
                let i = (from + k) % n;
                if !fits(&inner.instances[i]) {
                    continue;
                }
                if inner.claimed[i]
                    .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return Ok(Some(Claim {
                        pool: Arc::clone(&self.inner),
                        index: i,
                    }));
                }
            }
        }
        Ok(None)
    }
}

/// Which lanes a run may use, and which it starts with.
pub(crate) struct LaneNeeds {
    pub(crate) uses: PerLane<bool>,
    pub(crate) first: Vec<Lane>,
}

impl Drop for PoolInner {
    /// Never blocks: a runtime the pool made outlives it while any
    /// instance still has runs or late workers (a detached thread waits
    /// for them, as a lone harness's does).
    fn drop(&mut self) {
        let rt = self
            .runtime
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(rt) = rt else {
            return;
        };
        let registries: Vec<_> = self
            .instances
            .iter()
            .map(|h| h.inner.registry.clone())
            .collect();
        super::api::reap_when_idle(rt, registries);
    }
}
