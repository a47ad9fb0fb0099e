//! The local lane's unsafe code: the llama.cpp and ggml calls the safe
//! `llama-cpp-2` API (0.1.160) does not expose.
//!
//! - **Abort callback.** llama.cpp polls `abort_callback(data)` during graph
//!   compute (on CPU after every graph node); returning true makes
//!   `llama_decode` return 2 promptly. We install it through the context
//!   parameters, before the context exists, so it is in place for the
//!   context's whole life.
//! - **Thread count** of a live context (`ThreadControl`), for the
//!   compute-thread governor.
//! - **Log callback.** llama.cpp's log goes into `tracing` (target
//!   `llama.cpp`), and its recent error lines are kept so that an opaque load
//!   failure can say what llama.cpp complained about.
//! - **ggml backends** (for `devices`): loading the portable build's backend
//!   libraries from a folder, each backend's compiled-in feature list, and
//!   why a backend library does not load (`dlopen_error`).
//!
//! This module must stay small: everything else in the lane is safe code.
//! The crate-wide `unsafe_code = "deny"` is lifted here (and only in
//! `edgecloud_core::sched` and `local::simd` besides).

#![allow(unsafe_code)]

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_sys_2::llama_context_params;
use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What the abort callback looks at: the tokens and the earliest deadline
/// of the jobs whose sequences are in the batch being decoded. The worker
/// arms it before each `llama_decode` and disarms it after; one job
/// stopping aborts the whole batch, and the others decode it again next
/// step (one step lost, so every sequence's cancel stays within one
/// compute step).
///
/// llama.cpp calls [`AbortSignal::should_abort`] after every graph node
/// (hundreds per generated token), so it must cost next to nothing: the
/// deadline is one clock read and an atomic compare, and the token (whose
/// `is_cancelled` takes a lock) is looked at once per
/// [`TOKEN_POLL_INTERVAL`] at most, which bounds what cancellation waits
/// for on top of the node in flight.
pub(crate) struct AbortSignal {
    /// The armed job's deadline in nanoseconds after `epoch`; `u64::MAX`
    /// when disarmed or the deadline is out of range.
    deadline_ns: AtomicU64,
    /// When the token was last looked at, in nanoseconds after `epoch`.
    token_checked_ns: AtomicU64,
    epoch: Instant,
    cancel: Mutex<Vec<CancellationToken>>,
    /// The decode thread's run-queue wait (set on that thread, again for
    /// each busy period's thread: see `worker`).
    run_queue: Mutex<Option<edgecloud_core::sched::RunQueueWait>>,
    /// No step has been armed on the bound thread yet.
    fresh_thread: AtomicBool,
    /// Whether this step is watched for contention (more than the fewest
    /// threads), and from what wait and time.
    watch: AtomicBool,
    watch_from_wait_ns: AtomicU64,
    watch_from_ns: AtomicU64,
    watch_checked_ns: AtomicU64,
    /// The wait the watched step must pass ([`WATCH_MIN_WAIT`], or
    /// [`FIRST_STEP_MIN_WAIT`]).
    watch_min_wait_ns: AtomicU64,
    /// The watch stopped the step.
    contended: AtomicBool,
}

/// Runs `work` on `state` on a new thread named `name` and waits for that
/// thread to end; the error is the thread's failure to start (`state`
/// untouched), the inner one a panic of `work`. For the local lane's own
/// state (its llama.cpp context, batch, samplers, grammar, and the
/// receiver of its channel), which is `!Send` only because it holds raw
/// pointers to objects that any thread may use, one at a time.
pub(super) fn lend_to_thread<T, R: Send>(
    name: &str,
    state: &mut T,
    work: fn(&mut T) -> R,
) -> std::io::Result<std::thread::Result<R>> {
    struct Lent<'a, T>(&'a mut T);
    // SAFETY: this thread waits in `join`, inside the scope, until the
    // borrowing thread has ended, so exactly one thread at a time uses
    // `state`, and its thread-agnostic objects (see the function's docs)
    // carry no thread-bound state (no lock guards, no thread locals).
    unsafe impl<T> Send for Lent<'_, T> {}
    impl<'a, T> Lent<'a, T> {
        fn into_inner(self) -> &'a mut T {
            self.0
        }
    }
    let lent = Lent(state);
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn_scoped(scope, move || work(lent.into_inner()))
            .map(|thread| thread.join())
    })
}

