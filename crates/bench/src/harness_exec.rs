//! Runs bench jobs through a [`Harness`] and turns each [`Outcome`] into a
//! [`RunRecord`]: the bridge between the harness (which orchestrates) and
//! the bench loop (which only counts). It must not decide anything about a
//! run: policy, deadline and request go to the harness as they are.
//!
//! Late-worker overruns arrive after their run settled, as
//! [`Event::LateWorkerFinished`] on the harness's observer thread; a
//! [`LateWorkerLog`] added to the harness builder collects them.

use super::grade::answer_text;
use super::record::{LaneRecord, LaneSignals, RunRecord, RunStatus, TokensSaved};
use super::runner::{Executor, Job};
use edgecloud_core::harness::{
    AbortHandle, Event, Harness, LaneReport, LaneStatus, Observer, Outcome, Policy, PolicyKind,
    RunOptions, Signal,
};
use edgecloud_core::lane::Lane;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Collects late-worker overruns from a harness's events. Add
/// [`LateWorkerLog::observer`] to the harness builder, then give the log
/// to [`HarnessExecutor::new`].
#[derive(Clone, Default)]
pub struct LateWorkerLog {
    inner: Arc<(Mutex<LateState>, Condvar)>,
}

#[derive(Default)]
struct LateState {
    /// (run id, overrun ms) not yet taken.
    fresh: Vec<(u64, f64)>,
    /// Every late-worker event seen so far.
    seen: u64,
}

impl std::fmt::Debug for LateWorkerLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateWorkerLog").finish_non_exhaustive()
    }
}

impl LateWorkerLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// The observer to add to the harness builder.
    pub fn observer(&self) -> impl Observer {
        let log = self.clone();
        move |event: &Event| {
            if let Event::LateWorkerFinished {
                run_id, overrun_ms, ..
            } = event
            {
                let (lock, cv) = &*log.inner;
                let mut s = lock.lock().expect("the late-worker log is never poisoned");
                s.fresh.push((*run_id, *overrun_ms));
                s.seen += 1;
                cv.notify_all();
            }
        }
    }

    fn take(&self) -> Vec<(u64, f64)> {
        let mut s = self
            .inner
            .0
            .lock()
            .expect("the late-worker log is never poisoned");
        std::mem::take(&mut s.fresh)
    }

    /// Waits until `count` events were seen in all, or `timeout` passed;
    /// returns how many were seen.
    fn wait_for(&self, count: u64, timeout: Duration) -> u64 {
        let (lock, cv) = &*self.inner;
        let end = Instant::now() + timeout;
        let mut s = lock.lock().expect("the late-worker log is never poisoned");
        while s.seen < count {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = cv
                .wait_timeout(s, left)
                .expect("the late-worker log is never poisoned")
                .0;
        }
        s.seen
    }
}

/// The run in flight, so another thread (a Ctrl-C handler) can abort it.
#[derive(Clone, Default, Debug)]
pub struct CurrentRun(Arc<Mutex<Option<AbortHandle>>>);

impl CurrentRun {
    /// Aborts the run in flight, if any. Returns whether there was one.
    pub fn abort(&self) -> bool {
        match &*self.0.lock().expect("never poisoned") {
            Some(h) => {
                h.abort();
                true
            }
            None => false,
        }
    }
}

/// Runs jobs on a harness: each job's request with the job's deadline, its
/// policy (given as a name) set per run, streaming so the caller's time to
/// first token is measured. See [`HarnessExecutor::back_to_back`] for how
/// runs follow each other.
pub struct HarnessExecutor {
    harness: Harness,
    late: LateWorkerLog,
    policies: HashMap<String, Policy>,
    seq_of_run: HashMap<u64, u64>,
    late_expected: u64,
    /// Late workers that did not return within a grace before a run: not
    /// waited for again before later runs (their lane shows as busy).
    late_given_up: u64,
    grace: Duration,
    current: CurrentRun,
    back_to_back: bool,
}

