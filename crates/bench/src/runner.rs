//! The bench loop: every policy x deadline x pass x workload item, in that
//! nesting order (items in waves of [`BenchPlan::concurrency`] at once),
//! through an [`Executor`] (the harness in the CLI, a
//! scripted one in tests). It writes each record to `runs.jsonl` as soon
//! as it is complete, reports progress through a callback, stops between
//! runs when asked, and writes the summary and report from whatever was
//! measured. It must not talk to lanes itself (the executor does) nor
//! print (the caller draws progress).
//!
//! Late workers: a run that settled with workers still running gets its
//! overruns only when those workers return, possibly several runs later.
//! Such a record is held back until every late worker reported (or the
//! bench ends), so `runs.jsonl` lines can come out of `seq` order.

use super::error::BenchError;
use super::record::{RunRecord, RunStatus};
use super::report::{write_report, RunsWriter};
use super::summary::{BenchSettings, Environment, Summary};
use super::workload::{Workload, WorkloadItem};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One run the bench asks its executor for.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// Position in the bench, in start order (warm-up runs included).
    pub seq: u64,
    /// The policy's name.
    pub policy: &'a str,
    /// The run's deadline.
    pub deadline_ms: u64,
    /// The request.
    pub item: &'a WorkloadItem,
    /// The pass over the workload (0-based; warm-up passes count apart).
    pub repeat: u32,
    /// True for a warm-up run (its record is dropped).
    pub warmup: bool,
}

/// Runs one job and turns its outcome into a [`RunRecord`].
pub trait Executor {
    /// Runs `job` and returns its record (with `seq`, policy, deadline,
    /// item and repeat copied from the job). Failures are records too
    /// (status `failed`), never a panic.
    fn run(&mut self, job: &Job<'_>) -> RunRecord;

    /// Overruns of late workers that returned since the last call: the
    /// `seq` of their run and how long after its settlement they returned.
    fn late_overruns(&mut self) -> Vec<(u64, f64)> {
        Vec::new()
    }

    /// Runs several jobs at once (a load test's wave) and returns their
    /// records in the jobs' order. The default runs them one by one.
    fn run_concurrent(&mut self, jobs: &[Job<'_>]) -> Vec<RunRecord> {
        jobs.iter().map(|j| self.run(j)).collect()
    }

    /// Called once at the end (also after a stop): waits for late workers
    /// within the executor's grace, so their overruns can be collected by
    /// a last [`Executor::late_overruns`].
    fn finish(&mut self) {}
}

/// Where the bench is, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Runs done, warm-up included.
    pub done: u64,
    /// Runs in the whole bench, warm-up included.
    pub total: u64,
    /// Of `done`, warm-up runs.
    pub warmup_done: u64,
    /// Since the bench loop began.
    pub elapsed: Duration,
    /// Estimated time left: the mean time per run so far times the runs
    /// left (`None` before the first run).
    pub eta: Option<Duration>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// The requests.
    pub workload: Workload,
    /// Policy names, in run order.
    pub policies: Vec<String>,
    /// Deadlines, in run order.
    pub deadlines_ms: Vec<u64>,
    /// Measured passes over the workload per combination.
    pub runs: u32,
    /// Unrecorded warm-up passes per combination, before the measured ones.
    pub warmup: u32,
    /// Requests in flight at once (at least 1): the workload's items go in
    /// waves of this many, each wave started together and waited for
    /// whole ([`Executor::run_concurrent`]).
    pub concurrency: usize,
}

impl BenchPlan {
    /// Checks the plan: at least one policy, deadline and pass; deadlines
    /// above zero.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |reason: &str| {
            Err(BenchError::InvalidSettings {
                reason: reason.into(),
            })
        };
        if self.policies.is_empty() {
            return bad("no policy to run");
        }
        if self.deadlines_ms.is_empty() {
            return bad("no deadline to run");
        }
        if self.deadlines_ms.contains(&0) {
            return bad("deadlines must be above 0 ms");
        }
        if self.runs == 0 {
            return bad("--runs must be at least 1");
        }
        if self.concurrency == 0 {
            return bad("--concurrency must be at least 1");
        }
        Ok(())
    }

    /// Runs in the whole bench, warm-up included.
    pub fn total_runs(&self) -> u64 {
        (self.policies.len() * self.deadlines_ms.len() * self.workload.items.len()) as u64
            * u64::from(self.runs + self.warmup)
    }
}

/// What a finished (or stopped) bench produced.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// The summary written to `summary.json`.
    pub summary: Summary,
    /// Every recorded run, in `seq` order.
    pub records: Vec<RunRecord>,
}

