//! The Rust side of `scripts/embed-overhead`: the harness's cost per run
//! against a cloud lane on loopback, measured three ways in one process,
//! one run of each in turn, so the bindings' figures have a same-run peer
//! under the same upstream and the same moment's noise: the Rust API
//! (`Harness::run_blocking` on a built `Request`); the binding-neutral
//! layer the C ABI and the Python package wrap (`embed::Embedded::run` on
//! the request's JSON, then the outcome's JSON); and `ec_run` itself,
//! called through its C ABI (`extern "C"`, a C string in, a C string out,
//! freed with `ec_string_free`: the same machine code a C program runs,
//! whose own side of the call adds nothing but the call) on a harness
//! made by `ec_harness_new` from the same configuration.
//!
//! `embed_overhead CONFIG.toml RUNS` prints one line per way:
//! `rust <p50 us> <p90 us>`, `embed <p50 us> <p90 us>` and
//! `capi <p50 us> <p90 us>`.

// Calling the C ABI is what this example measures.
#![allow(unsafe_code)]

use edgecloud::capi::{ec_harness_free, ec_harness_new, ec_run, ec_string_free, EC_OK};
use edgecloud::embed::{self, Callbacks, Embedded};
use edgecloud::Request;
use std::ffi::{c_char, CStr, CString};
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
    let c_config = CString::new(text).expect("the config has no NUL byte");
    let c_request = CString::new(REQUEST).expect("the request has no NUL byte");
    let mut error: *mut c_char = std::ptr::null_mut();
    // SAFETY: a NUL-terminated string and a writable error pointer.
    let c_harness = unsafe { ec_harness_new(c_config.as_ptr(), &mut error) };
    assert!(!c_harness.is_null(), "ec_harness_new failed");
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
    for _ in 0..50 {
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
        let _ = embed::outcome_json(&o);
        json.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        c_run();
        capi.push(t.elapsed().as_secs_f64() * 1e6);
    }
    // SAFETY: made by ec_harness_new, not used after.
    unsafe { ec_harness_free(c_harness) };
    for (name, v) in [("rust", rust), ("embed", json), ("capi", capi)] {
        let (p50, p90) = percentiles(v);
        println!("{name} {p50:.1} {p90:.1}");
    }
}
