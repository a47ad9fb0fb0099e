//! The compute-thread governor (contract point 14): how many of the lane's
//! threads each `llama_decode` uses, chosen from the measured step time.
//!
//! llama.cpp's CPU threads meet at a barrier after every graph node,
//! hundreds of times per token. On a quiet machine every thread helps; when
//! another program holds a core, the thread whose partner was descheduled
//! waits through the partner's time slice, and a two-thread decode falls to
//! a fraction of what one thread alone gets from the free time (measured on
//! the project's 2-core VM, SmolLM2-135M, generation tokens/s: quiet 127
//! with 2 threads and 108 with 1; one busy loop per core 35 with 2 and 77
//! with 1; docs/busy-device.md).
//!
//! So the governor treats the thread counts as arms (the configured count,
//! then halving down to one: 8, 4, 2, 1) and keeps using the one with the
//! lowest recent mean step time, per kind of step (generation steps, timed
//! per step; prompt steps, timed per token). It looks at another arm for a
//! few steps ("a probe"): one thread fewer as soon as steps are contended
//! (the decode thread waited for a CPU more than 15% of two of the last
//! three steps: other programs hold cores), when a step overruns its
//! budget (several times the arm's figure: it is abandoned through the
//! abort callback and decoded again), or when the mean step time rises well above what
//! it was; and otherwise every `interval` steps, an interval that doubles
//! each time a probe confirms the current arm (so on a steady machine
//! probing costs well under 1%) and starts again short after a switch
//! (shortest after a switch down that one abandoned step caused: a
//! passing program is gone by then; for prompt steps, one a job in a lone
//! lane, the step decoded again is the probe and the next one looks up).
//! A probe of fewer threads that no contended step called for (a
//! periodic one, one after a slowdown) and the one an abandoned step
//! calls for first ask the caller how many cores no other program runs on
//! (`Governor::wants_free_cores`, answered from `/proc` by the decode loop
//! in about a millisecond): with a core for every thread of the arm in
//! use, fewer threads cannot win and the probe is not run (the interval
//! still doubles; an abandoned step is decoded again on every thread).
//! A periodic probe of more threads asks too: without a core for each of
//! the bigger arm's threads, one of them would share a core with another
//! program and every barrier would wait through its time slices, so more
//! threads cannot win and the probe is not run (docs/busy-device.md has
//! the measurements that led here). More
//! threads are only tried while the steps are not contended (with no free
//! core they would be the slowest steps of all), and a probe wins only by
//! a clear margin, so noise does not flap the count.
//!
//! llama.cpp's numbers do not depend on the thread count except in one
//! kernel: from 512 cache cells a single-token step splits attention across
//! the threads, which moves the last bits of the logits. A step the
//! governor runs with fewer threads can therefore turn a near-tie the other
//! way on long contexts; `ThreadPolicy::Fixed` keeps runs bit-reproducible.
//!
//! This module is pure bookkeeping over durations handed to it: it must not
//! read clocks, touch llama.cpp or know about jobs (the decode loop times
//! each step and applies the count through `ffi`).

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// How the local lane picks the number of compute threads per decode step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadPolicy {
    /// Follow the measured step time: the configured count while it is the
    /// fastest, fewer when other programs hold cores (the default).
    #[default]
    Adaptive,
    /// Always the configured count, as llama.cpp itself does.
    Fixed,
}

impl ThreadPolicy {
    /// The name used by the CLI, the config file and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Adaptive => "adaptive",
            Self::Fixed => "fixed",
        }
    }
}

impl std::fmt::Display for ThreadPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ThreadPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "adaptive" => Ok(Self::Adaptive),
            "fixed" => Ok(Self::Fixed),
            other => Err(format!(
                "unknown thread policy {other:?} (expected adaptive or fixed)"
            )),
        }
    }
}

/// What a decode step was: generation (one token per generating sequence)
/// or prompt processing (chunks of prompts). Their costs differ in kind, so
/// each has its own choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepKind {
    Generate,
    Prompt,
}

impl StepKind {
    /// Steps of up to this many tokens are generation steps (a pool's
    /// sequences' tokens, perhaps a short prompt tail): timed per step.
    const GENERATE_MAX_TOKENS: usize = 16;

    pub(crate) fn of_batch(tokens: usize) -> Self {
        if tokens <= Self::GENERATE_MAX_TOKENS {
            Self::Generate
        } else {
            Self::Prompt
        }
    }

    /// How many cost units a step of this kind with `tokens` tokens is:
    /// a prompt step one per token; a generation step `tokens ^
    /// GENERATE_ROW_EXPONENT` (a pool's step carries one row per generating
    /// sequence, perhaps a short prompt tail, and a row more costs less
    /// than the first: the weights are read once for all of them).
    ///
    /// Comparing arms on raw step times would compare batch widths, not
    /// thread counts: in a pool of 4 (SmolLM2, the project's 2-core VM) a
    /// step of 4 rows took 23 ms with two threads and a step of 1 row 12
    /// ms with one, so a probe of one thread that met the pool's last
    /// lone sequence "won", and a probe of two threads that met a 14-token
    /// prompt tail (52 ms) "lost"; the pool spent half its steps on one
    /// thread (34.8 ms against 23.2 ms for 4 rows).
    pub(crate) fn units(self, tokens: usize) -> f64 {
        let tokens = tokens.max(1) as f64;
        match self {
            Self::Generate => tokens.powf(GENERATE_ROW_EXPONENT),
            Self::Prompt => tokens,
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Generate => 0,
            Self::Prompt => 1,
        }
    }
}

/// A generation step of r rows costs about r to this power times a step of
/// one row. Measured on the project's 2-core VM (step times by rows, from
/// the decode loop's trace): SmolLM2-135M 0.56-0.68 with two threads and
/// 0.70-0.76 with one (rows 4, 13, 16); Qwen2.5-Coder-1.5B 0.73-0.87 (its
/// draft rows' costs, `draft::RowCost`). The arms' own ratio (1.3-1.9x
/// between one and two threads) is larger than what the middle value
/// gets wrong across those widths, so a probe that meets other widths
/// than the steps it is judged against is still judged on threads.
const GENERATE_ROW_EXPONENT: f64 = 0.7;

