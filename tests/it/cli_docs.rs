//! The docs match the binary: every `edgecloud` command line in README.md
//! and docs/ uses flags its subcommand has (read from the real binary's
//! `--help`, every subcommand walked), every `EDGECLOUD_*` variable the
//! docs name is one the CLI or the code reads, and every variable the CLI
//! reads is named in the docs (the env tables are complete).

use crate::support::cli::bin;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the binary says of itself: each subcommand path (`""`, `"serve"`,
/// `"model fetch"`) with its flags, and every variable any flag reads.
struct Cli {
    flags: BTreeMap<String, BTreeSet<String>>,
    env: BTreeSet<String>,
}

fn help(path: &[&str]) -> String {
    let out = Command::new(bin())
        .args(path)
        .arg("--help")
        .env("COLUMNS", "400")
        .output()
        .expect("the edgecloud binary runs");
    assert!(out.status.success(), "{path:?} --help failed");
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The words of a help text's section (`Commands:`, `Options:`): the
/// first word of each indented line, up to the next section.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|l| l.trim_end() != title);
    lines.next();
    lines
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

fn flags_in(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .filter(|w| {
            w.len() > 2
                && w.starts_with("--")
                && w.as_bytes()[2].is_ascii_lowercase()
                && !w.ends_with('-')
        })
        .map(str::to_string)
}

fn env_in(text: &str) -> impl Iterator<Item = String> + '_ {
    text.match_indices("EDGECLOUD_").map(move |(at, _)| {
        text[at..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect::<String>()
            .trim_end_matches('_')
            .to_string()
    })
}

impl Cli {
    fn read() -> Self {
        let mut cli = Cli {
            flags: BTreeMap::new(),
            env: BTreeSet::new(),
        };
        cli.walk(&mut Vec::new());
        cli
    }

    fn walk(&mut self, path: &mut Vec<String>) {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args);
        let options = text
            .split_once("\nOptions:")
            .map(|(_, rest)| rest)
            .unwrap_or("");
        // Flags: the option lines' long names (`-m, --model <MODEL>`).
        let flags: BTreeSet<String> = options
            .lines()
            .filter(|l| l.trim_start().starts_with('-'))
            .flat_map(|l| flags_in(l.split("  ").find(|s| !s.is_empty()).unwrap_or("")))
            .collect();
        self.env.extend(
            options
                .match_indices("[env: ")
                .flat_map(|(at, _)| env_in(&options[at..at + 80.min(options.len() - at)]).take(1)),
        );
        self.flags.insert(args.join(" "), flags);
        for sub in section(&text, "Commands:") {
            if sub != "help" {
                path.push(sub.to_string());
                self.walk(path);
                path.pop();
            }
        }
    }

    /// The longest known subcommand path at the start of `words`.
    fn subcommand(&self, words: &[&str]) -> String {
        (0..=words.len().min(2))
            .rev()
            .map(|n| words[..n].join(" "))
            .find(|p| self.flags.contains_key(p))
            .unwrap_or_default()
    }

    fn all_flags(&self) -> BTreeSet<&str> {
        self.flags.values().flatten().map(String::as_str).collect()
    }
}

fn docs() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ reads")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    in_docs.sort();
    files.extend(in_docs);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a doc reads");
            (p, text)
        })
        .collect()
}

/// Each piece of code in a Markdown text: fenced blocks line by line, and
/// inline code spans.
fn code_pieces(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            pieces.push(line.to_string());
        } else {
            pieces.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    pieces
}

