//! Summaries: the figures of each (policy, deadline) group, computed from
//! the run records alone, plus the settings and environment they came
//! from ([`Summary`], the content of `summary.json`). Pure computation; it
//! must not read or write files.
//!
//! Definitions (the report repeats them):
//! - **latency**: a run's `elapsed_ms` (start to settlement), every run.
//! - **TTFT**: a run's `ttft_ms` (start to the first token the caller got),
//!   runs that have one.
//! - **deadline-hit rate**: runs with status `ok` / runs. The harness
//!   settles by the deadline, so `ok` means an answer in time.
//! - **win share**: runs won by each lane / runs; `none` is the rest.
//! - **busy-skip rate**: runs in which some lane was absent because its
//!   slot was busy / runs.
//! - **late workers**: workers still running at settlement; their overrun
//!   is how long after settlement they came back.
//! - **tokens/s**: as the local lane measured them, per run that has them.
//! - **cloud tokens**: provider-reported only; never estimated.
//! - Percentiles: nearest rank (see [`stats`](super::stats)).

use super::env::{BuildInfo, MachineInfo, ModelFileInfo};
use super::record::{LaneState, RunRecord, RunStatus, TokensSaved};
use super::stats::{ratio, Distribution};
use edgecloud_core::lane::Lane;
use serde::{Deserialize, Serialize};

/// The format tag written in every `summary.json`.
pub const SUMMARY_FORMAT: &str = "edgecloud-bench/1";

/// The percentile method, in words, as written in reports.
pub const PERCENTILE_METHOD: &str =
    "nearest rank: the p-th percentile of n sorted values is the value at rank ceil(p*n/100)";

/// The local lane's settings in a bench.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LocalSetup {
    /// How the compute threads waited for each other
    /// (`edgecloud_core::local::wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_wait: Option<String>,
    /// The model file (as given).
    pub model: String,
    /// Compute threads used (the most a step used).
    pub threads: Option<usize>,
    /// How many of them each step used: `adaptive` or `fixed`
    /// (`edgecloud_core::local::ThreadPolicy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_policy: Option<String>,
    /// Speculative decoding, when on: `ngram` (`--spec-type`), with its
    /// `--draft-max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_type: Option<String>,
    /// Most tokens drafted per step, when speculation is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_max: Option<u32>,
    /// Layers offloaded to a GPU (0: CPU only), as asked.
    pub gpu_layers: u32,
    /// Where the loaded lane's layers run, as it reported them
    /// (`31/31 layers on Vulkan0 (llvmpipe ...)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<String>,
    /// Context size in tokens.
    pub context_size: Option<u32>,
    /// Samples per item of a local consensus (`--samples`, or the
    /// workload's own), the most any item asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u32>,
    /// The temperature `--samples` gave greedy items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_temperature: Option<f32>,
}

/// The cloud lane's settings in a bench (never a key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CloudSetup {
    /// The endpoint's scheme, host and port (no path, query or user info).
    pub endpoint: String,
    /// The model asked for.
    pub model: String,
}

/// What a bench was asked to do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchSettings {
    /// The workload's name (file path or `builtin:NAME`).
    pub workload: String,
    /// Requests in the workload.
    pub items: usize,
    /// Policies, in run order.
    pub policies: Vec<String>,
    /// Deadlines in milliseconds, in run order.
    pub deadlines_ms: Vec<u64>,
    /// Measured passes over the workload per combination.
    pub runs: u32,
    /// Unrecorded warm-up passes per combination.
    pub warmup: u32,
    /// Requests in flight at once (`--concurrency`; 0 in reports from
    /// before it existed, which ran one at a time).
    #[serde(default)]
    pub concurrency: usize,
    /// The configuration file, if one was used.
    pub config: Option<String>,
    /// The local lane, if configured.
    pub local: Option<LocalSetup>,
    /// The cloud lane, if configured.
    pub cloud: Option<CloudSetup>,
}

