//! A reasoning model's thinking, kept apart from its answer.
//!
//! Reasoning models (DeepSeek-R1 and its distills, Qwen3, QwQ, SmolLM3,
//! Phi-4-reasoning) write their thinking between `<think>` and `</think>`
//! before the answer. Their chat templates either leave the opening tag to
//! the model or write it themselves at the end of the prompt (then the
//! output starts inside the thinking and only the closing tag appears).
//! Every API serve speaks reports the thinking apart from the answer
//! (`reasoning_content`, reasoning items, `thinking` blocks, Ollama's
//! `thinking`), and scoring, validity checks and the cascade judge the
//! answer alone, so the split happens once, in the lanes, with this
//! module's [`ReasoningSplitter`]; the harness carries the two kinds of
//! text as [`Piece`]s.
//!
//! The rules, the same whole or streamed in pieces of any size:
//! - the output thinks when it starts (after whitespace) with `<think>`,
//!   or when the prompt ended inside an open `<think>`
//!   ([`prompt_opens_thinking`]); otherwise everything is answer, and a
//!   `<think>` later in an answer is just text;
//! - the thinking runs to the first `</think>`; whitespace right after
//!   either tag is dropped; the tags themselves are in neither part;
//! - an output cut short inside its thinking has thinking and no answer.
//!
//! Other conventions (gpt-oss's channels, Gemma's) are not split: their
//! text stays in the answer, as it was before.
//!
//! This module is plain text handling: no lane, no wire format.

/// The tag that opens a model's thinking.
pub const THINK_OPEN: &str = "<think>";
/// The tag that closes it.
pub const THINK_CLOSE: &str = "</think>";

/// Whether a rendered prompt ends inside an open thinking block (the
/// template wrote `<think>` for the model, as Qwen3's and DeepSeek-R1's
/// do), so the model's output starts as thinking.
pub fn prompt_opens_thinking(prompt: &str) -> bool {
    let tail = prompt.trim_end();
    tail.ends_with(THINK_OPEN)
        && tail
            .rfind(THINK_CLOSE)
            .is_none_or(|close| close < tail.len() - THINK_OPEN.len())
}

/// A rendered prompt (ending where the assistant's answer begins) with
/// an unfinished answer `prefill` appended, so the model goes on from it.
/// A prefill that begins with a thinking block continues a template that
/// already opened `<think>` without opening it twice; an answer-only
/// prefill after such a template closes an empty thinking block first (as
/// Qwen3's template does when thinking is off).
pub fn continue_prompt(prompt: &str, prefill: &str) -> String {
    if !prompt_opens_thinking(prompt) {
        return format!("{prompt}{prefill}");
    }
    match prefill.strip_prefix(THINK_OPEN) {
        Some(thinking) => format!("{prompt}{}", thinking.trim_start()),
        None => format!("{prompt}\n{THINK_CLOSE}\n\n{prefill}"),
    }
}

/// Where an output's thinking stands after a prompt that continues an
/// unfinished answer ([`continue_prompt`]): still thinking when the
/// prompt ends inside an open `<think>`, else all answer (a `<think>` the
/// model writes now is text of the answer).
pub fn continuing_start(prompt: &str) -> ThinkingStart {
    let open = prompt.rfind(THINK_OPEN);
    if open.is_some() && open > prompt.rfind(THINK_CLOSE) {
        ThinkingStart::Open
    } else {
        ThinkingStart::Never
    }
}

/// Where an output's thinking stands before its first token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThinkingStart {
    /// The prompt opened `<think>`: the output starts as thinking.
    Open,
    /// The output thinks if it starts with `<think>`.
    #[default]
    Maybe,
    /// Never split: the output is all answer (a raw text completion, which
    /// is returned as the model wrote it).
    Never,
}

