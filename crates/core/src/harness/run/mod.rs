//! One run's async shell around its decision core (`core`): the task
//! that owns the run, its select loop (the deadline, an abort, worker
//! messages, finished callbacks, the plan's timers), admission and worker
//! spawns (`worker`), callback calls (built-in ones inline, user ones on a
//! blocking thread), and settlement under the run's shared state
//! (`shared`). It turns what happens into core inputs and the core's
//! effects into actions, and decides nothing itself. This module must not
//! know what a backend is beyond the [`Backend`](super::Backend) trait,
//! nor parse configuration.
//!
//! Invariants, and where they are kept:
//! - one deadline: computed once by the harness before the run is spawned;
//!   every wait below is a `select!` against that one instant;
//! - the permit travels with the work (`worker`);
//! - settles exactly once: settlement happens in [`Shell::settle`], which
//!   consumes the shell, under the run's state lock, and emits
//!   `run_settled` under that lock, so a late worker (which reports under
//!   the same lock) always comes after;
//! - no callback under a lock: user callbacks run on blocking threads
//!   (built-in ones inline on the run's task); the state lock only guards
//!   two fields and is held for channel sends and bookkeeping.

mod shared;
mod worker;

pub use shared::AbortResult;
pub(crate) use shared::RunShared;

use super::callbacks::{offload, CallResult, ScoreContext};
use super::decision::{
    Call, CbOutput, Configured, Core, CoreSetup, Effect, Input, LaneInfo, Prefill, TimerKind,
};
use super::ledger::RunLedger;
use super::observer::EventSink;
use super::outcome::{LaneStatus, Outcome};
use super::policy::{CommitMode, Policy};
use super::registry::Registry;
use super::route::{Cb, RouteSettings};
use super::slot::LaneSlot;
use crate::lane::{CancellationToken, Lane, LaneJob, PerLane};
use crate::panic_payload::message;
use crate::reasoning::Piece;
use crate::request::{ChatMessage, Request};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use shared::WorkerMsg;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Sleep;

/// Everything a run needs, decided by the harness before it is spawned.
pub(crate) struct RunSetup {
    pub(crate) run_id: u64,
    pub(crate) request: Arc<Request>,
    pub(crate) route: Arc<RouteSettings>,
    pub(crate) policy: Policy,
    pub(crate) commit: CommitMode,
    pub(crate) stream: Option<mpsc::UnboundedSender<Piece>>,
    pub(crate) start: Instant,
    pub(crate) deadline: Instant,
    pub(crate) slots: PerLane<Option<Arc<LaneSlot>>>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) registry: Arc<Registry>,
    pub(crate) events: EventSink,
    /// A single-lane diagnostic: any returned completion is the answer,
    /// blank or cut short (a diagnostic reports what happened).
    pub(crate) diagnostic: bool,
    /// What the ledger knows of the run (budget, price, idempotency key).
    pub(crate) ledger: RunLedger,
}

/// Spawns the run's task; returns what the caller's handle needs.
pub(crate) fn launch(setup: RunSetup) -> (Arc<RunShared>, oneshot::Receiver<Outcome>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(RunShared::new(
        setup.run_id,
        tx,
        setup.events.clone(),
        setup.registry.clone(),
    ));
    let (out_tx, out_rx) = oneshot::channel();
    setup.registry.run_started();
    let handle = setup.handle.clone();
    let shell = Shell::new(setup, shared.clone(), rx);
    handle.spawn(async move {
        let outcome = shell.drive().await;
        // The caller may have dropped its handle; the run still settled.
        let _ = out_tx.send(outcome);
    });
    (shared, out_rx)
}

type CbFuture = BoxFuture<'static, (u64, Result<CallResult<CbOutput>, tokio::task::JoinError>)>;

/// What the select loop waits for next.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Deciding,
    /// Cancelled cooperative workers may return until then.
    Grace(Instant),
    Settle,
}

/// A timer of the plan, armed for the core's instant.
type Armed = Option<(Instant, Pin<Box<Sleep>>)>;