/// How many runs ended each way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCounts {
    /// Answered in time.
    pub ok: u64,
    /// No answer by the deadline.
    pub deadline_exceeded: u64,
    /// Every lane failed or was absent.
    pub failed: u64,
    /// Aborted.
    pub aborted: u64,
}

/// Share of runs won by each lane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WinShare {
    /// Won by the local lane.
    pub local: f64,
    /// Won by the cloud lane.
    pub cloud: f64,
    /// No winner.
    pub none: f64,
}

/// Figures of one lane within a group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaneSummary {
    /// Which lane.
    pub lane: Lane,
    /// Runs in which the lane's worker started.
    pub started: u64,
    /// Runs it completed.
    pub completed: u64,
    /// Runs it failed.
    pub failed: u64,
    /// Runs it was cancelled or cut by its deadline.
    pub cancelled: u64,
    /// Runs in which it was still running at settlement.
    pub late: u64,
    /// Runs in which it was absent because busy.
    pub busy: u64,
    /// Runs in which the pre-score callback skipped it.
    pub skipped: u64,
    /// Runs it won.
    pub wins: u64,
    /// Admission to return, of the runs where it returned.
    pub total_ms: Option<Distribution>,
    /// Admission to its first token.
    pub ttft_ms: Option<Distribution>,
    /// Prompt processing speed (local).
    pub prompt_tokens_per_s: Option<Distribution>,
    /// Generation speed (local).
    pub gen_tokens_per_s: Option<Distribution>,
    /// Whole answers that met what the request asked for (JSON, a schema,
    /// a declared tool call), of runs whose requests ask for one.
    #[serde(default)]
    pub valid: u64,
    /// Whole answers rejected as invalid.
    #[serde(default)]
    pub invalid: u64,
}

/// Tokens the cloud provider reported, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderTokens {
    /// Prompt tokens.
    pub prompt: u64,
    /// Completion tokens.
    pub completion: u64,
    /// Runs whose cloud lane reported usage.
    pub runs_reporting: u64,
}

/// Answers graded against a workload's expected answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Runs whose item had an expected answer (a run without an answer
    /// counts as wrong).
    pub checked: u64,
    /// Of those, runs whose answer was right by the item's grader.
    pub matched: u64,
}

impl Accuracy {
    /// `matched / checked`, when anything was checked.
    pub fn rate(&self) -> Option<f64> {
        ratio(self.matched, self.checked)
    }
}

/// The figures of one (policy, deadline) combination.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupSummary {
    /// The policy.
    pub policy: String,
    /// The deadline.
    pub deadline_ms: u64,
    /// Runs measured.
    pub runs: u64,
    /// How they ended.
    pub status: StatusCounts,
    /// Runs answered in time / runs.
    pub deadline_hit_rate: f64,
    /// Start to settlement, every run.
    pub latency_ms: Option<Distribution>,
    /// Start to the first token the caller got.
    pub ttft_ms: Option<Distribution>,
    /// Settlement past the deadline.
    pub overshoot_ms: Option<Distribution>,
    /// Share of runs each lane won.
    pub win_share: WinShare,
    /// Runs with a lane absent because busy / runs.
    pub busy_skip_rate: f64,
    /// Workers still running at settlement, summed.
    pub late_workers: u64,
    /// How long after settlement late workers came back.
    pub late_overrun_ms: Option<Distribution>,
    /// Per-lane figures: local, then cloud.
    pub lanes: Vec<LaneSummary>,
    /// Cloud tokens as the provider reported them.
    pub cloud_tokens: ProviderTokens,
    /// Tokens saved by compression and pre-scoring (estimates), summed.
    pub tokens_saved: TokensSaved,
    /// Expected-answer checks.
    pub accuracy: Accuracy,
    /// Share of runs in which a cloud call was made (the cloud lane ran:
    /// completed, failed, cancelled or late).
    #[serde(default)]
    pub cloud_call_share: f64,
    /// With both single-lane baselines (`local-only`, `cloud-only`) at
    /// this deadline in the same bench: (accuracy - local-only accuracy) /
    /// (cloud-only accuracy - local-only accuracy), the share of the
    /// local-to-cloud accuracy gap this policy recovers. Absent without
    /// both baselines or when they are equally accurate.
    #[serde(default)]
    pub gap_recovered: Option<f64>,
    /// The cloud-only runs' latency p50 at the same deadline minus this
    /// policy's: what answering locally saved the typical request (absent
    /// without cloud-only runs to measure it against; negative when this
    /// policy was slower).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_saved_ms: Option<f64>,
    /// What the runs cost, when their cloud model is priced (`[prices]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<GroupCost>,
    /// What the runs delivered together: the answering lanes' completion
    /// tokens over the span from the first run's start to the last one's
    /// settlement (under `--concurrency`, the aggregate a server sees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<Throughput>,
}

