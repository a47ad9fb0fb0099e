//! Policies: which lanes start, when, and how a winner is picked; and each
//! policy's streaming commit point. This module turns a [`Policy`] into a
//! crate-internal plan; it must not run anything.
//!
//! | policy | starts | secondary starts | winner | stream commit (`first_token` mode) |
//! |---|---|---|---|---|
//! | `local-only` | local | never | local | local's first token |
//! | `cloud-only` | cloud | never | cloud | cloud's first token |
//! | `race` | both | at once | first acceptable | first lane to produce a token |
//! | `hedge` | primary | after the hedge delay, or at once if the primary fails or is busy | first acceptable | first lane to produce a token (a committed primary cancels the hedge) |
//! | `cascade` | local | when local fails, is unacceptable (score below threshold) or overruns its share of the deadline | first acceptable | local: once it passed its score; cloud: its first token |
//! | `fallback` | cloud | when the cloud fails, is unacceptable or overruns its share | first acceptable | the cloud's first token; local: its first token |
//! | `best-of` | both | at once | arbiter over those finished by the deadline | at the decision |
//!
//! Acceptable: finished whole (`stop` or `length`), not blank, and, where a
//! threshold applies (`cascade`'s local threshold, or the route's
//! `min_score`), scored at or above it. When every lane has ended and none
//! was acceptable, the usable ones (whole, not blank) go to the arbiter:
//! a low-scored answer beats no answer, and the decision says so.
//!
//! With `commit = "completion"` (or when the caller does not stream), every
//! policy commits at its decision: the winner's text reaches the caller in
//! one piece (or as its buffered tokens) at settlement. A lane that streamed
//! but was not committed to never reaches the caller. Once committed, a run
//! cannot switch lanes: if the committed lane then fails, the run fails.

use crate::lane::{Lane, PerLane};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Default cascade threshold on the local answer's score (see
/// [`DefaultScorer`](super::scoring::DefaultScorer)): a geometric-mean token
/// probability of 0.4 is a mean log-prob of about -0.92.
pub const DEFAULT_CASCADE_THRESHOLD: f64 = 0.4;
/// Default share of the deadline the first lane of `cascade` and `fallback`
/// gets before the other lane takes over.
pub const DEFAULT_PRIMARY_SHARE: f64 = 0.5;

/// Which lanes run and how the winner is picked. See the module docs for
/// the table of start rules and commit points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Policy {
    /// The local lane alone.
    LocalOnly,
    /// The cloud lane alone.
    CloudOnly,
    /// Both at once; the first acceptable answer wins, the other is
    /// cancelled.
    Race,
    /// The primary now, the other lane after `delay`; first acceptable wins.
    Hedge {
        /// The lane that starts first.
        primary: Lane,
        /// When the other lane starts. `None`: adaptively, at the primary's
        /// p95 latency over its last 64 successful jobs (once it has 8),
        /// else at half the deadline.
        #[serde(with = "crate::millis::optional", default)]
        delay: Option<Duration>,
    },
    /// Local first; the cloud (with the remaining deadline) when local
    /// fails, scores below `threshold`, or overruns `local_share` of the
    /// deadline.
    Cascade {
        /// Lowest acceptable local score.
        threshold: f64,
        /// Share of the deadline local may use alone, in (0, 1].
        local_share: f64,
    },
    /// Cloud first; local when the cloud fails, is unacceptable, or overruns
    /// `cloud_share` of the deadline (offline resilience).
    Fallback {
        /// Share of the deadline the cloud may use alone, in (0, 1].
        cloud_share: f64,
    },
    /// Both at once; the arbiter picks among those finished by the
    /// deadline (or when both have finished).
    BestOf,
}

impl Policy {
    /// `race`.
    pub fn race() -> Self {
        Policy::Race
    }

    /// `hedge` with the local lane as primary and the given delay.
    pub fn hedge(delay: Duration) -> Self {
        Policy::Hedge {
            primary: Lane::Local,
            delay: Some(delay),
        }
    }

    /// `cascade` with the given threshold and the default local share.
    pub fn cascade(threshold: f64) -> Self {
        Policy::Cascade {
            threshold,
            local_share: DEFAULT_PRIMARY_SHARE,
        }
    }

