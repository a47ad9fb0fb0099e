//! The request vocabulary shared by every lane: chat messages and sampling
//! settings. Plain data; no lane or harness logic lives here.

use crate::structured::InvalidAnswer;
use crate::tools::{check_tools, validate_call, Tool, ToolCall, ToolChoice};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions that frame the conversation.
    System,
    /// The person asking.
    User,
    /// The model's earlier answers.
    Assistant,
    /// A tool's answer to a call the model made (see
    /// [`ChatMessage::tool_call_id`]).
    Tool,
}

impl Role {
    /// The role's name as chat templates and OpenAI-compatible APIs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: Role,
    /// What it says.
    pub content: String,
    /// The calls an assistant turn made (then `content` may be empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// An assistant turn that called tools.
    pub fn tool_calls(calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls: calls,
            ..Self::new(Role::Assistant, "")
        }
    }

    /// A tool's answer to the call `id`.
    pub fn tool(id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(id.into()),
            ..Self::new(Role::Tool, content)
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// The usual one-shot conversation: an optional system message, then
    /// the user's prompt.
    pub fn conversation(system: Option<String>, user: impl Into<String>) -> Vec<Self> {
        system
            .map(Self::system)
            .into_iter()
            .chain([Self::user(user)])
            .collect()
    }
}

/// Sampling settings. Every lane honours all of them or says in its docs
/// which it cannot (a cloud provider may ignore `top_k` or `seed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sampling {
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// Softmax temperature; 0 means greedy.
    pub temperature: f32,
    /// Nucleus sampling threshold in (0, 1]; 1 disables it.
    pub top_p: f32,
    /// Keep only the k most likely tokens; 0 disables it.
    pub top_k: u32,
    /// Seed for reproducible sampling; `None` picks one per job.
    pub seed: Option<u64>,
    /// Generation stops before the first occurrence of any of these.
    pub stop: Vec<String>,
    /// What the answer must be (JSON, or JSON meeting a schema); `None` is
    /// free text. It lives here, with the other generation settings, so
    /// it flows one way from the caller to every lane: the cloud lane
    /// sends it as `response_format`, the local lane compiles it to a
    /// grammar that constrains its sampling (see [`crate::structured`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<crate::structured::ResponseFormat>,
    /// Functions the model may call (see [`crate::tools`]): the cloud lane
    /// sends them, the local lane renders them with the model's own chat
    /// template and decodes a call under a grammar of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Whether the model must call one; `None` is `auto` when there are
    /// tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Per-token log-probabilities in the answer, with this many most
    /// likely alternatives per token (0-20); `None`: not asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<u8>,
    /// Self-consistency: the local lane answers `samples` times at once
    /// (parallel sequences sharing the prompt's KV cells), the samples
    /// vote, and the answer is the first sample giving the majority
    /// answer, with the share that agrees as its `answer_agreement`
    /// signal. `None` (or one sample): one answer. The cloud lane answers
    /// once whatever this says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consensus: Option<Consensus>,
}

/// Most samples one request may ask of the local lane.
pub const MAX_SAMPLES: u32 = 16;

/// How many local samples vote on an answer, and how their answers are
/// read (see [`Sampling::consensus`]). Sample `i` samples with the seed
/// `seed + i`, so a seeded request gives the same samples every time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Consensus {
    /// Samples, 1 to [`MAX_SAMPLES`]; more than one needs a temperature
    /// above 0 (greedy samples are all the same answer).
    pub samples: u32,
    /// How each sample's answer is read for the vote.
    #[serde(default)]
    pub answer: crate::answer::AnswerKind,
}

impl Consensus {
    /// `samples` samples voting on answers read as `answer`.
    pub fn new(samples: u32, answer: crate::answer::AnswerKind) -> Self {
        Self { samples, answer }
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            max_tokens: 128,
            temperature: 0.8,
            top_p: 0.95,
            top_k: 40,
            seed: None,
            stop: Vec::new(),
            response_format: None,
            tools: Vec::new(),
            tool_choice: None,
            logprobs: None,
            consensus: None,
        }
    }
}