/// What a group of runs cost (docs/cost.md), over the runs whose cloud
/// model is priced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupCost {
    /// Runs with a priced cost.
    pub runs_priced: u64,
    /// Dollars spent on the cloud, summed (provider counts x price).
    pub cloud_usd: f64,
    /// `cloud_usd` / runs answered (`ok`).
    pub usd_per_answered: Option<f64>,
    /// `cloud_usd` / runs answered right (graded workloads): what a
    /// correct answer cost this policy.
    pub usd_per_correct: Option<f64>,
    /// What the same answers would have cost from the cloud alone
    /// (estimates where the local lane answered), summed.
    pub cloud_only_usd_estimate: f64,
    /// `cloud_only_usd_estimate - cloud_usd`.
    pub saved_usd_estimate: f64,
}

impl GroupCost {
    fn of(runs: &[&RunRecord], answered: u64, correct: Option<u64>) -> Option<Self> {
        let costs: Vec<_> = runs.iter().filter_map(|r| r.cost.as_ref()).collect();
        if costs.is_empty() {
            return None;
        }
        let cloud_usd: f64 = costs.iter().filter_map(|c| c.cloud_usd).sum();
        let estimate: f64 = costs.iter().filter_map(|c| c.cloud_only_usd_estimate).sum();
        let per = |n: u64| (n > 0).then(|| cloud_usd / n as f64);
        Some(Self {
            runs_priced: costs.len() as u64,
            cloud_usd,
            usd_per_answered: per(answered),
            usd_per_correct: correct.and_then(per),
            cloud_only_usd_estimate: estimate,
            saved_usd_estimate: estimate - cloud_usd,
        })
    }
}

/// Aggregate output of a group of runs over their span.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// First start to last settlement, in seconds.
    pub span_s: f64,
    /// Completion tokens of the answering lanes, summed (locally counted
    /// where the local lane answered, provider-reported for the cloud).
    pub completion_tokens: u64,
    /// `completion_tokens / span_s`.
    pub tokens_per_s: f64,
    /// Runs settled per second over the span.
    pub runs_per_s: f64,
}

impl Throughput {
    /// Over records that carry their start (`started_ms`); `None` when
    /// none does or the span is empty.
    fn of(runs: &[&RunRecord]) -> Option<Self> {
        let starts = runs.iter().filter_map(|r| r.started_ms);
        let first = starts.clone().reduce(f64::min)?;
        let last = runs
            .iter()
            .filter_map(|r| r.started_ms.map(|s| s + r.elapsed_ms))
            .reduce(f64::max)?;
        let span_s = (last - first) / 1e3;
        if span_s <= 0.0 {
            return None;
        }
        let completion_tokens = runs
            .iter()
            .filter_map(|r| {
                let winner = r.winner?;
                r.lanes
                    .iter()
                    .find(|l| l.lane == winner)
                    .and_then(|l| l.completion_tokens)
            })
            .sum();
        Some(Self {
            span_s,
            completion_tokens,
            tokens_per_s: completion_tokens as f64 / span_s,
            runs_per_s: runs.len() as f64 / span_s,
        })
    }
}

impl GroupSummary {
    /// The figures of one lane.
    pub fn lane(&self, lane: Lane) -> Option<&LaneSummary> {
        self.lanes.iter().find(|l| l.lane == lane)
    }

