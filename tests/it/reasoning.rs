//! A reasoning model's thinking kept apart from its answer (DESIGN: every
//! API reports it apart; scoring judges the answer alone), on the real
//! local lane with the scripted `tiny-think` model (its template opens
//! `<think>`; greedy, it thinks `Sum=4?` and answers `FOUR`), the harness,
//! the cloud lane against loopback servers and every API serve speaks.

use crate::serve::{post_to, ServeProcess};
use crate::support::models::think_model;
use crate::support::scripted::{Auto, AutoEnd, Scripted};
use edgecloud::gguf::generate::think::{ANSWER, THINKING};
use edgecloud::harness::{Harness, LocalBackend, Policy, RunOptions};
use edgecloud::local::{LocalConfig, LocalLane};
use edgecloud::reasoning::Piece;
use edgecloud::{ChatMessage, LaneJob, Request, Sampling};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn config() -> LocalConfig {
    LocalConfig {
        threads: Some(2),
        ..LocalConfig::new(think_model())
    }
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling {
        max_tokens,
        temperature: 0.0,
        ..Sampling::default()
    }
}

/// Tokens of `Sum=4?</think>` (one byte token each).
const THINKING_TOKENS: u32 = 14;

#[test]
fn the_local_lane_splits_thinking_from_answer_whole_and_streamed() {
    let lane = LocalLane::start(config()).expect("tiny-think loads");
    let (answer, thinking) = (
        Arc::new(Mutex::new(String::new())),
        Arc::new(Mutex::new(String::new())),
    );
    let (a, t) = (answer.clone(), thinking.clone());
    let job = LaneJob::new(
        vec![ChatMessage::user("What is 2+2?")],
        greedy(64),
        Instant::now() + Duration::from_secs(60),
    )
    .with_sink(move |p| a.lock().unwrap().push_str(p))
    .with_reasoning_sink(move |p| t.lock().unwrap().push_str(p));
    let done = lane.generate(job).unwrap();
    assert_eq!(done.text, ANSWER, "{done:?}");
    assert_eq!(done.reasoning.as_deref(), Some(THINKING));
    assert_eq!(*answer.lock().unwrap(), ANSWER, "the stream's answer");
    assert_eq!(*thinking.lock().unwrap(), THINKING, "the stream's thinking");
    assert_eq!(done.reasoning_tokens, Some(THINKING_TOKENS));
    assert_eq!(
        done.completion_tokens,
        THINKING_TOKENS + ANSWER.len() as u32 + 1
    );
    // The signals read the answer's tokens (and the end of turn) alone:
    // near-certain, where the thinking's are about -3.1 nats each.
    assert_eq!(done.token_logprobs.len(), ANSWER.len() + 1);
    let mean = done.mean_logprob.unwrap();
    assert!(mean > -0.01, "answer-only mean log-prob {mean}");
    assert!(done.first_token_margin.unwrap() > 0.9, "{done:?}");
}

/// A cascade judges the answer, not the thinking: judged over the whole
/// text (mean about -2.3 nats, confidence 0.1) it would escalate; over the
/// answer it keeps the local answer and never starts the cloud lane (a
/// scripted stand-in that would answer at once).
#[test]
fn a_cascade_judges_the_answer_and_streams_the_thinking_apart() {
    let cloud = Scripted::auto("cloud", |_| Auto {
        delay: Duration::ZERO,
        tokens: 0,
        end: AutoEnd::Complete("cloud answer".into()),
        honour_cancel: true,
    });
    let h = Harness::builder()
        .local(LocalBackend::start(config()).unwrap())
        .cloud(cloud.clone())
        .policy(Policy::cascade(0.5))
        .deadline(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut request = Request::user("What is 2+2?");
    request.sampling = greedy(64);
    let mut run = h.start(request, RunOptions::new().stream()).unwrap();
    let mut pieces = Vec::new();
    while let Some(p) = run.next_piece_blocking().unwrap() {
        pieces.push(p);
    }
    let out = run.wait().unwrap();
    assert_eq!(out.text.as_deref(), Some(ANSWER), "{out:#?}");
    let c = out.completion.as_ref().unwrap();
    assert_eq!(c.reasoning.as_deref(), Some(THINKING));
    assert_eq!(c.tokens.local_reasoning, Some(u64::from(THINKING_TOKENS)));
    assert_eq!(cloud.counters().started, 0, "escalated: {out:#?}");
    let thinking: String = pieces
        .iter()
        .filter(|p| !p.is_answer())
        .map(Piece::text)
        .collect();
    let answer: String = pieces
        .iter()
        .filter(|p| p.is_answer())
        .map(Piece::text)
        .collect();
    assert_eq!((thinking.as_str(), answer.as_str()), (THINKING, ANSWER));
    let first_answer = pieces.iter().position(Piece::is_answer).unwrap();
    assert!(
        pieces[..first_answer].iter().all(|p| !p.is_answer())
            && pieces[first_answer..].iter().all(Piece::is_answer),
        "thinking first: {pieces:?}"
    );
}

/// The data of each SSE event of a body (`data:` lines, `[DONE]` left
/// out), with its `event:` name where it has one.
pub(crate) fn sse(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .filter_map(|e| {
            let mut name = String::new();
            let mut data = None;
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = (d != "[DONE]")
                        .then(|| serde_json::from_str(d).unwrap_or_else(|_| panic!("{d}")));
                }
            }
            data.map(|d| (name, d))
        })
        .collect()
}

/// Concatenates the strings at `pointer` over `events`.
pub(crate) fn joined<'a>(events: impl IntoIterator<Item = &'a Value>, pointer: &str) -> String {
    events
        .into_iter()
        .filter_map(|v| v.pointer(pointer).and_then(Value::as_str))
        .collect()
}

