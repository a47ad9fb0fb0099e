//! Compares the local lane with llama.cpp's own `llama-bench` on the same
//! model file and thread count: prompt processing (pp) and generation (tg)
//! tokens/s, and their ratio (ours / llama-bench).
//!
//! `cargo run --release --example vs_llama_bench -- LLAMA_BENCH MODEL THREADS [PP] [TG] [ROUNDS]`
//! (`scripts/llama-bench-compare` builds llama-bench and runs this;
//! `scripts/perf-report` runs it on every model of the report).
//!
//! How it stays fair:
//! - **Interleaved.** Each round runs llama-bench (3 repetitions of each
//!   test, in its own process) and then 3 lane jobs; the machine's drift
//!   hits both sides alike. Figures are medians over all rounds; the
//!   per-round ratios give the spread.
//! - **Same depth.** The lane generates after its prompt, so its tokens
//!   attend over `prompt` cached positions; llama-bench's tg runs at
//!   `-d <prompt tokens>` to match (its plain tg64 starts from an empty
//!   cache, which is slightly cheaper per token). Likewise the prompt: a
//!   chat request reuses the template's first tokens from the previous job
//!   (`<|im_start|>` and the like), so its `pp` new tokens attend over those
//!   too, and llama-bench's pp runs at `-d <reused tokens>`. That is not a
//!   rounding: on bench-135m llama-bench's pp128 at depth 7 is about 2-3%
//!   slower than at depth 0 (flash attention skips the key blocks a causal
//!   mask hides entirely, and 7 more keys add a block). llama-bench's pp at
//!   depth 0 is printed too, for reference.
//! - **Same batch.** Prompts are padded so the lane decodes exactly `pp`
//!   new tokens, as llama-bench's pp test does: matrix kernels tile by
//!   rows, and on this machine llama-bench itself ran about 2% slower at
//!   pp125 than at pp128. Consecutive jobs alternate one early word, so
//!   each reuses the same template prefix and nothing more; a job that
//!   decoded another count anyway is left out of pp (and counted).
//! - **A real request.** llama-bench decodes synthetic tokens; the lane
//!   runs a real chat request (template, tokenizer, greedy sampling,
//!   log-probabilities and first-token margin, UTF-8 streaming into a sink,
//!   stop strings), so the ratio is what the lane's bookkeeping costs on
//!   top of llama.cpp.
//!
//! `EDGECLOUD_THREAD_POLICY=fixed` runs the lane without the thread
//! governor (default `adaptive`, as the CLI).
//!
//! The last line is machine-readable (`RESULT key=value ...`) for
//! `scripts/perf-report`.

use edgecloud::local::{LocalConfig, LocalLane};
use edgecloud::{ChatMessage, LaneJob, Sampling};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

