//! Integration tests on a real GPU backend: the Vulkan build
//! (`scripts/build-gpu vulkan`) on whatever Vulkan device the machine has,
//! Mesa's lavapipe (a Vulkan device on the CPU) where it has no GPU.
//!
//! The binary under test is `EDGECLOUD_GPU_BIN`, else
//! `dist/edgecloud-vulkan/edgecloud`; its runs get
//! `GGML_VK_VISIBLE_DEVICES=0` unless the environment sets it (ggml skips
//! CPU-type devices such as lavapipe otherwise). Where there is no such
//! binary, or its `doctor` sees no Vulkan device, every test here passes
//! after printing why it was skipped (`scripts/test-gpu` runs them; they
//! are not in `scripts/test`: docs/gpu.md). What the CPU answers against is
//! the default build (`crate::support::cli::bin`), in the same run.
//!
//! lavapipe runs a decode step of SmolLM2 in about half a second: every
//! test keeps to short prompts and few tokens.

use crate::support::cli::{bin, json_of};
use crate::support::models::{fresh_path, tiny_model};
use crate::support::real_model::smollm2;
use serde_json::{json, Value};
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

const HANG: Duration = Duration::from_secs(300);

/// The Vulkan build and the device it sees, or why the tests skip.
fn gpu() -> Option<&'static Path> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let path = std::env::var_os("EDGECLOUD_GPU_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/edgecloud-vulkan/edgecloud")
            });
        if !path.exists() {
            return Err(format!(
                "no Vulkan build at {} (scripts/build-gpu vulkan; or set EDGECLOUD_GPU_BIN)",
                path.display()
            ));
        }
        let out = gpu_cmd(&path).args(["doctor", "--json"]).output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        let vulkan = v["ggml"]["devices"].as_array().is_some_and(|d| {
            d.iter()
                .any(|d| d["backend"] == "Vulkan" && d["kind"] != "cpu")
        });
        if !vulkan {
            return Err(format!(
                "{} sees no Vulkan device: {}",
                path.display(),
                v["problem"]["message"]
            ));
        }
        Ok(path)
    });
    match found {
        Ok(p) => Some(p),
        Err(why) => {
            eprintln!("skipped (no Vulkan device): {why}");
            None
        }
    }
}

/// llama-server's `-fa` for the attention the lane uses on this device:
/// `off` on lavapipe (`crates/local/src/attention.rs`), else llama.cpp's
/// own `auto`.
fn flash_attention_like_the_lane(gpu: &Path) -> &'static str {
    let out = gpu_cmd(gpu).args(["doctor", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let lavapipe = v["ggml"]["devices"].as_array().is_some_and(|d| {
        d.iter().any(|d| {
            d["backend"] == "Vulkan"
                && d["description"]
                    .as_str()
                    .is_some_and(|s| s.contains("llvmpipe"))
        })
    });
    if lavapipe {
        "off"
    } else {
        "auto"
    }
}

/// A command running the GPU build, lavapipe made visible.
fn gpu_cmd(path: &Path) -> Command {
    let mut cmd = Command::new(path);
    if std::env::var_os("GGML_VK_VISIBLE_DEVICES").is_none() {
        cmd.env("GGML_VK_VISIBLE_DEVICES", "0");
    }
    cmd
}

fn local_args<'a>(model: &'a str, prompt: &'a str, tokens: &'a str) -> Vec<&'a str> {
    vec![
        "local",
        "--model",
        model,
        "--prompt",
        prompt,
        "--max-tokens",
        tokens,
        "--temperature",
        "0",
        "--threads",
        "2",
        "--probe",
        "off",
        "--json",
    ]
}

fn run(mut cmd: Command, args: &[&str]) -> Output {
    cmd.args(args).output().expect("run edgecloud")
}

