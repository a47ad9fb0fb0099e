//! The request body of `POST /v1/messages` (and of
//! `/v1/messages/count_tokens`, the same body without `max_tokens`):
//! [`parse_messages`], the one reader, reads it into the chat vocabulary
//! (`system` as a system message; text, `tool_use` and `tool_result`
//! blocks as the messages, calls and tool answers of a chat request;
//! `tools`, `tool_choice`, `output_config.format`, the sampling fields),
//! naming the first offending field as Anthropic spells it
//! (`messages.1.content.0.tool_use_id`). It checks types, shapes and what
//! only this API has (a required `max_tokens`, `temperature` within 0 to
//! 1, a `tool_result` answering a `tool_use` the conversation made); the
//! ranges every API shares are `Request::validate`'s. It must not do I/O
//! or know HTTP.
//!
//! Refused by name rather than ignored: image and document blocks (the
//! lanes take text only), server tools (`web_search_...`, `bash_...`:
//! nothing here runs them), `container`, `mcp_servers` and
//! `context_management` (state and tools this server does not have).
//! Accepted and without effect: `metadata`, `thinking` (a model that
//! thinks does so whatever it says), `service_tier`, `inference_geo`,
//! `output_config.effort`, `cache_control` on blocks and tools,
//! `disable_parallel_tool_use`.

use crate::openai::{boolean, float, present, type_error, unsigned, FieldError};
use edgecloud_core::request::{ChatMessage, Role, Sampling};
use edgecloud_core::structured::ResponseFormat;
use edgecloud_core::tools::{check_tools, FunctionCall, FunctionDef, Tool, ToolCall, ToolChoice};
use serde_json::{Map, Value};

/// Which body is read: a message to create, or one whose tokens are
/// counted (no `max_tokens`, no `stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// `POST /v1/messages`.
    Create,
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
}

/// A Messages request read into the chat request's vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    pub model: String,
    /// `system` (a system message first) and `messages`, as chat
    /// messages: a user turn's `tool_result` blocks become tool messages
    /// before its text, an assistant turn's `tool_use` blocks its calls.
    pub messages: Vec<ChatMessage>,
    /// Required when creating (Anthropic requires it); absent when
    /// counting.
    pub max_tokens: Option<u32>,
    pub stop_sequences: Vec<String>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// `output_config.format` (`json_schema`).
    pub format: Option<ResponseFormat>,
    pub stream: bool,
}

