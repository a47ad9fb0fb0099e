//! The request body of `POST /chat/completions`: the typed
//! [`ChatRequest`] (what the cloud lane sends, what serve and bench read)
//! and [`parse_request`], the one reader, which reads it from a JSON
//! object and names the first offending field as OpenAI does in `param`.
//! It checks types and shapes (and the structures it reads: messages,
//! `response_format`, tools); the ranges of the sampling fields and the
//! need for a message are `Request::validate`'s, the one home of each,
//! which the callers run on the request they build from it.

use super::error::FieldError;
use super::refused;
use edgecloud_core::request::{ChatMessage, Role, Sampling, MAX_TOKENS_UNBOUNDED};
use edgecloud_core::structured::ResponseFormat;
use edgecloud_core::tools::{check_tools, Tool, ToolCall, ToolChoice};
use serde::Serialize;
use serde_json::{Map, Value};
use std::borrow::Cow;

/// A chat-completions request. Borrowed when the cloud lane sends one (no
/// copy of the conversation per request), owned when parsed. Absent
/// options are left out of the body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatRequest<'a> {
    pub model: Cow<'a, str>,
    pub messages: Cow<'a, [ChatMessage]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// OpenAI's newer spelling of `max_tokens`; wins when both are given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub stop: Cow<'a, [String]>,
    pub stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// `json_object` or `json_schema`; `{"type": "text"}` reads as `None`
    /// and is never sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Cow<'a, ResponseFormat>>,
    #[serde(skip_serializing_if = "<[Tool]>::is_empty")]
    pub tools: Cow<'a, [Tool]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u8>,
}

/// `stream_options`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StreamOptions {
    pub include_usage: bool,
}

impl<'a> ChatRequest<'a> {
    /// The request the cloud lane sends for `messages` under `sampling`:
    /// every sampling setting spelled out (`top_k` only when the provider
    /// takes it), usage asked for in streams when `stream_usage`.
    pub fn new(
        model: &'a str,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
        stream: bool,
        stream_usage: bool,
        send_top_k: bool,
    ) -> Self {
        Self {
            model: Cow::Borrowed(model),
            messages: Cow::Borrowed(messages),
            // No limit of the request's own: the provider's applies.
            max_tokens: (sampling.max_tokens != MAX_TOKENS_UNBOUNDED)
                .then_some(sampling.max_tokens),
            max_completion_tokens: None,
            temperature: Some(sampling.temperature),
            top_p: Some(sampling.top_p),
            top_k: (send_top_k && sampling.top_k > 0).then_some(sampling.top_k),
            seed: sampling.seed,
            stop: Cow::Borrowed(&sampling.stop),
            stream,
            stream_options: (stream && stream_usage).then_some(StreamOptions {
                include_usage: true,
            }),
            // Passed through unchanged: the provider enforces it.
            response_format: sampling.response_format.as_ref().map(Cow::Borrowed),
            tools: Cow::Borrowed(&sampling.tools),
            tool_choice: if sampling.tools.is_empty() {
                None
            } else {
                sampling.tool_choice.clone()
            },
            logprobs: sampling.logprobs.map(|_| true),
            top_logprobs: sampling.logprobs.filter(|n| *n > 0),
        }
    }

    /// The sampling settings it asks for; what it leaves out keeps
    /// `defaults`.
    pub fn sampling(&self, defaults: Sampling) -> Sampling {
        let mut s = defaults;
        if let Some(n) = self.max_completion_tokens.or(self.max_tokens) {
            s.max_tokens = n;
        }
        if let Some(t) = self.temperature {
            s.temperature = t;
        }
        if let Some(p) = self.top_p {
            s.top_p = p;
        }
        if let Some(k) = self.top_k {
            s.top_k = k;
        }
        if self.seed.is_some() {
            s.seed = self.seed;
        }
        if !self.stop.is_empty() {
            s.stop = self.stop.to_vec();
        }
        if let Some(f) = &self.response_format {
            s.response_format = Some(f.clone().into_owned());
        }
        if !self.tools.is_empty() {
            s.tools = self.tools.to_vec();
            s.tool_choice = self.tool_choice.clone();
        }
        if self.logprobs == Some(true) {
            s.logprobs = Some(self.top_logprobs.unwrap_or(0));
        }
        s
    }

