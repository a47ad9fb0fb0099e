//! How many prompt tokens go into one step when the model's layers run on
//! a GPU device (`--gpu-layers`), sized from measured step times.
//!
//! On the CPU, llama.cpp polls the abort callback after every graph node,
//! so a cancel or a deadline stops a step within a node whatever the
//! step's size. A GPU backend (Vulkan, CUDA, Metal) runs its part of the
//! graph without looking at the callback: a step, once started, runs to
//! its end, and a cancel lands only when it is over. So with offload the
//! size of a step is the cancel latency: this module keeps each step near
//! a time target by choosing its prompt tokens from the steps measured so
//! far: a one-token step's time (the step's fixed cost and one token) and
//! the latest
//! larger step's give the cost of each further token, and the step gets as
//! many as fit the target. Where a larger step took no longer than a
//! one-token step (lavapipe: its matrix-vector kernels for a few rows are
//! slower than its matrix-matrix ones for 50), the whole batch fits. Before
//! a one-token step was measured, the latest step's time over its tokens
//! stands in.
//!
//! The target is the larger of [`TARGET`] (50 ms: a cancel within 50 ms on
//! a real GPU, where a 512-token step of a small model takes a few
//! milliseconds and steps of 50 ms lose little prompt throughput) and
//! twice the device's measured one-token step (a generation step): on a
//! device where one token's step already takes longer (Mesa's lavapipe,
//! a Vulkan device on the CPU: about 425 ms for SmolLM2), a prompt step of
//! one token would make prompts as slow as generation, and a cancel during
//! generation waits for one such step anyway; a prompt step then holds a
//! cancel at most about two generation steps. Measured figures:
//! docs/gpu.md.
//!
//! Without offload the sizer stays out of the way: every step takes up to
//! `batch_size` prompt tokens, as before. `EDGECLOUD_DEVICE_STEP_MS`
//! ([`TARGET_ENV`]) sets another target; `0` turns sizing off (every step
//! up to `batch_size` prompt tokens, llama.cpp's way: best prompt
//! throughput, a cancel waits for the whole step).

use std::time::Duration;

/// The step time the sizer aims at on a fast device.
pub(super) const TARGET: Duration = Duration::from_millis(50);

/// The environment variable setting another target, in milliseconds
/// (`0`: no sizing).
pub(crate) const TARGET_ENV: &str = "EDGECLOUD_DEVICE_STEP_MS";

/// Prompt tokens of the first step with offload, before any step was
/// measured.
const FIRST: usize = 16;

/// Weight of the newest step in the moving per-token figure.
const ALPHA: f64 = 0.5;

#[derive(Debug, Clone)]
pub(super) struct StepSizer {
    /// Steps are sized (the lane offloads layers).
    on: bool,
    /// The step time aimed at on a fast device.
    target: Duration,
    /// Seconds per token of a step, moving (steps of more than one token).
    per_token: Option<f64>,
    /// Seconds of a one-token step, moving.
    one_token: Option<f64>,
    /// The latest step of more than one token: its tokens and seconds.
    last_big: Option<(usize, f64)>,
}

impl StepSizer {
    /// Sizes steps when `on` (the lane offloads layers to a GPU device),
    /// aiming at [`TARGET`].
    pub(super) fn new(on: bool) -> Self {
        Self {
            on,
            target: TARGET,
            per_token: None,
            one_token: None,
            last_big: None,
        }
    }

    /// As [`StepSizer::new`], with the target [`TARGET_ENV`] sets, if any
    /// (`0`: off); a value that is not a number is ignored with a warning.
    pub(super) fn from_env(on: bool) -> Self {
        let mut s = Self::new(on);
        if let Ok(v) = std::env::var(TARGET_ENV) {
            match v.trim().parse::<u64>() {
                Ok(0) => s.on = false,
                Ok(ms) => s.target = Duration::from_millis(ms),
                Err(_) => {
                    tracing::warn!("{TARGET_ENV}={v:?} is not a number of milliseconds: ignored")
                }
            }
        }
        s
    }

    /// The step time aimed at now.
    pub(super) fn target(&self) -> Duration {
        let two_steps = self
            .one_token
            .map_or(Duration::ZERO, |s| Duration::from_secs_f64(2.0 * s));
        self.target.max(two_steps)
    }

