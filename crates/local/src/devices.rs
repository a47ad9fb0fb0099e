//! Which ggml backends and devices this process runs on, loading them in
//! the portable build, and refusing GPU offload where there is no GPU.
//!
//! Two builds exist (docs/gpu.md, "Portable build"):
//! - the default build links ggml's CPU backend (and a GPU backend with the
//!   `cuda`, `vulkan` or `metal` feature) into the binary: nothing to load;
//! - the `portable` build (scripts/build-portable: llama.cpp and ggml as
//!   shared libraries, ggml with `GGML_BACKEND_DL`) keeps ggml's backends in
//!   libraries beside the binary: `libggml-cpu-<level>.so`, one per x86-64
//!   level (`haswell` for AVX2, `skylakex`/`icelake`/`zen4`/... for
//!   AVX-512), and any GPU backend put there (`libggml-cuda.so`).
//!   [`ensure_loaded`] loads them once, before llama.cpp is initialised;
//!   ggml asks every CPU variant how well it fits this CPU and keeps the
//!   best one.
//!
//! Where the portable build looks, first folder holding a `libggml-cpu`
//! library wins: `$EDGECLOUD_BACKENDS_DIR`, then the executable's own
//! folder, then, for a test or example binary inside a cargo target
//! directory (`deps/`, `examples/`), the folder above it. The current
//! directory is never searched (ggml's own default does): a library there
//! is not ours to load.
//!
//! [`inventory`] says what was found (the bench report and `edgecloud
//! doctor` print it); [`check_gpu_layers`] turns "GPU offload asked, no GPU
//! found" into an error instead of llama.cpp's silent fallback to the CPU.
//!
//! A cross build (scripts/cross) links one CPU backend compiled for an ARM
//! level (`armv8.2_2`: NEON, dotprod, fp16) and names it at compile time
//! (`EDGECLOUD_CPU_VARIANT`): [`inventory`] reports it as the CPU
//! variant, and [`check_cpu_level`] refuses, before ggml runs, a CPU that
//! lacks what the level's kernels use (they would die of SIGILL).
//!
//! This module must not load models or measure anything. Its two ggml calls
//! that llama-cpp-2 does not wrap (loading a folder, the feature lists) are
//! in `ffi`.

use std::path::{Path, PathBuf};

/// The environment variable naming the folder of the portable build's
/// backend libraries (default: the executable's folder).
pub const BACKENDS_DIR_ENV: &str = "EDGECLOUD_BACKENDS_DIR";

pub use edgecloud_core::devices::{BackendInfo, DeviceInfo, DeviceKind, Inventory, Loading};

/// Why the devices found cannot run what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// GPU offload was asked for and ggml has no GPU device.
    #[error(
        "gpu_layers = {gpu_layers} asks for GPU offload, but ggml found no GPU device \
         (devices: {found}); {hint}"
    )]
    NoGpu {
        /// The layers asked for.
        gpu_layers: u32,
        /// The devices that were found.
        found: String,
        /// What would give this process a GPU.
        hint: String,
    },
    /// A GPU backend library is beside the binary, but ggml could not use
    /// it: a library it needs is missing (the Vulkan loader
    /// `libvulkan.so.1`, CUDA's runtime), or it loaded and found no driver.
    #[error(
        "gpu_layers = {gpu_layers} asks for GPU offload, but the GPU backend {library} is \
         not usable: {reason}; {fix}"
    )]
    GpuLibrary {
        /// The layers asked for.
        gpu_layers: u32,
        /// The backend library.
        library: PathBuf,
        /// What the dynamic linker or the backend said.
        reason: String,
        /// What would make it usable.
        fix: String,
    },
    /// This binary's ggml kernels were compiled for a CPU level this CPU
    /// is below (a cross build's `--level`).
    #[error(
        "this edgecloud was built for the ARM level {level}, whose kernels use {missing}, \
         which this CPU lacks; rebuild with `scripts/cross aarch64 --level {fallback}` \
         (`edgecloud doctor` says what this CPU has)"
    )]
    CpuLevel {
        /// The level the binary was built for.
        level: String,
        /// The CPU features it needs and this CPU lacks.
        missing: String,
        /// A level this CPU runs.
        fallback: String,
    },
    /// The KV cache of the layers on the GPU device does not fit the
    /// memory it has left after the weights (`device_fit`).
    #[error(
        "the KV cache of {layers} layers on {devices} needs {} ({context_size} cells x \
         {streams} stream(s)), but the device has {} free after the weights; use \
         --context-size {fits_context} or less, fewer --parallel lanes, or --gpu-layers \
         {fits_layers} (the other layers on the CPU)",
        mib(*need), mib(*free)
    )]
    DoesNotFit {
        /// The GPU device(s) holding the layers.
        devices: String,
        /// Layers whose KV cache would be on the device.
        layers: u32,
        /// Bytes the KV cache needs there.
        need: u64,
        /// Bytes free on the device.
        free: u64,
        /// The context size asked for, per stream.
        context_size: u32,
        /// KV streams (lanes and samples).
        streams: u32,
        /// The largest context size that fits.
        fits_context: u32,
        /// The most layers whose KV cache fits at this context size.
        fits_layers: u32,
    },
    /// The portable build found no backend library at all.
    #[error(
        "ggml has no device to run on: no libggml-cpu library in {searched}; the portable \
         build keeps them beside the edgecloud binary (or set {BACKENDS_DIR_ENV})"
    )]
    NoBackends {
        /// The folders searched.
        searched: String,
    },
}