/// How often the abort callback looks at the cancellation token at most.
pub(crate) const TOKEN_POLL_INTERVAL: Duration = Duration::from_micros(100);
/// How often it looks at the decode thread's run-queue wait during a
/// watched step, at most (one `pread`, about a microsecond).
const WATCH_POLL_INTERVAL: Duration = Duration::from_millis(1);
/// A watched step is stopped once the decode thread has waited for a CPU
/// this long in it ...
const WATCH_MIN_WAIT: Duration = Duration::from_millis(3);
/// ... this long in the first step on a newly bound decode thread, which
/// starts llama.cpp's compute threads: a new thread may first run on the
/// decode thread's CPU (measured on the quiet 2-core VM: 3 ms of wait in
/// the first 13 ms of a fresh process's first prompt step, in 4 of 8 runs,
/// each then decoded again on one thread at half speed), while a step
/// that collapses under other programs waits far longer ...
const FIRST_STEP_MIN_WAIT: Duration = Duration::from_millis(15);
/// ... and for more than this share of the step so far (a passing blip in
/// a long quiet step is neither).
const WATCH_SHARE: f64 = 0.25;

impl Default for AbortSignal {
    fn default() -> Self {
        Self {
            deadline_ns: AtomicU64::new(u64::MAX),
            token_checked_ns: AtomicU64::new(0),
            epoch: Instant::now(),
            cancel: Mutex::new(Vec::new()),
            run_queue: Mutex::new(None),
            fresh_thread: AtomicBool::new(false),
            watch: AtomicBool::new(false),
            watch_from_wait_ns: AtomicU64::new(0),
            watch_from_ns: AtomicU64::new(0),
            watch_checked_ns: AtomicU64::new(0),
            watch_min_wait_ns: AtomicU64::new(0),
            contended: AtomicBool::new(false),
        }
    }
}

impl AbortSignal {
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Binds the signal to the calling thread's run-queue wait: call it
    /// on the thread that decodes, before it decodes (a later call binds
    /// the later thread).
    pub(crate) fn bind_decode_thread(&self) {
        *self.run_queue.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(edgecloud_core::sched::RunQueueWait::for_current_thread());
        self.fresh_thread.store(true, Ordering::Relaxed);
    }

    /// How long the decode thread has waited for a CPU so far, in
    /// nanoseconds; `None` before `bind_decode_thread` or where the kernel
    /// keeps no figure.
    pub(crate) fn waited_ns(&self) -> Option<u64> {
        self.run_queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()?
            .waited_ns()
    }

