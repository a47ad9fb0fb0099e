//! Whether the cloud lane is reachable: a small state machine (up, down for
//! a cooldown, probing) fed with what each request found, so a lane that
//! is offline is absent from a run at once instead of spending its
//! deadline finding out (docs/DESIGN.md point 12).
//!
//! This module owns the state and its rules, on plain [`Instant`]s (the
//! unit tests drive it with made-up instants); it opens no connection and
//! knows nothing of the harness. The lane feeds it in
//! [`CloudLane::run`](super::CloudLane::run); the harness asks
//! [`CloudLane::admit`](super::CloudLane::admit) at admission.
//!
//! The rules (defaults in [`CooldownPolicy::default`]):
//! - A *connect-level failure* is one where the server was never heard
//!   from: DNS failure, connection refused, connect timeout, TLS failure,
//!   any other connect error, an exchange cut before response headers, and
//!   a deadline that came before the headers. After
//!   `down_after_failures` (3) of them in a row the lane is **down** for a
//!   cooldown (5 s).
//! - An HTTP 429 with `Retry-After` (or `retry-after-ms`) puts the lane
//!   down at once for that long, capped at `max_cooldown`; a 429 without
//!   it counts as one failure.
//! - Anything the server answered (a completion, but also a 401 or a 5xx:
//!   the network is there, the failure is the request's) clears the count
//!   and brings a down lane back up. Cancellation and the caller's own
//!   invalid requests say nothing about the network and change nothing.
//! - Once the cooldown has passed, the next admission becomes the one
//!   **probe** (others see the lane down until it reports); if the probe
//!   fails too, the next cooldown doubles (10 s, 20 s, ... up to
//!   `max_cooldown`, 60 s). Each cooldown gets a random jitter of
//!   ±`jitter` (10%) so devices that lost the network together do not all
//!   probe at the same instant. A probe that ends without saying anything
//!   (cancelled) hands the probe to the next admission.
//!
//! LiteLLM's router (the reference users know) cools a deployment down for
//! 5 s after more than 3 failures in a minute; here the count is of
//! consecutive failures and only of connect-level ones, because a server
//! that answers with errors is reachable and its errors are fast.

use super::CloudError;
use edgecloud_core::rng::SplitMix64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When the lane is marked down and for how long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CooldownPolicy {
    /// Consecutive connect-level failures that mark the lane down
    /// (default 3). `0` turns the whole mechanism off: the lane is never
    /// marked down, not even by a 429's `Retry-After`.
    pub down_after_failures: u32,
    /// The first cooldown (default 5 s); it doubles with each failed probe.
    pub cooldown: Duration,
    /// The longest cooldown, also the cap on a `Retry-After` (default 60 s).
    pub max_cooldown: Duration,
    /// Random spread of each cooldown, as a fraction (default 0.1: ±10%).
    pub jitter: f64,
}

impl Default for CooldownPolicy {
    fn default() -> Self {
        Self {
            down_after_failures: 3,
            cooldown: Duration::from_secs(5),
            max_cooldown: Duration::from_secs(60),
            jitter: 0.1,
        }
    }
}

impl CooldownPolicy {
    /// The cooldown after the `streak`-th time in a row the lane was found
    /// down (1 = the first), before jitter: doubling, capped.
    pub fn base_cooldown(&self, streak: u32) -> Duration {
        let doublings = streak.saturating_sub(1).min(20);
        self.cooldown
            .saturating_mul(1 << doublings)
            .min(self.max_cooldown)
    }

    /// [`base_cooldown`](Self::base_cooldown) with jitter applied; `unit`
    /// is a random number in `[0, 1)` (0.5: no change). Never above
    /// `max_cooldown`.
    fn jittered(&self, streak: u32, unit: f64) -> Duration {
        let spread = 1.0 + self.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        self.base_cooldown(streak)
            .mul_f64(spread.max(0.0))
            .min(self.max_cooldown)
    }

    fn enabled(&self) -> bool {
        self.down_after_failures > 0
    }
}

