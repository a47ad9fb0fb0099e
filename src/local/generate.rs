//! One job on the worker's context: chat template, tokenize, reuse the
//! cached prefix, decode the rest of the prompt, then sample, stream and
//! watch for stops, cancellation and the deadline.

use super::ffi::AbortSignal;
use super::stop::{StopMatcher, StopState};
use super::template::{self, Origin};
use super::utf8::Utf8Stream;
use super::{signals, simd};
use super::{LocalCompletion, LocalError, LocalTimings, ProgressSink, PromptProgress};
use crate::lane::{FinishReason, LaneJob};
use crate::request::ChatMessage;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::DecodeError;
use std::time::{Duration, Instant};

/// llama_decode's return value when the abort callback stopped it.
const DECODE_ABORTED: i32 = 2;

/// How messages become a prompt.
pub(super) enum PromptFormat {
    /// A template llama.cpp recognises (the model's own, an override, or
    /// the convention of the model's architecture or vocabulary).
    Template {
        template: LlamaChatTemplate,
        origin: Origin,
    },
    /// Nothing names a template: ChatML, rendered by us.
    ChatMlFallback,
}

/// Reads a chat template llama.cpp may know, by name or full text.
fn template_from(text: &str) -> Result<LlamaChatTemplate, LocalError> {
    LlamaChatTemplate::new(text).map_err(|e| LocalError::ChatTemplate {
        detail: e.to_string(),
    })
}

impl PromptFormat {
    /// Picks the format and proves it works on a sample conversation, so an
    /// unknown template fails at start-up rather than on the first request.
    pub(super) fn resolve(
        model: &LlamaModel,
        configured: Option<&str>,
    ) -> Result<Self, LocalError> {
        let format = match configured {
            Some(text) => PromptFormat::Template {
                template: template_from(text)?,
                origin: Origin::Configured,
            },
            None => match model.chat_template(None) {
                Ok(template) => PromptFormat::Template {
                    template,
                    origin: Origin::Model,
                },
                Err(llama_cpp_2::ChatTemplateError::MissingTemplate) => conventional(model)?,
                Err(err) => {
                    return Err(LocalError::ChatTemplate {
                        detail: err.to_string(),
                    })
                }
            },
        };
        format.render(model, &[ChatMessage::system("s"), ChatMessage::user("u")])?;
        Ok(format)
    }

    pub(super) fn describe(&self) -> String {
        match self {
            PromptFormat::Template { origin, .. } => origin.describe(),
            PromptFormat::ChatMlFallback => Origin::Fallback.describe(),
        }
    }

    fn render(&self, model: &LlamaModel, messages: &[ChatMessage]) -> Result<String, LocalError> {
        match self {
            PromptFormat::Template { template, .. } => {
                let chat = messages
                    .iter()
                    .map(|m| LlamaChatMessage::new(m.role.as_str().to_owned(), m.content.clone()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| LocalError::ChatTemplate {
                        detail: format!("a message cannot be passed to llama.cpp: {e}"),
                    })?;
                model
                    .apply_chat_template(template, &chat, true)
                    .map_err(|e| LocalError::ChatTemplate {
                        detail: format!(
                            "llama.cpp does not recognise this chat template ({e}); set \
                             chat_template to a known name such as \"chatml\" or \"llama3\""
                        ),
                    })
            }
            PromptFormat::ChatMlFallback => {
                let mut prompt = String::new();
                for m in messages {
                    prompt.push_str("<|im_start|>");
                    prompt.push_str(m.role.as_str());
                    prompt.push('\n');
                    prompt.push_str(&m.content);
                    prompt.push_str("<|im_end|>\n");
                }
                prompt.push_str("<|im_start|>assistant\n");
                Ok(prompt)
            }
        }
    }
}

/// The format of a model without a template: its architecture's or its
/// vocabulary's convention, else ChatML (see the `template` module).
fn conventional(model: &LlamaModel) -> Result<PromptFormat, LocalError> {
    let architecture = model
        .meta_val_str("general.architecture")
        .unwrap_or_default();
    let origin = match template::for_architecture(&architecture) {
        Some(name) => Some(Origin::Architecture(name)),
        None if architecture == "llama" => {
            let vocab = model.vocab();
            template::for_llama_vocabulary(|text| {
                match vocab.tokenize(text.as_bytes(), false, true).as_slice() {
                    [token] => vocab.is_control(*token),
                    _ => false,
                }
            })
            .map(Origin::Vocabulary)
        }
        None => None,
    };
    Ok(match origin {
        Some(origin @ (Origin::Architecture(name) | Origin::Vocabulary(name))) => {
            PromptFormat::Template {
                template: template_from(name)?,
                origin,
            }
        }
        _ => PromptFormat::ChatMlFallback,
    })
}

/// The worker's long-lived state: the context and what its KV cache holds.
pub(super) struct Session<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    format: PromptFormat,
    /// Tokens whose keys and values are in the cache, at positions 0..len.
    cached: Vec<LlamaToken>,
    batch: LlamaBatch<'static>,
    batch_size: usize,
    /// Set when the abort callback stopped a decode during the current job.
    aborted_in_decode: bool,
}

