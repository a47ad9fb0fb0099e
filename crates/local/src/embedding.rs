//! Embeddings on the local lane, the caller's side: what an input is
//! ([`EmbedInput`]), what comes back ([`Embeddings`]), how a sequence's
//! token vectors become one ([`Pooling`]), and the checks an input passes
//! before it reaches the worker (tokenised here, on the caller's thread:
//! the model's tokenizer is thread-safe, and the worker's time is the
//! pool's).
//!
//! Decisions (llama-server's `--embeddings` where it has one):
//! - pooling is the GGUF's `{arch}.pooling_type` unless
//!   [`LocalConfig::pooling`](super::LocalConfig::pooling) overrides it; a
//!   model whose GGUF names none (every chat model) is pooled by `mean`
//!   (llama-server refuses such a model on `/v1/embeddings` until
//!   `--pooling` is given; we pick for it, and say so in
//!   [`EmbeddingInfo::pooling_source`]). `none` asked for explicitly (one
//!   vector per token) and `rank` (a reranker's scores) cannot give one
//!   vector per input: [`LocalError::CannotEmbed`];
//! - a text is tokenised as llama-server does for embeddings: the
//!   vocabulary's special tokens added (BOS/EOS/SEP as the GGUF says) and
//!   special-token text parsed; a token-id input is used as it is;
//! - every vector is L2-normalised, as OpenAI's are;
//! - an input must fit one decode of the embedding context
//!   ([`LocalConfig::embed_batch`](super::LocalConfig::embed_batch) tokens,
//!   at most the model's training context): a longer one is
//!   [`LocalError::EmbeddingTooLong`], nothing is truncated.
//!
//! This module must not touch a llama.cpp context (`embedder` does, on
//! the worker thread).

use super::LocalError;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// One input to embed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmbedInput {
    /// A text, tokenised by the model's tokenizer.
    Text(String),
    /// Token ids of the model's vocabulary, used as they are.
    Tokens(Vec<u32>),
}

impl From<&str> for EmbedInput {
    fn from(text: &str) -> Self {
        EmbedInput::Text(text.to_string())
    }
}

impl From<String> for EmbedInput {
    fn from(text: String) -> Self {
        EmbedInput::Text(text)
    }
}

impl From<Vec<u32>> for EmbedInput {
    fn from(tokens: Vec<u32>) -> Self {
        EmbedInput::Tokens(tokens)
    }
}

/// How the token vectors of one input become its vector (llama.cpp's
/// pooling types; llama-server's `--pooling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// No pooling: one vector per token (cannot answer an embeddings
    /// request: refused).
    None,
    /// The mean of the input's token vectors.
    Mean,
    /// The first token's vector (BERT's `[CLS]`).
    Cls,
    /// The last token's vector.
    Last,
    /// A reranker's score head (not an embedding: refused).
    Rank,
}

impl Pooling {
    /// The name used by the CLI, the config file and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    /// llama.cpp's number for it (`enum llama_pooling_type`).
    fn from_llama(value: u32) -> Option<Self> {
        Some(match value {
            0 => Pooling::None,
            1 => Pooling::Mean,
            2 => Pooling::Cls,
            3 => Pooling::Last,
            4 => Pooling::Rank,
            _ => return None,
        })
    }

    pub(super) fn to_llama(self) -> llama_cpp_2::context::params::LlamaPoolingType {
        use llama_cpp_2::context::params::LlamaPoolingType as P;
        match self {
            Pooling::None => P::None,
            Pooling::Mean => P::Mean,
            Pooling::Cls => P::Cls,
            Pooling::Last => P::Last,
            Pooling::Rank => P::Rank,
        }
    }
}

impl std::fmt::Display for Pooling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Pooling {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Pooling::None),
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            "rank" => Ok(Pooling::Rank),
            other => Err(format!(
                "unknown pooling {other:?} (expected none, mean, cls, last or rank)"
            )),
        }
    }
}

/// What the lane's embeddings are, known at start-up (no embedding
/// context exists until the first request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EmbeddingInfo {
    /// The pooling in effect.
    pub pooling: Pooling,
    /// Where it came from: `configured`, `model` (the GGUF's
    /// `pooling_type`) or `default (the model names none)`.
    pub pooling_source: String,
    /// The width of a vector (the model's `n_embd_out`).
    pub dimensions: usize,
    /// Most tokens one input may have.
    pub max_input_tokens: u32,
}

impl EmbeddingInfo {
    /// The settings for `model` under `configured` pooling and a decode
    /// of `embed_batch` tokens.
    pub(super) fn resolve(
        model: &LlamaModel,
        configured: Option<Pooling>,
        embed_batch: u32,
    ) -> Self {
        let (pooling, pooling_source) = match configured {
            Some(p) => (p, "configured".to_string()),
            None => match model_pooling(model) {
                Some(p) if p != Pooling::None => (p, "model".to_string()),
                _ => (Pooling::Mean, "default (the model names none)".to_string()),
            },
        };
        let train = model.n_ctx_train().max(1);
        Self {
            pooling,
            pooling_source,
            dimensions: usize::try_from(model.n_embd_out()).unwrap_or(0),
            max_input_tokens: embed_batch.clamp(1, train),
        }
    }

    /// Why this lane cannot give embeddings, if it cannot (by its pooling;
    /// llama.cpp may still refuse the context: `embedder`).
    pub(super) fn refusal(&self) -> Option<LocalError> {
        let detail = match self.pooling {
            Pooling::None => {
                "pooling none gives one vector per token, not one per input (use mean, cls or last)"
            }
            Pooling::Rank => "rank pooling is a reranker's score, not an embedding",
            _ => return None,
        };
        Some(LocalError::CannotEmbed {
            detail: detail.to_string(),
        })
    }
}

