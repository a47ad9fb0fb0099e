//! Criterion: what one cloud-lane request costs on the client side, against
//! a loopback server (the integration tests' own) that answers at once on a
//! kept-alive connection: SSE decoding, JSON parsing, deadline bookkeeping,
//! the HTTP stack. The network is loopback, so this is overhead, not latency.
//!
//! Run: `cargo bench --bench cloud_lane`

// criterion_group! expands to an undocumented public function.
#![allow(missing_docs)]

#[allow(dead_code, unreachable_pub)]
#[path = "../tests/it/support/http.rs"]
mod http;

use criterion::{criterion_group, criterion_main, Criterion};
use edgecloud::cloud::{CloudConfig, CloudLane};
use edgecloud::{ChatMessage, LaneJob, Sampling};
use http::{chunked, Flavor, TestServer, SSE_HEAD};
use std::time::{Duration, Instant};

fn pieces(n: usize) -> &'static [&'static str] {
    let words = [" lorem", " ipsum", " dolor", " sit", " amet"];
    let v: Vec<&'static str> = (0..n).map(|i| words[i % words.len()]).collect();
    Box::leak(v.into_boxed_slice())
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // Each answer leaves the server in one write, so the figure is the
    // client's work (plus two syscalls), not the server's.
    let words = pieces(64);
    let mut streamed = SSE_HEAD.as_bytes().to_vec();
    for ev in Flavor::OpenAi.stream_events(words, "stop", Some((9, 64))) {
        streamed.extend(chunked(format!("data: {ev}\n\n").as_bytes()));
    }
    streamed.extend(chunked(b"data: [DONE]\n\n"));
    streamed.extend(b"0\r\n\r\n");
    let body = Flavor::OpenAi.whole_body(&words.concat(), "stop", Some((9, 64)));
    let whole = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    let server = rt.block_on(TestServer::start(move |mut conn| {
        let (streamed, whole) = (streamed.clone(), whole.clone());
        async move {
            while let Some(req) = conn.read_request().await {
                let answer = if req.wants_stream() {
                    &streamed
                } else {
                    &whole
                };
                if conn.write(answer).await.is_err() {
                    return;
                }
            }
        }
    }));
    let mut group = c.benchmark_group("cloud_lane");
    for stream in [true, false] {
        let mut cfg = CloudConfig::new(server.base_url(), "bench");
        cfg.api_key_env = "EDGECLOUD_BENCH_NO_KEY".into();
        cfg.stream = stream;
        let lane = CloudLane::new(cfg).expect("valid config");
        let name = if stream {
            "stream_64_pieces"
        } else {
            "whole_64_pieces"
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                let job = LaneJob::new(
                    vec![ChatMessage::user("hi")],
                    Sampling::default(),
                    Instant::now() + Duration::from_secs(10),
                );
                let done = rt.block_on(lane.run(job)).expect("loopback answer");
                assert_eq!(done.usage.map(|u| u.completion_tokens), Some(64));
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