/// Where a job stands when it stops early.
enum Interrupted {
    Stopped(FinishReason),
    Failed(LocalError),
}

impl From<LocalError> for Interrupted {
    fn from(e: LocalError) -> Self {
        Interrupted::Failed(e)
    }
}

impl<'m> Session<'m> {
    pub(super) fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        format: PromptFormat,
        batch_size: u32,
    ) -> Self {
        let batch_size = batch_size.max(1) as usize;
        Self {
            model,
            ctx,
            format,
            cached: Vec::new(),
            batch: LlamaBatch::new(batch_size, 1),
            batch_size,
            aborted_in_decode: false,
        }
    }

    /// Forgets the cache (after a panic the cache may not match `cached`).
    pub(super) fn reset(&mut self) {
        self.ctx.clear_kv_cache();
        self.cached.clear();
    }

    pub(super) fn run(
        &mut self,
        job: &mut LaneJob,
        mut progress: Option<&mut ProgressSink>,
        submitted_at: Instant,
        signal: &AbortSignal,
    ) -> Result<LocalCompletion, LocalError> {
        let started = Instant::now();
        self.aborted_in_decode = false;
        job.sampling.validate()?;
        let prompt = self.format.render(self.model, &job.messages)?;
        let tokens = self.model.vocab().tokenize(prompt.as_bytes(), true, true);
        let context_size = self.ctx.n_ctx();
        if tokens.is_empty() || tokens.len() >= context_size as usize {
            return Err(LocalError::PromptTooLong {
                prompt_tokens: tokens.len() as u32,
                context_size,
            });
        }
        let mut out = Progress::new(job, submitted_at, started, tokens.len());
        if let Some(reason) = job.stop_reason() {
            return Ok(out.finish(reason, StopMatcher::new(&[]), job, self.aborted_in_decode));
        }
        signal.arm(job.cancel.clone(), job.deadline);
        let reused = self.reuse_prefix(&tokens);
        out.reused = reused;
        let prompt_started = Instant::now();
        let prompt = self.decode_prompt(&tokens, job, &mut progress);
        out.prompt_eval = prompt_started.elapsed();
        out.prompt_decoded = self.cached.len().saturating_sub(reused);
        match prompt {
            Ok(()) => {}
            Err(Interrupted::Stopped(reason)) => {
                return Ok(out.finish(reason, StopMatcher::new(&[]), job, self.aborted_in_decode));
            }
            Err(Interrupted::Failed(e)) => return Err(e),
        }
        if let Some(report) = progress.as_mut() {
            report(PromptProgress {
                done: tokens.len() as u32,
                total: tokens.len() as u32,
            });
        }
        let (reason, stops) = self.sample_loop(job, &mut out)?;
        Ok(out.finish(reason, stops, job, self.aborted_in_decode))
    }

    /// Keeps the longest common prefix of the cache and `tokens` (leaving at
    /// least one token to decode, for fresh logits) and drops the rest of
    /// the cache. Returns how many prompt tokens are reused.
    fn reuse_prefix(&mut self, tokens: &[LlamaToken]) -> usize {
        let common = self
            .cached
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len() - 1);
        if common < self.cached.len()
            && self
                .ctx
                .kv_cache_seq_rm(0, Some(common as u32), None)
                .is_err()
        {
            // Some memories (recurrent models) cannot drop a tail.
            self.reset();
            return 0;
        }
        self.cached.truncate(common);
        common
    }

    /// Decodes the prompt tokens that follow the cached ones, in batches.
    fn decode_prompt(
        &mut self,
        tokens: &[LlamaToken],
        job: &LaneJob,
        progress: &mut Option<&mut ProgressSink>,
    ) -> Result<(), Interrupted> {
        let chunks = tokens[self.cached.len()..].chunks(self.batch_size);
        let last_chunk = chunks.len().saturating_sub(1);
        for (i, chunk) in chunks.enumerate() {
            if let Some(reason) = job.stop_reason() {
                return Err(Interrupted::Stopped(reason));
            }
            if let Some(report) = progress.as_mut() {
                report(PromptProgress {
                    done: self.cached.len() as u32,
                    total: tokens.len() as u32,
                });
            }
            self.batch.clear();
            let base = self.cached.len();
            for (j, &token) in chunk.iter().enumerate() {
                let wants_logits = i == last_chunk && j == chunk.len() - 1;
                self.batch
                    .add(token, (base + j) as i32, &[0], wants_logits)
                    .expect("a chunk never exceeds the batch it was sized for");
            }
            self.decode_batch(job)?;
            self.cached.extend_from_slice(chunk);
        }
        Ok(())
    }

    /// Runs `llama_decode` on the current batch. On failure the cache is cut
    /// back to `cached`, so it stays consistent for the next job.
    fn decode_batch(&mut self, job: &LaneJob) -> Result<(), Interrupted> {
        match self.ctx.decode(&mut self.batch) {
            Ok(()) => Ok(()),
            Err(err) => {
                if self
                    .ctx
                    .kv_cache_seq_rm(0, Some(self.cached.len() as u32), None)
                    .is_err()
                {
                    self.reset();
                }
                match (err, job.stop_reason()) {
                    (DecodeError::Unknown(DECODE_ABORTED), Some(reason)) => {
                        self.aborted_in_decode = true;
                        Err(Interrupted::Stopped(reason))
                    }
                    (err, _) => Err(Interrupted::Failed(LocalError::Decode {
                        detail: err.to_string(),
                    })),
                }
            }
        }
    }

    fn sample_loop(
        &mut self,
        job: &mut LaneJob,
        out: &mut Progress,
    ) -> Result<(FinishReason, StopMatcher), LocalError> {
        let sampling = &job.sampling;
        // Greedy picks the first largest logit, which the signals pass
        // finds anyway: llama.cpp's sampler (a copy of the whole vocabulary
        // per token) only runs when sampling is random.
        let mut sampler = (sampling.temperature > 0.0).then(|| build_sampler(sampling));
        let mut stops = StopMatcher::new(&sampling.stop);
        let mut utf8 = Utf8Stream::default();
        let mut piece_bytes = Vec::with_capacity(32);
        let mut piece_text = String::new();
        let vocab = self.model.vocab();
        let context_size = self.ctx.n_ctx() as usize;
        let mut logits_index = self.batch.n_tokens() - 1;
        let max_tokens = sampling.max_tokens;
        loop {
            if let Some(reason) = job.stop_reason() {
                return Ok((reason, stops));
            }
            let logits = self.ctx.get_logits_ith(logits_index);
            let pass = simd::scan(logits);
            let token = match sampler.as_mut() {
                None => LlamaToken(pass.argmax as i32),
                Some(sampler) => sampler.sample(&self.ctx, logits_index),
            };
            out.token_sampled(signals::from_pass(logits, &pass, token.0 as usize));
            if vocab.is_eog(token) {
                return Ok((FinishReason::Stop, stops));
            }
            piece_bytes.clear();
            vocab.token_to_piece_into(token, &mut piece_bytes, false, None);
            piece_text.clear();
            utf8.push(&piece_bytes, &mut piece_text);
            let state = stops.push(&piece_text);
            emit(job, stops.releasable());
            if state == StopState::Stopped {
                return Ok((FinishReason::Stop, stops));
            }
            if out.completion_tokens >= max_tokens as usize || self.cached.len() + 1 >= context_size
            {
                piece_text.clear();
                utf8.finish(&mut piece_text);
                stops.push(&piece_text);
                return Ok((FinishReason::Length, stops));
            }
            self.batch.clear();
            self.batch
                .add(token, self.cached.len() as i32, &[0], true)
                .expect("a batch holds at least one token");
            match self.decode_batch(job) {
                Ok(()) => self.cached.push(token),
                Err(Interrupted::Stopped(reason)) => return Ok((reason, stops)),
                Err(Interrupted::Failed(e)) => return Err(e),
            }
            logits_index = 0;
        }
    }
}

