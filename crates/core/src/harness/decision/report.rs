//! Settlement's data: the [`Outcome`] with one [`LaneReport`] per lane,
//! the callback reports (calls still pending are abandoned), the winner's
//! remaining text for a streaming caller, and the `decision` and
//! `run_settled` events. Built once, by [`Core::settle`], which consumes
//! the core. It must not decide anything (`decide` did) nor touch the
//! run's shared state (the shell holds its lock around this).

use super::lanes::{status_of, Phase};
use super::{Core, Effect};
use crate::harness::observer::Event;
use crate::harness::outcome::{CancelResult, Decision, LaneReport, LaneStatus, Outcome};
use crate::lane::Lane;
use crate::millis::to_ms;
use std::collections::BTreeMap;
use std::time::Instant;

impl Core {
    /// Settles the run at `now` (`aborted`: an abort was accepted, which
    /// always wins). Returns the outcome and what the shell must still do,
    /// in order: the winner's text, then the `decision` and `run_settled`
    /// events.
    pub(crate) fn settle(mut self, now: Instant, aborted: bool) -> (Outcome, Vec<Effect>) {
        let end = match std::mem::replace(&mut self.stage, super::Stage::Open) {
            _ if aborted => super::decide::End::Abort,
            super::Stage::Closed(end) | super::Stage::Closing(end) => end,
            // Settled while still deciding: only a shell that lost its
            // deadline could; treat it as the deadline.
            super::Stage::Open => super::decide::End::Deadline,
        };
        let v = self.verdict(end);
        let mut fx = Vec::new();
        // A winner's text reaches a streaming caller now if it has not yet.
        if let Some(w) = v.winner {
            self.flush_winner(w, now, &mut fx);
        }
        let lanes = self.lane_reports(v.winner);
        let late_workers = lanes
            .iter()
            .filter(|r| r.status == LaneStatus::Late)
            .count() as u32;
        let mut callbacks = std::mem::take(&mut self.calls.reports);
        callbacks.extend(self.abandoned_calls(now));
        let run = &self.run;
        let candidate = v.winner.and_then(|w| self.lanes[w].candidate().cloned());
        let outcome = Outcome {
            run_id: run.run_id,
            request_id: run.request_id.clone(),
            route: run.route.clone(),
            policy: run.policy.kind(),
            status: v.status,
            winner: v.winner,
            text: candidate.as_ref().map(|c| c.text.clone()),
            completion: candidate,
            error: v.error,
            committed: self.stream.committed,
            deadline_ms: self.at_ms(run.deadline),
            elapsed_ms: self.at_ms(now),
            overshoot_ms: to_ms(now.saturating_duration_since(run.deadline)),
            ttft_ms: self.stream.caller_first_token.map(|t| self.at_ms(t)),
            decision: Decision {
                reason: v.reason.to_string(),
                decided_by: v.by,
                scores: Lane::ALL
                    .iter()
                    .map(|&l| (l, self.lanes[l].score.as_ref().map(|s| s.value)))
                    .collect::<BTreeMap<_, _>>(),
            },
            lanes,
            callback_ms: callbacks.iter().map(|r| r.elapsed_ms).sum(),
            callbacks,
            late_workers,
            prompt_stage: self.prompt_stage(),
            // Priced by the shell, which holds the price table.
            cost: Default::default(),
            replay: None,
            switch: self.switch_report(),
        };
        fx.push(Effect::Emit(Event::Decision {
            run_id: run.run_id,
            winner: v.winner,
            reason: outcome.decision.reason.clone(),
            at_ms: outcome.elapsed_ms,
        }));
        fx.push(Effect::Emit(Event::RunSettled {
            run_id: run.run_id,
            status: v.status,
            winner: v.winner,
            elapsed_ms: outcome.elapsed_ms,
            overshoot_ms: outcome.overshoot_ms,
            late_workers,
        }));
        (outcome, fx)
    }

    /// Each lane in one line, for errors.
    pub(super) fn lanes_summary(&self) -> String {
        Lane::ALL
            .iter()
            .map(|&l| {
                let r = &self.lanes[l];
                let what = match (&r.phase, &r.result) {
                    (Phase::Absent(s), _) => s.as_str().to_string(),
                    (Phase::Idle | Phase::Starting, _) => "not started".into(),
                    (Phase::Running, _) => "still running".into(),
                    (_, Some(Err(e))) => {
                        format!("failed ({}): {}", e.kind(), crate::error_chain(e))
                    }
                    (_, Some(Ok(c))) if !c.finish_reason.is_complete() => {
                        format!("unusable answer ({})", c.finish_reason.as_str())
                    }
                    (_, Some(Ok(c))) if !c.is_usable() => "blank answer".into(),
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
            .map(|&lane| self.lane_report(lane, winner))
            .collect()
    }

    fn lane_report(&self, lane: Lane, winner: Option<Lane>) -> LaneReport {
        let r = &self.lanes[lane];
        let info = self.run.lanes[lane].as_ref();
        let observes = info.is_none_or(|i| i.observes_cancellation);
        let status = match r.phase {
            Phase::Absent(s) => s,
            Phase::Idle | Phase::Starting => LaneStatus::NotStarted,
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
        rep.backend = info.map(|i| i.backend.clone());
        if let Some(st) = r.started {
            rep.started_ms = Some(self.at_ms(st));
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
                rep.tool_calls = c.tool_calls.clone();
            }
            if rep.ttft_ms.is_none() {
                rep.ttft_ms = c.timings.ttft.map(to_ms);
            }
            rep.draft_n = c.timings.draft_n;
            rep.draft_n_accepted = c.timings.draft_n_accepted;
        }
        rep.tokens.compressor_before = r.compressed.0;
        rep.tokens.compressor_after = r.compressed.1;
        rep.prompt_tokens = rep.tokens.prompt();
        rep.completion_tokens = rep.tokens.completion();
        if let Some(s) = &r.score {
            rep.score = Some(s.value);
            rep.signals = s.signals.clone();
        }
        rep.error = r.error().cloned();
        rep.cancel = cancel;
        rep.note = r.note.clone();
        match (&r.invalid, winner == Some(lane)) {
            // The winner cut by its length: its answer as far as it went.
            (Some(why), true) => {
                rep.note
                    .get_or_insert_with(|| format!("answered as cut short: {why}"));
            }
            (why, _) => rep.rejected = why.as_ref().map(|why| format!("invalid answer: {why}")),
        }
        rep.retry_in_ms = r.retry_in.map(to_ms);
        rep
    }
}
