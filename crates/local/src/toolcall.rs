//! Tool calls on the local lane (issue 24): how a model is told about the
//! request's tools, the grammar its call is decoded under, and how its
//! answer becomes OpenAI's `tool_calls`.
//!
//! A model family writes calls its own way ([`CallStyle`]):
//! - `Hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
//!   (Qwen2.5, Hermes and other ChatML models whose template renders
//!   `tools` with `<tool_call>`);
//! - `Llama3`: `{"name": ..., "parameters": {...}}`, maybe after the
//!   `<|python_tag|>` token (Llama 3.1-3.3 templates).
//!
//! A template that renders tools itself (it names `tools` and one of those
//! syntaxes) is *native*: it gets the tools and the conversation (calls
//! and `role: "tool"` answers included) as the model was trained on them,
//! rendered by `jinja`. Any other template (SmolLM2's plain ChatML, a
//! Llama 3.0 template) gets the Hermes syntax described in a system
//! message, assistant calls written as `<tool_call>` blocks and tool
//! answers as `<tool_response>` blocks in user turns.
//!
//! Decoding: `tool_choice` `required` or a named function forces the call
//! from the first token (the grammar starts at the call's opening); `auto`
//! lets the model write text and constrains it only once the family's
//! marker appears (llama.cpp's lazy grammar); `none` does not show the
//! tools to the model at all. One call per answer: after it, the grammar
//! allows only the end of the answer. Text from the marker on is never
//! streamed as content (`StopMatcher`'s held markers); a forced call
//! streams nothing.
//!
//! This module must not decode or sample: it builds text, grammars and
//! parses answers.

use super::jinja;
use super::pick::GrammarSpec;
use super::LocalError;
use edgecloud_core::request::{ChatMessage, Role, Sampling};
use edgecloud_core::structured::InvalidAnswer;
use edgecloud_core::tools::{Tool, ToolCall, ToolChoice};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// How a model family writes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CallStyle {
    /// `<tool_call>{"name", "arguments"}</tool_call>`.
    Hermes,
    /// `{"name", "parameters"}` (after `<|python_tag|>`).
    Llama3,
}

impl CallStyle {
    /// The key a call's arguments go under.
    fn arguments_key(self) -> &'static str {
        match self {
            CallStyle::Hermes => "arguments",
            CallStyle::Llama3 => "parameters",
        }
    }

    /// Where a call starts in the model's text (what the lazy grammar
    /// waits for, and what is never streamed as content).
    pub(super) fn markers(self) -> Vec<String> {
        match self {
            CallStyle::Hermes => vec![HERMES_OPEN.into()],
            CallStyle::Llama3 => vec![PYTHON_TAG.into(), "{\"name\"".into()],
        }
    }
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";

/// What a chat template does with tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ToolTemplate {
    pub(super) style: CallStyle,
    /// It renders `tools`, calls and tool answers itself.
    pub(super) native: bool,
}

impl ToolTemplate {
    /// Reads a Jinja template's text (`None`: no Jinja text, a named or
    /// conventional template).
    pub(super) fn detect(jinja: Option<&str>) -> Self {
        let generic = ToolTemplate {
            style: CallStyle::Hermes,
            native: false,
        };
        let Some(t) = jinja else {
            return generic;
        };
        if !t.contains("tools") {
            return generic;
        }
        if t.contains(HERMES_OPEN) {
            ToolTemplate {
                style: CallStyle::Hermes,
                native: true,
            }
        } else if t.contains("<|start_header_id|>") && t.contains("parameters") {
            ToolTemplate {
                style: CallStyle::Llama3,
                native: true,
            }
        } else {
            generic
        }
    }

    /// Describes it, for logs and reports.
    pub(super) fn describe(self) -> &'static str {
        match (self.style, self.native) {
            (CallStyle::Hermes, true) => "hermes (template)",
            (CallStyle::Llama3, true) => "llama3 (template)",
            (_, false) => "hermes (system prompt)",
        }
    }
}

