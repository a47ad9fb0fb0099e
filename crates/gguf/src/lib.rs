//! GGUF model files: validation before llama.cpp sees them, inspection, and
//! generation of random-weight test models.
//!
//! - [`validate`] / [`inspect`]: parse a file's header, metadata and tensor
//!   table with every count bounds-checked (a hostile header is an error, not
//!   an allocation), then check what llama.cpp needs: tensor data inside the
//!   file and packed as llama.cpp expects, the architecture key,
//!   hyperparameters and tensor types llama.cpp can compute with, a
//!   consistent tokenizer. Every value llama.cpp is known to abort or crash
//!   the process on is its own named [`GgufError`] (duplicate tokens, KV
//!   heads that do not divide the heads, NaN norm epsilons, I8 matrices,
//!   context length 0, `no_vocab`, ...). Tensor data is never read, so a
//!   145 MB model checks in milliseconds.
//! - [`generate`]: deterministic llama-architecture models with a working
//!   tokenizer and chat template ([`write_model`], [`Preset`]), and
//!   deliberately broken ones for tests ([`write_model_with`], [`Tweak`]).
//!
//! This module only reads and writes bytes; it never calls llama.cpp.
//!
//! ```no_run
//! use std::path::Path;
//! use edgecloud_gguf::{validate, write_model, Preset};
//!
//! let path = Path::new("/tmp/tiny.gguf");
//! write_model(path, Preset::Tiny, 42)?;
//! let info = validate(path)?;
//! assert_eq!(info.architecture.as_deref(), Some("llama"));
//! # Ok::<(), edgecloud_gguf::GgufError>(())
//! ```

mod error;
mod format;
pub mod generate;
mod hparams;
mod reader;
mod tensor_roles;
mod validate;
mod vocab;
mod writer;

pub use error::GgufError;
pub use generate::{write_model, write_model_with, Preset, Tweak, UnknownPreset};
pub use validate::{inspect, validate, Inspection, ModelInfo};
