//! `edgecloud cloud`: the cloud lane's synchronous diagnostic. Sends one
//! request through the library's public cloud API and reports the answer,
//! the timings and the provider's usage, as text or as one JSON object.
//! Only the library speaks HTTP; this module only formats.

use crate::exit::{self, usage};
use crate::output::JsonArgs;
use crate::prompt::PromptArgs;
use anyhow::Context;
use edgecloud::cloud::{CloudConfig, CloudDiagnostic, CloudError, CloudLane, DEFAULT_API_KEY_ENV};
use edgecloud::millis::to_ms_rounded;
use edgecloud::{CancellationToken, ChatMessage, FinishReason, LaneJob, Sampling};
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `edgecloud cloud`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The API key is read from the environment variable named by --api-key-env \
(default OPENAI_API_KEY; unset or empty sends no key, fine for local servers). \
It is never taken as an argument.")]
pub(crate) struct CloudArgs {
    /// Base URL of the OpenAI-compatible API, up to the version segment
    /// (e.g. http://127.0.0.1:8080/v1); else OPENAI_BASE_URL.
    #[arg(long, value_name = "URL", env = "EDGECLOUD_BASE_URL")]
    base_url: Option<String>,
    /// Model name to request.
    #[arg(
        long,
        value_name = "NAME",
        env = "EDGECLOUD_CLOUD_MODEL",
        required_unless_present = "legacy_model"
    )]
    cloud_model: Option<String>,
    /// The spelling before --cloud-model (kept so scripts keep working;
    /// `--model` is the GGUF file everywhere else).
    #[arg(
        long = "model",
        value_name = "NAME",
        hide = true,
        conflicts_with = "cloud_model"
    )]
    legacy_model: Option<String>,
    #[command(flatten)]
    prompt: PromptArgs,
    /// Name of the environment variable holding the API key.
    #[arg(long, value_name = "VAR", env = "EDGECLOUD_API_KEY_ENV", default_value = DEFAULT_API_KEY_ENV)]
    api_key_env: String,
    /// PEM file of CA certificates to trust besides the web roots (a
    /// private CA or a self-signed server).
    #[arg(long, value_name = "FILE", env = "EDGECLOUD_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// Most tokens to generate.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_tokens: u32,
    /// Deadline for the whole request, in milliseconds.
    #[arg(
        long,
        value_name = "N",
        env = "EDGECLOUD_DEADLINE_MS",
        default_value_t = 60_000
    )]
    deadline_ms: u64,
    /// Ask for one JSON answer instead of a stream of server-sent events.
    #[arg(long)]
    no_stream: bool,
    #[command(flatten)]
    output: JsonArgs,
}

pub(crate) fn run(args: CloudArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(diagnose(args))
}

async fn diagnose(args: CloudArgs) -> anyhow::Result<ExitCode> {
    // The deadline is fixed before anything else happens.
    let started = Instant::now();
    let deadline = started + Duration::from_millis(args.deadline_ms);

    let Some(base_url) = args
        .base_url
        .clone()
        .or_else(crate::harness_args::openai_base_url)
    else {
        return Err(usage(
            "the cloud lane needs a base URL: --base-url, EDGECLOUD_BASE_URL or OPENAI_BASE_URL",
        ));
    };
    let model = match (&args.cloud_model, &args.legacy_model) {
        (Some(m), _) => m.clone(),
        (None, Some(m)) => {
            eprintln!("edgecloud: `edgecloud cloud --model` is now --cloud-model (--model is the GGUF file everywhere)");
            m.clone()
        }
        (None, None) => unreachable!("clap requires --cloud-model"),
    };
    let user = args.prompt.user_message()?;
    let mut config = CloudConfig::new(&base_url, &model);
    config.api_key_env = args.api_key_env.clone();
    config.stream = !args.no_stream;
    config.ca_file = args.ca_file.clone();
    let lane = match CloudLane::new(config) {
        Ok(lane) => lane,
        Err(err) => {
            let diag = CloudDiagnostic {
                result: Err(err),
                http_status: None,
                timings: Default::default(),
            };
            return report(&args, &diag, started.elapsed());
        }
    };

    let messages = ChatMessage::conversation(args.prompt.system.clone(), user);
    let sampling = Sampling {
        max_tokens: args.max_tokens,
        ..Sampling::default()
    };

    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });

    let mut job = LaneJob::new(messages, sampling, deadline).with_cancel(cancel);
    if !args.output.json {
        job = job.with_sink(|piece| {
            let mut out = std::io::stdout().lock();
            // A closed stdout (`| head`) must not stop the request.
            let _ = out.write_all(piece.as_bytes());
            let _ = out.flush();
        });
    }
    let diag = lane.run_diagnostic(job).await;
    report(&args, &diag, diag.timings.total)
}

/// How the request ended, as the JSON `status` field says it.
fn status_of(diag: &CloudDiagnostic) -> &'static str {
    match &diag.result {
        Ok(c) => match c.finish_reason {
            FinishReason::Deadline => "deadline_exceeded",
            FinishReason::Cancelled => "cancelled",
            _ => "completed",
        },
        Err(e) if e.is_deadline() => "deadline_exceeded",
        Err(e) if e.is_cancelled() => "cancelled",
        Err(_) => "failed",
    }
}

