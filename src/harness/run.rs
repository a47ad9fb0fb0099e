//! One run: its coordinator (a task that owns every decision of the run)
//! and its workers (one task per admitted lane). The coordinator is the
//! only code that changes the run's state; workers talk to it through a
//! channel, and to the world after settlement through the run's small
//! shared state. This module must not know what a backend is beyond the
//! [`Backend`] trait, nor parse configuration.
//!
//! Invariants, and where they are kept:
//! - one deadline: computed once by the harness before the run is spawned;
//!   every wait below is a `select!` against that one instant;
//! - the permit travels with the work: it is moved into the [`LaneJob`];
//!   the backend drops it when the work ends, and the worker drops the
//!   backend's future (panicked or not) before it reports;
//! - settles exactly once: settlement happens in [`Coordinator::settle`],
//!   which consumes the coordinator, under the run's state lock, and emits
//!   `run_settled` under that lock, so a late worker (which reports under
//!   the same lock) always comes after;
//! - no callback under a lock: user callbacks run on blocking threads
//!   (built-in ones inline on the coordinator); the state lock only guards
//!   two fields and is held for channel sends and bookkeeping.

use super::arbitration::pick_highest;
use super::availability::{unavailable_note, Availability};
use super::backend::{Backend, BackendError, Candidate, LaneErrorKind};
use super::callbacks::{
    offload, CallResult, CallbackKind, CallbackReport, CallbackStatus, CloudNeed, Compressed,
    Score, ScoreContext, Scored,
};
use super::handle::AbortResult;
use super::observer::{Event, EventSink};
use super::outcome::{
    CancelResult, DecidedBy, Decision, LaneReport, LaneStatus, Outcome, RunStatus,
};
use super::policy::{CommitMode, Pick, Plan, Policy, SecondaryStart};
use super::registry::Registry;
use super::route::RouteSettings;
use super::slot::LaneSlot;
use crate::lane::{CancellationToken, Lane, LaneJob, PerLane};
use crate::millis::to_ms;
use crate::panic_payload::message;
use crate::request::{ChatMessage, Request};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Sleep;

/// A message from a worker to its coordinator.
pub(crate) enum WorkerMsg {
    Token {
        lane: Lane,
        piece: String,
    },
    /// Boxed: tokens are the frequent message and stay small.
    Finished(Box<Finished>),
}

pub(crate) struct Finished {
    lane: Lane,
    result: Result<Candidate, BackendError>,
    at: Instant,
    saw_cancel: bool,
}

struct SharedState {
    settled_at: Option<Instant>,
    abort_requested: bool,
}

/// The part of a run that workers and abort handles share with the
/// coordinator, and that outlives it while late workers run.
pub(crate) struct RunShared {
    pub(crate) run_id: u64,
    state: Mutex<SharedState>,
    tx: mpsc::UnboundedSender<WorkerMsg>,
    events: EventSink,
    registry: Arc<Registry>,
    abort: CancellationToken,
}

impl RunShared {
    fn lock(&self) -> MutexGuard<'_, SharedState> {
        // Two plain fields; a panic elsewhere cannot leave them torn.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn abort(&self) -> AbortResult {
        let mut st = self.lock();
        if st.settled_at.is_some() {
            AbortResult::Stale
        } else if st.abort_requested {
            AbortResult::AlreadyRequested
        } else {
            st.abort_requested = true;
            drop(st);
            self.abort.cancel();
            AbortResult::Accepted
        }
    }

    /// A worker's result: to the coordinator while the run is open, else
    /// counted and discarded (late worker).
    fn worker_finished(
        &self,
        lane: Lane,
        result: Result<Candidate, BackendError>,
        at: Instant,
        saw_cancel: bool,
    ) {
        let st = self.lock();
        match st.settled_at {
            None => {
                // Unbounded: never blocks; the coordinator drains it at
                // settlement under this same lock, so nothing is lost.
                let _ = self.tx.send(WorkerMsg::Finished(Box::new(Finished {
                    lane,
                    result,
                    at,
                    saw_cancel,
                })));
            }
            Some(settled) => {
                let overrun = at.saturating_duration_since(settled);
                self.registry.late_finished(overrun);
                tracing::debug!(
                    run_id = self.run_id,
                    %lane,
                    overrun_ms = to_ms(overrun),
                    "late worker returned; result discarded"
                );
                self.events.emit(|| Event::LateWorkerFinished {
                    run_id: self.run_id,
                    lane,
                    overrun_ms: to_ms(overrun),
                    returned_ok: result.is_ok(),
                });
            }
        }
    }
}

/// Everything a run needs, decided by the harness before it is spawned.
pub(crate) struct RunSetup {
    pub(crate) run_id: u64,
    pub(crate) request: Arc<Request>,
    pub(crate) route: Arc<RouteSettings>,
    pub(crate) policy: Policy,
    pub(crate) commit: CommitMode,
    pub(crate) stream: Option<mpsc::UnboundedSender<String>>,
    pub(crate) start: Instant,
    pub(crate) deadline: Instant,
    pub(crate) slots: PerLane<Option<Arc<LaneSlot>>>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) registry: Arc<Registry>,
    pub(crate) events: EventSink,
    /// A single-lane diagnostic: any returned completion is the answer,
    /// blank or cut short (a diagnostic reports what happened).
    pub(crate) diagnostic: bool,
}

/// Spawns the run's coordinator; returns what the caller's handle needs.
pub(crate) fn launch(setup: RunSetup) -> (Arc<RunShared>, oneshot::Receiver<Outcome>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(RunShared {
        run_id: setup.run_id,
        state: Mutex::new(SharedState {
            settled_at: None,
            abort_requested: false,
        }),
        tx,
        events: setup.events.clone(),
        registry: setup.registry.clone(),
        abort: CancellationToken::new(),
    });
    let (out_tx, out_rx) = oneshot::channel();
    setup.registry.run_started();
    let handle = setup.handle.clone();
    let coordinator = Coordinator::new(setup, shared.clone(), rx);
    handle.spawn(async move {
        let outcome = coordinator.drive().await;
        // The caller may have dropped its handle; the run still settled.
        let _ = out_tx.send(outcome);
    });
    (shared, out_rx)
}

