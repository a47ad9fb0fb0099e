//! `edgecloud run`: one request through the harness (both lanes, one
//! deadline, a policy), over the library's public API only.
//!
//! [`HarnessArgs`] are the lane flags every command that builds a harness
//! shares (`run`, `serve`, `bench`, `config show`): a config file, then
//! environment variables and flags that override it.

use crate::exit::{self, usage, usage_from};
use crate::output::JsonArgs;
use crate::prompt::PromptArgs;
use anyhow::Context as _;
use edgecloud::bindings::{Overrides, SettingsError};
use edgecloud::harness::{
    AbortHandle, CancelResult, ConfigError, Harness, HarnessConfig, LaneReport, Outcome,
    PolicyKind, RunOptions, RunStatus, EXAMPLE_CONFIG,
};
use edgecloud::local::{ProbeMode, SpecType, ThreadPolicy};
use edgecloud::{ChatMessage, Lane, Request, Sampling};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
        if self.model.len() > 1
            || self
                .model
                .iter()
                .any(|m| crate::serve::named_model(m).is_some())
        {
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
        Ok(cfg)
    }

    /// Starts the configured lanes and builds the harness.
    pub(crate) fn build(&self, cfg: &HarnessConfig) -> anyhow::Result<Harness> {
        require_a_lane(cfg)?;
        Ok(cfg.build()?)
    }

    /// Per-run overrides, so the flags win over a route's own settings too.
    fn run_options(&self, cfg: &HarnessConfig) -> anyhow::Result<RunOptions> {
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

/// Arguments of `edgecloud run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = example_help())]
pub(crate) struct RunArgs {
    #[command(flatten)]
    prompt: PromptArgs,
    #[command(flatten)]
    lanes: HarnessArgs,
    /// A route named in the config (default: the config's default route).
    #[arg(long, value_name = "NAME")]
    route: Option<String>,
    /// Most tokens to generate.
    #[arg(long, value_name = "N", default_value_t = 128)]
    max_tokens: u32,
    /// Sampling temperature (0 = greedy).
    #[arg(long, value_name = "T", default_value_t = 0.8)]
    temperature: f32,
    /// Sampling seed, for reproducible local output.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    #[command(flatten)]
    output: JsonArgs,
}

pub(crate) fn run(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    // `edgecloud run MODEL "prompt"`: the model argument wins over
    // --model and EDGECLOUD_MODEL.
    if let Some(model) = args.prompt.take_model() {
        args.lanes.model = vec![PathBuf::from(model)];
    }
    let cfg = args.lanes.load_config()?;
    let user = args.prompt.user_message()?;
    let harness = match args.lanes.build(&cfg) {
        Ok(h) => h,
        // With --json, a lane that cannot start is still one JSON line
        // (as `local` and `cloud` report theirs), so a script reading
        // stdout always gets an object; usage errors print none.
        Err(e) if args.output.json && exit::status_of(&e) == exit::FAILURE => {
            args.output.print(&serde_json::json!({
                "status": "failed",
                "error": {"kind": "startup", "message": format!("{e:#}")},
                "lanes": [],
            }))?;
            eprintln!("error: {e:#}");
            return Ok(exit::code(exit::FAILURE));
        }
        Err(e) => return Err(e),
    };
    let messages = ChatMessage::conversation(args.prompt.system.clone(), user);
    let request = Request {
        id: None,
        messages,
        sampling: Sampling {
            max_tokens: args.max_tokens,
            temperature: args.temperature,
            seed: args.seed,
            ..Sampling::default()
        },
        deadline: args.lanes.deadline_ms.map(Duration::from_millis),
    };
    let json = args.output.json;
    let mut opts = args.lanes.run_options(&cfg)?;
    opts.route = args.route.clone();
    if !json {
        opts = opts.stream();
    }
    // Ctrl-C aborts the run: its outcome is still printed (status
    // `aborted`) and the exit status is 130. The handler is in place before
    // the run starts; the abort handle reaches it through `slot`.
    let interrupted = Arc::new(AtomicBool::new(false));
    let slot: Arc<Mutex<Option<AbortHandle>>> = Arc::default();
    {
        let (interrupted, slot) = (interrupted.clone(), slot.clone());
        crate::interrupt::on_ctrl_c(move || {
            interrupted.store(true, Ordering::SeqCst);
            if let Some(abort) = slot.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                let _ = abort.abort();
            }
        });
    }
    let mut run = harness
        .start(request, opts)
        .context("the run could not start")?;
    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(run.abort_handle());
    if interrupted.load(Ordering::SeqCst) {
        let _ = run.abort_handle().abort();
    }
    let mut streamed = false;
    if !json {
        let mut out = std::io::stdout().lock();
        while let Some(piece) = run.next_token_blocking()? {
            streamed = true;
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        }
    }
    let outcome = run.wait()?;
    if json {
        args.output.print(&outcome)?;
    } else {
        if streamed {
            println!();
        }
        eprint!("{}", summary(&outcome));
    }
    Ok(exit::code(match outcome.status {
        RunStatus::Ok => exit::OK,
        RunStatus::DeadlineExceeded => exit::DEADLINE,
        RunStatus::Aborted if interrupted.load(Ordering::SeqCst) => exit::INTERRUPTED,
        RunStatus::Failed | RunStatus::Aborted => exit::FAILURE,
    }))
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.1} ms"))
}

