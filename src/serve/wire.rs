//! The OpenAI chat-completions wire format as a server speaks it: parsing
//! and validating a request body into our vocabulary (naming the first bad
//! field the way OpenAI does, in `param`), the error object, and the JSON
//! of whole responses, stream chunks and the models list. No I/O and no
//! run logic here.

use crate::request::{ChatMessage, Role, Sampling};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// An error as an OpenAI client expects it: an HTTP status plus
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: u16,
    pub(crate) message: String,
    pub(crate) kind: &'static str,
    pub(crate) param: Option<String>,
    pub(crate) code: Option<&'static str>,
    /// Seconds for the `Retry-After` header (retryable errors only).
    pub(crate) retry_after: Option<u64>,
}

/// `type` of client mistakes (400, 404, 405, 413).
pub(crate) const INVALID_REQUEST: &str = "invalid_request_error";

impl ApiError {
    pub(crate) fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// A 400 naming the offending parameter.
    pub(crate) fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(400, INVALID_REQUEST, message).param(param)
    }

    pub(crate) fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub(crate) fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub(crate) fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// The error object (the body of an error response, and the payload of
    /// an SSE error event).
    pub(crate) fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

/// Caps applied while parsing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_messages: usize,
    pub(crate) max_deadline: Duration,
    pub(crate) default_max_tokens: u32,
}

/// A chat-completions request, validated.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChatParams {
    pub(crate) model: String,
    pub(crate) messages: Vec<ChatMessage>,
    pub(crate) sampling: Sampling,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    /// From the `edgecloud.policy` extension field.
    pub(crate) policy: Option<String>,
    /// From the `edgecloud.deadline_ms` extension field.
    pub(crate) deadline: Option<Duration>,
}

/// Fields that change what the answer is and that no lane can honour: a
/// request carrying one (with a non-neutral value) is refused rather than
/// answered as if it had not asked.
const UNSUPPORTED: &[&str] = &[
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "audio",
    "prediction",
    "web_search_options",
];

