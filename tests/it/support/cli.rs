//! Running the real `edgecloud` binary and reading its JSON output.

use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

/// The binary under test. `EDGECLOUD_BIN` may point at a copy: in a target
/// directory shared by several checkouts, the uplifted
/// `target/release/edgecloud` can be replaced by another checkout's build
/// between cargo's build and the test's run.
pub fn bin() -> PathBuf {
    std::env::var_os("EDGECLOUD_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_edgecloud").into())
}

/// stdout parsed as one JSON object; on failure the panic shows both streams.
pub fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
