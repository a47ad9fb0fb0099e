//! Vectorised passes over a logit vector, run once per generated token:
//! the largest and second-largest logit with the first index of the
//! largest ([`scan`]), and the sum of `exp(logit - shift)` ([`sum_exp`]).
//!
//! They are the per-token cost of the lane's signals and of greedy
//! sampling, so they must keep pace with llama.cpp on large vocabularies
//! (262k logits are 1 MiB per token):
//! - loops run over fixed-width lane arrays that the compiler turns into
//!   SIMD, and `exp` is a polynomial (relative error below 5e-6, most of
//!   it f32's own rounding of the argument) instead
//!   of libm's scalar call;
//! - sums are kept in f32 lanes within a block of [`BLOCK`] values and in
//!   f64 across blocks, so the rounding error does not grow with the
//!   vocabulary;
//! - on x86-64 the same code is compiled three times (baseline SSE2,
//!   AVX2+FMA, AVX-512) and the best one the CPU has is picked once at run
//!   time, so a portable build is fast too ([`variants`] lists those the
//!   CPU runs, for the benchmarks and the tests of each). Results may
//!   differ between them in the last bits (FMA rounds once);
//! - on aarch64 NEON is part of the baseline (every aarch64 CPU has it),
//!   so no detection is needed: an explicit NEON path (`neon`: 128-bit
//!   intrinsics, eight registers of first and second values per scan
//!   step, fused multiply-adds in the polynomial) is the one in use, and
//!   the compiler-vectorised baseline stays listed for the tests. Its speed
//!   has not been measured on ARM hardware (only its results, under
//!   qemu-user: `scripts/cross aarch64 --test`).
//!
//! This module computes; it must not know what a token or a signal is.
//! It is one of the three places the crate-wide `unsafe_code = "deny"` is
//! lifted: calling a function compiled for AVX2 or AVX-512 is unsafe, and
//! is done only after run-time detection said the CPU has it; NEON loads
//! and stores take raw pointers, always inside the slice they come from.

#![allow(unsafe_code)]

use std::sync::OnceLock;

/// Values per lane array of the exp-sum: 16 f32 fill one AVX-512
/// register, two AVX2 ones (its polynomial, not the sum's dependency, sets
/// its pace).
const LANES: usize = 16;
/// Values per lane array of the max/second pass, per variant: enough
/// registers' worth that independent chains of compares hide each one's
/// latency, not so many that they spill (`cargo bench --bench bookkeeping
/// -- logits/scan`, 262k logits, on the project's AVX-512 VM: AVX-512 52
/// us with 16 lanes, 14.2 with 64; AVX2 46.6 with 16, 18.9 with 32, 19.9
/// with 64; the SSE2 baseline 40.6 with 16, 43.3 with 32, 46.8 with 64).
#[cfg(target_arch = "x86_64")]
const SCAN_LANES_AVX512: usize = 64;
#[cfg(target_arch = "x86_64")]
const SCAN_LANES_AVX2: usize = 32;
const SCAN_LANES_BASELINE: usize = 16;
/// Values summed in f32 before the block's sum is added in f64.
const BLOCK: usize = 1024;
/// Values per chunk when looking for the first index of the maximum.
const FIND_CHUNK: usize = 64;

/// What [`scan`] finds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scan {
    /// The largest value (`-inf` for an empty or all-NaN slice).
    pub max: f32,
    /// The largest value once the maximum's first occurrence is set aside
    /// (equal to `max` when it occurs twice; `-inf` with a single value).
    pub second: f32,
    /// The first index holding `max` (0 when there is none).
    pub argmax: usize,
}

/// Largest value, second-largest value and first index of the largest.
/// NaNs are ignored.
pub fn scan(values: &[f32]) -> Scan {
    (kernels().scan)(values)
}

/// `sum(exp(v - shift))` over `values`; `shift` should be their maximum,
/// so every term is at most 1.
pub fn sum_exp(values: &[f32], shift: f32) -> f64 {
    (kernels().sum_exp)(values, shift)
}

/// One compiled variant of both passes.
#[derive(Debug, Clone, Copy)]
pub struct Kernels {
    /// `baseline` (the build's own target: SSE2 on x86-64, NEON on
    /// aarch64, vectorised by the compiler), `avx2`, `avx512` or `neon`.
    pub name: &'static str,
    /// [`scan`] in this variant.
    pub scan: fn(&[f32]) -> Scan,
    /// [`sum_exp`] in this variant.
    pub sum_exp: fn(&[f32], f32) -> f64,
}

