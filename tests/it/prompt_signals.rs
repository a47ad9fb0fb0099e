//! Prompt-only signals on the real SmolLM2 (issue 33): the mean
//! log-probability of the prompt's own tokens, read in the prompt pass.

use std::time::{Duration, Instant};

use edgecloud::local::{LocalCompletion, LocalConfig, LocalLane};
use edgecloud::{ChatMessage, LaneJob, Sampling};

use crate::support::real_model::smollm2;

fn lane() -> LocalLane {
    LocalLane::start(LocalConfig {
        threads: Some(2),
        context_size: Some(512),
        ..LocalConfig::new(smollm2())
    })
    .expect("the real model loads")
}

fn run(lane: &LocalLane, prompt: &str, max_tokens: u32, raw: bool, score: bool) -> LocalCompletion {
    let sampling = Sampling {
        max_tokens,
        temperature: 0.0,
        raw_prompt: raw,
        score_prompt: score,
        ..Sampling::default()
    };
    let deadline = Instant::now() + Duration::from_secs(600);
    lane.generate(LaneJob::new(
        vec![ChatMessage::user(prompt)],
        sampling,
        deadline,
    ))
    .unwrap_or_else(|e| panic!("{prompt}: {}", edgecloud::error_chain(&e)))
}

#[test]
fn a_scored_prompt_gives_its_mean_logprob_and_leaves_the_answer_as_it_was() {
    let lane = lane();
    let q = "What is the capital of France?";
    let plain = run(&lane, q, 16, false, false);
    assert_eq!(plain.prompt_logprob, None);
    let scored = run(&lane, q, 16, false, true);
    let again = run(&lane, q, 16, false, true);
    assert_eq!(scored.text, plain.text);
    assert_eq!(scored.token_logprobs, plain.token_logprobs);
    let score = scored.prompt_logprob.expect("asked for");
    assert!(score.is_finite() && score < 0.0, "{score}");
    // Never taken from the previous request's cache: the same figure.
    assert_eq!(scored.reused_prompt_tokens, 0);
    assert_eq!(again.prompt_logprob, Some(score));
}

/// The prompt pass scores token i from row i - 1: the score of a prompt
/// that is a prefix plus the model's own greedy continuation is the
/// prefix's plus the continuation's sampled log-probabilities.
#[test]
fn each_prompt_token_is_scored_given_the_ones_before_it() {
    let lane = lane();
    let prefix = "The capital of France is";
    let cont = run(&lane, prefix, 6, true, true);
    let whole = run(&lane, &format!("{prefix}{}", cont.text), 1, true, true);
    assert_eq!(
        whole.prompt_tokens,
        cont.prompt_tokens + cont.completion_tokens,
        "the continuation tokenizes as it was sampled: {:?}",
        cont.text
    );
    let sum = |mean: f32, tokens: u32| f64::from(mean) * f64::from(tokens - 1);
    let expected = sum(cont.prompt_logprob.unwrap(), cont.prompt_tokens)
        + cont
            .token_logprobs
            .iter()
            .map(|&l| f64::from(l))
            .sum::<f64>();
    let got = sum(whole.prompt_logprob.unwrap(), whole.prompt_tokens);
    assert!(
        (got - expected).abs() < 0.05,
        "whole prompt {got:.4} nats, prefix + continuation {expected:.4}"
    );
}