    /// Computes the figures of `runs` (all of one policy and deadline).
    pub fn of(policy: &str, deadline_ms: u64, runs: &[&RunRecord]) -> Self {
        let n = runs.len() as u64;
        let count = |f: &dyn Fn(&RunRecord) -> bool| runs.iter().filter(|r| f(r)).count() as u64;
        let status = StatusCounts {
            ok: count(&|r| r.status == RunStatus::Ok),
            deadline_exceeded: count(&|r| r.status == RunStatus::DeadlineExceeded),
            failed: count(&|r| r.status == RunStatus::Failed),
            aborted: count(&|r| r.status == RunStatus::Aborted),
        };
        let share = |part| ratio(part, n).unwrap_or(0.0);
        let wins_local = count(&|r| r.winner == Some(Lane::Local));
        let wins_cloud = count(&|r| r.winner == Some(Lane::Cloud));
        let lanes = Lane::ALL
            .into_iter()
            .map(|lane| lane_summary(lane, runs))
            .collect();
        let mut cloud_tokens = ProviderTokens::default();
        for l in runs.iter().filter_map(|r| r.lane(Lane::Cloud)) {
            if l.provider_prompt_tokens.is_some() || l.provider_completion_tokens.is_some() {
                cloud_tokens.runs_reporting += 1;
                cloud_tokens.prompt += l.provider_prompt_tokens.unwrap_or(0);
                cloud_tokens.completion += l.provider_completion_tokens.unwrap_or(0);
            }
        }
        let checked: Vec<bool> = runs.iter().filter_map(|r| r.expected_match).collect();
        let matched = checked.iter().filter(|m| **m).count() as u64;
        let cost = GroupCost::of(runs, status.ok, (!checked.is_empty()).then_some(matched));
        Self {
            policy: policy.to_string(),
            deadline_ms,
            runs: n,
            deadline_hit_rate: share(status.ok),
            status,
            latency_ms: Distribution::of(runs.iter().map(|r| r.elapsed_ms)),
            ttft_ms: Distribution::of(runs.iter().filter_map(|r| r.ttft_ms)),
            overshoot_ms: Distribution::of(runs.iter().map(|r| r.overshoot_ms)),
            win_share: WinShare {
                local: share(wins_local),
                cloud: share(wins_cloud),
                none: share(n - wins_local - wins_cloud),
            },
            busy_skip_rate: share(count(&|r| r.had_busy_lane())),
            late_workers: runs.iter().map(|r| u64::from(r.late_workers)).sum(),
            late_overrun_ms: Distribution::of(
                runs.iter().flat_map(|r| r.late_overrun_ms.iter().copied()),
            ),
            lanes,
            cloud_tokens,
            tokens_saved: TokensSaved {
                compression: runs.iter().map(|r| r.tokens_saved.compression).sum(),
                pre_score: runs.iter().map(|r| r.tokens_saved.pre_score).sum(),
            },
            accuracy: Accuracy {
                checked: checked.len() as u64,
                matched: checked.iter().filter(|m| **m).count() as u64,
            },
            cloud_call_share: share(count(&|r| {
                r.lane(Lane::Cloud).is_some_and(|l| l.state.ran())
            })),
            gap_recovered: None,
            latency_saved_ms: None,
            cost,
            throughput: Throughput::of(runs),
        }
    }
}