/// A few lines a person can read at a glance.
fn summary(o: &Outcome) -> String {
    let mut s = format!(
        "-- {} {}: {}",
        o.route,
        o.policy,
        match (o.status, o.winner) {
            (RunStatus::Ok, Some(w)) => format!("{w} won"),
            (status, _) => status.as_str().replace('_', " "),
        }
    );
    s.push_str(&format!(
        " in {:.1} ms (deadline {:.0} ms, overshoot {:.1} ms)\n",
        o.elapsed_ms, o.deadline_ms, o.overshoot_ms
    ));
    if let Some(e) = &o.error {
        s.push_str(&format!("   error: {e}\n"));
    }
    s.push_str(&format!("   decision: {}\n", o.decision.reason));
    if let Some(p) = &o.prompt_stage {
        s.push_str(&format!(
            "   prompt stage: {} {} (threshold {}): {}\n",
            p.signal,
            p.score
                .map_or_else(|| "-".to_string(), |v| format!("{v:.4}")),
            p.threshold,
            match (p.score, p.straight_to_cloud) {
                (None, _) => "no score came",
                (Some(_), true) => "straight to the cloud",
                (Some(_), false) => "local went on",
            }
        ));
    }
    for r in &o.lanes {
        s.push_str(&lane_line(r));
    }
    s
}

fn lane_line(r: &LaneReport) -> String {
    let mut line = format!("   {:<5} {:<11}", r.lane.as_str(), r.status.as_str());
    if r.started_ms.is_some() {
        line.push_str(&format!(
            " ttft {:>9}  total {:>9}",
            ms(r.ttft_ms),
            ms(r.total_ms)
        ));
    }
    if r.prompt_tokens.is_some() || r.completion_tokens.is_some() {
        let n = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        line.push_str(&format!(
            "  tokens {}+{}",
            n(r.prompt_tokens),
            n(r.completion_tokens)
        ));
    }
    if let Some(score) = r.score {
        line.push_str(&format!("  score {score:.3}"));
    }
    if let Some(c) = r.cancel {
        line.push_str(match c {
            CancelResult::StoppedInTime => "  (stopped in time)",
            CancelResult::StillRunning => "  (still running)",
            CancelResult::AlreadyFinished => "  (already finished)",
            CancelResult::NotPropagated => "  (cancel not propagated)",
        });
    }
    if let Some(e) = &r.error {
        line.push_str(&format!("  error: {}", edgecloud::error_chain(e)));
    } else if let Some(n) = &r.note {
        if r.lane == Lane::Cloud || r.lane == Lane::Local {
            line.push_str(&format!("  ({n})"));
        }
    }
    line.push('\n');
    line
}
