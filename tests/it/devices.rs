//! Integration tests: which ggml backends and devices edgecloud reports
//! (`edgecloud doctor`, the library's inventory), and GPU offload refused
//! where there is no GPU rather than silently run on the CPU.
//!
//! Written for every build: where a GPU is present (a CUDA or portable
//! build on a GPU machine) the no-GPU assertions turn into "offload is
//! accepted". Also: the scripts the GPU check uses read the real CLI.

use crate::cli::edgecloud;
use crate::support::cli::json_of;
use crate::support::models::tiny_model;
use edgecloud::local::devices::{self, DeviceError, DeviceKind, Loading};
use edgecloud::local::{LocalConfig, LocalError, LocalLane};

fn model() -> &'static str {
    tiny_model().to_str().expect("temp paths are UTF-8 here")
}

fn has_gpu() -> bool {
    devices::inventory().gpus().next().is_some()
}

#[test]
fn doctor_lists_the_cpu_device_and_its_backend() {
    let out = edgecloud(&["doctor", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v = json_of(&out);
    let devices = v["ggml"]["devices"].as_array().expect("a device list");
    let cpu = devices
        .iter()
        .find(|d| d["kind"] == "cpu")
        .unwrap_or_else(|| panic!("no CPU device in {v}"));
    assert_eq!(cpu["backend"], "CPU");
    assert!(cpu["memory_total"].as_u64().unwrap_or(0) > 0, "{cpu}");
    let backends = v["ggml"]["backends"].as_array().expect("a backend list");
    let cpu_backend = backends
        .iter()
        .find(|b| b["name"] == "CPU")
        .unwrap_or_else(|| panic!("no CPU backend in {v}"));
    assert!(!cpu_backend["features"].as_array().unwrap().is_empty());
    // The binary under test is the default build unless built portable.
    let portable = v["build"]["portable"].as_bool().expect("build.portable");
    assert_eq!(
        v["ggml"]["loading"],
        if portable { "dynamic" } else { "static" }
    );
    assert_eq!(v["gpu_offload"].as_bool(), Some(has_gpu()));

    let text = edgecloud(&["doctor"]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("devices"), "{text}");
    assert!(text.contains("GPU offload:"), "{text}");
}

#[test]
fn gpu_layers_without_a_gpu_fail_naming_the_flag() {
    let out = edgecloud(&[
        "local",
        "--model",
        model(),
        "--prompt",
        "hi",
        "--max-tokens",
        "2",
        "--threads",
        "2",
        "--gpu-layers",
        "3",
    ]);
    if has_gpu() {
        assert!(out.status.success(), "{out:?}");
        return;
    }
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--gpu-layers 3"), "{stderr}");
    assert!(stderr.contains("no GPU device"), "{stderr}");
    assert!(stderr.contains("edgecloud doctor"), "{stderr}");

    let out = edgecloud(&[
        "local",
        "--json",
        "--model",
        model(),
        "--prompt",
        "hi",
        "--gpu-layers",
        "3",
    ]);
    assert!(!out.status.success());
    let v = json_of(&out);
    assert_eq!(v["status"], "failed");
    assert_eq!(v["error"]["kind"], "no_gpu", "{v}");
}

#[test]
fn the_library_refuses_gpu_layers_without_a_gpu_and_runs_with_none() {
    let config = |gpu_layers| LocalConfig {
        threads: Some(2),
        gpu_layers,
        ..LocalConfig::new(tiny_model())
    };
    match LocalLane::start(config(2)) {
        Ok(_) => assert!(has_gpu(), "2 GPU layers accepted without a GPU"),
        Err(LocalError::Devices(DeviceError::NoGpu {
            gpu_layers, found, ..
        })) => {
            assert!(!has_gpu());
            assert_eq!(gpu_layers, 2);
            assert!(found.contains("CPU"), "{found}");
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
    assert!(LocalLane::start(config(0)).is_ok());
}

#[test]
fn the_inventory_matches_the_build() {
    let inv = devices::inventory();
    let cpu = inv.cpu_backend().expect("a CPU backend");
    assert!(inv
        .devices
        .iter()
        .any(|d| d.kind == DeviceKind::Cpu && d.backend == "CPU"));
    if cfg!(feature = "portable") {
        assert_eq!(inv.loading, Loading::Dynamic);
        let dir = inv.backends_dir.as_deref().expect("loaded from a folder");
        assert!(devices::holds_cpu_backend(dir));
        let library = cpu.library.as_deref().expect("the CPU library");
        assert!(library.starts_with(dir), "{library:?} not in {dir:?}");
        assert!(cpu.variant.is_some());
    } else {
        assert_eq!(inv.loading, Loading::Static);
        assert_eq!(inv.backends_dir, None);
        assert_eq!(cpu.library, None);
    }
}

/// `scripts/lane-speed` (what `scripts/gpu-check` measures the lane with on
/// the GPU machine) reads the real CLI's JSON: field names it depends on
/// must not drift.
#[test]
fn lane_speed_script_reads_the_cli() {
    let out = std::process::Command::new("scripts/lane-speed")
        .args([
            crate::support::cli::bin().to_str().expect("UTF-8 path"),
            model(),
            "0",
            "2",
        ])
        .env("REPS", "1")
        .env("PP", "100")
        .env("TG", "8")
        .env("CONTEXT", "256")
        .output()
        .expect("bash runs the script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(fields.len(), 10, "{stdout}");
    assert_eq!(fields[0], "pp100");
    assert_eq!(fields[8], "words");
    assert_eq!(fields[2], "tg8");
    assert_eq!(fields[4], "prompt_tokens");
    for i in [1, 3] {
        let rate: f64 = fields[i].parse().unwrap_or_else(|_| panic!("{stdout}"));
        assert!(rate > 0.0, "{stdout}");
    }
    // About the tokens asked for: the tiny model's byte-level tokenizer
    // takes a few tokens a filler word.
    let prompt_tokens: i64 = fields[5].parse().expect("a count");
    assert!((92..=108).contains(&prompt_tokens), "{stdout}");
    let words: usize = fields[9].parse().expect("a count");
    assert!(words > 0, "{stdout}");
}

/// A **stand-in** for llama-bench (test only): a bash script with `body`,
/// executable.
fn stand_in_llama_bench(body: &str) -> std::path::PathBuf {
    let fake = crate::support::models::write_temp(
        "llama-bench",
        format!("#!/usr/bin/env bash\n# Stand-in for llama-bench (test only).\n{body}").as_bytes(),
    );
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("the stand-in is executable");
    fake
}

/// `scripts/paired-speed` with the real CLI on the tiny model (no GPU
/// layers, 2 threads) against `bench`, PP 100 and TG 8, `reps` rounds.
fn paired_speed(bench: &std::path::Path, reps: &str) -> std::process::Output {
    std::process::Command::new("scripts/paired-speed")
        .args([
            crate::support::cli::bin().to_str().expect("UTF-8 path"),
            bench.to_str().expect("UTF-8 path"),
            model(),
            "0",
            "2",
        ])
        .env("REPS", reps)
        .env("PP", "100")
        .env("TG", "8")
        .env("FA", "off")
        .env("CONTEXT", "256")
        .output()
        .expect("bash runs the script")
}

/// `scripts/paired-speed` runs the lane and llama-bench in pairs, taking
/// turns at going first, and prints the medians of each side and of the
/// pairs' ratios. The lane is the real CLI on the tiny model; llama-bench
/// is a **stand-in** script (the real one is built from llama.cpp's
/// source, minutes of CI): it answers with fixed figures and records how
/// it was called, so the pairing and the arithmetic are what is tested.
#[test]
fn paired_speed_takes_turns_and_divides_pair_by_pair() {
    let calls = crate::support::models::fresh_path("llama-bench-calls");
    let fake = stand_in_llama_bench(&format!(
        "echo \"$*\" >> {calls:?}\n\
         echo '{{\"n_prompt\": 100, \"n_gen\": 0, \"avg_ts\": 1000.0}}'\n\
         echo '{{\"n_prompt\": 0, \"n_gen\": 8, \"avg_ts\": 500.0}}'\n"
    ));
    let out = paired_speed(&fake, "2");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Each round ran llama-bench once, one run after its warm-up, with the
    // lane's batch and the attention asked for.
    let called = std::fs::read_to_string(&calls).expect("the stand-in ran");
    assert_eq!(called.lines().count(), 2, "{called}");
    for line in called.lines() {
        for arg in [
            "-r 1", "-fa off", "-p 100", "-n 8", "-b 164", "-ub 164", "-ngl 0", "-t 2",
        ] {
            assert!(line.contains(arg), "{arg:?} missing in {line:?}");
        }
    }
    assert!(stderr.contains("round 1 (lane first)"), "{stderr}");
    assert!(stderr.contains("round 2 (llama-bench first)"), "{stderr}");
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(fields.len(), 12, "{stdout}");
    assert_eq!(
        (fields[0], fields[4], fields[8]),
        ("pp100", "tg8", "prompt_tokens")
    );
    let num = |i: usize| -> f64 { fields[i].parse().unwrap_or_else(|_| panic!("{stdout}")) };
    assert_eq!((num(2), num(6)), (1000.0, 500.0), "{stdout}");
    // With a constant peer the median of the ratios is the lane's median
    // over the peer's figure.
    for (lane, bench, ratio) in [(1, 2, 3), (5, 6, 7)] {
        assert!(num(lane) > 0.0, "{stdout}");
        let want = num(lane) / num(bench);
        assert!(
            (num(ratio) - want).abs() < 0.0015,
            "{stdout}: ratio {want:.4}"
        );
    }
}

/// A llama-bench that fails stops `scripts/paired-speed` with its error,
/// not with a table of zeros. The llama-bench is a **stand-in** script, as
/// above.
#[test]
fn paired_speed_stops_when_llama_bench_fails() {
    let fake = stand_in_llama_bench("echo 'no device' >&2\nexit 1\n");
    let out = paired_speed(&fake, "1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.contains("llama-bench failed") && stderr.contains("no device"),
        "{stderr}"
    );
}
