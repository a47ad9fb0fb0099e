//! The decision: which answers count (acceptable: whole, not blank, at or
//! above its threshold; usable: whole and not blank; blank: whole, valid,
//! and empty or whitespace), the rules that end a run (the first
//! acceptable answer; a committed lane that returned; when every lane has
//! ended, the one candidate or the arbiter over the pool, "acceptable,
//! else usable, else blank, else cut": a blank whole answer is what the
//! model said, returned as llama-server and OpenAI return it when no lane
//! did better, and so is an answer cut by its length before it met the
//! requested shape (a tool call or schema answer: OpenAI returns it with
//! `finish_reason: "length"`);
//! the deadline; an abort), scores and the
//! arbiter's answer, and what each end means at settlement ([`Verdict`]).
//! Every reason a run can give is a [`Reason`]. It must not start or
//! cancel lanes itself (`plan`, `admit` do), nor build reports.

use super::calls::Call;
use super::lanes::Phase;
use super::{Core, Effect};
use crate::harness::arbitration::pick_highest;
use crate::harness::callbacks::{Score, Scored};
use crate::harness::outcome::{DecidedBy, RunStatus};
use crate::harness::policy::Pick;
use crate::lane::{FinishReason, Lane};
use std::fmt;
use std::time::Instant;

/// How the deciding ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum End {
    Winner {
        lane: Lane,
        by: DecidedBy,
        reason: Reason,
    },
    /// A streaming run's committed lane returned.
    Committed(Lane),
    NoAnswer(Reason),
    Deadline,
    Abort,
}

/// Which candidates a pool holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pool {
    /// Those that passed every test.
    Acceptable,
    /// None passed: the whole, non-blank ones.
    Usable,
    /// None was usable: the whole, valid, blank ones.
    Blank,
    /// None of those: the answers cut by their length before they met
    /// the requested shape.
    Cut,
}

impl Pool {
    fn what(self) -> &'static str {
        match self {
            Pool::Acceptable => "best acceptable answer",
            Pool::Usable => "no acceptable answer; best usable one",
            Pool::Blank => "no lane gave a non-blank answer; a blank one",
            Pool::Cut => {
                "no lane gave a whole answer of the requested shape; one cut by its length"
            }
        }
    }
}

/// Why a run ended as it did: the outcome's `decision.reason`, one
/// variant per rule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reason {
    /// The first lane, in finishing order, whose answer was acceptable.
    FirstAcceptable(Lane),
    /// Every lane ended and the pool held one candidate.
    OnlyCandidate { pool: Pool, lane: Lane },
    /// Every lane ended; no arbiter: the built-in rule over the pool.
    HighestScore { pool: Pool, lane: Lane },
    /// The arbiter picked a candidate.
    ArbiterPicked(Lane),
    /// The arbiter failed (panic, index out of range): the built-in rule.
    ArbiterFailed(Lane),
    /// The arbiter rejected every candidate.
    ArbiterRejectedAll,
    /// The built-in rule had nothing to pick from.
    NoCandidate,
    /// Every lane ended, none usable.
    NoUsableAnswer,
    /// A streaming run's committed lane completed.
    CommittedCompleted(Lane),
    /// A streaming run's committed lane returned cut short.
    CommittedStoppedEarly(Lane),
    /// A streaming run's committed lane completed with an invalid answer.
    CommittedInvalid(Lane),
    /// A streaming run's committed lane failed.
    CommittedFailed(Lane),
    /// A streaming run's committed lane failed part-way; the other lane
    /// continued its answer and completed.
    Continued { from: Lane, to: Lane },
    /// The caller aborted the run.
    Aborted,
    /// The deadline came just as the committed lane completed.
    CommittedAtDeadline(Lane),
    /// The deadline came before the committed lane finished.
    DeadlineWhileCommitted(Lane),
    /// The deadline came; the best answer finished by then won.
    DeadlineBestFinished(Lane),
    /// The deadline came with no usable answer.
    DeadlineNoUsableAnswer,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const BUILT_IN: &str = "built-in rule: highest score";
        match self {
            Reason::FirstAcceptable(l) => write!(f, "first acceptable answer: {l}"),
            Reason::OnlyCandidate { pool, lane } => {
                write!(f, "{}: only candidate {lane}", pool.what())
            }
            Reason::HighestScore { pool, lane } => {
                write!(f, "{}; {BUILT_IN}: {lane}", pool.what())
            }
            Reason::ArbiterPicked(l) => write!(f, "arbiter picked {l}"),
            Reason::ArbiterFailed(l) => write!(f, "arbiter failed; {BUILT_IN}: {l}"),
            Reason::ArbiterRejectedAll => f.write_str("arbiter rejected every candidate"),
            Reason::NoCandidate => f.write_str("no candidate to pick from"),
            Reason::NoUsableAnswer => f.write_str("no lane produced a usable answer"),
            Reason::CommittedCompleted(l) => write!(f, "stream committed to {l}, which completed"),
            Reason::CommittedStoppedEarly(l) => {
                write!(f, "stream committed to {l}, which stopped early")
            }
            Reason::CommittedInvalid(l) => {
                write!(f, "stream committed to {l}, whose answer was invalid")
            }
            Reason::CommittedFailed(l) => write!(f, "stream committed to {l}, which failed"),
            Reason::Continued { from, to } => write!(
                f,
                "stream committed to {from}, which failed part-way; {to} continued the answer"
            ),
            Reason::Aborted => f.write_str("run aborted"),
            Reason::CommittedAtDeadline(l) => {
                write!(
                    f,
                    "stream committed to {l}, which completed at the deadline"
                )
            }
            Reason::DeadlineWhileCommitted(l) => {
                write!(f, "deadline reached; stream committed to {l}")
            }
            Reason::DeadlineBestFinished(l) => {
                write!(f, "deadline reached; best answer finished by then: {l}")
            }
            Reason::DeadlineNoUsableAnswer => f.write_str("deadline reached with no usable answer"),
        }
    }
}