/// Every variant this CPU can run, the best (the one [`scan`] and
/// [`sum_exp`] use) last: for benchmarks and tests of each.
pub fn variants() -> Vec<Kernels> {
    #[allow(unused_mut)]
    let mut all = vec![Kernels {
        name: "baseline",
        scan: generic::scan::<SCAN_LANES_BASELINE>,
        sum_exp: generic::sum_exp,
    }];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            all.push(Kernels {
                name: "avx2",
                scan: x86::scan_avx2,
                sum_exp: x86::sum_exp_avx2,
            });
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            all.push(Kernels {
                name: "avx512",
                scan: x86::scan_avx512,
                sum_exp: x86::sum_exp_avx512,
            });
        }
    }
    #[cfg(target_arch = "aarch64")]
    all.push(Kernels {
        name: "neon",
        scan: neon::scan,
        sum_exp: neon::sum_exp,
    });
    all
}

fn kernels() -> &'static Kernels {
    static PICKED: OnceLock<Kernels> = OnceLock::new();
    PICKED.get_or_init(|| {
        *variants()
            .last()
            .expect("the baseline variant is always there")
    })
}

/// The kernels' one body, inlined into each target-feature variant.
mod generic {
    use super::{Scan, BLOCK, FIND_CHUNK, LANES};

    #[inline(always)]
    fn max(a: f32, b: f32) -> f32 {
        // Written as a select (not f32::max) so that it vectorises; a NaN
        // in `b` never wins.
        if b > a {
            b
        } else {
            a
        }
    }

    #[inline(always)]
    fn min(a: f32, b: f32) -> f32 {
        if b < a {
            b
        } else {
            a
        }
    }

    /// NaN becomes -inf, so it can never be first or second.
    #[inline(always)]
    #[allow(clippy::eq_op)]
    pub(super) fn not_nan(v: f32) -> f32 {
        if v == v {
            v
        } else {
            f32::NEG_INFINITY
        }
    }

    #[inline(always)]
    pub(super) fn scan<const L: usize>(values: &[f32]) -> Scan {
        // Per lane, the two largest values seen: a new value pushes the
        // smaller of itself and the lane's best into second place.
        let mut first = [f32::NEG_INFINITY; L];
        let mut second = [f32::NEG_INFINITY; L];
        let mut chunks = values.chunks_exact(L);
        for chunk in &mut chunks {
            for j in 0..L {
                let v = not_nan(chunk[j]);
                second[j] = max(second[j], min(first[j], v));
                first[j] = max(first[j], v);
            }
        }
        for &v in chunks.remainder() {
            let v = not_nan(v);
            second[0] = max(second[0], min(first[0], v));
            first[0] = max(first[0], v);
        }
        let (mut top, mut next) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        for v in first.into_iter().chain(second) {
            if v > top {
                next = top;
                top = v;
            } else if v > next {
                next = v;
            }
        }
        Scan {
            max: top,
            second: next,
            argmax: first_index_of(values, top),
        }
    }

    /// The first index of `target`: a branch-free test per chunk, then a
    /// scalar look inside the chunk that holds it.
    #[inline(always)]
    pub(super) fn first_index_of(values: &[f32], target: f32) -> usize {
        for (c, chunk) in values.chunks(FIND_CHUNK).enumerate() {
            if chunk.iter().fold(false, |hit, &v| hit | (v == target)) {
                let within = chunk.iter().position(|&v| v == target).unwrap_or(0);
                return c * FIND_CHUNK + within;
            }
        }
        0
    }

