//! One `[harness]` or `[routes.NAME]` table of the configuration file:
//! its keys ([`RouteConfig`]), their checks and their translation into a
//! [`Route`]. The file as a whole (lanes, pool, serve, models) and its
//! reading belong to the crate that starts lanes (`edgecloud_core::harness::
//! HarnessConfig`, which documents every key); this module must not read
//! files or know a lane's settings.

use super::callbacks::Named;
use super::compression::KeepRecent;
use super::error::{ConfigError, Setting};
use super::ledger::CloudBudget;
use super::policy::{
    CommitMode, Policy, PolicyKind, DEFAULT_CASCADE_THRESHOLD, DEFAULT_PRIMARY_SHARE,
};
use super::route::Route;
use super::scoring::{ConfidenceScorer, DefaultScorer, GenericScorer, Signal, SignalScorer};
use crate::lane::Lane;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// The settings of `[harness]` or one `[routes.NAME]` table (see the module
/// docs for each key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// `local-only`, `cloud-only`, `race`, `hedge`, `cascade`, `fallback`
    /// or `best-of`.
    pub policy: Option<String>,
    /// The run's time budget, in milliseconds.
    pub deadline_ms: Option<u64>,
    /// `first_token` or `completion`: when a streaming run commits.
    pub commit: Option<CommitMode>,
    /// Lowest score any candidate needs to be acceptable.
    pub min_score: Option<f64>,
    /// `hedge`: when the second lane starts (default: adaptive p95).
    pub hedge_delay_ms: Option<u64>,
    /// `hedge`: the lane that starts first (default `local`).
    pub hedge_primary: Option<Lane>,
    /// `cascade`: lowest acceptable local score (default 0.4).
    pub cascade_threshold: Option<f64>,
    /// `cascade`: the local lane's share of the deadline (default 0.5).
    pub local_share: Option<f64>,
    /// `cascade`: escalate when the local answer's signal is below a value
    /// in the signal's own units (instead of `cascade_threshold` on a
    /// score).
    pub escalate_below: Option<EscalateBelow>,
    /// `cascade` with `escalate_below` on a streamable signal: escalate as
    /// soon as the signal of the tokens so far is below the value.
    pub escalate_early: Option<bool>,
    /// `cascade`: a first stage on the prompt's score (two-stage routing).
    pub prompt_escalate_below: Option<EscalateBelow>,
    /// `fallback`: the cloud lane's share of the deadline (default 0.5).
    pub cloud_share: Option<f64>,
    /// `default`, `generic`, `confidence`, `none`, or a registered name.
    pub scorer: Option<String>,
    /// `highest` (the built-in rule) or a registered name.
    pub arbiter: Option<String>,
    /// `none` or a registered name.
    pub pre_score: Option<String>,
    /// `none`, `keep-recent` or a registered name.
    pub compressor: Option<String>,
    /// Budget of the built-in `keep-recent` compressor, in estimated
    /// tokens (implies `keep-recent`).
    pub compress_max_tokens: Option<u64>,
    /// Time a callback may take before a `tracing` warning.
    pub callback_budget_ms: Option<f64>,
    /// How long a run that cancels workers before its deadline waits for
    /// them.
    pub cancel_grace_ms: Option<f64>,
    /// `[harness]` only: the route used when a run names none.
    pub default_route: Option<String>,
    /// `[routes.NAME]` only, for `edgecloud serve` with several models:
    /// the local model (a `[[models]]` name) this route runs on.
    pub model: Option<String>,
    /// `[routes.NAME]` only: the model the cloud lane is asked for on this
    /// route (default: `[cloud] model`).
    pub cloud_model: Option<String>,
    /// `edgecloud serve`'s `POST /v1/embeddings` on this route: `local`
    /// (the default) or `cloud` (passed through to the cloud endpoint's
    /// `/v1/embeddings`). A route without it takes `[harness]`'s.
    pub embeddings: Option<Lane>,
    /// The route's cloud budget: `"5 usd/day"`, `"$20/month"`,
    /// `"2000000 tokens/month"` (docs/cost.md). A route without it takes
    /// `[harness]`'s.
    pub cloud_budget: Option<String>,
    /// The share of the budget (0 to 1, default 0.8) from which a hybrid
    /// route leans local.
    pub cloud_budget_lean_at: Option<f64>,
}

