//! The cloud lane over real TLS: a loopback HTTPS server (tokio-rustls,
//! hyper, HTTP/2 and HTTP/1.1 by ALPN) with certificates generated per test
//! (rcgen): a private CA and a server certificate it signed.
//!
//! - An unknown CA is a typed TLS error (`CloudError::Tls`, kind `tls`)
//!   whose detail names the certificate problem (`UnknownIssuer`), and a
//!   certificate for another name says so ("not valid for name").
//! - `ca_file` (in `[cloud]`, or `--ca-file`) makes the same server work.
//! - The lane speaks HTTP/2 to it (the server records each request's
//!   version), streamed and whole.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use edgecloud::cloud::{CloudConfig, CloudError, CloudErrorKind, CloudLane};
use edgecloud::{ChatMessage, LaneJob, Sampling};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use tokio::net::TcpListener;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_rustls::TlsAcceptor;

use crate::support::cli::{bin, json_of};
use crate::support::models::fresh_path;

/// A CA and a server certificate it signed for `names`.
struct Pki {
    ca_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: PrivateKeyDer<'static>,
}

fn pki(names: &[&str]) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "edgecloud test CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let leaf = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &ca_cert, &ca_key)
        .unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        server_chain: vec![leaf.der().clone()],
        server_key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    }
}

/// What the server saw.
#[derive(Default)]
struct Seen {
    versions: Vec<hyper::Version>,
    handshake_failures: usize,
}

struct TlsServer {
    port: u16,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const ANSWER: &str = "Hello over TLS";

async fn answer(
    req: Request<hyper::body::Incoming>,
    seen: Arc<Mutex<Seen>>,
) -> Response<Full<Bytes>> {
    seen.lock().unwrap().versions.push(req.version());
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let stream = serde_json::from_slice::<serde_json::Value>(&body)
        .map(|v| v["stream"] == true)
        .unwrap_or(false);
    let usage = serde_json::json!({"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6});
    if stream {
        let mut sse = String::new();
        for piece in ["Hello", " over", " TLS"] {
            let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
            sse.push_str(&format!("data: {chunk}\n\n"));
        }
        let end =
            serde_json::json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        let tail = serde_json::json!({"choices": [], "usage": usage});
        sse.push_str(&format!("data: {end}\n\ndata: {tail}\n\ndata: [DONE]\n\n"));
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Full::new(Bytes::from(sse)))
            .unwrap()
    } else {
        let json = serde_json::json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}],
            "usage": usage,
        });
        Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(json.to_string())))
            .unwrap()
    }
}

/// Serves on 127.0.0.1 until dropped; HTTP/2 or HTTP/1.1 as ALPN decides.
async fn start_server(pki: &Pki) -> TlsServer {
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(pki.server_chain.clone(), pki.server_key.clone_key())
            .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen_in = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let seen = Arc::clone(&seen_in);
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(_) => {
                        seen.lock().unwrap().handshake_failures += 1;
                        return;
                    }
                };
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let service = hyper::service::service_fn(move |req| {
                    let seen = Arc::clone(&seen);
                    async move { Ok::<_, std::convert::Infallible>(answer(req, seen).await) }
                });
                let io = TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    TlsServer { port, seen, task }
}

fn ca_file(pki: &Pki) -> PathBuf {
    let path = fresh_path("ca.pem");
    std::fs::write(&path, &pki.ca_pem).unwrap();
    path
}

fn job(stream_note: &str) -> LaneJob {
    LaneJob::new(
        vec![ChatMessage::user(format!("hello {stream_note}"))],
        Sampling::default(),
        Instant::now() + Duration::from_secs(30),
    )
}

fn lane(port: u16, ca: Option<PathBuf>, stream: bool) -> CloudLane {
    let mut config = CloudConfig::new(format!("https://127.0.0.1:{port}/v1"), "m");
    config.api_key_env = "EDGECLOUD_TLS_TEST_NO_KEY".into();
    config.ca_file = ca;
    config.stream = stream;
    CloudLane::new(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_ca_is_a_typed_tls_error_naming_the_problem() {
    let pki = pki(&["127.0.0.1"]);
    let server = start_server(&pki).await;
    let err = lane(server.port, None, true)
        .run(job("x"))
        .await
        .unwrap_err();
    match &err {
        CloudError::Tls { addr, detail, .. } => {
            assert_eq!(addr, &format!("127.0.0.1:{}", server.port));
            assert!(detail.contains("UnknownIssuer"), "{detail}");
        }
        other => panic!("expected CloudError::Tls, got {other:?}"),
    }
    assert_eq!(err.kind(), CloudErrorKind::Tls);
    assert_eq!(
        server.seen.lock().unwrap().versions.len(),
        0,
        "no request got through"
    );

    // The same server, trusted through ca_file: both shapes, over HTTP/2.
    let trusted = lane(server.port, Some(ca_file(&pki)), true);
    let done = trusted.run(job("streamed")).await.unwrap();
    assert_eq!(done.text, ANSWER);
    let whole = lane(server.port, Some(ca_file(&pki)), false)
        .run(job("whole"))
        .await
        .unwrap();
    assert_eq!(whole.text, ANSWER);
    let versions = server.seen.lock().unwrap().versions.clone();
    assert_eq!(versions, [hyper::Version::HTTP_2, hyper::Version::HTTP_2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused_even_with_its_ca() {
    let pki = pki(&["edgecloud.invalid"]);
    let server = start_server(&pki).await;
    let err = lane(server.port, Some(ca_file(&pki)), true)
        .run(job("x"))
        .await
        .unwrap_err();
    match &err {
        CloudError::Tls { detail, .. } => {
            assert!(detail.contains("not valid for name"), "{detail}")
        }
        other => panic!("expected CloudError::Tls, got {other:?}"),
    }
}

#[test]
fn a_bad_ca_file_is_a_config_error() {
    let mut config = CloudConfig::new("https://127.0.0.1:9/v1", "m");
    config.ca_file = Some(fresh_path("missing.pem"));
    let err = CloudLane::new(config.clone()).unwrap_err();
    assert_eq!(err.kind(), CloudErrorKind::InvalidConfig, "{err}");
    let empty = fresh_path("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    config.ca_file = Some(empty);
    let err = CloudLane::new(config).unwrap_err();
    assert!(
        edgecloud::error_chain(&err).contains("no certificate"),
        "{}",
        edgecloud::error_chain(&err)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_ca_file_flag_trusts_the_server() {
    let pki = pki(&["127.0.0.1"]);
    let server = start_server(&pki).await;
    let url = format!("https://127.0.0.1:{}/v1", server.port);
    let ca = ca_file(&pki);
    let run = move |with_ca: bool| {
        let url = url.clone();
        let ca = ca.clone();
        tokio::task::spawn_blocking(move || {
            let mut cmd = std::process::Command::new(bin());
            cmd.args([
                "cloud",
                "--base-url",
                &url,
                "--model",
                "m",
                "--prompt",
                "hi",
                "--json",
            ]);
            cmd.args(["--api-key-env", "EDGECLOUD_TLS_TEST_NO_KEY"]);
            if with_ca {
                cmd.arg("--ca-file").arg(&ca);
            }
            cmd.output().unwrap()
        })
    };
    let refused = json_of(&run(false).await.unwrap());
    assert_eq!(refused["error"]["kind"], "tls", "{refused}");
    let trusted = json_of(&run(true).await.unwrap());
    assert_eq!(trusted["status"], "completed", "{trusted}");
    assert_eq!(trusted["text"], ANSWER);
}
