//! Whether a lane's llama.cpp contexts may use flash attention: the one
//! case where the lane overrides llama.cpp's own choice (`auto`: flash
//! attention wherever the device holding a layer says it supports it).
//!
//! ggml's Vulkan backend says it supports flash attention for any head size
//! that is a multiple of 8, but ggml's own operator tests cover head sizes
//! 40 to 576 only, and below that it is not safe: with attention heads of 16
//! (the project's generated `tiny` model) on Mesa's lavapipe, a first
//! one-token step followed by a step of 2 or 16 tokens kills the process
//! with SIGSEGV inside the Vulkan driver's worker thread (llama.cpp alone
//! does it too: `llama_decode` of 1 token, then 2, every layer offloaded;
//! with flash attention off it does not happen). So a context whose
//! layers go to a GPU device (`--gpu-layers` above 0) and whose model has
//! heads smaller than [`SMALLEST_TESTED_HEAD`] gets flash attention off:
//! the plain attention path, which is correct on every backend. Such heads
//! only exist in toy models, where the cost does not matter; a real model's
//! heads (64 to 256) keep llama.cpp's choice. On the CPU alone (no layers
//! offloaded) nothing changes: the CPU's flash attention has no such
//! limit.
//!
//! On Mesa's lavapipe (a Vulkan device computed on the CPU, `llvmpipe` in
//! its name) flash attention is off for every model with layers offloaded:
//! with several sequences in a step (a pool, `--parallel`), ggml-vulkan's
//! flash-attention shaders kill the process there with SIGSEGV in the
//! driver's thread, SmolLM2 (heads of 64) included, and llama.cpp's own
//! `llama-server -np 4 -ngl 99` dies the same way (3 runs of 3), but not
//! with `-fa off`. lavapipe is where this project proves offload without a
//! GPU; real GPUs keep llama.cpp's choice. Found and measured: docs/gpu.md.
//!
//! [`CHOICE_ENV`] (`EDGECLOUD_FLASH_ATTN=on|off|auto`) overrides all of
//! this, as llama.cpp's `-fa` does.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_sys_2::{
    llama_flash_attn_type, LLAMA_FLASH_ATTN_TYPE_AUTO, LLAMA_FLASH_ATTN_TYPE_DISABLED,
    LLAMA_FLASH_ATTN_TYPE_ENABLED,
};

/// The smallest attention head size ggml's flash-attention operator tests
/// cover (`tests/test-backend-ops.cpp` of the llama.cpp release we link).
pub(crate) const SMALLEST_TESTED_HEAD: u64 = 40;

/// The environment variable that overrides the policy: `on`, `off`
/// (llama.cpp's `-fa on|off`) or `auto` (the policy below).
pub(crate) const CHOICE_ENV: &str = "EDGECLOUD_FLASH_ATTN";

/// The flash-attention policy for a context of `model` with `gpu_layers`
/// asked for (`--gpu-layers`).
pub(crate) fn policy(model: &LlamaModel, gpu_layers: u32) -> llama_flash_attn_type {
    match std::env::var(CHOICE_ENV).ok().as_deref().map(str::trim) {
        Some("on") => return LLAMA_FLASH_ATTN_TYPE_ENABLED,
        Some("off") => return LLAMA_FLASH_ATTN_TYPE_DISABLED,
        None | Some("auto") => {}
        Some(other) => {
            tracing::warn!("{CHOICE_ENV}={other:?} is not on, off or auto: ignored")
        }
    }
    if gpu_layers > 0 && lavapipe_visible() {
        tracing::info!("flash attention off: layers on Mesa's lavapipe (docs/gpu.md)");
        return LLAMA_FLASH_ATTN_TYPE_DISABLED;
    }
    let (k, v) = head_sizes(model);
    if off_for(k, v, gpu_layers) {
        tracing::info!(
            head_k = k,
            head_v = v,
            "flash attention off: attention heads smaller than {SMALLEST_TESTED_HEAD} \
             on a GPU device (docs/gpu.md)"
        );
        LLAMA_FLASH_ATTN_TYPE_DISABLED
    } else {
        LLAMA_FLASH_ATTN_TYPE_AUTO
    }
}

/// Whether one of the devices llama.cpp offloads to is Mesa's lavapipe
/// (its description names `llvmpipe`).
fn lavapipe_visible() -> bool {
    llama_cpp_2::list_llama_ggml_backend_devices()
        .iter()
        .any(|d| is_lavapipe(&d.description))
}

/// Whether a device description is lavapipe's (`llvmpipe (LLVM 15.0.6, 256
/// bits)`).
fn is_lavapipe(description: &str) -> bool {
    description.contains("llvmpipe")
}

/// Whether flash attention is turned off for heads of `k` and `v` values
/// with `gpu_layers` asked for (0 for a size the model does not say).
fn off_for(k: u64, v: u64, gpu_layers: u32) -> bool {
    gpu_layers > 0 && [k, v].iter().any(|&h| h > 0 && h < SMALLEST_TESTED_HEAD)
}

/// The model's key and value head sizes: its GGUF's
/// `{arch}.attention.key_length` / `value_length`, else the embedding
/// width over the heads (llama.cpp's default).
fn head_sizes(model: &LlamaModel) -> (u64, u64) {
    let default = u64::try_from(model.n_embd()).unwrap_or(0) / u64::from(model.n_head().max(1));
    let arch = model
        .meta_val_str("general.architecture")
        .unwrap_or_default();
    let read = |what: &str| {
        model
            .meta_val_str(&format!("{arch}.attention.{what}"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(default)
    };
    (read("key_length"), read("value_length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_heads_on_a_gpu_turn_flash_attention_off() {
        // The generated tiny model's heads: 16.
        assert!(off_for(16, 16, 99));
        assert!(off_for(64, 32, 1));
        // Real models' heads keep llama.cpp's choice.
        for h in [40, 64, 80, 96, 128, 256] {
            assert!(!off_for(h, h, 99), "{h}");
        }
        // The CPU alone: no change.
        assert!(!off_for(16, 16, 0));
        // A size the model does not say is not a reason.
        assert!(!off_for(0, 0, 99));
    }

    #[test]
    fn lavapipe_is_told_by_its_description() {
        assert!(is_lavapipe("llvmpipe (LLVM 15.0.6, 256 bits)"));
        assert!(!is_lavapipe("NVIDIA GeForce RTX 4090"));
        assert!(!is_lavapipe("AMD Radeon Graphics (RADV GFX1103_R1)"));
    }
}