    /// Arms the signal for the jobs of one batch: it fires when any of
    /// their tokens is cancelled or the earliest of their deadlines passes,
    /// or at `budget`, the thread governor's bound on the step, or, with
    /// `watch_contention`, once the decode thread has waited for a CPU for
    /// a good part of the step (a step with more threads than the fewest
    /// that other programs' work makes wait: it is abandoned and decoded
    /// again with fewer threads, see [`Self::stopped_by_contention`]; the
    /// first step on a newly bound thread only for a longer wait,
    /// [`FIRST_STEP_MIN_WAIT`]).
    pub(crate) fn arm<'a>(
        &self,
        jobs: impl IntoIterator<Item = (&'a CancellationToken, Instant)>,
        budget: Option<Instant>,
        watch_contention: bool,
    ) {
        let first_on_thread = self.fresh_thread.swap(false, Ordering::Relaxed);
        let waited = self.waited_ns().filter(|_| watch_contention);
        self.contended.store(false, Ordering::Relaxed);
        if let Some(waited) = waited {
            let now = self.nanos(Instant::now());
            self.watch_from_wait_ns.store(waited, Ordering::Relaxed);
            self.watch_from_ns.store(now, Ordering::Relaxed);
            self.watch_checked_ns.store(now, Ordering::Relaxed);
            let min_wait = if first_on_thread {
                FIRST_STEP_MIN_WAIT
            } else {
                WATCH_MIN_WAIT
            };
            self.watch_min_wait_ns
                .store(min_wait.as_nanos() as u64, Ordering::Relaxed);
        }
        self.watch.store(waited.is_some(), Ordering::Release);
        let mut earliest: Option<Instant> = budget;
        {
            let mut tokens = self.cancel.lock().unwrap_or_else(|e| e.into_inner());
            tokens.clear();
            for (token, deadline) in jobs {
                tokens.push(token.clone());
                earliest = Some(earliest.map_or(deadline, |e| e.min(deadline)));
            }
        }
        self.token_checked_ns.store(0, Ordering::Relaxed);
        self.deadline_ns.store(
            earliest.map_or(u64::MAX, |d| self.nanos(d)),
            Ordering::Release,
        );
    }

    /// Whether the last armed step was stopped by the contention watch.
    pub(crate) fn stopped_by_contention(&self) -> bool {
        self.contended.load(Ordering::Acquire)
    }

