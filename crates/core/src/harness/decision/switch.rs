//! Continuing an answer on the other lane when its lane fails part-way
//! (DESIGN point 18): the lane whose text a streaming caller is receiving
//! fails (a cut stream, a stall, an error event, a local error) and the
//! plan has the other lane: instead of ending the run with an error, the
//! other lane is started on the same request with the text already
//! produced as the start of its answer (a [`Prefill`]: the assistant's
//! turn, not closed), and the caller's stream goes on with its text. A
//! whole (not streamed) answer whose lane failed part-way is continued the
//! same way when the plan starts the other lane after the failure:
//! decoding the text again as a prompt costs a fraction of generating it.
//!
//! What is continued is what the failed lane produced, which for a
//! streaming caller is exactly what was sent. The continuing lane returns
//! only its new text; its candidate is given the whole answer here, so
//! everything downstream (the winner's flush, the outcome, scorers) sees
//! one answer. At most one switch per run; never for an answer of a
//! constrained shape (a schema, a tool call: a grammar starts at the
//! answer's first character) nor in a single-lane diagnostic.
//!
//! It must not start or cancel lanes other than through `admit`, nor
//! decide the winner.

use super::lanes::LaneRun;
use super::{Core, Effect};
use crate::harness::backend::{Candidate, LaneErrorKind};
use crate::harness::outcome::LaneSwitch;
use crate::lane::Lane;
use crate::millis::to_ms;
use crate::reasoning::{Piece, THINK_CLOSE, THINK_OPEN};
use std::time::Instant;

/// The start of an answer a lane is asked to continue.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prefill {
    /// The assistant turn's text so far, as the lane receives it (a
    /// thinking block written out with its tags, then the answer).
    pub(crate) text: String,
    /// Pieces (tokens, deltas) already produced: taken off the request's
    /// `max_tokens` so the whole answer keeps its bound.
    pub(crate) pieces: u64,
}

/// The run's switch, once a failed lane's answer is handed on.
pub(super) struct Switch {
    pub(super) from: Lane,
    pub(super) to: Lane,
    /// How and why the first lane failed.
    kind: LaneErrorKind,
    why: String,
    answer: String,
    reasoning: String,
    pieces: u64,
    /// When the failure was seen.
    detected: Instant,
    /// When the continuing lane produced its first text.
    first_token: Option<Instant>,
    state: State,
}

/// Where a switch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Decided; the continuing lane is still to be asked to start.
    Due,
    /// The continuing lane's worker from before the switch (cancelled
    /// when the stream committed) has not returned yet: the lane is
    /// started again when it does.
    Waiting,
    /// The continuing lane was asked to start on the text.
    Started,
    /// It was not admitted: no switch (and none is tried again).
    NotAdmitted,
}

/// The assistant turn's text that continues `reasoning` then `answer`: a
/// thinking block with its tags (left open while the answer has not
/// begun), then the answer.
pub(crate) fn prefill_text(reasoning: &str, answer: &str) -> String {
    if reasoning.is_empty() {
        return answer.to_string();
    }
    if answer.is_empty() {
        return format!("{THINK_OPEN}\n{reasoning}");
    }
    format!("{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n{answer}")
}

impl Core {
    /// Whether `failed`'s answer may be continued on the other lane now.
    fn may_continue(&self, failed: Lane, now: Instant) -> bool {
        let other = failed.other();
        let r = &self.lanes[failed];
        self.switch.is_none()
            && !self.run.diagnostic
            && self.run.answer_rules.is_none()
            && self.plan.secondary.is_some()
            && self.run.lanes[other].is_some()
            && now < self.run.deadline
            && r.error().is_some()
            && !r.partial.is_empty()
    }

    fn begin_switch(&mut self, failed: Lane, now: Instant) {
        let r = &self.lanes[failed];
        self.switch = Some(Switch {
            from: failed,
            to: failed.other(),
            kind: r.error().map_or(LaneErrorKind::Other, |e| e.kind()),
            why: r
                .error()
                .map(|e| format!("({}) {}", e.kind(), crate::error_chain(e)))
                .unwrap_or_default(),
            answer: r.partial.answer.clone(),
            reasoning: r.partial.reasoning.clone(),
            pieces: r.partial.pieces,
            detected: now,
            first_token: None,
            state: State::Due,
        });
    }

    /// The committed lane of a streaming run returned: when it failed
    /// part-way and the other lane may continue, the stream is handed to
    /// the other lane (started now, or once its cancelled worker returns)
    /// and the run goes on.
    pub(super) fn switch_committed(&mut self, failed: Lane, now: Instant, fx: &mut Vec<Effect>) {
        if !self.may_continue(failed, now) {
            return;
        }
        self.begin_switch(failed, now);
        let to = failed.other();
        self.stream.committed = Some(to);
        if self.lanes[to].is_running() {
            if let Some(s) = self.switch.as_mut() {
                s.state = State::Waiting;
            }
        } else {
            self.restart_for_switch(to, now, fx);
        }
    }

