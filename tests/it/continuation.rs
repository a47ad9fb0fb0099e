//! Continue, don't restart (DESIGN point 18): a lane that fails part-way
//! through an answer hands the text it produced to the other lane, which
//! continues it. On the real local lane (SmolLM2, greedy), the real cloud
//! lane against hostile loopback servers (a stream cut, stalled, or ended
//! by an error event after some deltas), and the real binary's every API.
//!
//! The hostile servers replay the local lane's own greedy answer up to a
//! token boundary, then fail: the continuation must then give exactly the
//! uninterrupted answer, so a repeated, missing or re-tokenized piece
//! fails the test.

use crate::reasoning::{joined, sse};
use crate::serve::{metrics_text, post_to, ServeProcess};
use crate::support::http::{Conn, Flavor, TestServer};
use crate::support::real_model::{asked, smollm2};
use crate::support::scripted::Scripted;
use edgecloud::cloud::CloudConfig;
use edgecloud::harness::{
    CloudBackend, Harness, LaneErrorKind, LocalBackend, Policy, RunOptions, RunStatus,
};
use edgecloud::local::{LocalConfig, LocalLane};
use edgecloud::reasoning::Piece;
use edgecloud::{ChatMessage, Lane, LaneJob, Request, Sampling};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const QUESTION: &str = "Why is the sky blue? Answer in two sentences.";
const MAX_TOKENS: u32 = 40;

fn config() -> LocalConfig {
    LocalConfig {
        threads: Some(2),
        ..LocalConfig::new(smollm2())
    }
}

fn greedy(max_tokens: u32) -> Sampling {
    Sampling {
        max_tokens,
        temperature: 0.0,
        ..Sampling::default()
    }
}

/// The local lane's greedy answer to `messages`, one piece per token.
fn answer_pieces(lane: &LocalLane, messages: Vec<ChatMessage>, max_tokens: u32) -> Vec<String> {
    let pieces = Arc::new(Mutex::new(Vec::new()));
    let sink = pieces.clone();
    let job = LaneJob::new(
        messages,
        greedy(max_tokens),
        Instant::now() + Duration::from_secs(120),
    )
    .with_sink(move |p| sink.lock().unwrap().push(p.to_string()));
    let done = lane.generate(job).expect("SmolLM2 answers");
    let pieces = std::mem::take(&mut *pieces.lock().unwrap());
    assert_eq!(pieces.concat(), done.text, "the stream is the answer");
    pieces
}

/// Where to cut an answer: after a middle token whose successor begins a
/// word (a pre-token boundary, so the text re-tokenizes as generated).
fn cut_at(pieces: &[String]) -> usize {
    (3..pieces.len() - 3)
        .find(|&k| pieces[k].starts_with(' '))
        .expect("a word boundary in the middle of the answer")
}

#[test]
fn greedy_continuation_of_the_local_lanes_own_text_equals_its_uninterrupted_answer() {
    let lane = LocalLane::start(config()).expect("SmolLM2 loads");
    let pieces = answer_pieces(&lane, asked(QUESTION), MAX_TOKENS);
    let whole = pieces.concat();
    let k = cut_at(&pieces);
    let prefix = pieces[..k].concat();
    let mut messages = asked(QUESTION);
    messages.push(ChatMessage::assistant(prefix.clone()));
    let job = LaneJob::new(
        messages,
        greedy(MAX_TOKENS - k as u32),
        Instant::now() + Duration::from_secs(120),
    );
    let rest = lane.generate(job).expect("the continuation runs");
    assert_eq!(
        format!("{prefix}{}", rest.text),
        whole,
        "cut after {k} tokens"
    );
    assert!(
        rest.reused_prompt_tokens > 0,
        "the conversation's prefix is reused from the lane's context: {rest:?}"
    );
}

/// How a hostile cloud fails after its deltas.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The connection closes without `[DONE]`.
    Cut,
    /// Nothing more comes (the lane's stall timer fires).
    Stall,
    /// An error event instead of the rest.
    ErrorEvent,
}