    pub(crate) fn disarm(&self) {
        self.watch.store(false, Ordering::Release);
        self.deadline_ns.store(u64::MAX, Ordering::Release);
        self.cancel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub(crate) fn should_abort(&self) -> bool {
        let now = self.nanos(Instant::now());
        if now >= self.deadline_ns.load(Ordering::Acquire) {
            return true;
        }
        if self.watch.load(Ordering::Acquire) && self.contention_seen(now) {
            self.contended.store(true, Ordering::Release);
            return true;
        }
        let interval = TOKEN_POLL_INTERVAL.as_nanos() as u64;
        if now.saturating_sub(self.token_checked_ns.load(Ordering::Relaxed)) < interval {
            return false;
        }
        self.token_checked_ns.store(now, Ordering::Relaxed);
        self.cancel
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(CancellationToken::is_cancelled)
    }
}

impl AbortSignal {
    /// The watched step's wait so far is over both bounds (looked at once
    /// per `WATCH_POLL_INTERVAL` at most).
    fn contention_seen(&self, now: u64) -> bool {
        let checked = self.watch_checked_ns.load(Ordering::Relaxed);
        if now.saturating_sub(checked) < WATCH_POLL_INTERVAL.as_nanos() as u64 {
            return false;
        }
        self.watch_checked_ns.store(now, Ordering::Relaxed);
        let Some(waited) = self.waited_ns() else {
            return false;
        };
        let waited = waited.saturating_sub(self.watch_from_wait_ns.load(Ordering::Relaxed));
        let elapsed = now.saturating_sub(self.watch_from_ns.load(Ordering::Relaxed));
        contention_over(
            waited,
            elapsed,
            self.watch_min_wait_ns.load(Ordering::Relaxed),
        )
    }
}

/// Whether `waited_ns` of run-queue wait in a step `elapsed_ns` old stops
/// it: long (a blip is not contention) and a large share of the step.
fn contention_over(waited_ns: u64, elapsed_ns: u64, min_wait_ns: u64) -> bool {
    waited_ns > min_wait_ns && waited_ns as f64 > elapsed_ns as f64 * WATCH_SHARE
}

unsafe extern "C" fn abort_trampoline(data: *mut c_void) -> bool {
    // SAFETY: `data` is the pointer `with_abort_signal` took from an
    // `Arc<AbortSignal>` that the caller keeps alive for as long as the
    // context exists (the worker drops the context before the signal).
    // AbortSignal is Sync, so shared access from compute threads is fine.
    let signal = unsafe { &*(data as *const AbortSignal) };
    // A panic must not unwind into C.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| signal.should_abort())).unwrap_or(true)
}

// `LlamaContextParams` is a struct whose only field is the C
// `llama_context_params`. The crate does not let us set the abort fields, so
// we reinterpret it. These checks fail the build if its layout ever stops
// matching (a field added, a wrapper changed).
const _: () = assert!(
    std::mem::size_of::<LlamaContextParams>() == std::mem::size_of::<llama_context_params>()
);
const _: () = assert!(
    std::mem::align_of::<LlamaContextParams>() == std::mem::align_of::<llama_context_params>()
);

/// Returns `params` with llama.cpp's abort callback set to poll `signal`.
///
/// The caller must keep `signal` alive until the context built from these
/// parameters is dropped.
pub(crate) fn with_abort_signal(
    params: LlamaContextParams,
    signal: &Arc<AbortSignal>,
) -> LlamaContextParams {
    let expected_ctx = params.n_ctx();
    // SAFETY: same size and alignment (checked above) and the wrapper's only
    // field is the C struct, so the bytes are a valid `llama_context_params`.
    // `LlamaContextParams` has no Drop, so the transmute loses nothing.
    let mut raw: llama_context_params = unsafe { std::mem::transmute(params) };
    assert_eq!(
        std::num::NonZeroU32::new(raw.n_ctx),
        expected_ctx,
        "LlamaContextParams layout no longer wraps llama_context_params directly"
    );
    raw.abort_callback = Some(abort_trampoline);
    raw.abort_callback_data = Arc::as_ptr(signal) as *mut c_void;
    // SAFETY: the reverse of the transmute above; the wrapper holds raw
    // pointers it never frees, so handing it ours is sound.
    unsafe { std::mem::transmute::<llama_context_params, LlamaContextParams>(raw) }
}

/// The thread count of a live context (`llama_set_n_threads`), which the
/// safe API of llama-cpp-2 0.1.160 has no setter for.
///
/// The wrapper keeps its context pointer crate-private but shows it in its
/// `Debug` output (`LlamaContext { context: 0x55d0... }`); that is where we
/// read it, and it is accepted only when the text has exactly that shape and
/// the pointer answers `llama_n_ctx` as the wrapper's own `n_ctx()` does.
/// Anything else (a future release printing differently) leaves the lane on
/// its configured thread count, as before the governor existed.
#[derive(Debug)]
pub(crate) struct ThreadControl {
    ctx: std::ptr::NonNull<llama_cpp_sys_2::llama_context>,
}

impl ThreadControl {
    /// Finds `ctx`'s pointer; `None` when it cannot be read safely.
    ///
    /// The control must only be used with the same `ctx` (the decode loop
    /// keeps both in one struct and passes that context to [`Self::set`]).
    pub(crate) fn of(ctx: &LlamaContext<'_>) -> Option<Self> {
        let shown = format!("{ctx:?}");
        let hex = shown
            .strip_prefix("LlamaContext { context: 0x")?
            .strip_suffix(" }")?;
        let addr = usize::from_str_radix(hex, 16).ok()?;
        let ptr = std::ptr::NonNull::new(std::ptr::with_exposed_provenance_mut::<
            llama_cpp_sys_2::llama_context,
        >(addr))?;
        // SAFETY: the address is the wrapper's own (non-null) context
        // pointer, printed by its Debug impl, and `ctx` is alive for this
        // call; llama_n_ctx only reads the context.
        let n_ctx = unsafe { llama_cpp_sys_2::llama_n_ctx(ptr.as_ptr()) };
        (n_ctx == ctx.n_ctx()).then_some(Self { ctx: ptr })
    }

    /// Sets the threads of the next decodes (generation and prompt alike).
    /// Taking the context mutably ties the call to the loop that owns it:
    /// no decode is running meanwhile.
    pub(crate) fn set(&self, ctx: &mut LlamaContext<'_>, threads: usize) {
        let n = i32::try_from(threads.max(1)).unwrap_or(i32::MAX);
        debug_assert_eq!(
            // SAFETY: as below; llama_n_ctx only reads the context.
            unsafe { llama_cpp_sys_2::llama_n_ctx(self.ctx.as_ptr()) },
            ctx.n_ctx()
        );
        // SAFETY: `self.ctx` is `ctx`'s pointer (see `of`), alive while `ctx`
        // is; llama_set_n_threads only stores the two counts, and `&mut ctx`
        // means no other call on this context runs at the same time.
        unsafe { llama_cpp_sys_2::llama_set_n_threads(self.ctx.as_ptr(), n, n) };
    }

