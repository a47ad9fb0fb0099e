//! `edgecloud local`: the local lane's synchronous diagnostic. Loads the
//! model (reported apart, as `load_ms`), then runs one request whose
//! deadline and `total_ms` both count from the request's start.

use crate::exit;
use crate::output::JsonArgs;
use crate::prompt::PromptArgs;
use edgecloud::local::devices::DeviceError;
use edgecloud::local::{
    LocalCompletion, LocalConfig, LocalError, LocalLane, ProbeMode, SpecType, ThreadPolicy,
};
use edgecloud::millis::to_ms_rounded;
use edgecloud::{CancellationToken, ChatMessage, FinishReason, LaneJob, Sampling};
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `edgecloud local`.
#[derive(Debug, clap::Args)]
pub(crate) struct LocalArgs {
    /// GGUF model: a file, `ollama:NAME[:TAG]`, `hf:ORG/REPO[:QUANT]` or
    /// `hf:ORG/REPO/FILE.gguf` (found in Ollama's store or the Hugging Face
    /// cache, else downloaded into it).
    #[arg(short, long, value_name = "MODEL", env = "EDGECLOUD_MODEL")]
    model: PathBuf,
    #[command(flatten)]
    prompt: PromptArgs,
    /// Most tokens to generate.
    #[arg(long, value_name = "N", default_value_t = 128)]
    max_tokens: u32,
    /// Cancel the request this many milliseconds after it starts (after the
    /// model has loaded), even in the middle of the prompt.
    #[arg(long, value_name = "N", env = "EDGECLOUD_DEADLINE_MS")]
    deadline_ms: Option<u64>,
    /// Compute threads (default: physical cores).
    #[arg(long, value_name = "N", env = "EDGECLOUD_THREADS")]
    threads: Option<usize>,
    /// How many of those threads each decode step uses: adaptive (fewer
    /// when other programs hold cores, from the measured step time) or
    /// fixed (always --threads, as llama.cpp does).
    #[arg(long, value_name = "POLICY", env = "EDGECLOUD_THREAD_POLICY",
          default_value_t = ThreadPolicy::Adaptive)]
    thread_policy: ThreadPolicy,
    /// Speculative decoding: off, ngram (drafts by prompt lookup) or draft
    /// (drafts by --model-draft), verified in the same step as the next
    /// token; a greedy answer is unchanged, a sampled one keeps its
    /// distribution.
    #[arg(long, value_name = "TYPE", env = "EDGECLOUD_SPEC_TYPE",
          default_value_t = SpecType::Off)]
    spec_type: SpecType,
    /// The draft model for --spec-type draft: a smaller GGUF file with the
    /// same vocabulary (llama-server's --model-draft / -md).
    #[arg(
        long,
        visible_alias = "md",
        value_name = "FILE",
        env = "EDGECLOUD_MODEL_DRAFT"
    )]
    model_draft: Option<PathBuf>,
    /// Most tokens drafted per step.
    #[arg(long, value_name = "N", env = "EDGECLOUD_DRAFT_MAX",
          default_value_t = LocalConfig::default().draft_max)]
    draft_max: u32,
    /// Fewest drafts worth verifying.
    #[arg(long, value_name = "N", env = "EDGECLOUD_DRAFT_MIN",
          default_value_t = LocalConfig::default().draft_min)]
    draft_min: u32,
    /// true: drafts keep a greedy answer the same to the last bit (a lone
    /// sequence on several threads drafts in its first 256 cells only);
    /// false: drafts on every step, as llama-server does.
    #[arg(long, value_name = "BOOL", env = "EDGECLOUD_SPEC_EXACT",
          default_value_t = LocalConfig::default().spec_exact,
          action = clap::ArgAction::Set)]
    spec_exact: bool,
    /// Sampling seed, for reproducible output.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Sampling temperature (0 = greedy).
    #[arg(long, value_name = "T", default_value_t = 0.8)]
    temperature: f32,
    /// Nucleus sampling threshold.
    #[arg(long, value_name = "P", default_value_t = 0.95)]
    top_p: f32,
    /// Top-k sampling (0 = off).
    #[arg(long, value_name = "K", default_value_t = 40)]
    top_k: u32,
    /// Stop before this string (repeatable).
    #[arg(long, value_name = "TEXT")]
    stop: Vec<String>,
    /// Answer by a consensus of N samples (self-consistency): N parallel
    /// sequences sharing the prompt's KV cells; the answer is the first
    /// sample giving the majority answer, printed whole when all are done,
    /// with the share agreeing. Needs a temperature above 0.
    #[arg(long, value_name = "N", default_value_t = 1)]
    samples: u32,
    /// How the samples' answers are read for the vote: number, choice or
    /// text.
    #[arg(long, value_name = "KIND", default_value = "text")]
    answer: edgecloud::answer::AnswerKind,
    /// Context size in tokens (default: the model's, at most 4096).
    #[arg(long, value_name = "N", env = "EDGECLOUD_CONTEXT_SIZE")]
    context_size: Option<u32>,
    /// Prompt batch size (tokens per llama.cpp call; smaller stops sooner
    /// on cancellation).
    #[arg(long, value_name = "N", env = "EDGECLOUD_BATCH_SIZE",
          default_value_t = LocalConfig::default().batch_size)]
    batch_size: u32,
    /// Layers to offload to a GPU. More than 0 without a GPU is an error
    /// (`edgecloud doctor` shows the devices found).
    #[arg(
        long,
        value_name = "N",
        env = "EDGECLOUD_GPU_LAYERS",
        default_value_t = 0
    )]
    gpu_layers: u32,
    #[command(flatten)]
    output: JsonArgs,
    /// Probe the model in a child process first (a llama.cpp crash is
    /// then an error, not a dead process): child (default) or off.
    #[arg(long, value_name = "MODE", default_value = "child")]
    probe: ProbeMode,
}

