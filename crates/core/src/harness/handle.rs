//! What a caller holds while a run is in flight: [`RunOptions`] going in,
//! a [`RunHandle`] (stream, abort, outcome) and cloneable [`AbortHandle`]s
//! coming out. Thin wrappers over channels; no run logic lives here.

use super::claim::Claim;
use super::error::HarnessError;
use super::outcome::Outcome;
use super::policy::{CommitMode, Policy};
use super::run::{AbortResult, RunShared};
use crate::reasoning::Piece;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Per-run choices.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The route to use; `None`: the harness's default route.
    pub route: Option<String>,
    /// Stream the committed lane's text through [`RunHandle::next_token`].
    pub stream: bool,
    /// Override the route's commit mode.
    pub commit: Option<CommitMode>,
    /// Override the route's policy for this run.
    pub policy: Option<Policy>,
    /// The run's idempotency key (docs/cost.md): on a harness with a
    /// ledger store, a key whose answer is recorded is answered from the
    /// record (its outcome's `replay` set) without running a lane; the
    /// same key with another request is
    /// [`HarnessError::IdempotencyConflict`].
    pub idempotency_key: Option<String>,
}

impl RunOptions {
    /// Default options: default route, no streaming.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses the named route.
    pub fn route(mut self, name: impl Into<String>) -> Self {
        self.route = Some(name.into());
        self
    }

    /// Streams the committed lane's text to the caller.
    pub fn stream(mut self) -> Self {
        self.stream = true;
        self
    }

    /// Sets the commit mode.
    pub fn commit(mut self, commit: CommitMode) -> Self {
        self.commit = Some(commit);
        self
    }

    /// Runs this request with `policy` instead of the route's.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Gives the run an idempotency key (see [`RunOptions::idempotency_key`]).
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Uses the request's own id as its idempotency key, when it has one.
    pub fn idempotent_by_request_id(mut self, request: &crate::request::Request) -> Self {
        if let Some(id) = &request.id {
            self.idempotency_key = Some(id.clone());
        }
        self
    }
}

/// Aborts one run from any thread. Cheap to clone.
#[derive(Clone)]
pub struct AbortHandle {
    pub(crate) shared: Arc<RunShared>,
}

impl AbortHandle {
    /// Requests the abort. Accepted exactly once, and only while the run
    /// has not settled; an accepted abort always yields an `aborted`
    /// outcome. Never blocks on the run.
    pub fn abort(&self) -> AbortResult {
        self.shared.abort()
    }

    /// The run this handle aborts.
    pub fn run_id(&self) -> u64 {
        self.shared.run_id
    }

    /// Whether the run has settled (its outcome is decided; late workers
    /// may still hold their lanes). Cheap; never blocks on the run.
    pub fn is_settled(&self) -> bool {
        self.shared.is_settled()
    }
}

impl std::fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbortHandle")
            .field("run_id", &self.shared.run_id)
            .finish()
    }
}

/// A run in flight. The run proceeds on the harness's runtime whether or
/// not this handle is polled or kept: dropping it does not cancel the run
/// (use [`RunHandle::abort`]).
///
/// The handle also holds the run's claim on its instance: the harness
/// gives that instance to no other request until the handle is dropped or
/// its outcome taken (a late worker then still keeps its lane, and so the
/// instance, out of the harness's choice until it returns). Keep the
/// handle until the run has settled.
pub struct RunHandle {
    pub(crate) run_id: u64,
    pub(crate) deadline: Instant,
    pub(crate) abort: AbortHandle,
    pub(crate) tokens: Option<mpsc::UnboundedReceiver<Piece>>,
    pub(crate) outcome: oneshot::Receiver<Outcome>,
    /// The instance it runs on (an index into `Harness::instances`).
    pub(crate) instance: usize,
    /// Released with the handle (`None` only while the harness sets it,
    /// and for a replay, which claims no instance).
    pub(crate) claim: Option<Claim>,
    /// A recorded answer given again.
    pub(crate) replay: bool,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle")
            .field("run_id", &self.run_id)
            .field("instance", &self.instance)
            .field("deadline", &self.deadline)
            .field("streaming", &self.tokens.is_some())
            .finish()
    }
}