    /// The generation thread count the context holds now.
    #[cfg(test)]
    pub(crate) fn get(&self, ctx: &mut LlamaContext<'_>) -> usize {
        let _ = ctx;
        // SAFETY: as in `set`; llama_n_threads only reads a field.
        let n = unsafe { llama_cpp_sys_2::llama_n_threads(self.ctx.as_ptr()) };
        usize::try_from(n).unwrap_or(0)
    }
}

/// llama.cpp's most recent warning and error lines, oldest first.
fn recent_lines() -> &'static Mutex<VecDeque<String>> {
    static LINES: OnceLock<Mutex<VecDeque<String>>> = OnceLock::new();
    LINES.get_or_init(|| Mutex::new(VecDeque::with_capacity(RECENT_CAP)))
}

const RECENT_CAP: usize = 32;

/// Clears the record of recent llama.cpp warnings and errors, and what
/// the load log said of the weights' kernels ([`EXACT_ROWS`]).
pub(crate) fn clear_recent_log() {
    recent_lines()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
    EXACT_ROWS.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// The most rows a decode step may have while each row's matrix products
/// take the kernel of a one-row step, for the weights loaded since the
/// last `clear_recent_log` (0: any count). ggml's CPU backend moves some
/// weights into an extra buffer at load, which it names in the log
/// (`load_tensors: CPU_REPACK model buffer size = ...`): repacked Q4_0,
/// Q4_K and IQ4_NL weights (x86 with AVX2, ARM) multiply 1-3 rows one row
/// at a time and 4 or more with a blocked kernel that sums in another
/// order (ggml-cpu `repack.cpp`, this release; measured: a verify step of
/// 5 rows on Qwen2.5-Coder-1.5B Q4_K_M turned a near-tie of a GSM8K
/// answer the other way); AMX and KleidiAI buffers are not known
/// row by row, so no row beyond the first is taken as exact there.
static EXACT_ROWS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Extra CPU buffer names in llama.cpp's load log, and the rows a step
/// may have on their weights (see [`EXACT_ROWS`]).
const MULTI_ROW_BUFFERS: [(&str, usize); 3] = [("CPU_REPACK", 3), ("AMX", 1), ("KLEIDIAI", 1)];

/// The rows a step may have on the weights a load-log line puts in a
/// buffer ([`EXACT_ROWS`]); `None` for any other line.
fn buffer_rows(line: &str) -> Option<usize> {
    if !line.contains("model buffer size") {
        return None;
    }
    MULTI_ROW_BUFFERS
        .iter()
        .filter(|(name, _)| line.contains(name))
        .map(|&(_, rows)| rows)
        .min()
}

/// Notes what a load-log line says of the weights' kernels ([`EXACT_ROWS`]).
fn note_buffer(line: &str) {
    if let Some(rows) = buffer_rows(line) {
        let _ = EXACT_ROWS.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |now| Some(if now == 0 { rows } else { now.min(rows) }),
        );
    }
}

/// The bound [`EXACT_ROWS`] found for the weights loaded since the last
/// `clear_recent_log` (`None`: none), and clears it. Loads hold the
/// worker's load lock, so the lines are one load's.
pub(crate) fn take_exact_rows() -> Option<usize> {
    match EXACT_ROWS.swap(0, std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        rows => Some(rows),
    }
}

/// llama.cpp's warning and error lines since the last `clear_recent_log`.
pub(crate) fn take_recent_log() -> Vec<String> {
    recent_lines()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain(..)
        .collect()
}

