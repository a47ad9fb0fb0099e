//! Integration tests: generated models, a catalogue of malformed GGUF files
//! (each must produce its own typed error while the process keeps running),
//! and the `edgecloud model` commands through the real binary.

use std::path::Path;
use std::process::Command;

use edgecloud::gguf::{inspect, validate, write_model, GgufError, Preset};

use crate::support::models::{self, RawGguf, RawKv};

fn tiny_bytes() -> Vec<u8> {
    std::fs::read(models::tiny_model()).unwrap()
}

/// Validates `bytes` written to a fresh file.
fn check(name: &str, bytes: &[u8]) -> Result<edgecloud::gguf::ModelInfo, GgufError> {
    validate(&models::write_temp(name, bytes))
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(needle)))
}

#[test]
fn tiny_model_is_generated_once_small_and_valid() {
    let a = models::tiny_model();
    assert_eq!(a, models::tiny_model());
    let len = std::fs::metadata(a).unwrap().len();
    assert!(len > 0 && len < 1_000_000, "tiny model is {len} bytes");
    let info = validate(a).unwrap();
    assert_eq!(info.vocab_size, Some(512));
}

#[test]
fn bench_model_has_the_smollm2_shape_in_q8_0() {
    let info = validate(models::bench_model()).unwrap();
    assert_eq!(info.architecture.as_deref(), Some("llama"));
    assert_eq!(
        info.parameters, 134_515_008,
        "SmolLM2-135M without a separate output head"
    );
    assert_eq!(info.quantization, "Q8_0");
    assert_eq!(info.dominant_tensor_type.as_deref(), Some("Q8_0"));
    assert_eq!(info.layers, Some(30));
    assert_eq!(info.heads, Some(9));
    assert_eq!(info.kv_heads, Some(3));
    assert_eq!(info.embedding_length, Some(576));
    assert_eq!(info.context_length, Some(8192));
    assert_eq!(info.vocab_size, Some(49152));
    assert!(info.file_size > 140_000_000 && info.file_size < 150_000_000);
}

#[test]
fn generation_is_deterministic_across_calls() {
    let a = models::fresh_path("a.gguf");
    let b = models::fresh_path("b.gguf");
    write_model(&a, Preset::Tiny, models::SEED).unwrap();
    write_model(&b, Preset::Tiny, models::SEED + 1).unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), tiny_bytes());
    assert_ne!(std::fs::read(&b).unwrap(), tiny_bytes());
}

#[test]
fn raw_codec_round_trips_the_tiny_model() {
    // The catalogue below relies on this tool changing only what it is told.
    assert_eq!(RawGguf::tiny().to_bytes(), tiny_bytes());
}

// ---- The malformed-file catalogue ----

#[test]
fn missing_path() {
    let path = models::fresh_path("does-not-exist.gguf");
    let err = validate(&path).unwrap_err();
    assert!(
        matches!(&err, GgufError::NotFound { path: p } if *p == path),
        "{err:?}"
    );
    assert!(err.to_string().contains("no such file"));
}

#[test]
fn directory() {
    let err = validate(models::scratch_dir()).unwrap_err();
    assert!(matches!(err, GgufError::IsDirectory { .. }), "{err:?}");
}

#[test]
fn empty_file() {
    let err = check("empty.gguf", b"").unwrap_err();
    assert!(matches!(err, GgufError::Empty), "{err:?}");
}

#[test]
fn bad_magic() {
    let mut bytes = tiny_bytes();
    bytes[..4].copy_from_slice(b"GGML");
    let err = check("magic.gguf", &bytes).unwrap_err();
    assert!(
        matches!(&err, GgufError::BadMagic { found } if found == b"GGML"),
        "{err:?}"
    );
    assert!(err.to_string().contains("not a GGUF file"), "{err}");

    // Shorter than the magic itself, and plain text.
    let err = check("short.gguf", b"GG").unwrap_err();
    assert!(
        matches!(&err, GgufError::BadMagic { found } if found == b"GG"),
        "{err:?}"
    );
    let err = check("text.gguf", b"{\"not\": \"a model\"}\n").unwrap_err();
    assert!(matches!(err, GgufError::BadMagic { .. }), "{err:?}");
}

