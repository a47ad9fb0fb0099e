//! Deadline and cancellation: before headers, mid-stream, keepalive drips, stalls, already expired jobs.

use super::*;

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
        CloudErrorKind::DeadlineBeforeHeaders,
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
        CloudErrorKind::DeadlineBeforeFirstToken,
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
        CloudErrorKind::DeadlineBeforeFirstToken,
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
        CloudErrorKind::DeadlineBeforeFirstToken,
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
    let err = fault_then_good(&lane, job("loris"), CloudErrorKind::Stalled).await;
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
    let err = fault_then_good(&lane, job("loris"), CloudErrorKind::Stalled).await;
    assert_eq!(err.partial_text(), Some("Hel"));
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
    assert_eq!(err.kind(), CloudErrorKind::Cancelled);
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
        CloudErrorKind::DeadlineBeforeHeaders
    );
    let cancel = CancellationToken::new();
    cancel.cancel();
    assert_eq!(
        lane.run(job("hi").with_cancel(cancel))
            .await
            .unwrap_err()
            .kind(),
        CloudErrorKind::Cancelled
    );
    assert_eq!(server.accepted(), 0);
}
