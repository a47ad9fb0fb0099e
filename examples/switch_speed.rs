//! How fast an answer changes lanes mid-stream (issue 52's speed goal):
//! from the moment the harness sees the cloud's stream fail to the local
//! lane's first continued token, against the local lane's own time to
//! first token on the same request, measured in the same process on the
//! same lane.
//!
//! `cargo run --release --example switch_speed -- [MODEL] [PAIRS]`
//! (`scripts/switch-speed`; MODEL defaults to the generated bench-135m,
//! SmolLM2-135M's shape.)
//!
//! Each pair runs, on one question of a rotating set, (a) the local lane
//! alone, streaming: its `ttft_ms`; and (b) a fallback whose cloud (a
//! loopback stand-in written here, labelled as such: it streams the first
//! tokens of (a)'s answer, then closes the connection without `[DONE]`)
//! breaks part-way, so the local lane continues: the outcome's
//! `switch.first_token_after_ms`. The order within a pair alternates, so
//! neither always finds the other's conversation in the lane's context.
//! Prints medians, p90s and the ratio; the goal is switch p50 <= local
//! TTFT p50 x 1.2. The last line is machine-readable.

use edgecloud::cloud::CloudConfig;
use edgecloud::gguf::{write_model, Preset};
use edgecloud::harness::{CloudBackend, Harness, LocalBackend, Policy, RunOptions};
use edgecloud::local::LocalConfig;
use edgecloud::{ChatMessage, Request, Sampling};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const QUESTIONS: &[&str] = &[
    "Why is the sky blue?",
    "What is the capital of France?",
    "Name three uses of copper.",
    "How do bees make honey?",
    "What causes the seasons on Earth?",
];

/// Tokens the stand-in cloud streams before it breaks (at most half
/// the answer).
const SENT_TOKENS: usize = 8;

fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

fn request(question: &str) -> Request {
    let mut r = Request::user(question);
    r.messages = vec![
        ChatMessage::system("You are a helpful AI assistant."),
        ChatMessage::user(question),
    ];
    r.sampling = Sampling {
        max_tokens: 24,
        temperature: 0.0,
        ..Sampling::default()
    };
    r
}

/// The stand-in cloud: reads one request, streams `pieces` as OpenAI
/// deltas on a close-delimited body, then closes without `[DONE]`.
async fn breaking_cloud(pieces: Arc<Mutex<Vec<String>>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let pieces = pieces.lock().unwrap().clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // The head, then as much body as it says.
                loop {
                    let Ok(n) = conn.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break;
                        }
                    }
                }
                let mut out = String::from(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                );
                for p in pieces {
                    let delta = serde_json::json!({
                        "id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stand-in",
                        "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": null}]
                    });
                    out.push_str(&format!("data: {delta}\n\n"));
                }
                let _ = conn.write_all(out.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    format!("http://{addr}/v1")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let model = args.next().map(PathBuf::from).unwrap_or_else(|| {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-models/bench-135m.gguf");
        if !path.exists() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            write_model(&path, Preset::Bench135m, 1).unwrap();
        }
        path
    });
    let pairs: usize = args
        .next()
        .map_or(20, |n| n.parse().expect("PAIRS is a number"));
    let local = tokio::task::block_in_place(|| {
        LocalBackend::start(LocalConfig {
            threads: Some(2),
            ..LocalConfig::new(&model)
        })
        .expect("the model loads")
    });
    let pieces = Arc::new(Mutex::new(Vec::new()));
    let cloud_url = breaking_cloud(pieces.clone()).await;
    let mut cloud_cfg = CloudConfig::new(&cloud_url, "stand-in");
    cloud_cfg.api_key_env = "EDGECLOUD_SWITCH_SPEED_NO_KEY".into();
    let alone = Harness::builder()
        .local(local.clone())
        .policy(Policy::LocalOnly)
        .deadline(Duration::from_secs(120))
        .build()
        .unwrap();
    let hybrid = Harness::builder()
        .local(local.clone())
        .cloud(CloudBackend::start(cloud_cfg).unwrap())
        .policy(Policy::fallback())
        .deadline(Duration::from_secs(120))
        .build()
        .unwrap();

    // Each question's first tokens, as the local lane answers it alone
    // (also the warm-up).
    let mut first_tokens = Vec::new();
    for q in QUESTIONS {
        let mut run = alone.start(request(q), RunOptions::new().stream()).unwrap();
        let mut got = Vec::new();
        while let Some(t) = run.next_token().await {
            got.push(t);
        }
        run.outcome().await.unwrap();
        // Cut before the answer's end, so there is something to continue.
        got.truncate(SENT_TOKENS.min(got.len() / 2));
        first_tokens.push(got);
    }

    let (mut ttft, mut switch, mut sent_chars) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..pairs {
        let q = QUESTIONS[i % QUESTIONS.len()];
        let mut order = [true, false];
        if i % 2 == 1 {
            order.reverse();
        }
        for run_alone in order {
            let options = RunOptions::new().stream();
            if run_alone {
                let mut run = alone.start(request(q), options).unwrap();
                while run.next_token().await.is_some() {}
                let out = run.outcome().await.unwrap();
                ttft.push(out.ttft_ms.expect("a streamed answer has a first token"));
            } else {
                *pieces.lock().unwrap() = first_tokens[i % QUESTIONS.len()].clone();
                let mut run = hybrid.start(request(q), options).unwrap();
                while run.next_token().await.is_some() {}
                let out = run.outcome().await.unwrap();
                let s = out.switch.expect("the stand-in breaks every stream");
                switch.push(s.first_token_after_ms.expect("the local lane continued"));
                sent_chars.push(s.sent_chars as f64);
            }
        }
    }
    let (t50, s50) = (quantile(ttft.clone(), 0.5), quantile(switch.clone(), 0.5));
    println!("model: {}", model.display());
    println!(
        "pairs: {pairs}; the stand-in cloud breaks after at most {SENT_TOKENS} tokens (median {:.0} chars)",
        quantile(sent_chars, 0.5)
    );
    println!(
        "local lane alone, time to first token:      p50 {t50:7.1} ms  p90 {:7.1} ms",
        quantile(ttft, 0.9)
    );
    println!(
        "switch, failure seen to first continued token: p50 {s50:7.1} ms  p90 {:7.1} ms",
        quantile(switch, 0.9)
    );
    let ratio = s50 / t50;
    println!(
        "ratio switch/ttft p50: {ratio:.2} (goal <= 1.20: {})",
        if ratio <= 1.2 { "met" } else { "NOT met" }
    );
    println!("RESULT ttft_p50_ms={t50:.2} switch_p50_ms={s50:.2} ratio={ratio:.3}");
}
