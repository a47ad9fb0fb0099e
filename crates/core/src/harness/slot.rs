//! Lane slots: one per configured lane, holding the shared backend and a
//! one-permit semaphore. Admission is `try_acquire` (a busy lane is absent,
//! nothing queues, docs/DESIGN.md point 2); the permit goes into the worker's
//! [`LaneJob`](crate::lane::LaneJob) and is released by RAII wherever the
//! work really ends. This module must not start workers or decide policy.

use super::backend::{Backend, BackendInfo};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Successful latencies kept per lane for the adaptive hedge delay.
const LATENCY_WINDOW: usize = 64;
/// Samples needed before the p95 is trusted.
const LATENCY_MIN_SAMPLES: usize = 8;

pub(crate) struct LaneSlot {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) info: BackendInfo,
    pub(crate) observes_cancellation: bool,
    permits: Arc<Semaphore>,
    latencies: Mutex<VecDeque<Duration>>,
}

impl LaneSlot {
    pub(crate) fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            info: backend.info(),
            observes_cancellation: backend.observes_cancellation(),
            backend,
            permits: Arc::new(Semaphore::new(1)),
            latencies: Mutex::new(VecDeque::with_capacity(LATENCY_WINDOW)),
        }
    }

    /// The lane's permit if it is free right now; never waits.
    pub(crate) fn try_admit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// Whether a worker holds the lane.
    pub(crate) fn is_busy(&self) -> bool {
        self.permits.available_permits() == 0
    }

    /// Records a successful job's latency (admission to return).
    pub(crate) fn record_latency(&self, d: Duration) {
        let mut l = self.latencies.lock().unwrap_or_else(|p| p.into_inner());
        if l.len() == LATENCY_WINDOW {
            l.pop_front();
        }
        l.push_back(d);
    }

    /// The p95 of recent successful latencies, once there are enough.
    pub(crate) fn p95(&self) -> Option<Duration> {
        let mut v: Vec<Duration> = {
            let l = self.latencies.lock().unwrap_or_else(|p| p.into_inner());
            if l.len() < LATENCY_MIN_SAMPLES {
                return None;
            }
            l.iter().copied().collect()
        };
        v.sort_unstable();
        let idx = ((v.len() as f64) * 0.95).ceil() as usize;
        v.get(idx.saturating_sub(1)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::backend::{BackendFuture, Candidate};
    use crate::lane::{FinishReason, LaneJob};

    struct Nop;
    impl Backend for Nop {
        fn info(&self) -> BackendInfo {
            BackendInfo::named("nop")
        }
        fn run(&self, _job: LaneJob) -> BackendFuture {
            Box::pin(async { Ok(Candidate::new("", FinishReason::Stop)) })
        }
    }

    #[test]
    fn one_permit_and_it_comes_back_on_drop() {
        let s = LaneSlot::new(Arc::new(Nop));
        let p = s.try_admit().expect("a fresh slot is free");
        assert!(s.is_busy());
        assert!(s.try_admit().is_none());
        drop(p);
        assert!(s.try_admit().is_some());
    }

    #[test]
    fn p95_needs_samples() {
        let s = LaneSlot::new(Arc::new(Nop));
        for ms in 1..=7 {
            s.record_latency(Duration::from_millis(ms));
        }
        assert_eq!(s.p95(), None);
        for ms in 8..=100 {
            s.record_latency(Duration::from_millis(ms));
        }
        // The window holds 37..=100; the 95th percentile of 64 values is the
        // 61st: 97 ms.
        assert_eq!(s.p95(), Some(Duration::from_millis(97)));
    }
}
