//! Structured answers on the local lane alone (issue 24): validity, call
//! accuracy and generation speed with the grammar and without it, on a
//! workload of tool calls or `response_format` requests.
//!
//! `cargo run --release --example structured -- MODEL [WORKLOAD] [LIMIT] [THREADS]`
//! (default workload `data/tool-calls/tool-calls-60.workload.jsonl`).
//!
//! Three lanes on the same model, one per way of applying the grammar
//! (`LocalConfig::grammar_pass`): `off` (the model writes what it likes;
//! the answer is only validated), `check` (the default: the grammar
//! checks the model's pick, the vocabulary only when it rejects it) and
//! `full` (the grammar over the whole vocabulary before every token, as a
//! grammar-first llama.cpp sampler chain does). Each item runs on the
//! three in turn, so load on a shared machine hits them alike. Printed per
//! mode: valid answers, right function, right call (function and
//! arguments), and the median generation tokens/s, with `check` and `full`
//! as a ratio of `off`; `check` and `full` greedy answers are compared
//! (they must be identical).

use edgecloud::local::{GrammarPass, LocalConfig, LocalError, LocalLane};
use edgecloud::LaneJob;
use edgecloud_bench::Workload;
use serde_json::Value;
use std::time::{Duration, Instant};

const MODES: [(&str, GrammarPass); 3] = [
    ("off", GrammarPass::Off),
    ("check", GrammarPass::Check),
    ("full", GrammarPass::Full),
];

#[derive(Default)]
struct Tally {
    n: usize,
    valid: usize,
    name: usize,
    right: usize,
    tokens: u64,
    tps: Vec<f64>,
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let model = args
        .next()
        .expect("usage: structured MODEL [WORKLOAD] [LIMIT] [THREADS]");
    let workload = args
        .next()
        .unwrap_or_else(|| "data/tool-calls/tool-calls-60.workload.jsonl".into());
    let limit: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX);
    let threads: Option<usize> = args.next().and_then(|s| s.parse().ok());
    let w = Workload::load(&workload).expect("the workload loads");
    let lanes: Vec<LocalLane> = MODES
        .iter()
        .map(|(_, pass)| {
            LocalLane::start(LocalConfig {
                threads,
                grammar_pass: *pass,
                ..LocalConfig::new(&model)
            })
            .expect("the model loads")
        })
        .collect();
    println!(
        "model {model}; workload {workload} ({} items, up to {limit}); tool calls: {}",
        w.items.len(),
        lanes[0].info().tool_calls
    );
    let mut tallies: Vec<Tally> = MODES.iter().map(|_| Tally::default()).collect();
    let mut differ = 0;
    for item in w.items.iter().take(limit) {
        let mut texts = Vec::new();
        for (m, lane) in lanes.iter().enumerate() {
            let req = &item.request;
            let job = LaneJob::new(
                req.messages.clone(),
                req.sampling.clone(),
                Instant::now() + Duration::from_secs(600),
            );
            let t = &mut tallies[m];
            t.n += 1;
            let (answer, valid) = match lane.generate(job) {
                Ok(c) => {
                    if std::env::var("VERBOSE").as_deref() == Ok("2") {
                        println!(
                            "{} {}: {:?} {:?} {:?}",
                            item.id, MODES[m].0, c.finish_reason, c.text, c.tool_calls
                        );
                    }
                    // Under `off` the lane does not judge: the example does.
                    let valid = req.sampling.check_answer(&c.text, &c.tool_calls).is_ok();
                    t.tokens += u64::from(c.completion_tokens);
                    t.tps.extend(c.timings.gen_tokens_per_s);
                    let answer = match c.tool_calls.first() {
                        Some(call) => serde_json::json!({"name": call.function.name,
                            "arguments": serde_json::from_str::<Value>(&call.function.arguments)
                                .unwrap_or(Value::Null)})
                        .to_string(),
                        None => c.text.clone(),
                    };
                    (answer, valid)
                }
                Err(LocalError::InvalidAnswer(e)) => (format!("(invalid: {e})"), false),
                Err(e) => panic!("{}: {e}", item.id),
            };
            if valid {
                t.valid += 1;
            }
            let expected: Option<Value> = item
                .expected
                .as_deref()
                .and_then(|e| serde_json::from_str(e).ok());
            if let (Some(exp), Ok(got)) = (&expected, serde_json::from_str::<Value>(&answer)) {
                if exp.get("name").is_some() && exp.get("name") == got.get("name") {
                    t.name += 1;
                }
            }
            if item.matches(&answer) == Some(true) {
                t.right += 1;
            }
            if std::env::var_os("VERBOSE").is_some() {
                println!("{:>12} {:>5}: {answer}", item.id, MODES[m].0);
            }
            texts.push(answer);
        }
        if texts[1] != texts[2] && item.request.sampling.temperature == 0.0 {
            differ += 1;
            println!(
                "{}: check and full differ:\n  {}\n  {}",
                item.id, texts[1], texts[2]
            );
        }
    }
    let base = median(&mut tallies[0].tps.clone());
    println!("mode   items valid name right tokens tok/s(median) ratio-to-off");
    for (m, t) in tallies.iter_mut().enumerate() {
        let tps = median(&mut t.tps);
        let ratio = match (tps, base) {
            (Some(a), Some(b)) => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        println!(
            "{:<6} {:>5} {:>5} {:>4} {:>5} {:>6} {:>13} {ratio:>12}",
            MODES[m].0,
            t.n,
            t.valid,
            t.name,
            t.right,
            t.tokens,
            tps.map_or("-".into(), |v| format!("{v:.1}")),
        );
    }
    println!("greedy answers where check and full differ: {differ}");
}
