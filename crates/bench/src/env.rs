//! What a report records about where it was measured: the machine
//! ([`MachineInfo`]), the build ([`BuildInfo`]) and the model file
//! ([`ModelFileInfo`]). Detection is best effort and never fails a bench:
//! what cannot be found is `None` or `"unknown"`. It must not measure speed.
//!
//! # Native CPU build detection
//! `build.rs` reads the `-C target-cpu=...` flag cargo passes to rustc
//! (`CARGO_ENCODED_RUSTFLAGS`). llama-cpp-sys-2 reads the same flag: with
//! `native` it builds llama.cpp with `GGML_NATIVE=ON`, otherwise for the
//! features the Rust target enables (or `-march=CPU` when another CPU is
//! named). So [`BuildInfo::native_cpu_build`] is true exactly when that flag
//! is `native`. Without it, llama.cpp's CPU kernels get ggml's portable
//! defaults (on x86-64: SSE4.2, AVX, AVX2, BMI2, FMA, F16C; no AVX-512)
//! plus any feature the Rust target enables (`cfg!(target_feature)`). The
//! report lists the SIMD features this machine has at run time that those
//! kernels do not use: a non-empty list means a native build would likely
//! be faster here.

use super::sha256::sha256_reader;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The machine a bench ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineInfo {
    /// CPU model name (`/proc/cpuinfo`, or `sysctl` on macOS).
    pub cpu_model: String,
    /// Physical cores.
    pub physical_cores: usize,
    /// Logical CPUs this process may use.
    pub logical_cpus: usize,
    /// Total memory in bytes, when known.
    pub memory_bytes: Option<u64>,
    /// Operating system family (`linux`, `macos`, ...).
    pub os: String,
    /// Distribution or product name (`Debian GNU/Linux 12 (bookworm)`).
    pub os_name: Option<String>,
    /// Kernel release.
    pub kernel: Option<String>,
    /// CPU architecture (`x86_64`, `aarch64`).
    pub arch: String,
    /// SIMD features the CPU offers at run time (among those llama.cpp
    /// uses).
    pub cpu_features: Vec<String>,
    /// The ggml backends and devices the process found: the CPU variant
    /// the portable build chose, GPUs with their memory. `None` in reports
    /// written before edgecloud recorded it.
    #[serde(default)]
    pub ggml: Option<edgecloud_core::devices::Inventory>,
}

/// How this edgecloud binary was built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildInfo {
    /// edgecloud's version.
    pub edgecloud_version: String,
    /// The git commit it was built from, when git was there; `-dirty` when
    /// its tracked sources differed from that commit (see `build.rs`).
    pub git_commit: Option<String>,
    /// llama-cpp-sys-2's version (which fixes the llama.cpp source linked).
    pub llama_cpp_sys_version: Option<String>,
    /// The rustc that built it.
    pub rustc: Option<String>,
    /// `release` or `debug`.
    pub profile: String,
    /// The `-C target-cpu` the build used (`None`: the target's default).
    pub target_cpu: Option<String>,
    /// True when built with `-C target-cpu=native` (llama.cpp with
    /// GGML_NATIVE).
    pub native_cpu_build: bool,
    /// SIMD features the Rust target enables at compile time.
    pub rust_target_features: Vec<String>,
    /// What llama.cpp's CPU kernels were compiled for: `native` (the build
    /// machine's CPU), `-march=CPU`, or the feature list (ggml's defaults
    /// plus the Rust target's).
    pub llama_cpu_kernels: Vec<String>,
    /// SIMD features this machine has that llama.cpp's kernels do not use
    /// (always empty for a native build, which is assumed to run where it
    /// was built).
    pub unused_cpu_features: Vec<String>,
    /// GPU backends compiled in (`cuda`, `vulkan`, `metal`).
    pub gpu_backends: Vec<String>,
    /// True for the portable build: ggml's backends are libraries loaded
    /// at run time, the CPU one chosen for the machine (see
    /// [`MachineInfo::ggml`]), so the kernels are not fixed at build time.
    #[serde(default)]
    pub portable: bool,
}

/// The model file a bench ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFileInfo {
    /// The file's name.
    pub file_name: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// SHA-256 of the whole file (edgecloud's own implementation).
    pub sha256: Option<String>,
    /// Quantisation label (`Q8_0`, `Q4_K_M`, `F32`).
    pub quantization: Option<String>,
    /// Architecture (`llama`, ...).
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// Number of weights.
    pub parameters: Option<u64>,
}

