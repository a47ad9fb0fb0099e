//! The Rust side of `scripts/embed-overhead`: the harness's cost per run,
//! measured three ways in one process, one run of each in turn, so the
//! bindings' figures have a same-run peer under the same upstream and the
//! same moment's noise: the Rust API (`Harness::run_blocking` on a built
//! `Request`); the binding-neutral layer the C ABI and the Python package
//! wrap (`bindings::Embedded::run` on the request's JSON, then the outcome's
//! JSON); and `ec_run` itself, called through its C ABI (`extern "C"`, a C
//! string in, a C string out freed with `ec_string_free`: the machine code
//! a C program runs, whose own side of the call adds only the call).
//!
//! `embed_overhead instant RUNS`: both lanes are the stand-in
//! `InstantBackend` (answers at once: the harness's own cost, the goal
//! figures). `embed_overhead CONFIG.toml RUNS`: the configured lanes (the
//! script's loopback cloud: a real round trip, for reference). Prints one
//! line per way: `rust <p50 us> <p90 us>`, `embed ...`, `capi ...`.

// Calling the C ABI is what this example measures.
#![allow(unsafe_code)]

use edgecloud::bindings::{self, Callbacks, Embedded};
use edgecloud::harness::{Harness, InstantBackend, Policy};
use edgecloud::Request;
use edgecloud_capi::{ec_harness_free, ec_run, ec_string_free, harness_from_embedded, EC_OK};
use std::ffi::{c_char, CStr, CString};
use std::time::Instant;

const REQUEST: &str =
    r#"{"messages":[{"role":"user","content":"What is the answer?"}],"max_tokens":8}"#;

fn percentiles(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9))
}

/// The harness both ways use, twice (one for Rust and the JSON layer, one
/// handed to the C ABI), built alike.
fn embedded(source: &str) -> Embedded {
    if source == "instant" {
        let harness = Harness::builder()
            .local(InstantBackend::default())
            .cloud(InstantBackend::default())
            .policy(Policy::LocalOnly)
            .build()
            .expect("a harness of stand-ins builds");
        return Embedded::from_harness(harness);
    }
    let text = std::fs::read_to_string(source).expect("the config file reads");
    let cfg = bindings::config_from_toml(&text).expect("the config parses");
    Embedded::start(&cfg, Callbacks::default()).expect("the harness starts")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(source), Some(runs)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: embed_overhead instant|CONFIG.toml RUNS");
        std::process::exit(2);
    };
    let runs: usize = runs.parse().expect("RUNS is a number");
    let embedded = embedded(source);
    let harness = embedded.harness().clone();
    let c_harness = harness_from_embedded(self::embedded(source));
    let mut request = Request::user("What is the answer?");
    request.sampling.max_tokens = 8;
    let c_request = CString::new(REQUEST).expect("the request has no NUL byte");
    let c_run = || {
        let mut outcome: *mut c_char = std::ptr::null_mut();
        // SAFETY: a live harness, a NUL-terminated request, writable
        // outputs; the outcome is freed with its own free.
        unsafe {
            let status = ec_run(
                c_harness,
                c_request.as_ptr(),
                &mut outcome,
                std::ptr::null_mut(),
            );
            assert_eq!(status, EC_OK, "ec_run failed");
            assert!(!CStr::from_ptr(outcome).to_bytes().is_empty());
            ec_string_free(outcome);
        }
    };
    // Warm the runtime (and a connection pool) first.
    for _ in 0..50 {
        harness.run_blocking(request.clone()).expect("runs");
        c_run();
    }
    let (mut rust, mut json, mut capi) = (
        Vec::with_capacity(runs),
        Vec::with_capacity(runs),
        Vec::with_capacity(runs),
    );
    for _ in 0..runs {
        let t = Instant::now();
        let o = harness.run_blocking(request.clone()).expect("runs");
        rust.push(t.elapsed().as_secs_f64() * 1e6);
        assert!(o.text.is_some(), "{:?}", o.error);
        let t = Instant::now();
        let o = embedded.run(REQUEST).expect("runs");
        let _ = bindings::outcome_json(&o);
        json.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        c_run();
        capi.push(t.elapsed().as_secs_f64() * 1e6);
    }
    // SAFETY: from harness_from_embedded, not used after.
    unsafe { ec_harness_free(c_harness) };
    for (name, v) in [("rust", rust), ("embed", json), ("capi", capi)] {
        let (p50, p90) = percentiles(v);
        println!("{name} {p50:.1} {p90:.1}");
    }
}
