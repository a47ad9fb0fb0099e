//! The TOML configuration: lanes, harness defaults and named routes. This
//! module parses and validates; it must not start lanes
//! (`HarnessConfig::build`, in the builder module, does that) nor run
//! anything.
//!
//! Keys in `[harness]` and in each `[routes.NAME]` (all optional):
//!
//! | key | meaning |
//! |---|---|
//! | `policy` | `local-only`, `cloud-only`, `race`, `hedge`, `cascade`, `fallback`, `best-of` |
//! | `deadline_ms` | the run's time budget |
//! | `commit` | `first_token` or `completion` (streaming commit point) |
//! | `min_score` | lowest score any candidate needs to be acceptable |
//! | `hedge_delay_ms`, `hedge_primary` | `hedge`: delay (default adaptive p95) and first lane (`local`) |
//! | `cascade_threshold`, `local_share` | `cascade`: lowest acceptable local score (0.4), local's share of the deadline (0.5) |
//! | `escalate_below` | `cascade`: `{ signal = "p10_logprob", value = -1.2 }`: escalate when the local answer's signal (`mean_logprob`, `min_logprob`, `p10_logprob`, `first_token_margin`, `min_window_logprob`: the lowest mean over 16 tokens, `tail_logprob`: the mean of the last 32, `answer_agreement`: the share of a consensus's samples agreeing with the majority) is below `value`, in the signal's own units (what `edgecloud bench calibrate` prints); sets the scorer, so it excludes `scorer` and `cascade_threshold` |
//! | `escalate_early` | `cascade` with `escalate_below` on `min_logprob` or `min_window_logprob`: `true` starts the cloud (and cancels local) as soon as the signal of the tokens generated so far is below `value`, instead of after the whole local answer (same decisions, sooner; see `Route::escalate_early`) |
//! | `prompt_escalate_below` | `cascade`: `{ signal = "prompt_logprob", value = -2.0 }`: a two-stage cascade: the local lane scores the prompt in its prompt pass (the mean log-probability of the prompt's own tokens) and, below `value`, the cloud starts before local generates anything (see `Route::prompt_escalate_below`); or `{ signal = "prompt_brevity", value = -120 }`: minus the prompt's tokens, known before the prompt pass (longer than 120 tokens: straight to the cloud, no local decoding); `bench calibrate` fits it jointly with `escalate_below` |
//! | `cloud_share` | `fallback`: the cloud's share of the deadline (0.5) |
//! | `scorer` | `default`, `generic`, `confidence`, `none`, or a name registered with the builder |
//! | `arbiter` | `highest` (built-in) or a registered name |
//! | `pre_score` | `none` or a registered name |
//! | `compressor` | `none`, `keep-recent` (needs `compress_max_tokens`) or a registered name |
//! | `compress_max_tokens` | budget of the built-in compressor (implies `keep-recent`) |
//! | `callback_budget_ms`, `cancel_grace_ms` | see the harness docs |
//! | `default_route` | (`[harness]` only) the route used when a run names none |
//! | `model` | (`[routes.NAME]` only; `edgecloud serve` with several models) the local model, by its `[[models]]` name, this route runs on (default: the first model) |
//! | `cloud_model` | (`[routes.NAME]` only) the model the cloud lane asks the endpoint for on this route (default: `[cloud] model`); needs a cloud lane |
//! | `embeddings` | (`edgecloud serve`) where `POST /v1/embeddings` goes on this route: `local` (default) or `cloud` (the cloud endpoint's `/v1/embeddings`, passed through); a route without it takes `[harness]`'s; `cloud` needs a cloud lane |
//!
//! `[[models]]` tables (feature `local`) give `edgecloud serve` several
//! local models, each a name a request's `model` selects: `name`, `model`
//! (a file or model reference, as `[local] model`), and optionally its own
//! `context_size`, `gpu_layers`, `threads` and `pooling`; every other
//! local setting comes from `[local]` (and the flags).
//!
//! Policy parameters must come with the `policy` key in the same table, so
//! a route never silently applies a threshold to a policy it did not pick.
//! Unknown keys are errors (typos do not pass silently).

