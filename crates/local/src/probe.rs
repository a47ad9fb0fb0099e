//! The child-process probe: before a local lane serves, the model is loaded
//! and run once in a separate process, so that an assert or a crash inside
//! llama.cpp (which kills the whole process, and the validator cannot know
//! every one) costs a typed error instead of the caller's process.
//!
//! What the child does is exactly what the lane does, with the lane's
//! settings: validate, load the model, create the context, resolve and
//! render the chat template, then one job (tokenize a short chat, decode
//! it, sample one token). It is the same code ([`LocalLane::start`] and
//! [`LocalLane::generate`]), so the probe cannot drift from the lane.
//!
//! ```text
//!  parent: validate ── spawn `<program> __probe <spec>` ──── wait (bounded) ──┐
//!  child:              load ─ context ─ template ─ tokenize ─ decode ─ sample │
//!                      exit 0 + {"ok":true}   → start the lane in process <──┤
//!                      exit 2 + {"ok":false}  → start in process (same clean error)
//!                      killed by a signal     → LocalError::ProbeCrashed (signal, last log lines)
//!                      past the bound         → killed, LocalError::ProbeTimedOut
//! ```
//!
//! **Which program.** The probe re-runs a binary that understands the
//! hidden `__probe` subcommand: [`LocalConfig::probe_program`] when set,
//! else the current executable when it is the `edgecloud` binary. An
//! application embedding the library gets the same by calling
//! [`run_child_if_requested`] first thing in its `main` and setting
//! `probe_program` to its own executable. With [`ProbeMode::Auto`] (the
//! default) and no such program the probe is skipped (a debug log says
//! so); with [`ProbeMode::Child`] that is [`LocalError::ProbeUnavailable`].
//!
//! **Cache.** A passing verdict is remembered per model file (path, size,
//! modification time), lane settings (context, batch, GPU layers, chat
//! template) and build (this crate's version and the probe program's size
//! and modification time), as one small file under
//! `$XDG_CACHE_HOME/edgecloud/probe/` (or `~/.cache/...`), so repeated
//! starts do not pay again. Failures are never cached: a timeout on a
//! loaded machine must not stick. The file holds the whole key and is
//! compared in full, so a hash collision can only cost a probe.
//!
//! This module must not orchestrate lanes; it only decides whether the
//! lane may start.

use super::{LocalConfig, LocalError, LocalLane, Validation};
use edgecloud_core::lane::LaneJob;
use edgecloud_core::request::{ChatMessage, Sampling};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The hidden subcommand a probe program answers to.
pub const PROBE_SUBCOMMAND: &str = "__probe";

/// Test hook, honoured only by the child side of the probe (never by a
/// lane): `abort` makes the child abort after its job, `hang` makes it
/// wait forever. It exists so tests can produce a crash after the
/// validator has learnt every known one; it has no other use.
pub const TEST_CRASH_ENV: &str = "EDGECLOUD_PROBE_TEST_CRASH";

/// Lines of the child's stderr kept for the error (the last ones).
const LOG_TAIL: usize = 24;

/// Whether a local lane probes its model in a child process first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeMode {
    /// Probe when a probe program is known (configured, or the current
    /// executable is `edgecloud`), else skip.
    #[default]
    Auto,
    /// Always probe; no probe program is an error.
    Child,
    /// Never probe (the validator still runs).
    Off,
}

impl std::str::FromStr for ProbeMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "child" => Ok(Self::Child),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "unknown probe mode {other:?} (expected child, off or auto)"
            )),
        }
    }
}

/// How the probe of one start went.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ProbeReport {
    /// `child` (probed now), `cached` (a verdict from the cache), `skipped`
    /// (no probe program with `auto`) or `off`.
    pub status: &'static str,
    /// Wall time of the probe (the cache lookup when cached), in ms.
    pub ms: f64,
    /// When the child finished cleanly but could not start the lane, what
    /// it said (the in-process start then reports the typed error).
    pub child_error: Option<String>,
}

impl ProbeReport {
    /// The report of a start that did not probe (the child's own lane).
    pub(super) fn not_run() -> Self {
        Self::without("off")
    }

    fn without(status: &'static str) -> Self {
        Self {
            status,
            ms: 0.0,
            child_error: None,
        }
    }
}

/// Options of [`probe`] beyond the lane's settings.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ProbeOptions {
    /// Skip the validator in the child, to see what llama.cpp itself does
    /// with a file the validator refuses (`edgecloud model check
    /// --probe-invalid`). Safe: it is the child that may crash.
    pub skip_validation: bool,
    /// Ignore and do not update the verdict cache.
    pub no_cache: bool,
}

/// What the child is told to do (its one command-line argument, as JSON).
#[derive(Debug, Serialize, Deserialize)]
struct Spec {
    config: LocalConfig,
    skip_validation: bool,
}

