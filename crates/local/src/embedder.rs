//! Embeddings on the local lane, the worker's side: a second llama.cpp
//! context on the lane's loaded model, with embeddings on and the
//! lane's pooling ([`EmbeddingInfo`]), created on the worker thread the
//! first time an embeddings request arrives (a lane that never embeds
//! pays nothing), and the queue of requests it works through.
//!
//! ```text
//!  requests (token sequences) ──> queue
//!  every worker turn (between the generation steps of `batch`):
//!      pack waiting inputs, oldest first, one sequence id each, into one
//!      batch (at most MAX_SEQS inputs and the turn's token budget; at
//!      least one input) ──> llama_decode ──> each sequence's pooled
//!      vector, L2-normalised ──> clear the context's memory
//!  request complete ──> its reply
//! ```
//!
//! The turn's token budget is the whole embedding batch when no answer is
//! being generated, and the lane's prompt `batch_size` while one is: an
//! embeddings decode has no abort callback, so it is kept to the size of
//! a prompt step and the generating sequences' cancel and deadline are
//! looked at as often as a long prompt lets them be. An input longer than
//! the budget still goes (alone) in one decode: a pooled sequence cannot
//! be split across decodes.
//!
//! The embedding context has a thread governor of its own (contract point
//! 14, `super::governor`, with the lane's thread policy): its decodes are
//! timed per token as prompt steps, with the decode thread's wait for a
//! CPU, so on a busy machine it moves to fewer threads as the generation
//! context does. Without it, llama.cpp's compute threads wait at their
//! barriers for descheduled partners, and an embedding that takes 0.6 ms
//! alone took 120-660 ms at p99 with other programs on both cores
//! (`examples/serve_overhead`, 100 requests/s). It has no overrun budget:
//! an embeddings decode has no abort callback, so a contended decode is
//! measured after it ends and the next one uses fewer threads.
//!
//! This module must not know about generation jobs, the harness or HTTP.

use super::backend_init::{backend, LOAD_LOCK};
use super::embedding::{normalise, EmbedJob, EmbeddingInfo, Embeddings};
use super::ffi::{AbortSignal, ThreadControl};
use super::governor::{Governor, StepFigure, StepKind};
use super::{LocalError, ThreadPolicy};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use std::collections::VecDeque;
use std::num::NonZeroU32;

/// Most inputs one decode holds (each its own sequence id; llama.cpp
/// allows 256).
const MAX_SEQS: usize = 64;

/// The worker's embeddings: its context (once made) and waiting requests.
pub(super) struct Embedder<'m> {
    model: &'m LlamaModel,
    info: EmbeddingInfo,
    threads: usize,
    governor: Governor,
    /// Whether the governor has had its start hint (the free cores).
    hinted: bool,
    state: State<'m>,
    queue: VecDeque<Pending>,
    /// The context's flash-attention policy (`attention`).
    flash_attention: llama_cpp_sys_2::llama_flash_attn_type,
}

enum State<'m> {
    /// No request has come yet.
    NotYet,
    /// The context, its batch, and the most tokens one decode holds.
    Ready {
        ctx: LlamaContext<'m>,
        batch: LlamaBatch<'static>,
        cap: usize,
        /// How to change the context's threads (`None`: it keeps the
        /// lane's count) and the count it has now.
        control: Option<ThreadControl>,
        applied: usize,
    },
    /// This model cannot embed: why.
    Refused(String),
}

/// A request being worked through.
struct Pending {
    job: EmbedJob,
    vectors: Vec<Vec<f32>>,
    failed: Option<LocalError>,
}

impl Pending {
    fn done(&self) -> bool {
        self.vectors.len() == self.job.tokens.len()
    }
}

impl<'m> Embedder<'m> {
    pub(super) fn new(
        model: &'m LlamaModel,
        info: EmbeddingInfo,
        threads: usize,
        policy: ThreadPolicy,
    ) -> Self {
        let threads = threads.max(1);
        Self {
            model,
            info,
            threads,
            governor: Governor::new(threads, policy),
            hinted: false,
            state: State::NotYet,
            queue: VecDeque::new(),
            flash_attention: llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_AUTO,
        }
    }

    /// The embeddings context's flash-attention policy (`attention`;
    /// llama.cpp's `auto` unless set).
    pub(super) fn with_flash_attention(
        mut self,
        policy: llama_cpp_sys_2::llama_flash_attn_type,
    ) -> Self {
        self.flash_attention = policy;
        self
    }

    /// Whether no request is waiting.
    pub(super) fn is_idle(&self) -> bool {
        self.queue.is_empty()
    }

    /// Takes a request; it is decoded on the following turns.
    pub(super) fn submit(&mut self, job: EmbedJob) {
        self.queue.push_back(Pending {
            vectors: Vec::with_capacity(job.tokens.len()),
            job,
            failed: None,
        });
    }

