//! The two-stage cascade's first stage: a cascade with a prompt threshold
//! ([`Route::prompt_escalate_below`](crate::harness::Route::prompt_escalate_below))
//! has the local lane score the prompt in its prompt pass (the mean
//! log-probability of the prompt's own tokens,
//! [`Signal::PromptLogprob`]) and reads that score before the first answer
//! token: below the threshold the cloud starts at once and the local lane
//! is cancelled when the cloud is admitted, so no local answer is
//! generated; at or above it the cascade goes on as configured (its answer
//! threshold, early escalation). If the cloud cannot start (busy, down,
//! skipped) the local lane keeps going.
//!
//! It must not start or cancel lanes itself: `plan` does (`escalate_now`).

use super::lanes::Phase;
use super::plan::CutPrimary;
use super::{Core, Effect};
use crate::harness::outcome::PromptStage;
use crate::harness::scoring::Signal;
use crate::lane::Lane;
use std::time::Instant;

/// The first stage's state.
#[derive(Default)]
pub(super) struct Stage {
    /// The threshold; `None`: the run has no first stage.
    threshold: Option<f64>,
    /// The score the local lane gave, once it did.
    score: Option<f64>,
    /// It sent the run to the cloud.
    escalated: bool,
}

impl Stage {
    /// The first stage of a cascade with this prompt threshold.
    pub(super) fn new(threshold: Option<f64>) -> Self {
        Self {
            threshold,
            ..Self::default()
        }
    }
}

impl Core {
    /// Whether `lane`'s worker should score the prompt and report the
    /// score ([`Input::PromptScore`](super::Input::PromptScore)): the
    /// local primary of a two-stage cascade with a secondary.
    pub(crate) fn watches_prompt(&self, lane: Lane) -> bool {
        self.prompt.threshold.is_some()
            && lane == Lane::Local
            && lane == self.plan.primary
            && self.plan.secondary.is_some()
    }

    /// The local lane's prompt score.
    pub(super) fn on_prompt_score(
        &mut self,
        lane: Lane,
        score: f32,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        if !self.watches_prompt(lane) || self.prompt.score.is_some() {
            return;
        }
        let score = f64::from(score);
        self.prompt.score = Some(score);
        let (Some(threshold), Some(sec)) = (self.prompt.threshold, self.plan.secondary) else {
            return;
        };
        if score >= threshold
            || self.lanes[lane].phase != Phase::Running
            || self.stream.committed.is_some()
            || self.lanes[sec].phase != Phase::Idle
            || self.lanes[sec].want_start
        {
            return;
        }
        self.prompt.escalated = true;
        let how = format!(
            "{} {score:.4}, below the prompt threshold {threshold}",
            Signal::PromptLogprob
        );
        self.lanes[sec].note = Some(format!("started before generation: {lane}'s {how}"));
        self.timers.disarm();
        self.escalate_now(CutPrimary::Prompt(how), now, fx);
    }

    /// The first stage, for the outcome (`None`: the run had none).
    pub(super) fn prompt_stage(&self) -> Option<PromptStage> {
        let threshold = self.prompt.threshold?;
        self.watches_prompt(Lane::Local).then(|| PromptStage {
            signal: Signal::PromptLogprob,
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
