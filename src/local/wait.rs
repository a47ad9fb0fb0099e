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
//! edgecloud's choice is [`DEFAULT_WAIT`]: the value measured to keep the
//! quiet speed while holding a fair share under load (see the README's
//! busy-device table). libgomp reads its settings once, when the process
//! starts, so a process must have them in its environment before it runs:
//! the `edgecloud` command re-executes itself once with them set when the
//! user set neither `OMP_WAIT_POLICY` nor `GOMP_SPINCOUNT` (their own
//! values always win); an application embedding the library sets them in
//! its own environment (see [`recommended_env`]). [`current`] says what the
//! process runs with, for `doctor`, the lane's info and bench reports.
//!
//! This module only reads the environment; it must not change it.

use serde::Serialize;

/// The variable libgomp reads for the wait policy (`active` or `passive`).
pub const WAIT_POLICY_VAR: &str = "OMP_WAIT_POLICY";
/// The variable libgomp reads for how many rounds a waiting thread spins
/// before it sleeps.
pub const SPIN_COUNT_VAR: &str = "GOMP_SPINCOUNT";

/// edgecloud's default: (variable, value). A short bounded spin: a barrier
/// partner that is running arrives within it, one that was descheduled
/// costs at most the spin, then the waiter sleeps and leaves the core.
pub const DEFAULT_WAIT: (&str, &str) = (SPIN_COUNT_VAR, "20000");

/// What the process's compute threads run with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitSettings {
    /// `OMP_WAIT_POLICY`, when set.
    pub omp_wait_policy: Option<String>,
    /// `GOMP_SPINCOUNT`, when set.
    pub gomp_spincount: Option<String>,
    /// `edgecloud default`, `user` (the environment set it) or `libgomp
    /// default (spin 300000)` (nothing set: an embedding application that
    /// did not follow [`recommended_env`]).
    pub source: String,
}

impl WaitSettings {
    /// One line for people: `GOMP_SPINCOUNT=20000 (edgecloud default)`.
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

/// The variable the `edgecloud` command sets on its re-executed self, so
/// that the settings are known to be its own default and it re-executes
/// only once.
pub const REEXEC_MARK_VAR: &str = "EDGECLOUD_WAIT_DEFAULTED";

/// The wait settings in effect: the process environment as libgomp read it
/// at start (a program that changes these variables later is not seen by
/// libgomp, nor here).
pub fn current() -> WaitSettings {
    let get = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let omp_wait_policy = get(WAIT_POLICY_VAR);
    let gomp_spincount = get(SPIN_COUNT_VAR);
    let source = if std::env::var_os(REEXEC_MARK_VAR).is_some() {
        "edgecloud default"
    } else if omp_wait_policy.is_some() || gomp_spincount.is_some() {
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

/// The variables to set before a process starts (an embedding
/// application's launcher, a service unit), unless the user chose their
/// own: edgecloud's [`DEFAULT_WAIT`]. Empty when either variable is set.
pub fn recommended_env() -> Vec<(&'static str, &'static str)> {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    if set(WAIT_POLICY_VAR) || set(SPIN_COUNT_VAR) {
        Vec::new()
    } else {
        vec![DEFAULT_WAIT]
    }
}