#[test]
fn offload_is_reported_with_its_device_and_bytes() {
    let Some(gpu) = gpu() else { return };
    let model = tiny_model().to_str().unwrap();
    let mut args = local_args(model, "Hello there", "2");
    args.extend(["--gpu-layers", "99"]);
    let v = json_of(&run(gpu_cmd(gpu), &args));
    assert_eq!(v["status"], "completed", "{v}");
    let o = &v["offload"];
    // More layers than the model has means all of them (the output layer
    // counts as one, as llama.cpp counts).
    assert!(o["layers"].as_u64().unwrap() > 1, "{v}");
    assert_eq!(o["layers"], o["of"], "{v}");
    let device = o["devices"][0].as_str().unwrap_or_default();
    assert!(device.starts_with("Vulkan0 ("), "{v}");
    let on_device =
        o["device_weight_bytes"].as_u64().unwrap() + o["device_kv_bytes"].as_u64().unwrap();
    assert!(o["device_weight_bytes"].as_u64().unwrap() > 0, "{v}");
    assert!(o["device_kv_bytes"].as_u64().unwrap() > 0, "{v}");
    // memory_bytes (the byte budget's figure) counts what the device holds.
    assert!(v["memory_bytes"].as_u64().unwrap() >= on_device, "{v}");

    // Two layers: two on the device, the rest on the CPU.
    let mut args = local_args(model, "Hello there", "2");
    args.extend(["--gpu-layers", "2"]);
    let v = json_of(&run(gpu_cmd(gpu), &args));
    assert_eq!(v["offload"]["layers"], 2, "{v}");
    // None asked: none offloaded, nothing on the device.
    let v = json_of(&run(gpu_cmd(gpu), &local_args(model, "Hello there", "2")));
    assert_eq!(v["offload"]["layers"], 0, "{v}");
    assert_eq!(v["offload"]["device_weight_bytes"], 0, "{v}");

    // The text summary says it too.
    let out = gpu_cmd(gpu)
        .args([
            "local",
            "--model",
            model,
            "--prompt",
            "Hello",
            "--max-tokens",
            "2",
        ])
        .args(["--threads", "2", "--probe", "off", "--gpu-layers", "99"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("offload ") && stderr.contains("layers on Vulkan0"),
        "{stderr}"
    );
}

#[test]
fn doctor_lists_the_vulkan_device_and_says_offload_is_possible() {
    let Some(gpu) = gpu() else { return };
    let out = run(gpu_cmd(gpu), &["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Vulkan"), "{text}");
    assert!(text.contains("GPU offload: available (Vulkan0"), "{text}");
    let v = json_of(&run(gpu_cmd(gpu), &["doctor", "--json"]));
    let dev = v["ggml"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["backend"] == "Vulkan")
        .cloned()
        .unwrap();
    assert!(!dev["description"].as_str().unwrap().is_empty(), "{dev}");
    assert!(dev["memory_total"].as_u64().unwrap() > 0, "{dev}");
    assert_eq!(v["gpu_offload"], true);
}

/// Typed errors naming what is missing: a CPU-type device ggml was not told
/// to use, no Vulkan driver, a Vulkan backend library that cannot load
/// (as when the Vulkan loader is missing).
#[test]
fn offload_that_cannot_happen_is_a_typed_error() {
    let Some(gpu) = gpu() else { return };
    let model = tiny_model().to_str().unwrap();
    let mut args = local_args(model, "Hello", "2");
    args.extend(["--gpu-layers", "3"]);
    let error_of = |cmd: Command| {
        let out = run(cmd, &args);
        assert!(!out.status.success(), "{out:?}");
        json_of(&out)["error"].clone()
    };

    // No driver: the loader finds no ICD, the backend registers nothing.
    let mut cmd = gpu_cmd(gpu);
    cmd.env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json");
    let err = error_of(cmd);
    assert_eq!(err["kind"], "gpu_library", "{err}");
    let msg = err["message"].as_str().unwrap();
    assert!(
        msg.contains("libggml-vulkan") && msg.contains("no driver"),
        "{msg}"
    );
    assert!(msg.contains("mesa-vulkan-drivers"), "{msg}");

    // No Vulkan loader: a copy of the folder whose Vulkan module needs a
    // loader by a name no system has (its DT_NEEDED entry renamed in
    // place, same length). The dynamic linker's reason, and what to
    // install.
    let dir = fresh_path("gpu-no-loader");
    std::fs::create_dir_all(&dir).unwrap();
    let src = gpu.parent().unwrap();
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let name = e.file_name();
        let to = dir.join(&name);
        if name == "libggml-vulkan.so" {
            let bytes = std::fs::read(e.path()).unwrap();
            let (from, to_name) = (&b"libvulkan.so.1\0"[..], &b"libvulkXn.so.1\0"[..]);
            let at = bytes
                .windows(from.len())
                .position(|w| w == from)
                .expect("the module names libvulkan.so.1");
            let mut patched = bytes.clone();
            patched[at..at + from.len()].copy_from_slice(to_name);
            std::fs::write(&to, patched).unwrap();
        } else if e.path().is_file() || e.path().is_symlink() {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
    let err = error_of(gpu_cmd(&dir.join("edgecloud")));
    assert_eq!(err["kind"], "gpu_library", "{err}");
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("libggml-vulkan.so"), "{msg}");
    assert!(
        msg.contains("libvulkXn.so.1: cannot open shared object file"),
        "{msg}"
    );
    assert!(msg.contains("libvulkan1"), "{msg}");
    // The same folder still runs on the CPU.
    let out = run(
        gpu_cmd(&dir.join("edgecloud")),
        &local_args(model, "Hello", "2"),
    );
    assert!(out.status.success(), "{out:?}");

    // Only a CPU-type device, not named: no GPU, and the hint says how.
    let doctor = json_of(&run(gpu_cmd(gpu), &["doctor", "--json"]));
    let cpu_type_only = doctor["ggml"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["backend"] == "Vulkan")
        .all(|d| {
            d["description"]
                .as_str()
                .unwrap_or_default()
                .contains("llvmpipe")
        });
    if cpu_type_only {
        let mut cmd = Command::new(gpu);
        cmd.env_remove("GGML_VK_VISIBLE_DEVICES");
        let err = error_of(cmd);
        assert_eq!(err["kind"], "no_gpu", "{err}");
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .contains("GGML_VK_VISIBLE_DEVICES=0"),
            "{err}"
        );
    }
}