    /// `fallback` with the default cloud share.
    pub fn fallback() -> Self {
        Policy::Fallback {
            cloud_share: DEFAULT_PRIMARY_SHARE,
        }
    }

    /// The policy with default parameters for a kind.
    pub fn from_kind(kind: PolicyKind) -> Self {
        match kind {
            PolicyKind::LocalOnly => Policy::LocalOnly,
            PolicyKind::CloudOnly => Policy::CloudOnly,
            PolicyKind::Race => Policy::Race,
            PolicyKind::Hedge => Policy::Hedge {
                primary: Lane::Local,
                delay: None,
            },
            PolicyKind::Cascade => Policy::cascade(DEFAULT_CASCADE_THRESHOLD),
            PolicyKind::Fallback => Policy::fallback(),
            PolicyKind::BestOf => Policy::BestOf,
        }
    }

    /// Which kind of policy this is.
    pub fn kind(&self) -> PolicyKind {
        match self {
            Policy::LocalOnly => PolicyKind::LocalOnly,
            Policy::CloudOnly => PolicyKind::CloudOnly,
            Policy::Race => PolicyKind::Race,
            Policy::Hedge { .. } => PolicyKind::Hedge,
            Policy::Cascade { .. } => PolicyKind::Cascade,
            Policy::Fallback { .. } => PolicyKind::Fallback,
            Policy::BestOf => PolicyKind::BestOf,
        }
    }

    /// The policy a request names by `name` (`cascade`, `best-of`, ...):
    /// the one of that kind in `presets` (a configuration's, with its
    /// thresholds and shares), else the kind's defaults. What serve and the
    /// bindings do with a request's `edgecloud.policy`.
    pub fn named(name: &str, presets: &[Policy]) -> Result<Policy, UnknownPolicy> {
        let kind: PolicyKind = name.parse()?;
        Ok(presets
            .iter()
            .find(|p| p.kind() == kind)
            .cloned()
            .unwrap_or_else(|| Policy::from_kind(kind)))
    }

    /// Checks the parameters, naming the first one out of range.
    pub fn validate(&self) -> Result<(), String> {
        let share_ok = |s: f64| s.is_finite() && s > 0.0 && s <= 1.0;
        match *self {
            Policy::Cascade {
                threshold,
                local_share,
            } => {
                if !threshold.is_finite() {
                    return Err("cascade threshold must be a finite number".into());
                }
                if !share_ok(local_share) {
                    return Err("cascade local_share must be in (0, 1]".into());
                }
            }
            Policy::Fallback { cloud_share } if !share_ok(cloud_share) => {
                return Err("fallback cloud_share must be in (0, 1]".into());
            }
            _ => {}
        }
        Ok(())
    }
}

impl Default for Policy {
    /// `race`: the lowest latency when both lanes are healthy.
    fn default() -> Self {
        Policy::Race
    }
}

/// The name of a policy, without parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// `local-only`.
    LocalOnly,
    /// `cloud-only`.
    CloudOnly,
    /// `race`.
    Race,
    /// `hedge`.
    Hedge,
    /// `cascade`.
    Cascade,
    /// `fallback`.
    Fallback,
    /// `best-of`.
    BestOf,
}

impl PolicyKind {
    /// Every kind, in documentation order.
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::LocalOnly,
        PolicyKind::CloudOnly,
        PolicyKind::Race,
        PolicyKind::Hedge,
        PolicyKind::Cascade,
        PolicyKind::Fallback,
        PolicyKind::BestOf,
    ];

    /// The kebab-case name (`best-of`).
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::LocalOnly => "local-only",
            PolicyKind::CloudOnly => "cloud-only",
            PolicyKind::Race => "race",
            PolicyKind::Hedge => "hedge",
            PolicyKind::Cascade => "cascade",
            PolicyKind::Fallback => "fallback",
            PolicyKind::BestOf => "best-of",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy name that is not one of the seven.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy `{0}`; expected one of local-only, cloud-only, race, hedge, cascade, fallback, best-of")]
