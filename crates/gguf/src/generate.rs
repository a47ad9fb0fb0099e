//! Generates llama-architecture GGUF models with random weights, for tests
//! and benchmarks without a network: a working byte-level BPE tokenizer, a
//! ChatML chat template, and weights from a seeded PRNG, so one seed always
//! gives a byte-identical file. The output is noise by design; only shape,
//! speed and the tokenizer are realistic.
//!
//! This module writes files; it never loads them into llama.cpp.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::str::FromStr;

use super::format::{self, GgmlType};
use super::vocab::{self, CHATML_TEMPLATE, ENDOFTEXT_ID, IM_END_ID, IM_START_ID};
use super::writer::{write_gguf, TensorSpec, Value};
use super::GgufError;
use edgecloud_core::rng::{SplitMix64, GAMMA};

pub mod think;

/// Which model shape to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Preset {
    /// A minimal model for tests: n_embd 64, 2 layers, 4 heads / 2 KV heads,
    /// FFN 128, vocabulary 512, all F32, tied output head; about 0.5 MB.
    Tiny,
    /// `tiny`'s shape with an untied output head and scripted weights: a
    /// reasoning model whose template opens `<think>` and whose greedy
    /// answer to anything is [`THINKING`](think::THINKING), `</think>`,
    /// [`ANSWER`](think::ANSWER) (see the `think` module); about 0.6 MB.
    TinyThink,
    /// The SmolLM2-135M shape for benchmarks: n_embd 576, 30 layers,
    /// 9 heads / 3 KV heads, FFN 1536, vocabulary 49152, Q8_0 matrices and
    /// F32 norms, tied output head; about 145 MB.
    Bench135m,
    /// `bench-135m` with a 262,144-token vocabulary (the size of Gemma 3's):
    /// the per-token work over the logits (sampling, log-probabilities)
    /// weighs as it does on large-vocabulary models. About 300 MB.
    Bench135mVocab262k,
    /// An embedding model of llama.cpp's `bert` architecture (what
    /// bge-small and all-MiniLM are): n_embd 64, 2 layers, 4 heads, FFN
    /// 128, vocabulary 512 (the `tiny` tokenizer, `<|im_start|>` standing
    /// for `[CLS]` and `<|im_end|>` for `[SEP]`, both added), learned
    /// positions for 512 tokens, bidirectional attention, `cls` pooling
    /// named in the GGUF, no output head and no chat template; all F32,
    /// about 0.6 MB.
    TinyBert,
    /// An embedding model of llama.cpp's `nomic-bert` architecture (what
    /// nomic-embed-text is): `tiny-bert`'s sizes, but rotary positions
    /// instead of learned ones, fused Q/K/V projections without biases and
    /// a SwiGLU feed-forward (gate, up, down) without biases, as the real
    /// files hold them; `mean` pooling named in the GGUF; about 0.5 MB.
    TinyNomicBert,
}

impl Preset {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::TinyThink => "tiny-think",
            Preset::Bench135m => "bench-135m",
            Preset::Bench135mVocab262k => "bench-135m-262k",
            Preset::TinyBert => "tiny-bert",
            Preset::TinyNomicBert => "tiny-nomic-bert",
        }
    }

    fn shape(self) -> Shape {
        match self {
            Preset::Tiny | Preset::TinyThink | Preset::TinyBert | Preset::TinyNomicBert => Shape {
                n_embd: 64,
                n_layer: 2,
                n_head: 4,
                n_head_kv: 2,
                n_ff: 128,
                n_vocab: 512,
                n_ctx: 2048,
                rope_base: 10_000.0,
                matrix_type: format::F32,
                file_type: 0,
            },
            Preset::Bench135m => Shape {
                n_embd: 576,
                n_layer: 30,
                n_head: 9,
                n_head_kv: 3,
                n_ff: 1536,
                n_vocab: 49152,
                n_ctx: 8192,
                rope_base: 100_000.0,
                matrix_type: format::Q8_0,
                file_type: 7,
            },
            Preset::Bench135mVocab262k => Shape {
                n_vocab: 262_144,
                ..Preset::Bench135m.shape()
            },
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A preset name that is not `tiny`, `tiny-think`, `bench-135m`, `bench-135m-262k`,
/// `tiny-bert` or `tiny-nomic-bert`.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "unknown model preset {0:?} (expected \"tiny\", \"tiny-think\", \"bench-135m\", \"bench-135m-262k\", \"tiny-bert\" or \"tiny-nomic-bert\")"
)]
pub struct UnknownPreset(String);

