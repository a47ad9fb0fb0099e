//! The output directory of a bench: `runs.jsonl` (appended and flushed
//! run by run, so an interrupted bench keeps what it measured),
//! `summary.json`, `report.md` and the SVG charts; and reading them back.
//! It renders what a [`Summary`] holds; it must not compute figures.

use super::error::BenchError;
use super::record::RunRecord;
use super::stats::Distribution;
use super::summary::{GroupSummary, Summary, SUMMARY_FORMAT};
use super::svg::{self, RangeRow, Series, StackRow};
use edgecloud_core::lane::Lane;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Every run's record, one JSON object per line.
pub const RUNS_FILE: &str = "runs.jsonl";
/// The summary ([`Summary`] as JSON).
pub const SUMMARY_FILE: &str = "summary.json";
/// The report a person reads first.
pub const REPORT_FILE: &str = "report.md";
/// The charts, in the order the report shows them.
pub const CHART_FILES: [&str; 6] = [
    "latency.svg",
    "latency_by_lane.svg",
    "ttft.svg",
    "deadline_hit_rate.svg",
    "win_share.svg",
    "late_overrun.svg",
];

/// Appends run records to `runs.jsonl`, flushing each line so that a
/// bench stopped at any moment keeps every finished run.
#[derive(Debug)]
pub struct RunsWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl RunsWriter {
    /// Creates `dir` (and parents) and an empty `runs.jsonl` in it
    /// (replacing an earlier one).
    pub fn create(dir: &Path) -> Result<Self, BenchError> {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io("creating", dir, e))?;
        let path = dir.join(RUNS_FILE);
        let file = File::create(&path).map_err(|e| BenchError::io("creating", &path, e))?;
        Ok(Self {
            path,
            out: BufWriter::new(file),
        })
    }

    /// Writes one record as one line and flushes it.
    pub fn append(&mut self, record: &RunRecord) -> Result<(), BenchError> {
        let line = serde_json::to_string(record).expect("a run record always serialises");
        writeln!(self.out, "{line}")
            .and_then(|()| self.out.flush())
            .map_err(|e| BenchError::io("writing", &self.path, e))
    }
}

fn write_atomically(path: &Path, contents: &str) -> Result<(), BenchError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).map_err(|e| BenchError::io("writing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| BenchError::io("writing", path, e))
}

/// Writes `summary.json`, `report.md` and the charts into `dir`.
pub fn write_report(dir: &Path, summary: &Summary) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io("creating", dir, e))?;
    let json = serde_json::to_string_pretty(summary).expect("a summary always serialises");
    write_atomically(&dir.join(SUMMARY_FILE), &(json + "\n"))?;
    for (name, svg) in render_charts(summary) {
        write_atomically(&dir.join(name), &svg)?;
    }
    write_atomically(&dir.join(REPORT_FILE), &render_markdown(summary))
}