    /// One turn: one decode of waiting inputs, at most `budget` tokens
    /// (but at least one input), then every finished request is answered.
    /// `signal` is the decode thread's (its run-queue wait is read around
    /// the decode; the embeddings decode is not armed).
    pub(super) fn step(&mut self, budget: usize, signal: &AbortSignal) {
        // A request whose caller is gone is not worth a decode.
        self.queue.retain(|p| !p.job.reply.is_closed());
        if self.queue.is_empty() {
            return;
        }
        self.make_ready();
        match &mut self.state {
            State::Refused(why) => {
                for p in &mut self.queue {
                    p.failed = Some(LocalError::CannotEmbed {
                        detail: why.clone(),
                    });
                }
            }
            State::Ready {
                ctx,
                batch,
                cap,
                control,
                applied,
            } => {
                if !self.hinted {
                    self.hinted = true;
                    if let Some(free) = edgecloud_core::sched::free_cores() {
                        self.governor.start_on(free);
                    }
                }
                let threads = match control {
                    Some(control) => {
                        let wanted = self.governor.threads(StepKind::Prompt);
                        if wanted != *applied {
                            control.set(ctx, wanted);
                            *applied = wanted;
                        }
                        wanted
                    }
                    None => *applied,
                };
                let waited_before = signal.waited_ns();
                let started = std::time::Instant::now();
                let tokens = decode_turn(ctx, batch, *cap, budget, &mut self.queue);
                let took = started.elapsed().as_secs_f64();
                if tokens > 0 {
                    let waited = signal
                        .waited_ns()
                        .zip(waited_before)
                        .map_or(0, |(after, before)| after.saturating_sub(before));
                    self.governor.record(
                        StepKind::Prompt,
                        threads,
                        StepFigure {
                            cost: took / tokens as f64,
                            wait_share: (waited as f64 * 1e-9 / took).min(1.0),
                            overran: false,
                        },
                    );
                }
            }
            State::NotYet => unreachable!("make_ready leaves NotYet behind"),
        }
        self.answer();
    }

    /// After a panic in a turn: every waiting request fails, the context's
    /// memory is cleared.
    pub(super) fn reset(&mut self, detail: &str) {
        if let State::Ready { ctx, .. } = &mut self.state {
            ctx.clear_kv_cache();
        }
        for p in &mut self.queue {
            p.failed = Some(LocalError::Panicked {
                detail: detail.to_string(),
            });
        }
        self.answer();
    }

    /// Creates the embedding context the first time (or settles that
    /// there will be none).
    fn make_ready(&mut self) {
        if !matches!(self.state, State::NotYet) {
            return;
        }
        if let Some(LocalError::CannotEmbed { detail }) = self.info.refusal() {
            self.state = State::Refused(detail);
            return;
        }
        let tokens = self.info.max_input_tokens;
        let threads = i32::try_from(self.threads).unwrap_or(i32::MAX);
        let params = LlamaContextParams::default()
            .with_embeddings(true)
            .with_pooling_type(self.info.pooling.to_llama())
            .with_n_ctx(NonZeroU32::new(tokens))
            // One decode is one micro-batch: a pooled sequence must not be
            // split, and a non-causal model (BERT) needs it whole.
            .with_n_batch(tokens)
            .with_n_ubatch(tokens)
            .with_n_seq_max(MAX_SEQS as u32)
            .with_kv_unified(true)
            .with_n_threads(threads)
            .with_n_threads_batch(threads)
            .with_flash_attention_policy(self.flash_attention);
        let made = {
            let _guard = LOAD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            super::ffi::clear_recent_log();
            self.model.new_context(backend(), params).map_err(|err| {
                let said = super::ffi::take_recent_log();
                if said.is_empty() {
                    format!("llama.cpp refused an embeddings context: {err}")
                } else {
                    format!(
                        "llama.cpp refused an embeddings context: {err} ({})",
                        said.join("; ")
                    )
                }
            })
        };
        self.state = match made {
            Ok(ctx) => {
                // What llama.cpp made of the sizes (it never holds more
                // than one micro-batch per decode here).
                let cap = ctx.n_batch().min(ctx.n_ubatch()).min(tokens).max(1) as usize;
                State::Ready {
                    control: ThreadControl::of(&ctx),
                    applied: self.threads,
                    ctx,
                    batch: LlamaBatch::new(cap, 1),
                    cap,
                }
            }
            Err(why) => {
                tracing::warn!("{why}");
                State::Refused(why)
            }
        };
    }

    /// Replies to every failed or finished request; the others wait.
    fn answer(&mut self) {
        let pooling = self.info.pooling;
        let mut waiting = VecDeque::with_capacity(self.queue.len());
        for p in self.queue.drain(..) {
            if let Some(err) = p.failed {
                let _ = p.job.reply.send(Err(err));
            } else if p.done() {
                let input_tokens: Vec<u32> = p
                    .job
                    .tokens
                    .iter()
                    .map(|t| u32::try_from(t.len()).unwrap_or(u32::MAX))
                    .collect();
                let result = Embeddings {
                    prompt_tokens: input_tokens.iter().fold(0u32, |a, &b| a.saturating_add(b)),
                    input_tokens,
                    vectors: p.vectors,
                    pooling,
                };
                let _ = p.job.reply.send(Ok(result));
            } else {
                waiting.push_back(p);
            }
        }
        self.queue = waiting;
    }
}