impl MessagesRequest {
    /// The sampling settings it asks for; what it leaves out keeps
    /// `defaults`.
    pub fn sampling(&self, defaults: Sampling) -> Sampling {
        let mut s = defaults;
        if let Some(n) = self.max_tokens {
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
        if !self.stop_sequences.is_empty() {
            s.stop = self.stop_sequences.clone();
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

/// Fields refused because they need what this server does not have.
const REFUSED: &[(&str, &str)] = &[
    (
        "container",
        "`container` is not supported: this server runs no code-execution containers",
    ),
    (
        "mcp_servers",
        "`mcp_servers` is not supported: this server connects to no MCP servers; declare the \
         tools in `tools` and run them in the client",
    ),
    (
        "context_management",
        "`context_management` is not supported: this server keeps no context between requests \
         (send the conversation you want answered)",
    ),
];

/// Fields [`parse_messages`] reads; the rest are handed back.
const READ: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "metadata",
    "stream",
    "thinking",
    "output_config",
    "service_tier",
    "inference_geo",
    "container",
    "mcp_servers",
    "context_management",
];

fn required(param: &str) -> FieldError {
    FieldError::invalid(param, format!("`{param}`: field required"))
        .code("missing_required_parameter")
}

fn string<'a>(v: &'a Value, param: &str) -> Result<&'a str, FieldError> {
    crate::openai::string(v, param)
}

/// The one reader of a Messages body. Unknown fields are handed back (for
/// the caller's own extensions); errors name the first bad field as the
/// body spells it, in Anthropic's dotted form (`messages.2.content.0.type`).
pub fn parse_messages(
    obj: &Map<String, Value>,
    body: Body,
) -> Result<(MessagesRequest, Map<String, Value>), FieldError> {
    let model = match present(obj, "model") {
        None => return Err(required("model")),
        Some(v) => string(v, "model")?.to_string(),
    };
    for (field, message) in REFUSED {
        if present(obj, field).is_some() {
            return Err(FieldError::refused(*field, *message));
        }
    }
    let max_tokens = match (present(obj, "max_tokens"), body) {
        (None, Body::Create) => return Err(required("max_tokens")),
        (None, Body::CountTokens) | (Some(_), Body::CountTokens) => None,
        (Some(v), Body::Create) => Some(
            u32::try_from(unsigned(v, "max_tokens")?)
                .map_err(|_| FieldError::invalid("max_tokens", "`max_tokens` is too large"))?,
        ),
    };
    let mut messages = Vec::new();
    if let Some(v) = present(obj, "system") {
        let text = text_content(v, "system", "system")?;
        if !text.is_empty() {
            messages.push(ChatMessage::system(text));
        }
    }
    let items = match present(obj, "messages") {
        None => return Err(required("messages")),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(type_error("messages", "an array", other)),
    };
    if items.is_empty() {
        return Err(FieldError::invalid(
            "messages",
            "`messages`: at least one message is required",
        ));
    }
    let mut calls_made: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        turn(
            item,
            &format!("messages.{i}"),
            &mut messages,
            &mut calls_made,
        )?;
    }
    let stop_sequences = match present(obj, "stop_sequences") {
        None => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, s)| string(s, &format!("stop_sequences.{i}")).map(str::to_string))
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(type_error("stop_sequences", "an array of strings", other)),
    };
    let temperature = float(obj, "temperature")?;
    if let Some(t) = temperature {
        // Anthropic's range, narrower than the 0-2 every lane takes.
        if !(0.0..=1.0).contains(&t) {
            return Err(FieldError::invalid(
                "temperature",
                "`temperature` must be between 0 and 1",
            ));
        }
    }
    let top_k = match present(obj, "top_k") {
        Some(v) => Some(u32::try_from(unsigned(v, "top_k")?).unwrap_or(u32::MAX)),
        None => None,
    };
    if let Some(v) = present(obj, "metadata") {
        let Value::Object(m) = v else {
            return Err(type_error("metadata", "an object", v));
        };
        if let Some(u) = present(m, "user_id") {
            string(u, "metadata.user_id")?;
        }
    }
    if let Some(v) = present(obj, "thinking") {
        let Value::Object(t) = v else {
            return Err(type_error("thinking", "an object", v));
        };
        match present(t, "type")
            .map(|t| string(t, "thinking.type"))
            .transpose()?
        {
            Some("enabled" | "disabled" | "adaptive") => {}
            Some(other) => {
                return Err(FieldError::invalid(
                    "thinking.type",
                    format!(
                        "unsupported `thinking.type` `{other}`; expected enabled, disabled or \
                         adaptive"
                    ),
                ))
            }
            None => return Err(required("thinking.type")),
        }
    }
    let stream = match (present(obj, "stream"), body) {
        (Some(v), Body::Create) => boolean(v, "stream")?,
        _ => false,
    };
    let (tools, tool_choice) = tools(obj)?;
    let format = output_format(present(obj, "output_config"))?;
    let request = MessagesRequest {
        model,
        messages,
        max_tokens,
        stop_sequences,
        temperature,
        top_p: float(obj, "top_p")?,
        top_k,
        tools,
        tool_choice,
        format,
        stream,
    };
    let extra = obj
        .iter()
        .filter(|(k, _)| !READ.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok((request, extra))
}

