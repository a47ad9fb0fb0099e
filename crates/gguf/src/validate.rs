//! Semantic checks on a parsed GGUF header and the summary ([`ModelInfo`])
//! shown to users: the problems that make llama.cpp fail or abort.
//!
//! Two entry points:
//! - [`inspect`] returns `Err` only when the file cannot be parsed at all
//!   (missing, not GGUF, truncated tables, hostile counts...). When the
//!   tables parse, it returns the summary plus every semantic problem found.
//! - [`validate`] is `inspect` that turns the first problem into an `Err`:
//!   `Ok` means llama.cpp should be able to load the file.
//!
//! What is checked, in order: tensor data inside the file and packed the way
//! llama.cpp requires; `general.architecture` and the hyperparameters every
//! architecture needs; the values llama.cpp parses and then aborts on
//! (`hparams`: context length 0, layer counts, expert counts, KV heads
//! that do not divide the heads, unknown rope scaling, non-finite or
//! negative norm epsilons, key/value head sizes); for `llama` also the
//! tensor types each tensor's role can compute with (`tensor_roles`) and
//! every tensor it asks for, with the shapes the hyperparameters imply; the
//! tokenizer (a model name llama.cpp knows and initialises, merges for BPE,
//! tokens vs scores vs token types, no duplicate tokens, special-token ids
//! in range).
//!
//! A validator cannot know every assert of every llama.cpp release: the
//! local lane also probes a model in a child process before it serves
//! (`local::probe`), which catches what this module does not.
//!
//! Deliberately not checked (llama.cpp fails cleanly on them, and the lists
//! change with every llama.cpp release, so checking would risk refusing
//! good files): pre-tokenizer names, and tensors of architectures other
//! than llama. Stricter than llama.cpp on purpose: strings must be UTF-8 (as
//! the GGUF spec says; llama.cpp does not check), tokenizer arrays must have
//! exactly one entry per token, and special-token ids must be in range
//! (llama.cpp only warns).
//!
//! Neither entry point reads tensor data; checking a 145 MB model costs
//! milliseconds.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::shorten;
use super::format::{file_type_name, pad_to, ValueType};
use super::reader::{read_header, Header, Kv, Value};
use super::GgufError;

/// A summary of a GGUF model file.
///
/// Fields that come from optional metadata are `None` when the key is
/// absent. Serialises to JSON with these field names.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ModelInfo {
    /// The file inspected.
    #[serde(serialize_with = "serialize_path")]
    pub path: PathBuf,
    /// Its size in bytes.
    pub file_size: u64,
    /// GGUF format version (2 or 3).
    pub gguf_version: u32,
    /// `general.architecture` ("llama", "qwen2", ...).
    pub architecture: Option<String>,
    /// `general.name`.
    pub name: Option<String>,
    /// Number of weights, summed over all tensor shapes.
    pub parameters: u64,
    /// `<arch>.context_length`: the context the model was trained for.
    pub context_length: Option<u64>,
    /// `<arch>.embedding_length`.
    pub embedding_length: Option<u64>,
    /// `<arch>.block_count` (layers).
    pub layers: Option<u64>,
    /// `<arch>.attention.head_count` (the largest, if given per layer).
    pub heads: Option<u64>,
    /// `<arch>.attention.head_count_kv` (the largest, if given per layer).
    pub kv_heads: Option<u64>,
    /// Quantisation label: the name of `general.file_type` ("Q8_0",
    /// "Q4_K_M", ...) or, without it, the dominant tensor type.
    pub quantization: String,
    /// The ggml type holding the most weights among matrices ("Q8_0", "F32").
    pub dominant_tensor_type: Option<String>,
    /// Number of tensors per ggml type.
    pub tensor_types: BTreeMap<String, u64>,
    /// `tokenizer.ggml.model` ("gpt2", "llama", ...).
    pub tokenizer: Option<String>,
    /// Number of tokens in `tokenizer.ggml.tokens`.
    pub vocab_size: Option<u64>,
    /// Whether `tokenizer.chat_template` is present.
    pub chat_template: bool,
    /// The template family llama.cpp's matcher would pick ("chatml",
    /// "llama3", ...), or "unknown" (llama.cpp cannot apply those).
    pub chat_template_family: Option<String>,
    /// The text of `tokenizer.chat_template` (what Ollama's `/api/show`
    /// reports as `template`); not in the JSON summary, which says only
    /// whether there is one.
    #[serde(skip)]
    pub chat_template_text: Option<String>,
    /// Number of tensors.
    pub tensor_count: u64,
    /// Number of metadata entries.
    pub metadata_count: u64,
    /// Data alignment in bytes.
    pub alignment: u64,
    /// Absolute offset where tensor data starts.
    pub data_offset: u64,
}