/// Parses a request body. Unknown fields are ignored (clients send many
/// optional ones), except those in `UNSUPPORTED` and the checks below.
pub(crate) fn parse_chat(body: &[u8], limits: Limits) -> Result<ChatParams, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            400,
            INVALID_REQUEST,
            format!("the request body is not valid JSON: {e}"),
        )
        .code("invalid_json")
    })?;
    let Value::Object(obj) = value else {
        return Err(ApiError::new(
            400,
            INVALID_REQUEST,
            "the request body must be a JSON object",
        )
        .code("invalid_json"));
    };
    let model = match obj.get("model") {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("model", "`model` is required")
                .code("missing_required_parameter"))
        }
        Some(v) => string(v, "model")?.to_string(),
    };
    let messages = messages(obj.get("messages"), limits.max_messages)?;

    let mut sampling = Sampling {
        max_tokens: limits.default_max_tokens,
        ..Sampling::default()
    };
    let max_tokens = present(&obj, "max_completion_tokens")
        .map(|v| (v, "max_completion_tokens"))
        .or_else(|| present(&obj, "max_tokens").map(|v| (v, "max_tokens")));
    if let Some((v, name)) = max_tokens {
        let n = unsigned(v, name)?;
        if n == 0 {
            return Err(ApiError::invalid(
                name,
                format!("`{name}` must be at least 1"),
            ));
        }
        sampling.max_tokens = u32::try_from(n)
            .map_err(|_| ApiError::invalid(name, format!("`{name}` is too large")))?;
    }
    if let Some(v) = present(&obj, "temperature") {
        let t = number(v, "temperature")?;
        if !(0.0..=2.0).contains(&t) {
            return Err(ApiError::invalid(
                "temperature",
                "`temperature` must be between 0 and 2",
            ));
        }
        sampling.temperature = t as f32;
    }
    if let Some(v) = present(&obj, "top_p") {
        let p = number(v, "top_p")?;
        if !(p > 0.0 && p <= 1.0) {
            return Err(ApiError::invalid("top_p", "`top_p` must be in (0, 1]"));
        }
        sampling.top_p = p as f32;
    }
    if let Some(v) = present(&obj, "top_k") {
        let k = unsigned(v, "top_k")?;
        sampling.top_k = u32::try_from(k).unwrap_or(u32::MAX);
    }
    if let Some(v) = present(&obj, "seed") {
        // OpenAI accepts any 64-bit integer; a negative seed keeps its bits.
        sampling.seed = Some(match v.as_i64() {
            Some(i) => i as u64,
            None => v
                .as_u64()
                .ok_or_else(|| ApiError::invalid("seed", "`seed` must be an integer"))?,
        });
    }
    if let Some(v) = present(&obj, "stop") {
        sampling.stop = stop(v)?;
    }
    if let Some(v) = present(&obj, "n") {
        if unsigned(v, "n")? != 1 {
            return Err(ApiError::invalid("n", "only `n` = 1 is supported"));
        }
    }
    if let Some(v) = present(&obj, "logprobs") {
        if boolean(v, "logprobs")? {
            return Err(ApiError::invalid("logprobs", "`logprobs` is not supported"));
        }
    }
    if let Some(v) = present(&obj, "response_format") {
        let kind = v.get("type").and_then(Value::as_str);
        if kind != Some("text") {
            return Err(ApiError::invalid(
                "response_format",
                "only `response_format` {\"type\": \"text\"} is supported",
            ));
        }
    }
    for name in UNSUPPORTED {
        match obj.get(*name) {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) if a.is_empty() => {}
            Some(Value::String(s)) if s == "none" => {}
            Some(_) => {
                return Err(ApiError::invalid(
                    *name,
                    format!("`{name}` is not supported"),
                ))
            }
        }
    }
    let stream = match present(&obj, "stream") {
        Some(v) => boolean(v, "stream")?,
        None => false,
    };
    let include_usage = match present(&obj, "stream_options") {
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(v) => boolean(v, "stream_options.include_usage")?,
        },
        Some(_) => {
            return Err(ApiError::invalid(
                "stream_options",
                "`stream_options` must be an object",
            ))
        }
        None => false,
    };
    let (policy, deadline) = extension(present(&obj, "edgecloud"), limits.max_deadline)?;
    sampling
        .validate()
        .map_err(|e| ApiError::new(400, INVALID_REQUEST, e.reason))?;
    Ok(ChatParams {
        model,
        messages,
        sampling,
        stream,
        include_usage,
        policy,
        deadline,
    })
}

/// The `edgecloud` extension object: `{"policy": "...", "deadline_ms": N}`.
fn extension(
    v: Option<&Value>,
    max_deadline: Duration,
) -> Result<(Option<String>, Option<Duration>), ApiError> {
    let Some(v) = v else {
        return Ok((None, None));
    };
    let Value::Object(o) = v else {
        return Err(ApiError::invalid(
            "edgecloud",
            "`edgecloud` must be an object",
        ));
    };
    for key in o.keys() {
        if key != "policy" && key != "deadline_ms" {
            return Err(ApiError::invalid(
                format!("edgecloud.{key}"),
                format!("unknown field `edgecloud.{key}`; expected `policy` or `deadline_ms`"),
            ));
        }
    }
    let policy = match present(o, "policy") {
        Some(v) => Some(string(v, "edgecloud.policy")?.to_string()),
        None => None,
    };
    let deadline = match present(o, "deadline_ms") {
        Some(v) => Some(deadline_ms(
            unsigned(v, "edgecloud.deadline_ms")?,
            "edgecloud.deadline_ms",
            max_deadline,
        )?),
        None => None,
    };
    Ok((policy, deadline))
}

/// Checks a deadline in milliseconds against the server's cap.
pub(crate) fn deadline_ms(ms: u64, param: &str, max: Duration) -> Result<Duration, ApiError> {
    let d = Duration::from_millis(ms);
    if ms == 0 || d > max {
        return Err(ApiError::invalid(
            param,
            format!(
                "`{param}` must be between 1 and {} milliseconds",
                max.as_millis()
            ),
        ));
    }
    Ok(d)
}

