//! The run's decision core: every rule of a run, as a state machine that
//! is advanced by [`Core::step`], a function of one [`Input`] and the
//! instant it happened, and that answers with [`Effect`]s for the shell
//! (`run`) to carry out. It owns the lane states, the plan, the streaming
//! commit, the callback bookkeeping, the decision and the
//! [`Outcome`](super::Outcome).
//!
//! It must not do anything itself: no tokio, no threads, no channels, no
//! clock (every instant comes in with an input), no backend, no user
//! callback. That is what lets its unit tests (`tests/`) drive every
//! policy and every decision with plain instants and no runtime.
//!
//! One module per stage of a run:
//! - `plan`: what starts at once, the cloud's prompt preparation
//!   (pre-score, then compression), the hedge and share timers, escalation
//!   to the secondary lane;
//! - `early`: a cascade's escalation while the primary still generates,
//!   from its streamed confidence;
//! - `prompt`: a two-stage cascade's escalation before the primary
//!   generates, from its score of the prompt;
//! - `admit`: asking to start a lane, the shell's admission answer,
//!   cancelling;
//! - `stream`: tokens, the streaming commit, what reaches the caller;
//! - `calls`: callback calls and their reports;
//! - `decide`: acceptable and usable candidates, the rules that end a run,
//!   and what each end means at settlement;
//! - `report`: the [`Outcome`] and its lane reports.
//!
//! The shell's side of the protocol: it applies effects in order and
//! answers a [`Effect::Start`] (admission) and an inline
//! [`Effect::Call`] with their input at once, before the next effect;
//! other inputs come from its select loop. It settles on
//! [`Effect::Settle`] by calling [`Core::settle`].

mod admit;
mod calls;
mod decide;
mod early;
mod lanes;
mod plan;
mod prompt;
mod report;
mod stream;
mod switch;
#[cfg(test)]
mod tests;

pub(crate) use calls::{Call, CbOutput};
pub(crate) use switch::Prefill;

use super::backend::{BackendError, Candidate};
use super::callbacks::{CallResult, Scored};
use super::observer::Event;
use super::policy::{CommitMode, Plan, Policy};
use super::scoring::Signal;
use crate::lane::{Lane, PerLane, PromptScore};
use crate::millis::to_ms;
use crate::reasoning::Piece;
use crate::request::{ChatMessage, Sampling};
use decide::End;
use lanes::LaneRun;
use std::time::{Duration, Instant};

/// What the core knows of a configured lane.
#[derive(Debug, Clone)]
pub(crate) struct LaneInfo {
    /// The backend's name, for the lane report.
    pub(crate) backend: String,
    /// Whether its worker returns early when cancelled.
    pub(crate) observes_cancellation: bool,
    /// Its recent p95 latency (the adaptive hedge delay), once known.
    pub(crate) p95: Option<Duration>,
}

/// Which callbacks the run's route has.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Configured {
    pub(crate) pre_score: bool,
    pub(crate) compressor: bool,
    pub(crate) scorer: bool,
    pub(crate) arbiter: bool,
}

/// Everything the core needs to know about a run before it starts.
#[derive(Debug, Clone)]
pub(crate) struct CoreSetup {
    pub(crate) run_id: u64,
    pub(crate) request_id: Option<String>,
    pub(crate) route: String,
    pub(crate) policy: Policy,
    pub(crate) commit: CommitMode,
    /// Whether the caller reads a stream of the committed lane's text.
    pub(crate) streaming: bool,
    /// A single-lane diagnostic: any returned completion is the answer,
    /// blank or cut short (a diagnostic reports what happened).
    pub(crate) diagnostic: bool,
    pub(crate) start: Instant,
    pub(crate) deadline: Instant,
    /// `None`: the lane is not configured.
    pub(crate) lanes: PerLane<Option<LaneInfo>>,
    pub(crate) callbacks: Configured,
    pub(crate) min_score: Option<f64>,
    /// What an answer must be (JSON, a schema, a tool call): the request's
    /// sampling when it constrains the answer ([`Sampling::check_answer`]),
    /// else `None`. A candidate that fails it is neither acceptable nor
    /// usable (validity is part of acceptance).
    pub(crate) answer_rules: Option<Sampling>,
    pub(crate) callback_budget: Duration,
    pub(crate) cancel_grace: Duration,
    /// A cascade that escalates early reads this signal from the
    /// primary's streamed log-probabilities (its threshold is in this
    /// signal's units); `None`: decisions wait for the whole answer.
    pub(crate) early: Option<Signal>,
    /// A two-stage cascade's prompt signal and threshold: the local
    /// primary reports the prompt's score and the run escalates before
    /// generation below it.
    pub(crate) prompt_threshold: Option<(Signal, f64)>,
}

