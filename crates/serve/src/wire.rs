//! The server's side of the OpenAI wire format, over `edgecloud_wire::openai`:
//! a request body read into our vocabulary (the shared reader, plus
//! edgecloud's own `edgecloud` extension object and the server's caps,
//! then `Request::validate`, the one home of each field's rule, its error
//! mapped to a 400 naming the field as the client spelled it),
//! and [`ApiError`], an error with its HTTP status. No I/O and no run
//! logic here; the response and chunk shapes are `openai`'s.

use edgecloud_core::request::{ChatMessage, InvalidRequest, Request, RequestField, Sampling};
use edgecloud_wire::openai::{self, ErrorBody, ErrorObject, FieldError, ParseOptions};
use serde_json::{Map, Value};
use std::time::Duration;

/// An error as an OpenAI client expects it: an HTTP status plus
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub(crate) status: u16,
    pub(crate) message: String,
    pub(crate) kind: &'static str,
    pub(crate) param: Option<String>,
    pub(crate) code: Option<&'static str>,
    /// Seconds for the `Retry-After` header (retryable errors only).
    pub(crate) retry_after: Option<u64>,
}

/// `type` of client mistakes (400, 404, 405, 413).
pub const INVALID_REQUEST: &str = "invalid_request_error";

impl ApiError {
    /// An error with this HTTP status, OpenAI `type` and message.
    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
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
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(400, INVALID_REQUEST, message).param(param)
    }

    /// Names the offending parameter (`param`).
    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// Sets the machine-readable `code`.
    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// Its HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// Its message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Its machine-readable `code`, when it has one.
    pub fn error_code(&self) -> Option<&'static str> {
        self.code
    }

    /// Its message, naming its field first when it does not already (for
    /// the error shapes that have no `param`: Anthropic's, Ollama's).
    pub(crate) fn described(&self) -> String {
        match &self.param {
            Some(p) if !self.message.contains(p.as_str()) => format!("{p}: {}", self.message),
            _ => self.message.clone(),
        }
    }

    /// The parameter it names and its message (for another error shape).
    pub fn into_param_and_message(self) -> (Option<String>, String) {
        (self.param, self.message)
    }

    pub(crate) fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// The error object (the body of an error response, and the payload of
    /// an SSE error event).
    pub(crate) fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorObject {
                code: self.code.map(str::to_string),
                message: self.message.clone(),
                param: self.param.clone(),
                kind: self.kind.to_string(),
            },
        }
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        let mut api = Self::invalid(e.param, e.message);
        api.code = e.code;
        api
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

/// Parses a request body: the shared reader (unknown fields are ignored,
/// clients send many optional ones; the refused ones are not), then the
/// `edgecloud` extension object, then the request's own validation.
pub(crate) fn parse_chat(body: &[u8], limits: Limits) -> Result<ChatParams, ApiError> {
    let obj = json_object(body)?;
    let parsed = openai::parse_request(
        &obj,
        ParseOptions {
            at: "",
            require_model: true,
            max_messages: Some(limits.max_messages),
            strict: false,
        },
    )?;
    let (policy, deadline) = extension(present(&parsed.extra, "edgecloud"), limits.max_deadline)?;
    let mut body = parsed.request;
    let request = Request {
        id: None,
        messages: std::mem::take(&mut body.messages).into_owned(),
        sampling: body.sampling(defaults(limits)),
        deadline,
    };
    request.validate().map_err(|e| invalid(e, &body))?;
    Ok(ChatParams {
        include_usage: body.include_usage(),
        stream: body.stream,
        model: body.model.into_owned(),
        messages: request.messages,
        sampling: request.sampling,
        policy,
        deadline,
    })
}

/// A request body as a JSON object, or the 400 saying why it is not one.
pub(crate) fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            400,
            INVALID_REQUEST,
            format!("the request body is not valid JSON: {e}"),
        )
        .code("invalid_json")
    })?;
    match value {
        Value::Object(obj) => Ok(obj),
        _ => Err(ApiError::new(
            400,
            INVALID_REQUEST,
            "the request body must be a JSON object",
        )
        .code("invalid_json")),
    }
}

/// A text-completion request, validated: the chat parameters its run
/// takes (one user message holding the prompt, as a raw prompt: no chat
/// template) and what only its answer needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CompletionParams {
    pub(crate) chat: ChatParams,
    /// The prompt, for `echo`.
    pub(crate) prompt: String,
    pub(crate) echo: bool,
}