fn present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn type_error(param: &str, expected: &str, got: &Value) -> ApiError {
    let got = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    ApiError::invalid(param, format!("`{param}` must be {expected}, not {got}"))
        .code("invalid_type")
}

fn string<'a>(v: &'a Value, param: &str) -> Result<&'a str, ApiError> {
    v.as_str().ok_or_else(|| type_error(param, "a string", v))
}

fn number(v: &Value, param: &str) -> Result<f64, ApiError> {
    v.as_f64().ok_or_else(|| type_error(param, "a number", v))
}

fn unsigned(v: &Value, param: &str) -> Result<u64, ApiError> {
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    if v.as_i64().is_some() {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must not be negative"),
        ));
    }
    Err(type_error(param, "an integer", v))
}

fn boolean(v: &Value, param: &str) -> Result<bool, ApiError> {
    v.as_bool().ok_or_else(|| type_error(param, "a boolean", v))
}

fn stop(v: &Value) -> Result<Vec<String>, ApiError> {
    let list: Vec<String> = match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, s)| string(s, &format!("stop[{i}]")).map(str::to_string))
            .collect::<Result<_, _>>()?,
        other => return Err(type_error("stop", "a string or an array of strings", other)),
    };
    if list.len() > 16 {
        return Err(ApiError::invalid(
            "stop",
            "at most 16 stop strings are supported",
        ));
    }
    if let Some(i) = list.iter().position(String::is_empty) {
        return Err(ApiError::invalid(
            format!("stop[{i}]"),
            "stop strings must not be empty",
        ));
    }
    Ok(list)
}

fn messages(v: Option<&Value>, max: usize) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match v {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("messages", "`messages` is required")
                .code("missing_required_parameter"))
        }
        Some(Value::Array(items)) => items,
        Some(other) => return Err(type_error("messages", "an array", other)),
    };
    if items.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "`messages` must not be empty",
        ));
    }
    if items.len() > max {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "too many messages: {} (this server accepts at most {max})",
                items.len()
            ),
        )
        .code("too_many_messages"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, m)| message(m, i))
        .collect()
}

fn message(v: &Value, i: usize) -> Result<ChatMessage, ApiError> {
    let at = |field: &str| format!("messages[{i}].{field}");
    let Value::Object(m) = v else {
        return Err(type_error(&format!("messages[{i}]"), "an object", v));
    };
    let role = match m.get("role") {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(
                at("role"),
                format!("`{}` is required", at("role")),
            ))
        }
        Some(r) => match string(r, &at("role"))? {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(ApiError::invalid(
                    at("role"),
                    format!(
                        "unsupported role `{other}`; expected system, developer, user or assistant"
                    ),
                ))
            }
        },
    };
    let content = match m.get("content") {
        // An assistant turn may carry no content (OpenAI allows it).
        None | Some(Value::Null) if role == Role::Assistant => String::new(),
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(
                at("content"),
                format!("`{}` is required", at("content")),
            ))
        }
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let p = format!("messages[{i}].content[{j}]");
                let kind = part.get("type").and_then(Value::as_str);
                if kind != Some("text") {
                    return Err(ApiError::invalid(
                        format!("{p}.type"),
                        format!(
                            "only text content parts are supported (`{p}.type` must be \"text\")"
                        ),
                    ));
                }
                match part.get("text") {
                    Some(t) => text.push_str(string(t, &format!("{p}.text"))?),
                    None => {
                        return Err(ApiError::invalid(
                            format!("{p}.text"),
                            format!("`{p}.text` is required"),
                        ))
                    }
                }
            }
            text
        }
        Some(other) => {
            return Err(type_error(
                &at("content"),
                "a string or an array of text parts",
                other,
            ))
        }
    };
    Ok(ChatMessage::new(role, content))
}

/// Token usage as OpenAI reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) prompt: u64,
    pub(crate) completion: u64,
}

impl Usage {
    pub(crate) fn json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
        })
    }
}

/// What every response and chunk of one completion shares.
#[derive(Debug, Clone)]
pub(crate) struct Ids {
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) model: String,
}