/// What an end means for the outcome.
pub(super) struct Verdict {
    pub(super) status: RunStatus,
    pub(super) winner: Option<Lane>,
    pub(super) reason: Reason,
    pub(super) by: DecidedBy,
    pub(super) error: Option<String>,
}

/// A decision being made by a callback.
#[derive(Default)]
pub(super) struct Pending {
    /// The candidates the arbiter was asked about.
    arbitrating: Option<Vec<Scored>>,
    /// The arbiter's decision, taken by the next evaluation.
    decided: Option<End>,
}

impl Core {
    /// The threshold `lane`'s score must reach, if any.
    fn threshold(&self, lane: Lane) -> Option<f64> {
        if lane == self.plan.primary {
            if let Some(t) = self.plan.primary_threshold {
                return Some(t);
            }
        }
        self.run.min_score
    }

    /// Returned, scored where needed, whole, not blank, at or above its
    /// threshold.
    pub(super) fn acceptable(&self, lane: Lane) -> bool {
        let r = &self.lanes[lane];
        if r.phase != Phase::Done {
            return false;
        }
        let Some(c) = r.candidate() else {
            return false;
        };
        if !c.is_usable() || r.invalid.is_some() {
            return false;
        }
        match self.threshold(lane) {
            None => true,
            Some(t) => r.score.as_ref().is_some_and(|s| s.value >= t),
        }
    }

    /// Returned whole, not blank and valid (a diagnostic takes any
    /// completion).
    fn usable(&self, lane: Lane) -> bool {
        let r = &self.lanes[lane];
        r.has_returned()
            && r.candidate()
                .is_some_and(|c| self.run.diagnostic || (c.is_usable() && r.invalid.is_none()))
    }

    /// Returned whole and valid, but empty or whitespace.
    fn blank(&self, lane: Lane) -> bool {
        let r = &self.lanes[lane];
        r.has_returned()
            && r.invalid.is_none()
            && r.candidate()
                .is_some_and(|c| c.finish_reason.is_complete() && !c.is_usable())
    }

    /// Returned cut by its length (its shape unfinished, so invalid).
    fn cut(&self, lane: Lane) -> bool {
        let r = &self.lanes[lane];
        r.has_returned()
            && r.candidate()
                .is_some_and(|c| c.finish_reason == FinishReason::Length)
    }

    /// Returned lanes in the order they returned.
    fn returned_in_order(&self) -> Vec<Lane> {
        let mut v: Vec<Lane> = Lane::ALL
            .into_iter()
            .filter(|&l| self.lanes[l].has_returned())
            .collect();
        v.sort_by_key(|&l| self.lanes[l].finish_order);
        v
    }

    /// The candidates a decision picks from: the acceptable ones, else the
    /// usable ones (a low-scored answer beats no answer), else the blank
    /// ones (the model's whole answer was empty: that is its answer), else
    /// the ones cut by their length (the answer as far as it went), in
    /// finishing order.
    fn pool(&self) -> (Vec<Lane>, Pool) {
        let done = self.returned_in_order();
        for (pool, counts) in [
            (
                Pool::Acceptable,
                &(|l| self.acceptable(l)) as &dyn Fn(Lane) -> bool,
            ),
            (Pool::Usable, &|l| self.usable(l)),
            (Pool::Blank, &|l| self.blank(l)),
            (Pool::Cut, &|l| self.cut(l)),
        ] {
            let lanes: Vec<Lane> = done.iter().copied().filter(|&l| counts(l)).collect();
            if !lanes.is_empty() {
                return (lanes, pool);
            }
        }
        (Vec::new(), Pool::Blank)
    }