/// Recent steps kept for the current arm; the mean of their costs is its
/// figure (the mean, not the median: under contention a few steps take
/// ten times the others, and those are exactly the cost to avoid).
const WINDOW: usize = 8;
/// Samples needed before the current arm's figure means anything.
const MIN_SAMPLES: usize = WINDOW / 2 + 1;
/// Steps one probe of another arm is judged on ...
const PROBE_STEPS: usize = 3;
/// ... after a first step that is not counted (unless it overruns): the
/// first step with more threads than before wakes or creates the extra
/// compute threads and warms their caches (measured: 13.5 ms against 9-10
/// for the steps after it).
/// Steps between periodic probes just after a change, and at most.
const BASE_INTERVAL: u32 = 48;
const MAX_INTERVAL: u32 = 512;
/// The same for prompt steps while they run on fewer threads than
/// configured. A prompt step takes as long as 10-20 generation steps (128
/// tokens: 60-120 ms against 6-12 ms on the 2-core VM) and a lone lane
/// takes one a job, so generation's counts would keep a prompt arm that
/// went down there for 48-512 jobs; these are about the same time.
const PROMPT_LOOK_UP_INTERVAL: u32 = 4;
const PROMPT_MAX_INTERVAL: u32 = 64;
/// The current arm's figure over its reference by this factor is "load
/// arrived": probe fewer threads at once.
const SLOWDOWN: f64 = 1.4;
/// A probe of fewer threads must beat the current arm's figure by this
/// factor to win (noise must not take threads from a quiet lane) ...
const WIN_MARGIN: f64 = 0.85;
/// ... a probe of more threads on uncontended steps by this one (a quiet
/// machine is llama.cpp's case: every configured thread).
const UP_WIN_MARGIN: f64 = 0.95;
/// ... except fewer threads after a contended step, which win unless they
/// are this much slower than the contended steps seen: with other programs
/// on the cores, more threads' step times are heavy-tailed (one step 17 ms,
/// the next 84 ms), so the few seen usually flatter them, while fewer
/// threads' steps are steady.
const CONTENDED_WIN_MARGIN: f64 = 1.3;
/// A step may take this many times its arm's figure (a probe of more
/// threads: the current arm's figure) before it is abandoned and decoded
/// again with fewer threads: under contention a step with too many threads
/// can take 10-30 times its quiet time, and one such step costs more than
/// the whole probe could win.
const OVERRUN_FACTOR: f64 = 4.0;
const PROBE_OVERRUN_FACTOR: f64 = 3.0;
/// ... and never less than its figure plus this (seconds), so that a
/// preempted sub-millisecond step is not called an overrun.
const OVERRUN_SLACK_S: f64 = 0.005;
/// The first gap after fewer threads lost a contention probe.
const CONTENTION_GAP: u32 = 8;
/// Steps before looking up again after one abandoned step moved the arm
/// down. One step that waited for a CPU may be a passing program (a
/// shell, a kernel thread): seen on a quiet 2-core VM every half minute or
/// so, each time followed by a whole `BASE_INTERVAL` of steps at half
/// speed (a lone SmolLM2 lane: 52 one-thread steps of 12 ms against 7-8
/// ms). A load that stays makes the look up lose (or never happen: an arm
/// whose steps wait does not look up), and the interval grows from
/// `BASE_INTERVAL` as before.
const AFTER_ABANDON_INTERVAL: u32 = 8;
/// A step is contended when the decode thread waited for a CPU (runnable,
/// not running) for more than this share of the step's wall time.
const CONTENDED_SHARE: f64 = 0.15;
/// An arm whose steps wait this share on average has no free core for
/// more threads: it does not probe up.
const HEAVY_CONTENTION: f64 = 0.3;

impl StepFigure {
    fn contended(&self) -> bool {
        self.wait_share > CONTENDED_SHARE
    }
}

/// One measured decode step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepFigure {
    /// Seconds per cost unit ([`StepKind::units`]): per step of one row
    /// for generation, per token for prompts.
    pub(crate) cost: f64,
    /// The share of the step's wall time the decode thread spent waiting
    /// for a CPU while runnable: other programs hold cores.
    pub(crate) wait_share: f64,
    /// Whether the step ran past its budget ([`Governor::budget`]) and was
    /// abandoned (`cost` is then what it had taken).
    pub(crate) overran: bool,
}

/// The governor of one context's decode steps.
#[derive(Debug)]
pub(crate) struct Governor {
    /// Thread counts it may use, ascending; the last is the configured one.
    ladder: Vec<usize>,
    adaptive: bool,
    kinds: [KindState; 2],
    /// Whether a probe of fewer threads that no lasting contention asked
    /// for (a periodic one, one after a slowdown, one an abandoned step
    /// calls for) and a periodic probe of more threads wait for the caller
    /// to say how many cores are free ([`Self::wants_free_cores`]).
    asks_free_cores: bool,
}

#[derive(Debug)]
struct KindState {
    kind: StepKind,
    /// Index of the configured count in the ladder.
    top: usize,
    /// Index into the ladder of the arm in use.
    current: usize,
    /// The current arm's recent steps.
    recent: VecDeque<StepFigure>,
    /// The current arm's figure when it was last confirmed.
    reference: Option<f64>,
    since_probe: u32,
    /// Steps between periodic probes.
    interval: u32,
    /// Steps after a probe before a contended step may start another one
    /// (1: at once; from `CONTENTION_GAP` it doubles each time fewer
    /// threads lose under contention, e.g. when the competitors are
    /// low-priority, up to `MAX_INTERVAL`).
    contention_gap: u32,
    probe: Option<Probe>,
    /// Which neighbour the next periodic probe tries when both exist.
    probe_down_next: bool,
    /// A probe of more threads won since the machine last got busier (a
    /// slowdown or an overrun): contended steps then need the usual margin
    /// to go back down, since more threads were just measured faster under
    /// these conditions (no flip-flop).
    up_won: bool,
    /// A probe waiting for the count of free cores.
    pending: Option<Pending>,
}