/// Set in a probe child: llama.cpp's warnings and errors also go to stderr
/// as they come, so the parent sees them even when the child dies next.
static MIRROR_TO_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes llama.cpp's warning and error lines go to stderr too.
pub(crate) fn mirror_log_to_stderr() {
    MIRROR_TO_STDERR.store(true, std::sync::atomic::Ordering::Relaxed);
}

unsafe extern "C" fn log_trampoline(level: u32, text: *const c_char, _user: *mut c_void) {
    if text.is_null() {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string valid for this call.
    let line = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    let line = line.trim_end();
    if line.is_empty() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        use llama_cpp_sys_2::{GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_WARN};
        match level {
            GGML_LOG_LEVEL_ERROR | GGML_LOG_LEVEL_WARN => {
                if MIRROR_TO_STDERR.load(std::sync::atomic::Ordering::Relaxed) {
                    eprintln!("{line}");
                }
                if level == GGML_LOG_LEVEL_ERROR {
                    tracing::warn!(target: "llama.cpp", "{line}");
                } else {
                    tracing::debug!(target: "llama.cpp", "{line}");
                }
                let mut lines = recent_lines().lock().unwrap_or_else(|e| e.into_inner());
                if lines.len() == RECENT_CAP {
                    lines.pop_front();
                }
                lines.push_back(line.to_owned());
            }
            _ => {
                note_buffer(line);
                super::placement::note(line);
                tracing::trace!(target: "llama.cpp", "{line}")
            }
        }
    });
}

/// Routes llama.cpp's and ggml's logs into `tracing` and the recent-line
/// record. Called once, when the backend starts.
pub(crate) fn install_log_hook() {
    // SAFETY: the callback is a plain function valid for the whole process
    // and ignores its user-data pointer.
    unsafe {
        llama_cpp_sys_2::llama_log_set(Some(log_trampoline), std::ptr::null_mut());
        llama_cpp_sys_2::ggml_log_set(Some(log_trampoline), std::ptr::null_mut());
    }
}

/// Test support: whether llama.cpp's built-in template matcher renders a
/// template by this name (asked of llama.cpp itself, no model needed). Here
/// because it is unsafe code.
#[cfg(test)]
pub(crate) fn llama_cpp_knows_template(name: &str) -> bool {
    let tmpl = std::ffi::CString::new(name).unwrap();
    let role = std::ffi::CString::new("user").unwrap();
    let content = std::ffi::CString::new("hi").unwrap();
    let msg = llama_cpp_sys_2::llama_chat_message {
        role: role.as_ptr(),
        content: content.as_ptr(),
    };
    let mut buf = vec![0 as std::ffi::c_char; 4096];
    // SAFETY: every pointer is valid for the call; the buffer length is
    // passed, and llama.cpp writes at most that many bytes.
    let n = unsafe {
        llama_cpp_sys_2::llama_chat_apply_template(
            tmpl.as_ptr(),
            &msg,
            1,
            true,
            buf.as_mut_ptr(),
            buf.len() as i32,
        )
    };
    n > 0
}

/// Loads every ggml backend library in `dir` (`libggml-<name>-*.so`, the
/// best-scoring one per backend), registering them with ggml.
#[cfg(feature = "portable")]
pub(crate) fn load_ggml_backends(dir: &std::path::Path) -> bool {
    let Ok(c_dir) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path that outlives the call; ggml copies
    // what it keeps. Loading twice only registers duplicates, and `devices`
    // calls this once per process.
    unsafe { llama_cpp_sys_2::ggml_backend_load_all_from_path(c_dir.as_ptr()) };
    true
}

