//! The `edgecloud` command: a thin CLI over the library's public API.
//! Each subcommand lives in its own module; `main` only parses and dispatches.

mod bench;
mod bench_quality;
mod cloud;
mod doctor;
mod fetch;
mod local;
mod model;
mod run;
mod serve;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Answer LLM requests with a local llama.cpp lane and an OpenAI-compatible
/// cloud lane under one deadline.
#[derive(Debug, Parser)]
#[command(name = "edgecloud", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one request on the local lane alone (synchronous diagnostic).
    Local(local::LocalArgs),
    /// Run one request on the cloud lane alone (synchronous diagnostic).
    Cloud(cloud::CloudArgs),
    /// Run one request through the harness: both lanes under one deadline.
    Run(run::RunArgs),
    /// Serve an OpenAI-compatible HTTP API answered by the harness.
    Serve(serve::ServeArgs),
    /// Inspect, validate, generate or fetch GGUF model files.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Benchmark policies and deadlines over a workload; compare reports.
    Bench(bench::BenchArgs),
    /// The child side of the local lane's model probe (internal: the lane
    /// runs it; see edgecloud::local::probe).
    #[command(name = "__probe", hide = true)]
    Probe {
        /// The probe's spec, as JSON.
        spec: String,
    },
    /// Show the ggml backends and devices this binary runs on (CPU variant,
    /// GPUs and their memory) and whether GPU offload is possible.
    Doctor(doctor::DoctorArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let result = match cli.command {
        Command::Local(args) => local::run(args),
        Command::Cloud(args) => cloud::run(args),
        Command::Model(cmd) => model::run(cmd),
        Command::Run(args) => run::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Probe { spec } => {
            return ExitCode::from(edgecloud::local::probe::run_child(&spec).clamp(0, 255) as u8)
        }
        Command::Doctor(args) => doctor::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr, filtered by `EDGECLOUD_LOG` (default: warnings;
/// llama.cpp's own log is off by default because its errors already reach
/// the user inside edgecloud's error messages).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EDGECLOUD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,llama.cpp=off"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