use super::callbacks::Named;
use super::compression::KeepRecent;
use super::error::{ConfigError, Setting};
use super::policy::{
    CommitMode, Policy, PolicyKind, DEFAULT_CASCADE_THRESHOLD, DEFAULT_PRIMARY_SHARE,
};
use super::route::Route;
use super::scoring::{ConfidenceScorer, DefaultScorer, GenericScorer, Signal, SignalScorer};
#[cfg(feature = "cloud")]
use crate::cloud::CloudConfig;
use crate::lane::Lane;
#[cfg(feature = "local")]
use crate::local::LocalConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// An example configuration, shown by `edgecloud run --help`.
pub const EXAMPLE_CONFIG: &str = r#"# edgecloud.toml: lanes, default policy, named routes.
[local]
model = "models/SmolLM2-135M-Instruct-Q8_0.gguf"
threads = 4
thread_policy = "adaptive"       # fewer threads while other programs hold cores; "fixed" never
spec_type = "off"                # "ngram": drafts by prompt lookup; "draft": by model_draft (same answer)

[cloud]
base_url = "https://api.openai.com/v1"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"   # the key itself never goes in this file
down_after_failures = 3          # connect-level failures in a row before the lane is down
cooldown_ms = 5000               # absent from runs this long, then one request probes it

[harness]
policy = "cascade"               # local-only cloud-only race hedge cascade fallback best-of
deadline_ms = 3000
cascade_threshold = 0.4          # lowest acceptable local score
local_share = 0.5                # local may use half the deadline alone
compress_max_tokens = 2000       # cloud prompt: system + newest turns within ~2000 tokens
default_route = "general_qa"

[routes.vehicle_control]         # deterministic intents: never leave the car
policy = "local-only"
deadline_ms = 200

[routes.general_qa]
policy = "cascade"
deadline_ms = 3000
cloud_model = "gpt-4o"           # this route's cloud model ([cloud] model otherwise)
"#;

/// A whole configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HarnessConfig {
    /// The local lane's settings (`[local]`; see [`LocalConfig`]; feature
    /// `local`).
    #[cfg(feature = "local")]
    #[serde(default)]
    pub local: Option<LocalConfig>,
    /// The cloud lane's settings (`[cloud]`; see [`CloudConfig`]; feature
    /// `cloud`). The key comes from the variable `api_key_env` names, or
    /// `api_key`.
    #[cfg(feature = "cloud")]
    #[serde(default)]
    pub cloud: Option<CloudConfig>,
    /// Harness defaults (every route inherits them).
    #[serde(default)]
    pub harness: RouteConfig,
    /// Named routes.
    #[serde(default)]
    pub routes: BTreeMap<String, RouteConfig>,
    /// `[pool]`: how many instances a server runs at once.
    #[serde(default)]
    pub pool: PoolConfig,
    /// `[serve]`: settings of `edgecloud serve` alone.
    #[serde(default)]
    pub serve: ServeFileConfig,
    /// `[[models]]`: several local models for `edgecloud serve` (feature
    /// `local`), each loaded on first use; `[local]` holds the settings
    /// they share.
    #[cfg(feature = "local")]
    #[serde(default)]
    pub models: Vec<ModelConfig>,
}

/// One `[[models]]` table: a local model `edgecloud serve` holds by name,
/// with the local settings it does not share with `[local]`.
#[cfg(feature = "local")]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The name a request's `model` selects.
    pub name: String,
    /// The GGUF file, or a model reference (`ollama:NAME[:TAG]`,
    /// `hf:ORG/REPO[:QUANT]`), as `[local] model`.
    pub model: PathBuf,
    /// Its context size in tokens (default: `[local]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_size: Option<u32>,
    /// Its layers offloaded to a GPU (default: `[local]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_layers: Option<u32>,
    /// Its compute threads (default: `[local]`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// How its embeddings are pooled (default: its GGUF's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling: Option<crate::local::Pooling>,
}

