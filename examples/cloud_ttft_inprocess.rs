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
//! process costs; the last is what a serving process pays per request.
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

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(base) = args.first() else {
        eprintln!("usage: cloud_ttft_inprocess BASE_URL [RUNS]");
        std::process::exit(2);
    };
    let runs: usize = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(50);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let lane = || {
        let mut cfg = CloudConfig::new(base.clone(), "bench");
        cfg.api_key_env = "EDGECLOUD_BENCH_NO_KEY".into();
        CloudLane::new(cfg).expect("valid config")
    };
    let once = |lane: &CloudLane| {
        let job = LaneJob::new(
            vec![ChatMessage::user("hi")],
            Sampling::default(),
            Instant::now() + Duration::from_secs(10),
        );
        let done = rt.block_on(lane.run(job)).expect("loopback answer");
        let t = done.timings;
        (ms(t.connect), ms(t.ttfb), ms(t.ttft))
    };
    let first = once(&lane());
    let (mut fresh, mut pooled) = (Vec::new(), Vec::new());
    let kept = lane();
    once(&kept);
    for _ in 0..runs {
        fresh.push(once(&lane()));
        pooled.push(once(&kept));
    }
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
    println!(
        "pooled connection               {:>8}  {:>8.3}  {:>8.3}",
        "-",
        col(&pooled, 1),
        col(&pooled, 2)
    );
    println!(
        "RESULT first_ttft_ms={:.4} fresh_ttft_ms={:.4} fresh_connect_ms={:.4} pooled_ttft_ms={:.4} pooled_ttfb_ms={:.4}",
        first.2,
        col(&fresh, 2),
        col(&fresh, 0),
        col(&pooled, 2),
        col(&pooled, 1)
    );
}
