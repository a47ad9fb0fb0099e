//! Benchmark runs and reports: the bench loop with a scripted executor
//! (figures recomputed independently from runs.jsonl, files that parse,
//! interruption, late workers), workload errors, and the real binary's
//! `bench compare` and `bench report`.

use crate::cli::edgecloud;
use crate::support::models::fresh_path;
use edgecloud::Lane;
use edgecloud_bench::{
    run_bench, BenchError, BenchPlan, BenchSettings, Executor, Job, LaneRecord, LaneState,
    Progress, RunRecord, RunStatus, TokensSaved, Workload, CHART_FILES, REPORT_FILE, RUNS_FILE,
    SUMMARY_FILE,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// An executor whose runs are a pure function of their `seq` (scaled by
/// `speed`): varied latencies, winners, busy lanes, late workers whose
/// overruns arrive two runs later, provider usage and saved tokens.
struct Scripted {
    speed: f64,
    /// Late overruns not yet handed out: (seq of their run, due at seq).
    late: Vec<(u64, u64, f64)>,
    last_seq: u64,
    /// Set `stop` after this many runs.
    stop_after: Option<(u64, &'static AtomicBool)>,
    runs: u64,
}

impl Scripted {
    fn new(speed: f64) -> Self {
        Self {
            speed,
            late: Vec::new(),
            last_seq: 0,
            stop_after: None,
            runs: 0,
        }
    }
}

impl Executor for Scripted {
    fn run(&mut self, job: &Job<'_>) -> RunRecord {
        let s = job.seq;
        self.last_seq = s;
        self.runs += 1;
        if let Some((n, stop)) = self.stop_after {
            if self.runs >= n {
                stop.store(true, Ordering::SeqCst);
            }
        }
        let deadline = job.deadline_ms as f64;
        let elapsed = ((s * 37 % 101) as f64 + 5.0) * self.speed;
        let ok = elapsed < deadline;
        let winner = ok.then_some(if s.is_multiple_of(3) {
            Lane::Cloud
        } else {
            Lane::Local
        });
        let mut local = LaneRecord::new(Lane::Local, LaneState::Completed);
        local.total_ms = Some(elapsed * 0.9);
        local.ttft_ms = Some(elapsed * 0.3);
        local.prompt_tokens = Some(20 + s % 7);
        local.completion_tokens = Some(8);
        local.prompt_tokens_per_s = Some(500.0 + (s % 13) as f64 * 10.0 / self.speed);
        local.gen_tokens_per_s = Some(100.0 + (s % 11) as f64 / self.speed);
        let mut cloud = if s % 5 == 4 {
            LaneRecord::new(Lane::Cloud, LaneState::Busy)
        } else {
            let mut c = LaneRecord::new(Lane::Cloud, LaneState::Completed);
            c.total_ms = Some(elapsed * 0.8);
            c.provider_prompt_tokens = Some(30 + s % 4);
            c.provider_completion_tokens = Some(6);
            c
        };
        let late_workers = u32::from(s % 4 == 1);
        if late_workers == 1 {
            cloud.state = LaneState::Late;
            self.late.push((s, s + 2, 3.0 + (s % 9) as f64));
        }
        RunRecord {
            started_ms: None,
            seq: s,
            policy: job.policy.to_string(),
            deadline_ms: job.deadline_ms,
            item: job.item.id.clone(),
            tag: job.item.tag.clone(),
            repeat: job.repeat,
            status: if ok {
                RunStatus::Ok
            } else {
                RunStatus::DeadlineExceeded
            },
            winner,
            elapsed_ms: elapsed.min(deadline + 0.5),
            ttft_ms: ok.then_some(elapsed * 0.3),
            overshoot_ms: if ok { 0.0 } else { 0.5 },
            lanes: vec![local, cloud],
            late_workers,
            late_overrun_ms: Vec::new(),
            tokens_saved: TokensSaved {
                compression: s % 3,
                pre_score: u64::from(s.is_multiple_of(7)) * 25,
            },
            expected_match: job.item.expected.as_ref().map(|_| s.is_multiple_of(2)),
            error: (!ok).then(|| "deadline".to_string()),
            prompt_stage: None,
            cost: None,
        }
    }

    fn late_overruns(&mut self) -> Vec<(u64, f64)> {
        let now = self.last_seq;
        let (due, keep): (Vec<_>, Vec<_>) = self.late.drain(..).partition(|l| l.1 <= now);
        self.late = keep;
        due.into_iter().map(|(s, _, o)| (s, o)).collect()
    }

    fn finish(&mut self) {
        self.last_seq = u64::MAX;
    }
}

fn plan(workload: &str, runs: u32, warmup: u32) -> BenchPlan {
    BenchPlan {
        workload: Workload::load(workload).unwrap(),
        policies: vec!["local-only".into(), "race".into()],
        deadlines_ms: vec![40, 120],
        runs,
        warmup,
        concurrency: 1,
    }
}

fn scripted_bench(dir: &Path, speed: f64) -> edgecloud_bench::BenchResult {
    let stop = AtomicBool::new(false);
    let mut progress = Vec::new();
    let result = run_bench(
        &plan("builtin:short:6", 3, 1),
        BenchSettings::default(),
        edgecloud::build_facts::bench_environment(None),
        dir,
        &mut Scripted::new(speed),
        &stop,
        &mut |p: Progress| progress.push(p),
    )
    .unwrap();
    let last = progress.last().unwrap();
    assert_eq!((last.done, last.total), (96, 96));
    assert_eq!(last.warmup_done, 24);
    assert_eq!(last.eta, Some(std::time::Duration::ZERO));
    assert!(progress.windows(2).all(|w| w[0].done < w[1].done));
    result
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Nearest rank, written again here on purpose (not the library's).
fn nearest_rank(values: &[f64], p: usize) -> Value {
    if values.is_empty() {
        return Value::Null;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((p * v.len()) as f64 / 100.0).ceil().max(1.0) as usize;
    Value::from(v[rank - 1])
}

fn close(a: &Value, b: &Value, what: &str) {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => assert!((x - y).abs() < 1e-9, "{what}: {x} != {y}"),
        _ => assert_eq!(a, b, "{what}"),
    }
}

/// Recomputes every headline figure of every group of `dir`'s summary
/// from its runs.jsonl, reading both as untyped JSON.
pub(crate) fn check_summary_against_runs(dir: &Path) {
    let runs = read_lines(&dir.join(RUNS_FILE));
    let summary = read_json(&dir.join(SUMMARY_FILE));
    let groups = summary["groups"].as_array().unwrap();
    assert_eq!(summary["total_runs"].as_u64().unwrap() as usize, runs.len());
    let mut covered = 0;
    for g in groups {
        let mine: Vec<&Value> = runs
            .iter()
            .filter(|r| r["policy"] == g["policy"] && r["deadline_ms"] == g["deadline_ms"])
            .collect();
        covered += mine.len();
        let n = mine.len() as f64;
        let name = format!("{} @ {}", g["policy"], g["deadline_ms"]);
        assert_eq!(g["runs"].as_u64().unwrap() as usize, mine.len(), "{name}");
        let f = |key: &str| -> Vec<f64> { mine.iter().filter_map(|r| r[key].as_f64()).collect() };
        for (key, field) in [("elapsed_ms", "latency_ms"), ("ttft_ms", "ttft_ms")] {
            let values = f(key);
            for p in [50, 95, 99] {
                let want = nearest_rank(&values, p);
                let got = if values.is_empty() {
                    g[field].clone()
                } else {
                    g[field][format!("p{p}")].clone()
                };
                close(&got, &want, &format!("{name} {field} p{p}"));
            }
        }
        let share = |pred: &dyn Fn(&Value) -> bool| {
            Value::from(mine.iter().filter(|r| pred(r)).count() as f64 / n)
        };
        close(
            &g["deadline_hit_rate"],
            &share(&|r| r["status"] == "ok"),
            &format!("{name} hit rate"),
        );
        close(
            &g["win_share"]["local"],
            &share(&|r| r["winner"] == "local"),
            &format!("{name} local wins"),
        );
        close(
            &g["win_share"]["cloud"],
            &share(&|r| r["winner"] == "cloud"),
            &format!("{name} cloud wins"),
        );
        close(
            &g["busy_skip_rate"],
            &share(&|r| {
                r["lanes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|l| l["state"] == "busy")
            }),
            &format!("{name} busy skips"),
        );
        let late: u64 = mine
            .iter()
            .map(|r| r["late_workers"].as_u64().unwrap())
            .sum();
        assert_eq!(g["late_workers"].as_u64().unwrap(), late, "{name} late");
        let overruns: Vec<f64> = mine
            .iter()
            .flat_map(|r| r["late_overrun_ms"].as_array().unwrap().clone())
            .map(|v| v.as_f64().unwrap())
            .collect();
        let got = if overruns.is_empty() {
            g["late_overrun_ms"].clone()
        } else {
            g["late_overrun_ms"]["p99"].clone()
        };
        close(
            &got,
            &nearest_rank(&overruns, 99),
            &format!("{name} overrun p99"),
        );
        let lane = |r: &Value, lane: &str| -> Value {
            r["lanes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["lane"] == lane)
                .cloned()
                .unwrap_or(Value::Null)
        };
        let local = g["lanes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["lane"] == "local")
            .unwrap();
        for key in ["prompt_tokens_per_s", "gen_tokens_per_s"] {
            let values: Vec<f64> = mine
                .iter()
                .filter_map(|r| lane(r, "local")[key].as_f64())
                .collect();
            let got = if values.is_empty() {
                local[key].clone()
            } else {
                local[key]["p50"].clone()
            };
            close(&got, &nearest_rank(&values, 50), &format!("{name} {key}"));
        }
        let sum = |f: &dyn Fn(&Value) -> u64| -> u64 { mine.iter().map(|r| f(r)).sum() };
        let provider_prompt = sum(&|r| {
            lane(r, "cloud")["provider_prompt_tokens"]
                .as_u64()
                .unwrap_or(0)
        });
        let provider_completion = sum(&|r| {
            lane(r, "cloud")["provider_completion_tokens"]
                .as_u64()
                .unwrap_or(0)
        });
        assert_eq!(
            g["cloud_tokens"]["prompt"].as_u64().unwrap(),
            provider_prompt,
            "{name}"
        );
        assert_eq!(
            g["cloud_tokens"]["completion"].as_u64().unwrap(),
            provider_completion,
            "{name}"
        );
        for key in ["compression", "pre_score"] {
            assert_eq!(
                g["tokens_saved"][key].as_u64().unwrap(),
                sum(&|r| r["tokens_saved"][key].as_u64().unwrap()),
                "{name} saved {key}"
            );
        }
    }
    assert_eq!(covered, runs.len(), "every run belongs to a group");
}

/// A minimal XML well-formedness check: one root `svg` element, every tag
/// closed in order, attributes quoted, no raw `<` or `&` in text.
fn check_svg(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let body = text
        .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
        .unwrap_or_else(|| panic!("{}: no XML declaration", path.display()));
    let mut stack: Vec<String> = Vec::new();
    let mut rest = body;
    let mut roots = 0;
    while let Some(start) = rest.find('<') {
        let text_part = &rest[..start];
        assert!(!text_part.contains('>'), "{}: stray '>'", path.display());
        for (i, _) in text_part.match_indices('&') {
            let entity = &text_part[i..];
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| entity.starts_with(e)),
                "{}: bad entity",
                path.display()
            );
        }
        let end = rest[start..].find('>').expect("tag closes") + start;
        let tag = &rest[start + 1..end];
        assert_eq!(tag.matches('"').count() % 2, 0, "{}: {tag}", path.display());
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "{}",
                path.display()
            );
        } else if !tag.ends_with('/') {
            let name = tag.split_whitespace().next().unwrap().to_string();
            if stack.is_empty() {
                roots += 1;
                assert_eq!(name, "svg");
            }
            stack.push(name);
        } else if stack.is_empty() {
            panic!("{}: element outside the root", path.display());
        }
        rest = &rest[end + 1..];
    }
    assert!(stack.is_empty(), "{}: unclosed {stack:?}", path.display());
    assert_eq!(roots, 1);
    assert!(rest.trim().is_empty());
}

/// Every file of an output directory parses, and the report has a row for
/// every group.
pub(crate) fn check_output_files(dir: &Path) {
    let summary = read_json(&dir.join(SUMMARY_FILE));
    assert_eq!(summary["format"], "edgecloud-bench/1");
    read_lines(&dir.join(RUNS_FILE));
    for chart in CHART_FILES {
        check_svg(&dir.join(chart));
    }
    let md = std::fs::read_to_string(dir.join(REPORT_FILE)).unwrap();
    assert!(md.starts_with("# edgecloud bench report"));
    let results = md
        .split("## Results per policy and deadline")
        .nth(1)
        .expect("the results table comes first")
        .split("\n## ")
        .next()
        .unwrap();
    let rows: Vec<&str> = results.lines().filter(|l| l.starts_with("| ")).collect();
    let groups = summary["groups"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        groups.len() + 1,
        "header plus one row per group"
    );
    for (row, g) in rows[1..].iter().zip(groups) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells[1], g["policy"].as_str().unwrap());
        assert_eq!(cells[2], g["deadline_ms"].to_string());
        assert_eq!(cells[3], g["runs"].to_string());
    }
    for chart in CHART_FILES {
        assert!(md.contains(&format!("]({chart})")), "report links {chart}");
    }
    for key in [
        "| CPU |",
        "| model",
        "| native CPU build |",
        "| llama.cpp |",
        "| memory |",
    ] {
        assert!(md.contains(key), "report has {key}");
    }
}

fn out_dir(name: &str) -> PathBuf {
    fresh_path(name)
}

#[test]
fn scripted_bench_summary_matches_its_runs() {
    let dir = out_dir("bench-scripted");
    let result = scripted_bench(&dir, 1.0);
    assert_eq!(result.records.len(), 72, "warm-up runs are not recorded");
    assert!(!result.summary.interrupted);
    check_summary_against_runs(&dir);
    check_output_files(&dir);
    // Late workers' overruns reached their records before they were
    // written, even though they came back two runs later.
    let runs = read_lines(&dir.join(RUNS_FILE));
    let late: Vec<&Value> = runs.iter().filter(|r| r["late_workers"] == 1).collect();
    assert!(!late.is_empty());
    for r in &late {
        assert_eq!(r["late_overrun_ms"].as_array().unwrap().len(), 1, "{r}");
    }
    let mut seqs: Vec<u64> = runs.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    let n = seqs.len();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), n, "each run written once");
}

