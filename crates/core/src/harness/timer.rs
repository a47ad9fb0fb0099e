//! A precise one-shot timer for run deadlines.
//!
//! tokio's timer wheel has millisecond granularity: a `sleep_until` can
//! wake up to a millisecond after its instant, which alone would spend the
//! overshoot budget (docs/DESIGN.md point 1, p99 < 2 ms; measured: tokio's sleep
//! put the median overshoot at 1.17 ms). Deadlines instead go through one
//! process-wide thread (`edgecloud-deadlines`) that parks on a condition
//! variable until the earliest registered instant (a futex wait, precise to
//! tens of microseconds) and wakes the waiting task. If that thread cannot
//! be started, deadlines fall back to tokio's timer.
//!
//! This module only keeps time; it must not know what a run is.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

#[derive(Default)]
pub(crate) struct Slot {
    fired: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    slots: HashMap<u64, Arc<Slot>>,
    next_id: u64,
}

struct Timer {
    state: Mutex<State>,
    changed: Condvar,
}

impl Timer {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a heap and a map updated in single steps; a panic
        // cannot leave them inconsistent beyond a stale heap entry, which
        // the loop skips.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self) {
        let mut st = self.lock();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            let mut next = None;
            while let Some(&Reverse((at, id))) = st.heap.peek() {
                if !st.slots.contains_key(&id) {
                    st.heap.pop();
                } else if at <= now {
                    st.heap.pop();
                    if let Some(slot) = st.slots.remove(&id) {
                        due.push(slot);
                    }
                } else {
                    next = Some(at);
                    break;
                }
            }
            if !due.is_empty() {
                drop(st);
                for slot in due {
                    slot.fired.store(true, Ordering::Release);
                    let waker = slot.waker.lock().unwrap_or_else(|p| p.into_inner()).take();
                    if let Some(w) = waker {
                        w.wake();
                    }
                }
                st = self.lock();
                continue;
            }
            st = match next {
                Some(at) => {
                    self.changed
                        .wait_timeout(st, at.saturating_duration_since(now))
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.changed.wait(st).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

/// The shared timer, started on first use; `None` if its thread could not
/// be started.
fn timer() -> Option<&'static Timer> {
    static TIMER: OnceLock<Option<&'static Timer>> = OnceLock::new();
    *TIMER.get_or_init(|| {
        let t: &'static Timer = Box::leak(Box::new(Timer {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }));
        match std::thread::Builder::new()
            .name("edgecloud-deadlines".into())
            .spawn(move || {
                // It wakes at deadlines: it must preempt llama.cpp's
                // compute threads at once (see crate::sched).
                crate::sched::prefer_short_slices();
                t.run()
            }) {
            Ok(_) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "no deadline thread; using tokio's millisecond timer");
                None
            }
        }
    })
}

/// A future that completes at `at`.
pub(crate) enum Sleep {
    Precise { id: u64, slot: Arc<Slot> },
    Coarse(Pin<Box<tokio::time::Sleep>>),
}

/// Completes at `at` (precisely, see the module docs).
pub(crate) fn sleep_until(at: Instant) -> Sleep {
    let Some(t) = timer() else {
        return Sleep::Coarse(Box::pin(tokio::time::sleep_until(
            tokio::time::Instant::from_std(at),
        )));
    };
    let slot = Arc::new(Slot::default());
    let mut st = t.lock();
    let id = st.next_id;
    st.next_id += 1;
    let earliest = st.heap.peek().is_none_or(|Reverse((first, _))| at < *first);
    st.heap.push(Reverse((at, id)));
    st.slots.insert(id, slot.clone());
    drop(st);
    if earliest {
        t.changed.notify_one();
    }
    Sleep::Precise { id, slot }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            Sleep::Coarse(s) => s.as_mut().poll(cx),
            Sleep::Precise { slot, .. } => {
                if slot.fired.load(Ordering::Acquire) {
                    return Poll::Ready(());
                }
                *slot.waker.lock().unwrap_or_else(|p| p.into_inner()) = Some(cx.waker().clone());
                // Fired between the check and the registration: the timer
                // may have missed the waker.
                if slot.fired.load(Ordering::Acquire) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Sleep::Precise { id, slot } = self {
            if !slot.fired.load(Ordering::Acquire) {
                if let Some(t) = timer() {
                    // The heap entry goes stale and is skipped.
                    t.lock().slots.remove(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fires_in_order_and_never_early() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let start = Instant::now();
        let ats: Vec<Instant> = [30u64, 10, 20]
            .iter()
            .map(|ms| start + Duration::from_millis(*ms))
            .collect();
        rt.block_on(async {
            for at in &ats {
                sleep_until(*at).await;
                assert!(Instant::now() >= *at);
            }
            // A past instant completes at once.
            sleep_until(start).await;
        });
    }

    #[test]
    fn dropped_sleeps_leave_no_slot() {
        let s = sleep_until(Instant::now() + Duration::from_secs(3600));
        let Sleep::Precise { id, .. } = &s else {
            panic!("the timer thread starts in tests");
        };
        let id = *id;
        let t = timer().expect("started");
        assert!(t.lock().slots.contains_key(&id));
        drop(s);
        assert!(!t.lock().slots.contains_key(&id));
    }
}
