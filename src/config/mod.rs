//! The TOML configuration file: lanes, harness defaults, named routes,
//! the pool, `[serve]` and `[[models]]`. This module holds the schema;
//! `read` parses it, `validate` checks it, `lookup` answers what a route
//! resolves to (the defaults), `start` starts the lanes it describes. It
//! must not run anything.
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
//! | `cloud_budget` | the route's cloud budget: `"5 usd/day"`, `"$20/month"`, `"2000000 tokens/month"` (UTC days and months); from `cloud_budget_lean_at` of it (default 0.8) a race, hedge, fallback or best-of route runs as a cascade (local first), and once spent the cloud lane is absent from the route's runs until the period renews; needs `[ledger] store`, and a price for the route's cloud model when it counts dollars (docs/cost.md); a route without it takes `[harness]`'s (a budget of its own, of that size) |
//! | `cloud_budget_lean_at` | the share of `cloud_budget` (0 to 1, default 0.8) from which the route leans local |
//! | `embeddings` | (`edgecloud serve`) where `POST /v1/embeddings` goes on this route: `local` (default) or `cloud` (the cloud endpoint's `/v1/embeddings`, passed through); a route without it takes `[harness]`'s; `cloud` needs a cloud lane |
//!
//! `[[models]]` tables (feature `local`) give `edgecloud serve` several
//! local models, each a name a request's `model` selects: `name`, `model`
//! (a file or model reference, as `[local] model`), and optionally its own
//! `context_size`, `gpu_layers`, `threads` and `pooling`; every other
//! local setting comes from `[local]` (and the flags).
//!
//! `[prices."MODEL"]` tables price each cloud model in dollars per
//! million tokens: `input`, `output` and optionally `cached_input` (no
//! price is built in; every model named must be one a lane or route asks
//! for). `[ledger]` keeps cloud spending and idempotency records across
//! restarts: `store` (a directory), `idempotency_window_s` (how long a
//! recorded answer is replayed, default 86400). See docs/cost.md.
//!
//! Policy parameters must come with the `policy` key in the same table, so
//! a route never silently applies a threshold to a policy it did not pick.
//! Unknown keys are errors (typos do not pass silently).

mod lookup;
mod read;
mod start;
#[cfg(test)]
mod tests;
mod validate;

#[cfg(feature = "cloud")]
use crate::cloud::CloudConfig;
use crate::harness::{PriceTable, RouteConfig};
#[cfg(feature = "local")]
use crate::local::LocalConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
#[cfg(feature = "local")]
use std::path::PathBuf;

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
    /// `[prices."MODEL"]`: dollars per million tokens of each cloud model.
    #[serde(default)]
    pub prices: Option<PriceTable>,
    /// `[ledger]`: where spending and idempotency records are kept.
    #[serde(default)]
    pub ledger: Option<LedgerConfig>,
}

/// The settings of `[ledger]` (docs/cost.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LedgerConfig {
    /// The store's directory (created if missing); `--ledger` wins.
    pub store: std::path::PathBuf,
    /// How long a recorded answer is replayed for its idempotency key, in
    /// seconds (default [`DEFAULT_IDEMPOTENCY_WINDOW_S`]); never evicted
    /// before.
    pub idempotency_window_s: Option<u64>,
}

/// How long idempotency records are kept when `[ledger]` does not say:
/// a day, longer than any client's retries.
pub const DEFAULT_IDEMPOTENCY_WINDOW_S: u64 = 86_400;

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
