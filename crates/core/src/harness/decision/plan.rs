//! The plan at work: which lanes start when the run begins, the cloud
//! lane's prompt preparation (pre-score, then compression; a cloud start
//! waits for it), the hedge and share timers, and escalation to the
//! secondary lane (the primary failed, was absent, was unacceptable, or
//! overran its share). The table of what each policy does is
//! [`Plan::new`](crate::harness::policy::Plan::new); this module applies
//! it. It must not decide a winner (`decide`) or admit a lane (`admit`).

use super::calls::Call;
use super::lanes::Phase;
use super::{Core, Effect};
use crate::harness::backend::LaneErrorKind;
use crate::harness::callbacks::{CloudNeed, Compressed};
use crate::harness::observer::Event;
use crate::harness::outcome::LaneStatus;
use crate::harness::policy::SecondaryStart;
use crate::lane::Lane;
use crate::request::ChatMessage;
use std::time::Instant;

/// Where the cloud lane's prompt preparation is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum PrepState {
    PreScoring,
    Compressing,
    #[default]
    Ready,
}

/// The cloud lane's prompt preparation.
#[derive(Default)]
pub(super) struct Prep {
    pub(super) state: PrepState,
    /// The compressor's messages, when it gave some.
    pub(super) cloud_messages: Option<Vec<ChatMessage>>,
}

/// Why the primary is cut once the secondary is admitted.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum CutPrimary {
    /// It overran its share of the deadline.
    Share,
    /// Its streamed confidence fell below the threshold (`early`); the
    /// note says how.
    Confidence(String),
    /// Its score of the prompt was below the prompt threshold (`prompt`);
    /// the note says how.
    Prompt(String),
}

impl CutPrimary {
    fn cancel_note(&self) -> String {
        match self {
            CutPrimary::Share => "overran its share of the deadline; cancelled to escalate".into(),
            CutPrimary::Confidence(how) => format!("{how}; cancelled to escalate early"),
            CutPrimary::Prompt(how) => format!("{how}; cancelled before generating"),
        }
    }

    fn kept_note(&self, lane: Lane) -> String {
        match self {
            CutPrimary::Share => {
                format!("overran its share, but {lane} could not start; kept running")
            }
            CutPrimary::Confidence(how) | CutPrimary::Prompt(how) => {
                format!("{how}, but {lane} could not start; kept running")
            }
        }
    }
}

/// The plan's timers, as instants the shell sleeps until.
#[derive(Default)]
pub(super) struct Timers {
    pub(super) hedge_at: Option<Instant>,
    pub(super) share_at: Option<Instant>,
    /// The primary is to be cancelled once the secondary is admitted (its
    /// share is used up, or its confidence fell early).
    pub(super) escalate_on_secondary_start: Option<CutPrimary>,
}

impl Timers {
    /// No later start: the run committed, or the secondary starts now.
    pub(super) fn disarm(&mut self) {
        self.hedge_at = None;
        self.share_at = None;
    }
}

impl Core {
    /// Starts what the plan starts at once and arms its timers.
    pub(super) fn begin(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        fx.push(Effect::Emit(Event::RunStarted {
            run_id: self.run.run_id,
            route: self.run.route.clone(),
            policy: self.run.policy.kind(),
            deadline_ms: self.at_ms(self.run.deadline),
        }));
        let kind = self.run.policy.kind();
        for lane in Lane::ALL {
            let r = &mut self.lanes[lane];
            if !self.plan.uses(lane) {
                r.absent(LaneStatus::NotStarted, format!("not used by {kind}"));
            } else if self.run.lanes[lane].is_none() {
                r.absent(LaneStatus::NotStarted, "lane not configured");
            }
        }
        // The preparation's state is set before any lane asks to start (a
        // cloud start waits for it); its first call goes out after the
        // primary's start, so an inline compressor that answers at once
        // does not put the cloud's admission before the primary's.
        let prep_call = if self.lanes[Lane::Cloud].phase == Phase::Idle {
            self.prepare_cloud()
        } else {
            None
        };
        self.request_start(self.plan.primary, now, fx);
        if let Some(call) = prep_call {
            self.call(call, now, fx);
        }
        let Some(sec) = self.plan.secondary else {
            return;
        };
        match self.plan.start {
            SecondaryStart::Immediately => self.request_start(sec, now, fx),
            SecondaryStart::After(d) => self.timers.hedge_at = Some(self.run.start + d),
            SecondaryStart::AtShare(share) => {
                let span = self.run.deadline.saturating_duration_since(self.run.start);
                let at = self.run.start + span.mul_f64(share);
                if at < self.run.deadline {
                    self.timers.share_at = Some(at);
                }
            }
        }
    }

    /// Pre-score (when the plan consults it), then compression: the first
    /// call to make, if any.
    fn prepare_cloud(&mut self) -> Option<Call> {
        if self.plan.consult_pre_score && self.run.callbacks.pre_score {
            self.prep.state = PrepState::PreScoring;
            return Some(Call::PreScore);
        }
        self.start_compression()
    }

    fn start_compression(&mut self) -> Option<Call> {
        if self.run.callbacks.compressor {
            self.prep.state = PrepState::Compressing;
            Some(Call::Compress)
        } else {
            self.prep.state = PrepState::Ready;
            None
        }
    }

    /// The cloud's prompt is ready: start it if it was waiting for that.
    fn prep_ready(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        self.prep.state = PrepState::Ready;
        let cloud = &mut self.lanes[Lane::Cloud];
        if cloud.want_start && cloud.phase == Phase::Idle {
            cloud.want_start = false;
            self.request_start(Lane::Cloud, now, fx);
        }
    }