impl FromStr for Preset {
    type Err = UnknownPreset;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tiny" => Ok(Preset::Tiny),
            "tiny-think" => Ok(Preset::TinyThink),
            "bench-135m" => Ok(Preset::Bench135m),
            "bench-135m-262k" => Ok(Preset::Bench135mVocab262k),
            "tiny-bert" => Ok(Preset::TinyBert),
            "tiny-nomic-bert" => Ok(Preset::TinyNomicBert),
            other => Err(UnknownPreset(other.to_string())),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Shape {
    n_embd: u64,
    n_layer: u64,
    n_head: u64,
    n_head_kv: u64,
    n_ff: u64,
    n_vocab: u64,
    n_ctx: u32,
    rope_base: f32,
    matrix_type: GgmlType,
    file_type: u32,
}

/// One deliberate change to a generated model, for testing what a loader
/// does with a file that is well-formed GGUF but wrong in one value (the
/// validator's catalogue of llama.cpp crashes is built from these).
/// Tweaks apply in order, after the preset's own values.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Tweak {
    /// Sets a metadata key (added when absent) to a u32.
    SetU32(String, u32),
    /// Sets a metadata key (added when absent) to an f32.
    SetF32(String, f32),
    /// Sets a metadata key (added when absent) to a string.
    SetStr(String, String),
    /// Removes a metadata key.
    Remove(String),
    /// Sets `llama.attention.head_count_kv` and sizes every `attn_k` and
    /// `attn_v` tensor to match, so only the head arithmetic is wrong.
    KvHeads(u64),
    /// Stores one tensor in another ggml type, named as llama.cpp prints it
    /// ("I8", "F16", "Q8_0"...), with data of that type's size: random
    /// values for F32, F16, Q8_0 and I8, zero bytes for other types.
    TensorType {
        /// The tensor's name (`blk.0.attn_q.weight`).
        tensor: String,
        /// The ggml type name.
        ty: String,
    },
}

/// Writes a random-weight llama model of the given preset to `path`
/// (the parent directory must exist; an existing file is replaced).
///
/// The same `preset` and `seed` always produce a byte-identical file.
pub fn write_model(path: &Path, preset: Preset, seed: u64) -> Result<(), GgufError> {
    write_model_with(path, preset, seed, &[])
}

