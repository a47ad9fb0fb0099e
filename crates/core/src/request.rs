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

    /// A conversation that ends with an assistant turn to continue (an
    /// unfinished answer: no tool calls, after at least one other
    /// message), split into the conversation before it and its text. As
    /// llama-server (`--prefill-assistant`, its default) and Anthropic's
    /// Messages API read it, the answer goes on from that text, with no
    /// end of turn in between; a lane returns only what it adds.
    pub fn split_prefill(messages: &[ChatMessage]) -> Option<(&[ChatMessage], &str)> {
        let (last, head) = messages.split_last()?;
        (last.role == Role::Assistant && last.tool_calls.is_empty() && !head.is_empty())
            .then_some((head, last.content.as_str()))
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
    /// Softmax temperature, 0 to [`MAX_TEMPERATURE`]; 0 means greedy.
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
    /// The request's one user message is the model's whole prompt, as
    /// written: no chat template (a legacy text completion, `POST
    /// /v1/completions`). The local lane tokenizes it as given (the
    /// model's BOS token added when the model asks for one, special
    /// tokens in the text read as such, as llama-server's `/completion`
    /// does); the cloud lane sends it as one user message of a chat
    /// request, so a provider applies its own template there. It lives
    /// here, with the other generation settings, so it reaches every
    /// lane's job unchanged. A raw prompt takes exactly one user message
    /// and no tools (a tool declaration needs a template to render it).
    #[serde(skip_serializing_if = "is_false")]
    pub raw_prompt: bool,
    /// The local lane also reads how likely the model finds the prompt
    /// itself: the mean log-probability of the prompt's tokens, each
    /// given the ones before it (the `prompt_logprob` signal, read before
    /// any token is generated; see
    /// [`Signal::PromptLogprob`](crate::harness::Signal::PromptLogprob)).
    /// It is computed in the prompt pass the answer needs anyway, with
    /// logits at every prompt token (the output layer's cost per prompt
    /// token) and the prompt decoded from its first token (no prefix
    /// reuse, so the figure never depends on the previous request). The
    /// cloud lane ignores it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub score_prompt: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
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
            raw_prompt: false,
            score_prompt: false,
        }
    }
}

