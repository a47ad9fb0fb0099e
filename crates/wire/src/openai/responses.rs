//! The Responses API wire format (`POST /responses`), stateless: the one
//! home of its mapping onto a chat request. [`parse_responses`] reads a
//! body into chat messages and the chat request's fields (`input` items,
//! `instructions`, function `tools`, `text.format`, `max_output_tokens`),
//! reusing the chat reader's field readers for what the two share, and
//! naming each error as the Responses body spells the field; the response
//! object, its output items and the stream's events are built here too
//! ([`Meta`]). It must not do I/O or know HTTP.
//!
//! Stateless: nothing is kept. `store` (true or false) is accepted and
//! changes nothing; `previous_response_id` and `conversation` are refused
//! (send the whole conversation in `input`); `background` is refused.
//! `reasoning` input items are skipped (model-internal, and our lanes
//! have none to continue); an `item_reference` is refused (nothing is
//! stored to refer to).

use super::error::FieldError;
use super::request::{
    boolean, float, present, response_format, string, tools, type_error, unsigned,
};
use super::response::{Ids, Usage};
use edgecloud_core::request::{ChatMessage, Role, Sampling};
use edgecloud_core::structured::ResponseFormat;
use edgecloud_core::tools::{Tool, ToolCall, ToolChoice};
use serde_json::{json, Map, Value};

/// A Responses request read into the chat request's vocabulary, plus what
/// the response object echoes back.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesRequest {
    pub model: String,
    /// `instructions` (as a system message first) and the `input` items.
    pub messages: Vec<ChatMessage>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    pub format: Option<ResponseFormat>,
    pub stream: bool,
    /// The request's own values of the fields a response echoes.
    pub echo: Echo,
}

/// Fields a response object repeats from its request, as the request
/// spelled them (or their defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct Echo {
    pub instructions: Value,
    pub max_output_tokens: Value,
    pub metadata: Value,
    pub parallel_tool_calls: Value,
    pub store: Value,
    pub temperature: Value,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Value,
    pub top_p: Value,
}

impl ResponsesRequest {
    /// The sampling settings it asks for; what it leaves out keeps
    /// `defaults`.
    pub fn sampling(&self, defaults: Sampling) -> Sampling {
        let mut s = defaults;
        if let Some(n) = self.max_output_tokens {
            s.max_tokens = n;
        }
        if let Some(t) = self.temperature {
            s.temperature = t;
        }
        if let Some(p) = self.top_p {
            s.top_p = p;
        }
        if self.format.is_some() {
            s.response_format = self.format.clone();
        }
        if !self.tools.is_empty() {
            s.tools = self.tools.clone();
            s.tool_choice = self.tool_choice.clone();
        }
        s
    }
}

/// Fields refused because they need state this server does not keep.
const STATEFUL: &[(&str, &str)] = &[
    (
        "previous_response_id",
        "`previous_response_id` is not supported: this server keeps no responses \
         (stateless); send the whole conversation in `input`",
    ),
    (
        "conversation",
        "`conversation` is not supported: this server keeps no conversations \
         (stateless); send the whole conversation in `input`",
    ),
];