/// Parses a text-completion body: `openai`'s completion reader, the
/// `edgecloud` extension object, then `Request::validate` (its errors
/// named as the completion body spells the field: `prompt`, `logprobs`).
pub(crate) fn parse_completion(body: &[u8], limits: Limits) -> Result<CompletionParams, ApiError> {
    let obj = json_object(body)?;
    let parsed = openai::parse_completion(&obj)?;
    let (policy, deadline) = extension(present(&parsed.extra, "edgecloud"), limits.max_deadline)?;
    let body = parsed.request;
    let request = Request {
        id: None,
        messages: vec![ChatMessage::user(body.prompt.clone())],
        sampling: body.sampling(defaults(limits)),
        deadline,
    };
    request.validate().map_err(|e| {
        invalid_as(e, |field| match field {
            RequestField::Messages => Some("prompt"),
            RequestField::TopLogprobs => Some("logprobs"),
            _ => None,
        })
    })?;
    Ok(CompletionParams {
        chat: ChatParams {
            include_usage: body.include_usage(),
            stream: body.stream,
            model: body.model,
            messages: request.messages,
            sampling: request.sampling,
            policy,
            deadline,
        },
        prompt: body.prompt,
        echo: body.echo,
    })
}

/// A Responses request, validated: the chat parameters its run takes and
/// what its response object echoes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResponsesParams {
    pub(crate) chat: ChatParams,
    pub(crate) echo: openai::Echo,
}

/// Parses a Responses body: `openai`'s Responses reader (the one home of
/// the mapping onto a chat request), the server's message cap, the
/// `edgecloud` extension object, then `Request::validate` (its errors
/// named as the Responses body spells the field: `input`,
/// `max_output_tokens`, `text.format`).
pub(crate) fn parse_responses(body: &[u8], limits: Limits) -> Result<ResponsesParams, ApiError> {
    let obj = json_object(body)?;
    let (body, extra) = openai::parse_responses(&obj)?;
    if body.messages.len() > limits.max_messages {
        return Err(ApiError::invalid(
            "input",
            format!(
                "`input` makes {} messages; this server accepts at most {}",
                body.messages.len(),
                limits.max_messages
            ),
        )
        .code("too_many_messages"));
    }
    let (policy, deadline) = extension(present(&extra, "edgecloud"), limits.max_deadline)?;
    let sampling = body.sampling(defaults(limits));
    let request = Request {
        id: None,
        messages: body.messages,
        sampling,
        deadline,
    };
    request.validate().map_err(|e| {
        invalid_as(e, |field| match field {
            RequestField::Messages => Some("input"),
            RequestField::MaxTokens => Some("max_output_tokens"),
            RequestField::ResponseFormat => Some("text.format"),
            _ => None,
        })
    })?;
    Ok(ResponsesParams {
        chat: ChatParams {
            include_usage: false,
            stream: body.stream,
            model: body.model,
            messages: request.messages,
            sampling: request.sampling,
            policy,
            deadline,
        },
        echo: body.echo,
    })
}

/// A request the validator refused, as a 400 naming its field the way
/// the client's body spelled it.
/// What a body leaves out: the server's default sampling.
pub(crate) fn defaults(limits: Limits) -> Sampling {
    Sampling {
        max_tokens: limits.default_max_tokens,
        ..Sampling::default()
    }
}

/// `Request::validate`'s error as the 400 naming the field as an
/// endpoint's body spells it (`spelled`; `None`: its chat wire name).
pub(crate) fn invalid_as(
    e: InvalidRequest,
    spelled: impl Fn(RequestField) -> Option<&'static str>,
) -> ApiError {
    let mut api = ApiError::new(400, INVALID_REQUEST, e.reason);
    api.param = e
        .field
        .map(|field| spelled(field).map_or_else(|| field.name(), str::to_string));
    api
}

fn invalid(e: InvalidRequest, body: &openai::ChatRequest<'_>) -> ApiError {
    let mut api = ApiError::new(400, INVALID_REQUEST, e.reason);
    api.param = param_as_sent(e.field, body);
    api
}

/// The wire name of the field an invalid request is about, spelled as the
/// body spelled it (serve's 400 and the bindings' errors name it so).
pub fn param_as_sent(
    field: Option<RequestField>,
    body: &openai::ChatRequest<'_>,
) -> Option<String> {
    field.map(|field| match field {
        // The newer spelling, when that is the one the body gave.
        RequestField::MaxTokens if body.max_completion_tokens.is_some() => {
            "max_completion_tokens".to_string()
        }
        other => other.name(),
    })
}

