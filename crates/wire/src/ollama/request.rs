//! The request bodies of Ollama's native API: [`parse_chat`] (`POST
//! /api/chat`), [`parse_generate`] (`POST /api/generate`), [`parse_embed`]
//! (`POST /api/embed` and the older `/api/embeddings`) and
//! [`model_name`] (`/api/show`), each reading into the chat vocabulary
//! and naming the first offending field (`messages[1].images`,
//! `options.temperature`). It must not do I/O or know HTTP.
//!
//! `options` as Ollama reads them: `num_predict` (`-1` and `-2`: no
//! limit but the context's), `temperature`, `top_p`, `top_k`, `seed`,
//! `stop` set the sampling; `num_ctx` and the load-time options
//! (`num_thread`, `num_gpu`, `num_batch`, `use_mmap`, ...) are accepted
//! and change nothing (the server's own settings hold: a prompt over its
//! context is refused as too long); options of samplers no lane has
//! (`repeat_penalty`, `presence_penalty`, `frequency_penalty`, `min_p`,
//! `typical_p`, `tfs_z`, `mirostat`) are refused by name unless they hold
//! their neutral value (`repeat_penalty: 1`, ...). A value of the wrong
//! type is an error naming it. Unknown options are ignored, as Ollama
//! ignores them.
//!
//! Refused by name: `images` (the lanes take text only), `suffix`
//! (fill-in-the-middle needs a template for it), a `template` of the
//! request's own, `context` (no context tokens are kept: send the
//! conversation to `/api/chat`), `logprobs`.

use crate::openai::{
    boolean, float, number, present, seed, stop, tools, type_error, unsigned, FieldError,
};
use edgecloud_core::request::{ChatMessage, Role, Sampling, MAX_TOKENS_UNBOUNDED};
use edgecloud_core::structured::ResponseFormat;
use edgecloud_core::tools::{FunctionCall, Tool, ToolCall};
use serde_json::{Map, Value};

/// A chat or generate request read into the chat request's vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct OllamaRequest {
    pub model: String,
    /// `messages` (chat), or `system` and `prompt` (generate). Empty for
    /// a generate request with neither: Ollama's "load the model".
    pub messages: Vec<ChatMessage>,
    /// `raw` (generate): the prompt as written, no chat template.
    pub raw: bool,
    pub options: Options,
    /// `format`: `"json"` or a JSON schema.
    pub format: Option<ResponseFormat>,
    pub tools: Vec<Tool>,
    /// `stream` (Ollama's default: true).
    pub stream: bool,
    /// `keep_alive` as given (`"5m"`, `"-1"`, `300`), for the caller to
    /// read.
    pub keep_alive: Option<String>,
}

/// The sampling `options` a lane honours.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// `num_predict` (`None`: not given; negative: no limit).
    pub num_predict: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
}

impl OllamaRequest {
    /// The sampling settings it asks for; what it leaves out keeps
    /// `defaults`.
    pub fn sampling(&self, defaults: Sampling) -> Sampling {
        let mut s = defaults;
        let o = &self.options;
        if let Some(n) = o.num_predict {
            s.max_tokens = u32::try_from(n).unwrap_or(MAX_TOKENS_UNBOUNDED);
        }
        if let Some(t) = o.temperature {
            s.temperature = t;
        }
        if let Some(p) = o.top_p {
            s.top_p = p;
        }
        if let Some(k) = o.top_k {
            s.top_k = k;
        }
        if o.seed.is_some() {
            s.seed = o.seed;
        }
        if !o.stop.is_empty() {
            s.stop = o.stop.clone();
        }
        if self.format.is_some() {
            s.response_format = self.format.clone();
        }
        if !self.tools.is_empty() {
            s.tools = self.tools.clone();
        }
        s.raw_prompt = self.raw;
        s
    }
}

/// An embeddings request: `/api/embed` (`input`) or `/api/embeddings`
/// (`prompt`).
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedRequest {
    pub model: String,
    pub inputs: Vec<String>,
    /// `dimensions` (`/api/embed`).
    pub dimensions: Option<u64>,
    pub keep_alive: Option<String>,
}

