//! `scripts/ensure-deps` looks for the libclang that bindgen loads
//! (`libclang.so*`, `libclang-N.so*`), not Debian's `libclang-cpp.so.N`, a
//! different library a base image has without libclang itself.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::models::fresh_path;

/// A fixture folder holding empty files with these names.
fn lib_dir(name: &str, files: &[&str]) -> std::path::PathBuf {
    let dir = fresh_path(name);
    fs::create_dir_all(&dir).unwrap();
    for f in files {
        fs::write(dir.join(f), b"").unwrap();
    }
    dir
}

/// (exit code, stdout) of `scripts/ensure-deps --check-libclang DIRS`.
fn check(dirs: &[&Path]) -> (Option<i32>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ensure-deps");
    let out = Command::new(script)
        .arg("--check-libclang")
        .args(dirs)
        .output()
        .expect("scripts/ensure-deps runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

#[test]
fn libclang_cpp_alone_is_missing() {
    let dir = lib_dir(
        "libclang-cpp-only",
        &["libclang-cpp.so.14", "libclang-cpp.so"],
    );
    assert_eq!(check(&[&dir]), (Some(1), "libclang: missing".into()));
}

#[test]
fn versioned_and_plain_libclang_are_found() {
    for file in [
        "libclang-14.so.1",
        "libclang-14.so",
        "libclang.so",
        "libclang.so.1",
    ] {
        let dir = lib_dir(&format!("libclang-{file}"), &["libclang-cpp.so.14", file]);
        assert_eq!(
            check(&[&dir]),
            (Some(0), "libclang: found".into()),
            "{file}"
        );
    }
}

#[test]
fn every_folder_is_searched() {
    let empty = lib_dir("libclang-none", &[]);
    let with = lib_dir("libclang-second", &["libclang-16.so.16"]);
    assert_eq!(check(&[&empty]), (Some(1), "libclang: missing".into()));
    assert_eq!(check(&[&empty, &with]), (Some(0), "libclang: found".into()));
}
