//! `edgecloud run` through the real binary, with the tiny local model and a
//! loopback cloud.

use super::e2e::server_runtime;
use crate::support::cli::{bin, json_of};
use crate::support::http::{Flavor, TestServer};
use crate::support::models::{fresh_path, tiny_model};
use std::process::{Command, Output};

const KEY_VAR: &str = "EDGECLOUD_RUN_TEST_KEY";
const KEY: &str = "sk-run-test-0123456789abcdef";

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .arg("run")
        .args(args)
        .env_remove("EDGECLOUD_LOG")
        .env(KEY_VAR, KEY)
        .output()
        .expect("the edgecloud binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn model() -> &'static str {
    tiny_model().to_str().expect("temp paths are UTF-8 here")
}

fn lanes(server: &str) -> Vec<&str> {
    vec![
        "--model",
        model(),
        "--threads",
        "2",
        "--base-url",
        server,
        "--cloud-model",
        "test-model",
        "--api-key-env",
        KEY_VAR,
        "--seed",
        "7",
        "--max-tokens",
        "6",
    ]
}

#[test]
fn run_json_has_every_documented_field() {
    let rt = server_runtime();
    let server = rt.block_on(TestServer::openai(Flavor::OpenAi, &["Paris", "."]));
    let url = server.base_url();
    let mut args = lanes(&url);
    args.extend([
        "--prompt",
        "Capital of France?",
        "--policy",
        "best-of",
        "--json",
    ]);
    let out = run(&args);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v = json_of(&out);
    for key in [
        "run_id",
        "policy",
        "status",
        "winner",
        "text",
        "deadline_ms",
        "elapsed_ms",
        "overshoot_ms",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v:#}");
    }
    assert_eq!(v["policy"], "best-of");
    assert_eq!(v["status"], "ok");
    assert_eq!(v["winner"], "cloud");
    assert_eq!(v["text"], "Paris.");
    assert!(v["decision"]["reason"].is_string());
    assert!(v["decision"]["scores"]["local"].is_number());
    assert!(v["decision"]["scores"]["cloud"].is_number());
    let lanes = v["lanes"].as_array().unwrap();
    assert_eq!(lanes.len(), 2);
    for (i, name) in [(0, "local"), (1, "cloud")] {
        let l = &lanes[i];
        assert_eq!(l["lane"], name);
        assert_eq!(l["status"], "completed", "{l:#}");
        for key in [
            "ttft_ms",
            "total_ms",
            "prompt_tokens",
            "completion_tokens",
            "score",
            "error",
        ] {
            assert!(l.get(key).is_some(), "lane {name} missing {key}");
        }
        assert!(l["prompt_tokens"].as_u64().unwrap() > 0);
    }
    assert!(!text(&out.stdout).contains(KEY) && !text(&out.stderr).contains(KEY));
}

#[test]
fn run_prints_the_text_then_a_summary_and_fails_loudly_past_the_deadline() {
    let rt = server_runtime();
    let server = rt.block_on(TestServer::openai(
        Flavor::LlamaServer,
        &["Hello", " there"],
    ));
    let url = server.base_url();
    let mut args = lanes(&url);
    args.extend(["--prompt", "Hi", "--policy", "cloud-only"]);
    let out = run(&args);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "Hello there");
    let err = text(&out.stderr);
    assert!(err.contains("cloud won"), "{err}");
    assert!(
        err.contains("local") && err.contains("not_started"),
        "{err}"
    );

    // A cloud that never answers and a deadline of 300 ms.
    let silent = rt.block_on(TestServer::start(|mut conn| async move {
        let _ = conn.read_request().await;
        conn.wait_closed().await;
    }));
    let url = silent.base_url();
    let mut args = lanes(&url);
    args.extend([
        "--prompt",
        "Hi",
        "--policy",
        "cloud-only",
        "--deadline-ms",
        "300",
        "--json",
    ]);
    let out = run(&args);
    assert!(!out.status.success());
    let v = json_of(&out);
    assert_eq!(v["status"], "deadline_exceeded");
    assert_eq!(v["deadline_ms"], 300.0);
    assert!(v["winner"].is_null());
}

