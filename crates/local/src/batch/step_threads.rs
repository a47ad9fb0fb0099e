//! The thread governor's hooks in the decode loop: before a step, the
//! compute threads it runs on (the free cores looked at once for the
//! lane's first step, a probe's look at them, the governor's choice set
//! on the context); the step's overrun budget and whether it may be
//! abandoned for waiting; after it, its figure reported to the governor
//! (`governor` decides, from these figures, how many threads the next
//! steps use; see docs/busy-device.md).
//!
//! It owns the governor and the means to set the context's thread count.
//! It must not decide what a step holds or what its rows become: the loop
//! (`batch`) fills, decodes and samples, and tells this module what each
//! step was.

use crate::ffi::ThreadControl;
use crate::governor::{Governor, StepFigure, StepKind};
use llama_cpp_2::context::LlamaContext;
use std::time::{Duration, Instant};

/// How many compute threads each step uses, and the means to set them.
pub(super) struct StepThreads {
    governor: Governor,
    /// `None`: the context's count cannot be changed (the configured count
    /// always).
    control: Option<ThreadControl>,
    /// The count the context holds now.
    applied: usize,
    /// The most any step uses (the configured count).
    max: usize,
    /// Whether the free cores were looked at for the first step (once: a
    /// lane whose steps are all cut short by deadlines stays "fresh").
    start_hint_taken: bool,
}

/// One decode step as the governor sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Step {
    /// Generation or prompt processing, by its rows without drafts.
    pub(super) kind: StepKind,
    /// The threads it runs on.
    pub(super) threads: usize,
    /// Its rows, drafts included (for the log).
    tokens: usize,
    /// Its cost units (`StepKind::units`, drafts left out).
    scale: f64,
}

impl StepThreads {
    /// For `ctx`, configured with `threads` threads.
    pub(super) fn new(ctx: &LlamaContext<'_>, threads: usize, governor: Governor) -> Self {
        Self {
            governor,
            control: ThreadControl::of(ctx),
            applied: threads,
            max: threads,
            start_hint_taken: false,
        }
    }

    /// Whether the context's thread count can be changed (else the
    /// governor's choice is never applied).
    pub(super) fn controls(&self) -> bool {
        self.control.is_some()
    }

    /// The most threads any step uses (the configured count).
    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// Before a step of `tokens` rows, `drafted` of them drafts: its kind
    /// and cost units are those of its rows without the drafts; the free
    /// cores are looked at when the governor asks, and the context's
    /// thread count is set for the step.
    pub(super) fn before_step(
        &mut self,
        ctx: &mut LlamaContext<'_>,
        tokens: usize,
        drafted: usize,
    ) -> Step {
        let kind = StepKind::of_batch(tokens - drafted);
        if !self.start_hint_taken && self.governor.is_fresh() {
            self.start_hint_taken = true;
            if let Some(free) = edgecloud_core::sched::free_cores() {
                tracing::debug!(
                    target: "edgecloud::local::threads",
                    free,
                    "the lane's first step: cores no other program runs on"
                );
                self.governor.start_on(free);
            }
        }
        // A probe of fewer threads that no contended step called for waits
        // for what the cores are doing (a millisecond, every few dozen
        // steps at most): with a core for every thread it is not run.
        if let Some(waiting) = self.governor.wants_free_cores() {
            self.governor
                .free_cores(waiting, edgecloud_core::sched::free_cores());
        }
        let threads = self.apply(ctx, kind);
        Step {
            kind,
            threads,
            tokens,
            scale: kind.units(tokens - drafted),
        }
    }

    /// Sets the context's thread count for a step of this kind; returns
    /// it.
    fn apply(&mut self, ctx: &mut LlamaContext<'_>, kind: StepKind) -> usize {
        let Some(control) = &self.control else {
            return self.applied;
        };
        let threads = self.governor.threads(kind);
        if threads != self.applied {
            control.set(ctx, threads);
            self.applied = threads;
        }
        threads
    }

    /// When the step, started at `started`, is abandoned for running past
    /// the governor's budget (`None`: no bound).
    pub(super) fn budget(&self, step: &Step, started: Instant) -> Option<Instant> {
        self.governor
            .budget(step.kind)
            .and_then(|b| Duration::try_from_secs_f64(b * step.scale).ok())
            .map(|b| started + b)
    }

    /// Whether the step may be abandoned for waiting for a CPU (it uses
    /// more than the fewest threads).
    pub(super) fn may_go_down(&self, step: &Step) -> bool {
        self.governor.may_go_down(step.kind)
    }

    /// The step was decoded in `took` seconds, `waited_ns` of them waiting
    /// for a CPU: its figure goes to the governor, unless it was a verify
    /// step (`verifying`: its cost follows its drafts, not the machine's
    /// load).
    pub(super) fn decoded(&mut self, step: &Step, took: f64, waited_ns: u64, verifying: bool) {
        let cost = took / step.scale;
        let wait_share = (waited_ns as f64 * 1e-9 / took).min(1.0);
        tracing::trace!(
            target: "edgecloud::local::threads",
            threads = step.threads,
            tokens = step.tokens,
            took_us = (took * 1e6) as u64,
            waited_us = waited_ns / 1000,
            "decode step"
        );
        if !verifying {
            self.governor.record(
                step.kind,
                step.threads,
                StepFigure {
                    cost,
                    wait_share,
                    overran: false,
                },
            );
        }
    }

    /// The step was abandoned after `took` seconds, over its budget or
    /// (`contended`) for waiting for a CPU: the governor hears of it, and
    /// the batch is decoded again with fewer threads.
    pub(super) fn abandoned(&mut self, step: &Step, took: f64, contended: bool) {
        tracing::debug!(
            target: "edgecloud::local::threads",
            threads = step.threads,
            tokens = step.tokens,
            took_us = (took * 1e6) as u64,
            contended,
            "decode step abandoned (over its budget, or waiting for a CPU): decoded again with fewer threads"
        );
        // A step stopped for waiting is a lower bound of what it would have
        // cost: any figure of fewer threads beats it.
        let cost = if contended {
            f64::INFINITY
        } else {
            took / step.scale
        };
        self.governor.record(
            step.kind,
            step.threads,
            StepFigure {
                cost,
                wait_share: 1.0,
                overran: true,
            },
        );
    }
}