/// The one reader of a Responses body. Unknown fields are handed back
/// (clients send many optional ones); errors name the first bad field as
/// the body spells it (`input[2].content[0].type`, `tools[0].name`,
/// `text.format.schema`).
pub fn parse_responses(
    obj: &Map<String, Value>,
) -> Result<(ResponsesRequest, Map<String, Value>), FieldError> {
    let model = match present(obj, "model") {
        None => {
            return Err(FieldError::invalid("model", "`model` is required")
                .code("missing_required_parameter"))
        }
        Some(v) => string(v, "model")?.to_string(),
    };
    for (field, message) in STATEFUL {
        if present(obj, field).is_some() {
            return Err(FieldError::refused(*field, *message));
        }
    }
    if let Some(v) = present(obj, "background") {
        if boolean(v, "background")? {
            return Err(FieldError::refused(
                "background",
                "`background` is not supported: a response is answered while the request waits",
            ));
        }
    }
    let store = match present(obj, "store") {
        Some(v) => boolean(v, "store")?,
        None => true,
    };
    let instructions = match present(obj, "instructions") {
        Some(v) => Some(string(v, "instructions")?.to_string()),
        None => None,
    };
    let mut messages: Vec<ChatMessage> = instructions
        .iter()
        .map(|i| ChatMessage::system(i.clone()))
        .collect();
    match present(obj, "input") {
        None => {
            return Err(FieldError::invalid("input", "`input` is required")
                .code("missing_required_parameter"))
        }
        Some(Value::String(s)) => messages.push(ChatMessage::user(s.clone())),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                input_item(item, &format!("input[{i}]"), &mut messages)?;
            }
        }
        Some(other) => {
            return Err(type_error(
                "input",
                "a string or an array of input items",
                other,
            ))
        }
    }
    let max_output_tokens = match present(obj, "max_output_tokens") {
        Some(v) => Some(
            u32::try_from(unsigned(v, "max_output_tokens")?).map_err(|_| {
                FieldError::invalid("max_output_tokens", "`max_output_tokens` is too large")
            })?,
        ),
        None => None,
    };
    let stream = match present(obj, "stream") {
        Some(v) => boolean(v, "stream")?,
        None => false,
    };
    let (tools, tool_choice) = function_tools(obj)?;
    let format = text_format(present(obj, "text"))?;
    let parallel = match present(obj, "parallel_tool_calls") {
        Some(v) => boolean(v, "parallel_tool_calls")?,
        None => true,
    };
    let request = ResponsesRequest {
        model,
        messages,
        max_output_tokens,
        temperature: float(obj, "temperature")?,
        top_p: float(obj, "top_p")?,
        tools,
        tool_choice,
        format,
        stream,
        echo: Echo {
            instructions: instructions.map_or(Value::Null, Value::String),
            max_output_tokens: max_output_tokens.map_or(Value::Null, Value::from),
            metadata: present(obj, "metadata").cloned().unwrap_or(json!({})),
            parallel_tool_calls: Value::Bool(parallel),
            store: Value::Bool(store),
            temperature: present(obj, "temperature").cloned().unwrap_or(json!(1.0)),
            text: present(obj, "text")
                .cloned()
                .unwrap_or(json!({"format": {"type": "text"}})),
            tool_choice: present(obj, "tool_choice")
                .cloned()
                .unwrap_or(json!("auto")),
            tools: present(obj, "tools").cloned().unwrap_or(json!([])),
            top_p: present(obj, "top_p").cloned().unwrap_or(json!(1.0)),
        },
    };
    const READ: &[&str] = &[
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "text",
        "stream",
        "store",
        "background",
        "metadata",
        "parallel_tool_calls",
        "previous_response_id",
        "conversation",
    ];
    let extra = obj
        .iter()
        .filter(|(k, _)| !READ.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok((request, extra))
}