/// What happened, as the shell tells the core.
pub(crate) enum Input {
    /// The run begins (the first input, once).
    Begin,
    /// The shell's answer to [`Effect::Start`].
    Admission { lane: Lane, answer: Admission },
    /// A lane's worker produced a piece of text.
    Token { lane: Lane, piece: Piece },
    /// A lane's worker sampled a token of this log-probability (only
    /// lanes the core watches: [`Core::watches_logprobs`]).
    Logprob { lane: Lane, logprob: f32 },
    /// A lane's worker scored the prompt (only a lane the core asked:
    /// [`Core::watches_prompt`]).
    PromptScore { lane: Lane, score: PromptScore },
    /// A lane's worker returned.
    /// Boxed: tokens are the frequent input and stay small.
    Finished(Box<Finished>),
    /// A callback returned (`Err`: its task failed; the message says how).
    Called {
        id: u64,
        result: Result<CallResult<CbOutput>, String>,
    },
    /// The hedge delay is over ([`Core::timer`]).
    HedgeDue,
    /// The primary's share of the deadline is used up ([`Core::timer`]).
    ShareDue,
    /// The run's deadline came.
    Deadline,
    /// The caller asked to abort.
    Abort,
    /// The cancel grace ([`Effect::AwaitCancelled`]) is over.
    GraceOver,
}

/// A lane's worker returned.
pub(crate) struct Finished {
    pub(crate) lane: Lane,
    pub(crate) result: Result<Candidate, BackendError>,
    /// When it returned.
    pub(crate) at: Instant,
    /// Whether its cancel token was set when it returned.
    pub(crate) saw_cancel: bool,
}

/// How admission of a lane went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Admission {
    /// The worker was spawned at this instant.
    Started { at: Instant },
    /// Another worker holds the lane.
    Busy,
    /// The backend says it is down.
    Down { retry_in: Duration, reason: String },
    /// The harness keeps the lane out of this run (the route's cloud
    /// budget is spent) until `retry_in` has passed; `note` says why.
    Refused { retry_in: Duration, note: String },
}

/// What the shell must do.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Admit the lane and, when admitted, spawn its worker on these
    /// messages (`None`: the request's own), continuing `prefill` when
    /// set; answer with [`Input::Admission`] at once.
    Start {
        lane: Lane,
        messages: Option<Vec<ChatMessage>>,
        prefill: Option<Prefill>,
    },
    /// Set the lane's cancel token.
    Cancel(Lane),
    /// Call a callback (inline ones answer with [`Input::Called`] at once).
    Call { id: u64, call: Call },
    /// Hand this text to the caller's stream.
    Forward(Piece),
    /// Send this event to the observers.
    Emit(Event),
    /// The run is decided; cancelled cooperative workers may still return
    /// until `until`: keep feeding their messages in, then
    /// [`Input::GraceOver`].
    AwaitCancelled { until: Instant },
    /// Settle now ([`Core::settle`]).
    Settle,
}

/// Which timer [`Core::timer`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerKind {
    Hedge,
    Share,
}

/// Where the run is.
enum Stage {
    /// Deciding.
    Open,
    /// Decided; waiting (at most the cancel grace) for cancelled workers.
    Closing(End),
    /// Decided; waiting for the shell to settle.
    Closed(End),
}

/// One run's decisions (see the module docs).
pub(crate) struct Core {
    run: CoreSetup,
    plan: Plan,
    lanes: PerLane<LaneRun>,
    prep: plan::Prep,
    timers: plan::Timers,
    stream: stream::Stream,
    calls: calls::Calls,
    deciding: decide::Pending,
    early: early::Early,
    prompt: prompt::Stage,
    switch: Option<switch::Switch>,
    stage: Stage,
}

impl Core {
    pub(crate) fn new(run: CoreSetup) -> Self {
        let span = run.deadline.saturating_duration_since(run.start);
        let plan = Plan::new(&run.policy, |primary| {
            run.lanes[primary]
                .as_ref()
                .and_then(|l| l.p95)
                .unwrap_or(span / 2)
        });
        Self {
            plan,
            lanes: PerLane::from_fn(|_| LaneRun::new()),
            prep: plan::Prep::default(),
            timers: plan::Timers::default(),
            stream: stream::Stream::default(),
            calls: calls::Calls::default(),
            deciding: decide::Pending::default(),
            early: early::Early::new(match run.policy {
                Policy::Cascade { .. } => run.early,
                _ => None,
            }),
            prompt: prompt::Stage::new(match run.policy {
                Policy::Cascade { .. } => run.prompt_threshold,
                _ => None,
            }),
            switch: None,
            stage: Stage::Open,
            run,
        }
    }

