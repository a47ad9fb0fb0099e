//! `edgecloud bench prompt-signals`: records every workload item's
//! prompt-only signals (issue 33) with the local lane alone: the prompt
//! pass with its tokens scored (`prompt_logprob`), no answer beyond its
//! first token; or, with `--embeddings`, instead the embedding of the
//! item's last user message (the question, without the template). One
//! line per item, appended as it comes, so a stopped run resumes where it
//! stopped. The file format and its checks live in `edgecloud_bench`.

use crate::exit::usage;
use anyhow::Context as _;
use edgecloud::local::{EmbedInput, LocalConfig, LocalLane};
use edgecloud::LaneJob;
use edgecloud_bench::{
    question_of, sha256_file, PromptItem, PromptSignals, PromptSignalsHeader, Workload,
    WorkloadItem, PROMPT_SIGNALS_KIND,
};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `edgecloud bench prompt-signals`.
#[derive(Debug, clap::Args)]
pub(crate) struct PromptSignalsArgs {
    /// The workload (a JSON Lines file or builtin:NAME), as the bench
    /// runs it is given: `bench calibrate` checks the names match.
    #[arg(long, value_name = "SPEC")]
    workload: String,
    /// GGUF model of the local lane: a file, `ollama:NAME[:TAG]`,
    /// `hf:ORG/REPO[:QUANT]` or a catalogue name.
    #[arg(short, long, value_name = "MODEL")]
    model: PathBuf,
    /// Compute threads (default: physical cores).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Context size in tokens.
    #[arg(long, value_name = "N")]
    context_size: Option<u32>,
    /// The file to write (JSON Lines; resumed when it exists and was made
    /// with the same model and workload).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Record the embedding of each item's last user message (the local
    /// model's own, pooled as its GGUF says, mean when it says nothing)
    /// instead of the prompt's log-probability: a second file, which
    /// `bench calibrate` merges with the first.
    #[arg(long)]
    embeddings: bool,
}

pub(crate) fn prompt_signals_cmd(args: PromptSignalsArgs) -> anyhow::Result<ExitCode> {
    let workload = Workload::load(&args.workload)?;
    let mut config = LocalConfig {
        threads: args.threads,
        context_size: args.context_size,
        ..LocalConfig::new(&args.model)
    };
    crate::modelref::apply(&mut config, crate::modelref::Download::Allowed)?;
    let mut header = PromptSignalsHeader {
        kind: PROMPT_SIGNALS_KIND.into(),
        model: config.model.display().to_string(),
        model_sha256: sha256_file(&config.model)?,
        workload: args.workload.clone(),
        embedding: None,
    };
    let lane = LocalLane::start(config)?;
    if args.embeddings {
        let info = lane.embedding_info();
        header.embedding = Some(format!(
            "the local model's own, {} pooling ({}), of the last user message",
            info.pooling, info.pooling_source
        ));
    }
    let done = match PromptSignals::read(&args.out) {
        Ok(old)
            if old.header.model_sha256 == header.model_sha256
                && old.header.workload == header.workload =>
        {
            old.items
        }
        Ok(_) => {
            return Err(usage(format!(
                "{} holds prompt signals of another model or workload; give another --out",
                args.out.display()
            )))
        }
        Err(_) if args.out.exists() => {
            return Err(usage(format!(
                "{} exists and is not a prompt-signals file",
                args.out.display()
            )))
        }
        Err(_) => Default::default(),
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.out)
        .with_context(|| format!("opening {}", args.out.display()))?;
    if done.is_empty() && file.metadata()?.len() == 0 {
        writeln!(file, "{}", serde_json::to_string(&header)?)?;
    }
    let todo: Vec<_> = workload
        .items
        .iter()
        .filter(|i| !done.contains_key(&i.id))
        .collect();
    eprintln!(
        "prompt signals of {} items ({} already in {})",
        todo.len(),
        done.len(),
        args.out.display()
    );
    for (n, item) in todo.iter().enumerate() {
        let started = Instant::now();
        let (record, what) = if args.embeddings {
            embed_item(&lane, item, started)?
        } else {
            score_item(&lane, item)?
        };
        writeln!(file, "{}", serde_json::to_string(&record)?)?;
        file.flush()?;
        eprintln!(
            "[{}/{}] {}: {} tokens, {what}, {:.0} ms",
            n + 1,
            todo.len(),
            item.id,
            record.prompt_tokens,
            started.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One item's embedding (of its question), and what to print of it.
fn embed_item(
    lane: &LocalLane,
    item: &WorkloadItem,
    started: Instant,
) -> anyhow::Result<(PromptItem, String)> {
    let question = question_of(&item.request.messages).to_string();
    let e = lane
        .embed(vec![EmbedInput::Text(question)])
        .with_context(|| format!("item `{}`", item.id))?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let record = PromptItem {
        item: item.id.clone(),
        prompt_tokens: e.prompt_tokens,
        prompt_logprob: None,
        prompt_ms: ms,
        embedding: e.vectors.into_iter().next(),
        embed_ms: Some(ms),
    };
    Ok((record, "embedded".into()))
}

/// One item's scored prompt pass (its first answer token only), and what
/// to print of it.
fn score_item(lane: &LocalLane, item: &WorkloadItem) -> anyhow::Result<(PromptItem, String)> {
    let mut sampling = item.request.sampling.clone();
    sampling.max_tokens = 1;
    sampling.temperature = 0.0;
    sampling.consensus = None;
    sampling.score_prompt = true;
    let job = LaneJob::new(
        item.request.messages.clone(),
        sampling,
        Instant::now() + Duration::from_secs(3600),
    );
    let c = lane
        .generate(job)
        .with_context(|| format!("item `{}`", item.id))?;
    let record = PromptItem {
        item: item.id.clone(),
        prompt_tokens: c.prompt_tokens,
        prompt_logprob: c.prompt_logprob.map(f64::from),
        prompt_ms: c.timings.prompt_eval.as_secs_f64() * 1e3,
        embedding: None,
        embed_ms: None,
    };
    let what = format!("prompt_logprob {:.4}", c.prompt_logprob.unwrap_or(f32::NAN));
    Ok((record, what))
}
