//! GGUF model files: validation before llama.cpp sees them, inspection, and
//! generation of random-weight test models.
//!
//! - [`validate`] / [`inspect`]: parse a file's header, metadata and tensor
//!   table with every count bounds-checked (a hostile header is an error, not
//!   an allocation), then check what llama.cpp needs: tensor data inside the
//!   file and packed as llama.cpp expects, the architecture key, a consistent
//!   tokenizer (no duplicate tokens: llama.cpp aborts the process on those).
//!   Tensor data is never read, so a 145 MB model checks in milliseconds.
//! - [`generate`]: deterministic llama-architecture models with a working
//!   tokenizer and chat template ([`write_model`], [`Preset`]).
//!
//! This module only reads and writes bytes; it never calls llama.cpp.
//!
//! ```no_run
//! use std::path::Path;
//! use edgecloud::gguf::{validate, write_model, Preset};
//!
//! let path = Path::new("/tmp/tiny.gguf");
//! write_model(path, Preset::Tiny, 42)?;
//! let info = validate(path)?;
//! assert_eq!(info.architecture.as_deref(), Some("llama"));
//! # Ok::<(), edgecloud::gguf::GgufError>(())
//! ```

mod error;
mod format;
pub mod generate;
mod reader;
mod validate;
mod vocab;
mod writer;

pub use error::GgufError;
pub use generate::{write_model, Preset, UnknownPreset};
pub use validate::{inspect, validate, Inspection, ModelInfo};
