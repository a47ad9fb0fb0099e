//! Integration tests: gguf.
