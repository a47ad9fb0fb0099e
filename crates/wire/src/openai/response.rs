//! What comes back from `POST /chat/completions`: a whole response
//! ([`ChatCompletion`]), stream chunks ([`ChatChunk`]), token usage, and
//! the `GET /models` list. `serve` writes these, the cloud lane reads them.
//!
//! Reading is tolerant: every field may be missing, `null` is as good as
//! absent, unknown fields (llama-server's `timings`, ...) are ignored, and
//! the fields nobody reads (`id`, `created`, `object` of a whole response,
//! `system_fingerprint`, `logprobs`) are never a reason to fail. Fields are
//! declared in alphabetical order (see the module above).

use edgecloud_core::lane::TokenLogprob;
use edgecloud_core::tools::ToolCall;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// A whole (non-streamed) response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletion {
    #[serde(default, deserialize_with = "null_as_default")]
    pub choices: Vec<Choice>,
    #[serde(default, deserialize_with = "lenient")]
    pub created: Option<u64>,
    /// edgecloud serve's outcome summary (absent elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edgecloud: Option<Value>,
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub object: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub system_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One choice of a whole response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub index: u32,
    #[serde(default, deserialize_with = "lenient")]
    pub logprobs: Option<Logprobs>,
    #[serde(default)]
    pub message: Option<Message>,
}

/// A choice's `logprobs`: one entry per generated token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Logprobs {
    #[serde(default, deserialize_with = "lenient")]
    pub content: Option<Vec<TokenLogprob>>,
}

/// The answer of a choice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub role: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// A reasoning model's thinking, apart from `content`, as
    /// llama-server (`--reasoning-format deepseek`), vLLM and DeepSeek
    /// send it; read from `reasoning` too (OpenRouter, newer vLLM).
    #[serde(
        default,
        alias = "reasoning",
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub reasoning_content: Option<String>,
}

/// One streamed chunk (`chat.completion.chunk`): a delta, the finish
/// reason, or (with no choices) the usage; some servers send an error
/// object in its place.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatChunk {
    #[serde(default, deserialize_with = "null_as_default")]
    pub choices: Vec<ChunkChoice>,
    #[serde(default, deserialize_with = "lenient")]
    pub created: Option<u64>,
    /// edgecloud serve's outcome summary, on the finish chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edgecloud: Option<Value>,
    /// An error object some servers send mid-stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    #[serde(default, deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    /// `chat.completion.chunk`; `error` marks an error object.
    #[serde(default)]
    pub object: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub system_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl Delta {
    /// Tool calls as OpenAI streams them: per call, one delta with its
    /// index, id, type and name (empty arguments), then one with its
    /// arguments. The one home of that shape: serve's chunks and the
    /// bindings' streamed deltas both come from here.
    pub fn tool_call_pieces(calls: &[ToolCall]) -> Vec<Self> {
        let piece = |index: usize, first: bool, call: &ToolCall| ToolCallDelta {
            function: Some(FunctionDelta {
                arguments: Some(if first {
                    String::new()
                } else {
                    call.function.arguments.clone()
                }),
                name: first.then(|| call.function.name.clone()),
            }),
            id: first.then(|| call.id.clone()),
            index: index as u32,
            kind: first.then(|| "function".to_string()),
        };
        calls
            .iter()
            .enumerate()
            .flat_map(|(i, c)| [piece(i, true, c), piece(i, false, c)])
            .map(|d| Self {
                tool_calls: Some(vec![d]),
                ..Self::default()
            })
            .collect()
    }

    /// A piece of streamed text.
    pub fn text(piece: &str) -> Self {
        Self {
            content: Some(piece.to_string()),
            ..Self::default()
        }
    }
}

impl ChatChunk {
    /// Whether this parsed chunk is really an error object.
    pub fn may_be_error(&self) -> bool {
        self.error.as_ref().is_some_and(|e| !e.is_null()) || self.object.as_deref() == Some("error")
    }
}

/// One choice of a chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub delta: Option<Delta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub index: u32,
    #[serde(default, deserialize_with = "lenient")]
    pub logprobs: Option<Logprobs>,
}

/// What a chunk adds: the role (first chunk), text, or nothing (finish).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    /// A piece of a reasoning model's thinking (see
    /// `Message::reasoning_content`).
    #[serde(
        default,
        alias = "reasoning",
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub reasoning_content: Option<String>,
}

/// A piece of a tool call in a stream: the first piece of call `index`
/// has its id, type and name; later ones add to its arguments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionDelta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default)]
    pub index: u32,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// The function part of a [`ToolCallDelta`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Token counts. A provider may leave any of them out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub completion_tokens: Option<u64>,
    pub prompt_tokens: Option<u64>,
    pub total_tokens: Option<u64>,
    /// What the completion tokens were: the reasoning ones, when the
    /// answer came with thinking.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
    /// OpenAI's breakdown of the prompt: `cached_tokens`, the prompt
    /// tokens served from its prompt cache (billed at a lower price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.completion_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionTokensDetails {
    /// Of the completion tokens, the thinking's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// The part of [`Usage`] that says how much of the prompt was cached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