impl DeviceError {
    /// A stable snake_case name for the variant.
    pub fn kind(&self) -> &'static str {
        match self {
            DeviceError::NoGpu { .. } => "no_gpu",
            DeviceError::GpuLibrary { .. } => "gpu_library",
            DeviceError::NoBackends { .. } => "no_backends",
            DeviceError::CpuLevel { .. } => "cpu_level",
            DeviceError::DoesNotFit { .. } => "does_not_fit",
        }
    }
}

/// Bytes as MiB, for messages.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Loads the portable build's backend libraries, once per process; returns
/// the folder they came from. The default build has nothing to load and
/// returns `None`.
pub fn ensure_loaded() -> Option<&'static Path> {
    #[cfg(feature = "portable")]
    {
        static LOADED_FROM: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
        LOADED_FROM.get_or_init(load_portable).as_deref()
    }
    #[cfg(not(feature = "portable"))]
    {
        None
    }
}

/// The folders the portable build looks in, in order.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os(BACKENDS_DIR_ENV).filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        // Test and example binaries live one folder below the binary in a
        // cargo target directory.
        let nested = dir
            .file_name()
            .is_some_and(|n| n == "deps" || n == "examples");
        let parent = dir.parent().map(Path::to_path_buf);
        dirs.push(dir);
        if let (true, Some(parent)) = (nested, parent) {
            dirs.push(parent);
        }
    }
    dirs
}

#[cfg(feature = "portable")]
fn load_portable() -> Option<PathBuf> {
    let dir = search_dirs().into_iter().find(|d| holds_cpu_backend(d))?;
    // ggml logs each library it loads: into `tracing` with the rest of its
    // log, not onto stderr.
    super::ffi::install_log_hook();
    if !super::ffi::load_ggml_backends(&dir) {
        return None;
    }
    tracing::debug!(dir = %dir.display(), "loaded ggml backends");
    Some(dir)
}

const MODULE_PREFIX: &str = if cfg!(windows) { "ggml-" } else { "libggml-" };
const MODULE_SUFFIX: &str = if cfg!(windows) { ".dll" } else { ".so" };

/// True when `dir` holds a ggml CPU backend library (any variant).
pub fn holds_cpu_backend(dir: &Path) -> bool {
    let cpu = format!("{MODULE_PREFIX}cpu");
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(&cpu) && name.ends_with(MODULE_SUFFIX)
        })
    })
}

