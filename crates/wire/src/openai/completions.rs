//! The legacy text-completion wire format (`POST /completions`): the
//! typed request ([`CompletionRequest`]) and its one reader
//! ([`parse_completion`]), which reads the fields it shares with chat
//! through the chat reader's own field readers (one home per field), and
//! the response and stream-chunk shape ([`TextCompletion`]) with the
//! legacy log-probability object ([`LegacyLogprobs`]). Ranges are
//! `Request::validate`'s, as for chat. It must not do I/O or know HTTP.
//!
//! What is refused, each a [`FieldError`] naming the field: `suffix`
//! (insertion needs a fill-in-the-middle template no lane has), more than
//! one prompt in an array (one request is one harness run: several
//! prompts would need several runs under one deadline; send them as
//! separate requests), token-id prompts, `best_of` and `n` above 1, and
//! `echo` together with `logprobs` (OpenAI then scores the prompt's
//! tokens too, and no lane computes prompt log-probabilities; answering
//! with the answer's alone would look like the prompt's).

use super::error::FieldError;
use super::request::{
    boolean, float, max_tokens, present, seed, stop, stream_options, string, type_error, unsigned,
    StreamOptions,
};
use super::response::{Ids, Usage};
use edgecloud_core::lane::TokenLogprob;
use edgecloud_core::request::Sampling;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A text-completion request, validated for types and shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    pub model: String,
    /// The one prompt.
    pub prompt: String,
    /// Whether the answer's text starts with the prompt.
    pub echo: bool,
    /// Most likely alternatives per token to report (0: only the chosen
    /// token's); `None`: no log-probabilities.
    pub logprobs: Option<u8>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
}

impl CompletionRequest {
    /// The sampling settings it asks for (a raw prompt: no chat template);
    /// what it leaves out keeps `defaults`.
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
        if self.seed.is_some() {
            s.seed = self.seed;
        }
        if !self.stop.is_empty() {
            s.stop = self.stop.clone();
        }
        s.logprobs = self.logprobs;
        s.raw_prompt = true;
        s
    }

    /// Whether usage was asked for in a stream.
    pub fn include_usage(&self) -> bool {
        self.stream_options.is_some_and(|o| o.include_usage)
    }
}

/// Fields [`parse_completion`] reads; the others go back to the caller.
const READ: &[&str] = &[
    "model",
    "prompt",
    "suffix",
    "echo",
    "logprobs",
    "best_of",
    "n",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "stream",
    "stream_options",
];

/// A validated body and the fields it did not read (the caller's
/// extensions, such as serve's `edgecloud` object).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCompletion {
    pub request: CompletionRequest,
    pub extra: Map<String, Value>,
}

/// The one reader of a text-completion body. Unknown fields are handed
/// back (clients send many optional ones); errors name the first bad
/// field.
pub fn parse_completion(obj: &Map<String, Value>) -> Result<ParsedCompletion, FieldError> {
    let model = match present(obj, "model") {
        None => {
            return Err(FieldError::invalid("model", "`model` is required")
                .code("missing_required_parameter"))
        }
        Some(v) => string(v, "model")?.to_string(),
    };
    let prompt = prompt(present(obj, "prompt"))?;
    if let Some(v) = present(obj, "suffix") {
        if !string(v, "suffix")?.is_empty() {
            return Err(FieldError::refused(
                "suffix",
                "`suffix` is not supported: inserting text needs a fill-in-the-middle \
                 template, and no lane has one",
            ));
        }
    }
    let echo = match present(obj, "echo") {
        Some(v) => boolean(v, "echo")?,
        None => false,
    };
    let logprobs = match present(obj, "logprobs") {
        // Its range is `Sampling::validate`'s; past a u8 it is out of
        // range anyway.
        Some(v) => Some(u8::try_from(unsigned(v, "logprobs")?).unwrap_or(u8::MAX)),
        None => None,
    };
    if echo && logprobs.is_some() {
        return Err(FieldError::refused(
            "echo",
            "`echo` with `logprobs` is not supported: it asks for the prompt's \
             log-probabilities, which no lane computes",
        ));
    }
    for field in ["best_of", "n"] {
        if let Some(v) = present(obj, field) {
            if unsigned(v, field)? != 1 {
                return Err(FieldError::refused(
                    field,
                    format!("only `{field}` = 1 is supported"),
                ));
            }
        }
    }
    let (max_tokens, newer) = max_tokens(obj, "")?;
    let top_k = match present(obj, "top_k") {
        Some(v) => Some(u32::try_from(unsigned(v, "top_k")?).unwrap_or(u32::MAX)),
        None => None,
    };
    let stop = match present(obj, "stop") {
        Some(v) => stop(v, "")?,
        None => Vec::new(),
    };
    let stream = match present(obj, "stream") {
        Some(v) => boolean(v, "stream")?,
        None => false,
    };
    let request = CompletionRequest {
        model,
        prompt,
        echo,
        logprobs,
        max_tokens: newer.or(max_tokens),
        temperature: float(obj, "temperature")?,
        top_p: float(obj, "top_p")?,
        top_k,
        seed: seed(obj, "seed")?,
        stop,
        stream,
        stream_options: stream_options(obj, "")?,
    };
    let extra = obj
        .iter()
        .filter(|(k, _)| !READ.contains(&k.as_str()) && k.as_str() != "max_completion_tokens")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(ParsedCompletion { request, extra })
}

