//! `edgecloud serve`: the OpenAI-compatible front door over the harness,
//! with the same lane flags and `--config` as `edgecloud run`. It builds the
//! harness, binds, prints one line saying where it listens (scripts read
//! it), and serves until SIGINT or SIGTERM.

use crate::run::HarnessArgs;
use anyhow::{bail, Context as _};
use edgecloud::harness::Harness;
use edgecloud::serve::{BearerToken, ServeConfig, ServeMetrics, Server};
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `edgecloud serve`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = SERVE_HELP)]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0: any free port; the chosen address is
    /// printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    #[command(flatten)]
    lanes: HarnessArgs,
    /// Environment variable holding a bearer token; when given, every
    /// endpoint but /health requires `Authorization: Bearer <token>`.
    #[arg(long, value_name = "VAR")]
    token_env: Option<String>,
    /// `max_tokens` for requests that do not set it.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_tokens: u32,
    /// Largest request body accepted, in bytes.
    #[arg(long, value_name = "N", default_value_t = 1024 * 1024)]
    max_body_bytes: usize,
    /// Most messages in one request.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_messages: usize,
    /// On SIGINT/SIGTERM, how long to wait for in-flight requests and late
    /// workers, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    grace_ms: u64,
}

const SERVE_HELP: &str = "\
Endpoints: POST /v1/chat/completions (whole or streamed), GET /v1/models, \
GET /health, GET /metrics (Prometheus).

Models: `edgecloud` runs the default route; each route of --config is also a \
model name. A request may choose the policy and deadline with the body field \
\"edgecloud\": {\"policy\": \"race\", \"deadline_ms\": 1500} or the headers \
X-Edgecloud-Policy and X-Edgecloud-Deadline-Ms. Responses say which lane \
answered (X-Edgecloud-Lane, and the \"edgecloud\" field).

Example: edgecloud serve --model models/tiny.gguf --policy local-only \
--listen 127.0.0.1:0";

pub(crate) fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let cfg = args.lanes.load_config()?;
    if cfg.local.is_none() && cfg.cloud.is_none() {
        bail!(
            "no lane configured: give --model (local lane), --base-url with \
             --cloud-model (cloud lane), or --config FILE"
        );
    }
    let token = match &args.token_env {
        Some(var) => Some(BearerToken::from_env(var)?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("edgecloud-serve")
        .build()
        .context("could not start the server's runtime")?;
    let metrics = ServeMetrics::new();
    // Loads the model here, before the first request (blocking).
    let harness = Harness::builder()
        .config(&cfg)?
        .lanes_from(&cfg)?
        .observer(metrics.observer())
        .runtime(runtime.handle().clone())
        .build()?;
    let mut config = ServeConfig::default()
        .listen(args.listen)
        .max_body_bytes(args.max_body_bytes)
        .max_messages(args.max_messages)
        .default_max_tokens(args.max_tokens)
        .shutdown_grace(Duration::from_millis(args.grace_ms))
        .metrics(metrics);
    if let Some(token) = token {
        config = config.token(token);
    }
    if let Some(policy) = cfg.harness.resolved_policy("harness")? {
        config = config.policy_preset(policy);
    }
    let report = runtime.block_on(async move {
        let server = Server::bind(harness, config).await?;
        let addr = server.local_addr();
        let models = server.models();
        {
            // One line on stdout, flushed: scripts wait for it.
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "edgecloud serve: listening on http://{addr}/v1 (models: {})",
                models.join(", ")
            );
            let _ = out.flush();
        }
        anyhow::Ok(server.run_until(shutdown_signal()).await)
    })?;
    if report.is_clean() {
        eprintln!(
            "edgecloud serve: stopped cleanly after {:.0} ms",
            report.waited_ms
        );
    } else {
        eprintln!(
            "edgecloud serve: grace period over with {} connection(s), {} run(s) and {} worker(s) still running",
            report.connections_left, report.runs_in_flight, report.workers_still_running
        );
    }
    // Late workers still running hold only this process's resources.
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    eprintln!("edgecloud serve: shutting down (finishing requests in flight)");
}
