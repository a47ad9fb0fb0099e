//! Rules about the source tree itself, checked against the files: the only
//! places `unsafe` is allowed (and that docs/DESIGN.md names them), a
//! declared minimum Rust (`rust-version`) no older than what the code uses,
//! and a docs/layout.md entry for every top-level module.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Paths (from the root) and contents of every Rust file of the
/// workspace's crates: `src/` (the façade) and `crates/*/src/`.
fn sources() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    for krate in crates() {
        rust_files(&krate.join("src"), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root()).unwrap().display().to_string();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[test]
fn unsafe_opt_outs_are_the_documented_four() {
    let opted: Vec<String> = sources()
        .into_iter()
        .filter(|(_, text)| text.contains("#![allow(unsafe_code)]"))
        .map(|(path, _)| path)
        .collect();
    assert_eq!(
        opted,
        [
            "crates/capi/src/lib.rs",
            "crates/core/src/sched.rs",
            "crates/local/src/ffi.rs",
            "crates/local/src/simd.rs",
        ],
        "a new opt-out of `unsafe_code = \"deny\"` must be named in docs/DESIGN.md and here"
    );
    let design = std::fs::read_to_string(root().join("docs/DESIGN.md")).unwrap();
    for path in &opted {
        assert!(
            design.contains(&format!("`{path}`")),
            "docs/DESIGN.md does not name {path}"
        );
    }
}

/// Language features the code uses, and the Rust release that made each
/// stable: a `rust-version` below one of them would be a false promise.
const NEEDS: &[(&str, (u32, u32))] = &[
    // AVX-512 target features.
    ("#[target_feature(enable = \"avx512f\")]", (1, 89)),
    // `Option::is_none_or`.
    (".is_none_or(", (1, 82)),
];

#[test]
fn declared_rust_version_covers_what_the_code_uses() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let declared = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("Cargo.toml declares a rust-version");
    let mut parts = declared.split('.').map(|p| p.parse::<u32>().unwrap());
    let declared = (parts.next().unwrap(), parts.next().unwrap_or(0));
    let sources = sources();
    for (pattern, since) in NEEDS {
        if let Some((path, _)) = sources.iter().find(|(_, text)| text.contains(pattern)) {
            assert!(
                declared >= *since,
                "{path} uses `{pattern}`, stable since {}.{}, but rust-version is {}.{}",
                since.0,
                since.1,
                declared.0,
                declared.1
            );
        }
    }
}

/// The folders of the workspace's crates under `crates/`.
fn crates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    dirs
}

/// Every top-level module of every crate (each `mod` line of its lib.rs)
/// has an entry in docs/layout.md, as `DIR/NAME/` or `DIR/NAME.rs` with
/// DIR the crate's `src` folder (`src` for the façade, `crates/X/src`).
#[test]
fn layout_names_every_top_level_module() {
    let layout = std::fs::read_to_string(root().join("docs/layout.md")).unwrap();
    let mut dirs = vec![PathBuf::from("src")];
    dirs.extend(
        crates()
            .into_iter()
            .map(|c| c.strip_prefix(root()).unwrap().join("src")),
    );
    let mut missing = Vec::new();
    let mut seen = 0;
    for dir in dirs {
        let lib = std::fs::read_to_string(root().join(&dir).join("lib.rs")).unwrap();
        let dir = dir.display().to_string();
        assert!(
            layout.contains(&format!("`{dir}/lib.rs`")),
            "docs/layout.md has no entry for the crate `{dir}/lib.rs`"
        );
        for m in lib
            .lines()
            .map(str::trim)
            .filter_map(|l| l.strip_prefix("pub ").unwrap_or(l).strip_prefix("mod "))
            .filter_map(|rest| rest.strip_suffix(';'))
        {
            seen += 1;
            if !layout.contains(&format!("{dir}/{m}/"))
                && !layout.contains(&format!("{dir}/{m}.rs"))
            {
                missing.push(format!("{dir}/{m}"));
            }
        }
    }
    assert!(seen > 30, "read the mod lines of every lib.rs: {seen}");
    assert!(
        missing.is_empty(),
        "docs/layout.md has no entry for these top-level modules: {missing:?}"
    );
}
