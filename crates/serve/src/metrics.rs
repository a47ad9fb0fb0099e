//! The server's counters and histograms, and their Prometheus text
//! rendering (`GET /metrics`). A small fixed registry: every series is
//! known in advance, so the output always has the same shape and a missing
//! lane reads 0 rather than disappearing. It records what runs report and
//! must not decide anything.

use super::engine::{Health, InstanceState, LaneState, LaneStatus, ModelState, Status, Summary};
use edgecloud_core::harness::LaneErrorKind;
use edgecloud_core::harness::LedgerReport;
use edgecloud_core::lane::{FinishReason, Lane, PerLane};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of histogram buckets, in seconds: from 1 ms (a busy
/// rejection) to a minute (a long cloud answer).
const BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.counts[i] += 1;
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (b, n) in BUCKETS.iter().zip(self.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), self.count);
    }
}

#[derive(Debug, Clone, Default)]
struct LaneMetrics {
    requests: u64,
    completions: u64,
    cancelled: u64,
    busy: u64,
    unavailable: u64,
    deadline_misses: u64,
    late_workers: u64,
    failures: BTreeMap<LaneErrorKind, u64>,
    prompt_provider: u64,
    prompt_local: u64,
    completion_provider: u64,
    completion_local: u64,
    ttft: Histogram,
    duration: Histogram,
    late_overrun: Histogram,
    /// `POST /v1/embeddings` requests this lane answered, and those that
    /// failed (any error status).
    embeddings: u64,
    embedding_failures: u64,
    /// Speculative decoding's drafted tokens, and those kept.
    drafted: u64,
    draft_accepted: u64,
    /// Prompt tokens taken from cached cells instead of decoded.
    reused_prompt: u64,
}

/// What one route's answers on one cloud model cost and saved.
#[derive(Debug, Clone, Default)]
struct Spend {
    cloud_usd: f64,
    cloud_only_usd_estimate: f64,
    saved_usd_estimate: f64,
    prompt_tokens: u64,
    completion_tokens: u64,
    usage_unknown: u64,
}

/// Switches of lanes mid-answer with one key.
#[derive(Debug, Clone, Default)]
struct SwitchCounts {
    switches: u64,
    /// Characters of answer and thinking produced before the switches.
    sent_chars: u64,
}

/// A route's budget decisions.
#[derive(Debug, Clone, Default)]
struct BudgetCounts {
    /// Runs whose cloud lane a spent budget kept out.
    refused: u64,
    /// Runs a nearly spent budget turned into a cascade.
    leaned: u64,
}