/// The tiny model (attention heads of 16) with every layer on the device,
/// served: a one-token prompt, then a longer one. ggml-vulkan's flash
/// attention for heads that small crashed the process (SIGSEGV in the
/// Vulkan driver) on the second prompt's step (a 16-token step after the
/// first, one-token, one); the lane now turns flash attention off for
/// heads smaller than ggml tests (`attention`), and both prompts answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_heads_on_the_device_answer_a_one_token_prompt_then_a_longer_one() {
    let Some(gpu) = gpu() else { return };
    let model = tiny_model().to_str().unwrap();
    let mut served = Served::start(
        gpu_cmd(gpu),
        &["--model", model, "--gpu-layers", "99", "--probe", "off"],
    );
    let url = served.url.clone();
    for prompt in [
        "a",
        "Hello there, this is a longer prompt for the tiny model",
    ] {
        let v = post(
            &url,
            "/completions",
            json!({"model": "edgecloud", "prompt": prompt, "max_tokens": 2,
                   "temperature": 0, "edgecloud": {"deadline_ms": 600000}}),
        )
        .await;
        assert_eq!(v["choices"][0]["finish_reason"], "length", "{prompt}: {v}");
        assert!(
            served.child.try_wait().unwrap().is_none(),
            "the server died after {prompt:?}"
        );
    }
    let health = get(&url, "/health").await;
    assert!(health["lanes"].is_array(), "{health}");
}

