//! A load generator for OpenAI-compatible servers (edgecloud serve,
//! llama-server): C clients at once, each sending its share of R requests
//! one after another (non-streaming chat completions, greedy), then one JSON
//! line: answered, refused (503), failed, completion tokens per second over
//! the whole run, latency percentiles, and, for edgecloud, the deadline
//! overshoot its responses report.
//!
//! Usage: serve_load URL CLIENTS REQUESTS [MAX_TOKENS] [MODEL] [DEADLINE_MS]
//!   URL: the base URL ending in /v1. MAX_TOKENS defaults to 64, MODEL to
//!   `edgecloud`. DEADLINE_MS (edgecloud only) sets each request's deadline
//!   (`X-Edgecloud-Deadline-Ms`); the overshoot of runs that reached it is
//!   read from the `x-edgecloud-elapsed-ms` and `-deadline-ms` headers. The prompts cycle through a fixed list of short
//!   questions, so two servers given the same arguments get the same
//!   requests. Used by scripts/serve-vs-llama-server.

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROMPTS: [&str; 8] = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
    "What do bees make?",
    "Give me a tip for learning to cook.",
    "Why is the sky blue?",
    "What is a prime number?",
    "Describe a cat in one sentence.",
];

#[derive(Default)]
struct Tally {
    ok: u64,
    refused: u64,
    failed: u64,
    completion_tokens: u64,
    latencies_ms: Vec<f64>,
    overshoot_ms: Vec<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: serve_load URL CLIENTS REQUESTS [MAX_TOKENS] [MODEL]");
        std::process::exit(2);
    }
    let url = format!("{}/chat/completions", args[0].trim_end_matches('/'));
    let clients: usize = args[1].parse().expect("CLIENTS is a number");
    let requests: usize = args[2].parse().expect("REQUESTS is a number");
    let max_tokens: u32 = args.get(3).map_or(64, |s| s.parse().expect("MAX_TOKENS"));
    let model = args.get(4).cloned().unwrap_or_else(|| "edgecloud".into());
    let deadline_ms: Option<String> = args.get(5).cloned();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .timeout(Duration::from_secs(600))
        .build()
        .expect("an HTTP client");
    let tally = Arc::new(std::sync::Mutex::new(Tally::default()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, url, model, tally) = (http.clone(), url.clone(), model.clone(), tally.clone());
        let deadline_ms = deadline_ms.clone();
        tasks.push(tokio::spawn(async move {
            for i in (c..requests).step_by(clients) {
                let body = json!({
                    "model": model,
                    "messages": [{"role": "user", "content": PROMPTS[i % PROMPTS.len()]}],
                    "max_tokens": max_tokens,
                    "temperature": 0.0,
                });
                let sent = Instant::now();
                let mut request = http.post(&url).json(&body);
                if let Some(d) = &deadline_ms {
                    request = request.header("x-edgecloud-deadline-ms", d);
                }
                let response = request.send().await;
                let (status, value, overshoot) = match response {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let header = |name: &str| {
                            r.headers()
                                .get(name)
                                .and_then(|v| v.to_str().ok())
                                .and_then(|v| v.parse::<f64>().ok())
                        };
                        let reached = r
                            .headers()
                            .get("x-edgecloud-status")
                            .is_some_and(|v| v == "deadline_exceeded");
                        let overshoot = match (
                            reached,
                            header("x-edgecloud-elapsed-ms"),
                            header("x-edgecloud-deadline-ms"),
                        ) {
                            (true, Some(e), Some(d)) => Some(e - d),
                            _ => None,
                        };
                        (
                            status,
                            r.json::<Value>().await.unwrap_or(Value::Null),
                            overshoot,
                        )
                    }
                    Err(_) => (0, Value::Null, None),
                };
                let ms = sent.elapsed().as_secs_f64() * 1e3;
                let mut t = tally.lock().unwrap();
                t.overshoot_ms.extend(overshoot);
                match status {
                    200 => {
                        t.ok += 1;
                        t.latencies_ms.push(ms);
                        t.completion_tokens +=
                            value["usage"]["completion_tokens"].as_u64().unwrap_or(0);
                    }
                    503 => t.refused += 1,
                    _ => t.failed += 1,
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("a client task");
    }
    let wall = started.elapsed().as_secs_f64();
    let mut t = tally.lock().unwrap();
    t.latencies_ms.sort_by(f64::total_cmp);
    t.overshoot_ms.sort_by(f64::total_cmp);
    let line = json!({
        "clients": clients,
        "requests": requests,
        "ok": t.ok,
        "refused_503": t.refused,
        "failed": t.failed,
        "completion_tokens": t.completion_tokens,
        "wall_s": wall,
        "tokens_per_s": t.completion_tokens as f64 / wall,
        "p50_ms": percentile(&t.latencies_ms, 0.5),
        "p95_ms": percentile(&t.latencies_ms, 0.95),
        "deadline_reached": t.overshoot_ms.len(),
        "overshoot_p50_ms": percentile(&t.overshoot_ms, 0.5),
        "overshoot_p99_ms": percentile(&t.overshoot_ms, 0.99),
    });
    println!("{line}");
}
