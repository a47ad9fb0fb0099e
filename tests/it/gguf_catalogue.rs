//! The catalogue of structurally valid GGUF files that llama.cpp (b11434)
//! aborts or crashes on: each is the generated tiny model with one value
//! changed (`edgecloud::gguf::generate::Tweak`), and each must be refused
//! by the validator with its own named error that says what and where.
//! The unchanged tiny model, the bench model and the real SmolLM2 must
//! still validate, so the new checks refuse nothing good.
//!
//! The probe tests (`probe.rs`) run the entries marked `crashes` through
//! llama.cpp in a child process, which proves they really do crash it.

use std::path::PathBuf;

use edgecloud::gguf::{validate, write_model_with, GgufError, Preset, Tweak};

use crate::support::{models, real_model};

/// One catalogue entry.
pub(crate) struct Entry {
    /// A short name, also the file name.
    pub(crate) name: &'static str,
    /// The one change to the tiny model.
    pub(crate) tweak: Tweak,
    /// The `GgufError::kind` the validator must report.
    pub(crate) kind: &'static str,
    /// Text the message must contain (the key, tensor or value at fault).
    pub(crate) says: &'static str,
    /// True for the files llama.cpp (b11434) kills the process on; the
    /// probe test checks that each of them really does, in a child.
    pub(crate) crashes: bool,
}

fn set_u32(key: &str, v: u32) -> Tweak {
    Tweak::SetU32(key.into(), v)
}

fn set_f32(key: &str, v: f32) -> Tweak {
    Tweak::SetF32(key.into(), v)
}

fn set_str(key: &str, v: &str) -> Tweak {
    Tweak::SetStr(key.into(), v.into())
}

fn tensor_type(tensor: &str, ty: &str) -> Tweak {
    Tweak::TensorType {
        tensor: tensor.into(),
        ty: ty.into(),
    }
}

const EPS: &str = "llama.attention.layer_norm_rms_epsilon";

/// Every entry, in the order of the issue, then the neighbours found by
/// reading llama.cpp's loader.
pub(crate) fn catalogue() -> Vec<Entry> {
    let e = |name, tweak, kind, says, crashes| Entry {
        name,
        tweak,
        kind,
        says,
        crashes,
    };
    vec![
        e(
            "rope-scaling-unknown",
            set_str("llama.rope.scaling.type", "dynamic"),
            "unknown_rope_scaling",
            "'llama.rope.scaling.type' is \"dynamic\"",
            true,
        ),
        e(
            "kv-heads-not-dividing",
            Tweak::KvHeads(3),
            "head_count_mismatch",
            "4 attention heads and 3 KV heads",
            true,
        ),
        e(
            "rms-eps-nan",
            set_f32(EPS, f32::NAN),
            "bad_norm_epsilon",
            "'llama.attention.layer_norm_rms_epsilon' is NaN",
            true,
        ),
        e(
            "rms-eps-negative",
            set_f32(EPS, -1e-5),
            "bad_norm_epsilon",
            "'llama.attention.layer_norm_rms_epsilon' is -0.00001;",
            true,
        ),
        e(
            "attn-q-i8",
            tensor_type("blk.0.attn_q.weight", "I8"),
            "unsupported_tensor_type",
            "tensor 'blk.0.attn_q.weight' is stored as I8",
            true,
        ),
        // llama.cpp crashed on it while the lane made one unified cache
        // of the context the model declares (0, rounded up to 256 cells);
        // with a stream per sequence and 4096 cells for a model that
        // declares none, it runs (the probe passes). The validator still
        // refuses it by name.
        e(
            "context-length-zero",
            set_u32("llama.context_length", 0),
            "zero_context_length",
            "'llama.context_length' is 0",
            false,
        ),
        e(
            "tokenizer-no-vocab",
            set_str("tokenizer.ggml.model", "no_vocab"),
            "no_vocabulary",
            "tokenizer.ggml.model is \"no_vocab\"",
            true,
        ),
        // Neighbours, found by reading llama.cpp's loader (those marked
        // false llama.cpp refuses cleanly, or, for an infinite epsilon,
        // runs to garbage).
        e(
            "rms-eps-infinite",
            set_f32(EPS, f32::INFINITY),
            "bad_norm_epsilon",
            "is inf",
            false,
        ),
        e(
            "tokenizer-none",
            set_str("tokenizer.ggml.model", "none"),
            "no_vocabulary",
            "\"none\"",
            true,
        ),
        e(
            "tokenizer-unknown",
            set_str("tokenizer.ggml.model", "sentencepiece"),
            "unknown_tokenizer",
            "\"sentencepiece\" in tokenizer.ggml.model",
            false,
        ),
        e(
            "kv-heads-zero",
            Tweak::KvHeads(0),
            "head_count_mismatch",
            "4 attention heads and 0 KV heads",
            false,
        ),
        e(
            "kv-heads-more-than-heads",
            Tweak::KvHeads(8),
            "head_count_mismatch",
            "4 attention heads and 8 KV heads",
            true,
        ),
        e(
            "ffn-up-i32",
            tensor_type("blk.1.ffn_up.weight", "I32"),
            "unsupported_tensor_type",
            "'blk.1.ffn_up.weight' is stored as I32",
            true,
        ),
        e(
            "token-embd-f64",
            tensor_type("token_embd.weight", "F64"),
            "unsupported_tensor_type",
            "'token_embd.weight' is stored as F64",
            true,
        ),
        e(
            "attn-k-q8-1",
            tensor_type("blk.0.attn_k.weight", "Q8_1"),
            "unsupported_tensor_type",
            "'blk.0.attn_k.weight' is stored as Q8_1",
            true,
        ),
        e(
            "norm-f16",
            tensor_type("blk.0.attn_norm.weight", "F16"),
            "unsupported_tensor_type",
            "'blk.0.attn_norm.weight' is stored as F16, which llama.cpp cannot use for a norm or bias vector",
            true,
        ),
        e(
            "block-count-zero",
            set_u32("llama.block_count", 0),
            "bad_layer_count",
            "'llama.block_count' is 0",
            true,
        ),
        e(
            "block-count-over-max",
            set_u32("llama.block_count", 513),
            "bad_layer_count",
            "'llama.block_count' is 513",
            true,
        ),
        e(
            "nextn-layers-over-block-count",
            set_u32("llama.nextn_predict_layers", 3),
            "bad_layer_count",
            "'llama.nextn_predict_layers' is 3",
            true,
        ),
        e(
            "experts-used-without-experts",
            set_u32("llama.expert_used_count", 2),
            "inconsistent_experts",
            "llama.expert_used_count is 2 but llama.expert_count is 0",
            true,
        ),
        e(
            "expert-groups-without-experts",
            set_u32("llama.expert_group_count", 2),
            "inconsistent_experts",
            "llama.expert_group_count is 2 without experts",
            true,
        ),
        e(
            "value-length-differs",
            set_u32("llama.attention.value_length", 8),
            "head_size_mismatch",
            "key head size 16 differs from value head size 8",
            false,
        ),
        e(
            "rope-scaling-not-a-string",
            set_u32("llama.rope.scaling.type", 1),
            "wrong_value_type",
            "'llama.rope.scaling.type' has type u32, expected string",
            false,
        ),
    ]
}