    /// Prompt tokens for the next step, which already holds `rows` tokens
    /// of generating sequences, at most `batch_size`.
    pub(super) fn prompt_tokens(&self, batch_size: usize, rows: usize) -> usize {
        if !self.on {
            return batch_size;
        }
        let target = self.target().as_secs_f64();
        let fits = match (self.one_token, self.last_big) {
            // The fixed cost and the cost of each further token.
            (Some(t1), Some((n, tn))) if tn > t1 => {
                let each = (tn - t1) / (n - 1) as f64;
                1 + ((target - t1).max(0.0) / each).floor() as usize
            }
            // Further tokens cost nothing measurable: the whole batch.
            (Some(_), Some(_)) => batch_size,
            _ => match self.per_token.filter(|p| *p > 0.0) {
                Some(per_token) => (target / per_token).floor() as usize,
                None => FIRST,
            },
        };
        fits.saturating_sub(rows).clamp(1, batch_size.max(1))
    }

    /// A step of `tokens` tokens took `took` seconds (prompt and
    /// generation rows cost alike: both count).
    pub(super) fn record(&mut self, tokens: usize, took: f64) {
        if !self.on || tokens == 0 || !took.is_finite() || took <= 0.0 {
            return;
        }
        let mix =
            |old: Option<f64>, new: f64| Some(old.map_or(new, |o| (1.0 - ALPHA) * o + ALPHA * new));
        if tokens == 1 {
            self.one_token = mix(self.one_token, took);
        } else {
            self.per_token = mix(self.per_token, took / tokens as f64);
            self.last_big = Some((tokens, took));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device whose step takes `fixed + per * n` seconds.
    fn converge(fixed: f64, per: f64, batch: usize) -> (usize, f64) {
        let mut s = StepSizer::new(true);
        // A generation step first, as a lane that answered before has.
        s.record(1, fixed + per);
        let mut n = 0;
        let mut took = 0.0;
        for _ in 0..30 {
            n = s.prompt_tokens(batch, 0);
            took = fixed + per * n as f64;
            s.record(n, took);
        }
        (n, took)
    }

    #[test]
    fn off_takes_the_whole_batch() {
        let mut s = StepSizer::new(false);
        s.record(128, 10.0);
        assert_eq!(s.prompt_tokens(128, 0), 128);
    }

    #[test]
    fn a_fast_device_gets_steps_near_the_target() {
        // A GPU: 2 ms a step plus 20 us a token.
        let (n, took) = converge(0.002, 0.000_02, 4096);
        assert!((0.045..=0.051).contains(&took), "{n} tokens, {took} s");
        // The batch size still bounds it.
        let (n, _) = converge(0.002, 0.000_02, 512);
        assert_eq!(n, 512);
    }

    #[test]
    fn a_slow_device_gets_about_two_generation_steps() {
        // lavapipe-like: a one-token step 425 ms, 92 ms a prompt token in
        // a large step.
        let (n, took) = converge(0.333, 0.092, 128);
        assert!(took <= 2.0 * 0.425 + 1e-9, "{n} tokens, {took} s");
        assert!(n >= 5, "{n} tokens, {took} s");
    }

    #[test]
    fn a_fresh_lane_on_a_slow_device_does_not_stay_at_one_token() {
        // The first prompt step, before any one-token step: lavapipe-like.
        let mut s = StepSizer::new(true);
        let step = |n: usize| 0.333 + 0.092 * n as f64;
        let mut sizes = Vec::new();
        for _ in 0..6 {
            let n = s.prompt_tokens(128, 0);
            sizes.push(n);
            s.record(n, step(n));
        }
        assert_eq!(sizes[0], FIRST);
        assert!(
            sizes[2..].iter().all(|&n| (4..=6).contains(&n)),
            "{sizes:?}"
        );
    }

    #[test]
    fn generating_rows_leave_room_for_fewer_prompt_tokens() {
        let mut s = StepSizer::new(true);
        s.record(10, 0.010); // 1 ms a token
        assert_eq!(s.prompt_tokens(512, 0), 50);
        assert_eq!(s.prompt_tokens(512, 4), 46);
        assert_eq!(s.prompt_tokens(512, 60), 1);
        assert_eq!(s.prompt_tokens(20, 0), 20);
    }
}
