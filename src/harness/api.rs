//! The [`Harness`] value: what a caller holds. It owns the lane slots, the
//! resolved routes, the runtime handle and the observers' sink, and turns a
//! request into a spawned run. It must not make run decisions (the
//! decision core in `decision` does) nor block in `Drop`.

use super::backend::{BackendInfo, Candidate};
use super::error::HarnessError;
use super::handle::{ensure_blocking_allowed, RunHandle, RunOptions};
use super::observer::EventSink;
use super::outcome::{LaneReport, LaneStatus, Outcome, RunStatus};
use super::policy::Policy;
use super::registry::{HarnessStats, Registry, ShutdownReport};
use super::route::RouteSettings;
use super::run::{launch, RunSetup};
use super::slot::LaneSlot;
use crate::lane::{Lane, PerLane};
use crate::request::Request;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::mpsc;

/// Both lanes under one deadline. Cheap to clone (shared inside); usable
/// from any thread. See the [module docs](super) for a tour.
///
/// Lane slots belong to the harness: clones share them, but two harnesses
/// built over the same backend each have their own slot, so the
/// one-task-per-lane promise holds per harness. Build one harness per
/// engine and share it.
///
/// By default the harness runs on a small runtime of its own (2 worker
/// threads, plus tokio's blocking pool for user callbacks), so it works
/// from code with no runtime and from inside any tokio runtime alike;
/// [`HarnessBuilder::runtime`](super::HarnessBuilder::runtime) puts it on
/// an existing one instead.
#[derive(Clone)]
pub struct Harness {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) slots: PerLane<Option<Arc<LaneSlot>>>,
    pub(crate) default_route: Arc<RouteSettings>,
    pub(crate) routes: HashMap<String, Arc<RouteSettings>>,
    pub(crate) handle: Handle,
    /// Present when the harness made its own runtime.
    pub(crate) runtime: Mutex<Option<Runtime>>,
    pub(crate) events: EventSink,
    pub(crate) registry: Arc<Registry>,
    /// Shared by the instances of a pool: run ids are unique pool-wide.
    pub(crate) next_run: Arc<AtomicU64>,
    pub(crate) shutting_down: AtomicBool,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut routes: Vec<&String> = self.inner.routes.keys().collect();
        routes.sort();
        f.debug_struct("Harness")
            .field("local", &self.lane_info(Lane::Local).map(|i| i.name))
            .field("cloud", &self.lane_info(Lane::Cloud).map(|i| i.name))
            .field("default_route", &self.inner.default_route.name)
            .field("routes", &routes)
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

impl Harness {
    /// A builder; see [`HarnessBuilder`](super::HarnessBuilder).
    pub fn builder() -> super::HarnessBuilder {
        super::HarnessBuilder::new()
    }

    /// Starts a run and returns at once. The deadline is fixed now:
    /// the request's own deadline, else the route's.
    pub fn start(&self, request: Request, options: RunOptions) -> Result<RunHandle, HarnessError> {
        self.start_inner(request, options, false)
    }