/// Why the dynamic linker will not load `path` (`None`: it loads). For a
/// GPU backend library ggml did not register: a missing dependency such
/// as the Vulkan loader (`libvulkan.so.1`) shows here; when it loads, the
/// backend itself declined (no driver).
pub(crate) fn dlopen_error(path: &std::path::Path) -> Option<String> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a valid NUL-terminated path; the handle is closed at once and
    // nothing from the library is called (its initialisers run, as when
    // ggml loads it). dlerror's string is copied before any other dl call.
    unsafe {
        let handle = libc::dlopen(c_path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if handle.is_null() {
            let err = libc::dlerror();
            return Some(if err.is_null() {
                "the dynamic linker refused it".into()
            } else {
                CStr::from_ptr(err).to_string_lossy().into_owned()
            });
        }
        libc::dlclose(handle);
    }
    None
}

/// Every ggml backend registry's name and compiled-in features (`AVX2`,
/// `ARCHS=900`: a value other than `1` is kept after `=`).
pub(crate) fn ggml_backend_registries() -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    // SAFETY: ggml's registry functions take only an index below its own
    // count and the handles it returned; the names and features it returns
    // are static strings owned by the backend, valid while it is loaded
    // (backends are never unloaded here).
    unsafe {
        for i in 0..llama_cpp_sys_2::ggml_backend_reg_count() {
            let reg = llama_cpp_sys_2::ggml_backend_reg_get(i);
            if reg.is_null() {
                continue;
            }
            let name = owned(llama_cpp_sys_2::ggml_backend_reg_name(reg));
            let mut features = Vec::new();
            let proc = llama_cpp_sys_2::ggml_backend_reg_get_proc_address(
                reg,
                c"ggml_backend_get_features".as_ptr(),
            );
            if !proc.is_null() {
                // The entry point's documented type (ggml-backend.h:
                // `ggml_backend_get_features_t`).
                let get: unsafe extern "C" fn(
                    llama_cpp_sys_2::ggml_backend_reg_t,
                )
                    -> *mut llama_cpp_sys_2::ggml_backend_feature = std::mem::transmute(proc);
                let mut f = get(reg);
                // The list ends with an entry whose name is NULL.
                while !f.is_null() && !(*f).name.is_null() {
                    let key = owned((*f).name);
                    let value = owned((*f).value);
                    features.push(if value == "1" {
                        key
                    } else {
                        format!("{key}={value}")
                    });
                    f = f.add(1);
                }
            }
            out.push((name, features));
        }
    }
    out
}

