//! `-m REFERENCE`: `ollama:` from a real Ollama-layout store, `hf:` from a
//! real Hugging Face cache layout and llama.cpp's cache (both built here,
//! around the generated tiny model), and `hf:` downloads from the
//! loopback stand-in Hub (`support::hub`, reached through `HF_ENDPOINT`).
//! Every run of the binary gets a private `HOME` and none of the caller's
//! `HF_*`/`OLLAMA_*`/`LLAMA_CACHE` variables, so nothing outside the test's
//! folders is read or written, and nothing reaches the internet.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

use edgecloud::gguf::{write_model_with, Preset, Tweak};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::cli::{bin, json_of};
use crate::support::hub::{hex, HubFile, HubRepo, StandInHub, TOKEN};
use crate::support::models::{fresh_path, tiny_model, SEED};

const CLEARED: &[&str] = &[
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_ENDPOINT",
    "HF_TOKEN",
    "HF_TOKEN_PATH",
    "HF_HUB_OFFLINE",
    "OLLAMA_MODELS",
    "LLAMA_CACHE",
    "XDG_CACHE_HOME",
    "EDGECLOUD_MODEL",
    "EDGECLOUD_CONFIG",
];

fn edgecloud(args: &[&str], env: &[(&str, &str)]) -> Output {
    let home = fresh_path("home");
    fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new(bin());
    for var in CLEARED {
        cmd.env_remove(var);
    }
    cmd.env("HOME", &home)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the edgecloud binary runs")
}

/// [`edgecloud`] from async tests (the stand-in Hub runs on their runtime).
async fn edgecloud_async(args: &[&str], env: &[(&str, &str)]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        edgecloud(&args, &env)
    })
    .await
    .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The tiny model without a chat template of its own.
fn tiny_without_template() -> PathBuf {
    let path = fresh_path("no-template.gguf");
    write_model_with(
        &path,
        Preset::Tiny,
        SEED,
        &[Tweak::Remove("tokenizer.chat_template".into())],
    )
    .unwrap();
    path
}

/// A second, different tiny model (another seed).
fn other_tiny() -> PathBuf {
    let path = fresh_path("other.gguf");
    write_model_with(&path, Preset::Tiny, SEED + 1, &[]).unwrap();
    path
}

/// Writes a blob into an Ollama store; returns its digest (`sha256:HEX`).
fn ollama_blob(store: &Path, bytes: &[u8]) -> (String, PathBuf) {
    let hash = sha256_hex(bytes);
    let path = store.join("blobs").join(format!("sha256-{hash}"));
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, bytes).unwrap();
    (format!("sha256:{hash}"), path)
}

/// An Ollama store as `ollama pull` leaves it: blobs named by digest, and a
/// manifest (config, model, template and params layers) per name and tag.
fn ollama_store(models: &[(&str, &Path, Option<&str>)]) -> (PathBuf, Vec<PathBuf>) {
    let store = fresh_path("ollama-models");
    let mut blobs = Vec::new();
    for (name, model, template) in models {
        let bytes = fs::read(model).unwrap();
        let (model_digest, blob) = ollama_blob(&store, &bytes);
        let (config_digest, _) = ollama_blob(&store, br#"{"model_format":"gguf"}"#);
        let (params_digest, _) = ollama_blob(&store, br#"{"stop":["<|eot_id|>"]}"#);
        let mut layers = vec![
            json!({"mediaType": "application/vnd.ollama.image.model", "digest": model_digest, "size": bytes.len()}),
            json!({"mediaType": "application/vnd.ollama.image.params", "digest": params_digest, "size": 23}),
        ];
        if let Some(t) = template {
            let (digest, _) = ollama_blob(&store, t.as_bytes());
            layers.push(json!({"mediaType": "application/vnd.ollama.image.template", "digest": digest, "size": t.len()}));
        }
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": config_digest, "size": 23},
            "layers": layers,
        });
        let path = store.join("manifests").join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, manifest.to_string()).unwrap();
        blobs.push(blob);
    }
    (store, blobs)
}

/// Every file under `dir` with its size and modification time.
fn snapshot_of(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let m = fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.push((e.path(), m.len(), m.modified().unwrap()));
        }
    }
    out.sort();
    out
}