fn lane_summary(lane: Lane, runs: &[&RunRecord]) -> LaneSummary {
    let recs: Vec<_> = runs.iter().filter_map(|r| r.lane(lane)).collect();
    let state = |s: LaneState| recs.iter().filter(|l| l.state == s).count() as u64;
    let started = recs
        .iter()
        .filter(|l| {
            !matches!(
                l.state,
                LaneState::NotStarted
                    | LaneState::Busy
                    | LaneState::Unavailable
                    | LaneState::Skipped
            )
        })
        .count() as u64;
    LaneSummary {
        lane,
        started,
        completed: state(LaneState::Completed),
        failed: state(LaneState::Failed),
        cancelled: state(LaneState::Cancelled),
        late: state(LaneState::Late),
        busy: state(LaneState::Busy),
        skipped: state(LaneState::Skipped),
        wins: runs.iter().filter(|r| r.winner == Some(lane)).count() as u64,
        total_ms: Distribution::of(recs.iter().filter_map(|l| l.total_ms)),
        ttft_ms: Distribution::of(recs.iter().filter_map(|l| l.ttft_ms)),
        prompt_tokens_per_s: Distribution::of(recs.iter().filter_map(|l| l.prompt_tokens_per_s)),
        valid: recs.iter().filter(|l| l.valid == Some(true)).count() as u64,
        invalid: recs.iter().filter(|l| l.valid == Some(false)).count() as u64,
        gen_tokens_per_s: Distribution::of(recs.iter().filter_map(|l| l.gen_tokens_per_s)),
    }
}

/// Groups `runs` by (policy, deadline): first in the order of `policies`
/// and `deadlines_ms`, then any other combination in order of appearance.
/// Combinations without runs are left out.
pub fn summarize(
    runs: &[RunRecord],
    policies: &[String],
    deadlines_ms: &[u64],
) -> Vec<GroupSummary> {
    let mut keys: Vec<(String, u64)> = Vec::new();
    for p in policies {
        for d in deadlines_ms {
            keys.push((p.clone(), *d));
        }
    }
    for r in runs {
        let key = (r.policy.clone(), r.deadline_ms);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut groups: Vec<GroupSummary> = keys
        .into_iter()
        .filter_map(|(policy, deadline)| {
            let group: Vec<&RunRecord> = runs
                .iter()
                .filter(|r| r.policy == policy && r.deadline_ms == deadline)
                .collect();
            (!group.is_empty()).then(|| GroupSummary::of(&policy, deadline, &group))
        })
        .collect();
    let baseline = |groups: &[GroupSummary], policy: &str, deadline: u64| {
        groups
            .iter()
            .find(|g| g.policy == policy && g.deadline_ms == deadline)
            .and_then(|g| g.accuracy.rate())
    };
    for i in 0..groups.len() {
        let d = groups[i].deadline_ms;
        if let (Some(weak), Some(strong), Some(acc)) = (
            baseline(&groups, "local-only", d),
            baseline(&groups, "cloud-only", d),
            groups[i].accuracy.rate(),
        ) {
            if (strong - weak).abs() > 1e-12 {
                groups[i].gap_recovered = Some((acc - weak) / (strong - weak));
            }
        }
        let cloud_p50 = groups
            .iter()
            .find(|g| g.policy == "cloud-only" && g.deadline_ms == d)
            .and_then(|g| g.latency_ms)
            .map(|l| l.p50);
        if let (Some(cloud), Some(own)) = (cloud_p50, groups[i].latency_ms) {
            groups[i].latency_saved_ms = Some(cloud - own.p50);
        }
    }
    groups
}

/// Everything `summary.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Always [`SUMMARY_FORMAT`].
    pub format: String,
    /// When the bench started (UTC, ISO 8601).
    pub started_at: String,
    /// Wall time of the whole bench, warm-up and model load included.
    pub wall_s: f64,
    /// True when the bench was stopped (Ctrl-C) before the end.
    pub interrupted: bool,
    /// The percentile method, in words.
    pub percentile_method: String,
    /// What the bench was asked to do.
    pub settings: BenchSettings,
    /// Where it ran.
    pub machine: MachineInfo,
    /// What binary ran it.
    pub build: BuildInfo,
    /// The local model file, when there is one.
    pub model: Option<ModelFileInfo>,
    /// Runs recorded.
    pub total_runs: u64,
    /// One entry per (policy, deadline) that has runs.
    pub groups: Vec<GroupSummary>,
}

impl Summary {
    /// Summarises `runs`.
    pub fn new(
        settings: BenchSettings,
        env: Environment,
        runs: &[RunRecord],
        interrupted: bool,
    ) -> Self {
        let groups = summarize(runs, &settings.policies, &settings.deadlines_ms);
        Self {
            format: SUMMARY_FORMAT.into(),
            started_at: env.started_at,
            wall_s: env.wall_s,
            interrupted,
            percentile_method: PERCENTILE_METHOD.into(),
            settings,
            machine: env.machine,
            build: env.build,
            model: env.model,
            total_runs: runs.len() as u64,
            groups,
        }
    }