/// One `input` item, added to `messages`: a message (`role` and
/// `content`, `type` `message` or absent), a `function_call` (added to
/// the assistant turn before it, or a new one) or a
/// `function_call_output` (a tool message); `reasoning` is skipped.
fn input_item(v: &Value, at: &str, messages: &mut Vec<ChatMessage>) -> Result<(), FieldError> {
    let field = |f: &str| format!("{at}.{f}");
    let Value::Object(o) = v else {
        return Err(type_error(at, "an object", v));
    };
    let kind = match present(o, "type") {
        Some(t) => string(t, &field("type"))?,
        None if o.contains_key("role") => "message",
        None => {
            let p = field("type");
            return Err(FieldError::invalid(&p, format!("`{p}` is required"))
                .code("missing_required_parameter"));
        }
    };
    let required = |key: &str| -> Result<&str, FieldError> {
        match present(o, key) {
            Some(v) => string(v, &field(key)),
            None => {
                let p = field(key);
                Err(FieldError::invalid(&p, format!("`{p}` is required"))
                    .code("missing_required_parameter"))
            }
        }
    };
    match kind {
        "message" => {
            let role = match required("role")? {
                "user" => Role::User,
                "system" | "developer" => Role::System,
                "assistant" => Role::Assistant,
                other => {
                    return Err(FieldError::invalid(
                        field("role"),
                        format!(
                            "unsupported role `{other}`; expected user, system, developer or \
                             assistant"
                        ),
                    ))
                }
            };
            let content = content(present(o, "content"), &field("content"))?;
            messages.push(ChatMessage::new(role, content));
        }
        "function_call" => {
            let call = ToolCall {
                id: required("call_id")?.to_string(),
                kind: "function".into(),
                function: edgecloud_core::tools::FunctionCall {
                    name: required("name")?.to_string(),
                    arguments: required("arguments")?.to_string(),
                },
            };
            match messages.last_mut() {
                Some(m) if m.role == Role::Assistant => m.tool_calls.push(call),
                _ => messages.push(ChatMessage::tool_calls(vec![call])),
            }
        }
        "function_call_output" => {
            let id = required("call_id")?.to_string();
            let output = match present(o, "output") {
                Some(Value::String(s)) => s.clone(),
                Some(parts @ Value::Array(_)) => content(Some(parts), &field("output"))?,
                Some(other) => {
                    return Err(type_error(
                        &field("output"),
                        "a string or an array of text parts",
                        other,
                    ))
                }
                None => {
                    let p = field("output");
                    return Err(FieldError::invalid(&p, format!("`{p}` is required"))
                        .code("missing_required_parameter"));
                }
            };
            messages.push(ChatMessage::tool(id, output));
        }
        "reasoning" => {}
        "item_reference" => {
            return Err(FieldError::refused(
                field("type"),
                format!(
                    "`{at}` refers to a stored item, and this server stores none (stateless); \
                     send the item itself"
                ),
            ))
        }
        other => {
            return Err(FieldError::invalid(
                field("type"),
                format!(
                    "unsupported input item type `{other}`; expected message, function_call or \
                     function_call_output"
                ),
            ))
        }
    }
    Ok(())
}

