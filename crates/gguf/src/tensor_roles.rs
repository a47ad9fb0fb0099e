//! Tensor types per tensor role, for the llama architecture: a file may
//! store any ggml type in any tensor, but llama.cpp's CPU kernels only
//! compute some of them in each role, and the others do not fail cleanly:
//! a matrix weight in a type without a dot-product kernel (I8, say) is a
//! SIGSEGV inside `mul_mat` (ggml's CPU backend claims support because the
//! type's missing `vec_dot_type` reads as F32), and a norm or bias vector
//! that is not F32 is an abort in the elementwise op.
//!
//! The lists mirror ggml-cpu's `type_traits_cpu` (llama.cpp b11434): a
//! type not listed there as multipliable is refused, so a type a future
//! ggml adds is refused until someone checks it and adds it here.
//!
//! This module only reads the parsed header; it never calls llama.cpp.

use super::reader::Header;
use super::GgufError;

/// Types ggml-cpu can multiply as the weight of `mul_mat` (they have a
/// `vec_dot` kernel). Absent on purpose: I8, I16, I32, I64, F64 (no
/// kernel) and Q8_1, Q8_K (activation formats only).
const MATMUL_TYPES: &[&str] = &[
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
    "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "IQ1_M",
    "TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "Q1_0", "Q2_0",
];

const MATMUL_EXPECTED: &str = "F32, F16, BF16 or a quantized type with a dot-product kernel";

/// Checks every tensor of a llama model: matrices (two or more
/// dimensions: the embedding, which doubles as the tied output head, and
/// every projection) must be multipliable; vectors (norms, biases, rope
/// factors) must be F32, the only type ggml-cpu's elementwise ops take
/// next to F32 activations. Reports the first offender only.
pub(super) fn check_llama_tensor_types(h: &Header, problems: &mut Vec<GgufError>) {
    for t in &h.tensors {
        let matrix = t.dims.iter().filter(|d| **d > 1).count() >= 2;
        let problem = if matrix && !MATMUL_TYPES.contains(&t.ty.name) {
            Some(("matrix weight", MATMUL_EXPECTED))
        } else if !matrix && t.ty.name != "F32" {
            Some(("norm or bias vector", "F32"))
        } else {
            None
        };
        if let Some((role, expected)) = problem {
            problems.push(GgufError::UnsupportedTensorType {
                tensor: t.name.clone(),
                ty: t.ty.name.to_string(),
                role,
                expected,
            });
            return;
        }
    }
}