pub struct UnknownPolicy(pub String);

impl FromStr for PolicyKind {
    type Err = UnknownPolicy;

    /// Accepts `best-of`, `best_of` and any letter case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.as_str() == norm)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// When a streaming run commits to a lane (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitMode {
    /// At the policy's earliest commit point (lowest time to first token).
    #[default]
    FirstToken,
    /// Only at the decision (a committed lane can never strand the run).
    Completion,
}

/// When the second lane of a plan starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SecondaryStart {
    /// With the primary.
    Immediately,
    /// After this long from the run's start (hedge).
    After(Duration),
    /// When the primary's share of the deadline is used up (cascade,
    /// fallback); the primary is then cancelled.
    AtShare(f64),
}

/// How the winner is picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// The first acceptable candidate, in finishing order.
    FirstAcceptable,
    /// The arbiter over all that finished.
    Arbitrate,
}

/// A policy made concrete for one run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) primary: Lane,
    pub(crate) secondary: Option<Lane>,
    pub(crate) start: SecondaryStart,
    pub(crate) pick: Pick,
    /// Threshold the primary's score must reach to be acceptable.
    pub(crate) primary_threshold: Option<f64>,
    /// Whether each lane (primary, secondary) may commit at its first token.
    pub(crate) first_token_commit: (bool, bool),
    /// Whether the pre-score callback is asked about the cloud lane.
    pub(crate) consult_pre_score: bool,
}

impl Plan {
    /// The plan for `policy`. `hedge_default` is the adaptive hedge delay
    /// to use when the policy does not fix one.
    pub(crate) fn new(policy: &Policy, hedge_default: impl FnOnce(Lane) -> Duration) -> Plan {
        let single = |lane| Plan {
            primary: lane,
            secondary: None,
            start: SecondaryStart::Immediately,
            pick: Pick::FirstAcceptable,
            primary_threshold: None,
            first_token_commit: (true, false),
            consult_pre_score: false,
        };
        match *policy {
            Policy::LocalOnly => single(Lane::Local),
            Policy::CloudOnly => single(Lane::Cloud),
            Policy::Race => Plan {
                primary: Lane::Local,
                secondary: Some(Lane::Cloud),
                start: SecondaryStart::Immediately,
                pick: Pick::FirstAcceptable,
                primary_threshold: None,
                first_token_commit: (true, true),
                consult_pre_score: true,
            },
            Policy::Hedge { primary, delay } => Plan {
                primary,
                secondary: Some(primary.other()),
                start: SecondaryStart::After(delay.unwrap_or_else(|| hedge_default(primary))),
                pick: Pick::FirstAcceptable,
                primary_threshold: None,
                first_token_commit: (true, true),
                consult_pre_score: true,
            },
            Policy::Cascade {
                threshold,
                local_share,
            } => Plan {
                primary: Lane::Local,
                secondary: Some(Lane::Cloud),
                start: SecondaryStart::AtShare(local_share),
                pick: Pick::FirstAcceptable,
                primary_threshold: Some(threshold),
                first_token_commit: (false, true),
                consult_pre_score: true,
            },
            Policy::Fallback { cloud_share } => Plan {
                primary: Lane::Cloud,
                secondary: Some(Lane::Local),
                start: SecondaryStart::AtShare(cloud_share),
                pick: Pick::FirstAcceptable,
                primary_threshold: None,
                first_token_commit: (true, true),
                consult_pre_score: true,
            },
            Policy::BestOf => Plan {
                primary: Lane::Local,
                secondary: Some(Lane::Cloud),
                start: SecondaryStart::Immediately,
                pick: Pick::Arbitrate,
                primary_threshold: None,
                first_token_commit: (false, false),
                consult_pre_score: true,
            },
        }
    }

    /// Whether `lane` is part of this plan.
    pub(crate) fn uses(&self, lane: Lane) -> bool {
        self.primary == lane || self.secondary == Some(lane)
    }