/// A probe before the caller has said how many cores are free
/// ([`Governor::free_cores`]).
#[derive(Debug, Clone, Copy)]
struct Pending {
    direction: Direction,
    /// As [`Probe`]'s.
    baseline: f64,
    margin: f64,
    /// An abandoned step called for it (a probe of fewer threads).
    after_abandon: bool,
}

#[derive(Debug)]
struct Probe {
    arm: usize,
    /// The warm-up step has been taken.
    warmed: bool,
    /// Steps it is judged on.
    steps: usize,
    costs: Vec<f64>,
    /// Wins when the probe's mean is under `baseline` times this.
    margin: f64,
    /// The current arm's figure the probe must beat: its mean over the
    /// window, or, when the machine just changed (a contended or overrun
    /// step started the probe), over the steps that show the change.
    baseline: f64,
    /// An abandoned step started it: if it wins, look up again soon.
    after_abandon: bool,
    /// ... at once (an abandoned prompt step's probe).
    look_up_at_once: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Down,
    Up,
}

impl Governor {
    /// A governor for a context configured with `max_threads` threads.
    pub(crate) fn new(max_threads: usize, policy: ThreadPolicy) -> Self {
        let max_threads = max_threads.max(1);
        let mut ladder = Vec::new();
        let mut n = max_threads;
        while n >= 1 {
            ladder.push(n);
            if n == 1 {
                break;
            }
            n /= 2;
        }
        ladder.reverse();
        let top = ladder.len() - 1;
        let state = |kind| KindState {
            kind,
            top,
            current: top,
            recent: VecDeque::with_capacity(WINDOW),
            reference: None,
            since_probe: 0,
            interval: BASE_INTERVAL,
            contention_gap: 1,
            probe: None,
            probe_down_next: true,
            up_won: false,
            pending: None,
        };
        Self {
            ladder,
            adaptive: policy == ThreadPolicy::Adaptive && top > 0,
            kinds: [state(StepKind::Generate), state(StepKind::Prompt)],
            asks_free_cores: false,
        }
    }

    /// Asks before a probe of fewer threads that no lasting contention
    /// called for, and before a periodic probe of more threads
    /// ([`Self::wants_free_cores`]).
    pub(crate) fn asking_free_cores(mut self) -> Self {
        self.asks_free_cores = true;
        self
    }

    /// The kind whose probe waits for the count of free cores: the caller
    /// reads it (`sched::free_cores`) and gives it to [`Self::free_cores`]
    /// before the next step.
    pub(crate) fn wants_free_cores(&self) -> Option<StepKind> {
        self.kinds
            .iter()
            .find(|k| k.pending.is_some())
            .map(|k| k.kind)
    }

    /// The cores no other program runs on, for the probe
    /// [`Self::wants_free_cores`] named. A probe of fewer threads: with a
    /// core for each of the current arm's threads, fewer threads cannot
    /// win (nothing holds their cores, and the decode thread's wait says
    /// so too). A probe of more threads: without a core for each of the
    /// bigger arm's threads, more threads cannot win (one of them would
    /// share a core with another program, and every barrier would wait
    /// through that program's time slices). Such a probe counts as
    /// confirming the arm without being run; otherwise (or when the kernel
    /// does not say) it runs.
    pub(crate) fn free_cores(&mut self, kind: StepKind, free: Option<usize>) {
        let current = self.kinds[kind.index()].current;
        let s = &mut self.kinds[kind.index()];
        let Some(pending) = s.pending.take() else {
            return;
        };
        let needless = match pending.direction {
            Direction::Down => free.is_some_and(|f| f >= self.ladder[current]),
            Direction::Up => self
                .ladder
                .get(current + 1)
                .is_none_or(|&more| free.is_some_and(|f| f < more)),
        };
        if needless {
            s.since_probe = 0;
            if !pending.after_abandon {
                s.reference = Some(pending.baseline);
                let (base, max) = s.intervals();
                s.interval = (s.interval * 2).clamp(base, max);
            }
        } else if pending.after_abandon {
            s.probe_after_abandon(pending.baseline);
        } else {
            s.start_probe(pending.direction, pending.baseline, pending.margin);
        }
    }

    /// Whether no step has been measured yet: the first step's thread
    /// count then comes from [`Self::start_on`].
    pub(crate) fn is_fresh(&self) -> bool {
        self.adaptive
            && self
                .kinds
                .iter()
                .all(|k| k.recent.is_empty() && k.probe.is_none() && k.since_probe == 0)
    }

    /// Starts every kind on the most threads that fit `free_cores` (the
    /// cores no other program was running on just before the first step),
    /// so a lane started on a busy machine does not pay for its first
    /// steps with every thread; later steps are measured.
    pub(crate) fn start_on(&mut self, free_cores: usize) {
        if !self.is_fresh() {
            return;
        }
        let arm = self
            .ladder
            .iter()
            .rposition(|&n| n <= free_cores.max(1))
            .unwrap_or(0);
        let below_top = arm + 1 < self.ladder.len();
        for k in &mut self.kinds {
            k.current = arm;
            if below_top {
                // A guess from one moment: check it as soon as there is a
                // figure to compare with.
                k.interval = MIN_SAMPLES as u32;
            }
        }
    }

    /// The thread count the next step of this kind uses.
    pub(crate) fn threads(&self, kind: StepKind) -> usize {
        let s = &self.kinds[kind.index()];
        let arm = s.probe.as_ref().map_or(s.current, |p| p.arm);
        self.ladder[arm]
    }

    /// How long the next step of this kind may take, in its cost units
    /// (multiply by the tokens for a prompt step), before it is abandoned
    /// and decoded again with fewer threads; `None`: no bound (fewest
    /// threads already, or nothing measured yet).
    pub(crate) fn budget(&self, kind: StepKind) -> Option<f64> {
        if !self.adaptive {
            return None;
        }
        let s = &self.kinds[kind.index()];
        let (factor, figure) = match &s.probe {
            Some(p) if p.arm > s.current => (PROBE_OVERRUN_FACTOR, p.baseline),
            Some(_) => return None,
            None if s.current > 0 && s.recent.len() >= MIN_SAMPLES => {
                (OVERRUN_FACTOR, s.mean_cost())
            }
            None => return None,
        };
        figure
            .is_finite()
            .then(|| (figure * factor).max(figure + OVERRUN_SLACK_S))
    }

