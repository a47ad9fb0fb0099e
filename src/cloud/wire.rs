//! The OpenAI chat-completions wire format: the request body we send and
//! the response shapes we accept (whole responses, stream chunks, error
//! objects). Tolerant on input: unknown fields (llama-server's `timings`,
//! OpenAI's `system_fingerprint`...) are ignored, `null` is as good as
//! absent. No I/O here.

use crate::request::{ChatMessage, Sampling};
use serde::{Deserialize, Serialize};

/// The body of `POST /chat/completions`.
#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: &'a [ChatMessage],
    pub(crate) max_tokens: u32,
    pub(crate) temperature: f32,
    pub(crate) top_p: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub(crate) stop: &'a [String],
    pub(crate) stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stream_options: Option<StreamOptions>,
}

#[derive(Debug, Serialize)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: bool,
}

impl<'a> ChatRequest<'a> {
    pub(crate) fn new(
        model: &'a str,
        messages: &'a [ChatMessage],
        sampling: &'a Sampling,
        stream: bool,
        stream_usage: bool,
        send_top_k: bool,
    ) -> Self {
        Self {
            model,
            messages,
            max_tokens: sampling.max_tokens,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            top_k: (send_top_k && sampling.top_k > 0).then_some(sampling.top_k),
            seed: sampling.seed,
            stop: &sampling.stop,
            stream,
            stream_options: (stream && stream_usage).then_some(StreamOptions {
                include_usage: true,
            }),
        }
    }
}

/// Token counts as a provider sends them. Every field may be missing.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub(crate) struct WireUsage {
    pub(crate) prompt_tokens: Option<u64>,
    pub(crate) completion_tokens: Option<u64>,
    pub(crate) total_tokens: Option<u64>,
}

/// A whole (non-streamed) response.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatResponse {
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) choices: Vec<ResponseChoice>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResponseChoice {
    #[serde(default)]
    pub(crate) index: u32,
    #[serde(default)]
    pub(crate) message: Option<ResponseMessage>,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ResponseMessage {
    #[serde(default)]
    pub(crate) content: Option<String>,
}

/// One streamed chunk (`chat.completion.chunk`).
#[derive(Debug, Deserialize)]
pub(crate) struct ChatChunk {
    #[serde(default)]
    pub(crate) model: Option<String>,
    /// Only looked at to spot error objects (`"object": "error"`).
    #[serde(default)]
    pub(crate) object: Option<String>,
    /// An error object some servers send mid-stream.
    #[serde(default)]
    pub(crate) error: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(crate) choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
}

impl ChatChunk {
    /// Whether this parsed chunk is really an error object.
    pub(crate) fn may_be_error(&self) -> bool {
        self.error.as_ref().is_some_and(|e| !e.is_null()) || self.object.as_deref() == Some("error")
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChunkChoice {
    #[serde(default)]
    pub(crate) index: u32,
    #[serde(default)]
    pub(crate) delta: Option<ChunkDelta>,
    #[serde(default)]
    pub(crate) finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChunkDelta {
    #[serde(default)]
    pub(crate) content: Option<String>,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The provider's error, if `value` is an error object. Accepts the shapes
/// servers use: `{"error": {"message", "type", "code"}}` (OpenAI, vLLM,
/// llama-server), `{"error": "text"}` (Ollama, proxies), and a top-level
/// `{"object": "error", "message"}` (older vLLM). Returns (message, code).
pub(crate) fn error_object(value: &serde_json::Value) -> Option<(String, Option<String>)> {
    let obj = value.as_object()?;
    if let Some(err) = obj.get("error") {
        return match err {
            serde_json::Value::String(s) => Some((s.clone(), None)),
            serde_json::Value::Object(e) => {
                let message = e
                    .get("message")
                    .map(json_text)
                    .unwrap_or_else(|| serde_json::Value::Object(e.clone()).to_string());
                let present = |k: &str| e.get(k).filter(|c| !c.is_null());
                let code = present("code").or_else(|| present("type")).map(json_text);
                Some((message, code))
            }
            serde_json::Value::Null => None,
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
pub(crate) fn error_message(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    if let Some((message, _)) = error_object(&value) {
        return Some(message);
    }
    let obj = value.as_object()?;
    ["message", "detail", "msg"]
        .iter()
        .find_map(|k| obj.get(*k))
        .map(json_text)
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn error_shapes() {
        let e = error_object(
            &json!({"error": {"message": "bad", "type": "invalid_request_error", "code": null}}),
        );
        assert_eq!(
            e,
            Some(("bad".into(), Some("invalid_request_error".into())))
        );
        assert_eq!(
            error_object(&json!({"error": "model not found"})),
            Some(("model not found".into(), None))
        );
        assert_eq!(
            error_object(&json!({"object": "error", "message": "oops", "code": 400})),
            Some(("oops".into(), Some("400".into())))
        );
        assert_eq!(error_object(&json!({"error": null, "choices": []})), None);
        assert_eq!(error_object(&json!({"choices": []})), None);
        assert_eq!(
            error_message(br#"{"detail": "Not Found"}"#),
            Some("Not Found".into())
        );
        assert_eq!(error_message(b"<html>"), None);
    }

    #[test]
    fn null_choices_and_unknown_fields() {
        let r: ChatResponse = serde_json::from_value(json!({
            "choices": null, "timings": {"predicted_per_second": 3.0}
        }))
        .unwrap();
        assert!(r.choices.is_empty());
        let c: ChatChunk = serde_json::from_value(json!({
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": null}, "finish_reason": null}],
            "usage": null
        }))
        .unwrap();
        assert!(c.choices[0].delta.as_ref().unwrap().content.is_none());
        assert!(c.usage.is_none());
    }
}
