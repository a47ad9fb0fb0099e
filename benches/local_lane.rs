//! Local lane throughput on the `bench-135m` model (SmolLM2-135M shape,
//! Q8_0, random weights): prompt processing and generation, in tokens.
//!
//! The model is generated once into `target/bench-models/` on first run.
//! Threads: `EDGECLOUD_BENCH_THREADS` (default 2).

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use edgecloud::gguf::{write_model, Preset};
use edgecloud::local::{LocalConfig, LocalLane};
use edgecloud::{ChatMessage, LaneJob, Sampling};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const PROMPT_WORDS: usize = 100;
const GEN_TOKENS: u32 = 64;

fn bench_model() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-models");
    let path = dir.join("bench-135m.gguf");
    if !path.exists() {
        std::fs::create_dir_all(&dir).expect("target dir is writable");
        write_model(&path, Preset::Bench135m, 1).expect("generating bench-135m");
    }
    path
}

fn lane() -> LocalLane {
    let threads = std::env::var("EDGECLOUD_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    LocalLane::start(LocalConfig {
        threads: Some(threads),
        ..LocalConfig::new(bench_model())
    })
    .expect("bench-135m loads")
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// A user prompt whose first word differs per `variant`, so consecutive
/// jobs share almost no prefix and the whole prompt is decoded each time.
fn prompt(variant: usize) -> Vec<ChatMessage> {
    let body: String = (0..PROMPT_WORDS)
        .map(|i| format!("w{} ", (i * 7 + variant) % 89))
        .collect();
    vec![ChatMessage::user(format!("{variant} {body}"))]
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling {
        max_tokens,
        temperature: 0.0,
        ..Sampling::default()
    }
}

fn local_lane(c: &mut Criterion) {
    let lane = lane();
    let prompt_tokens = lane
        .generate(LaneJob::new(prompt(0), greedy(1), far()))
        .expect("warm-up")
        .prompt_tokens;

    let mut group = c.benchmark_group("local_lane");
    group.sample_size(10);
    group.throughput(Throughput::Elements(u64::from(prompt_tokens)));
    let mut variant = 1;
    group.bench_function("prompt_eval", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                variant += 1;
                let done = lane
                    .generate(LaneJob::new(prompt(variant), greedy(1), far()))
                    .expect("prompt job");
                spent += done.timings.prompt_eval;
            }
            spent
        })
    });

    // Generation: tokens after the first, timed by the lane itself.
    group.throughput(Throughput::Elements(u64::from(GEN_TOKENS - 1)));
    group.bench_function("generation", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let done = lane
                    .generate(LaneJob::new(prompt(0), greedy(GEN_TOKENS), far()))
                    .expect("generation job");
                assert_eq!(
                    done.completion_tokens, GEN_TOKENS,
                    "the random model ended early; the throughput would be wrong"
                );
                spent += done.timings.generation;
            }
            spent
        })
    });
    group.finish();
}

criterion_group!(benches, local_lane);
criterion_main!(benches);
