//! Streaming responses: Server-Sent Events in the shape OpenAI clients
//! expect (a role delta, content deltas, a finish chunk, an optional usage
//! chunk, `data: [DONE]`), fed by the run's committed text. The status line
//! waits for the first piece of text, so a run that ends with nothing (busy
//! lanes, deadline, failure) is an ordinary JSON error with its status; a
//! failure after the first byte ends the stream with an error event, never
//! a clean end. It must not choose lanes: what it streams is what the run
//! committed.

use super::app::App;
use super::engine::Run;
use super::response::{
    self, extension, failure, full, outcome_headers, success, usage, AbortOnDrop, Body,
};
use super::wire::ApiError;
use crate::openai::{to_json, ChatChunk, Delta, Ids};
use bytes::Bytes;
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

/// Frames buffered between the run and a slow client; beyond this the pump
/// waits (the run itself never does: its tokens queue in the engine).
const FRAMES_IN_FLIGHT: usize = 64;

fn event(v: &impl Serialize) -> Bytes {
    Bytes::from(format!("data: {}\n\n", to_json(v)))
}

const DONE: &[u8] = b"data: [DONE]\n\n";

fn sse_response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// Answers a streaming request.
pub(crate) async fn respond(
    app: Arc<App>,
    mut run: Box<dyn Run>,
    ids: Ids,
    include_usage: bool,
    request_id: Option<String>,
) -> Result<Response<Body>, ApiError> {
    let info = run.info().clone();
    let started = Instant::now();
    let guard = AbortOnDrop::new(&*run);
    let Some(first) = run.next_token().await else {
        // Settled before any text: answer with the outcome at once.
        let summary = response::settle(&app, run, guard).await?;
        return Ok(response::settled(
            &app,
            &info,
            &summary,
            request_id.as_deref(),
            |text, finish| {
                let mut frames = vec![event(&ChatChunk::role(&ids))];
                if !text.is_empty() {
                    frames.push(event(&ChatChunk::content(&ids, text)));
                }
                frames.extend(ending(&ids, &summary, finish, include_usage));
                sse_response(full(frames.concat()))
            },
        ));
    };
    app.metrics.request_ttft(started.elapsed());
    let (tx, rx) = mpsc::channel(FRAMES_IN_FLIGHT);
    tokio::spawn(pump(app, run, guard, first, tx, ids, include_usage));
    let mut response = sse_response(ChannelBody(rx).boxed());
    outcome_headers(response.headers_mut(), &info, None, request_id.as_deref());
    Ok(response)
}

/// The finish chunk (with the outcome summary), the usage chunk when asked
/// for, and `[DONE]`.
fn ending(
    ids: &Ids,
    summary: &super::engine::Summary,
    finish: &str,
    include_usage: bool,
) -> Vec<Bytes> {
    // Calls and log-probabilities come whole, before the finish chunk:
    // per call a chunk with its id and name, then one with its arguments,
    // as OpenAI streams them; the log-probabilities of the whole answer in
    // one chunk (clients append each chunk's to the last).
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
    if include_usage {
        frames.push(event(&ChatChunk::usage(ids, usage(summary))));
    }
    frames.push(Bytes::from_static(DONE));
    frames
}

/// Moves the run's text to the client, then ends the stream as the outcome
/// says. If the client goes away, the run is aborted (its lanes are
/// cancelled) and still recorded.
async fn pump(
    app: Arc<App>,
    mut run: Box<dyn Run>,
    mut guard: AbortOnDrop,
    first: String,
    tx: mpsc::Sender<Bytes>,
    ids: Ids,
    include_usage: bool,
) {
    let content = ContentEvents::new(&ids);
    let role = event(&ChatChunk::role(&ids));
    let mut frame = role.to_vec();
    content.push(&mut frame, &first);
    let mut open = tx.send(Bytes::from(frame)).await.is_ok();
    while open {
        let Some(piece) = run.next_token().await else {
            break;
        };
        // One event per piece, but the pieces already waiting leave in one
        // write: fewer wake-ups and syscalls when tokens come fast.
        let mut frame = Vec::new();
        content.push(&mut frame, &piece);
        let mut ended = false;
        while frame.len() < 64 * 1024 {
            match run.next_token().now_or_never() {
                Some(Some(piece)) => content.push(&mut frame, &piece),
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
    let summary = match response::settle(&app, run, guard).await {
        Ok(s) => s,
        Err(e) => {
            let _ = tx.send(event(&e.body())).await;
            return;
        }
    };
    if !open {
        return;
    }
    let frames = match success(&summary) {
        Some((_, finish)) => ending(&ids, &summary, finish, include_usage),
        None => vec![event(&failure(&app, &summary).body())],
    };
    for f in frames {
        if tx.send(f).await.is_err() {
            return;
        }
    }
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