    /// Whether the next step of this kind uses more than the fewest
    /// threads (so it may be abandoned for waiting and decoded again with
    /// fewer).
    pub(crate) fn may_go_down(&self, kind: StepKind) -> bool {
        self.adaptive && self.threads(kind) > self.ladder[0]
    }

    /// Records a step of `kind` that ran with `threads` threads.
    pub(crate) fn record(&mut self, kind: StepKind, threads: usize, step: StepFigure) {
        let usable = step.cost > 0.0 && (step.cost.is_finite() || step.overran);
        if !self.adaptive || !usable {
            return;
        }
        let Some(arm) = self.ladder.iter().position(|&n| n == threads) else {
            return;
        };
        let top = self.ladder.len() - 1;
        let s = &mut self.kinds[kind.index()];
        if let Some(probe) = s.probe.as_mut() {
            if probe.arm == arm {
                if !probe.warmed && !step.overran {
                    probe.warmed = true;
                    return;
                }
                probe.costs.push(step.cost);
                if step.overran {
                    // Whatever the other steps would have done, this one
                    // already lost the probe.
                    probe.costs.push(f64::INFINITY);
                    s.conclude_probe();
                } else if probe.costs.len() >= probe.steps {
                    s.conclude_probe();
                }
            }
            return;
        }
        if arm != s.current {
            return;
        }
        if step.overran {
            // Abandoned: not a figure of this arm (its cost may be
            // unbounded), but the strongest sign that fewer threads do
            // better now, unless what held a core is gone when the step
            // is decoded again (asked first: `free_cores`).
            if s.current > 0 {
                s.up_won = false;
                s.pending = None;
                if self.asks_free_cores {
                    s.pending = Some(Pending {
                        direction: Direction::Down,
                        baseline: step.cost,
                        margin: CONTENDED_WIN_MARGIN,
                        after_abandon: true,
                    });
                } else {
                    s.probe_after_abandon(step.cost);
                }
            }
            return;
        }
        if s.recent.len() == WINDOW {
            s.recent.pop_front();
        }
        s.recent.push_back(step);
        s.since_probe = s.since_probe.saturating_add(1);
        // Other programs hold cores: fewer threads at once, before the
        // barrier waits cost more steps (the figure to beat is whatever
        // this arm has shown so far).
        // Contention that lasts: two of the last three steps (a passing
        // program's blip is one step).
        let lasting = step.contended()
            && s.recent
                .iter()
                .rev()
                .take(3)
                .filter(|f| f.contended())
                .count()
                >= 2;
        if s.current > 0 && lasting && s.since_probe >= s.contention_gap {
            let baseline = mean(s.recent.iter().filter(|f| f.contended()).map(|f| f.cost));
            let margin = if s.up_won {
                WIN_MARGIN
            } else {
                CONTENDED_WIN_MARGIN
            };
            s.start_probe(Direction::Down, baseline, margin);
            return;
        }
        if s.recent.len() < MIN_SAMPLES {
            return;
        }
        let now = s.mean_cost();
        let reference = *s.reference.get_or_insert(now);
        let ask = self.asks_free_cores;
        if s.pending.is_some() {
            // Still waiting for the count of free cores.
        } else if now > reference * SLOWDOWN && s.current > 0 {
            s.up_won = false;
            s.probe(Direction::Down, now, WIN_MARGIN, ask);
        } else if s.since_probe >= s.interval {
            // More threads only help when there are free cores for them:
            // an arm whose steps wait for a CPU much of the time does not
            // look up (that probe would be the slowest steps of all).
            let waiting = mean(s.recent.iter().map(|f| f.wait_share));
            let may_go_up = s.current < top && waiting < HEAVY_CONTENTION;
            let may_go_down = s.current > 0;
            match (may_go_down, may_go_up) {
                (true, true) if s.probe_down_next => s.probe(Direction::Down, now, WIN_MARGIN, ask),
                (_, true) => s.probe(Direction::Up, now, UP_WIN_MARGIN, ask),
                (true, false) => s.probe(Direction::Down, now, WIN_MARGIN, ask),
                (false, false) => s.since_probe = 0,
            }
        }
    }
}

impl KindState {
    fn mean_cost(&self) -> f64 {
        mean(self.recent.iter().map(|f| f.cost))
    }

    /// The periodic probes' first interval after a change, and the
    /// longest, for the arm in use.
    fn intervals(&self) -> (u32, u32) {
        if self.kind == StepKind::Prompt && self.current < self.top {
            (PROMPT_LOOK_UP_INTERVAL, PROMPT_MAX_INTERVAL)
        } else {
            (BASE_INTERVAL, MAX_INTERVAL)
        }
    }

    /// A probe (of fewer threads, or a periodic one of more), or, when
    /// the caller is `ask`ed first, one waiting for the count of free
    /// cores.
    fn probe(&mut self, direction: Direction, baseline: f64, margin: f64, ask: bool) {
        if ask {
            self.probe_down_next = direction == Direction::Up;
            self.pending = Some(Pending {
                direction,
                baseline,
                margin,
                after_abandon: false,
            });
        } else {
            self.start_probe(direction, baseline, margin);
        }
    }

    /// The probe of fewer threads an abandoned step (of this `cost`)
    /// calls for.
    fn probe_after_abandon(&mut self, cost: f64) {
        self.start_probe(Direction::Down, cost, CONTENDED_WIN_MARGIN);
        let few_steps = self.kind == StepKind::Prompt;
        if let Some(p) = self.probe.as_mut() {
            p.after_abandon = true;
            if few_steps {
                // A prompt step is long (several generation steps' time)
                // and a lone lane takes one a job: the step decoded again
                // with fewer threads is the probe (going down wakes
                // nothing), and the next one looks up (`conclude_probe`).
                p.warmed = true;
                p.steps = 1;
                p.look_up_at_once = true;
            }
        }
    }