impl Ids {
    /// Ids for run `run_id`, created now.
    pub(crate) fn new(run_id: u64, model: &str) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            id: format!("chatcmpl-edgecloud-{run_id}"),
            created,
            model: model.to_string(),
        }
    }
}

/// A whole (non-streamed) response; `extension` is the outcome summary.
pub(crate) fn completion_json(
    ids: &Ids,
    text: &str,
    finish_reason: &str,
    usage: Usage,
    extension: Value,
) -> Value {
    json!({
        "id": ids.id,
        "object": "chat.completion",
        "created": ids.created,
        "model": ids.model,
        "system_fingerprint": null,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": null,
            "finish_reason": finish_reason,
        }],
        "usage": usage.json(),
        "edgecloud": extension,
    })
}

/// One `chat.completion.chunk`: a delta (role and/or content), or the
/// finish reason, or (with empty choices) the usage.
pub(crate) fn chunk_json(ids: &Ids, delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": ids.id,
        "object": "chat.completion.chunk",
        "created": ids.created,
        "model": ids.model,
        "system_fingerprint": null,
        "choices": [{
            "index": 0,
            "delta": delta,
            "logprobs": null,
            "finish_reason": finish_reason,
        }],
    })
}

/// The usage chunk sent last when `stream_options.include_usage` is set.
pub(crate) fn usage_chunk_json(ids: &Ids, usage: Usage) -> Value {
    json!({
        "id": ids.id,
        "object": "chat.completion.chunk",
        "created": ids.created,
        "model": ids.model,
        "system_fingerprint": null,
        "choices": [],
        "usage": usage.json(),
    })
}