/// The `edgecloud` extension object: `{"policy": "...", "deadline_ms": N}`.
pub fn extension(
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
        Some(v) => Some(openai::string(v, "edgecloud.policy")?.to_string()),
        None => None,
    };
    let deadline = match present(o, "deadline_ms") {
        Some(v) => Some(deadline_ms(
            openai::unsigned(v, "edgecloud.deadline_ms")?,
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

pub(crate) fn present<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
            param_of(json!({"model": "m", "messages": [{"role": "bot", "content": "x"}]})),
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
            ("top_p", json!(2.0)),
            ("max_completion_tokens", json!(0)),
            ("max_tokens", json!(0)),
            ("max_tokens", json!(-2)),
            ("max_tokens", json!(1.5)),
            ("seed", json!("s")),
            ("n", json!(2)),
            ("logprobs", json!("yes")),
            ("top_logprobs", json!(21)),
            ("tools", json!("get_weather")),
            ("tool_choice", json!("sometimes")),
            ("stream", json!("yes")),
            ("stream_options", json!(true)),
            ("edgecloud", json!("race")),
        ] {
            let mut body = json!({"model": "m", "messages": user});
            body[field] = value;
            assert_eq!(param_of(body), field);
        }
        // A schema keyword outside the supported subset is named, never
        // ignored; json_object and a supported schema are accepted.
        let e = parse(json!({"model": "m", "messages": user, "response_format":
            {"type": "json_schema", "json_schema": {"name": "x",
                "schema": {"type": "string", "pattern": "a"}}}}))
        .unwrap_err();
        assert_eq!(
            e.param.as_deref(),
            Some("response_format.json_schema.schema")
        );
        assert!(e.message.contains("`pattern`"), "{}", e.message);
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "response_format": {"type": "xml"}})),
            "response_format.type"
        );
        let ok = parse(json!({"model": "m", "messages": user,
            "response_format": {"type": "json_object"}}))
        .unwrap();
        assert_eq!(
            ok.sampling.response_format,
            Some(edgecloud_core::structured::ResponseFormat::JsonObject)
        );
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "stop": ["a", ""]})),
            "stop[1]"
        );
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "stop": [1]})),
            "stop[0]"
        );
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "logprobs": true, "top_logprobs": 21})),
            "top_logprobs"
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

    /// The range of a sampling field is `Request::validate`'s alone: the
    /// wire reads the number, the validator refuses it, and the 400 names
    /// the field as the body spelled it.
    #[test]
    fn a_range_error_is_the_validators_named_as_the_client_spelled_it() {
        let user = json!([{"role": "user", "content": "x"}]);
        let e = parse(json!({"model": "m", "messages": user, "top_p": 2.0})).unwrap_err();
        assert_eq!(
            (e.status, e.kind, e.param.as_deref(), e.code),
            (400, INVALID_REQUEST, Some("top_p"), None)
        );
        let direct = Sampling {
            top_p: 2.0,
            ..Sampling::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.message, direct.reason);
        assert_eq!(
            param_of(json!({"model": "m", "messages": user, "max_tokens": 0})),
            "max_tokens"
        );
        assert_eq!(
            param_of(
                json!({"model": "m", "messages": user, "max_completion_tokens": 0, "max_tokens": 5})
            ),
            "max_completion_tokens"
        );
    }

    #[test]
    fn a_completion_is_a_raw_prompt_and_its_range_errors_name_its_fields() {
        let p = parse_completion(
            br#"{"model": "m", "prompt": "Once", "logprobs": 3, "edgecloud": {"deadline_ms": 900}}"#,
            LIMITS,
        )
        .unwrap();
        assert_eq!(p.chat.messages, [ChatMessage::user("Once")]);
        assert!(p.chat.sampling.raw_prompt);
        assert_eq!(p.chat.sampling.logprobs, Some(3));
        assert_eq!(p.chat.sampling.max_tokens, 64);
        assert_eq!(p.chat.deadline, Some(Duration::from_millis(900)));
        let param = |body: &str| {
            parse_completion(body.as_bytes(), LIMITS)
                .unwrap_err()
                .param
                .unwrap_or_default()
        };
        assert_eq!(
            param(r#"{"model": "m", "prompt": "x", "logprobs": 21}"#),
            "logprobs"
        );
        assert_eq!(
            param(r#"{"model": "m", "prompt": "x", "top_p": 0}"#),
            "top_p"
        );
        assert_eq!(
            param(r#"{"model": "m", "prompt": "x", "max_tokens": 0}"#),
            "max_tokens"
        );
        assert_eq!(
            param(r#"{"model": "m", "prompt": "x", "stop": ["a", ""]}"#),
            "stop[1]"
        );
        assert_eq!(
            param(r#"{"model": "m", "prompt": "x", "edgecloud": {"policy": 1}}"#),
            "edgecloud.policy"
        );
        let e = parse_completion(b"[]", LIMITS).unwrap_err();
        assert_eq!(e.code, Some("invalid_json"));
    }

    #[test]
    fn error_object_has_the_openai_shape() {
        let e = ApiError::invalid("top_p", "bad").code("invalid_type");
        assert_eq!(
            serde_json::to_value(e.body()).unwrap(),
            json!({"error": {"message": "bad", "type": "invalid_request_error", "param": "top_p", "code": "invalid_type"}})
        );
        let e = ApiError::new(503, "overloaded_error", "busy");
        assert_eq!(
            serde_json::to_value(e.body()).unwrap()["error"]["param"],
            Value::Null
        );
    }
}