/// Where a lane is in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not started yet; may still start.
    Idle,
    /// Will not run in this run (busy, skipped, not configured...).
    Absent(LaneStatus),
    /// Its worker is running.
    Running,
    /// It returned; its candidate is being scored.
    Scoring,
    /// It returned and (where needed) was scored.
    Done,
}

struct LaneRun {
    lane: Lane,
    phase: Phase,
    note: Option<String>,
    worker_id: Option<u64>,
    started: Option<Instant>,
    first_token: Option<Instant>,
    finished: Option<Instant>,
    finish_order: u32,
    cancel: CancellationToken,
    cancel_requested: bool,
    saw_cancel: bool,
    result: Option<Result<Candidate, BackendError>>,
    score: Option<Score>,
    buffer: Vec<String>,
    /// Asked to start while the cloud's prompt was still being prepared.
    want_start: bool,
    compressed: (Option<u64>, Option<u64>),
    /// Left out because its backend is down: until it tries again.
    retry_in: Option<std::time::Duration>,
}

impl LaneRun {
    fn new(lane: Lane) -> Self {
        Self {
            lane,
            phase: Phase::Idle,
            note: None,
            worker_id: None,
            started: None,
            first_token: None,
            finished: None,
            finish_order: 0,
            cancel: CancellationToken::new(),
            cancel_requested: false,
            saw_cancel: false,
            result: None,
            score: None,
            buffer: Vec::new(),
            want_start: false,
            compressed: (None, None),
            retry_in: None,
        }
    }

    fn candidate(&self) -> Option<&Candidate> {
        match &self.result {
            Some(Ok(c)) => Some(c),
            _ => None,
        }
    }

    fn absent(&mut self, status: LaneStatus, note: impl Into<String>) {
        self.phase = Phase::Absent(status);
        self.note = Some(note.into());
    }
}

/// Preparing the cloud lane's prompt (pre-score, then compression).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prep {
    PreScoring,
    Compressing,
    Ready,
}

/// What an offloaded callback produced.
enum CbOutput {
    PreScore(CloudNeed),
    Compress(Compressed),
    Score(Score),
    Arbitrate(Option<usize>),
}

type CbFuture = BoxFuture<'static, (u64, Result<CallResult<CbOutput>, tokio::task::JoinError>)>;

struct PendingCb {
    kind: CallbackKind,
    lane: Option<Lane>,
    started: Instant,
}

/// How the main loop ended.
enum End {
    Winner {
        lane: Lane,
        by: DecidedBy,
        reason: String,
    },
    Committed(Lane),
    NoAnswer(String),
    Deadline,
    Abort,
}

struct Coordinator {
    run_id: u64,
    request: Arc<Request>,
    route: Arc<RouteSettings>,
    policy: Policy,
    commit: CommitMode,
    stream: Option<mpsc::UnboundedSender<String>>,
    start: Instant,
    deadline: Instant,
    slots: PerLane<Option<Arc<LaneSlot>>>,
    handle: tokio::runtime::Handle,
    registry: Arc<Registry>,
    events: EventSink,
    shared: Arc<RunShared>,
    rx: mpsc::UnboundedReceiver<WorkerMsg>,
    plan: Plan,
    lanes: PerLane<LaneRun>,
    committed: Option<Lane>,
    forwarded_bytes: usize,
    caller_first_token: Option<Instant>,
    prep: Prep,
    cloud_messages: Option<Vec<ChatMessage>>,
    callbacks: FuturesUnordered<CbFuture>,
    pending: HashMap<u64, PendingCb>,
    next_cb: u64,
    reports: Vec<CallbackReport>,
    arbitrating: Option<Vec<Scored>>,
    decided: Option<End>,
    hedge_timer: Option<Pin<Box<Sleep>>>,
    share_timer: Option<Pin<Box<Sleep>>>,
    cancel_primary_when_secondary_starts: bool,
    finished_count: u32,
    diagnostic: bool,
}

impl Coordinator {
    fn new(s: RunSetup, shared: Arc<RunShared>, rx: mpsc::UnboundedReceiver<WorkerMsg>) -> Self {
        let span = s.deadline.saturating_duration_since(s.start);
        let plan = Plan::new(&s.policy, |primary| {
            s.slots[primary]
                .as_ref()
                .and_then(|slot| slot.p95())
                .unwrap_or(span / 2)
        });
        Self {
            run_id: s.run_id,
            request: s.request,
            route: s.route,
            policy: s.policy,
            commit: s.commit,
            stream: s.stream,
            start: s.start,
            deadline: s.deadline,
            slots: s.slots,
            handle: s.handle,
            registry: s.registry,
            events: s.events,
            shared,
            rx,
            plan,
            lanes: PerLane::from_fn(LaneRun::new),
            committed: None,
            forwarded_bytes: 0,
            caller_first_token: None,
            prep: Prep::Ready,
            cloud_messages: None,
            callbacks: FuturesUnordered::new(),
            pending: HashMap::new(),
            next_cb: 0,
            reports: Vec::new(),
            arbitrating: None,
            decided: None,
            hedge_timer: None,
            share_timer: None,
            cancel_primary_when_secondary_starts: false,
            finished_count: 0,
            diagnostic: s.diagnostic,
        }
    }

    fn at_ms(&self) -> f64 {
        to_ms(self.start.elapsed())
    }

    async fn drive(mut self) -> Outcome {
        let run_id = self.run_id;
        self.events.emit(|| Event::RunStarted {
            run_id,
            route: self.route.name.clone(),
            policy: self.policy.kind(),
            deadline_ms: to_ms(self.deadline.saturating_duration_since(self.start)),
        });
        self.begin();
        let deadline = super::timer::sleep_until(self.deadline);
        tokio::pin!(deadline);
        let end = loop {
            if let Some(end) = self.evaluate() {
                break end;
            }
            tokio::select! {
                biased;
                () = &mut deadline => break End::Deadline,
                () = self.shared.abort.cancelled() => break End::Abort,
                Some(msg) = self.rx.recv() => self.on_msg(msg, true),
                Some((id, res)) = self.callbacks.next(), if !self.callbacks.is_empty() => {
                    self.on_offloaded(id, res);
                }
                () = wait_opt(&mut self.hedge_timer) => {
                    self.hedge_timer = None;
                    self.on_hedge_timer();
                }
                () = wait_opt(&mut self.share_timer) => {
                    self.share_timer = None;
                    self.on_share_timer();
                }
            }
        };
        self.finish(end).await
    }