/// The GGUF's `{arch}.pooling_type`, if it names one llama.cpp knows.
fn model_pooling(model: &LlamaModel) -> Option<Pooling> {
    let arch = model.meta_val_str("general.architecture").ok()?;
    let value = model.meta_val_str(&format!("{arch}.pooling_type")).ok()?;
    Pooling::from_llama(value.trim().parse().ok()?)
}

/// llama.cpp's architectures that are encoders for embeddings: no
/// language-model head, so no text to generate.
pub const EMBEDDING_ARCHITECTURES: &[&str] = &[
    "bert",
    "nomic-bert",
    "nomic-bert-moe",
    "jina-bert-v2",
    "jina-bert-v3",
    "modern-bert",
    "neo-bert",
    "eurobert",
    "t5encoder",
];

/// The architecture of `model` when it is an embedding-only model: one of
/// llama.cpp's encoder architectures, or any whose GGUF says
/// `{arch}.attention.causal = false` and names a pooling (an encoder
/// converted under another name). `None` for a model that generates.
pub(super) fn embedding_only(model: &LlamaModel) -> Option<String> {
    let arch = model.meta_val_str("general.architecture").ok()?;
    let causal = model
        .meta_val_str(&format!("{arch}.attention.causal"))
        .ok()
        .map(|v| v.trim().to_string());
    let bidirectional = causal.as_deref() == Some("false");
    let pooled = model_pooling(model).is_some_and(|p| p != Pooling::None);
    (EMBEDDING_ARCHITECTURES.contains(&arch.as_str()) || (bidirectional && pooled)).then_some(arch)
}

/// Turns inputs into token sequences the embedder can decode, or the
/// first input's error.
pub(super) fn tokenize(
    model: &LlamaModel,
    info: &EmbeddingInfo,
    inputs: Vec<EmbedInput>,
) -> Result<Vec<Vec<LlamaToken>>, LocalError> {
    let vocab = model.vocab();
    let n_vocab = u32::try_from(vocab.n_tokens()).unwrap_or(0);
    inputs
        .into_iter()
        .enumerate()
        .map(|(index, input)| {
            let tokens = match input {
                // As `LocalLane::embedding_tokens` says.
                EmbedInput::Text(text) => vocab.tokenize(text.as_bytes(), true, true),
                EmbedInput::Tokens(ids) => {
                    if let Some(bad) = ids.iter().find(|&&id| id >= n_vocab) {
                        return Err(LocalError::EmbeddingInput {
                            index,
                            detail: format!(
                                "token id {bad} is not in the model's vocabulary of {n_vocab}"
                            ),
                        });
                    }
                    ids.into_iter().map(|id| LlamaToken(id as i32)).collect()
                }
            };
            if tokens.is_empty() {
                return Err(LocalError::EmbeddingInput {
                    index,
                    detail: "the input is empty".to_string(),
                });
            }
            let count = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
            if count > info.max_input_tokens {
                return Err(LocalError::EmbeddingTooLong {
                    index,
                    tokens: count,
                    limit: info.max_input_tokens,
                });
            }
            Ok(tokens)
        })
        .collect()
}

/// The embeddings of a request's inputs, in input order.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Embeddings {
    /// One L2-normalised vector per input.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens of each input (after tokenisation).
    pub input_tokens: Vec<u32>,
    /// Tokens of all inputs together.
    pub prompt_tokens: u32,
    /// The pooling that made them.
    pub pooling: Pooling,
}

/// An embeddings request on its way to the worker.
pub(super) struct EmbedJob {
    pub(super) tokens: Vec<Vec<LlamaToken>>,
    pub(super) reply: oneshot::Sender<Result<Embeddings, LocalError>>,
}

/// The pending result of [`LocalLane::submit_embed`](super::LocalLane::submit_embed):
/// `.await` it, or [`EmbedTicket::wait`]. Dropping it before the worker
/// reached the request drops the request.
#[derive(Debug)]
pub struct EmbedTicket {
    pub(super) rx: oneshot::Receiver<Result<Embeddings, LocalError>>,
}

impl EmbedTicket {
    /// A ticket already holding `result`.
    pub(super) fn ready(result: Result<Embeddings, LocalError>) -> Self {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(result);
        Self { rx }
    }

    /// Blocks until the embeddings are done. Must not be called inside an
    /// async runtime.
    pub fn wait(self) -> Result<Embeddings, LocalError> {
        self.rx
            .blocking_recv()
            .unwrap_or(Err(LocalError::WorkerGone))
    }
}

impl Future for EmbedTicket {
    type Output = Result<Embeddings, LocalError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(LocalError::WorkerGone)))
    }
}

/// Scales `v` to unit L2 norm (a zero vector stays zero).
pub(super) fn normalise(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        let scale = (1.0 / norm) as f32;
        v.iter_mut().for_each(|x| *x *= scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_vectors_have_unit_norm_and_zero_stays_zero() {
        let mut v = vec![3.0, 4.0];
        normalise(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
        let mut z = vec![0.0; 3];
        normalise(&mut z);
        assert_eq!(z, vec![0.0; 3]);
    }

    #[test]
    fn pooling_names_round_trip_and_unknown_ones_are_refused() {
        for p in [
            Pooling::None,
            Pooling::Mean,
            Pooling::Cls,
            Pooling::Last,
            Pooling::Rank,
        ] {
            assert_eq!(p.as_str().parse::<Pooling>(), Ok(p));
            assert_eq!(Pooling::from_llama(i32::from(p.to_llama()) as u32), Some(p));
        }
        assert!("max".parse::<Pooling>().unwrap_err().contains("max"));
    }
}
