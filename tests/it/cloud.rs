//! Integration tests: the cloud lane against loopback servers that speak
//! real HTTP/1.1 (well-behaved in four servers' shapes, and hostile in
//! every way the issue lists), plus the `edgecloud cloud` binary.
//!
//! Rules: no sleeps for synchronisation (servers hand events back through
//! oneshot channels; the token sink drives mid-stream cancellation), no
//! timing assertions (deadline tests use a server that never answers and
//! assert on the error kind). After each fault, the same lane serves a good
//! request.

use crate::support::http::{chunked, Conn, Flavor, Recorded, TestServer, SSE_HEAD};
use edgecloud::cloud::{ApiKey, CloudCompletion, CloudConfig, CloudError, CloudLane};
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
async fn fault_then_good(lane: &CloudLane, job: LaneJob, kind: &str) -> CloudError {
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

// ---------------------------------------------------------------------------
// Shapes of real servers
// ---------------------------------------------------------------------------

#[tokio::test]
async fn every_server_shape_streamed_and_whole() {
    for flavor in Flavor::ALL {
        for stream in [true, false] {
            let server = TestServer::openai(flavor, GOOD).await;
            let lane = lane_with(&server, |c| c.stream = stream);
            let (seen, sink) = collecting_sink();
            let done = lane
                .run(job("hi").with_sink(sink))
                .await
                .unwrap_or_else(|e| panic!("{flavor:?} stream={stream}: {e}"));
            let what = format!("{flavor:?} stream={stream}");
            assert_eq!(done.text, GOOD_TEXT, "{what}");
            assert_eq!(
                *seen.lock().unwrap(),
                GOOD_TEXT,
                "{what}: sink saw every piece"
            );
            assert_eq!(done.finish_reason, FinishReason::Stop, "{what}");
            assert_eq!(
                done.provider_finish_reason.as_deref(),
                Some("stop"),
                "{what}"
            );
            let usage = done.usage.expect("the provider sent usage");
            assert_eq!(
                (
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.total_tokens
                ),
                (9, 3, 12),
                "{what}"
            );
            assert_eq!(done.http_status, 200);
            assert_eq!(done.streamed, stream, "{what}");
            assert!(done.model.is_some(), "{what}: the server echoed its model");
            let t = done.timings;
            let (ttfb, ttft) = (t.ttfb.unwrap(), t.ttft.unwrap());
            assert!(ttfb <= ttft && ttft <= t.total, "{what}: {t:?}");
            assert!(t.connect.is_some(), "{what}: a fresh connection was timed");
        }
    }
}

#[tokio::test]
async fn request_carries_model_messages_sampling_and_the_key() {
    let server = TestServer::openai(Flavor::Vllm, GOOD).await;
    let lane = lane(&server);
    let mut j = LaneJob::new(
        vec![ChatMessage::system("be brief"), ChatMessage::user("hi")],
        Sampling {
            max_tokens: 5,
            temperature: 0.0,
            stop: vec!["END".into()],
            seed: Some(42),
            ..Sampling::default()
        },
        Instant::now() + Duration::from_secs(30),
    );
    j.cancel = CancellationToken::new();
    lane.run(j).await.unwrap();
    let reqs = server.requests();
    let req = &reqs[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.header("accept"), Some("text/event-stream"));
    let body = req.json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["content"], "hi");
    assert_eq!(body["max_tokens"], 5);
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["seed"], 42);
    assert_eq!(body["stop"][0], "END");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert!(body.get("top_k").is_none(), "top_k is off by default");
}

