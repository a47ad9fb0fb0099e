//! The harness's own cost and its deadline overshoot.
//!
//! `cargo bench --bench harness` runs criterion: the cost of one run
//! (admission, deadline, scoring, arbitration, outcome) with backends that
//! answer at once, per policy, through the blocking and the async API, and
//! the cost of a run refused because its lane is busy; `race/blocking+ledger`
//! is `race/blocking` with the ledger on (a priced cloud model, a cloud
//! budget and the durable store): the difference is what the ledger costs
//! a run.
//!
//! `cargo bench --bench harness -- --figures [--local [--only-local]]` prints
//! distributions instead (`scripts/overshoot` wraps it): per-run overhead
//! (median, p99) and the overshoot past the deadline (median, p99, max) over
//! at least 1000 runs where both lanes overrun, alone and with four
//! harnesses at once; with `--local`, also with the real local lane
//! (bench-135m, generated into `target/bench-models/` unless
//! `EDGECLOUD_BENCH_MODEL` names a file; threads: `EDGECLOUD_BENCH_THREADS`
//! (their policy: `EDGECLOUD_THREAD_POLICY`, adaptive unless set),
//! default 2; `EDGECLOUD_BENCH_NICE` and `EDGECLOUD_BENCH_BATCH` override
//! the harness's nice and batch defaults) decoding a long prompt when the
//! deadline hits, and aborting runs inside a ~2000-token prompt's decode
//! (`--only-local`: just these).

// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use criterion::{criterion_group, Criterion};
use edgecloud::harness::{
    Backend, BackendFuture, BackendInfo, Candidate, CloudBudget, Event, Harness, InstantBackend,
    LaneStatus, LedgerStore, LocalBackend, Policy, Price, PriceTable, Route, RunOptions,
};
use edgecloud::{FinishReason, Lane, LaneJob, Request};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Never answers; returns as soon as it is cancelled (like a real lane
/// that overruns).
struct Overruns;
impl Backend for Overruns {
    fn info(&self) -> BackendInfo {
        BackendInfo::named("overruns")
    }
    fn run(&self, job: LaneJob) -> BackendFuture {
        Box::pin(async move {
            job.cancel.cancelled().await;
            Ok(Candidate::new("", FinishReason::Cancelled))
        })
    }
}

fn instant_harness(policy: Policy) -> Harness {
    Harness::builder()
        .local(InstantBackend::default())
        .cloud(InstantBackend::default())
        .policy(policy)
        .build()
        .expect("harness builds")
}

fn req() -> Request {
    Request::user("What is the answer?")
}

fn bench_runs(c: &mut Criterion) {
    let mut g = c.benchmark_group("harness_run_instant_backends");
    for (name, policy) in [
        ("local-only", Policy::LocalOnly),
        ("race", Policy::Race),
        ("cascade", Policy::cascade(0.0)),
        ("best-of", Policy::BestOf),
    ] {
        let h = instant_harness(policy);
        g.bench_function(format!("{name}/blocking"), |b| {
            b.iter(|| h.run_blocking(req()).expect("runs"))
        });
    }
    // The ledger's share of a run: the same race with its cloud model
    // priced, a cloud budget and the durable store (docs/cost.md).
    let dir = std::env::temp_dir().join(format!("edgecloud-bench-ledger-{}", std::process::id()));
    let store = LedgerStore::open(&dir, Duration::from_secs(3600)).expect("the store opens");
    let budget: CloudBudget = "1000000usd/month".parse().expect("a budget");
    let priced = Harness::builder()
        .local(InstantBackend::default())
        .cloud(InstantBackend::default())
        .route(
            "default",
            Route::new(Policy::Race)
                .cloud_model("m")
                .cloud_budget(budget),
        )
        .prices(PriceTable::new().with(
            "m",
            Price {
                input: 2.0,
                output: 8.0,
                cached_input: None,
            },
        ))
        .ledger(store)
        .build()
        .expect("harness builds");
    g.bench_function("race/blocking+ledger", |b| {
        b.iter(|| priced.run_blocking(req()).expect("runs"))
    });
    drop(priced);
    let _ = std::fs::remove_dir_all(&dir);
    let h = instant_harness(Policy::Race);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    g.bench_function("race/async", |b| {
        b.iter(|| rt.block_on(h.run(req())).expect("runs"))
    });
    // The busy path: the lane is held, the run is refused at admission.
    let held = Harness::builder()
        .local(Overruns)
        .policy(Policy::LocalOnly)
        .deadline(Duration::from_secs(3600))
        .build()
        .expect("harness builds");
    let holder = held.start(req(), RunOptions::new()).expect("starts");
    while !held.is_busy(Lane::Local) {
        std::thread::yield_now();
    }
    g.bench_function("local-only/busy", |b| {
        b.iter(|| held.run_blocking(req()).expect("runs"))
    });
    holder.abort();
    g.finish();
}

criterion_group!(benches, bench_runs);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--figures") {
        if args.iter().any(|a| a == "--only-local") {
            local_figures();
        } else {
            figures(args.iter().any(|a| a == "--local"));
        }
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

/// Median, p99 and max of a sample, in milliseconds.
fn summary(v: &mut [f64]) -> String {
    if v.is_empty() {
        return "n=    0".into();
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let p = |q: f64| v[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
    format!(
        "n={n:>5}  median {:>8.3}  p99 {:>8.3}  max {:>8.3}",
        p(0.5),
        p(0.99),
        v[n - 1]
    )
}

fn figures(with_local: bool) {
    println!("# edgecloud harness figures (ms)");
    println!("# overhead: start() to outcome in hand, backends answering at once");
    for (name, policy) in [
        ("local-only", Policy::LocalOnly),
        ("race", Policy::Race),
        ("best-of", Policy::BestOf),
    ] {
        let h = instant_harness(policy);
        for _ in 0..500 {
            h.run_blocking(req()).expect("runs");
        }
        let mut v: Vec<f64> = (0..20_000)
            .map(|_| {
                let t = Instant::now();
                h.run_blocking(req()).expect("runs");
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        println!("overhead {name:<11} {}", summary(&mut v));
    }

    println!("# overshoot: both lanes overrun a 10 ms deadline (race)");
    let (mut settle, mut caller) = overrunning_runs(1000, Duration::from_millis(10));
    println!("overshoot settle  1 harness  {}", summary(&mut settle));
    println!("overshoot caller  1 harness  {}", summary(&mut caller));
    let workers: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| overrunning_runs(500, Duration::from_millis(10))))
        .collect();
    let (mut settle, mut caller) = (Vec::new(), Vec::new());
    for w in workers {
        let (s, c) = w.join().expect("worker");
        settle.extend(s);
        caller.extend(c);
    }
    println!("overshoot settle  4 harnesses {}", summary(&mut settle));
    println!("overshoot caller  4 harnesses {}", summary(&mut caller));

    if with_local {
        local_figures();
    }
}

/// Runs `n` races whose lanes both overrun; returns the overshoot past the
/// deadline at settlement (from the outcome) and as the caller saw it.
fn overrunning_runs(n: usize, deadline: Duration) -> (Vec<f64>, Vec<f64>) {
    let h = Harness::builder()
        .local(Overruns)
        .cloud(Overruns)
        .policy(Policy::Race)
        .deadline(deadline)
        .build()
        .expect("harness builds");
    let (mut settle, mut caller) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let run = h.start(req(), RunOptions::new()).expect("starts");
        let dl = run.deadline();
        let o = run.wait().expect("settles");
        let seen = Instant::now();
        assert_eq!(o.status, edgecloud::RunStatus::DeadlineExceeded);
        settle.push(o.overshoot_ms);
        caller.push(seen.saturating_duration_since(dl).as_secs_f64() * 1e3);
        // Late workers return right after their cancel; let them.
        while h.is_busy(Lane::Local) || h.is_busy(Lane::Cloud) {
            std::thread::yield_now();
        }
    }
    (settle, caller)
}

/// The real local lane on bench-135m, decoding a ~1500-token prompt when a
/// 150 ms deadline hits.
fn local_figures() {
    let model = std::env::var_os("EDGECLOUD_BENCH_MODEL")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("target/bench-models/bench-135m.gguf")
        });
    if !model.exists() {
        std::fs::create_dir_all(model.parent().expect("has a parent")).expect("writable");
        edgecloud::gguf::write_model(&model, edgecloud::gguf::Preset::Bench135m, 1)
            .expect("generating bench-135m");
    }
    let threads = std::env::var("EDGECLOUD_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    fn env_num<T: std::str::FromStr>(name: &str) -> Option<T> {
        std::env::var(name).ok().and_then(|v| v.parse().ok())
    }
    let defaults = edgecloud::local::LocalConfig::new(&model);
    let local = LocalBackend::start(edgecloud::local::LocalConfig {
        threads: Some(threads),
        // Unset: the harness's defaults (what users get).
        nice: env_num("EDGECLOUD_BENCH_NICE"),
        batch_size: env_num("EDGECLOUD_BENCH_BATCH").unwrap_or(defaults.batch_size),
        // Layers on a GPU device (a portable build with a GPU backend
        // module beside it: scripts/gpu-overshoot).
        gpu_layers: env_num("EDGECLOUD_BENCH_GPU_LAYERS").unwrap_or(0),
        thread_policy: env_num("EDGECLOUD_THREAD_POLICY").unwrap_or(defaults.thread_policy),
        ..defaults
    })
    .expect("bench-135m loads");
    let batch = local.lane().info().batch_size;
    let offload = local.lane().info().offload.describe();
    // Fewer runs on a slow device (EDGECLOUD_BENCH_RUNS, _CANCELS).
    let runs: u64 = env_num("EDGECLOUD_BENCH_RUNS").unwrap_or(100);
    let cancels: u64 = env_num("EDGECLOUD_BENCH_CANCELS").unwrap_or(50);
    let tokenizer = local.lane().clone();
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let h = Harness::builder()
        .local(local)
        .policy(Policy::LocalOnly)
        .observer(move |e: &Event| {
            if let Event::LateWorkerFinished { overrun_ms, .. } = e {
                let _ = tx.lock().expect("not poisoned").send(*overrun_ms);
            }
        })
        .build()
        .expect("harness builds");
    let deadline = Duration::from_millis(150);
    let (mut settle, mut caller, mut release) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        // A different start each time: no prompt prefix to reuse.
        let body: String = (0..500)
            .map(|w| format!("w{} ", (w * 13 + i) % 101))
            .collect();
        let mut r = Request::user(format!("{i}: {body}"));
        r.deadline = Some(deadline);
        r.sampling.max_tokens = 16;
        let run = h.start(r, RunOptions::new()).expect("starts");
        let dl = run.deadline();
        let o = run.wait().expect("settles");
        caller.push(Instant::now().saturating_duration_since(dl).as_secs_f64() * 1e3);
        settle.push(o.overshoot_ms);
        // How long llama.cpp took to stop after the deadline (the lane is
        // busy until then).
        let stop = match o.lane(Lane::Local).status {
            LaneStatus::Late => {
                o.overshoot_ms
                    + rx.recv_timeout(Duration::from_secs(60))
                        .expect("late worker")
            }
            _ => o.overshoot_ms,
        };
        release.push(stop);
    }
    // Cancel to return: abort runs at staggered points inside a
    // ~2000-token prompt's decode; the time from abort() until the lane's
    // worker has returned (llama.cpp stopped, the lane free again), from
    // the harness's own clocks: settlement after the abort plus the late
    // worker's overrun past settlement.
    let long = Duration::from_secs(60);
    let mut cancel = Vec::new();
    let mut cancel_prompt = 0;
    for i in 0..cancels {
        let body: String = (0..680)
            .map(|w| format!("w{} ", (w * 13 + i) % 101))
            .collect();
        let text = format!("{i}: {body}");
        cancel_prompt = tokenizer.count_tokens(&text);
        let mut r = Request::user(text);
        r.deadline = Some(long);
        r.sampling.max_tokens = 4;
        let run = h.start(r, RunOptions::new()).expect("starts");
        let started = run.deadline() - long;
        // Past the template and tokenizer, inside the prompt's decode.
        std::thread::sleep(Duration::from_millis(60 + 23 * i));
        let aborted_at = Instant::now();
        run.abort();
        let o = run.wait().expect("settles");
        let settled = started + Duration::from_secs_f64(o.elapsed_ms / 1e3);
        let overrun = match o.lane(Lane::Local).status {
            LaneStatus::Late => rx
                .recv_timeout(Duration::from_secs(60))
                .expect("late worker"),
            // It returned before the run settled: settlement is the end.
            LaneStatus::Cancelled => 0.0,
            _ => continue,
        };
        cancel.push(settled.saturating_duration_since(aborted_at).as_secs_f64() * 1e3 + overrun);
    }
    println!(
        "# real local lane ({}, {threads} threads, batch {batch}, offload {offload}), ~1500-token prompt, 150 ms deadline",
        model.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned())
    );
    println!("overshoot settle  local      {}", summary(&mut settle));
    println!("overshoot caller  local      {}", summary(&mut caller));
    println!("lane busy past the deadline  {}", summary(&mut release));
    println!("# abort() during a ~{cancel_prompt}-token prompt's decode, to the lane free again");
    println!("cancel to return  local      {}", summary(&mut cancel));
}