impl std::fmt::Debug for HarnessExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessExecutor")
            .field("policies", &self.policies.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl HarnessExecutor {
    /// An executor over `harness`, whose builder was given `late`'s
    /// observer. Policy names are resolved with [`Policy::from_kind`]
    /// unless `policies` gives a policy (with parameters) for that name.
    /// `grace` bounds the wait for late workers at the end.
    /// [`Executor::run_concurrent`] runs a wave's jobs at once, one per
    /// instance (build the harness with at least the bench's
    /// `--concurrency` instances).
    pub fn new(
        harness: Harness,
        late: LateWorkerLog,
        policies: impl IntoIterator<Item = Policy>,
        grace: Duration,
    ) -> Self {
        Self {
            harness,
            late,
            policies: policies
                .into_iter()
                .map(|p| (p.kind().as_str().to_string(), p))
                .collect(),
            seq_of_run: HashMap::new(),
            late_expected: 0,
            late_given_up: 0,
            grace,
            current: CurrentRun::default(),
            back_to_back: false,
        }
    }

    /// Starts each run at once, even while a late worker of an earlier run
    /// still holds a lane (which is then absent: a busy skip), as under
    /// sustained load. By default each run first waits, up to the grace,
    /// until every earlier late worker has returned, so runs start with
    /// idle lanes and measure one request at a time.
    pub fn back_to_back(mut self, yes: bool) -> Self {
        self.back_to_back = yes;
        self
    }

    /// A handle that aborts the run in flight (for Ctrl-C).
    pub fn current_run(&self) -> CurrentRun {
        self.current.clone()
    }

    fn policy(&self, name: &str) -> Option<Policy> {
        if let Some(p) = self.policies.get(name) {
            return Some(p.clone());
        }
        name.parse::<PolicyKind>().ok().map(Policy::from_kind)
    }
}

impl HarnessExecutor {
    /// Before a run: unless back to back, waits (up to the grace) until
    /// every earlier late worker has returned, so the run finds idle lanes.
    fn wait_for_late_workers(&mut self) {
        if self.back_to_back {
            return;
        }
        // A late worker reports after its lane is free again, so once
        // every one has reported, both lanes are idle.
        let target = self.late_expected - self.late_given_up;
        let seen = self.late.wait_for(target, self.grace);
        if seen < target {
            tracing::warn!(
                missing = target - seen,
                "late workers did not return within the grace; later runs may find their lane busy"
            );
            self.late_given_up += target - seen;
        }
    }

    /// Runs one job on an idle instance, as a caller would (streaming,
    /// draining the stream), and returns its record with its run id and
    /// late-worker count.
    fn run_one(
        harness: &Harness,
        current: &CurrentRun,
        policy: Policy,
        job: &Job<'_>,
    ) -> (RunRecord, Option<(u64, u32)>) {
        let mut request = job.item.request.clone();
        request.deadline = Some(Duration::from_millis(job.deadline_ms));
        let mut run = match harness.start(request, RunOptions::new().policy(policy).stream()) {
            Ok(r) => r,
            Err(e) => return (failed(job, e.to_string()), None),
        };
        *current.0.lock().expect("never poisoned") = Some(run.abort_handle());
        let run_id = run.run_id();
        // Drain the stream as a caller would; the outcome carries its TTFT.
        while let Ok(Some(_)) = run.next_token_blocking() {}
        let outcome = run.wait();
        match outcome {
            Ok(o) => (record_from_outcome(&o, job), Some((run_id, o.late_workers))),
            Err(e) => (failed(job, e.to_string()), None),
        }
    }

    fn note_run(&mut self, job: &Job<'_>, run: Option<(u64, u32)>) {
        if let Some((run_id, late)) = run {
            self.seq_of_run.insert(run_id, job.seq);
            self.late_expected += u64::from(late);
        }
    }
}

impl Executor for HarnessExecutor {
    fn run(&mut self, job: &Job<'_>) -> RunRecord {
        let Some(policy) = self.policy(job.policy) else {
            return failed(job, format!("unknown policy `{}`", job.policy));
        };
        self.wait_for_late_workers();
        let (record, run) = Self::run_one(&self.harness, &self.current, policy, job);
        *self.current.0.lock().expect("never poisoned") = None;
        self.note_run(job, run);
        record
    }

    fn run_concurrent(&mut self, jobs: &[Job<'_>]) -> Vec<RunRecord> {
        self.wait_for_late_workers();
        let results: Vec<(RunRecord, Option<(u64, u32)>)> = std::thread::scope(|scope| {
            let running: Vec<_> = jobs
                .iter()
                .map(|job| {
                    let policy = self.policy(job.policy);
                    let (harness, current) = (&self.harness, &self.current);
                    scope.spawn(move || match policy {
                        None => (
                            failed(job, format!("unknown policy `{}`", job.policy)),
                            None,
                        ),
                        Some(policy) => Self::run_one(harness, current, policy, job),
                    })
                })
                .collect();
            running
                .into_iter()
                .zip(jobs)
                .map(|(h, job)| {
                    h.join()
                        .unwrap_or_else(|_| (failed(job, "the run's thread panicked".into()), None))
                })
                .collect()
        });
        *self.current.0.lock().expect("never poisoned") = None;
        results
            .into_iter()
            .zip(jobs)
            .map(|((record, run), job)| {
                self.note_run(job, run);
                record
            })
            .collect()
    }

    fn late_overruns(&mut self) -> Vec<(u64, f64)> {
        self.late
            .take()
            .into_iter()
            .filter_map(|(run, overrun)| self.seq_of_run.get(&run).map(|seq| (*seq, overrun)))
            .collect()
    }

    fn finish(&mut self) {
        let report = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|rt| rt.block_on(self.harness.shutdown(self.grace)));
        match report {
            Ok(report) if !report.is_clean() => tracing::warn!(
                still_running = report.still_running.len(),
                "late workers still running after the bench's grace"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "harness shutdown"),
        }
        // Events travel through the observer thread: give the last ones a
        // moment to arrive.
        let _ = self.late.wait_for(self.late_expected, self.grace);
    }
}

fn base(job: &Job<'_>, status: RunStatus) -> RunRecord {
    RunRecord {
        started_ms: None,
        seq: job.seq,
        policy: job.policy.to_string(),
        deadline_ms: job.deadline_ms,
        item: job.item.id.clone(),
        tag: job.item.tag.clone(),
        repeat: job.repeat,
        status,
        winner: None,
        elapsed_ms: 0.0,
        ttft_ms: None,
        overshoot_ms: 0.0,
        lanes: Vec::new(),
        late_workers: 0,
        late_overrun_ms: Vec::new(),
        tokens_saved: TokensSaved::default(),
        expected_match: None,
        error: None,
        prompt_stage: None,
        cost: None,
    }
}

fn failed(job: &Job<'_>, error: String) -> RunRecord {
    let mut r = base(job, RunStatus::Failed);
    r.error = Some(error);
    r
}

/// A lane's answer graded (see [`LaneRecord::correct`]).
fn lane_correct(r: &LaneReport, o: &Outcome, job: &Job<'_>) -> Option<bool> {
    job.item.expected.as_ref()?;
    let answer = if o.winner == Some(r.lane) {
        o.text.as_deref().map(|t| {
            let calls = o.completion.as_ref().map_or(&[][..], |c| &c.tool_calls[..]);
            answer_text(t, calls)
        })
    } else {
        r.text.as_deref().map(|t| answer_text(t, &r.tool_calls))
    };
    match r.status {
        // An answer rejected as invalid is wrong, whatever it says.
        LaneStatus::Completed if r.rejected.is_some() => Some(false),
        LaneStatus::Completed => Some(answer.and_then(|t| job.item.matches(&t)).unwrap_or(false)),
        LaneStatus::Failed => Some(false),
        LaneStatus::Cancelled | LaneStatus::Late if o.winner.is_none() => Some(false),
        _ => None,
    }
}

/// A lane's confidence signals: the winner's completion carries them all;
/// a lane that did not win has those its scorer recorded.
fn lane_signals(r: &LaneReport, o: &Outcome) -> Option<LaneSignals> {
    let mut s = LaneSignals::default();
    let from_completion = o
        .completion
        .as_ref()
        .filter(|_| o.winner == Some(r.lane))
        .and_then(|c| c.signals.as_ref());
    for sig in Signal::ALL {
        let v = from_completion
            .and_then(|t| sig.of_signals(t))
            .or_else(|| r.signals.get(sig.as_str()).copied());
        s.set(sig, v);
    }
    (!s.is_empty()).then_some(s)
}

fn lane_record(r: &LaneReport, o: &Outcome) -> LaneRecord {
    let mut l = LaneRecord::new(r.lane, r.status);
    l.ttft_ms = r.ttft_ms;
    l.total_ms = r.total_ms;
    l.prompt_tokens = r.prompt_tokens;
    l.completion_tokens = r.completion_tokens;
    // Only a consensus samples more than the answer it gives.
    l.sampled_tokens = r
        .tokens
        .local_sampled
        .filter(|&n| Some(n) != r.tokens.local_completion);
    l.reused_prompt_tokens = r.tokens.local_reused_prompt;
    l.provider_prompt_tokens = r.tokens.provider_prompt;
    l.provider_completion_tokens = r.tokens.provider_completion;
    l.error = r.error.as_ref().map(|e| edgecloud_core::error_chain(e));
    l.error_kind = r.error.as_ref().map(|e| e.kind());
    // Lane reports carry no engine timings; the winner's completion does.
    if o.winner == Some(r.lane) {
        if let Some(c) = &o.completion {
            l.prompt_tokens_per_s = c.timings.prompt_tokens_per_s;
            l.gen_tokens_per_s = c.timings.gen_tokens_per_s;
            l.draft_n = c.timings.draft_n;
            l.draft_n_accepted = c.timings.draft_n_accepted;
        }
    }
    l
}

/// The record of one harness outcome for `job`.
pub fn record_from_outcome(o: &Outcome, job: &Job<'_>) -> RunRecord {
    let mut r = base(job, o.status);
    r.winner = o.winner;
    r.elapsed_ms = o.elapsed_ms;
    r.ttft_ms = o.ttft_ms;
    r.overshoot_ms = o.overshoot_ms;
    r.prompt_stage = o.prompt_stage.clone();
    r.cost = o.cost.priced.then(|| o.cost.clone());
    r.lanes = o
        .lanes
        .iter()
        .map(|l| {
            let mut rec = lane_record(l, o);
            rec.correct = lane_correct(l, o, job);
            rec.valid = (job.item.request.sampling.constrains_answer()
                && l.status == LaneStatus::Completed)
                .then_some(l.rejected.is_none());
            rec.signals = lane_signals(l, o);
            if l.lane == Lane::Local && l.status != LaneStatus::NotStarted {
                rec.samples = job
                    .item
                    .request
                    .sampling
                    .consensus
                    .map(|c| c.samples)
                    .filter(|&k| k > 1);
            }
            rec
        })
        .collect();
    r.late_workers = o.late_workers;
    r.error = o.error.clone();
    r.expected_match = job.item.expected.as_ref().map(|_| {
        o.text
            .as_deref()
            .and_then(|t| {
                let calls = o.completion.as_ref().map_or(&[][..], |c| &c.tool_calls[..]);
                job.item.matches(&answer_text(t, calls))
            })
            .unwrap_or(false)
    });
    let cloud = o.lanes.iter().find(|l| l.lane == Lane::Cloud);
    if let Some(c) = cloud {
        if let (Some(before), Some(after)) = (c.tokens.compressor_before, c.tokens.compressor_after)
        {
            r.tokens_saved.compression = before.saturating_sub(after);
        }
        if c.status == LaneStatus::Skipped {
            // What the cloud would have been sent: the compressor's count
            // of the prompt, else the local tokenizer's.
            let local = o.lanes.iter().find(|l| l.lane == Lane::Local);
            r.tokens_saved.pre_score = c
                .tokens
                .compressor_after
                .or(c.tokens.compressor_before)
                .or_else(|| local.and_then(|l| l.tokens.local_prompt))
                .unwrap_or(0);
        }
    }
    r
}