/// What admission says about sending a job now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The lane is up: send it.
    Open,
    /// The cooldown has passed: send it, as the one probe. Its result
    /// decides whether the lane is back.
    Probe,
    /// The lane is down: treat it as absent.
    Down {
        /// Until the next probe may go (zero while a probe is in flight).
        retry_in: Duration,
        /// Why it is down, in words (the last failure).
        reason: String,
    },
}

/// What one request found out about the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observation {
    /// The server answered (success or an HTTP-level error).
    Reachable,
    /// The server was never heard from.
    ConnectFailure(String),
    /// HTTP 429, with the wait the server asked for, if any.
    RateLimited {
        retry_after: Option<Duration>,
        message: String,
    },
    /// Nothing learnt (cancelled, or the request itself was invalid).
    Neutral,
}

impl Observation {
    /// Classifies one request's result.
    pub(crate) fn of<T>(result: &Result<T, CloudError>) -> Self {
        let Err(e) = result else {
            return Observation::Reachable;
        };
        match e {
            CloudError::Cancelled
            | CloudError::InvalidRequest(_)
            | CloudError::InvalidConfig { .. } => Observation::Neutral,
            CloudError::RateLimited { retry_after, .. } => Observation::RateLimited {
                retry_after: *retry_after,
                message: e.to_string(),
            },
            CloudError::DeadlineBeforeHeaders | CloudError::Transport { .. } => {
                Observation::ConnectFailure(e.to_string())
            }
            e if e.is_connect() => Observation::ConnectFailure(e.to_string()),
            _ => Observation::Reachable,
        }
    }
}

/// The lane's health at a glance (for `/health`, metrics and reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudHealth {
    /// Whether runs treat the lane as absent right now (down, or a probe
    /// is in flight).
    pub down: bool,
    /// Whether a probe is in flight.
    pub probing: bool,
    /// Until the next probe may go, while down.
    pub retry_in: Option<Duration>,
    /// Connect-level failures in a row (while up), or the failure streak
    /// that put the lane down.
    pub consecutive_failures: u32,
    /// Times the lane went from up to down.
    pub went_down: u64,
    /// Times the lane came back up.
    pub recovered: u64,
    /// The last connect-level failure, in words.
    pub last_failure: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Up {
        failures: u32,
    },
    Down {
        until: Instant,
        /// Times in a row the lane was found down (first time: 1).
        streak: u32,
    },
    Probing {
        streak: u32,
    },
}

/// The state machine itself, driven with explicit instants and jitter.
#[derive(Debug, Clone)]
pub(crate) struct HealthState {
    policy: CooldownPolicy,
    state: State,
    went_down: u64,
    recovered: u64,
    last_failure: Option<String>,
}

impl HealthState {
    pub(crate) fn new(policy: CooldownPolicy) -> Self {
        Self {
            policy,
            state: State::Up { failures: 0 },
            went_down: 0,
            recovered: 0,
            last_failure: None,
        }
    }

    /// Whether a job may go now; a passed cooldown makes this one the probe.
    pub(crate) fn admit(&mut self, now: Instant) -> Admission {
        match self.state {
            State::Up { .. } => Admission::Open,
            State::Down { until, streak } if now >= until => {
                self.state = State::Probing { streak };
                Admission::Probe
            }
            State::Down { until, .. } => Admission::Down {
                retry_in: until - now,
                reason: self.reason(),
            },
            State::Probing { .. } => Admission::Down {
                retry_in: Duration::ZERO,
                reason: format!("{}; a probe is in flight", self.reason()),
            },
        }
    }

    fn reason(&self) -> String {
        self.last_failure
            .clone()
            .unwrap_or_else(|| "connect-level failures".into())
    }

