//! The decode loop: one llama.cpp context shared by N sequences (one per
//! instance of a pool; N = 1 for a lane alone), decoded together in one
//! batch per step, as llama-server's slots are (continuous batching).
//!
//! ```text
//!  jobs (seq id) ──> per-sequence queue ──> start: prepare::Task (template,
//!                                           tokenize, grammar, picker, stops),
//!                                           reuse the sequence's cached prefix
//!  every step:  stopped (cancel / deadline)?  -> it ends, its KV tail is cut
//!               batch = each generating sequence's last token
//!                       (+ its drafts, when it drafts)
//!                     + prompt chunks of the others, up to `batch_size`
//!               arm the abort signal with the batch's jobs, llama_decode
//!               sample each sequence from its own logits row
//!               (a drafting one: row after row while the pick is the
//!               next draft; the rejected drafts' cells are cut)
//!  job ended:   its branches ──> finish (the vote, tool calls, answer
//!                                 check) ──> the reply, after the permit
//! ```
//!
//! Each sequence keeps what a lane alone keeps: its own positions and KV
//! cells (`seq_id`), its prefix reuse, its sampler, stop strings, UTF-8
//! stream and per-token signals, its cancellation and deadline.
//!
//! A job that asks for a consensus of k samples (self-consistency) decodes
//! its prompt once on its sequence; then the prompt's cells are shared with
//! k - 1 more sequence ids (`llama_memory_seq_cp`: each id has a KV stream
//! of its own, and the prompt's stream is copied whole into the samples'
//! streams before the next step), every sample takes its
//! first token from the prompt's one row of logits with its own sampler
//! (seed + i), and the k samples decode side by side in the same batch,
//! each one row per step, until every one has ended. The samples then vote
//! (in `finish`, by `edgecloud_core::answer::majority`): the answer is the first sample giving the
//! majority answer, whole (a consensus job streams nothing before it
//! ends), and the share agreeing is its `agreement`. The other ids' cells
//! are dropped when the job ends. Sample ids of lane `s` of `n`:
//! `n + s * (max_samples - 1) + i - 1` for sample `i >= 1`.
//!
//! A job that
//! stops mid-decode aborts the whole batch (llama.cpp's abort callback);
//! every sequence in it is cut back to what it had before the step, the
//! stopped one finishes and the others decode again next step, so a cancel
//! takes effect within one compute step whoever else is in the batch.
//! Greedy sampling reads the argmax of the raw logits (under a grammar:
//! the first allowed token in rank order, see `pick`), the same whatever
//! else is in the batch (tested against the lane alone on SmolLM2) as far
//! as llama.cpp's kernels sum a row alike alone and in a batch: on
//! Qwen2.5-Coder's Q4_K_M weights they do not (repacked weights from 4
//! rows, and another kernel besides; docs/pool.md).
//!
//! Speculative decoding (`LocalConfig::spec_type`, contract point 16): a
//! greedy lone answer proposes drafts (`draft`: prompt lookup, as many as
//! a cost model says pay, from the sequence's acceptance rate and what a
//! draft row costs on this context, `RowCost`, measured from its own
//! steps' times) after its pending token; they go into the same batch at
//! the following positions, each with logits, and `Engine::verify`
//! keeps the longest prefix of them that the picker itself picks, one
//! token at a time through the same `sample` every token goes through.
//! A sampled answer without a grammar drafts too: its drafts are judged by
//! the speculative-sampling rule (`accept`: a draft is kept with its
//! probability under the answer's sampler, else the token is drawn from
//! the rest), so its distribution is unchanged. A sampled answer under a
//! grammar and a consensus's samples do not draft.
//!
//! What a job's request becomes before its first step (its prompt's
//! tokens, its grammar, its samples' pickers and stop strings) is
//! `prepare`'s, and what its ended branches become is `finish`'s: data
//! flows prepare -> this loop -> finish, and neither end knows the batch.
//! This module steps the prepared task and does not check the request's
//! sampling settings, only follows them (they were validated where the
//! request came in).
//!
//! This module must not know about lanes' admission or the harness: the
//! permit comes in inside the job and is dropped when the job really ends.

use super::draft::{Drafter, RowCost, Source, SpecType};
use super::draftmodel::DraftModel;
use super::ffi::{AbortSignal, ThreadControl};
use super::finish::{self, Ended};
use super::generate::{emit, Progress, PromptFormat};
use super::governor::{Governor, StepFigure, StepKind};
use super::pick::{GrammarPass, GrammarSpec, Picker};
use super::prepare::{self, Preparer, Task};
use super::prompt_cache::{reusable, PromptCache};
use super::stop::{StopMatcher, StopState};
use super::toolcall::ToolJob;
use super::utf8::Utf8Stream;
use super::{signals, simd};
use super::{Envelope, LocalCompletion, LocalError, ProgressSink, PromptProgress};
use edgecloud_core::lane::{
    FinishReason, LaneJob, LanePermit, PromptScore, TokenLogprob, TopLogprob,
};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::{DecodeError, LlamaStateSeqFlags, SeqState};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// llama_decode's return value when the abort callback stopped it.
const DECODE_ABORTED: i32 = 2;

/// llama.cpp's CPU attention (ggml-cpu `ops.cpp`, flash attention, this
/// release) picks its kernel by the step's rows and the cells in view:
/// one row over 512 cells or more is split across the threads, 64 rows or
/// more are tiled, anything else is summed one row at a time. Each kernel
/// sums in its own order, so a row's logits depend on the kernel its step
/// took. Drafts must not move a row to another kernel than the run without
/// drafts gives it (`add_drafts`): a step of fewer rows than this stays
/// under it with its drafts.
const TILED_ROWS: usize = 64;
/// The cells in view are the cells in use padded to 256 (at least 256): a
/// lone row with more than this many cells in use takes the split kernel,
/// which a verify step (several rows) never does.
const SPLIT_KV_USED: usize = 256;

/// Drafts in the verify step that measures a row's cost before a draft
/// model is filled (`RowCost::wants_probe`): about the count a draft
/// model's first proposal has.
const PROBE_DRAFTS: usize = 4;