fn serialize_path<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path.to_string_lossy())
}

/// What [`inspect`] found: the summary and every semantic problem.
#[derive(Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// The summary, built even when there are problems.
    pub info: ModelInfo,
    /// Problems that would make llama.cpp fail (or abort); empty when valid.
    pub problems: Vec<GgufError>,
}

impl Inspection {
    /// True when no problem was found.
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }

    /// The summary if valid, else the first problem.
    pub fn into_result(self) -> Result<ModelInfo, GgufError> {
        match self.problems.into_iter().next() {
            None => Ok(self.info),
            Some(problem) => Err(problem),
        }
    }
}

/// Parses `path` and reports its summary and all semantic problems.
///
/// `Err` means the file could not be parsed at all (see the module docs);
/// it never reads tensor data.
pub fn inspect(path: &Path) -> Result<Inspection, GgufError> {
    Ok(inspect_header(path, &read_header(path)?))
}

fn inspect_header(path: &Path, header: &Header) -> Inspection {
    let mut problems = Vec::new();
    if let Some(p) = check_tensor_data(header) {
        problems.push(p);
    }
    check_architecture(header, &mut problems);
    check_tokenizer(header, &mut problems);
    let info = summarize(path, header);
    tracing::debug!(path = %path.display(), problems = problems.len(), "inspected GGUF file");
    Inspection { info, problems }
}

/// Checks `path` the way llama.cpp will load it, without reading tensor
/// data: `Ok` with the summary when valid, else the first problem found.
pub fn validate(path: &Path) -> Result<ModelInfo, GgufError> {
    inspect(path)?.into_result()
}

/// llama.cpp requires tensors packed in table order, each starting where the
/// previous one ended (padded to the alignment), and all inside the file.
/// Only the first problem is reported: later ones are usually its echo.
fn check_tensor_data(h: &Header) -> Option<GgufError> {
    let mut expected = 0u64;
    for (i, t) in h.tensors.iter().enumerate() {
        if t.offset % h.alignment != 0 {
            return Some(GgufError::TensorMisaligned {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment: h.alignment,
            });
        }
        let start = h.data_offset.saturating_add(t.offset);
        let end = start.saturating_add(t.nbytes);
        if end > h.file_size {
            return Some(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                start,
                end,
                file_size: h.file_size,
            });
        }
        if t.offset < expected {
            // The tensor it lands in: the last earlier one starting at or
            // before this offset.
            let other = h.tensors[..i]
                .iter()
                .filter(|o| o.offset <= t.offset)
                .max_by_key(|o| o.offset)
                .unwrap_or(&h.tensors[i - 1]);
            return Some(GgufError::TensorOverlap {
                tensor: t.name.clone(),
                other: other.name.clone(),
            });
        }
        if t.offset > expected {
            return Some(GgufError::TensorLayout {
                tensor: t.name.clone(),
                found: t.offset,
                expected,
            });
        }
        // Cannot overflow: offset + nbytes lies inside the file.
        expected = pad_to(t.offset + t.nbytes, h.alignment).unwrap_or(u64::MAX);
    }
    None
}

