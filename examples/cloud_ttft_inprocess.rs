//! The cloud lane's time to first token inside one long-lived process,
//! where the harness runs (`scripts/cloud_ttft.py` runs it against its
//! loopback server; it compares one fresh process per request).
//!
//! `cargo run --release --example cloud_ttft_inprocess -- BASE_URL [RUNS]`
//!
//! Prints medians (ms) of connect, response headers (ttfb) and first token
//! for: the process's first request; later requests each on a new lane
//! (a new connection, warm process); later requests on one lane (a pooled,
//! kept-alive connection). The first against the others is what a cold
//! process costs; the pooled one is what a serving process pays per
//! request. Two references on a kept-alive connection in the same process
//! show where that time goes: plain reqwest (the HTTP stack alone) and the
//! exchange written by hand on a `TcpStream` (the server and the kernel).
//! The last line is machine-readable (`RESULT key=value ...`).

use edgecloud::cloud::{CloudConfig, CloudLane};
use edgecloud::{ChatMessage, LaneJob, Sampling};
use std::time::{Duration, Instant};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn ms(d: Option<Duration>) -> f64 {
    d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
}

/// `http://HOST:PORT/PREFIX` -> (`HOST:PORT`, `/PREFIX/chat/completions`).
fn split_base(base: &str) -> (String, String) {
    let rest = base
        .strip_prefix("http://")
        .expect("a plain http:// base URL");
    let (host, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.trim_end_matches('/');
    let path = if prefix.is_empty() {
        "/chat/completions".to_owned()
    } else {
        format!("/{prefix}/chat/completions")
    };
    (host.to_owned(), path)
}

/// The server's first answer text, as it appears in the raw stream.
const FIRST_TEXT: &[u8] = b"\"content\":\"Once\"";

const BODY: &str = r#"{"model":"bench","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;

/// The floor: the same exchange written by hand on one kept-alive
/// `std::net::TcpStream` (the request in one write; bytes read until the
/// first answer text, then to the end of the chunked body). What is left
/// is the server, the kernel and the loopback.
async fn raw_pooled(host: &str, path: &str, runs: usize, gap: Duration) -> Vec<f64> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(host).expect("loopback server");
    stream.set_nodelay(true).expect("nodelay");
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         accept: text/event-stream\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..=runs {
        let started = Instant::now();
        stream.write_all(request.as_bytes()).expect("write");
        let (mut seen, mut first) = (Vec::new(), None);
        loop {
            let n = stream.read(&mut buf).expect("read");
            assert!(n > 0, "the server closed the connection");
            seen.extend_from_slice(&buf[..n]);
            if first.is_none() && contains(&seen, FIRST_TEXT) {
                first = Some(started.elapsed());
            }
            if seen.ends_with(b"0\r\n\r\n") {
                break;
            }
        }
        out.push(ms(first));
        tokio::time::sleep(gap).await;
    }
    out.remove(0);
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// reqwest with its defaults on one kept-alive connection: headers, then
/// body chunks until the first answer text, then the rest of the body.
async fn reqwest_pooled(url: &str, runs: usize, gap: Duration) -> Vec<f64> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("client");
    let mut out = Vec::new();
    for _ in 0..=runs {
        let started = Instant::now();
        let mut response = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(BODY)
            .send()
            .await
            .expect("loopback answer");
        let (mut seen, mut first) = (Vec::new(), None);
        while let Some(bytes) = response.chunk().await.expect("body") {
            seen.extend_from_slice(&bytes);
            if first.is_none() && contains(&seen, FIRST_TEXT) {
                first = Some(started.elapsed());
            }
        }
        out.push(ms(first));
        tokio::time::sleep(gap).await;
    }
    out.remove(0);
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(base) = args.first() else {
        eprintln!("usage: cloud_ttft_inprocess BASE_URL [RUNS]");
        std::process::exit(2);
    };
    let runs: usize = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(50);
    // Requests a millisecond apart, as a serving process sees them: the
    // runtime runs between them (a kept-alive connection goes back to the
    // pool on a task of its own once the body has ended).
    let gap = Duration::from_millis(1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let lane = || {
        let mut cfg = CloudConfig::new(base.clone(), "bench");
        cfg.api_key_env = "EDGECLOUD_BENCH_NO_KEY".into();
        CloudLane::new(cfg).expect("valid config")
    };
    let once = |lane: CloudLane| async move {
        let job = LaneJob::new(
            vec![ChatMessage::user("hi")],
            Sampling::default(),
            Instant::now() + Duration::from_secs(10),
        );
        let done = lane.run(job).await.expect("loopback answer");
        // The pause also lets the runtime finish with the exchange (the
        // connection back to the pool, or a dropped lane's connection
        // closed) before the next request is timed.
        tokio::time::sleep(gap).await;
        let t = done.timings;
        (lane, (ms(t.connect), ms(t.ttfb), ms(t.ttft)))
    };
    // One series at a time, all inside the runtime: work left over from
    // one request (a pooled connection's return, a dropped lane's close)
    // runs in the pause, not in the next request's time.
    let (first, pooled, fresh) = rt.block_on(async {
        let (_, first) = once(lane()).await;
        let (mut kept, _) = once(lane()).await;
        let mut pooled = Vec::new();
        for _ in 0..runs {
            let (lane, t) = once(kept).await;
            kept = lane;
            pooled.push(t);
        }
        drop(kept);
        let mut fresh = Vec::new();
        for _ in 0..runs {
            let (lane, t) = once(lane()).await;
            drop(lane);
            tokio::time::sleep(gap).await;
            fresh.push(t);
        }
        (first, pooled, fresh)
    });
    let (host, path) = split_base(base);
    let raw = median(rt.block_on(raw_pooled(&host, &path, runs, gap)));
    let url = format!("http://{host}{path}");
    let plain = median(rt.block_on(reqwest_pooled(&url, runs, gap)));
    let col = |v: &[(f64, f64, f64)], i: usize| {
        median(
            v.iter()
                .map(|t| [t.0, t.1, t.2][i])
                .filter(|x| !x.is_nan())
                .collect(),
        )
    };
    println!("in one process, median ms        connect   headers  first token");
    println!(
        "first request (cold process)    {:>8.3}  {:>8.3}  {:>8.3}",
        first.0, first.1, first.2
    );
    println!(
        "new connection, warm process    {:>8.3}  {:>8.3}  {:>8.3}",
        col(&fresh, 0),
        col(&fresh, 1),
        col(&fresh, 2)
    );
    // A pooled request that opened a connection anyway (the pool had none
    // idle) would show here.
    let reconnects = pooled.iter().filter(|t| !t.0.is_nan()).count();
    println!(
        "pooled connection               {:>8}  {:>8.3}  {:>8.3}   ({reconnects} of {runs} opened a connection)",
        "-",
        col(&pooled, 1),
        col(&pooled, 2)
    );
    println!(
        "pooled, plain reqwest           {:>8}  {:>8}  {:>8.3}",
        "-", "-", plain
    );
    println!(
        "pooled, by hand on a TcpStream  {:>8}  {:>8}  {:>8.3}",
        "-", "-", raw
    );
    println!(
        "RESULT first_ttft_ms={:.4} fresh_ttft_ms={:.4} fresh_connect_ms={:.4} pooled_ttft_ms={:.4} pooled_ttfb_ms={:.4} reqwest_pooled_ttft_ms={plain:.4} raw_pooled_ttft_ms={raw:.4}",
        first.2,
        col(&fresh, 2),
        col(&fresh, 0),
        col(&pooled, 2),
        col(&pooled, 1)
    );
}
