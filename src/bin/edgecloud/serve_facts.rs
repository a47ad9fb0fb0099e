//! What `edgecloud serve` tells the APIs that describe models (Ollama's
//! `/api/tags`, `/api/show`, `/api/ps`) about each local model: its GGUF
//! header's facts (from the lane that loaded it, or from the file for a
//! model not loaded yet), and the file's SHA-256, computed the first time
//! a listing asks (a few hundred MB take a second: not at start). It must
//! not load models.

use edgecloud::gguf::ModelInfo;
use edgecloud::local::{LocalLane, EMBEDDING_ARCHITECTURES};
use edgecloud::serve::ModelFacts;
use std::path::Path;

/// The facts of a model from its file's header (`None`: the header does
/// not read; the model is then listed by name alone).
pub(crate) fn from_file(path: &Path) -> Option<ModelFacts> {
    let info = edgecloud::gguf::validate(path).ok()?;
    let generates = !info
        .architecture
        .as_deref()
        .is_some_and(|a| EMBEDDING_ARCHITECTURES.contains(&a));
    Some(facts(path, &info, generates))
}

/// The facts of the model `lane` loaded: its header as the lane's start
/// read it, whether it generates, its context and memory.
pub(crate) fn from_lane(path: &Path, lane: &LocalLane) -> ModelFacts {
    let info = lane.info();
    let mut f = match &info.file {
        Some(header) => facts(path, header, lane.can_generate()),
        None => from_file(path).unwrap_or_else(ModelFacts::generative),
    };
    f.generates = lane.can_generate();
    f.serving_context = Some(u64::from(info.context_size));
    f.memory_bytes = Some(info.memory_bytes).filter(|&b| b > 0);
    f
}

fn facts(path: &Path, info: &ModelInfo, generates: bool) -> ModelFacts {
    let mut f = if generates {
        ModelFacts::generative()
    } else {
        ModelFacts::default()
    };
    f.path = Some(path.to_path_buf());
    f.size = info.file_size;
    f.modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    f.architecture = info.architecture.clone();
    f.parameters = Some(info.parameters).filter(|&n| n > 0);
    f.quantization = Some(info.quantization.clone());
    f.context_length = info.context_length;
    f.embedding_length = info.embedding_length;
    f.chat_template = info.chat_template_text.clone();
    let file = path.to_path_buf();
    f.digest_with(move || {
        edgecloud_bench::sha256_file(&file)
            .ok()
            .map(|hex| format!("sha256:{hex}"))
    })
}
