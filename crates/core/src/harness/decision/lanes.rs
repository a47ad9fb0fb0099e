//! One lane's state in one run, as the core records it: its phase, its
//! times, its result and score, its buffered text. Plain data with small
//! queries; the rules that move a lane between phases live in the stage
//! modules (`admit`, `stream`, `decide`), not here.

use crate::harness::backend::{BackendError, Candidate};
use crate::harness::callbacks::Score;
use crate::harness::outcome::LaneStatus;
use crate::reasoning::Piece;
use std::time::{Duration, Instant};

/// Where a lane is in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Not started yet; may still start.
    Idle,
    /// Asked to start; the shell's admission answer is due at once.
    Starting,
    /// Will not run in this run (busy, skipped, not configured...).
    Absent(LaneStatus),
    /// Its worker is running.
    Running,
    /// It returned; its candidate is being scored.
    Scoring,
    /// It returned and (where needed) was scored.
    Done,
}

pub(super) struct LaneRun {
    pub(super) phase: Phase,
    pub(super) note: Option<String>,
    pub(super) started: Option<Instant>,
    pub(super) first_token: Option<Instant>,
    pub(super) finished: Option<Instant>,
    /// 1 for the first lane to return, 2 for the second.
    pub(super) finish_order: u32,
    pub(super) cancel_requested: bool,
    pub(super) saw_cancel: bool,
    pub(super) result: Option<Result<Candidate, BackendError>>,
    pub(super) score: Option<Score>,
    /// Text streamed before the run committed to a lane.
    pub(super) buffer: Vec<Piece>,
    /// Everything its worker has streamed so far (what another lane
    /// continues if this one fails: `switch`).
    pub(super) partial: Partial,
    /// Asked to start while the cloud's prompt was still being prepared.
    pub(super) want_start: bool,
    /// The compressor's estimates (before, after).
    pub(super) compressed: (Option<u64>, Option<u64>),
    /// Left out because its backend is down: until it tries again.
    pub(super) retry_in: Option<Duration>,
    /// Why its whole answer was rejected as invalid (not JSON, off its
    /// schema, a bad tool call), when it was.
    pub(super) invalid: Option<String>,
}

impl LaneRun {
    pub(super) fn new() -> Self {
        Self {
            phase: Phase::Idle,
            note: None,
            started: None,
            first_token: None,
            finished: None,
            finish_order: 0,
            cancel_requested: false,
            saw_cancel: false,
            result: None,
            score: None,
            buffer: Vec::new(),
            partial: Partial::default(),
            want_start: false,
            compressed: (None, None),
            retry_in: None,
            invalid: None,
        }
    }

    /// Its completion, when it returned one.
    pub(super) fn candidate(&self) -> Option<&Candidate> {
        match &self.result {
            Some(Ok(c)) => Some(c),
            _ => None,
        }
    }

    /// Its error, when it failed.
    pub(super) fn error(&self) -> Option<&BackendError> {
        match &self.result {
            Some(Err(e)) => Some(e),
            _ => None,
        }
    }

    /// Leaves the lane out of this run.
    pub(super) fn absent(&mut self, status: LaneStatus, note: impl Into<String>) {
        self.phase = Phase::Absent(status);
        self.note = Some(note.into());
    }

    /// Whether its worker has returned (scored or not).
    pub(super) fn has_returned(&self) -> bool {
        matches!(self.phase, Phase::Done | Phase::Scoring)
    }

    /// Whether its worker is running.
    pub(super) fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// Whether it can still change the run's course.
    pub(super) fn is_open(&self) -> bool {
        matches!(
            self.phase,
            Phase::Idle | Phase::Starting | Phase::Running | Phase::Scoring
        )
    }
}

/// The text a lane's worker has streamed in this run.
#[derive(Debug, Clone, Default)]
pub(super) struct Partial {
    pub(super) answer: String,
    pub(super) reasoning: String,
    /// Pieces of text streamed: tokens for the local lane, deltas for a
    /// streaming provider.
    pub(super) pieces: u64,
}

impl Partial {
    pub(super) fn push(&mut self, piece: &Piece) {
        match piece {
            Piece::Answer(t) => self.answer.push_str(t),
            Piece::Reasoning(t) => self.reasoning.push_str(t),
        }
        if !piece.text().is_empty() {
            self.pieces += 1;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.answer.is_empty() && self.reasoning.is_empty()
    }
}

/// What a worker's result says about its lane.
pub(super) fn status_of(result: &Result<Candidate, BackendError>) -> LaneStatus {
    match result {
        Ok(c) if c.finish_reason.is_complete() => LaneStatus::Completed,
        Ok(_) => LaneStatus::Cancelled,
        Err(_) => LaneStatus::Failed,
    }
}