/// Repetitions per round on each side.
const PER_ROUND: usize = 3;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// One llama-bench process; returns the per-repetition tokens/s of its
/// single test.
fn llama_bench(bin: &str, model: &str, threads: &str, args: &[String]) -> Vec<f64> {
    let out = Command::new(bin)
        .args(["-m", model, "-t", threads])
        .args(args)
        .args(["-r", &PER_ROUND.to_string(), "-o", "json"])
        .output()
        .expect("llama-bench runs");
    assert!(
        out.status.success(),
        "llama-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("llama-bench JSON");
    let row = rows.first().expect("llama-bench ran one test");
    row["samples_ts"]
        .as_array()
        .map(|s| s.iter().filter_map(Value::as_f64).collect())
        .filter(|s: &Vec<f64>| !s.is_empty())
        .or_else(|| row["avg_ts"].as_f64().map(|t| vec![t]))
        .expect("llama-bench reported tokens/s")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bin, model, threads, rest @ ..] = args.as_slice() else {
        eprintln!("usage: vs_llama_bench LLAMA_BENCH MODEL THREADS [PP] [TG] [ROUNDS]");
        std::process::exit(2);
    };
    let pp: usize = rest.first().and_then(|v| v.parse().ok()).unwrap_or(128);
    let tg: u32 = rest.get(1).and_then(|v| v.parse().ok()).unwrap_or(64);
    let rounds: usize = rest.get(2).and_then(|v| v.parse().ok()).unwrap_or(5);
    let threads_n: usize = threads.parse().expect("THREADS is a number");

    // EDGECLOUD_THREAD_POLICY, as the CLI reads it (default adaptive).
    let thread_policy = std::env::var("EDGECLOUD_THREAD_POLICY")
        .ok()
        .map(|p| {
            p.parse()
                .expect("EDGECLOUD_THREAD_POLICY: adaptive or fixed")
        })
        .unwrap_or_default();
    let lane = LocalLane::start(LocalConfig {
        threads: Some(threads_n),
        thread_policy,
        // Every other job repeats a prompt: a prompt cache would restore
        // it, and the prompt figure is of decoding `pp` tokens.
        cache_ram: 0,
        ..LocalConfig::new(model)
    })
    .expect("model loads");
    let far = || Instant::now() + Duration::from_secs(3600);
    let greedy = |max_tokens| Sampling {
        max_tokens,
        temperature: 0.0,
        // A stop string the text never holds: the matcher's per-token cost
        // is part of what is measured.
        stop: vec!["\n\n\n\n\n\n".into()],
        ..Sampling::default()
    };
    // A user message that a real model answers at length; its number
    // alternates between jobs, so the same few tokens (the template's first
    // ones and "Story") are reused from the previous job every time.
    // `text_tokens` is the message's own length.
    let prompt = |variant: usize, text_tokens: usize| {
        let mut text = format!(
            "Story {}. Continue this list of words, forever:",
            variant % 2 + 1
        );
        let mut i = 0;
        while lane.count_tokens(&text) + 4 < text_tokens {
            text.push_str(&format!(" word{}", (i * 7) % 89));
            i += 1;
        }
        // Single-token padding for an exact length.
        while lane.count_tokens(&text) < text_tokens {
            text.push_str(" x");
        }
        vec![ChatMessage::user(text)]
    };
    let mut job = 0;
    let mut run = |max_tokens, text_tokens| {
        job += 1;
        lane.generate(
            LaneJob::new(prompt(job, text_tokens), greedy(max_tokens), far()).with_sink(
                |piece: &str| {
                    std::hint::black_box(piece);
                },
            ),
        )
        .expect("local job")
    };
    // Two warm-up jobs find the template's length and how much of it the
    // next job reuses; the message is then sized so each job decodes `pp`.
    let probe_tokens = pp.saturating_sub(16).max(8);
    run(tg, probe_tokens);
    let probe = run(tg, probe_tokens);
    let template = (probe.prompt_tokens as usize).saturating_sub(probe_tokens);
    let reused = probe.reused_prompt_tokens as usize;
    let text_tokens = (pp + reused).saturating_sub(template).max(1);
    let mut run = move |max_tokens| run(max_tokens, text_tokens);
    let warm = run(tg);
    let depth = warm.prompt_tokens;
    let reused = warm.reused_prompt_tokens;
    let decoded = depth - reused;

    let pp0_args: Vec<String> = vec!["-p".into(), pp.to_string(), "-n".into(), "0".into()];
    let pp_args = [pp0_args.clone(), vec!["-d".into(), reused.to_string()]].concat();
    let tg_args = vec![
        "-p".into(),
        "0".into(),
        "-n".into(),
        tg.to_string(),
        "-d".into(),
        depth.to_string(),
    ];
    let (mut ref_pp, mut ref_pp0, mut ref_tg, mut ours_pp, mut ours_tg) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut round_pp, mut round_tg) = (Vec::new(), Vec::new());
    let (mut short, mut off_pp) = (0, 0);
    for _ in 0..rounds {
        let r_pp = llama_bench(bin, model, threads, &pp_args);
        let r_pp0 = llama_bench(bin, model, threads, &pp0_args);
        let r_tg = llama_bench(bin, model, threads, &tg_args);
        let (mut o_pp, mut o_tg) = (Vec::new(), Vec::new());
        for _ in 0..PER_ROUND {
            let done = run(tg);
            if done.prompt_tokens == depth && done.reused_prompt_tokens == reused {
                o_pp.push(done.timings.prompt_tokens_per_s.unwrap_or(0.0));
            } else {
                off_pp += 1;
            }
            if done.completion_tokens == tg {
                o_tg.push(done.timings.gen_tokens_per_s.unwrap_or(0.0));
            } else {
                short += 1;
            }
        }
        if !o_pp.is_empty() {
            round_pp.push(median(&o_pp) / median(&r_pp));
        }
        if !o_tg.is_empty() {
            round_tg.push(median(&o_tg) / median(&r_tg));
        }
        ref_pp.extend(r_pp);
        ref_pp0.extend(r_pp0);
        ref_tg.extend(r_tg);
        ours_pp.extend(o_pp);
        ours_tg.extend(o_tg);
    }
    let (pp_ref, pp0_ref, tg_ref) = (median(&ref_pp), median(&ref_pp0), median(&ref_tg));
    let (pp_ours, tg_ours) = (median(&ours_pp), median(&ours_tg));
    let (pp_lo, pp_hi) = min_max(&round_pp);
    let (tg_lo, tg_hi) = min_max(&round_tg);
    println!(
        "model {model}, {threads} threads, {rounds} interleaved rounds of {PER_ROUND}+{PER_ROUND}"
    );
    println!("                    llama-bench   edgecloud   ratio  (rounds min-max)");
    println!(
        "pp{pp:<4} @d{reused:<4} tok/s  {pp_ref:>10.1}  {pp_ours:>10.1}   {:.3}  ({pp_lo:.3}-{pp_hi:.3})  our prompt: {depth} tokens, {reused} reused, {decoded} decoded",
        pp_ours / pp_ref
    );
    println!(
        "pp{pp:<4} @d0    tok/s  {pp0_ref:>10.1}  {:>10}   {:.3}  (llama-bench at depth 0, for reference)",
        "-",
        pp_ours / pp0_ref
    );
    println!(
        "tg{tg:<4} @d{depth:<4} tok/s  {tg_ref:>10.1}  {tg_ours:>10.1}   {:.3}  ({tg_lo:.3}-{tg_hi:.3})",
        tg_ours / tg_ref
    );
    if short > 0 {
        println!("note: {short} lane jobs ended before {tg} tokens and were left out of tg");
    }
    if off_pp > 0 {
        println!("note: {off_pp} lane jobs decoded another prompt length and were left out of pp");
    }
    println!(
        "RESULT pp_ref={pp_ref:.2} pp_ours={pp_ours:.2} pp_ratio={:.4} pp_lo={pp_lo:.4} pp_hi={pp_hi:.4} \
         pp_depth={reused} pp0_ref={pp0_ref:.2} pp0_ratio={:.4} \
         tg_ref={tg_ref:.2} tg_ours={tg_ours:.2} tg_ratio={:.4} tg_lo={tg_lo:.4} tg_hi={tg_hi:.4} \
         depth={depth} decoded={decoded} rounds={rounds} short={short} off_pp={off_pp}",
        pp_ours / pp_ref,
        pp_ours / pp0_ref,
        tg_ours / tg_ref
    );
}
