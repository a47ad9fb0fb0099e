//! Unit tests of the decision core with plain instants and no runtime:
//! `Sim` plays the shell's side of the protocol (answers admissions at
//! once, holds callback calls until a test answers them) and records every
//! effect. `policies` has one test (or more) per policy, `reasons` one per
//! decision reason, `stages` the rules of admission, preparation,
//! streaming and settlement.

mod early;
mod policies;
mod prompt;
mod reasons;
mod stages;
mod switch;
mod validity;

use super::decide::{Pool, Reason};
use super::*;
use crate::harness::backend::LaneErrorKind;
use crate::harness::callbacks::{CallbackKind, CloudNeed, Score};
use crate::harness::outcome::{DecidedBy, LaneStatus, Outcome, RunStatus};
use crate::lane::FinishReason;
use crate::reasoning::Piece;

/// Milliseconds from the run's start.
type Ms = u64;

pub(super) const DEADLINE_MS: Ms = 10_000;

/// A run with both lanes configured and no callbacks.
pub(super) fn setup(policy: Policy) -> CoreSetup {
    let start = Instant::now();
    let info = |name: &str| LaneInfo {
        backend: name.into(),
        observes_cancellation: true,
        p95: None,
    };
    CoreSetup {
        run_id: 7,
        request_id: None,
        route: "default".into(),
        policy,
        commit: CommitMode::FirstToken,
        streaming: false,
        diagnostic: false,
        start,
        deadline: start + Duration::from_millis(DEADLINE_MS),
        lanes: PerLane::new(Some(info("local")), Some(info("cloud"))),
        callbacks: Configured::default(),
        min_score: None,
        answer_rules: None,
        callback_budget: Duration::from_millis(10),
        cancel_grace: Duration::from_millis(5),
        early: None,
        prompt_threshold: None,
    }
}

/// [`setup`] for a caller that reads a stream.
pub(super) fn streaming(policy: Policy) -> CoreSetup {
    let mut s = setup(policy);
    s.streaming = true;
    s
}

/// The shell, played by the test.
pub(super) struct Sim {
    pub(super) core: Core,
    pub(super) start: Instant,
    /// What the next admission of each lane answers (default: admitted).
    pub(super) admission: PerLane<Option<Admission>>,
    /// Lanes admitted, in order.
    pub(super) started: Vec<Lane>,
    /// Messages each admitted lane was started on (`None`: the request's).
    pub(super) messages: PerLane<Option<Option<Vec<ChatMessage>>>>,
    /// The text each lane's last start was asked to continue.
    pub(super) prefills: PerLane<Option<super::Prefill>>,
    pub(super) cancelled: Vec<Lane>,
    /// Callback calls not answered yet.
    pub(super) calls: Vec<(u64, Call)>,
    pub(super) forwarded: Vec<String>,
    pub(super) events: Vec<Event>,
    pub(super) grace_until: Option<Instant>,
    pub(super) settle_now: bool,
}

impl Sim {
    /// Begins a run at its start instant.
    pub(super) fn begin(setup: CoreSetup) -> Sim {
        Sim::begin_with(setup, PerLane::new(None, None))
    }

    /// Begins a run whose first admissions answer as given.
    pub(super) fn begin_with(setup: CoreSetup, admission: PerLane<Option<Admission>>) -> Sim {
        let start = setup.start;
        let mut sim = Sim {
            core: Core::new(setup),
            start,
            admission,
            started: Vec::new(),
            messages: PerLane::new(None, None),
            prefills: PerLane::new(None, None),
            cancelled: Vec::new(),
            calls: Vec::new(),
            forwarded: Vec::new(),
            events: Vec::new(),
            grace_until: None,
            settle_now: false,
        };
        sim.feed(Input::Begin, 0);
        sim
    }

    pub(super) fn at(&self, ms: Ms) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    pub(super) fn feed(&mut self, input: Input, ms: Ms) {
        let now = self.at(ms);
        for effect in self.core.step(input, now) {
            self.apply(effect, ms);
        }
    }

    fn apply(&mut self, effect: Effect, ms: Ms) {
        match effect {
            Effect::Start {
                lane,
                messages,
                prefill,
            } => {
                let answer = self.admission[lane]
                    .take()
                    .unwrap_or(Admission::Started { at: self.at(ms) });
                if matches!(answer, Admission::Started { .. }) {
                    self.started.push(lane);
                    self.messages[lane] = Some(messages);
                    self.prefills[lane] = prefill;
                }
                self.feed(Input::Admission { lane, answer }, ms);
            }
            Effect::Cancel(lane) => self.cancelled.push(lane),
            Effect::Call { id, call } => self.calls.push((id, call)),
            // Thinking is marked, so a test sees which kind went out.
            Effect::Forward(piece) => self.forwarded.push(match piece {
                Piece::Answer(t) => t,
                Piece::Reasoning(t) => format!("<r>{t}"),
            }),
            Effect::Emit(event) => self.events.push(event),
            Effect::AwaitCancelled { until } => self.grace_until = Some(until),
            Effect::Settle => self.settle_now = true,
        }
    }

