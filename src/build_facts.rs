//! What this build knows of itself, for the bench report and `edgecloud
//! doctor`: the build script's records (commit, rustc, llama-cpp-sys-2's
//! version, `-C target-cpu`) and the cargo features. Only this crate can
//! read them (a build script's variables reach its own package alone).

/// This build's facts.
#[cfg(feature = "bench")]
pub fn build_facts() -> edgecloud_bench::BuildFacts {
    let mut gpu_backends = Vec::new();
    if cfg!(feature = "cuda") {
        gpu_backends.push("cuda");
    }
    if cfg!(feature = "vulkan") {
        gpu_backends.push("vulkan");
    }
    if cfg!(feature = "metal") {
        gpu_backends.push("metal");
    }
    edgecloud_bench::BuildFacts {
        git_commit: option_env!("EDGECLOUD_GIT_COMMIT"),
        rustc: option_env!("EDGECLOUD_RUSTC_VERSION"),
        llama_cpp_sys_version: option_env!("EDGECLOUD_LLAMA_SYS_VERSION"),
        target_cpu: option_env!("EDGECLOUD_TARGET_CPU"),
        portable: cfg!(feature = "portable"),
        gpu_backends,
        version: env!("CARGO_PKG_VERSION"),
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    }
}

/// This build, as the bench report records it.
#[cfg(feature = "bench")]
pub fn build_info() -> edgecloud_bench::BuildInfo {
    edgecloud_bench::BuildInfo::of(&build_facts())
}

/// This machine and build now, with the ggml devices the local lane
/// found; `model` is hashed (it reads the whole file).
#[cfg(feature = "bench")]
pub fn bench_environment(model: Option<&std::path::Path>) -> edgecloud_bench::Environment {
    edgecloud_bench::Environment::detect(
        model,
        build_info(),
        Some(edgecloud_local::devices::inventory()),
    )
}