async fn post(url: &str, path: &str, body: Value) -> Value {
    let (status, _, text) = post_to(url, path, body, &[]).await;
    assert_eq!(status, 200, "{path}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: {text}"))
}

async fn post_text(url: &str, path: &str, body: Value) -> String {
    let (status, _, text) = post_to(url, path, body, &[]).await;
    assert_eq!(status, 200, "{path}: {text}");
    text
}

/// Every API serve speaks reports the thinking apart from the answer,
/// whole and streamed, on the real binary with the real local lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_reports_the_thinking_apart_whole_and_streamed() {
    let server = ServeProcess::local_only(think_model(), &["--deadline-ms", "60000"]);
    let v1 = server.url.clone();
    let root = v1.trim_end_matches("/v1").to_string();
    let user = json!([{"role": "user", "content": "What is 2+2?"}]);

    // Chat completions: `reasoning_content`, as llama-server sends it.
    let chat = json!({"model": "edgecloud", "messages": user, "temperature": 0});
    let whole = post(&v1, "/chat/completions", chat.clone()).await;
    let m = &whole["choices"][0]["message"];
    assert_eq!(
        (m["content"].as_str(), m["reasoning_content"].as_str()),
        (Some(ANSWER), Some(THINKING)),
        "{whole}"
    );
    assert_eq!(
        whole["usage"]["completion_tokens_details"]["reasoning_tokens"],
        THINKING_TOKENS
    );
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    let events = sse(&post_text(&v1, "/chat/completions", streamed).await);
    let data: Vec<&Value> = events.iter().map(|(_, d)| d).collect();
    assert_eq!(
        joined(data.iter().copied(), "/choices/0/delta/reasoning_content"),
        THINKING
    );
    assert_eq!(
        joined(data.iter().copied(), "/choices/0/delta/content"),
        ANSWER
    );

    // Responses: a reasoning item before the message.
    let responses = json!({"model": "edgecloud", "input": "What is 2+2?", "temperature": 0});
    let whole = post(&v1, "/responses", responses.clone()).await;
    let out = &whole["output"];
    assert_eq!(out[0]["type"], "reasoning", "{whole}");
    assert_eq!(out[0]["content"][0]["text"], THINKING);
    assert_eq!(
        (
            out[1]["type"].as_str(),
            out[1]["content"][0]["text"].as_str()
        ),
        (Some("message"), Some(ANSWER))
    );
    let mut streamed = responses.clone();
    streamed["stream"] = json!(true);
    let events = sse(&post_text(&v1, "/responses", streamed).await);
    let of = |kind: &'static str| {
        events
            .iter()
            .filter(move |(n, _)| n == kind)
            .map(|(_, d)| d)
    };
    assert_eq!(
        joined(of("response.reasoning_text.delta"), "/delta"),
        THINKING
    );
    assert_eq!(joined(of("response.output_text.delta"), "/delta"), ANSWER);
    let completed = of("response.completed").next().expect("completed");
    assert_eq!(
        completed["response"]["output"][1]["content"][0]["text"],
        ANSWER
    );
    assert_eq!(
        of("response.output_text.delta").next().unwrap()["output_index"],
        1
    );

    // Messages: a `thinking` block before the text.
    let messages =
        json!({"model": "edgecloud", "max_tokens": 64, "messages": user, "temperature": 0});
    let whole = post(&v1, "/messages", messages.clone()).await;
    let content = &whole["content"];
    assert_eq!(
        (content[0]["type"].as_str(), content[0]["thinking"].as_str()),
        (Some("thinking"), Some(THINKING)),
        "{whole}"
    );
    assert_eq!(
        (content[1]["type"].as_str(), content[1]["text"].as_str()),
        (Some("text"), Some(ANSWER))
    );
    let mut streamed = messages.clone();
    streamed["stream"] = json!(true);
    let events = sse(&post_text(&v1, "/messages", streamed).await);
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(joined(deltas.iter().copied(), "/delta/thinking"), THINKING);
    assert_eq!(joined(deltas.iter().copied(), "/delta/text"), ANSWER);
    let starts: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "content_block_start")
        .filter_map(|(_, d)| d["content_block"]["type"].as_str())
        .collect();
    assert_eq!(starts, ["thinking", "text"]);

    // Ollama: the message's `thinking` (chat), `thinking` (generate).
    let ollama = json!({"model": "edgecloud", "messages": user, "options": {"temperature": 0}});
    let mut whole_chat = ollama.clone();
    whole_chat["stream"] = json!(false);
    let whole = post(&root, "/api/chat", whole_chat).await;
    assert_eq!(
        (
            whole["message"]["content"].as_str(),
            whole["message"]["thinking"].as_str()
        ),
        (Some(ANSWER), Some(THINKING)),
        "{whole}"
    );
    let text = post_text(&root, "/api/chat", ollama).await;
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(joined(&lines, "/message/thinking"), THINKING);
    assert_eq!(joined(&lines, "/message/content"), ANSWER);
    let generate = json!({"model": "edgecloud", "prompt": "What is 2+2?", "stream": false, "options": {"temperature": 0}});
    let whole = post(&root, "/api/generate", generate).await;
    assert_eq!(
        (whole["response"].as_str(), whole["thinking"].as_str()),
        (Some(ANSWER), Some(THINKING)),
        "{whole}"
    );
    let show = post(&root, "/api/show", json!({"model": "edgecloud"})).await;
    assert_eq!(
        show["capabilities"],
        json!(["completion", "tools", "thinking"])
    );
}
