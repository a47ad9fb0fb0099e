//! Retries that do not pay twice: a run carrying an idempotency key
//! ([`RunOptions::idempotency_key`](crate::harness::RunOptions::idempotency_key))
//! whose answer is recorded is answered from the record, marked as a
//! replay, without running a lane. This module keeps the keys whose first
//! run is in flight in this process (a second arrival waits for it, or is
//! told it is in flight), compares a key's request with the one it was
//! first used with (another request is a conflict), and records a run's
//! answer in the store when it settles. It must not run anything.
//!
//! Only an `ok` outcome is recorded: a run that failed, missed its
//! deadline or was aborted is run again by its retry (its cause may have
//! passed).

use super::calendar;
use super::store::{fnv128, LedgerStore, Record, StoreError};
use crate::harness::outcome::{Outcome, RunStatus};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// A replayed outcome's mark: which run answered it, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Replay {
    /// The idempotency key.
    pub key: String,
    /// The run whose answer this is.
    pub of_run_id: u64,
    /// When it was recorded (RFC 3339, UTC).
    pub recorded_at: String,
}

/// What a key's arrival finds.
pub(crate) enum Begin {
    /// Its answer is recorded: replay it.
    Replay(Box<Outcome>),
    /// The key was used with another request.
    Conflict,
    /// Its first run is in flight in this process: wait for the change.
    InFlight(watch::Receiver<bool>),
    /// Run it; the ticket records the answer.
    Fresh(Ticket),
}

struct Flight {
    fingerprint: String,
    done: watch::Sender<bool>,
}

/// The keys of one harness.
pub(crate) struct Idempotency {
    store: LedgerStore,
    flights: Mutex<HashMap<String, Flight>>,
}

impl Idempotency {
    pub(crate) fn new(store: LedgerStore) -> Arc<Self> {
        Arc::new(Self {
            store,
            flights: Mutex::new(HashMap::new()),
        })
    }

    /// A request's fingerprint: what must be the same for a key's replay.
    pub(crate) fn fingerprint(parts: &impl Serialize) -> String {
        let bytes = serde_json::to_vec(parts).expect("a request serializes");
        fnv128(&bytes)
    }

    /// The arrival of `key` with a request of `fingerprint`.
    pub(crate) fn begin(
        self: &Arc<Self>,
        key: &str,
        fingerprint: &str,
    ) -> Result<Begin, StoreError> {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = flights.get(key) {
            return Ok(if f.fingerprint == fingerprint {
                Begin::InFlight(f.done.subscribe())
            } else {
                Begin::Conflict
            });
        }
        if let Some(r) = self.store.record(key)? {
            return Ok(if r.fingerprint == fingerprint {
                let mut o = r.outcome.clone();
                o.replay = Some(Replay {
                    key: key.to_string(),
                    of_run_id: r.outcome.run_id,
                    recorded_at: calendar::rfc3339(r.recorded_unix_ms.div_euclid(1000)),
                });
                Begin::Replay(Box::new(o))
            } else {
                Begin::Conflict
            });
        }
        let (done, _) = watch::channel(false);
        flights.insert(
            key.to_string(),
            Flight {
                fingerprint: fingerprint.to_string(),
                done,
            },
        );
        Ok(Begin::Fresh(Ticket {
            idem: self.clone(),
            key: key.to_string(),
            fingerprint: fingerprint.to_string(),
        }))
    }

    fn land(&self, key: &str) {
        let f = self
            .flights
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        if let Some(f) = f {
            let _ = f.done.send(true);
        }
    }
}

/// A key's first run: records its answer when it settles; dropped
/// unsettled (the run never started), it frees the key.
pub(crate) struct Ticket {
    idem: Arc<Idempotency>,
    key: String,
    fingerprint: String,
}

impl Ticket {
    /// The run settled with `outcome`: an `ok` one is recorded (visible at
    /// once, on disk shortly after); waiters wake either way.
    pub(crate) fn settle(self, outcome: &Outcome) {
        if outcome.status == RunStatus::Ok {
            self.idem.store.put_record(Record {
                key: self.key.clone(),
                fingerprint: self.fingerprint.clone(),
                recorded_unix_ms: calendar::now_unix_ms(),
                outcome: outcome.clone(),
            });
        }
        // Drop lands the flight.
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.idem.land(&self.key);
    }
}
