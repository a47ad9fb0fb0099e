//! [`LocalError`]: why the local lane could not do something, one variant
//! a caller can act on per cause (the model file, llama.cpp's load or
//! context, the request, the decode, the probe), with a stable
//! [`kind`](LocalError::kind) name for JSON and metrics. Plain error data:
//! nothing here touches llama.cpp.

use super::devices;
use std::path::PathBuf;

/// Why the local lane could not do something.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// The model file failed validation before llama.cpp saw it.
    #[error("invalid model file")]
    InvalidModel(#[from] edgecloud_gguf::GgufError),
    /// llama.cpp refused a file that passed validation.
    #[error("llama.cpp could not load {path}: {detail}")]
    ModelLoad {
        /// The model file.
        path: PathBuf,
        /// What llama.cpp said.
        detail: String,
    },
    /// llama.cpp could not create a context (often: not enough memory).
    #[error("llama.cpp could not create a context of {context_size} tokens: {detail}")]
    Context {
        /// Requested context size.
        context_size: u32,
        /// What llama.cpp said.
        detail: String,
    },
    /// The chat template cannot be applied.
    #[error("chat template: {detail}")]
    ChatTemplate {
        /// What is wrong.
        detail: String,
    },
    /// The prompt does not fit in the context.
    #[error("prompt of {prompt_tokens} tokens does not fit a context of {context_size} tokens")]
    PromptTooLong {
        /// Prompt size.
        prompt_tokens: u32,
        /// Context size.
        context_size: u32,
    },
    /// An embeddings input has more tokens than one embedding holds
    /// ([`EmbeddingInfo::max_input_tokens`](super::EmbeddingInfo::max_input_tokens)):
    /// nothing is truncated.
    #[error(
        "embeddings input {index} has {tokens} tokens, more than the {limit} one embedding holds"
    )]
    EmbeddingTooLong {
        /// Which input (from 0).
        index: usize,
        /// Its tokens.
        tokens: u32,
        /// The most one input may have.
        limit: u32,
    },
    /// An embeddings input cannot be used (empty, or a token id outside
    /// the vocabulary).
    #[error("embeddings input {index}: {detail}")]
    EmbeddingInput {
        /// Which input (from 0).
        index: usize,
        /// What is wrong with it.
        detail: String,
    },
    /// This model (with this lane's pooling) cannot give embeddings: the
    /// pooling is `none` or `rank`, or llama.cpp refused an embeddings
    /// context for it.
    #[error("this model cannot give embeddings: {detail}")]
    CannotEmbed {
        /// Why.
        detail: String,
    },
    /// This model is an embedding model (an encoder such as `bert`, with
    /// bidirectional attention and no language-model head): it embeds, it
    /// does not generate text.
    #[error("this model ({architecture}) is an embedding model: it cannot generate text (use it for embeddings)")]
    NotGenerative {
        /// The GGUF's `general.architecture`.
        architecture: String,
    },
    /// The request itself is invalid.
    #[error(transparent)]
    InvalidRequest(#[from] edgecloud_core::request::InvalidRequest),
    /// The request's `response_format` could not become a grammar
    /// (llama.cpp's `json_schema_to_grammar` or grammar parser refused it).
    #[error("response_format: no grammar for this schema: {detail}")]
    Grammar {
        /// What llama.cpp said.
        detail: String,
    },
    /// The answer, decoded under the request's grammar (its
    /// `response_format` or tool call), still does not parse or meet its
    /// schema: it was cut short by `max_tokens` or a stop string.
    #[error(
        "the local answer is not what the request asked for (cut short under its grammar): {0}"
    )]
    InvalidAnswer(#[from] edgecloud_core::structured::InvalidAnswer),
    /// A setting of the lane is out of range (the speculation settings:
    /// `draft_max`, `draft_min`).
    #[error(transparent)]
    Setting(#[from] super::draft::SpecSettingError),
    /// The draft model (`--model-draft`) does not share the model's
    /// vocabulary: its drafts would be other tokens.
    #[error("the draft model {draft} does not share the vocabulary of {model}: {detail}")]
    DraftVocab {
        /// The lane's model.
        model: PathBuf,
        /// The draft model.
        draft: PathBuf,
        /// The first difference found.
        detail: String,
    },
    /// `llama_decode` failed for a reason other than an abort.
    #[error("llama.cpp decode failed: {detail}")]
    Decode {
        /// What llama.cpp returned.
        detail: String,
    },
    /// The devices ggml found cannot run the configuration: GPU layers
    /// without a GPU, or a portable build without its backend libraries.
    #[error(transparent)]
    Devices(#[from] devices::DeviceError),
    /// The job panicked (for example in its token sink). The lane reset its
    /// context and keeps working.
    #[error("local job panicked: {detail}")]
    Panicked {
        /// The panic message.
        detail: String,
    },
    /// The worker thread is gone (the lane was shut down).
    #[error("the local lane's worker has stopped")]
    WorkerGone,
    /// The worker thread could not be started.
    #[error("could not start the local lane's worker thread: {detail}")]
    Spawn {
        /// What the OS said.
        detail: String,
    },
    /// llama.cpp killed the probe process (an assert's abort, a segfault):
    /// loaded in this process, the model would have taken it down.
    #[error("llama.cpp crashed the probe of {} with {signal_name} during {stage}{}", path.display(), log_note(log))]
    ProbeCrashed {
        /// The model file.
        path: PathBuf,
        /// The signal number.
        signal: i32,
        /// Its name (`SIGABRT`, `SIGSEGV`...).
        signal_name: String,
        /// What the child was doing.
        stage: String,
        /// The child's last log lines (llama.cpp's, the `GGML_ASSERT` text).
        log: Vec<String>,
    },
    /// The probe did not finish within its bound and was killed.
    #[error("the probe of {} did not finish within {after_ms} ms (during {stage}){}", path.display(), log_note(log))]
    ProbeTimedOut {
        /// The model file.
        path: PathBuf,
        /// The bound.
        after_ms: u64,
        /// What the child was doing.
        stage: String,
        /// The child's last log lines.
        log: Vec<String>,
    },
    /// The probe process exited without a verdict (not by a signal).
    #[error("the probe of {} exited with {} without a verdict during {stage}{}", path.display(), code.map_or_else(|| "no code".to_string(), |c| format!("code {c}")), log_note(log))]
    ProbeFailed {
        /// The model file.
        path: PathBuf,
        /// Its exit code.
        code: Option<i32>,
        /// What the child was doing.
        stage: String,
        /// The child's last log lines.
        log: Vec<String>,
    },
    /// The probe was asked for but cannot run (no probe program, or it
    /// could not be started).
    #[error("cannot probe the model in a child process: {detail}")]
    ProbeUnavailable {
        /// What is missing.
        detail: String,
    },
}

/// The last few log lines for an error message, or nothing.
fn log_note(log: &[String]) -> String {
    const SHOWN: usize = 6;
    if log.is_empty() {
        return String::new();
    }
    let from = log.len().saturating_sub(SHOWN);
    format!("; last log lines: {}", log[from..].join(" | "))
}

impl LocalError {
    /// A stable snake_case name for the variant, for JSON and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            LocalError::InvalidModel(_) => "invalid_model",
            LocalError::ModelLoad { .. } => "model_load",
            LocalError::Context { .. } => "context",
            LocalError::ChatTemplate { .. } => "chat_template",
            LocalError::PromptTooLong { .. } => "prompt_too_long",
            LocalError::InvalidRequest(_) => "invalid_request",
            LocalError::EmbeddingTooLong { .. } => "context_length_exceeded",
            LocalError::EmbeddingInput { .. } => "invalid_input",
            LocalError::CannotEmbed { .. } => "cannot_embed",
            LocalError::NotGenerative { .. } => "cannot_generate",
            LocalError::Decode { .. } => "decode",
            LocalError::DraftVocab { .. } => "draft_vocab",
            LocalError::Setting(_) => "invalid_setting",
            LocalError::Grammar { .. } => "grammar",
            LocalError::InvalidAnswer(_) => "invalid_answer",
            LocalError::Devices(e) => e.kind(),
            LocalError::Panicked { .. } => "panicked",
            LocalError::WorkerGone => "worker_gone",
            LocalError::Spawn { .. } => "spawn",
            LocalError::ProbeCrashed { .. } => "probe_crashed",
            LocalError::ProbeTimedOut { .. } => "probe_timed_out",
            LocalError::ProbeFailed { .. } => "probe_failed",
            LocalError::ProbeUnavailable { .. } => "probe_unavailable",
        }
    }
}