/// `prompt`: a string, or an array holding one string.
fn prompt(v: Option<&Value>) -> Result<String, FieldError> {
    let Some(v) = v else {
        return Err(FieldError::invalid("prompt", "`prompt` is required")
            .code("missing_required_parameter"));
    };
    let empty = || FieldError::invalid("prompt", "`prompt` must not be empty");
    match v {
        Value::String(s) if s.is_empty() => Err(empty()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(items) => match items.as_slice() {
            [] => Err(empty()),
            [Value::String(s)] if s.is_empty() => Err(empty()),
            [Value::String(s)] => Ok(s.clone()),
            [Value::Number(_), ..] | [Value::Array(_), ..] => Err(FieldError::refused(
                "prompt",
                "token-id prompts are not supported: send the prompt as text",
            )),
            [one] => Err(type_error("prompt[0]", "a string", one)),
            _ => Err(FieldError::refused(
                "prompt",
                format!(
                    "`prompt` holds {} prompts; this server answers one prompt per request \
                     (one harness run under one deadline): send them as separate requests",
                    items.len()
                ),
            )),
        },
        other => Err(type_error(
            "prompt",
            "a string or an array of one string",
            other,
        )),
    }
}

/// A text completion, whole or as one stream chunk (OpenAI sends both as
/// `text_completion`). Fields in alphabetical order, as every wire type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextCompletion {
    pub choices: Vec<TextChoice>,
    pub created: u64,
    /// edgecloud serve's outcome summary (the whole response, the finish
    /// chunk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edgecloud: Option<Value>,
    pub id: String,
    pub model: String,
    pub object: String,
    pub system_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One choice: its text (a piece of it in a chunk), finish reason (the
/// last chunk's) and log-probabilities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextChoice {
    pub finish_reason: Option<String>,
    pub index: u32,
    pub logprobs: Option<LegacyLogprobs>,
    pub text: String,
}

/// The legacy `logprobs` object: per generated token its text, its
/// log-probability, the most likely tokens there (token to
/// log-probability) and where it starts in the choice's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LegacyLogprobs {
    pub text_offset: Vec<usize>,
    pub token_logprobs: Vec<f32>,
    pub tokens: Vec<String>,
    pub top_logprobs: Vec<BTreeMap<String, f32>>,
}

impl LegacyLogprobs {
    /// From the chat-shaped per-token entries, the first token starting at
    /// character `offset` of the choice's text.
    pub fn from_tokens(tokens: &[TokenLogprob], offset: usize) -> Self {
        let mut at = offset;
        let mut out = Self {
            text_offset: Vec::with_capacity(tokens.len()),
            token_logprobs: Vec::with_capacity(tokens.len()),
            tokens: Vec::with_capacity(tokens.len()),
            top_logprobs: Vec::with_capacity(tokens.len()),
        };
        for t in tokens {
            out.text_offset.push(at);
            at += t.token.chars().count();
            out.token_logprobs.push(t.logprob);
            out.tokens.push(t.token.clone());
            out.top_logprobs.push(
                t.top_logprobs
                    .iter()
                    .map(|a| (a.token.clone(), a.logprob))
                    .collect(),
            );
        }
        out
    }
}

impl TextCompletion {
    /// A completion (or chunk) of one choice.
    pub fn one(ids: &Ids, text: &str, finish_reason: Option<&str>) -> Self {
        Self {
            choices: vec![TextChoice {
                finish_reason: finish_reason.map(str::to_string),
                index: 0,
                logprobs: None,
                text: text.to_string(),
            }],
            created: ids.created,
            edgecloud: None,
            id: ids.id.clone(),
            model: ids.model.clone(),
            object: "text_completion".into(),
            system_fingerprint: None,
            usage: None,
        }
    }

    /// The usage chunk sent last when `stream_options.include_usage` is
    /// set: no choices.
    pub fn usage_chunk(ids: &Ids, usage: Usage) -> Self {
        Self {
            choices: Vec::new(),
            usage: Some(usage),
            ..Self::one(ids, "", None)
        }
    }

