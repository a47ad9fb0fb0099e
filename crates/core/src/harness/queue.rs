//! The order of requests waiting for an instance of a pool (a bounded
//! wait, `Harness::start_within`): first come, first served. Only the
//! request at the head of the queue may claim an instance; one that
//! arrives while others wait joins behind them. Without an order every
//! released instance went to whichever waiter or newcomer looked first
//! (waiters look every few milliseconds), so some requests waited through
//! several releases: with 8 clients on 4 instances the p95 latency was
//! 1.8 times llama-server's, whose queue is in order.
//!
//! This module only keeps the order; claiming is the harness's (`api`),
//! and the wake-up of waiters is the claims' (`claim`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The tickets of the requests waiting, oldest first.
#[derive(Default)]
pub(crate) struct WaitQueue {
    next: AtomicU64,
    tickets: Mutex<VecDeque<u64>>,
}

impl WaitQueue {
    /// Whether nobody waits (a newcomer may then claim at once).
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Joins at the back; the place leaves the queue when dropped (a
    /// claim, a wait given up, a caller gone), and `on_leave` runs then so
    /// the next one can look.
    pub(crate) fn join<'q>(&'q self, on_leave: &'q (dyn Fn() + Sync)) -> Place<'q> {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().push_back(ticket);
        Place {
            queue: self,
            ticket,
            on_leave,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<u64>> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One waiting request's place in the queue.
pub(crate) struct Place<'q> {
    queue: &'q WaitQueue,
    ticket: u64,
    on_leave: &'q (dyn Fn() + Sync),
}

impl Place<'_> {
    /// Whether it is this request's turn.
    pub(crate) fn is_first(&self) -> bool {
        self.queue.lock().front() == Some(&self.ticket)
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        {
            let mut tickets = self.queue.lock();
            if let Some(at) = tickets.iter().position(|&t| t == self.ticket) {
                tickets.remove(at);
            }
        }
        (self.on_leave)();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn the_oldest_waiter_goes_first_and_a_place_leaves_when_dropped() {
        let q = WaitQueue::default();
        let left = AtomicUsize::new(0);
        let on_leave = || {
            left.fetch_add(1, Ordering::Relaxed);
        };
        assert!(q.is_empty());
        let a = q.join(&on_leave);
        let b = q.join(&on_leave);
        let c = q.join(&on_leave);
        assert!(a.is_first() && !b.is_first() && !c.is_first());
        // One in the middle gives up: the order of the others stands.
        drop(b);
        assert_eq!((q.len(), left.load(Ordering::Relaxed)), (2, 1));
        assert!(a.is_first() && !c.is_first());
        drop(a);
        assert!(c.is_first());
        drop(c);
        assert!(q.is_empty());
        assert_eq!(left.load(Ordering::Relaxed), 3);
    }
}
