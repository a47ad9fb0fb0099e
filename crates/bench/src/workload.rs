//! Workloads: the requests a benchmark runs. Parses the JSON Lines format
//! (errors name the line) and generates the built-in workloads
//! deterministically. It must not run anything.
//!
//! # Format
//! One JSON object per line; blank lines are skipped (line numbers still
//! count them). Fields:
//!
//! | field | meaning |
//! |---|---|
//! | `messages` | `[{"role": "system"\|"user"\|"assistant", "content": "..."}]` |
//! | `prompt` | shorthand for one user message (instead of `messages`) |
//! | `system` | with `prompt`: a system message before it |
//! | `sampling` | `{"max_tokens", "temperature", "top_p", "top_k", "seed", "stop"}`, each optional |
//! | `id` | the item's name in reports (default `line-N`); unique |
//! | `tag` | a label to group items by (`short`, `rag`, ...) |
//! | `expected` | the reference answer, graded by `grader` |
//! | `grader` | how the reply is graded against `expected`: `contains` (default), `exact`, `number`, `choice`, `regex` (see [`Grader`]) |
//!
//! Unknown fields are errors, so a typo never passes silently.
//!
//! # Workloads people already have
//! Two OpenAI formats are lines too, so an existing request log or batch
//! file runs as it is:
//! - a plain chat-completion body: `{"messages": [...], "max_tokens": 8,
//!   "temperature": 0}`. Its `max_tokens` (or `max_completion_tokens`),
//!   `temperature`, `top_p`, `top_k`, `seed` and `stop` are the sampling
//!   settings (instead of `sampling`, not with it); what it leaves out
//!   keeps the defaults `edgecloud serve` applies to the same body.
//!   `model`, `stream`, `stream_options`, `user`, `metadata` and `store`
//!   are accepted and ignored (the bench's lanes and policies decide
//!   those). The body is read by the same validator as `edgecloud
//!   serve`'s (`edgecloud_wire::openai`), strictly: fields no lane can honour (the
//!   one list in `openai::refused`: `tools`, `tool_choice`,
//!   `logprobs`, ...; and `n` > 1) are refused, never
//!   dropped (dropping them would benchmark a different request), and so
//!   is any field it does not know. `response_format` is honoured (it
//!   becomes the item's `Sampling::response_format`).
//! - an OpenAI Batch API line: `{"custom_id": "q1", "method": "POST",
//!   "url": "/v1/chat/completions", "body": {...}}`, `custom_id` being the
//!   item's id and `body` a chat-completion body as above; `tag`,
//!   `expected` and `grader` may sit next to `custom_id`.
//!
//! Messages may use OpenAI's spellings in every format: role `developer`
//! (a system message), content as a list of text parts, an assistant's
//! content null. Errors name the line and the field
//! (`line 3: `body.messages[1].role`: unsupported role `tool``).

use super::error::BenchError;
use super::grade::Grader;
use edgecloud_core::request::{ChatMessage, Request, Sampling};
use edgecloud_wire::openai::{self, ParseOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::Path;

/// One request of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadItem {
    /// Its name in reports.
    pub id: String,
    /// Its group label.
    pub tag: Option<String>,
    /// The request (its `id` is the item's id).
    pub request: Request,
    /// The reference answer.
    pub expected: Option<String>,
    /// How a reply is graded against `expected`.
    #[serde(default)]
    pub grader: Grader,
}

impl WorkloadItem {
    /// Whether `answer` is right: graded against the expected answer by
    /// the item's grader; `None` without an expected answer.
    pub fn matches(&self, answer: &str) -> Option<bool> {
        let expected = self.expected.as_deref()?;
        Some(self.grader.grade(expected, answer))
    }
}

/// A named list of requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Where it came from: a file path or `builtin:NAME`.
    pub name: String,
    /// Its requests, in run order.
    pub items: Vec<WorkloadItem>,
}

/// A seed made from an item's id (FNV-1a, 64 bits): the same on every
/// machine and every run.
fn seed_of(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The keys of edgecloud's own format on a line (the rest of the line is
/// an OpenAI chat-completion body, read by `edgecloud_wire::openai`).
#[derive(Deserialize)]
struct Native {
    id: Option<String>,
    tag: Option<String>,
    prompt: Option<String>,
    system: Option<String>,
    sampling: Option<Sampling>,
    expected: Option<String>,
    grader: Option<Grader>,
}

/// An OpenAI Batch API line: `{"custom_id", "method", "url", "body"}`,
/// plus edgecloud's grading fields if wanted.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchLine {
    custom_id: String,
    method: Option<String>,
    url: Option<String>,
    body: Value,
    tag: Option<String>,
    expected: Option<String>,
    grader: Option<Grader>,
}