/// Runs `plan` through `executor`, writing into `out`. `settings` are
/// recorded as given (the plan's policies, deadlines and passes are filled
/// in); `env` is the machine, build and model (fingerprinted) for the report. `stop` is polled between
/// runs: once set, the bench stops, keeps what it measured and writes the
/// report with `interrupted: true`. A run the executor reports as
/// `aborted` after `stop` was set (a Ctrl-C handler aborting the run in
/// flight) is not recorded.
pub fn run_bench(
    plan: &BenchPlan,
    mut settings: BenchSettings,
    mut env: Environment,
    out: &Path,
    executor: &mut dyn Executor,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress),
) -> Result<BenchResult, BenchError> {
    plan.validate()?;
    let began = Instant::now();
    settings.workload = plan.workload.name.clone();
    settings.items = plan.workload.items.len();
    settings.policies = plan.policies.clone();
    settings.deadlines_ms = plan.deadlines_ms.clone();
    settings.runs = plan.runs;
    settings.warmup = plan.warmup;
    settings.concurrency = plan.concurrency;
    let mut writer = RunsWriter::create(out)?;
    // A summary from the start: if the process dies, `bench report` can
    // rebuild everything from it and runs.jsonl.
    write_report(out, &Summary::new(settings.clone(), env.clone(), &[], true))?;

    let total = plan.total_runs();
    let mut done = 0u64;
    let mut warmup_done = 0u64;
    let mut seq = 0u64;
    let mut pending: Vec<RunRecord> = Vec::new();
    let mut records: Vec<RunRecord> = Vec::new();
    let loop_start = Instant::now();
    progress(Progress {
        done,
        total,
        warmup_done,
        elapsed: Duration::ZERO,
        eta: None,
    });
    let mut interrupted = false;
    'outer: for policy in &plan.policies {
        for &deadline_ms in &plan.deadlines_ms {
            for pass in 0..plan.warmup + plan.runs {
                let warmup = pass < plan.warmup;
                for wave in plan.workload.items.chunks(plan.concurrency.max(1)) {
                    if stop.load(Ordering::SeqCst) {
                        interrupted = true;
                        break 'outer;
                    }
                    let jobs: Vec<Job<'_>> = wave
                        .iter()
                        .map(|item| {
                            let job = Job {
                                seq,
                                policy,
                                deadline_ms,
                                item,
                                repeat: if warmup { pass } else { pass - plan.warmup },
                                warmup,
                            };
                            seq += 1;
                            job
                        })
                        .collect();
                    let started_ms = loop_start.elapsed().as_secs_f64() * 1e3;
                    let wave_records = if jobs.len() == 1 {
                        vec![executor.run(&jobs[0])]
                    } else {
                        executor.run_concurrent(&jobs)
                    };
                    for mut record in wave_records {
                        if record.status == RunStatus::Aborted && stop.load(Ordering::SeqCst) {
                            // Cut short by the stop itself: not a measurement.
                            interrupted = true;
                            break 'outer;
                        }
                        record.started_ms = Some(started_ms);
                        done += 1;
                        if warmup {
                            warmup_done += 1;
                        } else {
                            pending.push(record);
                        }
                    }
                    attach_overruns(&mut pending, executor.late_overruns());
                    flush_complete(&mut pending, &mut records, &mut writer, false)?;
                    let elapsed = loop_start.elapsed();
                    progress(Progress {
                        done,
                        total,
                        warmup_done,
                        elapsed,
                        eta: Some(elapsed.mul_f64((total - done) as f64 / done as f64)),
                    });
                }
            }
        }
    }
    if stop.load(Ordering::SeqCst) && done < total {
        interrupted = true;
    }
    executor.finish();
    attach_overruns(&mut pending, executor.late_overruns());
    flush_complete(&mut pending, &mut records, &mut writer, true)?;
    records.sort_by_key(|r| r.seq);
    env.wall_s = began.elapsed().as_secs_f64();
    let summary = Summary::new(settings, env, &records, interrupted);
    write_report(out, &summary)?;
    tracing::info!(runs = records.len(), interrupted, dir = %out.display(), "bench written");
    Ok(BenchResult { summary, records })
}

fn attach_overruns(pending: &mut [RunRecord], overruns: Vec<(u64, f64)>) {
    for (seq, overrun) in overruns {
        match pending.iter_mut().find(|r| r.seq == seq) {
            Some(r) => r.late_overrun_ms.push(overrun),
            // A warm-up run's late worker: nothing to attach it to.
            None => tracing::debug!(seq, overrun, "late overrun of an unrecorded run"),
        }
    }
}

/// Writes every pending record whose late workers have all reported (all
/// of them when `all`).
fn flush_complete(
    pending: &mut Vec<RunRecord>,
    records: &mut Vec<RunRecord>,
    writer: &mut RunsWriter,
    all: bool,
) -> Result<(), BenchError> {
    let mut i = 0;
    while i < pending.len() {
        let r = &pending[i];
        if all || r.late_overrun_ms.len() >= r.late_workers as usize {
            let r = pending.remove(i);
            writer.append(&r)?;
            records.push(r);
        } else {
            i += 1;
        }
    }
    Ok(())
}
