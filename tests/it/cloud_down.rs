//! Integration tests: a cloud lane that knows it is offline. Real cloud
//! lanes against loopback ports that refuse (nothing listens), accept and
//! never answer, answer 429 with `Retry-After`, and then recover (a real
//! server bound on the same port); the local lane is a scripted backend
//! that answers at once (a labelled fake: these tests are about the cloud).

use crate::support::http::{Flavor, TestServer};
use crate::support::scripted::{Auto, AutoEnd, Recorder, Scripted, HANG};
use edgecloud::cloud::CloudConfig;
use edgecloud::harness::{
    CloudBackend, Event, Harness, LaneStatus, Policy, PolicyKind, RunOptions, RunStatus,
};
use edgecloud::serve::{ServeConfig, ServeMetrics, Server};
use edgecloud::{Lane, Request};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// A port nothing listens on: bound, then released.
async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

fn cloud(base_url: &str, tweak: impl FnOnce(&mut CloudConfig)) -> CloudBackend {
    let mut cfg = CloudConfig::new(base_url, "m");
    cfg.api_key_env = "EDGECLOUD_TEST_NO_KEY_HERE".into();
    cfg.cooldown_jitter = 0.0;
    tweak(&mut cfg);
    CloudBackend::start(cfg).unwrap()
}

/// A local lane that answers at once (or fails at once).
fn local(answer: bool) -> Scripted {
    Scripted::auto("local", move |_| Auto {
        delay: Duration::ZERO,
        tokens: 0,
        end: if answer {
            AutoEnd::Complete("local answer".into())
        } else {
            AutoEnd::Fail
        },
        honour_cancel: true,
    })
}

fn harness(local_lane: Scripted, cloud_lane: CloudBackend, deadline: Duration) -> Harness {
    harness_seen(local_lane, cloud_lane, deadline, Recorder::new())
}

fn harness_seen(
    local_lane: Scripted,
    cloud_lane: CloudBackend,
    deadline: Duration,
    rec: Recorder,
) -> Harness {
    Harness::builder()
        .local(local_lane)
        .cloud(cloud_lane)
        .policy(Policy::from_kind(PolicyKind::Fallback))
        .deadline(deadline)
        .observer(rec)
        .build()
        .unwrap()
}

