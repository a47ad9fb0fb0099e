//! On a real model: SmolLM2-135M-Instruct (Q4_1, llama architecture,
//! ChatML), fetched once through `edgecloud model fetch` and cached under
//! `target/models/` (see `support::real_model`).

use std::process::Command;

use crate::support::cli::{bin, json_of};
use crate::support::real_model::{cache_dir, smollm2};

#[test]
fn the_fetched_model_is_cached_and_a_second_fetch_does_nothing() {
    let path = smollm2();
    assert!(path.starts_with(cache_dir()), "{}", path.display());
    let out = Command::new(bin())
        .args(["model", "fetch", "smollm2-135m-instruct", "--dir"])
        .arg(cache_dir())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        path.to_str().unwrap()
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already there and verified"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_validator_accepts_it_and_inspect_reports_what_it_is() {
    let path = smollm2();
    edgecloud::gguf::validate(path).expect("the real model validates");
    let out = Command::new(bin())
        .args(["model", "inspect", "--json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let info = json_of(&out);
    assert_eq!(info["valid"], true);
    assert_eq!(info["architecture"], "llama");
    assert_eq!(info["quantization"], "Q4_1");
    assert_eq!(info["chat_template_family"], "chatml");
    let text = Command::new(bin())
        .args(["model", "inspect"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("parameters:     134.5M"), "{text}");
    assert!(text.contains("architecture:   llama"), "{text}");
    assert!(text.contains("Q4_1"), "{text}");
    assert!(text.contains("chat template:  yes (chatml)"), "{text}");
}
