//! The server's counters and histograms, and their Prometheus text
//! rendering (`GET /metrics`). A small fixed registry: every series is
//! known in advance, so the output always has the same shape and a missing
//! lane reads 0 rather than disappearing. It records what runs report and
//! must not decide anything.

use super::engine::{Health, LaneStatus, Status, Summary};
use crate::harness::LaneErrorKind;
use crate::lane::{FinishReason, Lane, PerLane};
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
}

#[derive(Debug, Default)]
struct State {
    http: BTreeMap<(&'static str, u16), u64>,
    runs: BTreeMap<(String, &'static str), u64>,
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

/// Reads one per-lane figure (a table of these renders the lane series).
type Get<T> = fn(&LaneMetrics) -> T;

/// (provider-reported, locally counted) tokens.
type ByLane = (u64, u64);

/// Reads one per-lane histogram.
type GetHistogram = for<'a> fn(&'a LaneMetrics) -> &'a Histogram;

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Updates are single additions; a poisoned lock holds usable counts.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One HTTP response, by endpoint and status.
    pub(crate) fn http(&self, endpoint: &'static str, status: u16) {
        *self.lock().http.entry((endpoint, status)).or_default() += 1;
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
        *st.runs
            .entry((s.policy.clone(), s.status.as_str()))
            .or_default() += 1;
        st.request_duration.observe(s.elapsed_ms / 1e3);
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
            if let Some(ms) = l.ttft_ms {
                m.ttft.observe(ms / 1e3);
            }
            if let Some(ms) = l.total_ms {
                m.duration.observe(ms / 1e3);
            }
        }
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub(crate) fn render(&self, health: &Health, connections: usize) -> String {
        let st = self.lock();
        let mut o = String::with_capacity(16 * 1024);
        let head = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };

        head(
            &mut o,
            "edgecloud_build_info",
            "gauge",
            "Always 1; the version is a label.",
        );
        let _ = writeln!(
            o,
            "edgecloud_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        head(
            &mut o,
            "edgecloud_http_requests_total",
            "counter",
            "HTTP responses by endpoint and status.",
        );
        for ((endpoint, status), n) in &st.http {
            let _ = writeln!(
                o,
                "edgecloud_http_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
            );
        }
        head(
            &mut o,
            "edgecloud_http_connections_open",
            "gauge",
            "HTTP connections open now.",
        );
        let _ = writeln!(o, "edgecloud_http_connections_open {connections}");
        head(
            &mut o,
            "edgecloud_runs_total",
            "counter",
            "Settled runs by policy and status (ok, deadline_exceeded, failed, aborted).",
        );
        for ((policy, status), n) in &st.runs {
            let _ = writeln!(
                o,
                "edgecloud_runs_total{{policy=\"{}\",status=\"{status}\"}} {n}",
                escape(policy)
            );
        }
        head(
            &mut o,
            "edgecloud_runs_in_flight",
            "gauge",
            "Runs started and not yet settled.",
        );
        let _ = writeln!(o, "edgecloud_runs_in_flight {}", health.runs_in_flight);
        head(
            &mut o,
            "edgecloud_busy_rejections_total",
            "counter",
            "Requests answered 503 because every lane they needed was busy.",
        );
        let _ = writeln!(o, "edgecloud_busy_rejections_total {}", st.busy_rejections);
        head(
            &mut o,
            "edgecloud_late_workers_running",
            "gauge",
            "Late workers still holding their lane.",
        );
        let _ = writeln!(
            o,
            "edgecloud_late_workers_running {}",
            health.late_workers_running
        );
        head(
            &mut o,
            "edgecloud_observer_events_dropped_total",
            "counter",
            "Harness events dropped because a slow observer let its queue fill.",
        );
        let _ = writeln!(
            o,
            "edgecloud_observer_events_dropped_total {}",
            health.observer_events_dropped
        );
        head(
            &mut o,
            "edgecloud_request_duration_seconds",
            "histogram",
            "Run start to settlement, per request.",
        );
        st.request_duration
            .render(&mut o, "edgecloud_request_duration_seconds", "");
        head(
            &mut o,
            "edgecloud_request_ttft_seconds",
            "histogram",
            "Request start to the first content a streaming client received.",
        );
        st.request_ttft
            .render(&mut o, "edgecloud_request_ttft_seconds", "");

        head(
            &mut o,
            "edgecloud_lane_configured",
            "gauge",
            "1 when the lane has a backend.",
        );
        for l in &health.lanes {
            let _ = writeln!(
                o,
                "edgecloud_lane_configured{{lane=\"{}\"}} {}",
                l.lane,
                u8::from(l.configured)
            );
        }
        head(
            &mut o,
            "edgecloud_lane_busy",
            "gauge",
            "1 while a worker (possibly late) holds the lane.",
        );
        for l in &health.lanes {
            let _ = writeln!(
                o,
                "edgecloud_lane_busy{{lane=\"{}\"}} {}",
                l.lane,
                u8::from(l.busy)
            );
        }
        head(
            &mut o,
            "edgecloud_lane_down",
            "gauge",
            "1 while the lane is marked down (cloud: after connect-level failures, until a probe finds it back).",
        );
        for l in &health.lanes {
            let _ = writeln!(
                o,
                "edgecloud_lane_down{{lane=\"{}\"}} {}",
                l.lane,
                u8::from(l.health.as_ref().is_some_and(|h| h.down))
            );
        }
        head(
            &mut o,
            "edgecloud_lane_down_transitions_total",
            "counter",
            "Lane state changes: to=\"down\" (marked down) and to=\"up\" (a probe found it back).",
        );
        for l in &health.lanes {
            let (down, up) = l
                .health
                .as_ref()
                .map_or((0, 0), |h| (h.went_down, h.recovered));
            let _ = writeln!(
                o,
                "edgecloud_lane_down_transitions_total{{lane=\"{lane}\",to=\"down\"}} {down}\n\
                 edgecloud_lane_down_transitions_total{{lane=\"{lane}\",to=\"up\"}} {up}",
                lane = l.lane
            );
        }
        let counters: [(&str, &str, Get<u64>); 7] = [
            (
                "edgecloud_lane_requests_total",
                "Runs that asked for the lane (admitted, busy or unavailable).",
                |m| m.requests,
            ),
            (
                "edgecloud_lane_completions_total",
                "Whole answers (stop or length) the lane returned.",
                |m| m.completions,
            ),
            (
                "edgecloud_lane_cancelled_total",
                "Workers that returned early, cut by cancellation or their deadline.",
                |m| m.cancelled,
            ),
            (
                "edgecloud_lane_busy_rejections_total",
                "Runs in which the lane was busy and so absent.",
                |m| m.busy,
            ),
            (
                "edgecloud_lane_unavailable_total",
                "Runs in which the lane was marked down and so absent.",
                |m| m.unavailable,
            ),
            (
                "edgecloud_lane_deadline_misses_total",
                "Workers cut by the run's deadline or still running at it.",
                |m| m.deadline_misses,
            ),
            (
                "edgecloud_lane_late_workers_total",
                "Workers still running when their run settled.",
                |m| m.late_workers,
            ),
        ];
        for (name, help, get) in counters {
            head(&mut o, name, "counter", help);
            for lane in Lane::ALL {
                let _ = writeln!(o, "{name}{{lane=\"{lane}\"}} {}", get(&st.lanes[lane]));
            }
        }
        head(
            &mut o,
            "edgecloud_lane_failures_total",
            "counter",
            "Lane errors by kind.",
        );
        for lane in Lane::ALL {
            for (kind, n) in &st.lanes[lane].failures {
                let _ = writeln!(
                    o,
                    "edgecloud_lane_failures_total{{lane=\"{lane}\",kind=\"{}\"}} {n}",
                    kind.as_str()
                );
            }
        }
        let tokens: [(&str, &str, Get<ByLane>); 2] = [
            ("edgecloud_lane_prompt_tokens_total", "Prompt tokens by source: provider (reported by the cloud provider) or local (counted by the local tokenizer).", |m| (m.prompt_provider, m.prompt_local)),
            ("edgecloud_lane_completion_tokens_total", "Completion tokens by source: provider or local.", |m| (m.completion_provider, m.completion_local)),
        ];
        for (name, help, get) in tokens {
            head(&mut o, name, "counter", help);
            for lane in Lane::ALL {
                let (provider, local) = get(&st.lanes[lane]);
                let _ = writeln!(
                    o,
                    "{name}{{lane=\"{lane}\",source=\"provider\"}} {provider}"
                );
                let _ = writeln!(o, "{name}{{lane=\"{lane}\",source=\"local\"}} {local}");
            }
        }
        let hists: [(&str, &str, GetHistogram); 3] = [
            (
                "edgecloud_lane_ttft_seconds",
                "Lane admission to its first token.",
                |m| &m.ttft,
            ),
            (
                "edgecloud_lane_duration_seconds",
                "Lane admission to its return (total latency).",
                |m| &m.duration,
            ),
            (
                "edgecloud_lane_late_overrun_seconds",
                "How long late workers ran past their run's settlement.",
                |m| &m.late_overrun,
            ),
        ];
        for (name, help, get) in hists {
            head(&mut o, name, "histogram", help);
            for lane in Lane::ALL {
                get(&st.lanes[lane]).render(&mut o, name, &format!("lane=\"{lane}\""));
            }
        }
        render_pool(&mut o, health);
        o
    }
}

