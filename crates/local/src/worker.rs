//! The worker thread: owns the model's llama.cpp context for its whole life,
//! reports its start-up result, then feeds jobs from its channel to the
//! decode loop (`batch`): one job at a time per sequence, every sequence in
//! one batch. A job that panics is caught and fails alone; a panic outside
//! any job resets the context, and the worker goes on. Embeddings requests
//! come down the same channel and take turns with the generation steps
//! (`embedder`).
//!
//! The worker thread itself only waits while the lane is idle. Each busy
//! period (from the work that wakes it until nothing is in flight and
//! nothing waits) decodes on a thread of its own, which ends once the lane
//! has been idle for [`LINGER`] while other local lanes live in the process
//! (the only lane keeps it). llama.cpp's OpenMP compute threads belong to
//! the thread that decodes, and libgomp counts those of every such thread
//! in the process, idle ones too: once the count passes the CPUs, every
//! barrier in every graph (hundreds a token) spins 100 rounds instead of
//! 300,000 before it sleeps, in every lane. Measured (`edgecloud serve`
//! with SmolLM2 and Qwen2.5-Coder-0.5B, 2 threads, 2 CPUs): SmolLM2
//! generated 131-137 tokens/s until the other model had answered once, and
//! 95-103 from then on, the other model idle; with the busy period's
//! thread, 146-151 after the other model answered. Two models used by turns
//! within [`LINGER`] still share the short spins, as before.

use super::backend_init::{backend, LOAD_LOCK};
use super::batch::{Engine, SeqIds, Speculation};
use super::draft::SpecType;
use super::draftmodel::DraftModel;
use super::embedder::Embedder;
use super::embedding::EmbeddingInfo;
use super::ffi::{self, AbortSignal};
use super::generate::PromptFormat;
use super::governor::{Governor, ThreadPolicy};
use super::{LocalConfig, LocalError, LocalInfo, Work};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use std::num::NonZeroU32;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

/// What `spawn` hands back once the worker is ready.
pub(super) struct Started {
    pub(super) jobs: mpsc::Sender<Work>,
    pub(super) exited: mpsc::Receiver<()>,
    pub(super) info: LocalInfo,
    pub(super) model: Arc<LlamaModel>,
    /// How the worker renders prompts, shared so that a prompt's tokens
    /// can be counted on any thread (`LocalLane::count_prompt`).
    pub(super) format: Arc<PromptFormat>,
    pub(super) embedding: EmbeddingInfo,
}