    /// The pre-score's answer (its default, `Needed`, when it failed).
    pub(super) fn on_pre_score(&mut self, need: CloudNeed, now: Instant, fx: &mut Vec<Effect>) {
        if need == CloudNeed::Needed {
            match self.start_compression() {
                Some(call) => self.call(call, now, fx),
                None => self.prep_ready(now, fx),
            }
            return;
        }
        let at_ms = self.at_ms(now);
        let cloud = &mut self.lanes[Lane::Cloud];
        if cloud.phase == Phase::Idle {
            cloud.absent(LaneStatus::Skipped, "pre-score: cloud not needed");
            cloud.want_start = false;
            fx.push(Effect::Emit(Event::LaneSkipped {
                run_id: self.run.run_id,
                lane: Lane::Cloud,
                at_ms,
            }));
        }
        self.prep.state = PrepState::Ready;
        // Nothing to escalate to: the primary keeps the whole deadline.
        if self.plan.primary == Lane::Local {
            self.timers.share_at = None;
        }
    }

    /// The compressor's answer (`None`: it failed; the cloud gets the
    /// request uncompressed). Returns what was invalid about it.
    pub(super) fn on_compressed(
        &mut self,
        out: Option<Compressed>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) -> Option<String> {
        let invalid = match out {
            Some(c) if !c.messages.is_empty() => {
                self.lanes[Lane::Cloud].compressed = (c.tokens_before, c.tokens_after);
                self.prep.cloud_messages = Some(c.messages);
                None
            }
            Some(_) => Some("compressor returned no messages".to_string()),
            None => None,
        };
        self.prep_ready(now, fx);
        invalid
    }

    pub(super) fn on_hedge_due(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        self.timers.hedge_at = None;
        if let Some(sec) = self.plan.secondary {
            if self.lanes[sec].phase == Phase::Idle && self.stream.committed.is_none() {
                self.lanes[sec].note = Some("started after the hedge delay".into());
                self.request_start(sec, now, fx);
            }
        }
    }

    /// The primary used up its share: start the secondary and, once it is
    /// admitted, cancel the primary. If the secondary cannot run (busy,
    /// down, skipped), the primary keeps going: cutting it would leave
    /// nothing.
    pub(super) fn on_share_due(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        self.timers.share_at = None;
        let Some(sec) = self.plan.secondary else {
            return;
        };
        let primary = self.plan.primary;
        if !self.lanes[primary].is_running() || self.stream.committed.is_some() {
            return;
        }
        if self.lanes[sec].phase == Phase::Idle {
            self.lanes[sec].note = Some(format!("{primary} overran its share of the deadline"));
            self.escalate_now(CutPrimary::Share, now, fx);
        }
    }

    /// Starts the secondary now and, once it is admitted, cancels the
    /// primary for `why`; if the secondary cannot start, the primary keeps
    /// going.
    pub(super) fn escalate_now(&mut self, why: CutPrimary, now: Instant, fx: &mut Vec<Effect>) {
        let Some(sec) = self.plan.secondary else {
            return;
        };
        self.timers.escalate_on_secondary_start = Some(why);
        self.request_start(sec, now, fx);
        if matches!(self.lanes[sec].phase, Phase::Absent(_)) {
            self.secondary_did_not_start(sec);
        }
    }

    /// The secondary was admitted: if the primary overran its share, cut
    /// it now.
    pub(super) fn secondary_started(&mut self, lane: Lane, fx: &mut Vec<Effect>) {
        if Some(lane) != self.plan.secondary {
            return;
        }
        if let Some(why) = self.timers.escalate_on_secondary_start.take() {
            self.cancel_lane(self.plan.primary, &why.cancel_note(), fx);
        }
    }

    /// A lane could not start (busy, down, no time left): if it was the
    /// escalation target, the primary keeps running.
    pub(super) fn secondary_did_not_start(&mut self, lane: Lane) {
        if Some(lane) != self.plan.secondary {
            return;
        }
        if let Some(why) = self.timers.escalate_on_secondary_start.take() {
            self.lanes[self.plan.primary].note = Some(why.kept_note(lane));
        }
    }

    /// Starts the secondary when the primary is out of the running: absent,
    /// failed, unusable, or scored below its threshold.
    pub(super) fn escalate_if_primary_out(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        let Some(sec) = self.plan.secondary else {
            return;
        };
        let primary = self.plan.primary;
        let sr = &self.lanes[sec];
        if sr.phase != Phase::Idle || sr.want_start {
            return;
        }
        let why = match self.lanes[primary].phase {
            Phase::Absent(s) => format!("{primary} was {}", s.as_str()),
            Phase::Done if !self.acceptable(primary) => format!(
                "{primary} {}",
                match (
                    self.lanes[primary].candidate(),
                    &self.lanes[primary].invalid
                ) {
                    // A prompt over the local context goes to the cloud.
                    (None, _)
                        if self.lanes[primary].error().map(|e| e.kind())
                            == Some(LaneErrorKind::ContextLengthExceeded) =>
                    {
                        format!(
                            "could not take the prompt ({})",
                            self.lanes[primary]
                                .error()
                                .map(|e| crate::error_chain(e))
                                .unwrap_or_default()
                        )
                    }
                    (None, _) => "failed".to_string(),
                    (Some(c), _) if !c.is_usable() => "gave no usable answer".to_string(),
                    (Some(_), Some(why)) => format!("gave an invalid answer ({why})"),
                    (Some(_), None) => "scored below the threshold".to_string(),
                }
            ),
            _ => return,
        };
        self.lanes[sec].note = Some(format!("started because {why}"));
        self.timers.disarm();
        self.request_start(sec, now, fx);
    }
}