#[test]
fn stopped_bench_keeps_what_it_measured() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let dir = out_dir("bench-stopped");
    let mut exec = Scripted::new(1.0);
    exec.stop_after = Some((10, &STOP));
    let result = run_bench(
        &plan("builtin:short:6", 3, 0),
        BenchSettings::default(),
        edgecloud::build_facts::bench_environment(None),
        &dir,
        &mut exec,
        &STOP,
        &mut |_| {},
    )
    .unwrap();
    assert!(result.summary.interrupted);
    assert_eq!(result.records.len(), 10);
    let summary = read_json(&dir.join(SUMMARY_FILE));
    assert_eq!(summary["interrupted"], true);
    assert_eq!(summary["total_runs"], 10);
    assert_eq!(read_lines(&dir.join(RUNS_FILE)).len(), 10);
    check_summary_against_runs(&dir);
    check_output_files(&dir);
    let md = std::fs::read_to_string(dir.join(REPORT_FILE)).unwrap();
    assert!(md.contains("**Interrupted**"));
}

#[test]
fn bad_plans_are_refused() {
    let dir = out_dir("bench-bad-plan");
    for (edit, want) in [
        (
            (|p: &mut BenchPlan| p.policies.clear()) as fn(&mut BenchPlan),
            "policy",
        ),
        (|p: &mut BenchPlan| p.deadlines_ms = vec![0], "above 0"),
        (|p: &mut BenchPlan| p.runs = 0, "runs"),
    ] {
        let mut p = plan("builtin:short:2", 1, 0);
        edit(&mut p);
        let err = run_bench(
            &p,
            BenchSettings::default(),
            edgecloud::build_facts::bench_environment(None),
            &dir,
            &mut Scripted::new(1.0),
            &AtomicBool::new(false),
            &mut |_| {},
        )
        .unwrap_err();
        assert!(matches!(err, BenchError::InvalidSettings { .. }));
        assert!(err.to_string().contains(want), "{err}");
    }
}