#[test]
fn unsupported_versions() {
    for version in [0u32, 1, 4, 99, 0x0300_0000] {
        let mut bytes = tiny_bytes();
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        let err = check("version.gguf", &bytes).unwrap_err();
        assert!(
            matches!(err, GgufError::UnsupportedVersion { version: v } if v == version),
            "version {version}: {err:?}"
        );
    }
    // Version 2 has the same layout and llama.cpp still loads it.
    let mut bytes = tiny_bytes();
    bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(check("v2.gguf", &bytes).unwrap().gguf_version, 2);
}

#[test]
fn huge_tensor_count_is_an_error_not_an_allocation() {
    let mut bytes = tiny_bytes();
    bytes[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let err = check("tensors.gguf", &bytes).unwrap_err();
    match &err {
        GgufError::CountTooLarge {
            what,
            offset,
            count,
            max,
        } => {
            assert_eq!(what, "tensor count");
            assert_eq!((*offset, *count), (8, 1 << 60));
            assert!(*max < bytes.len() as u64);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains("tensor count at offset 8"),
        "{err}"
    );
}

#[test]
fn huge_metadata_count() {
    let mut bytes = tiny_bytes();
    bytes[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = check("kvs.gguf", &bytes).unwrap_err();
    assert!(
        matches!(&err, GgufError::CountTooLarge { what, offset: 16, .. } if what == "metadata count"),
        "{err:?}"
    );
}

#[test]
fn huge_string_length() {
    // The first key's length field sits right after the 24-byte header.
    let mut bytes = tiny_bytes();
    bytes[24..32].copy_from_slice(&(1u64 << 62).to_le_bytes());
    let err = check("string.gguf", &bytes).unwrap_err();
    assert!(
        matches!(&err, GgufError::CountTooLarge { what, offset: 24, count, .. }
            if what.contains("key of metadata entry #0") && *count == 1 << 62),
        "{err:?}"
    );
}

#[test]
fn huge_array_length() {
    let mut raw = RawGguf::tiny();
    let kv = raw.kv_mut("tokenizer.ggml.scores");
    kv.payload[4..12].copy_from_slice(&(1u64 << 61).to_le_bytes());
    let err = check("array.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::CountTooLarge { what, .. } if what.contains("tokenizer.ggml.scores")),
        "{err:?}"
    );
}

#[test]
fn truncated_in_the_metadata_table() {
    let bytes = tiny_bytes();
    // Cut two bytes into the value-type tag that follows this key.
    let key = b"llama.block_count";
    let tag_at = find(&bytes, key) + key.len();
    let err = check("trunc-kv.gguf", &bytes[..tag_at + 2]).unwrap_err();
    match &err {
        GgufError::Truncated {
            what,
            offset,
            needed,
            file_size,
        } => {
            assert_eq!(what, "value type of key 'llama.block_count'");
            assert_eq!(
                (*offset, *needed, *file_size),
                (tag_at as u64, 4, tag_at as u64 + 2)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().starts_with("truncated file"), "{err}");

    // A cut inside the token list names the element where the file ends.
    let tokens_at = find(&bytes, b"tokenizer.ggml.tokens");
    let err = check("trunc-tokens.gguf", &bytes[..tokens_at + 600]).unwrap_err();
    assert!(
        matches!(&err, GgufError::Truncated { what, .. }
            if what.contains("of array 'tokenizer.ggml.tokens'")),
        "{err:?}"
    );
    // And a cut inside a fixed-size array says how much it needed.
    let scores_at = find(&bytes, b"tokenizer.ggml.scores");
    let err = check("trunc-scores.gguf", &bytes[..scores_at + 100]).unwrap_err();
    assert!(
        matches!(&err, GgufError::Truncated { what, needed: 2048, .. }
            if what.contains("array 'tokenizer.ggml.scores' (512 values of type f32)")),
        "{err:?}"
    );
}

#[test]
fn truncated_in_the_tensor_table() {
    let bytes = tiny_bytes();
    let name = b"blk.1.ffn_up.weight";
    let dims_at = find(&bytes, name) + name.len();
    let err = check("trunc-tensors.gguf", &bytes[..dims_at + 1]).unwrap_err();
    assert!(
        matches!(&err, GgufError::Truncated { what, .. }
            if what == "dimension count of tensor 'blk.1.ffn_up.weight'"),
        "{err:?}"
    );
}

#[test]
fn tensor_data_past_end_of_file() {
    let bytes = tiny_bytes();
    let err = check("trunc-data.gguf", &bytes[..bytes.len() - 100]).unwrap_err();
    match &err {
        GgufError::TensorOutOfBounds {
            tensor,
            end,
            file_size,
            ..
        } => {
            assert_eq!(tensor, "output_norm.weight", "the last tensor");
            assert_eq!(*end, bytes.len() as u64);
            assert_eq!(*file_size, bytes.len() as u64 - 100);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tensor_offset_far_past_end_of_file() {
    let mut raw = RawGguf::tiny();
    raw.tensors[3].offset = u64::MAX - 31;
    let err = check("far.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::TensorOutOfBounds { tensor, end: u64::MAX, .. } if *tensor == raw.tensors[3].name),
        "{err:?}"
    );
}

#[test]
fn misaligned_overlapping_and_gapped_tensor_data() {
    let mut raw = RawGguf::tiny();
    raw.tensors[1].offset += 4;
    let err = check("misaligned.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::TensorMisaligned { tensor, alignment: 32, .. } if tensor == "blk.0.attn_norm.weight"),
        "{err:?}"
    );

    let mut raw = RawGguf::tiny();
    raw.tensors[2].offset = raw.tensors[1].offset;
    let err = check("overlap.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::TensorOverlap { tensor, other }
            if tensor == "blk.0.attn_q.weight" && other == "blk.0.attn_norm.weight"),
        "{err:?}"
    );

    let mut raw = RawGguf::tiny();
    raw.tensors[1].offset += 32;
    let err = check("gap.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::TensorLayout { tensor, found, expected }
            if tensor == "blk.0.attn_norm.weight" && *found == *expected + 32),
        "{err:?}"
    );
}

#[test]
fn tokens_and_scores_lengths_differ() {
    let mut raw = RawGguf::tiny();
    raw.set(RawKv::f32_array("tokenizer.ggml.scores", &[0.0; 511]));
    let err = check("scores.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::TokenizerLengthMismatch { key, len: 511, tokens: 512 }
            if key == "tokenizer.ggml.scores"),
        "{err:?}"
    );
}

#[test]
fn token_types_length_differs() {
    let mut raw = RawGguf::tiny();
    let kv = raw.kv_mut("tokenizer.ggml.token_type");
    // Drop the last element and fix the count.
    kv.payload.truncate(kv.payload.len() - 4);
    kv.payload[4..12].copy_from_slice(&511u64.to_le_bytes());
    let err = check("types.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::TokenizerLengthMismatch { key, len: 511, .. }
            if key == "tokenizer.ggml.token_type"),
        "{err:?}"
    );
}

#[test]
fn duplicate_token_strings() {
    let mut raw = RawGguf::tiny();
    let mut tokens = raw.kv_mut("tokenizer.ggml.tokens").strings();
    tokens[300] = tokens[299].clone();
    raw.set(RawKv::str_array("tokenizer.ggml.tokens", &tokens));
    let err = check("dup.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::DuplicateToken { token, first: 299, second: 300 } if *token == tokens[299]),
        "{err:?}"
    );
    assert!(err.to_string().contains("aborts"), "{err}");
}

#[test]
fn empty_tokens_are_renamed_like_llama_cpp_does() {
    // llama.cpp turns empty tokens into "[EMPTY_<id>]", so several empty
    // tokens are not duplicates...
    let mut raw = RawGguf::tiny();
    let mut tokens = raw.kv_mut("tokenizer.ggml.tokens").strings();
    tokens[400] = String::new();
    tokens[401] = String::new();
    raw.set(RawKv::str_array("tokenizer.ggml.tokens", &tokens));
    check("empty-tokens.gguf", &raw.to_bytes()).unwrap();
    // ...but one that collides with such a name is.
    tokens[402] = "[EMPTY_400]".into();
    raw.set(RawKv::str_array("tokenizer.ggml.tokens", &tokens));
    let err = check("empty-dup.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(
            err,
            GgufError::DuplicateToken {
                first: 400,
                second: 402,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn out_of_range_eos_id() {
    let mut raw = RawGguf::tiny();
    raw.set(RawKv::u32("tokenizer.ggml.eos_token_id", 512));
    let err = check("eos.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::TokenIdOutOfRange { key, id: 512, vocab_size: 512 }
            if key == "tokenizer.ggml.eos_token_id"),
        "{err:?}"
    );
}

#[test]
fn unknown_ggml_type() {
    for type_id in [4u32, 31, 43, 999, u32::MAX] {
        let mut raw = RawGguf::tiny();
        raw.tensors[0].ty = type_id;
        let err = check("ggml-type.gguf", &raw.to_bytes()).unwrap_err();
        assert!(
            matches!(&err, GgufError::UnknownTensorType { tensor, type_id: t }
                if tensor == "token_embd.weight" && *t == type_id),
            "type {type_id}: {err:?}"
        );
    }
}

#[test]
fn bad_tensor_shapes() {
    let cases: [(&str, Vec<u64>, u32, &str); 4] = [
        ("overflow", vec![1 << 40, 1 << 40], 0, "overflows"),
        ("negative", vec![64, (-1i64) as u64], 0, "negative"),
        ("five-dims", vec![1, 1, 1, 1, 1], 0, "5 dimensions"),
        ("q8-row", vec![48, 2], 8, "block size 32"),
    ];
    for (name, dims, ty, reason_part) in cases {
        let mut raw = RawGguf::tiny();
        raw.tensors[0].dims = dims;
        raw.tensors[0].ty = ty;
        let err = check(name, &raw.to_bytes()).unwrap_err();
        assert!(
            matches!(&err, GgufError::BadTensorShape { tensor, reason }
                if tensor == "token_embd.weight" && reason.contains(reason_part)),
            "{name}: {err:?}"
        );
    }
}

#[test]
fn unknown_value_type_and_nested_arrays() {
    let mut raw = RawGguf::tiny();
    raw.kv_mut("general.name").tag = 13;
    let err = check("tag.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::UnknownValueType { key, type_id: 13, .. } if key == "general.name"),
        "{err:?}"
    );

    let mut raw = RawGguf::tiny();
    let kv = raw.kv_mut("tokenizer.ggml.scores");
    kv.payload[..4].copy_from_slice(&9u32.to_le_bytes());
    let err = check("nested.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::UnknownValueType { key, type_id: 9, .. } if key == "tokenizer.ggml.scores"),
        "{err:?}"
    );
}

#[test]
fn invalid_utf8_string() {
    let mut raw = RawGguf::tiny();
    raw.set(RawKv::str_bytes("general.name", b"tiny \xff\xfe"));
    let err = check("utf8.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::InvalidUtf8 { what, .. } if what.contains("general.name")),
        "{err:?}"
    );
}

#[test]
fn duplicate_and_empty_keys_and_tensor_names() {
    let mut raw = RawGguf::tiny();
    let dup = raw.kvs[1].clone();
    raw.kvs.push(dup);
    let err = check("dup-key.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::InvalidName { reason } if reason.contains("duplicate metadata key 'general.name'")),
        "{err:?}"
    );

    let mut raw = RawGguf::tiny();
    raw.kvs[1].key.clear();
    let err = check("empty-key.gguf", &raw.to_bytes()).unwrap_err();
    assert!(matches!(err, GgufError::InvalidName { .. }), "{err:?}");

    let mut raw = RawGguf::tiny();
    raw.tensors[2].name = raw.tensors[1].name.clone();
    let err = check("dup-tensor.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::InvalidName { reason } if reason.contains("duplicate tensor name")),
        "{err:?}"
    );

    let mut raw = RawGguf::tiny();
    raw.tensors[2].name = "x".repeat(64);
    let err = check("long-tensor.gguf", &raw.to_bytes()).unwrap_err();
    assert!(matches!(err, GgufError::InvalidName { .. }), "{err:?}");
}

#[test]
fn alignment_must_be_a_power_of_two_u32() {
    let mut raw = RawGguf::tiny();
    raw.set(RawKv::u32("general.alignment", 48));
    let err = check("align.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(err, GgufError::BadAlignment { alignment: 48 }),
        "{err:?}"
    );

    let mut raw = RawGguf::tiny();
    raw.set(RawKv::str_bytes("general.alignment", b"32"));
    raw.alignment = 32;
    let err = check("align-type.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::WrongValueType { key, expected: "u32", found } if key == "general.alignment" && found == "string"),
        "{err:?}"
    );
}

#[test]
fn missing_architecture() {
    let mut raw = RawGguf::tiny();
    raw.remove("general.architecture");
    let path = raw.write("no-arch.gguf");
    let err = validate(&path).unwrap_err();
    assert!(
        matches!(&err, GgufError::MissingKey { key } if key == "general.architecture"),
        "{err:?}"
    );
    // inspect still summarises what it could read.
    let inspection = inspect(&path).unwrap();
    assert!(!inspection.is_valid());
    assert_eq!(inspection.info.architecture, None);
    assert_eq!(inspection.info.parameters, 106_816);
}

#[test]
fn missing_and_bad_hyperparameters() {
    let mut raw = RawGguf::tiny();
    raw.remove("llama.context_length");
    let err = check("no-ctx.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::MissingKey { key } if key == "llama.context_length"),
        "{err:?}"
    );

    // llama.cpp refuses a llama model whose rotary size is not the head size.
    let mut raw = RawGguf::tiny();
    raw.set(RawKv::u32("llama.rope.dimension_count", 8));
    let err = check("n-rot.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::BadHyperparameter { key, reason }
            if key == "llama.rope.dimension_count" && reason.contains("16")),
        "{err:?}"
    );

    // llama.vocab_size is informative only: llama.cpp sizes the vocabulary
    // by the token list, so a wrong value must not be a false rejection.
    let mut raw = RawGguf::tiny();
    raw.set(RawKv::u32("llama.vocab_size", 99_999));
    check("vocab-size.gguf", &raw.to_bytes()).unwrap();
}

#[test]
fn llama_tensors_missing_misshapen_or_extra() {
    let mut raw = RawGguf::tiny();
    let t = raw
        .tensors
        .iter_mut()
        .find(|t| t.name == "blk.1.ffn_up.weight")
        .unwrap();
    t.name = "blk.7.ffn_up.weight".into();
    let inspection = inspect(&raw.write("renamed.gguf")).unwrap();
    let found: Vec<(String, String)> = inspection
        .problems
        .iter()
        .map(|p| match p {
            GgufError::TensorMismatch { tensor, reason, .. } => (tensor.clone(), reason.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        found,
        [
            ("blk.1.ffn_up.weight".to_string(), "missing".to_string()),
            (
                "blk.7.ffn_up.weight".to_string(),
                "layer 7, but llama.block_count is 2".to_string()
            ),
        ]
    );

    // Same bytes, transposed shape.
    let mut raw = RawGguf::tiny();
    let t = raw
        .tensors
        .iter_mut()
        .find(|t| t.name == "blk.0.attn_k.weight")
        .unwrap();
    assert_eq!(t.dims, [64, 32]);
    t.dims = vec![32, 64];
    let err = check("transposed.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::TensorMismatch { tensor, reason, .. }
            if tensor == "blk.0.attn_k.weight" && reason == "shape [32, 64], expected [64, 32]"),
        "{err:?}"
    );
}

#[test]
fn tokenizer_model_problems() {
    let mut raw = RawGguf::tiny();
    raw.set(RawKv::str_bytes(
        "tokenizer.ggml.model",
        b"sentencepiece-ish",
    ));
    let err = check("tok-model.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::UnknownTokenizer { model } if model == "sentencepiece-ish"),
        "{err:?}"
    );

    let mut raw = RawGguf::tiny();
    raw.remove("tokenizer.ggml.merges");
    let err = check("no-merges.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::BadTokenizer { reason } if reason.contains("merges")),
        "{err:?}"
    );

    let mut raw = RawGguf::tiny();
    raw.remove("tokenizer.ggml.model");
    let err = check("no-tok-model.gguf", &raw.to_bytes()).unwrap_err();
    assert!(
        matches!(&err, GgufError::MissingKey { key } if key == "tokenizer.ggml.model"),
        "{err:?}"
    );
}

#[test]
fn inspect_lists_every_problem_it_finds() {
    let mut raw = RawGguf::tiny();
    raw.remove("general.architecture");
    raw.set(RawKv::u32("tokenizer.ggml.bos_token_id", 9999));
    raw.set(RawKv::u32("tokenizer.ggml.eos_token_id", 512));
    let inspection = inspect(&raw.write("many.gguf")).unwrap();
    let kinds: Vec<&str> = inspection.problems.iter().map(GgufError::kind).collect();
    assert_eq!(
        kinds,
        [
            "missing_key",
            "token_id_out_of_range",
            "token_id_out_of_range"
        ]
    );
    assert!(matches!(
        inspection.into_result(),
        Err(GgufError::MissingKey { .. })
    ));
}

/// Truncations and random byte edits through the public, path-based API.
/// (The unit tests beside the reader try every prefix and many more edits
/// in memory; this one proves the file path behaves the same.)
#[test]
fn truncations_and_random_corruption_through_files() {
    let bytes = tiny_bytes();
    let tables_end = validate(models::tiny_model()).unwrap().data_offset as usize;
    let path = models::fresh_path("fuzz.gguf");
    // Remove, then write: rewriting a file in place makes ext4 flush it
    // (auto_da_alloc), which is slow for thousands of files.
    let put = |content: &[u8]| {
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, content).unwrap();
    };
    for cut in (0..tables_end + 64).step_by(61).chain([bytes.len() - 1]) {
        put(&bytes[..cut]);
        assert!(
            validate(&path).is_err(),
            "prefix of {cut} bytes was accepted"
        );
    }
    let mut state = 0x5EED_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut rejected = 0;
    for _ in 0..200 {
        let mut mutant = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % 512) as usize;
            mutant[at] = next() as u8;
        }
        put(&mutant);
        if inspect(&path).is_err() || validate(&path).is_err() {
            rejected += 1;
        }
    }
    assert!(
        rejected > 20,
        "only {rejected} of 200 mutants were rejected"
    );
}

// ---- `edgecloud model` through the real binary ----

fn edgecloud(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_edgecloud"))
        .args(args)
        .output()
        .expect("the edgecloud binary runs")
}

fn path_arg(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8 here")
}

#[test]
fn cli_model_tiny_then_inspect_json_says_valid() {
    let out_path = models::fresh_path("cli/nested/dir/tiny.gguf");
    let out = edgecloud(&[
        "model",
        "tiny",
        "--out",
        path_arg(&out_path),
        "--seed",
        "42",
    ]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains(path_arg(&out_path)), "{stdout}");
    assert!(stdout.contains("bytes"), "{stdout}");
    // Same seed as the shared tiny model: same bytes as the library writes.
    assert_eq!(std::fs::read(&out_path).unwrap(), tiny_bytes());

    let out = edgecloud(&["model", "inspect", "--json", path_arg(&out_path)]);
    assert!(out.status.success(), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["valid"], true);
    assert_eq!(json["error"], serde_json::Value::Null);
    assert_eq!(json["architecture"], "llama");
    assert_eq!(json["parameters"], 106_816);
    assert_eq!(json["tokenizer"], "gpt2");
    assert_eq!(json["vocab_size"], 512);
    assert_eq!(json["chat_template"], true);
    assert_eq!(json["quantization"], "F32");
}

#[test]
fn cli_model_inspect_text_summary() {
    let out = edgecloud(&["model", "inspect", path_arg(models::tiny_model())]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    for part in [
        "architecture:   llama",
        "106.8K",
        "context length: 2048",
        "quantization:   F32",
        "gpt2, 512 tokens",
        "chat template:  yes (chatml)",
        "verdict:        valid",
    ] {
        assert!(stdout.contains(part), "missing {part:?} in:\n{stdout}");
    }
}

#[test]
fn cli_model_tiny_rejects_an_unknown_preset() {
    let out = edgecloud(&[
        "model",
        "tiny",
        "--out",
        "/dev/null/x.gguf",
        "--preset",
        "huge",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("huge"));
}

#[test]
fn cli_inspect_of_a_corrupt_file_fails_and_names_the_problem() {
    let mut raw = RawGguf::tiny();
    let mut tokens = raw.kv_mut("tokenizer.ggml.tokens").strings();
    tokens[300] = tokens[299].clone();
    raw.set(RawKv::str_array("tokenizer.ggml.tokens", &tokens));
    let path = raw.write("cli-dup.gguf");

    let out = edgecloud(&["model", "inspect", path_arg(&path)]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("duplicate token"), "{stderr}");
    assert!(stderr.contains(path_arg(&path)), "{stderr}");
    assert!(String::from_utf8(out.stdout).unwrap().contains("INVALID"));

    let out = edgecloud(&["model", "inspect", "--json", path_arg(&path)]);
    assert!(!out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["valid"], false);
    assert_eq!(json["error_kind"], "duplicate_token");
    assert!(json["error"].as_str().unwrap().contains("duplicate token"));
    assert_eq!(json["architecture"], "llama", "the summary is still there");
}

#[test]
fn cli_inspect_of_unparseable_files() {
    let path = models::write_temp("cli-trunc.gguf", &tiny_bytes()[..1000]);
    let out = edgecloud(&["model", "inspect", "--json", path_arg(&path)]);
    assert!(!out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["valid"], false);
    assert_eq!(json["path"], path_arg(&path));
    assert!(json["error"].as_str().unwrap().contains("offset"), "{json}");
    assert!(String::from_utf8(out.stderr).unwrap().contains("offset"));

    let missing = models::fresh_path("cli-missing.gguf");
    let out = edgecloud(&["model", "inspect", path_arg(&missing)]);
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("no such file"), "{stderr}");
    assert!(out.stdout.is_empty());
}