/// The context and its sequences.
pub(super) struct Engine<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    format: PromptFormat,
    grammar_pass: GrammarPass,
    batch: LlamaBatch<'static>,
    batch_size: usize,
    /// Tokens one sequence may hold (prompt and answer).
    seq_context: usize,
    /// Most samples one job may ask for (sequence ids per lane).
    max_samples: usize,
    seqs: Vec<Sequence>,
    /// The sequence whose prompt goes first into the next batch (turns
    /// rotate so that no long prompt starves another).
    prompt_turn: usize,
    /// How many compute threads each step uses, and the means to set them
    /// (`None`: the configured count always).
    governor: Governor,
    thread_control: Option<ThreadControl>,
    /// The count the context holds now.
    threads_applied: usize,
    /// The most any step uses (the configured count).
    max_threads: usize,
    /// Whether the free cores were looked at for the first step (once: a
    /// lane whose steps are all cut short by deadlines stays "fresh").
    start_hint_taken: bool,
    /// Speculative decoding's settings (`None`: off).
    spec: Option<Speculation>,
    /// Reused buffer: a drafting sequence's tokens and its pending one.
    history: Vec<LlamaToken>,
    /// The lane whose drafts go first into the next step (one lane's a
    /// step: `add_drafts`).
    draft_turn: usize,
    /// What a draft row costs here, measured on this context's steps.
    row_cost: RowCost,
    /// The draft model, when drafts come from one (`draftmodel`); else
    /// prompt lookup.
    draft_model: Option<DraftModel<'m>>,
    /// The most rows an exact verify step may have (`with_exact_rows`).
    exact_rows: usize,
    /// Conversations the sequences moved on from, in host memory
    /// (`prompt_cache`); `None` when the budget is 0.
    prompt_cache: Option<PromptCache<SeqState>>,
}

/// How greedy sequences draft (see `draft` and `Engine::verify`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Speculation {
    pub(super) draft_max: u32,
    pub(super) draft_min: u32,
    /// A draft row's cost, fixed (`LocalConfig::draft_row_cost`), else
    /// measured.
    pub(super) row_cost: Option<f64>,
    /// Drafts only where every row keeps its attention kernel
    /// (`LocalConfig::spec_exact`; see `Engine::add_drafts`).
    pub(super) exact: bool,
}

impl Speculation {
    /// The settings in effect: `None` when off.
    pub(super) fn of(kind: SpecType, draft_max: u32, draft_min: u32) -> Option<Self> {
        match kind {
            SpecType::Off => None,
            SpecType::Ngram | SpecType::Draft => Some(Self {
                draft_max,
                draft_min,
                row_cost: None,
                exact: true,
            }),
        }
    }

    /// With a fixed draft row cost (`None`: measured).
    pub(super) fn with_row_cost(mut self, cost: Option<f32>) -> Self {
        self.row_cost = cost.map(f64::from);
        self
    }

    /// Bit-exact drafting (`true`) or drafting on every step.
    pub(super) fn exact(mut self, exact: bool) -> Self {
        self.exact = exact;
        self
    }
}

/// One sequence: what its KV cells hold, its waiting jobs, its running one.
#[derive(Default)]
struct Sequence {
    /// Tokens whose keys and values are in the cache for this sequence,
    /// at positions 0..len.
    cached: Vec<LlamaToken>,
    queue: VecDeque<Envelope>,
    active: Option<Active>,
}

/// A running job.
struct Active {
    job: LaneJob,
    permit: Option<LanePermit>,
    progress: Option<ProgressSink>,
    reply: oneshot::Sender<Result<LocalCompletion, LocalError>>,
    tokens: Vec<LlamaToken>,
    prompt_started: Instant,
    /// Whether the prompt is decoded (the answers are being generated).
    prompt_done: bool,
    /// Samples the job asks for (1 without a consensus).
    samples: usize,
    /// The answers being generated: the lane's own sequence's from the
    /// start, the other samples' once the prompt is decoded.
    branches: Vec<Branch>,
    aborted_in_decode: bool,
    /// What the job's tools mean here, when it has any.
    tools: Option<ToolJob>,
    /// The grammar its samples decode under (the further samples of a
    /// consensus get their pickers from it).
    grammar: Option<GrammarSpec>,
}

/// One answer being generated, on one sequence id.
struct Branch {
    seq_id: i32,
    /// Cells this id holds: positions 0..len.
    len: usize,
    out: Progress,
    /// The sampled token not yet decoded; `None` while the prompt is, or
    /// once the branch has ended.
    pending: Option<LlamaToken>,
    picker: Picker,
    stops: StopMatcher,
    utf8: Utf8Stream,
    /// Why it ended, once it has (a sample waiting for the others).
    ended: Option<FinishReason>,
    /// Its drafting, when it drafts (greedy and alone: see `Engine::verify`).
    drafter: Option<Drafter>,
}

impl Active {
    /// Whether the job's answer streams token by token (a consensus job's
    /// answer is known only when every sample has ended).
    fn streams(&self) -> bool {
        self.samples == 1
    }
}

/// What one branch of a sequence put into the current batch.
struct Entry {
    seq: usize,
    branch: usize,
    /// Tokens added (one when generating, a chunk of the prompt otherwise).
    tokens: Vec<LlamaToken>,
    /// Batch row of the logits to sample from after the step, if any.
    logits: Option<i32>,
    /// Drafts after a generating branch's token, at the positions that
    /// follow it, each with logits; not yet accepted.
    drafts: Vec<LlamaToken>,
    /// The batch row of the first draft (the others follow it).
    draft_row: i32,
    /// A prompt chunk of a job that scores its prompt: every token's row
    /// has logits, the first at this batch row.
    score_row: Option<i32>,
}

/// The sequence ids of a context: one per lane, and `max_samples - 1`
/// more per lane for the samples of a consensus; each may use `context`
/// cells (the configured context size: llama.cpp rounds each sequence's
/// stream up to a multiple of 256 cells, and the lane keeps to what was
/// asked).
#[derive(Debug, Clone, Copy)]
pub(super) struct SeqIds {
    pub(super) lanes: usize,
    pub(super) max_samples: usize,
    pub(super) context: usize,
}

/// How a sampled token left the job.
enum Next {
    Continue(LlamaToken),
    Done(FinishReason),
    Fail(LocalError),
}