impl Sampling {
    /// Checks the settings, naming the first field that is out of range.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        if self.max_tokens == 0 {
            return Err(InvalidRequest::new("max_tokens must be at least 1"));
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(InvalidRequest::new(
                "temperature must be a finite number >= 0",
            ));
        }
        if !(self.top_p.is_finite() && self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(InvalidRequest::new("top_p must be in (0, 1]"));
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(InvalidRequest::new("stop strings must not be empty"));
        }
        if let Some(f) = &self.response_format {
            f.check()
                .map_err(|e| InvalidRequest::new(format!("response_format: {e}")))?;
        }
        check_tools(&self.tools, self.tool_choice.as_ref())
            .map_err(|e| InvalidRequest::new(e.message))?;
        if self.logprobs.is_some_and(|n| n > MAX_TOP_LOGPROBS) {
            return Err(InvalidRequest::new(format!(
                "top_logprobs must be at most {MAX_TOP_LOGPROBS}"
            )));
        }
        if let Some(c) = &self.consensus {
            if !(1..=MAX_SAMPLES).contains(&c.samples) {
                return Err(InvalidRequest::new(format!(
                    "consensus.samples must be 1 to {MAX_SAMPLES}, got {}",
                    c.samples
                )));
            }
            if c.samples > 1 && self.temperature <= 0.0 {
                return Err(InvalidRequest::new(
                    "consensus.samples above 1 needs a temperature above 0 \
                     (greedy samples all give the same answer)",
                ));
            }
        }
        Ok(())
    }

    /// The tool choice in effect: `None` without tools, else the request's
    /// (`auto` by default).
    pub fn effective_tool_choice(&self) -> ToolChoice {
        match (&self.tool_choice, self.tools.is_empty()) {
            (_, true) => ToolChoice::None,
            (Some(c), false) => c.clone(),
            (None, false) => ToolChoice::Auto,
        }
    }

    /// Whether an answer must have a given shape (JSON, a schema, or a
    /// tool call), so that [`Sampling::check_answer`] can reject one.
    pub fn constrains_answer(&self) -> bool {
        self.response_format.is_some() || self.effective_tool_choice() != ToolChoice::None
    }

    /// Whether an answer (its text and the calls it makes) is what the
    /// request asked for: every call names a declared function with valid
    /// arguments; no call where one was required; without calls, the text
    /// meets the `response_format`, when there is one.
    pub fn check_answer(&self, text: &str, tool_calls: &[ToolCall]) -> Result<(), InvalidAnswer> {
        let choice = self.effective_tool_choice();
        if !tool_calls.is_empty() {
            for call in tool_calls {
                validate_call(&self.tools, &choice, call)?;
            }
            return Ok(());
        }
        if choice.forces_call() {
            return Err(InvalidAnswer {
                at: String::new(),
                reason: "no tool call where one was required".into(),
            });
        }
        match &self.response_format {
            Some(f) => f.accepts(text),
            None => Ok(()),
        }
    }
}

/// The most alternatives per token a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: u8 = 20;

/// A request: messages, sampling, and an optional deadline and id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Caller-chosen id, echoed in outcomes and events.
    #[serde(default)]
    pub id: Option<String>,
    /// The conversation, oldest first.
    pub messages: Vec<ChatMessage>,
    /// How to sample.
    #[serde(default)]
    pub sampling: Sampling,
    /// Time allowed for the whole run, counted from its start.
    #[serde(default, with = "opt_millis")]
    pub deadline: Option<Duration>,
}

impl Request {
    /// A request with one user message and default sampling.
    pub fn user(prompt: impl Into<String>) -> Self {
        Self {
            id: None,
            messages: vec![ChatMessage::user(prompt)],
            sampling: Sampling::default(),
            deadline: None,
        }
    }

    /// Checks the request, naming what is wrong.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        if self.messages.is_empty() {
            return Err(InvalidRequest::new("a request needs at least one message"));
        }
        self.sampling.validate()
    }
}

/// A request or setting that cannot be served as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid request: {reason}")]
pub struct InvalidRequest {
    /// What is wrong, in words.
    pub reason: String,
}

impl InvalidRequest {
    /// An error with the given reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

mod opt_millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::{ChatMessage, Role};

    #[test]
    fn conversation_puts_the_system_message_first_when_given() {
        let with = ChatMessage::conversation(Some("be brief".into()), "hi");
        assert_eq!(
            with.iter().map(|m| m.role).collect::<Vec<_>>(),
            [Role::System, Role::User]
        );
        assert_eq!(with[1].content, "hi");
        assert_eq!(
            ChatMessage::conversation(None, "hi"),
            [ChatMessage::user("hi")]
        );
    }
}
