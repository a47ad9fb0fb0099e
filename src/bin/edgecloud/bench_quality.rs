//! `edgecloud bench calibrate` (a cascade threshold from a graded bench
//! output, running nothing) and `edgecloud bench replay-cloud` (an
//! OpenAI-compatible loopback server answering with recorded answers: a
//! stand-in for a real provider). The maths and the replay live in
//! `edgecloud_bench`; this module parses flags, writes files and prints.

use crate::exit::usage;
use anyhow::Context as _;
use edgecloud::harness::{Harness, Policy, Route, Signal};
use edgecloud::serve::{ServeConfig, Server};
use edgecloud_bench::{
    calibrate, config_snippet, read_runs, read_summary, render_calibration,
    render_calibration_chart, HeldOutSettings, PromptInputs, PromptSignals, Replay, Target,
    CALIBRATION_CHART, CALIBRATION_CONFIG, CALIBRATION_FILE, CALIBRATION_REPORT,
};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `edgecloud bench calibrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct CalibrateArgs {
    /// A bench output directory with local-only and cloud-only runs over
    /// the same graded items.
    dir: PathBuf,
    /// The signal to choose the threshold on (default: the one with the
    /// highest held-out APGR): mean_logprob, min_logprob, p10_logprob,
    /// first_token_margin, min_window_logprob, tail_logprob.
    #[arg(long, value_name = "NAME")]
    signal: Option<Signal>,
    /// Choose the most accurate threshold sending at most this share of
    /// requests to the cloud (0..1).
    #[arg(long, value_name = "X", conflicts_with = "target_quality")]
    target_cloud_share: Option<f64>,
    /// Choose the threshold with the fewest cloud calls reaching this
    /// accuracy (0..1).
    #[arg(long, value_name = "Y", conflicts_with = "target_cost")]
    target_quality: Option<f64>,
    /// Choose the most accurate threshold whose cloud spend is at most
    /// this many dollars per request (the cloud-only runs' priced cost:
    /// `[prices]`).
    #[arg(long, value_name = "USD", conflicts_with = "target_cloud_share")]
    target_cost: Option<f64>,
    /// The deadline of the baseline runs to use (default: the largest one
    /// both baselines ran at).
    #[arg(long, value_name = "MS")]
    deadline_ms: Option<u64>,
    /// Where to write the report, chart, JSON and config snippet
    /// (default: DIR itself).
    #[arg(long, value_name = "OUT")]
    out: Option<PathBuf>,
    /// Folds of the cross-validation that reports each figure on items
    /// the threshold was not fitted on (at least 2).
    #[arg(long, value_name = "K", default_value_t = 5)]
    folds: usize,
    /// Seed of the shuffle that splits the items into folds (and of the
    /// bootstrap intervals).
    #[arg(long, value_name = "N", default_value_t = 21)]
    seed: u64,
    /// Bootstrap resamples of the 95% intervals.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    resamples: usize,
    /// Another bench output (fresh items, local-only and cloud-only) to
    /// test the threshold fitted on all of DIR's items on; the advice
    /// and config then quote its figures.
    #[arg(long, value_name = "DIR")]
    eval: Option<PathBuf>,
    /// Prompt-only signals of DIR's items (`bench prompt-signals` files:
    /// the log-probability pass and the embedding pass, repeated to give
    /// both): draws their curves and fits the two-stage route. Checked
    /// against the runs: the same workload, every item, one model.
    #[arg(long, value_name = "FILE")]
    prompt_signals: Vec<PathBuf>,
    /// The prompt-only signals of the --eval items (same model as
    /// --prompt-signals).
    #[arg(long, value_name = "FILE", requires = "eval")]
    eval_prompt_signals: Vec<PathBuf>,
    #[command(flatten)]
    output: crate::output::JsonArgs,
}

/// The prompt-signals files merged into one, named by the first.
fn read_prompt_signals(paths: &[PathBuf]) -> anyhow::Result<Option<(PromptSignals, String)>> {
    let Some((first, rest)) = paths.split_first() else {
        return Ok(None);
    };
    let mut merged = PromptSignals::read(first)?;
    for p in rest {
        merged = merged.merge(PromptSignals::read(p)?, &p.display().to_string())?;
    }
    Ok(Some((merged, first.display().to_string())))
}

pub(crate) fn calibrate_cmd(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    let target = match (
        args.target_cloud_share,
        args.target_quality,
        args.target_cost,
    ) {
        (Some(x), _, _) if !(0.0..=1.0).contains(&x) => {
            return Err(usage("--target-cloud-share must be between 0 and 1"))
        }
        (_, Some(y), _) if !(0.0..=1.0).contains(&y) => {
            return Err(usage("--target-quality must be between 0 and 1"))
        }
        (_, _, Some(usd)) if !(usd.is_finite() && usd >= 0.0) => {
            return Err(usage(
                "--target-cost must be a number of dollars, 0 or more",
            ))
        }
        (Some(x), _, _) => Target::CloudShare(x),
        (None, Some(y), _) => Target::Quality(y),
        (None, None, Some(usd)) => Target::Cost(usd),
        (None, None, None) => Target::Cpt80,
    };
    if args.folds < 2 {
        return Err(usage("--folds must be at least 2"));
    }
    let runs = read_runs(&args.dir)?;
    let fresh = match &args.eval {
        Some(d) => Some((read_runs(d)?, d.display().to_string())),
        None => None,
    };
    let prompt = match (
        read_prompt_signals(&args.prompt_signals)?,
        read_prompt_signals(&args.eval_prompt_signals)?,
    ) {
        (None, Some(_)) => {
            return Err(usage(
                "--eval-prompt-signals needs --prompt-signals for the calibration items",
            ))
        }
        (None, None) => None,
        (Some(cal), eval) => Some(PromptInputs {
            cal,
            cal_workload: read_summary(&args.dir).ok().map(|s| s.settings.workload),
            eval,
            eval_workload: args
                .eval
                .as_ref()
                .and_then(|d| read_summary(d).ok())
                .map(|s| s.settings.workload),
        }),
    };
    let settings = HeldOutSettings {
        folds: args.folds,
        seed: args.seed,
        resamples: args.resamples,
    };
    let c = calibrate(
        &runs,
        args.deadline_ms,
        args.signal,
        target,
        &settings,
        fresh.as_ref().map(|(r, s)| (r.as_slice(), s.as_str())),
        prompt.as_ref(),
    )
    .with_context(|| format!("calibrating from {}", args.dir.display()))?;
    let source = args.dir.display().to_string();
    let out = args.out.clone().unwrap_or_else(|| args.dir.clone());
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let write = |name: &str, text: &str| {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(CALIBRATION_FILE, &serde_json::to_string_pretty(&c)?)?;
    let md = render_calibration(&c, &source);
    write(CALIBRATION_REPORT, &md)?;
    write(CALIBRATION_CHART, &render_calibration_chart(&c))?;
    let snippet = config_snippet(&c, &source);
    if let Some(s) = &snippet {
        write(CALIBRATION_CONFIG, s)?;
    }
    if args.output.json {
        args.output.print(&c)?;
    } else {
        print!("{md}");
        if let Some(s) = &snippet {
            println!("\n## Config ({})\n\n```toml\n{s}```", CALIBRATION_CONFIG);
        }
    }
    eprintln!(
        "wrote {CALIBRATION_REPORT}, {CALIBRATION_FILE}, {CALIBRATION_CHART}{} in {}",
        if snippet.is_some() {
            format!(" and {CALIBRATION_CONFIG}")
        } else {
            String::new()
        },
        out.display()
    );
    Ok(if c.choice.is_some() {
        ExitCode::SUCCESS
    } else {
        eprintln!("edgecloud: no threshold meets the target");
        ExitCode::FAILURE
    })
}

/// Arguments of `edgecloud bench replay-cloud`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReplayCloudArgs {
    /// Recorded answers: JSON Lines of {"prompt", "answer"} (see the
    /// docs/bench.md, "Replay cloud").
    #[arg(long, value_name = "FILE")]
    answers: PathBuf,
    /// Address to listen on (loopback; port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8089")]
    listen: SocketAddr,
    /// The model name requests must use (and reports show).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "replay",
        visible_alias = "served-model-name"
    )]
    model_name: String,
    /// Time to the first piece of each answer, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    ttft_ms: u64,
    /// Time between pieces (words) of an answer, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    token_ms: u64,
    /// Requests answered at once (a bench with --concurrency N sends up to
    /// N at a time; a provider takes many).
    #[arg(long, value_name = "N", default_value_t = 16)]
    parallel: usize,
}

pub(crate) fn replay_cloud_cmd(args: ReplayCloudArgs) -> anyhow::Result<ExitCode> {
    if !args.listen.ip().is_loopback() {
        return Err(usage(
            "replay-cloud is a test stand-in and listens on loopback only",
        ));
    }
    let replay = Replay::load(&args.answers)?.timing(
        Duration::from_millis(args.ttft_ms),
        Duration::from_millis(args.token_ms),
    );
    let count = replay.len();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("edgecloud-replay")
        .build()
        .context("could not start the server's runtime")?;
    // The recorded answers sit on the harness's local slot and the front
    // door serves them; a generous deadline, since a request carries none.
    let deadline = Duration::from_secs(600);
    // One instance per request answered at once, all over the same
    // recorded answers.
    let harness = Harness::builder()
        .instances(args.parallel.max(1))
        .local(replay)
        .policy(Policy::LocalOnly)
        .deadline(deadline)
        .route(
            args.model_name.clone(),
            Route::default()
                .policy(Policy::LocalOnly)
                .deadline(deadline),
        )
        .runtime(runtime.handle().clone())
        .build()?;
    let config = ServeConfig::default().listen(args.listen);
    runtime.block_on(async move {
        let server = Server::bind(harness, config).await?;
        let addr = server.local_addr();
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "edgecloud replay-cloud: listening on http://{addr}/v1 (model: {}; {count} recorded answers from {}; \
                 a stand-in for a real provider, replaying recorded answers)",
                args.model_name,
                args.answers.display()
            );
            let _ = out.flush();
        }
        server.run_until(crate::interrupt::shutdown_signal()).await;
        anyhow::Ok(())
    })?;
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(ExitCode::SUCCESS)
}
