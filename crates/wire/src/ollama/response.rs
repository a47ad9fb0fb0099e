//! What Ollama's native API answers look like: the chat and generate
//! objects (one per NDJSON line while streaming, the last one `done`
//! with its timings in nanoseconds: [`Timings`]), tool calls as Ollama
//! writes them (arguments an object), the model listings (`/api/tags`,
//! `/api/ps`: [`ModelListing`]), `/api/show`'s object, the embeddings
//! answers, the error body, and RFC 3339 times. It must not do I/O or
//! know HTTP.

use crate::openai::to_json;
use edgecloud_core::tools::ToolCall;
use serde_json::{json, Map, Value};
use std::time::{Duration, SystemTime};

/// A final object's timings, in nanoseconds as Ollama sends them, and
/// the token counts beside them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Timings {
    pub total_duration: u64,
    pub load_duration: u64,
    /// The whole prompt's tokens, cached ones included (Ollama's meaning
    /// since it counts llama-server's `cache_n` in).
    pub prompt_eval_count: u64,
    /// Of them, the tokens taken from cached cells instead of decoded
    /// (Ollama's `prompt_eval_cached_count`; sent only when known, as
    /// Ollama omits it): `prompt_eval_duration` covers the others only.
    pub prompt_eval_cached_count: Option<u64>,
    pub prompt_eval_duration: u64,
    pub eval_count: u64,
    pub eval_duration: u64,
}

impl Timings {
    fn fields(&self, o: &mut Map<String, Value>) {
        for (k, v) in [
            ("total_duration", self.total_duration),
            ("load_duration", self.load_duration),
            ("prompt_eval_count", self.prompt_eval_count),
            ("prompt_eval_duration", self.prompt_eval_duration),
            ("eval_count", self.eval_count),
            ("eval_duration", self.eval_duration),
        ] {
            o.insert(k.into(), Value::from(v));
        }
        if let Some(cached) = self.prompt_eval_cached_count {
            o.insert("prompt_eval_cached_count".into(), Value::from(cached));
        }
    }
}

/// Nanoseconds of a duration in milliseconds (Ollama's unit).
pub fn nanos(ms: f64) -> u64 {
    Duration::from_secs_f64((ms / 1e3).max(0.0)).as_nanos() as u64
}

/// A time as RFC 3339 in UTC with nanoseconds (`2026-12-06T10:00:00.123456789Z`),
/// as Ollama's `created_at`, `modified_at` and `expires_at` are.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_nanos()
    )
}

/// The `expires_at` of a model that never unloads for idleness.
pub const NEVER_EXPIRES: &str = "9999-12-31T23:59:59Z";

/// Tool calls as Ollama writes them: `{"function": {"name", "arguments"}}`
/// with the arguments an object (`{}` when they are not one: a call cut
/// by `num_predict`), and the call's `id`.
pub fn tool_calls(calls: &[ToolCall]) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let arguments = match serde_json::from_str::<Value>(&c.function.arguments) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => json!({}),
                };
                json!({"function": {"arguments": arguments, "index": i, "name": c.function.name},
                    "id": c.id})
            })
            .collect(),
    )
}

/// How a finished answer ended: `done_reason` and the timings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// `stop`, `length` (or `load` for a generate request that only
    /// loads the model).
    pub reason: &'static str,
    pub timings: Timings,
}

/// One `/api/chat` object: a piece of the answer (`done` `None`), or the
/// last one (`done` its reason and timings; the whole answer when not
/// streaming).
pub fn chat(
    model: &str,
    created_at: &str,
    content: &str,
    calls: &[ToolCall],
    done: Option<&Done>,
) -> Value {
    let mut message = json!({"content": content, "role": "assistant"});
    if !calls.is_empty() {
        message["tool_calls"] = tool_calls(calls);
    }
    object(model, created_at, ("message", message), done)
}

/// One `/api/generate` object (as [`chat`], the text in `response`).
pub fn generate(model: &str, created_at: &str, response: &str, done: Option<&Done>) -> Value {
    object(
        model,
        created_at,
        ("response", Value::String(response.to_string())),
        done,
    )
}

