//! The Rust side of `scripts/embed-overhead`: the harness's cost per run
//! against a cloud lane on loopback, measured three ways in one process so
//! the bindings' figures have a same-run peer: the Rust API
//! (`Harness::run_blocking` on a built `Request`), and the binding-neutral
//! layer the C ABI and the Python package wrap (`embed::Embedded::run` on
//! the request's JSON, then the outcome's JSON), which adds the JSON.
//!
//! `embed_overhead CONFIG.toml RUNS` prints one line per way:
//! `rust <p50 us> <p90 us>` and `embed <p50 us> <p90 us>`.

use edgecloud::embed::{self, Callbacks, Embedded};
use edgecloud::Request;
use std::time::Instant;

const REQUEST: &str =
    r#"{"messages":[{"role":"user","content":"What is the answer?"}],"max_tokens":8}"#;

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(config), Some(runs)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: embed_overhead CONFIG.toml RUNS");
        std::process::exit(2);
    };
    let runs: usize = runs.parse().expect("RUNS is a number");
    let text = std::fs::read_to_string(config).expect("the config file reads");
    let cfg = embed::config_from_toml(&text).expect("the config parses");
    let embedded = Embedded::start(&cfg, Callbacks::default()).expect("the harness starts");
    let harness = embedded.harness().clone();
    let mut request = Request::user("What is the answer?");
    request.sampling.max_tokens = 8;
    // Warm the connection pool and the runtime first.
    for _ in 0..50 {
        harness.run_blocking(request.clone()).expect("runs");
    }
    let (mut rust, mut json) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let t = Instant::now();
        let o = harness.run_blocking(request.clone()).expect("runs");
        rust.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(o.text.is_some(), "{:?}", o.error);
        let t = Instant::now();
        let o = embedded.run(REQUEST).expect("runs");
        let _ = embed::outcome_json(&o);
        json.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (p50, p90) = percentiles(rust);
    println!("rust {p50:.1} {p90:.1}");
    let (p50, p90) = percentiles(json);
    println!("embed {p50:.1} {p90:.1}");
}