/// [`write_model`] with [`Tweak`]s applied. A tweak that cannot apply (an
/// unknown type name, a tensor that does not exist, a row length the
/// type's block does not divide) is an `Io` error of kind `InvalidInput`.
pub fn write_model_with(
    path: &Path,
    preset: Preset,
    seed: u64,
    tweaks: &[Tweak],
) -> Result<(), GgufError> {
    let file = File::create(path).map_err(|e| GgufError::io(path, e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    write_tweaked_to(&mut out, preset, seed, tweaks).map_err(|e| GgufError::io(path, e))?;
    // No fsync: callers read the file back through the page cache, and
    // tests write many of these.
    out.into_inner()
        .map_err(|e| GgufError::io(path, e.into_error()))?;
    tracing::debug!(path = %path.display(), %preset, seed, "wrote generated model");
    Ok(())
}

/// Writes the model to any writer (for the in-memory unit tests).
/// The tokenizer's keys both generated architectures share: the tiny
/// byte-level BPE vocabulary (`vocab`), in the order the files hold them.
fn tokenizer_metadata(vocab: vocab::Vocab) -> [(&'static str, Value); 6] {
    [
        ("tokenizer.ggml.model", Value::Str("gpt2".into())),
        ("tokenizer.ggml.pre", Value::Str("default".into())),
        ("tokenizer.ggml.tokens", Value::StrArray(vocab.tokens)),
        (
            "tokenizer.ggml.token_type",
            Value::I32Array(vocab.token_types),
        ),
        ("tokenizer.ggml.scores", Value::F32Array(vocab.scores)),
        ("tokenizer.ggml.merges", Value::StrArray(vocab.merges)),
    ]
}

#[cfg(test)]
pub(crate) fn write_model_to<W: Write>(out: &mut W, preset: Preset, seed: u64) -> io::Result<()> {
    write_tweaked_to(out, preset, seed, &[])
}

fn invalid_tweak(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn write_tweaked_to<W: Write>(
    out: &mut W,
    preset: Preset,
    seed: u64,
    tweaks: &[Tweak],
) -> io::Result<()> {
    if matches!(preset, Preset::TinyBert | Preset::TinyNomicBert) {
        if !tweaks.is_empty() {
            return Err(invalid_tweak(
                "tweaks apply to the llama presets only".to_string(),
            ));
        }
        return write_bert_to(out, preset, seed);
    }
    let mut s = preset.shape();
    for t in tweaks {
        if let Tweak::KvHeads(n) = t {
            s.n_head_kv = *n;
        }
    }
    let vocab = vocab::build(s.n_vocab as usize);
    let scripted = preset == Preset::TinyThink;
    let head_dim = s.n_embd / s.n_head;
    let n_embd_kv = head_dim * s.n_head_kv;

    let u32v = |v: u64| Value::U32(u32::try_from(v).expect("preset dimensions fit in u32"));
    let mut metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::Str("llama".into())),
        (
            "general.name",
            Value::Str(format!(
                "edgecloud {preset} ({} weights)",
                if scripted { "scripted" } else { "random" }
            )),
        ),
        (
            "general.alignment",
            Value::U32(format::DEFAULT_ALIGNMENT as u32),
        ),
        ("general.file_type", Value::U32(s.file_type)),
        ("llama.vocab_size", u32v(s.n_vocab)),
        ("llama.context_length", Value::U32(s.n_ctx)),
        ("llama.embedding_length", u32v(s.n_embd)),
        ("llama.block_count", u32v(s.n_layer)),
        ("llama.feed_forward_length", u32v(s.n_ff)),
        ("llama.attention.head_count", u32v(s.n_head)),
        ("llama.attention.head_count_kv", u32v(s.n_head_kv)),
        ("llama.rope.dimension_count", u32v(head_dim)),
        ("llama.rope.freq_base", Value::F32(s.rope_base)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
    ];
    metadata.extend(tokenizer_metadata(vocab));
    metadata.extend([
        ("tokenizer.ggml.bos_token_id", Value::U32(IM_START_ID)),
        ("tokenizer.ggml.eos_token_id", Value::U32(IM_END_ID)),
        // Explicit, or llama.cpp guesses end-of-turn from the token texts in
        // hash-map order, which differs between vocabulary sizes.
        ("tokenizer.ggml.eot_token_id", Value::U32(IM_END_ID)),
        ("tokenizer.ggml.unknown_token_id", Value::U32(ENDOFTEXT_ID)),
        ("tokenizer.ggml.padding_token_id", Value::U32(ENDOFTEXT_ID)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        (
            "tokenizer.chat_template",
            Value::Str(if scripted {
                think::template()
            } else {
                CHATML_TEMPLATE.into()
            }),
        ),
        (
            "edgecloud.generator.preset",
            Value::Str(preset.name().into()),
        ),
        ("edgecloud.generator.seed", Value::U64(seed)),
    ]);
    if s.file_type != 0 {
        metadata.push(("general.quantization_version", Value::U32(2)));
    }
    for t in tweaks {
        let (key, value) = match t {
            Tweak::SetU32(k, v) => (k, Some(Value::U32(*v))),
            Tweak::SetF32(k, v) => (k, Some(Value::F32(*v))),
            Tweak::SetStr(k, v) => (k, Some(Value::Str(v.clone()))),
            Tweak::Remove(k) => (k, None),
            Tweak::KvHeads(_) | Tweak::TensorType { .. } => continue,
        };
        let at = metadata.iter().position(|(name, _)| *name == key.as_str());
        match (at, value) {
            (Some(i), Some(v)) => metadata[i].1 = v,
            (None, Some(v)) => metadata.push((key.as_str(), v)),
            (Some(i), None) => {
                metadata.remove(i);
            }
            (None, None) => {}
        }
    }

    let matrix = |name: String, cols: u64, rows: u64| TensorSpec {
        name,
        dims: vec![cols, rows],
        ty: s.matrix_type,
    };
    let norm = |name: String| TensorSpec {
        name,
        dims: vec![s.n_embd],
        ty: format::F32,
    };
    let mut tensors = vec![matrix("token_embd.weight".into(), s.n_embd, s.n_vocab)];
    for i in 0..s.n_layer {
        tensors.push(norm(format!("blk.{i}.attn_norm.weight")));
        tensors.push(matrix(format!("blk.{i}.attn_q.weight"), s.n_embd, s.n_embd));
        tensors.push(matrix(
            format!("blk.{i}.attn_k.weight"),
            s.n_embd,
            n_embd_kv,
        ));
        tensors.push(matrix(
            format!("blk.{i}.attn_v.weight"),
            s.n_embd,
            n_embd_kv,
        ));
        tensors.push(matrix(
            format!("blk.{i}.attn_output.weight"),
            s.n_embd,
            s.n_embd,
        ));
        tensors.push(norm(format!("blk.{i}.ffn_norm.weight")));
        tensors.push(matrix(format!("blk.{i}.ffn_gate.weight"), s.n_embd, s.n_ff));
        tensors.push(matrix(format!("blk.{i}.ffn_up.weight"), s.n_embd, s.n_ff));
        tensors.push(matrix(format!("blk.{i}.ffn_down.weight"), s.n_ff, s.n_embd));
    }
    tensors.push(norm("output_norm.weight".into()));
    if scripted {
        tensors.push(matrix("output.weight".into(), s.n_embd, s.n_vocab));
    }
    for t in tweaks {
        let Tweak::TensorType { tensor, ty } = t else {
            continue;
        };
        let new_ty = GgmlType::from_name(ty)
            .ok_or_else(|| invalid_tweak(format!("unknown ggml type {ty:?}")))?;
        let spec = tensors
            .iter_mut()
            .find(|t| t.name == *tensor)
            .ok_or_else(|| invalid_tweak(format!("no tensor {tensor:?} in the model")))?;
        if spec.dims[0] % new_ty.block != 0 {
            return Err(invalid_tweak(format!(
                "tensor {tensor:?} has rows of {} values, not a multiple of {}'s block of {}",
                spec.dims[0], new_ty.name, new_ty.block
            )));
        }
        spec.ty = new_ty;
    }

    write_gguf(
        out,
        &metadata,
        &tensors,
        format::DEFAULT_ALIGNMENT,
        |i, w| {
            let t = &tensors[i];
            if let Some(values) = scripted.then(|| think::values(&t.name, &t.dims)).flatten() {
                let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                return w.write_all(&bytes);
            }
            if t.dims.len() == 1 && t.ty == format::F32 {
                // RMS norm weights of 1.0 keep activations at a sane scale.
                let ones: Vec<u8> = (0..t.dims[0]).flat_map(|_| 1.0f32.to_le_bytes()).collect();
                return w.write_all(&ones);
            }
            // One stream per tensor, so a tensor's values do not depend on the
            // order tensors are written in.
            let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(GAMMA));
            write_random(w, t, &mut rng)
        },
    )
}

/// The `bert` architecture as llama.cpp's `llama_model_bert` loads it
/// (tensor names and shapes from its `load_arch_tensors`): token, token
/// type and position embeddings with a layer norm, then per layer Q/K/V
/// and output projections with biases, a post-attention layer norm, a GELU
/// feed-forward with biases and a post-FFN layer norm. `nomic-bert`
/// (`llama_model_nomic_bert`): no position embeddings (rotary), one fused
/// Q/K/V projection and the output projection without biases, a SwiGLU
/// feed-forward (gate, up, down) without biases, the same layer norms.
fn write_bert_to<W: Write>(out: &mut W, preset: Preset, seed: u64) -> io::Result<()> {
    let s = preset.shape();
    let nomic = preset == Preset::TinyNomicBert;
    let arch = if nomic { "nomic-bert" } else { "bert" };
    let n_ctx = 512u64;
    let vocab = vocab::build(s.n_vocab as usize);
    let u32v = |v: u64| Value::U32(u32::try_from(v).expect("preset dimensions fit in u32"));
    let key = |name: &str| format!("{arch}.{name}");
    let mut arch_metadata: Vec<(String, Value)> = vec![
        (key("context_length"), u32v(n_ctx)),
        (key("embedding_length"), u32v(s.n_embd)),
        (key("block_count"), u32v(s.n_layer)),
        (key("feed_forward_length"), u32v(s.n_ff)),
        (key("attention.head_count"), u32v(s.n_head)),
        (key("attention.layer_norm_epsilon"), Value::F32(1e-12)),
        (key("attention.causal"), Value::Bool(false)),
        // llama.cpp's LLAMA_POOLING_TYPE_CLS (bert, as bge-small) and
        // LLAMA_POOLING_TYPE_MEAN (nomic-bert, as nomic-embed-text).
        (key("pooling_type"), Value::U32(if nomic { 1 } else { 2 })),
    ];
    if nomic {
        arch_metadata.push((key("rope.freq_base"), Value::F32(1000.0)));
    }
    let mut metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::Str(arch.into())),
        (
            "general.name",
            Value::Str(format!("edgecloud {preset} (random weights)")),
        ),
        (
            "general.alignment",
            Value::U32(format::DEFAULT_ALIGNMENT as u32),
        ),
        ("general.file_type", Value::U32(0)),
    ];
    metadata.extend(arch_metadata.iter().map(|(k, v)| (k.as_str(), v.clone())));
    metadata.extend(tokenizer_metadata(vocab));
    metadata.extend([
        ("tokenizer.ggml.token_type_count", Value::U32(2)),
        ("tokenizer.ggml.bos_token_id", Value::U32(IM_START_ID)),
        ("tokenizer.ggml.eos_token_id", Value::U32(IM_END_ID)),
        ("tokenizer.ggml.unknown_token_id", Value::U32(ENDOFTEXT_ID)),
        ("tokenizer.ggml.padding_token_id", Value::U32(ENDOFTEXT_ID)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        ("tokenizer.ggml.add_eos_token", Value::Bool(true)),
        (
            "edgecloud.generator.preset",
            Value::Str(preset.name().into()),
        ),
        ("edgecloud.generator.seed", Value::U64(seed)),
    ]);
    let t = |name: String, dims: Vec<u64>| TensorSpec {
        name,
        dims,
        ty: format::F32,
    };
    let (e, f) = (s.n_embd, s.n_ff);
    let mut tensors = vec![
        t("token_embd.weight".into(), vec![e, s.n_vocab]),
        t("token_types.weight".into(), vec![e, 2]),
    ];
    if !nomic {
        tensors.push(t("position_embd.weight".into(), vec![e, n_ctx]));
    }
    tensors.push(t("token_embd_norm.weight".into(), vec![e]));
    tensors.push(t("token_embd_norm.bias".into(), vec![e]));
    for i in 0..s.n_layer {
        if nomic {
            tensors.push(t(format!("blk.{i}.attn_qkv.weight"), vec![e, 3 * e]));
            tensors.push(t(format!("blk.{i}.attn_output.weight"), vec![e, e]));
        } else {
            for part in ["attn_q", "attn_k", "attn_v", "attn_output"] {
                tensors.push(t(format!("blk.{i}.{part}.weight"), vec![e, e]));
                tensors.push(t(format!("blk.{i}.{part}.bias"), vec![e]));
            }
        }
        tensors.push(t(format!("blk.{i}.attn_output_norm.weight"), vec![e]));
        tensors.push(t(format!("blk.{i}.attn_output_norm.bias"), vec![e]));
        tensors.push(t(format!("blk.{i}.ffn_up.weight"), vec![e, f]));
        if nomic {
            tensors.push(t(format!("blk.{i}.ffn_gate.weight"), vec![e, f]));
        } else {
            tensors.push(t(format!("blk.{i}.ffn_up.bias"), vec![f]));
        }
        tensors.push(t(format!("blk.{i}.ffn_down.weight"), vec![f, e]));
        if !nomic {
            tensors.push(t(format!("blk.{i}.ffn_down.bias"), vec![e]));
        }
        tensors.push(t(format!("blk.{i}.layer_output_norm.weight"), vec![e]));
        tensors.push(t(format!("blk.{i}.layer_output_norm.bias"), vec![e]));
    }
    write_gguf(
        out,
        &metadata,
        &tensors,
        format::DEFAULT_ALIGNMENT,
        |i, w| {
            let t = &tensors[i];
            if t.name.ends_with("norm.weight") {
                // Layer norm gains of 1.0 keep activations at a sane scale.
                let ones: Vec<u8> = (0..t.dims[0]).flat_map(|_| 1.0f32.to_le_bytes()).collect();
                return w.write_all(&ones);
            }
            // Biases and matrices alike: small random values, one stream
            // per tensor.
            let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(GAMMA));
            write_random(w, t, &mut rng)
        },
    )
}

/// Standard deviation of generated weights: small, like a freshly
/// initialised network, so activations never overflow.
const WEIGHT_STD: f32 = 0.02;

fn write_random(w: &mut dyn Write, t: &TensorSpec, rng: &mut Rng) -> io::Result<()> {
    let row_len = t.dims[0] as usize;
    let rows: u64 = t.dims[1..].iter().product();
    let mut values = vec![0f32; row_len];
    let mut buf = Vec::with_capacity(row_len * 4);
    for _ in 0..rows {
        values
            .iter_mut()
            .for_each(|v| *v = rng.normalish() * WEIGHT_STD);
        buf.clear();
        match t.ty {
            format::F32 => values
                .iter()
                .for_each(|v| buf.extend_from_slice(&v.to_le_bytes())),
            format::Q8_0 => quantize_q8_0(&values, &mut buf),
            ty if ty.name == "F16" => values
                .iter()
                .for_each(|v| buf.extend_from_slice(&f32_to_f16_bits(*v).to_le_bytes())),
            ty if ty.name == "I8" => buf.extend(values.iter().map(|v| (v * 1e3) as i8 as u8)),
            // Only tweaked test files get here: zero bytes are a valid
            // encoding of zeros in every ggml type.
            ty => buf.resize((row_len as u64 / ty.block * ty.bytes) as usize, 0),
        }
        w.write_all(&buf)?;
    }
    Ok(())
}

/// ggml's Q8_0: per 32 values, an f16 scale `d = max|x| / 127` followed by
/// 32 signed bytes `round(x / d)`.
fn quantize_q8_0(values: &[f32], out: &mut Vec<u8>) {
    for block in values.chunks_exact(32) {
        let amax = block.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f32_to_f16_bits(d).to_le_bytes());
        out.extend(block.iter().map(|v| (v * inv).round() as i8 as u8));
    }
}

