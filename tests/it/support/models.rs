//! Generated GGUF models for the integration tests: each is written once per
//! test process into a private temporary directory, and helpers to write
//! arbitrary (malformed) bytes to fresh files.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use edgecloud::gguf::{write_model, Preset};

/// The seed every shared test model is generated with.
pub const SEED: u64 = 42;

/// This process's scratch directory (created on first use). Several test
/// processes may run at once, so the directory is keyed by process id.
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("edgecloud-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir is writable");
        dir
    })
}

fn generated(cell: &'static OnceLock<PathBuf>, preset: Preset) -> &'static Path {
    cell.get_or_init(|| {
        let path = scratch_dir().join(format!("{preset}.gguf"));
        write_model(&path, preset, SEED).expect("generating a test model");
        path
    })
}

/// The tiny random-weight model (about 0.5 MB, generated once per process).
pub fn tiny_model() -> &'static Path {
    static TINY: OnceLock<PathBuf> = OnceLock::new();
    generated(&TINY, Preset::Tiny)
}

/// The SmolLM2-135M-shaped Q8_0 model (about 145 MB, generated once per
/// process); for benchmarks and slow tests.
pub fn bench_model() -> &'static Path {
    static BENCH: OnceLock<PathBuf> = OnceLock::new();
    generated(&BENCH, Preset::Bench135m)
}

/// A fresh, unique path in the scratch directory (nothing is created).
pub fn fresh_path(name: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    scratch_dir().join(format!("{n}-{name}"))
}

/// Writes `bytes` to a fresh file and returns its path.
pub fn write_temp(name: &str, bytes: &[u8]) -> PathBuf {
    let path = fresh_path(name);
    std::fs::write(&path, bytes).expect("temp dir is writable");
    path
}