/// `system`, or a `tool_result`'s `content`: a string, or text blocks
/// joined by newlines (an image among them is refused: the lanes take
/// text only).
fn text_content(v: &Value, at: &str, what: &str) -> Result<String, FieldError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for (j, b) in blocks.iter().enumerate() {
                let p = format!("{at}.{j}");
                let Value::Object(o) = b else {
                    return Err(type_error(&p, "a content block (an object)", b));
                };
                match block_type(o, &p)? {
                    "text" => parts.push(block_text(o, &p)?),
                    "image" | "document" => return Err(image_refused(&p, what)),
                    other => {
                        return Err(FieldError::invalid(
                            format!("{p}.type"),
                            format!(
                                "`{p}.type`: `{other}` blocks are not allowed in {what}; \
                                 expected text"
                            ),
                        ))
                    }
                }
            }
            Ok(parts.join("\n"))
        }
        other => Err(type_error(at, "a string or an array of text blocks", other)),
    }
}

fn block_type<'a>(o: &'a Map<String, Value>, at: &str) -> Result<&'a str, FieldError> {
    match present(o, "type") {
        Some(t) => string(t, &format!("{at}.type")),
        None => Err(required(&format!("{at}.type"))),
    }
}

fn block_text(o: &Map<String, Value>, at: &str) -> Result<String, FieldError> {
    match present(o, "text") {
        Some(t) => Ok(string(t, &format!("{at}.text"))?.to_string()),
        None => Err(required(&format!("{at}.text"))),
    }
}

fn image_refused(at: &str, what: &str) -> FieldError {
    FieldError::refused(
        format!("{at}.type"),
        format!(
            "`{at}.type`: image and document blocks are not supported yet (in {what}): \
             edgecloud's lanes take text only; send the text"
        ),
    )
}

/// One turn of `messages`, added to `messages`: a user turn's
/// `tool_result` blocks as tool messages (each answering a `tool_use` an
/// earlier assistant turn made, in `calls_made`), then its text; an
/// assistant turn's text and `tool_use` calls as one assistant message
/// (its `thinking` blocks skipped: model-internal).
fn turn(
    v: &Value,
    at: &str,
    messages: &mut Vec<ChatMessage>,
    calls_made: &mut Vec<String>,
) -> Result<(), FieldError> {
    let Value::Object(m) = v else {
        return Err(type_error(at, "an object", v));
    };
    let role = match present(m, "role") {
        None => return Err(required(&format!("{at}.role"))),
        Some(r) => match string(r, &format!("{at}.role"))? {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(FieldError::invalid(
                    format!("{at}.role"),
                    format!(
                        "`{at}.role`: unsupported role `{other}`; expected user or assistant \
                         (the system prompt is the top-level `system`)"
                    ),
                ))
            }
        },
    };
    let p = format!("{at}.content");
    let blocks = match present(m, "content") {
        None => return Err(required(&p)),
        Some(Value::String(s)) => {
            messages.push(ChatMessage::new(role, s.clone()));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        Some(other) => {
            return Err(type_error(
                &p,
                "a string or an array of content blocks",
                other,
            ))
        }
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let bp = format!("{p}.{j}");
        let Value::Object(o) = b else {
            return Err(type_error(&bp, "a content block (an object)", b));
        };
        let only = |wanted: Role, kind: &str| -> Result<(), FieldError> {
            if role == wanted {
                return Ok(());
            }
            Err(FieldError::invalid(
                format!("{bp}.type"),
                format!(
                    "`{bp}.type`: a `{kind}` block belongs in a{} {} turn",
                    if wanted == Role::Assistant { "n" } else { "" },
                    wanted.as_str()
                ),
            ))
        };
        match block_type(o, &bp)? {
            "text" => texts.push(block_text(o, &bp)?),
            "image" | "document" => return Err(image_refused(&bp, "messages")),
            "tool_use" => {
                only(Role::Assistant, "tool_use")?;
                let field = |k: &str| -> Result<&str, FieldError> {
                    let fp = format!("{bp}.{k}");
                    match present(o, k) {
                        Some(v) => string(v, &fp),
                        None => Err(required(&fp)),
                    }
                };
                let id = field("id")?.to_string();
                let name = field("name")?.to_string();
                let input = match present(o, "input") {
                    Some(v @ Value::Object(_)) => v.to_string(),
                    Some(other) => {
                        return Err(type_error(&format!("{bp}.input"), "an object", other))
                    }
                    None => return Err(required(&format!("{bp}.input"))),
                };
                calls_made.push(id.clone());
                calls.push(ToolCall {
                    id,
                    kind: "function".into(),
                    function: FunctionCall {
                        name,
                        arguments: input,
                    },
                });
            }
            "tool_result" => {
                only(Role::User, "tool_result")?;
                let ip = format!("{bp}.tool_use_id");
                let id = match present(o, "tool_use_id") {
                    Some(v) => string(v, &ip)?.to_string(),
                    None => return Err(required(&ip)),
                };
                if !calls_made.contains(&id) {
                    return Err(FieldError::invalid(
                        &ip,
                        format!(
                            "`{ip}`: `{id}` answers no `tool_use` block of an earlier assistant \
                             turn"
                        ),
                    ));
                }
                let mut content = match present(o, "content") {
                    Some(c) => text_content(c, &format!("{bp}.content"), "a tool_result")?,
                    None => String::new(),
                };
                if let Some(e) = present(o, "is_error") {
                    if boolean(e, &format!("{bp}.is_error"))? {
                        // The tool message has no flag of its own: the
                        // model reads it in the text.
                        content = format!("Error: {content}");
                    }
                }
                results.push(ChatMessage::tool(id, content));
            }
            // Model-internal; our lanes have none to continue.
            "thinking" | "redacted_thinking" if role == Role::Assistant => {}
            other => {
                return Err(FieldError::invalid(
                    format!("{bp}.type"),
                    format!(
                        "`{bp}.type`: unsupported content block type `{other}`; expected text, \
                         tool_use or tool_result"
                    ),
                ))
            }
        }
    }
    let text = texts.join("\n");
    match role {
        Role::Assistant => messages.push(ChatMessage {
            tool_calls: calls,
            ..ChatMessage::assistant(text)
        }),
        _ => {
            let answered_only = !results.is_empty() && text.is_empty();
            messages.extend(results);
            if !answered_only {
                messages.push(ChatMessage::user(text));
            }
        }
    }
    Ok(())
}

