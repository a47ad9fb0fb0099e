//! The two-stage cascade's first stage: a cascade with a prompt threshold
//! ([`Route::prompt_escalate_on`](crate::harness::Route::prompt_escalate_on))
//! has the local lane report the prompt before the first answer token:
//! its mean token log-probability after the prompt pass
//! ([`Signal::PromptLogprob`]), or its length as soon as it is tokenized
//! ([`Signal::PromptBrevity`], minus the tokens). Below the threshold the
//! cloud starts at once and the local lane is cancelled when the cloud is
//! admitted, so no local answer is generated (and, on the length, no
//! prompt decoded); at or above it the cascade goes on as configured (its
//! answer threshold, early escalation). If the cloud cannot start (busy,
//! down, skipped) the local lane keeps going.
//!
//! It must not start or cancel lanes itself: `plan` does (`escalate_now`).

use super::lanes::Phase;
use super::plan::CutPrimary;
use super::{Core, Effect};
use crate::harness::outcome::PromptStage;
use crate::harness::scoring::Signal;
use crate::lane::{Lane, PromptScore};
use std::time::Instant;

/// The first stage's state.
#[derive(Default)]
pub(super) struct Stage {
    /// The signal and threshold; `None`: the run has no first stage.
    threshold: Option<(Signal, f64)>,
    /// The score the local lane gave, once it did.
    score: Option<f64>,
    /// It sent the run to the cloud.
    escalated: bool,
}

impl Stage {
    /// The first stage of a cascade with this prompt threshold.
    pub(super) fn new(threshold: Option<(Signal, f64)>) -> Self {
        Self {
            threshold,
            ..Self::default()
        }
    }
}

impl Core {
    /// Whether `lane`'s worker should report the prompt
    /// ([`Input::PromptScore`](super::Input::PromptScore)): the local
    /// primary of a two-stage cascade with a secondary.
    pub(crate) fn watches_prompt(&self, lane: Lane) -> bool {
        self.prompt.threshold.is_some()
            && lane == Lane::Local
            && lane == self.plan.primary
            && self.plan.secondary.is_some()
    }

    /// Whether `lane`'s worker should score the prompt in its prompt pass
    /// ([`Sampling::score_prompt`](crate::request::Sampling::score_prompt)):
    /// the first stage reads `prompt_logprob`.
    pub(crate) fn scores_prompt(&self, lane: Lane) -> bool {
        self.watches_prompt(lane)
            && self
                .prompt
                .threshold
                .is_some_and(|(s, _)| s == Signal::PromptLogprob)
    }

    /// The local lane's report of the prompt.
    pub(super) fn on_prompt_score(
        &mut self,
        lane: Lane,
        report: PromptScore,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        if !self.watches_prompt(lane) || self.prompt.score.is_some() {
            return;
        }
        let (Some((signal, threshold)), Some(sec)) = (self.prompt.threshold, self.plan.secondary)
        else {
            return;
        };
        let score = match signal {
            Signal::PromptBrevity => Signal::brevity(report.tokens.into()),
            _ => match report.logprob {
                Some(v) => f64::from(v),
                None => return,
            },
        };
        self.prompt.score = Some(score);
        if score >= threshold
            || self.lanes[lane].phase != Phase::Running
            || self.stream.committed.is_some()
            || self.lanes[sec].phase != Phase::Idle
            || self.lanes[sec].want_start
        {
            return;
        }
        self.prompt.escalated = true;
        let how = format!("{signal} {score:.4}, below the prompt threshold {threshold}");
        self.lanes[sec].note = Some(format!("started before generation: {lane}'s {how}"));
        self.timers.disarm();
        self.escalate_now(CutPrimary::Prompt(how), now, fx);
    }

    /// The first stage, for the outcome (`None`: the run had none).
    pub(super) fn prompt_stage(&self) -> Option<PromptStage> {
        let (signal, threshold) = self.prompt.threshold?;
        self.watches_prompt(Lane::Local).then(|| PromptStage {
            signal,
            threshold,
            score: self.prompt.score,
            straight_to_cloud: self.prompt.escalated
                && self
                    .plan
                    .secondary
                    .is_some_and(|s| self.lanes[s].started.is_some()),
        })
    }
}