    /// The same with the log-probabilities of its tokens.
    pub fn with_logprobs(mut self, logprobs: Option<LegacyLogprobs>) -> Self {
        if let Some(c) = self.choices.first_mut() {
            c.logprobs = logprobs;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgecloud_core::lane::TopLogprob;
    use serde_json::json;

    fn parse(v: Value) -> Result<ParsedCompletion, FieldError> {
        parse_completion(v.as_object().unwrap())
    }

    fn param_of(v: Value) -> String {
        parse(v).unwrap_err().param
    }

    #[test]
    fn a_full_request_reads_into_a_raw_prompt() {
        let p = parse(json!({"model": "m", "prompt": ["Once upon"], "echo": true,
            "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 3, "seed": 9,
            "stop": "\n", "stream": true, "stream_options": {"include_usage": true},
            "suffix": "", "n": 1, "best_of": 1, "frequency_penalty": 0,
            "edgecloud": {"policy": "race"}}))
        .unwrap();
        let r = &p.request;
        assert_eq!(
            (r.prompt.as_str(), r.echo, r.stream),
            ("Once upon", true, true)
        );
        assert!(r.include_usage());
        let s = r.sampling(Sampling::default());
        assert!(s.raw_prompt);
        assert_eq!((s.max_tokens, s.top_k, s.seed), (5, 3, Some(9)));
        assert_eq!(s.stop, ["\n"]);
        assert_eq!(s.logprobs, None);
        assert_eq!(
            p.extra.keys().collect::<Vec<_>>(),
            ["edgecloud", "frequency_penalty"]
        );
        let p = parse(json!({"model": "m", "prompt": "x", "logprobs": 2})).unwrap();
        assert_eq!(p.request.sampling(Sampling::default()).logprobs, Some(2));
    }

    #[test]
    fn each_bad_or_refused_field_is_named() {
        for (body, param) in [
            (json!({"prompt": "x"}), "model"),
            (json!({"model": "m"}), "prompt"),
            (json!({"model": "m", "prompt": 3}), "prompt"),
            (json!({"model": "m", "prompt": []}), "prompt"),
            (json!({"model": "m", "prompt": ""}), "prompt"),
            (json!({"model": "m", "prompt": ["a", "b"]}), "prompt"),
            (json!({"model": "m", "prompt": [1, 2, 3]}), "prompt"),
            (json!({"model": "m", "prompt": [[1, 2]]}), "prompt"),
            (json!({"model": "m", "prompt": [true]}), "prompt[0]"),
            (
                json!({"model": "m", "prompt": "x", "suffix": "end"}),
                "suffix",
            ),
            (json!({"model": "m", "prompt": "x", "suffix": 1}), "suffix"),
            (json!({"model": "m", "prompt": "x", "echo": "yes"}), "echo"),
            (
                json!({"model": "m", "prompt": "x", "logprobs": true}),
                "logprobs",
            ),
            (
                json!({"model": "m", "prompt": "x", "logprobs": -1}),
                "logprobs",
            ),
            (
                json!({"model": "m", "prompt": "x", "echo": true, "logprobs": 1}),
                "echo",
            ),
            (
                json!({"model": "m", "prompt": "x", "best_of": 2}),
                "best_of",
            ),
            (json!({"model": "m", "prompt": "x", "n": 3}), "n"),
            (
                json!({"model": "m", "prompt": "x", "max_tokens": 1.5}),
                "max_tokens",
            ),
            (
                json!({"model": "m", "prompt": "x", "temperature": "hot"}),
                "temperature",
            ),
            (json!({"model": "m", "prompt": "x", "stop": [1]}), "stop[0]"),
            (json!({"model": "m", "prompt": "x", "stream": 1}), "stream"),
        ] {
            assert_eq!(param_of(body.clone()), param, "{body}");
        }
        let e = parse(json!({"model": "m", "prompt": ["a", "b"]})).unwrap_err();
        assert!(e.message.contains("2 prompts"), "{}", e.message);
    }

    #[test]
    fn legacy_logprobs_offsets_follow_the_text() {
        let t = |s: &str, lp: f32| TokenLogprob {
            token: s.into(),
            logprob: lp,
            bytes: None,
            top_logprobs: vec![TopLogprob {
                token: s.into(),
                logprob: lp,
                bytes: None,
            }],
        };
        let l = LegacyLogprobs::from_tokens(&[t("Hé", -0.5), t(" there", -1.0)], 3);
        assert_eq!(l.text_offset, [3, 5]);
        assert_eq!(l.tokens, ["Hé", " there"]);
        assert_eq!(l.token_logprobs, [-0.5, -1.0]);
        assert_eq!(l.top_logprobs[1][" there"], -1.0);
        let ids = Ids {
            id: "cmpl-edgecloud-1".into(),
            created: 5,
            model: "m".into(),
        };
        assert_eq!(
            super::super::to_json(&TextCompletion::one(&ids, "hi", Some("stop"))),
            r#"{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"text":"hi"}],"created":5,"id":"cmpl-edgecloud-1","model":"m","object":"text_completion","system_fingerprint":null}"#
        );
    }
}