/// `tools` (custom tools: `name`, `description`, `input_schema`) and
/// `tool_choice` (`auto`, `any`, `tool` with `name`, `none`), checked by
/// the one check every API's tools get, its errors named as this body
/// spells them (`tools.1.input_schema`).
fn tools(obj: &Map<String, Value>) -> Result<(Vec<Tool>, Option<ToolChoice>), FieldError> {
    let mut tools = Vec::new();
    match present(obj, "tools") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, t) in items.iter().enumerate() {
                let p = format!("tools.{i}");
                let Value::Object(o) = t else {
                    return Err(type_error(&p, "an object", t));
                };
                match present(o, "type")
                    .map(|k| string(k, &format!("{p}.type")))
                    .transpose()?
                {
                    None | Some("custom") => {}
                    Some(other) => {
                        return Err(FieldError::refused(
                            format!("{p}.type"),
                            format!(
                                "`{p}.type`: server tools (`{other}`) are not supported: nothing \
                                 here runs them; declare a custom tool (name, description, \
                                 input_schema) and run it in the client"
                            ),
                        ))
                    }
                }
                let name = match present(o, "name") {
                    Some(v) => string(v, &format!("{p}.name"))?.to_string(),
                    None => return Err(required(&format!("{p}.name"))),
                };
                let description = match present(o, "description") {
                    Some(v) => Some(string(v, &format!("{p}.description"))?.to_string()),
                    None => None,
                };
                let schema = match present(o, "input_schema") {
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(other) => {
                        return Err(type_error(&format!("{p}.input_schema"), "an object", other))
                    }
                    None => return Err(required(&format!("{p}.input_schema"))),
                };
                tools.push(Tool {
                    kind: "function".into(),
                    function: FunctionDef {
                        name,
                        description,
                        parameters: Some(schema),
                        strict: None,
                    },
                });
            }
        }
        Some(other) => return Err(type_error("tools", "an array", other)),
    }
    let choice = match present(obj, "tool_choice") {
        None => None,
        Some(Value::Object(o)) => {
            if let Some(v) = present(o, "disable_parallel_tool_use") {
                boolean(v, "tool_choice.disable_parallel_tool_use")?;
            }
            Some(match block_type(o, "tool_choice")? {
                "auto" => ToolChoice::Auto,
                "any" => ToolChoice::Required,
                "none" => ToolChoice::None,
                "tool" => match present(o, "name") {
                    Some(n) => ToolChoice::Function(string(n, "tool_choice.name")?.to_string()),
                    None => return Err(required("tool_choice.name")),
                },
                other => {
                    return Err(FieldError::invalid(
                        "tool_choice.type",
                        format!(
                            "unsupported `tool_choice.type` `{other}`; expected auto, any, tool or \
                             none"
                        ),
                    ))
                }
            })
        }
        Some(other) => return Err(type_error("tool_choice", "an object", other)),
    };
    check_tools(&tools, choice.as_ref()).map_err(|e| {
        let param = anthropic_param(&e.param);
        let message = e.message.replace(&e.param, &param);
        match e.schema {
            Some(_) => FieldError::refused(
                param,
                format!(
                    "{message}; supported: type, properties, required, additionalProperties, \
                     items, enum, const, minItems, maxItems, minLength, maxLength and annotations"
                ),
            )
            .code("unsupported_schema_keyword"),
            None => FieldError::invalid(param, message),
        }
    })?;
    Ok((tools, choice))
}