impl ThinkingStart {
    /// The start for a rendered prompt: `Open` when it ends inside an open
    /// `<think>` ([`prompt_opens_thinking`]), else `Maybe`.
    pub fn of_prompt(prompt: &str) -> Self {
        if prompt_opens_thinking(prompt) {
            ThinkingStart::Open
        } else {
            ThinkingStart::Maybe
        }
    }
}

/// One piece of a streamed answer: answer text, or thinking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text of the answer.
    Answer(String),
    /// Text of the model's thinking.
    Reasoning(String),
}

impl Piece {
    /// The piece's text, whichever kind.
    pub fn text(&self) -> &str {
        match self {
            Piece::Answer(t) | Piece::Reasoning(t) => t,
        }
    }

    /// Whether it is answer text.
    pub fn is_answer(&self) -> bool {
        matches!(self, Piece::Answer(_))
    }
}

/// A part of pushed text, as [`ReasoningSplitter::push`] hands it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    /// Answer text.
    Answer(&'a str),
    /// Thinking text.
    Reasoning(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace or a beginning of `<think>` seen yet.
    Start,
    /// Inside the thinking; `began` once its first non-blank character
    /// went out.
    Thinking { began: bool },
    /// Right after `</think>`: whitespace is dropped.
    AfterClose,
    /// In the answer: everything passes.
    Answer,
}

/// Splits text pushed in pieces of any size into thinking and answer,
/// holding back only what could still be a tag (a few bytes).
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    state: State,
    held: String,
    thought: bool,
    answered: bool,
}

impl ReasoningSplitter {
    /// A splitter for an output that starts as `start` says.
    pub fn new(start: ThinkingStart) -> Self {
        Self {
            state: match start {
                ThinkingStart::Open => State::Thinking { began: false },
                ThinkingStart::Maybe => State::Start,
                ThinkingStart::Never => State::Answer,
            },
            held: String::new(),
            thought: start == ThinkingStart::Open,
            answered: false,
        }
    }

    /// Whether the output has thinking (so far).
    pub fn thought(&self) -> bool {
        self.thought
    }

    /// Whether any answer text has gone out yet.
    pub fn answered(&self) -> bool {
        self.answered
    }

    /// Whether the splitter is inside the thinking now.
    pub fn in_thinking(&self) -> bool {
        matches!(self.state, State::Thinking { .. })
    }