/// Keys of edgecloud's own format that are not OpenAI fields: in a batch
/// line's `body` they are mistakes.
const NATIVE_ONLY: &[&str] = &[
    "id", "tag", "prompt", "system", "sampling", "expected", "grader",
];

/// A line, parsed, before the checks every format shares.
struct Parsed {
    id: Option<String>,
    tag: Option<String>,
    messages: Vec<ChatMessage>,
    sampling: Sampling,
    expected: Option<String>,
    grader: Option<Grader>,
}

/// Parses one non-blank line in any of the three formats; the error is
/// the reason, without the line number.
fn parse_line(raw: &str) -> Result<Parsed, String> {
    let value: Value = serde_json::from_str(raw).map_err(|e| format!("not valid JSON: {e}"))?;
    let Value::Object(obj) = value else {
        return Err("a line must be a JSON object".into());
    };
    if obj.contains_key("custom_id") || obj.contains_key("body") {
        return batch_line(Value::Object(obj));
    }
    let (native, body): (Map<String, Value>, Map<String, Value>) = obj
        .into_iter()
        .partition(|(k, _)| NATIVE_ONLY.contains(&k.as_str()));
    let native: Native =
        serde_json::from_value(Value::Object(native)).map_err(|e| e.to_string())?;
    openai_line(native, body, "")
}

fn batch_line(value: Value) -> Result<Parsed, String> {
    let b: BatchLine = serde_json::from_value(value).map_err(|e| {
        format!("an OpenAI Batch API line ({{\"custom_id\", \"method\", \"url\", \"body\"}}): {e}")
    })?;
    if let Some(m) = &b.method {
        if !m.eq_ignore_ascii_case("POST") {
            return Err(format!("`method` must be \"POST\", not \"{m}\""));
        }
    }
    if let Some(url) = &b.url {
        if url != "/v1/chat/completions" && url != "/chat/completions" {
            return Err(format!(
                "`url` must be \"/v1/chat/completions\" (only chat completions can be benchmarked), not \"{url}\""
            ));
        }
    }
    let Value::Object(body) = b.body else {
        return Err("`body` must be a JSON object (a chat-completion request)".into());
    };
    if let Some(k) = NATIVE_ONLY.iter().find(|k| body.contains_key(**k)) {
        return Err(format!(
            "`body.{k}` is not an OpenAI field (custom_id is the id; tag, expected and grader go on the line itself)"
        ));
    }
    let native = Native {
        id: None,
        tag: None,
        prompt: None,
        system: None,
        sampling: None,
        expected: None,
        grader: None,
    };
    let mut parsed = openai_line(native, body, "body.")?;
    parsed.id = Some(b.custom_id);
    parsed.tag = b.tag;
    parsed.expected = b.expected;
    parsed.grader = b.grader;
    Ok(parsed)
}

/// Sampling fields of a chat-completion body (the alternative to
/// `sampling`).
const SAMPLING_FIELDS: &[&str] = &[
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
];

