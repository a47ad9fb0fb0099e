//! Observers: the [`Event`]s a run emits and their delivery. Events go
//! through one FIFO channel to a dedicated thread (`edgecloud-observers`)
//! that calls each observer with panics caught, so a slow or panicking
//! observer can delay only later events, never a run or its settlement.
//!
//! Order: a run's events are sent by its task in order; `run_settled`
//! is sent while the run's state lock is held at the moment it becomes
//! settled, and a late worker sends `late_worker_finished` under that same
//! lock after seeing the run settled. One channel, so every observer sees
//! `run_started` first, `run_settled` exactly once after every earlier
//! event of that run, and late-worker events after it. The channel is
//! bounded (`EVENT_QUEUE_CAPACITY` events): when a stuck or slow observer
//! lets it fill, further events are dropped and counted
//! (`HarnessStats::observer_events_dropped`, serve's
//! `edgecloud_observer_events_dropped_total`) rather than blocking a run or
//! growing memory without limit. Events that are delivered keep their
//! order. The dispatcher thread ends when the harness and its last late
//! worker are gone.

use super::outcome::{LaneStatus, RunStatus};
use super::policy::PolicyKind;
use crate::lane::Lane;
use serde::{Deserialize, Serialize};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

/// Events queued for the observers before new ones are dropped: at a few
/// hundred bytes each, at most a few MiB held for an observer that stopped.
pub(crate) const EVENT_QUEUE_CAPACITY: usize = 8192;

/// Something that happened in a run. Every event names its run;
/// `at_ms` counts from the run's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// The run began; its deadline is fixed.
    RunStarted {
        /// The run.
        run_id: u64,
        /// Its route.
        route: String,
        /// Its policy.
        policy: PolicyKind,
        /// Its time budget.
        deadline_ms: f64,
    },
    /// A lane's slot was taken and its worker started.
    LaneAdmitted {
        /// The run.
        run_id: u64,
        /// The lane.
        lane: Lane,
        /// When.
        at_ms: f64,
    },
    /// A lane was busy and is absent from the run.
    LaneBusy {
        /// The run.
        run_id: u64,
        /// The lane.
        lane: Lane,
        /// When.
        at_ms: f64,
    },
    /// The pre-score callback decided the cloud lane is not needed.
    LaneSkipped {
        /// The run.
        run_id: u64,
        /// The lane.
        lane: Lane,
        /// When.
        at_ms: f64,
    },
    /// A lane produced its first token.
    FirstToken {
        /// The run.
        run_id: u64,
        /// The lane.
        lane: Lane,
        /// When.
        at_ms: f64,
    },
    /// A lane's worker returned before settlement.
    LaneFinished {
        /// The run.
        run_id: u64,
        /// The lane.
        lane: Lane,
        /// `completed`, `failed` or `cancelled`.
        status: LaneStatus,
        /// When.
        at_ms: f64,
    },
    /// The deadline came before a decision.
    DeadlineReached {
        /// The run.
        run_id: u64,
        /// When.
        at_ms: f64,
    },
    /// The winner was picked (or none could be).
    Decision {
        /// The run.
        run_id: u64,
        /// The winner.
        winner: Option<Lane>,
        /// Why.
        reason: String,
        /// When.
        at_ms: f64,
    },
    /// The run settled. Exactly once per run.
    RunSettled {
        /// The run.
        run_id: u64,
        /// How it ended.
        status: RunStatus,
        /// The winner.
        winner: Option<Lane>,
        /// Start to settlement.
        elapsed_ms: f64,
        /// Past the deadline.
        overshoot_ms: f64,
        /// Workers still running.
        late_workers: u32,
    },
    /// A worker of an already settled run returned; its result was
    /// discarded.
    LateWorkerFinished {
        /// The run it belonged to.
        run_id: u64,
        /// The lane it held until now.
        lane: Lane,
        /// How long after settlement it returned.
        overrun_ms: f64,
        /// Whether it returned a completion (`true`) or an error.
        returned_ok: bool,
    },
}

impl Event {
    /// The run the event belongs to.
    pub fn run_id(&self) -> u64 {
        match self {
            Event::RunStarted { run_id, .. }
            | Event::LaneAdmitted { run_id, .. }
            | Event::LaneBusy { run_id, .. }
            | Event::LaneSkipped { run_id, .. }
            | Event::FirstToken { run_id, .. }
            | Event::LaneFinished { run_id, .. }
            | Event::DeadlineReached { run_id, .. }
            | Event::Decision { run_id, .. }
            | Event::RunSettled { run_id, .. }
            | Event::LateWorkerFinished { run_id, .. } => *run_id,
        }
    }

