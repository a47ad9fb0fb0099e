//! Scheduling hints for the process's own threads (Linux; no-ops elsewhere).
//!
//! With llama.cpp's compute threads on every core, the threads that keep
//! time (the deadline timer, the harness's runtime) must get a core the
//! moment they wake, or settlement at the deadline waits for a time slice.
//! An unprivileged process cannot raise a thread's priority, but it can
//! lower one and ask for short time slices:
//!
//! - [`lower_current_thread`] raises the calling thread's nice value. The
//!   local lane's worker calls it before llama.cpp starts its compute
//!   threads, which inherit it (Linux nice values are per thread and
//!   inherited at thread creation). With the kernel's autogroups (the
//!   default on desktop distributions) nice only weighs threads of the
//!   same session against each other, so this gives the harness's own
//!   threads precedence over llama.cpp without making llama.cpp yield to
//!   other programs.
//! - [`prefer_short_slices`] asks the scheduler for a short time slice for
//!   the calling thread (`sched_setattr` with `sched_runtime`, honoured by
//!   the EEVDF scheduler since Linux 6.12, ignored before): a thread that
//!   asks for a shorter slice than the running one may preempt it as soon
//!   as it wakes, instead of waiting for the running slice to end.
//!
//! Both are best effort: a refusal is logged at debug level and ignored.
//! `EDGECLOUD_SCHED_HINTS=off` turns the slice requests off, to measure
//! what they bring (the nice value is `LocalConfig::nice`).
//! This module must not decide which threads get what; its callers do.
//! It is one of the three places the crate-wide `unsafe_code = "deny"` is
//! lifted (plain libc calls on the calling thread).

#![allow(unsafe_code)]
// Lowering a thread's nice value serves only the local lane.

/// The slice the latency-sensitive threads ask for: the kernel's minimum
/// (0.1 ms). They run for microseconds at a time, so it costs them nothing.
#[cfg(target_os = "linux")]
const SHORT_SLICE_NS: u64 = 100_000;

/// Raises the calling thread's nice value by `by` (0 leaves it as is).
/// Returns whether the kernel accepted it.
pub fn lower_current_thread(by: u8) -> bool {
    if by == 0 {
        return true;
    }
    imp::lower_current_thread(i32::from(by))
}

/// Asks for short time slices for the calling thread (see the module docs).
/// Returns whether the kernel accepted it. `EDGECLOUD_SCHED_HINTS=off` in
/// the environment turns this off (to measure what it brings).
pub fn prefer_short_slices() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let enabled = *ENABLED
        .get_or_init(|| std::env::var_os("EDGECLOUD_SCHED_HINTS").is_none_or(|v| v != "off"));
    enabled && imp::prefer_short_slices()
}

#[cfg(target_os = "linux")]
mod imp {
    use super::SHORT_SLICE_NS;

    pub(super) fn lower_current_thread(by: i32) -> bool {
        // SAFETY: plain syscalls on the calling thread's id; getpriority's
        // -1 is ambiguous, so errno is cleared before and checked after.
        unsafe {
            let tid = libc::gettid() as libc::id_t;
            *libc::__errno_location() = 0;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            if current == -1 && *libc::__errno_location() != 0 {
                return refused("getpriority");
            }
            let wanted = (current + by).min(19);
            if libc::setpriority(libc::PRIO_PROCESS, tid, wanted) != 0 {
                return refused("setpriority");
            }
        }
        true
    }