    /// A lane's worker returns `text` with `reason`.
    pub(super) fn finish(&mut self, lane: Lane, text: &str, reason: FinishReason, ms: Ms) {
        self.returned(lane, Ok(Candidate::new(text, reason)), ms);
    }

    /// A lane's worker returns a whole answer.
    pub(super) fn answer(&mut self, lane: Lane, text: &str, ms: Ms) {
        self.finish(lane, text, FinishReason::Stop, ms);
    }

    /// A lane's worker fails.
    pub(super) fn fail(&mut self, lane: Lane, ms: Ms) {
        let e = BackendError::new(LaneErrorKind::Transport, "connection reset");
        self.returned(lane, Err(e), ms);
    }

    pub(super) fn returned(&mut self, lane: Lane, result: Result<Candidate, BackendError>, ms: Ms) {
        let f = Finished {
            lane,
            result,
            at: self.at(ms),
            saw_cancel: self.cancelled.contains(&lane),
        };
        self.feed(Input::Finished(Box::new(f)), ms);
    }

    pub(super) fn token(&mut self, lane: Lane, piece: &str, ms: Ms) {
        let piece = Piece::Answer(piece.to_string());
        self.feed(Input::Token { lane, piece }, ms);
    }

    /// A piece of a lane's thinking.
    pub(super) fn thinking(&mut self, lane: Lane, piece: &str, ms: Ms) {
        let piece = Piece::Reasoning(piece.to_string());
        self.feed(Input::Token { lane, piece }, ms);
    }

    /// Answers the oldest pending call of `kind`.
    pub(super) fn reply(&mut self, kind: CallbackKind, out: Result<CbOutput, &str>, ms: Ms) {
        let i = self
            .calls
            .iter()
            .position(|(_, c)| c.kind() == kind)
            .unwrap_or_else(|| panic!("no pending {kind:?} call in {:?}", self.calls));
        let (id, _) = self.calls.remove(i);
        let result = Ok(CallResult {
            value: out.map_err(str::to_string),
            elapsed: Duration::from_millis(1),
        });
        self.feed(Input::Called { id, result }, ms);
    }

    /// Scores the lane's pending score call.
    pub(super) fn score(&mut self, lane: Lane, value: f64, ms: Ms) {
        let i = self
            .calls
            .iter()
            .position(|(_, c)| matches!(c, Call::Score { lane: l, .. } if *l == lane))
            .unwrap_or_else(|| panic!("no pending score call for {lane}"));
        let (id, _) = self.calls.remove(i);
        let result = Ok(CallResult {
            value: Ok(CbOutput::Score(Score::new(value))),
            elapsed: Duration::from_millis(1),
        });
        self.feed(Input::Called { id, result }, ms);
    }

    pub(super) fn pending(&self, kind: CallbackKind) -> bool {
        self.calls.iter().any(|(_, c)| c.kind() == kind)
    }

    /// Settles the run (as the shell does once told to, or at `ms` anyway).
    pub(super) fn settle(self, ms: Ms) -> Outcome {
        self.settle_aborted(ms, false)
    }

    pub(super) fn settle_aborted(self, ms: Ms, aborted: bool) -> Outcome {
        let now = self.at(ms);
        self.core.settle(now, aborted).0
    }

    pub(super) fn note(&self, lane: Lane) -> Option<&str> {
        self.core.lanes[lane].note.as_deref()
    }

    pub(super) fn phase(&self, lane: Lane) -> lanes::Phase {
        self.core.lanes[lane].phase
    }

    pub(super) fn event_names(&self) -> Vec<&'static str> {
        self.events.iter().map(Event::name).collect()
    }
}

/// Asserts the outcome's decision.
pub(super) fn assert_decision(
    out: &Outcome,
    status: RunStatus,
    winner: Option<Lane>,
    reason: Reason,
    by: DecidedBy,
) {
    assert_eq!(out.status, status, "{out:#?}");
    assert_eq!(out.winner, winner, "{out:#?}");
    assert_eq!(out.decision.reason, reason.to_string());
    assert_eq!(out.decision.decided_by, by);
}
