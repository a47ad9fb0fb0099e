//! `edgecloud bench`: every policy x deadline over a workload through the
//! harness, with a progress bar and clean Ctrl-C; `bench compare` and
//! `bench report` over output directories. Drawing progress and handling
//! signals live here; everything measured and written comes from
//! `edgecloud_bench`.

use crate::exit::{self, usage};
use crate::harness_args::HarnessArgs;
use crate::output::JsonArgs;
use anyhow::Context as _;
use edgecloud::harness::{Harness, PolicyKind, EXAMPLE_CONFIG};
use edgecloud_bench::{
    compare, read_runs, read_summary, render_comparison, run_bench, utc_now, write_report,
    BenchPlan, BenchSettings, CloudSetup, Environment, HarnessExecutor, LateWorkerLog, LocalSetup,
    Progress, Summary, Workload,
};
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn after_help() -> String {
    "Runs every policy x deadline combination over the workload (--warmup \
     unrecorded passes, then --runs measured passes) and writes DIR/runs.jsonl \
     (flushed run by run), DIR/summary.json, DIR/report.md and SVG charts. \
     Ctrl-C stops after the run in flight is aborted and keeps what was \
     measured; a second Ctrl-C exits at once.\n\n\
     Workloads: a JSON Lines file, one request per line: edgecloud's own \
     ({\"prompt\": \"...\"} or {\"messages\": [...]}, optional \"sampling\", \"id\", \
     \"tag\", \"expected\", \"grader\": contains, exact, number, choice or regex), \
     a plain OpenAI chat-completion body ({\"messages\": [...], \"max_tokens\": 8, \
     \"temperature\": 0}), or an OpenAI Batch API line ({\"custom_id\", \"method\", \
     \"url\", \"body\"}; custom_id is the item's id); or builtin:short, \
     builtin:long, builtin:chat (optionally :COUNT).\n\n\
     Lanes: --model starts the local lane, --base-url with --cloud-model the \
     cloud lane; flags override --config, as for `edgecloud run`.\n\n\
     Example config (edgecloud.toml):\n\n"
        .to_string()
        + EXAMPLE_CONFIG
}

/// Arguments of `edgecloud bench`.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_long_help = after_help()
)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// The requests: a JSON Lines file, or builtin:short, builtin:long,
    /// builtin:chat (optionally with :COUNT).
    #[arg(long, value_name = "FILE|builtin:NAME", required = true)]
    workload: Option<String>,
    /// Policies to run, comma-separated (default: --policy or the config's
    /// policy; without one, every policy the configured lanes allow).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    policies: Vec<PolicyKind>,
    /// Deadlines in milliseconds, comma-separated (default: --deadline-ms
    /// or the config's, else 5000).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    deadlines_ms: Vec<u64>,
    /// Measured passes over the workload per combination.
    #[arg(long, value_name = "N", default_value_t = 3)]
    runs: u32,
    /// Requests in flight at once: the workload's items go in waves of N,
    /// each on its own instance of a pool of N (one loaded model, batched
    /// local decoding); the report gives the aggregate tokens/s and the
    /// latency distribution under that load.
    #[arg(long, value_name = "N", default_value_t = 1)]
    concurrency: usize,
    /// Unrecorded warm-up passes per combination, before the measured ones.
    #[arg(long, value_name = "N", default_value_t = 1)]
    warmup: u32,
    /// Output directory (default: bench-results/<UTC time>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// How long to wait for late workers, before a run and at the end, in
    /// milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    grace_ms: u64,
    /// Start each run at once, even while a late worker of the previous
    /// run still holds a lane (absent for that run: a busy skip), as under
    /// sustained load. By default each run waits (up to --grace-ms) for
    /// earlier late workers to return, so it starts with idle lanes.
    #[arg(long)]
    back_to_back: bool,
    /// Test stand-in for the local lane: answer with the recorded answers
    /// (and recorded log-probabilities) of this file instead of a model.
    /// A scripted lane of known confidence, for calibration tests.
    #[arg(long, value_name = "FILE", hide = true)]
    replay_local: Option<PathBuf>,
    /// Answer locally by a consensus of N samples per item
    /// (self-consistency): N parallel sequences sharing the prompt's KV
    /// cells, answers read as the item's grader reads them (the number,
    /// the choice letter, else the text), the majority answer as the local
    /// answer and the share agreeing as the `answer_agreement` signal.
    /// Items without a seed get one from their id (reruns draw the same
    /// samples).
    #[arg(long, value_name = "N", default_value_t = 1)]
    samples: u32,
    /// Temperature of the samples of items that sample greedily (with
    /// --samples above 1).
    #[arg(long, value_name = "T", default_value_t = 0.7)]
    sample_temperature: f32,
    #[command(flatten)]
    lanes: HarnessArgs,
}