/// The plan's two timers.
#[derive(Default)]
struct PlanTimers {
    hedge: Armed,
    share: Armed,
}

struct Shell {
    core: Core,
    request: Arc<Request>,
    route: Arc<RouteSettings>,
    deadline: Instant,
    slots: PerLane<Option<Arc<LaneSlot>>>,
    handle: tokio::runtime::Handle,
    registry: Arc<Registry>,
    events: EventSink,
    shared: Arc<RunShared>,
    rx: mpsc::UnboundedReceiver<WorkerMsg>,
    stream: Option<mpsc::UnboundedSender<Piece>>,
    cancel: PerLane<CancellationToken>,
    worker_ids: PerLane<Option<u64>>,
    callbacks: FuturesUnordered<CbFuture>,
    timers: PlanTimers,
    mode: Mode,
    /// Taken at settlement.
    ledger: Option<RunLedger>,
}

impl Shell {
    fn new(s: RunSetup, shared: Arc<RunShared>, rx: mpsc::UnboundedReceiver<WorkerMsg>) -> Self {
        let route = &s.route;
        let core = Core::new(CoreSetup {
            run_id: s.run_id,
            request_id: s.request.id.clone(),
            route: route.name.clone(),
            policy: s.policy,
            commit: s.commit,
            streaming: s.stream.is_some(),
            diagnostic: s.diagnostic,
            start: s.start,
            deadline: s.deadline,
            lanes: s.slots.as_ref().map(|_, slot| {
                slot.as_ref().map(|slot| LaneInfo {
                    backend: slot.info.name.clone(),
                    observes_cancellation: slot.observes_cancellation,
                    p95: slot.p95(),
                })
            }),
            callbacks: Configured {
                pre_score: route.pre_score.is_some(),
                compressor: route.compressor.is_some(),
                scorer: route.scorer.is_some(),
                arbiter: route.arbiter.is_some(),
            },
            min_score: route.min_score,
            answer_rules: s
                .request
                .sampling
                .constrains_answer()
                .then(|| s.request.sampling.clone()),
            callback_budget: route.callback_budget,
            cancel_grace: route.cancel_grace,
            early: route.escalate_early,
            prompt_threshold: route.prompt_escalate_below,
        });
        Self {
            core,
            request: s.request,
            route: s.route,
            deadline: s.deadline,
            slots: s.slots,
            handle: s.handle,
            registry: s.registry,
            events: s.events,
            shared,
            rx,
            stream: s.stream,
            cancel: PerLane::from_fn(|_| CancellationToken::new()),
            worker_ids: PerLane::new(None, None),
            callbacks: FuturesUnordered::new(),
            timers: PlanTimers::default(),
            mode: Mode::Deciding,
            ledger: Some(s.ledger),
        }
    }

    async fn drive(mut self) -> Outcome {
        self.step(Input::Begin);
        let deadline = super::timer::sleep_until(self.deadline);
        tokio::pin!(deadline);
        while self.mode == Mode::Deciding {
            self.arm_timers();
            let input = tokio::select! {
                biased;
                () = &mut deadline => Input::Deadline,
                () = self.shared.abort.cancelled() => Input::Abort,
                Some(msg) = self.rx.recv() => msg.into(),
                Some((id, res)) = self.callbacks.next(), if !self.callbacks.is_empty() => {
                    Input::Called {
                        id,
                        result: res.map_err(|e| format!("callback task failed: {e}")),
                    }
                }
                () = wait_armed(&mut self.timers.hedge) => Input::HedgeDue,
                () = wait_armed(&mut self.timers.share) => Input::ShareDue,
            };
            self.step(input);
        }
        if let Mode::Grace(until) = self.mode {
            let sleep = super::timer::sleep_until(until);
            tokio::pin!(sleep);
            while self.mode != Mode::Settle {
                let input = tokio::select! {
                    biased;
                    () = &mut sleep => Input::GraceOver,
                    Some(msg) = self.rx.recv() => msg.into(),
                };
                self.step(input);
            }
        }
        self.settle()
    }