/// A line's OpenAI part, read strictly by the shared validator (an unknown
/// field is an error, so a typo never passes silently), with the native
/// keys beside it. `at` prefixes field names in errors (`body.` in a batch
/// line).
fn openai_line(native: Native, mut body: Map<String, Value>, at: &str) -> Result<Parsed, String> {
    let has_messages = body.get("messages").is_some_and(|m| !m.is_null());
    match (has_messages, &native.prompt) {
        (true, Some(_)) => return Err("give either `messages` or `prompt`, not both".into()),
        (false, None) => return Err(format!("missing `{at}messages` (or `prompt`)")),
        (true, None) if native.system.is_some() => {
            return Err("`system` goes with `prompt`; put it in `messages`".into())
        }
        (true, None) => {}
        (false, Some(p)) => {
            let messages = ChatMessage::conversation(native.system.clone(), p.clone());
            body.insert(
                "messages".into(),
                serde_json::to_value(messages).expect("messages always serialize"),
            );
        }
    }
    let top_level = SAMPLING_FIELDS
        .iter()
        .any(|k| body.get(*k).is_some_and(|v| !v.is_null()));
    if native.sampling.is_some() && top_level {
        return Err("give sampling settings either in `sampling` or as top-level OpenAI fields (max_tokens, temperature, ...), not both".into());
    }
    let parsed = openai::parse_request(
        &body,
        ParseOptions {
            at,
            require_model: false,
            max_messages: None,
            strict: true,
        },
    )
    .map_err(|e| {
        let field = e.param.strip_prefix(at).unwrap_or(&e.param);
        if openai::REFUSED.iter().any(|r| r.field == field) {
            format!(
                "{}: no lane can honour it, and dropping it would benchmark a different request",
                e.describe()
            )
        } else {
            e.describe()
        }
    })?;
    // What neither `sampling` nor the body sets keeps the defaults
    // `edgecloud serve` uses for the same body.
    let sampling = match native.sampling {
        Some(s) => s,
        None => parsed.request.sampling(Sampling::default()),
    };
    Ok(Parsed {
        id: native.id,
        tag: native.tag,
        messages: parsed.request.messages.into_owned(),
        sampling,
        expected: native.expected,
        grader: native.grader,
    })
}

impl Workload {
    /// Loads `spec`: `builtin:NAME[:COUNT]` or a path to a JSON Lines file.
    pub fn load(spec: &str) -> Result<Self, BenchError> {
        match spec.strip_prefix("builtin:") {
            Some(name) => Self::builtin(name),
            None => Self::from_file(Path::new(spec)),
        }
    }

    /// Reads a JSON Lines file.
    pub fn from_file(path: &Path) -> Result<Self, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("reading", path, e))?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses JSON Lines text; `name` is used in errors and reports.
    pub fn parse(name: &str, text: &str) -> Result<Self, BenchError> {
        let err = |line: usize, reason: String| BenchError::WorkloadLine {
            source_name: name.to_string(),
            line,
            reason,
        };
        let mut items = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            if raw.trim().is_empty() {
                continue;
            }
            let line = parse_line(raw).map_err(|r| err(n, r))?;
            let messages = line.messages;
            let id = line.id.unwrap_or_else(|| format!("line-{n}"));
            if let Some(first) = seen.insert(id.clone(), n) {
                return Err(err(n, format!("id `{id}` already used on line {first}")));
            }
            let request = Request {
                id: Some(id.clone()),
                messages,
                sampling: line.sampling,
                deadline: None,
            };
            request.validate().map_err(|e| err(n, e.reason))?;
            let grader = match (&line.expected, line.grader) {
                (None, Some(_)) => {
                    return Err(err(n, "`grader` needs an `expected` answer".into()))
                }
                (Some(e), g) => {
                    let g = g.unwrap_or_default();
                    g.check_reference(e).map_err(|r| err(n, r))?;
                    g
                }
                (None, None) => Grader::default(),
            };
            items.push(WorkloadItem {
                id,
                tag: line.tag,
                request,
                expected: line.expected,
                grader,
            });
        }
        if items.is_empty() {
            return Err(BenchError::EmptyWorkload {
                source_name: name.to_string(),
            });
        }
        Ok(Self {
            name: name.to_string(),
            items,
        })
    }

    /// The same workload answered locally by a consensus of `samples`
    /// samples per item (self-consistency; see
    /// [`Consensus`](edgecloud_core::request::Consensus)): each item votes on answers
    /// read as its grader reads them ([`Grader::answer_kind`]); an item
    /// that samples greedily gets `temperature` (the samples would all be
    /// the same answer otherwise); an item without a seed gets one made
    /// from its id, so a rerun draws the same samples. An item that already
    /// asks for a consensus keeps its own. `samples` 1 leaves items as
    /// they are.
    pub fn with_consensus(mut self, samples: u32, temperature: f32) -> Self {
        if samples <= 1 {
            return self;
        }
        for item in &mut self.items {
            let s = &mut item.request.sampling;
            if s.consensus.is_some() {
                continue;
            }
            s.consensus = Some(edgecloud_core::request::Consensus::new(
                samples,
                item.grader.answer_kind(),
            ));
            if s.temperature <= 0.0 {
                s.temperature = temperature;
            }
            s.seed.get_or_insert_with(|| seed_of(&item.id));
        }
        self
    }

    /// Writes the workload back as JSON Lines (the format [`Workload::parse`]
    /// reads), e.g. to start a custom workload from a built-in one.
    pub fn to_jsonl(&self) -> String {
        let mut out = String::new();
        for item in &self.items {
            let mut obj = serde_json::json!({
                "id": item.id,
                "messages": item.request.messages,
                "sampling": item.request.sampling,
            });
            if let Some(tag) = &item.tag {
                obj["tag"] = tag.clone().into();
            }
            if let Some(expected) = &item.expected {
                obj["expected"] = expected.clone().into();
                if item.grader != Grader::default() {
                    obj["grader"] = item.grader.as_str().into();
                }
            }
            out.push_str(&obj.to_string());
            out.push('\n');
        }
        out
    }

    /// A built-in workload: `short` (256 items), `long` (64) or `chat` (96
    /// turns, 24 conversations), with an optional `:COUNT` (the first COUNT
    /// items; for `chat`, turns in all).
    pub fn builtin(spec: &str) -> Result<Self, BenchError> {
        let unknown = || BenchError::UnknownBuiltin {
            name: spec.to_string(),
        };
        let (name, count) = match spec.split_once(':') {
            Some((name, count)) => (name, Some(count.parse::<usize>().map_err(|_| unknown())?)),
            None => (spec, None),
        };
        let &(_, text, default) = BUILTINS
            .iter()
            .find(|(n, _, _)| *n == name)
            .ok_or_else(unknown)?;
        let mut items = Workload::parse(&format!("builtin:{name}"), text)?.items;
        let count = count.unwrap_or(default);
        if count == 0 || count > items.len() {
            return Err(BenchError::InvalidSettings {
                reason: format!(
                    "builtin:{name} has 1 to {} items; {count} asked for (a larger workload \
                     is a file: `edgecloud bench --workload FILE`)",
                    items.len()
                ),
            });
        }
        items.truncate(count);
        Ok(Self {
            name: format!("builtin:{spec}"),
            items,
        })
    }
}