#[derive(Debug, clap::Subcommand)]
enum BenchCommand {
    /// Print the differences between two bench reports, figure by figure,
    /// with ratios (B / A).
    Compare {
        /// The first output directory (A), or its summary.json.
        a: PathBuf,
        /// The second output directory (B), or its summary.json.
        b: PathBuf,
        #[command(flatten)]
        output: JsonArgs,
    },
    /// Rebuild summary.json, report.md and the charts of an output
    /// directory from its runs.jsonl (after a crash, or after editing).
    Report {
        /// The output directory.
        dir: PathBuf,
    },
    /// Simulate a cascade at every threshold of each local confidence
    /// signal from a bench's local-only and cloud-only runs (running
    /// nothing); print the accuracy-vs-cloud-share curve, CPT(50%),
    /// CPT(80%) and APGR, and write the chart and a config snippet.
    Calibrate(crate::bench_quality::CalibrateArgs),
    /// Serve recorded answers as an OpenAI-compatible endpoint on
    /// loopback, at a chosen time to first token and token rate: a
    /// stand-in for a real provider holding real answers.
    ReplayCloud(crate::bench_quality::ReplayCloudArgs),
    /// Record every workload item's prompt-only signals with the local
    /// model (the prompt's mean log-probability; with --embeddings its
    /// embedding) for `bench calibrate --prompt-signals`: one prompt pass
    /// per item, no answer.
    PromptSignals(crate::bench_prompt::PromptSignalsArgs),
}

pub(crate) fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        Some(BenchCommand::Compare { a, b, output }) => compare_cmd(a, b, output),
        Some(BenchCommand::Report { dir }) => report_cmd(dir),
        Some(BenchCommand::Calibrate(a)) => crate::bench_quality::calibrate_cmd(a),
        Some(BenchCommand::ReplayCloud(a)) => crate::bench_quality::replay_cloud_cmd(a),
        Some(BenchCommand::PromptSignals(a)) => crate::bench_prompt::prompt_signals_cmd(a),
        None => bench_cmd(args),
    }
}