#[test]
fn malformed_workload_lines_are_named() {
    let path = fresh_path("bad-workload.jsonl");
    std::fs::write(
        &path,
        "{\"prompt\": \"fine\"}\n\n{\"prompt\": \"also fine\", \"tag\": \"x\"}\n{\"messages\": [{\"role\": \"robot\", \"content\": \"hi\"}]}\n",
    )
    .unwrap();
    let err = Workload::load(path.to_str().unwrap()).unwrap_err();
    match &err {
        BenchError::WorkloadLine { line, .. } => assert_eq!(*line, 4),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("line 4"), "{err}");
}

#[test]
fn compare_and_report_through_the_binary() {
    let a = out_dir("bench-compare-a");
    let b = out_dir("bench-compare-b");
    let ra = scripted_bench(&a, 1.0);
    let rb = scripted_bench(&b, 0.5);

    let out = edgecloud(&[
        "bench",
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: Value = serde_json::from_slice(&out.stdout).unwrap();
    let groups = c["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 4);
    for g in groups {
        let ga = ra
            .summary
            .group(
                g["policy"].as_str().unwrap(),
                g["deadline_ms"].as_u64().unwrap(),
            )
            .unwrap();
        let gb = rb
            .summary
            .group(
                g["policy"].as_str().unwrap(),
                g["deadline_ms"].as_u64().unwrap(),
            )
            .unwrap();
        let fig = g["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["figure"] == "latency p50 ms")
            .unwrap();
        let (pa, pb) = (ga.latency_ms.unwrap().p50, gb.latency_ms.unwrap().p50);
        assert_eq!(fig["a"].as_f64().unwrap(), pa);
        assert_eq!(fig["b"].as_f64().unwrap(), pb);
        assert!((fig["ratio"].as_f64().unwrap() - pb / pa).abs() < 1e-12);
    }

    let out = edgecloud(&["bench", "compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("race @ 120 ms"), "{text}");
    assert!(text.contains("latency p95 ms"), "{text}");
    assert!(text.contains("B / A"), "{text}");

    // A directory that is not a report is a clear error, not a panic.
    let empty = out_dir("bench-not-a-report");
    std::fs::create_dir_all(&empty).unwrap();
    let out = edgecloud(&[
        "bench",
        "compare",
        a.to_str().unwrap(),
        empty.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("report B") && err.contains("summary.json"),
        "{err}"
    );

    // `bench report` rebuilds the files from runs.jsonl.
    std::fs::remove_file(a.join(REPORT_FILE)).unwrap();
    std::fs::remove_file(a.join(CHART_FILES[0])).unwrap();
    let before = read_json(&a.join(SUMMARY_FILE));
    let out = edgecloud(&["bench", "report", a.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_output_files(&a);
    assert_eq!(read_json(&a.join(SUMMARY_FILE))["groups"], before["groups"]);
}

// ---- The real binary, the tiny local model and a loopback cloud ----------

mod e2e {
    use super::{check_output_files, check_summary_against_runs, read_json, read_lines};
    use crate::support::http::{Flavor, TestServer};
    use crate::support::models::{fresh_path, tiny_model};
    use edgecloud_bench::{RUNS_FILE, SUMMARY_FILE};
    use serde_json::Value;
    use std::io::{BufRead as _, BufReader};
    use std::path::{Path, PathBuf};
    use std::process::{Command, Output, Stdio};

    const KEY_VAR: &str = "EDGECLOUD_BENCH_TEST_KEY";
    const KEY: &str = "sk-bench-test-0123456789abcdef";

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a test runtime")
    }

    fn bench_cmd(args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_edgecloud"));
        c.arg("bench")
            .args(args)
            .env_remove("EDGECLOUD_LOG")
            .env(KEY_VAR, KEY);
        c
    }

    fn bench(args: &[&str]) -> Output {
        bench_cmd(args).output().expect("the edgecloud binary runs")
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    fn cloud_args(url: &str) -> Vec<String> {
        [
            "--base-url",
            url,
            "--cloud-model",
            "test-model",
            "--api-key-env",
            KEY_VAR,
        ]
        .map(String::from)
        .to_vec()
    }

    fn local_args() -> Vec<String> {
        ["--model", tiny_model().to_str().unwrap(), "--threads", "2"]
            .map(String::from)
            .to_vec()
    }

    fn workload() -> PathBuf {
        let path = fresh_path("bench-e2e.jsonl");
        std::fs::write(
            &path,
            "{\"id\": \"capital\", \"prompt\": \"Capital of France?\", \"expected\": \"Paris\", \"tag\": \"qa\", \"sampling\": {\"max_tokens\": 6, \"temperature\": 0}}\n\
             {\"id\": \"chat\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hello\"}], \"sampling\": {\"max_tokens\": 6, \"seed\": 3}}\n\
             {\"prompt\": \"Name a colour.\", \"sampling\": {\"max_tokens\": 4}}\n",
        )
        .unwrap();
        path
    }

    fn run_bench(out: &Path, extra: &[&str], url: &str) -> Output {
        let wl = workload();
        let mut args: Vec<String> = vec![
            "--workload".into(),
            wl.to_str().unwrap().into(),
            "--out".into(),
            out.to_str().unwrap().into(),
        ];
        args.extend(local_args());
        args.extend(cloud_args(url));
        args.extend(extra.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        bench(&refs)
    }

    fn sha256sum(path: &Path) -> Option<String> {
        let out = Command::new("sha256sum").arg(path).output().ok()?;
        out.status.success().then(|| {
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string()
        })
    }

    #[test]
    fn bench_concurrency_runs_waves_on_a_pool_and_reports_throughput() {
        let rt = runtime();
        let server = rt.block_on(TestServer::openai(Flavor::OpenAi, &["Paris", "."]));
        let out = fresh_path("bench-concurrency");
        let res = run_bench(
            &out,
            &[
                "--policies",
                "local-only,race",
                "--deadlines-ms",
                "8000",
                "--runs",
                "2",
                "--warmup",
                "0",
                "--concurrency",
                "3",
            ],
            &server.base_url(),
        );
        let stderr = text(&res.stderr);
        assert!(res.status.success(), "stderr: {stderr}");
        check_output_files(&out);
        check_summary_against_runs(&out);
        let runs = read_lines(&out.join(RUNS_FILE));
        assert_eq!(runs.len(), 2 * 3 * 2, "policies x items x runs");
        // A wave of three starts together: every run of a wave has the
        // same start, and no run found its lanes busy (one instance each).
        for r in &runs {
            assert!(r["started_ms"].is_number(), "{r}");
            for lane in r["lanes"].as_array().unwrap() {
                assert_ne!(lane["state"], "busy", "{r}");
            }
        }
        let summary = read_json(&out.join(SUMMARY_FILE));
        assert_eq!(summary["settings"]["concurrency"], 3);
        for g in summary["groups"].as_array().unwrap() {
            let t = &g["throughput"];
            assert!(t["span_s"].as_f64().unwrap() > 0.0, "{g}");
            assert!(t["runs_per_s"].as_f64().unwrap() > 0.0, "{g}");
        }
        assert!(stderr.contains("at concurrency 3"), "{stderr}");
    }

    #[test]
    fn bench_runs_every_combination_and_writes_a_consistent_report() {
        let rt = runtime();
        let server = rt.block_on(TestServer::openai(Flavor::OpenAi, &["Paris", "."]));
        let out = fresh_path("bench-e2e");
        let res = run_bench(
            &out,
            &[
                "--policies",
                "local-only,cloud-only,race,cascade",
                "--deadlines-ms",
                "3000,8000",
                "--runs",
                "2",
                "--warmup",
                "1",
            ],
            &server.base_url(),
        );
        let stderr = text(&res.stderr);
        assert!(res.status.success(), "stderr: {stderr}");
        // Progress on stderr (not a terminal here: whole lines) with an ETA.
        assert!(stderr.contains("72/72 runs (24 warm-up)"), "{stderr}");
        assert!(stderr.contains("ETA"), "{stderr}");

        check_output_files(&out);
        check_summary_against_runs(&out);
        let runs = read_lines(&out.join(RUNS_FILE));
        assert_eq!(
            runs.len(),
            4 * 2 * 3 * 2,
            "policies x deadlines x items x runs"
        );
        let summary = read_json(&out.join(SUMMARY_FILE));
        assert_eq!(summary["interrupted"], false);
        assert_eq!(
            summary["settings"]["policies"],
            serde_json::json!(["local-only", "cloud-only", "race", "cascade"])
        );
        assert_eq!(
            summary["settings"]["deadlines_ms"],
            serde_json::json!([3000, 8000])
        );
        assert_eq!(summary["settings"]["local"]["threads"], 2);
        assert_eq!(summary["settings"]["cloud"]["model"], "test-model");
        assert!(summary["settings"]["cloud"]["endpoint"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:"));
        assert_eq!(summary["groups"].as_array().unwrap().len(), 8);

        // Machine, build and model are recorded.
        for key in ["cpu_model", "physical_cores", "logical_cpus", "os", "arch"] {
            assert!(!summary["machine"][key].is_null(), "machine.{key}");
        }
        assert_eq!(
            summary["build"]["edgecloud_version"],
            env!("CARGO_PKG_VERSION")
        );
        assert!(summary["build"]["native_cpu_build"].is_boolean());
        assert!(summary["build"]["llama_cpp_sys_version"].is_string());
        let model = &summary["model"];
        assert_eq!(model["file_name"], "tiny.gguf");
        assert_eq!(
            model["size_bytes"].as_u64().unwrap(),
            std::fs::metadata(tiny_model()).unwrap().len()
        );
        assert_eq!(model["quantization"], "F32");
        if let Some(want) = sha256sum(tiny_model()) {
            assert_eq!(model["sha256"], want.as_str());
        }

        // Every run of every item under every combination, and the
        // cloud-only runs carry the provider's usage.
        for r in &runs {
            let lanes = r["lanes"].as_array().unwrap();
            assert_eq!(lanes.len(), 2);
            if r["policy"] == "cloud-only" && r["status"] == "ok" {
                assert_eq!(r["winner"], "cloud");
                let cloud = &lanes[1];
                assert_eq!(cloud["provider_prompt_tokens"], 9, "{r}");
                assert_eq!(cloud["provider_completion_tokens"], 2, "{r}");
                if r["item"] == "capital" {
                    assert_eq!(r["expected_match"], true, "{r}");
                }
            }
            if r["policy"] == "local-only" {
                assert_eq!(lanes[1]["state"], "not_started");
            }
        }
        assert!(
            runs.iter()
                .any(|r| r["policy"] == "cloud-only" && r["status"] == "ok"),
            "a loopback cloud answers within 3 s"
        );

        // The key never reaches a report file.
        for entry in std::fs::read_dir(&out).unwrap() {
            let body = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            assert!(!body.contains(KEY));
        }
        assert!(!stderr.contains(KEY) && !text(&res.stdout).contains(KEY));
    }

    #[test]
    fn compare_works_on_two_real_outputs() {
        let rt = runtime();
        let server = rt.block_on(TestServer::openai(Flavor::Vllm, &["from", " cloud"]));
        let a = fresh_path("bench-real-a");
        let b = fresh_path("bench-real-b");
        for dir in [&a, &b] {
            let res = run_bench(
                dir,
                &[
                    "--policies",
                    "cloud-only,race",
                    "--deadlines-ms",
                    "5000",
                    "--runs",
                    "2",
                    "--warmup",
                    "0",
                    "--quiet",
                ],
                &server.base_url(),
            );
            assert!(res.status.success(), "stderr: {}", text(&res.stderr));
        }
        let out = Command::new(env!("CARGO_BIN_EXE_edgecloud"))
            .args([
                "bench",
                "compare",
                a.to_str().unwrap(),
                b.to_str().unwrap(),
                "--json",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let c: Value = serde_json::from_slice(&out.stdout).unwrap();
        let (sa, sb) = (
            read_json(&a.join(SUMMARY_FILE)),
            read_json(&b.join(SUMMARY_FILE)),
        );
        let groups = c["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 2);
        for (i, g) in groups.iter().enumerate() {
            assert_eq!(g["policy"], sa["groups"][i]["policy"]);
            let fig = |name: &str| {
                g["figures"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|f| f["figure"] == name)
                    .cloned()
                    .unwrap()
            };
            let lat = fig("latency p95 ms");
            let (va, vb) = (
                sa["groups"][i]["latency_ms"]["p95"].as_f64().unwrap(),
                sb["groups"][i]["latency_ms"]["p95"].as_f64().unwrap(),
            );
            assert_eq!(lat["a"].as_f64().unwrap(), va);
            assert_eq!(lat["b"].as_f64().unwrap(), vb);
            assert!((lat["ratio"].as_f64().unwrap() - vb / va).abs() < 1e-9);
            assert_eq!(fig("runs")["ratio"].as_f64().unwrap(), 1.0);
        }
        // Same machine, model and workload: only the commit-free settings
        // are compared, so nothing differs but the workload file name.
        let env = c["environment"].as_array().unwrap();
        let differs = |what: &str| {
            env.iter()
                .find(|e| e["what"] == what)
                .map(|e| e["a"] != e["b"])
                .unwrap()
        };
        assert!(!differs("CPU"));
        assert!(!differs("model sha256"));

        let out = Command::new(env!("CARGO_BIN_EXE_edgecloud"))
            .args(["bench", "compare", a.to_str().unwrap(), b.to_str().unwrap()])
            .output()
            .unwrap();
        let t = text(&out.stdout);
        assert!(
            t.contains("cloud-only @ 5000 ms") && t.contains("race @ 5000 ms"),
            "{t}"
        );
    }

    #[test]
    fn config_file_sets_the_defaults_and_compression_savings_are_counted() {
        let rt = runtime();
        let server = rt.block_on(TestServer::openai(Flavor::OpenAi, &["fine"]));
        let config = fresh_path("bench.toml");
        std::fs::write(
            &config,
            format!(
                "[cloud]\nbase_url = \"{}\"\nmodel = \"test-model\"\napi_key_env = \"{KEY_VAR}\"\n\n\
                 [harness]\npolicy = \"cloud-only\"\ndeadline_ms = 4000\ncompress_max_tokens = 20\n",
                server.base_url()
            ),
        )
        .unwrap();
        let out = fresh_path("bench-config");
        let res = bench(&[
            "--workload",
            "builtin:chat:4",
            "--config",
            config.to_str().unwrap(),
            "--runs",
            "1",
            "--warmup",
            "0",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(res.status.success(), "stderr: {}", text(&res.stderr));
        let summary = read_json(&out.join(SUMMARY_FILE));
        assert_eq!(
            summary["settings"]["policies"],
            serde_json::json!(["cloud-only"])
        );
        assert_eq!(
            summary["settings"]["deadlines_ms"],
            serde_json::json!([4000])
        );
        assert!(summary["model"].is_null(), "no local lane, no model");
        let runs = read_lines(&out.join(RUNS_FILE));
        assert_eq!(runs.len(), 4);
        for r in &runs {
            let saved = r["tokens_saved"]["compression"].as_u64().unwrap();
            // The first turn is the system prompt and one question: nothing
            // to drop. Later turns carry history the compressor drops.
            if r["item"].as_str().unwrap().ends_with("turn-0") {
                assert_eq!(saved, 0, "{r}");
            } else {
                assert!(saved > 0, "{r}");
            }
        }
        check_summary_against_runs(&out);
    }

    #[test]
    fn malformed_workload_is_reported_with_its_line_number() {
        let path = fresh_path("bench-bad.jsonl");
        std::fs::write(
            &path,
            "{\"prompt\": \"ok\"}\n{\"prompt\": \"ok too\"}\n{\"prompt\": \"broken\",\n",
        )
        .unwrap();
        let mut args = vec!["--workload".to_string(), path.to_str().unwrap().to_string()];
        args.extend(local_args());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = bench(&refs);
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("bench-bad.jsonl"), "{err}");

        let out = bench(&["--workload", "builtin:nope", "--model", "x.gguf"]);
        assert!(!out.status.success());
        assert!(
            text(&out.stderr).contains("builtin:short"),
            "{}",
            text(&out.stderr)
        );
    }

    #[test]
    fn ctrl_c_stops_cleanly_and_keeps_what_was_measured() {
        let rt = runtime();
        let server = rt.block_on(TestServer::openai(Flavor::OpenAi, &["ok"]));
        let out = fresh_path("bench-ctrl-c");
        let mut args: Vec<String> = [
            "--workload",
            "builtin:short:50",
            "--policies",
            "cloud-only",
            "--deadlines-ms",
            "5000",
            "--runs",
            "400",
            "--warmup",
            "0",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        args.extend(cloud_args(&server.base_url()));
        let mut child = bench_cmd(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Progress lines (stderr is a pipe: one line per tenth). The first
        // is printed before any run; the second after a tenth of them.
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut progress = 0;
        for line in lines.by_ref() {
            if line.unwrap().contains("/20000 runs") {
                progress += 1;
                if progress == 2 {
                    break;
                }
            }
        }
        assert_eq!(progress, 2, "the bench printed its progress");
        // The shell's own `kill`: no extra package needed.
        let kill = Command::new("sh")
            .args(["-c", &format!("kill -INT {}", child.id())])
            .status()
            .unwrap();
        assert!(kill.success());
        let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
        let status = child.wait().unwrap();
        assert_eq!(
            status.code(),
            Some(130),
            "stderr after the signal: {rest:?}"
        );
        assert!(rest.iter().any(|l| l.contains("stopping")), "{rest:?}");

        let summary = read_json(&out.join(SUMMARY_FILE));
        assert_eq!(summary["interrupted"], true);
        let kept = summary["total_runs"].as_u64().unwrap();
        assert!((2000..20000).contains(&kept), "kept {kept}");
        assert_eq!(read_lines(&out.join(RUNS_FILE)).len() as u64, kept);
        check_summary_against_runs(&out);
        check_output_files(&out);
    }
}
