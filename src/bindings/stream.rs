//! A run as the bindings stream it ([`DeltaStream`]): the committed text
//! as content deltas while it comes, then the winner's tool calls as
//! OpenAI streams them (per call, a delta with its id and name, then one
//! with its arguments), then the end; the outcome once after. These are
//! the deltas `serve` streams for the same run (one home for their shape:
//! `openai::Delta`), so a C `on_delta` callback and a Python `stream()`
//! see what an HTTP client sees.
//!
//! What it must not do: decide anything about the run (it reads the
//! committed text and the settled outcome), or block anywhere but where a
//! caller asked to wait.

use super::{Error, ErrorKind};
use crate::harness::{AbortHandle, Outcome, RunHandle};
use edgecloud_wire::openai::{to_json, Delta};
use std::collections::VecDeque;

/// A started run read as deltas. Built from the [`RunHandle`] of a
/// streaming start; a run started without streaming gives its tool-call
/// deltas alone (its text comes whole in the outcome).
#[derive(Debug)]
pub struct DeltaStream {
    abort: AbortHandle,
    run: Option<RunHandle>,
    /// The tool-call deltas still to hand out, once the run has settled.
    ending: VecDeque<String>,
    /// The settled outcome, kept for [`wait`](Self::wait) after the end.
    settled: Option<Result<Outcome, Error>>,
}

impl DeltaStream {
    /// Reads `run` as deltas.
    pub fn new(run: RunHandle) -> Self {
        Self {
            abort: run.abort_handle(),
            run: Some(run),
            ending: VecDeque::new(),
            settled: None,
        }
    }

    /// A handle that aborts the run from anywhere (idempotent).
    pub fn abort_handle(&self) -> AbortHandle {
        self.abort.clone()
    }

    /// The next delta as JSON (`{"content":"..."}`, then
    /// `{"tool_calls":[...]}` pieces), blocking until it comes; `None` at
    /// the end. After the text ends this waits for the run to settle, so
    /// the tool calls are the winner's. Not on a tokio runtime's thread.
    pub fn next_blocking(&mut self) -> Result<Option<String>, Error> {
        if let Some(d) = self.ending.pop_front() {
            return Ok(Some(d));
        }
        let Some(run) = self.run.as_mut() else {
            return Ok(None);
        };
        if let Some(piece) = run.next_token_blocking()? {
            return Ok(Some(delta_json(&piece)));
        }
        let run = self.run.take().expect("checked just above");
        let settled = run.wait().map_err(Error::from);
        if let Ok(outcome) = &settled {
            self.ending = tool_call_deltas(outcome).into();
        }
        self.settled = Some(settled);
        Ok(self.ending.pop_front())
    }

    /// Blocks until the run settles and gives its outcome; once (a second
    /// call is an [`ErrorKind::Internal`] error). Deltas not read yet are
    /// dropped. Not on a tokio runtime's thread.
    pub fn wait(&mut self) -> Result<Outcome, Error> {
        if let Some(settled) = self.settled.take() {
            self.ending.clear();
            return settled;
        }
        match self.run.take() {
            Some(run) => run.wait().map_err(Error::from),
            None => Err(Error::new(
                ErrorKind::Internal,
                "this run's outcome was already taken",
            )),
        }
    }
}

/// A piece of streamed text as a delta, in the shape of an OpenAI stream
/// chunk's `delta` (`{"content":"..."}`), as serve streams it.
pub fn delta_json(piece: &str) -> String {
    to_json(&Delta::text(piece))
}

/// The winner's tool calls as stream deltas, as serve streams them before
/// its finish chunk; none when no lane won.
pub fn tool_call_deltas(outcome: &Outcome) -> Vec<String> {
    let calls = match (&outcome.winner, &outcome.completion) {
        (Some(_), Some(c)) => c.tool_calls.as_slice(),
        _ => &[],
    };
    Delta::tool_call_pieces(calls).iter().map(to_json).collect()
}