fn compare_cmd(a: PathBuf, b: PathBuf, output: JsonArgs) -> anyhow::Result<ExitCode> {
    let sa = read_summary(&a).with_context(|| format!("reading report A ({})", a.display()))?;
    let sb = read_summary(&b).with_context(|| format!("reading report B ({})", b.display()))?;
    let c = compare(&sa, &sb);
    if output.json {
        output.print(&c)?;
    } else {
        print!(
            "{}",
            render_comparison(&c, &a.display().to_string(), &b.display().to_string())
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn report_cmd(dir: PathBuf) -> anyhow::Result<ExitCode> {
    let runs = read_runs(&dir)?;
    // Settings and environment come from the summary written when the
    // bench started; without one, this machine stands in.
    let summary = match read_summary(&dir) {
        Ok(old) => Summary::new(
            old.settings,
            Environment {
                started_at: old.started_at,
                wall_s: old.wall_s,
                machine: old.machine,
                build: old.build,
                model: old.model,
            },
            &runs,
            old.interrupted,
        ),
        Err(_) => Summary::new(
            BenchSettings::default(),
            edgecloud::build_facts::bench_environment(None),
            &runs,
            true,
        ),
    };
    write_report(&dir, &summary)?;
    eprintln!(
        "wrote the summary, report and charts of {} runs to {}",
        runs.len(),
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn bench_cmd(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let spec = args.workload.clone().expect("clap requires --workload");
    if !(1..=edgecloud::request::MAX_SAMPLES).contains(&args.samples) {
        return Err(usage(format!(
            "--samples must be 1 to {}",
            edgecloud::request::MAX_SAMPLES
        )));
    }
    if !(args.sample_temperature.is_finite() && args.sample_temperature > 0.0) {
        return Err(usage("--sample-temperature must be a number above 0"));
    }
    let workload = Workload::load(&spec)?.with_consensus(args.samples, args.sample_temperature);
    let mut cfg = args.lanes.load_config()?;
    // The local lane needs a sequence id per sample of the largest
    // consensus an item asks for.
    let samples = workload
        .items
        .iter()
        .filter_map(|i| i.request.sampling.consensus.map(|c| c.samples))
        .max()
        .unwrap_or(1);
    if let Some(local) = cfg.local.as_mut() {
        local.max_samples = local.max_samples.max(samples);
    }
    let replay_local = match &args.replay_local {
        Some(path) => Some(edgecloud_bench::Replay::load(path)?),
        None => None,
    };
    let has_local = cfg.local.is_some() || replay_local.is_some();
    let has_cloud = cfg.cloud.is_some();

    let config_policy = cfg.harness.resolved_policy("harness")?;
    let policies: Vec<PolicyKind> = if !args.policies.is_empty() {
        args.policies.clone()
    } else if let Some(p) = &config_policy {
        vec![p.kind()]
    } else if has_local && has_cloud {
        PolicyKind::ALL.to_vec()
    } else if has_local {
        vec![PolicyKind::LocalOnly]
    } else {
        vec![PolicyKind::CloudOnly]
    };
    if !has_local && !has_cloud {
        crate::harness_args::require_a_lane(&cfg)?;
    }
    for p in &policies {
        if (*p == PolicyKind::LocalOnly && !has_local)
            || (*p == PolicyKind::CloudOnly && !has_cloud)
        {
            return Err(usage(format!(
                "policy {p} needs its lane (--model for local; --base-url and \
                 --cloud-model for cloud)"
            )));
        }
    }
    let deadlines_ms = if !args.deadlines_ms.is_empty() {
        args.deadlines_ms.clone()
    } else {
        vec![cfg.harness.deadline_ms.unwrap_or(5000)]
    };

    let mut settings = BenchSettings {
        local: match (&args.replay_local, cfg.local.as_ref()) {
            (Some(path), _) => Some(LocalSetup {
                model: format!("replay:{} (recorded answers, not a model)", path.display()),
                ..LocalSetup::default()
            }),
            (None, l) => l.map(|l| LocalSetup {
                model: l.model.display().to_string(),
                threads: Some(l.threads.unwrap_or_else(edgecloud::local::physical_cores)),
                thread_policy: Some(l.thread_policy.to_string()),
                spec_type: (l.spec_type != edgecloud::local::SpecType::Off)
                    .then(|| l.spec_type.to_string()),
                draft_max: (l.spec_type != edgecloud::local::SpecType::Off).then_some(l.draft_max),
                gpu_layers: l.gpu_layers,
                offload: None,
                context_size: l.context_size,
                compute_wait: Some(edgecloud::local::wait::current().describe()),
                samples: (samples > 1).then_some(samples),
                sample_temperature: (args.samples > 1).then_some(args.sample_temperature),
            }),
        },
        cloud: cfg.cloud.as_ref().map(|c| CloudSetup {
            endpoint: edgecloud::cloud::display_origin(&c.base_url),
            model: c.model.clone(),
        }),
        ..BenchSettings::default()
    };
    let plan = BenchPlan {
        workload,
        policies: policies.iter().map(|p| p.as_str().to_string()).collect(),
        deadlines_ms,
        runs: args.runs,
        warmup: args.warmup,
        concurrency: args.concurrency,
    };
    plan.validate().map_err(|e| exit::usage_from(&e))?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("bench-results").join(utc_now().replace(':', "-")));

    let late = LateWorkerLog::new();
    if !crate::quiet() {
        eprintln!("starting lanes...");
    }
    let mut builder = Harness::builder()
        .config(&cfg)?
        .instances(args.concurrency)
        .lanes_from(&cfg)?;
    if let Some(replay) = replay_local {
        builder = builder.local(replay);
    }
    let harness = builder
        .observer(late.observer())
        .build()
        .context("building the harness")?;
    if let Some(local) = settings.local.as_mut() {
        local.offload = harness
            .lane_info(edgecloud::Lane::Local)
            .and_then(|i| i.device)
            .filter(|_| args.replay_local.is_none());
    }
    // The config's own policy keeps its parameters (a cascade threshold,
    // a hedge delay) when it is among those benchmarked.
    let mut executor = HarnessExecutor::new(
        harness,
        late,
        config_policy,
        Duration::from_millis(args.grace_ms),
    )
    .back_to_back(args.back_to_back);
    let stop = Arc::new(AtomicBool::new(false));
    {
        // First Ctrl-C: stop after aborting the run in flight (the bench
        // keeps what it measured); a second one exits at once.
        let (stop, current) = (stop.clone(), executor.current_run());
        crate::interrupt::on_ctrl_c(move || {
            eprintln!("\nstopping: writing what was measured (Ctrl-C again to quit now)");
            stop.store(true, Ordering::SeqCst);
            current.abort();
        });
    }

    let mut bar = Bar::new(!crate::quiet());
    let model = cfg
        .local
        .as_ref()
        .filter(|_| args.replay_local.is_none())
        .map(|l| l.model.clone());
    let result = run_bench(
        &plan,
        settings,
        edgecloud::build_facts::bench_environment(model.as_deref()),
        &out,
        &mut executor,
        &stop,
        &mut |p| bar.draw(p),
    )?;
    bar.finish();
    let s = &result.summary;
    // The figures are in the report files; -q prints nothing more.
    if !crate::quiet() {
        if s.interrupted {
            eprintln!("stopped: kept {} runs in {}", s.total_runs, out.display());
        } else {
            eprintln!("{} runs in {}", s.total_runs, out.display());
        }
        for g in &s.groups {
            let p = |d: Option<edgecloud_bench::stats::Distribution>| {
                d.map_or("-".to_string(), |d| format!("{:.1}", d.p50))
            };
            eprintln!(
                "  {:<10} {:>6} ms  hit {:>5.1}%  latency p50 {:>8} ms  p95 {:>8} ms  ttft p50 {:>8} ms{}",
                g.policy,
                g.deadline_ms,
                g.deadline_hit_rate * 100.0,
                p(g.latency_ms),
                g.latency_ms.map_or("-".to_string(), |d| format!("{:.1}", d.p95)),
                p(g.ttft_ms),
                match (s.settings.concurrency > 1, g.throughput) {
                    (true, Some(t)) => format!(
                        "  {:.1} tokens/s, {:.2} runs/s at concurrency {}",
                        t.tokens_per_s, t.runs_per_s, s.settings.concurrency
                    ),
                    _ => String::new(),
                }
            );
        }
        eprintln!(
            "report: {}",
            out.join(edgecloud_bench::REPORT_FILE).display()
        );
    }
    Ok(exit::code(if s.interrupted {
        exit::INTERRUPTED
    } else {
        exit::OK
    }))
}

/// A one-line progress bar with an estimate of the time left, redrawn in
/// place on a terminal and printed every ~10% otherwise (logs stay short).
struct Bar {
    enabled: bool,
    tty: bool,
    last_draw: Option<Instant>,
    last_tenth: u64,
}

impl Bar {
    fn new(enabled: bool) -> Self {
        Self {
            enabled,
            tty: std::io::stderr().is_terminal(),
            last_draw: None,
            last_tenth: u64::MAX,
        }
    }

    fn draw(&mut self, p: Progress) {
        if !self.enabled || p.total == 0 {
            return;
        }
        let finished = p.done == p.total;
        let tenth = p.done * 10 / p.total;
        if self.tty {
            // At most ~10 redraws a second.
            if !finished
                && self
                    .last_draw
                    .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
            {
                return;
            }
        } else if tenth == self.last_tenth && !finished {
            return;
        }
        self.last_draw = Some(Instant::now());
        self.last_tenth = tenth;
        const WIDTH: u64 = 30;
        let filled = (p.done * WIDTH / p.total) as usize;
        let eta = p.eta.map_or("--:--".to_string(), fmt_duration);
        let line = format!(
            "[{}{}] {}/{} runs ({} warm-up)  {} elapsed  ETA {}",
            "#".repeat(filled),
            "-".repeat(WIDTH as usize - filled),
            p.done,
            p.total,
            p.warmup_done,
            fmt_duration(p.elapsed),
            eta
        );
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    fn finish(&mut self) {
        if self.enabled && self.tty && self.last_draw.is_some() {
            eprintln!();
        }
    }
}

fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_clock_times() {
        assert_eq!(fmt_duration(Duration::from_secs(75)), "01:15");
        assert_eq!(fmt_duration(Duration::from_secs(3725)), "1:02:05");
    }
}