/// IEEE binary16 from f32, round to nearest even (no dependency needed for
/// the few scales we write). Handles subnormals, overflow to infinity, NaN.
pub(crate) fn f32_to_f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        // Subnormal: shift the implicit bit in, then round.
        let m = mant | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rem = m & ((1 << shift) - 1);
        let mut h = m >> shift;
        if rem > half || (rem == half && h & 1 == 1) {
            h += 1;
        }
        return sign | h as u16;
    }
    let mut h = ((e as u32) << 10) | (mant >> 13);
    let rem = mant & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h += 1; // may carry into the exponent, which is still correct
    }
    sign | h as u16
}

/// The weights' generator: the crate's SplitMix64 (tiny, fast, and good
/// enough for weights nobody will train) plus a normal-ish sampler.
struct Rng(SplitMix64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Roughly standard normal: the centred sum of four 16-bit uniforms
    /// (Irwin-Hall), scaled to unit variance. One PRNG call per value.
    fn normalish(&mut self) -> f32 {
        let r = self.next_u64();
        let sum: u32 = (0..4).map(|k| ((r >> (16 * k)) & 0xffff) as u32).sum();
        // Sum of 4 uniforms on [0, 65536): mean 2*65536, variance 4/12 * 65536^2.
        const SCALE: f32 = 1.0 / (65536.0 * 0.577_350_26);
        (sum as f32 - 131_072.0) * SCALE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_names_round_trip() {
        for p in [
            Preset::Tiny,
            Preset::Bench135m,
            Preset::Bench135mVocab262k,
            Preset::TinyBert,
        ] {
            assert_eq!(p.to_string().parse::<Preset>().unwrap(), p);
        }
        let err = "huge".parse::<Preset>().unwrap_err();
        assert!(err.to_string().contains("huge"));
    }

    #[test]
    fn f16_conversion_matches_known_values() {
        assert_eq!(f32_to_f16_bits(0.0), 0x0000);
        assert_eq!(f32_to_f16_bits(-0.0), 0x8000);
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(-2.0), 0xc000);
        assert_eq!(f32_to_f16_bits(65504.0), 0x7bff);
        assert_eq!(f32_to_f16_bits(1e6), 0x7c00);
        assert_eq!(f32_to_f16_bits(f32::NAN) & 0x7c00, 0x7c00);
        // Smallest subnormal and smallest normal.
        assert_eq!(f32_to_f16_bits(5.960_464_5e-8), 0x0001);
        assert_eq!(f32_to_f16_bits(6.103_515_6e-5), 0x0400);
        assert_eq!(f32_to_f16_bits(1e-5), 0x00a8);
        // A typical Q8_0 scale: 0.06 / 127.
        assert_eq!(f32_to_f16_bits(0.000_472_4), 0x0fbd);
    }

    #[test]
    fn normalish_has_unit_scale() {
        let mut rng = Rng::new(7);
        let n = 100_000;
        let xs: Vec<f32> = (0..n).map(|_| rng.normalish()).collect();
        let mean = xs.iter().sum::<f32>() / n as f32;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n as f32;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "variance {var}");
    }

    fn tiny_bytes(seed: u64) -> Vec<u8> {
        let mut out = Vec::new();
        write_model_to(&mut out, Preset::Tiny, seed).unwrap();
        out
    }

    #[test]
    fn same_seed_same_bytes_different_seed_different_bytes() {
        let a = tiny_bytes(1);
        assert_eq!(a, tiny_bytes(1));
        assert_ne!(a, tiny_bytes(2));
        assert!(a.len() < 1_000_000, "tiny model is {} bytes", a.len());
        assert_eq!(&a[..4], b"GGUF");
    }

    #[test]
    fn tokenizer_metadata_is_what_llama_cpp_needs() {
        let bytes = tiny_bytes(1);
        let h = crate::reader::read_header_from_bytes(&bytes).unwrap();
        let int = |k: &str| h.get(k).unwrap().value.as_i64().unwrap();
        let text = |k: &str| h.get(k).unwrap().value.as_str().unwrap().to_string();
        assert_eq!(text("tokenizer.ggml.model"), "gpt2");
        // "gpt2" here is refused by llama.cpp ("unknown pre-tokenizer type").
        assert_eq!(text("tokenizer.ggml.pre"), "default");
        assert_eq!(int("tokenizer.ggml.bos_token_id"), 1);
        assert_eq!(int("tokenizer.ggml.eos_token_id"), 2);
        assert_eq!(int("tokenizer.ggml.eot_token_id"), 2);
        assert!(text("tokenizer.chat_template").contains("<|im_start|>"));
        let tokens = h
            .get("tokenizer.ggml.tokens")
            .unwrap()
            .value
            .as_array()
            .unwrap();
        assert_eq!(tokens.str_at(1), Some("<|im_start|>"));
        assert_eq!(tokens.str_at(2), Some("<|im_end|>"));
        let types = h
            .get("tokenizer.ggml.token_type")
            .unwrap()
            .value
            .as_array()
            .unwrap();
        let types: Vec<i64> = types.ints().collect();
        assert_eq!(&types[..4], &[3, 3, 3, 1], "specials are control tokens");
        // No separate output head: llama.cpp ties it to the embedding.
        assert!(h.tensors.iter().all(|t| t.name != "output.weight"));
        assert!(h.tensors.iter().all(|t| t.ty == format::F32));
    }

    #[test]
    fn write_model_creates_the_file_and_reports_missing_dirs() {
        let dir = std::env::temp_dir().join(format!("edgecloud-gen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny.gguf");
        write_model(&path, Preset::Tiny, 3).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), tiny_bytes(3));
        let missing = dir.join("no/such/dir/x.gguf");
        assert!(matches!(
            write_model(&missing, Preset::Tiny, 3),
            Err(GgufError::NotFound { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn q8_0_block_round_trips_within_one_step() {
        let values: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 0.001).collect();
        let mut out = Vec::new();
        quantize_q8_0(&values, &mut out);
        assert_eq!(out.len(), 34);
        let d = 0.016f32 / 127.0;
        for (i, v) in values.iter().enumerate() {
            let q = out[2 + i] as i8 as f32;
            assert!((q * d - v).abs() <= d, "value {i}");
        }
    }
}