/// A message's content: a string, or text parts (`input_text`, an earlier
/// answer's `output_text`), joined.
fn content(v: Option<&Value>, p: &str) -> Result<String, FieldError> {
    match v {
        None => {
            Err(FieldError::invalid(p, format!("`{p}` is required"))
                .code("missing_required_parameter"))
        }
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let pj = format!("{p}[{j}]");
                let kind = part.get("type").and_then(Value::as_str);
                if !matches!(kind, Some("input_text" | "output_text" | "text")) {
                    return Err(FieldError::invalid(
                        format!("{pj}.type"),
                        format!(
                            "only text content parts are supported (`{pj}.type` must be \
                             \"input_text\" or \"output_text\")"
                        ),
                    ));
                }
                match part.get("text") {
                    Some(t) => text.push_str(string(t, &format!("{pj}.text"))?),
                    None => {
                        return Err(FieldError::invalid(
                            format!("{pj}.text"),
                            format!("`{pj}.text` is required"),
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(type_error(p, "a string or an array of text parts", other)),
    }
}

/// `tools` (function tools, `{"type": "function", "name", "parameters",
/// ...}`) and `tool_choice`, read by the chat reader on their chat shape,
/// its errors named as this body spells the field.
fn function_tools(obj: &Map<String, Value>) -> Result<(Vec<Tool>, Option<ToolChoice>), FieldError> {
    let mut chat = Map::new();
    if let Some(v) = present(obj, "tools") {
        let Value::Array(items) = v else {
            return Err(type_error("tools", "an array", v));
        };
        let mut converted = Vec::with_capacity(items.len());
        for (i, t) in items.iter().enumerate() {
            let p = format!("tools[{i}]");
            let Value::Object(o) = t else {
                return Err(type_error(&p, "an object", t));
            };
            match o.get("type").and_then(Value::as_str) {
                Some("function") => {}
                other => {
                    return Err(FieldError::refused(
                        format!("{p}.type"),
                        format!(
                            "only function tools are supported, not `{}`",
                            other.unwrap_or("(none)")
                        ),
                    ))
                }
            }
            let mut function = o.clone();
            function.remove("type");
            converted.push(json!({"type": "function", "function": function}));
        }
        chat.insert("tools".into(), Value::Array(converted));
    }
    if let Some(v) = present(obj, "tool_choice") {
        let v = match v {
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
                json!({"type": "function", "function": {"name": o.get("name")}})
            }
            other => other.clone(),
        };
        chat.insert("tool_choice".into(), v);
    }
    tools(&chat, "").map_err(|mut e| {
        e.param = e.param.replacen(".function", "", 1);
        e.message = e.message.replace(".function", "");
        e
    })
}

/// `text.format`: `text`, `json_object` or `json_schema` (`name`,
/// `schema`, `strict` beside `type`), read by the chat reader on its chat
/// shape.
fn text_format(text: Option<&Value>) -> Result<Option<ResponseFormat>, FieldError> {
    let Some(text) = text else {
        return Ok(None);
    };
    let Value::Object(t) = text else {
        return Err(type_error("text", "an object", text));
    };
    let Some(format) = present(t, "format") else {
        return Ok(None);
    };
    let Value::Object(f) = format else {
        return Err(type_error("text.format", "an object", format));
    };
    let chat = match f.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let mut inner = f.clone();
            inner.remove("type");
            json!({"type": "json_schema", "json_schema": inner})
        }
        _ => format.clone(),
    };
    response_format(&chat, "text.format").map_err(|mut e| {
        e.param = e.param.replace("text.format.json_schema", "text.format");
        e.message = e.message.replace("text.format.json_schema", "text.format");
        e
    })
}

/// What every object and event of one response shares: its ids, what it
/// echoes of the request, and the next event's sequence number.
#[derive(Debug, Clone)]
pub struct Meta {
    pub ids: Ids,
    pub echo: Echo,
    sequence: u64,
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Completed,
    /// `max_output_tokens` was reached.
    Incomplete,
}

impl Meta {
    pub fn new(ids: Ids, echo: Echo) -> Self {
        Self {
            ids,
            echo,
            sequence: 0,
        }
    }

    /// The id of the message item.
    pub fn message_id(&self) -> String {
        format!("msg-{}", self.ids.id)
    }

    /// The id of the function-call item of call `i`.
    pub fn call_item_id(&self, i: usize) -> String {
        format!("fc-{}-{i}", self.ids.id)
    }

    /// The response object: `status` `in_progress`, `completed`,
    /// `incomplete` or `failed`.
    pub fn object(
        &self,
        status: &str,
        output: Vec<Value>,
        usage: Option<Usage>,
        error: Option<Value>,
    ) -> Value {
        let e = &self.echo;
        json!({
            "created_at": self.ids.created,
            "error": error,
            "id": self.ids.id,
            "incomplete_details": if status == "incomplete" {
                json!({"reason": "max_output_tokens"})
            } else {
                Value::Null
            },
            "instructions": e.instructions,
            "max_output_tokens": e.max_output_tokens,
            "metadata": e.metadata,
            "model": self.ids.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": e.parallel_tool_calls,
            "status": status,
            "store": e.store,
            "temperature": e.temperature,
            "text": e.text,
            "tool_choice": e.tool_choice,
            "tools": e.tools,
            "top_p": e.top_p,
            "truncation": "disabled",
            "usage": usage.map(|u| {
                let input = u.prompt_tokens.unwrap_or(0);
                let output = u.completion_tokens.unwrap_or(0);
                json!({
                    "input_tokens": input,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": output,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": input + output,
                })
            }),
        })
    }

    /// The assistant message item holding `text`.
    pub fn message_item(&self, text: Option<&str>, status: &str) -> Value {
        json!({
            "content": match text {
                Some(t) => json!([Self::text_part(t)]),
                None => json!([]),
            },
            "id": self.message_id(),
            "role": "assistant",
            "status": status,
            "type": "message",
        })
    }

    /// The id of the reasoning item (a reasoning model's thinking).
    pub fn reasoning_id(&self) -> String {
        format!("rs-{}", self.ids.id)
    }

    /// The reasoning item: the thinking as one `reasoning_text` content
    /// part (as OpenAI's open-weight models' responses carry it), no
    /// summary, nothing encrypted.
    pub fn reasoning_item(&self, text: Option<&str>, status: &str) -> Value {
        json!({
            "content": match text {
                Some(t) => json!([{"text": t, "type": "reasoning_text"}]),
                None => json!([]),
            },
            "id": self.reasoning_id(),
            "status": status,
            "summary": [],
            "type": "reasoning",
        })
    }

    /// An `output_text` content part.
    pub fn text_part(text: &str) -> Value {
        json!({"annotations": [], "logprobs": [], "text": text, "type": "output_text"})
    }

    /// The function-call item of call `i`; its arguments empty while in
    /// progress.
    pub fn call_item(&self, i: usize, call: &ToolCall, done: bool) -> Value {
        json!({
            "arguments": if done { call.function.arguments.as_str() } else { "" },
            "call_id": call.id,
            "id": self.call_item_id(i),
            "name": call.function.name,
            "status": if done { "completed" } else { "in_progress" },
            "type": "function_call",
        })
    }

    /// The output of a finished answer: its text as a message item (when
    /// it has text, or nothing else), then its calls.
    pub fn output(&self, reasoning: Option<&str>, text: &str, calls: &[ToolCall]) -> Vec<Value> {
        let mut out = Vec::with_capacity(calls.len() + 2);
        if let Some(r) = reasoning {
            out.push(self.reasoning_item(Some(r), "completed"));
        }
        if !text.is_empty() || calls.is_empty() {
            out.push(self.message_item(Some(text), "completed"));
        }
        out.extend(
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| self.call_item(i, c, true)),
        );
        out
    }

    /// One stream event: `event: TYPE` and its data with `type` and the
    /// next `sequence_number`.
    pub fn event(&mut self, kind: &str, mut fields: Map<String, Value>) -> String {
        fields.insert("type".into(), Value::String(kind.to_string()));
        fields.insert("sequence_number".into(), Value::from(self.sequence));
        self.sequence += 1;
        format!(
            "event: {kind}\ndata: {}\n\n",
            super::to_json(&Value::Object(fields))
        )
    }
}

