//! What `edgecloud serve` adds in front of a cloud that answers at once, at
//! a fixed request rate (an open loop: one request every 1/RATE s whatever
//! the answers do), as TensorZero and LiteLLM publish it: a cloud-only route
//! on a pool of `--parallel` instances, against an instant loopback
//! upstream (a stand-in for a provider: a fixed chat completion), in one
//! process on one runtime. The same load goes straight to the upstream
//! (the baseline) and through serve, in alternating rounds; it prints the
//! latency p50/p90/p99 of each, the difference (what serve adds), and how
//! many requests got no 200.
//!
//! Usage: cloud_overhead [--rate N] [--seconds S] [--parallel N] [--rounds N]
//!   defaults: 1000 requests/s, 5 s a round, 64 instances, 2 rounds.

use bytes::Bytes;
use edgecloud::harness::{Harness, Policy};
use edgecloud::serve::{ServeConfig, Server};
use edgecloud::{CloudBackend, CloudConfig};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

const ANSWER: &str = r#"{"id":"c","object":"chat.completion","created":0,"model":"instant","choices":[{"index":0,"message":{"role":"assistant","content":"The answer is 42."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}"#;

/// The instant upstream: reads the request, answers the fixed completion.
async fn upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    let _ = req.into_body().collect().await;
                    let mut r =
                        hyper::Response::new(Full::new(Bytes::from_static(ANSWER.as_bytes())));
                    r.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(r)
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{addr}/v1")
}

struct Round {
    latencies_ms: Vec<f64>,
    not_ok: usize,
}

/// `rate` requests a second for `seconds`, each on its own task, through a
/// pooled client; latency from send to the whole body.
async fn open_loop(url: &str, rate: u32, seconds: f64) -> Round {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .build()
        .expect("a client");
    let body = serde_json::json!({
        "model": "edgecloud",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
    })
    .to_string();
    let results = Arc::new(Mutex::new(Round {
        latencies_ms: Vec::new(),
        not_ok: 0,
    }));
    let period = Duration::from_secs_f64(1.0 / f64::from(rate));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let n = (f64::from(rate) * seconds) as usize;
    let mut tasks = Vec::with_capacity(n);
    let endpoint = format!("{url}/chat/completions");
    for _ in 0..n {
        tick.tick().await;
        let (http, body, endpoint, results) = (
            http.clone(),
            body.clone(),
            endpoint.clone(),
            results.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let sent = Instant::now();
            let ok = match http
                .post(&endpoint)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
            {
                Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                Err(_) => false,
            };
            let ms = sent.elapsed().as_secs_f64() * 1e3;
            let mut r = results.lock().unwrap();
            if ok {
                r.latencies_ms.push(ms);
            } else {
                r.not_ok += 1;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut r = Arc::try_unwrap(results)
        .ok()
        .expect("every task is done")
        .into_inner()
        .unwrap();
    r.latencies_ms.sort_by(f64::total_cmp);
    r
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut rate = 1000u32;
    let mut seconds = 5.0f64;
    let mut parallel = 64usize;
    let mut rounds = 2usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().expect("a value after the flag");
        match a.as_str() {
            "--rate" => rate = value().parse().expect("--rate N"),
            "--seconds" => seconds = value().parse().expect("--seconds S"),
            "--parallel" => parallel = value().parse().expect("--parallel N"),
            "--rounds" => rounds = value().parse().expect("--rounds N"),
            other => panic!("unknown argument {other}"),
        }
    }
    let upstream_url = upstream().await;
    let harness = Harness::builder()
        .cloud(CloudBackend::start(CloudConfig::new(&upstream_url, "instant")).expect("cloud lane"))
        .policy(Policy::CloudOnly)
        .deadline(Duration::from_secs(10))
        .instances(parallel)
        .runtime(tokio::runtime::Handle::current())
        .build()
        .expect("a harness");
    let server = Server::bind(
        harness,
        ServeConfig::default().listen("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .expect("bind")
    .spawn();
    let serve_url = server.base_url();
    // Warm both paths' connection pools.
    open_loop(&upstream_url, 200, 0.5).await;
    open_loop(&serve_url, 200, 0.5).await;
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    let (mut direct_bad, mut through_bad) = (0, 0);
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_direct in order {
            let url = if is_direct { &upstream_url } else { &serve_url };
            let r = open_loop(url, rate, seconds).await;
            if is_direct {
                direct.extend(r.latencies_ms);
                direct_bad += r.not_ok;
            } else {
                through.extend(r.latencies_ms);
                through_bad += r.not_ok;
            }
        }
    }
    direct.sort_by(f64::total_cmp);
    through.sort_by(f64::total_cmp);
    println!(
        "cloud-only, {parallel} instances, {rate} requests/s open loop, {rounds} x {seconds} s per path"
    );
    for (name, v, bad) in [
        ("upstream direct", &direct, direct_bad),
        ("through serve", &through, through_bad),
    ] {
        println!(
            "{name:<16} n={:>6} not-200={bad:<4} p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms",
            v.len(),
            pct(v, 0.5),
            pct(v, 0.9),
            pct(v, 0.99)
        );
    }
    println!(
        "serve adds: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms",
        pct(&through, 0.5) - pct(&direct, 0.5),
        pct(&through, 0.9) - pct(&direct, 0.9),
        pct(&through, 0.99) - pct(&direct, 0.99)
    );
    server.shutdown().await;
}
