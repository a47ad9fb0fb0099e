//! Quality in the loop, through the real binary: graded workloads, local
//! confidence signals, `bench calibrate`, and the calibrated cascade run
//! again on the same items. The lanes here are replays (labelled fakes):
//! `bench replay-cloud` serves recorded answers over real loopback HTTP,
//! and the hidden `--replay-local` puts recorded answers with recorded
//! log-probabilities on the local slot, so confidence and correctness are
//! known by construction.

use crate::support::cli::{bin, json_of};
use crate::support::models::{fresh_path, tiny_model};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// A `bench replay-cloud` process on a free loopback port, ended by PID
/// on drop.
struct ReplayCloud {
    child: Child,
    url: String,
}

impl ReplayCloud {
    fn start(answers: &Path) -> Self {
        let mut child = Command::new(bin())
            .args(["bench", "replay-cloud", "--listen", "127.0.0.1:0"])
            .args(["--model-name", "oracle"])
            .arg("--answers")
            .arg(answers)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("replay-cloud prints its address");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        assert!(line.contains("stand-in"), "it says what it is: {line}");
        Self { child, url }
    }
}

impl Drop for ReplayCloud {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("the binary runs")
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn write_lines(path: &Path, lines: &[Value]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).expect("scratch is writable");
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("file exists")).expect("JSON")
}

/// Twenty items of known confidence and correctness:
/// - items 0-9: the local answer is wrong, p10 log-prob -3.0 - 0.1 i
///   (low); the cloud is right;
/// - items 10-19: the local answer is right, p10 -0.5 + 0.01 (i - 10)
///   (high); the cloud is right except on item 19.
///
/// So local-only 50%, cloud-only 95%. Escalating the k least confident
/// items (k <= 10) gives (10 + k) / 20; PGR k / 9. At most 30% cloud
/// calls: k = 6, accuracy 80%, threshold between -3.4 and -3.3.
/// CPT(50%): acc >= 72.5% -> k = 5 -> 25%; CPT(80%): acc >= 86% -> k = 8
/// -> 40%. APGR = 0.05 * (50/9 + 9 * 10/9 + (10/9 + 1) / 2) = 0.830556.
fn scripted(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let (mut work, mut local, mut cloud) = (vec![], vec![], vec![]);
    for i in 0..20 {
        let q = format!("Item {i}: what is {i} plus {i}?");
        let right = 2 * i;
        let (local_answer, p10) = if i < 10 {
            (right + 1, -3.0 - 0.1 * f64::from(i))
        } else {
            (right, -0.5 + 0.01 * f64::from(i - 10))
        };
        let cloud_answer = if i == 19 { right + 7 } else { right };
        work.push(json!({
            "id": format!("item-{i:02}"), "prompt": q, "expected": right.to_string(),
            "grader": "number", "sampling": {"max_tokens": 16}
        }));
        local.push(json!({
            "prompt": q, "answer": format!("It is {local_answer}."),
            "logprobs": [p10, p10, p10], "first_token_margin": 0.5
        }));
        cloud.push(json!({"prompt": q, "answer": format!("{i} + {i} = {cloud_answer}\n#### {cloud_answer}")}));
    }
    let paths = (
        dir.join("work.jsonl"),
        dir.join("local.jsonl"),
        dir.join("cloud.jsonl"),
    );
    write_lines(&paths.0, &work);
    write_lines(&paths.1, &local);
    write_lines(&paths.2, &cloud);
    paths
}

/// `edgecloud bench` on the scripted lanes (the replayed local answers,
/// the replay cloud at `url`), one pass, writing to `out`.
fn bench_args(work: &Path, local: &Path, url: &str, out: &Path) -> Vec<String> {
    vec![
        "bench".into(),
        "--workload".into(),
        work.display().to_string(),
        "--replay-local".into(),
        local.display().to_string(),
        "--base-url".into(),
        url.into(),
        "--cloud-model".into(),
        "oracle".into(),
        "--runs".into(),
        "1".into(),
        "--warmup".into(),
        "0".into(),
        "--quiet".into(),
        "--out".into(),
        out.display().to_string(),
    ]
}

