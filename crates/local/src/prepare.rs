//! Request preparation: a [`LaneJob`] becomes a [`Task`] the decode loop
//! (`batch`) can step, as llama-server's `server-task.cpp` builds a task
//! apart from the slots that run it (`server-context.cpp`).
//!
//! ```text
//!  LaneJob ──> prompt (chat template, or the model's Jinja for tools)
//!          ──> tokens (the model's tokenizer; it must fit a sequence)
//!          ──> samples (a consensus: at most the lane's max_samples)
//!          ──> grammar (response_format or tool call) ──> picker, stops
//!          = Task ──> batch (steps it)
//! ```
//!
//! Data flows one way, from here to the engine: this module owns what a
//! job's request becomes before its first decode step (and the picker and
//! stop matcher of each further sample of a consensus), and must not know
//! the batch, the sequences' KV cells, or how a step is decoded. It trusts
//! the request: its sampling was validated once, where the request came in
//! (`Request::validate`, called by the harness and by the lane's own
//! `submit`), and nothing here checks it again. What it does refuse is
//! what only this lane knows: a prompt too long for its sequence, more
//! samples than it has sequence ids for, a grammar llama.cpp cannot
//! compile, a template that cannot render the messages.

use super::generate::PromptFormat;
use super::pick::{GrammarPass, GrammarSpec, Picker};
use super::stop::StopMatcher;
use super::toolcall::{self, ToolJob};
use super::LocalError;
use edgecloud_core::lane::LaneJob;
use edgecloud_core::reasoning::{self, ThinkingStart};
use edgecloud_core::request::{ChatMessage, InvalidRequest, Sampling};
use edgecloud_core::structured::ResponseFormat;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

/// What preparing a job needs of the lane: its model, prompt format,
/// grammar pass and limits. Borrowed from the engine for one job.
pub(super) struct Preparer<'a, 'm> {
    pub(super) model: &'m LlamaModel,
    pub(super) format: &'a PromptFormat,
    pub(super) grammar_pass: GrammarPass,
    /// Tokens one sequence may hold (prompt and answer).
    pub(super) seq_context: usize,
    /// Most samples one job may ask for.
    pub(super) max_samples: usize,
}

/// A job ready to be stepped: its prompt's tokens and what its first
/// sample picks and stops with.
pub(super) struct Task {
    /// The prompt, tokenized: at least one token, fewer than a sequence
    /// holds.
    pub(super) tokens: Vec<LlamaToken>,
    /// What the job's tools mean here, when it has any.
    pub(super) tools: Option<ToolJob>,
    /// The grammar its answers are decoded under, if any (the further
    /// samples' pickers are built from it: [`sample_parts`]).
    pub(super) grammar: Option<GrammarSpec>,
    /// Samples the job asks for (1 without a consensus), at most the
    /// lane's `max_samples`.
    pub(super) samples: usize,
    /// The first sample's picker and stop strings.
    pub(super) picker: Picker,
    pub(super) stops: StopMatcher,
    /// Where the output's thinking stands (see
    /// `edgecloud_core::reasoning`): a raw prompt's output is never split.
    pub(super) thinking: ThinkingStart,
}

impl Preparer<'_, '_> {
    /// Renders, tokenizes and checks the job against the lane, and builds
    /// its first sample's picker. The first error wins, in that order.
    pub(super) fn task(&self, job: &LaneJob) -> Result<Task, LocalError> {
        let (prompt, tools) = self
            .format
            .render_job(self.model, &job.messages, &job.sampling)?;
        let tokens = self.model.vocab().tokenize(prompt.as_bytes(), true, true);
        if tokens.is_empty() || tokens.len() >= self.seq_context {
            return Err(LocalError::PromptTooLong {
                prompt_tokens: tokens.len() as u32,
                context_size: self.seq_context as u32,
            });
        }
        // More samples than the lane has sequence ids for is the
        // caller's mistake, told as such.
        let samples = job.sampling.consensus.map_or(1, |c| c.samples as usize);
        if samples > self.max_samples {
            return Err(LocalError::InvalidRequest(InvalidRequest::new(format!(
                "consensus.samples {samples} is more than this lane's max_samples \
                 {} (LocalConfig::max_samples)",
                self.max_samples
            ))));
        }
        // A `response_format` or a tool call adds llama.cpp's grammar
        // (greedy jobs too); one it cannot compile fails the job here.
        let grammar = grammar_for(&job.sampling, tools.as_ref())?;
        let (picker, stops) = sample_parts(
            self.model,
            self.grammar_pass,
            job,
            grammar.as_ref(),
            tools.as_ref(),
            0,
        )?;
        Ok(Task {
            thinking: if job.sampling.raw_prompt {
                ThinkingStart::Never
            } else if tools.is_none() && ChatMessage::split_prefill(&job.messages).is_some() {
                reasoning::continuing_start(&prompt)
            } else {
                ThinkingStart::of_prompt(&prompt)
            },
            tokens,
            tools,
            grammar,
            samples,
            picker,
            stops,
        })
    }
}

