//! The prompt flags `local`, `cloud` and `run` share: the prompt as the
//! last argument (`edgecloud local -m MODEL "prompt"`, as `ollama run` and
//! `llm` take it) or `--prompt TEXT`, `-` for standard input either way (as
//! `cat`, `curl -d @-` and llama.cpp's `-f /dev/stdin` users expect),
//! `--prompt-file FILE`, plus the optional `--system`. `run` also takes
//! the model before the prompt (`edgecloud run MODEL "prompt"`, as
//! `ollama run` does: [`PromptArgs::take_model`]). Reading only; the
//! request is built elsewhere.

use anyhow::Context as _;
use std::io::Read as _;
use std::path::PathBuf;

/// Where the user message comes from, and an optional system message.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct PromptArgs {
    /// The user message; `-` reads it from standard input.
    #[arg(
        short,
        long,
        value_name = "TEXT",
        required_unless_present_any = ["prompt_file", "text"],
        conflicts_with_all = ["prompt_file", "text"]
    )]
    prompt: Option<String>,
    /// The user message as the last argument (the same as `--prompt`);
    /// `edgecloud run` also takes the model before it: `run MODEL PROMPT`.
    #[arg(value_name = "PROMPT", num_args = 1..=2, conflicts_with = "prompt_file")]
    text: Vec<String>,
    /// Read the user message from this file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    prompt_file: Option<PathBuf>,
    /// An optional system message, sent first.
    #[arg(long, value_name = "TEXT")]
    pub(crate) system: Option<String>,
}

impl PromptArgs {
    /// The user message, read from standard input or the file when asked.
    /// The text is kept as given except one trailing newline (what `echo`
    /// and editors add), so `echo hi | edgecloud run --prompt -` sends `hi`.
    pub(crate) fn user_message(&self) -> anyhow::Result<String> {
        if self.text.len() > 1 {
            return Err(crate::exit::usage(format!(
                "two arguments ({:?} and {:?}): the prompt is one argument (quote it), \
                 and the model goes in --model",
                self.text[0], self.text[1]
            )));
        }
        let text = match (
            self.prompt.as_ref().or(self.text.first()),
            &self.prompt_file,
        ) {
            (Some(p), _) if p == "-" => read_stdin()?,
            (Some(p), _) => return Ok(p.clone()),
            (None, Some(f)) if f.as_os_str() == "-" => read_stdin()?,
            (None, Some(f)) => std::fs::read_to_string(f)
                .with_context(|| format!("reading the prompt from {}", f.display()))?,
            (None, None) => unreachable!("clap requires a prompt, --prompt or --prompt-file"),
        };
        let text = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(&text)
            .to_string();
        if text.trim().is_empty() {
            return Err(crate::exit::usage("the prompt is empty"));
        }
        Ok(text)
    }
}

impl PromptArgs {
    /// `edgecloud run MODEL PROMPT`: the first of two arguments, taken
    /// out as the model (`None` with one or none).
    pub(crate) fn take_model(&mut self) -> Option<String> {
        (self.text.len() == 2).then(|| self.text.remove(0))
    }
}

fn read_stdin() -> anyhow::Result<String> {
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading the prompt from standard input (it must be UTF-8)")?;
    Ok(text)
}
