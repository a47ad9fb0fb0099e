//! Where a lane's weights and KV cache went: how many layers llama.cpp
//! offloaded, to which devices, and how many bytes each device holds, read
//! from llama.cpp's own load and context log lines (the figures it prints
//! are the buffers it allocated; no C call returns them). The log hook
//! (`ffi`) hands every info line to [`note`]; a load takes the record
//! with [`take`] while it holds the load lock, so the lines are its own.
//!
//! The lines (llama.cpp `llama-model.cpp`, `llama-kv-cache.cpp`):
//! `load_tensors: offloaded 31/31 layers to GPU`,
//! `load_tensors:      Vulkan0 model buffer size =    98.20 MiB`,
//! `llama_kv_cache:    Vulkan0 KV buffer size =    90.00 MiB`.
//! A buffer counts as a device's when its name is a GPU device's name
//! (`Vulkan0`, `CUDA0`); `CPU`, `CPU_Mapped`, `CPU_REPACK` and host-pinned
//! buffers (`Vulkan_Host`, `CUDA_Host`) are the host's.
//!
//! This module must not call llama.cpp.

use serde::Serialize;
use std::sync::{Mutex, OnceLock};

/// What the log said since the last [`clear`].
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Record {
    /// `offloaded N/M layers`: N and M.
    pub(crate) offloaded: Option<(u32, u32)>,
    /// Every buffer: its name, weights (`true`) or KV cache, and bytes.
    pub(crate) buffers: Vec<(String, bool, u64)>,
}

fn record() -> &'static Mutex<Record> {
    static RECORD: OnceLock<Mutex<Record>> = OnceLock::new();
    RECORD.get_or_init(|| Mutex::new(Record::default()))
}

/// Forgets what was noted.
pub(crate) fn clear() {
    *record().lock().unwrap_or_else(|e| e.into_inner()) = Record::default();
}

/// What was noted since the last [`clear`], and clears it.
pub(crate) fn take() -> Record {
    std::mem::take(&mut *record().lock().unwrap_or_else(|e| e.into_inner()))
}

