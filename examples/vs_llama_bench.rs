//! Compares the local lane with llama.cpp's own `llama-bench` on the same
//! model file and thread count: prompt processing (pp) and generation (tg)
//! tokens/s, and their ratio (ours / llama-bench).
//!
//! `cargo run --release --example vs_llama_bench -- LLAMA_BENCH MODEL THREADS [PP] [TG]`
//! (`scripts/llama-bench-compare` builds llama-bench and runs this).
//!
//! llama-bench decodes synthetic tokens; the lane runs a real chat request
//! (template, tokenizer, sampler, log-probabilities, streaming), so the
//! ratio is what the lane's bookkeeping costs on top of llama.cpp.

use edgecloud::local::{LocalConfig, LocalLane};
use edgecloud::{ChatMessage, LaneJob, Sampling};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const REPS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [llama_bench, model, threads, rest @ ..] = args.as_slice() else {
        eprintln!("usage: vs_llama_bench LLAMA_BENCH MODEL THREADS [PP] [TG]");
        std::process::exit(2);
    };
    let pp: usize = rest.first().and_then(|v| v.parse().ok()).unwrap_or(128);
    let tg: u32 = rest.get(1).and_then(|v| v.parse().ok()).unwrap_or(64);
    let threads_n: usize = threads.parse().expect("THREADS is a number");

    let out = Command::new(llama_bench)
        .args([
            "-m",
            model,
            "-t",
            threads,
            "-p",
            &pp.to_string(),
            "-n",
            &tg.to_string(),
        ])
        .args(["-r", &REPS.to_string(), "-o", "json"])
        .output()
        .expect("llama-bench runs");
    assert!(
        out.status.success(),
        "llama-bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("llama-bench JSON");
    let rate = |want_pp: bool| {
        rows.iter()
            .find(|r| (r["n_prompt"].as_u64().unwrap_or(0) > 0) == want_pp)
            .and_then(|r| r["avg_ts"].as_f64())
            .expect("llama-bench reported pp and tg")
    };
    let (ref_pp, ref_tg) = (rate(true), rate(false));

    let lane = LocalLane::start(LocalConfig {
        threads: Some(threads_n),
        ..LocalConfig::new(model)
    })
    .expect("model loads");
    let far = || Instant::now() + Duration::from_secs(3600);
    let greedy = |max_tokens| Sampling {
        max_tokens,
        temperature: 0.0,
        ..Sampling::default()
    };
    // A user message of about `pp` prompt tokens; its first word changes
    // per run so nothing is reused from the previous job.
    let prompt = |variant: usize| {
        let mut text = format!("{variant}");
        let mut i = 0;
        while lane.count_tokens(&text) + 8 < pp {
            text.push_str(&format!(" w{}", (i * 7 + variant) % 89));
            i += 1;
        }
        vec![ChatMessage::user(text)]
    };
    let (mut ours_pp, mut ours_tg) = (Vec::new(), Vec::new());
    let mut prompt_tokens = 0;
    for rep in 0..=REPS {
        let done = lane
            .generate(LaneJob::new(prompt(rep), greedy(tg), far()))
            .expect("local job");
        prompt_tokens = done.prompt_tokens;
        if rep == 0 {
            continue; // warm-up
        }
        ours_pp.push(done.timings.prompt_tokens_per_s.unwrap_or(0.0));
        if done.completion_tokens == tg {
            ours_tg.push(done.timings.gen_tokens_per_s.unwrap_or(0.0));
        }
    }
    let (pp_ours, tg_ours) = (median(ours_pp), median(ours_tg));
    println!("model {model}, {threads} threads");
    println!("              llama-bench   edgecloud   ratio");
    println!("pp{pp:<4} tok/s  {ref_pp:>10.1}  {pp_ours:>10.1}   {:.2}  (our prompt: {prompt_tokens} tokens)", pp_ours / ref_pp);
    println!(
        "tg{tg:<4} tok/s  {ref_tg:>10.1}  {tg_ours:>10.1}   {:.2}",
        tg_ours / ref_tg
    );
}
