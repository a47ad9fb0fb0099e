//! Replay: a [`Backend`] that answers each known question with a recorded
//! answer, streamed at a chosen time to first token and token rate. It is a
//! stand-in, and says so wherever it is used: behind `edgecloud bench
//! replay-cloud` it plays a real provider holding real recorded answers
//! (say GPT-4's on GSM8K), and as a bench's local lane (`--replay-local`)
//! it is a scripted lane of known confidence (recorded log-probabilities)
//! for tests. It must not grade, and knows nothing of HTTP.
//!
//! # Answer file
//! JSON Lines, one recorded answer per line:
//!
//! ```json
//! {"prompt": "What is 2+2?", "answer": "2 + 2 = 4.\n#### 4", "logprobs": [-0.1, -0.3], "first_token_margin": 0.9}
//! ```
//!
//! `prompt` is matched against the request's last user message (surrounding
//! whitespace ignored); `logprobs` and `first_token_margin` are optional
//! (the candidate's confidence signals); `source` is an optional label
//! (who recorded the answer); `tool_calls`, `[{"name": ..., "arguments":
//! {...}}]`, makes the answer call those tools (an answer of tool calls
//! alone has an empty `answer`). An unknown question is a `replay_unknown`
//! backend error (an HTTP 500 behind `replay-cloud`).
//!
//! # Decisions
//! - The answer is replayed whole: `max_tokens` is ignored, since a
//!   recorded answer was produced under its provider's own limits and
//!   cutting it would grade the replay, not the recording.
//! - Pieces are the answer's words with the whitespace before them, so
//!   the streamed text is exactly the recorded one. Token counts (reported
//!   as the provider's) are those pieces and the prompt's words: a
//!   replay has no tokenizer, and the numbers are labelled as such.
//! - Cancellation and the deadline are observed between pieces and during
//!   every wait.

use super::error::BenchError;
use edgecloud_core::harness::{
    Backend, BackendError, BackendFuture, BackendInfo, Candidate, LaneErrorKind, TokenCounts,
    TokenSignals,
};
use edgecloud_core::lane::{FinishReason, LaneJob};
use edgecloud_core::request::{ChatMessage, Role};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// One recorded answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedAnswer {
    /// The question, as the last user message says it.
    pub prompt: String,
    /// The recorded answer.
    pub answer: String,
    /// Recorded per-token log-probabilities (signals for scorers).
    #[serde(default)]
    pub logprobs: Option<Vec<f32>>,
    /// Recorded first-token top-1 minus top-2 probability.
    #[serde(default)]
    pub first_token_margin: Option<f32>,
    /// Who recorded it (free text, for reports).
    #[serde(default)]
    pub source: Option<String>,
    /// Recorded tool calls, `[{"name": ..., "arguments": {...}}]`: the
    /// answer calls them (after its text, if any).
    #[serde(default)]
    pub tool_calls: Vec<RecordedCall>,
}

/// One recorded tool call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedCall {
    /// The function.
    pub name: String,
    /// Its arguments (a JSON object).
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// Recorded answers and how fast to replay them (see the module docs).
#[derive(Debug, Clone)]
pub struct Replay {
    name: String,
    answers: Arc<HashMap<String, RecordedAnswer>>,
    ttft: Duration,
    per_piece: Duration,
}

impl Replay {
    /// Reads an answer file (errors name the line; a question recorded
    /// twice is an error).
    pub fn load(path: &Path) -> Result<Self, BenchError> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("reading", path, e))?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses answer-file text; `name` is used in errors and reports.
    pub fn parse(name: &str, text: &str) -> Result<Self, BenchError> {
        let err = |line: usize, reason: String| BenchError::WorkloadLine {
            source_name: name.to_string(),
            line,
            reason,
        };
        let mut answers = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            if raw.trim().is_empty() {
                continue;
            }
            let a: RecordedAnswer =
                serde_json::from_str(raw).map_err(|e| err(i + 1, e.to_string()))?;
            let key = a.prompt.trim().to_string();
            if answers.insert(key, a).is_some() {
                return Err(err(i + 1, "this prompt was already recorded".into()));
            }
        }
        if answers.is_empty() {
            return Err(BenchError::EmptyWorkload {
                source_name: name.to_string(),
            });
        }
        Ok(Self {
            name: name.to_string(),
            answers: Arc::new(answers),
            ttft: Duration::ZERO,
            per_piece: Duration::ZERO,
        })
    }

    /// Waits `ttft` before the first piece and `per_piece` between pieces.
    pub fn timing(mut self, ttft: Duration, per_piece: Duration) -> Self {
        self.ttft = ttft;
        self.per_piece = per_piece;
        self
    }

    /// How many answers are recorded.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    /// True when none is (never, once loaded).
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// The answer recorded for `prompt`.
    pub fn answer(&self, prompt: &str) -> Option<&RecordedAnswer> {
        self.answers.get(prompt.trim())
    }
}