async fn run_with(h: &Harness, kind: PolicyKind) -> edgecloud::harness::Outcome {
    h.start(
        Request::user("hi"),
        RunOptions::new().policy(Policy::from_kind(kind)),
    )
    .unwrap()
    .outcome()
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_that_never_answers_is_left_out_after_three_failures() {
    // Accepts, reads the request, and never answers: every cloud job
    // spends its deadline waiting for headers, until the lane is down.
    let server = TestServer::start(|mut conn| async move {
        let _ = conn.read_request().await;
        conn.wait_closed().await;
    })
    .await;
    let rec = Recorder::new();
    let h = harness_seen(
        local(true),
        cloud(&server.base_url(), |c| {
            c.cooldown = Duration::from_secs(600);
            c.max_cooldown = c.cooldown;
        }),
        Duration::from_millis(300),
        rec.clone(),
    );
    for i in 0..3 {
        let out = run_with(&h, PolicyKind::CloudOnly).await;
        assert_eq!(out.status, RunStatus::DeadlineExceeded, "run {i}: {out:#?}");
        if out.late_workers > 0 {
            // The next run must find the lane free, not busy.
            let run_id = out.run_id;
            tokio::task::block_in_place(|| {
                rec.wait_for(
                    |e| matches!(e, Event::LateWorkerFinished { run_id: r, .. } if *r == run_id),
                )
            });
        }
    }
    assert_eq!(server.accepted(), 3);
    let health = h
        .lane_health(Lane::Cloud)
        .expect("the cloud lane tracks it");
    assert!(health.down && !health.probing, "{health:?}");
    assert_eq!(health.went_down, 1);

    // Every policy now leaves the cloud out at once and answers locally
    // where it can; nothing reaches the server.
    for kind in [
        PolicyKind::Fallback,
        PolicyKind::Race,
        PolicyKind::BestOf,
        PolicyKind::CloudOnly,
    ] {
        let out = run_with(&h, kind).await;
        let c = out.lane(Lane::Cloud);
        assert_eq!(c.status, LaneStatus::Unavailable, "{kind}: {out:#?}");
        assert!(c.started_ms.is_none(), "{kind}: the cloud never started");
        assert!(c.retry_in_ms.is_some_and(|ms| ms > 0.0), "{c:?}");
        assert!(
            c.note
                .as_deref()
                .is_some_and(|n| n.contains("next probe in")),
            "{c:?}"
        );
        if kind == PolicyKind::CloudOnly {
            assert_eq!(out.status, RunStatus::Failed, "{out:#?}");
        } else {
            assert_eq!(out.status, RunStatus::Ok, "{kind}: {out:#?}");
            assert_eq!(out.winner, Some(Lane::Local));
        }
    }
    assert_eq!(server.accepted(), 3, "a down lane sends nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascade_escalates_to_nothing_when_the_cloud_is_down() {
    let port = closed_port().await;
    let h = harness(
        local(false),
        cloud(&format!("http://{port}/v1"), |c| {
            c.cooldown = Duration::from_secs(600);
            c.max_cooldown = c.cooldown;
        }),
        Duration::from_secs(30),
    );
    for _ in 0..3 {
        let out = run_with(&h, PolicyKind::Cascade).await;
        let c = out.lane(Lane::Cloud);
        assert_eq!(c.status, LaneStatus::Failed, "{out:#?}");
        let e = c.error.as_ref().unwrap();
        assert!(edgecloud::error_chain(e).contains("refused"), "{c:?}");
    }
    let out = run_with(&h, PolicyKind::Cascade).await;
    assert_eq!(out.lane(Lane::Local).status, LaneStatus::Failed);
    let c = out.lane(Lane::Cloud);
    assert_eq!(c.status, LaneStatus::Unavailable, "{out:#?}");
    assert!(c.note.as_deref().unwrap().contains("refused"), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_after_the_cooldown_finds_the_server_back() {
    let port = closed_port().await;
    let h = harness(
        local(true),
        cloud(&format!("http://{port}/v1"), |c| {
            c.down_after_failures = 2;
            c.cooldown = Duration::from_millis(50);
        }),
        Duration::from_secs(30),
    );
    for _ in 0..2 {
        let out = run_with(&h, PolicyKind::Fallback).await;
        assert_eq!(out.lane(Lane::Cloud).status, LaneStatus::Failed);
        assert_eq!(out.winner, Some(Lane::Local));
    }
    let down = run_with(&h, PolicyKind::Fallback).await;
    assert_eq!(down.lane(Lane::Cloud).status, LaneStatus::Unavailable);

    // The server comes back on the same port.
    let listener = TcpListener::bind(port).await.expect("rebind the port");
    let server = TestServer::on_listener(listener, |mut conn| async move {
        while let Some(req) = conn.read_request().await {
            if conn.answer(Flavor::OpenAi, &req, &["back"]).await.is_err() {
                return;
            }
        }
    });
    // Wait for the clock, not for another thread: the cooldown must pass.
    let until = Instant::now() + HANG;
    while h
        .lane_health(Lane::Cloud)
        .unwrap()
        .retry_in_ms
        .is_some_and(|ms| ms > 0.0)
    {
        assert!(Instant::now() < until, "the cooldown never ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let out = run_with(&h, PolicyKind::Fallback).await;
    assert_eq!(out.winner, Some(Lane::Cloud), "{out:#?}");
    assert_eq!(out.text.as_deref(), Some("back"));
    let health = h.lane_health(Lane::Cloud).unwrap();
    assert!(!health.down, "{health:?}");
    assert_eq!((health.went_down, health.recovered), (1, 1));
    assert_eq!(server.requests().len(), 1);
    // And it stays up.
    let again = run_with(&h, PolicyKind::Fallback).await;
    assert_eq!(again.winner, Some(Lane::Cloud));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_retry_after_puts_the_lane_down_at_once() {
    let server = TestServer::start(|mut conn| async move {
        while let Some(_req) = conn.read_request().await {
            let body = r#"{"error": {"message": "slow down", "type": "rate_limit"}}"#;
            let head = format!(
                "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n\
                 retry-after: 30\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if conn.write(head.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await;
    let h = harness(local(true), cloud(&server.base_url(), |_| {}), HANG);
    let first = run_with(&h, PolicyKind::Fallback).await;
    assert_eq!(first.lane(Lane::Cloud).status, LaneStatus::Failed);
    assert_eq!(first.winner, Some(Lane::Local));
    let out = run_with(&h, PolicyKind::Fallback).await;
    let c = out.lane(Lane::Cloud);
    assert_eq!(c.status, LaneStatus::Unavailable, "{out:#?}");
    let left = c.retry_in_ms.unwrap();
    assert!(left > 20_000.0 && left <= 30_000.0, "{left}");
    assert!(c.note.as_deref().unwrap().contains("429"), "{c:?}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_shows_the_down_lane_in_health_and_metrics() {
    let port = closed_port().await;
    let metrics = ServeMetrics::new();
    let h = Harness::builder()
        .local(local(true))
        .cloud(cloud(&format!("http://{port}/v1"), |c| {
            c.down_after_failures = 1;
            c.cooldown = Duration::from_secs(600);
            c.max_cooldown = c.cooldown;
        }))
        .policy(Policy::from_kind(PolicyKind::Fallback))
        .observer(metrics.observer())
        .build()
        .unwrap();
    let server = Server::bind(
        h,
        ServeConfig::default()
            .listen("127.0.0.1:0".parse().unwrap())
            .metrics(metrics),
    )
    .await
    .unwrap()
    .spawn();
    let base = format!("http://{}", server.local_addr());
    let http = reqwest::Client::new();
    let ask = |policy: &'static str| {
        http.post(format!("{base}/v1/chat/completions"))
            .header("x-edgecloud-policy", policy)
            .json(&serde_json::json!({
                "model": "edgecloud",
                "messages": [{"role": "user", "content": "hi"}],
            }))
            .send()
    };
    // One refused connection puts it down; the fallback answers locally.
    for _ in 0..2 {
        let r = ask("fallback").await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-edgecloud-lane"], "local");
    }
    let r = ask("cloud-only").await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "lanes_unavailable", "{body}");

    let health: serde_json::Value = http
        .get(format!("{base}/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cloud_state = health["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lane"] == "cloud")
        .unwrap()
        .clone();
    assert_eq!(cloud_state["down"], true, "{health}");
    assert!(cloud_state["retry_in_ms"].as_f64().unwrap() > 0.0);
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "edgecloud_lane_down{lane=\"cloud\"} 1",
        "edgecloud_lane_down{lane=\"local\"} 0",
        "edgecloud_lane_down_transitions_total{lane=\"cloud\",to=\"down\"} 1",
        "edgecloud_lane_down_transitions_total{lane=\"cloud\",to=\"up\"} 0",
        "edgecloud_lane_unavailable_total{lane=\"cloud\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    server.shutdown().await;
}