/// One decode over the queue's next inputs; results and failures are
/// written into the requests. Returns the tokens decoded (0: no decode).
fn decode_turn(
    ctx: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'static>,
    cap: usize,
    budget: usize,
    queue: &mut VecDeque<Pending>,
) -> usize {
    // An input over what llama.cpp made room for (only when it made less
    // than asked) fails its request before anything is decoded.
    for p in queue.iter_mut() {
        if let Some((index, t)) = p.job.tokens.iter().enumerate().find(|(_, t)| t.len() > cap) {
            p.failed = Some(LocalError::EmbeddingTooLong {
                index,
                tokens: u32::try_from(t.len()).unwrap_or(u32::MAX),
                limit: cap as u32,
            });
        }
    }
    // Oldest first: (request, input) pairs, one sequence id each.
    let budget = budget.clamp(1, cap);
    let mut picked: Vec<(usize, usize)> = Vec::new();
    let mut used = 0;
    'fill: for (qi, p) in queue.iter().enumerate() {
        if p.failed.is_some() {
            continue;
        }
        for (ii, tokens) in p.job.tokens.iter().enumerate().skip(p.vectors.len()) {
            let fits = used + tokens.len() <= budget;
            if picked.len() == MAX_SEQS || (!picked.is_empty() && !fits) {
                break 'fill;
            }
            picked.push((qi, ii));
            used += tokens.len();
        }
    }
    if picked.is_empty() {
        return 0;
    }
    batch.clear();
    for (seq, &(qi, ii)) in picked.iter().enumerate() {
        for (pos, &token) in queue[qi].job.tokens[ii].iter().enumerate() {
            batch
                .add(token, pos as i32, &[seq as i32], true)
                .expect("the batch holds `cap` tokens and no more are packed");
        }
    }
    let decoded = ctx.decode(batch);
    if let Err(err) = decoded {
        ctx.clear_kv_cache();
        for &(qi, _) in &picked {
            queue[qi].failed.get_or_insert_with(|| LocalError::Decode {
                detail: format!("embeddings: {err}"),
            });
        }
        return 0;
    }
    for (seq, &(qi, ii)) in picked.iter().enumerate() {
        let p = &mut queue[qi];
        if p.failed.is_some() {
            continue;
        }
        match ctx.embeddings_seq_ith(seq as i32) {
            Ok(v) => {
                debug_assert_eq!(ii, p.vectors.len(), "inputs are packed in order");
                let mut v = v.to_vec();
                normalise(&mut v);
                p.vectors.push(v);
            }
            Err(_) => {
                p.failed = Some(LocalError::Decode {
                    detail: "llama.cpp gave no pooled embedding for an input".to_string(),
                });
            }
        }
    }
    // Every decode starts from empty memory: the inputs are unrelated.
    ctx.clear_kv_cache();
    usize::try_from(batch.n_tokens()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecloud_gguf::generate::{write_model, Preset};
    use llama_cpp_2::model::params::LlamaModelParams;
    use llama_cpp_2::token::LlamaToken;
    use tokio::sync::oneshot;

    /// Embeds one short input and returns the thread count the embeddings
    /// context was left with, after the governor was started on `free`
    /// cores (as a busy machine would start it).
    fn threads_after_one_embed(policy: ThreadPolicy, free: usize) -> usize {
        let dir = std::env::temp_dir().join(format!(
            "edgecloud-embed-threads-{}-{policy:?}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny.gguf");
        write_model(&path, Preset::Tiny, 7).unwrap();
        let model =
            LlamaModel::load_from_file(backend(), &path, &LlamaModelParams::default()).unwrap();
        let info = EmbeddingInfo::resolve(&model, None, 64);
        let mut embedder = Embedder::new(&model, info, 2, policy);
        embedder.governor.start_on(free);
        embedder.hinted = true;
        let (reply, mut rx) = oneshot::channel();
        embedder.submit(EmbedJob {
            tokens: vec![vec![LlamaToken(1), LlamaToken(2), LlamaToken(3)]],
            reply,
        });
        embedder.step(usize::MAX, &AbortSignal::default());
        let vectors = rx.try_recv().expect("answered in one turn").unwrap();
        assert_eq!(vectors.vectors.len(), 1);
        let threads = match &mut embedder.state {
            State::Ready {
                ctx,
                control: Some(control),
                ..
            } => control.get(ctx),
            _ => panic!("the embeddings context is made and its threads controllable"),
        };
        drop(embedder);
        drop(model);
        let _ = std::fs::remove_dir_all(&dir);
        threads
    }

    /// The embeddings context runs with its governor's thread count (one
    /// on a machine with one free core), not the lane's fixed count; with
    /// the fixed policy it keeps the lane's.
    #[test]
    fn embeddings_decode_with_the_governors_thread_count() {
        assert_eq!(threads_after_one_embed(ThreadPolicy::Adaptive, 1), 1);
        assert_eq!(threads_after_one_embed(ThreadPolicy::Fixed, 1), 2);
    }
}
