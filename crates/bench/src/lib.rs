//! Benchmark runs on target hardware: workloads in, readable and
//! comparable reports out. This module owns the workload format, the
//! per-run record (`runs.jsonl`), the summary figures (`summary.json`),
//! the Markdown report and SVG charts, machine and build detection, and
//! report comparison. It must not orchestrate lanes itself: runs go
//! through the harness, and printing (progress bars) belongs to the CLI.
//!
//! ```text
//!  Workload (JSONL | builtin:NAME)
//!      | every policy x deadline x pass x item
//!      v
//!  harness run --> RunRecord --> runs.jsonl (flushed per run)
//!                      |
//!                      v
//!  Summary (per policy and deadline) --> summary.json, report.md, *.svg
//!                      |
//!  compare(A, B) <-----+  figure by figure, with ratios
//! ```
//!
//! # Example
//! ```
//! use edgecloud_bench::{stats::Distribution, Workload};
//!
//! let w = Workload::load("builtin:short:4")?;
//! assert_eq!(w.items.len(), 4);
//! let d = Distribution::of([3.0, 1.0, 2.0]).unwrap();
//! assert_eq!(d.p50, 2.0);
//! # Ok::<(), edgecloud_bench::BenchError>(())
//! ```

mod calibrate;
mod compare;
mod env;
mod error;
mod grade;
mod harness_exec;
mod heldout;
mod neighbours;
mod prompt_signals;
mod record;
mod replay;
mod report;
mod routing_curve;
mod runner;
mod sha256;
pub mod stats;
mod summary;
mod svg;
mod two_stage;
mod workload;

pub use calibrate::{
    calibrate, config_snippet, fmt_threshold, pair_items, render_chart as render_calibration_chart,
    render_markdown as render_calibration, Calibration, PromptInputs, CALIBRATION_CHART,
    CALIBRATION_CONFIG, CALIBRATION_FILE, CALIBRATION_REPORT,
};
pub use compare::{
    compare, figures, render_comparison, Comparison, EnvDiff, FigureDiff, GroupDiff,
};
pub use env::{BuildFacts, BuildInfo, MachineInfo, ModelFileInfo};
pub use error::BenchError;
pub use grade::{answer_text, Grader};
pub use harness_exec::{record_from_outcome, CurrentRun, HarnessExecutor, LateWorkerLog};
pub use heldout::{
    cross_validate, evaluate_fresh, HeldOut, HeldOutPoint, HeldOutSettings, Interval, SignalHeldOut,
};
pub use neighbours::{NeighbourSettings, Weighting};
pub use prompt_signals::{
    check_pair as check_prompt_signals, PromptItem, PromptSignals, PromptSignalsHeader,
    PROMPT_SIGNALS_KIND,
};
pub use record::{LaneRecord, LaneSignals, LaneState, RunRecord, RunStatus, TokensSaved};
pub use replay::{question_of, RecordedAnswer, RecordedCall, Replay};
pub use report::{
    read_runs, read_summary, render_charts, render_markdown, write_report, RunsWriter, CHART_FILES,
    REPORT_FILE, RUNS_FILE, SUMMARY_FILE,
};
pub use routing_curve::{choose, curve, Choice, CurvePoint, PairedItem, SignalCurve, Target};
pub use runner::{run_bench, BenchPlan, BenchResult, Executor, Job, Progress};
pub use summary::{
    summarize, utc_now, Accuracy, BenchSettings, CloudSetup, Environment, GroupSummary,
    LaneSummary, LocalSetup, ProviderTokens, StatusCounts, Summary, WinShare, PERCENTILE_METHOD,
    SUMMARY_FORMAT,
};
pub use two_stage::{StagePoint, Thresholds, TwoStage};
pub use workload::{Workload, WorkloadItem};

/// SHA-256 of a file, as lower-case hex (the model fingerprint in reports).
pub fn sha256_file(path: &std::path::Path) -> Result<String, BenchError> {
    let file = std::fs::File::open(path).map_err(|e| BenchError::io("reading", path, e))?;
    sha256::sha256_reader(std::io::BufReader::new(file))
        .map_err(|e| BenchError::io("reading", path, e))
}