/// A served `edgecloud` of the GPU build (or the CPU one), ended on drop.
struct Served {
    child: Child,
    url: String,
}

impl Served {
    fn start(cmd: Command, args: &[&str]) -> Self {
        let mut cmd = cmd;
        cmd.arg("serve")
            .args([
                "--listen",
                "127.0.0.1:0",
                "--policy",
                "local-only",
                "--threads",
                "2",
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start edgecloud serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) else {
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("no address in {line:?}; stderr: {err}");
        };
        let url = url.to_string();
        Served { child, url }
    }
}

impl Served {
    /// Whether the server process is still running.
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn post(url: &str, path: &str, body: Value) -> Value {
    let resp = tokio::time::timeout(
        HANG,
        reqwest::Client::new()
            .post(format!("{url}{path}"))
            .json(&body)
            .send(),
    )
    .await
    .expect("no hang")
    .expect("a response");
    let text = resp.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {text}"))
}

async fn get(url: &str, path: &str) -> Value {
    let base = url.trim_end_matches("/v1");
    let text = reqwest::get(format!("{base}{path}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {text}"))
}

const PROMPTS: [&str; 4] = [
    "What is the capital of France?",
    "Name a colour.",
    "Count to three.",
    "Say hello.",
];

/// A pool of 4 lanes with every layer on the device (one llama.cpp
/// context, a KV stream per lane, concurrent lanes' tokens decoded in one
/// step, as llama-server's slots are):
/// - it survives 4 concurrent clients (with flash attention on, lavapipe
///   killed the process, and llama-server `-np 4` alike: the lane turns it
///   off there, `attention.rs`);
/// - a request alone in its steps answers exactly as the lone lane
///   (`edgecloud local`, a fresh process);
/// - requests sharing steps answer the same, or part from it only at a
///   near tie: a GPU's kernels round a step of 4 sequences differently from
///   a step of one (llama.cpp's own results depend on the batch on every
///   GPU backend; llama.cpp issues 3014 and 7052), so greedy picks the
///   other of two candidates less than [`NEAR_TIE`] apart in the lone
///   run's log-probabilities. Which requests share steps depends on when
///   they arrive: the departures are printed.
///
/// Both sides take whole-batch prompt steps (`EDGECLOUD_DEVICE_STEP_MS=0`):
/// sized steps follow measured times, and a step's size changes its
/// rounding too. `/health` names the device.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_on_the_device_answers_like_the_lone_lane() {
    let Some(gpu) = gpu() else { return };
    let model = smollm2().to_str().unwrap();
    let alone: Vec<String> = PROMPTS
        .iter()
        .map(|p| {
            let mut args = local_args(model, p, "6");
            args.extend(["--gpu-layers", "99"]);
            let mut cmd = gpu_cmd(gpu);
            cmd.env("EDGECLOUD_DEVICE_STEP_MS", "0");
            let v = json_of(&run(cmd, &args));
            assert_eq!(v["offload"]["layers"], v["offload"]["of"], "{v}");
            v["text"].as_str().unwrap().to_string()
        })
        .collect();
    let mut cmd = gpu_cmd(gpu);
    cmd.env("EDGECLOUD_DEVICE_STEP_MS", "0");
    let mut served = Served::start(
        cmd,
        &["--model", model, "--parallel", "4", "--gpu-layers", "99"],
    );
    let url = served.url.clone();
    let mut one_by_one = Vec::new();
    for p in PROMPTS {
        one_by_one.push(greedy_with_logprobs(&url, p).await);
    }
    let texts: Vec<String> = one_by_one.iter().map(|a| a.text.clone()).collect();
    assert_eq!(
        texts, alone,
        "pool, one request at a time (left) vs lone lane (right)"
    );
    let together =
        futures_util::future::join_all(PROMPTS.iter().map(|p| greedy_with_logprobs(&url, p))).await;
    for ((prompt, lone), pooled) in PROMPTS.iter().zip(&one_by_one).zip(&together) {
        if let Some(at) = lone
            .tokens
            .iter()
            .zip(&pooled.tokens)
            .position(|(a, b)| a.0 != b.0)
        {
            let (chosen, chosen_lp, top) = &lone.tokens[at];
            let other = &pooled.tokens[at].0;
            let gap = top.get(other).map(|lp| chosen_lp - lp);
            eprintln!(
                "{prompt:?}: sharing steps, token {at} is {other:?} where alone it is \
                 {chosen:?} ({chosen_lp:.3}; {other:?} {gap:?} nats below)"
            );
            assert!(
                gap.is_some_and(|g| g <= NEAR_TIE),
                "{prompt:?}: the pool parts from the lone answer at token {at} without a \
                 near tie: alone {:?}, pooled {:?}",
                lone.text,
                pooled.text
            );
        } else {
            assert_eq!(pooled.text, lone.text, "{prompt:?}");
        }
    }
    assert!(served.alive(), "serve died with 4 clients at once");
    let health = get(&url, "/health").await;
    let local = health["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lane"] == "local")
        .cloned()
        .unwrap();
    assert!(
        local["device"]
            .as_str()
            .unwrap_or_default()
            .contains("layers on Vulkan0"),
        "{health}"
    );
}

