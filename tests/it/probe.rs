//! The child-process probe: a crash inside llama.cpp costs a typed error,
//! never the process. Real crashes first: the catalogue files that
//! llama.cpp aborts on, probed with the validator skipped
//! (`edgecloud model check --probe-invalid`). Then the lane's start-up
//! path, where (the validator now knowing every crash we found) the crash
//! comes from the probe's labelled test hook (`EDGECLOUD_PROBE_TEST_CRASH`,
//! honoured only by the hidden child subcommand), through a wrapper script
//! that sets it for the child alone.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use edgecloud::local::probe::{ProbeMode, TEST_CRASH_ENV};
use edgecloud::local::{LocalConfig, LocalError, LocalLane};
use edgecloud::{ChatMessage, LaneJob, Sampling};

use crate::gguf_catalogue;
use crate::support::cli::{bin, json_of};
use crate::support::models::{fresh_path, tiny_model};
use crate::support::real_model;

/// A fresh, empty verdict cache (so no test sees another's verdicts).
fn fresh_cache() -> PathBuf {
    let dir = fresh_path("probe-cache");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn edgecloud(args: &[&str], crash: Option<&str>) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args).env("XDG_CACHE_HOME", fresh_cache());
    if let Some(how) = crash {
        cmd.env(TEST_CRASH_ENV, how);
    }
    cmd.output().expect("the edgecloud binary runs")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

#[test]
fn the_catalogue_crashes_llama_cpp_only_inside_the_child() {
    let mut seen = Vec::new();
    for entry in gguf_catalogue::catalogue() {
        let path = gguf_catalogue::build(&entry);
        let out = edgecloud(
            &[
                "model",
                "check",
                "--probe-invalid",
                "--no-cache",
                "--json",
                path_str(&path),
            ],
            None,
        );
        // This process and the edgecloud parent both survived: it exited
        // with a code, and said what killed its child.
        assert_eq!(out.status.code(), Some(1), "{}", entry.name);
        let json = json_of(&out);
        if !entry.crashes {
            // A neighbour: what llama.cpp does with it, for the record.
            eprintln!(
                "{:24} {:8} {}",
                entry.name,
                json["probe"]["status"].as_str().unwrap_or("?"),
                json["probe"]["error"].as_str().unwrap_or("")
            );
            continue;
        }
        assert_eq!(json["valid"], false, "{}", entry.name);
        assert_eq!(json["error_kind"], entry.kind, "{}", entry.name);
        let probe = &json["probe"];
        assert_eq!(probe["status"], "crashed", "{}: {probe}", entry.name);
        assert_eq!(probe["error_kind"], "probe_crashed");
        let signal = probe["signal_name"].as_str().unwrap().to_string();
        assert!(
            signal == "SIGABRT" || signal == "SIGSEGV",
            "{}: {signal}",
            entry.name
        );
        let log: Vec<String> = probe["log"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_string())
            .collect();
        if signal == "SIGABRT" {
            assert!(
                log.iter().any(|l| l.starts_with("llama.cpp/")),
                "{}: an abort carries llama.cpp's message and source line: {log:?}",
                entry.name
            );
        }
        eprintln!(
            "{:24} {signal:8} during {:10} {}",
            entry.name,
            probe["stage"].as_str().unwrap().split(' ').next().unwrap(),
            log.last().map_or("", String::as_str)
        );
        seen.push(entry.name);
    }
    assert_eq!(seen.len(), 17, "{seen:?}");
}