/// The architecture key, the hyperparameters every architecture needs,
/// and, for llama, its own key and tensors.
fn check_architecture(h: &Header, problems: &mut Vec<GgufError>) {
    let arch = match h.get("general.architecture") {
        None => {
            problems.push(GgufError::MissingKey {
                key: "general.architecture".into(),
            });
            return;
        }
        Some(kv) => match kv.value.as_str() {
            Some(arch) => arch,
            None => {
                problems.push(wrong_type(kv, "string"));
                return;
            }
        },
    };
    // llama.cpp's `load_hparams` requires these for every architecture.
    let mut required = |suffix: &str, float: bool| {
        let key = format!("{arch}.{suffix}");
        match h.get(&key) {
            None => problems.push(GgufError::MissingKey { key }),
            Some(kv) if float && !matches!(kv.value, Value::Float(_)) => {
                problems.push(wrong_type(kv, "f32"))
            }
            Some(kv) if !float && kv.value.as_i64().is_none() => {
                problems.push(wrong_type(kv, "u32"))
            }
            Some(_) => {}
        }
    };
    required("context_length", false);
    required("embedding_length", false);
    required("block_count", false);
    if arch == "llama" {
        required("attention.layer_norm_rms_epsilon", true);
        // Optional in the format, but without them llama.cpp computes
        // zero-sized attention and feed-forward shapes and refuses the file.
        required("attention.head_count", false);
        required("feed_forward_length", false);
    }
    // Values llama.cpp parses and then aborts on: before the tensor checks,
    // whose shapes follow from them.
    super::hparams::check_hyperparameters(h, arch, problems);
    if arch == "llama" {
        super::tensor_roles::check_llama_tensor_types(h, problems);
        check_llama_tensors(h, problems);
    }
}

/// The tensors llama.cpp's llama loader asks for (`models/llama.cpp`), with
/// the shapes it expects. Conservative: shapes are only compared where the
/// hyperparameters determine them, and optional tensors are not required.
fn check_llama_tensors(h: &Header, problems: &mut Vec<GgufError>) {
    let int = |key: &str| {
        h.get(key)
            .and_then(|kv| kv.value.as_i64())
            .filter(|v| *v >= 0)
            .map(|v| v as u64)
    };
    let (Some(n_embd), Some(n_layer)) = (int("llama.embedding_length"), int("llama.block_count"))
    else {
        return; // already reported as missing keys
    };
    // llama.cpp sizes the embedding by the token list; llama.vocab_size
    // only counts for vocabulary-less models.
    let n_vocab = h
        .get("tokenizer.ggml.tokens")
        .and_then(|kv| kv.value.as_array())
        .map(|a| a.len)
        .or_else(|| int("llama.vocab_size"));
    let n_head = int("llama.attention.head_count").filter(|n| *n > 0);
    let n_head_kv = int("llama.attention.head_count_kv").or(n_head);
    let n_ff = int("llama.feed_forward_length");
    let head_k = int("llama.attention.key_length").or(n_head.map(|n| n_embd / n));
    let head_v = int("llama.attention.value_length").or(n_head.map(|n| n_embd / n));
    let experts = int("llama.expert_count").unwrap_or(0);
    let mul = |a: Option<u64>, b: Option<u64>| a?.checked_mul(b?);
    let n_q = mul(head_k, n_head);

    // llama.cpp: for llama, the rotary dimension must be the key head size.
    if let (Some(kv), Some(head_k)) = (h.get("llama.rope.dimension_count"), head_k) {
        if kv.value.as_i64() != Some(head_k as i64) {
            problems.push(GgufError::BadHyperparameter {
                key: kv.key.clone(),
                reason: format!(
                    "is {}, llama.cpp requires the attention head size {head_k}",
                    kv.value
                        .as_i64()
                        .map_or_else(|| "not an integer".to_string(), |v| v.to_string())
                ),
            });
        }
    }

    let tensors: HashMap<&str, &[u64]> = h
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.dims.as_slice()))
        .collect();
    let mut found = Vec::new();
    let expect = |found: &mut Vec<GgufError>, name: &str, expected: &[Option<u64>]| {
        let Some(dims) = tensors.get(name) else {
            found.push(llama_mismatch(name, "missing".into()));
            return;
        };
        // Unchecked (`None`) dims match anything; trailing 1s are ignored,
        // as llama.cpp does.
        let dim = |i: usize| dims.get(i).copied().unwrap_or(1);
        let rank_ok = dims.iter().skip(expected.len()).all(|d| *d == 1);
        let dims_ok = expected
            .iter()
            .enumerate()
            .all(|(i, e)| e.is_none_or(|e| e == dim(i)));
        if !(rank_ok && dims_ok) {
            let want: Vec<String> = expected
                .iter()
                .map(|e| e.map_or_else(|| "*".to_string(), |e| e.to_string()))
                .collect();
            found.push(llama_mismatch(
                name,
                format!("shape {dims:?}, expected [{}]", want.join(", ")),
            ));
        }
    };

    let e = Some(n_embd);
    let f = &mut found;
    expect(f, "token_embd.weight", &[e, n_vocab]);
    expect(f, "output_norm.weight", &[e]);
    for i in 0..n_layer {
        let name = |t: &str| format!("blk.{i}.{t}.weight");
        expect(f, &name("attn_norm"), &[e]);
        if tensors.contains_key(name("attn_qkv").as_str()) {
            expect(f, &name("attn_qkv"), &[e, None]);
        } else {
            expect(f, &name("attn_q"), &[e, n_q]);
            expect(f, &name("attn_k"), &[e, mul(head_k, n_head_kv)]);
            expect(f, &name("attn_v"), &[e, mul(head_v, n_head_kv)]);
        }
        expect(f, &name("attn_output"), &[n_q, e]);
        expect(f, &name("ffn_norm"), &[e]);
        if experts == 0 {
            expect(f, &name("ffn_gate"), &[e, n_ff]);
            expect(f, &name("ffn_up"), &[e, n_ff]);
            expect(f, &name("ffn_down"), &[n_ff, e]);
        }
        if f.len() > 16 {
            break; // a broken file need not list every layer
        }
    }
    // llama.cpp refuses files with tensors it did not ask for; the clearest
    // case is a layer past block_count.
    for t in &h.tensors {
        let layer = t
            .name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(layer) = layer.filter(|l| *l >= n_layer) {
            found.push(llama_mismatch(
                &t.name,
                format!("layer {layer}, but llama.block_count is {n_layer}"),
            ));
        }
    }
    problems.append(&mut found);
}

