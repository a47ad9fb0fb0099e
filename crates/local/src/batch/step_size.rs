//! How many prompt tokens go into one step when the model's layers run on
//! a GPU device (`--gpu-layers`), sized from measured step times.
//!
//! On the CPU, llama.cpp polls the abort callback after every graph node,
//! so a cancel or a deadline stops a step within a node whatever the
//! step's size. A GPU backend (Vulkan, CUDA, Metal) runs its part of the
//! graph without looking at the callback: a step, once started, runs to
//! its end, and a cancel lands only when it is over. So with offload the
//! size of a step is the cancel latency, and the lane sizes each prompt
//! step from the steps measured so far: a one-token step's time (the
//! step's fixed cost and one token) and the latest larger step's give the
//! cost of each further token, `fixed + each * n` for a step of `n`.
//!
//! A step gets as many prompt tokens as fit the time target ([`TARGET`],
//! 50 ms: a cancel within 50 ms on a real GPU, where a 512-token step of a
//! small model takes a few milliseconds), but never fewer than keep
//! [`KEEP`] (95%) of the device's prompt speed: `n` tokens go at
//! `n / (fixed + each * n)` against `1 / each` for endless steps, so the
//! floor is `KEEP / (1 - KEEP) * fixed / each` tokens. On a device whose
//! fixed cost is small against the target the target rules; where one
//! token's step costs about as much as the target or more (Mesa's
//! lavapipe: ~0.45 s fixed, ~0.11 s a token for SmolLM2; a phone's or
//! laptop's GPU with a larger model), steps of the target's length would
//! make the prompt several times slower (measured on lavapipe, steps of
//! two generation steps: a quarter of llama.cpp's prompt speed), so the
//! floor rules, and a cancel waits for one such step: still a fraction of
//! what a whole `--batch-size` step holds it. Where a larger step took no
//! longer than a one-token step, the whole batch fits. Before a one-token
//! step was measured, the latest step's time over its tokens stands in
//! (a fresh lane's first step holds [`FIRST`] tokens). Measured figures:
//! docs/gpu.md.
//!
//! Without offload the sizer stays out of the way: every step takes up to
//! `batch_size` prompt tokens, as before. `EDGECLOUD_DEVICE_STEP_MS`
//! ([`TARGET_ENV`]) sets another target, honoured as it is (no speed
//! floor: the user chose the cancel latency); `0` turns sizing off (every
//! step up to `batch_size` prompt tokens, llama.cpp's way: best prompt
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

/// The share of the device's prompt speed a sized step keeps at least
/// (unless the user set the target).
const KEEP: f64 = 0.95;