impl Sampling {
    /// Checks the settings, naming the first field that is out of range.
    ///
    /// This is the one home of every sampling rule: the harness calls it
    /// (through [`Request::validate`]) when a run starts, `serve` and the
    /// bench's workloads when they build a request from an OpenAI body
    /// (their parser reads types and shapes and leaves ranges to this),
    /// and the lanes trust what passed it. The error names the field
    /// ([`InvalidRequest::field`]) so a wire layer can name it as its
    /// clients spell it.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        use RequestField as F;
        if self.max_tokens == 0 {
            return Err(InvalidRequest::at(
                F::MaxTokens,
                "max_tokens must be at least 1",
            ));
        }
        if !(self.temperature.is_finite() && (0.0..=MAX_TEMPERATURE).contains(&self.temperature)) {
            return Err(InvalidRequest::at(
                F::Temperature,
                format!("temperature must be a number between 0 and {MAX_TEMPERATURE}"),
            ));
        }
        if !(self.top_p.is_finite() && self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(InvalidRequest::at(F::TopP, "top_p must be in (0, 1]"));
        }
        if let Some(i) = self.stop.iter().position(String::is_empty) {
            return Err(InvalidRequest::at(
                F::Stop(i),
                "stop strings must not be empty",
            ));
        }
        if let Some(f) = &self.response_format {
            f.check().map_err(|e| {
                InvalidRequest::at(F::ResponseFormat, format!("response_format: {e}"))
            })?;
        }
        check_tools(&self.tools, self.tool_choice.as_ref())
            .map_err(|e| InvalidRequest::at(F::Tools, e.message))?;
        if self.logprobs.is_some_and(|n| n > MAX_TOP_LOGPROBS) {
            return Err(InvalidRequest::at(
                F::TopLogprobs,
                format!("top_logprobs must be at most {MAX_TOP_LOGPROBS}"),
            ));
        }
        if let Some(c) = &self.consensus {
            if !(1..=MAX_SAMPLES).contains(&c.samples) {
                return Err(InvalidRequest::at(
                    F::ConsensusSamples,
                    format!(
                        "consensus.samples must be 1 to {MAX_SAMPLES}, got {}",
                        c.samples
                    ),
                ));
            }
            if c.samples > 1 && self.temperature <= 0.0 {
                return Err(InvalidRequest::at(
                    F::ConsensusSamples,
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

/// [`Sampling::max_tokens`] meaning "no limit of the request's own": the
/// answer ends when the model stops, its context is full or the deadline
/// passes (what OpenAI, llama-server and Ollama do for a request that
/// names no limit). The cloud lane then sends no `max_tokens`, leaving
/// the provider's own limit.
pub const MAX_TOKENS_UNBOUNDED: u32 = u32::MAX;

/// The most alternatives per token a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: u8 = 20;

/// The highest temperature a request may ask for (OpenAI's range is 0 to
/// 2; a cloud lane would refuse more).
pub const MAX_TEMPERATURE: f32 = 2.0;

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
        validate_parts(&self.messages, &self.sampling)
    }
}

/// [`Request::validate`] on a request's parts, for a lane given them
/// without the request (the cloud lane's job).
pub fn validate_parts(messages: &[ChatMessage], sampling: &Sampling) -> Result<(), InvalidRequest> {
    if messages.is_empty() {
        return Err(InvalidRequest::at(
            RequestField::Messages,
            "a request needs at least one message",
        ));
    }
    sampling.validate()?;
    if sampling.raw_prompt {
        // The prompt, then (when a lane continues an unfinished answer)
        // the answer so far.
        let continues = messages.len() == 2 && messages[1].role == Role::Assistant;
        if !(messages.len() == 1 || continues) || messages[0].role != Role::User {
            return Err(InvalidRequest::at(
                RequestField::Messages,
                "a raw prompt is exactly one user message (no chat template joins several), \
                 followed by the answer so far when an answer is continued",
            ));
        }
        if !sampling.tools.is_empty() {
            return Err(InvalidRequest::at(
                RequestField::Tools,
                "a raw prompt cannot declare tools (only a chat template renders them)",
            ));
        }
    }
    Ok(())
}

/// A request or setting that cannot be served as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid request: {reason}")]
pub struct InvalidRequest {
    /// What is wrong, in words.
    pub reason: String,
    /// The request's field at fault, when one is.
    pub field: Option<RequestField>,
}

impl InvalidRequest {
    /// An error with the given reason, naming no field.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            field: None,
        }
    }

    /// An error about one field of the request.
    pub fn at(field: RequestField, reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            field: Some(field),
        }
    }
}

/// A field of a [`Request`] that [`Request::validate`] refused: a typed
/// name a wire layer maps to its own spelling (serve's `param`), never a
/// string another layer has to match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RequestField {
    /// [`Request::messages`].
    Messages,
    /// [`Sampling::max_tokens`].
    MaxTokens,
    /// [`Sampling::temperature`].
    Temperature,
    /// [`Sampling::top_p`].
    TopP,
    /// The stop string at this index of [`Sampling::stop`].
    Stop(usize),
    /// [`Sampling::response_format`].
    ResponseFormat,
    /// [`Sampling::tools`] or [`Sampling::tool_choice`].
    Tools,
    /// [`Sampling::logprobs`] (OpenAI's `top_logprobs`).
    TopLogprobs,
    /// [`Consensus::samples`] of [`Sampling::consensus`].
    ConsensusSamples,
}