    /// The run's rules, applied to its current state: an end, or nothing
    /// yet (and maybe a lane to start).
    pub(super) fn evaluate(&mut self, now: Instant, fx: &mut Vec<Effect>) -> Option<End> {
        if let Some(end) = self.deciding.decided.take() {
            return Some(end);
        }
        if let Some(c) = self.stream.committed {
            if self.lanes[c].phase == Phase::Done {
                // A lane that failed part-way hands its answer on, when
                // the other lane may continue it (`switch`).
                self.switch_committed(c, now, fx);
            }
            let c = self.stream.committed.unwrap_or(c);
            return (self.lanes[c].phase == Phase::Done).then_some(End::Committed(c));
        }
        if self.plan.pick == Pick::FirstAcceptable {
            let first = self
                .returned_in_order()
                .into_iter()
                .find(|&l| self.acceptable(l));
            if let Some(lane) = first {
                return Some(End::Winner {
                    lane,
                    by: DecidedBy::Policy,
                    reason: Reason::FirstAcceptable(lane),
                });
            }
        }
        self.escalate_if_primary_out(now, fx);
        if self.lanes.values().any(|r| r.is_open()) || self.deciding.arbitrating.is_some() {
            return None;
        }
        // Every lane has ended and none was taken on the way.
        let (pool, kind) = self.pool();
        // A lane cut by the deadline can return before the run's own timer
        // fires (both watch the same instant): that is still the deadline.
        let cut_by_deadline = self.lanes.values().any(|r| {
            r.candidate()
                .is_some_and(|c| c.finish_reason == FinishReason::Deadline)
        });
        match pool.len() {
            0 if cut_by_deadline || now >= self.run.deadline => Some(End::Deadline),
            0 => Some(End::NoAnswer(Reason::NoUsableAnswer)),
            1 => Some(End::Winner {
                lane: pool[0],
                by: DecidedBy::Policy,
                reason: Reason::OnlyCandidate {
                    pool: kind,
                    lane: pool[0],
                },
            }),
            _ => {
                let cands = self.scored(&pool);
                if self.run.callbacks.arbiter {
                    self.deciding.arbitrating = Some(cands.clone());
                    self.call(Call::Arbitrate(cands), now, fx);
                    None
                } else {
                    Some(built_in(&cands, |lane| Reason::HighestScore {
                        pool: kind,
                        lane,
                    }))
                }
            }
        }
    }

    /// The scorer's answer (`None`: it failed; the lane stays unscored).
    /// Returns what was invalid about it.
    pub(super) fn on_scored(&mut self, lane: Lane, out: Option<Score>) -> Option<String> {
        let r = &mut self.lanes[lane];
        let invalid = match out {
            Some(s) if s.value.is_finite() => {
                r.score = Some(s);
                None
            }
            Some(s) => Some(format!("non-finite score {}", s.value)),
            None => None,
        };
        if r.phase == Phase::Scoring {
            r.phase = Phase::Done;
        }
        invalid
    }

    /// The arbiter's answer (`None`: it failed; the built-in rule picks).
    /// Returns what was invalid about it.
    pub(super) fn on_arbitrated(&mut self, out: Option<Option<usize>>) -> Option<String> {
        let cands = self.deciding.arbitrating.take().unwrap_or_default();
        let (end, invalid) = match out {
            Some(Some(i)) if i < cands.len() => (
                End::Winner {
                    lane: cands[i].lane,
                    by: DecidedBy::Arbiter,
                    reason: Reason::ArbiterPicked(cands[i].lane),
                },
                None,
            ),
            Some(None) => (End::NoAnswer(Reason::ArbiterRejectedAll), None),
            other => (
                built_in(&cands, Reason::ArbiterFailed),
                other
                    .flatten()
                    .map(|i| format!("index {i} out of range ({} candidates)", cands.len())),
            ),
        };
        self.deciding.decided = Some(end);
        invalid
    }

