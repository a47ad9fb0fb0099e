//! The C ABI (`libedgecloud`, header `include/edgecloud.h`, feature
//! `capi`): a thin skin over [`edgecloud::bindings`], so a C, C++, Swift or
//! Kotlin program gets the same harness as Rust (docs/DESIGN.md point 15).
//!
//! Habits (rustls-ffi's): opaque handles (`ec_harness`, `ec_handle`),
//! JSON in and out, a status code from every call that can fail, every
//! panic caught at the boundary (`EC_ERR_PANIC`), callback `user_data`,
//! and an `ec_*_free` for everything handed out. No Rust type crosses.
//! The header is generated from this module by cbindgen and checked in;
//! `tests/it/capi_header.rs` fails when it differs (`EDGECLOUD_BLESS=1`
//! rewrites it). The C tests are `tests/c/`; the guide is
//! docs/embedding.md.
//!
//! Why `unsafe` is allowed here (the crate denies it elsewhere): C hands
//! over raw pointers, and a C function pointer can only be called
//! unsafely. Every dereference is of an argument the header documents as
//! NULL or valid, and is checked for NULL first.
#![allow(unsafe_code)]
// The C names are the header's names.
#![allow(non_camel_case_types)]

mod boundary;
mod callbacks;

use boundary::{c_string, guard, put, str_arg, Failure};
use edgecloud::bindings::{self, DeltaStream, Embedded, ErrorKind};
use edgecloud::harness::{AbortHandle, AbortResult, Outcome, RunHandle};
use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A status: `EC_OK` (0) or one of the `EC_ERR_*` codes.
pub type ec_status = i32;

/// Success.
pub const EC_OK: ec_status = 0;
/// The configuration or a setting is invalid.
pub const EC_ERR_CONFIG: ec_status = 1;
/// The local model could not be found, validated or loaded.
pub const EC_ERR_MODEL: ec_status = 2;
/// Every instance (every lane the request needed) was busy: retry later.
pub const EC_ERR_BUSY: ec_status = 3;
/// The request JSON is invalid; the error names the field.
pub const EC_ERR_INVALID_REQUEST: ec_status = 4;
/// The deadline came before a usable answer (the outcome is still given).
pub const EC_ERR_DEADLINE: ec_status = 5;
/// The run was aborted (the outcome is still given).
pub const EC_ERR_ABORTED: ec_status = 6;
/// Every lane that could run failed (the outcome says why, per lane).
pub const EC_ERR_LANE: ec_status = 7;
/// edgecloud panicked: a bug, caught at the boundary; the process and
/// the harness are fine.
pub const EC_ERR_PANIC: ec_status = 8;
/// Anything else (the harness is shutting down, a thread could not start).
pub const EC_ERR_INTERNAL: ec_status = 9;
/// An argument is NULL where it may not be, or a string is not UTF-8.
pub const EC_ERR_INVALID_ARGUMENT: ec_status = 10;

/// What an arbiter returns to reject every candidate (the run then fails).
pub const EC_ARBITRATE_REJECT_ALL: i32 = -1;
/// What an arbiter returns to leave the choice to the built-in rule (the
/// highest score); so does any other negative or out-of-range value.
pub const EC_ARBITRATE_DEFAULT: i32 = -2;

/// Called with each delta `serve` would stream for the run, as JSON in the
/// shape of an OpenAI stream chunk's `delta`: each piece of text the run
/// commits to as `{"content":"..."}`, then, once it has settled, the
/// winner's tool calls (per call `{"tool_calls":[{"index":0,"id":...,
/// "type":"function","function":{"name":...,"arguments":""}}]}`, then one
/// with its `arguments`). `delta_json` is valid only during the call. Called on the handle's own
/// edgecloud thread (named `edgecloud-delta`), one call at a time, in
/// order, never after `ec_handle_free` returns.
pub type ec_delta_fn =
    Option<unsafe extern "C" fn(delta_json: *const c_char, user_data: *mut c_void)>;

