//! A lane's worker from start to return, as the core sees it: asking the
//! shell to start a lane (never once the deadline is reached, and the
//! cloud only once its prompt is ready), the shell's admission answer
//! (admitted, busy, down), a worker's return (and whether its candidate
//! is scored), and cancelling. It must not try the slot or spawn anything
//! (the shell does, on [`Effect::Start`]), nor decide the run.

use super::calls::Call;
use super::lanes::{status_of, Phase};
use super::plan::PrepState;
use super::{Admission, Core, Effect, Finished};
use crate::harness::availability::unavailable_note;
use crate::harness::observer::Event;
use crate::harness::outcome::LaneStatus;
use crate::lane::{FinishReason, Lane};
use std::time::Instant;

impl Core {
    /// Asks the shell to admit `lane`, if it is idle and may start now.
    pub(super) fn request_start(&mut self, lane: Lane, now: Instant, fx: &mut Vec<Effect>) {
        let r = &mut self.lanes[lane];
        if r.phase != Phase::Idle {
            return;
        }
        if lane == Lane::Cloud && self.prep.state != PrepState::Ready {
            r.want_start = true;
            return;
        }
        if now >= self.run.deadline {
            r.absent(LaneStatus::NotStarted, "deadline reached before it started");
            return;
        }
        r.phase = Phase::Starting;
        let messages = match lane {
            Lane::Cloud => self.prep.cloud_messages.clone(),
            Lane::Local => None,
        };
        let prefill = self.prefill_for(lane, now);
        fx.push(Effect::Start {
            lane,
            messages,
            prefill,
        });
    }

    /// The shell's answer to [`Effect::Start`].
    pub(super) fn on_admission(
        &mut self,
        lane: Lane,
        answer: Admission,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        if self.lanes[lane].phase != Phase::Starting {
            return;
        }
        let (run_id, at_ms) = (self.run.run_id, self.at_ms(now));
        let r = &mut self.lanes[lane];
        match answer {
            Admission::Started { at } => {
                r.phase = Phase::Running;
                r.started = Some(at);
                fx.push(Effect::Emit(Event::LaneAdmitted {
                    run_id,
                    lane,
                    at_ms,
                }));
                self.secondary_started(lane, fx);
            }
            Admission::Busy => {
                r.absent(LaneStatus::Busy, "another worker holds the lane");
                fx.push(Effect::Emit(Event::LaneBusy {
                    run_id,
                    lane,
                    at_ms,
                }));
                self.secondary_did_not_start(lane);
            }
            Admission::Down { retry_in, reason } => {
                r.absent(LaneStatus::Unavailable, unavailable_note(retry_in, &reason));
                r.retry_in = Some(retry_in);
                self.secondary_did_not_start(lane);
            }
            Admission::Refused { retry_in, note } => {
                r.absent(LaneStatus::Unavailable, note);
                r.retry_in = Some(retry_in);
                self.secondary_did_not_start(lane);
            }
        }
        if self.lanes[lane].phase != Phase::Running {
            self.switch_not_admitted(lane);
        }
    }

    /// Cancels a running lane (its worker gets the token) or rules out an
    /// idle one.
    pub(super) fn cancel_lane(&mut self, lane: Lane, note: &str, fx: &mut Vec<Effect>) {
        let r = &mut self.lanes[lane];
        match r.phase {
            Phase::Running | Phase::Starting => {
                r.cancel_requested = true;
                fx.push(Effect::Cancel(lane));
                r.note.get_or_insert_with(|| note.to_string());
            }
            Phase::Idle => r.absent(LaneStatus::NotStarted, note),
            Phase::Absent(_) | Phase::Scoring | Phase::Done => {}
        }
    }

    /// A worker returned. While the run is open (`may_score`), a whole
    /// answer is handed to the scorer, unless the run committed to the
    /// other lane.
    pub(super) fn on_finished(
        &mut self,
        f: Finished,
        may_score: bool,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let Finished {
            lane,
            result,
            at,
            saw_cancel,
        } = f;
        if self.switch_waits_for(lane) {
            // The worker cancelled at the commit returned (its result is
            // not the run's): its lane now continues the answer the
            // committed lane left.
            fx.push(Effect::Emit(Event::LaneFinished {
                run_id: self.run.run_id,
                lane,
                status: status_of(&result),
                at_ms: self.at_ms(at),
            }));
            self.restart_for_switch(lane, now, fx);
            return;
        }
        let mut result = result;
        if let Ok(c) = &mut result {
            self.whole_answer(lane, c);
        }
        let order = 1 + self.lanes.values().filter(|r| r.finish_order > 0).count() as u32;
        let status = status_of(&result);
        // Validity is part of acceptance: a whole answer that is not what
        // the request asked for is rejected here, once, with its reason
        // (a single-lane diagnostic reports any answer as it is). One cut
        // by its length is rejected too, so another lane's whole answer
        // wins; when no lane has one, it is still the model's answer as
        // far as it went (the decision's last pool, `Pool::Cut`), as
        // OpenAI returns a call or schema answer cut so.
        let invalid = match (&result, &self.run.answer_rules) {
            (Ok(c), Some(rules)) if c.finish_reason.is_complete() && !self.run.diagnostic => rules
                .check_answer(&c.text, &c.tool_calls)
                .err()
                .map(|e| match c.finish_reason {
                    FinishReason::Length => format!("{e} (cut by its length)"),
                    _ => e.to_string(),
                }),
            _ => None,
        };
        let scorable =
            matches!(&result, Ok(c) if c.finish_reason.is_complete()) && invalid.is_none();
        let at_ms = self.at_ms(at);
        let r = &mut self.lanes[lane];
        r.finished = Some(at);
        r.finish_order = order;
        r.saw_cancel = saw_cancel;
        r.result = Some(result);
        r.invalid = invalid;
        r.phase = Phase::Done;
        fx.push(Effect::Emit(Event::LaneFinished {
            run_id: self.run.run_id,
            lane,
            status,
            at_ms,
        }));
        let other_committed = self.stream.committed.is_some_and(|c| c != lane);
        if !(may_score && scorable && !other_committed && self.run.callbacks.scorer) {
            return;
        }
        let Some(candidate) = self.lanes[lane].candidate().cloned().map(Box::new) else {
            return;
        };
        self.lanes[lane].phase = Phase::Scoring;
        self.call(Call::Score { lane, candidate }, now, fx);
    }
}