    /// Takes in what one request found. `unit` is a random number in
    /// `[0, 1)` for the jitter.
    pub(crate) fn observe(&mut self, obs: Observation, now: Instant, unit: f64) {
        if !self.policy.enabled() {
            return;
        }
        match obs {
            Observation::Neutral => {
                // A probe that learnt nothing passes the probe on.
                if let State::Probing { streak } = self.state {
                    self.state = State::Down { until: now, streak };
                }
            }
            Observation::Reachable => {
                if !matches!(self.state, State::Up { .. }) {
                    self.recovered += 1;
                }
                self.state = State::Up { failures: 0 };
            }
            Observation::ConnectFailure(message) => {
                self.last_failure = Some(message);
                self.fail(now, unit);
            }
            Observation::RateLimited {
                retry_after,
                message,
            } => {
                self.last_failure = Some(message);
                match retry_after.map(|d| d.min(self.policy.max_cooldown)) {
                    Some(wait) if !wait.is_zero() => {
                        let streak = match self.state {
                            State::Up { .. } => {
                                self.went_down += 1;
                                1
                            }
                            State::Down { streak, .. } | State::Probing { streak } => streak,
                        };
                        // The server said when: no jitter, and never
                        // shorter than a cooldown already running.
                        let until = match self.state {
                            State::Down { until, .. } => until.max(now + wait),
                            _ => now + wait,
                        };
                        self.state = State::Down { until, streak };
                    }
                    _ => self.fail(now, unit),
                }
            }
        }
    }

    fn fail(&mut self, now: Instant, unit: f64) {
        match self.state {
            State::Up { failures } => {
                let failures = failures + 1;
                if failures >= self.policy.down_after_failures {
                    self.went_down += 1;
                    self.state = State::Down {
                        until: now + self.policy.jittered(1, unit),
                        streak: 1,
                    };
                } else {
                    self.state = State::Up { failures };
                }
            }
            State::Probing { streak } => {
                let streak = streak + 1;
                self.state = State::Down {
                    until: now + self.policy.jittered(streak, unit),
                    streak,
                };
            }
            // A job sent while down (a direct call, not admitted) failing
            // too changes nothing: the cooldown already runs.
            State::Down { .. } => {}
        }
    }

    pub(crate) fn snapshot(&self, now: Instant) -> CloudHealth {
        let (down, probing, retry_in, consecutive_failures) = match self.state {
            State::Up { failures } => (false, false, None, failures),
            State::Down { until, streak } => (
                true,
                false,
                Some(until.saturating_duration_since(now)),
                streak,
            ),
            State::Probing { streak } => (true, true, Some(Duration::ZERO), streak),
        };
        CloudHealth {
            down,
            probing,
            retry_in,
            consecutive_failures,
            went_down: self.went_down,
            recovered: self.recovered,
            last_failure: self.last_failure.clone(),
        }
    }
}

/// The state machine behind a lock, with the real clock and a jitter
/// source: what a [`CloudLane`](super::CloudLane) holds.
#[derive(Debug)]
pub(crate) struct Health {
    state: Mutex<(HealthState, SplitMix64)>,
}