    /// `struct sched_attr` of the kernel's UAPI (the first version, 48
    /// bytes, which every kernel since 3.14 accepts).
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        sched_policy: u32,
        sched_flags: u64,
        sched_nice: i32,
        sched_priority: u32,
        sched_runtime: u64,
        sched_deadline: u64,
        sched_period: u64,
    }

    /// Keep the thread's nice value as it is (SCHED_FLAG_KEEP_PARAMS would
    /// also keep the runtime we want to set, so nice is read and re-sent).
    pub(super) fn prefer_short_slices() -> bool {
        // SAFETY: as above; the attribute struct is fully initialised and
        // its size field tells the kernel which version it is.
        unsafe {
            let tid = libc::gettid();
            *libc::__errno_location() = 0;
            let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
            if nice == -1 && *libc::__errno_location() != 0 {
                return refused("getpriority");
            }
            let attr = SchedAttr {
                size: std::mem::size_of::<SchedAttr>() as u32,
                sched_policy: libc::SCHED_OTHER as u32,
                sched_flags: 0,
                sched_nice: nice,
                sched_priority: 0,
                sched_runtime: SHORT_SLICE_NS,
                sched_deadline: 0,
                sched_period: 0,
            };
            if libc::syscall(
                libc::SYS_sched_setattr,
                tid,
                &attr as *const SchedAttr,
                0u32,
            ) != 0
            {
                return refused("sched_setattr");
            }
        }
        true
    }

    fn refused(call: &str) -> bool {
        tracing::debug!(call, error = %std::io::Error::last_os_error(), "scheduling hint refused");
        false
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub(super) fn lower_current_thread(_by: i32) -> bool {
        false
    }

    pub(super) fn prefer_short_slices() -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn nice_of_current_thread() -> i32 {
        // SAFETY: a plain syscall on the calling thread.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }

    #[test]
    fn lowering_applies_to_this_thread_and_the_threads_it_starts() {
        std::thread::spawn(|| {
            let before = nice_of_current_thread();
            assert!(lower_current_thread(3));
            let after = nice_of_current_thread();
            assert_eq!(after, (before + 3).min(19));
            let child = std::thread::spawn(nice_of_current_thread).join().unwrap();
            assert_eq!(child, after, "threads inherit their creator's nice value");
            assert!(lower_current_thread(0));
            assert_eq!(nice_of_current_thread(), after);
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            assert!(lower_current_thread(2));
            let nice = nice_of_current_thread();
            // Refused on kernels or sandboxes without sched_setattr; either
            // way the thread's nice value stays.
            let _ = prefer_short_slices();
            assert_eq!(nice_of_current_thread(), nice);
        })
        .join()
        .unwrap();
    }
}

/// How long the calling thread has waited for a CPU while runnable: the
/// second field of Linux's `/proc/thread-self/schedstat` (nanoseconds),
/// read through a file kept open (one `pread`, under a microsecond). The
/// local lane reads it around each decode step: a thread that waits a
/// good part of a step shares its core with other programs.
pub struct RunQueueWait {
    file: Option<std::fs::File>,
}

impl RunQueueWait {
    /// For the calling thread (the file is bound to it when opened);
    /// `None` readings where the kernel keeps no such figure.
    pub fn for_current_thread() -> Self {
        Self {
            file: std::fs::File::open("/proc/thread-self/schedstat").ok(),
        }
    }

    /// Nanoseconds waited so far.
    pub fn waited_ns(&self) -> Option<u64> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            let mut buf = [0u8; 96];
            let n = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
            parse_schedstat_wait(&buf[..n])
        }
        #[cfg(not(unix))]
        {
            None
        }
    }
}

/// The run-queue wait of a schedstat line (`run_ns wait_ns slices`).
fn parse_schedstat_wait(line: &[u8]) -> Option<u64> {
    std::str::from_utf8(line)
        .ok()?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Cores no other program is running on right now: the cores this
/// process may use, less the runnable threads Linux counts in
/// `/proc/loadavg` (its fourth field, `running/total`) that are not this
/// process's own (its `/proc/self/task/*/stat` in state `R`). The least of
/// a few readings over about a millisecond (a quiet machine shows a
/// passing kernel thread in about one reading in six), for a first guess
/// only; `None` where the kernel does not say.
pub fn free_cores() -> Option<usize> {
    const READINGS: usize = 5;
    const APART: std::time::Duration = std::time::Duration::from_micros(250);
    let others = (0..READINGS)
        .filter_map(|i| {
            if i > 0 {
                std::thread::sleep(APART);
            }
            let text = std::fs::read_to_string("/proc/loadavg").ok()?;
            let running = parse_loadavg_running(&text)?;
            Some(running.saturating_sub(own_running_threads().max(1)))
        })
        .min()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some(cores.saturating_sub(others))
}

/// This process's threads in state `R` (the caller among them).
fn own_running_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 1;
    };
    tasks
        .filter_map(Result::ok)
        .filter(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .and_then(|stat| stat_state(&stat))
                == Some('R')
        })
        .count()
}

/// The state letter of a `/proc/.../stat` line: the field after the
/// command name, which is in parentheses and may hold spaces.
fn stat_state(stat: &str) -> Option<char> {
    stat.get(stat.rfind(')')? + 1..)?
        .trim_start()
        .chars()
        .next()
}

/// The running count of a `/proc/loadavg` line (`0.1 0.2 0.3 2/345 678`).
fn parse_loadavg_running(text: &str) -> Option<usize> {
    text.split_ascii_whitespace()
        .nth(3)?
        .split('/')
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod run_queue_tests {
    use super::*;

    #[test]
    fn the_state_follows_the_command_name() {
        assert_eq!(stat_state("1234 (edgecloud-local) R 1 2 3"), Some('R'));
        assert_eq!(stat_state("1234 (a (weird) name) S 1"), Some('S'));
        assert_eq!(stat_state("garbage"), None);
        #[cfg(target_os = "linux")]
        assert!(own_running_threads() >= 1, "the caller is running");
    }

    #[test]
    fn loadavg_gives_the_running_count() {
        assert_eq!(
            parse_loadavg_running("0.52 0.58 0.59 3/467 12345\n"),
            Some(3)
        );
        assert_eq!(parse_loadavg_running("0.52 0.58 0.59"), None);
        #[cfg(target_os = "linux")]
        assert!(free_cores().is_some());
    }

    #[test]
    fn the_wait_is_the_second_field() {
        assert_eq!(
            parse_schedstat_wait(b"36578495 7539297 19\n"),
            Some(7539297)
        );
        assert_eq!(parse_schedstat_wait(b"36578495\n"), None);
        assert_eq!(parse_schedstat_wait(b""), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_calling_thread_has_a_figure_that_never_goes_back() {
        let clock = RunQueueWait::for_current_thread();
        let a = clock.waited_ns().expect("Linux keeps schedstat");
        std::thread::yield_now();
        let b = clock.waited_ns().unwrap();
        assert!(b >= a);
    }
}