    /// Whether `lane`'s returning worker is the one a switch waits for.
    pub(super) fn switch_waits_for(&self, lane: Lane) -> bool {
        self.switch
            .as_ref()
            .is_some_and(|s| s.state == State::Waiting && s.to == lane)
    }

    /// Starts `lane` afresh to continue the failed lane's answer.
    pub(super) fn restart_for_switch(&mut self, lane: Lane, now: Instant, fx: &mut Vec<Effect>) {
        let from = lane.other();
        let mut fresh = LaneRun::new();
        fresh.note = Some(format!("continued the answer after {from} failed"));
        self.lanes[lane] = fresh;
        if let Some(s) = self.switch.as_mut() {
            s.state = State::Due;
        }
        self.request_start(lane, now, fx);
    }

    /// What a start of `lane` continues: the switch's text when it is
    /// the switch's lane, or, when the other lane failed part-way and may
    /// be continued, that lane's text (the switch begins here). A
    /// streaming caller that has received nothing yet (the run was not
    /// committed) gets the whole answer from the continuing lane's
    /// buffer: the failed lane's text is put there first.
    pub(super) fn prefill_for(&mut self, lane: Lane, now: Instant) -> Option<Prefill> {
        if self.switch.is_none() && self.may_continue(lane.other(), now) {
            self.begin_switch(lane.other(), now);
        }
        let s = self
            .switch
            .as_mut()
            .filter(|s| s.to == lane && s.state == State::Due)?;
        s.state = State::Started;
        let prefill = Prefill {
            text: prefill_text(&s.reasoning, &s.answer),
            pieces: s.pieces,
        };
        if self.run.streaming && self.stream.committed != Some(lane) {
            let seed = [
                Piece::Reasoning(s.reasoning.clone()),
                Piece::Answer(s.answer.clone()),
            ];
            self.lanes[lane].buffer.splice(0..0, seed);
        }
        Some(prefill)
    }

    /// The continuing lane was not admitted: there is no switch, and a
    /// streaming run is committed to the failed lane again (its failure
    /// ends the run, as without a switch).
    pub(super) fn switch_not_admitted(&mut self, lane: Lane) {
        let Some(s) = self.switch.as_mut().filter(|s| s.to == lane) else {
            return;
        };
        if s.state != State::Started {
            return;
        }
        s.state = State::NotAdmitted;
        let from = s.from;
        if self.stream.committed == Some(lane) {
            self.stream.committed = Some(from);
        }
        if let Some(note) = self.lanes[lane].note.as_mut() {
            note.push_str(&format!(
                "; so it could not continue the answer {from} left"
            ));
        }
    }

    /// Notes the continuing lane's first text.
    pub(super) fn switch_saw_text(&mut self, lane: Lane, now: Instant) {
        if let Some(s) = self.switch.as_mut() {
            if s.to == lane && s.state == State::Started {
                s.first_token.get_or_insert(now);
            }
        }
    }

    /// The continuing lane's text, made the whole answer: what the failed
    /// lane produced, then what this one added.
    pub(super) fn whole_answer(&self, lane: Lane, c: &mut Candidate) {
        let Some(s) = self.switch.as_ref() else {
            return;
        };
        if s.to != lane || s.state != State::Started {
            return;
        }
        c.text.insert_str(0, &s.answer);
        if !s.reasoning.is_empty() {
            let added = c.reasoning.take().unwrap_or_default();
            c.reasoning = Some(format!("{}{added}", s.reasoning));
        }
    }

    /// The switch as the outcome reports it (only one that started).
    pub(super) fn switch_report(&self) -> Option<LaneSwitch> {
        let s = self.switch.as_ref().filter(|s| s.state == State::Started)?;
        Some(LaneSwitch {
            from: s.from,
            to: s.to,
            error_kind: s.kind,
            reason: s.why.clone(),
            sent_chars: s.answer.chars().count() as u64,
            sent_reasoning_chars: s.reasoning.chars().count() as u64,
            sent_pieces: s.pieces,
            at_ms: self.at_ms(s.detected),
            first_token_after_ms: s
                .first_token
                .map(|t| to_ms(t.saturating_duration_since(s.detected))),
        })
    }

    /// Whether `lane` continues another lane's answer (the decision's
    /// reason says so).
    pub(super) fn continues(&self, lane: Lane) -> bool {
        self.switch
            .as_ref()
            .is_some_and(|s| s.to == lane && s.state == State::Started)
    }
}