/// One entry of `GET /v1/models`.
pub(crate) fn model_json(id: &str, created: u64) -> Value {
    json!({"id": id, "object": "model", "created": created, "owned_by": "edgecloud"})
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_messages: 4,
        max_deadline: Duration::from_secs(60),
        default_max_tokens: 64,
    };

    fn parse(v: Value) -> Result<ChatParams, ApiError> {
        parse_chat(v.to_string().as_bytes(), LIMITS)
    }

    fn param_of(v: Value) -> String {
        parse(v).unwrap_err().param.unwrap_or_default()
    }

    #[test]
    fn a_full_request_maps_to_our_vocabulary() {
        let p = parse(json!({
            "model": "edgecloud",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
                {"role": "assistant", "content": null},
            ],
            "max_completion_tokens": 9, "max_tokens": 3,
            "temperature": 0, "top_p": 0.5, "top_k": 7, "seed": -1,
            "stop": "\n", "n": 1, "user": "x", "frequency_penalty": 0,
            "tools": [], "response_format": {"type": "text"},
            "stream": true, "stream_options": {"include_usage": true},
            "edgecloud": {"policy": "race", "deadline_ms": 1500},
        }))
        .unwrap();
        assert_eq!(p.messages[0], ChatMessage::system("be brief"));
        assert_eq!(p.messages[1].content, "hi there");
        assert_eq!(p.messages[2], ChatMessage::assistant(""));
        assert_eq!(p.sampling.max_tokens, 9);
        assert_eq!(p.sampling.temperature, 0.0);
        assert_eq!(p.sampling.top_k, 7);
        assert_eq!(p.sampling.seed, Some(u64::MAX));
        assert_eq!(p.sampling.stop, ["\n"]);
        assert!(p.stream && p.include_usage);
        assert_eq!(p.policy.as_deref(), Some("race"));
        assert_eq!(p.deadline, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn defaults_apply_when_fields_are_absent_or_null() {
        let p = parse(json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": null})).unwrap();
        assert_eq!(p.sampling.max_tokens, 64);
        assert_eq!(p.sampling.temperature, Sampling::default().temperature);
        assert!(!p.stream && !p.include_usage);
        assert_eq!((p.policy, p.deadline), (None, None));
    }

    #[test]
    fn each_bad_field_is_named() {
        let user = json!([{"role": "user", "content": "x"}]);
        let e = parse_chat(b"{not json", LIMITS).unwrap_err();
        assert_eq!((e.status, e.code), (400, Some("invalid_json")));
        assert_eq!(
            parse_chat(b"[1]", LIMITS).unwrap_err().code,
            Some("invalid_json")
        );
        assert_eq!(param_of(json!({"messages": user})), "model");
        assert_eq!(param_of(json!({"model": 3, "messages": user})), "model");
        assert_eq!(param_of(json!({"model": "m"})), "messages");
        assert_eq!(
            param_of(json!({"model": "m", "messages": "hi"})),
            "messages"
        );
        assert_eq!(param_of(json!({"model": "m", "messages": []})), "messages");
        let many = Value::Array(vec![json!({"role": "user", "content": "x"}); 5]);
        let e = parse(json!({"model": "m", "messages": many})).unwrap_err();
        assert_eq!(e.code, Some("too_many_messages"));
        assert!(e.message.contains("at most 4"), "{}", e.message);
        assert_eq!(
            param_of(json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]})),
            "messages[0].role"
        );
        assert_eq!(
            param_of(json!({"model": "m", "messages": [{"role": "user"}]})),
            "messages[0].content"
        );
        assert_eq!(
            param_of(json!({"model": "m", "messages": [{"role": "user", "content": 5}]})),
            "messages[0].content"
        );
        assert_eq!(
            param_of(
                json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})
            ),
            "messages[0].content[0].type"
        );
        let e = parse(json!({"model": "m", "messages": user, "temperature": "hot"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("temperature"));
        assert_eq!(e.code, Some("invalid_type"));
        assert!(e.message.contains("not a string"), "{}", e.message);
        for (field, value) in [
            ("temperature", json!(3)),
            ("top_p", json!(0)),
            ("max_tokens", json!(0)),
            ("max_tokens", json!(-2)),
            ("max_tokens", json!(1.5)),
            ("seed", json!("s")),
            ("n", json!(2)),
            ("logprobs", json!(true)),
            ("tools", json!([{"type": "function"}])),
            ("tool_choice", json!("auto")),
            ("stream", json!("yes")),
            ("stream_options", json!(true)),
            ("response_format", json!({"type": "json_object"})),
            ("edgecloud", json!("race")),
        ] {
            let mut body = json!({"model": "m", "messages": user});
            body[field] = value;
            assert_eq!(param_of(body), field);
        }
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "stop": ["a", ""]})),
            "stop[1]"
        );
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "stop": [1]})),
            "stop[0]"
        );
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "edgecloud": {"polcy": "race"}})),
            "edgecloud.polcy"
        );
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "edgecloud": {"deadline_ms": 0}})),
            "edgecloud.deadline_ms"
        );
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "edgecloud": {"deadline_ms": 61000}})),
            "edgecloud.deadline_ms"
        );
    }

    #[test]
    fn error_object_has_the_openai_shape() {
        let e = ApiError::invalid("top_p", "bad").code("invalid_type");
        assert_eq!(
            e.body(),
            json!({"error": {"message": "bad", "type": "invalid_request_error", "param": "top_p", "code": "invalid_type"}})
        );
        let e = ApiError::new(503, "overloaded_error", "busy");
        assert_eq!(e.body()["error"]["param"], Value::Null);
    }

    #[test]
    fn response_shapes() {
        let ids = Ids::new(7, "edgecloud");
        let usage = Usage {
            prompt: 3,
            completion: 2,
        };
        let r = completion_json(&ids, "hi", "stop", usage, json!({"lane": "local"}));
        assert_eq!(r["id"], "chatcmpl-edgecloud-7");
        assert_eq!(r["choices"][0]["message"]["content"], "hi");
        assert_eq!(r["usage"]["total_tokens"], 5);
        assert_eq!(r["edgecloud"]["lane"], "local");
        let c = chunk_json(&ids, json!({"role": "assistant", "content": ""}), None);
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["choices"][0]["finish_reason"], Value::Null);
        let u = usage_chunk_json(&ids, usage);
        assert_eq!(u["choices"], json!([]));
        assert_eq!(u["usage"]["prompt_tokens"], 3);
    }
}