pub(super) fn spawn(
    config: LocalConfig,
    sequences: usize,
    validate: bool,
) -> Result<Started, LocalError> {
    let (startup_tx, startup_rx) = mpsc::sync_channel(1);
    let (jobs_tx, jobs_rx) = mpsc::channel::<Work>();
    let (exited_tx, exited_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("edgecloud-local".into())
        .spawn(move || {
            // Before llama.cpp exists: its compute threads, started from
            // this thread, inherit the priority.
            edgecloud_core::sched::lower_current_thread(config.nice.unwrap_or(0));
            run_worker(config, sequences, validate, startup_tx, jobs_rx);
            let _ = exited_tx.send(());
        })
        .map_err(|e| LocalError::Spawn {
            detail: e.to_string(),
        })?;
    let (info, model, format, embedding) = startup_rx.recv().unwrap_or_else(|_| {
        Err(LocalError::Panicked {
            detail: "the worker died while starting".into(),
        })
    })?;
    Ok(Started {
        jobs: jobs_tx,
        exited: exited_rx,
        info,
        model,
        format,
        embedding,
    })
}

type Startup = Result<(LocalInfo, Arc<LlamaModel>, Arc<PromptFormat>, EmbeddingInfo), LocalError>;

fn run_worker(
    config: LocalConfig,
    sequences: usize,
    validate: bool,
    startup: mpsc::SyncSender<Startup>,
    jobs: mpsc::Receiver<Work>,
) {
    let started_at = Instant::now();
    let _alive = Alive::new();
    // Declared before the context so it is dropped after it: the context's
    // abort callback points at it.
    let signal = Arc::new(AbortSignal::default());
    let loaded = catch_unwind(AssertUnwindSafe(|| {
        load(&config, sequences, validate, &signal)
    }))
    .unwrap_or_else(|p| {
        Err(LocalError::Panicked {
            detail: edgecloud_core::panic_payload::message(&*p),
        })
    });
    let (model, params, format, threads, context_size, exact_rows, mut placed) = match loaded {
        Ok(loaded) => loaded,
        Err(err) => {
            let _ = startup.send(Err(err));
            return;
        }
    };
    let ctx = {
        let _guard = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        super::placement::clear();
        let ctx = model.new_context(backend(), params);
        // The KV cache's buffers, from the context's log.
        placed.buffers.extend(super::placement::take().buffers);
        ctx
    };
    let ctx = match ctx {
        Ok(ctx) => ctx,
        Err(err) => {
            let _ = startup.send(Err(LocalError::Context {
                context_size,
                detail: err.to_string(),
            }));
            return;
        }
    };
    let format = Arc::new(format);
    let chat_template = format.describe();
    let tool_calls = super::toolcall::ToolTemplate::detect(format.jinja_text())
        .describe()
        .to_string();
    let spec = speculation(&config, &model);
    // The draft model (spec_type draft): loaded and checked against the
    // model's vocabulary before the lane reports ready; its context lives
    // on this thread beside the lane's.
    let draft_model = match spec.and(config.model_draft.as_ref()) {
        Some(path) if config.spec_type == SpecType::Draft => {
            match load_draft(&config, path, &model, threads, context_size) {
                Ok(m) => Some(m),
                Err(err) => {
                    let _ = startup.send(Err(err));
                    return;
                }
            }
        }
        _ => None,
    };
    let draft_ctx = match draft_model
        .as_ref()
        .map(|m| draft_context(&config, m, threads, context_size))
    {
        None => None,
        Some(Ok(ctx)) => Some(ctx),
        Some(Err(err)) => {
            let _ = startup.send(Err(err));
            return;
        }
    };
    // What a draft is taken to cost before one is measured (`RowCost`).
    let draft_size_share = draft_model
        .as_ref()
        .map_or(0.0, |d| d.size() as f64 / model.size().max(1) as f64);
    let offload = offload_of(&placed, &model);
    // llama.cpp's own device buffers (weights and KV cache) are a floor
    // for the estimate: they hold alignment padding the estimate has not
    // (the tiny model fully offloaded: 954,204 device bytes against an
    // estimate of 951,552).
    let on_device_bytes = offload
        .device_weight_bytes
        .saturating_add(offload.device_kv_bytes);
    let mut engine = Engine::new(
        &model,
        ctx,
        Arc::clone(&format),
        config.batch_size,
        SeqIds {
            lanes: sequences,
            max_samples: samples_of(&config),
            context: context_size as usize,
        },
        threads,
        Governor::new(threads, config.thread_policy).asking_free_cores(),
    )
    .with_grammar_pass(config.grammar_pass)
    .with_device_steps(offload.layers > 0)
    .with_speculation(spec)
    .with_draft_model(
        draft_ctx.map(|ctx| DraftModel::new(ctx, config.batch_size.max(1) as usize)),
        draft_size_share,
    )
    .with_exact_rows(exact_rows)
    .with_prompt_cache(
        usize::try_from(config.cache_ram.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
    );
    let thread_policy = if engine.controls_threads() {
        config.thread_policy
    } else {
        if config.thread_policy != ThreadPolicy::Fixed {
            tracing::warn!(
                "this llama-cpp-2 release does not show its context pointer as expected: \
                 the local lane keeps {threads} compute threads (thread policy fixed)"
            );
        }
        ThreadPolicy::Fixed
    };
    let info = LocalInfo {
        model: config.model.clone(),
        load_time: started_at.elapsed(),
        context_size,
        threads,
        thread_policy,
        sequences,
        max_samples: samples_of(&config) as u32,
        compute_wait: super::wait::current().describe(),
        spec_type: if spec.is_some() {
            config.spec_type
        } else {
            SpecType::Off
        },
        draft_max: config.draft_max,
        draft_min: config.draft_min,
        spec_exact: config.spec_exact,
        cache_ram: config.cache_ram,
        batch_size: config.batch_size,
        gpu_layers: config.gpu_layers,
        offload,
        parameters: model.n_params(),
        memory_bytes: memory_bytes(&model, context_size, sequences * samples_of(&config))
            .max(on_device_bytes)
            + draft_model
                .as_ref()
                .map_or(0, |m| memory_bytes(m, context_size, 1)),
        chat_template,
        tool_calls,
        probe: super::probe::ProbeReport::not_run(),
        file: None,
    };
    tracing::info!(model = %config.model.display(), load_ms = info.load_time.as_millis() as u64, threads, context_size, "local lane ready");
    let embedding = EmbeddingInfo::resolve(&model, config.pooling, config.embed_batch);
    let mut embedder = Embedder::new(&model, embedding.clone(), threads, config.thread_policy)
        .with_flash_attention(super::attention::policy(&model, config.gpu_layers));
    if startup
        .send(Ok((info, Arc::clone(&model), format, embedding)))
        .is_err()
    {
        return;
    }
    // Idle: wait for work (or the end of the channel), then hand the lane
    // to a busy period's thread until it is idle again.
    while let Ok(work) = jobs.recv() {
        take(work, &mut engine, &mut embedder);
        busy_period(&mut Busy {
            engine: &mut engine,
            embedder: &mut embedder,
            jobs: &jobs,
            signal: &signal,
            batch_size: config.batch_size,
        });
    }
}

/// How long a busy period's thread waits for more work once the lane is
/// idle before it ends, when other lanes live in the process (see the
/// module docs).
const LINGER: std::time::Duration = std::time::Duration::from_millis(200);

/// Local lane workers alive in the process.
static LIVE_WORKERS: AtomicUsize = AtomicUsize::new(0);

/// Counts a worker alive while it is held.
struct Alive;

impl Alive {
    fn new() -> Self {
        LIVE_WORKERS.fetch_add(1, Ordering::Relaxed);
        Alive
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        LIVE_WORKERS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The lane's state while it has work, lent by the idle worker.
struct Busy<'w, 'm> {
    engine: &'w mut Engine<'m>,
    embedder: &'w mut Embedder<'m>,
    jobs: &'w mpsc::Receiver<Work>,
    signal: &'w AbortSignal,
    batch_size: u32,
}

/// Runs the lane until it is idle on a thread of its own that then ends
/// (see the module docs), or on this one if no thread can start. The
/// thread inherits the worker's nice value.
fn busy_period(busy: &mut Busy<'_, '_>) {
    match ffi::lend_to_thread("edgecloud-local", busy, Busy::run_until_idle) {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(err) => {
            tracing::warn!(
                "no thread for the local lane's busy period ({err}): it decodes on its worker"
            );
            busy.run_until_idle();
        }
    }
}

impl Busy<'_, '_> {
    /// Waits for work while the lane is idle: as long as it is the only
    /// local lane in the process (nobody else's compute threads to
    /// crowd), else for [`LINGER`]. `None`: time to end the busy period.
    fn linger(&self) -> Option<Work> {
        loop {
            match self.jobs.recv_timeout(LINGER) {
                Ok(work) => return Some(work),
                Err(mpsc::RecvTimeoutError::Timeout)
                    if LIVE_WORKERS.load(Ordering::Relaxed) == 1 => {}
                Err(_) => return None,
            }
        }
    }

    /// Takes whatever has arrived and decodes one step (generation, then a
    /// turn of embeddings), until nothing is in flight and nothing waits.
    fn run_until_idle(&mut self) {
        // This is the decode thread: llama.cpp's thread 0 during every
        // step of this busy period.
        self.signal.bind_decode_thread();
        loop {
            while let Ok(work) = self.jobs.try_recv() {
                take(work, self.engine, self.embedder);
            }
            let generating = !self.engine.is_idle();
            if !generating && self.embedder.is_idle() {
                // Idle: linger for the next piece of work, which then finds
                // the compute threads started.
                match self.linger() {
                    Some(work) => take(work, self.engine, self.embedder),
                    None => return,
                }
                continue;
            }
            if generating {
                let stepped = catch_unwind(AssertUnwindSafe(|| self.engine.step(self.signal)));
                if let Err(p) = stepped {
                    self.signal.disarm();
                    self.engine
                        .reset_all(&edgecloud_core::panic_payload::message(&*p));
                }
            }
            if !self.embedder.is_idle() {
                // A turn of embeddings between generation steps, kept to a
                // prompt step's size while answers are generating.
                let budget = if generating {
                    self.batch_size.max(1) as usize
                } else {
                    usize::MAX
                };
                let turned =
                    catch_unwind(AssertUnwindSafe(|| self.embedder.step(budget, self.signal)));
                if let Err(p) = turned {
                    self.embedder
                        .reset(&edgecloud_core::panic_payload::message(&*p));
                }
            }
        }
    }
}

/// Hands one piece of work to the part of the worker that does it.
fn take(work: Work, engine: &mut Engine<'_>, embedder: &mut Embedder<'_>) {
    match work {
        Work::Generate(envelope) => engine.submit(envelope),
        Work::Embed(job) => embedder.submit(job),
    }
}

/// The speculation in effect: the configured one, unless the model's
/// memory cannot drop a sequence's last cells (recurrent and hybrid
/// models), which verifying drafts needs.
fn speculation(config: &LocalConfig, model: &LlamaModel) -> Option<Speculation> {
    let spec = Speculation::of(config.spec_type, config.draft_max, config.draft_min)?
        .with_row_cost(config.draft_row_cost)
        .exact(config.spec_exact);
    if model.is_recurrent() || model.is_hybrid() {
        tracing::warn!(
            "speculative decoding is off: this model's memory (recurrent or hybrid) \
             cannot drop rejected drafts"
        );
        return None;
    }
    Some(spec)
}

/// Tokens one step may draft (one lane drafts per step: see `batch`); the
/// context's batch must hold them besides the prompt chunk and the
/// samples' tokens.
fn draft_rows(config: &LocalConfig) -> u32 {
    match config.spec_type {
        SpecType::Off => 0,
        SpecType::Ngram | SpecType::Draft => config.draft_max,
    }
}

/// Loads the draft model (on the CPU unless the lane offloads layers:
/// then as many as it has) and checks its vocabulary against the model's.
fn load_draft(
    config: &LocalConfig,
    path: &std::path::Path,
    model: &LlamaModel,
    _threads: usize,
    _context_size: u32,
) -> Result<LlamaModel, LocalError> {
    let draft = {
        let _guard = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        ffi::clear_recent_log();
        let params = LlamaModelParams::default().with_n_gpu_layers(config.gpu_layers);
        LlamaModel::load_from_file(backend(), path, &params).map_err(|err| {
            let said = ffi::take_recent_log();
            LocalError::ModelLoad {
                path: path.to_path_buf(),
                detail: if said.is_empty() {
                    err.to_string()
                } else {
                    said.join("; ")
                },
            }
        })?
    };
    super::draftmodel::check_vocab(model, &config.model, &draft, path)?;
    Ok(draft)
}

/// The draft model's context: one sequence of the lane's context size,
/// prompt chunks of `batch_size`, the lane's threads.
fn draft_context<'m>(
    config: &LocalConfig,
    draft: &'m LlamaModel,
    threads: usize,
    context_size: u32,
) -> Result<llama_cpp_2::context::LlamaContext<'m>, LocalError> {
    let threads_i32 = i32::try_from(threads).unwrap_or(i32::MAX);
    let batch = config.batch_size.max(1);
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(context_size))
        .with_n_batch(batch)
        .with_n_ubatch(batch)
        .with_n_threads(threads_i32)
        .with_n_threads_batch(threads_i32)
        .with_flash_attention_policy(super::attention::policy(draft, config.gpu_layers));
    let _guard = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    draft
        .new_context(backend(), params)
        .map_err(|err| LocalError::Context {
            context_size,
            detail: format!("the draft model's context: {err}"),
        })
}

/// What a model and its context hold, about: the weights llama.cpp
/// loaded, and a KV cache of `streams` streams of `context_size` cells
/// (llama.cpp rounds a stream up to 256 cells), K and V in f16 per layer
/// (none for an encoder: llama.cpp makes it no cache).
fn memory_bytes(model: &LlamaModel, context_size: u32, streams: usize) -> u64 {
    let weights = model.size();
    if super::embedding::embedding_only(model).is_some() {
        return weights;
    }
    let streams = u32::try_from(streams).unwrap_or(u32::MAX);
    let per_layer = super::device_fit::kv_bytes_per_layer(cell_bytes(model), context_size, streams);
    weights + u64::from(model.n_layer()) * per_layer
}

/// One cell of one layer's KV cache: a K and a V of f16 per KV head.
fn cell_bytes(model: &LlamaModel) -> u64 {
    let head_dim = u64::try_from(model.n_embd()).unwrap_or(0) / u64::from(model.n_head().max(1));
    2 * u64::from(model.n_head_kv()) * head_dim * 2
}

/// Refuses a context whose KV cache, for the layers the load put on GPU
/// devices, does not fit what those devices have free (`device_fit`).
fn check_device_room(
    model: &LlamaModel,
    placed: &super::placement::Record,
    context_size: u32,
    streams: u32,
) -> Result<(), super::devices::DeviceError> {
    let Some((offloaded, _)) = placed.offloaded else {
        return Ok(());
    };
    if super::embedding::embedding_only(model).is_some() {
        return Ok(());
    }
    let inventory = super::devices::inventory();
    let holding: Vec<_> = inventory
        .gpus()
        .filter(|d| {
            placed
                .buffers
                .iter()
                .any(|(name, weights, _)| *weights && *name == d.name)
        })
        .collect();
    if holding.is_empty() {
        return Ok(());
    }
    let demand = super::device_fit::Demand {
        cell_bytes: cell_bytes(model),
        // llama.cpp counts the output layer among those it offloads.
        layers: offloaded.min(model.n_layer()),
        context_size,
        streams,
    };
    let room = super::device_fit::Room {
        devices: holding
            .iter()
            .map(|d| format!("{} ({})", d.name, d.description))
            .collect::<Vec<_>>()
            .join(", "),
        free: holding.iter().map(|d| d.memory_free).sum(),
    };
    super::device_fit::check(&demand, &room)
}

/// Sequence ids per lane: [`LocalConfig::max_samples`] within its bounds.
fn samples_of(config: &LocalConfig) -> usize {
    config
        .max_samples
        .clamp(1, edgecloud_core::request::MAX_SAMPLES) as usize
}

type Loaded = (
    Arc<LlamaModel>,
    LlamaContextParams,
    PromptFormat,
    usize,
    u32,
    // The rows an exact verify step may have (`ffi::take_exact_rows`).
    Option<usize>,
    // Where the model load put the weights (`placement`).
    super::placement::Record,
);

/// Where the lane's layers went: llama.cpp's log of its load and context
/// (`placed`), the GPU devices ggml has.
fn offload_of(placed: &super::placement::Record, model: &LlamaModel) -> super::Offload {
    let gpus: Vec<(String, String)> = super::devices::inventory()
        .gpus()
        .map(|d| (d.name.clone(), d.description.clone()))
        .collect();
    super::Offload::from_record(placed, &gpus, model.n_layer())
}

fn load(
    config: &LocalConfig,
    sequences: usize,
    validate: bool,
    signal: &Arc<AbortSignal>,
) -> Result<Loaded, LocalError> {
    // Validate first: some malformed files make llama.cpp abort the process.
    if validate {
        edgecloud_gguf::validate(&config.model)?;
    }
    // Before ggml runs any code: a cross build's kernels (and ggml's own
    // start-up code, compiled for the same level) would stop the process
    // with an illegal instruction on a CPU below its level.
    super::devices::check_cpu_level()?;
    let backend = backend();
    super::devices::check_gpu_layers(config.gpu_layers)?;
    let (model, exact_rows, placed) = {
        let _guard = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        ffi::clear_recent_log();
        super::placement::clear();
        let params = LlamaModelParams::default().with_n_gpu_layers(config.gpu_layers);
        let model = LlamaModel::load_from_file(backend, &config.model, &params).map_err(|err| {
            let said = ffi::take_recent_log();
            LocalError::ModelLoad {
                path: config.model.clone(),
                detail: if said.is_empty() {
                    err.to_string()
                } else {
                    said.join("; ")
                },
            }
        })?;
        (model, ffi::take_exact_rows(), super::placement::take())
    };
    let format = PromptFormat::resolve(&model, config.chat_template.as_deref())?;
    let threads = config
        .threads
        .unwrap_or_else(edgecloud_core::cores::physical_cores)
        .max(1);
    let context_size = config
        .context_size
        // The model's own length, at most 4096; a model that declares none
        // (0, refused by the validator unless probed) gets 4096.
        .unwrap_or_else(|| match model.n_ctx_train() {
            0 => 4096,
            n => n.min(4096),
        });
    // Sequence ids: every lane's own, and its samples' (see `batch`).
    let ids = (sequences * samples_of(config)) as u32;
    // A step holds one token of each generating sample besides up to
    // `batch_size` prompt tokens, and one lane's drafts.
    let batch = config.batch_size.max(1) + ids - 1 + draft_rows(config);
    let threads_i32 = i32::try_from(threads).unwrap_or(i32::MAX);
    let params = LlamaContextParams::default()
        // A stream of `context_size` cells per sequence id (llama-server's
        // slots' layout): a sequence's attention reads its own cells only.
        // One unified cache for all of them made every step attend over
        // every sequence's cells, masked: a pool of 4 at 240 tokens each
        // took 32 ms a step against 22 ms with streams (docs/DESIGN.md).
        // llama.cpp splits a step's tokens into micro-batches of equal
        // count per sequence (one for a step of generation tokens); an
        // abort leaves the micro-batches before it in the cache, and the
        // decode loop cuts every sequence back itself.
        .with_n_ctx(NonZeroU32::new(context_size.saturating_mul(ids)))
        .with_n_seq_max(ids)
        .with_kv_unified(false)
        .with_n_batch(batch)
        .with_n_ubatch(batch)
        .with_n_threads(threads_i32)
        .with_n_threads_batch(threads_i32)
        .with_flash_attention_policy(super::attention::policy(&model, config.gpu_layers));
    let params = ffi::with_abort_signal(params, signal);
    check_device_room(&model, &placed, context_size, ids)?;
    Ok((
        Arc::new(model),
        params,
        format,
        threads,
        context_size,
        exact_rows,
        placed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecloud_gguf::generate::{write_model, Preset};

    /// The governor's lever: the live context's thread count really
    /// changes. Fails when a llama-cpp-2 release stops showing its context
    /// pointer as `ThreadControl::of` reads it (the lane would then quietly
    /// keep a fixed count).
    #[test]
    fn a_live_context_takes_a_new_thread_count() {
        let dir = std::env::temp_dir().join(format!("edgecloud-threads-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny.gguf");
        write_model(&path, Preset::Tiny, 7).unwrap();
        let model =
            LlamaModel::load_from_file(backend(), &path, &LlamaModelParams::default()).unwrap();
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(64))
            .with_n_threads(2)
            .with_n_threads_batch(2);
        let mut ctx = {
            let _guard = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            model.new_context(backend(), params).unwrap()
        };
        let control = ffi::ThreadControl::of(&ctx).expect("the context pointer is readable");
        assert_eq!(control.get(&mut ctx), 2);
        control.set(&mut ctx, 1);
        assert_eq!(control.get(&mut ctx), 1);
        control.set(&mut ctx, 2);
        assert_eq!(control.get(&mut ctx), 2);
        drop(ctx);
        drop(model);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