fn llama_mismatch(tensor: &str, reason: String) -> GgufError {
    GgufError::TensorMismatch {
        tensor: tensor.to_string(),
        architecture: "llama".into(),
        reason,
    }
}

/// Tokenizer models llama.cpp 0.26 knows (`llama_vocab::impl::load`).
const KNOWN_TOKENIZERS: &[&str] = &[
    "no_vocab",
    "none",
    "llama",
    "bert",
    "gpt2",
    "hybriddna",
    "whitespace",
    "t5",
    "rwkv",
    "test",
    "plamo2",
    "gemma4",
];

/// BPE tokenizers, which need `tokenizer.ggml.merges`.
const BPE_TOKENIZERS: &[&str] = &["gpt2", "hybriddna", "whitespace", "gemma4"];

/// Keys holding one special-token id each (llama.cpp reads them all).
const SPECIAL_TOKEN_KEYS: &[&str] = &[
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.cls_token_id",
    "tokenizer.ggml.mask_token_id",
    "tokenizer.ggml.fim_pre_token_id",
    "tokenizer.ggml.fim_suf_token_id",
    "tokenizer.ggml.fim_mid_token_id",
    "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id",
    "tokenizer.ggml.fim_sep_token_id",
    "tokenizer.ggml.prefix_token_id",
    "tokenizer.ggml.suffix_token_id",
    "tokenizer.ggml.middle_token_id",
];