fn object(model: &str, created_at: &str, body: (&str, Value), done: Option<&Done>) -> Value {
    let mut o = Map::new();
    o.insert("model".into(), Value::String(model.to_string()));
    o.insert("created_at".into(), Value::String(created_at.to_string()));
    o.insert(body.0.into(), body.1);
    o.insert("done".into(), Value::Bool(done.is_some()));
    if let Some(d) = done {
        o.insert("done_reason".into(), Value::String(d.reason.to_string()));
        d.timings.fields(&mut o);
    }
    Value::Object(o)
}

/// Adds a reasoning model's thinking to a chat or generate object, where
/// Ollama puts it: the chat message's `thinking`, or generate's own
/// `thinking` beside `response`.
pub fn add_thinking(object: &mut Value, thinking: &str) {
    let thinking = Value::String(thinking.to_string());
    match object.get_mut("message") {
        Some(message) => message["thinking"] = thinking,
        None => object["thinking"] = thinking,
    }
}

/// One NDJSON line.
pub fn line(v: &Value) -> String {
    let mut s = to_json(v);
    s.push('\n');
    s
}

/// The body of an error: `{"error": "..."}`.
pub fn error_body(message: &str) -> Value {
    json!({"error": message})
}

/// `/api/embed`'s answer.
pub fn embed(model: &str, vectors: &[Vec<f32>], timings: &Timings) -> Value {
    let mut o = Map::new();
    o.insert("model".into(), Value::String(model.to_string()));
    o.insert("embeddings".into(), json!(vectors));
    o.insert("total_duration".into(), Value::from(timings.total_duration));
    o.insert("load_duration".into(), Value::from(timings.load_duration));
    o.insert(
        "prompt_eval_count".into(),
        Value::from(timings.prompt_eval_count),
    );
    Value::Object(o)
}

/// `/api/embeddings`' (the older endpoint's) answer.
pub fn embedding(vector: &[f32]) -> Value {
    json!({"embedding": vector})
}

/// A model as `/api/tags`, `/api/ps` and `/api/show` describe it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelListing {
    /// The name a request puts in `model`.
    pub name: String,
    /// Bytes of its file (what `/api/ps` shows as `size`: its memory when
    /// loaded).
    pub size: u64,
    /// `sha256:...` of its file, when known.
    pub digest: Option<String>,
    pub modified_at: Option<String>,
    /// `general.architecture` (Ollama's `family`).
    pub family: Option<String>,
    pub parameters: Option<u64>,
    /// The GGUF's file type (`Q4_1`, `Q4_K_M`).
    pub quantization: Option<String>,
}

/// A parameter count as Ollama writes it: `135M`, `494.03M`, `1.5B`.
pub fn parameter_size(n: u64) -> String {
    let (v, unit) = if n >= 1_000_000_000 {
        (n as f64 / 1e9, "B")
    } else if n >= 1_000_000 {
        (n as f64 / 1e6, "M")
    } else if n >= 1_000 {
        (n as f64 / 1e3, "K")
    } else {
        return n.to_string();
    };
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{unit}")
}

impl ModelListing {
    /// `details`.
    pub fn details(&self) -> Value {
        let family = self.family.clone().unwrap_or_default();
        json!({
            "families": if family.is_empty() { Value::Null } else { json!([family]) },
            "family": family,
            "format": if self.family.is_some() { "gguf" } else { "" },
            "parameter_size": self.parameters.map(parameter_size).unwrap_or_default(),
            "parent_model": "",
            "quantization_level": self.quantization.clone().unwrap_or_default(),
        })
    }

    /// An entry of `/api/tags`.
    pub fn tag(&self) -> Value {
        json!({
            "details": self.details(),
            "digest": self.digest.clone().unwrap_or_default(),
            "model": self.name,
            "modified_at": self.modified_at.clone().unwrap_or_else(|| rfc3339(SystemTime::UNIX_EPOCH)),
            "name": self.name,
            "size": self.size,
        })
    }