impl<'m> Engine<'m> {
    pub(super) fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        format: PromptFormat,
        batch_size: u32,
        ids: SeqIds,
        threads: usize,
        governor: Governor,
    ) -> Self {
        let thread_control = ThreadControl::of(&ctx);
        let batch_size = batch_size.max(1) as usize;
        let sequences = ids.lanes.max(1);
        let max_samples = ids.max_samples.max(1);
        // What was asked, within what llama.cpp made of it (each id's
        // stream; it may round up).
        let seq_context = (ctx.n_ctx() as usize / (sequences * max_samples))
            .min(ids.context)
            .max(1);
        Self {
            model,
            ctx,
            format,
            grammar_pass: GrammarPass::default(),
            // A step holds each generating sample's token and up to
            // `batch_size` prompt tokens besides (and one lane's drafts,
            // once speculation is on: `with_speculation`).
            batch: LlamaBatch::new(batch_size + sequences * max_samples, 1),
            batch_size,
            seq_context,
            max_samples,
            seqs: (0..sequences).map(|_| Sequence::default()).collect(),
            prompt_turn: 0,
            governor,
            thread_control,
            threads_applied: threads,
            max_threads: threads,
            start_hint_taken: false,
            spec: None,
            history: Vec::new(),
            draft_turn: 0,
            row_cost: RowCost::default(),
            draft_model: None,
            exact_rows: usize::MAX,
            prompt_cache: None,
        }
    }

    /// Turns speculative decoding on (`None` leaves it off). The context's
    /// `n_batch` must hold `draft_max` more tokens (`worker`): one lane
    /// drafts per step (`add_drafts`).
    pub(super) fn with_speculation(mut self, spec: Option<Speculation>) -> Self {
        if let Some(spec) = spec {
            let lanes = self.seqs.len();
            self.batch = LlamaBatch::new(
                self.batch_size + lanes * self.max_samples + spec.draft_max as usize,
                1,
            );
        }
        self.row_cost = RowCost::new(spec.and_then(|s| s.row_cost));
        self.spec = spec;
        self
    }

    /// Drafts from a draft model instead of prompt lookup (`None`: prompt
    /// lookup). `size_share`: its weights' size over the model's, what a
    /// draft is taken to cost until one is measured (`RowCost`).
    pub(super) fn with_draft_model(
        mut self,
        draft: Option<DraftModel<'m>>,
        size_share: f64,
    ) -> Self {
        if draft.is_some() {
            self.row_cost.set_model_prior(size_share);
        }
        self.draft_model = draft;
        self
    }

    /// Bounds exact verify steps to `rows` rows (`add_drafts`): on
    /// weights llama.cpp multiplies with another kernel from some row
    /// count on, a step's rows keep the one-row kernel only below it
    /// (`worker` tells from the model's load: `ffi::take_exact_rows`).
    pub(super) fn with_exact_rows(mut self, rows: Option<usize>) -> Self {
        self.exact_rows = rows.unwrap_or(usize::MAX);
        self
    }

    /// Keeps up to `bytes` of the conversations sequences move on from
    /// (`prompt_cache`; 0: none).
    pub(super) fn with_prompt_cache(mut self, bytes: usize) -> Self {
        self.prompt_cache = PromptCache::new(bytes);
        self
    }

    /// How a constrained answer's grammar is applied (see `pick`).
    pub(super) fn with_grammar_pass(mut self, pass: GrammarPass) -> Self {
        self.grammar_pass = pass;
        self
    }

    /// Whether the context's thread count can be changed (else the
    /// governor's choice is never applied).
    pub(super) fn controls_threads(&self) -> bool {
        self.thread_control.is_some()
    }

    /// Sets the context's thread count for a step of this kind; returns
    /// it.
    fn apply_threads(&mut self, kind: StepKind) -> usize {
        let Some(control) = &self.thread_control else {
            return self.threads_applied;
        };
        let threads = self.governor.threads(kind);
        if threads != self.threads_applied {
            control.set(&mut self.ctx, threads);
            self.threads_applied = threads;
        }
        threads
    }

    /// Whether any job is running or waiting.
    pub(super) fn is_idle(&self) -> bool {
        self.seqs
            .iter()
            .all(|s| s.active.is_none() && s.queue.is_empty())
    }

    /// Takes a job for its sequence; it starts when the sequence is free.
    pub(super) fn submit(&mut self, envelope: Envelope) {
        let seq = envelope.seq.min(self.seqs.len() - 1);
        self.seqs[seq].queue.push_back(envelope);
    }

    /// One step: start waiting jobs, finish stopped ones, decode one batch,
    /// sample every sequence that has logits.
    pub(super) fn step(&mut self, signal: &AbortSignal) {
        for seq in 0..self.seqs.len() {
            self.start_next(seq);
        }
        for seq in 0..self.seqs.len() {
            let stopped = self.seqs[seq]
                .active
                .as_ref()
                .and_then(|a| a.job.stop_reason());
            if let Some(reason) = stopped {
                self.complete(seq, reason);
            }
        }
        let entries = self.fill_batch();
        if entries.is_empty() {
            return;
        }
        let tokens = usize::try_from(self.batch.n_tokens()).unwrap_or(0).max(1);
        // A verify step (drafts in the batch) is a generation step that
        // costs more than one: its kind is that of its tokens without the
        // drafts, it has no overrun budget (a budget made of plain steps
        // would abandon it) and it is not recorded among the plain steps'
        // figures (their mean would follow the drafts' count, not the
        // machine's load). A contended step is still cut short.
        let drafted: usize = entries.iter().map(|e| e.drafts.len()).sum();
        let verifying = drafted > 0;
        let kind = StepKind::of_batch(tokens - drafted);
        if !self.start_hint_taken && self.governor.is_fresh() {
            self.start_hint_taken = true;
            if let Some(free) = edgecloud_core::sched::free_cores() {
                tracing::debug!(
                    target: "edgecloud_local::threads",
                    free,
                    "the lane's first step: cores no other program runs on"
                );
                self.governor.start_on(free);
            }
        }
        // A probe of fewer threads that no contended step called for waits
        // for what the cores are doing (a millisecond, every few dozen
        // steps at most): with a core for every thread it is not run.
        if let Some(waiting) = self.governor.wants_free_cores() {
            self.governor
                .free_cores(waiting, edgecloud_core::sched::free_cores());
        }
        let threads = self.apply_threads(kind);
        let scale = kind.units(tokens - drafted);
        let waited_before = signal.waited_ns();
        let started = Instant::now();
        let budget = self
            .governor
            .budget(kind)
            .filter(|_| !verifying)
            .and_then(|b| Duration::try_from_secs_f64(b * scale).ok())
            .map(|b| started + b);
        signal.arm(
            entries.iter().filter_map(|e| {
                self.seqs[e.seq]
                    .active
                    .as_ref()
                    .map(|a| (&a.job.cancel, a.job.deadline))
            }),
            budget,
            self.governor.may_go_down(kind),
        );
        let decoded = self.ctx.decode(&mut self.batch);
        let took = started.elapsed().as_secs_f64();
        let waited = signal
            .waited_ns()
            .zip(waited_before)
            .map_or(0, |(after, before)| after.saturating_sub(before));
        signal.disarm();
        match decoded {
            Ok(()) => {
                let cost = took / scale;
                let wait_share = (waited as f64 * 1e-9 / took).min(1.0);
                tracing::trace!(
                    target: "edgecloud_local::threads",
                    threads,
                    tokens,
                    took_us = (took * 1e6) as u64,
                    waited_us = waited / 1000,
                    "decode step"
                );
                if verifying {
                    self.row_cost.verified(took, drafted);
                } else if kind == StepKind::Generate {
                    self.row_cost.plain(took);
                }
                if !verifying {
                    self.governor.record(
                        kind,
                        threads,
                        StepFigure {
                            cost,
                            wait_share,
                            overran: false,
                        },
                    );
                }
                for entry in &entries {
                    if let Some(br) = self.seqs[entry.seq]
                        .active
                        .as_mut()
                        .and_then(|a| a.branches.get_mut(entry.branch))
                    {
                        br.out.decoded_with(threads);
                    }
                }
                self.after_decode(entries)
            }
            Err(err) => {
                // Aborted with no job stopped: the step ran past the
                // governor's budget, or waited for a CPU much of the time
                // with more than the fewest threads. The batch is decoded
                // again next step, with fewer threads.
                let contended = signal.stopped_by_contention();
                let overran = matches!(err, DecodeError::Unknown(DECODE_ABORTED))
                    && (contended || budget.is_some_and(|b| Instant::now() >= b))
                    && !entries.iter().any(|e| {
                        self.seqs[e.seq]
                            .active
                            .as_ref()
                            .is_some_and(|a| a.job.stop_reason().is_some())
                    });
                if overran {
                    tracing::debug!(
                        target: "edgecloud_local::threads",
                        threads,
                        tokens,
                        took_us = (took * 1e6) as u64,
                        contended,
                        "decode step abandoned (over its budget, or waiting for a CPU): decoded again with fewer threads"
                    );
                    // A step stopped for waiting is a lower bound of what
                    // it would have cost: any figure of fewer threads
                    // beats it.
                    let cost = if contended {
                        f64::INFINITY
                    } else {
                        took / scale
                    };
                    self.governor.record(
                        kind,
                        threads,
                        StepFigure {
                            cost,
                            wait_share: 1.0,
                            overran: true,
                        },
                    );
                }
                self.after_failed_decode(entries, err)
            }
        }
    }

    /// Starts the next queued job of a free sequence (several, when jobs
    /// end before any decoding: a job its preparation refused, a job
    /// already stopped).
    fn start_next(&mut self, seq: usize) {
        while self.seqs[seq].active.is_none() {
            let Some(envelope) = self.seqs[seq].queue.pop_front() else {
                return;
            };
            let started = catch_unwind(AssertUnwindSafe(|| self.start(seq, envelope)));
            if let Err(panic) = started {
                // The envelope (job, permit, reply) was dropped while
                // unwinding: its ticket resolves to `WorkerGone`.
                tracing::warn!(
                    panic = %edgecloud_core::panic_payload::message(&*panic),
                    "a local job panicked while starting"
                );
            }
        }
    }

    fn start(&mut self, seq: usize, envelope: Envelope) {
        let Envelope {
            mut job,
            progress,
            submitted_at,
            reply,
            ..
        } = envelope;
        let started = Instant::now();
        let permit = job.permit.take();
        let prepared = Preparer {
            model: self.model,
            format: &self.format,
            grammar_pass: self.grammar_pass,
            seq_context: self.seq_context,
            max_samples: self.max_samples,
        }
        .task(&job);
        let Task {
            tokens,
            tools,
            grammar,
            samples,
            picker,
            stops,
        } = match prepared {
            Ok(task) => task,
            Err(e) => {
                reply_after(permit, job, progress, reply, Err(e));
                return;
            }
        };
        let out = Progress::new(&job, submitted_at, started, tokens.len());
        let mut active = Active {
            job,
            permit,
            progress,
            reply,
            tokens,
            prompt_started: Instant::now(),
            prompt_done: false,
            samples,
            branches: vec![Branch {
                seq_id: seq as i32,
                len: 0,
                out,
                pending: None,
                // An answer alone drafts when its picks can judge a
                // draft: greedy ones (a function of the logits and the
                // grammar's state: a draft is kept exactly when it is the
                // pick) and random ones without a grammar (the
                // speculative-sampling rule, `accept`). A consensus's
                // samples do not (one lane's drafts a step).
                drafter: self
                    .spec
                    .filter(|_| samples == 1 && (picker.is_greedy() || picker.judges_drafts()))
                    .map(|s| Drafter::new(s.draft_max, s.draft_min)),
                picker,
                stops,
                utf8: Utf8Stream::default(),
                ended: None,
            }],
            aborted_in_decode: false,
            tools,
            grammar,
        };
        if active.job.sampling.score_prompt {
            // Every prompt token is scored, so none is taken from the cache.
            self.recall(seq, &active.tokens, false);
            self.forget_cells(seq);
        } else {
            // A two-stage cascade on the prompt's length reads it before
            // any of the prompt is decoded.
            if let Some(sink) = active.job.on_prompt_score.take() {
                sink(PromptScore {
                    tokens: active.tokens.len() as u32,
                    logprob: None,
                });
            }
            if active.job.stop_reason().is_none() {
                self.recall(seq, &active.tokens, true);
                active.branches[0].out.reused = self.reuse_prefix(seq, &active.tokens);
            }
        }
        active.branches[0].len = self.seqs[seq].cached.len();
        active.prompt_started = Instant::now();
        self.seqs[seq].active = Some(active);
    }

    /// The sequence id of sample `i >= 1` of lane `seq`.
    fn sample_id(&self, seq: usize, i: usize) -> i32 {
        (self.seqs.len() + seq * (self.max_samples - 1) + i - 1) as i32
    }

    /// Before a job's prompt on `seq` (see `prompt_cache`): saves the
    /// sequence's cells when the job would drop enough of them, then,
    /// when the job reuses cells at all (`reuse`; one that scores its
    /// prompt does not), restores the saved conversation that shares the
    /// most with `prompt`, when it shares enough more than the sequence.
    fn recall(&mut self, seq: usize, prompt: &[LlamaToken], reuse: bool) {
        let Some(cache) = self.prompt_cache.as_mut() else {
            return;
        };
        let id = seq as i32;
        let held = &self.seqs[seq].cached;
        let own = if reuse { reusable(held, prompt) } else { 0 };
        if cache.wants(held, own) {
            let started = Instant::now();
            match self.ctx.state_seq_get(id, LlamaStateSeqFlags::empty()) {
                Ok(state) => {
                    tracing::debug!(
                        target: "edgecloud_local::prompt_cache",
                        seq,
                        tokens = held.len(),
                        bytes = state.byte_len(),
                        took_us = started.elapsed().as_micros() as u64,
                        "saved a conversation"
                    );
                    cache.insert(held.clone(), state);
                }
                Err(e) => tracing::debug!(seq, error = %e, "a sequence's cells could not be saved"),
            }
        }
        if !reuse {
            return;
        }
        let Some((tokens, state)) = cache.take_best(prompt, own) else {
            return;
        };
        let started = Instant::now();
        let _ = self.ctx.kv_cache_seq_rm(id, None, None);
        self.seqs[seq].cached.clear();
        match self.ctx.state_seq_set(&state, id) {
            Ok(()) => {
                tracing::debug!(
                    target: "edgecloud_local::prompt_cache",
                    seq,
                    restored = tokens.len(),
                    own,
                    took_us = started.elapsed().as_micros() as u64,
                    entries = cache.len(),
                    bytes = cache.bytes(),
                    "restored a saved conversation"
                );
                self.seqs[seq].cached = tokens;
            }
            Err(e) => {
                let _ = self.ctx.kv_cache_seq_rm(id, None, None);
                tracing::warn!(seq, error = %e, "a saved conversation could not be restored");
            }
        }
    }

    /// Keeps the longest common prefix of the sequence's cache and
    /// `tokens` (leaving at least one token to decode, for fresh logits)
    /// and drops the rest of its cells. Returns how many are reused.
    fn reuse_prefix(&mut self, seq: usize, tokens: &[LlamaToken]) -> usize {
        let cached = &self.seqs[seq].cached;
        let common = reusable(cached, tokens);
        if common < cached.len() && !self.cut(seq, common) {
            return 0;
        }
        self.seqs[seq].cached.truncate(common);
        common
    }

    /// Drops every cell of the sequence.
    fn forget_cells(&mut self, seq: usize) {
        if !self.seqs[seq].cached.is_empty() {
            self.cut(seq, 0);
            self.seqs[seq].cached.clear();
        }
    }

    /// Drops the sequence's cells from position `from` on; when the memory
    /// cannot drop a tail (recurrent models), the whole sequence. Returns
    /// whether the tail alone went.
    fn cut(&mut self, seq: usize, from: usize) -> bool {
        let id = seq as i32;
        if self
            .ctx
            .kv_cache_seq_rm(id, Some(from as u32), None)
            .is_ok()
        {
            return true;
        }
        let _ = self.ctx.kv_cache_seq_rm(id, None, None);
        self.seqs[seq].cached.clear();
        false
    }

    /// The drafts to decode after a lane's pending token this step (see
    /// `draft`): none unless its answer drafts. At most as many as could
    /// be kept: the answer's remaining `max_tokens` after the pending
    /// token's own pick, and the sequence's cells (a pick at the last
    /// cells ends the answer, as `sample` says).
    fn draft(&mut self, seq: usize, most: usize) -> Vec<LlamaToken> {
        let mut drafts = Vec::new();
        // No drafts on a step that measures what a plain step costs (the
        // baseline a draft row's cost is a share of).
        if most == 0 || self.row_cost.wants_plain() {
            return drafts;
        }
        let s = &mut self.seqs[seq];
        let Some(a) = s.active.as_mut().filter(|a| a.prompt_done) else {
            return drafts;
        };
        let max_tokens = a.job.sampling.max_tokens as usize;
        let Some(br) = a.branches.first_mut() else {
            return drafts;
        };
        let (Some(token), Some(drafter)) = (br.pending, br.drafter.as_mut()) else {
            return drafts;
        };
        let room = max_tokens
            .saturating_sub(br.out.completion_tokens + 1)
            .min(self.seq_context.saturating_sub(br.len + 3))
            .min(most);
        // A paused sequence looks nothing up.
        let most = drafter.room(room);
        if most == 0 {
            return drafts;
        }
        self.history.clear();
        self.history.extend_from_slice(&s.cached);
        self.history.push(token);
        match self.draft_model.as_mut() {
            // Before the draft model is filled with the prompt: what a row
            // costs here, measured with drafts that are free to find.
            Some(_) if self.row_cost.wants_probe() => {
                let k = most.min(PROBE_DRAFTS.max(drafter.draft_min()));
                drafter.probe(&self.history, k, &mut drafts);
            }
            Some(model) => {
                // The cost model first: the draft model's proposals cost
                // its own steps besides their rows.
                let k = drafter.count(Source::Model, most, &self.row_cost);
                if k == 0 {
                    return drafts;
                }
                let started = Instant::now();
                let first = drafter.first_proposal();
                let fill = model.propose(&self.history, k, &mut drafts, first);
                self.row_cost.proposed_by_model(
                    started.elapsed().saturating_sub(fill).as_secs_f64(),
                    drafts.len(),
                );
            }
            None => drafter.lookup(&self.history, most, &self.row_cost, &mut drafts),
        }
        if drafts.len() < drafter.draft_min().max(1) {
            drafts.clear();
        }
        drafts
    }

    /// The cells the context's sequences hold before this step (a bound
    /// from above: a consensus's samples count their shared prompt each).
    fn cells_in_use(&self) -> usize {
        self.seqs
            .iter()
            .map(|s| {
                s.cached.len()
                    + s.active.as_ref().map_or(0, |a| {
                        a.branches.iter().skip(1).map(|b| b.len).sum::<usize>()
                    })
            })
            .sum()
    }

    /// Verifies a lane's drafts, decoded this step after its pending token
    /// (batch row `row`; the drafts' rows from `draft_row` on). The picker picks at
    /// the token's row as always; while its pick is the next draft, that
    /// draft is the token the lane would have decoded next (its cell is in
    /// the cache, its row holds the logits that step would have given), so
    /// it is kept and the picker picks again at the draft's row. Every pick
    /// goes through `sample`, the one per-token path (grammar, signals,
    /// log-probs, stop strings, streaming, max_tokens), in order, so all
    /// that follows sees exactly the tokens of a run without drafts. The
    /// cells of the drafts not kept are cut; the last pick is pending, as
    /// after any step.
    fn verify(
        &mut self,
        seq: usize,
        branch: usize,
        row: i32,
        drafts: &[LlamaToken],
        draft_row: i32,
    ) -> Result<(), LocalError> {
        let mut next = self.sample(seq, branch, row, drafts.first().copied());
        let mut accepted = 0;
        for (i, &draft) in drafts.iter().enumerate() {
            if !matches!(next, Next::Continue(token) if token == draft) {
                break;
            }
            let s = &mut self.seqs[seq];
            let Some(a) = s.active.as_mut() else {
                break;
            };
            // A job stopped (its sink cancelled it, its deadline passed)
            // ends before its next step: here, before its next draft.
            if a.job.stop_reason().is_some() {
                break;
            }
            a.branches[branch].len += 1;
            s.cached.push(draft);
            accepted += 1;
            next = self.sample(
                seq,
                branch,
                draft_row + accepted as i32 - 1,
                drafts.get(i + 1).copied(),
            );
        }
        if let Some(br) = self.seqs[seq]
            .active
            .as_mut()
            .and_then(|a| a.branches.get_mut(branch))
        {
            br.out.drafts_verified(drafts.len(), accepted);
            if let Some(drafter) = br.drafter.as_mut() {
                let row_cost = self.row_cost.per_draft(drafts.len(), drafter.by_model());
                tracing::trace!(
                    target: "edgecloud_local::draft",
                    class = drafter.last_class(),
                    drafted = drafts.len(),
                    accepted,
                    row_cost,
                    "drafts verified"
                );
                drafter.verified(drafts.len(), accepted, row_cost);
            }
        }
        if accepted < drafts.len() {
            let from = self.seqs[seq].cached.len();
            if !self.cut(seq, from) {
                return Err(LocalError::Decode {
                    detail: "the cells of rejected drafts could not be removed".into(),
                });
            }
        }
        self.advance(seq, branch, next);
        Ok(())
    }

    /// Puts every generating branch's pending token into the batch, then
    /// prompt chunks, in turn, up to `batch_size` prompt tokens.
    fn fill_batch(&mut self) -> Vec<Entry> {
        self.batch.clear();
        let mut entries = Vec::new();
        for seq in 0..self.seqs.len() {
            let Some(a) = self.seqs[seq].active.as_ref() else {
                continue;
            };
            for (branch, br) in a.branches.iter().enumerate() {
                let Some(token) = br.pending else {
                    continue;
                };
                let row = self.batch.n_tokens();
                self.batch
                    .add(token, br.len as i32, &[br.seq_id], true)
                    .expect("the batch has a row for every sample's token");
                entries.push(Entry {
                    seq,
                    branch,
                    tokens: vec![token],
                    logits: Some(row),
                    drafts: Vec::new(),
                    draft_row: 0,
                    score_row: None,
                });
            }
        }
        let mut budget = self.batch_size;
        let n = self.seqs.len();
        for turn in 0..n {
            if budget == 0 {
                break;
            }
            let seq = (self.prompt_turn + turn) % n;
            let s = &mut self.seqs[seq];
            let Some(active) = s.active.as_mut().filter(|a| !a.prompt_done) else {
                continue;
            };
            let done = s.cached.len();
            let total = active.tokens.len();
            if let Some(report) = active.progress.as_mut() {
                report(PromptProgress {
                    done: done as u32,
                    total: total as u32,
                });
            }
            let take = (total - done).min(budget);
            let chunk = active.tokens[done..done + take].to_vec();
            let last = done + take == total;
            let scores = active.job.sampling.score_prompt;
            let first_row = self.batch.n_tokens();
            for (j, &token) in chunk.iter().enumerate() {
                self.batch
                    .add(
                        token,
                        (done + j) as i32,
                        &[seq as i32],
                        scores || (last && j + 1 == take),
                    )
                    .expect("prompt chunks fit the batch's prompt budget");
            }
            budget -= take;
            entries.push(Entry {
                seq,
                branch: 0,
                logits: last.then(|| first_row + take as i32 - 1),
                tokens: chunk,
                drafts: Vec::new(),
                draft_row: 0,
                score_row: scores.then_some(first_row),
            });
        }
        self.prompt_turn = (self.prompt_turn + 1) % n;
        self.add_drafts(&mut entries);
        entries
    }

    /// Adds one lane's drafts, the next in turn that has any, as the
    /// batch's last rows.
    ///
    /// Why one lane and last: llama.cpp puts a step's tokens into free
    /// cells in row order and, when cells are removed, fills the lowest
    /// free ones first; attention then sums over a sequence's cells in
    /// cell order. Rejected drafts in the last rows leave free cells only
    /// above every cell in use, so every sequence's later tokens still go
    /// into cells above its earlier ones, in the order a run without
    /// drafts gives them, and its sums are the same to the last bit.
    /// Drafts of two lanes in one step would leave the first one's
    /// rejected cells below the second one's kept ones.
    ///
    /// And, when exact (`LocalConfig::spec_exact`, the default), no more
    /// drafts than keep every row on the attention kernel it takes without
    /// them (see [`TILED_ROWS`]): a step under 64 rows stays under 64; a
    /// lone row (the lane decoding alone, as a run without drafts decodes
    /// every token) drafts only while its tokens and the drafts' stay
    /// within the cells where a lone row is not split, unless every step
    /// runs on one thread: the split kernel's one chunk is then summed in
    /// the order of the other (its partials are combined with a factor of
    /// exactly 1). So on several threads a lone lane drafts in its first
    /// 256 cells only: past them llama.cpp would sum the run without
    /// drafts in another order. And on weights whose matrix products take
    /// another kernel from some row count on (`exact_rows`: repacked Q4_K
    /// and Q4_0 from 4 rows), no more drafts than keep the step under that
    /// count. Not exact: drafts on every step.
    fn add_drafts(&mut self, entries: &mut [Entry]) {
        let Some(spec) = self.spec else {
            return;
        };
        let rows = usize::try_from(self.batch.n_tokens()).unwrap_or(usize::MAX);
        let mut most = if rows < TILED_ROWS && spec.exact {
            TILED_ROWS - 1 - rows
        } else {
            usize::MAX
        };
        if rows == 1 && spec.exact && self.max_threads > 1 {
            most = most.min(SPLIT_KV_USED.saturating_sub(self.cells_in_use() + rows));
        }
        if spec.exact {
            most = most.min(self.exact_rows.saturating_sub(rows));
        }
        let n = self.seqs.len();
        for turn in 0..n {
            let seq = (self.draft_turn + turn) % n;
            let drafts = self.draft(seq, most);
            if drafts.is_empty() {
                continue;
            }
            let Some(entry) = entries
                .iter_mut()
                .find(|e| e.seq == seq && e.branch == 0 && e.logits.is_some())
            else {
                continue;
            };
            let (len, id) = match self.seqs[seq].active.as_ref() {
                Some(a) => (a.branches[0].len, a.branches[0].seq_id),
                None => continue,
            };
            entry.draft_row = self.batch.n_tokens();
            for (j, &draft) in drafts.iter().enumerate() {
                self.batch
                    .add(draft, (len + 1 + j) as i32, &[id], true)
                    .expect("the batch has draft_max rows for one lane's drafts");
            }
            entry.drafts = drafts;
            self.draft_turn = (seq + 1) % n;
            return;
        }
    }

    fn after_decode(&mut self, entries: Vec<Entry>) {
        for entry in &entries {
            if let Some(row) = entry.score_row {
                self.score_prompt_chunk(entry, row);
            }
            let s = &mut self.seqs[entry.seq];
            if entry.branch == 0 {
                s.cached.extend_from_slice(&entry.tokens);
            }
            if let Some(br) = s
                .active
                .as_mut()
                .and_then(|a| a.branches.get_mut(entry.branch))
            {
                br.len += entry.tokens.len();
            }
        }
        for entry in entries {
            let seq = entry.seq;
            let Some(row) = entry.logits else {
                continue;
            };
            // A sequence failed earlier in this loop (a panic) is gone.
            if self.seqs[seq].active.is_none() {
                continue;
            }
            let stepped = catch_unwind(AssertUnwindSafe(|| {
                if self.seqs[seq]
                    .active
                    .as_ref()
                    .is_some_and(|a| !a.prompt_done)
                {
                    self.prompt_decoded(seq, row)
                } else if !entry.drafts.is_empty() {
                    self.verify(seq, entry.branch, row, &entry.drafts, entry.draft_row)
                } else {
                    let next = self.sample(seq, entry.branch, row, None);
                    self.advance(seq, entry.branch, next);
                    Ok(())
                }
            }));
            match stepped {
                Ok(Ok(())) => {}
                Ok(Err(e)) => self.fail(seq, e),
                Err(panic) => self.fail_after_panic(seq, &*panic),
            }
        }
    }

    /// A prompt chunk of a job that scores its prompt is decoded: each of
    /// its rows gives the log-probability of the prompt token that follows
    /// it (the prompt's last row predicts the answer, not the prompt, and
    /// is left out). Runs before the chunk joins the cache, so the cache's
    /// length is the chunk's first position.
    fn score_prompt_chunk(&mut self, entry: &Entry, first_row: i32) {
        let start = self.seqs[entry.seq].cached.len();
        let Some(a) = self.seqs[entry.seq].active.as_mut() else {
            return;
        };
        for j in 0..entry.tokens.len() {
            let Some(&next) = a.tokens.get(start + j + 1) else {
                break;
            };
            let logits = self.ctx.get_logits_ith(first_row + j as i32);
            let logprob = signals::token_logprob(logits, next.0 as usize);
            a.branches[0].out.prompt_token_scored(logprob);
        }
    }

    /// The prompt's last row of logits is in: the prompt's figures, the
    /// other samples' sequences (sharing the prompt's cells), and every
    /// sample's first token from that one row.
    fn prompt_decoded(&mut self, seq: usize, row: i32) -> Result<(), LocalError> {
        let cached = self.seqs[seq].cached.len();
        let ids: Vec<i32> = {
            let a = self.seqs[seq]
                .active
                .as_ref()
                .expect("checked by the caller");
            (1..a.samples).map(|i| self.sample_id(seq, i)).collect()
        };
        for &id in &ids {
            // Nothing of an earlier job may be left on these ids.
            let _ = self.ctx.kv_cache_seq_rm(id, None, None);
            // Each id has a stream of its own, and llama.cpp copies
            // between streams whole: the source's stream holds the prompt
            // and nothing else (a reused prefix's tail was cut before it).
            self.ctx
                .kv_cache_seq_cp(seq as i32, id, None, None)
                .map_err(|e| LocalError::Decode {
                    detail: format!("sharing the prompt's cells with a sample: {e}"),
                })?;
        }
        let model = self.model;
        let a = self.seqs[seq]
            .active
            .as_mut()
            .expect("checked by the caller");
        a.prompt_done = true;
        let first = &mut a.branches[0];
        first.out.prompt_eval = a.prompt_started.elapsed();
        first.out.prompt_decoded = cached.saturating_sub(first.out.reused);
        if let Some(report) = a.progress.as_mut() {
            let total = a.tokens.len() as u32;
            report(PromptProgress { done: total, total });
        }
        // A two-stage cascade reads the prompt's score before any answer
        // token exists.
        if let (Some(score), Some(sink)) = (
            a.branches[0].out.prompt_logprob(),
            a.job.on_prompt_score.take(),
        ) {
            sink(PromptScore {
                tokens: a.tokens.len() as u32,
                logprob: Some(score),
            });
        }
        for (i, &id) in ids.iter().enumerate() {
            let (picker, stops) = prepare::sample_parts(
                model,
                self.grammar_pass,
                &a.job,
                a.grammar.as_ref(),
                a.tools.as_ref(),
                i as u32 + 1,
            )?;
            let out = a.branches[0].out.clone();
            a.branches.push(Branch {
                seq_id: id,
                len: cached,
                out,
                pending: None,
                picker,
                stops,
                utf8: Utf8Stream::default(),
                ended: None,
                drafter: None,
            });
        }
        for branch in 0..a.branches.len() {
            let next = self.sample(seq, branch, row, None);
            self.advance(seq, branch, next);
            if self.seqs[seq].active.is_none() {
                break;
            }
        }
        Ok(())
    }

    /// Applies a branch's sampled outcome: its next token, or its end (the
    /// job's end once every branch has ended).
    fn advance(&mut self, seq: usize, branch: usize, next: Next) {
        let Some(a) = self.seqs[seq].active.as_mut() else {
            return;
        };
        match next {
            Next::Continue(token) => a.branches[branch].pending = Some(token),
            Next::Done(reason) => {
                let br = &mut a.branches[branch];
                br.pending = None;
                br.ended = Some(reason);
                let all_ended =
                    a.branches.len() == a.samples && a.branches.iter().all(|b| b.ended.is_some());
                if all_ended {
                    self.complete(seq, reason);
                }
            }
            Next::Fail(e) => self.fail(seq, e),
        }
    }

    /// A decode that failed or was aborted: every sequence in the batch is
    /// cut back to what it held before; those whose job stopped finish,
    /// the others decode again next step, unless llama.cpp failed.
    fn after_failed_decode(&mut self, entries: Vec<Entry>, err: DecodeError) {
        let mut broken = Vec::new();
        for entry in &entries {
            if !self.cut_branch(entry.seq, entry.branch) {
                broken.push(entry.seq);
            }
        }
        let aborted = matches!(err, DecodeError::Unknown(DECODE_ABORTED));
        let mut seen = Vec::new();
        for entry in entries {
            let seq = entry.seq;
            // One verdict per job, however many of its samples were in
            // the batch.
            if seen.contains(&seq) {
                continue;
            }
            seen.push(seq);
            let stopped = self.seqs[seq]
                .active
                .as_ref()
                .and_then(|a| a.job.stop_reason());
            match (aborted, stopped) {
                (true, Some(reason)) => {
                    if let Some(a) = self.seqs[seq].active.as_mut() {
                        a.aborted_in_decode = true;
                    }
                    self.complete(seq, reason);
                }
                // A sample's cells could not be cut back: it cannot go on.
                (true, None)
                    if broken.contains(&seq)
                        && self.seqs[seq]
                            .active
                            .as_ref()
                            .is_some_and(|a| a.samples > 1) =>
                {
                    self.fail(
                        seq,
                        LocalError::Decode {
                            detail:
                                "an aborted step left a sample's cells that could not be removed"
                                    .into(),
                        },
                    );
                }
                // Another job of the batch stopped it: decode again.
                (true, None) => {}
                (false, _) => self.fail(
                    seq,
                    LocalError::Decode {
                        detail: err.to_string(),
                    },
                ),
            }
        }
    }

    /// Cuts a branch's id back to the cells it held before the step.
    /// Returns false when a sample's tail could not be cut (the lane's own
    /// sequence then starts over, as `cut` says).
    fn cut_branch(&mut self, seq: usize, branch: usize) -> bool {
        if branch == 0 {
            let from = self.seqs[seq].cached.len();
            self.cut(seq, from);
            return true;
        }
        let Some(br) = self.seqs[seq]
            .active
            .as_ref()
            .and_then(|a| a.branches.get(branch))
        else {
            return true;
        };
        let (id, from) = (br.seq_id, br.len);
        self.ctx
            .kv_cache_seq_rm(id, Some(from as u32), None)
            .is_ok()
    }

    /// Samples a branch's next token from batch row `row`, streams its
    /// text (a lone answer only), and says whether the branch goes on.
    /// `draft`: the token drafted at this position, judged by the picker
    /// (`Picker::pick_against`: kept when it is greedy's pick, or by the
    /// speculative-sampling rule).
    fn sample(&mut self, seq: usize, branch: usize, row: i32, draft: Option<LlamaToken>) -> Next {
        let a = self.seqs[seq]
            .active
            .as_mut()
            .expect("only running jobs put logits rows in the batch");
        let streams = a.streams();
        let br = &mut a.branches[branch];
        let cached = br.len;
        let logits = self.ctx.get_logits_ith(row);
        let pass = simd::scan(logits);
        // Greedy picks the first largest logit, which the signals pass
        // finds anyway; llama.cpp's samplers run only when sampling is
        // random or a grammar constrains the answer (`pick`).
        let picked = match draft {
            Some(draft) => br
                .picker
                .pick_against(&self.ctx, row, logits, pass.argmax, draft),
            None => br.picker.pick(&self.ctx, row, logits, pass.argmax),
        };
        let token = match picked {
            Ok(token) => token,
            Err(e) => return Next::Fail(e),
        };
        let scan = signals::from_pass(logits, &pass, token.0 as usize);
        br.out.token_sampled(scan);
        if streams {
            if let Some(watch) = a.job.on_logprob.as_mut() {
                watch(scan.logprob);
            }
        }
        let br = &mut a.branches[branch];
        let vocab = self.model.vocab();
        if vocab.is_eog(token) {
            return Next::Done(FinishReason::Stop);
        }
        let mut piece = Vec::with_capacity(32);
        vocab.token_to_piece_into(token, &mut piece, false, None);
        if let (Some(detail), Some(n)) = (br.out.detail.as_mut(), a.job.sampling.logprobs) {
            detail.push(token_logprob(
                self.model,
                logprob_entry(&piece, scan.logprob),
                logits,
                scan.log_sum_exp,
                n,
            ));
        }
        let mut text = String::new();
        br.utf8.push(&piece, &mut text);
        let state = br.stops.push(&text);
        if streams {
            emit(&mut a.job, a.branches[branch].stops.releasable());
        }
        let br = &mut a.branches[branch];
        if state == StopState::Stopped {
            return Next::Done(FinishReason::Stop);
        }
        if br.out.completion_tokens >= a.job.sampling.max_tokens as usize
            || cached + 1 >= self.seq_context
        {
            text.clear();
            br.utf8.finish(&mut text);
            br.stops.push(&text);
            return Next::Done(FinishReason::Length);
        }
        Next::Continue(token)
    }

    /// Ends the sequence's job with what it has: a lone answer, or the
    /// samples' vote (`reason` is the job's when it was stopped; each
    /// sample that ended keeps its own). Pending tokens were never
    /// decoded, so the cache already matches `cached`; the other samples'
    /// cells go.
    fn complete(&mut self, seq: usize, reason: FinishReason) {
        let Some(a) = self.seqs[seq].active.take() else {
            return;
        };
        for br in a.branches.iter().skip(1) {
            let _ = self.ctx.kv_cache_seq_rm(br.seq_id, None, None);
        }
        let Active {
            mut job,
            permit,
            progress,
            reply,
            branches,
            aborted_in_decode,
            samples,
            tools,
            ..
        } = a;
        let grammar_pass = self.grammar_pass;
        let ended = branches
            .into_iter()
            .map(|br| Ended {
                out: br.out,
                stops: br.stops,
                ended: br.ended,
            })
            .collect();
        let finished = catch_unwind(AssertUnwindSafe(|| {
            finish::completion(&mut job, ended, samples, reason, aborted_in_decode)
        }));
        let result = finished
            .map_err(|panic| {
                self.forget(seq);
                LocalError::Panicked {
                    detail: edgecloud_core::panic_payload::message(&*panic),
                }
            })
            .and_then(|c| finish::answer(c, &job.sampling, tools.as_ref(), grammar_pass));
        reply_after(permit, job, progress, reply, result);
    }

    fn fail(&mut self, seq: usize, error: LocalError) {
        if let Some(a) = self.seqs[seq].active.take() {
            for br in a.branches.iter().skip(1) {
                let _ = self.ctx.kv_cache_seq_rm(br.seq_id, None, None);
            }
            reply_after(a.permit, a.job, a.progress, a.reply, Err(error));
        }
    }

    /// A job's sink or progress callback panicked: the job fails, its
    /// sequence forgets its cache, the others go on.
    fn fail_after_panic(&mut self, seq: usize, panic: &(dyn std::any::Any + Send)) {
        self.forget(seq);
        self.fail(
            seq,
            LocalError::Panicked {
                detail: edgecloud_core::panic_payload::message(panic),
            },
        );
    }

    /// Drops every cell of one sequence.
    fn forget(&mut self, seq: usize) {
        let _ = self.ctx.kv_cache_seq_rm(seq as i32, None, None);
        self.seqs[seq].cached.clear();
    }

    /// After a panic outside any one job's code: every job fails and the
    /// whole cache is forgotten.
    pub(super) fn reset_all(&mut self, detail: &str) {
        self.ctx.clear_kv_cache();
        if let Some(cache) = self.prompt_cache.as_mut() {
            cache.clear();
        }
        for seq in 0..self.seqs.len() {
            self.seqs[seq].cached.clear();
            self.fail(
                seq,
                LocalError::Panicked {
                    detail: detail.to_string(),
                },
            );
        }
    }
}