fn check_tokenizer(h: &Header, problems: &mut Vec<GgufError>) {
    let model = match h.get("tokenizer.ggml.model") {
        None => {
            problems.push(GgufError::MissingKey {
                key: "tokenizer.ggml.model".into(),
            });
            return;
        }
        Some(kv) => match kv.value.as_str() {
            Some(m) => m,
            None => {
                problems.push(wrong_type(kv, "string"));
                return;
            }
        },
    };
    if !KNOWN_TOKENIZERS.contains(&model) {
        problems.push(GgufError::UnknownTokenizer {
            model: shorten(model),
        });
        return;
    }
    // llama.cpp loads these without a tokenizer, then asserts on the first
    // tokenization; a chat lane always tokenizes.
    if model == "no_vocab" || model == "none" {
        problems.push(GgufError::NoVocabulary {
            model: model.into(),
        });
        return;
    }
    let tokens = match h.get("tokenizer.ggml.tokens") {
        None => {
            problems.push(GgufError::MissingKey {
                key: "tokenizer.ggml.tokens".into(),
            });
            return;
        }
        Some(kv) => match kv.value.as_array().filter(|a| a.elem == ValueType::String) {
            Some(a) => a,
            None => {
                problems.push(wrong_type(kv, "array of string"));
                return;
            }
        },
    };
    let n = tokens.len;
    if n == 0 {
        problems.push(GgufError::BadTokenizer {
            reason: "tokenizer.ggml.tokens is empty".into(),
        });
        return;
    }

    let lengths: [(&str, &[ValueType], &str); 2] = [
        (
            "tokenizer.ggml.scores",
            &[ValueType::F32, ValueType::I32],
            "array of f32",
        ),
        (
            "tokenizer.ggml.token_type",
            &[ValueType::I32],
            "array of i32",
        ),
    ];
    for (key, elems, expected) in lengths {
        let Some(kv) = h.get(key) else { continue };
        match kv.value.as_array().filter(|a| elems.contains(&a.elem)) {
            None => problems.push(wrong_type(kv, expected)),
            Some(a) if a.len != n => problems.push(GgufError::TokenizerLengthMismatch {
                key: key.into(),
                len: a.len,
                tokens: n,
            }),
            Some(_) => {}
        }
    }

    if BPE_TOKENIZERS.contains(&model) {
        let kimi = h.get("tokenizer.ggml.pre").and_then(|kv| kv.value.as_str()) == Some("kimi-k2");
        match h.get("tokenizer.ggml.merges") {
            None if !kimi => problems.push(GgufError::BadTokenizer {
                reason: format!("'{model}' tokenizer without tokenizer.ggml.merges"),
            }),
            Some(kv) if kv.value.as_array().map(|a| a.elem) != Some(ValueType::String) => {
                problems.push(wrong_type(kv, "array of string"))
            }
            _ => {}
        }
    }

    // llama.cpp renames empty tokens "[EMPTY_<id>]" before building its
    // text -> id map, then asserts the map has one entry per token.
    let mut seen: HashMap<std::borrow::Cow<'_, str>, u64> = HashMap::with_capacity(n as usize);
    for (id, text) in tokens.strings().enumerate() {
        let id = id as u64;
        let text = if text.is_empty() {
            std::borrow::Cow::Owned(format!("[EMPTY_{id}]"))
        } else {
            std::borrow::Cow::Borrowed(text)
        };
        if let Some(&first) = seen.get(&text) {
            problems.push(GgufError::DuplicateToken {
                token: shorten(&text),
                first,
                second: id,
            });
            break;
        }
        seen.insert(text, id);
    }

    for key in SPECIAL_TOKEN_KEYS {
        let Some(kv) = h.get(key) else { continue };
        match kv.value.as_i64() {
            None => problems.push(wrong_type(kv, "u32")),
            Some(id) if id < 0 || id as u64 >= n => problems.push(GgufError::TokenIdOutOfRange {
                key: (*key).into(),
                id,
                vocab_size: n,
            }),
            Some(_) => {}
        }
    }
}

fn wrong_type(kv: &Kv, expected: &'static str) -> GgufError {
    GgufError::WrongValueType {
        key: kv.key.clone(),
        expected,
        found: kv.value.type_name(kv.tag),
    }
}