    /// Advances the run by one input that happened at `now`.
    pub(crate) fn step(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        let mut fx = Vec::new();
        let open = matches!(self.stage, Stage::Open);
        match input {
            Input::Begin => self.begin(now, &mut fx),
            Input::Admission { lane, answer } => self.on_admission(lane, answer, now, &mut fx),
            Input::Token { lane, piece } => self.on_token(lane, piece, now, &mut fx),
            Input::Logprob { lane, logprob } if open => {
                self.on_logprob(lane, logprob, now, &mut fx)
            }
            Input::PromptScore { lane, score } if open => {
                self.on_prompt_score(lane, score, now, &mut fx)
            }
            // Once decided, a finished lane is recorded but never scored.
            Input::Finished(f) => self.on_finished(*f, open, now, &mut fx),
            // Once decided, callbacks are no longer awaited: still pending
            // at settlement, they are reported `timed_out`.
            Input::Called { id, result } if open => self.on_called(id, result, now, &mut fx),
            Input::HedgeDue if open => self.on_hedge_due(now, &mut fx),
            Input::ShareDue if open => self.on_share_due(now, &mut fx),
            Input::Deadline if open => {
                self.close(End::Deadline, now, &mut fx);
                return fx;
            }
            Input::Abort if open => {
                self.close(End::Abort, now, &mut fx);
                return fx;
            }
            Input::GraceOver => {
                if matches!(self.stage, Stage::Closing(_)) {
                    self.seal(&mut fx);
                }
                return fx;
            }
            Input::Called { .. }
            | Input::Logprob { .. }
            | Input::PromptScore { .. }
            | Input::HedgeDue
            | Input::ShareDue
            | Input::Deadline
            | Input::Abort => {}
        }
        match &self.stage {
            Stage::Open => {
                if let Some(end) = self.evaluate(now, &mut fx) {
                    self.close(end, now, &mut fx);
                }
            }
            Stage::Closing(_) if !self.awaiting_cancelled() => self.seal(&mut fx),
            Stage::Closing(_) | Stage::Closed(_) => {}
        }
        fx
    }

    /// When a timer of the plan is due, if it is armed.
    pub(crate) fn timer(&self, kind: TimerKind) -> Option<Instant> {
        match kind {
            TimerKind::Hedge => self.timers.hedge_at,
            TimerKind::Share => self.timers.share_at,
        }
    }

    /// Ends the run's deciding: cancels what still runs and either waits
    /// the cancel grace (never past the deadline, never when the deadline
    /// ended the run) for cooperative workers or settles at once.
    fn close(&mut self, end: End, now: Instant, fx: &mut Vec<Effect>) {
        if matches!(end, End::Deadline) {
            let at_ms = self.at_ms(now);
            fx.push(Effect::Emit(Event::DeadlineReached {
                run_id: self.run.run_id,
                at_ms,
            }));
        }
        let note = match &end {
            End::Deadline => "deadline reached before it was needed",
            End::Abort => "run aborted",
            _ => "run decided without it",
        };
        if matches!(end, End::Abort) {
            for r in self.lanes.values_mut() {
                if r.has_returned() {
                    r.cancel_requested = true;
                }
            }
        }
        for lane in Lane::ALL {
            self.cancel_lane(lane, note, fx);
        }
        if !matches!(end, End::Deadline) && self.awaiting_cancelled() {
            let until = self.run.deadline.min(now + self.run.cancel_grace);
            fx.push(Effect::AwaitCancelled { until });
            self.stage = Stage::Closing(end);
        } else {
            fx.push(Effect::Settle);
            self.stage = Stage::Closed(end);
        }
    }

    /// Closing is over: settle.
    fn seal(&mut self, fx: &mut Vec<Effect>) {
        if let Stage::Closing(end) = std::mem::replace(&mut self.stage, Stage::Open) {
            self.stage = Stage::Closed(end);
            fx.push(Effect::Settle);
        }
    }

    /// Whether a cancelled worker that observes cancellation still runs.
    fn awaiting_cancelled(&self) -> bool {
        self.lanes.iter().any(|(lane, r)| {
            r.is_running()
                && r.cancel_requested
                && self.run.lanes[lane]
                    .as_ref()
                    .is_some_and(|l| l.observes_cancellation)
        })
    }

    /// Milliseconds from the run's start to `t`.
    fn at_ms(&self, t: Instant) -> f64 {
        to_ms(t.saturating_duration_since(self.run.start))
    }

    /// Finished candidates of `lanes`, as callbacks see them.
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
                        .map(|f| f.saturating_duration_since(self.run.start))
                        .unwrap_or_default(),
                })
            })
            .collect()
    }
}
