//! The `edgecloud cloud` command.

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
