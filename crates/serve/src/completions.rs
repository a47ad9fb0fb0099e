//! `POST /v1/completions`, the legacy text completion, as a response:
//! the whole `text_completion` body and the stream's [`Shape`] (a
//! `text_completion` chunk per piece, then the finish chunk with the
//! outcome summary, the usage chunk when asked for, `data: [DONE]`). The
//! request is read by `wire` (a raw prompt, one user message) and runs
//! like a chat request (`http`); only the answer's shape is here. It must
//! not parse requests or choose lanes.

use super::engine::Summary;
use super::respond::{extension, json_response, usage, Body};
use super::stream::{event, Shape, DONE};
use super::wire::ApiError;
use edgecloud_wire::openai::{Ids, LegacyLogprobs, TextCompletion};
use hyper::Response;

/// The legacy log-probabilities of an answer, when it has them; its first
/// token starts at character `offset` of the choice's text.
fn logprobs(summary: &Summary, offset: usize) -> Option<LegacyLogprobs> {
    summary
        .logprobs
        .as_deref()
        .map(|lp| LegacyLogprobs::from_tokens(lp, offset))
}

/// A whole text completion: the prompt first when `echo` holds it.
pub(crate) fn whole(
    ids: &Ids,
    echo: Option<&str>,
    summary: &Summary,
    text: &str,
    finish: &'static str,
) -> Response<Body> {
    let full = match echo {
        Some(prompt) => format!("{prompt}{text}"),
        None => text.to_string(),
    };
    let offset = echo.map_or(0, |p| p.chars().count());
    let mut body =
        TextCompletion::one(ids, &full, Some(finish)).with_logprobs(logprobs(summary, offset));
    body.usage = Some(usage(summary));
    body.edgecloud = Some(extension(summary));
    json_response(200, &body)
}

/// A streamed text completion.
pub(crate) struct Stream {
    ids: Ids,
    /// The prompt, sent first, when `echo` asked for it.
    echo: Option<String>,
    include_usage: bool,
}

impl Stream {
    pub(crate) fn new(ids: Ids, echo: Option<String>, include_usage: bool) -> Self {
        Self {
            ids,
            echo,
            include_usage,
        }
    }
}

impl Shape for Stream {
    fn opening(&mut self) -> Vec<u8> {
        match &self.echo {
            Some(prompt) => event(&TextCompletion::one(&self.ids, prompt, None)).to_vec(),
            None => Vec::new(),
        }
    }

    fn text(&mut self, out: &mut Vec<u8>, piece: &str) {
        out.extend_from_slice(&event(&TextCompletion::one(&self.ids, piece, None)));
    }

    /// A text completion has no place for thinking: the local lane never
    /// splits a raw prompt's output (it is returned as the model wrote
    /// it), and a provider's separate `reasoning_content` is left out.
    fn reasoning(&mut self, _: &mut Vec<u8>, _: &str) {}

    fn ending(&mut self, summary: &Summary, finish: &'static str) -> Vec<u8> {
        let mut out = Vec::new();
        // The answer's log-probabilities whole, in one chunk before the
        // finish chunk (as chat streams them); `echo` never comes with
        // them, so the first token is at offset 0 of the answer.
        if let Some(lp) = logprobs(summary, 0) {
            let chunk = TextCompletion::one(&self.ids, "", None).with_logprobs(Some(lp));
            out.extend_from_slice(&event(&chunk));
        }
        let mut finish_chunk = TextCompletion::one(&self.ids, "", Some(finish));
        finish_chunk.edgecloud = Some(extension(summary));
        out.extend_from_slice(&event(&finish_chunk));
        if self.include_usage {
            let chunk = TextCompletion::usage_chunk(&self.ids, usage(summary));
            out.extend_from_slice(&event(&chunk));
        }
        out.extend_from_slice(DONE);
        out
    }

    fn failure(&mut self, e: &ApiError) -> Vec<u8> {
        event(&e.body()).to_vec()
    }

    fn prompt_param(&self) -> &'static str {
        "prompt"
    }
}