    /// The lanes this plan may use and the ones it starts with at once:
    /// what a harness with several instances looks at to pick one.
    pub(crate) fn lane_needs(&self) -> LaneNeeds {
        let mut first = vec![self.primary];
        if let (Some(secondary), SecondaryStart::Immediately) = (self.secondary, self.start) {
            first.push(secondary);
        }
        LaneNeeds {
            uses: PerLane::from_fn(|lane| self.uses(lane)),
            first,
        }
    }

    /// Whether `lane` may commit at its first token.
    pub(crate) fn commits_at_first_token(&self, lane: Lane) -> bool {
        if lane == self.primary {
            self.first_token_commit.0
        } else {
            self.secondary == Some(lane) && self.first_token_commit.1
        }
    }
}

/// Which lanes a run may use, and which it starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaneNeeds {
    pub(crate) uses: PerLane<bool>,
    pub(crate) first: Vec<Lane>,
}

impl LaneNeeds {
    /// The same needs among the lanes `configured` says are there.
    pub(crate) fn only(self, configured: impl Fn(Lane) -> bool) -> LaneNeeds {
        LaneNeeds {
            uses: PerLane::from_fn(|lane| self.uses[lane] && configured(lane)),
            first: self.first.into_iter().filter(|&l| configured(l)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_typos_are_named() {
        for k in PolicyKind::ALL {
            assert_eq!(k.as_str().parse::<PolicyKind>(), Ok(k));
            assert_eq!(Policy::from_kind(k).kind(), k);
        }
        assert_eq!("BEST_OF".parse::<PolicyKind>(), Ok(PolicyKind::BestOf));
        let e = "racer".parse::<PolicyKind>().unwrap_err();
        assert!(e.to_string().contains("`racer`"));
    }

    #[test]
    fn bad_parameters_are_rejected() {
        assert!(Policy::cascade(f64::NAN).validate().is_err());
        assert!(Policy::Cascade {
            threshold: 0.5,
            local_share: 0.0
        }
        .validate()
        .is_err());
        assert!(Policy::Fallback { cloud_share: 1.5 }.validate().is_err());
        assert!(Policy::fallback().validate().is_ok());
    }

    #[test]
    fn plans_follow_the_table() {
        let fixed = |_| Duration::from_secs(9);
        let p = Plan::new(&Policy::from_kind(PolicyKind::Hedge), fixed);
        assert_eq!(p.start, SecondaryStart::After(Duration::from_secs(9)));
        let p = Plan::new(&Policy::cascade(0.3), fixed);
        assert_eq!(p.primary_threshold, Some(0.3));
        assert!(!p.commits_at_first_token(Lane::Local));
        assert!(p.commits_at_first_token(Lane::Cloud));
        let p = Plan::new(&Policy::fallback(), fixed);
        assert_eq!((p.primary, p.secondary), (Lane::Cloud, Some(Lane::Local)));
        let p = Plan::new(&Policy::LocalOnly, fixed);
        assert!(!p.uses(Lane::Cloud));
        assert!(!p.consult_pre_score);
    }

    #[test]
    fn lane_needs_follow_the_plan_for_every_policy() {
        let both = PerLane::new(true, true);
        for kind in PolicyKind::ALL {
            let policy = Policy::from_kind(kind);
            let needs = Plan::new(&policy, |_| Duration::ZERO).lane_needs();
            let (uses, first): (PerLane<bool>, &[Lane]) = match kind {
                PolicyKind::LocalOnly => (PerLane::new(true, false), &[Lane::Local]),
                PolicyKind::CloudOnly => (PerLane::new(false, true), &[Lane::Cloud]),
                PolicyKind::Race | PolicyKind::BestOf => (both, &Lane::ALL),
                PolicyKind::Hedge | PolicyKind::Cascade => (both, &[Lane::Local]),
                PolicyKind::Fallback => (both, &[Lane::Cloud]),
            };
            assert_eq!(needs.uses, uses, "{kind:?}");
            assert_eq!(needs.first, first, "{kind:?}");
        }
        let cloud_only = Plan::new(&Policy::Race, |_| Duration::ZERO)
            .lane_needs()
            .only(|lane| lane == Lane::Cloud);
        assert_eq!(cloud_only.uses, PerLane::new(false, true));
        assert_eq!(cloud_only.first, [Lane::Cloud]);
    }
}
