//! The lane and policy flags every command that builds a harness shares
//! (`run`, `serve`, `bench`, `config show`): a config file, then
//! environment variables and flags that override it; `--model NAME=MODEL`
//! read apart from a plain model; the usage error when no lane is given.

use crate::exit::{usage, usage_from};
use edgecloud::bindings::{Overrides, SettingsError};
use edgecloud::harness::{
    ConfigError, Harness, HarnessConfig, PolicyKind, RunOptions, EXAMPLE_CONFIG,
};
use edgecloud::local::{ProbeMode, SpecType, ThreadPolicy};
use std::path::{Path, PathBuf};

/// Lane and policy flags shared by every command that builds a harness
/// (`run`, `serve`, `bench`, `config show`). Where a setting comes from,
/// first found wins: the flag, its `EDGECLOUD_*` variable, the config file,
/// the default (`OPENAI_BASE_URL` comes after the config file: it is the
/// OpenAI SDKs' variable, likely set for other tools too).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HarnessArgs {
    /// TOML config file: lanes, policy, deadline, named routes (flags
    /// override it; see the example below).
    #[arg(long, value_name = "FILE", env = "EDGECLOUD_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// GGUF model for the local lane: a file, `ollama:NAME[:TAG]`,
    /// `hf:ORG/REPO[:QUANT]` or `hf:ORG/REPO/FILE.gguf` (found in Ollama's
    /// store or the Hugging Face cache, else downloaded into it); the
    /// config file's `[local] model` takes the same forms. `edgecloud
    /// serve` takes it repeated as NAME=MODEL: several models, a request's
    /// `model` picking one by NAME.
    #[arg(short, long, value_name = "MODEL", env = "EDGECLOUD_MODEL")]
    pub(crate) model: Vec<PathBuf>,
    /// Base URL of the OpenAI-compatible cloud API, up to the version
    /// segment (e.g. https://api.openai.com/v1); else OPENAI_BASE_URL
    /// when the config file sets none.
    #[arg(long, value_name = "URL", env = "EDGECLOUD_BASE_URL")]
    pub(crate) base_url: Option<String>,
    /// Model name for the cloud lane.
    #[arg(long, value_name = "NAME", env = "EDGECLOUD_CLOUD_MODEL")]
    pub(crate) cloud_model: Option<String>,
    /// Environment variable holding the cloud API key (default
    /// OPENAI_API_KEY).
    #[arg(long, value_name = "VAR", env = "EDGECLOUD_API_KEY_ENV")]
    pub(crate) api_key_env: Option<String>,
    /// PEM file of CA certificates the cloud lane trusts besides the web
    /// roots (a private CA or a self-signed server).
    #[arg(long, value_name = "FILE", env = "EDGECLOUD_CA_FILE")]
    pub(crate) ca_file: Option<PathBuf>,
    /// Policy: local-only, cloud-only, race, hedge, cascade, fallback,
    /// best-of (default: the config's, else race).
    #[arg(long, value_name = "POLICY", env = "EDGECLOUD_POLICY")]
    pub(crate) policy: Option<PolicyKind>,
    /// Time budget of a run, in milliseconds (default: the config's, else
    /// 5000).
    #[arg(long, value_name = "N", env = "EDGECLOUD_DEADLINE_MS")]
    pub(crate) deadline_ms: Option<u64>,
    /// Compute threads of the local lane (default: physical cores).
    #[arg(long, value_name = "N", env = "EDGECLOUD_THREADS")]
    pub(crate) threads: Option<usize>,
    /// How many of those threads each decode step uses: adaptive (the
    /// default: fewer when other programs hold cores, from the measured
    /// step time) or fixed (always --threads, as llama.cpp does).
    #[arg(long, value_name = "POLICY", env = "EDGECLOUD_THREAD_POLICY")]
    pub(crate) thread_policy: Option<ThreadPolicy>,
    /// Layers of the local model to offload to a GPU (default 0). More
    /// than 0 without a GPU is an error (`edgecloud doctor` lists devices).
    #[arg(long, value_name = "N", env = "EDGECLOUD_GPU_LAYERS")]
    pub(crate) gpu_layers: Option<u32>,
    /// Context size of the local lane in tokens (default: the model's, at
    /// most 4096).
    #[arg(long, value_name = "N", env = "EDGECLOUD_CONTEXT_SIZE")]
    pub(crate) context_size: Option<u32>,
    /// Prompt batch size of the local lane (tokens per llama.cpp call;
    /// default 128: smaller stops sooner on cancellation, a GPU wants more).
    #[arg(long, value_name = "N", env = "EDGECLOUD_BATCH_SIZE")]
    pub(crate) batch_size: Option<u32>,
    /// Probe the local model in a child process before serving, so a
    /// llama.cpp crash is an error, not a dead process: child (the
    /// default for the CLI) or off.
    #[arg(long, value_name = "MODE")]
    pub(crate) probe: Option<ProbeMode>,
    /// Speculative decoding of the local lane: off (the default), ngram
    /// (drafts by prompt lookup) or draft (drafts by --model-draft),
    /// verified in the same step as the next token; a greedy answer is
    /// unchanged, a sampled one keeps its distribution.
    #[arg(long, value_name = "TYPE", env = "EDGECLOUD_SPEC_TYPE")]
    pub(crate) spec_type: Option<SpecType>,
    /// The draft model for --spec-type draft: a smaller GGUF file with the
    /// same vocabulary (llama-server's --model-draft / -md).
    #[arg(
        long,
        visible_alias = "md",
        value_name = "FILE",
        env = "EDGECLOUD_MODEL_DRAFT"
    )]
    pub(crate) model_draft: Option<PathBuf>,
    /// Most tokens drafted per step (default 16).
    #[arg(long, value_name = "N", env = "EDGECLOUD_DRAFT_MAX")]
    pub(crate) draft_max: Option<u32>,
    /// Fewest drafts worth verifying (default 0).
    #[arg(long, value_name = "N", env = "EDGECLOUD_DRAFT_MIN")]
    pub(crate) draft_min: Option<u32>,
    /// true (the default): drafts keep a greedy answer the same to the
    /// last bit, so a lone sequence on several threads drafts in its first
    /// 256 cells only; false: drafts on every step, as llama-server does
    /// (an answer may part where two tokens are within rounding).
    #[arg(long, value_name = "BOOL", env = "EDGECLOUD_SPEC_EXACT",
          action = clap::ArgAction::Set)]
    pub(crate) spec_exact: Option<bool>,
    /// The prompt cache's budget in MiB (llama-server's --cache-ram;
    /// default 256, 0: none): conversations the lane moved on from are
    /// kept in memory, so a request coming back to one starts from its
    /// cells.
    #[arg(long, value_name = "MIB", env = "EDGECLOUD_CACHE_RAM")]
    pub(crate) cache_ram: Option<u64>,
    /// Cloud budget of each route that sets none: `5usd/day`,
    /// `$20/month`, `2000000tokens/month` (UTC). From 80% of it a hybrid
    /// route runs as a cascade (local first); once spent the cloud lane
    /// is absent until it renews. Needs --ledger (docs/cost.md).
    #[arg(long, value_name = "AMOUNT/PERIOD", env = "EDGECLOUD_CLOUD_BUDGET")]
    pub(crate) cloud_budget: Option<String>,
    /// Directory of the ledger's store: cloud spending (for budgets) and
    /// the answers of idempotency keys, kept across restarts (the config
    /// file's `[ledger] store`).
    #[arg(long, value_name = "DIR", env = "EDGECLOUD_LEDGER")]
    pub(crate) ledger: Option<PathBuf>,
}