impl Health {
    pub(crate) fn new(policy: CooldownPolicy) -> Self {
        use std::hash::{BuildHasher, Hasher};
        // A per-lane random seed without a dependency: the standard
        // library seeds `RandomState` from the OS.
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Self {
            state: Mutex::new((HealthState::new(policy), SplitMix64::new(seed))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HealthState, SplitMix64)> {
        // The state is plain data updated in one step; a panic elsewhere
        // cannot leave it half-written.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn admit(&self) -> Admission {
        self.lock().0.admit(Instant::now())
    }

    pub(crate) fn observe(&self, obs: Observation) {
        let mut g = self.lock();
        let (state, rng) = &mut *g;
        // The top 53 bits as a uniform in [0, 1): plenty for spreading
        // cooldowns.
        let unit = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let before = state.snapshot(Instant::now()).down;
        state.observe(obs, Instant::now(), unit);
        let after = state.snapshot(Instant::now());
        if before != after.down {
            if after.down {
                tracing::warn!(
                    retry_in_ms = after.retry_in.unwrap_or_default().as_millis() as u64,
                    reason = after.last_failure.as_deref().unwrap_or(""),
                    "cloud lane marked down"
                );
            } else {
                tracing::info!("cloud lane is back up");
            }
        }
    }

    pub(crate) fn snapshot(&self) -> CloudHealth {
        self.lock().0.snapshot(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Observation {
        Observation::ConnectFailure("connection refused by 127.0.0.1:9".into())
    }

    fn policy() -> CooldownPolicy {
        CooldownPolicy {
            jitter: 0.0,
            ..CooldownPolicy::default()
        }
    }

    #[test]
    fn down_after_three_consecutive_failures_for_the_cooldown() {
        let t0 = Instant::now();
        let mut h = HealthState::new(policy());
        for _ in 0..2 {
            h.observe(refused(), t0, 0.5);
            assert_eq!(h.admit(t0), Admission::Open);
        }
        h.observe(refused(), t0, 0.5);
        match h.admit(t0 + Duration::from_secs(1)) {
            Admission::Down { retry_in, reason } => {
                assert_eq!(retry_in, Duration::from_secs(4));
                assert!(reason.contains("refused"), "{reason}");
            }
            other => panic!("expected down, got {other:?}"),
        }
        let s = h.snapshot(t0);
        assert!(s.down && !s.probing);
        assert_eq!(s.went_down, 1);
    }

    #[test]
    fn a_success_in_between_resets_the_count() {
        let t0 = Instant::now();
        let mut h = HealthState::new(policy());
        h.observe(refused(), t0, 0.5);
        h.observe(refused(), t0, 0.5);
        h.observe(Observation::Reachable, t0, 0.5);
        h.observe(refused(), t0, 0.5);
        h.observe(refused(), t0, 0.5);
        assert_eq!(h.admit(t0), Admission::Open);
        assert_eq!(h.snapshot(t0).went_down, 0);
    }

    #[test]
    fn one_probe_after_the_cooldown_and_success_clears_it() {
        let t0 = Instant::now();
        let mut h = HealthState::new(policy());
        for _ in 0..3 {
            h.observe(refused(), t0, 0.5);
        }
        let later = t0 + Duration::from_secs(5);
        assert_eq!(h.admit(later), Admission::Probe);
        // Only one probe: the next admission sees the lane down.
        assert!(matches!(
            h.admit(later),
            Admission::Down { retry_in, .. } if retry_in.is_zero()
        ));
        assert!(h.snapshot(later).probing);
        h.observe(Observation::Reachable, later, 0.5);
        assert_eq!(h.admit(later), Admission::Open);
        let s = h.snapshot(later);
        assert!(!s.down);
        assert_eq!((s.went_down, s.recovered), (1, 1));
    }

    #[test]
    fn a_failed_probe_doubles_the_cooldown_up_to_the_cap() {
        let t0 = Instant::now();
        let mut h = HealthState::new(policy());
        for _ in 0..3 {
            h.observe(refused(), t0, 0.5);
        }
        let mut now = t0;
        let mut seen = Vec::new();
        for _ in 0..6 {
            let Admission::Down { retry_in, .. } = h.admit(now) else {
                panic!("expected down");
            };
            seen.push(retry_in.as_secs());
            now += retry_in;
            assert_eq!(h.admit(now), Admission::Probe);
            h.observe(refused(), now, 0.5);
        }
        assert_eq!(seen, [5, 10, 20, 40, 60, 60]);
        // Up to down happened once; failed probes are not new transitions.
        assert_eq!(h.snapshot(now).went_down, 1);
    }

    #[test]
    fn jitter_spreads_within_bounds_and_never_passes_the_cap() {
        let p = CooldownPolicy::default();
        assert_eq!(p.jittered(1, 0.0), Duration::from_millis(4500));
        assert_eq!(p.jittered(1, 0.5), Duration::from_secs(5));
        assert!(p.jittered(1, 0.999_999) <= Duration::from_millis(5500));
        assert_eq!(p.jittered(10, 0.999), Duration::from_secs(60));
        assert!(p.jittered(10, 0.0) < Duration::from_secs(60));
    }

    #[test]
    fn retry_after_puts_it_down_at_once_capped() {
        let t0 = Instant::now();
        let mut h = HealthState::new(policy());
        h.observe(
            Observation::RateLimited {
                retry_after: Some(Duration::from_secs(2)),
                message: "rate limited".into(),
            },
            t0,
            0.5,
        );
        assert!(matches!(
            h.admit(t0),
            Admission::Down { retry_in, .. } if retry_in == Duration::from_secs(2)
        ));
        assert_eq!(h.admit(t0 + Duration::from_secs(2)), Admission::Probe);
        h.observe(
            Observation::RateLimited {
                retry_after: Some(Duration::from_secs(86_400)),
                message: "rate limited".into(),
            },
            t0 + Duration::from_secs(2),
            0.5,
        );
        assert!(matches!(
            h.admit(t0 + Duration::from_secs(2)),
            Admission::Down { retry_in, .. } if retry_in == Duration::from_secs(60)
        ));
    }

    #[test]
    fn a_429_without_retry_after_counts_as_one_failure() {
        let t0 = Instant::now();
        let mut h = HealthState::new(policy());
        let limited = || Observation::RateLimited {
            retry_after: None,
            message: "rate limited".into(),
        };
        h.observe(limited(), t0, 0.5);
        assert_eq!(h.admit(t0), Admission::Open);
        h.observe(limited(), t0, 0.5);
        h.observe(refused(), t0, 0.5);
        assert!(matches!(h.admit(t0), Admission::Down { .. }));
    }

    #[test]
    fn a_probe_that_learns_nothing_passes_the_probe_on() {
        let t0 = Instant::now();
        let mut h = HealthState::new(policy());
        for _ in 0..3 {
            h.observe(refused(), t0, 0.5);
        }
        let later = t0 + Duration::from_secs(6);
        assert_eq!(h.admit(later), Admission::Probe);
        h.observe(Observation::Neutral, later, 0.5);
        assert_eq!(h.admit(later), Admission::Probe);
    }

    #[test]
    fn neutral_results_never_count() {
        let t0 = Instant::now();
        let mut h = HealthState::new(policy());
        for _ in 0..10 {
            h.observe(Observation::Neutral, t0, 0.5);
        }
        assert_eq!(h.admit(t0), Admission::Open);
    }

    #[test]
    fn zero_failures_turns_it_off() {
        let t0 = Instant::now();
        let mut h = HealthState::new(CooldownPolicy {
            down_after_failures: 0,
            ..policy()
        });
        for _ in 0..10 {
            h.observe(refused(), t0, 0.5);
        }
        h.observe(
            Observation::RateLimited {
                retry_after: Some(Duration::from_secs(5)),
                message: "x".into(),
            },
            t0,
            0.5,
        );
        assert_eq!(h.admit(t0), Admission::Open);
    }

    #[test]
    fn classification_of_cloud_errors() {
        let ok: Result<(), CloudError> = Ok(());
        assert_eq!(Observation::of(&ok), Observation::Reachable);
        let e = |e: CloudError| Observation::of::<()>(&Err(e));
        assert!(matches!(
            e(CloudError::DeadlineBeforeHeaders),
            Observation::ConnectFailure(_)
        ));
        assert_eq!(e(CloudError::Cancelled), Observation::Neutral);
        assert_eq!(
            e(CloudError::Server {
                status: 503,
                message: "x".into()
            }),
            Observation::Reachable
        );
        assert!(matches!(
            e(CloudError::RateLimited {
                retry_after: Some(Duration::from_secs(1)),
                message: "x".into()
            }),
            Observation::RateLimited {
                retry_after: Some(_),
                ..
            }
        ));
        assert_eq!(
            e(CloudError::DeadlineBeforeFirstToken { status: 200 }),
            Observation::Reachable
        );
    }
}