pub(crate) fn run(args: LocalArgs) -> anyhow::Result<ExitCode> {
    // Read first: a prompt on stdin should not wait for the model to load.
    let user = args.prompt.user_message()?;
    let mut config = LocalConfig {
        model: args.model.clone(),
        threads: args.threads,
        thread_policy: args.thread_policy,
        spec_type: args.spec_type,
        draft_max: args.draft_max,
        draft_min: args.draft_min,
        spec_exact: args.spec_exact,
        model_draft: args.model_draft.clone(),
        context_size: args.context_size,
        batch_size: args.batch_size,
        gpu_layers: args.gpu_layers,
        probe: args.probe,
        max_samples: args.samples.clamp(1, edgecloud::request::MAX_SAMPLES),
        ..LocalConfig::new(&args.model)
    };
    crate::modelref::apply(&mut config, crate::modelref::Download::Allowed)?;
    let lane = match LocalLane::start(config) {
        Ok(lane) => lane,
        Err(err) => return report_failure(&args, &err, None),
    };
    let messages = ChatMessage::conversation(args.prompt.system.clone(), user);
    let sampling = Sampling {
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        seed: args.seed,
        stop: args.stop.clone(),
        consensus: (args.samples > 1).then(|| edgecloud::Consensus::new(args.samples, args.answer)),
        ..Sampling::default()
    };
    let start = Instant::now();
    let deadline = args
        .deadline_ms
        .map_or(start + Duration::from_secs(365 * 24 * 3600), |ms| {
            start + Duration::from_millis(ms)
        });
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    crate::interrupt::on_ctrl_c(move || on_ctrl_c.cancel());
    let mut job = LaneJob::new(messages, sampling, deadline).with_cancel(cancel);
    if !args.output.json {
        job = job.with_sink(|text| {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        });
    }
    let load_ms = to_ms_rounded(lane.info().load_time);
    match lane.generate(job) {
        Ok(done) => report(&args, &lane, &done, load_ms),
        Err(err) => report_failure(&args, &err, Some(load_ms)),
    }
}

fn status(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::Length => "completed",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Deadline => "deadline_exceeded",
    }
}

