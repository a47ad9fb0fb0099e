//! Self-consistency on real llama.cpp: a job asking for a consensus of k
//! samples decodes its prompt once, shares the prompt's KV cells with k - 1
//! more sequence ids, samples k answers side by side and votes.

use crate::support::models::tiny_model;
use crate::support::real_model::smollm2;
use edgecloud::answer::{majority, AnswerKind};
use edgecloud::local::{LocalCompletion, LocalConfig, LocalError, LocalLane};
use edgecloud::{CancellationToken, ChatMessage, Consensus, FinishReason, LaneJob, Sampling};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn far() -> Instant {
    Instant::now() + Duration::from_secs(600)
}

fn tiny(max_samples: u32) -> LocalLane {
    LocalLane::start(LocalConfig {
        threads: Some(2),
        max_samples,
        ..LocalConfig::new(tiny_model())
    })
    .expect("the tiny model loads")
}

fn sampled(max_tokens: u32, samples: u32, answer: AnswerKind) -> Sampling {
    Sampling {
        max_tokens,
        temperature: 1.0,
        seed: Some(3),
        consensus: Some(Consensus::new(samples, answer)),
        ..Sampling::default()
    }
}

fn ask(lane: &LocalLane, sampling: Sampling) -> LocalCompletion {
    lane.generate(LaneJob::new(
        vec![ChatMessage::user("Tell me a number")],
        sampling,
        far(),
    ))
    .expect("the consensus runs")
}

#[test]
fn samples_decoded_from_the_shared_prompt_are_the_lone_answer_when_sampling_is_greedy() {
    // top_k 1 makes every sample the argmax: if the shared prompt cells
    // or a sample's positions were wrong, its text would differ from the
    // lone greedy answer's.
    let lane = LocalLane::start(LocalConfig {
        context_size: Some(512),
        max_samples: 4,
        ..LocalConfig::new(smollm2())
    })
    .expect("the real model loads");
    assert_eq!(lane.info().max_samples, 4);
    let question = vec![ChatMessage::user("What is the capital of France?")];
    let greedy = Sampling {
        max_tokens: 24,
        temperature: 0.0,
        ..Sampling::default()
    };
    let lone = lane
        .generate(LaneJob::new(question.clone(), greedy.clone(), far()))
        .unwrap();
    let mut streamed = Vec::new();
    let sink = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = sink.clone();
    let job = LaneJob::new(
        question,
        Sampling {
            temperature: 0.9,
            top_k: 1,
            seed: Some(1),
            consensus: Some(Consensus::new(4, AnswerKind::Text)),
            ..greedy
        },
        far(),
    )
    .with_sink(move |piece| seen.lock().unwrap().push(piece.to_string()));
    let c = lane.generate(job).unwrap();
    streamed.extend(sink.lock().unwrap().drain(..));
    assert!(!lone.text.is_empty());
    assert_eq!(c.samples.len(), 4);
    for (i, s) in c.samples.iter().enumerate() {
        assert_eq!(s.text, lone.text, "sample {i}");
        assert_eq!(s.completion_tokens, lone.completion_tokens, "sample {i}");
    }
    assert_eq!(c.agreement, Some(1.0));
    assert_eq!(c.text, lone.text);
    assert_eq!(c.sampled_tokens, 4 * lone.completion_tokens);
    assert_eq!(c.token_logprobs.len(), c.completion_tokens as usize);
    // A consensus streams its answer whole, once the vote is in.
    assert_eq!(streamed.concat(), c.text);
}

