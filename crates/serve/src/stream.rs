//! Streaming responses: Server-Sent Events fed by the run's committed
//! text, in the shape of the endpoint's format ([`Shape`]: chat chunks
//! here, `completions` and `responses` have theirs). The status line
//! waits for the first piece of text, so a run that ends with nothing
//! (busy lanes, deadline, failure) is an ordinary JSON error with its
//! status; a failure after the first byte ends the stream with the
//! format's error event, never a clean end. It must not choose lanes:
//! what it streams is what the run committed.

use super::app::App;
use super::engine::{Run, Summary};
use super::respond::{
    self, extension, failure, full, outcome_headers, success, usage, AbortOnDrop, Body,
};
use super::wire::ApiError;
use bytes::Bytes;
use edgecloud_core::reasoning::Piece;
use edgecloud_wire::openai::{to_json, ChatChunk, Delta, Ids};
use futures_util::FutureExt as _;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::Response;
use serde::Serialize;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::mpsc;

/// What one endpoint's stream looks like: the events around the text,
/// and the text's own. `respond` calls them in order: `opening`, `text`
/// per committed piece, then `ending` (the run succeeded) or `failure`.
pub(crate) trait Shape: Send + 'static {
    /// The events before the first piece of text (chat: the role delta).
    fn opening(&mut self) -> Vec<u8>;
    /// Appends the event carrying one piece of text.
    fn text(&mut self, out: &mut Vec<u8>, piece: &str);
    /// Appends the event carrying one piece of a reasoning model's
    /// thinking (it comes before the answer's text).
    fn reasoning(&mut self, out: &mut Vec<u8>, piece: &str);
    /// Appends the event of either kind of piece.
    fn piece(&mut self, out: &mut Vec<u8>, piece: &Piece) {
        match piece {
            Piece::Answer(t) => self.text(out, t),
            Piece::Reasoning(t) => self.reasoning(out, t),
        }
    }
    /// The events that end the stream of a run that succeeded with this
    /// answer (its whole text is `summary.text`), `[DONE]` included where
    /// the format has one.
    fn ending(&mut self, summary: &Summary, finish: &'static str) -> Vec<u8>;
    /// The event that ends a stream whose run failed after its first byte.
    fn failure(&mut self, e: &ApiError) -> Vec<u8>;
    /// The request field the prompt came in, which an error about its
    /// length names.
    fn prompt_param(&self) -> &'static str {
        "messages"
    }
    /// How the endpoint writes an error response (a run that failed
    /// before its first byte): OpenAI's error object unless the format
    /// has its own.
    fn errors(&self) -> respond::ErrorWriter {
        respond::error_response
    }
    /// The stream's content type: Server-Sent Events unless the format
    /// streams otherwise (Ollama: one JSON object per line).
    fn content_type(&self) -> &'static str {
        "text/event-stream"
    }
}

/// Frames buffered between the run and a slow client; beyond this the pump
/// waits (the run itself never does: its tokens queue in the engine).
const FRAMES_IN_FLIGHT: usize = 64;

pub(crate) fn event(v: &impl Serialize) -> Bytes {
    Bytes::from(format!("data: {}\n\n", to_json(v)))
}

pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

