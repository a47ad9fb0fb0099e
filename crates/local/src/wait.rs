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
//! No libgomp setting holds a fair share in every load (measured with
//! `scripts/busy-device`: passive waiting costs 2-3x on a quiet machine,
//! bounded spins are no steadier than the default), so libgomp keeps its
//! own default and the lane changes the *number* of threads instead, step
//! by step (`super::governor`, thread policy `adaptive`): with fewer
//! threads than free cores nothing waits at a barrier for a descheduled
//! partner. What the process runs with is still reported ([`current`]: for
//! `doctor`, the lane's info and bench reports), and a user who wants
//! passive waiting sets `OMP_WAIT_POLICY=passive` before the process
//! starts (libgomp reads it once, when it is loaded).
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
