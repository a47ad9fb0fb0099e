//! Records what a benchmark report needs to know about this build: the git
//! commit, the `-C target-cpu` the Rust flags asked for (llama-cpp-sys-2
//! builds llama.cpp with GGML_NATIVE exactly when it is `native`), the rustc
//! and llama-cpp-sys-2 versions. Every step is optional: without git or a
//! lock file the values are simply absent. Each step runs only with the cargo
//! feature that uses it: llama.cpp's (`target-cpu`, the llama-cpp-sys-2
//! version, the portable link flags) with `local`, the commit and rustc
//! with `bench` (the only reader, `bench::BuildInfo`).
//!
//! Keeping it cheap: cargo rebuilds the library (and everything that links
//! it) whenever this script runs again (cargo#3404), so it must not run on a
//! bare `git commit`. It watches the build's inputs instead (`src/`,
//! `crates/`, `Cargo.toml`, `Cargo.lock`, this file): it runs again exactly when the
//! sources change, and the commit it records is HEAD then, marked `-dirty`
//! when the tracked sources differed from HEAD. A build made before its
//! changes were committed thus says `<parent>-dirty` until the sources next
//! change: true of that binary, never a commit it was not built from.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    // Always at least one rerun directive: without any, cargo reruns the
    // script (and so rebuilds the library) when any file of the package
    // changes, README and tests included.
    println!("cargo:rerun-if-changed=build.rs");
    if feature("LOCAL") {
        llama_build_info();
    }
    portable_rpath();
    if feature("BENCH") {
        commit_and_rustc();
    }
}

fn feature(name: &str) -> bool {
    std::env::var_os(format!("CARGO_FEATURE_{name}")).is_some()
}

/// The inputs of the build: when one changes, the recorded commit is
/// looked at again.
const SOURCES: [&str; 4] = ["src", "crates", "Cargo.toml", "Cargo.lock"];

fn commit_and_rustc() {
    for path in SOURCES {
        if Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) {
        let mut status = vec![
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "build.rs",
        ];
        status.extend(SOURCES);
        let dirty = git(&status).is_none_or(|changes| !changes.is_empty());
        let mark = if dirty { "-dirty" } else { "" };
        println!("cargo:rustc-env=EDGECLOUD_GIT_COMMIT={commit}{mark}");
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Ok(out) = Command::new(rustc).arg("--version").output() {
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !version.is_empty() {
            println!("cargo:rustc-env=EDGECLOUD_RUSTC_VERSION={version}");
        }
    }
}

/// The `-C target-cpu` llama.cpp's CPU kernels are built for, and the
/// llama-cpp-sys-2 version (which fixes the llama.cpp source) from
/// Cargo.lock.
fn llama_build_info() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let target_cpu = std::env::var("CARGO_ENCODED_RUSTFLAGS")
        .unwrap_or_default()
        .split('\x1f')
        .filter_map(|flag| flag.split("target-cpu=").nth(1).map(str::to_string))
        .next_back()
        .unwrap_or_default();
    println!("cargo:rustc-env=EDGECLOUD_TARGET_CPU={target_cpu}");
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
    if !feature("PORTABLE") {
        return;
    }
    println!("cargo:rerun-if-env-changed=GGML_BACKEND_DL");
    println!("cargo:rerun-if-env-changed=GGML_CPU");
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