/// What ggml offers this process now (loads the portable build's backends
/// first). Never fails: an empty list is an answer.
pub fn inventory() -> Inventory {
    let loading = if cfg!(feature = "portable") {
        Loading::Dynamic
    } else {
        Loading::Static
    };
    if check_cpu_level().is_err() {
        // ggml's start-up code is compiled for the cross build's level
        // too (an armv8.6_1 build's uses SVE): on a CPU below it, asking
        // ggml anything stops the process with an illegal instruction.
        return Inventory {
            loading,
            backends_dir: None,
            backends: Vec::new(),
            devices: Vec::new(),
        };
    }
    let backends_dir = ensure_loaded().map(Path::to_path_buf);
    let modules = loaded_modules();
    let devices: Vec<DeviceInfo> = llama_cpp_2::list_llama_ggml_backend_devices()
        .into_iter()
        .map(|d| {
            use llama_cpp_2::LlamaBackendDeviceType as T;
            DeviceInfo {
                name: d.name,
                description: d.description,
                backend: d.backend,
                kind: match d.device_type {
                    T::Cpu => DeviceKind::Cpu,
                    T::Gpu => DeviceKind::Gpu,
                    T::IntegratedGpu => DeviceKind::IntegratedGpu,
                    T::Accelerator => DeviceKind::Accelerator,
                    T::Unknown => DeviceKind::Unknown,
                },
                memory_total: d.memory_total as u64,
                memory_free: d.memory_free as u64,
            }
        })
        .collect();
    let backends = super::ffi::ggml_backend_registries()
        .into_iter()
        .map(|(name, features)| {
            let library = module_for(&modules, &name);
            let variant = match library.as_deref() {
                Some(l) => cpu_variant_of(&name, l),
                None => CPU_LEVEL.filter(|_| name == "CPU").map(str::to_string),
            };
            BackendInfo {
                devices: devices.iter().filter(|d| d.backend == name).count(),
                name,
                library,
                variant,
                features,
            }
        })
        .collect();
    Inventory {
        loading,
        backends_dir,
        backends,
        devices,
    }
}

/// The CPU level a cross build compiled ggml's kernels for
/// (scripts/cross sets it); `None` for the other builds.
pub const CPU_LEVEL: Option<&str> = option_env!("EDGECLOUD_CPU_VARIANT");

/// The CPU features (as `is_aarch64_feature_detected!` names them) each
/// ARM level of scripts/cross compiles ggml with, lowest level first.
const ARM_LEVELS: &[(&str, &[&str])] = &[
    ("armv8.0_1", &[]),
    ("armv8.2_2", &["dotprod", "fp16"]),
    ("armv8.6_1", &["dotprod", "fp16", "sve", "i8mm"]),
];