/// What one job's tools mean on this lane.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ToolJob {
    pub(super) style: CallStyle,
    /// The call is forced from the first token.
    pub(super) forced: bool,
    /// The model may call (not `none`).
    pub(super) offered: bool,
}

impl ToolJob {
    /// The tool side of a job, or `None` when it has neither tools nor
    /// tool messages (it renders as any other job).
    pub(super) fn of(
        template: ToolTemplate,
        sampling: &Sampling,
        messages: &[ChatMessage],
    ) -> Option<Self> {
        let choice = sampling.effective_tool_choice();
        let history = messages
            .iter()
            .any(|m| m.role == Role::Tool || !m.tool_calls.is_empty());
        if choice == ToolChoice::None && !history {
            return None;
        }
        Some(ToolJob {
            style: template.style,
            forced: choice.forces_call(),
            offered: choice != ToolChoice::None,
        })
    }

    /// Text never streamed as content: from a call's marker on, or all of
    /// it when the call is forced.
    pub(super) fn held_markers(&self) -> Option<Vec<String>> {
        match (self.offered, self.forced) {
            (false, _) => None,
            (true, true) => Some(Vec::new()),
            (true, false) => Some(self.style.markers()),
        }
    }
}

/// The prompt of a job with tools, rendered by the model's own Jinja
/// template (`jinja_text`); `None` when there is no Jinja text: the caller
/// renders `messages` (already in the generic form) its usual way.
pub(super) fn render(
    template: ToolTemplate,
    jinja_text: Option<&str>,
    messages: &[ChatMessage],
    sampling: &Sampling,
    eos_token: &str,
) -> Result<Result<String, Vec<ChatMessage>>, LocalError> {
    let offered: Vec<Tool> = match sampling.effective_tool_choice() {
        ToolChoice::None => Vec::new(),
        ToolChoice::Function(name) => sampling
            .tools
            .iter()
            .filter(|t| t.function.name == name)
            .cloned()
            .collect(),
        _ => sampling.tools.clone(),
    };
    let (messages, tools) = if template.native {
        (messages.to_vec(), offered)
    } else {
        (generic_messages(messages, &offered), Vec::new())
    };
    let Some(text) = jinja_text else {
        return Ok(Err(messages));
    };
    render_jinja(text, &messages, &tools, eos_token)
        .map(Ok)
        .map_err(|detail| LocalError::ChatTemplate {
            detail: format!("the model's template could not render this conversation: {detail}"),
        })
}

/// A conversation (and the tools it offers, perhaps none) rendered by a
/// Jinja chat template with the context Hugging Face's
/// `apply_chat_template` gives it, ending with the assistant's turn.
pub(super) fn render_jinja(
    template: &str,
    messages: &[ChatMessage],
    tools: &[Tool],
    eos_token: &str,
) -> Result<String, String> {
    let context = json!({
        "messages": messages.iter().map(message_json).collect::<Vec<_>>(),
        "tools": if tools.is_empty() { Value::Null } else { json!(tools) },
        "add_generation_prompt": true,
        // The tokenizer adds the model's BOS itself; in the text it would
        // be there twice.
        "bos_token": "",
        "eos_token": eos_token,
    });
    jinja::render(template, &context)
}

/// A message as chat templates read it: a call's arguments as an object
/// (templates write them with `tojson`).
fn message_json(m: &ChatMessage) -> Value {
    let mut v = json!({"role": m.role.as_str(), "content": m.content});
    if !m.tool_calls.is_empty() {
        v["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| {
                let args = serde_json::from_str::<Value>(&c.function.arguments)
                    .unwrap_or_else(|_| Value::String(c.function.arguments.clone()));
                json!({"id": c.id, "type": "function",
                    "function": {"name": c.function.name, "arguments": args}})
            })
            .collect();
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    v
}

