//! Callback calls as the core sees them: what to call ([`Call`], which the
//! shell turns into a call of the route's callback, inline or on a
//! blocking thread), what came back ([`CbOutput`]), the pending calls and
//! one [`CallbackReport`] per call (ok, panicked, invalid, or timed out at
//! settlement). A failed or invalid answer becomes the callback's
//! documented default here. It must not call anything.

use super::{Core, Effect};
use crate::harness::backend::Candidate;
use crate::harness::callbacks::{
    CallResult, CallbackKind, CallbackReport, CallbackStatus, CloudNeed, Compressed, Score, Scored,
};
use crate::lane::Lane;
use crate::millis::to_ms;
use std::collections::BTreeMap;
use std::time::Instant;

/// A callback to call, with what it is called on.
#[derive(Debug)]
pub(crate) enum Call {
    /// The pre-score, on the request.
    PreScore,
    /// The compressor, on the request's messages.
    Compress,
    /// The scorer, on a lane's whole answer.
    Score {
        lane: Lane,
        candidate: Box<Candidate>,
    },
    /// The arbiter, on the usable candidates.
    Arbitrate(Vec<Scored>),
}

impl Call {
    pub(crate) fn kind(&self) -> CallbackKind {
        match self {
            Call::PreScore => CallbackKind::PreScore,
            Call::Compress => CallbackKind::Compress,
            Call::Score { .. } => CallbackKind::Score,
            Call::Arbitrate(_) => CallbackKind::Arbitrate,
        }
    }

    fn lane(&self) -> Option<Lane> {
        match self {
            Call::Score { lane, .. } => Some(*lane),
            Call::Compress => Some(Lane::Cloud),
            Call::PreScore | Call::Arbitrate(_) => None,
        }
    }
}

/// What a callback returned.
#[derive(Debug)]
pub(crate) enum CbOutput {
    PreScore(CloudNeed),
    Compress(Compressed),
    Score(Score),
    Arbitrate(Option<usize>),
}

struct PendingCall {
    kind: CallbackKind,
    lane: Option<Lane>,
    started: Instant,
}

/// The run's callback calls.
#[derive(Default)]
pub(super) struct Calls {
    /// By id, so abandoned calls are reported in the order they were made.
    pending: BTreeMap<u64, PendingCall>,
    next_id: u64,
    pub(super) reports: Vec<CallbackReport>,
}

impl Core {
    /// Asks the shell to call a callback.
    pub(super) fn call(&mut self, call: Call, now: Instant, fx: &mut Vec<Effect>) {
        let id = self.calls.next_id;
        self.calls.next_id += 1;
        self.calls.pending.insert(
            id,
            PendingCall {
                kind: call.kind(),
                lane: call.lane(),
                started: now,
            },
        );
        fx.push(Effect::Call { id, call });
    }

    /// Applies a callback's result, or its documented default, and
    /// reports the call.
    pub(super) fn on_called(
        &mut self,
        id: u64,
        result: Result<CallResult<CbOutput>, String>,
        now: Instant,
        fx: &mut Vec<Effect>,
    ) {
        let Some(p) = self.calls.pending.remove(&id) else {
            return;
        };
        let res = result.unwrap_or_else(|failed| CallResult {
            // The call catches its own panics; a failed task means the
            // runtime is shutting down. Treat it like a panic: defaults.
            value: Err(failed),
            elapsed: now.saturating_duration_since(p.started),
        });
        let (status, detail, out) = match res.value {
            Ok(out) => (CallbackStatus::Ok, None, Some(out)),
            Err(msg) => (CallbackStatus::Panicked, Some(msg), None),
        };
        let mut report = CallbackReport {
            kind: p.kind,
            lane: p.lane,
            elapsed_ms: to_ms(res.elapsed),
            status,
            over_budget: res.elapsed > self.run.callback_budget,
            detail,
        };
        if report.over_budget {
            tracing::warn!(
                run_id = self.run.run_id,
                callback = p.kind.as_str(),
                elapsed_ms = report.elapsed_ms,
                budget_ms = to_ms(self.run.callback_budget),
                "callback over its time budget"
            );
        }
        if report.status == CallbackStatus::Panicked {
            tracing::warn!(
                run_id = self.run.run_id,
                callback = p.kind.as_str(),
                panic = report.detail.as_deref().unwrap_or(""),
                "callback panicked; using its default"
            );
        }
        let invalid = match (p.kind, out) {
            (CallbackKind::PreScore, out) => {
                let need = match out {
                    Some(CbOutput::PreScore(n)) => n,
                    _ => CloudNeed::Needed,
                };
                self.on_pre_score(need, now, fx);
                None
            }
            (CallbackKind::Compress, out) => {
                let out = match out {
                    Some(CbOutput::Compress(c)) => Some(c),
                    _ => None,
                };
                self.on_compressed(out, now, fx)
            }
            (CallbackKind::Score, out) => {
                let lane = p.lane.expect("score calls are always about a lane");
                let out = match out {
                    Some(CbOutput::Score(s)) => Some(s),
                    _ => None,
                };
                self.on_scored(lane, out)
            }
            (CallbackKind::Arbitrate, out) => {
                let out = match out {
                    Some(CbOutput::Arbitrate(pick)) => Some(pick),
                    _ => None,
                };
                self.on_arbitrated(out)
            }
        };
        if let Some(why) = invalid {
            report.status = CallbackStatus::Invalid;
            report.detail = Some(why);
        }
        self.calls.reports.push(report);
    }

    /// Reports for the calls still pending at settlement: abandoned.
    pub(super) fn abandoned_calls(&self, now: Instant) -> Vec<CallbackReport> {
        self.calls
            .pending
            .values()
            .map(|p| {
                let waited = now.saturating_duration_since(p.started);
                CallbackReport {
                    kind: p.kind,
                    lane: p.lane,
                    elapsed_ms: to_ms(waited),
                    status: CallbackStatus::TimedOut,
                    over_budget: waited > self.run.callback_budget,
                    detail: Some("abandoned at settlement".into()),
                }
            })
            .collect()
    }
}
