//! The harness's hold on an instance while one of its runs uses it: a
//! counter per instance and a wake-up for requests waiting for one. A
//! [`Claim`] travels inside the [`RunHandle`](super::RunHandle) and is
//! released when the handle is dropped or its outcome taken, as a lane's
//! permit travels with its work. This module counts; it must not pick
//! instances (the harness does) nor run anything.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// Runs of the harness in flight on each instance, and the signal that
/// one was released.
pub(crate) struct Claims {
    claimed: Vec<AtomicUsize>,
    released: Notify,
}

impl Claims {
    pub(crate) fn new(instances: usize) -> Self {
        Self {
            claimed: (0..instances).map(|_| AtomicUsize::new(0)).collect(),
            released: Notify::new(),
        }
    }

    /// Per instance, whether a run of the harness is in flight on it.
    pub(crate) fn held(&self) -> Vec<bool> {
        self.claimed
            .iter()
            .map(|c| c.load(Ordering::Acquire) > 0)
            .collect()
    }

    /// Claims instance `index` whatever else runs on it (a harness of one
    /// instance: its own lane admission decides).
    pub(crate) fn add(self: &Arc<Self>, index: usize) -> Claim {
        self.claimed[index].fetch_add(1, Ordering::AcqRel);
        Claim {
            claims: Arc::clone(self),
            index,
        }
    }

    /// Claims instance `index` only when nothing runs on it.
    pub(crate) fn try_take(self: &Arc<Self>, index: usize) -> Option<Claim> {
        self.claimed[index]
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Claim {
                claims: Arc::clone(self),
                index,
            })
    }

    /// Wakes whoever waits for a release (a waiter left the queue: the
    /// next one may look now).
    pub(crate) fn wake_waiters(&self) {
        self.released.notify_waiters();
    }

    /// Resolves when a claim is released after this call (register it
    /// before looking for a free instance, so no release is missed).
    pub(crate) fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }
}

/// One run's hold on one instance.
pub(crate) struct Claim {
    claims: Arc<Claims>,
    index: usize,
}

impl Claim {
    /// The instance held.
    pub(crate) fn index(&self) -> usize {
        self.index
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.claims.claimed[self.index].fetch_sub(1, Ordering::AcqRel);
        self.claims.released.notify_waiters();
    }
}