/// The fields of an event, from a `json!` object.
pub fn fields(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(o) => o,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<ResponsesRequest, FieldError> {
        parse_responses(v.as_object().unwrap()).map(|(r, _)| r)
    }

    fn param_of(v: Value) -> String {
        parse(v).unwrap_err().param
    }

    #[test]
    fn items_map_onto_chat_messages() {
        let r = parse(json!({"model": "m", "instructions": "be brief", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather "},
                {"type": "input_text", "text": "in Oslo?"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather",
                "arguments": "{\"city\":\"Oslo\"}", "id": "fc_1", "status": "completed"},
            {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "12 C"},
            {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]},
            {"type": "reasoning", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 12 C."}]},
            {"role": "developer", "content": "again"}],
            "tools": [{"type": "function", "name": "get_weather", "description": "w",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
            "max_output_tokens": 9, "temperature": 0, "store": true, "stream": true}))
        .unwrap();
        let m = &r.messages;
        assert_eq!(m[0], ChatMessage::system("be brief"));
        assert_eq!(m[1], ChatMessage::user("weather in Oslo?"));
        assert_eq!(m[2].role, Role::Assistant);
        let calls: Vec<&str> = m[2].tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(calls, ["c1", "c2"]);
        assert_eq!(m[3], ChatMessage::tool("c1", "12 C"));
        assert_eq!(m[4], ChatMessage::tool("c2", "noon"));
        assert_eq!(m[5], ChatMessage::assistant("It is 12 C."));
        assert_eq!(m[6], ChatMessage::system("again"));
        assert_eq!(m.len(), 7);
        let s = r.sampling(Sampling::default());
        assert_eq!((s.max_tokens, s.temperature), (9, 0.0));
        assert_eq!(s.tools[0].function.name, "get_weather");
        assert_eq!(
            s.tool_choice,
            Some(ToolChoice::Function("get_weather".into()))
        );
        assert!(matches!(
            s.response_format,
            Some(ResponseFormat::JsonSchema { .. })
        ));
        assert!(r.stream);
        assert_eq!(r.echo.instructions, "be brief");
        let r = parse(json!({"model": "m", "input": "hi", "store": false})).unwrap();
        assert_eq!(r.messages, [ChatMessage::user("hi")]);
        assert_eq!(r.echo.store, false);
    }

    #[test]
    fn each_bad_or_refused_field_is_named_as_the_body_spells_it() {
        for (body, param) in [
            (json!({"input": "x"}), "model"),
            (json!({"model": "m"}), "input"),
            (json!({"model": "m", "input": 3}), "input"),
            (
                json!({"model": "m", "input": "x", "previous_response_id": "r1"}),
                "previous_response_id",
            ),
            (
                json!({"model": "m", "input": "x", "conversation": "c1"}),
                "conversation",
            ),
            (
                json!({"model": "m", "input": "x", "background": true}),
                "background",
            ),
            (json!({"model": "m", "input": ["x"]}), "input[0]"),
            (
                json!({"model": "m", "input": [{"content": "x"}]}),
                "input[0].type",
            ),
            (
                json!({"model": "m", "input": [{"type": "image"}]}),
                "input[0].type",
            ),
            (
                json!({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}),
                "input[0].type",
            ),
            (
                json!({"model": "m", "input": [{"role": "bot", "content": "x"}]}),
                "input[0].role",
            ),
            (
                json!({"model": "m", "input": [{"role": "user"}]}),
                "input[0].content",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
                "input[0].content[0].type",
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
                "input[0].call_id",
            ),
            (
                json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]}),
                "input[0].output",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "function", "name": "a b"}]}),
                "tools[0].name",
            ),
            (
                json!({"model": "m", "input": "x", "tool_choice": "sometimes"}),
                "tool_choice",
            ),
            (
                json!({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}),
                "text.format.type",
            ),
            (
                json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                    "schema": {"type": "string", "pattern": "a"}}}}),
                "text.format.schema",
            ),
            (
                json!({"model": "m", "input": "x", "max_output_tokens": -1}),
                "max_output_tokens",
            ),
            (
                json!({"model": "m", "input": "x", "temperature": "hot"}),
                "temperature",
            ),
            (
                json!({"model": "m", "input": "x", "stream": "yes"}),
                "stream",
            ),
            (json!({"model": "m", "input": "x", "store": "yes"}), "store"),
        ] {
            assert_eq!(param_of(body.clone()), param, "{body}");
        }
    }

    #[test]
    fn events_count_their_sequence_and_objects_echo_the_request() {
        let r = parse(json!({"model": "m", "input": "x", "metadata": {"k": "v"}})).unwrap();
        let ids = Ids {
            id: "resp-edgecloud-3".into(),
            created: 7,
            model: "m".into(),
        };
        let mut meta = Meta::new(ids, r.echo);
        let a = meta.event("response.created", Map::new());
        let b = meta.event("response.in_progress", Map::new());
        assert!(a.starts_with("event: response.created\ndata: {"), "{a}");
        assert!(a.contains("\"sequence_number\":0") && b.contains("\"sequence_number\":1"));
        let calls = [ToolCall::new("c1", "f", &json!({"a": 1}))];
        let o = meta.object(
            "completed",
            meta.output(None, "", &calls),
            Some(Usage::counted(3, 2)),
            None,
        );
        assert_eq!(o["object"], "response");
        assert_eq!(o["metadata"], json!({"k": "v"}));
        assert_eq!(o["tool_choice"], "auto");
        assert_eq!(o["output"][0]["type"], "function_call");
        assert_eq!(o["output"][0]["arguments"], "{\"a\":1}");
        assert_eq!(o["usage"]["total_tokens"], 5);
        let plain = meta.output(None, "hi", &[]);
        assert_eq!(plain[0]["content"][0]["text"], "hi");
    }
}