    fn start_probe(&mut self, direction: Direction, baseline: f64, margin: f64) {
        self.pending = None;
        let arm = match direction {
            Direction::Down => self.current - 1,
            Direction::Up => self.current + 1,
        };
        self.probe_down_next = direction == Direction::Up;
        self.probe = Some(Probe {
            arm,
            warmed: false,
            steps: PROBE_STEPS,
            costs: Vec::with_capacity(PROBE_STEPS),
            margin,
            baseline,
            after_abandon: false,
            look_up_at_once: false,
        });
    }

    fn conclude_probe(&mut self) {
        let Some(probe) = self.probe.take() else {
            return;
        };
        let went_down = probe.arm < self.current;
        let theirs = mean(probe.costs.iter().copied());
        let ours = probe.baseline;
        self.since_probe = 0;
        if theirs < ours * probe.margin {
            let went_up = probe.arm > self.current;
            self.up_won |= went_up;
            self.current = probe.arm;
            self.recent = probe
                .costs
                .into_iter()
                .map(|cost| StepFigure {
                    cost,
                    wait_share: 0.0,
                    overran: false,
                })
                .collect();
            self.reference = Some(theirs);
            self.interval = if went_down && probe.after_abandon {
                AFTER_ABANDON_INTERVAL.min(self.intervals().0)
            } else {
                self.intervals().0
            };
            self.contention_gap = if went_up { CONTENTION_GAP } else { 1 };
            if went_down && probe.look_up_at_once {
                // Look up at once: under a passing program the next prompt
                // steps are the configured count's again, and under a load
                // that stays the look up's first step is abandoned too and
                // loses (the interval then grows as usual). Before, by the
                // generation steps' rules (a probe of a warm-up and 3
                // steps, 8 steps' wait, a look up of 4), one abandoned
                // prompt step kept 12 prompt steps on one thread: 12 jobs
                // of `vs_llama_bench`'s 15 (a pp128 job is one prompt
                // step), where prompt speed read 0.52-0.56x llama-bench in
                // 2 runs of 7.
                self.start_probe(Direction::Up, theirs, UP_WIN_MARGIN);
            }
        } else {
            self.reference = Some(ours);
            let (base, max) = self.intervals();
            self.interval = (self.interval * 2).clamp(base, max);
            if went_down {
                self.contention_gap = (self.contention_gap * 2).clamp(CONTENTION_GAP, MAX_INTERVAL);
            }
        }
    }
}

