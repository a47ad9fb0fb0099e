//! Early escalation: a cascade whose threshold is on a streamable signal
//! ([`Signal::is_streamable`]: the lowest token log-probability, the
//! lowest window mean) reads that signal from the primary's tokens as they
//! are sampled. Such a signal only falls as tokens come, so once it is
//! below the threshold the finished answer would be too: the secondary
//! starts at once and the primary is cancelled when it is admitted,
//! instead of paying for the rest of the local answer first. The decisions
//! are the ones the cascade makes at the end; only the time differs. If the
//! secondary cannot start (busy, down, skipped) the primary keeps going.
//!
//! It must not start or cancel lanes itself: `plan` does (`escalate_now`).

use super::lanes::Phase;
use super::plan::CutPrimary;
use super::{Core, Effect};
use crate::harness::scoring::{RunningSignal, Signal};
use crate::lane::Lane;
use std::time::Instant;

/// The primary's streamed signal.
#[derive(Default)]
pub(super) struct Early {
    /// Reads the signal; `None` when the run does not escalate early.
    reader: Option<RunningSignal>,
    signal: Option<Signal>,
    /// Log-probabilities received.
    tokens: usize,
    /// Escalated already (once per run).
    fired: bool,
}

impl Early {
    /// The reader for a run that escalates early on `signal` (a cascade
    /// with a threshold in that signal's units), if it can.
    pub(super) fn new(signal: Option<Signal>) -> Self {
        Self {
            reader: signal.and_then(RunningSignal::new),
            signal,
            tokens: 0,
            fired: false,
        }
    }
}

impl Core {
    /// Whether `lane`'s worker should report each sampled token's
    /// log-probability ([`Input::Logprob`](super::Input::Logprob)).
    pub(crate) fn watches_logprobs(&self, lane: Lane) -> bool {
        self.early.reader.is_some()
            && lane == self.plan.primary
            && self.plan.primary_threshold.is_some()
            && self.plan.secondary.is_some()
    }

    /// One sampled token's log-probability from `lane`.
    pub(super) fn on_logprob(
        &mut self,
        lane: Lane,
        logprob: f32,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        if !self.watches_logprobs(lane) || self.lanes[lane].phase != Phase::Running {
            return;
        }
        let (Some(threshold), Some(sec), Some(signal)) = (
            self.plan.primary_threshold,
            self.plan.secondary,
            self.early.signal,
        ) else {
            return;
        };
        let Some(reader) = self.early.reader.as_mut() else {
            return;
        };
        self.early.tokens += 1;
        let Some(bound) = reader.push(logprob) else {
            return;
        };
        if self.early.fired
            || bound >= threshold
            || self.stream.committed.is_some()
            || self.lanes[sec].phase != Phase::Idle
            || self.lanes[sec].want_start
        {
            return;
        }
        self.early.fired = true;
        let how = format!(
            "{signal} fell to {bound:.4} after {} tokens, below the threshold {threshold}",
            self.early.tokens
        );
        self.lanes[sec].note = Some(format!("started early: {lane}'s {how}"));
        self.timers.disarm();
        self.escalate_now(CutPrimary::Confidence(how), now, fx);
    }
}