/// The OpenAI SDKs' base URL variable, when set and not empty.
pub(crate) fn openai_base_url() -> Option<String> {
    edgecloud::bindings::openai_base_url()
}

impl HarnessArgs {
    /// The config file (if any) with the environment and flags applied on
    /// top. Every mistake here is a usage error (exit status 2).
    pub(crate) fn load_config(&self) -> anyhow::Result<HarnessConfig> {
        self.load_config_with(crate::modelref::Download::Allowed)
    }

    /// The flags as the library's overrides: what they set wins over the
    /// config file, by the one rule every front end shares.
    fn overrides(&self) -> Overrides {
        let mut o = Overrides::default();
        o.model = self.model.first().cloned();
        o.base_url = self.base_url.clone();
        o.cloud_model = self.cloud_model.clone();
        o.api_key_env = self.api_key_env.clone();
        o.ca_file = self.ca_file.clone();
        o.policy = self.policy;
        o.deadline_ms = self.deadline_ms;
        o.threads = self.threads;
        o.thread_policy = self.thread_policy;
        o.gpu_layers = self.gpu_layers;
        o.context_size = self.context_size;
        o.batch_size = self.batch_size;
        o.probe = self.probe;
        o.spec_type = self.spec_type;
        o.model_draft = self.model_draft.clone();
        o.draft_max = self.draft_max;
        o.draft_min = self.draft_min;
        o.spec_exact = self.spec_exact;
        o.cache_ram = self.cache_ram;
        o
    }