fn summarize(path: &Path, h: &Header) -> ModelInfo {
    let str_of = |key: &str| {
        h.get(key)
            .and_then(|kv| kv.value.as_str())
            .map(str::to_string)
    };
    let architecture = str_of("general.architecture");
    let arch_u64 = |suffix: &str| -> Option<u64> {
        let kv = h.get(&format!("{}.{suffix}", architecture.as_deref()?))?;
        max_u64(&kv.value)
    };

    let mut tensor_types = BTreeMap::new();
    let mut weights_by_type: BTreeMap<&str, u64> = BTreeMap::new();
    for t in &h.tensors {
        *tensor_types.entry(t.ty.name.to_string()).or_insert(0) += 1;
        if t.dims.len() >= 2 {
            *weights_by_type.entry(t.ty.name).or_insert(0) += t.elements;
        }
    }
    let dominant_tensor_type = weights_by_type
        .iter()
        .max_by_key(|(name, n)| (**n, std::cmp::Reverse(**name)))
        .map(|(name, _)| name.to_string());
    let file_type = h
        .get("general.file_type")
        .and_then(|kv| kv.value.as_i64())
        .map(|ft| {
            u32::try_from(ft)
                .ok()
                .and_then(file_type_name)
                .map_or_else(|| format!("unknown file type {ft}"), str::to_string)
        });
    let quantization = file_type
        .or_else(|| dominant_tensor_type.clone())
        .unwrap_or_else(|| "none".into());

    let template = str_of("tokenizer.chat_template");
    ModelInfo {
        path: path.to_path_buf(),
        file_size: h.file_size,
        gguf_version: h.version,
        name: str_of("general.name"),
        parameters: h.tensors.iter().map(|t| t.elements).sum(),
        context_length: arch_u64("context_length"),
        embedding_length: arch_u64("embedding_length"),
        layers: arch_u64("block_count"),
        heads: arch_u64("attention.head_count"),
        kv_heads: arch_u64("attention.head_count_kv"),
        architecture,
        quantization,
        dominant_tensor_type,
        tensor_types,
        tokenizer: str_of("tokenizer.ggml.model"),
        vocab_size: h
            .get("tokenizer.ggml.tokens")
            .and_then(|kv| kv.value.as_array())
            .map(|a| a.len),
        chat_template: template.is_some(),
        chat_template_family: template.as_deref().map(|t| template_family(t).to_string()),
        chat_template_text: template,
        tensor_count: h.tensors.len() as u64,
        metadata_count: h.metadata.len() as u64,
        alignment: h.alignment,
        data_offset: h.data_offset,
    }
}

/// An integer value, or the largest of an integer array (per-layer values).
fn max_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Array(a) => a.ints().filter_map(|i| u64::try_from(i).ok()).max(),
        other => other.as_i64().and_then(|i| u64::try_from(i).ok()),
    }
}