#[derive(Debug, Default)]
struct State {
    /// By (route, cloud model).
    spend: BTreeMap<(String, String), Spend>,
    budgets: BTreeMap<String, BudgetCounts>,
    /// Recorded answers given again for their idempotency keys.
    replays: u64,
    http: BTreeMap<(&'static str, u16), u64>,
    runs: BTreeMap<(String, &'static str), u64>,
    /// Two-stage runs by their first stage's decision.
    prompt_stage: BTreeMap<&'static str, u64>,
    /// Answers continued on the other lane, by (route, from, error kind).
    switches: BTreeMap<(String, Lane, &'static str), SwitchCounts>,
    busy_rejections: u64,
    request_duration: Histogram,
    request_ttft: Histogram,
    lanes: PerLane<LaneMetrics>,
}

/// The registry. Cheap to update (one short lock, never held across an
/// await or while rendering anything but numbers).
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    state: Mutex<State>,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Updates are single additions; a poisoned lock holds usable counts.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One HTTP response, by endpoint and status.
    pub(crate) fn http(&self, endpoint: &'static str, status: u16) {
        *self.lock().http.entry((endpoint, status)).or_default() += 1;
    }

    /// One embeddings request answered by `lane`, and whether it failed.
    pub(crate) fn embeddings(&self, lane: Lane, failed: bool) {
        let mut st = self.lock();
        st.lanes[lane].embeddings += 1;
        st.lanes[lane].embedding_failures += u64::from(failed);
    }

    /// A request refused because every lane it needed was busy.
    pub(crate) fn busy_rejection(&self) {
        self.lock().busy_rejections += 1;
    }

    /// Time to the first content byte a streaming client received.
    pub(crate) fn request_ttft(&self, d: Duration) {
        self.lock().request_ttft.observe(d.as_secs_f64());
    }

    /// A late worker returned `overrun` after its run settled.
    pub(crate) fn late_worker_finished(&self, lane: Lane, overrun: Duration) {
        self.lock().lanes[lane]
            .late_overrun
            .observe(overrun.as_secs_f64());
    }

    /// A settled run.
    pub(crate) fn run(&self, s: &Summary) {
        let mut st = self.lock();
        if s.replay.is_some() {
            // No lane ran and nothing was spent: the original run was
            // counted when it settled.
            st.replays += 1;
            return;
        }
        if let Some(c) = &s.cost {
            let model = c.cloud_model.clone().unwrap_or_default();
            let m = st.spend.entry((s.route.clone(), model)).or_default();
            m.cloud_usd += c.cloud_usd.unwrap_or(0.0);
            m.cloud_only_usd_estimate += c.cloud_only_usd_estimate.unwrap_or(0.0);
            m.saved_usd_estimate += c.saved_usd_estimate.unwrap_or(0.0);
            m.prompt_tokens += c.cloud_prompt_tokens;
            m.completion_tokens += c.cloud_completion_tokens;
            m.usage_unknown += u64::from(c.cloud_usage_unknown);
            if let Some(b) = &c.budget {
                let counts = st.budgets.entry(s.route.clone()).or_default();
                counts.refused += u64::from(b.state == edgecloud_core::harness::BudgetState::Spent);
                counts.leaned += u64::from(b.note.is_some());
            }
        }
        *st.runs
            .entry((s.policy.clone(), s.status.as_str()))
            .or_default() += 1;
        st.request_duration.observe(s.elapsed_ms / 1e3);
        if let Some(sw) = &s.switch {
            let key = (s.route.clone(), sw.from, sw.error_kind.as_str());
            let c = st.switches.entry(key).or_default();
            c.switches += 1;
            c.sent_chars += sw.sent_chars + sw.sent_reasoning_chars;
        }
        if let Some(p) = &s.prompt_stage {
            let decision = match (p.score, p.straight_to_cloud) {
                (None, _) => "unscored",
                (Some(_), true) => "cloud",
                (Some(_), false) => "local",
            };
            *st.prompt_stage.entry(decision).or_default() += 1;
        }
        for l in &s.lanes {
            let m = &mut st.lanes[l.lane];
            if matches!(l.status, LaneStatus::Busy | LaneStatus::Unavailable) || l.status.ran() {
                m.requests += 1;
            }
            match l.status {
                LaneStatus::Busy => m.busy += 1,
                LaneStatus::Unavailable => m.unavailable += 1,
                LaneStatus::Completed => m.completions += 1,
                LaneStatus::Cancelled => m.cancelled += 1,
                LaneStatus::Late => m.late_workers += 1,
                LaneStatus::Failed => {
                    let kind = l.error_kind.unwrap_or(LaneErrorKind::Other);
                    *m.failures.entry(kind).or_default() += 1;
                }
                LaneStatus::NotStarted | LaneStatus::Skipped => {}
            }
            let cut_by_deadline = l.finish_reason == Some(FinishReason::Deadline)
                || (l.status == LaneStatus::Late && s.status == Status::DeadlineExceeded);
            if cut_by_deadline {
                m.deadline_misses += 1;
            }
            let t = &l.tokens;
            m.prompt_provider += t.provider_prompt.unwrap_or(0);
            m.prompt_local += t.local_prompt.unwrap_or(0);
            m.completion_provider += t.provider_completion.unwrap_or(0);
            m.completion_local += t.local_completion.unwrap_or(0);
            m.reused_prompt += t.local_reused_prompt.unwrap_or(0);
            m.drafted += u64::from(l.draft_n.unwrap_or(0));
            m.draft_accepted += u64::from(l.draft_n_accepted.unwrap_or(0));
            if let Some(ms) = l.ttft_ms {
                m.ttft.observe(ms / 1e3);
            }
            if let Some(ms) = l.total_ms {
                m.duration.observe(ms / 1e3);
            }
        }
    }

    /// The Prometheus text exposition (format 0.0.4): every family of
    /// [`FAMILIES`], in order.
    pub(crate) fn render(
        &self,
        health: &Health,
        ledger: Option<&LedgerReport>,
        connections: usize,
    ) -> String {
        let st = self.lock();
        let view = View {
            st: &st,
            health,
            ledger,
            connections: connections as u64,
        };
        let mut o = String::with_capacity(16 * 1024);
        for f in FAMILIES {
            let (name, kind, help) = (f.name, f.kind, f.help);
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
            f.samples.write(name, &view, &mut o);
        }
        o
    }
}

/// What the families are rendered from.
struct View<'a> {
    st: &'a State,
    health: &'a Health,
    ledger: Option<&'a LedgerReport>,
    connections: u64,
}

/// One metric family: its name, Prometheus type, help text and samples.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Samples,
}

