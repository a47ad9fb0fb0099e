//! `edgecloud run`: one request through the harness (both lanes, one
//! deadline, a policy), over the library's public API only.
//!
//! [`HarnessArgs`] are the lane flags every command that builds a harness
//! shares (`run` now; `serve` and `bench` later): a config file, then flags
//! that override it.

use anyhow::{bail, Context as _};
use edgecloud::cloud::CloudConfig;
use edgecloud::harness::{
    CancelResult, Harness, HarnessConfig, LaneReport, Outcome, PolicyKind, RunOptions, RunStatus,
    EXAMPLE_CONFIG,
};
use edgecloud::local::{LocalConfig, ProbeMode};
use edgecloud::{ChatMessage, Lane, Request, Sampling};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Lane and policy flags shared by every command that builds a harness.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct HarnessArgs {
    /// TOML config file: lanes, policy, deadline, named routes (flags
    /// override it; see the example below).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// GGUF model file for the local lane.
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,
    /// Base URL of the OpenAI-compatible cloud API, up to the version
    /// segment (e.g. https://api.openai.com/v1).
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Model name for the cloud lane.
    #[arg(long, value_name = "NAME")]
    cloud_model: Option<String>,
    /// Environment variable holding the cloud API key (default
    /// OPENAI_API_KEY).
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// PEM file of CA certificates the cloud lane trusts besides the web
    /// roots (a private CA or a self-signed server).
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Policy: local-only, cloud-only, race, hedge, cascade, fallback,
    /// best-of (default: the config's, else race).
    #[arg(long, value_name = "POLICY")]
    policy: Option<PolicyKind>,
    /// Time budget of a run, in milliseconds (default: the config's, else
    /// 5000).
    #[arg(long, value_name = "N")]
    deadline_ms: Option<u64>,
    /// Compute threads of the local lane (default: physical cores).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Probe the local model in a child process before serving, so a
    /// llama.cpp crash is an error, not a dead process: child (the
    /// default for the CLI) or off.
    #[arg(long, value_name = "MODE")]
    probe: Option<ProbeMode>,
}

impl HarnessArgs {
    /// The config file (if any) with the flags applied on top.
    pub(crate) fn load_config(&self) -> anyhow::Result<HarnessConfig> {
        let mut cfg = match &self.config {
            Some(path) => HarnessConfig::from_file(path)?,
            None => HarnessConfig::default(),
        };
        if let Some(model) = &self.model {
            cfg.local.get_or_insert_with(LocalConfig::default).model = model.clone();
        }
        if let Some(mode) = self.probe {
            match cfg.local.as_mut() {
                Some(local) => local.probe = mode,
                None => bail!("--probe needs a local model (--model, or [local] in --config)"),
            }
        }
        if let Some(threads) = self.threads {
            match cfg.local.as_mut() {
                Some(local) => local.threads = Some(threads),
                None => bail!("--threads needs a local model (--model, or [local] in --config)"),
            }
        }
        if self.base_url.is_some()
            || self.cloud_model.is_some()
            || self.api_key_env.is_some()
            || self.ca_file.is_some()
        {
            let cloud = cfg.cloud.get_or_insert_with(CloudConfig::default);
            if let Some(url) = &self.base_url {
                cloud.base_url = url.clone();
            }
            if let Some(model) = &self.cloud_model {
                cloud.model = model.clone();
            }
            if let Some(var) = &self.api_key_env {
                cloud.api_key_env = var.clone();
            }
            if let Some(file) = &self.ca_file {
                cloud.ca_file = Some(file.clone());
            }
            if cloud.base_url.is_empty() || cloud.model.is_empty() {
                bail!("the cloud lane needs both --base-url and --cloud-model (or [cloud] in --config)");
            }
        }
        if let Some(kind) = self.policy {
            cfg.harness.set_policy(kind);
        }
        if let Some(ms) = self.deadline_ms {
            cfg.harness.deadline_ms = Some(ms);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Starts the configured lanes and builds the harness.
    pub(crate) fn build(&self, cfg: &HarnessConfig) -> anyhow::Result<Harness> {
        if cfg.local.is_none() && cfg.cloud.is_none() {
            bail!(
                "no lane configured: give --model (local lane), --base-url with \
                 --cloud-model (cloud lane), or --config FILE"
            );
        }
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

fn example_help() -> String {
    format!(
        "Lanes: --model starts the local lane, --base-url with --cloud-model the \
         cloud lane; either may be absent. Flags override --config.\n\n\
         Example config (edgecloud.toml):\n\n{EXAMPLE_CONFIG}"
    )
}

/// Arguments of `edgecloud run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = example_help())]
pub(crate) struct RunArgs {
    /// The user message.
    #[arg(long, value_name = "TEXT")]
    prompt: String,
    /// An optional system message, sent first.
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
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
    /// Print one JSON outcome object instead of the text and a summary.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.lanes.load_config()?;
    let harness = args.lanes.build(&cfg)?;
    let messages = ChatMessage::conversation(args.system.clone(), args.prompt.clone());
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
    let mut opts = args.lanes.run_options(&cfg)?;
    opts.route = args.route.clone();
    if !args.json {
        opts = opts.stream();
    }
    let mut run = harness
        .start(request, opts)
        .context("the run could not start")?;
    let mut streamed = false;
    if !args.json {
        let mut out = std::io::stdout().lock();
        while let Some(piece) = run.next_token_blocking()? {
            streamed = true;
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        }
    }
    let outcome = run.wait()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        if streamed {
            println!();
        }
        eprint!("{}", summary(&outcome));
    }
    Ok(if outcome.status == RunStatus::Ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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
