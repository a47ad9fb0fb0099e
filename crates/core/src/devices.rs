//! What ggml found in this process: its backends (the CPU variant, GPU
//! backends) and devices, as plain data. The local lane fills it
//! (`edgecloud_local::devices::inventory`); the bench report and `edgecloud
//! doctor` print it. This module must not call ggml.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How ggml's backends got into this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Loading {
    /// Linked into the binary (the default build).
    Static,
    /// Loaded at run time from libraries (the portable build).
    Dynamic,
}

/// What kind of device ggml reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// The CPU.
    Cpu,
    /// A discrete GPU.
    Gpu,
    /// A GPU sharing the host's memory.
    IntegratedGpu,
    /// Another accelerator (BLAS, NPU, ...).
    Accelerator,
    /// Something this version does not know.
    Unknown,
}

/// One ggml backend (a "registry": CPU, CUDA, Vulkan, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackendInfo {
    /// ggml's name for it (`CPU`, `CUDA`).
    pub name: String,
    /// The library it was loaded from (portable build only).
    pub library: Option<PathBuf>,
    /// For the portable build's CPU backend: the variant ggml chose
    /// (`zen4`, `haswell`, ...), from the library's name.
    pub variant: Option<String>,
    /// What the backend says it was compiled with (`AVX2`, `AVX512`,
    /// `ARCHS=900`, ...).
    pub features: Vec<String>,
    /// Devices it offers.
    pub devices: usize,
}

/// One device ggml can compute on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// ggml's device name (`CPU`, `CUDA0`).
    pub name: String,
    /// What it is (`NVIDIA H200`, the CPU's model name).
    pub description: String,
    /// The backend offering it.
    pub backend: String,
    /// CPU, GPU, ...
    pub kind: DeviceKind,
    /// Total memory in bytes (for the CPU: the host's).
    pub memory_total: u64,
    /// Free memory in bytes when listed.
    pub memory_free: u64,
}

/// Everything ggml offers this process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inventory {
    /// Linked in, or loaded at run time.
    pub loading: Loading,
    /// Where the portable build loaded its backends from (`None` for the
    /// default build, or when no folder held any).
    pub backends_dir: Option<PathBuf>,
    /// The backends, in ggml's order.
    pub backends: Vec<BackendInfo>,
    /// The devices, in ggml's order (llama.cpp offloads to GPUs first).
    pub devices: Vec<DeviceInfo>,
}

impl Inventory {
    /// The GPU devices (discrete or integrated).
    pub fn gpus(&self) -> impl Iterator<Item = &DeviceInfo> {
        self.devices
            .iter()
            .filter(|d| matches!(d.kind, DeviceKind::Gpu | DeviceKind::IntegratedGpu))
    }

    /// The CPU backend, when there is one.
    pub fn cpu_backend(&self) -> Option<&BackendInfo> {
        self.backends.iter().find(|b| b.name == "CPU")
    }

    /// One line per device: `CPU "AMD EPYC 9R14"`, `CUDA0 "NVIDIA H200"
    /// 139.8 GiB`, joined by `; `; `none` when empty.
    pub fn describe_devices(&self) -> String {
        if self.devices.is_empty() {
            return "none".into();
        }
        self.devices
            .iter()
            .map(|d| match d.kind {
                DeviceKind::Cpu => format!("{} \"{}\"", d.name, d.description),
                _ => format!("{} \"{}\" {}", d.name, d.description, gib(d.memory_total)),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One entry per backend: `CPU (zen4)`, `CPU (built in)`, `CUDA
    /// (library)`, joined by `, ` (where from: [`Inventory::backends_dir`]).
    pub fn describe_backends(&self) -> String {
        if self.backends.is_empty() {
            return "none".into();
        }
        self.backends
            .iter()
            .map(|b| match (&b.variant, &b.library) {
                (Some(v), _) => format!("{} ({v})", b.name),
                (None, Some(_)) => format!("{} (library)", b.name),
                (None, None) => format!("{} (built in)", b.name),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}
