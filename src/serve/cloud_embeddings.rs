//! `POST /v1/embeddings` on a route whose embeddings go to the cloud lane
//! (`embeddings = "cloud"`): the [`Embedder`] that passes the request
//! through to the cloud endpoint's `/v1/embeddings` ([`CloudLane::embed`]:
//! the lane's client, key, TLS, timeouts and body cap) under the route's
//! deadline, asking for the route's cloud model, and turns the cloud's
//! failures into the server's errors: 504 `deadline_exceeded` when no
//! answer came by the deadline, 400 when the provider refused the input
//! itself, else 502 `lanes_failed` naming the cloud error's kind and what
//! was wrong. It takes no lane slot (as local embeddings take none).
//!
//! This module must not parse the client's request (`embeddings` does)
//! nor choose which route goes where (the server's configuration does).

use crate::cloud::{CloudError, CloudLane, EmbeddingInput, EmbeddingsRequest};
use crate::harness::DEFAULT_DEADLINE;
use crate::lane::Lane;
use edgecloud_serve::embedder::INVALID_REQUEST;
use edgecloud_serve::embedder::{ApiError, BoxFuture, Embedder, Input, Params, Vectors};
use std::time::{Duration, Instant};

/// Embeddings from the cloud lane's endpoint, for one route (see
/// [`ServeConfig::cloud_embeddings`](edgecloud_serve::ServeConfig::cloud_embeddings)).
#[derive(Debug, Clone)]
pub struct CloudEmbedder {
    lane: CloudLane,
    model: Option<String>,
    deadline: Duration,
}

impl CloudEmbedder {
    /// Passes embeddings through to `lane`'s endpoint, asking for the
    /// lane's model, within the harness's default deadline (5 s).
    pub fn new(lane: CloudLane) -> Self {
        Self {
            lane,
            model: None,
            deadline: DEFAULT_DEADLINE,
        }
    }

    /// Asks the endpoint for `model` instead (a route's `cloud_model`).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Gives each request this long, from its arrival, for the whole
    /// exchange (a route's deadline).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }
}

impl Embedder for CloudEmbedder {
    fn lane(&self) -> Lane {
        Lane::Cloud
    }

    fn embed(&self, params: &Params) -> BoxFuture<'static, Result<Vectors, ApiError>> {
        let request = EmbeddingsRequest {
            model: self.model.clone(),
            input: params
                .inputs
                .iter()
                .map(|i| match i {
                    Input::Text(t) => EmbeddingInput::Text(t.clone()),
                    Input::Tokens(t) => EmbeddingInput::Tokens(t.clone()),
                })
                .collect(),
            base64: params.base64,
            dimensions: params.dimensions,
        };
        let lane = self.lane.clone();
        let budget = self.deadline;
        let deadline = Instant::now() + budget;
        Box::pin(async move {
            let out = lane
                .embed(&request, deadline)
                .await
                .map_err(|e| refusal(&e, budget))?;
            Ok(Vectors {
                vectors: out.vectors,
                // A provider that reports no usage: none counted here
                // either (never estimated).
                prompt_tokens: out
                    .prompt_tokens
                    .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
            })
        })
    }
}

/// The cloud's failure as the client's answer.
fn refusal(e: &CloudError, budget: Duration) -> ApiError {
    if e.is_deadline() {
        return ApiError::new(
            504,
            "timeout_error",
            format!(
                "no embeddings from the cloud lane within the {} ms deadline ({e})",
                budget.as_millis()
            ),
        )
        .code("deadline_exceeded");
    }
    match e {
        // The provider refused the input itself (over its context, a bad
        // token id): the request's fault, as a local refusal would be.
        CloudError::HttpStatus { status, .. } if (400..500).contains(status) => ApiError::new(
            400,
            INVALID_REQUEST,
            format!("the cloud lane refused the input: {e}"),
        )
        .param("input"),
        _ => ApiError::new(
            502,
            "server_error",
            format!("the cloud lane's embeddings failed ({}): {e}", e.kind()),
        )
        .code("lanes_failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_become_the_servers_errors() {
        let budget = Duration::from_millis(250);
        let late = refusal(&CloudError::DeadlineBeforeHeaders, budget);
        assert_eq!(
            (late.status(), late.error_code()),
            (504, Some("deadline_exceeded"))
        );
        assert!(late.message().contains("250 ms"), "{}", late.message());
        let bad = refusal(
            &CloudError::MalformedEmbeddings {
                detail: "1 vectors for 2 inputs".into(),
            },
            budget,
        );
        assert_eq!(
            (bad.status(), bad.error_code()),
            (502, Some("lanes_failed"))
        );
        assert!(
            bad.message().contains("malformed_embeddings") && bad.message().contains("1 vectors"),
            "{}",
            bad.message()
        );
    }
}
