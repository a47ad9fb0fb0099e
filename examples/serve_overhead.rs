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
//!   and idle, and idle again after all the requests;
//! - per endpoint (chat whole and streamed, `/v1/completions`,
//!   `/v1/responses`, Anthropic's `/v1/messages` whole and streamed,
//!   Ollama's `/api/chat` whole and streamed (NDJSON),
//!   `/v1/embeddings`, `GET /health`), on a pool of
//!   instant backends (the embeddings on the model's own lane, driven at
//!   most at 100 requests/s): the
//!   server's added median one request at a time, then p50 and p99 of the
//!   direct call and of the server when driven open loop at a fixed rate
//!   (`--rate`, default 1,000 requests/s, for `--seconds`, default 5, each;
//!   a request starts on its tick whatever the earlier ones do, over
//!   keep-alive connections the client opens as needed). The server's open
//!   loop is driven from a process of its own (this example started again
//!   with `--drive`, one thread, reqwest over loopback TCP), as a real
//!   client is; `--generator runtime` drives it from the server's own
//!   runtime (how it was measured before), where the generator's ticks,
//!   request tasks and client connections share the server's two workers.
//!   The direct calls' open loop stays in this process (it calls the
//!   harness). `--endpoints` picks the rows and their order. The last
//!   column is the share of the machine's CPU time the hypervisor stole
//!   during the server's open loop (`/proc/stat`): on a shared VM, seconds
//!   with a high steal stall every thread for milliseconds, and the p99
//!   follows them whatever the server does.
//!
//! Two backends: the real local lane on the model (`--model`, default
//! `models/tiny.gguf`), and an instant backend (pure overhead).
//!
//! Usage: serve_overhead [--model PATH] [--requests N] [--max-tokens N]
//! [--rate N] [--seconds S] [--only-endpoints] [--generator process|runtime]
//! [--endpoints chat,chat-stream,completions,responses,messages,messages-stream,
//!  ollama-chat,ollama-chat-stream,embeddings,health]

use edgecloud::harness::{
    Backend, BackendFuture, BackendInfo, Candidate, Harness, LocalBackend, RunOptions,
};
use edgecloud::local::{EmbedInput, LocalConfig, LocalLane};
use edgecloud::serve::{ServeConfig, Server};
use edgecloud::{FinishReason, LaneJob, Policy, Request, Sampling};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::time::MissedTickBehavior;

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
    rate: u32,
    seconds: f64,
    only_endpoints: bool,
    /// Where the per-endpoint open loop's HTTP client runs.
    generator: Generator,
    /// The per-endpoint table's rows, in this order.
    endpoints: Vec<Endpoint>,
    /// Set in the child the parent starts (`--generator process`): drive
    /// this server (`http://ADDR`) and print the latencies.
    drive: Option<String>,
}

/// Where the per-endpoint open loop's load generator (the HTTP client)
/// runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Generator {
    /// In a process of its own (this example started again, on a
    /// one-thread runtime), as a real client is: the server's runtime
    /// serves and does nothing else.
    Process,
    /// On the server's own runtime, tasks among the server's tasks.
    Runtime,
}