impl Usage {
    /// All three counts, the total being the sum.
    pub fn counted(prompt: u64, completion: u64) -> Self {
        Self {
            completion_tokens: Some(completion),
            prompt_tokens: Some(prompt),
            total_tokens: Some(prompt + completion),
            completion_tokens_details: None,
            prompt_tokens_details: None,
        }
    }

    /// The same counts, saying how many completion tokens were thinking.
    pub fn with_reasoning_tokens(mut self, reasoning: Option<u64>) -> Self {
        self.completion_tokens_details = reasoning.map(|n| CompletionTokensDetails {
            reasoning_tokens: Some(n),
        });
        self
    }
}

/// What every response and chunk of one completion shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Ids {
    /// Ids for edgecloud run `run_id`'s chat completion, created now.
    pub fn new(run_id: u64, model: &str) -> Self {
        Self::prefixed("chatcmpl", run_id, model)
    }

    /// Ids for edgecloud run `run_id`, the id starting `prefix-` as the
    /// endpoint's ids do (`chatcmpl`, `cmpl`, `resp`), created now.
    pub fn prefixed(prefix: &str, run_id: u64, model: &str) -> Self {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            id: format!("{prefix}-edgecloud-{run_id}"),
            created,
            model: model.to_string(),
        }
    }
}

impl ChatCompletion {
    /// The one-choice response carrying `text`.
    pub fn answer(ids: &Ids, text: &str, finish_reason: &str, usage: Usage) -> Self {
        Self {
            choices: vec![Choice {
                finish_reason: Some(finish_reason.to_string()),
                index: 0,
                logprobs: None,
                message: Some(Message {
                    content: Some(text.to_string()),
                    role: Some("assistant".into()),
                    tool_calls: None,
                    reasoning_content: None,
                }),
            }],
            created: Some(ids.created),
            edgecloud: None,
            id: Some(ids.id.clone()),
            model: Some(ids.model.clone()),
            object: Some("chat.completion".into()),
            system_fingerprint: None,
            usage: Some(usage),
        }
    }

    /// The same answer with tool calls: the message's content is `null`
    /// when the answer is only calls, as OpenAI sends it.
    pub fn with_tool_calls(mut self, calls: &[ToolCall]) -> Self {
        if calls.is_empty() {
            return self;
        }
        if let Some(m) = self.choices[0].message.as_mut() {
            if m.content.as_deref().is_some_and(str::is_empty) {
                m.content = None;
            }
            m.tool_calls = Some(calls.to_vec());
        }
        self
    }

    /// The same answer with a reasoning model's thinking apart from its
    /// content (`reasoning_content`, as llama-server and DeepSeek send it).
    pub fn with_reasoning(mut self, reasoning: Option<&str>) -> Self {
        if let (Some(r), Some(m)) = (reasoning, self.choices[0].message.as_mut()) {
            m.reasoning_content = Some(r.to_string());
        }
        self
    }

    /// The same answer with per-token log-probabilities.
    pub fn with_logprobs(mut self, logprobs: Option<&[TokenLogprob]>) -> Self {
        if let Some(lp) = logprobs {
            self.choices[0].logprobs = Some(Logprobs {
                content: Some(lp.to_vec()),
            });
        }
        self
    }
}

impl ChatChunk {
    /// A one-choice chunk carrying `delta`, or the finish reason.
    pub fn delta(ids: &Ids, delta: Delta, finish_reason: Option<&str>) -> Self {
        Self {
            choices: vec![ChunkChoice {
                delta: Some(delta),
                finish_reason: finish_reason.map(str::to_string),
                index: 0,
                logprobs: None,
            }],
            ..Self::empty(ids)
        }
    }

    /// The first chunk: the assistant's role and empty content.
    pub fn role(ids: &Ids) -> Self {
        Self::delta(
            ids,
            Delta {
                content: Some(String::new()),
                role: Some("assistant".into()),
                tool_calls: None,
                reasoning_content: None,
            },
            None,
        )
    }

    /// A chunk of text.
    pub fn content(ids: &Ids, text: &str) -> Self {
        Self::delta(ids, Delta::text(text), None)
    }

    /// A chunk of a reasoning model's thinking (`delta.reasoning_content`).
    pub fn reasoning(ids: &Ids, text: &str) -> Self {
        let delta = Delta {
            reasoning_content: Some(text.to_string()),
            ..Delta::default()
        };
        Self::delta(ids, delta, None)
    }

    /// The chunks of tool calls, as OpenAI streams them (one chunk per
    /// piece of [`Delta::tool_call_pieces`]).
    pub fn tool_calls(ids: &Ids, calls: &[ToolCall]) -> Vec<Self> {
        Delta::tool_call_pieces(calls)
            .into_iter()
            .map(|d| Self::delta(ids, d, None))
            .collect()
    }