    /// Starts what the plan starts at once and arms its timers.
    fn begin(&mut self) {
        for lane in Lane::ALL {
            let r = &mut self.lanes[lane];
            if !self.plan.uses(lane) {
                r.absent(
                    LaneStatus::NotStarted,
                    format!("not used by {}", self.policy.kind()),
                );
            } else if self.slots[lane].is_none() {
                r.absent(LaneStatus::NotStarted, "lane not configured");
            }
        }
        if self.lanes[Lane::Cloud].phase == Phase::Idle {
            self.prepare_cloud();
        }
        self.start_lane(self.plan.primary);
        if let Some(sec) = self.plan.secondary {
            match self.plan.start {
                SecondaryStart::Immediately => self.start_lane(sec),
                SecondaryStart::After(d) => {
                    self.hedge_timer = Some(Box::pin(tokio::time::sleep_until(
                        tokio::time::Instant::from_std(self.start + d),
                    )));
                }
                SecondaryStart::AtShare(share) => {
                    let span = self.deadline.saturating_duration_since(self.start);
                    let at = self.start + span.mul_f64(share);
                    if at < self.deadline {
                        self.share_timer = Some(Box::pin(tokio::time::sleep_until(
                            tokio::time::Instant::from_std(at),
                        )));
                    }
                }
            }
        }
    }

    /// Pre-score (when the plan consults it), then compression.
    fn prepare_cloud(&mut self) {
        self.prep = Prep::Ready;
        if self.plan.consult_pre_score {
            if let Some(cb) = self.route.pre_score.clone() {
                self.prep = Prep::PreScoring;
                let req = self.request.clone();
                let f = cb.f.clone();
                self.call(CallbackKind::PreScore, None, cb.inline, move || {
                    CbOutput::PreScore(f.cloud_needed(&req))
                });
                return;
            }
        }
        self.start_compression();
    }

    fn start_compression(&mut self) {
        match self.route.compressor.clone() {
            Some(cb) => {
                self.prep = Prep::Compressing;
                let req = self.request.clone();
                let f = cb.f.clone();
                self.call(
                    CallbackKind::Compress,
                    Some(Lane::Cloud),
                    cb.inline,
                    move || CbOutput::Compress(f.compress(&req.messages)),
                );
            }
            None => self.prep_ready(),
        }
    }

    fn prep_ready(&mut self) {
        self.prep = Prep::Ready;
        let cloud = &mut self.lanes[Lane::Cloud];
        if cloud.want_start && cloud.phase == Phase::Idle {
            cloud.want_start = false;
            self.start_lane(Lane::Cloud);
        }
    }

    /// Calls a callback: inline for built-ins, else on a blocking thread.
    fn call<F>(&mut self, kind: CallbackKind, lane: Option<Lane>, inline: bool, f: F)
    where
        F: FnOnce() -> CbOutput + Send + 'static,
    {
        if inline {
            let started = Instant::now();
            let value = catch_unwind(AssertUnwindSafe(f)).map_err(|p| message(&*p));
            let res = CallResult {
                value,
                elapsed: started.elapsed(),
            };
            self.on_callback(kind, lane, res);
            return;
        }
        let id = self.next_cb;
        self.next_cb += 1;
        self.pending.insert(
            id,
            PendingCb {
                kind,
                lane,
                started: Instant::now(),
            },
        );
        let jh = offload(&self.handle, f);
        self.callbacks.push(async move { (id, jh.await) }.boxed());
    }

    fn on_offloaded(&mut self, id: u64, res: Result<CallResult<CbOutput>, tokio::task::JoinError>) {
        let Some(p) = self.pending.remove(&id) else {
            return;
        };
        let res = res.unwrap_or_else(|e| CallResult {
            // The closure catches its own panics; a join error means the
            // runtime is shutting down. Treat it like a panic: defaults.
            value: Err(format!("callback task failed: {e}")),
            elapsed: p.started.elapsed(),
        });
        self.on_callback(p.kind, p.lane, res);
    }

