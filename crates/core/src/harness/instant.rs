//! [`InstantBackend`]: a stand-in engine that answers every job at once
//! with a fixed text. It is for measuring the harness's own cost per run
//! and what a binding adds over it (`benches/harness.rs`,
//! `scripts/embed-overhead`), never a lane's real behaviour: reports name
//! it `instant`. It must not block, sleep or look at the job beyond
//! taking it.

use super::backend::{Backend, BackendFuture, BackendInfo, Candidate};
use crate::lane::{FinishReason, LaneJob};

/// Answers at once with `text` (default `"The answer is 42."`), finish
/// reason `stop`. A stand-in, labelled `instant` in every report.
#[derive(Debug, Clone)]
pub struct InstantBackend {
    text: String,
}

impl InstantBackend {
    /// Answers with `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self { text: text.into() }
    }
}

impl Default for InstantBackend {
    fn default() -> Self {
        Self::new("The answer is 42.")
    }
}

impl Backend for InstantBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo::named("instant")
    }

    fn run(&self, _job: LaneJob) -> BackendFuture {
        let text = self.text.clone();
        Box::pin(async move { Ok(Candidate::new(text, FinishReason::Stop)) })
    }
}