fn sse_response(body: Body, content_type: &'static str) -> Response<Body> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// Answers a streaming request in `shape`'s format.
pub(crate) async fn respond<S: Shape>(
    app: Arc<App>,
    mut run: Box<dyn Run>,
    mut shape: S,
    request_id: Option<String>,
) -> Result<Response<Body>, ApiError> {
    let info = run.info().clone();
    let started = Instant::now();
    let guard = AbortOnDrop::new(&*run);
    let Some(first) = run.next_piece().await else {
        // Settled before any text: answer with the outcome at once.
        let summary = respond::settle(&app, run, guard).await?;
        return Ok(respond::settled(
            &app,
            &info,
            &summary,
            request_id.as_deref(),
            shape.prompt_param(),
            shape.errors(),
            |text, finish| {
                let mut frames = shape.opening();
                if let Some(r) = summary.reasoning.as_deref() {
                    shape.reasoning(&mut frames, r);
                }
                if !text.is_empty() {
                    shape.text(&mut frames, text);
                }
                frames.extend(shape.ending(&summary, finish));
                let content_type = shape.content_type();
                sse_response(full(frames), content_type)
            },
        ));
    };
    app.metrics.request_ttft(started.elapsed());
    let content_type = shape.content_type();
    let (tx, rx) = mpsc::channel(FRAMES_IN_FLIGHT);
    tokio::spawn(pump(app, run, guard, first, tx, shape));
    let mut response = sse_response(ChannelBody(rx).boxed(), content_type);
    outcome_headers(response.headers_mut(), &info, None, request_id.as_deref());
    Ok(response)
}

/// Chat-completion chunks: a role delta, content deltas, then the tool
/// calls and log-probabilities whole, the finish chunk (with the outcome
/// summary), the usage chunk when asked for, and `[DONE]`; a failure is
/// `data: {"error": ...}` and no `[DONE]`.
pub(crate) struct ChatShape {
    ids: Ids,
    include_usage: bool,
    content: ContentEvents,
}

impl ChatShape {
    pub(crate) fn new(ids: Ids, include_usage: bool) -> Self {
        let content = ContentEvents::new(&ids);
        Self {
            ids,
            include_usage,
            content,
        }
    }
}

impl Shape for ChatShape {
    fn opening(&mut self) -> Vec<u8> {
        event(&ChatChunk::role(&self.ids)).to_vec()
    }

    fn text(&mut self, out: &mut Vec<u8>, piece: &str) {
        self.content.push(out, piece);
    }

    fn reasoning(&mut self, out: &mut Vec<u8>, piece: &str) {
        out.extend_from_slice(&event(&ChatChunk::reasoning(&self.ids, piece)));
    }

    fn ending(&mut self, summary: &Summary, finish: &'static str) -> Vec<u8> {
        let ids = &self.ids;
        // Calls and log-probabilities come whole, before the finish chunk:
        // per call a chunk with its id and name, then one with its
        // arguments, as OpenAI streams them; the log-probabilities of the
        // whole answer in one chunk (clients append each chunk's to the
        // last).
        let mut frames: Vec<Bytes> = ChatChunk::tool_calls(ids, &summary.tool_calls)
            .iter()
            .map(event)
            .collect();
        if let Some(lp) = &summary.logprobs {
            frames.push(event(
                &ChatChunk::delta(ids, Delta::default(), None).with_logprobs(lp.clone()),
            ));
        }
        let mut finish_chunk = ChatChunk::delta(ids, Delta::default(), Some(finish));
        finish_chunk.edgecloud = Some(extension(summary));
        frames.push(event(&finish_chunk));
        if self.include_usage {
            frames.push(event(&ChatChunk::usage(ids, usage(summary))));
        }
        frames.push(Bytes::from_static(DONE));
        frames.concat()
    }

    fn failure(&mut self, e: &ApiError) -> Vec<u8> {
        event(&e.body()).to_vec()
    }
}

/// Moves the run's text to the client, then ends the stream as the outcome
/// says. If the client goes away, the run is aborted (its lanes are
/// cancelled) and still recorded.
async fn pump<S: Shape>(
    app: Arc<App>,
    mut run: Box<dyn Run>,
    mut guard: AbortOnDrop,
    first: Piece,
    tx: mpsc::Sender<Bytes>,
    mut shape: S,
) {
    let mut frame = shape.opening();
    shape.piece(&mut frame, &first);
    let mut open = tx.send(Bytes::from(frame)).await.is_ok();
    while open {
        let Some(piece) = run.next_piece().await else {
            break;
        };
        // One event per piece, but the pieces already waiting leave in one
        // write: fewer wake-ups and syscalls when tokens come fast.
        let mut frame = Vec::new();
        shape.piece(&mut frame, &piece);
        let mut ended = false;
        while frame.len() < 64 * 1024 {
            match run.next_piece().now_or_never() {
                Some(Some(piece)) => shape.piece(&mut frame, &piece),
                Some(None) => {
                    ended = true;
                    break;
                }
                None => break,
            }
        }
        open = tx.send(Bytes::from(frame)).await.is_ok();
        if ended {
            break;
        }
    }
    if !open {
        // The client is gone: abort now rather than when the guard drops,
        // so the lanes stop before we wait for the settled run.
        guard.fire();
    }
    let summary = match respond::settle(&app, run, guard).await {
        Ok(s) => s,
        Err(e) => {
            let _ = tx.send(Bytes::from(shape.failure(&e))).await;
            return;
        }
    };
    if !open {
        return;
    }
    let end = match success(&summary) {
        Some((_, finish)) => shape.ending(&summary, finish),
        None => {
            let e = failure(&app, &summary, shape.prompt_param());
            shape.failure(&e)
        }
    };
    let _ = tx.send(Bytes::from(end)).await;
}

/// Content chunks from a template made once per stream: only the text
/// changes between them, so each costs one string escape.
struct ContentEvents {
    head: String,
    tail: String,
}

impl ContentEvents {
    fn new(ids: &Ids) -> Self {
        const PROBE: &str = "\u{1}probe\u{1}";
        let chunk = to_json(&ChatChunk::content(ids, PROBE));
        let quoted = serde_json::to_string(PROBE).expect("a string always serializes");
        // `choices` (holding the probe) is the chunk's first field, before
        // the ids: the first occurrence is the content.
        let at = chunk.find(&quoted).expect("the probe appears in its chunk");
        Self {
            head: format!("data: {}", &chunk[..at]),
            tail: format!("{}\n\n", &chunk[at + quoted.len()..]),
        }
    }

    fn push(&self, out: &mut Vec<u8>, text: &str) {
        out.extend_from_slice(self.head.as_bytes());
        let escaped = serde_json::to_string(text).expect("a string always serializes");
        out.extend_from_slice(escaped.as_bytes());
        out.extend_from_slice(self.tail.as_bytes());
    }
}

/// A response body fed by a channel; it ends when the sender is dropped.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templated_content_events_match_the_json_ones() {
        let ids = Ids::new(3, "edgecloud");
        let events = ContentEvents::new(&ids);
        for text in [
            "",
            "plain",
            "quote \" and \\",
            "line\nbreak",
            "\u{0}\u{1f}",
            "héllo 🚀",
            "\u{1}probe\u{1}",
        ] {
            let mut out = Vec::new();
            events.push(&mut out, text);
            let expected = event(&ChatChunk::content(&ids, text));
            assert_eq!(out, expected.to_vec(), "{text:?}");
        }
    }
}