    /// Whether usage was asked for in a stream.
    pub fn include_usage(&self) -> bool {
        self.stream_options.is_some_and(|o| o.include_usage)
    }
}

/// How [`parse_request`] reads a body.
#[derive(Debug, Clone, Copy)]
pub struct ParseOptions<'a> {
    /// Prefixes every field name in errors (`body.` in a batch line).
    pub at: &'a str,
    /// `model` must be given (a server needs it; a workload ignores it).
    pub require_model: bool,
    /// Most messages accepted.
    pub max_messages: Option<usize>,
    /// Refuse fields this module does not read (a typo in a workload must
    /// not pass silently) instead of handing them back in
    /// [`Parsed::extra`] (clients send many optional fields to a server).
    pub strict: bool,
}

/// A validated body.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    pub request: ChatRequest<'static>,
    /// The fields it does not read, for the caller's own extensions
    /// (always empty when parsing strictly).
    pub extra: Map<String, Value>,
}

/// Fields read (and accepted) but with no effect on the request: bookkeeping
/// a client attaches. Only matters when parsing strictly.
const IGNORED: &[&str] = &["user", "metadata", "store"];

/// Fields [`parse_request`] reads.
const READ: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "n",
    "stream",
    "stream_options",
    "response_format",
    "tools",
    "tool_choice",
    "logprobs",
    "top_logprobs",
];

