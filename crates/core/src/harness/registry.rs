//! Book-keeping shared by a harness and everything it spawned: which
//! workers are running (and which are late), how many runs are in flight,
//! and the counters behind [`HarnessStats`]. Workers hold it by `Arc`, so it
//! outlives the harness while a late worker runs. It never blocks a worker:
//! its lock guards a small map and is never held across an await or a
//! callback.

use crate::lane::Lane;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Counters of a harness since it was built.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HarnessStats {
    /// Runs started.
    pub runs_started: u64,
    /// Runs settled.
    pub runs_settled: u64,
    /// Runs started and not yet settled.
    pub runs_in_flight: u64,
    /// Workers running now (late or not).
    pub workers_running: u64,
    /// Workers that were still running when their run settled, ever.
    pub late_workers_total: u64,
    /// Late workers running now (each keeps its lane busy).
    pub late_workers_running: u64,
    /// Results of late workers that came back and were discarded.
    pub late_results_discarded: u64,
    /// Longest time a late worker ran past its run's settlement.
    pub max_overrun_ms: f64,
    /// Events dropped because a slow observer let its bounded queue fill
    /// (see [`Observer`](super::Observer)).
    pub observer_events_dropped: u64,
}

/// A worker still running when [`shutdown`](super::Harness::shutdown)'s
/// grace ran out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningWorker {
    /// Its run.
    pub run_id: u64,
    /// The lane it holds.
    pub lane: Lane,
    /// Since its admission.
    pub running_ms: f64,
    /// Whether its run has settled.
    pub late: bool,
}

/// What [`shutdown`](super::Harness::shutdown) found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShutdownReport {
    /// How long it waited.
    pub waited_ms: f64,
    /// Runs not yet settled when it stopped waiting.
    pub runs_in_flight: u64,
    /// Workers still running when it stopped waiting (empty: clean).
    pub still_running: Vec<RunningWorker>,
}

impl ShutdownReport {
    /// True when nothing was left running.
    pub fn is_clean(&self) -> bool {
        self.runs_in_flight == 0 && self.still_running.is_empty()
    }
}

struct WorkerEntry {
    run_id: u64,
    lane: Lane,
    started: Instant,
    late: bool,
}

#[derive(Default)]
pub(crate) struct Registry {
    workers: Mutex<HashMap<u64, WorkerEntry>>,
    next_worker: AtomicU64,
    changed: Notify,
    runs_started: AtomicU64,
    runs_settled: AtomicU64,
    late_total: AtomicU64,
    late_discarded: AtomicU64,
    max_overrun_ns: AtomicU64,
}

/// Removes its worker from the registry when dropped: when the worker's
/// task ends on any path, or is dropped unrun.
pub(crate) struct WorkerGuard {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
        self.registry.changed.notify_waiters();
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, WorkerEntry>> {
        // A panic while holding this lock cannot leave the map half-updated
        // (single insert/remove/flag), so a poisoned lock is still usable.
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn worker_started(self: &Arc<Self>, run_id: u64, lane: Lane) -> WorkerGuard {
        let id = self.next_worker.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(
            id,
            WorkerEntry {
                run_id,
                lane,
                started: Instant::now(),
                late: false,
            },
        );
        WorkerGuard {
            registry: self.clone(),
            id,
        }
    }

    /// Marks a worker late (its run settled without it).
    pub(crate) fn mark_late(&self, worker_id: u64) {
        if let Some(w) = self.lock().get_mut(&worker_id) {
            w.late = true;
            self.late_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn late_finished(&self, overrun: Duration) {
        self.late_discarded.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(overrun.as_nanos()).unwrap_or(u64::MAX);
        self.max_overrun_ns.fetch_max(ns, Ordering::Relaxed);
    }

    pub(crate) fn run_started(&self) {
        self.runs_started.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn run_settled(&self) {
        self.runs_settled.fetch_add(1, Ordering::Release);
        self.changed.notify_waiters();
    }

    fn in_flight(&self) -> u64 {
        let settled = self.runs_settled.load(Ordering::Acquire);
        self.runs_started
            .load(Ordering::Relaxed)
            .saturating_sub(settled)
    }

    pub(crate) fn stats(&self) -> HarnessStats {
        let (running, late_running) = {
            let w = self.lock();
            (w.len() as u64, w.values().filter(|w| w.late).count() as u64)
        };
        HarnessStats {
            runs_started: self.runs_started.load(Ordering::Relaxed),
            runs_settled: self.runs_settled.load(Ordering::Relaxed),
            runs_in_flight: self.in_flight(),
            workers_running: running,
            late_workers_total: self.late_total.load(Ordering::Relaxed),
            late_workers_running: late_running,
            late_results_discarded: self.late_discarded.load(Ordering::Relaxed),
            max_overrun_ms: self.max_overrun_ns.load(Ordering::Relaxed) as f64 / 1e6,
            // Filled in by the harness, which owns the event sink.
            observer_events_dropped: 0,
        }
    }

    fn idle(&self) -> bool {
        self.in_flight() == 0 && self.lock().is_empty()
    }

    /// Waits until no run is in flight and no worker runs, or `until`.
    pub(crate) async fn wait_idle(&self, until: Instant) -> ShutdownReport {
        let started = Instant::now();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Register before checking, so a change between the check and
            // the wait is not lost.
            notified.as_mut().enable();
            if self.idle() {
                break;
            }
            let deadline = tokio::time::Instant::from_std(until);
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break;
            }
        }
        let now = Instant::now();
        let still_running = self
            .lock()
            .values()
            .map(|w| RunningWorker {
                run_id: w.run_id,
                lane: w.lane,
                running_ms: crate::millis::to_ms(now - w.started),
                late: w.late,
            })
            .collect();
        ShutdownReport {
            waited_ms: crate::millis::to_ms(now - started),
            runs_in_flight: self.in_flight(),
            still_running,
        }
    }

    /// Whether anything still runs (for the drop-time reaper).
    pub(crate) fn busy(&self) -> bool {
        !self.idle()
    }
}

impl WorkerGuard {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}
