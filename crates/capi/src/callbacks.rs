//! C scorer and arbiter callbacks as the harness's [`Scorer`] and
//! [`Arbiter`], behind a gate that `ec_harness_free` closes: once it
//! returns, no callback is running and none will be called, so the
//! caller may free its `user_data`.

use super::boundary::c_string;
use super::{ec_arbitrate_fn, ec_callbacks, EC_ARBITRATE_REJECT_ALL};
use edgecloud::bindings::Callbacks;
use edgecloud::harness::{Arbiter, Candidate, Score, ScoreContext, Scored, Scorer};
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex};

/// The caller's `user_data`, shared by every callback call. The header
/// tells the caller it is used from several threads at once; that is
/// what makes sharing the pointer sound.
#[derive(Clone, Copy)]
struct UserData(*mut c_void);

// SAFETY: the pointer is only handed back to the caller's own callbacks,
// which the header requires to be safe to call from any thread.
unsafe impl Send for UserData {}
// SAFETY: as above.
unsafe impl Sync for UserData {}

/// Whether callbacks may still be called, and how many are running.
#[derive(Default)]
pub(super) struct Gate {
    state: Mutex<GateState>,
    idle: Condvar,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    active: usize,
}

/// One callback call in progress; leaving it lets `close` return.
struct Pass<'a>(&'a Gate);

impl Gate {
    fn enter(&self) -> Option<Pass<'_>> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.closed {
            return None;
        }
        s.active += 1;
        Some(Pass(self))
    }

    /// No new calls; returns once the calls in progress have returned.
    pub(super) fn close(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.closed = true;
        while s.active > 0 {
            s = self.idle.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let mut s = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        s.active -= 1;
        if s.active == 0 {
            self.0.idle.notify_all();
        }
    }
}

struct CScorer {
    f: unsafe extern "C" fn(*const std::ffi::c_char, *mut c_void) -> f64,
    user_data: UserData,
    gate: Arc<Gate>,
}

impl Scorer for CScorer {
    fn score(&self, candidate: &Candidate, context: &ScoreContext) -> Score {
        let Some(_pass) = self.gate.enter() else {
            // The harness is being freed: unscored, the documented default.
            return Score::new(f64::NAN);
        };
        let json = serde_json::json!({
            "lane": context.lane,
            "candidate": candidate,
            "request": &*context.request,
        });
        let text = c_string(json.to_string());
        let user_data = self.user_data;
        // SAFETY: `f` is the caller's scorer, which the header requires to
        // be callable from any thread with this string (valid for the
        // call) and its own `user_data`.
        Score::new(unsafe { (self.f)(text.as_ptr(), user_data.0) })
    }
}

struct CArbiter {
    f: unsafe extern "C" fn(*const std::ffi::c_char, *mut c_void) -> i32,
    user_data: UserData,
    gate: Arc<Gate>,
}

impl Arbiter for CArbiter {
    fn pick(&self, candidates: &[Scored]) -> Option<usize> {
        let Some(_pass) = self.gate.enter() else {
            // Out of range: the built-in rule, the documented default.
            return Some(usize::MAX);
        };
        let text = c_string(serde_json::to_string(candidates).expect("plain data serializes"));
        let user_data = self.user_data;
        // SAFETY: as for the scorer.
        let picked = unsafe { (self.f)(text.as_ptr(), user_data.0) };
        match picked {
            EC_ARBITRATE_REJECT_ALL => None,
            // Any other negative value is out of range: the built-in rule.
            i => Some(usize::try_from(i).unwrap_or(usize::MAX)),
        }
    }
}

/// The harness callbacks for `c`, and the gate that stops them.
///
/// # Safety
/// `c` is NULL or points to a valid `ec_callbacks` for the call.
pub(super) unsafe fn from_c(c: *const ec_callbacks) -> (Callbacks, Option<Arc<Gate>>) {
    // SAFETY: the caller's contract.
    let Some(c) = (unsafe { c.as_ref() }) else {
        return (Callbacks::default(), None);
    };
    let gate = Arc::new(Gate::default());
    let user_data = UserData(c.user_data);
    let mut callbacks = Callbacks::default();
    if let Some(f) = c.score {
        callbacks.scorer = Some(Arc::new(CScorer {
            f,
            user_data,
            gate: gate.clone(),
        }));
    }
    let arbitrate: ec_arbitrate_fn = c.arbitrate;
    if let Some(f) = arbitrate {
        callbacks.arbiter = Some(Arc::new(CArbiter {
            f,
            user_data,
            gate: gate.clone(),
        }));
    }
    (callbacks, Some(gate))
}