/// The one reader of a chat-completions body. Errors name the first
/// bad field (`messages[1].content[0].type`) and say what was expected;
/// the `refused` list is checked here and nowhere else.
pub fn parse_request(
    obj: &Map<String, Value>,
    opts: ParseOptions<'_>,
) -> Result<Parsed, FieldError> {
    let at = |field: &str| format!("{}{field}", opts.at);
    let known = |k: &str| READ.contains(&k) || IGNORED.contains(&k) || refused::is_refused(k);
    if opts.strict {
        if let Some(k) = obj.keys().find(|k| !known(k)) {
            let p = at(k);
            return Err(FieldError::refused(
                &p,
                format!("`{p}` is not supported (an unknown field)"),
            ));
        }
    }
    let model = match present(obj, "model") {
        None if opts.require_model => {
            return Err(FieldError::invalid(at("model"), "`model` is required")
                .code("missing_required_parameter"))
        }
        None => String::new(),
        Some(v) => string(v, &at("model"))?.to_string(),
    };
    let messages = messages(obj.get("messages"), opts)?;

    let (max_tokens, max_completion_tokens) = max_tokens(obj, opts.at)?;
    let temperature = float(obj, &at("temperature"))?;
    let top_p = float(obj, &at("top_p"))?;
    let top_k = match present(obj, "top_k") {
        Some(v) => Some(u32::try_from(unsigned(v, &at("top_k"))?).unwrap_or(u32::MAX)),
        None => None,
    };
    let seed = seed(obj, &at("seed"))?;
    let stop = match present(obj, "stop") {
        Some(v) => stop(v, opts.at)?,
        None => Vec::new(),
    };
    if let Some(v) = present(obj, "n") {
        let p = at("n");
        if unsigned(v, &p)? != 1 {
            return Err(FieldError::refused(
                &p,
                format!("only `{p}` = 1 is supported"),
            ));
        }
    }
    refused::check(obj, opts.at)?;
    let stream = match present(obj, "stream") {
        Some(v) => boolean(v, &at("stream"))?,
        None => false,
    };
    let stream_options = stream_options(obj, opts.at)?;
    let response_format = match present(obj, "response_format") {
        Some(v) => response_format(v, &format!("{}response_format", opts.at))?.map(Cow::Owned),
        None => None,
    };
    let (tools, tool_choice) = tools(obj, opts.at)?;
    let (logprobs, top_logprobs) = logprobs(obj, opts.at)?;
    let extra = if opts.strict {
        Map::new()
    } else {
        obj.iter()
            .filter(|(k, _)| !known(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    Ok(Parsed {
        request: ChatRequest {
            model: Cow::Owned(model),
            messages: Cow::Owned(messages),
            max_tokens,
            max_completion_tokens,
            temperature,
            top_p,
            top_k,
            seed,
            stop: Cow::Owned(stop),
            stream,
            stream_options,
            response_format,
            tools: Cow::Owned(tools),
            tool_choice,
            logprobs,
            top_logprobs,
        },
        extra,
    })
}

/// `max_completion_tokens` or `max_tokens`: the newer spelling wins, and
/// the other is then not looked at.
pub(super) fn max_tokens(
    obj: &Map<String, Value>,
    at: &str,
) -> Result<(Option<u32>, Option<u32>), FieldError> {
    for (name, newer) in [("max_completion_tokens", true), ("max_tokens", false)] {
        let Some(v) = present(obj, name) else {
            continue;
        };
        let p = format!("{at}{name}");
        let n = unsigned(v, &p)?;
        let n =
            u32::try_from(n).map_err(|_| FieldError::invalid(&p, format!("`{p}` is too large")))?;
        return Ok(if newer {
            (None, Some(n))
        } else {
            (Some(n), None)
        });
    }
    Ok((None, None))
}

/// A number field (its range is `Sampling::validate`'s).
pub(crate) fn float(obj: &Map<String, Value>, param: &str) -> Result<Option<f32>, FieldError> {
    let name = param.rsplit('.').next().unwrap_or(param);
    let Some(v) = present(obj, name) else {
        return Ok(None);
    };
    Ok(Some(number(v, param)? as f32))
}

/// `seed`: OpenAI accepts any 64-bit integer; a negative seed keeps its
/// bits.
pub(crate) fn seed(obj: &Map<String, Value>, param: &str) -> Result<Option<u64>, FieldError> {
    let Some(v) = present(obj, "seed") else {
        return Ok(None);
    };
    match v.as_i64() {
        Some(i) => Ok(Some(i as u64)),
        None => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| FieldError::invalid(param, format!("`{param}` must be an integer"))),
    }
}

/// `stream_options`: an object; only `include_usage` is read.
pub(super) fn stream_options(
    obj: &Map<String, Value>,
    at: &str,
) -> Result<Option<StreamOptions>, FieldError> {
    match present(obj, "stream_options") {
        Some(Value::Object(o)) => match present(o, "include_usage") {
            None => Ok(None),
            Some(v) => Ok(Some(StreamOptions {
                include_usage: boolean(v, &format!("{at}stream_options.include_usage"))?,
            })),
        },
        Some(_) => {
            let p = format!("{at}stream_options");
            Err(FieldError::invalid(&p, format!("`{p}` must be an object")))
        }
        None => Ok(None),
    }
}

/// `response_format`: `text` (`None`), `json_object`, or `json_schema`
/// with a schema inside the supported subset (`edgecloud_core::structured`); a
/// keyword outside it is named, never ignored.
pub(crate) fn response_format(v: &Value, p: &str) -> Result<Option<ResponseFormat>, FieldError> {
    let Value::Object(o) = v else {
        return Err(type_error(p, "an object", v));
    };
    let kind = match present(o, "type") {
        Some(t) => string(t, &format!("{p}.type"))?,
        None => {
            let p = format!("{p}.type");
            return Err(FieldError::invalid(&p, format!("`{p}` is required"))
                .code("missing_required_parameter"));
        }
    };
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(ResponseFormat::JsonObject)),
        "json_schema" => {
            let js = format!("{p}.json_schema");
            let Some(inner) = present(o, "json_schema") else {
                return Err(FieldError::invalid(&js, format!("`{js}` is required"))
                    .code("missing_required_parameter"));
            };
            let f: ResponseFormat = serde_json::from_value(Value::Object(o.clone()))
                .map_err(|e| FieldError::invalid(&js, format!("`{js}`: {e}")))?;
            if !inner.get("schema").is_none_or(Value::is_object) {
                let s = format!("{js}.schema");
                return Err(type_error(&s, "an object", &inner["schema"]));
            }
            f.check().map_err(|e| {
                FieldError::refused(
                    format!("{js}.schema"),
                    format!(
                        "`{js}.schema`: {e}; supported: type, properties, required, \
                         additionalProperties, items, enum, const, minItems, maxItems, \
                         minLength, maxLength and annotations"
                    ),
                )
                .code("unsupported_schema_keyword")
            })?;
            Ok(Some(f))
        }
        other => Err(FieldError::invalid(
            format!("{p}.type"),
            format!("unsupported `{p}.type` `{other}`; expected text, json_object or json_schema"),
        )),
    }
}

