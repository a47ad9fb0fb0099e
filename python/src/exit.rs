//! The interpreter's exit with runs in flight. When Python exits, the
//! process's C and C++ exit handlers run next, llama.cpp's among them;
//! a local worker still decoding then touches torn-down state and the
//! process dies with SIGSEGV (1 exit in 4 here with a run in flight,
//! before this). So the package's `atexit` hook, before anything is torn
//! down: stops Python callbacks from touching the interpreter
//! ([`finalizing`]), aborts every run this module started that has not
//! settled, and waits, bounded by [`EXIT_GRACE`] and with the GIL
//! released, for every live harness's workers to return (a worker sees
//! its cancel within one compute step). It never waits longer: an exit
//! is never turned into a hang.
//!
//! What it must not do: keep a harness alive (it holds `Weak`s) or
//! decide anything about a run (aborting is what the user's `Run.abort`
//! does).

use edgecloud::bindings::Embedded;
use edgecloud::harness::AbortHandle;
use pyo3::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// The longest the exit hook waits for workers, all harnesses together.
pub(crate) const EXIT_GRACE: Duration = Duration::from_secs(5);

/// Set by the exit hook: once the interpreter finalises, a callback on an
/// edgecloud thread must not touch Python (it would hang or kill the
/// thread), so it unwinds to its documented default instead.
static FINALIZING: AtomicBool = AtomicBool::new(false);

/// Harnesses made by this module and not yet dropped.
static HARNESSES: Mutex<Vec<Weak<Embedded>>> = Mutex::new(Vec::new());

/// Runs started by this module, pruned of settled ones as new ones come.
static RUNS: Mutex<Vec<AbortHandle>> = Mutex::new(Vec::new());

/// Whether the interpreter is exiting.
pub(crate) fn finalizing() -> bool {
    FINALIZING.load(Ordering::Acquire)
}

/// Remembers a harness for the exit hook.
pub(crate) fn track_harness(h: &Arc<Embedded>) {
    let mut all = HARNESSES.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(h));
}

/// Remembers a started run for the exit hook.
pub(crate) fn track_run(run: AbortHandle) {
    let mut all = RUNS.lock().unwrap_or_else(|p| p.into_inner());
    all.retain(|r| !r.is_settled());
    all.push(run);
}

/// The exit hook's work (see the module doc).
pub(crate) fn interpreter_exiting(py: Python<'_>) {
    FINALIZING.store(true, Ordering::Release);
    let runs = std::mem::take(&mut *RUNS.lock().unwrap_or_else(|p| p.into_inner()));
    let harnesses: Vec<Arc<Embedded>> = HARNESSES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    py.allow_threads(move || {
        for run in &runs {
            let _ = run.abort();
        }
        let until = Instant::now() + EXIT_GRACE;
        for h in harnesses {
            let left = until.saturating_duration_since(Instant::now());
            // Blocking is allowed here: the hook runs on Python's main
            // thread, outside any tokio runtime.
            let _ = h.harness().shutdown_blocking(left);
        }
    });
}