    /// What the end means: status, winner, reason, who decided, and the
    /// error of a run without a winner.
    pub(super) fn verdict(&self, end: End) -> Verdict {
        let verdict = |status, winner, reason, by, error| Verdict {
            status,
            winner,
            reason,
            by,
            error,
        };
        match end {
            End::Winner { lane, by, reason } => {
                verdict(RunStatus::Ok, Some(lane), reason, by, None)
            }
            End::Committed(lane) => match self.lanes[lane].result.as_ref() {
                // Cut by its length, the answer as far as it went is the
                // committed lane's answer (`Pool::Cut`).
                Some(Ok(c))
                    if c.finish_reason == FinishReason::Stop
                        && self.lanes[lane].invalid.is_some() =>
                {
                    verdict(
                        RunStatus::Failed,
                        None,
                        Reason::CommittedInvalid(lane),
                        DecidedBy::Nobody,
                        Some(format!(
                            "committed lane {lane} gave an invalid answer: {}",
                            self.lanes[lane].invalid.as_deref().unwrap_or_default()
                        )),
                    )
                }
                Some(Ok(c)) if c.finish_reason.is_complete() => verdict(
                    RunStatus::Ok,
                    Some(lane),
                    if self.continues(lane) {
                        Reason::Continued {
                            from: lane.other(),
                            to: lane,
                        }
                    } else {
                        Reason::CommittedCompleted(lane)
                    },
                    DecidedBy::Policy,
                    None,
                ),
                Some(Ok(c)) => verdict(
                    if c.finish_reason == FinishReason::Deadline {
                        RunStatus::DeadlineExceeded
                    } else {
                        RunStatus::Failed
                    },
                    None,
                    Reason::CommittedStoppedEarly(lane),
                    DecidedBy::Nobody,
                    Some(format!(
                        "committed lane {lane} stopped early ({})",
                        c.finish_reason.as_str()
                    )),
                ),
                _ => verdict(
                    RunStatus::Failed,
                    None,
                    Reason::CommittedFailed(lane),
                    DecidedBy::Nobody,
                    Some(format!(
                        "committed lane {lane} failed: {}",
                        self.lanes[lane]
                            .error()
                            .map(|e| format!("({}) {}", e.kind(), crate::error_chain(e)))
                            .unwrap_or_default()
                    )),
                ),
            },
            End::NoAnswer(reason) => {
                let error = format!("{reason} ({})", self.lanes_summary());
                verdict(
                    RunStatus::Failed,
                    None,
                    reason,
                    DecidedBy::Nobody,
                    Some(error),
                )
            }
            End::Abort => verdict(
                RunStatus::Aborted,
                None,
                Reason::Aborted,
                DecidedBy::Nobody,
                Some("aborted".into()),
            ),
            End::Deadline => self.at_deadline(),
        }
    }

    /// The deadline came first: take the best finished answer, if any
    /// (built-in rule; no callback can run now).
    fn at_deadline(&self) -> Verdict {
        if let Some(c) = self.stream.committed {
            let complete = self.lanes[c]
                .candidate()
                .is_some_and(|cand| cand.finish_reason.is_complete());
            return if complete {
                Verdict {
                    status: RunStatus::Ok,
                    winner: Some(c),
                    reason: Reason::CommittedAtDeadline(c),
                    by: DecidedBy::Policy,
                    error: None,
                }
            } else {
                Verdict {
                    status: RunStatus::DeadlineExceeded,
                    winner: None,
                    reason: Reason::DeadlineWhileCommitted(c),
                    by: DecidedBy::Nobody,
                    error: Some(format!(
                        "deadline reached before committed lane {c} finished"
                    )),
                }
            };
        }
        let cands = self.scored(&self.pool().0);
        match pick_highest(&cands) {
            Some(i) => Verdict {
                status: RunStatus::Ok,
                winner: Some(cands[i].lane),
                reason: Reason::DeadlineBestFinished(cands[i].lane),
                by: if cands.len() > 1 {
                    DecidedBy::BuiltIn
                } else {
                    DecidedBy::Policy
                },
                error: None,
            },
            None => Verdict {
                status: RunStatus::DeadlineExceeded,
                winner: None,
                reason: Reason::DeadlineNoUsableAnswer,
                by: DecidedBy::Nobody,
                error: Some(format!(
                    "deadline reached with no usable answer ({})",
                    self.lanes_summary()
                )),
            },
        }
    }
}

/// The built-in rule over `cands`, with the reason it gives a winner.
fn built_in(cands: &[Scored], reason: impl FnOnce(Lane) -> Reason) -> End {
    match pick_highest(cands) {
        Some(i) => End::Winner {
            lane: cands[i].lane,
            by: DecidedBy::BuiltIn,
            reason: reason(cands[i].lane),
        },
        None => End::NoAnswer(Reason::NoCandidate),
    }
}