    /// exp(x) for x <= 0 (what a shifted logit is); about 1.6e-38 at and
    /// below -87, and for NaN (a NaN logit then adds nothing to a sum).
    /// 2^(x log2 e) split into an integer power of two, built in the
    /// exponent bits, and 2^f for |f| <= 0.5 by a degree-6 polynomial.
    #[inline(always)]
    pub(super) fn exp_nonpositive(x: f32) -> f32 {
        // Adding 1.5 * 2^23 rounds to an integer and leaves it in the low
        // mantissa bits.
        const ROUND: f32 = 12_582_912.0;
        let x = if x > -87.0 { x } else { -87.0 };
        let t = x * std::f32::consts::LOG2_E;
        let r = t + ROUND;
        let k = r - ROUND;
        let f = t - k;
        let p = 1.535_336_2e-4_f32;
        let p = p * f + 1.339_887_4e-3;
        let p = p * f + 9.618_438e-3;
        let p = p * f + 5.550_332_5e-2;
        let p = p * f + 2.402_264_8e-1;
        let p = p * f + 6.931_472e-1;
        let p = p * f + 1.0;
        let pow2 = (r.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127)) << 23;
        p * f32::from_bits(pow2)
    }

    #[inline(always)]
    pub(super) fn sum_exp(values: &[f32], shift: f32) -> f64 {
        let mut total = 0f64;
        let mut blocks = values.chunks_exact(BLOCK);
        for block in &mut blocks {
            let mut acc = [0f32; LANES];
            for chunk in block.chunks_exact(LANES) {
                for j in 0..LANES {
                    acc[j] += exp_nonpositive(chunk[j] - shift);
                }
            }
            total += acc.iter().map(|&a| f64::from(a)).sum::<f64>();
        }
        let tail: f32 = blocks
            .remainder()
            .iter()
            .map(|&v| exp_nonpositive(v - shift))
            .sum();
        total + f64::from(tail)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{generic, Scan, SCAN_LANES_AVX2, SCAN_LANES_AVX512};

    // SAFETY (all four): `variants()` hands these out only after
    // `is_x86_feature_detected!` confirmed the features they enable.
    #[target_feature(enable = "avx512f")]
    unsafe fn scan_avx512_impl(values: &[f32]) -> Scan {
        generic::scan::<SCAN_LANES_AVX512>(values)
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn sum_exp_avx512_impl(values: &[f32], shift: f32) -> f64 {
        generic::sum_exp(values, shift)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn scan_avx2_impl(values: &[f32]) -> Scan {
        generic::scan::<SCAN_LANES_AVX2>(values)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn sum_exp_avx2_impl(values: &[f32], shift: f32) -> f64 {
        generic::sum_exp(values, shift)
    }

    pub(super) fn scan_avx512(values: &[f32]) -> Scan {
        // SAFETY: see above.
        unsafe { scan_avx512_impl(values) }
    }

    pub(super) fn sum_exp_avx512(values: &[f32], shift: f32) -> f64 {
        // SAFETY: see above.
        unsafe { sum_exp_avx512_impl(values, shift) }
    }

    pub(super) fn scan_avx2(values: &[f32]) -> Scan {
        // SAFETY: see above.
        unsafe { scan_avx2_impl(values) }
    }

    pub(super) fn sum_exp_avx2(values: &[f32], shift: f32) -> f64 {
        // SAFETY: see above.
        unsafe { sum_exp_avx2_impl(values, shift) }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    //! The same passes in NEON intrinsics (4 f32 per register). NEON is
    //! in every aarch64 CPU and in Rust's aarch64 baseline (the target
    //! cannot turn it off), so these need no detection; the functions say
    //! `target_feature(enable = "neon")` only so that the intrinsics may
    //! be called in them.

    use super::{generic, Scan, BLOCK, LANES};
    use std::arch::aarch64::*;

    /// Registers of first (and as many of second) values per scan step:
    /// 16 of aarch64's 32 vector registers, independent chains enough to
    /// hide the compare latency without spilling.
    const SCAN_REGS: usize = 8;
    /// Registers summed side by side in the exp-sum (its `LANES` values).
    const SUM_REGS: usize = LANES / 4;

    /// NaN becomes -inf, as in `generic::not_nan`.
    #[inline]
    #[target_feature(enable = "neon")]
    fn not_nan(v: float32x4_t, neg_inf: float32x4_t) -> float32x4_t {
        vbslq_f32(vceqq_f32(v, v), v, neg_inf)
    }

    pub(super) fn scan(values: &[f32]) -> Scan {
        // SAFETY: NEON is part of the aarch64 target (see above).
        unsafe { scan_neon(values) }
    }

    pub(super) fn sum_exp(values: &[f32], shift: f32) -> f64 {
        // SAFETY: as for `scan`.
        unsafe { sum_exp_neon(values, shift) }
    }

    #[target_feature(enable = "neon")]
    fn scan_neon(values: &[f32]) -> Scan {
        const STEP: usize = SCAN_REGS * 4;
        let neg_inf = vdupq_n_f32(f32::NEG_INFINITY);
        let mut first = [neg_inf; SCAN_REGS];
        let mut second = [neg_inf; SCAN_REGS];
        let mut chunks = values.chunks_exact(STEP);
        for chunk in &mut chunks {
            for r in 0..SCAN_REGS {
                // SAFETY: `chunk` holds STEP = SCAN_REGS * 4 values, so the
                // four read from r * 4 are inside it.
                let v = not_nan(unsafe { vld1q_f32(chunk.as_ptr().add(r * 4)) }, neg_inf);
                second[r] = vmaxq_f32(second[r], vminq_f32(first[r], v));
                first[r] = vmaxq_f32(first[r], v);
            }
        }
        // Every lane's two largest, and the values past the last step: the
        // two largest of them all are the slice's.
        let (mut top, mut next) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
        let mut push = |v: f32| {
            if v > top {
                next = top;
                top = v;
            } else if v > next {
                next = v;
            }
        };
        for reg in first.into_iter().chain(second) {
            let mut lanes = [0f32; 4];
            // SAFETY: `lanes` has room for the register's four values.
            unsafe { vst1q_f32(lanes.as_mut_ptr(), reg) };
            lanes.into_iter().for_each(&mut push);
        }
        for &v in chunks.remainder() {
            push(generic::not_nan(v));
        }
        Scan {
            max: top,
            second: next,
            argmax: generic::first_index_of(values, top),
        }
    }

    /// `generic::exp_nonpositive` on four values, its multiply-adds fused.
    #[inline]
    #[target_feature(enable = "neon")]
    fn exp_nonpositive(x: float32x4_t) -> float32x4_t {
        const ROUND: f32 = 12_582_912.0;
        let floor = vdupq_n_f32(-87.0);
        // A select, not vmaxq_f32 (which would keep a NaN): as in generic.
        let x = vbslq_f32(vcgtq_f32(x, floor), x, floor);
        let t = vmulq_f32(x, vdupq_n_f32(std::f32::consts::LOG2_E));
        let r = vaddq_f32(t, vdupq_n_f32(ROUND));
        let k = vsubq_f32(r, vdupq_n_f32(ROUND));
        let f = vsubq_f32(t, k);
        let mut p = vdupq_n_f32(1.535_336_2e-4);
        for c in [
            1.339_887_4e-3,
            9.618_438e-3,
            5.550_332_5e-2,
            2.402_264_8e-1,
            6.931_472e-1,
            1.0,
        ] {
            p = vfmaq_f32(vdupq_n_f32(c), p, f);
        }
        let bits = vsubq_u32(vreinterpretq_u32_f32(r), vdupq_n_u32(ROUND.to_bits()));
        let pow2 = vshlq_n_u32::<23>(vaddq_u32(bits, vdupq_n_u32(127)));
        vmulq_f32(p, vreinterpretq_f32_u32(pow2))
    }

    /// Adds `exp(v - shift)` of `values` (a multiple of LANES long) into
    /// the SUM_REGS accumulators.
    #[inline]
    #[target_feature(enable = "neon")]
    fn accumulate(values: &[f32], shift: float32x4_t, acc: &mut [float32x4_t; SUM_REGS]) {
        for chunk in values.chunks_exact(LANES) {
            for (r, a) in acc.iter_mut().enumerate() {
                // SAFETY: `chunk` holds LANES = SUM_REGS * 4 values.
                let v = unsafe { vld1q_f32(chunk.as_ptr().add(r * 4)) };
                *a = vaddq_f32(*a, exp_nonpositive(vsubq_f32(v, shift)));
            }
        }
    }

    #[inline]
    #[target_feature(enable = "neon")]
    fn total(acc: &[float32x4_t; SUM_REGS]) -> f64 {
        acc.iter().map(|&a| f64::from(vaddvq_f32(a))).sum()
    }

    #[target_feature(enable = "neon")]
    fn sum_exp_neon(values: &[f32], shift: f32) -> f64 {
        let shift_v = vdupq_n_f32(shift);
        let mut sum = 0f64;
        let mut blocks = values.chunks_exact(BLOCK);
        for block in &mut blocks {
            let mut acc = [vdupq_n_f32(0.0); SUM_REGS];
            accumulate(block, shift_v, &mut acc);
            sum += total(&acc);
        }
        let rest = blocks.remainder();
        let whole = rest.len() - rest.len() % LANES;
        let mut acc = [vdupq_n_f32(0.0); SUM_REGS];
        accumulate(&rest[..whole], shift_v, &mut acc);
        let tail: f32 = rest[whole..]
            .iter()
            .map(|&v| generic::exp_nonpositive(v - shift))
            .sum();
        sum + total(&acc) + f64::from(tail)
    }

    #[cfg(test)]
    pub(super) fn exp4(x: [f32; 4]) -> [f32; 4] {
        let mut out = [0f32; 4];
        // SAFETY: both arrays hold four values; NEON as for `scan`.
        unsafe { vst1q_f32(out.as_mut_ptr(), exp_nonpositive(vld1q_f32(x.as_ptr()))) };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random logits in about [-10, 10].
    fn logits(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.max(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 20_000) as f32 / 1000.0 - 10.0
            })
            .collect()
    }

    fn reference_scan(values: &[f32]) -> Scan {
        let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let argmax = values.iter().position(|&v| v == max).unwrap_or(0);
        let second = values
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != argmax)
            .map(|(_, &v)| v)
            .fold(f32::NEG_INFINITY, f32::max);
        Scan {
            max,
            second,
            argmax,
        }
    }

    #[test]
    fn the_best_variant_is_the_one_in_use() {
        let best = *variants().last().unwrap();
        assert_eq!(best.name, kernels().name);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            assert_eq!(best.name, "avx512");
        }
        #[cfg(target_arch = "aarch64")]
        assert_eq!(best.name, "neon");
    }

    #[test]
    fn scan_matches_a_plain_loop_on_every_length_and_position() {
        for k in variants() {
            let scan = k.scan;
            for n in [
                1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 1024, 1025, 49_152,
            ] {
                let mut v = logits(n, n as u64);
                assert_eq!(scan(&v), reference_scan(&v), "{} n={n}", k.name);
                // The maximum at the very end, and tied with an earlier value.
                v[n - 1] = 50.0;
                assert_eq!(scan(&v), reference_scan(&v), "{} n={n}, max last", k.name);
                if n > 2 {
                    v[n / 2] = 50.0;
                    let s = scan(&v);
                    assert_eq!(
                        (s.argmax, s.max, s.second),
                        (n / 2, 50.0, 50.0),
                        "{}",
                        k.name
                    );
                }
            }
        }
    }

    #[test]
    fn scan_ignores_nan_and_handles_degenerate_input() {
        for k in variants() {
            let (scan, sum_exp) = (k.scan, k.sum_exp);
            let s = scan(&[f32::NAN, 1.0, f32::NAN, 3.0, 2.0]);
            assert_eq!((s.max, s.second, s.argmax), (3.0, 2.0, 3), "{}", k.name);
            let mut v = vec![f32::NAN; 140];
            v[5] = 5.0;
            let s = scan(&v);
            assert_eq!(
                (s.max, s.second, s.argmax),
                (5.0, f32::NEG_INFINITY, 5),
                "{}",
                k.name
            );
            assert!(sum_exp(&[0.0, f32::NAN], 0.0) - 1.0 < 1e-30, "{}", k.name);
            let s = scan(&[]);
            assert_eq!(
                (s.max, s.second, s.argmax),
                (f32::NEG_INFINITY, f32::NEG_INFINITY, 0),
                "{}",
                k.name
            );
            let s = scan(&[f32::NEG_INFINITY; 3]);
            assert_eq!((s.max, s.argmax), (f32::NEG_INFINITY, 0), "{}", k.name);
        }
    }

    #[test]
    fn exp_is_accurate_over_the_range_logits_use() {
        let mut x = 0.0f32;
        while x > -87.0 {
            let got = f64::from(generic::exp_nonpositive(x));
            let want = f64::from(x).exp();
            // f32 rounding of x * log2(e) alone is worth up to 4e-6 at -87.
            assert!(
                ((got - want) / want).abs() < 5e-6,
                "exp({x}) = {got}, want {want}"
            );
            x -= 0.0137;
        }
        assert!(generic::exp_nonpositive(-1000.0) < 1e-37);
        assert!(generic::exp_nonpositive(f32::NEG_INFINITY) < 1e-37);
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn neon_exp_matches_the_scalar_polynomial() {
        let mut x = 0.0f32;
        while x > -100.0 {
            let xs = [x, x - 0.003, x - 0.007, x - 0.011];
            for (got, &x) in neon::exp4(xs).into_iter().zip(&xs) {
                let want = generic::exp_nonpositive(x);
                // Fused multiply-adds round once: a few ulps apart at most.
                assert!(
                    ((got - want) / want).abs() < 1e-6,
                    "exp({x}): neon {got}, scalar {want}"
                );
            }
            x -= 0.0173;
        }
        let [nan, neg_inf, ..] = neon::exp4([f32::NAN, f32::NEG_INFINITY, 0.0, 0.0]);
        assert!(nan < 1e-37 && neg_inf < 1e-37);
    }

    #[test]
    fn sum_exp_matches_f64_on_large_vocabularies() {
        for n in [1, 17, 1023, 1024, 1025, 262_144] {
            let v = logits(n, 7 + n as u64);
            let max = reference_scan(&v).max;
            let want: f64 = v.iter().map(|&l| f64::from(l - max).exp()).sum();
            for k in variants() {
                let got = (k.sum_exp)(&v, max);
                assert!(
                    ((got - want) / want).abs() < 1e-6,
                    "{} n={n}: {got} vs {want}",
                    k.name
                );
            }
        }
    }
}
