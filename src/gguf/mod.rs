//! GGUF files: validation before llama.cpp sees them, inspection, and generation of test models.
//! (Placeholder until the reader lands.)

use std::path::Path;

/// Why a GGUF file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// The path does not exist.
    #[error("{0}: no such file")]
    Missing(String),
}

/// Checks a model file before llama.cpp sees it.
pub fn validate(path: &Path) -> Result<(), GgufError> {
    if !path.is_file() {
        return Err(GgufError::Missing(path.display().to_string()));
    }
    Ok(())
}