/// Reads `runs.jsonl` from `dir`; a bad line is an error naming it.
pub fn read_runs(dir: &Path) -> Result<Vec<RunRecord>, BenchError> {
    let path = dir.join(RUNS_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io("reading", &path, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| BenchError::BadReport {
                path: path.clone(),
                reason: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

/// Reads `summary.json` from `dir` (or from `dir` itself when it is the
/// file).
pub fn read_summary(dir: &Path) -> Result<Summary, BenchError> {
    let path = if dir.is_file() {
        dir.to_path_buf()
    } else {
        dir.join(SUMMARY_FILE)
    };
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io("reading", &path, e))?;
    let summary: Summary = serde_json::from_str(&text).map_err(|e| BenchError::BadReport {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    if summary.format != SUMMARY_FORMAT {
        return Err(BenchError::BadReport {
            path,
            reason: format!("format `{}`, expected `{SUMMARY_FORMAT}`", summary.format),
        });
    }
    Ok(summary)
}

pub(crate) fn num(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

pub(crate) fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn three(d: Option<Distribution>) -> String {
    match d {
        None => "–".into(),
        Some(d) => format!(
            "{} / {} / {}",
            num(Some(d.p50)),
            num(Some(d.p95)),
            num(Some(d.p99))
        ),
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn label(g: &GroupSummary) -> String {
    format!("{} @ {} ms", g.policy, g.deadline_ms)
}

/// The report in Markdown: tables first, then charts, machine and build,
/// and the definitions. Each table is a list of columns (header,
/// alignment, cell), the machine section a list of rows.
pub fn render_markdown(s: &Summary) -> String {
    let mut md = String::new();
    let st = &s.settings;
    let _ = writeln!(md, "# edgecloud bench report\n");
    if s.interrupted {
        let _ = writeln!(
            md,
            "> **Interrupted**: the bench was stopped before the end; these figures cover the {} runs measured.\n",
            s.total_runs
        );
    }
    let _ = writeln!(
        md,
        "Workload `{}` ({} requests), {} measured pass(es) and {} warm-up pass(es) per combination; \
         {} runs recorded. Started {}, wall time {:.1} s. Machine: {}, {} threads, {}.\n",
        st.workload,
        st.items,
        st.runs,
        st.warmup,
        s.total_runs,
        s.started_at,
        s.wall_s,
        s.machine.cpu_model,
        local_threads(s),
        if s.build.native_cpu_build {
            "native CPU build"
        } else if s.build.portable {
            "portable build (CPU kernels chosen at run time)"
        } else {
            "default (non-native) build"
        }
    );

    if s.groups.iter().any(|g| g.accuracy.checked > 0) {
        let _ = writeln!(md, "## Quality per policy and deadline\n");
        table(&mut md, QUALITY, &s.groups);
        let _ = writeln!(
            md,
            "\n*Gap recovered*: (accuracy - local-only accuracy) / (cloud-only accuracy - local-only accuracy) at the same deadline. \
             `edgecloud bench calibrate DIR` simulates a cascade at every threshold of each local confidence signal from the local-only and cloud-only runs.\n"
        );
    }
    if s.groups.iter().any(|g| g.cost.is_some()) {
        let _ = writeln!(md, "## Cost per policy and deadline\n");
        table(&mut md, COST, &s.groups);
        let _ = writeln!(
            md,
            "\n*Cloud $*: the provider's token counts times `[prices]`; *$ per correct answer*: cloud $ / answers graded right, \
             to compare each policy with cloud-only. The cloud-only figures estimate the local lane's answers from its own token counts (docs/cost.md). \
             *Latency saved*: the cloud-only runs' latency p50 minus this policy's, at the same deadline (measured, both in this bench).\n"
        );
    }
    let _ = writeln!(md, "## Results per policy and deadline\n");
    table(&mut md, RESULTS, &s.groups);
    let _ = writeln!(md, "\n## Lanes\n");
    let lanes: Vec<LaneRow<'_>> = s
        .groups
        .iter()
        .flat_map(|g| g.lanes.iter().map(move |l| (g, l)))
        .collect();
    table(&mut md, &lane_columns(), &lanes);
    // Only for workloads whose requests ask for JSON or a tool call.
    if lanes.iter().any(|(_, l)| l.valid + l.invalid > 0) {
        let _ = writeln!(
            md,
            "\n## Validity (answers that must be JSON or a tool call)\n"
        );
        table(&mut md, &validity_columns(), &lanes);
    }
    let _ = writeln!(md, "\n## Tokens and answers\n");
    table(&mut md, TOKENS, &s.groups);

    let _ = writeln!(md, "\n## Charts\n");
    for (name, title) in CHART_FILES.iter().zip(CHART_TITLES) {
        let _ = writeln!(md, "![{title}]({name})\n");
    }

    let _ = writeln!(md, "## Machine and build\n");
    let _ = writeln!(md, "| | |\n|---|---|");
    for (key, value) in MACHINE {
        if let Some(v) = value(s) {
            let _ = writeln!(md, "| {key} | {} |", v.replace('|', "\\|"));
        }
    }

    let _ = writeln!(
        md,
        "\n## Definitions\n\n\
         - **latency**: start of a run to its settlement, every run. **TTFT**: start to the first \
         token the caller received (streaming runs). Lane times count from that lane's admission.\n\
         - **deadline hit**: the run settled with an answer (status `ok`); the harness settles by \
         the deadline, so this is an answer in time.\n\
         - **wins**: share of runs each lane won; `none`: no answer.\n\
         - **busy skips**: share of runs in which a lane was absent because its slot was still \
         held (usually by a late worker of an earlier run).\n\
         - **late workers**: workers still running when their run settled; **overrun**: how long \
         after settlement they returned.\n\
         - **tok/s**: the winning lane's own measurement (lane reports carry no engine timings): \
         prompt processing and generation for the local lane, generation for the cloud.\n\
         - **cloud tokens**: provider-reported usage only. **saved**: prompt tokens not sent to \
         the cloud, as the compressor or the local tokenizer estimated them.\n\
         - **percentiles**: {}.",
        s.percentile_method
    );
    md
}

/// The chart titles, in [`CHART_FILES`] order.
const CHART_TITLES: [&str; 6] = [
    "Latency per policy and deadline",
    "Lane time per lane",
    "Time to first token",
    "Deadline-hit rate per deadline",
    "Lane win share",
    "Late-worker overruns",
];

/// A table column: its header, whether it is right-aligned (numbers),
/// and its cell for one row.
struct Column<R: ?Sized> {
    header: &'static str,
    numeric: bool,
    cell: fn(&R) -> String,
}

const fn text<R: ?Sized>(header: &'static str, cell: fn(&R) -> String) -> Column<R> {
    Column {
        header,
        numeric: false,
        cell,
    }
}

const fn number<R: ?Sized>(header: &'static str, cell: fn(&R) -> String) -> Column<R> {
    Column {
        header,
        numeric: true,
        cell,
    }
}

/// Writes a Markdown table: header, alignment row, one line per row.
fn table<R>(md: &mut String, columns: &[Column<R>], rows: &[R]) {
    let line = |cells: Vec<String>| format!("| {} |", cells.join(" | "));
    let _ = writeln!(
        md,
        "{}",
        line(columns.iter().map(|c| c.header.into()).collect())
    );
    let align: String = columns
        .iter()
        .map(|c| if c.numeric { "---:|" } else { "---|" })
        .collect();
    let _ = writeln!(md, "|{align}");
    for r in rows {
        let _ = writeln!(
            md,
            "{}",
            line(columns.iter().map(|c| (c.cell)(r)).collect())
        );
    }
}

const QUALITY: &[Column<GroupSummary>] = &[
    text("policy", |g| g.policy.clone()),
    number("deadline ms", |g| g.deadline_ms.to_string()),
    number("accuracy", |g| g.accuracy.rate().map_or("–".into(), pct)),
    number("right / graded", |g| {
        format!("{} / {}", g.accuracy.matched, g.accuracy.checked)
    }),
    number("cloud-call share", |g| pct(g.cloud_call_share)),
    number("cloud tokens (provider, prompt + completion)", |g| {
        if g.cloud_tokens.runs_reporting == 0 {
            "–".to_string()
        } else {
            (g.cloud_tokens.prompt + g.cloud_tokens.completion).to_string()
        }
    }),
    number("latency p50 / p95 ms", |g| {
        format!(
            "{} / {}",
            num(g.latency_ms.map(|d| d.p50)),
            num(g.latency_ms.map(|d| d.p95))
        )
    }),
    number("gap recovered", |g| g.gap_recovered.map_or("–".into(), pct)),
];

/// What the runs cost, where the config prices the cloud model.
const COST: &[Column<GroupSummary>] = &[
    text("policy", |g| g.policy.clone()),
    number("deadline ms", |g| g.deadline_ms.to_string()),
    number("cloud $", |g| usd(g.cost.as_ref().map(|c| c.cloud_usd))),
    number("$ per answered request", |g| {
        usd(g.cost.as_ref().and_then(|c| c.usd_per_answered))
    }),
    number("$ per correct answer", |g| {
        usd(g.cost.as_ref().and_then(|c| c.usd_per_correct))
    }),
    number("cloud-only $ (estimate)", |g| {
        usd(g.cost.as_ref().map(|c| c.cloud_only_usd_estimate))
    }),
    number("saved $ (estimate)", |g| {
        usd(g.cost.as_ref().map(|c| c.saved_usd_estimate))
    }),
    number("latency saved p50 ms", |g| num(g.latency_saved_ms)),
];

/// Dollars, to the precision small per-answer costs need.
fn usd(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.6}"))
}

const RESULTS: &[Column<GroupSummary>] = &[
    text("policy", |g| g.policy.clone()),
    number("deadline ms", |g| g.deadline_ms.to_string()),
    number("runs", |g| g.runs.to_string()),
    number("deadline hit", |g| pct(g.deadline_hit_rate)),
    number("latency p50 / p95 / p99 ms", |g| three(g.latency_ms)),
    number("TTFT p50 / p95 / p99 ms", |g| three(g.ttft_ms)),
    number("wins local / cloud / none", |g| {
        let w = &g.win_share;
        format!("{} / {} / {}", pct(w.local), pct(w.cloud), pct(w.none))
    }),
    number("busy skips", |g| pct(g.busy_skip_rate)),
    number("late workers", |g| g.late_workers.to_string()),
    number("overrun p99 ms", |g| num(g.late_overrun_ms.map(|d| d.p99))),
];

/// One lane of one group.
type LaneRow<'a> = (&'a GroupSummary, &'a super::summary::LaneSummary);

/// The lanes table's columns (a function: its rows borrow the summary).
fn lane_columns<'a>() -> [Column<LaneRow<'a>>; 15] {
    [
        text("policy", |(g, _)| g.policy.clone()),
        number("deadline ms", |(g, _)| g.deadline_ms.to_string()),
        text("lane", |(_, l)| l.lane.to_string()),
        number("started", |(_, l)| l.started.to_string()),
        number("completed", |(_, l)| l.completed.to_string()),
        number("failed", |(_, l)| l.failed.to_string()),
        number("cancelled", |(_, l)| l.cancelled.to_string()),
        number("late", |(_, l)| l.late.to_string()),
        number("busy", |(_, l)| l.busy.to_string()),
        number("skipped", |(_, l)| l.skipped.to_string()),
        number("wins", |(_, l)| l.wins.to_string()),
        number("lane total p50 / p95 / p99 ms", |(_, l)| three(l.total_ms)),
        number("lane TTFT p50 ms", |(_, l)| num(l.ttft_ms.map(|d| d.p50))),
        number("prompt tok/s p50", |(_, l)| {
            num(l.prompt_tokens_per_s.map(|d| d.p50))
        }),
        number("gen tok/s p50", |(_, l)| {
            num(l.gen_tokens_per_s.map(|d| d.p50))
        }),
    ]
}

/// The validity table's columns: whole answers judged per lane.
fn validity_columns<'a>() -> [Column<LaneRow<'a>>; 5] {
    [
        text("policy", |(g, _)| g.policy.clone()),
        number("deadline ms", |(g, _)| g.deadline_ms.to_string()),
        text("lane", |(_, l)| l.lane.to_string()),
        number("valid / judged", |(_, l)| {
            format!("{} / {}", l.valid, l.valid + l.invalid)
        }),
        number("valid share", |(_, l)| {
            let judged = l.valid + l.invalid;
            if judged == 0 {
                "–".to_string()
            } else {
                pct(l.valid as f64 / judged as f64)
            }
        }),
    ]
}

const TOKENS: &[Column<GroupSummary>] = &[
    text("policy", |g| g.policy.clone()),
    number("deadline ms", |g| g.deadline_ms.to_string()),
    number("cloud prompt tokens (provider)", |g| {
        g.cloud_tokens.prompt.to_string()
    }),
    number("cloud completion tokens (provider)", |g| {
        g.cloud_tokens.completion.to_string()
    }),
    number("runs with provider usage", |g| {
        g.cloud_tokens.runs_reporting.to_string()
    }),
    number("saved by compression (est.)", |g| {
        g.tokens_saved.compression.to_string()
    }),
    number("saved by pre-scoring (est.)", |g| {
        g.tokens_saved.pre_score.to_string()
    }),
    number("expected answers matched", |g| {
        if g.accuracy.checked == 0 {
            "–".to_string()
        } else {
            format!("{} / {}", g.accuracy.matched, g.accuracy.checked)
        }
    }),
];

fn local_threads(s: &Summary) -> String {
    let local = s.settings.local.as_ref();
    let threads = local
        .and_then(|l| l.threads)
        .map_or("–".into(), |t| t.to_string());
    match local.and_then(|l| l.thread_policy.as_deref()) {
        Some(policy) => format!("{threads} ({policy})"),
        None => threads,
    }
}

/// A row of the machine-and-build table: its key and its value, `None`
/// when the row does not apply.
type MachineRow = (&'static str, fn(&Summary) -> Option<String>);

const MACHINE: &[MachineRow] = &[
    ("CPU", |s| Some(s.machine.cpu_model.clone())),
    ("cores", |s| {
        let m = &s.machine;
        Some(format!(
            "{} physical, {} logical available",
            m.physical_cores, m.logical_cpus
        ))
    }),
    ("threads used (local)", |s| Some(local_threads(s))),
    ("local answers", |s| {
        let l = s.settings.local.as_ref()?;
        let k = l.samples?;
        Some(format!(
            "consensus of {k} samples per item (self-consistency){}",
            l.sample_temperature
                .map(|t| format!("; greedy items sampled at temperature {t}"))
                .unwrap_or_default()
        ))
    }),
    ("memory", |s| {
        Some(s.machine.memory_bytes.map_or("unknown".into(), bytes))
    }),
    ("GPU offload", |s| {
        let b = &s.build;
        Some(match (&s.settings.local, b.gpu_backends.is_empty()) {
            (Some(l), _) if l.gpu_layers > 0 && l.offload.is_some() => format!(
                "--gpu-layers {}: {}",
                l.gpu_layers,
                l.offload.as_deref().unwrap_or_default()
            ),
            (Some(l), _) if l.gpu_layers > 0 => format!(
                "{} layers ({})",
                l.gpu_layers,
                if b.gpu_backends.is_empty() {
                    "no GPU backend compiled in".into()
                } else {
                    b.gpu_backends.join(", ")
                }
            ),
            (_, true) => "none (CPU only build)".into(),
            (_, false) => format!("0 layers (compiled: {})", b.gpu_backends.join(", ")),
        })
    }),
    ("OS", |s| {
        let m = &s.machine;
        Some(format!(
            "{} {} ({}), kernel {}",
            m.os_name.as_deref().unwrap_or(&m.os),
            m.arch,
            m.os,
            m.kernel.as_deref().unwrap_or("unknown")
        ))
    }),
    ("CPU features", |s| Some(s.machine.cpu_features.join(" "))),
    ("ggml backends", |s| {
        let g = s.machine.ggml.as_ref()?;
        Some(match &g.backends_dir {
            Some(dir) => format!("{} from {}", g.describe_backends(), dir.display()),
            None => g.describe_backends(),
        })
    }),
    ("ggml devices", |s| {
        Some(s.machine.ggml.as_ref()?.describe_devices())
    }),
    ("model file", |s| Some(s.model.as_ref()?.file_name.clone())),
    ("model size", |s| {
        let m = s.model.as_ref()?;
        Some(format!("{} ({} bytes)", bytes(m.size_bytes), m.size_bytes))
    }),
    ("model sha256", |s| {
        Some(
            s.model
                .as_ref()?
                .sha256
                .clone()
                .unwrap_or_else(|| "unreadable".into()),
        )
    }),
    ("quantisation", |s| {
        Some(
            s.model
                .as_ref()?
                .quantization
                .clone()
                .unwrap_or_else(|| "unknown".into()),
        )
    }),
    ("architecture / parameters", |s| {
        let m = s.model.as_ref()?;
        Some(format!(
            "{} / {}",
            m.architecture.as_deref().unwrap_or("unknown"),
            m.parameters.map_or("unknown".into(), |p| p.to_string())
        ))
    }),
    ("model", |s| {
        s.model.is_none().then(|| "no local lane".into())
    }),
    ("cloud", |s| {
        let c = s.settings.cloud.as_ref()?;
        Some(format!("{} at {}", c.model, c.endpoint))
    }),
    ("edgecloud", |s| {
        let b = &s.build;
        Some(format!(
            "{} (commit {}, {} profile, {})",
            b.edgecloud_version,
            b.git_commit.as_deref().unwrap_or("unknown"),
            b.profile,
            b.rustc.as_deref().unwrap_or("rustc unknown")
        ))
    }),
    ("llama.cpp", |s| {
        Some(format!(
            "llama-cpp-sys-2 {}",
            s.build
                .llama_cpp_sys_version
                .as_deref()
                .unwrap_or("unknown")
        ))
    }),
    ("native CPU build", |s| {
        let b = &s.build;
        Some(format!(
            "{} (target-cpu: {}; llama.cpp kernels: {}; unused on this CPU: {})",
            if b.native_cpu_build {
                "yes"
            } else if b.portable {
                "no, portable"
            } else {
                "no"
            },
            b.target_cpu.as_deref().unwrap_or("default"),
            b.llama_cpu_kernels.join(" "),
            if b.unused_cpu_features.is_empty() {
                "none".into()
            } else {
                b.unused_cpu_features.join(" ")
            }
        ))
    }),
    ("config", |s| s.settings.config.clone()),
    ("policies", |s| Some(s.settings.policies.join(", "))),
    ("deadlines ms", |s| {
        Some(
            s.settings
                .deadlines_ms
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        )
    }),
];

/// The charts, as (file name, SVG text), in [`CHART_FILES`] order.
pub fn render_charts(s: &Summary) -> Vec<(&'static str, String)> {
    let policies: Vec<&str> = {
        let mut v: Vec<&str> = Vec::new();
        for g in &s.groups {
            if !v.contains(&g.policy.as_str()) {
                v.push(&g.policy);
            }
        }
        v
    };
    let color_of = |p: &str| policies.iter().position(|q| *q == p).unwrap_or(0);
    let rows = |f: &dyn Fn(&GroupSummary) -> Option<Distribution>| -> Vec<RangeRow> {
        s.groups
            .iter()
            .map(|g| RangeRow {
                label: label(g),
                dist: f(g),
                marker: Some(g.deadline_ms as f64),
                color: color_of(&g.policy),
            })
            .collect()
    };
    let latency = svg::range_chart(
        "Latency per policy and deadline",
        "milliseconds from run start to settlement",
        &rows(&|g| g.latency_ms),
    );
    let by_lane: Vec<RangeRow> = s
        .groups
        .iter()
        .flat_map(|g| {
            g.lanes.iter().map(move |l| RangeRow {
                label: format!("{} {}", label(g), l.lane),
                dist: l.total_ms,
                marker: Some(g.deadline_ms as f64),
                color: if l.lane == Lane::Local { 0 } else { 1 },
            })
        })
        .collect();
    let by_lane = svg::range_chart(
        "Lane time per lane (admission to return)",
        "milliseconds (local: blue, cloud: orange)",
        &by_lane,
    );
    let ttft = svg::range_chart(
        "Time to first token (as the caller saw it)",
        "milliseconds from run start to first token",
        &rows(&|g| g.ttft_ms),
    );
    let mut deadlines: Vec<u64> = s.groups.iter().map(|g| g.deadline_ms).collect();
    deadlines.sort_unstable();
    deadlines.dedup();
    let series: Vec<Series> = policies
        .iter()
        .map(|p| Series {
            name: (*p).to_string(),
            values: deadlines
                .iter()
                .map(|d| s.group(p, *d).map(|g| g.deadline_hit_rate))
                .collect(),
        })
        .collect();
    let hit = svg::line_chart(
        "Deadline-hit rate per deadline",
        "deadline (ms)",
        "runs answered in time",
        &deadlines.iter().map(u64::to_string).collect::<Vec<_>>(),
        &series,
        1.0,
    );
    let wins = svg::stacked_chart(
        "Lane win share",
        &["local", "cloud", "no winner"],
        &s.groups
            .iter()
            .map(|g| StackRow {
                label: label(g),
                parts: vec![g.win_share.local, g.win_share.cloud, g.win_share.none],
            })
            .collect::<Vec<_>>(),
    );
    let overrun_rows: Vec<RangeRow> = s
        .groups
        .iter()
        .map(|g| RangeRow {
            label: format!("{} ({} late)", label(g), g.late_workers),
            dist: g.late_overrun_ms,
            marker: None,
            color: color_of(&g.policy),
        })
        .collect();
    let overrun = svg::range_chart(
        "Late-worker overruns",
        "milliseconds a late worker ran past its run's settlement",
        &overrun_rows,
    );
    CHART_FILES
        .into_iter()
        .zip([latency, by_lane, ttft, hit, wins, overrun])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report of real bench outputs kept in the repository, byte for
    /// byte (the golden files were written by the renderer before it was
    /// a table). Regenerate with `EDGECLOUD_WRITE_GOLDEN=1` only for a
    /// deliberate change.
    #[test]
    fn markdown_matches_the_golden_files() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = here.join("../..");
        let cases = [
            (
                "bench-results/gsm8k-smollm2-135m/cascade",
                false,
                "report.golden.gsm8k-cascade.md",
            ),
            (
                "bench-results/easy-facts-smollm2-135m/baselines",
                true,
                "report.golden.easy-facts-baselines.md",
            ),
        ];
        let golden = [
            include_str!("report.golden.gsm8k-cascade.md"),
            include_str!("report.golden.easy-facts-baselines.md"),
        ];
        for ((dir, interrupted, file), want) in cases.into_iter().zip(golden) {
            let mut s = read_summary(&root.join(dir)).unwrap();
            s.interrupted = interrupted;
            let md = render_markdown(&s);
            let path = here.join("src").join(file);
            if std::env::var_os("EDGECLOUD_WRITE_GOLDEN").is_some() {
                std::fs::write(&path, &md).unwrap();
            }
            assert_eq!(md, want, "{dir}");
        }
    }
}
