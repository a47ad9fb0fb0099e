//! How llama.cpp's compute threads wait for each other (contract point 14:
//! a busy device gets a fair share, not a collapse).
//!
//! llama.cpp's CPU backend runs each graph on OpenMP threads (GNU libgomp
//! in this build), which meet at a barrier after every graph node, hundreds
//! of times per token. libgomp's default is to spin a long while (300,000
//! rounds) before sleeping: on a quiet machine that is the fastest, but when
//! another program holds a core, the thread whose partner was descheduled
//! spins through its own time slice on work that cannot arrive, and
//! generation collapses (measured here: 0.3-19 tokens/s instead of ~45 with
//! a busy loop per core). Sleeping at once (`OMP_WAIT_POLICY=passive`)
//! fixes the loaded case and costs a third of the quiet speed.
//!
//! What edgecloud does about it, measured (`scripts/busy-device`, the
//! 2-core VM, 2026-12-02, medians of 3; docs/busy-device.md): no libgomp
//! setting gets the fair share in every case. Passive waiting is the best
//! with one busy loop (47 against 36 tokens/s) and costs 2.6x on a quiet
//! machine (39 against 103); bounded spins (`GOMP_SPINCOUNT` 2000, 20000)
//! keep the quiet speed and are no steadier than libgomp's default under
//! load. So the default stays libgomp's own, and the choice is the user's,
//! made before the process starts (libgomp reads its settings once, when it
//! is loaded): `OMP_WAIT_POLICY=passive` for a device that is always busy.
//! [`current`] says what the process runs with, for `doctor`, the lane's
//! info and bench reports. The lever that would reach the fair share, a
//! thread count that follows the measured step time, needs
//! `llama_set_n_threads`, which llama-cpp-2 0.1.160 does not expose.
//!
//! This module only reads the environment; it must not change it.

use serde::Serialize;

/// The variable libgomp reads for the wait policy (`active` or `passive`).
pub const WAIT_POLICY_VAR: &str = "OMP_WAIT_POLICY";
/// The variable libgomp reads for how many rounds a waiting thread spins
/// before it sleeps.
pub const SPIN_COUNT_VAR: &str = "GOMP_SPINCOUNT";

/// What the process's compute threads run with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitSettings {
    /// `OMP_WAIT_POLICY`, when set.
    pub omp_wait_policy: Option<String>,
    /// `GOMP_SPINCOUNT`, when set.
    pub gomp_spincount: Option<String>,
    /// `user` (the environment set it) or `libgomp default (spin 300000)`
    /// (nothing set).
    pub source: String,
}

impl WaitSettings {
    /// One line for people: `OMP_WAIT_POLICY=passive (user)`.
    pub fn describe(&self) -> String {
        let mut set: Vec<String> = Vec::new();
        if let Some(v) = &self.omp_wait_policy {
            set.push(format!("{WAIT_POLICY_VAR}={v}"));
        }
        if let Some(v) = &self.gomp_spincount {
            set.push(format!("{SPIN_COUNT_VAR}={v}"));
        }
        if set.is_empty() {
            self.source.clone()
        } else {
            format!("{} ({})", set.join(" "), self.source)
        }
    }
}

/// The wait settings in effect: the process environment as libgomp read it
/// at start (a program that changes these variables later is not seen by
/// libgomp, nor here).
pub fn current() -> WaitSettings {
    let get = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let omp_wait_policy = get(WAIT_POLICY_VAR);
    let gomp_spincount = get(SPIN_COUNT_VAR);
    let source = if omp_wait_policy.is_some() || gomp_spincount.is_some() {
        "user"
    } else {
        "libgomp default (spin 300000)"
    };
    WaitSettings {
        omp_wait_policy,
        gomp_spincount,
        source: source.into(),
    }
}
