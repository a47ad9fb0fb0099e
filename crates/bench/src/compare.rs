//! Comparing two bench reports figure by figure: the values of A and B,
//! their difference and their ratio (B / A), for every (policy, deadline)
//! present in both, and what differs in machine, build and model. It reads
//! [`Summary`] values only; it must not recompute figures from runs.

use super::report::num;
use super::summary::{GroupSummary, Summary};
use edgecloud_core::lane::Lane;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// One figure in both reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FigureDiff {
    /// The figure's name (`latency p95 ms`).
    pub figure: String,
    /// Its value in A.
    pub a: Option<f64>,
    /// Its value in B.
    pub b: Option<f64>,
    /// B - A.
    pub delta: Option<f64>,
    /// B / A (absent when A is 0 or either is missing).
    pub ratio: Option<f64>,
}

impl FigureDiff {
    fn new(figure: &str, a: Option<f64>, b: Option<f64>) -> Self {
        let (delta, ratio) = match (a, b) {
            (Some(a), Some(b)) => (Some(b - a), (a != 0.0).then(|| b / a)),
            _ => (None, None),
        };
        Self {
            figure: figure.into(),
            a,
            b,
            delta,
            ratio,
        }
    }
}

/// The figures of one (policy, deadline) in both reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupDiff {
    /// The policy.
    pub policy: String,
    /// The deadline.
    pub deadline_ms: u64,
    /// Every figure.
    pub figures: Vec<FigureDiff>,
}

/// A setting of machine, build or model and its value in each report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvDiff {
    /// What (`CPU`, `model sha256`, ...).
    pub what: String,
    /// In A.
    pub a: String,
    /// In B.
    pub b: String,
}

/// Everything `edgecloud bench compare` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Machine, build and model settings, each with both values.
    pub environment: Vec<EnvDiff>,
    /// Combinations present in both reports.
    pub groups: Vec<GroupDiff>,
    /// Combinations only in A (`policy @ deadline ms`).
    pub only_in_a: Vec<String>,
    /// Combinations only in B.
    pub only_in_b: Vec<String>,
}

impl Comparison {
    /// The figure of one combination, when both reports have it.
    pub fn figure(&self, policy: &str, deadline_ms: u64, figure: &str) -> Option<&FigureDiff> {
        self.groups
            .iter()
            .find(|g| g.policy == policy && g.deadline_ms == deadline_ms)?
            .figures
            .iter()
            .find(|f| f.figure == figure)
    }
}

/// The figures compared, by name, in display order.
pub fn figures(g: &GroupSummary) -> Vec<(&'static str, Option<f64>)> {
    let p = |d: Option<super::stats::Distribution>, f: fn(&super::stats::Distribution) -> f64| {
        d.as_ref().map(f)
    };
    let local = g.lane(Lane::Local);
    let cloud = g.lane(Lane::Cloud);
    vec![
        ("runs", Some(g.runs as f64)),
        ("deadline hit rate", Some(g.deadline_hit_rate)),
        ("latency p50 ms", p(g.latency_ms, |d| d.p50)),
        ("latency p95 ms", p(g.latency_ms, |d| d.p95)),
        ("latency p99 ms", p(g.latency_ms, |d| d.p99)),
        ("ttft p50 ms", p(g.ttft_ms, |d| d.p50)),
        ("ttft p95 ms", p(g.ttft_ms, |d| d.p95)),
        ("ttft p99 ms", p(g.ttft_ms, |d| d.p99)),
        ("overshoot p99 ms", p(g.overshoot_ms, |d| d.p99)),
        ("win share local", Some(g.win_share.local)),
        ("win share cloud", Some(g.win_share.cloud)),
        ("win share none", Some(g.win_share.none)),
        ("busy-skip rate", Some(g.busy_skip_rate)),
        ("late workers", Some(g.late_workers as f64)),
        ("late overrun p99 ms", p(g.late_overrun_ms, |d| d.p99)),
        (
            "local prompt tok/s p50",
            local.and_then(|l| p(l.prompt_tokens_per_s, |d| d.p50)),
        ),
        (
            "local gen tok/s p50",
            local.and_then(|l| p(l.gen_tokens_per_s, |d| d.p50)),
        ),
        (
            "local lane p50 ms",
            local.and_then(|l| p(l.total_ms, |d| d.p50)),
        ),
        (
            "cloud lane p50 ms",
            cloud.and_then(|l| p(l.total_ms, |d| d.p50)),
        ),
        ("cloud prompt tokens", Some(g.cloud_tokens.prompt as f64)),
        (
            "cloud completion tokens",
            Some(g.cloud_tokens.completion as f64),
        ),
        (
            "tokens saved compression",
            Some(g.tokens_saved.compression as f64),
        ),
        (
            "tokens saved pre-score",
            Some(g.tokens_saved.pre_score as f64),
        ),
    ]
}