/// Rates a finished candidate. `candidate_json` (valid only during the
/// call) is `{"lane": "local"|"cloud", "candidate": {...}, "request":
/// {...}}`: the candidate's `text`, `finish_reason`, `tool_calls`, token
/// counts, timings and signals (`signals.mean_logprob` ...), and the
/// request as the caller gave it. Return the score (higher is better;
/// policies' thresholds compare with `>=`); NaN or an infinity leaves the
/// candidate unscored (it then passes no threshold).
pub type ec_score_fn =
    Option<unsafe extern "C" fn(candidate_json: *const c_char, user_data: *mut c_void) -> f64>;

/// Picks the winner among finished candidates. `candidates_json` (valid
/// only during the call) is an array of `{"lane", "candidate", "score":
/// {"value", "signals"} or null, "finished_after_ms"}`. Return the index of
/// the winner, `EC_ARBITRATE_REJECT_ALL`, or `EC_ARBITRATE_DEFAULT`.
pub type ec_arbitrate_fn =
    Option<unsafe extern "C" fn(candidates_json: *const c_char, user_data: *mut c_void) -> i32>;

/// The callbacks of `ec_harness_new_with`; each may be NULL. They are the
/// harness's defaults, and a configuration can name them on a route as
/// `"user"` (`scorer = "user"`, `arbiter = "user"`).
///
/// Threads: called on edgecloud's callback threads (the harness
/// runtime's blocking pool, named `edgecloud-harness`), possibly several
/// at once, never while edgecloud holds a lock. They are timed, and a run
/// never waits for one past its deadline: a callback still running then
/// is abandoned (reported `timed_out`) and finishes on its own. They must
/// not call `ec_run`, `ec_handle_wait` or `ec_harness_free`, and must not
/// unwind (no C++ exception, no longjmp) out of the call.
///
/// `user_data` is passed to every call as given; it must stay valid, and
/// be safe to use from several threads at once, until `ec_harness_free`
/// returns (after that no callback is running or will be called).
#[repr(C)]
pub struct ec_callbacks {
    /// The scorer, or NULL for the built-in one.
    pub score: ec_score_fn,
    /// The arbiter, or NULL for the built-in rule.
    pub arbitrate: ec_arbitrate_fn,
    /// Passed to every call.
    pub user_data: *mut c_void,
}

/// A harness: the lanes, policies and deadline of one configuration.
/// Opaque; from `ec_harness_new`, freed with `ec_harness_free`. Every
/// function taking one may be called from any thread, at once.
pub struct ec_harness {
    embedded: Embedded,
    gate: Option<Arc<callbacks::Gate>>,
}

/// A run in flight. Opaque; from `ec_start`, freed with `ec_handle_free`.
/// `ec_handle_abort` and `ec_handle_wait` may be called from any thread,
/// at once; it stays valid after its harness is freed.
pub struct ec_handle {
    abort: AbortHandle,
    state: Mutex<HandleState>,
    /// Set by `ec_handle_free`: `on_delta` is called no more.
    freed: Arc<AtomicBool>,
}

enum HandleState {
    /// Not streaming: the run, waited for by `ec_handle_wait`.
    Running(RunHandle),
    /// Streaming: the thread that calls `on_delta`, then returns the
    /// outcome.
    Streaming(std::thread::JoinHandle<Result<Outcome, bindings::Error>>),
    /// Waited for: what every later wait returns.
    Done(Finished),
    /// A wait is in progress (or panicked).
    Taken,
}

#[derive(Clone)]
struct Finished {
    status: ec_status,
    outcome: Option<String>,
    error: Option<String>,
}

/// The status of an error kind.
fn status_of(kind: ErrorKind) -> ec_status {
    match kind {
        ErrorKind::Config => EC_ERR_CONFIG,
        ErrorKind::Model => EC_ERR_MODEL,
        ErrorKind::Busy => EC_ERR_BUSY,
        ErrorKind::InvalidRequest => EC_ERR_INVALID_REQUEST,
        ErrorKind::Deadline => EC_ERR_DEADLINE,
        ErrorKind::Aborted => EC_ERR_ABORTED,
        ErrorKind::Lane => EC_ERR_LANE,
        _ => EC_ERR_INTERNAL,
    }
}