/// The conversation for a template without tool syntax: the tools and the
/// Hermes call syntax in the system message, calls as `<tool_call>` blocks,
/// tool answers (consecutive ones together) as `<tool_response>` blocks in
/// a user turn.
pub(super) fn generic_messages(messages: &[ChatMessage], tools: &[Tool]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    let mut rest = messages;
    if !tools.is_empty() {
        let (system, tail) = match messages.first() {
            Some(m) if m.role == Role::System => (Some(m.content.as_str()), &messages[1..]),
            _ => (None, messages),
        };
        out.push(ChatMessage::system(tool_instructions(system, tools)));
        rest = tail;
    }
    for m in rest {
        match m.role {
            Role::Tool => {
                let block = format!("<tool_response>\n{}\n</tool_response>", m.content);
                match out.last_mut() {
                    Some(prev)
                        if prev.role == Role::User
                            && prev.content.ends_with("</tool_response>") =>
                    {
                        prev.content.push('\n');
                        prev.content.push_str(&block);
                    }
                    _ => out.push(ChatMessage::user(block)),
                }
            }
            Role::Assistant if !m.tool_calls.is_empty() => {
                let mut text = m.content.clone();
                for c in &m.tool_calls {
                    let args = serde_json::from_str::<Value>(&c.function.arguments)
                        .unwrap_or_else(|_| Value::String(c.function.arguments.clone()));
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    // Name first, as models write it (a JSON map would
                    // sort the keys).
                    text.push_str(&format!(
                        "{HERMES_OPEN}\n{{\"name\": {}, \"arguments\": {}}}\n{HERMES_CLOSE}",
                        json!(c.function.name),
                        jinja::python_json(&args, None)
                    ));
                }
                out.push(ChatMessage::assistant(text));
            }
            _ => out.push(ChatMessage::new(m.role, m.content.clone())),
        }
    }
    out
}

