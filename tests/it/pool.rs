//! Batched local decoding on the real model (SmolLM2-135M): N lanes over
//! one loaded model and one decode loop (`LocalLane::start_shared`), each
//! lane a sequence of one context. Contract point 13: sharing the decode
//! loop never changes a sequence's answer, and a cancel stops its own
//! sequence only.
//!
//! Each comparison starts its runs from the same cache state (fresh
//! sequences, or the same cached prefix): a prefix reused from an earlier
//! job changes how the rest of a prompt is decoded (a few tokens after a
//! cached prefix take other kernels than one whole prompt pass), which can
//! turn a near-tie of the tiny model's first token, as llama.cpp's own
//! prompt cache can. That is prefix reuse, not batching, and these tests
//! are about batching.
//!
//! The prompts (about 26 tokens each with their system message) stay
//! under 64 tokens: from 64 query rows of one sequence in a micro-batch
//! llama.cpp's CPU flash attention takes a tiled path, and a prompt split
//! differently between micro-batches alone and in a batch can then differ
//! in the last bits (docs/DESIGN.md, "Exactness in a batch").

use crate::support::real_model::{asked, smollm2};
use edgecloud::local::{LocalCompletion, LocalConfig, LocalLane, LocalTicket};
use edgecloud::{FinishReason, LaneJob, Sampling};
use std::time::{Duration, Instant};

const QUESTIONS: [&str; 4] = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
    "What do bees make?",
];

fn job(question: &str, max_tokens: u32) -> LaneJob {
    LaneJob::new(
        asked(question),
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
    // Alone: one job at a time, each on a fresh sequence of a pool.
    let lone = lanes(4);
    let alone: Vec<LocalCompletion> = QUESTIONS
        .iter()
        .zip(&lone)
        .map(|(q, lane)| lane.generate(job(q, 32)).unwrap())
        .collect();
    drop(lone);
    // Together: one job per lane of another pool, all submitted before any
    // is awaited, so they decode in one batch (and join at different
    // steps: the prompts differ in length).
    let lanes = lanes(4);
    assert!(lanes.iter().all(|l| l.info().sequences == 4));
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
    // The batched runs reused nothing (their sequences were empty), and
    // their per-token signals are their own.
    assert!(together.iter().all(|t| t.reused_prompt_tokens == 0));
    assert_eq!(
        together[1].token_logprobs.len(),
        together[1].completion_tokens as usize
    );
}

#[test]
fn cancelling_one_sequence_stops_it_alone_and_frees_it_for_the_next_job() {
    // Lane 1's job cancels itself from its own sink after its first piece
    // of text: no timing, the worker sees the token at its next look.
    let cancelled_job = || {
        let cancel = edgecloud::CancellationToken::new();
        let fired = cancel.clone();
        job(QUESTIONS[1], 24)
            .with_cancel(cancel)
            .with_sink(move |_| fired.cancel())
    };
    // The reference: each job alone on a fresh sequence, and lane 1's next
    // job after the same cancel alone.
    let lone = lanes(3);
    let reference: Vec<LocalCompletion> = QUESTIONS[..3]
        .iter()
        .zip(&lone)
        .map(|(q, lane)| lane.generate(job(q, 24)).unwrap())
        .collect();
    let lone_cancelled = lone[1].generate(cancelled_job()).unwrap();
    let reference_again = lone[1].generate(job(QUESTIONS[1], 24)).unwrap();
    drop(lone);
    let lanes = lanes(3);
    let t0 = lanes[0].submit(job(QUESTIONS[0], 24));
    let t1 = lanes[1].submit(cancelled_job());
    let t2 = lanes[2].submit(job(QUESTIONS[2], 24));
    let (a, b, c) = (t0.wait().unwrap(), t1.wait().unwrap(), t2.wait().unwrap());
    assert_eq!(b.finish_reason, FinishReason::Cancelled);
    assert!(
        b.completion_tokens < reference[1].completion_tokens,
        "{b:?}"
    );
    assert_eq!(a.text, reference[0].text, "lane 0 unaffected");
    assert_eq!(c.text, reference[2].text, "lane 2 unaffected");
    assert_eq!(b.completion_tokens, lone_cancelled.completion_tokens);
    // The cancelled lane takes its next job at once, with the answer it
    // gives after the same cancel alone.
    let again = lanes[1].generate(job(QUESTIONS[1], 24)).unwrap();
    assert_eq!(again.text, reference_again.text);
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