/// A field `check_tools` names in the chat spelling, in this body's
/// (`tools[1].function.parameters` is `tools.1.input_schema`).
fn anthropic_param(chat: &str) -> String {
    let Some(rest) = chat.strip_prefix("tools[") else {
        return chat.to_string();
    };
    let Some((i, field)) = rest.split_once(']') else {
        return chat.to_string();
    };
    let field = match field {
        ".function.parameters" => ".input_schema",
        ".function.name" => ".name",
        other => other,
    };
    format!("tools.{i}{field}")
}

/// `output_config`: its `format` (`{"type": "json_schema", "schema"}`)
/// through the grammar path every structured answer takes; `effort` is
/// accepted without effect.
fn output_format(v: Option<&Value>) -> Result<Option<ResponseFormat>, FieldError> {
    let Some(v) = v else {
        return Ok(None);
    };
    let Value::Object(c) = v else {
        return Err(type_error("output_config", "an object", v));
    };
    let Some(f) = present(c, "format") else {
        return Ok(None);
    };
    let Value::Object(f) = f else {
        return Err(type_error("output_config.format", "an object", f));
    };
    match block_type(f, "output_config.format")? {
        "json_schema" => {}
        other => {
            return Err(FieldError::invalid(
                "output_config.format.type",
                format!("unsupported `output_config.format.type` `{other}`; expected json_schema"),
            ))
        }
    }
    let schema = match present(f, "schema") {
        Some(s @ Value::Object(_)) => s.clone(),
        Some(other) => {
            return Err(type_error(
                "output_config.format.schema",
                "an object",
                other,
            ))
        }
        None => return Err(required("output_config.format.schema")),
    };
    let format = ResponseFormat::json_schema("output", schema);
    format.check().map_err(|e| {
        FieldError::refused(
            "output_config.format.schema",
            format!(
                "`output_config.format.schema`: {e}; supported: type, properties, required, \
                 additionalProperties, items, enum, const, minItems, maxItems, minLength, \
                 maxLength and annotations"
            ),
        )
        .code("unsupported_schema_keyword")
    })?;
    Ok(Some(format))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<MessagesRequest, FieldError> {
        parse_messages(v.as_object().unwrap(), Body::Create).map(|(r, _)| r)
    }

    fn param_of(v: Value) -> String {
        parse(v).unwrap_err().param
    }

    fn weather() -> Value {
        json!([{"name": "get_weather", "description": "Weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]}}])
    }

    #[test]
    fn blocks_map_onto_chat_messages_calls_and_tool_answers() {
        let r = parse(json!({"model": "m", "max_tokens": 30,
            "system": [{"type": "text", "text": "Be brief."},
                {"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "Weather in Oslo and Rome?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "two calls", "signature": "s"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 C"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
                        "content": [{"type": "text", "text": "no data"}]},
                    {"type": "text", "text": "And tomorrow?"}]}],
            "tools": weather(), "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["\n\nHuman:"], "temperature": 0.5, "top_p": 0.9, "top_k": 5,
            "metadata": {"user_id": "u1"}, "thinking": {"type": "disabled"},
            "stream": true, "edgecloud": {"policy": "race"}}))
        .unwrap();
        let m = &r.messages;
        assert_eq!(m[0], ChatMessage::system("Be brief.\nBe kind."));
        assert_eq!(m[1], ChatMessage::user("Weather in Oslo and Rome?"));
        assert_eq!(m[2].role, Role::Assistant);
        assert_eq!(m[2].content, "Checking.");
        assert_eq!(m[2].tool_calls.len(), 2);
        assert_eq!(m[2].tool_calls[0].id, "toolu_1");
        assert_eq!(m[2].tool_calls[0].function.arguments, r#"{"city":"Oslo"}"#);
        assert_eq!(m[3], ChatMessage::tool("toolu_1", "12 C"));
        assert_eq!(m[4], ChatMessage::tool("toolu_2", "Error: no data"));
        assert_eq!(m[5], ChatMessage::user("And tomorrow?"));
        assert_eq!(m.len(), 6);
        let s = r.sampling(Sampling::default());
        assert_eq!(
            (s.max_tokens, s.temperature, s.top_p, s.top_k),
            (30, 0.5, 0.9, 5)
        );
        assert_eq!(s.stop, ["\n\nHuman:"]);
        assert_eq!(s.tools[0].function.name, "get_weather");
        assert_eq!(s.tool_choice, Some(ToolChoice::Required));
        assert!(r.stream);
        // A turn of tool results alone adds no empty user message.
        let r = parse(json!({"model": "m", "max_tokens": 5, "tools": weather(), "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}],
            "tool_choice": {"type": "tool", "name": "get_weather"}}))
        .unwrap();
        assert_eq!(r.messages.last(), Some(&ChatMessage::tool("t", "")));
        assert_eq!(
            r.tool_choice,
            Some(ToolChoice::Function("get_weather".into()))
        );
    }

    #[test]
    fn count_tokens_needs_no_max_tokens_and_output_config_is_a_schema() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "output_config": {"effort": "low", "format": {"type": "json_schema",
                "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}});
        let (r, _) = parse_messages(body.as_object().unwrap(), Body::CountTokens).unwrap();
        assert_eq!(r.max_tokens, None);
        assert!(matches!(r.format, Some(ResponseFormat::JsonSchema { .. })));
        assert_eq!(param_of(body), "max_tokens");
    }

    #[test]
    fn each_bad_or_refused_field_is_named_as_the_body_spells_it() {
        let user = json!([{"role": "user", "content": "x"}]);
        let with = |k: &str, v: Value| {
            let mut b = json!({"model": "m", "max_tokens": 5, "messages": user});
            b[k] = v;
            b
        };
        let call = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}}]});
        for (body, param) in [
            (json!({"max_tokens": 5, "messages": user}), "model"),
            (json!({"model": "m", "messages": user}), "max_tokens"),
            (json!({"model": "m", "max_tokens": 5}), "messages"),
            (with("messages", json!([])), "messages"),
            (with("max_tokens", json!(-1)), "max_tokens"),
            (with("max_tokens", json!("5")), "max_tokens"),
            (
                with("messages", json!([{"role": "system", "content": "x"}])),
                "messages.0.role",
            ),
            (
                with("messages", json!([{"role": "user"}])),
                "messages.0.content",
            ),
            (
                with(
                    "messages",
                    json!([{"role": "user", "content": [{"type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]),
                ),
                "messages.0.content.0.type",
            ),
            (
                with(
                    "messages",
                    json!([{"role": "user", "content": [{"type": "video"}]}]),
                ),
                "messages.0.content.0.type",
            ),
            (
                with(
                    "messages",
                    json!([{"role": "user", "content": [{"text": "x"}]}]),
                ),
                "messages.0.content.0.type",
            ),
            (
                with(
                    "messages",
                    json!([{"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}]),
                ),
                "messages.0.content.0.tool_use_id",
            ),
            (
                with(
                    "messages",
                    json!([{"role": "user", "content": "x"}, call,
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2"}]}]),
                ),
                "messages.2.content.0.tool_use_id",
            ),
            (
                with(
                    "messages",
                    json!([{"role": "user", "content": [
                    {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]),
                ),
                "messages.0.content.0.type",
            ),
            (
                with(
                    "messages",
                    json!([{"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}]),
                ),
                "messages.0.content.0.input",
            ),
            (
                with(
                    "messages",
                    json!([{"role": "user", "content": "x"}, call,
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                        "content": [{"type": "image", "source": {}}]}]}]),
                ),
                "messages.2.content.0.content.0.type",
            ),
            (with("system", json!(3)), "system"),
            (with("system", json!([{"type": "image"}])), "system.0.type"),
            (with("temperature", json!(1.5)), "temperature"),
            (with("temperature", json!("hot")), "temperature"),
            (with("top_k", json!(-3)), "top_k"),
            (with("stop_sequences", json!("x")), "stop_sequences"),
            (with("stop_sequences", json!(["a", 3])), "stop_sequences.1"),
            (with("metadata", json!("u")), "metadata"),
            (with("stream", json!("yes")), "stream"),
            (with("thinking", json!({"type": "maybe"})), "thinking.type"),
            (with("tools", json!({})), "tools"),
            (
                with("tools", json!([{"name": "f"}])),
                "tools.0.input_schema",
            ),
            (
                with(
                    "tools",
                    json!([{"type": "web_search_20250305", "name": "web_search"}]),
                ),
                "tools.0.type",
            ),
            (
                with(
                    "tools",
                    json!([{"name": "a b", "input_schema": {"type": "object"}}]),
                ),
                "tools.0.name",
            ),
            (
                with(
                    "tools",
                    json!([{"name": "f", "input_schema": {"type": "object",
                    "properties": {"x": {"type": "string", "pattern": "a+"}}}}]),
                ),
                "tools.0.input_schema",
            ),
            (with("tool_choice", json!("auto")), "tool_choice"),
            (
                with("tool_choice", json!({"type": "sometimes"})),
                "tool_choice.type",
            ),
            (
                with("tool_choice", json!({"type": "tool"})),
                "tool_choice.name",
            ),
            (
                with("tool_choice", json!({"type": "tool", "name": "f"})),
                "tool_choice",
            ),
            (with("tool_choice", json!({"type": "any"})), "tool_choice"),
            (with("container", json!("c1")), "container"),
            (with("mcp_servers", json!([])), "mcp_servers"),
            (
                with("output_config", json!({"format": {"type": "xml"}})),
                "output_config.format.type",
            ),
            (
                with(
                    "output_config",
                    json!({"format": {"type": "json_schema",
                    "schema": {"type": "string", "pattern": "a"}}}),
                ),
                "output_config.format.schema",
            ),
        ] {
            assert_eq!(param_of(body.clone()), param, "{body}");
        }
        let e = parse(with(
            "messages",
            json!([{"role": "user", "content": [{"type": "image"}]}]),
        ))
        .unwrap_err();
        assert!(e.message.contains("not supported"), "{}", e.message);
        assert_eq!(e.kind, crate::openai::FieldErrorKind::Refused);
    }
}