fn environment(s: &Summary) -> Vec<(&'static str, String)> {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    vec![
        ("CPU", s.machine.cpu_model.clone()),
        ("cores", s.machine.physical_cores.to_string()),
        (
            "threads used",
            s.settings
                .local
                .as_ref()
                .and_then(|l| l.threads)
                .map_or("–".into(), |t| t.to_string()),
        ),
        (
            "memory bytes",
            s.machine
                .memory_bytes
                .map_or("unknown".into(), |m| m.to_string()),
        ),
        ("OS", opt(&s.machine.os_name)),
        (
            "model file",
            s.model.as_ref().map_or("–".into(), |m| m.file_name.clone()),
        ),
        (
            "model sha256",
            s.model.as_ref().map_or("–".into(), |m| opt(&m.sha256)),
        ),
        (
            "quantisation",
            s.model
                .as_ref()
                .map_or("–".into(), |m| opt(&m.quantization)),
        ),
        (
            "GPU layers",
            s.settings
                .local
                .as_ref()
                .map_or("–".into(), |l| l.gpu_layers.to_string()),
        ),
        ("edgecloud", s.build.edgecloud_version.clone()),
        ("commit", opt(&s.build.git_commit)),
        ("llama-cpp-sys-2", opt(&s.build.llama_cpp_sys_version)),
        ("native CPU build", s.build.native_cpu_build.to_string()),
        ("portable build", s.build.portable.to_string()),
        (
            "ggml backends",
            s.machine
                .ggml
                .as_ref()
                .map_or("–".into(), |g| g.describe_backends()),
        ),
        (
            "ggml devices",
            s.machine
                .ggml
                .as_ref()
                .map_or("–".into(), |g| g.describe_devices()),
        ),
        ("workload", s.settings.workload.clone()),
    ]
}

/// Compares report A with report B.
pub fn compare(a: &Summary, b: &Summary) -> Comparison {
    let environment = environment(a)
        .into_iter()
        .zip(environment(b))
        .map(|((what, a), (_, b))| EnvDiff {
            what: what.into(),
            a,
            b,
        })
        .collect();
    let key = |g: &GroupSummary| format!("{} @ {} ms", g.policy, g.deadline_ms);
    let mut groups = Vec::new();
    let mut only_in_a = Vec::new();
    for ga in &a.groups {
        match b.group(&ga.policy, ga.deadline_ms) {
            Some(gb) => groups.push(GroupDiff {
                policy: ga.policy.clone(),
                deadline_ms: ga.deadline_ms,
                figures: figures(ga)
                    .into_iter()
                    .zip(figures(gb))
                    .map(|((name, va), (_, vb))| FigureDiff::new(name, va, vb))
                    .collect(),
            }),
            None => only_in_a.push(key(ga)),
        }
    }
    let only_in_b = b
        .groups
        .iter()
        .filter(|g| a.group(&g.policy, g.deadline_ms).is_none())
        .map(key)
        .collect();
    Comparison {
        environment,
        groups,
        only_in_a,
        only_in_b,
    }
}

/// The comparison as text: differing settings first, then one table per
/// combination.
pub fn render_comparison(c: &Comparison, a_name: &str, b_name: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {a_name}\nB: {b_name}\n");
    let differing: Vec<&EnvDiff> = c.environment.iter().filter(|e| e.a != e.b).collect();
    if differing.is_empty() {
        let _ = writeln!(out, "Machine, build, model and workload: the same.\n");
    } else {
        let _ = writeln!(out, "Differences in machine, build, model or workload:");
        for e in differing {
            let _ = writeln!(out, "  {:<18} A: {}\n  {:<18} B: {}", e.what, e.a, "", e.b);
        }
        let _ = writeln!(out);
    }
    for g in &c.groups {
        let _ = writeln!(out, "{} @ {} ms", g.policy, g.deadline_ms);
        let _ = writeln!(
            out,
            "  {:<26} {:>12} {:>12} {:>12} {:>8}",
            "figure", "A", "B", "B - A", "B / A"
        );
        for f in &g.figures {
            let _ = writeln!(
                out,
                "  {:<26} {:>12} {:>12} {:>12} {:>8}",
                f.figure,
                num(f.a),
                num(f.b),
                num(f.delta),
                f.ratio.map_or("–".into(), |r| format!("{r:.3}"))
            );
        }
        let _ = writeln!(out);
    }
    if !c.only_in_a.is_empty() {
        let _ = writeln!(out, "Only in A: {}", c.only_in_a.join(", "));
    }
    if !c.only_in_b.is_empty() {
        let _ = writeln!(out, "Only in B: {}", c.only_in_b.join(", "));
    }
    if c.groups.is_empty() {
        let _ = writeln!(
            out,
            "No policy and deadline in common: nothing to compare figure by figure."
        );
    }
    out
}
