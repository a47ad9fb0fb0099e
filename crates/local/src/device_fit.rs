//! Whether the KV cache of the layers a lane puts on a GPU device fits the
//! memory the device has left once the weights are there: checked after
//! the model loads and before the context is made, so that a context too
//! large for the device is refused with its figures and what would fit
//! (`DeviceError::DoesNotFit`), instead of an allocation failure deep in
//! llama.cpp (or, on a device sharing the machine's memory, the machine
//! swapping).
//!
//! The figures are the lane's own estimate (`memory_bytes`: a K and a V
//! of f16 per cell, layer and KV head, cells rounded up to 256 per
//! stream) against ggml's free memory of the GPU devices holding weights.
//! A device that reports no free memory is not checked. Weights that do not
//! fit fail in llama.cpp's own load, which names the buffer it could not
//! allocate. Measured on lavapipe: docs/gpu.md.

use super::devices::DeviceError;

/// What the check needs to know.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Demand {
    /// Bytes of one cell of one layer's KV cache (a K and a V).
    pub(crate) cell_bytes: u64,
    /// Layers whose KV cache is on the device.
    pub(crate) layers: u32,
    /// Cells per stream (the context size), and streams.
    pub(crate) context_size: u32,
    pub(crate) streams: u32,
}

impl Demand {
    /// Bytes of one layer's KV cache, every stream.
    pub(crate) fn kv_bytes_per_layer(&self) -> u64 {
        kv_bytes_per_layer(self.cell_bytes, self.context_size, self.streams)
    }
}

/// Bytes of one layer's KV cache: `cell_bytes` per cell, cells rounded up
/// to 256 per stream (as llama.cpp gives them).
pub(crate) fn kv_bytes_per_layer(cell_bytes: u64, context_size: u32, streams: u32) -> u64 {
    u64::from(context_size.div_ceil(256).saturating_mul(256)) * u64::from(streams) * cell_bytes
}

/// The device side: its name(s) and free bytes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Room {
    pub(crate) devices: String,
    pub(crate) free: u64,
}

/// `Ok` when the KV cache fits (or nothing is known about the room).
pub(crate) fn check(demand: &Demand, room: &Room) -> Result<(), DeviceError> {
    let per_layer = demand.kv_bytes_per_layer();
    let need = per_layer * u64::from(demand.layers);
    if room.free == 0 || need <= room.free {
        return Ok(());
    }
    let per_cell = demand.cell_bytes * u64::from(demand.streams) * u64::from(demand.layers);
    let fits_context = room.free / per_cell.max(1) / 256 * 256;
    let fits_layers = room.free / per_layer.max(1);
    Err(DeviceError::DoesNotFit {
        devices: room.devices.clone(),
        layers: demand.layers,
        need,
        free: room.free,
        context_size: demand.context_size,
        streams: demand.streams,
        fits_context: u32::try_from(fits_context).unwrap_or(u32::MAX),
        fits_layers: u32::try_from(fits_layers).unwrap_or(u32::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    // SmolLM2-135M: 30 layers, 3 KV heads of 64: 768 bytes a cell and
    // layer; 4096 cells, one stream: 3 MiB a layer.
    fn smollm2(context_size: u32, streams: u32) -> Demand {
        Demand {
            cell_bytes: 768,
            layers: 30,
            context_size,
            streams,
        }
    }

    fn room(free: u64) -> Room {
        Room {
            devices: "Vulkan0 (llvmpipe)".into(),
            free,
        }
    }

    #[test]
    fn a_cache_that_fits_passes_and_an_unknown_room_is_not_checked() {
        assert_eq!(check(&smollm2(4096, 1), &room(2048 * MB)), Ok(()));
        assert_eq!(check(&smollm2(4096, 1), &room(90 * MB)), Ok(()));
        assert_eq!(check(&smollm2(131_072, 4), &room(0)), Ok(()));
    }

    #[test]
    fn a_cache_too_large_is_refused_with_what_would_fit() {
        // 131072 cells: 96 MiB a layer, 2880 MiB for 30 layers.
        let err = check(&smollm2(131_072, 1), &room(2048 * MB)).unwrap_err();
        let DeviceError::DoesNotFit {
            need,
            fits_context,
            fits_layers,
            ..
        } = err.clone()
        else {
            panic!("{err:?}")
        };
        assert_eq!(need, 2880 * MB);
        // 2048 MiB / (768 B * 30 layers) = 93206 cells, down to 256s.
        assert_eq!(fits_context, 93_184);
        assert_eq!(fits_layers, 21);
        assert!(check(&smollm2(fits_context, 1), &room(2048 * MB)).is_ok());
        assert!(check(&smollm2(fits_context + 256, 1), &room(2048 * MB)).is_err());
        let text = err.to_string();
        assert!(text.contains("--context-size 93184"), "{text}");
        assert!(text.contains("--gpu-layers 21"), "{text}");
        assert_eq!(err.kind(), "does_not_fit");
    }
}
