//! Every CLI error prints each cause once: error messages are in their own
//! words and causes come from `source()`, which `main` prints as a chain.

use std::process::{Command, Output};

use crate::support::cli::bin;

fn edgecloud(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("the edgecloud binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_missing_model_prints_each_cause_once_in_run() {
    let out = edgecloud(&["run", "--prompt", "Hi", "--model", "/x.gguf"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error: could not start the local lane: invalid model file: /x.gguf: no such file\n"
    );
}

#[test]
fn a_missing_model_prints_each_cause_once_in_local() {
    let out = edgecloud(&["local", "--prompt", "Hi", "--model", "/x.gguf"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "edgecloud: local lane failed: invalid model file: /x.gguf: no such file\n"
    );
    let out = edgecloud(&["local", "--prompt", "Hi", "--model", "/x.gguf", "--json"]);
    let json = crate::support::cli::json_of(&out);
    assert_eq!(
        json["error"]["message"],
        "invalid model file: /x.gguf: no such file"
    );
}

#[test]
fn an_unreadable_config_prints_its_os_reason_once() {
    let out = edgecloud(&[
        "run",
        "--prompt",
        "Hi",
        "--config",
        "/nonexistent/edgecloud.toml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert_eq!(
        text.matches("No such file or directory").count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("cannot read config file /nonexistent/edgecloud.toml"),
        "{text}"
    );
}