/// How a family's samples are written.
enum Samples {
    /// One unlabelled value.
    One(fn(&View<'_>) -> u64),
    /// One unlabelled histogram.
    Histogram(fn(&State) -> &Histogram),
    /// One value per lane the engine reports on (`/health`'s lanes).
    PerLaneState(fn(&LaneState) -> u64),
    /// One value per lane, from the counters (every lane, always).
    PerLane(fn(&LaneMetrics) -> u64),
    /// Two values per lane, `source="provider"` and `source="local"`.
    PerLaneBySource(fn(&LaneMetrics) -> (u64, u64)),
    /// One histogram per lane.
    PerLaneHistogram(fn(&LaneMetrics) -> &Histogram),
    /// One value per instance of the pool (`instance="N"`).
    PerInstance(fn(&InstanceState) -> u64),
    /// One value per model of a server of several (`model="NAME"`).
    PerModel(fn(&ModelState) -> String),
    /// Anything with labels of its own.
    Custom(fn(&str, &View<'_>, &mut String)),
}

impl Samples {
    fn write(&self, name: &str, v: &View<'_>, o: &mut String) {
        match self {
            Samples::One(get) => {
                let _ = writeln!(o, "{name} {}", get(v));
            }
            Samples::Histogram(get) => get(v.st).render(o, name, ""),
            Samples::PerLaneState(get) => {
                for l in &v.health.lanes {
                    let _ = writeln!(o, "{name}{{lane=\"{}\"}} {}", l.lane, get(l));
                }
            }
            Samples::PerLane(get) => {
                for lane in Lane::ALL {
                    let _ = writeln!(o, "{name}{{lane=\"{lane}\"}} {}", get(&v.st.lanes[lane]));
                }
            }
            Samples::PerLaneBySource(get) => {
                for lane in Lane::ALL {
                    let (provider, local) = get(&v.st.lanes[lane]);
                    let _ = writeln!(
                        o,
                        "{name}{{lane=\"{lane}\",source=\"provider\"}} {provider}\n\
                         {name}{{lane=\"{lane}\",source=\"local\"}} {local}"
                    );
                }
            }
            Samples::PerLaneHistogram(get) => {
                for lane in Lane::ALL {
                    get(&v.st.lanes[lane]).render(o, name, &format!("lane=\"{lane}\""));
                }
            }
            Samples::PerInstance(get) => {
                for i in &v.health.instances {
                    let _ = writeln!(o, "{name}{{{}}} {}", instance(i), get(i));
                }
            }
            Samples::PerModel(get) => {
                for m in &v.health.models {
                    let _ = writeln!(o, "{name}{{model=\"{}\"}} {}", escape(&m.name), get(m));
                }
            }
            Samples::Custom(write) => write(name, v, o),
        }
    }
}

const fn family(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Samples,
) -> Family {
    Family {
        name,
        kind,
        help,
        samples,
    }
}

const COUNTER: &str = "counter";
const GAUGE: &str = "gauge";
const HISTOGRAM: &str = "histogram";

/// One float counter per (route, model) of the spending.
fn spend_family(name: &str, v: &View<'_>, o: &mut String, get: fn(&Spend) -> f64) {
    for ((route, model), s) in &v.st.spend {
        let _ = writeln!(
            o,
            "{name}{{route=\"{}\",model=\"{}\"}} {}",
            escape(route),
            escape(model),
            get(s)
        );
    }
}

/// Every family `GET /metrics` serves, in the order it serves them.
const FAMILIES: &[Family] = &[
    family(
        "edgecloud_build_info",
        GAUGE,
        "Always 1; the version is a label.",
        Samples::Custom(|name, _, o| {
            let _ = writeln!(o, "{name}{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
        }),
    ),
    family(
        "edgecloud_http_requests_total",
        COUNTER,
        "HTTP responses by endpoint and status.",
        Samples::Custom(|name, v, o| {
            for ((endpoint, status), n) in &v.st.http {
                let _ = writeln!(
                    o,
                    "{name}{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
                );
            }
        }),
    ),
    family(
        "edgecloud_http_connections_open",
        GAUGE,
        "HTTP connections open now.",
        Samples::One(|v| v.connections),
    ),
    family(
        "edgecloud_runs_total",
        COUNTER,
        "Settled runs by policy and status (ok, deadline_exceeded, failed, aborted).",
        Samples::Custom(|name, v, o| {
            for ((policy, status), n) in &v.st.runs {
                let policy = escape(policy);
                let _ = writeln!(o, "{name}{{policy=\"{policy}\",status=\"{status}\"}} {n}");
            }
        }),
    ),
    family(
        "edgecloud_prompt_stage_total",
        COUNTER,
        "Two-stage cascade runs by their first stage's decision: cloud (the prompt's score was below the threshold: straight to the cloud), local (the local lane went on), unscored (no score came).",
        Samples::Custom(|name, v, o| {
            for decision in ["cloud", "local", "unscored"] {
                let n = v.st.prompt_stage.get(decision).copied().unwrap_or(0);
                let _ = writeln!(o, "{name}{{decision=\"{decision}\"}} {n}");
            }
        }),
    ),
    family(
        "edgecloud_lane_switches_total",
        COUNTER,
        "Answers whose lane failed part-way and that the other lane continued, by route, the lane that failed (from) and how it failed (kind).",
        Samples::Custom(|name, v, o| switch_family(name, v, o, |c| c.switches)),
    ),
    family(
        "edgecloud_lane_switch_sent_chars_total",
        COUNTER,
        "Characters (answer and thinking) the failed lane had produced when another lane continued the answer: where the switches happened.",
        Samples::Custom(|name, v, o| switch_family(name, v, o, |c| c.sent_chars)),
    ),
    family(
        "edgecloud_runs_in_flight",
        GAUGE,
        "Runs started and not yet settled.",
        Samples::One(|v| v.health.runs_in_flight),
    ),
    family(
        "edgecloud_busy_rejections_total",
        COUNTER,
        "Requests answered 503 because every lane they needed was busy.",
        Samples::One(|v| v.st.busy_rejections),
    ),
    family(
        "edgecloud_late_workers_running",
        GAUGE,
        "Late workers still holding their lane.",
        Samples::One(|v| v.health.late_workers_running),
    ),
    family(
        "edgecloud_observer_events_dropped_total",
        COUNTER,
        "Harness events dropped because a slow observer let its queue fill.",
        Samples::One(|v| v.health.observer_events_dropped),
    ),
    family(
        "edgecloud_request_duration_seconds",
        HISTOGRAM,
        "Run start to settlement, per request.",
        Samples::Histogram(|st| &st.request_duration),
    ),
    family(
        "edgecloud_request_ttft_seconds",
        HISTOGRAM,
        "Request start to the first content a streaming client received.",
        Samples::Histogram(|st| &st.request_ttft),
    ),
    family(
        "edgecloud_lane_configured",
        GAUGE,
        "1 when the lane has a backend.",
        Samples::PerLaneState(|l| u64::from(l.configured)),
    ),
    family(
        "edgecloud_lane_busy",
        GAUGE,
        "1 while a worker (possibly late) holds the lane.",
        Samples::PerLaneState(|l| u64::from(l.busy)),
    ),
    family(
        "edgecloud_lane_down",
        GAUGE,
        "1 while the lane is marked down (cloud: after connect-level failures, until a probe finds it back).",
        Samples::PerLaneState(|l| u64::from(l.health.as_ref().is_some_and(|h| h.down))),
    ),
    family(
        "edgecloud_lane_down_transitions_total",
        COUNTER,
        "Lane state changes: to=\"down\" (marked down) and to=\"up\" (a probe found it back).",
        Samples::Custom(|name, v, o| {
            for l in &v.health.lanes {
                let (down, up) = l
                    .health
                    .as_ref()
                    .map_or((0, 0), |h| (h.went_down, h.recovered));
                let lane = l.lane;
                let _ = writeln!(
                    o,
                    "{name}{{lane=\"{lane}\",to=\"down\"}} {down}\n\
                     {name}{{lane=\"{lane}\",to=\"up\"}} {up}"
                );
            }
        }),
    ),
    family(
        "edgecloud_lane_requests_total",
        COUNTER,
        "Runs that asked for the lane (admitted, busy or unavailable).",
        Samples::PerLane(|m| m.requests),
    ),
    family(
        "edgecloud_lane_completions_total",
        COUNTER,
        "Whole answers (stop or length) the lane returned.",
        Samples::PerLane(|m| m.completions),
    ),
    family(
        "edgecloud_lane_cancelled_total",
        COUNTER,
        "Workers that returned early, cut by cancellation or their deadline.",
        Samples::PerLane(|m| m.cancelled),
    ),
    family(
        "edgecloud_lane_busy_rejections_total",
        COUNTER,
        "Runs in which the lane was busy and so absent.",
        Samples::PerLane(|m| m.busy),
    ),
    family(
        "edgecloud_lane_unavailable_total",
        COUNTER,
        "Runs in which the lane was marked down and so absent.",
        Samples::PerLane(|m| m.unavailable),
    ),
    family(
        "edgecloud_lane_deadline_misses_total",
        COUNTER,
        "Workers cut by the run's deadline or still running at it.",
        Samples::PerLane(|m| m.deadline_misses),
    ),
    family(
        "edgecloud_lane_late_workers_total",
        COUNTER,
        "Workers still running when their run settled.",
        Samples::PerLane(|m| m.late_workers),
    ),
    family(
        "edgecloud_lane_embeddings_total",
        COUNTER,
        "POST /v1/embeddings requests the lane answered (the cloud lane: passed through).",
        Samples::PerLane(|m| m.embeddings),
    ),
    family(
        "edgecloud_lane_embedding_failures_total",
        COUNTER,
        "POST /v1/embeddings requests the lane failed or refused.",
        Samples::PerLane(|m| m.embedding_failures),
    ),
    family(
        "edgecloud_lane_draft_tokens_total",
        COUNTER,
        "Tokens speculative decoding drafted and verified (--spec-type).",
        Samples::PerLane(|m| m.drafted),
    ),
    family(
        "edgecloud_lane_draft_accepted_tokens_total",
        COUNTER,
        "Drafted tokens kept (the answer's own tokens).",
        Samples::PerLane(|m| m.draft_accepted),
    ),
    family(
        "edgecloud_lane_failures_total",
        COUNTER,
        "Lane errors by kind.",
        Samples::Custom(|name, v, o| {
            for lane in Lane::ALL {
                for (kind, n) in &v.st.lanes[lane].failures {
                    let kind = kind.as_str();
                    let _ = writeln!(o, "{name}{{lane=\"{lane}\",kind=\"{kind}\"}} {n}");
                }
            }
        }),
    ),
    family(
        "edgecloud_lane_prompt_tokens_total",
        COUNTER,
        "Prompt tokens by source: provider (reported by the cloud provider) or local (counted by the local tokenizer).",
        Samples::PerLaneBySource(|m| (m.prompt_provider, m.prompt_local)),
    ),
    family(
        "edgecloud_lane_reused_prompt_tokens_total",
        COUNTER,
        "Prompt tokens taken from cached cells instead of decoded (the instance's own, or the prompt cache's: --cache-ram).",
        Samples::PerLane(|m| m.reused_prompt),
    ),
    family(
        "edgecloud_lane_completion_tokens_total",
        COUNTER,
        "Completion tokens by source: provider or local.",
        Samples::PerLaneBySource(|m| (m.completion_provider, m.completion_local)),
    ),
    family(
        "edgecloud_lane_ttft_seconds",
        HISTOGRAM,
        "Lane admission to its first token.",
        Samples::PerLaneHistogram(|m| &m.ttft),
    ),
    family(
        "edgecloud_lane_duration_seconds",
        HISTOGRAM,
        "Lane admission to its return (total latency).",
        Samples::PerLaneHistogram(|m| &m.duration),
    ),
    family(
        "edgecloud_lane_late_overrun_seconds",
        HISTOGRAM,
        "How long late workers ran past their run's settlement.",
        Samples::PerLaneHistogram(|m| &m.late_overrun),
    ),
    family(
        "edgecloud_pool_instances",
        GAUGE,
        "Harness instances in the pool (requests served at once).",
        Samples::One(|v| v.health.instances.len() as u64),
    ),
    family(
        "edgecloud_pool_queued",
        GAUGE,
        "Requests waiting for a free instance now (--max-queue-ms).",
        Samples::One(|v| v.health.queued),
    ),
    family(
        "edgecloud_pool_rejected_total",
        COUNTER,
        "Requests refused because every instance was busy.",
        Samples::One(|v| v.health.rejected),
    ),
    family(
        "edgecloud_instance_busy",
        GAUGE,
        "1 while a request runs on the instance.",
        Samples::PerInstance(|i| u64::from(i.busy)),
    ),
    family(
        "edgecloud_instance_lane_busy",
        GAUGE,
        "1 while a worker (possibly late) holds the instance's lane.",
        Samples::Custom(|name, v, o| {
            for i in &v.health.instances {
                for (lane, busy) in [("local", i.local_busy), ("cloud", i.cloud_busy)] {
                    let _ = writeln!(
                        o,
                        "{name}{{{},lane=\"{lane}\"}} {}",
                        instance(i),
                        u8::from(busy)
                    );
                }
            }
        }),
    ),
    family(
        "edgecloud_instance_late_workers_running",
        GAUGE,
        "Late workers running on the instance (each holds its lane).",
        Samples::PerInstance(|i| i.late_workers_running),
    ),
    family(
        "edgecloud_model_loaded",
        GAUGE,
        "1 while the model is loaded (a server of several models).",
        Samples::PerModel(|m| u8::from(m.loaded).to_string()),
    ),
    family(
        "edgecloud_model_memory_bytes",
        GAUGE,
        "What the loaded model holds, about: its weights and KV cache (0 when unloaded).",
        Samples::PerModel(|m| m.memory_bytes.unwrap_or(0).to_string()),
    ),
    family(
        "edgecloud_model_in_flight",
        GAUGE,
        "Requests holding the model now (runs and embeddings).",
        Samples::PerModel(|m| m.in_flight.to_string()),
    ),
    family(
        "edgecloud_model_requests_total",
        COUNTER,
        "Requests that selected the model.",
        Samples::PerModel(|m| m.requests.to_string()),
    ),
    family(
        "edgecloud_model_loads_total",
        COUNTER,
        "Times the model was loaded.",
        Samples::PerModel(|m| m.loads.to_string()),
    ),
    family(
        "edgecloud_model_load_seconds_total",
        COUNTER,
        "Time spent loading the model (divide by loads for the mean).",
        Samples::PerModel(|m| m.load_seconds.to_string()),
    ),
    family(
        "edgecloud_model_load_failures_total",
        COUNTER,
        "Loads of the model that failed.",
        Samples::PerModel(|m| m.load_failures.to_string()),
    ),
    family(
        "edgecloud_model_unloads_total",
        COUNTER,
        "Times the model was unloaded (keep-alive over, or room made for another).",
        Samples::PerModel(|m| m.unloads.to_string()),
    ),
    family(
        "edgecloud_cloud_spend_usd_total",
        COUNTER,
        "Dollars spent on the cloud: the provider's token counts times the configured price, by route and cloud model (docs/cost.md).",
        Samples::Custom(|name, v, o| spend_family(name, v, o, |s| s.cloud_usd)),
    ),
    family(
        "edgecloud_cloud_only_estimate_usd_total",
        COUNTER,
        "What the same answers would have cost from the cloud alone (an estimate from local token counts where the local lane answered), by route and cloud model.",
        Samples::Custom(|name, v, o| spend_family(name, v, o, |s| s.cloud_only_usd_estimate)),
    ),
    family(
        "edgecloud_saved_usd_estimate_total",
        COUNTER,
        "The cloud-only estimate minus what was spent: what the local lane saved, by route and cloud model.",
        Samples::Custom(|name, v, o| spend_family(name, v, o, |s| s.saved_usd_estimate)),
    ),
    family(
        "edgecloud_cloud_billed_tokens_total",
        COUNTER,
        "Cloud tokens the provider reported (and bills), by route, cloud model and kind (prompt, completion).",
        Samples::Custom(|name, v, o| {
            for ((route, model), s) in &v.st.spend {
                for (kind, n) in [("prompt", s.prompt_tokens), ("completion", s.completion_tokens)] {
                    let _ = writeln!(
                        o,
                        "{name}{{route=\"{}\",model=\"{}\",kind=\"{kind}\"}} {n}",
                        escape(route),
                        escape(model)
                    );
                }
            }
        }),
    ),
    family(
        "edgecloud_cloud_usage_unknown_total",
        COUNTER,
        "Runs whose cloud lane ran without its provider reporting usage (cut or cancelled): billed, but not in the spend.",
        Samples::Custom(|name, v, o| spend_family(name, v, o, |s| s.usage_unknown as f64)),
    ),
    family(
        "edgecloud_cloud_budget_refusals_total",
        COUNTER,
        "Runs whose cloud lane was absent because the route's cloud budget was spent.",
        Samples::Custom(|name, v, o| {
            for (route, b) in &v.st.budgets {
                let _ = writeln!(o, "{name}{{route=\"{}\"}} {}", escape(route), b.refused);
            }
        }),
    ),
    family(
        "edgecloud_cloud_budget_leaned_total",
        COUNTER,
        "Runs a nearly spent cloud budget ran as a cascade (local first).",
        Samples::Custom(|name, v, o| {
            for (route, b) in &v.st.budgets {
                let _ = writeln!(o, "{name}{{route=\"{}\"}} {}", escape(route), b.leaned);
            }
        }),
    ),
    family(
        "edgecloud_cloud_budget_spent",
        GAUGE,
        "Spent of each route's cloud budget in its current period, in the budget's unit (usd or tokens), with the limit as a label; from the ledger store (other processes sharing it included).",
        Samples::Custom(|name, v, o| {
            let Some(l) = v.ledger else {
                return;
            };
            for (route, r) in &l.routes {
                if let Some(b) = &r.budget {
                    let _ = writeln!(
                        o,
                        "{name}{{route=\"{}\",budget=\"{}\"}} {}",
                        escape(route),
                        escape(&b.budget),
                        b.spent
                    );
                }
            }
        }),
    ),
    family(
        "edgecloud_replays_total",
        COUNTER,
        "Recorded answers given again for a repeated Idempotency-Key, without running a lane.",
        Samples::One(|v| v.st.replays),
    ),
];

/// An instance's labels: `instance="N"`, after `model="NAME"` on a
/// server of several models.
fn instance(i: &InstanceState) -> String {
    match &i.model {
        Some(m) => format!("model=\"{}\",instance=\"{}\"", escape(m), i.instance),
        None => format!("instance=\"{}\"", i.instance),
    }
}

/// A label value as Prometheus reads it.
/// One sample per (route, failed lane, error kind) of lane switches.
fn switch_family(name: &str, v: &View<'_>, o: &mut String, value: fn(&SwitchCounts) -> u64) {
    for ((route, from, kind), c) in &v.st.switches {
        let (route, to) = (escape(route), from.other());
        let _ = writeln!(
            o,
            "{name}{{route=\"{route}\",from=\"{from}\",to=\"{to}\",kind=\"{kind}\"}} {}",
            value(c)
        );
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::super::engine::{LaneState, LaneSummary, Tokens};
    use super::*;

    fn lane(lane: Lane, status: LaneStatus) -> LaneSummary {
        LaneSummary::empty(lane, status)
    }

    fn summary(status: Status, lanes: Vec<LaneSummary>) -> Summary {
        Summary {
            run_id: 1,
            route: "default".into(),
            policy: "race".into(),
            status,
            lane: None,
            committed: None,
            deadline_ms: 100.0,
            elapsed_ms: 20.0,
            overshoot_ms: 0.0,
            ttft_ms: None,
            late_workers: 0,
            decision: String::new(),
            error: None,
            lanes,
            text: None,
            finish_reason: None,
            tool_calls: Vec::new(),
            logprobs: None,
            logprobs_from: None,
            stop_sequence: None,
            reasoning: None,
            reasoning_tokens: None,
            timings: None,
            prompt_stage: None,
            cost: None,
            replay: None,
            switch: None,
        }
    }

    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn runs_are_counted_per_lane_with_token_sources_apart() {
        let m = Metrics::default();
        let mut local = lane(Lane::Local, LaneStatus::Completed);
        local.tokens = Tokens {
            local_prompt: Some(5),
            local_completion: Some(3),
            ..Tokens::default()
        };
        local.ttft_ms = Some(4.0);
        local.total_ms = Some(30.0);
        let mut cloud = lane(Lane::Cloud, LaneStatus::Failed);
        cloud.error_kind = Some(LaneErrorKind::HttpStatus);
        cloud.tokens.provider_prompt = Some(7);
        m.run(&summary(Status::Ok, vec![local, cloud]));
        let mut late = lane(Lane::Local, LaneStatus::Late);
        late.note = Some("x".into());
        m.run(&summary(
            Status::DeadlineExceeded,
            vec![late, lane(Lane::Cloud, LaneStatus::Busy)],
        ));
        m.late_worker_finished(Lane::Local, Duration::from_millis(40));
        m.busy_rejection();
        m.http("/v1/chat/completions", 200);

        let health = Health {
            lanes: vec![
                LaneState {
                    lane: Lane::Local,
                    configured: true,
                    busy: true,
                    health: None,
                    device: None,
                },
                LaneState {
                    lane: Lane::Cloud,
                    configured: false,
                    busy: false,
                    health: None,
                    device: None,
                },
            ],
            instances: Vec::new(),
            queued: 0,
            rejected: 0,
            runs_in_flight: 0,
            late_workers_running: 1,
            observer_events_dropped: 0,
            models: Vec::new(),
        };
        let t = m.render(&health, None, 2);
        assert_eq!(
            value(&t, "edgecloud_lane_requests_total{lane=\"local\"}"),
            2.0
        );
        assert_eq!(
            value(&t, "edgecloud_lane_requests_total{lane=\"cloud\"}"),
            2.0
        );
        assert_eq!(
            value(&t, "edgecloud_lane_completions_total{lane=\"local\"}"),
            1.0
        );
        assert_eq!(
            value(
                &t,
                "edgecloud_lane_failures_total{lane=\"cloud\",kind=\"http_status\"}"
            ),
            1.0
        );
        assert_eq!(
            value(&t, "edgecloud_lane_busy_rejections_total{lane=\"cloud\"}"),
            1.0
        );
        assert_eq!(
            value(&t, "edgecloud_lane_late_workers_total{lane=\"local\"}"),
            1.0
        );
        assert_eq!(
            value(&t, "edgecloud_lane_deadline_misses_total{lane=\"local\"}"),
            1.0
        );
        assert_eq!(
            value(
                &t,
                "edgecloud_lane_prompt_tokens_total{lane=\"local\",source=\"local\"}"
            ),
            5.0
        );
        assert_eq!(
            value(
                &t,
                "edgecloud_lane_prompt_tokens_total{lane=\"local\",source=\"provider\"}"
            ),
            0.0
        );
        assert_eq!(
            value(
                &t,
                "edgecloud_lane_prompt_tokens_total{lane=\"cloud\",source=\"provider\"}"
            ),
            7.0
        );
        assert_eq!(
            value(
                &t,
                "edgecloud_lane_completion_tokens_total{lane=\"local\",source=\"local\"}"
            ),
            3.0
        );
        assert_eq!(
            value(
                &t,
                "edgecloud_lane_ttft_seconds_bucket{lane=\"local\",le=\"0.005\"}"
            ),
            1.0
        );
        assert_eq!(
            value(
                &t,
                "edgecloud_lane_ttft_seconds_bucket{lane=\"local\",le=\"0.0025\"}"
            ),
            0.0
        );
        assert_eq!(
            value(&t, "edgecloud_lane_duration_seconds_count{lane=\"local\"}"),
            1.0
        );
        assert_eq!(
            value(
                &t,
                "edgecloud_lane_late_overrun_seconds_count{lane=\"local\"}"
            ),
            1.0
        );
        assert_eq!(
            value(&t, "edgecloud_runs_total{policy=\"race\",status=\"ok\"}"),
            1.0
        );
        assert_eq!(
            value(
                &t,
                "edgecloud_runs_total{policy=\"race\",status=\"deadline_exceeded\"}"
            ),
            1.0
        );
        assert_eq!(value(&t, "edgecloud_busy_rejections_total"), 1.0);
        assert_eq!(value(&t, "edgecloud_lane_busy{lane=\"local\"}"), 1.0);
        assert_eq!(value(&t, "edgecloud_late_workers_running"), 1.0);
        assert_eq!(value(&t, "edgecloud_http_connections_open"), 2.0);
        assert_eq!(value(&t, "edgecloud_request_duration_seconds_count"), 2.0);
        assert_eq!(
            value(
                &t,
                "edgecloud_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"}"
            ),
            1.0
        );
    }

    #[test]
    fn exposition_is_well_formed() {
        let t = Metrics::default().render(&Health::default(), None, 0);
        let mut typed = std::collections::HashSet::new();
        for line in t.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(name.starts_with("edgecloud_"), "{line}");
                assert!(typed.insert(name.to_string()), "TYPE twice: {line}");
            } else if !line.starts_with("# HELP ") {
                let (series, v) = line.rsplit_once(' ').unwrap();
                assert!(v.parse::<f64>().is_ok(), "{line}");
                let name = series.split('{').next().unwrap();
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|b| typed.contains(*b)))
                    .unwrap_or(name);
                assert!(typed.contains(base), "series before its TYPE: {line}");
            }
        }
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    /// Every kind of series with a value in it: what the golden file holds.
    fn populated() -> (Metrics, Health) {
        let m = Metrics::default();
        m.embeddings(Lane::Local, false);
        m.embeddings(Lane::Cloud, true);
        let mut local = lane(Lane::Local, LaneStatus::Completed);
        local.tokens = Tokens {
            local_prompt: Some(5),
            local_completion: Some(3),
            local_reused_prompt: Some(2),
            ..Tokens::default()
        };
        local.ttft_ms = Some(4.0);
        local.total_ms = Some(30.0);
        local.draft_n = Some(4);
        local.draft_n_accepted = Some(3);
        let mut cloud = lane(Lane::Cloud, LaneStatus::Failed);
        cloud.error_kind = Some(LaneErrorKind::HttpStatus);
        cloud.tokens.provider_prompt = Some(7);
        cloud.tokens.provider_completion = Some(2);
        cloud.total_ms = Some(1200.0);
        let mut staged = summary(Status::Ok, vec![local, cloud]);
        staged.prompt_stage = Some(edgecloud_core::harness::PromptStage {
            signal: edgecloud_core::harness::Signal::PromptLogprob,
            threshold: -2.0,
            score: Some(-2.5),
            straight_to_cloud: true,
        });
        staged.switch = Some(edgecloud_core::harness::LaneSwitch {
            from: Lane::Cloud,
            to: Lane::Local,
            error_kind: LaneErrorKind::Transport,
            reason: "(transport) the stream ended before [DONE]".into(),
            sent_chars: 40,
            sent_reasoning_chars: 2,
            sent_pieces: 9,
            at_ms: 120.0,
            first_token_after_ms: Some(30.0),
        });
        let mut cost = edgecloud_core::harness::Cost::default();
        cost.cloud_model = Some("m\"x".into());
        cost.cloud_usd = Some(0.25);
        cost.cloud_only_usd_estimate = Some(1.5);
        cost.saved_usd_estimate = Some(1.25);
        cost.cloud_prompt_tokens = 7;
        cost.cloud_completion_tokens = 2;
        staged.cost = Some(cost);
        m.run(&staged);
        // A replay: counted apart, its lanes and spend not again.
        let mut replayed = staged.clone();
        replayed.replay = Some(
            serde_json::from_value(serde_json::json!(
                {"key": "k", "of_run_id": 1, "recorded_at": "2026-12-06T00:00:00Z"}
            ))
            .unwrap(),
        );
        m.run(&replayed);
        let mut odd = summary(
            Status::DeadlineExceeded,
            vec![
                lane(Lane::Local, LaneStatus::Late),
                lane(Lane::Cloud, LaneStatus::Unavailable),
            ],
        );
        odd.policy = "a\"b".into();
        m.run(&odd);
        m.late_worker_finished(Lane::Local, Duration::from_millis(40));
        m.busy_rejection();
        m.request_ttft(Duration::from_millis(12));
        m.http("/v1/chat/completions", 200);
        m.http("/health", 503);
        let health = Health {
            lanes: vec![
                LaneState {
                    lane: Lane::Local,
                    configured: true,
                    busy: true,
                    health: None,
                    device: None,
                },
                LaneState {
                    lane: Lane::Cloud,
                    configured: true,
                    busy: false,
                    health: Some(edgecloud_core::harness::LaneHealth {
                        down: true,
                        probing: false,
                        retry_in_ms: Some(500.0),
                        consecutive_failures: 3,
                        went_down: 2,
                        recovered: 1,
                        last_failure: None,
                    }),
                    device: None,
                },
            ],
            instances: vec![InstanceState {
                model: None,
                instance: 0,
                busy: true,
                local_busy: true,
                cloud_busy: false,
                late_workers_running: 1,
                runs_in_flight: 1,
            }],
            queued: 2,
            rejected: 5,
            runs_in_flight: 1,
            late_workers_running: 1,
            observer_events_dropped: 4,
            models: vec![ModelState {
                name: "chat".into(),
                loaded: true,
                loading: false,
                memory_bytes: Some(98_400_000),
                in_flight: 1,
                idle_ms: None,
                expires_in_ms: None,
                loads: 2,
                load_seconds: 0.5,
                load_failures: 1,
                unloads: 1,
                requests: 7,
                last_error: None,
            }],
        };
        (m, health)
    }

    /// The exposition byte for byte (the version label aside): dashboards
    /// and alerts read these names and labels. Regenerate with
    /// `EDGECLOUD_WRITE_GOLDEN=1` only for a deliberate change.
    #[test]
    fn exposition_matches_the_golden_file() {
        let (m, health) = populated();
        let text = m
            .render(&health, None, 3)
            .replace(env!("CARGO_PKG_VERSION"), "VERSION");
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/metrics.golden.prom");
        if std::env::var_os("EDGECLOUD_WRITE_GOLDEN").is_some() {
            std::fs::write(path, &text).unwrap();
        }
        assert_eq!(text, include_str!("metrics.golden.prom"));
    }
}
