//! llama.cpp's process-wide state: its backend, initialised once (the log
//! hook installed and the portable build's ggml backends loaded first),
//! and the lock that serialises model loads and context creation. The
//! worker and the embeddings context both take them from here; this
//! module must not load models itself.

use super::ffi;
use llama_cpp_2::llama_backend::LlamaBackend;
use std::sync::{Mutex, OnceLock};

/// llama.cpp's backend is initialised once per process and shared.
pub(super) fn backend() -> &'static LlamaBackend {
    static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();
    BACKEND.get_or_init(|| {
        ffi::install_log_hook();
        // The portable build's ggml backends must be loaded before llama.cpp
        // looks for devices.
        super::devices::ensure_loaded();
        LlamaBackend::init().expect("llama.cpp backend is initialised only here, once")
    })
}

/// Serialises model loads and context creation: creating contexts from one
/// model in parallel is unsound, and the recent-log record must belong to
/// one load at a time.
pub(super) static LOAD_LOCK: Mutex<()> = Mutex::new(());