fn args() -> Args {
    let mut a = Args {
        model: "models/tiny.gguf".into(),
        requests: 400,
        max_tokens: 8,
        rate: 1000,
        seconds: 5.0,
        only_endpoints: false,
        generator: Generator::Process,
        endpoints: Endpoint::ALL.to_vec(),
        drive: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--only-endpoints" {
            a.only_endpoints = true;
            continue;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => a.model = value,
            "--requests" => a.requests = value.parse().expect("--requests N"),
            "--max-tokens" => a.max_tokens = value.parse().expect("--max-tokens N"),
            "--rate" => a.rate = value.parse().expect("--rate N"),
            "--seconds" => a.seconds = value.parse().expect("--seconds S"),
            "--generator" => {
                a.generator = match value.as_str() {
                    "process" => Generator::Process,
                    "runtime" => Generator::Runtime,
                    _ => panic!("--generator process|runtime"),
                }
            }
            "--endpoints" => {
                a.endpoints = value
                    .split(',')
                    .map(|n| Endpoint::from_name(n).unwrap_or_else(|| panic!("no endpoint {n}")))
                    .collect();
            }
            "--drive" => a.drive = Some(value),
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

/// The endpoints of the per-endpoint table.
#[derive(Debug, Clone, Copy)]
enum Endpoint {
    ChatWhole,
    ChatStream,
    Completions,
    Responses,
    Messages,
    MessagesStream,
    OllamaChat,
    OllamaChatStream,
    Embeddings,
    Health,
}

impl Endpoint {
    const ALL: [Endpoint; 10] = [
        Endpoint::ChatWhole,
        Endpoint::ChatStream,
        Endpoint::Completions,
        Endpoint::Responses,
        Endpoint::Messages,
        Endpoint::MessagesStream,
        Endpoint::OllamaChat,
        Endpoint::OllamaChatStream,
        Endpoint::Embeddings,
        Endpoint::Health,
    ];

    /// The name `--endpoints` and the child's `--endpoint` take.
    fn name(self) -> &'static str {
        match self {
            Endpoint::ChatWhole => "chat",
            Endpoint::ChatStream => "chat-stream",
            Endpoint::Completions => "completions",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
            Endpoint::MessagesStream => "messages-stream",
            Endpoint::OllamaChat => "ollama-chat",
            Endpoint::OllamaChatStream => "ollama-chat-stream",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Health => "health",
        }
    }

    fn from_name(name: &str) -> Option<Endpoint> {
        Endpoint::ALL.into_iter().find(|e| e.name() == name)
    }

    fn label(self) -> &'static str {
        match self {
            Endpoint::ChatWhole => "POST /v1/chat/completions",
            Endpoint::ChatStream => "  the same, streamed (SSE)",
            Endpoint::Completions => "POST /v1/completions",
            Endpoint::Responses => "POST /v1/responses",
            Endpoint::Messages => "POST /v1/messages (Anthropic)",
            Endpoint::MessagesStream => "  the same, streamed (its events)",
            Endpoint::OllamaChat => "POST /api/chat (Ollama)",
            Endpoint::OllamaChatStream => "  the same, streamed (NDJSON)",
            Endpoint::Embeddings => "POST /v1/embeddings",
            Endpoint::Health => "GET /health",
        }
    }
}

const PROMPT: &str = "Tell me about edge computing.";

/// What one endpoint is called with, directly and through the server.
struct Target {
    harness: Harness,
    lane: LocalLane,
    client: reqwest::Client,
    /// `http://ADDR`
    base: String,
    max_tokens: u32,
}

impl Target {
    /// The direct call the endpoint wraps (`GET /health` wraps nothing: its
    /// whole latency is the server's).
    async fn direct(&self, e: Endpoint) -> bool {
        match e {
            Endpoint::ChatWhole
            | Endpoint::Completions
            | Endpoint::Responses
            | Endpoint::Messages
            | Endpoint::OllamaChat => self
                .harness
                .run(request(self.max_tokens))
                .await
                .is_ok_and(|o| o.is_ok()),
            Endpoint::ChatStream | Endpoint::MessagesStream | Endpoint::OllamaChatStream => {
                let Ok(mut run) = self
                    .harness
                    .start(request(self.max_tokens), RunOptions::new().stream())
                else {
                    return false;
                };
                while run.next_token().await.is_some() {}
                run.outcome().await.is_ok_and(|o| o.is_ok())
            }
            Endpoint::Embeddings => self
                .lane
                .submit_embed(vec![EmbedInput::from(PROMPT)])
                .await
                .is_ok(),
            Endpoint::Health => true,
        }
    }

    /// The same through the server; `true` on a 200 with its whole body.
    async fn http(&self, e: Endpoint) -> bool {
        call_server(&self.client, &self.base, self.max_tokens, e).await
    }
}