    /// The event's snake-case name (`run_settled`).
    pub fn name(&self) -> &'static str {
        match self {
            Event::RunStarted { .. } => "run_started",
            Event::LaneAdmitted { .. } => "lane_admitted",
            Event::LaneBusy { .. } => "lane_busy",
            Event::LaneSkipped { .. } => "lane_skipped",
            Event::FirstToken { .. } => "first_token",
            Event::LaneFinished { .. } => "lane_finished",
            Event::DeadlineReached { .. } => "deadline_reached",
            Event::Decision { .. } => "decision",
            Event::RunSettled { .. } => "run_settled",
            Event::LateWorkerFinished { .. } => "late_worker_finished",
        }
    }
}

/// Receives every event of every run, on the observers' thread.
pub trait Observer: Send + Sync + 'static {
    /// Called once per event, in order.
    fn on_event(&self, event: &Event);
}

impl<F> Observer for F
where
    F: Fn(&Event) + Send + Sync + 'static,
{
    fn on_event(&self, event: &Event) {
        self(event)
    }
}

/// Where a run sends its events: nowhere when no observer is configured.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventSink {
    tx: Option<mpsc::SyncSender<Event>>,
    dropped: Arc<AtomicU64>,
}

impl EventSink {
    /// Sends an event; never blocks. A full queue drops it and counts it;
    /// a closed dispatcher drops it.
    pub(crate) fn emit(&self, event: impl FnOnce() -> Event) {
        if let Some(tx) = &self.tx {
            if let Err(mpsc::TrySendError::Full(event)) = tx.try_send(event()) {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        event = event.name(),
                        run_id = event.run_id(),
                        capacity = EVENT_QUEUE_CAPACITY,
                        "observer queue full: events are dropped (and counted) until observers catch up"
                    );
                }
            }
        }
    }

    /// Events dropped because the observers' queue was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Starts the dispatcher thread for `observers` (none: a sink that
    /// drops everything, without a thread).
    pub(crate) fn start(observers: Vec<Arc<dyn Observer>>) -> std::io::Result<EventSink> {
        Self::start_with_capacity(observers, EVENT_QUEUE_CAPACITY)
    }

    fn start_with_capacity(
        observers: Vec<Arc<dyn Observer>>,
        capacity: usize,
    ) -> std::io::Result<EventSink> {
        if observers.is_empty() {
            return Ok(EventSink::default());
        }
        let (tx, rx) = mpsc::sync_channel::<Event>(capacity);
        std::thread::Builder::new()
            .name("edgecloud-observers".into())
            .spawn(move || {
                for event in rx {
                    for o in &observers {
                        if let Err(p) = catch_unwind(AssertUnwindSafe(|| o.on_event(&event))) {
                            tracing::warn!(
                                event = event.name(),
                                run_id = event.run_id(),
                                panic = %crate::panic_payload::message(&*p),
                                "observer panicked; later events are still delivered"
                            );
                        }
                    }
                }
            })?;
        Ok(EventSink {
            tx: Some(tx),
            dropped: Arc::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn event(run_id: u64) -> Event {
        Event::DeadlineReached { run_id, at_ms: 0.0 }
    }

    /// A stuck observer costs dropped (counted) events, not memory, and
    /// never blocks the sender; once it moves again, what was queued is
    /// delivered in order.
    #[test]
    fn a_stuck_observer_drops_and_counts_instead_of_queueing_forever() {
        let (entered_tx, entered_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (seen_tx, seen_rx) = mpsc::channel::<u64>();
        let hooks = Mutex::new((entered_tx, release_rx, seen_tx));
        let observer = move |e: &Event| {
            let hooks = hooks.lock().unwrap();
            if e.run_id() == 0 {
                let _ = hooks.0.send(());
                let _ = hooks.1.recv();
            }
            let _ = hooks.2.send(e.run_id());
        };
        const CAP: usize = 16;
        let sink = EventSink::start_with_capacity(vec![Arc::new(observer)], CAP).unwrap();
        sink.emit(|| event(0));
        entered_rx.recv().unwrap(); // the observer now holds event 0, stuck
        for id in 1..=100 {
            sink.emit(|| event(id)); // never blocks
        }
        assert_eq!(sink.dropped(), 100 - CAP as u64);
        release_tx.send(()).unwrap();
        let wait = std::time::Duration::from_secs(30);
        let delivered: Vec<u64> = (0..=CAP)
            .map(|_| seen_rx.recv_timeout(wait).unwrap())
            .collect();
        assert_eq!(delivered, (0..=CAP as u64).collect::<Vec<_>>(), "in order");
    }
}