/// A probe program that is the real binary with the test hook set: the
/// child aborts (or hangs) after a good probe, as a crash the validator
/// cannot know would.
fn crashing_program(how: &str) -> PathBuf {
    let script = fresh_path(&format!("probe-{how}.sh"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{TEST_CRASH_ENV}={how} exec '{}' \"$@\"\n",
            bin().display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    script
}

fn probed_config(program: PathBuf) -> LocalConfig {
    LocalConfig {
        probe: ProbeMode::Child,
        probe_program: Some(program),
        probe_cache_dir: Some(fresh_cache()),
        threads: Some(1),
        ..LocalConfig::new(tiny_model())
    }
}

fn one_token(lane: &LocalLane) {
    let job = LaneJob::new(
        vec![ChatMessage::user("hi")],
        Sampling {
            max_tokens: 2,
            ..Sampling::default()
        },
        std::time::Instant::now() + std::time::Duration::from_secs(60),
    );
    lane.generate(job).unwrap();
}

#[test]
fn a_crash_in_the_probe_fails_the_start_and_this_process_keeps_going() {
    let err = LocalLane::start(probed_config(crashing_program("abort"))).unwrap_err();
    match &err {
        LocalError::ProbeCrashed {
            signal_name, log, ..
        } => {
            assert_eq!(signal_name, "SIGABRT");
            assert!(log.iter().any(|l| l.contains("test hook")), "{log:?}");
        }
        other => panic!("expected ProbeCrashed, got {other:?}"),
    }
    assert_eq!(err.kind(), "probe_crashed");
    assert!(err.to_string().contains("SIGABRT"), "{err}");

    // Still here: the same model, probed by the real binary, starts and
    // answers; a second start takes the cached verdict.
    let config = probed_config(bin());
    let lane = LocalLane::start(config.clone()).unwrap();
    assert_eq!(lane.info().probe.status, "child");
    one_token(&lane);
    let again = LocalLane::start(config).unwrap();
    assert_eq!(again.info().probe.status, "cached");
}

#[test]
fn a_probe_past_its_bound_is_killed_and_typed() {
    let config = LocalConfig {
        probe_timeout_ms: 3000,
        ..probed_config(crashing_program("hang"))
    };
    match LocalLane::start(config).unwrap_err() {
        LocalError::ProbeTimedOut { after_ms, .. } => assert_eq!(after_ms, 3000),
        other => panic!("expected ProbeTimedOut, got {other:?}"),
    }
}

#[test]
fn probe_modes_without_a_program() {
    // The test binary is not edgecloud: `auto` skips, `child` refuses.
    let auto = LocalConfig {
        threads: Some(1),
        ..LocalConfig::new(tiny_model())
    };
    let lane = LocalLane::start(auto.clone()).unwrap();
    assert_eq!(lane.info().probe.status, "skipped");
    let err = LocalLane::start(LocalConfig {
        probe: ProbeMode::Child,
        ..auto.clone()
    })
    .unwrap_err();
    assert_eq!(err.kind(), "probe_unavailable", "{err}");
    let off = LocalLane::start(LocalConfig {
        probe: ProbeMode::Off,
        ..auto
    })
    .unwrap();
    assert_eq!(off.info().probe.status, "off");
}

#[test]
fn cli_local_reports_a_probe_crash_as_an_error_and_probe_off_skips_it() {
    let model = path_str(tiny_model());
    let args = [
        "local",
        "--model",
        model,
        "--prompt",
        "hi",
        "--max-tokens",
        "2",
        "--json",
    ];
    let out = edgecloud(&args, Some("abort"));
    assert_eq!(out.status.code(), Some(1), "exited normally, with failure");
    let json = json_of(&out);
    assert_eq!(json["error"]["kind"], "probe_crashed", "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("SIGABRT"),
        "{json}"
    );
    let mut off = args.to_vec();
    off.extend(["--probe", "off"]);
    let out = edgecloud(&off, Some("abort"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cli_serve_refuses_to_start_on_a_probe_crash() {
    let out = edgecloud(
        &[
            "serve",
            "--model",
            path_str(tiny_model()),
            "--listen",
            "127.0.0.1:0",
        ],
        Some("abort"),
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SIGABRT"), "{stderr}");
    assert!(out.stdout.is_empty(), "it never listened");
}

#[test]
fn cli_model_check_passes_good_models_and_caches_the_verdict() {
    let cache = fresh_cache();
    for model in [tiny_model(), real_model::smollm2()] {
        let run = || {
            Command::new(bin())
                .args([
                    "model",
                    "check",
                    "--json",
                    "--threads",
                    "1",
                    path_str(model),
                ])
                .env("XDG_CACHE_HOME", &cache)
                .output()
                .unwrap()
        };
        let first = json_of(&run());
        assert_eq!(first["ok"], true, "{first}");
        assert_eq!(first["probe"]["source"], "child", "{first}");
        let second = json_of(&run());
        assert_eq!(second["probe"]["source"], "cached", "{second}");
    }
}