/// A cloud that streams `pieces` (set once the test knows them) as
/// OpenAI deltas, then fails as `fault` says; every request alike.
async fn hostile(pieces: Arc<Mutex<Vec<String>>>, fault: Fault) -> TestServer {
    TestServer::start(move |conn: Conn| {
        let pieces = pieces.lock().unwrap().clone();
        async move { fail_after(conn, pieces, fault).await }
    })
    .await
}

async fn fail_after(mut conn: Conn, pieces: Vec<String>, fault: Fault) {
    if conn.read_request().await.is_none() {
        return;
    }
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let events = Flavor::OpenAi.stream_events(&refs, "stop", None);
    let _ = conn.sse_head().await;
    // The role chunk and one chunk per piece; never the finish.
    for e in &events[..=refs.len()] {
        let _ = conn.event(e).await;
    }
    match fault {
        Fault::Cut => {}
        Fault::Stall => std::future::pending::<()>().await,
        Fault::ErrorEvent => {
            let error = json!({"error": {"message": "overloaded", "type": "server_error"}});
            let _ = conn.event(&error.to_string()).await;
            let _ = conn.end_chunks().await;
        }
    }
}

fn cloud_backend(base_url: &str) -> CloudBackend {
    let mut cfg = CloudConfig::new(base_url, "hostile");
    cfg.api_key_env = "EDGECLOUD_CONTINUATION_TEST_NO_KEY".into();
    cfg.stall_timeout = Duration::from_millis(500);
    CloudBackend::start(cfg).expect("loopback settings are valid")
}