#[tokio::test]
async fn no_key_means_no_authorization_header() {
    let server = TestServer::openai(Flavor::Ollama, GOOD).await;
    let mut cfg = CloudConfig::new(server.base_url(), "m");
    cfg.api_key_env = "EDGECLOUD_TEST_UNSET_KEY_VAR".into();
    CloudLane::new(cfg).unwrap().run(job("hi")).await.unwrap();
    assert_eq!(server.requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn key_from_the_named_environment_variable() {
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    std::env::set_var("EDGECLOUD_TEST_KEY_FROM_ENV", "sk-from-env-123");
    let mut cfg = CloudConfig::new(server.base_url(), "m");
    cfg.api_key_env = "EDGECLOUD_TEST_KEY_FROM_ENV".into();
    CloudLane::new(cfg).unwrap().run(job("hi")).await.unwrap();
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer sk-from-env-123")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn one_pooled_connection_serves_consecutive_requests() {
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    let lane = lane(&server);
    let first = lane.run(job("hi")).await.unwrap();
    // Let the connection task hand the idle connection back to the pool
    // (it runs on this same thread).
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    let second = lane.clone().run(job("hi")).await.unwrap();
    assert_eq!(second.text, GOOD_TEXT);
    assert_eq!(server.accepted(), 1, "keep-alive: one TCP connection");
    assert!(first.timings.connect.is_some());
    assert!(
        second.timings.connect.is_none(),
        "the pooled connection was reused"
    );
}

#[tokio::test]
async fn comments_keepalives_crlf_and_unspaced_data_lines() {
    let server = TestServer::start(|mut conn| async move {
        let Some(_) = conn.read_request().await else { return };
        let mut body = Vec::new();
        body.extend(chunked(b": OPENROUTER PROCESSING\n\n"));
        body.extend(chunked(b"\n\n\n"));
        body.extend(chunked(b"data:{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n"));
        body.extend(chunked(b"event: message\r\nid: 1\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\r\n\r\n"));
        body.extend(chunked(b": keep-alive\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},"));
        body.extend(chunked(b"\"finish_reason\":\"length\"}]}\r\r"));
        body.extend(chunked(b"data: [DONE]\n\n"));
        body.extend(b"0\r\n\r\n");
        let mut out = SSE_HEAD.as_bytes().to_vec();
        out.extend(body);
        let _ = conn.write(&out).await;
        conn.wait_closed().await;
    })
    .await;
    let done = lane(&server).run(job("hi")).await.unwrap();
    assert_eq!(done.text, "Hello");
    assert_eq!(done.finish_reason, FinishReason::Length);
    assert_eq!(done.provider_finish_reason.as_deref(), Some("length"));
    assert!(done.usage.is_none(), "no usage sent, none invented");
    assert!(done.gen_tokens_per_s().is_none());
}

#[tokio::test]
async fn a_response_dripped_one_byte_per_write_parses() {
    for stream in [true, false] {
        let server = TestServer::start(move |mut conn| async move {
            let Some(req) = conn.read_request().await else { return };
            let bytes = if stream {
                let mut out = SSE_HEAD.as_bytes().to_vec();
                for ev in Flavor::LlamaServer.stream_events(&["Hé", "llo ", "wörld"], "stop", Some((4, 3))) {
                    out.extend(chunked(format!("data: {ev}\n\n").as_bytes()));
                }
                out.extend(chunked(b"data: [DONE]\n\n"));
                out.extend(b"0\r\n\r\n");
                out
            } else {
                let body = Flavor::LlamaServer.whole_body("Héllo wörld", "stop", Some((4, 3)));
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            };
            assert_eq!(req.wants_stream(), stream);
            let _ = conn.drip(&bytes).await;
            conn.wait_closed().await;
        })
        .await;
        let (seen, sink) = collecting_sink();
        let done = lane_with(&server, |c| c.stream = stream)
            .run(job("hi").with_sink(sink))
            .await
            .unwrap();
        assert_eq!(done.text, "Héllo wörld");
        assert_eq!(*seen.lock().unwrap(), "Héllo wörld");
        assert_eq!(done.usage.unwrap().completion_tokens, 3);
    }
}

#[tokio::test]
async fn a_server_ignoring_stream_true_still_answers() {
    let server = TestServer::start(|mut conn| async move {
        while let Some(_req) = conn.read_request().await {
            let body = Flavor::Ollama.whole_body(GOOD_TEXT, "stop", None);
            if conn.json(200, &body).await.is_err() {
                return;
            }
        }
    })
    .await;
    let done = lane(&server).run(job("hi")).await.unwrap();
    assert_eq!(done.text, GOOD_TEXT);
    assert!(!done.streamed);
    assert!(done.usage.is_none());
}

// ---------------------------------------------------------------------------
// Connection faults
// ---------------------------------------------------------------------------

#[tokio::test]
async fn connection_refused_then_the_lane_recovers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let lane = CloudLane::new(config(&format!("http://{addr}/v1"))).unwrap();
    let err = lane.run(job("hi")).await.unwrap_err();
    assert_eq!(err.kind(), "connect_refused", "{err}");
    assert!(err.is_retryable() && err.is_connect());
    // The same lane, once something listens there again.
    let listener = TcpListener::bind(addr)
        .await
        .expect("rebind the freed port");
    let _server = TestServer::on_listener(listener, |mut conn| async move {
        while let Some(req) = conn.read_request().await {
            if conn.answer(Flavor::OpenAi, &req, GOOD).await.is_err() {
                return;
            }
        }
    });
    assert_eq!(lane.run(job("good")).await.unwrap().text, GOOD_TEXT);
}

#[tokio::test]
async fn connect_timeout_when_the_peer_never_completes_the_handshake() {
    // A listener with a backlog of one that never accepts: once its queue
    // is full, the kernel drops further SYNs and connecting hangs.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    let _listener = socket.listen(1).unwrap();
    let mut fillers = Vec::new();
    for _ in 0..8 {
        match tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(s)) => fillers.push(s),
            _ => break, // the queue is full
        }
    }
    let lane = CloudLane::new({
        let mut c = config(&format!("http://{addr}/v1"));
        c.connect_timeout = Duration::from_millis(300);
        c
    })
    .unwrap();
    let err = lane.run(job("hi")).await.unwrap_err();
    assert_eq!(err.kind(), "connect_timeout", "{err}");
    assert!(err.is_retryable() && err.is_connect());
    // The deadline still wins when it is the shorter bound.
    let err = lane
        .run(job_within("hi", Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "deadline_before_headers", "{err}");
}

#[test]
fn the_lane_and_its_future_can_move_between_threads() {
    fn send_sync<T: Send + Sync + Clone + 'static>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let lane = CloudLane::new(config("http://127.0.0.1:9/v1")).unwrap();
    send_sync(&lane);
    let fut = lane.run(job("hi"));
    send(&fut);
}

#[tokio::test]
async fn dns_failure_is_its_own_variant() {
    let lane = CloudLane::new(config("http://edgecloud-test.invalid:8080/v1")).unwrap();
    for _ in 0..2 {
        // Twice: a failed lookup leaves nothing behind that changes the next.
        let err = lane.run(job("hi")).await.unwrap_err();
        assert_eq!(err.kind(), "dns", "{err}");
        assert!(err.to_string().contains("edgecloud-test.invalid"));
    }
}