/// Where a deadline or cancellation stopped the request.
fn stopped_at(diag: &CloudDiagnostic) -> Option<&'static str> {
    match &diag.result {
        Ok(c) if !c.finish_reason.is_complete() => Some("mid_stream"),
        Ok(_) => None,
        Err(CloudError::DeadlineBeforeHeaders) => Some("before_headers"),
        Err(CloudError::DeadlineBeforeFirstToken { .. }) => Some("before_first_token"),
        Err(CloudError::Cancelled) if diag.http_status.is_some() => Some("before_first_token"),
        Err(CloudError::Cancelled) => Some("before_headers"),
        Err(_) => None,
    }
}

#[derive(Serialize)]
struct Report<'a> {
    lane: &'static str,
    status: &'static str,
    text: &'a str,
    finish_reason: Option<&'static str>,
    provider_finish_reason: Option<&'a str>,
    model: Option<&'a str>,
    streamed: Option<bool>,
    /// Token counts below are the provider's; null when it sent none.
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    total_tokens: Option<u64>,
    connect_ms: Option<f64>,
    ttfb_ms: Option<f64>,
    ttft_ms: Option<f64>,
    total_ms: f64,
    http_status: Option<u16>,
    gen_tokens_per_s: Option<f64>,
    stopped_at: Option<&'static str>,
    error: Option<ErrorReport>,
}

#[derive(Serialize)]
struct ErrorReport {
    kind: &'static str,
    message: String,
}

fn report(args: &CloudArgs, diag: &CloudDiagnostic, total: Duration) -> anyhow::Result<ExitCode> {
    let status = status_of(diag);
    let completion = diag.result.as_ref().ok();
    let error = diag.result.as_ref().err();
    let usage = completion.and_then(|c| c.usage);
    let t = &diag.timings;
    let text = match (&diag.result, error) {
        (Ok(c), _) => c.text.as_str(),
        (_, Some(e)) => e.partial_text().unwrap_or(""),
        _ => "",
    };
    let r = Report {
        lane: "cloud",
        status,
        text,
        finish_reason: completion.map(|c| c.finish_reason.as_str()),
        provider_finish_reason: completion.and_then(|c| c.provider_finish_reason.as_deref()),
        model: completion.and_then(|c| c.model.as_deref()),
        streamed: completion.map(|c| c.streamed),
        prompt_tokens: usage.map(|u| u.prompt_tokens),
        completion_tokens: usage.map(|u| u.completion_tokens),
        total_tokens: usage.map(|u| u.total_tokens),
        connect_ms: t.connect.map(to_ms_rounded),
        ttfb_ms: t.ttfb.map(to_ms_rounded),
        ttft_ms: t.ttft.map(to_ms_rounded),
        total_ms: to_ms_rounded(total),
        http_status: diag.http_status,
        gen_tokens_per_s: completion
            .and_then(|c| c.gen_tokens_per_s())
            .map(|r| (r * 10.0).round() / 10.0),
        stopped_at: stopped_at(diag),
        error: match (status, error) {
            ("failed", Some(e)) => Some(ErrorReport {
                kind: e.kind().as_str(),
                message: edgecloud::error_chain(e),
            }),
            _ => None,
        },
    };
    if args.output.json {
        args.output.print(&r)?;
    } else {
        print_breakdown(&r);
    }
    Ok(exit::code(match status {
        "completed" => exit::OK,
        "deadline_exceeded" => exit::DEADLINE,
        "cancelled" => exit::INTERRUPTED,
        _ => exit::FAILURE,
    }))
}

/// The text was already streamed to stdout; the breakdown goes to stderr so
/// stdout holds the answer alone.
fn print_breakdown(r: &Report<'_>) {
    if !r.text.is_empty() {
        println!();
    }
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3} ms"));
    let mut err = std::io::stderr().lock();
    let mut head = format!("cloud lane: {}", r.status);
    if let Some(f) = r.finish_reason {
        head.push_str(&format!(" (finish: {f})"));
    }
    if let Some(s) = r.http_status {
        head.push_str(&format!(", HTTP {s}"));
    }
    if let Some(m) = r.model {
        head.push_str(&format!(", model {m}"));
    }
    if let Some(at) = r.stopped_at {
        head.push_str(&format!(", stopped {}", at.replace('_', " ")));
    }
    let _ = writeln!(err, "{head}");
    let _ = writeln!(
        err,
        "  connect {} | ttfb {} | ttft {} | total {:.3} ms",
        opt(r.connect_ms),
        opt(r.ttfb_ms),
        opt(r.ttft_ms),
        r.total_ms
    );
    match (r.prompt_tokens, r.completion_tokens) {
        (Some(p), Some(c)) => {
            let rate = r
                .gen_tokens_per_s
                .map_or_else(String::new, |g| format!(" | generation {g:.1} tok/s"));
            let _ = writeln!(err, "  provider usage: prompt {p}, completion {c}{rate}");
        }
        _ if r.status == "completed" => {
            let _ = writeln!(err, "  provider usage: none reported");
        }
        _ => {}
    }
    if let Some(e) = &r.error {
        let _ = writeln!(err, "  error ({}): {}", e.kind, e.message);
    }
}