    /// Pushes the next text; `out` gets each classified part, in order
    /// (empty parts are never handed out).
    pub fn push(&mut self, text: &str, out: &mut impl FnMut(Part<'_>)) {
        if self.held.is_empty() && self.state == State::Answer {
            self.answer(text, out);
            return;
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.push_str(text);
        let mut rest: &str = &buf;
        loop {
            match self.state {
                State::Start => {
                    let t = rest.trim_start();
                    if let Some(after) = t.strip_prefix(THINK_OPEN) {
                        self.state = State::Thinking { began: false };
                        self.thought = true;
                        rest = after;
                    } else if t.is_empty() || THINK_OPEN.starts_with(t) {
                        self.held = rest.to_string();
                        return;
                    } else {
                        self.state = State::Answer;
                        self.answer(rest, out);
                        return;
                    }
                }
                State::Thinking { began } => {
                    if !began {
                        let t = rest.trim_start();
                        // A template that opened the thinking and a model
                        // that opens it again: one opening.
                        let t = t.strip_prefix(THINK_OPEN).unwrap_or(t).trim_start();
                        if t.is_empty() || (t.len() < THINK_OPEN.len() && THINK_OPEN.starts_with(t))
                        {
                            self.held = t.to_string();
                            return;
                        }
                        rest = t;
                        self.state = State::Thinking { began: true };
                    }
                    if let Some(at) = rest.find(THINK_CLOSE) {
                        emit(out, Part::Reasoning(&rest[..at]));
                        rest = &rest[at + THINK_CLOSE.len()..];
                        self.state = State::AfterClose;
                        continue;
                    }
                    let keep = partial_tag_suffix(rest, THINK_CLOSE);
                    let cut = rest.len() - keep;
                    emit(out, Part::Reasoning(&rest[..cut]));
                    self.held = rest[cut..].to_string();
                    return;
                }
                State::AfterClose => {
                    let t = rest.trim_start();
                    if !t.is_empty() {
                        self.state = State::Answer;
                        self.answer(t, out);
                    }
                    return;
                }
                State::Answer => {
                    self.answer(rest, out);
                    return;
                }
            }
        }
    }

    /// Ends the text: what was held back goes out as what it was (a
    /// partial closing tag stays thinking; a partial opening tag or
    /// leading whitespace was answer).
    pub fn finish(&mut self, out: &mut impl FnMut(Part<'_>)) {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Start => self.answer(&held, out),
            State::Thinking { .. } => emit(out, Part::Reasoning(&held)),
            State::AfterClose | State::Answer => {}
        }
    }

    fn answer(&mut self, text: &str, out: &mut impl FnMut(Part<'_>)) {
        if !text.is_empty() {
            self.answered = true;
            out(Part::Answer(text));
        }
    }
}

fn emit(out: &mut impl FnMut(Part<'_>), part: Part<'_>) {
    let (Part::Answer(t) | Part::Reasoning(t)) = part;
    if !t.is_empty() {
        out(part);
    }
}

/// The length of the longest end of `text` that begins `tag` (a tag
/// split across pieces), never all of `tag`.
fn partial_tag_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&k| {
            text.is_char_boundary(text.len() - k) && tag.starts_with(&text[text.len() - k..])
        })
        .unwrap_or(0)
}

impl Default for ReasoningSplitter {
    /// A splitter for an output that may open its thinking itself.
    fn default() -> Self {
        Self::new(ThinkingStart::Maybe)
    }
}

/// A whole output split: its thinking (`None` when it has none, or an
/// empty one) and its answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    /// The thinking, tags and surrounding whitespace removed.
    pub reasoning: Option<String>,
    /// The answer.
    pub answer: String,
}

/// Splits a whole output (see the module's rules) that starts as `start`
/// says.
pub fn split(text: &str, start: ThinkingStart) -> Split {
    let mut s = ReasoningSplitter::new(start);
    let mut reasoning = String::new();
    let mut answer = String::new();
    let mut take = |p: Part<'_>| match p {
        Part::Answer(t) => answer.push_str(t),
        Part::Reasoning(t) => reasoning.push_str(t),
    };
    s.push(text, &mut take);
    s.finish(&mut take);
    Split {
        reasoning: (!reasoning.is_empty()).then_some(reasoning),
        answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(opens: bool) -> ThinkingStart {
        if opens {
            ThinkingStart::Open
        } else {
            ThinkingStart::Maybe
        }
    }

    #[test]
    fn an_unfinished_answer_is_continued_after_the_prompt_with_its_thinking_once() {
        let plain = "<|im_start|>assistant\n";
        assert_eq!(continue_prompt(plain, "The sky"), format!("{plain}The sky"));
        assert_eq!(
            continuing_start(&continue_prompt(plain, "The sky")),
            ThinkingStart::Never
        );
        let opened = "<|im_start|>assistant\n<think>\n";
        let thinking = continue_prompt(opened, "<think>\nhmm");
        assert_eq!(thinking, format!("{opened}hmm"));
        assert_eq!(continuing_start(&thinking), ThinkingStart::Open);
        let answered = continue_prompt(opened, "<think>\nhmm\n</think>\n\nA");
        assert_eq!(answered, format!("{opened}hmm\n</think>\n\nA"));
        assert_eq!(continuing_start(&answered), ThinkingStart::Never);
        // An answer without thinking closes the template's open block.
        let closed = continue_prompt(opened, "A");
        assert_eq!(closed, format!("{opened}\n</think>\n\nA"));
        assert_eq!(continuing_start(&closed), ThinkingStart::Never);
    }

    #[test]
    fn a_raw_completion_is_never_split() {
        let got = split("<think>a</think>b", ThinkingStart::Never);
        assert_eq!(
            (got.reasoning, got.answer.as_str()),
            (None, "<think>a</think>b")
        );
    }

    fn pieces(chunks: &[&str], opens: bool) -> (String, String) {
        let mut s = ReasoningSplitter::new(start(opens));
        let (mut r, mut a) = (String::new(), String::new());
        let mut take = |p: Part<'_>| match p {
            Part::Answer(t) => a.push_str(t),
            Part::Reasoning(t) => r.push_str(t),
        };
        for c in chunks {
            s.push(c, &mut take);
        }
        s.finish(&mut take);
        (r, a)
    }