impl Finished {
    fn of(result: Result<Outcome, bindings::Error>) -> Self {
        match result {
            Ok(outcome) => {
                let error = bindings::Error::of_outcome(&outcome);
                Finished {
                    status: error.as_ref().map_or(EC_OK, |e| status_of(e.kind)),
                    outcome: Some(bindings::outcome_json(&outcome)),
                    error: error.map(|e| e.message),
                }
            }
            Err(e) => {
                let f = Failure::from(e);
                Finished {
                    status: f.status,
                    outcome: None,
                    error: Some(f.message),
                }
            }
        }
    }

    /// Hands the outcome and error out; returns the status.
    ///
    /// # Safety
    /// `outcome_json` and `error` are NULL or writable.
    unsafe fn hand_out(self, outcome_json: *mut *mut c_char, error: *mut *mut c_char) -> ec_status {
        // SAFETY: the caller's contract.
        unsafe {
            put(outcome_json, self.outcome);
            put(error, self.error);
        }
        self.status
    }
}

/// The caller's `user_data` for `on_delta`, moved to the delta thread.
struct DeltaTarget {
    f: unsafe extern "C" fn(*const c_char, *mut c_void),
    user_data: *mut c_void,
    freed: Arc<AtomicBool>,
}

// SAFETY: the header tells the caller `on_delta` is called on an
// edgecloud thread with this `user_data`; it is used by that thread alone.
unsafe impl Send for DeltaTarget {}

impl DeltaTarget {
    fn call(&self, delta_json: String) {
        // Freed from inside `on_delta`: `user_data` may be gone.
        if self.freed.load(Ordering::Acquire) {
            return;
        }
        let text = c_string(delta_json);
        // SAFETY: the caller's callback, with a string valid for the call
        // and its own `user_data` (the header's contract).
        unsafe { (self.f)(text.as_ptr(), self.user_data) }
    }
}

static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The library's version (`"0.1.0"`). Static: do not free it. Any thread.
#[no_mangle]
pub extern "C" fn ec_version() -> *const c_char {
    VERSION.as_ptr().cast()
}

/// A short name for a status (`"EC_ERR_DEADLINE"`); static, do not free.
/// An unknown value gives `"EC_ERR_UNKNOWN"`. Any thread.
#[no_mangle]
pub extern "C" fn ec_status_name(status: ec_status) -> *const c_char {
    let name: &'static str = match status {
        EC_OK => "EC_OK\0",
        EC_ERR_CONFIG => "EC_ERR_CONFIG\0",
        EC_ERR_MODEL => "EC_ERR_MODEL\0",
        EC_ERR_BUSY => "EC_ERR_BUSY\0",
        EC_ERR_INVALID_REQUEST => "EC_ERR_INVALID_REQUEST\0",
        EC_ERR_DEADLINE => "EC_ERR_DEADLINE\0",
        EC_ERR_ABORTED => "EC_ERR_ABORTED\0",
        EC_ERR_LANE => "EC_ERR_LANE\0",
        EC_ERR_PANIC => "EC_ERR_PANIC\0",
        EC_ERR_INTERNAL => "EC_ERR_INTERNAL\0",
        EC_ERR_INVALID_ARGUMENT => "EC_ERR_INVALID_ARGUMENT\0",
        _ => "EC_ERR_UNKNOWN\0",
    };
    name.as_ptr().cast()
}

/// Builds a harness from a configuration in TOML, the keys of
/// `edgecloud run --config` (`[local] model` takes a path, `hf:` or
/// `ollama:`), with optional callbacks (`callbacks` may be NULL; it is
/// copied). Starts the lanes: loading a model blocks the calling thread.
/// On success `*out` is the harness (free it with `ec_harness_free`) and
/// `EC_OK` is returned; else `*out` is NULL, the status says why
/// (`EC_ERR_CONFIG`, `EC_ERR_MODEL`, ...) and `*error` (when `error` is
/// not NULL) is a message to free with `ec_string_free`. Any thread.
///
/// # Safety
/// `config_toml` is NULL or a NUL-terminated string; `callbacks` is NULL
/// or valid; `out` is writable; `error` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ec_harness_create(
    config_toml: *const c_char,
    callbacks: *const ec_callbacks,
    out: *mut *mut ec_harness,
    error: *mut *mut c_char,
) -> ec_status {
    guard(error, || {
        if out.is_null() {
            return Err(Failure::argument("`out` is NULL"));
        }
        // SAFETY: checked not NULL; writable by the contract.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: the contract.
        let text = unsafe { str_arg(config_toml, "config_toml") }?;
        let cfg = bindings::config_from_toml(text).map_err(bindings::Error::from)?;
        // SAFETY: the contract.
        let (cbs, gate) = unsafe { callbacks::from_c(callbacks) };
        let embedded = Embedded::start(&cfg, cbs)?;
        let harness = Box::new(ec_harness { embedded, gate });
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(harness) };
        Ok(EC_OK)
    })
}