/// `text` cut into words, each with the whitespace before it.
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if in_word {
                out.push(&text[start..i]);
                start = i;
                in_word = false;
            }
        } else {
            in_word = true;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

impl Backend for Replay {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: "replay (recorded answers; a stand-in, not a live model)".into(),
            model: Some(self.name.clone()),
            load_time: None,
            device: None,
        }
    }

    fn run(&self, job: LaneJob) -> BackendFuture {
        let this = self.clone();
        Box::pin(async move {
            let mut job = job;
            let question = question_of(&job.messages).to_string();
            let Some(recorded) = this.answer(&question).cloned() else {
                return Err(BackendError::new(
                    LaneErrorKind::InvalidRequest,
                    format!(
                        "no recorded answer for this question ({} characters) in {}",
                        question.len(),
                        this.name
                    ),
                ));
            };
            let cancel = job.cancel.clone();
            let deadline = tokio::time::Instant::from_std(job.deadline);
            // Waits `d`; false when cancelled or past the deadline first.
            let wait = |d: Duration| {
                let cancel = cancel.clone();
                async move {
                    let until = tokio::time::Instant::now() + d;
                    let past_deadline = until > deadline;
                    tokio::select! {
                        () = tokio::time::sleep_until(until.min(deadline)) => !past_deadline,
                        () = cancel.cancelled() => false,
                    }
                }
            };
            let mut text = String::new();
            let mut sent = 0u64;
            let mut reason = FinishReason::Stop;
            for (i, piece) in pieces(&recorded.answer).into_iter().enumerate() {
                let d = if i == 0 { this.ttft } else { this.per_piece };
                if !wait(d).await {
                    reason = job.stop_reason().unwrap_or(FinishReason::Deadline);
                    break;
                }
                if let Some(r) = job.stop_reason() {
                    reason = r;
                    break;
                }
                if let Some(sink) = job.on_token.as_mut() {
                    sink(piece);
                }
                text.push_str(piece);
                sent += 1;
            }
            // A call-only answer still takes its time to first token.
            if sent == 0
                && reason == FinishReason::Stop
                && !recorded.tool_calls.is_empty()
                && !wait(this.ttft).await
            {
                reason = job.stop_reason().unwrap_or(FinishReason::Deadline);
            }
            let mut c = Candidate::new(text, reason);
            if reason == FinishReason::Stop {
                c.tool_calls = recorded
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let args = if r.arguments.is_null() {
                            serde_json::json!({})
                        } else {
                            r.arguments.clone()
                        };
                        edgecloud_core::tools::ToolCall::new(
                            format!("call_replay_{i}"),
                            &r.name,
                            &args,
                        )
                    })
                    .collect();
            }
            c.tokens = TokenCounts {
                provider_prompt: Some(question.split_whitespace().count() as u64),
                provider_completion: Some(sent),
                provider_total: Some(question.split_whitespace().count() as u64 + sent),
                ..TokenCounts::default()
            };
            if let Some(lp) = recorded.logprobs {
                let mut s = TokenSignals::from_logprobs(lp);
                s.first_token_margin = recorded.first_token_margin;
                c.signals = Some(s);
            } else if let Some(m) = recorded.first_token_margin {
                c.signals = Some(TokenSignals {
                    first_token_margin: Some(m),
                    ..TokenSignals::default()
                });
            }
            drop(job);
            Ok(c)
        })
    }
}

/// The question of a conversation: its last user message (empty
/// without one). What a recorded answer is keyed by, and what `bench
/// prompt-signals` embeds.
pub fn question_of(messages: &[ChatMessage]) -> &str {
    messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map_or("", |m| m.content.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_rebuild_the_text_exactly() {
        for t in ["Paris", "  two words\n#### 4 ", "", "a\tb"] {
            assert_eq!(pieces(t).concat(), t);
        }
        assert_eq!(pieces("a b").len(), 2);
    }

    #[test]
    fn answers_parse_and_duplicates_are_named() {
        let r = Replay::parse(
            "r",
            "{\"prompt\": \" Q1 \", \"answer\": \"A1\", \"logprobs\": [-0.5]}\n\n{\"prompt\": \"Q2\", \"answer\": \"A2\"}\n",
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r.answer("Q1").unwrap().answer, "A1");
        let dup = Replay::parse(
            "r",
            "{\"prompt\": \"Q\", \"answer\": \"A\"}\n{\"prompt\": \"Q\", \"answer\": \"B\"}",
        );
        assert!(matches!(dup, Err(BenchError::WorkloadLine { line: 2, .. })));
        assert!(Replay::parse("r", "{\"prompt\": \"Q\"}").is_err());
    }
}
