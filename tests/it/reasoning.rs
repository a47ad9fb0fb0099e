//! A reasoning model's thinking kept apart from its answer (DESIGN: every
//! API reports it apart; scoring judges the answer alone), on the real
//! local lane with the scripted `tiny-think` model (its template opens
//! `<think>`; greedy, it thinks `Sum=4?` and answers `FOUR`), the harness,
//! the cloud lane against loopback servers and every API serve speaks.

use crate::support::models::think_model;
use crate::support::scripted::{Auto, AutoEnd, Scripted};
use edgecloud::gguf::generate::think::{ANSWER, THINKING};
use edgecloud::harness::{Harness, LocalBackend, Policy, RunOptions};
use edgecloud::local::{LocalConfig, LocalLane};
use edgecloud::reasoning::Piece;
use edgecloud::{ChatMessage, LaneJob, Request, Sampling};
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
    let (answer, thinking) = (Arc::new(Mutex::new(String::new())), Arc::new(Mutex::new(String::new())));
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
    assert_eq!(done.completion_tokens, THINKING_TOKENS + ANSWER.len() as u32 + 1);
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
    let thinking: String = pieces.iter().filter(|p| !p.is_answer()).map(Piece::text).collect();
    let answer: String = pieces.iter().filter(|p| p.is_answer()).map(Piece::text).collect();
    assert_eq!((thinking.as_str(), answer.as_str()), (THINKING, ANSWER));
    let first_answer = pieces.iter().position(Piece::is_answer).unwrap();
    assert!(pieces[..first_answer].iter().all(|p| !p.is_answer()) && pieces[first_answer..].iter().all(Piece::is_answer), "thinking first: {pieces:?}");
}
