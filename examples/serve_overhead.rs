//! What the HTTP front door adds over calling the harness directly, and
//! what it costs in memory. `scripts/serve-overhead` runs it.
//!
//! In one process, on one runtime (as `edgecloud serve` runs), with the same
//! harness behind both paths:
//! - latency: the same request through `Harness::run` and through
//!   `POST /v1/chat/completions` on loopback (whole JSON, and streamed),
//!   interleaved in blocks so drift hits both alike; medians, p90 and the
//!   added milliseconds;
//! - requests per second, one at a time (a lane admits one task);
//! - `GET /health` per second (the server's own ceiling, no lane involved);
//! - RSS: before the harness, with the model loaded, with the server bound
//!   and idle, and idle again after all the requests.
//!
//! Two backends: the real local lane on the model (`--model`, default
//! `models/tiny.gguf`), and an instant backend (pure overhead).
//!
//! Usage: serve_overhead [--model PATH] [--requests N] [--max-tokens N]

use edgecloud::harness::{
    Backend, BackendFuture, BackendInfo, Candidate, Harness, LocalBackend, RunOptions,
};
use edgecloud::local::LocalConfig;
use edgecloud::serve::{ServeConfig, Server};
use edgecloud::{FinishReason, LaneJob, Policy, Request, Sampling};
use std::time::{Duration, Instant};

/// Answers at once: what is left is the harness's and the server's cost.
struct Instantly;

impl Backend for Instantly {
    fn info(&self) -> BackendInfo {
        BackendInfo::named("instant")
    }
    fn run(&self, _job: LaneJob) -> BackendFuture {
        Box::pin(async { Ok(Candidate::new("The answer is 42.", FinishReason::Stop)) })
    }
}

struct Args {
    model: String,
    requests: usize,
    max_tokens: u32,
}