    /// Applies a callback's result, or its documented default.
    fn on_callback(&mut self, kind: CallbackKind, lane: Option<Lane>, res: CallResult<CbOutput>) {
        let (status, detail, out) = match res.value {
            Ok(out) => (CallbackStatus::Ok, None, Some(out)),
            Err(msg) => (CallbackStatus::Panicked, Some(msg), None),
        };
        let mut report = CallbackReport {
            kind,
            lane,
            elapsed_ms: to_ms(res.elapsed),
            status,
            over_budget: res.elapsed > self.route.callback_budget,
            detail,
        };
        if report.over_budget {
            tracing::warn!(
                run_id = self.run_id,
                callback = kind.as_str(),
                elapsed_ms = report.elapsed_ms,
                budget_ms = to_ms(self.route.callback_budget),
                "callback over its time budget"
            );
        }
        if report.status == CallbackStatus::Panicked {
            tracing::warn!(
                run_id = self.run_id,
                callback = kind.as_str(),
                panic = report.detail.as_deref().unwrap_or(""),
                "callback panicked; using its default"
            );
        }
        match kind {
            CallbackKind::PreScore => {
                let need = match out {
                    Some(CbOutput::PreScore(n)) => n,
                    _ => CloudNeed::Needed,
                };
                if need == CloudNeed::NotNeeded {
                    let cloud = &mut self.lanes[Lane::Cloud];
                    if cloud.phase == Phase::Idle {
                        cloud.absent(LaneStatus::Skipped, "pre-score: cloud not needed");
                        cloud.want_start = false;
                        let (run_id, at_ms) = (self.run_id, self.at_ms());
                        self.events.emit(|| Event::LaneSkipped {
                            run_id,
                            lane: Lane::Cloud,
                            at_ms,
                        });
                    }
                    self.prep = Prep::Ready;
                    // Nothing to escalate to: the primary keeps the whole
                    // deadline.
                    if self.plan.primary == Lane::Local {
                        self.share_timer = None;
                    }
                } else {
                    self.start_compression();
                }
            }
            CallbackKind::Compress => {
                match out {
                    Some(CbOutput::Compress(c)) if !c.messages.is_empty() => {
                        self.lanes[Lane::Cloud].compressed = (c.tokens_before, c.tokens_after);
                        self.cloud_messages = Some(c.messages);
                    }
                    Some(CbOutput::Compress(_)) => {
                        report.status = CallbackStatus::Invalid;
                        report.detail = Some("compressor returned no messages".into());
                    }
                    _ => {}
                }
                self.prep_ready();
            }
            CallbackKind::Score => {
                let lane = lane.expect("score callbacks are always about a lane");
                let r = &mut self.lanes[lane];
                match out {
                    Some(CbOutput::Score(s)) if s.value.is_finite() => r.score = Some(s),
                    Some(CbOutput::Score(s)) => {
                        report.status = CallbackStatus::Invalid;
                        report.detail = Some(format!("non-finite score {}", s.value));
                    }
                    _ => {}
                }
                if r.phase == Phase::Scoring {
                    r.phase = Phase::Done;
                }
            }
            CallbackKind::Arbitrate => {
                let cands = self.arbitrating.take().unwrap_or_default();
                let end = match out {
                    Some(CbOutput::Arbitrate(Some(i))) if i < cands.len() => End::Winner {
                        lane: cands[i].lane,
                        by: DecidedBy::Arbiter,
                        reason: format!("arbiter picked {}", cands[i].lane),
                    },
                    Some(CbOutput::Arbitrate(None)) => {
                        End::NoAnswer("arbiter rejected every candidate".into())
                    }
                    other_out => {
                        if let Some(CbOutput::Arbitrate(Some(i))) = other_out {
                            report.status = CallbackStatus::Invalid;
                            report.detail = Some(format!(
                                "index {i} out of range ({} candidates)",
                                cands.len()
                            ));
                        }
                        builtin_end(&cands, "arbiter failed; built-in rule: highest score")
                    }
                };
                self.decided = Some(end);
            }
        }
        self.reports.push(report);
    }

    /// Tries to admit `lane` and start its worker.
    fn start_lane(&mut self, lane: Lane) {
        if self.lanes[lane].phase != Phase::Idle {
            return;
        }
        if lane == Lane::Cloud && self.prep != Prep::Ready {
            self.lanes[lane].want_start = true;
            return;
        }
        if Instant::now() >= self.deadline {
            self.lanes[lane].absent(LaneStatus::NotStarted, "deadline reached before it started");
            return;
        }
        let slot = self.slots[lane]
            .clone()
            .expect("an idle lane in the plan is configured");
        let run_id = self.run_id;
        let Some(permit) = slot.try_admit() else {
            let at_ms = self.at_ms();
            self.lanes[lane].absent(LaneStatus::Busy, "another worker holds the lane");
            self.events.emit(|| Event::LaneBusy {
                run_id,
                lane,
                at_ms,
            });
            return;
        };
        // Asked while holding the slot, so at most one probe runs.
        if let Availability::Down { retry_in, reason } = slot.backend.availability() {
            drop(permit);
            let r = &mut self.lanes[lane];
            r.absent(LaneStatus::Unavailable, unavailable_note(retry_in, &reason));
            r.retry_in = Some(retry_in);
            return;
        }
        let messages = match (&self.cloud_messages, lane) {
            (Some(m), Lane::Cloud) => m.clone(),
            _ => self.request.messages.clone(),
        };
        let r = &mut self.lanes[lane];
        let tx = self.shared.tx.clone();
        let mut job = LaneJob::new(messages, self.request.sampling.clone(), self.deadline)
            .with_cancel(r.cancel.clone())
            .with_sink(move |piece: &str| {
                let _ = tx.send(WorkerMsg::Token {
                    lane,
                    piece: piece.to_string(),
                });
            });
        // The slot frees when both halves are gone: the job's (which the
        // backend drops when its work really ends, wherever that runs) and
        // the worker's (held until the backend's future has returned). The
        // second half keeps the promise for a backend that drops its job
        // early: an `async move` block naming only `job.cancel` captures
        // just that field (edition 2021) and drops the rest at once.
        let hold = Arc::new(permit);
        job.permit = Some(Box::new(hold.clone()));
        let guard = self.registry.worker_started(run_id, lane);
        r.worker_id = Some(guard.id());
        r.phase = Phase::Running;
        r.started = Some(Instant::now());
        let shared = self.shared.clone();
        self.handle.spawn(async move {
            let cancel = job.cancel.clone();
            let started = Instant::now();
            let result = call_backend(&*slot.backend, job).await;
            drop(hold);
            let at = Instant::now();
            if matches!(&result, Ok(c) if c.finish_reason.is_complete()) {
                slot.record_latency(at - started);
            }
            shared.worker_finished(lane, result, at, cancel.is_cancelled());
            drop(guard);
        });
        let at_ms = self.at_ms();
        self.events.emit(|| Event::LaneAdmitted {
            run_id,
            lane,
            at_ms,
        });
        if self.cancel_primary_when_secondary_starts && Some(lane) == self.plan.secondary {
            self.cancel_primary_when_secondary_starts = false;
            self.escalate_from_primary();
        }
    }

    fn cancel_lane(&mut self, lane: Lane, note: &str) {
        let r = &mut self.lanes[lane];
        match r.phase {
            Phase::Running => {
                r.cancel_requested = true;
                r.cancel.cancel();
                r.note.get_or_insert_with(|| note.to_string());
            }
            Phase::Idle => r.absent(LaneStatus::NotStarted, note),
            _ => {}
        }
    }

    fn on_hedge_timer(&mut self) {
        if let Some(sec) = self.plan.secondary {
            if self.lanes[sec].phase == Phase::Idle && self.committed.is_none() {
                self.lanes[sec].note = Some("started after the hedge delay".into());
                self.start_lane(sec);
            }
        }
    }