    /// An entry of `/api/ps`: `size` the memory it holds, `expires_at`
    /// when it unloads.
    pub fn loaded(&self, memory: u64, expires_at: &str, context_length: Option<u64>) -> Value {
        let mut v = json!({
            "details": self.details(),
            "digest": self.digest.clone().unwrap_or_default(),
            "expires_at": expires_at,
            "model": self.name,
            "name": self.name,
            "size": memory,
            "size_vram": 0,
        });
        if let Some(n) = context_length {
            v["context_length"] = Value::from(n);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(
            rfc3339(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000000000Z"
        );
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_709_251_199, 5);
        assert_eq!(rfc3339(t), "2024-02-29T23:59:59.000000005Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(951_868_800);
        assert_eq!(rfc3339(t), "2000-03-01T00:00:00.000000000Z");
        assert_eq!(nanos(1.5), 1_500_000);
    }

    #[test]
    fn chat_objects_carry_calls_and_the_last_one_its_timings() {
        let calls = [ToolCall::new(
            "call_1",
            "get_weather",
            &json!({"city": "Oslo"}),
        )];
        let piece = chat("m", "t", "It", &[], None);
        assert_eq!(piece["done"], false);
        assert_eq!(
            piece["message"],
            json!({"role": "assistant", "content": "It"})
        );
        assert!(piece.get("done_reason").is_none());
        let done = Done {
            reason: "stop",
            timings: Timings {
                total_duration: 9,
                eval_count: 2,
                prompt_eval_count: 5,
                prompt_eval_cached_count: Some(3),
                ..Timings::default()
            },
        };
        let last = chat("m", "t", "", &calls, Some(&done));
        assert_eq!(last["done"], true);
        assert_eq!(last["done_reason"], "stop");
        assert_eq!(last["total_duration"], 9);
        assert_eq!(last["eval_count"], 2);
        assert_eq!(last["prompt_eval_count"], 5);
        assert_eq!(last["prompt_eval_cached_count"], 3);
        // Unknown (a cloud answer): left out, as Ollama does.
        let unknown = Done {
            reason: "stop",
            timings: Timings::default(),
        };
        let cloud = chat("m", "t", "", &[], Some(&unknown));
        assert!(cloud.get("prompt_eval_cached_count").is_none(), "{cloud}");
        assert_eq!(
            last["message"]["tool_calls"][0]["function"]["arguments"],
            json!({"city": "Oslo"})
        );
        let g = generate("m", "t", "Hi", Some(&done));
        assert_eq!(g["response"], "Hi");
        assert!(line(&g).ends_with("}\n") && !line(&g)[..line(&g).len() - 1].contains('\n'));
        assert_eq!(error_body("no"), json!({"error": "no"}));
    }

    #[test]
    fn listings_say_size_digest_and_details() {
        assert_eq!(parameter_size(134_515_008), "134.52M");
        assert_eq!(parameter_size(1_500_000_000), "1.5B");
        assert_eq!(parameter_size(494_000_000), "494M");
        let m = ModelListing {
            name: "edgecloud".into(),
            size: 98,
            digest: Some("sha256:ab".into()),
            family: Some("llama".into()),
            parameters: Some(134_515_008),
            quantization: Some("Q4_1".into()),
            ..ModelListing::default()
        };
        let t = m.tag();
        assert_eq!(t["name"], "edgecloud");
        assert_eq!(t["size"], 98);
        assert_eq!(t["details"]["family"], "llama");
        assert_eq!(t["details"]["families"], json!(["llama"]));
        assert_eq!(t["details"]["format"], "gguf");
        assert_eq!(t["details"]["quantization_level"], "Q4_1");
        let p = m.loaded(400, NEVER_EXPIRES, Some(4096));
        assert_eq!(
            (p["size"].clone(), p["context_length"].clone()),
            (json!(400), json!(4096))
        );
    }
}