/// The picker and stop strings of sample `sample` of a job (0 for the
/// first or only one; see `Picker::new` for how samples differ).
pub(super) fn sample_parts(
    model: &LlamaModel,
    pass: GrammarPass,
    job: &LaneJob,
    grammar: Option<&GrammarSpec>,
    tools: Option<&ToolJob>,
    sample: u32,
) -> Result<(Picker, StopMatcher), LocalError> {
    let picker = Picker::new(model, &job.sampling, grammar, pass, sample)?;
    Ok((picker, stops_for(job, tools)))
}

/// A job's stop strings, holding back its model's tool-call markup from
/// the stream when it may call tools.
fn stops_for(job: &LaneJob, tools: Option<&ToolJob>) -> StopMatcher {
    let stops = StopMatcher::new(&job.sampling.stop);
    match tools.and_then(ToolJob::held_markers) {
        Some(held) => stops.holding(held),
        None => stops,
    }
}

/// The grammar a job's answer must follow, if any: its tool call's (see
/// `toolcall`), or llama.cpp's own translation of its `response_format`
/// schema (`json_object` is the
/// schema `{"type": "object"}`, any JSON object), so no grammar is written
/// by hand here.
fn grammar_for(
    sampling: &Sampling,
    tools: Option<&ToolJob>,
) -> Result<Option<GrammarSpec>, LocalError> {
    // A call's grammar takes precedence: with tools offered, an answer
    // without a call is validated against the `response_format` but not
    // decoded under it.
    if let Some(job) = tools.filter(|j| j.offered) {
        return toolcall::grammar(job, sampling);
    }
    let Some(format) = &sampling.response_format else {
        return Ok(None);
    };
    Ok(Some(GrammarSpec {
        text: grammar_text(format)?,
        root: "root".into(),
        triggers: None,
    }))
}

/// The GBNF text of a response format.
fn grammar_text(format: &ResponseFormat) -> Result<String, LocalError> {
    let schema = format.schema();
    // Named here: llama.cpp turns such a schema into GBNF, then its
    // grammar parser refuses it saying only "Grammar call returned null".
    if let Some(detail) = over_repetition(&schema, "") {
        return Err(LocalError::Grammar { detail });
    }
    llama_cpp_2::json_schema_to_grammar(&schema.to_string()).map_err(|e| LocalError::Grammar {
        detail: e.to_string(),
    })
}

/// Most repetitions llama.cpp's grammar parser takes (its
/// `MAX_REPETITION_THRESHOLD`).
const MAX_REPETITIONS: u64 = 2000;

/// The first `minLength` or `minItems` of `schema` (at JSON pointer
/// `at`) that asks for more repetitions than llama.cpp's grammar takes,
/// said as the client's mistake. (A larger `maxLength`/`maxItems` is no
/// error: llama.cpp leaves it unbounded.)
fn over_repetition(schema: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    match schema {
        Value::Object(map) => {
            for keyword in ["minLength", "minItems"] {
                if let Some(n) = map.get(keyword).and_then(Value::as_u64) {
                    if n > MAX_REPETITIONS {
                        let at = if at.is_empty() { "/" } else { at };
                        return Some(format!(
                            "`{keyword}` {n} at `{at}` asks for more than the {MAX_REPETITIONS} \
                             repetitions llama.cpp's grammar allows"
                        ));
                    }
                }
            }
            map.iter().find_map(|(k, v)| {
                over_repetition(
                    v,
                    &format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                )
            })
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| over_repetition(v, &format!("{at}/{i}"))),
        _ => None,
    }
}

#[cfg(test)]
mod schema_tests {
    use super::over_repetition;
    use serde_json::json;

    #[test]
    fn a_repetition_llama_cpp_refuses_is_named_with_its_place() {
        let said = over_repetition(&json!({"type": "string", "minLength": 100000}), "").unwrap();
        assert!(said.contains("`minLength` 100000 at `/`"), "{said}");
        let nested =
            json!({"type": "object", "properties": {"tags": {"type": "array", "minItems": 5000}}});
        let said = over_repetition(&nested, "").unwrap();
        assert!(
            said.contains("`minItems` 5000 at `/properties/tags`"),
            "{said}"
        );
        assert_eq!(
            over_repetition(
                &json!({"type": "string", "minLength": 2000, "maxLength": 90000}),
                ""
            ),
            None
        );
    }
}
