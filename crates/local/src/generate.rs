//! What one job needs besides the decode loop (`batch`) and its
//! preparation (`prepare`): how messages become a prompt (the lane's
//! [`PromptFormat`], resolved at start-up), streaming text to the job's
//! sink, and the job's counters and clocks that become its
//! [`LocalCompletion`].

use super::signals;
use super::template::{self, Origin};
use super::toolcall::{self, ToolJob, ToolTemplate};
use super::{LocalCompletion, LocalError, LocalTimings, ThreadSteps};
use edgecloud_core::lane::{FinishReason, LaneJob, TokenLogprob};
use edgecloud_core::reasoning::{self, ReasoningSplitter, ThinkingStart};
use edgecloud_core::request::ChatMessage;
use edgecloud_core::request::Sampling;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use std::time::{Duration, Instant};

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

    /// The template's Jinja text, when it is one (a model's own template
    /// or a configured full text; not a name llama.cpp knows).
    pub(super) fn jinja_text(&self) -> Option<&str> {
        match self {
            PromptFormat::Template { template, .. } => template
                .to_str()
                .ok()
                .filter(|t| t.contains("{%") || t.contains("{{")),
            PromptFormat::ChatMlFallback => None,
        }
    }

    /// A job's prompt, and what its tools mean on this lane when it has
    /// tools or tool messages (then the model's own Jinja template renders
    /// it, see `toolcall`); other jobs render as they always have. A raw
    /// prompt (`Sampling::raw_prompt`, validated to be one user message
    /// without tools) is the prompt as written: no template at all. A
    /// conversation ending with an unfinished assistant turn
    /// ([`ChatMessage::split_prefill`]) is rendered up to the answer's
    /// start and the turn's text follows, open, as llama-server's
    /// `--prefill-assistant` does (the harness's switch of lanes mid-answer
    /// relies on it).
    pub(super) fn render_job(
        &self,
        model: &LlamaModel,
        messages: &[ChatMessage],
        sampling: &Sampling,
    ) -> Result<(String, Option<ToolJob>), LocalError> {
        if sampling.raw_prompt {
            let text = messages.iter().map(|m| m.content.as_str()).collect();
            return Ok((text, None));
        }
        let tools = ToolTemplate::detect(self.jinja_text());
        let Some(job) = ToolJob::of(tools, sampling, messages) else {
            // An unfinished assistant turn at the end is continued.
            return Ok(match ChatMessage::split_prefill(messages) {
                Some((head, prefill)) => {
                    let prompt = self.render(model, head)?;
                    (reasoning::continue_prompt(&prompt, prefill), None)
                }
                None => (self.render(model, messages)?, None),
            });
        };
        let eos = eos_text(model);
        let prompt = match toolcall::render(tools, self.jinja_text(), messages, sampling, &eos)? {
            Ok(text) => text,
            Err(generic) => self.render(model, &generic)?,
        };
        Ok((prompt, Some(job)))
    }

    pub(super) fn describe(&self) -> String {
        match self {
            PromptFormat::Template { origin, .. } => origin.describe(),
            PromptFormat::ChatMlFallback => Origin::Fallback.describe(),
        }
    }

    /// A conversation without tools as a prompt: through the template's
    /// Jinja text when it has one, as Hugging Face and llama-server render
    /// it (so a template's default system message is there when the
    /// conversation has none: SmolLM2's and Qwen2.5's answers are then the
    /// ones llama-server gives); else, or when the Jinja text cannot
    /// render it, through llama.cpp's template matcher (which recognises a
    /// template by its text and writes its roles, not its defaults).
    pub(super) fn render(
        &self,
        model: &LlamaModel,
        messages: &[ChatMessage],
    ) -> Result<String, LocalError> {
        if let Some(text) = self.jinja_text() {
            match toolcall::render_jinja(text, messages, &[], &eos_text(model)) {
                Ok(prompt) => return Ok(prompt),
                Err(detail) => tracing::debug!(
                    target: "edgecloud_core::local",
                    %detail,
                    "the chat template's Jinja could not render this conversation; \
                     llama.cpp's template matcher renders it"
                ),
            }
        }
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

/// The model's end-of-sequence token as text (templates write it).
fn eos_text(model: &LlamaModel) -> String {
    let mut piece = Vec::new();
    let vocab = model.vocab();
    vocab.token_to_piece_into(vocab.eos(), &mut piece, true, None);
    String::from_utf8_lossy(&piece).into_owned()
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

/// Streams released text to the job's sinks, a reasoning model's
/// thinking apart from its answer (`think` holds back what could still be
/// a tag).
pub(super) fn emit(job: &mut LaneJob, think: &mut ReasoningSplitter, text: &str) {
    if !text.is_empty() {
        think.push(text, &mut |part| job.emit(part));
    }
}

/// Streams what `think` still holds, at the end of the text.
pub(super) fn emit_end(job: &mut LaneJob, think: &mut ReasoningSplitter) {
    think.finish(&mut |part| job.emit(part));
}

/// Counters and clocks of one job (of one sample of a consensus job).
#[derive(Clone)]
pub(super) struct Progress {
    submitted_at: Instant,
    started: Instant,
    prompt_tokens: usize,
    pub(super) reused: usize,
    pub(super) prompt_decoded: usize,
    pub(super) prompt_eval: Duration,
    first_token_at: Option<Instant>,
    pub(super) completion_tokens: usize,
    logprobs: Vec<f32>,
    first_token_margin: Option<f32>,
    /// The latest token's margin (the first answer token's becomes
    /// `first_token_margin` once a reasoning model's answer begins).
    last_margin: f32,
    /// Where the output's thinking stands before its first token.
    thinking_start: ThinkingStart,
    /// The sampled text read token by token: where the thinking ends.
    think: ReasoningSplitter,
    /// The first token of the answer, once known (after a reasoning
    /// model's thinking; 0 otherwise): the signals judge the answer alone.
    answer_from: Option<usize>,
    /// Per-token detail, when the job asked for log-probabilities.
    pub(super) detail: Option<Vec<TokenLogprob>>,
    decode_threads: Vec<ThreadSteps>,
    /// Drafts verified, and those kept (speculative decoding).
    drafted: usize,
    accepted: usize,
    /// The prompt tokens' log-probabilities summed, and how many, when
    /// the job scores its prompt.
    prompt_score: Option<(f64, usize)>,
}

impl Progress {
    pub(super) fn new(
        job: &LaneJob,
        submitted_at: Instant,
        started: Instant,
        prompt_tokens: usize,
        thinking_start: ThinkingStart,
    ) -> Self {
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
            last_margin: 0.0,
            thinking_start,
            think: ReasoningSplitter::new(thinking_start),
            answer_from: None,
            detail: job.sampling.logprobs.map(|_| Vec::new()),
            decode_threads: Vec::new(),
            drafted: 0,
            accepted: 0,
            prompt_score: job.sampling.score_prompt.then_some((0.0, 0)),
        }
    }

    /// Counts one prompt token's log-probability (a job scoring its prompt).
    pub(super) fn prompt_token_scored(&mut self, logprob: f32) {
        if let Some((sum, n)) = self.prompt_score.as_mut() {
            *sum += f64::from(logprob);
            *n += 1;
        }
    }

    /// The mean log-probability of the prompt tokens scored so far (a job
    /// scoring its prompt, once it has scored one).
    pub(super) fn prompt_logprob(&self) -> Option<f32> {
        self.prompt_score
            .filter(|&(_, n)| n > 0)
            .map(|(sum, n)| (sum / n as f64) as f32)
    }

    /// Counts one verified proposal: `drafted` drafts, `accepted` kept.
    pub(super) fn drafts_verified(&mut self, drafted: usize, accepted: usize) {
        self.drafted += drafted;
        self.accepted += accepted;
    }

    /// Counts one decode step of this job that used `threads` threads.
    pub(super) fn decoded_with(&mut self, threads: usize) {
        match self
            .decode_threads
            .binary_search_by_key(&threads, |t| t.threads)
        {
            Ok(i) => self.decode_threads[i].steps += 1,
            Err(i) => self
                .decode_threads
                .insert(i, ThreadSteps { threads, steps: 1 }),
        }
    }

    pub(super) fn token_sampled(&mut self, scan: signals::TokenScan) {
        self.first_token_at.get_or_insert_with(Instant::now);
        if !self.think.thought() {
            self.first_token_margin.get_or_insert(scan.margin);
        }
        self.last_margin = scan.margin;
        self.completion_tokens += 1;
        self.logprobs.push(scan.logprob);
    }

    /// Reads the text of the token just sampled: where a reasoning
    /// model's answer begins.
    pub(super) fn token_text(&mut self, text: &str) {
        if self.answer_from.is_some() {
            return;
        }
        self.think.push(text, &mut |_| {});
        if self.think.answered() {
            let this = self.completion_tokens - 1;
            if self.think.thought() {
                self.first_token_margin = Some(self.last_margin);
                self.answer_from = Some(this);
            } else {
                self.answer_from = Some(0);
            }
        }
    }

    /// Whether the model is thinking (its tokens are not the answer's:
    /// the cascade's early look at confidence skips them).
    pub(super) fn thinking(&self) -> bool {
        self.think.thought() && self.answer_from.is_none()
    }

    /// A whole text of this job split into thinking and answer.
    pub(super) fn split(&self, text: &str) -> reasoning::Split {
        reasoning::split(text, self.thinking_start)
    }

    /// A splitter for streaming this job's text (see `emit`).
    pub(super) fn stream_splitter(&self) -> ReasoningSplitter {
        ReasoningSplitter::new(self.thinking_start)
    }

    /// The answer's tokens' log-probabilities (all of them without
    /// thinking; none while the answer has not begun).
    fn answer_logprobs(&self) -> &[f32] {
        let from = match self.answer_from {
            Some(i) => i,
            None if self.think.thought() => self.logprobs.len(),
            None => 0,
        };
        &self.logprobs[from.min(self.logprobs.len())..]
    }

    /// The mean log-probability of the answer's tokens sampled so far.
    pub(super) fn mean_logprob(&self) -> Option<f32> {
        let answer = self.answer_logprobs();
        (!answer.is_empty()).then(|| {
            (answer.iter().map(|&l| f64::from(l)).sum::<f64>() / answer.len() as f64) as f32
        })
    }

    /// The completion of a job that ended with `text` (its stop string
    /// cut off; the caller has streamed it): a reasoning model's thinking
    /// split from its answer (see `edgecloud_core::reasoning`), and the
    /// signals read over the answer's tokens alone.
    pub(super) fn finish(
        self,
        reason: FinishReason,
        text: String,
        aborted_in_decode: bool,
    ) -> LocalCompletion {
        let split = self.split(&text);
        let text = split.answer;
        let reasoning_tokens = split
            .reasoning
            .is_some()
            .then(|| (self.logprobs.len() - self.answer_logprobs().len()) as u32);
        let now = Instant::now();
        let generation = self.first_token_at.map_or(Duration::ZERO, |t| now - t);
        let per_s = |n: usize, d: Duration| {
            (n > 0 && d > Duration::ZERO).then(|| n as f64 / d.as_secs_f64())
        };
        let mean = self.mean_logprob();
        let answer = self.answer_logprobs();
        let min = answer.iter().copied().reduce(f32::min);
        let p10 = signals::low_quantile(answer, 0.1);
        let token_logprobs = answer.to_vec();
        let first_token_margin = (!answer.is_empty())
            .then_some(self.first_token_margin)
            .flatten();
        LocalCompletion {
            text,
            reasoning: split.reasoning,
            reasoning_tokens,
            finish_reason: reason,
            prompt_tokens: self.prompt_tokens as u32,
            reused_prompt_tokens: self.reused as u32,
            completion_tokens: self.completion_tokens as u32,
            mean_logprob: mean,
            min_logprob: min,
            p10_logprob: p10,
            first_token_margin,
            prompt_logprob: self.prompt_logprob(),
            token_logprobs,
            tool_calls: Vec::new(),
            stop_sequence: None,
            logprobs: self.detail,
            samples: Vec::new(),
            agreement: None,
            sampled_tokens: self.completion_tokens as u32,
            aborted_in_decode,
            timings: LocalTimings {
                queued: self.started - self.submitted_at,
                prompt_eval: self.prompt_eval,
                prompt_tokens_per_s: per_s(self.prompt_decoded, self.prompt_eval),
                ttft: self.first_token_at.map(|t| t - self.submitted_at),
                generation,
                gen_tokens_per_s: per_s(self.completion_tokens.saturating_sub(1), generation),
                total: now - self.submitted_at,
                decode_threads: self.decode_threads,
                draft_n: self.drafted as u32,
                draft_n_accepted: self.accepted as u32,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::simd;
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