/// Options accepted without effect: the server's settings decide them.
const LOAD_TIME: &[(&str, Kind)] = &[
    ("num_ctx", Kind::Integer),
    ("num_keep", Kind::Integer),
    ("repeat_last_n", Kind::Integer),
    ("num_batch", Kind::Integer),
    ("num_gpu", Kind::Integer),
    ("main_gpu", Kind::Integer),
    ("num_thread", Kind::Integer),
    ("numa", Kind::Bool),
    ("low_vram", Kind::Bool),
    ("f16_kv", Kind::Bool),
    ("logits_all", Kind::Bool),
    ("vocab_only", Kind::Bool),
    ("use_mmap", Kind::Bool),
    ("use_mlock", Kind::Bool),
    ("embedding_only", Kind::Bool),
    ("penalize_newline", Kind::Bool),
    ("mirostat_tau", Kind::Number),
    ("mirostat_eta", Kind::Number),
];

/// Samplers no lane has: accepted only at the value that turns them off.
const NEUTRAL: &[(&str, f64)] = &[
    ("repeat_penalty", 1.0),
    ("presence_penalty", 0.0),
    ("frequency_penalty", 0.0),
    ("min_p", 0.0),
    ("typical_p", 1.0),
    ("tfs_z", 1.0),
    ("mirostat", 0.0),
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Integer,
    Number,
    Bool,
}

fn required(param: &str) -> FieldError {
    FieldError::invalid(param, format!("`{param}` is required")).code("missing_required_parameter")
}

fn string<'a>(v: &'a Value, param: &str) -> Result<&'a str, FieldError> {
    crate::openai::string(v, param)
}

/// `model` (or the older `name`): a non-empty string.
pub fn model_name(obj: &Map<String, Value>) -> Result<String, FieldError> {
    let (key, v) = match (present(obj, "model"), present(obj, "name")) {
        (Some(v), _) => ("model", v),
        (None, Some(v)) => ("name", v),
        (None, None) => return Err(required("model")),
    };
    let name = string(v, key)?;
    if name.is_empty() {
        return Err(required(key));
    }
    Ok(name.to_string())
}

/// `options`: the sampling ones read, the others checked (see the module
/// docs).
fn options(v: Option<&Value>) -> Result<Options, FieldError> {
    let Some(v) = v else {
        return Ok(Options::default());
    };
    let Value::Object(o) = v else {
        return Err(type_error("options", "an object", v));
    };
    let num_predict = match present(o, "num_predict") {
        Some(n) => Some(
            n.as_i64()
                .ok_or_else(|| type_error("options.num_predict", "an integer", n))?,
        ),
        None => None,
    };
    let top_k = match present(o, "top_k") {
        Some(v) => Some(u32::try_from(unsigned(v, "options.top_k")?).unwrap_or(u32::MAX)),
        None => None,
    };
    for (key, kind) in LOAD_TIME {
        let Some(v) = present(o, key) else {
            continue;
        };
        let p = format!("options.{key}");
        match kind {
            Kind::Integer if v.as_i64().is_none() && v.as_u64().is_none() => {
                return Err(type_error(&p, "an integer", v))
            }
            Kind::Number => {
                number(v, &p)?;
            }
            Kind::Bool => {
                boolean(v, &p)?;
            }
            Kind::Integer => {}
        }
    }
    for (key, neutral) in NEUTRAL {
        let Some(v) = present(o, key) else {
            continue;
        };
        let p = format!("options.{key}");
        let n = number(v, &p)?;
        if n != *neutral {
            return Err(FieldError::refused(
                &p,
                format!(
                    "`{p}` is not supported: no lane has this sampler; leave it out (or at \
                     {neutral})"
                ),
            ));
        }
    }
    Ok(Options {
        num_predict,
        temperature: float(o, "options.temperature")?,
        top_p: float(o, "options.top_p")?,
        top_k,
        seed: seed(o, "options.seed")?,
        stop: match present(o, "stop") {
            Some(v) => stop(v, "options.")?,
            None => Vec::new(),
        },
    })
}