#[derive(Debug, Clone)]
pub(super) struct StepSizer {
    /// Steps are sized (the lane offloads layers).
    on: bool,
    /// The step time aimed at on a fast device.
    target: Duration,
    /// The share of the device's prompt speed a step keeps at least:
    /// [`KEEP`], or 0 (no floor) when the user set the target
    /// ([`TARGET_ENV`]).
    keep: f64,
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
            keep: KEEP,
            per_token: None,
            one_token: None,
            last_big: None,
        }
    }

    /// As [`StepSizer::new`], aiming at the `target` the user chose (no
    /// speed floor).
    fn with_target(on: bool, target: Duration) -> Self {
        Self {
            target,
            keep: 0.0,
            ..Self::new(on)
        }
    }

    /// As [`StepSizer::new`], with the target [`TARGET_ENV`] sets, if any
    /// (`0`: off); a value that is not a number is ignored with a warning.
    pub(super) fn from_env(on: bool) -> Self {
        let mut s = Self::new(on);
        if let Ok(v) = std::env::var(TARGET_ENV) {
            match v.trim().parse::<u64>() {
                Ok(0) => s.on = false,
                Ok(ms) => s = Self::with_target(on, Duration::from_millis(ms)),
                Err(_) => {
                    tracing::warn!("{TARGET_ENV}={v:?} is not a number of milliseconds: ignored")
                }
            }
        }
        s
    }

    /// Prompt tokens for the next step, which already holds `rows` tokens
    /// of generating sequences, at most `batch_size`.
    pub(super) fn prompt_tokens(&self, batch_size: usize, rows: usize) -> usize {
        if !self.on {
            return batch_size;
        }
        let target = self.target.as_secs_f64();
        let fits = match (self.one_token, self.last_big) {
            // The fixed cost and the cost of each further token.
            (Some(t1), Some((n, tn))) if tn > t1 => {
                let each = (tn - t1) / (n - 1) as f64;
                let in_time = 1 + ((target - t1).max(0.0) / each).floor() as usize;
                // The fewest tokens whose step of `fixed + each * n` goes
                // at `keep` of `1 / each` (the cast saturates: a huge
                // floor is the whole batch).
                let fixed = (t1 - each).max(0.0);
                let floor = (self.keep / (1.0 - self.keep) * fixed / each).ceil() as usize;
                in_time.max(floor)
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

    /// The prompt's speed with steps of `n` tokens on a device whose step
    /// takes `fixed + per * n`, as a share of `1 / per`.
    fn speed_kept(fixed: f64, per: f64, n: usize) -> f64 {
        per * n as f64 / (fixed + per * n as f64)
    }

    #[test]
    fn a_slow_device_keeps_its_prompt_speed() {
        // lavapipe-like: 333 ms fixed, 92 ms a token (a one-token step
        // 425 ms): the 50 ms target would be one token a step; the floor
        // is 0.95 / 0.05 * 0.333 / 0.092 = 68.8 tokens.
        let (n, took) = converge(0.333, 0.092, 512);
        assert_eq!(n, 69, "{took} s");
        assert!(speed_kept(0.333, 0.092, n) >= KEEP, "{n}");
        // A fraction of what a whole batch holds a cancel.
        assert!(took < 0.2 * (0.333 + 0.092 * 512.0), "{n} tokens, {took} s");
        // The batch size still bounds it.
        assert_eq!(converge(0.333, 0.092, 32).0, 32);
    }

    #[test]
    fn a_large_model_on_a_gpu_trades_the_target_for_speed() {
        // 7 ms fixed (the weights read once a step), 0.25 ms a token: 50 ms
        // steps would hold 172 tokens and keep 86% of the speed; the floor
        // is 0.95 / 0.05 * 7 / 0.25 = 532 tokens, 140 ms.
        let (n, took) = converge(0.007, 0.000_25, 4096);
        assert_eq!(n, 532, "{took} s");
        assert!(speed_kept(0.007, 0.000_25, 172) < 0.9);
        assert!(speed_kept(0.007, 0.000_25, n) >= KEEP);
    }

    #[test]
    fn a_target_the_user_chose_is_kept_without_the_floor() {
        let mut s = StepSizer::with_target(true, Duration::from_secs(1));
        // lavapipe-like, as above: 1 + (1 - 0.425) / 0.092 = 7.25 tokens.
        s.record(1, 0.425);
        s.record(16, 0.333 + 0.092 * 16.0);
        assert_eq!(s.prompt_tokens(512, 0), 7);
    }

    #[test]
    fn a_fresh_lane_on_a_slow_device_probes_then_takes_the_floor() {
        // The first prompt step, before any one-token step: lavapipe-like.
        // Its time per token says one token fits 50 ms: that step gives
        // the fixed cost, and the floor follows.
        let mut s = StepSizer::new(true);
        let step = |n: usize| 0.333 + 0.092 * n as f64;
        let mut sizes = Vec::new();
        for _ in 0..5 {
            let n = s.prompt_tokens(128, 0);
            sizes.push(n);
            s.record(n, step(n));
        }
        assert_eq!(sizes[..3], [FIRST, 1, 69], "{sizes:?}");
        assert!(sizes[3..].iter().all(|&n| n == 69), "{sizes:?}");
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