/// Refuses a CPU below the level this binary's kernels were compiled for
/// (a cross build's; other builds pass).
pub fn check_cpu_level() -> Result<(), DeviceError> {
    let Some(level) = CPU_LEVEL else {
        return Ok(());
    };
    let Some((_, needs)) = ARM_LEVELS.iter().find(|(name, _)| *name == level) else {
        return Ok(());
    };
    let missing: Vec<&str> = needs.iter().copied().filter(|f| !cpu_has(f)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let fallback = ARM_LEVELS
        .iter()
        .rev()
        .find(|(_, needs)| needs.iter().all(|f| cpu_has(f)))
        .map_or(ARM_LEVELS[0].0, |(name, _)| name);
    Err(DeviceError::CpuLevel {
        level: level.to_string(),
        missing: missing.join(", "),
        fallback: fallback.to_string(),
    })
}

#[cfg(target_arch = "aarch64")]
fn cpu_has(feature: &str) -> bool {
    match feature {
        "dotprod" => std::arch::is_aarch64_feature_detected!("dotprod"),
        "fp16" => std::arch::is_aarch64_feature_detected!("fp16"),
        "sve" => std::arch::is_aarch64_feature_detected!("sve"),
        "i8mm" => std::arch::is_aarch64_feature_detected!("i8mm"),
        _ => false,
    }
}

#[cfg(not(target_arch = "aarch64"))]
fn cpu_has(_feature: &str) -> bool {
    // ARM levels name ARM features: no other CPU has them.
    false
}

/// Refuses `gpu_layers > 0` when ggml has no GPU device, any work when
/// it has no device at all (a portable build without its libraries), and
/// any work on a CPU below a cross build's level ([`check_cpu_level`]).
pub fn check_gpu_layers(gpu_layers: u32) -> Result<(), DeviceError> {
    check_cpu_level()?;
    let inv = inventory();
    if inv.devices.is_empty() {
        return Err(DeviceError::NoBackends {
            searched: search_dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    if gpu_layers == 0 || inv.gpus().next().is_some() {
        return Ok(());
    }
    if let Some((library, reason)) = unusable_gpu_libraries(&inv).into_iter().next() {
        let fix = gpu_library_fix(&library, reason.as_deref());
        return Err(DeviceError::GpuLibrary {
            gpu_layers,
            library,
            reason: reason.unwrap_or_else(|| {
                "it loads, but its backend found no driver and registered nothing".into()
            }),
            fix,
        });
    }
    Err(DeviceError::NoGpu {
        gpu_layers,
        found: inv.describe_devices(),
        hint: no_gpu_hint(&inv),
    })
}

fn no_gpu_hint(inv: &Inventory) -> String {
    let idle: Vec<&str> = inv
        .backends
        .iter()
        .filter(|b| b.name != "CPU" && b.devices == 0)
        .map(|b| b.name.as_str())
        .collect();
    if idle.contains(&"Vulkan") {
        return "the Vulkan backend is there but offers no device: ggml skips CPU-type Vulkan \
                devices (Mesa's lavapipe, llvmpipe) unless GGML_VK_VISIBLE_DEVICES names one \
                (GGML_VK_VISIBLE_DEVICES=0 for the first; `vulkaninfo --summary` lists them), \
                and a GPU needs its vendor's Vulkan driver"
            .into();
    }
    if !idle.is_empty() {
        return format!(
            "the {} backend is there but sees no device (driver, CUDA_VISIBLE_DEVICES?)",
            idle.join(", ")
        );
    }
    match (&inv.loading, &inv.backends_dir) {
        (Loading::Dynamic, Some(dir)) => {
            let cuda = dir.join(format!("{MODULE_PREFIX}cuda{MODULE_SUFFIX}"));
            if cuda.exists() {
                format!(
                    "{} is there but did not load (its CUDA libraries or the driver are \
                     missing: try `ldd {}`)",
                    cuda.display(),
                    cuda.display()
                )
            } else {
                format!(
                    "this portable build has no GPU backend library in {}: put \
                     {MODULE_PREFIX}cuda{MODULE_SUFFIX} there (scripts/gpu-check builds one), \
                     or use 0 GPU layers",
                    dir.display()
                )
            }
        }
        _ => "this binary has no GPU backend: build with --features cuda (or vulkan, metal), \
              or use the portable build with a GPU backend library beside it, or use 0 GPU \
              layers"
            .into(),
    }
}

/// The portable build's GPU backend libraries (any `libggml-<name>.so`
/// but the CPU's and ggml-base) in its backends folder that ggml did not
/// register, each with what the dynamic linker said (`None`: it loads, so
/// the backend declined: no driver).
fn unusable_gpu_libraries(inv: &Inventory) -> Vec<(PathBuf, Option<String>)> {
    let Some(dir) = inv.backends_dir.as_deref() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Option<String>)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let backend = name
                .strip_prefix(MODULE_PREFIX)?
                .strip_suffix(MODULE_SUFFIX)?
                .to_string();
            let registered = inv
                .backends
                .iter()
                .any(|b| b.name.to_lowercase() == backend);
            (backend != "base" && !backend.starts_with("cpu") && !registered).then(|| e.path())
        })
        .map(|path| {
            let why = super::ffi::dlopen_error(&path);
            (path, why)
        })
        .collect();
    out.sort();
    out
}

/// What makes a GPU backend library usable, from why it did not load
/// (`None`: it loads, the backend found no driver): the library it lacks,
/// a rebuild, or a driver.
fn gpu_library_fix(library: &Path, reason: Option<&str>) -> String {
    let vulkan = library
        .file_name()
        .is_some_and(|n| n.to_string_lossy().contains("vulkan"));
    let missing_library = reason.is_some_and(|r| r.contains("cannot open shared object"));
    if reason.is_some() && !missing_library {
        return format!(
            "the file is damaged or built for another system: rebuild it (scripts/build-gpu \
             vulkan for libggml-vulkan.so), or remove {}",
            library.display()
        );
    }
    match (vulkan, missing_library) {
        (true, true) => "install the Vulkan loader (Debian/Ubuntu: apt install libvulkan1; \
                         Fedora: vulkan-loader) and a Vulkan driver"
            .into(),
        (true, false) => "install a Vulkan driver: your GPU vendor's, or Mesa's (Debian/Ubuntu: \
                          apt install mesa-vulkan-drivers, which has lavapipe, a Vulkan device \
                          on the CPU; ggml uses it with GGML_VK_VISIBLE_DEVICES=0); \
                          `vulkaninfo --summary` lists what the loader finds"
            .into(),
        (false, true) => format!(
            "install what it links against (`ldd {}` names it), or remove it",
            library.display()
        ),
        (false, false) => "install the GPU's driver, or remove the library".into(),
    }
}

/// The ggml backend libraries mapped into this process (`/proc/self/maps`;
/// empty elsewhere and for the default build).
fn loaded_modules() -> Vec<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut out: Vec<PathBuf> = Vec::new();
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let path = PathBuf::from(path);
        let is_module = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            n.starts_with(MODULE_PREFIX)
                && n.ends_with(MODULE_SUFFIX)
                && n != format!("{MODULE_PREFIX}base{MODULE_SUFFIX}")
        });
        if is_module && !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// The library of backend `name` (`CPU` -> `libggml-cpu*.so`).
