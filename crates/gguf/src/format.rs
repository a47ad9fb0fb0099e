//! Constants of the GGUF container format and the ggml tensor types it can
//! hold. Pure tables: no I/O here.

/// The four bytes every GGUF file starts with.
pub(crate) const MAGIC: [u8; 4] = *b"GGUF";

/// The version this crate writes; the reader accepts 2 and 3 (version 1 used
/// 32-bit lengths and llama.cpp no longer loads it).
pub(crate) const VERSION: u32 = 3;

/// Alignment of the tensor data section when `general.alignment` is absent.
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;

/// llama.cpp's limit on tensor name length (`GGML_MAX_NAME` minus the NUL).
pub(crate) const MAX_TENSOR_NAME: usize = 63;

/// llama.cpp's limit on tensor dimensions (`GGML_MAX_DIMS`).
pub(crate) const MAX_DIMS: u32 = 4;

/// GGUF metadata value type tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    pub(crate) fn from_u32(tag: u32) -> Option<Self> {
        Some(match tag {
            0 => Self::U8,
            1 => Self::I8,
            2 => Self::U16,
            3 => Self::I16,
            4 => Self::U32,
            5 => Self::I32,
            6 => Self::F32,
            7 => Self::Bool,
            8 => Self::String,
            9 => Self::Array,
            10 => Self::U64,
            11 => Self::I64,
            12 => Self::F64,
            _ => return None,
        })
    }

    pub(crate) fn tag(self) -> u32 {
        match self {
            Self::U8 => 0,
            Self::I8 => 1,
            Self::U16 => 2,
            Self::I16 => 3,
            Self::U32 => 4,
            Self::I32 => 5,
            Self::F32 => 6,
            Self::Bool => 7,
            Self::String => 8,
            Self::Array => 9,
            Self::U64 => 10,
            Self::I64 => 11,
            Self::F64 => 12,
        }
    }

    /// Size in bytes of one fixed-size value; `None` for strings and arrays.
    pub(crate) fn fixed_size(self) -> Option<u64> {
        Some(match self {
            Self::U8 | Self::I8 | Self::Bool => 1,
            Self::U16 | Self::I16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::U64 | Self::I64 | Self::F64 => 8,
            Self::String | Self::Array => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::U8 => "u8",
            Self::I8 => "i8",
            Self::U16 => "u16",
            Self::I16 => "i16",
            Self::U32 => "u32",
            Self::I32 => "i32",
            Self::F32 => "f32",
            Self::Bool => "bool",
            Self::String => "string",
            Self::Array => "array",
            Self::U64 => "u64",
            Self::I64 => "i64",
            Self::F64 => "f64",
        }
    }
}

/// What the reader needs to know about one ggml tensor type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GgmlType {
    /// The numeric id stored in the file.
    pub(crate) id: u32,
    /// Upper-case name as llama.cpp's tools print it ("Q8_0", "F32").
    pub(crate) name: &'static str,
    /// Elements per block (1 for plain types).
    pub(crate) block: u64,
    /// Bytes per block.
    pub(crate) bytes: u64,
}

pub(crate) const F32: GgmlType = GgmlType {
    id: 0,
    name: "F32",
    block: 1,
    bytes: 4,
};

pub(crate) const Q8_0: GgmlType = GgmlType {
    id: 8,
    name: "Q8_0",
    block: 32,
    bytes: 34,
};

/// Every type the vendored ggml (0.26) can load from a GGUF file; ids that
/// were removed (4, 5, 31-33, 36-38) are unknown on purpose.
const TYPES: &[(u32, &str, u64, u64)] = &[
    (0, "F32", 1, 4),
    (1, "F16", 1, 2),
    (2, "Q4_0", 32, 18),
    (3, "Q4_1", 32, 20),
    (6, "Q5_0", 32, 22),
    (7, "Q5_1", 32, 24),
    (8, "Q8_0", 32, 34),
    (9, "Q8_1", 32, 36),
    (10, "Q2_K", 256, 84),
    (11, "Q3_K", 256, 110),
    (12, "Q4_K", 256, 144),
    (13, "Q5_K", 256, 176),
    (14, "Q6_K", 256, 210),
    (15, "Q8_K", 256, 292),
    (16, "IQ2_XXS", 256, 66),
    (17, "IQ2_XS", 256, 74),
    (18, "IQ3_XXS", 256, 98),
    (19, "IQ1_S", 256, 50),
    (20, "IQ4_NL", 32, 18),
    (21, "IQ3_S", 256, 110),
    (22, "IQ2_S", 256, 82),
    (23, "IQ4_XS", 256, 136),
    (24, "I8", 1, 1),
    (25, "I16", 1, 2),
    (26, "I32", 1, 4),
    (27, "I64", 1, 8),
    (28, "F64", 1, 8),
    (29, "IQ1_M", 256, 56),
    (30, "BF16", 1, 2),
    (34, "TQ1_0", 256, 54),
    (35, "TQ2_0", 256, 66),
    (39, "MXFP4", 32, 17),
    (40, "NVFP4", 64, 36),
    (41, "Q1_0", 128, 18),
    (42, "Q2_0", 64, 18),
];

impl GgmlType {
    /// The type llama.cpp prints as `name` ("Q8_0", "F32").
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        TYPES
            .iter()
            .find(|t| t.1 == name)
            .and_then(|t| Self::from_id(t.0))
    }

    pub(crate) fn from_id(id: u32) -> Option<Self> {
        TYPES
            .iter()
            .find(|t| t.0 == id)
            .map(|&(id, name, block, bytes)| Self {
                id,
                name,
                block,
                bytes,
            })
    }
}

/// The name of a `general.file_type` value (llama.cpp's `llama_ftype`).
pub(crate) fn file_type_name(ftype: u32) -> Option<&'static str> {
    Some(match ftype {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        39 => "NVFP4",
        40 => "Q1_0",
        41 => "Q2_0",
        _ => return None,
    })
}

/// `value` rounded up to a multiple of `align` (a power of two), or `None`
/// on overflow.
pub(crate) fn pad_to(value: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    value.checked_add(align - 1).map(|v| v & !(align - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_type_tags_round_trip() {
        for tag in 0..13 {
            assert_eq!(ValueType::from_u32(tag).unwrap().tag(), tag);
        }
        assert_eq!(ValueType::from_u32(13), None);
    }

    #[test]
    fn removed_ggml_types_are_unknown() {
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 43, u32::MAX] {
            assert_eq!(GgmlType::from_id(id), None, "id {id}");
        }
        assert_eq!(GgmlType::from_id(8), Some(Q8_0));
        assert_eq!(GgmlType::from_id(0), Some(F32));
    }

    #[test]
    fn pad_to_rounds_up_and_detects_overflow() {
        assert_eq!(pad_to(0, 32), Some(0));
        assert_eq!(pad_to(1, 32), Some(32));
        assert_eq!(pad_to(64, 32), Some(64));
        assert_eq!(pad_to(u64::MAX, 32), None);
    }
}
