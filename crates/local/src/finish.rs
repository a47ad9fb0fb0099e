//! What a job becomes when it ends: its answer from its branches (a lone
//! answer as it is, or a consensus's samples voted on), the tool calls
//! parsed out of its text, and the answer checked against what the request
//! asked for when a grammar constrained it.
//!
//! The decode loop (`batch`) hands its ended branches here and sends what
//! comes back; this module must not know the batch, the KV cells or the
//! sampler, and it only reads the request (its sampling was validated
//! where the request came in).

use super::generate::{emit, emit_end, Progress};
use super::pick::GrammarPass;
use super::stop::StopMatcher;
use super::toolcall::{self, CallStyle, ToolJob};
use super::{LocalCompletion, LocalError, LocalSample};
use edgecloud_core::lane::{FinishReason, LaneJob};
use edgecloud_core::reasoning::ReasoningSplitter;
use edgecloud_core::request::Sampling;

/// One branch of a job as it ended: its counters, its text (in its stop
/// matcher) and why it ended, if it did before the job.
pub(super) struct Ended {
    pub(super) out: Progress,
    pub(super) stops: StopMatcher,
    /// The stream's thinking/answer split (what it still holds goes out
    /// at the end).
    pub(super) think: ReasoningSplitter,
    pub(super) ended: Option<FinishReason>,
}

/// A whole answer split into its text and its tool calls, then checked:
/// under a grammar it is valid unless it was cut short, and a stop
/// string cutting it is a typed error, never a malformed answer passed
/// on as good. An answer cut by its length (`max_tokens`, the context)
/// is the model's answer as far as it went, as OpenAI returns it (200,
/// `finish_reason: "length"`): a call cut short keeps its name and its
/// partial arguments, a schema answer its partial JSON; the caller sees
/// the finish reason (the harness judges it, and returns it when no lane
/// has a whole answer). A cancelled or late job keeps its partial text (the
/// harness does not accept it as an answer anyway).
pub(super) fn answer(
    c: LocalCompletion,
    sampling: &Sampling,
    tools: Option<&ToolJob>,
    grammar_pass: GrammarPass,
) -> Result<LocalCompletion, LocalError> {
    if !c.finish_reason.is_complete() {
        return Ok(c);
    }
    // Without a grammar (`GrammarPass::Off`) the answer is handed back as
    // the model wrote it, calls parsed where they parse: judging it is the
    // caller's (the harness rejects an invalid answer as it would a
    // cloud's).
    let unconstrained = grammar_pass == GrammarPass::Off;
    let cut = c.finish_reason == FinishReason::Length;
    let c = match tools.filter(|t| t.offered) {
        Some(t) if unconstrained => with_tool_calls(c.clone(), t.style).unwrap_or(c),
        Some(t) if cut => with_tool_calls(c.clone(), t.style).unwrap_or_else(|_| {
            match toolcall::parse_cut(t.style, &c.text) {
                Some((content, calls)) => LocalCompletion {
                    text: content,
                    tool_calls: calls,
                    ..c
                },
                None => c,
            }
        }),
        Some(t) => with_tool_calls(c, t.style)?,
        None => c,
    };
    if sampling.constrains_answer() && !unconstrained && !cut {
        sampling.check_answer(&c.text, &c.tool_calls)?;
    }
    Ok(c)
}

/// The job's completion from its ended branches: a lone answer as it is; for a
/// consensus, every sample's text voted on, the first sample giving the
/// majority answer as the answer, emitted whole to the job's sink.
pub(super) fn completion(
    job: &mut LaneJob,
    branches: Vec<Ended>,
    samples: usize,
    reason: FinishReason,
    aborted_in_decode: bool,
) -> LocalCompletion {
    if samples == 1 {
        let br = branches
            .into_iter()
            .next()
            .expect("a job has its first branch from the start");
        let mut stops = br.stops;
        let mut think = br.think;
        emit(job, &mut think, stops.release_rest());
        emit_end(job, &mut think);
        let reason = br.ended.unwrap_or(reason);
        let matched = stops.matched().map(str::to_string);
        let mut c = br.out.finish(reason, stops.into_text(), aborted_in_decode);
        c.stop_sequence = matched;
        return c;
    }
    let kind = job.sampling.consensus.map(|c| c.answer).unwrap_or_default();
    // A job stopped before its prompt was decoded has one branch.
    let finished: Vec<(Progress, String, FinishReason)> = branches
        .into_iter()
        .map(|br| {
            let reason = br.ended.unwrap_or(reason);
            (br.out, br.stops.into_text(), reason)
        })
        .collect();
    // The samples vote on their answers, a reasoning model's thinking
    // left out.
    let answers: Vec<String> = finished.iter().map(|(p, t, _)| p.split(t).answer).collect();
    let texts: Vec<&str> = answers.iter().map(String::as_str).collect();
    let vote = edgecloud_core::answer::majority(kind, &texts);
    let sampled: usize = finished.iter().map(|(p, _, _)| p.completion_tokens).sum();
    let sample_list: Vec<LocalSample> = finished
        .iter()
        .zip(&answers)
        .map(|((p, _, r), text)| LocalSample {
            text: text.clone(),
            finish_reason: *r,
            completion_tokens: p.completion_tokens as u32,
            mean_logprob: p.mean_logprob(),
            answer: kind.extract(text),
        })
        .collect();
    let (out, text, reason) = finished
        .into_iter()
        .nth(vote.chosen)
        .expect("the chosen sample is one of them");
    let mut think = out.stream_splitter();
    emit(job, &mut think, &text);
    emit_end(job, &mut think);
    let mut c = out.finish(reason, text, aborted_in_decode);
    c.agreement = Some(vote.share() as f32);
    c.samples = sample_list;
    c.sampled_tokens = sampled as u32;
    // Generation speed of the job: every sample's tokens after its first,
    // over the time the samples took together.
    let n = c.samples.len();
    let took = c.timings.generation.as_secs_f64();
    c.timings.gen_tokens_per_s = (sampled > n && took > 0.0).then(|| (sampled - n) as f64 / took);
    c
}

/// The completion with its tool calls parsed out of its text.
fn with_tool_calls(
    mut c: LocalCompletion,
    style: CallStyle,
) -> Result<LocalCompletion, LocalError> {
    let (content, calls) = toolcall::parse(style, &c.text)?;
    c.text = content;
    c.tool_calls = calls;
    Ok(c)
}