    /// The log-probabilities of the tokens a chunk carries.
    pub fn with_logprobs(mut self, logprobs: Vec<TokenLogprob>) -> Self {
        if let Some(c) = self.choices.first_mut() {
            c.logprobs = Some(Logprobs {
                content: Some(logprobs),
            });
        }
        self
    }

    /// The usage chunk sent last when `stream_options.include_usage` is set.
    pub fn usage(ids: &Ids, usage: Usage) -> Self {
        Self {
            usage: Some(usage),
            ..Self::empty(ids)
        }
    }

    fn empty(ids: &Ids) -> Self {
        Self {
            choices: Vec::new(),
            created: Some(ids.created),
            edgecloud: None,
            error: None,
            id: Some(ids.id.clone()),
            model: Some(ids.model.clone()),
            object: Some("chat.completion.chunk".into()),
            system_fingerprint: None,
            usage: None,
        }
    }
}

/// One entry of `GET /models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Model {
    pub created: u64,
    pub id: String,
    pub object: String,
    pub owned_by: String,
    /// edgecloud's extension, on a server of several local models: whether
    /// the model a name selects is loaded now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded: Option<bool>,
}

impl Model {
    /// A model edgecloud serves.
    pub fn edgecloud(id: &str, created: u64) -> Self {
        Self {
            created,
            id: id.to_string(),
            object: "model".into(),
            owned_by: "edgecloud".into(),
            loaded: None,
        }
    }
}

/// `GET /models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    pub data: Vec<Model>,
    pub object: String,
}

impl ModelList {
    pub fn new(data: Vec<Model>) -> Self {
        Self {
            data,
            object: "list".into(),
        }
    }
}

/// The JSON text of any of the above (or an error body).
pub fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("wire types always serialize (string keys, finite data)")
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A field nobody relies on: a value of the wrong type reads as absent
/// rather than failing the whole response.
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ids() -> Ids {
        Ids {
            id: "chatcmpl-edgecloud-7".into(),
            created: 1_700_000_000,
            model: "edgecloud".into(),
        }
    }

    /// The bytes `serve` wrote with `json!` before these types existed.
    #[test]
    fn serialized_bytes_are_the_json_macro_ones() {
        let ids = ids();
        let mut whole = ChatCompletion::answer(&ids, "hi", "stop", Usage::counted(3, 2));
        whole.edgecloud = Some(json!({"lane": "local"}));
        assert_eq!(
            to_json(&whole),
            r#"{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"hi","role":"assistant"}}],"created":1700000000,"edgecloud":{"lane":"local"},"id":"chatcmpl-edgecloud-7","model":"edgecloud","object":"chat.completion","system_fingerprint":null,"usage":{"completion_tokens":2,"prompt_tokens":3,"total_tokens":5}}"#
        );
        assert_eq!(
            to_json(&ChatChunk::role(&ids)),
            r#"{"choices":[{"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-edgecloud-7","model":"edgecloud","object":"chat.completion.chunk","system_fingerprint":null}"#
        );
        let mut finish = ChatChunk::delta(&ids, Delta::default(), Some("length"));
        finish.edgecloud = Some(json!({"status": "ok"}));
        assert_eq!(
            to_json(&finish),
            r#"{"choices":[{"delta":{},"finish_reason":"length","index":0,"logprobs":null}],"created":1700000000,"edgecloud":{"status":"ok"},"id":"chatcmpl-edgecloud-7","model":"edgecloud","object":"chat.completion.chunk","system_fingerprint":null}"#
        );
        assert_eq!(
            to_json(&ChatChunk::usage(&ids, Usage::counted(3, 2))),
            r#"{"choices":[],"created":1700000000,"id":"chatcmpl-edgecloud-7","model":"edgecloud","object":"chat.completion.chunk","system_fingerprint":null,"usage":{"completion_tokens":2,"prompt_tokens":3,"total_tokens":5}}"#
        );
        assert_eq!(
            to_json(&ModelList::new(vec![Model::edgecloud("edgecloud", 5)])),
            r#"{"data":[{"created":5,"id":"edgecloud","object":"model","owned_by":"edgecloud"}],"object":"list"}"#
        );
    }

    #[test]
    fn null_choices_and_unknown_fields() {
        let r: ChatCompletion = serde_json::from_value(json!({
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

    #[test]
    fn fields_nobody_reads_never_fail_a_response() {
        let r: ChatCompletion = serde_json::from_value(json!({
            "id": 5, "created": "yesterday", "object": {}, "system_fingerprint": 1,
            "choices": [{"index": 0, "logprobs": "x", "message": {"role": 3, "content": "ok"}}]
        }))
        .unwrap();
        assert_eq!(
            r.choices[0].message.as_ref().unwrap().content.as_deref(),
            Some("ok")
        );
        assert_eq!((r.id, r.created), (None, None));
    }
}