fn report(
    args: &LocalArgs,
    lane: &LocalLane,
    done: &LocalCompletion,
    load_ms: f64,
) -> anyhow::Result<ExitCode> {
    let status = status(done.finish_reason);
    let t = &done.timings;
    if args.output.json {
        let info = lane.info();
        args.output.print(&json!({
            "lane": "local",
            "status": status,
            "text": done.text,
            "finish_reason": done.finish_reason.as_str(),
            "prompt_tokens": done.prompt_tokens,
            "reused_prompt_tokens": done.reused_prompt_tokens,
            "completion_tokens": done.completion_tokens,
            "load_ms": load_ms,
            "prompt_eval_ms": to_ms_rounded(t.prompt_eval),
            "ttft_ms": t.ttft.map(to_ms_rounded),
            "total_ms": to_ms_rounded(t.total),
            "prompt_tokens_per_s": t.prompt_tokens_per_s,
            "gen_tokens_per_s": t.gen_tokens_per_s,
            "mean_logprob": done.mean_logprob,
            "min_logprob": done.min_logprob,
            "p10_logprob": done.p10_logprob,
            "first_token_margin": done.first_token_margin,
            "answer_agreement": done.agreement,
            "sampled_tokens": done.sampled_tokens,
            "samples": done.samples,
            "deadline_ms": args.deadline_ms,
            "model": info.model,
            "threads": info.threads,
            "thread_policy": info.thread_policy,
            "decode_threads": t.decode_threads,
            "spec_type": info.spec_type,
            "spec_exact": info.spec_exact,
            "draft_n": t.draft_n,
            "draft_n_accepted": t.draft_n_accepted,
            "context_size": info.context_size,
            "chat_template": info.chat_template,
            "tool_calls": info.tool_calls,
            "gpu_layers": info.gpu_layers,
            "offload": info.offload,
            "memory_bytes": info.memory_bytes,
            "error": Value::Null,
        }))?;
    } else {
        let opt =
            |v: Option<f64>, unit: &str| v.map_or("-".to_owned(), |v| format!("{v:.1}{unit}"));
        // The answer was streamed to stdout; it ends with a newline there,
        // and the breakdown goes to stderr, so stdout holds the answer alone.
        println!();
        eprintln!("---");
        eprintln!(
            "status           {status} ({})",
            done.finish_reason.as_str()
        );
        eprintln!("model load       {load_ms:.1} ms");
        if lane.info().gpu_layers > 0 {
            eprintln!("offload          {}", lane.info().offload.describe());
        }
        eprintln!(
            "prompt           {} tokens ({} reused), {} , {}",
            done.prompt_tokens,
            done.reused_prompt_tokens,
            format_args!("{:.1} ms", to_ms_rounded(t.prompt_eval)),
            opt(t.prompt_tokens_per_s, " tok/s"),
        );
        eprintln!("first token      {}", opt(t.ttft.map(to_ms_rounded), " ms"));
        let drafts = if lane.info().spec_type == SpecType::Off {
            String::new()
        } else {
            format!(
                "; drafts ({}) {} accepted of {}",
                lane.info().spec_type,
                t.draft_n_accepted,
                t.draft_n
            )
        };
        eprintln!(
            "generation       {} tokens, {}{drafts}",
            done.completion_tokens,
            opt(t.gen_tokens_per_s, " tok/s")
        );
        eprintln!("total            {:.1} ms", to_ms_rounded(t.total));

        eprintln!(
            "threads          {} ({}): {}",
            lane.info().threads,
            lane.info().thread_policy,
            t.decode_threads
                .iter()
                .map(|s| format!("{} for {} steps", s.threads, s.steps))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let f3 = |v: Option<f32>| v.map_or("-".into(), |v| format!("{v:.3}"));
        eprintln!(
            "logprob          mean {}, min {}, p10 {}; first-token margin {}",
            f3(done.mean_logprob),
            f3(done.min_logprob),
            f3(done.p10_logprob),
            f3(done.first_token_margin)
        );
        if let Some(share) = done.agreement {
            let answers: Vec<&str> = done
                .samples
                .iter()
                .map(|s| s.answer.as_deref().unwrap_or("-"))
                .collect();
            eprintln!(
                "consensus        {} samples, {} tokens in all; agreement {share:.3} (answers: {})",
                done.samples.len(),
                done.sampled_tokens,
                answers.join(", ")
            );
        }
    }
    if status == "completed" {
        return Ok(exit::code(exit::OK));
    }
    eprintln!("edgecloud: the request did not complete: {status}");
    Ok(exit::code(match done.finish_reason {
        FinishReason::Deadline => exit::DEADLINE,
        FinishReason::Cancelled => exit::INTERRUPTED,
        _ => exit::FAILURE,
    }))
}

fn report_failure(
    args: &LocalArgs,
    err: &LocalError,
    load_ms: Option<f64>,
) -> anyhow::Result<ExitCode> {
    if args.output.json {
        args.output.print(&json!({
            "lane": "local",
            "status": "failed",
            "text": "",
            "finish_reason": Value::Null,
            "prompt_tokens": Value::Null,
            "completion_tokens": Value::Null,
            "load_ms": load_ms,
            "ttft_ms": Value::Null,
            "total_ms": Value::Null,
            "prompt_tokens_per_s": Value::Null,
            "gen_tokens_per_s": Value::Null,
            "mean_logprob": Value::Null,
            "min_logprob": Value::Null,
            "p10_logprob": Value::Null,
            "first_token_margin": Value::Null,
            "error": { "kind": err.kind(), "message": edgecloud::error_chain(err) },
        }))?;
    }
    eprintln!(
        "edgecloud: local lane failed: {}",
        edgecloud::error_chain(err)
    );
    if let LocalError::Devices(DeviceError::NoGpu { gpu_layers, .. }) = err {
        eprintln!(
            "edgecloud: --gpu-layers {gpu_layers} needs a GPU and none was found; \
             `edgecloud doctor` lists what this binary has"
        );
    }
    Ok(exit::code(exit::FAILURE))
}