/// The pool's gauges: instances, queue and refusals, and each instance's
/// busy lanes and late workers (`instance` label).
fn render_pool(o: &mut String, health: &Health) {
    let mut gauge = |name: &str, kind: &str, help: &str, rows: Vec<(String, u64)>| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in rows {
            let _ = writeln!(o, "{name}{labels} {v}");
        }
    };
    let per_instance = |f: &dyn Fn(&super::engine::InstanceState) -> u64| {
        health
            .instances
            .iter()
            .map(|i| (format!("{{instance=\"{}\"}}", i.instance), f(i)))
            .collect::<Vec<_>>()
    };
    gauge(
        "edgecloud_pool_instances",
        "gauge",
        "Harness instances in the pool (requests served at once).",
        vec![(String::new(), health.instances.len() as u64)],
    );
    gauge(
        "edgecloud_pool_queued",
        "gauge",
        "Requests waiting for a free instance now (--max-queue-ms).",
        vec![(String::new(), health.queued)],
    );
    gauge(
        "edgecloud_pool_rejected_total",
        "counter",
        "Requests refused because every instance was busy.",
        vec![(String::new(), health.rejected)],
    );
    gauge(
        "edgecloud_instance_busy",
        "gauge",
        "1 while a request runs on the instance.",
        per_instance(&|i| u64::from(i.busy)),
    );
    let lanes = health
        .instances
        .iter()
        .flat_map(|i| {
            [("local", i.local_busy), ("cloud", i.cloud_busy)].map(|(lane, busy)| {
                (
                    format!("{{instance=\"{}\",lane=\"{lane}\"}}", i.instance),
                    u64::from(busy),
                )
            })
        })
        .collect();
    gauge(
        "edgecloud_instance_lane_busy",
        "gauge",
        "1 while a worker (possibly late) holds the instance's lane.",
        lanes,
    );
    gauge(
        "edgecloud_instance_late_workers_running",
        "gauge",
        "Late workers running on the instance (each holds its lane).",
        per_instance(&|i| i.late_workers_running),
    );
}

/// A label value as Prometheus reads it.
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
        LaneSummary {
            lane,
            status,
            ttft_ms: None,
            total_ms: None,
            finish_reason: None,
            score: None,
            error: None,
            error_kind: None,
            tokens: Tokens::default(),
            note: None,
            retry_in_ms: None,
        }
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
                },
                LaneState {
                    lane: Lane::Cloud,
                    configured: false,
                    busy: false,
                    health: None,
                },
            ],
            instances: Vec::new(),
            queued: 0,
            rejected: 0,
            runs_in_flight: 0,
            late_workers_running: 1,
            observer_events_dropped: 0,
        };
        let t = m.render(&health, 2);
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
        let t = Metrics::default().render(
            &Health {
                lanes: vec![],
                instances: Vec::new(),
                queued: 0,
                rejected: 0,
                runs_in_flight: 0,
                late_workers_running: 0,
                observer_events_dropped: 0,
            },
            0,
        );
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
}