/// The settings of `[serve]`, read by `edgecloud serve` (its flags win).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeFileConfig {
    /// Browser origins that may call the server (CORS): `["*"]` for any,
    /// or origins such as `"https://app.example"`; absent or empty: off
    /// (`--cors-origins` wins).
    pub cors_origins: Option<Vec<String>>,
    /// With several models: how long an idle model stays loaded, in
    /// Ollama's forms (`"5m"`, `"30s"`, `300` seconds, `0`, `-1` never;
    /// `--keep-alive` wins).
    pub keep_alive: Option<NumberOrText>,
    /// With several models: the most loaded at once, a count (`2`) or
    /// bytes of model files (`"4GiB"`; `--max-loaded` wins).
    pub max_loaded: Option<NumberOrText>,
    /// With several models: load every one at start (`--preload` turns
    /// it on whatever this says).
    pub preload: Option<bool>,
}

/// A `[serve]` setting written as a number (`300`) or as text (`"5m"`),
/// kept as written; the server reads it (`KeepAlive::parse`,
/// `MaxLoaded::parse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NumberOrText {
    /// A whole number.
    Number(i64),
    /// Text.
    Text(String),
}

impl std::fmt::Display for NumberOrText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NumberOrText::Number(n) => write!(f, "{n}"),
            NumberOrText::Text(t) => f.write_str(t),
        }
    }
}

/// The settings of `[pool]`: the harness's instances over one model
/// (see [`HarnessBuilder::instances`](super::HarnessBuilder::instances)).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Instances (requests served at once); `edgecloud serve` defaults to
    /// [`DEFAULT_PARALLEL`].
    pub parallel: Option<usize>,
    /// How long a request may wait for a free instance, in milliseconds
    /// (0 or absent: refuse at once).
    pub max_queue_ms: Option<u64>,
}

/// Instances `edgecloud serve` runs when nothing says: llama-server's
/// default slot count. Each adds one context's KV cache to the memory the
/// model takes.
pub const DEFAULT_PARALLEL: usize = 4;

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
}

/// Refuses a `[local]` or `[cloud]` section that this build has no lane for
/// (its cargo feature is off), in those words rather than serde's "unknown
/// field".
fn lanes_built(text: &str) -> Result<(), ConfigError> {
    let missing: Vec<&str> = [
        ("local", cfg!(not(feature = "local"))),
        ("cloud", cfg!(not(feature = "cloud"))),
    ]
    .into_iter()
    .filter_map(|(lane, missing)| missing.then_some(lane))
    .collect();
    refuse_sections(text, &missing)
}

