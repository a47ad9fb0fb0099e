//! HTTP status faults: error statuses as variants; redirects not followed.

use super::*;

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
        ("401", CloudErrorKind::Auth, 401),
        ("403", CloudErrorKind::Auth, 403),
        ("404", CloudErrorKind::NotFound, 404),
        ("429s", CloudErrorKind::RateLimited, 429),
        ("429d", CloudErrorKind::RateLimited, 429),
        ("429ms", CloudErrorKind::RateLimited, 429),
        ("500", CloudErrorKind::Server, 500),
        ("502", CloudErrorKind::Server, 502),
        ("503", CloudErrorKind::Server, 503),
        ("400", CloudErrorKind::HttpStatus, 400),
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
    let err = fault_then_good(&lane, job("redirect"), CloudErrorKind::Redirect).await;
    assert_eq!(err.http_status(), Some(302));
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/chat/completions", "/v1/chat/completions"]);
}