/// The child's verdict line on stdout.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ChildVerdict {
    ok: bool,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    prompt_tokens: Option<u32>,
}

/// Runs the probe the lane's configuration asks for ([`LocalConfig::probe`]);
/// called by [`LocalLane::start`].
pub(super) fn before_start(config: &LocalConfig) -> Result<ProbeReport, LocalError> {
    let program = match (config.probe, probe_program(config)) {
        (ProbeMode::Off, _) => return Ok(ProbeReport::without("off")),
        (ProbeMode::Auto, None) => {
            tracing::debug!(
                "no probe program (set LocalConfig::probe_program): model not probed in a child"
            );
            return Ok(ProbeReport::without("skipped"));
        }
        (ProbeMode::Child, None) => {
            return Err(LocalError::ProbeUnavailable {
                detail: "no probe program: set LocalConfig::probe_program to a binary that calls \
                         edgecloud_local::probe::run_child_if_requested (or use the edgecloud \
                         binary), or set probe to off"
                    .into(),
            })
        }
        (_, Some(program)) => program,
    };
    run_probe(config, &program, &ProbeOptions::default())
}

/// Probes `config`'s model in a child process now, whatever
/// [`LocalConfig::probe`] says (it is `edgecloud model check`). The
/// program is resolved as for a lane start; none is
/// [`LocalError::ProbeUnavailable`].
pub fn probe(config: &LocalConfig, options: &ProbeOptions) -> Result<ProbeReport, LocalError> {
    let program = probe_program(config).ok_or_else(|| LocalError::ProbeUnavailable {
        detail: "no probe program: set LocalConfig::probe_program".into(),
    })?;
    run_probe(config, &program, options)
}

/// The program to re-run: the configured one, else this executable when
/// it is `edgecloud`.
fn probe_program(config: &LocalConfig) -> Option<PathBuf> {
    if let Some(p) = &config.probe_program {
        return Some(p.clone());
    }
    let exe = std::env::current_exe().ok()?;
    (exe.file_stem()? == "edgecloud").then_some(exe)
}

fn run_probe(
    config: &LocalConfig,
    program: &Path,
    options: &ProbeOptions,
) -> Result<ProbeReport, LocalError> {
    let started = Instant::now();
    let key = (!options.no_cache && config.probe_cache)
        .then(|| cache_key(config, program, options))
        .flatten();
    let cache_file = key
        .as_ref()
        .and_then(|k| cache_dir(config).map(|d| d.join(format!("{:016x}", hash_of(k)))));
    if let (Some(key), Some(file)) = (&key, &cache_file) {
        if std::fs::read_to_string(file).is_ok_and(|stored| stored == *key) {
            tracing::debug!(model = %config.model.display(), "probe verdict from cache");
            return Ok(ProbeReport {
                status: "cached",
                ms: ms_since(started),
                child_error: None,
            });
        }
    }

    let mut child_config = config.clone();
    child_config.probe = ProbeMode::Off;
    let spec = serde_json::to_string(&Spec {
        config: child_config,
        skip_validation: options.skip_validation,
    })
    .expect("a LocalConfig serialises to JSON");
    let mut command = Command::new(program);
    command
        .arg(PROBE_SUBCOMMAND)
        .arg(spec)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // ggml prints a backtrace on abort by attaching gdb when it can: slow,
    // and it would push the assert text out of the log tail.
    if std::env::var_os("GGML_NO_BACKTRACE").is_none() {
        command.env("GGML_NO_BACKTRACE", "1");
    }
    let mut child = command.spawn().map_err(|e| LocalError::ProbeUnavailable {
        detail: format!("could not run the probe program {}: {e}", program.display()),
    })?;
    let stdout = child.stdout.take().expect("stdout was piped");
    let stderr = child.stderr.take().expect("stderr was piped");
    let (out_tx, out_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("edgecloud-probe-out".into())
        .spawn(move || {
            let mut stage = String::from("starting");
            let mut verdict = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(s) = line.strip_prefix("stage ") {
                    stage = s.to_owned();
                } else if let Ok(v) = serde_json::from_str::<ChildVerdict>(&line) {
                    verdict = Some(v);
                }
            }
            let _ = out_tx.send((stage, verdict));
        })
        .map_err(|e| LocalError::Spawn {
            detail: e.to_string(),
        })?;
    let (err_tx, err_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("edgecloud-probe-err".into())
        .spawn(move || {
            let _ = err_tx.send(tail_lines(stderr, LOG_TAIL));
        })
        .map_err(|e| LocalError::Spawn {
            detail: e.to_string(),
        })?;

    let bound = Duration::from_millis(config.probe_timeout_ms.max(1));
    let path = config.model.clone();
    // stdout closes when the child exits (or dies): that is the wait.
    let (stage, verdict, timed_out) = match out_rx.recv_timeout(bound) {
        Ok((stage, verdict)) => (stage, verdict, false),
        Err(_) => {
            // Our own child, by its handle (its PID).
            let _ = child.kill();
            let (stage, _) = out_rx
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| ("unknown".into(), None));
            (stage, None, true)
        }
    };
    let status = child.wait().map_err(|e| LocalError::ProbeUnavailable {
        detail: format!("could not wait for the probe process: {e}"),
    })?;
    let log = err_rx
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_default();
    if timed_out {
        return Err(LocalError::ProbeTimedOut {
            path,
            after_ms: bound.as_millis() as u64,
            stage,
            log,
        });
    }
    if let Some(signal) = signal_of(&status) {
        return Err(LocalError::ProbeCrashed {
            path,
            signal,
            signal_name: signal_name(signal).to_owned(),
            stage,
            log,
        });
    }
    match verdict {
        Some(v) if v.ok && status.success() => {
            if let (Some(key), Some(file)) = (&key, &cache_file) {
                store(file, key);
            }
            tracing::debug!(model = %config.model.display(), prompt_tokens = ?v.prompt_tokens, "probe passed");
            Ok(ProbeReport {
                status: "child",
                ms: ms_since(started),
                child_error: None,
            })
        }
        Some(v) if !v.ok => Ok(ProbeReport {
            status: "child",
            ms: ms_since(started),
            child_error: Some(format!(
                "{}: {}",
                v.kind.as_deref().unwrap_or("error"),
                v.message.as_deref().unwrap_or("")
            )),
        }),
        _ => Err(LocalError::ProbeFailed {
            path,
            code: status.code(),
            stage,
            log,
        }),
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The last `n` lines of a stream, each cut to 512 bytes: bounded memory
/// whatever the child prints.
fn tail_lines(stream: impl Read, n: usize) -> Vec<String> {
    let mut lines = VecDeque::with_capacity(n);
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        // read_until on a bounded Take: a line without a newline cannot
        // grow the buffer without limit.
        match (&mut reader).take(64 * 1024).read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&buf);
                let text = text.trim_end();
                if text.is_empty() {
                    continue;
                }
                let text = short_source_paths(text);
                let cut = text.char_indices().nth(512).map_or(text.len(), |(i, _)| i);
                if lines.len() == n {
                    lines.pop_front();
                }
                lines.push_back(text[..cut].to_owned());
            }
        }
    }
    lines.into()
}