/// Writes the entry's file (once per process per entry name).
pub(crate) fn build(entry: &Entry) -> PathBuf {
    let path = models::fresh_path(&format!("{}.gguf", entry.name));
    write_model_with(
        &path,
        Preset::Tiny,
        models::SEED,
        std::slice::from_ref(&entry.tweak),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", entry.name));
    path
}

#[test]
fn every_catalogue_file_gets_its_named_error() {
    let mut failures = Vec::new();
    for entry in catalogue() {
        let path = build(&entry);
        match validate(&path) {
            Ok(_) => failures.push(format!("{}: accepted", entry.name)),
            Err(err) => {
                let message = err.to_string();
                let seen = if entry.crashes { "crashes" } else { "-" };
                eprintln!("{:32} {seen:8} {:24} {message}", entry.name, err.kind());
                if err.kind() != entry.kind || !message.contains(entry.says) {
                    failures.push(format!(
                        "{}: got {} {message:?}, expected {} containing {:?}",
                        entry.name,
                        err.kind(),
                        entry.kind,
                        entry.says
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn catalogue_files_differ_from_the_tiny_model_in_one_place_only() {
    // The tweak is the only difference: the same tweak written twice gives
    // the same bytes, and with no tweak the file is the tiny model.
    let plain = models::fresh_path("plain.gguf");
    write_model_with(&plain, Preset::Tiny, models::SEED, &[]).unwrap();
    assert_eq!(
        std::fs::read(&plain).unwrap(),
        std::fs::read(models::tiny_model()).unwrap()
    );
    let entry = &catalogue()[0];
    assert_eq!(
        std::fs::read(build(entry)).unwrap(),
        std::fs::read(build(entry)).unwrap()
    );
}

#[test]
fn a_tweak_that_cannot_apply_is_an_invalid_input_error() {
    let path = models::fresh_path("bad-tweak.gguf");
    let err = write_model_with(
        &path,
        Preset::Tiny,
        1,
        &[tensor_type("blk.0.attn_q.weight", "Q4_K")],
    )
    .unwrap_err();
    assert!(
        matches!(&err, GgufError::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidInput),
        "{err:?}"
    );
    let chain = edgecloud::error_chain(&err);
    assert!(chain.contains("block of 256"), "{chain}");
    let err = write_model_with(&path, Preset::Tiny, 1, &[tensor_type("nope", "F32")]).unwrap_err();
    let chain = edgecloud::error_chain(&err);
    assert!(chain.contains("no tensor \"nope\""), "{chain}");
}

#[test]
fn good_models_still_validate() {
    validate(models::tiny_model()).unwrap();
    // Values the checks must not refuse: a zero epsilon (llama.cpp asserts
    // only `eps >= 0`), known rope scalings, one KV head, per-layer KV heads.
    for tweak in [
        set_f32(EPS, 0.0),
        set_str("llama.rope.scaling.type", "yarn"),
        set_str("llama.rope.scaling.type", "none"),
        Tweak::KvHeads(1),
        Tweak::KvHeads(4),
        tensor_type("blk.0.attn_q.weight", "F16"),
        tensor_type("blk.0.attn_q.weight", "Q8_0"),
    ] {
        let path = models::fresh_path("good.gguf");
        write_model_with(
            &path,
            Preset::Tiny,
            models::SEED,
            std::slice::from_ref(&tweak),
        )
        .unwrap();
        if let Err(err) = validate(&path) {
            panic!("{tweak:?} was refused: {err}");
        }
    }
}

#[test]
fn bench_and_real_models_still_validate() {
    validate(models::bench_model()).unwrap();
    let info = validate(real_model::smollm2()).unwrap();
    assert_eq!(info.architecture.as_deref(), Some("llama"));
    assert_eq!(info.quantization, "Q4_1");
}