    /// The group of one combination.
    pub fn group(&self, policy: &str, deadline_ms: u64) -> Option<&GroupSummary> {
        self.groups
            .iter()
            .find(|g| g.policy == policy && g.deadline_ms == deadline_ms)
    }
}

/// Where and when a bench ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Environment {
    /// When it started (UTC, ISO 8601).
    pub started_at: String,
    /// Its wall time in seconds.
    pub wall_s: f64,
    /// The machine.
    pub machine: MachineInfo,
    /// The build.
    pub build: BuildInfo,
    /// The local model file.
    pub model: Option<ModelFileInfo>,
}

impl Environment {
    /// This machine, now, and the caller's build (`build`) and ggml
    /// devices (`ggml`: what the local lane found); `model` is hashed here
    /// (it reads the whole file).
    pub fn detect(
        model: Option<&std::path::Path>,
        build: BuildInfo,
        ggml: Option<edgecloud_core::devices::Inventory>,
    ) -> Self {
        let mut machine = MachineInfo::detect();
        machine.ggml = ggml;
        Self {
            started_at: utc_now(),
            wall_s: 0.0,
            machine,
            build,
            model: model.map(ModelFileInfo::of),
        }
    }
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (no date dependency).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_from_unix(secs)
}

/// Howard Hinnant's days-to-civil algorithm.
pub(crate) fn utc_from_unix(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::LaneRecord;

    #[test]
    fn civil_dates() {
        assert_eq!(utc_from_unix(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_from_unix(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_from_unix(1_798_761_599), "2026-12-31T23:59:59Z");
    }

    fn run(policy: &str, winner: Option<Lane>, elapsed: f64, busy: bool) -> RunRecord {
        let mut local = LaneRecord::new(Lane::Local, LaneState::Completed);
        local.total_ms = Some(elapsed);
        local.gen_tokens_per_s = Some(100.0);
        let cloud = LaneRecord::new(
            Lane::Cloud,
            if busy {
                LaneState::Busy
            } else {
                LaneState::NotStarted
            },
        );
        RunRecord {
            started_ms: None,
            seq: 0,
            policy: policy.into(),
            deadline_ms: 100,
            item: "a".into(),
            tag: None,
            repeat: 0,
            status: if winner.is_some() {
                RunStatus::Ok
            } else {
                RunStatus::DeadlineExceeded
            },
            winner,
            elapsed_ms: elapsed,
            ttft_ms: None,
            overshoot_ms: 0.0,
            lanes: vec![local, cloud],
            late_workers: 0,
            late_overrun_ms: vec![],
            tokens_saved: TokensSaved::default(),
            expected_match: None,
            error: None,
            prompt_stage: None,
            cost: None,
        }
    }

    #[test]
    fn cost_per_answered_and_per_correct_answer() {
        let priced = |usd: f64, estimate: f64, right: Option<bool>, winner| {
            let mut r = run("cascade", winner, 10.0, false);
            let mut c = edgecloud_core::harness::Cost::default();
            c.priced = true;
            c.cloud_usd = Some(usd);
            c.cloud_only_usd_estimate = Some(estimate);
            r.cost = Some(c);
            r.expected_match = right;
            r
        };
        let runs = vec![
            priced(0.0, 0.5, Some(true), Some(Lane::Local)),
            priced(1.0, 1.0, Some(true), Some(Lane::Cloud)),
            priced(1.0, 1.0, Some(false), Some(Lane::Cloud)),
            priced(0.0, 0.0, Some(false), None),
        ];
        let groups = summarize(&runs, &["cascade".into()], &[100]);
        let c = groups[0].cost.as_ref().expect("priced runs");
        assert_eq!(c.runs_priced, 4);
        assert_eq!(c.cloud_usd, 2.0);
        // Three answered, two of them right.
        assert!((c.usd_per_answered.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(c.usd_per_correct, Some(1.0));
        assert_eq!(c.cloud_only_usd_estimate, 2.5);
        assert_eq!(c.saved_usd_estimate, 0.5);
        // Unpriced runs: no cost figures at all.
        let plain = summarize(
            &[run("race", Some(Lane::Local), 1.0, false)],
            &["race".into()],
            &[100],
        );
        assert!(plain[0].cost.is_none());
    }

    #[test]
    fn groups_follow_the_settings_order_and_count() {
        let runs = vec![
            run("race", Some(Lane::Local), 10.0, false),
            run("local-only", None, 100.0, true),
            run("race", None, 100.0, false),
            run("race", Some(Lane::Local), 30.0, true),
        ];
        let groups = summarize(&runs, &["local-only".into(), "race".into()], &[100]);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].policy, "local-only");
        let race = &groups[1];
        assert_eq!(race.runs, 3);
        assert_eq!(race.status.ok, 2);
        assert!((race.deadline_hit_rate - 2.0 / 3.0).abs() < 1e-12);
        assert!((race.win_share.none - 1.0 / 3.0).abs() < 1e-12);
        assert!((race.busy_skip_rate - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(race.latency_ms.unwrap().p50, 30.0);
        assert_eq!(race.lane(Lane::Local).unwrap().wins, 2);
        assert_eq!(race.lane(Lane::Cloud).unwrap().busy, 1);
        assert!(race.ttft_ms.is_none());
    }

    #[test]
    fn accuracy_cloud_share_and_gap_recovered() {
        // local-only 1/4 right, cloud-only 3/4, cascade 2/4 with the cloud
        // called in 2 of 4 runs: half the gap recovered.
        let graded = |policy: &str, right: &[bool], cloud_ran: &[bool]| -> Vec<RunRecord> {
            right
                .iter()
                .zip(cloud_ran)
                .map(|(&ok, &ran)| {
                    let mut r = run(policy, Some(Lane::Local), 10.0, false);
                    r.expected_match = Some(ok);
                    if ran {
                        r.lanes[1].state = LaneState::Completed;
                    }
                    r
                })
                .collect()
        };
        let mut runs = graded("local-only", &[true, false, false, false], &[false; 4]);
        runs.extend(graded("cloud-only", &[true, true, true, false], &[true; 4]));
        runs.extend(graded(
            "cascade",
            &[true, true, false, false],
            &[true, false, true, false],
        ));
        let groups = summarize(&runs, &[], &[]);
        let g = |p: &str| groups.iter().find(|g| g.policy == p).unwrap();
        assert_eq!(g("local-only").accuracy.rate(), Some(0.25));
        assert_eq!(g("cascade").cloud_call_share, 0.5);
        assert_eq!(g("local-only").cloud_call_share, 0.0);
        assert_eq!(g("cascade").gap_recovered, Some(0.5));
        assert_eq!(g("cloud-only").gap_recovered, Some(1.0));
        // Without both baselines there is no gap to speak of.
        let alone = summarize(&runs[8..], &[], &[]);
        assert_eq!(alone[0].gap_recovered, None);
        assert_eq!(alone[0].latency_saved_ms, None, "no cloud-only runs");
    }

    #[test]
    fn latency_saved_is_measured_against_the_cloud_only_runs() {
        let mut runs: Vec<RunRecord> = [10.0, 12.0, 14.0]
            .map(|ms| run("cascade", Some(Lane::Local), ms, false))
            .into();
        runs.extend(
            [200.0, 250.0, 300.0].map(|ms| run("cloud-only", Some(Lane::Cloud), ms, false)),
        );
        let groups = summarize(&runs, &[], &[]);
        let g = |p: &str| groups.iter().find(|g| g.policy == p).unwrap();
        assert_eq!(g("cascade").latency_saved_ms, Some(250.0 - 12.0));
        assert_eq!(g("cloud-only").latency_saved_ms, Some(0.0));
    }
}