/// The system message that teaches a model without tool syntax to call
/// (Hermes' wording of the format, which many ChatML models have seen).
fn tool_instructions(system: Option<&str>, tools: &[Tool]) -> String {
    let mut s = String::new();
    if let Some(sys) = system {
        s.push_str(sys);
        s.push_str("\n\n");
    }
    s.push_str(
        "# Tools\n\nYou may call one of these functions to answer the user.\n\n\
         Function signatures, within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        s.push('\n');
        s.push_str(&jinja::python_json(&json!(t), None));
    }
    s.push_str(
        "\n</tools>\n\nTo call a function, answer with a JSON object with the function's name \
         and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// The grammar of one call of the offered tools, or `None` when the model
/// may not call. Forced: it constrains from the first token; else it waits
/// for the style's markers.
pub(super) fn grammar(
    job: &ToolJob,
    sampling: &Sampling,
) -> Result<Option<GrammarSpec>, LocalError> {
    if !job.offered {
        return Ok(None);
    }
    let choice = sampling.effective_tool_choice();
    let tools: Vec<&Tool> = sampling
        .tools
        .iter()
        .filter(|t| match &choice {
            ToolChoice::Function(name) => &t.function.name == name,
            _ => true,
        })
        .collect();
    // Written by hand, not through serde_json::Value: llama.cpp keeps the
    // keys' order, and the name must come before the arguments.
    let key = job.style.arguments_key();
    let alternatives: Vec<String> = tools
        .iter()
        .map(|t| {
            format!(
                r#"{{"type": "object", "properties": {{"name": {{"const": {}}}, "{key}": {}}}, "required": ["name", "{key}"], "additionalProperties": false}}"#,
                json!(t.function.name),
                t.parameters()
            )
        })
        .collect();
    let schema = match alternatives.as_slice() {
        [one] => one.clone(),
        many => format!(r#"{{"anyOf": [{}]}}"#, many.join(", ")),
    };
    let json_grammar =
        llama_cpp_2::json_schema_to_grammar(&schema).map_err(|e| LocalError::Grammar {
            detail: format!("tools: {e}"),
        })?;
    let call_rule = match job.style {
        CallStyle::Hermes => {
            format!(r#"tool-call-root ::= "{HERMES_OPEN}" "\n"? root "\n"? "{HERMES_CLOSE}""#)
        }
        CallStyle::Llama3 => format!(r#"tool-call-root ::= "{PYTHON_TAG}"? root"#),
    };
    Ok(Some(GrammarSpec {
        text: format!("{json_grammar}\n{call_rule}\n"),
        root: "tool-call-root".into(),
        triggers: (!job.forced).then(|| job.style.markers()),
    }))
}

/// An answer split into the text before its call and the calls, with ids.
/// A call that does not parse is an [`InvalidAnswer`].
pub(super) fn parse(
    style: CallStyle,
    text: &str,
) -> Result<(String, Vec<ToolCall>), InvalidAnswer> {
    let start = match style {
        CallStyle::Hermes => text.find(HERMES_OPEN),
        CallStyle::Llama3 => text
            .find(PYTHON_TAG)
            .or_else(|| text.find("{\"name\""))
            .or_else(|| {
                text.trim_start()
                    .starts_with('{')
                    .then(|| text.len() - text.trim_start().len())
            }),
    };
    let Some(start) = start else {
        return Ok(bare_call(style, text).map_or_else(
            || (text.to_string(), Vec::new()),
            |call| (String::new(), vec![call]),
        ));
    };
    let content = text[..start].trim_end().to_string();
    let mut calls = Vec::new();
    let mut rest = &text[start..];
    loop {
        let body = match style {
            CallStyle::Hermes => match rest.strip_prefix(HERMES_OPEN) {
                Some(after) => after,
                None => break,
            },
            CallStyle::Llama3 => rest.strip_prefix(PYTHON_TAG).unwrap_or(rest),
        };
        let body = body.trim_start();
        let mut values = serde_json::Deserializer::from_str(body).into_iter::<Value>();
        let call = match values.next() {
            Some(Ok(v)) => v,
            Some(Err(e)) => return Err(invalid(format!("the tool call is not valid JSON: {e}"))),
            None => return Err(invalid("the tool call is empty".into())),
        };
        calls.push(to_call(style, call)?);
        rest = body[values.byte_offset()..].trim_start();
        if style == CallStyle::Hermes {
            rest = rest.strip_prefix(HERMES_CLOSE).unwrap_or(rest).trim_start();
        }
        if style == CallStyle::Llama3 || rest.is_empty() {
            break;
        }
    }
    Ok((content, calls))
}

/// An answer cut short (by `max_tokens` or the context) inside a call:
/// the text before the call, and the call as far as it got, its
/// arguments the partial JSON text they are (OpenAI returns a call cut
/// by `length` so: the model's answer, whole as far as it went). `None`
/// when the call's name was not written whole.
pub(super) fn parse_cut(style: CallStyle, text: &str) -> Option<(String, Vec<ToolCall>)> {
    let start = style
        .markers()
        .iter()
        .filter_map(|m| text.find(m.as_str()))
        .min()?;
    let content = text[..start].trim_end().to_string();
    let body = &text[start..];
    let body = body
        .strip_prefix(HERMES_OPEN)
        .or_else(|| body.strip_prefix(PYTHON_TAG))
        .unwrap_or(body);
    let after_key = |s: &str, key: &str| -> Option<usize> {
        let at = s.find(&format!("\"{key}\""))? + key.len() + 2;
        let colon = s[at..].find(':')?;
        Some(at + colon + 1)
    };
    let name_at = after_key(body, "name")?;
    let rest = body[name_at..].trim_start();
    let name = serde_json::Deserializer::from_str(rest)
        .into_iter::<String>()
        .next()?
        .ok()?;
    let arguments = [style.arguments_key(), "arguments", "parameters"]
        .iter()
        .find_map(|k| after_key(body, k))
        .map(|at| {
            body[at..]
                .trim()
                .trim_end_matches(HERMES_CLOSE)
                .trim_end()
                .to_string()
        })
        .unwrap_or_default();
    let call = ToolCall {
        id: call_id(),
        kind: "function".into(),
        function: edgecloud_core::tools::FunctionCall { name, arguments },
    };
    Some((content, vec![call]))
}

/// An answer that is nothing but a call's JSON object (maybe in a
/// Markdown code fence), without the family's marker: small models write
/// that when not held to their syntax, and it is a call all the same.
fn bare_call(style: CallStyle, text: &str) -> Option<ToolCall> {
    let t = text.trim();
    let t = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|inner| inner.trim_end().strip_suffix("```"))
        .unwrap_or(t)
        .trim();
    let v: Value = serde_json::from_str(t).ok()?;
    let o = v.as_object()?;
    let has_args = o.get(style.arguments_key()).is_some_and(Value::is_object)
        || o.get("arguments").is_some_and(Value::is_object);
    (o.get("name").is_some_and(Value::is_string) && has_args)
        .then(|| to_call(style, v).ok())
        .flatten()
}

fn to_call(style: CallStyle, v: Value) -> Result<ToolCall, InvalidAnswer> {
    let Value::Object(mut o) = v else {
        return Err(invalid("the tool call is not a JSON object".into()));
    };
    let Some(Value::String(name)) = o.remove("name") else {
        return Err(invalid("the tool call has no `name`".into()));
    };
    let args = o
        .remove(style.arguments_key())
        .or_else(|| o.remove("arguments"))
        .or_else(|| o.remove("parameters"))
        .unwrap_or_else(|| json!({}));
    // Some models write the arguments as a JSON string.
    let args = match args {
        Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
        other => other,
    };
    Ok(ToolCall::new(call_id(), name, &args))
}

fn invalid(reason: String) -> InvalidAnswer {
    InvalidAnswer::new(String::new(), reason)
}

/// A call id unique in this process and unlikely to repeat across
/// processes (`call_` and 24 hex digits, as long as OpenAI's).
fn call_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut rng =
        edgecloud_core::rng::SplitMix64::new(now ^ n.wrapping_mul(edgecloud_core::rng::GAMMA));
    format!("call_{:016x}{:08x}", rng.next_u64(), rng.next_u64() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_cut_short_keeps_its_name_and_its_partial_arguments() {
        let (content, calls) = parse_cut(
            CallStyle::Hermes,
            "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Os",
        )
        .unwrap();
        assert_eq!(content, "Checking.");
        assert_eq!(calls[0].function.name, "get_weather");
        assert_eq!(calls[0].function.arguments, "{\"city\": \"Os");
        let (_, calls) =
            parse_cut(CallStyle::Llama3, "{\"name\": \"f\", \"parameters\": {").unwrap();
        assert_eq!(
            (
                calls[0].function.name.as_str(),
                calls[0].function.arguments.as_str()
            ),
            ("f", "{")
        );
        assert!(parse_cut(CallStyle::Hermes, "<tool_call>{\"name\": \"get_wea").is_none());
        assert!(parse_cut(CallStyle::Hermes, "no call at all").is_none());
    }

    fn weather() -> Tool {
        Tool::function(
            "get_weather",
            "Weather in a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        )
    }

    #[test]
    fn templates_say_how_their_models_call() {
        let qwen = "{%- if tools %}{{ tools | tojson }}<tool_call>{% endif %}";
        let llama =
            "{%- if tools %}<|start_header_id|>{\"name\": ..., \"parameters\": ...}{% endif %}";
        let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}";
        assert_eq!(
            ToolTemplate::detect(Some(qwen)),
            ToolTemplate {
                style: CallStyle::Hermes,
                native: true
            }
        );
        assert_eq!(
            ToolTemplate::detect(Some(llama)),
            ToolTemplate {
                style: CallStyle::Llama3,
                native: true
            }
        );
        for t in [Some(chatml), None] {
            assert_eq!(
                ToolTemplate::detect(t),
                ToolTemplate {
                    style: CallStyle::Hermes,
                    native: false
                }
            );
        }
    }

    #[test]
    fn calls_parse_in_each_style_and_content_is_what_came_before() {
        let (content, calls) = parse(
            CallStyle::Hermes,
            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
        )
        .unwrap();
        assert_eq!(content, "Let me look.");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].function.name, "get_weather");
        assert_eq!(calls[0].function.arguments, r#"{"city":"Oslo"}"#);
        assert!(calls[0].id.starts_with("call_") && calls[0].id.len() == 29);
        let (_, two) = parse(
            CallStyle::Hermes,
            "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>",
        )
        .unwrap();
        assert_eq!(
            two.iter()
                .map(|c| c.function.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(two[1].function.arguments, r#"{"x":1}"#);
        assert_ne!(two[0].id, two[1].id);

        let (content, calls) = parse(
            CallStyle::Llama3,
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}",
        )
        .unwrap();
        assert_eq!(
            (content.as_str(), calls[0].function.arguments.as_str()),
            ("", r#"{"city":"Rome"}"#)
        );
        // A bare call object (maybe fenced) is a call too.
        for bare in [
            "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}",
            "```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n```",
        ] {
            let (text, calls) = parse(CallStyle::Hermes, bare).unwrap();
            assert_eq!((text.as_str(), calls.len()), ("", 1), "{bare}");
        }
        let (text, none) = parse(CallStyle::Hermes, "{\"answer\": 1}").unwrap();
        assert_eq!((text.as_str(), none.len()), ("{\"answer\": 1}", 0));
        let (text, none) = parse(CallStyle::Hermes, "It is sunny.").unwrap();
        assert_eq!((text.as_str(), none.len()), ("It is sunny.", 0));
        assert!(parse(CallStyle::Hermes, "<tool_call>{\"name\": ").is_err());
        assert!(parse(CallStyle::Hermes, "<tool_call>{\"arguments\": {}}").is_err());
    }

    #[test]
    fn a_template_without_tool_syntax_gets_them_in_the_system_message() {
        let call = ToolCall::new("call_1", "get_weather", &json!({"city": "Oslo"}));
        let msgs = [
            ChatMessage::system("Be brief."),
            ChatMessage::user("Weather in Oslo?"),
            ChatMessage::tool_calls(vec![call]),
            ChatMessage::tool("call_1", "12 C"),
            ChatMessage::tool("call_2", "rain"),
        ];
        let out = generic_messages(&msgs, &[weather()]);
        assert_eq!(out.len(), 4);
        assert!(out[0].content.starts_with("Be brief.\n\n# Tools"));
        assert!(out[0].content.contains("\"name\": \"get_weather\""));
        assert_eq!(
            out[2].content,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"
        );
        assert_eq!(out[3].role, Role::User);
        assert_eq!(
            out[3].content,
            "<tool_response>\n12 C\n</tool_response>\n<tool_response>\nrain\n</tool_response>"
        );
    }

    #[test]
    fn a_native_template_renders_tools_calls_and_answers() {
        let template = "{% if tools %}[{% for t in tools %}{{ t.function.name }}{% endfor %}]{% endif %}\
            {% for m in messages %}{{ m.role }}:{{ m.content }}\
            {% for c in m.tool_calls %}<tool_call>{{ c.function.arguments | tojson }}{% endfor %}|{% endfor %}";
        let s = Sampling {
            tools: vec![weather()],
            ..Sampling::default()
        };
        let msgs = [
            ChatMessage::user("hi"),
            ChatMessage::tool_calls(vec![ToolCall::new(
                "c1",
                "get_weather",
                &json!({"city": "Oslo"}),
            )]),
            ChatMessage::tool("c1", "12 C"),
        ];
        let t = ToolTemplate::detect(Some(template));
        let out = render(t, Some(template), &msgs, &s, "</s>")
            .unwrap()
            .unwrap();
        assert_eq!(
            out,
            "[get_weather]user:hi|assistant:<tool_call>{\"city\": \"Oslo\"}|tool:12 C|"
        );
        let s_none = Sampling {
            tool_choice: Some(ToolChoice::None),
            ..s
        };
        let out = render(t, Some(template), &msgs[..1], &s_none, "</s>")
            .unwrap()
            .unwrap();
        assert_eq!(out, "user:hi|");
    }
}
