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
    assert_eq!(fields.len(), 8, "{stdout}");
    assert_eq!(fields[0], "pp100");
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
}