fn args() -> Args {
    let mut a = Args {
        model: "models/tiny.gguf".into(),
        requests: 400,
        max_tokens: 8,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => a.model = value,
            "--requests" => a.requests = value.parse().expect("--requests N"),
            "--max-tokens" => a.max_tokens = value.parse().expect("--max-tokens N"),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// Resident set size of this process, in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

struct Stats {
    median: Duration,
    p90: Duration,
    per_s: f64,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    let total: Duration = v.iter().sum();
    v.sort();
    Stats {
        median: pct(&v, 0.5),
        p90: pct(&v, 0.9),
        per_s: v.len() as f64 / total.as_secs_f64(),
    }
}

fn request(max_tokens: u32) -> Request {
    let mut r = Request::user("Tell me about edge computing.");
    r.sampling = Sampling {
        max_tokens,
        seed: Some(7),
        ..Sampling::default()
    };
    r
}

struct Paths {
    direct: Vec<Duration>,
    direct_stream: Vec<Duration>,
    json: Vec<Duration>,
    sse: Vec<Duration>,
}

async fn measure(harness: &Harness, url: &str, n: usize, max_tokens: u32) -> Paths {
    let client = reqwest::Client::new();
    let body = |stream: bool| {
        serde_json::json!({
            "model": "edgecloud",
            "messages": [{"role": "user", "content": "Tell me about edge computing."}],
            "max_tokens": max_tokens, "seed": 7, "stream": stream,
        })
        .to_string()
    };
    let (json_body, sse_body) = (body(false), body(true));
    let direct = || async {
        let t = Instant::now();
        let o = harness.run(request(max_tokens)).await.expect("run");
        assert!(o.is_ok(), "{:?}", o.error);
        t.elapsed()
    };
    let direct_stream = || async {
        let t = Instant::now();
        let mut run = harness
            .start(request(max_tokens), RunOptions::new().stream())
            .expect("start");
        let mut text = String::new();
        while let Some(piece) = run.next_token().await {
            text.push_str(&piece);
        }
        let o = run.outcome().await.expect("outcome");
        assert!(o.is_ok(), "{:?}", o.error);
        t.elapsed()
    };
    let http = |b: String| {
        let client = client.clone();
        async move {
            let t = Instant::now();
            let r = client
                .post(format!("{url}/chat/completions"))
                .header("content-type", "application/json")
                .body(b)
                .send()
                .await
                .expect("send");
            assert_eq!(r.status(), 200);
            let _ = r.bytes().await.expect("body");
            t.elapsed()
        }
    };
    // Warm-up (context, connection, allocator).
    for _ in 0..20 {
        direct().await;
        direct_stream().await;
        http(json_body.clone()).await;
        http(sse_body.clone()).await;
    }
    let mut p = Paths {
        direct: Vec::new(),
        direct_stream: Vec::new(),
        json: Vec::new(),
        sse: Vec::new(),
    };
    const BLOCK: usize = 20;
    while p.direct.len() < n {
        for _ in 0..BLOCK {
            p.direct.push(direct().await);
        }
        for _ in 0..BLOCK {
            p.direct_stream.push(direct_stream().await);
        }
        for _ in 0..BLOCK {
            p.json.push(http(json_body.clone()).await);
        }
        for _ in 0..BLOCK {
            p.sse.push(http(sse_body.clone()).await);
        }
    }
    p
}

async fn health_per_s(base: &str, n: usize, concurrency: usize) -> f64 {
    let client = reqwest::Client::new();
    let t = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let client = client.clone();
            let url = format!("{base}/health");
            tokio::spawn(async move {
                for _ in 0..n / concurrency {
                    let r = client.get(&url).send().await.expect("health");
                    let _ = r.bytes().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    (n / concurrency * concurrency) as f64 / t.elapsed().as_secs_f64()
}

fn report(name: &str, p: Paths) {
    let n = p.direct.len();
    let (d, ds) = (stats(p.direct), stats(p.direct_stream));
    let (j, s) = (stats(p.json), stats(p.sse));
    println!("{name} ({n} requests per path, one at a time)");
    println!(
        "  {:<34} {:>9} {:>9} {:>9} {:>14}",
        "path", "median", "p90", "req/s", "server adds"
    );
    for (label, st, base) in [
        ("harness.run (direct, whole)", &d, None),
        ("harness.start + tokens (direct)", &ds, None),
        ("server, whole JSON", &j, Some(&d)),
        ("server, streamed (SSE)", &s, Some(&ds)),
    ] {
        let added = base.map_or_else(String::new, |b| {
            format!("{:.3} ms", ms(st.median) - ms(b.median))
        });
        println!(
            "  {:<34} {:>6.3} ms {:>6.3} ms {:>9.0} {:>14}",
            label,
            ms(st.median),
            ms(st.p90),
            st.per_s,
            added
        );
    }
    println!(
        "  median ratio server/direct: whole {:.2}, streamed {:.2}; req/s ratio direct/server: whole {:.2}, streamed {:.2}",
        ms(j.median) / ms(d.median),
        ms(s.median) / ms(ds.median),
        d.per_s / j.per_s,
        ds.per_s / s.per_s,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let rss_start = rss_mib();

    let local = LocalBackend::start(LocalConfig::new(&a.model)).expect("load the model");
    let harness = Harness::builder()
        .local(local)
        .policy(Policy::LocalOnly)
        .deadline(Duration::from_secs(60))
        .runtime(tokio::runtime::Handle::current())
        .build()
        .expect("harness");
    // Warm the lane first (llama.cpp allocates its compute buffers on the
    // first decode), so the server's figures start from a warm harness.
    for _ in 0..50 {
        harness
            .run(request(a.max_tokens))
            .await
            .expect("warm-up run");
    }
    let rss_model = rss_mib();
    let loopback = ServeConfig::default().listen("127.0.0.1:0".parse().unwrap());
    let server = Server::bind(harness.clone(), loopback.clone())
        .await
        .expect("bind")
        .spawn();
    let rss_bound = rss_mib();
    let url = server.base_url();
    let base = format!("http://{}", server.local_addr());

    println!(
        "machine: {} logical CPUs; model {}; max_tokens {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        a.model,
        a.max_tokens
    );
    let p = measure(&harness, &url, a.requests, a.max_tokens).await;
    report(&format!("local lane on {}", a.model), p);
    let rss_after = rss_mib();
    println!(
        "  GET /health per second: {:.0} (1 connection), {:.0} (4 connections)",
        health_per_s(&base, 2000, 1).await,
        health_per_s(&base, 2000, 4).await
    );

    let instant = Harness::builder()
        .local(Instantly)
        .policy(Policy::LocalOnly)
        .deadline(Duration::from_secs(60))
        .runtime(tokio::runtime::Handle::current())
        .build()
        .expect("harness");
    let instant_server = Server::bind(instant.clone(), loopback)
        .await
        .expect("bind")
        .spawn();
    let p = measure(
        &instant,
        &instant_server.base_url(),
        a.requests * 5,
        a.max_tokens,
    )
    .await;
    report("instant backend (pure overhead)", p);
    instant_server.shutdown().await;
    server.shutdown().await;

    println!("memory (RSS of this process)");
    println!("  before the harness:                   {rss_start:7.1} MiB");
    println!(
        "  model loaded, harness built, 50 runs: {rss_model:7.1} MiB  (+{:.1})",
        rss_model - rss_start
    );
    println!(
        "  server bound, idle:                   {rss_bound:7.1} MiB  (+{:.1})",
        rss_bound - rss_model
    );
    println!(
        "  idle after the requests above:        {rss_after:7.1} MiB  (+{:.1}; server and its test client together)",
        rss_after - rss_model
    );
}