/// The mean of a few values (infinite when there are none: anything
/// measured beats nothing measured).
fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        f64::INFINITY
    } else {
        sum / f64::from(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `steps` generation steps where a step with `n` threads costs
    /// `cost(n)`; returns how many steps used each thread count (index =
    /// threads).
    fn drive(g: &mut Governor, steps: usize, cost: impl FnMut(usize) -> Step) -> Vec<usize> {
        drive_kind(g, StepKind::Generate, steps, cost)
    }

    /// `drive` for steps of `kind` (costs per unit).
    fn drive_kind(
        g: &mut Governor,
        kind: StepKind,
        steps: usize,
        mut cost: impl FnMut(usize) -> Step,
    ) -> Vec<usize> {
        let mut used = vec![0; 17];
        for _ in 0..steps {
            let n = g.threads(kind);
            used[n] += 1;
            let (cost, wait_share) = cost(n);
            let overran = g.budget(kind).is_some_and(|b| cost > b);
            let cost = if overran {
                g.budget(kind).unwrap()
            } else {
                cost
            };
            g.record(
                kind,
                n,
                StepFigure {
                    cost,
                    wait_share,
                    overran,
                },
            );
        }
        used
    }

    /// A step's cost and the share of it spent waiting for a CPU.
    type Step = (f64, f64);

    /// The arm in use (not a probe's).
    fn current(g: &Governor, kind: StepKind) -> usize {
        g.ladder[g.kinds[kind.index()].current]
    }

    // Quiet 2-core figures: 2 threads 7.9 ms a token, 1 thread 9.3 ms.
    fn quiet(n: usize) -> Step {
        (if n == 2 { 0.0079 } else { 0.0093 }, 0.0)
    }
    // A busy loop per core: 2 threads 28 ms, 1 thread 13 ms, both waiting
    // for a CPU half the time.
    fn loaded(n: usize) -> Step {
        (if n == 2 { 0.028 } else { 0.013 }, 0.5)
    }
    // One busy loop on two cores: one thread has a core to itself.
    fn one_busy_loop(n: usize) -> Step {
        if n == 2 {
            (0.020, 0.4)
        } else {
            (0.0105, 0.0)
        }
    }

    #[test]
    fn the_ladder_halves_down_to_one() {
        assert_eq!(
            Governor::new(8, ThreadPolicy::Adaptive).ladder,
            [1, 2, 4, 8]
        );
        assert_eq!(Governor::new(6, ThreadPolicy::Adaptive).ladder, [1, 3, 6]);
        assert_eq!(Governor::new(2, ThreadPolicy::Adaptive).ladder, [1, 2]);
        assert_eq!(Governor::new(0, ThreadPolicy::Adaptive).ladder, [1]);
    }

    #[test]
    fn a_quiet_machine_keeps_every_thread_and_probes_rarely() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        let used = drive(&mut g, 10_000, quiet);
        // Probes only: 3 steps each, at intervals that double to 512: 0.7%
        // of the steps, at 1.18x the cost.
        assert!(used[1] <= 10_000 / 100, "one-thread steps: {}", used[1]);
        assert_eq!(current(&g, StepKind::Generate), 2);
    }

    #[test]
    fn load_moves_it_to_fewer_threads_within_a_few_steps() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        drive(&mut g, 200, quiet);
        let used = drive(&mut g, 30, loaded);
        assert_eq!(current(&g, StepKind::Generate), 1);
        assert!(
            used[2] <= 4,
            "two-thread steps after the load came: {}",
            used[2]
        );
        // And it stays there: with no free core, more threads are never
        // tried (the slowest steps of all).
        let used = drive(&mut g, 5_000, loaded);
        assert_eq!(used[2], 0, "two-thread probes under load");
    }

    #[test]
    fn with_one_core_free_it_keeps_one_thread_and_looks_up_rarely() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        let used = drive(&mut g, 10_000, one_busy_loop);
        assert_eq!(current(&g, StepKind::Generate), 1);
        assert!(used[2] <= 10_000 / 100, "two-thread steps: {}", used[2]);
    }

    #[test]
    fn a_passing_blip_is_not_contention() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        let mut step = 0;
        let used = drive(&mut g, 2_000, |n| {
            step += 1;
            let (cost, _) = quiet(n);
            (cost, if step % 40 == 0 { 0.6 } else { 0.0 })
        });
        assert!(used[1] <= 2_000 / 50, "one-thread steps: {}", used[1]);
    }

    #[test]
    fn contention_that_fewer_threads_do_not_beat_is_soon_left_alone() {
        // Low-priority competitors: the steps wait for a CPU now and then,
        // yet two threads stay the fastest.
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        let used = drive(&mut g, 10_000, |n| {
            (if n == 2 { 0.0085 } else { 0.0110 }, 0.2)
        });
        assert_eq!(current(&g, StepKind::Generate), 2);
        assert!(used[1] <= 10_000 / 50, "one-thread steps: {}", used[1]);
    }

    #[test]
    fn it_comes_back_when_the_load_goes() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        drive(&mut g, 50, quiet);
        drive(&mut g, 2_000, loaded);
        assert_eq!(current(&g, StepKind::Generate), 1);
        // Within one longest probe interval and a probe.
        drive(
            &mut g,
            (MAX_INTERVAL as usize) + PROBE_STEPS + 1 + WINDOW,
            quiet,
        );
        assert_eq!(current(&g, StepKind::Generate), 2);
    }

    #[test]
    fn a_pool_whose_batches_change_width_keeps_every_thread() {
        // A quiet pool of 4 (SmolLM2, the 2-core VM's step times by rows):
        // 4 rows most steps, a prompt tail now and then (15 rows), and a
        // lone sequence (1 row) while the others wait for their clients.
        // Two threads are faster at every width.
        let took = |n: usize, rows: usize| {
            let rows = rows as f64;
            if n == 2 {
                0.0094 * rows.powf(0.62)
            } else {
                0.0124 * rows.powf(0.74)
            }
        };
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        let mut used = [0usize; 3];
        for step in 0..20_000 {
            let phase = step % 200;
            let rows = match phase {
                0 => 14,
                140.. => 1,
                p if p % 23 == 22 => 15,
                _ => 4,
            };
            let n = g.threads(StepKind::Generate);
            used[n] += 1;
            let kind = StepKind::of_batch(rows);
            // A step past its budget is abandoned (and decoded again).
            let cost = took(n, rows) / kind.units(rows);
            let budget = g.budget(kind).unwrap_or(f64::INFINITY);
            g.record(
                kind,
                n,
                StepFigure {
                    cost: cost.min(budget),
                    wait_share: 0.0,
                    overran: cost > budget,
                },
            );
        }
        assert_eq!(current(&g, StepKind::Generate), 2);
        // Probes only, as on a quiet machine with one width.
        assert!(used[1] <= 20_000 / 100, "one-thread steps: {}", used[1]);
    }

    #[test]
    fn one_abandoned_step_on_a_quiet_machine_costs_a_few_steps() {
        // A lone lane, quiet but for one program that held a core through
        // one step (abandoned for waiting) now and then.
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        drive(&mut g, 200, quiet);
        for round in 0..10 {
            g.record(
                StepKind::Generate,
                g.threads(StepKind::Generate),
                StepFigure {
                    cost: f64::INFINITY,
                    wait_share: 1.0,
                    overran: true,
                },
            );
            // The probe of one thread (a warm-up step and its steps), the
            // wait before looking up, the look up: back on two threads,
            // not a whole interval later.
            let back = 2 * (PROBE_STEPS + 1) + AFTER_ABANDON_INTERVAL as usize + 1;
            drive(&mut g, back, quiet);
            assert_eq!(current(&g, StepKind::Generate), 2, "round {round}");
            drive(&mut g, 500, quiet);
        }
    }

    /// Steps of `kind` where the caller answers the governor's question
    /// about free cores with `free`; returns how many steps used each
    /// thread count and how often it asked.
    fn drive_asked(
        g: &mut Governor,
        kind: StepKind,
        steps: usize,
        free: Option<usize>,
        mut cost: impl FnMut(usize) -> Step,
    ) -> (Vec<usize>, usize) {
        let mut used = vec![0; g.ladder.last().copied().unwrap_or(1) + 1];
        let mut asked = 0;
        for _ in 0..steps {
            if let Some(waiting) = g.wants_free_cores() {
                asked += 1;
                g.free_cores(waiting, free);
            }
            let n = g.threads(kind);
            used[n] += 1;
            let (cost, wait_share) = cost(n);
            g.record(
                kind,
                n,
                StepFigure {
                    cost,
                    wait_share,
                    overran: false,
                },
            );
        }
        (used, asked)
    }

    /// With a core free for every thread, the periodic probes of fewer
    /// threads are not run (they cost their steps' slowdown and cannot
    /// win: measured on a quiet 2-core VM, 4 to 12 one-thread steps in
    /// most 64-token jobs of `vs_llama_bench`, generation 0.91-0.96x
    /// llama-bench); the question is asked at the same times, ever more
    /// rarely.
    #[test]
    fn a_core_for_every_thread_spares_the_periodic_probes() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive).asking_free_cores();
        let (used, asked) = drive_asked(&mut g, StepKind::Generate, 10_000, Some(2), quiet);
        assert_eq!(used[1], 0, "no one-thread step");
        // Once per interval, which doubles to `MAX_INTERVAL` steps.
        let most = 10_000 / MAX_INTERVAL as usize + 5;
        assert!((1..=most).contains(&asked), "asked {asked} times");
        // A slowdown on a quiet machine (a longer context) is no reason
        // either.
        let (used, _) = drive_asked(&mut g, StepKind::Generate, 500, Some(2), |n| {
            (quiet(n).0 * 2.0, 0.0)
        });
        assert_eq!(used[1], 0);
        // Without an answer from the kernel, or with a core taken, the
        // probes run as before.
        let mut g = Governor::new(2, ThreadPolicy::Adaptive).asking_free_cores();
        let (used, _) = drive_asked(&mut g, StepKind::Generate, 10_000, None, quiet);
        assert!(used[1] > 0 && used[1] <= 10_000 / 100, "{used:?}");
        let mut g = Governor::new(2, ThreadPolicy::Adaptive).asking_free_cores();
        let (used, _) = drive_asked(&mut g, StepKind::Generate, 2_000, Some(1), one_busy_loop);
        assert!(used[1] > 1_500, "one busy loop: one thread, {used:?}");
    }

    /// An abandoned step whose competitor is gone by the time it is
    /// decoded again (a core free for every thread) is decoded again on
    /// every thread and moves nothing; with a core taken it is the probe
    /// of fewer threads, as before.
    #[test]
    fn an_abandoned_step_with_every_core_free_again_keeps_the_threads() {
        let abandoned = StepFigure {
            cost: f64::INFINITY,
            wait_share: 1.0,
            overran: true,
        };
        for (free, expect_one) in [(Some(2), false), (Some(1), true)] {
            let mut g = Governor::new(2, ThreadPolicy::Adaptive).asking_free_cores();
            drive_asked(&mut g, StepKind::Generate, 200, Some(2), quiet);
            g.record(StepKind::Generate, 2, abandoned);
            let (used, asked) = drive_asked(&mut g, StepKind::Generate, 1, free, quiet);
            assert_eq!(asked, 1);
            assert_eq!(used[1] == 1, expect_one, "free {free:?}: {used:?}");
        }
    }

    /// Under one busy loop on two cores the lane runs one thread on the
    /// free core; a periodic look up at two threads would put one of them
    /// on the loop's core (measured: `edgecloud local`, SmolLM2, 300
    /// tokens under one busy loop, three look ups abandoned at 20-25 ms a
    /// step against 12). With a core taken they are not run, and once both
    /// cores are free the next one runs and wins.
    #[test]
    fn a_core_taken_spares_the_looks_up() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive).asking_free_cores();
        g.start_on(1);
        let (used, asked) = drive_asked(&mut g, StepKind::Generate, 5_000, Some(1), one_busy_loop);
        assert_eq!(used[2], 0, "no two-thread step under one busy loop");
        // Once per interval, which doubles to `MAX_INTERVAL` steps.
        let most = 5_000 / MAX_INTERVAL as usize + 5;
        assert!((1..=most).contains(&asked), "asked {asked} times");
        // The loop ends: back on two threads within an interval.
        let back = MAX_INTERVAL as usize + PROBE_STEPS + 2;
        drive_asked(&mut g, StepKind::Generate, back, Some(2), quiet);
        assert_eq!(current(&g, StepKind::Generate), 2);
        // The same without asking: the looks up run (and lose).
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        g.start_on(1);
        let used = drive(&mut g, 5_000, one_busy_loop);
        assert!(used[2] > 0, "{used:?}");
    }

    /// A lone lane's prompt steps: one a job, so a rule counted in steps
    /// is counted in jobs. One prompt step abandoned for waiting (a program
    /// that held a core through it) costs that step's decoding again on
    /// one thread, and the next steps are two threads' again; a load that
    /// stays still moves the prompt steps to one thread.
    #[test]
    fn one_abandoned_prompt_step_costs_one_step_on_fewer_threads() {
        // Per token: two threads 0.4 ms, one 0.75 ms.
        let quiet_prompt = |n: usize| (if n == 2 { 0.0004 } else { 0.00075 }, 0.0);
        let abandoned = StepFigure {
            cost: f64::INFINITY,
            wait_share: 1.0,
            overran: true,
        };
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        drive_kind(&mut g, StepKind::Prompt, 30, quiet_prompt);
        for round in 0..5 {
            g.record(StepKind::Prompt, 2, abandoned);
            let used = drive_kind(&mut g, StepKind::Prompt, 15, quiet_prompt);
            assert_eq!(
                used[1], 1,
                "round {round}: one-thread prompt steps {used:?}"
            );
            assert_eq!(current(&g, StepKind::Prompt), 2, "round {round}");
            drive_kind(&mut g, StepKind::Prompt, 30, quiet_prompt);
        }

        // A busy loop per core from the abandoned step on: every look up's
        // first step is abandoned too, and the prompt steps stay on one.
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        drive_kind(&mut g, StepKind::Prompt, 30, quiet_prompt);
        g.record(StepKind::Prompt, 2, abandoned);
        let mut two_thread_steps = 0;
        for _ in 0..40 {
            let n = g.threads(StepKind::Prompt);
            let figure = if n == 2 {
                two_thread_steps += 1;
                abandoned
            } else {
                StepFigure {
                    cost: 0.0009,
                    wait_share: 0.1,
                    overran: false,
                }
            };
            g.record(StepKind::Prompt, n, figure);
        }
        // Looks up after 1, then 4, 8, 16 steps (at least a window's
        // samples apart), each abandoned at its first step.
        assert!(
            (1..=5).contains(&two_thread_steps),
            "two-thread steps in 40 under load: {two_thread_steps}"
        );
        assert_eq!(current(&g, StepKind::Prompt), 1);
    }

    /// Prompt steps (one a job in a lone lane) that went to one thread
    /// under a load come back within a few dozen jobs once it goes, even
    /// after looks up lost all through the load; not after generation's
    /// 512 steps.
    #[test]
    fn prompt_steps_come_back_within_a_few_dozen_steps_when_the_load_goes() {
        let quiet_prompt = |n: usize| (if n == 2 { 0.0004 } else { 0.00075 }, 0.0);
        // One busy loop on two cores: one thread has a core to itself.
        let loaded_prompt = |n: usize| {
            if n == 2 {
                (0.0016, 0.5)
            } else {
                (0.0009, 0.1)
            }
        };
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        drive_kind(&mut g, StepKind::Prompt, 20, quiet_prompt);
        let used = drive_kind(&mut g, StepKind::Prompt, 1_000, loaded_prompt);
        assert_eq!(current(&g, StepKind::Prompt), 1);
        assert!(
            used[2] <= 1_000 / 10,
            "two-thread prompt steps under load: {used:?}"
        );
        // The longest prompt interval (64), a probe's warm-up and steps,
        // and a window's samples after the load: 80 steps.
        let back = 80;
        drive_kind(&mut g, StepKind::Prompt, back, quiet_prompt);
        assert_eq!(current(&g, StepKind::Prompt), 2);
    }

    #[test]
    fn noise_within_the_margin_does_not_flap() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        // One thread 10% faster than two: not a clear win.
        let used = drive(&mut g, 2_000, |n| {
            (if n == 2 { 0.0100 } else { 0.0090 }, 0.0)
        });
        assert_eq!(current(&g, StepKind::Generate), 2);
        assert!(used[1] <= 2_000 / 50);
    }

    #[test]
    fn on_many_cores_it_walks_down_the_ladder() {
        let mut g = Governor::new(8, ThreadPolicy::Adaptive);
        // Six cores taken: two threads is the best count.
        let cost = |n: usize| {
            let cost = match n {
                8 => 0.050,
                4 => 0.030,
                2 => 0.012,
                _ => 0.016,
            };
            (cost, if n > 2 { 0.5 } else { 0.0 })
        };
        drive(&mut g, 3_000, cost);
        assert_eq!(current(&g, StepKind::Generate), 2);
    }

    #[test]
    fn a_lane_started_on_a_busy_machine_moves_within_a_few_steps() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        let used = drive(&mut g, 96, loaded);
        assert_eq!(current(&g, StepKind::Generate), 1);
        assert_eq!(used[2], 2, "the first two steps show the contention");
    }

    #[test]
    fn a_step_that_more_threads_make_slow_is_cut_short() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        assert_eq!(g.budget(StepKind::Generate), None, "nothing measured yet");
        drive(&mut g, 20, quiet);
        // Two threads, 8 quiet steps of 7.9 ms: at most 4 times that.
        let budget = g.budget(StepKind::Generate).unwrap();
        assert!((budget - 4.0 * 0.0079).abs() < 1e-9, "{budget}");
        // A collapsed step (a busy loop per core arrived) overruns it and
        // moves the governor to one thread at once, even without a
        // contention figure.
        let figure = |cost, overran| StepFigure {
            cost,
            wait_share: 0.0,
            overran,
        };
        g.record(StepKind::Generate, 2, figure(budget, true));
        assert_eq!(g.threads(StepKind::Generate), 1, "probing one thread");
        for _ in 0..=PROBE_STEPS {
            g.record(StepKind::Generate, 1, figure(0.013, false));
        }
        assert_eq!(current(&g, StepKind::Generate), 1);
        // At the fewest threads there is nothing to fall back to.
        assert_eq!(g.budget(StepKind::Generate), None);
    }

    #[test]
    fn a_probe_of_more_threads_is_bounded_by_the_current_figure() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        drive(&mut g, 200, one_busy_loop);
        assert_eq!(current(&g, StepKind::Generate), 1);
        // Drive to the next probe of two threads, then collapse it.
        while g.threads(StepKind::Generate) == 1 {
            let (cost, wait_share) = one_busy_loop(1);
            g.record(
                StepKind::Generate,
                1,
                StepFigure {
                    cost,
                    wait_share,
                    overran: false,
                },
            );
        }
        let budget = g.budget(StepKind::Generate).unwrap();
        assert!((budget - 3.0 * 0.0105).abs() < 1e-9, "{budget}");
        g.record(
            StepKind::Generate,
            2,
            StepFigure {
                cost: budget,
                wait_share: 0.5,
                overran: true,
            },
        );
        assert_eq!(
            g.threads(StepKind::Generate),
            1,
            "one overrun loses the probe"
        );
    }

    #[test]
    fn the_first_step_takes_the_free_cores_only() {
        let mut g = Governor::new(8, ThreadPolicy::Adaptive);
        assert!(g.is_fresh());
        g.start_on(3);
        assert_eq!(g.threads(StepKind::Prompt), 2);
        assert_eq!(g.threads(StepKind::Generate), 2);
        g.start_on(8);
        assert_eq!(
            g.threads(StepKind::Generate),
            8,
            "still fresh: the last hint counts"
        );
        drive(&mut g, 1, quiet);
        assert!(!g.is_fresh());
        g.start_on(1);
        assert_eq!(
            current(&g, StepKind::Generate),
            8,
            "only before the first step"
        );
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        g.start_on(0);
        assert_eq!(g.threads(StepKind::Generate), 1);
        assert!(!Governor::new(2, ThreadPolicy::Fixed).is_fresh());
    }

    #[test]
    fn kinds_are_governed_apart() {
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        drive(&mut g, 100, loaded);
        assert_eq!(current(&g, StepKind::Generate), 1);
        assert_eq!(current(&g, StepKind::Prompt), 2);
    }

    #[test]
    fn fixed_never_moves_and_bad_figures_are_ignored() {
        let mut g = Governor::new(2, ThreadPolicy::Fixed);
        drive(&mut g, 1_000, loaded);
        assert_eq!(current(&g, StepKind::Generate), 2);
        let mut g = Governor::new(2, ThreadPolicy::Adaptive);
        let figure = |cost: f64| StepFigure {
            cost,
            wait_share: 0.5,
            overran: false,
        };
        for _ in 0..1_000 {
            g.record(StepKind::Generate, 2, figure(f64::NAN));
            g.record(StepKind::Generate, 2, figure(0.0));
            g.record(StepKind::Generate, 3, figure(0.001));
        }
        assert_eq!(current(&g, StepKind::Generate), 2);
    }

    #[test]
    fn step_kinds_split_at_sixteen_tokens() {
        assert_eq!(StepKind::of_batch(1), StepKind::Generate);
        assert_eq!(StepKind::of_batch(16), StepKind::Generate);
        assert_eq!(StepKind::of_batch(17), StepKind::Prompt);
    }

    #[test]
    fn policy_names_round_trip() {
        for p in [ThreadPolicy::Adaptive, ThreadPolicy::Fixed] {
            assert_eq!(p.as_str().parse::<ThreadPolicy>(), Ok(p));
        }
        assert!("spin".parse::<ThreadPolicy>().is_err());
    }
}