/// Every command line in the docs that runs `edgecloud`, with the flags
/// it gives, checked against its subcommand's `--help`.
#[test]
fn every_flag_of_an_edgecloud_command_line_in_the_docs_is_one_the_binary_has() {
    let cli = Cli::read();
    assert!(cli.flags.contains_key("serve") && cli.flags.contains_key("model fetch"));
    let mut wrong = Vec::new();
    for (path, text) in docs() {
        for piece in code_pieces(&text) {
            // One command at a time: `a && b`, `a | b`, `a; b`.
            for cmd in piece.split(['|', ';', '&']) {
                let words: Vec<&str> = cmd.split_whitespace().collect();
                let Some(at) = words
                    .iter()
                    .position(|w| *w == "edgecloud" || w.ends_with("/edgecloud"))
                else {
                    continue;
                };
                let rest = &words[at + 1..];
                let sub = cli.subcommand(rest);
                let known = &cli.flags[&sub];
                for flag in rest
                    .iter()
                    .flat_map(|w| flags_in(w.split('=').next().unwrap_or(w)))
                {
                    if !known.contains(&flag) && flag != "--help" && flag != "--version" {
                        wrong.push(format!(
                            "{}: `edgecloud {sub}` has no {flag} (in `{}`)",
                            path.display(),
                            cmd.trim()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "flags the binary does not have:\n{}",
        wrong.join("\n")
    );
}

/// The text of each script under scripts/, by name.
fn scripts() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    std::fs::read_dir(dir)
        .expect("scripts/ reads")
        .map(|e| e.expect("an entry").path())
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            Some((p.file_name()?.to_str()?.to_string(), text))
        })
        .collect()
}

/// Every `scripts/NAME` command line in the docs uses flags the script
/// takes (named in its text).
#[test]
fn every_flag_of_a_script_command_line_in_the_docs_is_one_the_script_takes() {
    let scripts = scripts();
    let mut wrong = Vec::new();
    for (path, text) in docs() {
        for piece in code_pieces(&text) {
            for cmd in piece.split(['|', ';', '&']) {
                let words: Vec<&str> = cmd.split_whitespace().collect();
                let Some((at, name)) = words.iter().enumerate().find_map(|(i, w)| {
                    Some((i, w.strip_prefix("scripts/").filter(|n| !n.is_empty())?))
                }) else {
                    continue;
                };
                let Some(script) = scripts.get(name) else {
                    wrong.push(format!("{}: no script {name}", path.display()));
                    continue;
                };
                for flag in words[at + 1..]
                    .iter()
                    .flat_map(|w| flags_in(w.split('=').next().unwrap_or(w)))
                {
                    if !flags_in(script).any(|f| f == flag) {
                        wrong.push(format!(
                            "{}: scripts/{name} takes no {flag} (in `{}`)",
                            path.display(),
                            cmd.trim()
                        ));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A flag the docs name on its own (in a table or a sentence: `` `--parallel N` ``)
/// is one some subcommand or script has, unless it belongs to another tool
/// the docs compare with (listed here by tool).
#[test]
fn every_flag_the_docs_name_is_one_the_binary_has_or_another_tools() {
    const OTHER_TOOLS: &[&str] = &[
        // cargo, rustup, pip, maturin, cc
        "--release",
        "--locked",
        "--features",
        "--no-default-features",
        "--all-targets",
        "--lib",
        "--bin",
        "--example",
        "--test",
        "--bench",
        "--crate-type",
        "--target",
        "--all",
        "--check",
        "--no-deps",
        "--quiet",
        "--force-reinstall",
        "--out",
        "--manifest-path",
        "--package",
        "--path",
        // llama.cpp's tools (llama-server, llama-bench, llama-cli)
        "--model-draft",
        "--spec-type",
        "--draft-max",
        "--draft-min",
        "--embeddings",
        "--pooling",
        "--ctx-size",
        "--threads-batch",
        "--n-gpu-layers",
        "--jinja",
        "--reasoning-format",
        "--prefill-assistant",
        "--allow-requantize",
        "--repack",
        "--no-repack",
        "--parallel",
        "--cont-batching",
        "--port",
        "--host",
        "--flash-attn",
        "--batch-size",
        "--ubatch-size",
        "--n-predict",
        "--temp",
        "--seed",
        "--api-key",
        "--alias",
        "--no-warmup",
        "--output",
        "--repetitions",
        "--n-prompt",
        "--n-gen",
        "--prio",
        "--threads",
        "--model",
        // vulkaninfo
        "--summary",
    ];
    let cli = Cli::read();
    let mut ours = cli.all_flags();
    let scripts = scripts();
    let script_flags: BTreeSet<String> = scripts.values().flat_map(|t| flags_in(t)).collect();
    ours.extend(script_flags.iter().map(String::as_str));
    let mut wrong = BTreeSet::new();
    for (path, text) in docs() {
        for piece in code_pieces(&text) {
            for flag in flags_in(&piece) {
                if !ours.contains(flag.as_str()) && !OTHER_TOOLS.contains(&flag.as_str()) {
                    wrong.insert(format!("{}: {flag}", path.display()));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "flags no subcommand has (and no other tool listed):\n{}",
        wrong.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// Every `EDGECLOUD_*` variable the docs name is read by the CLI or the
/// code (scripts and tests included); every one the CLI reads is named
/// in the docs.
#[test]
fn the_docs_name_every_variable_the_cli_reads_and_no_other() {
    let cli = Cli::read();
    assert!(cli.env.contains("EDGECLOUD_MODEL"), "{:?}", cli.env);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut code = String::new();
    let mut stack: Vec<PathBuf> = [
        "src", "crates", "scripts", "tests", "benches", "examples", "python", "build.rs",
    ]
    .iter()
    .map(|d| root.join(d))
    .collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            stack.extend(
                std::fs::read_dir(&p)
                    .expect("reads")
                    .map(|e| e.expect("entry").path()),
            );
        } else if p.extension().is_none_or(|e| e != "gguf") {
            if let Ok(t) = std::fs::read_to_string(&p) {
                // Not this file: it names variables only to look for them.
                if !p.ends_with("cli_docs.rs") {
                    code.push_str(&t);
                }
            }
        }
    }
    let read_by_code: BTreeSet<String> = env_in(&code).collect();
    let mut documented = BTreeSet::new();
    let mut wrong = Vec::new();
    for (path, text) in docs() {
        for var in env_in(&text) {
            if !cli.env.contains(&var) && !read_by_code.contains(&var) {
                wrong.push(format!("{}: {var} is read by nothing", path.display()));
            }
            documented.insert(var);
        }
    }
    for var in &cli.env {
        if !documented.contains(var) {
            wrong.push(format!("{var} (a flag's variable) is named in no doc"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