    fn start_inner(
        &self,
        request: Request,
        options: RunOptions,
        diagnostic: bool,
    ) -> Result<RunHandle, HarnessError> {
        let inner = &self.inner;
        if inner.shutting_down.load(Ordering::Acquire) {
            return Err(HarnessError::ShuttingDown);
        }
        request.validate()?;
        let (route, policy) = self.route_and_policy(&options)?;
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
        };
        let (shared, outcome) = launch(setup);
        Ok(RunHandle {
            run_id,
            deadline,
            abort: super::AbortHandle { shared },
            tokens: stream_rx,
            outcome,
        })
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
                    HarnessError::Config(super::ConfigError::Invalid {
                        key: "policy".into(),
                        detail,
                    })
                })?;
                p
            }
            None => route.policy.clone(),
        };
        Ok((route, policy))
    }

    /// The lanes a run with these options may use (configured ones only),
    /// and the lanes it starts with: what a pool looks at to pick an
    /// instance.
    pub(crate) fn lanes_for(
        &self,
        options: &RunOptions,
    ) -> Result<super::pool::LaneNeeds, HarnessError> {
        let (_, policy) = self.route_and_policy(options)?;
        let configured = |lane: Lane| self.inner.slots[lane].is_some();
        let (uses, first): (&[Lane], &[Lane]) = match &policy {
            Policy::LocalOnly => (&[Lane::Local], &[Lane::Local]),
            Policy::CloudOnly => (&[Lane::Cloud], &[Lane::Cloud]),
            Policy::Hedge { primary, .. } => (&Lane::ALL, std::slice::from_ref(primary)),
            Policy::Cascade { .. } => (&Lane::ALL, &[Lane::Local]),
            Policy::Fallback { .. } => (&Lane::ALL, &[Lane::Cloud]),
            _ => (&Lane::ALL, &Lane::ALL),
        };
        Ok(super::pool::LaneNeeds {
            uses: PerLane::from_fn(|lane| uses.contains(&lane) && configured(lane)),
            first: first.iter().copied().filter(|&l| configured(l)).collect(),
        })
    }

    /// The deadline budget of the route these options name.
    pub(crate) fn route_deadline(&self, options: &RunOptions) -> Result<Duration, HarnessError> {
        Ok(self.route_and_policy(options)?.0.deadline)
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
        let Some(slot) = &self.inner.slots[lane] else {
            return Err(HarnessError::LaneNotConfigured { lane });
        };
        let backend = slot.backend.info();
        let policy = match lane {
            Lane::Local => Policy::LocalOnly,
            Lane::Cloud => Policy::CloudOnly,
        };
        let outcome = self
            .start_inner(request, RunOptions::new().policy(policy), true)?
            .wait()?;
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

    /// Stops new runs, then waits up to `grace` for runs in flight to
    /// settle and for late workers to return. Reports what is still
    /// running; nothing is forcibly stopped.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        self.inner.shutting_down.store(true, Ordering::Release);
        self.inner.registry.wait_idle(Instant::now() + grace).await
    }

    /// Blocking [`shutdown`](Self::shutdown).
    pub fn shutdown_blocking(&self, grace: Duration) -> Result<ShutdownReport, HarnessError> {
        ensure_blocking_allowed()?;
        self.inner.shutting_down.store(true, Ordering::Release);
        let until = Instant::now() + grace;
        Ok(self
            .inner
            .handle
            .block_on(self.inner.registry.wait_idle(until)))
    }

    /// Counters since the harness was built.
    pub fn stats(&self) -> HarnessStats {
        HarnessStats {
            observer_events_dropped: self.inner.events.dropped(),
            ..self.inner.registry.stats()
        }
    }

    /// Route names, sorted.
    pub fn routes(&self) -> Vec<String> {
        let mut v: Vec<String> = self.inner.routes.keys().cloned().collect();
        v.sort();
        v
    }

    /// Whether a worker holds the lane right now (always `false` for a
    /// lane that is not configured).
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
}

impl Drop for Inner {
    /// Never blocks. A runtime the harness owns outlives it while runs or
    /// late workers still use it: a detached thread waits for them, then
    /// shuts the runtime down.
    fn drop(&mut self) {
        let rt = self
            .runtime
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(rt) = rt else {
            return;
        };
        reap_when_idle(rt, vec![self.registry.clone()]);
    }
}

/// Shuts `rt` down once no run or worker of these registries is left,
/// without blocking the caller: at once when all are idle, else from a
/// detached thread that waits for them.
pub(crate) fn reap_when_idle(rt: Runtime, registries: Vec<Arc<Registry>>) {
    let busy = |rs: &[Arc<Registry>]| rs.iter().any(|r| r.busy());
    if !busy(&registries) {
        rt.shutdown_background();
        return;
    }
    let holder = Arc::new(Mutex::new(Some(rt)));
    let in_thread = holder.clone();
    let spawned = std::thread::Builder::new()
        .name("edgecloud-reaper".into())
        .spawn(move || {
            let rt = in_thread.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(rt) = rt {
                rt.block_on(async {
                    for registry in &registries {
                        while registry.busy() {
                            registry
                                .wait_idle(Instant::now() + Duration::from_secs(3600))
                                .await;
                        }
                    }
                });
                rt.shutdown_background();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the reaper thread; late workers are dropped");
        if let Some(rt) = holder.lock().unwrap_or_else(|p| p.into_inner()).take() {
            rt.shutdown_background();
        }
    }
}
