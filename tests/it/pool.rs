//! Batched local decoding on the real model (SmolLM2-135M): N lanes over
//! one loaded model and one decode loop (`LocalLane::start_shared`), each
//! lane a sequence of one context. Contract point 13: sharing the decode
//! loop never changes a sequence's answer, and a cancel stops its own
//! sequence only.

use crate::support::real_model::smollm2;
use edgecloud::local::{LocalCompletion, LocalConfig, LocalLane, LocalTicket};
use edgecloud::{ChatMessage, FinishReason, LaneJob, Sampling};
use std::time::{Duration, Instant};

const QUESTIONS: [&str; 4] = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
    "What do bees make?",
];

fn job(question: &str, max_tokens: u32) -> LaneJob {
    LaneJob::new(
        vec![ChatMessage::user(question)],
        Sampling {
            max_tokens,
            temperature: 0.0,
            ..Sampling::default()
        },
        Instant::now() + Duration::from_secs(300),
    )
}

fn lanes(n: usize) -> Vec<LocalLane> {
    let mut config = LocalConfig::new(smollm2());
    config.context_size = Some(512);
    LocalLane::start_shared(config, n).expect("the real model loads")
}

#[test]
fn greedy_output_alone_is_greedy_output_in_a_batch() {
    let lanes = lanes(4);
    assert!(lanes.iter().all(|l| l.info().sequences == 4));
    // Alone: one job at a time, on the first lane.
    let alone: Vec<LocalCompletion> = QUESTIONS
        .iter()
        .map(|q| lanes[0].generate(job(q, 32)).unwrap())
        .collect();
    // Together: one job per lane, all submitted before any is awaited, so
    // they decode in one batch (and join at different steps: the prompts
    // differ in length).
    let tickets: Vec<LocalTicket> = QUESTIONS
        .iter()
        .zip(&lanes)
        .map(|(q, lane)| lane.submit(job(q, 32)))
        .collect();
    let together: Vec<LocalCompletion> = tickets.into_iter().map(|t| t.wait().unwrap()).collect();
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        assert!(!a.text.is_empty(), "question {i} got no answer");
        assert_eq!(a.text, b.text, "question {i}: alone vs batched");
        assert_eq!(a.completion_tokens, b.completion_tokens, "question {i}");
        assert_eq!(a.finish_reason, b.finish_reason, "question {i}");
    }
    // The batched run reused nothing from the lone runs on lanes 1-3 (their
    // sequences were empty), and its per-token signals are its own.
    assert_eq!(together[1].reused_prompt_tokens, 0);
    assert_eq!(
        together[1].token_logprobs.len(),
        together[1].completion_tokens as usize
    );
}

#[test]
fn cancelling_one_sequence_stops_it_alone_and_frees_it_for_the_next_job() {
    let lanes = lanes(3);
    let reference: Vec<LocalCompletion> = QUESTIONS[..3]
        .iter()
        .map(|q| lanes[0].generate(job(q, 24)).unwrap())
        .collect();
    // Lane 1's job cancels itself from its own sink after its first piece
    // of text: no timing, the worker sees the token at its next look.
    let cancel = edgecloud::CancellationToken::new();
    let fired = cancel.clone();
    let cancelled_job = job(QUESTIONS[1], 24)
        .with_cancel(cancel)
        .with_sink(move |_| fired.cancel());
    let t0 = lanes[0].submit(job(QUESTIONS[0], 24));
    let t1 = lanes[1].submit(cancelled_job);
    let t2 = lanes[2].submit(job(QUESTIONS[2], 24));
    let (a, b, c) = (t0.wait().unwrap(), t1.wait().unwrap(), t2.wait().unwrap());
    assert_eq!(b.finish_reason, FinishReason::Cancelled);
    assert!(
        b.completion_tokens < reference[1].completion_tokens,
        "{b:?}"
    );
    assert_eq!(a.text, reference[0].text, "lane 0 unaffected");
    assert_eq!(c.text, reference[2].text, "lane 2 unaffected");
    // The cancelled lane takes its next job at once, with the right answer.
    let again = lanes[1].generate(job(QUESTIONS[1], 24)).unwrap();
    assert_eq!(again.text, reference[1].text);
}

#[test]
fn one_lane_runs_its_jobs_in_order_while_another_decodes() {
    let lanes = lanes(2);
    let alone: Vec<String> = [QUESTIONS[0], QUESTIONS[3]]
        .iter()
        .map(|q| lanes[1].generate(job(q, 8)).unwrap().text)
        .collect();
    let long = lanes[0].submit(job(QUESTIONS[2], 48));
    // Two jobs on lane 1, submitted together: they run one after the other
    // (a lane has one sequence), while lane 0 keeps decoding.
    let first = lanes[1].submit(job(QUESTIONS[0], 8));
    let second = lanes[1].submit(job(QUESTIONS[3], 8));
    let (first, second) = (first.wait().unwrap(), second.wait().unwrap());
    assert_eq!(
        [first.text, second.text],
        [alone[0].clone(), alone[1].clone()]
    );
    assert!(long.wait().unwrap().finish_reason.is_complete());
}
