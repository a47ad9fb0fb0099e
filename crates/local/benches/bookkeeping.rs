//! What the local lane does per generated token besides llama.cpp's
//! decode, timed without llama.cpp, so a regression shows up here first:
//!
//! - `logits/*`: the passes over the logit vector (the signals' maximum,
//!   second-largest logit, greedy pick and log-sum-exp) at 49,152 (SmolLM2)
//!   and 262,144 (Gemma 3) entries, next to what they replaced (an f64
//!   log-softmax and llama.cpp's greedy sampler, which copies the whole
//!   vocabulary per token) for scale;
//! - `utf8/*`: streaming UTF-8 over token pieces, ASCII and split
//!   multi-byte characters;
//! - `stops/*`: the stop-string matcher with 0, 1 and 4 stop strings.
//!
//! Per-token budget, for scale: at 140 tokens/s a token takes 7 ms, so
//! 2% is 140 us. Run: `cargo bench --bench bookkeeping`.

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use edgecloud_local::bookkeeping::{from_pass, scan, variants, StopMatcher, Utf8Stream};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;

/// Logits shaped like a model's: most far below the top few.
fn logits(n: usize) -> Vec<f32> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f32 / (1u64 << 53) as f32;
            -12.0 * u * u + 8.0
        })
        .collect()
}

/// What the lane computed per token before: log-softmax in f64.
fn f64_logprob(logits: &[f32], token: usize) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    (f64::from(logits[token] - max) - sum.ln()) as f32
}

fn bench_logits(c: &mut Criterion) {
    let mut g = c.benchmark_group("logits");
    for n in [49_152usize, 262_144] {
        let v = logits(n);
        g.throughput(Throughput::Elements(n as u64));
        // Each variant this CPU runs (the lane uses the last, the best).
        for k in variants() {
            g.bench_with_input(
                BenchmarkId::new(format!("scan/{}", k.name), n),
                &v,
                |b, v| b.iter(|| (k.scan)(black_box(v))),
            );
            g.bench_with_input(
                BenchmarkId::new(format!("sum_exp/{}", k.name), n),
                &v,
                |b, v| {
                    let max = scan(v).max;
                    b.iter(|| (k.sum_exp)(black_box(v), max))
                },
            );
        }
        // What the lane runs per token of a greedy request: the pick and
        // the signals (log-probability, top-1/top-2 margin).
        g.bench_with_input(
            BenchmarkId::new("greedy_token_and_signals", n),
            &v,
            |b, v| {
                b.iter(|| {
                    let pass = scan(black_box(v));
                    (pass.argmax, from_pass(v, &pass, pass.argmax))
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("replaced/f64_logprob", n), &v, |b, v| {
            b.iter(|| f64_logprob(black_box(v), 7))
        });
        g.bench_with_input(BenchmarkId::new("replaced/llama_greedy", n), &v, |b, v| {
            let mut greedy = LlamaSampler::greedy();
            b.iter(|| {
                // What llama_sampler_sample does for a lone greedy sampler:
                // the vocabulary as token data, then the sampler's pass.
                let mut data = LlamaTokenDataArray::from_iter(
                    v.iter()
                        .enumerate()
                        .map(|(i, &l)| LlamaTokenData::new(LlamaToken(i as i32), l, 0.0)),
                    false,
                );
                data.apply_sampler(&mut greedy);
                data.selected_token()
            })
        });
    }
    g.finish();
}

/// Token pieces of a generated text: mostly short words, some characters
/// split across pieces.
fn pieces(multibyte: bool) -> Vec<Vec<u8>> {
    let text = if multibyte {
        "Zürich, 東京 and São Paulo 🎉 are cities; naïve café déjà vu. "
    } else {
        "The quick brown fox jumps over the lazy dog, and then it rests. "
    };
    let bytes = text.repeat(4).into_bytes();
    // Cut every 3 bytes: multi-byte characters straddle pieces.
    bytes.chunks(3).map(<[u8]>::to_vec).collect()
}

fn bench_utf8(c: &mut Criterion) {
    let mut g = c.benchmark_group("utf8");
    for (name, multibyte) in [("ascii", false), ("multibyte", true)] {
        let p = pieces(multibyte);
        g.throughput(Throughput::Elements(p.len() as u64));
        g.bench_function(format!("{name}/per_piece"), |b| {
            let mut out = String::with_capacity(1024);
            b.iter(|| {
                let mut stream = Utf8Stream::default();
                out.clear();
                for piece in &p {
                    stream.push(black_box(piece), &mut out);
                }
                stream.finish(&mut out);
                out.len()
            })
        });
    }
    g.finish();
}

fn bench_stops(c: &mut Criterion) {
    let mut g = c.benchmark_group("stops");
    let text: Vec<String> = pieces(false)
        .into_iter()
        .map(|p| String::from_utf8(p).expect("ASCII"))
        .collect();
    g.throughput(Throughput::Elements(text.len() as u64));
    for stops in [
        vec![],
        vec!["\n\nUser:".to_string()],
        vec![
            "\n\nUser:".to_string(),
            "</s>".to_string(),
            "###".to_string(),
            "lazy cat".to_string(),
        ],
    ] {
        g.bench_function(format!("{}_stops/per_piece", stops.len()), |b| {
            b.iter(|| {
                let mut m = StopMatcher::new(&stops);
                let mut shown = 0;
                for piece in &text {
                    m.push(black_box(piece));
                    shown += m.releasable().len();
                }
                shown + m.release_rest().len()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_logits, bench_utf8, bench_stops);
criterion_main!(benches);
