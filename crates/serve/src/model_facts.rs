//! What the server says about a local model it serves, for the APIs that
//! describe models (Ollama's `/api/tags`, `/api/show`, `/api/ps`):
//! [`ModelFacts`], given by whoever builds the server (it reads the
//! model's GGUF header; serve reads no model file), and the file's digest,
//! computed once on first use off the runtime's threads (hashing a model
//! file takes a second for a few hundred MB). It must not load models or
//! answer requests.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

/// How a model's digest is computed (`sha256:` and hex), once.
type DigestFn = dyn Fn() -> Option<String> + Send + Sync;

/// Facts about one local model, as its GGUF file gives them. Every field
/// is optional: a model without facts is listed with its name alone.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ModelFacts {
    /// Its file.
    pub path: Option<PathBuf>,
    /// The file's size in bytes.
    pub size: u64,
    /// When the file last changed.
    pub modified: Option<SystemTime>,
    /// `general.architecture` (`llama`, `qwen2`): Ollama's `family`.
    pub architecture: Option<String>,
    /// Its weights, as the file counts them.
    pub parameters: Option<u64>,
    /// Its file type (`Q4_1`, `Q4_K_M`).
    pub quantization: Option<String>,
    /// The context it was trained for (`<arch>.context_length`).
    pub context_length: Option<u64>,
    /// The context each request gets here (the lane's context size).
    pub serving_context: Option<u64>,
    /// `<arch>.embedding_length`.
    pub embedding_length: Option<u64>,
    /// Its chat template's text (`tokenizer.chat_template`).
    pub chat_template: Option<String>,
    /// It generates text (an embedding-only model does not).
    pub generates: bool,
    /// What it holds in memory once loaded (weights and KV cache), when
    /// known.
    pub memory_bytes: Option<u64>,
    digest: Option<Arc<Digest>>,
}

struct Digest {
    compute: Box<DigestFn>,
    value: tokio::sync::OnceCell<Option<String>>,
}

impl fmt::Debug for ModelFacts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelFacts")
            .field("path", &self.path)
            .field("size", &self.size)
            .field("architecture", &self.architecture)
            .field("parameters", &self.parameters)
            .field("quantization", &self.quantization)
            .field("generates", &self.generates)
            .finish_non_exhaustive()
    }
}

impl ModelFacts {
    /// Facts of a model that generates text, nothing else known yet.
    pub fn generative() -> Self {
        Self {
            generates: true,
            ..Self::default()
        }
    }

    /// Computes the digest with `compute` (`sha256:` and the file's hex
    /// SHA-256), the first time a listing needs it.
    pub fn digest_with(
        mut self,
        compute: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.digest = Some(Arc::new(Digest {
            compute: Box::new(compute),
            value: tokio::sync::OnceCell::new(),
        }));
        self
    }

    /// The digest, computed on a blocking thread the first time.
    pub(crate) async fn digest(&self) -> Option<String> {
        let d = self.digest.clone()?;
        d.value
            .get_or_init(|| async {
                let worker = d.clone();
                tokio::task::spawn_blocking(move || (worker.compute)())
                    .await
                    .ok()
                    .flatten()
            })
            .await
            .clone()
    }

    /// What the model can do, as Ollama names it: `completion` and
    /// `tools` for a model that generates (every generating model takes
    /// tools here: its template's own syntax, or the tools in its system
    /// prompt), and `thinking` for one whose chat template thinks
    /// (writes `<think>`: its thinking is reported apart, see
    /// `edgecloud_core::reasoning`); `embedding` for one that only embeds.
    pub(crate) fn capabilities(&self) -> Vec<&'static str> {
        if !self.generates {
            return vec!["embedding"];
        }
        let thinks = self
            .chat_template
            .as_deref()
            .is_some_and(|t| t.contains(edgecloud_core::reasoning::THINK_OPEN));
        let mut caps = vec!["completion", "tools"];
        if thinks {
            caps.push("thinking");
        }
        caps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn the_digest_is_computed_once() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let facts = ModelFacts::generative().digest_with(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Some("sha256:ab".into())
        });
        let copy = facts.clone();
        assert_eq!(facts.digest().await.as_deref(), Some("sha256:ab"));
        assert_eq!(copy.digest().await.as_deref(), Some("sha256:ab"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(ModelFacts::default().digest().await, None);
        assert_eq!(facts.capabilities(), ["completion", "tools"]);
        assert_eq!(ModelFacts::default().capabilities(), ["embedding"]);
    }
}
