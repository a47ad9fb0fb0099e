//! `-m REFERENCE` for every command: turns a model reference (`ollama:`,
//! `hf:`, or a path) into the file the lane loads, through the library's
//! `modelref` module, before any lane starts. Owns what only a command
//! does around it: the one stderr line that says where the file was found,
//! the download's progress bar, Ctrl-C during a download (exit 130, the
//! partial file kept for the next try), and the exit status of a failure
//! (2 for a malformed reference, 1 for the rest).
//!
//! A plain path costs nothing here: it is not even looked at.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use edgecloud::local::LocalConfig;
use edgecloud::modelref::{
    self, ModelRef, ModelRefError, OllamaTemplate, Progress, ResolveOptions, Resolved,
};
use edgecloud::CancellationToken;

use crate::exit;

/// Whether a reference that is not cached may be downloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Download {
    /// Yes (every command that runs a model).
    Allowed,
    /// No: `config show` says what would be used and fetches nothing.
    Never,
}

/// Resolves `model`; `None` for a plain path (use it as it is).
pub(crate) fn resolve(model: &Path, download: Download) -> anyhow::Result<Option<Resolved>> {
    let reference = ModelRef::from_path(model).map_err(|e| exit::usage_from(&e))?;
    if !reference.is_reference() {
        return Ok(None);
    }
    let mut options = ResolveOptions::from_env();
    // First without the network: a cached reference needs no Ctrl-C
    // handler, no thread, no HTTP client.
    options.allow_download = false;
    let found = match modelref::resolve(&reference, &options) {
        Ok(found) => found,
        Err(ModelRefError::NotCached { .. })
            if download == Download::Allowed && !options.hub.offline =>
        {
            download_now(&reference, options)?
        }
        Err(e) => return Err(failure(e)),
    };
    if !crate::quiet() {
        eprintln!(
            "edgecloud: {reference} is {} ({})",
            found.path.display(),
            found.origin
        );
        if found.parts.len() > 1 {
            eprintln!(
                "edgecloud: a split model in {} files; llama.cpp loads the others from the first",
                found.parts.len()
            );
        }
    }
    Ok(Some(found))
}

fn failure(e: ModelRefError) -> anyhow::Error {
    match e {
        e if e.is_usage() => exit::usage_from(&e),
        ModelRefError::Cancelled => exit::interrupted(ModelRefError::Cancelled.to_string()),
        e => anyhow::Error::new(e),
    }
}

fn download_now(reference: &ModelRef, mut options: ResolveOptions) -> anyhow::Result<Resolved> {
    options.allow_download = true;
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    crate::interrupt::on_ctrl_c(move || on_ctrl_c.cancel());
    options.cancel = cancel;
    if !crate::quiet() {
        eprintln!(
            "edgecloud: {reference} is not cached; downloading it from {} into {}",
            options.hub.endpoint,
            options.locations.hf_cache.display()
        );
        let bar = Mutex::new(Bar::new());
        options.progress = Some(Box::new(move |p: &Progress<'_>| {
            if let Ok(mut bar) = bar.lock() {
                bar.draw(p);
            }
        }));
    }
    modelref::resolve(reference, &options).map_err(failure)
}

/// Resolves the local lane's model in place: the path becomes the file,
/// and an Ollama manifest's chat template is used when the GGUF has none
/// and the configuration names none. With [`Download::Never`], a reference
/// that is not cached stays as it is (said on stderr).
pub(crate) fn apply(local: &mut LocalConfig, download: Download) -> anyhow::Result<()> {
    let found = match resolve(&local.model, download) {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(()),
        Err(e)
            if download == Download::Never
                && e.downcast_ref::<ModelRefError>()
                    .is_some_and(|e| e.kind() == "not_cached") =>
        {
            if !crate::quiet() {
                eprintln!("edgecloud: {e:#}; shown as given");
            }
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let template = found.apply_to(local);
    if let (Some(template), false) = (template, crate::quiet()) {
        let used = match template {
            OllamaTemplate::Used(_) => "used: the GGUF has none",
            OllamaTemplate::GgufHasOne(_) => "not used: the GGUF has its own",
            OllamaTemplate::Configured(_) => "not used: the configuration names one",
            OllamaTemplate::Unknown => "not used: llama.cpp has no built-in like it",
        };
        eprintln!(
            "edgecloud: the Ollama manifest has a chat template ({}; {used})",
            template
                .like()
                .map_or("not one llama.cpp knows".to_string(), |n| format!(
                    "like llama.cpp's {n}"
                )),
        );
    }
    Ok(())
}

/// The file a `-m` value names: the resolved file, or the path as given.
pub(crate) fn resolve_path(model: &Path) -> anyhow::Result<PathBuf> {
    Ok(resolve(model, Download::Allowed)?.map_or_else(|| model.to_path_buf(), |r| r.path))
}

/// The download's progress on stderr: a redrawn bar on a terminal, a line
/// per quarter otherwise (logs stay short).
struct Bar {
    tty: bool,
    started: Instant,
    last: Option<Instant>,
    quarter: u64,
    file: String,
}

impl Bar {
    fn new() -> Self {
        Bar {
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            last: None,
            quarter: u64::MAX,
            file: String::new(),
        }
    }

    fn draw(&mut self, p: &Progress<'_>) {
        if self.file != p.file {
            self.file = p.file.to_string();
            self.started = Instant::now();
            self.quarter = u64::MAX;
            self.last = None;
        }
        let done = p.done >= p.total;
        let fraction = if p.total == 0 {
            1.0
        } else {
            p.done as f64 / p.total as f64
        };
        let secs = self.started.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            (p.done - p.resumed_from) as f64 / secs / 1e6
        } else {
            0.0
        };
        let part = if p.parts > 1 {
            format!(" (part {}/{})", p.part, p.parts)
        } else {
            String::new()
        };
        let resumed = if p.resumed_from > 0 {
            format!(", resumed at {:.1} MB", p.resumed_from as f64 / 1e6)
        } else {
            String::new()
        };
        let mut err = std::io::stderr().lock();
        if self.tty {
            let now = Instant::now();
            if !done
                && self
                    .last
                    .is_some_and(|t| now - t < Duration::from_millis(100))
            {
                return;
            }
            self.last = Some(now);
            let width = 30;
            let filled = ((fraction * width as f64) as usize).min(width);
            let _ = write!(
                err,
                "\r[{}{}] {:>3.0}% {:>8.1}/{:.1} MB {:>7.1} MB/s {}{part}{resumed}\x1b[K",
                "#".repeat(filled),
                " ".repeat(width - filled),
                fraction * 100.0,
                p.done as f64 / 1e6,
                p.total as f64 / 1e6,
                rate,
                p.file,
            );
            if done {
                let _ = writeln!(err);
            }
        } else {
            let quarter = (fraction * 4.0) as u64;
            if quarter == self.quarter {
                return;
            }
            self.quarter = quarter;
            let _ = writeln!(
                err,
                "edgecloud: {}{part}: {:.0}% of {:.1} MB, {rate:.1} MB/s{resumed}",
                p.file,
                fraction * 100.0,
                p.total as f64 / 1e6,
            );
        }
    }
}
