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
//! lone answer's drafts ride in the step after its pending token and are
//! kept where they are what its picker picks (`speculate`).
//!
//! The loop steps; what a step calls is a module of its own:
//! - `prompt_stage`: the cells a job's prompt starts from (its sequence's
//!   cached prefix, the prompt cache), its chunks and progress, its
//!   scores, and the prompt's last row (a consensus's samples, every
//!   sample's first token);
//! - `speculate`: the settings of speculative decoding, the drafts of a
//!   step and their verification;
//! - `step_threads`: the thread governor's hooks (each step's threads,
//!   its budget, its figure).
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

mod prompt_stage;
mod speculate;
mod step_size;
mod step_threads;

pub(super) use speculate::Speculation;

use super::draft::Drafter;
use super::ffi::AbortSignal;
use super::finish::{self, Ended};
use super::generate::{emit, Progress, PromptFormat};
use super::governor::Governor;
use super::pick::{GrammarPass, GrammarSpec, Picker};
use super::prepare::{Preparer, Task};
use super::prompt_cache::PromptCache;
use super::stop::{StopMatcher, StopState};
use super::toolcall::ToolJob;
use super::utf8::Utf8Stream;
use super::{signals, simd};
use super::{Envelope, LocalCompletion, LocalError, ProgressSink};
use edgecloud_core::lane::{FinishReason, LaneJob, LanePermit, TokenLogprob, TopLogprob};
use edgecloud_core::reasoning::ReasoningSplitter;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::{DecodeError, SeqState};
use speculate::Speculator;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;
use step_size::StepSizer;
use step_threads::StepThreads;
use tokio::sync::oneshot;

/// llama_decode's return value when the abort callback stopped it.
const DECODE_ABORTED: i32 = 2;

/// The context and its sequences.
pub(super) struct Engine<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    format: Arc<PromptFormat>,
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
    /// How many compute threads each step uses (`step_threads`).
    threads: StepThreads,
    /// Speculative decoding (`speculate`).
    spec: Speculator<'m>,
    /// Prompt tokens per step when layers run on a GPU device
    /// (`step_size`).
    step_size: StepSizer,
    /// Conversations the sequences moved on from, in host memory
    /// (`prompt_cache`); `None` when the budget is 0.
    prompt_cache: Option<PromptCache<SeqState>>,
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
    /// The streamed text's thinking kept apart from its answer.
    think: ReasoningSplitter,
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
        format: Arc<PromptFormat>,
        batch_size: u32,
        ids: SeqIds,
        threads: usize,
        governor: Governor,
    ) -> Self {
        let step_threads = StepThreads::new(&ctx, threads, governor);
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
            threads: step_threads,
            spec: Speculator::off(),
            step_size: StepSizer::new(false),
            prompt_cache: None,
        }
    }

    /// Sizes prompt steps from measured step times (`step_size`): for a
    /// lane whose layers run on a GPU device, which does not stop a step
    /// for a cancel.
    pub(super) fn with_device_steps(mut self, on: bool) -> Self {
        self.step_size = StepSizer::from_env(on);
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
        self.threads.controls()
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
        let step = self.threads.before_step(&mut self.ctx, tokens, drafted);
        let waited_before = signal.waited_ns();
        let started = Instant::now();
        let budget = self.threads.budget(&step, started).filter(|_| !verifying);
        signal.arm(
            entries.iter().filter_map(|e| {
                self.seqs[e.seq]
                    .active
                    .as_ref()
                    .map(|a| (&a.job.cancel, a.job.deadline))
            }),
            budget,
            self.threads.may_go_down(&step),
        );
        let decoded = self.ctx.decode(&mut self.batch);
        // llama_decode only queues the step on a GPU device (ggml's
        // compute is asynchronous there; the CPU backend's is not): wait
        // for it, so that a step's measured time is its compute (the
        // step sizer, the governor and `prompt_eval` read it) and the loop
        // looks at cancels and deadlines when the step is really over.
        if decoded.is_ok() {
            self.ctx.synchronize();
        }
        let took = started.elapsed().as_secs_f64();
        let waited = signal
            .waited_ns()
            .zip(waited_before)
            .map_or(0, |(after, before)| after.saturating_sub(before));
        signal.disarm();
        match decoded {
            Ok(()) => {
                if !verifying {
                    self.step_size.record(tokens, took);
                }
                self.threads.decoded(&step, took, waited, verifying);
                self.spec.timed(step.kind, took, drafted);
                for entry in &entries {
                    if let Some(br) = self.seqs[entry.seq]
                        .active
                        .as_mut()
                        .and_then(|a| a.branches.get_mut(entry.branch))
                    {
                        br.out.decoded_with(step.threads);
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
                    self.threads.abandoned(&step, took, contended);
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
            thinking,
        } = match prepared {
            Ok(task) => task,
            Err(e) => {
                reply_after(permit, job, progress, reply, Err(e));
                return;
            }
        };
        let out = Progress::new(&job, submitted_at, started, tokens.len(), thinking);
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
                think: out.stream_splitter(),
                out,
                pending: None,
                drafter: self.spec.drafter(samples, &picker),
                picker,
                stops,
                utf8: Utf8Stream::default(),
                ended: None,
            }],
            aborted_in_decode: false,
            tools,
            grammar,
        };
        self.enter_prompt(seq, &mut active);
        active.prompt_started = Instant::now();
        self.seqs[seq].active = Some(active);
    }

    /// The sequence id of sample `i >= 1` of lane `seq`.
    fn sample_id(&self, seq: usize, i: usize) -> i32 {
        (self.seqs.len() + seq * (self.max_samples - 1) + i - 1) as i32
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
        self.add_prompt_chunks(&mut entries);
        self.add_drafts(&mut entries);
        entries
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
        if streams && !br.out.thinking() {
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
        br.out.token_text(&text);
        let state = br.stops.push(&text);
        if streams {
            let br = &mut a.branches[branch];
            emit(&mut a.job, &mut br.think, br.stops.releasable());
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
                think: br.think,
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