/// Mirrors the order of llama.cpp's `llm_chat_detect_template` for the
/// common families; anything else is "unknown".
fn template_family(t: &str) -> &'static str {
    let has = |s: &str| t.contains(s);
    if has("<|im_start|>") {
        if has("<|im_sep|>") {
            "phi4"
        } else if has("<end_of_utterance>") {
            "smolvlm"
        } else {
            "chatml"
        }
    } else if t.starts_with("mistral") || has("[INST]") {
        "mistral"
    } else if has("<|start_header_id|>") && has("<|end_header_id|>") {
        "llama3"
    } else if has("<start_of_turn>") {
        "gemma"
    } else if has("<|assistant|>") && has("<|end|>") {
        "phi3"
    } else {
        "unknown"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{write_model, Preset};

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("edgecloud-validate-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn generated_tiny_model_reads_back() {
        let dir = TempDir::new("tiny");
        let path = dir.0.join("tiny.gguf");
        write_model(&path, Preset::Tiny, 9).unwrap();
        let info = validate(&path).unwrap();
        assert_eq!(info.path, path);
        assert_eq!(info.file_size, std::fs::metadata(&path).unwrap().len());
        assert_eq!(info.gguf_version, 3);
        assert_eq!(info.architecture.as_deref(), Some("llama"));
        assert_eq!(
            info.name.as_deref(),
            Some("edgecloud tiny (random weights)")
        );
        assert_eq!(info.parameters, 106_816, "same count llama.cpp reports");
        assert_eq!(info.context_length, Some(2048));
        assert_eq!(info.embedding_length, Some(64));
        assert_eq!(info.layers, Some(2));
        assert_eq!(info.heads, Some(4));
        assert_eq!(info.kv_heads, Some(2));
        assert_eq!(info.quantization, "F32");
        assert_eq!(info.dominant_tensor_type.as_deref(), Some("F32"));
        assert_eq!(info.tensor_types.get("F32"), Some(&20));
        assert_eq!(info.tokenizer.as_deref(), Some("gpt2"));
        assert_eq!(info.vocab_size, Some(512));
        assert!(info.chat_template);
        assert_eq!(info.chat_template_family.as_deref(), Some("chatml"));
        assert_eq!(info.tensor_count, 20);
        assert_eq!(info.alignment, 32);
        assert_eq!(info.data_offset % 32, 0);
        let inspection = inspect(&path).unwrap();
        assert!(inspection.is_valid());
        assert_eq!(inspection.info, info);
    }

    #[test]
    fn model_info_serializes_to_json() {
        let dir = TempDir::new("json");
        let path = dir.0.join("tiny.gguf");
        write_model(&path, Preset::Tiny, 1).unwrap();
        let json = serde_json::to_value(validate(&path).unwrap()).unwrap();
        assert_eq!(json["architecture"], "llama");
        assert_eq!(json["parameters"], 106_816);
        assert_eq!(json["path"], path.to_string_lossy().as_ref());
        assert_eq!(json["tensor_types"]["F32"], 20);
    }

    /// Every prefix of the tables and many random byte edits, in memory:
    /// an error or a summary every time, never a panic or a huge allocation.
    #[test]
    fn every_prefix_and_random_corruption_is_handled() {
        let mut bytes = Vec::new();
        crate::generate::write_model_to(&mut bytes, Preset::Tiny, 5).unwrap();
        let check = |b: &[u8]| {
            crate::reader::read_header_from_bytes(b)
                .map(|h| inspect_header(Path::new("<memory>"), &h))
        };
        let tables_end = check(&bytes).unwrap().info.data_offset as usize;
        for cut in 0..bytes.len().min(tables_end + 256) {
            assert!(
                check(&bytes[..cut]).map_or(true, |i| !i.is_valid()),
                "prefix of {cut} bytes was accepted"
            );
        }
        let mut rng = 0x5EEDu64;
        let mut next = move || {
            // xorshift64: any fixed sequence will do.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let (mut rejected, mut parse_errors) = (0, 0);
        let mut mutant = bytes.clone();
        for _ in 0..20_000 {
            mutant[..tables_end].copy_from_slice(&bytes[..tables_end]);
            for _ in 0..1 + next() % 4 {
                // Bias half the edits towards the header and small tables,
                // where the counts and type tags are.
                let span = if next() % 2 == 0 { 512 } else { tables_end };
                let at = (next() % span as u64) as usize;
                mutant[at] = next() as u8;
            }
            match check(&mutant) {
                Err(_) => parse_errors += 1,
                Ok(i) if !i.is_valid() => rejected += 1,
                Ok(_) => {}
            }
        }
        assert!(parse_errors > 1000, "only {parse_errors} parse errors");
        assert!(rejected > 100, "only {rejected} semantic rejections");
    }

    #[test]
    fn template_families_follow_llama_cpp_order() {
        assert_eq!(template_family("<|im_start|>{{x}}"), "chatml");
        assert_eq!(template_family("<|im_start|><|im_sep|>"), "phi4");
        assert_eq!(template_family("[INST] {{x}} [/INST]"), "mistral");
        assert_eq!(
            template_family("<|start_header_id|>x<|end_header_id|>"),
            "llama3"
        );
        assert_eq!(template_family("{{ custom }}"), "unknown");
    }
}