    /// The primary used up its share: start the secondary and, once it is
    /// admitted, cancel the primary. If the secondary cannot run (busy,
    /// skipped), the primary keeps going: cutting it would leave nothing.
    fn on_share_timer(&mut self) {
        let Some(sec) = self.plan.secondary else {
            return;
        };
        let primary = self.plan.primary;
        if self.lanes[primary].phase != Phase::Running || self.committed.is_some() {
            return;
        }
        if self.lanes[sec].phase == Phase::Idle {
            self.lanes[sec].note = Some(format!("{primary} overran its share of the deadline"));
            self.cancel_primary_when_secondary_starts = true;
            self.start_lane(sec);
            if self.lanes[sec].phase != Phase::Running && !self.lanes[sec].want_start {
                self.cancel_primary_when_secondary_starts = false;
                self.lanes[primary].note = Some(format!(
                    "overran its share, but {sec} could not start; kept running"
                ));
            }
        }
    }

    fn escalate_from_primary(&mut self) {
        let primary = self.plan.primary;
        self.cancel_lane(
            primary,
            "overran its share of the deadline; cancelled to escalate",
        );
    }

    fn on_msg(&mut self, msg: WorkerMsg, allow_scoring: bool) {
        match msg {
            WorkerMsg::Token { lane, piece } => self.on_token(lane, piece),
            WorkerMsg::Finished(f) => {
                let Finished {
                    lane,
                    result,
                    at,
                    saw_cancel,
                } = *f;
                self.on_finished(lane, result, at, saw_cancel, allow_scoring);
            }
        }
    }

    fn on_token(&mut self, lane: Lane, piece: String) {
        let run_id = self.run_id;
        let r = &mut self.lanes[lane];
        if r.phase != Phase::Running {
            return;
        }
        if r.first_token.is_none() {
            r.first_token = Some(Instant::now());
            let at_ms = self.at_ms();
            self.events.emit(|| Event::FirstToken {
                run_id,
                lane,
                at_ms,
            });
        }
        if self.stream.is_none() {
            return;
        }
        match self.committed {
            Some(c) if c == lane => self.forward(piece),
            Some(_) => {}
            None => {
                let r = &mut self.lanes[lane];
                r.buffer.push(piece);
                if self.commit == CommitMode::FirstToken
                    && self.plan.commits_at_first_token(lane)
                    && !r.cancel_requested
                {
                    self.commit_to(lane);
                }
            }
        }
    }

    /// Commits a streaming run to `lane`: its buffered text goes out, the
    /// other lane is cancelled or never started, no escalation follows.
    fn commit_to(&mut self, lane: Lane) {
        if self.committed.is_some() {
            return;
        }
        self.committed = Some(lane);
        let buffered = std::mem::take(&mut self.lanes[lane].buffer);
        for piece in buffered {
            self.forward(piece);
        }
        let o = lane.other();
        self.lanes[o].buffer.clear();
        self.cancel_lane(o, &format!("run committed to {lane}"));
        self.hedge_timer = None;
        self.share_timer = None;
        self.cancel_primary_when_secondary_starts = false;
    }

    fn forward(&mut self, piece: String) {
        if piece.is_empty() {
            return;
        }
        if let Some(tx) = &self.stream {
            self.caller_first_token.get_or_insert_with(Instant::now);
            self.forwarded_bytes += piece.len();
            let _ = tx.send(piece);
        }
    }

    fn on_finished(
        &mut self,
        lane: Lane,
        result: Result<Candidate, BackendError>,
        at: Instant,
        saw_cancel: bool,
        allow_scoring: bool,
    ) {
        let run_id = self.run_id;
        self.finished_count += 1;
        let order = self.finished_count;
        let status = status_of(&result);
        let r = &mut self.lanes[lane];
        r.finished = Some(at);
        r.finish_order = order;
        r.saw_cancel = saw_cancel;
        let scorable = matches!(&result, Ok(c) if c.finish_reason.is_complete());
        let candidate = result.as_ref().ok().cloned();
        r.result = Some(result);
        r.phase = Phase::Done;
        let at_ms = to_ms(at.saturating_duration_since(self.start));
        self.events.emit(|| Event::LaneFinished {
            run_id,
            lane,
            status,
            at_ms,
        });
        let other_committed = self.committed.is_some_and(|c| c != lane);
        if !(allow_scoring && scorable && !other_committed) {
            return;
        }
        let (Some(cb), Some(candidate)) = (self.route.scorer.clone(), candidate) else {
            return;
        };
        self.lanes[lane].phase = Phase::Scoring;
        let ctx = ScoreContext {
            lane,
            request: self.request.clone(),
        };
        let f = cb.f.clone();
        self.call(CallbackKind::Score, Some(lane), cb.inline, move || {
            CbOutput::Score(f.score(&candidate, &ctx))
        });
    }

    fn threshold(&self, lane: Lane) -> Option<f64> {
        if lane == self.plan.primary {
            if let Some(t) = self.plan.primary_threshold {
                return Some(t);
            }
        }
        self.route.min_score
    }

    fn acceptable(&self, lane: Lane) -> bool {
        let r = &self.lanes[lane];
        if r.phase != Phase::Done {
            return false;
        }
        let Some(c) = r.candidate() else {
            return false;
        };
        if !c.is_usable() {
            return false;
        }
        match self.threshold(lane) {
            None => true,
            Some(t) => r.score.as_ref().is_some_and(|s| s.value >= t),
        }
    }

    fn usable(&self, lane: Lane) -> bool {
        let r = &self.lanes[lane];
        matches!(r.phase, Phase::Done | Phase::Scoring)
            && r.candidate()
                .is_some_and(|c| self.diagnostic || c.is_usable())
    }

    /// Finished lanes in the order they finished.
    fn finished_in_order(&self) -> Vec<Lane> {
        let mut v: Vec<&LaneRun> = self
            .lanes
            .values()
            .filter(|r| matches!(r.phase, Phase::Done | Phase::Scoring))
            .collect();
        v.sort_by_key(|r| r.finish_order);
        v.into_iter().map(|r| r.lane).collect()
    }