/// For a Rust program that hands C code a harness it built itself
/// ([`Embedded::from_harness`]: its own backends, or a configured one):
/// the `ec_harness` C functions take, freed with `ec_harness_free`. A Rust
/// function, not part of the C header.
pub fn harness_from_embedded(embedded: Embedded) -> *mut ec_harness {
    Box::into_raw(Box::new(ec_harness {
        embedded,
        gate: None,
    }))
}

/// `ec_harness_create` without callbacks, returning the harness (NULL on
/// failure, with `*error` saying why).
///
/// # Safety
/// As `ec_harness_create`.
#[no_mangle]
pub unsafe extern "C" fn ec_harness_new(
    config_toml: *const c_char,
    error: *mut *mut c_char,
) -> *mut ec_harness {
    // SAFETY: the same contract.
    unsafe { ec_harness_new_with(config_toml, std::ptr::null(), error) }
}

/// `ec_harness_create` with callbacks, returning the harness (NULL on
/// failure, with `*error` saying why).
///
/// # Safety
/// As `ec_harness_create`.
#[no_mangle]
pub unsafe extern "C" fn ec_harness_new_with(
    config_toml: *const c_char,
    callbacks: *const ec_callbacks,
    error: *mut *mut c_char,
) -> *mut ec_harness {
    let mut h = std::ptr::null_mut();
    // SAFETY: the same contract; `h` is writable.
    unsafe { ec_harness_create(config_toml, callbacks, &mut h, error) };
    h
}

/// Frees a harness (NULL: nothing happens). Never waits for runs: runs in
/// flight and their handles stay valid, and late workers finish on their
/// own. It does wait for callback calls in progress, and no callback is
/// called after it returns. Any thread but a callback's.
///
/// # Safety
/// `harness` is NULL or from `ec_harness_new*`, not freed before, and not
/// used after.
#[no_mangle]
pub unsafe extern "C" fn ec_harness_free(harness: *mut ec_harness) {
    if harness.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the contract: ours, from `Box::into_raw`, freed once.
        let harness = unsafe { Box::from_raw(harness) };
        if let Some(gate) = &harness.gate {
            gate.close();
        }
        drop(harness);
    }));
}

/// # Safety
/// `harness` is NULL or a live harness.
unsafe fn harness_ref<'a>(harness: *const ec_harness) -> Result<&'a ec_harness, Failure> {
    // SAFETY: the contract.
    unsafe { harness.as_ref() }.ok_or_else(|| Failure::argument("`harness` is NULL"))
}

/// Stops the harness taking runs (later ones fail with
/// `EC_ERR_INTERNAL`, "shutting down") and blocks until its runs in flight
/// have settled and every worker, late ones included, has returned, or
/// `grace_ms` has passed. `EC_OK` when nothing is left running;
/// `EC_ERR_DEADLINE` with `*error` naming what still runs otherwise. Call
/// it before the process exits with runs in flight (abort them first with
/// `ec_handle_abort`): a local worker still decoding while the process's
/// exit handlers run can crash it. Any thread but a callback's or
/// `on_delta`'s.
///
/// # Safety
/// `harness` is NULL or live; `error` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ec_harness_shutdown(
    harness: *mut ec_harness,
    grace_ms: u64,
    error: *mut *mut c_char,
) -> ec_status {
    guard(error, || {
        // SAFETY: the contract.
        let h = unsafe { harness_ref(harness) }?;
        let report = h
            .embedded
            .harness()
            .shutdown_blocking(std::time::Duration::from_millis(grace_ms))
            .map_err(|e| Failure::from(bindings::Error::from(e)))?;
        if report.is_clean() {
            return Ok(EC_OK);
        }
        Err(Failure::new(
            EC_ERR_DEADLINE,
            format!(
                "still running after {grace_ms} ms: {} run(s) in flight, {} worker(s)",
                report.runs_in_flight,
                report.still_running.len()
            ),
        ))
    })
}