/// Notes what one llama.cpp log line says of placement, if anything.
pub(crate) fn note(line: &str) {
    if let Some(parsed) = parse(line) {
        let mut r = record().lock().unwrap_or_else(|e| e.into_inner());
        match parsed {
            Line::Offloaded(n, m) => r.offloaded = Some((n, m)),
            Line::Buffer(name, weights, bytes) => r.buffers.push((name, weights, bytes)),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Line {
    Offloaded(u32, u32),
    Buffer(String, bool, u64),
}

fn parse(line: &str) -> Option<Line> {
    let line = line.trim();
    if let Some(rest) = line
        .split_once("offloaded ")
        .map(|(_, r)| r)
        .filter(|r| r.ends_with("layers to GPU"))
    {
        let (n, rest) = rest.split_once('/')?;
        let m = rest.split_whitespace().next()?;
        return Some(Line::Offloaded(n.trim().parse().ok()?, m.parse().ok()?));
    }
    let (weights, marker) = if line.contains(" model buffer size = ") {
        (true, " model buffer size = ")
    } else if line.contains(" KV buffer size = ") {
        (false, " KV buffer size = ")
    } else {
        return None;
    };
    let (head, size) = line.split_once(marker)?;
    let name = head
        .rsplit(|c: char| c.is_whitespace() || c == ':')
        .next()?;
    let mib: f64 = size.split_whitespace().next()?.parse().ok()?;
    if name.is_empty() || !mib.is_finite() || mib < 0.0 {
        return None;
    }
    Some(Line::Buffer(
        name.to_string(),
        weights,
        (mib * 1024.0 * 1024.0).round() as u64,
    ))
}

/// Where a lane's layers run ([`crate::LocalInfo::offload`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Offload {
    /// Layers llama.cpp put on GPU devices (its count: the repeating
    /// layers and the output layer); 0 on the CPU.
    pub layers: u32,
    /// The model's layers in that count (repeating layers + 1).
    pub of: u32,
    /// The devices holding them: ggml's name and description, e.g.
    /// `Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits))`.
    pub devices: Vec<String>,
    /// Weights on those devices, bytes (llama.cpp's buffers).
    pub device_weight_bytes: u64,
    /// KV cache on those devices, bytes (llama.cpp's buffers).
    pub device_kv_bytes: u64,
}

impl Offload {
    /// The report of one load: `record` from its model and context logs,
    /// `gpus` the GPU devices ggml has (name, description), `n_layer` the
    /// model's repeating layers.
    pub(crate) fn from_record(record: &Record, gpus: &[(String, String)], n_layer: u32) -> Self {
        let on_gpu = |name: &str| gpus.iter().find(|(n, _)| n == name);
        let mut devices: Vec<String> = Vec::new();
        let (mut weights, mut kv) = (0, 0);
        for (name, is_weights, bytes) in &record.buffers {
            let Some((n, desc)) = on_gpu(name) else {
                continue;
            };
            if *is_weights {
                weights += bytes;
            } else {
                kv += bytes;
            }
            let label = format!("{n} ({desc})");
            if !devices.contains(&label) {
                devices.push(label);
            }
        }
        let (layers, of) = record.offloaded.unwrap_or((0, n_layer + 1));
        Offload {
            // llama.cpp prints its count whether or not a GPU took them.
            layers: if devices.is_empty() { 0 } else { layers },
            of,
            devices,
            device_weight_bytes: weights,
            device_kv_bytes: kv,
        }
    }

    /// `31/31 layers on Vulkan0 (llvmpipe ...)`, or `none (CPU)`.
    pub fn describe(&self) -> String {
        if self.layers == 0 {
            return "none (CPU)".into();
        }
        format!(
            "{}/{} layers on {}",
            self.layers,
            self.of,
            self.devices.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_llama_cpp_placement_lines() {
        assert_eq!(
            parse("load_tensors: offloaded 31/31 layers to GPU"),
            Some(Line::Offloaded(31, 31))
        );
        assert_eq!(
            parse("load_tensors:      Vulkan0 model buffer size =    98.25 MiB"),
            Some(Line::Buffer("Vulkan0".into(), true, 103_022_592))
        );
        assert_eq!(
            parse("llama_kv_cache:    Vulkan0 KV buffer size =    90.00 MiB"),
            Some(Line::Buffer("Vulkan0".into(), false, 94_371_840))
        );
        assert_eq!(
            parse("load_tensors:   CPU_Mapped model buffer size =    98.25 MiB"),
            Some(Line::Buffer("CPU_Mapped".into(), true, 103_022_592))
        );
        assert_eq!(
            parse("load_tensors: offloading 30 repeating layers to GPU"),
            None
        );
        assert_eq!(parse("llama_context: n_ctx = 4096"), None);
    }

    #[test]
    fn counts_only_gpu_buffers() {
        let record = Record {
            offloaded: Some((31, 31)),
            buffers: vec![
                ("CPU_Mapped".into(), true, 10),
                ("Vulkan0".into(), true, 100),
                ("Vulkan_Host".into(), true, 7),
                ("Vulkan0".into(), false, 50),
                ("CPU".into(), false, 3),
            ],
        };
        let gpus = vec![("Vulkan0".to_string(), "llvmpipe".to_string())];
        let o = Offload::from_record(&record, &gpus, 30);
        assert_eq!(o.layers, 31);
        assert_eq!(o.of, 31);
        assert_eq!(o.devices, vec!["Vulkan0 (llvmpipe)".to_string()]);
        assert_eq!(o.device_weight_bytes, 100);
        assert_eq!(o.device_kv_bytes, 50);
        assert_eq!(o.describe(), "31/31 layers on Vulkan0 (llvmpipe)");
        // On the CPU llama.cpp still prints its count: no GPU buffer, no
        // layer offloaded.
        let cpu = Record {
            offloaded: Some((0, 31)),
            buffers: vec![("CPU_Mapped".into(), true, 10)],
        };
        let o = Offload::from_record(&cpu, &gpus, 30);
        assert_eq!((o.layers, o.of, o.device_weight_bytes), (0, 31, 0));
        assert_eq!(o.describe(), "none (CPU)");
    }
}