const LLAMA3_TEMPLATE: &str = "{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n\
{{ .System }}<|eot_id|>{{ end }}<|start_header_id|>user<|end_header_id|>\n\n\
{{ .Prompt }}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";

#[test]
fn ollama_references_resolve_read_only_from_the_store() {
    let bare = tiny_without_template();
    let (store, blobs) = ollama_store(&[
        (
            "registry.ollama.ai/library/tiny/latest",
            &bare,
            Some(LLAMA3_TEMPLATE),
        ),
        ("hf.co/org/repo/Q8_0", tiny_model(), Some(LLAMA3_TEMPLATE)),
        ("registry.ollama.ai/user/model/v1", tiny_model(), None),
    ]);
    let before = snapshot_of(&store);
    let env = [("OLLAMA_MODELS", store.to_str().unwrap())];

    // The model blob is what reports name; the manifest's template stands in
    // for the one the GGUF lacks.
    let out = edgecloud(
        &[
            "local",
            "-m",
            "ollama:tiny",
            "--prompt",
            "hi",
            "--max-tokens",
            "2",
            "--probe",
            "off",
            "--json",
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = json_of(&out);
    assert_eq!(report["model"], blobs[0].to_str().unwrap());
    assert_eq!(report["chat_template"], "configured");
    let err = stderr(&out);
    assert!(
        err.contains(&format!("ollama:tiny is {}", blobs[0].display())),
        "{err}"
    );
    assert!(
        err.contains("like llama.cpp's llama3; used: the GGUF has none"),
        "{err}"
    );

    // A GGUF with its own template keeps it; the layer is only reported.
    let out = edgecloud(
        &["model", "inspect", "ollama:hf.co/org/repo:Q8_0", "--json"],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["path"], blobs[1].to_str().unwrap());
    let out = edgecloud(
        &[
            "local",
            "-m",
            "ollama:hf.co/org/repo:Q8_0",
            "--prompt",
            "hi",
            "--max-tokens",
            "1",
            "--probe",
            "off",
            "--json",
        ],
        &env,
    );
    assert_eq!(json_of(&out)["chat_template"], "model", "{}", stderr(&out));
    assert!(stderr(&out).contains("not used: the GGUF has its own"));

    // Namespaced names, and EDGECLOUD_MODEL takes references too.
    let out = edgecloud(&["model", "fetch", "ollama:user/model:v1"], &env);
    assert_eq!(stdout(&out), blobs[2].to_str().unwrap(), "{}", stderr(&out));
    let out = edgecloud(
        &["config", "show", "--json"],
        &[env[0], ("EDGECLOUD_MODEL", "ollama:User/Model:V1")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        json_of(&out)["config"]["local"]["model"],
        blobs[2].to_str().unwrap()
    );

    // Not pulled: one sentence that says what to do; exit 1.
    let out = edgecloud(&["model", "inspect", "ollama:qwen2.5:0.5b"], &env);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: ollama:qwen2.5:0.5b is not in Ollama's store ("),
        "{err}"
    );
    assert!(
        err.contains("run `ollama pull qwen2.5:0.5b` first"),
        "{err}"
    );
    // No store at all.
    let out = edgecloud(
        &["model", "inspect", "ollama:tiny"],
        &[("OLLAMA_MODELS", "/nonexistent/ollama")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no Ollama store found (looked in /nonexistent/ollama)"));
    // Malformed: a usage error.
    let out = edgecloud(&["model", "inspect", "ollama:a/b/c/d"], &env);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("`ollama:a/b/c/d` is not a valid model reference"));

    // Read-only: the store is as it was, to the modification time.
    assert_eq!(snapshot_of(&store), before);
}

#[test]
fn an_ollama_manifest_whose_blob_is_missing_is_a_clear_failure() {
    let (store, blobs) =
        ollama_store(&[("registry.ollama.ai/library/tiny/latest", tiny_model(), None)]);
    fs::remove_file(&blobs[0]).unwrap();
    let out = edgecloud(
        &["model", "inspect", "ollama:tiny"],
        &[("OLLAMA_MODELS", store.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("cannot be used: its model blob"), "{err}");
    assert!(err.contains("is missing"), "{err}");
}

/// A Hugging Face hub cache as `huggingface_hub` writes it: blobs by hash,
/// a snapshot per commit whose files are relative symlinks into blobs, and
/// `refs/main` naming the commit.
fn hf_cache(repo: &str, commit: &str, files: &[(&str, &Path)]) -> (PathBuf, PathBuf) {
    let cache = fresh_path("hf-hub");
    let dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    let snapshot = dir.join("snapshots").join(commit);
    for (name, model) in files {
        let bytes = fs::read(model).unwrap();
        let hash = sha256_hex(&bytes);
        let blob = dir.join("blobs").join(&hash);
        fs::create_dir_all(blob.parent().unwrap()).unwrap();
        fs::write(&blob, &bytes).unwrap();
        let link = snapshot.join(name);
        fs::create_dir_all(link.parent().unwrap()).unwrap();
        let ups = "../".repeat(2 + name.matches('/').count());
        std::os::unix::fs::symlink(format!("{ups}blobs/{hash}"), &link).unwrap();
    }
    fs::create_dir_all(dir.join("refs")).unwrap();
    fs::write(dir.join("refs/main"), commit).unwrap();
    (cache, snapshot)
}

#[test]
fn hf_references_resolve_from_the_caches_offline() {
    let commit = "4e6bd3f0c0a6d9a5e58b1d3a2b3a8c4f00e1d2c3";
    let other = other_tiny();
    let (cache, snapshot) = hf_cache(
        "org/repo",
        commit,
        &[
            ("repo-Q4_K_M.gguf", tiny_model()),
            ("repo-Q8_0.gguf", &other),
            ("sub/repo-F16.gguf", &other),
        ],
    );
    let cache_env = ("HF_HUB_CACHE", cache.to_str().unwrap());
    let offline = ("HF_HUB_OFFLINE", "1");
    let path_of = |reference: &str| {
        let out = edgecloud(
            &["model", "inspect", reference, "--json"],
            &[cache_env, offline],
        );
        assert_eq!(out.status.code(), Some(0), "{reference}: {}", stderr(&out));
        (
            json_of(&out)["path"].as_str().unwrap().to_string(),
            stderr(&out),
        )
    };
    let (path, err) = path_of("hf:org/repo");
    assert_eq!(path, snapshot.join("repo-Q4_K_M.gguf").to_str().unwrap());
    assert!(
        err.contains("the Hugging Face cache (commit 4e6bd3f0c0a6)"),
        "{err}"
    );
    assert_eq!(
        path_of("hf:org/repo:q8_0").0,
        snapshot.join("repo-Q8_0.gguf").to_str().unwrap()
    );
    assert_eq!(
        path_of("hf:org/repo/sub/repo-F16.gguf").0,
        snapshot.join("sub/repo-F16.gguf").to_str().unwrap()
    );

    // HF_HOME/hub is the cache when HF_HUB_CACHE is not set.
    let home = fresh_path("hf-home");
    fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(&cache, home.join("hub")).unwrap();
    let out = edgecloud(
        &["model", "inspect", "hf:org/repo", "--json"],
        &[("HF_HOME", home.to_str().unwrap()), offline],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // The config file's local model and EDGECLOUD_MODEL take references.
    let config = fresh_path("edgecloud.toml");
    fs::write(&config, "[local]\nmodel = \"hf:org/repo:Q8_0\"\n").unwrap();
    let out = edgecloud(
        &[
            "config",
            "show",
            "--json",
            "--config",
            config.to_str().unwrap(),
        ],
        &[cache_env, offline],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        json_of(&out)["config"]["local"]["model"],
        snapshot.join("repo-Q8_0.gguf").to_str().unwrap()
    );
    let out = edgecloud(
        &[
            "local",
            "--prompt",
            "hi",
            "--max-tokens",
            "1",
            "--probe",
            "off",
            "--json",
        ],
        &[cache_env, offline, ("EDGECLOUD_MODEL", "hf:org/repo")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        json_of(&out)["model"],
        snapshot.join("repo-Q4_K_M.gguf").to_str().unwrap()
    );

    // llama.cpp's own -hf cache: ORG_REPO_FILE.
    let llama = fresh_path("llama-cache");
    fs::create_dir_all(&llama).unwrap();
    let file = llama.join("org_other_other-Q4_K_M.gguf");
    fs::copy(tiny_model(), &file).unwrap();
    fs::write(llama.join("org_other_other-Q4_K_M.gguf.json"), "{}").unwrap();
    let out = edgecloud(
        &["model", "inspect", "hf:org/other", "--json"],
        &[cache_env, offline, ("LLAMA_CACHE", llama.to_str().unwrap())],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["path"], file.to_str().unwrap());
    assert!(stderr(&out).contains("llama.cpp's cache"));

    // Offline and not cached: one sentence, exit 1; config show keeps the
    // reference as it is and fetches nothing.
    let out = edgecloud(
        &["model", "inspect", "hf:org/repo:Q2_K"],
        &[cache_env, offline],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: hf:org/repo:Q2_K is not in the Hugging Face cache ("),
        "{err}"
    );
    assert!(err.contains("and HF_HUB_OFFLINE is set"), "{err}");
    let out = edgecloud(
        &["config", "show", "--json"],
        &[
            cache_env,
            ("EDGECLOUD_MODEL", "hf:org/absent"),
            ("HF_ENDPOINT", "http://127.0.0.1:9"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["config"]["local"]["model"], "hf:org/absent");

    // Malformed: exit 2.
    for bad in ["hf:org", "hf:org/repo/readme.md", "hf:org/repo:"] {
        let out = edgecloud(&["model", "inspect", bad], &[cache_env, offline]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
    }
}

const COMMIT: &str = "9b2e7c3d1a0f4e5d6c7b8a9f0e1d2c3b4a596877";

fn hub_repos(files: Vec<HubFile>, gated: bool) -> HubRepo {
    HubRepo {
        commit: COMMIT.into(),
        gated,
        files,
    }
}

async fn stand_in() -> (StandInHub, Vec<u8>, Vec<u8>) {
    let tiny = fs::read(tiny_model()).unwrap();
    let other = fs::read(other_tiny()).unwrap();
    let (first, second) = tiny.split_at(tiny.len() / 2);
    let mut repos = BTreeMap::new();
    repos.insert(
        "org/dl".to_string(),
        hub_repos(
            vec![
                HubFile::new("README.md", b"# a model\n".to_vec()),
                HubFile::new("dl-Q8_0.gguf", other.clone()),
                HubFile::new("dl-Q4_K_M.gguf", tiny.clone()),
                HubFile::new("mmproj-dl-f16.gguf", b"not a model".to_vec()),
                HubFile::new("split/dl-Q6_K-00001-of-00002.gguf", first.to_vec()),
                HubFile::new("split/dl-Q6_K-00002-of-00002.gguf", second.to_vec()),
            ],
            false,
        ),
    );
    repos.insert(
        "org/gated".to_string(),
        hub_repos(vec![HubFile::new("g-Q4_K_M.gguf", tiny.clone())], true),
    );
    (StandInHub::start(repos).await, tiny, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_cut_at_half_resumes_with_range_and_lands_in_the_cache_layout() {
    let (hub, tiny, _) = stand_in().await;
    let cache = fresh_path("hf-dl");
    let endpoint = hub.endpoint();
    let env = [
        ("HF_HUB_CACHE", cache.to_str().unwrap()),
        ("HF_ENDPOINT", endpoint.as_str()),
        ("HF_TOKEN", TOKEN),
    ];
    let hash = sha256_hex(&tiny);
    let repo_dir = cache.join("models--org--dl");
    let blob = repo_dir.join("blobs").join(&hash);
    let partial = repo_dir.join("blobs").join(format!("{hash}.incomplete"));
    let link = repo_dir
        .join("snapshots")
        .join(COMMIT)
        .join("dl-Q4_K_M.gguf");

    hub.cut_next_at_half();
    let out = edgecloud_async(&["model", "fetch", "hf:org/dl"], &env).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("the next try resumes it"), "{err}");
    assert_eq!(
        fs::metadata(&partial).unwrap().len(),
        (tiny.len() / 2) as u64
    );
    assert!(
        !blob.exists() && !link.exists(),
        "nothing under the final names"
    );

    let out = edgecloud_async(&["model", "fetch", "hf:org/dl"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), link.to_str().unwrap());
    assert!(stderr(&out).contains("resumed at"), "{}", stderr(&out));
    let cdn = hub.cdn_requests();
    assert_eq!(cdn.len(), 2);
    assert_eq!(cdn[0].header("range"), None);
    assert_eq!(
        cdn[1].header("range"),
        Some(format!("bytes={}-", tiny.len() / 2).as_str())
    );

    // The cache layout huggingface_hub and llama.cpp read.
    assert_eq!(fs::read(&blob).unwrap(), tiny);
    assert!(!partial.exists());
    assert_eq!(
        fs::read_link(&link).unwrap(),
        Path::new("../..").join("blobs").join(&hash)
    );
    assert_eq!(
        fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
        COMMIT
    );
    assert_eq!(fs::read(&link).unwrap(), tiny);

    // The token went to the endpoint only, never to the CDN, and was
    // never printed.
    let bearer = format!("Bearer {TOKEN}");
    assert!(hub
        .api_requests()
        .iter()
        .all(|r| r.header("authorization") == Some(bearer.as_str())));
    assert!(cdn.iter().all(|r| r.header("authorization").is_none()));
    assert!(!stderr(&out).contains(TOKEN) && !stdout(&out).contains(TOKEN));

    // Now cached: offline works, and `local` runs it without a request.
    let before = hub.api_requests().len();
    let out = edgecloud_async(
        &[
            "local",
            "-m",
            "hf:org/dl:Q4_K_M",
            "--prompt",
            "hi",
            "--max-tokens",
            "1",
            "--probe",
            "off",
            "--json",
        ],
        &[env[0], env[1], ("HF_HUB_OFFLINE", "1")],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json_of(&out)["model"], link.to_str().unwrap());
    assert_eq!(hub.api_requests().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_download_exits_130_and_the_next_try_resumes() {
    let (hub, tiny, _) = stand_in().await;
    let cache = fresh_path("hf-ctrl-c");
    let home = fresh_path("home");
    fs::create_dir_all(&home).unwrap();
    let hash = sha256_hex(&tiny);
    let blobs = cache.join("models--org--dl/blobs");
    let partial = blobs.join(format!("{hash}.incomplete"));

    hub.stall_next_at_half();
    let mut cmd = Command::new(bin());
    for var in CLEARED {
        cmd.env_remove(var);
    }
    let child = cmd
        .env("HOME", &home)
        .env("HF_HUB_CACHE", &cache)
        .env("HF_ENDPOINT", hub.endpoint())
        .args(["model", "fetch", "hf:org/dl"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The handler is in place before the first request, so once the
    // server has sent half, a SIGINT is the handler's to take.
    hub.half_sent().await;
    let kill = Command::new("sh")
        .args(["-c", &format!("kill -INT {}", child.id())])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("error: the download was cancelled; the next try resumes it"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
    // Nothing under a final name; what arrived is kept to resume.
    assert!(!blobs.join(&hash).exists());
    assert!(!cache.join("models--org--dl/snapshots").exists());
    let kept = fs::metadata(&partial).map_or(0, |m| m.len());
    assert!(kept <= (tiny.len() / 2) as u64, "{kept}");

    let out = edgecloud_async(
        &["model", "fetch", "hf:org/dl"],
        &[
            ("HF_HUB_CACHE", cache.to_str().unwrap()),
            ("HF_ENDPOINT", hub.endpoint().as_str()),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(fs::read(stdout(&out)).unwrap(), tiny);
    let cdn = hub.cdn_requests();
    let expected = (kept > 0).then(|| format!("bytes={kept}-"));
    assert_eq!(cdn.last().unwrap().header("range"), expected.as_deref());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_models_come_with_every_part_and_quants_are_picked_like_llama_server() {
    let (hub, tiny, other) = stand_in().await;
    let cache = fresh_path("hf-split");
    let endpoint = hub.endpoint();
    let env = [
        ("HF_HUB_CACHE", cache.to_str().unwrap()),
        ("HF_ENDPOINT", endpoint.as_str()),
    ];
    let snapshot = cache.join("models--org--dl/snapshots").join(COMMIT);
    let out = edgecloud_async(&["model", "fetch", "hf:org/dl:q6_k"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        snapshot
            .join("split/dl-Q6_K-00001-of-00002.gguf")
            .to_str()
            .unwrap()
    );
    let joined = [
        fs::read(snapshot.join("split/dl-Q6_K-00001-of-00002.gguf")).unwrap(),
        fs::read(snapshot.join("split/dl-Q6_K-00002-of-00002.gguf")).unwrap(),
    ]
    .concat();
    assert_eq!(joined, tiny);
    assert_eq!(
        fs::read_link(snapshot.join("split/dl-Q6_K-00002-of-00002.gguf")).unwrap(),
        Path::new("../../..")
            .join("blobs")
            .join(sha256_hex(&tiny[tiny.len() / 2..]))
    );
    // The tree came in pages (two entries each): all were read.
    let pages = hub
        .api_requests()
        .iter()
        .filter(|r| r.path.contains("/tree/"))
        .count();
    assert_eq!(pages, 3);

    let out = edgecloud_async(&["model", "fetch", "hf:org/dl/dl-Q8_0.gguf"], &env).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(fs::read(stdout(&out)).unwrap(), other);
    // Only the chosen files were downloaded (no README, no mmproj).
    let cdn: Vec<String> = hub.cdn_requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(cdn.len(), 3, "{cdn:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_refusals_are_one_sentence_each() {
    let (hub, tiny, _) = stand_in().await;
    let cache = fresh_path("hf-refusals");
    let endpoint = hub.endpoint();
    let env = [
        ("HF_HUB_CACHE", cache.to_str().unwrap()),
        ("HF_ENDPOINT", endpoint.as_str()),
    ];
    let first_line = |out: &Output| stderr(out).lines().last().unwrap_or_default().to_string();

    let out = edgecloud_async(&["model", "fetch", "hf:org/gated"], &env).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        first_line(&out),
        "error: org/gated is gated: accept its terms on its Hub page, then set HF_TOKEN to a token of that account"
    );
    let out = edgecloud_async(
        &["model", "fetch", "hf:org/gated"],
        &[env[0], env[1], ("HF_TOKEN", TOKEN)],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(fs::read(stdout(&out)).unwrap(), tiny);
    let out = edgecloud_async(
        &["model", "fetch", "hf:org/gated"],
        &[
            (
                "HF_HUB_CACHE",
                fresh_path("hf-wrong-token").to_str().unwrap(),
            ),
            env[1],
            ("HF_TOKEN", "hf_wrong"),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        first_line(&out).contains("the token in HF_TOKEN has no access to it"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("hf_wrong"));

    let out = edgecloud_async(&["model", "fetch", "hf:org/nope"], &env).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        first_line(&out),
        format!(
            "error: there is no repository org/nope on {endpoint} (if it is private, set HF_TOKEN)"
        )
    );

    let out = edgecloud_async(&["model", "fetch", "hf:org/dl:Q2_K"], &env).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        first_line(&out),
        "error: org/dl has no Q2_K GGUF file (it has: Q4_K_M, Q6_K, Q8_0)"
    );
    let out = edgecloud_async(&["model", "fetch", "hf:org/dl/absent.gguf"], &env).await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(first_line(&out), "error: org/dl has no file absent.gguf");

    let out = edgecloud_async(&["model", "fetch", "hf:org"], &env).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // Wrong bytes: refused, and nothing is kept (not even to resume).
    hub.corrupt(true);
    let out = edgecloud_async(&["model", "fetch", "hf:org/dl:Q8_0"], &env).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("the download hashes to"),
        "{}",
        stderr(&out)
    );
    let blobs = cache.join("models--org--dl/blobs");
    let left: Vec<_> = fs::read_dir(&blobs)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    hub.corrupt(false);

    // The endpoint down: a failure naming it, exit 1.
    let out = edgecloud_async(
        &["model", "fetch", "hf:org/dl"],
        &[env[0], ("HF_ENDPOINT", "http://127.0.0.1:9")],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("http://127.0.0.1:9/api/models/org/dl: cannot reach it"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn every_ollama_template_style_maps_to_a_built_in_llama_cpp_runs() {
    let bare = tiny_without_template();
    let styles = [
        (
            "{{ .System }}<|im_start|>user\n{{ .Prompt }}<|im_end|>",
            "chatml",
        ),
        ("<|im_start|>user<|im_sep|>{{ .Prompt }}<|im_end|>", "phi4"),
        (LLAMA3_TEMPLATE, "llama3"),
        ("<start_of_turn>user\n{{ .Prompt }}<end_of_turn>", "gemma"),
        (
            "[INST] <<SYS>>{{ .System }}<</SYS>> {{ .Prompt }} [/INST]",
            "llama2-sys",
        ),
        (
            "[SYSTEM_PROMPT]{{ .System }}[/SYSTEM_PROMPT][INST]{{ .Prompt }}[/INST]",
            "mistral-v7",
        ),
        ("[INST] {{ .Prompt }} [/INST]", "mistral-v3"),
        ("<|user|>\n{{ .Prompt }}<|end|>\n<|assistant|>", "phi3"),
        ("<|user|>\n{{ .Prompt }}</s>\n<|assistant|>", "zephyr"),
        ("<｜User｜>{{ .Prompt }}<｜Assistant｜>", "deepseek3"),
    ];
    let names: Vec<String> = (0..styles.len())
        .map(|i| format!("registry.ollama.ai/library/t{i}/latest"))
        .collect();
    let models: Vec<(&str, &Path, Option<&str>)> = styles
        .iter()
        .zip(&names)
        .map(|((t, _), n)| (n.as_str(), bare.as_path(), Some(*t)))
        .collect();
    let (store, _) = ollama_store(&models);
    for (i, (_, name)) in styles.iter().enumerate() {
        let reference = format!("ollama:t{i}");
        let out = edgecloud(
            &[
                "local",
                "-m",
                &reference,
                "--prompt",
                "hi",
                "--max-tokens",
                "1",
                "--probe",
                "off",
                "--json",
            ],
            &[("OLLAMA_MODELS", store.to_str().unwrap())],
        );
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
        assert_eq!(json_of(&out)["chat_template"], "configured", "{name}");
        assert!(
            stderr(&out).contains(&format!("like llama.cpp's {name}; used")),
            "{name}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn the_library_resolves_with_locations_given_by_hand() {
    use edgecloud::modelref::{resolve, Locations, ModelRef, Origin, ResolveOptions};
    let (store, blobs) = ollama_store(&[(
        "registry.ollama.ai/library/tiny/latest",
        tiny_model(),
        Some(LLAMA3_TEMPLATE),
    )]);
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let (cache, snapshot) = hf_cache("org/repo", commit, &[("r-Q4_K_M.gguf", tiny_model())]);
    let options = ResolveOptions {
        locations: Locations {
            ollama_stores: vec![fresh_path("absent"), store.clone()],
            hf_cache: cache,
            llama_cache: None,
        },
        allow_download: false,
        ..ResolveOptions::default()
    };
    let found = resolve(&ModelRef::parse("ollama:tiny").unwrap(), &options).unwrap();
    assert_eq!(found.path, blobs[0]);
    assert_eq!(found.ollama_template.as_deref(), Some(LLAMA3_TEMPLATE));
    assert!(matches!(found.origin, Origin::Ollama { store: ref s, .. } if *s == store));

    let found = resolve(&ModelRef::parse("hf:org/repo").unwrap(), &options).unwrap();
    assert_eq!(found.path, snapshot.join("r-Q4_K_M.gguf"));
    assert_eq!(
        found.origin,
        Origin::HfCache {
            commit: commit.into()
        }
    );

    let plain = ModelRef::parse("models/x.gguf").unwrap();
    assert_eq!(
        resolve(&plain, &options).unwrap().path,
        Path::new("models/x.gguf")
    );

    let err = resolve(&ModelRef::parse("hf:org/absent").unwrap(), &options).unwrap_err();
    assert_eq!(err.kind(), "not_cached");
    assert!(!err.is_usage());
}
