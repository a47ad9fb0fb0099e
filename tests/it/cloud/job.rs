//! The job: a panicking sink, the permit on every path, typed validation errors, rates.

use super::*;

#[tokio::test]
async fn a_panicking_sink_is_contained() {
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    let lane = lane(&server);
    let err = lane
        .run(job("hi").with_sink(|_| panic!("sink blew up (expected by the test)")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), CloudErrorKind::SinkPanicked);
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
        assert_eq!(err.kind(), CloudErrorKind::InvalidConfig, "{base:?}");
    }
    assert_eq!(
        CloudLane::new(CloudConfig::new("http://h/v1", ""))
            .unwrap_err()
            .kind(),
        CloudErrorKind::InvalidConfig
    );
    let server = TestServer::openai(Flavor::OpenAi, GOOD).await;
    let lane = lane(&server);
    let empty = LaneJob::new(
        vec![],
        Sampling::default(),
        Instant::now() + Duration::from_secs(5),
    );
    assert_eq!(
        lane.run(empty).await.unwrap_err().kind(),
        CloudErrorKind::InvalidRequest
    );
    let bad = LaneJob::new(
        vec![ChatMessage::user("hi")],
        Sampling {
            top_p: 0.0,
            ..Sampling::default()
        },
        Instant::now() + Duration::from_secs(5),
    );
    assert_eq!(
        lane.run(bad).await.unwrap_err().kind(),
        CloudErrorKind::InvalidRequest
    );
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