    fn scored(&self, lanes: &[Lane]) -> Vec<Scored> {
        lanes
            .iter()
            .filter_map(|&l| {
                let r = &self.lanes[l];
                Some(Scored {
                    lane: l,
                    candidate: r.candidate()?.clone(),
                    score: r.score.clone(),
                    finished_after: r
                        .finished
                        .map(|f| f.saturating_duration_since(self.start))
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    /// The run's rules, applied to its current state: a decision, a lane
    /// to start, or nothing yet.
    fn evaluate(&mut self) -> Option<End> {
        if let Some(end) = self.decided.take() {
            return Some(end);
        }
        if let Some(c) = self.committed {
            return (self.lanes[c].phase == Phase::Done).then_some(End::Committed(c));
        }
        loop {
            if self.plan.pick == Pick::FirstAcceptable {
                let done = self.finished_in_order();
                if let Some(&l) = done.iter().find(|&&l| self.acceptable(l)) {
                    return Some(End::Winner {
                        lane: l,
                        by: DecidedBy::Policy,
                        reason: format!("first acceptable answer: {l}"),
                    });
                }
            }
            let Some(sec) = self.plan.secondary else {
                break;
            };
            let primary = self.plan.primary;
            let sr = &self.lanes[sec];
            if sr.phase != Phase::Idle || sr.want_start {
                break;
            }
            let out = match self.lanes[primary].phase {
                Phase::Absent(s) => Some(format!("{primary} was {}", s.as_str())),
                Phase::Done if !self.acceptable(primary) => Some(format!(
                    "{primary} {}",
                    match self.lanes[primary].candidate() {
                        None => "failed",
                        Some(c) if !c.is_usable() => "gave no usable answer",
                        Some(_) => "scored below the threshold",
                    }
                )),
                _ => None,
            };
            let Some(why) = out else {
                break;
            };
            self.lanes[sec].note = Some(format!("started because {why}"));
            self.hedge_timer = None;
            self.share_timer = None;
            self.start_lane(sec);
        }
        let open = self
            .lanes
            .values()
            .any(|r| matches!(r.phase, Phase::Idle | Phase::Running | Phase::Scoring));
        if open || self.arbitrating.is_some() {
            return None;
        }
        // Every lane has ended and none was taken on the way.
        let done = self.finished_in_order();
        let acceptable: Vec<Lane> = done
            .iter()
            .copied()
            .filter(|&l| self.acceptable(l))
            .collect();
        let (pool, what) = if acceptable.is_empty() {
            let usable: Vec<Lane> = done.iter().copied().filter(|&l| self.usable(l)).collect();
            (usable, "no acceptable answer; best usable one")
        } else {
            (acceptable, "best acceptable answer")
        };
        // A lane cut by the deadline can return before the run's own timer
        // fires (both watch the same instant): that is still the deadline.
        let cut_by_deadline = self.lanes.values().any(|r| {
            r.candidate()
                .is_some_and(|c| c.finish_reason == crate::lane::FinishReason::Deadline)
        });
        match pool.len() {
            0 if cut_by_deadline || Instant::now() >= self.deadline => Some(End::Deadline),
            0 => Some(End::NoAnswer("no lane produced a usable answer".into())),
            1 => Some(End::Winner {
                lane: pool[0],
                by: DecidedBy::Policy,
                reason: format!("{what}: only candidate {}", pool[0]),
            }),
            _ => {
                let cands = self.scored(&pool);
                match self.route.arbiter.clone() {
                    Some(cb) => {
                        let for_cb = cands.clone();
                        self.arbitrating = Some(cands);
                        let f = cb.f.clone();
                        self.call(CallbackKind::Arbitrate, None, cb.inline, move || {
                            CbOutput::Arbitrate(f.pick(&for_cb))
                        });
                        self.decided.take()
                    }
                    None => Some(builtin_end(
                        &cands,
                        &format!("{what}; built-in rule: highest score"),
                    )),
                }
            }
        }
    }

    /// Ends the run: cancels what still runs, gives cooperative workers
    /// the cancel grace (never past the deadline, never at the deadline),
    /// then settles.
    async fn finish(mut self, end: End) -> Outcome {
        if matches!(end, End::Deadline) {
            let (run_id, at_ms) = (self.run_id, self.at_ms());
            self.events
                .emit(|| Event::DeadlineReached { run_id, at_ms });
        }
        let note = match &end {
            End::Deadline => "deadline reached before it was needed",
            End::Abort => "run aborted",
            _ => "run decided without it",
        };
        if matches!(end, End::Abort) {
            for r in self.lanes.values_mut() {
                if matches!(r.phase, Phase::Done | Phase::Scoring) {
                    r.cancel_requested = true;
                }
            }
        }
        for lane in Lane::ALL {
            self.cancel_lane(lane, note);
        }
        if !matches!(end, End::Deadline) {
            let until = self.deadline.min(Instant::now() + self.route.cancel_grace);
            let sleep = super::timer::sleep_until(until);
            tokio::pin!(sleep);
            while self.lanes.values().any(|r| {
                r.phase == Phase::Running
                    && r.cancel_requested
                    && self.slots[r.lane]
                        .as_ref()
                        .is_some_and(|s| s.observes_cancellation)
            }) {
                tokio::select! {
                    biased;
                    () = &mut sleep => break,
                    Some(msg) = self.rx.recv() => self.on_msg(msg, false),
                }
            }
        }
        self.settle(end)
    }

    /// Settles the run, exactly once (this consumes the coordinator).
    fn settle(mut self, end: End) -> Outcome {
        let shared = self.shared.clone();
        let st_guard = {
            let mut st = shared.lock();
            st.settled_at = Some(Instant::now());
            st
        };
        let now = st_guard.settled_at.expect("just set");
        let aborted = st_guard.abort_requested;
        // Results that arrived before the run closed belong to it.
        while let Ok(msg) = self.rx.try_recv() {
            self.on_msg(msg, false);
        }
        let end = if aborted { End::Abort } else { end };
        let mut error = None;
        let (status, winner, decision_reason, by) = match end {
            End::Winner { lane, by, reason } => (RunStatus::Ok, Some(lane), reason, by),
            End::Committed(lane) => match self.lanes[lane].result.as_ref() {
                Some(Ok(c)) if c.finish_reason.is_complete() => (
                    RunStatus::Ok,
                    Some(lane),
                    format!("stream committed to {lane}, which completed"),
                    DecidedBy::Policy,
                ),
                Some(Ok(c)) => {
                    error = Some(format!(
                        "committed lane {lane} stopped early ({})",
                        c.finish_reason.as_str()
                    ));
                    (
                        if c.finish_reason == crate::lane::FinishReason::Deadline {
                            RunStatus::DeadlineExceeded
                        } else {
                            RunStatus::Failed
                        },
                        None,
                        format!("stream committed to {lane}, which stopped early"),
                        DecidedBy::Nobody,
                    )
                }
                _ => {
                    error = Some(format!(
                        "committed lane {lane} failed: {}",
                        self.lane_error(lane)
                            .map(|e| format!("({}) {}", e.kind(), crate::error_chain(e)))
                            .unwrap_or_default()
                    ));
                    (
                        RunStatus::Failed,
                        None,
                        format!("stream committed to {lane}, which failed"),
                        DecidedBy::Nobody,
                    )
                }
            },
            End::NoAnswer(reason) => {
                error = Some(format!("{reason} ({})", self.lanes_summary()));
                (RunStatus::Failed, None, reason, DecidedBy::Nobody)
            }
            End::Abort => {
                error = Some("aborted".into());
                (
                    RunStatus::Aborted,
                    None,
                    "run aborted".into(),
                    DecidedBy::Nobody,
                )
            }
            End::Deadline => self.decide_at_deadline(&mut error),
        };
        // A winner's text reaches a streaming caller now if it has not yet.
        if let Some(w) = winner {
            self.flush_winner(w);
        }
        let reports = self.lane_reports(winner);
        let late_workers = reports
            .iter()
            .filter(|r| r.status == LaneStatus::Late)
            .count() as u32;
        for r in self.lanes.values() {
            if r.phase == Phase::Running {
                if let Some(id) = r.worker_id {
                    self.registry.mark_late(id);
                }
            }
        }
        let now_pending: Vec<CallbackReport> = self
            .pending
            .values()
            .map(|p| CallbackReport {
                kind: p.kind,
                lane: p.lane,
                elapsed_ms: to_ms(now.saturating_duration_since(p.started)),
                status: CallbackStatus::TimedOut,
                over_budget: now.saturating_duration_since(p.started) > self.route.callback_budget,
                detail: Some("abandoned at settlement".into()),
            })
            .collect();
        self.reports.extend(now_pending);
        let elapsed = now.saturating_duration_since(self.start);
        let overshoot = now.saturating_duration_since(self.deadline);
        let candidate = winner.and_then(|w| self.lanes[w].candidate().cloned());
        let outcome = Outcome {
            run_id: self.run_id,
            request_id: self.request.id.clone(),
            route: self.route.name.clone(),
            policy: self.policy.kind(),
            status,
            winner,
            text: candidate.as_ref().map(|c| c.text.clone()),
            completion: candidate,
            error,
            committed: self.committed,
            deadline_ms: to_ms(self.deadline.saturating_duration_since(self.start)),
            elapsed_ms: to_ms(elapsed),
            overshoot_ms: to_ms(overshoot),
            ttft_ms: self
                .caller_first_token
                .map(|t| to_ms(t.saturating_duration_since(self.start))),
            decision: Decision {
                reason: decision_reason,
                decided_by: by,
                scores: Lane::ALL
                    .iter()
                    .map(|&l| (l, self.lanes[l].score.as_ref().map(|s| s.value)))
                    .collect::<BTreeMap<_, _>>(),
            },
            lanes: reports,
            callback_ms: self.reports.iter().map(|r| r.elapsed_ms).sum(),
            callbacks: std::mem::take(&mut self.reports),
            late_workers,
        };
        let run_id = self.run_id;
        let at_ms = to_ms(elapsed);
        self.events.emit(|| Event::Decision {
            run_id,
            winner,
            reason: outcome.decision.reason.clone(),
            at_ms,
        });
        self.events.emit(|| Event::RunSettled {
            run_id,
            status,
            winner,
            elapsed_ms: outcome.elapsed_ms,
            overshoot_ms: outcome.overshoot_ms,
            late_workers,
        });
        self.registry.run_settled();
        drop(st_guard);
        // Closing the stream tells the caller every piece was delivered.
        self.stream = None;
        tracing::debug!(
            run_id,
            status = status.as_str(),
            winner = winner.map(Lane::as_str),
            elapsed_ms = outcome.elapsed_ms,
            overshoot_ms = outcome.overshoot_ms,
            "run settled"
        );
        outcome
    }

    /// The deadline came first: take the best finished answer, if any
    /// (built-in rule; no callback can run now).
    fn decide_at_deadline(
        &mut self,
        error: &mut Option<String>,
    ) -> (RunStatus, Option<Lane>, String, DecidedBy) {
        if let Some(c) = self.committed {
            if matches!(self.lanes[c].candidate(), Some(cand) if cand.finish_reason.is_complete()) {
                return (
                    RunStatus::Ok,
                    Some(c),
                    format!("stream committed to {c}, which completed at the deadline"),
                    DecidedBy::Policy,
                );
            }
            *error = Some(format!(
                "deadline reached before committed lane {c} finished"
            ));
            return (
                RunStatus::DeadlineExceeded,
                None,
                format!("deadline reached; stream committed to {c}"),
                DecidedBy::Nobody,
            );
        }
        let done = self.finished_in_order();
        let acceptable: Vec<Lane> = done
            .iter()
            .copied()
            .filter(|&l| self.acceptable(l))
            .collect();
        let pool: Vec<Lane> = if acceptable.is_empty() {
            done.iter().copied().filter(|&l| self.usable(l)).collect()
        } else {
            acceptable
        };
        let cands = self.scored(&pool);
        match pick_highest(&cands) {
            Some(i) => (
                RunStatus::Ok,
                Some(cands[i].lane),
                format!(
                    "deadline reached; best answer finished by then: {}",
                    cands[i].lane
                ),
                if cands.len() > 1 {
                    DecidedBy::BuiltIn
                } else {
                    DecidedBy::Policy
                },
            ),
            None => {
                *error = Some(format!(
                    "deadline reached with no usable answer ({})",
                    self.lanes_summary()
                ));
                (
                    RunStatus::DeadlineExceeded,
                    None,
                    "deadline reached with no usable answer".into(),
                    DecidedBy::Nobody,
                )
            }
        }
    }

    /// Sends a streaming caller whatever of the winner's text it has not
    /// received: buffered pieces for an uncommitted winner, then any tail
    /// the backend returned without streaming it.
    fn flush_winner(&mut self, w: Lane) {
        if self.stream.is_none() {
            return;
        }
        if self.committed.is_none() {
            self.committed = Some(w);
            let buffered = std::mem::take(&mut self.lanes[w].buffer);
            for piece in buffered {
                self.forward(piece);
            }
        }
        let text = self.lanes[w]
            .candidate()
            .map(|c| c.text.clone())
            .unwrap_or_default();
        if self.forwarded_bytes < text.len() && text.is_char_boundary(self.forwarded_bytes) {
            let tail = text[self.forwarded_bytes..].to_string();
            self.forward(tail);
        }
    }

    fn lane_error(&self, lane: Lane) -> Option<&BackendError> {
        match &self.lanes[lane].result {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }

    fn lanes_summary(&self) -> String {
        Lane::ALL
            .iter()
            .map(|&l| {
                let r = &self.lanes[l];
                let what = match (&r.phase, &r.result) {
                    (Phase::Absent(s), _) => s.as_str().to_string(),
                    (Phase::Idle, _) => "not started".into(),
                    (Phase::Running, _) => "still running".into(),
                    (_, Some(Err(e))) => {
                        format!("failed ({}): {}", e.kind(), crate::error_chain(e))
                    }
                    (_, Some(Ok(c))) if !c.is_usable() => {
                        format!("unusable answer ({})", c.finish_reason.as_str())
                    }
                    (_, Some(Ok(_))) => "answered".into(),
                    (_, None) => "no result".into(),
                };
                format!("{l}: {what}")
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn lane_reports(&self, winner: Option<Lane>) -> Vec<LaneReport> {
        Lane::ALL
            .iter()
            .map(|&lane| {
                let r = &self.lanes[lane];
                let slot = self.slots[lane].as_ref();
                let observes = slot.is_none_or(|s| s.observes_cancellation);
                let status = match r.phase {
                    Phase::Absent(s) => s,
                    Phase::Idle => LaneStatus::NotStarted,
                    Phase::Running => LaneStatus::Late,
                    Phase::Scoring | Phase::Done => match &r.result {
                        Some(res) => status_of(res),
                        None => LaneStatus::Failed,
                    },
                };
                let cancel = r.cancel_requested.then_some(match r.phase {
                    _ if !observes => CancelResult::NotPropagated,
                    Phase::Running => CancelResult::StillRunning,
                    _ if r.saw_cancel => CancelResult::StoppedInTime,
                    _ => CancelResult::AlreadyFinished,
                });
                let mut rep = LaneReport::new(lane, status);
                rep.backend = slot.map(|s| s.info.name.clone());
                if let Some(st) = r.started {
                    rep.started_ms = Some(to_ms(st.saturating_duration_since(self.start)));
                    rep.ttft_ms = r
                        .first_token
                        .map(|t| to_ms(t.saturating_duration_since(st)));
                    rep.total_ms = r.finished.map(|t| to_ms(t.saturating_duration_since(st)));
                }
                if let Some(c) = r.candidate() {
                    rep.tokens = c.tokens.clone();
                    rep.finish_reason = Some(c.finish_reason);
                    if winner != Some(lane) {
                        rep.text = Some(c.text.clone());
                    }
                    if rep.ttft_ms.is_none() {
                        rep.ttft_ms = c.timings.ttft.map(to_ms);
                    }
                }
                rep.tokens.compressor_before = r.compressed.0;
                rep.tokens.compressor_after = r.compressed.1;
                rep.prompt_tokens = rep.tokens.prompt();
                rep.completion_tokens = rep.tokens.completion();
                if let Some(s) = &r.score {
                    rep.score = Some(s.value);
                    rep.signals = s.signals.clone();
                }
                rep.error = self.lane_error(lane).cloned();
                rep.cancel = cancel;
                rep.note = r.note.clone();
                rep.retry_in_ms = r.retry_in.map(to_ms);
                rep
            })
            .collect()
    }
}

fn builtin_end(cands: &[Scored], reason: &str) -> End {
    match pick_highest(cands) {
        Some(i) => End::Winner {
            lane: cands[i].lane,
            by: DecidedBy::BuiltIn,
            reason: format!("{reason}: {}", cands[i].lane),
        },
        None => End::NoAnswer("no candidate to pick from".into()),
    }
}

fn status_of(result: &Result<Candidate, BackendError>) -> LaneStatus {
    match result {
        Ok(c) if c.finish_reason.is_complete() => LaneStatus::Completed,
        Ok(_) => LaneStatus::Cancelled,
        Err(_) => LaneStatus::Failed,
    }
}

/// Waits on an optional timer; pending forever when there is none.
async fn wait_opt(timer: &mut Option<Pin<Box<Sleep>>>) {
    match timer {
        Some(t) => t.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Runs a backend on one job with every panic caught. The backend's future
/// (and with it the job and its permit) is dropped before this returns, so
/// the lane is free by the time the result is reported.
async fn call_backend(backend: &dyn Backend, job: LaneJob) -> Result<Candidate, BackendError> {
    let fut = match catch_unwind(AssertUnwindSafe(|| backend.run(job))) {
        Ok(f) => f,
        Err(p) => {
            return Err(BackendError::new(
                LaneErrorKind::Panicked,
                format!("backend panicked: {}", message(&*p)),
            ))
        }
    };
    let mut fut = AssertUnwindSafe(fut).catch_unwind();
    let res = (&mut fut).await;
    drop(fut);
    match res {
        Ok(r) => r,
        Err(p) => Err(BackendError::new(
            LaneErrorKind::Panicked,
            format!("backend panicked: {}", message(&*p)),
        )),
    }
}