/// `format`: `""` (none), `"json"`, or a JSON schema (inside the
/// supported subset, a keyword outside it named).
fn format(v: Option<&Value>) -> Result<Option<ResponseFormat>, FieldError> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(ResponseFormat::JsonObject)),
        Some(Value::String(s)) => Err(FieldError::invalid(
            "format",
            format!("unsupported `format` `{s}`; expected \"json\" or a JSON schema"),
        )),
        Some(schema @ Value::Object(_)) => {
            let f = ResponseFormat::json_schema("format", schema.clone());
            f.check().map_err(|e| {
                FieldError::refused(
                    "format",
                    format!(
                        "`format`: {e}; supported: type, properties, required, \
                         additionalProperties, items, enum, const, minItems, maxItems, \
                         minLength, maxLength and annotations"
                    ),
                )
                .code("unsupported_schema_keyword")
            })?;
            Ok(Some(f))
        }
        Some(other) => Err(type_error(
            "format",
            "\"json\" or a JSON schema object",
            other,
        )),
    }
}

/// `keep_alive`: a duration string or a number of seconds, handed back
/// as text for the caller's parser.
fn keep_alive(obj: &Map<String, Value>) -> Result<Option<String>, FieldError> {
    match present(obj, "keep_alive") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(type_error(
            "keep_alive",
            "a duration (\"5m\") or a number of seconds",
            other,
        )),
    }
}

/// Fields refused wherever they come, unless empty.
fn refuse_present(obj: &Map<String, Value>, fields: &[(&str, &str)]) -> Result<(), FieldError> {
    for (field, why) in fields {
        let given = match present(obj, field) {
            None => false,
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(Value::Bool(b)) => *b,
            Some(_) => true,
        };
        if given {
            return Err(FieldError::refused(
                *field,
                format!("`{field}` is not supported: {why}"),
            ));
        }
    }
    Ok(())
}

const IMAGES: &str = "images are not supported yet: edgecloud's lanes take text only";

/// What chat and generate share: `format`, `options`, `stream`,
/// `keep_alive`, `think`.
fn common(
    obj: &Map<String, Value>,
) -> Result<(Options, Option<ResponseFormat>, bool, Option<String>), FieldError> {
    refuse_present(
        obj,
        &[(
            "logprobs",
            "log-probabilities are not offered on Ollama's API here (ask /v1/chat/completions)",
        )],
    )?;
    if let Some(v) = present(obj, "think") {
        if !(v.is_boolean() || v.is_string()) {
            return Err(type_error(
                "think",
                "a boolean or \"low\", \"medium\", \"high\"",
                v,
            ));
        }
    }
    let stream = match present(obj, "stream") {
        Some(v) => boolean(v, "stream")?,
        None => true,
    };
    Ok((
        options(present(obj, "options"))?,
        format(present(obj, "format"))?,
        stream,
        keep_alive(obj)?,
    ))
}

