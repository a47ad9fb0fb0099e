//! Records what a benchmark report needs to know about this build: the git
//! commit, the `-C target-cpu` the Rust flags asked for (llama-cpp-sys-2
//! builds llama.cpp with GGML_NATIVE exactly when it is `native`), and the
//! llama-cpp-sys-2 version from Cargo.lock. Every step is optional: without
//! git or a lock file the values are simply absent.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    portable_rpath();
    println!("cargo:rerun-if-changed=Cargo.lock");
    if let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) {
        println!("cargo:rustc-env=EDGECLOUD_GIT_COMMIT={commit}");
        // Rebuild when HEAD moves: HEAD itself, the branch it names, and
        // packed refs (paths resolved by git, so worktrees work too).
        let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(branch);
        }
        for name in watch {
            if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
                if Path::new(&path).exists() {
                    println!("cargo:rerun-if-changed={path}");
                }
            }
        }
    }
    let target_cpu = std::env::var("CARGO_ENCODED_RUSTFLAGS")
        .unwrap_or_default()
        .split('\x1f')
        .filter_map(|flag| flag.split("target-cpu=").nth(1).map(str::to_string))
        .next_back()
        .unwrap_or_default();
    println!("cargo:rustc-env=EDGECLOUD_TARGET_CPU={target_cpu}");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Ok(out) = Command::new(rustc).arg("--version").output() {
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !version.is_empty() {
            println!("cargo:rustc-env=EDGECLOUD_RUSTC_VERSION={version}");
        }
    }
    if let Ok(lock) = std::fs::read_to_string("Cargo.lock") {
        let mut lines = lock.lines();
        while let Some(line) = lines.next() {
            if line.trim() == "name = \"llama-cpp-sys-2\"" {
                if let Some(v) = lines.next().and_then(|l| l.split('"').nth(1)) {
                    println!("cargo:rustc-env=EDGECLOUD_LLAMA_SYS_VERSION={v}");
                }
                break;
            }
        }
    }
}

/// The portable build links ggml and llama.cpp as shared libraries and
/// keeps them beside the binary: its RUNPATH is `$ORIGIN`, so the folder can
/// move anywhere. Examples, tests and benches sit one folder further down in
/// the target directory, so they also look one folder up.
///
/// ggml must also be built to load its backends at run time
/// (`GGML_BACKEND_DL=ON`, forwarded to CMake by llama-cpp-sys-2) without a
/// CPU backend of its own (`GGML_CPU=OFF`: scripts/build-portable builds the
/// CPU variants from the same source). Without those the feature would give
/// a binary with one fixed CPU level that claims to be portable, so it is
/// refused here.
fn portable_rpath() {
    println!("cargo:rerun-if-env-changed=GGML_BACKEND_DL");
    println!("cargo:rerun-if-env-changed=GGML_CPU");
    if std::env::var_os("CARGO_FEATURE_PORTABLE").is_none() {
        return;
    }
    let on = |var: &str, want: &str| std::env::var(var).is_ok_and(|v| v.eq_ignore_ascii_case(want));
    if !on("GGML_BACKEND_DL", "ON") || !on("GGML_CPU", "OFF") {
        panic!(
            "the `portable` feature needs GGML_BACKEND_DL=ON and GGML_CPU=OFF in the \
             environment (ggml then loads its backends at run time); build it with \
             scripts/build-portable"
        );
    }
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if !matches!(os.as_str(), "linux" | "freebsd") {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN");
    for kind in ["examples", "tests", "benches"] {
        println!("cargo:rustc-link-arg-{kind}=-Wl,-rpath,$ORIGIN:$ORIGIN/..");
    }
}
