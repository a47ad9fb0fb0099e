//! The part of a run that outlives its task: the state that workers
//! and abort handles share with it (settled or not, abort requested or
//! not), the channel workers report on, and what happens to a late
//! worker's result (counted and discarded; a late cloud worker's
//! reported usage added to the ledger's spending). It must not decide anything
//! about the run; it only knows whether the run has settled.

use crate::harness::backend::{BackendError, Candidate};
use crate::harness::decision::{Finished, Input};
use crate::harness::ledger::LateSpend;
use crate::harness::observer::{Event, EventSink};
use crate::harness::registry::Registry;
use crate::lane::{CancellationToken, Lane, PromptScore};
use crate::millis::to_ms;
use crate::reasoning::Piece;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::mpsc;

/// What an abort request achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortResult {
    /// This was the first abort; the run will settle as `aborted`.
    Accepted,
    /// An abort was already requested; nothing more happens.
    AlreadyRequested,
    /// The run had already settled; nothing happens.
    Stale,
}

/// A message from a worker to its run's task.
pub(crate) enum WorkerMsg {
    Token {
        lane: Lane,
        piece: Piece,
    },
    Logprob {
        lane: Lane,
        logprob: f32,
    },
    PromptScore {
        lane: Lane,
        score: PromptScore,
    },
    /// Boxed: tokens are the frequent message and stay small.
    Finished(Box<Finished>),
}

impl From<WorkerMsg> for Input {
    fn from(msg: WorkerMsg) -> Input {
        match msg {
            WorkerMsg::Token { lane, piece } => Input::Token { lane, piece },
            WorkerMsg::Logprob { lane, logprob } => Input::Logprob { lane, logprob },
            WorkerMsg::PromptScore { lane, score } => Input::PromptScore { lane, score },
            WorkerMsg::Finished(f) => Input::Finished(f),
        }
    }
}

pub(super) struct SharedState {
    pub(super) settled_at: Option<Instant>,
    pub(super) abort_requested: bool,
    /// Where a late cloud worker's spending goes (set at settlement
    /// when the harness keeps a ledger store).
    pub(super) late_spend: Option<LateSpend>,
}

/// The part of a run that workers and abort handles share with the
/// run's task, and that outlives it while late workers run.
pub(crate) struct RunShared {
    pub(crate) run_id: u64,
    state: Mutex<SharedState>,
    pub(super) tx: mpsc::UnboundedSender<WorkerMsg>,
    events: EventSink,
    registry: Arc<Registry>,
    pub(super) abort: CancellationToken,
}

impl RunShared {
    pub(super) fn new(
        run_id: u64,
        tx: mpsc::UnboundedSender<WorkerMsg>,
        events: EventSink,
        registry: Arc<Registry>,
    ) -> Self {
        Self {
            run_id,
            state: Mutex::new(SharedState {
                settled_at: None,
                abort_requested: false,
                late_spend: None,
            }),
            tx,
            events,
            registry,
            abort: CancellationToken::new(),
        }
    }

    /// The shared part of a run that settled before it began (a replayed
    /// answer): nothing reports to it, and an abort is stale.
    pub(crate) fn settled(run_id: u64, events: EventSink, registry: Arc<Registry>) -> Arc<Self> {
        let (tx, _) = mpsc::unbounded_channel();
        let shared = Self::new(run_id, tx, events, registry);
        shared.lock().settled_at = Some(Instant::now());
        Arc::new(shared)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SharedState> {
        // Two plain fields; a panic elsewhere cannot leave them torn.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn is_settled(&self) -> bool {
        self.lock().settled_at.is_some()
    }

    pub(crate) fn abort(&self) -> AbortResult {
        let mut st = self.lock();
        if st.settled_at.is_some() {
            AbortResult::Stale
        } else if st.abort_requested {
            AbortResult::AlreadyRequested
        } else {
            st.abort_requested = true;
            drop(st);
            self.abort.cancel();
            AbortResult::Accepted
        }
    }

    /// A worker's result: to the run's task while the run is open, else
    /// counted and discarded (late worker).
    pub(super) fn worker_finished(
        &self,
        lane: Lane,
        result: Result<Candidate, BackendError>,
        at: Instant,
        saw_cancel: bool,
    ) {
        let st = self.lock();
        match st.settled_at {
            None => {
                // Unbounded: never blocks; the run's task drains it at
                // settlement under this same lock, so nothing is lost.
                let _ = self.tx.send(WorkerMsg::Finished(Box::new(Finished {
                    lane,
                    result,
                    at,
                    saw_cancel,
                })));
            }
            Some(settled) => {
                if let (Lane::Cloud, Some(spend), Ok(c)) = (lane, &st.late_spend, &result) {
                    spend.record(c);
                }
                let overrun = at.saturating_duration_since(settled);
                self.registry.late_finished(overrun);
                tracing::debug!(
                    run_id = self.run_id,
                    %lane,
                    overrun_ms = to_ms(overrun),
                    "late worker returned; result discarded"
                );
                self.events.emit(|| Event::LateWorkerFinished {
                    run_id: self.run_id,
                    lane,
                    overrun_ms: to_ms(overrun),
                    returned_ok: result.is_ok(),
                });
            }
        }
    }
}
