//! Temporary stand-in until the GGUF reader lands: only checks the path.

use super::GgufError;
use std::path::Path;

/// Checks a model file before llama.cpp sees it (path only, for now).
pub fn validate(path: &Path) -> Result<(), GgufError> {
    if !path.exists() {
        return Err(GgufError::NotFound {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}
