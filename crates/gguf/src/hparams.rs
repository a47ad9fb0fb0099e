//! Hyperparameter consistency: values llama.cpp accepts at parse time and
//! then asserts on (aborting the whole process) at load, at context
//! creation, or at the first compute. Each check names the llama.cpp
//! behaviour it stands in for (llama.cpp b11434: `llama-model.cpp`
//! `load_hparams`, `models/llama.cpp`, `llama-context.cpp`, ggml's
//! `rms_norm` and `mul_mat`).
//!
//! Conservative by design: a check fires only on values llama.cpp cannot
//! survive, never on values that are merely unusual, so good files are not
//! refused. Values that llama.cpp rejects with a clean error (an array of
//! the wrong length, a missing required key) are left to the other checks
//! or to llama.cpp itself.
//!
//! This module only reads the parsed header; it never calls llama.cpp.

use super::error::shorten;
use super::reader::{Header, Kv, Value};
use super::GgufError;

/// llama.cpp's `LLAMA_MAX_LAYERS` (`llama-hparams.h`).
const MAX_LAYERS: u64 = 512;

/// llama.cpp's `LLAMA_MAX_EXPERTS` (`llama-hparams.h`).
const MAX_EXPERTS: u64 = 1024;

/// The rope scaling names `llama_rope_scaling_type_from_string` knows; any
/// other value is `GGML_ASSERT(rope_scaling_type_train != UNSPECIFIED)`.
const ROPE_SCALING_TYPES: &[&str] = &["none", "linear", "yarn", "longrope"];

/// The norm epsilons llama.cpp reads; `ggml_norm`/`ggml_rms_norm`/
/// `ggml_group_norm` assert `eps >= 0` when the graph first runs.
const NORM_EPSILON_KEYS: &[&str] = &[
    "attention.layer_norm_rms_epsilon",
    "attention.layer_norm_epsilon",
    "attention.group_norm_epsilon",
];

/// Checks the hyperparameters of architecture `arch` (every architecture,
/// plus what the llama graph needs when `arch` is `llama`).
pub(super) fn check_hyperparameters(h: &Header, arch: &str, problems: &mut Vec<GgufError>) {
    let key = |suffix: &str| format!("{arch}.{suffix}");
    let uint = |suffix: &str| h.get(&key(suffix)).and_then(|kv| kv.value.as_i64());

    // llama.cpp sizes batches by min(n_ctx, n_batch); a training context of
    // 0 becomes a context of 0 and the first decode asserts.
    if uint("context_length") == Some(0) {
        problems.push(GgufError::ZeroContextLength {
            key: key("context_length"),
        });
    }

    let n_layer = uint("block_count").and_then(|n| u64::try_from(n).ok());
    if let Some(n) = n_layer.filter(|n| *n == 0 || *n > MAX_LAYERS) {
        problems.push(GgufError::BadLayerCount {
            key: key("block_count"),
            count: n,
            reason: format!("llama.cpp asserts 0 < block_count <= {MAX_LAYERS} at load"),
        });
    }
    if let (Some(n_layer), Some(nextn)) = (n_layer, uint("nextn_predict_layers")) {
        if nextn > 0 && nextn as u64 > n_layer {
            problems.push(GgufError::BadLayerCount {
                key: key("nextn_predict_layers"),
                count: nextn as u64,
                reason: format!(
                    "more than the {n_layer} layers of {} (llama.cpp asserts at load)",
                    key("block_count")
                ),
            });
        }
    }
    let n_layer = n_layer.filter(|n| (1..=MAX_LAYERS).contains(n));

    check_experts(h, arch, n_layer, problems);
    check_heads(h, arch, n_layer, problems);
    check_rope_scaling(h, arch, problems);

    for suffix in NORM_EPSILON_KEYS {
        let Some(kv) = h.get(&key(suffix)) else {
            continue;
        };
        if let Value::Float(eps) = kv.value {
            if !eps.is_finite() || eps < 0.0 {
                problems.push(GgufError::BadNormEpsilon {
                    key: kv.key.clone(),
                    value: eps,
                });
            }
        }
    }
}