macro_rules! features {
    ($($name:tt),* $(,)?) => {{
        let out: Vec<(&'static str, bool, bool)> =
            vec![$(($name, cfg!(target_feature = $name), runtime_has!($name))),*];
        out
    }};
}

#[cfg(target_arch = "x86_64")]
macro_rules! runtime_has {
    ($name:tt) => {
        std::arch::is_x86_feature_detected!($name)
    };
}

#[cfg(target_arch = "aarch64")]
macro_rules! runtime_has {
    ($name:tt) => {
        std::arch::is_aarch64_feature_detected!($name)
    };
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
macro_rules! runtime_has {
    ($name:tt) => {
        false
    };
}

/// The SIMD features ggml enables by default when not built native
/// (`ggml/CMakeLists.txt`: `INS_ENB`), in our feature names.
#[cfg(target_arch = "x86_64")]
const GGML_DEFAULTS: &[&str] = &["sse4.2", "avx", "avx2", "fma", "f16c"];
#[cfg(not(target_arch = "x86_64"))]
const GGML_DEFAULTS: &[&str] = &[];

/// (name, enabled at compile time, present at run time) for the SIMD
/// features llama.cpp's CPU backend cares about.
fn feature_table() -> Vec<(&'static str, bool, bool)> {
    #[cfg(target_arch = "x86_64")]
    {
        features!("sse4.2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl")
    }
    #[cfg(target_arch = "aarch64")]
    {
        features!("neon", "dotprod", "fp16", "sve")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Vec::new()
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn sysctl(name: &str) -> Option<String> {
    if !cfg!(target_os = "macos") {
        return None;
    }
    let out = std::process::Command::new("sysctl")
        .args(["-n", name])
        .output()
        .ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

fn cpuinfo_field(cpuinfo: &str, keys: &[&str]) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (keys.contains(&k.trim()) && !v.trim().is_empty()).then(|| v.trim().to_string())
    })
}

fn meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn os_release_name(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
}

impl MachineInfo {
    /// Looks at this machine.
    pub fn detect() -> Self {
        let cpuinfo = read("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo_field(&cpuinfo, &["model name", "Hardware", "Model", "cpu model"])
            .or_else(|| sysctl("machdep.cpu.brand_string"))
            .unwrap_or_else(|| "unknown".into());
        let memory_bytes = read("/proc/meminfo")
            .and_then(|m| meminfo_total(&m))
            .or_else(|| sysctl("hw.memsize").and_then(|v| v.parse().ok()));
        let os_name = read("/etc/os-release")
            .and_then(|t| os_release_name(&t))
            .or_else(|| sysctl("kern.osproductversion").map(|v| format!("macOS {v}")));
        let kernel = read("/proc/sys/kernel/osrelease")
            .map(|k| k.trim().to_string())
            .or_else(|| sysctl("kern.osrelease"));
        Self {
            cpu_model,
            physical_cores: edgecloud_core::cores::physical_cores(),
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes,
            os: std::env::consts::OS.into(),
            os_name,
            kernel,
            arch: std::env::consts::ARCH.into(),
            cpu_features: feature_table()
                .into_iter()
                .filter(|f| f.2)
                .map(|f| f.0.to_string())
                .collect(),
            // What ggml found is the local lane's to say: the caller fills
            // it in (`edgecloud`'s `bench_environment`).
            ggml: None,
        }
    }
}

/// What only the binary knows of its own build: what its build script
/// recorded (commit, rustc, llama-cpp-sys-2's version, `-C target-cpu`)
/// and the cargo features it was built with. The `edgecloud` crate fills
/// it in (`edgecloud::build_facts`); this crate cannot see either.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildFacts {
    /// The git commit the sources were at (`-dirty`: changed since).
    pub git_commit: Option<&'static str>,
    /// `rustc --version`.
    pub rustc: Option<&'static str>,
    /// The llama-cpp-sys-2 version (which fixes the llama.cpp source).
    pub llama_cpp_sys_version: Option<&'static str>,
    /// The `-C target-cpu` of the Rust flags, when any.
    pub target_cpu: Option<&'static str>,
    /// The portable build (ggml's backends loaded at run time).
    pub portable: bool,
    /// GPU backends compiled in (`cuda`, `vulkan`, `metal`).
    pub gpu_backends: Vec<&'static str>,
    /// The crate version of the binary.
    pub version: &'static str,
    /// `release` or `debug`.
    pub profile: &'static str,
}

impl BuildInfo {
    /// A binary's build, from what it knows of itself.
    pub fn of(facts: &BuildFacts) -> Self {
        let nonempty = |v: Option<&'static str>| v.filter(|s| !s.is_empty()).map(str::to_string);
        let target_cpu = nonempty(facts.target_cpu);
        let table = feature_table();
        let native = target_cpu.as_deref() == Some("native");
        let march = target_cpu.is_some() && !native;
        let portable = facts.portable;
        let kernels: Vec<String> = match target_cpu.as_deref() {
            _ if portable => vec!["chosen at run time (one library per CPU level)".into()],
            Some("native") => vec!["native".into()],
            Some(cpu) => vec![format!("-march={cpu}")],
            None => {
                let mut k: Vec<String> = GGML_DEFAULTS.iter().map(|f| f.to_string()).collect();
                for f in table.iter().filter(|f| f.1) {
                    if !k.iter().any(|x| x == f.0) {
                        k.push(f.0.to_string());
                    }
                }
                k
            }
        };
        let gpu_backends: Vec<String> = facts.gpu_backends.iter().map(|b| b.to_string()).collect();
        Self {
            edgecloud_version: facts.version.into(),
            git_commit: nonempty(facts.git_commit),
            llama_cpp_sys_version: nonempty(facts.llama_cpp_sys_version),
            rustc: nonempty(facts.rustc),
            profile: facts.profile.into(),
            native_cpu_build: native,
            target_cpu,
            rust_target_features: table
                .iter()
                .filter(|f| f.1)
                .map(|f| f.0.to_string())
                .collect(),
            llama_cpu_kernels: kernels.clone(),
            unused_cpu_features: if native || march || portable {
                Vec::new()
            } else {
                table
                    .iter()
                    .filter(|f| f.2 && !kernels.iter().any(|k| k == f.0))
                    .map(|f| f.0.to_string())
                    .collect()
            },
            gpu_backends,
            portable,
        }
    }
}

impl ModelFileInfo {
    /// Describes the model at `path`: size, SHA-256 (reads the whole file),
    /// and what its GGUF header says. Never fails: unreadable parts are
    /// `None`.
    pub fn of(path: &Path) -> Self {
        let info = edgecloud_gguf::inspect(path).ok().map(|i| i.info);
        let sha256 = std::fs::File::open(path)
            .and_then(|f| sha256_reader(std::io::BufReader::new(f)))
            .ok();
        Self {
            file_name: path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into(),
            ),
            size_bytes: std::fs::metadata(path).map_or(0, |m| m.len()),
            sha256,
            quantization: info.as_ref().map(|i| i.quantization.clone()),
            architecture: info.as_ref().and_then(|i| i.architecture.clone()),
            name: info.as_ref().and_then(|i| i.name.clone()),
            parameters: info.as_ref().map(|i| i.parameters),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_system_files() {
        let cpuinfo = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t: avx\n";
        assert_eq!(
            cpuinfo_field(cpuinfo, &["model name"]).as_deref(),
            Some("Intel(R) Xeon(R) Processor")
        );
        assert_eq!(
            meminfo_total("MemTotal:       1024 kB\nMemFree: 1 kB\n"),
            Some(1 << 20)
        );
        assert_eq!(
            os_release_name("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n").as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }

    #[test]
    fn build_info_is_consistent() {
        let b = BuildInfo::of(&BuildFacts {
            version: env!("CARGO_PKG_VERSION"),
            profile: "release",
            ..BuildFacts::default()
        });
        assert_eq!(
            b.native_cpu_build,
            b.target_cpu.as_deref() == Some("native")
        );
        assert!(b
            .unused_cpu_features
            .iter()
            .all(|f| !b.llama_cpu_kernels.contains(f)));
        if b.target_cpu.is_none() && !b.portable {
            let expected = GGML_DEFAULTS
                .iter()
                .copied()
                .chain(b.rust_target_features.iter().map(String::as_str));
            for f in expected {
                assert!(b.llama_cpu_kernels.iter().any(|k| k == f), "{f}");
            }
        }
        assert_eq!(b.edgecloud_version, env!("CARGO_PKG_VERSION"));
    }
}