/// A token's text and bytes as a log-probability entry.
fn logprob_entry(piece: &[u8], logprob: f32) -> TopLogprob {
    TopLogprob {
        token: String::from_utf8_lossy(piece).into_owned(),
        logprob,
        bytes: Some(piece.to_vec()),
    }
}

/// The sampled token's entry with the `n` most likely tokens at its
/// position, all from the raw distribution (the same pass as the
/// signals'). Alternatives that are control tokens show their text.
fn token_logprob(
    model: &LlamaModel,
    chosen: TopLogprob,
    logits: &[f32],
    log_sum_exp: f64,
    n: u8,
) -> TokenLogprob {
    let vocab = model.vocab();
    let mut piece = Vec::with_capacity(32);
    let top_logprobs = signals::top_logprobs(logits, log_sum_exp, usize::from(n))
        .into_iter()
        .map(|(id, logprob)| {
            piece.clear();
            vocab.token_to_piece_into(LlamaToken(id as i32), &mut piece, true, None);
            logprob_entry(&piece, logprob)
        })
        .collect();
    TokenLogprob {
        token: chosen.token,
        logprob: chosen.logprob,
        bytes: chosen.bytes,
        top_logprobs,
    }
}

/// Frees the lane's slot, then hands back the result: a caller that sees
/// the result can admit its next job at once.
fn reply_after(
    permit: Option<LanePermit>,
    job: LaneJob,
    progress: Option<ProgressSink>,
    reply: oneshot::Sender<Result<LocalCompletion, LocalError>>,
    result: Result<LocalCompletion, LocalError>,
) {
    drop(permit);
    drop(job);
    drop(progress);
    let _ = reply.send(result);
}