/// One request to endpoint `e` of the server at `base` (`http://ADDR`);
/// `true` on a 200 with its whole body.
async fn call_server(client: &reqwest::Client, base: &str, m: u32, e: Endpoint) -> bool {
    let (path, body) = match e {
        Endpoint::Health => ("/health", None),
        Endpoint::ChatWhole | Endpoint::ChatStream => (
            "/v1/chat/completions",
            Some(serde_json::json!({
                "model": "edgecloud", "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": m, "seed": 7,
                "stream": matches!(e, Endpoint::ChatStream),
            })),
        ),
        Endpoint::Completions => (
            "/v1/completions",
            Some(serde_json::json!({
                "model": "edgecloud", "prompt": PROMPT, "max_tokens": m, "seed": 7,
            })),
        ),
        Endpoint::Responses => (
            "/v1/responses",
            Some(serde_json::json!({
                "model": "edgecloud", "input": PROMPT, "max_output_tokens": m,
            })),
        ),
        Endpoint::Messages | Endpoint::MessagesStream => (
            "/v1/messages",
            Some(serde_json::json!({
                "model": "edgecloud", "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": m, "stream": matches!(e, Endpoint::MessagesStream),
            })),
        ),
        Endpoint::OllamaChat | Endpoint::OllamaChatStream => (
            "/api/chat",
            Some(serde_json::json!({
                "model": "edgecloud", "messages": [{"role": "user", "content": PROMPT}],
                "options": {"num_predict": m, "seed": 7},
                "stream": matches!(e, Endpoint::OllamaChatStream),
            })),
        ),
        Endpoint::Embeddings => (
            "/v1/embeddings",
            Some(serde_json::json!({"model": "edgecloud", "input": PROMPT})),
        ),
    };
    let url = format!("{base}{path}");
    let req = match body {
        None => client.get(url),
        Some(b) => client
            .post(url)
            .header("content-type", "application/json")
            .body(b.to_string()),
    };
    match req.send().await {
        Ok(r) => r.status() == 200 && r.bytes().await.is_ok(),
        Err(_) => false,
    }
}

/// Calls `call` at `rate` per second for `seconds`, each call on its own
/// task started on its tick (open loop); the latencies, from the tick, and
/// how many failed.
async fn open_loop<F, Fut>(rate: u32, seconds: f64, call: F) -> (Vec<Duration>, usize)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool> + Send + 'static,
{
    let n = (f64::from(rate) * seconds).round() as usize;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..n {
        tick.tick().await;
        let start = Instant::now();
        let work = call();
        let tx = tx.clone();
        tokio::spawn(async move {
            let ok = work.await;
            let _ = tx.send((start.elapsed(), ok));
        });
    }
    drop(tx);
    let (mut lat, mut failed) = (Vec::with_capacity(n), 0);
    while let Some((d, ok)) = rx.recv().await {
        lat.push(d);
        failed += usize::from(!ok);
    }
    lat.sort();
    (lat, failed)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    pct(&v, 0.5)
}