/// Runs a request and blocks the calling thread until its outcome.
/// `request_json` is a chat-completions body as `edgecloud serve` takes
/// it: `messages` (required), `max_tokens`, `temperature`, `top_p`,
/// `seed`, `stop`, `response_format`, `tools`, `tool_choice`, `logprobs`
/// ...; `model` optional (a route name selects that route); and
/// `"edgecloud": {"policy": "race", "deadline_ms": 1500}` for this run's
/// policy and deadline.
///
/// Returns `EC_OK` when a lane answered; `EC_ERR_DEADLINE`,
/// `EC_ERR_ABORTED`, `EC_ERR_LANE` or `EC_ERR_BUSY` when the run settled
/// without an answer (the outcome is still given); `EC_ERR_INVALID_REQUEST`
/// (naming the field) and the others when it could not start (no
/// outcome). `*outcome_json` is the outcome as `edgecloud run --json`
/// prints it (`status`, `winner`, `text`, `decision`, `lanes`, ...) or
/// NULL; `*error` a message or NULL; each set when its pointer is not
/// NULL, each freed with `ec_string_free`. Any thread, at once; not from
/// inside a callback.
///
/// # Safety
/// `harness` is NULL or live; `request_json` is NULL or a NUL-terminated
/// string; `outcome_json` and `error` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ec_run(
    harness: *mut ec_harness,
    request_json: *const c_char,
    outcome_json: *mut *mut c_char,
    error: *mut *mut c_char,
) -> ec_status {
    // SAFETY: the contract.
    unsafe { put(outcome_json, None) };
    guard(error, || {
        // SAFETY: the contract.
        let h = unsafe { harness_ref(harness) }?;
        // SAFETY: the contract.
        let json = unsafe { str_arg(request_json, "request_json") }?;
        let outcome = h.embedded.run(json)?;
        // SAFETY: the contract; `error` was set to NULL by `guard`.
        Ok(unsafe { Finished::of(Ok(outcome)).hand_out(outcome_json, error) })
    })
}

/// Starts a request (as `ec_run` takes it) and returns at once with its
/// handle, or NULL with `*error` saying why (an invalid request names the
/// field). When `on_delta` is not NULL, the committed text streams to it
/// on the handle's own thread (see `ec_delta_fn`) with `user_data`, which
/// must stay valid until `ec_handle_free` returns. Any thread.
///
/// # Safety
/// As `ec_run`; `on_delta` is NULL or a function safe to call from
/// another thread with `user_data`.
#[no_mangle]
pub unsafe extern "C" fn ec_start(
    harness: *mut ec_harness,
    request_json: *const c_char,
    on_delta: ec_delta_fn,
    user_data: *mut c_void,
    error: *mut *mut c_char,
) -> *mut ec_handle {
    let mut handle = std::ptr::null_mut();
    guard(error, || {
        // SAFETY: the contract.
        let h = unsafe { harness_ref(harness) }?;
        // SAFETY: the contract.
        let json = unsafe { str_arg(request_json, "request_json") }?;
        let run = h.embedded.start_run(json, on_delta.is_some())?;
        let abort = run.abort_handle();
        let freed = Arc::new(AtomicBool::new(false));
        let state = match on_delta {
            None => HandleState::Running(run),
            Some(f) => {
                let target = DeltaTarget {
                    f,
                    user_data,
                    freed: freed.clone(),
                };
                let spawned = std::thread::Builder::new()
                    .name("edgecloud-delta".into())
                    .spawn(move || {
                        let target = target;
                        let mut deltas = DeltaStream::new(run);
                        while let Some(delta) = deltas.next_blocking()? {
                            target.call(delta);
                        }
                        deltas.wait()
                    });
                match spawned {
                    Ok(thread) => HandleState::Streaming(thread),
                    Err(e) => {
                        let _ = abort.abort();
                        return Err(Failure::new(
                            EC_ERR_INTERNAL,
                            format!("could not start the delta thread: {e}"),
                        ));
                    }
                }
            }
        };
        handle = Box::into_raw(Box::new(ec_handle {
            abort,
            state: Mutex::new(state),
            freed,
        }));
        Ok(EC_OK)
    });
    handle
}

