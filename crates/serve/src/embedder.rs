//! The seam embeddings plug into: what answers `POST /v1/embeddings` (an
//! [`Embedder`]: the local lane's, or a cloud endpoint passed through;
//! `edgecloud` provides both), the request it is handed ([`Params`]) and
//! what it gives back ([`Vectors`]). Reading the request and writing the
//! answer are `embeddings`'; this module must not know a lane, the
//! metrics or the server.

pub use super::wire::{ApiError, INVALID_REQUEST};
use edgecloud_core::lane::Lane;
use edgecloud_core::request::{ChatMessage, Sampling};
use std::future::Future;
use std::pin::Pin;

/// A boxed future that can cross threads.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Most inputs one request may hold (OpenAI's bound).
pub const MAX_INPUTS: usize = 2048;

/// One input, as the request gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A string.
    Text(String),
    /// Token ids of the model's vocabulary.
    Tokens(Vec<u32>),
}

/// The vectors of a request's inputs, in order, and what they cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Vectors {
    /// One vector per input, in order.
    pub vectors: Vec<Vec<f32>>,
    /// The tokens the inputs took (the usage reported).
    pub prompt_tokens: u32,
}

/// What answers embeddings requests: the local lane, or the cloud
/// endpoint passed through (`cloud_embeddings`).
pub trait Embedder: std::fmt::Debug + Send + Sync + 'static {
    /// Which lane it is (the metrics' `lane` label).
    fn lane(&self) -> Lane;
    /// Embeds the request's inputs, honouring its `dimensions` or refusing
    /// it by name (dropping the future drops the request).
    fn embed(&self, params: &Params) -> BoxFuture<'static, Result<Vectors, ApiError>>;
    /// How many prompt tokens a generation job of `messages` under
    /// `sampling` takes on this lane's model (its chat template and tools
    /// included): what `POST /v1/messages/count_tokens` answers. `None`:
    /// this embedder has no tokenizer of a generating model to count with
    /// (the cloud pass-through); the answer is then an estimate, labelled.
    fn count_prompt(
        &self,
        messages: &[ChatMessage],
        sampling: &Sampling,
    ) -> Option<Result<u64, ApiError>> {
        let _ = (messages, sampling);
        None
    }
    /// Called once when the model it embeds for is unloaded (the local
    /// lane stops its worker, waiting at most `grace`); `false`: it did
    /// not stop in time. Nothing to do by default.
    fn release(&self, grace: std::time::Duration) -> bool {
        let _ = grace;
        true
    }
}

/// A validated embeddings request.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The `model` asked for.
    pub model: String,
    /// The inputs, in order.
    pub inputs: Vec<Input>,
    /// `encoding_format: "base64"`.
    pub base64: bool,
    /// `dimensions`, when given.
    pub dimensions: Option<u64>,
}

/// `dimensions` is accepted only as the model's own width (the local
/// model cannot shorten its vectors).
pub fn check_dimensions(asked: Option<u64>, width: usize) -> Result<(), ApiError> {
    match asked {
        Some(d) if d != width as u64 => Err(ApiError::invalid(
            "dimensions",
            format!(
                "`dimensions` {d} is not supported: this model's embeddings have {width} dimensions, \
                 and it cannot give fewer (leave `dimensions` out, or send {width})"
            ),
        )
        .code("unsupported_value")),
        _ => Ok(()),
    }
}