/// This machine's CPU time so far (`/proc/stat`, all CPUs): the total
/// and the part stolen by the hypervisor (time a virtual CPU wanted to
/// run and the host ran something else), in clock ticks.
fn cpu_times() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .find_map(|l| l.strip_prefix("cpu "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // user nice system idle iowait irq softirq steal (guest time is
    // already in user and nice).
    let total = fields.iter().take(8).sum();
    (total, fields.get(7).copied().unwrap_or(0))
}

/// The share of CPU time stolen between two `cpu_times` readings, in
/// percent (NaN where /proc/stat says nothing).
fn steal_pct(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.0.saturating_sub(before.0);
    if total == 0 {
        return f64::NAN;
    }
    100.0 * after.1.saturating_sub(before.1) as f64 / total as f64
}

/// The open-loop rate of `/v1/embeddings` (see `per_endpoint`).
const EMBED_RATE: u32 = 100;

/// The per-endpoint table: added median one at a time, then open loop.
async fn per_endpoint(t: Arc<Target>, a: &Args) {
    let (requests, base_rate, seconds) = (a.requests, a.rate, a.seconds);
    let rate = base_rate;
    println!(
        "per endpoint: instant backend on {} instances (embeddings: the model's own lane); \
         one at a time {requests} per path, then open loop at {rate} requests/s for {seconds} s per path; \
         the open loop's HTTP client {}",
        t.harness.instances().len(),
        match a.generator {
            Generator::Process => "in a process of its own (one thread)",
            Generator::Runtime => "on the server's runtime",
        }
    );
    println!(
        "  {:<28} {:>9} {:>9} {:>9} | {:>9} {:>9} | {:>9} {:>9} {:>7} {:>7}",
        "endpoint",
        "direct",
        "server",
        "adds",
        "dir p50",
        "dir p99",
        "srv p50",
        "srv p99",
        "failed",
        "steal"
    );
    for &e in &a.endpoints {
        for _ in 0..50 {
            assert!(t.direct(e).await, "{e:?} direct warm-up");
            assert!(t.http(e).await, "{e:?} server warm-up");
        }
        const BLOCK: usize = 20;
        let (mut direct, mut server) = (Vec::new(), Vec::new());
        while direct.len() < requests {
            for _ in 0..BLOCK {
                let s = Instant::now();
                t.direct(e).await;
                direct.push(s.elapsed());
            }
            for _ in 0..BLOCK {
                let s = Instant::now();
                t.http(e).await;
                server.push(s.elapsed());
            }
        }
        let (d, s) = (median(direct), median(server));
        // The model's lane is no instant backend: it embeds one input in
        // about 0.6 ms alone but falls behind well below 1,000/s on two
        // shared cores, and then its queue (not the server) is the figure.
        let rate = match e {
            Endpoint::Embeddings => rate.min(EMBED_RATE),
            _ => rate,
        };
        let td = t.clone();
        let (od, fd) = open_loop(rate, seconds, move || {
            let t = td.clone();
            async move { t.direct(e).await }
        })
        .await;
        let steal_before = cpu_times();
        let (os, fs) = match a.generator {
            Generator::Process => drive_in_child(&t.base, e, rate, seconds, t.max_tokens).await,
            Generator::Runtime => {
                let ts = t.clone();
                open_loop(rate, seconds, move || {
                    let t = ts.clone();
                    async move { t.http(e).await }
                })
                .await
            }
        };
        println!(
            "  {:<28} {:>6.3} ms {:>6.3} ms {:>6.3} ms | {:>6.3} ms {:>6.3} ms | {:>6.3} ms {:>6.3} ms {:>7} {:>6.1}%{}",
            e.label(),
            ms(d),
            ms(s),
            ms(s) - ms(d),
            ms(pct(&od, 0.5)),
            ms(pct(&od, 0.99)),
            ms(pct(&os, 0.5)),
            ms(pct(&os, 0.99)),
            fd + fs,
            steal_pct(steal_before, cpu_times()),
            if rate == base_rate {
                String::new()
            } else {
                format!("  (open loop at {rate}/s)")
            },
        );
    }
}

fn main() {
    let a = args();
    if let Some(base) = a.drive.clone() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the generator's runtime");
        rt.block_on(drive(&base, &a));
        return;
    }
    // As `edgecloud serve` runs on two cores: two workers.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run(a));
}

/// The child's part (`--drive`): warm a connection, drive the server's
/// endpoint open loop, then print how many failed and each latency (ns),
/// a line each, once the loop is over.
async fn drive(base: &str, a: &Args) {
    let e = a.endpoints[0];
    let client = reqwest::Client::new();
    for _ in 0..50 {
        assert!(
            call_server(&client, base, a.max_tokens, e).await,
            "{e:?} warm-up"
        );
    }
    let (base, m) = (Arc::new(base.to_string()), a.max_tokens);
    let (lat, failed) = open_loop(a.rate, a.seconds, move || {
        let (client, base) = (client.clone(), base.clone());
        async move { call_server(&client, &base, m, e).await }
    })
    .await;
    let mut out = format!("failed {failed}\n");
    for d in lat {
        out.push_str(&format!("{}\n", d.as_nanos()));
    }
    print!("{out}");
}

