//! The `edgecloud` command: a thin CLI over the library's public API.
//! Each subcommand lives in its own module; `main` only parses, sets the
//! log level, dispatches, and turns the result into an exit status (the
//! table in `exit`).

mod bench;
mod bench_prompt;
mod bench_quality;
mod cloud;
mod config_cmd;
mod doctor;
mod exit;
mod fetch;
mod harness_args;
mod interrupt;
mod local;
mod model;
mod modelref;
mod output;
mod prompt;
mod run;
mod serve;
mod serve_facts;

use clap::{ArgAction, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

/// The environment variables, for `--help`.
const ENV_HELP: &str = "\
Environment: EDGECLOUD_LOG sets the log filter (tracing's syntax, e.g. \
`info` or `edgecloud=debug,llama.cpp=info`; -v/-q win over it). Flags that \
make sense in the environment read EDGECLOUD_<FLAG> (shown as [env: ...] in \
each subcommand's --help): EDGECLOUD_MODEL, EDGECLOUD_BASE_URL, \
EDGECLOUD_CLOUD_MODEL, EDGECLOUD_CONFIG, EDGECLOUD_LISTEN, EDGECLOUD_POLICY, \
EDGECLOUD_DEADLINE_MS, EDGECLOUD_THREADS and more. OPENAI_BASE_URL is the \
base URL's last resort; the cloud API key comes from OPENAI_API_KEY (or the \
variable --api-key-env names), never from a flag. Model references (-m \
ollama:NAME[:TAG], -m hf:ORG/REPO[:QUANT]) read OLLAMA_MODELS, HF_HUB_CACHE, \
HF_HOME, LLAMA_CACHE, HF_ENDPOINT, HF_TOKEN (never printed) and HF_HUB_OFFLINE.";

fn after_help() -> String {
    format!("{ENV_HELP}\n\n{}", exit::EXIT_HELP)
}

/// Answer LLM requests with a local llama.cpp lane and an OpenAI-compatible
/// cloud lane under one deadline.
#[derive(Debug, Parser)]
#[command(name = "edgecloud", version, about, long_about = None, after_help = after_help())]
struct Cli {
    /// More log output on stderr: -v info, -vv debug, -vvv trace (with
    /// llama.cpp's own log).
    #[arg(short, long, action = ArgAction::Count, global = true, display_order = 900)]
    verbose: u8,
    /// Less output on stderr: -q errors only (and no progress or startup
    /// lines), -qq nothing.
    #[arg(
        short,
        long,
        action = ArgAction::Count,
        global = true,
        conflicts_with = "verbose",
        display_order = 901
    )]
    quiet: u8,
    #[command(subcommand)]
    command: Command,
}

static QUIET: AtomicBool = AtomicBool::new(false);

/// Whether `-q` was given: commands then print no progress or startup
/// lines on stderr (errors still).
pub(crate) fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
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
    /// Print the effective configuration (config file, environment and
    /// flags merged; secrets redacted).
    #[command(subcommand)]
    Config(config_cmd::ConfigCommand),
    /// Print a shell completion script: `edgecloud completions bash >
    /// ~/.local/share/bash-completion/completions/edgecloud`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// The command line, with the exit-status table after every subcommand's
/// own help too.
fn cli_command() -> clap::Command {
    fn with_table(sc: clap::Command) -> clap::Command {
        let short = match sc.get_after_help() {
            Some(h) => format!("{h}\n\n{}", exit::EXIT_HELP),
            None => exit::EXIT_HELP.to_string(),
        };
        let long = sc
            .get_after_long_help()
            .map(|h| format!("{h}\n\n{}", exit::EXIT_HELP));
        let sc = sc.after_help(short);
        let sc = match long {
            Some(l) => sc.after_long_help(l),
            None => sc,
        };
        sc.mut_subcommands(with_table)
    }
    Cli::command().mut_subcommands(with_table)
}

fn main() -> ExitCode {
    let matches = cli_command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    QUIET.store(cli.quiet > 0, Ordering::Relaxed);
    init_tracing(cli.verbose, cli.quiet);
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
        Command::Config(cmd) => {
            let sub = matches
                .subcommand_matches("config")
                .and_then(|m| m.subcommand())
                .map(|(_, m)| m);
            config_cmd::run(cmd, sub)
        }
        Command::Completions { shell } => {
            let mut cmd = cli_command();
            clap_complete::generate(shell, &mut cmd, "edgecloud", &mut std::io::stdout());
            Ok(exit::code(exit::OK))
        }
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            let status = exit::status_of(&err);
            eprintln!("error: {err:#}");
            if status == exit::USAGE {
                eprintln!("\nFor more information, try '--help'.");
            }
            exit::code(status)
        }
    }
}

/// Logs go to stderr. `-v`/`-q` set the level; without them
/// `EDGECLOUD_LOG` (a tracing filter) does, else warnings only. llama.cpp's
/// own log is off below `-vvv`, because its errors already reach the user
/// inside edgecloud's error messages.
fn init_tracing(verbose: u8, quiet: u8) {
    use tracing_subscriber::EnvFilter;
    let by_flags = match (verbose, quiet) {
        (0, 0) => None,
        (_, q) if q >= 2 => Some("off"),
        (_, 1) => Some("error,llama.cpp=off"),
        (1, _) => Some("info,llama.cpp=off"),
        (2, _) => Some("debug,llama.cpp=off"),
        _ => Some("trace"),
    };
    let filter = match by_flags {
        Some(f) => EnvFilter::new(f),
        None => EnvFilter::try_from_env("EDGECLOUD_LOG")
            .unwrap_or_else(|_| EnvFilter::new("warn,llama.cpp=off")),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