#[tokio::test]
async fn tls_failure_against_a_peer_that_does_not_speak_tls() {
    // One peer answers plain-text HTTP to our ClientHello, one hangs up.
    for garbage in [true, false] {
        let server = TestServer::start(move |mut conn| async move {
            if garbage {
                let _ = conn
                    .write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 7\r\n\r\nnot tls")
                    .await;
            }
        })
        .await;
        let lane = CloudLane::new(config(&format!("https://{}/v1", server.addr()))).unwrap();
        for _ in 0..2 {
            let err = lane.run(job("hi")).await.unwrap_err();
            assert_eq!(err.kind(), "tls", "garbage={garbage}: {err}");
        }
    }
}

#[tokio::test]
async fn garbage_on_plain_http_is_a_transport_error() {
    let server = faulty(|mut conn, _req| async move {
        let _ = conn.write(b"SSH-2.0-OpenSSH_9.2\r\n").await;
        None
    })
    .await;
    fault_then_good(&lane(&server), job("bad"), "transport").await;
    let server = faulty(|_conn, _req| async move { None }).await;
    fault_then_good(&lane(&server), job("bad"), "transport").await;
}

// ---------------------------------------------------------------------------
// Deadline and cancellation
// ---------------------------------------------------------------------------

#[tokio::test]
async fn deadline_before_headers() {
    let server = faulty(|mut conn, _req| async move {
        conn.wait_closed().await;
        None
    })
    .await;
    let lane = lane(&server);
    let err = fault_then_good(
        &lane,
        job_within("hang", Duration::from_millis(300)),
        "deadline_before_headers",
    )
    .await;
    assert!(err.is_deadline() && !err.is_retryable());
}