/// `tools` and `tool_choice`: function declarations (each `parameters`
/// inside the supported schema subset, a keyword outside it named) and
/// OpenAI's choices. `tool_choice` without `tools` is ignored when it is
/// `none` or `auto`, as OpenAI does.
pub(crate) fn tools(
    obj: &Map<String, Value>,
    at: &str,
) -> Result<(Vec<Tool>, Option<ToolChoice>), FieldError> {
    let p = format!("{at}tools");
    let tools: Vec<Tool> = match present(obj, "tools") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let pi = format!("{p}[{i}]");
                if !t.get("function").is_some_and(Value::is_object) {
                    return Err(FieldError::invalid(
                        format!("{pi}.function"),
                        format!("`{pi}.function` is required (an object)"),
                    )
                    .code("missing_required_parameter"));
                }
                serde_json::from_value(t.clone())
                    .map_err(|e| FieldError::invalid(&pi, format!("`{pi}`: {e}")))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(type_error(&p, "an array", other)),
    };
    let choice = match present(obj, "tool_choice") {
        None => None,
        Some(v) => Some(
            ToolChoice::from_value(v)
                .map_err(|e| FieldError::invalid(format!("{at}tool_choice"), e))?,
        ),
    };
    check_tools(&tools, choice.as_ref()).map_err(|e| {
        let param = format!("{at}{}", e.param);
        match e.schema {
            Some(_) => FieldError::refused(
                param,
                format!(
                    "{}; supported: type, properties, required, additionalProperties, items, \
                     enum, const, minItems, maxItems, minLength, maxLength and annotations",
                    e.message
                ),
            )
            .code("unsupported_schema_keyword"),
            None => FieldError::invalid(param, e.message),
        }
    })?;
    Ok((tools, choice))
}

/// `logprobs` (a boolean) and `top_logprobs` (0 to 20, only with
/// `logprobs: true`, as OpenAI requires).
fn logprobs(obj: &Map<String, Value>, at: &str) -> Result<(Option<bool>, Option<u8>), FieldError> {
    let logprobs = match present(obj, "logprobs") {
        Some(v) => Some(boolean(v, &format!("{at}logprobs"))?),
        None => None,
    };
    let p = format!("{at}top_logprobs");
    let top = match present(obj, "top_logprobs") {
        None => None,
        // Its range is `Sampling::validate`'s; past a u8 it is out of
        // range anyway.
        Some(v) => Some(u8::try_from(unsigned(v, &p)?).unwrap_or(u8::MAX)),
    };
    if top.is_some_and(|n| n > 0) && logprobs != Some(true) {
        return Err(FieldError::invalid(
            &p,
            format!("`{p}` needs `{at}logprobs` to be true"),
        ));
    }
    Ok((logprobs, top))
}

