//! The local lane as serve's [`Embedder`]: `POST /v1/embeddings` runs on
//! the lane's worker between its generation steps (`LocalLane::
//! submit_embed`), takes no lane slot and so never answers 503
//! `lanes_busy`. It lives here, where both crates are known, so that
//! neither the lane nor the front door knows the other.

use crate::lane::Lane;
use crate::local::{EmbedInput, LocalError, LocalLane};
use crate::request::{ChatMessage, Sampling};
use edgecloud_serve::embedder::{check_dimensions, ApiError, BoxFuture, Embedder, Input};
use edgecloud_serve::embedder::{Params, Vectors, INVALID_REQUEST};

/// A local lane answering `POST /v1/embeddings` (see
/// [`ServeConfig::embeddings`](edgecloud_serve::ServeConfig::embeddings)).
#[derive(Debug, Clone)]
pub struct LocalEmbedder(LocalLane);

impl LocalEmbedder {
    /// Embeds with `lane`'s model (any lane of a pool: they share one
    /// worker).
    pub fn new(lane: LocalLane) -> Self {
        Self(lane)
    }
}

impl Embedder for LocalEmbedder {
    fn release(&self, grace: std::time::Duration) -> bool {
        self.0.shutdown(grace)
    }

    fn lane(&self) -> Lane {
        Lane::Local
    }

    fn count_prompt(
        &self,
        messages: &[ChatMessage],
        sampling: &Sampling,
    ) -> Option<Result<u64, ApiError>> {
        if !self.0.can_generate() {
            return None;
        }
        Some(
            self.0
                .count_prompt(messages, sampling)
                .map(|n| n as u64)
                .map_err(|e| ApiError::new(400, INVALID_REQUEST, e.to_string()).param("messages")),
        )
    }

    fn embed(&self, params: &Params) -> BoxFuture<'static, Result<Vectors, ApiError>> {
        if let Err(e) = check_dimensions(params.dimensions, self.0.embedding_info().dimensions) {
            return Box::pin(async move { Err(e) });
        }
        let inputs = params
            .inputs
            .iter()
            .cloned()
            .map(|i| match i {
                Input::Text(t) => EmbedInput::Text(t),
                Input::Tokens(t) => EmbedInput::Tokens(t),
            })
            .collect();
        let ticket = self.0.submit_embed(inputs);
        Box::pin(async move {
            let out = ticket.await.map_err(refusal)?;
            Ok(Vectors {
                vectors: out.vectors,
                prompt_tokens: out.prompt_tokens,
            })
        })
    }
}

/// The lane's error as the client's: its mistakes are 400s naming
/// the input, the lane's own trouble a 5xx.
fn refusal(e: LocalError) -> ApiError {
    let message = e.to_string();
    match e {
        LocalError::EmbeddingTooLong { .. } => {
            ApiError::invalid("input", message).code("context_length_exceeded")
        }
        LocalError::EmbeddingInput { .. } => {
            ApiError::invalid("input", message).code("invalid_value")
        }
        LocalError::CannotEmbed { .. } => ApiError::new(400, INVALID_REQUEST, message)
            .param("model")
            .code("model_cannot_embed"),
        LocalError::WorkerGone => {
            ApiError::new(503, "server_error", message).code("lanes_unavailable")
        }
        _ => ApiError::new(500, "server_error", message),
    }
}
