//! Errors on the wire: the validator's [`FieldError`] (which field, and
//! why), the error object OpenAI sends ([`ErrorBody`]), and reading a
//! provider's error in any of the shapes servers use ([`provider_error`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a request body is unusable, naming the field as OpenAI does in
/// `param` (`messages[2].content`, `stop[1]`, `body.tools` in a batch
/// line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The offending field's path.
    pub param: String,
    /// What is wrong, in words (it names the field where that reads well).
    pub message: String,
    /// OpenAI's `code` for it, when it has one (`invalid_type`,
    /// `missing_required_parameter`, ...).
    pub code: Option<&'static str>,
    pub kind: FieldErrorKind,
}

/// Whether the field is wrong, or right but refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// Malformed, missing or out of range.
    Invalid,
    /// Well-formed, but asks for something no lane can honour (the
    /// `refused` list, `n` > 1, an unknown field where unknown fields are
    /// refused).
    Refused,
}

impl FieldError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: param.into(),
            message: message.into(),
            code: None,
            kind: FieldErrorKind::Invalid,
        }
    }

    pub fn refused(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: FieldErrorKind::Refused,
            ..Self::invalid(param, message)
        }
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The message, prefixed with the field's name when it does not say
    /// it already: for places with no `param` of their own (a workload
    /// line's error).
    pub fn describe(&self) -> String {
        if self.message.contains(&format!("`{}`", self.param)) {
            self.message.clone()
        } else {
            format!("`{}`: {}", self.param, self.message)
        }
    }
}

/// `{"error": {...}}`, the body of an error response (and the payload of
/// an error event in a stream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorObject,
}

/// OpenAI's error object; `param` and `code` are `null` when unknown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorObject {
    pub code: Option<String>,
    pub message: String,
    pub param: Option<String>,
    #[serde(rename = "type")]
    pub kind: String,
}

/// The provider's error, if `value` is an error object. Accepts the shapes
/// servers use: `{"error": {"message", "type", "code"}}` (OpenAI, vLLM,
/// llama-server, edgecloud serve), `{"error": "text"}` (Ollama, proxies),
/// and a top-level `{"object": "error", "message"}` (older vLLM). Returns
/// (message, code), the code falling back to the type.
pub fn provider_error(value: &Value) -> Option<(String, Option<String>)> {
    let obj = value.as_object()?;
    if let Some(err) = obj.get("error") {
        return match err {
            Value::String(s) => Some((s.clone(), None)),
            Value::Object(e) => {
                let message = e
                    .get("message")
                    .map(json_text)
                    .unwrap_or_else(|| Value::Object(e.clone()).to_string());
                let present = |k: &str| e.get(k).filter(|c| !c.is_null());
                let code = present("code").or_else(|| present("type")).map(json_text);
                Some((message, code))
            }
            Value::Null => None,
            other => Some((other.to_string(), None)),
        };
    }
    if obj.get("object").and_then(|o| o.as_str()) == Some("error") {
        let message = obj.get("message").map(json_text).unwrap_or_default();
        let code = obj.get("code").filter(|c| !c.is_null()).map(json_text);
        return Some((message, code));
    }
    None
}

/// The best human message in an error body of any shape, or `None`.
pub fn error_message(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    if let Some((message, _)) = provider_error(&value) {
        return Some(message);
    }
    let obj = value.as_object()?;
    ["message", "detail", "msg"]
        .iter()
        .find_map(|k| obj.get(*k))
        .map(json_text)
}

fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn error_shapes() {
        let e = provider_error(
            &json!({"error": {"message": "bad", "type": "invalid_request_error", "code": null}}),
        );
        assert_eq!(
            e,
            Some(("bad".into(), Some("invalid_request_error".into())))
        );
        assert_eq!(
            provider_error(&json!({"error": "model not found"})),
            Some(("model not found".into(), None))
        );
        assert_eq!(
            provider_error(&json!({"object": "error", "message": "oops", "code": 400})),
            Some(("oops".into(), Some("400".into())))
        );
        assert_eq!(provider_error(&json!({"error": null, "choices": []})), None);
        assert_eq!(provider_error(&json!({"choices": []})), None);
        assert_eq!(
            error_message(br#"{"detail": "Not Found"}"#),
            Some("Not Found".into())
        );
        assert_eq!(error_message(b"<html>"), None);
    }

    #[test]
    fn the_error_body_has_the_openai_shape() {
        let body = ErrorBody {
            error: ErrorObject {
                code: Some("invalid_type".into()),
                message: "bad".into(),
                param: Some("top_p".into()),
                kind: "invalid_request_error".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"error":{"code":"invalid_type","message":"bad","param":"top_p","type":"invalid_request_error"}}"#
        );
    }

    #[test]
    fn describe_names_the_field_once() {
        let e = FieldError::invalid("messages[0].role", "unsupported role `tool`");
        assert_eq!(e.describe(), "`messages[0].role`: unsupported role `tool`");
        let e = FieldError::invalid("n", "only `n` = 1 is supported");
        assert_eq!(e.describe(), "only `n` = 1 is supported");
    }
}