/// How far apart (nats) two candidates may be in the lone run for a step's
/// rounding to swap them: the device moved log-probabilities by at most
/// 0.05 between edgecloud and llama-server (docs/gpu.md); "Say hello."
/// parts at a gap of 0.07.
const NEAR_TIE: f64 = 0.25;

/// A greedy answer with each token's log-probability and its top 5.
struct Greedy {
    text: String,
    tokens: Vec<(String, f64, std::collections::HashMap<String, f64>)>,
}

/// A greedy chat answer of 6 tokens from the served pool, with
/// log-probabilities.
async fn greedy_with_logprobs(url: &str, prompt: &str) -> Greedy {
    let v = post(
        url,
        "/chat/completions",
        // lavapipe is slow: no 5 s default deadline.
        json!({"model": "edgecloud", "messages": [{"role": "user", "content": prompt}],
               "max_tokens": 6, "temperature": 0, "logprobs": true, "top_logprobs": 5,
               "edgecloud": {"deadline_ms": 600000}}),
    )
    .await;
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string();
    let tokens = v["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no logprobs: {v}"))
        .iter()
        .map(|t| {
            let top = t["top_logprobs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| {
                    (
                        x["token"].as_str().unwrap().to_string(),
                        x["logprob"].as_f64().unwrap(),
                    )
                })
                .collect();
            (
                t["token"].as_str().unwrap().to_string(),
                t["logprob"].as_f64().unwrap(),
                top,
            )
        })
        .collect();
    Greedy { text, tokens }
}