fn request() -> Request {
    let mut r = Request::user(QUESTION);
    r.messages = asked(QUESTION);
    r.sampling = greedy(MAX_TOKENS);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_stream_that_breaks_part_way_is_finished_by_the_local_lane_with_no_seam() {
    let local = LocalBackend::start(config()).expect("SmolLM2 loads");
    let pieces =
        tokio::task::block_in_place(|| answer_pieces(local.lane(), asked(QUESTION), MAX_TOKENS));
    let whole = pieces.concat();
    let k = cut_at(&pieces);
    let sent: String = pieces[..k].concat();
    let shared = Arc::new(Mutex::new(pieces[..k].to_vec()));
    for fault in [Fault::Cut, Fault::Stall, Fault::ErrorEvent] {
        let server = hostile(shared.clone(), fault).await;
        let h = Harness::builder()
            .local(local.clone())
            .cloud(cloud_backend(&server.base_url()))
            .policy(Policy::fallback())
            .deadline(Duration::from_secs(120))
            .build()
            .unwrap();
        let mut run = h.start(request(), RunOptions::new().stream()).unwrap();
        let mut streamed = String::new();
        while let Some(piece) = run.next_piece().await {
            assert!(matches!(piece, Piece::Answer(_)), "{fault:?}: {piece:?}");
            streamed.push_str(piece.text());
        }
        let out = run.outcome().await.unwrap();
        assert_eq!(out.status, RunStatus::Ok, "{fault:?}: {out:#?}");
        assert_eq!(streamed, whole, "{fault:?}: the stream has no seam");
        assert_eq!(out.text.as_deref(), Some(whole.as_str()), "{fault:?}");
        assert_eq!(out.winner, Some(Lane::Local));
        let switch = out.switch.as_ref().expect("the outcome says it switched");
        assert_eq!((switch.from, switch.to), (Lane::Cloud, Lane::Local));
        assert_eq!(switch.sent_chars, sent.chars().count() as u64, "{fault:?}");
        assert_eq!(switch.sent_pieces, k as u64, "{fault:?}");
        assert!(switch.first_token_after_ms.is_some(), "{fault:?}");
        assert!(
            out.decision.reason.contains("local continued the answer"),
            "{fault:?}: {}",
            out.decision.reason
        );
        assert_eq!(
            out.lane(Lane::Local).completion_tokens,
            Some(u64::from(MAX_TOKENS) - k as u64),
            "{fault:?}: only the rest was generated"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_lane_that_fails_part_way_is_finished_by_the_cloud_from_its_text() {
    // The local lane is a scripted stand-in (a real one cannot be made to
    // fail mid-answer on demand); the cloud lane is the real one against
    // a loopback provider that records what it was asked.
    let server = TestServer::openai(Flavor::OpenAi, &[" scattered", " light."]).await;
    let local = Scripted::new("local");
    let h = Harness::builder()
        .local(local.clone())
        .cloud(cloud_backend(&server.base_url()))
        .policy(Policy::Hedge {
            primary: Lane::Local,
            delay: Some(Duration::from_secs(100)),
        })
        .deadline(Duration::from_secs(120))
        .build()
        .unwrap();
    let mut run = h.start(request(), RunOptions::new().stream()).unwrap();
    let task = tokio::task::spawn_blocking(move || local.next_task())
        .await
        .unwrap();
    task.token("Because of");
    task.token(" Rayleigh");
    task.fail(LaneErrorKind::Model, "decode failed");
    let mut streamed = String::new();
    while let Some(piece) = run.next_piece().await {
        streamed.push_str(piece.text());
    }
    let out = run.outcome().await.unwrap();
    assert_eq!(out.status, RunStatus::Ok, "{out:#?}");
    assert_eq!(streamed, "Because of Rayleigh scattered light.");
    assert_eq!(out.winner, Some(Lane::Cloud));
    let asked = server.requests().last().unwrap().json();
    let messages = asked["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "assistant", "content": "Because of Rayleigh"}),
        "the unfinished answer, as the provider's last message"
    );
    assert_eq!(asked["max_tokens"], MAX_TOKENS - 2, "what was sent counts");
    let switch = out.switch.unwrap();
    assert_eq!(
        (switch.from, switch.to, switch.error_kind),
        (Lane::Local, Lane::Cloud, LaneErrorKind::Model)
    );
}

/// The text and the last `edgecloud` field of an API's stream.
struct Streamed {
    text: String,
    finishes: usize,
    edgecloud: Option<Value>,
    errors: usize,
}

/// Each API's stream, read as its clients read it.
fn read_stream(path: &str, body: &str) -> Streamed {
    let events: Vec<Value> = if path.starts_with("/api/") {
        body.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("{path}: {l}")))
            .collect()
    } else {
        sse(body).into_iter().map(|(_, d)| d).collect()
    };
    let (text_at, finish_at): (&[&str], &str) = match path {
        "/chat/completions" => (&["/choices/0/delta/content"], "/choices/0/finish_reason"),
        "/completions" => (&["/choices/0/text"], "/choices/0/finish_reason"),
        "/responses" => (&["/delta"], "/response/status"),
        "/messages" => (&["/delta/text"], "/delta/stop_reason"),
        "/api/chat" => (&["/message/content"], "/done_reason"),
        _ => (&["/response"], "/done_reason"),
    };
    let text = text_at
        .iter()
        .map(|p| {
            joined(
                events
                    .iter()
                    .filter(|e| e["type"] != "response.output_text.done"),
                p,
            )
        })
        .collect();
    Streamed {
        text,
        finishes: events
            .iter()
            .filter(|e| {
                e.pointer(finish_at)
                    .is_some_and(|v| !v.is_null() && v != "in_progress")
            })
            .count(),
        edgecloud: events.iter().rev().find_map(|e| {
            e.get("edgecloud")
                .or_else(|| e.pointer("/response/edgecloud"))
                .or_else(|| e.pointer("/message/edgecloud"))
                .cloned()
        }),
        errors: events
            .iter()
            .filter(|e| e.get("error").is_some() || e["type"] == "error")
            .count(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_serve_speaks_continues_a_broken_cloud_stream_without_an_error() {
    let pieces = tokio::task::block_in_place(|| {
        let lane = LocalLane::start(config()).expect("SmolLM2 loads");
        answer_pieces(&lane, asked(QUESTION), MAX_TOKENS)
    });
    let whole = pieces.concat();
    let k = cut_at(&pieces);
    let shared = Arc::new(Mutex::new(pieces[..k].to_vec()));
    let cloud = hostile(shared, Fault::Cut).await;
    let server = ServeProcess::start(
        &[
            "--model",
            smollm2().to_str().unwrap(),
            "--threads",
            "2",
            "--base-url",
            &cloud.base_url(),
            "--cloud-model",
            "hostile",
            "--policy",
            "fallback",
            "--deadline-ms",
            "120000",
        ],
        &[("OPENAI_API_KEY", "")],
    );
    let v1 = server.url.clone();
    let root = v1.trim_end_matches("/v1").to_string();
    let messages = json!([
        {"role": "system", "content": "You are a helpful AI assistant."},
        {"role": "user", "content": QUESTION}
    ]);
    let prompt = QUESTION;
    let cases = [
        (
            &v1,
            "/chat/completions",
            json!({"model": "edgecloud", "messages": messages, "temperature": 0, "max_tokens": MAX_TOKENS, "stream": true}),
        ),
        (
            &v1,
            "/completions",
            json!({"model": "edgecloud", "prompt": prompt, "temperature": 0, "max_tokens": MAX_TOKENS, "stream": true}),
        ),
        (
            &v1,
            "/responses",
            json!({"model": "edgecloud", "input": messages, "temperature": 0, "max_output_tokens": MAX_TOKENS, "stream": true}),
        ),
        (
            &v1,
            "/messages",
            json!({"model": "edgecloud", "system": "You are a helpful AI assistant.", "messages": [{"role": "user", "content": QUESTION}], "temperature": 0, "max_tokens": MAX_TOKENS, "stream": true}),
        ),
        (
            &root,
            "/api/chat",
            json!({"model": "edgecloud", "messages": messages, "options": {"temperature": 0, "num_predict": MAX_TOKENS}}),
        ),
        (
            &root,
            "/api/generate",
            json!({"model": "edgecloud", "prompt": prompt, "options": {"temperature": 0, "num_predict": MAX_TOKENS}}),
        ),
    ];
    let sent = pieces[..k].concat();
    for (base, path, body) in cases {
        let (status, headers, text) = post_to(base, path, body, &[]).await;
        assert_eq!(status, 200, "{path}: {text}");
        let s = read_stream(path, &text);
        assert_eq!(s.errors, 0, "{path}: no error event: {text}");
        assert_eq!(s.finishes, 1, "{path}: one finish: {text}");
        assert!(
            s.text.starts_with(&sent) && s.text.len() > sent.len(),
            "{path}: the cloud's text, then more: {:?}",
            s.text
        );
        if path != "/completions" && path != "/api/generate" {
            // The same conversation as the local answer above.
            assert_eq!(s.text, whole, "{path}");
        }
        assert!(
            headers.get("x-edgecloud-switch").is_none(),
            "a stream's headers leave first"
        );
        if let Some(e) = &s.edgecloud {
            assert_eq!(e["switch"]["from"], "cloud", "{path}: {e}");
            assert_eq!(e["switch"]["sent_chars"], sent.chars().count(), "{path}");
        } else {
            assert!(path.starts_with("/api/"), "{path}: an edgecloud field");
        }
    }
    // A whole answer says it in its headers too.
    let body = json!({"model": "edgecloud", "messages": messages, "temperature": 0, "max_tokens": MAX_TOKENS});
    let (status, headers, text) = post_to(&v1, "/chat/completions", body, &[]).await;
    assert_eq!(status, 200, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reply["choices"][0]["message"]["content"], whole.as_str());
    let said = headers["x-edgecloud-switch"].to_str().unwrap();
    assert!(
        said.starts_with(&format!(
            "cloud->local; at {} chars, {k} pieces; (",
            sent.chars().count()
        )),
        "{said}"
    );
    let switches: f64 = metrics_text(&v1)
        .await
        .lines()
        .filter(|l| {
            l.starts_with(
                "edgecloud_lane_switches_total{route=\"default\",from=\"cloud\",to=\"local\"",
            )
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(switches, 7.0, "six streams and one whole answer");
}