    const CASES: &[(&str, bool, &str, &str)] = &[
        (
            "<think>\nSum it.\n</think>\n\nFOUR",
            false,
            "Sum it.\n",
            "FOUR",
        ),
        ("  <think>a</think>b", false, "a", "b"),
        ("Sum it.</think>FOUR", true, "Sum it.", "FOUR"),
        ("\n<think>\nx</think>y", true, "x", "y"),
        (
            "plain answer <think>not thinking</think>",
            false,
            "",
            "plain answer <think>not thinking</think>",
        ),
        ("  leading space kept", false, "", "  leading space kept"),
        ("<think>cut short insi", false, "cut short insi", ""),
        (
            "<think>partial close </thi",
            false,
            "partial close </thi",
            "",
        ),
        ("<thi", false, "", "<thi"),
        ("<think>\n\n</think>\n\nanswer", false, "", "answer"),
        ("", false, "", ""),
        ("", true, "", ""),
        ("é<think>ü</think>", false, "", "é<think>ü</think>"),
        ("<think>ü</thinkü></think>ö", false, "ü</thinkü>", "ö"),
    ];

    #[test]
    fn whole_text_splits_by_the_rules() {
        for &(text, opens, r, a) in CASES {
            let got = split(text, start(opens));
            assert_eq!(
                (got.reasoning.as_deref().unwrap_or(""), got.answer.as_str()),
                (r, a),
                "{text:?} opens={opens}"
            );
        }
    }

    /// Streamed in pieces cut at every position (two cuts, so a tag split
    /// three ways too), the parts are the whole text's.
    #[test]
    fn any_cut_gives_the_same_parts() {
        for &(text, opens, r, a) in CASES {
            let bounds: Vec<usize> = (0..=text.len())
                .filter(|&i| text.is_char_boundary(i))
                .collect();
            for &i in &bounds {
                for &j in bounds.iter().filter(|&&j| j >= i) {
                    let got = pieces(&[&text[..i], &text[i..j], &text[j..]], opens);
                    assert_eq!(
                        (got.0.as_str(), got.1.as_str()),
                        (r, a),
                        "{text:?} cut at {i},{j}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_splitter_says_where_it_is() {
        let mut s = ReasoningSplitter::new(ThinkingStart::Maybe);
        let mut sink = |_: Part<'_>| {};
        s.push("<think>", &mut sink);
        assert!(s.thought() && s.in_thinking() && !s.answered());
        s.push("x</think>\n", &mut sink);
        assert!(!s.in_thinking() && !s.answered());
        s.push("y", &mut sink);
        assert!(s.answered());
        let mut plain = ReasoningSplitter::new(ThinkingStart::Maybe);
        plain.push("hello", &mut sink);
        assert!(!plain.thought() && plain.answered());
    }

    #[test]
    fn prompts_that_open_thinking() {
        assert!(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
        assert!(!prompt_opens_thinking("<|im_start|>assistant\n"));
        assert!(!prompt_opens_thinking("<think>\n\n</think>\n\n"));
        assert!(prompt_opens_thinking("<think>x</think> then <think>  "));
    }
}