/// The server's open loop from a child process (this example again, with
/// `--drive`): its latencies, sorted, and how many failed.
async fn drive_in_child(
    base: &str,
    e: Endpoint,
    rate: u32,
    seconds: f64,
    max_tokens: u32,
) -> (Vec<Duration>, usize) {
    let exe = std::env::current_exe().expect("this example's path");
    let args: Vec<String> = [
        "--drive",
        base,
        "--endpoints",
        e.name(),
        "--rate",
        &rate.to_string(),
        "--seconds",
        &seconds.to_string(),
        "--max-tokens",
        &max_tokens.to_string(),
    ]
    .map(String::from)
    .to_vec();
    // The wait is a blocking read of the child's output: off the workers.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(exe)
            .args(args)
            .stderr(std::process::Stdio::inherit())
            .output()
    })
    .await
    .expect("join")
    .expect("start the generator");
    assert!(out.status.success(), "the generator failed: {}", out.status);
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut lines = text.lines();
    let failed = lines
        .next()
        .and_then(|l| l.strip_prefix("failed "))
        .and_then(|n| n.parse().ok())
        .expect("the generator's first line");
    let mut lat: Vec<Duration> = lines
        .map(|l| Duration::from_nanos(l.parse().expect("a latency")))
        .collect();
    lat.sort();
    (lat, failed)
}

async fn run(a: Args) {
    let rss_start = rss_mib();

    let local = LocalBackend::start(LocalConfig::new(&a.model)).expect("load the model");
    let lane = local.lane().clone();
    let harness = Harness::builder()
        .local(local)
        .policy(Policy::LocalOnly)
        .deadline(Duration::from_secs(60))
        .runtime(tokio::runtime::Handle::current())
        .build()
        .expect("harness");
    println!(
        "machine: {} logical CPUs; model {}; max_tokens {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        a.model,
        a.max_tokens
    );
    let loopback = ServeConfig::default().listen("127.0.0.1:0".parse().unwrap());
    if !a.only_endpoints {
        whole_program(&a, &harness, &loopback, rss_start).await;
    }

    // Enough instances that an open loop at the rate never finds them all
    // busy (an instant run holds one for well under a millisecond).
    let pool = Harness::builder()
        .local(Instantly)
        .instances(64)
        .policy(Policy::LocalOnly)
        .deadline(Duration::from_secs(60))
        .runtime(tokio::runtime::Handle::current())
        .build()
        .expect("harness");
    let server = Server::bind(
        pool.clone(),
        loopback.embeddings(edgecloud::serve::LocalEmbedder::new(lane.clone())),
    )
    .await
    .expect("bind")
    .spawn();
    let target = Arc::new(Target {
        harness: pool,
        lane,
        client: reqwest::Client::new(),
        base: format!("http://{}", server.local_addr()),
        max_tokens: a.max_tokens,
    });
    per_endpoint(target, &a).await;
    server.shutdown().await;
}

/// The figures this example always printed: the model's lane and the
/// instant backend through chat, `/health` per second, and memory.
async fn whole_program(a: &Args, harness: &Harness, loopback: &ServeConfig, rss_start: f64) {
    // Warm the lane first (llama.cpp allocates its compute buffers on the
    // first decode), so the server's figures start from a warm harness.
    for _ in 0..50 {
        harness
            .run(request(a.max_tokens))
            .await
            .expect("warm-up run");
    }
    let rss_model = rss_mib();
    let server = Server::bind(harness.clone(), loopback.clone())
        .await
        .expect("bind")
        .spawn();
    let rss_bound = rss_mib();
    let url = server.base_url();
    let base = format!("http://{}", server.local_addr());

    let p = measure(harness, &url, a.requests, a.max_tokens).await;
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
    let instant_server = Server::bind(instant.clone(), loopback.clone())
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