/// The local-only and cloud-only baselines of the scripted lanes, in
/// `dir/baselines`.
fn baselines(dir: &Path, work: &Path, local: &Path, url: &str) -> PathBuf {
    let base = dir.join("baselines");
    let mut args = bench_args(work, local, url, &base);
    args.extend(["--policies".into(), "local-only,cloud-only".into()]);
    args.extend(["--deadlines-ms".into(), "20000".into()]);
    ok(run(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    base
}

fn close(v: &Value, want: f64, what: &str) {
    let got = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {v}"));
    assert!((got - want).abs() < 1e-9, "{what}: {got} != {want}");
}

#[test]
fn calibrate_end_to_end_and_the_calibrated_cascade_matches_the_simulation() {
    let dir = fresh_path("quality-e2e");
    let (work, local, cloud) = scripted(&dir);
    let server = ReplayCloud::start(&cloud);
    let lanes = |out: &Path| bench_args(&work, &local, &server.url, out);
    let base = baselines(&dir, &work, &local, &server.url);

    // Both lanes graded on every item, signals recorded.
    let runs: Vec<Value> = std::fs::read_to_string(base.join("runs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 40);
    for r in &runs {
        let (lane, other) = match r["policy"].as_str().unwrap() {
            "local-only" => (0, 1),
            _ => (1, 0),
        };
        assert!(r["lanes"][lane]["correct"].is_boolean(), "{r}");
        assert!(r["lanes"][other]["correct"].is_null(), "{r}");
        assert_eq!(r["lanes"][lane]["correct"], r["expected_match"]);
        if lane == 0 {
            let s = &r["lanes"][0]["signals"];
            assert!(s["p10_logprob"].is_number() && s["first_token_margin"].is_number());
        }
    }
    let summary = read_json(&base.join("summary.json"));
    let group = |s: &Value, p: &str| {
        s["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["policy"] == p)
            .cloned()
            .unwrap()
    };
    assert_eq!(group(&summary, "local-only")["accuracy"]["matched"], 10);
    assert_eq!(group(&summary, "cloud-only")["accuracy"]["matched"], 19);
    close(
        &group(&summary, "cloud-only")["cloud_call_share"],
        1.0,
        "share",
    );
    close(&group(&summary, "cloud-only")["gap_recovered"], 1.0, "gap");
    let md = std::fs::read_to_string(base.join("report.md")).unwrap();
    assert!(md.contains("## Quality per policy and deadline"));

    // Calibrate, running nothing.
    let out = ok(run(&[
        "bench",
        "calibrate",
        base.to_str().unwrap(),
        "--signal",
        "p10_logprob",
        "--target-cloud-share",
        "0.3",
        "--json",
    ]));
    let c = json_of(&out);
    close(&c["local_accuracy"], 0.5, "weak");
    close(&c["cloud_accuracy"], 0.95, "strong");
    let p10 = c["curves"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["signal"] == "p10_logprob")
        .unwrap();
    close(&p10["cpt50"], 0.25, "CPT(50%)");
    close(&p10["cpt80"], 0.4, "CPT(80%)");
    assert!(
        (p10["apgr"].as_f64().unwrap() - 0.830_556).abs() < 1e-5,
        "{p10}"
    );
    let chosen = &c["choice"]["point"];
    close(&chosen["cloud_share"], 0.3, "chosen share");
    close(&chosen["accuracy"], 0.8, "chosen accuracy");
    let t = chosen["threshold"].as_f64().unwrap();
    assert!(
        -3.4 < t && t < -3.3,
        "threshold {t} sits between the 6th and 7th values"
    );
    for f in [
        "calibration.md",
        "calibration.json",
        "quality_vs_cloud_share.svg",
        "calibrated.toml",
    ] {
        assert!(base.join(f).is_file(), "{f} written");
    }
    let svg = std::fs::read_to_string(base.join("quality_vs_cloud_share.svg")).unwrap();
    assert!(svg.starts_with("<?xml") && svg.contains("random routing"));
    let toml = std::fs::read_to_string(base.join("calibrated.toml")).unwrap();
    assert!(toml.contains("signal = \"p10_logprob\""), "{toml}");

    // The calibrated cascade on the same items: the actual cloud share is
    // the simulated one.
    let rerun = dir.join("cascade");
    let mut args = lanes(&rerun);
    args.extend([
        "--config".into(),
        base.join("calibrated.toml").display().to_string(),
    ]);
    ok(run(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    let s = read_json(&rerun.join("summary.json"));
    let g = group(&s, "cascade");
    let actual = g["cloud_call_share"].as_f64().unwrap();
    assert!(
        (actual - 0.3).abs() <= 0.05,
        "actual cloud share {actual}, simulated 0.3"
    );
    close(&g["accuracy"]["matched"], 16.0, "cascade right answers");
    drop(server);

    // Bad input: the items the local model got right (or wrong) alone are
    // a one-class calibration set, refused by name, with no config.
    for (name, right) in [("only-right", true), ("only-wrong", false)] {
        let local_right: std::collections::BTreeSet<String> = runs
            .iter()
            .filter(|r| r["policy"] == "local-only" && r["expected_match"] == right)
            .map(|r| r["item"].as_str().unwrap().to_string())
            .collect();
        let kept: Vec<String> = runs
            .iter()
            .filter(|r| local_right.contains(r["item"].as_str().unwrap()))
            .map(Value::to_string)
            .collect();
        let one = dir.join(name);
        std::fs::create_dir_all(&one).unwrap();
        std::fs::write(one.join("runs.jsonl"), kept.join("\n")).unwrap();
        let out = run(&["bench", "calibrate", one.to_str().unwrap()]);
        assert!(!out.status.success(), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        let how = if right { "right" } else { "wrong" };
        assert!(
            err.contains("one-class calibration set")
                && err.contains(&format!("{how} on all 10 graded items")),
            "{err}"
        );
        assert!(!one.join("calibrated.toml").exists());
    }
}

#[test]
fn calibrate_without_baselines_says_what_it_needs() {
    let dir = fresh_path("quality-no-baselines");
    let (work, local, _) = scripted(&dir);
    let out_dir = dir.join("only-local");
    ok(run(&[
        "bench",
        "--workload",
        work.to_str().unwrap(),
        "--replay-local",
        local.to_str().unwrap(),
        "--policies",
        "local-only",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--quiet",
        "--out",
        out_dir.to_str().unwrap(),
    ]));
    let out = run(&["bench", "calibrate", out_dir.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("local-only and cloud-only"), "{err}");
}

#[test]
fn local_json_has_the_confidence_signals() {
    let out = ok(run(&[
        "local",
        "--model",
        tiny_model().to_str().unwrap(),
        "--prompt",
        "Hello",
        "--max-tokens",
        "12",
        "--json",
    ]));
    let v = json_of(&out);
    let (mean, min, p10) = (
        v["mean_logprob"].as_f64().unwrap(),
        v["min_logprob"].as_f64().unwrap(),
        v["p10_logprob"].as_f64().unwrap(),
    );
    // A low quantile lies between the minimum and 0; it need not lie
    // below the mean (one very unlikely token drags the mean down).
    assert!(
        min <= p10 && p10 <= 0.0 && min <= mean && mean <= 0.0,
        "{v}"
    );
    let margin = v["first_token_margin"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&margin), "{v}");
}

#[test]
fn a_consensus_bench_records_the_agreement_and_its_cost_and_calibrate_uses_it() {
    let dir = fresh_path("quality-consensus");
    std::fs::create_dir_all(&dir).unwrap();
    let (mut work, mut cloud) = (vec![], vec![]);
    for i in 0..6 {
        let q = format!("Item {i}: what is {i} times {i}?");
        // The random model is never right on a number; two items any
        // answer passes keep the calibration set from being one-class.
        let (grader, expected) = if i < 2 {
            ("regex", ".*".to_string())
        } else {
            ("number", (i * i).to_string())
        };
        work.push(json!({
            "id": format!("item-{i}"), "prompt": q, "expected": expected,
            "grader": grader, "sampling": {"max_tokens": 6, "temperature": 0}
        }));
        cloud.push(json!({"prompt": q, "answer": format!("#### {}", i * i)}));
    }
    let (work_path, cloud_path) = (dir.join("work.jsonl"), dir.join("cloud.jsonl"));
    write_lines(&work_path, &work);
    write_lines(&cloud_path, &cloud);
    let server = ReplayCloud::start(&cloud_path);
    let out_dir = dir.join("k3");
    ok(run(&[
        "bench",
        "--workload",
        work_path.to_str().unwrap(),
        "--model",
        tiny_model().to_str().unwrap(),
        "--threads",
        "1",
        "--base-url",
        &server.url,
        "--cloud-model",
        "oracle",
        "--policies",
        "local-only,cloud-only",
        "--deadlines-ms",
        "60000",
        "--samples",
        "3",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--quiet",
        "--out",
        out_dir.to_str().unwrap(),
    ]));
    let runs: Vec<Value> = std::fs::read_to_string(out_dir.join("runs.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let local: Vec<&Value> = runs
        .iter()
        .filter(|r| r["policy"] == "local-only")
        .collect();
    assert_eq!(local.len(), 6);
    for r in &local {
        let l = &r["lanes"][0];
        assert_eq!(l["samples"], 3, "{r}");
        // Three samples of at most 6 tokens each; the answer is one of them.
        let (answer, sampled) = (
            l["completion_tokens"].as_u64().unwrap(),
            l["sampled_tokens"].as_u64().unwrap(),
        );
        assert!(answer <= 6 && sampled > answer && sampled <= 18, "{l}");
        let share = l["signals"]["answer_agreement"].as_f64().unwrap();
        assert!(
            [0.0, 1.0 / 3.0, 2.0 / 3.0, 1.0]
                .iter()
                .any(|v| (share - v).abs() < 1e-6),
            "{share}"
        );
    }
    let summary = read_json(&out_dir.join("summary.json"));
    assert_eq!(summary["settings"]["local"]["samples"], 3);
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(md.contains("consensus of 3 samples per item"), "{md}");
    let out = ok(run(&[
        "bench",
        "calibrate",
        out_dir.to_str().unwrap(),
        "--signal",
        "answer_agreement",
        "--json",
    ]));
    let c = json_of(&out);
    assert!(
        c["curves"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["signal"] == "answer_agreement"),
        "{c}"
    );
    assert_eq!(c["cost"]["samples"], 3);
    assert_eq!(c["choice"]["signal"], "answer_agreement");
    let toml = std::fs::read_to_string(out_dir.join("calibrated.toml")).unwrap();
    assert!(toml.contains("--samples 3"), "{toml}");
    drop(server);
}

/// Issue 33: `bench prompt-signals` on the real SmolLM2 records every
/// item's prompt log-probability, then (a second file) its embedding, and
/// resumes; `bench calibrate --prompt-signals` joins both to the runs,
/// draws the prompt-only curves and the two-stage routes, and refuses a
/// file of another workload or, for the eval items, of another model.
#[test]
fn prompt_signals_are_recorded_resumed_joined_and_checked() {
    let dir = fresh_path("quality-prompt-signals");
    let (work, local, cloud) = scripted(&dir);
    let server = ReplayCloud::start(&cloud);
    let base = baselines(&dir, &work, &local, &server.url);
    let model = crate::support::real_model::smollm2();
    let record = |out: &Path, embeddings: bool| {
        let mut args = vec![
            "bench",
            "prompt-signals",
            "--workload",
            work.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "--threads",
            "2",
            "--context-size",
            "512",
            "--out",
            out.to_str().unwrap(),
        ];
        if embeddings {
            args.push("--embeddings");
        }
        ok(run(&args))
    };
    let lines = |p: &Path| -> Vec<Value> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (scores, embs) = (dir.join("scores.jsonl"), dir.join("embs.jsonl"));
    record(&scores, false);
    record(&embs, true);
    let s = lines(&scores);
    assert_eq!(s.len(), 21, "a header and one line per item");
    assert_eq!(s[0]["workload"], work.to_str().unwrap());
    assert_eq!(s[0]["model_sha256"].as_str().unwrap().len(), 64);
    for item in &s[1..] {
        let lp = item["prompt_logprob"].as_f64().unwrap();
        assert!(lp < 0.0, "{item}");
    }
    for item in &lines(&embs)[1..] {
        assert_eq!(item["embedding"].as_array().unwrap().len(), 576, "{item}");
    }
    // A second run finds every item done and adds nothing.
    let again = record(&scores, false);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("of 0 items (20 already in"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(lines(&scores).len(), 21);

    let calibrate = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "calibrate",
            base.to_str().unwrap(),
            "--json",
            "--out",
        ];
        let out = dir.join("cal");
        args.push(out.to_str().unwrap());
        args.extend_from_slice(extra);
        run(&args)
    };
    let c = json_of(&ok(calibrate(&[
        "--prompt-signals",
        scores.to_str().unwrap(),
        "--prompt-signals",
        embs.to_str().unwrap(),
    ])));
    let curves: Vec<&str> = c["curves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["signal"].as_str().unwrap())
        .collect();
    // The prompt's length comes with every local run, files or not.
    assert!(
        curves.contains(&"prompt_logprob")
            && curves.contains(&"prompt_brevity")
            && curves.contains(&"prompt_neighbours"),
        "{curves:?}"
    );
    assert!(c["neighbours"]["k"].as_u64().unwrap() >= 1);
    assert_eq!(c["two_stage"].as_array().unwrap().len(), 3);
    let md = std::fs::read_to_string(dir.join("cal").join("calibration.md")).unwrap();
    assert!(md.contains("## Two-stage routing"), "{md}");
    // calibrated.toml carries a live two-stage route (on one of the
    // prompt-only signals a route reads) with both thresholds, and the
    // binary takes it as a config.
    let cfg = dir.join("cal").join("calibrated.toml");
    let toml = std::fs::read_to_string(&cfg).unwrap();
    let live = ["prompt_logprob", "prompt_brevity"].iter().any(|s| {
        toml.contains(&format!(
            "prompt_escalate_below = {{ signal = \"{s}\", value = "
        ))
    });
    assert!(
        toml.contains("[routes.two-stage]")
            && live
            && toml.contains("default_route = \"two-stage\""),
        "{toml}"
    );
    let shown = ok(run(&["config", "show", "--config", cfg.to_str().unwrap()]));
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("prompt_escalate_below"), "{shown}");

    // A prompt-only signal routes in the two-stage fit, never as the
    // cascade's answer signal.
    let out = calibrate(&["--signal", "prompt_brevity"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`prompt_brevity` reads the prompt"), "{err}");

    // Bad input: another workload's file, another model's eval file.
    let edited = |name: &str, key: &str, value: &str| {
        let mut l = lines(&scores);
        l[0][key] = json!(value);
        let path = dir.join(name);
        let text: Vec<String> = l.iter().map(Value::to_string).collect();
        std::fs::write(&path, text.join("\n")).unwrap();
        path
    };
    let other_workload = edited("other-workload.jsonl", "workload", "other.jsonl");
    let out = calibrate(&["--prompt-signals", other_workload.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("recorded on workload `other.jsonl`"), "{err}");
    let other_model = edited("other-model.jsonl", "model_sha256", &"0".repeat(64));
    let out = calibrate(&[
        "--prompt-signals",
        scores.to_str().unwrap(),
        "--eval",
        base.to_str().unwrap(),
        "--eval-prompt-signals",
        other_model.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("SHA-256 000000000000"), "{err}");
}