/// `/v1/embeddings` with every layer on the device.
///
/// - Against llama.cpp's own Vulkan build on the same device and modules
///   (`llama-server --embeddings -ngl 99`, `EDGECLOUD_GPU_LLAMA_SERVER`,
///   which `scripts/test-gpu` builds; skipped with a printed reason
///   without it): each input alone, the same vector (cosine >= 0.99999;
///   measured 1.0000000 on four texts).
/// - Against the CPU backend, SmolLM2 (Q4_1): cosine >= 0.999 (measured
///   0.99956 to 0.99982, and llama-server's Vulkan and CPU builds give the
///   same figures). Not the 0.9999, and not the device's fault:
///   the CPU multiplies Q4_1 weights by activations it first rounds to
///   8 bits (ggml's Q8_1 blocks), the Vulkan shaders by float activations;
///   with the same weights stored as F32 both give the same vectors
///   (>= 0.9999997), and the Vulkan vectors of the Q4_1 file are the
///   nearer to them (docs/gpu.md).
/// - Against the CPU backend, the generated tiny model (F32 weights: no
///   rounding of activations on either side): cosine >= 0.99999 (measured
///   0.9999996 and up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_on_the_device_match_llama_cpp_vulkan_and_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let texts = [
        "The lighthouse keeper climbed the stairs at dusk.",
        "Two plus two is four.",
    ];
    let model = smollm2().to_str().unwrap();
    let on_gpu = Served::start(gpu_cmd(gpu), &["--model", model, "--gpu-layers", "99"]);
    let on_cpu = Served::start(Command::new(bin()), &["--model", model]);
    let device = embed_each(&on_gpu.url, &texts).await;
    let cpu = embed_each(&on_cpu.url, &texts).await;
    assert_cosines("SmolLM2 embedding, device vs CPU", &device, &cpu, 0.999);
    // Several inputs in one request answer as well.
    let v = post(
        &on_gpu.url,
        "/embeddings",
        json!({"model": "edgecloud", "input": texts}),
    )
    .await;
    for (i, b) in cpu.iter().enumerate() {
        let c = cosine(&vector(&v["data"][i]["embedding"]), b);
        assert!(c >= 0.999, "batched text {i}: cosine {c}");
    }
    match std::env::var_os("EDGECLOUD_GPU_LLAMA_SERVER") {
        None => eprintln!(
            "skipped the llama-server comparison: EDGECLOUD_GPU_LLAMA_SERVER is not set \
             (scripts/test-gpu sets it)"
        ),
        Some(server) => {
            let llama = LlamaServer::start(
                gpu_cmd(Path::new(&server)),
                &[
                    "-m",
                    model,
                    "--embeddings",
                    "--pooling",
                    "mean",
                    "-ngl",
                    "99",
                    "-t",
                    "2",
                    "-tb",
                    "2",
                    "-c",
                    "2048",
                    "-b",
                    "512",
                    "-ub",
                    "512",
                    "-fa",
                    flash_attention_like_the_lane(gpu),
                ],
            );
            let theirs = embed_each(&llama.url, &texts).await;
            assert_cosines(
                "SmolLM2 embedding, device vs llama-server Vulkan",
                &device,
                &theirs,
                0.99999,
            );
        }
    }

    let tiny = tiny_model().to_str().unwrap();
    let on_gpu = Served::start(gpu_cmd(gpu), &["--model", tiny, "--gpu-layers", "99"]);
    let on_cpu = Served::start(Command::new(bin()), &["--model", tiny]);
    let device = embed_each(&on_gpu.url, &texts).await;
    let cpu = embed_each(&on_cpu.url, &texts).await;
    assert_cosines(
        "tiny (F32) embedding, device vs CPU",
        &device,
        &cpu,
        0.99999,
    );
}

/// Each pair of vectors has a cosine of at least `bound` (printed).
fn assert_cosines(what: &str, ours: &[Vec<f64>], theirs: &[Vec<f64>], bound: f64) {
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        let c = cosine(a, b);
        eprintln!("{what} {i}: cosine {c:.7}");
        assert!(c >= bound, "{what} {i}: cosine {c}");
    }
}

/// Each text's vector, one request each.
async fn embed_each(url: &str, texts: &[&str]) -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    for t in texts {
        let v = post(
            url,
            "/embeddings",
            json!({"model": "edgecloud", "input": [t]}),
        )
        .await;
        out.push(vector(&v["data"][0]["embedding"]));
    }
    out
}

/// llama.cpp's own `llama-server` on 127.0.0.1, ended on drop; started
/// when its log says it listens (after the model is loaded).
struct LlamaServer {
    child: Child,
    url: String,
}

impl LlamaServer {
    fn start(mut cmd: Command, args: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
            .to_string();
        cmd.args(args)
            .args(["--host", "127.0.0.1", "--port", &port])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start llama-server");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let url = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(at) = line.find("listening on http://") {
                        let base = line[at + "listening on ".len()..].trim().to_string();
                        break format!("{base}/v1");
                    }
                    seen.push(line);
                }
                _ => {
                    let _ = child.kill();
                    panic!("llama-server ended before listening: {}", seen.join("\n"));
                }
            }
        };
        // Keep its log flowing so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        LlamaServer { child, url }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn vector(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// A context whose KV cache does not fit the device's free memory is