    /// Keeps the timers on the core's instants.
    fn arm_timers(&mut self) {
        for (slot, kind) in [
            (&mut self.timers.hedge, TimerKind::Hedge),
            (&mut self.timers.share, TimerKind::Share),
        ] {
            let want = self.core.timer(kind);
            if slot.as_ref().map(|(at, _)| *at) != want {
                *slot = want.map(|at| {
                    let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(at));
                    (at, Box::pin(sleep))
                });
            }
        }
    }

    /// Feeds one input to the core and carries out its effects, in order;
    /// an admission or an inline callback answers before the next effect.
    fn step(&mut self, input: Input) {
        for effect in self.core.step(input, Instant::now()) {
            self.apply(effect);
        }
    }

    fn apply(&mut self, effect: Effect) {
        match effect {
            Effect::Start {
                lane,
                messages,
                prefill,
            } => {
                let answer = self.admit(lane, messages, prefill);
                self.step(Input::Admission { lane, answer });
            }
            Effect::Cancel(lane) => self.cancel[lane].cancel(),
            Effect::Call { id, call } => self.call(id, call),
            Effect::Forward(piece) => {
                if let Some(tx) = &self.stream {
                    let _ = tx.send(piece);
                }
            }
            Effect::Emit(event) => self.events.emit(|| event),
            Effect::AwaitCancelled { until } => self.mode = Mode::Grace(until),
            Effect::Settle => self.mode = Mode::Settle,
        }
    }

    fn admit(
        &mut self,
        lane: Lane,
        messages: Option<Vec<ChatMessage>>,
        prefill: Option<Prefill>,
    ) -> super::decision::Admission {
        let refused = (lane == Lane::Cloud)
            .then(|| self.ledger.as_ref().and_then(RunLedger::cloud_refused))
            .flatten();
        if let Some((retry_in, note)) = refused {
            return super::decision::Admission::Refused { retry_in, note };
        }
        let slot = self.slots[lane]
            .clone()
            .expect("the core starts configured lanes only");
        let watch = self
            .core
            .watches_logprobs(lane)
            .then(|| self.shared.tx.clone());
        let prompt_watch = self
            .core
            .watches_prompt(lane)
            .then(|| self.shared.tx.clone());
        let scores_prompt = self.core.scores_prompt(lane);
        // A lane started again in this run (to continue the answer of a
        // lane that failed: the decision's `switch`) gets a fresh token.
        if self.cancel[lane].is_cancelled() {
            self.cancel[lane] = CancellationToken::new();
        }
        let make_job = || {
            let mut messages = messages.unwrap_or_else(|| self.request.messages.clone());
            let mut sampling = self.request.sampling.clone();
            sampling.score_prompt |= scores_prompt;
            if let Some(p) = prefill {
                // The answer so far, as the assistant's unfinished turn;
                // what was produced counts against the answer's bound.
                messages.push(ChatMessage::assistant(p.text));
                let sent = u32::try_from(p.pieces).unwrap_or(u32::MAX);
                sampling.max_tokens = sampling.max_tokens.saturating_sub(sent).max(1);
            }
            let mut job = LaneJob::new(messages, sampling, self.deadline);
            if lane == Lane::Cloud {
                job.model = self.route.cloud_model.clone();
            }
            if let Some(tx) = prompt_watch {
                // The prompt's score, for a two-stage cascade's first
                // stage.
                job = job.with_prompt_score_sink(move |score| {
                    let _ = tx.send(WorkerMsg::PromptScore { lane, score });
                });
            }
            match watch {
                // Each sampled token's log-probability, for the cascade's
                // early escalation.
                Some(tx) => job.with_logprob_sink(move |logprob| {
                    let _ = tx.send(WorkerMsg::Logprob { lane, logprob });
                }),
                None => job,
            }
        };
        let ctx = worker::Spawn {
            shared: &self.shared,
            registry: &self.registry,
            handle: &self.handle,
        };
        let (answer, id) = worker::admit(lane, &slot, make_job, &self.cancel[lane], ctx);
        if id.is_some() {
            self.worker_ids[lane] = id;
        }
        answer
    }

    /// Calls the route's callback for `call`.
    fn call(&mut self, id: u64, call: Call) {
        let req = self.request.clone();
        let route = self.route.clone();
        match call {
            Call::PreScore => {
                let cb = route_callback(&route.pre_score);
                self.run_callback(id, cb.inline, move || {
                    CbOutput::PreScore(cb.f.cloud_needed(&req))
                });
            }
            Call::Compress => {
                let cb = route_callback(&route.compressor);
                self.run_callback(id, cb.inline, move || {
                    CbOutput::Compress(cb.f.compress(&req.messages))
                });
            }
            Call::Score { lane, candidate } => {
                let cb = route_callback(&route.scorer);
                let ctx = ScoreContext { lane, request: req };
                self.run_callback(id, cb.inline, move || {
                    CbOutput::Score(cb.f.score(&candidate, &ctx))
                });
            }
            Call::Arbitrate(cands) => {
                let cb = route_callback(&route.arbiter);
                self.run_callback(id, cb.inline, move || {
                    CbOutput::Arbitrate(cb.f.pick(&cands))
                });
            }
        }
    }

    /// Inline (built-ins) answers at once; else on a blocking thread.
    fn run_callback<F>(&mut self, id: u64, inline: bool, f: F)
    where
        F: FnOnce() -> CbOutput + Send + 'static,
    {
        if inline {
            let started = Instant::now();
            let value = catch_unwind(AssertUnwindSafe(f)).map_err(|p| message(&*p));
            let result = Ok(CallResult {
                value,
                elapsed: started.elapsed(),
            });
            self.step(Input::Called { id, result });
            return;
        }
        let jh = offload(&self.handle, f);
        self.callbacks.push(async move { (id, jh.await) }.boxed());
    }

    /// Settles the run, exactly once (this consumes the shell).
    fn settle(mut self) -> Outcome {
        let shared = self.shared.clone();
        let st_guard = {
            let mut st = shared.lock();
            st.settled_at = Some(Instant::now());
            st.late_spend = self
                .ledger
                .as_ref()
                .and_then(|l| l.late_spend(&self.route.name));
            st
        };
        let now = st_guard.settled_at.expect("just set");
        let aborted = st_guard.abort_requested;
        // Results that arrived before the run closed belong to it.
        while let Ok(msg) = self.rx.try_recv() {
            self.step(msg.into());
        }
        let Shell {
            core,
            registry,
            events,
            stream,
            worker_ids,
            ledger,
            route,
            ..
        } = self;
        let (mut outcome, effects) = core.settle(now, aborted);
        for report in &outcome.lanes {
            if report.status == LaneStatus::Late {
                if let Some(id) = worker_ids[report.lane] {
                    registry.mark_late(id);
                }
            }
        }
        for effect in effects {
            match effect {
                Effect::Forward(piece) => {
                    if let Some(tx) = &stream {
                        let _ = tx.send(piece);
                    }
                }
                Effect::Emit(event) => events.emit(|| event),
                _ => {}
            }
        }
        registry.run_settled();
        drop(st_guard);
        if let Some(ledger) = ledger {
            ledger.settle(&route.name, &mut outcome);
        }
        // Closing the stream tells the caller every piece was delivered.
        drop(stream);
        tracing::debug!(
            run_id = outcome.run_id,
            status = outcome.status.as_str(),
            winner = outcome.winner.map(Lane::as_str),
            elapsed_ms = outcome.elapsed_ms,
            overshoot_ms = outcome.overshoot_ms,
            "run settled"
        );
        outcome
    }
}

/// Waits on an armed timer; pending forever when there is none.
async fn wait_armed(timer: &mut Armed) {
    match timer {
        Some((_, t)) => t.as_mut().await,
        None => std::future::pending().await,
    }
}

/// The route's callback the core asked for: the core only calls the ones
/// the route configures.
fn route_callback<T: ?Sized>(cb: &Option<Cb<T>>) -> Cb<T> {
    cb.clone().expect("the core calls configured callbacks")
}
