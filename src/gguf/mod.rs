//! GGUF files: validation before llama.cpp sees them, inspection, and generation of test models.