/// A cascade threshold in a signal's own units (`escalate_below`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EscalateBelow {
    /// The signal the local answer is judged by.
    pub signal: Signal,
    /// The lowest value that keeps the local answer (escalate below it).
    pub value: f64,
}

fn ms(key: &str, field: &str, v: Option<f64>) -> Result<Option<Duration>, ConfigError> {
    match v {
        None => Ok(None),
        Some(v) if v.is_finite() && v >= 0.0 => Ok(Some(Duration::from_secs_f64(v / 1000.0))),
        Some(_) => Err(ConfigError::invalid_field(
            key,
            Setting::Timing,
            field,
            "must be a number of milliseconds >= 0",
        )),
    }
}

impl RouteConfig {
    /// The table's cloud budget, read and checked (`key` names the table).
    pub fn cloud_budget(&self, key: &str) -> Result<Option<CloudBudget>, ConfigError> {
        let lean_at = match self.cloud_budget_lean_at {
            None => None,
            Some(v) if (0.0..=1.0).contains(&v) => Some(v),
            Some(v) => {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Ledger,
                    "cloud_budget_lean_at",
                    format!("must be a share between 0 and 1, not {v}"),
                ))
            }
        };
        let Some(text) = &self.cloud_budget else {
            if lean_at.is_some() {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Ledger,
                    "cloud_budget_lean_at",
                    "needs `cloud_budget` in the same table",
                ));
            }
            return Ok(None);
        };
        let mut b: CloudBudget = text.parse().map_err(|e: super::ledger::BadBudget| {
            ConfigError::invalid_field(key, Setting::Ledger, "cloud_budget", e.to_string())
        })?;
        if let Some(l) = lean_at {
            b.lean_at = l;
        }
        Ok(Some(b))
    }

    /// The deadline of a run on route `name` whose table is `table`
    /// (`None`: no table of its own) under the `[harness]` table
    /// `defaults`, as the harness resolves it: the table's `deadline_ms`,
    /// else the defaults', else [`DEFAULT_DEADLINE`](super::DEFAULT_DEADLINE).
    pub fn deadline_of(
        defaults: &RouteConfig,
        table: Option<&RouteConfig>,
        name: &str,
    ) -> Duration {
        let of = |r: &RouteConfig| Route {
            deadline: r.deadline_ms.map(Duration::from_millis),
            ..Route::default()
        };
        table
            .map(of)
            .unwrap_or_default()
            .over(&of(defaults))
            .resolve(name)
            .map_or(super::route::DEFAULT_DEADLINE, |r| r.deadline)
    }

    /// The policy this table sets, with its parameters; `key` names the
    /// table in errors (`harness`, `routes.NAME`).
    pub fn resolved_policy(&self, key: &str) -> Result<Option<Policy>, ConfigError> {
        let params: [(&str, bool, PolicyKind); 9] = [
            (
                "hedge_delay_ms",
                self.hedge_delay_ms.is_some(),
                PolicyKind::Hedge,
            ),
            (
                "hedge_primary",
                self.hedge_primary.is_some(),
                PolicyKind::Hedge,
            ),
            (
                "cascade_threshold",
                self.cascade_threshold.is_some(),
                PolicyKind::Cascade,
            ),
            (
                "local_share",
                self.local_share.is_some(),
                PolicyKind::Cascade,
            ),
            (
                "escalate_below",
                self.escalate_below.is_some(),
                PolicyKind::Cascade,
            ),
            (
                "escalate_early",
                self.escalate_early.is_some(),
                PolicyKind::Cascade,
            ),
            (
                "prompt_escalate_below",
                self.prompt_escalate_below.is_some(),
                PolicyKind::Cascade,
            ),
            (
                "cloud_share",
                self.cloud_share.is_some(),
                PolicyKind::Fallback,
            ),
            ("", false, PolicyKind::Race),
        ];
        let Some(name) = &self.policy else {
            if let Some((p, _, k)) = params.iter().find(|(_, set, _)| *set) {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Policy,
                    p,
                    format!("applies to `{k}`; set `policy = \"{k}\"` in the same table"),
                ));
            }
            return Ok(None);
        };
        let kind: PolicyKind = name.parse().map_err(|e: super::policy::UnknownPolicy| {
            ConfigError::invalid_field(key, Setting::Policy, "policy", e.to_string())
        })?;
        if let Some((p, _, k)) = params.iter().find(|(_, set, k)| *set && *k != kind) {
            return Err(ConfigError::invalid_field(
                key,
                Setting::Policy,
                p,
                format!("applies to `{k}`, not `{kind}`"),
            ));
        }
        let policy =
            match kind {
                PolicyKind::Hedge => Policy::Hedge {
                    primary: self.hedge_primary.unwrap_or(Lane::Local),
                    delay: self.hedge_delay_ms.map(Duration::from_millis),
                },
                PolicyKind::Cascade => {
                    let threshold = match (self.escalate_below, self.cascade_threshold) {
                        (Some(_), Some(_)) => {
                            return Err(ConfigError::invalid_field(
                                key,
                                Setting::Policy,
                                "escalate_below",
                                "give either `escalate_below` or `cascade_threshold`, not both",
                            ))
                        }
                        (Some(e), None) => e.value,
                        (None, t) => t.unwrap_or(DEFAULT_CASCADE_THRESHOLD),
                    };
                    if self.escalate_early == Some(true) {
                        match self.escalate_below {
                            None => return Err(ConfigError::invalid_field(
                                key,
                                Setting::Policy,
                                "escalate_early",
                                "needs `escalate_below` (the signal read while local generates)",
                            )),
                            Some(e) if !e.signal.is_streamable() => {
                                return Err(ConfigError::invalid_field(
                                    key,
                                    Setting::Policy,
                                    "escalate_early",
                                    format!(
                                        "`{}` can rise again as tokens come; early escalation \
                                     needs min_logprob or min_window_logprob",
                                        e.signal
                                    ),
                                ))
                            }
                            Some(_) => {}
                        }
                    }
                    Policy::Cascade {
                        threshold,
                        local_share: self.local_share.unwrap_or(DEFAULT_PRIMARY_SHARE),
                    }
                }
                PolicyKind::Fallback => Policy::Fallback {
                    cloud_share: self.cloud_share.unwrap_or(DEFAULT_PRIMARY_SHARE),
                },
                k => Policy::from_kind(k),
            };
        policy
            .validate()
            .map_err(|d| ConfigError::invalid_field(key, Setting::Policy, "policy", d))?;
        Ok(Some(policy))
    }

    /// Sets the policy, dropping parameters that belong to other policies
    /// (what a command-line `--policy` does to the file's setting).
    pub fn set_policy(&mut self, kind: PolicyKind) {
        self.policy = Some(kind.as_str().to_string());
        if kind != PolicyKind::Hedge {
            self.hedge_delay_ms = None;
            self.hedge_primary = None;
        }
        if kind != PolicyKind::Cascade {
            self.cascade_threshold = None;
            self.local_share = None;
            self.escalate_below = None;
            self.escalate_early = None;
            self.prompt_escalate_below = None;
        }
        if kind != PolicyKind::Fallback {
            self.cloud_share = None;
        }
    }

    /// This table as a [`Route`] with the built-in callbacks alone (a
    /// scorer, arbiter, pre-score or compressor registered by name on a
    /// builder is an error here: [`HarnessBuilder::config`](super::HarnessBuilder::config)
    /// resolves those); `key` names the table in errors.
    pub fn route(&self, key: &str) -> Result<Route, ConfigError> {
        self.to_route(key, &Named::default())
    }

    /// This table as a [`Route`], resolving callback names.
    pub(crate) fn to_route(&self, key: &str, named: &Named) -> Result<Route, ConfigError> {
        let mut r = Route {
            policy: self.resolved_policy(key)?,
            deadline: self.deadline_ms.map(Duration::from_millis),
            commit: self.commit,
            ..Route::default()
        };
        if let Some(m) = self.min_score {
            if !m.is_finite() {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Scoring,
                    "min_score",
                    "must be a finite number",
                ));
            }
            r.min_score = Some(Some(m));
        }
        if let Some(m) = &self.cloud_model {
            if m.trim().is_empty() {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Route,
                    "cloud_model",
                    "cannot be empty (leave it out for [cloud] model)",
                ));
            }
            r.cloud_model = Some(m.clone());
        }
        r.cloud_budget = self.cloud_budget(key)?.map(Some);
        r.callback_budget = ms(key, "callback_budget_ms", self.callback_budget_ms)?;
        r.cancel_grace = ms(key, "cancel_grace_ms", self.cancel_grace_ms)?;
        let unknown = |field: &str, kind: &'static str, name: &str| ConfigError::UnknownCallback {
            key: format!("{key}.{field}"),
            kind,
            name: name.to_string(),
        };
        if let Some(p) = self.prompt_escalate_below {
            if !p.signal.is_read_before_generation() {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Policy,
                    "prompt_escalate_below",
                    format!(
                        "a route reads `prompt_logprob` or `prompt_brevity` before generation, \
                         not `{}`{}",
                        p.signal,
                        if p.signal.is_prompt_only() {
                            " (measured by `bench calibrate` only)"
                        } else {
                            " (it reads the answer: use `escalate_below`)"
                        }
                    ),
                ));
            }
            if !p.value.is_finite() {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Policy,
                    "prompt_escalate_below",
                    "`value` must be a finite number",
                ));
            }
            r.prompt_escalate_below = Some(Some((p.signal, p.value)));
        }
        if let Some(e) = self.escalate_below {
            if e.signal.is_prompt_only() {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Scoring,
                    "escalate_below",
                    format!(
                        "`{}` reads the prompt, not the answer: use `prompt_escalate_below`",
                        e.signal
                    ),
                ));
            }
            if self.scorer.is_some() {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Scoring,
                    "scorer",
                    "`escalate_below` sets the scorer (the signal); drop `scorer`",
                ));
            }
            r.set_arc_scorer(Some(Arc::new(SignalScorer(e.signal))), true);
            r.escalate_early = match self.escalate_early {
                Some(true) => Some(Some(e.signal)),
                Some(false) => Some(None),
                None => None,
            };
        }
        if let Some(s) = &self.scorer {
            match s.as_str() {
                "default" => r.set_arc_scorer(Some(Arc::new(DefaultScorer)), true),
                "generic" => r.set_arc_scorer(Some(Arc::new(GenericScorer)), true),
                "confidence" => r.set_arc_scorer(Some(Arc::new(ConfidenceScorer)), true),
                "none" => r.set_arc_scorer(None, true),
                n => r.set_arc_scorer(
                    Some(
                        named
                            .scorer
                            .get(n)
                            .cloned()
                            .ok_or_else(|| unknown("scorer", "a scorer", n))?,
                    ),
                    false,
                ),
            }
        }
        if let Some(a) = &self.arbiter {
            match a.as_str() {
                "highest" | "builtin" => r.set_arc_arbiter(None),
                n => r.set_arc_arbiter(Some(
                    named
                        .arbiter
                        .get(n)
                        .cloned()
                        .ok_or_else(|| unknown("arbiter", "an arbiter", n))?,
                )),
            }
        }
        if let Some(p) = &self.pre_score {
            match p.as_str() {
                "none" => r.set_arc_pre_score(None),
                n => r.set_arc_pre_score(Some(
                    named
                        .pre_score
                        .get(n)
                        .cloned()
                        .ok_or_else(|| unknown("pre_score", "a pre-score callback", n))?,
                )),
            }
        }
        match (self.compressor.as_deref(), self.compress_max_tokens) {
            (None | Some("keep-recent"), Some(max)) => {
                r.set_arc_compressor(Some(Arc::new(KeepRecent::new(max))), true)
            }
            (Some("keep-recent"), None) => {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Scoring,
                    "compressor",
                    "`keep-recent` needs `compress_max_tokens`",
                ))
            }
            (Some("none"), None) => r.set_arc_compressor(None, true),
            (Some(n), None) => r.set_arc_compressor(
                Some(
                    named
                        .compressor
                        .get(n)
                        .cloned()
                        .ok_or_else(|| unknown("compressor", "a compressor", n))?,
                ),
                false,
            ),
            (Some(_), Some(_)) => {
                return Err(ConfigError::invalid_field(
                    key,
                    Setting::Scoring,
                    "compress_max_tokens",
                    "applies to the built-in `keep-recent` compressor only",
                ))
            }
            (None, None) => {}
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests;
