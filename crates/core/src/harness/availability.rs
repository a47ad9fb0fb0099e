//! Whether a lane's engine can take a job now, as a backend reports it
//! ([`Backend::availability`](super::Backend::availability)), and its
//! health at a glance ([`LaneHealth`]). Plain data: the rules that decide
//! (for the cloud lane: `cloud::health`) live with the backend; the
//! harness only asks at admission and treats a lane that is down like a
//! busy one: absent from the run at once (docs/DESIGN.md point 12).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A backend's answer at admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Send the job.
    Ready,
    /// Send the job: it is the one probe of a lane that was down.
    Probe,
    /// Leave the lane out of this run: its report says `unavailable`.
    Down {
        /// Until the backend will try again.
        retry_in: Duration,
        /// Why, in words.
        reason: String,
    },
}

/// A lane's reachability at a glance (serve's `/health` and `/metrics`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaneHealth {
    /// Whether runs leave the lane out right now.
    pub down: bool,
    /// Whether a probe is in flight.
    pub probing: bool,
    /// Until the next probe, while down, in milliseconds.
    pub retry_in_ms: Option<f64>,
    /// Connect-level failures in a row.
    pub consecutive_failures: u32,
    /// Times the lane went from up to down.
    pub went_down: u64,
    /// Times the lane came back up.
    pub recovered: u64,
    /// The last connect-level failure, in words.
    pub last_failure: Option<String>,
}

/// The note of a lane left out because it is down: why, and when it will
/// be tried again.
pub(crate) fn unavailable_note(retry_in: Duration, reason: &str) -> String {
    if retry_in.is_zero() {
        format!("down ({reason}); a probe is due")
    } else {
        format!("down ({reason}); next probe in {} ms", retry_in.as_millis())
    }
}