/// ggml's assert lines start with the absolute path of the source file in
/// the cargo registry; from `llama.cpp/` on is what a reader needs.
fn short_source_paths(line: &str) -> &str {
    match line.find("/llama.cpp/") {
        Some(i) if !line[..i].contains(' ') => &line[i + 1..],
        _ => line,
    }
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn signal_of(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// The conventional name of a POSIX signal (Linux numbering).
fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        31 => "SIGSYS",
        _ => "signal",
    }
}

/// The whole cache key as text; `None` when a part cannot be read (then
/// nothing is cached).
fn cache_key(config: &LocalConfig, program: &Path, options: &ProbeOptions) -> Option<String> {
    let stamp = |p: &Path| -> Option<String> {
        let meta = std::fs::metadata(p).ok()?;
        let mtime = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        Some(format!("{} {}", meta.len(), mtime.as_nanos()))
    };
    let model = std::fs::canonicalize(&config.model).ok()?;
    Some(format!(
        "edgecloud probe verdict v1\nmodel {}\nmodel_stamp {}\ncontext {:?}\nbatch {}\n\
         gpu_layers {}\nchat_template {:?}\nskip_validation {}\nbuild {}\nprogram {}\n\
         program_stamp {}\n",
        model.display(),
        stamp(&model)?,
        config.context_size,
        config.batch_size,
        config.gpu_layers,
        config.chat_template,
        options.skip_validation,
        env!("CARGO_PKG_VERSION"),
        program.display(),
        stamp(program)?,
    ))
}

