//! Secrets: the key never leaks.

use super::*;

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
    assert_eq!(err.kind(), CloudErrorKind::MalformedJson);
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
