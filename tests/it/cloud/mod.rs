//! Integration tests: the cloud lane against loopback servers that speak
//! real HTTP/1.1 (well-behaved in four servers' shapes, and hostile in
//! every way the issue lists), plus the `edgecloud cloud` binary.
//!
//! Rules: no sleeps for synchronisation (servers hand events back through
//! oneshot channels; the token sink drives mid-stream cancellation), no
//! timing assertions (deadline tests use a server that never answers and
//! assert on the error kind). After each fault, the same lane serves a good
//! request.

mod body;
mod cli;
mod connection;
mod deadline;
mod job;
mod secrets;
mod shapes;
mod status;

use crate::support::http::{chunked, Conn, Flavor, Recorded, TestServer, SSE_HEAD};
use edgecloud::cloud::{
    ApiKey, CloudCompletion, CloudConfig, CloudError, CloudErrorKind, CloudLane,
};
use edgecloud::{CancellationToken, ChatMessage, FinishReason, LaneJob, Sampling};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// The key every test lane sends. It must never show up in any output.
const KEY: &str = "sk-edgecloud-test-7f3a9c1e5b2d-DO-NOT-LEAK";
/// What a good request answers, in pieces.
const GOOD: &[&str] = &["Hello", ",", " world"];
const GOOD_TEXT: &str = "Hello, world";

fn config(base_url: &str) -> CloudConfig {
    CloudConfig::new(base_url, "test-model").with_api_key(ApiKey::new(KEY))
}

fn lane_with(server: &TestServer, tweak: impl FnOnce(&mut CloudConfig)) -> CloudLane {
    let mut cfg = config(&server.base_url());
    tweak(&mut cfg);
    CloudLane::new(cfg).expect("test config is valid")
}

fn lane(server: &TestServer) -> CloudLane {
    lane_with(server, |_| {})
}

fn job_within(prompt: &str, within: Duration) -> LaneJob {
    LaneJob::new(
        vec![ChatMessage::user(prompt)],
        Sampling {
            max_tokens: 16,
            ..Sampling::default()
        },
        Instant::now() + within,
    )
}

/// A job with a deadline far enough that it never fires in a passing test.
fn job(prompt: &str) -> LaneJob {
    job_within(prompt, Duration::from_secs(30))
}

/// A server that answers the prompt "good" well (OpenAI shape, streamed or
/// not as asked) and hands every other request to `fault`, which returns
/// the connection to keep serving it or `None` to close it.
async fn faulty<F, Fut>(fault: F) -> TestServer
where
    F: Fn(Conn, Recorded) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Option<Conn>> + Send + 'static,
{
    TestServer::start(move |mut conn| {
        let fault = fault.clone();
        async move {
            while let Some(req) = conn.read_request().await {
                if req.prompt() == "good" {
                    if conn.answer(Flavor::OpenAi, &req, GOOD).await.is_err() {
                        return;
                    }
                } else {
                    match fault(conn, req).await {
                        Some(c) => conn = c,
                        None => return,
                    }
                }
            }
        }
    })
    .await
}

/// Runs a faulty job, checks its error kind, then checks that the same
/// lane serves a good request. Returns the error for further checks.
async fn fault_then_good(lane: &CloudLane, job: LaneJob, kind: CloudErrorKind) -> CloudError {
    let err = lane
        .run(job)
        .await
        .expect_err("the fault must fail the job");
    assert_eq!(err.kind(), kind, "unexpected error: {err}");
    let ok = lane
        .run(self::job("good"))
        .await
        .unwrap_or_else(|e| panic!("the lane must serve a good request after {kind}: {e}"));
    assert_eq!(ok.text, GOOD_TEXT);
    err
}

fn collecting_sink() -> (Arc<Mutex<String>>, impl FnMut(&str) + Send + 'static) {
    let seen = Arc::new(Mutex::new(String::new()));
    let s = Arc::clone(&seen);
    (seen, move |piece: &str| s.lock().unwrap().push_str(piece))
}

fn chunk_with_content(text: &str) -> String {
    serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}).to_string()
}

async fn watched_server(send_first_token: bool) -> (TestServer, Watch) {
    let (req_tx, got_request) = oneshot::channel();
    let (closed_tx, closed) = oneshot::channel();
    let slots = Arc::new(Mutex::new(Some((req_tx, closed_tx))));
    let server = faulty(move |mut conn, _req| {
        let slots = Arc::clone(&slots);
        async move {
            let (req_tx, closed_tx) = slots.lock().unwrap().take().expect("one watched request");
            if send_first_token {
                let _ = conn.sse_head().await;
                let _ = conn.event(&chunk_with_content("Hel")).await;
            }
            let _ = req_tx.send(());
            conn.wait_closed().await;
            let _ = closed_tx.send(());
            None
        }
    })
    .await;
    (
        server,
        Watch {
            got_request,
            closed,
        },
    )
}

/// Generous bound so a broken promise fails the test instead of hanging it.
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen"))
}

/// Reports when the server has read a request and when the client has
/// closed the connection.
struct Watch {
    got_request: oneshot::Receiver<()>,
    closed: oneshot::Receiver<()>,
}