fn emit(job: &mut LaneJob, text: &str) {
    if text.is_empty() {
        return;
    }
    if let Some(sink) = job.on_token.as_mut() {
        sink(text);
    }
}

fn build_sampler(sampling: &crate::request::Sampling) -> LlamaSampler {
    if sampling.temperature <= 0.0 {
        return LlamaSampler::greedy();
    }
    let seed = sampling.seed.map_or_else(
        || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        },
        |s| (s ^ (s >> 32)) as u32,
    );
    let mut chain = Vec::with_capacity(4);
    if sampling.top_k > 0 {
        chain.push(LlamaSampler::top_k(
            sampling.top_k.min(i32::MAX as u32) as i32
        ));
    }
    if sampling.top_p < 1.0 {
        chain.push(LlamaSampler::top_p(sampling.top_p, 1));
    }
    chain.push(LlamaSampler::temp(sampling.temperature));
    chain.push(LlamaSampler::dist(seed));
    LlamaSampler::chain_simple(chain)
}

/// Counters and clocks of one job.
struct Progress {
    submitted_at: Instant,
    started: Instant,
    prompt_tokens: usize,
    reused: usize,
    prompt_decoded: usize,
    prompt_eval: Duration,
    first_token_at: Option<Instant>,
    completion_tokens: usize,
    logprobs: Vec<f32>,
    first_token_margin: Option<f32>,
}