#[tokio::test]
async fn deadline_before_first_token() {
    let server = faulty(|mut conn, _req| async move {
        let _ = conn.sse_head().await;
        let _ = conn
            .event(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#)
            .await;
        conn.wait_closed().await;
        None
    })
    .await;
    let err = fault_then_good(
        &lane(&server),
        job_within("hang", Duration::from_millis(1500)),
        "deadline_before_first_token",
    )
    .await;
    assert_eq!(err.http_status(), Some(200));
}

#[tokio::test]
async fn deadline_mid_stream_returns_the_partial_text() {
    let server = faulty(|mut conn, _req| async move {
        let _ = conn.sse_head().await;
        let _ = conn.event(&chunk_with_content("Hel")).await;
        conn.wait_closed().await;
        None
    })
    .await;
    let lane = lane(&server);
    let done = lane
        .run(job_within("hang", Duration::from_millis(1500)))
        .await
        .expect("a deadline after the first token is not an error");
    assert_eq!(done.text, "Hel");
    assert_eq!(done.finish_reason, FinishReason::Deadline);
    assert!(done.provider_finish_reason.is_none());
    assert_eq!(lane.run(job("good")).await.unwrap().text, GOOD_TEXT);
}

#[tokio::test]
async fn a_server_dripping_keepalives_forever_is_stopped_by_the_deadline() {
    let server = faulty(|mut conn, _req| async move {
        let _ = conn.sse_head().await;
        // Pacing, not synchronisation: a byte every few milliseconds keeps
        // the stall timer from ever firing.
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        loop {
            tick.tick().await;
            if conn.chunk(b":").await.is_err() || conn.chunk(b"\n").await.is_err() {
                return None;
            }
        }
    })
    .await;
    fault_then_good(
        &lane(&server),
        job_within("drip", Duration::from_millis(500)),
        "deadline_before_first_token",
    )
    .await;
}

#[tokio::test]
async fn a_server_that_never_pauses_cannot_outrun_the_deadline() {
    // Comments, then content, as fast as the socket takes them: reads are
    // always ready, so only an explicit deadline check can stop the loop.
    let server = faulty(|mut conn, req| async move {
        conn.sse_head().await.ok()?;
        let payload = if req.prompt() == "comments" {
            b": flood\n".repeat(512)
        } else {
            format!("data: {}\n\n", chunk_with_content("x"))
                .repeat(64)
                .into_bytes()
        };
        loop {
            conn.chunk(&payload).await.ok()?;
        }
    })
    .await;
    let lane = lane_with(&server, |c| {
        c.limits.max_body_bytes = usize::MAX;
        c.limits.max_content_bytes = usize::MAX;
    });
    fault_then_good(
        &lane,
        job_within("comments", Duration::from_millis(400)),
        "deadline_before_first_token",
    )
    .await;
    let done = lane
        .run(job_within("content", Duration::from_millis(400)))
        .await
        .unwrap();
    assert_eq!(done.finish_reason, FinishReason::Deadline);
    assert!(!done.text.is_empty() && done.text.bytes().all(|b| b == b'x'));
}

#[tokio::test]
async fn slow_loris_after_headers_is_stalled() {
    let server = faulty(|mut conn, _req| async move {
        let _ = conn.sse_head().await;
        conn.wait_closed().await;
        None
    })
    .await;
    let lane = lane_with(&server, |c| c.stall_timeout = Duration::from_millis(200));
    let err = fault_then_good(&lane, job("loris"), "stalled").await;
    assert!(
        matches!(err, CloudError::Stalled { waited, .. } if waited == Duration::from_millis(200))
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn stall_mid_stream_keeps_the_partial_text() {
    let server = faulty(|mut conn, _req| async move {
        let _ = conn.sse_head().await;
        let _ = conn.event(&chunk_with_content("Hel")).await;
        conn.wait_closed().await;
        None
    })
    .await;
    let lane = lane_with(&server, |c| c.stall_timeout = Duration::from_millis(200));
    let err = fault_then_good(&lane, job("loris"), "stalled").await;
    assert_eq!(err.partial_text(), Some("Hel"));
}

/// Reports when the server has read a request and when the client has
/// closed the connection.
struct Watch {
    got_request: oneshot::Receiver<()>,
    closed: oneshot::Receiver<()>,
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

#[tokio::test]
async fn cancel_before_headers_drops_the_connection() {
    let (server, watch) = watched_server(false).await;
    let lane = lane(&server);
    let cancel = CancellationToken::new();
    let j = job("watched").with_cancel(cancel.clone());
    let running = tokio::spawn({
        let lane = lane.clone();
        async move { lane.run(j).await }
    });
    within("request reached the server", watch.got_request)
        .await
        .unwrap();
    cancel.cancel();
    let err = within("run returned", running).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), "cancelled");
    within("server saw the connection close", watch.closed)
        .await
        .unwrap();
    assert_eq!(lane.run(job("good")).await.unwrap().text, GOOD_TEXT);
}

#[tokio::test]
async fn cancel_mid_stream_returns_partial_text_and_closes_the_connection() {
    let (server, watch) = watched_server(true).await;
    let lane = lane(&server);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    // The sink cancels on the first token: deterministic "mid-stream".
    let j = job("watched")
        .with_cancel(cancel)
        .with_sink(move |_| c.cancel());
    let done = within("run returned", lane.run(j)).await.unwrap();
    assert_eq!(done.text, "Hel");
    assert_eq!(done.finish_reason, FinishReason::Cancelled);
    within("server saw the connection close", watch.closed)
        .await
        .unwrap();
    drop(watch.got_request);
    assert_eq!(lane.run(job("good")).await.unwrap().text, GOOD_TEXT);
}

#[tokio::test]
async fn already_expired_or_cancelled_jobs_never_connect() {
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    let lane = lane(&server);
    let expired = LaneJob::new(
        vec![ChatMessage::user("hi")],
        Sampling::default(),
        Instant::now() - Duration::from_millis(1),
    );
    assert_eq!(
        lane.run(expired).await.unwrap_err().kind(),
        "deadline_before_headers"
    );
    let cancel = CancellationToken::new();
    cancel.cancel();
    assert_eq!(
        lane.run(job("hi").with_cancel(cancel))
            .await
            .unwrap_err()
            .kind(),
        "cancelled"
    );
    assert_eq!(server.accepted(), 0);
}

// ---------------------------------------------------------------------------
// HTTP status faults
// ---------------------------------------------------------------------------

#[tokio::test]
async fn error_statuses_map_to_distinct_variants() {
    let server = faulty(|mut conn, req| async move {
        let prompt = req.prompt();
        let (status, extra): (u16, Vec<(&str, String)>) = match prompt.as_str() {
            "401" => (401, vec![]),
            "403" => (403, vec![]),
            "404" => (404, vec![]),
            "429s" => (429, vec![("retry-after", "7".into())]),
            "429d" => (
                429,
                vec![("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT".into())],
            ),
            "429ms" => (429, vec![("retry-after-ms", "250".into())]),
            "500" => (500, vec![]),
            "502" => (502, vec![]),
            "503" => (503, vec![]),
            _ => (400, vec![]),
        };
        let body = format!(r#"{{"error":{{"message":"scripted {prompt}","type":"test"}}}}"#);
        let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        headers.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
        conn.respond(status, &headers, body.as_bytes()).await.ok()?;
        Some(conn)
    })
    .await;
    let lane = lane(&server);
    for (prompt, kind, status) in [
        ("401", "auth", 401),
        ("403", "auth", 403),
        ("404", "not_found", 404),
        ("429s", "rate_limited", 429),
        ("429d", "rate_limited", 429),
        ("429ms", "rate_limited", 429),
        ("500", "server_error", 500),
        ("502", "server_error", 502),
        ("503", "server_error", 503),
        ("400", "http_status", 400),
    ] {
        let err = fault_then_good(&lane, job(prompt), kind).await;
        assert_eq!(err.http_status(), Some(status), "{prompt}");
        assert!(
            err.to_string().contains(&format!("scripted {prompt}")),
            "{err}"
        );
        match prompt {
            "429s" => assert_eq!(err.retry_after(), Some(Duration::from_secs(7))),
            "429d" => assert_eq!(
                err.retry_after(),
                Some(Duration::ZERO),
                "a past date means now"
            ),
            "429ms" => assert_eq!(err.retry_after(), Some(Duration::from_millis(250))),
            _ => assert_eq!(err.retry_after(), None),
        }
        assert_eq!(
            err.is_retryable(),
            status == 429 || status >= 500,
            "{prompt}"
        );
    }
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let server = faulty(|mut conn, _req| async move {
        let location = "http://127.0.0.1:9/v1/chat/completions";
        conn.respond(302, &[("location", location)], b"")
            .await
            .ok()?;
        Some(conn)
    })
    .await;
    let lane = lane(&server);
    let err = fault_then_good(&lane, job("redirect"), "redirect").await;
    assert_eq!(err.http_status(), Some(302));
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/chat/completions", "/v1/chat/completions"]);
}

// ---------------------------------------------------------------------------
// Body faults
// ---------------------------------------------------------------------------

/// Serves `bytes` after an SSE head (chunked) or as a JSON body, then keeps
/// the connection for the next request when `keep` is set.
async fn serving(stream_body: Option<Vec<u8>>, json_body: Option<Vec<u8>>) -> TestServer {
    faulty(move |mut conn, _req| {
        let (s, j) = (stream_body.clone(), json_body.clone());
        async move {
            if let Some(s) = s {
                conn.sse_head().await.ok()?;
                conn.chunk(&s).await.ok()?;
                conn.end_chunks().await.ok()?;
            } else if let Some(j) = j {
                conn.respond(200, &[("content-type", "application/json")], &j)
                    .await
                    .ok()?;
            }
            Some(conn)
        }
    })
    .await
}

#[tokio::test]
async fn malformed_json_in_a_200() {
    let server = serving(None, Some(b"{\"choices\": [".to_vec())).await;
    fault_then_good(
        &lane_with(&server, |c| c.stream = false),
        job("bad"),
        "malformed_json",
    )
    .await;
    let server = serving(
        Some(b"data: {\"choices\": nope}\n\ndata: [DONE]\n\n".to_vec()),
        None,
    )
    .await;
    fault_then_good(&lane(&server), job("bad"), "malformed_json").await;
    // An HTML page where a stream was expected (a proxy, a web UI).
    let server = faulty(|mut conn, _req| async move {
        conn.respond(
            200,
            &[("content-type", "text/html")],
            b"<html><body>Login</body></html>",
        )
        .await
        .ok()?;
        Some(conn)
    })
    .await;
    fault_then_good(&lane(&server), job("bad"), "malformed_json").await;
    // Valid JSON of the wrong shape is malformed too.
    let server = serving(None, Some(br#"{"choices": "many"}"#.to_vec())).await;
    fault_then_good(
        &lane_with(&server, |c| c.stream = false),
        job("bad"),
        "malformed_json",
    )
    .await;
}

#[tokio::test]
async fn error_object_inside_a_200() {
    let body =
        br#"{"error":{"message":"model is overloaded","type":"server_error","code":"overloaded"}}"#;
    let server = serving(None, Some(body.to_vec())).await;
    let err = fault_then_good(
        &lane_with(&server, |c| c.stream = false),
        job("bad"),
        "provider_error",
    )
    .await;
    assert!(
        matches!(&err, CloudError::Provider { message, code } if message == "model is overloaded" && code.as_deref() == Some("overloaded"))
    );
    // Mid-stream, as vLLM and llama-server send it.
    let stream = format!(
        "data: {}\n\ndata: {{\"error\":{{\"message\":\"out of memory\",\"code\":500}}}}\n\n",
        chunk_with_content("Hel")
    );
    let server = serving(Some(stream.into_bytes()), None).await;
    let err = fault_then_good(&lane(&server), job("bad"), "provider_error").await;
    assert!(err.to_string().contains("out of memory"));
    // vLLM's older top-level shape, mid-stream.
    let stream = format!(
        "data: {}\n\ndata: {{\"object\":\"error\",\"message\":\"context too long\",\"code\":400}}\n\n",
        chunk_with_content("Hel")
    );
    let server = serving(Some(stream.into_bytes()), None).await;
    let err = fault_then_good(&lane(&server), job("bad"), "provider_error").await;
    assert!(err.to_string().contains("context too long"));
    // As a named SSE event.
    let server = serving(
        Some(b"event: error\ndata: upstream gone\n\n".to_vec()),
        None,
    )
    .await;
    let err = fault_then_good(&lane(&server), job("bad"), "provider_error").await;
    assert!(err.to_string().contains("upstream gone"));
}

#[tokio::test]
async fn a_stream_cut_before_done_is_truncated_with_the_partial_text() {
    // Cut inside a chunked body: the transport notices.
    let server = faulty(|mut conn, _req| async move {
        let _ = conn.sse_head().await;
        let _ = conn.event(&chunk_with_content("Hel")).await;
        let _ = conn.write(b"40\r\ndata: {\"cho").await;
        None
    })
    .await;
    let err = fault_then_good(&lane(&server), job("cut"), "truncated").await;
    assert_eq!(err.partial_text(), Some("Hel"));
    assert!(matches!(
        err,
        CloudError::Truncated {
            detail: Some(_),
            ..
        }
    ));
    // A clean close of a close-delimited body, without [DONE].
    let server = faulty(|mut conn, _req| async move {
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let body = format!("data: {}\n\n", chunk_with_content("Hel"));
        let _ = conn.write(format!("{head}{body}").as_bytes()).await;
        None
    })
    .await;
    let err = fault_then_good(&lane(&server), job("cut"), "truncated").await;
    assert_eq!(err.partial_text(), Some("Hel"));
    assert!(matches!(err, CloudError::Truncated { detail: None, .. }));
}

#[tokio::test]
async fn invalid_utf8() {
    let mut stream = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec();
    stream.extend(b"\xFF\xFE\"}}]}\n\n");
    let server = serving(Some(stream), None).await;
    fault_then_good(&lane(&server), job("bad"), "invalid_utf8").await;
    let mut whole = br#"{"choices":[{"index":0,"message":{"content":""#.to_vec();
    whole.extend(b"\xC3\x28\"}}]}");
    let server = serving(None, Some(whole)).await;
    fault_then_good(
        &lane_with(&server, |c| c.stream = false),
        job("bad"),
        "invalid_utf8",
    )
    .await;
}

#[tokio::test]
async fn empty_choices() {
    let server = serving(
        None,
        Some(br#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0}}"#.to_vec()),
    )
    .await;
    fault_then_good(
        &lane_with(&server, |c| c.stream = false),
        job("bad"),
        "empty_choices",
    )
    .await;
    let stream = b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":0}}\n\ndata: [DONE]\n\n";
    let server = serving(Some(stream.to_vec()), None).await;
    fault_then_good(&lane(&server), job("bad"), "empty_choices").await;
}

#[tokio::test]
async fn body_over_the_cap() {
    let big = Flavor::OpenAi
        .whole_body(&"x".repeat(10_000), "stop", None)
        .into_bytes();
    // With a Content-Length the lane refuses before reading.
    let server = serving(None, Some(big.clone())).await;
    let lane_small = |s: &TestServer, stream: bool| {
        lane_with(s, |c| {
            c.stream = stream;
            c.limits.max_body_bytes = 4096;
        })
    };
    let err = fault_then_good(&lane_small(&server, false), job("big"), "body_too_large").await;
    assert!(matches!(err, CloudError::BodyTooLarge { limit: 4096 }));
    // Without one (chunked), it stops reading at the cap.
    let server = faulty(move |mut conn, _req| {
        let big = big.clone();
        async move {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
            conn.write(head.as_bytes()).await.ok()?;
            for part in big.chunks(1000) {
                conn.chunk(part).await.ok()?;
            }
            conn.end_chunks().await.ok()?;
            Some(conn)
        }
    })
    .await;
    fault_then_good(&lane_small(&server, false), job("big"), "body_too_large").await;
    // A stream of comments that never ends.
    let server = faulty(|mut conn, _req| async move {
        conn.sse_head().await.ok()?;
        let comment = vec![b':'; 999];
        loop {
            let mut c = comment.clone();
            c.push(b'\n');
            conn.chunk(&c).await.ok()?;
        }
    })
    .await;
    fault_then_good(&lane_small(&server, true), job("big"), "body_too_large").await;
}

#[tokio::test]
async fn streamed_text_over_the_cap() {
    let events: String = (0..5)
        .map(|_| format!("data: {}\n\n", chunk_with_content("0123456789")))
        .collect();
    let server = serving(Some(format!("{events}data: [DONE]\n\n").into_bytes()), None).await;
    let lane = lane_with(&server, |c| c.limits.max_content_bytes = 25);
    let err = fault_then_good(&lane, job("big"), "content_too_large").await;
    assert!(matches!(err, CloudError::ContentTooLarge { limit: 25 }));
}

#[tokio::test]
async fn an_sse_line_over_the_cap() {
    let server = faulty(|mut conn, _req| async move {
        conn.sse_head().await.ok()?;
        conn.chunk(b"data: ").await.ok()?;
        loop {
            conn.chunk(&[b'x'; 512]).await.ok()?;
        }
    })
    .await;
    let lane = lane_with(&server, |c| c.limits.max_line_bytes = 2048);
    let err = fault_then_good(&lane, job("long"), "line_too_long").await;
    assert!(matches!(err, CloudError::LineTooLong { limit: 2048 }));
}

#[tokio::test]
async fn headers_over_the_cap() {
    // 70 KiB in one header (our cap, 64 KiB by default); 150 small headers
    // and 500 KiB of headers (the HTTP stack's own ceilings).
    for (count, size) in [(1, 70 << 10), (150, 10), (1, 500 << 10)] {
        let server = faulty(move |mut conn, _req| async move {
            let mut head = String::from("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n");
            for i in 0..count {
                head.push_str(&format!("x-pad-{i}: {}\r\n", "a".repeat(size)));
            }
            head.push_str("content-length: 2\r\n\r\n{}");
            conn.write(head.as_bytes()).await.ok()?;
            None
        })
        .await;
        fault_then_good(&lane(&server), job("fat"), "headers_too_large").await;
    }
}

// ---------------------------------------------------------------------------
// Sink, permit, validation
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_panicking_sink_is_contained() {
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    let lane = lane(&server);
    let err = lane
        .run(job("hi").with_sink(|_| panic!("sink blew up (expected by the test)")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "sink_panicked");
    assert_eq!(lane.run(job("good")).await.unwrap().text, GOOD_TEXT);
}

/// Sets its flag when dropped.
struct Permit(Arc<AtomicBool>);
impl Drop for Permit {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn the_permit_is_released_on_every_path() {
    let server = faulty(|mut conn, req| async move {
        match req.prompt().as_str() {
            "401" => {
                conn.json(401, "{}").await.ok()?;
                Some(conn)
            }
            _ => {
                conn.wait_closed().await;
                None
            }
        }
    })
    .await;
    let lane = lane(&server);
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let cases: Vec<(&str, LaneJob)> = vec![
        ("ok", job("good")),
        ("401", job("401")),
        ("deadline", job_within("hang", Duration::from_millis(200))),
        ("cancelled", job("hang").with_cancel(cancelled)),
        (
            "invalid",
            LaneJob::new(vec![], Sampling::default(), Instant::now()),
        ),
    ];
    for (what, j) in cases {
        let flag = Arc::new(AtomicBool::new(false));
        let result = lane.run(j.with_permit(Permit(Arc::clone(&flag)))).await;
        assert!(
            flag.load(Ordering::SeqCst),
            "{what}: permit released before the result"
        );
        assert_eq!(result.is_ok(), what == "ok", "{what}");
    }
}

#[tokio::test]
async fn bad_settings_and_requests_are_typed_errors() {
    for base in ["", "127.0.0.1:8080/v1", "ftp://h/v1", "http://u:p@h/v1"] {
        let err = CloudLane::new(config(base)).unwrap_err();
        assert_eq!(err.kind(), "invalid_config", "{base:?}");
    }
    assert_eq!(
        CloudLane::new(CloudConfig::new("http://h/v1", ""))
            .unwrap_err()
            .kind(),
        "invalid_config"
    );
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    let lane = lane(&server);
    let empty = LaneJob::new(
        vec![],
        Sampling::default(),
        Instant::now() + Duration::from_secs(5),
    );
    assert_eq!(lane.run(empty).await.unwrap_err().kind(), "invalid_request");
    let bad = LaneJob::new(
        vec![ChatMessage::user("hi")],
        Sampling {
            top_p: 0.0,
            ..Sampling::default()
        },
        Instant::now() + Duration::from_secs(5),
    );
    assert_eq!(lane.run(bad).await.unwrap_err().kind(), "invalid_request");
    assert_eq!(server.accepted(), 0);
}

#[tokio::test]
async fn generation_rate_comes_from_provider_tokens() {
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    let done: CloudCompletion = lane(&server).run(job("hi")).await.unwrap();
    let t = done.timings;
    let span = t.last_token.unwrap() - t.ttft.unwrap();
    match done.gen_tokens_per_s() {
        Some(rate) => assert!((rate - 2.0 / span.as_secs_f64()).abs() < 1e-6),
        None => assert!(span.is_zero(), "only a zero span has no rate"),
    }
}

// ---------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn chain_of(err: &CloudError) -> String {
    let mut out = format!("{err}\n{err:?}\n");
    let mut cur: Option<&dyn std::error::Error> = std::error::Error::source(err);
    while let Some(e) = cur {
        out.push_str(&format!("{e}\n{e:?}\n"));
        cur = e.source();
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn the_key_never_leaks_into_errors_debug_or_logs() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // A hostile server that echoes the Authorization header everywhere it can.
    let server = faulty(|mut conn, req| async move {
        let auth = req.header("authorization").unwrap_or_default().to_owned();
        let echo = serde_json::to_string(&auth).unwrap();
        match req.prompt().as_str() {
            "401" => conn
                .json(401, &format!(r#"{{"error":{{"message":"Incorrect API key provided: {auth}","code":{echo}}}}}"#))
                .await
                .ok()?,
            "500" => conn
                .respond(500, &[("content-type", "text/plain")], auth.as_bytes())
                .await
                .ok()?,
            "malformed" => conn
                .json(200, &format!(r#"{{"choices": {echo}}}"#))
                .await
                .ok()?,
            "provider" => conn
                .json(200, &format!(r#"{{"error":{{"message":{echo},"type":{echo}}}}}"#))
                .await
                .ok()?,
            _ => {
                conn.sse_head().await.ok()?;
                conn.event(&format!(r#"{{"choices": [{{"index": "{auth}"}}]}}"#)).await.ok()?;
                conn.end_chunks().await.ok()?;
            }
        }
        Some(conn)
    })
    .await;
    let mut cfg = config(&server.base_url());
    cfg.stream = false;
    let mut seen = format!("{cfg:?}\n");
    let lane = CloudLane::new(cfg).unwrap();
    seen.push_str(&format!("{lane:?}\n{:?}\n", lane.config()));

    for prompt in ["401", "500", "malformed", "provider"] {
        let err = lane.run(job(prompt)).await.unwrap_err();
        seen.push_str(&chain_of(&err));
    }
    let streaming = CloudLane::new(config(&server.base_url())).unwrap();
    let err = streaming.run(job("stream")).await.unwrap_err();
    assert_eq!(err.kind(), "malformed_json");
    seen.push_str(&chain_of(&err));

    // Transport failures.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    for base in [refused.as_str(), "http://edgecloud-test.invalid/v1"] {
        let err = CloudLane::new(config(base))
            .unwrap()
            .run(job("hi"))
            .await
            .unwrap_err();
        seen.push_str(&chain_of(&err));
    }
    // A key given in the environment instead.
    std::env::set_var("EDGECLOUD_TEST_SECRET_KEY_VAR", KEY);
    let mut from_env = CloudConfig::new(server.base_url(), "m");
    from_env.api_key_env = "EDGECLOUD_TEST_SECRET_KEY_VAR".into();
    let env_lane = CloudLane::new(from_env.clone()).unwrap();
    seen.push_str(&format!("{from_env:?}\n{env_lane:?}\n"));
    seen.push_str(&chain_of(&env_lane.run(job("401")).await.unwrap_err()));

    // The key really was sent, and really was echoed...
    assert!(server
        .requests()
        .iter()
        .all(|r| r.header("authorization") == Some(format!("Bearer {KEY}").as_str())));
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("cloud request failed"),
        "tracing was captured"
    );
    assert!(seen.contains("***"), "echoes were scrubbed, not lost");
    // ...yet it appears nowhere we print.
    assert!(
        !seen.contains(KEY),
        "key leaked into errors or Debug:\n{seen}"
    );
    assert!(
        !logs.contains(KEY),
        "key leaked into tracing output:\n{logs}"
    );
}

// ---------------------------------------------------------------------------
// The `edgecloud cloud` command
// ---------------------------------------------------------------------------

mod cli {
    use super::*;
    use crate::support::cli::{bin, json_of};
    use std::process::{Command, Output, Stdio};

    const KEY_VAR: &str = "EDGECLOUD_CLI_TEST_KEY";

    fn edgecloud(base_url: &str, extra: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args([
            "cloud",
            "--base-url",
            base_url,
            "--model",
            "test-model",
            "--prompt",
            "hi",
        ])
        .args(["--api-key-env", KEY_VAR])
        .args(extra)
        .env(KEY_VAR, KEY)
        .env("EDGECLOUD_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        cmd
    }

    /// Runs the binary off the runtime thread so the server keeps serving.
    async fn output(mut cmd: Command) -> Output {
        tokio::task::spawn_blocking(move || cmd.output().expect("run edgecloud"))
            .await
            .unwrap()
    }

    fn no_key(out: &Output) {
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains(KEY), "the key leaked into CLI output:\n{all}");
    }

    #[tokio::test]
    async fn json_report_of_a_completed_request() {
        let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
        let out = output(edgecloud(
            &server.base_url(),
            &["--json", "--system", "be brief"],
        ))
        .await;
        no_key(&out);
        assert_eq!(out.status.code(), Some(0));
        let v = json_of(&out);
        assert_eq!(v["lane"], "cloud");
        assert_eq!(v["status"], "completed");
        assert_eq!(v["text"], GOOD_TEXT);
        assert_eq!(v["finish_reason"], "stop");
        assert_eq!(v["prompt_tokens"], 9);
        assert_eq!(v["completion_tokens"], 3);
        assert_eq!(v["http_status"], 200);
        assert!(v["error"].is_null());
        for field in ["connect_ms", "ttfb_ms", "ttft_ms", "total_ms"] {
            assert!(v[field].as_f64().is_some(), "{field} is a number: {v}");
        }
        assert!(v.get("gen_tokens_per_s").is_some());
        let req = &server.requests()[0];
        assert_eq!(
            req.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(req.json()["messages"][0]["content"], "be brief");
        assert_eq!(req.json()["stream"], true);
    }

    #[tokio::test]
    async fn text_mode_streams_the_answer_then_the_breakdown() {
        let server = TestServer::openai(Flavor::LlamaServer, GOOD).await;
        let out = output(edgecloud(
            &server.base_url(),
            &["--no-stream", "--max-tokens", "7"],
        ))
        .await;
        no_key(&out);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), GOOD_TEXT);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("completed") && err.contains("ttft"), "{err}");
        let body = server.requests()[0].json();
        assert_eq!(body["stream"], false);
        assert_eq!(body["max_tokens"], 7);
    }

    #[tokio::test]
    async fn failure_is_reported_with_its_kind_and_exit_code() {
        let server = faulty(|mut conn, req| async move {
            let auth = req.header("authorization").unwrap_or_default().to_owned();
            conn.json(
                401,
                &format!(r#"{{"error":{{"message":"bad key {auth}"}}}}"#),
            )
            .await
            .ok()?;
            Some(conn)
        })
        .await;
        let out = output(edgecloud(&server.base_url(), &["--json"])).await;
        no_key(&out);
        assert_eq!(out.status.code(), Some(1));
        let v = json_of(&out);
        assert_eq!(v["status"], "failed");
        assert_eq!(v["error"]["kind"], "auth");
        assert!(v["error"]["message"].as_str().unwrap().contains("HTTP 401"));
        assert_eq!(v["http_status"], 401);
        // And without --json, on stderr.
        let out = output(edgecloud(&server.base_url(), &[])).await;
        no_key(&out);
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("auth"));
    }

    #[tokio::test]
    async fn deadline_exceeded_status() {
        let server = faulty(|mut conn, _req| async move {
            conn.wait_closed().await;
            None
        })
        .await;
        let out = output(edgecloud(
            &server.base_url(),
            &["--json", "--deadline-ms", "300"],
        ))
        .await;
        no_key(&out);
        let v = json_of(&out);
        assert_eq!(v["status"], "deadline_exceeded");
        assert!(v["error"].is_null());
        assert_eq!(out.status.code(), Some(124));
    }

    #[tokio::test]
    async fn connection_refused_and_bad_url_fail_cleanly() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        drop(listener);
        let out = output(edgecloud(&base, &["--json"])).await;
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(json_of(&out)["error"]["kind"], "connect_refused");
        let out = output(edgecloud("ftp://nowhere/v1", &["--json"])).await;
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(json_of(&out)["error"]["kind"], "invalid_config");
    }

    #[tokio::test]
    async fn ctrl_c_cancels() {
        let (server, watch) = watched_server(false).await;
        let mut cmd = Command::new(bin());
        cmd.args(["cloud", "--base-url", &server.base_url(), "--model", "m"])
            .args(["--prompt", "watched", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().unwrap();
        let pid = child.id().to_string();
        within("request reached the server", watch.got_request)
            .await
            .unwrap();
        let killed = Command::new("kill").args(["-INT", &pid]).status().unwrap();
        assert!(killed.success());
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        let v = json_of(&out);
        assert_eq!(v["status"], "cancelled");
        assert!(v["error"].is_null());
        assert_eq!(out.status.code(), Some(130));
        within("server saw the connection close", watch.closed)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn the_key_is_never_a_command_line_argument() {
        let out = Command::new(bin())
            .args([
                "cloud",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
            ])
            .args(["--prompt", "hi", "--api-key", KEY])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "clap refuses the flag");
        no_key(&out);
        // A key passed where the variable's name belongs is refused unechoed.
        let out = Command::new(bin())
            .args([
                "cloud",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
            ])
            .args(["--prompt", "hi", "--api-key-env", KEY, "--json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        no_key(&out);
        assert_eq!(json_of(&out)["error"]["kind"], "invalid_config");
    }
}