    /// [`load_config`](Self::load_config), saying whether a model
    /// reference that is not cached may be downloaded.
    pub(crate) fn load_config_with(
        &self,
        download: crate::modelref::Download,
    ) -> anyhow::Result<HarnessConfig> {
        let mut cfg = self.load_config_as_given()?;
        // A reference (flag, variable or config file) becomes its file
        // before anything else sees it.
        if let Some(local) = cfg.local.as_mut() {
            crate::modelref::apply(local, download)?;
        }
        Ok(cfg)
    }

    /// The configuration with the flags applied, model references left as
    /// given (`serve` resolves each of several models itself).
    pub(crate) fn load_config_as_given(&self) -> anyhow::Result<HarnessConfig> {
        if self.model.len() > 1 || self.model.iter().any(|m| named_model(m).is_some()) {
            return Err(usage(
                "several models (--model NAME=MODEL, repeated) are for `edgecloud serve`; \
                 give one --model FILE here",
            ));
        }
        let mut cfg = match &self.config {
            // A file that cannot be read is a failure (1), like a model
            // file; one that reads but is invalid is a usage error (2).
            Some(path) => HarnessConfig::from_file(path).map_err(|e| match e {
                ConfigError::Read { .. } => anyhow::Error::new(e),
                e => usage_from(&e),
            })?,
            None => HarnessConfig::default(),
        };
        self.overrides().apply(&mut cfg).map_err(|e| match e {
            // The library names settings by their keys; a command user
            // knows them as flags.
            SettingsError::NeedsLocal { setting } => usage(format!(
                "--{} needs a local model (--model, or [local] in --config)",
                setting.replace('_', "-")
            )),
            SettingsError::CloudIncomplete => usage(
                "the cloud lane needs both a base URL (--base-url, EDGECLOUD_BASE_URL, \
                 [cloud] base_url in --config, or OPENAI_BASE_URL) and a model \
                 (--cloud-model, EDGECLOUD_CLOUD_MODEL, or [cloud] model)",
            ),
            e => usage_from(&e),
        })?;
        if let Some(dir) = &self.ledger {
            let window = cfg.ledger.as_ref().and_then(|l| l.idempotency_window_s);
            cfg.ledger = Some(edgecloud::harness::LedgerConfig {
                store: dir.clone(),
                idempotency_window_s: window,
            });
        }
        if let Some(b) = &self.cloud_budget {
            cfg.harness.cloud_budget = Some(b.clone());
            cfg.harness.cloud_budget("harness").map_err(|e| {
                usage(
                    e.to_string()
                        .replace("`harness.cloud_budget`", "--cloud-budget"),
                )
            })?;
        }
        Ok(cfg)
    }

    /// Starts the configured lanes and builds the harness.
    pub(crate) fn build(&self, cfg: &HarnessConfig) -> anyhow::Result<Harness> {
        require_a_lane(cfg)?;
        Ok(cfg.build()?)
    }

    /// Per-run overrides, so the flags win over a route's own settings too.
    pub(crate) fn run_options(&self, cfg: &HarnessConfig) -> anyhow::Result<RunOptions> {
        let mut opts = RunOptions::new();
        if self.policy.is_some() {
            opts.policy = cfg.harness.resolved_policy("harness")?;
        }
        Ok(opts)
    }
}

/// No lane at all is a usage error: nothing could answer.
pub(crate) fn require_a_lane(cfg: &HarnessConfig) -> anyhow::Result<()> {
    if cfg.local.is_none() && cfg.cloud.is_none() {
        return Err(usage(
            "no lane configured: give --model (local lane), --base-url with \
             --cloud-model (cloud lane), or --config FILE",
        ));
    }
    Ok(())
}

pub(crate) fn example_help() -> String {
    format!(
        "Lanes: --model starts the local lane, --base-url with --cloud-model the \
         cloud lane; either may be absent. Each setting comes from, first found: \
         the flag, its EDGECLOUD_* variable (shown with each flag), --config, the \
         default; OPENAI_BASE_URL is the base URL's last resort. \
         `edgecloud config show` prints the result.\n\n\
         Example config (edgecloud.toml):\n\n{EXAMPLE_CONFIG}"
    )
}

/// `NAME=MODEL` as NAME and MODEL; `None` for a plain model (a file, which
/// may hold `=`, or a reference). A name is letters, digits and `._:-`.
pub(crate) fn named_model(arg: &Path) -> Option<(String, PathBuf)> {
    if arg.exists() {
        return None;
    }
    let (name, model) = arg.to_str()?.split_once('=')?;
    let ok = !name.is_empty()
        && !model.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c));
    ok.then(|| (name.to_string(), PathBuf::from(model)))
}