/// `load_hparams`'s expert asserts: at most `MAX_EXPERTS`, no more used
/// than exist, none used without experts, and expert groups that split
/// the experts evenly.
fn check_experts(h: &Header, arch: &str, n_layer: Option<u64>, problems: &mut Vec<GgufError>) {
    let get = |suffix: &str| -> u64 {
        h.get(&format!("{arch}.{suffix}"))
            .and_then(|kv| kv.value.as_i64())
            .and_then(|v| u64::try_from(v).ok())
            .unwrap_or(0)
    };
    let n_expert = get("expert_count");
    // Per layer or one value for all: llama.cpp validates the maximum.
    let used_max = h
        .get(&format!("{arch}.expert_used_count"))
        .map(|kv| {
            per_layer(kv, n_layer.unwrap_or(1))
                .into_iter()
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    let groups = get("expert_group_count");
    let group_used = get("expert_group_used_count");
    let reason = if n_expert > MAX_EXPERTS {
        Some(format!(
            "{arch}.expert_count is {n_expert}, more than llama.cpp's {MAX_EXPERTS}"
        ))
    } else if used_max > n_expert {
        Some(format!(
            "{arch}.expert_used_count is {used_max} but {arch}.expert_count is {n_expert}"
        ))
    } else if n_expert == 0 && groups != 0 {
        Some(format!(
            "{arch}.expert_group_count is {groups} without experts"
        ))
    } else if n_expert > 0 && used_max == 0 {
        // llama.cpp refuses this with a clean error; no need to duplicate.
        None
    } else if n_expert > 0 && groups >= n_expert {
        Some(format!(
            "{arch}.expert_group_count {groups} is not less than {arch}.expert_count {n_expert}"
        ))
    } else if n_expert > 0 && groups > 1 && n_expert % groups != 0 {
        Some(format!(
            "{arch}.expert_count {n_expert} is not a multiple of {arch}.expert_group_count {groups}"
        ))
    } else if n_expert > 0 && groups > 1 && (group_used == 0 || group_used >= groups) {
        Some(format!(
            "{arch}.expert_group_used_count is {group_used}, expected 1 to {} for {groups} groups",
            groups - 1
        ))
    } else {
        None
    };
    if let Some(reason) = reason {
        problems.push(GgufError::InconsistentExperts { reason });
    }
}

/// KV heads must divide the heads (ggml's grouped mul_mat broadcasts KV
/// heads over query heads and asserts `ggml_can_mul_mat` otherwise). For
/// llama every layer needs heads and KV heads; hybrid architectures use 0
/// KV heads on their recurrent layers, so elsewhere only layers with both
/// counts are checked. For llama the key and value head sizes must match.
fn check_heads(h: &Header, arch: &str, n_layer: Option<u64>, problems: &mut Vec<GgufError>) {
    let Some(n_layer) = n_layer else { return };
    let Some(heads_kv) = h.get(&format!("{arch}.attention.head_count")) else {
        return;
    };
    let heads = per_layer(heads_kv, n_layer);
    // llama.cpp: "n_head_kv is optional, default to n_head".
    let kv_heads = h
        .get(&format!("{arch}.attention.head_count_kv"))
        .map_or_else(|| heads.clone(), |kv| per_layer(kv, n_layer));
    let per_layer_values = matches!(heads_kv.value, Value::Array(_))
        || matches!(
            h.get(&format!("{arch}.attention.head_count_kv"))
                .map(|kv| &kv.value),
            Some(Value::Array(_))
        );
    let llama = arch == "llama";
    for (i, (&n_head, &n_kv)) in heads.iter().zip(&kv_heads).enumerate() {
        let reason = if llama && n_head == 0 {
            Some("a llama model needs at least one attention head in every layer")
        } else if llama && n_kv == 0 {
            Some("a llama model needs at least one KV head in every layer")
        } else if n_head > 0 && n_kv > 0 && n_head % n_kv != 0 {
            Some("the KV heads must divide the heads evenly (grouped-query attention)")
        } else {
            None
        };
        if let Some(reason) = reason {
            problems.push(GgufError::HeadCountMismatch {
                heads: n_head,
                kv_heads: n_kv,
                layer_note: if per_layer_values {
                    format!("layer {i}: ")
                } else {
                    String::new()
                },
                reason: reason.into(),
            });
            break; // one message per file is enough
        }
    }

    if llama {
        let n_embd = h
            .get("llama.embedding_length")
            .and_then(|kv| kv.value.as_i64());
        let n_head = heads.first().copied().filter(|n| *n > 0);
        let default_head = match (n_embd, n_head) {
            (Some(e), Some(n)) if e >= 0 => Some(e as u64 / n),
            _ => None,
        };
        let len = |suffix: &str| {
            h.get(&format!("llama.attention.{suffix}"))
                .and_then(|kv| kv.value.as_i64())
                .and_then(|v| u64::try_from(v).ok())
                .or(default_head)
        };
        if let (Some(k), Some(v)) = (len("key_length"), len("value_length")) {
            if k != v {
                problems.push(GgufError::HeadSizeMismatch {
                    architecture: arch.into(),
                    key_length: k,
                    value_length: v,
                });
            }
        }
    }
}

/// `<arch>.rope.scaling.type`, when present, must be a name llama.cpp knows.
fn check_rope_scaling(h: &Header, arch: &str, problems: &mut Vec<GgufError>) {
    let Some(kv) = h.get(&format!("{arch}.rope.scaling.type")) else {
        return;
    };
    match kv.value.as_str() {
        Some(name) if ROPE_SCALING_TYPES.contains(&name) => {}
        Some(name) => problems.push(GgufError::UnknownRopeScaling {
            key: kv.key.clone(),
            value: shorten(name),
        }),
        None => problems.push(GgufError::WrongValueType {
            key: kv.key.clone(),
            expected: "string",
            found: kv.value.type_name(kv.tag),
        }),
    }
}

/// A per-layer value as llama.cpp's `get_key_or_arr` reads it: one integer
/// for every layer, or an array with one per layer (shorter arrays are a
/// clean llama.cpp error, so they are read as far as they go).
fn per_layer(kv: &Kv, n_layer: u64) -> Vec<u64> {
    let n = n_layer.min(MAX_LAYERS) as usize;
    match &kv.value {
        Value::Array(a) => a
            .ints()
            .take(n)
            .map(|v| u64::try_from(v).unwrap_or(0))
            .collect(),
        other => match other.as_i64().and_then(|v| u64::try_from(v).ok()) {
            Some(v) => vec![v; n],
            None => Vec::new(),
        },
    }
}