impl RunHandle {
    /// A handle over an answer given again (an idempotency key's
    /// replay): its outcome is ready and its stream holds the whole text
    /// (a reasoning model's thinking first, as it streamed).
    pub(crate) fn replayed(outcome: Outcome, stream: bool, abort: AbortHandle) -> Self {
        let tokens = stream.then(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let thinking = outcome
                .completion
                .as_ref()
                .and_then(|c| c.reasoning.clone());
            if let Some(r) = thinking.filter(|r| !r.is_empty()) {
                let _ = tx.send(Piece::Reasoning(r));
            }
            if let Some(t) = outcome.text.clone().filter(|t| !t.is_empty()) {
                let _ = tx.send(Piece::Answer(t));
            }
            rx
        });
        let (tx, rx) = oneshot::channel();
        let run_id = outcome.run_id;
        let _ = tx.send(outcome);
        RunHandle {
            run_id,
            deadline: Instant::now(),
            abort,
            tokens,
            outcome: rx,
            instance: 0,
            claim: None,
            replay: true,
        }
    }

    /// Whether this is a recorded answer given again for its idempotency
    /// key (no lane runs; the outcome's `replay` says which run answered).
    pub fn is_replay(&self) -> bool {
        self.replay
    }

    /// The run's id, as in its outcome and events.
    pub fn run_id(&self) -> u64 {
        self.run_id
    }

    /// The run's deadline, fixed when it started.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The instance it runs on (an index into
    /// [`Harness::instances`](super::Harness::instances); 0 on a harness of
    /// one instance).
    pub fn instance(&self) -> usize {
        self.instance
    }

    /// A handle that can abort this run from anywhere.
    pub fn abort_handle(&self) -> AbortHandle {
        self.abort.clone()
    }

    /// Aborts the run (see [`AbortHandle::abort`]).
    pub fn abort(&self) -> AbortResult {
        self.abort.abort()
    }

    /// The next piece of the committed answer's text; `None` once the
    /// run has settled and everything was delivered (or when the run does
    /// not stream). A reasoning model's thinking is skipped: read it with
    /// [`next_piece`](Self::next_piece), or from the outcome.
    pub async fn next_token(&mut self) -> Option<String> {
        loop {
            match self.next_piece().await? {
                Piece::Answer(text) => return Some(text),
                Piece::Reasoning(_) => continue,
            }
        }
    }

    /// The next piece of committed text, answer or thinking (see
    /// [`crate::reasoning`]), in the order the lane wrote them; `None` as
    /// for [`next_token`](Self::next_token).
    pub async fn next_piece(&mut self) -> Option<Piece> {
        self.tokens.as_mut()?.recv().await
    }

    /// Blocking [`next_token`](Self::next_token), for code without a
    /// runtime.
    pub fn next_token_blocking(&mut self) -> Result<Option<String>, HarnessError> {
        loop {
            match self.next_piece_blocking()? {
                Some(Piece::Answer(text)) => return Ok(Some(text)),
                Some(Piece::Reasoning(_)) => continue,
                None => return Ok(None),
            }
        }
    }

    /// Blocking [`next_piece`](Self::next_piece), for code without a
    /// runtime.
    pub fn next_piece_blocking(&mut self) -> Result<Option<Piece>, HarnessError> {
        ensure_blocking_allowed()?;
        Ok(match self.tokens.as_mut() {
            Some(rx) => rx.blocking_recv(),
            None => None,
        })
    }

    /// Waits for the outcome; the instance is free for the harness's next
    /// request once it has settled.
    pub async fn outcome(self) -> Result<Outcome, HarnessError> {
        let RunHandle { outcome, claim, .. } = self;
        let outcome = outcome.await.map_err(|_| HarnessError::RuntimeGone);
        drop(claim);
        outcome
    }

    /// Blocks until the outcome, for code without a runtime.
    ///
    /// Refused with [`HarnessError::BlockingInAsync`] on any thread inside a
    /// tokio runtime context (`spawn_blocking` threads included, since they
    /// cannot be told apart cheaply); there, await
    /// [`outcome`](Self::outcome) or use `Handle::block_on` on it.
    pub fn wait(self) -> Result<Outcome, HarnessError> {
        ensure_blocking_allowed()?;
        let RunHandle { outcome, claim, .. } = self;
        let outcome = outcome
            .blocking_recv()
            .map_err(|_| HarnessError::RuntimeGone);
        drop(claim);
        outcome
    }
}

/// Blocking inside an async runtime could stall it (and tokio refuses);
/// say so as an error instead.
pub(crate) fn ensure_blocking_allowed() -> Result<(), HarnessError> {
    if tokio::runtime::Handle::try_current().is_ok() {
        Err(HarnessError::BlockingInAsync)
    } else {
        Ok(())
    }
}
