//! `edgecloud run`: one request through the harness (both lanes, one
//! deadline, a policy), over the library's public API only.

use crate::exit::{self};
use crate::harness_args::{example_help, HarnessArgs};
use crate::output::JsonArgs;
use crate::prompt::PromptArgs;
use anyhow::Context as _;
use edgecloud::harness::{AbortHandle, CancelResult, LaneReport, Outcome, RunStatus};
use edgecloud::{ChatMessage, Lane, Request, Sampling};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// The longest `run` waits at exit for workers still running.
const EXIT_GRACE: Duration = Duration::from_secs(5);

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
    // A late worker may still be inside llama.cpp: the process's exit
    // handlers (llama.cpp's among them) must not run beside it (under
    // qemu 3 exits in 30 died with SIGSEGV so). Its run settled and
    // cancelled it, so it returns within one compute step; the wait is
    // bounded, and an exit never turns into a hang.
    let _ = harness.shutdown_blocking(EXIT_GRACE);
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