/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn owned(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-null and NUL-terminated, per the caller.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_log_says_which_weights_multiply_rows_with_another_kernel() {
        let line = |name: &str| format!("load_tensors:   {name} model buffer size =   596.53 MiB");
        assert_eq!(buffer_rows(&line("CPU_REPACK")), Some(3));
        assert_eq!(buffer_rows(&line("AMX")), Some(1));
        assert_eq!(buffer_rows(&line("CPU_Mapped")), None);
        assert_eq!(buffer_rows(&line("CPU")), None);
        assert_eq!(
            buffer_rows("repack: repack tensor blk.0.attn_q.weight with q4_K_8x8"),
            None
        );
    }

    #[test]
    fn deadline_aborts_at_once_and_disarm_clears_it() {
        let signal = AbortSignal::default();
        assert!(!signal.should_abort(), "a disarmed signal never aborts");
        let token = CancellationToken::new();
        signal.arm([(&token, Instant::now())], None, false);
        assert!(signal.should_abort(), "a past deadline aborts");
        signal.disarm();
        assert!(!signal.should_abort());
        signal.arm(
            [(&token, Instant::now() + Duration::from_secs(3600))],
            None,
            false,
        );
        assert!(!signal.should_abort());
        signal.arm([], None, false);
        assert!(
            !signal.should_abort(),
            "no job in the batch: nothing to abort"
        );
    }

    #[test]
    fn a_step_budget_aborts_like_a_deadline() {
        let signal = AbortSignal::default();
        let token = CancellationToken::new();
        let far = Instant::now() + Duration::from_secs(3600);
        signal.arm([(&token, far)], Some(Instant::now()), false);
        assert!(signal.should_abort(), "the budget passed");
        signal.arm([(&token, far)], Some(far), false);
        assert!(!signal.should_abort());
        signal.disarm();
    }

    #[test]
    fn a_watched_step_stops_when_the_wait_is_both_long_and_large() {
        let ms = |n: u64| n * 1_000_000;
        let min = WATCH_MIN_WAIT.as_nanos() as u64;
        assert!(
            !contention_over(ms(2), ms(4), min),
            "2 ms is a blip, however large"
        );
        assert!(contention_over(ms(4), ms(8), min));
        assert!(!contention_over(ms(4), ms(400), min), "1% of a long step");
        assert!(contention_over(ms(120), ms(400), min));
        let first = FIRST_STEP_MIN_WAIT.as_nanos() as u64;
        assert!(
            !contention_over(ms(4), ms(13), first),
            "a fresh thread's start"
        );
        assert!(contention_over(ms(40), ms(80), first), "a collapse");
    }

    #[test]
    fn the_first_step_on_a_newly_bound_thread_needs_a_longer_wait() {
        let signal = AbortSignal::default();
        let token = CancellationToken::new();
        let far = Instant::now() + Duration::from_secs(3600);
        signal.bind_decode_thread();
        if signal.waited_ns().is_none() {
            return; // no run-queue figure on this kernel: nothing is watched
        }
        let min_wait = |s: &AbortSignal| {
            assert!(s.watch.load(Ordering::Relaxed), "watched");
            Duration::from_nanos(s.watch_min_wait_ns.load(Ordering::Relaxed))
        };
        signal.arm([(&token, far)], None, true);
        assert_eq!(min_wait(&signal), FIRST_STEP_MIN_WAIT, "the first step");
        signal.disarm();
        signal.arm([(&token, far)], None, true);
        assert_eq!(min_wait(&signal), WATCH_MIN_WAIT, "the second step");
        signal.disarm();
        // A busy period's new thread binds again.
        signal.bind_decode_thread();
        signal.arm([(&token, far)], None, true);
        assert_eq!(min_wait(&signal), FIRST_STEP_MIN_WAIT);
        signal.disarm();
    }

    #[test]
    fn an_unwatched_or_unbound_step_never_stops_for_contention() {
        let signal = AbortSignal::default();
        let token = CancellationToken::new();
        let far = Instant::now() + Duration::from_secs(3600);
        // Not bound to a thread: nothing to watch.
        signal.arm([(&token, far)], None, true);
        assert!(!signal.should_abort());
        assert!(!signal.stopped_by_contention());
        signal.bind_decode_thread();
        signal.arm([(&token, far)], None, false);
        assert!(!signal.should_abort());
        assert!(!signal.stopped_by_contention());
        signal.disarm();
    }

    #[test]
    fn one_job_of_a_batch_aborts_the_batch() {
        let signal = AbortSignal::default();
        let later = Instant::now() + Duration::from_secs(3600);
        let (a, b) = (CancellationToken::new(), CancellationToken::new());
        signal.arm([(&a, later), (&b, Instant::now())], None, false);
        assert!(signal.should_abort(), "the earliest deadline counts");
        signal.arm([(&a, later), (&b, later)], None, false);
        b.cancel();
        let cancelled_at = Instant::now();
        while !signal.should_abort() {
            assert!(
                cancelled_at.elapsed() < Duration::from_secs(10),
                "the second job's cancellation never seen"
            );
        }
    }

    #[test]
    fn cancellation_is_seen_within_the_poll_interval() {
        let signal = AbortSignal::default();
        let cancel = CancellationToken::new();
        signal.arm(
            [(&cancel, Instant::now() + Duration::from_secs(3600))],
            None,
            false,
        );
        assert!(!signal.should_abort());
        cancel.cancel();
        // Polled the way llama.cpp polls it: over and over. The bound is
        // only a guard against hanging; the interval is 0.1 ms.
        let cancelled_at = Instant::now();
        while !signal.should_abort() {
            assert!(
                cancelled_at.elapsed() < Duration::from_secs(10),
                "cancellation never seen"
            );
        }
        signal.disarm();
        assert!(!signal.should_abort(), "disarm forgets the cancelled token");
    }
}