fn module_for(modules: &[PathBuf], name: &str) -> Option<PathBuf> {
    let stem = format!("{MODULE_PREFIX}{}", name.to_lowercase());
    modules
        .iter()
        .find(|m| {
            m.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(MODULE_SUFFIX))
                .is_some_and(|n| n == stem || n.starts_with(&format!("{stem}-")))
        })
        .cloned()
}

/// `libggml-cpu-zen4.so` -> `zen4`, for the CPU backend.
fn cpu_variant_of(name: &str, library: &Path) -> Option<String> {
    if name != "CPU" {
        return None;
    }
    library
        .file_name()?
        .to_str()?
        .strip_prefix(&format!("{MODULE_PREFIX}cpu-"))?
        .strip_suffix(MODULE_SUFFIX)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_cpu_variant_from_its_library() {
        let lib = PathBuf::from(format!("/d/{MODULE_PREFIX}cpu-zen4{MODULE_SUFFIX}"));
        assert_eq!(cpu_variant_of("CPU", &lib).as_deref(), Some("zen4"));
        assert_eq!(cpu_variant_of("CUDA", &lib), None);
        let modules = vec![
            lib.clone(),
            PathBuf::from(format!("/d/{MODULE_PREFIX}cuda{MODULE_SUFFIX}")),
        ];
        assert_eq!(module_for(&modules, "CPU"), Some(lib));
        assert_eq!(
            module_for(&modules, "CUDA"),
            Some(PathBuf::from(format!(
                "/d/{MODULE_PREFIX}cuda{MODULE_SUFFIX}"
            )))
        );
        assert_eq!(module_for(&modules, "Vulkan"), None);
    }

    #[test]
    fn this_process_has_a_cpu_device() {
        let inv = inventory();
        assert!(
            inv.devices.iter().any(|d| d.kind == DeviceKind::Cpu),
            "{inv:?}"
        );
        let cpu = inv.cpu_backend().expect("a CPU backend");
        assert_eq!(cpu.devices, 1);
        assert!(!cpu.features.is_empty(), "{cpu:?}");
        if cfg!(feature = "portable") {
            assert!(cpu.variant.is_some(), "{cpu:?}");
        } else {
            assert_eq!(inv.loading, Loading::Static);
            assert_eq!(cpu.library, None);
        }
    }

    #[test]
    fn gpu_layers_without_a_gpu_is_an_error() {
        let inv = inventory();
        assert_eq!(check_gpu_layers(0), Ok(()));
        match check_gpu_layers(7) {
            Ok(()) => assert!(inv.gpus().next().is_some(), "no GPU, yet accepted"),
            Err(err) => {
                assert!(inv.gpus().next().is_none());
                assert_eq!(err.kind(), "no_gpu");
                let msg = err.to_string();
                assert!(msg.contains("gpu_layers = 7"), "{msg}");
                assert!(msg.contains("no GPU device"), "{msg}");
            }
        }
    }
}
