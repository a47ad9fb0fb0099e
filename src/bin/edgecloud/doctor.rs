//! `edgecloud doctor`: what this binary runs on. Its build (default or
//! portable), the ggml backends it has (for the portable build: the CPU
//! variant ggml chose for this CPU, and the library it came from; for a
//! cross build: the ARM level its kernels were compiled for, and whether
//! this CPU has what they use), the
//! devices they offer (GPU names and memory), and whether `--gpu-layers`
//! can offload anything. Text, or one JSON object with `--json`. Exits
//! non-zero when ggml has no device at all. Must not load a model.

use edgecloud::local::devices::{self, DeviceKind, Inventory, Loading};
use edgecloud_bench::BuildInfo;
use serde_json::json;
use std::process::ExitCode;

/// Arguments of `edgecloud doctor`.
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    output: crate::output::JsonArgs,
}

pub(crate) fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let inv = devices::inventory();
    let build = edgecloud::build_facts::build_info();
    // The answer `--gpu-layers 1` would get, without its layer count.
    let offload = devices::check_gpu_layers(1);
    let cpu_level = devices::check_cpu_level();
    if args.output.json {
        let value = json!({
            "edgecloud": build.edgecloud_version,
            "build": build,
            "ggml": inv,
            "gpu_offload": offload.is_ok(),
            "cpu_level": devices::CPU_LEVEL,
            "cpu_level_ok": cpu_level.is_ok(),
            "compute_wait": edgecloud::local::wait::current(),
            "thread_policy": edgecloud::local::ThreadPolicy::default(),
            "spec_type": edgecloud::local::SpecType::default(),
            "problem": offload.as_ref().err().map(|e| json!({"kind": e.kind(), "message": e.to_string()})),
        });
        args.output.print(&value)?;
    } else {
        print_text(&build, &inv, &offload);
        match (&cpu_level, devices::CPU_LEVEL) {
            (Err(err), _) => println!("CPU level: {err}"),
            (Ok(()), Some(level)) => println!(
                "CPU level: {level} (built by scripts/cross {}): this CPU has what its kernels use",
                std::env::consts::ARCH
            ),
            (Ok(()), None) => {}
        }
    }
    Ok(if inv.devices.is_empty() || cpu_level.is_err() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_text(build: &BuildInfo, inv: &Inventory, offload: &Result<(), devices::DeviceError>) {
    println!(
        "edgecloud {} (commit {}, llama-cpp-sys-2 {}, {})",
        build.edgecloud_version,
        build.git_commit.as_deref().unwrap_or("unknown"),
        build.llama_cpp_sys_version.as_deref().unwrap_or("unknown"),
        if build.portable {
            "portable build: ggml backends loaded at run time"
        } else if build.native_cpu_build {
            "native CPU build, ggml linked in"
        } else {
            "default build, ggml linked in"
        }
    );
    println!(
        "threads   wait at barriers with {}; per step: {} by default (fewer threads while \
         other programs hold cores; --thread-policy fixed for llama.cpp's behaviour)",
        edgecloud::local::wait::current().describe(),
        edgecloud::local::ThreadPolicy::default()
    );
    println!(
        "drafts    speculative decoding {} by default (--spec-type ngram: greedy answers \
         draft by prompt lookup, the answer unchanged)",
        edgecloud::local::SpecType::default()
    );
    match (inv.loading, &inv.backends_dir) {
        (Loading::Static, _) => println!("backends  linked into the binary"),
        (Loading::Dynamic, Some(dir)) => println!("backends  loaded from {}", dir.display()),
        (Loading::Dynamic, None) => println!(
            "backends  none found (looked in: {})",
            devices::search_dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
    for b in &inv.backends {
        println!(
            "  {:<6} {}{} ({} device{})",
            b.name,
            b.variant
                .as_deref()
                .map_or(String::new(), |v| format!("variant {v}, ")),
            b.library
                .as_deref()
                .map_or("built in".into(), |l| l.display().to_string()),
            b.devices,
            if b.devices == 1 { "" } else { "s" }
        );
        if !b.features.is_empty() {
            println!("         features: {}", b.features.join(" "));
        }
    }
    println!("devices");
    if inv.devices.is_empty() {
        println!("  none");
    }
    for d in &inv.devices {
        let kind = match d.kind {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
            DeviceKind::IntegratedGpu => "integrated gpu",
            DeviceKind::Accelerator => "accelerator",
            DeviceKind::Unknown => "unknown",
        };
        println!(
            "  {:<6} {:<14} {}, {} ({} free)",
            d.name,
            kind,
            d.description,
            gib(d.memory_total),
            gib(d.memory_free)
        );
    }
    match offload {
        Ok(()) => println!(
            "GPU offload: available ({})",
            inv.gpus()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(err) => println!("GPU offload: not possible: --gpu-layers N>0 is refused: {err}"),
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}
