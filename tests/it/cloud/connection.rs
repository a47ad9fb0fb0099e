//! Connection faults: refused, handshake timeout, DNS, TLS, garbage; the lane moves between threads.

use super::*;

#[tokio::test]
async fn connection_refused_then_the_lane_recovers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let lane = CloudLane::new(config(&format!("http://{addr}/v1"))).unwrap();
    let err = lane.run(job("hi")).await.unwrap_err();
    assert_eq!(err.kind(), CloudErrorKind::ConnectRefused, "{err}");
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
    assert_eq!(err.kind(), CloudErrorKind::ConnectTimeout, "{err}");
    assert!(err.is_retryable() && err.is_connect());
    // The deadline still wins when it is the shorter bound.
    let err = lane
        .run(job_within("hi", Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), CloudErrorKind::DeadlineBeforeHeaders, "{err}");
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
        assert_eq!(err.kind(), CloudErrorKind::Dns, "{err}");
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
            assert_eq!(err.kind(), CloudErrorKind::Tls, "garbage={garbage}: {err}");
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
    fault_then_good(&lane(&server), job("bad"), CloudErrorKind::Transport).await;
    let server = faulty(|_conn, _req| async move { None }).await;
    fault_then_good(&lane(&server), job("bad"), CloudErrorKind::Transport).await;
}
