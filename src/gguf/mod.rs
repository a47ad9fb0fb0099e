//! GGUF model files: validation before llama.cpp sees them, inspection, and
//! generation of random-weight test models.
//!
//! - [`generate`]: deterministic llama-architecture models with a working
//!   tokenizer and chat template ([`write_model`], [`Preset`]).
//!
//! This module only reads and writes bytes; it never calls llama.cpp.

mod error;
#[allow(dead_code)] // the reader (next commit) uses the rest of the tables
mod format;
pub mod generate;
mod vocab;
mod writer;

pub use error::GgufError;
pub use generate::{write_model, Preset, UnknownPreset};
mod validate_stub;
pub use validate_stub::validate;