#[test]
fn flags_override_the_config_file_and_routes_come_from_it() {
    let rt = server_runtime();
    let server = rt.block_on(TestServer::openai(Flavor::Vllm, &["from", " cloud"]));
    let config = fresh_path("edgecloud.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[local]
model = "{model}"
threads = 2

[cloud]
base_url = "{url}"
model = "test-model"
api_key_env = "{KEY_VAR}"

[harness]
policy = "local-only"
deadline_ms = 20000

[routes.vehicle_control]
policy = "local-only"
deadline_ms = 7000
"#,
            model = model(),
            url = server.base_url()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();

    let out = run(&[
        "--config",
        config,
        "--prompt",
        "Hi",
        "--max-tokens",
        "4",
        // Seeded: unseeded, the tiny random model now and then ends at
        // once, and an empty answer is no usable answer (exit 1).
        "--seed",
        "7",
        "--json",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v = json_of(&out);
    assert_eq!(
        (v["policy"].as_str(), v["deadline_ms"].as_f64()),
        (Some("local-only"), Some(20000.0))
    );

    let out = run(&[
        "--config",
        config,
        "--prompt",
        "Hi",
        "--policy",
        "cloud-only",
        "--deadline-ms",
        "15000",
        "--json",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v = json_of(&out);
    assert_eq!(v["policy"], "cloud-only");
    assert_eq!(v["deadline_ms"], 15000.0);
    assert_eq!(v["text"], "from cloud");

    let out = run(&[
        "--config",
        config,
        "--prompt",
        "Heater on",
        "--route",
        "vehicle_control",
        "--max-tokens",
        "4",
        "--seed",
        "7",
        "--json",
    ]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let v = json_of(&out);
    assert_eq!(v["route"], "vehicle_control");
    assert_eq!(v["deadline_ms"], 7000.0);
}

#[test]
fn help_shows_an_example_config_and_mistakes_are_named() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for needle in [
        "--config",
        "--model",
        "--base-url",
        "--cloud-model",
        "--api-key-env",
        "--policy",
        "--deadline-ms",
        "--threads",
        "[routes.vehicle_control]",
    ] {
        assert!(help.contains(needle), "help lacks {needle}");
    }

    let out = run(&["--prompt", "Hi"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no lane configured"),
        "{}",
        text(&out.stderr)
    );

    let out = run(&["--prompt", "Hi", "--model", model(), "--policy", "racer"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("best-of"),
        "{}",
        text(&out.stderr)
    );

    let bad = fresh_path("bad.toml");
    std::fs::write(
        &bad,
        "[harness]\npolicy = \"race\"\ncascade_threshold = 0.3\n",
    )
    .unwrap();
    let out = run(&["--prompt", "Hi", "--config", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("cascade_threshold"),
        "{}",
        text(&out.stderr)
    );

    let out = run(&["--prompt", "Hi", "--model", "/nonexistent/model.gguf"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("could not start the local lane"),
        "{}",
        text(&out.stderr)
    );
}

/// A run whose local worker is still inside llama.cpp when the deadline
/// settles it: the process waits for the worker before its exit handlers
/// run (without that wait, exits under qemu died with SIGSEGV 3 times in
/// 30), so every exit is the deadline's status, never a signal.
#[test]
fn run_exits_with_the_deadlines_status_after_its_late_worker_returns() {
    let prompt = "Tell me everything about the sea. ".repeat(40);
    let mut late = 0;
    for i in 0..6 {
        let out = run(&[
            "--model",
            model(),
            "--threads",
            "2",
            "--policy",
            "local-only",
            "--prompt",
            &prompt,
            "--max-tokens",
            "64",
            "--deadline-ms",
            "5",
            "--json",
        ]);
        assert_eq!(
            out.status.code(),
            Some(124),
            "exit {i}: {:?}: {}",
            out.status,
            text(&out.stderr)
        );
        let v = json_of(&out);
        assert_eq!(v["status"], "deadline_exceeded", "exit {i}");
        late += v["late_workers"].as_u64().unwrap_or(0);
    }
    assert!(late > 0, "the runs left a late worker to wait for");
}