/// The value of `key`, unless absent or `null` (as good as absent).
pub(crate) fn present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(crate) fn type_error(param: &str, expected: &str, got: &Value) -> FieldError {
    let got = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    FieldError::invalid(param, format!("`{param}` must be {expected}, not {got}"))
        .code("invalid_type")
}

pub fn string<'a>(v: &'a Value, param: &str) -> Result<&'a str, FieldError> {
    v.as_str().ok_or_else(|| type_error(param, "a string", v))
}

pub(crate) fn number(v: &Value, param: &str) -> Result<f64, FieldError> {
    v.as_f64().ok_or_else(|| type_error(param, "a number", v))
}

pub fn unsigned(v: &Value, param: &str) -> Result<u64, FieldError> {
    if let Some(n) = v.as_u64() {
        return Ok(n);
    }
    if v.as_i64().is_some() {
        return Err(FieldError::invalid(
            param,
            format!("`{param}` must not be negative"),
        ));
    }
    Err(type_error(param, "an integer", v))
}

pub(crate) fn boolean(v: &Value, param: &str) -> Result<bool, FieldError> {
    v.as_bool().ok_or_else(|| type_error(param, "a boolean", v))
}

pub(crate) fn stop(v: &Value, at: &str) -> Result<Vec<String>, FieldError> {
    let list: Vec<String> = match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, s)| string(s, &format!("{at}stop[{i}]")).map(str::to_string))
            .collect::<Result<_, _>>()?,
        other => {
            return Err(type_error(
                &format!("{at}stop"),
                "a string or an array of strings",
                other,
            ))
        }
    };
    if list.len() > 16 {
        return Err(FieldError::invalid(
            format!("{at}stop"),
            "at most 16 stop strings are supported",
        ));
    }
    Ok(list)
}

