//! Integration tests: the real `edgecloud` binary (local diagnostic).

use crate::support::cli::{bin, json_of};
use crate::support::models::tiny_model;
use std::process::{Command, Output};

pub(crate) fn edgecloud(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env_remove("EDGECLOUD_LOG")
        .output()
        .expect("the edgecloud binary runs")
}

fn model() -> &'static str {
    tiny_model().to_str().expect("temp paths are UTF-8 here")
}

#[test]
fn the_prompt_may_be_the_last_argument_as_ollama_run_takes_it() {
    let run = |prompt: &[&str]| {
        let mut args = vec!["local", "-m", model(), "--max-tokens", "4", "--seed", "3"];
        args.extend_from_slice(prompt);
        args.push("--json");
        let out = edgecloud(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        json_of(&out)
    };
    let positional = run(&["Hello there"]);
    let flag = run(&["--prompt", "Hello there"]);
    assert_eq!(
        positional["text"], flag["text"],
        "the same request either way"
    );
    assert_eq!(positional["prompt_tokens"], flag["prompt_tokens"]);
    let both = edgecloud(&["local", "-m", model(), "--prompt", "a", "b"]);
    assert_eq!(both.status.code(), Some(2), "two prompts are a usage error");
    let two = edgecloud(&["local", "-m", model(), "a", "b"]);
    assert_eq!(
        two.status.code(),
        Some(2),
        "local takes one prompt argument"
    );
    assert!(
        String::from_utf8_lossy(&two.stderr).contains("--model"),
        "{}",
        String::from_utf8_lossy(&two.stderr)
    );
}

#[test]
fn run_takes_the_model_then_the_prompt_as_ollama_run_does() {
    let ask = |args: &[&str]| {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[
            "--policy",
            "local-only",
            "--max-tokens",
            "4",
            "--temperature",
            "0",
            "--threads",
            "2",
        ]);
        let out = edgecloud(&all);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let positional = ask(&[model(), "Hello there"]);
    let flags = ask(&["-m", model(), "Hello there"]);
    // The answer alone on stdout, the same either way; the run's report on
    // stderr.
    assert_eq!(positional.stdout, flags.stdout);
    assert!(!positional.stdout.is_empty());
    let stdout = String::from_utf8_lossy(&positional.stdout);
    assert!(!stdout.contains("local-only"), "{stdout}");
    assert!(String::from_utf8_lossy(&positional.stderr).contains("local-only"));
}

#[test]
fn local_json_reports_a_completed_run() {
    let out = edgecloud(&[
        "local",
        "--model",
        model(),
        "--prompt",
        "Hello",
        "--max-tokens",
        "8",
        "--seed",
        "3",
        "--threads",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json_of(&out);
    assert_eq!(v["lane"], "local");
    assert_eq!(v["status"], "completed");
    assert!(v["error"].is_null());
    assert!(v["text"].is_string());
    assert!(matches!(
        v["finish_reason"].as_str(),
        Some("stop" | "length")
    ));
    assert!(v["prompt_tokens"].as_u64().unwrap() > 0);
    let completion = v["completion_tokens"].as_u64().unwrap();
    assert!((1..=8).contains(&completion));
    for field in [
        "load_ms",
        "ttft_ms",
        "total_ms",
        "prompt_tokens_per_s",
        "mean_logprob",
    ] {
        assert!(v[field].is_number(), "{field} should be a number: {v}");
    }
    assert!(v["ttft_ms"].as_f64().unwrap() <= v["total_ms"].as_f64().unwrap());
}

#[test]
fn local_same_seed_gives_the_same_text_across_processes() {
    let run = || {
        json_of(&edgecloud(&[
            "local",
            "--model",
            model(),
            "--prompt",
            "Hi",
            "--max-tokens",
            "12",
            "--seed",
            "21",
            "--json",
        ]))["text"]
            .clone()
    };
    assert_eq!(run(), run());
}

#[test]
fn local_deadline_reached_is_reported_and_exits_non_zero() {
    let out = edgecloud(&[
        "local",
        "--model",
        model(),
        "--prompt",
        "Hello",
        "--deadline-ms",
        "0",
        "--json",
    ]);
    assert!(!out.status.success());
    let v = json_of(&out);
    assert_eq!(v["status"], "deadline_exceeded");
    assert_eq!(v["finish_reason"], "deadline");
    assert!(!out.stderr.is_empty(), "a message on stderr");
}

#[test]
fn local_bad_model_fails_with_a_clear_error() {
    let out = edgecloud(&[
        "local",
        "--model",
        "/nonexistent/m.gguf",
        "--prompt",
        "x",
        "--json",
    ]);
    assert!(!out.status.success());
    let v = json_of(&out);
    assert_eq!(v["status"], "failed");
    assert_eq!(v["error"]["kind"], "invalid_model");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/m.gguf"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/m.gguf"));
}

#[test]
fn local_text_mode_streams_then_prints_the_breakdown() {
    let out = edgecloud(&[
        "local",
        "--model",
        model(),
        "--prompt",
        "Hello",
        "--max-tokens",
        "6",
        "--seed",
        "1",
    ]);
    assert!(out.status.success());
    // The answer alone on stdout; the breakdown on stderr.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for label in [
        "status",
        "model load",
        "prompt",
        "first token",
        "generation",
        "total",
    ] {
        assert!(stderr.contains(label), "missing {label:?} in:\n{stderr}");
    }
    assert!(!stdout.contains("model load"), "{stdout}");
    assert!(!stdout.contains("---"), "{stdout}");
}