/// refused before it is made, with the figures and what would fit
/// (`does_not_fit`); the size it names then loads and answers. lavapipe
/// says it has 2 GiB: SmolLM2's KV cache at 131072 cells is 2880 MiB.
#[test]
fn a_context_too_large_for_the_device_is_refused_with_what_fits() {
    let Some(gpu) = gpu() else { return };
    let model = smollm2().to_str().unwrap();
    let answer = |context: &str| {
        let mut args = local_args(model, "Hi", "2");
        args.extend(["--gpu-layers", "99", "--context-size", context]);
        run(gpu_cmd(gpu), &args)
    };
    let out = answer("131072");
    assert!(!out.status.success(), "{out:?}");
    let err = json_of(&out)["error"].clone();
    assert_eq!(err["kind"], "does_not_fit", "{err}");
    let msg = err["message"].as_str().unwrap();
    assert!(
        msg.contains("Vulkan0") && msg.contains("2880.0 MiB"),
        "{msg}"
    );
    let fits = msg
        .split("--context-size ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no size in {msg}"));
    let v = json_of(&answer(fits));
    assert_eq!(v["error"], Value::Null, "{v}");
    assert_eq!(v["offload"]["layers"], v["offload"]["of"], "{v}");
}

/// Speculative decoding with every layer on the device (the main model's
/// and the draft model's): n-gram drafts (prompt lookup) and a draft model
/// (SmolLM2 drafting for itself: same vocabulary, every draft its own
/// greedy pick) give the greedy answer of a run without drafts, and their
/// drafts are accepted (a verify step of several tokens on the device).
/// The prompt asks for a copy, so drafts are found.
#[test]
fn speculative_decoding_on_the_device_answers_as_without() {
    let Some(gpu) = gpu() else { return };
    let model = smollm2().to_str().unwrap();
    let prompt = "Repeat this text exactly, word for word:\n\nThe old lighthouse on Carrow \
        Point was built in 1862 by the harbour board of Elmsworth. Its lamp burned whale oil \
        until 1904, then paraffin, and it was electrified in 1951.";
    let answer = |spec: &[&str]| {
        let mut args = local_args(model, prompt, "24");
        args.extend(["--gpu-layers", "99"]);
        args.extend(spec);
        let v = json_of(&run(gpu_cmd(gpu), &args));
        assert_eq!(v["offload"]["layers"], v["offload"]["of"], "{v}");
        v
    };
    let off = answer(&["--spec-type", "off"]);
    assert!(
        off["text"].as_str().unwrap().contains("lighthouse"),
        "{off}"
    );
    for spec in [
        &["--spec-type", "ngram"][..],
        &["--spec-type", "draft", "--model-draft", model][..],
    ] {
        let on = answer(spec);
        assert_eq!(on["text"], off["text"], "{spec:?}");
        assert!(on["draft_n_accepted"].as_u64() > Some(0), "{spec:?}: {on}");
    }
}

/// A deadline during a long prompt on the device: the run ends with the
/// deadline (the step in flight finishes; no prompt of hundreds of tokens
/// runs to its end first), and the lane answers the next job.
#[test]
fn a_deadline_inside_a_long_prompt_on_the_device_returns() {
    let Some(gpu) = gpu() else { return };
    let model = smollm2().to_str().unwrap();
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(60);
    let mut args = local_args(model, &long, "4");
    args.extend(["--gpu-layers", "99", "--deadline-ms", "500"]);
    let v = json_of(&run(gpu_cmd(gpu), &args));
    assert_eq!(v["status"], "deadline_exceeded", "{v}");
    assert_eq!(v["completion_tokens"], 0, "{v}");
}
