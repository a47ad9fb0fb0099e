//! Prints the local lane's headline figures on `bench-135m`:
//! prompt-eval and generation tokens/s, the time from cancel to return while
//! decoding a ~2000-token prompt, and the first-token time of a second turn
//! that shares a ~1000-token prefix against a cold context.
//!
//! `cargo run --release --example local_figures -- [THREADS] [MODEL]`
//! (`scripts/local-figures` wraps it). Medians, because machines are noisy.

use edgecloud::gguf::{write_model, Preset};
use edgecloud::local::{LocalConfig, LocalLane};
use edgecloud::{CancellationToken, ChatMessage, LaneJob, Sampling};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling {
        max_tokens,
        temperature: 0.0,
        ..Sampling::default()
    }
}

/// About `tokens` tokens of filler whose start depends on `variant`.
fn filler(variant: usize, tokens: usize) -> String {
    let mut s = format!("{variant}: ");
    for i in 0..tokens / 3 {
        s.push_str(&format!("w{} ", (i * 13 + variant) % 101));
    }
    s
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(2);
    let model = args.next().map(PathBuf::from).unwrap_or_else(|| {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-models/bench-135m.gguf");
        if !path.exists() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            write_model(&path, Preset::Bench135m, 1).unwrap();
        }
        path
    });
    let config = LocalConfig {
        threads: Some(threads),
        // The cold second turn is cold: no prompt cache brings its
        // prefix back.
        cache_ram: 0,
        ..LocalConfig::new(&model)
    };
    let lane = LocalLane::start(config.clone()).expect("model loads");
    println!(
        "model {} threads {threads} load {:.0} ms",
        model.display(),
        ms(lane.info().load_time)
    );

    // Throughput: 5 runs of a ~500-token prompt and 64 generated tokens.
    let (mut pp, mut tg) = (Vec::new(), Vec::new());
    for v in 0..6 {
        let done = lane
            .generate(LaneJob::new(
                vec![ChatMessage::user(filler(v, 500))],
                greedy(64),
                far(),
            ))
            .unwrap();
        if v > 0 {
            pp.push(done.timings.prompt_tokens_per_s.unwrap_or(0.0));
            tg.push(done.timings.gen_tokens_per_s.unwrap_or(0.0));
        }
    }
    println!("prompt eval     median {:.1} tok/s", median(&mut pp));
    println!("generation      median {:.1} tok/s", median(&mut tg));

    // Cancel latency: cancel at staggered points inside a ~2000-token
    // prompt's decode; measure cancel() -> result in hand.
    let mut lat = Vec::new();
    let mut prompt_tokens = 0;
    for i in 0..20 {
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        let (tx, rx) = mpsc::channel();
        let delay = Duration::from_millis(100 + 60 * i);
        let canceller = std::thread::spawn(move || {
            // Wait until the prompt decode has begun, then a bit more.
            rx.recv().unwrap();
            std::thread::sleep(delay);
            let at = Instant::now();
            trigger.cancel();
            at
        });
        let mut started = false;
        let ticket = lane.submit_with_progress(
            LaneJob::new(
                vec![ChatMessage::user(filler(100 + i as usize, 2000))],
                greedy(4),
                far(),
            )
            .with_cancel(cancel),
            move |_| {
                if !started {
                    started = true;
                    let _ = tx.send(());
                }
            },
        );
        let done = ticket.wait().unwrap();
        let returned = Instant::now();
        let cancelled_at = canceller.join().unwrap();
        prompt_tokens = done.prompt_tokens;
        if done.aborted_in_decode {
            lat.push(ms(returned - cancelled_at));
        }
    }
    let worst = lat.iter().copied().fold(0.0, f64::max);
    println!(
        "cancel->return  prompt {prompt_tokens} tokens, {} of 20 aborted inside decode: median {:.2} ms, worst {:.2} ms",
        lat.len(),
        median(&mut lat),
        worst
    );

    // Second turn sharing a ~1000-token prefix vs the same turn cold.
    let system = ChatMessage::system(filler(7, 1000));
    let turn1 = vec![system.clone(), ChatMessage::user("First question?")];
    let turn2 = |n: usize| {
        vec![
            system.clone(),
            ChatMessage::user("First question?"),
            ChatMessage::assistant("An answer."),
            ChatMessage::user(format!("Follow-up number {n}?")),
        ]
    };
    let (mut warm, mut cold) = (Vec::new(), Vec::new());
    for n in 0..5 {
        lane.generate(LaneJob::new(turn1.clone(), greedy(1), far()))
            .unwrap();
        let w = lane
            .generate(LaneJob::new(turn2(n), greedy(1), far()))
            .unwrap();
        // Cold: evict the prefix with an unrelated prompt first.
        lane.generate(LaneJob::new(
            vec![ChatMessage::user(filler(999 + n, 50))],
            greedy(1),
            far(),
        ))
        .unwrap();
        let c = lane
            .generate(LaneJob::new(turn2(n), greedy(1), far()))
            .unwrap();
        assert!(w.reused_prompt_tokens > 900 && c.reused_prompt_tokens < 10);
        warm.push(ms(w.timings.ttft.unwrap()));
        cold.push(ms(c.timings.ttft.unwrap()));
    }
    let (w, c) = (median(&mut warm), median(&mut cold));
    println!(
        "second-turn TTFT  warm (prefix reused) {w:.1} ms, cold {c:.1} ms, cold/warm {:.1}x",
        c / w
    );
}