/// The first of `lanes` that `text` has a section for, as an error. Text
/// that is not TOML is left to the real parse to report.
fn refuse_sections(text: &str, lanes: &[&str]) -> Result<(), ConfigError> {
    if lanes.is_empty() {
        return Ok(());
    }
    let Ok(table) = text.parse::<toml::Table>() else {
        return Ok(());
    };
    match lanes.iter().find(|lane| table.contains_key(**lane)) {
        Some(lane) => Err(ConfigError::Invalid {
            key: (*lane).into(),
            setting: Setting::Lane,
            detail: format!(
                "this build of edgecloud has no {lane} lane (built without the `{lane}` cargo feature)"
            ),
        }),
        None => Ok(()),
    }
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

impl HarnessConfig {
    /// Parses TOML text.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::parse(text, None)
    }

    /// Reads and parses a file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, Some(path.to_path_buf()))
    }

    fn parse(text: &str, path: Option<PathBuf>) -> Result<Self, ConfigError> {
        lanes_built(text)?;
        let cfg: HarnessConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path,
            detail: e.to_string().trim_end().to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks what can be checked without the builder's registered
    /// callbacks: policy names and parameters, ranges, route references.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.harness.resolved_policy("harness")?;
        for (name, r) in &self.routes {
            if r.default_route.is_some() {
                return Err(ConfigError::Invalid {
                    key: format!("routes.{name}.default_route"),
                    setting: Setting::Route,
                    detail: "default_route belongs in [harness]".into(),
                });
            }
            r.resolved_policy(&format!("routes.{name}"))?;
        }
        if self.harness.model.is_some() {
            return Err(ConfigError::Invalid {
                key: "harness.model".into(),
                setting: Setting::Route,
                detail: "model belongs in a [routes.NAME] table (the route's local model); \
                         the default model is the first of [[models]]"
                    .into(),
            });
        }
        if self.harness.cloud_model.is_some() {
            return Err(ConfigError::Invalid {
                key: "harness.cloud_model".into(),
                setting: Setting::Route,
                detail: "cloud_model belongs in a [routes.NAME] table (the route's cloud model); \
                         the default is [cloud] model"
                    .into(),
            });
        }
        #[cfg(feature = "local")]
        if let Some(local) = &self.local {
            crate::local::check_spec_settings(local.draft_max, local.draft_min).map_err(|e| {
                ConfigError::Invalid {
                    key: format!("local.{}", e.key),
                    setting: Setting::Lane,
                    detail: e.detail,
                }
            })?;
        }
        if let Some(d) = &self.harness.default_route {
            if !self.routes.contains_key(d) {
                return Err(ConfigError::Invalid {
                    key: "harness.default_route".into(),
                    setting: Setting::Route,
                    detail: format!("names route `{d}`, which is not defined"),
                });
            }
        }
        Ok(())
    }

    /// Checks that every route asking for the cloud lane by name
    /// (`cloud_model`, `embeddings = "cloud"`) has one: call it once the
    /// command line's lane settings are merged in (a `--base-url` makes
    /// the cloud lane the file may lack).
    pub fn check_cloud_routes(&self) -> Result<(), ConfigError> {
        #[cfg(feature = "cloud")]
        if self.cloud.is_some() {
            return Ok(());
        }
        let tables = std::iter::once(("harness".to_string(), &self.harness)).chain(
            self.routes
                .iter()
                .map(|(name, r)| (format!("routes.{name}"), r)),
        );
        for (key, r) in tables {
            let asks = match (&r.cloud_model, r.embeddings) {
                (Some(m), _) => Some(("cloud_model", format!("names the cloud model `{m}`"))),
                (None, Some(Lane::Cloud)) => Some((
                    "embeddings",
                    "sends embeddings to the cloud lane".to_string(),
                )),
                _ => None,
            };
            if let Some((field, what)) = asks {
                return Err(invalid(
                    &key,
                    Setting::Route,
                    field,
                    format!(
                        "[{key}] {what}, but no cloud lane is configured \
                         ([cloud] in the config, or --base-url)"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The `[routes.NAME]` table a run on `route` reads (`None`: the
    /// default route, `[harness] default_route`); `None` for the
    /// `[harness]` table alone.
    fn route_table(&self, route: Option<&str>) -> Option<&RouteConfig> {
        route
            .or(self.harness.default_route.as_deref())
            .and_then(|r| self.routes.get(r))
    }

    /// Where `POST /v1/embeddings` goes on `route` (`None`: the default
    /// route): the route's `embeddings`, else `[harness]`'s, else the
    /// local lane. Never the cloud by default, whatever the policy:
    /// vectors of two models are not comparable, so switching an index
    /// to another model must be a decision written down.
    pub fn embeddings_lane(&self, route: Option<&str>) -> Lane {
        self.route_table(route)
            .and_then(|r| r.embeddings)
            .or(self.harness.embeddings)
            .unwrap_or(Lane::Local)
    }

    /// The cloud model a run on `route` asks for (`None`: the default
    /// route), when the route names one (else the lane's `[cloud] model`).
    pub fn route_cloud_model(&self, route: Option<&str>) -> Option<&str> {
        self.route_table(route)
            .and_then(|r| r.cloud_model.as_deref())
    }

    /// The deadline of a run on `route` (`None`: the default route) that
    /// names none of its own: the route's `deadline_ms`, else
    /// `[harness]`'s, else the default (5 s), as the harness resolves it.
    pub fn route_deadline(&self, route: Option<&str>) -> Duration {
        let of = |r: &RouteConfig| Route {
            deadline: r.deadline_ms.map(Duration::from_millis),
            ..Route::default()
        };
        let base = of(&self.harness);
        self.route_table(route)
            .map(of)
            .unwrap_or_default()
            .over(&base)
            .resolve(route.unwrap_or(super::route::DEFAULT_ROUTE))
            .map_or(super::route::DEFAULT_DEADLINE, |r| r.deadline)
    }
}

fn invalid(key: &str, setting: Setting, field: &str, detail: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: format!("{key}.{field}"),
        setting,
        detail: detail.into(),
    }
}

fn ms(key: &str, field: &str, v: Option<f64>) -> Result<Option<Duration>, ConfigError> {
    match v {
        None => Ok(None),
        Some(v) if v.is_finite() && v >= 0.0 => Ok(Some(Duration::from_secs_f64(v / 1000.0))),
        Some(_) => Err(invalid(
            key,
            Setting::Timing,
            field,
            "must be a number of milliseconds >= 0",
        )),
    }
}

impl RouteConfig {
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
                return Err(invalid(
                    key,
                    Setting::Policy,
                    p,
                    format!("applies to `{k}`; set `policy = \"{k}\"` in the same table"),
                ));
            }
            return Ok(None);
        };
        let kind: PolicyKind = name.parse().map_err(|e: super::policy::UnknownPolicy| {
            invalid(key, Setting::Policy, "policy", e.to_string())
        })?;
        if let Some((p, _, k)) = params.iter().find(|(_, set, k)| *set && *k != kind) {
            return Err(invalid(
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
                            return Err(invalid(
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
                            None => return Err(invalid(
                                key,
                                Setting::Policy,
                                "escalate_early",
                                "needs `escalate_below` (the signal read while local generates)",
                            )),
                            Some(e) if !e.signal.is_streamable() => {
                                return Err(invalid(
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
            .map_err(|d| invalid(key, Setting::Policy, "policy", d))?;
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
                return Err(invalid(
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
                return Err(invalid(
                    key,
                    Setting::Route,
                    "cloud_model",
                    "cannot be empty (leave it out for [cloud] model)",
                ));
            }
            r.cloud_model = Some(m.clone());
        }
        r.callback_budget = ms(key, "callback_budget_ms", self.callback_budget_ms)?;
        r.cancel_grace = ms(key, "cancel_grace_ms", self.cancel_grace_ms)?;
        let unknown = |field: &str, kind: &'static str, name: &str| ConfigError::UnknownCallback {
            key: format!("{key}.{field}"),
            kind,
            name: name.to_string(),
        };
        if let Some(p) = self.prompt_escalate_below {
            if !p.signal.is_read_before_generation() {
                return Err(invalid(
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
                return Err(invalid(
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
                return Err(invalid(
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
                return Err(invalid(
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
                return Err(invalid(
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
                return Err(invalid(
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
mod tests {
    use super::*;

    #[test]
    fn each_invalid_setting_says_which_setting_it_is() {
        let setting = |text: &str| HarnessConfig::from_toml_str(text).unwrap_err().setting();
        assert_eq!(
            setting("[harness]\npolicy = \"racer\"\n"),
            Some(Setting::Policy)
        );
        assert_eq!(
            setting("[harness]\npolicy = \"race\"\ncascade_threshold = 0.5\n"),
            Some(Setting::Policy)
        );
        assert_eq!(
            setting("[harness]\ndefault_route = \"nowhere\"\n"),
            Some(Setting::Route)
        );
        assert_eq!(setting("[harness\n"), None);
        let named = Named::default();
        let timing = RouteConfig {
            cancel_grace_ms: Some(-1.0),
            ..RouteConfig::default()
        };
        let err = timing.to_route("harness", &named).unwrap_err();
        assert_eq!(err.setting(), Some(Setting::Timing));
        let scorer = RouteConfig {
            scorer: Some("mine".into()),
            ..RouteConfig::default()
        };
        let err = scorer.to_route("harness", &named).unwrap_err();
        assert_eq!(err.setting(), Some(Setting::Scoring));
    }

    #[test]
    fn a_lane_section_without_its_feature_is_refused_by_name() {
        let text = "[cloud]\nbase_url = \"http://x/v1\"\n[harness]\npolicy = \"race\"\n";
        let err = refuse_sections(text, &["local", "cloud"]).unwrap_err();
        assert!(matches!(&err, ConfigError::Invalid { key, .. } if key == "cloud"));
        assert!(err.to_string().contains("`cloud` cargo feature"), "{err}");
        assert!(refuse_sections(text, &["local"]).is_ok());
        assert!(refuse_sections(text, &[]).is_ok());
        // Not TOML: the real parse reports it, with its position.
        assert!(refuse_sections("[cloud", &["cloud"]).is_ok());
        // This build has both lanes: sections pass.
        assert!(lanes_built(text).is_ok() || cfg!(not(all(feature = "local", feature = "cloud"))));
    }

    #[test]
    fn the_example_config_parses_and_builds_routes() {
        let cfg = HarnessConfig::from_toml_str(EXAMPLE_CONFIG).expect("example is valid");
        assert_eq!(cfg.routes.len(), 2);
        let named = Named::default();
        let vc = cfg.routes["vehicle_control"]
            .to_route("routes.vehicle_control", &named)
            .expect("valid route");
        assert_eq!(vc.policy, Some(Policy::LocalOnly));
        assert_eq!(vc.deadline, Some(Duration::from_millis(200)));
        assert_eq!(
            cfg.route_cloud_model(None),
            Some("gpt-4o"),
            "the default route's"
        );
        assert_eq!(cfg.route_cloud_model(Some("vehicle_control")), None);
        assert_eq!(
            cfg.route_deadline(Some("vehicle_control")),
            Duration::from_millis(200)
        );
        assert_eq!(cfg.embeddings_lane(None), Lane::Local);
        assert!(cfg.check_cloud_routes().is_ok());
        let h = cfg.harness.to_route("harness", &named).expect("valid");
        assert_eq!(
            h.policy,
            Some(Policy::Cascade {
                threshold: 0.4,
                local_share: 0.5
            })
        );
        assert!(h.compressor.is_some());
    }

    #[test]
    fn escalate_below_is_a_cascade_threshold_in_signal_units() {
        let cfg = HarnessConfig::from_toml_str(
            "[routes.qa]\npolicy = \"cascade\"\nescalate_below = { signal = \"p10_logprob\", value = -1.2 }\n",
        )
        .expect("valid");
        let r = cfg.routes["qa"]
            .to_route("routes.qa", &Named::default())
            .expect("valid");
        assert_eq!(r.policy, Some(Policy::cascade(-1.2)));
        assert!(matches!(r.scorer, Some(Some(_))));
        let err = |t: &str| HarnessConfig::from_toml_str(t).unwrap_err().to_string();
        assert!(err("[harness]\npolicy = \"race\"\nescalate_below = { signal = \"p10_logprob\", value = -1 }")
            .contains("applies to `cascade`"));
        assert!(err("[harness]\npolicy = \"cascade\"\ncascade_threshold = 0.3\nescalate_below = { signal = \"p10_logprob\", value = -1 }")
            .contains("not both"));
        assert!(err(
            "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"p5\", value = -1 }"
        )
        .contains("p5"));
        let both = HarnessConfig::from_toml_str(
            "[harness]\npolicy = \"cascade\"\nscorer = \"default\"\nescalate_below = { signal = \"mean_logprob\", value = -1 }",
        )
        .expect("parses");
        let e = both
            .harness
            .to_route("harness", &Named::default())
            .unwrap_err();
        assert!(e.to_string().contains("drop `scorer`"), "{e}");
    }

    #[test]
    fn escalate_early_needs_a_streamable_escalate_below() {
        let cfg = HarnessConfig::from_toml_str(
            "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"min_window_logprob\", value = -1.5 }\nescalate_early = true\n",
        )
        .expect("valid");
        let r = cfg
            .harness
            .to_route("harness", &Named::default())
            .expect("valid");
        assert_eq!(r.escalate_early, Some(Some(Signal::MinWindowLogprob)));
        let err = |t: &str| HarnessConfig::from_toml_str(t).unwrap_err().to_string();
        assert!(
            err("[harness]\npolicy = \"cascade\"\nescalate_early = true")
                .contains("needs `escalate_below`")
        );
        let e = err("[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"mean_logprob\", value = -1 }\nescalate_early = true");
        assert!(
            e.contains("escalate_early") && e.contains("mean_logprob"),
            "{e}"
        );
        assert!(err("[harness]\npolicy = \"race\"\nescalate_early = true")
            .contains("applies to `cascade`"));
        // Off: the route says so, overriding an inherited `true`.
        let off = HarnessConfig::from_toml_str(
            "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"min_logprob\", value = -3 }\nescalate_early = false\n",
        )
        .expect("valid");
        let r = off
            .harness
            .to_route("harness", &Named::default())
            .expect("valid");
        assert_eq!(r.escalate_early, Some(None));
    }

    #[test]
    fn prompt_escalate_below_is_a_cascade_stage_on_a_signal_read_before_generation() {
        let route = |t: &str| {
            HarnessConfig::from_toml_str(t)
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    c.harness
                        .to_route("harness", &Named::default())
                        .map_err(|e| e.to_string())
                })
        };
        let r = route(
            "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"min_logprob\", value = -3 }\nprompt_escalate_below = { signal = \"prompt_logprob\", value = -2.5 }\n",
        )
        .expect("valid");
        assert_eq!(
            r.prompt_escalate_below,
            Some(Some((Signal::PromptLogprob, -2.5)))
        );
        let r = route(
            "[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"min_logprob\", value = -3 }\nprompt_escalate_below = { signal = \"prompt_brevity\", value = -120 }\n",
        )
        .expect("valid");
        assert_eq!(
            r.prompt_escalate_below,
            Some(Some((Signal::PromptBrevity, -120.0)))
        );
        let e = route("[harness]\npolicy = \"race\"\nprompt_escalate_below = { signal = \"prompt_logprob\", value = -2 }").unwrap_err();
        assert!(e.contains("applies to `cascade`"), "{e}");
        let e = route("[harness]\npolicy = \"cascade\"\nprompt_escalate_below = { signal = \"prompt_neighbours\", value = 0.5 }").unwrap_err();
        assert!(
            e.contains("prompt_neighbours") && e.contains("bench calibrate"),
            "{e}"
        );
        let e = route("[harness]\npolicy = \"cascade\"\nprompt_escalate_below = { signal = \"min_logprob\", value = -2 }").unwrap_err();
        assert!(e.contains("use `escalate_below`"), "{e}");
        let e = route("[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"prompt_logprob\", value = -2 }").unwrap_err();
        assert!(e.contains("use `prompt_escalate_below`"), "{e}");
        let e = route("[harness]\npolicy = \"cascade\"\nescalate_below = { signal = \"prompt_brevity\", value = -2 }").unwrap_err();
        assert!(e.contains("use `prompt_escalate_below`"), "{e}");
    }

    #[test]
    fn mistakes_get_named() {
        let err = |t: &str| HarnessConfig::from_toml_str(t).unwrap_err().to_string();
        assert!(err("[harness]\npolicy = \"racer\"").contains("unknown policy `racer`"));
        assert!(err("[harness]\ndeadlin_ms = 3").contains("deadlin_ms"));
        assert!(err("[harness]\ncascade_threshold = 0.3").contains("set `policy = \"cascade\"`"));
        assert!(err("[routes.a]\npolicy = \"race\"\ncloud_share = 0.2")
            .contains("applies to `fallback`"));
        assert!(err("[harness]\ndefault_route = \"nope\"").contains("`nope`"));
        assert!(err("[harness]\npolicy = \"cascade\"\nlocal_share = 2.0").contains("local_share"));
        let cfg = HarnessConfig::from_toml_str("[harness]\nscorer = \"mine\"").expect("parses");
        let e = cfg
            .harness
            .to_route("harness", &Named::default())
            .unwrap_err();
        assert!(e.to_string().contains("`mine`"), "{e}");
    }
}