impl RequestField {
    /// The field's name as OpenAI's chat-completions body spells it
    /// (`top_p`, `stop[1]`), or ours where OpenAI has none
    /// (`consensus.samples`).
    pub fn name(self) -> String {
        match self {
            RequestField::Messages => "messages".into(),
            RequestField::MaxTokens => "max_tokens".into(),
            RequestField::Temperature => "temperature".into(),
            RequestField::TopP => "top_p".into(),
            RequestField::Stop(i) => format!("stop[{i}]"),
            RequestField::ResponseFormat => "response_format".into(),
            RequestField::Tools => "tools".into(),
            RequestField::TopLogprobs => "top_logprobs".into(),
            RequestField::ConsensusSamples => "consensus.samples".into(),
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
    use super::{ChatMessage, Consensus, Request, RequestField, Role, Sampling};

    /// Each rule of a field lives in `Sampling::validate` (or
    /// `Request::validate`) and names its field.
    #[test]
    fn a_trailing_unfinished_assistant_turn_is_a_prefill() {
        let head = vec![ChatMessage::user("q")];
        let mut msgs = head.clone();
        msgs.push(ChatMessage::assistant("The sky"));
        assert_eq!(
            ChatMessage::split_prefill(&msgs),
            Some((&head[..], "The sky"))
        );
        assert_eq!(ChatMessage::split_prefill(&head), None);
        assert_eq!(
            ChatMessage::split_prefill(&[ChatMessage::assistant("a")]),
            None
        );
        let called = vec![ChatMessage::user("q"), ChatMessage::tool_calls(Vec::new())];
        assert!(
            ChatMessage::split_prefill(&called).is_some(),
            "no calls: a prefill"
        );
    }

    #[test]
    fn each_out_of_range_field_is_named() {
        let s = Sampling::default;
        let cases: Vec<(RequestField, Sampling)> = vec![
            (
                RequestField::MaxTokens,
                Sampling {
                    max_tokens: 0,
                    ..s()
                },
            ),
            (
                RequestField::Temperature,
                Sampling {
                    temperature: -0.1,
                    ..s()
                },
            ),
            (
                RequestField::Temperature,
                Sampling {
                    temperature: 2.5,
                    ..s()
                },
            ),
            (
                RequestField::Temperature,
                Sampling {
                    temperature: f32::INFINITY,
                    ..s()
                },
            ),
            (RequestField::TopP, Sampling { top_p: 0.0, ..s() }),
            (RequestField::TopP, Sampling { top_p: 2.0, ..s() }),
            (
                RequestField::TopP,
                Sampling {
                    top_p: f32::NAN,
                    ..s()
                },
            ),
            (
                RequestField::Stop(2),
                Sampling {
                    stop: vec!["a".into(), "b".into(), String::new()],
                    ..s()
                },
            ),
            (
                RequestField::TopLogprobs,
                Sampling {
                    logprobs: Some(21),
                    ..s()
                },
            ),
            (
                RequestField::ConsensusSamples,
                Sampling {
                    consensus: Some(Consensus::new(0, Default::default())),
                    ..s()
                },
            ),
            (
                RequestField::ConsensusSamples,
                Sampling {
                    temperature: 0.0,
                    consensus: Some(Consensus::new(2, Default::default())),
                    ..s()
                },
            ),
        ];
        for (field, sampling) in cases {
            let e = sampling.validate().unwrap_err();
            assert_eq!(e.field, Some(field), "{e}");
        }
        for ok in [
            Sampling {
                temperature: 0.0,
                ..s()
            },
            Sampling {
                temperature: 2.0,
                top_p: 1.0,
                ..s()
            },
            Sampling {
                logprobs: Some(20),
                ..s()
            },
        ] {
            ok.validate().unwrap();
        }
        let mut r = Request::user("q");
        r.messages.clear();
        assert_eq!(
            r.validate().unwrap_err().field,
            Some(RequestField::Messages)
        );
        // A raw prompt is one user message and declares no tools.
        let mut raw = Request::user("Once upon a time");
        raw.sampling.raw_prompt = true;
        raw.validate().unwrap();
        raw.messages.insert(0, ChatMessage::system("s"));
        assert_eq!(
            raw.validate().unwrap_err().field,
            Some(RequestField::Messages)
        );
        raw.messages = vec![ChatMessage::assistant("a")];
        assert_eq!(
            raw.validate().unwrap_err().field,
            Some(RequestField::Messages)
        );
        assert_eq!(RequestField::Stop(3).name(), "stop[3]");
    }

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