fn hash_of(key: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

fn cache_dir(config: &LocalConfig) -> Option<PathBuf> {
    if let Some(dir) = &config.probe_cache_dir {
        return Some(dir.clone());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("edgecloud").join("probe"))
}

/// Writes the verdict file atomically; a cache that cannot be written
/// only costs the next start a probe.
fn store(file: &Path, key: &str) {
    let Some(dir) = file.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, key).is_ok() && std::fs::rename(&tmp, file).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The child side: runs the probe described by `spec` (the JSON argument
/// the parent passed) and returns the process exit code: 0 passed, 2 a
/// clean failure (reported as one JSON line on stdout), 64 a bad spec. A
/// crash inside llama.cpp never returns: the parent sees the signal.
pub fn run_child(spec: &str) -> i32 {
    use std::io::Write as _;
    let spec: Spec = match serde_json::from_str(spec) {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("edgecloud probe: bad spec: {e}");
            return 64;
        }
    };
    super::ffi::mirror_log_to_stderr();
    let say = |line: &str| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let fail = |err: &LocalError| {
        let v = ChildVerdict {
            ok: false,
            kind: Some(err.kind().to_owned()),
            message: Some(edgecloud_core::error_chain(err)),
            prompt_tokens: None,
        };
        say(&serde_json::to_string(&v).expect("a verdict serialises"));
        2
    };
    let mut config = spec.config;
    config.probe = ProbeMode::Off;
    say("stage load (validate, load model, create context, chat template)");
    let lane = match LocalLane::start_with(
        config,
        1,
        if spec.skip_validation {
            Validation::Skipped
        } else {
            Validation::OnWorker
        },
        ProbeReport::not_run(),
    ) {
        Ok(mut lanes) => lanes.remove(0),
        Err(err) => return fail(&err),
    };
    say("stage generate (tokenize, decode, sample one token)");
    let sampling = Sampling {
        max_tokens: 1,
        ..Sampling::default()
    };
    let job = LaneJob::new(
        vec![
            ChatMessage::system("You are a probe."),
            ChatMessage::user("Say hello."),
        ],
        sampling,
        Instant::now() + Duration::from_secs(3600),
    );
    let completion = match lane.generate(job) {
        Ok(c) => c,
        Err(err) => return fail(&err),
    };
    match std::env::var(TEST_CRASH_ENV).as_deref() {
        Ok("abort") => {
            eprintln!("edgecloud probe: {TEST_CRASH_ENV}=abort: aborting (test hook)");
            std::process::abort();
        }
        Ok("hang") => {
            eprintln!("edgecloud probe: {TEST_CRASH_ENV}=hang: waiting forever (test hook)");
            loop {
                std::thread::park();
            }
        }
        _ => {}
    }
    let v = ChildVerdict {
        ok: true,
        prompt_tokens: Some(completion.prompt_tokens),
        ..ChildVerdict::default()
    };
    say(&serde_json::to_string(&v).expect("a verdict serialises"));
    lane.shutdown(Duration::from_secs(5));
    0
}

/// For applications that embed the library: call first thing in `main`.
/// When this process was started as a probe (`argv[1]` is
/// [`PROBE_SUBCOMMAND`]), it runs the probe and exits; otherwise it
/// returns at once. Then set [`LocalConfig::probe_program`] to
/// `std::env::current_exe()`.
pub fn run_child_if_requested() {
    let args: Vec<OsString> = std::env::args_os().take(3).collect();
    if args.get(1).is_some_and(|a| a == PROBE_SUBCOMMAND) {
        let spec = args
            .get(2)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        std::process::exit(run_child(&spec));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines_bounded() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let tail = tail_lines(text.as_bytes(), 3);
        assert_eq!(tail, ["line 97", "line 98", "line 99"]);
        let long = "x".repeat(100_000);
        let tail = tail_lines(long.as_bytes(), 3);
        assert!(tail.iter().all(|l| l.len() <= 512), "{:?}", tail.len());
        let assert_line = "/root/.cargo/registry/src/x/llama-cpp-sys-2-0.1.161/llama.cpp/ggml/src/ggml-cpu/ops.cpp:4132: GGML_ASSERT(eps >= 0.0f) failed\n";
        assert_eq!(
            tail_lines(assert_line.as_bytes(), 3),
            ["llama.cpp/ggml/src/ggml-cpu/ops.cpp:4132: GGML_ASSERT(eps >= 0.0f) failed"]
        );
    }

    #[test]
    fn signal_names_and_modes() {
        assert_eq!(signal_name(6), "SIGABRT");
        assert_eq!(signal_name(11), "SIGSEGV");
        assert_eq!("child".parse::<ProbeMode>(), Ok(ProbeMode::Child));
        assert_eq!("off".parse::<ProbeMode>(), Ok(ProbeMode::Off));
        assert!("on".parse::<ProbeMode>().is_err());
    }

    #[test]
    fn cache_key_changes_with_settings() {
        let dir = std::env::temp_dir().join(format!("edgecloud-probe-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let model = dir.join("m.gguf");
        std::fs::write(&model, b"x").unwrap();
        let config = LocalConfig::new(&model);
        let program = std::env::current_exe().unwrap();
        let o = ProbeOptions::default();
        let a = cache_key(&config, &program, &o).unwrap();
        assert_eq!(a, cache_key(&config, &program, &o).unwrap());
        let mut other = config.clone();
        other.batch_size = 64;
        assert_ne!(a, cache_key(&other, &program, &o).unwrap());
        std::fs::write(&model, b"xy").unwrap();
        assert_ne!(a, cache_key(&config, &program, &o).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