/// The fields a reader reads; the rest are handed back.
fn extra(obj: &Map<String, Value>, read: &[&str]) -> Map<String, Value> {
    obj.iter()
        .filter(|(k, _)| !read.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The one reader of a `/api/chat` body. Assistant tool calls without an
/// `id` get one (`call_N_M`), and a `tool` message answers the earliest
/// call not yet answered (of its `tool_name`, when it gives one): Ollama's
/// messages do not pair them, the chat vocabulary does.
pub fn parse_chat(
    obj: &Map<String, Value>,
) -> Result<(OllamaRequest, Map<String, Value>), FieldError> {
    let model = model_name(obj)?;
    let items = match present(obj, "messages") {
        None => Vec::new(),
        Some(Value::Array(items)) => items.clone(),
        Some(other) => return Err(type_error("messages", "an array", other)),
    };
    let mut messages = Vec::with_capacity(items.len());
    // Calls made and not yet answered: (id, function name).
    let mut pending: Vec<(String, String)> = Vec::new();
    for (i, m) in items.iter().enumerate() {
        messages.push(message(m, i, &mut pending)?);
    }
    let (options, format, stream, keep_alive) = common(obj)?;
    let (tools, _) = tools(obj, "")?;
    let request = OllamaRequest {
        model,
        messages,
        raw: false,
        options,
        format,
        tools,
        stream,
        keep_alive,
    };
    let read = [
        "model",
        "name",
        "messages",
        "tools",
        "format",
        "options",
        "stream",
        "keep_alive",
        "think",
        "logprobs",
        "top_logprobs",
    ];
    Ok((request, extra(obj, &read)))
}

fn message(
    v: &Value,
    i: usize,
    pending: &mut Vec<(String, String)>,
) -> Result<ChatMessage, FieldError> {
    let at = format!("messages[{i}]");
    let field = |f: &str| format!("{at}.{f}");
    let Value::Object(m) = v else {
        return Err(type_error(&at, "an object", v));
    };
    let role = match present(m, "role") {
        None => return Err(required(&field("role"))),
        Some(r) => match string(r, &field("role"))? {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => {
                return Err(FieldError::invalid(
                    field("role"),
                    format!(
                    "`{}`: unsupported role `{other}`; expected system, user, assistant or tool",
                    field("role")
                ),
                ))
            }
        },
    };
    if let Some(Value::Array(images)) = present(m, "images") {
        if !images.is_empty() {
            return Err(FieldError::refused(
                field("images"),
                format!("`{}`: {IMAGES}", field("images")),
            ));
        }
    }
    let content = match present(m, "content") {
        None => String::new(),
        Some(v) => string(v, &field("content"))?.to_string(),
    };
    let mut message = ChatMessage::new(role, content);
    match (role, present(m, "tool_calls")) {
        (Role::Assistant, Some(Value::Array(calls))) => {
            for (j, c) in calls.iter().enumerate() {
                let p = format!("{at}.tool_calls[{j}]");
                let call = tool_call(c, &p, i, j)?;
                pending.push((call.id.clone(), call.function.name.clone()));
                message.tool_calls.push(call);
            }
        }
        (Role::Assistant, Some(other)) => {
            return Err(type_error(&field("tool_calls"), "an array", other))
        }
        (_, Some(_)) => {
            let p = field("tool_calls");
            return Err(FieldError::invalid(
                &p,
                format!("`{p}` is only allowed on assistant messages"),
            ));
        }
        (_, None) => {}
    }
    if role == Role::Tool {
        let name = match present(m, "tool_name").or_else(|| present(m, "name")) {
            Some(v) => Some(string(v, &field("tool_name"))?.to_string()),
            None => None,
        };
        let id = match present(m, "tool_call_id") {
            Some(v) => string(v, &field("tool_call_id"))?.to_string(),
            None => {
                let at = pending
                    .iter()
                    .position(|(_, f)| name.as_ref().is_none_or(|n| n == f))
                    .or(if pending.is_empty() { None } else { Some(0) });
                match at {
                    Some(k) => pending.remove(k).0,
                    // Nothing to answer: an id of its own (a lane that
                    // pairs calls with answers will say so).
                    None => format!("call_unpaired_{i}"),
                }
            }
        };
        pending.retain(|(p, _)| p != &id);
        message.tool_call_id = Some(id);
    }
    Ok(message)
}

/// One of an assistant's `tool_calls`: `{"function": {"name",
/// "arguments"}}` (arguments an object, or a JSON text), its `id` given
/// or made up.
fn tool_call(v: &Value, p: &str, i: usize, j: usize) -> Result<ToolCall, FieldError> {
    let Value::Object(c) = v else {
        return Err(type_error(p, "an object", v));
    };
    let fp = format!("{p}.function");
    let Some(Value::Object(f)) = present(c, "function") else {
        return Err(required(&fp));
    };
    let name = match present(f, "name") {
        Some(n) => string(n, &format!("{fp}.name"))?.to_string(),
        None => return Err(required(&format!("{fp}.name"))),
    };
    let arguments = match present(f, "arguments") {
        None => "{}".to_string(),
        Some(a @ Value::Object(_)) => a.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(type_error(&format!("{fp}.arguments"), "an object", other)),
    };
    let id = match present(c, "id") {
        Some(v) => string(v, &format!("{p}.id"))?.to_string(),
        None => format!("call_{i}_{j}"),
    };
    Ok(ToolCall {
        id,
        kind: "function".into(),
        function: FunctionCall { name, arguments },
    })
}

/// The one reader of a `/api/generate` body: `system` then `prompt` as
/// the conversation (the chat template applies), or with `raw` the
/// prompt as written (no template; `system` is then not used, as Ollama
/// does). Neither prompt nor system: no messages (load the model).
pub fn parse_generate(
    obj: &Map<String, Value>,
) -> Result<(OllamaRequest, Map<String, Value>), FieldError> {
    let model = model_name(obj)?;
    refuse_present(
        obj,
        &[
            ("images", IMAGES),
            (
                "suffix",
                "inserting needs a fill-in-the-middle template; send the prompt alone",
            ),
            (
                "template",
                "the model's own chat template applies (or `raw` for none)",
            ),
            (
                "context",
                "this server keeps no context tokens; send the conversation to /api/chat",
            ),
        ],
    )?;
    let text = |k: &str| -> Result<String, FieldError> {
        match present(obj, k) {
            Some(v) => Ok(string(v, k)?.to_string()),
            None => Ok(String::new()),
        }
    };
    let prompt = text("prompt")?;
    let system = text("system")?;
    let raw = match present(obj, "raw") {
        Some(v) => boolean(v, "raw")?,
        None => false,
    };
    let messages = match (raw, prompt.is_empty(), system.is_empty()) {
        (true, true, _) | (false, true, true) => Vec::new(),
        (true, false, _) => vec![ChatMessage::user(prompt)],
        (false, _, _) => ChatMessage::conversation((!system.is_empty()).then_some(system), prompt),
    };
    let (options, format, stream, keep_alive) = common(obj)?;
    let request = OllamaRequest {
        model,
        messages,
        raw,
        options,
        format,
        tools: Vec::new(),
        stream,
        keep_alive,
    };
    let read = [
        "model",
        "name",
        "prompt",
        "system",
        "raw",
        "format",
        "options",
        "stream",
        "keep_alive",
        "think",
        "images",
        "suffix",
        "template",
        "context",
        "logprobs",
        "top_logprobs",
    ];
    Ok((request, extra(obj, &read)))
}

/// Reads `/api/embed` (`input`: a string or an array of strings;
/// `truncate`, `dimensions`, `options`, `keep_alive`) or, with `legacy`,
/// `/api/embeddings` (`prompt`: one string).
pub fn parse_embed(obj: &Map<String, Value>, legacy: bool) -> Result<EmbedRequest, FieldError> {
    let model = model_name(obj)?;
    let inputs = if legacy {
        match present(obj, "prompt") {
            Some(v) => vec![string(v, "prompt")?.to_string()],
            None => return Err(required("prompt")),
        }
    } else {
        match present(obj, "input") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, s)| string(s, &format!("input[{i}]")).map(str::to_string))
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(type_error(
                    "input",
                    "a string or an array of strings",
                    other,
                ))
            }
            None => return Err(required("input")),
        }
    };
    if let Some(v) = present(obj, "truncate") {
        boolean(v, "truncate")?;
    }
    options(present(obj, "options"))?;
    let dimensions = match present(obj, "dimensions") {
        Some(v) => Some(unsigned(v, "dimensions")?),
        None => None,
    };
    Ok(EmbedRequest {
        model,
        inputs,
        dimensions,
        keep_alive: keep_alive(obj)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecloud_core::tools::ToolChoice;
    use serde_json::json;

    fn chat(v: Value) -> Result<OllamaRequest, FieldError> {
        parse_chat(v.as_object().unwrap()).map(|(r, _)| r)
    }

    fn generate(v: Value) -> Result<OllamaRequest, FieldError> {
        parse_generate(v.as_object().unwrap()).map(|(r, _)| r)
    }

    #[test]
    fn chat_messages_options_format_and_tools_map_onto_the_chat_request() {
        let r = chat(json!({"model": "m", "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Oslo and Rome?", "images": []},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}},
                    {"function": {"name": "get_time", "arguments": {}}}]},
                {"role": "tool", "tool_name": "get_time", "content": "noon"},
                {"role": "tool", "content": "12 C"}],
            "tools": [{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "format": "json", "keep_alive": "10m", "think": false,
            "options": {"num_predict": 40, "temperature": 0.1, "top_p": 0.9, "top_k": 3,
                "seed": 7, "stop": ["\n\n"], "num_ctx": 8192, "num_thread": 4,
                "repeat_penalty": 1.0, "use_mmap": true, "some_new_option": "x"}}))
        .unwrap();
        let m = &r.messages;
        assert_eq!(m[0], ChatMessage::system("Be brief."));
        assert_eq!(m[2].tool_calls[0].id, "call_2_0");
        assert_eq!(m[2].tool_calls[0].function.arguments, r#"{"city":"Oslo"}"#);
        // Paired by name, then the earliest left.
        assert_eq!(m[3], ChatMessage::tool("call_2_1", "noon"));
        assert_eq!(m[4], ChatMessage::tool("call_2_0", "12 C"));
        assert!(r.stream, "Ollama streams unless told not to");
        assert_eq!(r.keep_alive.as_deref(), Some("10m"));
        let s = r.sampling(Sampling::default());
        assert_eq!(
            (s.max_tokens, s.temperature, s.top_p, s.top_k),
            (40, 0.1, 0.9, 3)
        );
        assert_eq!(
            (s.seed, s.stop.clone()),
            (Some(7), vec!["\n\n".to_string()])
        );
        assert_eq!(s.response_format, Some(ResponseFormat::JsonObject));
        assert_eq!(s.tools[0].function.name, "get_weather");
        assert_eq!(s.effective_tool_choice(), ToolChoice::Auto);
        // No limit but the context's.
        let r = chat(json!({"model": "m", "messages": [], "stream": false,
            "options": {"num_predict": -1}, "format": {"type": "object",
                "properties": {"a": {"type": "string"}}}}))
        .unwrap();
        assert!(!r.stream);
        assert_eq!(
            r.sampling(Sampling::default()).max_tokens,
            MAX_TOKENS_UNBOUNDED
        );
        assert!(matches!(r.format, Some(ResponseFormat::JsonSchema { .. })));
    }

    #[test]
    fn generate_is_system_and_prompt_or_the_raw_prompt_or_a_load() {
        let r = generate(json!({"model": "m", "prompt": "Why?", "system": "Be brief."})).unwrap();
        assert_eq!(
            r.messages,
            [ChatMessage::system("Be brief."), ChatMessage::user("Why?")]
        );
        assert!(!r.sampling(Sampling::default()).raw_prompt);
        let r = generate(json!({"model": "m", "prompt": "<|im_start|>", "raw": true,
            "system": "ignored"}))
        .unwrap();
        assert_eq!(r.messages, [ChatMessage::user("<|im_start|>")]);
        assert!(r.sampling(Sampling::default()).raw_prompt);
        assert!(generate(json!({"model": "m"})).unwrap().messages.is_empty());
        assert!(generate(json!({"name": "m", "prompt": ""}))
            .unwrap()
            .messages
            .is_empty());
    }

    #[test]
    fn each_bad_or_refused_field_is_named() {
        let chat_param = |v: Value| chat(v).unwrap_err().param;
        let gen_param = |v: Value| generate(v).unwrap_err().param;
        for (body, param) in [
            (json!({"messages": []}), "model"),
            (json!({"model": 3, "messages": []}), "model"),
            (json!({"model": "m", "messages": {}}), "messages"),
            (
                json!({"model": "m", "messages": [{"content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "bot", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
                "messages[0].content",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}),
                "messages[0].images",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"name": "f"}]}]}),
                "messages[0].tool_calls[0].function",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": []}]}),
                "messages[0].tool_calls",
            ),
            (json!({"model": "m", "options": []}), "options"),
            (
                json!({"model": "m", "options": {"temperature": "hot"}}),
                "options.temperature",
            ),
            (
                json!({"model": "m", "options": {"num_predict": 1.5}}),
                "options.num_predict",
            ),
            (
                json!({"model": "m", "options": {"top_k": -1}}),
                "options.top_k",
            ),
            (
                json!({"model": "m", "options": {"seed": "s"}}),
                "options.seed",
            ),
            (
                json!({"model": "m", "options": {"stop": [1]}}),
                "options.stop[0]",
            ),
            (
                json!({"model": "m", "options": {"num_ctx": "big"}}),
                "options.num_ctx",
            ),
            (
                json!({"model": "m", "options": {"use_mmap": 1}}),
                "options.use_mmap",
            ),
            (
                json!({"model": "m", "options": {"repeat_penalty": 1.1}}),
                "options.repeat_penalty",
            ),
            (
                json!({"model": "m", "options": {"mirostat": 2}}),
                "options.mirostat",
            ),
            (json!({"model": "m", "format": "xml"}), "format"),
            (json!({"model": "m", "format": 3}), "format"),
            (
                json!({"model": "m", "format": {"type": "string", "pattern": "a+"}}),
                "format",
            ),
            (json!({"model": "m", "stream": "yes"}), "stream"),
            (json!({"model": "m", "keep_alive": true}), "keep_alive"),
            (json!({"model": "m", "think": 1}), "think"),
            (json!({"model": "m", "logprobs": true}), "logprobs"),
            (
                json!({"model": "m", "tools": [{"type": "function"}]}),
                "tools[0].function",
            ),
        ] {
            assert_eq!(chat_param(body.clone()), param, "{body}");
        }
        for (body, param) in [
            (json!({"model": "m", "prompt": 3}), "prompt"),
            (json!({"model": "m", "prompt": "x", "raw": "yes"}), "raw"),
            (
                json!({"model": "m", "prompt": "x", "suffix": "y"}),
                "suffix",
            ),
            (
                json!({"model": "m", "prompt": "x", "images": ["aGk="]}),
                "images",
            ),
            (
                json!({"model": "m", "prompt": "x", "context": [1, 2]}),
                "context",
            ),
            (
                json!({"model": "m", "prompt": "x", "template": "{{ .Prompt }}"}),
                "template",
            ),
        ] {
            assert_eq!(gen_param(body.clone()), param, "{body}");
        }
        let e = chat(json!({"model": "m", "options": {"repeat_penalty": 1.1}})).unwrap_err();
        assert_eq!(e.kind, crate::openai::FieldErrorKind::Refused);
    }

    #[test]
    fn embed_reads_input_or_the_older_prompt() {
        let o = json!({"model": "m", "input": ["a", "b"], "truncate": true, "dimensions": 8});
        let e = parse_embed(o.as_object().unwrap(), false).unwrap();
        assert_eq!((e.inputs.len(), e.dimensions), (2, Some(8)));
        let o = json!({"model": "m", "prompt": "a"});
        assert_eq!(
            parse_embed(o.as_object().unwrap(), true).unwrap().inputs,
            ["a"]
        );
        for (body, legacy, param) in [
            (json!({"model": "m"}), false, "input"),
            (json!({"model": "m", "input": 3}), false, "input"),
            (json!({"model": "m", "input": ["a", 3]}), false, "input[1]"),
            (
                json!({"model": "m", "input": "a", "truncate": "no"}),
                false,
                "truncate",
            ),
            (json!({"model": "m"}), true, "prompt"),
        ] {
            let e = parse_embed(body.as_object().unwrap(), legacy).unwrap_err();
            assert_eq!(e.param, param, "{body}");
        }
    }
}