fn messages(v: Option<&Value>, opts: ParseOptions<'_>) -> Result<Vec<ChatMessage>, FieldError> {
    let p = format!("{}messages", opts.at);
    let items = match v {
        None | Some(Value::Null) => {
            return Err(FieldError::invalid(&p, format!("`{p}` is required"))
                .code("missing_required_parameter"))
        }
        Some(Value::Array(items)) => items,
        Some(other) => return Err(type_error(&p, "an array", other)),
    };
    if let Some(max) = opts.max_messages.filter(|max| items.len() > *max) {
        return Err(FieldError::invalid(
            &p,
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
        .map(|(i, m)| message(m, &format!("{p}[{i}]"), opts.strict))
        .collect()
}

/// One message as OpenAI clients write it: role `system`, `developer` (a
/// system message), `user`, `assistant` (maybe with `tool_calls`) or
/// `tool` (with the `tool_call_id` it answers); content a string or a
/// list of text parts (an assistant's may be null). `at` names it
/// (`messages[2]`).
fn message(v: &Value, at: &str, strict: bool) -> Result<ChatMessage, FieldError> {
    let field = |f: &str| format!("{at}.{f}");
    let Value::Object(m) = v else {
        return Err(type_error(at, "an object", v));
    };
    let role = match present(m, "role") {
        None => {
            let p = field("role");
            return Err(FieldError::invalid(&p, format!("`{p}` is required")));
        }
        Some(r) => match string(r, &field("role"))? {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => {
                return Err(FieldError::invalid(
                    field("role"),
                    format!(
                        "unsupported role `{other}`; expected system, developer, user, assistant \
                         or tool"
                    ),
                ))
            }
        },
    };
    let content = match present(m, "content") {
        // An assistant turn may carry no content (OpenAI allows it).
        None if role == Role::Assistant => String::new(),
        None => {
            let p = field("content");
            return Err(FieldError::invalid(&p, format!("`{p}` is required")));
        }
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let p = format!("{at}.content[{j}]");
                if part.get("type").and_then(Value::as_str) != Some("text") {
                    return Err(FieldError::invalid(
                        format!("{p}.type"),
                        format!(
                            "only text content parts are supported (`{p}.type` must be \"text\")"
                        ),
                    ));
                }
                match part.get("text") {
                    Some(t) => text.push_str(string(t, &format!("{p}.text"))?),
                    None => {
                        return Err(FieldError::invalid(
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
                &field("content"),
                "a string or an array of text parts",
                other,
            ))
        }
    };
    if strict {
        if let Some(k) = m.keys().find(|k| {
            !matches!(
                k.as_str(),
                "role" | "content" | "name" | "tool_calls" | "tool_call_id"
            )
        }) {
            let p = field(k);
            return Err(FieldError::refused(
                &p,
                format!(
                    "`{p}` is not supported (only role, content, name, tool_calls and \
                     tool_call_id)"
                ),
            ));
        }
    }
    let mut message = ChatMessage::new(role, content);
    match (role, present(m, "tool_calls")) {
        (Role::Assistant, Some(v)) => message.tool_calls = tool_calls(v, &field("tool_calls"))?,
        (_, Some(_)) => {
            let p = field("tool_calls");
            return Err(FieldError::invalid(
                &p,
                format!("`{p}` is only allowed on assistant messages"),
            ));
        }
        (_, None) => {}
    }
    match (role, present(m, "tool_call_id")) {
        (Role::Tool, Some(v)) => {
            message.tool_call_id = Some(string(v, &field("tool_call_id"))?.to_string());
        }
        (Role::Tool, None) => {
            let p = field("tool_call_id");
            return Err(
                FieldError::invalid(&p, format!("`{p}` is required on tool messages"))
                    .code("missing_required_parameter"),
            );
        }
        _ => {}
    }
    Ok(message)
}

/// An assistant message's `tool_calls`: `[{"id", "type": "function",
/// "function": {"name", "arguments"}}]`.
fn tool_calls(v: &Value, p: &str) -> Result<Vec<ToolCall>, FieldError> {
    let Value::Array(items) = v else {
        return Err(type_error(p, "an array", v));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let pi = format!("{p}[{i}]");
            serde_json::from_value::<ToolCall>(c.clone())
                .map_err(|e| FieldError::invalid(&pi, format!("`{pi}`: {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SERVER: ParseOptions<'static> = ParseOptions {
        at: "",
        require_model: true,
        max_messages: Some(4),
        strict: false,
    };
    const WORKLOAD: ParseOptions<'static> = ParseOptions {
        at: "body.",
        require_model: false,
        max_messages: None,
        strict: true,
    };

    fn parse(v: Value, opts: ParseOptions<'_>) -> Result<Parsed, FieldError> {
        parse_request(v.as_object().unwrap(), opts)
    }

    #[test]
    fn request_body_shape() {
        let messages = [ChatMessage::system("be brief"), ChatMessage::user("hi")];
        let sampling = Sampling {
            max_tokens: 7,
            seed: Some(3),
            stop: vec!["\n\n".into()],
            ..Sampling::default()
        };
        let body = serde_json::to_value(ChatRequest::new(
            "m", &messages, &sampling, true, true, false,
        ))
        .unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["messages"][1]["content"], "hi");
        assert_eq!(body["max_tokens"], 7);
        assert_eq!(body["seed"], 3);
        assert_eq!(body["stop"], json!(["\n\n"]));
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert!(body.get("top_k").is_none());
        assert!(body.get("max_completion_tokens").is_none());

        let plain = Sampling::default();
        let body =
            serde_json::to_value(ChatRequest::new("m", &messages, &plain, false, true, true))
                .unwrap();
        assert!(body.get("stream_options").is_none());
        assert!(body.get("stop").is_none());
        assert!(body.get("seed").is_none());
        assert_eq!(body["top_k"], 40);
    }

    #[test]
    fn what_the_cloud_lane_sends_parses_back_to_the_same_request() {
        let messages = [ChatMessage::user("hi")];
        let sampling = Sampling {
            max_tokens: 9,
            temperature: 0.5,
            top_k: 7,
            seed: Some(u64::MAX),
            stop: vec!["x".into()],
            ..Sampling::default()
        };
        let sent = ChatRequest::new("m", &messages, &sampling, true, true, true);
        let body = serde_json::to_value(&sent).unwrap();
        let back = parse(body, SERVER).unwrap();
        assert_eq!(back.request, sent);
        assert!(back.extra.is_empty());
        assert_eq!(back.request.sampling(Sampling::default()), sampling);
        assert!(back.request.include_usage());
    }

    #[test]
    fn unknown_fields_are_handed_back_or_refused() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "x", "name": "a"}],
            "frequency_penalty": 0, "edgecloud": {"policy": "race"}, "user": "u"});
        let p = parse(body.clone(), SERVER).unwrap();
        assert_eq!(
            p.extra.keys().collect::<Vec<_>>(),
            ["edgecloud", "frequency_penalty"]
        );
        let e = parse(body, WORKLOAD).unwrap_err();
        assert_eq!(e.param, "body.edgecloud");
        let e = parse(
            json!({"messages": [{"role": "user", "content": "x", "audio": "1"}]}),
            WORKLOAD,
        )
        .unwrap_err();
        assert_eq!(e.param, "body.messages[0].audio");
        let e = parse(
            json!({"messages": [{"role": "user", "content": "x"}], "n": 2}),
            WORKLOAD,
        )
        .unwrap_err();
        assert_eq!(
            (e.param.as_str(), e.kind),
            ("body.n", super::super::error::FieldErrorKind::Refused)
        );
        let e = parse(
            json!({"messages": [{"role": "bot", "content": "x"}]}),
            WORKLOAD,
        )
        .unwrap_err();
        assert_eq!(e.describe(), "`body.messages[0].role`: unsupported role `bot`; expected system, developer, user, assistant or tool");
    }

    #[test]
    fn tools_logprobs_and_tool_messages_are_read_and_round_trip() {
        let body = json!({"model": "m", "messages": [
            {"role": "user", "content": "weather in Oslo?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "12 C"}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": "required", "logprobs": true, "top_logprobs": 3});
        let p = parse(body, SERVER).unwrap();
        let r = &p.request;
        assert_eq!(r.messages[1].tool_calls[0].function.name, "get_weather");
        assert_eq!(r.messages[2].role, Role::Tool);
        assert_eq!(r.messages[2].tool_call_id.as_deref(), Some("call_1"));
        let s = r.sampling(Sampling::default());
        assert_eq!(s.tools.len(), 1);
        assert_eq!(s.tool_choice, Some(ToolChoice::Required));
        assert_eq!(s.logprobs, Some(3));
        // What the cloud lane sends for it reads back the same.
        let sent = ChatRequest::new("m", &r.messages, &s, false, false, false);
        let again = parse(serde_json::to_value(&sent).unwrap(), SERVER).unwrap();
        assert_eq!(again.request.sampling(Sampling::default()), s);
        assert_eq!(again.request.messages, r.messages);

        for (body, param) in [
            (
                json!({"tools": [{"type": "function"}]}),
                "tools[0].function",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}),
                "tools[0].function.name",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object", "properties": {"x": {"anyOf": []}}}}}]}),
                "tools[0].function.parameters",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (json!({"tool_choice": "sometimes"}), "tool_choice"),
            (json!({"top_logprobs": 2}), "top_logprobs"),
            (json!({"logprobs": "yes"}), "logprobs"),
        ] {
            let mut o = body.as_object().unwrap().clone();
            o.insert("messages".into(), json!([{"role": "user", "content": "x"}]));
            let e = parse(Value::Object(o), WORKLOAD).unwrap_err();
            assert_eq!(e.param, format!("body.{param}"), "{body}");
        }
        let e = parse(
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            WORKLOAD,
        )
        .unwrap_err();
        assert_eq!(e.param, "body.messages[0].tool_call_id");
    }
}