/// Blocks until the run settles (and, when streaming, after the last
/// `on_delta` call), then gives its outcome as `ec_run` does, with the
/// same statuses. May be called again (from any thread): it gives the
/// same result again, as new strings. Not from inside `on_delta`.
///
/// # Safety
/// `handle` is NULL or live; `outcome_json` and `error` are NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ec_handle_wait(
    handle: *mut ec_handle,
    outcome_json: *mut *mut c_char,
    error: *mut *mut c_char,
) -> ec_status {
    // SAFETY: the contract.
    unsafe { put(outcome_json, None) };
    guard(error, || {
        // SAFETY: the contract.
        let handle =
            unsafe { handle.as_ref() }.ok_or_else(|| Failure::argument("`handle` is NULL"))?;
        let mut state = handle.state.lock().unwrap_or_else(|p| p.into_inner());
        let finished = match std::mem::replace(&mut *state, HandleState::Taken) {
            HandleState::Running(run) => Finished::of(run.wait().map_err(bindings::Error::from)),
            HandleState::Streaming(thread) => match thread.join() {
                Ok(result) => Finished::of(result),
                Err(payload) => Finished {
                    status: EC_ERR_PANIC,
                    outcome: None,
                    error: Some(format!(
                        "the delta thread panicked: {}",
                        edgecloud_core::panic_payload::message(&*payload)
                    )),
                },
            },
            HandleState::Done(finished) => finished,
            HandleState::Taken => {
                return Err(Failure::new(
                    EC_ERR_INTERNAL,
                    "an earlier wait on this handle panicked",
                ))
            }
        };
        *state = HandleState::Done(finished.clone());
        drop(state);
        // SAFETY: the contract.
        Ok(unsafe { finished.hand_out(outcome_json, error) })
    })
}

/// Aborts the run: it settles at once as `aborted` (`EC_ERR_ABORTED`), its
/// lanes are cancelled, and a worker that has not returned keeps its lane
/// until it does. Returns true when this call aborted it; false when it
/// had settled or was aborted already (so it is safe to call any number
/// of times), or `handle` is NULL. Any thread, never blocks; also from
/// inside `on_delta`.
///
/// # Safety
/// `handle` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn ec_handle_abort(handle: *mut ec_handle) -> bool {
    // SAFETY: the contract.
    let Some(handle) = (unsafe { handle.as_ref() }) else {
        return false;
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        matches!(handle.abort.abort(), AbortResult::Accepted)
    }))
    .unwrap_or(false)
}

/// Frees a handle (NULL: nothing happens). A run that has not settled is
/// aborted first. When streaming, returns after the last `on_delta` call
/// (from inside `on_delta` it cannot wait for that: the thread then ends
/// on its own, calling `on_delta` no more). Any thread.
///
/// # Safety
/// `handle` is NULL or from `ec_start`, not freed before, not used after,
/// and no other thread is inside a call with it.
#[no_mangle]
pub unsafe extern "C" fn ec_handle_free(handle: *mut ec_handle) {
    if handle.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the contract: ours, from `Box::into_raw`, freed once.
        let handle = unsafe { Box::from_raw(handle) };
        handle.freed.store(true, Ordering::Release);
        let _ = handle.abort.abort();
        let state = handle.state.into_inner().unwrap_or_else(|p| p.into_inner());
        if let HandleState::Streaming(thread) = state {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }));
}

/// Frees a string edgecloud handed out (`outcome_json`, `error`). NULL:
/// nothing happens. Any thread.
///
/// # Safety
/// `s` is NULL or a string from edgecloud, not freed before.
#[no_mangle]
pub unsafe extern "C" fn ec_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: the contract: ours, from `CString::into_raw`.
        drop(unsafe { CString::from_raw(s) });
    }
}