impl Progress {
    fn new(job: &LaneJob, submitted_at: Instant, started: Instant, prompt_tokens: usize) -> Self {
        Self {
            submitted_at,
            started,
            prompt_tokens,
            reused: 0,
            prompt_decoded: 0,
            prompt_eval: Duration::ZERO,
            first_token_at: None,
            completion_tokens: 0,
            logprobs: Vec::with_capacity(job.sampling.max_tokens.min(4096) as usize),
            first_token_margin: None,
        }
    }

    fn token_sampled(&mut self, scan: signals::TokenScan) {
        self.first_token_at.get_or_insert_with(Instant::now);
        self.first_token_margin.get_or_insert(scan.margin);
        self.completion_tokens += 1;
        self.logprobs.push(scan.logprob);
    }

    fn finish(
        self,
        reason: FinishReason,
        mut stops: StopMatcher,
        job: &mut LaneJob,
        aborted_in_decode: bool,
    ) -> LocalCompletion {
        emit(job, stops.release_rest());
        let now = Instant::now();
        let generation = self.first_token_at.map_or(Duration::ZERO, |t| now - t);
        let per_s = |n: usize, d: Duration| {
            (n > 0 && d > Duration::ZERO).then(|| n as f64 / d.as_secs_f64())
        };
        let (mean, min) = if self.logprobs.is_empty() {
            (None, None)
        } else {
            let sum: f64 = self.logprobs.iter().map(|&l| f64::from(l)).sum();
            (
                Some((sum / self.logprobs.len() as f64) as f32),
                self.logprobs.iter().copied().reduce(f32::min),
            )
        };
        LocalCompletion {
            text: stops.into_text(),
            finish_reason: reason,
            prompt_tokens: self.prompt_tokens as u32,
            reused_prompt_tokens: self.reused as u32,
            completion_tokens: self.completion_tokens as u32,
            mean_logprob: mean,
            min_logprob: min,
            p10_logprob: signals::low_quantile(&self.logprobs, 0.1),
            first_token_margin: self.first_token_margin,
            token_logprobs: self.logprobs,
            aborted_in_decode,
            timings: LocalTimings {
                queued: self.started - self.submitted_at,
                prompt_eval: self.prompt_eval,
                prompt_tokens_per_s: per_s(self.prompt_decoded, self.prompt_eval),
                ttft: self.first_token_at.map(|t| t - self.submitted_at),
                generation,
                gen_tokens_per_s: per_s(self.completion_tokens.saturating_sub(1), generation),
                total: now - self.submitted_at,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::simd;
    use llama_cpp_2::sampling::LlamaSampler;
    use llama_cpp_2::token::data::LlamaTokenData;
    use llama_cpp_2::token::data_array::LlamaTokenDataArray;
    use llama_cpp_2::token::LlamaToken;

    /// The lane's own greedy choice (the first largest logit) is the one
    /// llama.cpp's greedy sampler makes, ties included.
    #[test]
    fn greedy_picks_what_llama_cpp_greedy_picks() {
        let mut x = 99u64;
        for case in 0..50 {
            let n = 1000 + case * 37;
            let mut logits: Vec<f32> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Few distinct values: ties for the maximum are common.
                    (x % 40) as f32 / 4.0
                })
                .collect();
            if case % 5 == 0 {
                logits[n - 1] = 100.0;
            }
            let mut data = LlamaTokenDataArray::from_iter(
                logits
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)),
                false,
            );
            data.apply_sampler(&mut LlamaSampler::greedy());
            let theirs = data.selected_token().expect("greedy selects a token");
            assert_eq!(
                LlamaToken(simd::scan(&logits).argmax as i32),
                theirs,
                "case {case}"
            );
        }
    }
}