/// The built-in workloads, as data: each file is an ordinary workload (the
/// JSON Lines [`Workload::parse`] reads, so `edgecloud bench` can take it
/// as `--workload FILE` too), with its default count. `builtin:NAME:COUNT`
/// takes the file's first COUNT items, so a workload is the same on every
/// machine and every release that does not change its file.
const BUILTINS: [(&str, &str, usize); 3] = [
    // Short questions: a one-line question each, short answers; the
    // capital questions carry an expected answer.
    ("short", include_str!("workloads/short.jsonl"), 16),
    // Long context: about 2,500 characters of text (several hundred
    // tokens with a real tokenizer) and one question about it; the prompt
    // dominates the cost.
    ("long", include_str!("workloads/long.jsonl"), 6),
    // Multi-turn chats sharing a prefix: conversations of four user turns
    // under one long shared system prompt, each item the whole
    // conversation so far with fixed assistant replies, so every request
    // extends an earlier one (the local lane's prefix reuse shows in its
    // time to first token).
    ("chat", include_str!("workloads/chat.jsonl"), 12),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-ins are the items the generator they were made from gave
    /// (digests of `to_jsonl` recorded from it before the move to data).
    #[test]
    fn builtins_are_the_items_they_were_generated_as() {
        for (spec, n, digest) in [
            (
                "short",
                16,
                "643fecd3e48decdfa10e0b632d4db56aed7091d6dc33dfae05077f9626149619",
            ),
            (
                "long",
                6,
                "e1b8dd7241efd9fa96eb3f87e1a475c7c2f6f43167fe8de6879f0a2372571df1",
            ),
            (
                "chat",
                12,
                "fae4cd9f180740e830805222bdff2e3bc36d86fb80ec4a73f8562cd0ef537551",
            ),
            (
                "short:3",
                3,
                "f20ba647858a25b5fd336a9fe2fe2303472e1fa14457d63df09af970f725463f",
            ),
            (
                "chat:5",
                5,
                "fadc75476a5dfa127a6626054333f0744790535b74d35d51a69a8bb3a7630dd4",
            ),
            (
                "chat:7",
                7,
                "57fc9b158c5872fd3346d552485373983a6dd1b4ef3a55a4df74cc4d9460f6b2",
            ),
            (
                "long:1",
                1,
                "8fcbb19fe3cc922d03ef93258cd6f11dfbecbff0021075f7c09a4f8c01d4abb0",
            ),
            (
                "short:256",
                256,
                "15b240c903790f02350d532c47ae9bb64236e5668e2b9614931259c87795abbf",
            ),
            (
                "long:64",
                64,
                "564f6d727e9eedeebec514b7c1d7aa2805dd6191e0c2d4e487bcafb617480677",
            ),
            (
                "chat:96",
                96,
                "34942d47770b455704200c31ff57c837894a7e73e01a384db42147853f91c26b",
            ),
        ] {
            let w = Workload::builtin(spec).unwrap();
            assert_eq!(w.items.len(), n, "{spec}");
            let d = crate::sha256::sha256_reader(w.to_jsonl().as_bytes()).unwrap();
            assert_eq!(d, digest, "{spec}");
        }
        let e = Workload::builtin("short:257").unwrap_err().to_string();
        assert!(e.contains("1 to 256 items"), "{e}");
        assert!(Workload::builtin("short:0").is_err());
        assert!(Workload::builtin("medium").is_err());
    }

    #[test]
    fn builtins_are_deterministic_and_sized() {
        for name in ["short", "long", "chat", "short:3", "chat:5"] {
            let a = Workload::builtin(name).unwrap();
            assert_eq!(a, Workload::builtin(name).unwrap(), "{name}");
            for item in &a.items {
                item.request.validate().unwrap();
            }
        }
        assert_eq!(Workload::builtin("short:3").unwrap().items.len(), 3);
        assert_eq!(Workload::builtin("chat:5").unwrap().items.len(), 5);
        assert!(
            Workload::builtin("long").unwrap().items[0].request.messages[1]
                .content
                .len()
                > 2_500
        );
        assert!(matches!(
            Workload::builtin("nope"),
            Err(BenchError::UnknownBuiltin { .. })
        ));
        assert!(Workload::builtin("short:0").is_err());
        assert!(Workload::builtin("short:x").is_err());
    }

    #[test]
    fn chat_turns_extend_the_previous_turn() {
        let w = Workload::builtin("chat:4").unwrap();
        for pair in w.items.windows(2) {
            let (a, b) = (&pair[0].request.messages, &pair[1].request.messages);
            assert_eq!(
                &b[..a.len()],
                &a[..],
                "each turn starts with the previous one"
            );
            assert!(b.len() > a.len());
        }
    }

    #[test]
    fn a_consensus_reads_answers_as_the_grader_does_and_is_seeded() {
        let text = "{\"id\": \"q\", \"prompt\": \"2+2?\", \"expected\": \"4\", \"grader\": \"number\", \"sampling\": {\"temperature\": 0}}\n\
                    {\"id\": \"c\", \"prompt\": \"Pick\", \"expected\": \"B\", \"grader\": \"choice\", \"sampling\": {\"temperature\": 0.3, \"seed\": 5}}\n\
                    {\"id\": \"own\", \"prompt\": \"x\", \"sampling\": {\"temperature\": 1, \"consensus\": {\"samples\": 2, \"answer\": \"text\"}}}\n";
        let w = Workload::parse("t", text).unwrap();
        assert_eq!(w.clone().with_consensus(1, 0.7), w, "one sample: as it is");
        let k = w.clone().with_consensus(4, 0.7);
        let s = |i: usize| &k.items[i].request.sampling;
        use edgecloud_core::answer::AnswerKind;
        assert_eq!(
            s(0).consensus,
            Some(edgecloud_core::request::Consensus::new(
                4,
                AnswerKind::Number
            ))
        );
        assert_eq!(s(0).temperature, 0.7, "a greedy item gets the temperature");
        assert_eq!(s(0).seed, Some(seed_of("q")));
        assert_ne!(seed_of("q"), seed_of("c"));
        assert_eq!(s(1).consensus.map(|c| c.answer), Some(AnswerKind::Choice));
        assert_eq!(
            (s(1).temperature, s(1).seed),
            (0.3, Some(5)),
            "its own are kept"
        );
        assert_eq!(
            s(2).consensus.map(|c| c.samples),
            Some(2),
            "its own consensus"
        );
        for item in &k.items {
            item.request.validate().unwrap();
        }
        // Same workload, same samples: the seeds do not depend on the run.
        assert_eq!(k, w.with_consensus(4, 0.7));
    }

    #[test]
    fn jsonl_round_trip() {
        let w = Workload::builtin("short:4").unwrap();
        let back = Workload::parse("builtin:short:4", &w.to_jsonl()).unwrap();
        assert_eq!(back.items, w.items);
    }

    #[test]
    fn prompt_shorthand_and_defaults() {
        let w = Workload::parse(
            "t",
            "\n{\"prompt\": \"hi\", \"system\": \"be brief\", \"expected\": \"Hello\"}\n",
        )
        .unwrap();
        let item = &w.items[0];
        assert_eq!(item.id, "line-2");
        assert_eq!(item.request.messages.len(), 2);
        assert_eq!(item.matches("well, hello there"), Some(true));
        assert_eq!(item.matches("bye"), Some(false));
    }

    #[test]
    fn graders_come_from_the_line_and_round_trip() {
        let text = "{\"id\": \"q\", \"prompt\": \"2+2?\", \"expected\": \"4\", \"grader\": \"number\"}\n\
                    {\"id\": \"c\", \"prompt\": \"Pick\", \"expected\": \"B\", \"grader\": \"choice\"}\n";
        let w = Workload::parse("t", text).unwrap();
        assert_eq!(w.items[0].grader, Grader::Number);
        assert_eq!(w.items[0].matches("so 2 + 2 = 4."), Some(true));
        assert_eq!(w.items[0].matches("it is 40"), Some(false));
        assert_eq!(w.items[1].matches("(B)"), Some(true));
        let back = Workload::parse("t", &w.to_jsonl()).unwrap();
        assert_eq!(back.items, w.items);
        for bad in [
            "{\"prompt\": \"a\", \"grader\": \"number\"}",
            "{\"prompt\": \"a\", \"expected\": \"x\", \"grader\": \"number\"}",
            "{\"prompt\": \"a\", \"expected\": \"(\", \"grader\": \"regex\"}",
            "{\"prompt\": \"a\", \"expected\": \"B\", \"grader\": \"fuzzy\"}",
        ] {
            assert!(
                matches!(
                    Workload::parse("w", bad),
                    Err(BenchError::WorkloadLine { line: 1, .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("{\"prompt\": \"a\"}\nnot json\n", 2),
            ("{\"prompt\": \"a\"}\n\n{\"promt\": \"b\"}\n", 3),
            ("{\"messages\": []}\n", 1),
            (
                "{\"prompt\": \"a\", \"sampling\": {\"max_tokens\": 0}}\n",
                1,
            ),
            (
                "{\"id\": \"x\", \"prompt\": \"a\"}\n{\"id\": \"x\", \"prompt\": \"b\"}\n",
                2,
            ),
            ("{\"prompt\": \"a\", \"messages\": []}\n", 1),
        ];
        for (text, want) in cases {
            match Workload::parse("w.jsonl", text) {
                Err(BenchError::WorkloadLine { line, .. }) => assert_eq!(line, want, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(matches!(
            Workload::parse("w", "\n \n"),
            Err(BenchError::EmptyWorkload { .. })
        ));
    }

    #[test]
    fn plain_openai_chat_bodies_are_lines() {
        let text = concat!(
            r#"{"model": "gpt-4o-mini", "messages": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}], "max_tokens": 8, "temperature": 0, "stop": "\n", "seed": 5, "stream": true}"#,
            "\n",
            r#"{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null}, {"role": "user", "content": "y"}], "max_completion_tokens": 3, "top_p": 0.5, "stop": ["a", "b"], "expected": "z"}"#,
            "\n",
        );
        let w = Workload::parse("openai.jsonl", text).unwrap();
        let a = &w.items[0];
        assert_eq!(a.id, "line-1");
        assert_eq!(a.request.messages[0], ChatMessage::system("be brief"));
        assert_eq!(a.request.messages[1], ChatMessage::user("hi there"));
        assert_eq!(a.request.sampling.max_tokens, 8);
        assert_eq!(a.request.sampling.temperature, 0.0);
        assert_eq!(a.request.sampling.seed, Some(5));
        assert_eq!(a.request.sampling.stop, ["\n"]);
        // What the body leaves out keeps serve's defaults.
        assert_eq!(a.request.sampling.top_p, Sampling::default().top_p);
        let b = &w.items[1];
        assert_eq!(b.request.messages[1], ChatMessage::assistant(""));
        assert_eq!(b.request.sampling.max_tokens, 3);
        assert_eq!(b.request.sampling.top_p, 0.5);
        assert_eq!(b.request.sampling.stop, ["a", "b"]);
        assert_eq!(b.matches("z!"), Some(true));
    }

    #[test]
    fn openai_batch_lines_use_custom_id_as_the_id() {
        let text = concat!(
            r#"{"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 4, "temperature": 0}, "expected": "4", "grader": "number"}"#,
            "\n\n",
            r#"{"custom_id": "req-2", "body": {"messages": [{"role": "user", "content": "hi"}]}, "tag": "greet"}"#,
        );
        let w = Workload::parse("batch.jsonl", text).unwrap();
        assert_eq!(w.items.len(), 2);
        assert_eq!(w.items[0].id, "req-1");
        assert_eq!(w.items[0].request.id.as_deref(), Some("req-1"));
        assert_eq!(w.items[0].request.sampling.max_tokens, 4);
        assert_eq!(w.items[0].grader, Grader::Number);
        assert_eq!(w.items[0].matches("it is 4"), Some(true));
        assert_eq!(w.items[1].id, "req-2");
        assert_eq!(w.items[1].tag.as_deref(), Some("greet"));
        // Written back in edgecloud's own format, it reads the same.
        let back = Workload::parse("t", &w.to_jsonl()).unwrap();
        assert_eq!(back.items, w.items);
    }

    #[test]
    fn bad_openai_lines_name_the_line_and_the_field() {
        let ok = r#"{"messages": [{"role": "user", "content": "a"}]}"#;
        let cases: &[(&str, &str)] = &[
            (
                r#"{"messages": [{"role": "bot", "content": "a"}]}"#,
                "messages[0].role",
            ),
            (
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
                "messages[0].content[0]",
            ),
            (r#"{"messages": [{"role": "user"}]}"#, "messages[0].content"),
            (
                r#"{"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function"}]}"#,
                "tools",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "a"}], "n": 2}"#,
                "`n`",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "a"}], "max_tokens": 0}"#,
                "max_tokens",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "a"}], "temperature": 3}"#,
                "temperature",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "a"}], "max_tokens": 4, "sampling": {"max_tokens": 4}}"#,
                "not both",
            ),
            (
                r#"{"messages": [{"role": "user", "content": "a"}], "frequency_penalty": 1}"#,
                "frequency_penalty",
            ),
            (
                r#"{"custom_id": "x", "method": "POST", "url": "/v1/embeddings", "body": {"input": "a"}}"#,
                "/v1/chat/completions",
            ),
            (
                r#"{"custom_id": "x", "method": "GET", "url": "/v1/chat/completions", "body": {}}"#,
                "POST",
            ),
            (
                r#"{"custom_id": "x", "body": {"messages": [{"role": "user", "content": "a"}], "expected": "b"}}"#,
                "body.expected",
            ),
            (
                r#"{"custom_id": "x", "body": {"messages": [{"role": "bot", "content": "a"}]}}"#,
                "body.messages[0].role",
            ),
            (r#"{"body": {"messages": []}}"#, "custom_id"),
            (r#"{"custom_id": "x", "body": "text"}"#, "body"),
            (r#"["not", "an", "object"]"#, "JSON object"),
        ];
        for (bad, says) in cases {
            let text = format!("{ok}\n{bad}\n");
            match Workload::parse("w.jsonl", &text) {
                Err(BenchError::WorkloadLine { line, reason, .. }) => {
                    assert_eq!(line, 2, "{bad}");
                    assert!(
                        reason.contains(says),
                        "{bad}: {reason:?} should say {says:?}"
                    );
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        // custom_id values must be unique like ids.
        let dup = r#"{"custom_id": "x", "body": {"messages": [{"role": "user", "content": "a"}]}}"#;
        match Workload::parse("w", &format!("{dup}\n{dup}\n")) {
            Err(BenchError::WorkloadLine {
                line: 2, reason, ..
            }) => assert!(reason.contains("`x`")),
            other => panic!("{other:?}"),
        }
    }
}