#[test]
fn the_vote_is_the_majority_of_the_samples_and_a_seed_repeats_it() {
    let lane = tiny(5);
    let c = ask(&lane, sampled(8, 5, AnswerKind::Text));
    assert_eq!(c.samples.len(), 5);
    let texts: Vec<&str> = c.samples.iter().map(|s| s.text.as_str()).collect();
    let vote = majority(AnswerKind::Text, &texts);
    assert_eq!(c.agreement, Some(vote.share() as f32));
    assert_eq!(c.text, c.samples[vote.chosen].text);
    assert_eq!(
        c.sampled_tokens,
        c.samples.iter().map(|s| s.completion_tokens).sum::<u32>()
    );
    for s in &c.samples {
        assert_eq!(s.answer, AnswerKind::Text.extract(&s.text));
    }
    assert!(
        texts.iter().any(|t| *t != texts[0]),
        "five samples at temperature 1 all gave {:?}",
        texts[0]
    );
    // Reproducible: a fresh lane draws the same samples from the same seed.
    let again = ask(&tiny(5), sampled(8, 5, AnswerKind::Text));
    assert_eq!(again.samples, c.samples);
    assert_eq!(again.agreement, c.agreement);
    // One sample is a lone answer with no agreement figure.
    let one = ask(&lane, sampled(8, 1, AnswerKind::Text));
    assert!(one.samples.is_empty() && one.agreement.is_none());
}

#[test]
fn the_samples_cells_are_freed_when_a_consensus_ends() {
    // 4 ids of 96 cells: 384 cells in all. Each job takes its prompt and
    // 4 x 16 answer tokens; ten jobs would need far more than 384 cells if
    // the samples' cells stayed behind.
    let lane = LocalLane::start(LocalConfig {
        threads: Some(2),
        context_size: Some(96),
        max_samples: 4,
        ..LocalConfig::new(tiny_model())
    })
    .expect("the tiny model loads");
    for i in 0..10u64 {
        let c = lane
            .generate(LaneJob::new(
                vec![ChatMessage::user(format!("Question {i}: a number?"))],
                Sampling {
                    seed: Some(i),
                    ..sampled(16, 4, AnswerKind::Number)
                },
                far(),
            ))
            .unwrap_or_else(|e| panic!("job {i}: {e}"));
        assert_eq!(c.samples.len(), 4, "job {i}");
    }
}

#[test]
fn bad_consensus_requests_are_typed_errors_and_the_lane_goes_on() {
    let lane = tiny(2);
    let refused = |sampling: Sampling| match lane.generate(LaneJob::new(
        vec![ChatMessage::user("hi")],
        sampling,
        far(),
    )) {
        Err(LocalError::InvalidRequest(e)) => e.to_string(),
        other => panic!("expected an invalid request, got {other:?}"),
    };
    let e = refused(sampled(4, 3, AnswerKind::Number));
    assert!(e.contains("max_samples 2"), "{e}");
    let e = refused(Sampling {
        temperature: 0.0,
        ..sampled(4, 2, AnswerKind::Number)
    });
    assert!(e.contains("temperature"), "{e}");
    let e = refused(sampled(4, 0, AnswerKind::Number));
    assert!(e.contains("consensus.samples"), "{e}");
    let c = ask(&lane, sampled(4, 2, AnswerKind::Number));
    assert_eq!(c.samples.len(), 2);
}

#[test]
fn a_cancelled_consensus_stops_every_sample_and_the_lane_goes_on() {
    let lane = tiny(4);
    // Cancelled when the prompt is done: every sample has its first token
    // (sampled from the prompt's row) and no more.
    let cancel = CancellationToken::new();
    let at_prompt_end = cancel.clone();
    let job = LaneJob::new(
        vec![ChatMessage::user("Tell me a long story about the sea")],
        sampled(200, 4, AnswerKind::Text),
        far(),
    )
    .with_cancel(cancel);
    let c = lane
        .submit_with_progress(job, move |p| {
            if p.done == p.total {
                at_prompt_end.cancel();
            }
        })
        .wait()
        .unwrap();
    assert_eq!(c.finish_reason, FinishReason::Cancelled);
    assert_eq!(c.samples.len(), 4);
    assert!(c.samples.iter().all(|s| s.completion_tokens == 1), "{c:#?}");
    let next = ask(&lane, sampled(6, 4, AnswerKind::Text));
    assert_eq!(next.samples.len(), 4);
    assert!(next.finish_reason.is_complete());
}
