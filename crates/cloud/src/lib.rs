//! The cloud lane: an OpenAI-compatible chat-completions client (OpenAI,
//! vLLM, llama.cpp's llama-server, Ollama's `/v1`, TGI, LM Studio) that
//! streams tokens, respects the job's one deadline and cancellation token,
//! caps what a hostile server can make it hold, and keeps the API key out
//! of every printout.
//!
//! This module owns HTTP; nothing else in the crate touches `reqwest`.
//!
//! ```no_run
//! use edgecloud_cloud::{CloudConfig, CloudLane};
//! use edgecloud_core::{ChatMessage, LaneJob, Sampling};
//! use std::time::{Duration, Instant};
//!
//! # async fn demo() -> Result<(), edgecloud_cloud::CloudError> {
//! // The key comes from $OPENAI_API_KEY (unset: no key, fine for local servers).
//! let lane = CloudLane::new(CloudConfig::new("http://127.0.0.1:8080/v1", "qwen2.5"))?;
//! let job = LaneJob::new(
//!     vec![ChatMessage::user("Say hi")],
//!     Sampling::default(),
//!     Instant::now() + Duration::from_secs(5),
//! )
//! .with_sink(|piece| print!("{piece}"));
//! let done = lane.run(job).await?;
//! println!("\n{:?} in {:?}", done.finish_reason, done.timings.total);
//! # Ok(()) }
//! ```
//!
//! Decisions worth knowing:
//! - Deadline or cancellation after the first token returns `Ok` with the
//!   partial text and `FinishReason::Deadline`/`Cancelled`; before it, a
//!   typed error (`DeadlineBeforeHeaders`, `DeadlineBeforeFirstToken`,
//!   `Cancelled`).
//! - A stream must end with `data: [DONE]`; a stream that ends without it is
//!   [`CloudError::Truncated`] (the partial text is kept in the error).
//! - The response's `Content-Type` decides how it is read: a server that
//!   ignores `stream: true` and answers JSON is still understood.
//! - Usage is the provider's, never estimated; `None` when it sent none.
//! - The lane keeps track of whether its server is reachable: after
//!   consecutive connect-level failures it is *down* for a cooldown, and
//!   [`CloudLane::admit`] says so, so a harness can leave it out of a run
//!   at once (rules and defaults in the `health` module's docs; settings in
//!   [`CloudConfig`]).
//! - [`CloudLane::embed`] passes an embeddings request through to the
//!   endpoint's `/embeddings` (same client, key and caps; its own
//!   deadline; no lane slot) and checks the vectors that come back.

mod backend;
mod client;
mod config;
mod endpoint;
mod error;
mod health;
mod net;
mod secret;
mod sse;
mod status;

pub use backend::{candidate_from_cloud, CloudBackend};
pub use client::{
    CloudCompletion, CloudDiagnostic, CloudEmbeddings, CloudLane, CloudTimings, EmbeddingInput,
    EmbeddingsRequest, ProviderUsage,
};
pub use config::{CloudConfig, CloudLimits, ContinueWith, DEFAULT_API_KEY_ENV};
pub use endpoint::display_origin;
pub use error::{BoxError, CloudError, CloudErrorKind};
pub use health::{Admission, CloudHealth, CooldownPolicy};
pub use secret::ApiKey;
